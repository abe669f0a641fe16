/* bench_step: the engine's side of bench/nn/run.sh. Three modes:
 *
 *   bench_step --peak [SECONDS]
 *       CPU model, the kernel path in use, the FP32 FMA peak of that path (register-only loop on
 *       every thread), where the CPU has AMX the tiles' bf16 peak (amx_peak_gflops, the same
 *       in tile registers) and the tap-GEMM kernel as a plain SGEMM (cache-resident).
 *   bench_step --layer conv|convt|gn D CIN COUT [--reps R] [--bf16] [--no-peak]
 *       one layer at the U-Net's shapes, median of R: conv = Conv3d k3 (D^3 volume, forward,
 *       backward-data, backward-weights); convt = ConvTranspose3d k2 s2 (D^3 input, forward,
 *       backward-data, backward-weights); gn = GroupNorm(8)+ReLU over COUT channels (forward,
 *       backward). One line per pass: "layer NAME D CIN COUT time_s T gflops G peak_gflops P
 *       algo A". P is the FMA peak measured next to the layer (before every repeat and after
 *       the last; the highest), so a pass and the peak it is compared with see the same state
 *       of a shared host; A the algorithm that ran (nn/algo.h). --bf16: the convolutions as
 *       torch_amp: 1 runs them (operands rounded to bf16; names end in _bf16). --no-peak: no
 *       peak loop (P is 0), so that a profile of the run shows the passes alone.
 *   bench_step [--scale S] [--base B] [--classes K] [--reps R] [--bf16] [--ckpt]
 *       one U-Net training step (zero grad, forward, loss, backward, clip, Adam) at batch 1,
 *       median of R after a warm-up step, with the forward/loss/backward split, the model's
 *       convolution FLOPs, the GFLOP/s reached, the process's peak RSS and the seconds the
 *       warm-up spent choosing Conv3d algorithms; --bf16 computes as torch_amp: 1, --ckpt with
 *       activation checkpointing.
 *   bench_step --profile-ab [--scale S] [--base B] [--reps R] [--bf16] [--ckpt]
 *       the profiler's overhead (core/prof.h): R rounds of one step with the timer off and one
 *       with it recording every region (as `scaffold benchmark --profile` does), the order
 *       alternating each round, medians of each. One line: "profile_overhead off_s A on_s B
 *       ratio B/A regions_per_step N".
 * The Conv3d algorithms are chosen by measurement, as scaffold benchmark does (nn/algo.h: the
 * warm-up pays it, SCAFFOLD_NN_ALGO and SCAFFOLD_NN_ALGO_CACHE apply); -v prints the choices. */
#include "core/err.h"
#include "core/log.h"
#include "core/prof.h"
#include "core/rng.h"
#include "nn/algo.h"
#include "nn/gemm.h"
#include "nn/layers.h"
#include "nn/optim.h"
#include "nn/unet.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmpd);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double max_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
}

/* Forward multiply-add FLOPs (x2) of convolutions and transposed convolutions, per sample. */
static double unet_fwd_flops(const nn_unet_spec *s, int size) {
    double f = 0;
    const int L = s->layers;
    for (int i = 0; i <= L; i++) {
        const double vox = pow((double)(size >> i), 3);
        const double c = (double)s->base_channels * (1 << i);
        const double cin = i == 0 ? s->in_channels : c / 2;
        f += 2 * vox * 27 * (cin * c + c * c); /* down DoubleConv */
        if (i < L) {
            const double c2 = 2 * c;              /* up block input channels */
            f += 2 * vox * c2 * c;                /* convT: (vox/8) * 8 taps * c2 * c */
            f += 2 * vox * 27 * (c2 * c + c * c); /* up DoubleConv */
        }
    }
    f += 2 * pow(size, 3) * s->base_channels * s->n_classes;
    return f;
}

/* n floats, zeroed and 64-byte aligned as the engine allocates its tensors and workspaces
 * (backend.c): with malloc's 16-byte alignment the kernels' packed panels straddle cache
 * lines, which cost the weight-gradient passes a third of their speed. */
static float *lbuf(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (n + 16) * sizeof(float))) {
        fprintf(stderr, "bench_step: out of memory (%zu floats)\n", n);
        exit(1);
    }
    return memset(p, 0, (n + 16) * sizeof(float));
}

/* The tap-GEMM kernel as a plain SGEMM: C (M x N) = A (M x K) B (K x N), blocks of positions. */
static double kernel_sgemm(int M, int N, int K) {
    float *A = lbuf((size_t)M * K), *B = lbuf((size_t)K * N), *C = lbuf((size_t)M * N);
    for (long i = 0; i < (long)M * K; i++)
        A[i] = (float)(i % 7) * 0.1f;
    for (long i = 0; i < (long)K * N; i++)
        B[i] = (float)(i % 5) * 0.1f;
    const int nr = nn_gemm_nr(N), mr = nn_tg_mr(nr);
    const long aoff[1] = {0};
    const nn_tg g = {.T = 1, .K = K, .aoff = aoff, .nr = nr};
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = time_now();
#pragma omp parallel for collapse(2) schedule(static)
        for (int ob = 0; ob < N / nr; ob++)
            for (int r = 0; r < M / mr; r++) {
                const float *a[NN_TG_MR_MAX];
                float *c[NN_TG_MR_MAX];
                for (int i = 0; i < mr; i++) {
                    a[i] = A + (long)(r * mr + i) * K;
                    c[i] = C + (long)(r * mr + i) * N + ob * nr;
                }
                nn_tg_block(&g, mr, a, B + (long)ob * K * nr, c, NULL, nr, NN_TG_ZERO);
            }
        double dt = time_now() - t0;
        best = dt < best ? dt : best;
    }
    free(A), free(B), free(C);
    return 2.0 * (M / mr * mr) * N * K / best / 1e9;
}

/* The same kernel with its operands in L1 (one block of positions, K = 256, per thread, called
 * back to back for about `seconds`) at the block shape the layers use for 64 or more output
 * channels: the ceiling a convolution pass built on it can reach on this machine, to read the
 * per-layer % of the FMA peak against. */
static double kernel_l1(double seconds) {
    const int K = 256, nr = nn_gemm_nr(64), mr = nn_tg_mr(nr);
    const long aoff[1] = {0};
    const nn_tg g = {.T = 1, .K = K, .aoff = aoff, .nr = nr};
    long calls = 0;
    double el = 0;
#pragma omp parallel reduction(+ : calls)
    {
        float *A = lbuf((size_t)mr * K), *B = lbuf((size_t)K * nr), *C = lbuf((size_t)mr * nr);
        const float *a[NN_TG_MR_MAX];
        float *c[NN_TG_MR_MAX];
        for (int i = 0; i < mr; i++)
            a[i] = A + (size_t)i * K, c[i] = C + (size_t)i * nr;
#pragma omp barrier
        const double t0 = time_now();
        double t = t0;
        while (t - t0 < seconds) {
            for (int r = 0; r < 1000; r++)
                nn_tg_block(&g, mr, a, B, c, NULL, nr, NN_TG_ACCUM);
            calls += 1000;
            t = time_now();
        }
#pragma omp barrier
#pragma omp master
        el = time_now() - t0;
        free(A), free(B), free(C);
    }
    return 2.0 * mr * nr * K * (double)calls / el / 1e9;
}

static float *randbuf(size_t n, uint64_t seed, float scale) {
    float *p = lbuf(n);
    rng r = rng_make(seed, RNG_TEST, 0, 0);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)rng_normal(&r) * scale;
    return p;
}

/* Seconds: wall clock, or with SCAFFOLD_BENCH_CPUTIME=1 the process's CPU time divided by the
 * thread count (a development aid on a loaded machine: time the process actually ran; never a
 * reported figure). */
static double now_s(void) {
    static int cpu = -1;
    if (cpu < 0) {
        const char *e = getenv("SCAFFOLD_BENCH_CPUTIME");
        cpu = e && *e == '1';
    }
    if (!cpu)
        return time_now();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (ts.tv_sec + 1e-9 * ts.tv_nsec) / omp_get_max_threads();
}

/* The highest FMA peak measured during a layer's repeats (see adj_peak). */
static double layer_peak;
/* --no-peak: no peak loop between the repeats (peak_gflops 0), for profiling a pass alone */
static int layer_nopeak;

/* A short FMA-peak measurement between a layer's repeats. The host these benchmarks run on
 * drifts by 10-30% within a minute; a peak taken once at the start of a run can be from a
 * faster (or slower) moment than the pass it is compared with. The highest adjacent one is
 * kept: a pass is never flattered by a slow moment of the peak loop. */
static void adj_peak(void) {
    if (layer_nopeak)
        return;
    const double p = nn_fma_peak_gflops(0.1);
    if (p > layer_peak)
        layer_peak = p;
}

static void report(const char *name, int D, int cin, int cout, double *t, int reps,
                   double flops, int algo) {
    const double m = median(t, reps);
    printf("layer %s %d %d %d time_s %.6f gflops %.1f peak_gflops %.1f algo %s\n", name, D, cin,
           cout, m, flops > 0 ? flops / m / 1e9 : 0.0, layer_peak,
           algo >= 0 ? nn_algo_name(algo) : "-");
}

#define REPS_MAX 64

/* The three passes of a convolution: OP_fwd, OP_bwd_data, OP_bwd_weight (+ "_bf16"). */
static void report3(const char *op, int bf16, int D, int cin, int cout, double *t1, double *t2,
                    double *t3, int reps, double flops, const int algo[3]) {
    static const char *const pass[3] = {"fwd", "bwd_data", "bwd_weight"};
    double *t[3] = {t1, t2, t3};
    char nm[64];
    for (int i = 0; i < 3; i++) {
        snprintf(nm, sizeof nm, "%s_%s%s", op, pass[i], bf16 ? "_bf16" : "");
        report(nm, D, cin, cout, t[i], reps, flops, algo[i]);
    }
}

/* bf16: the operands rounded to bf16 first (what the layers receive in a torch_amp: 1 model) */
static void to_bf16(float *x, size_t n, int bf16) {
    if (bf16)
        nn_round_bf16(x, n);
}

static int bench_layer(const char *op, int D, int cin, int cout, int reps, int bf16) {
    const size_t P = (size_t)D * D * D;
    const nn_prec pr = bf16 ? NN_BF16 : NN_FP32;
    double t0, t1[REPS_MAX], t2[REPS_MAX], t3[REPS_MAX];
    reps = reps < 1 ? 1 : reps > REPS_MAX ? REPS_MAX : reps;
    if (!strcmp(op, "conv")) {
        const size_t nw = 27 * (size_t)cin * cout;
        float *x = randbuf(P * cin, 1, 1), *w = randbuf(nw, 2, 0.05f), *dy = randbuf(P * cout, 3, 1);
        float *y = lbuf(P * cout), *dx = lbuf(P * cin), *dw = lbuf(nw);
        float *ws = lbuf(nn_conv3d_ws_floats(1, D, D, D, cin, cout));
        const double fl = 2.0 * P * 27 * cin * cout;
        to_bf16(x, P * cin, bf16), to_bf16(w, nw, bf16), to_bf16(dy, P * cout, bf16);
        for (int i = -1; i < reps; i++) { /* i = -1 warms up (page faults) */
            if (i >= 0)
                adj_peak();
            t0 = now_s();
            nn_conv3d_forward_p(y, x, cin, NULL, 0, w, cout, 1, D, D, D, pr, NULL, ws);
            const double a = now_s();
            nn_conv3d_backward_p(dx, NULL, NULL, dy, x, cin, NULL, 0, w, cout, 1, D, D, D, pr, NULL, ws);
            const double b = now_s();
            nn_conv3d_backward_p(NULL, NULL, dw, dy, x, cin, NULL, 0, w, cout, 1, D, D, D, pr, NULL, ws);
            const double c = now_s();
            if (i >= 0)
                t1[i] = a - t0, t2[i] = b - a, t3[i] = c - b;
        }
        adj_peak();
        int algo[3]; /* the warm-up chose them (measure mode) */
        for (int p = 0; p < 3; p++)
            algo[p] = nn_conv3d_algo(p, 1, D, D, D, cin, 0, cout, 0, pr);
        report3("conv3d", bf16, D, cin, cout, t1, t2, t3, reps, fl, algo);
        free(x), free(w), free(dy), free(y), free(dx), free(dw), free(ws);
    } else if (!strcmp(op, "convt")) {
        const size_t nw = 8 * (size_t)cin * cout;
        float *x = randbuf(P * cin, 1, 1), *w = randbuf(nw, 2, 0.05f), *b = randbuf(cout, 4, 1);
        float *dy = randbuf(8 * P * cout, 3, 1), *y = lbuf(8 * P * cout);
        float *dx = lbuf(P * cin), *dw = lbuf(nw), *db = lbuf(cout);
        float *ws = lbuf(nn_convt3d_ws_floats_p(1, D, D, D, cin, cout, pr));
        const double fl = 2.0 * P * 8 * cin * cout;
        to_bf16(x, P * cin, bf16), to_bf16(w, nw, bf16), to_bf16(dy, 8 * P * cout, bf16);
        for (int i = -1; i < reps; i++) {
            if (i >= 0)
                adj_peak();
            t0 = now_s();
            nn_convt3d_forward_p(y, x, w, b, cin, cout, 1, D, D, D, pr, ws);
            const double a = now_s();
            nn_convt3d_backward_p(dx, NULL, NULL, dy, cout, x, w, cin, cout, 1, D, D, D, pr, ws);
            const double bb = now_s();
            nn_convt3d_backward_p(NULL, dw, db, dy, cout, x, w, cin, cout, 1, D, D, D, pr, ws);
            const double c = now_s();
            if (i >= 0)
                t1[i] = a - t0, t2[i] = bb - a, t3[i] = c - bb;
        }
        adj_peak();
        const int a = nn_convt3d_algo(cin, cout, pr), algo[3] = {a, a, a};
        report3("convt3d", bf16, D, cin, cout, t1, t2, t3, reps, fl, algo);
        free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db), free(ws);
    } else if (!strcmp(op, "gn")) {
        const int C = cout, G = 8;
        float *x = randbuf(P * C, 1, 1), *dy = randbuf(P * C, 3, 1), *y = lbuf(P * C);
        float *dx = lbuf(P * C), *g = randbuf(C, 5, 1), *bt = randbuf(C, 6, 1);
        float *dg = lbuf(C), *dbt = lbuf(C), mean[8], rstd[8];
        float *ws = lbuf(nn_groupnorm_ws_floats(C));
        for (int i = -1; i < reps; i++) {
            t0 = now_s();
            nn_groupnorm_forward(y, mean, rstd, x, g, bt, 1, (long)P, C, G, 1, ws);
            const double a = now_s();
            nn_groupnorm_backward(dx, dg, dbt, dy, x, y, mean, rstd, g, 1, (long)P, C, G, 1, ws);
            const double b = now_s();
            if (i >= 0)
                t1[i] = a - t0, t2[i] = b - a;
        }
        report("gnrelu_fwd", D, C, C, t1, reps, 0, -1);
        report("gnrelu_bwd", D, C, C, t2, reps, 0, -1);
        free(x), free(dy), free(y), free(dx), free(g), free(bt), free(dg), free(dbt), free(ws);
    } else {
        fprintf(stderr, "bench_step: unknown layer %s (conv, convt, gn)\n", op);
        return 2;
    }
    return 0;
}

/* One training step as the benchmark runs it (zero grad, forward+loss+backward, clip, Adam). */
static double one_step(nn_unet *m, nn_optim *o, const float *x, const uint16_t *y,
                       const float *w) {
    double loss, dice, t0 = time_now();
    nn_unet_zero_grad(m);
    if (nn_unet_forward_backward(m, x, y, 1, w, &loss, &dice)) {
        fprintf(stderr, "bench_step: step failed: %s\n", err_msg());
        exit(1);
    }
    nn_clip_grad_norm(m->grads, m->nparams, 1.0);
    nn_optim_step(o, m->params, m->grads, 1e-3);
    return time_now() - t0;
}

/* The timer's cost on a step: rounds of (off, on) steps, the order alternating (ABBA), so a
 * drift of the machine's speed hits both alike; a warm-up step of each first. */
static int profile_overhead(nn_unet *m, nn_optim *o, const float *x, const uint16_t *y,
                            const float *w, int reps) {
    double off[REPS_MAX], on[REPS_MAX];
    if (prof_start(0))
        return 1;
    prof_stop();
    one_step(m, o, x, y, w);
    for (int i = -1; i < reps; i++) {
        for (int k = 0; k < 2; k++) {
            const int profiled = (k == 0) == (i % 2 != 0);
            if (profiled)
                prof_start(0);
            prof_begin(PROF_MINIBATCH);
            const double dt = one_step(m, o, x, y, w);
            prof_end(PROF_MINIBATCH);
            if (profiled)
                prof_stop();
            if (i >= 0)
                (profiled ? on : off)[i] = dt;
        }
    }
    prof_thread_view v;
    prof_thread_get(0, &v);
    const double per_step = (double)(v.nevents + v.dropped) / (reps + 1);
    /* The timer's own cost per region, on and off, in a loop (robust where whole steps are
     * noisy): times the regions per step, the share of a step it can take. */
    enum { PAIRS = 100000 };
    double t0 = now_s();
    for (int i = 0; i < PAIRS; i++) {
        prof_begin(PROF_CONV3D_FWD);
        prof_end(PROF_CONV3D_FWD);
    }
    const double ns_off = (now_s() - t0) / PAIRS * 1e9;
    prof_start(0);
    prof_begin(PROF_MINIBATCH);
    t0 = now_s();
    for (int i = 0; i < PAIRS; i++) {
        prof_begin(PROF_CONV3D_FWD);
        prof_end(PROF_CONV3D_FWD);
    }
    const double ns_on = (now_s() - t0) / PAIRS * 1e9;
    prof_stop();
    const double mo = median(off, reps), mn = median(on, reps);
    printf("profile_overhead off_s %.6f on_s %.6f ratio %.4f regions_per_step %.0f "
           "ns_per_region_on %.1f ns_per_region_off %.2f timer_share %.6f threads %d path %s "
           "precision %s\n",
           mo, mn, mn / mo, per_step, ns_on, ns_off, per_step * ns_on * 1e-9 / mo,
           omp_get_max_threads(), nn_isa_name(nn_isa()),
           m->opts.precision == NN_BF16 ? "bf16" : "fp32");
    return 0;
}

/* Where a step's time goes: R profiled steps after a warm-up, each region's exclusive time summed
 * over its paths (the blocks' "down_list.0"... regions apart), per step, largest first; "other"
 * is the step's time outside every region. Lines "region NAME s_per_step S share F calls C". */
static int step_regions(nn_unet *m, nn_optim *o, const float *x, const uint16_t *y,
                        const float *w, int reps) {
    one_step(m, o, x, y, w);
    if (prof_start(0))
        return 1;
    prof_begin(PROF_MINIBATCH);
    for (int i = 0; i < reps; i++)
        one_step(m, o, x, y, w);
    prof_end(PROF_MINIBATCH);
    prof_stop();
    prof_node *nd;
    size_t n;
    if (prof_tree(&nd, &n))
        return 1;
    enum { MAXID = 512 };
    static double ex[MAXID];
    static uint64_t calls[MAXID];
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        if (nd[i].id == PROF_MINIBATCH && nd[i].parent < 0)
            total += nd[i].incl_ns * 1e-9;
        /* the blocks' own regions hold only their layers: fold them into "other" */
        const int id = prof_name(nd[i].id)[0] && strchr(prof_name(nd[i].id), '.')
                           ? PROF_MINIBATCH
                           : nd[i].id;
        if (id >= 0 && id < MAXID) {
            ex[id] += nd[i].excl_ns * 1e-9;
            calls[id] += id == nd[i].id ? nd[i].count : 0;
        }
    }
    free(nd);
    for (;;) {
        int best = -1;
        for (int id = 0; id < MAXID; id++)
            if (ex[id] > 0 && (best < 0 || ex[id] > ex[best]))
                best = id;
        if (best < 0)
            break;
        printf("region %-20s s_per_step %.5f share %.3f calls %.0f\n",
               best == PROF_MINIBATCH ? "other" : prof_name(best), ex[best] / reps,
               ex[best] / total, (double)calls[best] / reps);
        ex[best] = 0;
    }
    printf("step_s %.5f (mean of %d profiled steps)\n", total / reps, reps);
    return 0;
}

static int usage(void) {
    fprintf(stderr, "usage: bench_step --peak [SECONDS]\n"
                    "       bench_step --layer conv|convt|gn D CIN COUT [--reps R] [--bf16] "
                    "[--no-peak]\n"
                    "       bench_step [--scale S] [--base B] [--classes K] [--reps R] [--bf16] "
                    "[--ckpt]\n"
                    "       bench_step --profile-ab [--scale S] [--base B] [--reps R] [--bf16] "
                    "[--ckpt]\n"
                    "       bench_step --regions [--scale S] [--base B] [--reps R] [--bf16] "
                    "[--ckpt]\n"
                    "       -v: print each Conv3d algorithm choice (-vv: and each measured run)\n");
    return 2;
}

int main(int argc, char **argv) {
    int scale = 5, base = 64, classes = 6, reps = 5, bf16 = 0, ckpt = 0, profile_ab = 0;
    int regions = 0;
    const char *layer = NULL;
    int ld = 0, lcin = 0, lcout = 0;
    /* the Conv3d algorithms by measurement, as scaffold benchmark chooses them (nn/algo.h; the
     * warm-up pays the measurement): SCAFFOLD_NN_ALGO and SCAFFOLD_NN_ALGO_CACHE apply */
    nn_algo_set_mode(NN_ALGO_MODE_MEASURE);
    if (nn_algo_init()) {
        fprintf(stderr, "bench_step: %s\n", err_msg());
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "-vv"))
            log_set_verbosity(argv[i][2] ? 2 : 1); /* each algorithm choice; -vv each run */
        else if (!strcmp(argv[i], "--scale") && i + 1 < argc)
            scale = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--base") && i + 1 < argc)
            base = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--classes") && i + 1 < argc)
            classes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bf16"))
            bf16 = 1;
        else if (!strcmp(argv[i], "--no-peak"))
            layer_nopeak = 1;
        else if (!strcmp(argv[i], "--ckpt"))
            ckpt = 1;
        else if (!strcmp(argv[i], "--profile-ab"))
            profile_ab = 1;
        else if (!strcmp(argv[i], "--regions"))
            regions = 1;
        else if (!strcmp(argv[i], "--peak")) {
            const double sec = i + 1 < argc ? atof(argv[i + 1]) : 1.0;
            printf("cpu %s\npath %s bf16dp %d amx %d\n", nn_cpu_name(), nn_isa_name(nn_isa()),
                   nn_isa_bf16dp(), nn_isa_amx());
            printf("fma_peak_gflops %.1f threads %d\n", nn_fma_peak_gflops(sec > 0 ? sec : 1.0),
                   omp_get_max_threads());
            if (nn_isa_amx())
                printf("amx_peak_gflops %.1f threads %d\n", nn_amx_peak_gflops(sec > 0 ? sec : 1.0),
                       omp_get_max_threads());
            printf("kernel_sgemm_gflops %.1f (M=4096 N=256 K=512)\n",
                   kernel_sgemm(4096, 256, 512));
            printf("kernel_l1_gflops %.1f (one block per thread, operands in L1)\n",
                   kernel_l1(sec > 0 ? sec / 2 : 0.5));
            return 0;
        } else if (!strcmp(argv[i], "--layer") && i + 4 < argc) {
            layer = argv[i + 1];
            ld = atoi(argv[i + 2]);
            lcin = atoi(argv[i + 3]);
            lcout = atoi(argv[i + 4]);
            i += 4;
        } else
            return usage();
    }
    if (layer) {
        if (ld < 1 || lcin < 1 || lcout < 1)
            return usage();
        return bench_layer(layer, ld, lcin, lcout, reps, bf16);
    }
    const int size = 1 << scale;
    nn_unet_spec s = {3, classes, scale - 3, base, 8};
    nn_unet m;
    const nn_unet_opts opts = {.precision = bf16 ? NN_BF16 : NN_FP32, .checkpointing = ckpt};
    if (nn_unet_create_opts(&m, &s, &opts, 1, size, size, size)) {
        fprintf(stderr, "bench_step: cannot build the model: %s\n", err_msg());
        return 1;
    }
    nn_unet_init_params(&m, 1);
    nn_optim o;
    nn_optim_init(&o, NN_OPT_ADAM, m.nparams);
    const size_t S = (size_t)size * size * size;
    float *x = randbuf(3 * S, 2, 1), w[256];
    uint16_t *y = malloc(S * sizeof(uint16_t));
    rng r = rng_make(2, RNG_TEST, 1, 0);
    for (size_t i = 0; i < S; i++)
        y[i] = (uint16_t)rng_below(&r, (uint64_t)classes);
    for (int c = 0; c < classes; c++)
        w[c] = 1.0f;
    double t[REPS_MAX], tf[REPS_MAX], tl[REPS_MAX], tb[REPS_MAX];
    reps = reps < 1 ? 1 : reps > REPS_MAX - 1 ? REPS_MAX - 1 : reps;
    if (profile_ab)
        return profile_overhead(&m, &o, x, y, w, reps);
    if (regions)
        return step_regions(&m, &o, x, y, w, reps);
    double cpu0 = 0, wall0 = 0;
    for (int i = 0; i <= reps; i++) { /* step 0 warms up (page faults of the slabs) */
        if (i == 1)
            cpu0 = nn_team_cpu_seconds(), wall0 = now_s();
        double loss, dice, t0 = now_s();
        nn_unet_zero_grad(&m);
        if (nn_unet_forward_backward(&m, x, y, 1, w, &loss, &dice)) {
            fprintf(stderr, "bench_step: step failed\n");
            return 1;
        }
        nn_clip_grad_norm(m.grads, m.nparams, 1.0);
        nn_optim_step(&o, m.params, m.grads, 1e-3);
        if (i > 0) {
            t[i - 1] = now_s() - t0;
            nn_unet_last_times(&m, &tf[i - 1], &tl[i - 1], &tb[i - 1]);
        }
    }
    /* the share of its threads' CPUs the timed steps got: well under 1 on a busy host */
    const double share = (nn_team_cpu_seconds() - cpu0) / ((now_s() - wall0) * nn_threads());
    const double fl = 3 * unet_fwd_flops(&s, size);
    const double med = median(t, reps);
    int measured;
    const double sel = nn_algo_select_seconds(&measured);
    printf("scaffold_step_s %.6f fwd %.4f loss %.4f bwd %.4f gflop %.2f gflops %.1f params %zu "
           "activations_mib %.0f maxrss_mib %.0f threads %d path %s precision %s ckpt %d "
           "select_s %.3f measured %d cpu_share %.2f\n",
           med, median(tf, reps), median(tl, reps), median(tb, reps), fl / 1e9, fl / med / 1e9,
           m.nparams, (double)m.activation_floats * 4 / (1 << 20), max_rss_mib(),
           omp_get_max_threads(), nn_isa_name(nn_isa()), bf16 ? "bf16" : "fp32", ckpt, sel,
           measured, share);
    free(x), free(y);
    nn_optim_free(&o);
    nn_unet_free(&m);
    return 0;
}
