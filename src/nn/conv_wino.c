/* conv_wino: Conv3d k3 by Winograd F(4x4x2, 3x3x3), fp32 and bf16 (vdpbf16ps): the slab
 * pass over a whole volume, the same on few tiles (small volumes, U never whole), and the weight
 * gradient by the same tiles. conv3d.c picks it (algo.h) and drives it. */
#include "nn/conv_int.h"
#include "nn/settings.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
 * input gradient (conv3d_pass), weight gradient (conv_wino_dw_slab).
 * Tiles are taken in chunks whose V and M (144 rows each) stay in the last-level cache (unless
 * U is larger still, see conv_wino_slab): the threads transform a chunk's inputs, run its 144 x
 * column-block GEMMs with the microkernel (each GEMM's U panel is reused by every tile of the
 * chunk), then transform its outputs. */
#define WINO_CHUNK_BYTES (6u << 20) /* V and M of one chunk of tiles */
/* The weight gradient's chunks grow with dU: each chunk adds its tiles into all of dU (144 * K *
 * ncp floats), so the longer the chunk, the fewer times dU is read and written and the longer
 * the microkernel's reduction; but V and M then leave the last-level cache. 2.5 dU, between 6
 * and 48 MiB: 128 -> 128 channels (dU 9 MiB) get 22.5 MiB, 64 -> 64 (2.25 MiB) keep 6.
 * Measured with 24 against 6 MiB, alternated: 32^3 128 -> 128 0.11-0.13 s against 0.14-0.25 s,
 * 16^3 128 -> 128 0.017-0.024 against 0.028-0.030 s, but 64^3 64 -> 64 0.34-0.40 s against
 * 0.17-0.29 s and 32^3 64 -> 64 no change. 48 against 24 MiB (Xeon with AMX, 4 alternated
 * rounds): 32^3 256 -> 256 faster in 4 of 4 (227-282 -> 212-241 ms), 512 -> 256 in 4 of 4
 * (510-713 -> 380-673), 16^3 256 -> 512, 512 -> 512 and 1024 -> 512 in 3 of 4 (8-15%), 32^3
 * 128 -> 256 and 16^3 256 -> 256 within noise; 96 MiB lost at 32^3 256 -> 256 (234-320 ms). The
 * forward and input gradient keep 24 (WINO_BIG_CHUNK_BYTES): larger chunks were 1.3-1.6x slower
 * at 16^3 256 -> 256 there. */
#define WINO_BIG_CHUNK_BYTES (24u << 20)
#define WINO_DW_CHUNK_BYTES (48u << 20)
static long wino_dw_chunk_bytes(int K, int ncp) {
    const long b = 4L * WINO_NXI * K * ncp * 5 / 2;
    return b < (long)WINO_CHUNK_BYTES ? (long)WINO_CHUNK_BYTES
           : b > (long)WINO_DW_CHUNK_BYTES ? (long)WINO_DW_CHUNK_BYTES
                                           : b;
}
/* The forward and input gradient's shared chunks where U is at most 24 MiB: 2.5 U as the
 * weight gradient's (so that U is read fewer times), between 6 and 24 MiB, and at most a
 * quarter of the last-level cache; 6 MiB where its size is unknown. With V read once per point
 * (wino_chunk_gemm), on a Xeon with AMX (300 MiB of last-level cache), against 6 MiB, 3-4
 * alternated rounds: 16^3 128 -> 128 forward 1.19x and input gradient 1.11x, 16^3 256 -> 128
 * within noise, 32^3 128 -> 64 1.1x; 2.5 U up to 48 MiB made 16^3 and 32^3 256 -> 128 slower.
 * Before that order, on other hosts, 24 MiB chunks at 32^3 128 -> 128 (U 9 MiB) ran 0.88x:
 * V and M left their last-level cache. It fits the workspace: conv_wino_ws_floats holds the
 * weight gradient's chunk, never smaller. */
static long wino_fwd_chunk_bytes(int K, int ncp) {
    static long llc = -1;
    if (llc < 0) {
        const long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
        llc = v > 0 ? v : 0;
    }
    long b = wino_dw_chunk_bytes(K, ncp), cap = llc / 4;
    if (cap > (long)WINO_BIG_CHUNK_BYTES)
        cap = WINO_BIG_CHUNK_BYTES;
    if (b > cap)
        b = cap;
    return b < (long)WINO_CHUNK_BYTES ? (long)WINO_CHUNK_BYTES : b;
}

/* Groups of a point's nb column blocks taken as one GEMM work item: one group (a point's V
 * read once from the last-level cache for all its blocks) unless 144 items would be under 8 per
 * thread. */
static int wino_col_groups(int nb, int nth) {
    const int g = (8 * nth + WINO_NXI - 1) / WINO_NXI;
    return g < nb ? g : nb;
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
    return nn_settings()->winograd;
}

int conv_wino_applies(int D, int H, int W, int K, int ncol, nn_prec prec, const nn_shard *sh) {
    (void)prec;
    return wino_enabled() && !sh && D % 2 == 0 && H % 4 == 0 && W % 4 == 0 &&
           K >= 8 && ncol >= 8 && (long)K * ncol <= WINO_KMAX &&
           (long)D * H * W >= WINO_VOX_MIN &&
           conv_slab_depth(D, H, W, K, NULL) >= 2;
}

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

/* U (or dU) larger than SCAFFOLD_NN_WINO_UMAX bytes (default NN_SETTINGS_WINO_UMAX, 128 MiB;
 * the tests run every layer in groups of one column block with a small one) is made a group of
 * whole column blocks at a time, each group's pass over the input on its own (the input
 * transform once per group): the workspace holds one group. At scale 7 / base 64 the deepest up
 * block's conv1 (1024 -> 512 at 16^3, U 340 MB) is then three groups and the workspace 371 ->
 * 160 MiB, at the price of 2 more input transforms of its 1024 channels (a few percent of that
 * layer's time). */
long conv_wino_umax(void) {
    return (long)nn_settings()->wino_umax;
}

/* Columns per group of a Winograd pass with K input channels and ncol output columns in blocks
 * of nr: all of them, or as many whole blocks as conv_wino_umax() holds (at least one). */
int conv_wino_group_cols(int K, int ncol, int nr) {
    const long blk = 4L * WINO_NXI * K * nr, nb = nblocks(ncol, nr), g = conv_wino_umax() / blk;
    return nb * blk <= conv_wino_umax() ? ncol : (int)(g < 1 ? 1 : g) * nr;
}

/* Floats of the Winograd workspace after the slab: U of one or two output parts (ncol columns
 * in all, each part padded to whole blocks), or of one column group where U is larger than
 * conv_wino_umax(), and one chunk's V and M. */
size_t conv_wino_ws_floats(int K, int ncol) {
    int ncp = nn_gemm_ncol_max(ncol) + 64; /* each part pads to whole blocks (< 32) */
    const long cap = conv_wino_umax() / (4L * WINO_NXI * K); /* columns */
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

/* Prefetch the taps of columns [ob*nr + jg*V, +V) at k (none at k1). RATIONALE: a transform
 * reads 27 taps of each of V columns that lie a whole kernel stack apart (forward) or one run
 * of V kernels that the loop has not touched (input gradient); the weights are larger than the
 * L2 and too many streams for the hardware prefetchers, and the transform waited on these
 * loads for most of its time (8^3 256->256: the transform was a quarter of the pass). One item
 * ahead hides them behind the item's arithmetic. */
static void wino_wprefetch(const float *w, int ncol, long sc, long sk, int nr, int ob, int k,
                           int jg, int k1) {
    const int V = nn_gemm_vw();
    const long col0 = (long)ob * nr + jg * V;
    if (k >= k1 || col0 >= ncol)
        return;
    const int nc = ncol - col0 < V ? (int)(ncol - col0) : V;
    const float *p = w + col0 * sc + k * sk;
    for (int v = 0; v < nc; v++) { /* 27 floats: at most 3 cache lines */
        __builtin_prefetch(p + v * sc);
        __builtin_prefetch(p + v * sc + 13);
        __builtin_prefetch(p + v * sc + 26);
    }
}

/* The transform of columns [ob*nr, ob*nr + nr) (zero past ncol) and k in [k0, k1): point xi's
 * run of (k1 - k0) * nr floats, k major, at ub + xi * run (run >= (k1 - k0) * nr). bf16 (k0
 * even): winograd-bf16's, as vdpbf16ps's pairs of k, point xi's (k1 - k0 + 1) / 2 * nr 32-bit
 * words at (uint32_t *)ub + xi * run (an odd k1 - k0's last pair with zero high halves). */
static void wino_wblock(void *restrict ub, long run, const float *w, int ncol, long sc, long sk,
                        int flip, int nr, int ob, int k0, int k1, nn_prec prec, int bf16) {
    const int V = nn_gemm_vw(), ng = nr / V; /* nr: whole vectors */
    const int round = prec == NN_BF16; /* bf16: the kernels rounded (in the transform) */
    const int ks = bf16 ? 2 : 1;
    for (int k = k0; k < k1; k += ks)
        for (int jg = 0; jg < ng; jg++) {
            const long col0 = (long)ob * nr + jg * V;
            /* columns < ncol (none: any valid pointer, nothing is read) */
            const int nc = ncol - col0 < V ? (ncol > col0 ? (int)(ncol - col0) : 0) : V;
            const float *src = nc ? w + col0 * sc + k * sk : w;
            const int kn = jg + 1 < ng ? k : k + ks, jn = jg + 1 < ng ? jg + 1 : 0;
            wino_wprefetch(w, ncol, sc, sk, nr, ob, kn, jn, k1);
            if (bf16)
                wino_wprefetch(w, ncol, sc, sk, nr, ob, kn + 1, jn, k1);
            const size_t at = (size_t)(k - k0) / ks * nr + jg * V;
            if (bf16)
                nn_wino16_weights((uint32_t *)ub + at, run, src,
                                  k + 1 < k1 ? (nc ? src + sk : w) : NULL, sc, flip, nc, round);
            else
                nn_wino_weights((float *)ub + at, run, src, sc, flip, nc, round);
        }
}

/* bf16: U16[xi][ob][k/2][nr][2] (Kp = K rounded up to even, the extra k zero), the pairs
 * vdpbf16ps takes, rounded to bf16. A work item's points go through the stack a cache line
 * more than a run apart (runs of 512 bytes had put the 144 stores of a vector into 8 of the
 * L1's 64 sets), then each into U in one piece. */
void conv_wino_weights(void *U, const float *w, int ncol, int K, long sc, long sk, int flip,
                       int nr, nn_prec prec, int bf16) {
    const int nb = nblocks(ncol, nr), Kp = bf16 ? (K + 1) & ~1 : K;
    const int kc = WINO_WROW / nr, nkc = (K + kc - 1) / kc; /* kc even: nr <= 64 */
#pragma omp parallel for collapse(2) schedule(static) num_threads(nn_threads())
    for (int ob = 0; ob < nb; ob++)
        for (int c = 0; c < nkc; c++) {
            const int k0 = c * kc, k1 = k0 + kc < K ? k0 + kc : K;
            /* floats, or bf16 pairs' words (an odd K's last pair padded) */
            const size_t run = (size_t)(bf16 ? (k1 - k0 + 1) / 2 : k1 - k0) * nr, sr = run + 16;
            float ub[WINO_NXI * (WINO_WROW + 16)]; /* run <= WINO_WROW: nr <= 64 */
            wino_wblock(ub, (long)sr, w, ncol, sc, sk, flip, nr, ob, k0, k1, prec, bf16);
            for (int xi = 0; xi < WINO_NXI; xi++) {
                const size_t at = (((size_t)xi * nb + ob) * Kp + k0) * nr;
                /* run 32-bit elements either way: floats, or words of two bf16 */
                memcpy(bf16 ? (void *)((uint16_t *)U + at) : (void *)((float *)U + at),
                       ub + xi * sr, 4 * run);
            }
        }
}

/* Offset of tile t's first point (tiles numbered x fastest, Tx x Ty per plane) in a tensor with
 * the given plane, row and voxel strides: tiles are 2 planes, 4 rows and 4 voxels apart. */
static long wino_at(long t, long Tx, long Ty, long plane, long row, long vox) {
    return 2 * (t / (Tx * Ty)) * plane + 4 * (((t / Tx) % Ty) * row + (t % Tx) * vox);
}

/* One Winograd slab pass (conv_wino_slab): what its chunks share. */
typedef struct wino_sp {
    float *out;
    long ldo;
    int ncol, nr, nb, ncp, C, Kp, bf16;
    int nxi; /* points per chunk: all 144, or a plane group's 36 * zg (conv_wino_slab) */
    const float *P;
    const void *U;
    long Tx, Ty, plane, row, oplane, orow;
} wino_sp;

/* A chunk's layout for nt tiles: V's rows ldv elements (of V's kind) apart, M's ldm floats;
 * returns M's offset from V in floats (V's rows in bf16: half the bytes, the same cache-line
 * padding). */
static long wino_chunk_lay(const wino_sp *s, long nt, long *ldv, long *ldm) {
    *ldv = nt * s->Kp + (s->bf16 ? 2 : 1) * WINO_LDPAD;
    *ldm = nt * s->ncp + WINO_LDPAD;
    return (s->nxi * *ldv / (s->bf16 ? 2 : 1) + 15) & ~15L;
}

/* A chunk's V and M in VM for nt tiles (wino_chunk_lay). */
static void wino_chunk_vm(const wino_sp *s, float *VM, long nt, float **V, float **M, long *ldv,
                          long *ldm) {
    *V = VM;
    *M = VM + wino_chunk_lay(s, nt, ldv, ldm);
}

/* Floats of a chunk's V and M for nt tiles. */
static long wino_chunk_floats(const wino_sp *s, long nt) {
    long ldv, ldm;
    return wino_chunk_lay(s, nt, &ldv, &ldm) + s->nxi * ldm;
}

/* Input transform of chunk tile i (tile t0 + i) into V: planes [a0, a0 + s->nxi / 36) (all of
 * them in bf16). */
static void wino_chunk_in(const wino_sp *s, float *V, long ldv, long t0, long i, int a0) {
    const float *pt = s->P + wino_at(t0 + i, s->Tx, s->Ty, s->plane, s->row, s->C);
    if (!s->bf16) {
        nn_wino_input(V + i * s->C, ldv, pt, s->plane, s->row, s->C, s->C, a0, s->nxi / 36);
        return;
    }
    uint16_t *V16 = (uint16_t *)V;
    nn_wino16_input(V16 + i * s->Kp, ldv, pt, s->plane, s->row, s->C, s->C);
    if (s->Kp > s->C)
        for (int xi = 0; xi < WINO_NXI; xi++)
            V16[xi * ldv + i * s->Kp + s->C] = 0;
}

/* Point xi's GEMMs for column blocks ob0 <= ob < ob1 over the chunk's nt tiles: M[xi] = V[xi]
 * U[xu] (xu = xi but in a plane group, whose first point is xu - xi). One item takes all of a
 * point's blocks where there are enough points for the threads: as items of their own, each
 * block read V[xi] again from the last-level cache (a shared chunk is larger than L2); 16^3
 * forward passes to 128 columns (4 blocks) took 1.3-1.45x this time, 32^3 64 -> 128 1.44x,
 * input gradients of 128 channels 1.2-1.3x (Xeon with AMX, alternated). */
static void wino_chunk_gemm(const wino_sp *s, const float *V, long ldv, float *M, long ldm, long nt,
                            int xi, int xu, int ob0, int ob1) {
    static const long aoff[1] = {0};
    const nn_tg g = {.T = 1, .K = s->Kp, .aoff = aoff, .nr = s->nr};
    conv_walk wk = {.a0 = s->bf16 ? (const void *)((const uint16_t *)V + (size_t)xi * ldv)
                                  : (const void *)(V + (size_t)xi * ldv),
                    .a_row = 0, .a_col = s->Kp, .c_row = 0, .c_col = s->ncp, .Wr = (int)nt,
                    .pairs = s->bf16};
    for (int ob = ob0; ob < ob1; ob++) {
        const size_t u = ((size_t)xu * s->nb + ob) * s->Kp * s->nr;
        wk.c0 = M + (size_t)xi * ldm + ob * s->nr;
        conv_walk_run(&g, &wk, nt,
                      s->bf16 ? (const void *)((const uint16_t *)s->U + u)
                              : (const void *)((const float *)s->U + u),
                      NULL, s->nr, NN_TG_ZERO);
    }
}

/* Output transform of chunk tile i (tile t0 + i) from M (planes from a0, as wino_chunk_in). */
static void wino_chunk_out(const wino_sp *s, const float *M, long ldm, long t0, long i, int a0) {
    float *o = s->out + wino_at(t0 + i, s->Tx, s->Ty, s->oplane, s->orow, s->ldo);
    if (s->bf16)
        nn_wino16_output(o, s->oplane, s->orow, s->ldo, s->ncol, M + i * s->ncp, ldm);
    else
        nn_wino_output(o, s->oplane, s->orow, s->ldo, s->ncol, M + i * s->ncp, ldm, a0,
                       s->nxi / 36);
}

/* Few channels: a thread's own chunk of V and M (at most this many bytes, whole blocks of the
 * microkernel's rows) stays in its L2 together with U (at most WINO_OWN_UMAX bytes), so each
 * thread runs whole chunks, transform to output, with no hand-over between threads. Shared
 * chunks of this size lost to the hand-over (1.1-1.9x slower at 16 to 64 channels); shared
 * 6 MiB chunks leave the transforms waiting on the last-level cache (the input transform was a
 * fifth of the quickstart's profile). 1 MiB rather than 768 KiB: 64 -> 64 channels then get 12
 * tiles a chunk instead of 6, so U (2.25 MiB, streamed past the chunk) is read half as often:
 * 32^3 and 16^3 64 -> 64 forward and input gradient 4-15% faster, 32 channels within noise
 * (Xeon with AMX, 4-5 alternated rounds). */
#define WINO_OWN_BYTES (1024u << 10)
#define WINO_OWN_UMAX (3072L << 10)
/* The weight gradient's: each chunk adds into a whole dU (copy), so dU must stay in L2 too;
 * WINO_OWN_DW_R copies (R - 1 of them in the workspace beside R threads' chunks), taken where
 * there are at least 8 chunks per copy */
#define WINO_OWN_DW_UMAX (640L << 10)
#define WINO_OWN_DW_R 4
#define WINO_OWN_DW_BYTES (768u << 10) /* a chunk's V and dM beside its copy of dU */

/* Planes of the transformed tile per pass over the tiles (4, 2 or 1) in fp32 (the tests force
 * each: SCAFFOLD_NN_WINO_PLANES): all four where U fits WINO_ZG_UBYTES, else the most whose
 * share of U (U / 4 per plane) does, else one. Each group is a pass of its own over the thread's
 * own chunks that transforms the input planes it needs and adds its part of the outputs, its
 * share of U staying in L2 (up to WINO_ZG_OWN_UMAX; shared chunks beyond). Where all of U
 * streamed past every chunk from the last-level cache, that stream bounded the GEMMs: 32^3
 * 64 -> 64 forward 8.9 -> 7.0 ms, weight gradient 12.3 -> 7.9 ms (Xeon with AMX, alternated). */
#define WINO_ZG_UBYTES (640L << 10)
#define WINO_ZG_OWN_BYTES (512L << 10) /* a grouped chunk's V and M (or dM) */
#define WINO_ZG_OWN_UMAX (1280L << 10) /* a group's share of U (dU), at most */
static int wino_zgroup(long ubytes, int bf16) {
    if (bf16) /* winograd-bf16: all planes at once */
        return 4;
    if (nn_settings()->wino_planes)
        return nn_settings()->wino_planes;
    int g = 4;
    while (g > 1 && ubytes / 4 * g > WINO_ZG_UBYTES)
        g /= 2;
    return g;
}

/* Tiles per thread-own chunk, or 0 where the layer takes shared chunks: U too large for L2, a
 * chunk under one block of rows, or the threads' chunks beyond the workspace's V and M (one
 * shared chunk of WINO_CHUNK_BYTES, conv_wino_ws_floats). */
static long wino_own_tiles(const wino_sp *s, long ubytes, long mr, int nth) {
    if (ubytes > (s->nxi < WINO_NXI ? WINO_ZG_OWN_UMAX : WINO_OWN_UMAX) ||
        nn_settings()->wino_own == 0)
        return 0;
    const long cap = s->nxi < WINO_NXI ? WINO_ZG_OWN_BYTES : WINO_OWN_BYTES;
    long per = (long)WINO_CHUNK_BYTES / nth;
    if (per > cap)
        per = cap;
    long nt = per / (4L * s->nxi * (s->Kp + s->ncp));
    nt -= nt % mr;
    while (nt >= mr && 4 * (wino_chunk_floats(s, nt) + 16) > per)
        nt -= mr;
    return nt >= mr ? nt : 0;
}

/* out (Dz, H, W, ncol; voxels ldo floats apart) = the convolution of padded slab P (Dz+2, H+2,
 * W+2, C) with the transformed weights U (conv_wino_weights, block width nr); Dz even, H and W
 * multiples of 4. VM: one chunk's V and M. bf16 (winograd-bf16): V in bf16 (Kp = C rounded
 * up to even channels per tile, the extra one zero) and the GEMMs on the pair kernels. */
void conv_wino_slab(float *out, long ldo, int ncol, const float *P, int C, const void *U,
                    int nr, int Dz, int H, int W, float *VM, int bf16) {
    const int nb = nblocks(ncol, nr), ncp = nb * nr;
    const long Tz = Dz / 2, Ty = H / 4, Tx = W / 4, ntiles = Tz * Ty * Tx;
    const long row = (long)(W + 2) * C, plane = (H + 2) * row;
    const long ubytes = 4L * WINO_NXI * C * ncp, mr = nn_tg_mr(nr);
    const int zg = wino_zgroup(ubytes, bf16);
    const wino_sp s = {.out = out, .ldo = ldo, .ncol = ncol, .nr = nr, .nb = nb, .ncp = ncp,
                       .C = C, .Kp = bf16 ? (C + 1) & ~1 : C, .bf16 = bf16, .nxi = 36 * zg,
                       .P = P, .U = U, .Tx = Tx, .Ty = Ty, .plane = plane, .row = row,
                       .oplane = (long)H * W * ldo, .orow = (long)W * ldo};
    const int nth = nn_threads();
    const long own = wino_own_tiles(&s, ubytes * zg / 4, mr, nth);
    if (own) {
        /* chunks in a fixed partition of the tiles (results do not depend on the threads),
         * taken dynamically (a busy core takes fewer); plane groups one after the other (a
         * tile's later groups add to what its earlier ones stored) */
        const long nck = (ntiles + own - 1) / own, slot = (wino_chunk_floats(&s, own) + 16) & ~15L;
#pragma omp parallel num_threads(nth)
        for (int a0 = 0; a0 < 4; a0 += zg) {
#pragma omp for schedule(dynamic, 1)
            for (long ck = 0; ck < nck; ck++) {
                const long t0 = ck * own, nt = ntiles - t0 < own ? ntiles - t0 : own;
                float *V, *M;
                long ldv, ldm;
                wino_chunk_vm(&s, VM + (size_t)omp_get_thread_num() * slot, nt, &V, &M, &ldv,
                              &ldm);
                for (long i = 0; i < nt; i++)
                    wino_chunk_in(&s, V, ldv, t0, i, a0);
                for (int xi = 0; xi < s.nxi; xi++)
                    wino_chunk_gemm(&s, V, ldv, M, ldm, nt, xi, 36 * a0 + xi, 0, nb);
                for (long i = 0; i < nt; i++)
                    wino_chunk_out(&s, M, ldm, t0, i, a0);
            }
        }
        return;
    }
    /* shared chunks, in the same plane groups: a group's V, M and share of U pass through the
     * last-level cache together (16^3 128 -> 128: 7 MiB against 28; 16^3 256 -> 128 forward
     * and weight gradient 1.2-1.4x, the scale 5 / 64 fp32 step 1.07x, Xeon with AMX) */
    /* Every chunk reads all of U: a U larger than the last-level cache gets chunks of 24 MiB
     * (16^3 and 32^3 256->256, U 36 MiB: 8 and 52 passes over it with 6 MiB chunks; 1.5x and
     * 1.2x faster with 24). Below that, wino_fwd_chunk_bytes. Chunks are whole blocks of the
     * microkernel's rows (85 tiles ran a 5-row block in every GEMM), and a last chunk shorter
     * than half of one is shared with the one before (128 tiles in chunks of 42 left one of
     * 2). */
    const long big = WINO_BIG_CHUNK_BYTES;
    const long ct = wino_chunk_tiles(C, ncp, ubytes > big ? big : wino_fwd_chunk_bytes(C, ncp));
    const long chunk = ct > mr ? ct - ct % mr : ct;
    const int ng = wino_col_groups(nb, nth);
#pragma omp parallel num_threads(nth)
    for (long t0 = 0, nt = 0; t0 < ntiles; t0 += nt) {
        const long left = ntiles - t0;
        nt = left <= chunk ? left
             : left < chunk + chunk / 2 ? ((left + 1) / 2 + mr - 1) / mr * mr
                                        : chunk;
        if (nt > chunk) /* the workspace holds a chunk */
            nt = chunk;
        float *V, *M;
        long ldv, ldm;
        wino_chunk_vm(&s, VM, nt, &V, &M, &ldv, &ldm);
        for (int a0 = 0; a0 < 4; a0 += zg) {
#pragma omp for schedule(dynamic, 8)
            for (long i = 0; i < nt; i++)
                wino_chunk_in(&s, V, ldv, t0, i, a0);
#pragma omp for collapse(2) schedule(dynamic, 1)
            for (int xi = 0; xi < s.nxi; xi++)
                for (int g = 0; g < ng; g++)
                    wino_chunk_gemm(&s, V, ldv, M, ldm, nt, xi, 36 * a0 + xi, g * nb / ng,
                                    (g + 1) * nb / ng);
#pragma omp for schedule(dynamic, 8)
            for (long i = 0; i < nt; i++)
                wino_chunk_out(&s, M, ldm, t0, i, a0);
        }
    }
}

/* One Winograd weight-gradient slab pass (conv_wino_dw_slab): what its chunks share. */
typedef struct wino_dp {
    const float *P, *dy;
    long ldy;
    int C, Kp, ncol, nr, nb, ncp, mk, nkb, bf16;
    long Tx, Ty, plane, row, gplane, grow;
    int nxi; /* points per chunk: 144, or a plane group's 36 * zg (wino_zgroup) */
} wino_dp;

/* Tile i of a chunk (tile t0 + i): its input transform into V and its output gradient's into
 * dM, rows ldv and ldm 32-bit words apart. bf16 (winograd-bf16): V and dM in tile pairs (words
 * of two bf16 values) for the reduction over the pairs on vdpbf16ps; both tiles of a pair by one
 * thread, the even one first (it writes whole words). */
static void wino_dw_tile(const wino_dp *d, float *V, long ldv, float *M, long ldm, long t0,
                         long i, int a0) {
    const float *pt = d->P + wino_at(t0 + i, d->Tx, d->Ty, d->plane, d->row, d->C),
                *gt = d->dy + wino_at(t0 + i, d->Tx, d->Ty, d->gplane, d->grow, d->ldy);
    if (!d->bf16) {
        nn_wino_input(V + i * d->C, ldv, pt, d->plane, d->row, d->C, d->C, a0, d->nxi / 36);
        nn_wino_grad_output(M + i * d->ncp, ldm, gt, d->gplane, d->grow, d->ldy, d->ncol,
                            d->ncp, a0, d->nxi / 36);
        return;
    }
    uint32_t *V2 = (uint32_t *)V, *M2 = (uint32_t *)M;
    const long ip = i / 2;
    nn_wino16_input_pair(V2 + ip * d->Kp, ldv, pt, d->plane, d->row, d->C, d->C, (int)(i & 1));
    if (d->Kp > d->C && !(i & 1))
        for (int xi = 0; xi < WINO_NXI; xi++)
            V2[xi * ldv + ip * d->Kp + d->C] = 0;
    nn_wino16_grad_output(M2 + ip * d->ncp, ldm, gt, d->gplane, d->grow, d->ldy, d->ncol, d->ncp,
                          (int)(i & 1));
}

/* dU[xi] (C x ncp) += V[xi]^T dM[xi] over a chunk's nt tiles for column blocks ob0 <= ob < ob1:
 * each k block's rows of V[xi] stay in L1 while the column blocks' dM panels go past (from L2).
 * With the column blocks outside (one item per (xi, column block)), every block read all of
 * V[xi] again, from the last-level cache where the chunk is larger than L2: at 16^3 with 128
 * output columns (4 blocks), 64 -> 128, 128 -> 128 and 256 -> 128 weight gradients took
 * 1.45x, 1.16x and 1.11x this order's time (Xeon with AMX, 4 alternated rounds). */
static void wino_dw_gemm(const wino_dp *d, const float *V, long ldv, const float *M, long ldm,
                         long nt, int xi, int ob0, int ob1, float *dU, int init) {
    for (int kb = 0; kb < d->nkb; kb++) {
        const int k0 = kb * d->mk, k1 = k0 + d->mk < d->C ? k0 + d->mk : d->C;
        for (int ob = ob0; ob < ob1; ob++) {
            float *o = dU + ((size_t)xi * d->C + k0) * d->ncp + ob * d->nr;
            if (d->bf16) {
                for (int k = 0; init && k < k1 - k0; k++)
                    memset(o + (size_t)k * d->ncp, 0, sizeof(float) * d->nr);
                nn_tw_tile_bf16((int)((nt + 1) / 2),
                                (const uint16_t *)((const uint32_t *)V + xi * ldv + k0), d->Kp,
                                (const uint16_t *)((const uint32_t *)M + xi * ldm + ob * d->nr),
                                d->ncp, k1 - k0, d->nr, o, d->ncp);
                continue;
            }
            const float *ar = V + (size_t)xi * ldv + k0, *gr = M + (size_t)xi * ldm + ob * d->nr;
            nn_tw_tile(1, &ar, &gr, (int)nt, d->C, d->ncp, k1 - k0, d->nr, d->nr, o, d->ncp, init);
        }
    }
}

/* conv_wino_dw_slab for few channels, or 0 where it does not apply: chunks of tiles of a
 * thread's own (conv_wino_slab), V and dM in its L2, each chunk's products added into copy
 * c % R of dU (copy 0: dU itself), in chunk order, the copies then added to dU in order: the
 * sums depend on the shape only. The copies are the work items (at most R threads), R - 1 of
 * them in the workspace beside the threads' chunks. In plane groups (d->nxi < 144: dU too
 * large for L2), each a pass of its own over the tiles with its share of dU in the copies. bf16 (winograd-bf16): V and dM in tile pairs, as the shared chunks have them (a chunk
 * is an even number of tiles but the last). */
static int wino_dw_own(const wino_dp *d, float *dU, long ntiles, float *VM, int first) {
    const long es = d->bf16 ? 2 : 4; /* bytes per value */
    const int zg = d->nxi / 36;
    const long nu = (long)d->nxi * d->C * d->ncp; /* a group's share of dU */
    if (!nn_settings()->wino_own || 4 * nu > (zg < 4 ? WINO_ZG_OWN_UMAX : WINO_OWN_DW_UMAX))
        return 0;
    long own = (zg < 4 ? WINO_ZG_OWN_BYTES : WINO_OWN_DW_BYTES) /
               (es * d->nxi * (d->Kp + d->ncp) + 4L * 2 * WINO_LDPAD);
    own = own < 16 ? 16 : own - own % 4;
    /* rows of V and dM in 32-bit words (fp32 values, or bf16 pairs of tiles) */
    const long rt = d->bf16 ? own / 2 : own;
    const long nck = (ntiles + own - 1) / own, R = WINO_OWN_DW_R;
    /* fewer chunks: zeroing and adding the copies costs more than the chunks save (16^3
     * volumes: 32 -> 32 in bf16, 13 chunks, 0.75-0.85x; in fp32, 26 chunks, 0.87-0.9x) */
    if (nck < 8 * R)
        return 0;
    const long ldv = rt * d->Kp + WINO_LDPAD, ldm = rt * d->ncp + WINO_LDPAD,
               slot = (d->nxi * (ldv + ldm) + 15) & ~15L, nus = (nu + 15) & ~15L;
    if (4 * ((R - 1) * nus + R * slot) > (long)WINO_CHUNK_BYTES) /* the workspace's V and M */
        return 0;
    float *cps = VM, *slots = VM + (R - 1) * nus;
    const int nth = nn_threads() < R ? nn_threads() : (int)R;
#pragma omp parallel num_threads(nth)
    {
        float *V = slots + (size_t)omp_get_thread_num() * slot, *Mo = V + d->nxi * ldv;
        for (int a0 = 0; a0 < 4; a0 += zg) {
            float *dUg = dU + (size_t)36 * a0 * d->C * d->ncp;
#pragma omp for schedule(dynamic, 1)
            for (long cp = 0; cp < R; cp++) {
                float *dUc = cp ? cps + (cp - 1) * nus : dUg;
                /* a copy's first chunk sets it (nck >= 8 R: every copy has chunks), dU's own
                 * only in the first slab */
                for (long ck = cp; ck < nck; ck += R) {
                    const long t0 = ck * own, nt = ntiles - t0 < own ? ntiles - t0 : own;
                    for (long i = 0; i < nt; i++)
                        wino_dw_tile(d, V, ldv, Mo, ldm, t0, i, a0);
                    for (int xi = 0; xi < d->nxi; xi++)
                        wino_dw_gemm(d, V, ldv, Mo, ldm, nt, xi, 0, d->nb, dUc,
                                     ck == cp && (cp || first));
                }
            }
#pragma omp for schedule(static)
            for (long i = 0; i < nu; i++) {
                float sum = 0.0f;
                for (long cp = 1; cp < R; cp++)
                    sum += cps[(cp - 1) * nus + i];
                dUg[i] += sum;
            }
        }
    }
    return 1;
}

/* Weight gradient by the same tiles: dU[xi] (K x ncp) += V[xi]^T dM[xi] over a slab's tiles,
 * V the input transform (as in the forward pass) and dM = A dY A^T the output gradient's; at
 * the end dW = G^T dU G per channel pair (conv_wino_dw_finish). Each chunk's (xi, column block)
 * items of dU are taken by one thread and accumulate chunk after chunk, tiles in order within
 * the kernel: the sums do not depend on the threads. */
void conv_wino_dw_slab(float *dU, const float *P, int C, const float *dy, long ldy, int ncol,
                       int nr, int Dz, int H, int W, float *VM, int bf16, int first) {
    const int nb = nblocks(ncol, nr), mk = nn_tw_mr(nr);
    const long ntiles = (long)(Dz / 2) * (H / 4) * (W / 4), row = (long)(W + 2) * C;
    /* own or shared chunks, in plane groups as conv_wino_slab's */
    const int zg = wino_zgroup(4L * WINO_NXI * C * nb * nr, bf16);
    const wino_dp d = {.P = P, .dy = dy, .ldy = ldy, .C = C, .Kp = bf16 ? (C + 1) & ~1 : C,
                       .ncol = ncol, .nr = nr, .nb = nb, .ncp = nb * nr, .mk = mk,
                       .nkb = (C + mk - 1) / mk, .bf16 = bf16, .Tx = W / 4, .Ty = H / 4,
                       .plane = (H + 2) * row, .row = row, .gplane = (long)H * W * ldy,
                       .grow = (long)W * ldy, .nxi = 36 * zg};
    if (wino_dw_own(&d, dU, ntiles, VM, first))
        return;
    const long chunk = wino_chunk_tiles(C, d.ncp, wino_dw_chunk_bytes(C, d.ncp));
    const int ng = wino_col_groups(nb, nn_threads());
#pragma omp parallel num_threads(nn_threads())
    for (long t0 = 0; t0 < ntiles; t0 += chunk) {
        const long nt = ntiles - t0 < chunk ? ntiles - t0 : chunk;
        /* rows in 32-bit words: bf16 holds tile pairs */
        const long rt = bf16 ? (nt + 1) / 2 : nt;
        const long ldv = rt * d.Kp + WINO_LDPAD, ldm = rt * d.ncp + WINO_LDPAD;
        float *V = VM, *Mo = VM + d.nxi * ldv;
        for (int a0 = 0; a0 < 4; a0 += zg) {
            if (bf16) {
#pragma omp for schedule(dynamic, 4)
                for (long ip = 0; ip < rt; ip++)
                    for (long i = 2 * ip; i < 2 * ip + 2 && i < nt; i++)
                        wino_dw_tile(&d, V, ldv, Mo, ldm, t0, i, a0);
            } else {
#pragma omp for schedule(dynamic, 8)
                for (long i = 0; i < nt; i++)
                    wino_dw_tile(&d, V, ldv, Mo, ldm, t0, i, a0);
            }
            /* one (xi, group of column blocks) per item, its k blocks inside: items large
             * enough that handing them out costs little (per k block, the dispatch cost up to a
             * fifth of the kernel time); the blocks in groups of their own only where 144 items
             * would be under 8 per thread */
#pragma omp for collapse(2) schedule(dynamic, 1)
            for (int xi = 0; xi < d.nxi; xi++)
                for (int g = 0; g < ng; g++)
                    wino_dw_gemm(&d, V, ldv, Mo, ldm, nt, xi, g * nb / ng, (g + 1) * nb / ng,
                                 dU + (size_t)36 * a0 * C * d.ncp, first && t0 == 0);
        }
    }
}

/* (G^T dU G)[t] of one input channel and nv <= nn_gemm_vw() output channels, whose 144 points
 * are at src + xi * sxi + v (whole vectors readable): stored in out[v * ov + t] (acc 0) or
 * added to it (1); rounded to bf16 first when round (the gradient of the bf16 weight copy; in
 * the kernel's vectors: a scalar rounding made the 8^3 bf16 weight gradient 9% slower than the
 * fp32 one). */
static void wino_dw_pair(float *out, long ov, int acc, int nv, const float *src, long sxi,
                         int bf16, int round) {
    const int V = nn_gemm_vw();
    float d[27 * WINO_WV_MAX];
    if (bf16)
        nn_wino16_weights_grad(d, src, sxi, round);
    else
        nn_wino_weights_grad(d, src, sxi, round);
    for (int v = 0; v < nv; v++) {
        float *o = out + v * ov;
        for (int t = 0; t < 27; t++) {
            const float g = d[t * V + v];
            o[t] = acc == 0 ? g : o[t] + g;
        }
    }
}

/* dw (PyTorch layout, w[oc][ic][t]; dU's cout columns in blocks of nr) += G^T dU G for each
 * channel pair, a vector of output channels at a time (runs of dU's rows, as in conv_wino_weights;
 * the groups of one input channel run one after the other, so the second half of each cache
 * line read is still there). */
void conv_wino_dw_finish(float *dw, const float *dU, int cin, int cout, int nr, nn_prec prec,
                         int bf16) {
    const int ncp = nblocks(cout, nr) * nr;
    const int V = nn_gemm_vw(), ng = (cout + V - 1) / V;
#pragma omp parallel for collapse(2) schedule(static) num_threads(nn_threads())
    for (int ic = 0; ic < cin; ic++)
        for (int og = 0; og < ng; og++) {
            const int oc0 = og * V, nv = cout - oc0 < V ? cout - oc0 : V;
            wino_dw_pair(dw + ((size_t)oc0 * cin + ic) * 27, (long)cin * 27, 1, nv,
                         dU + (size_t)ic * ncp + oc0, (long)cin * ncp, bf16, prec == NN_BF16);
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
 * are bit-identical to conv_wino_slab's). The weight gradient mirrors it: per (column block, k
 * chunk) the chunk's dU is reduced over the tiles into the buffer and transformed back into dw at
 * once. The weights are transformed per group of samples; a volume of one sample fits. */
#define WINO_SMALL_TILES 32            /* tiles per group of samples, at most */
#define WINO_SMALL_MIN 16              /* and at least (4^3, 4 tiles: 0.7-0.9x the direct) */
#define WINO_SMALL_UBYTES (448u << 10) /* a thread's chunk of U (or dU): within the L2 */
/* Floats of a thread's slot: the chunk, and the weight gradient's transformed chunk (27 taps
 * where dU has 144 points) */
#define WINO_SMALL_SLOT                                                                        \
    ((WINO_SMALL_UBYTES / sizeof(float)) / WINO_NXI * (WINO_NXI + 27) + WINO_NXI * 16)
/* Floats from one point's chunk of U to the next's: a whole number of cache lines more than the
 * chunk, so that the transform's 144 stores of a vector (one per point) do not all fall into
 * the few L1 sets a multiple of 2 KiB maps to. */
#define WINO_SMALL_SU(nk, nr) ((long)(nk) * (nr) + 16)

static long wino_ntiles(int D, int H, int W) {
    return (long)(D / 2) * (H / 4) * (W / 4);
}

/* Samples per group: as many whole samples as WINO_SMALL_TILES holds (at least one). */
static int wino_small_group(int N, int D, int H, int W) {
    const long g = WINO_SMALL_TILES / wino_ntiles(D, H, W);
    return g < 1 ? 1 : g > N ? N : (int)g;
}

int conv_wino_small_applies(int N, int D, int H, int W, int K, int ncol, nn_prec prec,
                            const nn_shard *sh) {
    (void)prec;
    return wino_enabled() && !sh && D % 2 == 0 && H % 4 == 0 &&
           W % 4 == 0 && K >= 8 && ncol >= 8 && (long)D * H * W < WINO_VOX_MIN &&
           wino_ntiles(D, H, W) <= WINO_SMALL_TILES &&
           wino_small_group(N, D, H, W) * wino_ntiles(D, H, W) >= WINO_SMALL_MIN;
}

int conv_wino_small_dw16_applies(int N, int D, int H, int W, int K, int ncol, nn_prec prec,
                                 const nn_shard *sh) {
    return conv_wino_small_applies(N, D, H, W, K, ncol, prec, sh) && wino_ntiles(D, H, W) % 2 == 0;
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

size_t conv_wino_small_ws_floats(int N, int D, int H, int W, int K, int ncol) {
    return wino_small_layout(NULL, N, D, H, W, K, ncol, NULL);
}

/* V (k chunks of kc) of samples [n0, n0 + ns) (their tiles one after another) of cat(a, b):
 * each sample padded into P, then transformed; with dy (the weight gradient), also the output
 * gradient's dM per column block of nr. The forms (WS_*): fp32; winograd-bf16's forward rows,
 * each chunk's rows in bf16 with nkp = its k rounded up to even per tile (the extra one zero),
 * rows nt * nkp + 2 * WINO_LDPAD elements apart (the same bytes of padding); winograd-bf16's
 * weight gradient, V and dM in tile pairs (32-bit words of the even and the odd tile's bf16
 * values, the pair transformed by one thread, the even tile first; a sample's tiles even in
 * number), rows np * nkp (V) and np * nr (dM) + WINO_LDPAD words apart, np = nt / 2. Each
 * chunk at the fp32 chunk's address. */
enum { WS_F32, WS_ROWS16, WS_PAIRS16 };
static void wino_small_in(float *V, int kc, float *P, int fmt, const float *a, int ca,
                          const float *b, int cb, float *dM, const float *dy, int ncol, int nr,
                          int n0, int ns, int D, int H, int W, int form) {
    const int K = ca + cb, nkc = (K + kc - 1) / kc, nb = nblocks(ncol, nr);
    const int step = form == WS_PAIRS16 ? 2 : 1;
    const long nt1 = wino_ntiles(D, H, W), nt = ns * nt1, Tx = W / 4, Ty = H / 4;
    const long row = (long)(W + 2) * K, plane = (H + 2) * row;
    const long ldm = (form == WS_PAIRS16 ? nt / 2 : nt) * nr + WINO_LDPAD;
    const long gplane = (long)H * W * ncol, grow = (long)W * ncol;
    for (int s = 0; s < ns; s++) {
        conv_pad_slab(P, fmt, a, ca, ca, b, cb, n0 + s, 0, D, D, H, W);
        const float *g = dy ? dy + (size_t)(n0 + s) * D * H * W * ncol : NULL;
#pragma omp parallel for schedule(dynamic, 2) num_threads(nn_threads())
        for (long j = 0; j < nt1 / step; j++)
            for (long i = j * step; i < j * step + step; i++) {
                const long t = s * nt1 + i;
                const int odd = (int)(t & 1);
                const float *pt = P + wino_at(i, Tx, Ty, plane, row, K);
                for (int c = 0; c < nkc; c++) {
                    const int k0 = c * kc, nk = K - k0 < kc ? K - k0 : kc, nkp = (nk + 1) & ~1;
                    float *vc = wino_small_v(V, nt, kc, c);
                    if (form == WS_F32) {
                        nn_wino_input(vc + t * nk, nt * nk + WINO_LDPAD, pt + k0, plane, row, K,
                                      nk, 0, 4);
                    } else if (form == WS_ROWS16) {
                        uint16_t *v16 = (uint16_t *)vc + t * nkp;
                        const long ldv = nt * nkp + 2 * WINO_LDPAD;
                        nn_wino16_input(v16, ldv, pt + k0, plane, row, K, nk);
                        if (nkp > nk)
                            for (int xi = 0; xi < WINO_NXI; xi++)
                                v16[xi * ldv + nk] = 0;
                    } else {
                        uint32_t *v32 = (uint32_t *)vc + t / 2 * nkp;
                        const long ldv = nt / 2 * nkp + WINO_LDPAD;
                        nn_wino16_input_pair(v32, ldv, pt + k0, plane, row, K, nk, odd);
                        if (nkp > nk && !odd)
                            for (int xi = 0; xi < WINO_NXI; xi++)
                                v32[xi * ldv + nk] = 0;
                    }
                }
                if (g)
                    for (int ob = 0; ob < nb; ob++) {
                        const int n0c = ob * nr, nv = ncol - n0c < nr ? ncol - n0c : nr;
                        float *mb = dM + (size_t)ob * WINO_NXI * ldm;
                        const float *gt = g + wino_at(i, Tx, Ty, gplane, grow, ncol) + n0c;
                        if (form == WS_PAIRS16)
                            nn_wino16_grad_output((uint32_t *)mb + t / 2 * nr, ldm, gt, gplane,
                                                  grow, ncol, nv, nr, odd);
                        else
                            nn_wino_grad_output(mb + t * nr, ldm, gt, gplane, grow, ncol, nv,
                                                nr, 0, 4);
                    }
            }
    }
}

/* conv3d_pass's Winograd on few tiles (conv_wino_small_applies): outputs as conv3d_pass's. Per work
 * item (column block): per k chunk, the chunk of U into the thread's buffer and the 144 GEMMs
 * from it; then the block's output transform. bf16: winograd-bf16's transforms, V and U in
 * bf16 pairs and the GEMMs on vdpbf16ps (the 8^3 layers' bf16 gain). */
void conv_wino_small_pass(float *out1, int n1, float *out2, int n2, const float *a, int ca,
                          const float *b, int cb, const float *w, long sc, long sk, int flip,
                          int N, int D, int H, int W, nn_prec prec, int bf16, float *ws) {
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
                              NULL, 0, nr, n0, ns, D, H, W, bf16 ? WS_ROWS16 : WS_F32);
#pragma omp parallel num_threads(nn_threads())
            {
                float *U = Ub + (size_t)omp_get_thread_num() * WINO_SMALL_SLOT;
#pragma omp for schedule(dynamic, 1)
                for (int ob = 0; ob < nb; ob++) {
                    float *Mb = M + (size_t)ob * WINO_NXI * ldm;
                    for (int c = 0, k0 = 0; k0 < K; c++, k0 += kc) {
                        const int k1 = k0 + kc < K ? k0 + kc : K, nk = k1 - k0;
                        /* bf16: V's rows in bf16 (k rounded up to even, the padding in the
                         * same bytes), U in 32-bit words of k pairs (wino_wblock) */
                        const int per = bf16 ? 2 : 1, kk = bf16 ? (nk + 1) & ~1 : nk;
                        const long ldv = nt * kk + per * WINO_LDPAD, /* elements */
                            su = WINO_SMALL_SU(kk / per, nr);        /* 32-bit units */
                        const char *Vc = (const char *)wino_small_v(V, nt, kc, c);
                        wino_wblock(U, su, wp, ncol, sc, sk, flip, nr, ob, k0, k1, prec, bf16);
                        const nn_tg g = {.T = 1, .K = kk, .aoff = aoff, .nr = nr};
                        for (int xi = 0; xi < WINO_NXI; xi++) {
                            const conv_walk wk = {.a0 = Vc + (size_t)xi * ldv * 4 / per,
                                                  .a_row = 0, .a_col = kk,
                                                  .c0 = Mb + (size_t)xi * ldm, .c_row = 0,
                                                  .c_col = nr, .Wr = (int)nt, .pairs = bf16};
                            conv_walk_run(&g, &wk, nt, U + (size_t)xi * su, NULL, nr,
                                          k0 ? NN_TG_ACCUM : NN_TG_ZERO);
                        }
                    }
                    const int nv = ncol - ob * nr < nr ? ncol - ob * nr : nr;
                    for (long i = 0; i < nt; i++) {
                        float *o = out + (size_t)(n0 + i / nt1) * D * H * W * ncol + ob * nr;
                        float *ot = o + wino_at(i % nt1, Tx, Ty, oplane, orow, ncol);
                        if (bf16)
                            nn_wino16_output(ot, oplane, orow, ncol, nv, Mb + i * nr, ldm);
                        else
                            nn_wino_output(ot, oplane, orow, ncol, nv, Mb + i * nr, ldm, 0, 4);
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

/* dw += the weight gradient of a Conv3d k3 on few tiles (conv_wino_small_applies), per group of
 * samples: V and dM of the group's tiles, then per (column block, k chunk) dU of the chunk
 * reduced over the tiles (tiles in order: the sums do not depend on the threads) and
 * transformed back. */
void conv_wino_small_dw(float *dw, const float *a, int ca, const float *b, int cb,
                        const float *dy, int cout, int N, int D, int H, int W, nn_prec prec,
                        int bf16, float *ws) {
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
        const long nt = ns * nt1, np = nt / 2;
        const long ldm = (bf16 ? np : nt) * nr + WINO_LDPAD;
        wino_small_in(V, kc, P, prec == NN_BF16 ? PAD_F32R : PAD_F32, a, ca, b, cb, dM, dy, cout,
                      nr, n0, ns, D, H, W, bf16 ? WS_PAIRS16 : WS_F32);
#pragma omp parallel num_threads(nn_threads())
        {
            /* the slot holds 171 * kc * nr + 144 * 16 floats: kc * nr <= WINO_SMALL_UBYTES / 4 /
             * 144 */
            float *dU = Ub + (size_t)omp_get_thread_num() * WINO_SMALL_SLOT,
                  *dT = dU + (size_t)WINO_NXI * WINO_SMALL_SU(kc, nr);
#pragma omp for collapse(2) schedule(dynamic, 1)
            for (int ob = 0; ob < nb; ob++)
                for (int c = 0; c < nkc; c++) {
                    const int k0 = c * kc, k1 = k0 + kc < K ? k0 + kc : K, nk = k1 - k0;
                    const float *Vc = wino_small_v(V, nt, kc, c);
                    const long su = WINO_SMALL_SU(nk, nr);
                    if (bf16) /* the fp32 tiles set their dU (init) */
                        memset(dU, 0, sizeof(float) * WINO_NXI * su);
                    const int nkp = (nk + 1) & ~1;
                    for (int xi = 0; xi < WINO_NXI; xi++) {
                        const float *gr = dM + ((size_t)ob * WINO_NXI + xi) * ldm;
                        for (int kk = 0; kk < nk; kk += mk) {
                            const int m = nk - kk < mk ? nk - kk : mk;
                            float *o = dU + xi * su + (size_t)kk * nr;
                            if (bf16) { /* pair rows of nkp words, np of them */
                                const float *vr = Vc + (size_t)xi * (np * nkp + WINO_LDPAD) + kk;
                                nn_tw_tile_bf16((int)np, (const uint16_t *)vr, nkp,
                                                (const uint16_t *)gr, nr, m, nr, o, nr);
                            } else {
                                const float *ar = Vc + (size_t)xi * (nt * nk + WINO_LDPAD) + kk;
                                nn_tw_tile(1, &ar, &gr, (int)nt, nk, nr, m, nr, nr, o, nr, 1);
                            }
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
                                         dU + (size_t)ic * nr + j, su, bf16, prec == NN_BF16);
                    for (int j = 0; j < nv; j++) {
                        float *restrict o = dw + ((size_t)(ob * nr + j) * K + k0) * 27;
                        const float *restrict d = dT + (size_t)j * nk * 27;
#pragma omp simd
                        for (int i = 0; i < nk * 27; i++) /* d: rounded (bf16) */
                            o[i] += d[i];
                    }
                }
        }
    }
}
