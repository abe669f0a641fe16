/* cu_step: whole U-Net training steps on the CUDA backend (batch 1, Adam, clip 1.0: what
 * scaffold benchmark's step runs, through nn_unet on the backend table), median of REPS timed
 * steps after two warm-up steps (the first measures cuDNN's algorithms). The input batch is
 * staged from host memory every step, as the benchmark's loader does. bench/gpu/run.sh sets the
 * time against the convolution FLOPs and cuDNN's best throughput that cu_conv measures.
 * Usage: cu_step --scale S [--base B] [--bf16] [--ckpt] [--reps R]
 * Output: RESULT step scale S base B PREC ckpt C: median_ms M (min_ms m) */
#include "core/err.h"
#include "core/rng.h"
#include "core/log.h"
#include "nn/backend.h"
#include "nn/cuda/cu.h"
#include "nn/optim.h"
#include "nn/unet.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmpd(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int fail(const char *what) {
    fprintf(stderr, "cu_step: %s: %s\n", what, err_msg());
    MPI_Finalize();
    return 1;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int scale = 5, base = 64, bf = 0, ckpt = 0, reps = 10, classes = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--scale") && i + 1 < argc)
            scale = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--base") && i + 1 < argc)
            base = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bf16"))
            bf = 1;
        else if (!strcmp(argv[i], "--ckpt"))
            ckpt = 1;
        else {
            fprintf(stderr, "usage: cu_step --scale S [--base B] [--bf16] [--ckpt] [--reps R]\n");
            MPI_Finalize();
            return 2;
        }
    }
    if (scale < 4 || scale > 8 || base < 8 || reps < 3 || reps > 999) {
        fprintf(stderr, "cu_step: scale 4..8, base >= 8, reps 3..999\n");
        MPI_Finalize();
        return 2;
    }
    char why[256];
    if (cu_probe(why, sizeof why) < 1) {
        printf("SKIP cu_step: no GPU visible (%s)\n", why[0] ? why : "no CUDA device");
        MPI_Finalize();
        return 0;
    }
    nn_backend *be;
    if (cu_backend_create(&be, 0, bf, (size_t)4 << 30))
        return fail("CUDA backend");
    const int size = 1 << scale;
    const nn_unet_spec s = {3, classes, scale - 3, base, 8};
    const nn_unet_opts o = {.precision = bf ? NN_BF16 : NN_FP32, .checkpointing = ckpt,
                            .backend = be, .optimizer = NN_OPT_ADAM};
    nn_unet m;
    nn_optim opt;
    if (nn_unet_create_opts(&m, &s, &o, 1, size, size, size))
        return fail("model");
    if (nn_unet_init_params(&m, 1) || nn_optim_init(&opt, NN_OPT_ADAM, m.nparams))
        return fail("parameters");
    const size_t S = (size_t)size * size * size;
    float *x = malloc(3 * S * sizeof(float)), w[8];
    uint16_t *y = malloc(S * sizeof(uint16_t));
    double *t = malloc((size_t)reps * sizeof(double));
    if (!x || !y || !t) {
        fprintf(stderr, "cu_step: out of host memory\n");
        return 1;
    }
    rng r = rng_make(2, RNG_TEST, 1, 0);
    for (size_t i = 0; i < 3 * S; i++)
        x[i] = (float)rng_normal(&r);
    for (size_t i = 0; i < S; i++)
        y[i] = (uint16_t)rng_below(&r, (uint64_t)classes);
    for (int c = 0; c < classes; c++)
        w[c] = 1.0f;
    float probe;
    for (int i = -2; i < reps; i++) {
        double loss, dice;
        const double t0 = time_now();
        nn_unet_zero_grad(&m);
        if (nn_unet_forward_backward(&m, x, y, 1, w, &loss, &dice) ||
            nn_unet_step(&m, &opt, 1e-3, 1.0) ||
            be->download(be, &probe, m.dparams, sizeof probe)) /* waits for the step */
            return fail("step");
        if (i >= 0)
            t[i] = time_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmpd);
    const double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    printf("RESULT step scale %d base %d %s ckpt %d: median_ms %.3f (min_ms %.3f) of %d steps\n",
           scale, base, bf ? "bf16" : "fp32", ckpt, 1e3 * med, 1e3 * t[0], reps);
    free(x), free(y), free(t);
    nn_optim_free(&opt);
    nn_unet_free(&m);
    be->destroy(be);
    MPI_Finalize();
    return 0;
}
