/* gemm: run-time choice of the microkernel set (see gemm.h) and the thin wrappers that call it.
 *
 * The kernels themselves are in kern_tmpl.h, compiled per instruction set by kern_<isa>.c. The
 * choice is made once (pthread_once) from the CPU's feature bits, which on x86-64 also cover
 * the OS saving the wider registers (__builtin_cpu_supports checks XGETBV), and the settings
 * (nn/settings.h: SCAFFOLD_ISA, SCAFFOLD_BF16DP, SCAFFOLD_AMX); nn_settings_reload makes it
 * again. */
#include "nn/gemm.h"

#include "core/err.h"
#include "core/log.h"
#include "nn/base.h"
#include "nn/kern.h"
#include "nn/settings.h"

#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const nn_kern *cur;      /* the path in use */
static int cur_isa = -1;
static int cur_bf16dp;          /* 0 off, 1 vdpbf16ps kernels, 2 plain C stand-in (tests) */
static int cur_amx;             /* 1: the bf16 Conv3d passes on AMX tiles (cur_bf16dp == 1) */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const char *const isa_names[NN_ISA_COUNT] = {"portable", "avx2", "avx512"};

const char *nn_isa_name(int isa) {
    return isa >= 0 && isa < NN_ISA_COUNT ? isa_names[isa] : NULL;
}

static const nn_kern *isa_table(int isa) {
    switch (isa) {
    case NN_ISA_PORTABLE:
        return &nn_kern_portable;
#if defined(__x86_64__)
    case NN_ISA_AVX2:
        return &nn_kern_avx2;
    case NN_ISA_AVX512:
        return &nn_kern_avx512;
#endif
    default:
        return NULL;
    }
}

int nn_isa_supported(int isa) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    switch (isa) {
    case NN_ISA_PORTABLE:
        return 1;
    case NN_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case NN_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("fma");
    default:
        return 0;
    }
#else
    return isa == NN_ISA_PORTABLE;
#endif
}

static int cpu_has_bf16dp(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

/* AMX-BF16 usable: the CPU reports it and Linux granted the tile state (asked once). */
static int cpu_has_amx(void) {
#if defined(__x86_64__) && defined(__linux__)
    static int granted = -1;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16"))
        return 0;
    if (granted < 0)
        granted = nn_amx_request();
    return granted;
#else
    return 0;
#endif
}

static void select_isa(int isa) {
    const struct nn_settings *s = nn_settings();
    cur_isa = isa;
    cur = isa_table(isa);
    if (s->bf16dp == NN_SET_BF16DP_EMULATE)
        cur_bf16dp = 2;
    else
        cur_bf16dp = isa == NN_ISA_AVX512 && cpu_has_bf16dp() && s->bf16dp != NN_SET_BF16DP_OFF;
    cur_amx = cur_bf16dp == 1 && cpu_has_amx() && s->amx;
#if defined(__x86_64__)
    if (cur_bf16dp == 1) /* the same kernels, winograd-bf16's roundings on vcvtneps2bf16 */
        cur = &nn_kern_avx512b;
#endif
}

static int chosen; /* init_once ran */

static void init_once(void) {
    int best = NN_ISA_PORTABLE;
    for (int i = NN_ISA_COUNT - 1; i > NN_ISA_PORTABLE; i--)
        if (isa_table(i) && nn_isa_supported(i)) {
            best = i;
            break;
        }
    const int want = nn_settings()->isa;
    const char *e = nn_settings_env("SCAFFOLD_ISA");
    if (want == NN_SET_UNKNOWN)
        log_warn("SCAFFOLD_ISA=%s: unknown path (use avx512, avx2 or portable); using %s", e,
                 isa_names[best]);
    else if (want >= 0 && (!isa_table(want) || !nn_isa_supported(want)))
        log_warn("SCAFFOLD_ISA=%s: this CPU (%s) cannot run it; using %s", e, nn_cpu_name(),
                 isa_names[best]);
    else if (want >= 0)
        best = want;
    select_isa(best);
    chosen = 1;
}

void nn_isa_reload(void) {
    if (chosen) /* else the first use chooses */
        init_once();
}

static const nn_kern *K(void) {
    pthread_once(&once, init_once);
    return cur;
}

int nn_isa(void) {
    K();
    return cur_isa;
}

int nn_isa_bf16dp(void) {
    K();
    return cur_bf16dp != 0;
}

int nn_isa_amx(void) {
    K();
    return cur_amx;
}

int nn_isa_set(int isa) {
    K();
    if (!isa_table(isa) || !nn_isa_supported(isa))
        return err_set(ERR_CONFIG, "instruction-set path %s: not supported by this CPU (%s)",
                       nn_isa_name(isa) ? nn_isa_name(isa) : "?", nn_cpu_name());
    select_isa(isa);
    return 0;
}

static char cpu_name[128] = "unknown";
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

/* The first "model name" of /proc/cpuinfo (Linux); "unknown" elsewhere. */
static void read_cpu_name(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10))
            continue;
        const char *v = strchr(line, ':');
        if (!v)
            break;
        v++;
        while (*v == ' ' || *v == '\t')
            v++;
        snprintf(cpu_name, sizeof cpu_name, "%s", v);
        cpu_name[strcspn(cpu_name, "\n")] = 0;
        break;
    }
    fclose(f);
}

const char *nn_cpu_name(void) {
    pthread_once(&cpu_once, read_cpu_name);
    return cpu_name;
}

/* GFLOP/s of chains(iters) (flop floating-point operations per iteration) on every OpenMP
 * thread: calibrated on one thread, then all threads for about `seconds`. */
static double peak_gflops(float (*chains)(long), double flop, double seconds) {
    long iters = 1 << 16;
    double dt = 0;
    float sink = 0;
    for (;;) {
        const double t0 = time_now();
        sink += chains(iters);
        dt = time_now() - t0;
        if (dt > 0.05 || iters > (1L << 40))
            break;
        iters *= 4;
    }
    iters = (long)((double)iters * seconds / (dt > 0 ? dt : 1e-9)) + 1;
    int nth = 1;
    const double t0 = time_now();
#pragma omp parallel reduction(+ : sink)
    {
#pragma omp single
        nth = omp_get_num_threads();
        sink += chains(iters);
    }
    const double el = time_now() - t0;
    if (sink == 12345.0f) /* uses the result */
        log_debug("peak checksum %g", (double)sink);
    return (double)iters * flop * nth / el / 1e9;
}

double nn_fma_peak_gflops(double seconds) {
    const nn_kern *k = K();
    return peak_gflops(k->fma_chains, 12.0 * k->vw * 2, seconds);
}

double nn_amx_peak_gflops(double seconds) {
#if defined(__x86_64__) && defined(__linux__)
    if (nn_isa_amx())
        return peak_gflops(nn_amx_chains, 4.0 * 16 * 16 * 32 * 2, seconds);
#endif
    (void)seconds;
    return 0;
}

/* ---- block shapes ----------------------------------------------------------------------------- */

int nn_gemm_vw(void) {
    return K()->vw;
}

/* Block width (vectors) of table k for n columns: one block when n fits the widest, else the
 * preferred width, or the widest when that pads less. */
static int table_nv(const nn_kern *k, int n) {
    const int vw = k->vw;
    int nv = (n + vw - 1) / vw;
    if (nv < 1)
        nv = 1;
    if (nv <= k->maxnv)
        return nv;
    const int p = k->prefnv, w = k->maxnv;
    const long padp = (long)(n + p * vw - 1) / (p * vw) * p * vw;
    const long padw = (long)(n + w * vw - 1) / (w * vw) * w * vw;
    return padw < padp ? w : p;
}

int nn_gemm_nr(int n) {
    const nn_kern *k = K();
    return table_nv(k, n) * k->vw;
}

int nn_gemm_ncol_max(int n) {
    int best = 0;
    for (int i = 0; i < NN_ISA_COUNT; i++) {
        const nn_kern *k = isa_table(i);
        if (!k || !nn_isa_supported(i))
            continue;
        const int nr = table_nv(k, n) * k->vw;
        const int pad = (n + nr - 1) / nr * nr;
        best = pad > best ? pad : best;
    }
    return best;
}

int nn_tg_mr(int nr) {
    const nn_kern *k = K();
    return k->mr[nr / k->vw - 1];
}

int nn_tw_mr(int nr) {
    return nn_tg_mr(nr);
}

int nn_tg_nblocks(long M, int nr) {
    const long mr = nn_tg_mr(nr);
    return (int)((M + mr - 1) / mr);
}

/* ---- kernels ----------------------------------------------------------------------------------- */

void nn_stream_fence(void) {
#if defined(__x86_64__)
    __builtin_ia32_sfence();
#endif
}

nn_tg_fn nn_tg_kernel(int nr, int m) {
    const nn_kern *k = K();
    return k->tg[nr / k->vw - 1][m - 1];
}

void nn_tg_block(const nn_tg *g, int m, const float *const *a, const float *Bp, float *const *c,
                 const float *bias, int nvalid, int mode) {
    nn_tg_kernel(g->nr, m)(g, a, Bp, c, bias, nvalid, mode);
}

static float bf16_to_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Plain C stand-in for the vdpbf16ps kernels (SCAFFOLD_BF16DP=emulate): the same operands and
 * packing, each pair's two products added to the fp32 accumulator in turn. */
static void tgb_emulated(const nn_tg *g, int m, const uint16_t *const *a, const uint16_t *Bp,
                         float *const *c, const float *bias, int nvalid, int mode) {
    const int nr = g->nr, KP = g->K / 2, init = mode & 3;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < nvalid; j++) {
            float s = init == NN_TG_BIAS ? bias[j] : init == NN_TG_ACCUM ? c[i][j] : 0.0f;
            for (int t = 0; t < g->T; t++) {
                const uint16_t *ap = a[i] + g->aoff[t], *b = Bp + (size_t)t * KP * 2 * nr;
                for (int kp = 0; kp < KP; kp++) {
                    s += bf16_to_f32(ap[2 * kp]) * bf16_to_f32(b[((size_t)kp * nr + j) * 2]);
                    s += bf16_to_f32(ap[2 * kp + 1]) *
                         bf16_to_f32(b[((size_t)kp * nr + j) * 2 + 1]);
                }
            }
            if (mode & NN_TG_RBF16) {
                uint32_t u;
                memcpy(&u, &s, sizeof u);
                u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
                memcpy(&s, &u, sizeof u);
            }
            c[i][j] = s;
        }
}

void nn_tg_block_bf16(const nn_tg *g, int m, const uint16_t *const *a, const uint16_t *Bp,
                      float *const *c, const float *bias, int nvalid, int mode) {
    const nn_kern *k = K();
#if defined(__x86_64__)
    if (cur_bf16dp == 1) {
        nn_tgb_avx512bf16[g->nr / k->vw - 1][m - 1](g, a, Bp, c, bias, nvalid, mode);
        return;
    }
#endif
    (void)k;
    tgb_emulated(g, m, a, Bp, c, bias, nvalid, mode);
}

void nn_bf16_pack(uint16_t *dst, const float *src, long n) {
    K();
#if defined(__x86_64__)
    if (cur_bf16dp == 1) {
        nn_kb_pack(dst, src, n);
        return;
    }
#endif
    for (long i = 0; i < n; i++)
        dst[i] = nn_bf16_bits(src[i]);
}

void nn_bf16_pack_pairs(uint16_t *dst, const float *src, long sj, long sk, int two, int n) {
    K();
#if defined(__x86_64__)
    if (cur_bf16dp == 1) {
        nn_kb_pack_pairs(dst, src, sj, sk, two, n);
        return;
    }
#endif
    for (int j = 0; j < n; j++) {
        dst[2 * j] = nn_bf16_bits(src[j * sj]);
        dst[2 * j + 1] = two ? nn_bf16_bits(src[j * sj + sk]) : 0;
    }
}

void nn_bf16_pack_taps(uint16_t *dst, long ldt, const float *src, long sj, long sk, int two, int n,
                       int T) {
    K();
#if defined(__x86_64__)
    /* under 8 taps the 16 x 16 transposes would be mostly padding: tap by tap below */
    if (cur_bf16dp == 1 && T >= 8) {
        nn_kb_pack_taps(dst, ldt, src, sj, sk, two, n, T);
        return;
    }
#endif
    for (int t = 0; t < T; t++)
        nn_bf16_pack_pairs(dst + (size_t)t * ldt, src + t, sj, sk, two, n);
}

void nn_tg_amx(const nn_tg *g, const uint16_t *a, long sa, const uint16_t *Bp, float *const *c,
               const float *bias, int nvalid, int mode) {
#if defined(__x86_64__) && defined(__linux__)
    if (cur_amx) {
        nn_amx_tg(g, a, sa, Bp, c, bias, nvalid, mode);
        return;
    }
#endif
    /* not reached while nn_isa_amx() is 0; kept correct all the same */
    const uint16_t *ap[32];
    float *cp[32];
    int m = 0;
    for (int r = 0; r < 32; r++)
        if (c[r])
            ap[m] = a + (r < 16 || !g->a16 ? r * sa : g->a16 + (r - 16) * sa), cp[m++] = c[r];
    tgb_emulated(g, m, ap, Bp, cp, bias, nvalid, mode);
}

/* Partial-width tiles (fewer valid columns than a vector block: the 1x1 output convolution
 * with a handful of classes, tiny test models). Plain loops; these are a small share of work. */
static void tw_partial(int nrows, const float *const *arows, const float *const *grows, int X,
                       long lda, long ldg, int mk, int nvalid, float *Wt, long ldw, int init) {
    for (int m = 0; m < mk; m++)
        for (int j = 0; j < nvalid; j++) {
            float s = 0.0f;
            for (int r = 0; r < nrows; r++) {
                const float *a = arows[r] + m, *gg = grows[r] + j;
                for (int x = 0; x < X; x++)
                    s += a[x * lda] * gg[x * ldg];
            }
            Wt[m * ldw + j] = init ? s : Wt[m * ldw + j] + s;
        }
}

void nn_tw_tile(int nrows, const float *const *arows, const float *const *grows, int X, long lda,
                long ldg, int mk, int nr, int nvalid, float *Wt, long ldw, int init) {
    if (nvalid < nr) {
        tw_partial(nrows, arows, grows, X, lda, ldg, mk, nvalid, Wt, ldw, init);
        return;
    }
    const nn_kern *k = K();
    k->tw[nr / k->vw - 1][mk - 1](nrows, arows, grows, X, lda, ldg, Wt, ldw, init);
}

void nn_wino_input(float *V, long ldv, const float *P, long plane, long row, long vox, int C,
                   int a0, int na) {
    K()->wino_in(V, ldv, P, plane, row, vox, C, a0, na);
}

void nn_wino_output(float *out, long oplane, long orow, long ovox, int ncol, const float *M,
                    long ldm, int a0, int na) {
    K()->wino_out(out, oplane, orow, ovox, ncol, M, ldm, a0, na);
}

void nn_wino_weights(float *u, long su, const float *w, long sc, int flip, int nc, int round) {
    K()->wino_w(u, su, w, sc, flip, nc, round);
}

void nn_wino_weights_grad(float *d, const float *u, long su, int round) {
    K()->wino_wgt(d, u, su, round);
}

void nn_wino_grad_output(float *Mo, long ldm, const float *dy, long plane, long row, long ldy,
                         int ncol, int ncp, int a0, int na) {
    K()->wino_gout(Mo, ldm, dy, plane, row, ldy, ncol, ncp, a0, na);
}

void nn_wino16_input(uint16_t *V, long ldv, const float *P, long plane, long row, long vox,
                     int C) {
    K()->wino_in16(V, ldv, P, plane, row, vox, C);
}

void nn_wino16_output(float *out, long oplane, long orow, long ovox, int ncol, const float *M,
                      long ldm) {
    K()->wino_out16(out, oplane, orow, ovox, ncol, M, ldm);
}

void nn_wino16_weights(uint32_t *u, long su, const float *w, const float *w1, long sc, int flip,
                       int nc, int round) {
    K()->wino_w16(u, su, w, w1, sc, flip, nc, round);
}

void nn_wino16_weights_grad(float *d, const float *u, long su, int round) {
    K()->wino_wgt16(d, u, su, round);
}

void nn_wino16_input_pair(uint32_t *V, long ldv, const float *P, long plane, long row, long vox,
                          int C, int odd) {
    K()->wino_in16p(V, ldv, P, plane, row, vox, C, odd);
}

void nn_wino16_grad_output(uint32_t *Mo, long ldm, const float *dy, long plane, long row,
                           long ldy, int ncol, int ncp, int odd) {
    K()->wino_gout16p(Mo, ldm, dy, plane, row, ldy, ncol, ncp, odd);
}

/* nn_tw_tile_bf16: the vdpbf16ps tiles, or plain C with the pair's products added in turn
 * (SCAFFOLD_BF16DP=emulate) */
void nn_tw_tile_bf16(int X, const uint16_t *A, long lda, const uint16_t *G, long ldg, int mk,
                     int nr, float *Wt, long ldw) {
    const nn_kern *k = K();
#if defined(__x86_64__)
    if (cur_bf16dp == 1) {
        nn_twb_avx512bf16[nr / k->vw - 1][mk - 1](X, A, lda, G, ldg, Wt, ldw);
        return;
    }
#endif
    (void)k;
    for (int m = 0; m < mk; m++)
        for (int j = 0; j < nr; j++) {
            float s = Wt[m * ldw + j];
            for (int x = 0; x < X; x++)
                for (int h = 0; h < 2; h++)
                    s += bf16_to_f32(A[((size_t)x * lda + m) * 2 + h]) *
                         bf16_to_f32(G[((size_t)x * ldg + j) * 2 + h]);
            Wt[m * ldw + j] = s;
        }
}

nn_tgb_fn nn_tgb_kernel(int nr, int m) {
    const nn_kern *k = K();
#if defined(__x86_64__)
    if (cur_bf16dp == 1)
        return nn_tgb_avx512bf16[nr / k->vw - 1][m - 1];
#endif
    (void)k, (void)nr, (void)m;
    return NULL;
}

void nn_adam_span(float *p, float *m, float *v, const float *g, long n, const nn_adam_coef *c) {
    K()->adam(p, m, v, g, n, c);
}
