/* gemm: register-blocked microkernels for the implicit-GEMM convolutions (see gemm.h).
 *
 * Each kernel is one always-inline template, instantiated for every (rows, vectors) pair the
 * register file allows, and dispatched through a table; a row of X positions is split into
 * near-equal blocks so that no slow remainder path runs (X = 32 with 6-row blocks runs
 * 5,5,5,5,6,6). RATIONALE: the accumulators must live in registers for the whole reduction;
 * GCC keeps a constant-indexed local vector array in registers only when the loops over it are
 * fully unrolled with compile-time bounds, hence the instantiation. */
#include "nn/gemm.h"

#include <string.h>

#if defined(__AVX512F__)
#define VW 16
#define NREGS 32
#elif defined(__AVX__)
#define VW 8
#define NREGS 16
#else
#define VW 4
#define NREGS 16
#endif

typedef float vf __attribute__((vector_size(VW * sizeof(float)), aligned(4), may_alias));

#define LOADV(p) (*(const vf *)(p))
#define STOREV(p, v) (*(vf *)(p) = (v))

/* Row-block limits per number of vectors (index NV-1): accumulators MR*NV plus NV B vectors
 * plus one broadcast must fit the register file. */
#if NREGS == 32
#define MR1 16
#define MR2 12
#define MR3 8
#define MR4 6
#else
#define MR1 8
#define MR2 6
#define MR3 4
#define MR4 3
#endif
#define MRMAX MR1

static const int mr_max[4] = {MR1, MR2, MR3, MR4};

int nn_gemm_vw(void) {
    return VW;
}

int nn_gemm_nr(int n) {
    int nv = (n + VW - 1) / VW;
    if (nv > 4) {
        /* Wide outputs: blocks of 4 vectors unless 3 divides better (e.g. 48, 96 columns). */
        nv = ((n % (3 * VW)) == 0 && (n % (4 * VW)) != 0) ? 3 : 4;
    }
    if (nv < 1)
        nv = 1;
    return nv * VW;
}

int nn_tg_mr(int nr) {
    return mr_max[nr / VW - 1];
}

int nn_tw_mr(int nr) {
    return mr_max[nr / VW - 1];
}

/* ---------------------------------------------------------------------------------------- */
/* tap GEMM */

static inline __attribute__((always_inline)) void
tg_kern(const nn_tg *restrict g, const float *restrict A, const float *restrict Bp,
        float *restrict C, const float *restrict bias, int nvalid, int mode, const int MR,
        const int NV) {
    const int nr = NV * VW;
    const long lda = g->lda, ldc = g->ldc;
    vf acc[MRMAX][4];
    float tmp[4 * VW];
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++) {
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) {
            if (mode == NN_TG_BIAS) {
                acc[m][j] = LOADV(bias + j * VW);
            } else if (mode == NN_TG_ACCUM) {
                if (nvalid == nr) {
                    acc[m][j] = LOADV(C + m * ldc + j * VW);
                } else {
                    memset(tmp, 0, sizeof tmp);
                    memcpy(tmp, C + m * ldc, (size_t)nvalid * sizeof(float));
                    acc[m][j] = LOADV(tmp + j * VW);
                }
            } else {
                acc[m][j] = (vf){0};
            }
        }
    }
    const int T = g->T, K = g->K;
    for (int t = 0; t < T; t++) {
        const float *restrict a = A + g->aoff[t];
        const float *restrict b = Bp + (size_t)t * K * nr;
        for (int k = 0; k < K; k++) {
            vf bv[4];
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                bv[j] = LOADV(b + (size_t)k * nr + j * VW);
#pragma GCC unroll 16
            for (int m = 0; m < MR; m++) {
                const float av = a[m * lda + k];
#pragma GCC unroll 4
                for (int j = 0; j < NV; j++)
                    acc[m][j] += bv[j] * av;
            }
        }
    }
    if (nvalid == nr) {
#pragma GCC unroll 16
        for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                STOREV(C + m * ldc + j * VW, acc[m][j]);
    } else {
#pragma GCC unroll 16
        for (int m = 0; m < MR; m++) {
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                STOREV(tmp + j * VW, acc[m][j]);
            memcpy(C + m * ldc, tmp, (size_t)nvalid * sizeof(float));
        }
    }
}

typedef void (*tg_fn)(const nn_tg *, const float *, const float *, float *, const float *, int,
                      int);

#define TG_INST(MR, NV)                                                                           \
    static void tg_##MR##_##NV(const nn_tg *g, const float *A, const float *Bp, float *C,         \
                               const float *bias, int nvalid, int mode) {                         \
        tg_kern(g, A, Bp, C, bias, nvalid, mode, MR, NV);                                          \
    }

/* ---------------------------------------------------------------------------------------- */
/* weight-gradient tile */

static inline __attribute__((always_inline)) void
tw_kern(int nrows, const float *const *arows, const float *const *grows, int X, long lda,
        long ldg, float *restrict Wt, long ldw, const int MR, const int NV) {
    vf acc[MRMAX][4];
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++)
            acc[m][j] = LOADV(Wt + m * ldw + j * VW);
    for (int r = 0; r < nrows; r++) {
        const float *restrict a = arows[r];
        const float *restrict gg = grows[r];
        for (int x = 0; x < X; x++) {
            vf gv[4];
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                gv[j] = LOADV(gg + x * ldg + j * VW);
#pragma GCC unroll 16
            for (int m = 0; m < MR; m++) {
                const float av = a[x * lda + m];
#pragma GCC unroll 4
                for (int j = 0; j < NV; j++)
                    acc[m][j] += gv[j] * av;
            }
        }
    }
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++)
            STOREV(Wt + m * ldw + j * VW, acc[m][j]);
}

typedef void (*tw_fn)(int, const float *const *, const float *const *, int, long, long, float *,
                      long);

#define TW_INST(MR, NV)                                                                           \
    static void tw_##MR##_##NV(int nrows, const float *const *ar, const float *const *gr, int X,  \
                               long lda, long ldg, float *Wt, long ldw) {                         \
        tw_kern(nrows, ar, gr, X, lda, ldg, Wt, ldw, MR, NV);                                      \
    }

#define INST(MR, NV) TG_INST(MR, NV) TW_INST(MR, NV)
#define ROW3(NV) INST(1, NV) INST(2, NV) INST(3, NV)
#define ROW4(NV) ROW3(NV) INST(4, NV)
#define ROW6(NV) ROW4(NV) INST(5, NV) INST(6, NV)
#define ROW8(NV) ROW6(NV) INST(7, NV) INST(8, NV)
#define ROW12(NV) ROW8(NV) INST(9, NV) INST(10, NV) INST(11, NV) INST(12, NV)
#define ROW16(NV) ROW12(NV) INST(13, NV) INST(14, NV) INST(15, NV) INST(16, NV)

#define E(P, MR, NV) P##MR##_##NV
#define T3(P, NV) E(P, 1, NV), E(P, 2, NV), E(P, 3, NV)
#define T4(P, NV) T3(P, NV), E(P, 4, NV)
#define T6(P, NV) T4(P, NV), E(P, 5, NV), E(P, 6, NV)
#define T8(P, NV) T6(P, NV), E(P, 7, NV), E(P, 8, NV)
#define T12(P, NV) T8(P, NV), E(P, 9, NV), E(P, 10, NV), E(P, 11, NV), E(P, 12, NV)
#define T16(P, NV) T12(P, NV), E(P, 13, NV), E(P, 14, NV), E(P, 15, NV), E(P, 16, NV)

#if NREGS == 32
ROW16(1)
ROW12(2)
ROW8(3)
ROW6(4)
static const tg_fn tg_tab1[] = {T16(tg_, 1)}, tg_tab2[] = {T12(tg_, 2)}, tg_tab3[] = {T8(tg_, 3)},
                   tg_tab4[] = {T6(tg_, 4)};
static const tw_fn tw_tab1[] = {T16(tw_, 1)}, tw_tab2[] = {T12(tw_, 2)}, tw_tab3[] = {T8(tw_, 3)},
                   tw_tab4[] = {T6(tw_, 4)};
#else
ROW8(1)
ROW6(2)
ROW4(3)
ROW3(4)
static const tg_fn tg_tab1[] = {T8(tg_, 1)}, tg_tab2[] = {T6(tg_, 2)}, tg_tab3[] = {T4(tg_, 3)},
                   tg_tab4[] = {T3(tg_, 4)};
static const tw_fn tw_tab1[] = {T8(tw_, 1)}, tw_tab2[] = {T6(tw_, 2)}, tw_tab3[] = {T4(tw_, 3)},
                   tw_tab4[] = {T3(tw_, 4)};
#endif

static const tg_fn *const tg_tab[4] = {tg_tab1, tg_tab2, tg_tab3, tg_tab4};
static const tw_fn *const tw_tab[4] = {tw_tab1, tw_tab2, tw_tab3, tw_tab4};

void nn_tg_row(const nn_tg *g, int X, const float *A, const float *Bp, float *C, const float *bias,
               int nvalid, int mode) {
    const int nv = g->nr / VW;
    const int mrmax = mr_max[nv - 1];
    const int nb = (X + mrmax - 1) / mrmax;
    int x = 0;
    for (int b = 0; b < nb; b++) {
        int m = (X - x) / (nb - b);
        tg_tab[nv - 1][m - 1](g, A + (long)x * g->lda, Bp, C + (long)x * g->ldc, bias, nvalid,
                              mode);
        x += m;
    }
}

/* Partial-width tiles (fewer valid columns than a vector block: the 1x1 output convolution
 * with a handful of classes, tiny test models). Plain loops; these are a small share of work. */
static void tw_partial(int nrows, const float *const *arows, const float *const *grows, int X,
                       long lda, long ldg, int mk, int nvalid, float *Wt, long ldw) {
    for (int m = 0; m < mk; m++)
        for (int j = 0; j < nvalid; j++) {
            float s = 0.0f;
            for (int r = 0; r < nrows; r++) {
                const float *a = arows[r] + m, *gg = grows[r] + j;
                for (int x = 0; x < X; x++)
                    s += a[x * lda] * gg[x * ldg];
            }
            Wt[m * ldw + j] += s;
        }
}

void nn_tw_tile(int nrows, const float *const *arows, const float *const *grows, int X, long lda,
                long ldg, int mk, int nr, int nvalid, float *Wt, long ldw) {
    if (nvalid < nr) {
        tw_partial(nrows, arows, grows, X, lda, ldg, mk, nvalid, Wt, ldw);
        return;
    }
    tw_tab[nr / VW - 1][mk - 1](nrows, arows, grows, X, lda, ldg, Wt, ldw);
}
