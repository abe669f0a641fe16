/* test_algo: the choice of Conv3d algorithms (nn/algo.h): measurement with its accuracy check,
 * the cache (a choice is deterministic given it), pinning, forcing, the strict budget, bad
 * environment and files; and on real layers, that a measured call leaves the chosen
 * algorithm's exact result (the forward pass keeps the last run's output, the weight gradient
 * accumulates once). Usage: test_algo (a scratch directory under TMPDIR). */
#include "core/err.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "nn/algo.h"
#include "nn/gemm.h"
#include "nn/layers.h"
#include "nn/settings.h"
#include "test.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char dir[256];

/* ---- a synthetic job: each algorithm writes a known result, some slowly, some wrongly ------- */

#define NOUT 4096
static float outbuf[NOUT];
static int runs[NN_ALGO_COUNT];
static double err_of[NN_ALGO_COUNT];  /* relative error each algorithm writes */
static double slow_of[NN_ALGO_COUNT]; /* seconds each algorithm spends */

static int sleepy; /* the runs sleep instead of spinning: they get none of the CPUs */

static void spin(double s) {
    if (sleepy && s > 0) {
        const struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
        nanosleep(&ts, NULL);
        return;
    }
    const double t0 = time_now();
    while (time_now() - t0 < s) {
    }
}

static int seq[64], nseq; /* the algorithms in the order they ran */

static void fake_run(const nn_algo_job *j, int algo, float *dw) {
    runs[algo]++;
    if (nseq < 64)
        seq[nseq++] = algo;
    float *o = dw ? dw : outbuf;
    const size_t n = dw ? j->ndw : NOUT;
    for (size_t i = 0; i < n; i++) {
        const double v = sin(0.37 * (double)i) + 0.25;
        /* an error of err_of[algo] relative to each value, alternating in sign */
        double x = v * (1 + ((i & 1) ? err_of[algo] : -err_of[algo]));
        o[i] = j->key.prec == NN_BF16 ? nn_bf16_round((float)x) : (float)x;
    }
    spin(slow_of[algo]);
}

static nn_algo_job fake_job(int pass, nn_prec prec, int D, unsigned eligible, int rule) {
    nn_algo_job j = {.key = {.pass = pass, .prec = prec, .N = 1, .D = D, .H = D, .W = D,
                             .ca = 8, .cb = 0, .cout = 8},
                     .eligible = eligible,
                     .rule = rule,
                     .run = fake_run,
                     .out = {outbuf, NULL},
                     .nout = {NOUT, 0},
                     .ndw = pass == NN_PASS_BWD_WEIGHT ? 27 * 8 * 8 : 0};
    return j;
}

static void reset_runs(void) {
    memset(runs, 0, sizeof runs);
    nseq = 0;
}

static const nn_algo_choice *last_choice(void) {
    return nn_algo_get(nn_algo_count() - 1);
}

static int file_has(const char *path, const char *needle) {
    char *data = NULL;
    size_t n;
    if (fs_read_file(path, &data, &n))
        return 0;
    const int has = strstr(data, needle) != NULL;
    free(data);
    return has;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

/* Field `field` (0-based: 15 the time, 17-19 the runner-up, its time and the timings' count)
 * of every entry in the cache file set to value; value NULL: each entry cut before the field. */
static void cache_set(const char *path, int field, const char *value) {
    char *data = NULL;
    size_t n;
    if (fs_read_file(path, &data, &n))
        return;
    FILE *f = fopen(path, "w");
    for (char *line = data, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        if (line[0] == '#') {
            fprintf(f, "%s\n", line);
            continue;
        }
        const char *p = line;
        for (int i = 0; i < field && p; i++)
            p = strchr(p, '\t') ? strchr(p, '\t') + 1 : NULL;
        if (!p) {
            fprintf(f, "%s\n", line);
            continue;
        }
        const char *end = strchr(p, '\t');
        if (value)
            fprintf(f, "%.*s%s%s\n", (int)(p - line), line, value, end ? end : "");
        else
            fprintf(f, "%.*s\n", (int)(p - line - 1), line);
    }
    fclose(f);
    free(data);
}

static void cache_set_ms(const char *path, const char *ms) {
    cache_set(path, 15, ms);
}

#define BIT(a) (1u << (a))

/* The cache file rewritten as head + its text (less its first line with drop_title), then j
 * picked in a new process's state (nn_algo_reset). */
static int repick(const char *cache, const char *head, int drop_title, nn_algo_job *j,
                  int *done) {
    char *data = NULL;
    size_t n;
    fs_read_file(cache, &data, &n);
    const char *rest = data ? data : "";
    if (drop_title && strchr(rest, '\n'))
        rest = strchr(rest, '\n') + 1;
    FILE *f = fopen(cache, "w");
    fprintf(f, "%s%s", head, rest);
    fclose(f);
    free(data);
    nn_algo_reset();
    reset_runs();
    return nn_algo_pick(j, done);
}

static void test_names(void) {
    int ok = 1;
    for (int a = 0; a < NN_ALGO_COUNT; a++)
        ok &= nn_algo_parse(nn_algo_name(a)) == a;
    CHECK(ok && nn_algo_parse("bogus") < 0 && nn_algo_name(NN_ALGO_COUNT) == NULL,
          "algorithm names round-trip, unknown ones are refused");
}

/* Measure mode with the cache file dir/name (into cache), every synthetic time quiet (the runs
 * spin on one thread of the team; a real busy host: test_busy_host), a new process's state. */
static void measure_with_cache(char *cache, size_t n, const char *name) {
    snprintf(cache, n, "%s/%s", dir, name);
    setenv("SCAFFOLD_NN_ALGO_CACHE", cache, 1);
    unsetenv("SCAFFOLD_NN_ALGO");
    setenv("SCAFFOLD_NN_ALGO_QUIET", "0", 1);
    nn_settings_reload();
    nn_algo_reset();
    nn_algo_set_mode(NN_ALGO_MODE_MEASURE);
}

static void test_measure_and_cache(void) {
    char cache[300];
    measure_with_cache(cache, sizeof cache, "sub/cache.tsv");
    const unsigned el = BIT(NN_ALGO_DIRECT) | BIT(NN_ALGO_WINOGRAD);

    /* the faster correct algorithm wins; each runs at least once, the reference first */
    memset(err_of, 0, sizeof err_of), memset(slow_of, 0, sizeof slow_of);
    slow_of[NN_ALGO_DIRECT] = 0.004;
    reset_runs();
    nn_algo_job j = fake_job(NN_PASS_FWD, NN_FP32, 16, el, NN_ALGO_DIRECT);
    int done, a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_WINOGRAD && runs[NN_ALGO_DIRECT] >= 1 && runs[NN_ALGO_WINOGRAD] >= 1 &&
              done == 1 && !strcmp(last_choice()->how, "measured"),
          "measure: the faster algorithm (%s, done %d, runs %d/%d)", nn_algo_name(a), done,
          runs[NN_ALGO_DIRECT], runs[NN_ALGO_WINOGRAD]);
    int measured;
    nn_algo_select_seconds(&measured);
    CHECK(measured == 1 && file_has(cache, "\tfwd\tfp32\t1\t16\t16\t16\t8\t0\t0\t8\twinograd\t"),
          "measure: one measurement, stored in the cache file (made with its folder)");

    /* the same shape again: no measurement */
    reset_runs();
    a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_WINOGRAD && runs[NN_ALGO_DIRECT] + runs[NN_ALGO_WINOGRAD] == 0 && !done,
          "a shape is measured once per process");

    /* a faster algorithm outside the budget is dropped (1% off an fp32 result) */
    err_of[NN_ALGO_WINOGRAD] = 0.01;
    reset_runs();
    j = fake_job(NN_PASS_FWD, NN_FP32, 20, el, NN_ALGO_WINOGRAD);
    a = nn_algo_pick(&j, &done);
    /* (the later rounds run only direct: its result is the output, done) */
    CHECK(a == NN_ALGO_DIRECT && last_choice()->ms_all[NN_ALGO_WINOGRAD] < 0 && done &&
              runs[NN_ALGO_WINOGRAD] == 1 && nseq > 0 && seq[nseq - 1] == NN_ALGO_DIRECT,
          "measure: a result outside the fp32 budget is dropped, not run again (%s)",
          nn_algo_name(a));

    /* bf16: 0.5% off passes the budget (2% of the norm, 1 ulp + 3% per element), 5% does not */
    const unsigned el16 = BIT(NN_ALGO_DIRECT_BF16) | BIT(NN_ALGO_WINOGRAD_BF16);
    slow_of[NN_ALGO_DIRECT_BF16] = 0.004, err_of[NN_ALGO_WINOGRAD_BF16] = 0.005;
    j = fake_job(NN_PASS_FWD, NN_BF16, 24, el16, NN_ALGO_DIRECT_BF16);
    a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_WINOGRAD_BF16, "bf16: an error of 0.5%% is within the budget (%s)",
          nn_algo_name(a));
    err_of[NN_ALGO_WINOGRAD_BF16] = 0.05;
    j = fake_job(NN_PASS_FWD, NN_BF16, 28, el16, NN_ALGO_WINOGRAD_BF16);
    a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_DIRECT_BF16, "bf16: an error of 5%% is not (%s)", nn_algo_name(a));

    /* bf16 where AMX applies: the direct walks (fp32 FMAs, vdpbf16ps) are not measured, AMX is
     * the reference (an error of 5% in winograd-bf16 is still caught against it); with nothing
     * else eligible, AMX without a measurement. fp32 is not pruned. */
    const unsigned elx = BIT(NN_ALGO_DIRECT) | BIT(NN_ALGO_DIRECT_BF16) | BIT(NN_ALGO_AMX);
    memset(slow_of, 0, sizeof slow_of);
    slow_of[NN_ALGO_AMX] = 0.004;
    reset_runs();
    j = fake_job(NN_PASS_FWD, NN_BF16, 32, elx | BIT(NN_ALGO_WINOGRAD_BF16), NN_ALGO_AMX);
    a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_AMX && runs[NN_ALGO_DIRECT] + runs[NN_ALGO_DIRECT_BF16] == 0 &&
              runs[NN_ALGO_AMX] >= 1 && runs[NN_ALGO_WINOGRAD_BF16] == 1 && nseq > 0 &&
              seq[0] == NN_ALGO_AMX && last_choice()->ms_all[NN_ALGO_WINOGRAD_BF16] < 0,
          "bf16 with AMX: the direct walks not measured, AMX the reference (%s, runs %d %d %d)",
          nn_algo_name(a), runs[NN_ALGO_DIRECT], runs[NN_ALGO_DIRECT_BF16], runs[NN_ALGO_AMX]);
    reset_runs();
    j = fake_job(NN_PASS_BWD_WEIGHT, NN_BF16, 32, elx, NN_ALGO_DIRECT);
    j.rule = nn_algo_rule(&j);
    a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_AMX && runs[NN_ALGO_DIRECT] + runs[NN_ALGO_DIRECT_BF16] +
                                      runs[NN_ALGO_AMX] == 0 &&
              !strcmp(last_choice()->how, "only"),
          "bf16 with AMX and no other candidate: AMX, nothing run (%s, %s)", nn_algo_name(a),
          last_choice()->how);
    reset_runs();
    j = fake_job(NN_PASS_FWD, NN_FP32, 32, BIT(NN_ALGO_DIRECT) | BIT(NN_ALGO_AMX_X3),
                 NN_ALGO_DIRECT);
    a = nn_algo_pick(&j, &done);
    CHECK(runs[NN_ALGO_DIRECT] >= 1 && runs[NN_ALGO_AMX_X3] >= 1,
          "fp32: direct still measured beside amx-x3 (runs %d %d)", runs[NN_ALGO_DIRECT],
          runs[NN_ALGO_AMX_X3]);
    err_of[NN_ALGO_WINOGRAD_BF16] = 0;
    memset(slow_of, 0, sizeof slow_of);

    /* the weight gradient: measured into a scratch buffer, never "done" (it accumulates) */
    err_of[NN_ALGO_WINOGRAD] = 0;
    slow_of[NN_ALGO_DIRECT] = 0.004;
    reset_runs();
    j = fake_job(NN_PASS_BWD_WEIGHT, NN_FP32, 16, el, NN_ALGO_DIRECT);
    a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_WINOGRAD && !done && runs[NN_ALGO_WINOGRAD] >= 1,
          "weight gradient: measured on scratch, run again by the caller");

    /* deterministic given the cache: a new process (reset) takes the cached choices without
     * measuring, even where timing would now choose otherwise; its first use is the checked
     * run of the cached algorithm, the call's own (done) */
    nn_algo_reset();
    slow_of[NN_ALGO_DIRECT] = 0, slow_of[NN_ALGO_WINOGRAD] = 0.004;
    reset_runs();
    j = fake_job(NN_PASS_FWD, NN_FP32, 16, el, NN_ALGO_DIRECT);
    a = nn_algo_pick(&j, &done);
    nn_algo_select_seconds(&measured);
    CHECK(a == NN_ALGO_WINOGRAD && measured == 0 && runs[NN_ALGO_DIRECT] == 0 &&
              runs[NN_ALGO_WINOGRAD] == 1 && done && !strcmp(last_choice()->how, "cached"),
          "deterministic given the cache: %s, %d measured, done %d", nn_algo_name(a), measured,
          done);
    reset_runs();
    a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_WINOGRAD && runs[0] + runs[1] == 0 && !done,
          "a cached choice is checked once per process");
    /* a cached choice the shape cannot take (not eligible) is measured again */
    j = fake_job(NN_PASS_FWD, NN_FP32, 16, el, NN_ALGO_DIRECT);
    j.key.D = 20; /* cached: direct */
    j.eligible = BIT(NN_ALGO_WINOGRAD) | BIT(NN_ALGO_DIRECT_BF16);
    j.key.prec = NN_FP32;
    a = nn_algo_pick(&j, &done);
    CHECK(a != NN_ALGO_DIRECT, "a cached choice that does not apply is not used");

    /* a malformed cache line is skipped (with a warning), the others still read */
    j = fake_job(NN_PASS_FWD, NN_FP32, 16, el, NN_ALGO_DIRECT);
    a = repick(cache, "garbage line\nAMD\tx\t2\tconv3d\tfwd\tfp32\t-1\n", 0, &j, &done);
    CHECK(a == NN_ALGO_WINOGRAD && runs[NN_ALGO_DIRECT] == 0 &&
              !strcmp(last_choice()->how, "cached"),
          "malformed cache lines are skipped");

    /* a cache written by other kernels (an older title line) is measured again, then
     * rewritten with this revision's title */
    a = repick(cache, "# scaffold nn algorithm choices v1\n", 1, &j, &done);
    nn_algo_select_seconds(&measured);
    CHECK(a == NN_ALGO_DIRECT && measured == 1 && !strcmp(last_choice()->how, "measured") &&
              file_has(cache, "choices v1, kernels "),
          "a cache of other kernels is measured again and rewritten (%s, %d measured)",
          nn_algo_name(a), measured);

    /* a cached time the algorithm now beats by 1.5x was taken on a busy host: measured again,
     * the cache line replaced; a cached time it does not beat stays (the weight gradient's
     * check runs on scratch: the caller still runs it) */
    slow_of[NN_ALGO_DIRECT] = 0.004, slow_of[NN_ALGO_WINOGRAD] = 0;
    nn_algo_reset();
    j = fake_job(NN_PASS_BWD_WEIGHT, NN_FP32, 16, el, NN_ALGO_DIRECT);
    a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_WINOGRAD && !strcmp(last_choice()->how, "measured") &&
              file_has(cache, "\tbwd_weight\tfp32\t1\t16\t16\t16\t8\t0\t0\t8\twinograd\t"),
          "a weight gradient measured and cached (%s)", last_choice()->how);
    cache_set_ms(cache, "1000.000");
    nn_algo_reset();
    reset_runs();
    a = nn_algo_pick(&j, &done);
    nn_algo_select_seconds(&measured);
    CHECK(a == NN_ALGO_WINOGRAD && measured == 1 && !strcmp(last_choice()->how, "measured") &&
              last_choice()->ms < 1000 && !done &&
              !file_has(cache, "\tbwd_weight\tfp32\t1\t16\t16\t16\t8\t0\t0\t8\twinograd\t1000"),
          "a cached time 1.5x too long: measured again, the cache line replaced (%s, %d)",
          last_choice()->how, measured);
    cache_set_ms(cache, "0.001");
    nn_algo_reset();
    reset_runs();
    a = nn_algo_pick(&j, &done);
    nn_algo_select_seconds(&measured);
    CHECK(a == NN_ALGO_WINOGRAD && measured == 0 && runs[NN_ALGO_WINOGRAD] == 1 && !done &&
              !strcmp(last_choice()->how, "cached"),
          "a cached time not beaten stays; the weight gradient's check is on scratch (%s)",
          last_choice()->how);
    slow_of[NN_ALGO_DIRECT] = 0, slow_of[NN_ALGO_WINOGRAD] = 0.004;

    /* short passes: measured in up to three interleaved rounds, each algorithm's best kept;
     * one more than 1.5x slower than the fastest is not run again */
    /* (as fast as each other, 15 ms: a run slowed by 7 ms on a busy host would drop one) */
    nn_algo_reset();
    slow_of[NN_ALGO_DIRECT] = 0.015, slow_of[NN_ALGO_WINOGRAD] = 0.015;
    reset_runs();
    j = fake_job(NN_PASS_FWD, NN_FP32, 44, el, NN_ALGO_DIRECT);
    a = nn_algo_pick(&j, &done);
    int alt = nseq == 6;
    for (int i = 0; alt && i < 6; i++)
        alt = seq[i] == (i % 2 ? NN_ALGO_WINOGRAD : NN_ALGO_DIRECT);
    CHECK(alt && last_choice()->ms_all[NN_ALGO_DIRECT] >= 15.0 &&
              last_choice()->ms_all[NN_ALGO_WINOGRAD] >= 15.0 &&
              done == (a == NN_ALGO_WINOGRAD),
          "three interleaved rounds, the reference first in each (%d runs)", nseq);
    /* (10x: the fastest's runs would have to be slowed by 13 ms for the other to run again) */
    slow_of[NN_ALGO_DIRECT] = 0.02, slow_of[NN_ALGO_WINOGRAD] = 0.002;
    reset_runs();
    j = fake_job(NN_PASS_FWD, NN_FP32, 48, el, NN_ALGO_DIRECT);
    a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_WINOGRAD && runs[NN_ALGO_DIRECT] == 1 && runs[NN_ALGO_WINOGRAD] == 3,
          "an algorithm 10x slower runs once, the fastest three times (%d, %d)",
          runs[NN_ALGO_DIRECT], runs[NN_ALGO_WINOGRAD]);
    slow_of[NN_ALGO_DIRECT] = 0, slow_of[NN_ALGO_WINOGRAD] = 0.004;

    /* rule mode: no measurement, no cache */
    nn_algo_reset();
    nn_algo_set_mode(NN_ALGO_MODE_RULE);
    reset_runs();
    j = fake_job(NN_PASS_FWD, NN_FP32, 40, el, NN_ALGO_DIRECT);
    a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_DIRECT && runs[0] + runs[1] == 0 && !strcmp(last_choice()->how, "rule"),
          "rule mode: the rule, nothing measured");
    /* SCAFFOLD_NN_ALGO=measure overrides the program's mode */
    setenv("SCAFFOLD_NN_ALGO", "measure", 1);
    nn_settings_reload();
    nn_algo_reset();
    CHECK(nn_algo_mode() == NN_ALGO_MODE_MEASURE, "SCAFFOLD_NN_ALGO=measure");
    unsetenv("SCAFFOLD_NN_ALGO");
    nn_settings_reload();

    /* an unwritable cache: a warning, the choice kept in memory */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/sub/cache.tsv/x.tsv", dir); /* under a file */
    setenv("SCAFFOLD_NN_ALGO_CACHE", bad, 1);
    nn_settings_reload();
    nn_algo_reset();
    nn_algo_set_mode(NN_ALGO_MODE_MEASURE);
    j = fake_job(NN_PASS_FWD, NN_FP32, 44, el, NN_ALGO_DIRECT);
    a = nn_algo_pick(&j, &done);
    CHECK(a >= 0 && nn_algo_count() == 1, "an unwritable cache does not stop the choice");
    setenv("SCAFFOLD_NN_ALGO_CACHE", "0", 1);
    nn_settings_reload();
    nn_algo_reset();
    CHECK(nn_algo_cache_path() == NULL, "SCAFFOLD_NN_ALGO_CACHE=0: no cache file");
    unsetenv("SCAFFOLD_NN_ALGO_QUIET");
    nn_settings_reload();
}

static void test_pin_force_budget(void) {
    char pin[300];
    snprintf(pin, sizeof pin, "%s/pin.tsv", dir);
    setenv("SCAFFOLD_NN_ALGO_CACHE", "0", 1);
    unsetenv("SCAFFOLD_NN_ALGO");
    nn_settings_reload();
    nn_algo_reset();
    nn_algo_set_mode(NN_ALGO_MODE_MEASURE);
    const unsigned el = BIT(NN_ALGO_DIRECT) | BIT(NN_ALGO_WINOGRAD);
    memset(err_of, 0, sizeof err_of), memset(slow_of, 0, sizeof slow_of);
    /* a run's choices, written as the run folder's file, then pinned: the same choices, nothing
     * measured, whatever the timings say now */
    slow_of[NN_ALGO_WINOGRAD] = 0.004;
    nn_algo_job j = fake_job(NN_PASS_FWD, NN_FP32, 16, el, NN_ALGO_WINOGRAD);
    int done, a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_DIRECT && nn_algo_write(pin) == 0 && file_has(pin, "\tmeasured\n"),
          "the choices written with how they were made");
    slow_of[NN_ALGO_WINOGRAD] = 0, slow_of[NN_ALGO_DIRECT] = 0.004;
    setenv("SCAFFOLD_NN_ALGO_PIN", pin, 1);
    nn_settings_reload();
    nn_algo_reset();
    CHECK(nn_algo_init() == 0, "a pinned file is read: %s", err_msg());
    reset_runs();
    a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_DIRECT && runs[0] + runs[1] == 0 && !strcmp(last_choice()->how, "pinned"),
          "pinned: the file's choice, nothing measured");
    /* a shape not in the pin is measured as usual */
    j.key.D = 12;
    a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_WINOGRAD && !strcmp(last_choice()->how, "measured"),
          "a shape the pin lacks is measured");

    /* bad pins and bad SCAFFOLD_NN_ALGO: ERR_CONFIG naming the file (and line) */
    char badpin[300];
    snprintf(badpin, sizeof badpin, "%s/bad.tsv", dir);
    write_text(badpin, "# comment\nAMD\tavx512\t2\tconv3d\tfwd\tfp32\t1\t16\t16\t16\t8\t0\t0\t8"
                       "\tnosuchalgo\t1.0\n");
    setenv("SCAFFOLD_NN_ALGO_PIN", badpin, 1);
    nn_settings_reload();
    nn_algo_reset();
    int rc = nn_algo_init();
    CHECK(rc == ERR_CONFIG && strstr(err_msg(), "bad.tsv line 2"),
          "a malformed pin is refused, naming file and line: %s", err_msg());
    snprintf(badpin, sizeof badpin, "%s/none.tsv", dir);
    setenv("SCAFFOLD_NN_ALGO_PIN", badpin, 1);
    nn_settings_reload();
    nn_algo_reset();
    rc = nn_algo_init();
    CHECK(rc == ERR_CONFIG && strstr(err_msg(), "none.tsv"), "a missing pin is refused: %s",
          err_msg());
    unsetenv("SCAFFOLD_NN_ALGO_PIN");
    setenv("SCAFFOLD_NN_ALGO", "fastest", 1);
    nn_settings_reload();
    nn_algo_reset();
    rc = nn_algo_init();
    CHECK(rc == ERR_CONFIG && strstr(err_msg(), "SCAFFOLD_NN_ALGO=fastest"),
          "an unknown SCAFFOLD_NN_ALGO is refused: %s", err_msg());

    /* forcing: the named algorithm where it applies, the rule elsewhere */
    setenv("SCAFFOLD_NN_ALGO", "winograd", 1);
    nn_settings_reload();
    nn_algo_reset();
    reset_runs();
    j = fake_job(NN_PASS_FWD, NN_FP32, 16, el, NN_ALGO_DIRECT);
    a = nn_algo_pick(&j, &done);
    j.key.D = 18, j.eligible = BIT(NN_ALGO_DIRECT);
    const int b = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_WINOGRAD && b == NN_ALGO_DIRECT && runs[0] + runs[1] == 0,
          "forced: where it applies (%s), else the rule (%s)", nn_algo_name(a), nn_algo_name(b));
    unsetenv("SCAFFOLD_NN_ALGO");
    nn_settings_reload();

    /* the strict budget leaves winograd-bf16 out of the rule and the measurement */
    setenv("SCAFFOLD_NN_ALGO_BUDGET", "strict", 1);
    nn_settings_reload();
    nn_algo_reset();
    const unsigned el16 = BIT(NN_ALGO_DIRECT_BF16) | BIT(NN_ALGO_WINOGRAD_BF16);
    slow_of[NN_ALGO_DIRECT_BF16] = 0.004;
    reset_runs();
    j = fake_job(NN_PASS_FWD, NN_BF16, 16, el16, NN_ALGO_WINOGRAD_BF16);
    j.rule = nn_algo_rule(&j);
    a = nn_algo_pick(&j, &done);
    /* the rule's next choice: the pair kernels, or on an AMX CPU (vdpbf16ps slow there) the
     * fp32 kernels */
    const int next = nn_isa_amx() ? NN_ALGO_DIRECT : NN_ALGO_DIRECT_BF16;
    CHECK(j.rule == next && a == next && runs[NN_ALGO_WINOGRAD_BF16] == 0,
          "strict: winograd-bf16 neither the rule nor measured (%s)", nn_algo_name(a));
    unsetenv("SCAFFOLD_NN_ALGO_BUDGET");
    nn_settings_reload();
    nn_algo_reset();
    j.rule = nn_algo_rule(&j);
    CHECK(j.rule == NN_ALGO_WINOGRAD_BF16, "default budget: the rule takes winograd-bf16");
}

/* ---- real layers ---------------------------------------------------------------------------- */

static float *randv(size_t n, unsigned seed, float scale, int bf16) {
    float *p = malloc((n + 16) * sizeof(float));
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        const float v = ((float)(s >> 8) / 16777216.0f * 2 - 1) * scale;
        p[i] = bf16 ? nn_bf16_round(v) : v;
    }
    return p;
}

static float *ws_alloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (n + 16) * sizeof(float)))
        exit(1);
    return memset(p, 0, (n + 16) * sizeof(float));
}

/* One pass of a Conv3d: 0 forward into y, 1 input gradient into dx, 2 weight gradient into dw. */
static void conv_pass(int pass, float *y, float *dx, float *dw, const float *x, const float *w,
                      const float *dy, int D, int cin, int cout, nn_prec prec, float *ws) {
    if (pass == 0)
        nn_conv3d_forward_p(y, x, cin, NULL, 0, w, cout, 1, D, D, D, prec, NULL, ws);
    else
        nn_conv3d_backward_p(pass == 1 ? dx : NULL, NULL, pass == 2 ? dw : NULL, dy, x, cin, NULL,
                             0, w, cout, 1, D, D, D, prec, NULL, ws);
}

/* Measure mode on a Conv3d (forward, input and weight gradient) against the same calls with
 * the chosen algorithms forced, and against a new process's calls with those choices cached:
 * bit-identical (the measured call keeps exactly the chosen algorithm's output, the cached
 * call's check run is its own output; the weight gradient adds once into what dw held). */
static void test_real(nn_prec prec, int D, int cin, int cout) {
    const size_t P = (size_t)D * D * D, nw = 27 * (size_t)cin * cout;
    const int bf = prec == NN_BF16;
    float *x = randv(P * cin, 1, 1, bf), *w = randv(nw, 2, 0.1f, bf);
    float *dy = randv(P * cout, 3, 1, bf);
    float *ws = ws_alloc(nn_conv3d_ws_floats(1, D, D, D, cin, cout));
    float *y[3], *dx[3], *dw[3];
    int chosen[3], cached = 0;
    char cache[300];
    snprintf(cache, sizeof cache, "%s/real.tsv", dir);
    unlink(cache);
    setenv("SCAFFOLD_NN_ALGO_CACHE", cache, 1);
    setenv("SCAFFOLD_NN_ALGO_QUIET", "0", 1); /* cached whatever the host */
    for (int r = 0; r < 3; r++) {
        y[r] = ws_alloc(P * cout), dx[r] = ws_alloc(P * cin), dw[r] = randv(nw, 4, 1, 0);
        if (r != 1) {
            if (r == 2) /* cached times no run beats 1.5x: kept, not measured again */
                cache_set_ms(cache, "0.001");
            setenv("SCAFFOLD_NN_ALGO", "measure", 1);
            nn_settings_reload();
            nn_algo_reset();
        }
        for (int pass = 0; pass < 3; pass++) {
            if (r == 1) { /* each pass forced to what the measurement chose */
                setenv("SCAFFOLD_NN_ALGO", nn_algo_name(chosen[pass]), 1);
                nn_settings_reload();
                nn_algo_reset();
            }
            conv_pass(pass, y[r], dx[r], dw[r], x, w, dy, D, cin, cout, prec, ws);
            if (r == 0)
                chosen[pass] = nn_conv3d_algo(pass, 1, D, D, D, cin, 0, cout, 0, prec);
            if (r == 2)
                cached += !strcmp(last_choice()->how, "cached") &&
                          last_choice()->algo == chosen[pass];
        }
        if (r == 0) {
            int measured;
            nn_algo_select_seconds(&measured);
            CHECK(measured == 3, "%s conv3d %d^3 %d->%d: three passes measured (%d)",
                  bf ? "bf16" : "fp32", D, cin, cout, measured);
        }
    }
    CHECK(cached == 3, "%s conv3d %d^3 %d->%d: a new process takes the three cached choices (%d)",
          bf ? "bf16" : "fp32", D, cin, cout, cached);
    for (int r = 0; r < 3; r += 2)
        CHECK(!memcmp(y[r], y[1], P * cout * sizeof(float)) &&
                  !memcmp(dx[r], dx[1], P * cin * sizeof(float)) &&
                  !memcmp(dw[r], dw[1], nw * sizeof(float)),
              "%s conv3d %d^3 %d->%d: a %s call gives the chosen algorithms' bits (%s, %s, %s)",
              bf ? "bf16" : "fp32", D, cin, cout, r ? "cached" : "measured",
              nn_algo_name(chosen[0]), nn_algo_name(chosen[1]), nn_algo_name(chosen[2]));
    unsetenv("SCAFFOLD_NN_ALGO");
    unsetenv("SCAFFOLD_NN_ALGO_QUIET");
    setenv("SCAFFOLD_NN_ALGO_CACHE", "0", 1);
    nn_settings_reload();
    nn_algo_reset();
    for (int r = 0; r < 3; r++)
        free(y[r]), free(dx[r]), free(dw[r]);
    free(x), free(w), free(dy), free(ws);
}

/* A measurement on a busy host: threads spinning on every CPU while a real Conv3d is measured
 * (each run long enough, 10+ ms, to span many scheduler slices): the team gets about a third of
 * its CPUs, the choice is used and marked, and not written to the cache. */
static volatile int spin_stop;

static void *spinner(void *arg) {
    (void)arg;
    while (!spin_stop) {
    }
    return NULL;
}

static void test_busy_host(void) {
    const int D = 32, cin = 64, cout = 64;
    const size_t P = (size_t)D * D * D, nw = 27 * (size_t)cin * cout;
    float *x = randv(P * cin, 1, 1, 0), *w = randv(nw, 2, 0.1f, 0), *y = ws_alloc(P * cout);
    float *ws = ws_alloc(nn_conv3d_ws_floats(1, D, D, D, cin, cout));
    char cache[300];
    snprintf(cache, sizeof cache, "%s/busy.tsv", dir);
    setenv("SCAFFOLD_NN_ALGO_CACHE", cache, 1);
    setenv("SCAFFOLD_NN_ALGO", "measure", 1);
    nn_settings_reload();
    nn_algo_reset();
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    const int ns = ncpu > 0 && ncpu < 64 ? 2 * (int)ncpu : 4;
    pthread_t th[128];
    int started = 0;
    spin_stop = 0;
    for (int i = 0; i < ns; i++)
        started += pthread_create(&th[started], NULL, spinner, NULL) == 0;
    conv_pass(0, y, NULL, NULL, x, w, NULL, D, cin, cout, NN_FP32, ws);
    spin_stop = 1;
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    const nn_algo_choice *c = last_choice();
    CHECK(started == ns && c && !strcmp(c->how, "measured") && c->busy &&
              !file_has(cache, "\tfwd\tfp32\t1\t32\t32\t32\t64\t0\t0\t64\t"),
          "a measurement while %d threads spin on %ld CPUs: used, marked busy, not cached "
          "(%s, busy %d)",
          ns, ncpu, c ? c->how : "none", c ? c->busy : -1);
    unsetenv("SCAFFOLD_NN_ALGO");
    setenv("SCAFFOLD_NN_ALGO_CACHE", "0", 1);
    nn_settings_reload();
    nn_algo_reset();
    free(x), free(w), free(y), free(ws);
}

/* The workspace: measure() zeroes the part of it beyond what earlier measurements on the same
 * workspace zeroed, before the first timed run (the first algorithm to reach fresh pages paid
 * their faults: winograd's first run of a 16^3 128 + 128 -> 128 forward took 9-32 ms where it
 * runs in 7-8, and amx-x3 was kept). A runner that records whether the job's workspace was zero
 * when it first ran, then writes it whole. */
#define NWS 2048
static float wsbuf[NWS];
static int ws_first_zero[2], ws_runs; /* [0..n): zero, [n..nws): zero, at the first run */
static void ws_run(const nn_algo_job *j, int algo, float *dw) {
    if (!ws_runs++) {
        ws_first_zero[0] = ws_first_zero[1] = 1;
        for (size_t i = 0; i < j->nws; i++)
            ws_first_zero[i < NWS / 2 ? 0 : 1] &= wsbuf[i] == 0.0f;
    }
    for (size_t i = 0; i < j->nws; i++)
        wsbuf[i] = 5.0f;
    fake_run(j, algo, dw);
}

static void test_workspace_touch(void) {
    char cache[300];
    measure_with_cache(cache, sizeof cache, "ws.tsv");
    const unsigned el = BIT(NN_ALGO_DIRECT) | BIT(NN_ALGO_WINOGRAD);
    memset(err_of, 0, sizeof err_of), memset(slow_of, 0, sizeof slow_of);
    for (int i = 0; i < NWS; i++)
        wsbuf[i] = 3.0f;
    nn_algo_job j = fake_job(NN_PASS_FWD, NN_FP32, 20, el, NN_ALGO_DIRECT);
    j.run = ws_run, j.ws = wsbuf, j.nws = NWS / 2;
    ws_runs = 0;
    int done;
    nn_algo_pick(&j, &done);
    CHECK(ws_runs >= 2 && ws_first_zero[0] && wsbuf[NWS / 2] == 3.0f,
          "measure: the workspace zeroed before the first run, nothing past it (%d runs)",
          ws_runs);
    /* a larger one on the same workspace: only the new part */
    j.key.D = j.key.H = j.key.W = 24, j.nws = NWS;
    ws_runs = 0;
    nn_algo_pick(&j, &done);
    CHECK(ws_runs >= 2 && !ws_first_zero[0] && ws_first_zero[1],
          "measure: a larger workspace zeroed past what was zeroed before only");
    /* none: nothing to touch */
    j.key.D = j.key.H = j.key.W = 28, j.ws = NULL, j.nws = 0, j.run = fake_run;
    reset_runs();
    const int a = nn_algo_pick(&j, &done);
    CHECK(runs[NN_ALGO_DIRECT] >= 1 && runs[NN_ALGO_WINOGRAD] >= 1,
          "measure without a workspace (%s)", nn_algo_name(a));
    unsetenv("SCAFFOLD_NN_ALGO_QUIET");
    nn_settings_reload();
}

/* The runner-up: stored with the choice; while close, timed beside the cached choice at each
 * process's first use, the two times averaged over those pairs; where the runner-up's mean
 * becomes the lower, the cache swaps them for later processes and this one keeps its choice. */
static void test_runner_up(void) {
    char cache[300];
    measure_with_cache(cache, sizeof cache, "runner-up.tsv");
    const unsigned el = BIT(NN_ALGO_DIRECT) | BIT(NN_ALGO_WINOGRAD);
    memset(err_of, 0, sizeof err_of), memset(slow_of, 0, sizeof slow_of);
    slow_of[NN_ALGO_DIRECT] = 0.005, slow_of[NN_ALGO_WINOGRAD] = 0.004;
    nn_algo_job j = fake_job(NN_PASS_FWD, NN_FP32, 16, el, NN_ALGO_DIRECT);
    int done, a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_WINOGRAD && file_has(cache, "\twinograd\t4.") &&
              file_has(cache, "\tmeasured\tdirect\t5.") && file_has(cache, "\t1\n"),
          "measured: the choice cached with its runner-up and one timing (%s)",
          nn_algo_name(a));

    /* direct now faster: this process keeps winograd (the cache's choice), having run direct
     * once before it (winograd's run is the call's output); the means (4, 3) swap them */
    slow_of[NN_ALGO_DIRECT] = 0.001;
    nn_algo_reset();
    reset_runs();
    a = nn_algo_pick(&j, &done);
    int measured;
    nn_algo_select_seconds(&measured);
    CHECK(a == NN_ALGO_WINOGRAD && measured == 0 && done && nseq == 2 &&
              seq[0] == NN_ALGO_DIRECT && seq[1] == NN_ALGO_WINOGRAD &&
              !strcmp(last_choice()->how, "cached"),
          "a close runner-up runs once before the cached choice, which this process keeps "
          "(%s, %d runs)", nn_algo_name(a), nseq);
    CHECK(file_has(cache, "\tdirect\t3.") && file_has(cache, "\tmeasured\twinograd\t4.") &&
              file_has(cache, "\t2\n"),
          "the means of two timings: the runner-up's is lower, the cache swaps them");
    nn_algo_reset();
    reset_runs();
    a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_DIRECT && nseq == 2 && seq[0] == NN_ALGO_WINOGRAD &&
              seq[1] == NN_ALGO_DIRECT && file_has(cache, "\t3\n"),
          "the next process takes the swapped choice, and checks the pair again (%s)",
          nn_algo_name(a));

    /* settled (8 timings), or a runner-up more than 2x slower: only the cached choice runs */
    cache_set(cache, 19, "8");
    nn_algo_reset();
    reset_runs();
    a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_DIRECT && nseq == 1 && file_has(cache, "\t8\n"),
          "after 8 timings the pair is settled: one run, the cache unchanged (%d runs)", nseq);
    cache_set(cache, 19, "2");
    cache_set(cache, 18, "100");
    nn_algo_reset();
    reset_runs();
    a = nn_algo_pick(&j, &done);
    CHECK(a == NN_ALGO_DIRECT && nseq == 1,
          "a runner-up more than 2x slower is not run (%d runs)", nseq);

    /* the weight gradient: the pair on scratch, the call still runs its own */
    slow_of[NN_ALGO_DIRECT] = 0.005, slow_of[NN_ALGO_WINOGRAD] = 0.004;
    nn_algo_job w = fake_job(NN_PASS_BWD_WEIGHT, NN_FP32, 16, el, NN_ALGO_DIRECT);
    a = nn_algo_pick(&w, &done);
    slow_of[NN_ALGO_DIRECT] = 0.001;
    nn_algo_reset();
    reset_runs();
    a = nn_algo_pick(&w, &done);
    CHECK(a == NN_ALGO_WINOGRAD && !done && nseq == 2 && seq[0] == NN_ALGO_DIRECT &&
              file_has(cache, "\tbwd_weight\tfp32\t1\t16\t16\t16\t8\t0\t0\t8\tdirect\t3."),
          "weight gradient: the pair timed on scratch and swapped in the cache (%s, done %d)",
          nn_algo_name(a), done);

    /* runs that did not get their share of the CPUs change nothing (runs that sleep) */
    cache_set(cache, 18, "4.000");
    cache_set(cache, 19, "2");
    char *before = NULL, *after = NULL;
    size_t nb, na;
    fs_read_file(cache, &before, &nb);
    unsetenv("SCAFFOLD_NN_ALGO_QUIET");
    nn_settings_reload();
    sleepy = 1;
    nn_algo_reset();
    reset_runs();
    a = nn_algo_pick(&j, &done);
    sleepy = 0;
    fs_read_file(cache, &after, &na);
    CHECK(nseq == 2 && before && after && !strcmp(before, after),
          "timings that were not quiet leave the cache as it was (%d runs)", nseq);
    free(before), free(after);
    setenv("SCAFFOLD_NN_ALGO_QUIET", "0", 1);
    nn_settings_reload();

    /* an older cache's line (no runner-up fields) is read as before; a runner-up field that
     * cannot be read makes the line malformed: skipped, the shape measured again */
    cache_set_ms(cache, "1.000");
    cache_set(cache, 16, NULL); /* the time the last field, as older caches wrote it */
    const int ok = !file_has(cache, "\tmeasured");
    nn_algo_reset();
    reset_runs();
    a = nn_algo_pick(&j, &done);
    nn_algo_select_seconds(&measured);
    CHECK(ok && measured == 0 && nseq == 1 && !strcmp(last_choice()->how, "cached"),
          "a line without the runner-up fields: the cached choice, no pair (%d runs)", nseq);
    write_text(cache, "");
    nn_algo_reset();
    a = nn_algo_pick(&j, &done); /* measured, cached with its runner-up again */
    cache_set(cache, 17, "bogus");
    nn_algo_reset();
    reset_runs();
    a = nn_algo_pick(&j, &done);
    nn_algo_select_seconds(&measured);
    CHECK(measured == 1 && !strcmp(last_choice()->how, "measured"),
          "an unknown runner-up: the line skipped, the shape measured again");
    cache_set(cache, 19, "0");
    nn_algo_reset();
    a = nn_algo_pick(&j, &done);
    nn_algo_select_seconds(&measured);
    CHECK(measured == 1, "a count of 0 timings: the line skipped, measured again");
    memset(slow_of, 0, sizeof slow_of);
    unsetenv("SCAFFOLD_NN_ALGO_QUIET");
    nn_settings_reload();
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/scaffold-test-algo.XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    unsetenv("SCAFFOLD_NN_ALGO_PIN");
    unsetenv("SCAFFOLD_NN_ALGO_BUDGET");
    nn_settings_reload();
    test_names();
    test_measure_and_cache();
    test_pin_force_budget();
    test_workspace_touch();
    test_runner_up();
    setenv("SCAFFOLD_NN_ALGO_CACHE", "0", 1);
    nn_settings_reload();
    test_real(NN_FP32, 16, 16, 24);
    test_real(NN_BF16, 16, 16, 24);
    test_real(NN_BF16, 8, 32, 16);
    test_busy_host();
    fs_rm_rf(dir);
    return test_report();
}
