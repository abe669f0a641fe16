/* loss: the CUDA backend's kernels for the ScaFFold loss (softmax, weighted CE, soft Dice and
 * the gradient), the hard Dice counts, argmax, the fused optimizer updates and the gradient
 * norm (see kern.h). The formulas and the order of float operations per element follow
 * src/nn/loss.c and src/nn/optim.c; sums are per-block partials in double, combined in block
 * order by one thread, so results repeat bit for bit. */
#include "nn/cuda/kern.h"

#define T CUK_THREADS
#define NB CUK_RED_BLOCKS

/* Tree sum of sh[0..T) into sh[0] (fixed pairing: deterministic). All threads must call it. */
static __device__ void block_sum(double *sh) {
    for (int s = T / 2; s > 0; s /= 2) {
        __syncthreads();
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
    }
    __syncthreads();
}

static __global__ void k_softmax_ce(float *p, double *ce, int *bad, const float *z,
                                    const uint16_t *lab, const float *w, long long P, int K) {
    __shared__ double sn[T], sd[T];
    __shared__ int sb[T];
    double num = 0, den = 0;
    int worst = -1;
    GRID_LOOP(v, P) {
        const float *zv = z + v * K;
        const int y = lab[v];
        if (y >= K) {
            worst = y > worst ? y : worst;
            continue;
        }
        float m = zv[0];
        for (int c = 1; c < K; c++)
            m = zv[c] > m ? zv[c] : m;
        double s = 0;
        for (int c = 0; c < K; c++)
            s += exp((double)(zv[c] - m));
        const double lse = m + log(s);
        for (int c = 0; c < K; c++)
            p[v * K + c] = (float)exp((double)zv[c] - lse);
        num += w[y] * -((double)zv[y] - lse);
        den += w[y];
    }
    const int t = threadIdx.x;
    sn[t] = num;
    sd[t] = den;
    sb[t] = worst;
    block_sum(sn);
    block_sum(sd);
    for (int s = T / 2; s > 0; s /= 2) {
        if (t < s && sb[t + s] > sb[t])
            sb[t] = sb[t + s];
        __syncthreads();
    }
    if (t == 0) {
        ce[2 * blockIdx.x] = sn[0];
        ce[2 * blockIdx.x + 1] = sd[0];
        bad[blockIdx.x] = sb[0];
    }
}

extern "C" cudaError_t cuk_softmax_ce(cudaStream_t st, float *p, double *ce, int *bad,
                                      const float *z, const uint16_t *lab, const float *w,
                                      long long P, int K) {
    k_softmax_ce<<<NB, T, 0, st>>>(p, ce, bad, z, lab, w, P, K);
    return cudaGetLastError();
}

static __global__ void k_loss_finalize(double *res, double *coef, const double *ce,
                                       const int *bad, const double *sums, int N, int K) {
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    double num = 0, den = 0;
    int worst = -1;
    for (int b = 0; b < NB; b++) {
        num += ce[2 * b];
        den += ce[2 * b + 1];
        worst = bad[b] > worst ? bad[b] : worst;
    }
    const double cev = num / (den > 1e-12 ? den : 1e-12);
    const double scale = K > 1 ? 1.0 / ((double)N * (K - 1)) : 0.0;
    const double eps = 1e-6; /* NN_DICE_EPS */
    double dsum = 0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < K; c++) {
            const double *s = sums + (long long)n * 3 * K; /* sum p, sum p*t, sum t */
            const double I = 2 * s[K + c];
            double Ssum = s[c] + s[2 * K + c];
            const int degenerate = Ssum == 0;
            if (degenerate)
                Ssum = I;
            const double d = (I + eps) / (Ssum + eps);
            if (c >= 1)
                dsum += d;
            double alpha = 0, beta = 0;
            if (c >= 1 && !degenerate) {
                alpha = -scale * 2.0 / (Ssum + eps);
                beta = scale * (I + eps) / ((Ssum + eps) * (Ssum + eps));
            }
            coef[2 * (n * K + c)] = alpha;
            coef[2 * (n * K + c) + 1] = beta;
        }
    const double dice = K > 1 ? dsum * scale : 1.0;
    res[0] = cev + (1.0 - dice);
    res[1] = cev;
    res[2] = dice;
    res[3] = 1.0 / (den > 1e-12 ? den : 1e-12);
    res[4] = worst;
}

extern "C" cudaError_t cuk_loss_finalize(cudaStream_t st, double *res, double *coef,
                                         const double *ce, const int *bad, const double *sums,
                                         int N, int K) {
    k_loss_finalize<<<1, 1, 0, st>>>(res, coef, ce, bad, sums, N, K);
    return cudaGetLastError();
}

/* dloss/dlogits = g - p * sum_c g, g = dloss/dlp (loss.c). Two passes over the classes instead of
 * the CPU's array: the second recomputes each g exactly as the first. */
static __global__ void k_loss_grad(float *dl, const uint16_t *lab, const float *w,
                                   const double *coef, const double *res, int N, long long S,
                                   int K) {
    const double inv_den = res[3];
    GRID_LOOP(v, (long long)N * S) {
        const int n = (int)(v / S);
        float *pv = dl + v * K;
        const int y = lab[v];
        double gs = 0;
        for (int c = 0; c < K; c++) {
            const double *cf = coef + 2 * (n * K + c);
            double gv = (cf[0] * (c == y) + cf[1]) * pv[c];
            if (c == y)
                gv -= w[y] * inv_den;
            gs += gv;
        }
        for (int c = 0; c < K; c++) {
            const double *cf = coef + 2 * (n * K + c);
            double gv = (cf[0] * (c == y) + cf[1]) * pv[c];
            if (c == y)
                gv -= w[y] * inv_den;
            pv[c] = (float)gv - pv[c] * (float)gs;
        }
    }
}

extern "C" cudaError_t cuk_loss_grad(cudaStream_t st, float *dl, const uint16_t *lab,
                                     const float *w, const double *coef, const double *res, int N,
                                     long long S, int K) {
    k_loss_grad<<<cuk_grid((long long)N * S), T, 0, st>>>(dl, lab, w, coef, res, N, S, K);
    return cudaGetLastError();
}

static __device__ int argmax_of(const float *zv, int K) {
    int best = 0;
    for (int c = 1; c < K; c++)
        if (zv[c] > zv[best] || (isnan(zv[c]) && !isnan(zv[best])))
            best = c;
    return best;
}

/* Grid (blocks, N): the counts of sample n in shared memory (integer atomics are exact), then
 * added to the global counts. */
static __global__ void k_dice_counts(unsigned long long *cnt, int *bad, const float *z,
                                     const uint16_t *lab, long long S, int K) {
    extern __shared__ unsigned int sc[]; /* 3K */
    const int n = blockIdx.y;
    for (int i = threadIdx.x; i < 3 * K; i += T)
        sc[i] = 0;
    __syncthreads();
    int worst = -1;
    for (long long v = (long long)blockIdx.x * T + threadIdx.x; v < S;
         v += (long long)gridDim.x * T) {
        const long long r = (long long)n * S + v;
        const int y = lab[r];
        if (y >= K) {
            worst = y > worst ? y : worst;
            continue;
        }
        const int best = argmax_of(z + r * K, K);
        atomicAdd(&sc[best], 1u);
        atomicAdd(&sc[K + y], 1u);
        if (best == y)
            atomicAdd(&sc[2 * K + y], 1u);
    }
    if (worst >= 0)
        atomicMax(bad, worst);
    __syncthreads();
    for (int i = threadIdx.x; i < 3 * K; i += T)
        if (sc[i])
            atomicAdd(&cnt[(long long)n * 3 * K + i], (unsigned long long)sc[i]);
}

extern "C" cudaError_t cuk_dice_counts(cudaStream_t st, unsigned long long *cnt, int *bad,
                                       const float *z, const uint16_t *lab, int N, long long S,
                                       int K) {
    long long b = (S + T - 1) / T;
    dim3 grid((unsigned)(b < 1 ? 1 : b > 4096 ? 4096 : b), (unsigned)N);
    k_dice_counts<<<grid, T, 3 * K * sizeof(unsigned int), st>>>(cnt, bad, z, lab, S, K);
    return cudaGetLastError();
}

static __global__ void k_argmax(uint16_t *out, const float *z, long long P, int K) {
    GRID_LOOP(v, P) out[v] = (uint16_t)argmax_of(z + v * K, K);
}

extern "C" cudaError_t cuk_argmax(cudaStream_t st, uint16_t *out, const float *z, long long P,
                                  int K) {
    k_argmax<<<cuk_grid(P), T, 0, st>>>(out, z, P, K);
    return cudaGetLastError();
}

/* ---- optimizers ------------------------------------------------------------------------------ */

static __global__ void k_sgd(float *p, const float *g, long long n, float lr) {
    GRID_LOOP(i, n) p[i] -= lr * g[i];
}

extern "C" cudaError_t cuk_sgd(cudaStream_t st, float *p, const float *g, long long n, float lr) {
    k_sgd<<<cuk_grid(n), T, 0, st>>>(p, g, n, lr);
    return cudaGetLastError();
}

static __global__ void k_rmsprop(float *p, const float *g, float *v, long long n, float a,
                                 float lr, float eps) {
    GRID_LOOP(i, n) {
        const float gi = g[i];
        v[i] = a * v[i] + (1.0f - a) * gi * gi;
        p[i] -= lr * gi / (sqrtf(v[i]) + eps);
    }
}

extern "C" cudaError_t cuk_rmsprop(cudaStream_t st, float *p, const float *g, float *v,
                                   long long n, float alpha, float lr, float eps) {
    k_rmsprop<<<cuk_grid(n), T, 0, st>>>(p, g, v, n, alpha, lr, eps);
    return cudaGetLastError();
}

static __global__ void k_adam(float *p, const float *g, float *m, float *v, long long n, float b1,
                              float b2, float step_size, float bc2s, float eps) {
    GRID_LOOP(i, n) {
        const float gi = g[i];
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        const float denom = sqrtf(v[i]) / bc2s + eps;
        p[i] -= step_size * m[i] / denom;
    }
}

extern "C" cudaError_t cuk_adam(cudaStream_t st, float *p, const float *g, float *m, float *v,
                                long long n, float b1, float b2, float step_size, float bc2s,
                                float eps) {
    k_adam<<<cuk_grid(n), T, 0, st>>>(p, g, m, v, n, b1, b2, step_size, bc2s, eps);
    return cudaGetLastError();
}

static __global__ void k_sumsq(double *part, const float *g, long long n) {
    __shared__ double sh[T];
    double s = 0;
    GRID_LOOP(i, n) s += (double)g[i] * g[i];
    sh[threadIdx.x] = s;
    block_sum(sh);
    if (threadIdx.x == 0)
        part[blockIdx.x] = sh[0];
}

static __global__ void k_norm_finalize(double *res, const double *part, double max_norm) {
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    double s = 0;
    for (int b = 0; b < NB; b++)
        s += part[b];
    const double norm = sqrt(s);
    res[0] = norm;
    ((float *)(res + 1))[0] = (float)(max_norm / (norm + 1e-6));
}

extern "C" cudaError_t cuk_grad_norm(cudaStream_t st, double *res, double *part, const float *g,
                                     long long n, double max_norm) {
    k_sumsq<<<NB, T, 0, st>>>(part, g, n);
    k_norm_finalize<<<1, 1, 0, st>>>(res, part, max_norm);
    return cudaGetLastError();
}

static __global__ void k_scale_by(float *x, long long n, const float *coef) {
    const float c = *coef;
    if (!(c < 1.0f))
        return;
    GRID_LOOP(i, n) x[i] *= c;
}

extern "C" cudaError_t cuk_scale_by(cudaStream_t st, float *x, long long n, const float *coef) {
    k_scale_by<<<cuk_grid(n), T, 0, st>>>(x, n, coef);
    return cudaGetLastError();
}

static __global__ void k_scale(float *x, long long n, float s) {
    GRID_LOOP(i, n) x[i] *= s;
}

extern "C" cudaError_t cuk_scale(cudaStream_t st, float *x, long long n, float s) {
    k_scale<<<cuk_grid(n), T, 0, st>>>(x, n, s);
    return cudaGetLastError();
}
