/* layers: GroupNorm (+ fused ReLU), ReLU, MaxPool3d(2), concatenation, log-softmax and layout
 * conversion, forward and backward, channels-last (see layers.h). The convolutions are in
 * conv3d.c, convt.c and conv1.c (and the conv_*.c they share).
 *
 * GroupNorm statistics: one pass over the voxels in fixed slices; per block of 64 voxels (in L1)
 * each channel's mean and sum of squares around it, in float, merged in double into the slice's
 * (the pairwise update of Chan, Golub and LeVeque), the slices merged in order, then the
 * channels per group: the variance never comes from E[x^2] - mean^2 (no cancellation), and x is
 * read once, not once for the mean and again for the variance around it. */
#include "nn/layers.h"

#include "core/prof.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#define GN_BLOCK 64

/* GroupNorm's loops over a block of voxels are plain C over the channels, built wide (NN_WIDE,
 * base.h): each channel's sums still run over the voxels in order. */

/* Workspace: per slice 2C doubles, per thread 3C floats, then per channel 4C doubles
 * (sums, sums2, shift[2C]), 5C floats (backward coefficients) and 2C + 1 doubles (per-group
 * sums of the backward pass). */
static size_t gn_scratch_floats(int C) {
    return ((size_t)NN_SLICES * 4 + (size_t)NN_MAX_THREADS * 3 + 2) * (size_t)C;
}

size_t nn_groupnorm_ws_floats(int C) {
    return gn_scratch_floats(C) + 19 * (size_t)C + 64;
}

static double *gn_channel_area(float *ws, int C) {
    return (double *)(ws + gn_scratch_floats(C));
}

/* Where a GroupNorm backward's ReLU mask comes from: y > 0 (y, the forward output), or
 * x * sc + bi > thr (the forward's own expression and its scale and bias per channel; thr is
 * 2^-134 where y was rounded to bf16, below which a positive value rounds to zero), or none. */
typedef struct {
    const float *y, *sc, *bi;
    float thr;
} gn_mask;

/* The GroupNorm backward's loops over the channels of one voxel. The pointers never alias
 * (restrict spares GCC's run-time overlap checks, which sent these loops to their scalar
 * versions) and both operands of the ReLU mask are loaded unconditionally, so the loops
 * vectorize; each channel's arithmetic is unchanged. */
static inline void gn_bwd_sums_voxel(float *restrict f1, float *restrict f2,
                                     const float *restrict x, const float *restrict g,
                                     const gn_mask *mk, const float *restrict mean,
                                     const float *restrict rstd, int C) {
    if (mk->y) {
        const float *restrict y = mk->y;
        for (int c = 0; c < C; c++) {
            const float gv = g[c], dy = y[c] > 0.0f ? gv : 0.0f;
            const float xh = (x[c] - mean[c]) * rstd[c];
            f1[c] += dy;
            f2[c] += dy * xh;
        }
    } else if (mk->sc) {
        const float *restrict sc = mk->sc, *restrict bi = mk->bi;
        const float thr = mk->thr;
        for (int c = 0; c < C; c++) {
            const float v = x[c] * sc[c] + bi[c], dy = v > thr ? g[c] : 0.0f;
            const float xh = (x[c] - mean[c]) * rstd[c];
            f1[c] += dy;
            f2[c] += dy * xh;
        }
    } else {
        for (int c = 0; c < C; c++) {
            const float xh = (x[c] - mean[c]) * rstd[c];
            f1[c] += g[c];
            f2[c] += g[c] * xh;
        }
    }
}

static inline void gn_bwd_dx_voxel(float *restrict o, const float *restrict x,
                                   const float *restrict g, const gn_mask *mk,
                                   const float *restrict mc, const float *restrict rc,
                                   const float *restrict gr, const float *restrict ca,
                                   const float *restrict cb, int C) {
    if (mk->y) {
        const float *restrict y = mk->y;
        for (int c = 0; c < C; c++) {
            const float gv = g[c], d = y[c] > 0.0f ? gv : 0.0f;
            const float xh = (x[c] - mc[c]) * rc[c];
            o[c] = rc[c] * (gr[c] * d - ca[c] - xh * cb[c]);
        }
    } else if (mk->sc) {
        const float *restrict sc = mk->sc, *restrict bi = mk->bi;
        const float thr = mk->thr;
        for (int c = 0; c < C; c++) {
            const float v = x[c] * sc[c] + bi[c], d = v > thr ? g[c] : 0.0f;
            const float xh = (x[c] - mc[c]) * rc[c];
            o[c] = rc[c] * (gr[c] * d - ca[c] - xh * cb[c]);
        }
    } else {
        for (int c = 0; c < C; c++) {
            const float xh = (x[c] - mc[c]) * rc[c];
            o[c] = rc[c] * (gr[c] * g[c] - ca[c] - xh * cb[c]);
        }
    }
}

/* A GroupNorm backward whose ReLU output was not kept (nn_groupnorm_backward_x): the mask is
 * recomputed from x with gn_apply's per-channel scale and bias (same float expression, so the
 * same bits), and the output gradient is either given (dy) or made per voxel from the 1x1
 * convolution after the layer (dz (S, K) times wz (K, C), as nn_conv1_backward_relu_p sums it). */
typedef struct {
    const float *beta;         /* (C) */
    const float *scale, *bias; /* (C) of the sample */
    const float *dy;           /* (S, C), or NULL: from dz and wz */
    const float *dz, *wz;      /* (S, K); (K, C), bf16-rounded in bf16 */
    int K, bf16;
} gn_xsrc;

enum { GN_XCB = 256 }; /* channels per block of the per-voxel dy */

/* The ReLU mask of the x path: the forward's y > 0 as x * scale + bias > thr. y > 0: v > 0,
 * and in bf16 also bf16(v) > 0, i.e. v above 2^-134 (below it a positive v rounds to zero); as
 * one comparison, so that the loops vectorize (gn_x_dy ran scalar, 5x the time of the backward
 * pass given y). */
static inline gn_mask gn_x_mask(const gn_xsrc *s) {
    return (gn_mask){.sc = s->scale, .bi = s->bias, .thr = s->bf16 ? 0x1p-134f : 0.0f};
}

/* The masked output gradient of voxel p, channels [c0, c0 + nc), into d. */
static inline void gn_x_dy(float *restrict d, const gn_xsrc *s, const float *restrict x, long p,
                           int C, int c0, int nc) {
    const float *xv = x + (size_t)p * C + c0;
    if (s->dy)
        memcpy(d, s->dy + (size_t)p * C + c0, sizeof(float) * nc);
    else
        nn_conv1_dx_voxel(d, s->dz + (size_t)p * s->K, s->wz, C, s->K, c0, nc,
                          s->bf16 ? NN_BF16 : NN_FP32);
    const float thr = gn_x_mask(s).thr;
    const float *restrict sc = s->scale + c0, *restrict bi = s->bias + c0;
    for (int c = 0; c < nc; c++) {
        const float v = xv[c] * sc[c] + bi[c];
        d[c] = v > thr ? d[c] : 0.0f;
    }
}

/* gn_channel_sums' per-channel sums over voxels [b0, b1) into f1 (and f2), in voxel order. */
static NN_WIDE void gn_block_sums(float *restrict f1, float *restrict f2, const float *x1,
                                  const float *x2, const float *x3, const float *fshift, long b0,
                                  long b1, int C, int mode, const gn_xsrc *xs) {
    const gn_mask none = {0};
    if (mode == 3 && xs->dy) { /* dy given: the mask from x, in the same loop */
        const gn_mask mk = gn_x_mask(xs);
        for (long p = b0; p < b1; p++)
            gn_bwd_sums_voxel(f1, f2, x1 + p * C, xs->dy + p * C, &mk, fshift, fshift + C, C);
        return;
    }
    for (long p = b0; p < b1; p++) {
        const float *a = x1 + p * C;
        if (mode == 2) {
            const gn_mask mk = {.y = x3 ? x3 + p * C : NULL};
            gn_bwd_sums_voxel(f1, f2, a, x2 + p * C, &mk, fshift, fshift + C, C);
        } else {
            float d[GN_XCB];
            for (int c0 = 0; c0 < C; c0 += GN_XCB) {
                const int nc = C - c0 < GN_XCB ? C - c0 : GN_XCB;
                gn_x_dy(d, xs, x1, p, C, c0, nc);
                gn_bwd_sums_voxel(f1 + c0, f2 + c0, a + c0, d, &none, fshift + c0,
                                  fshift + C + c0, nc);
            }
        }
    }
}

/* The GroupNorm backward's per-channel sums over voxels [0,S) of sample n, in double. */
static void gn_channel_sums(double *out1, double *out2, const float *x1, const float *x2,
                            const float *x3, long S, int C, const double *shift, float *ws,
                            int mode, const gn_xsrc *xs) {
    /* mode 2: dy = x2 * (x3 > 0 or x3 NULL); xhat = (x1 - shift[c]) * shift[C+c];
     *         out1 = sum dy, out2 = sum dy * xhat.
     * mode 3: as mode 2 with dy from xs (gn_x_dy). */
    const int nth = nn_threads();
    double *dacc = (double *)ws; /* NN_SLICES * 2C doubles */
    float *facc = ws + (size_t)NN_SLICES * C * 4;
    /* The shifts as floats, converted once rather than per voxel (same values). */
    float *fshift = facc + (size_t)NN_MAX_THREADS * 3 * C;
    for (int c = 0; c < 2 * C; c++)
        fshift[c] = (float)shift[c];
    /* NN_SLICES fixed slices of voxels, taken dynamically (balanced when cores are shared); each
     * sums its blocks in order into its own slot, so the result is independent of the threads. */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth)
    for (int i = 0; i < NN_SLICES; i++) {
        const int sl = NN_SLICES - 1 - i; /* last first: see gn_channel_moments */
        double *d1 = dacc + (size_t)sl * 2 * C, *d2 = d1 + C;
        float *f1 = facc + (size_t)omp_get_thread_num() * 2 * C, *f2 = f1 + C;
        memset(d1, 0, sizeof(double) * 2 * C);
        const long lo = S * sl / NN_SLICES, hi = S * (sl + 1) / NN_SLICES;
        for (long b0 = lo; b0 < hi; b0 += GN_BLOCK) {
            const long b1 = b0 + GN_BLOCK < hi ? b0 + GN_BLOCK : hi;
            memset(f1, 0, sizeof(float) * 2 * C);
            gn_block_sums(f1, f2, x1, x2, x3, fshift, b0, b1, C, mode, xs);
            for (int c = 0; c < C; c++) {
                d1[c] += f1[c];
                d2[c] += f2[c];
            }
        }
    }
    for (int c = 0; c < C; c++) {
        double s1 = 0, s2 = 0;
        for (int t = 0; t < NN_SLICES; t++) {
            s1 += dacc[(size_t)t * 2 * C + c];
            s2 += dacc[(size_t)t * 2 * C + C + c];
        }
        out1[c] = s1;
        out2[c] = s2;
    }
}

/* One block of nb voxels from x (C channels): its channels' sums into f1, then around their
 * means (f1 / nb, kept in f1) the deviations' sums and squares into g1 and g2; the block is
 * read twice while it is in L1. */
static NN_WIDE void gn_block_moments(float *restrict f1, float *restrict g1, float *restrict g2,
                                     const float *x, long nb, int C) {
    for (int c = 0; c < C; c++)
        f1[c] = g1[c] = g2[c] = 0.0f;
    for (long p = 0; p < nb; p++) {
        const float *restrict a = x + p * C;
        for (int c = 0; c < C; c++)
            f1[c] += a[c];
    }
    const float inv = 1.0f / (float)nb;
    for (int c = 0; c < C; c++)
        f1[c] *= inv;
    for (long p = 0; p < nb; p++) {
        const float *restrict a = x + p * C;
        for (int c = 0; c < C; c++) {
            const float d = a[c] - f1[c];
            g1[c] += d;
            g2[c] += d * d;
        }
    }
}

/* (n, mean, m2) += a set of nb values with mean mb and sum of squared deviations m2b, per
 * channel (the pairwise update: exact in exact arithmetic, no cancellation). */
static void gn_merge(double *mean, double *m2, double n, const double *mb, const double *m2b,
                     double nb, int C) {
    const double t = n + nb, w = nb / t, cross = n * nb / t;
    for (int c = 0; c < C; c++) {
        const double d = mb[c] - mean[c];
        mean[c] += d * w;
        m2[c] += m2b[c] + d * d * cross;
    }
}

/* Per channel over voxels [0, S): sum[c] = S * its mean, m2[c] = the sum of squared deviations
 * from its mean; NN_SLICES fixed slices taken dynamically, each merging its blocks in order,
 * then the slices merged in order: the same bits whatever the threads. The slices are taken
 * last first (so are the backward's sums, gn_channel_sums): the pass that wrote x (a
 * convolution) went first to last, so its last lines are the ones still in cache, and the pass
 * after this one (gn_apply, the backward's dx) goes first to last again and finds the first
 * slices cached. A 64^3 x 64 fp32 tensor (64 MiB) is about twice the cache a core pair gets on
 * a Xeon with AMX (reads: 40 GB/s up to 32 MiB, 17-18 GB/s from 64 MiB); at 6 / 64 bf16 the
 * GroupNorm passes 99.6 -> 97.3 and 102.8 -> 98.6 ms a step. The same bits. */
static void gn_channel_moments(double *sum, double *m2, const float *x, long S, int C,
                               float *ws) {
    double *dacc = (double *)ws; /* per slice: mean (C), m2 (C) */
    float *facc = ws + (size_t)NN_SLICES * C * 4;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nn_threads())
    for (int i = 0; i < NN_SLICES; i++) {
        const int sl = NN_SLICES - 1 - i;
        double *mean_s = dacc + (size_t)sl * 2 * C, *m2_s = mean_s + C;
        float *f1 = facc + (size_t)omp_get_thread_num() * 3 * C, *g1 = f1 + C, *g2 = g1 + C;
        memset(mean_s, 0, sizeof(double) * 2 * C);
        const long lo = S * sl / NN_SLICES, hi = S * (sl + 1) / NN_SLICES;
        for (long b0 = lo; b0 < hi; b0 += GN_BLOCK) {
            const long nb = b0 + GN_BLOCK < hi ? GN_BLOCK : hi - b0;
            gn_block_moments(f1, g1, g2, x + b0 * C, nb, C);
            /* the block's own mean and m2 in double, merged as gn_merge does */
            const double n = (double)(b0 - lo), t = n + nb, w = nb / t, cross = n * nb / t;
            for (int c = 0; c < C; c++) {
                const double g = g1[c], mb = f1[c] + g / nb, d = mb - mean_s[c];
                mean_s[c] += d * w;
                m2_s[c] += (g2[c] - g * g / nb) + d * d * cross;
            }
        }
    }
    for (int c = 0; c < C; c++)
        sum[c] = m2[c] = 0.0;
    double n = 0;
    for (int sl = 0; sl < NN_SLICES; sl++) {
        const double ns = (double)(S * (sl + 1) / NN_SLICES - S * sl / NN_SLICES);
        if (ns == 0)
            continue;
        gn_merge(sum, m2, n, dacc + (size_t)sl * 2 * C, dacc + (size_t)sl * 2 * C + C, ns, C);
        n += ns;
    }
    for (int c = 0; c < C; c++)
        sum[c] *= (double)S; /* the mean, as the sum its group adds */
}

enum { GN_ROWS = 1024 }; /* voxels per work item of the per-voxel passes */

/* gn_apply over voxels [p0, p1). */
static NN_WIDE void gn_apply_rows(float *yn, const float *xn, const float *restrict scale,
                                  const float *restrict bias, long p0, long p1, int C, int relu) {
    for (long p = p0; p < p1; p++) {
        const float *restrict a = xn + p * C;
        float *restrict o = yn + p * C;
        if (relu & 1) {
            for (int c = 0; c < C; c++) {
                float v = a[c] * scale[c] + bias[c];
                o[c] = v > 0.0f ? v : 0.0f;
            }
        } else {
            for (int c = 0; c < C; c++)
                o[c] = a[c] * scale[c] + bias[c];
        }
        if (relu & NN_GN_RBF16)
            for (int c = 0; c < C; c++)
                o[c] = nn_bf16_round(o[c]);
    }
}

/* The per-channel scale = gamma*rstd and bias = beta - mean*scale of one sample into sb (2C
 * floats). */
static void gn_coeffs(float *sb, const float *mean, const float *rstd, const float *gamma,
                      const float *beta, int C, int G) {
    const int cg = C / G;
    for (int c = 0; c < C; c++) {
        const int g = c / cg;
        sb[c] = gamma[c] * rstd[g];
        sb[C + c] = beta[c] - mean[g] * sb[c];
    }
}

/* gn_apply_rows over voxels [p0, p1) in work items of GN_ROWS voxels. */
static void gn_apply_range(float *yn, const float *xn, const float *scale, const float *bias,
                           long p0, long p1, int C, int relu) {
#pragma omp parallel for schedule(dynamic, 1)
    for (long q = p0; q < p1; q += GN_ROWS)
        gn_apply_rows(yn, xn, scale, bias, q, q + GN_ROWS < p1 ? q + GN_ROWS : p1, C, relu);
}

/* y = x * scale[c] + bias[c] (then ReLU) for one sample, with scale = gamma*rstd and
 * bias = beta - mean*scale per channel (sb: 2C floats of scratch). */
static void gn_apply(float *yn, const float *xn, const float *mean, const float *rstd,
                     const float *gamma, const float *beta, long S, int C, int G, int relu,
                     float *sb) {
    gn_coeffs(sb, mean, rstd, gamma, beta, C, G);
    gn_apply_range(yn, xn, sb, sb + C, 0, S, C, relu);
}

static NN_WIDE void pool_voxel(float *restrict o, uint8_t *restrict ix, const float *const *src,
                               int C);
static size_t pool_input(int n, int z, int y, int x, int t, int D, int H, int W, int C);

/* gn_apply over a (D, H, W) sample, fused with the MaxPool3d(2) of its output (pool, idx: the
 * sample's): each item applies the two rows of two planes that one row of pool windows reads,
 * then pools them while they are in cache. A separate pool read the whole output back (at
 * scale 6 / base 64, 64 MiB from memory a sample). The planes, rows and columns past the last
 * window are applied alone. The same values and bits as gn_apply then nn_maxpool3d_forward. */
static void gn_apply_pool(float *yn, const float *xn, const float *mean, const float *rstd,
                          const float *gamma, const float *beta, int D, int H, int W, int C,
                          int G, int relu, float *sb, float *pool, uint8_t *idx) {
    gn_coeffs(sb, mean, rstd, gamma, beta, C, G);
    const float *scale = sb, *bias = sb + C;
    const int Do = D / 2, Ho = H / 2, Wo = W / 2;
#pragma omp parallel for collapse(2) schedule(dynamic, 2)
    for (int z = 0; z < Do; z++)
        for (int y = 0; y < Ho; y++) {
            for (int r = 0; r < 4; r++) {
                const long p0 = ((long)(2 * z + r / 2) * H + 2 * y + r % 2) * W;
                gn_apply_rows(yn, xn, scale, bias, p0, p0 + W, C, relu);
            }
            for (int x = 0; x < Wo; x++) {
                const size_t o = (((size_t)z * Ho + y) * Wo + x) * C;
                const float *src[8];
                for (int t = 0; t < 8; t++)
                    src[t] = yn + pool_input(0, z, y, x, t, D, H, W, C);
                pool_voxel(pool + o, idx + o, src, C);
            }
        }
    /* the rows in no window: an odd H's last row of the paired planes, an odd D's last plane */
    if (H % 2)
#pragma omp parallel for schedule(static)
        for (int z = 0; z < 2 * Do; z++) {
            const long p0 = ((long)z * H + H - 1) * W;
            gn_apply_rows(yn, xn, scale, bias, p0, p0 + W, C, relu);
        }
    if (D % 2)
        gn_apply_range(yn, xn, scale, bias, (long)(D - 1) * H * W, (long)D * H * W, C, relu);
}

void nn_groupnorm_forward(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                          const float *beta, int N, long S, int C, int G, int relu, float *ws) {
    nn_groupnorm_forward_sh(y, mean, rstd, x, gamma, beta, N, S, C, G, relu, ws, NULL);
}

/* Per-group sums of per-channel values into grp[0..G), grp[G] = voxels counted; summed over the
 * shards when the statistics are global. */
static void gn_group_sums(double *grp, const double *ch, long S, int C, int G,
                          const nn_shard *sh) {
    const int cg = C / G;
    for (int g = 0; g < G; g++) {
        double s = 0;
        for (int c = g * cg; c < (g + 1) * cg; c++)
            s += ch[c];
        grp[g] = s;
    }
    grp[G] = (double)S;
    if (sh && sh->gn_global) {
        prof_begin(PROF_GN_ALLREDUCE);
        sh->sum(sh->ctx, grp, G + 1);
        prof_end(PROF_GN_ALLREDUCE);
    }
}

/* The forward pass; with ext (D, H, W of S voxels) and pool, fused with the MaxPool3d(2) of y
 * (gn_apply_pool). */
static void gn_forward(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                       const float *beta, int N, long S, int C, int G, int relu, float *ws,
                       const nn_shard *sh, const int *ext, float *pool, uint8_t *idx) {
    const int cg = C / G;
    double *sums = gn_channel_area(ws, C);
    double *chm = sums + C;     /* per channel: its group's mean */
    double *grp = sums + 2 * C; /* G + 1 <= 2C doubles, free in the forward pass */
    /* per channel: the squared deviations from its mean, in the backward pass's per-group
     * sums (2C + 1 doubles after its 5C floats of coefficients; see gn_backward) */
    double *m2 = sums + 4 * C + (5 * C + 1) / 2 + 1;
    for (int n = 0; n < N; n++) {
        const float *xn = x + (size_t)n * S * C;
        gn_channel_moments(sums, m2, xn, S, C, ws);
        gn_group_sums(grp, sums, S, C, G, sh);
        const double cnt = grp[G] * cg;
        for (int c = 0; c < C; c++)
            chm[c] = grp[c / cg] / cnt;
        /* around the group's mean (over all shards when the statistics are global): the
         * channel's own deviations plus S times its mean's offset, squared */
        for (int c = 0; c < C; c++) {
            const double d = sums[c] / (double)S - chm[c];
            sums[c] = m2[c] + (double)S * d * d;
        }
        gn_group_sums(grp, sums, S, C, G, sh);
        for (int g = 0; g < G; g++) {
            const double var = grp[g] / cnt;
            mean[n * G + g] = (float)chm[g * cg];
            rstd[n * G + g] = (float)(1.0 / sqrt(var + NN_GN_EPS));
        }
        if (pool) {
            const size_t so = (size_t)n * (ext[0] / 2) * (ext[1] / 2) * (ext[2] / 2) * C;
            gn_apply_pool(y + (size_t)n * S * C, xn, mean + n * G, rstd + n * G, gamma, beta,
                          ext[0], ext[1], ext[2], C, G, relu, (float *)(sums + 4 * C), pool + so,
                          idx + so);
        } else {
            gn_apply(y + (size_t)n * S * C, xn, mean + n * G, rstd + n * G, gamma, beta, S, C, G,
                     relu, (float *)(sums + 4 * C));
        }
    }
}

void nn_groupnorm_forward_sh(float *y, float *mean, float *rstd, const float *x,
                             const float *gamma, const float *beta, int N, long S, int C, int G,
                             int relu, float *ws, const nn_shard *sh) {
    gn_forward(y, mean, rstd, x, gamma, beta, N, S, C, G, relu, ws, sh, NULL, NULL, NULL);
}

void nn_groupnorm_forward_pool(float *y, float *mean, float *rstd, const float *x,
                               const float *gamma, const float *beta, int N, int D, int H, int W,
                               int C, int G, int relu, float *ws, float *pool, uint8_t *idx) {
    const int ext[3] = {D, H, W};
    gn_forward(y, mean, rstd, x, gamma, beta, N, (long)D * H * W, C, G, relu, ws, NULL, ext, pool,
               idx);
}

void nn_groupnorm_apply(float *y, const float *x, const float *mean, const float *rstd,
                        const float *gamma, const float *beta, int N, long S, int C, int G,
                        int relu, float *ws) {
    for (int n = 0; n < N; n++)
        gn_apply(y + (size_t)n * S * C, x + (size_t)n * S * C, mean + n * G, rstd + n * G, gamma,
                 beta, S, C, G, relu, (float *)(gn_channel_area(ws, C) + 4 * C));
}

void nn_groupnorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy,
                           const float *x, const float *y, const float *mean, const float *rstd,
                           const float *gamma, int N, long S, int C, int G, int relu, float *ws) {
    nn_groupnorm_backward_sh(dx, dgamma, dbeta, dy, x, y, mean, rstd, gamma, N, S, C, G, relu, ws,
                             NULL);
}

static inline void gn_round_row(float *restrict v, int n) {
    for (int c = 0; c < n; c++)
        v[c] = nn_bf16_round(v[c]);
}

/* The GroupNorm backward's dx over voxels [p0, p1), given dy (and y for the ReLU mask). */
static NN_WIDE void gn_dx_rows(float *dxn, const float *xn, const float *dyn, const float *yn,
                               const float *mc, const float *rc, const float *gr,
                               const float *ca, const float *cb, long p0, long p1, int C,
                               int relu) {
    for (long p = p0; p < p1; p++) {
        const gn_mask mk = {.y = yn ? yn + p * C : NULL};
        gn_bwd_dx_voxel(dxn + p * C, xn + p * C, dyn + p * C, &mk, mc, rc, gr, ca, cb, C);
        if (relu & NN_GN_RBF16)
            gn_round_row(dxn + p * C, C);
    }
}

/* The same with the mask made from x (gn_x_mask) and dy given, or made per voxel (gn_x_dy);
 * dx may be x or dy: each value, or without dy each channel block read whole into scratch, is
 * read before its gradient is stored over it. rb: round dx to bf16. */
static NN_WIDE void gn_dx_x_rows(float *dxn, const float *xn, const gn_xsrc *xs, const float *mc,
                                 const float *rc, const float *gr, const float *ca,
                                 const float *cb, long p0, long p1, int C, int rb) {
    if (xs->dy) {
        const gn_mask mk = gn_x_mask(xs);
        for (long p = p0; p < p1; p++) {
            gn_bwd_dx_voxel(dxn + p * C, xn + p * C, xs->dy + p * C, &mk, mc, rc, gr, ca, cb,
                            C);
            if (rb)
                gn_round_row(dxn + p * C, C);
        }
        return;
    }
    const gn_mask none = {0};
    for (long p = p0; p < p1; p++) {
        float d[GN_XCB], o[GN_XCB];
        for (int c0 = 0; c0 < C; c0 += GN_XCB) {
            const int nc = C - c0 < GN_XCB ? C - c0 : GN_XCB;
            gn_x_dy(d, xs, xn, p, C, c0, nc);
            gn_bwd_dx_voxel(o, xn + p * C + c0, d, &none, mc + c0, rc + c0, gr + c0, ca + c0,
                            cb + c0, nc);
            if (rb)
                gn_round_row(o, nc);
            memcpy(dxn + p * C + c0, o, sizeof(float) * nc);
        }
    }
}

/* The GroupNorm backward of nn_groupnorm_backward_sh and, with xo (beta, dz, wz, K, bf16 set),
 * of nn_groupnorm_backward_x: then the mask comes from x and y is unused. */
static void gn_backward(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                        const float *y, const float *mean, const float *rstd, const float *gamma,
                        int N, long S, int C, int G, int relu, float *ws, const nn_shard *sh,
                        const gn_xsrc *xo) {
    const int cg = C / G;
    double *sums = gn_channel_area(ws, C);
    double *sums2 = sums + C, *shift = sums2 + C; /* shift: 2C (mean, rstd per channel) */
    float *xsb = ws + nn_groupnorm_ws_floats(C); /* x path: scale, bias (C each) */
    for (int n = 0; n < N; n++) {
        const float *xn = x + (size_t)n * S * C, *dyn = dy ? dy + (size_t)n * S * C : NULL;
        const float *yn = (relu & 1) && !xo ? y + (size_t)n * S * C : NULL;
        gn_xsrc xs;
        if (xo) {
            for (int c = 0; c < C; c++) { /* as gn_apply */
                const int g = c / cg;
                xsb[c] = gamma[c] * rstd[n * G + g];
                xsb[C + c] = xo->beta[c] - mean[n * G + g] * xsb[c];
            }
            xs = *xo;
            xs.scale = xsb, xs.bias = xsb + C, xs.dy = dyn;
            xs.dz = dyn ? NULL : xo->dz + (size_t)n * S * xo->K;
        }
        for (int c = 0; c < C; c++) {
            shift[c] = mean[n * G + c / cg];
            shift[C + c] = rstd[n * G + c / cg];
        }
        gn_channel_sums(sums, sums2, xn, dyn, yn, S, C, shift, ws, xo ? 3 : 2, xo ? &xs : NULL);
        /* The parameter gradients are this shard's share (the gradient all-reduce sums them). */
        for (int c = 0; c < C; c++) {
            dgamma[c] += (float)sums2[c];
            dbeta[c] += (float)sums[c];
        }
        /* Per group: a = mean(gamma*dy), b = mean(gamma*dy*xhat), over the whole volume when
         * the statistics are global. */
        float *ca = (float *)(sums + 4 * C), *cb = ca + C, *gr = cb + C;
        double *abp = sums + 4 * C + (5 * C + 1) / 2 + 1; /* after ca..rc: 2G + 1 doubles */
        for (int c = 0; c < C; c++)
            gr[c] = gamma[c];
        for (int g = 0; g < G; g++) {
            double a = 0, b = 0;
            for (int c = g * cg; c < (g + 1) * cg; c++) {
                a += gamma[c] * sums[c];
                b += gamma[c] * sums2[c];
            }
            abp[g] = a;
            abp[G + g] = b;
        }
        abp[2 * G] = (double)S;
        float *mc = gr + C, *rc = mc + C;
        for (int c = 0; c < C; c++) {
            mc[c] = (float)shift[c];
            rc[c] = (float)shift[C + c];
        }
        if (sh && sh->gn_global) {
            prof_begin(PROF_GN_ALLREDUCE);
            sh->sum(sh->ctx, abp, 2 * G + 1);
            prof_end(PROF_GN_ALLREDUCE);
        }
        const double cnt = abp[2 * G] * cg;
        for (int c = 0; c < C; c++) {
            ca[c] = (float)(abp[c / cg] / cnt);
            cb[c] = (float)(abp[G + c / cg] / cnt);
        }
        float *dxn = dx + (size_t)n * S * C;
        if (!xo) {
#pragma omp parallel for schedule(dynamic, 1)
            for (long p0 = 0; p0 < S; p0 += GN_ROWS)
                gn_dx_rows(dxn, xn, dyn, yn, mc, rc, gr, ca, cb, p0,
                           p0 + GN_ROWS < S ? p0 + GN_ROWS : S, C, relu);
            continue;
        }
        /* x path (gn_dx_x_rows): dx may be x or dy */
#pragma omp parallel for schedule(dynamic, 1)
        for (long p0 = 0; p0 < S; p0 += GN_ROWS)
            gn_dx_x_rows(dxn, xn, &xs, mc, rc, gr, ca, cb, p0,
                         p0 + GN_ROWS < S ? p0 + GN_ROWS : S, C, relu & NN_GN_RBF16);
    }
}

void nn_groupnorm_backward_sh(float *dx, float *dgamma, float *dbeta, const float *dy,
                              const float *x, const float *y, const float *mean,
                              const float *rstd, const float *gamma, int N, long S, int C, int G,
                              int relu, float *ws, const nn_shard *sh) {
    gn_backward(dx, dgamma, dbeta, dy, x, y, mean, rstd, gamma, N, S, C, G, relu, ws, sh, NULL);
}

size_t nn_groupnorm_x_ws_floats(int C, int K) {
    return nn_groupnorm_ws_floats(C) + (size_t)(2 + K) * C + 16;
}

void nn_groupnorm_backward_x(float *dx, float *dgamma, float *dbeta, const float *dy,
                             const float *dz, const float *wz, int K, const float *x,
                             const float *mean, const float *rstd, const float *gamma,
                             const float *beta, int N, long S, int C, int G, nn_prec prec,
                             float *ws, const nn_shard *sh) {
    gn_xsrc xo = {.beta = beta, .dz = dz, .K = K, .bf16 = prec == NN_BF16};
    if (!dy) { /* the weights as the 1x1 convolution used them */
        float *wr = ws + nn_groupnorm_ws_floats(C) + 2 * (size_t)C;
        for (size_t i = 0; i < (size_t)K * C; i++)
            wr[i] = xo.bf16 ? nn_bf16_round(wz[i]) : wz[i];
        xo.wz = wr;
    }
    gn_backward(dx, dgamma, dbeta, dy, x, NULL, mean, rstd, gamma, N, S, C, G,
                1 | (xo.bf16 ? NN_GN_RBF16 : 0), ws, sh, &xo);
}

void nn_relu_forward(float *y, const float *x, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void nn_relu_backward(float *dx, const float *dy, const float *y, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

/* Where input t (z, y, x bits 4, 2, 1) of output voxel (n, z, y, x)'s 2^3 window starts. */
static size_t pool_input(int n, int z, int y, int x, int t, int D, int H, int W, int C) {
    return ((((size_t)n * D + 2 * z + t / 4) * H + 2 * y + (t / 2) % 2) * W + 2 * x + t % 2) * C;
}

/* One output voxel's maxima over its 8 inputs and where each came from (the first maximum, NaN
 * winning, as PyTorch), the channels in vectors: as a scalar loop (branches per value) the pool
 * took 1.5% of a bf16 step at scale 5 / base 64, three times its memory traffic. */
static NN_WIDE void pool_voxel(float *restrict o, uint8_t *restrict ix, const float *const *src,
                               int C) {
    const float *s0 = src[0], *s1 = src[1], *s2 = src[2], *s3 = src[3], *s4 = src[4],
                *s5 = src[5], *s6 = src[6], *s7 = src[7];
#pragma omp simd
    for (int c = 0; c < C; c++) {
        const float v[8] = {s0[c], s1[c], s2[c], s3[c], s4[c], s5[c], s6[c], s7[c]};
        float m = v[0];
        int k = 0;
        for (int t = 1; t < 8; t++) {
            const int take = v[t] > m || (v[t] != v[t] && m == m);
            m = take ? v[t] : m;
            k = take ? t : k;
        }
        o[c] = m;
        ix[c] = (uint8_t)k;
    }
}

void nn_maxpool3d_forward(float *out, uint8_t *idx, const float *in, int N, int D, int H, int W,
                          int C) {
    const int Do = D / 2, Ho = H / 2, Wo = W / 2;
#pragma omp parallel for collapse(3) schedule(static)
    for (int n = 0; n < N; n++)
        for (int z = 0; z < Do; z++)
            for (int y = 0; y < Ho; y++)
                for (int x = 0; x < Wo; x++) {
                    const size_t o = ((((size_t)n * Do + z) * Ho + y) * Wo + x) * C;
                    const float *src[8];
                    for (int t = 0; t < 8; t++)
                        src[t] = in + pool_input(n, z, y, x, t, D, H, W, C);
                    pool_voxel(out + o, idx + o, src, C);
                }
}

/* The gradient of one output voxel added to the input each channel's maximum came from, in
 * vectors: each input's channels take it where the index names them (a blend, so the others
 * keep their bits, -0 included); rbf16: each sum rounded to bf16. */
static NN_WIDE void pool_back_voxel(float *const *dst, const float *restrict g,
                                    const uint8_t *restrict ix, int C, int rbf16) {
    for (int t = 0; t < 8; t++) {
        float *restrict d = dst[t];
        if (rbf16) {
#pragma omp simd
            for (int c = 0; c < C; c++)
                d[c] = ix[c] == t ? nn_bf16_round(d[c] + g[c]) : d[c];
        } else {
#pragma omp simd
            for (int c = 0; c < C; c++)
                d[c] = ix[c] == t ? d[c] + g[c] : d[c];
        }
    }
}

static void pool_backward(float *din, const float *dout, const uint8_t *idx, int N, int D, int H,
                          int W, int C, int rbf16) {
    const int Do = D / 2, Ho = H / 2, Wo = W / 2;
#pragma omp parallel for collapse(3) schedule(static)
    for (int n = 0; n < N; n++)
        for (int z = 0; z < Do; z++)
            for (int y = 0; y < Ho; y++)
                for (int x = 0; x < Wo; x++) {
                    const size_t o = ((((size_t)n * Do + z) * Ho + y) * Wo + x) * C;
                    float *dst[8];
                    for (int t = 0; t < 8; t++)
                        dst[t] = din + pool_input(n, z, y, x, t, D, H, W, C);
                    pool_back_voxel(dst, dout + o, idx + o, C, rbf16);
                }
}

void nn_maxpool3d_backward(float *din, const float *dout, const uint8_t *idx, int N, int D, int H,
                           int W, int C) {
    pool_backward(din, dout, idx, N, D, H, W, C, 0);
}

void nn_maxpool3d_backward_rbf16(float *din, const float *dout, const uint8_t *idx, int N, int D,
                                 int H, int W, int C) {
    pool_backward(din, dout, idx, N, D, H, W, C, 1);
}

void nn_concat_forward(float *out, const float *a, int ca, const float *b, int cb, long P) {
#pragma omp parallel for schedule(static)
    for (long p = 0; p < P; p++) {
        memcpy(out + p * (ca + cb), a + p * ca, sizeof(float) * ca);
        memcpy(out + p * (ca + cb) + ca, b + p * cb, sizeof(float) * cb);
    }
}

void nn_concat_backward(float *da, float *db, const float *dout, int ca, int cb, long P) {
#pragma omp parallel for schedule(static)
    for (long p = 0; p < P; p++) {
        if (da)
            memcpy(da + p * ca, dout + p * (ca + cb), sizeof(float) * ca);
        if (db)
            memcpy(db + p * cb, dout + p * (ca + cb) + ca, sizeof(float) * cb);
    }
}

void nn_log_softmax_forward(float *y, const float *x, long P, int C) {
#pragma omp parallel for schedule(static)
    for (long p = 0; p < P; p++) {
        const float *a = x + p * C;
        float m = -INFINITY;
        for (int c = 0; c < C; c++)
            m = a[c] > m ? a[c] : m;
        double s = 0;
        for (int c = 0; c < C; c++)
            s += exp((double)(a[c] - m));
        const float lse = m + (float)log(s);
        for (int c = 0; c < C; c++)
            y[p * C + c] = a[c] - lse;
    }
}

void nn_log_softmax_backward(float *dx, const float *dy, const float *y, long P, int C) {
#pragma omp parallel for schedule(static)
    for (long p = 0; p < P; p++) {
        double s = 0;
        for (int c = 0; c < C; c++)
            s += dy[p * C + c];
        for (int c = 0; c < C; c++)
            dx[p * C + c] = dy[p * C + c] - expf(y[p * C + c]) * (float)s;
    }
}

void nn_to_channels_last(float *dst, const float *src, int N, int C, long S) {
    for (int n = 0; n < N; n++) {
        const float *s = src + (size_t)n * C * S;
        float *d = dst + (size_t)n * C * S;
#pragma omp parallel for schedule(static)
        for (long p = 0; p < S; p++)
            for (int c = 0; c < C; c++)
                d[p * C + c] = s[(size_t)c * S + p];
    }
}

void nn_to_channels_first(float *dst, const float *src, int N, int C, long S) {
    for (int n = 0; n < N; n++) {
        const float *s = src + (size_t)n * C * S;
        float *d = dst + (size_t)n * C * S;
#pragma omp parallel for schedule(static)
        for (long p = 0; p < S; p++)
            for (int c = 0; c < C; c++)
                d[(size_t)c * S + p] = s[p * C + c];
    }
}
