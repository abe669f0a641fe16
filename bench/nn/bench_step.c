/* bench_step: time of one U-Net training step (zero grad, forward, loss, backward, clip, Adam)
 * at batch 1, median of repeats, with the forward/loss/backward split, the model's convolution
 * FLOPs and the GFLOP/s reached; plus the machine's FP32 FMA peak measured by a register-only
 * loop and the rate of the convolution microkernel as a plain SGEMM (cache-resident), the two
 * ceilings the step's GFLOP/s is reported against.
 *
 * The machine's SGEMM rate (oneDNN) is measured by tools/torch_ref.py sgemm in bench/nn/run.sh.
 *
 * usage: bench_step [--scale S] [--base B] [--classes K] [--reps R] [--peak]
 *        bench_step --conv D CIN COUT REPS   (one conv layer: implicit GEMM vs naive loops) */
#include "core/log.h"
#include "core/rng.h"
#include "nn/gemm.h"
#include "nn/layers.h"
#include "nn/optim.h"
#include "nn/unet.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmpd);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Forward multiply-add FLOPs (x2) of convolutions and transposed convolutions, per sample. */
static double unet_fwd_flops(const nn_unet_spec *s, int size) {
    double f = 0;
    const int L = s->layers;
    for (int i = 0; i <= L; i++) {
        const double vox = pow((double)(size >> i), 3);
        const double c = (double)s->base_channels * (1 << i);
        const double cin = i == 0 ? s->in_channels : c / 2;
        f += 2 * vox * 27 * (cin * c + c * c); /* down DoubleConv */
        if (i < L) {
            const double c2 = 2 * c;                    /* up block input channels */
            f += 2 * vox * c2 * c;                      /* convT: (vox/8) * 8 taps * c2 * c */
            f += 2 * vox * 27 * (c2 * c + c * c);       /* up DoubleConv */
        }
    }
    f += 2 * pow(size, 3) * s->base_channels * s->n_classes;
    return f;
}

/* FP32 FMA peak: independent FMA chains in registers on every thread. The attribute turns on
 * FMA contraction, which ISO C mode leaves off (without it this measures mul + add). */
typedef float vpk __attribute__((vector_size(64)));
__attribute__((optimize("fp-contract=fast"))) static double fma_peak(void) {
    const long iters = 20000000;
    double t0 = time_now();
    int nth = 1;
#pragma omp parallel
    {
#pragma omp single
        nth = omp_get_num_threads();
        vpk a[12], b = {0}, c = {0};
        for (int k = 0; k < 16; k++)
            b[k] = 1.0f + 1e-7f * k, c[k] = 1e-8f;
        for (int j = 0; j < 12; j++)
            a[j] = c + (float)j;
        for (long i = 0; i < iters; i++)
#pragma GCC unroll 12
            for (int j = 0; j < 12; j++)
                a[j] = a[j] * b + c;
        float s = 0;
        for (int j = 0; j < 12; j++)
            s += a[j][0];
        if (s == 12345.0f)
            printf("#");
    }
    double dt = time_now() - t0;
    return (double)iters * 12 * 16 * 2 * nth / dt / 1e9;
}

/* The microkernel as a plain SGEMM: C (M x N) = A (M x K) B (K x N), blocks of rows. */
static double kernel_sgemm(int M, int N, int K) {
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N),
          *C = malloc(sizeof(float) * M * N);
    for (long i = 0; i < (long)M * K; i++)
        A[i] = (float)(i % 7) * 0.1f;
    for (long i = 0; i < (long)K * N; i++)
        B[i] = (float)(i % 5) * 0.1f;
    const int nr = nn_gemm_nr(N);
    const long aoff[1] = {0};
    const nn_tg g = {.T = 1, .K = K, .aoff = aoff, .lda = K, .ldc = N, .nr = nr};
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = time_now();
#pragma omp parallel for collapse(2) schedule(static)
        for (int ob = 0; ob < N / nr; ob++)
            for (int r = 0; r < M / 32; r++)
                nn_tg_row(&g, 32, A + (long)r * 32 * K, B + (long)ob * K * nr,
                          C + (long)r * 32 * N + ob * nr, NULL, nr, NN_TG_ZERO);
        double dt = time_now() - t0;
        best = dt < best ? dt : best;
    }
    free(A), free(B), free(C);
    return 2.0 * M * N * K / best / 1e9;
}

static int bench_conv(int D, int cin, int cout, int reps) {
    const size_t P = (size_t)D * D * D;
    float *x = malloc(P * cin * 4), *w = malloc(27 * (size_t)cin * cout * 4),
          *y = malloc(P * cout * 4), *dy = malloc(P * cout * 4), *dx = malloc(P * cin * 4),
          *dw = calloc(27 * (size_t)cin * cout, 4);
    rng r = rng_make(1, RNG_TEST, 0, 0);
    for (size_t i = 0; i < P * cin; i++)
        x[i] = (float)rng_normal(&r);
    for (size_t i = 0; i < 27 * (size_t)cin * cout; i++)
        w[i] = (float)rng_normal(&r) * 0.05f;
    for (size_t i = 0; i < P * cout; i++)
        dy[i] = (float)rng_normal(&r);
    float *ws = malloc(nn_conv3d_ws_floats(1, D, D, D, cin, cout) * 4);
    const double flops = 2.0 * P * 27 * cin * cout;
    double tf[64], tb[64], tn[64];
    reps = reps > 64 ? 64 : reps;
    for (int i = 0; i < reps; i++) {
        double t0 = time_now();
        nn_conv3d_forward(y, x, cin, NULL, 0, w, cout, 1, D, D, D, ws);
        double t1 = time_now();
        nn_conv3d_backward(dx, dw, dy, x, cin, NULL, 0, w, cout, 1, D, D, D, ws);
        double t2 = time_now();
        tf[i] = t1 - t0;
        tb[i] = t2 - t1;
    }
    const int nrep = 1; /* the naive loops are slow: one run */
    for (int i = 0; i < nrep; i++) {
        double t0 = time_now();
        nn_conv3d_forward_ref(y, x, w, cin, cout, 1, D, D, D);
        tn[i] = time_now() - t0;
    }
    double tw[64];
    for (int i = 0; i < reps; i++) {
        double t0 = time_now();
        nn_conv3d_backward(NULL, dw, dy, x, cin, NULL, 0, w, cout, 1, D, D, D, ws);
        tw[i] = time_now() - t0;
    }
    printf("  weight gradient alone %.4f s (%.1f GFLOP/s)\n", median(tw, reps),
           flops / median(tw, reps) / 1e9);
    double mf = median(tf, reps), mb = median(tb, reps), mn = median(tn, nrep);
    printf("conv3d %d^3 %d->%d: implicit GEMM fwd %.4f s (%.1f GFLOP/s), bwd %.4f s "
           "(%.1f GFLOP/s); naive fwd %.4f s (%.1f GFLOP/s); implicit GEMM / naive speedup %.1fx\n",
           D, cin, cout, mf, flops / mf / 1e9, mb, 2 * flops / mb / 1e9, mn, flops / mn / 1e9,
           mn / mf);
    free(x), free(w), free(y), free(dy), free(dx), free(dw), free(ws);
    return 0;
}

int main(int argc, char **argv) {
    int scale = 5, base = 64, classes = 6, reps = 5, peak = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--scale") && i + 1 < argc)
            scale = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--base") && i + 1 < argc)
            base = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--classes") && i + 1 < argc)
            classes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--peak"))
            peak = 1;
        else if (!strcmp(argv[i], "--conv") && i + 4 < argc)
            return bench_conv(atoi(argv[i + 1]), atoi(argv[i + 2]), atoi(argv[i + 3]),
                              atoi(argv[i + 4]));
        else {
            fprintf(stderr, "usage: bench_step [--scale S] [--base B] [--classes K] [--reps R] "
                            "[--peak] | --conv D CIN COUT REPS\n");
            return 2;
        }
    }
    if (peak) {
        printf("fma_peak_gflops %.1f threads %d\n", fma_peak(), omp_get_max_threads());
        printf("kernel_sgemm_gflops %.1f (M=4096 N=256 K=512)\n", kernel_sgemm(4096, 256, 512));
        return 0;
    }
    const int size = 1 << scale;
    nn_unet_spec s = {3, classes, scale - 3, base, 8};
    nn_unet m;
    if (nn_unet_create(&m, &s, 1, size, size, size)) {
        fprintf(stderr, "bench_step: cannot build the model\n");
        return 1;
    }
    nn_unet_init_params(&m, 1);
    nn_optim o;
    nn_optim_init(&o, NN_OPT_ADAM, m.nparams);
    const size_t S = (size_t)size * size * size;
    float *x = malloc(3 * S * sizeof(float)), w[256];
    uint16_t *y = malloc(S * sizeof(uint16_t));
    rng r = rng_make(2, RNG_TEST, 0, 0);
    for (size_t i = 0; i < 3 * S; i++)
        x[i] = (float)rng_normal(&r);
    for (size_t i = 0; i < S; i++)
        y[i] = (uint16_t)rng_below(&r, (uint64_t)classes);
    for (int c = 0; c < classes; c++)
        w[c] = 1.0f;
    double t[64], tf[64], tl[64], tb[64];
    reps = reps > 63 ? 63 : reps;
    for (int i = 0; i <= reps; i++) { /* step 0 warms up (page faults of the slabs) */
        double loss, dice, t0 = time_now();
        nn_unet_zero_grad(&m);
        nn_unet_forward_backward(&m, x, y, 1, w, &loss, &dice);
        nn_clip_grad_norm(m.grads, m.nparams, 1.0);
        nn_optim_step(&o, m.params, m.grads, 1e-3);
        if (i > 0) {
            t[i - 1] = time_now() - t0;
            nn_unet_last_times(&m, &tf[i - 1], &tl[i - 1], &tb[i - 1]);
        }
    }
    const double fl = 3 * unet_fwd_flops(&s, size);
    const double med = median(t, reps);
    printf("scaffold_step_s %.6f fwd %.4f loss %.4f bwd %.4f gflop %.2f gflops %.1f params %zu "
           "activations_mib %.0f threads %d\n",
           med, median(tf, reps), median(tl, reps), median(tb, reps), fl / 1e9, fl / med / 1e9,
           m.nparams, (double)m.activation_floats * 4 / (1 << 20), omp_get_max_threads());
    free(x), free(y);
    nn_optim_free(&o);
    nn_unet_free(&m);
    return 0;
}
