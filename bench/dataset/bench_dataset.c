/* Dataset benchmarks.
 *
 *   bench_dataset gen REPS CONFIG-ARGS...
 *     Generation throughput (dataset_prepare with datagen_from_scratch, i.e. render + write every
 *     shard file + one syncfs before publishing) against the baseline "plain sequential write":
 *     the same number of bytes written with 4 MiB write() calls into one file, then fsync.
 *     Both measured REPS times, interleaved, in the same run; medians and their ratio printed.
 *
 *   bench_dataset load DIR REPS DELAY_FACTOR CONFIG-ARGS...
 *     Loader throughput with 0/1/2/4 worker threads while a fixed per-sample compute delay
 *     (a sleep, as DLIO emulates an accelerator) stands for training: the delay is DELAY_FACTOR
 *     times the measured per-sample read time (so it exceeds the read time when > 1). Reports
 *     DLIO's accelerator utilisation AU = compute time / wall time per epoch (median of REPS
 *     epochs) and the epoch time against the baseline W = 0 (reads on the training thread). */
#include "core/config.h"
#include "core/err.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "dataset/dataset.h"
#include "mpi/dist.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int load_cfg(scaffold_config *c, int argc, char **argv) {
    config_defaults(c);
    char *cargv[64];
    int n = 0;
    cargv[n++] = "bench_dataset";
    for (int i = 0; i < argc && n < 63; i++)
        cargv[n++] = argv[i];
    int rc = config_parse_args(c, n, cargv, 1);
    if (rc == 0)
        rc = config_finalize(c);
    char abs[FS_PATH_MAX];
    if (rc == 0 && (rc = fs_abspath(c->dataset_dir, abs, sizeof abs)) == 0)
        snprintf(c->dataset_dir, sizeof c->dataset_dir, "%s", abs);
    if (rc == 0 && (rc = fs_abspath(c->fract_base_dir, abs, sizeof abs)) == 0)
        snprintf(c->fract_base_dir, sizeof c->fract_base_dir, "%s", abs);
    return rc;
}

/* The baseline: `bytes` written sequentially into one file in 4 MiB writes, then fsync. */
static double plain_write(const char *path, long long bytes) {
    size_t chunk = 4 << 20;
    char *buf = malloc(chunk);
    memset(buf, 0x5a, chunk);
    double t0 = time_now();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    long long left = bytes;
    while (fd >= 0 && left > 0) {
        size_t k = left < (long long)chunk ? (size_t)left : chunk;
        ssize_t w = write(fd, buf, k);
        if (w <= 0)
            break;
        left -= w;
    }
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    double t = time_now() - t0;
    unlink(path);
    free(buf);
    return t;
}

static int bench_gen(int reps, int argc, char **argv) {
    dist_world w;
    dist_init(&w, NULL, NULL);
    log_set_rank(w.rank);
    log_set_verbosity(-1);
    scaffold_config c;
    int rc = load_cfg(&c, argc, argv);
    if (rc) {
        fprintf(stderr, "bench gen: %s\n", err_msg());
        return 2;
    }
    c.datagen_from_scratch = 1;
    double tg[32], tb[32];
    long long bytes = 0;
    if (reps > 32)
        reps = 32;
    for (int r = 0; r < reps; r++) {
        char dir[FS_PATH_MAX];
        dataset_prep_info info;
        ds_spec sp = ds_spec_of(&c);
        rc = dataset_prepare(&sp, &w, dir, sizeof dir, &info);
        if (rc) {
            fprintf(stderr, "bench gen: %s\n", err_msg());
            return 1;
        }
        tg[r] = info.seconds;
        bytes = info.bytes;
        if (w.rank == 0)
            fs_rm_rf(dir); /* keep the disk footprint of one dataset */
        dist_barrier(&w);
        /* Baseline on every rank: each writes its share of the bytes into its own file. */
        char p[FS_PATH_MAX];
        snprintf(p, sizeof p, "%s/plain_write.%d.bin", c.dataset_dir, w.rank);
        dist_barrier(&w);
        double t = plain_write(p, bytes / w.size);
        tb[r] = dist_max_double(&w, t);
    }
    if (w.rank == 0) {
        double mg = median(tg, reps), mb = median(tb, reps);
        printf("dataset generation, %d^3 volumes, %d ranks, %.1f MB, median of %d:\n", c.vol_size,
               w.size, (double)bytes / 1e6, reps);
        printf("  baseline plain sequential write+fsync: %8.1f MB/s (%.3f s)\n",
               (double)bytes / 1e6 / mb, mb);
        printf("  scaffold generate (render+write+sync): %8.1f MB/s (%.3f s)\n",
               (double)bytes / 1e6 / mg, mg);
        printf("  ratio generate / plain write: %.2fx (target >= 0.70x)\n", mb / mg);
    }
    dist_finalize(&w);
    return 0;
}

static void sleep_until(double deadline) {
    for (;;) {
        double left = deadline - time_now();
        if (left <= 0)
            return;
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

static int bench_load(const char *dir, int reps, double factor, int argc, char **argv) {
    dist_world w;
    dist_init(&w, NULL, NULL);
    log_set_rank(w.rank);
    scaffold_config c;
    int rc = load_cfg(&c, argc, argv);
    dataset *ds = NULL;
    ds_spec sp = ds_spec_of(&c);
    if (rc == 0)
        rc = dataset_open_world(dir, &sp, &w, &ds);
    if (rc) {
        fprintf(stderr, "bench load: %s\n", err_msg());
        return 1;
    }
    int B = c.local_batch_size;
    ds_source src = dataset_file_source(ds);
    /* Per-sample read time (W = 0, no compute), median over a few epochs after a warm-up. */
    double tr[16];
    int nrep = reps < 16 ? reps : 16;
    int64_t nsamples = 0;
    for (int r = -1; r < nrep; r++) {
        ds_loader_opts o = {src, DS_TRAIN, ds->n[DS_TRAIN], B, w.size, w.rank, 0, 0, 0};
        ds_loader *l;
        ds_loader_create(&l, &o);
        ds_loader_start_epoch(l, r + 2);
        int cnt;
        const float *bv;
        const uint16_t *bm;
        double t0 = time_now();
        nsamples = 0;
        while (ds_loader_next_ref(l, &bv, &bm, &cnt) == 1)
            nsamples += cnt;
        if (r >= 0)
            tr[r] = (time_now() - t0) / (double)nsamples;
        ds_loader_destroy(l);
    }
    double read_s = dist_max_double(&w, median(tr, nrep));
    double delay = factor * read_s;
    if (w.rank == 0)
        printf("loader, %lld training samples of %.2f MB on %d rank(s), batch %d: read %.3f ms/"
               "sample, compute delay %.3f ms/sample (%.1fx the read), median of %d epochs:\n",
               (long long)ds->n[DS_TRAIN], (double)(ds->vol_elems * 4 + ds->mask_elems * 2) / 1e6,
               w.size, B, read_s * 1e3, delay * 1e3, factor, reps);
    const int workers[] = {0, 1, 2, 4};
    double base_epoch = 0;
    for (int wi = 0; wi < 4; wi++) {
        ds_loader_opts o = {src, DS_TRAIN, ds->n[DS_TRAIN], B, w.size, w.rank, 0, workers[wi], 0};
        ds_loader *l;
        ds_loader_create(&l, &o);
        double au[32], ep[32];
        int n = reps < 32 ? reps : 32;
        for (int r = 0; r < n; r++) {
            ds_loader_start_epoch(l, r + 1);
            int cnt;
            const float *bv;
            const uint16_t *bm;
            double compute = 0, t0 = time_now();
            /* Batches are used in place (next_ref), as the training loop does. */
            while (ds_loader_next_ref(l, &bv, &bm, &cnt) == 1) {
                double c0 = time_now();
                sleep_until(c0 + delay * cnt); /* the "accelerator" works on the batch */
                compute += time_now() - c0;
            }
            double wall = time_now() - t0;
            au[r] = dist_sum_double(&w, compute / wall) / w.size; /* DLIO: mean over ranks */
            ep[r] = dist_max_double(&w, wall);
        }
        ds_loader_destroy(l);
        double mau = median(au, n), mep = median(ep, n);
        if (wi == 0)
            base_epoch = mep;
        if (w.rank == 0)
            printf("  W=%d%s: AU %5.1f%%  epoch %.3f s  speed-up vs W=0 %.2fx\n", workers[wi],
                   wi == 0 ? " (baseline, reads on the training thread)" : "", 100 * mau, mep,
                   base_epoch / mep);
    }
    dataset_close(ds);
    dist_finalize(&w);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "gen"))
        return bench_gen(atoi(argv[2]), argc - 3, argv + 3);
    if (argc >= 6 && !strcmp(argv[1], "load"))
        return bench_load(argv[2], atoi(argv[3]), atof(argv[4]), argc - 5, argv + 5);
    fprintf(stderr, "usage: bench_dataset gen REPS CONFIG-ARGS... | load DIR REPS FACTOR "
                    "CONFIG-ARGS...\n");
    return 2;
}
