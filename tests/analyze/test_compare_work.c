/* test_compare_work: compare's notion of work on synthetic benchmark traces with known answers.
 * Each scenario writes one plain-text dftracer trace laid out as `scaffold benchmark` annotates
 * its runs (setup writes, warmup fetch/compute, epochs of train and evaluate regions, checkpoint
 * captures, a final write) and checks the phases, the work counts and the verdicts. */
#include "analyze/compare.h"
#include "test.h"

#include <stdarg.h>
#include <string.h>

static const char *tmpdir = "/tmp";

typedef struct {
    int epochs, steps, batch, val_batches;
    int files;          /* 1: samples read from files by a loader thread; 0: from memory */
    int delivered;      /* fetches carry a `bytes` arg */
    int generate;       /* setup writes the dataset */
    int ckpt;           /* 0 none, 1 synchronous, 2 asynchronous (writer thread after capture) */
    double compute_us;  /* per step */
    int skip_every;     /* > 0: every skip_every-th batch is not fetched (a do-less knob) */
} scen;

#define SAMPLE_BYTES 400000
#define CKPT_BYTES 5000000

typedef struct {
    FILE *f;
    int id;
} tw;

static void ev(tw *w, const char *name, const char *cat, int tid, long long ts, long long dur,
               const char *fmt, ...) {
    char args[512] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(args, sizeof args, fmt, ap);
        va_end(ap);
    }
    fprintf(w->f,
            "{\"id\":%d,\"name\":\"%s\",\"cat\":\"%s\",\"pid\":100,\"tid\":%d,\"ts\":%lld,"
            "\"dur\":%lld,\"ph\":\"X\",\"args\":{\"hhash\":\"h\"%s%s}}\n",
            ++w->id, name, cat, tid, ts, dur, args[0] ? "," : "", args);
}

static void fh(tw *w, const char *path, const char *hash) {
    fprintf(w->f,
            "{\"id\":%d,\"name\":\"FH\",\"cat\":\"dftracer\",\"pid\":100,\"tid\":100,\"ph\":\"M\","
            "\"args\":{\"hhash\":\"h\",\"name\":\"%s\",\"value\":\"%s\"}}\n",
            ++w->id, path, hash);
}

/* One fetch of `n` samples at *t on the main thread (preceded by the loader's reads). */
static void fetch(tw *w, const scen *s, long long *t, int n) {
    if (s->files && n > 0)
        for (int j = 0; j < n; j++)
            ev(w, "pread64", "POSIX", 101, *t - 900 + j, 100, "\"fhash\":\"fs\",\"ret\":%d,"
               "\"count\":%d,\"offset\":0", SAMPLE_BYTES, SAMPLE_BYTES);
    if (s->delivered)
        ev(w, "fetch", "dataloader", 100, *t, 50, "\"batch_size\":%d,\"bytes\":%d", n,
           n * SAMPLE_BYTES);
    else
        ev(w, "fetch", "dataloader", 100, *t, 50, "\"batch_size\":%d", n);
    *t += 50;
}

static void step(tw *w, const scen *s, long long *t) {
    ev(w, "forward", "compute", 100, *t, (long long)(0.9 * s->compute_us), NULL);
    *t += (long long)(0.9 * s->compute_us);
    ev(w, "step", "compute", 100, *t, (long long)(0.1 * s->compute_us), NULL);
    *t += (long long)(0.1 * s->compute_us);
}

static void ckpt_write(tw *w, int tid, long long at) {
    ev(w, "pwrite64", "POSIX", tid, at, 3000, "\"fhash\":\"ck\",\"ret\":%d,\"count\":%d,"
       "\"offset\":0", CKPT_BYTES, CKPT_BYTES);
}

static void gen(const char *dir, const scen *s) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmpdir, dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", p);
    if (system(cmd) != 0)
        return;
    snprintf(p, sizeof p, "%s/%s/trace-0-preload.pfw", tmpdir, dir);
    tw w = {fopen(p, "w"), 0};
    if (!w.f)
        return;
    fputs("[\n", w.f);
    fh(&w, "/data/ds/train_000.npy", "fs");
    fh(&w, "/data/ds/gen_000.npy", "gen");
    fh(&w, "/runs/r/checkpoints/.checkpoint_last.safetensors.tmp.1", "ck");
    fh(&w, "/runs/r/figures/train_loss.png", "fig");
    long long t = 1700000000000000LL;
    /* Setup: fractal library and dataset generation, then the memory store's load. */
    ev(&w, "generate_instances", "data", 100, t, 20000, "\"instances_new\":%d", s->generate);
    t += 20000;
    if (s->generate) {
        ev(&w, "pwrite64", "POSIX", 100, t, 5000, "\"fhash\":\"gen\",\"ret\":8000000,"
           "\"count\":8000000,\"offset\":0");
        t += 5000;
    }
    if (!s->files) {
        ev(&w, "pread64", "POSIX", 100, t, 3000, "\"fhash\":\"fs\",\"ret\":%d,\"count\":%d,"
           "\"offset\":0", SAMPLE_BYTES * 8, SAMPLE_BYTES * 8);
        t += 3000;
    }
    t += 1000;
    /* Warmup: two steps. */
    for (int i = 0; i < 2; i++) {
        fetch(&w, s, &t, s->batch);
        step(&w, s, &t);
    }
    for (int e = 1; e <= s->epochs; e++) {
        long long e0 = t;
        long long tr0 = t;
        int fetched = 0;
        for (int i = 0; i < s->steps; i++) {
            if (s->skip_every && (i + 1) % s->skip_every == 0)
                continue;
            fetch(&w, s, &t, s->batch);
            step(&w, s, &t);
            fetched++;
        }
        fetch(&w, s, &t, 0); /* end of epoch */
        ev(&w, "train", "pipeline", 100, tr0, t - tr0, "\"steps\":%d", fetched);
        long long v0 = t;
        for (int i = 0; i < s->val_batches; i++) {
            fetch(&w, s, &t, 1);
            ev(&w, "forward", "compute", 100, t, 2000, NULL);
            t += 2000;
        }
        ev(&w, "evaluate", "pipeline", 100, v0, t - v0, NULL);
        if (s->ckpt) {
            long long c0 = t;
            if (s->ckpt == 1) {
                ckpt_write(&w, 100, t);
                t += 3000;
            } else {
                ckpt_write(&w, 102, t + 5000); /* the writer thread, after the capture */
            }
            t += 100;
            ev(&w, "capture", "checkpoint", 100, c0, t - c0, "\"async\":%d", s->ckpt == 2);
        }
        ev(&w, "epoch", "pipeline", 100, e0, t - e0, "\"epoch\":%d", e);
    }
    t += 1000;
    ev(&w, "write", "POSIX", 100, t, 100, "\"fhash\":\"fig\",\"ret\":20000,\"count\":20000");
    fputs("]", w.f);
    fclose(w.f);
}

static int load(const char *dir, an_run *r) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmpdir, dir);
    an_read_opts o = {.threads = 1};
    return an_run_load(p, &o, r);
}

static const scen BASE = {3, 6, 2, 2, 1, 1, 1, 1, 10000, 0};

static void test_phases(void) {
    gen("cw_base", &BASE);
    an_run r;
    int rc = load("cw_base", &r);
    CHECK(rc == 0, "load base (%d)", rc);
    const an_work *w = &r.work;
    CHECK(w->annotated && w->epochs == 3, "epochs %llu", (unsigned long long)w->epochs);
    CHECK(w->batches[0] == 18 && w->samples_known[0] && w->samples[0] == 36,
          "training 18 batches, 36 samples (got %llu, %llu)", (unsigned long long)w->batches[0],
          (unsigned long long)w->samples[0]);
    CHECK(w->batches[1] == 6 && w->samples[1] == 6, "validation 6 batches of 1");
    CHECK(w->steps == 18, "18 optimizer steps in training (warmup excluded): %llu",
          (unsigned long long)w->steps);
    CHECK(w->delivered_known && w->delivered_bytes == 42ull * SAMPLE_BYTES,
          "delivered bytes = (36 + 6) samples");
    CHECK(w->ckpt_events == 3 && w->ckpt_bytes == 3ull * CKPT_BYTES, "3 checkpoints");
    CHECK(w->fs_written[AN_PH_SETUP] == 8000000, "generation writes in setup");
    /* A phase starts at its first annotation: the loader reads each phase's first batch
     * before it (prefetch), so those reads land in the phase before. */
    CHECK(w->fs_read[AN_PH_SETUP] == 2ull * SAMPLE_BYTES, "setup reads");
    CHECK(w->fs_read[AN_PH_WARMUP] == 4ull * SAMPLE_BYTES, "warmup reads");
    CHECK(w->fs_read[AN_PH_TRAIN] == 40ull * SAMPLE_BYTES, "training reads");
    CHECK(w->fs_written[AN_PH_AFTER] == 20000, "figures after training");
    CHECK(w->phase_s[AN_PH_TRAIN] > 0.18 && w->phase_s[AN_PH_TRAIN] < 0.25,
          "training phase time %.3f s", w->phase_s[AN_PH_TRAIN]);
    CHECK(r.time_s == w->phase_s[AN_PH_TRAIN], "compared time = training phase");
}

/* One scenario against the base, both sides 3 replicates of the same trace. */
static void verdict(const char *dir, const scen *s, an_compare_result *res) {
    gen(dir, s);
    an_run b[3], c[3];
    int rc = load("cw_base", &b[0]) | load(dir, &c[0]);
    CHECK(rc == 0, "load %s", dir);
    b[1] = b[2] = b[0];
    c[1] = c[2] = c[0];
    an_compare(b, 3, c, 3, 0.01, res);
}

static void test_verdicts(void) {
    an_compare_result r;
    /* The pair: the memory store, dataset already generated. Same application work,
     * far fewer file-system bytes: a data-path change, judged on time. */
    scen mem = BASE;
    mem.files = 0;
    mem.generate = 0;
    verdict("cw_mem", &mem, &r);
    CHECK(!r.does_less && r.app_units, "memory store is not 'does less': %s", r.reason);
    CHECK(!strcmp(r.verdict, "keep") || !strcmp(r.verdict, "inconclusive"), "keep/inconclusive: %s",
          r.reason);
    CHECK(strstr(r.datapath, "data-path change") != NULL, "data path named: %s", r.datapath);
    /* Same work, faster compute: keep. */
    scen fast = BASE;
    fast.compute_us = 7000;
    verdict("cw_fast", &fast, &r);
    CHECK(!strcmp(r.verdict, "keep") && !r.does_less, "faster: %s", r.reason);
    /* Fewer epochs: does less. */
    scen fewer = BASE;
    fewer.epochs = 2;
    verdict("cw_epochs", &fewer, &r);
    CHECK(r.does_less && strstr(r.less, "epochs"), "fewer epochs rejected: %s", r.reason);
    /* Skipped batches: fewer samples, does less (however fast). */
    scen skip = BASE;
    skip.skip_every = 3;
    verdict("cw_skip", &skip, &r);
    CHECK(r.does_less && strstr(r.less, "training samples") && !strcmp(r.verdict, "reject"),
          "skipped samples rejected: %s", r.reason);
    /* Smaller batches, same steps: fewer samples. */
    scen small = BASE;
    small.batch = 1;
    verdict("cw_small", &small, &r);
    CHECK(r.does_less && strstr(r.less, "training samples"), "smaller batch rejected: %s",
          r.less);
    /* Larger batch, half the steps, same samples: not less work (steps not compared). */
    scen big = BASE;
    big.batch = 4;
    big.steps = 3;
    verdict("cw_big", &big, &r);
    CHECK(!r.does_less, "larger batch with the same samples is the same work: %s", r.less);
    /* Asynchronous checkpoints: the writer thread's bytes still count. */
    scen async = BASE;
    async.ckpt = 2;
    verdict("cw_async", &async, &r);
    CHECK(!r.does_less, "async checkpoints write the same bytes: %s", r.less);
    /* No checkpoints: does less. */
    scen nock = BASE;
    nock.ckpt = 0;
    verdict("cw_nock", &nock, &r);
    CHECK(r.does_less && strstr(r.less, "checkpoint events"), "no checkpoints rejected: %s",
          r.less);
}

int main(int argc, char **argv) {
    tmpdir = argc > 1 ? argv[1] : "/tmp";
    test_phases();
    test_verdicts();
    return test_report();
}
