/* Loader tests.
 *   test_loader                 synthetic in-memory source: batch contents and order identical
 *                               for 0/1/2/4 workers, samplers, stop mid-epoch without a hang,
 *                               epoch switch mid-epoch, error propagation, non-concurrent source.
 *   test_loader mpi             (under mpirun) every rank is a replica: each training sample at
 *                               least once per epoch across replicas, padding exactly
 *                               total - n, equal batch counts on every rank.
 *   test_loader files DIR [ARGS] (under mpirun) opens a generated dataset collectively with the
 *                               config given by ARGS (-c FILE, flags), reads both splits with the
 *                               configured workers and compares every batch with direct reads.
 * A hang fails through alarm(). */
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"
#include "dataset/dataset.h"
#include "dataset/loader.h"
#include "mpi/dist.h"
#include "test.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define VE 24 /* floats per synthetic sample */
#define ME 8  /* mask elements per synthetic sample */

typedef struct synth {
    int delay_us;     /* per read, jittered */
    int64_t fail_at;  /* index whose read fails (-1: none) */
    pthread_t owner;  /* for the non-concurrent check */
    int off_owner;    /* reads seen off the owner thread */
} synth;

static int synth_read(void *ctx, int split, const int64_t *idx, int n, float *vol,
                      uint16_t *mask) {
    synth *s = ctx;
    if (!pthread_equal(pthread_self(), s->owner))
        __atomic_store_n(&s->off_owner, 1, __ATOMIC_RELAXED);
    for (int j = 0; j < n; j++) {
        if (idx[j] == s->fail_at)
            return err_set(ERR_FORMAT, "synthetic sample %lld is corrupt", (long long)idx[j]);
        if (s->delay_us) {
            /* Jitter so that workers finish out of order. */
            struct timespec ts = {0, (long)((idx[j] * 7919 % 5 + 1) * s->delay_us) * 1000L};
            nanosleep(&ts, NULL);
        }
        for (int k = 0; k < VE; k++)
            vol[(size_t)j * VE + (size_t)k] = (float)(idx[j] * 1000 + k + split * 100000);
        for (int k = 0; k < ME; k++)
            mask[(size_t)j * ME + (size_t)k] = (uint16_t)(idx[j] + k);
    }
    return 0;
}

static ds_source synth_source(synth *s) {
    ds_source src = {synth_read, s, VE, ME, 1};
    return src;
}

/* Runs one epoch, returns a digest of (order, contents) and checks contents against indices. */
/* use_ref: 0 = next() only, 1 = next_ref() only, 2 = alternate. */
static int use_ref;

static uint64_t run_epoch(ds_loader *l, int split, int64_t epoch, int batch, int64_t *nb_out,
                          int *content_ok) {
    float vbuf[16 * VE];
    uint16_t mbuf[16 * ME];
    const float *vol = vbuf;
    const uint16_t *mask = mbuf;
    uint64_t h = 1469598103934665603ULL;
    int64_t nb = 0;
    int cnt, rc;
    ds_loader_start_epoch(l, epoch);
    for (;;) {
        int ref = use_ref == 1 || (use_ref == 2 && nb % 2);
        if (ref) {
            rc = ds_loader_next_ref(l, &vol, &mask, &cnt);
        } else {
            rc = ds_loader_next(l, vbuf, mbuf, &cnt);
            vol = vbuf;
            mask = mbuf;
        }
        if (rc != 1)
            break;
        const int64_t *idx = ds_loader_last_indices(l);
        for (int j = 0; j < cnt; j++) {
            if (vol[j * VE + 3] != (float)(idx[j] * 1000 + 3 + split * 100000) ||
                mask[j * ME + 5] != (uint16_t)(idx[j] + 5))
                *content_ok = 0;
            for (int k = 0; k < VE; k++) {
                uint32_t bits;
                memcpy(&bits, &vol[j * VE + k], 4);
                h = (h ^ bits) * 1099511628211ULL;
            }
        }
        h = (h ^ (uint64_t)cnt) * 1099511628211ULL;
        nb++;
        (void)batch;
    }
    CHECK(rc == 0, "epoch ends with 0, got %d (%s)", rc, err_msg());
    *nb_out = nb;
    return h;
}

static void test_workers_equivalent(void) {
    synth s = {30, -1, pthread_self(), 0};
    const int workers[] = {0, 1, 2, 4};
    for (use_ref = 0; use_ref < 3; use_ref++)
    for (int split = 0; split < 2; split++)
        for (int batch = 1; batch <= 3; batch += 2) {
            uint64_t ref = 0;
            int64_t refnb = -1;
            for (size_t w = 0; w < 4; w++) {
                ds_loader_opts o = {synth_source(&s), split, 23, batch, 3, 1, 0, workers[w], 0};
                ds_loader *l;
                CHECK(ds_loader_create(&l, &o) == 0, "create: %s", err_msg());
                int ok = 1;
                int64_t nb;
                uint64_t h1 = run_epoch(l, split, 1, batch, &nb, &ok);
                int64_t want = (ds_loader_num_samples(l) + batch - 1) / batch;
                CHECK(nb == want && nb == ds_loader_num_batches(l), "batches %lld want %lld",
                      (long long)nb, (long long)want);
                uint64_t h2 = run_epoch(l, split, 2, batch, &nb, &ok);
                CHECK(ok, "batch contents match their indices (W=%d)", workers[w]);
                if (w == 0) {
                    ref = h1 ^ (h2 * 31);
                    refnb = nb;
                } else {
                    CHECK(ref == (h1 ^ (h2 * 31)) && refnb == nb,
                          "split %d batch %d: W=%d delivers the same batches as W=0 (ref %d)",
                          split, batch, workers[w], use_ref);
                }
                if (split == DS_TRAIN)
                    CHECK(h1 != h2, "epochs 1 and 2 differ");
                ds_loader_destroy(l);
            }
        }
}

static void test_stop_mid_epoch(void) {
    synth s = {2000, -1, pthread_self(), 0}; /* slow reads: workers are busy when we stop */
    for (int w = 1; w <= 4; w *= 2) {
        ds_loader_opts o = {synth_source(&s), DS_TRAIN, 200, 2, 1, 0, 0, w, 2};
        ds_loader *l;
        CHECK(ds_loader_create(&l, &o) == 0, "create");
        float vol[2 * VE];
        uint16_t mask[2 * ME];
        int cnt;
        ds_loader_start_epoch(l, 1);
        CHECK(ds_loader_next(l, vol, mask, &cnt) == 1 && cnt == 2, "first batch");
        double t0 = time_now();
        ds_loader_destroy(l); /* mid-epoch, reads in flight */
        CHECK(time_now() - t0 < 2.0, "destroy mid-epoch returns promptly (%.3f s)",
              time_now() - t0);
    }
    /* stop() then keep reading: falls back to the owner thread, same batches. */
    synth f = {0, -1, pthread_self(), 0};
    ds_loader_opts o = {synth_source(&f), DS_TRAIN, 30, 4, 2, 0, 5, 2, 0};
    ds_loader *a, *b;
    ds_loader_create(&a, &o);
    o.workers = 0;
    ds_loader_create(&b, &o);
    ds_loader_start_epoch(a, 3);
    ds_loader_start_epoch(b, 3);
    float va[4 * VE], vb[4 * VE];
    uint16_t ma[4 * ME], mb[4 * ME];
    int ca, cb, same = 1, n = 0;
    for (;;) {
        if (n == 2)
            ds_loader_stop(a);
        int ra = ds_loader_next(a, va, ma, &ca), rb = ds_loader_next(b, vb, mb, &cb);
        if (ra != rb) {
            same = 0;
            break;
        }
        if (ra != 1)
            break;
        same &= ca == cb && !memcmp(va, vb, (size_t)ca * VE * sizeof(float));
        n++;
    }
    CHECK(same && n == 4, "stop() mid-epoch then next() continues in order (%d batches)", n);
    ds_loader_destroy(a);
    ds_loader_destroy(b);
}

static void test_epoch_switch(void) {
    synth s = {50, -1, pthread_self(), 0};
    ds_loader_opts o = {synth_source(&s), DS_TRAIN, 40, 2, 1, 0, 9, 3, 0};
    ds_loader *l, *ref;
    ds_loader_create(&l, &o);
    o.workers = 0;
    ds_loader_create(&ref, &o);
    float vol[2 * VE];
    uint16_t mask[2 * ME];
    int cnt, ok = 1;
    int64_t nb, nbr;
    ds_loader_start_epoch(l, 1);
    ds_loader_next(l, vol, mask, &cnt); /* abandon epoch 1 after one batch */
    uint64_t h = run_epoch(l, DS_TRAIN, 2, 2, &nb, &ok);
    uint64_t hr = run_epoch(ref, DS_TRAIN, 2, 2, &nbr, &ok);
    CHECK(h == hr && nb == nbr && ok, "an abandoned epoch does not leak into the next one");
    CHECK(ds_loader_next(l, vol, mask, &cnt) == 0, "next after the end returns 0");
    ds_loader_destroy(l);
    ds_loader_destroy(ref);
    ds_loader_destroy(NULL);
}

static void test_errors(void) {
    for (int w = 0; w <= 2; w += 2) {
        synth s = {0, 7, pthread_self(), 0};
        ds_loader_opts o = {synth_source(&s), DS_VAL, 12, 3, 1, 0, 0, w, 0};
        ds_loader *l;
        ds_loader_create(&l, &o);
        ds_loader_start_epoch(l, 0);
        float vol[3 * VE];
        uint16_t mask[3 * ME];
        int cnt, rc, seen_err = 0, good = 0;
        while ((rc = ds_loader_next(l, vol, mask, &cnt)) != 0) {
            if (rc < 0) {
                seen_err = rc == ERR_FORMAT && strstr(err_msg(), "sample 7") != NULL;
            } else {
                good++;
            }
        }
        CHECK(seen_err && good == 3, "W=%d: the failing batch reports the sample (%s), the others "
              "arrive (%d)", w, err_msg(), good);
        ds_loader_destroy(l);
    }
    synth nc = {0, -1, pthread_self(), 0};
    ds_source src = synth_source(&nc);
    src.concurrent = 0;
    ds_loader_opts o = {src, DS_TRAIN, 10, 2, 1, 0, 0, 4, 0};
    ds_loader *l;
    ds_loader_create(&l, &o);
    int ok = 1;
    int64_t nb;
    run_epoch(l, DS_TRAIN, 1, 2, &nb, &ok);
    CHECK(!nc.off_owner && nb == 5, "a non-concurrent source is read on the owner thread only");
    ds_loader_destroy(l);
    ds_loader_opts bad = {src, DS_TRAIN, 10, 0, 1, 0, 0, 1, 0};
    CHECK(ds_loader_create(&l, &bad) == ERR_USAGE && l == NULL, "batch 0 rejected");
    bad.batch = 1;
    bad.replica = 3;
    CHECK(ds_loader_create(&l, &bad) == ERR_RANGE, "replica out of range rejected");
}

static int mode_mpi(void) {
    dist_world w;
    dist_init(&w, NULL, NULL);
    synth s = {20, -1, pthread_self(), 0};
    const int64_t n = 37;
    ds_loader_opts o = {synth_source(&s), DS_TRAIN, n, 2, w.size, w.rank, 0, 2, 0};
    ds_loader *l;
    CHECK(ds_loader_create(&l, &o) == 0, "create");
    for (int64_t epoch = 1; epoch <= 2; epoch++) {
        ds_loader_start_epoch(l, epoch);
        float vol[2 * VE];
        uint16_t mask[2 * ME];
        int cnt;
        long long counts[64] = {0};
        long long nb = 0;
        while (ds_loader_next(l, vol, mask, &cnt) == 1) {
            const int64_t *idx = ds_loader_last_indices(l);
            for (int j = 0; j < cnt; j++)
                counts[idx[j]]++;
            nb++;
        }
        long long all[64];
        MPI_Allreduce(counts, all, 64, MPI_LONG_LONG, MPI_SUM, w.comm);
        long long nbmin, nbmax;
        MPI_Allreduce(&nb, &nbmin, 1, MPI_LONG_LONG, MPI_MIN, w.comm);
        MPI_Allreduce(&nb, &nbmax, 1, MPI_LONG_LONG, MPI_MAX, w.comm);
        long long total = 0;
        int every = 1;
        for (int i = 0; i < n; i++) {
            every &= all[i] >= 1;
            total += all[i];
        }
        long long per = (n + w.size - 1) / w.size;
        CHECK(every && total == per * w.size, "epoch %lld: every sample at least once, %lld "
              "sampled (= %lld x %d after padding)", (long long)epoch, total, per, w.size);
        CHECK(nbmin == nbmax && nbmin == (per + 1) / 2,
              "epoch %lld: equal batch counts on %d ranks (%lld..%lld)", (long long)epoch, w.size,
              nbmin, nbmax);
    }
    ds_loader_destroy(l);
    int failed = test_failed;
    int any;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, w.comm);
    int st = any ? 1 : 0;
    if (w.rank == 0)
        st = test_report() || any;
    dist_finalize(&w);
    return st;
}

static int mode_files(int argc, char **argv) {
    dist_world w;
    dist_init(&w, NULL, NULL);
    log_set_rank(w.rank);
    scaffold_config c;
    config_defaults(&c);
    /* argv[2] = dataset dir; argv[3..] = config arguments. */
    char *cargv[64];
    int cargc = 0;
    cargv[cargc++] = "test_loader";
    for (int i = 3; i < argc && cargc < 63; i++)
        cargv[cargc++] = argv[i];
    int rc = config_parse_args(&c, cargc, cargv, 0);
    if (rc == 0)
        rc = config_finalize(&c);
    ds_spec sp = ds_spec_of(&c);
    dataset *ds = NULL;
    if (rc == 0)
        rc = dataset_open_world(argv[2], &sp, &w, &ds);
    if (rc) {
        if (w.rank == 0)
            fprintf(stderr, "test_loader files: %s\n", err_msg());
        dist_finalize(&w);
        return err_exit_status(rc);
    }
    /* With T spatial shards, ranks r and r+T.. are replicas of the same shard. */
    ds_layout cl;
    ds_layout_from_config(&c, &cl);
    int T = ds_layout_total(&cl);
    int replicas = w.size / T, replica = w.rank / T;
    int B = c.local_batch_size;
    float *vol = malloc((size_t)B * ds->vol_elems * sizeof(float));
    uint16_t *mask = malloc((size_t)B * ds->mask_elems * sizeof(uint16_t));
    float *rv = malloc(ds->vol_elems * sizeof(float));
    uint16_t *rm = malloc(ds->mask_elems * sizeof(uint16_t));
    for (int split = 0; split < 2; split++) {
        ds_loader_opts o = {dataset_file_source(ds), split, ds->n[split], B, replicas, replica, 0,
                            c.dataloader_num_workers, 0};
        ds_loader *l;
        if (split == DS_TRAIN)
            CHECK(ds_loader_create(&l, &o) == 0, "create: %s", err_msg());
        else
            CHECK(dataset_loader_create(&l, ds, split, B, replicas, replica, 0,
                                        c.dataloader_num_workers) == 0,
                  "dataset_loader_create: %s", err_msg());
        ds_loader_start_epoch(l, 1);
        int cnt, same = 1;
        long long nb = 0, ns = 0;
        while ((rc = ds_loader_next(l, vol, mask, &cnt)) == 1) {
            const int64_t *idx = ds_loader_last_indices(l);
            for (int j = 0; j < cnt; j++) {
                dataset_read_sample(ds, split, idx[j], rv, rm);
                same &= !memcmp(rv, vol + (size_t)j * ds->vol_elems,
                                ds->vol_elems * sizeof(float)) &&
                        !memcmp(rm, mask + (size_t)j * ds->mask_elems,
                                ds->mask_elems * sizeof(uint16_t));
            }
            nb++;
            ns += cnt;
        }
        CHECK(rc == 0, "split %d reads: %s", split, err_msg());
        CHECK(same, "split %d: loader batches equal direct reads", split);
        long long tot = dist_sum_ll(&w, ns);
        if (split == DS_VAL)
            CHECK(tot == ds->n[split] * T, "validation: every sample once per shard (%lld)", tot);
        else
            CHECK(tot >= ds->n[split] * T, "training: %lld samples", tot);
        ds_loader_destroy(l);
    }
    /* CE sample on this dataset, printed for the record. */
    int64_t *ce = malloc((size_t)(ds->n[DS_TRAIN] > 0 ? ds->n[DS_TRAIN] : 1) * sizeof *ce);
    int64_t k = dataset_ce_indices(ds->n[DS_TRAIN], c.ce_weight_sample_fraction, ce);
    CHECK(k >= 1 && ce[0] == 0 && (k == 1 || ce[k - 1] == ds->n[DS_TRAIN] - 1), "CE sample spans the set");
    free(ce);
    free(vol);
    free(mask);
    free(rv);
    free(rm);
    dataset_close(ds);
    int failed = test_failed, any;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, w.comm);
    int st = any ? 1 : 0;
    if (w.rank == 0)
        st = test_report() || any;
    dist_finalize(&w);
    return st;
}

int main(int argc, char **argv) {
    alarm(120);
    if (argc >= 2 && !strcmp(argv[1], "mpi"))
        return mode_mpi();
    if (argc >= 3 && !strcmp(argv[1], "files"))
        return mode_files(argc, argv);
    test_workers_equivalent();
    use_ref = 2;
    test_stop_mid_epoch();
    test_epoch_switch();
    test_errors();
    return test_report();
}
