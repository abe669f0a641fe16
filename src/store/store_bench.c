/* store_bench: the `scaffold store-bench` measurements (see store_bench.h for the definitions).
 *
 * Each rank's shard holds self-describing rows (word w of global row g = mix64(g, w)), every
 * timed run ends by checking the rows of its last call, and the baseline (local memcpy of random
 * rows) runs on all ranks at once, like the reads, so both see the same memory-bus contention. */
#include "store/store_bench.h"

#include "core/err.h"
#include "core/fsutil.h"
#include "core/mem.h"
#include "core/rng.h"
#include "mpi/dist.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void store_bench_opts_default(store_bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->nmethods = 2;
    o->methods[0] = STORE_RMA;
    o->methods[1] = STORE_COLL;
    const int64_t rows[4] = {3136, 12544, 204800, 1048576};
    o->nrow_bytes = 4;
    memcpy(o->row_bytes, rows, sizeof rows);
    o->nbatches = 2;
    o->batches[0] = 1;
    o->batches[1] = 128;
    o->rows_per_rank = 4096;
    o->shard_bytes = (int64_t)256 << 20;
    o->nget = 4000;
    o->get_bytes = (int64_t)256 << 20;
    o->repeats = 5;
    o->threads = 1;
    o->seed = 1;
}

static uint64_t word_of(int64_t g, int64_t w) {
    return rng_mix64((uint64_t)g * 0x100000001B3ULL + (uint64_t)w + 1);
}

static void fill_row(char *row, int64_t rb, int64_t g) {
    int64_t nw = rb / 8;
    for (int64_t w = 0; w < nw; w++) {
        uint64_t x = word_of(g, w);
        memcpy(row + w * 8, &x, 8);
    }
    for (int64_t b = nw * 8; b < rb; b++)
        row[b] = (char)(g + b);
}

static int row_ok(const char *row, int64_t rb, int64_t g) {
    int64_t nw = rb / 8;
    for (int64_t w = 0; w < nw; w++) {
        uint64_t x;
        memcpy(&x, row + w * 8, 8);
        if (x != word_of(g, w))
            return 0;
    }
    for (int64_t b = nw * 8; b < rb; b++)
        if (row[b] != (char)(g + b))
            return 0;
    return 1;
}

typedef struct result {
    const char *what; /* "rma", "coll", "memcpy" */
    int64_t row_bytes, batch, nget;
    int threads;
    double us_row, mbs; /* medians over repeats */
    int prof;           /* the next three are set */
    double post_us, wait_us, copy_us; /* per row, mean over repeats and ranks */
} result;

static void store_bench_bytes(double b, char *buf, size_t n) {
    static const char *const u[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int k = 0;
    while (b >= 1024 && k < 5)
        b /= 1024, k++;
    snprintf(buf, n, k ? "%.4g %s" : "%.0f %s", b, u[k]);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One reader's share of a timed run. */
typedef struct reader {
    store *s;
    int var;
    int64_t batch, rb, n; /* rows to read, a multiple of batch */
    const int64_t *idx;
    char *dst;
    int rc;
    char msg[ERR_MSG_MAX];
} reader;

static int read_all(store *s, int var, const int64_t *idx, int64_t n, int64_t batch, char *dst,
                    int64_t rb) {
    for (int64_t i = 0; i < n; i += batch) {
        int rc = batch == 1 ? store_get(s, var, idx[i], 1, dst, (size_t)rb)
                            : store_get_batch(s, var, idx + i, batch, dst, (size_t)(batch * rb));
        if (rc)
            return rc;
    }
    return 0;
}

static void *reader_main(void *p) {
    reader *r = p;
    r->rc = read_all(r->s, r->var, r->idx, r->n, r->batch, r->dst, r->rb);
    if (r->rc)
        snprintf(r->msg, sizeof r->msg, "%s", err_msg());
    return NULL;
}

/* Draws n indices: uniform over all rows, or over other ranks' rows only. */
static void draw(int64_t *idx, int64_t n, const dist_world *w, int64_t per_rank, int remote,
                 uint64_t seed, uint64_t stream) {
    rng r = rng_make(seed, RNG_TEST, (uint64_t)w->rank, stream);
    int64_t total = per_rank * w->size;
    for (int64_t i = 0; i < n; i++) {
        if (remote && w->size > 1) {
            int64_t k = (int64_t)rng_below(&r, (uint64_t)(total - per_rank));
            int64_t mine = per_rank * w->rank;
            idx[i] = k < mine ? k : k + per_rank;
        } else {
            idx[i] = (int64_t)rng_below(&r, (uint64_t)total);
        }
    }
}

/* One configuration of one row size: a method's store (NULL = the memcpy baseline), a batch
 * size, a thread count, and the number of rows each rank reads per timed run. */
typedef struct config {
    store *s;
    int var;
    store_method m;
    int64_t batch, nget;
    int threads;
    double us[64], mbs[64];
    double prof_ns[3]; /* post, wait, copy: sums over timed runs (this rank) */
    double prof_rows;
} config;

/* One timed run of configuration c (collective). */
static int timed_run(const store_bench_opts *o, const dist_world *w, config *c, int64_t rb,
                     int64_t per_rank, const char *base, int64_t *idx, char *dst, int rep,
                     uint64_t stream) {
    const int64_t batch = c->batch, nget = c->nget;
    const int threads = c->threads;
    draw(idx, nget, w, per_rank, o->remote_only, o->seed, stream * 1000 + (uint64_t)rep);
    const int64_t share = nget / threads; /* a multiple of batch by construction */
    int rc = 0;
    /* Warm-up: one call, not timed. */
    if (c->s)
        rc = read_all(c->s, c->var, idx, batch, batch, dst, rb);
    if ((rc = dist_agree(w, rc)))
        return rc;
    store_profile pr;
    if (c->s && o->profile)
        store_get_profile(c->s, c->var, &pr, 1); /* drop the warm-up */
    MPI_Barrier(w->comm);
    double t0 = MPI_Wtime();
    if (!c->s) {
        /* Baseline: memcpy of as many random rows of the local shard into the same buffer. */
        for (int64_t i = 0; i < nget; i += batch)
            for (int64_t j = 0; j < batch; j++)
                memcpy(dst + j * rb, base + (idx[i + j] % per_rank) * rb, (size_t)rb);
    } else if (threads == 1) {
        rc = read_all(c->s, c->var, idx, nget, batch, dst, rb);
    } else {
        reader rd[64];
        pthread_t th[64];
        for (int t = 0; t < threads; t++) {
            rd[t] = (reader){.s = c->s, .var = c->var, .batch = batch, .rb = rb, .n = share,
                             .idx = idx + t * share, .dst = dst + t * batch * rb};
            pthread_create(&th[t], NULL, reader_main, &rd[t]);
        }
        for (int t = 0; t < threads; t++) {
            pthread_join(th[t], NULL);
            if (rd[t].rc && !rc)
                rc = err_set(rd[t].rc, "%s", rd[t].msg);
        }
    }
    double dt = MPI_Wtime() - t0;
    if (c->s && o->profile && store_get_profile(c->s, c->var, &pr, 1) == 0) {
        c->prof_ns[0] += (double)pr.post_ns;
        c->prof_ns[1] += (double)pr.wait_ns;
        c->prof_ns[2] += (double)pr.copy_ns;
        c->prof_rows += (double)pr.rows;
    }
    /* Check the rows of the last call of (each thread's share of) the run. */
    if (!rc && c->s)
        for (int t = 0; t < threads && !rc; t++) {
            const int64_t last = t * share + share - batch;
            for (int64_t j = 0; j < batch && !rc; j++)
                if (!row_ok(dst + (t * batch + j) * rb, rb, idx[last + j]))
                    rc = err_set(ERR_INTERNAL,
                                 "%s read wrong data for global row %lld (%lld-byte "
                                 "rows, batch %lld)",
                                 store_method_name(c->m), (long long)idx[last + j], (long long)rb,
                                 (long long)batch);
        }
    if ((rc = dist_agree(w, rc)))
        return rc;
    double mean = dist_sum_double(w, dt) / w->size;
    c->us[rep] = 1e6 * mean / (double)nget;
    c->mbs[rep] = (double)rb * (double)nget / mean / 1e6;
    return 0;
}

/* Rows in each rank's shard for row size rb: --shard-mb worth, at most --rows-per-rank, at
 * least one. */
static int64_t rows_per_rank(const store_bench_opts *o, int64_t rb) {
    int64_t n = o->shard_bytes / rb;
    if (n > o->rows_per_rank)
        n = o->rows_per_rank;
    return n < 1 ? 1 : n;
}

/* Every configuration of one row size. The repeats are interleaved (run 1 of every
 * configuration, then run 2...), so a slow spell of a shared machine hits all configurations
 * alike instead of skewing one ratio. */
static int bench_row_size(const store_bench_opts *o, const dist_world *w, int ri, result *res,
                          int *nres) {
    const int64_t rb = o->row_bytes[ri];
    const int64_t per_rank = rows_per_rank(o, rb);
    int64_t maxbatch = 1;
    for (int b = 0; b < o->nbatches; b++)
        if (o->batches[b] > maxbatch)
            maxbatch = o->batches[b];
    const int64_t dst_rows = maxbatch * o->threads;
    /* Each buffer is named when it cannot be had, with the options that size it (check_opts
     * refused, before anything ran, what exceeds the node's memory). */
    const double shard_b = (double)per_rank * (double)rb, dst_b = (double)dst_rows * (double)rb;
    char gb[32];
    int rc = 0;
    char *shard = malloc((size_t)shard_b), *dst = shard ? malloc((size_t)dst_b) : NULL;
    if (!shard) {
        store_bench_bytes(shard_b, gb, sizeof gb);
        rc = err_set(ERR_NOMEM, "out of memory for the shard: %s (%lld rows of %lld bytes); lower "
                     "--shard-mb, --rows-per-rank or --row-bytes", gb, (long long)per_rank,
                     (long long)rb);
    } else if (!dst) {
        store_bench_bytes(dst_b, gb, sizeof gb);
        rc = err_set(ERR_NOMEM, "out of memory for the batch buffer: %s (%lld rows = the largest "
                     "--batch %lld x --threads %d, of %lld bytes); lower --batch or --row-bytes",
                     gb, (long long)dst_rows, (long long)maxbatch, o->threads, (long long)rb);
    }
    int64_t *idx = malloc((size_t)(o->nget + maxbatch * o->threads) * sizeof *idx);
    const int ncfg = (o->nmethods + 1) * o->nbatches;
    config *cfg = calloc((size_t)ncfg, sizeof *cfg);
    store *stores[2] = {NULL, NULL};
    if (rc == 0 && (!idx || !cfg))
        rc = err_set(ERR_NOMEM, "out of memory for %lld row indices", (long long)o->nget);
    if (!rc) {
        for (int64_t i = 0; i < per_rank; i++)
            fill_row(shard + i * rb, rb, per_rank * w->rank + i);
        memset(dst, 0, (size_t)(dst_rows * rb));
    }
    rc = dist_agree(w, rc);
    int nc = 0;
    for (int mi = -1; mi < o->nmethods && !rc; mi++) {
        store *s = NULL;
        int var = -1;
        if (mi >= 0) {
            store_opts so;
            store_opts_default(&so);
            so.method = o->methods[mi];
            if (o->coll_max_bytes)
                so.coll_max_bytes = o->coll_max_bytes;
            so.profile = o->profile;
            rc = store_create(&stores[mi], w->comm, &so);
            if (!rc)
                rc = store_add(stores[mi], "bench", STORE_BYTE, rb, per_rank, shard, &var);
            s = stores[mi];
        }
        for (int b = 0; b < o->nbatches && !rc; b++) {
            config *c = &cfg[nc++];
            c->s = s;
            c->var = var;
            c->m = mi >= 0 ? o->methods[mi] : STORE_RMA;
            c->batch = o->batches[b];
            /* Threads only for rma (coll is collective: one thread per rank). */
            c->threads = (s && c->m == STORE_RMA) ? o->threads : 1;
            int64_t nget = o->nget;
            if (nget > o->get_bytes / rb)
                nget = o->get_bytes / rb;
            nget = (nget / (c->batch * c->threads)) * c->batch * c->threads;
            if (nget < c->batch * c->threads)
                nget = c->batch * c->threads;
            c->nget = nget;
        }
    }
    const int reps = o->repeats;
    for (int rep = 0; rep < reps && !rc; rep++)
        for (int k = 0; k < nc && !rc; k++)
            rc = timed_run(o, w, &cfg[k], rb, per_rank, shard, idx, dst, rep,
                           (uint64_t)(ri * 64 + k));
    for (int k = 0; k < nc && !rc; k++) {
        config *c = &cfg[k];
        result *r = &res[(*nres)++];
        *r = (result){.what = c->s ? store_method_name(c->m) : "memcpy", .row_bytes = rb,
                      .batch = c->batch, .nget = c->nget, .threads = c->threads,
                      .us_row = median(c->us, reps), .mbs = median(c->mbs, reps)};
        /* Profile: mean over ranks of each rank's ns per row read (collective on every k). */
        double per[3];
        for (int i = 0; i < 3; i++)
            per[i] = dist_sum_double(w, c->prof_rows > 0 ? c->prof_ns[i] / c->prof_rows : 0) /
                     w->size / 1e3;
        if (c->s && o->profile) {
            r->prof = 1;
            r->post_us = per[0];
            r->wait_us = per[1];
            r->copy_us = per[2];
        }
    }
    for (int mi = 0; mi < 2; mi++) {
        int frc = store_free(&stores[mi]);
        if (!rc)
            rc = frc;
    }
    MEM_FREE(cfg, shard, dst, idx);
    return rc;
}

static const result *find(const result *r, int n, const char *what, int64_t rb, int64_t batch) {
    for (int i = 0; i < n; i++)
        if (!strcmp(r[i].what, what) && r[i].row_bytes == rb && (batch < 0 || r[i].batch == batch))
            return &r[i];
    return NULL;
}

static void print_table(FILE *out, const result *r, int n) {
    int prof = 0;
    for (int i = 0; i < n; i++)
        prof |= r[i].prof;
    fprintf(out, "%-7s %10s %6s %4s %6s %10s %11s %9s %9s", "method", "row_bytes", "batch", "thr",
            "rows", "us/row", "MB/s/rank", "vs_get", "vs_memcpy");
    fprintf(out, prof ? " %8s %8s %8s\n" : "\n", "post", "wait", "copy");
    for (int i = 0; i < n; i++) {
        const result *g = find(r, n, r[i].what, r[i].row_bytes, 1);
        const result *mc = find(r, n, "memcpy", r[i].row_bytes, r[i].batch);
        char vg[32] = "-", vm[32] = "-";
        if (g && strcmp(r[i].what, "memcpy"))
            snprintf(vg, sizeof vg, "%.2fx", g->us_row / r[i].us_row);
        if (mc && strcmp(r[i].what, "memcpy"))
            snprintf(vm, sizeof vm, "%.0f%%", 100.0 * r[i].mbs / mc->mbs);
        fprintf(out, "%-7s %10lld %6lld %4d %6lld %10.3f %11.1f %9s %9s", r[i].what,
                (long long)r[i].row_bytes, (long long)r[i].batch, r[i].threads,
                (long long)r[i].nget, r[i].us_row, r[i].mbs, vg, vm);
        if (r[i].prof)
            fprintf(out, " %8.3f %8.3f %8.3f", r[i].post_us, r[i].wait_us, r[i].copy_us);
        fprintf(out, "\n");
    }
}

static void write_csv(FILE *f, const result *r, int n, int ranks) {
    fprintf(f, "method,ranks,row_bytes,batch,threads,rows_per_run,us_per_row,mb_per_s_rank,"
               "speedup_vs_get,fraction_of_memcpy,post_us_per_row,wait_us_per_row,"
               "copy_us_per_row\n");
    for (int i = 0; i < n; i++) {
        const result *g = find(r, n, r[i].what, r[i].row_bytes, 1);
        const result *mc = find(r, n, "memcpy", r[i].row_bytes, r[i].batch);
        int base = !strcmp(r[i].what, "memcpy");
        /* rates and ratios with significant digits, not fixed decimals: a slow run (MPICH
         * polling on oversubscribed cores: 0.19 MB/s against memcpy's GB/s) must not print 0 */
        fprintf(f, "%s,%d,%lld,%lld,%d,%lld,%.4f,%.6g,", r[i].what, ranks,
                (long long)r[i].row_bytes, (long long)r[i].batch, r[i].threads,
                (long long)r[i].nget, r[i].us_row, r[i].mbs);
        if (g && !base)
            fprintf(f, "%.6g,", g->us_row / r[i].us_row);
        else
            fprintf(f, ",");
        if (mc && !base)
            fprintf(f, "%.6g,", r[i].mbs / mc->mbs);
        else
            fprintf(f, ",");
        if (r[i].prof)
            fprintf(f, "%.4f,%.4f,%.4f\n", r[i].post_us, r[i].wait_us, r[i].copy_us);
        else
            fprintf(f, ",,\n");
    }
}

static int check_opts(const store_bench_opts *o) {
    if (o->nmethods < 1 || o->nrow_bytes < 1 || o->nbatches < 1)
        return err_set(ERR_USAGE, "empty --method, --row-bytes or --batch list");
    for (int i = 0; i < o->nrow_bytes; i++)
        if (o->row_bytes[i] < 1)
            return err_set(ERR_USAGE, "--row-bytes values must be >= 1");
    for (int i = 0; i < o->nbatches; i++)
        if (o->batches[i] < 1 || o->batches[i] > (1 << 20))
            return err_set(ERR_USAGE, "--batch values must be 1..1048576");
    if (o->rows_per_rank < 1 || o->shard_bytes < 1 || o->nget < 1 || o->get_bytes < 1)
        return err_set(ERR_USAGE, "--rows-per-rank, --shard-mb, --nget and "
                                  "--get-mb must be >= 1");
    if (o->repeats < 1 || o->repeats > 63)
        return err_set(ERR_USAGE, "--repeats must be 1..63");
    if (o->threads < 1 || o->threads > 64)
        return err_set(ERR_USAGE, "--threads must be 1..64");
    if (o->coll_max_bytes < 0)
        return err_set(ERR_USAGE, "--coll-max-bytes must be >= 1");
    /* Buffers larger than the node's memory can never be had (and malloc may grant them under
     * overcommit, the first touch then killing the process): the batch buffer (the largest
     * --batch x --threads rows) grows first, e.g. --row-bytes 4g x --batch 128 = 512 GiB. */
    const double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    int64_t maxbatch = 1;
    for (int b = 0; b < o->nbatches; b++)
        maxbatch = o->batches[b] > maxbatch ? o->batches[b] : maxbatch;
    for (int i = 0; i < o->nrow_bytes && phys > 0; i++) {
        const int64_t rb = o->row_bytes[i], per_rank = rows_per_rank(o, rb);
        const double dst_b = (double)maxbatch * o->threads * (double)rb;
        char need[32], mem[32];
        store_bench_bytes(phys, mem, sizeof mem);
        if (dst_b > phys) {
            store_bench_bytes(dst_b, need, sizeof need);
            return err_set(ERR_USAGE, "the batch buffer needs %s (the largest --batch %lld x "
                           "--threads %d rows of --row-bytes %lld), more than this node's %s: "
                           "lower --batch or --row-bytes", need, (long long)maxbatch, o->threads,
                           (long long)rb, mem);
        }
        if ((double)per_rank * (double)rb > phys) {
            store_bench_bytes((double)per_rank * (double)rb, need, sizeof need);
            return err_set(ERR_USAGE, "the shard needs %s (%lld rows of --row-bytes %lld), more "
                           "than this node's %s: lower --row-bytes", need, (long long)per_rank,
                           (long long)rb, mem);
        }
    }
    return 0;
}

int store_bench_run(const store_bench_opts *o, MPI_Comm comm, FILE *out) {
    dist_world w = {.comm = comm};
    MPI_Comm_rank(comm, &w.rank);
    MPI_Comm_size(comm, &w.size);
    MPI_Query_thread(&w.thread_level);
    int rc = dist_agree(&w, check_opts(o));
    if (rc)
        return rc;
    fs_atomic csv = {0};
    if (o->csv && w.rank == 0)
        rc = fs_atomic_open(&csv, o->csv);
    if ((rc = dist_agree(&w, rc)))
        return rc;

    const int maxres = STORE_BENCH_MAX_LIST * 3 * STORE_BENCH_MAX_LIST;
    result *res = calloc((size_t)maxres, sizeof *res);
    int nres = 0;
    if (w.rank == 0)
        fprintf(out,
                "store-bench: %d ranks, thread level %d, %s indices, median of %d runs; us/row = "
                "mean rank wall / rows per rank (DDStore bench_get definition)\n",
                w.size, w.thread_level, o->remote_only ? "remote-only" : "uniform", o->repeats);

    for (int ri = 0; ri < o->nrow_bytes && !rc; ri++)
        rc = bench_row_size(o, &w, ri, res, &nres);
    if (!rc && w.rank == 0) {
        print_table(out, res, nres);
        /* The acceptance figures: batch-128 vs get at the smallest row, largest row vs memcpy. */
        for (int mi = 0; mi < o->nmethods; mi++) {
            const char *mn = store_method_name(o->methods[mi]);
            const result *g = find(res, nres, mn, o->row_bytes[0], 1);
            const result *bt = NULL;
            for (int i = 0; i < nres; i++)
                if (!strcmp(res[i].what, mn) && res[i].row_bytes == o->row_bytes[0] &&
                    res[i].batch > 1 && (!bt || res[i].batch > bt->batch))
                    bt = &res[i];
            int64_t big = o->row_bytes[o->nrow_bytes - 1];
            fprintf(out, "summary %s:", mn);
            if (g && bt)
                fprintf(out, " get_batch(%lld) %.1fx cheaper per row than get at %lld B;",
                        (long long)bt->batch, g->us_row / bt->us_row,
                        (long long)o->row_bytes[0]);
            /* Bandwidth against memcpy into the same destination buffer (batch rows): a 1-row
             * buffer stays in cache, a 128-row one does not, for both. */
            fprintf(out, " %lld B rows at", (long long)big);
            for (int i = 0; i < nres; i++) {
                const result *mc = find(res, nres, "memcpy", big, res[i].batch);
                if (!strcmp(res[i].what, mn) && res[i].row_bytes == big && mc)
                    fprintf(out, " %.0f%% (batch %lld)", 100.0 * res[i].mbs / mc->mbs,
                            (long long)res[i].batch);
            }
            fprintf(out, " of local memcpy");
            fprintf(out, "\n");
        }
        fflush(out);
    }
    if (o->csv && w.rank == 0) {
        if (!rc) {
            write_csv(csv.fp, res, nres, w.size);
            rc = fs_atomic_commit(&csv, 0);
        } else {
            fs_atomic_abort(&csv);
        }
    }
    free(res);
    return dist_agree(&w, rc);
}
