/* clock.c: the recording clock and its conversion to epoch microseconds. Wrappers read the TSC
 * (one rdtsc, no vDSO call) when it is safe: the CPU reports an invariant TSC and the kernel
 * itself uses "tsc" as its clocksource, i.e. it found the TSC synchronised across CPUs and
 * stable (SCAFFOLD_TRACE_CLOCK=monotonic forces clock_gettime). The flusher converts ticks to
 * CLOCK_MONOTONIC nanoseconds piecewise-linearly between anchors, pairs (TSC, CLOCK_MONOTONIC)
 * it reads at most every 50 ms: the conversion is exact at every anchor, continuous, monotonic,
 * and needs no calibration delay at start (a short process converts with its start and exit
 * anchors). Epoch time is CLOCK_MONOTONIC plus CLOCK_REALTIME - CLOCK_MONOTONIC read once. */
#include "trace_int.h"

#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int trc_clock_is_tsc;
uint64_t trc_realtime_anchor_ns;

typedef struct {
    uint64_t tsc, ns;
} anchor;

/* Anchors: a is the previous, b the latest; ticks before b convert on the line through a and b,
 * ticks after b extrapolate that line (until the next anchor). Only the flusher (under the flush
 * lock) and the constructor touch them. */
static anchor a0, a, b;
static double slope = 1.0; /* ns per tick */

#if defined(__x86_64__)
static int tsc_invariant(void) {
    uint32_t eax, ebx, ecx, edx;
    __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(0x80000000u), "c"(0));
    if (eax < 0x80000007u)
        return 0;
    __asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(0x80000007u), "c"(0));
    return (edx >> 8) & 1;
}

static int kernel_uses_tsc(void) {
    char buf[32] = {0};
    int fd = (int)syscall(SYS_openat, AT_FDCWD,
                          "/sys/devices/system/clocksource/clocksource0/current_clocksource",
                          O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    long n = syscall(SYS_read, fd, buf, sizeof buf - 1);
    syscall(SYS_close, fd);
    return n >= 3 && !strncmp(buf, "tsc", 3) && (buf[3] == '\n' || buf[3] == 0);
}

static uint64_t rdtsc(void) {
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return (uint64_t)hi << 32 | lo;
}
#endif

/* A (TSC, CLOCK_MONOTONIC) pair read as close together as possible: the TSC read midway between
 * two clock reads, keeping the tightest of three tries. */
static anchor read_anchor(void) {
    anchor best = {trc_clock(), trc_mono_ns()};
#if defined(__x86_64__)
    if (trc_clock_is_tsc) {
        uint64_t width = UINT64_MAX;
        for (int i = 0; i < 3; i++) {
            uint64_t n0 = trc_mono_ns(), t = rdtsc(), n1 = trc_mono_ns();
            if (n1 - n0 < width) {
                width = n1 - n0;
                best.tsc = t;
                best.ns = n0 + (n1 - n0) / 2;
            }
        }
    }
#endif
    return best;
}

void trc_clock_init(int want_tsc) {
    trc_clock_is_tsc = 0;
#if defined(__x86_64__)
    if (want_tsc && tsc_invariant() && kernel_uses_tsc())
        trc_clock_is_tsc = 1;
#else
    (void)want_tsc;
#endif
    struct timespec rt, mo;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mo);
    trc_realtime_anchor_ns = ((uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec) -
                             ((uint64_t)mo.tv_sec * 1000000000ull + (uint64_t)mo.tv_nsec);
    a0 = a = b = read_anchor();
    slope = 1.0;
}

void trc_clock_anchor(void) {
    if (!trc_clock_is_tsc)
        return;
    anchor now = read_anchor();
    /* Too close to the last anchor, the reading jitter (tens of ns) would tilt the line. */
    if (now.ns < b.ns + 50000000ull && b.tsc != a0.tsc)
        return;
    if (now.tsc <= b.tsc || now.ns <= b.ns)
        return;
    a = b;
    b = now;
    slope = (double)(b.ns - a.ns) / (double)(b.tsc - a.tsc);
}

uint64_t trc_clock_ns(uint64_t ticks) {
    if (!trc_clock_is_tsc)
        return ticks;
    if (ticks >= b.tsc)
        return b.ns + (uint64_t)((double)(ticks - b.tsc) * slope);
    if (ticks >= a.tsc)
        return a.ns + (uint64_t)((double)(ticks - a.tsc) * slope);
    return a.ns - (uint64_t)((double)(a.tsc - ticks) * slope);
}

uint64_t trc_clock_dur_ns(uint64_t ticks) {
    return trc_clock_is_tsc ? (uint64_t)((double)ticks * slope) : ticks;
}
