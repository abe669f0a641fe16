/* bench_reader: trace loading speed and memory of the analyzer's reader.
 * usage: bench_reader REPEATS THREADS TRACE... -> prints the median load time, events/s,
 * bytes of column memory per event and peak RSS per event (one line, key=value). */
#include "analyze/trace.h"
#include "core/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: bench_reader REPEATS THREADS TRACE...\n");
        return 2;
    }
    int reps = atoi(argv[1]), threads = atoi(argv[2]);
    if (reps < 1 || reps > 100 || threads < 0) {
        fprintf(stderr, "bench_reader: bad REPEATS/THREADS\n");
        return 2;
    }
    char **files;
    size_t nf;
    if (an_expand_inputs((const char *const *)argv + 3, argc - 3, &files, &nf)) {
        fprintf(stderr, "bench_reader: %s\n", err_msg());
        return 2;
    }
    double times[100], phases[100][3];
    size_t n = 0, colbytes = 0, strbytes = 0;
    an_read_opts o = {.threads = threads};
    for (int r = 0; r < reps; r++) {
        an_trace t;
        if (an_trace_read(&t, files, nf, &o)) {
            fprintf(stderr, "bench_reader: %s\n", err_msg());
            return 1;
        }
        times[r] = t.load_seconds;
        for (int k = 0; k < 3; k++)
            phases[r][k] = t.phase_s[k];
        n = t.n;
        colbytes = t.n * (4 * sizeof(int64_t) + 5 * sizeof(uint32_t) + 2);
        strbytes = t.names.arena_len + t.cats.arena_len + t.files.arena_len + t.hosts.arena_len;
        an_trace_free(&t);
    }
    /* The phases of the run with the median time. */
    double sorted[100];
    memcpy(sorted, times, (size_t)reps * sizeof *times);
    qsort(sorted, (size_t)reps, sizeof *sorted, cmp_d);
    double med = sorted[reps / 2];
    int mi = 0;
    for (int r = 0; r < reps; r++)
        if (times[r] == med)
            mi = r;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("events=%zu files=%zu threads=%d median_s=%.3f events_per_s=%.0f column_bytes_per_event=%.1f "
           "strings_bytes=%zu peak_rss_bytes_per_event=%.1f decode_s=%.3f sort_s=%.3f merge_s=%.3f\n",
           n, nf, threads, med, n / med, (double)colbytes / (double)n, strbytes,
           (double)ru.ru_maxrss * 1024.0 / (double)n, phases[mi][0], phases[mi][1], phases[mi][2]);
    for (size_t i = 0; i < nf; i++)
        free(files[i]);
    free(files);
    return 0;
}
