/* kern_tmpl: the microkernels of gemm.h written once with GCC vector extensions and compiled by
 * each kern_<isa>.c under its own target (included, never compiled alone).
 *
 * The includer defines, before including:
 *   KT_VW      floats per vector (16, 8, 4)
 *   KT_SYM     name of the nn_kern table to define (e.g. nn_kern_avx2)
 *   KT_NAME    its printable name
 *   KT_MR1..KT_MR4  largest position block for 1..4 vectors (KT_MR4 0: no 4-vector blocks)
 *   KT_PREFNV  block width (vectors) for wide outputs
 *
 * RATIONALE: the accumulators must live in registers for the whole reduction; GCC keeps a
 * constant-indexed local vector array in registers only when the loops over it are fully
 * unrolled with compile-time bounds, hence one instantiation per (positions, vectors) pair.
 * Block shapes are chosen so accumulators + B vectors + one broadcast fit the register file
 * (16 registers: 6x2, 4x3; 32 registers: 14x2, 8x3, 6x4): a shape that does not fit makes the
 * compiler reload B from memory on every FMA, which costs a third of the speed on AVX2. */
#include "nn/kern.h"

#include <string.h>

typedef float kt_vf __attribute__((vector_size(KT_VW * sizeof(float)), aligned(4), may_alias));
typedef uint32_t kt_vu __attribute__((vector_size(KT_VW * sizeof(float))));

/* fp32 -> the nearest bf16 (ties to even), as fp32. NaN payloads are not preserved (a NaN may
 * become infinite), which only matters once training has already failed. */
static inline __attribute__((always_inline)) kt_vf kt_round_bf16(kt_vf v) {
    kt_vu u = (kt_vu)v;
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    return (kt_vf)u;
}

#define KT_LOAD(p) (*(const kt_vf *)(p))
#define KT_STORE(p, v) (*(kt_vf *)(p) = (v))
#ifndef KT_STREAM /* the includer's non-temporal store of a vector to an aligned address */
#define KT_STREAM(p, v) KT_STORE(p, v)
#endif

/* The first n floats at p as a vector (zeros past n), and the first n lanes of v to p: the last
 * partial vector of channels in the Winograd transforms. */
static inline __attribute__((always_inline)) kt_vf kt_load_n(const float *p, int n) {
    if (n == KT_VW)
        return KT_LOAD(p);
    kt_vf v = {0};
    for (int k = 0; k < n; k++)
        v[k] = p[k];
    return v;
}

static inline __attribute__((always_inline)) void kt_store_n(float *p, kt_vf v, int n) {
    if (n == KT_VW)
        KT_STORE(p, v);
    else
        for (int k = 0; k < n; k++)
            p[k] = v[k];
}
#define KT_MRMAX 16

/* r[j][i] = r[i][j] for the KT_VW x KT_VW block in r (row i = vector i): log2(KT_VW) rounds of
 * two-vector shuffles, round s swapping the off-diagonal s x s blocks of each pair of rows s
 * apart (constant masks: one permute instruction each on AVX-512). */
typedef int32_t kt_vi __attribute__((vector_size(KT_VW * sizeof(float))));
static inline __attribute__((always_inline)) void kt_transpose(kt_vf r[KT_VW]) {
    kt_vi iota;
    for (int j = 0; j < KT_VW; j++)
        iota[j] = j;
#pragma GCC unroll 4
    for (int s = KT_VW / 2; s >= 1; s /= 2) {
        const kt_vi sel = (iota & s) != 0, lo = iota + (sel & (KT_VW - s)),
                    hi = iota + s + (sel & (KT_VW - s));
#pragma GCC unroll 16
        for (int i = 0; i < KT_VW; i++)
            if (!(i & s)) {
                const kt_vf a = r[i], b = r[i + s];
                r[i] = __builtin_shuffle(a, b, lo);
                r[i + s] = __builtin_shuffle(a, b, hi);
            }
    }
}

/* ---- tap GEMM ------------------------------------------------------------------------------ */

static inline __attribute__((always_inline)) void
kt_tg(const nn_tg *restrict g, const float *const *ap, const float *restrict Bp,
      float *const *cp, const float *restrict bias, int nvalid, int mode, const int MR,
      const int NV) {
    const int nr = NV * KT_VW, rnd = mode & NN_TG_RBF16, stream = mode & NN_TG_STREAM;
    mode &= 3;
    kt_vf acc[KT_MRMAX][NN_KERN_MAXNV];
    float tmp[NN_KERN_MAXNV * KT_VW];
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++) {
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) {
            if (mode == NN_TG_BIAS) {
                acc[m][j] = KT_LOAD(bias + j * KT_VW);
            } else if (mode == NN_TG_ACCUM) {
                if (nvalid == nr) {
                    acc[m][j] = KT_LOAD(cp[m] + j * KT_VW);
                } else {
                    memset(tmp, 0, sizeof tmp);
                    memcpy(tmp, cp[m], (size_t)nvalid * sizeof(float));
                    acc[m][j] = KT_LOAD(tmp + j * KT_VW);
                }
            } else {
                acc[m][j] = (kt_vf){0};
            }
        }
    }
    const int T = g->T, K = g->K;
    for (int t = 0; t < T; t++) {
        const float *a[KT_MRMAX];
#pragma GCC unroll 16
        for (int m = 0; m < MR; m++)
            a[m] = ap[m] + g->aoff[t];
        const float *restrict b = Bp + (size_t)t * K * nr;
        for (int k = 0; k < K; k++) {
            kt_vf bv[NN_KERN_MAXNV];
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                bv[j] = KT_LOAD(b + (size_t)k * nr + j * KT_VW);
#pragma GCC unroll 16
            for (int m = 0; m < MR; m++) {
                const float av = a[m][k];
#pragma GCC unroll 4
                for (int j = 0; j < NV; j++)
                    acc[m][j] += bv[j] * av;
            }
        }
    }
    if (rnd) {
#pragma GCC unroll 16
        for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                acc[m][j] = kt_round_bf16(acc[m][j]);
    }
    if (nvalid == nr && stream) {
#pragma GCC unroll 16
        for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                KT_STREAM(cp[m] + j * KT_VW, acc[m][j]);
    } else if (nvalid == nr) {
#pragma GCC unroll 16
        for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                KT_STORE(cp[m] + j * KT_VW, acc[m][j]);
    } else {
#pragma GCC unroll 16
        for (int m = 0; m < MR; m++) {
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                KT_STORE(tmp + j * KT_VW, acc[m][j]);
            memcpy(cp[m], tmp, (size_t)nvalid * sizeof(float));
        }
    }
}

/* ---- weight-gradient tile ------------------------------------------------------------------ */

static inline __attribute__((always_inline)) void
kt_tw(int nrows, const float *const *arows, const float *const *grows, int X, long lda, long ldg,
      float *restrict Wt, long ldw, int init, const int MR, const int NV) {
    kt_vf acc[KT_MRMAX][NN_KERN_MAXNV];
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++)
            acc[m][j] = init ? (kt_vf){0} : KT_LOAD(Wt + m * ldw + j * KT_VW);
    for (int r = 0; r < nrows; r++) {
        const float *restrict a = arows[r];
        const float *restrict gg = grows[r];
        for (int x = 0; x < X; x++) {
            kt_vf gv[NN_KERN_MAXNV];
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                gv[j] = KT_LOAD(gg + x * ldg + j * KT_VW);
#pragma GCC unroll 16
            for (int m = 0; m < MR; m++) {
                const float av = a[x * lda + m];
#pragma GCC unroll 4
                for (int j = 0; j < NV; j++)
                    acc[m][j] += gv[j] * av;
            }
        }
    }
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++)
            KT_STORE(Wt + m * ldw + j * KT_VW, acc[m][j]);
}

#include "nn/kern_wino16.h"

/* ---- Winograd F(4x4x2, 3x3x3) transforms (conv_wino.c) ---------------------------------------
 * A tile is 2 outputs along z (F(2,3)) by 4 along y and x (F(4,3)); its input block is 4 x 6 x 6
 * points and its transform has 144 points xi = 36a + 6b + c (a along z, b along y, c along x).
 *   F(2,3): B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], A^T = [1 1 1 0; 0 1 -1 -1];
 *   F(4,3) (points 0, 1, -1, 2, -2, inf): B^T rows [4 0 -5 0 1 0], [0 -4 -4 1 1 0],
 *   [0 4 -4 -1 1 0], [0 -2 -1 2 1 0], [0 2 -1 -2 1 0], [0 4 0 -5 0 1]; A^T rows
 *   [1 1 1 1 1 0], [0 1 -1 2 -2 0], [0 1 1 4 4 0], [0 1 -1 8 -8 1].
 * Input: V[xi * ldv + k] = (B^T d B)[xi] along x, y, z of the block d at P (point (a, b, c) at
 * P + a*plane + b*row + c*C). Output: the 2x4x4 outputs A^T M A from M[xi * ldm + j], the first
 * ncol columns, to out + a*oplane + b*orow + c*ncol. One vector of channels at a time; a last
 * partial vector goes through a zero-padded copy. */
static inline __attribute__((always_inline)) void kt_bt4(kt_vf r[6], const kt_vf d[6]) {
    const kt_vf t1 = d[4] - 4.0f * d[2], t2 = d[3] - 4.0f * d[1];
    const kt_vf t3 = d[4] - d[2], t4 = 2.0f * (d[3] - d[1]);
    r[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
    r[1] = t1 + t2;
    r[2] = t1 - t2;
    r[3] = t3 + t4;
    r[4] = t3 - t4;
    r[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
}

static inline __attribute__((always_inline)) void kt_at4(kt_vf o[4], const kt_vf m[6]) {
    const kt_vf s12 = m[1] + m[2], d12 = m[1] - m[2], s34 = m[3] + m[4], d34 = m[3] - m[4];
    o[0] = m[0] + s12 + s34;
    o[1] = d12 + 2.0f * d34;
    o[2] = s12 + 4.0f * s34;
    o[3] = d12 + 8.0f * d34 + m[5];
}

/* Where a transform writes its values (KT_ST_*): fp32, bf16, or one half of a tile pair's
 * 32-bit words (kw_store_pair: the even or the odd tile). The point set (pts): 0 fp32 Winograd's
 * (0, +-1, +-2), 1 winograd-bf16's (kern_wino16.h). Both are compile-time constants of each
 * caller, so each instance is straight-line code of its own. */
enum { KT_ST_F32 = 0, KT_ST_BF16 = 1, KT_ST_PAIR_EVEN = 2, KT_ST_PAIR_ODD = 3 };

static inline __attribute__((always_inline)) void kt_bt(kt_vf r[6], const kt_vf d[6],
                                                        const int pts) {
    if (pts)
        kw_bt4(r, d);
    else
        kt_bt4(r, d);
}

static inline __attribute__((always_inline)) void kt_at(kt_vf o[4], const kt_vf m[6],
                                                        const int pts) {
    if (pts)
        kw_at4(o, m);
    else
        kt_at4(o, m);
}

static inline __attribute__((always_inline)) void kt_put(void *V, long at, kt_vf v, int n,
                                                         const int st) {
    if (st == KT_ST_F32)
        kt_store_n((float *)V + at, v, n);
    else if (st == KT_ST_BF16)
        kw_store16((uint16_t *)V + at, v, n);
    else
        kw_store_pair((uint32_t *)V + at, v, n, st == KT_ST_PAIR_ODD);
}

/* The input transform of one vector of channels (nk of them) of the tile at P into V + k0
 * (elements of the store's kind). z first, on the loaded values: each of its four output planes
 * is the sum or difference of two input planes, so one plane's 36 values (x, then y) stay in
 * registers, where transforming along x and y first sent all 144 through the stack twice (32^3
 * 128 -> 64 forward 1.06x). What bounds it now is the loads of the padded input. */
static inline __attribute__((always_inline)) void kt_wi_vec(void *V, long k0, long ldv,
                                                            const float *P, long plane, long row,
                                                            long C, int nk, const int pts,
                                                            const int st, const int a0,
                                                            const int na) {
    /* B^T of F(2,3): plane a = input plane za[a] + sign * input plane zb[a] */
    static const int za[4] = {0, 1, 2, 1}, zb[4] = {2, 2, 1, 3};
    for (int a = a0; a < a0 + na; a++) {
        kt_vf t[6][6];
        for (int b = 0; b < 6; b++) {
            kt_vf d[6];
            for (int c = 0; c < 6; c++) {
                const float *q = P + b * row + c * C;
                const kt_vf u = kt_load_n(q + za[a] * plane, nk);
                const kt_vf w = kt_load_n(q + zb[a] * plane, nk);
                d[c] = a == 1 ? u + w : u - w;
            }
            kt_bt(t[b], d, pts);
        }
        for (int c = 0; c < 6; c++) {
            kt_vf d[6], r[6];
            for (int b = 0; b < 6; b++)
                d[b] = t[b][c];
            kt_bt(r, d, pts);
            for (int b = 0; b < 6; b++)
                kt_put(V, ((a - a0) * 36 + b * 6 + c) * ldv + k0, r[b], nk, st);
        }
    }
}

static inline __attribute__((always_inline)) void
kt_wino_in_st(void *V, long ldv, const float *P, long plane, long row, long vox, int C,
              const int pts, const int st, const int a0, const int na) {
    int k0 = 0;
    for (; k0 + KT_VW <= C; k0 += KT_VW)
        kt_wi_vec(V, k0, ldv, P + k0, plane, row, vox, KT_VW, pts, st, a0, na);
    if (k0 < C)
        kt_wi_vec(V, k0, ldv, P + k0, plane, row, vox, C - k0, pts, st, a0, na);
}

/* The plane groups a pass may take (gemm.h nn_wino_input): each an instance of its own, so that
 * the loops over the planes stay straight-line code. */
#define KT_ZG_CASES(F)                                                                            \
    switch (a0 * 8 + na) {                                                                        \
    case 2: F(0, 2); break;                                                                       \
    case 18: F(2, 2); break;                                                                      \
    case 1: F(0, 1); break;                                                                       \
    case 9: F(1, 1); break;                                                                       \
    case 17: F(2, 1); break;                                                                      \
    case 25: F(3, 1); break;                                                                      \
    default: F(0, 4); break;                                                                      \
    }

static void kt_wino_in(float *V, long ldv, const float *P, long plane, long row, long vox, int C,
                       int a0, int na) {
#define KT_WI_F(A0, NA) kt_wino_in_st(V, ldv, P, plane, row, vox, C, 0, KT_ST_F32, A0, NA)
    KT_ZG_CASES(KT_WI_F)
#undef KT_WI_F
}

/* The output transform of one vector of columns: z first, as in kt_wi_vec (each output plane
 * sums three of M's planes), then x and y on one plane's 36 values in registers. */
static inline __attribute__((always_inline)) void kt_wo_vec(float *out, long oplane, long orow,
                                                            long ncol, const float *M, long ldm,
                                                            int nc, const int pts, const int a0,
                                                            const int na) {
    /* A^T of F(2,3): out0 = m0 + m1 + m2, out1 = m1 - m2 - m3; M holds planes [a0, a0 + na).
     * An output plane's first plane stores it, the later ones add to it (nn_wino_output). */
    static const int co[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
    for (int a = 0; a < 2; a++) {
        int zf = a0; /* the first plane of the group that output plane a takes */
        while (zf < a0 + na && !co[a][zf])
            zf++;
        if (zf == a0 + na)
            continue;
        const int first = a == 0 ? a0 == 0 : a0 <= 1;
        kt_vf e[6][4];
        for (int b = 0; b < 6; b++) {
            kt_vf m[6];
            for (int c = 0; c < 6; c++) {
                const float *q = M + (b * 6 + c) * ldm;
                const kt_vf v0 = KT_LOAD(q + (zf - a0) * 36 * ldm);
                m[c] = co[a][zf] > 0 ? v0 : -v0;
                for (int z = zf + 1; z < a0 + na; z++) {
                    const kt_vf v = KT_LOAD(q + (z - a0) * 36 * ldm);
                    if (co[a][z] > 0)
                        m[c] += v;
                    else if (co[a][z] < 0)
                        m[c] -= v;
                }
            }
            kt_at(e[b], m, pts);
        }
        for (int c = 0; c < 4; c++) {
            kt_vf m[6], o[4];
            for (int b = 0; b < 6; b++)
                m[b] = e[b][c];
            kt_at(o, m, pts);
            for (int b = 0; b < 4; b++) {
                float *p = out + a * oplane + b * orow + c * ncol;
                if (first)
                    kt_store_n(p, o[b], nc);
                else
                    kt_store_n(p, kt_load_n(p, nc) + o[b], nc);
            }
        }
    }
}

/* M's rows are padded to whole column blocks (multiples of the vector width): the last vector
 * may be read whole. */
static inline __attribute__((always_inline)) void kt_wino_out_p(float *out, long oplane, long orow,
                                                                long ovox, int ncol,
                                                                const float *M, long ldm,
                                                                const int pts, const int a0,
                                                                const int na) {
    int c0 = 0;
    for (; c0 + KT_VW <= ncol; c0 += KT_VW)
        kt_wo_vec(out + c0, oplane, orow, ovox, M + c0, ldm, KT_VW, pts, a0, na);
    if (c0 < ncol)
        kt_wo_vec(out + c0, oplane, orow, ovox, M + c0, ldm, ncol - c0, pts, a0, na);
}

static void kt_wino_out(float *out, long oplane, long orow, long ovox, int ncol, const float *M,
                        long ldm, int a0, int na) {
#define KT_WO_F(A0, NA) kt_wino_out_p(out, oplane, orow, ovox, ncol, M, ldm, 0, A0, NA)
    KT_ZG_CASES(KT_WO_F)
#undef KT_WO_F
}

/* The adjoint of kt_at4: dm = A dy, dm0 = y0, dm1..4 = y0 + (±1)y1 + y2 + (±1)y3 and
 * y0 + (±2)y1 + 4y2 + (±8)y3, dm5 = y3. */
static inline __attribute__((always_inline)) void kt_a4(kt_vf r[6], const kt_vf y[4]) {
    const kt_vf s02 = y[0] + y[2], s13 = y[1] + y[3];
    const kt_vf p = y[0] + 4.0f * y[2], q = 2.0f * y[1] + 8.0f * y[3];
    r[0] = y[0];
    r[1] = s02 + s13;
    r[2] = s02 - s13;
    r[3] = p + q;
    r[4] = p - q;
    r[5] = y[3];
}

/* Output-gradient transform of the weight gradient: dM = A dY A^T along x, y (kt_a4) and z (the
 * adjoint of F(2,3)'s output transform: dM0 = y0, dM1 = y0 + y1, dM2 = y0 - y1, dM3 = -y1) of
 * the 2x4x4 block at dy (point (a, b, c) at dy + a*plane + b*row + c*ldy), columns [0, ncp):
 * zero past ncol. */
static inline __attribute__((always_inline)) void
kt_wino_gout_st(void *Mo, long ldm, const float *dy, long plane, long row, long ldy, int ncol,
                int ncp, const int pts, const int st, const int a0, const int na) {
    for (int c0 = 0; c0 < ncp; c0 += KT_VW) {
        const int nc = ncol - c0 >= KT_VW ? KT_VW : ncol > c0 ? ncol - c0 : 0;
        /* z first, as in kt_wi_vec: plane a of dM is dy0, dy0 + dy1, dy0 - dy1 or -dy1 */
        for (int a = a0; a < a0 + na; a++) {
            kt_vf g[4][6];
            for (int b = 0; b < 4; b++) {
                kt_vf y[4];
                for (int c = 0; c < 4; c++) {
                    const float *q = dy + b * row + c * ldy + c0;
                    const kt_vf y0 = kt_load_n(q, nc), y1 = kt_load_n(q + plane, nc);
                    if (a == 0)
                        y[c] = y0;
                    else if (a == 1)
                        y[c] = y0 + y1;
                    else if (a == 2)
                        y[c] = y0 - y1;
                    else
                        y[c] = -y1;
                }
                if (pts)
                    kw_a4(g[b], y);
                else
                    kt_a4(g[b], y);
            }
            for (int c = 0; c < 6; c++) {
                kt_vf y[4], r[6];
                for (int b = 0; b < 4; b++)
                    y[b] = g[b][c];
                if (pts)
                    kw_a4(r, y);
                else
                    kt_a4(r, y);
                for (int b = 0; b < 6; b++)
                    kt_put(Mo, ((a - a0) * 36 + b * 6 + c) * ldm + c0, r[b], KT_VW, st);
            }
        }
    }
}

static void kt_wino_gout(float *Mo, long ldm, const float *dy, long plane, long row, long ldy,
                         int ncol, int ncp, int a0, int na) {
#define KT_WG_F(A0, NA)                                                                           \
    kt_wino_gout_st(Mo, ldm, dy, plane, row, ldy, ncol, ncp, 0, KT_ST_F32, A0, NA)
    KT_ZG_CASES(KT_WG_F)
#undef KT_WG_F
}

/* ---- Winograd weight transforms (conv_wino.c) -----------------------------------------------
 * U = G g G^T of KT_VW columns side by side (lane v = column v), F(4,3) along x and y and F(2,3)
 * along z, G the 6x3 (4x3) matrix of the points 0, 1, -1, 2, -2, inf (0, 1, -1, inf). The paths
 * with FMA may fuse a product and a sum, so their last bits differ from the others' (as the
 * GEMM kernels' do). */
static inline __attribute__((always_inline)) void kt_g6(kt_vf r[6], kt_vf g0, kt_vf g1,
                                                         kt_vf g2) {
    r[0] = 0.25f * g0;
    r[1] = (g0 + g1 + g2) * (-1.0f / 6);
    r[2] = (g0 - g1 + g2) * (-1.0f / 6);
    r[3] = g0 * (1.0f / 24) + g1 * (1.0f / 12) + g2 * (1.0f / 6);
    r[4] = g0 * (1.0f / 24) - g1 * (1.0f / 12) + g2 * (1.0f / 6);
    r[5] = g2;
}

/* Column v (< nc; zeros past it) of the kernels at w + v * sc, tap t = 9z + 3y + x at [t] (or
 * [26 - t] when flip) -> u[xi * su + v] (xi = 36a + 6b + c), whole vectors. round: the taps
 * rounded to bf16 first (a bf16 run's weights; in vectors here, where a scalar copy had cost 11%
 * of an 8^3 512 -> 512 bf16 pass). */
static inline __attribute__((always_inline)) void kt_wino_w_p(float *u, long su, const float *w,
                                                              long sc, int flip, int nc,
                                                              int round, const int pts) {
    float g[27 * KT_VW] __attribute__((aligned(64)));
    /* column by column: each reads its 27 taps in one run, KT_VW at a time as the rows of a
     * square block transposed in registers (the last block ends at tap 26, overlapping the one
     * before: no read past the run); element by element, the copy took about half of this
     * transform on AVX-512 */
    if (nc == KT_VW)
        for (int t0 = 0; t0 < 27; t0 += KT_VW) {
            const int o = t0 + KT_VW <= 27 ? t0 : 27 - KT_VW;
            kt_vf r[KT_VW];
            for (int v = 0; v < KT_VW; v++)
                r[v] = KT_LOAD(w + v * sc + o);
            kt_transpose(r);
            for (int i = 0; i < KT_VW; i++)
                KT_STORE(g + (flip ? 26 - (o + i) : o + i) * KT_VW, r[i]);
        }
    else
        for (int v = 0; v < KT_VW; v++)
            for (int t = 0; t < 27; t++)
                g[t * KT_VW + v] = v < nc ? w[v * sc + (flip ? 26 - t : t)] : 0.0f;
    if (round)
        for (int t = 0; t < 27; t++)
            KT_STORE(g + t * KT_VW, kt_round_bf16(KT_LOAD(g + t * KT_VW)));
    kt_vf a[3][3][6]; /* [z][y][x point] */
    for (int z = 0; z < 3; z++)
        for (int y = 0; y < 3; y++) {
            const float *p = g + (z * 9 + y * 3) * KT_VW;
            if (pts)
                kw_g6(a[z][y], KT_LOAD(p), KT_LOAD(p + KT_VW), KT_LOAD(p + 2 * KT_VW));
            else
                kt_g6(a[z][y], KT_LOAD(p), KT_LOAD(p + KT_VW), KT_LOAD(p + 2 * KT_VW));
        }
    for (int c = 0; c < 6; c++) {
        kt_vf b[3][6]; /* [z][y point] */
        for (int z = 0; z < 3; z++)
            if (pts)
                kw_g6(b[z], a[z][0][c], a[z][1][c], a[z][2][c]);
            else
                kt_g6(b[z], a[z][0][c], a[z][1][c], a[z][2][c]);
        for (int bb = 0; bb < 6; bb++) {
            const kt_vf g0 = b[0][bb], g1 = b[1][bb], g2 = b[2][bb];
            const kt_vf r[4] = {g0, 0.5f * (g0 + g1 + g2), 0.5f * (g0 - g1 + g2), g2};
            for (int aa = 0; aa < 4; aa++)
                KT_STORE(u + (aa * 36 + bb * 6 + c) * su, r[aa]);
        }
    }
}

static void kt_wino_w(float *u, long su, const float *w, long sc, int flip, int nc, int round) {
    kt_wino_w_p(u, su, w, sc, flip, nc, round, 0);
}

/* G^T of kt_g6 (6 points -> 3 values). */
static inline __attribute__((always_inline)) void kt_gt6(kt_vf w[3], const kt_vf u[6]) {
    const kt_vf s12 = u[1] + u[2], s34 = u[3] + u[4];
    w[0] = 0.25f * u[0] - s12 * (1.0f / 6) + s34 * (1.0f / 24);
    w[1] = (u[2] - u[1]) * (1.0f / 6) + (u[3] - u[4]) * (1.0f / 12);
    w[2] = (s34 - s12) * (1.0f / 6) + u[5];
}

/* The weight gradient's G^T dU G: u[xi * su + v] (whole vectors readable) -> d[t * KT_VW + v]
 * for the 27 taps. */
static inline __attribute__((always_inline)) void kt_wino_wgt_p(float *d, const float *u, long su,
                                                                int round, const int pts) {
    kt_vf a[4][6][3]; /* [z point][y point][x] */
    for (int aa = 0; aa < 4; aa++)
        for (int bb = 0; bb < 6; bb++) {
            kt_vf m[6];
            for (int c = 0; c < 6; c++)
                m[c] = KT_LOAD(u + (aa * 36 + bb * 6 + c) * su);
            if (pts)
                kw_gt6(a[aa][bb], m);
            else
                kt_gt6(a[aa][bb], m);
        }
    for (int x = 0; x < 3; x++) {
        kt_vf b[4][3]; /* [z point][y] */
        for (int aa = 0; aa < 4; aa++) {
            kt_vf m[6];
            for (int bb = 0; bb < 6; bb++)
                m[bb] = a[aa][bb][x];
            if (pts)
                kw_gt6(b[aa], m);
            else
                kt_gt6(b[aa], m);
        }
        for (int y = 0; y < 3; y++) {
            const kt_vf u0 = b[0][y], u1 = b[1][y], u2 = b[2][y], u3 = b[3][y];
            const kt_vf s12 = u1 + u2;
            kt_vf r[3] = {u0 + 0.5f * s12, 0.5f * (u1 - u2), 0.5f * s12 + u3};
            for (int z = 0; z < 3; z++)
                KT_STORE(d + (z * 9 + y * 3 + x) * KT_VW, round ? kt_round_bf16(r[z]) : r[z]);
        }
    }
}

static void kt_wino_wgt(float *d, const float *u, long su, int round) {
    kt_wino_wgt_p(d, u, su, round, 0);
}

/* winograd-bf16's instances (gemm.h nn_wino16_*) */
static void kw_wino_in16(uint16_t *V, long ldv, const float *P, long plane, long row, long vox,
                         int C) {
    kt_wino_in_st(V, ldv, P, plane, row, vox, C, 1, KT_ST_BF16, 0, 4);
}

static void kw_wino_in16p(uint32_t *V, long ldv, const float *P, long plane, long row, long vox,
                          int C, int odd) {
    if (odd)
        kt_wino_in_st(V, ldv, P, plane, row, vox, C, 1, KT_ST_PAIR_ODD, 0, 4);
    else
        kt_wino_in_st(V, ldv, P, plane, row, vox, C, 1, KT_ST_PAIR_EVEN, 0, 4);
}

static void kw_wino_out16(float *out, long oplane, long orow, long ovox, int ncol, const float *M,
                          long ldm) {
    kt_wino_out_p(out, oplane, orow, ovox, ncol, M, ldm, 1, 0, 4);
}

static void kw_wino_gout16p(uint32_t *Mo, long ldm, const float *dy, long plane, long row,
                            long ldy, int ncol, int ncp, int odd) {
    if (odd)
        kt_wino_gout_st(Mo, ldm, dy, plane, row, ldy, ncol, ncp, 1, KT_ST_PAIR_ODD, 0, 4);
    else
        kt_wino_gout_st(Mo, ldm, dy, plane, row, ldy, ncol, ncp, 1, KT_ST_PAIR_EVEN, 0, 4);
}

/* winograd-bf16's weight transform straight into vdpbf16ps's pairs: the columns of k (at w)
 * and of k + 1 (at w1; NULL: the high halves zero) -> u[xi * su + v] = bf16(U_k) | bf16(U_k+1)
 * << 16. Each k's fp32 transform goes to a buffer in L1 first, so U's row of a point gets one
 * whole-vector store (a transform into a staging buffer and a separate packing pass over it
 * were a third of an 8^3 bf16 pass). */
static void kw_wino_w16(uint32_t *u, long su, const float *w, const float *w1, long sc, int flip,
                        int nc, int round) {
    float b0[144 * KT_VW], b1[144 * KT_VW];
    kt_wino_w_p(b0, KT_VW, w, sc, flip, nc, round, 1);
    if (w1)
        kt_wino_w_p(b1, KT_VW, w1, sc, flip, nc, round, 1);
    for (int xi = 0; xi < 144; xi++) {
        kt_vu r = kw_lo16(KT_LOAD(b0 + xi * KT_VW));
        if (w1)
            r |= kw_hi16(KT_LOAD(b1 + xi * KT_VW));
        memcpy(u + xi * su, &r, sizeof r);
    }
}

static void kw_wino_wgt16(float *d, const float *u, long su, int round) {
    kt_wino_wgt_p(d, u, su, round, 1);
}

/* ---- Adam ---------------------------------------------------------------------------------- */

/* The Adam update of n parameters (optim.c), written as scalar code for the vectorizer: built
 * for the baseline ISA it ran one sqrtss and two divss per parameter, about 11 ms of a 5.4 M
 * parameter step, where the vector forms are bound by memory. */
static void kt_adam(float *restrict p, float *restrict m, float *restrict v,
                    const float *restrict g, long n, const nn_adam_coef *c) {
    const float b1 = c->b1, b2 = c->b2, eps = c->eps, step = c->step_size, bc2s = c->bc2s;
    for (long i = 0; i < n; i++) {
        const float gi = g[i];
        const float mi = b1 * m[i] + (1.0f - b1) * gi;
        const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= step * mi / (__builtin_sqrtf(vi) / bc2s + eps);
    }
}

/* ---- FMA peak loop ------------------------------------------------------------------------- */

/* 12 chains hide the FMA latency of every current core (4 cycles x 2 pipes needs 8; SSE2
 * mul + add, 3 + 3 cycles, needs more). The empty asm keeps each chain in a register. */
static float kt_fma_chains(long iters) {
    kt_vf b, c;
    for (int k = 0; k < KT_VW; k++) {
        b[k] = 1.0f + 1e-7f * (float)k;
        c[k] = 1e-8f;
    }
    kt_vf a0 = c, a1 = c + 1, a2 = c + 2, a3 = c + 3, a4 = c + 4, a5 = c + 5, a6 = c + 6,
          a7 = c + 7, a8 = c + 8, a9 = c + 9, a10 = c + 10, a11 = c + 11;
    for (long i = 0; i < iters; i++) {
        a0 = a0 * b + c, a1 = a1 * b + c, a2 = a2 * b + c, a3 = a3 * b + c;
        a4 = a4 * b + c, a5 = a5 * b + c, a6 = a6 * b + c, a7 = a7 * b + c;
        a8 = a8 * b + c, a9 = a9 * b + c, a10 = a10 * b + c, a11 = a11 * b + c;
        __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5),
                         "+x"(a6), "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11));
    }
    const kt_vf s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    return s[0];
}

/* ---- instantiation --------------------------------------------------------------------------- */

#define KT_INST(MR, NV)                                                                           \
    static void kt_tg_##MR##_##NV(const nn_tg *g, const float *const *a, const float *Bp,         \
                                  float *const *c, const float *bias, int nvalid, int mode) {     \
        kt_tg(g, a, Bp, c, bias, nvalid, mode, MR, NV);                                            \
    }                                                                                              \
    static void kt_tw_##MR##_##NV(int nrows, const float *const *ar, const float *const *gr,      \
                                  int X, long lda, long ldg, float *Wt, long ldw, int init) {      \
        kt_tw(nrows, ar, gr, X, lda, ldg, Wt, ldw, init, MR, NV);                                  \
    }

/* KT_SEQ_n(F, NV) applies F(m, NV) for m = 1..n; KT_LIST_n lists P##m##_##NV. */
#define KT_SEQ_3(F, NV) F(1, NV) F(2, NV) F(3, NV)
#define KT_SEQ_4(F, NV) KT_SEQ_3(F, NV) F(4, NV)
#define KT_SEQ_6(F, NV) KT_SEQ_4(F, NV) F(5, NV) F(6, NV)
#define KT_SEQ_8(F, NV) KT_SEQ_6(F, NV) F(7, NV) F(8, NV)
#define KT_SEQ_14(F, NV) KT_SEQ_8(F, NV) F(9, NV) F(10, NV) F(11, NV) F(12, NV) F(13, NV) F(14, NV)
#define KT_SEQ_16(F, NV) KT_SEQ_14(F, NV) F(15, NV) F(16, NV)
#define KT_SEQ(n) KT_SEQ_##n
#define KT_E(P, MR, NV) P##MR##_##NV,
#define KT_TG_E(MR, NV) KT_E(kt_tg_, MR, NV)
#define KT_TW_E(MR, NV) KT_E(kt_tw_, MR, NV)
#define KT_X(n, F, NV) KT_SEQ(n)(F, NV)
#define KT_INSTS(n, NV) KT_X(n, KT_INST, NV)
#define KT_TABLES(n, NV)                                                                          \
    static const nn_tg_fn kt_tgt_##NV[] = {KT_X(n, KT_TG_E, NV)};                                 \
    static const nn_tw_fn kt_twt_##NV[] = {KT_X(n, KT_TW_E, NV)};

KT_INSTS(KT_MR1, 1)
KT_TABLES(KT_MR1, 1)
KT_INSTS(KT_MR2, 2)
KT_TABLES(KT_MR2, 2)
KT_INSTS(KT_MR3, 3)
KT_TABLES(KT_MR3, 3)
#if KT_MR4
KT_INSTS(KT_MR4, 4)
KT_TABLES(KT_MR4, 4)
#define KT_T4(x) x##4
#define KT_MAXNV 4
#else
#define KT_T4(x) NULL
#define KT_MAXNV 3
#endif

const nn_kern KT_SYM = {
    .name = KT_NAME,
    .vw = KT_VW,
    .maxnv = KT_MAXNV,
    .prefnv = KT_PREFNV,
    .mr = {KT_MR1, KT_MR2, KT_MR3, KT_MR4},
    .tg = {kt_tgt_1, kt_tgt_2, kt_tgt_3, KT_T4(kt_tgt_)},
    .tw = {kt_twt_1, kt_twt_2, kt_twt_3, KT_T4(kt_twt_)},
    .fma_chains = kt_fma_chains,
    .wino_in = kt_wino_in,
    .wino_out = kt_wino_out,
    .wino_w = kt_wino_w,
    .wino_wgt = kt_wino_wgt,
    .wino_gout = kt_wino_gout,
    .wino_in16 = kw_wino_in16,
    .wino_out16 = kw_wino_out16,
    .wino_w16 = kw_wino_w16,
    .wino_wgt16 = kw_wino_wgt16,
    .wino_in16p = kw_wino_in16p,
    .wino_gout16p = kw_wino_gout16p,
    .adam = kt_adam,
};
