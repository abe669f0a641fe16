/* optim: Adam / SGD / RMSprop steps over the flat parameter slab, global-norm clipping and the
 * CosineAnnealingWarmRestarts schedule (formulas in optim.h). */
#include "nn/optim.h"

#include "core/err.h"
#include "core/mem.h"
#include "nn/gemm.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <strings.h>

int nn_optim_parse(const char *name, nn_optim_kind *kind) {
    if (!strcasecmp(name, "adam"))
        *kind = NN_OPT_ADAM;
    else if (!strcasecmp(name, "sgd"))
        *kind = NN_OPT_SGD;
    else if (!strcasecmp(name, "rmsprop"))
        *kind = NN_OPT_RMSPROP;
    else
        return err_set(ERR_CONFIG, "optimizer '%s' is unknown: use ADAM, SGD or RMSprop", name);
    return 0;
}

const char *nn_optim_name(nn_optim_kind kind) {
    switch (kind) {
    case NN_OPT_ADAM:
        return "ADAM";
    case NN_OPT_SGD:
        return "SGD";
    case NN_OPT_RMSPROP:
        return "RMSprop";
    }
    return "?";
}

size_t nn_optim_state_floats(nn_optim_kind kind, size_t n) {
    return kind == NN_OPT_ADAM ? 2 * n : kind == NN_OPT_RMSPROP ? n : 0;
}

int nn_optim_init(nn_optim *o, nn_optim_kind kind, size_t n) {
    o->kind = kind;
    o->beta1 = 0.9;
    o->beta2 = 0.999;
    o->eps = 1e-8;
    o->alpha = 0.99;
    o->step = 0;
    o->n = n;
    o->state = NULL;
    size_t ns = nn_optim_state_floats(kind, n);
    if (ns) {
        /* zeroed by the threads, not calloc'ed (GCC turns malloc + memset into calloc): a
         * lazily zeroed mapping is first read (the shared zero page), then written, and every
         * such copy-on-write fault flushed the TLB of the other cores (about 0.1 s of the
         * first step at 5.4 M parameters) */
        float *st = mem_alloc_big(ns * sizeof(float));
        if (!st)
            return err_set(ERR_NOMEM, "optimizer state: cannot allocate %zu floats", ns);
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < ns; i++)
            st[i] = 0.0f;
        o->state = st;
    }
    return 0;
}

void nn_optim_free(nn_optim *o) {
    if (!o)
        return;
    free(o->state);
    o->state = NULL;
}

void nn_optim_step(nn_optim *o, float *params, const float *grads, double lr) {
    const size_t n = o->n;
    o->step++;
    if (o->kind == NN_OPT_SGD) {
        const float l = (float)lr;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++)
            params[i] -= l * grads[i];
    } else if (o->kind == NN_OPT_RMSPROP) {
        const float a = (float)o->alpha, l = (float)lr, eps = (float)o->eps;
        float *v = o->state;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            const float g = grads[i];
            v[i] = a * v[i] + (1.0f - a) * g * g;
            params[i] -= l * g / (sqrtf(v[i]) + eps);
        }
    } else {
        const double bc1 = 1.0 - pow(o->beta1, (double)o->step);
        const double bc2 = 1.0 - pow(o->beta2, (double)o->step);
        const nn_adam_coef c = {(float)o->beta1, (float)o->beta2, (float)o->eps,
                                (float)(lr / bc1), (float)sqrt(bc2)};
        float *m = o->state, *v = o->state + n;
        /* spans of whole cache lines per thread, through the vector kernel */
        const int nt = omp_get_max_threads();
#pragma omp parallel for schedule(static)
        for (int t = 0; t < nt; t++) {
            const size_t lo = (n * t / nt) & ~(size_t)15;
            const size_t hi = t == nt - 1 ? n : (n * (t + 1) / nt) & ~(size_t)15;
            if (hi > lo)
                nn_adam_span(params + lo, m + lo, v + lo, grads + lo, (long)(hi - lo), &c);
        }
    }
}

/* Sum of squares in 64 fixed slices added in order: the same value whatever the threads. A
 * thread runs NORM_GROUP consecutive slices side by side, each with its own 8 interleaved
 * partial sums in its own order (so each slice's sum is the one it has alone). One slice at a
 * time, one sequential stream per core read the gradients at about 12 GB/s after a backward
 * pass; four at once let the memory system overlap their misses: 1.72-1.81 -> 1.15-1.17 ms of
 * a 5 / 64 bf16 step (Intel Xeon with AMX, 2 threads; eight at once 1.08-1.13 ms, but 8 work
 * items for the threads instead of 16), the same bits. */
#define NORM_SLICES 64
#define NORM_GROUP 4
static void norm_slices(double *part, const float *grads, size_t n, int s0) {
    double a[NORM_GROUP][8] = {{0}};
    size_t lo[NORM_GROUP], hi[NORM_GROUP], len = 0;
    for (int g = 0; g < NORM_GROUP; g++) {
        lo[g] = n * (size_t)(s0 + g) / NORM_SLICES, hi[g] = n * (size_t)(s0 + g + 1) / NORM_SLICES;
        len = hi[g] - lo[g] > len ? hi[g] - lo[g] : len;
    }
    /* 8 interleaved partial sums per slice: one chain of dependent double adds ran at the add's
     * latency (the compiler may not reorder them), 2.5% of a bf16 step */
    for (size_t i = 0; i + 8 <= len; i += 8)
        for (int g = 0; g < NORM_GROUP; g++)
            if (lo[g] + i + 8 <= hi[g])
                for (int j = 0; j < 8; j++)
                    a[g][j] += (double)grads[lo[g] + i + j] * grads[lo[g] + i + j];
    for (int g = 0; g < NORM_GROUP; g++) {
        for (size_t i = lo[g] + (hi[g] - lo[g]) / 8 * 8; i < hi[g]; i++)
            a[g][0] += (double)grads[i] * grads[i];
        part[s0 + g] = ((a[g][0] + a[g][1]) + (a[g][2] + a[g][3])) +
                       ((a[g][4] + a[g][5]) + (a[g][6] + a[g][7]));
    }
}

double nn_grad_norm(const float *grads, size_t n) {
    double part[NORM_SLICES];
#pragma omp parallel for schedule(dynamic, 1)
    for (int sl = 0; sl < NORM_SLICES; sl += NORM_GROUP)
        norm_slices(part, grads, n, sl);
    double s = 0;
    for (int sl = 0; sl < NORM_SLICES; sl++)
        s += part[sl];
    return sqrt(s);
}

double nn_clip_grad_norm(float *grads, size_t n, double max_norm) {
    const double norm = nn_grad_norm(grads, n);
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
        const float c = (float)coef;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++)
            grads[i] *= c;
    }
    return norm;
}

double nn_lr_cosine_warm(double lr0, int T_0, int T_mult, double eta_min, long epochs_done) {
    /* PyTorch's incremental form: T_cur += 1; if T_cur >= T_i: T_cur -= T_i, T_i *= T_mult. */
    long T_i = T_0 > 0 ? T_0 : 1, T_cur = 0;
    for (long e = 0; e < epochs_done; e++) {
        T_cur++;
        if (T_cur >= T_i) {
            T_cur -= T_i;
            T_i *= T_mult > 0 ? T_mult : 1;
        }
    }
    return eta_min + (lr0 - eta_min) * (1.0 + cos(M_PI * (double)T_cur / (double)T_i)) / 2.0;
}
