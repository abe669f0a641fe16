/* conv_amx: the bf16 paths on AMX tiles that have their own layout: the Conv3d k3 weight
 * gradient (input transposed over the padded slab, output gradient as position pairs) and the
 * ConvTranspose3d backward pass (output gradient regrouped by tap). The AMX forward passes are
 * the ordinary walks (conv_pack.c) on the tile kernel. */
#include "nn/conv_int.h"

#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define AMX_SPIN() _mm_pause() /* a waiting thread's hint to the core (see amx_dw_chunks) */
#else
#define AMX_SPIN() ((void)0)
#endif

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
/* Where W is a multiple of 32 and a whole plane's working set is larger than the L2 (dyP's rows
 * and, for one block of 32 input channels, the xT rows its taps read from three planes: 128^3
 * at 64 channels, 3.2 MB of xT and 2 MB of dyP per plane), the chunks are blocks of rows of a
 * plane whose set is about AMX_DW_SET_BYTES. 128^3 64 -> 64 on a Xeon with AMX, 4 alternated
 * pairs on a host whose speed moved in phases: 1.15-1.20 s per pass with whole planes, 0.46-0.78
 * s with blocks of 30 rows (its time over the same run's forward pass 1.64-2.86 -> 1.10-1.63).
 * At 64^3 128 -> 128 (a plane's set 1.9 MB, under the L2) blocks of rows gained nothing. */
#define AMX_DW_L2_BYTES (2u << 20)
#define AMX_DW_SET_BYTES (5u << 18)
/* Fewer voxels per call, or fewer voxels than channels, and the accumulators' traffic (27*cin*cout
 * floats stored per tile group and reduced at the end) outweighs the tile products: at 8^3 (512
 * voxels) 1024->1024 the AMX pass took 89 ms against 55 for the fp32 one, 512->512 the same
 * (14 ms), 256->256 3.5 against 4.8 ms; from 16^3 up it runs about twice as fast */
#define AMX_DW_VOX_MIN 512

static long amx_round32(long v) {
    return (v + 31) & ~31L;
}

/* ---- few input channels: im2col over the taps ------------------------------------------------
 * A layer of K <= 3 input channels (the network's first) would fill one A tile row in ten on
 * the tap walks. Its 27 taps x K channels instead make one k dimension, k' = K t + c (81 at
 * most, padded with zeros to AMX_I2C_K = three 32-k tile steps): the forward pass is one
 * 1-tap GEMM over rows of k' (built per work item from a padded bf16 copy of the input, where
 * the three x taps of a (z, y) tap pair are 3K consecutive values), the weight gradient
 * reduces rows of k' (each a tap-shifted copy of a channel row of xT) against dyP. On a Xeon
 * with AMX, 32^3 3->64 in bf16: forward 1.15 -> 0.64 ms, weight gradient 2.63 -> 0.86 ms
 * against the fp32 kernels on bf16 operands. */
#define AMX_I2C_K 96
#define AMX_I2C_QC 2048 /* positions per chunk of the weight gradient's k' rows */

int conv_amx_i2c_applies(int K) {
    return K >= 1 && 27 * K <= AMX_I2C_K;
}

/* Floats of the layout for slabs of Zc planes (ldx, qs: xT's row pitch, dyP's positions):
 * acc, xT, dyP, and with few input channels (i2c) a block of 32 k' rows per thread (for
 * NN_MAX_THREADS: the workspace, planned once, must not depend on the thread count). */
static size_t amx_dw_floats(int Zc, int H, int W, int cin, int cout, long *ldx, long *qs) {
    const long HW = (long)(H + 2) * (W + 2);
    /* A tiles read 32 positions from q + the largest tap offset, q < qs */
    *ldx = amx_round32((Zc + 2) * HW + 2 * (W + 2) + 2 + 32);
    *qs = amx_round32((long)Zc * HW);
    const int i2c = conv_amx_i2c_applies(cin);
    return (i2c ? AMX_I2C_K : 27 * (size_t)cin) * cout + 16 +
           ((size_t)cin * *ldx + (size_t)*qs * cout) / 2 +
           (i2c ? (size_t)NN_MAX_THREADS * 16 * (AMX_I2C_QC + 32) + 16 : 0);
}

/* The slab depth for conv_amx_dw within the layer's workspace; 0 when AMX does not apply. */
int conv_amx_dw_depth(int N, int D, int H, int W, int cin, int cout, nn_prec prec,
                      const nn_shard *sh) {
    if (!use_pairs(prec) || sh || !nn_isa_amx() || (cin % 16 && !conv_amx_i2c_applies(cin)) ||
        cout % 16 || (long)N * D * H * W < AMX_DW_VOX_MIN ||
        (long)N * D * H * W < (cin > cout ? cin : cout))
        return 0;
    const size_t cap = conv3d_ws(N, D, H, W, cin, cout, NULL);
    long ldx, qs;
    for (int Zc = D; Zc >= 1; Zc--)
        if (amx_dw_floats(Zc, H, W, cin, cout, &ldx, &qs) <= cap)
            return Zc;
    return 0;
}

/* k' rows [32 kg, 32 kg + 32) of positions [q0, q0 + nq) into xr (pitch ldr): row k' = K t + c
 * is xT's channel c shifted by tap t; zero from 27 K on. */
static void amx_i2c_rows(uint16_t *xr, long ldr, const uint16_t *xT, long ldx, const long *toff,
                         int K, int kg, long q0, long nq) {
    for (int r = 0; r < 32; r++) {
        const int k = 32 * kg + r;
        if (k < 27 * K)
            memcpy(xr + r * ldr, xT + (size_t)(k % K) * ldx + q0 + toff[k / K],
                   sizeof(uint16_t) * nq);
        else
            memset(xr + r * ldr, 0, sizeof(uint16_t) * nq);
    }
}

/* One slab of the weight gradient on few input channels: per chunk of positions, groups (k'
 * block, output block) in a static order, so that each group's accumulators stay with one
 * thread, which builds its k' rows (xr, 32 rows per thread) once per chunk. */
static void amx_i2c_dw_slab(float *acc, const uint16_t *xT, long ldx, const uint16_t *dyP,
                            uint16_t *xr, const long *toff, int cin, int cout, long q_end, int nog,
                            int nth, int first) {
    const int ngi = AMX_I2C_K / 32 * nog;
    const long ldr = AMX_I2C_QC + 32;
#pragma omp parallel num_threads(nth)
    {
        uint16_t *rows = xr + (size_t)omp_get_thread_num() * 32 * ldr;
        for (long q0 = 0; q0 < q_end; q0 += AMX_I2C_QC) {
            const long nq = q_end - q0 < AMX_I2C_QC ? q_end - q0 : AMX_I2C_QC;
            int built = -1;
#pragma omp for schedule(static) nowait
            for (int g = 0; g < ngi; g++) {
                const int kg = g / nog, oc0 = 32 * (g % nog);
                if (kg != built)
                    amx_i2c_rows(rows, ldr, xT, ldx, toff, cin, kg, q0, nq);
                built = kg;
                nn_amx_dw(rows, ldr, dyP + q0 * cout + 2 * oc0, cout, nn_amx_run(nq), 2,
                          cout - oc0 > 16 ? 2 : 1, acc + (size_t)32 * kg * cout + oc0, cout,
                          first && !q0);
            }
        }
    }
}

/* The positions conv_amx_dw's products sum over, per chunk of whole planes. The corner
 * positions past a plane's H rows of output voxels, and past each row's W, have zero gradients:
 * no products need them. Each row's W positions where W is a multiple of 32 (whole k steps;
 * 32^3: 12% fewer products), else the plane's first H rows (16^3: 11% fewer); n2, the planes
 * per chunk of about qc positions. n2 = 0: plain chunks of positions, where a plane's rows are
 * odd (the pair layout) or their rounding up to 32 would overrun it. */
static nn_amx_span amx_dw_rows(int H, int W, int cout, long qc) {
    const long Wp = W + 2, HW = (long)(H + 2) * Wp, n2 = qc / HW > 1 ? qc / HW : 1;
    if (HW % 2 == 0 && W % 32 == 0) {
        /* a plane too large for the L2: blocks of rows (n < H) */
        const long per_row = 2L * cout + 3 * 64,
                   r = ((long)AMX_DW_SET_BYTES / Wp - 6 * 64) / per_row;
        if (Wp * (per_row * H + 6 * 64) > (long)AMX_DW_L2_BYTES && r < H)
            return (nn_amx_span){.len = W, .n = r > 1 ? r : 1, .stride = Wp, .n2 = 1,
                                 .stride2 = HW};
        return (nn_amx_span){.len = W, .n = H, .stride = Wp, .n2 = n2, .stride2 = HW};
    }
    if (HW % 2 == 0 && amx_round32((long)H * Wp) <= HW)
        return (nn_amx_span){.len = amx_round32((long)H * Wp), .n = 1, .n2 = n2, .stride2 = HW};
    return (nn_amx_span){.n2 = 0};
}

/* xT of sample n: the padded planes z0 - 1 .. z0 + nz of the input (a | b) transposed into one
 * row of positions per channel, then zeros up to the last position a tile reads (read by the
 * last tiles, times zero gradients: stale values could be NaN patterns). Only up to there, not
 * to the row's end: a slab shallower than the layout's (the last of a volume) zeroed the rest
 * of every row, 3.1 ms of a 64^3 64->64 weight gradient's 45 (Xeon with AMX). Written 32
 * positions (one line of each row) at a time, padding positions as zeros in the same lines:
 * by rows of voxels, each row's runs began mid-line and every line was read for ownership
 * before its parts were written (64^3 64->64: 40.5 -> 36.4 ms; non-temporal stores gained
 * nothing more). */
static void amx_dw_pack_x(uint16_t *xT, long ldx, const float *a, int ca, const float *b, int cb,
                          int n, int z0, int nz, int D, int H, int W) {
    const int Hp = H + 2, Wp = W + 2;
    const long HW = (long)Hp * Wp;
    /* past the last position q < q_end plus the largest tap offset, a tile's 32 positions (ldx
     * is a multiple of 32) */
    const long read = amx_round32(nz * HW) + 2 * HW + 2 * Wp + 2 + 32,
               nblk = amx_round32(read < ldx ? read : ldx) / 32;
#pragma omp parallel for schedule(static) num_threads(nn_threads())
    for (long j = 0; j < nblk; j++) {
        const float *pa[32], *pb[32];
        for (int i = 0; i < 32; i++) {
            const long q = 32 * j + i, zs = q / HW, yp = q % HW / Wp, xp = q % Wp;
            const long z = z0 - 1 + zs, y = yp - 1, x = xp - 1;
            const int in = zs < nz + 2 && z >= 0 && z < D && y >= 0 && y < H && x >= 0 && x < W;
            const size_t src = (((size_t)n * D + z) * H + y) * W + x;
            pa[i] = in ? a + src * ca : NULL;
            pb[i] = in && cb ? b + src * cb : NULL;
        }
        nn_amx_pack_t32(xT + 32 * j, ldx, pa, ca);
        if (cb)
            nn_amx_pack_t32(xT + (size_t)ca * ldx + 32 * j, ldx, pb, cb);
    }
}

/* One slab of conv_amx_dw in chunks: its layout (xT, dyP, tap offsets, accumulators), the
 * chunks (runs of qc positions below q_end, or with rows.n2 > 0 groups of rows.n2 of the nz
 * planes, each in nrb blocks of rows.n rows: their output voxels only) and the tile groups (27
 * taps x nig input x nog output blocks of 32 channels, ng in all); init: the first slab (the
 * first chunk zeroes the accumulators). */
typedef struct {
    const uint16_t *xT, *dyP;
    const long *toff;
    float *acc;
    long ldx, qc, q_end, HW, Wp, nrb;
    nn_amx_span rows;
    int cin, cout, nog, ng, H, nz, init;
} amx_dw_slab;

/* chunk ck's positions: its span, from *q0 */
static nn_amx_span amx_dw_chunk(const amx_dw_slab *s, long ck, long *q0) {
    if (s->rows.n2 <= 0) {
        *q0 = ck * s->qc;
        return nn_amx_run(s->q_end - *q0 < s->qc ? s->q_end - *q0 : s->qc);
    }
    const long z = ck / s->nrb * s->rows.n2, y0 = ck % s->nrb * s->rows.n;
    nn_amx_span sp = s->rows;
    *q0 = z * s->HW + y0 * s->Wp;
    sp.n = s->H - y0 < s->rows.n ? s->H - y0 : s->rows.n;
    sp.n2 = s->nz - z < s->rows.n2 ? s->nz - z : s->rows.n2;
    return sp;
}

/* Thread o's groups are [ng o / nth, ng (o + 1) / nth) of every chunk, taken chunk by chunk:
 * the split of a static loop, whose groups of one channel block follow each other (the 27
 * taps of a block share its rows of xT and dyP in L2: 1.2-1.9x faster than taps outermost at
 * 8^3 256->256 and 32^3 64->64 on a Xeon with AMX), and no barrier between chunks (32^3
 * 64->64, 5 chunks: 4.2 -> 3.8 ms). A thread whose own groups are done takes the others' next
 * ones (with gdone, ng counters). Where the cores are shared with other tenants, one thread's
 * tile unit runs 2-4x slower than the other's for seconds at a time (bench_step --peak per
 * CPU), and a static split waits for it; taken dynamically instead, every thread reads every
 * block's rows (16^3 128->128 7-10% slower on equal cores). Group g's chunk ck runs after its
 * chunk ck - 1 is done (gdone[g] = chunks done), so its accumulators see the same sums in the
 * same order on any number of threads. */
static void amx_dw_chunks(const amx_dw_slab *s, int nth) {
    const long nck = s->rows.n2 <= 0 ? (s->q_end + s->qc - 1) / s->qc
                                     : s->nrb * ((s->nz + s->rows.n2 - 1) / s->rows.n2);
    /* per thread, the next of its own items, a cache line each (every take writes it) */
    struct {
        _Atomic long v;
        char pad[64 - sizeof(_Atomic long)];
    } next[NN_MAX_THREADS];
    for (int o = 0; o < nth; o++)
        atomic_store_explicit(&next[o].v, 0, memory_order_relaxed);
    /* NULL without memory for it: each thread runs its own groups only */
    _Atomic int *gdone = nth > 1 ? malloc(sizeof(_Atomic int) * (size_t)s->ng) : NULL;
    for (int g = 0; gdone && g < s->ng; g++)
        atomic_store_explicit(&gdone[g], 0, memory_order_relaxed);
#pragma omp parallel num_threads(nth)
    {
        const int me = omp_get_thread_num(), nt = omp_get_num_threads(), ng = s->ng;
        for (int k = 0; k < (gdone ? nt : 1); k++) {
            const int o = (me + k) % nt, g0 = ng * o / nt, gn = ng * (o + 1) / nt - g0;
            for (long j; gn > 0 && (j = atomic_fetch_add_explicit(&next[o].v, 1,
                                                                   memory_order_relaxed)) <
                                       nck * gn;) {
                const long ck = j / gn;
                const int g = g0 + (int)(j % gn), t = g % 27;
                const int ic0 = 32 * (g / 27 / s->nog), oc0 = 32 * (g / 27 % s->nog);
                long q0;
                const nn_amx_span sp = amx_dw_chunk(s, ck, &q0);
                while (gdone && atomic_load_explicit(&gdone[g], memory_order_acquire) < ck)
                    AMX_SPIN();
                nn_amx_dw(s->xT + ic0 * s->ldx + q0 + s->toff[t], s->ldx,
                          s->dyP + q0 * s->cout + 2 * oc0, s->cout, sp, s->cin - ic0 > 16 ? 2 : 1,
                          s->cout - oc0 > 16 ? 2 : 1,
                          s->acc + ((size_t)t * s->cin + ic0) * s->cout + oc0, s->cout,
                          s->init && !q0);
                if (gdone)
                    atomic_store_explicit(&gdone[g], (int)ck + 1, memory_order_release);
            }
        }
    }
    free(gdone);
}

void conv_amx_dw(float *dw, const float *a, int ca, const float *b, int cb, const float *dy,
                 int cout, int N, int D, int H, int W, int Zc, float *ws) {
    const int cin = ca + cb, Hp = H + 2, Wp = W + 2;
    const long HW = (long)Hp * Wp;
    long ldx, qs;
    amx_dw_floats(Zc, H, W, cin, cout, &ldx, &qs);
    const int i2c = conv_amx_i2c_applies(cin);
    float *acc = ws;
    uint16_t *xT = (uint16_t *)(((uintptr_t)(acc + (i2c ? AMX_I2C_K : 27 * (size_t)cin) * cout) +
                                 63) &
                                ~(uintptr_t)63);
    uint16_t *dyP = xT + (size_t)cin * ldx;
    uint16_t *xr = (uint16_t *)(((uintptr_t)(dyP + (size_t)qs * cout) + 63) & ~(uintptr_t)63);
    const int nig = (cin / 16 + 1) / 2, nog = (cout / 16 + 1) / 2, ng = 27 * nig * nog;
    /* positions per chunk: the chunk's dyP (read by every tile group) within L2; the A rows of
     * one (tap, input block) are reused by the output blocks that follow it */
    long qc = (long)(AMX_DW_CHUNK_BYTES / (2 * (size_t)cout)) & ~31L;
    qc = qc < 256 ? 256 : qc;
    /* One pass over the positions (one sample, slab and chunk: the small volumes) with enough
     * channel blocks for the threads: each block's 27 taps go to a per-thread buffer (in acc's
     * place) and straight into dw, so acc never leaves L2. Through acc in memory, the finish
     * took as long as the tile products at 8^3 512->512 (28 MiB written, read back). */
    const int nth = nn_threads(), nblk = nig * nog;
    long toff[27]; /* tap t's offset in xT's rows */
    for (int t = 0; t < 27; t++)
        toff[t] = t / 9 * HW + t / 3 % 3 * Wp + t % 3;
    const int fused =
        !i2c && N == 1 && Zc >= D && amx_round32((long)D * HW) <= qc && nblk >= 4 * nth;
    const nn_amx_span rows = amx_dw_rows(H, W, cout, qc);
    /* blocks of rows per plane (1: whole planes, or positions in runs) */
    const long nrb = rows.stride > 0 ? (H + rows.n - 1) / rows.n : 1;
    int first = 1;
    for (int n = 0; n < N; n++)
        for (int z0 = 0; z0 < D; z0 += Zc) {
            const int nz = z0 + Zc < D ? Zc : D - z0;
            const long q_end = amx_round32(nz * HW);
            amx_dw_pack_x(xT, ldx, a, ca, b, cb, n, z0, nz, D, H, W);
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
            if (i2c) {
                amx_i2c_dw_slab(acc, xT, ldx, dyP, xr, toff, cin, cout, q_end, nog, nth, first);
                first = 0;
                continue;
            }
            if (fused) { /* blocks taken dynamically, as the chunks' groups below */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth)
                for (int blk = 0; blk < nblk; blk++) {
                    const int ic0 = 32 * (blk / nog), oc0 = 32 * (blk % nog);
                    const int ni = cin - ic0 > 16 ? 2 : 1, no = cout - oc0 > 16 ? 2 : 1;
                    float *tb = acc + (size_t)omp_get_thread_num() * 27 * 32 * 32;
                    for (int t = 0; t < 27; t++)
                        nn_amx_dw(xT + ic0 * ldx + toff[t], ldx, dyP + 2 * oc0, cout,
                                  nn_amx_run(q_end), ni,
                                  no, tb + t * 32 * 32, 32, 1);
                    nn_amx_dw_finish(dw + (size_t)oc0 * cin * 27 + (size_t)ic0 * 27,
                                     (long)cin * 27, 27, tb, 32, 32, 16 * ni, 16 * no, 27);
                }
                continue;
            }
            const amx_dw_slab sl = {.xT = xT, .dyP = dyP, .toff = toff, .acc = acc, .ldx = ldx,
                                    .qc = qc, .q_end = q_end, .HW = HW, .Wp = Wp, .nrb = nrb,
                                    .rows = rows, .cin = cin, .cout = cout, .nog = nog, .ng = ng,
                                    .H = H, .nz = nz, .init = first};
            amx_dw_chunks(&sl, nth);
            first = 0;
        }
    if (fused)
        return;
    if (i2c) { /* dw[oc][c][t] += bf16(acc[K t + c][oc]) */
        for (int oc = 0; oc < cout; oc++)
            for (int k = 0; k < 27 * cin; k++)
                dw[((size_t)oc * cin + k % cin) * 27 + k / cin] +=
                    nn_bf16_round(acc[(size_t)k * cout + oc]);
        return;
    }
    /* dw[oc][ic][t] += bf16(acc[t][ic][oc]): the gradient of the bf16 weight copy */
#pragma omp parallel for schedule(static)
    for (int ic = 0; ic < cin; ic++)
        nn_amx_dw_finish(dw + (size_t)ic * 27, (long)cin * 27, 27, acc + (size_t)ic * cout, cout,
                         cin, 1, cout, 27);
}

/* ---- bf16 Conv3d forward on few input channels (im2col, see AMX_I2C_K) ------------------------ */

enum { AMX_I2C_POS = 1024 }; /* positions per work item: its k' rows (192 KiB) stay in L2 */

/* The layout in the workspace: the padded bf16 slab [Zc + 2][H + 2][(W + 2) K] (and 16 values
 * that the last row's copies read past it; not conv_pad_slab's, whose bf16 channels pad to an
 * even count and would break the 3K consecutive values), the weights as K' x cout floats, then
 * packed, and per thread (NN_MAX_THREADS, as amx_dw_floats) the k' rows of one work item (rows
 * of y: yr rows, R positions). */
static size_t amx_i2c_fwd_floats(int D, int H, int W, int K, int cout, int *Zc, int *yr, long *R) {
    *Zc = conv_slab_depth(D, H, W, K, NULL);
    *yr = W >= AMX_I2C_POS ? 1 : AMX_I2C_POS / W < H ? AMX_I2C_POS / W : H;
    *R = amx_round32((long)*yr * W);
    const size_t slab = ((size_t)(*Zc + 2) * (H + 2) * (W + 2) * K + 16) / 2 + 16;
    const size_t ncp = (size_t)(cout + 15) & ~(size_t)15;
    return slab + (size_t)cout * AMX_I2C_K + ncp * AMX_I2C_K / 2 + 16 +
           (size_t)NN_MAX_THREADS * *R * AMX_I2C_K / 2 + 16;
}

size_t conv_amx_i2c_ws_floats(int D, int H, int W, int K, int cout) {
    int Zc, yr;
    long R;
    return amx_i2c_fwd_floats(D, H, W, K, cout, &Zc, &yr, &R);
}

void conv_amx_i2c_fwd(float *out, const float *a, int ca, const float *b, int cb, const float *w,
                      long sc, long sk, int cout, int N, int D, int H, int W, int last,
                      float *ws) {
    const int K = ca + cb, Hp = H + 2, Wp = W + 2, nr = (cout + 15) & ~15;
    int Zc, yr;
    long R;
    amx_i2c_fwd_floats(D, H, W, K, cout, &Zc, &yr, &R);
    const long rowv = (long)Wp * K; /* values per padded row */
    uint16_t *P = (uint16_t *)ws;
    float *w96 = ws + ((size_t)(Zc + 2) * Hp * rowv + 16) / 2 + 16;
    uint16_t *Bp = (uint16_t *)(w96 + (size_t)cout * AMX_I2C_K);
    uint16_t *rows = (uint16_t *)(((uintptr_t)(Bp + (size_t)nr * AMX_I2C_K) + 63) & ~(uintptr_t)63);
    /* w'(col, k' = K t + c) = w(col, c, t) */
    for (int col = 0; col < cout; col++)
        for (int k = 0; k < AMX_I2C_K; k++)
            w96[(size_t)col * AMX_I2C_K + k] =
                k < 27 * K ? w[col * sc + (k % K) * sk + k / K] : 0.0f;
    conv_pack_b16(Bp, w96, cout, AMX_I2C_K, 1, AMX_I2C_K, 1, nr, 1, 32);
    static const long aoff0[1] = {0};
    const nn_tg g = {.T = 1, .K = AMX_I2C_K, .aoff = aoff0, .nr = nr};
    const int nyb = (H + yr - 1) / yr;
    /* beyond the last-level cache the output goes out with non-temporal stores (64^3 3->64:
     * 7.6 -> 3.7 ms; at 32^3, 8 MiB, the next layer reads it from cache) */
    const int mode =
        last | (conv_stream(out, (size_t)N * D * H * W * cout, cout) ? NN_TG_STREAM : 0);
    for (int n = 0; n < N; n++)
        for (int z0 = 0; z0 < D; z0 += Zc) {
            const int nz = z0 + Zc < D ? Zc : D - z0;
#pragma omp parallel for collapse(2) schedule(static)
            for (long zs = 0; zs < nz + 2; zs++)
                for (long yp = 0; yp < Hp; yp++) {
                    uint16_t *r = P + (zs * Hp + yp) * rowv;
                    const long z = z0 - 1 + zs, y = yp - 1;
                    if (z < 0 || z >= D || y < 0 || y >= H) {
                        memset(r, 0, sizeof(uint16_t) * rowv);
                        continue;
                    }
                    memset(r, 0, sizeof(uint16_t) * K);
                    memset(r + rowv - K, 0, sizeof(uint16_t) * K);
                    const size_t src = (((size_t)n * D + z) * H + y) * W;
                    if (!cb) {
                        nn_bf16_pack(r + K, a + src * ca, (long)W * ca);
                        continue;
                    }
                    for (long x = 0; x < W; x++) {
                        nn_bf16_pack(r + (x + 1) * K, a + (src + x) * ca, ca);
                        nn_bf16_pack(r + (x + 1) * K + ca, b + (src + x) * cb, cb);
                    }
                }
            memset(P + (size_t)(nz + 2) * Hp * rowv, 0, sizeof(uint16_t) * 16);
#pragma omp parallel for collapse(2) schedule(dynamic, 1) num_threads(nn_threads())
            for (int zi = 0; zi < nz; zi++)
                for (int yb = 0; yb < nyb; yb++) {
                    const int y0 = yb * yr, y1 = y0 + yr < H ? y0 + yr : H;
                    const long np = (long)(y1 - y0) * W;
                    uint16_t *A = rows + (size_t)omp_get_thread_num() * R * AMX_I2C_K;
                    /* row of position (y, x): for each (dz, dy) the 3K values of taps dx = 0..2,
                     * copied 16 at a time (each copy's tail is overwritten by the next) */
                    for (int y = y0; y < y1; y++)
                        for (int x = 0; x < W; x++) {
                            uint16_t *d = A + ((long)(y - y0) * W + x) * AMX_I2C_K;
                            for (int dz = 0; dz < 3; dz++)
                                for (int dy = 0; dy < 3; dy++)
                                    memcpy(d + (dz * 3 + dy) * 3 * K,
                                           P + ((size_t)(zi + dz) * Hp + y + dy) * rowv +
                                               (size_t)x * K,
                                           16 * sizeof(uint16_t));
                            memset(d + 27 * K, 0, sizeof(uint16_t) * (AMX_I2C_K - 27 * K));
                        }
                    float *o = out + ((((size_t)n * D + z0 + zi) * H + y0) * W) * cout;
                    for (long q0 = 0; q0 < np; q0 += 32) {
                        float *c[32];
                        for (int r = 0; r < 32; r++)
                            c[r] = q0 + r < np ? o + (q0 + r) * cout : NULL;
                        nn_tg_amx(&g, A + q0 * AMX_I2C_K, AMX_I2C_K, Bp, c, NULL, cout,
                                  NN_TG_ZERO | mode);
                    }
                    if (mode & NN_TG_STREAM)
                        nn_stream_fence();
                }
        }
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
 * of conv_slab_bytes() (24 MiB) whatever the volume. Sums in fp32 over bf16 operands, one rounding,
 * as the other bf16 kernels. */

int convt_amx(int cin, int cout, nn_prec prec) {
    return use_pairs(prec) && nn_isa_amx() && cin % 32 == 0 && cout % 32 == 0;
}

int nn_convt3d_algo(int cin, int cout, nn_prec prec) {
    if (convt_amx(cin, cout, prec))
        return NN_ALGO_AMX;
    return use_pairs(prec) && !nn_isa_amx() && cin % 2 == 0 && cout % 2 == 0 ? NN_ALGO_DIRECT_BF16
                                                                             : NN_ALGO_DIRECT;
}

/* Input planes per slab of the backward pass, and its voxel rows' pitch (a multiple of 32):
 * per input voxel, the transposed input and its row of ones (cin + 16), and the output gradient
 * twice (by tap, and as pairs: 16 cout), in bf16. */
static int ct_amx_slab(int D, int H, int W, int cin, int cout, long *ldv) {
    const size_t plane = (size_t)H * W * (cin + 16 + 16 * (size_t)cout) * sizeof(uint16_t);
    int Zc = (int)(conv_slab_bytes() / 2 / plane);
    Zc = Zc < 1 ? 1 : Zc > D ? D : Zc;
    /* slabs of equal depth: 32 planes in slabs of at most 10 as 8, 8, 8, 8, not 10, 10, 10, 2
     * (a last slab's products and packing ran over the whole layout's positions) */
    const int ns = (D + Zc - 1) / Zc;
    Zc = (D + ns - 1) / ns;
    *ldv = amx_round32((long)Zc * H * W);
    return Zc;
}

/* Floats of the backward pass's layout: acc [8][cin + 16][cout] fp32; xT [cin + 16][ldv],
 * dyP [8][ldv/2][cout][2], Dt [8][ldv][cout] and the input gradient's packed weights, bf16. */
size_t convt_amx_ws_floats(int D, int H, int W, int cin, int cout) {
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
    const long HW = (long)H * W, nv = nz * HW, lv = amx_round32(nv);
    /* voxel pairs in order, all taps of a pair together: dout is read as 4 rows streaming
     * forward (by tap first, every other voxel of each row, 8 times: 1.6x slower at 64^3) */
#pragma omp parallel for schedule(static)
    for (long pp = 0; pp < lv / 2; pp++) /* the positions the products read (convt_amx_backward) */
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
void convt_amx_backward(float *din, float *dw, float *db, const float *dout, long ldo,
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
    const int YR = convt_rows(H, W), ny = (H + YR - 1) / YR;
    if (din)
        conv_pack_b16(Bp, w, cin, cout, 8, (long)cout * 8, 8, nr, nkb, 32);
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
                /* the products run over the slab's voxels rounded up to 32 (lv): zeros there */
                const long lv = amx_round32(nv);
                for (int ic = 0; ic < cin; ic++)
                    memset(xT + (size_t)ic * ldv + nv, 0, sizeof(uint16_t) * (lv - nv));
                if (db && first) { /* bf16 1.0 (0x3F80), then zero rows */
                    for (long q = 0; q < ldv; q++)
                        xT[(size_t)cin * ldv + q] = 0x3F80;
                    memset(xT + ((size_t)cin + 1) * ldv, 0, sizeof(uint16_t) * 15 * ldv);
                }
#pragma omp parallel
                for (long q0 = 0; q0 < lv; q0 += qc) {
                    const long nq = lv - q0 < qc ? lv - q0 : qc;
                    /* split evenly, as conv_amx_dw (here taps outermost: each tap has its
                     * own dyP rows, and taps innermost ran 1.1-1.4x slower) */
#pragma omp for schedule(static)
                    for (int gi = 0; gi < ng; gi++) {
                        const int t = gi / (nig * nog), ic0 = 32 * (gi / nog % nig);
                        const int oc0 = 32 * (gi % nog);
                        nn_amx_dw(xT + (size_t)ic0 * ldv + q0, ldv,
                                  dyP + ((size_t)t * ldv + q0) * cout + 2 * oc0, cout,
                                  nn_amx_run(nq),
                                  ci - ic0 > 16 ? 2 : 1, cout - oc0 > 16 ? 2 : 1,
                                  acc + ((size_t)t * ci + ic0) * cout + oc0, cout, first && !q0);
                    }
                }
            }
            first = 0;
            if (!din)
                continue;
            const int ngr = convt_groups((long)nz * ny, nb);
#pragma omp parallel for schedule(dynamic, 2)
            for (long it = 0; it < (long)nz * ny * ngr; it++) {
                const int og = (int)(it % ngr), yb = (int)(it / ngr % ny), z = (int)(it / ngr / ny);
                const int y = yb * YR, nyr = H - y < YR ? H - y : YR;
                for (int ob = og * nb / ngr; ob < (og + 1) * nb / ngr; ob++) {
                    const int n0 = ob * nr, nvalid = cin - n0 < nr ? cin - n0 : nr;
                    const conv_walk wk = {
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
                    conv_walk_kblocks(g, wk, (long)nyr * W, Bp + (size_t)ob * 8 * cout * nr, cout,
                                      nkb, NULL, nvalid, NN_TG_ZERO, NN_TG_RBF16);
                }
            }
        }
    if (!dw)
        return;
#pragma omp parallel for schedule(static)
    for (int ic = 0; ic < cin; ic++)
        nn_amx_dw_finish(dw + (size_t)ic * cout * 8, 8, (long)cout * 8, acc + (size_t)ic * cout,
                         cout, ci, 1, cout, 8);
    if (db)
        for (int oc = 0; oc < cout; oc++) {
            float s = 0;
            for (int t = 0; t < 8; t++)
                s += acc[((size_t)t * ci + cin) * cout + oc];
            db[oc] += nn_bf16_round(s);
        }
}
