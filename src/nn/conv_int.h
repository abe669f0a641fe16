/* conv_int: what the convolution files (conv*.c, convt.c) share and nothing outside them uses.
 * The small helpers (block counts, k ranges, padded formats) are static inline: they sit in the
 * drivers' loops, which inlined them when they were one file. The shared drivers (packing,
 * padded slabs, position walks, the Winograd and weight-gradient passes, the AMX paths) are
 * conv_-prefixed functions whose home file is named above each group of prototypes. */
#ifndef SCAFFOLD_NN_CONV_INT_H
#define SCAFFOLD_NN_CONV_INT_H

#include "nn/algo.h"
#include "nn/gemm.h"
#include "nn/layers.h"

#include <stddef.h>
#include <stdint.h>

static inline int nblocks(int n, int nr) {
    return (n + nr - 1) / nr;
}

/* Balanced split of n into nb parts: start of part b. */
static inline int split_at(int n, int nb, int b) {
    return (int)(((long)n * b) / nb);
}

/* An output of n floats (cout per voxel) larger than an L3 (CONV_STREAM_BYTES) is written with
 * non-temporal stores (NN_TG_STREAM: whole 16-float lines of 64-byte aligned rows). */
#define CONV_STREAM_BYTES (32u << 20)
static inline int conv_stream(const float *out, size_t n, int cout) {
    return n * sizeof(float) > CONV_STREAM_BYTES && cout % 16 == 0 && (uintptr_t)out % 64 == 0;
}

/* The mode bit that makes the kernels round their results to bf16. */
static inline int store_mode(nn_prec prec) {
    return prec == NN_BF16 ? NN_TG_RBF16 : 0;
}

/* The bf16 pair kernels (vdpbf16ps, or AMX tiles) exist for this precision: a capability, not a
 * choice (which algorithm runs a pass is algo.h's). */
static inline int use_pairs(nn_prec prec) {
    return prec == NN_BF16 && nn_isa_bf16dp();
}

/* Reduction blocks: the packed weights of one (column block, k block) pair, T*klen*nr floats,
 * stay in L2 while every position of a work item streams past them. Block edges fall on
 * multiples of `unit` k: 2 (the bf16 kernels take k in pairs), 32 on AMX (kunit). */
#define KBLOCK_BYTES (160u << 10)
/* On AMX (unit 32) the bf16 block may take 1 MiB (CPUs with AMX have 2 MiB of L2 per core):
 * with 160 KiB of floats, a 128-channel layer ran 3 k blocks of 32 to 64 k, one or two k steps
 * per tap between the tile kernel's setup and stores and a reload of C per block; one block
 * took 16^3 128 -> 128 forward 2.06 -> 1.75 ms, 32^3 64 -> 64 3.9 -> 3.4, 8^3 512 -> 512
 * 7.4 -> 6.7-7.0 (Intel Xeon with AMX, 2 threads). */
#define KBLOCK_BYTES_AMX (1u << 20)

static inline int kblocks(int K, int T, int nr, int unit) {
    const int amx = unit == 32;
    const size_t bytes = (size_t)T * K * nr * (amx ? sizeof(uint16_t) : sizeof(float)),
                 blk = amx ? KBLOCK_BYTES_AMX : KBLOCK_BYTES;
    const int units = (K + unit - 1) / unit;
    int nkb = (int)((bytes + blk - 1) / blk);
    return nkb < 1 ? 1 : nkb > units ? units : nkb;
}

/* The bf16 walks (`pairs`): 0 none (fp32 kernels), PAIRS_DP the vdpbf16ps kernels, PAIRS_AMX
 * AMX tiles. The k granularity of a pair layer: 32 on AMX tiles (32 k per A tile), else 2. */
enum { PAIRS_DP = 1, PAIRS_AMX = 2 };
static inline int kunit(int pairs) {
    return pairs == PAIRS_AMX ? 32 : 2;
}

static inline void kb_range(int K, int nkb, int kb, int unit, int *k0, int *k1) {
    const int units = (K + unit - 1) / unit;
    *k0 = unit * split_at(units, nkb, kb);
    *k1 = unit * split_at(units, nkb, kb + 1);
    if (*k1 > K)
        *k1 = K;
}

/* ---- padded input ---------------------------------------------------------------------------
 * A convolution reads its input through a zero-padded copy, made one z slab at a time: for
 * output planes [z0, z1) of sample n, the slab holds input planes z0-1 .. z1 as
 * (z1-z0+2, H+2, W+2, C), so the padded copy costs a few planes of memory, not a second volume.
 * The input is cat(a (N,D,H,W,ca) with lda_ floats per voxel, b (N,D,H,W,cb)), C = ca + cb
 * (PAD_BF16: rounded up to even, the extra channel zero), in one of three formats.
 * The one-voxel border (planes -1 and D, rows -1 and H, columns -1 and W) is where a spatially
 * sharded run puts its neighbours' faces (halo): conv_pad_slab writes it (zeros here) and copies
 * the tensor itself. */
/* PAD_BF16X3 (amx-x3, fp32 on AMX): 3C bf16 channels per voxel, hi(x), lo(x), hi(x) with
 * hi = bf16(x) and lo = bf16(x - hi); C even, at most NN_X3_KMAX. */
#define NN_X3_KMAX 1024
enum {
    PAD_F32,
    PAD_F32R /* fp32 holding bf16-rounded values */,
    PAD_BF16 /* uint16 */,
    PAD_BF16X3
};

static inline size_t pad_esize(int fmt) {
    return fmt >= PAD_BF16 ? sizeof(uint16_t) : sizeof(float);
}

static inline int pad_channels(int fmt, int C) {
    return fmt == PAD_BF16X3 ? 3 * C : fmt == PAD_BF16 ? (C + 1) & ~1 : C;
}

/* Packed weights, for the widest column blocks of any path (workspace fits every path; the
 * bf16 pair layout, (K+1)/2*2 uint16 per column, needs no more). */
static inline size_t packed_floats(int ncol, int K, int T) {
    return (size_t)nn_gemm_ncol_max(ncol) * K * T;
}

/* ---- position walks --------------------------------------------------------------------------
 * A work item covers M positions laid out as rows of width Wr: position p = y*Wr + x reads A at
 * a0 + y*a_row + x*a_col (elements of esize bytes: fp32, or bf16 for the pair kernels) and
 * writes C at c0 + y*c_row + x*c_col. conv_walk_run() splits them into near-equal blocks of at most
 * nn_tg_mr(nr) positions (blocks may span rows). */
typedef struct conv_walk {
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
} conv_walk;

#define WINO_NXI 144 /* transformed points per tile */

/* ---- weight-gradient driver --------------------------------------------------------------
 * dWp(k, t, j) += sum over voxels v of A(v, t)[k] * G(v, t)[j] (laid out by dw_tile): for
 * Conv3d, A is the padded input at v shifted by tap t and G the output gradient at v; for
 * ConvTranspose3d, A is the input at v and G the output gradient at 2v + t. Voxels are taken in
 * chunks; a chunk's G (per column block) and A (per tap and k block) are first packed into
 * contiguous panels, so the kernel streams through memory instead of reading 24 bytes of every
 * voxel's channels (whose power-of-two strides also fall into a quarter of the L1 sets). */
typedef struct conv_tw_src {
    const float *A, *G;
    int kind; /* 0 = Conv3d (A padded, a slab of D planes), 1 = ConvTranspose3d */
    int D, H, W;
    int cin, cout;
    long ldg_vox; /* floats per voxel of G */
    int ones; /* ConvTranspose3d: 1 adds an input channel of ones after the cin (row cin of the
                 gradient sums G over the voxels: the bias gradient per tap) */
    int pairs; /* ConvTranspose3d, W even: A and G packed in bf16 voxel pairs, the reduction on
                  vdpbf16ps (A and G rounded to bf16 by the packing) */
} conv_tw_src;

/* ---- conv_pack.c: weight packing, padded slabs, position walks ------------------------- */

/* dst[i] = src[i] (fp32) or its bf16 rounding, for the nn_prec in use. */
void conv_copy_prec(float *dst, const float *src, size_t n, nn_prec prec);
/* Bp, per column block ob and k block kb = [k0, k1), holds [t][k - k0][nr] at
 * ob*T*K*nr + T*k0*nr: w(col = ob*nr + j, k, t) with w addressed as w[col*sc + k*sk + t*st],
 * zero for col >= ncol; rounded to bf16 when prec says so. */
void conv_pack_b(float *Bp, const float *w, int ncol, int K, int T, long sc, long sk, long st,
                 int nr, int nkb, nn_prec prec);
/* The bf16 pair layout of conv_pack_b for Kp = K rounded up to even (k >= K is zero): per (ob, kb),
 * [t][(k - k0)/2][nr][2] at (ob*T*Kp + T*k0)*nr elements; the taps contiguous in w (st 1). */
void conv_pack_b16(uint16_t *Bp, const float *w, int ncol, int K, int T, long sc, long sk, int nr,
                   int nkb, int unit);
/* The same for amx-x3 (PAD_BF16X3's input): 3K rows, bf16(w) for k' < 2K (k = k' mod K) and
 * bf16(wlo) for k' >= 2K, wlo = w - bf16(w) addressed as w; K even. */
void conv_pack_b16_x3(uint16_t *Bp, const float *w, const float *wlo, int ncol, int K, int T,
                      long sc, long sk, int nr, int nkb, int unit);
/* SCAFFOLD_NN_SLAB_BYTES (nn/settings.h; tests: several slabs on small volumes). */
size_t conv_slab_bytes(void);
int conv_slab_depth(int D, int H, int W, int C, const nn_shard *sh);
/* Floats of a slab buffer (any format) for C channels. */
size_t conv_slab_floats(int D, int H, int W, int C, const nn_shard *sh);
void conv_pad_slab(void *P, int fmt, const float *a, long lda_, int ca, const float *b, int cb,
                   int n, int z0, int z1, int D, int H, int W);
void conv_walk_run(const nn_tg *g, const conv_walk *w, long M, const void *Bp, const float *bias,
                   int nvalid, int mode);
/* One work item over all k blocks of K (packed weights Bob of its column block): the first
 * block initialises C (mode0), the others add; `last` bits (rounding) apply to the last. */
void conv_walk_kblocks(nn_tg g, conv_walk w, long M, const void *Bob, int K, int nkb,
                       const float *bias, int nvalid, int mode0, int last);

/* Bias padded to whole column blocks (the kernels read nr floats of it), rounded in bf16. */
float *conv_bias_padded(float *dst, const float *b, int n, int nr, nn_prec prec);

/* ---- conv_wino.c: Winograd F(4x4x2, 3x3x3) --------------------------------------------- */

int conv_wino_applies(int D, int H, int W, int K, int ncol, nn_prec prec, const nn_shard *sh);
/* SCAFFOLD_NN_WINO_UMAX bytes (nn/settings.h) (the tests run every layer in groups of one
 * column block with a small one). */
long conv_wino_umax(void);
/* Columns per group of a Winograd pass with K input channels and ncol output columns in blocks
 * of nr: all of them, or as many whole blocks as conv_wino_umax() holds (at least one). */
int conv_wino_group_cols(int K, int ncol, int nr);
/* Floats of the Winograd workspace after the slab: U of one or two output parts (ncol columns
 * in all, each part padded to whole blocks), or of one column group where U is larger than
 * conv_wino_umax(), and one chunk's V and M. */
size_t conv_wino_ws_floats(int K, int ncol);
/* bf16: U16[xi][ob][k/2][nr][2] (Kp = K rounded up to even, the extra k zero), the pairs
 * vdpbf16ps takes, rounded to bf16. */
void conv_wino_weights(void *U, const float *w, int ncol, int K, long sc, long sk, int flip,
                       int nr, nn_prec prec, int bf16);
/* out (Dz, H, W, ncol; voxels ldo floats apart) = the convolution of padded slab P (Dz+2, H+2,
 * W+2, C) with the transformed weights U (conv_wino_weights, block width nr); Dz even, H and W
 * multiples of 4. VM: one chunk's V and M. bf16 (winograd-bf16): V in bf16 (Kp = C rounded
 * up to even channels per tile, the extra one zero) and the GEMMs on the pair kernels. */
void conv_wino_slab(float *out, long ldo, int ncol, const float *P, int C, const void *U,
                    int nr, int Dz, int H, int W, float *VM, int bf16);
/* Weight gradient by the same tiles: dU[xi] (K x ncp) += V[xi]^T dM[xi] over a slab's tiles,
 * V the input transform (as in the forward pass) and dM = A dY A^T the output gradient's; at
 * the end dW = G^T dU G per channel pair (conv_wino_dw_finish). Each chunk's point xi of dU (or
 * a group of its column blocks) is taken by one thread and accumulates chunk after chunk, tiles
 * in order within the kernel: the sums do not depend on the threads. first: the layer's first
 * slab, whose first chunk sets dU (= instead of +=), so dU needs no zeroing pass. */
void conv_wino_dw_slab(float *dU, const float *P, int C, const float *dy, long ldy, int ncol,
                       int nr, int Dz, int H, int W, float *VM, int bf16, int first);
/* dw (PyTorch layout, w[oc][ic][t]; dU's cout columns in blocks of nr) += G^T dU G for each
 * channel pair, a vector of output channels at a time (runs of dU's rows, as in conv_wino_weights;
 * the groups of one input channel run one after the other, so the second half of each cache
 * line read is still there). */
void conv_wino_dw_finish(float *dw, const float *dU, int cin, int cout, int nr, nn_prec prec,
                         int bf16);
int conv_wino_small_applies(int N, int D, int H, int W, int K, int ncol, nn_prec prec,
                            const nn_shard *sh);
size_t conv_wino_small_ws_floats(int N, int D, int H, int W, int K, int ncol);
/* conv3d_pass's Winograd on few tiles (conv_wino_small_applies): outputs as conv3d_pass's. Per work
 * item (column block): per k chunk, the chunk of U into the thread's buffer and the 144 GEMMs
 * from it; then the block's output transform. */
void conv_wino_small_pass(float *out1, int n1, float *out2, int n2, const float *a, int ca,
                          const float *b, int cb, const float *w, long sc, long sk, int flip,
                          int N, int D, int H, int W, nn_prec prec, int bf16, float *ws);
/* dw += the weight gradient of a Conv3d k3 on few tiles (conv_wino_small_applies), per group of
 * samples: V and dM of the group's tiles, then per (column block, k chunk) dU of the chunk
 * reduced over the tiles (tiles in order: the sums do not depend on the threads) and
 * transformed back. bf16 (winograd-bf16; conv_wino_small_dw16_applies): V and dM in tile
 * pairs, the reduction on vdpbf16ps. */
void conv_wino_small_dw(float *dw, const float *a, int ca, const float *b, int cb,
                        const float *dy, int cout, int N, int D, int H, int W, nn_prec prec,
                        int bf16, float *ws);
/* conv_wino_small_dw's bf16 form applies: few tiles, an even number per sample (a tile pair
 * never spans two samples, which are padded one at a time). */
int conv_wino_small_dw16_applies(int N, int D, int H, int W, int K, int ncol, nn_prec prec,
                                 const nn_shard *sh);

/* ---- conv_wgrad.c: weight-gradient driver ---------------------------------------------- */

/* Workspace of conv_weight_grad for nrows rows of W voxels: the gradient in packed layout, its
 * replicas, and every thread's packed panels. */
size_t conv_weight_grad_ws(int T, int K, int ncol, long nrows, int H, int W);
/* dWp (+)= the sum above over voxels [0, nvox) (adds to dWp when accumulate, so
 * a layer can reduce over its slabs one call each). With R replicas: chunk c of voxels
 * accumulates into copy c % R, in chunk order, and the copies are summed in order at the end,
 * so the result does not depend on the threads. Work items are (copy, share of the tiles)
 * pairs taken dynamically: balanced when cores are shared, and no barrier per chunk. Without
 * copies (huge layers) each share of tiles is one work item over all chunks. */
void conv_weight_grad(float *dWp, const conv_tw_src *r, long nrows, int T, int accumulate);
/* The direct weight gradient of a layer of K <= 3 input channels (27 K <= 96, unsharded), the
 * taps and channels as one k dimension (im2col): dw (cout, K, 3,3,3) += that of input a
 * (N,D,H,W,K) and output gradient dy (N,D,H,W,cout); bf16: the operands and the result
 * rounded, as the direct path. Workspace: conv_dw_i2c_ws_floats. */
int conv_dw_i2c_applies(int K, const nn_shard *sh);
size_t conv_dw_i2c_ws_floats(int W, int K, int cout);
void conv_dw_i2c(float *dw, const float *a, int K, const float *dy, int cout, int N, int D,
                 int H, int W, nn_prec prec, float *ws);
/* db[c] += sum over P voxels of dout[p*ldo + c], in NN_SLICES fixed slices summed in order
 * (rounded to bf16 in bf16 mode). */
void conv_bias_grad(float *db, const float *dout, long ldo, long P, int C, nn_prec prec,
                    float *ws);
/* dW (PyTorch layout, w[oc][ic][t]) += the packed Conv3d gradient (dw_tile), rounded to bf16
 * in bf16 mode (PyTorch autocast computes the weight gradient of the bf16 weight copy in
 * bf16). */
void conv_unpack_dw(float *dw, const float *Wp, int cin, int cout, nn_prec prec);
/* dW (PyTorch layout, w[ic][oc][t]) += the packed ConvTranspose3d gradient (dwt_tile), rounded
 * as conv_unpack_dw; with db, also db[oc] += its row of ones (the 8 taps summed in order). One
 * input channel's cout * 8 floats are written as one run; they gather one nr-float row per (tap,
 * column block). */
void conv_unpack_dwt(float *dw, float *db, const float *Wp, int cin, int cout, nn_prec prec);

/* ---- conv3d.c: Conv3d k3 --------------------------------------------------------------- */

size_t conv3d_ws(int N, int D, int H, int W, int cin, int cout, const nn_shard *sh);

/* ---- conv_amx.c: AMX weight gradient and ConvTranspose3d ------------------------------- */

/* The slab depth for conv_amx_dw within the layer's workspace; 0 when AMX does not apply. */
int conv_amx_dw_depth(int N, int D, int H, int W, int cin, int cout, nn_prec prec,
                      const nn_shard *sh);
void conv_amx_dw(float *dw, const float *a, int ca, const float *b, int cb, const float *dy,
                 int cout, int N, int D, int H, int W, int Zc, float *ws);
/* Few input channels (27 K <= 96, the network's first layer): the taps and channels as one
 * k dimension (im2col) on AMX tiles. conv_amx_i2c_fwd: the forward pass of w[col*sc + c*sk + t]
 * (ca | cb -> cout), `last` the kernels' rounding bits, in conv3d_ws's workspace (which holds
 * conv_amx_i2c_ws_floats). The weight gradient is conv_amx_dw's. */
int conv_amx_i2c_applies(int K);
size_t conv_amx_i2c_ws_floats(int D, int H, int W, int K, int cout);
void conv_amx_i2c_fwd(float *out, const float *a, int ca, const float *b, int cb, const float *w,
                      long sc, long sk, int cout, int N, int D, int H, int W, int last,
                      float *ws);
int convt_amx(int cin, int cout, nn_prec prec);
/* Floats of the backward pass's layout: acc [8][cin + 16][cout] fp32; xT [cin + 16][ldv],
 * dyP [8][ldv/2][cout][2], Dt [8][ldv][cout] and the input gradient's packed weights, bf16. */
size_t convt_amx_ws_floats(int D, int H, int W, int cin, int cout);
/* The backward pass, slab by slab of input planes: dw (PyTorch layout [ic][oc][t]) +=
 * bf16(sum over voxels of x^T dout_t) on nn_amx_dw, db from a row of ones under x^T (no pass of
 * its own over the output gradient), din = sum over taps of dout_t W_t^T as a tap GEMM over Dt
 * (the taps offsets into it); the output gradient is read once for both. */
void convt_amx_backward(float *din, float *dw, float *db, const float *dout, long ldo,
                        const float *in, const float *w, int cin, int cout, int N, int D,
                        int H, int W, float *ws);

/* ---- convt.c: ConvTranspose3d k2 s2 ---------------------------------------------------- */

/* Column-block groups per ConvTranspose3d row item: with fewer than 8 items per thread (8^3:
 * 8 planes), the items' column blocks are split into groups, so that the threads end together
 * (a tenth of an 8^3 512->256 pass was spent waiting). The results do not depend on it. */
int convt_groups(long items, int nb);
int convt_rows(int H, int W);

#endif
