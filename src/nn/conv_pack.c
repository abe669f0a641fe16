/* conv_pack: the pieces every convolution pass is built from: weights packed into the
 * microkernels' column blocks (fp32, or bf16 pairs), the zero-padded input slab (fusing the skip
 * concatenation and the rounding to bf16), and the walks that run the kernels over a work item's
 * positions (conv_int.h says who uses what). */
#include "nn/conv_int.h"
#include "nn/settings.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* dst[i] = src[i] (fp32) or its bf16 rounding, for the nn_prec in use. */
void conv_copy_prec(float *dst, const float *src, size_t n, nn_prec prec) {
    if (prec == NN_BF16) {
        nn_round_bf16_to(dst, src, n);
    } else {
        memcpy(dst, src, n * sizeof(float));
    }
}

/* ---- packing ---------------------------------------------------------------------------- */

/* Bp, per column block ob and k block kb = [k0, k1), holds [t][k - k0][nr] at
 * ob*T*K*nr + T*k0*nr: w(col = ob*nr + j, k, t) with w addressed as w[col*sc + k*sk + t*st],
 * zero for col >= ncol; rounded to bf16 when prec says so. */
void conv_pack_b(float *Bp, const float *w, int ncol, int K, int T, long sc, long sk, long st,
                 int nr, int nkb, nn_prec prec) {
    const int nb = nblocks(ncol, nr);
#pragma omp parallel for collapse(2) schedule(static)
    for (int ob = 0; ob < nb; ob++)
        for (int kb = 0; kb < nkb; kb++) {
            int k0, k1;
            kb_range(K, nkb, kb, 2, &k0, &k1);
            float *blk = Bp + ((size_t)ob * T * K + (size_t)T * k0) * nr;
            /* A few k at a time, all taps: the source lines they touch (nr columns x PACK_KB
             * x T floats, 14 KiB at 27 taps) stay in L1 while every tap reads them. Taps
             * outermost re-read each line T times from beyond L2 for wide layers (8^3
             * 512->512: a 884 KiB block). */
            enum { PACK_KB = 8 };
            for (int kc = k0; kc < k1; kc += PACK_KB) {
                const int kce = kc + PACK_KB < k1 ? kc + PACK_KB : k1;
                for (int t = 0; t < T; t++)
                    for (int k = kc; k < kce; k++) {
                        float *dst = blk + ((size_t)t * (k1 - k0) + (k - k0)) * nr;
                        for (int j = 0; j < nr; j++) {
                            const int col = ob * nr + j;
                            const float v = col < ncol ? w[col * sc + k * sk + t * st] : 0.0f;
                            dst[j] = prec == NN_BF16 ? nn_bf16_round(v) : v;
                        }
                    }
            }
        }
}

/* The bf16 pair layout of conv_pack_b for Kp = K rounded up to even (k >= K is zero): per (ob, kb),
 * [t][(k - k0)/2][nr][2] at (ob*T*Kp + T*k0)*nr elements. */
/* conv_pack_b16, or with wlo conv_pack_b16_x3 (K of the weights, 3K rows). */
static void pack_b16(uint16_t *Bp, const float *w, const float *wlo, int ncol, int K, int T,
                     long sc, long sk, int nr, int nkb, int unit) {
    const int Kw = K; /* channels of w */
    if (wlo)
        K = 3 * Kw;
    const int nb = nblocks(ncol, nr), Kp = (K + 1) & ~1;
#pragma omp parallel for collapse(2) schedule(static)
    for (int ob = 0; ob < nb; ob++)
        for (int kb = 0; kb < nkb; kb++) {
            int k0, k1;
            kb_range(Kp, nkb, kb, unit, &k0, &k1);
            uint16_t *blk = Bp + ((size_t)ob * T * Kp + (size_t)T * k0) * nr;
            /* by k pair, then tap, then column: the lines of w a k pair reads (per column, its
             * runs of taps) stay in L1 over the taps; by tap first, every tap read them again
             * from memory (44% of an 8^3 512->512 pass). All taps of a pair at once
             * (nn_bf16_pack_taps): each column's run read in one piece, not element by element
             * with gathers (4.2 ms of a 5 / 64 bf16 step on a Xeon with AMX). */
            for (int k = k0; k < k1; k += 2) {
                uint16_t *dst = blk + (size_t)(k - k0) * nr;
                const long ldt = (long)(k1 - k0) * nr;
                const int nv = k < K ? (ncol - ob * nr < nr ? ncol - ob * nr : nr) : 0;
                /* x3: rows [0, 2Kw) are w's channels twice, [2Kw, 3Kw) wlo's (Kw even: a
                 * pair never straddles two of them) */
                const float *src = (!wlo || k < Kw ? w + (long)k * sk
                                    : k < 2 * Kw   ? w + (long)(k - Kw) * sk
                                                   : wlo + (long)(k - 2 * Kw) * sk) +
                                   ob * nr * sc;
                nn_bf16_pack_taps(dst, ldt, src, sc, sk, k + 1 < K, nv, T);
                for (int t = 0; nv < nr && t < T; t++)
                    memset(dst + t * ldt + 2 * nv, 0, sizeof(uint16_t) * 2 * (nr - nv));
            }
        }
}

void conv_pack_b16(uint16_t *Bp, const float *w, int ncol, int K, int T, long sc, long sk, int nr,
                   int nkb, int unit) {
    pack_b16(Bp, w, NULL, ncol, K, T, sc, sk, nr, nkb, unit);
}

void conv_pack_b16_x3(uint16_t *Bp, const float *w, const float *wlo, int ncol, int K, int T,
                      long sc, long sk, int nr, int nkb, int unit) {
    pack_b16(Bp, w, wlo, ncol, K, T, sc, sk, nr, nkb, unit);
}

/* Padded planes per slab: about SCAFFOLD_NN_SLAB_BYTES bytes (default NN_SETTINGS_SLAB_BYTES,
 * 48 MiB; tests: several slabs on small volumes), at least 1. */
size_t conv_slab_bytes(void) {
    return nn_settings()->slab_bytes;
}

/* Output planes per slab: depends on the shape only (so do results and workspace). A sharded
 * call pads the whole block (the halo exchange fills a block's border), see conv_slab_depth. */
static int slab_planes(int D, int H, int W, int C) {
    const size_t plane = (size_t)(H + 2) * (W + 2) * C * sizeof(float);
    long z = (long)(conv_slab_bytes() / (plane ? plane : 1)) - 2;
    return z < 1 ? 1 : z > D ? D : (int)z;
}

int conv_slab_depth(int D, int H, int W, int C, const nn_shard *sh) {
    return sh ? D : slab_planes(D, H, W, C);
}

/* Floats of a slab buffer (any format) for C channels. */
size_t conv_slab_floats(int D, int H, int W, int C, const nn_shard *sh) {
    return ((size_t)conv_slab_depth(D, H, W, C, sh) + 2) * (H + 2) * (W + 2) * ((C + 1) & ~1);
}

/* W voxels of cat(a (lda_ floats per voxel, ca of them), b (cb)) into d (C per voxel): the
 * channels copied by vector loops (a libc memcpy per input and voxel took about a third of a
 * concatenation's padding at 32^3 64 + 64) */
static NN_WIDE void pad_row_cat(float *restrict d, const float *restrict a, long lda_, int ca,
                                const float *restrict b, int cb, int W, int C, int round) {
    for (int x = 0; x < W; x++) {
        float *restrict o = d + (size_t)x * C;
        const float *restrict sa = a + (size_t)x * lda_;
        if (round)
            for (int c = 0; c < ca; c++)
                o[c] = nn_bf16_round(sa[c]);
        else
            for (int c = 0; c < ca; c++)
                o[c] = sa[c];
        if (!b)
            continue;
        const float *restrict sb = b + (size_t)x * cb;
        if (round)
            for (int c = 0; c < cb; c++)
                o[ca + c] = nn_bf16_round(sb[c]);
        else
            for (int c = 0; c < cb; c++)
                o[ca + c] = sb[c];
    }
}

/* The same in bf16 (PAD_BF16; C > ca + cb: the extra channel zero): a call of nn_bf16_pack per
 * input and voxel cost as much again as the conversion at 32^3 64 + 64 */
static NN_WIDE void pad_row_cat16(uint16_t *restrict d, const float *restrict a, long lda_,
                                  int ca, const float *restrict b, int cb, int W, int C) {
    for (int x = 0; x < W; x++) {
        uint16_t *restrict o = d + (size_t)x * C;
        const float *restrict sa = a + (size_t)x * lda_;
        for (int c = 0; c < ca; c++)
            o[c] = nn_bf16_bits(sa[c]);
        if (b) {
            const float *restrict sb = b + (size_t)x * cb;
            for (int c = 0; c < cb; c++)
                o[ca + c] = nn_bf16_bits(sb[c]);
        }
        if (C > ca + cb)
            o[C - 1] = 0;
    }
}

/* The same in PAD_BF16X3 (C = 3 (ca + cb)): hi = bf16(x), lo = bf16(x - hi), hi again, as
 * nn_bf16_pack and nn_bf16_lo_span make them (five calls per voxel before) */
static NN_WIDE void pad_row_x3(uint16_t *restrict d, const float *restrict a, long lda_, int ca,
                               const float *restrict b, int cb, int W) {
    const int K = ca + cb;
    for (int x = 0; x < W; x++)
        for (int part = 0; part < (b ? 2 : 1); part++) {
            const float *restrict s = part ? b + (size_t)x * cb : a + (size_t)x * lda_;
            uint16_t *restrict o = d + (size_t)x * 3 * K + (part ? ca : 0);
            const int n = part ? cb : ca;
            for (int c = 0; c < n; c++) {
                const float v = s[c];
                const uint16_t hi = nn_bf16_bits(v);
                o[c] = hi;
                o[K + c] = nn_bf16_bits(v - nn_bf16_round(v));
                o[2 * K + c] = hi;
            }
        }
}

void conv_pad_slab(void *P, int fmt, const float *a, long lda_, int ca, const float *b, int cb,
                   int n, int z0, int z1, int D, int H, int W) {
    const int C = pad_channels(fmt, ca + cb);
    const size_t es = pad_esize(fmt), rowb = (size_t)(W + 2) * C * es;
    const long Hp = H + 2, nz = z1 - z0 + 2;
#pragma omp parallel for collapse(2) schedule(static)
    for (long zs = 0; zs < nz; zs++)
        for (long yp = 0; yp < Hp; yp++) {
            char *row = (char *)P + ((size_t)zs * Hp + yp) * rowb;
            const long z = z0 - 1 + zs, y = yp - 1;
            if (z < 0 || z >= D || y < 0 || y >= H) { /* border row */
                memset(row, 0, rowb);
                continue;
            }
            memset(row, 0, C * es);
            memset(row + rowb - C * es, 0, C * es);
            const size_t src = (((size_t)n * D + z) * H + y) * W;
            /* one input alone, its voxels' channels consecutive: the row in one run (32^3 64
             * channels to bf16: 0.37 -> 0.30 ms, a call per voxel before; Xeon with AMX) */
            if (!cb && C == ca && lda_ == ca && (fmt == PAD_F32 || fmt == PAD_BF16)) {
                if (fmt == PAD_F32)
                    memcpy(row + C * es, a + src * ca, sizeof(float) * W * ca);
                else
                    nn_bf16_pack((uint16_t *)(row + C * es), a + src * ca, (long)W * ca);
                continue;
            }
            if (fmt == PAD_F32 || fmt == PAD_F32R) {
                pad_row_cat((float *)(row + C * es), a + src * lda_, lda_, ca,
                            b ? b + src * cb : NULL, cb, W, C, fmt == PAD_F32R);
                continue;
            }
            if (fmt == PAD_BF16)
                pad_row_cat16((uint16_t *)(row + C * es), a + src * lda_, lda_, ca,
                              b ? b + src * cb : NULL, cb, W, C);
            else /* PAD_BF16X3 */
                pad_row_x3((uint16_t *)(row + C * es), a + src * lda_, lda_, ca,
                           b ? b + src * cb : NULL, cb, W);
        }
}

void conv_walk_run(const nn_tg *g, const conv_walk *w, long M, const void *Bp, const float *bias,
                   int nvalid, int mode) {
    const int nbk = nn_tg_nblocks(M, g->nr);
    const size_t es = w->pairs ? sizeof(uint16_t) : sizeof(float);
    const char *a[NN_TG_MR_MAX];
    float *c[NN_TG_MR_MAX];
    /* position offsets stepped along rows (bytes of A, floats of C): sa per position, ra and
     * rc more per row */
    const long sa = w->a_col * (long)es, ra = (w->a_row - w->Wr * w->a_col) * (long)es,
               rc = w->c_row - w->Wr * w->c_col;
    long oa = 0, oc = 0, x = 0;
    /* Block b is [floor(M * b / nbk), floor(M * (b + 1) / nbk)): q positions, one more when
     * floor(rem * (b + 1) / nbk) steps, tracked without a division per block; the kernels of
     * the two sizes are looked up once. */
    const long q = M / nbk, rem = M % nbk;
    const nn_tg_fn kq = w->pairs ? NULL : nn_tg_kernel(g->nr, (int)q),
                   kq1 = w->pairs || !rem ? NULL : nn_tg_kernel(g->nr, (int)q + 1);
    const nn_tgb_fn bq = w->pairs ? nn_tgb_kernel(g->nr, (int)q) : NULL,
                    bq1 = w->pairs && rem ? nn_tgb_kernel(g->nr, (int)q + 1) : NULL;
    long err = 0;
    const long pf_step = (w->pf_bytes / 64 + nbk - 1) / nbk * 64;
    long pf_at = 0;
    for (int b = 0; b < nbk; b++) {
        for (long e = pf_at + pf_step; pf_at < e && pf_at < w->pf_bytes; pf_at += 64)
            __builtin_prefetch(w->pf + pf_at, 0, 2);
        int m = (int)q;
        err += rem;
        if (err >= nbk) {
            err -= nbk;
            m++;
        }
        for (int i = 0; i < m; i++) {
            a[i] = (const char *)w->a0 + oa;
            c[i] = w->c0 + oc;
            oa += sa, oc += w->c_col;
            if (++x == w->Wr) { /* next row */
                x = 0;
                oa += ra, oc += rc;
            }
        }
        if (w->pairs) {
            const nn_tgb_fn f = m == q ? bq : bq1;
            if (f)
                f(g, (const uint16_t *const *)a, Bp, c, bias, nvalid, mode);
            else
                nn_tg_block_bf16(g, m, (const uint16_t *const *)a, Bp, c, bias, nvalid, mode);
        } else
            (m == q ? kq : kq1)(g, (const float *const *)a, Bp, c, bias, nvalid, mode);
    }
}

/* The 32 positions of a tile pair (A rows a + r*sa, from r = 16 on a + a16 + (r - 16)*sa) on the
 * vdpbf16ps kernels, where the tiles' whole rows would read past the input (the walk's end). */
static void walk_amx_rows(const nn_tg *g, const uint16_t *a, long sa, long a16, float *const *c,
                          const void *Bp, const float *bias, int nvalid, int mode, int mr) {
    const uint16_t *ap[NN_TG_MR_MAX];
    float *cp[NN_TG_MR_MAX];
    int m = 0;
    for (int r = 0; r < 32; r++) {
        if (c[r])
            ap[m] = a + (r < 16 ? r * sa : a16 + (r - 16) * sa), cp[m++] = c[r];
        if (m && (m == mr || r == 31)) {
            nn_tg_block_bf16(g, m, ap, Bp, cp, bias, nvalid, mode);
            m = 0;
        }
    }
}

/* conv_walk_run on AMX: the positions taken as the padded rows they sit in (position x of row y
 * at padded position q = y*Lp + x, so A is one fixed stride apart), 32 padded positions per
 * call, the padding columns' results dropped (2 of Lp). Rows of 16 voxels go two per call and
 * rows of whole tiles one after the other, so that no tile computes padding. A block whose last
 * row's reads would pass the slab's end runs on the pair kernels instead. */
static void walk_amx(const nn_tg *g, const conv_walk *w, long M, const void *Bp, const float *bias,
                     int nvalid, int mode) {
    const long Lp = w->a_row / w->a_col, Q = (M / w->Wr - 1) * Lp + w->Wr;
    long maxoff = 0;
    for (int t = 0; t < g->T; t++)
        maxoff = g->aoff[t] > maxoff ? g->aoff[t] : maxoff;
    const uint16_t *a0 = w->a0, *end = w->a_end;
    const int mr = nn_tg_mr(g->nr);
    float *c[32];
    /* Rows of 16 voxels (16^3): two rows per 32 positions, the second tile of A rows on the next
     * row (g->a16), instead of tiles across the rows' padding (2 of every 18 positions) */
    if (w->Wr == 16 && Lp > 16) {
        const long nrow = M / 16;
        nn_tg g2 = *g;
        g2.a16 = Lp * w->a_col;
        for (long y = 0; y < nrow; y += 2) {
            for (int r = 0; r < 32; r++)
                c[r] = y + r / 16 < nrow
                           ? w->c0 + (y + r / 16) * w->c_row + (r % 16) * w->c_col
                           : NULL;
            const uint16_t *a = a0 + y * Lp * w->a_col;
            if (a + g2.a16 + 15 * w->a_col + maxoff + g->K <= end) {
                nn_tg_amx(&g2, a, w->a_col, Bp, c, bias, nvalid, mode);
                continue;
            }
            walk_amx_rows(g, a, w->a_col, g2.a16, c, Bp, bias, nvalid, mode, mr);
        }
        return;
    }
    long y = 0, x = 0;
    /* Rows of whole tiles (Wr a multiple of 32): each row's tiles, then the next row's,
     * skipping the padding positions between them, which a tile across two rows computes and
     * drops (32^3: 2 of every 34 positions) */
    const int by_row = w->Wr % 32 == 0 && Lp > w->Wr;
    for (long q0 = 0; q0 < Q; q0 += 32) {
        if (by_row && x >= w->Wr)
            q0 += Lp - x, x = 0, y++;
        if (q0 >= Q)
            break;
        for (int r = 0; r < 32; r++) {
            c[r] = q0 + r < Q && x < w->Wr ? w->c0 + y * w->c_row + x * w->c_col : NULL;
            if (++x == Lp)
                x = 0, y++;
        }
        const uint16_t *a = a0 + q0 * w->a_col;
        if (a + 31 * w->a_col + maxoff + g->K <= end) {
            nn_tg_amx(g, a, w->a_col, Bp, c, bias, nvalid, mode);
            continue;
        }
        walk_amx_rows(g, a, w->a_col, 16 * w->a_col, c, Bp, bias, nvalid, mode, mr);
    }
}

/* One work item over all k blocks of K (packed weights Bob of its column block): the first
 * block initialises C (mode0), the others add; `last` bits (rounding) apply to the last. */
void conv_walk_kblocks(nn_tg g, conv_walk w, long M, const void *Bob, int K, int nkb,
                       const float *bias, int nvalid, int mode0, int last) {
    const char *a0 = w.a0;
    const size_t es = w.pairs ? sizeof(uint16_t) : sizeof(float);
    for (int kb = 0; kb < nkb; kb++) {
        int k0, k1;
        kb_range(K, nkb, kb, w.amx ? 32 : 2, &k0, &k1);
        g.K = k1 - k0;
        w.a0 = a0 + (size_t)k0 * es;
        const int mode = (kb ? NN_TG_ACCUM : mode0) | (kb == nkb - 1 ? last : 0);
        const void *B = (const char *)Bob + (size_t)g.T * k0 * g.nr * es;
        if (w.amx)
            walk_amx(&g, &w, M, B, bias, nvalid, mode);
        else
            conv_walk_run(&g, &w, M, B, bias, nvalid, mode);
    }
}

/* Bias padded to whole column blocks (the kernels read nr floats of it), rounded in bf16. */
float *conv_bias_padded(float *dst, const float *b, int n, int nr, nn_prec prec) {
    const int np = nblocks(n, nr) * nr;
    for (int j = 0; j < np; j++)
        dst[j] = j < n ? (prec == NN_BF16 ? nn_bf16_round(b[j]) : b[j]) : 0.0f;
    return dst;
}
