/* test_layers: every layer of src/nn against (1) the PyTorch fixtures of tools/torch_ref.py
 * (forward and backward, float64 references stored as float32), (2) central finite differences
 * of L = sum(y * r), and (3) for the convolutions, the naive loops on shapes that exercise
 * every vector-block width and remainder path of the microkernels. */
#include "fixture.h"
#include "nn/gemm.h"
#include "nn/algo.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/ref.h"
#include "nn/settings.h"
#include "test.h"

#include "core/rng.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

/* 64-byte aligned, as the engine's tensors (the streamed ConvTranspose3d output needs it),
 * filled with byte b */
static float *aligned_fill(size_t n, int b) {
    float *p = aligned_alloc(64, ((n + 64) * sizeof(float) + 63) & ~(size_t)63);
    memset(p, b, (n + 64) * sizeof(float));
    return p;
}

/* A workspace full of NaN patterns (fp32 and bf16 alike), as a reused one may hold: a kernel
 * that reads workspace it did not write makes NaN results */
static float *ws_alloc(size_t n) {
    return aligned_fill(n, 0xff);
}

static float *randv(size_t n, uint64_t seed, float scale) {
    float *p = malloc((n + 64) * sizeof(float));
    rng r = rng_make(seed, RNG_TEST, n, 0);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)rng_normal(&r) * scale;
    return p;
}

static float *zeros(size_t n) {
    return aligned_fill(n, 0);
}

/* Tolerances (fp32 kernels vs float64 PyTorch): forward 1e-4 abs + 1e-4 rel; gradients that
 * reduce over voxels 2e-4 abs + 1e-3 rel. */
#define FW_ATOL 1e-4f
#define FW_RTOL 1e-4f
#define BW_ATOL 2e-4f
#define BW_RTOL 1e-3f

/* ---- PyTorch fixtures ------------------------------------------------------------------- */

static void test_conv3d_fixture(const nn_st_file *st, const char *pfx) {
    char nm[64];
    int64_t xs[5], ws_[5];
    snprintf(nm, sizeof nm, "%s.x", pfx);
    float *x = fx_get_cl(st, nm, xs);
    snprintf(nm, sizeof nm, "%s.w", pfx);
    float *w = fx_get(st, nm, ws_, NULL);
    const int N = (int)xs[0], cin = (int)xs[1], D = (int)xs[2], H = (int)xs[3], W = (int)xs[4];
    const int cout = (int)ws_[0];
    int64_t ys[5];
    snprintf(nm, sizeof nm, "%s.y", pfx);
    float *yref = fx_get_cl(st, nm, ys);
    snprintf(nm, sizeof nm, "%s.dy", pfx);
    float *dy = fx_get_cl(st, nm, ys);
    snprintf(nm, sizeof nm, "%s.dx", pfx);
    float *dxref = fx_get_cl(st, nm, xs);
    snprintf(nm, sizeof nm, "%s.dw", pfx);
    float *dwref = fx_get(st, nm, NULL, NULL);
    const size_t P = (size_t)N * D * H * W;
    float *ws = ws_alloc(nn_conv3d_ws_floats(N, D, H, W, cin, cout));
    float *y = zeros(P * cout), *dx = zeros(P * cin), *dw = zeros(27 * (size_t)cin * cout);
    nn_conv3d_forward_p(y, x, cin, NULL, 0, w, cout, N, D, H, W, NN_FP32, NULL, ws);
    snprintf(nm, sizeof nm, "%s forward", pfx);
    check_close(nm, y, yref, P * cout, FW_ATOL, FW_RTOL);
    nn_conv3d_backward_p(dx, NULL, dw, dy, x, cin, NULL, 0, w, cout, N, D, H, W, NN_FP32, NULL, ws);
    snprintf(nm, sizeof nm, "%s dx", pfx);
    check_close(nm, dx, dxref, P * cin, BW_ATOL, BW_RTOL);
    snprintf(nm, sizeof nm, "%s dw", pfx);
    check_close(nm, dw, dwref, 27 * (size_t)cin * cout, BW_ATOL, BW_RTOL);
    /* The same convolution through the fused concatenation: channels split 1 | cin-1. */
    if (cin > 1) {
        float *a = zeros(P), *b = zeros(P * (cin - 1)), *dx2 = zeros(P * cin);
        nn_concat_backward(a, b, x, 1, cin - 1, (long)P);
        memset(y, 0, P * cout * sizeof(float));
        nn_conv3d_forward_p(y, a, 1, b, cin - 1, w, cout, N, D, H, W, NN_FP32, NULL, ws);
        snprintf(nm, sizeof nm, "%s forward (fused concat)", pfx);
        check_close(nm, y, yref, P * cout, FW_ATOL, FW_RTOL);
        memset(dw, 0, 27 * (size_t)cin * cout * sizeof(float));
        nn_conv3d_backward_p(dx2, NULL, dw, dy, a, 1, b, cin - 1, w, cout, N, D, H, W, NN_FP32, NULL, ws);
        snprintf(nm, sizeof nm, "%s dx (fused concat)", pfx);
        check_close(nm, dx2, dxref, P * cin, BW_ATOL, BW_RTOL);
        snprintf(nm, sizeof nm, "%s dw (fused concat)", pfx);
        check_close(nm, dw, dwref, 27 * (size_t)cin * cout, BW_ATOL, BW_RTOL);
        /* the two gradients of the concatenation written apart */
        float *da = zeros(P), *db = zeros(P * (cin - 1)), *ra = zeros(P), *rb = zeros(P * (cin - 1));
        nn_concat_backward(ra, rb, dxref, 1, cin - 1, (long)P);
        nn_conv3d_backward_p(da, db, NULL, dy, a, 1, b, cin - 1, w, cout, N, D, H, W, NN_FP32, NULL, ws);
        snprintf(nm, sizeof nm, "%s dx split (first part)", pfx);
        check_close(nm, da, ra, P, BW_ATOL, BW_RTOL);
        snprintf(nm, sizeof nm, "%s dx split (second part)", pfx);
        check_close(nm, db, rb, P * (cin - 1), BW_ATOL, BW_RTOL);
        free(a), free(b), free(dx2), free(da), free(db), free(ra), free(rb);
    }
    free(x), free(w), free(yref), free(dy), free(dxref), free(dwref), free(ws), free(y), free(dx),
        free(dw);
}

static void test_convt_fixture(const nn_st_file *st) {
    int64_t xs[5], wsh[5], ys[5];
    float *x = fx_get_cl(st, "convt3d.x", xs), *w = fx_get(st, "convt3d.w", wsh, NULL);
    float *b = fx_get(st, "convt3d.b", NULL, NULL);
    float *yref = fx_get_cl(st, "convt3d.y", ys), *dy = fx_get_cl(st, "convt3d.dy", ys);
    float *dxref = fx_get_cl(st, "convt3d.dx", xs), *dwref = fx_get(st, "convt3d.dw", NULL, NULL);
    float *dbref = fx_get(st, "convt3d.db", NULL, NULL);
    const int N = (int)xs[0], cin = (int)xs[1], D = (int)xs[2], H = (int)xs[3], W = (int)xs[4];
    const int cout = (int)wsh[1];
    const size_t P = (size_t)N * D * H * W;
    float *ws = ws_alloc(nn_convt3d_ws_floats_p(N, D, H, W, cin, cout, NN_FP32));
    float *y = zeros(8 * P * cout), *dx = zeros(P * cin), *dw = zeros(8 * (size_t)cin * cout),
          *db = zeros(cout);
    nn_convt3d_forward_p(y, x, w, b, cin, cout, N, D, H, W, NN_FP32, ws);
    check_close("convt3d forward", y, yref, 8 * P * cout, FW_ATOL, FW_RTOL);
    nn_convt3d_backward_p(dx, dw, db, dy, cout, x, w, cin, cout, N, D, H, W, NN_FP32, ws);
    check_close("convt3d dx", dx, dxref, P * cin, BW_ATOL, BW_RTOL);
    check_close("convt3d dw", dw, dwref, 8 * (size_t)cin * cout, BW_ATOL, BW_RTOL);
    check_close("convt3d db", db, dbref, cout, BW_ATOL, BW_RTOL);
    free(x), free(w), free(b), free(yref), free(dy), free(dxref), free(dwref), free(dbref),
        free(ws), free(y), free(dx), free(dw), free(db);
}

static void test_conv1_fixture(const nn_st_file *st) {
    int64_t xs[5], wsh[5], ys[5];
    float *x = fx_get_cl(st, "conv1.x", xs), *w = fx_get(st, "conv1.w", wsh, NULL);
    float *b = fx_get(st, "conv1.b", NULL, NULL);
    float *yref = fx_get_cl(st, "conv1.y", ys), *dy = fx_get_cl(st, "conv1.dy", ys);
    float *dxref = fx_get_cl(st, "conv1.dx", xs), *dwref = fx_get(st, "conv1.dw", NULL, NULL);
    float *dbref = fx_get(st, "conv1.db", NULL, NULL);
    const int cin = (int)xs[1], cout = (int)wsh[0];
    const long P = (long)xs[0] * xs[2] * xs[3] * xs[4];
    float *ws = ws_alloc(nn_conv1_ws_floats_p(P, cin, cout, NN_FP32));
    float *y = zeros(P * cout), *dx = zeros(P * cin), *dw = zeros((size_t)cin * cout),
          *db = zeros(cout);
    nn_conv1_forward_p(y, x, w, b, cin, cout, P, NN_FP32, ws);
    check_close("conv1 forward", y, yref, P * cout, FW_ATOL, FW_RTOL);
    nn_conv1_backward_p(dx, dw, db, dy, x, w, cin, cout, P, NN_FP32, ws);
    check_close("conv1 dx", dx, dxref, P * cin, BW_ATOL, BW_RTOL);
    check_close("conv1 dw", dw, dwref, (size_t)cin * cout, BW_ATOL, BW_RTOL);
    check_close("conv1 db", db, dbref, cout, BW_ATOL, BW_RTOL);
    free(x), free(w), free(b), free(yref), free(dy), free(dxref), free(dwref), free(dbref),
        free(ws), free(y), free(dx), free(dw), free(db);
}

/* nn_conv1_backward_relu_p on a ReLU output (the fixture's input, with zeros where it was
 * negative) against nn_conv1_backward_p followed by the ReLU's backward: the same weight and
 * bias gradients bit for bit, the same input gradient, exact zeros where the ReLU was off. */
static void test_conv1_relu(const nn_st_file *st, nn_prec prec) {
    int64_t xs[5], wsh[5], ys[5];
    float *x = fx_get_cl(st, "conv1.x", xs), *w = fx_get(st, "conv1.w", wsh, NULL);
    float *dy = fx_get_cl(st, "conv1.dy", ys);
    const int cin = (int)xs[1], cout = (int)wsh[0];
    const long P = (long)xs[0] * xs[2] * xs[3] * xs[4];
    const size_t nx = (size_t)P * cin;
    size_t off = 0;
    for (size_t i = 0; i < nx; i++) {
        x[i] = x[i] > 0.0f ? (prec == NN_BF16 ? nn_bf16_round(x[i]) : x[i]) : 0.0f;
        off += x[i] == 0.0f;
    }
    CHECK(off > nx / 4 && off < 3 * nx / 4, "conv1 relu: %zu of %zu inputs off", off, nx);
    float *ws = ws_alloc(nn_conv1_ws_floats_p(P, cin, cout, prec));
    float *dx = zeros(nx), *dw = zeros((size_t)cin * cout), *db = zeros(cout);
    float *xo = zeros(nx), *dw2 = zeros((size_t)cin * cout), *db2 = zeros(cout);
    nn_conv1_backward_p(dx, dw, db, dy, x, w, cin, cout, P, prec, ws);
    nn_relu_backward(dx, dx, x, nx);
    memcpy(xo, x, nx * sizeof(float));
    nn_conv1_backward_relu_p(xo, dw2, db2, dy, w, cin, cout, P, prec, ws);
    const char *pn = prec == NN_BF16 ? "bf16" : "fp32";
    CHECK(!memcmp(dw, dw2, sizeof(float) * cin * cout) && !memcmp(db, db2, sizeof(float) * cout),
          "conv1 relu %s: weight and bias gradients bit-identical", pn);
    size_t zeros_ok = 0;
    for (size_t i = 0; i < nx; i++)
        zeros_ok += x[i] > 0.0f || xo[i] == 0.0f;
    CHECK(zeros_ok == nx, "conv1 relu %s: zero where the ReLU was off (%zu of %zu)", pn, zeros_ok,
          nx);
    char nm[48];
    snprintf(nm, sizeof nm, "conv1 relu %s dx", pn);
    /* bf16: both round the same fp32 sum, whose order may differ by one ulp */
    check_close(nm, xo, dx, nx, 1e-6f, prec == NN_BF16 ? 8e-3f : 1e-5f);
    free(x), free(w), free(dy), free(ws), free(dx), free(dw), free(db), free(xo), free(dw2),
        free(db2);
}

/* NN_GN_RBF16: GroupNorm forward, apply and backward rounding their output to bf16 inside the
 * op equal the op followed by a rounding pass, bit for bit (with and without the ReLU). */
static void test_gn_round(void) {
    const int N = 2, C = 48, G = 4;
    const long S = 333;
    const size_t n = (size_t)N * S * C;
    float *x = randv(n, 81, 1.5f), *g = randv(C, 82, 1), *b = randv(C, 83, 0.5f);
    float *dy = randv(n, 84, 1), *y1 = zeros(n), *y2 = zeros(n), *d2 = zeros(n), *mean = zeros(N * G),
          *rstd = zeros(N * G), *dg = zeros(C), *db = zeros(C);
    float *ws = ws_alloc(nn_groupnorm_ws_floats(C));
    for (int relu = 0; relu < 2; relu++) {
        nn_groupnorm_forward(y1, mean, rstd, x, g, b, N, S, C, G, relu | NN_GN_RBF16, ws);
        nn_groupnorm_forward(y2, mean, rstd, x, g, b, N, S, C, G, relu, ws);
        nn_round_bf16(y2, n);
        CHECK(!memcmp(y1, y2, n * sizeof(float)), "gn forward relu=%d: rounded inside = after",
              relu);
        nn_groupnorm_apply(y1, x, mean, rstd, g, b, N, S, C, G, relu | NN_GN_RBF16, ws);
        CHECK(!memcmp(y1, y2, n * sizeof(float)), "gn apply relu=%d: rounded inside = after",
              relu);
        nn_groupnorm_backward(y1, dg, db, dy, x, y2, mean, rstd, g, N, S, C, G,
                              relu | NN_GN_RBF16, ws);
        nn_groupnorm_backward(d2, dg, db, dy, x, y2, mean, rstd, g, N, S, C, G, relu, ws);
        nn_round_bf16(d2, n);
        CHECK(!memcmp(y1, d2, n * sizeof(float)), "gn backward relu=%d: rounded inside = after",
              relu);
    }
    free(x), free(g), free(b), free(dy), free(y1), free(y2), free(d2), free(mean), free(rstd), free(dg),
        free(db), free(ws);
}

/* The weights' bf16 pairs of all taps at once (nn_bf16_pack_taps, transposed in registers on
 * AVX512_BF16) against tap-by-tap nn_bf16_pack_pairs, bit for bit, and both against the scalar
 * rounding: 8 and 27 taps (a partial second block of 16), a last partial block of columns, an
 * odd k's missing partner (two = 0), the columns' stride of the forward (taps of one k
 * contiguous, columns far apart) and of the input gradient (columns 27 apart). Words past a
 * tap's 2n must stay untouched. */
static void test_pack_taps(void) {
    static const int Ts[] = {8, 27}, ns[] = {1, 15, 16, 17, 40};
    for (size_t it = 0; it < sizeof Ts / sizeof Ts[0]; it++)
        for (size_t in = 0; in < sizeof ns / sizeof ns[0]; in++)
            for (int two = 0; two < 2; two++)
                for (int lay = 0; lay < 2; lay++) {
                    const int T = Ts[it], n = ns[in], K = 3;
                    /* lay 0: w[col][k][t]; lay 1: w[k][col][t] */
                    const long sj = lay ? T : (long)K * T, sk = lay ? (long)n * T : T;
                    const size_t nw = (size_t)n * K * T;
                    float *w = randv(nw, 91 + 7 * n + T, 1);
                    const long ldt = 2L * n + 6; /* a gap after each tap's pairs */
                    const size_t nd = (size_t)T * ldt;
                    uint16_t *a = malloc(nd * sizeof *a), *b = malloc(nd * sizeof *b);
                    memset(a, 0xA5, nd * sizeof *a), memset(b, 0xA5, nd * sizeof *b);
                    nn_bf16_pack_taps(a, ldt, w + sk, sj, sk, two, n, T);
                    for (int t = 0; t < T; t++)
                        nn_bf16_pack_pairs(b + t * ldt, w + sk + t, sj, sk, two, n);
                    int ref_ok = 1;
                    for (int t = 0; t < T && ref_ok; t++)
                        for (int j = 0; j < n && ref_ok; j++) {
                            const float lo = nn_bf16_round(w[sk + j * sj + t]),
                                        hi = two ? nn_bf16_round(w[2 * sk + j * sj + t]) : 0.0f;
                            uint32_t ul, uh;
                            memcpy(&ul, &lo, 4), memcpy(&uh, &hi, 4);
                            ref_ok = a[t * ldt + 2 * j] == (uint16_t)(ul >> 16) &&
                                     a[t * ldt + 2 * j + 1] == (uint16_t)(uh >> 16);
                        }
                    CHECK(!memcmp(a, b, nd * sizeof *a) && ref_ok,
                          "pack_taps T=%d n=%d two=%d layout %d: = tap by tap (%d) and = the "
                          "scalar rounding (%d)",
                          T, n, two, lay, !memcmp(a, b, nd * sizeof *a), ref_ok);
                    free(w), free(a), free(b);
                }
}

/* GroupNorm's statistics (one pass: per block of voxels its channels' means and squared
 * deviations, merged pairwise) against a two-pass double reference: channels whose mean is
 * 10^4 times their spread (E[x^2] - mean^2 in float would lose every digit of the variance),
 * a channel of one value repeated (variance 0), volumes that are not whole blocks or fewer
 * voxels than slices, more channels than one merge chunk, bit-identical on any thread count. */
static void test_gn_stats(void) {
    const struct { int N, C, G; long S; float off, spread; } cs[] = {
        {2, 48, 4, 333, 1e4f, 1.0f}, {1, 96, 8, 40, 0.0f, 1.0f},  {1, 80, 5, 4097, -3e3f, 1e-2f},
        {1, 16, 16, 64, 5.0f, 1.0f}, {2, 8, 2, 1, 1.0f, 1.0f},    {1, 130, 10, 700, 0.25f, 1.0f},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        const int N = cs[k].N, C = cs[k].C, G = cs[k].G;
        const long S = cs[k].S;
        const size_t n = (size_t)N * S * C;
        float *x = randv(n, 91 + k, cs[k].spread), *g = randv(C, 92, 1), *b = randv(C, 93, 1);
        for (size_t i = 0; i < n; i++) /* offsets differ by group, not within one */
            x[i] += cs[k].off * (float)(1 + (int)(i % C) / (C / G) % 3);
        for (long p = 0; p < S; p++) /* channel 3: one value (its group's offset) */
            for (int s = 0; s < N; s++)
                x[((size_t)s * S + p) * C + 3] = cs[k].off * (float)(1 + 3 / (C / G) % 3) + 0.5f;
        float *y = zeros(n), *mean = zeros(N * G), *rstd = zeros(N * G), *m2 = zeros(N * G),
              *r2 = zeros(N * G), *ws = ws_alloc(nn_groupnorm_ws_floats(C));
        nn_groupnorm_forward(y, mean, rstd, x, g, b, N, S, C, G, 0, ws);
        float *yr = zeros(n), *mr = zeros(N * G), *rr = zeros(N * G);
        nn_ref_groupnorm_forward(yr, mr, rr, x, g, b, N, S, C, G, 0); /* two passes, double */
        int bad = 0;
        for (int i = 0; i < N * G; i++)
            if (fabsf(mean[i] - mr[i]) > 1e-6f * fabsf(mr[i]) + 1e-6f ||
                fabsf(rstd[i] - rr[i]) > 1e-5f * rr[i]) {
                if (bad++ < 3)
                    printf("  case %zu group %d: mean %.9g vs %.9g, rstd %.9g vs %.9g\n", k, i,
                           mean[i], mr[i], rstd[i], rr[i]);
            }
        free(yr), free(mr), free(rr);
        CHECK(bad == 0, "gn statistics case %zu (N %d, S %ld, C %d, G %d, offset %g, spread %g): "
                        "%d groups off the double reference",
              k, N, S, C, G, cs[k].off, cs[k].spread, bad);
        /* the same bits on one thread */
        const int th = nn_threads();
        nn_set_threads(1);
        nn_groupnorm_forward(y, m2, r2, x, g, b, N, S, C, G, 0, ws);
        nn_set_threads(th);
        CHECK(!memcmp(mean, m2, sizeof(float) * N * G) && !memcmp(rstd, r2, sizeof(float) * N * G),
              "gn statistics case %zu: 1 thread and %d give different bits", k, th);
        free(x), free(g), free(b), free(y), free(mean), free(rstd), free(m2), free(r2), free(ws);
    }
}

/* nn_groupnorm_backward_x (the ReLU output not kept) equals, bit for bit, the GroupNorm
 * backward given that output, with dy given (in place over dy) and with dy made from a 1x1
 * convolution's output gradient (in place over x); 320 channels: two channel blocks. Five
 * channels have gamma 0, so their pre-ReLU value is beta exactly, set to the edges of the
 * recomputed mask: in bf16, 2^-134 rounds to zero (off) and the next float above it does not. */
static void test_gn_backward_x(nn_prec prec) {
    const int N = 2, C = 320, G = 8, K = 6;
    const long S = 300;
    const size_t n = (size_t)N * S * C;
    const char *pn = prec == NN_BF16 ? "bf16" : "fp32";
    float *x = randv(n, 71, 1.5f), *g = randv(C, 72, 1), *b = randv(C, 73, 0.5f);
    float *y = zeros(n), *mean = zeros(N * G), *rstd = zeros(N * G);
    float *ws = ws_alloc(nn_groupnorm_x_ws_floats(C, K) + nn_conv1_ws_floats_p(N * S, C, K, prec));
    const float edge[5] = {0x1p-134f, nextafterf(0x1p-134f, 1.0f), 0x1p-135f, -0x1p-134f, 0.0f};
    for (int i = 0; i < 5; i++)
        g[7 + 61 * i] = 0.0f, b[7 + 61 * i] = edge[i];
    nn_groupnorm_forward(y, mean, rstd, x, g, b, N, S, C, G, 1, ws);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        y[i] = prec == NN_BF16 ? nn_bf16_round(y[i]) : y[i];
        off += y[i] == 0.0f;
    }
    CHECK(off > n / 4 && off < 3 * n / 4, "gn x %s: %zu of %zu outputs off", pn, off, n);
    float *dy = randv(n, 74, 1), *dx = zeros(n), *dg = zeros(C), *db = zeros(C);
    float *d2 = zeros(n), *dg2 = zeros(C), *db2 = zeros(C);
    for (size_t i = 0; i < n; i++)
        dy[i] = prec == NN_BF16 ? nn_bf16_round(dy[i]) : dy[i];
    /* in bf16 the x path rounds dx to bf16, as the backward given y does with NN_GN_RBF16 */
    const int rb = prec == NN_BF16 ? NN_GN_RBF16 : 0;
    nn_groupnorm_backward(dx, dg, db, dy, x, y, mean, rstd, g, N, S, C, G, 1 | rb, ws);
    memcpy(d2, dy, n * sizeof(float));
    nn_groupnorm_backward_x(d2, dg2, db2, d2, NULL, NULL, 0, x, mean, rstd, g, b, N, S, C, G, prec,
                            ws, NULL);
    CHECK(!memcmp(dx, d2, n * sizeof(float)) && !memcmp(dg, dg2, C * sizeof(float)) &&
              !memcmp(db, db2, C * sizeof(float)),
          "gn x %s, dy given: gradients bit-identical to the backward given y", pn);
    /* dy from a 1x1 convolution (cin C, cout K) whose input was y */
    float *dz = randv((size_t)N * S * K, 75, 1), *wz = randv((size_t)K * C, 76, 0.2f);
    float *dwz = zeros((size_t)K * C), *dbz = zeros(K);
    memcpy(d2, y, n * sizeof(float));
    nn_conv1_backward_relu_p(d2, dwz, dbz, dz, wz, C, K, (long)N * S, prec, ws);
    {   /* its weight and input gradients over whole blocks of 64 channels, against the naive
         * sums in double (bf16: one rounding of the sum), the input gradient through the ReLU */
        float *dwr = zeros((size_t)K * C), *dbr = zeros(K), *dxr = zeros(n);
        float *wzr = zeros((size_t)K * C);
        for (size_t i = 0; i < (size_t)K * C; i++)
            wzr[i] = prec == NN_BF16 ? nn_bf16_round(wz[i]) : wz[i];
        nn_ref_conv1_backward(dxr, dwr, dbr, dz, y, wzr, C, K, (long)N * S);
        for (size_t i = 0; i < n; i++)
            dxr[i] = y[i] > 0.0f ? dxr[i] : 0.0f;
        char nm[48];
        snprintf(nm, sizeof nm, "gn x %s: 1x1 conv dw", pn);
        check_close(nm, dwz, dwr, (size_t)K * C, 1e-5f, prec == NN_BF16 ? 8e-3f : 1e-5f);
        snprintf(nm, sizeof nm, "gn x %s: 1x1 conv dx", pn);
        check_close(nm, d2, dxr, n, 1e-5f, prec == NN_BF16 ? 8e-3f : 1e-5f);
        free(dwr), free(dbr), free(dxr), free(wzr);
    }
    memset(dg, 0, C * sizeof(float)), memset(db, 0, C * sizeof(float));
    memset(dg2, 0, C * sizeof(float)), memset(db2, 0, C * sizeof(float));
    nn_groupnorm_backward(dx, dg, db, d2, x, NULL, mean, rstd, g, N, S, C, G, rb, ws);
    memcpy(d2, x, n * sizeof(float));
    nn_groupnorm_backward_x(d2, dg2, db2, NULL, dz, wz, K, d2, mean, rstd, g, b, N, S, C, G, prec,
                            ws, NULL);
    CHECK(!memcmp(dx, d2, n * sizeof(float)) && !memcmp(dg, dg2, C * sizeof(float)) &&
              !memcmp(db, db2, C * sizeof(float)),
          "gn x %s, dy from the 1x1 conv: gradients bit-identical", pn);
    free(x), free(g), free(b), free(y), free(mean), free(rstd), free(ws), free(dy), free(dx);
    free(dg), free(db), free(d2), free(dg2), free(db2), free(dz), free(wz), free(dwz), free(dbz);
}

static void test_gn_fixture(const nn_st_file *st, const char *pfx, int G, int relu) {
    char nm[64];
    int64_t xs[5];
    snprintf(nm, sizeof nm, "%s.x", pfx);
    float *x = fx_get_cl(st, nm, xs);
    snprintf(nm, sizeof nm, "%s.g", pfx);
    float *g = fx_get(st, nm, NULL, NULL);
    snprintf(nm, sizeof nm, "%s.b", pfx);
    float *b = fx_get(st, nm, NULL, NULL);
    snprintf(nm, sizeof nm, "%s.y", pfx);
    float *yref = fx_get_cl(st, nm, xs);
    snprintf(nm, sizeof nm, "%s.dy", pfx);
    float *dy = fx_get_cl(st, nm, xs);
    snprintf(nm, sizeof nm, "%s.dx", pfx);
    float *dxref = fx_get_cl(st, nm, xs);
    snprintf(nm, sizeof nm, "%s.dg", pfx);
    float *dgref = fx_get(st, nm, NULL, NULL);
    snprintf(nm, sizeof nm, "%s.db", pfx);
    float *dbref = fx_get(st, nm, NULL, NULL);
    const int N = (int)xs[0], C = (int)xs[1];
    const long S = (long)xs[2] * xs[3] * xs[4];
    float *ws = ws_alloc(nn_groupnorm_ws_floats(C));
    float *y = zeros(N * S * C), *dx = zeros(N * S * C), *mean = zeros(N * G),
          *rstd = zeros(N * G), *dg = zeros(C), *db = zeros(C);
    nn_groupnorm_forward(y, mean, rstd, x, g, b, N, S, C, G, relu, ws);
    snprintf(nm, sizeof nm, "%s forward", pfx);
    check_close(nm, y, yref, N * S * C, FW_ATOL, FW_RTOL);
    nn_groupnorm_backward(dx, dg, db, dy, x, y, mean, rstd, g, N, S, C, G, relu, ws);
    snprintf(nm, sizeof nm, "%s dx", pfx);
    check_close(nm, dx, dxref, N * S * C, BW_ATOL, BW_RTOL);
    snprintf(nm, sizeof nm, "%s dgamma", pfx);
    check_close(nm, dg, dgref, C, BW_ATOL, BW_RTOL);
    snprintf(nm, sizeof nm, "%s dbeta", pfx);
    check_close(nm, db, dbref, C, BW_ATOL, BW_RTOL);
    /* in place (dx == dy), as the U-Net calls it */
    memset(dg, 0, C * sizeof(float));
    memset(db, 0, C * sizeof(float));
    nn_groupnorm_backward(dy, dg, db, dy, x, y, mean, rstd, g, N, S, C, G, relu, ws);
    snprintf(nm, sizeof nm, "%s dx in place", pfx);
    check_close(nm, dy, dxref, N * S * C, BW_ATOL, BW_RTOL);
    free(x), free(g), free(b), free(yref), free(dy), free(dxref), free(dgref), free(dbref),
        free(ws), free(y), free(dx), free(mean), free(rstd), free(dg), free(db);
}

static void test_small_fixtures(const nn_st_file *st) {
    int64_t xs[5], ys[5];
    /* relu */
    float *x = fx_get_cl(st, "relu.x", xs), *yref = fx_get_cl(st, "relu.y", xs);
    float *dy = fx_get_cl(st, "relu.dy", xs), *dxref = fx_get_cl(st, "relu.dx", xs);
    size_t n = fx_numel(xs, 5);
    float *y = zeros(n), *dx = zeros(n);
    nn_relu_forward(y, x, n);
    check_close("relu forward", y, yref, n, 0, 0);
    nn_relu_backward(dx, dy, y, n);
    check_close("relu dx", dx, dxref, n, 0, 0);
    free(x), free(yref), free(dy), free(dxref), free(y), free(dx);
    /* maxpool */
    x = fx_get_cl(st, "maxpool.x", xs);
    yref = fx_get_cl(st, "maxpool.y", ys);
    dy = fx_get_cl(st, "maxpool.dy", ys);
    dxref = fx_get_cl(st, "maxpool.dx", xs);
    n = fx_numel(xs, 5);
    const size_t no = fx_numel(ys, 5);
    y = zeros(no);
    dx = zeros(n);
    uint8_t *idx = malloc(no);
    nn_maxpool3d_forward(y, idx, x, (int)xs[0], (int)xs[2], (int)xs[3], (int)xs[4], (int)xs[1]);
    check_close("maxpool forward", y, yref, no, 0, 0);
    nn_maxpool3d_backward(dx, dy, idx, (int)xs[0], (int)xs[2], (int)xs[3], (int)xs[4], (int)xs[1]);
    check_close("maxpool dx", dx, dxref, n, 0, 0);
    free(x), free(yref), free(dy), free(dxref), free(y), free(dx), free(idx);
    /* concat */
    int64_t as[5], bs[5];
    float *a = fx_get_cl(st, "concat.a", as), *b = fx_get_cl(st, "concat.b", bs);
    yref = fx_get_cl(st, "concat.y", ys);
    dy = fx_get_cl(st, "concat.dy", ys);
    float *daref = fx_get_cl(st, "concat.da", as), *dbref = fx_get_cl(st, "concat.db", bs);
    const long P = (long)as[0] * as[2] * as[3] * as[4];
    const int ca = (int)as[1], cb = (int)bs[1];
    y = zeros(P * (ca + cb));
    float *da = zeros(P * ca), *db = zeros(P * cb);
    nn_concat_forward(y, a, ca, b, cb, P);
    check_close("concat forward", y, yref, P * (ca + cb), 0, 0);
    nn_concat_backward(da, db, dy, ca, cb, P);
    check_close("concat da", da, daref, P * ca, 0, 0);
    check_close("concat db", db, dbref, P * cb, 0, 0);
    free(a), free(b), free(yref), free(dy), free(daref), free(dbref), free(y), free(da), free(db);
    /* log-softmax */
    x = fx_get_cl(st, "logsoftmax.x", xs);
    yref = fx_get_cl(st, "logsoftmax.y", xs);
    dy = fx_get_cl(st, "logsoftmax.dy", xs);
    dxref = fx_get_cl(st, "logsoftmax.dx", xs);
    const long Pl = (long)xs[0] * xs[2] * xs[3] * xs[4];
    const int C = (int)xs[1];
    y = zeros(Pl * C);
    dx = zeros(Pl * C);
    nn_log_softmax_forward(y, x, Pl, C);
    check_close("log_softmax forward", y, yref, Pl * C, 1e-6f, 1e-5f);
    nn_log_softmax_backward(dx, dy, y, Pl, C);
    check_close("log_softmax dx", dx, dxref, Pl * C, 1e-5f, 1e-4f);
    free(x), free(yref), free(dy), free(dxref), free(y), free(dx);
}

static void test_loss_fixture(const nn_st_file *st) {
    int64_t zs[5], ls[4];
    float *z = fx_get_cl(st, "loss.logits", zs);
    float *labf = fx_get(st, "loss.labels", ls, NULL);
    float *w = fx_get(st, "loss.weight", NULL, NULL);
    float *lref = fx_get(st, "loss.loss", NULL, NULL), *dref = fx_get(st, "loss.dice", NULL, NULL);
    float *gref = fx_get_cl(st, "loss.dlogits", zs);
    float *hdref = fx_get(st, "loss.hard_dice", NULL, NULL);
    const int N = (int)zs[0], K = (int)zs[1];
    const long S = (long)zs[2] * zs[3] * zs[4];
    uint16_t *lab = malloc(N * S * 2);
    for (long i = 0; i < N * S; i++)
        lab[i] = (uint16_t)labf[i];
    float *ws = ws_alloc(nn_loss_ws_floats(N, K)), *g = zeros(N * S * K);
    double loss, ce, dice;
    CHECK(nn_loss(g, z, lab, w, N, S, K, &loss, &ce, &dice, ws) == 0, "nn_loss failed");
    float lf = (float)loss, df = (float)dice;
    check_close("loss value", &lf, lref, 1, 1e-5f, 1e-5f);
    check_close("soft dice value", &df, dref, 1, 1e-5f, 1e-5f);
    check_close("loss dlogits", g, gref, N * S * K, 1e-6f, 1e-4f);
    float hd[8];
    CHECK(nn_hard_dice(hd, z, lab, N, S, K) == 0, "hard dice failed");
    check_close("hard dice per sample", hd, hdref, N, 1e-6f, 1e-5f);
    /* a class absent from both prediction and label scores 1 */
    {
        float zz[2 * 3] = {5, 0, 0, 5, 0, 0}; /* both voxels predict class 0 */
        uint16_t yy[2] = {0, 0};
        float d1;
        nn_hard_dice(&d1, zz, yy, 1, 2, 3);
        CHECK(fabsf(d1 - 1.0f) < 1e-6f, "absent class should score 1, got %g", (double)d1);
    }
    /* the softmax's exponentials against the C library's in double, over logits whose
     * differences span 0 to -800 (past -708, where the loss's exp gives 0) and a NaN voxel */
    {
        enum { V = 64, KK = 3 };
        float zz[V * KK], gg[V * KK], ww[KK] = {1, 2, 0.5f};
        uint16_t yy[V];
        for (int v = 0; v < V; v++) {
            zz[v * KK] = 0.0f;
            zz[v * KK + 1] = -12.5f * (float)v;        /* 0 .. -787.5 */
            zz[v * KK + 2] = -0.37f * (float)(v % 9); /* 0 .. -2.96 */
            yy[v] = (uint16_t)(v % KK);
        }
        float *ws2 = ws_alloc(nn_loss_ws_floats(1, KK));
        double l2, ce2, d2;
        CHECK(nn_loss(gg, zz, yy, ww, 1, V, KK, &l2, &ce2, &d2, ws2) == 0, "loss on wide logits");
        double num = 0, den = 0, worst = 0;
        for (int v = 0; v < V; v++) {
            double sum = 0;
            for (int c = 0; c < KK; c++)
                sum += exp((double)zz[v * KK + c]); /* the maximum is 0 */
            num += ww[yy[v]] * (log(sum) - zz[v * KK + yy[v]]);
            den += ww[yy[v]];
        }
        worst = fabs(ce2 - num / den) / (num / den);
        CHECK(isfinite(l2) && worst < 1e-12, "cross-entropy on wide logits %.17g, the C "
              "library's exp gives %.17g", ce2, num / den);
        zz[5 * KK + 1] = NAN;
        CHECK(nn_loss(gg, zz, yy, ww, 1, V, KK, &l2, &ce2, &d2, ws2) == 0 && l2 != l2,
              "a NaN logit makes the loss NaN (got %g)", l2);
        free(ws2);
    }
    /* bad label */
    lab[3] = (uint16_t)K;
    CHECK(nn_loss(g, z, lab, w, N, S, K, &loss, &ce, &dice, ws) == ERR_RANGE,
          "label >= K must be ERR_RANGE");
    CHECK(strstr(err_msg(), "label") != NULL, "message names the label: %s", err_msg());
    free(z), free(labf), free(w), free(lref), free(dref), free(gref), free(hdref), free(lab),
        free(ws), free(g);
}

/* ---- finite differences ----------------------------------------------------------------- */

/* L = sum(y * r) in double. */
static double dotr(const float *y, const float *r, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)y[i] * r[i];
    return s;
}

typedef struct fd_ctx {
    void (*fwd)(struct fd_ctx *);
    float *y, *r;
    size_t ny;
    void *u; /* layer-specific */
} fd_ctx;

/* Checks analytic grad[n] of L w.r.t. v[n] at up to 16 sampled elements. */
static void fd_check(const char *name, fd_ctx *c, float *v, const float *grad, size_t n,
                     float h) {
    rng r = rng_make(7, RNG_TEST, n, 1);
    int bad = 0;
    double worst = 0;
    for (int s = 0; s < 16 && s < (int)n; s++) {
        size_t i = n <= 16 ? (size_t)s : rng_below(&r, n);
        const float v0 = v[i];
        v[i] = v0 + h;
        c->fwd(c);
        double lp = dotr(c->y, c->r, c->ny);
        v[i] = v0 - h;
        c->fwd(c);
        double lm = dotr(c->y, c->r, c->ny);
        v[i] = v0;
        const double num = (lp - lm) / (2.0 * h);
        const double err = fabs(num - grad[i]);
        const double tol = 5e-3 + 1e-2 * fabs(num);
        if (err > worst)
            worst = err;
        if (err > tol) {
            if (bad < 3)
                fprintf(stderr, "  %s[%zu]: analytic %.6g numeric %.6g\n", name, i,
                        (double)grad[i], num);
            bad++;
        }
    }
    c->fwd(c);
    CHECK(bad == 0, "finite differences %s: %d mismatches (max err %.3g)", name, bad, worst);
}

typedef struct conv_u {
    float *x, *w, *b, *ws, *g, *bb, *mean, *rstd;
    int N, D, H, W, cin, cout, G;
    uint8_t *idx;
} conv_u;

static void fwd_conv3d(fd_ctx *c) {
    conv_u *u = c->u;
    nn_conv3d_forward_p(c->y, u->x, u->cin, NULL, 0, u->w, u->cout, u->N, u->D, u->H, u->W, NN_FP32, NULL, u->ws);
}
static void fwd_convt(fd_ctx *c) {
    conv_u *u = c->u;
    nn_convt3d_forward_p(c->y, u->x, u->w, u->b, u->cin, u->cout, u->N, u->D, u->H, u->W, NN_FP32, u->ws);
}
static void fwd_conv1(fd_ctx *c) {
    conv_u *u = c->u;
    nn_conv1_forward_p(c->y, u->x, u->w, u->b, u->cin, u->cout, (long)u->N * u->D * u->H * u->W, NN_FP32,
                     u->ws);
}
static void fwd_gn(fd_ctx *c) {
    conv_u *u = c->u;
    nn_groupnorm_forward(c->y, u->mean, u->rstd, u->x, u->g, u->bb, u->N,
                         (long)u->D * u->H * u->W, u->cin, u->G, 0, u->ws);
}
static void fwd_pool(fd_ctx *c) {
    conv_u *u = c->u;
    nn_maxpool3d_forward(c->y, u->idx, u->x, u->N, u->D, u->H, u->W, u->cin);
}
static void fwd_lsm(fd_ctx *c) {
    conv_u *u = c->u;
    nn_log_softmax_forward(c->y, u->x, (long)u->N * u->D * u->H * u->W, u->cin);
}
static void fwd_concat(fd_ctx *c) {
    conv_u *u = c->u;
    nn_concat_forward(c->y, u->x, u->cin, u->w, u->cout, (long)u->N * u->D * u->H * u->W);
}
static void fwd_relu(fd_ctx *c) {
    conv_u *u = c->u;
    nn_relu_forward(c->y, u->x, (size_t)u->N * u->D * u->H * u->W * u->cin);
}

static void test_finite_differences(void) {
    const float h = 1e-2f;
    /* conv3d */
    {
        conv_u u = {.N = 1, .D = 3, .H = 4, .W = 3, .cin = 3, .cout = 4};
        const size_t P = 36;
        u.x = randv(P * 3, 1, 1);
        u.w = randv(27 * 12, 2, 0.2f);
        u.ws = ws_alloc(nn_conv3d_ws_floats(1, 3, 4, 3, 3, 4));
        fd_ctx c = {.fwd = fwd_conv3d, .y = zeros(P * 4), .r = randv(P * 4, 3, 1), .ny = P * 4,
                    .u = &u};
        float *dx = zeros(P * 3), *dw = zeros(27 * 12);
        c.fwd(&c);
        nn_conv3d_backward_p(dx, NULL, dw, c.r, u.x, 3, NULL, 0, u.w, 4, 1, 3, 4, 3, NN_FP32, NULL, u.ws);
        fd_check("conv3d dx", &c, u.x, dx, P * 3, h);
        fd_check("conv3d dw", &c, u.w, dw, 27 * 12, h);
        free(u.x), free(u.w), free(u.ws), free(c.y), free(c.r), free(dx), free(dw);
    }
    /* convT */
    {
        conv_u u = {.N = 1, .D = 2, .H = 2, .W = 3, .cin = 3, .cout = 2};
        const size_t P = 12;
        u.x = randv(P * 3, 4, 1);
        u.w = randv(8 * 6, 5, 0.3f);
        u.b = randv(2, 6, 1);
        u.ws = ws_alloc(nn_convt3d_ws_floats_p(1, 2, 2, 3, 3, 2, NN_FP32));
        fd_ctx c = {.fwd = fwd_convt, .y = zeros(8 * P * 2), .r = randv(8 * P * 2, 7, 1),
                    .ny = 8 * P * 2, .u = &u};
        float *dx = zeros(P * 3), *dw = zeros(48), *db = zeros(2);
        c.fwd(&c);
        nn_convt3d_backward_p(dx, dw, db, c.r, 2, u.x, u.w, 3, 2, 1, 2, 2, 3, NN_FP32, u.ws);
        fd_check("convt3d dx", &c, u.x, dx, P * 3, h);
        fd_check("convt3d dw", &c, u.w, dw, 48, h);
        fd_check("convt3d db", &c, u.b, db, 2, h);
        free(u.x), free(u.w), free(u.b), free(u.ws), free(c.y), free(c.r), free(dx), free(dw),
            free(db);
    }
    /* conv1 */
    {
        conv_u u = {.N = 2, .D = 2, .H = 2, .W = 2, .cin = 4, .cout = 3};
        const size_t P = 16;
        u.x = randv(P * 4, 8, 1);
        u.w = randv(12, 9, 0.5f);
        u.b = randv(3, 10, 1);
        u.ws = ws_alloc(nn_conv1_ws_floats_p(16, 4, 3, NN_FP32));
        fd_ctx c = {.fwd = fwd_conv1, .y = zeros(P * 3), .r = randv(P * 3, 11, 1), .ny = P * 3,
                    .u = &u};
        float *dx = zeros(P * 4), *dw = zeros(12), *db = zeros(3);
        c.fwd(&c);
        nn_conv1_backward_p(dx, dw, db, c.r, u.x, u.w, 4, 3, 16, NN_FP32, u.ws);
        fd_check("conv1 dx", &c, u.x, dx, P * 4, h);
        fd_check("conv1 dw", &c, u.w, dw, 12, h);
        fd_check("conv1 db", &c, u.b, db, 3, h);
        free(u.x), free(u.w), free(u.b), free(u.ws), free(c.y), free(c.r), free(dx), free(dw),
            free(db);
    }
    /* GroupNorm (without ReLU: the kink is tested against PyTorch instead) */
    {
        conv_u u = {.N = 2, .D = 2, .H = 2, .W = 3, .cin = 6, .G = 3};
        const size_t n = 2 * 12 * 6;
        u.x = randv(n, 12, 2);
        u.g = randv(6, 13, 1);
        u.bb = randv(6, 14, 1);
        u.mean = zeros(6);
        u.rstd = zeros(6);
        u.ws = ws_alloc(nn_groupnorm_ws_floats(6));
        fd_ctx c = {.fwd = fwd_gn, .y = zeros(n), .r = randv(n, 15, 1), .ny = n, .u = &u};
        float *dx = zeros(n), *dg = zeros(6), *db = zeros(6);
        c.fwd(&c);
        nn_groupnorm_backward(dx, dg, db, c.r, u.x, c.y, u.mean, u.rstd, u.g, 2, 12, 6, 3, 0,
                              u.ws);
        fd_check("groupnorm dx", &c, u.x, dx, n, h);
        fd_check("groupnorm dgamma", &c, u.g, dg, 6, h);
        fd_check("groupnorm dbeta", &c, u.bb, db, 6, h);
        free(u.x), free(u.g), free(u.bb), free(u.mean), free(u.rstd), free(u.ws), free(c.y),
            free(c.r), free(dx), free(dg), free(db);
    }
    /* MaxPool, log-softmax, ReLU */
    {
        conv_u u = {.N = 1, .D = 2, .H = 4, .W = 4, .cin = 3};
        const size_t n = 32 * 3, no = 4 * 3;
        u.x = randv(n, 16, 1);
        u.idx = malloc(no);
        fd_ctx c = {.fwd = fwd_pool, .y = zeros(no), .r = randv(no, 17, 1), .ny = no, .u = &u};
        float *dx = zeros(n);
        c.fwd(&c);
        nn_maxpool3d_backward(dx, c.r, u.idx, 1, 2, 4, 4, 3);
        fd_check("maxpool dx", &c, u.x, dx, n, 1e-3f);
        free(c.y), free(c.r), free(dx), free(u.idx);
        fd_ctx c2 = {.fwd = fwd_lsm, .y = zeros(n), .r = randv(n, 18, 1), .ny = n, .u = &u};
        dx = zeros(n);
        c2.fwd(&c2);
        nn_log_softmax_backward(dx, c2.r, c2.y, 32, 3);
        fd_check("log_softmax dx", &c2, u.x, dx, n, h);
        free(c2.y), free(c2.r), free(dx);
        for (size_t i = 0; i < n; i++) /* keep away from the kink */
            if (fabsf(u.x[i]) < 0.05f)
                u.x[i] = 0.5f;
        fd_ctx c3 = {.fwd = fwd_relu, .y = zeros(n), .r = randv(n, 19, 1), .ny = n, .u = &u};
        dx = zeros(n);
        c3.fwd(&c3);
        nn_relu_backward(dx, c3.r, c3.y, n);
        fd_check("relu dx", &c3, u.x, dx, n, 1e-2f);
        free(c3.y), free(c3.r), free(dx), free(u.x);
    }
    /* concatenation (skip first): both inputs */
    {
        conv_u u = {.N = 1, .D = 2, .H = 2, .W = 2, .cin = 3, .cout = 2};
        u.x = randv(8 * 3, 22, 1);
        u.w = randv(8 * 2, 23, 1);
        fd_ctx c = {.fwd = fwd_concat, .y = zeros(8 * 5), .r = randv(8 * 5, 24, 1), .ny = 40,
                    .u = &u};
        float *da = zeros(24), *db = zeros(16);
        c.fwd(&c);
        nn_concat_backward(da, db, c.r, 3, 2, 8);
        fd_check("concat da", &c, u.x, da, 24, 1e-2f);
        fd_check("concat db", &c, u.w, db, 16, 1e-2f);
        free(u.x), free(u.w), free(c.y), free(c.r), free(da), free(db);
    }
    /* the loss: L itself, dL/dlogits */
    {
        const int N = 2, K = 3;
        const long S = 10;
        float *z = randv(N * S * K, 20, 2), *w = zeros(K), *g = zeros(N * S * K);
        uint16_t lab[20];
        rng r = rng_make(21, RNG_TEST, 0, 0);
        for (int i = 0; i < N * S; i++)
            lab[i] = (uint16_t)rng_below(&r, K);
        w[0] = 0.7f, w[1] = 1.5f, w[2] = 1.5f;
        float *ws = ws_alloc(nn_loss_ws_floats(N, K));
        double loss;
        nn_loss(g, z, lab, w, N, S, K, &loss, NULL, NULL, ws);
        int bad = 0;
        for (int i = 0; i < N * S * K; i += 3) {
            const float v0 = z[i];
            double lp, lm;
            z[i] = v0 + 1e-2f;
            nn_loss(NULL, z, lab, w, N, S, K, &lp, NULL, NULL, ws);
            z[i] = v0 - 1e-2f;
            nn_loss(NULL, z, lab, w, N, S, K, &lm, NULL, NULL, ws);
            z[i] = v0;
            const double num = (lp - lm) / 2e-2;
            if (fabs(num - g[i]) > 1e-4 + 1e-2 * fabs(num)) {
                if (bad++ < 3)
                    fprintf(stderr, "  loss dlogits[%d]: analytic %g numeric %g\n", i, g[i], num);
            }
        }
        CHECK(bad == 0, "finite differences of the loss: %d mismatches", bad);
        free(z), free(w), free(g), free(ws);
    }
}

/* ---- bf16 (PyTorch CPU autocast fixtures) ---------------------------------------------------
 * Two references per tensor, both from tools/torch_ref.py fixtures-bf16:
 *  - ".ideal": bf16 operands, exact sums, one rounding to bf16 (what our kernels do, and what
 *    oneDNN's bf16 kernels do). Only the order of our fp32 additions differs, which moves a
 *    result across a rounding boundary now and then: every element within one bf16 ulp (2^-7
 *    relative at most) and at least 90% bit-identical. An fp32 result matches almost nowhere,
 *    so the check discriminates (fp32_differs).
 *  - PyTorch's own autocast result. Its forward equals the ideal; its backward passes on CPUs
 *    without oneDNN bf16 kernels (this one) go through bf16 im2col/col2im buffers that round
 *    partial sums, up to ~1% of the tensor's largest value off the ideal (measured 0.93%): we
 *    accept one ulp plus 2% of the largest value. */
static int bf16_check_floor(const char *name, const float *got, const float *want, size_t n,
                            double floor) {
    size_t same = 0, bad = 0;
    double scale = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        same += got[i] == want[i];
        const double d = fabs((double)got[i] - want[i]);
        if (!(d <= fabs(want[i]) / 128.0 + floor * scale)) {
            if (bad < 3)
                fprintf(stderr, "  %s[%zu]: got %.9g want %.9g\n", name, i, (double)got[i],
                        (double)want[i]);
            bad++;
        }
    }
    const double frac = n ? (double)same / n : 1;
    CHECK(bad == 0 && frac >= 0.9, "%s: %zu of %zu beyond one bf16 ulp, %.1f%% bit-identical",
          name, bad, n, 100 * frac);
    return bad == 0 && frac >= 0.9;
}

static int bf16_check(const char *name, const float *got, const float *want, size_t n) {
    return bf16_check_floor(name, got, want, n, 1e-7);
}

static void torch_bf16_close(const char *name, const float *got, const float *want, size_t n) {
    double scale = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++)
        bad += !(fabs((double)got[i] - want[i]) <= fabs(want[i]) / 128.0 + 0.02 * scale);
    CHECK(bad == 0, "%s: %zu of %zu elements beyond one bf16 ulp + 2%% of the largest value of "
                    "PyTorch's autocast result",
          name, bad, n);
}

/* Both references for one tensor of fixture prefix.name (see above). */
static void bf16_both(const nn_st_file *st, const char *pfx, const char *tn, const float *got,
                      size_t n, int channels_last) {
    char nm[96], label[96];
    int64_t sh[5];
    snprintf(nm, sizeof nm, "%s.ideal.%s", pfx, tn);
    float *ideal = channels_last ? fx_get_cl(st, nm, sh) : fx_get(st, nm, NULL, NULL);
    snprintf(nm, sizeof nm, "%s.%s", pfx, tn);
    float *tref = channels_last ? fx_get_cl(st, nm, sh) : fx_get(st, nm, NULL, NULL);
    snprintf(label, sizeof label, "bf16 %s %s vs ideal", pfx, tn);
    bf16_check(label, got, ideal, n);
    snprintf(label, sizeof label, "bf16 %s %s vs PyTorch autocast", pfx, tn);
    torch_bf16_close(label, got, tref, n);
    free(ideal), free(tref);
}

/* A bf16 Conv3d pass against the ideal result, by the algorithm that ran it (nn_conv3d_algo):
 * the direct walks and AMX within one ulp (only the order of the fp32 sums differs); Winograd
 * over bf16 operands one ulp plus 3e-5 of the largest value (its transforms' fp32 error can move
 * a near-zero result by more than its own ulp); winograd-bf16, whose transformed operands are
 * rounded to bf16, within the selection's accuracy budget (algo.h: one ulp plus 3% of the
 * largest value per element, 2% of the norm). */
static void bf16_algo_check(const char *name, int algo, const float *got, const float *ideal,
                            size_t n, double floor, double wino_floor) {
    if (algo != NN_ALGO_WINOGRAD_BF16) {
        bf16_check_floor(name, got, ideal, n, algo == NN_ALGO_WINOGRAD ? wino_floor : floor);
        return;
    }
    double e2 = 0, r2 = 0;
    for (size_t i = 0; i < n; i++)
        e2 += ((double)got[i] - ideal[i]) * ((double)got[i] - ideal[i]),
            r2 += (double)ideal[i] * ideal[i];
    CHECK(nn_algo_within_budget(got, ideal, n, NN_BF16),
          "%s (winograd-bf16): within the accuracy budget (norm-wise %.2f%%)", name,
          100 * sqrt(e2 / (r2 > 0 ? r2 : 1)));
}

/* The fp32 result is no bf16 result: fewer than half its elements equal PyTorch's. */
static void fp32_differs(const char *name, const float *got, const float *want, size_t n) {
    size_t same = 0;
    for (size_t i = 0; i < n; i++)
        same += got[i] == want[i];
    CHECK(2 * same < n, "%s: the fp32 result equals the bf16 fixture on %zu of %zu elements "
                        "(the bf16 check would not discriminate)",
          name, same, n);
}

/* bf16 Conv3d on shapes whose channel counts are multiples of 32 (the AMX tiles where the CPU
 * has them, the vdpbf16ps kernels under SCAFFOLD_AMX=0, the fp32 kernels elsewhere), against
 * the ideal result: bf16 operands, sums in double (nn_ref_conv3d_forward; the input gradient
 * as the forward pass of the flipped, transposed weights over dy), one rounding. Widths that
 * leave a partial last tile of 32 padded positions, a 16-column block, two k blocks, and a
 * concatenated input. */
static void test_conv_bf16_vs_ideal(void) {
    static const int shapes[][7] = {
        /* N, D, H, W, ca, cb, cout */
        {1, 3, 5, 7, 32, 0, 48},   {2, 4, 6, 18, 32, 0, 64}, {1, 2, 3, 40, 96, 0, 16},
        {1, 4, 4, 4, 64, 64, 32},  {1, 2, 5, 9, 160, 0, 32}, {1, 3, 4, 5, 30, 2, 32},
        /* the weight gradient on AMX tiles (from 512 voxels: a concatenation split 30 | 2, a
         * partial last tile of positions; two samples, a single 16-channel output tile), and
         * on Winograd (4096 voxels; few tiles, two samples) elsewhere */
        {1, 4, 8, 33, 30, 2, 32},  {2, 4, 6, 22, 32, 0, 48},
        {1, 16, 16, 16, 16, 0, 16}, {2, 4, 8, 8, 16, 0, 24},
        /* Winograd (winograd-bf16 where the CPU has the bf16 kernels) with an odd K (a zero
         * channel pads the pairs) from a concatenation, and a partial column block */
        {1, 16, 16, 16, 30, 3, 40},
        /* the same on few tiles (8^3): k in five chunks, the last one channel (a padded pair) */
        {1, 8, 8, 8, 61, 4, 40},
        /* AMX weight gradient in one pass (dw straight from per-thread tiles: one sample, one
         * chunk, >= 4 channel blocks per thread at 4 threads) with 16-channel last blocks */
        {1, 8, 8, 8, 128, 16, 112},
        /* winograd-bf16's weight gradient on chunks of a thread's own (4096 tiles in 37
         * chunks of 112, a short last one) */
        {1, 64, 64, 32, 8, 0, 8},
        /* two k blocks on AMX tiles (1.1 MiB of bf16 weights per column block: the second
         * block adds to the first's results) */
        {1, 2, 3, 4, 640, 0, 32},
        /* the AMX weight gradient over two chunks of positions (4608 > 4096 for 128 output
         * channels: each tile group's accumulators carried from one chunk to the next) */
        {1, 6, 22, 30, 16, 0, 128},
        /* the AMX weight gradient over the rows of output voxels only (W a multiple of 32): one
         * chunk; 33 planes in two chunks of whole planes (20 + 13 for 256 output channels) */
        {1, 4, 5, 32, 32, 0, 32},  {1, 33, 1, 32, 16, 0, 256},
        /* ... and over blocks of rows of a plane too large for the L2 (96 columns, 64 output
         * channels: 40 rows, then 26) */
        {1, 1, 66, 96, 16, 0, 64},
        /* the tap walk two rows of 16 voxels at a time: an odd row count (the last pair half
         * empty), a concatenation */
        {1, 3, 5, 16, 32, 0, 48},  {2, 2, 4, 16, 16, 16, 32},
        /* few input channels (27 K <= 96: im2col on AMX tiles): a partial last tile of 32
         * positions; two samples with a concatenation 2 | 1; one channel on rows wider than a
         * tile; the weight gradient over three chunks of 2048 positions */
        {1, 4, 6, 22, 3, 0, 64},   {2, 4, 8, 9, 2, 1, 48},  {1, 3, 5, 40, 1, 0, 16},
        {1, 16, 16, 16, 3, 0, 32},
    };
    char nm[112];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int N = shapes[s][0], D = shapes[s][1], H = shapes[s][2], W = shapes[s][3];
        const int ca = shapes[s][4], cb = shapes[s][5], cin = ca + cb, cout = shapes[s][6];
        const size_t P = (size_t)N * D * H * W, nw = 27 * (size_t)cin * cout;
        float *x = randv(P * cin, 700 + s, 1), *w = randv(nw, 710 + s, 1.0f / sqrtf(27 * cin));
        float *dy = randv(P * cout, 720 + s, 1);
        nn_round_bf16(x, P * cin);
        nn_round_bf16(w, nw);
        nn_round_bf16(dy, P * cout);
        float *wt = zeros(nw); /* wt[ic][oc][t] = w[oc][ic][26 - t] */
        for (int oc = 0; oc < cout; oc++)
            for (int ic = 0; ic < cin; ic++)
                for (int t = 0; t < 27; t++)
                    wt[((size_t)ic * cout + oc) * 27 + t] = w[((size_t)oc * cin + ic) * 27 + 26 - t];
        float *xa = zeros(P * ca), *xb = zeros(P * cb + 1);
        for (size_t v = 0; v < P; v++) {
            memcpy(xa + v * ca, x + v * cin, sizeof(float) * ca);
            memcpy(xb + v * cb, x + v * cin + ca, sizeof(float) * cb);
        }
        float *ws = ws_alloc(nn_conv3d_ws_floats(N, D, H, W, cin, cout));
        float *y = zeros(P * cout), *yi = zeros(P * cout), *dx = zeros(P * cin),
              *dxi = zeros(P * cin);
        nn_ref_conv3d_forward(yi, x, w, cin, cout, N, D, H, W);
        nn_round_bf16(yi, P * cout);
        nn_ref_conv3d_forward(dxi, dy, wt, cout, cin, N, D, H, W);
        nn_round_bf16(dxi, P * cin);
        nn_conv3d_forward_p(y, xa, ca, cb ? xb : NULL, cb, w, cout, N, D, H, W, NN_BF16, NULL,
                            ws);
        snprintf(nm, sizeof nm, "bf16 conv3d %dx%dx%dx%d %d+%d->%d forward vs ideal", N, D, H, W,
                 ca, cb, cout);
        bf16_algo_check(nm, nn_conv3d_algo(NN_PASS_FWD, N, D, H, W, ca, cb, cout, 0, NN_BF16), y,
                        yi, P * cout, 1e-7, 3e-5);
        nn_conv3d_backward_p(dx, NULL, NULL, dy, x, cin, NULL, 0, w, cout, N, D, H, W, NN_BF16,
                             NULL, ws);
        snprintf(nm, sizeof nm, "bf16 conv3d %dx%dx%dx%d %d->%d dx vs ideal", N, D, H, W, cin,
                 cout);
        bf16_algo_check(nm, nn_conv3d_algo(NN_PASS_BWD_DATA, N, D, H, W, cin, 0, cout, 0, NN_BF16),
                        dx, dxi, P * cin, 1e-7, 3e-5);
        /* the weight gradient: sums in double over the voxels; Winograd's transforms add an
         * fp32 error of ~1e-5 of the largest value (the fp32 tests' bound), which can move a
         * near-zero sum by more than its own ulp */
        float *dw = zeros(nw), *dwi = zeros(nw);
        nn_conv3d_backward_p(NULL, NULL, dw, dy, xa, ca, cb ? xb : NULL, cb, w, cout, N, D, H, W,
                             NN_BF16, NULL, ws);
        for (int n = 0; n < N; n++)
            for (int oc = 0; oc < cout; oc++)
                for (int ic = 0; ic < cin; ic++)
                    for (int t = 0; t < 27; t++) {
                        double sum = 0;
                        for (int z = 0; z < D; z++)
                            for (int yy = 0; yy < H; yy++)
                                for (int xx = 0; xx < W; xx++) {
                                    const int iz = z + t / 9 - 1, iy = yy + (t / 3) % 3 - 1,
                                              ix = xx + t % 3 - 1;
                                    if (iz < 0 || iz >= D || iy < 0 || iy >= H || ix < 0 ||
                                        ix >= W)
                                        continue;
                                    const size_t vo = (((size_t)n * D + z) * H + yy) * W + xx,
                                                 vi = (((size_t)n * D + iz) * H + iy) * W + ix;
                                    sum += (double)x[vi * cin + ic] * dy[vo * cout + oc];
                                }
                        dwi[((size_t)oc * cin + ic) * 27 + t] += (float)sum;
                    }
        nn_round_bf16(dwi, nw);
        snprintf(nm, sizeof nm, "bf16 conv3d %dx%dx%dx%d %d+%d->%d dw vs ideal", N, D, H, W, ca,
                 cb, cout);
        const int dwalgo = nn_conv3d_algo(NN_PASS_BWD_WEIGHT, N, D, H, W, ca, cb, cout, 0, NN_BF16);
        bf16_algo_check(nm, dwalgo, dw, dwi, nw, 3e-5, 3e-5);
        /* the AMX weight gradient is the same bits on 1 and 3 threads: each group's chunks run
         * in order whichever thread takes them (3 threads on fewer cores: some take the
         * others' groups) */
        if (dwalgo == NN_ALGO_AMX) {
            const int nt0 = omp_get_max_threads();
            for (int nt = 1; nt <= 3; nt += 2) {
                omp_set_num_threads(nt);
                float *dw2 = zeros(nw);
                nn_conv3d_backward_p(NULL, NULL, dw2, dy, xa, ca, cb ? xb : NULL, cb, w, cout, N,
                                     D, H, W, NN_BF16, NULL, ws);
                CHECK(!memcmp(dw2, dw, nw * sizeof(float)), "%s: %d threads differ from %d", nm,
                      nt, nt0);
                free(dw2);
            }
            omp_set_num_threads(nt0);
        }
        free(x), free(w), free(dy), free(wt), free(xa), free(xb), free(ws), free(y), free(yi),
            free(dx), free(dxi), free(dw), free(dwi);
    }
}

/* The bf16 forward of a first layer (3 input channels) whose output exceeds CONV_STREAM_BYTES
 * (40960 voxels x 208 channels, 34 MB: on AMX, the im2col pass's non-temporal stores), against
 * the ideal result on every 61st voxel (the whole reference would cost 0.7 G products in
 * double). */
static void test_conv_bf16_first_big(void) {
    const int N = 1, D = 32, H = 32, W = 40, cin = 3, cout = 208;
    const size_t P = (size_t)N * D * H * W, nw = 27 * (size_t)cin * cout;
    float *x = randv(P * cin, 730, 1), *w = randv(nw, 731, 1.0f / sqrtf(27 * cin));
    nn_round_bf16(x, P * cin);
    nn_round_bf16(w, nw);
    float *ws = ws_alloc(nn_conv3d_ws_floats(N, D, H, W, cin, cout)), *y = zeros(P * cout);
    nn_conv3d_forward_p(y, x, cin, NULL, 0, w, cout, N, D, H, W, NN_BF16, NULL, ws);
    const size_t ns = (P + 60) / 61;
    float *got = zeros(ns * cout), *want = zeros(ns * cout);
    for (size_t i = 0; i < ns; i++) {
        const long v = (long)i * 61, z = v / (H * W), yy = v / W % H, xx = v % W;
        for (int oc = 0; oc < cout; oc++) {
            double sum = 0;
            for (int t = 0; t < 27; t++) {
                const long iz = z + t / 9 - 1, iy = yy + t / 3 % 3 - 1, ix = xx + t % 3 - 1;
                if (iz < 0 || iz >= D || iy < 0 || iy >= H || ix < 0 || ix >= W)
                    continue;
                for (int c = 0; c < cin; c++)
                    sum += (double)x[((iz * H + iy) * W + ix) * cin + c] *
                           w[((size_t)oc * cin + c) * 27 + t];
            }
            want[i * cout + oc] = nn_bf16_round((float)sum);
            got[i * cout + oc] = y[(size_t)v * cout + oc];
        }
    }
    bf16_check("bf16 conv3d 1x32x32x40 3->208 forward (34 MB output) vs ideal, every 61st voxel",
               got, want, ns * cout);
    free(x), free(w), free(ws), free(y), free(got), free(want);
}

/* bf16 ConvTranspose3d k2 s2 on channel counts that are multiples of 32 (AMX tiles where the
 * CPU has them, else the vdpbf16ps kernels: forward, input gradient, and the weight gradient in
 * voxel pairs where W is even; the fp32 kernels on bf16 operands without them and for the
 * weight gradient of an odd W), against the ideal result (bf16 operands, sums in double, one
 * rounding): a partial last tile of 32 voxels and rows shorter than a tile, an odd W, two
 * samples, an output gradient with a voxel stride beyond its channels (ldo), and with
 * SCAFFOLD_NN_SLAB_BYTES (tests/nn/run.sh) several backward slabs. */
static void test_convt_bf16_vs_ideal(void) {
    static const int shapes[][7] = {
        /* N, D, H, W, cin, cout, ldo - cout */
        {1, 2, 3, 5, 32, 64, 0}, {2, 3, 4, 4, 64, 32, 16}, {1, 4, 6, 20, 96, 32, 0},
    };
    char nm[112];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int N = shapes[s][0], D = shapes[s][1], H = shapes[s][2], W = shapes[s][3];
        const int cin = shapes[s][4], cout = shapes[s][5];
        const long ldo = cout + shapes[s][6];
        const size_t P = (size_t)N * D * H * W, nw = 8 * (size_t)cin * cout;
        float *x = randv(P * cin, 730 + s, 1), *w = randv(nw, 740 + s, 1.0f / sqrtf(cin));
        float *b = randv((size_t)cout, 750 + s, 1), *dy = randv(8 * P * ldo, 760 + s, 1);
        nn_round_bf16(x, P * cin);
        nn_round_bf16(w, nw);
        nn_round_bf16(b, (size_t)cout);
        nn_round_bf16(dy, 8 * P * ldo);
        float *yi = zeros(8 * P * cout), *dxi = zeros(P * cin), *dwi = zeros(nw),
              *dbi = zeros(cout);
        nn_ref_convt3d_forward(yi, x, w, b, cin, cout, N, D, H, W);
        nn_ref_convt3d_backward(dxi, dwi, dbi, dy, ldo, x, w, cin, cout, N, D, H, W);
        nn_round_bf16(yi, 8 * P * cout);
        nn_round_bf16(dxi, P * cin);
        nn_round_bf16(dwi, nw);
        nn_round_bf16(dbi, (size_t)cout);
        float *ws = ws_alloc(nn_convt3d_ws_floats_p(N, D, H, W, cin, cout, NN_BF16));
        float *y = zeros(8 * P * cout), *dx = zeros(P * cin), *dw = zeros(nw), *db = zeros(cout);
        nn_convt3d_forward_p(y, x, w, b, cin, cout, N, D, H, W, NN_BF16, ws);
        snprintf(nm, sizeof nm, "bf16 convt3d %dx%dx%dx%d %d->%d forward vs ideal", N, D, H, W,
                 cin, cout);
        bf16_check(nm, y, yi, 8 * P * cout);
        nn_convt3d_backward_p(dx, dw, db, dy, ldo, x, w, cin, cout, N, D, H, W, NN_BF16, ws);
        snprintf(nm, sizeof nm, "bf16 convt3d %dx%dx%dx%d %d->%d dx vs ideal", N, D, H, W, cin,
                 cout);
        bf16_check(nm, dx, dxi, P * cin);
        snprintf(nm, sizeof nm, "bf16 convt3d %dx%dx%dx%d %d->%d dw vs ideal", N, D, H, W, cin,
                 cout);
        bf16_check(nm, dw, dwi, nw);
        snprintf(nm, sizeof nm, "bf16 convt3d %dx%dx%dx%d %d->%d db vs ideal", N, D, H, W, cin,
                 cout);
        bf16_check(nm, db, dbi, (size_t)cout);
        /* the input gradient alone (no weight gradient before it) */
        memset(dx, 0, sizeof(float) * P * cin);
        nn_convt3d_backward_p(dx, NULL, NULL, dy, ldo, x, w, cin, cout, N, D, H, W, NN_BF16, ws);
        snprintf(nm, sizeof nm, "bf16 convt3d %dx%dx%dx%d %d->%d dx alone vs ideal", N, D, H, W,
                 cin, cout);
        bf16_check(nm, dx, dxi, P * cin);
        free(x), free(w), free(b), free(dy), free(yi), free(dxi), free(dwi), free(dbi), free(ws),
            free(y), free(dx), free(dw), free(db);
    }
}

static void test_bf16_fixtures(const nn_st_file *st) {
    int64_t xs[5], wsh[5], ys[5];
    /* Conv3d k3 */
    {
        float *x = fx_get_cl(st, "conv3d.x", xs), *w = fx_get(st, "conv3d.w", wsh, NULL);
        float *dy = fx_get_cl(st, "conv3d.dy", ys), *yi = fx_get_cl(st, "conv3d.ideal.y", ys);
        const int N = (int)xs[0], cin = (int)xs[1], D = (int)xs[2], H = (int)xs[3], W = (int)xs[4];
        const int cout = (int)wsh[0];
        const size_t P = (size_t)N * D * H * W, nw = 27 * (size_t)cin * cout;
        float *ws = ws_alloc(nn_conv3d_ws_floats(N, D, H, W, cin, cout));
        float *y = zeros(P * cout), *dx = zeros(P * cin), *dw = zeros(nw);
        nn_conv3d_forward_p(y, x, cin, NULL, 0, w, cout, N, D, H, W, NN_BF16, NULL, ws);
        bf16_both(st, "conv3d", "y", y, P * cout, 1);
        nn_conv3d_backward_p(dx, NULL, dw, dy, x, cin, NULL, 0, w, cout, N, D, H, W, NN_BF16, NULL, ws);
        bf16_both(st, "conv3d", "dx", dx, P * cin, 1);
        bf16_both(st, "conv3d", "dw", dw, nw, 0);
        nn_conv3d_forward_p(y, x, cin, NULL, 0, w, cout, N, D, H, W, NN_FP32, NULL, ws);
        fp32_differs("fp32 conv3d forward", y, yi, P * cout);
        /* through the fused concatenation (channels split 3 | cin-3) */
        float *a = zeros(P * 3), *b = zeros(P * (cin - 3));
        nn_concat_backward(a, b, x, 3, cin - 3, (long)P);
        nn_conv3d_forward_p(y, a, 3, b, cin - 3, w, cout, N, D, H, W, NN_BF16, NULL, ws);
        bf16_check("bf16 conv3d forward (fused concat) vs ideal", y, yi, P * cout);
        free(x), free(w), free(dy), free(yi), free(ws), free(y), free(dx), free(dw), free(a),
            free(b);
    }
    /* ConvTranspose3d k2 s2 */
    {
        float *x = fx_get_cl(st, "convt3d.x", xs), *w = fx_get(st, "convt3d.w", wsh, NULL);
        float *b = fx_get(st, "convt3d.b", NULL, NULL), *dy = fx_get_cl(st, "convt3d.dy", ys);
        float *yi = fx_get_cl(st, "convt3d.ideal.y", ys);
        const int N = (int)xs[0], cin = (int)xs[1], D = (int)xs[2], H = (int)xs[3], W = (int)xs[4];
        const int cout = (int)wsh[1];
        const size_t P = (size_t)N * D * H * W, nw = 8 * (size_t)cin * cout;
        float *ws = ws_alloc(nn_convt3d_ws_floats_p(N, D, H, W, cin, cout, NN_BF16));
        float *y = zeros(8 * P * cout), *dx = zeros(P * cin), *dw = zeros(nw), *db = zeros(cout);
        nn_convt3d_forward_p(y, x, w, b, cin, cout, N, D, H, W, NN_BF16, ws);
        bf16_both(st, "convt3d", "y", y, 8 * P * cout, 1);
        nn_convt3d_backward_p(dx, dw, db, dy, cout, x, w, cin, cout, N, D, H, W, NN_BF16, ws);
        bf16_both(st, "convt3d", "dx", dx, P * cin, 1);
        bf16_both(st, "convt3d", "dw", dw, nw, 0);
        bf16_both(st, "convt3d", "db", db, cout, 0);
        nn_convt3d_forward_p(y, x, w, b, cin, cout, N, D, H, W, NN_FP32, ws);
        fp32_differs("fp32 convt3d forward", y, yi, 8 * P * cout);
        free(x), free(w), free(b), free(dy), free(yi), free(ws), free(y), free(dx), free(dw),
            free(db);
    }
    /* Conv3d k1 with bias */
    {
        float *x = fx_get_cl(st, "conv1.x", xs), *w = fx_get(st, "conv1.w", wsh, NULL);
        float *b = fx_get(st, "conv1.b", NULL, NULL), *dy = fx_get_cl(st, "conv1.dy", ys);
        const int cin = (int)xs[1], cout = (int)wsh[0];
        const long P = (long)xs[0] * xs[2] * xs[3] * xs[4];
        float *ws = ws_alloc(nn_conv1_ws_floats_p(P, cin, cout, NN_BF16));
        float *y = zeros(P * cout), *dx = zeros(P * cin), *dw = zeros((size_t)cin * cout),
              *db = zeros(cout);
        nn_conv1_forward_p(y, x, w, b, cin, cout, P, NN_BF16, ws);
        bf16_both(st, "conv1", "y", y, P * cout, 1);
        nn_conv1_backward_p(dx, dw, db, dy, x, w, cin, cout, P, NN_BF16, ws);
        bf16_both(st, "conv1", "dx", dx, P * cin, 1);
        bf16_both(st, "conv1", "dw", dw, (size_t)cin * cout, 0);
        bf16_both(st, "conv1", "db", db, cout, 0);
        free(x), free(w), free(b), free(dy), free(ws), free(y), free(dx), free(dw), free(db);
    }
}

/* ---- optimized vs naive convolutions ---------------------------------------------------- */

/* Absolute tolerance of a Winograd pass against the naive loops, on outputs of order 1: F(4,3)
 * multiplies by up to 5 in the input transform and 8 in the output transform, so its rounding
 * is about that much above the direct kernels' (2.4e-5 measured on these shapes; 1e-5 is the
 * direct kernels' tolerance). A wrong transform gives errors of order 1. */
#define WINO_ATOL 6e-5f
/* amx-x3 leaves out about 2^-16 of each product (lo(x) lo(w) and the residues past two bf16
 * parts): 1.7e-5 at most on these shapes' O(1) results, 4.0-5.1e-6 of the largest value at
 * 64 channels; the direct kernels' 1e-5 is too tight for it, Winograd's bound holds it. */
static float x3_atol(int pass, int N, int D, int H, int W, int cin, int cout, float atol) {
    return nn_conv3d_algo(pass, N, D, H, W, cin, 0, cout, 0, NN_FP32) == NN_ALGO_AMX_X3
               ? fmaxf(WINO_ATOL, atol)
               : atol;
}

/* ConvTranspose3d k2 s2 against naive loops: 136 output channels (the last column block
 * partial) and odd input channel counts (k blocks of unequal size); a weight gradient of
 * several chunks whose panels exceed the prefetch budget (200->136, two chunks, tiles split
 * between threads); and one whose output exceeds CONV_STREAM_BYTES (42 MB, non-temporal
 * stores) with 64 chunks summed through per-thread copies and prefetched. */
static void test_convt_vs_naive(void) {
    static const int shapes[][6] = {{1, 2, 3, 2, 7, 136},
                                    {2, 2, 2, 3, 13, 20},
                                    {1, 4, 8, 16, 200, 136},
                                    {1, 16, 32, 32, 8, 80}};
    char nm[96];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int N = shapes[s][0], D = shapes[s][1], H = shapes[s][2], W = shapes[s][3];
        const int cin = shapes[s][4], cout = shapes[s][5];
        const size_t P = (size_t)N * D * H * W, nw = 8 * (size_t)cin * cout;
        float *x = randv(P * cin, 400 + s, 1), *w = randv(nw, 500 + s, 0.3f);
        float *b = randv((size_t)cout, 600 + s, 1), *dy = randv(8 * P * cout, 700 + s, 1);
        float *ws = ws_alloc(nn_convt3d_ws_floats_p(N, D, H, W, cin, cout, NN_FP32));
        float *y = zeros(8 * P * cout), *yr = zeros(8 * P * cout), *dx = zeros(P * cin),
              *dxr = zeros(P * cin), *dw = zeros(nw), *dwr = zeros(nw), *db = zeros(cout);
        /* the reference sums up to 16384 voxels: in double (float sums of that many terms
         * are themselves off by ~1e-3) */
        float *dbr = zeros(cout);
        nn_ref_convt3d_forward(yr, x, w, b, cin, cout, N, D, H, W);
        nn_ref_convt3d_backward(dxr, dwr, dbr, dy, cout, x, w, cin, cout, N, D, H, W);
        nn_convt3d_forward_p(y, x, w, b, cin, cout, N, D, H, W, NN_FP32, ws);
        nn_convt3d_backward_p(dx, dw, db, dy, cout, x, w, cin, cout, N, D, H, W, NN_FP32, ws);
        snprintf(nm, sizeof nm, "convt3d %dx%dx%dx%d %d->%d forward vs naive", N, D, H, W, cin,
                 cout);
        check_close(nm, y, yr, 8 * P * cout, 1e-5f, 1e-4f);
        snprintf(nm, sizeof nm, "convt3d %dx%dx%dx%d %d->%d dx vs naive", N, D, H, W, cin, cout);
        check_close(nm, dx, dxr, P * cin, 1e-4f, 1e-4f);
        /* a float sum over P voxels of O(1) products rounds by ~2^-24 * sqrt(P) * its partial
         * sums (~sqrt(P)): 1e-4 up to 256 voxels, growing as sqrt(P) (8e-4 at 16384) */
        const float dw_atol = P > 256 ? 1e-4f * sqrtf((float)P / 256.0f) : 1e-4f;
        snprintf(nm, sizeof nm, "convt3d %dx%dx%dx%d %d->%d dw vs naive", N, D, H, W, cin, cout);
        check_close(nm, dw, dwr, nw, dw_atol, 1e-4f);
        /* the bias gradient sums 8 * P values (the weight gradient's channel of ones) */
        snprintf(nm, sizeof nm, "convt3d %dx%dx%dx%d %d->%d db vs naive", N, D, H, W, cin, cout);
        check_close(nm, db, dbr, cout, 2 * dw_atol, 1e-4f);
        free(x), free(w), free(b), free(dy), free(ws), free(y), free(yr), free(dx), free(dxr),
            free(dw), free(dwr), free(db), free(dbr);
    }
}

static void test_conv_vs_naive(void) {
    static const int shapes[][6] = {
        /* N, D, H, W, cin, cout */
        {1, 4, 4, 4, 16, 16}, {1, 3, 5, 7, 32, 48}, {2, 4, 4, 4, 64, 64}, {1, 2, 6, 4, 80, 20},
        {1, 2, 2, 2, 3, 128}, {1, 4, 4, 8, 16, 32}, {1, 4, 2, 17, 24, 40}, {1, 2, 2, 2, 96, 96},
        /* weight-gradient chunks (about 256 voxels, whole rows): one row of a prime height,
         * two chunks per plane, and two planes per chunk with a last chunk of one */
        {1, 3, 13, 24, 8, 16}, {1, 2, 12, 40, 8, 16}, {1, 5, 6, 20, 8, 16},
        /* Winograd (even depth, height and width multiples of 4, >= 8 channels); partial
         * vectors of channels */
        {1, 16, 16, 16, 16, 24}, {2, 16, 16, 16, 8, 8}, {1, 8, 16, 32, 12, 20},
        /* more than one column block (80 > 64 columns): several column groups of Winograd's
         * U when tests/nn/run.sh makes the groups one block (SCAFFOLD_NN_WINO_UMAX) */
        {1, 16, 16, 16, 8, 80}, {1, 8, 16, 32, 80, 8},
        /* Winograd on few tiles (under 4096 voxels, 16 to 32 tiles per group of samples):
         * three samples in groups of two; k chunks with a short last one (100 and 72 input
         * channels; 48 per chunk on AVX2, 24 on AVX-512), a partial column block; 32 tiles;
         * 17 4^3 samples (2 tiles each) in groups of 16 and 1 (which runs alone) */
        {3, 8, 8, 8, 16, 24}, {1, 8, 8, 8, 100, 72}, {2, 4, 8, 16, 24, 8}, {17, 4, 4, 4, 16, 8},
        /* Winograd's weight gradient on chunks of a thread's own (at least 32 chunks: 2048
         * tiles of 56) */
        {1, 64, 32, 32, 8, 8},
        /* few input channels, the weight gradient on im2col rows (conv_dw_i2c): chunks of
         * rows across planes and samples, more chunks than copies, a partial column block;
         * rows wider than a chunk; one channel, two, three */
        {2, 6, 5, 12, 3, 20}, {1, 3, 4, 130, 1, 80}, {1, 9, 8, 16, 2, 64},
    };
    char nm[96];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int N = shapes[s][0], D = shapes[s][1], H = shapes[s][2], W = shapes[s][3];
        const int cin = shapes[s][4], cout = shapes[s][5];
        const size_t P = (size_t)N * D * H * W, nw = 27 * (size_t)cin * cout;
        float *x = randv(P * cin, 100 + s, 1), *w = randv(nw, 200 + s, 1.0f / sqrtf(27 * cin));
        float *dy = randv(P * cout, 300 + s, 1);
        float *ws = ws_alloc(nn_conv3d_ws_floats(N, D, H, W, cin, cout));
        float *y = zeros(P * cout), *yr = zeros(P * cout), *dx = zeros(P * cin),
              *dxr = zeros(P * cin), *dw = zeros(nw), *dwr = zeros(nw);
        nn_conv3d_forward_p(y, x, cin, NULL, 0, w, cout, N, D, H, W, NN_FP32, NULL, ws);
        nn_ref_conv3d_forward(yr, x, w, cin, cout, N, D, H, W);
        nn_conv3d_backward_p(dx, NULL, dw, dy, x, cin, NULL, 0, w, cout, N, D, H, W, NN_FP32, NULL, ws);
        nn_ref_conv3d_backward(dxr, dwr, dy, x, w, cin, cout, N, D, H, W);
        snprintf(nm, sizeof nm, "conv3d %dx%dx%dx%d %d->%d forward vs naive", N, D, H, W, cin,
                 cout);
        const float atol = nn_conv3d_winograd(N, D, H, W, cin, cout, NN_FP32) ? WINO_ATOL : 1e-5f;
        check_close(nm, y, yr, P * cout, x3_atol(NN_PASS_FWD, N, D, H, W, cin, cout, atol), 1e-4f);
        snprintf(nm, sizeof nm, "conv3d %dx%dx%dx%d %d->%d dx vs naive", N, D, H, W, cin, cout);
        /* w is scaled for the forward's 27 cin terms: dx sums 27 cout terms, so its values and
         * its rounding (which follows the terms' size, not the sum's) are sqrt(cout / cin) the
         * forward's (8 -> 80: 3.2x) */
        const float dx_scale = fmaxf(1.0f, sqrtf((float)cout / (float)cin));
        check_close(nm, dx, dxr, P * cin,
                    x3_atol(NN_PASS_BWD_DATA, N, D, H, W, cin, cout, atol) * dx_scale, 1e-4f);
        snprintf(nm, sizeof nm, "conv3d %dx%dx%dx%d %d->%d dw vs naive", N, D, H, W, cin, cout);
        /* a sum over P voxels: its fp32 rounding grows with sqrt(P); Winograd's by the same
         * factor as its forward pass's (F(4,3)'s transforms; 65536 voxels on shared chunks:
         * up to 0.02 on sums of order 100) */
        const float dw_atol = fmaxf(1e-4f, 3e-5f * sqrtf((float)P)) * (atol / 1e-5f);
        check_close(nm, dw, dwr, nw, dw_atol, 1e-4f);
        free(x), free(w), free(dy), free(ws), free(y), free(yr), free(dx), free(dxr), free(dw),
            free(dwr);
    }
    if (!fx_algo_forced()) { /* the rule's choices (a forced algorithm replaces them) */
        const char *wn = nn_settings_env("SCAFFOLD_NN_WINOGRAD");
        const int on = nn_settings()->winograd;
        CHECK(nn_conv3d_winograd(1, 16, 16, 16, 16, 24, NN_FP32) == on &&
                  nn_conv3d_winograd(1, 16, 16, 16, 24, 16, NN_FP32) == on &&
                  /* bf16 where fp32 is, unless AMX tiles take the layer (K a multiple of 32) */
                  nn_conv3d_winograd(1, 16, 16, 16, 16, 24, NN_BF16) == on &&
                  nn_conv3d_winograd(1, 16, 16, 16, 32, 32, NN_BF16) ==
                      (nn_conv3d_winograd(1, 16, 16, 16, 32, 32, NN_FP32) && !nn_isa_amx()) &&
                  nn_conv3d_winograd(1, 8, 8, 8, 256, 256, NN_FP32) == on &&
                  nn_conv3d_winograd(1, 8, 8, 8, 512, 512, NN_FP32) == on &&
                  !nn_conv3d_winograd(1, 8, 16, 16, 16, 16, NN_FP32) &&
                  !nn_conv3d_winograd(7, 4, 4, 4, 16, 16, NN_FP32) &&
                  nn_conv3d_winograd(8, 4, 4, 4, 16, 16, NN_FP32) == on &&
                  !nn_conv3d_winograd(1, 3, 16, 16, 16, 16, NN_FP32) &&
                  !nn_conv3d_winograd(1, 16, 18, 16, 16, 16, NN_FP32) &&
                  !nn_conv3d_winograd(1, 16, 16, 14, 16, 16, NN_FP32) &&
                  !nn_conv3d_winograd(1, 16, 16, 16, 3, 16, NN_FP32),
              "Winograd taken exactly where it applies (SCAFFOLD_NN_WINOGRAD=%s)", wn ? wn : "");
    }
    /* A concatenated input (fused into the padding) and its input gradient written into its two
     * parts, on Winograd shapes (16^3; 8^3, few tiles): against the naive loops on the
     * concatenated tensor. */
    for (int side = 16; side >= 8; side /= 2) {
        const int N = 1, D = side, H = side, W = side, ca = 8, cb = 16, cin = ca + cb, cout = 16;
        const size_t P = (size_t)N * D * H * W, nw = 27 * (size_t)cin * cout;
        float *xa = randv(P * ca, 401, 1), *xb = randv(P * cb, 402, 1), *x = zeros(P * cin);
        float *w = randv(nw, 403, 1.0f / sqrtf(27 * cin)), *dy = randv(P * cout, 404, 1);
        for (size_t v = 0; v < P; v++) {
            memcpy(x + v * cin, xa + v * ca, sizeof(float) * ca);
            memcpy(x + v * cin + ca, xb + v * cb, sizeof(float) * cb);
        }
        float *ws = ws_alloc(nn_conv3d_ws_floats(N, D, H, W, cin, cout));
        float *y = zeros(P * cout), *yr = zeros(P * cout), *da = zeros(P * ca),
              *db = zeros(P * cb), *dxr = zeros(P * cin), *dwr = zeros(nw), *dg = zeros(P * cin),
              *dw = zeros(nw);
        nn_conv3d_forward_p(y, xa, ca, xb, cb, w, cout, N, D, H, W, NN_FP32, NULL, ws);
        nn_ref_conv3d_forward(yr, x, w, cin, cout, N, D, H, W);
        snprintf(nm, sizeof nm, "conv3d concat %d^3 8+16->16 forward vs naive", side);
        check_close(nm, y, yr, P * cout, WINO_ATOL, 1e-4f);
        nn_conv3d_backward_p(da, db, dw, dy, xa, ca, xb, cb, w, cout, N, D, H, W, NN_FP32, NULL,
                             ws);
        nn_ref_conv3d_backward(dxr, dwr, dy, x, w, cin, cout, N, D, H, W);
        for (size_t v = 0; v < P; v++) {
            memcpy(dg + v * cin, da + v * ca, sizeof(float) * ca);
            memcpy(dg + v * cin + ca, db + v * cb, sizeof(float) * cb);
        }
        snprintf(nm, sizeof nm, "conv3d concat %d^3 8+16->16 dx (two parts) vs naive", side);
        check_close(nm, dg, dxr, P * cin, WINO_ATOL, 1e-4f);
        /* a sum over 4096 voxels: the naive loops' own rounding is ~5e-4 (as above) */
        snprintf(nm, sizeof nm, "conv3d concat %d^3 8+16->16 dw vs naive", side);
        check_close(nm, dw, dwr, nw, 2e-3f, 1e-4f);
        free(xa), free(xb), free(x), free(w), free(dy), free(ws), free(y), free(yr), free(da),
            free(db), free(dxr), free(dwr), free(dg), free(dw);
    }
    /* ConvTranspose3d and the 1x1 convolution with wide channels (full-vector paths). */
    static const int tshapes[][6] = {{1, 2, 2, 3, 64, 32}, {1, 2, 3, 2, 32, 64}, {2, 1, 2, 2, 48, 16}};
    for (size_t s = 0; s < sizeof tshapes / sizeof tshapes[0]; s++) {
        const int N = tshapes[s][0], D = tshapes[s][1], H = tshapes[s][2], W = tshapes[s][3];
        const int cin = tshapes[s][4], cout = tshapes[s][5];
        const size_t P = (size_t)N * D * H * W, nw = 8 * (size_t)cin * cout;
        float *x = randv(P * cin, 400 + s, 1), *w = randv(nw, 500 + s, 0.1f), *b = randv(cout, 9, 1);
        float *ws = ws_alloc(nn_convt3d_ws_floats_p(N, D, H, W, cin, cout, NN_FP32));
        float *y = zeros(8 * P * cout), *yr = zeros(8 * P * cout);
        nn_convt3d_forward_p(y, x, w, b, cin, cout, N, D, H, W, NN_FP32, ws);
        nn_ref_convt3d_forward(yr, x, w, b, cin, cout, N, D, H, W);
        snprintf(nm, sizeof nm, "convt3d %d->%d forward vs naive", cin, cout);
        check_close(nm, y, yr, 8 * P * cout, 1e-5f, 1e-4f);
        /* backward against the plain reference (src/nn/ref.c) */
        float *dy = randv(8 * P * cout, 600 + s, 1), *dx = zeros(P * cin), *dw = zeros(nw),
              *db = zeros(cout), *dxr = zeros(P * cin), *dwr = zeros(nw), *dbr = zeros(cout);
        nn_convt3d_backward_p(dx, dw, db, dy, cout, x, w, cin, cout, N, D, H, W, NN_FP32, ws);
        nn_ref_convt3d_backward(dxr, dwr, dbr, dy, cout, x, w, cin, cout, N, D, H, W);
        snprintf(nm, sizeof nm, "convt3d %d->%d dx vs naive", cin, cout);
        check_close(nm, dx, dxr, P * cin, 1e-4f, 1e-4f);
        snprintf(nm, sizeof nm, "convt3d %d->%d dw vs naive", cin, cout);
        check_close(nm, dw, dwr, nw, 1e-4f, 1e-4f);
        free(x), free(w), free(b), free(ws), free(y), free(yr), free(dy), free(dx), free(dw),
            free(db), free(dxr), free(dwr), free(dbr);
    }
}

/* Largest |a - b| over n, and the norm of a - b against b's: amx-x3's error measures. */
static void x3_err(const float *a, const float *b, size_t n, double *maxrel, double *rms) {
    double mx = 0, big = 0, se = 0, sr = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - b[i]);
        mx = e > mx ? e : mx;
        big = fabs(b[i]) > big ? fabs(b[i]) : big;
        se += e * e, sr += (double)b[i] * b[i];
    }
    *maxrel = big > 0 ? mx / big : mx, *rms = sr > 0 ? sqrt(se / sr) : sqrt(se);
}

/* amx-x3 (fp32 on AMX as three bf16 products), forced, against the naive loops: a fused
 * concatenation (32 + 32 channels), an input gradient split into its two parts (K = 96), and
 * 256 -> 96 (768 packed rows: several k blocks; 96 columns: a partial column block). Its bound:
 * every element within 1e-5 of the largest value and the error's norm within 1e-5 of the
 * result's (measured 4.0-5.1e-6 and 4.4e-6; one correction term left out gives about 5e-4, plain
 * bf16 2e-3). AMX CPUs only: elsewhere amx-x3 does not apply. */
static void test_conv_x3(void) {
    if (!nn_isa_amx()) {
        printf("SKIP amx-x3: no AMX tiles on this CPU and kernel path\n");
        return;
    }
    const char *was = getenv("SCAFFOLD_NN_ALGO");
    char keep[64] = "";
    if (was)
        snprintf(keep, sizeof keep, "%s", was);
    setenv("SCAFFOLD_NN_ALGO", "amx-x3", 1);
    nn_settings_reload();
    nn_algo_reset();
    static const int sh[][5] = {{8, 32, 32, 96, 1}, {8, 256, 0, 96, 0}};
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++) {
        const int D = sh[s][0], ca = sh[s][1], cb = sh[s][2], cout = sh[s][3], split = sh[s][4];
        const int cin = ca + cb;
        const size_t P = (size_t)D * D * D, nw = 27 * (size_t)cin * cout;
        float *x = randv(P * cin, 700 + s, 1), *w = randv(nw, 710 + s, 1.0f / sqrtf(27 * cin));
        float *dy = randv(P * cout, 720 + s, 1), *xa = zeros(P * ca), *xb = zeros(P * (cb + 1));
        for (size_t v = 0; v < P; v++) {
            memcpy(xa + v * ca, x + v * cin, sizeof(float) * ca);
            memcpy(xb + v * cb, x + v * cin + ca, sizeof(float) * cb);
        }
        float *ws = ws_alloc(nn_conv3d_ws_floats(1, D, D, D, cin, cout));
        float *y = zeros(P * cout), *yr = zeros(P * cout), *dx = zeros(P * cin),
              *dxr = zeros(P * cin), *dwr = zeros(nw), *da = zeros(P * ca), *db = zeros(P * cb + 1);
        nn_conv3d_forward_p(y, xa, ca, cb ? xb : NULL, cb, w, cout, 1, D, D, D, NN_FP32, NULL, ws);
        nn_ref_conv3d_forward(yr, x, w, cin, cout, 1, D, D, D);
        nn_conv3d_backward_p(split ? da : dx, split ? db : NULL, NULL, dy, xa, ca,
                             cb ? xb : NULL, cb, w, cout, 1, D, D, D, NN_FP32, NULL, ws);
        nn_ref_conv3d_backward(dxr, dwr, dy, x, w, cin, cout, 1, D, D, D);
        if (split)
            for (size_t v = 0; v < P; v++) {
                memcpy(dx + v * cin, da + v * ca, sizeof(float) * ca);
                memcpy(dx + v * cin + ca, db + v * cb, sizeof(float) * cb);
            }
        double m1, r1, m2, r2;
        x3_err(y, yr, P * cout, &m1, &r1);
        x3_err(dx, dxr, P * cin, &m2, &r2);
        const int a1 = nn_conv3d_algo(NN_PASS_FWD, 1, D, D, D, ca, cb, cout, 0, NN_FP32),
                  a2 = nn_conv3d_algo(NN_PASS_BWD_DATA, 1, D, D, D, ca, cb, cout, split, NN_FP32);
        CHECK(a1 == NN_ALGO_AMX_X3 && m1 <= 1e-5 && r1 <= 1e-5,
              "amx-x3 %d^3 %d+%d->%d forward: %s, max %.2e of the largest, norm %.2e", D, ca, cb,
              cout, nn_algo_name(a1), m1, r1);
        CHECK(a2 == NN_ALGO_AMX_X3 && m2 <= 1e-5 && r2 <= 1e-5,
              "amx-x3 %d^3 %d+%d->%d input gradient%s: %s, max %.2e of the largest, norm %.2e", D,
              ca, cb, cout, split ? " (two parts)" : "", nn_algo_name(a2), m2, r2);
        free(x), free(w), free(dy), free(xa), free(xb), free(ws), free(y), free(yr), free(dx),
            free(dxr), free(dwr), free(da), free(db);
    }
    if (was)
        setenv("SCAFFOLD_NN_ALGO", keep, 1);
    else
        unsetenv("SCAFFOLD_NN_ALGO");
    nn_settings_reload();
    nn_algo_reset();
}

/* Sets (v) or unsets (NULL) an environment variable and reloads the settings. */
static void set_env(const char *name, const char *v) {
    if (v)
        setenv(name, v, 1);
    else
        unsetenv(name);
    nn_settings_reload();
    nn_algo_reset();
}

/* fp32 Winograd's plane groups (SCAFFOLD_NN_WINO_PLANES 1 and 2: a pass over the tiles per one
 * or two of the transformed tile's four z planes, each adding its part of the outputs; of dU in
 * the weight gradient) against all four planes at once, forced, on a thread's own chunks and on
 * shared ones (SCAFFOLD_NN_WINO_OWN=0): 32^3 64 -> 64 (1024 tiles: the weight gradient on 37 own
 * chunks where all planes at once share them) and a fused concatenation 32 + 32 -> 48 at 16^3
 * with its input gradient in two parts (a partial column vector). The forward's and input
 * gradient's outputs add their groups, so their sums run in another order and differ in their
 * last bits (which shows that another path ran), within 1e-5 of the largest value (measured
 * 2.5-3.4e-6). A weight gradient whose chunks are the same either way (shared ones; 16^3 has
 * too few tiles for own ones) sums each point of dU in the same order: the same bits; the 32^3
 * one's own chunks differ in size, within 1e-4 (sums over 32768 voxels; measured 1.9-2.3e-5).
 * The naive-loop comparisons run with each group size forced in tests/nn/run.sh. */
static void test_wino_planes(void) {
    if (fx_algo_forced() || !nn_settings()->winograd || !nn_settings()->wino_own ||
        nn_settings()->wino_planes) {
        printf("SKIP Winograd plane groups: an algorithm, Winograd off, shared chunks or the "
               "planes forced by the environment\n");
        return;
    }
    const char *was = getenv("SCAFFOLD_NN_ALGO");
    char keep[64] = "";
    if (was)
        snprintf(keep, sizeof keep, "%s", was);
    set_env("SCAFFOLD_NN_ALGO", "winograd");
    /* D, ca, cb, cout, split, own chunks for the weight gradient's groups */
    static const int sh[][6] = {{32, 64, 0, 64, 0, 1}, {16, 32, 32, 48, 1, 0}};
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++) {
        const int D = sh[s][0], ca = sh[s][1], cb = sh[s][2], cout = sh[s][3], split = sh[s][4];
        const int cin = ca + cb;
        if (!nn_conv3d_winograd(1, D, D, D, cin, cout, NN_FP32)) { /* e.g. slabs of few planes */
            printf("SKIP Winograd plane groups at %d^3 %d+%d->%d: Winograd does not apply here\n",
                   D, ca, cb, cout);
            continue;
        }
        const size_t P = (size_t)D * D * D, nw = 27 * (size_t)cin * cout;
        float *xa = randv(P * ca, 800 + s, 1), *xb = randv(P * cb + 1, 810 + s, 1);
        float *w = randv(nw, 820 + s, 1.0f / sqrtf(27 * cin)), *dy = randv(P * cout, 830 + s, 1);
        float *ws = ws_alloc(nn_conv3d_ws_floats(1, D, D, D, cin, cout));
        for (int own = 1; own >= 0; own--) {
            set_env("SCAFFOLD_NN_WINO_OWN", own ? NULL : "0");
            float *out[3][4]; /* [planes 4, 1, 2][y, dx (first part), dx second part, dw] */
            static const char *const planes[3] = {"4", "1", "2"};
            for (int g = 0; g < 3; g++) {
                set_env("SCAFFOLD_NN_WINO_PLANES", planes[g]);
                float *y = zeros(P * cout), *da = zeros(P * ca), *db = zeros(P * cb + 1),
                      *dw = zeros(nw);
                nn_conv3d_forward_p(y, xa, ca, cb ? xb : NULL, cb, w, cout, 1, D, D, D, NN_FP32,
                                    NULL, ws);
                nn_conv3d_backward_p(da, split ? db : NULL, dw, dy, xa, ca, cb ? xb : NULL, cb, w,
                                     cout, 1, D, D, D, NN_FP32, NULL, ws);
                out[g][0] = y, out[g][1] = da, out[g][2] = db, out[g][3] = dw;
            }
            static const char *const what[4] = {"forward", "input gradient",
                                                "second input gradient", "weight gradient"};
            const size_t n[4] = {P * cout, P * ca, split ? P * cb : 0, nw};
            for (int g = 1; g < 3; g++)
                for (int k = 0; k < 4; k++) {
                    if (!n[k])
                        continue;
                    double mx, rms;
                    x3_err(out[g][k], out[0][k], n[k], &mx, &rms);
                    const int same = !memcmp(out[g][k], out[0][k], sizeof(float) * n[k]);
                    const int moved = k < 3 || (own && sh[s][5]);
                    CHECK(same != moved && mx <= (k < 3 ? 1e-5 : 1e-4),
                          "Winograd %s plane(s) per pass, %s chunks, %d^3 %d+%d->%d %s: %s (%s), "
                          "max %.2e of the largest, norm %.2e",
                          planes[g], own ? "own" : "shared", D, ca, cb, cout, what[k],
                          moved ? "another order of sums" : "the same order of sums",
                          same ? "bit-identical" : "differs", mx, rms);
                }
            for (int g = 0; g < 3; g++)
                for (int k = 0; k < 4; k++)
                    free(out[g][k]);
        }
        free(xa), free(xb), free(w), free(dy), free(ws);
    }
    set_env("SCAFFOLD_NN_WINO_OWN", NULL);
    set_env("SCAFFOLD_NN_WINO_PLANES", NULL);
    set_env("SCAFFOLD_NN_ALGO", was ? keep : NULL);
}

/* MaxPool3d's choices as PyTorch makes them, on 20 channels (a vector and a partial one): ties
 * keep the first maximum, NaN wins over numbers and the first NaN wins, -inf and a lone value;
 * the backward adds the gradient to that input only. */
static void test_maxpool_edges(void) {
    enum { C = 20 };
    float in[8 * C], out[C], din[8 * C] = {0}, dout[C];
    uint8_t idx[C];
    int want[C];
    for (int c = 0; c < C; c++) {
        for (int t = 0; t < 8; t++)
            in[t * C + c] = (float)((t * 7 + c) % 5); /* input t of the 2^3 window: voxel t */
        const int kind = c % 5;
        if (kind == 0) /* all equal: the first */
            for (int t = 0; t < 8; t++)
                in[t * C + c] = 1.5f;
        else if (kind == 1) /* a NaN among numbers */
            in[3 * C + c] = NAN;
        else if (kind == 2) /* two NaNs: the first */
            in[2 * C + c] = NAN, in[6 * C + c] = NAN;
        else if (kind == 3) /* -inf everywhere but one */
            for (int t = 0; t < 8; t++)
                in[t * C + c] = t == 5 ? -3.0f : -INFINITY;
        int k = 0;
        for (int t = 1; t < 8; t++) {
            const float v = in[t * C + c], m = in[k * C + c];
            if (v > m || (isnan(v) && !isnan(m)))
                k = t;
        }
        want[c] = kind == 0 ? 0 : kind == 1 ? 3 : kind == 2 ? 2 : kind == 3 ? 5 : k;
        dout[c] = (float)(c + 1);
    }
    nn_maxpool3d_forward(out, idx, in, 1, 2, 2, 2, C);
    nn_maxpool3d_backward(din, dout, idx, 1, 2, 2, 2, C);
    int bad = 0;
    for (int c = 0; c < C; c++) {
        const float w = in[want[c] * C + c];
        int off = idx[c] != want[c] || !(out[c] == w || (isnan(out[c]) && isnan(w)));
        for (int t = 0; t < 8; t++)
            off |= din[t * C + c] != (t == want[c] ? dout[c] : 0.0f);
        bad += off;
    }
    CHECK(!bad, "maxpool ties, NaN and -inf: %d of %d channels differ from PyTorch's choice", bad,
          C);
}

/* nn_maxpool3d_backward_rbf16 is the backward with each sum it makes rounded to bf16, bit for
 * bit: over a din of bf16 values (a skip gradient), the backward then a rounding pass over din;
 * the elements it does not add to keep their bits even when not bf16 values; NaN sums stay NaN.
 * Odd extents: the last plane, row and column belong to no window and are left alone. */
static void test_maxpool_backward_rbf16(void) {
    enum { N = 2, D = 5, H = 4, W = 7, C = 35 };
    const size_t ni = (size_t)N * D * H * W * C, no = (size_t)N * (D / 2) * (H / 2) * (W / 2) * C;
    float *in = malloc(ni * sizeof(float)), *skip = malloc(ni * sizeof(float)),
          *d1 = malloc(ni * sizeof(float)), *d2 = malloc(ni * sizeof(float)),
          *out = malloc(no * sizeof(float)), *g = malloc(no * sizeof(float));
    uint8_t *idx = malloc(no);
    rng r = rng_make(41, RNG_TEST, 0, 0);
    for (size_t i = 0; i < ni; i++) {
        in[i] = (float)rng_normal(&r);
        skip[i] = nn_bf16_round((float)rng_normal(&r));
    }
    for (size_t i = 0; i < no; i++)
        g[i] = nn_bf16_round((float)rng_normal(&r) * 0.01f);
    g[3] = NAN;
    nn_maxpool3d_forward(out, idx, in, N, D, H, W, C);
    memcpy(d1, skip, ni * sizeof(float));
    memcpy(d2, skip, ni * sizeof(float));
    nn_maxpool3d_backward(d1, g, idx, N, D, H, W, C);
    nn_round_bf16(d1, ni);
    nn_maxpool3d_backward_rbf16(d2, g, idx, N, D, H, W, C);
    size_t bad = 0, changed = 0;
    for (size_t i = 0; i < ni; i++) {
        bad += memcmp(&d1[i], &d2[i], sizeof(float)) != 0;
        changed += memcmp(&d2[i], &skip[i], sizeof(float)) != 0;
    }
    CHECK(!bad, "maxpool backward rbf16: %zu of %zu values differ from backward + rounding", bad,
          ni);
    CHECK(changed > no / 2, "maxpool backward rbf16 added to %zu of %zu values", changed, ni);
    /* din not bf16 values: only the sums are rounded */
    for (size_t i = 0; i < ni; i++)
        skip[i] = (float)rng_normal(&r);
    memcpy(d1, skip, ni * sizeof(float));
    memcpy(d2, skip, ni * sizeof(float));
    nn_maxpool3d_backward(d1, g, idx, N, D, H, W, C);
    nn_maxpool3d_backward_rbf16(d2, g, idx, N, D, H, W, C);
    bad = 0;
    for (size_t i = 0; i < ni; i++) {
        const int added = memcmp(&d1[i], &skip[i], sizeof(float)) != 0;
        const float want = added ? nn_bf16_round(d1[i]) : skip[i];
        bad += memcmp(&want, &d2[i], sizeof(float)) != 0 && !(isnan(want) && isnan(d2[i]));
    }
    CHECK(!bad, "maxpool backward rbf16 over non-bf16 din: %zu values differ", bad);
    free(in), free(skip), free(d1), free(d2), free(out), free(g), free(idx);
}

/* nn_groupnorm_forward_pool equals nn_groupnorm_forward then nn_maxpool3d_forward bit for bit
 * (y, statistics, pool and argmax), with and without the ReLU and bf16 rounding, on even and
 * odd extents (voxels in no pool window are normalized all the same). */
static void test_groupnorm_forward_pool(void) {
    static const int ext[][3] = {{4, 6, 8}, {5, 3, 7}, {3, 5, 2}, {1, 2, 2}};
    enum { N = 2, C = 24, G = 4 };
    for (int e = 0; e < 4; e++)
        for (int bits = 0; bits < 4; bits++) {
            const int D = ext[e][0], H = ext[e][1], W = ext[e][2];
            const long S = (long)D * H * W;
            const size_t n = (size_t)N * S * C,
                         np = (size_t)N * (D / 2) * (H / 2) * (W / 2) * C;
            float *x = malloc(n * sizeof(float)), *y1 = malloc(n * sizeof(float)),
                  *y2 = malloc(n * sizeof(float)), *p1 = malloc((np + 1) * sizeof(float)),
                  *p2 = malloc((np + 1) * sizeof(float)), g[C], b[C], st[4][N * G];
            uint8_t *i1 = malloc(np + 1), *i2 = malloc(np + 1);
            float *ws = malloc(nn_groupnorm_ws_floats(C) * sizeof(float));
            rng r = rng_make(43, RNG_TEST, (uint64_t)e, (uint64_t)bits);
            for (size_t i = 0; i < n; i++)
                x[i] = (float)rng_normal(&r) * 2.0f + 0.3f;
            for (int c = 0; c < C; c++)
                g[c] = 0.5f + (float)rng_uniform(&r), b[c] = (float)rng_normal(&r) * 0.1f;
            memset(y2, 0xff, n * sizeof(float));
            memset(p2, 0xff, np * sizeof(float));
            memset(i2, 0xff, np);
            nn_groupnorm_forward(y1, st[0], st[1], x, g, b, N, S, C, G, bits, ws);
            nn_maxpool3d_forward(p1, i1, y1, N, D, H, W, C);
            nn_groupnorm_forward_pool(y2, st[2], st[3], x, g, b, N, D, H, W, C, G, bits, ws, p2,
                                      i2);
            CHECK(!memcmp(y1, y2, n * sizeof(float)) && !memcmp(st[0], st[2], sizeof st[0]) &&
                      !memcmp(st[1], st[3], sizeof st[1]) &&
                      !memcmp(p1, p2, np * sizeof(float)) && !memcmp(i1, i2, np),
                  "groupnorm_forward_pool %dx%dx%d bits %d differs from the two ops", D, H, W,
                  bits);
            free(x), free(y1), free(y2), free(p1), free(p2), free(i1), free(i2), free(ws);
        }
}

int main(int argc, char **argv) {
    if (fx_isa_setup(argc, argv))
        return 0;
    const char *dir = argc > 1 ? argv[1] : "tests/nn/fixtures";
    char path[512];
    snprintf(path, sizeof path, "%s/layers.safetensors", dir);
    nn_st_file st;
    if (nn_st_open(&st, path)) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    test_conv3d_fixture(&st, "conv3d");
    test_conv3d_fixture(&st, "conv3d_wide");
    test_maxpool_backward_rbf16();
    test_groupnorm_forward_pool();
    test_convt_fixture(&st);
    test_conv1_fixture(&st);
    test_conv1_relu(&st, NN_FP32);
    test_conv1_relu(&st, NN_BF16);
    test_gn_backward_x(NN_FP32);
    test_gn_backward_x(NN_BF16);
    test_gn_round();
    test_pack_taps();
    test_gn_stats();
    test_gn_fixture(&st, "groupnorm", 4, 0);
    test_gn_fixture(&st, "gnrelu", 2, 1);
    test_small_fixtures(&st);
    test_loss_fixture(&st);
    nn_st_close(&st);
    snprintf(path, sizeof path, "%s/bf16.safetensors", dir);
    if (nn_st_open(&st, path)) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    test_bf16_fixtures(&st);
    nn_st_close(&st);
    test_maxpool_edges();
    test_finite_differences();
    test_conv_vs_naive();
    test_conv_x3();
    test_wino_planes();
    test_conv_bf16_vs_ideal();
    test_conv_bf16_first_big();
    test_convt_bf16_vs_ideal();
    test_convt_vs_naive();
    return test_report();
}
