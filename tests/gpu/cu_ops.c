/* cu_ops: every op of the CUDA backend against its CPU twin (src/nn layers, loss, optim), on a
 * GPU. Usage:
 *   cu_ops --probe        prints the visible GPUs and exits 0, or why there are none and exits 3
 *   cu_ops fp32|bf16 [--quick]   the op tests in that precision (run under mpirun -n R for the
 *                         NCCL test across R ranks, one GPU each); --quick leaves out the larger
 *                         shapes (for compute-sanitizer runs)
 *
 * Tolerance rule (tests/test.h check_close: |got - want| <= atol + rtol |want|), with atol =
 * rtol * max|want| so that elements near zero after cancellation are judged against the
 * tensor's scale:
 *   fp32 (TF32 off): rtol 1e-4 against the CPU on the same inputs.
 *   bf16: the CPU runs in fp32 on the bf16-rounded inputs and weights and its output is rounded
 *         to bf16 as autocast's is; the GPU accumulates in fp32 in another order, so one output
 *         can round to the neighbouring bf16 value: rtol 2^-7 (two bf16 steps).
 * Integer results (argmax, MaxPool indices, hard-Dice counts) must be equal; ops that must repeat
 * bit for bit (the deterministic algorithms and reductions) are run twice and compared exactly. */
#include "core/err.h"
#include "nn/cuda/cu.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "test.h"

#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static cu_ctx *ctx;
static int bf16;
static float RTOL;

/* ---- helpers ------------------------------------------------------------------------------------ */

#define MAXD 64
static void *dptrs[MAXD];
static int ndptr;

/* Device copy of n host floats (or zeroed when h is NULL); freed by dfree_all(). */
static void *dnew(const void *h, size_t bytes) {
    void *d = NULL;
    if (ndptr >= MAXD || cu_alloc(&d, bytes) != 0) {
        fprintf(stderr, "FAIL device allocation of %zu bytes: %s\n", bytes, err_msg());
        exit(1);
    }
    dptrs[ndptr++] = d;
    if (h && cu_upload(ctx, d, h, bytes) != 0) {
        fprintf(stderr, "FAIL upload: %s\n", err_msg());
        exit(1);
    }
    if (!h && (cu_zero(ctx, d, bytes) != 0 || cu_sync(ctx) != 0)) {
        fprintf(stderr, "FAIL zero: %s\n", err_msg());
        exit(1);
    }
    return d;
}
static float *dfl(const float *h, size_t n) {
    return dnew(h, n * sizeof(float));
}
static void dfree_all(void) {
    for (int i = 0; i < ndptr; i++)
        cu_free(dptrs[i]);
    ndptr = 0;
}
/* Host copy of a device array (malloc'ed; the caller frees). */
static void *hget(const void *d, size_t bytes) {
    void *h = malloc(bytes ? bytes : 1);
    if (!h || cu_download(ctx, h, d, bytes) != 0) {
        fprintf(stderr, "FAIL download: %s\n", err_msg());
        exit(1);
    }
    return h;
}
static float *hfl(const float *d, size_t n) {
    return hget(d, n * sizeof(float));
}

static uint64_t rng_state = 88172645463325252ULL;
static float urand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static float *hrand(size_t n, float scale) {
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        h[i] = scale * urand();
    return h;
}

/* Round to the nearest bf16 value (ties to even), as __float2bfloat16_rn. */
static float bf16r(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) {
        u += 0x7fffu + ((u >> 16) & 1u);
        u &= 0xffff0000u;
    }
    memcpy(&f, &u, 4);
    return f;
}
/* In a bf16 run: the inputs the GPU will actually see. */
static void as_input(float *h, size_t n) {
    if (bf16)
        for (size_t i = 0; i < n; i++)
            h[i] = bf16r(h[i]);
}
/* In a bf16 run: the CPU's output rounded as autocast's bf16 output is. */
static void as_output(float *h, size_t n) {
    as_input(h, n);
}

/* The reference bias gradient: db0 plus the voxel sum, the sum rounded to bf16 in a bf16 run
 * (one rounding of a sum the GPU forms in another order: RTOL allows the neighbouring value). */
static void bias_grad_ref(float *db, const float *db0, int cout) {
    for (int c = 0; c < cout; c++)
        db[c] = db0[c] + (bf16 ? bf16r(db[c]) : db[c]);
}

static float maxabs(const float *a, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabsf(a[i]) > m ? fabsf(a[i]) : m;
    return m;
}
/* The file's tolerance rule (header comment). */
static void close_to(const char *name, const float *got_dev, const float *want, size_t n,
                     float rtol) {
    float *got = hfl(got_dev, n);
    check_close(name, got, want, n, rtol * maxabs(want, n), rtol);
    free(got);
}
static void same_bits(const char *name, const void *a, const void *b, size_t bytes) {
    CHECK(memcmp(a, b, bytes) == 0, "%s: two runs differ", name);
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        if ((call) != 0) {                                                                         \
            test_failed++;                                                                         \
            fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, err_msg());         \
            dfree_all();                                                                           \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* Packed weights of a convolution on the device. */
static void *packed(const float *w_dev, int ca, int cb, int cout, int k) {
    void *wp = dnew(NULL, cu_packed_bytes(ca + cb, cout, k, bf16));
    int rc = k == 3 ? cu_pack_conv3d(ctx, wp, w_dev, cout, ca, cb)
                    : cu_pack_convt3d(ctx, wp, w_dev, ca, cout);
    if (rc) {
        fprintf(stderr, "FAIL pack: %s\n", err_msg());
        exit(1);
    }
    return wp;
}

/* ---- Conv3d k3 p1 with the fused skip concatenation ---------------------------------------- */
static void test_conv3d(int N, int D, int H, int W, int ca, int cb, int cout) {
    char tag[96];
    snprintf(tag, sizeof tag, "conv3d N%d %dx%dx%d %d+%d->%d", N, D, H, W, ca, cb, cout);
    const int cin = ca + cb;
    const size_t P = (size_t)N * D * H * W, nw = (size_t)cout * cin * 27;
    float *a = hrand(P * ca, 1), *b = cb ? hrand(P * cb, 1) : NULL, *w = hrand(nw, 0.1f);
    float *dout = hrand(P * cout, 1), *dw0 = hrand(nw, 0.01f);
    as_input(a, P * ca);
    if (b)
        as_input(b, P * cb);
    as_input(w, nw);
    as_input(dout, P * cout);
    float *ws = malloc(sizeof(float) * nn_conv3d_ws_floats(N, D, H, W, cin, cout));
    float *out = malloc(sizeof(float) * P * cout), *din = malloc(sizeof(float) * P * cin);
    float *dw = malloc(sizeof(float) * nw);
    nn_conv3d_forward(out, a, ca, b, cb, w, cout, N, D, H, W, ws);
    as_output(out, P * cout);
    memset(dw, 0, sizeof(float) * nw);
    nn_conv3d_backward(din, dw, dout, a, ca, b, cb, w, cout, N, D, H, W, ws);
    as_output(din, P * cin);
    as_output(dw, nw);
    for (size_t i = 0; i < nw; i++)
        dw[i] += dw0[i]; /* weight gradients accumulate */

    /* fp32 with a skip: both ways to cuDNN (cu_conv3d_parts), split first (the default) */
    for (int mode = 1; mode >= 0; mode--) {
        if (mode == 0 && (bf16 || !cb))
            break;
        cu_ctx_set_skip_split(ctx, mode);
        char tag2[128];
        snprintf(tag2, sizeof tag2, "%s%s", tag,
                 bf16 || !cb ? "" : mode ? " (split)" : " (gather)");
        float *da = dfl(a, P * ca), *db = b ? dfl(b, P * cb) : NULL, *dwt = dfl(w, nw);
        float *dd = dfl(dout, P * cout), *ddw = dfl(dw0, nw);
        float *gout = dfl(NULL, P * cout), *gdin = dfl(NULL, P * cin);
        void *wp = packed(dwt, ca, cb, cout, 3);
        TRY(cu_conv3d_forward(ctx, gout, da, ca, db, cb, wp, cout, N, D, H, W));
        TRY(cu_conv3d_backward(ctx, gdin, NULL, ddw, dd, da, ca, db, cb, wp, cout, N, D, H, W));
        char name[160];
        snprintf(name, sizeof name, "%s out", tag2);
        close_to(name, gout, out, P * cout, RTOL);
        snprintf(name, sizeof name, "%s din", tag2);
        close_to(name, gdin, din, P * cin, RTOL);
        snprintf(name, sizeof name, "%s dw (accumulated)", tag2);
        close_to(name, ddw, dw, nw, RTOL);
        /* deterministic: a second backward from the same state gives the same bits */
        float *h1 = hfl(gdin, P * cin), *w1 = hfl(ddw, nw);
        TRY(cu_upload(ctx, ddw, dw0, nw * sizeof(float)));
        TRY(cu_conv3d_backward(ctx, gdin, NULL, ddw, dd, da, ca, db, cb, wp, cout, N, D, H, W));
        float *h2 = hfl(gdin, P * cin), *w2 = hfl(ddw, nw);
        snprintf(name, sizeof name, "%s backward repeats", tag2);
        same_bits(name, h1, h2, P * cin * sizeof(float));
        same_bits(name, w1, w2, nw * sizeof(float));
        /* din may be NULL: only dw */
        TRY(cu_upload(ctx, ddw, dw0, nw * sizeof(float)));
        TRY(cu_conv3d_backward(ctx, NULL, NULL, ddw, dd, da, ca, db, cb, wp, cout, N, D, H, W));
        snprintf(name, sizeof name, "%s dw without din", tag2);
        close_to(name, ddw, dw, nw, RTOL);
        if (cb) {
            /* the two inputs' gradients written apart (the U-Net's up blocks) */
            float *ga = dfl(NULL, P * ca), *gb = dfl(NULL, P * cb);
            float *wa = malloc(sizeof(float) * P * ca), *wb = malloc(sizeof(float) * P * cb);
            nn_concat_backward(wa, wb, din, ca, cb, (long)P);
            TRY(cu_conv3d_backward(ctx, ga, gb, ddw, dd, da, ca, db, cb, wp, cout, N, D, H, W));
            snprintf(name, sizeof name, "%s din split: first input", tag2);
            close_to(name, ga, wa, P * ca, RTOL);
            snprintf(name, sizeof name, "%s din split: second input", tag2);
            close_to(name, gb, wb, P * cb, RTOL);
            free(wa), free(wb);
        }
        free(h1), free(h2), free(w1), free(w2);
        dfree_all();
    }
    cu_ctx_set_skip_split(ctx, 1);
    free(a), free(b), free(w), free(dout), free(dw0), free(ws), free(out), free(din), free(dw);
    dfree_all();
}

/* ---- ConvTranspose3d k2 s2 + bias, dout strided (the upsample half of a concat gradient) ---- */
static void test_convt3d(int N, int D, int H, int W, int cin, int cout, int skip) {
    char tag[96], name[160];
    snprintf(tag, sizeof tag, "convt3d N%d %dx%dx%d %d->%d ldo %d", N, D, H, W, cin, cout,
             skip + cout);
    const size_t P = (size_t)N * D * H * W, Po = 8 * P, nw = (size_t)cin * cout * 8;
    const long ldo = skip + cout;
    float *in = hrand(P * cin, 1), *w = hrand(nw, 0.2f), *bias = hrand(cout, 0.5f);
    float *dcat = hrand(Po * ldo, 1), *dw0 = hrand(nw, 0.01f), *db0 = hrand(cout, 0.01f);
    as_input(in, P * cin);
    as_input(w, nw);
    float *dcat_r = malloc(sizeof(float) * Po * ldo); /* dout as the GPU's convolutions see it */
    memcpy(dcat_r, dcat, sizeof(float) * Po * ldo);
    as_input(dcat_r, Po * ldo);
    float *ws = malloc(sizeof(float) * nn_convt3d_ws_floats(N, D, H, W, cin, cout));
    float *out = malloc(sizeof(float) * Po * cout), *din = malloc(sizeof(float) * P * cin);
    float *dw = calloc(nw, sizeof(float)), *db = malloc(sizeof(float) * cout);
    float *dwx = calloc(nw, sizeof(float));
    nn_convt3d_forward(out, in, w, bias, cin, cout, N, D, H, W, ws);
    as_output(out, Po * cout);
    nn_convt3d_backward(din, dw, NULL, dcat_r + skip, ldo, in, w, cin, cout, N, D, H, W, ws);
    as_output(din, P * cin);
    as_output(dw, nw);
    /* the bias gradient from the unrounded dout (the GPU sums it in fp64), the sum rounded to
     * bf16 in a bf16 run as the engine's bf16 path rounds it (src/nn/conv_wgrad.c) */
    memset(db, 0, sizeof(float) * cout);
    nn_convt3d_backward(NULL, dwx, db, dcat + skip, ldo, in, w, cin, cout, N, D, H, W, ws);
    bias_grad_ref(db, db0, cout);
    for (size_t i = 0; i < nw; i++)
        dw[i] += dw0[i];

    float *gin = dfl(in, P * cin), *gw = dfl(w, nw), *gb = dfl(bias, cout);
    float *gcat = dfl(dcat, Po * ldo), *gdw = dfl(dw0, nw), *gdb = dfl(db0, cout);
    float *gout = dfl(NULL, Po * cout), *gdin = dfl(NULL, P * cin);
    void *wp = packed(gw, cin, 0, cout, 2);
    TRY(cu_convt3d_forward(ctx, gout, gin, wp, gb, cin, cout, N, D, H, W));
    TRY(cu_convt3d_backward(ctx, gdin, gdw, gdb, gcat + skip, ldo, gin, wp, cin, cout, N, D, H,
                            W));
    snprintf(name, sizeof name, "%s out", tag);
    close_to(name, gout, out, Po * cout, RTOL);
    snprintf(name, sizeof name, "%s din", tag);
    close_to(name, gdin, din, P * cin, RTOL);
    snprintf(name, sizeof name, "%s dw", tag);
    close_to(name, gdw, dw, nw, RTOL);
    snprintf(name, sizeof name, "%s db", tag);
    close_to(name, gdb, db, cout, RTOL);
    free(in), free(w), free(bias), free(dcat), free(dcat_r), free(dw0), free(db0), free(ws);
    free(out), free(din), free(dw), free(db), free(dwx);
    dfree_all();
}

/* ---- the 1x1 output convolution (cuBLAS) ----------------------------------------------------- */
static void test_conv1(long P, int cin, int cout) {
    char name[96];
    const size_t nw = (size_t)cin * cout;
    float *in = hrand(P * cin, 1), *w = hrand(nw, 0.3f), *b = hrand(cout, 0.5f);
    float *dout = hrand(P * cout, 1), *dw0 = hrand(nw, 0.01f), *db0 = hrand(cout, 0.01f);
    as_input(in, P * cin);
    as_input(w, nw);
    float *dout_r = malloc(sizeof(float) * P * cout);
    memcpy(dout_r, dout, sizeof(float) * P * cout);
    as_input(dout_r, P * cout);
    float *ws = malloc(sizeof(float) * nn_conv1_ws_floats(P, cin, cout));
    float *out = malloc(sizeof(float) * P * cout), *din = malloc(sizeof(float) * P * cin);
    float *dw = calloc(nw, sizeof(float)), *db = malloc(sizeof(float) * cout);
    float *dbx = calloc(cout, sizeof(float)), *dwx = calloc(nw, sizeof(float));
    nn_conv1_forward(out, in, w, b, cin, cout, P, ws);
    as_output(out, P * cout);
    nn_conv1_backward(din, dw, dbx, dout_r, in, w, cin, cout, P, ws);
    as_output(din, P * cin);
    as_output(dw, nw);
    for (size_t i = 0; i < nw; i++)
        dw[i] += dw0[i];
    /* the bias gradient from the unrounded dout, rounded as the engine's bf16 path rounds it */
    memset(db, 0, sizeof(float) * cout);
    nn_conv1_backward(NULL, dwx, db, dout, in, w, cin, cout, P, ws);
    bias_grad_ref(db, db0, cout);

    float *gin = dfl(in, P * cin), *gw = dfl(w, nw), *gb = dfl(b, cout), *gd = dfl(dout, P * cout);
    float *gdw = dfl(dw0, nw), *gdb = dfl(db0, cout);
    float *gout = dfl(NULL, P * cout), *gdin = dfl(NULL, P * cin);
    TRY(cu_conv1_forward(ctx, gout, gin, gw, gb, cin, cout, P));
    TRY(cu_conv1_backward(ctx, gdin, gdw, gdb, gd, gin, gw, cin, cout, P));
    snprintf(name, sizeof name, "conv1 %ld x %d->%d out", P, cin, cout);
    close_to(name, gout, out, P * cout, RTOL);
    snprintf(name, sizeof name, "conv1 %ld x %d->%d din", P, cin, cout);
    close_to(name, gdin, din, P * cin, RTOL);
    snprintf(name, sizeof name, "conv1 %ld x %d->%d dw", P, cin, cout);
    close_to(name, gdw, dw, nw, RTOL);
    snprintf(name, sizeof name, "conv1 %ld x %d->%d db", P, cin, cout);
    close_to(name, gdb, db, cout, RTOL);
    free(in), free(w), free(b), free(dout), free(dout_r), free(dw0), free(db0), free(ws);
    free(out), free(din), free(dw), free(db), free(dbx), free(dwx);
    dfree_all();
}

/* ---- GroupNorm (+ ReLU): forward, apply, backward; fp32 in every precision ------------------ */
static void test_groupnorm(int N, long S, int C, int G, int relu) {
    char tag[96], name[160];
    snprintf(tag, sizeof tag, "groupnorm N%d S%ld C%d G%d relu %d", N, S, C, G, relu);
    const size_t n = (size_t)N * S * C;
    float *x = hrand(n, 2), *gamma = hrand(C, 1), *beta = hrand(C, 0.5f), *dy = hrand(n, 1);
    for (size_t i = 0; i < n; i++)
        x[i] += 3.0f; /* a mean far from 0: the two-pass variance matters */
    float *dg0 = hrand(C, 0.1f), *db0 = hrand(C, 0.1f);
    float *ws = malloc(sizeof(float) * nn_groupnorm_ws_floats(C));
    float *y = malloc(sizeof(float) * n), *dx = malloc(sizeof(float) * n);
    float *mean = malloc(sizeof(float) * N * G), *rstd = malloc(sizeof(float) * N * G);
    float *dg = malloc(sizeof(float) * C), *db = malloc(sizeof(float) * C);
    memcpy(dg, dg0, sizeof(float) * C);
    memcpy(db, db0, sizeof(float) * C);
    nn_groupnorm_forward(y, mean, rstd, x, gamma, beta, N, S, C, G, relu, ws);
    nn_groupnorm_backward(dx, dg, db, dy, x, y, mean, rstd, gamma, N, S, C, G, relu, ws);

    float *gx = dfl(x, n), *gg = dfl(gamma, C), *gbeta = dfl(beta, C), *gdy = dfl(dy, n);
    float *gy = dfl(NULL, n), *gdx = dfl(NULL, n), *gm = dfl(NULL, (size_t)N * G);
    float *gr = dfl(NULL, (size_t)N * G), *gdg = dfl(dg0, C), *gdb = dfl(db0, C);
    TRY(cu_groupnorm_forward(ctx, gy, gm, gr, gx, gg, gbeta, N, S, C, G, relu));
    snprintf(name, sizeof name, "%s mean", tag);
    close_to(name, gm, mean, (size_t)N * G, 1e-5f);
    snprintf(name, sizeof name, "%s rstd", tag);
    close_to(name, gr, rstd, (size_t)N * G, 1e-5f);
    snprintf(name, sizeof name, "%s y", tag);
    close_to(name, gy, y, n, 1e-4f);
    float *y1 = hfl(gy, n);
    TRY(cu_groupnorm_apply(ctx, gy, gx, gm, gr, gg, gbeta, N, S, C, G, relu));
    float *y2 = hfl(gy, n);
    snprintf(name, sizeof name, "%s apply = forward", tag);
    same_bits(name, y1, y2, n * sizeof(float));
    TRY(cu_groupnorm_backward(ctx, gdx, gdg, gdb, gdy, gx, gy, gm, gr, gg, N, S, C, G, relu));
    snprintf(name, sizeof name, "%s dx", tag);
    close_to(name, gdx, dx, n, 1e-4f);
    snprintf(name, sizeof name, "%s dgamma (accumulated)", tag);
    close_to(name, gdg, dg, C, 1e-4f);
    snprintf(name, sizeof name, "%s dbeta (accumulated)", tag);
    close_to(name, gdb, db, C, 1e-4f);
    /* in place (dx = dy), as the U-Net calls it */
    TRY(cu_groupnorm_backward(ctx, gdy, gdg, gdb, gdy, gx, gy, gm, gr, gg, N, S, C, G, relu));
    snprintf(name, sizeof name, "%s dx in place", tag);
    close_to(name, gdy, dx, n, 1e-4f);
    free(y1), free(y2), free(x), free(gamma), free(beta), free(dy), free(dg0), free(db0);
    free(ws), free(y), free(dx), free(mean), free(rstd), free(dg), free(db);
    dfree_all();
}

/* ---- ReLU, MaxPool3d(2) (ties and NaN), concatenation, layout ------------------------------- */
static void test_elementwise(void) {
    const int N = 2, D = 8, H = 6, W = 4, C = 5;
    const size_t n = (size_t)N * D * H * W * C, no = n / 8;
    float *x = hrand(n, 1), *dy = hrand(n, 1);
    for (size_t i = 0; i < n; i++)
        x[i] = roundf(x[i] * 3) / 3; /* few levels: ties in the pooling windows */
    x[7] = NAN;                       /* NaN wins its window */
    float *y = malloc(sizeof(float) * n), *dx = malloc(sizeof(float) * n);
    nn_relu_forward(y, x, n);
    nn_relu_backward(dx, dy, y, n);
    float *gx = dfl(x, n), *gdy = dfl(dy, n), *gy = dfl(NULL, n), *gdx = dfl(NULL, n);
    TRY(cu_relu_forward(ctx, gy, gx, n));
    TRY(cu_relu_backward(ctx, gdx, gdy, gy, n));
    float *hy = hfl(gy, n), *hdx = hfl(gdx, n);
    same_bits("relu forward", hy, y, n * sizeof(float));
    same_bits("relu backward", hdx, dx, n * sizeof(float));
    free(hy), free(hdx);

    /* bf16 storage of bf16 values (the h16 plan of a bf16 model): the CPU's bits both ways */
    float *xr = malloc(sizeof(float) * n), *xw = malloc(sizeof(float) * n);
    uint16_t *x16 = malloc(sizeof(uint16_t) * n);
    for (size_t i = 0; i < n; i++)
        xr[i] = bf16r(x[i]);
    nn_bf16_narrow(x16, xr, n);
    nn_bf16_widen(xw, x16, n);
    float *gxr = dfl(xr, n), *gxw = dfl(NULL, n);
    uint16_t *gx16 = dnew(NULL, sizeof(uint16_t) * n);
    TRY(cu_bf16_narrow(ctx, gx16, gxr, n));
    TRY(cu_bf16_widen(ctx, gxw, gx16, n));
    uint16_t *hx16 = hget(gx16, sizeof(uint16_t) * n);
    float *hxw = hfl(gxw, n);
    same_bits("bf16 narrow", hx16, x16, n * sizeof(uint16_t));
    same_bits("bf16 widen (round trip of bf16 values)", hxw, xw, n * sizeof(float));
    same_bits("bf16 round trip is exact", hxw, xr, n * sizeof(float));
    free(xr), free(xw), free(x16), free(hx16), free(hxw);

    float *po = malloc(sizeof(float) * no), *pdout = hrand(no, 1);
    float *pdin = hrand(n, 1), *pdin0 = malloc(sizeof(float) * n);
    memcpy(pdin0, pdin, sizeof(float) * n);
    uint8_t *pidx = malloc(no);
    nn_maxpool3d_forward(po, pidx, x, N, D, H, W, C);
    nn_maxpool3d_backward(pdin, pdout, pidx, N, D, H, W, C);
    float *gpo = dfl(NULL, no), *gpd = dfl(pdout, no), *gpdin = dfl(pdin0, n);
    uint8_t *gidx = dnew(NULL, no);
    TRY(cu_maxpool3d_forward(ctx, gpo, gidx, gx, N, D, H, W, C));
    TRY(cu_maxpool3d_backward(ctx, gpdin, gpd, gidx, N, D, H, W, C));
    float *hpo = hfl(gpo, no), *hpdin = hfl(gpdin, n);
    uint8_t *hidx = hget(gidx, no);
    same_bits("maxpool out (NaN and ties)", hpo, po, no * sizeof(float));
    same_bits("maxpool argmax (first maximum)", hidx, pidx, no);
    same_bits("maxpool backward (accumulates)", hpdin, pdin, n * sizeof(float));
    CHECK(cu_maxpool3d_forward(ctx, gpo, gidx, gx, N, D, H, 3, C) == ERR_RANGE,
          "odd extent refused");
    free(hpo), free(hpdin), free(hidx);

    const long P = 300;
    const int ca = 7, cb = 3;
    float *a = hrand(P * ca, 1), *b = hrand(P * cb, 1), *cat = malloc(sizeof(float) * P * 10);
    float *sa = malloc(sizeof(float) * P * ca), *sb = malloc(sizeof(float) * P * cb);
    nn_concat_forward(cat, a, ca, b, cb, P);
    nn_concat_backward(sa, sb, cat, ca, cb, P);
    float *ga = dfl(a, P * ca), *gb = dfl(b, P * cb), *gc = dfl(NULL, P * 10);
    float *gsa = dfl(NULL, P * ca), *gsb = dfl(NULL, P * cb);
    TRY(cu_concat_forward(ctx, gc, ga, ca, gb, cb, P));
    TRY(cu_concat_backward(ctx, gsa, gsb, gc, ca, cb, P));
    float *hc = hfl(gc, P * 10), *hsa = hfl(gsa, P * ca), *hsb = hfl(gsb, P * cb);
    same_bits("concat forward", hc, cat, P * 10 * sizeof(float));
    same_bits("concat backward (skip part)", hsa, a, P * ca * sizeof(float));
    same_bits("concat backward (upsample part)", hsb, b, P * cb * sizeof(float));
    free(hc), free(hsa), free(hsb);

    const int LC = 3;
    const long LS = 1000;
    float *v = hrand((size_t)N * LC * LS, 1), *vl = malloc(sizeof(float) * N * LC * LS);
    nn_to_channels_last(vl, v, N, LC, LS);
    float *gv = dfl(v, (size_t)N * LC * LS), *gvl = dfl(NULL, (size_t)N * LC * LS);
    float *gvf = dfl(NULL, (size_t)N * LC * LS);
    TRY(cu_to_channels_last(ctx, gvl, gv, N, LC, LS));
    TRY(cu_to_channels_first(ctx, gvf, gvl, N, LC, LS));
    float *hvl = hfl(gvl, (size_t)N * LC * LS), *hvf = hfl(gvf, (size_t)N * LC * LS);
    same_bits("to channels-last", hvl, vl, (size_t)N * LC * LS * sizeof(float));
    same_bits("to channels-first (round trip)", hvf, v, (size_t)N * LC * LS * sizeof(float));
    free(hvl), free(hvf), free(v), free(vl);
    free(x), free(dy), free(y), free(dx), free(po), free(pdout), free(pdin), free(pdin0);
    free(pidx), free(a), free(b), free(cat), free(sa), free(sb);
    dfree_all();
}

/* ---- loss, hard Dice, argmax ------------------------------------------------------------------ */
static void test_loss(int N, long S, int K) {
    char tag[64], name[128];
    snprintf(tag, sizeof tag, "loss N%d S%ld K%d", N, S, K);
    const size_t P = (size_t)N * S;
    float *z = hrand(P * K, 4), *cw = malloc(sizeof(float) * K);
    uint16_t *lab = malloc(sizeof(uint16_t) * P);
    uint64_t cnt[256] = {0};
    for (size_t v = 0; v < P; v++) {
        /* class K-1 never appears: the degenerate Dice branch is exercised too */
        lab[v] = (uint16_t)((v * 7 + v / 13) % (K > 1 ? K - 1 : 1));
        z[v * K + lab[v]] += 1.5f; /* a partly trained model */
    }
    nn_label_counts(cnt, lab, P, K);
    nn_ce_class_weights(cw, cnt, K);
    float *ws = malloc(sizeof(float) * nn_loss_ws_floats(N, K));
    float *dl = malloc(sizeof(float) * P * K);
    double loss, ce, dice, gl, gce, gdice, el, ece, edice;
    CHECK(nn_loss(dl, z, lab, cw, N, S, K, &loss, &ce, &dice, ws) == 0, "CPU loss");
    float *gz = dfl(z, P * K), *gcw = dfl(cw, K), *gdl = dfl(NULL, P * K);
    uint16_t *glab = dnew(lab, sizeof(uint16_t) * P);
    TRY(cu_loss(ctx, gdl, gz, glab, gcw, N, S, K, &gl, &gce, &gdice));
    CHECK(fabs(gl - loss) <= 1e-6 * fabs(loss) && fabs(gce - ce) <= 1e-6 * fabs(ce) &&
              fabs(gdice - dice) <= 1e-6,
          "%s: GPU %.9g %.9g %.9g vs CPU %.9g %.9g %.9g", tag, gl, gce, gdice, loss, ce, dice);
    snprintf(name, sizeof name, "%s dlogits", tag);
    close_to(name, gdl, dl, P * K, 1e-4f);
    /* evaluation: no gradient, same values */
    TRY(cu_loss(ctx, NULL, gz, glab, gcw, N, S, K, &el, &ece, &edice));
    CHECK(el == gl && ece == gce && edice == gdice, "%s: without dlogits, same values", tag);
    float *hdice = malloc(sizeof(float) * N), *gd = malloc(sizeof(float) * N);
    CHECK(nn_hard_dice(hdice, z, lab, N, S, K) == 0, "CPU hard dice");
    TRY(cu_hard_dice(ctx, gd, gz, glab, N, S, K));
    snprintf(name, sizeof name, "%s hard dice", tag);
    same_bits(name, gd, hdice, sizeof(float) * N);
    uint16_t *am = malloc(sizeof(uint16_t) * P);
    nn_argmax(am, z, (long)P, K);
    uint16_t *gam = dnew(NULL, sizeof(uint16_t) * P);
    TRY(cu_argmax(ctx, gam, gz, (long)P, K));
    uint16_t *ham = hget(gam, sizeof(uint16_t) * P);
    same_bits("argmax", ham, am, sizeof(uint16_t) * P);
    /* a label that is no class: the CPU's error */
    lab[P / 2] = (uint16_t)K;
    TRY(cu_upload(ctx, glab, lab, sizeof(uint16_t) * P));
    CHECK(cu_loss(ctx, gdl, gz, glab, gcw, N, S, K, &gl, NULL, NULL) == ERR_RANGE &&
              strstr(err_msg(), "is not a class index"),
          "%s: bad label: %s", tag, err_msg());
    CHECK(cu_hard_dice(ctx, gd, gz, glab, N, S, K) == ERR_RANGE, "%s: hard dice bad label", tag);
    free(ham), free(am), free(hdice), free(gd), free(z), free(cw), free(lab), free(ws), free(dl);
    dfree_all();
}

/* ---- optimizers: 10 Adam steps, SGD, RMSprop, clipping --------------------------------------- */
static void test_optim(nn_optim_kind kind, int steps) {
    char name[96];
    const size_t n = 100003;
    float *p = hrand(n, 1);
    nn_optim o, go;
    if (nn_optim_init(&o, kind, n) || nn_optim_init(&go, kind, n)) {
        CHECK(0, "optimizer init");
        return;
    }
    float *dp = dfl(p, n), *dg = dfl(NULL, n);
    float *dst = dfl(NULL, nn_optim_state_floats(kind, n) ? nn_optim_state_floats(kind, n) : 1);
    for (int s = 0; s < steps; s++) {
        float *g = hrand(n, 0.01f * (s + 1));
        const double lr = 1e-3 * (1 + s % 3);
        nn_optim_step(&o, p, g, lr);
        TRY(cu_upload(ctx, dg, g, n * sizeof(float)));
        TRY(cu_optim_step(ctx, &go, dp, dg, dst, n, lr));
        free(g);
    }
    CHECK(go.step == o.step && o.step == steps, "step counters");
    snprintf(name, sizeof name, "%s x%d params", nn_optim_name(kind), steps);
    close_to(name, dp, p, n, 1e-4f);
    if (o.state) {
        snprintf(name, sizeof name, "%s x%d state", nn_optim_name(kind), steps);
        close_to(name, dst, o.state, nn_optim_state_floats(kind, n), 1e-4f);
    }
    nn_optim_free(&o);
    nn_optim_free(&go);
    free(p);
    dfree_all();
}

static void test_clip(void) {
    const size_t n = 54321;
    for (int big = 0; big <= 1; big++) {
        float *g = hrand(n, big ? 1.0f : 1e-4f);
        float *gc = malloc(sizeof(float) * n);
        memcpy(gc, g, sizeof(float) * n);
        const double norm = nn_clip_grad_norm(gc, n, 1.0);
        float *dg = dfl(g, n);
        double gnorm = -1;
        TRY(cu_clip_grad_norm(ctx, dg, n, 1.0, &gnorm));
        CHECK(fabs(gnorm - norm) <= 1e-12 * norm, "clip norm %.15g vs %.15g", gnorm, norm);
        if (big) {
            close_to("clip: clipped gradients", dg, gc, n, 1e-6f);
        } else {
            float *h = hfl(dg, n);
            same_bits("clip: no change below max_norm", h, g, n * sizeof(float));
            free(h);
        }
        /* without the host round trip */
        TRY(cu_upload(ctx, dg, g, n * sizeof(float)));
        TRY(cu_clip_grad_norm(ctx, dg, n, 1.0, NULL));
        close_to("clip without reading the norm", dg, gc, n, 1e-6f);
        free(g), free(gc);
        dfree_all();
    }
}

/* ---- loader staging: pinned slots, async copies, layout on the compute stream ---------------- */
static void test_stage(void) {
    const int N = 1, C = 3;
    const long S = 4096;
    const size_t bytes = sizeof(float) * N * C * S;
    cu_stage *st;
    TRY(cu_stage_create(ctx, &st, bytes, 2));
    float *dst = dfl(NULL, (size_t)N * C * S), *want = malloc(bytes);
    for (int batch = 0; batch < 5; batch++) {
        const int slot = batch % 2;
        float *h = cu_stage_host(st, slot);
        CHECK(h != NULL, "staging host slot: %s", err_msg());
        if (!h)
            break;
        for (long i = 0; i < N * C * S; i++)
            h[i] = (float)(batch * 100000 + i);
        nn_to_channels_last(want, h, N, C, S);
        CHECK(cu_stage_send(st, slot, bytes) == 0, "send: %s", err_msg());
        const float *d = cu_stage_device(st, slot);
        CHECK(d && cu_to_channels_last(ctx, dst, d, N, C, S) == 0, "device: %s", err_msg());
        CHECK(cu_stage_release(st, slot) == 0, "release");
        float *got = hfl(dst, (size_t)N * C * S);
        CHECK(memcmp(got, want, bytes) == 0, "batch %d staged and converted", batch);
        free(got);
    }
    CHECK(cu_stage_send(st, 0, bytes + 1) == ERR_RANGE, "oversized copy refused");
    cu_stage_free(st);
    free(want);
    dfree_all();
}

/* ---- NCCL: bucketed all-reduce over every rank ------------------------------------------------ */
static void test_nccl(void) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    enum { NT = 9 };
    size_t off[NT], num[NT], n = 0;
    for (int t = 0; t < NT; t++) {
        off[t] = n;
        num[t] = 1000 + 777 * (size_t)t;
        n += num[t];
    }
    cu_bucket b[NT];
    const int nb = cu_bucket_plan(off, num, NT, 5000, b);
    CHECK(nb > 1, "several buckets");
    float *g = malloc(sizeof(float) * n), *want = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        g[i] = (float)((rank + 1) * (i % 97)) * 0.25f;
        double s = 0;
        for (int r = 0; r < size; r++)
            s += (double)((r + 1) * (i % 97)) * 0.25;
        want[i] = (float)(s / size);
    }
    cu_comm *m;
    TRY(cu_comm_create(&m, ctx, MPI_COMM_WORLD));
    float *dg = dfl(g, n);
    for (int i = 0; i < nb; i++)
        TRY(cu_allreduce_bucket(m, dg, &b[i], 1.0f / size));
    TRY(cu_allreduce_wait(m));
    char name[64];
    snprintf(name, sizeof name, "NCCL all-reduce over %d rank(s), %d buckets", size, nb);
    close_to(name, dg, want, n, 1e-6f);
    cu_comm_free(m);
    free(g), free(want);
    dfree_all();
}

/* ---- the algorithm cache after the runs -------------------------------------------------------- */
static void test_cache(int before) {
    const cu_algo_cache *c = cu_ctx_algos(ctx);
    CHECK(c->n == before, "cache: %d shapes, none added by the repeated runs (had %d)", c->n,
          before);
    int measured = 0;
    for (int i = 0; i < c->n; i++)
        for (int op = 0; op < CU_NOPS; op++)
            if (c->e[i].op[op].found) {
                measured++;
                CHECK(c->e[i].op[op].ms >= c->e[i].op[op].best_ms, "chosen >= fastest time");
            }
    CHECK(measured >= 2 * c->n, "every conv shape measured its operations (%d)", measured);
    for (int i = 0; i < c->n; i++) {
        char s[160];
        cu_conv_key_str(&c->e[i].key, s, sizeof s);
        printf("algo %s: fwd %d bwd-data %d bwd-filter %d\n", s, c->e[i].op[0].algo,
               c->e[i].op[1].algo, c->e[i].op[2].algo);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    char why[256];
    const int ndev = cu_probe(why, sizeof why);
    if (argc > 1 && !strcmp(argv[1], "--probe")) {
        if (ndev > 0)
            printf("gpus %d\n", ndev);
        else
            printf("no GPU visible (%s)\n", ndev < 0 ? why : "no CUDA device");
        MPI_Finalize();
        return ndev > 0 ? 0 : 3;
    }
    const int quick = argc > 2 && !strcmp(argv[2], "--quick");
    if (argc < 2 || (strcmp(argv[1], "fp32") && strcmp(argv[1], "bf16")) ||
        (argc > 2 && !quick)) {
        fprintf(stderr, "usage: cu_ops --probe | fp32 | bf16 [--quick]\n");
        MPI_Finalize();
        return 2;
    }
    bf16 = !strcmp(argv[1], "bf16");
    RTOL = bf16 ? 1.0f / 128 : 1e-4f;
    int gpu = -1;
    char note[512];
    if (cu_device_select("cuda", MPI_COMM_WORLD, NULL, &gpu, note, sizeof note) != 0 || gpu < 0) {
        fprintf(stderr, "FAIL device selection: %s\n", err_msg());
        MPI_Finalize();
        return 1;
    }
    if (cu_ctx_create(&ctx, gpu, bf16, (size_t)1 << 30, (size_t)1 << 30) != 0) {
        fprintf(stderr, "FAIL context: %s\n", err_msg());
        MPI_Finalize();
        return 1;
    }
    printf("%s on GPU %d of %d\n", argv[1], gpu, ndev);
    /* the U-Net's kinds of layer: first level (no skip), decoder (skip), deeper levels */
    test_conv3d(2, 8, 8, 8, 3, 0, 16);
    test_conv3d(2, 8, 8, 8, 16, 16, 16);
    if (!quick) {
        test_conv3d(1, 16, 16, 16, 32, 32, 32);
        test_conv3d(1, 4, 4, 4, 256, 0, 256);
    }
    test_convt3d(2, 4, 4, 4, 32, 16, 16);
    test_convt3d(1, 8, 8, 8, 64, 32, 0);
    test_conv1(2 * 16 * 16 * 16, 16, 6);
    test_groupnorm(2, 512, 32, 8, 1);
    if (!quick)
        test_groupnorm(1, 32768, 64, 8, 1);
    test_groupnorm(2, 64, 320, 8, 0);
    test_groupnorm(1, 1000, 8, 4, 1);
    test_elementwise();
    test_loss(2, 4096, 6);
    if (!quick)
        test_loss(1, 32768, 3);
    test_optim(NN_OPT_ADAM, 10);
    test_optim(NN_OPT_SGD, 3);
    test_optim(NN_OPT_RMSPROP, 3);
    test_clip();
    test_stage();
    const int shapes = cu_ctx_algos(ctx)->n;
    test_conv3d(2, 8, 8, 8, 16, 16, 16); /* same shapes: served by the cache */
    test_convt3d(2, 4, 4, 4, 32, 16, 16);
    test_cache(shapes);
    test_nccl();
    cu_ctx_free(ctx);
    MPI_Finalize();
    return test_report();
}
