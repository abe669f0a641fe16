/* kern: the per-ISA table of microkernels behind gemm.h (internal to src/nn).
 *
 * kern_tmpl.h is compiled once per instruction set (kern_avx512.c, kern_avx2.c,
 * kern_portable.c, each with its own target), each defining one nn_kern table; gemm.c picks a
 * table at run time from what the CPU reports (or SCAFFOLD_ISA). */
#ifndef SCAFFOLD_NN_KERN_H
#define SCAFFOLD_NN_KERN_H

#include "nn/gemm.h"

#include <stdint.h>

/* nn_tg_fn (gemm.h): one block of m output positions (m is the index into the per-NV table,
 * plus one). */
typedef void (*nn_tw_fn)(int nrows, const float *const *arows, const float *const *grows, int X,
                         long lda, long ldg, float *Wt, long ldw, int init);

#define NN_KERN_MAXNV 4

typedef struct nn_kern {
    const char *name;
    int vw;                         /* floats per vector */
    int maxnv;                      /* widest column block, in vectors */
    int prefnv;                     /* block width for wide outputs, in vectors */
    int mr[NN_KERN_MAXNV];          /* largest position block per block width (index NV-1) */
    const nn_tg_fn *tg[NN_KERN_MAXNV]; /* [NV-1][m-1] */
    const nn_tw_fn *tw[NN_KERN_MAXNV]; /* [NV-1][mk-1] */
    /* Runs `iters` iterations of 12 independent FMA chains on one vector each (the register-only
     * peak loop); returns a value that depends on the result, so nothing is optimised away. */
    float (*fma_chains)(long iters);
    /* Winograd F(4x4x2, 3x3x3) input and output transforms of one tile (gemm.h) */
    void (*wino_in)(float *V, long ldv, const float *P, long plane, long row, long vox, int C,
                    int a0, int na);
    void (*wino_out)(float *out, long oplane, long orow, long ovox, int ncol, const float *M,
                     long ldm, int a0, int na);
    void (*wino_w)(float *u, long su, const float *w, long sc, int flip, int nc, int round);
    void (*wino_wgt)(float *d, const float *u, long su, int round);
    void (*wino_gout)(float *Mo, long ldm, const float *dy, long plane, long row, long ldy,
                      int ncol, int ncp, int a0, int na);
    /* winograd-bf16's transforms (kern_wino16.h; gemm.h nn_wino16_*) */
    void (*wino_in16)(uint16_t *V, long ldv, const float *P, long plane, long row, long vox,
                      int C);
    void (*wino_out16)(float *out, long oplane, long orow, long ovox, int ncol, const float *M,
                       long ldm);
    void (*wino_w16)(uint32_t *u, long su, const float *w, const float *w1, long sc, int flip,
                     int nc, int round);
    void (*wino_wgt16)(float *d, const float *u, long su, int round);
    void (*wino_in16p)(uint32_t *V, long ldv, const float *P, long plane, long row, long vox,
                       int C, int odd);
    void (*wino_gout16p)(uint32_t *Mo, long ldm, const float *dy, long plane, long row, long ldy,
                         int ncol, int ncp, int odd);
    void (*adam)(float *p, float *m, float *v, const float *g, long n, const nn_adam_coef *c);
} nn_kern;

extern const nn_kern nn_kern_portable;
#if defined(__x86_64__)
extern const nn_kern nn_kern_avx2, nn_kern_avx512;
/* nn_kern_avx512 built with AVX512_BF16 too (kern_avx512b.c): where the bf16 kernels run */
extern const nn_kern nn_kern_avx512b;
/* The AVX512_BF16 pair kernels, [NV-1][m-1] for the nn_kern_avx512 block shapes: the tap GEMM
 * (nn_tg_block_bf16) and the weight-gradient tile (nn_tw_tile_bf16, [NV-1][mk-1]). */
typedef void (*nn_twb_fn)(int X, const uint16_t *A, long lda, const uint16_t *G, long ldg,
                          float *Wt, long ldw);
extern const nn_tgb_fn *const nn_tgb_avx512bf16[NN_KERN_MAXNV];
extern const nn_twb_fn *const nn_twb_avx512bf16[NN_KERN_MAXNV];
/* nn_bf16_pack (gemm.h) with vcvtneps2bf16. */
void nn_kb_pack(uint16_t *dst, const float *src, long n);
/* nn_bf16_pack_pairs (gemm.h) with gathers and vcvtne2ps2bf16. */
void nn_kb_pack_pairs(uint16_t *dst, const float *src, long sj, long sk, int two, int n);
/* nn_bf16_pack_taps (gemm.h) by 16 x 16 transposes in registers and vcvtne2ps2bf16. */
void nn_kb_pack_taps(uint16_t *dst, long ldt, const float *src, long sj, long sk, int two, int n,
                     int T);
#endif
#if defined(__x86_64__) && defined(__linux__)
/* Asks Linux for the AMX tile data state for this process (kern_amx.c); 1 when granted. */
int nn_amx_request(void);
/* nn_tg_amx (gemm.h) on AMX tiles; only after nn_amx_request() returned 1. */
void nn_amx_tg(const nn_tg *g, const uint16_t *a, long sa, const uint16_t *Bp, float *const *c,
               const float *bias, int nvalid, int mode);
/* iters rounds of four TDPBF16PS on tiles in registers (16x16x32 products each), the kernels'
 * 2 x 2 tile block without its loads: the tile unit's peak (nn_amx_peak_gflops). Returns a
 * value of the result, so that the loop is not dropped. */
float nn_amx_chains(long iters);
#endif

#endif
