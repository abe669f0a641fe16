/* cu_conv: the U-Net's convolutions on the GPU, our ops against cuDNN's best algorithm for the
 * same shapes, measured in the same run. For every Conv3d k3 and ConvTranspose3d of the U-Net at
 * (scale, base channels, batch 1) it times
 *   best: the bare cuDNN call with the fastest algorithm cudnnFind measured (deterministic or
 *         not), on buffers already in cuDNN's layout and the compute type;
 *   ours: our op as the U-Net calls it (cu_conv3d_forward/backward, cu_convt3d_*), which adds
 *         the skip concatenation, bf16 conversions and weight-gradient unpacking, and uses the
 *         fastest deterministic algorithm;
 * forward and backward (data + filter) separately, median of REPS interleaved repeats, and
 * prints TFLOP/s (2 * multiply-adds / time) and ours/best per layer and for the whole step.
 * Usage: cu_conv --scale S [--base B] [--bf16] [--reps R] [--inner I]   (needs a GPU) */
#include "core/err.h"
#include "nn/cuda/cu_int.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer {
    int k;          /* 3: Conv3d k3 p1 (input d^3, ca + cb -> cout); 2: ConvTranspose3d d^3 -> (2d)^3 */
    int d, ca, cb, cout;
    double flops;   /* forward; backward is twice this */
    void *x, *x2, *wp, *y, *gy, *gx, *gw, *gb; /* fp32 activations and gradients, packed w */
    void *rx, *ry;                             /* cuDNN's view: compute-type x, y (w is wp) */
    int slot;
} layer;

#define MAXL 64

static int add_layer(layer *L, int n, int k, int d, int ca, int cb, int cout) {
    layer *l = &L[n];
    memset(l, 0, sizeof *l);
    l->k = k;
    l->d = d;
    l->ca = ca;
    l->cb = cb;
    l->cout = cout;
    const double P = (double)d * d * d;
    l->flops = k == 3 ? 2 * P * (ca + cb) * cout * 27 : 2 * P * ca * cout * 8;
    return n + 1;
}

/* reference §9.3: the encoder, then per Up a ConvTranspose3d and a DoubleConv with the skip */
static int unet_layers(layer *L, int scale, int base) {
    const int N = 1 << scale, Lv = scale - 3;
    int n = 0;
    n = add_layer(L, n, 3, N, 3, 0, base);
    n = add_layer(L, n, 3, N, base, 0, base);
    for (int i = 0; i < Lv; i++) {
        const int d = N >> (i + 1), cin = base << i, c = base << (i + 1);
        n = add_layer(L, n, 3, d, cin, 0, c);
        n = add_layer(L, n, 3, d, c, 0, c);
    }
    for (int j = 0; j < Lv; j++) {
        const int c = base << (Lv - j), lo = N >> (Lv - j), hi = N >> (Lv - j - 1);
        n = add_layer(L, n, 2, lo, c, 0, c / 2);
        n = add_layer(L, n, 3, hi, c / 2, c / 2, c / 2);
        n = add_layer(L, n, 3, hi, c / 2, 0, c / 2);
    }
    return n;
}

static void die(const char *what) {
    fprintf(stderr, "cu_conv: %s: %s\n", what, err_msg());
    exit(1);
}

static void *dbuf(size_t bytes) {
    void *p;
    if (cu_alloc(&p, bytes))
        die("device memory");
    return p;
}

/* Random fp32 contents (U(-1,1) * s) through a host buffer; bf16 copies by conversion. */
static void fill(cu_ctx *c, float *d, size_t n, float s) {
    float *h = malloc(n * sizeof(float));
    uint64_t r = 0x9E3779B97F4A7C15ULL ^ n;
    for (size_t i = 0; i < n; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        h[i] = s * ((float)(r >> 40) / 8388608.0f - 1.0f);
    }
    if (cu_upload(c, d, h, n * sizeof(float)))
        die("upload");
    free(h);
}

static void setup(cu_ctx *c, layer *l) {
    const int bf = cu_ctx_bf16(c), e = bf ? 2 : 4, cin = l->ca + l->cb;
    const size_t P = (size_t)l->d * l->d * l->d;
    const size_t Pin = P, Pout = l->k == 3 ? P : 8 * P, cxin = (size_t)(l->k == 3 ? cin : l->ca);
    const size_t nw = (size_t)cin * l->cout * l->k * l->k * l->k;
    l->x = dbuf(Pin * l->ca * 4);
    fill(c, l->x, Pin * l->ca, 1);
    if (l->cb) {
        l->x2 = dbuf(Pin * l->cb * 4);
        fill(c, l->x2, Pin * l->cb, 1);
    }
    float *w = dbuf(nw * 4);
    fill(c, w, nw, 0.05f);
    l->wp = dbuf(cu_packed_bytes(cin, l->cout, l->k, bf));
    if ((l->k == 3 ? cu_pack_conv3d(c, l->wp, w, l->cout, l->ca, l->cb)
                   : cu_pack_convt3d(c, l->wp, w, l->ca, l->cout)))
        die("pack");
    cu_free(w);
    l->y = dbuf(Pout * l->cout * 4);
    l->gy = dbuf(Pout * l->cout * 4);
    fill(c, l->gy, Pout * l->cout, 1);
    l->gx = dbuf(Pin * cxin * 4);
    l->gw = dbuf(nw * 4);
    l->gb = dbuf(l->cout * 4);
    /* cuDNN's own view. k3: x (P, cin), y (P, cout). k2 (the stride-2 convolution): x is the
     * transposed convolution's output (8P, cout), y its input (P, cin). */
    const size_t nx = l->k == 3 ? P * cin : Pout * l->cout, ny = l->k == 3 ? P * l->cout : P * l->ca;
    float *t = dbuf((nx > ny ? nx : ny) * 4);
    l->rx = dbuf(nx * e);
    l->ry = dbuf(ny * e);
    fill(c, t, nx, 1);
    if (cuk_gather(c->stream, l->rx, bf, t, 1, 1, NULL, 0, 0, (long long)nx) != cudaSuccess)
        die("convert");
    fill(c, t, ny, 1);
    if (cuk_gather(c->stream, l->ry, bf, t, 1, 1, NULL, 0, 0, (long long)ny) != cudaSuccess)
        die("convert");
    cu_free(t);
    if (cu_zero(c, l->gb, l->cout * 4))
        die("zero");
    const cu_conv_key key = l->k == 3 ? (cu_conv_key){3, bf, 1, cin, l->d, l->d, l->d, l->cout}
                                      : (cu_conv_key){2, bf, 1, l->cout, 2 * l->d, 2 * l->d,
                                                      2 * l->d, l->ca};
    if (cu_conv_slot(c, &key, &l->slot))
        die("descriptors");
    /* cuDNN's best on the whole problem (a split skip's own ops use two other shapes), measured
     * on cuDNN's view of the buffers (x rx, w wp, y ry; the outputs are scratch) */
    const void *op_a[CU_NOPS] = {l->rx, l->wp, l->rx}, *op_b[CU_NOPS] = {l->wp, l->ry, l->ry};
    void *op_out[CU_NOPS] = {l->ry, l->rx, l->gw};
    for (int op = 0; op < CU_NOPS; op++)
        if (cu_conv_measure(c, l->slot, op, op_a[op], op_b[op], op_out[op]))
            die("cuDNN algorithm search");
}

static void free_layer(layer *l) {
    void *p[] = {l->x, l->x2, l->wp, l->y, l->gy, l->gx, l->gw, l->gb, l->rx, l->ry};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        cu_free(p[i]);
}

enum { OURS_FWD, OURS_BWD, BEST_FWD, BEST_BWD };

static int run(cu_ctx *c, layer *l, int what) {
    const int d = l->d;
    const cu_algo *a = c->algos.e[l->slot].op;
    /* the cuDNN operations behind each of our ops (see conv.c) */
    const int fwd_op = l->k == 3 ? CU_OP_FWD : CU_OP_BWD_DATA;
    switch (what) {
    case OURS_FWD:
        return l->k == 3 ? cu_conv3d_forward(c, l->y, l->x, l->ca, l->x2, l->cb, l->wp, l->cout, 1,
                                             d, d, d)
                         : cu_convt3d_forward(c, l->y, l->x, l->wp, l->gb, l->ca, l->cout, 1, d, d,
                                              d);
    case OURS_BWD: /* a skip layer's two input gradients apart, as the U-Net asks for them */
        return l->k == 3 ? cu_conv3d_backward(c, l->gx,
                                              l->cb ? (float *)l->gx + (size_t)d * d * d * l->ca
                                                    : NULL,
                                              l->gw, l->gy, l->x, l->ca, l->x2, l->cb, l->wp,
                                              l->cout, 1, d, d, d)
                         : cu_convt3d_backward(c, l->gx, l->gw, l->gb, l->gy, l->cout, l->x,
                                               l->wp, l->ca, l->cout, 1, d, d, d);
    case BEST_FWD: {
        const cu_algo *f = &a[fwd_op];
        return l->k == 3 ? cu_conv_exec(c, l->slot, fwd_op, f->best_algo, f->best_math,
                                        f->best_ws, l->rx, l->wp, l->ry, 0)
                         : cu_conv_exec(c, l->slot, fwd_op, f->best_algo, f->best_math,
                                        f->best_ws, l->wp, l->ry, l->rx, 0);
    }
    default: {
        /* k3: backward-data (w, dy -> dx) and backward-filter (x, dy -> dw);
         * k2: forward (x = dout, w -> din) and backward-filter (x = dout, dy = in -> dw) */
        const cu_algo *f = &a[CU_OP_BWD_FILTER];
        int rc;
        if (l->k == 3) {
            const cu_algo *b = &a[CU_OP_BWD_DATA];
            rc = cu_conv_exec(c, l->slot, CU_OP_BWD_DATA, b->best_algo, b->best_math, b->best_ws,
                              l->wp, l->ry, l->rx, 0);
            return rc ? rc : cu_conv_exec(c, l->slot, CU_OP_BWD_FILTER, f->best_algo,
                                          f->best_math, f->best_ws, l->rx, l->ry, l->gw, 0);
        }
        const cu_algo *b = &a[CU_OP_FWD];
        rc = cu_conv_exec(c, l->slot, CU_OP_FWD, b->best_algo, b->best_math, b->best_ws, l->rx,
                          l->wp, l->ry, 0);
        return rc ? rc : cu_conv_exec(c, l->slot, CU_OP_BWD_FILTER, f->best_algo, f->best_math,
                                      f->best_ws, l->rx, l->ry, l->gw, 0);
    }
    }
}

/* Milliseconds per call of `inner` back-to-back calls, timed by events on the stream. */
static double time_ms(cu_ctx *c, layer *l, int what, int inner) {
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    cudaEventRecord(t0, c->stream);
    for (int i = 0; i < inner; i++)
        if (run(c, l, what))
            die("run");
    cudaEventRecord(t1, c->stream);
    if (cu_sync(c))
        die("sync");
    float ms = 0;
    cudaEventElapsedTime(&ms, t0, t1);
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    return ms / inner;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int scale = 5, base = 64, bf = 0, reps = 5, inner = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--scale") && i + 1 < argc)
            scale = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--base") && i + 1 < argc)
            base = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--inner") && i + 1 < argc)
            inner = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bf16"))
            bf = 1;
        else {
            fprintf(stderr, "usage: cu_conv --scale S [--base B] [--bf16] [--reps R] [--inner I]\n");
            return 2;
        }
    }
    if (scale < 4 || scale > 8 || base < 8 || reps < 3 || reps > 99 || inner < 1) {
        fprintf(stderr, "cu_conv: scale 4..8, base >= 8, reps 3..99, inner >= 1\n");
        return 2;
    }
    char why[256];
    if (cu_probe(why, sizeof why) < 1) {
        printf("SKIP cu_conv: no GPU visible (%s)\n", why[0] ? why : "no CUDA device");
        MPI_Finalize();
        return 0;
    }
    layer L[MAXL];
    const int n = unet_layers(L, scale, base);
    size_t ws = 0;
    for (int i = 0; i < n; i++) {
        cu_ws_plan p;
        if (L[i].k == 3)
            cu_conv3d_ws_plan(&p, 1, L[i].d, L[i].d, L[i].d, L[i].ca + L[i].cb, L[i].cout, bf);
        else
            cu_convt3d_ws_plan(&p, 1, L[i].d, L[i].d, L[i].d, L[i].ca, L[i].cout, bf);
        ws = p.total > ws ? p.total : ws;
    }
    cu_ctx *c;
    if (cu_ctx_create(&c, 0, bf, ws, (size_t)4 << 30))
        die("context");
    const char *prec = bf ? "bf16" : cu_ctx_skip_split(c) ? "fp32 (TF32 off, skip split)"
                                                         : "fp32 (TF32 off, skip gathered)";
    printf("== GPU convolutions of the U-Net, scale %d base %d batch 1, %s, median of %d "
           "interleaved repeats of %d calls\n", scale, base, prec, reps, inner);
    double tot_best = 0, tot_ours = 0, tot_flops = 0;
    for (int i = 0; i < n; i++) {
        layer *l = &L[i];
        setup(c, l);
        /* first calls: cudnnFind measures every algorithm, then warm up both paths */
        for (int w = OURS_FWD; w <= BEST_BWD; w++)
            if (run(c, l, w))
                die("warm-up");
        double t[4][99];
        for (int r = 0; r < reps; r++)
            for (int w = OURS_FWD; w <= BEST_BWD; w++)
                t[w][r] = time_ms(c, l, w, inner);
        double med[4];
        for (int w = 0; w < 4; w++) {
            qsort(t[w], reps, sizeof(double), cmp_d);
            med[w] = t[w][reps / 2];
        }
        const double ff = l->flops, fb = 2 * l->flops;
        const cu_algo *a = c->algos.e[l->slot].op;
        printf("RESULT %s %3d^3 %4d%s -> %4d: fwd ours %7.2f TFLOP/s, cuDNN best %7.2f "
               "(algo %d vs %d), ours/best %.2f | bwd ours %7.2f, best %7.2f, ours/best %.2f\n",
               l->k == 3 ? "conv3d " : "convT3d", l->d, l->ca + l->cb, l->cb ? " (skip)" : "",
               l->cout, ff / med[OURS_FWD] / 1e9, ff / med[BEST_FWD] / 1e9,
               a[l->k == 3 ? CU_OP_FWD : CU_OP_BWD_DATA].algo,
               a[l->k == 3 ? CU_OP_FWD : CU_OP_BWD_DATA].best_algo, med[BEST_FWD] / med[OURS_FWD],
               fb / med[OURS_BWD] / 1e9, fb / med[BEST_BWD] / 1e9, med[BEST_BWD] / med[OURS_BWD]);
        tot_best += med[BEST_FWD] + med[BEST_BWD];
        tot_ours += med[OURS_FWD] + med[OURS_BWD];
        tot_flops += 3 * l->flops;
        free_layer(l);
    }
    printf("RESULT scale %d base %d %s: convolutions of one step (fwd + bwd, batch 1) %.2f TFLOP: "
           "ours %.2f ms = %.1f TFLOP/s, cuDNN best %.2f ms = %.1f TFLOP/s, ours/best %.2f "
           "(target >= 0.70)\n",
           scale, base, prec, tot_flops / 1e12, tot_ours, tot_flops / tot_ours / 1e9, tot_best,
           tot_flops / tot_best / 1e9, tot_best / tot_ours);
    cu_ctx_free(c);
    MPI_Finalize();
    return 0;
}
