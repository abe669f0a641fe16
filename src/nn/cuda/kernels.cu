/* kernels: the CUDA backend's own layer kernels (see kern.h): gather/concatenate/convert,
 * weight packing, bf16 storage, per-channel reductions, GroupNorm (+ ReLU) forward and backward, ReLU,
 * MaxPool3d(2) with argmax, layout conversion.
 *
 * Written as plain CUDA C (no templates or classes): one thread per output element with
 * grid-stride loops, and reductions as fixed per-slice partial sums in double combined in a fixed
 * order, never with floating-point atomics, so results repeat bit for bit. The arithmetic of each
 * element follows the CPU code in src/nn/layers.c line by line. */
#include "nn/cuda/kern.h"

#include <cuda_bf16.h>

#define T CUK_THREADS

static __device__ float bf16_round(float v) {
    return __bfloat162float(__float2bfloat16_rn(v));
}

/* ---- gather / convert ---------------------------------------------------------------------- */

static __global__ void k_gather(void *dst, int dst_bf16, const float *a, long long lda, int ca,
                                const float *b, long long ldb, int cb, long long P) {
    const int cc = ca + cb;
    GRID_LOOP(i, P * cc) {
        const long long p = i / cc;
        const int c = (int)(i - p * cc);
        const float v = c < ca ? a[p * lda + c] : b[p * ldb + (c - ca)];
        if (dst_bf16)
            ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(v);
        else
            ((float *)dst)[i] = v;
    }
}

extern "C" cudaError_t cuk_gather(cudaStream_t st, void *dst, int dst_bf16, const float *a,
                                  long long lda, int ca, const float *b, long long ldb, int cb,
                                  long long P) {
    k_gather<<<cuk_grid(P * (ca + cb)), T, 0, st>>>(dst, dst_bf16, a, lda, ca, b, ldb, cb, P);
    return cudaGetLastError();
}

static __global__ void k_convert(float *dst, const void *src, int src_bf16, const float *bias,
                                 int C, long long n, int accumulate, int round_bf16) {
    GRID_LOOP(i, n) {
        float v = src_bf16 ? __bfloat162float(((const __nv_bfloat16 *)src)[i])
                           : ((const float *)src)[i];
        if (bias)
            v += round_bf16 ? bf16_round(bias[i % C]) : bias[i % C];
        if (round_bf16)
            v = bf16_round(v);
        dst[i] = accumulate ? dst[i] + v : v;
    }
}

extern "C" cudaError_t cuk_convert(cudaStream_t st, float *dst, const void *src, int src_bf16,
                                   const float *bias, int C, long long n, int accumulate,
                                   int round_bf16) {
    k_convert<<<cuk_grid(n), T, 0, st>>>(dst, src, src_bf16, bias, C, n, accumulate, round_bf16);
    return cudaGetLastError();
}

static __global__ void k_split(float *da, int ca, float *db, int cb, const void *src,
                               int src_bf16, long long P) {
    const int cc = ca + cb;
    GRID_LOOP(i, P * cc) {
        const long long p = i / cc;
        const int c = (int)(i - p * cc);
        const float v = src_bf16 ? __bfloat162float(((const __nv_bfloat16 *)src)[i])
                                 : ((const float *)src)[i];
        if (c < ca) {
            if (da)
                da[p * ca + c] = v;
        } else if (db) {
            db[p * cb + (c - ca)] = v;
        }
    }
}

extern "C" cudaError_t cuk_split(cudaStream_t st, float *da, int ca, float *db, int cb,
                                 const void *src, int src_bf16, long long P) {
    k_split<<<cuk_grid(P * (ca + cb)), T, 0, st>>>(da, ca, db, cb, src, src_bf16, P);
    return cudaGetLastError();
}

/* ---- weight packing ------------------------------------------------------------------------ */

static __global__ void k_pack(void *dst, int bf16, const float *src, int K, int C, int S,
                              int ctot) {
    const long long n = (long long)K * C * S;
    GRID_LOOP(i, n) { /* i indexes dst (K, S, C) */
        const int c = (int)(i % C);
        const long long ks = i / C;
        const int s = (int)(ks % S), k = (int)(ks / S);
        const float v = src[((long long)k * ctot + c) * S + s];
        if (bf16)
            ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(v);
        else
            ((float *)dst)[i] = v;
    }
}

extern "C" cudaError_t cuk_pack(cudaStream_t st, void *dst, int bf16, const float *src, int K,
                                int C, int S, int ctot) {
    k_pack<<<cuk_grid((long long)K * C * S), T, 0, st>>>(dst, bf16, src, K, C, S, ctot);
    return cudaGetLastError();
}

static __global__ void k_unpack_add(float *dst, const void *src, int bf16, int K, int C, int S,
                                    int ctot) {
    const long long n = (long long)K * C * S;
    GRID_LOOP(i, n) { /* i indexes the (K, C, S) part of dst, whose rows hold ctot channels */
        const int s = (int)(i % S);
        const long long kc = i / S;
        const int c = (int)(kc % C), k = (int)(kc / C);
        const long long j = ((long long)k * S + s) * C + c;
        dst[((long long)k * ctot + c) * S + s] +=
            bf16 ? __bfloat162float(((const __nv_bfloat16 *)src)[j]) : ((const float *)src)[j];
    }
}

extern "C" cudaError_t cuk_unpack_add(cudaStream_t st, float *dst, const void *src, int bf16,
                                      int K, int C, int S, int ctot) {
    k_unpack_add<<<cuk_grid((long long)K * C * S), T, 0, st>>>(dst, src, bf16, K, C, S, ctot);
    return cudaGetLastError();
}

/* ---- bf16 storage ---------------------------------------------------------------------------- */

/* The upper half of each float (nn_bf16_narrow: exact for values that are bf16 already). */
static __global__ void k_narrow(uint16_t *dst, const float *src, long long n) {
    GRID_LOOP(i, n) dst[i] = (uint16_t)(__float_as_uint(src[i]) >> 16);
}

extern "C" cudaError_t cuk_bf16_narrow(cudaStream_t st, uint16_t *dst, const float *src,
                                       long long n) {
    k_narrow<<<cuk_grid(n), T, 0, st>>>(dst, src, n);
    return cudaGetLastError();
}

static __global__ void k_widen(float *dst, const uint16_t *src, long long n) {
    GRID_LOOP(i, n) dst[i] = __uint_as_float((unsigned)src[i] << 16);
}

extern "C" cudaError_t cuk_bf16_widen(cudaStream_t st, float *dst, const uint16_t *src,
                                      long long n) {
    k_widen<<<cuk_grid(n), T, 0, st>>>(dst, src, n);
    return cudaGetLastError();
}

/* ---- per-channel sums ------------------------------------------------------------------------
 * Block (slice sl, sample n) covers voxels [S*sl/slices, S*(sl+1)/slices) of sample n. With
 * C < T, thread t handles channel t % C for every (T/C)-th voxel (consecutive threads read
 * consecutive channels: coalesced), and the lanes are added in lane order; with C >= T, thread t
 * handles channels t, t+T, ... for every voxel. */
static __global__ void k_chan_partial(double *part, int mode, const float *x, long long ldx,
                                      const float *x2, const float *x3, const uint16_t *lab,
                                      const float *mean, const float *rstd, int G, long long S,
                                      int C, int slices) {
    __shared__ double sh[3][T];
    const int n = blockIdx.y, sl = blockIdx.x, t = threadIdx.x;
    const long long lo = S * sl / slices, hi = S * (sl + 1) / slices;
    const int wide = C >= T;
    const int lanes = wide ? 1 : T / C;
    const int cg = G > 0 ? C / G : 1;
    for (int c0 = 0; c0 < C; c0 += wide ? T : C) {
        const int c = wide ? c0 + t : t % C;
        const int lane = wide ? 0 : t / C;
        double a0 = 0, a1 = 0, a2 = 0;
        if (c < C && lane < lanes) {
            const float mu = mode == CUK_SUM_SQDEV || mode == CUK_SUM_GN_BWD
                                 ? mean[n * G + c / cg] : 0.0f;
            const float rs = mode == CUK_SUM_GN_BWD ? rstd[n * G + c / cg] : 0.0f;
            for (long long p = lo + lane; p < hi; p += lanes) {
                const long long r = (long long)n * S + p;
                const float v = x[r * ldx + c];
                if (mode == CUK_SUM) {
                    a0 += v;
                } else if (mode == CUK_SUM_SQDEV) {
                    const float d = v - mu;
                    a0 += d * d;
                } else if (mode == CUK_SUM_GN_BWD) {
                    const float dy = (x3 && !(x3[r * C + c] > 0.0f)) ? 0.0f : x2[r * C + c];
                    const float xh = (v - mu) * rs;
                    a0 += dy;
                    a1 += dy * xh;
                } else {
                    a0 += v;
                    if (lab[r] == c) {
                        a1 += v;
                        a2 += 1.0;
                    }
                }
            }
        }
        sh[0][t] = a0;
        sh[1][t] = a1;
        sh[2][t] = a2;
        __syncthreads();
        const int nc = wide ? (C - c0 < T ? C - c0 : T) : C;
        if (t < nc) {
            for (int j = 0; j < 3; j++) {
                double s = 0;
                for (int l = 0; l < lanes; l++)
                    s += sh[j][l * (wide ? 0 : C) + t];
                part[(((long long)n * slices + sl) * 3 + j) * C + c0 + t] = s;
            }
        }
        __syncthreads();
    }
}

static __global__ void k_chan_reduce(double *sums, const double *part, int N, int slices, int C) {
    GRID_LOOP(i, (long long)N * 3 * C) {
        const int c = (int)(i % C);
        const long long nj = i / C;
        const int j = (int)(nj % 3), n = (int)(nj / 3);
        double s = 0;
        for (int sl = 0; sl < slices; sl++)
            s += part[(((long long)n * slices + sl) * 3 + j) * C + c];
        sums[i] = s;
    }
}

extern "C" cudaError_t cuk_chan_sums(cudaStream_t st, double *sums, double *part, int mode,
                                     const float *x, long long ldx, const float *x2,
                                     const float *x3, const uint16_t *lab, const float *mean,
                                     const float *rstd, int G, int N, long long S, int C,
                                     int slices) {
    dim3 grid((unsigned)slices, (unsigned)N);
    k_chan_partial<<<grid, T, 0, st>>>(part, mode, x, ldx, x2, x3, lab, mean, rstd, G, S, C,
                                       slices);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    k_chan_reduce<<<cuk_grid((long long)N * 3 * C), T, 0, st>>>(sums, part, N, slices, C);
    return cudaGetLastError();
}

static __global__ void k_add_sums(float *dst, const double *sums, int C, int round_bf16) {
    GRID_LOOP(c, C) {
        const float v = (float)sums[c];
        dst[c] += round_bf16 ? bf16_round(v) : v;
    }
}

extern "C" cudaError_t cuk_add_sums(cudaStream_t st, float *dst, const double *sums, int C,
                                    int round_bf16) {
    k_add_sums<<<cuk_grid(C), T, 0, st>>>(dst, sums, C, round_bf16);
    return cudaGetLastError();
}

/* ---- GroupNorm ------------------------------------------------------------------------------ */

static __global__ void k_gn_stats(float *mean, float *rstd, const double *sums, int N,
                                  long long S, int C, int G, int pass) {
    const int cg = C / G;
    GRID_LOOP(i, (long long)N * G) {
        const int n = (int)(i / G), g = (int)(i % G);
        double s = 0;
        for (int c = g * cg; c < (g + 1) * cg; c++)
            s += sums[(long long)n * 3 * C + c];
        const double cnt = (double)S * cg;
        if (pass == 0)
            mean[i] = (float)(s / cnt);
        else
            rstd[i] = (float)(1.0 / sqrt(s / cnt + 1e-5));
    }
}

extern "C" cudaError_t cuk_gn_stats(cudaStream_t st, float *mean, float *rstd,
                                    const double *sums, int N, long long S, int C, int G,
                                    int pass) {
    k_gn_stats<<<cuk_grid((long long)N * G), T, 0, st>>>(mean, rstd, sums, N, S, C, G, pass);
    return cudaGetLastError();
}

static __global__ void k_gn_apply(float *y, const float *x, const float *mean, const float *rstd,
                                  const float *gamma, const float *beta, int N, long long S,
                                  int C, int G, int relu) {
    const int cg = C / G;
    GRID_LOOP(i, (long long)N * S * C) {
        const int c = (int)(i % C);
        const int ng = (int)(i / (S * C)) * G + c / cg;
        const float scale = gamma[c] * rstd[ng];
        const float bias = beta[c] - mean[ng] * scale;
        const float v = x[i] * scale + bias;
        y[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
    }
}

extern "C" cudaError_t cuk_gn_apply(cudaStream_t st, float *y, const float *x, const float *mean,
                                    const float *rstd, const float *gamma, const float *beta,
                                    int N, long long S, int C, int G, int relu) {
    k_gn_apply<<<cuk_grid((long long)N * S * C), T, 0, st>>>(y, x, mean, rstd, gamma, beta, N, S,
                                                            C, G, relu);
    return cudaGetLastError();
}

/* Per (n, g): coef = (mean over the group of gamma*dy, mean of gamma*dy*xhat). */
static __global__ void k_gn_bwd_coef(float *coef, const double *sums, const float *gamma, int N,
                                     long long S, int C, int G) {
    const int cg = C / G;
    GRID_LOOP(i, (long long)N * G) {
        const int n = (int)(i / G), g = (int)(i % G);
        const double *s0 = sums + (long long)n * 3 * C, *s1 = s0 + C;
        double a = 0, b = 0;
        for (int c = g * cg; c < (g + 1) * cg; c++) {
            a += gamma[c] * s0[c];
            b += gamma[c] * s1[c];
        }
        const double cnt = (double)S * cg;
        coef[2 * i] = (float)(a / cnt);
        coef[2 * i + 1] = (float)(b / cnt);
    }
}

/* dgamma, dbeta accumulate sample by sample, in sample order (as the CPU). */
static __global__ void k_gn_affine_grad(float *dgamma, float *dbeta, const double *sums, int N,
                                        int C) {
    GRID_LOOP(c, C) {
        for (int n = 0; n < N; n++) {
            dgamma[c] += (float)sums[((long long)n * 3 + 1) * C + c];
            dbeta[c] += (float)sums[(long long)n * 3 * C + c];
        }
    }
}

static __global__ void k_gn_dx(float *dx, const float *dy, const float *x, const float *y,
                               const float *mean, const float *rstd, const float *gamma,
                               const float *coef, int N, long long S, int C, int G, int relu) {
    const int cg = C / G;
    GRID_LOOP(i, (long long)N * S * C) {
        const int c = (int)(i % C);
        const int ng = (int)(i / (S * C)) * G + c / cg;
        const float d = (relu && !(y[i] > 0.0f)) ? 0.0f : dy[i];
        const float r = rstd[ng];
        const float xh = (x[i] - mean[ng]) * r;
        dx[i] = r * (gamma[c] * d - coef[2 * ng] - xh * coef[2 * ng + 1]);
    }
}

extern "C" cudaError_t cuk_gn_backward(cudaStream_t st, float *dx, float *dgamma, float *dbeta,
                                       const float *dy, const float *x, const float *y,
                                       const float *mean, const float *rstd, const float *gamma,
                                       const double *sums, float *coef, int N, long long S,
                                       int C, int G, int relu) {
    k_gn_bwd_coef<<<cuk_grid((long long)N * G), T, 0, st>>>(coef, sums, gamma, N, S, C, G);
    k_gn_affine_grad<<<cuk_grid(C), T, 0, st>>>(dgamma, dbeta, sums, N, C);
    k_gn_dx<<<cuk_grid((long long)N * S * C), T, 0, st>>>(dx, dy, x, y, mean, rstd, gamma, coef,
                                                         N, S, C, G, relu);
    return cudaGetLastError();
}

/* ---- ReLU, MaxPool, layout ---------------------------------------------------------------- */

static __global__ void k_relu(float *y, const float *x, long long n) {
    GRID_LOOP(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

extern "C" cudaError_t cuk_relu(cudaStream_t st, float *y, const float *x, long long n) {
    k_relu<<<cuk_grid(n), T, 0, st>>>(y, x, n);
    return cudaGetLastError();
}

static __global__ void k_relu_backward(float *dx, const float *dy, const float *y, long long n) {
    GRID_LOOP(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

extern "C" cudaError_t cuk_relu_backward(cudaStream_t st, float *dx, const float *dy,
                                         const float *y, long long n) {
    k_relu_backward<<<cuk_grid(n), T, 0, st>>>(dx, dy, y, n);
    return cudaGetLastError();
}

/* Input offset of window element t (dz, dy, dx = t/4, (t/2)%2, t%2) of output voxel o. */
static __device__ long long pool_src(int n, int z, int y, int x, int t, int D, int H, int W,
                                     int C) {
    return ((((long long)n * D + 2 * z + t / 4) * H + 2 * y + (t / 2) % 2) * W + 2 * x + t % 2) *
           C;
}

/* Coordinates of output element i of a (N, D/2, H/2, W/2, C) pooling output. */
typedef struct pool_at {
    int n, z, y, x, c;
} pool_at;
static __device__ pool_at pool_coords(long long i, int D, int H, int W, int C) {
    pool_at a;
    a.c = (int)(i % C);
    long long r = i / C;
    a.x = (int)(r % (W / 2));
    r /= W / 2;
    a.y = (int)(r % (H / 2));
    r /= H / 2;
    a.z = (int)(r % (D / 2));
    a.n = (int)(r / (D / 2));
    return a;
}

static __global__ void k_maxpool(float *out, uint8_t *idx, const float *in, int N, int D, int H,
                                 int W, int C) {
    GRID_LOOP(i, (long long)N * (D / 2) * (H / 2) * (W / 2) * C) {
        const pool_at a = pool_coords(i, D, H, W, C);
        const int n = a.n, z = a.z, y = a.y, x = a.x, c = a.c;
        float m = in[pool_src(n, z, y, x, 0, D, H, W, C) + c];
        int k = 0;
        for (int t = 1; t < 8; t++) {
            /* PyTorch keeps the first maximum and lets NaN win. */
            const float v = in[pool_src(n, z, y, x, t, D, H, W, C) + c];
            if (v > m || (isnan(v) && !isnan(m))) {
                m = v;
                k = t;
            }
        }
        out[i] = m;
        idx[i] = (uint8_t)k;
    }
}

extern "C" cudaError_t cuk_maxpool(cudaStream_t st, float *out, uint8_t *idx, const float *in,
                                   int N, int D, int H, int W, int C) {
    const long long n = (long long)N * (D / 2) * (H / 2) * (W / 2) * C;
    k_maxpool<<<cuk_grid(n), T, 0, st>>>(out, idx, in, N, D, H, W, C);
    return cudaGetLastError();
}

/* Each output's gradient goes to one input of its own 2x2x2 window: windows do not overlap, so
 * the accumulation has no races. */
static __global__ void k_maxpool_backward(float *din, const float *dout, const uint8_t *idx,
                                          int N, int D, int H, int W, int C) {
    GRID_LOOP(i, (long long)N * (D / 2) * (H / 2) * (W / 2) * C) {
        const pool_at a = pool_coords(i, D, H, W, C);
        din[pool_src(a.n, a.z, a.y, a.x, idx[i], D, H, W, C) + a.c] += dout[i];
    }
}

extern "C" cudaError_t cuk_maxpool_backward(cudaStream_t st, float *din, const float *dout,
                                            const uint8_t *idx, int N, int D, int H, int W,
                                            int C) {
    const long long n = (long long)N * (D / 2) * (H / 2) * (W / 2) * C;
    k_maxpool_backward<<<cuk_grid(n), T, 0, st>>>(din, dout, idx, N, D, H, W, C);
    return cudaGetLastError();
}

static __global__ void k_layout(float *dst, const float *src, int N, int C, long long S,
                                int to_last) {
    GRID_LOOP(i, (long long)N * C * S) { /* i indexes the channels-last tensor */
        const int c = (int)(i % C);
        const long long np = i / C;
        const long long p = np % S, n = np / S;
        const long long j = (n * C + c) * S + p;
        if (to_last)
            dst[i] = src[j];
        else
            dst[j] = src[i];
    }
}

extern "C" cudaError_t cuk_layout(cudaStream_t st, float *dst, const float *src, int N, int C,
                                  long long S, int to_last) {
    k_layout<<<cuk_grid((long long)N * C * S), T, 0, st>>>(dst, src, N, C, S, to_last);
    return cudaGetLastError();
}
