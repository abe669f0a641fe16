/* kern_portable: the microkernels (kern_tmpl.h) for the build's own target: the path every CPU
 * of the architecture runs (SSE2 on x86-64, NEON on aarch64; 4 floats per vector). Built with
 * NATIVE=1 it follows -march=native instead. Without FMA each update needs a temporary, so the
 * 16-register shapes are 8x1, 6x2, 3x3. */
#if defined(__AVX512F__)
#define KT_VW 16
#define KT_MR1 16
#define KT_MR2 14
#define KT_MR3 8
#define KT_MR4 6
#elif defined(__AVX__)
#define KT_VW 8
#define KT_MR1 8
#define KT_MR2 6
#define KT_MR3 4
#define KT_MR4 0
#elif defined(__aarch64__)
#define KT_VW 4
#define KT_MR1 16
#define KT_MR2 14
#define KT_MR3 8
#define KT_MR4 6
#else
#define KT_VW 4
#define KT_MR1 8
#define KT_MR2 6
#define KT_MR3 3
#define KT_MR4 0
#endif
#define KT_SYM nn_kern_portable
#define KT_NAME "portable"
#define KT_PREFNV 2
#include "nn/kern_tmpl.h"
