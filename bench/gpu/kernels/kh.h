/* kh: the per-kernel harness's shared part (llm.c's dev/cuda/common.h): options, seeded inputs,
 * validate_result, benchmark_kernel and the one result-line format that run.sh turns into a
 * table. Header-only, included once by each program of bench/gpu/kernels/.
 *
 * Each program checks one of the CUDA backend's own kernels (src/nn/cuda/kernels.cu, loss.cu)
 * the way llm.c's dev/cuda programs do:
 *  1. the CPU reference: the product's CPU engine function (src/nn), timed, and itself checked
 *     against an independent formula written in the program (plain loops in double), so that
 *     the reference is known good before anything is compared with it; this half runs on any
 *     machine, in any build (--cpu-only runs only it);
 *  2. the kernel on the GPU (CUDA builds, where a GPU is visible; elsewhere one SKIP line):
 *     every version of it on the same input, each validated against the CPU reference with the
 *     program's stated tolerance (kh_validate: |got - ref| <= atol + rtol |ref| per element,
 *     the first faults printed) and timed (kh_bench: median of --reps calls between CUDA
 *     events, L2 flushed before each).
 * Version 1 is always the product's own op (cu.h), as the backend runs it; versions 2.. are
 * candidates that live here (versions.cu), not in the product, until a GPU run shows one wins.
 *
 * Options: --cpu-only, --quick (small shapes: tests, compute-sanitizer), --reps N (GPU timing
 * repeats, default 20), --version N (only that GPU version; default all).
 * Output: one "KROW key=value ..." line per checked result (run.sh's table), "SKIP ..." for a
 * GPU half not run, and "N passed, N failed" last (every validation counts). */
#ifndef SCAFFOLD_BENCH_GPU_KH_H
#define SCAFFOLD_BENCH_GPU_KH_H

#include "core/err.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef SCAFFOLD_CUDA
#include "nn/cuda/cu_int.h"
#define KH_GPU 1
#else
#define KH_GPU 0
#endif

#define KH_MAX_BUFS 64
#define KH_MAX_REPS 999

typedef struct kh {
    const char *name;
    int nversions;
    int cpu_only, quick, reps, only_version;
    int gpu;        /* 1: the GPU half runs */
    char why[300];  /* why it does not */
    int passed, failed;
#if KH_GPU
    cu_ctx *ctx;
    void *bufs[KH_MAX_BUFS];
    int nbufs;
    void *flush; /* bytes written before each timed call, so that L2 holds none of the inputs */
    size_t flush_bytes;
#endif
} kh;

static inline void kh_die(const char *what) {
    fprintf(stderr, "FAIL %s: %s\n", what, err_msg());
    exit(1);
}

static inline double kh_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* Parses the options (exits 2 on a bad one) and prints the program's header line. */
static inline void kh_init(kh *h, const char *name, int nversions, int argc, char **argv) {
    memset(h, 0, sizeof *h);
    h->name = name;
    h->nversions = nversions;
    h->reps = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cpu-only"))
            h->cpu_only = 1;
        else if (!strcmp(argv[i], "--quick"))
            h->quick = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            h->reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--version") && i + 1 < argc)
            h->only_version = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--cpu-only] [--quick] [--reps N] [--version 1..%d]\n",
                    name, nversions);
            exit(2);
        }
    }
    if (h->reps < 1 || h->reps > KH_MAX_REPS || h->only_version < 0 ||
        h->only_version > nversions) {
        fprintf(stderr, "%s: --reps 1..%d, --version 1..%d\n", name, KH_MAX_REPS, nversions);
        exit(2);
    }
    printf("== kernel %s: %d version(s)%s\n", name, nversions, h->quick ? ", quick shapes" : "");
}

/* The GPU half's start: unless --cpu-only, probes the GPU and makes a context with ws_bytes of
 * op workspace in the precision bf16 when there is one (else h->why says why not). */
static inline void kh_start(kh *h, size_t ws_bytes, int bf16) {
#if KH_GPU
    if (h->cpu_only) {
        snprintf(h->why, sizeof h->why, "--cpu-only");
        return;
    }
    char why[256];
    const int n = cu_probe(why, sizeof why);
    if (n < 1) {
        snprintf(h->why, sizeof h->why, "no GPU visible (%s)", n < 0 ? why : "no CUDA device");
        return;
    }
    if (cu_ctx_create(&h->ctx, 0, bf16, ws_bytes, 0))
        kh_die("CUDA context");
    h->flush_bytes = (size_t)256 << 20; /* larger than any L2 so far (H200: 60 MiB) */
    if (cu_alloc(&h->flush, h->flush_bytes))
        kh_die("L2 flush buffer");
    h->gpu = 1;
#else
    (void)ws_bytes;
    (void)bf16;
    snprintf(h->why, sizeof h->why, "%s",
             h->cpu_only ? "--cpu-only" : "not a CUDA build (make CUDA=1)");
#endif
}

/* Whether GPU version v runs (the GPU is there and --version selects it). */
static inline int kh_runs(const kh *h, int v) {
    return h->gpu && (!h->only_version || h->only_version == v);
}

/* ---- inputs ------------------------------------------------------------------------------- */

static uint64_t kh_rng = 0x2545F4914F6CDD1DULL;
static inline void kh_seed(uint64_t s) {
    kh_rng = s * 0x9E3779B97F4A7C15ULL + 1;
}
/* uniform in [-1, 1) */
static inline float kh_urand(void) {
    kh_rng ^= kh_rng << 13;
    kh_rng ^= kh_rng >> 7;
    kh_rng ^= kh_rng << 17;
    return (float)((kh_rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
/* n floats, scale * U(-1, 1) + shift (malloc'ed; exits when out of memory) */
static inline float *kh_rand(size_t n, float scale, float shift) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    if (!x) {
        fprintf(stderr, "FAIL out of host memory (%zu floats)\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        x[i] = scale * kh_urand() + shift;
    return x;
}
static inline void *kh_alloc(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "FAIL out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* A float copy of n doubles (a formula's result in the reference's type; malloc'ed). */
static inline float *kh_to_float(const double *d, size_t n) {
    float *f = kh_alloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)d[i];
    return f;
}

/* ---- checks ------------------------------------------------------------------------------- */

/* Records one check and prints its KROW line: `ver` is "cpu" for the CPU reference against
 * the independent formula, else "v<N>" for GPU version N against the CPU reference. */
static inline void kh_row(kh *h, const char *ver, const char *what, const char *tol,
                          double maxerr, double worst, int ok, double ms, double bytes) {
    if (ok)
        h->passed++;
    else
        h->failed++;
    char gbps[32] = "-", t[32] = "-";
    if (ms > 0) {
        snprintf(t, sizeof t, "%.4g", ms);
        if (bytes > 0)
            snprintf(gbps, sizeof gbps, "%.1f", bytes / (ms * 1e6));
    }
    printf("KROW kernel=%s ver=%s what=%s tol=%s maxerr=%.3g worst=%.3g check=%s ms=%s "
           "gbps=%s\n",
           h->name, ver, what, tol, maxerr, worst, ok ? "PASS" : "FAIL", t, gbps);
}

/* Largest |x[i]| (tolerances relative to a tensor's scale). */
static inline double kh_maxabs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs((double)x[i]) > m ? fabs((double)x[i]) : m;
    return m;
}

/* KH_PERTURB=1 (the harness's own test): the first element of every compared result is off by
 * 1 + 1% of itself, so every check must fail and the program must exit 1. */
static inline double kh_perturb(double g, size_t i) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("KH_PERTURB");
        on = e && e[0] == '1';
    }
    return on && i == 0 ? g + 1.0 + 0.01 * fabs(g) : g;
}

/* llm.c's validate_result: every element within atol + rtol |ref| (a NaN must meet a NaN, an
 * infinity the same infinity);
 * prints the first 5 faults and the worst ratio of error to allowance. Returns 1 when all pass
 * (the caller records it with kh_row). */
static inline int kh_close(const char *what, const float *got, const float *ref, size_t n,
                           double atol, double rtol, double *maxerr, double *worst) {
    size_t bad = 0;
    *maxerr = 0;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double g = kh_perturb(got[i], i), r = ref[i];
        if (isnan(r) || isnan(g)) {
            if (!(isnan(r) && isnan(g)) && bad++ < 5)
                fprintf(stderr, "  %s[%zu]: got %.9g want %.9g\n", what, i, g, r);
            continue;
        }
        if (isinf(r) || isinf(g)) { /* an infinity must meet the same infinity (inf - inf is NaN) */
            if (g != r && bad++ < 5)
                fprintf(stderr, "  %s[%zu]: got %.9g want %.9g\n", what, i, g, r);
            continue;
        }
        const double d = fabs(g - r), allow = atol + rtol * fabs(r);
        if (d > *maxerr)
            *maxerr = d;
        if (allow > 0 && d / allow > *worst)
            *worst = d / allow;
        if (!(d <= allow) && bad++ < 5)
            fprintf(stderr, "  %s[%zu]: got %.9g want %.9g (allowed %.3g)\n", what, i, g, r,
                    allow);
    }
    if (bad)
        fprintf(stderr, "FAIL %s: %zu of %zu elements off\n", what, bad, n);
    return bad == 0;
}

/* The same for doubles (scalar results, double-precision formulas). */
static inline int kh_close_d(const char *what, const double *got, const double *ref,
                             size_t n, double atol, double rtol, double *maxerr, double *worst) {
    size_t bad = 0;
    *maxerr = 0;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs(kh_perturb(got[i], i) - ref[i]), allow = atol + rtol * fabs(ref[i]);
        if (d > *maxerr)
            *maxerr = d;
        if (allow > 0 && d / allow > *worst)
            *worst = d / allow;
        if (!(d <= allow) && bad++ < 5)
            fprintf(stderr, "  %s[%zu]: got %.17g want %.17g\n", what, i, got[i], ref[i]);
    }
    return bad == 0;
}

/* Validates and records: `ver` row for n floats (tolerance text built from atol, rtol). */
static inline int kh_check(kh *h, const char *ver, const char *what, const float *got,
                           const float *ref, size_t n, double atol, double rtol, double ms,
                           double bytes) {
    double me, w;
    char tol[48];
    snprintf(tol, sizeof tol, "a%.0e+r%.0e", atol, rtol);
    const int ok = kh_close(what, got, ref, n, atol, rtol, &me, &w);
    kh_row(h, ver, what, tol, me, w, ok, ms, bytes);
    return ok;
}
static inline int kh_check_d(kh *h, const char *ver, const char *what, const double *got,
                             const double *ref, size_t n, double atol, double rtol, double ms) {
    double me, w;
    char tol[48];
    snprintf(tol, sizeof tol, "a%.0e+r%.0e", atol, rtol);
    const int ok = kh_close_d(what, got, ref, n, atol, rtol, &me, &w);
    kh_row(h, ver, what, tol, me, w, ok, ms, 0);
    return ok;
}
/* Bit-for-bit equality (integer results, exact kernels). */
static inline int kh_same(kh *h, const char *ver, const char *what, const void *got,
                          const void *ref, size_t bytes, double ms, double traffic) {
    const int ok = memcmp(got, ref, bytes) == 0 && kh_perturb(0, 0) == 0;
    if (!ok) {
        size_t i = 0;
        while (i < bytes && ((const unsigned char *)got)[i] == ((const unsigned char *)ref)[i])
            i++;
        fprintf(stderr, "FAIL %s: first different byte at %zu of %zu\n", what, i, bytes);
    }
    kh_row(h, ver, what, "exact", ok ? 0 : 1, ok ? 0 : 1, ok, ms, traffic);
    return ok;
}

/* Milliseconds of the CPU reference: median of 3 runs (1 with --quick). */
#define KH_CPU_MS(h, ms, call)                                                                     \
    do {                                                                                           \
        double t_[3];                                                                              \
        const int n_ = (h)->quick ? 1 : 3;                                                         \
        for (int r_ = 0; r_ < n_; r_++) {                                                          \
            const double t0_ = kh_now();                                                           \
            call;                                                                                  \
            t_[r_] = kh_now() - t0_;                                                               \
        }                                                                                          \
        for (int a_ = 0; a_ < n_; a_++)                                                            \
            for (int b_ = a_ + 1; b_ < n_; b_++)                                                   \
                if (t_[b_] < t_[a_]) {                                                             \
                    const double s_ = t_[a_];                                                      \
                    t_[a_] = t_[b_];                                                               \
                    t_[b_] = s_;                                                                   \
                }                                                                                  \
        (ms) = 1e3 * t_[n_ / 2];                                                                   \
    } while (0)

static inline int kh_finish(kh *h) {
    if (!h->gpu)
        printf("SKIP %s GPU half: %s\n", h->name, h->why);
#if KH_GPU
    if (h->ctx) {
        for (int i = 0; i < h->nbufs; i++)
            cu_free(h->bufs[i]);
        cu_free(h->flush);
        cu_ctx_free(h->ctx);
    }
#endif
    printf("%d passed, %d failed\n", h->passed, h->failed);
    return h->failed ? 1 : 0;
}

/* ---- the GPU half -------------------------------------------------------------------------- */
#if KH_GPU
/* A device buffer of `bytes`, a copy of host data (or zeroed when host is NULL), freed by
 * kh_finish. */
static inline void *kh_dev(kh *h, const void *host, size_t bytes) {
    void *d;
    if (h->nbufs >= KH_MAX_BUFS || cu_alloc(&d, bytes))
        kh_die("device buffer");
    h->bufs[h->nbufs++] = d;
    if (host ? cu_upload(h->ctx, d, host, bytes) : (cu_zero(h->ctx, d, bytes) || cu_sync(h->ctx)))
        kh_die("upload");
    return d;
}
/* The host copy of a device buffer (malloc'ed; the caller frees). */
static inline void *kh_host(kh *h, const void *dev, size_t bytes) {
    void *p = kh_alloc(bytes);
    if (cu_download(h->ctx, p, dev, bytes))
        kh_die("download");
    return p;
}
/* Uploads host data into an existing device buffer (restoring an input between runs). */
static inline void kh_put(kh *h, void *dev, const void *host, size_t bytes) {
    if (cu_upload(h->ctx, dev, host, bytes))
        kh_die("upload");
}

typedef int (*kh_fn)(kh *h, void *arg);

/* llm.c's benchmark_kernel: median milliseconds of `reps` calls of fn, each timed alone between
 * two events on the context's stream after a write of the flush buffer (so inputs come from
 * memory, not L2), after one untimed warm-up call. A failing call ends the program. */
static inline double kh_bench(kh *h, kh_fn fn, void *arg) {
    cudaEvent_t t0, t1;
    if (cudaEventCreate(&t0) != cudaSuccess || cudaEventCreate(&t1) != cudaSuccess)
        kh_die("cudaEventCreate");
    if (fn(h, arg) || cu_sync(h->ctx))
        kh_die("warm-up call");
    double t[KH_MAX_REPS];
    for (int r = 0; r < h->reps; r++) {
        cudaMemsetAsync(h->flush, r & 0xff, h->flush_bytes, h->ctx->stream);
        cudaEventRecord(t0, h->ctx->stream);
        if (fn(h, arg))
            kh_die("timed call");
        cudaEventRecord(t1, h->ctx->stream);
        if (cu_sync(h->ctx))
            kh_die("timed call (asynchronous)");
        float ms = 0;
        cudaEventElapsedTime(&ms, t0, t1);
        t[r] = ms;
    }
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    for (int a = 0; a < h->reps; a++)
        for (int b = a + 1; b < h->reps; b++)
            if (t[b] < t[a]) {
                const double s = t[a];
                t[a] = t[b];
                t[b] = s;
            }
    return t[h->reps / 2];
}

/* Runs fn once and waits for it; the program ends when it fails. */
static inline void kh_run(kh *h, kh_fn fn, void *arg, const char *what) {
    if (fn(h, arg) || cu_sync(h->ctx))
        kh_die(what);
}
#endif

#endif
