/* algo: the choice of algorithm per Conv3d k3 pass (see algo.h): forcing, pinning, the cache
 * file, the measurement with its accuracy check, and the record of the choices. */
#include "nn/algo.h"

#include "core/err.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "nn/gemm.h"
#include "nn/settings.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const algo_names[NN_ALGO_COUNT] = {"direct", "winograd", "direct-bf16",
                                                      "winograd-bf16", "amx", "amx-x3"};
static const char *const pass_names[3] = {"fwd", "bwd_data", "bwd_weight"};

const char *nn_algo_name(int algo) {
    return algo >= 0 && algo < NN_ALGO_COUNT ? algo_names[algo] : NULL;
}

int nn_algo_parse(const char *name) {
    for (int i = 0; name && i < NN_ALGO_COUNT; i++)
        if (!strcmp(name, algo_names[i]))
            return i;
    return -1;
}

const char *nn_pass_name(int pass) {
    return pass >= 0 && pass < 3 ? pass_names[pass] : "?";
}

/* Accuracy order: the reference of a measurement is the first applicable algorithm of this
 * list (exact products with fp32 sums: one rounding of the bf16 result), the others are checked
 * against it. */
static const int accuracy_order[NN_ALGO_COUNT] = {NN_ALGO_DIRECT,   NN_ALGO_DIRECT_BF16,
                                                  NN_ALGO_AMX,      NN_ALGO_AMX_X3,
                                                  NN_ALGO_WINOGRAD, NN_ALGO_WINOGRAD_BF16};

/* ---- state ------------------------------------------------------------------------------- */

/* An entry of the cache file or the pin file: the context (CPU, kernel path, threads; empty
 * in a pin, which matches any) and the key. */
typedef struct entry {
    char ctx[160];
    nn_algo_key key;
    int algo;
    double ms;
    /* the runner-up (-1: none) and its time, and how many paired timings the two times are the
     * mean of (the measurement, then the first-use checks: cached_check) */
    int next;
    double next_ms;
    int n;
} entry;

typedef struct table {
    entry *e;
    int n, cap;
} table;

static struct {
    int loaded;   /* environment read */
    int mode;     /* NN_ALGO_MODE_*, as the program set it */
    int env_mode; /* -1, or the mode SCAFFOLD_NN_ALGO gives */
    int forced;   /* -1, or the algorithm SCAFFOLD_NN_ALGO names */
    char cache_path[FS_PATH_MAX];
    int cache_loaded;
    table cache, pin;
    nn_algo_choice *ch;
    int nch, capch;
    double sel_s;
    int measured;
    double min_share; /* the lowest share of the CPUs a measured run got (run_timed) */
    int busy_warned, stale_told;
    const float *ws_base; /* the workspace touch_ws last zeroed, and how far */
    size_t ws_touched;
} S = {.env_mode = -1, .forced = -1};

static int table_add(table *t, const entry *e) {
    if (t->n == t->cap) {
        const int cap = t->cap ? 2 * t->cap : 64;
        entry *ne = realloc(t->e, (size_t)cap * sizeof *ne);
        if (!ne)
            return ERR_NOMEM;
        t->e = ne, t->cap = cap;
    }
    t->e[t->n++] = *e;
    return 0;
}

static int key_eq(const nn_algo_key *a, const nn_algo_key *b) {
    return a->pass == b->pass && a->prec == b->prec && a->N == b->N && a->D == b->D &&
           a->H == b->H && a->W == b->W && a->ca == b->ca && a->cb == b->cb &&
           a->cout == b->cout && a->split == b->split;
}

/* This process's context: CPU model, kernel path (with its bf16 and AMX kernels), threads. */
static const char *context(void) {
    static char c[160];
    snprintf(c, sizeof c, "%s\t%s%s%s\t%d", nn_cpu_name(), nn_isa_name(nn_isa()),
             nn_isa_bf16dp() ? "+bf16" : "", nn_isa_amx() ? "+amx" : "", nn_threads());
    /* the CPU name is the first field: a tab or newline in it would break the format */
    const size_t n = strlen(nn_cpu_name()) < sizeof c ? strlen(nn_cpu_name()) : sizeof c - 1;
    for (size_t i = 0; i < n; i++)
        if (c[i] == '\t' || c[i] == '\n' || c[i] == '\r')
            c[i] = ' ';
    return c;
}

/* ---- files --------------------------------------------------------------------------------
 * One entry per line, tab-separated:
 *   cpu  path  threads  op  pass  prec  N  D  H  W  ca  cb  split  cout  algo  ms
 *   [how  [next  next_ms  n]]
 * ('#' lines are comments). The cache and the run folder's nn_algorithms.tsv share it; a pin
 * reads the key and the algorithm of each line, whatever its context. The cache's lines carry
 * the runner-up (next, "-" for none) and n, the number of paired timings its two times are the
 * mean of; lines without them (older caches, the run folder's) have no runner-up. */
#define FILE_TITLE "# scaffold nn algorithm choices v1"
/* The kernels' revision: a cache written by another one is measured again (its timings are of
 * other code). Raise it with every change that can reorder the algorithms' speeds on some CPU. */
#define KERNEL_REV "kernels 13"
#define FILE_TITLE_REV FILE_TITLE ", " KERNEL_REV "\n"
#define FILE_HEADER                                                                                \
    FILE_TITLE_REV "# cpu\tpath\tthreads\top\tpass\tprec\tN\tD\tH\tW\tca\tcb\tsplit\tcout\talgo" \
    "\tms\thow\tnext\tnext_ms\tn\n"

/* Parses one line into e (ctx: the first three fields). 0, or -1 when malformed. */
static int parse_line(char *line, entry *e) {
    char *f[20];
    int nf = 0;
    for (char *p = line; nf < 20;) {
        f[nf++] = p;
        char *t = strchr(p, '\t');
        if (!t)
            break;
        *t = 0;
        p = t + 1;
    }
    if (nf < 16)
        return -1;
    f[nf - 1][strcspn(f[nf - 1], "\r\n")] = 0;
    memset(e, 0, sizeof *e);
    snprintf(e->ctx, sizeof e->ctx, "%s\t%s\t%s", f[0], f[1], f[2]);
    if (strcmp(f[3], "conv3d"))
        return -1;
    e->key.pass = -1;
    for (int i = 0; i < 3; i++)
        if (!strcmp(f[4], pass_names[i]))
            e->key.pass = i;
    e->key.prec = !strcmp(f[5], "bf16") ? NN_BF16 : NN_FP32;
    if (e->key.pass < 0 || (strcmp(f[5], "bf16") && strcmp(f[5], "fp32")))
        return -1;
    int *v[8] = {&e->key.N, &e->key.D, &e->key.H, &e->key.W, &e->key.ca, &e->key.cb,
                 &e->key.split, &e->key.cout};
    for (int i = 0; i < 8; i++) {
        char *end;
        const long x = strtol(f[6 + i], &end, 10);
        if (end == f[6 + i] || *end || x < 0 || x > (1L << 30))
            return -1;
        *v[i] = (int)x;
    }
    e->algo = nn_algo_parse(f[14]);
    char *end;
    e->ms = strtod(f[15], &end);
    if (e->algo < 0 || end == f[15] || e->key.N < 1 || e->key.D < 1 || e->key.cout < 1)
        return -1;
    e->next = -1, e->n = 1;
    if (nf >= 20 && strcmp(f[17], "-")) {
        char *e1, *e2;
        e->next = nn_algo_parse(f[17]);
        e->next_ms = strtod(f[18], &e1);
        const long n = strtol(f[19], &e2, 10);
        if (e->next < 0 || e->next == e->algo || e1 == f[18] || *e1 || !(e->next_ms > 0) ||
            e2 == f[19] || *e2 || n < 1 || n > 1000000)
            return -1;
        e->n = (int)n;
    }
    return 0;
}

/* Reads path into t; pin: a malformed line is an error (ERR_CONFIG naming the file and line),
 * else skipped with one warning (a cache is rebuilt by measuring). A missing file: 0 entries
 * (cache) or ERR_CONFIG (pin). */
static int read_table(const char *path, table *t, int pin) {
    FILE *f = fs_open_read(path);
    if (!f) {
        if (pin)
            return err_set(ERR_CONFIG, "SCAFFOLD_NN_ALGO_PIN=%s: cannot open it (give the "
                                       "nn_algorithms.tsv of an earlier run's folder)",
                           path);
        return 0;
    }
    char line[1024];
    int ln = 0, bad = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        ln++;
        /* a cache of other kernels (or of a version before the revision was written): none of
         * its timings hold, so it is read as empty and rewritten by the next measurement */
        if (ln == 1 && !pin && !strncmp(line, FILE_TITLE, strlen(FILE_TITLE)) &&
            strcmp(line, FILE_TITLE_REV)) {
            static int told;
            if (!told++)
                log_info("nn algorithm cache %s: written by other kernels; its shapes are "
                         "measured again", path);
            break;
        }
        if (line[0] == '#' || line[0] == '\n')
            continue;
        entry e;
        if (strlen(line) == sizeof line - 1 || parse_line(line, &e)) {
            if (pin) {
                rc = err_set(ERR_CONFIG,
                             "SCAFFOLD_NN_ALGO_PIN=%s line %d: not an algorithm choice (expected "
                             "the tab-separated fields of nn_algorithms.tsv)",
                             path, ln);
                break;
            }
            bad++;
            continue;
        }
        if ((rc = table_add(t, &e)))
            break;
    }
    fclose(f);
    if (bad)
        log_warn("nn algorithm cache %s: %d malformed line%s ignored (they are measured again)",
                 path, bad, bad > 1 ? "s" : "");
    return rc;
}

/* One line: the run folder's with how (the choice's origin); the cache's (how NULL) with its
 * runner-up fields. */
static void write_entry(FILE *fp, const entry *e, const char *how) {
    const nn_algo_key *k = &e->key;
    fprintf(fp, "%s\tconv3d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%.3f", e->ctx,
            pass_names[k->pass], k->prec == NN_BF16 ? "bf16" : "fp32", k->N, k->D, k->H, k->W,
            k->ca, k->cb, k->split, k->cout, algo_names[e->algo], e->ms);
    if (how)
        fprintf(fp, "\t%s\n", how);
    else
        fprintf(fp, "\tmeasured\t%s\t%.3f\t%d\n", e->next >= 0 ? algo_names[e->next] : "-",
                e->next >= 0 ? e->next_ms : 0, e->n);
}

/* Adds e to the cache file: the file as it is now (other processes may have added to it), less
 * any line for the same context and key, plus e; written atomically. Failures warn once. */
static void cache_store(const entry *e) {
    if (!S.cache_path[0])
        return;
    table cur = {0};
    read_table(S.cache_path, &cur, 0);
    char dir[FS_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", S.cache_path);
    char *sl = strrchr(dir, '/');
    if (sl && sl != dir) {
        *sl = 0;
        fs_mkdir_p(dir);
    }
    fs_atomic a;
    int rc = fs_atomic_open(&a, S.cache_path);
    if (rc == 0) {
        fputs(FILE_HEADER, a.fp);
        for (int i = 0; i < cur.n; i++)
            if (strcmp(cur.e[i].ctx, e->ctx) || !key_eq(&cur.e[i].key, &e->key))
                write_entry(a.fp, &cur.e[i], NULL);
        write_entry(a.fp, e, NULL);
        rc = fs_atomic_commit(&a, 0);
    }
    free(cur.e);
    static int warned;
    if (rc && !warned) {
        warned = 1;
        log_warn("nn algorithm cache %s: cannot write it (%s); choices are kept in memory",
                 S.cache_path, err_msg());
    }
}

/* ---- environment --------------------------------------------------------------------------- */

static void default_cache_path(char *out, size_t n) {
    const char *e = nn_settings()->algo_cache;
    if (e) {
        snprintf(out, n, "%s", e);
        return;
    }
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (x && *x)
        snprintf(out, n, "%s/scaffold/nn-algo.tsv", x);
    else if (h && *h)
        snprintf(out, n, "%s/.cache/scaffold/nn-algo.tsv", h);
    else
        out[0] = 0;
}

static int load_env(void) {
    if (S.loaded)
        return 0;
    S.loaded = 1;
    int rc = 0;
    const struct nn_settings *set = nn_settings();
    if (set->algo == NN_SET_ALGO_RULE)
        S.env_mode = NN_ALGO_MODE_RULE;
    else if (set->algo == NN_SET_ALGO_MEASURE)
        S.env_mode = NN_ALGO_MODE_MEASURE;
    else if (set->algo >= 0)
        S.forced = set->algo;
    else if (set->algo == NN_SET_UNKNOWN)
        rc = err_set(ERR_CONFIG,
                     "SCAFFOLD_NN_ALGO=%s: unknown (use rule, measure, direct, winograd, "
                     "direct-bf16, winograd-bf16, amx or amx-x3)",
                     nn_settings_env("SCAFFOLD_NN_ALGO"));
    const char *p = set->algo_pin;
    if (rc == 0 && p) {
        rc = read_table(p, &S.pin, 1);
        if (rc)
            S.pin.n = 0;
    }
    default_cache_path(S.cache_path, sizeof S.cache_path);
    return rc;
}

int nn_algo_init(void) {
    S.loaded = 0;
    free(S.pin.e);
    S.pin = (table){0};
    S.forced = -1, S.env_mode = -1;
    return load_env();
}

void nn_algo_reset(void) {
    free(S.cache.e);
    free(S.pin.e);
    free(S.ch);
    const int mode = S.mode;
    memset(&S, 0, sizeof S);
    S.mode = mode;
    S.env_mode = -1, S.forced = -1;
}

void nn_algo_set_mode(int mode) {
    S.mode = mode == NN_ALGO_MODE_MEASURE ? mode : NN_ALGO_MODE_RULE;
}

int nn_algo_mode(void) {
    if (!S.loaded && load_env())
        log_warn("%s", err_msg());
    return S.env_mode >= 0 ? S.env_mode : S.mode;
}

const char *nn_algo_cache_path(void) {
    nn_algo_mode();
    return S.cache_path[0] ? S.cache_path : NULL;
}

unsigned nn_algo_eligible(const nn_algo_job *j) {
    return j->eligible & (nn_algo_strict() ? ~(1u << NN_ALGO_WINOGRAD_BF16) : ~0u);
}

/* The algorithms a measurement runs: the eligible ones less those another eligible one
 * dominates. In bf16 where AMX applies to the pass: the direct walks on fp32 FMAs and on
 * vdpbf16ps, the same exact products with fp32 sums as AMX's (so AMX, next in accuracy order,
 * is the reference) at an eighth of the tiles' products per cycle or less. On a Xeon with AMX
 * (CPU model 207) every Conv3d pass of the 6 / 64 model ran 2.5-11x slower on them than on AMX
 * (on the other Xeon measured, AMX ran 1.5-3.4x faster than the fastest fp32 pass), and their
 * runs were 58% of that model's first-use selection in bf16 (9.2 of 16 s). Forcing or pinning
 * them still runs them. With one algorithm left, the rule is taken unmeasured (in bf16 it is
 * AMX wherever AMX applies). */
static unsigned measured_set(const nn_algo_job *j) {
    unsigned el = nn_algo_eligible(j);
    if (j->key.prec == NN_BF16 && (el & (1u << NN_ALGO_AMX)))
        el &= ~(1u << NN_ALGO_DIRECT | 1u << NN_ALGO_DIRECT_BF16);
    return el;
}

/* ---- the rule --------------------------------------------------------------------------------
 * What the measurements found on the CPUs measured (docs/nn.md, "Algorithm selection"). */
int nn_algo_rule(const nn_algo_job *j) {
    const unsigned el = nn_algo_eligible(j);
#define HAS(a) (el & (1u << (a)))
    if (j->key.prec == NN_FP32)
        return HAS(NN_ALGO_WINOGRAD) ? NN_ALGO_WINOGRAD : NN_ALGO_DIRECT;
    if (HAS(NN_ALGO_AMX))
        return NN_ALGO_AMX;
    if (HAS(NN_ALGO_WINOGRAD_BF16))
        return NN_ALGO_WINOGRAD_BF16;
    if (HAS(NN_ALGO_WINOGRAD))
        return NN_ALGO_WINOGRAD;
    /* the pair kernels, except on AMX CPUs, where vdpbf16ps runs at a quarter of the FMA rate
     * (a K that is no multiple of 32 there: the fp32 kernels) */
    if (HAS(NN_ALGO_DIRECT_BF16) && !nn_isa_amx())
        return NN_ALGO_DIRECT_BF16;
    return NN_ALGO_DIRECT;
#undef HAS
}

/* ---- the record of choices ------------------------------------------------------------------ */

static nn_algo_choice *record(const nn_algo_key *k, int algo, const char *how, double ms) {
    for (int i = 0; i < S.nch; i++)
        if (key_eq(&S.ch[i].key, k))
            return &S.ch[i];
    if (S.nch == S.capch) {
        const int cap = S.capch ? 2 * S.capch : 64;
        nn_algo_choice *n = realloc(S.ch, (size_t)cap * sizeof *n);
        if (!n)
            return NULL;
        S.ch = n, S.capch = cap;
    }
    nn_algo_choice *c = &S.ch[S.nch++];
    memset(c, 0, sizeof *c);
    c->key = *k;
    c->algo = algo;
    snprintf(c->how, sizeof c->how, "%s", how);
    c->ms = ms;
    return c;
}

static void announce(const nn_algo_choice *c) {
    if (log_verbosity() < 1 || !c)
        return;
    char line[512];
    nn_algo_describe(c, line, sizeof line);
    log_info("nn: %s", line);
}

int nn_algo_count(void) {
    return S.nch;
}

const nn_algo_choice *nn_algo_get(int i) {
    return i >= 0 && i < S.nch ? &S.ch[i] : NULL;
}

double nn_algo_select_seconds(int *measured) {
    if (measured)
        *measured = S.measured;
    return S.sel_s;
}

void nn_algo_describe(const nn_algo_choice *c, char *buf, size_t n) {
    const nn_algo_key *k = &c->key;
    int at = snprintf(buf, n, "conv3d %s %s %dx%dx%dx%d %d+%d->%d%s: %s (%s", pass_names[k->pass],
                      k->prec == NN_BF16 ? "bf16" : "fp32", k->N, k->D, k->H, k->W, k->ca, k->cb,
                      k->cout, k->split ? " split" : "", algo_names[c->algo], c->how);
    if (c->ms > 0 && at >= 0 && (size_t)at < n)
        at += snprintf(buf + at, n - at, " %.2f ms", c->ms);
    const char *sep = ";";
    for (int a = 0; a < NN_ALGO_COUNT; a++) {
        if (a == c->algo || c->ms_all[a] == 0 || at < 0 || (size_t)at >= n)
            continue;
        if (c->ms_all[a] < 0)
            at += snprintf(buf + at, n - at, "%s %s over the accuracy budget", sep, algo_names[a]);
        else
            at += snprintf(buf + at, n - at, "%s %s %.2f", sep, algo_names[a], c->ms_all[a]);
        sep = ",";
    }
    if (at >= 0 && (size_t)at < n)
        snprintf(buf + at, n - at, "%s)", c->busy ? "; on a busy host, not cached" : "");
}

int nn_algo_write(const char *path) {
    fs_atomic a;
    int rc = fs_atomic_open(&a, path);
    if (rc)
        return rc;
    fputs(FILE_HEADER, a.fp);
    entry e = {.next = -1};
    snprintf(e.ctx, sizeof e.ctx, "%s", context());
    for (int i = 0; i < S.nch; i++) {
        e.key = S.ch[i].key, e.algo = S.ch[i].algo, e.ms = S.ch[i].ms;
        write_entry(a.fp, &e, S.ch[i].how);
    }
    return fs_atomic_commit(&a, 0);
}

/* ---- measurement ---------------------------------------------------------------------------- */

#define SAMPLE_MAX 16384   /* elements compared between algorithms */
#define REPEAT_BELOW 0.05  /* seconds: a faster run is repeated (best of 3) */

/* The sampled positions of n elements: spread over the tensor, each with a varying offset so
 * that no channel is favoured. */
static size_t sample_at(size_t i, size_t ns, size_t n) {
    const size_t step = n / ns;
    return i * n / ns + (step > 1 ? (i * 2654435761u) % step : 0);
}

static size_t sample(float *dst, const nn_algo_job *j, const float *dw) {
    size_t m = 0;
    if (dw) {
        const size_t ns = j->ndw < SAMPLE_MAX ? j->ndw : SAMPLE_MAX;
        for (size_t i = 0; i < ns; i++)
            dst[m++] = dw[sample_at(i, ns, j->ndw)];
        return m;
    }
    for (int p = 0; p < 2; p++) {
        if (!j->out[p] || !j->nout[p])
            continue;
        const size_t ns = j->nout[p] < SAMPLE_MAX / 2 ? j->nout[p] : SAMPLE_MAX / 2;
        for (size_t i = 0; i < ns; i++)
            dst[m++] = j->out[p][sample_at(i, ns, j->nout[p])];
    }
    return m;
}

/* 1 when got is within the budget around ref (see algo.h): every element within its bound,
 * and for bf16 the norm of the difference within NN_ALGO_BF16_NORM of ref's. */
int nn_algo_within_budget(const float *got, const float *ref, size_t n, nn_prec prec) {
    double mx = 0, e2 = 0, r2 = 0;
    for (size_t i = 0; i < n; i++)
        mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
    const int strict = nn_algo_strict();
    for (size_t i = 0; i < n; i++) {
        const double r = ref[i], d = fabs((double)got[i] - r);
        double tol;
        if (prec == NN_BF16) {
            int e;
            frexp(r, &e); /* |r| in [2^(e-1), 2^e): a bf16 ulp is 2^(e-8) */
            tol = (r != 0 ? ldexp(1.0, e - 8) : 0) +
                  (strict ? NN_ALGO_BF16_STRICT : NN_ALGO_BF16_ELEM) * mx;
        } else {
            tol = 1e-4 * mx + 1e-4 * fabs(r);
        }
        if (!(d <= tol)) /* NaN fails */
            return 0;
        e2 += d * d, r2 += r * r;
    }
    return prec != NN_BF16 || e2 <= NN_ALGO_BF16_NORM * NN_ALGO_BF16_NORM * r2;
}

int nn_algo_strict(void) {
    return nn_settings()->algo_strict;
}

/* One run of algorithm a on the job: its wall seconds; *quiet is 1 when the team got at least
 * the quiet share of its CPUs during it (nn_settings: SCAFFOLD_NN_ALGO_QUIET). */
static double run_timed(const nn_algo_job *j, int a, float *dw, int *quiet) {
    const double c0 = nn_team_cpu_seconds(), t0 = time_now();
    j->run(j, a, dw);
    const double dt = time_now() - t0, cpu = nn_team_cpu_seconds() - c0;
    const double share = dt > 0 ? cpu / (dt * nn_threads()) : 1;
    *quiet = 100 * share >= nn_settings()->algo_quiet;
    if (share < S.min_share)
        S.min_share = share;
    if (log_verbosity() >= 2)
        log_debug("nn: conv3d %s %s: %.3f ms, %.0f%% of %d CPUs", pass_names[j->key.pass],
                  algo_names[a], 1e3 * dt, 100 * share, nn_threads());
    return dt;
}

/* Zeroes the job's workspace past what earlier calls on the same workspace zeroed (algo.h). */
static void touch_ws(const nn_algo_job *j) {
    if (!j->ws || !j->nws)
        return;
    if (j->ws != S.ws_base)
        S.ws_base = j->ws, S.ws_touched = 0;
    if (j->nws > S.ws_touched) {
        memset(j->ws + S.ws_touched, 0, (j->nws - S.ws_touched) * sizeof(float));
        S.ws_touched = j->nws;
    }
}

/* Runs every applicable algorithm on the job (the reference first), returns the fastest within
 * the budget; *last is the last algorithm that ran, *busy 1 when a time that decided the
 * choice came from a run that did not get its share of the CPUs (run_timed). The first round
 * runs each once and checks its result against the reference. Up to two more rounds run again,
 * in the same order, those within the budget that are within 1.5x of the fastest or whose time
 * is not quiet, while the fastest is short (REPEAT_BELOW) or such a time is not quiet; each
 * keeps its best quiet time (its best time while it has none). Interleaved, a burst of noise
 * on a shared host slows one run of each instead of every run of one (measured one after the
 * other, an 8^3 pass once kept a choice 35% slower than the other for good); times taken while
 * the host was busy (a cache once kept direct for layers Winograd ran 2x faster, every time
 * 4-5x too long) are repeated, and if still busy, not cached (pick). */
static int measure(const nn_algo_job *j, double ms_all[NN_ALGO_COUNT], int *last, int *busy) {
    const double t_start = time_now();
    const int wgrad = j->key.pass == NN_PASS_BWD_WEIGHT;
    float *dw = NULL, *ref = malloc(SAMPLE_MAX * sizeof(float)),
          *got = malloc(SAMPLE_MAX * sizeof(float));
    if (wgrad && posix_memalign((void **)&dw, 64, (j->ndw + 16) * sizeof(float)))
        dw = NULL;
    const int rule = j->rule;
    *busy = 0;
    if (!ref || !got || (wgrad && !dw)) { /* no memory to measure: the rule */
        free(ref), free(got), free(dw);
        *last = -1;
        return rule;
    }
    /* The outputs are fresh activations on the first step: whichever algorithm ran first paid
     * their page faults (scale 7 / 64 bf16, 128^3 64 -> 64 forward: amx, first, over 1.1 s
     * where it runs in 0.63-0.71 s, so winograd-bf16, 0.97 s, was kept for good). Touched here
     * first; every runner overwrites them whole (algo.h). */
    for (int p = 0; p < 2; p++)
        if (j->out[p] && j->nout[p])
            memset((void *)j->out[p], 0, j->nout[p] * sizeof(float));
    /* So is the workspace: its part that no pass has used yet comes in huge pages, which the
     * kernel may first compact memory for (madvise defrag), and the first algorithm to reach
     * it paid that (scale 5 / 64 fp32: winograd's first run of the 16^3 128 + 128 -> 128
     * forward, the first to need 18 MiB of transformed weights, 9-32 ms where it runs in 7-8;
     * amx-x3, 8.1-8.5 ms, was kept). */
    touch_ws(j);
    int best = -1, nref = 0, unsure = 0;
    const unsigned ms = measured_set(j);
    double t[NN_ALGO_COUNT];
    int q[NN_ALGO_COUNT] = {0}; /* t[a] is a quiet time */
    *last = -1;
    for (int r = 0; r < 3 && (r == 0 || (best >= 0 && (t[best] < REPEAT_BELOW || unsure)));
         r++) {
        const double tb = best >= 0 ? t[best] : 0;
        for (int o = 0; o < NN_ALGO_COUNT; o++) {
            const int a = accuracy_order[o];
            if (!(ms & (1u << a)) ||
                (r && (ms_all[a] < 0 || (q[a] && t[a] > 1.5 * tb))))
                continue;
            if (dw)
                memset(dw, 0, j->ndw * sizeof(float));
            int quiet;
            const double dt = run_timed(j, a, dw, &quiet);
            *last = a;
            if (r == 0) {
                size_t m = sample(nref ? got : ref, j, dw);
                int ok = 1;
                if (!nref)
                    nref = (int)m;
                else
                    ok = nn_algo_within_budget(got, ref, m, j->key.prec);
                ms_all[a] = ok ? 1 : -1;
                t[a] = dt, q[a] = quiet;
            } else if ((quiet && !q[a]) || (quiet == q[a] && dt < t[a])) {
                t[a] = dt, q[a] = quiet;
            }
        }
        /* the fastest, and whether a time that could change the choice is not quiet */
        best = -1;
        for (int a = 0; a < NN_ALGO_COUNT; a++)
            if (ms_all[a] > 0 && (best < 0 || t[a] < t[best]))
                best = a;
        unsure = 0;
        for (int a = 0; a < NN_ALGO_COUNT; a++)
            unsure |= ms_all[a] > 0 && !q[a];
    }
    for (int a = 0; a < NN_ALGO_COUNT; a++)
        if (ms_all[a] > 0)
            ms_all[a] = 1e3 * t[a];
    free(ref), free(got), free(dw);
    S.sel_s += time_now() - t_start;
    S.measured++;
    *busy = unsure;
    return best < 0 ? rule : best;
}

/* ---- the choice ------------------------------------------------------------------------------ */

static entry *find(const table *t, const char *ctx, const nn_algo_key *k) {
    for (int i = t->n - 1; i >= 0; i--)
        if ((!ctx || !strcmp(t->e[i].ctx, ctx)) && key_eq(&t->e[i].key, k))
            return &t->e[i];
    return NULL;
}

/* Adds a paired timing (the choice tc, the runner-up tn, ms) to c and to the cache file. */
static void check_pair(entry *c, double tc, double tn) {
    const entry before = *c;
    c->n++;
    c->ms += (tc - c->ms) / c->n;
    c->next_ms += (tn - c->next_ms) / c->n;
    if (c->next_ms < c->ms) {
        const int a = c->algo;
        const double m = c->ms;
        c->algo = c->next, c->ms = c->next_ms;
        c->next = a, c->next_ms = m;
        log_info("nn: conv3d %s %s %dx%dx%dx%d %d+%d->%d: %s now %.2f ms against the cached %s "
                 "%.2f ms (means of %d timings; %s %.2f, %s %.2f now): the cache %s takes %s "
                 "from the next run on (this run keeps %s)",
                 pass_names[c->key.pass], c->key.prec == NN_BF16 ? "bf16" : "fp32", c->key.N,
                 c->key.D, c->key.H, c->key.W, c->key.ca, c->key.cb, c->key.cout,
                 algo_names[c->algo], c->ms, algo_names[c->next], c->next_ms, c->n,
                 algo_names[before.algo], tc, algo_names[before.next], tn,
                 S.cache_path[0] ? S.cache_path : "(in memory)", algo_names[c->algo],
                 algo_names[before.algo]);
    }
    cache_store(c);
}

/* A cached choice, first used in this process: one timed run of it (the forward and input
 * gradient into the call's outputs, *done then 1; the weight gradient into a scratch buffer).
 * 1 when that run got its share of the CPUs and took under 1/STALE_FACTOR of the cached time
 * of one measurement: the cached time (and so the choice) was measured on a busy host, and is
 * measured again.
 *
 * A runner-up within CLOSE_FACTOR of the choice runs once just before it (on the outputs or
 * the scratch too), while the entry rests on fewer than CHECKS_MAX paired timings: both quiet,
 * each time of the entry becomes the mean of its timings, and where the runner-up's mean is now
 * the lower, the two swap in the cache. This process keeps the cached choice (a choice is
 * deterministic given the cache); later ones take the new one. A host whose cores are shared
 * slows the tile unit (AMX) or the FMA units for seconds at a time, each on its own, so one
 * measurement can rank two close algorithms wrong for good (a cache once kept Winograd for a
 * weight gradient AMX then ran 1.5-2.2x faster); the pairs of later starts average over such
 * phases, at one run of the runner-up per close shape and start, CHECKS_MAX - 1 times. */
#define STALE_FACTOR 1.5
#define CLOSE_FACTOR 2.0
#define CHECKS_MAX 8
static int cached_check(const nn_algo_job *j, entry *c, int *done) {
    const int wgrad = j->key.pass == NN_PASS_BWD_WEIGHT;
    const int pair = c->next >= 0 && c->n < CHECKS_MAX && ((measured_set(j) >> c->next) & 1) &&
                     c->next_ms <= CLOSE_FACTOR * c->ms;
    float *dw = NULL;
    if (wgrad && posix_memalign((void **)&dw, 64, (j->ndw + 16) * sizeof(float)))
        return 0; /* no memory to check: the cached choice */
    const double t0 = time_now();
    int quiet, qn = 0;
    double tn = 0;
    if (pair) {
        if (dw)
            memset(dw, 0, j->ndw * sizeof(float));
        tn = 1e3 * run_timed(j, c->next, dw, &qn);
    }
    const double t1 = time_now();
    if (dw)
        memset(dw, 0, j->ndw * sizeof(float));
    const double ms = 1e3 * run_timed(j, c->algo, dw, &quiet);
    /* the runner-up's run, and the weight gradient's (the call runs its own), are selection */
    S.sel_s += (t1 - t0) + (wgrad ? time_now() - t1 : 0);
    free(dw);
    *done = !wgrad;
    /* (an entry that is a mean of paired timings is kept by them: on a host whose speed moves
     * in phases, a fast one would otherwise throw the mean away) */
    if (quiet && c->n == 1 && STALE_FACTOR * ms < c->ms) {
        if (!S.stale_told++)
            log_info("nn: a cached algorithm ran in %.2f ms, the cache %s says %.2f ms (measured "
                     "while the host was busy): measuring such choices again",
                     ms, S.cache_path, c->ms);
        log_debug("nn: conv3d %s %s %dx%dx%dx%d %d+%d->%d: %s ran in %.2f ms, cached %.2f ms: "
                  "measuring again",
                  pass_names[j->key.pass], j->key.prec == NN_BF16 ? "bf16" : "fp32", j->key.N,
                  j->key.D, j->key.H, j->key.W, j->key.ca, j->key.cb, j->key.cout,
                  algo_names[c->algo], ms, c->ms);
        return 1;
    }
    if (pair && quiet && qn)
        check_pair(c, ms, tn);
    return 0;
}

/* nn_algo_pick, or with peek the choice it would make without measuring or recording (the
 * rule where it would measure). */
static int pick(const nn_algo_job *j, int *done, int peek) {
    *done = 0;
    const int mode = nn_algo_mode();
    /* a shape seen before: its choice */
    for (int i = 0; i < S.nch; i++)
        if (key_eq(&S.ch[i].key, &j->key) && (j->eligible & (1u << S.ch[i].algo)))
            return S.ch[i].algo;
    const unsigned el = nn_algo_eligible(j), ms = measured_set(j);
    const int only = (ms & (ms - 1)) == 0;
    if (S.forced >= 0) {
        const int ok = (j->eligible >> S.forced) & 1;
        if (!peek)
            announce(record(&j->key, ok ? S.forced : j->rule, ok ? "forced" : "rule", 0));
        return ok ? S.forced : j->rule;
    }
    const entry *p = find(&S.pin, NULL, &j->key);
    if (p) {
        if ((j->eligible >> p->algo) & 1) {
            if (!peek)
                announce(record(&j->key, p->algo, "pinned", p->ms));
            return p->algo;
        }
        if (!peek)
            log_warn("nn: the pinned algorithm %s does not apply to conv3d %s %dx%dx%dx%d "
                     "%d+%d->%d on this CPU: using %s",
                     algo_names[p->algo], pass_names[j->key.pass], j->key.N, j->key.D, j->key.H,
                     j->key.W, j->key.ca, j->key.cb, j->key.cout, algo_names[j->rule]);
    }
    if (mode != NN_ALGO_MODE_MEASURE || only || p) {
        if (!peek)
            announce(record(&j->key, j->rule, only ? "only" : "rule", 0));
        return j->rule;
    }
    const char *ctx = context();
    if (!S.cache_loaded) {
        S.cache_loaded = 1;
        if (S.cache_path[0])
            read_table(S.cache_path, &S.cache, 0);
    }
    entry *c = find(&S.cache, ctx, &j->key);
    if (c && ((el >> c->algo) & 1)) {
        if (peek)
            return c->algo;
        const int algo = c->algo;
        const double cms = c->ms;
        if (!cached_check(j, c, done)) {
            announce(record(&j->key, algo, "cached", cms));
            return algo;
        }
    }
    if (peek)
        return j->rule;
    double ms_all[NN_ALGO_COUNT] = {0};
    int last, busy;
    S.min_share = 1;
    const int a = measure(j, ms_all, &last, &busy);
    nn_algo_choice *r = record(&j->key, a, "measured", ms_all[a] > 0 ? ms_all[a] : 0);
    if (r) {
        memcpy(r->ms_all, ms_all, sizeof ms_all);
        r->busy = busy;
    }
    announce(r);
    entry e = {.key = j->key, .algo = a, .ms = ms_all[a] > 0 ? ms_all[a] : 0, .next = -1, .n = 1};
    for (int b = 0; b < NN_ALGO_COUNT; b++)
        if (b != a && ms_all[b] > 0 && (e.next < 0 || ms_all[b] < e.next_ms))
            e.next = b, e.next_ms = ms_all[b];
    snprintf(e.ctx, sizeof e.ctx, "%s", ctx);
    table_add(&S.cache, &e);
    if (!busy)
        cache_store(&e);
    else if (!S.busy_warned++)
        log_warn("nn: measuring the convolutions' algorithms, a run got only %.0f%% of the CPUs "
                 "of its %d threads (other work on these cores, or fewer cores than threads: "
                 "OMP_NUM_THREADS): choices measured so are used in this run but not written "
                 "to the cache %s",
                 100 * S.min_share, nn_threads(),
                 S.cache_path[0] ? S.cache_path : "(none)");
    *done = last == a && j->key.pass != NN_PASS_BWD_WEIGHT;
    return a;
}

int nn_algo_pick(const nn_algo_job *j, int *done) {
    return pick(j, done, 0);
}

int nn_algo_peek(const nn_algo_job *j) {
    int done;
    return pick(j, &done, 1);
}
