/* kern_amx: the bf16 tap GEMM on AMX tiles (gemm.h nn_tg_amx, through nn_amx_tg): 32 positions
 * at a fixed stride times the column block, accumulated in four 16x16 fp32 tiles over taps and k (TDPBF16PS:
 * 16x16x32 products per instruction, where vdpbf16ps does 16x2). Tiles 0-3 hold C (positions
 * 0-15 / 16-31 x columns j..j+15 / j+16..j+31), 4-5 the two A tiles (16 positions x 32 k),
 * 6-7 two B tiles (16 k pairs x 16 columns x 2, the pair layout of conv_pack_b16 read at its row
 * stride). The results go through a small buffer to the caller's rows, with the mode's
 * initial value and rounding applied there (AVX-512).
 * Compiled for AMX-BF16 (and AVX512_BF16, which every AMX CPU has) whatever the build's flags;
 * gemm.c uses it only where the CPU reports AMX and the OS granted this process the tile state
 * (arch_prctl). */
#if defined(__x86_64__) && defined(__linux__)
#pragma GCC target("amx-tile,amx-bf16,avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma")
#include "nn/kern.h"
#include "nn/kern_tr16.h"

#include <immintrin.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The tile configuration (palette 1): eight tiles of 16 rows x 64 bytes. Loaded once per
 * thread: it is per-thread state that the OS saves and restores with the registers. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

static __thread int amx_configured;

static void amx_configure(void) {
    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++)
        cfg.colsb[i] = 64, cfg.rows[i] = 16;
    _tile_loadconfig(&cfg);
    amx_configured = 1;
}

int nn_amx_request(void) {
    /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18): Linux hands the tile data state
     * to a process only on request; without it the first tile load faults. */
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

/* c (nv valid of 16 columns) = init + t, rounded to bf16 when asked. */
static inline __attribute__((always_inline)) void amx_store(float *c, const float *t,
                                                            const float *bias, int nv, int mode) {
    const __mmask16 mk = nv >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nv) - 1);
    __m512 v = _mm512_loadu_ps(t);
    if ((mode & 3) == NN_TG_ACCUM)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, c));
    else if ((mode & 3) == NN_TG_BIAS)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, bias));
    if (mode & NN_TG_RBF16) { /* nearest bf16, ties to even, as kern_tmpl.h */
        __m512i u = _mm512_castps_si512(v);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        u = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
        v = _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32((int)0xffff0000u)));
    }
    if ((mode & NN_TG_STREAM) && nv >= 16) /* a whole line of a 64-byte aligned row */
        _mm512_stream_ps(c, v);
    else
        _mm512_mask_storeu_ps(c, mk, v);
}

void nn_amx_tg(const nn_tg *g, const uint16_t *a, long sa, const uint16_t *Bp, float *const *c,
               const float *bias, int nvalid, int mode) {
    if (!amx_configured)
        amx_configure();
    const int T = g->T, K = g->K, nr = g->nr;
    const long sab = sa * (long)sizeof(uint16_t), sbb = (long)nr * 2 * sizeof(uint16_t);
    float tmp[32 * 32] __attribute__((aligned(64)));
    for (int j0 = 0; j0 < nvalid; j0 += 32) {
        const int two = nvalid - j0 > 16; /* a second column tile */
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int t = 0; t < T; t++) {
            const char *a0 = (const char *)(a + g->aoff[t]);
            const char *a1 = g->a16 ? a0 + g->a16 * (long)sizeof(uint16_t) : a0 + 16 * sab;
            const char *b = (const char *)(Bp + (size_t)t * K * nr) + (size_t)j0 * 4;
            for (int k = 0; k < K; k += 32, a0 += 64, a1 += 64, b += 16 * sbb) {
                _tile_loadd(4, a0, sab);
                _tile_loadd(6, b, sbb);
                _tile_dpbf16ps(0, 4, 6);
                _tile_loadd(5, a1, sab);
                _tile_dpbf16ps(2, 5, 6);
                if (two) {
                    _tile_loadd(7, b + 64, sbb);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(3, 5, 7);
                }
            }
        }
        _tile_stored(0, tmp, 128);
        _tile_stored(2, tmp + 16 * 32, 128);
        if (two) {
            _tile_stored(1, tmp + 16, 128);
            _tile_stored(3, tmp + 16 * 32 + 16, 128);
        }
        const int nv = nvalid - j0 < 32 ? nvalid - j0 : 32;
        for (int r = 0; r < 32; r++) {
            if (!c[r])
                continue;
            amx_store(c[r] + j0, tmp + r * 32, bias ? bias + j0 : NULL, nv, mode);
            if (nv > 16)
                amx_store(c[r] + j0 + 16, tmp + r * 32 + 16, bias ? bias + j0 + 16 : NULL, nv - 16,
                          mode);
        }
    }
}

float nn_amx_chains(long iters) {
    if (!amx_configured)
        amx_configure();
    static const uint16_t zeros[16 * 32] __attribute__((aligned(64))) = {0};
    float out[16 * 16] __attribute__((aligned(64)));
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, zeros, 64);
    _tile_loadd(5, zeros, 64);
    _tile_loadd(6, zeros, 64);
    _tile_loadd(7, zeros, 64);
    for (long i = 0; i < iters; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    return out[0];
}

/* ---- weight gradient (conv_amx.c conv_amx_dw) --------------------------------------------- */

void nn_amx_pack_t(uint16_t *dst, long ldd, const float *src, long lds, int nv, int nc) {
    /* 16 positions x 16 channels at a time, transposed in registers (a gather per channel and
     * 16 positions was 2.8% of a bf16 step at 5 / 64 on a Xeon with AMX) */
    for (int v0 = 0; v0 < nv; v0 += 16) {
        const int n = nv - v0 < 16 ? nv - v0 : 16;
        const __mmask16 mv = nn_mask16(n);
        for (int c0 = 0; c0 < nc; c0 += 16) {
            const int m = nc - c0 < 16 ? nc - c0 : 16;
            const __mmask16 mc = nn_mask16(m);
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = i < n ? _mm512_maskz_loadu_ps(mc, src + (size_t)(v0 + i) * lds + c0)
                             : _mm512_setzero_ps();
            nn_tr16(r);
            for (int c = 0; c < m; c++)
                _mm256_mask_storeu_epi16(dst + (size_t)(c0 + c) * ldd + v0, mv,
                                         (__m256i)_mm512_cvtneps_pbh(r[c]));
        }
    }
}

void nn_amx_pack_t32(uint16_t *dst, long ldd, const float *const *src, int nc) {
    /* two blocks of 16 positions x 16 channels transposed in registers, each channel's 32
     * values one whole line: no line is read for ownership to be written in parts */
    for (int c0 = 0; c0 < nc; c0 += 16) {
        const int m = nc - c0 < 16 ? nc - c0 : 16;
        const __mmask16 mc = nn_mask16(m);
        __m512 r[16], q[16];
        for (int i = 0; i < 16; i++) {
            r[i] = src[i] ? _mm512_maskz_loadu_ps(mc, src[i] + c0) : _mm512_setzero_ps();
            q[i] = src[16 + i] ? _mm512_maskz_loadu_ps(mc, src[16 + i] + c0)
                               : _mm512_setzero_ps();
        }
        nn_tr16(r);
        nn_tr16(q);
        for (int c = 0; c < m; c++) {
            _mm512_store_si512(dst + (size_t)(c0 + c) * ldd,
                               (__m512i)_mm512_cvtne2ps_pbh(q[c], r[c]));
        }
    }
}
void nn_amx_pack_pair(uint16_t *dst, const float *s0, const float *s1, int nc) {
    /* cvtne2ps_pbh(b, a) holds a's 16 values then b's: interleave them into (a[j], b[j]) */
    const __m512i perm = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                          24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                          16, 0);
    for (int c = 0; c < nc; c += 16) {
        const __m512 a = s0 ? _mm512_loadu_ps(s0 + c) : _mm512_setzero_ps();
        const __m512 b = s1 ? _mm512_loadu_ps(s1 + c) : _mm512_setzero_ps();
        const __m512i ab = (__m512i)_mm512_cvtne2ps_pbh(b, a);
        _mm512_storeu_si512(dst + 2 * c, _mm512_permutexvar_epi16(perm, ab));
    }
}

void nn_amx_dw(const uint16_t *xT, long ldx, const uint16_t *dyP, int cout, nn_amx_span sp,
               int nit, int not_, float *acc, long ldacc, int init) {
    if (!amx_configured)
        amx_configure();
    const long sx = ldx * (long)sizeof(uint16_t), sy = (long)cout * 2 * sizeof(uint16_t),
               sc = ldacc * (long)sizeof(float);
    float *acc1 = acc + 16 * ldacc;
    if (init) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    } else {
        _tile_loadd(0, acc, sc);
        if (not_ > 1)
            _tile_loadd(1, acc + 16, sc);
        if (nit > 1) {
            _tile_loadd(2, acc1, sc);
            if (not_ > 1)
                _tile_loadd(3, acc1 + 16, sc);
        }
    }

    /* The A tiles' 16 rows are input channels a whole slab of positions apart (32 streams for
     * two tiles): the hardware prefetchers miss them, and with A fixed in L1 (a timing
     * experiment) the pass ran 1.37x faster. Their lines 4 k steps ahead, fetched by hand:
     * 32^3 64 -> 64 5.0 -> 4.4 ms, 16^3 128 -> 128 2.5 -> 2.1, 8^3 256 -> 256 2.0 -> 1.7 (128
     * to 384 bytes ahead about equal; Intel Xeon with AMX, 2 threads). Rows under 2 KiB apart
     * (a tile pair's 32 rows within 64 KiB: the ConvTranspose3d weight gradient's at 8^3
     * input) gain nothing. */
    enum { AMX_DW_PF = 256 };
    const int pf = sx >= 2048;
    for (long i2 = 0; i2 < sp.n2; i2++)
    for (long i = 0; i < sp.n; i++) {
    const long q0 = i2 * sp.stride2 + i * sp.stride;
    const char *a0 = (const char *)(xT + q0), *a1 = a0 + 16 * sx;
    const char *b = (const char *)(dyP + q0 * cout);
    for (long q = 0; q < sp.len; q += 32, a0 += 64, a1 += 64, b += 16 * sy) {
        for (int r = 0; pf && r < 16; r++) {
            _mm_prefetch(a0 + r * sx + AMX_DW_PF, _MM_HINT_T0);
            if (nit > 1)
                _mm_prefetch(a1 + r * sx + AMX_DW_PF, _MM_HINT_T0);
        }
        _tile_loadd(4, a0, sx);
        _tile_loadd(6, b, sy);
        _tile_dpbf16ps(0, 4, 6);
        if (not_ > 1) {
            _tile_loadd(7, b + 64, sy);
            _tile_dpbf16ps(1, 4, 7);
        }
        if (nit > 1) {
            _tile_loadd(5, a1, sx);
            _tile_dpbf16ps(2, 5, 6);
            if (not_ > 1)
                _tile_dpbf16ps(3, 5, 7);
        }
    }
    }
    _tile_stored(0, acc, sc);
    if (not_ > 1)
        _tile_stored(1, acc + 16, sc);
    if (nit > 1) {
        _tile_stored(2, acc1, sc);
        if (not_ > 1)
            _tile_stored(3, acc1 + 16, sc);
    }
}

/* nearest bf16 as nn_bf16_round, a NaN kept quiet, 16 lanes */
static inline __m512 amx_round16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v), hi = _mm512_set1_epi32((int)0xffff0000u);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_and_si512(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), hi);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i q = _mm512_and_si512(_mm512_or_si512(u, _mm512_set1_epi32(0x400000)), hi);
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(r, nan, q));
}

void nn_amx_dw_finish(float *dw, long soc, long sic, const float *acc, long lda, long ldt,
                      int nic, int noc, int T) {
    /* one line of each tap row (16 output channels) into registers, rounded, then transposed
     * (taps 0-15 and 16-31, 16 x 16 each) into each output channel's run of taps: the tap rows
     * lie ldt*lda floats apart and, read element by element, evict each other from one L1 set
     * (40% of an 8^3 512->512 pass); a scalar transpose of the block was still a third of an
     * 8^3 256->256 AMX weight gradient, and 16 gathers per block (a cycle a lane) 1.8% of a
     * 5 / 64 bf16 step */
    const __mmask16 m0 = nn_mask16(T), m1 = T > 16 ? nn_mask16(T - 16) : 0;
    for (int ic = 0; ic < nic; ic++)
        for (int oc0 = 0; oc0 < noc; oc0 += 16) {
            __m512 r0[16], r1[16];
            for (int t = 0; t < 16; t++) {
                r0[t] = t < T ? amx_round16(_mm512_loadu_ps(acc + ((size_t)t * ldt + ic) * lda +
                                                            oc0))
                              : _mm512_setzero_ps();
                r1[t] = t + 16 < T ? amx_round16(_mm512_loadu_ps(
                                         acc + ((size_t)(t + 16) * ldt + ic) * lda + oc0))
                                   : _mm512_setzero_ps();
            }
            nn_tr16(r0);
            if (m1)
                nn_tr16(r1);
            for (int j = 0; j < 16; j++) {
                float *d = dw + (size_t)(oc0 + j) * soc + (size_t)ic * sic;
                _mm512_mask_storeu_ps(d, m0, _mm512_add_ps(_mm512_maskz_loadu_ps(m0, d), r0[j]));
                if (m1)
                    _mm512_mask_storeu_ps(d + 16, m1,
                                          _mm512_add_ps(_mm512_maskz_loadu_ps(m1, d + 16), r1[j]));
            }
        }
}
#else
/* Not an x86-64 Linux build: nn_isa_amx() is 0 and these are never called; plain C so that
 * they stay correct all the same. */
#include "nn/kern.h"

#include <string.h>

static uint16_t amx_bits(float f) {
    uint16_t b;
    nn_bf16_pack(&b, &f, 1);
    return b;
}

static float amx_val(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

void nn_amx_pack_t(uint16_t *dst, long ldd, const float *src, long lds, int nv, int nc) {
    for (int v = 0; v < nv; v++)
        for (int c = 0; c < nc; c++)
            dst[(size_t)c * ldd + v] = amx_bits(src[(size_t)v * lds + c]);
}

void nn_amx_pack_t32(uint16_t *dst, long ldd, const float *const *src, int nc) {
    for (int i = 0; i < 32; i++)
        for (int c = 0; c < nc; c++)
            dst[(size_t)c * ldd + i] = src[i] ? amx_bits(src[i][c]) : 0;
}

void nn_amx_pack_pair(uint16_t *dst, const float *s0, const float *s1, int nc) {
    for (int j = 0; j < nc; j++) {
        dst[2 * j] = s0 ? amx_bits(s0[j]) : 0;
        dst[2 * j + 1] = s1 ? amx_bits(s1[j]) : 0;
    }
}

void nn_amx_dw(const uint16_t *xT, long ldx, const uint16_t *dyP, int cout, nn_amx_span sp,
               int nit, int not_, float *acc, long ldacc, int init) {
    for (int i = 0; i < 16 * nit; i++)
        for (int j = 0; j < 16 * not_; j++) {
            float s = init ? 0.0f : acc[i * ldacc + j];
            for (long i2 = 0; i2 < sp.n2; i2++)
                for (long r = 0; r < sp.n; r++)
                    for (long q = i2 * sp.stride2 + r * sp.stride, e = q + sp.len; q < e; q++)
                        s += amx_val(xT[i * ldx + q]) *
                             amx_val(dyP[(q / 2) * 2 * cout + 2 * j + q % 2]);
            acc[i * ldacc + j] = s;
        }
}

void nn_amx_dw_finish(float *dw, long soc, long sic, const float *acc, long lda, long ldt,
                      int nic, int noc, int T) {
    for (int ic = 0; ic < nic; ic++)
        for (int oc = 0; oc < noc; oc++)
            for (int t = 0; t < T; t++)
                dw[(size_t)oc * soc + (size_t)ic * sic + t] +=
                    nn_bf16_round(acc[((size_t)t * ldt + ic) * lda + oc]);
}
#endif
