/* kern_avx2: the microkernels (kern_tmpl.h) for AVX2 + FMA, 8 floats per vector, 16 registers.
 * Compiled for that target whatever the build's flags; run only where the CPU reports it
 * (gemm.c). Shapes: 8x1, 6x2, 4x3 positions x vectors (a 3x4 block needs 17 registers). */
#if defined(__x86_64__)
#pragma GCC target("avx2,fma")
#define KT_VW 8
#define KT_SYM nn_kern_avx2
#define KT_NAME "avx2"
#define KT_MR1 8
#define KT_MR2 6
#define KT_MR3 4
#define KT_MR4 0
#define KT_PREFNV 2
#include <immintrin.h>
#define KT_STREAM(p, v) _mm256_stream_ps((float *)(p), (__m256)(v))
#include "nn/kern_tmpl.h"
#else
typedef int nn_kern_avx2_unused; /* not an x86-64 build: nothing to compile */
#endif
