/* ovh_calls: the tracer overhead micro-benchmark. T threads each open FILE and issue N calls:
 * `pread1` = 1-byte pread at varying offsets, `read4k` = 4 KiB read() (with an lseek back to 0
 * at end of file, counted as a call). Prints one line: "ns_per_call W cpu_ns_per_call C", the
 * wall-clock and thread-CPU nanoseconds per call averaged over threads.
 * The same binary runs without preload, with the tracer disabled and enabled (bench/trace/run.sh),
 * so the difference is the interception cost. Usage: ovh_calls MODE THREADS N FILE */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *file, *mode;
static long ncalls;
static pthread_barrier_t bar;

static double clk(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *worker(void *arg) {
    double *out = arg;
    int fd = open(file, O_RDONLY);
    if (fd < 0) {
        perror(file);
        exit(1);
    }
    off_t size = lseek(fd, 0, SEEK_END);
    lseek(fd, 0, SEEK_SET);
    static __thread char buf[4096];
    int r4 = !strcmp(mode, "read4k");
    long sink = 0;
    pthread_barrier_wait(&bar);
    double t0 = clk(CLOCK_MONOTONIC), c0 = clk(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < ncalls; i++) {
        if (r4) {
            ssize_t n = read(fd, buf, sizeof buf);
            if (n <= 0) {
                lseek(fd, 0, SEEK_SET);
                i++; /* the lseek is a call too */
            }
            sink += n;
        } else {
            sink += pread(fd, buf, 1, (off_t)((i * 4099) % size));
        }
    }
    double t1 = clk(CLOCK_MONOTONIC), c1 = clk(CLOCK_THREAD_CPUTIME_ID);
    close(fd);
    out[0] = (t1 - t0) * 1e9 / (double)ncalls;
    out[1] = (c1 - c0) * 1e9 / (double)ncalls;
    if (sink == -12345)
        printf("unlikely\n");
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: ovh_calls pread1|read4k THREADS N FILE\n");
        return 2;
    }
    mode = argv[1];
    int nt = atoi(argv[2]);
    ncalls = atol(argv[3]);
    file = argv[4];
    if (nt < 1 || nt > 64 || ncalls < 1)
        return 2;
    pthread_t th[64];
    double ns[64][2];
    pthread_barrier_init(&bar, NULL, (unsigned)nt);
    for (int i = 0; i < nt; i++)
        pthread_create(&th[i], NULL, worker, ns[i]);
    double wall = 0, cpu = 0;
    for (int i = 0; i < nt; i++) {
        pthread_join(th[i], NULL);
        wall += ns[i][0];
        cpu += ns[i][1];
    }
    /* Thread CPU time is the robust figure on a shared machine (no time spent runnable). */
    printf("ns_per_call %.2f cpu_ns_per_call %.2f\n", wall / nt, cpu / nt);
    return 0;
}
