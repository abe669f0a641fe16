/* conv: Conv3d (k3 p1), ConvTranspose3d (k2 s2) and the 1x1 output Conv3d, forward and backward,
 * in fp32 or bf16 (autocast semantics, see layers.h), on channels-last tensors, as implicit
 * GEMMs over taps (gemm.h), plus naive references.
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
#include "nn/algo.h"
#include "nn/gemm.h"
#include "nn/layers.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

int nn_threads(void) {
    int t = omp_get_max_threads();
    return t > NN_MAX_THREADS ? NN_MAX_THREADS : (t < 1 ? 1 : t);
}

void nn_set_threads(int n) {
    omp_set_num_threads(n > 0 ? n : 1);
}

static int nblocks(int n, int nr) {
    return (n + nr - 1) / nr;
}

/* Balanced split of n into nb parts: start of part b. */
static int split_at(int n, int nb, int b) {
    return (int)(((long)n * b) / nb);
}

/* ---- bf16 ------------------------------------------------------------------------------------ */

void nn_round_bf16(float *x, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        x[i] = nn_bf16_round(x[i]);
}

void nn_bf16_narrow(uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        dst[i] = (uint16_t)(u >> 16);
    }
}

void nn_bf16_widen(float *dst, const uint16_t *src, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, sizeof u);
    }
}

/* dst[i] = src[i] (fp32) or its bf16 rounding, for the nn_prec in use. */
static void copy_prec(float *dst, const float *src, size_t n, nn_prec prec) {
    if (prec == NN_BF16) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++)
            dst[i] = nn_bf16_round(src[i]);
    } else {
        memcpy(dst, src, n * sizeof(float));
    }
}

/* The mode bit that makes the kernels round their results to bf16. */
static int store_mode(nn_prec prec) {
    return prec == NN_BF16 ? NN_TG_RBF16 : 0;
}

/* The bf16 pair kernels (vdpbf16ps, or AMX tiles) exist for this precision: a capability, not a
 * choice (which algorithm runs a pass is algo.h's). */
static int use_pairs(nn_prec prec) {
    return prec == NN_BF16 && nn_isa_bf16dp();
}

/* ---- packing ---------------------------------------------------------------------------- */

/* Reduction blocks: the packed weights of one (column block, k block) pair, T*klen*nr floats,
 * stay in L2 while every position of a work item streams past them. Block edges fall on
 * multiples of `unit` k: 2 (the bf16 kernels take k in pairs), 32 on AMX (kunit). */
#define KBLOCK_BYTES (160u << 10)

static int kblocks(int K, int T, int nr, int unit) {
    const size_t bytes = (size_t)T * K * nr * sizeof(float);
    const int units = (K + unit - 1) / unit;
    int nkb = (int)((bytes + KBLOCK_BYTES - 1) / KBLOCK_BYTES);
    return nkb < 1 ? 1 : nkb > units ? units : nkb;
}

/* The bf16 walks (`pairs`): 0 none (fp32 kernels), PAIRS_DP the vdpbf16ps kernels, PAIRS_AMX
 * AMX tiles. The k granularity of a pair layer: 32 on AMX tiles (32 k per A tile), else 2. */
enum { PAIRS_DP = 1, PAIRS_AMX = 2 };
static int kunit(int pairs) {
    return pairs == PAIRS_AMX ? 32 : 2;
}

static void kb_range(int K, int nkb, int kb, int unit, int *k0, int *k1) {
    const int units = (K + unit - 1) / unit;
    *k0 = unit * split_at(units, nkb, kb);
    *k1 = unit * split_at(units, nkb, kb + 1);
    if (*k1 > K)
        *k1 = K;
}

/* Bp, per column block ob and k block kb = [k0, k1), holds [t][k - k0][nr] at
 * ob*T*K*nr + T*k0*nr: w(col = ob*nr + j, k, t) with w addressed as w[col*sc + k*sk + t*st],
 * zero for col >= ncol; rounded to bf16 when prec says so. */
static void pack_b(float *Bp, const float *w, int ncol, int K, int T, long sc, long sk, long st,
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

/* The bf16 pair layout of pack_b for Kp = K rounded up to even (k >= K is zero): per (ob, kb),
 * [t][(k - k0)/2][nr][2] at (ob*T*Kp + T*k0)*nr elements. */
static void pack_b16(uint16_t *Bp, const float *w, int ncol, int K, int T, long sc, long sk,
                     long st, int nr, int nkb, int unit) {
    const int nb = nblocks(ncol, nr), Kp = (K + 1) & ~1;
#pragma omp parallel for collapse(2) schedule(static)
    for (int ob = 0; ob < nb; ob++)
        for (int kb = 0; kb < nkb; kb++) {
            int k0, k1;
            kb_range(Kp, nkb, kb, unit, &k0, &k1);
            uint16_t *blk = Bp + ((size_t)ob * T * Kp + (size_t)T * k0) * nr;
            /* by k pair, then tap, then column: the lines of w a k pair reads (per column, its
             * runs of taps) stay in L1 over the taps; by tap first, every tap read them again
             * from memory (44% of an 8^3 512->512 pass) */
            for (int k = k0; k < k1; k += 2)
                for (int t = 0; t < T; t++) {
                    uint16_t *dst = blk + ((size_t)t * (k1 - k0) + (k - k0)) * nr;
                    const int nv = k < K ? (ncol - ob * nr < nr ? ncol - ob * nr : nr) : 0;
                    nn_bf16_pack_pairs(dst, w + ob * nr * sc + k * sk + t * st, sc, sk, k + 1 < K,
                                       nv);
                    memset(dst + 2 * nv, 0, sizeof(uint16_t) * 2 * (nr - nv));
                }
        }
}

/* ---- padded input ---------------------------------------------------------------------------
 * A convolution reads its input through a zero-padded copy, made one z slab at a time: for
 * output planes [z0, z1) of sample n, the slab holds input planes z0-1 .. z1 as
 * (z1-z0+2, H+2, W+2, C), so the padded copy costs a few planes of memory, not a second volume.
 * The input is cat(a (N,D,H,W,ca) with lda_ floats per voxel, b (N,D,H,W,cb)), C = ca + cb
 * (PAD_BF16: rounded up to even, the extra channel zero), in one of three formats.
 * The one-voxel border (planes -1 and D, rows -1 and H, columns -1 and W) is where a spatially
 * sharded run puts its neighbours' faces (halo): pad_slab writes it (zeros here) and copies the
 * tensor itself. */
enum { PAD_F32, PAD_F32R /* fp32 holding bf16-rounded values */, PAD_BF16 /* uint16 */ };

static size_t pad_esize(int fmt) {
    return fmt == PAD_BF16 ? sizeof(uint16_t) : sizeof(float);
}

static int pad_channels(int fmt, int C) {
    return fmt == PAD_BF16 ? (C + 1) & ~1 : C;
}

#define SLAB_BYTES (48u << 20) /* padded planes per slab: about this many bytes, at least 1 */

/* SLAB_BYTES, or SCAFFOLD_NN_SLAB_BYTES (tests: several slabs on small volumes), read once. */
static size_t slab_bytes(void) {
    static size_t b;
    if (!b) {
        const char *e = getenv("SCAFFOLD_NN_SLAB_BYTES");
        const size_t v = e ? (size_t)strtoull(e, NULL, 10) : 0;
        b = v ? v : SLAB_BYTES;
    }
    return b;
}

/* Output planes per slab: depends on the shape only (so do results and workspace). A sharded
 * call pads the whole block (the halo exchange fills a block's border), see slab_depth. */
static int slab_planes(int D, int H, int W, int C) {
    const size_t plane = (size_t)(H + 2) * (W + 2) * C * sizeof(float);
    long z = (long)(slab_bytes() / (plane ? plane : 1)) - 2;
    return z < 1 ? 1 : z > D ? D : (int)z;
}

static int slab_depth(int D, int H, int W, int C, const nn_shard *sh) {
    return sh ? D : slab_planes(D, H, W, C);
}

/* Floats of a slab buffer (any format) for C channels. */
static size_t slab_floats(int D, int H, int W, int C, const nn_shard *sh) {
    return ((size_t)slab_depth(D, H, W, C, sh) + 2) * (H + 2) * (W + 2) * ((C + 1) & ~1);
}

static void pad_slab(void *P, int fmt, const float *a, long lda_, int ca, const float *b, int cb,
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
            for (int x = 0; x < W; x++) {
                const float *sa = a + (src + x) * lda_, *sb = b ? b + (src + x) * cb : NULL;
                if (fmt == PAD_F32) {
                    float *d = (float *)(row + (size_t)(x + 1) * C * es);
                    memcpy(d, sa, sizeof(float) * ca);
                    if (cb)
                        memcpy(d + ca, sb, sizeof(float) * cb);
                } else if (fmt == PAD_F32R) {
                    float *d = (float *)(row + (size_t)(x + 1) * C * es);
                    for (int c = 0; c < ca; c++)
                        d[c] = nn_bf16_round(sa[c]);
                    for (int c = 0; c < cb; c++)
                        d[ca + c] = nn_bf16_round(sb[c]);
                } else {
                    uint16_t *d = (uint16_t *)(row + (size_t)(x + 1) * C * es);
                    nn_bf16_pack(d, sa, ca);
                    if (cb)
                        nn_bf16_pack(d + ca, sb, cb);
                    if (C > ca + cb)
                        d[C - 1] = 0;
                }
            }
        }
}

/* Packed weights, for the widest column blocks of any path (workspace fits every path; the
 * bf16 pair layout, (K+1)/2*2 uint16 per column, needs no more). */
static size_t packed_floats(int ncol, int K, int T) {
    return (size_t)nn_gemm_ncol_max(ncol) * K * T;
}

/* ---- position walks --------------------------------------------------------------------------
 * A work item covers M positions laid out as rows of width Wr: position p = y*Wr + x reads A at
 * a0 + y*a_row + x*a_col (elements of esize bytes: fp32, or bf16 for the pair kernels) and
 * writes C at c0 + y*c_row + x*c_col. walk_run() splits them into near-equal blocks of at most
 * nn_tg_mr(nr) positions (blocks may span rows). */
typedef struct walk {
    const void *a0;
    long a_row, a_col;
    float *c0;
    long c_row, c_col;
    int Wr;
    int pairs; /* A and B in bf16 (nn_tg_block_bf16) */
    /* pairs on AMX tiles (nn_tg_amx): A rows a_row = Lp * a_col apart (a padded row of Lp
     * positions), readable up to a_end; K blocks in multiples of 32 */
    int amx;
    const void *a_end;
    /* optional: pf_bytes from pf prefetched into L2 during the walk, a share before each
     * block (data the caller reads next; spread out, the prefetches never wait for a free
     * miss buffer) */
    const char *pf;
    long pf_bytes;
} walk;

static void walk_run(const nn_tg *g, const walk *w, long M, const void *Bp, const float *bias,
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

/* walk_run on AMX: the positions taken as the padded rows they sit in (position x of row y
 * at padded position q = y*Lp + x, so A is one fixed stride apart), 32 padded positions per
 * call, the padding columns' results dropped (2 of Lp: 6% at 32 columns). A block whose last
 * row's reads would pass the slab's end runs on the pair kernels instead. */
static void walk_amx(const nn_tg *g, const walk *w, long M, const void *Bp, const float *bias,
                     int nvalid, int mode) {
    const long Lp = w->a_row / w->a_col, Q = (M / w->Wr - 1) * Lp + w->Wr;
    long maxoff = 0;
    for (int t = 0; t < g->T; t++)
        maxoff = g->aoff[t] > maxoff ? g->aoff[t] : maxoff;
    const uint16_t *a0 = w->a0, *end = w->a_end;
    const int mr = nn_tg_mr(g->nr);
    float *c[32];
    long y = 0, x = 0;
    for (long q0 = 0; q0 < Q; q0 += 32) {
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
        const uint16_t *ap[NN_TG_MR_MAX];
        float *cp[NN_TG_MR_MAX];
        int m = 0;
        for (int r = 0; r < 32; r++) {
            if (c[r])
                ap[m] = a + r * w->a_col, cp[m++] = c[r];
            if (m && (m == mr || r == 31)) {
                nn_tg_block_bf16(g, m, ap, Bp, cp, bias, nvalid, mode);
                m = 0;
            }
        }
    }
}

/* One work item over all k blocks of K (packed weights Bob of its column block): the first
 * block initialises C (mode0), the others add; `last` bits (rounding) apply to the last. */
static void walk_kblocks(nn_tg g, walk w, long M, const void *Bob, int K, int nkb,
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
            walk_run(&g, &w, M, B, bias, nvalid, mode);
    }
}

/* Output rows [y0, y1) of plane z of a work item: the kernel walk over them. */
static void conv27_rows(const nn_tg *g0, float *out, int cdst, const void *P, int csrc,
                        int pairs, const void *Pend, const void *Bob, int nr, int nkb, int ob,
                        int z, int y0, int y1, int H, int W, int last) {
    if (y1 <= y0)
        return;
    const long Hp = H + 2, Wp = W + 2;
    const size_t es = pairs ? sizeof(uint16_t) : sizeof(float);
    const int n0 = ob * nr, nvalid = cdst - n0 < nr ? cdst - n0 : nr;
    const walk w = {
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
    walk_kblocks(*g0, w, (long)(y1 - y0) * W, Bob, csrc, nkb, NULL, nvalid, NN_TG_ZERO, last);
}

/* out (D,H,W,cdst) = 27-tap convolution of one sample's padded slab P (D+2,H+2,W+2,csrc) with
 * the packed weights Bp (pack_b/pack_b16 over K = csrc, T = 27); aoff gives each tap's offset
 * in P. Work items are (column block, z plane), taken dynamically. With a shard (sh), the
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

/* ---- Winograd F(4x4x2, 3x3x3) ------------------------------------------------------------
 * A stride-1 3x3x3 convolution computes each block of 2 x 4 x 4 outputs (a tile: z, y, x) from
 * the 4 x 6 x 6 block of padded input around it: with F(2,3) along z and F(4,3) along y and x,
 * V = B^T d B (per channel), U = G g G^T (per input and output channel), and for each of the 144
 * points xi of the transformed tile M[xi] = V[xi] U[xi], a GEMM over the input channels; the
 * outputs are A^T M A. That is 144 products per tile and channel pair where the direct
 * convolution does 32 * 27 = 864: 6x fewer FMAs, for three transforms (additions and a few
 * multiplications by 2, 4, 5, 8, vectorised over channels) and a larger rounding error than
 * F(2,3)'s (F(4,3)'s points reach 2 and its transforms multiply by up to 8: about 1e-5 of a
 * 64-channel sum, tested against the naive loops). F(2x2x2) was the first version: 3.4x fewer
 * FMAs but 8 transformed points per output where this has 4.5, and its transforms' cache
 * traffic (V and M are that many times the tile) bounded it. Used by the fp32 passes of
 * unsharded layers whose extents are multiples of 2 (depth) and 4 (height, width): forward and
 * input gradient (conv3d_pass), weight gradient (wino_dw_slab).
 * Tiles are taken in chunks whose V and M (144 rows each) stay in the last-level cache (unless
 * U is larger still, see wino_slab): the threads transform a chunk's inputs, run its 144 x
 * column-block GEMMs with the microkernel (each GEMM's U panel is reused by every tile of the
 * chunk), then transform its outputs. */
#define WINO_NXI 144 /* transformed points per tile */
#define WINO_CHUNK_BYTES (6u << 20) /* V and M of one chunk of tiles */
/* The weight gradient's chunks grow with dU: each chunk adds its tiles into all of dU (144 * K *
 * ncp floats), so the longer the chunk, the fewer times dU is read and written and the longer
 * the microkernel's reduction; but V and M then leave the last-level cache. 2.5 dU, between 6
 * and 24 MiB: 128 -> 128 channels (dU 9 MiB) get 22.5 MiB, 64 -> 64 (2.25 MiB) keep 6.
 * Measured with 24 against 6 MiB, alternated: 32^3 128 -> 128 0.11-0.13 s against 0.14-0.25 s,
 * 16^3 128 -> 128 0.017-0.024 against 0.028-0.030 s, but 64^3 64 -> 64 0.34-0.40 s against
 * 0.17-0.29 s and 32^3 64 -> 64 no change. */
#define WINO_DW_CHUNK_BYTES (24u << 20)
static long wino_dw_chunk_bytes(int K, int ncp) {
    const long b = 4L * WINO_NXI * K * ncp * 5 / 2;
    return b < (long)WINO_CHUNK_BYTES ? (long)WINO_CHUNK_BYTES
           : b > (long)WINO_DW_CHUNK_BYTES ? (long)WINO_DW_CHUNK_BYTES
                                           : b;
}
/* K * ncol above this: direct. U (144 K ncol floats) is read once per chunk of tiles, and the
 * widest chunks of the large-K layers are few tiles (27 at K = 1024): 512 -> 256 at 32^3 and
 * 512 and 1024 -> 512 at 16^3 (U 94 to 340 MB) still ran 2.2-2.7x faster than direct (280
 * GFLOP/s) on a 2-core Xeon with a large last-level cache. The bound keeps U under 600 MB. */
#define WINO_KMAX (1024 * 1024)
/* Fewer voxels per sample: too few tiles to repay transforming the weights at every call (8^3
 * at 256 -> 256 channels ran at half the direct speed) */
#define WINO_VOX_MIN 4096

/* SCAFFOLD_NN_WINOGRAD=0 turns it off (benchmarks and tests compare both). */
static int wino_enabled(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("SCAFFOLD_NN_WINOGRAD");
        on = !(e && e[0] == '0');
    }
    return on;
}

static int wino_applies(int D, int H, int W, int K, int ncol, nn_prec prec, const nn_shard *sh) {
    (void)prec;
    return wino_enabled() && !sh && D % 2 == 0 && H % 4 == 0 && W % 4 == 0 &&
           K >= 8 && ncol >= 8 && (long)K * ncol <= WINO_KMAX &&
           (long)D * H * W >= WINO_VOX_MIN &&
           slab_depth(D, H, W, K, NULL) >= 2;
}

static int wino_small_applies(int N, int D, int H, int W, int K, int ncol, nn_prec prec,
                              const nn_shard *sh);

/* Floats between the rows of V (and of M) past the chunk's nt*K: with rows a multiple of 4 KiB
 * apart (F(2x2x2)'s 192 tiles of 64 channels: 48 KiB), the many streams the transforms write and read all
 * fall in one L1 set and a few L2 sets. One cache line more per row spreads them over all sets
 * (F(2x2x2)'s input transform took 20% of a 128^3 64 -> 64 layer's time before, and the passes
 * ran 8-40% faster after). */
#define WINO_LDPAD 16

/* Tiles per chunk of `bytes` for K input and ncp padded output channels. */
static long wino_chunk_tiles(int K, int ncp, long bytes) {
    long t = (bytes / (long)sizeof(float) - 2L * WINO_NXI * WINO_LDPAD) /
             ((long)WINO_NXI * (K + ncp));
    return t < 16 ? 16 : t;
}

/* U (or dU) larger than this is made a group of whole column blocks at a time, each group's
 * pass over the input on its own (the input transform once per group): the workspace holds one
 * group. At scale 7 / base 64 the deepest up block's conv1 (1024 -> 512 at 16^3, U 340 MB) is
 * then three groups and the workspace 371 -> 160 MiB, at the price of 2 more input transforms of
 * its 1024 channels (a few percent of that layer's time). */
#define WINO_UBYTES_MAX (128L << 20)

/* WINO_UBYTES_MAX, or SCAFFOLD_NN_WINO_UMAX bytes (the tests run every layer in groups of one
 * column block with a small one). */
static long wino_umax(void) {
    static long v = -1;
    if (v < 0) {
        const char *e = getenv("SCAFFOLD_NN_WINO_UMAX");
        const long x = e ? atol(e) : 0;
        v = x > 0 ? x : WINO_UBYTES_MAX;
    }
    return v;
}

/* Columns per group of a Winograd pass with K input channels and ncol output columns in blocks
 * of nr: all of them, or as many whole blocks as wino_umax() holds (at least one). */
static int wino_group_cols(int K, int ncol, int nr) {
    const long blk = 4L * WINO_NXI * K * nr, nb = nblocks(ncol, nr), g = wino_umax() / blk;
    return nb * blk <= wino_umax() ? ncol : (int)(g < 1 ? 1 : g) * nr;
}

/* Floats of the Winograd workspace after the slab: U of one or two output parts (ncol columns
 * in all, each part padded to whole blocks), or of one column group where U is larger than
 * wino_umax(), and one chunk's V and M. */
static size_t wino_ws_floats(int K, int ncol) {
    int ncp = nn_gemm_ncol_max(ncol) + 64; /* each part pads to whole blocks (< 32) */
    const long cap = wino_umax() / (4L * WINO_NXI * K); /* columns */
    if (ncp > cap) /* a group: whole blocks within the cap, or one block (<= 64 columns) */
        ncp = cap > 64 ? (int)cap : 64;
    /* a chunk of any part or of the weight gradient (at least the forward's), or 16 tiles of
     * the widest */
    size_t vm = (size_t)wino_dw_chunk_bytes(K, ncp) / sizeof(float),
           v16 = WINO_NXI * (16 * (size_t)(K + ncp) + 2 * WINO_LDPAD);
    return WINO_NXI * (size_t)K * ncp + (vm > v16 ? vm : v16) + 64;
}

/* Widest group of columns the weight transforms take side by side (nn_gemm_vw()). */
#define WINO_WV_MAX 16

/* U[xi][ob][k][j] (the packed B panels of the 144 GEMMs) for output column ob*nr + j: G g G^T
 * of g[u] = w[col*sc + k*sk + tap(u)], tap(u) = u or, for the input gradient, 26 - u. Columns
 * go a vector at a time (nn_wino_weights): each of the 144 points is then a run of U's row, where
 * one column at a
 * time scattered 144 single floats over a U larger than the L2 (a 16^3 layer's pass spent most
 * of its time here). A work item takes WINO_WROW floats of consecutive k (a few k times all nr
 * columns) and writes each point's run of them in one piece: one run of WV columns per point
 * and k wrote 144 pieces 32 bytes long, each in its own page of a U of tens of MiB, and the
 * transform took 18% of a 16^3 256->256 forward pass. */
#define WINO_WROW 128

/* The transform of columns [ob*nr, ob*nr + nr) (zero past ncol) and k in [k0, k1): point xi's
 * run of (k1 - k0) * nr floats, k major, at ub + xi * (k1 - k0) * nr. */
static void wino_wblock(float *restrict ub, const float *w, int ncol, long sc, long sk,
                        int flip, int nr, int ob, int k0, int k1, nn_prec prec, int bf16) {
    const int V = nn_gemm_vw(), ng = nr / V; /* nr: whole vectors */
    const long run = (long)(k1 - k0) * nr;
    float wr[WINO_WV_MAX * 27]; /* bf16: the columns' kernels rounded */
    for (int k = k0; k < k1; k++)
        for (int jg = 0; jg < ng; jg++) {
            const long col0 = (long)ob * nr + jg * V;
            /* columns < ncol (none: any valid pointer, nothing is read) */
            const int nc = ncol - col0 < V ? (ncol > col0 ? (int)(ncol - col0) : 0) : V;
            const float *src = nc ? w + col0 * sc + k * sk : w;
            long ss = sc;
            if (prec == NN_BF16 && nc) {
                for (int c = 0; c < nc; c++)
                    for (int t = 0; t < 27; t++)
                        wr[c * 27 + t] = nn_bf16_round(src[c * sc + t]);
                src = wr, ss = 27;
            }
            if (bf16)
                nn_wino16_weights(ub + (size_t)(k - k0) * nr + jg * V, run, src, ss, flip, nc);
            else
                nn_wino_weights(ub + (size_t)(k - k0) * nr + jg * V, run, src, ss, flip, nc);
        }
}

/* bf16: U16[xi][ob][k/2][nr][2] (Kp = K rounded up to even, the extra k zero), the pairs
 * vdpbf16ps takes, rounded to bf16. */
static void wino_weights(void *U, const float *w, int ncol, int K, long sc, long sk, int flip,
                         int nr, nn_prec prec, int bf16) {
    const int nb = nblocks(ncol, nr), Kp = bf16 ? (K + 1) & ~1 : K;
    const int kc = WINO_WROW / nr, nkc = (K + kc - 1) / kc;
#pragma omp parallel for collapse(2) schedule(static) num_threads(nn_threads())
    for (int ob = 0; ob < nb; ob++)
        for (int c = 0; c < nkc; c++) {
            const int k0 = c * kc, k1 = k0 + kc < K ? k0 + kc : K;
            const size_t run = (size_t)(k1 - k0) * nr; /* <= WINO_WROW: nr <= 64 */
            float ub[WINO_NXI * WINO_WROW];
            wino_wblock(ub, w, ncol, sc, sk, flip, nr, ob, k0, k1, prec, bf16);
            for (int xi = 0; xi < WINO_NXI; xi++) {
                const size_t at = (((size_t)xi * nb + ob) * Kp + k0) * nr;
                if (bf16) /* k0 is even (kc is): whole pairs, an odd K's last one padded */
                    for (int k = 0; k < k1 - k0; k += 2)
                        nn_wino16_pack_pairs((uint32_t *)((uint16_t *)U + at + (size_t)k * nr),
                                             ub + xi * run + (size_t)k * nr,
                                             k0 + k + 1 < k1 ? ub + xi * run + (size_t)(k + 1) * nr
                                                             : NULL,
                                             nr);
                else
                    memcpy((float *)U + at, ub + xi * run, sizeof(float) * run);
            }
        }
}

/* Offset of tile t's first point (tiles numbered x fastest, Tx x Ty per plane) in a tensor with
 * the given plane, row and voxel strides: tiles are 2 planes, 4 rows and 4 voxels apart. */
static long wino_at(long t, long Tx, long Ty, long plane, long row, long vox) {
    return 2 * (t / (Tx * Ty)) * plane + 4 * (((t / Tx) % Ty) * row + (t % Tx) * vox);
}

/* out (Dz, H, W, ncol; voxels ldo floats apart) = the convolution of padded slab P (Dz+2, H+2,
 * W+2, C) with the transformed weights U (wino_weights, block width nr); Dz even, H and W
 * multiples of 4. VM: one chunk's V and M. bf16 (winograd-bf16): V in bf16 (Kp = C rounded
 * up to even channels per tile, the extra one zero) and the GEMMs on the pair kernels. */
static void wino_slab(float *out, long ldo, int ncol, const float *P, int C, const void *U,
                      int nr, int Dz, int H, int W, float *VM, int bf16) {
    const int nb = nblocks(ncol, nr), ncp = nb * nr;
    const long Tz = Dz / 2, Ty = H / 4, Tx = W / 4, ntiles = Tz * Ty * Tx;
    const long row = (long)(W + 2) * C, plane = (H + 2) * row;
    const long oplane = (long)H * W * ldo, orow = (long)W * ldo;
    /* Every chunk reads all of U: a U larger than the last-level cache gets the weight
     * gradient's largest chunks (16^3 and 32^3 256->256, U 36 MiB: 8 and 52 passes over it
     * with 6 MiB chunks; 1.5x and 1.2x faster with 24). A U that stays in cache keeps 6 MiB
     * (32^3 128->128, U 9 MiB: 0.88x with 24, V and M then leave the cache). Chunks are whole
     * blocks of the microkernel's rows (85 tiles ran a 5-row block in every GEMM), and a last
     * chunk shorter than half of one is shared with the one before (128 tiles in chunks of
     * 42 left one of 2). */
    const long ubytes = 4L * WINO_NXI * C * ncp;
    const long mr = nn_tg_mr(nr),
               ct = wino_chunk_tiles(C, ncp,
                                     ubytes > (long)WINO_DW_CHUNK_BYTES ? (long)WINO_DW_CHUNK_BYTES
                                                                        : (long)WINO_CHUNK_BYTES);
    const long chunk = ct > mr ? ct - ct % mr : ct;
    const long aoff[1] = {0};
    const int Kp = bf16 ? (C + 1) & ~1 : C;
    const nn_tg g = {.T = 1, .K = Kp, .aoff = aoff, .nr = nr};
#pragma omp parallel num_threads(nn_threads())
    for (long t0 = 0, nt = 0; t0 < ntiles; t0 += nt) {
        const long left = ntiles - t0;
        nt = left <= chunk ? left
             : left < chunk + chunk / 2 ? ((left + 1) / 2 + mr - 1) / mr * mr
                                        : chunk;
        if (nt > chunk) /* the workspace holds a chunk */
            nt = chunk;
        /* V's rows in elements (bf16: half the bytes, the same cache-line padding) */
        const long ldv = nt * Kp + (bf16 ? 2 : 1) * WINO_LDPAD, ldm = nt * ncp + WINO_LDPAD;
        float *V = VM, *M = VM + ((WINO_NXI * ldv / (bf16 ? 2 : 1) + 15) & ~15L);
        uint16_t *V16 = (uint16_t *)VM;
#pragma omp for schedule(dynamic, 8)
        for (long i = 0; i < nt; i++) {
            const float *pt = P + wino_at(t0 + i, Tx, Ty, plane, row, C);
            if (!bf16) {
                nn_wino_input(V + i * C, ldv, pt, plane, row, C, C);
                continue;
            }
            nn_wino16_input(V16 + i * Kp, ldv, pt, plane, row, C, C);
            if (Kp > C)
                for (int xi = 0; xi < WINO_NXI; xi++)
                    V16[xi * ldv + i * Kp + C] = 0;
        }
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int xi = 0; xi < WINO_NXI; xi++)
            for (int ob = 0; ob < nb; ob++) {
                const size_t u = ((size_t)xi * nb + ob) * Kp * nr;
                const walk wk = {.a0 = bf16 ? (const void *)(V16 + (size_t)xi * ldv)
                                            : (const void *)(V + (size_t)xi * ldv),
                                 .a_row = 0, .a_col = Kp,
                                 .c0 = M + (size_t)xi * ldm + ob * nr, .c_row = 0,
                                 .c_col = ncp, .Wr = (int)nt, .pairs = bf16};
                walk_run(&g, &wk, nt,
                         bf16 ? (const void *)((const uint16_t *)U + u)
                              : (const void *)((const float *)U + u),
                         NULL, nr, NN_TG_ZERO);
            }
#pragma omp for schedule(dynamic, 8)
        for (long i = 0; i < nt; i++) {
            float *o = out + wino_at(t0 + i, Tx, Ty, oplane, orow, ldo);
            if (bf16)
                nn_wino16_output(o, oplane, orow, ldo, ncol, M + i * ncp, ldm);
            else
                nn_wino_output(o, oplane, orow, ldo, ncol, M + i * ncp, ldm);
        }
    }
}

/* Weight gradient by the same tiles: dU[xi] (K x ncp) += V[xi]^T dM[xi] over a slab's tiles,
 * V the input transform (as in the forward pass) and dM = A dY A^T the output gradient's; at
 * the end dW = G^T dU G per channel pair (wino_dw_finish). Each chunk's (xi, k block, column
 * block) tiles of dU are taken by one thread and accumulate chunk after chunk, tiles in order
 * within the kernel: the sums do not depend on the threads. */
static void wino_dw_slab(float *dU, const float *P, int C, const float *dy, long ldy, int ncol,
                         int nr, int Dz, int H, int W, float *VM, int bf16) {
    const int nb = nblocks(ncol, nr), ncp = nb * nr;
    const int mk = nn_tw_mr(nr), nkb = (C + mk - 1) / mk;
    const long Tz = Dz / 2, Ty = H / 4, Tx = W / 4, ntiles = Tz * Ty * Tx;
    const long row = (long)(W + 2) * C, plane = (H + 2) * row;
    const long gplane = (long)H * W * ldy, grow = (long)W * ldy;
    const long chunk = wino_chunk_tiles(C, ncp, wino_dw_chunk_bytes(C, ncp));
    const int Kp = (C + 1) & ~1;
#pragma omp parallel num_threads(nn_threads())
    for (long t0 = 0; t0 < ntiles; t0 += chunk) {
        const long nt = ntiles - t0 < chunk ? ntiles - t0 : chunk;
        if (bf16) {
            /* winograd-bf16: V and dM in tile pairs (32-bit words of two bf16 values), the
             * reduction over the pairs on vdpbf16ps; the tiles of a pair are transformed by one
             * thread, the even one first (it writes whole words) */
            const long np = (nt + 1) / 2, ldv = np * Kp + WINO_LDPAD, ldm = np * ncp + WINO_LDPAD;
            uint32_t *V = (uint32_t *)VM, *Mo = V + WINO_NXI * ldv;
#pragma omp for schedule(dynamic, 4)
            for (long ip = 0; ip < np; ip++)
                for (long i = 2 * ip; i < 2 * ip + 2 && i < nt; i++) {
                    nn_wino16_input_pair(V + ip * Kp, ldv,
                                         P + wino_at(t0 + i, Tx, Ty, plane, row, C), plane, row,
                                         C, C, (int)(i & 1));
                    if (Kp > C && !(i & 1))
                        for (int xi = 0; xi < WINO_NXI; xi++)
                            V[xi * ldv + ip * Kp + C] = 0;
                    nn_wino16_grad_output(Mo + ip * ncp, ldm,
                                          dy + wino_at(t0 + i, Tx, Ty, gplane, grow, ldy), gplane,
                                          grow, ldy, ncol, ncp, (int)(i & 1));
                }
#pragma omp for collapse(2) schedule(dynamic, 1)
            for (int xi = 0; xi < WINO_NXI; xi++)
                for (int ob = 0; ob < nb; ob++)
                    for (int kb = 0; kb < nkb; kb++) {
                        const int k0 = kb * mk, k1 = k0 + mk < C ? k0 + mk : C;
                        nn_tw_tile_bf16((int)np, (const uint16_t *)(V + xi * ldv + k0), Kp,
                                        (const uint16_t *)(Mo + xi * ldm + ob * nr), ncp, k1 - k0,
                                        nr, dU + ((size_t)xi * C + k0) * ncp + ob * nr, ncp);
                    }
            continue;
        }
        const long ldv = nt * C + WINO_LDPAD, ldm = nt * ncp + WINO_LDPAD;
        float *V = VM, *Mo = VM + WINO_NXI * ldv;
#pragma omp for schedule(dynamic, 8)
        for (long i = 0; i < nt; i++) {
            nn_wino_input(V + i * C, ldv, P + wino_at(t0 + i, Tx, Ty, plane, row, C), plane,
                          row, C, C);
            nn_wino_grad_output(Mo + i * ncp, ldm,
                                dy + wino_at(t0 + i, Tx, Ty, gplane, grow, ldy), gplane, grow,
                                ldy, ncol, ncp);
        }
        /* one (xi, column block) per item, its k blocks inside: the item's dM panel stays in
         * L1 while V[xi] streams past, and the items are large enough that handing them out
         * costs little (per k block, the dispatch cost up to a fifth of the kernel time) */
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int xi = 0; xi < WINO_NXI; xi++)
            for (int ob = 0; ob < nb; ob++) {
                const float *gr = Mo + (size_t)xi * ldm + ob * nr;
                for (int kb = 0; kb < nkb; kb++) {
                    const int k0 = kb * mk, k1 = k0 + mk < C ? k0 + mk : C;
                    const float *ar = V + (size_t)xi * ldv + k0;
                    nn_tw_tile(1, &ar, &gr, (int)nt, C, ncp, k1 - k0, nr, nr,
                               dU + ((size_t)xi * C + k0) * ncp + ob * nr, ncp);
                }
            }
    }
}

/* (G^T dU G)[t] of one input channel and nv <= nn_gemm_vw() output channels, whose 144 points
 * are at src + xi * sxi + v (whole vectors readable): stored in out[v * ov + t] (acc 0), added
 * to it (1), or added rounded to bf16 (2: the gradient of the bf16 weight copy). */
static void wino_dw_pair(float *out, long ov, int acc, int nv, const float *src, long sxi,
                         int bf16) {
    const int V = nn_gemm_vw();
    float d[27 * WINO_WV_MAX];
    if (bf16)
        nn_wino16_weights_grad(d, src, sxi);
    else
        nn_wino_weights_grad(d, src, sxi);
    for (int v = 0; v < nv; v++) {
        float *o = out + v * ov;
        for (int t = 0; t < 27; t++) {
            const float g = d[t * V + v];
            o[t] = acc == 0 ? g : o[t] + (acc == 2 ? nn_bf16_round(g) : g);
        }
    }
}

/* dw (PyTorch layout, w[oc][ic][t]; dU's cout columns in blocks of nr) += G^T dU G for each
 * channel pair, a vector of output channels at a time (runs of dU's rows, as in wino_weights;
 * the groups of one input channel run one after the other, so the second half of each cache
 * line read is still there). */
static void wino_dw_finish(float *dw, const float *dU, int cin, int cout, int nr, nn_prec prec,
                           int bf16) {
    const int ncp = nblocks(cout, nr) * nr;
    const int V = nn_gemm_vw(), ng = (cout + V - 1) / V;
#pragma omp parallel for collapse(2) schedule(static) num_threads(nn_threads())
    for (int ic = 0; ic < cin; ic++)
        for (int og = 0; og < ng; og++) {
            const int oc0 = og * V, nv = cout - oc0 < V ? cout - oc0 : V;
            wino_dw_pair(dw + ((size_t)oc0 * cin + ic) * 27, (long)cin * 27,
                         prec == NN_BF16 ? 2 : 1, nv,
                         dU + (size_t)ic * ncp + oc0, (long)cin * ncp, bf16);
        }
}

/* ---- Winograd on few tiles --------------------------------------------------------------
 * Below WINO_VOX_MIN voxels a sample has too few tiles (8^3: 16) to repay writing the whole U
 * (144 * K * ncol floats, 36 MiB at 256 -> 256) to memory and reading it back: that traffic
 * took half of an 8^3 256->256 forward pass, and the direct kernels stayed faster. Here U never
 * exists whole: the tiles of a few samples (at most WINO_SMALL_TILES) are transformed once into
 * V, and each work item, one column block, transforms its weights WINO_SMALL_UBYTES at a time
 * (k chunks, all 144 points) into a per-thread buffer that stays in L2 and runs the 144 GEMMs
 * of that chunk from it at once, accumulating M chunk after chunk (the kernel adds in k order
 * within a chunk and reloads what it stored, so the sums are the one-chunk sums: the results
 * are bit-identical to wino_slab's). The weight gradient mirrors it: per (column block, k chunk)
 * the chunk's dU is reduced over the tiles into the buffer and transformed back into dw at
 * once. The weights are transformed per group of samples; a volume of one sample fits. */
#define WINO_SMALL_TILES 32            /* tiles per group of samples, at most */
#define WINO_SMALL_MIN 16              /* and at least (4^3, 4 tiles: 0.7-0.9x the direct) */
#define WINO_SMALL_UBYTES (448u << 10) /* a thread's chunk of U (or dU): within the L2 */
/* Floats of a thread's slot: the chunk, and the weight gradient's transformed chunk (27 taps
 * where dU has 144 points) */
#define WINO_SMALL_SLOT ((WINO_SMALL_UBYTES / sizeof(float)) / WINO_NXI * (WINO_NXI + 27))

static long wino_ntiles(int D, int H, int W) {
    return (long)(D / 2) * (H / 4) * (W / 4);
}

/* Samples per group: as many whole samples as WINO_SMALL_TILES holds (at least one). */
static int wino_small_group(int N, int D, int H, int W) {
    const long g = WINO_SMALL_TILES / wino_ntiles(D, H, W);
    return g < 1 ? 1 : g > N ? N : (int)g;
}

static int wino_small_applies(int N, int D, int H, int W, int K, int ncol, nn_prec prec,
                              const nn_shard *sh) {
    (void)prec;
    return wino_enabled() && !sh && D % 2 == 0 && H % 4 == 0 &&
           W % 4 == 0 && K >= 8 && ncol >= 8 && (long)D * H * W < WINO_VOX_MIN &&
           wino_ntiles(D, H, W) <= WINO_SMALL_TILES &&
           wino_small_group(N, D, H, W) * wino_ntiles(D, H, W) >= WINO_SMALL_MIN;
}

/* Floats of a whole padded sample (the small path pads whole samples, whatever the slabs). */
static size_t wino_small_pad(int D, int H, int W, int K) {
    const size_t f = ((size_t)D + 2) * (H + 2) * (W + 2) * K;
    return (f + 15) & ~(size_t)15;
}

/* k per chunk of U for block width nr: WINO_SMALL_UBYTES, whole 8s. */
static int wino_small_kc(int nr) {
    const int kc = (int)(WINO_SMALL_UBYTES / (sizeof(float) * WINO_NXI * nr)) & ~7;
    return kc < 8 ? 8 : kc;
}

/* V of a group of nt tiles in k chunks of kc: chunk c, k in [k0, k1), holds point xi's rows
 * (one per tile, k1 - k0 floats each) at wino_small_v(V, nt, kc, c) + xi * ldv, ldv = nt *
 * (k1 - k0) + WINO_LDPAD. RATIONALE: the work items read one chunk of every point at a time;
 * in one [xi][tile][K] array those are a few cache lines per tile K floats apart (at 512
 * channels the GEMMs of an 8^3 pass ran at a third of the kernel's speed), here a chunk is one
 * run. M (and dM) are kept per column block for the same reason: block ob's point xi holds nt
 * rows of nr floats at M + ob * WINO_NXI * ldm + xi * ldm, ldm = nt * nr + WINO_LDPAD. */
static float *wino_small_v(float *V, long nt, int kc, int c) {
    return V + WINO_NXI * ((size_t)nt * kc * c + (size_t)c * WINO_LDPAD);
}

/* The small path's workspace for a group of N samples, K channels and ncol columns (at most
 * two parts, each padded to whole blocks of at least 4 floats): a padded sample P, the group's
 * V, its M (or dM), and every thread slot's chunk of U. Returns its floats; with ws, points
 * P, V, M and the slots into it (the one layout workspace sizing and the passes share). */
typedef struct wino_small_ws {
    float *P, *V, *M, *slots;
} wino_small_ws;

static size_t wino_small_layout(float *ws, int N, int D, int H, int W, int K, int ncol,
                                wino_small_ws *L) {
    const size_t nt = (size_t)wino_small_group(N, D, H, W) * wino_ntiles(D, H, W);
    const size_t ncp = (size_t)nn_gemm_ncol_max(ncol) + 64;
    const size_t v = WINO_NXI * (nt * K + (size_t)(K / 8 + 1) * WINO_LDPAD),
                 m = WINO_NXI * (nt * ncp + (ncp / 4) * WINO_LDPAD);
    const size_t at_v = wino_small_pad(D, H, W, K), at_m = at_v + ((v + 15) & ~(size_t)15),
                 at_s = at_m + ((m + 15) & ~(size_t)15);
    if (ws)
        *L = (wino_small_ws){.P = ws, .V = ws + at_v, .M = ws + at_m, .slots = ws + at_s};
    return at_s + (size_t)NN_MAX_THREADS * WINO_SMALL_SLOT + 64;
}

static size_t wino_small_ws_floats(int N, int D, int H, int W, int K, int ncol) {
    return wino_small_layout(NULL, N, D, H, W, K, ncol, NULL);
}

/* V (k chunks of kc) of samples [n0, n0 + ns) (their tiles one after another) of cat(a, b):
 * each sample padded into P, then transformed; with dy (the weight gradient), also the output
 * gradient's dM per column block of nr. */
static void wino_small_in(float *V, int kc, float *P, int fmt, const float *a, int ca,
                          const float *b, int cb, float *dM, const float *dy, int ncol, int nr,
                          int n0, int ns, int D, int H, int W) {
    const int K = ca + cb, nkc = (K + kc - 1) / kc, nb = nblocks(ncol, nr);
    const long nt1 = wino_ntiles(D, H, W), nt = ns * nt1, Tx = W / 4, Ty = H / 4;
    const long row = (long)(W + 2) * K, plane = (H + 2) * row, ldm = nt * nr + WINO_LDPAD;
    const long gplane = (long)H * W * ncol, grow = (long)W * ncol;
    for (int s = 0; s < ns; s++) {
        pad_slab(P, fmt, a, ca, ca, b, cb, n0 + s, 0, D, D, H, W);
        const float *g = dy ? dy + (size_t)(n0 + s) * D * H * W * ncol : NULL;
#pragma omp parallel for schedule(dynamic, 2) num_threads(nn_threads())
        for (long i = 0; i < nt1; i++) {
            const long t = s * nt1 + i;
            const float *pt = P + wino_at(i, Tx, Ty, plane, row, K);
            for (int c = 0; c < nkc; c++) {
                const int k0 = c * kc, nk = K - k0 < kc ? K - k0 : kc;
                nn_wino_input(wino_small_v(V, nt, kc, c) + t * nk, nt * nk + WINO_LDPAD, pt + k0,
                              plane, row, K, nk);
            }
            if (g)
                for (int ob = 0; ob < nb; ob++) {
                    const int n0c = ob * nr, nv = ncol - n0c < nr ? ncol - n0c : nr;
                    nn_wino_grad_output(dM + (size_t)ob * WINO_NXI * ldm + t * nr, ldm,
                                        g + wino_at(i, Tx, Ty, gplane, grow, ncol) + n0c, gplane,
                                        grow, ncol, nv, nr);
                }
        }
    }
}

/* conv3d_pass's Winograd on few tiles (wino_small_applies): outputs as conv3d_pass's. Per work
 * item (column block): per k chunk, the chunk of U into the thread's buffer and the 144 GEMMs
 * from it; then the block's output transform. */
static void wino_small_pass(float *out1, int n1, float *out2, int n2, const float *a, int ca,
                            const float *b, int cb, const float *w, long sc, long sk, int flip,
                            int N, int D, int H, int W, nn_prec prec, float *ws) {
    const int K = ca + cb, grp = wino_small_group(N, D, H, W);
    const long nt1 = wino_ntiles(D, H, W), Tx = W / 4, Ty = H / 4;
    wino_small_ws L;
    wino_small_layout(ws, N, D, H, W, K, n1 + n2, &L);
    float *P = L.P, *V = L.V, *M = L.M, *Ub = L.slots;
    const long aoff[1] = {0};
    for (int n0 = 0; n0 < N; n0 += grp) {
        const int ns = N - n0 < grp ? N - n0 : grp;
        const long nt = ns * nt1;
        for (int part = 0; part < (out2 ? 2 : 1); part++) {
            const int ncol = part ? n2 : n1, nr = nn_gemm_nr(ncol), nb = nblocks(ncol, nr);
            const int kc = wino_small_kc(nr);
            const long ldm = nt * nr + WINO_LDPAD;
            const long oplane = (long)H * W * ncol, orow = (long)W * ncol;
            const float *wp = w + (part ? (long)n1 * sc : 0);
            float *out = part ? out2 : out1;
            /* V is chunked for the part's kc (the same for both parts but on odd widths) */
            if (part == 0 || kc != wino_small_kc(nn_gemm_nr(n1)))
                wino_small_in(V, kc, P, prec == NN_BF16 ? PAD_F32R : PAD_F32, a, ca, b, cb, NULL,
                              NULL, 0, nr, n0, ns, D, H, W);
#pragma omp parallel num_threads(nn_threads())
            {
                float *U = Ub + (size_t)omp_get_thread_num() * WINO_SMALL_SLOT;
#pragma omp for schedule(dynamic, 1)
                for (int ob = 0; ob < nb; ob++) {
                    float *Mb = M + (size_t)ob * WINO_NXI * ldm;
                    for (int c = 0, k0 = 0; k0 < K; c++, k0 += kc) {
                        const int k1 = k0 + kc < K ? k0 + kc : K, nk = k1 - k0;
                        wino_wblock(U, wp, ncol, sc, sk, flip, nr, ob, k0, k1, prec, 0);
                        const nn_tg g = {.T = 1, .K = nk, .aoff = aoff, .nr = nr};
                        const float *Vc = wino_small_v(V, nt, kc, c);
                        for (int xi = 0; xi < WINO_NXI; xi++) {
                            const walk wk = {.a0 = Vc + (size_t)xi * (nt * nk + WINO_LDPAD),
                                             .a_row = 0, .a_col = nk,
                                             .c0 = Mb + (size_t)xi * ldm, .c_row = 0,
                                             .c_col = nr, .Wr = (int)nt};
                            walk_run(&g, &wk, nt, U + (size_t)xi * nk * nr, NULL, nr,
                                     k0 ? NN_TG_ACCUM : NN_TG_ZERO);
                        }
                    }
                    const int nv = ncol - ob * nr < nr ? ncol - ob * nr : nr;
                    for (long i = 0; i < nt; i++) {
                        float *o = out + (size_t)(n0 + i / nt1) * D * H * W * ncol + ob * nr;
                        nn_wino_output(o + wino_at(i % nt1, Tx, Ty, oplane, orow, ncol), oplane,
                                       orow, ncol, nv, Mb + i * nr, ldm);
                    }
                }
            }
        }
    }
    if (prec == NN_BF16) { /* the one rounding of the bf16 result (small volumes: one pass) */
        nn_round_bf16(out1, (size_t)N * D * H * W * n1);
        if (out2)
            nn_round_bf16(out2, (size_t)N * D * H * W * n2);
    }
}

/* dw += the weight gradient of a Conv3d k3 on few tiles (wino_small_applies), per group of
 * samples: V and dM of the group's tiles, then per (column block, k chunk) dU of the chunk
 * reduced over the tiles (tiles in order: the sums do not depend on the threads) and
 * transformed back. */
static void wino_small_dw(float *dw, const float *a, int ca, const float *b, int cb,
                          const float *dy, int cout, int N, int D, int H, int W, nn_prec prec,
                          float *ws) {
    const int K = ca + cb, grp = wino_small_group(N, D, H, W);
    const int nr = nn_gemm_nr(cout), nb = nblocks(cout, nr);
    const int mk = nn_tw_mr(nr), kc = wino_small_kc(nr), nkc = (K + kc - 1) / kc;
    const int vw = nn_gemm_vw();
    const long nt1 = wino_ntiles(D, H, W);
    wino_small_ws L;
    wino_small_layout(ws, N, D, H, W, K, cout, &L);
    float *P = L.P, *V = L.V, *dM = L.M, *Ub = L.slots;
    for (int n0 = 0; n0 < N; n0 += grp) {
        const int ns = N - n0 < grp ? N - n0 : grp;
        const long nt = ns * nt1, ldm = nt * nr + WINO_LDPAD;
        wino_small_in(V, kc, P, prec == NN_BF16 ? PAD_F32R : PAD_F32, a, ca, b, cb, dM, dy, cout,
                      nr, n0, ns, D, H, W);
#pragma omp parallel num_threads(nn_threads())
        {
            /* the slot holds 171 * kc * nr floats: kc * nr <= WINO_SMALL_UBYTES / 4 / 144 */
            float *dU = Ub + (size_t)omp_get_thread_num() * WINO_SMALL_SLOT,
                  *dT = dU + (size_t)WINO_NXI * kc * nr;
#pragma omp for collapse(2) schedule(dynamic, 1)
            for (int ob = 0; ob < nb; ob++)
                for (int c = 0; c < nkc; c++) {
                    const int k0 = c * kc, k1 = k0 + kc < K ? k0 + kc : K, nk = k1 - k0;
                    const float *Vc = wino_small_v(V, nt, kc, c);
                    memset(dU, 0, sizeof(float) * WINO_NXI * nk * nr);
                    for (int xi = 0; xi < WINO_NXI; xi++) {
                        const float *gr = dM + ((size_t)ob * WINO_NXI + xi) * ldm;
                        for (int kk = 0; kk < nk; kk += mk) {
                            const float *ar = Vc + (size_t)xi * (nt * nk + WINO_LDPAD) + kk;
                            nn_tw_tile(1, &ar, &gr, (int)nt, nk, nr, nk - kk < mk ? nk - kk : mk,
                                       nr, nr, dU + ((size_t)xi * nk + kk) * nr, nr);
                        }
                    }
                    /* transformed into dT[oc - ob * nr][ic - k0][t], then added to dw one
                     * output channel's run at a time (added pair by pair, the scattered
                     * read-modify-writes of dw took a third of an 8^3 pass) */
                    const int nv = cout - ob * nr < nr ? cout - ob * nr : nr;
                    for (int ic = 0; ic < nk; ic++)
                        for (int j = 0; j < nv; j += vw)
                            wino_dw_pair(dT + ((size_t)j * nk + ic) * 27, (long)nk * 27, 0,
                                         nv - j < vw ? nv - j : vw,
                                         dU + (size_t)ic * nr + j, (long)nk * nr, 0);
                    for (int j = 0; j < nv; j++) {
                        float *restrict o = dw + ((size_t)(ob * nr + j) * K + k0) * 27;
                        const float *restrict d = dT + (size_t)j * nk * 27;
                        if (prec == NN_BF16)
                            for (int i = 0; i < nk * 27; i++)
                                o[i] += nn_bf16_round(d[i]);
                        else
                            for (int i = 0; i < nk * 27; i++)
                                o[i] += d[i];
                    }
                }
        }
    }
}

/* ---- weight-gradient driver --------------------------------------------------------------
 * dWp(k, t, j) += sum over voxels v of A(v, t)[k] * G(v, t)[j] (laid out by dw_tile): for
 * Conv3d, A is the padded input at v shifted by tap t and G the output gradient at v; for
 * ConvTranspose3d, A is the input at v and G the output gradient at 2v + t. Voxels are taken in
 * chunks; a chunk's G (per column block) and A (per tap and k block) are first packed into
 * contiguous panels, so the kernel streams through memory instead of reading 24 bytes of every
 * voxel's channels (whose power-of-two strides also fall into a quarter of the L1 sets). */
typedef struct tw_src {
    const float *A, *G;
    int kind; /* 0 = Conv3d (A padded, a slab of D planes), 1 = ConvTranspose3d */
    int D, H, W;
    int cin, cout;
    long ldg_vox; /* floats per voxel of G */
    int ones; /* ConvTranspose3d: 1 adds an input channel of ones after the cin (row cin of the
                 gradient sums G over the voxels: the bias gradient per tap) */
} tw_src;

/* Start (floats) of row `row` (= (n, z, y), W voxels) of A and of G for tap t. */
static void tw_row(const tw_src *r, long row, int t, long *ao, long *go) {
    const int D = r->D, H = r->H, W = r->W;
    const long y = row % H, z = (row / H) % D, n = row / ((long)H * D);
    if (r->kind == 0) {
        *ao = (((n * (D + 2) + z + t / 9) * (H + 2) + y + (t / 3) % 3) * (W + 2) + t % 3) * r->cin;
        *go = row * W * r->ldg_vox;
    } else {
        *ao = row * W * r->cin;
        *go = (((n * 2 * D + 2 * z + t / 4) * 2 * H + 2 * y + (t / 2) % 2) * 2 * W + t % 2) *
              r->ldg_vox;
    }
}

#define DW_REPLICAS_MAX 8
#define DW_REPLICA_BUDGET (64u << 20) /* bytes of per-thread weight-gradient copies */
#define TW_SCRATCH 65536                /* at most this many floats of packed G panels per chunk */
#define TW_CT_SCRATCH 196608 /* ConvTranspose3d: floats of a chunk's packed input and G */
#define TW_ROWS_MAX 256
#define TW_PF_BYTES (512u << 10) /* ConvTranspose3d prefetches when its panels fit this (an L2) */

/* Rows per chunk of a T-tap weight gradient (T = 27: Conv3d, T = 8: ConvTranspose3d) with K
 * input and ncol output channels: about 256 voxels, at least one row.
 * Conv3d: fewer when the packed G panels (ncol padded floats per voxel) would exceed
 * TW_SCRATCH; whole planes of H rows, or a divisor of H (tw_chunk_conv packs the padded input
 * of a block of whole rows of one or more planes).
 * ConvTranspose3d: fewer when the packed input (K floats per voxel) and a tap pair's G (two
 * taps' padded columns) would exceed TW_CT_SCRATCH; any number of rows. */
static int tw_chunk_rows(int T, int H, int W, int K, int ncol) {
    long vox = T == 8 ? TW_CT_SCRATCH / (K + 2 * nn_gemm_ncol_max(ncol))
                      : TW_SCRATCH / nn_gemm_ncol_max(ncol);
    if (vox > 256)
        vox = 256;
    long R = vox / W;
    if (R > TW_ROWS_MAX)
        R = TW_ROWS_MAX;
    if (R < 1)
        R = 1;
    if (T == 8)
        return (int)R;
    if (R >= H)
        return (int)(R / H * H);
    while (H % R)
        R--;
    return (int)R;
}

/* A chunk of nrr rows (tw_chunk_rows) is nz whole planes of H rows, or ny rows of one plane. */
static void tw_chunk_dims(int H, long nrr, long *nz, long *ny) {
    *nz = nrr >= H ? nrr / H : 1;
    *ny = nrr >= H ? H : nrr;
}

/* Floats of one thread's packed panels for the chunks of a T-tap (H, W, K -> ncol) layer of
 * nrows rows, rounded to 64 bytes (no shared cache line). Conv3d: a chunk's voxels times the
 * widest padded columns, plus the widest k block of the padded input block of tw_chunk_conv
 * (3 planes per plane of the chunk, 2 rows and 2 voxels wider). ConvTranspose3d: the chunk's
 * input (K floats per voxel) and a tap pair's G (twice the widest padded columns).
 * Sized per layer, not TW_SCRATCH per thread: with NN_MAX_THREADS slots the fixed size cost
 * 16 MiB in every workspace, the largest part of it that does not shrink with spatial shards
 * (a 16-channel level needs 16 KiB per thread); and a row wider than the chunk budget
 * (W > TW_SCRATCH / ncol) fits. */
static size_t tw_scratch_floats(int T, int H, int W, int K, int ncol, long nrows) {
    const long R0 = tw_chunk_rows(T, H, W, K, ncol), R = R0 < nrows ? R0 : nrows;
    size_t f;
    if (T == 8) {
        f = (size_t)R * W * (K + 2 * nn_gemm_ncol_max(ncol));
    } else {
        long nz, ny;
        tw_chunk_dims(H, R, &nz, &ny);
        f = (size_t)R * W * nn_gemm_ncol_max(ncol) +
            (size_t)3 * nz * (ny + 2) * (W + 2) * NN_TG_MR_MAX;
    }
    return (f + 15) & ~(size_t)15;
}

/* Per-thread weight-gradient copies used for a (T, K, ncol) gradient: as many as fit the budget
 * (at most DW_REPLICAS_MAX, and at most a quarter of the chunks); 0 or 1 means "partition tiles
 * instead". Depends only on the shape, so workspace sizing and the call agree whatever the
 * thread count. */
static int dw_replicas(int T, int K, int ncol, long nrows, int H, int W) {
    const size_t bytes = (size_t)T * K * nn_gemm_ncol_max(ncol) * sizeof(float);
    size_t r = DW_REPLICA_BUDGET / (bytes ? bytes : 1);
    const long cr = tw_chunk_rows(T, H, W, K, ncol), chunks = (nrows + cr - 1) / cr;
    /* SCAFFOLD_NN_DW_REPLICAS lowers the cap (tests use 0 to exercise the tile partition). */
    const char *env = getenv("SCAFFOLD_NN_DW_REPLICAS");
    size_t cap = env ? (size_t)strtoul(env, NULL, 10) : DW_REPLICAS_MAX;
    if (cap > DW_REPLICAS_MAX)
        cap = DW_REPLICAS_MAX;
    /* A copy costs a zeroing and a summing pass over the gradient: worth it only with several
     * chunks to spread (small volumes with wide channels partition the tiles instead). */
    if (cap > (size_t)(chunks / 4))
        cap = (size_t)(chunks / 4);
    return (int)(r > cap ? cap : r);
}

/* Floats of one packed weight-gradient copy (sized for the widest blocks of any path). */
static size_t dw_floats(int T, int K, int ncol) {
    return (size_t)T * K * nn_gemm_ncol_max(ncol);
}

/* Workspace of weight_grad for nrows rows of W voxels: the gradient in packed layout, its
 * replicas, and every thread's packed panels. */
static size_t weight_grad_ws(int T, int K, int ncol, long nrows, int H, int W) {
    const int r = dw_replicas(T, K, ncol, nrows, H, W);
    return dw_floats(T, K, ncol) * (size_t)(r > 1 ? r + 1 : 1) +
           (size_t)NN_MAX_THREADS * tw_scratch_floats(T, H, W, K, ncol, nrows);
}

/* The packed weight gradient is stored tile by tile: the k block [k0, k0 + mk) holds, per
 * column block ob, its T taps' mk x nr tiles one after another. RATIONALE: unpack_dw then
 * reads it in order and writes each output channel's mk * T (Conv3d) or each input channel's
 * nr * T (ConvTranspose3d) gradient floats as one run; laid out [t][k][ncolpad], a channel's
 * T rows lay cin * ncolpad floats apart, the unpacking ran at 2.5 GB/s against 15 for a
 * sequential pass, and it took a quarter of an 8^3 512->512 weight gradient. */
static size_t dw_tile(int k0, int mk, int t, int ob, int T, int nb, int nr) {
    return (size_t)k0 * T * nb * nr + ((size_t)ob * T + t) * mk * nr;
}

/* The weight gradient's k blocks for K input channels and nr-column blocks (k block kb is
 * [split_at(K, nkb, kb), split_at(K, nkb, kb + 1))): one kernel tile's rows each. The tiles
 * (tw_chunk) and the unpacking (unpack_dw) must agree on them. */
static int dw_kblocks(int K, int nr) {
    const int mkmax = nn_tw_mr(nr);
    return (K + mkmax - 1) / mkmax;
}

/* n floats from s to d, the packing's few-float runs (a column block's nr, a k block's mk): a
 * fixed-size copy for the common sizes, which the compiler turns into a few vector moves
 * instead of a call (a libc memcpy of 64 bytes per voxel took a fifth of a ConvTranspose3d
 * weight gradient). */
static inline void copy_run(float *restrict d, const float *restrict s, int n) {
    switch (n) {
    case 5: memcpy(d, s, 5 * sizeof(float)); break;
    case 6: memcpy(d, s, 6 * sizeof(float)); break;
    case 16: memcpy(d, s, 16 * sizeof(float)); break;
    case 32: memcpy(d, s, 32 * sizeof(float)); break;
    default: memcpy(d, s, (size_t)n * sizeof(float)); break;
    }
}

/* G of the chunk's rows [r0, r0 + nrr) into contiguous zero-padded panels
 * Gp[c][ob][voxel][nr] for nt taps: Conv3d's G (nt = 1, t = 0: it does not depend on the tap),
 * or ConvTranspose3d's taps t and t + 1 (nt = 2, t even: the two x offsets, whose voxels
 * alternate along an output row, so the row is read in order). RATIONALE: read in place, each
 * voxel's G block is 64 bytes out of a power-of-two stride, which maps a chunk onto a quarter
 * of the L1 sets; packed, the kernel streams it (measured on Zen 3: 58 -> 87 GFLOP/s for the
 * 6x2 tile). */
static void tw_pack_g(float *Gp, const tw_src *r, long r0, int nrr, int t, int nt) {
    const int ncol = r->cout, W = r->W, nr = nn_gemm_nr(ncol), nb = nblocks(ncol, nr);
    const long nv = (long)nrr * W;
    for (int i = 0; i < nrr; i++) {
        long ao, go;
        tw_row(r, r0 + i, t, &ao, &go);
        for (long xs = 0; xs < (long)nt * W; xs++) {
            const float *g = r->G + go + xs * r->ldg_vox;
            const long c = xs % nt, x = xs / nt;
            for (int b = 0; b < nb; b++) {
                float *d = Gp + (((size_t)c * nb + b) * nv + (size_t)i * W + x) * nr;
                const int n0 = b * nr;
                if (n0 + nr <= ncol) {
                    copy_run(d, g + n0, nr);
                } else {
                    for (int j = 0; j < nr; j++)
                        d[j] = n0 + j < ncol ? g[n0 + j] : 0.0f;
                }
            }
        }
    }
}

/* Conv3d: tiles [t_lo, t_hi) (tile = (k block, column block, tap), tap fastest) of the chunk of
 * rows [r0, r0 + nrr) into Wp. A chunk is nz whole planes or ny rows of one plane
 * (tw_chunk_rows); G is packed once per chunk (tw_pack_g), and the padded input the chunk's
 * taps read, 3 planes by ny + 2 rows by W + 2 voxels per plane of the chunk, is packed once
 * per k block ([dz][plane][row][voxel][k]): every tap's A rows are windows of it. RATIONALE:
 * with taps outermost and one packed A panel per (tap, k block), a 6x2 tile's G panel came
 * from L2 and its weight-gradient tile from memory, and the packing copied each input float
 * 27 times; with the taps of one (k block, column block) consecutive, the A block, the G panel
 * and the 27 tiles they update stay in L1/L2 and each float is copied about 5 times. */
static void tw_chunk_conv(float *Wp, const tw_src *r, long r0, int nrr, long t_lo, long t_hi,
                          float *Gp) {
    const int K = r->cin, ncol = r->cout, H = r->H, W = r->W;
    const int nr = nn_gemm_nr(ncol), nb = nblocks(ncol, nr), nkb = dw_kblocks(K, nr);
    const long nv = (long)nrr * W;
    long nz, ny;
    tw_chunk_dims(H, nrr, &nz, &ny);
    const long z0 = r0 / H, y0 = r0 % H, Wp2 = W + 2, prow = ny + 2;
    float *Ap = Gp + (size_t)nv * nn_gemm_ncol_max(ncol);
    long rowoff[TW_ROWS_MAX]; /* chunk row i's first voxel in the packed block (tap 0) */
    for (int i = 0; i < nrr; i++)
        rowoff[i] = ((long)(i / ny) * prow + i % ny) * Wp2;
    tw_pack_g(Gp, r, r0, nrr, 0, 1);
    int a_kb = -1;
    for (long tile = t_lo; tile < t_hi; tile++) {
        const int t = (int)(tile % 27), ob = (int)((tile / 27) % nb), kb = (int)(tile / (27L * nb));
        const int k0 = split_at(K, nkb, kb), mk = split_at(K, nkb, kb + 1) - k0;
        if (a_kb != kb) {
            float *d = Ap;
            for (int dz = 0; dz < 3; dz++)
                for (long iz = 0; iz < nz; iz++)
                    for (long pr = 0; pr < prow; pr++) {
                        const float *src =
                            r->A + (((z0 + iz + dz) * (H + 2) + y0 + pr) * Wp2) * K + k0;
                        for (long xp = 0; xp < Wp2; xp++, src += K)
                            for (int m = 0; m < mk; m++)
                                *d++ = src[m];
                    }
            a_kb = kb;
        }
        const long tapoff = ((long)(t / 9) * nz * prow + (t / 3) % 3) * Wp2 + t % 3;
        const float *ar[TW_ROWS_MAX], *gr[TW_ROWS_MAX];
        for (int i = 0; i < nrr; i++) {
            ar[i] = Ap + (tapoff + rowoff[i]) * mk;
            gr[i] = Gp + ((size_t)ob * nv + (size_t)i * W) * nr;
        }
        nn_tw_tile(nrr, ar, gr, W, mk, nr, mk, nr, nr, Wp + dw_tile(k0, mk, t, ob, 27, nb, nr),
                   nr);
    }
}

/* ConvTranspose3d's packed weight gradient: per tap t and column block ob, the K x nr tile
 * column, k blocks one after another (dwt_tile), so a (tap, column block)'s tiles are one
 * sequential stream for tw_chunk_convt. */
static size_t dwt_tile(int k0, int t, int ob, int K, int nb, int nr) {
    return (((size_t)t * nb + ob) * K + k0) * nr;
}

/* ConvTranspose3d: tiles [t_lo, t_hi) (tile = (t, column block, k block), k block fastest) of
 * the chunk of rows [r0, r0 + nrr) of the 8-tap layer into Wp (dwt_tile). The chunk's input,
 * which every tap reads at the same voxels, is packed once per call by k block
 * (Ap[kb][voxel][mk], contiguous panels); a (tap, column block)'s G panel, packed when the
 * tiles reach it, stays in L1 while the k blocks' input panels stream past it.
 * RATIONALE: with taps outermost, G packed per tap for every column block and the input
 * re-packed (or read in place, 6 floats out of every voxel's cin) per (tap, k block), the
 * kernels read G from L2 and spent a quarter of the time packing: 44-51% of the FMA peak on
 * Zen 3 at the upstream widths. With r->ones the packed input has one more channel, of ones.
 * next_r0, next_nrr: the chunk this thread takes next (next_r0 < 0: none), prefetched. */
static void tw_chunk_convt(float *Wp, const tw_src *r, long r0, int nrr, long t_lo, long t_hi,
                           float *Gp, long next_r0, int next_nrr) {
    const int C = r->cin, K = C + r->ones, ncol = r->cout, W = r->W;
    const int nr = nn_gemm_nr(ncol), nb = nblocks(ncol, nr), nkb = dw_kblocks(K, nr);
    const long nv = (long)nrr * W;
    float *Ap = Gp + (size_t)2 * nv * nn_gemm_ncol_max(ncol);
    for (int i = 0; i < nrr; i++) {
        long ao, go;
        tw_row(r, r0 + i, 0, &ao, &go);
        for (int kb = 0; kb < nkb; kb++) {
            const int k0 = split_at(K, nkb, kb), mk = split_at(K, nkb, kb + 1) - k0;
            float *d = Ap + ((size_t)k0 * nv + (size_t)i * W * mk);
            if (k0 + mk <= C) {
                for (int x = 0; x < W; x++, d += mk)
                    copy_run(d, r->A + ao + (size_t)x * C + k0, mk);
            } else { /* the last block: its input channels, then the channel of ones */
                for (int x = 0; x < W; x++, d += mk) {
                    copy_run(d, r->A + ao + (size_t)x * C + k0, mk - 1);
                    d[mk - 1] = 1.0f;
                }
            }
        }
    }
    /* While a tap pair's tiles run, the G rows of the pair that comes next (this chunk's next
     * pair, or the first of the thread's next chunk, with that chunk's input) are prefetched
     * into L2, a few lines per tile: a pair's G for one chunk row is one contiguous run of 2W
     * output voxels, so the cursor needs one tw_row per row, not index arithmetic per line.
     * Only when the packed input, the packed pair and the prefetched pair fit TW_PF_BYTES
     * (beyond, they evict each other: 16^3 256->128 and 8^3 512->256 measured 0.96-0.99x).
     * Written inline: GCC deletes the calls to a function whose only statements are prefetches
     * (no side effects), which is what became of an earlier tw_prefetch_g. */
    const int pf = (size_t)nv * (K + 4 * nn_gemm_ncol_max(ncol)) * sizeof(float) <= TW_PF_BYTES;
    const long per_pair = 2L * nb * nkb, run_lines = (2L * W * r->ldg_vox + 15) / 16;
    long pf_r0 = 0, pf_lines = 0, pf_step = 0, pf_i = 0, pf_j = 0, pf_a = 0;
    int pf_nrr = 0, pf_t = 0;
    const float *pf_g = NULL;
    int g_pair = -1;
    for (long tile = t_lo; tile < t_hi; tile++) {
        const long tob = tile / nkb;
        const int t = (int)(tob / nb), ob = (int)(tob % nb), kb = (int)(tile % nkb);
        if (g_pair != t / 2) {
            tw_pack_g(Gp, r, r0, nrr, t & ~1, 2);
            g_pair = t / 2;
            const long end = (g_pair + 1) * per_pair < t_hi ? (g_pair + 1) * per_pair : t_hi;
            pf_nrr = 0, pf_a = 0, pf_i = pf_j = 0;
            if (pf && end < t_hi) {
                pf_r0 = r0, pf_nrr = nrr, pf_t = 2 * g_pair + 2;
            } else if (pf && next_r0 >= 0) {
                pf_r0 = next_r0, pf_nrr = next_nrr, pf_t = (int)(t_lo / (nb * nkb)) & ~1;
                pf_a = ((long)next_nrr * W * C + 15) / 16;
            }
            pf_lines = pf_nrr * run_lines + pf_a;
            pf_step = (pf_lines + (end - tile) - 1) / (end - tile);
        }
        for (long n = 0; n < pf_step && pf_lines > 0; n++, pf_lines--) {
            if (pf_i < pf_nrr) {
                if (pf_j == 0) {
                    long ao, go;
                    tw_row(r, pf_r0 + pf_i, pf_t, &ao, &go);
                    pf_g = r->G + go;
                }
                __builtin_prefetch(pf_g + pf_j * 16, 0, 2);
                if (++pf_j == run_lines)
                    pf_j = 0, pf_i++;
            } else { /* the next chunk's input, one contiguous run */
                __builtin_prefetch(r->A + (size_t)pf_r0 * W * C + (pf_a - pf_lines) * 16, 0, 2);
            }
        }
        const int k0 = split_at(K, nkb, kb), mk = split_at(K, nkb, kb + 1) - k0;
        const float *ar = Ap + (size_t)k0 * nv, *gr = Gp + ((size_t)(t & 1) * nb + ob) * nv * nr;
        nn_tw_tile(1, &ar, &gr, (int)nv, mk, nr, mk, nr, nr, Wp + dwt_tile(k0, t, ob, K, nb, nr),
                   nr);
    }
}

/* dWp (+)= the sum above over voxels [0, nvox) (adds to dWp when accumulate, so
 * a layer can reduce over its slabs one call each). With R replicas: chunk c of voxels
 * accumulates into copy c % R, in chunk order, and the copies are summed in order at the end,
 * so the result does not depend on the threads. Work items are (copy, share of the tiles)
 * pairs taken dynamically: balanced when cores are shared, and no barrier per chunk. Without
 * copies (huge layers) each share of tiles is one work item over all chunks. */
static void weight_grad(float *dWp, const tw_src *r, long nrows, int T, int accumulate) {
    const int K = r->cin + r->ones, ncol = r->cout;
    const int nr = nn_gemm_nr(ncol), nb = nblocks(ncol, nr);
    const int nkb = dw_kblocks(K, nr);
    const long ntiles = (long)T * nkb * nb;
    const size_t nw = dw_floats(T, K, ncol);
    const int CR = tw_chunk_rows(T, r->H, r->W, K, ncol);
    const long nchunks = (nrows + CR - 1) / CR;
    const int nth = nn_threads();
    const size_t nsc = tw_scratch_floats(T, r->H, r->W, K, ncol, nrows);
    int reps = dw_replicas(T, K, ncol, nrows, r->H, r->W);
    if (reps < 1)
        reps = 1;
    float *rep = reps > 1 ? dWp + nw : dWp, *scr = dWp + nw * (reps > 1 ? reps + 1 : 1);
    /* Tile shares per copy: enough work items for every thread. */
    long parts = (nth + reps - 1) / reps;
    if (parts > ntiles)
        parts = ntiles;
    const long items = (long)reps * parts;
    if (reps > 1 || !accumulate) {
#pragma omp parallel for schedule(static)
        for (long i = 0; i < (long)reps * (long)nw; i++)
            rep[i] = 0.0f;
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth)
    for (long it = 0; it < items; it++) {
        const int cp = (int)(it / parts);
        const long part = it % parts;
        const long lo = ntiles * part / parts, hi = ntiles * (part + 1) / parts;
        float *sc = scr + (size_t)omp_get_thread_num() * nsc;
        for (long c = cp; c < nchunks; c += reps) {
            const long r0 = c * CR;
            const int nrr = (int)(nrows - r0 < CR ? nrows - r0 : CR);
            if (r->kind == 0)
                tw_chunk_conv(rep + (size_t)cp * nw, r, r0, nrr, lo, hi, sc);
            else {
                const long n0 = (c + reps) * CR;
                tw_chunk_convt(rep + (size_t)cp * nw, r, r0, nrr, lo, hi, sc,
                               n0 < nrows ? n0 : -1, (int)(nrows - n0 < CR ? nrows - n0 : CR));
            }
        }
    }
    if (reps > 1) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < nw; i++) {
            float s = 0;
            for (int k = 0; k < reps; k++)
                s += rep[(size_t)k * nw + i];
            dWp[i] = accumulate ? dWp[i] + s : s;
        }
    }
}

/* db[c] += sum over P voxels of dout[p*ldo + c], in NN_SLICES fixed slices summed in order
 * (rounded to bf16 in bf16 mode). */
static void bias_grad(float *db, const float *dout, long ldo, long P, int C, nn_prec prec,
                      float *ws) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(nn_threads())
    for (int sl = 0; sl < NN_SLICES; sl++) {
        float *acc = ws + (size_t)sl * C;
        memset(acc, 0, sizeof(float) * C);
        const long lo = P * sl / NN_SLICES, hi = P * (sl + 1) / NN_SLICES;
        for (long p = lo; p < hi; p++) {
            const float *d = dout + p * ldo;
            for (int c = 0; c < C; c++)
                acc[c] += d[c];
        }
    }
    for (int c = 0; c < C; c++) {
        float s = 0;
        for (int sl = 0; sl < NN_SLICES; sl++)
            s += ws[(size_t)sl * C + c];
        db[c] += prec == NN_BF16 ? nn_bf16_round(s) : s;
    }
}

/* dW (PyTorch layout, w[oc][ic][t]) += the packed Conv3d gradient (dw_tile), rounded to bf16
 * in bf16 mode (PyTorch autocast computes the weight gradient of the bf16 weight copy in
 * bf16). */
static void unpack_dw(float *dw, const float *Wp, int cin, int cout, nn_prec prec) {
    const int T = 27, nr = nn_gemm_nr(cout), nb = nblocks(cout, nr), nkb = dw_kblocks(cin, nr);
#pragma omp parallel for collapse(2) schedule(static)
    for (int kb = 0; kb < nkb; kb++)
        for (int ob = 0; ob < nb; ob++) {
            const int k0 = split_at(cin, nkb, kb), mk = split_at(cin, nkb, kb + 1) - k0;
            const int n0 = ob * nr, nvalid = cout - n0 < nr ? cout - n0 : nr;
            const float *blk = Wp + dw_tile(k0, mk, 0, ob, T, nb, nr);
            for (int j = 0; j < nvalid; j++)
                for (int m = 0; m < mk; m++) {
                    float *d = dw + ((size_t)(n0 + j) * cin + k0 + m) * T;
                    const float *src = blk + (size_t)m * nr + j;
                    for (int t = 0; t < T; t++) {
                        const float g = src[(size_t)t * mk * nr];
                        d[t] += prec == NN_BF16 ? nn_bf16_round(g) : g;
                    }
                }
        }
}

/* dW (PyTorch layout, w[ic][oc][t]) += the packed ConvTranspose3d gradient (dwt_tile), rounded
 * as unpack_dw; with db, also db[oc] += its row of ones (the 8 taps summed in order). One input
 * channel's cout * 8 floats are written as one run; they gather one nr-float row per (tap,
 * column block). */
static void unpack_dwt(float *dw, float *db, const float *Wp, int cin, int cout, nn_prec prec) {
    const int nr = nn_gemm_nr(cout), nb = nblocks(cout, nr), K = cin + (db != NULL);
#pragma omp parallel for schedule(static)
    for (int ic = 0; ic < cin; ic++)
        for (int ob = 0; ob < nb; ob++) {
            const int n0 = ob * nr, nvalid = cout - n0 < nr ? cout - n0 : nr;
            float *d = dw + ((size_t)ic * cout + n0) * 8;
            for (int t = 0; t < 8; t++) {
                const float *src = Wp + dwt_tile(ic, t, ob, K, nb, nr);
                if (prec == NN_BF16)
                    for (int j = 0; j < nvalid; j++)
                        d[j * 8 + t] += nn_bf16_round(src[j]);
                else
                    for (int j = 0; j < nvalid; j++)
                        d[j * 8 + t] += src[j];
            }
        }
    if (!db)
        return;
    for (int oc = 0; oc < cout; oc++) {
        const int ob = oc / nr, j = oc % nr;
        float s = 0;
        for (int t = 0; t < 8; t++)
            s += Wp[dwt_tile(cin, t, ob, K, nb, nr) + j];
        db[oc] += prec == NN_BF16 ? nn_bf16_round(s) : s;
    }
}

/* ---- Conv3d k3 -------------------------------------------------------------------------- */

static size_t conv3d_ws(int N, int D, int H, int W, int cin, int cout, const nn_shard *sh) {
    size_t sa = slab_floats(D, H, W, cin, sh), sb = slab_floats(D, H, W, cout, sh);
    size_t pf = packed_floats(cout, cin + 1, 27), pb = packed_floats(cin, cout + 1, 27);
    size_t pw = weight_grad_ws(27, cin, cout, (long)slab_depth(D, H, W, cin, sh) * H, H, W);
    size_t p = pf > pb ? pf : pb;
    if (p < pw)
        p = pw;
    /* Winograd (forward: K = cin, input gradient: K = cout), whose slabs are no deeper */
    if (wino_applies(D, H, W, cin, cout, NN_FP32, sh) && p < wino_ws_floats(cin, cout))
        p = wino_ws_floats(cin, cout);
    if (wino_applies(D, H, W, cout, cin, NN_FP32, sh) && p < wino_ws_floats(cout, cin))
        p = wino_ws_floats(cout, cin);
    /* Winograd on few tiles: forward and weight gradient (K = cin), input gradient (K = cout) */
    if (wino_small_applies(N, D, H, W, cin, cout, NN_FP32, sh) &&
        p < wino_small_ws_floats(N, D, H, W, cin, cout))
        p = wino_small_ws_floats(N, D, H, W, cin, cout);
    if (wino_small_applies(N, D, H, W, cout, cin, NN_FP32, sh) &&
        p < wino_small_ws_floats(N, D, H, W, cout, cin))
        p = wino_small_ws_floats(N, D, H, W, cout, cin);
    return (sa > sb ? sa : sb) + 16 + p + 64;
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
    int bf16; /* winograd-bf16 */
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
 * the input padded once and every job's tiles (one chunk's V and M after the last U). */
static void wino_pass(const wino_in *in, const wino_job *jb, int nj, long sc, long sk, int flip,
                      float *ub) {
    void *U[2];
    size_t at = 0; /* floats */
    const int Kp = in->bf16 ? (in->K + 1) & ~1 : in->K;
    for (int j = 0; j < nj; j++) {
        const int nr = nn_gemm_nr(jb[j].ld);
        U[j] = ub + at;
        wino_weights(U[j], jb[j].w, jb[j].n, in->K, sc, sk, flip, nr, in->prec, in->bf16);
        const size_t nu = WINO_NXI * (size_t)Kp * nblocks(jb[j].n, nr) * nr;
        at += in->bf16 ? (nu + 1) / 2 : nu;
    }
    float *VM = ub + ((at + 15) & ~(size_t)15);
    const int D = in->D, H = in->H, W = in->W;
    for (int n = 0; n < in->N; n++)
        for (int z0 = 0; z0 < D; z0 += in->Zc) {
            const int z1 = z0 + in->Zc < D ? z0 + in->Zc : D;
            pad_slab(in->P, in->fmt, in->a, in->ca, in->ca, in->b, in->cb, n, z0, z1, D, H, W);
            for (int j = 0; j < nj; j++) {
                float *o = jb[j].out + (((size_t)n * D + z0) * H * W) * jb[j].ld;
                wino_slab(o, jb[j].ld, jb[j].n, in->P, in->K, U[j], nn_gemm_nr(jb[j].ld), z1 - z0,
                          H, W, VM, in->bf16);
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

/* The direct walk: pairs 0 (fp32 kernels; bf16 on rounded operands), PAIRS_DP or PAIRS_AMX. */
static void conv3d_direct(const conv_args *x, int pairs) {
    const int N = x->N, D = x->D, H = x->H, W = x->W, K = x->ca + x->cb;
    const nn_prec prec = x->prec;
    const int fmt = pairs ? PAD_BF16 : prec == NN_BF16 ? PAD_F32R : PAD_F32;
    const int Kp = pad_channels(fmt, K), Zc = slab_depth(D, H, W, K, x->sh);
    void *P = x->ws;
    float *Bp = x->ws + ((slab_floats(D, H, W, K, x->sh) + 15) & ~(size_t)15);
    long aoff[27];
    taps27(aoff, H, W, Kp, x->flip);
    const int nparts = x->out2 ? 2 : 1;
    /* With one output part the weights are packed once; with two, per slab (cheap: a slab's
     * convolution does Zc*H*W times the packing's work). */
    for (int n = 0; n < N; n++)
        for (int z0 = 0; z0 < D; z0 += Zc) {
            const int z1 = z0 + Zc < D ? z0 + Zc : D;
            pad_slab(P, fmt, x->a, x->ca, x->ca, x->b, x->cb, n, z0, z1, D, H, W);
            for (int part = 0; part < nparts; part++) {
                const int ncol = part ? x->n2 : x->n1;
                const int nr = nn_gemm_nr(ncol), nkb = kblocks(Kp, 27, nr, kunit(pairs));
                if (nparts == 2 || (n == 0 && z0 == 0)) {
                    const float *wp = x->w + (part ? (long)x->n1 * x->sc : 0);
                    if (pairs)
                        pack_b16((uint16_t *)Bp, wp, ncol, K, 27, x->sc, x->sk, 1, nr, nkb,
                                 kunit(pairs));
                    else
                        pack_b(Bp, wp, ncol, K, 27, x->sc, x->sk, 1, nr, nkb, prec);
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
    if (wino_small_applies(N, D, H, W, K, x->n1 + x->n2, prec, x->sh)) {
        wino_small_pass(x->out1, x->n1, x->out2, x->n2, x->a, x->ca, x->b, x->cb, x->w, x->sc,
                        x->sk, x->flip, N, D, H, W, prec, x->ws);
        return;
    }
    /* Winograd tiles are two planes deep: even slabs (no deeper than the workspace's) */
    const int Zc = slab_depth(D, H, W, K, NULL) & ~1;
    float *Bp = x->ws + ((slab_floats(D, H, W, K, NULL) + 15) & ~(size_t)15);
    const wino_in in = {.P = x->ws, .fmt = prec == NN_BF16 ? PAD_F32R : PAD_F32, .prec = prec,
                        .a = x->a, .ca = x->ca, .b = x->b, .cb = x->cb, .K = K, .N = N, .D = D,
                        .H = H, .W = W, .Zc = Zc, .bf16 = bf16};
    const int nparts = x->out2 ? 2 : 1;
    wino_job jb[2];
    size_t at = 0;
    for (int part = 0; part < nparts; part++) {
        const int ncol = part ? x->n2 : x->n1, nr = nn_gemm_nr(ncol);
        jb[part] = (wino_job){.out = part ? x->out2 : x->out1, .ld = ncol, .n = ncol,
                              .w = x->w + (part ? (long)x->n1 * x->sc : 0)};
        at += WINO_NXI * (size_t)K * nblocks(ncol, nr) * nr;
    }
    if (4 * (long)at <= wino_umax()) { /* both parts' U at once: one pass */
        wino_pass(&in, jb, nparts, x->sc, x->sk, x->flip, Bp);
        return;
    }
    /* U over wino_umax(): a pass per part and column group */
    for (int part = 0; part < nparts; part++) {
        const wino_job whole = jb[part];
        const int gc = wino_group_cols(K, whole.ld, nn_gemm_nr(whole.ld));
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
    const int wino = wino_small_applies(x->N, x->D, x->H, x->W, K, x->n1 + x->n2, x->prec, x->sh) ||
                     wino_applies(x->D, x->H, x->W, K, x->n1 + x->n2, x->prec, x->sh);
    if (wino)
        el |= 1u << NN_ALGO_WINOGRAD;
    if (use_pairs(x->prec) && !x->sh) {
        el |= 1u << NN_ALGO_DIRECT_BF16;
        if (wino_applies(x->D, x->H, x->W, K, x->n1 + x->n2, x->prec, x->sh) &&
            !wino_small_applies(x->N, x->D, x->H, x->W, K, x->n1 + x->n2, x->prec, x->sh))
            el |= 1u << NN_ALGO_WINOGRAD_BF16;
        if (nn_isa_amx() && K % 32 == 0)
            el |= 1u << NN_ALGO_AMX;
    }
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
        conv3d_direct(x, PAIRS_DP);
        break;
    case NN_ALGO_AMX:
        conv3d_direct(x, PAIRS_AMX);
        break;
    default:
        conv3d_direct(x, 0);
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
                              x->out2 ? (size_t)x->N * x->D * x->H * x->W * x->n2 : 0}};
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

/* ---- bf16 weight gradient on AMX tiles ------------------------------------------------------
 * dW[t][ic][oc] = sum over voxels v of x(v + tap t)[ic] * dy(v)[oc], as tile products over the
 * positions (TDPBF16PS reduces over 32 of them per instruction): the input transposed into one
 * row of positions per channel over the padded slab (xT, bf16), where output voxel (z, y, x)
 * has the corner position q = (z*Hp + y)*Wp + x and tap (dz, dy, dx) reads q + dz*Hp*Wp +
 * dy*Wp + dx, so every tap is an offset into the same rows; the output gradient as position
 * pairs (dyP, bf16, the B-tile layout), zero at the corner positions that are padding (y >= H
 * or x >= W), which therefore add nothing; fp32 accumulators per (tap, 32 input x 32 output
 * channels) kept in four tiles over a chunk of positions whose dyP stays in L2, stored
 * between chunks. The sum is over bf16 operands in fp32, rounded to bf16 once at the end, as
 * the direct kernels do. Layout in the layer's workspace: acc [27][cin][cout] fp32, xT
 * [cin][ldx], dyP [qs/2][cout][2]; the slab depth is the deepest that fits. */
#define AMX_DW_CHUNK_BYTES (1u << 20)
/* Fewer voxels per call, or fewer voxels than channels, and the accumulators' traffic (27*cin*cout
 * floats stored per tile group and reduced at the end) outweighs the tile products: at 8^3 (512
 * voxels) 1024->1024 the AMX pass took 89 ms against 55 for the fp32 one, 512->512 the same
 * (14 ms), 256->256 3.5 against 4.8 ms; from 16^3 up it runs about twice as fast */
#define AMX_DW_VOX_MIN 512

static long amx_round32(long v) {
    return (v + 31) & ~31L;
}

/* Floats of the layout for slabs of Zc planes (ldx, qs: xT's row pitch, dyP's positions). */
static size_t amx_dw_floats(int Zc, int H, int W, int cin, int cout, long *ldx, long *qs) {
    const long HW = (long)(H + 2) * (W + 2);
    /* A tiles read 32 positions from q + the largest tap offset, q < qs */
    *ldx = amx_round32((Zc + 2) * HW + 2 * (W + 2) + 2 + 32);
    *qs = amx_round32((long)Zc * HW);
    return 27 * (size_t)cin * cout + 16 + ((size_t)cin * *ldx + (size_t)*qs * cout) / 2;
}

static size_t conv3d_ws(int N, int D, int H, int W, int cin, int cout, const nn_shard *sh);

/* The slab depth for amx_dw within the layer's workspace; 0 when AMX does not apply. */
static int amx_dw_depth(int N, int D, int H, int W, int cin, int cout, nn_prec prec,
                        const nn_shard *sh) {
    if (!use_pairs(prec) || sh || !nn_isa_amx() || cin % 16 || cout % 16 ||
        (long)N * D * H * W < AMX_DW_VOX_MIN || (long)N * D * H * W < (cin > cout ? cin : cout))
        return 0;
    const size_t cap = conv3d_ws(N, D, H, W, cin, cout, NULL);
    long ldx, qs;
    for (int Zc = D; Zc >= 1; Zc--)
        if (amx_dw_floats(Zc, H, W, cin, cout, &ldx, &qs) <= cap)
            return Zc;
    return 0;
}

static void amx_dw(float *dw, const float *a, int ca, const float *b, int cb, const float *dy,
                   int cout, int N, int D, int H, int W, int Zc, float *ws) {
    const int cin = ca + cb, Hp = H + 2, Wp = W + 2;
    const long HW = (long)Hp * Wp;
    long ldx, qs;
    amx_dw_floats(Zc, H, W, cin, cout, &ldx, &qs);
    float *acc = ws;
    uint16_t *xT = (uint16_t *)(((uintptr_t)(acc + 27 * (size_t)cin * cout) + 63) & ~(uintptr_t)63);
    uint16_t *dyP = xT + (size_t)cin * ldx;
    const int nig = (cin / 16 + 1) / 2, nog = (cout / 16 + 1) / 2, ng = 27 * nig * nog;
    /* positions per chunk: the chunk's dyP (read by every tile group) within L2; the A rows of
     * one (tap, input block) are reused by the output blocks that follow it */
    long qc = (long)(AMX_DW_CHUNK_BYTES / (2 * (size_t)cout)) & ~31L;
    qc = qc < 256 ? 256 : qc;
    int first = 1;
    for (int n = 0; n < N; n++)
        for (int z0 = 0; z0 < D; z0 += Zc) {
            const int nz = z0 + Zc < D ? Zc : D - z0;
            const long q_end = amx_round32(nz * HW), tail = (nz + 2) * HW;
            /* xT: the padded planes z0 - 1 .. z0 + nz, then zeros to the row's end (read by the
             * last tiles, times zero gradients: stale values could be NaN patterns) */
#pragma omp parallel for collapse(2) schedule(static)
            for (long zs = 0; zs < nz + 2; zs++)
                for (long yp = 0; yp < Hp; yp++) {
                    const long p0 = (zs * Hp + yp) * Wp, z = z0 - 1 + zs, y = yp - 1;
                    if (z < 0 || z >= D || y < 0 || y >= H) {
                        for (int ic = 0; ic < cin; ic++)
                            memset(xT + ic * ldx + p0, 0, sizeof(uint16_t) * Wp);
                        continue;
                    }
                    for (int ic = 0; ic < cin; ic++)
                        xT[ic * ldx + p0] = 0, xT[ic * ldx + p0 + Wp - 1] = 0;
                    const size_t src = (((size_t)n * D + z) * H + y) * W;
                    nn_amx_pack_t(xT + p0 + 1, ldx, a + src * ca, ca, W, ca);
                    if (cb)
                        nn_amx_pack_t(xT + (size_t)ca * ldx + p0 + 1, ldx, b + src * cb, cb, W,
                                      cb);
                }
            for (int ic = 0; ic < cin; ic++)
                memset(xT + ic * ldx + tail, 0, sizeof(uint16_t) * (ldx - tail));
            /* dyP: the pairs of corner positions below q_end */
#pragma omp parallel for schedule(static)
            for (long pp = 0; pp < q_end / 2; pp++) {
                const float *sp[2];
                for (int i = 0; i < 2; i++) {
                    const long q = 2 * pp + i, zs = q / HW, y = q % HW / Wp, x = q % Wp;
                    sp[i] = zs < nz && y < H && x < W
                                ? dy + ((((size_t)n * D + z0 + zs) * H + y) * W + x) * cout
                                : NULL;
                }
                nn_amx_pack_pair(dyP + pp * 2 * cout, sp[0], sp[1], cout);
            }
#pragma omp parallel
            for (long q0 = 0; q0 < q_end; q0 += qc) {
                const long nq = q_end - q0 < qc ? q_end - q0 : qc;
#pragma omp for schedule(dynamic, 1)
                for (int g = 0; g < ng; g++) {
                    const int t = g / (nig * nog), ic0 = 32 * (g / nog % nig), oc0 = 32 * (g % nog);
                    const long aoff = t / 9 * HW + t / 3 % 3 * Wp + t % 3;
                    nn_amx_dw(xT + ic0 * ldx + q0 + aoff, ldx, dyP + q0 * cout + 2 * oc0, cout,
                              nq, cin - ic0 > 16 ? 2 : 1, cout - oc0 > 16 ? 2 : 1,
                              acc + ((size_t)t * cin + ic0) * cout + oc0, cout, first && !q0);
                }
            }
            first = 0;
        }
    /* dw[oc][ic][t] += bf16(acc[t][ic][oc]): the gradient of the bf16 weight copy. Per input
     * channel and block of 16 output channels, one line from each of acc's 27 tap rows (read
     * once: element by element the 27 rows, cin*cout floats apart, fall into one L1 set and
     * evict each other, which took 40% of an 8^3 512->512 pass) */
#pragma omp parallel for schedule(static)
    for (int ic = 0; ic < cin; ic++) {
        float tb[27][16];
        for (int oc0 = 0; oc0 < cout; oc0 += 16) {
            for (int t = 0; t < 27; t++)
                memcpy(tb[t], acc + ((size_t)t * cin + ic) * cout + oc0, sizeof tb[t]);
            for (int j = 0; j < 16; j++) {
                float *d = dw + ((size_t)(oc0 + j) * cin + ic) * 27;
                for (int t = 0; t < 27; t++)
                    d[t] += nn_bf16_round(tb[t][j]);
            }
        }
    }
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
 * wino_umax() (else one group), each group's pass over the input on its own. */
static void dw_winograd(float *dw, const dw_args *x, int bf16) {
    const int cin = x->ca + x->cb, cout = x->cout, D = x->D, H = x->H, W = x->W;
    const nn_prec prec = x->prec;
    if (wino_small_applies(x->N, D, H, W, cin, cout, prec, x->sh)) {
        wino_small_dw(dw, x->a, x->ca, x->b, x->cb, x->dy, cout, x->N, D, H, W, prec, x->ws);
        return;
    }
    const int Zc = slab_depth(D, H, W, cin, NULL) & ~1, nr = nn_gemm_nr(cout);
    const int gc = wino_group_cols(cin, cout, nr);
    float *P = x->ws, *dU = x->ws + ((slab_floats(D, H, W, cin, NULL) + 15) & ~(size_t)15);
    const size_t nu_max = WINO_NXI * (size_t)cin * nblocks(gc, nr) * nr;
    float *VM = dU + ((nu_max + 15) & ~(size_t)15);
    for (int c0 = 0; c0 < cout; c0 += gc) {
        const int cg = cout - c0 < gc ? cout - c0 : gc;
        const size_t nu = WINO_NXI * (size_t)cin * nblocks(cg, nr) * nr;
#pragma omp parallel for schedule(static) num_threads(nn_threads())
        for (size_t i = 0; i < nu; i++)
            dU[i] = 0.0f;
        for (int n = 0; n < x->N; n++)
            for (int z0 = 0; z0 < D; z0 += Zc) {
                const int z1 = z0 + Zc < D ? z0 + Zc : D;
                pad_slab(P, prec == NN_BF16 ? PAD_F32R : PAD_F32, x->a, x->ca, x->ca, x->b, x->cb,
                         n, z0, z1, D, H, W);
                const float *g = x->dy + (((size_t)n * D + z0) * H * W) * cout + c0;
                wino_dw_slab(dU, P, cin, g, cout, cg, nr, z1 - z0, H, W, VM, bf16);
            }
        wino_dw_finish(dw + (size_t)c0 * cin * 27, dU, cin, cg, nr, prec, bf16);
    }
}

/* The direct weight gradient: padded (halo'd) input x output gradient, reduced over voxels. */
static void dw_direct(float *dw, const dw_args *x) {
    const int cin = x->ca + x->cb, cout = x->cout, D = x->D, H = x->H, W = x->W;
    const nn_shard *sh = x->sh;
    const int Zc = slab_depth(D, H, W, cin, sh);
    float *P = x->ws, *Wp = x->ws + ((slab_floats(D, H, W, cin, sh) + 15) & ~(size_t)15);
    for (int n = 0; n < x->N; n++)
        for (int z0 = 0; z0 < D; z0 += Zc) {
            const int z1 = z0 + Zc < D ? z0 + Zc : D;
            pad_slab(P, x->prec == NN_BF16 ? PAD_F32R : PAD_F32, x->a, x->ca, x->ca, x->b, x->cb,
                     n, z0, z1, D, H, W);
            if (sh) {
                sh->halo_start(sh->ctx, P, 1, D, H, W, cin);
                sh->halo_finish(sh->ctx, P, 1, D, H, W, cin);
            }
            const tw_src r = {.A = P,
                              .G = x->dy + (((size_t)n * D + z0) * H * W) * cout,
                              .kind = 0,
                              .D = z1 - z0,
                              .H = H,
                              .W = W,
                              .cin = cin,
                              .cout = cout,
                              .ldg_vox = cout};
            weight_grad(Wp, &r, (long)(z1 - z0) * H, 27, n > 0 || z0 > 0);
        }
    unpack_dw(dw, Wp, cin, cout, x->prec);
}

static void dw_run(const nn_algo_job *j, int algo, float *dw) {
    const dw_args *x = j->ctx;
    if (algo == NN_ALGO_AMX)
        amx_dw(dw, x->a, x->ca, x->b, x->cb, x->dy, x->cout, x->N, x->D, x->H, x->W,
               amx_dw_depth(x->N, x->D, x->H, x->W, x->ca + x->cb, x->cout, x->prec, x->sh),
               x->ws);
    else if (algo == NN_ALGO_WINOGRAD || algo == NN_ALGO_WINOGRAD_BF16)
        dw_winograd(dw, x, algo == NN_ALGO_WINOGRAD_BF16);
    else
        dw_direct(dw, x);
}

/* The weight gradient's algorithms: direct; Winograd where it applies (in bf16 too: the
 * operands are bf16 values, and the transforms' fp32 error, ~1e-5 of the sum, tested, is far
 * below the one bf16 rounding of the result); winograd-bf16 there with the bf16 kernels; AMX
 * from 512 voxels (amx_dw_depth). No direct walk on vdpbf16ps exists for it. */
static nn_algo_job dw_job(float *dw, const dw_args *x) {
    const int cin = x->ca + x->cb;
    const int wino = wino_small_applies(x->N, x->D, x->H, x->W, cin, x->cout, x->prec, x->sh) ||
                     wino_applies(x->D, x->H, x->W, cin, x->cout, x->prec, x->sh);
    unsigned el = 1u << NN_ALGO_DIRECT;
    if (wino)
        el |= 1u << NN_ALGO_WINOGRAD;
    if (use_pairs(x->prec) && wino_applies(x->D, x->H, x->W, cin, x->cout, x->prec, x->sh))
        el |= 1u << NN_ALGO_WINOGRAD_BF16;
    if (amx_dw_depth(x->N, x->D, x->H, x->W, cin, x->cout, x->prec, x->sh))
        el |= 1u << NN_ALGO_AMX;
    nn_algo_job j = {.key = {.pass = NN_PASS_BWD_WEIGHT, .prec = x->prec, .N = x->N, .D = x->D,
                             .H = x->H, .W = x->W, .ca = x->ca, .cb = x->cb, .cout = x->cout},
                     .eligible = el,
                     .run = dw_run,
                     .ctx = (void *)x,
                     .ndw = 27 * (size_t)cin * x->cout};
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

/* ---- ConvTranspose3d k2 s2 -------------------------------------------------------------- */

static int ct_amx(int cin, int cout, nn_prec prec);
static size_t ct_amx_ws_floats(int D, int H, int W, int cin, int cout);

size_t nn_convt3d_ws_floats_p(int N, int D, int H, int W, int cin, int cout, nn_prec prec) {
    size_t pf = packed_floats(cout, cin, 8), pb = packed_floats(cin, cout, 8);
    size_t pw = weight_grad_ws(8, cin + 1, cout, (long)N * D * H, H, W); /* + the ones */
    size_t p = pf > pb ? pf : pb;
    if (pw > p)
        p = pw;
    size_t bias = (size_t)NN_SLICES * cout;
    /* bf16: the input rounded to bf16 (the A operand of forward and weight gradient). */
    const size_t rin = prec == NN_BF16 ? (size_t)N * D * H * W * cin + 16 : 0;
    const size_t all = rin + (p > bias ? p : bias) + (size_t)nn_gemm_ncol_max(cout) + 64;
    /* bf16 on AMX: the forward pass's bf16 input and packed weights fit in the above; the
     * backward pass's slabs may not */
    if (!ct_amx(cin, cout, prec))
        return all;
    const size_t amx = ct_amx_ws_floats(D, H, W, cin, cout);
    return amx > all ? amx : all;
}

/* Bias padded to whole column blocks (the kernels read nr floats of it), rounded in bf16. */
static float *bias_padded(float *dst, const float *b, int n, int nr, nn_prec prec) {
    const int np = nblocks(n, nr) * nr;
    for (int j = 0; j < np; j++)
        dst[j] = j < n ? (prec == NN_BF16 ? nn_bf16_round(b[j]) : b[j]) : 0.0f;
    return dst;
}

/* The A operand of a layer that reads its input in place: the input itself, or in bf16 a
 * rounded copy at the start of ws (*rest: the workspace after it). */
static const float *input_prec(const float *in, size_t n, nn_prec prec, float *ws, float **rest) {
    if (prec != NN_BF16) {
        *rest = ws;
        return in;
    }
    copy_prec(ws, in, n, prec);
    *rest = ws + ((n + 15) & ~(size_t)15);
    return ws;
}

/* Column-block groups per ConvTranspose3d row item: with fewer than 8 items per thread (8^3:
 * 8 planes), the items' column blocks are split into groups, so that the threads end together
 * (a tenth of an 8^3 512->256 pass was spent waiting). The results do not depend on it. */
static int ct_groups(long items, int nb) {
    const long want = 8L * nn_threads();
    if (items >= want)
        return 1;
    const long g = (want + items - 1) / items;
    return g < nb ? (int)g : nb;
}

/* Rows per ConvTranspose3d work item: at least CT_POS positions (whole planes when small). */
#define CT_POS 64
#define CT_STREAM_BYTES (32u << 20) /* outputs larger than this are streamed (an L3's size) */
static int ct_rows(int H, int W) {
    const int r = (CT_POS + W - 1) / W;
    return r < H ? r : H;
}

/* ---- bf16 ConvTranspose3d on AMX tiles -------------------------------------------------------
 * Tap t = (dz, dy, dx) of a k2 s2 transposed convolution joins input voxel v = (z, y, x) to
 * output voxel (2z + dz, 2y + dy, 2x + dx): eight 1x1 products. Forward (in
 * nn_convt3d_forward_p): per tap a 1-tap GEMM over the input (packed to bf16 once) writing
 * every other output voxel. Input gradient: the
 * output gradient regrouped by tap into bf16 planes indexed like the input ([t][v][c]), so
 * the eight taps are offsets into one buffer and 32 consecutive voxels are one fixed stride
 * apart (an A tile). Weight gradient: dW_t = sum over v of x(v)^T dout_t(v), on nn_amx_dw with
 * the input transposed (one row of voxels per channel) and each tap's output gradient as voxel
 * pairs. The last two go slab by slab of input planes, so the packed copies stay within half
 * of slab_bytes() (24 MiB) whatever the volume. Sums in fp32 over bf16 operands, one rounding,
 * as the other bf16 kernels. */

static int ct_amx(int cin, int cout, nn_prec prec) {
    return use_pairs(prec) && nn_isa_amx() && cin % 32 == 0 && cout % 32 == 0;
}

int nn_convt3d_algo(int cin, int cout, nn_prec prec) {
    return ct_amx(cin, cout, prec) ? NN_ALGO_AMX : NN_ALGO_DIRECT;
}

/* Input planes per slab of the backward pass, and its voxel rows' pitch (a multiple of 32):
 * per input voxel, the transposed input and its row of ones (cin + 16), and the output gradient
 * twice (by tap, and as pairs: 16 cout), in bf16. */
static int ct_amx_slab(int D, int H, int W, int cin, int cout, long *ldv) {
    const size_t plane = (size_t)H * W * (cin + 16 + 16 * (size_t)cout) * sizeof(uint16_t);
    int Zc = (int)(slab_bytes() / 2 / plane);
    Zc = Zc < 1 ? 1 : Zc > D ? D : Zc;
    *ldv = amx_round32((long)Zc * H * W);
    return Zc;
}

/* Floats of the backward pass's layout: acc [8][cin + 16][cout] fp32; xT [cin + 16][ldv],
 * dyP [8][ldv/2][cout][2], Dt [8][ldv][cout] and the input gradient's packed weights, bf16. */
static size_t ct_amx_ws_floats(int D, int H, int W, int cin, int cout) {
    long ldv;
    ct_amx_slab(D, H, W, cin, cout, &ldv);
    const size_t acc = 8 * ((size_t)cin + 16) * cout + 16;
    const size_t u16 = ((size_t)cin + 16) * ldv + 16 * (size_t)ldv * cout +
                       8 * (size_t)nn_gemm_ncol_max(cin) * cout + 32;
    return acc + u16 / 2 + 64;
}

/* The output gradient of input planes [z0, z0 + nz) of sample n, once: by tap into Dt
 * (Dt[(t*ldv + v)*cout + c], v the voxel's index in the slab) and as voxel pairs into dyP
 * (dyP[t*ldv*cout + (v/2)*2*cout + 2c + v%2], zero beyond the slab's voxels); either may be
 * NULL. */
static void ct_amx_pack_dout(uint16_t *Dt, uint16_t *dyP, const float *dout, long ldo, int cout,
                             int n, int z0, int nz, int D, int H, int W, long ldv) {
    const long HW = (long)H * W, nv = nz * HW;
    /* voxel pairs in order, all taps of a pair together: dout is read as 4 rows streaming
     * forward (by tap first, every other voxel of each row, 8 times: 1.6x slower at 64^3) */
#pragma omp parallel for schedule(static)
    for (long pp = 0; pp < ldv / 2; pp++)
        for (int t = 0; t < 8; t++) {
            const float *sp[2];
            for (int i = 0; i < 2; i++) {
                const long v = 2 * pp + i, z = v / HW, y = v % HW / W, x = v % W;
                sp[i] = v < nv ? dout + ((((size_t)n * 2 * D + 2 * (z0 + z) + t / 4) * 2 * H +
                                          2 * y + t / 2 % 2) * 2 * W + 2 * x + t % 2) * ldo
                               : NULL;
            }
            if (dyP)
                nn_amx_pack_pair(dyP + ((size_t)t * ldv + 2 * pp) * cout, sp[0], sp[1], cout);
            for (int i = 0; i < 2 && Dt; i++)
                if (sp[i])
                    nn_bf16_pack(Dt + ((size_t)t * ldv + 2 * pp + i) * cout, sp[i], cout);
        }
}

/* The backward pass, slab by slab of input planes: dw (PyTorch layout [ic][oc][t]) +=
 * bf16(sum over voxels of x^T dout_t) on nn_amx_dw, db from a row of ones under x^T (no pass of
 * its own over the output gradient), din = sum over taps of dout_t W_t^T as a tap GEMM over Dt
 * (the taps offsets into it); the output gradient is read once for both. */
static void ct_amx_backward(float *din, float *dw, float *db, const float *dout, long ldo,
                            const float *in, const float *w, int cin, int cout, int N, int D,
                            int H, int W, float *ws) {
    long ldv;
    const int Zc = ct_amx_slab(D, H, W, cin, cout, &ldv);
    const long HW = (long)H * W;
    const int ci = cin + (db ? 16 : 0); /* rows of xT: the input's, then ones and zeros */
    float *acc = ws;
    uint16_t *xT = (uint16_t *)(((uintptr_t)(acc + 8 * (size_t)ci * cout) + 63) & ~(uintptr_t)63);
    uint16_t *dyP = dw ? xT + (size_t)ci * ldv : NULL;
    uint16_t *Dt = din ? xT + (size_t)ci * ldv + 8 * (size_t)ldv * cout : NULL;
    uint16_t *Bp = xT + (size_t)ci * ldv + 16 * (size_t)ldv * cout;
    /* weight gradient: tile groups (tap, 32 rows of xT, 32 output channels) over chunks of
     * voxels whose operands stay in L2 */
    const int nig = (ci / 16 + 1) / 2, nog = (cout / 16 + 1) / 2, ng = 8 * nig * nog;
    long qc = (long)(AMX_DW_CHUNK_BYTES / (2 * (size_t)(ci + cout))) & ~31L;
    qc = qc < 256 ? 256 : qc;
    /* input gradient: as the fp32 pass, work items of a few rows of din */
    const int nr = nn_gemm_nr(cin), nb = nblocks(cin, nr), nkb = kblocks(cout, 8, nr, 32);
    long aoff[8];
    for (int t = 0; t < 8; t++)
        aoff[t] = (long)t * ldv * cout;
    const nn_tg g = {.T = 8, .K = cout, .aoff = aoff, .nr = nr};
    const int YR = ct_rows(H, W), ny = (H + YR - 1) / YR;
    if (din)
        pack_b16(Bp, w, cin, cout, 8, (long)cout * 8, 8, 1, nr, nkb, 32);
    int first = 1;
    for (int n = 0; n < N; n++)
        for (int z0 = 0; z0 < D; z0 += Zc) {
            const int nz = z0 + Zc < D ? Zc : D - z0;
            const long nv = nz * HW;
            ct_amx_pack_dout(Dt, dyP, dout, ldo, cout, n, z0, nz, D, H, W, ldv);
            if (dw) {
#pragma omp parallel for schedule(static)
                for (long v0 = 0; v0 < nv; v0 += 256)
                    nn_amx_pack_t(xT + v0, ldv, in + (((size_t)n * D + z0) * HW + v0) * cin,
                                  cin, (int)(nv - v0 < 256 ? nv - v0 : 256), cin);
                for (int ic = 0; ic < cin; ic++) /* zeros after the slab's voxels */
                    memset(xT + (size_t)ic * ldv + nv, 0, sizeof(uint16_t) * (ldv - nv));
                if (db && first) { /* bf16 1.0 (0x3F80), then zero rows */
                    for (long q = 0; q < ldv; q++)
                        xT[(size_t)cin * ldv + q] = 0x3F80;
                    memset(xT + ((size_t)cin + 1) * ldv, 0, sizeof(uint16_t) * 15 * ldv);
                }
#pragma omp parallel
                for (long q0 = 0; q0 < ldv; q0 += qc) {
                    const long nq = ldv - q0 < qc ? ldv - q0 : qc;
#pragma omp for schedule(dynamic, 1)
                    for (int gi = 0; gi < ng; gi++) {
                        const int t = gi / (nig * nog), ic0 = 32 * (gi / nog % nig);
                        const int oc0 = 32 * (gi % nog);
                        nn_amx_dw(xT + (size_t)ic0 * ldv + q0, ldv,
                                  dyP + ((size_t)t * ldv + q0) * cout + 2 * oc0, cout, nq,
                                  ci - ic0 > 16 ? 2 : 1, cout - oc0 > 16 ? 2 : 1,
                                  acc + ((size_t)t * ci + ic0) * cout + oc0, cout, first && !q0);
                    }
                }
            }
            first = 0;
            if (!din)
                continue;
            const int ngr = ct_groups((long)nz * ny, nb);
#pragma omp parallel for schedule(dynamic, 2)
            for (long it = 0; it < (long)nz * ny * ngr; it++) {
                const int og = (int)(it % ngr), yb = (int)(it / ngr % ny), z = (int)(it / ngr / ny);
                const int y = yb * YR, nyr = H - y < YR ? H - y : YR;
                for (int ob = og * nb / ngr; ob < (og + 1) * nb / ngr; ob++) {
                    const int n0 = ob * nr, nvalid = cin - n0 < nr ? cin - n0 : nr;
                    const walk wk = {
                        .a0 = Dt + ((size_t)z * H + y) * W * cout,
                        .a_row = (long)W * cout,
                        .a_col = cout,
                        .c0 = din + ((((size_t)n * D + z0 + z) * H + y) * W) * cin + n0,
                        .c_row = (long)W * cin,
                        .c_col = cin,
                        .Wr = W,
                        .pairs = 1,
                        .amx = 1,
                        .a_end = Dt + 8 * (size_t)ldv * cout,
                    };
                    walk_kblocks(g, wk, (long)nyr * W, Bp + (size_t)ob * 8 * cout * nr, cout, nkb,
                                 NULL, nvalid, NN_TG_ZERO, NN_TG_RBF16);
                }
            }
        }
    if (!dw)
        return;
#pragma omp parallel for schedule(static)
    for (int ic = 0; ic < cin; ic++)
        for (int oc = 0; oc < cout; oc++)
            for (int t = 0; t < 8; t++)
                dw[((size_t)ic * cout + oc) * 8 + t] +=
                    nn_bf16_round(acc[((size_t)t * ci + ic) * cout + oc]);
    if (db)
        for (int oc = 0; oc < cout; oc++) {
            float s = 0;
            for (int t = 0; t < 8; t++)
                s += acc[((size_t)t * ci + cin) * cout + oc];
            db[oc] += nn_bf16_round(s);
        }
}

void nn_convt3d_forward_p(float *out, const float *in, const float *w, const float *b, int cin,
                          int cout, int N, int D, int H, int W, nn_prec prec, float *ws) {
    const int nr = nn_gemm_nr(cout), nb = nblocks(cout, nr), amx = ct_amx(cin, cout, prec);
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
        pack_b16(Bp, w, cout, cin, 8, 8, (long)cout * 8, 1, nr, 1, amx ? 32 : 2);
        bias = (float *)((uint16_t *)Bp + 8 * (size_t)nb * nr * cin);
    } else {
        float *rest;
        A = input_prec(in, V * cin, prec, ws, &rest);
        Bp = rest;
        pack_b(Bp, w, cout, cin, 8, 8, (long)cout * 8, 1, nr, 1, prec);
        bias = rest + packed_floats(cout, cin, 8);
    }
    bias = bias_padded(bias, b, cout, nr, prec);
    const long aoff[1] = {0};
    const nn_tg g = {.T = 1, .K = cin, .aoff = aoff, .nr = nr};
    /* An output far larger than the last-level cache is written with non-temporal stores: a
     * cached store first reads every line it fills, and the next layer reads it from memory
     * anyway (32^3 128->64, 67 MB: 1.07x). */
    const size_t obytes = (size_t)8 * V * cout * sizeof(float);
    const int stream = obytes > CT_STREAM_BYTES && cout % 16 == 0 && (uintptr_t)out % 64 == 0;
    const int last = store_mode(prec) | (stream ? NN_TG_STREAM : 0);
    /* Work items are a few input rows (YR: >= CT_POS positions, so the kernel gets full
     * blocks): their channels stay in cache while every column block and tap reads them (the
     * weights, 8 * cin * cout floats, stay in L2). With the column blocks outermost each block
     * re-read the whole input from memory: 36-60 GFLOP/s at 32^3 128->64, 75-94 this way. */
    const int YR = ct_rows(H, W), ny = (H + YR - 1) / YR, ng = ct_groups((long)N * D * ny, nb);
#pragma omp parallel for schedule(dynamic, 2)
    for (long it = 0; it < (long)N * D * ny * ng; it++) {
        const int og = (int)(it % ng), yb = (int)(it / ng % ny), z = (int)(it / ng / ny % D);
        const int n = (int)(it / ng / ny / D), y = yb * YR, nyr = H - y < YR ? H - y : YR;
        for (int ob = og * nb / ng; ob < (og + 1) * nb / ng; ob++) {
            const int n0 = ob * nr, nvalid = cout - n0 < nr ? cout - n0 : nr;
            for (int t = 0; t < 8; t++) {
                const int az = t / 4, by = (t / 2) % 2, cx = t % 2;
                const walk wk = {
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
                walk_kblocks(g, wk, (long)nyr * W,
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
    if (ct_amx(cin, cout, prec)) {
        if (db && !dw)
            bias_grad(db, dout, ldo, 8 * rows * W, cout, prec, ws);
        ct_amx_backward(din, dw, dw ? db : NULL, dout, ldo, in, w, cin, cout, N, D, H, W, ws);
        return;
    }
    if (db && !dw)
        bias_grad(db, dout, ldo, 8 * rows * W, cout, prec, ws);
    if (dw) {
        /* With db, the bias gradient is the weight gradient of a channel of ones: no pass of
         * its own over the output gradient (67 MB at 32^3 128->64, a seventh of the time). */
        float *rest;
        const float *A = input_prec(in, (size_t)rows * W * cin, prec, ws, &rest);
        const tw_src r = {.A = A, .G = dout, .kind = 1, .D = D, .H = H, .W = W, .cin = cin,
                          .cout = cout, .ldg_vox = ldo, .ones = db != NULL};
        weight_grad(rest, &r, rows, 8, 0);
        unpack_dwt(dw, db, rest, cin, cout, prec);
    }
    if (!din)
        return;
    /* din[ic] = sum_t sum_oc dout(2p + t)[oc] w[ic][oc][t]: column ic stride cout*8, k = oc. */
    const int nr = nn_gemm_nr(cin), nb = nblocks(cin, nr), nkb = kblocks(cout, 8, nr, 2);
    float *Bp = ws;
    pack_b(Bp, w, cin, cout, 8, (long)cout * 8, 8, 1, nr, nkb, prec);
    long aoff[8];
    for (int t = 0; t < 8; t++)
        aoff[t] = (((long)(t / 4) * 2 * H + (t / 2) % 2) * 2 * W + t % 2) * ldo;
    const nn_tg g = {.T = 8, .K = cout, .aoff = aoff, .nr = nr};
    /* Work items are a few rows of din (as in the forward pass): the output-gradient rows they
     * read stay in cache while every column block runs over them (36 -> 79-94 GFLOP/s at 32^3
     * 128->64). */
    const int YR = ct_rows(H, W), ny = (H + YR - 1) / YR;
    /* The output gradient an item reads (its 2 planes' rows) comes from memory at the first
     * column block, through 6 positions x 8 taps of streams, more than the hardware prefetchers
     * follow: the item prefetches the next item's rows (the next item in the same order,
     * often its own next) over its column blocks. */
    const long prow = 2L * W * ldo; /* floats of one output-gradient row */
    const int ng = ct_groups((long)N * D * ny, nb);
#pragma omp parallel for schedule(dynamic, 2)
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
        for (int ob = og * nb / ng; ob < (og + 1) * nb / ng; ob++) {
            const int n0 = ob * nr, nvalid = cin - n0 < nr ? cin - n0 : nr;
            walk wk = {
                .a0 = dout + (((size_t)n * 2 * D + 2 * z) * 2 * H + 2 * y) * 2 * W * ldo,
                .a_row = 4L * W * ldo,
                .a_col = 2 * ldo,
                .c0 = din + (((size_t)n * D + z) * H + y) * W * cin + n0,
                .c_row = (long)W * cin,
                .c_col = cin,
                .Wr = W,
            };
            const int half = ob >= h0, sh = half ? nb - h0 : h0, i = half ? ob - h0 : ob;
            if (xn < N && sh > 0) {
                const float *p =
                    dout + (((size_t)xn * 2 * D + 2 * xz + half) * 2 * H + 2 * xy) * prow;
                wk.pf = (const char *)(p + span * i / sh);
                wk.pf_bytes = (span * (i + 1) / sh - span * i / sh) * (long)sizeof(float);
            }
            walk_kblocks(g, wk, (long)nyr * W, Bp + (size_t)ob * 8 * cout * nr, cout, nkb, NULL,
                         nvalid, NN_TG_ZERO, store_mode(prec));
        }
    }
}

/* ---- Conv3d k1 (output layer) ----------------------------------------------------------- */

#define C1_ROW 256 /* voxels per work item in the 1x1 convolution */

size_t nn_conv1_ws_floats_p(long P, int cin, int cout, nn_prec prec) {
    size_t pf = packed_floats(cout, cin, 1), pb = packed_floats(cin, cout, 1);
    size_t pw = (size_t)NN_SLICES * cin * cout, bias = (size_t)NN_SLICES * cout;
    size_t m = pf > pb ? pf : pb;
    if (pw > m)
        m = pw;
    if (bias > m)
        m = bias;
    /* bf16: each thread's rows of the input, rounded (the forward pass's A operand) */
    const size_t rin = prec == NN_BF16 ? (size_t)NN_MAX_THREADS * C1_ROW * cin + 16 : 0;
    (void)P; /* the same for any volume */
    const size_t wr = (size_t)cin * cout + 16; /* the rounded weights beside the dw tiles */
    return rin + wr + m + (size_t)nn_gemm_ncol_max(cout) + 64;
}

/* out (P, ncol) (op)= in (P, K) x packed B, items of C1_ROW voxels per column block. With rt
 * (bf16), each item's rows of in are first rounded into the thread's C1_ROW * K floats of rt
 * (a pass over the item in cache, not a rounded copy of the whole input). */
static void gemm_rows(float *out, int ncol, const float *in, int K, const float *Bp,
                      const float *bias, long P, int mode, float *rt) {
    const int nr = nn_gemm_nr(ncol), nb = nblocks(ncol, nr), nkb = kblocks(K, 1, nr, 2);
    const long aoff[1] = {0};
    const nn_tg g = {.T = 1, .K = K, .aoff = aoff, .nr = nr};
    const long items = (P + C1_ROW - 1) / C1_ROW;
    /* at most NN_MAX_THREADS threads: rt has that many slots */
#pragma omp parallel for collapse(2) schedule(dynamic, 4) num_threads(nn_threads())
    for (int ob = 0; ob < nb; ob++)
        for (long it = 0; it < items; it++) {
            const long p0 = it * C1_ROW, M = P - p0 < C1_ROW ? P - p0 : C1_ROW;
            const int n0 = ob * nr, nvalid = ncol - n0 < nr ? ncol - n0 : nr;
            const float *a = in + p0 * K;
            if (rt) {
                float *r = rt + (size_t)omp_get_thread_num() * C1_ROW * K;
                for (long i = 0; i < M * K; i++)
                    r[i] = nn_bf16_round(a[i]);
                a = r;
            }
            const walk wk = {.a0 = a, .a_row = 0, .a_col = K,
                             .c0 = out + p0 * ncol + n0, .c_row = 0, .c_col = ncol, .Wr = 0};
            walk_kblocks(g, wk, M, Bp + (size_t)ob * K * nr, K, nkb, bias ? bias + n0 : NULL,
                         nvalid, mode & 3, mode & ~3);
        }
}

void nn_conv1_forward_p(float *out, const float *in, const float *w, const float *b, int cin,
                        int cout, long P, nn_prec prec, float *ws) {
    const int nr = nn_gemm_nr(cout);
    float *rt = prec == NN_BF16 ? ws : NULL;
    float *Bp = ws + (rt ? (size_t)NN_MAX_THREADS * C1_ROW * cin + 16 : 0);
    float *bias = bias_padded(Bp + packed_floats(cout, cin, 1), b, cout, nr, prec);
    pack_b(Bp, w, cout, cin, 1, cin, 1, 0, nr, kblocks(cin, 1, nr, 2), prec);
    gemm_rows(out, cout, in, cin, Bp, bias, P, NN_TG_BIAS | store_mode(prec), rt);
}

/* The gradients of the 1x1 convolution in one pass over x: where dw is not NULL its weight
 * gradient, where dxr is not NULL (it is x) its input gradient masked by the ReLU of x, written
 * over x. Few output channels, so each of NN_SLICES fixed voxel slices reduces into its own
 * (cout, cin) tile (vectors over the input channels), then the tiles are summed in order. The
 * input is rounded to bf16 on the fly in bf16 mode. */
static void c1_grads(float *dw, const float *x, float *dxr, const float *dout, const float *wr,
                  int cin, int cout, long P, nn_prec prec, float *acc0) {
    enum { CB = 64 };
#pragma omp parallel for schedule(dynamic, 1) num_threads(nn_threads())
    for (int sl = 0; sl < NN_SLICES; sl++) {
        float *acc = acc0 + (size_t)sl * cin * cout;
        if (dw)
            memset(acc, 0, sizeof(float) * cin * cout);
        const long lo = P * sl / NN_SLICES, hi = P * (sl + 1) / NN_SLICES;
        for (long p = lo; p < hi; p++) {
            const float *xv = x + (size_t)p * cin, *g = dout + p * cout;
            for (int c0 = 0; c0 < cin; c0 += CB) {
                const int nc = cin - c0 < CB ? cin - c0 : CB;
                float av[CB], s[CB];
                int on[CB];
                for (int c = 0; c < nc; c++) {
                    on[c] = xv[c0 + c] > 0.0f;
                    av[c] = prec == NN_BF16 ? nn_bf16_round(xv[c0 + c]) : xv[c0 + c];
                }
                for (int oc = 0; oc < cout && dw; oc++) {
                    const float go = g[oc];
                    float *accr = acc + (size_t)oc * cin + c0;
                    for (int c = 0; c < nc; c++)
                        accr[c] += av[c] * go;
                }
                if (dxr) { /* after the reads of this voxel's x */
                    nn_conv1_dx_voxel(s, g, wr, cin, cout, c0, nc, prec);
                    for (int c = 0; c < nc; c++)
                        dxr[(size_t)p * cin + c0 + c] = on[c] ? s[c] : 0.0f;
                }
            }
        }
    }
    for (int oc = 0; oc < cout && dw; oc++)
        for (int ic = 0; ic < cin; ic++) {
            float s = 0;
            for (int sl = 0; sl < NN_SLICES; sl++)
                s += acc0[((size_t)sl * cout + oc) * cin + ic];
            dw[(size_t)oc * cin + ic] += prec == NN_BF16 ? nn_bf16_round(s) : s;
        }
}

void nn_conv1_backward_p(float *din, float *dw, float *db, const float *dout, const float *in,
                         const float *w, int cin, int cout, long P, nn_prec prec, float *ws) {
    if (db)
        bias_grad(db, dout, cout, P, cout, prec, ws);
    if (dw)
        c1_grads(dw, in, NULL, dout, NULL, cin, cout, P, prec, ws);
    if (!din)
        return;
    const int nr = nn_gemm_nr(cin);
    float *Bp = ws;
    pack_b(Bp, w, cin, cout, 1, 1, cin, 0, nr, kblocks(cout, 1, nr, 2), prec);
    gemm_rows(din, cin, dout, cout, Bp, NULL, P, NN_TG_ZERO | store_mode(prec), NULL);
}

void nn_conv1_backward_relu_p(float *x, float *dw, float *db, const float *dout, const float *w,
                              int cin, int cout, long P, nn_prec prec, float *ws) {
    if (db)
        bias_grad(db, dout, cout, P, cout, prec, ws);
    /* The input gradient per voxel, into registers: its few output channels make it a pass
     * over x bound by memory, not by FMAs, so it shares the weight gradient's pass. */
    float *wr = ws; /* the weights as the layer used them (bf16-rounded in bf16) */
    copy_prec(wr, w, (size_t)cin * cout, prec);
    c1_grads(dw, x, x, dout, wr, cin, cout, P, prec,
             ws + (((size_t)cin * cout + 15) & ~(size_t)15));
}

void nn_conv1_dx_voxel(float *restrict d, const float *restrict dout, const float *restrict wr,
                       int cin, int cout, int c0, int nc, nn_prec prec) {
    for (int c = 0; c < nc; c++)
        d[c] = 0.0f;
    for (int k = 0; k < cout; k++) {
        const float gk = dout[k], *wk = wr + (size_t)k * cin + c0;
        for (int c = 0; c < nc; c++)
            d[c] += gk * wk[c];
    }
    if (prec == NN_BF16)
        for (int c = 0; c < nc; c++)
            d[c] = nn_bf16_round(d[c]);
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

size_t nn_conv1_ws_floats(long P, int cin, int cout) {
    return nn_conv1_ws_floats_p(P, cin, cout, NN_FP32);
}

void nn_conv1_forward(float *out, const float *in, const float *w, const float *b, int cin,
                      int cout, long P, float *ws) {
    nn_conv1_forward_p(out, in, w, b, cin, cout, P, NN_FP32, ws);
}

void nn_conv1_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                       const float *w, int cin, int cout, long P, float *ws) {
    nn_conv1_backward_p(din, dw, db, dout, in, w, cin, cout, P, NN_FP32, ws);
}

/* ---- naive references ------------------------------------------------------------------- */

void nn_conv3d_forward_ref(float *out, const float *in, const float *w, int cin, int cout, int N,
                           int D, int H, int W) {
#pragma omp parallel for collapse(2) schedule(dynamic, 2)
    for (int n = 0; n < N; n++)
        for (int z = 0; z < D; z++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                    for (int oc = 0; oc < cout; oc++) {
                        double s = 0;
                        for (int t = 0; t < 27; t++) {
                            int zz = z + t / 9 - 1, yy = y + (t / 3) % 3 - 1, xx = x + t % 3 - 1;
                            if (zz < 0 || zz >= D || yy < 0 || yy >= H || xx < 0 || xx >= W)
                                continue;
                            const float *a = in + ((((size_t)n * D + zz) * H + yy) * W + xx) * cin;
                            for (int ic = 0; ic < cin; ic++)
                                s += (double)a[ic] * w[((size_t)oc * cin + ic) * 27 + t];
                        }
                        out[((((size_t)n * D + z) * H + y) * W + x) * cout + oc] = (float)s;
                    }
}

void nn_conv3d_backward_ref(float *din, float *dw, const float *dout, const float *in,
                            const float *w, int cin, int cout, int N, int D, int H, int W) {
    const size_t nin = (size_t)N * D * H * W * cin;
    if (din)
        memset(din, 0, sizeof(float) * nin);
    for (int n = 0; n < N; n++)
        for (int z = 0; z < D; z++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                    for (int t = 0; t < 27; t++) {
                        int zz = z + t / 9 - 1, yy = y + (t / 3) % 3 - 1, xx = x + t % 3 - 1;
                        if (zz < 0 || zz >= D || yy < 0 || yy >= H || xx < 0 || xx >= W)
                            continue;
                        const size_t ia = (((size_t)n * D + zz) * H + yy) * W + xx;
                        const float *g = dout + ((((size_t)n * D + z) * H + y) * W + x) * cout;
                        for (int oc = 0; oc < cout; oc++)
                            for (int ic = 0; ic < cin; ic++) {
                                const size_t iw = ((size_t)oc * cin + ic) * 27 + t;
                                if (dw)
                                    dw[iw] += in[ia * cin + ic] * g[oc];
                                if (din)
                                    din[ia * cin + ic] += w[iw] * g[oc];
                            }
                    }
}
