/* convt: ConvTranspose3d k2 s2, forward and backward, fp32 or bf16: eight 1-tap GEMMs over the
 * input, one per output tap (the AMX backward pass is in conv_amx.c). */
#include "nn/conv_int.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ---- ConvTranspose3d k2 s2 -------------------------------------------------------------- */

/* Floats of one thread's bf16 copy of the output-gradient rows an input-gradient work item
 * reads (2 planes x 2 * convt_rows rows x 2W voxels x cout), whole cache lines. */
static size_t convt_dgrad_rows(int H, int W, int cout) {
    const size_t e = (size_t)2 * 2 * convt_rows(H, W) * 2 * W * cout;
    return (e / 2 + 15) & ~(size_t)15;
}

size_t nn_convt3d_ws_floats_p(int N, int D, int H, int W, int cin, int cout, nn_prec prec) {
    size_t pf = packed_floats(cout, cin, 8), pb = packed_floats(cin, cout, 8);
    size_t pw = conv_weight_grad_ws(8, cin + 1, cout, (long)N * D * H, H, W); /* + the ones */
    size_t p = pf > pb ? pf : pb;
    if (pw > p)
        p = pw;
    size_t bias = (size_t)NN_SLICES * cout;
    /* bf16: the input rounded to bf16 (the A operand of forward and weight gradient). */
    const size_t rin = prec == NN_BF16 ? (size_t)N * D * H * W * cin + 16 : 0;
    size_t all = rin + (p > bias ? p : bias) + (size_t)nn_gemm_ncol_max(cout) + 64;
    /* bf16 on the pair kernels: the input gradient's packed pairs and each thread's bf16 rows of
     * the output gradient (convt_dgrad_rows) */
    const size_t dg = pb + (size_t)NN_MAX_THREADS * convt_dgrad_rows(H, W, cout) + 64;
    if (prec == NN_BF16 && dg > all)
        all = dg;
    /* bf16 on AMX: the forward pass's bf16 input and packed weights fit in the above; the
     * backward pass's slabs may not */
    if (!convt_amx(cin, cout, prec))
        return all;
    const size_t amx = convt_amx_ws_floats(D, H, W, cin, cout);
    return amx > all ? amx : all;
}

/* The A operand of a layer that reads its input in place: the input itself, or in bf16 a
 * rounded copy at the start of ws (*rest: the workspace after it). */
static const float *input_prec(const float *in, size_t n, nn_prec prec, float *ws, float **rest) {
    if (prec != NN_BF16) {
        *rest = ws;
        return in;
    }
    conv_copy_prec(ws, in, n, prec);
    *rest = ws + ((n + 15) & ~(size_t)15);
    return ws;
}

/* Column-block groups per ConvTranspose3d row item: with fewer than 8 items per thread (8^3:
 * 8 planes), the items' column blocks are split into groups, so that the threads end together
 * (a tenth of an 8^3 512->256 pass was spent waiting). The results do not depend on it. */
int convt_groups(long items, int nb) {
    const long want = 8L * nn_threads();
    if (items >= want)
        return 1;
    const long g = (want + items - 1) / items;
    return g < nb ? (int)g : nb;
}

/* Rows per ConvTranspose3d work item: at least CT_POS positions (whole planes when small). */
#define CT_POS 64
int convt_rows(int H, int W) {
    const int r = (CT_POS + W - 1) / W;
    return r < H ? r : H;
}

void nn_convt3d_forward_p(float *out, const float *in, const float *w, const float *b, int cin,
                          int cout, int N, int D, int H, int W, nn_prec prec, float *ws) {
    const int nr = nn_gemm_nr(cout), nb = nblocks(cout, nr), amx = convt_amx(cin, cout, prec);
    /* bf16 without AMX but with vdpbf16ps: the same bf16 copy and pairs on the pair kernels
     * (twice fp32's products per instruction where they issue at the FMA's rate) */
    const int pairs = amx || (use_pairs(prec) && !nn_isa_amx() && cin % 2 == 0);
    const size_t V = (size_t)N * D * H * W, es = pairs ? sizeof(uint16_t) : sizeof(float);
    /* Each tap t is its own 1-tap GEMM writing every other voxel: w[ic][oc][t] packed with
     * T = 8 (column oc stride 8, k = ic stride cout*8), so tap t's panel of column block ob is
     * at (ob*8 + t)*cin*nr. On AMX the input is a bf16 copy and the weights bf16 pairs. */
    const void *A;
    void *Bp;
    float *bias;
    if (pairs) {
        uint16_t *A16 = (uint16_t *)ws;
        const long chunk = 1L << 14, nA = (long)(V * cin);
#pragma omp parallel for schedule(static)
        for (long i = 0; i < (nA + chunk - 1) / chunk; i++)
            nn_bf16_pack(A16 + i * chunk, in + i * chunk,
                         nA - i * chunk < chunk ? nA - i * chunk : chunk);
        A = A16;
        Bp = A16 + ((V * cin + 31) & ~(size_t)31);
        conv_pack_b16(Bp, w, cout, cin, 8, 8, (long)cout * 8, nr, 1, amx ? 32 : 2);
        bias = (float *)((uint16_t *)Bp + 8 * (size_t)nb * nr * cin);
    } else {
        float *rest;
        A = input_prec(in, V * cin, prec, ws, &rest);
        Bp = rest;
        conv_pack_b(Bp, w, cout, cin, 8, 8, (long)cout * 8, 1, nr, 1, prec);
        bias = rest + packed_floats(cout, cin, 8);
    }
    bias = conv_bias_padded(bias, b, cout, nr, prec);
    const long aoff[1] = {0};
    const nn_tg g = {.T = 1, .K = cin, .aoff = aoff, .nr = nr};
    /* An output far larger than the last-level cache is written with non-temporal stores: a
     * cached store first reads every line it fills, and the next layer reads it from memory
     * anyway (32^3 128->64, 67 MB: 1.07x). */
    const int stream = conv_stream(out, (size_t)8 * V * cout, cout);
    const int last = store_mode(prec) | (stream ? NN_TG_STREAM : 0);
    /* Work items are a few input rows (YR: >= CT_POS positions, so the kernel gets full
     * blocks): their channels stay in cache while every column block and tap reads them (the
     * weights, 8 * cin * cout floats, stay in L2). With the column blocks outermost each block
     * re-read the whole input from memory: 36-60 GFLOP/s at 32^3 128->64, 75-94 this way. */
    const int YR = convt_rows(H, W), ny = (H + YR - 1) / YR,
              ng = convt_groups((long)N * D * ny, nb);
#pragma omp parallel for schedule(dynamic, 2)
    for (long it = 0; it < (long)N * D * ny * ng; it++) {
        const int og = (int)(it % ng), yb = (int)(it / ng % ny), z = (int)(it / ng / ny % D);
        const int n = (int)(it / ng / ny / D), y = yb * YR, nyr = H - y < YR ? H - y : YR;
        for (int ob = og * nb / ng; ob < (og + 1) * nb / ng; ob++) {
            const int n0 = ob * nr, nvalid = cout - n0 < nr ? cout - n0 : nr;
            for (int t = 0; t < 8; t++) {
                const int az = t / 4, by = (t / 2) % 2, cx = t % 2;
                const conv_walk wk = {
                    .a0 = (const char *)A + (((size_t)n * D + z) * H + y) * W * cin * es,
                    .a_row = (long)W * cin,
                    .a_col = cin,
                    .c0 = out + ((((size_t)n * 2 * D + 2 * z + az) * 2 * H + 2 * y + by) * 2 * W +
                                 cx) * cout + n0,
                    .c_row = 4L * W * cout,
                    .c_col = 2L * cout,
                    .Wr = W,
                    .pairs = pairs,
                    .amx = amx,
                    .a_end = amx ? (const char *)A + V * cin * es : NULL,
                };
                conv_walk_kblocks(g, wk, (long)nyr * W,
                                  (const char *)Bp + ((size_t)ob * 8 + t) * cin * nr * es, cin, 1,
                                  bias + n0, nvalid, NN_TG_BIAS, last);
            }
            if (stream)
                nn_stream_fence();
        }
    }
}

void nn_convt3d_backward_p(float *din, float *dw, float *db, const float *dout, long ldo,
                           const float *in, const float *w, int cin, int cout, int N, int D,
                           int H, int W, nn_prec prec, float *ws) {
    const long rows = (long)N * D * H;
    if (convt_amx(cin, cout, prec)) {
        if (db && !dw)
            conv_bias_grad(db, dout, ldo, 8 * rows * W, cout, prec, ws);
        convt_amx_backward(din, dw, dw ? db : NULL, dout, ldo, in, w, cin, cout, N, D, H, W, ws);
        return;
    }
    if (db && !dw)
        conv_bias_grad(db, dout, ldo, 8 * rows * W, cout, prec, ws);
    if (dw) {
        /* With db, the bias gradient is the weight gradient of a channel of ones: no pass of
         * its own over the output gradient (67 MB at 32^3 128->64, a seventh of the time). */
        /* bf16 with vdpbf16ps and W even: the reduction over voxel pairs on the pair kernels,
         * input and output gradient rounded by the packing (no rounded copy of the input) */
        const int pairs = use_pairs(prec) && !nn_isa_amx() && W % 2 == 0;
        float *rest = ws;
        const float *A = pairs ? in : input_prec(in, (size_t)rows * W * cin, prec, ws, &rest);
        const conv_tw_src r = {.A = A, .G = dout, .kind = 1, .D = D, .H = H, .W = W, .cin = cin,
                               .cout = cout, .ldg_vox = ldo, .ones = db != NULL, .pairs = pairs};
        conv_weight_grad(rest, &r, rows, 8, 0);
        conv_unpack_dwt(dw, db, rest, cin, cout, prec);
    }
    if (!din)
        return;
    /* din[ic] = sum_t sum_oc dout(2p + t)[oc] w[ic][oc][t]: column ic stride cout*8, k = oc. */
    const int nr = nn_gemm_nr(cin), nb = nblocks(cin, nr), nkb = kblocks(cout, 8, nr, 2);
    /* bf16 without AMX but with vdpbf16ps: the weights as pairs of oc and each item's output
     * gradient rows as a bf16 copy in the thread's buffer (it stays in L2 over the item's column
     * blocks; the output gradient becomes a bf16 operand, as under autocast) */
    const int pairs = use_pairs(prec) && !nn_isa_amx() && cout % 2 == 0;
    float *Bp = ws;
    uint16_t *rows16 = NULL;
    const size_t nrows16 = convt_dgrad_rows(H, W, cout);
    if (pairs) {
        conv_pack_b16((uint16_t *)Bp, w, cin, cout, 8, (long)cout * 8, 8, nr, nkb, 2);
        rows16 = (uint16_t *)(ws + ((packed_floats(cin, cout, 8) / 2 + 15) & ~(size_t)15));
    } else {
        conv_pack_b(Bp, w, cin, cout, 8, (long)cout * 8, 8, 1, nr, nkb, prec);
    }
    long aoff[8];
    for (int t = 0; t < 8; t++)
        aoff[t] = (((long)(t / 4) * 2 * H + (t / 2) % 2) * 2 * W + t % 2) * ldo;
    const nn_tg g = {.T = 8, .K = cout, .aoff = aoff, .nr = nr};
    /* Work items are a few rows of din (as in the forward pass): the output-gradient rows they
     * read stay in cache while every column block runs over them (36 -> 79-94 GFLOP/s at 32^3
     * 128->64). */
    const int YR = convt_rows(H, W), ny = (H + YR - 1) / YR;
    /* The output gradient an item reads (its 2 planes' rows) comes from memory at the first
     * column block, through 6 positions x 8 taps of streams, more than the hardware prefetchers
     * follow: the item prefetches the next item's rows (the next item in the same order,
     * often its own next) over its column blocks. */
    const long prow = 2L * W * ldo; /* floats of one output-gradient row */
    const int ng = convt_groups((long)N * D * ny, nb);
#pragma omp parallel for schedule(dynamic, 2) num_threads(nn_threads())
    for (long it = 0; it < (long)N * D * ny * ng; it++) {
        const int og = (int)(it % ng), yb = (int)(it / ng % ny), z = (int)(it / ng / ny % D);
        const int n = (int)(it / ng / ny / D), y = yb * YR, nyr = H - y < YR ? H - y : YR;
        /* the next row item, (n, z, yb + 1) or the next plane's first rows: 2 spans of
         * 2 * nyx rows (its planes 2z', 2z' + 1), the first half of the column blocks
         * prefetching the first, the second half the second */
        const long nx = ((long)n * D + z) * ny + yb + 1;
        const long xn = nx / ((long)D * ny), xz = nx / ny % D, xy = nx % ny * YR;
        const long span = 2 * (H - xy < YR ? H - xy : YR) * prow;
        const int h0 = nb > 1 ? nb / 2 : 1;
        const float *a0 = dout + (((size_t)n * 2 * D + 2 * z) * 2 * H + 2 * y) * 2 * W * ldo;
        const long lda = pairs ? cout : ldo; /* elements per voxel of what the walk reads */
        nn_tg gi = g;
        long aoff16[8];
        if (pairs) { /* the item's rows: [plane 2z + dz][row 2y + r][voxel][oc] in bf16 */
            uint16_t *b16 = rows16 + (size_t)omp_get_thread_num() * nrows16 * 2;
            const long nvr = 2L * W, plane16 = 2L * nyr * nvr * cout;
            for (int dz = 0; dz < 2; dz++)
                for (int r = 0; r < 2 * nyr; r++) {
                    const float *src = a0 + ((size_t)dz * 2 * H + r) * 2 * W * ldo;
                    uint16_t *dst = b16 + dz * plane16 + (size_t)r * nvr * cout;
                    if (ldo == cout)
                        nn_bf16_pack(dst, src, nvr * cout);
                    else
                        for (long v = 0; v < nvr; v++)
                            nn_bf16_pack(dst + v * cout, src + v * ldo, cout);
                }
            for (int t = 0; t < 8; t++)
                aoff16[t] = (t / 4) * plane16 + (((t / 2) % 2) * nvr + t % 2) * cout;
            gi.aoff = aoff16;
            a0 = (const float *)b16;
        }
        for (int ob = og * nb / ng; ob < (og + 1) * nb / ng; ob++) {
            const int n0 = ob * nr, nvalid = cin - n0 < nr ? cin - n0 : nr;
            conv_walk wk = {
                .a0 = a0,
                .a_row = 4L * W * lda,
                .a_col = 2 * lda,
                .c0 = din + (((size_t)n * D + z) * H + y) * W * cin + n0,
                .c_row = (long)W * cin,
                .c_col = cin,
                .Wr = W,
                .pairs = pairs,
            };
            const int half = ob >= h0, sh = half ? nb - h0 : h0, i = half ? ob - h0 : ob;
            if (xn < N && sh > 0) {
                const float *p =
                    dout + (((size_t)xn * 2 * D + 2 * xz + half) * 2 * H + 2 * xy) * prow;
                wk.pf = (const char *)(p + span * i / sh);
                wk.pf_bytes = (span * (i + 1) / sh - span * i / sh) * (long)sizeof(float);
            }
            const size_t bo = (size_t)ob * 8 * cout * nr * (pairs ? 2 : 4); /* bytes */
            conv_walk_kblocks(gi, wk, (long)nyr * W, (const char *)Bp + bo, cout, nkb, NULL,
                              nvalid, NN_TG_ZERO, store_mode(prec));
        }
    }
}

/* ---- fp32 short forms ------------------------------------------------------------------------ */

size_t nn_convt3d_ws_floats(int N, int D, int H, int W, int cin, int cout) {
    return nn_convt3d_ws_floats_p(N, D, H, W, cin, cout, NN_FP32);
}

void nn_convt3d_forward(float *out, const float *in, const float *w, const float *b, int cin,
                        int cout, int N, int D, int H, int W, float *ws) {
    nn_convt3d_forward_p(out, in, w, b, cin, cout, N, D, H, W, NN_FP32, ws);
}

void nn_convt3d_backward(float *din, float *dw, float *db, const float *dout, long ldo,
                         const float *in, const float *w, int cin, int cout, int N, int D, int H,
                         int W, float *ws) {
    nn_convt3d_backward_p(din, dw, db, dout, ldo, in, w, cin, cout, N, D, H, W, NN_FP32, ws);
}
