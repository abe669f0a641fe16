/* settings: the engine's environment variables, one table, read once (see settings.h). */
#include "nn/settings.h"

#include "core/log.h"
#include "nn/algo.h"
#include "nn/gemm.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)

/* ---- parsers: each keeps the reading the engine always gave its variable ------------------ */

static int *ip(void *field) {
    return field;
}

/* Kernel path: its name, or sse2 (the portable path is SSE2 on x86-64). */
static int parse_isa(const char *v, void *f) {
    *ip(f) = NN_SET_UNSET;
    if (!*v)
        return 0;
    for (int i = 0; i < NN_ISA_COUNT; i++)
        if (!strcmp(v, nn_isa_name(i)))
            *ip(f) = i;
    if (!strcmp(v, "sse2"))
        *ip(f) = NN_ISA_PORTABLE;
    if (*ip(f) != NN_SET_UNSET)
        return 0;
    *ip(f) = NN_SET_UNKNOWN;
    return 1;
}

static const char *label_isa(int v) {
    return v == NN_SET_UNSET ? "best" : v == NN_SET_UNKNOWN ? "unknown" : nn_isa_name(v);
}

/* 0: off; emulate: the C stand-in; anything else: on where the path has them. */
static int parse_bf16dp(const char *v, void *f) {
    *ip(f) = !strcmp(v, "emulate") ? NN_SET_BF16DP_EMULATE
             : !strcmp(v, "0")     ? NN_SET_BF16DP_OFF
                                   : NN_SET_BF16DP_ON;
    return *ip(f) == NN_SET_BF16DP_ON && *v && strcmp(v, "1");
}

static const char *label_bf16dp(int v) {
    return v == NN_SET_BF16DP_OFF ? "0" : v == NN_SET_BF16DP_EMULATE ? "emulate" : "auto";
}

/* SCAFFOLD_NN_BF16_STORE, SCAFFOLD_NN_KEEP_A1: starting with '0' off, "1" on, anything else
 * auto. */
static int parse_store(const char *v, void *f) {
    *ip(f) = v[0] == '0' ? 0 : !strcmp(v, "1") ? 1 : NN_SET_STORE_AUTO;
    return *v && v[0] != '0' && strcmp(v, "1") && strcmp(v, "auto");
}

static const char *label_store(int v) {
    return v == 0 ? "0" : v == 1 ? "1" : "auto";
}

/* Exactly "0": off; anything else: on. */
static int parse_on_unless_0(const char *v, void *f) {
    *ip(f) = strcmp(v, "0") != 0;
    return *v && strcmp(v, "0") && strcmp(v, "1");
}

/* Starting with '0': off; anything else: on. */
static int parse_on_unless_0x(const char *v, void *f) {
    *ip(f) = v[0] != '0';
    return *v && v[0] != '0' && strcmp(v, "1");
}

static int parse_algo(const char *v, void *f) {
    if (!*v)
        *ip(f) = NN_SET_UNSET;
    else if (!strcmp(v, "rule"))
        *ip(f) = NN_SET_ALGO_RULE;
    else if (!strcmp(v, "measure"))
        *ip(f) = NN_SET_ALGO_MEASURE;
    else if ((*ip(f) = nn_algo_parse(v)) < 0)
        *ip(f) = NN_SET_UNKNOWN;
    return *ip(f) == NN_SET_UNKNOWN;
}

static const char *label_algo(int v) {
    return v == NN_SET_UNSET          ? "unset"
           : v == NN_SET_ALGO_RULE    ? "rule"
           : v == NN_SET_ALGO_MEASURE ? "measure"
           : v == NN_SET_UNKNOWN      ? "unknown"
                                      : nn_algo_name(v);
}

/* "0": no cache file (an empty value too); anything else: the file. */
static int parse_cache(const char *v, void *f) {
    *(const char **)f = strcmp(v, "0") ? v : "";
    return 0;
}

/* Empty: as unset. */
static int parse_file(const char *v, void *f) {
    *(const char **)f = *v ? v : NULL;
    return 0;
}

static int parse_budget(const char *v, void *f) {
    *ip(f) = !strcmp(v, "strict");
    return *v && !*ip(f);
}

static const char *label_budget(int v) {
    return v ? "strict" : "default";
}

/* A count: strtoul's reading (no digits: 0), at most NN_SETTINGS_DW_REPLICAS. */
static int parse_replicas(const char *v, void *f) {
    char *end;
    const unsigned long x = strtoul(v, &end, 10);
    *ip(f) = x > NN_SETTINGS_DW_REPLICAS ? NN_SETTINGS_DW_REPLICAS : (int)x;
    return end == v || *end;
}

/* Winograd's planes per pass: 0 (by U's size), 1, 2 or 4; anything else keeps 0. */
static int parse_planes(const char *v, void *f) {
    const int ok = !strcmp(v, "0") || !strcmp(v, "1") || !strcmp(v, "2") || !strcmp(v, "4");
    *ip(f) = ok ? v[0] - '0' : 0;
    return !ok;
}

/* A percentage 0..100 (strtoul's reading; no digits or over 100 keeps the default). */
static int parse_quiet(const char *v, void *f) {
    char *end;
    const unsigned long x = strtoul(v, &end, 10);
    const int ok = end != v && !*end && x <= 100;
    *ip(f) = ok ? (int)x : NN_SETTINGS_ALGO_QUIET;
    return !ok;
}

/* A byte count: digits with an optional binary suffix (K, M, G, with or without "iB"), e.g.
 * 48M or 50331648; zero, no digits or another suffix keeps the default (not recognised). */
static int parse_bytes(const char *v, size_t *f, size_t def) {
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    const char *sfx = "KMG", *p = *end ? strchr(sfx, *end) : NULL;
    if (p && end != v) {
        x <<= 10 * (int)(p - sfx + 1);
        end += (end[1] == 'i' && end[2] == 'B') ? 3 : 1;
    }
    const int ok = end != v && x && !*end && x <= (unsigned long long)SIZE_MAX / 2;
    *f = ok ? (size_t)x : def;
    return !ok;
}

static int parse_umax(const char *v, void *f) {
    return parse_bytes(v, f, NN_SETTINGS_WINO_UMAX);
}

static int parse_slab(const char *v, void *f) {
    return parse_bytes(v, f, NN_SETTINGS_SLAB_BYTES);
}

/* ---- the table ------------------------------------------------------------------------------ */

#define F(field) offsetof(struct nn_settings, field)
#define BYTES "bytes > 0, or with K, M, G (KiB, MiB, GiB)"

static const nn_setting table[] = {
    {"SCAFFOLD_ISA", NN_SET_ENUM, "best", "avx512, avx2, portable (sse2: portable on x86-64)",
     "forces a kernel path; one the CPU lacks is refused with a warning, the best is used",
     F(isa), parse_isa, label_isa},
    {"SCAFFOLD_BF16DP", NN_SET_ENUM, "auto", "0, emulate",
     "0: no AVX512_BF16 kernels; emulate: a C stand-in for vdpbf16ps on any CPU (tests)",
     F(bf16dp), parse_bf16dp, label_bf16dp},
    {"SCAFFOLD_AMX", NN_SET_BOOL, "1", "0, 1", "0: no AMX tiles (bf16 on vdpbf16ps or Winograd)",
     F(amx), parse_on_unless_0, NULL},
    {"SCAFFOLD_NN_ALGO", NN_SET_ENUM, "unset",
     "rule, measure, direct, winograd, direct-bf16, winograd-bf16, amx, amx-x3",
     "how each Conv3d pass gets its algorithm: a mode, or one forced; anything else exits 2",
     F(algo), parse_algo, label_algo},
    {"SCAFFOLD_NN_ALGO_CACHE", NN_SET_STRING,
     "$XDG_CACHE_HOME/scaffold/nn-algo.tsv, else ~/.cache/scaffold/nn-algo.tsv", "a file, or 0",
     "the cache file of measured choices; 0: none, choices kept in memory", F(algo_cache),
     parse_cache, NULL},
    {"SCAFFOLD_NN_ALGO_PIN", NN_SET_STRING, "none", "a run folder's nn_algorithms.tsv",
     "use that file's choices, measure nothing for them; a missing or bad file exits 2",
     F(algo_pin), parse_file, NULL},
    {"SCAFFOLD_NN_ALGO_BUDGET", NN_SET_ENUM, "default", "strict",
     "strict: the bf16 accuracy budget to one ulp plus 3e-5 (winograd-bf16 never chosen)",
     F(algo_strict), parse_budget, label_budget},
    {"SCAFFOLD_NN_ALGO_QUIET", NN_SET_INT, STR(NN_SETTINGS_ALGO_QUIET), "0 to 100",
     "percent of its CPUs a measured run must get for the choice to be cached (0: always)",
     F(algo_quiet), parse_quiet, NULL},
    {"SCAFFOLD_NN_DW_REPLICAS", NN_SET_INT, STR(NN_SETTINGS_DW_REPLICAS),
     "0 to " STR(NN_SETTINGS_DW_REPLICAS),
     "caps the per-thread weight-gradient copies (0 or 1: partition tiles instead)",
     F(dw_replicas), parse_replicas, NULL},
    {"SCAFFOLD_NN_WINOGRAD", NN_SET_BOOL, "1", "0, 1",
     "0 takes both Winograd algorithms out of every Conv3d pass's choice", F(winograd),
     parse_on_unless_0x, NULL},
    {"SCAFFOLD_NN_WINO_UMAX", NN_SET_SIZE, STR(NN_SETTINGS_WINO_UMAX), BYTES,
     "bytes of Winograd's transformed weights per column group (a larger U: a group at a time)",
     F(wino_umax), parse_umax, NULL},
    {"SCAFFOLD_NN_WINO_OWN", NN_SET_BOOL, "1", "0, 1",
     "0: every Winograd pass shares its chunks of tiles among the threads (default: layers with "
     "few channels give each thread chunks of its own)",
     F(wino_own), parse_on_unless_0x, NULL},
    {"SCAFFOLD_NN_WINO_PLANES", NN_SET_INT, "0", "0, 1, 2, 4",
     "transformed planes per fp32 Winograd pass over the tiles (0: by the size of U; the tests "
     "force each)",
     F(wino_planes), parse_planes, NULL},
    {"SCAFFOLD_NN_BF16_STORE", NN_SET_ENUM, "auto", "0, 1",
     "1 keeps a bf16 run's down-block conv outputs as bf16 (half the memory, two passes more), "
     "0 in fp32; auto: as bf16 where that saves 256 MiB a sample, or on a GPU",
     F(bf16_store), parse_store, label_store},
    {"SCAFFOLD_NN_KEEP_A1", NN_SET_ENUM, "auto", "0, 1",
     "1 keeps each block's inner activation relu(gn(conv1)) from the forward pass for the "
     "backward pass, 0 makes it again there; auto: kept where all of them take at most 256 MiB "
     "a sample (without checkpointing)",
     F(keep_a1), parse_store, label_store},
    {"SCAFFOLD_NN_SLAB_BYTES", NN_SET_SIZE, STR(NN_SETTINGS_SLAB_BYTES), BYTES,
     "bytes of padded planes per convolution slab", F(slab_bytes), parse_slab, NULL},
};
#define NSET ((int)(sizeof table / sizeof table[0]))

static const struct nn_settings defaults = {
    .isa = NN_SET_UNSET,
    .bf16dp = NN_SET_BF16DP_ON,
    .amx = 1,
    .algo = NN_SET_UNSET,
    .algo_cache = NULL,
    .algo_pin = NULL,
    .algo_strict = 0,
    .algo_quiet = NN_SETTINGS_ALGO_QUIET,
    .dw_replicas = NN_SETTINGS_DW_REPLICAS,
    .winograd = 1,
    .wino_umax = NN_SETTINGS_WINO_UMAX,
    .wino_own = 1,
    .wino_planes = 0,
    .bf16_store = NN_SET_STORE_AUTO,
    .keep_a1 = NN_SET_STORE_AUTO,
    .slab_bytes = NN_SETTINGS_SLAB_BYTES,
};

/* ---- reading -------------------------------------------------------------------------------- */

static struct nn_settings cur;
static char *text[NSET]; /* the environment's text, NULL when unset */
static int unknown[NSET];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void read_env(void) {
    cur = defaults;
    for (int i = 0; i < NSET; i++) {
        free(text[i]);
        const char *v = getenv(table[i].name);
        text[i] = v ? strdup(v) : NULL;
        unknown[i] = text[i] ? table[i].parse(text[i], (char *)&cur + table[i].off) : 0;
    }
}

const struct nn_settings *nn_settings(void) {
    pthread_once(&once, read_env);
    return &cur;
}

void nn_settings_reload(void) {
    pthread_once(&once, read_env);
    read_env();
    nn_isa_reload();
}

int nn_settings_count(void) {
    return NSET;
}

const nn_setting *nn_settings_at(int i) {
    return i >= 0 && i < NSET ? &table[i] : NULL;
}

const char *nn_settings_env(const char *name) {
    nn_settings();
    for (int i = 0; i < NSET; i++)
        if (!strcmp(table[i].name, name))
            return text[i];
    return NULL;
}

/* Setting i's value as the engine uses it. */
static void value_text(int i, char *buf, size_t n) {
    const nn_setting *t = &table[i];
    const void *f = (const char *)nn_settings() + t->off;
    switch (t->kind) {
    case NN_SET_BOOL:
    case NN_SET_INT:
        snprintf(buf, n, "%d", *(const int *)f);
        break;
    case NN_SET_SIZE:
        snprintf(buf, n, "%zu", *(const size_t *)f);
        break;
    case NN_SET_ENUM:
        snprintf(buf, n, "%s", t->label(*(const int *)f));
        break;
    case NN_SET_STRING: {
        const char *s = *(const char *const *)f;
        snprintf(buf, n, "%s", !s ? t->def : *s ? s : "0");
        break;
    }
    }
}

void nn_settings_describe(int i, char *buf, size_t n) {
    if (!n)
        return;
    buf[0] = 0;
    if (i < 0 || i >= NSET)
        return;
    char v[512];
    value_text(i, v, sizeof v);
    if (!text[i])
        snprintf(buf, n, "%s (default)", v);
    else if (!strcmp(v, text[i]) && !unknown[i])
        snprintf(buf, n, "%s (environment)", v);
    else
        snprintf(buf, n, "%s (environment \"%s\"%s)", v, text[i],
                 unknown[i] ? ", not recognised" : "");
}

void nn_settings_log(void) {
    log_info("nn settings (docs/nn.md, \"Environment variables\"):");
    char d[1024];
    for (int i = 0; i < NSET; i++) {
        nn_settings_describe(i, d, sizeof d);
        log_info("  %-24s %s", table[i].name, d);
    }
}

void nn_settings_warn(void) {
    nn_settings();
    for (int i = 0; i < NSET; i++) {
        /* SCAFFOLD_ISA warns where the path is chosen, SCAFFOLD_NN_ALGO is refused there */
        if (!unknown[i] || table[i].parse == parse_isa || table[i].parse == parse_algo)
            continue;
        char d[1024];
        nn_settings_describe(i, d, sizeof d);
        log_warn("%s=\"%s\" is not a value it takes (%s); running with %s", table[i].name,
                 text[i], table[i].allowed, d);
    }
}
