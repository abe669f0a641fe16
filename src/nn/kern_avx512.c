/* kern_avx512: the microkernels (kern_tmpl.h) for AVX-512 (F, BW, DQ, VL) + FMA, 16 floats per
 * vector, 32 registers. Compiled for that target whatever the build's flags; run only where the
 * CPU reports it (gemm.c). Shapes: 16x1, 14x2, 8x3, 6x4 positions x vectors. */
#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
#define KT_VW 16
#define KT_SYM nn_kern_avx512
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
