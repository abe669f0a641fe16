/* kern_avx512: the microkernels (kern_tmpl.h) for AVX-512 (F, BW, DQ, VL) + FMA, 16 floats per
 * vector, 32 registers. Compiled for that target whatever the build's flags; run only where the
 * CPU reports it (gemm.c). Shapes: 16x1, 14x2, 8x3, 6x4 positions x vectors.
 * kern_avx512b.c includes this file with KT_AVX512B defined: the same kernels built with
 * AVX512_BF16 as well (nn_kern_avx512b), whose winograd-bf16 transforms round with
 * vcvtneps2bf16; gemm.c runs it instead where the CPU has AVX512_BF16 and the bf16 kernels are
 * on. */
#if defined(__x86_64__)
#ifdef KT_AVX512B
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma")
#define KT_SYM nn_kern_avx512b
#define KT_CVTBF16(v) _mm512_cvtneps_pbh((__m512)(v))
#else
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
#define KT_SYM nn_kern_avx512
#endif
#define KT_VW 16
#define KT_NAME "avx512"
#define KT_MR1 16
#define KT_MR2 14
#define KT_MR3 8
#define KT_MR4 6
#define KT_PREFNV 2
#include <immintrin.h>
#define KT_STREAM(p, v) _mm512_stream_ps((float *)(p), (__m512)(v))
#include "nn/kern_tmpl.h"
#else
typedef int nn_kern_avx512_unused; /* not an x86-64 build: nothing to compile */
#endif
