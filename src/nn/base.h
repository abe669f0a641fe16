/* base: the engine's smallest shared helpers, below the layers and the convolutions: the
 * convolutions' precision (nn_prec), bf16 rounding and storage, the thread count the layers use
 * (an OpenMP team bounded by NN_MAX_THREADS), and what that team got of the CPUs (its CPU time,
 * its run-queue wait: a busy host is named rather than measured). Implemented in base.c. */
#ifndef SCAFFOLD_NN_BASE_H
#define SCAFFOLD_NN_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Precision of the convolutions. NN_BF16 follows PyTorch's CPU autocast: inputs, weights and
 * bias are rounded to bf16, products accumulate in fp32, outputs (forward results, input,
 * weight and bias gradients) are rounded to bf16 and returned in fp32 arrays; the output
 * gradient `dout` a backward pass receives must already hold bf16 values (autocast's gradient
 * of a bf16 tensor is bf16: round with nn_round_bf16). GroupNorm, ReLU, pooling, softmax and
 * the loss stay fp32. */
typedef enum { NN_FP32 = 0, NN_BF16 = 1 } nn_prec;

/* x rounded to the nearest bf16 (ties to even), as fp32 (a NaN stays a quiet NaN); the same in
 * place over n floats. Inline: the element loops that round (GroupNorm's output) vectorise. */
static inline float nn_bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x400000u) & 0xffff0000u
                                         : (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}
/* The bf16 bits of nn_bf16_round(x) (vdpbf16ps operands, AMX tiles). */
static inline uint16_t nn_bf16_bits(float x) {
    const float r = nn_bf16_round(x);
    uint32_t u;
    memcpy(&u, &r, sizeof u);
    return (uint16_t)(u >> 16);
}
/* The element loops outside the kernels are plain C, and the library is built for the baseline
 * ISA (SSE2 on x86-64, see the Makefile): NN_WIDE builds a function also for AVX-512 and AVX2,
 * and the loader picks the widest the CPU has (GroupNorm's backward at 32^3 x 64 1.14x; per bf16
 * step at scale 5 / base 64 on a Xeon with AMX, the rounding passes 1.1 -> 0.4 ms and the 1x1
 * convolution's backward 2.8 -> 1.6 ms). A reduction's order does not
 * change with the width, so a CPU's results do not depend on the threads; only FMA contraction
 * can differ between builds for different CPUs. Parallel loops call an NN_WIDE function per
 * piece: the outlined body of `omp parallel for` would be built for the baseline only. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#define NN_WIDE __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define NN_WIDE
#endif

void nn_round_bf16(float *x, size_t n);
/* dst[i] = nn_bf16_round(src[i]) (dst may be src); _span: the same on the calling thread. */
void nn_round_bf16_to(float *dst, const float *src, size_t n);
void nn_round_bf16_span(float *dst, const float *src, size_t n);
/* dst[i] = src[i] - nn_bf16_round(src[i]), exact in fp32 (the low part of a bf16 split: x = hi
 * + lo with hi and bf16(lo) carrying 16 of x's 24 significand bits); _span: on the calling
 * thread. */
void nn_bf16_lo(float *dst, const float *src, size_t n);
void nn_bf16_lo_span(float *dst, const float *src, size_t n);
/* Storage of a tensor whose values are bf16 (a bf16 run's conv outputs) in half the bytes:
 * dst[i] = the upper 16 bits of src[i] (exact for bf16 values, denormals included), and back. */
void nn_bf16_narrow(uint16_t *dst, const float *src, size_t n);
void nn_bf16_widen(float *dst, const uint16_t *src, size_t n);

#define NN_MAX_THREADS 64
#define NN_SLICES 64 /* fixed partition of every reduction over voxels */

/* Threads the layers use: min(omp_get_max_threads(), NN_MAX_THREADS). */
int nn_threads(void);
/* Sets the threads the layers use from now on (the calling thread's OpenMP default; the
 * engine's parallel regions start from the thread that owns the model). */
void nn_set_threads(int n);
/* CPU seconds the threads of an nn_threads() team have run so far, summed (each read by its own
 * thread; without OpenMP the process's). The difference across a pass against its wall time
 * times nn_threads() is the share of the CPUs the pass got: well below 1 when other work shares
 * the cores or there are fewer cores than threads. */
double nn_team_cpu_seconds(void);
/* Seconds the threads of an nn_threads() team have waited on a run queue so far, summed (Linux
 * schedstat: ready to run while another task held the CPU); -1 where the kernel does not say.
 * Over a run, against its wall time times nn_threads(): the share of its time the team waited
 * for a CPU (about 0.01 on a quiet host, 0.3-0.5 with busy processes beside it). */
double nn_team_wait_seconds(void);

#endif
