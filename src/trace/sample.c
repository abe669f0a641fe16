/* sample.c: the optional system-metrics sampler (SCAFFOLD_TRACE_METRICS_MS). The flusher thread
 * takes a sample every interval and at the final flush: this process's CPU time (user, system)
 * and context switches (getrusage), resident memory (/proc/self/statm), bytes read and written
 * (/proc/self/io: storage bytes and all bytes through read/write calls), the time it waited for
 * a CPU (/proc/self/schedstat, main thread), and the node's load
 * and memory (/proc/loadavg, /proc/meminfo). Each sample is two counter lines ("ph":2, cat
 * "sys", type 7 as dftracer 2.x's telemetry writes them): "proc" and "node". The /proc files
 * stay open and are re-read with pread at offset 0, so a sample costs a handful of system calls
 * and no allocation (docs/trace.md gives the measured cost). */
#include "trace_int.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static int fd_statm = -1, fd_io = -1, fd_load = -1, fd_mem = -1, fd_sched = -1;
static pid_t fds_pid;
static long page_kb = 4;

static int open_proc(const char *path) {
    return trc_move_high((int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC));
}

/* (Re)opens the /proc files once per process (a fork child has its own /proc/self). */
static void sample_open(void) {
    if (fds_pid == trc_g.pid && fd_statm >= 0)
        return;
    int *fds[5] = {&fd_statm, &fd_io, &fd_load, &fd_mem, &fd_sched};
    for (int i = 0; i < 5; i++)
        if (*fds[i] >= 0) {
            syscall(SYS_close, *fds[i]);
            *fds[i] = -1;
        }
    fd_statm = open_proc("/proc/self/statm");
    fd_io = open_proc("/proc/self/io");
    fd_load = open_proc("/proc/loadavg");
    fd_mem = open_proc("/proc/meminfo");
    fd_sched = open_proc("/proc/self/schedstat");
    long ps = sysconf(_SC_PAGESIZE);
    page_kb = ps > 0 ? ps / 1024 : 4;
    fds_pid = trc_g.pid;
}

static long read_proc(int fd, char *buf, size_t cap) {
    if (fd < 0)
        return -1;
    long n = syscall(SYS_pread64, fd, buf, cap - 1, 0);
    if (n < 0)
        return -1;
    buf[n] = 0;
    return n;
}

/* The number after "key" in a "key: value" text, or -1. */
static int64_t field(const char *text, const char *key) {
    const char *p = strstr(text, key);
    if (!p)
        return -1;
    p += strlen(key);
    while (*p == ' ' || *p == ':' || *p == '\t')
        p++;
    return strtoll(p, NULL, 10);
}

static void put_kv(trc_buf *b, const char *key, int64_t v) {
    if (v < 0)
        return;
    trc_buf_str(b, ",\"");
    trc_buf_str(b, key);
    trc_buf_str(b, "\":");
    trc_buf_i64(b, v);
}

static void line_head(trc_buf *b, const char *name, uint64_t ts_us) {
    int v2 = trc_g.cfg.format == 2;
    trc_buf_str(b, "{\"name\":\"");
    trc_buf_str(b, name);
    trc_buf_str(b, v2 ? "\",\"cat\":\"sys\",\"type\":" TRC_TYPE_PSUTIL ",\"pid\":"
                      : "\",\"cat\":\"sys\",\"pid\":");
    trc_buf_i64(b, trc_g.pid);
    trc_buf_str(b, ",\"tid\":0,\"ts\":");
    trc_buf_u64(b, ts_us);
    trc_buf_str(b, v2 ? ",\"ph\":2,\"args\":{\"hhash\":\"" : ",\"ph\":\"C\",\"args\":{\"hhash\":\"");
    trc_buf_str(b, trc_g.hhash);
    trc_buf_str(b, "\"");
}

void trc_sample(trc_buf *b) {
    sample_open();
    uint64_t ts = (trc_mono_ns() + trc_realtime_anchor_ns) / 1000;
    struct rusage ru;
    char text[1024];
    line_head(b, "proc", ts);
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        put_kv(b, "cpu_user_us", (int64_t)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec);
        put_kv(b, "cpu_sys_us", (int64_t)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec);
        put_kv(b, "vcsw", ru.ru_nvcsw);
        put_kv(b, "ivcsw", ru.ru_nivcsw);
    }
    /* Time runnable but not running (the main thread's run queue delay): a CPU-bound process on
     * a busy node wants a core even while it does not get one. */
    if (read_proc(fd_sched, text, sizeof text) > 0) {
        char *p = strchr(text, ' ');
        if (p)
            put_kv(b, "run_delay_us", strtoll(p + 1, NULL, 10) / 1000);
    }
    if (read_proc(fd_statm, text, sizeof text) > 0) {
        char *p = strchr(text, ' '); /* size resident ... (pages) */
        if (p)
            put_kv(b, "rss_kb", strtoll(p + 1, NULL, 10) * page_kb);
    }
    if (read_proc(fd_io, text, sizeof text) > 0) {
        put_kv(b, "read_bytes", field(text, "\nread_bytes"));
        put_kv(b, "write_bytes", field(text, "\nwrite_bytes"));
        put_kv(b, "rchar", field(text, "rchar"));
        put_kv(b, "wchar", field(text, "wchar"));
    }
    trc_buf_str(b, "}}\n");
    line_head(b, "node", ts);
    if (read_proc(fd_load, text, sizeof text) > 0)
        put_kv(b, "load1_milli", (int64_t)(strtod(text, NULL) * 1000 + 0.5));
    if (read_proc(fd_mem, text, sizeof text) > 0) {
        put_kv(b, "mem_total_kb", field(text, "MemTotal"));
        put_kv(b, "mem_avail_kb", field(text, "MemAvailable"));
    }
    trc_buf_str(b, "}}\n");
    trc_used |= TRC_USED_SYS;
}
