/* test_settings: the engine's settings table (nn/settings.h). Each variable's reading (the one
 * the engine always gave it), defaults shown as the table writes them, where a value came from,
 * nn_settings_reload redoing what the engine derived (the kernel path, Winograd's choice, the
 * SCAFFOLD_NN_ALGO check), and a first read from many threads at once.
 * With --names, prints the table's variable names, one a line (tests/nn/run.sh compares them
 * with docs/nn.md's "Environment variables"). */
#include "core/err.h"
#include "nn/algo.h"
#include "nn/gemm.h"
#include "nn/layers.h"
#include "nn/settings.h"
#include "test.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void unset_all(void) {
    for (int i = 0; i < nn_settings_count(); i++)
        unsetenv(nn_settings_at(i)->name);
    nn_settings_reload();
}

/* Sets name=v (NULL: unsets it), reloads, and returns the description of name's value. */
static const char *set(const char *name, const char *v) {
    static char d[1024];
    if (v)
        setenv(name, v, 1);
    else
        unsetenv(name);
    nn_settings_reload();
    d[0] = 0;
    for (int i = 0; i < nn_settings_count(); i++)
        if (!strcmp(nn_settings_at(i)->name, name))
            nn_settings_describe(i, d, sizeof d);
    return d;
}

static void test_first_read_threads(void) {
    const struct nn_settings *p[64] = {0};
    int n = 0;
#pragma omp parallel num_threads(8)
    {
        const int t = omp_get_thread_num();
        p[t] = nn_settings();
#pragma omp atomic
        n++;
    }
    int same = 1;
    for (int t = 1; t < n && t < 64; t++)
        same &= p[t] == p[0];
    CHECK(n >= 1 && p[0] && same, "a first read from %d threads at once: one table", n);
}

static void test_defaults(void) {
    unset_all();
    int ok = 1;
    char d[1024], want[600];
    for (int i = 0; i < nn_settings_count(); i++) {
        const nn_setting *t = nn_settings_at(i);
        nn_settings_describe(i, d, sizeof d);
        snprintf(want, sizeof want, "%s (default)", t->def);
        if (strcmp(d, want)) {
            fprintf(stderr, "  %s: %s, the table's default is %s\n", t->name, d, t->def);
            ok = 0;
        }
        ok &= t->doc && t->doc[0] && t->allowed && t->allowed[0] &&
              nn_settings_env(t->name) == NULL;
    }
    CHECK(ok && nn_settings_count() == 16 && nn_settings_at(16) == NULL &&
              nn_settings_env("HOME") == NULL,
          "unset: every variable shows the table's default");
    const struct nn_settings *s = nn_settings();
    CHECK(s->isa == NN_SET_UNSET && s->bf16dp == NN_SET_BF16DP_ON && s->amx == 1 &&
              s->algo == NN_SET_UNSET && !s->algo_cache && !s->algo_pin && !s->algo_strict &&
              s->dw_replicas == NN_SETTINGS_DW_REPLICAS && s->winograd == 1 &&
              s->wino_umax == NN_SETTINGS_WINO_UMAX && s->wino_own == 1 && s->wino_planes == 0 &&
              s->bf16_store == NN_SET_STORE_AUTO && s->keep_a1 == NN_SET_STORE_AUTO &&
              s->slab_bytes == NN_SETTINGS_SLAB_BYTES &&
              s->algo_quiet == NN_SETTINGS_ALGO_QUIET,
          "unset: the default values");
}

/* Each variable's reading, with its odd cases kept as they were. */
static void test_values(void) {
    const struct nn_settings *s = nn_settings();
    const char *d;
    d = set("SCAFFOLD_NN_WINOGRAD", "0");
    CHECK(s->winograd == 0 && !strcmp(d, "0 (environment)"), "WINOGRAD=0: %s", d);
    d = set("SCAFFOLD_NN_WINOGRAD", "00");
    CHECK(s->winograd == 0, "WINOGRAD=00 is off (a leading 0): %s", d);
    d = set("SCAFFOLD_NN_WINOGRAD", "off");
    CHECK(s->winograd == 1 && strstr(d, "not recognised"), "WINOGRAD=off: on, reported: %s", d);
    set("SCAFFOLD_NN_WINOGRAD", NULL);
    d = set("SCAFFOLD_NN_BF16_STORE", "0");
    CHECK(s->bf16_store == 0, "BF16_STORE=0: %s", d);
    d = set("SCAFFOLD_NN_BF16_STORE", "1");
    CHECK(s->bf16_store == 1 && !strcmp(d, "1 (environment)"), "BF16_STORE=1: %s", d);
    d = set("SCAFFOLD_NN_BF16_STORE", "yes");
    CHECK(s->bf16_store == NN_SET_STORE_AUTO && strstr(d, "not recognised"),
          "BF16_STORE=yes: auto, reported: %s", d);
    d = set("SCAFFOLD_NN_BF16_STORE", NULL);
    CHECK(s->bf16_store == NN_SET_STORE_AUTO && !strcmp(d, "auto (default)"),
          "BF16_STORE unset: %s", d);
    d = set("SCAFFOLD_NN_KEEP_A1", "0");
    CHECK(s->keep_a1 == 0 && !strcmp(d, "0 (environment)"), "KEEP_A1=0: %s", d);
    d = set("SCAFFOLD_NN_KEEP_A1", "1");
    CHECK(s->keep_a1 == 1, "KEEP_A1=1: %s", d);
    d = set("SCAFFOLD_NN_KEEP_A1", "always");
    CHECK(s->keep_a1 == NN_SET_STORE_AUTO && strstr(d, "not recognised"),
          "KEEP_A1=always: auto, reported: %s", d);
    d = set("SCAFFOLD_NN_KEEP_A1", NULL);
    CHECK(s->keep_a1 == NN_SET_STORE_AUTO && !strcmp(d, "auto (default)"), "KEEP_A1 unset: %s",
          d);
    d = set("SCAFFOLD_AMX", "0");
    CHECK(s->amx == 0, "AMX=0: %s", d);
    d = set("SCAFFOLD_AMX", "00");
    CHECK(s->amx == 1, "AMX=00 is not 0 (exactly 0 turns it off): %s", d);
    set("SCAFFOLD_AMX", NULL);
    d = set("SCAFFOLD_BF16DP", "emulate");
    CHECK(s->bf16dp == NN_SET_BF16DP_EMULATE && !strcmp(d, "emulate (environment)"), "%s", d);
    d = set("SCAFFOLD_BF16DP", "0");
    CHECK(s->bf16dp == NN_SET_BF16DP_OFF, "BF16DP=0: %s", d);
    d = set("SCAFFOLD_BF16DP", "");
    CHECK(s->bf16dp == NN_SET_BF16DP_ON && !strstr(d, "not recognised"), "BF16DP empty: %s", d);
    set("SCAFFOLD_BF16DP", NULL);

    d = set("SCAFFOLD_NN_SLAB_BYTES", "150000");
    CHECK(s->slab_bytes == 150000 && !strcmp(d, "150000 (environment)"), "SLAB_BYTES: %s", d);
    d = set("SCAFFOLD_NN_SLAB_BYTES", "abc");
    CHECK(s->slab_bytes == NN_SETTINGS_SLAB_BYTES && strstr(d, "\"abc\", not recognised"),
          "SLAB_BYTES=abc: the default, reported: %s", d);
    d = set("SCAFFOLD_NN_SLAB_BYTES", "48M");
    CHECK(s->slab_bytes == 48u << 20 && !strstr(d, "not recognised"), "SLAB_BYTES=48M: %s", d);
    d = set("SCAFFOLD_NN_SLAB_BYTES", "2GiB");
    CHECK(s->slab_bytes == (size_t)2 << 30, "SLAB_BYTES=2GiB: %s", d);
    d = set("SCAFFOLD_NN_SLAB_BYTES", "64k");
    CHECK(s->slab_bytes == NN_SETTINGS_SLAB_BYTES && strstr(d, "not recognised"),
          "SLAB_BYTES=64k (lower case): the default, reported: %s", d);
    d = set("SCAFFOLD_NN_SLAB_BYTES", "M");
    CHECK(s->slab_bytes == NN_SETTINGS_SLAB_BYTES && strstr(d, "not recognised"),
          "SLAB_BYTES=M: the default, reported: %s", d);
    d = set("SCAFFOLD_NN_SLAB_BYTES", "99999999999G");
    CHECK(s->slab_bytes == NN_SETTINGS_SLAB_BYTES && strstr(d, "not recognised"),
          "SLAB_BYTES overflowing: the default, reported: %s", d);
    set("SCAFFOLD_NN_SLAB_BYTES", NULL);
    d = set("SCAFFOLD_NN_WINO_UMAX", "4K");
    CHECK(s->wino_umax == 4096, "WINO_UMAX=4K: %s", d);
    d = set("SCAFFOLD_NN_WINO_UMAX", "4096");
    CHECK(s->wino_umax == 4096, "WINO_UMAX: %s", d);
    d = set("SCAFFOLD_NN_WINO_UMAX", "-5");
    CHECK(s->wino_umax == NN_SETTINGS_WINO_UMAX && strstr(d, "not recognised"), "%s", d);
    set("SCAFFOLD_NN_WINO_UMAX", NULL);
    d = set("SCAFFOLD_NN_WINO_OWN", "0");
    CHECK(s->wino_own == 0, "WINO_OWN=0: %s", d);
    set("SCAFFOLD_NN_WINO_OWN", NULL);
    CHECK(s->wino_own == 1, "WINO_OWN unset: on");
    d = set("SCAFFOLD_NN_WINO_PLANES", "2");
    CHECK(s->wino_planes == 2 && !strcmp(d, "2 (environment)"), "WINO_PLANES=2: %s", d);
    d = set("SCAFFOLD_NN_WINO_PLANES", "3");
    CHECK(s->wino_planes == 0 && strstr(d, "not recognised"), "WINO_PLANES=3: 0, reported: %s",
          d);
    d = set("SCAFFOLD_NN_WINO_PLANES", "1x");
    CHECK(s->wino_planes == 0 && strstr(d, "not recognised"), "WINO_PLANES=1x: %s", d);
    set("SCAFFOLD_NN_WINO_PLANES", NULL);
    d = set("SCAFFOLD_NN_DW_REPLICAS", "0");
    CHECK(s->dw_replicas == 0, "DW_REPLICAS=0: %s", d);
    d = set("SCAFFOLD_NN_DW_REPLICAS", "100");
    CHECK(s->dw_replicas == NN_SETTINGS_DW_REPLICAS && strstr(d, "\"100\""),
          "DW_REPLICAS=100: capped: %s", d);
    set("SCAFFOLD_NN_DW_REPLICAS", NULL);
    d = set("SCAFFOLD_NN_ALGO_QUIET", "0");
    CHECK(s->algo_quiet == 0, "ALGO_QUIET=0: %s", d);
    static const char *const bad_quiet[] = {"101", "high", "-1"};
    for (int i = 0; i < 3; i++) {
        d = set("SCAFFOLD_NN_ALGO_QUIET", bad_quiet[i]);
        CHECK(s->algo_quiet == NN_SETTINGS_ALGO_QUIET && strstr(d, "not recognised"),
              "ALGO_QUIET=%s: the default, reported: %s", bad_quiet[i], d);
    }
    set("SCAFFOLD_NN_ALGO_QUIET", NULL);

    d = set("SCAFFOLD_ISA", "bogus");
    CHECK(s->isa == NN_SET_UNKNOWN && !strcmp(nn_settings_env("SCAFFOLD_ISA"), "bogus") &&
              strstr(d, "not recognised"),
          "ISA=bogus: unknown, its text kept for the warning: %s", d);
    d = set("SCAFFOLD_ISA", "sse2");
    CHECK(s->isa == NN_ISA_PORTABLE, "ISA=sse2 is portable: %s", d);
    d = set("SCAFFOLD_ISA", "");
    CHECK(s->isa == NN_SET_UNSET, "ISA empty: the best path: %s", d);
    set("SCAFFOLD_ISA", NULL);

    d = set("SCAFFOLD_NN_ALGO", "measure");
    CHECK(s->algo == NN_SET_ALGO_MEASURE, "ALGO=measure: %s", d);
    d = set("SCAFFOLD_NN_ALGO", "winograd-bf16");
    CHECK(s->algo == NN_ALGO_WINOGRAD_BF16 && !strcmp(d, "winograd-bf16 (environment)"), "%s", d);
    d = set("SCAFFOLD_NN_ALGO", "fastest");
    CHECK(s->algo == NN_SET_UNKNOWN, "ALGO=fastest: unknown: %s", d);
    set("SCAFFOLD_NN_ALGO", NULL);
    d = set("SCAFFOLD_NN_ALGO_CACHE", "0");
    CHECK(s->algo_cache && !s->algo_cache[0] && !strcmp(d, "0 (environment)"), "CACHE=0: %s", d);
    d = set("SCAFFOLD_NN_ALGO_CACHE", "/x/y.tsv");
    CHECK(s->algo_cache && !strcmp(s->algo_cache, "/x/y.tsv"), "CACHE=file: %s", d);
    set("SCAFFOLD_NN_ALGO_CACHE", NULL);
    d = set("SCAFFOLD_NN_ALGO_PIN", "");
    CHECK(!s->algo_pin, "PIN empty: as unset: %s", d);
    set("SCAFFOLD_NN_ALGO_PIN", NULL);
    d = set("SCAFFOLD_NN_ALGO_BUDGET", "strict");
    CHECK(s->algo_strict == 1 && nn_algo_strict(), "BUDGET=strict: %s", d);
    set("SCAFFOLD_NN_ALGO_BUDGET", NULL);
    CHECK(!nn_algo_strict(), "BUDGET unset: the default budget");
}

/* What the engine derived from the settings follows a reload. */
static void test_reload(void) {
    unset_all();
    const int best = nn_isa();
    set("SCAFFOLD_ISA", "portable");
    CHECK(nn_isa() == NN_ISA_PORTABLE, "ISA=portable after a reload: %s",
          nn_isa_name(nn_isa()));
    set("SCAFFOLD_BF16DP", "emulate");
    CHECK(nn_isa_bf16dp() == 1 && !nn_isa_amx(), "BF16DP=emulate after a reload");
    set("SCAFFOLD_BF16DP", "0");
    CHECK(nn_isa_bf16dp() == 0, "BF16DP=0 after a reload");
    set("SCAFFOLD_BF16DP", NULL);
    set("SCAFFOLD_ISA", NULL);
    CHECK(nn_isa() == best, "unset again: the best path (%s)", nn_isa_name(best));

    const int on = nn_conv3d_winograd(1, 16, 16, 16, 16, 24, NN_FP32);
    set("SCAFFOLD_NN_WINOGRAD", "0");
    CHECK(on && !nn_conv3d_winograd(1, 16, 16, 16, 16, 24, NN_FP32),
          "WINOGRAD=0 after a reload: the direct path");
    set("SCAFFOLD_NN_WINOGRAD", NULL);
    CHECK(nn_conv3d_winograd(1, 16, 16, 16, 16, 24, NN_FP32), "and Winograd again");

    set("SCAFFOLD_NN_ALGO_CACHE", "0");
    set("SCAFFOLD_NN_ALGO", "fastest");
    nn_algo_reset();
    int rc = nn_algo_init();
    CHECK(rc == ERR_CONFIG && !strcmp(err_msg(), "SCAFFOLD_NN_ALGO=fastest: unknown (use rule, "
                                                 "measure, direct, winograd, direct-bf16, "
                                                 "winograd-bf16, amx or amx-x3)"),
          "an unknown SCAFFOLD_NN_ALGO: the same message: %s", err_msg());
    set("SCAFFOLD_NN_ALGO", "measure");
    nn_algo_reset();
    rc = nn_algo_init();
    CHECK(rc == 0 && nn_algo_mode() == NN_ALGO_MODE_MEASURE, "ALGO=measure after a reload");
    set("SCAFFOLD_NN_ALGO", NULL);
    nn_algo_reset();
    CHECK(nn_algo_mode() == NN_ALGO_MODE_RULE && nn_algo_cache_path() == NULL,
          "unset again: the program's mode; CACHE=0: no file");
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--names")) {
        for (int i = 0; i < nn_settings_count(); i++)
            printf("%s\n", nn_settings_at(i)->name);
        return 0;
    }
    test_first_read_threads();
    test_defaults();
    test_values();
    test_reload();
    unset_all();
    char d[1024];
    for (int i = 0; i < nn_settings_count(); i++) {
        nn_settings_describe(i, d, sizeof d);
        printf("%-24s %s\n", nn_settings_at(i)->name, d);
    }
    return test_report();
}
