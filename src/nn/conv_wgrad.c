/* conv_wgrad: the direct weight gradient of Conv3d k3 and ConvTranspose3d k2 s2 (chunks of
 * voxels packed into panels, reduced into per-thread copies summed in a fixed order), the bias
 * gradient, and the unpacking into PyTorch's weight layouts. */
#include "nn/conv_int.h"
#include "nn/settings.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Start (floats) of row `row` (= (n, z, y), W voxels) of A and of G for tap t. */
static void tw_row(const conv_tw_src *r, long row, int t, long *ao, long *go) {
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

#define DW_REPLICA_BUDGET (64u << 20) /* bytes of per-thread weight-gradient copies */
#define TW_SCRATCH 65536                /* at most this many floats of packed G panels per chunk */
#define TW_CT_SCRATCH 196608 /* ConvTranspose3d: floats of a chunk's packed input and G */
#define TW_ROWS_MAX 256
#define TW_PF_BYTES (512u << 10) /* ConvTranspose3d prefetches when its panels fit this (an L2) */
#define TW_PK 256 /* ConvTranspose3d bf16: channels of a voxel pair packed per call */

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
 * (at most SCAFFOLD_NN_DW_REPLICAS, itself at most NN_SETTINGS_DW_REPLICAS, its default, and at
 * most a quarter of the chunks); 0 or 1 means "partition tiles instead". Depends only on the
 * shape, so workspace sizing and the call agree whatever the thread count. */
static int dw_replicas(int T, int K, int ncol, long nrows, int H, int W) {
    const size_t bytes = (size_t)T * K * nn_gemm_ncol_max(ncol) * sizeof(float);
    size_t r = DW_REPLICA_BUDGET / (bytes ? bytes : 1);
    const long cr = tw_chunk_rows(T, H, W, K, ncol), chunks = (nrows + cr - 1) / cr;
    /* SCAFFOLD_NN_DW_REPLICAS lowers the cap (tests use 0 to exercise the tile partition). */
    size_t cap = (size_t)nn_settings()->dw_replicas;
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

/* Workspace of conv_weight_grad for nrows rows of W voxels: the gradient in packed layout, its
 * replicas, and every thread's packed panels. */
size_t conv_weight_grad_ws(int T, int K, int ncol, long nrows, int H, int W) {
    const int r = dw_replicas(T, K, ncol, nrows, H, W);
    return dw_floats(T, K, ncol) * (size_t)(r > 1 ? r + 1 : 1) +
           (size_t)NN_MAX_THREADS * tw_scratch_floats(T, H, W, K, ncol, nrows);
}

/* The packed weight gradient is stored tile by tile: the k block [k0, k0 + mk) holds, per
 * column block ob, its T taps' mk x nr tiles one after another. RATIONALE: conv_unpack_dw then
 * reads it in order and writes each output channel's mk * T (Conv3d) or each input channel's
 * nr * T (ConvTranspose3d) gradient floats as one run; laid out [t][k][ncolpad], a channel's
 * T rows lay cin * ncolpad floats apart, the unpacking ran at 2.5 GB/s against 15 for a
 * sequential pass, and it took a quarter of an 8^3 512->512 weight gradient. */
static size_t dw_tile(int k0, int mk, int t, int ob, int T, int nb, int nr) {
    return (size_t)k0 * T * nb * nr + ((size_t)ob * T + t) * mk * nr;
}

/* The weight gradient's k blocks for K input channels and nr-column blocks (k block kb is
 * [split_at(K, nkb, kb), split_at(K, nkb, kb + 1))): one kernel tile's rows each. The tiles
 * (tw_chunk) and the unpacking (conv_unpack_dw) must agree on them. */
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
    case 3: memcpy(d, s, 3 * sizeof(float)); break; /* im2col rows: 3 K, K <= 3 */
    case 5: memcpy(d, s, 5 * sizeof(float)); break;
    case 6: memcpy(d, s, 6 * sizeof(float)); break;
    case 9: memcpy(d, s, 9 * sizeof(float)); break;
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
static void tw_pack_g(float *Gp, const conv_tw_src *r, long r0, int nrr, int t, int nt) {
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

/* tw_pack_g's ConvTranspose3d tap pair (t, t + 1; t even) in bf16 voxel pairs (r->pairs, W
 * even): Gp16[c][ob][voxel pair][nr][2], the chunk's voxels v = i * W + x in pairs (x, x + 1) of
 * a row. Tap c's voxel x is at 2x + c of the output row, so a pair's halves are 2 voxels apart. */
static void tw_pack_g16(uint16_t *Gp, const conv_tw_src *r, long r0, int nrr, int t) {
    const int ncol = r->cout, W = r->W, nr = nn_gemm_nr(ncol), nb = nblocks(ncol, nr);
    const long nv = (long)nrr * W, ldg = r->ldg_vox;
    for (int i = 0; i < nrr; i++) {
        long ao, go;
        tw_row(r, r0 + i, t, &ao, &go);
        for (int c = 0; c < 2; c++)
            for (int x = 0; x < W; x += 2) {
                const float *g = r->G + go + (2L * x + c) * ldg;
                for (int b = 0; b < nb; b++) {
                    uint16_t *d = Gp + (((size_t)c * nb + b) * nv + (size_t)i * W + x) * nr;
                    const int n0 = b * nr, nvalid = ncol - n0 < nr ? ncol - n0 : nr;
                    nn_bf16_pack_pairs(d, g + n0, 1, 2 * ldg, 1, nvalid);
                    if (nvalid < nr)
                        memset(d + 2 * nvalid, 0, sizeof(uint16_t) * 2 * (nr - nvalid));
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
static void tw_chunk_conv(float *Wp, const conv_tw_src *r, long r0, int nrr, long t_lo, long t_hi,
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
                   nr, 0);
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
static void tw_chunk_convt(float *Wp, const conv_tw_src *r, long r0, int nrr, long t_lo, long t_hi,
                           float *Gp, long next_r0, int next_nrr) {
    const int C = r->cin, K = C + r->ones, ncol = r->cout, W = r->W;
    const int nr = nn_gemm_nr(ncol), nb = nblocks(ncol, nr), nkb = dw_kblocks(K, nr);
    const long nv = (long)nrr * W;
    float *Ap = Gp + (size_t)2 * nv * nn_gemm_ncol_max(ncol);
    /* Ap16[kb][voxel pair][mk][2]: a voxel pair's channels packed TW_PK at a time, then cut
     * into the k blocks (packing each block's few channels on its own cost a call per 6-16
     * values: a 32^3 256->128 pass ran 7% slower than on the fp32 kernels) */
    for (int i = 0; i < nrr && r->pairs; i++) {
        long ao, go;
        tw_row(r, r0 + i, 0, &ao, &go);
        for (int x = 0; x < W; x += 2) {
            const float *a = r->A + ao + (size_t)x * C;
            const size_t v = (size_t)i * W + x; /* the pair's first voxel */
            uint16_t tmp[2 * TW_PK];
            for (int c0 = 0, kb = 0; c0 < C; c0 += TW_PK) {
                const int n = C - c0 < TW_PK ? C - c0 : TW_PK;
                nn_bf16_pack_pairs(tmp, a + c0, 1, C, 1, n);
                for (int c = c0; c < c0 + n;) {
                    while (split_at(K, nkb, kb + 1) <= c)
                        kb++;
                    const int k0 = split_at(K, nkb, kb), k1 = split_at(K, nkb, kb + 1);
                    const int e = k1 < c0 + n ? k1 : c0 + n;
                    memcpy((uint16_t *)Ap + (size_t)k0 * nv + v * (k1 - k0) + 2 * (c - k0),
                           tmp + 2 * (c - c0), sizeof(uint16_t) * 2 * (e - c));
                    c = e;
                }
            }
            if (r->ones) { /* the channel of ones, last of the last block: 1.0 */
                const int k0 = split_at(K, nkb, nkb - 1);
                uint16_t *d = (uint16_t *)Ap + (size_t)k0 * nv + v * (K - k0) + 2 * (C - k0);
                d[0] = d[1] = 0x3f80;
            }
        }
    }
    for (int i = 0; i < nrr && !r->pairs; i++) {
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
            if (r->pairs)
                tw_pack_g16((uint16_t *)Gp, r, r0, nrr, t & ~1);
            else
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
        if (r->pairs) { /* the halves of each element: half as many offsets as floats */
            nn_tw_tile_bf16((int)nv / 2, (const uint16_t *)Ap + (size_t)k0 * nv, mk,
                            (const uint16_t *)Gp + ((size_t)(t & 1) * nb + ob) * nv * nr, nr,
                            mk, nr, Wp + dwt_tile(k0, t, ob, K, nb, nr), nr);
            continue;
        }
        const float *ar = Ap + (size_t)k0 * nv, *gr = Gp + ((size_t)(t & 1) * nb + ob) * nv * nr;
        nn_tw_tile(1, &ar, &gr, (int)nv, mk, nr, mk, nr, nr, Wp + dwt_tile(k0, t, ob, K, nb, nr),
                   nr, 0);
    }
}

/* dWp (+)= the sum above over voxels [0, nvox) (adds to dWp when accumulate, so
 * a layer can reduce over its slabs one call each). With R replicas: chunk c of voxels
 * accumulates into copy c % R, in chunk order, and the copies are summed in order at the end,
 * so the result does not depend on the threads. Work items are (copy, share of the tiles)
 * pairs taken dynamically: balanced when cores are shared, and no barrier per chunk. Without
 * copies (huge layers) each share of tiles is one work item over all chunks. */
void conv_weight_grad(float *dWp, const conv_tw_src *r, long nrows, int T, int accumulate) {
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
void conv_bias_grad(float *db, const float *dout, long ldo, long P, int C, nn_prec prec,
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
void conv_unpack_dw(float *dw, const float *Wp, int cin, int cout, nn_prec prec) {
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
 * as conv_unpack_dw; with db, also db[oc] += its row of ones (the 8 taps summed in order). One
 * input channel's cout * 8 floats are written as one run; they gather one nr-float row per (tap,
 * column block). */
void conv_unpack_dwt(float *dw, float *db, const float *Wp, int cin, int cout, nn_prec prec) {
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

/* ---- few input channels: im2col over the taps ------------------------------------------------
 * A layer of K <= 3 input channels (the network's first) gives the direct weight gradient's
 * tap tiles K of the kernel tile's 6 to 14 rows: 32^3 3->64 ran at 115 GFLOP/s (Intel Xeon with
 * AMX, 2 threads, 2.95 ms). Its 27 taps x K channels instead make one k dimension k' = t K + c:
 * per chunk of voxels (rows of W), each voxel's 27 K values in one row built from the unpadded
 * input, which the kernel's k blocks (tiles of 5-6 rows) read in place, as it reads the output
 * gradient (1.69 ms; with the rows copied into per-block panels the packing took 3x the
 * products). Chunk c sets (first) or adds into copy c mod R of the gradient, each copy's chunks
 * in order on one thread, the copies then summed in order: the sums do not depend on the
 * threads. */
#define DW_I2C_KMAX 96
#define DW_I2C_R 8
#define DW_I2C_VOX 128 /* voxels per chunk, at least a row */

int conv_dw_i2c_applies(int K, const nn_shard *sh) {
    return !sh && K >= 1 && 27 * K <= DW_I2C_KMAX;
}

static long dw_i2c_rows(int W) {
    return W >= DW_I2C_VOX ? 1 : DW_I2C_VOX / W;
}

/* Floats of one thread's panel: a chunk's k' values per voxel. */
static size_t dw_i2c_slot(int W, int K) {
    return ((size_t)dw_i2c_rows(W) * W * 27 * K + (size_t)(W + 2) * K + 31) & ~(size_t)15;
}

size_t conv_dw_i2c_ws_floats(int W, int K, int cout) {
    const size_t copy = ((size_t)27 * K * nn_gemm_ncol_max(cout) + 15) & ~(size_t)15;
    return DW_I2C_R * copy + (size_t)NN_MAX_THREADS * dw_i2c_slot(W, K) + 16;
}

/* The k' values of the chunk of rows [r0, r0 + nrr) (row = (n, z, y)) into Ap ([voxel][27 K]:
 * each k block of the kernel reads its mk of a voxel's row in place). Per (row, dz, dy), the
 * input row zero-padded (and rounded) once into pr, whose windows of 3 voxels are the x taps'
 * values of each voxel. */
static void dw_i2c_pack(float *Ap, float *pr, const float *a, int K, int D, int H, int W,
                        long r0, long nrr, int round) {
    const int kp = 27 * K, n3 = 3 * K;
    memset(pr, 0, sizeof(float) * K);
    memset(pr + (size_t)(W + 1) * K, 0, sizeof(float) * K);
    for (long i = 0; i < nrr; i++) {
        const long row = r0 + i, y = row % H, z = row / H % D, n = row / ((long)H * D);
        float *col = Ap + (size_t)i * W * kp;
        for (int t9 = 0; t9 < 9; t9++) { /* (dz, dy) */
            const long zz = z + t9 / 3 - 1, yy = y + t9 % 3 - 1;
            if (zz < 0 || zz >= D || yy < 0 || yy >= H) {
                for (int x = 0; x < W; x++)
                    memset(col + (size_t)x * kp + t9 * n3, 0, sizeof(float) * n3);
                continue;
            }
            const float *s = a + ((n * D + zz) * H + yy) * W * K;
            if (round)
                nn_round_bf16_span(pr + K, s, (size_t)W * K);
            else
                memcpy(pr + K, s, sizeof(float) * W * K);
            for (int x = 0; x < W; x++)
                copy_run(col + (size_t)x * kp + t9 * n3, pr + (size_t)x * K, n3);
        }
    }
}

void conv_dw_i2c(float *dw, const float *a, int K, const float *dy, int cout, int N, int D,
                 int H, int W, nn_prec prec, float *ws) {
    const int kp = 27 * K, nr = nn_gemm_nr(cout), nb = nblocks(cout, nr), ncp = nb * nr;
    const int nkb = dw_kblocks(kp, nr);
    const long rows = (long)N * D * H, rc = dw_i2c_rows(W), nch = (rows + rc - 1) / rc;
    const long R = nch < DW_I2C_R ? nch : DW_I2C_R;
    const size_t copy = ((size_t)kp * ncp + 15) & ~(size_t)15, slot = dw_i2c_slot(W, K);
    float *slots = ws + DW_I2C_R * copy;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nn_threads())
    for (long r = 0; r < R; r++) {
        float *Wr = ws + r * copy, *Ap = slots + (size_t)omp_get_thread_num() * slot;
        float *pr = Ap + (size_t)rc * W * kp;
        for (long ch = r; ch < nch; ch += R) { /* the copy's first chunk sets it */
            const long r0 = ch * rc, nrr = rows - r0 < rc ? rows - r0 : rc, nv = nrr * W;
            dw_i2c_pack(Ap, pr, a, K, D, H, W, r0, nrr, prec == NN_BF16);
            /* the gradient's rows in place: the chunk's voxels are consecutive */
            for (int kb = 0; kb < nkb; kb++) {
                const int k0 = split_at(kp, nkb, kb), mk = split_at(kp, nkb, kb + 1) - k0;
                const float *ar = Ap + k0;
                for (int ob = 0; ob < nb; ob++) {
                    const float *gr = dy + (size_t)r0 * W * cout + (size_t)ob * nr;
                    const int nvalid = cout - ob * nr < nr ? cout - ob * nr : nr;
                    nn_tw_tile(1, &ar, &gr, (int)nv, kp, cout, mk, nr, nvalid,
                               Wr + (size_t)k0 * ncp + (size_t)ob * nr, ncp, ch == r);
                }
            }
        }
    }
    /* dw[oc][c][t] += the copies' sum at row t K + c, in copy order */
#pragma omp parallel for schedule(static) num_threads(nn_threads())
    for (int oc = 0; oc < cout; oc++)
        for (int k = 0; k < kp; k++) {
            float s = ws[(size_t)k * ncp + oc];
            for (long r = 1; r < R; r++)
                s += ws[r * copy + (size_t)k * ncp + oc];
            dw[((size_t)oc * K + k % K) * 27 + k / K] += prec == NN_BF16 ? nn_bf16_round(s) : s;
        }
}
