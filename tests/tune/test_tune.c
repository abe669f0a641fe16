/* test_tune: the tuner's pieces with known answers: the levers file (valid, every kind of bad
 * input with its message), the built-in catalog, the proposal mapping, the verdict of a trial
 * on synthetic measurements (accept, revert, inconclusive, every guard), and the journal (round
 * trip, torn last line, another tune's journal). */
#include "tune/tune.h"

#include "core/err.h"
#include "core/fsutil.h"
#include "test.h"

#include <stdlib.h>

#include <string.h>
#include <unistd.h>

static const char *tmpdir = "/tmp";
static char cfgpath[600];
static char *cfg_argv[4];
static const int cfg_argc = 3;

static int parse(const char *text, tune_levers *lv) {
    return tune_levers_parse(text, strlen(text), "levers.yml", cfg_argc, cfg_argv, lv);
}

/* Parsing must fail with ERR_CONFIG and a message containing every fragment. */
static void bad(const char *text, const char *frag1, const char *frag2) {
    tune_levers lv;
    int rc = parse(text, &lv);
    const char *m = err_msg();
    CHECK(rc == ERR_CONFIG && strstr(m, frag1) && (!frag2 || strstr(m, frag2)) && lv.n == 0,
          "bad levers file rejected with '%s'%s%s: rc %d, '%s'", frag1, frag2 ? " and " : "",
          frag2 ? frag2 : "", rc, m);
}

static void test_levers(void) {
    tune_levers lv;
    int rc = parse("levers:\n"
                   "  - name: dataloader_num_workers\n    values: [0, 2]\n"
                   "  - name: env:OMP_NUM_THREADS\n    values: [\"1\", 2]\n"
                   "  - name: launch:ranks_x_threads\n    values: [1x2, 2x1]\n"
                   "  - name: data_store\n    values: [memory]\n    dimension: 9\n",
                   &lv);
    CHECK(rc == 0 && lv.n == 4, "valid levers file (%d, %s)", rc, err_msg());
    CHECK(lv.l[0].kind == TUNE_L_CONFIG && lv.l[0].key >= 0 && lv.l[0].nvalues == 2 &&
              !strcmp(lv.l[0].values[1], "2") && lv.l[0].dimension == 3,
          "config lever, dimension 3 (prefetching)");
    CHECK(lv.l[1].kind == TUNE_L_ENV && !strcmp(lv.l[1].values[0], "1") &&
              lv.l[1].cls == TUNE_C_COMPUTE,
          "env lever");
    CHECK(lv.l[2].kind == TUNE_L_LAUNCH && lv.l[2].nvalues == 2, "launch lever");
    CHECK(lv.l[3].dimension == 9, "explicit dimension kept");
    bad("levers: [\n", "levers.yml:", "YAML syntax error");
    /* A key given twice (the last value used to win silently). */
    bad("levers:\n  - name: dataloader_num_workers\n    values: [1]\n    values: [2]\n",
        "levers.yml: key 'values' appears twice", "lines 3 and 4");
    bad("- a\n- b\n", "levers.yml", "mapping with a 'levers' list");
    bad("levers:\n  - name: problem_scale\n    values: [6]\n", "levers entry 1",
        "defines the workload");
    bad("levers:\n  - name: seed\n    values: [1]\n", "'seed'", "defines the workload");
    bad("levers:\n  - name: epochs\n    values: [5]\n", "managed by scaffold tune", NULL);
    bad("levers:\n  - name: no_such_key\n    values: [1]\n", "'no_such_key'",
        "neither a configuration key");
    bad("levers:\n  - name: dataloader_num_workers\n    values: [lots]\n", "levers entry 1",
        "value 'lots'");
    bad("levers:\n  - name: dataloader_num_workers\n    values: [-3]\n", "levers entry 1",
        "dataloader_num_workers");
    bad("levers:\n  - values: [1]\n", "levers.yml:2: levers entry 1: missing required key 'name'",
        NULL);
    bad("levers:\n  - name: async_save\n", "levers entry 1: missing required key 'values'", NULL);
    bad("levers:\n  - name: async_save\n    values: []\n", "'values' must be a non-empty list",
        NULL);
    bad("levers:\n  - name: async_save\n    values: [1]\n    colour: red\n", "unknown key 'colour'",
        NULL);
    bad("levers:\n  - name: async_save\n    values: [1, 1]\n", "given twice", NULL);
    bad("levers:\n  - name: async_save\n    values: [1]\n  - name: async_save\n    values: [0]\n",
        "levers entry 2", "appears twice");
    bad("levers:\n  - name: env:LD_PRELOAD\n    values: [x.so]\n", "set by scaffold tune", NULL);
    bad("levers:\n  - name: env:9X\n    values: [1]\n", "variable name", NULL);
    bad("levers:\n  - name: launch:ranks_x_threads\n    values: [2by1]\n", "RANKSxTHREADS", NULL);
    bad("levers:\n  - name: launch:gpus\n    values: [1]\n", "launch:ranks_x_threads", NULL);
    bad("levers:\n  - name: async_save\n    values: [1]\n    dimension: 13\n",
        "levers.yml:4: levers entry 1: key 'dimension': expected an integer in [1, 12], got '13'",
        NULL);
    bad("levers: []\n", "is empty", NULL);
    bad("other: 1\n", "levers.yml:1: unknown key 'other' (valid keys: levers)", NULL);
}

static void test_builtin(void) {
    scaffold_config c;
    config_defaults(&c);
    c.dataloader_num_workers = 1;
    c.checkpoint_interval = -1;
    tune_levers lv;
    tune_levers_builtin(&c, 2, 1, 2, "/dev/shm/scaffold-tune-test", &lv);
    int workers = -1, async = -1, launch = -1;
    for (int i = 0; i < lv.n; i++) {
        for (int k = 0; tune_workload_keys[k]; k++)
            CHECK(strcmp(lv.l[i].name, tune_workload_keys[k]), "built-in lever %s is no workload "
                                                               "key", lv.l[i].name);
        if (!strcmp(lv.l[i].name, "dataloader_num_workers"))
            workers = i;
        if (!strcmp(lv.l[i].name, "async_save"))
            async = i;
        if (!strcmp(lv.l[i].name, "launch:ranks_x_threads"))
            launch = i;
    }
    CHECK(workers >= 0 && lv.l[workers].nvalues == 3, "workers: 0, 2, 4 (not the base 1)");
    for (int v = 0; workers >= 0 && v < lv.l[workers].nvalues; v++)
        CHECK(strcmp(lv.l[workers].values[v], "1"), "the base value is not a candidate");
    CHECK(async >= 0 && strstr(lv.l[async].blocked, "checkpoint"),
          "async_save blocked without checkpoints");
    CHECK(launch >= 0 && lv.l[launch].nvalues == 1 && !strcmp(lv.l[launch].values[0], "2x1"),
          "2 cores, base 1x2: launch tries 2x1");
    int stage = -1;
    for (int i = 0; i < lv.n; i++)
        if (!strcmp(lv.l[i].name, "dataset_dir"))
            stage = i;
    CHECK(stage >= 0 && (lv.l[stage].blocked[0] ||
                         !strcmp(lv.l[stage].values[0], "/dev/shm/scaffold-tune-test")),
          "dataset_dir stages in the tune's own folder (or is blocked without /dev/shm)");
    tune_levers_builtin(&c, 2, 1, 2, NULL, &lv);
    for (int i = 0; i < lv.n; i++)
        if (!strcmp(lv.l[i].name, "dataset_dir"))
            CHECK(lv.l[i].nvalues == 0 && lv.l[i].blocked[0], "no staging folder: blocked");
    const char *why = NULL;
    CHECK(!strcmp(tune_proposal_lever("prefetch-loader", &why), "dataloader_num_workers"),
          "prefetch-loader -> loader workers");
    CHECK(!strcmp(tune_proposal_lever("async-checkpoint", &why), "async_save"),
          "async-checkpoint -> async_save");
    CHECK(tune_proposal_lever("striping", &why) == NULL && why && strstr(why, "setstripe"),
          "striping needs a system change");
}

/* A synthetic run: samples/s = 12 samples per epoch / epoch time. */
static tune_meas meas(double epoch_s, double samples_per_step, double loss_scale) {
    tune_meas m;
    memset(&m, 0, sizeof m);
    m.ok = 1;
    m.epoch_s = epoch_s;
    m.samples_per_epoch = 12;
    m.samples_per_step = samples_per_step;
    m.batches_per_epoch = 12 / samples_per_step;
    m.throughput = 12 / epoch_s;
    m.ttt_s = NAN;
    m.nepochs = 3;
    for (int e = 0; e < 3; e++) {
        m.loss[e] = (2.0 - 0.3 * e) * loss_scale;
        m.val_loss[e] = (1.9 - 0.3 * e) * loss_scale;
        m.val_dice[e] = 0.1 * (e + 1);
    }
    an_work *w = &m.run.work;
    w->annotated = 1;
    w->epochs = 3;
    w->batches[0] = (uint64_t)(36 / samples_per_step);
    w->samples[0] = 36;
    w->steps = w->batches[0];
    w->samples_known[0] = w->samples_known[1] = 1;
    w->batches[1] = w->samples[1] = 6;
    return m;
}

static void judge(tune_meas *a, tune_meas *b, int batch_lever, tune_verdict *v) {
    tune_judge(a, 3, b, 3, TUNE_OBJ_THROUGHPUT, batch_lever, 0.02, v);
}

static void test_verdicts(void) {
    tune_meas a[3] = {meas(1.00, 1, 1), meas(1.02, 1, 1), meas(0.99, 1, 1)};
    tune_meas b[3];
    tune_verdict v;
    for (int i = 0; i < 3; i++)
        b[i] = meas(0.70 + 0.01 * i, 1, 1);
    judge(a, b, 0, &v);
    CHECK(!strcmp(v.verdict, "accept") && v.d.med > 0.35 && v.d.lo > 0, "faster -> accept: %s",
          v.reason);
    for (int i = 0; i < 3; i++)
        b[i] = meas(1.40 + 0.01 * i, 1, 1);
    judge(a, b, 0, &v);
    CHECK(!strcmp(v.verdict, "revert") && v.d.med < 0, "slower -> revert: %s", v.reason);
    for (int i = 0; i < 3; i++)
        b[i] = meas(1.005 - 0.01 * i, 1, 1);
    judge(a, b, 0, &v);
    CHECK(!strcmp(v.verdict, "inconclusive"), "same -> inconclusive: %s", v.reason);
    /* Does less: fewer samples. */
    for (int i = 0; i < 3; i++) {
        b[i] = meas(0.7, 1, 1);
        b[i].run.work.samples[0] = 27;
        b[i].run.work.batches[0] = b[i].run.work.steps = 27;
    }
    judge(a, b, 0, &v);
    CHECK(!strcmp(v.verdict, "guard-reject") && !strcmp(v.guard, "does-less") &&
              strstr(v.reason, "training samples"),
          "fewer samples -> does less: %s", v.reason);
    /* Phantom: the effective batch changed without a batch lever (more samples per step at
     * the same samples per epoch: fewer steps). */
    for (int i = 0; i < 3; i++)
        b[i] = meas(0.7, 2, 1);
    judge(a, b, 0, &v);
    CHECK(!strcmp(v.guard, "phantom-throughput") && strstr(v.reason, "samples per step"),
          "silently larger batch -> phantom: %s", v.reason);
    /* The same change with a batch lever is judged on epoch time. */
    judge(a, b, 1, &v);
    CHECK(!strcmp(v.verdict, "accept") && v.judged == TUNE_OBJ_EPOCH,
          "batch lever judged on epoch time: %s", v.reason);
    /* Phantom: samples/s up but epoch time not down (more samples per epoch counted). */
    for (int i = 0; i < 3; i++) {
        b[i] = meas(1.0 + 0.005 * i, 1, 1);
        b[i].throughput = 18 / b[i].epoch_s;
    }
    judge(a, b, 0, &v);
    CHECK(!strcmp(v.guard, "phantom-throughput") && strstr(v.reason, "epoch time not down"),
          "samples/s up, epoch time flat -> phantom: %s", v.reason);
    /* Degraded convergence, however fast. */
    for (int i = 0; i < 3; i++)
        b[i] = meas(0.5, 1, 1.2);
    judge(a, b, 0, &v);
    CHECK(!strcmp(v.guard, "convergence") && strstr(v.reason, "loss") &&
              !strstr(v.reason, "time-to-target"),
          "losses 20%% higher -> convergence guard: %s", v.reason);
    judge(a, b, 1, &v);
    CHECK(!strcmp(v.guard, "convergence") && strstr(v.reason, "--objective time-to-target"),
          "a batch lever's higher per-epoch losses: the reason names time to target: %s",
          v.reason);
    /* A better loss is no reason to reject. */
    for (int i = 0; i < 3; i++)
        b[i] = meas(0.7, 1, 0.9);
    judge(a, b, 0, &v);
    CHECK(!strcmp(v.verdict, "accept"), "lower losses and faster -> accept: %s", v.reason);
    /* Non-finite. */
    for (int i = 0; i < 3; i++)
        b[i] = meas(0.5, 1, 1);
    b[1].loss[2] = NAN;
    judge(a, b, 0, &v);
    CHECK(!strcmp(v.guard, "non-finite"), "NaN loss -> guard: %s", v.reason);
    b[1] = meas(0.5, 1, 1);
    b[1].ok = 0;
    b[1].numeric = 1;
    snprintf(b[1].error, sizeof b[1].error, "non-finite loss at epoch 2");
    judge(a, b, 0, &v);
    CHECK(!strcmp(v.guard, "non-finite") && !strcmp(v.verdict, "guard-reject"),
          "a run that died of a NaN -> guard: %s", v.reason);
    /* Rising losses. */
    for (int i = 0; i < 3; i++) {
        b[i] = meas(0.7, 1, 1);
        b[i].loss[2] = 2.5;
    }
    judge(a, b, 0, &v);
    CHECK(!strcmp(v.guard, "rising-loss"), "rising losses -> guard: %s", v.reason);
    /* Time to target: lower is better, and the gain is oriented so that > 0 is better. */
    for (int i = 0; i < 3; i++) {
        a[i].ttt_s = 10 + 0.1 * i;
        a[i].converged = 1;
        b[i] = meas(0.7, 1, 1);
        b[i].ttt_s = 7 + 0.1 * i;
        b[i].converged = 1;
    }
    tune_judge(a, 3, b, 3, TUNE_OBJ_TTT, 0, 0.02, &v);
    CHECK(!strcmp(v.verdict, "accept") && v.d.med > 0.25 && v.base_med > v.cand_med,
          "time to target 30%% lower -> accept, gain +: %s", v.reason);
    tune_judge(b, 3, a, 3, TUNE_OBJ_TTT, 0, 0.02, &v);
    CHECK(!strcmp(v.verdict, "revert") && v.d.med < 0, "time to target higher -> revert: %s",
          v.reason);
    for (int i = 0; i < 3; i++)
        a[i] = meas(1.0 + 0.01 * i, 1, 1);
    /* A candidate that cannot run is blocked, not reverted. */
    for (int i = 0; i < 3; i++)
        b[i] = meas(0.7, 1, 1);
    b[2].ok = 0;
    snprintf(b[2].error, sizeof b[2].error, "exit status 2: bad configuration");
    judge(a, b, 0, &v);
    CHECK(!strcmp(v.verdict, "blocked"), "failed candidate -> blocked: %s", v.reason);
}

/* Sequential pairs (a[i], b[i]) on a busy host: the machine's speed drifts by 2x between
 * pairs, so neither side's range separates, but each pair's ratio is steady. */
static void test_pairs(void) {
    const double drift[6] = {1.0, 2.0, 1.3, 0.8, 1.7, 1.1};
    const double jitter[6] = {1.00, 1.01, 0.99, 1.005, 0.995, 1.0};
    tune_meas a[6], b[6];
    tune_verdict v;
    for (int i = 0; i < 6; i++) {
        a[i] = meas(drift[i], 1, 1);
        b[i] = meas(drift[i] * 0.85 * jitter[i], 1, 1);
    }
    tune_judge(a, 6, b, 6, TUNE_OBJ_THROUGHPUT, 0, 0.01, &v);
    CHECK(!strcmp(v.verdict, "accept") && v.pairs == 6 && v.d.lo > 0 && !v.firm,
          "busy host, steady +18%% per pair -> accept from the pairs: %s", v.reason);
    CHECK(strstr(v.reason, "99% interval") && strstr(v.reason, "over 6 pairs"),
          "the reason names the interval and the pairs: %s", v.reason);
    tune_judge(b, 6, a, 6, TUNE_OBJ_THROUGHPUT, 0, 0.01, &v);
    CHECK(!strcmp(v.verdict, "revert"), "... and the reverse -> revert: %s", v.reason);
    /* One pair (--repeats 1): no verdict, however large the change; it says what it needs. */
    a[0] = meas(1.0, 1, 1);
    b[0] = meas(1.0 / 1.16, 1, 1);
    tune_judge(a, 1, b, 1, TUNE_OBJ_THROUGHPUT, 0, 0.01, &v);
    CHECK(!strcmp(v.verdict, "inconclusive") && v.more_pairs == 2 &&
              strstr(v.reason, "needs at least 3 pairs") && strstr(v.reason, "+16.0%"),
          "one pair at +16%% -> no verdict, 2 more pairs: %s", v.reason);
    /* Noisy pairs: inconclusive, with the pairs that would likely decide it. */
    const double r[4] = {1.10, 0.98, 1.15, 1.01};
    for (int i = 0; i < 4; i++) {
        a[i] = meas(drift[i], 1, 1);
        b[i] = meas(drift[i] / r[i], 1, 1);
    }
    tune_judge(a, 4, b, 4, TUNE_OBJ_THROUGHPUT, 0, 0.01, &v);
    CHECK(!strcmp(v.verdict, "inconclusive") && v.more_pairs > 0 && strstr(v.reason, "more pair"),
          "noisy +6%% -> inconclusive, %d more pairs: %s", v.more_pairs, v.reason);
    /* A change within the floor: no number of pairs would make it a verdict. */
    const double q[4] = {1.002, 0.999, 1.001, 1.000};
    for (int i = 0; i < 4; i++)
        b[i] = meas(drift[i] / q[i], 1, 1);
    tune_judge(a, 4, b, 4, TUNE_OBJ_THROUGHPUT, 0, 0.01, &v);
    CHECK(!strcmp(v.verdict, "inconclusive") && v.more_pairs == -1 &&
              strstr(v.reason, "would not make it a verdict"),
          "+0.05%% -> within the floor for good: %s", v.reason);
    /* A failed candidate is firm at once: no more pairs. */
    b[0].ok = 0;
    tune_judge(a, 1, b, 1, TUNE_OBJ_THROUGHPUT, 0, 0.01, &v);
    CHECK(!strcmp(v.verdict, "blocked") && v.firm, "blocked is firm");
}

/* best.yml, tune.json and the summary line say one thing: the final paired check's. A lever
 * accepted in its trial (+16%) that the final check finds 57.5% slower is not recommended. */
static void test_best(void) {
    static tune_state S;
    static tune_trial trials[3];
    static tune_opts o;
    memset(&S, 0, sizeof S);
    memset(trials, 0, sizeof trials);
    memset(&o, 0, sizeof o);
    o.objective = TUNE_OBJ_THROUGHPUT;
    o.repeats = 3;
    o.max_repeats = 8;
    o.noise = 0.01;
    S.o = &o;
    snprintf(S.out, sizeof S.out, "%s/best-out", tmpdir);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", S.out, S.out);
    CHECK(system(cmd) == 0, "output folder");
    snprintf(S.host, sizeof S.host, "host");
    snprintf(S.cpu, sizeof S.cpu, "cpu");
    S.cls = "compute-bound";
    S.stopped = "complete";
    CHECK(parse("levers:\n  - name: dataloader_num_workers\n    values: [4]\n", &S.lv) == 0,
          "levers");
    for (int k = 0; k < TUNE_MAX_LEVERS; k++)
        S.order[k] = k == 0 ? 0 : -1;
    static tune_meas ba[3], ta[3], tb[3], fa[3], fb[3];
    for (int i = 0; i < 3; i++) {
        ba[i] = ta[i] = fa[i] = meas(1.0 + 0.002 * i, 1, 1);
        tb[i] = meas((1.0 + 0.002 * i) / 1.16, 1, 1);
        fb[i] = meas((1.0 + 0.002 * i) * 2.35, 1, 1);
    }
    S.trials = trials;
    S.baseline = &trials[0];
    snprintf(trials[0].id, sizeof trials[0].id, "baseline");
    trials[0].lever = -1;
    trials[0].a = ba;
    trials[0].na = 3;
    trials[0].done = 1;
    tune_trial *t = &trials[1];
    snprintf(t->id, sizeof t->id, "t01");
    t->lever = 0;
    snprintf(t->value, sizeof t->value, "4");
    tune_setting_put(&t->cand, 0, "4");
    t->a = ta, t->b = tb, t->na = t->nb = 3, t->done = 1;
    tune_judge(ta, 3, tb, 3, TUNE_OBJ_THROUGHPUT, 0, 0.01, &t->v);
    CHECK(!strcmp(t->v.verdict, "accept"), "the trial accepts: %s", t->v.reason);
    S.incumbent = t->cand;
    tune_trial *f = &trials[2];
    snprintf(f->id, sizeof f->id, "final");
    f->lever = -1;
    f->cand = S.incumbent;
    f->a = fa, f->b = fb, f->na = f->nb = 3, f->done = 1;
    tune_judge(fa, 3, fb, 3, TUNE_OBJ_THROUGHPUT, 0, 0.01, &f->v);
    CHECK(!strcmp(f->v.verdict, "revert"), "the final check reverts: %s", f->v.reason);
    S.final = f;
    S.ntrials = 3;
    CHECK(tune_write_outputs(&S) == 0, "outputs written: %s", err_msg());
    char p[1300], *txt = NULL, line[2000] = "";
    snprintf(p, sizeof p, "%s/best.yml", S.out);
    CHECK(fs_read_file(p, &txt, NULL) == 0, "best.yml read");
    CHECK(txt && !strstr(txt, "dataloader_num_workers: 4") && strstr(txt, "\n{}\n") &&
              strstr(txt, "not confirmed") && strstr(txt, "-57.4%") && strstr(txt, "revert"),
          "best.yml keeps no override and quotes the final check: %s", txt ? txt : "");
    free(txt);
    FILE *m = tmpfile();
    if (m) {
        tune_print_summary(&S, m);
        rewind(m);
        if (!fgets(line, sizeof line, m))
            line[0] = 0;
        fclose(m);
    }
    CHECK(strstr(line, "no override kept") && strstr(line, "-57.4%") && strstr(line, "revert"),
          "the summary line says the same: %s", line);
    snprintf(p, sizeof p, "%s/tune.json", S.out);
    txt = NULL;
    CHECK(fs_read_file(p, &txt, NULL) == 0 && strstr(txt, "\"overrides\":{}") &&
              strstr(txt, "\"confirmed\":false"),
          "tune.json: no override, not confirmed");
    free(txt);
    /* Confirmed: the override is kept, with the final check's own numbers. */
    for (int i = 0; i < 3; i++)
        fb[i] = meas((1.0 + 0.002 * i) / 1.16, 1, 1);
    tune_judge(fa, 3, fb, 3, TUNE_OBJ_THROUGHPUT, 0, 0.01, &f->v);
    CHECK(tune_write_outputs(&S) == 0, "outputs written again");
    snprintf(p, sizeof p, "%s/best.yml", S.out);
    txt = NULL;
    CHECK(fs_read_file(p, &txt, NULL) == 0 && strstr(txt, "dataloader_num_workers: 4") &&
              strstr(txt, "+16.0%") && strstr(txt, "accept"),
          "confirmed: best.yml keeps the override: %s", txt ? txt : "");
    free(txt);
}

static void test_journal(void) {
    char p[700];
    snprintf(p, sizeof p, "%s/journal.tsv", tmpdir);
    unlink(p);
    FILE *f = NULL;
    int rc = tune_journal_start(p, "sig1", 0, &f);
    CHECK(rc == 0 && f, "journal created");
    if (!f)
        return;
    tune_meas m = meas(0.8, 1, 1);
    snprintf(m.error, sizeof m.error, "tab\there\nnewline \\ backslash");
    snprintf(m.run_dir, sizeof m.run_dir, "/x/run");
    m.loss[1] = 1.2345678901234567;
    tune_journal_run(f, "t01", 'A', 0, &m);
    tune_journal_run(f, "t01", 'B', 0, &m);
    tune_journal_done(f, "t01");
    tune_journal_run(f, "t02", 'A', 0, &m); /* unfinished trial */
    fputs("run\tt02\tB\t0\tok=1\tthrough", f); /* torn last line */
    fclose(f);
    tune_journal j;
    rc = tune_journal_read(p, "sig1", &j);
    CHECK(rc == 0 && j.nruns == 3 && j.ndone == 1, "journal read: %d runs, %d done (%s)",
          j.nruns, j.ndone, err_msg());
    const tune_meas *r = tune_journal_find(&j, "t01", 'B', 0);
    CHECK(r && r->throughput == m.throughput && r->loss[1] == m.loss[1] &&
              !strcmp(r->error, m.error) && r->run.work.samples[0] == 36 &&
              !strcmp(r->run_dir, "/x/run"),
          "a run reads back exactly");
    CHECK(tune_journal_find(&j, "t02", 'A', 0) == NULL, "an unfinished trial is not reused");
    tune_journal_free(&j);
    FILE *g = fopen(p, "r");
    int lastc = -1;
    if (g && fseek(g, -1, SEEK_END) == 0)
        lastc = fgetc(g);
    if (g)
        fclose(g);
    CHECK(lastc == '\n', "the torn last line was cut off the file");
    rc = tune_journal_read(p, "sig2", &j);
    CHECK(rc == ERR_USAGE && strstr(err_msg(), "other settings"), "another tune's journal: %s",
          err_msg());
}

int main(int argc, char **argv) {
    tmpdir = argc > 1 ? argv[1] : "/tmp";
    snprintf(cfgpath, sizeof cfgpath, "%s/cfg.yml", tmpdir);
    FILE *f = fopen(cfgpath, "w");
    if (f) {
        fputs("problem_scale: 4\nunet_bottleneck_dim: 2\n", f);
        fclose(f);
    }
    cfg_argv[0] = "tune";
    cfg_argv[1] = "-c";
    cfg_argv[2] = cfgpath;
    cfg_argv[3] = NULL;
    test_levers();
    test_builtin();
    test_verdicts();
    test_pairs();
    test_best();
    test_journal();
    return test_report();
}
