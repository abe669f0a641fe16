/* kern_avx512bf16: the bf16 tap-GEMM kernels (gemm.h nn_tg_block_bf16) with vdpbf16ps: each
 * instruction multiplies a pair of consecutive-k bf16 values of A (broadcast as one 32-bit
 * word) with a [nr][2] row pair of B and adds both products into fp32 accumulators, twice the
 * multiply rate of fp32 FMA. Same block shapes as kern_avx512.c. Compiled for AVX512_BF16
 * whatever the build's flags; selected only where the CPU reports it (gemm.c). */
#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma")
#include "nn/kern.h"
#include "nn/kern_tr16.h"

#include <immintrin.h>
#include <string.h>

#define KB_MRMAX 16

static inline __attribute__((always_inline)) void
kb_tg(const nn_tg *restrict g, const uint16_t *const *ap, const uint16_t *restrict Bp,
      float *const *cp, const float *restrict bias, int nvalid, int mode, const int MR,
      const int NV) {
    const int nr = NV * 16, rnd = mode & NN_TG_RBF16;
    mode &= 3;
    __m512 acc[KB_MRMAX][NN_KERN_MAXNV];
    __mmask16 mk[NN_KERN_MAXNV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++) {
        const int v = nvalid - 16 * j;
        mk[j] = v >= 16 ? (__mmask16)0xFFFF : v <= 0 ? (__mmask16)0 : (__mmask16)((1u << v) - 1);
    }
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) {
            if (mode == NN_TG_BIAS)
                acc[m][j] = _mm512_loadu_ps(bias + 16 * j);
            else if (mode == NN_TG_ACCUM)
                acc[m][j] = _mm512_maskz_loadu_ps(mk[j], cp[m] + 16 * j);
            else
                acc[m][j] = _mm512_setzero_ps();
        }
    const int T = g->T, KP = g->K / 2;
    for (int t = 0; t < T; t++) {
        const uint16_t *a[KB_MRMAX];
#pragma GCC unroll 16
        for (int m = 0; m < MR; m++)
            a[m] = ap[m] + g->aoff[t];
        const uint16_t *restrict b = Bp + (size_t)t * KP * 2 * nr;
        for (int kp = 0; kp < KP; kp++) {
            __m512bh bv[NN_KERN_MAXNV];
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                bv[j] = (__m512bh)_mm512_loadu_si512(b + ((size_t)kp * nr + 16 * j) * 2);
#pragma GCC unroll 16
            for (int m = 0; m < MR; m++) {
                uint32_t pair;
                memcpy(&pair, a[m] + 2 * kp, sizeof pair);
                const __m512bh av = (__m512bh)_mm512_set1_epi32((int)pair);
#pragma GCC unroll 4
                for (int j = 0; j < NV; j++)
                    acc[m][j] = _mm512_dpbf16_ps(acc[m][j], av, bv[j]);
            }
        }
    }
    const __m512i bias7f = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) {
            __m512 v = acc[m][j];
            if (rnd) { /* nearest bf16, ties to even, as kern_tmpl.h */
                __m512i u = _mm512_castps_si512(v);
                const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
                u = _mm512_add_epi32(u, _mm512_add_epi32(bias7f, lsb));
                v = _mm512_castsi512_ps(_mm512_and_si512(u, hi));
            }
            _mm512_mask_storeu_ps(cp[m] + 16 * j, mk[j], v);
        }
}

#define KB_INST(MR, NV)                                                                           \
    static void kb_tg_##MR##_##NV(const nn_tg *g, const uint16_t *const *a, const uint16_t *Bp,   \
                                  float *const *c, const float *bias, int nvalid, int mode) {     \
        kb_tg(g, a, Bp, c, bias, nvalid, mode, MR, NV);                                            \
    }
#define KB_E(MR, NV) kb_tg_##MR##_##NV,
#define KB_SEQ_6(F, NV) F(1, NV) F(2, NV) F(3, NV) F(4, NV) F(5, NV) F(6, NV)
#define KB_SEQ_8(F, NV) KB_SEQ_6(F, NV) F(7, NV) F(8, NV)
#define KB_SEQ_14(F, NV) KB_SEQ_8(F, NV) F(9, NV) F(10, NV) F(11, NV) F(12, NV) F(13, NV) F(14, NV)
#define KB_SEQ_16(F, NV) KB_SEQ_14(F, NV) F(15, NV) F(16, NV)

/* Shapes as kern_avx512.c: 16x1, 14x2, 8x3, 6x4. */
KB_SEQ_16(KB_INST, 1)
KB_SEQ_14(KB_INST, 2)
KB_SEQ_8(KB_INST, 3)
KB_SEQ_6(KB_INST, 4)
static const nn_tgb_fn kb_t1[] = {KB_SEQ_16(KB_E, 1)}, kb_t2[] = {KB_SEQ_14(KB_E, 2)},
                       kb_t3[] = {KB_SEQ_8(KB_E, 3)}, kb_t4[] = {KB_SEQ_6(KB_E, 4)};
const nn_tgb_fn *const nn_tgb_avx512bf16[NN_KERN_MAXNV] = {kb_t1, kb_t2, kb_t3, kb_t4};

/* The weight-gradient tile on pairs (gemm.h nn_tw_tile_bf16): MR rows of k, NV vectors of
 * columns, the reduction over pairs of rows in vdpbf16ps's pairs. */
static inline __attribute__((always_inline)) void
kb_tw(int X, const uint16_t *restrict A, long lda, const uint16_t *restrict G, long ldg,
      float *restrict Wt, long ldw, const int MR, const int NV) {
    __m512 acc[KB_MRMAX][NN_KERN_MAXNV];
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++)
            acc[m][j] = _mm512_loadu_ps(Wt + m * ldw + 16 * j);
    for (int x = 0; x < X; x++) {
        __m512bh bv[NN_KERN_MAXNV];
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++)
            bv[j] = (__m512bh)_mm512_loadu_si512(G + ((size_t)x * ldg + 16 * j) * 2);
        const uint16_t *a = A + (size_t)x * lda * 2;
#pragma GCC unroll 16
        for (int m = 0; m < MR; m++) {
            uint32_t pair;
            memcpy(&pair, a + 2 * m, sizeof pair);
            const __m512bh av = (__m512bh)_mm512_set1_epi32((int)pair);
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                acc[m][j] = _mm512_dpbf16_ps(acc[m][j], av, bv[j]);
        }
    }
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++)
            _mm512_storeu_ps(Wt + m * ldw + 16 * j, acc[m][j]);
}

#define KW_INST(MR, NV)                                                                           \
    static void kb_tw_##MR##_##NV(int X, const uint16_t *A, long lda, const uint16_t *G,          \
                                  long ldg, float *Wt, long ldw) {                                 \
        kb_tw(X, A, lda, G, ldg, Wt, ldw, MR, NV);                                                 \
    }
#define KW_E(MR, NV) kb_tw_##MR##_##NV,
KB_SEQ_16(KW_INST, 1)
KB_SEQ_14(KW_INST, 2)
KB_SEQ_8(KW_INST, 3)
KB_SEQ_6(KW_INST, 4)
static const nn_twb_fn kw_t1[] = {KB_SEQ_16(KW_E, 1)}, kw_t2[] = {KB_SEQ_14(KW_E, 2)},
                       kw_t3[] = {KB_SEQ_8(KW_E, 3)}, kw_t4[] = {KB_SEQ_6(KW_E, 4)};
const nn_twb_fn *const nn_twb_avx512bf16[NN_KERN_MAXNV] = {kw_t1, kw_t2, kw_t3, kw_t4};

void nn_kb_pack(uint16_t *dst, const float *src, long n) {
    long i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i)));
    if (i < n) {
        const __mmask16 mk = (__mmask16)((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(dst + i, mk,
                                 (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mk, src + i)));
    }
}

void nn_kb_pack_pairs(uint16_t *dst, const float *src, long sj, long sk, int two, int n) {
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32((int)sj));
    const __m512i perm = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                          24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                          16, 0);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 mk = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1);
        const float *s = src + (size_t)j * sj;
        /* contiguous rows (sj 1: ConvTranspose3d's voxel pairs) load plainly: a gather costs
         * about a cycle per lane on Zen 4 */
        const __m512 a = sj == 1 ? _mm512_maskz_loadu_ps(mk, s)
                                 : _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mk, idx, s, 4);
        const __m512 b = !two      ? _mm512_setzero_ps()
                         : sj == 1 ? _mm512_maskz_loadu_ps(mk, s + sk)
                                   : _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mk, idx, s + sk, 4);
        const __m512i ab = _mm512_permutexvar_epi16(perm, (__m512i)_mm512_cvtne2ps_pbh(b, a));
        _mm512_mask_storeu_epi32(dst + 2 * j, mk, ab);
    }
}
void nn_kb_pack_taps(uint16_t *dst, long ldt, const float *src, long sj, long sk, int two, int n,
                     int T) {
    /* the lines of k + PF (and, where a column's taps of k and k + 1 are adjacent, of its
     * partner) fetched while this pair is packed: the rows are far apart (16 streams a column
     * block) and the prefetchers fall behind; the pack of 256 -> 256 weights, forward order, ran
     * 0.33-0.44 ms without, 0.26 with (gathers: 0.31; Intel Xeon with AMX, 2 threads) */
    enum { PF = 8 };
    const __m512i perm = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                          24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                          16, 0);
    /* 16 columns x 16 taps of k and of k + 1, each read as rows of taps and transposed in
     * registers; then per tap the pairs as nn_kb_pack_pairs makes them (the same rounding) */
    for (int j0 = 0; j0 < n; j0 += 16) {
        const int m = n - j0 < 16 ? n - j0 : 16;
        const __mmask16 mk = nn_mask16(m);
        for (int t0 = 0; t0 < T; t0 += 16) {
            const int nt = T - t0 < 16 ? T - t0 : 16;
            const __mmask16 mt = nn_mask16(nt);
            __m512 a[16], b[16];
            for (int i = 0; i < 16; i++) {
                const float *s = src + (size_t)(j0 + i) * sj + t0;
                if (i < m && t0 == 0)
                    for (int l = 0; l < 16 * 4; l += 16)
                        _mm_prefetch((const char *)(s + PF * sk + l), _MM_HINT_T0);
                a[i] = i < m ? _mm512_maskz_loadu_ps(mt, s) : _mm512_setzero_ps();
                b[i] = i < m && two ? _mm512_maskz_loadu_ps(mt, s + sk) : _mm512_setzero_ps();
            }
            nn_tr16(a);
            nn_tr16(b);
            for (int t = 0; t < nt; t++) {
                const __m512i ab =
                    _mm512_permutexvar_epi16(perm, (__m512i)_mm512_cvtne2ps_pbh(b[t], a[t]));
                _mm512_mask_storeu_epi32(dst + (size_t)(t0 + t) * ldt + 2 * j0, mk, ab);
            }
        }
    }
}
#else
typedef int nn_kern_avx512bf16_unused; /* not an x86-64 build: nothing to compile */
#endif
