/* base: the engine's smallest shared helpers (base.h): its thread count, what its team got of
 * the CPUs, and bf16 rounding. */
#include "nn/base.h"

#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int nn_threads(void) {
    int t = omp_get_max_threads();
    return t > NN_MAX_THREADS ? NN_MAX_THREADS : (t < 1 ? 1 : t);
}

void nn_set_threads(int n) {
    omp_set_num_threads(n > 0 ? n : 1);
}

static double clock_s(clockid_t c) {
    struct timespec ts;
    return clock_gettime(c, &ts) ? 0 : (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The calling thread's run-queue wait (/proc/thread-self/schedstat: run ns, wait ns, slices). */
static double thread_wait_s(void) {
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    if (!f)
        return -1;
    unsigned long long run, wait;
    const int ok = fscanf(f, "%llu %llu", &run, &wait) == 2;
    fclose(f);
    return ok ? 1e-9 * (double)wait : -1;
}

static double thread_cpu_s(void) {
    return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

/* f() summed over the threads of an nn_threads() team, each calling it itself; -1 when one of
 * them returns a negative value (not known). */
static double team_sum(double (*f)(void)) {
    double s = 0;
    int bad = 0;
#pragma omp parallel num_threads(nn_threads()) reduction(+ : s) reduction(| : bad)
    {
        const double v = f();
        bad |= v < 0;
        s += v < 0 ? 0 : v;
    }
    return bad ? -1 : s;
}

double nn_team_wait_seconds(void) {
    return team_sum(thread_wait_s);
}

double nn_team_cpu_seconds(void) {
#ifdef _OPENMP
    return team_sum(thread_cpu_s);
#else
    return clock_s(CLOCK_PROCESS_CPUTIME_ID);
#endif
}
/* ---- bf16 ------------------------------------------------------------------------------------ */

NN_WIDE void nn_round_bf16_span(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = nn_bf16_round(src[i]);
}

NN_WIDE void nn_bf16_lo_span(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = src[i] - nn_bf16_round(src[i]);
}

static NN_WIDE void narrow_span(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        dst[i] = (uint16_t)(u >> 16);
    }
}

static NN_WIDE void widen_span(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, sizeof u);
    }
}

enum { BF16_ROUND, BF16_LO, BF16_NARROW, BF16_WIDEN };

/* One of the bf16 element passes over n values, in pieces of 16 Ki values shared among the
 * threads, one NN_WIDE call each (the outlined loop body itself is built for the baseline). */
static void bf16_pass(int op, void *dst, const void *src, size_t n) {
    enum { PIECE = 1 << 14 };
    const long np = (long)((n + PIECE - 1) / PIECE);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < np; i++) {
        const size_t o = (size_t)i * PIECE, len = n - o < PIECE ? n - o : PIECE;
        if (op == BF16_ROUND)
            nn_round_bf16_span((float *)dst + o, (const float *)src + o, len);
        else if (op == BF16_LO)
            nn_bf16_lo_span((float *)dst + o, (const float *)src + o, len);
        else if (op == BF16_NARROW)
            narrow_span((uint16_t *)dst + o, (const float *)src + o, len);
        else
            widen_span((float *)dst + o, (const uint16_t *)src + o, len);
    }
}

void nn_round_bf16_to(float *dst, const float *src, size_t n) {
    bf16_pass(BF16_ROUND, dst, src, n);
}

void nn_round_bf16(float *x, size_t n) {
    bf16_pass(BF16_ROUND, x, x, n);
}

void nn_bf16_lo(float *dst, const float *src, size_t n) {
    bf16_pass(BF16_LO, dst, src, n);
}

void nn_bf16_narrow(uint16_t *dst, const float *src, size_t n) {
    bf16_pass(BF16_NARROW, dst, src, n);
}

void nn_bf16_widen(float *dst, const uint16_t *src, size_t n) {
    bf16_pass(BF16_WIDEN, dst, src, n);
}
