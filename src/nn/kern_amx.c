/* kern_amx: the bf16 tap GEMM on AMX tiles (gemm.h nn_tg_amx, through nn_amx_tg): 32 positions at a fixed stride
 * times the column block, accumulated in four 16x16 fp32 tiles over taps and k (TDPBF16PS:
 * 16x16x32 products per instruction, where vdpbf16ps does 16x2). Tiles 0-3 hold C (positions
 * 0-15 / 16-31 x columns j..j+15 / j+16..j+31), 4-5 the two A tiles (16 positions x 32 k),
 * 6-7 two B tiles (16 k pairs x 16 columns x 2, the pair layout of pack_b16 read at its row
 * stride). The results go through a small buffer to the caller's rows, with the mode's
 * initial value and rounding applied there (AVX-512).
 * Compiled for AMX-BF16 whatever the build's flags; gemm.c uses it only where the CPU reports
 * AMX and the OS granted this process the tile state (arch_prctl). */
#if defined(__x86_64__) && defined(__linux__)
#pragma GCC target("amx-tile,amx-bf16,avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
#include "nn/kern.h"

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
            const char *a0 = (const char *)(a + g->aoff[t]), *a1 = a0 + 16 * sab;
            const char *b = (const char *)(Bp + (size_t)t * K * nr) + (size_t)j0 * 4;
            for (int k = 0; k < K; k += 32, a0 += 64, a1 += 64, b += 16 * sbb) {
                _tile_loadd(4, a0, sab);
                _tile_loadd(5, a1, sab);
                _tile_loadd(6, b, sbb);
                _tile_dpbf16ps(0, 4, 6);
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
#else
typedef int nn_kern_amx_unused; /* not an x86-64 Linux build: nothing to compile */
#endif
