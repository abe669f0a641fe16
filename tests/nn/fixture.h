/* fixture.h: loads float tensors from the PyTorch reference fixtures (safetensors files written
 * by tools/torch_ref.py) and converts between PyTorch's NCDHW and scaffold's channels-last. */
#ifndef SCAFFOLD_TESTS_NN_FIXTURE_H
#define SCAFFOLD_TESTS_NN_FIXTURE_H

#include "core/err.h"
#include "nn/layers.h"
#include "nn/gemm.h"
#include "nn/safetensors.h"
#include "nn/settings.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Loads tensor `name` as float32 (malloc'ed); shape into sh[ndim]. Exits on a missing tensor:
 * a fixture that does not match the test is a broken test, not a failed check. */
static float *fx_get(const nn_st_file *st, const char *name, int64_t *sh, int *ndim) {
    const nn_st_entry *e = nn_st_find(st, name);
    if (!e) {
        fprintf(stderr, "fixture %s lacks tensor %s (regenerate with tools/torch_ref.py)\n",
                st->path, name);
        exit(1);
    }
    size_t n = nn_st_numel(e);
    float *p = malloc((n ? n : 1) * sizeof(float) + 256);
    if (!strcmp(e->dtype, "U16")) {
        /* labels: read raw then widen */
        FILE *f = fopen(st->path, "rb");
        uint16_t *tmp = malloc(n * 2 + 2);
        if (!f || fseek(f, (long)(st->data_start + e->begin), SEEK_SET) ||
            fread(tmp, 2, n, f) != n) {
            fprintf(stderr, "cannot read %s\n", name);
            exit(1);
        }
        fclose(f);
        for (size_t i = 0; i < n; i++)
            p[i] = tmp[i];
        free(tmp);
    } else if (nn_st_read_f32(st, e, p)) {
        fprintf(stderr, "%s\n", err_msg());
        exit(1);
    }
    if (sh)
        memcpy(sh, e->shape, sizeof(int64_t) * e->ndim);
    if (ndim)
        *ndim = e->ndim;
    return p;
}

/* NCDHW tensor -> channels-last copy (malloc'ed); shape (N, C, spatial...) */
static float *fx_cl(const float *src, const int64_t *sh, int ndim) {
    long S = 1;
    for (int i = 2; i < ndim; i++)
        S *= sh[i];
    size_t n = (size_t)sh[0] * sh[1] * S;
    float *d = malloc(n * sizeof(float) + 256);
    nn_to_channels_last(d, src, (int)sh[0], (int)sh[1], S);
    return d;
}

static float *fx_get_cl(const nn_st_file *st, const char *name, int64_t *sh) {
    int nd;
    float *p = fx_get(st, name, sh, &nd);
    float *q = fx_cl(p, sh, nd);
    free(p);
    return q;
}

static size_t fx_numel(const int64_t *sh, int ndim) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)sh[i];
    return n;
}

/* 1 when SCAFFOLD_NN_ALGO forces an algorithm (nn/algo.h): the checks of which algorithm the
 * rule gives a shape do not hold then. */
static inline int fx_algo_forced(void) {
    const int a = nn_settings()->algo;
    return a >= 0 || a == NN_SET_UNKNOWN;
}

/* Kernel path banner: prints the path in use and checks that SCAFFOLD_ISA, when set, chose it.
 * With --list-isas as argv[1], prints the paths this CPU can run and returns 1 (caller exits). */
static inline int fx_isa_setup(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--bf16dp")) { /* 1: the CPU runs vdpbf16ps (run.sh) */
        printf("%d\n", nn_isa_bf16dp());
        return 1;
    }
    if (argc > 1 && !strcmp(argv[1], "--list-isas")) {
        for (int i = 0; i < NN_ISA_COUNT; i++)
            if (nn_isa_supported(i))
                printf("%s ", nn_isa_name(i));
        printf("\n");
        (void)nn_isa(); /* reports a bad SCAFFOLD_ISA */
        return 1;
    }
    const char *want = nn_settings_env("SCAFFOLD_ISA");
    printf("kernel path %s (%d floats per vector, bf16 dot products %s, AMX %s) on %s\n",
           nn_isa_name(nn_isa()), nn_gemm_vw(), nn_isa_bf16dp() ? "yes" : "no",
           nn_isa_amx() ? "yes" : "no", nn_cpu_name());
    if (want && *want && strcmp(want, "sse2"))
        CHECK(!strcmp(want, nn_isa_name(nn_isa())), "SCAFFOLD_ISA=%s but the path is %s", want,
              nn_isa_name(nn_isa()));
    return 0;
}

#endif
