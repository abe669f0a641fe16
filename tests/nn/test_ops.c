/* test_ops: every engine op's fast path against its plain reference (nn/ref.h) on the same random
 * input, with the project's tolerance rule (check_close: |got - want| <= atol + rtol |want|).
 * With --time it is also the per-op check-and-time driver (bench/nn/ops.sh, llm.c's dev/cuda
 * pattern): per op, the reference and the fast path run on one input, are compared, timed (best
 * of REPS runs after one warm-up), and one table is printed.
 *   test_ops                      the check, on small shapes (tests/nn/run.sh)
 *   test_ops --time [D [C [REPS]]] the table for an N=1 D^3 volume of C channels (default 16 32 5)
 * The fast paths run in fp32 (the bf16 paths have their own tests against bf16-rounded ideals in
 * test_layers.c); each op's table row states its tolerance. */
#include "nn/gemm.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "nn/ref.h"
#include "test.h"

#include "core/rng.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* One op's case: the shape, its inputs (in[]), the outputs of the reference (r[]) and of the fast
 * path (f[]), and what the fast path needs (ws, idx, the optimizer). */
typedef struct op_case {
    int N, D, H, W, C, K, G;
    long P; /* voxels */
    float *in[6];
    float *r[3], *f[3];
    size_t n[3];
    int nout;
    float *ws;
    uint8_t *idx;
    uint16_t *labels;
    nn_optim opt;
} op_case;

typedef struct op_def {
    const char *name;
    void (*setup)(op_case *c);
    void (*ref)(op_case *c);
    void (*fast)(op_case *c);
    float atol, rtol;
} op_def;

static float *randv(size_t n, uint64_t seed, float scale) {
    float *p = aligned_alloc(64, ((n + 64) * sizeof(float) + 63) & ~(size_t)63);
    rng r = rng_make(seed, RNG_TEST, n, 0);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)rng_normal(&r) * scale;
    return p;
}

static float *zerov(size_t n) {
    float *p = aligned_alloc(64, ((n + 64) * sizeof(float) + 63) & ~(size_t)63);
    memset(p, 0, (n + 64) * sizeof(float));
    return p;
}

/* Output i of n floats, zeroed in both the reference's and the fast path's copy. */
static void out(op_case *c, int i, size_t n) {
    c->r[i] = zerov(n);
    c->f[i] = zerov(n);
    c->n[i] = n;
    c->nout = i + 1;
}

/* ---- setups ------------------------------------------------------------------------------- */

static void su_conv3d(op_case *c) {
    c->in[0] = randv((size_t)c->P * c->C, 11, 1);
    c->in[1] = randv((size_t)c->K * c->C * 27, 12, 1.0f / sqrtf(27.0f * c->C));
    c->in[2] = randv((size_t)c->P * c->K, 13, 1);
    c->ws = zerov(nn_conv3d_ws_floats(c->N, c->D, c->H, c->W, c->C, c->K));
}
static void su_conv3d_fwd(op_case *c) {
    su_conv3d(c);
    out(c, 0, (size_t)c->P * c->K);
}
static void su_conv3d_bwd_data(op_case *c) {
    su_conv3d(c);
    out(c, 0, (size_t)c->P * c->C);
}
static void su_conv3d_bwd_weight(op_case *c) {
    su_conv3d(c);
    out(c, 0, (size_t)c->K * c->C * 27);
}

static void su_convt(op_case *c) {
    c->in[0] = randv((size_t)c->P * c->C, 21, 1);
    c->in[1] = randv((size_t)c->C * c->K * 8, 22, 1.0f / sqrtf((float)c->C));
    c->in[2] = randv((size_t)c->K, 23, 1);
    c->in[3] = randv((size_t)8 * c->P * c->K, 24, 1);
    c->ws = zerov(nn_convt3d_ws_floats_p(c->N, c->D, c->H, c->W, c->C, c->K, NN_FP32));
}
static void su_convt_fwd(op_case *c) {
    su_convt(c);
    out(c, 0, (size_t)8 * c->P * c->K);
}
static void su_convt_bwd(op_case *c) {
    su_convt(c);
    out(c, 0, (size_t)c->P * c->C);
    out(c, 1, (size_t)c->C * c->K * 8);
    out(c, 2, (size_t)c->K);
}

static void su_conv1(op_case *c) {
    c->in[0] = randv((size_t)c->P * c->C, 31, 1);
    c->in[1] = randv((size_t)c->K * c->C, 32, 1.0f / sqrtf((float)c->C));
    c->in[2] = randv((size_t)c->K, 33, 1);
    c->in[3] = randv((size_t)c->P * c->K, 34, 1);
    c->ws = zerov(nn_conv1_ws_floats_p(c->P, c->C, c->K, NN_FP32));
}
static void su_conv1_fwd(op_case *c) {
    su_conv1(c);
    out(c, 0, (size_t)c->P * c->K);
}
static void su_conv1_bwd(op_case *c) {
    su_conv1(c);
    out(c, 0, (size_t)c->P * c->C);
    out(c, 1, (size_t)c->K * c->C);
    out(c, 2, (size_t)c->K);
}

/* x, gamma, beta, dy; y, mean and rstd from the fast forward pass (the backward's inputs). */
static void su_gn(op_case *c) {
    const size_t n = (size_t)c->P * c->C;
    c->in[0] = randv(n, 41, 1);
    for (size_t i = 0; i < n; i++) /* an offset per channel: the statistics' cancellation */
        c->in[0][i] += (float)(i % c->C) * 0.25f;
    c->in[1] = randv((size_t)c->C, 42, 1);
    c->in[2] = randv((size_t)c->C, 43, 1);
    c->in[3] = randv(n, 44, 1);
    c->in[4] = zerov(n);
    c->in[5] = zerov(2 * (size_t)c->N * c->G);
    c->ws = zerov(nn_groupnorm_ws_floats(c->C) + 2 * (size_t)c->C);
    nn_groupnorm_forward(c->in[4], c->in[5], c->in[5] + c->N * c->G, c->in[0], c->in[1], c->in[2],
                         c->N, c->P / c->N, c->C, c->G, 1, c->ws);
}
static void su_gn_fwd(op_case *c) {
    su_gn(c);
    out(c, 0, (size_t)c->P * c->C);
    out(c, 1, (size_t)c->N * c->G);
    out(c, 2, (size_t)c->N * c->G);
}
static void su_gn_bwd(op_case *c) {
    su_gn(c);
    out(c, 0, (size_t)c->P * c->C);
    out(c, 1, (size_t)c->C);
    out(c, 2, (size_t)c->C);
}

static void su_relu(op_case *c) {
    const size_t n = (size_t)c->P * c->C;
    c->in[0] = randv(n, 51, 1);
    c->in[1] = randv(n, 52, 1);
    c->in[2] = zerov(n);
    nn_relu_forward(c->in[2], c->in[0], n);
    out(c, 0, n);
}

static void su_pool(op_case *c) {
    c->in[0] = randv((size_t)c->P * c->C, 61, 1);
    c->in[1] = randv((size_t)c->P / 8 * c->C, 62, 1);
    c->idx = malloc((size_t)c->P / 8 * c->C + 64);
    c->in[2] = zerov((size_t)c->P / 8 * c->C);
    nn_maxpool3d_forward(c->in[2], c->idx, c->in[0], c->N, c->D, c->H, c->W, c->C);
}
static void su_pool_fwd(op_case *c) {
    su_pool(c);
    out(c, 0, (size_t)c->P / 8 * c->C);
}
static void su_pool_bwd(op_case *c) {
    su_pool(c);
    out(c, 0, (size_t)c->P * c->C);
}

static void su_loss(op_case *c) {
    c->in[0] = randv((size_t)c->P * c->K, 71, 2);
    c->in[1] = randv((size_t)c->K, 72, 0.3f);
    for (int k = 0; k < c->K; k++)
        c->in[1][k] = 1.0f + fabsf(c->in[1][k]);
    c->labels = malloc(sizeof(uint16_t) * (size_t)c->P);
    rng r = rng_make(73, RNG_TEST, (uint64_t)c->P, 0);
    for (long v = 0; v < c->P; v++)
        c->labels[v] = (uint16_t)rng_below(&r, (uint64_t)c->K);
    c->ws = zerov(nn_loss_ws_floats(c->N, c->K));
    out(c, 0, (size_t)c->P * c->K);
    out(c, 1, 3); /* loss, CE, Dice */
}

/* Parameters and gradients (P * C of each); the parameters start in both outputs. */
static void su_optim(op_case *c, nn_optim_kind kind) {
    const size_t n = (size_t)c->P * c->C;
    c->in[0] = randv(n, 81, 1);
    c->in[1] = randv(n, 82, 1);
    c->in[2] = zerov(2 * n); /* the reference's state */
    out(c, 0, n);
    memcpy(c->r[0], c->in[0], n * sizeof(float));
    memcpy(c->f[0], c->in[0], n * sizeof(float));
    nn_optim_init(&c->opt, kind, n);
}
static void su_adam(op_case *c) {
    su_optim(c, NN_OPT_ADAM);
}
static void su_sgd(op_case *c) {
    su_optim(c, NN_OPT_SGD);
}
static void su_rmsprop(op_case *c) {
    su_optim(c, NN_OPT_RMSPROP);
}

/* ---- the reference and the fast path of each op ------------------------------------------ */

#define SHAPE c->N, c->D, c->H, c->W
static void ref_conv3d_fwd(op_case *c) {
    nn_ref_conv3d_forward(c->r[0], c->in[0], c->in[1], c->C, c->K, SHAPE);
}
static void fast_conv3d_fwd(op_case *c) {
    nn_conv3d_forward_p(c->f[0], c->in[0], c->C, NULL, 0, c->in[1], c->K, SHAPE, NN_FP32, NULL,
                        c->ws);
}
static void ref_conv3d_bwd_data(op_case *c) {
    nn_ref_conv3d_backward(c->r[0], NULL, c->in[2], c->in[0], c->in[1], c->C, c->K, SHAPE);
}
static void fast_conv3d_bwd_data(op_case *c) {
    nn_conv3d_backward_p(c->f[0], NULL, NULL, c->in[2], c->in[0], c->C, NULL, 0, c->in[1], c->K,
                         SHAPE, NN_FP32, NULL, c->ws);
}
static void ref_conv3d_bwd_weight(op_case *c) {
    memset(c->r[0], 0, c->n[0] * sizeof(float));
    nn_ref_conv3d_backward(NULL, c->r[0], c->in[2], c->in[0], c->in[1], c->C, c->K, SHAPE);
}
static void fast_conv3d_bwd_weight(op_case *c) {
    memset(c->f[0], 0, c->n[0] * sizeof(float));
    nn_conv3d_backward_p(NULL, NULL, c->f[0], c->in[2], c->in[0], c->C, NULL, 0, c->in[1], c->K,
                         SHAPE, NN_FP32, NULL, c->ws);
}
static void ref_convt_fwd(op_case *c) {
    nn_ref_convt3d_forward(c->r[0], c->in[0], c->in[1], c->in[2], c->C, c->K, SHAPE);
}
static void fast_convt_fwd(op_case *c) {
    nn_convt3d_forward_p(c->f[0], c->in[0], c->in[1], c->in[2], c->C, c->K, SHAPE, NN_FP32, c->ws);
}
static void ref_convt_bwd(op_case *c) {
    memset(c->r[1], 0, c->n[1] * sizeof(float));
    memset(c->r[2], 0, c->n[2] * sizeof(float));
    nn_ref_convt3d_backward(c->r[0], c->r[1], c->r[2], c->in[3], c->K, c->in[0], c->in[1], c->C,
                            c->K, SHAPE);
}
static void fast_convt_bwd(op_case *c) {
    memset(c->f[1], 0, c->n[1] * sizeof(float));
    memset(c->f[2], 0, c->n[2] * sizeof(float));
    nn_convt3d_backward_p(c->f[0], c->f[1], c->f[2], c->in[3], c->K, c->in[0], c->in[1], c->C,
                          c->K, SHAPE, NN_FP32, c->ws);
}
static void ref_conv1_fwd(op_case *c) {
    nn_ref_conv1_forward(c->r[0], c->in[0], c->in[1], c->in[2], c->C, c->K, c->P);
}
static void fast_conv1_fwd(op_case *c) {
    nn_conv1_forward_p(c->f[0], c->in[0], c->in[1], c->in[2], c->C, c->K, c->P, NN_FP32, c->ws);
}
static void ref_conv1_bwd(op_case *c) {
    memset(c->r[1], 0, c->n[1] * sizeof(float));
    memset(c->r[2], 0, c->n[2] * sizeof(float));
    nn_ref_conv1_backward(c->r[0], c->r[1], c->r[2], c->in[3], c->in[0], c->in[1], c->C, c->K,
                          c->P);
}
static void fast_conv1_bwd(op_case *c) {
    memset(c->f[1], 0, c->n[1] * sizeof(float));
    memset(c->f[2], 0, c->n[2] * sizeof(float));
    nn_conv1_backward_p(c->f[0], c->f[1], c->f[2], c->in[3], c->in[0], c->in[1], c->C, c->K, c->P,
                        NN_FP32, c->ws);
}
static void ref_gn_fwd(op_case *c) {
    nn_ref_groupnorm_forward(c->r[0], c->r[1], c->r[2], c->in[0], c->in[1], c->in[2], c->N,
                             c->P / c->N, c->C, c->G, 1);
}
static void fast_gn_fwd(op_case *c) {
    nn_groupnorm_forward(c->f[0], c->f[1], c->f[2], c->in[0], c->in[1], c->in[2], c->N,
                         c->P / c->N, c->C, c->G, 1, c->ws);
}
static void ref_gn_bwd(op_case *c) {
    memset(c->r[1], 0, c->n[1] * sizeof(float));
    memset(c->r[2], 0, c->n[2] * sizeof(float));
    nn_ref_groupnorm_backward(c->r[0], c->r[1], c->r[2], c->in[3], c->in[0], c->in[4], c->in[5],
                              c->in[5] + c->N * c->G, c->in[1], c->N, c->P / c->N, c->C, c->G, 1);
}
static void fast_gn_bwd(op_case *c) {
    memset(c->f[1], 0, c->n[1] * sizeof(float));
    memset(c->f[2], 0, c->n[2] * sizeof(float));
    nn_groupnorm_backward(c->f[0], c->f[1], c->f[2], c->in[3], c->in[0], c->in[4], c->in[5],
                          c->in[5] + c->N * c->G, c->in[1], c->N, c->P / c->N, c->C, c->G, 1,
                          c->ws);
}
static void ref_relu_fwd(op_case *c) {
    nn_ref_relu_forward(c->r[0], c->in[0], c->n[0]);
}
static void fast_relu_fwd(op_case *c) {
    nn_relu_forward(c->f[0], c->in[0], c->n[0]);
}
static void ref_relu_bwd(op_case *c) {
    nn_ref_relu_backward(c->r[0], c->in[1], c->in[2], c->n[0]);
}
static void fast_relu_bwd(op_case *c) {
    nn_relu_backward(c->f[0], c->in[1], c->in[2], c->n[0]);
}
static void ref_pool_fwd(op_case *c) {
    nn_ref_maxpool3d_forward(c->r[0], c->in[0], SHAPE, c->C);
}
static void fast_pool_fwd(op_case *c) {
    nn_maxpool3d_forward(c->f[0], c->idx, c->in[0], SHAPE, c->C);
}
static void ref_pool_bwd(op_case *c) {
    memset(c->r[0], 0, c->n[0] * sizeof(float));
    nn_ref_maxpool3d_backward(c->r[0], c->in[1], c->in[0], SHAPE, c->C);
}
static void fast_pool_bwd(op_case *c) {
    memset(c->f[0], 0, c->n[0] * sizeof(float));
    nn_maxpool3d_backward(c->f[0], c->in[1], c->idx, SHAPE, c->C);
}
static void ref_loss(op_case *c) {
    double l, ce, d;
    nn_ref_loss(c->r[0], c->in[0], c->labels, c->in[1], c->N, c->P / c->N, c->K, &l, &ce, &d);
    c->r[1][0] = (float)l, c->r[1][1] = (float)ce, c->r[1][2] = (float)d;
}
static void fast_loss(op_case *c) {
    double l, ce, d;
    nn_loss(c->f[0], c->in[0], c->labels, c->in[1], c->N, c->P / c->N, c->K, &l, &ce, &d, c->ws);
    c->f[1][0] = (float)l, c->f[1][1] = (float)ce, c->f[1][2] = (float)d;
}
/* Optimizers: two steps from the parameters in r[0] / f[0] (the second one with state). */
#define OPT_LR 1e-3
static void ref_adam(op_case *c) {
    const size_t n = c->n[0];
    for (long t = 1; t <= 2; t++)
        nn_ref_adam(c->r[0], c->in[2], c->in[2] + n, c->in[1], n, OPT_LR, t);
}
static void ref_sgd(op_case *c) {
    for (int t = 0; t < 2; t++)
        nn_ref_sgd(c->r[0], c->in[1], c->n[0], OPT_LR);
}
static void ref_rmsprop(op_case *c) {
    for (int t = 0; t < 2; t++)
        nn_ref_rmsprop(c->r[0], c->in[2], c->in[1], c->n[0], OPT_LR);
}
static void fast_optim(op_case *c) {
    for (int t = 0; t < 2; t++)
        nn_optim_step(&c->opt, c->f[0], c->in[1], OPT_LR);
}

/* Tolerances: fp32 sums against double ones. Outputs of sums over channels: 1e-4 abs + 1e-4
 * rel; sums over voxels (weight and bias gradients, statistics) 2e-4 abs + 1e-3 rel, scaled
 * with the shape in main(); element-wise ops exact up to one rounding. */
static const op_def ops[] = {
    {"conv3d.forward", su_conv3d_fwd, ref_conv3d_fwd, fast_conv3d_fwd, 1e-4f, 1e-4f},
    {"conv3d.backward_data", su_conv3d_bwd_data, ref_conv3d_bwd_data, fast_conv3d_bwd_data, 1e-4f,
     1e-4f},
    {"conv3d.backward_weight", su_conv3d_bwd_weight, ref_conv3d_bwd_weight,
     fast_conv3d_bwd_weight, 2e-4f, 1e-3f},
    {"convt3d.forward", su_convt_fwd, ref_convt_fwd, fast_convt_fwd, 1e-4f, 1e-4f},
    {"convt3d.backward", su_convt_bwd, ref_convt_bwd, fast_convt_bwd, 2e-4f, 1e-3f},
    {"conv1.forward", su_conv1_fwd, ref_conv1_fwd, fast_conv1_fwd, 1e-4f, 1e-4f},
    {"conv1.backward", su_conv1_bwd, ref_conv1_bwd, fast_conv1_bwd, 2e-4f, 1e-3f},
    {"groupnorm.forward", su_gn_fwd, ref_gn_fwd, fast_gn_fwd, 1e-4f, 1e-4f},
    {"groupnorm.backward", su_gn_bwd, ref_gn_bwd, fast_gn_bwd, 2e-4f, 1e-3f},
    {"relu.forward", su_relu, ref_relu_fwd, fast_relu_fwd, 0, 0},
    {"relu.backward", su_relu, ref_relu_bwd, fast_relu_bwd, 0, 0},
    {"maxpool3d.forward", su_pool_fwd, ref_pool_fwd, fast_pool_fwd, 0, 0},
    {"maxpool3d.backward", su_pool_bwd, ref_pool_bwd, fast_pool_bwd, 0, 0},
    {"loss", su_loss, ref_loss, fast_loss, 1e-5f, 1e-4f},
    {"adam", su_adam, ref_adam, fast_optim, 1e-6f, 1e-6f},
    {"sgd", su_sgd, ref_sgd, fast_optim, 1e-6f, 1e-6f},
    {"rmsprop", su_rmsprop, ref_rmsprop, fast_optim, 1e-6f, 1e-6f},
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Best of reps runs of f after one warm-up, in ms. */
static double best_ms(void (*f)(op_case *), op_case *c, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = now();
        f(c);
        const double t = (now() - t0) * 1e3;
        best = t < best ? t : best;
    }
    return best;
}

static void free_case(op_case *c) {
    for (int i = 0; i < 6; i++)
        free(c->in[i]);
    for (int i = 0; i < c->nout; i++)
        free(c->r[i]), free(c->f[i]);
    free(c->ws), free(c->idx), free(c->labels);
    nn_optim_free(&c->opt);
}

/* Runs op o on shape s: reference and fast path once each, compared output by output (scale:
 * the voxel-sum tolerances' growth); with reps > 0 also timed, one table row. */
static void run_op(const op_def *o, const op_case *s, float scale, int reps) {
    op_case c = *s;
    o->setup(&c);
    o->ref(&c);
    o->fast(&c);
    double maxabs = 0;
    int bad = 0;
    const float atol = o->rtol >= 1e-3f ? o->atol * scale : o->atol;
    for (int i = 0; i < c.nout; i++) {
        char nm[96];
        snprintf(nm, sizeof nm, "%s output %d vs reference", o->name, i);
        bad |= check_close(nm, c.f[i], c.r[i], c.n[i], atol, o->rtol);
        for (size_t k = 0; reps > 0 && k < c.n[i]; k++) /* the table's column */
            maxabs = fmax(maxabs, fabs((double)c.f[i][k] - c.r[i][k]));
    }
    if (reps > 0) {
        const double tr = best_ms(o->ref, &c, 1), tf = best_ms(o->fast, &c, reps);
        printf("%-24s %10.2f %10.3f %9.1fx %11.2e %9.0e %7.0e  %s\n", o->name, tr, tf, tr / tf,
               maxabs, (double)atol, (double)o->rtol, bad ? "FAIL" : "ok");
    }
    free_case(&c);
}

int main(int argc, char **argv) {
    int timing = argc > 1 && !strcmp(argv[1], "--time");
    const int D = timing && argc > 2 ? atoi(argv[2]) : 8;
    const int C = timing && argc > 3 ? atoi(argv[3]) : 16;
    const int reps = timing ? (argc > 4 ? atoi(argv[4]) : 5) : 0;
    if (D < 4 || D % 4 || C < 4 || C % 4 || reps < 0) {
        fprintf(stderr, "usage: test_ops [--time [D [C [REPS]]]]  (D a multiple of 4, C of 4)\n");
        return 2;
    }
    const int N = timing ? 1 : 2;
    op_case s = {.N = N, .D = D, .H = D, .W = D, .C = C, .K = C + C / 2, .G = 4};
    s.P = (long)N * D * D * D;
    /* float sums over P voxels of O(1) terms round by ~2^-24 sqrt(P) of their ~sqrt(P) size */
    const float scale = s.P > 256 ? sqrtf((float)s.P / 256.0f) : 1.0f;
    if (timing)
        printf("%-24s %10s %10s %10s %11s %9s %7s  %s\n# N=%d D=H=W=%d C=%d K=%d, %d threads\n",
               "op", "ref ms", "fast ms", "speedup", "max |err|", "atol", "rtol", "check", N, D,
               C, s.K, nn_threads());
    if (!timing) {
        /* the peaks bench_step --peak prints: the tile unit's only where the run has AMX, and
         * then above the FMA units' (16x16x32 products per instruction) */
        const double fma = nn_fma_peak_gflops(0.02), amx = nn_amx_peak_gflops(0.02);
        CHECK(fma > 0, "FMA peak %.1f GFLOP/s", fma);
        CHECK(nn_isa_amx() ? amx > fma : amx == 0, "AMX peak %.1f GFLOP/s (FMA %.1f, amx %d)",
              amx, fma, nn_isa_amx());
    }
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        op_case si = s;
        if (!strcmp(ops[i].name, "loss"))
            si.K = 4; /* classes */
        run_op(&ops[i], &si, scale, reps);
    }
    return test_report();
}
