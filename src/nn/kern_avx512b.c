/* kern_avx512b: kern_avx512.c's kernels built with AVX512_BF16 as well (nn_kern_avx512b): the
 * same code but for winograd-bf16's transforms, which round to bf16 with one vcvtneps2bf16 per
 * vector instead of the integer rounding (kern_wino16.h kw_cvt16). */
#define KT_AVX512B 1
#include "nn/kern_avx512.c"
