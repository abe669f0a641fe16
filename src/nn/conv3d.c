/* conv3d: Conv3d (k3 p1) forward and backward, in fp32 or bf16 (autocast semantics, see
 * layers.h), on channels-last tensors, as implicit GEMMs over taps (gemm.h); the direct pass
 * and the choice among the algorithms (direct, Winograd in conv_wino.c, AMX in conv_amx.c).
 *
 * Algorithm (chosen by measurement, see docs/nn.md): the input is copied once into a
 * zero-padded channels-last buffer (fusing the skip concatenation, and the rounding to bf16);
 * then for a 3x3x3 kernel every output voxel is a sum over the 27 taps of cin-long dot products
 * with the padded input shifted by the tap, read in place. Work items are (output-channel block,
 * z plane); within one, blocks of positions (spanning rows) keep their accumulators in
 * registers for a whole k block, whose packed weights stay in L2. The input gradient is the
 * same computation on the padded output gradient with the transposed, flipped kernel. The
 * weight gradient reduces over voxels in chunks of rows that fit in L2, into per-thread copies
 * summed in a fixed order (or disjoint tiles for huge layers), so no atomics. */
#include "nn/conv_int.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Output rows [y0, y1) of plane z of a work item: the kernel walk over them. */
static void conv27_rows(const nn_tg *g0, float *out, int cdst, const void *P, int csrc,
                        int pairs, const void *Pend, const void *Bob, int nr, int nkb, int ob,
                        int z, int y0, int y1, int H, int W, int last) {
    if (y1 <= y0)
        return;
    const long Hp = H + 2, Wp = W + 2;
    const size_t es = pairs ? sizeof(uint16_t) : sizeof(float);
    const int n0 = ob * nr, nvalid = cdst - n0 < nr ? cdst - n0 : nr;
    const conv_walk w = {
        .a0 = (const char *)P + (((size_t)z * Hp + y0) * Wp) * csrc * es,
        .a_row = Wp * csrc,
        .a_col = csrc,
        .c0 = out + (((size_t)z * H + y0) * W) * cdst + n0,
        .c_row = (long)W * cdst,
        .c_col = cdst,
        .Wr = W,
        .pairs = pairs,
        .amx = pairs == PAIRS_AMX,
        .a_end = Pend,
    };
    conv_walk_kblocks(*g0, w, (long)(y1 - y0) * W, Bob, csrc, nkb, NULL, nvalid, NN_TG_ZERO, last);
}

/* out (D,H,W,cdst) = 27-tap convolution of one sample's padded slab P (D+2,H+2,W+2,csrc) with
 * the packed weights Bp (conv_pack_b/conv_pack_b16 over K = csrc, T = 27); aoff gives each tap's
 * offset in P. Work items are (column block, z plane), taken dynamically. With a shard (sh), the
 * slab is the whole block and its border is being filled by the halo exchange: rows that do
 * not read a received border run first, overlapping the exchange, then the exchange is
 * completed and the boundary rows run. */
static void conv27(float *out, int cdst, void *P, int csrc, int pairs, const void *Bp, int nr,
                   int nkb, const long *aoff, int D, int H, int W, int last, const nn_shard *sh) {
    const int nb = nblocks(cdst, nr);
    const size_t es = pairs ? sizeof(uint16_t) : sizeof(float);
    const nn_tg g0 = {.T = 27, .K = csrc, .aoff = aoff, .nr = nr};
    const void *Pend = (const char *)P + (size_t)(D + 2) * (H + 2) * (W + 2) * csrc * es;
    if (sh)
        sh->halo_start(sh->ctx, P, 1, D, H, W, csrc);
    /* Rows [ya, yb) of plane z read no received border (none of them when W is sharded). */
    const int xsh = sh && (sh->recv[2][0] || sh->recv[2][1]);
    const int ya = sh && sh->recv[1][0] ? 1 : 0, yb = sh && sh->recv[1][1] ? H - 1 : H;
    for (int phase = 0; phase < (sh ? 2 : 1); phase++) {
        if (phase == 1)
            sh->halo_finish(sh->ctx, P, 1, D, H, W, csrc);
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
        for (int ob = 0; ob < nb; ob++)
            for (int z = 0; z < D; z++) {
                const void *Bob = (const char *)Bp + (size_t)ob * 27 * csrc * nr * es;
                if (!sh) {
                    conv27_rows(&g0, out, cdst, P, csrc, pairs, Pend, Bob, nr, nkb, ob, z,
                                0, H, H, W, last);
                    continue;
                }
                const int zb = (sh->recv[0][0] && z == 0) || (sh->recv[0][1] && z == D - 1);
                const int inner = !zb && !xsh; /* plane with rows [ya, yb) off the border */
                if (phase == 0) {
                    if (inner)
                        conv27_rows(&g0, out, cdst, P, csrc, pairs, Pend, Bob, nr, nkb, ob, z,
                                    ya, yb, H, W, last);
                } else if (inner) {
                    conv27_rows(&g0, out, cdst, P, csrc, pairs, Pend, Bob, nr, nkb, ob, z,
                                0, ya, H, W, last);
                    conv27_rows(&g0, out, cdst, P, csrc, pairs, Pend, Bob, nr, nkb, ob, z,
                                yb, H, H, W, last);
                } else {
                    conv27_rows(&g0, out, cdst, P, csrc, pairs, Pend, Bob, nr, nkb, ob, z,
                                0, H, H, W, last);
                }
            }
    }
}

/* ---- Conv3d k3 -------------------------------------------------------------------------- */

/* amx-x3 (fp32 on AMX): each fp32 product as three bf16 ones, x*w ~ hi(x) hi(w) + lo(x) hi(w) +
 * hi(x) lo(w), summed in fp32 by the AMX tiles: the direct walk over a slab of 3K bf16 channels
 * (PAD_BF16X3) and weights of 3K rows (conv_pack_b16_x3). What it leaves out (lo(x) lo(w) and
 * the residues past 16 significand bits) is about 2^-16 of each product: 4.0-5.1e-6 of a
 * 1728-term sum's largest value, 4.2-4.4e-6 of its norm (fp32 SGEMM 7.4e-7, Winograd ~1e-5),
 * inside the fp32 accuracy budget (1e-4). Applies to fp32 forward and input-gradient passes
 * with K (the reduction's channels) a multiple of 32, on CPUs with AMX, where its workspace
 * (a slab of 1.5x the fp32 one, packed weights of 1.5x, a copy of the weights) fits in the one
 * the layer has for the other algorithms: it never adds memory (a 64^3 32-channel slab would
 * have grown the workspace by a third). Never chosen by the rule (measure mode or forcing). */
static size_t x3_ws_floats(int D, int H, int W, int K, int ncol) {
    return ((conv_slab_floats(D, H, W, 3 * K / 2, NULL) + 15) & ~(size_t)15) +
           ((packed_floats(ncol, 3 * K, 27) / 2 + 15) & ~(size_t)15) + (size_t)ncol * K * 27 + 64;
}

static size_t conv3d_ws_base(int N, int D, int H, int W, int cin, int cout, const nn_shard *sh);

/* fwd: K = cin input channels into ncol = cout; else the input gradient (K = cout, ncol = cin). */
static int conv_x3_applies(int N, int D, int H, int W, int K, int ncol, int fwd, nn_prec prec,
                           const nn_shard *sh) {
    if (prec != NN_FP32 || sh || !nn_isa_amx() || K % 32 || K > NN_X3_KMAX)
        return 0;
    return x3_ws_floats(D, H, W, K, ncol) <=
           conv3d_ws_base(N, D, H, W, fwd ? K : ncol, fwd ? ncol : K, NULL);
}

/* The workspace of every algorithm but AMX's im2col forward pass (conv3d_ws). */
static size_t conv3d_ws_base(int N, int D, int H, int W, int cin, int cout, const nn_shard *sh) {
    size_t sa = conv_slab_floats(D, H, W, cin, sh), sb = conv_slab_floats(D, H, W, cout, sh);
    size_t pf = packed_floats(cout, cin + 1, 27), pb = packed_floats(cin, cout + 1, 27);
    size_t pw =
        conv_weight_grad_ws(27, cin, cout, (long)conv_slab_depth(D, H, W, cin, sh) * H, H, W);
    size_t p = pf > pb ? pf : pb;
    if (p < pw)
        p = pw;
    if (conv_dw_i2c_applies(cin, sh) && p < conv_dw_i2c_ws_floats(W, cin, cout))
        p = conv_dw_i2c_ws_floats(W, cin, cout);
    /* Winograd (forward: K = cin, input gradient: K = cout), whose slabs are no deeper */
    if (conv_wino_applies(D, H, W, cin, cout, NN_FP32, sh) && p < conv_wino_ws_floats(cin, cout))
        p = conv_wino_ws_floats(cin, cout);
    if (conv_wino_applies(D, H, W, cout, cin, NN_FP32, sh) && p < conv_wino_ws_floats(cout, cin))
        p = conv_wino_ws_floats(cout, cin);
    /* Winograd on few tiles: forward and weight gradient (K = cin), input gradient (K = cout) */
    if (conv_wino_small_applies(N, D, H, W, cin, cout, NN_FP32, sh) &&
        p < conv_wino_small_ws_floats(N, D, H, W, cin, cout))
        p = conv_wino_small_ws_floats(N, D, H, W, cin, cout);
    if (conv_wino_small_applies(N, D, H, W, cout, cin, NN_FP32, sh) &&
        p < conv_wino_small_ws_floats(N, D, H, W, cout, cin))
        p = conv_wino_small_ws_floats(N, D, H, W, cout, cin);
    return (sa > sb ? sa : sb) + 16 + p + 64;
}

size_t conv3d_ws(int N, int D, int H, int W, int cin, int cout, const nn_shard *sh) {
    const size_t f = conv3d_ws_base(N, D, H, W, cin, cout, sh);
    /* AMX's im2col forward pass on few input channels (its own layout) */
    const size_t fi = nn_isa_amx() && conv_amx_i2c_applies(cin) && !sh
                          ? conv_amx_i2c_ws_floats(D, H, W, cin, cout)
                          : 0;
    return f > fi ? f : fi;
}

/* The padded copy is made per sample (and per slab of planes); N matters only to Winograd on
 * few tiles, which transforms the tiles of a few samples together. */
size_t nn_conv3d_ws_floats(int N, int D, int H, int W, int cin, int cout) {
    return conv3d_ws(N, D, H, W, cin, cout, NULL);
}

size_t nn_conv3d_ws_floats_sh(int N, int D, int H, int W, int cin, int cout) {
    static const nn_shard whole = {0};
    return conv3d_ws(N, D, H, W, cin, cout, &whole);
}

/* Tap offsets in a padded (D+2, H+2, W+2, C) tensor; flip: the input gradient's reversed taps. */
static void taps27(long *aoff, int H, int W, int C, int flip) {
    const long Hp = H + 2, Wp = W + 2;
    for (int t = 0; t < 27; t++) {
        const int u = flip ? 26 - t : t;
        aoff[t] = (((long)(u / 9) * Hp + (u / 3) % 3) * Wp + u % 3) * C;
    }
}

/* conv3d_pass's Winograd input: cat(a, b) (K channels), padded slab by slab into P. */
typedef struct wino_in {
    void *P;
    int fmt;
    nn_prec prec;
    const float *a;
    int ca;
    const float *b;
    int cb, K, N, D, H, W, Zc;
    int bf16;  /* winograd-bf16 */
    float *VM; /* one chunk's V and M, after the slab */
} wino_in;

/* A range of output columns: n columns into out (voxels ld floats apart; the part's ncol = ld
 * sets the block width), weights from w (w[col*sc + k*sk + t] as in conv3d_pass). */
typedef struct wino_job {
    float *out;
    int ld, n;
    const float *w;
} wino_job;

/* Columns [0, n) of nv voxels ld floats apart, rounded to bf16 in place. */
static void wino_round(float *o, long ld, int n, long nv) {
#pragma omp parallel for schedule(static) num_threads(nn_threads())
    for (long v = 0; v < nv; v++)
        for (int c = 0; c < n; c++)
            o[v * ld + c] = nn_bf16_round(o[v * ld + c]);
}

/* One pass over the input: every job's U transformed into ub one after the other, then per slab
 * the input padded once and every job's tiles (one chunk's V and M at in->VM). */
static void wino_pass(const wino_in *in, const wino_job *jb, int nj, long sc, long sk, int flip,
                      float *ub) {
    void *U[2];
    size_t at = 0; /* floats */
    const int Kp = in->bf16 ? (in->K + 1) & ~1 : in->K;
    for (int j = 0; j < nj; j++) {
        const int nr = nn_gemm_nr(jb[j].ld);
        U[j] = ub + at;
        conv_wino_weights(U[j], jb[j].w, jb[j].n, in->K, sc, sk, flip, nr, in->prec, in->bf16);
        const size_t nu = WINO_NXI * (size_t)Kp * nblocks(jb[j].n, nr) * nr;
        at += in->bf16 ? (nu + 1) / 2 : nu;
    }
    float *VM = in->VM;
    const int D = in->D, H = in->H, W = in->W;
    for (int n = 0; n < in->N; n++)
        for (int z0 = 0; z0 < D; z0 += in->Zc) {
            const int z1 = z0 + in->Zc < D ? z0 + in->Zc : D;
            conv_pad_slab(in->P, in->fmt, in->a, in->ca, in->ca, in->b, in->cb, n, z0, z1, D, H, W);
            for (int j = 0; j < nj; j++) {
                float *o = jb[j].out + (((size_t)n * D + z0) * H * W) * jb[j].ld;
                conv_wino_slab(o, jb[j].ld, jb[j].n, in->P, in->K, U[j], nn_gemm_nr(jb[j].ld),
                               z1 - z0, H, W, VM, in->bf16);
                /* bf16: the one rounding of the result, while the slab's output is in cache */
                if (in->prec == NN_BF16)
                    wino_round(o, jb[j].ld, jb[j].n, (long)(z1 - z0) * H * W);
            }
        }
}

/* A Conv3d k3 pass: out = 27-tap convolution of cat(a, b) (padded into ws) with w addressed
 * w[col*sc + k*sk + t], K = ca + cb input channels; flip for the input gradient. The output
 * columns come in up to two parts, each its own tensor: columns [0, n1) into out1
 * (N,D,H,W,n1) and, when out2 is given, columns [n1, n1 + n2) into out2 (N,D,H,W,n2) (the input
 * gradient of a concatenation, written straight into the two gradients). */
typedef struct conv_args {
    float *out1;
    int n1;
    float *out2;
    int n2;
    const float *a;
    int ca;
    const float *b;
    int cb;
    const float *w;
    long sc, sk;
    int flip, N, D, H, W;
    nn_prec prec;
    const nn_shard *sh;
    float *ws;
} conv_args;

/* The direct walk: pairs 0 (fp32 kernels; bf16 on rounded operands), PAIRS_DP or PAIRS_AMX;
 * x3 (with PAIRS_AMX): amx-x3. */
static void conv3d_direct(const conv_args *x, int pairs, int x3) {
    const int N = x->N, D = x->D, H = x->H, W = x->W, K = x->ca + x->cb;
    const nn_prec prec = x->prec;
    const int fmt = x3 ? PAD_BF16X3 : pairs ? PAD_BF16 : prec == NN_BF16 ? PAD_F32R : PAD_F32;
    /* the slab's channels in floats' units: 3K bf16 are 1.5 K floats */
    const int Kf = x3 ? 3 * K / 2 : K;
    const int Kp = pad_channels(fmt, K), Zc = conv_slab_depth(D, H, W, Kf, x->sh);
    void *P = x->ws;
    float *Bp = x->ws + ((conv_slab_floats(D, H, W, Kf, x->sh) + 15) & ~(size_t)15);
    /* amx-x3: lo(w) = w - bf16(w) for the whole weight tensor, after the packed weights */
    float *wlo = NULL;
    if (x3) {
        const int nc = x->n1 > x->n2 ? x->n1 : x->n2;
        wlo = Bp + ((packed_floats(nc, Kp, 27) / 2 + 15) & ~(size_t)15);
        nn_bf16_lo(wlo, x->w, (size_t)(x->n1 + x->n2) * K * 27);
    }
    long aoff[27];
    taps27(aoff, H, W, Kp, x->flip);
    const int nparts = x->out2 ? 2 : 1;
    /* With one output part the weights are packed once; with two, per slab (cheap: a slab's
     * convolution does Zc*H*W times the packing's work). */
    for (int n = 0; n < N; n++)
        for (int z0 = 0; z0 < D; z0 += Zc) {
            const int z1 = z0 + Zc < D ? z0 + Zc : D;
            conv_pad_slab(P, fmt, x->a, x->ca, x->ca, x->b, x->cb, n, z0, z1, D, H, W);
            for (int part = 0; part < nparts; part++) {
                const int ncol = part ? x->n2 : x->n1;
                const int nr = nn_gemm_nr(ncol), nkb = kblocks(Kp, 27, nr, kunit(pairs));
                if (nparts == 2 || (n == 0 && z0 == 0)) {
                    const float *wp = x->w + (part ? (long)x->n1 * x->sc : 0);
                    if (x3)
                        conv_pack_b16_x3((uint16_t *)Bp, wp, wlo + (wp - x->w), ncol, K, 27, x->sc,
                                         x->sk, nr, nkb, kunit(pairs));
                    else if (pairs)
                        conv_pack_b16((uint16_t *)Bp, wp, ncol, K, 27, x->sc, x->sk, nr, nkb,
                                      kunit(pairs));
                    else
                        conv_pack_b(Bp, wp, ncol, K, 27, x->sc, x->sk, 1, nr, nkb, prec);
                }
                float *out = (part ? x->out2 : x->out1) + (((size_t)n * D + z0) * H * W) * ncol;
                /* the halo once per sample: the second part reuses the filled border */
                conv27(out, ncol, P, Kp, pairs, Bp, nr, nkb, aoff, z1 - z0, H, W,
                       store_mode(prec), part == 0 ? x->sh : NULL);
            }
        }
}

/* Winograd (fp32 GEMMs, or with bf16 on vdpbf16ps): on few tiles, or slab by slab. */
static void conv3d_winograd(const conv_args *x, int bf16) {
    const int N = x->N, D = x->D, H = x->H, W = x->W, K = x->ca + x->cb;
    const nn_prec prec = x->prec;
    if (conv_wino_small_applies(N, D, H, W, K, x->n1 + x->n2, prec, x->sh)) {
        conv_wino_small_pass(x->out1, x->n1, x->out2, x->n2, x->a, x->ca, x->b, x->cb, x->w, x->sc,
                             x->sk, x->flip, N, D, H, W, prec, bf16, x->ws);
        return;
    }
    /* Winograd tiles are two planes deep: even slabs (no deeper than the workspace's) */
    const int Zc = conv_slab_depth(D, H, W, K, NULL) & ~1;
    const int nparts = x->out2 ? 2 : 1;
    wino_job jb[2];
    size_t at = 0, ug = 0; /* floats of U: all parts, and the largest column group's */
    for (int part = 0; part < nparts; part++) {
        const int ncol = part ? x->n2 : x->n1, nr = nn_gemm_nr(ncol);
        jb[part] = (wino_job){.out = part ? x->out2 : x->out1, .ld = ncol, .n = ncol,
                              .w = x->w + (part ? (long)x->n1 * x->sc : 0)};
        at += WINO_NXI * (size_t)K * nblocks(ncol, nr) * nr;
        const size_t u = WINO_NXI * (size_t)K *
                         nblocks(conv_wino_group_cols(K, ncol, nr), nr) * nr;
        ug = u > ug ? u : ug;
    }
    const int one = 4 * (long)at <= conv_wino_umax(); /* both parts' U at once: one pass */
    /* The workspace: U first, then the padded slab, then one chunk's V and M. U, the largest
     * thing a pass writes before it reads it (up to 18.9 MB at scale 5 / 64), then starts at
     * the same address in every layer, on lines the previous layer's U has just written (in the
     * step, 5 / 64 fp32, Xeon with AMX: the weight transforms 10.7-11.8 -> 9.1-9.6 ms a step,
     * the padding 0.5 ms more; the step faster in 7 of 7 alternated pairs with winograd forced,
     * 1.1% by the mean, and in 6 of 8 with the measured choices pinned, 1.01x by the median) */
    float *Bp = x->ws, *P = x->ws + (((one ? at : ug) + 15) & ~(size_t)15);
    const wino_in in = {.P = P, .fmt = prec == NN_BF16 ? PAD_F32R : PAD_F32, .prec = prec,
                        .a = x->a, .ca = x->ca, .b = x->b, .cb = x->cb, .K = K, .N = N, .D = D,
                        .H = H, .W = W, .Zc = Zc, .bf16 = bf16,
                        .VM = P + ((conv_slab_floats(D, H, W, K, NULL) + 15) & ~(size_t)15)};
    if (one) {
        wino_pass(&in, jb, nparts, x->sc, x->sk, x->flip, Bp);
        return;
    }
    /* U over conv_wino_umax(): a pass per part and column group */
    for (int part = 0; part < nparts; part++) {
        const wino_job whole = jb[part];
        const int gc = conv_wino_group_cols(K, whole.ld, nn_gemm_nr(whole.ld));
        for (int c0 = 0; c0 < whole.ld; c0 += gc) {
            const wino_job g = {.out = whole.out + c0, .ld = whole.ld,
                                .n = whole.ld - c0 < gc ? whole.ld - c0 : gc,
                                .w = whole.w + c0 * x->sc};
            wino_pass(&in, &g, 1, x->sc, x->sk, x->flip, Bp);
        }
    }
}

/* The algorithms that apply to a forward or input-gradient pass (algo.h): the direct walk
 * always; Winograd on its shapes (unsharded); the bf16 ones where the CPU has the kernels. */
static unsigned conv3d_eligible(const conv_args *x) {
    const int K = x->ca + x->cb;
    unsigned el = 1u << NN_ALGO_DIRECT;
    const int wino =
        conv_wino_small_applies(x->N, x->D, x->H, x->W, K, x->n1 + x->n2, x->prec, x->sh) ||
        conv_wino_applies(x->D, x->H, x->W, K, x->n1 + x->n2, x->prec, x->sh);
    if (wino)
        el |= 1u << NN_ALGO_WINOGRAD;
    if (use_pairs(x->prec) && !x->sh) {
        el |= 1u << NN_ALGO_DIRECT_BF16;
        if (wino)
            el |= 1u << NN_ALGO_WINOGRAD_BF16;
        if (nn_isa_amx() &&
            (K % 32 == 0 || (conv_amx_i2c_applies(K) && !x->flip && !x->out2)))
            el |= 1u << NN_ALGO_AMX;
    }
    if (conv_x3_applies(x->N, x->D, x->H, x->W, K, x->n1 + x->n2, !x->flip, x->prec, x->sh))
        el |= 1u << NN_ALGO_AMX_X3;
    return el;
}

static void conv3d_run(const nn_algo_job *j, int algo, float *dw) {
    (void)dw;
    const conv_args *x = j->ctx;
    switch (algo) {
    case NN_ALGO_WINOGRAD:
        conv3d_winograd(x, 0);
        break;
    case NN_ALGO_WINOGRAD_BF16:
        conv3d_winograd(x, 1);
        break;
    case NN_ALGO_DIRECT_BF16:
        conv3d_direct(x, PAIRS_DP, 0);
        break;
    case NN_ALGO_AMX_X3:
        conv3d_direct(x, PAIRS_AMX, 1);
        break;
    case NN_ALGO_AMX:
        if (conv_amx_i2c_applies(x->ca + x->cb))
            conv_amx_i2c_fwd(x->out1, x->a, x->ca, x->b, x->cb, x->w, x->sc, x->sk, x->n1, x->N,
                             x->D, x->H, x->W, store_mode(x->prec), x->ws);
        else
            conv3d_direct(x, PAIRS_AMX, 0);
        break;
    default:
        conv3d_direct(x, 0, 0);
    }
}

/* The job of a pass; its key names the layer (cat(ca, cb) -> cout), whichever pass: the input
 * gradient's own input is the layer's output gradient (x->ca = cout channels), its outputs the
 * layer's input channels (split: written as ca | cb). */
static nn_algo_job conv3d_job(const conv_args *x, int pass) {
    const int fwd = pass == NN_PASS_FWD;
    nn_algo_job j = {.key = {.pass = pass, .prec = x->prec, .N = x->N, .D = x->D, .H = x->H,
                             .W = x->W, .ca = fwd ? x->ca : x->n1, .cb = fwd ? x->cb : x->n2,
                             .cout = fwd ? x->n1 : x->ca, .split = !fwd && x->out2},
                     .eligible = conv3d_eligible(x),
                     .run = conv3d_run,
                     .ctx = (void *)x,
                     .out = {x->out1, x->out2},
                     .nout = {(size_t)x->N * x->D * x->H * x->W * x->n1,
                              x->out2 ? (size_t)x->N * x->D * x->H * x->W * x->n2 : 0},
                     .ws = x->ws};
    if (x->ws) /* the layer's workspace (cat(ca, cb) -> cout), which every algorithm fits */
        j.nws = conv3d_ws(x->N, x->D, x->H, x->W, j.key.ca + j.key.cb, j.key.cout, x->sh);
    j.rule = nn_algo_rule(&j);
    return j;
}

/* The pass with the algorithm algo.h picks (a measurement on first use in measure mode). */
static void conv3d_pass(const conv_args *x, int pass) {
    const nn_algo_job j = conv3d_job(x, pass);
    int done;
    const int algo = nn_algo_pick(&j, &done);
    if (!done)
        conv3d_run(&j, algo, NULL);
}

void nn_conv3d_forward_p(float *out, const float *inA, int ca, const float *inB, int cb,
                         const float *w, int cout, int N, int D, int H, int W, nn_prec prec,
                         const nn_shard *sh, float *ws) {
    const int cin = ca + cb;
    /* w[oc][ic][t]: column oc stride cin*27, k = ic stride 27, tap stride 1. */
    const conv_args x = {.out1 = out, .n1 = cout, .a = inA, .ca = ca, .b = inB, .cb = cb, .w = w,
                         .sc = (long)cin * 27, .sk = 27, .N = N, .D = D, .H = H, .W = W,
                         .prec = prec, .sh = sh, .ws = ws};
    conv3d_pass(&x, NN_PASS_FWD);
}

/* The weight gradient's arguments, for its algorithms (algo.h). */
typedef struct dw_args {
    const float *a;
    int ca;
    const float *b;
    int cb;
    const float *dy;
    int cout, N, D, H, W;
    nn_prec prec;
    const nn_shard *sh;
    float *ws;
} dw_args;

/* Winograd's weight gradient on many tiles: dU of one column group at a time where it is over
 * conv_wino_umax() (else one group), each group's pass over the input on its own. */
static void dw_winograd(float *dw, const dw_args *x, int bf16) {
    const int cin = x->ca + x->cb, cout = x->cout, D = x->D, H = x->H, W = x->W;
    const nn_prec prec = x->prec;
    if (conv_wino_small_applies(x->N, D, H, W, cin, cout, prec, x->sh)) {
        conv_wino_small_dw(dw, x->a, x->ca, x->b, x->cb, x->dy, cout, x->N, D, H, W, prec, bf16,
                           x->ws);
        return;
    }
    const int Zc = conv_slab_depth(D, H, W, cin, NULL) & ~1, nr = nn_gemm_nr(cout);
    const int gc = conv_wino_group_cols(cin, cout, nr);
    /* dU first, then the padded slab and one chunk's V and dM (as conv3d_winograd's U) */
    const size_t nu_max = WINO_NXI * (size_t)cin * nblocks(gc, nr) * nr;
    float *dU = x->ws, *P = x->ws + ((nu_max + 15) & ~(size_t)15);
    float *VM = P + ((conv_slab_floats(D, H, W, cin, NULL) + 15) & ~(size_t)15);
    for (int c0 = 0; c0 < cout; c0 += gc) {
        const int cg = cout - c0 < gc ? cout - c0 : gc;
        for (int n = 0; n < x->N; n++)
            for (int z0 = 0; z0 < D; z0 += Zc) {
                const int z1 = z0 + Zc < D ? z0 + Zc : D;
                conv_pad_slab(P, prec == NN_BF16 ? PAD_F32R : PAD_F32, x->a, x->ca, x->ca, x->b,
                              x->cb, n, z0, z1, D, H, W);
                const float *g = x->dy + (((size_t)n * D + z0) * H * W) * cout + c0;
                conv_wino_dw_slab(dU, P, cin, g, cout, cg, nr, z1 - z0, H, W, VM, bf16,
                                  n == 0 && z0 == 0);
            }
        conv_wino_dw_finish(dw + (size_t)c0 * cin * 27, dU, cin, cg, nr, prec, bf16);
    }
}

/* The direct weight gradient: padded (halo'd) input x output gradient, reduced over voxels. */
static void dw_direct(float *dw, const dw_args *x) {
    const int cin = x->ca + x->cb, cout = x->cout, D = x->D, H = x->H, W = x->W;
    const nn_shard *sh = x->sh;
    if (!x->cb && conv_dw_i2c_applies(cin, sh)) {
        conv_dw_i2c(dw, x->a, cin, x->dy, cout, x->N, D, H, W, x->prec, x->ws);
        return;
    }
    const int Zc = conv_slab_depth(D, H, W, cin, sh);
    float *P = x->ws, *Wp = x->ws + ((conv_slab_floats(D, H, W, cin, sh) + 15) & ~(size_t)15);
    for (int n = 0; n < x->N; n++)
        for (int z0 = 0; z0 < D; z0 += Zc) {
            const int z1 = z0 + Zc < D ? z0 + Zc : D;
            conv_pad_slab(P, x->prec == NN_BF16 ? PAD_F32R : PAD_F32, x->a, x->ca, x->ca, x->b,
                          x->cb, n, z0, z1, D, H, W);
            if (sh) {
                sh->halo_start(sh->ctx, P, 1, D, H, W, cin);
                sh->halo_finish(sh->ctx, P, 1, D, H, W, cin);
            }
            const conv_tw_src r = {.A = P,
                                   .G = x->dy + (((size_t)n * D + z0) * H * W) * cout,
                                   .kind = 0,
                                   .D = z1 - z0,
                                   .H = H,
                                   .W = W,
                                   .cin = cin,
                                   .cout = cout,
                                   .ldg_vox = cout};
            conv_weight_grad(Wp, &r, (long)(z1 - z0) * H, 27, n > 0 || z0 > 0);
        }
    conv_unpack_dw(dw, Wp, cin, cout, x->prec);
}

static void dw_run(const nn_algo_job *j, int algo, float *dw) {
    const dw_args *x = j->ctx;
    if (algo == NN_ALGO_AMX)
        conv_amx_dw(
            dw, x->a, x->ca, x->b, x->cb, x->dy, x->cout, x->N, x->D, x->H, x->W,
            conv_amx_dw_depth(x->N, x->D, x->H, x->W, x->ca + x->cb, x->cout, x->prec, x->sh),
            x->ws);
    else if (algo == NN_ALGO_WINOGRAD || algo == NN_ALGO_WINOGRAD_BF16)
        dw_winograd(dw, x, algo == NN_ALGO_WINOGRAD_BF16);
    else
        dw_direct(dw, x);
}

/* The weight gradient's algorithms: direct; Winograd where it applies (in bf16 too: the
 * operands are bf16 values, and the transforms' fp32 error, ~1e-5 of the sum, tested, is far
 * below the one bf16 rounding of the result); winograd-bf16 there with the bf16 kernels; AMX
 * from 512 voxels (conv_amx_dw_depth). No direct walk on vdpbf16ps exists for it. */
static nn_algo_job dw_job(float *dw, const dw_args *x) {
    const int cin = x->ca + x->cb;
    const int wino =
        conv_wino_small_applies(x->N, x->D, x->H, x->W, cin, x->cout, x->prec, x->sh) ||
        conv_wino_applies(x->D, x->H, x->W, cin, x->cout, x->prec, x->sh);
    unsigned el = 1u << NN_ALGO_DIRECT;
    if (wino)
        el |= 1u << NN_ALGO_WINOGRAD;
    if (use_pairs(x->prec) &&
        (conv_wino_applies(x->D, x->H, x->W, cin, x->cout, x->prec, x->sh) ||
         conv_wino_small_dw16_applies(x->N, x->D, x->H, x->W, cin, x->cout, x->prec, x->sh)))
        el |= 1u << NN_ALGO_WINOGRAD_BF16;
    if (conv_amx_dw_depth(x->N, x->D, x->H, x->W, cin, x->cout, x->prec, x->sh))
        el |= 1u << NN_ALGO_AMX;
    nn_algo_job j = {.key = {.pass = NN_PASS_BWD_WEIGHT, .prec = x->prec, .N = x->N, .D = x->D,
                             .H = x->H, .W = x->W, .ca = x->ca, .cb = x->cb, .cout = x->cout},
                     .eligible = el,
                     .run = dw_run,
                     .ctx = (void *)x,
                     .ndw = 27 * (size_t)cin * x->cout,
                     .ws = x->ws,
                     .nws = x->ws ? conv3d_ws(x->N, x->D, x->H, x->W, cin, x->cout, x->sh) : 0};
    (void)dw;
    j.rule = nn_algo_rule(&j);
    return j;
}

void nn_conv3d_backward_p(float *din, float *dinB, float *dw, const float *dout,
                          const float *inA, int ca, const float *inB, int cb, const float *w,
                          int cout, int N, int D, int H, int W, nn_prec prec, const nn_shard *sh,
                          float *ws) {
    const int cin = ca + cb;
    if (dw) {
        const dw_args x = {.a = inA, .ca = ca, .b = inB, .cb = cb, .dy = dout, .cout = cout,
                           .N = N, .D = D, .H = H, .W = W, .prec = prec, .sh = sh, .ws = ws};
        const nn_algo_job j = dw_job(dw, &x);
        int done;
        dw_run(&j, nn_algo_pick(&j, &done), dw);
    }
    /* Input gradient: the padded (halo'd) output gradient convolved with the flipped,
     * transposed kernel (tap t of the packed weights pairs with the reversed tap 26 - t of the
     * padded gradient): columns ic stride 27, k = oc stride cin*27. The halo exchange of the
     * output gradient makes every boundary voxel sum exactly the unsharded kernel's terms. */
    if (din) {
        const int split = dinB && cb;
        const conv_args x = {.out1 = din, .n1 = split ? ca : cin, .out2 = split ? dinB : NULL,
                             .n2 = split ? cb : 0, .a = dout, .ca = cout, .w = w, .sc = 27,
                             .sk = (long)cin * 27, .flip = 1, .N = N, .D = D, .H = H, .W = W,
                             .prec = prec, .sh = sh, .ws = ws};
        conv3d_pass(&x, NN_PASS_BWD_DATA);
    }
}

int nn_conv3d_algo(int pass, int N, int D, int H, int W, int ca, int cb, int cout, int split,
                   nn_prec prec) {
    static float dummy[1]; /* the jobs only look at which outputs exist */
    if (pass == NN_PASS_BWD_WEIGHT) {
        const dw_args x = {.ca = ca, .cb = cb, .cout = cout, .N = N, .D = D, .H = H, .W = W,
                           .prec = prec};
        const nn_algo_job j = dw_job(dummy, &x);
        return nn_algo_peek(&j);
    }
    conv_args x = {.out1 = dummy, .n1 = cout, .ca = ca, .cb = cb, .N = N, .D = D, .H = H, .W = W,
                   .prec = prec};
    if (pass == NN_PASS_BWD_DATA)
        x = (conv_args){.out1 = dummy, .n1 = split ? ca : ca + cb, .out2 = split ? dummy : NULL,
                        .n2 = split ? cb : 0, .ca = cout, .flip = 1, .N = N, .D = D, .H = H,
                        .W = W, .prec = prec};
    const nn_algo_job j = conv3d_job(&x, pass);
    return nn_algo_peek(&j);
}

int nn_conv3d_winograd(int N, int D, int H, int W, int cin, int cout, nn_prec prec) {
    const int a = nn_conv3d_algo(NN_PASS_FWD, N, D, H, W, cin, 0, cout, 0, prec);
    return a == NN_ALGO_WINOGRAD || a == NN_ALGO_WINOGRAD_BF16;
}

void nn_conv3d_forward(float *out, const float *inA, int ca, const float *inB, int cb,
                       const float *w, int cout, int N, int D, int H, int W, float *ws) {
    nn_conv3d_forward_p(out, inA, ca, inB, cb, w, cout, N, D, H, W, NN_FP32, NULL, ws);
}

void nn_conv3d_backward(float *din, float *dw, const float *dout, const float *inA, int ca,
                        const float *inB, int cb, const float *w, int cout, int N, int D, int H,
                        int W, float *ws) {
    nn_conv3d_backward_p(din, NULL, dw, dout, inA, ca, inB, cb, w, cout, N, D, H, W, NN_FP32,
                         NULL, ws);
}

void nn_conv3d_forward_sh(float *out, const float *inA, int ca, const float *inB, int cb,
                          const float *w, int cout, int N, int D, int H, int W, float *ws,
                          const nn_shard *sh) {
    nn_conv3d_forward_p(out, inA, ca, inB, cb, w, cout, N, D, H, W, NN_FP32, sh, ws);
}

void nn_conv3d_backward_sh(float *din, float *dw, const float *dout, const float *inA, int ca,
                           const float *inB, int cb, const float *w, int cout, int N, int D,
                           int H, int W, float *ws, const nn_shard *sh) {
    nn_conv3d_backward_p(din, NULL, dw, dout, inA, ca, inB, cb, w, cout, N, D, H, W, NN_FP32, sh,
                         ws);
}
