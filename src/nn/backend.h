/* backend: the table of operations the U-Net (unet.c), its loss and its optimizer run through.
 * The CPU engine (layers.h, loss.h, optim.h) is the reference implementation and the default
 * (nn_backend_cpu()); the CUDA backend (src/nn/cuda/backend.c, make CUDA=1) fills the same table
 * from its device library, and every GPU op is tested against its CPU entry (tests/gpu).
 *
 * Contracts:
 *  - Each layer entry has the argument list and the semantics of its CPU function (layers.h,
 *    loss.h, optim.h) with the backend first: tensors are float32 channels-last, weights in
 *    PyTorch's layout, weight and bias gradients accumulate, input gradients are overwritten.
 *    ReLU and the skip concatenation have no entries of their own: the U-Net fuses them into
 *    GroupNorm (relu) and into the first convolution of an up block (its second input).
 *  - `device` backends compute on memory of their own: every tensor given to an op comes from
 *    alloc (or stage), and host data moves only through upload, download and stage. The CPU
 *    backend's alloc is host memory and its copies are memcpy.
 *  - Workspace: an op's `ws` is a region of the caller's memory (from alloc) of at least the
 *    size its *_ws entry gives for the shape; a backend may ignore it and use the region given
 *    once to workspace() instead (the CUDA backend does: its ops carve fixed regions from it).
 *  - Errors: entries returning int report their error directly. The others return nothing: a
 *    device backend's failure there (a CUDA, cuDNN or cuBLAS error, an unsupported argument) is
 *    recorded as the backend's status with err_set()'s message, and every later op is skipped
 *    until the status is read and cleared (nn_backend_status), which the U-Net does after each
 *    pass. The CPU engine's layers cannot fail.
 *  - Ops of a device backend are asynchronous, queued in order; loss, hard_dice and download
 *    wait for what they need, and an asynchronous failure surfaces at the next of them. */
#ifndef SCAFFOLD_NN_BACKEND_H
#define SCAFFOLD_NN_BACKEND_H

#include "nn/layers.h"
#include "nn/optim.h"

#include <stddef.h>
#include <stdint.h>

typedef struct nn_backend nn_backend;

struct nn_backend {
    const char *name; /* "cpu", "cpu-devmem", "cuda" */
    int device;       /* 1: ops take memory from alloc, host data moves through copies */
    int host_access;  /* 1: that memory is host memory (MPI may read it): the CPU backends */
    nn_prec prec;     /* the only precision a device backend computes in (CPU: both) */
    int gn_round;     /* 1: the GroupNorm forward, apply and backward ops take NN_GN_RBF16 */
    int conv_round;   /* 1: in bf16 the convolution ops (3x3x3, transposed, 1x1) write results
                       * already rounded to bf16, so their gradients need no rounding pass */
    int status;       /* first recorded error, 0 if none (nn_backend_status) */

    void (*destroy)(nn_backend *b);

    /* ---- memory -------------------------------------------------------------------------- */
    int (*alloc)(nn_backend *b, void **p, size_t bytes); /* zeroed; 0 or ERR_NOMEM */
    void (*free)(nn_backend *b, void *p);
    int (*upload)(nn_backend *b, void *dst, const void *src, size_t bytes);
    int (*download)(nn_backend *b, void *dst, const void *src, size_t bytes);
    void (*zero)(nn_backend *b, void *p, size_t bytes);
    /* The workspace region of the caller's memory that every op of this backend may use. */
    void (*workspace)(nn_backend *b, float *ws, size_t floats);
    /* A batch for the next pass: x (nx floats) and y (ny labels, y may be NULL) made visible to
     * the ops as *xd, *yd (the CPU: the same pointers; CUDA: pinned staging and an asynchronous
     * copy that the next ops wait for, overlapping what is still queued). Valid until the next
     * stage call. */
    int (*stage)(nn_backend *b, const float *x, size_t nx, const uint16_t *y, size_t ny,
                 const float **xd, const uint16_t **yd);

    /* ---- workspace sizes (floats), for the layer entries below ------------------------------ */
    size_t (*conv3d_ws)(int N, int D, int H, int W, int cin, int cout, int sharded);
    size_t (*convt3d_ws)(int N, int D, int H, int W, int cin, int cout, nn_prec prec);
    size_t (*conv1_ws)(long P, int cin, int cout, nn_prec prec);
    size_t (*groupnorm_ws)(int N, long S, int C);
    size_t (*loss_ws)(int N, long S, int K);

    /* ---- layers (layers.h) ------------------------------------------------------------------ */
    void (*conv3d_forward)(nn_backend *b, float *out, const float *inA, int ca, const float *inB,
                           int cb, const float *w, int cout, int N, int D, int H, int W,
                           nn_prec prec, const nn_shard *sh, float *ws);
    void (*conv3d_backward)(nn_backend *b, float *din, float *dinB, float *dw, const float *dout,
                            const float *inA, int ca, const float *inB, int cb, const float *w,
                            int cout, int N, int D, int H, int W, nn_prec prec,
                            const nn_shard *sh, float *ws);
    void (*convt3d_forward)(nn_backend *b, float *out, const float *in, const float *w,
                            const float *bias, int cin, int cout, int N, int D, int H, int W,
                            nn_prec prec, float *ws);
    void (*convt3d_backward)(nn_backend *b, float *din, float *dw, float *db, const float *dout,
                             long ldo, const float *in, const float *w, int cin, int cout, int N,
                             int D, int H, int W, nn_prec prec, float *ws);
    void (*conv1_forward)(nn_backend *b, float *out, const float *in, const float *w,
                          const float *bias, int cin, int cout, long P, nn_prec prec, float *ws);
    void (*conv1_backward)(nn_backend *b, float *din, float *dw, float *db, const float *dout,
                           const float *in, const float *w, int cin, int cout, long P,
                           nn_prec prec, float *ws);
    /* Optional (NULL where a backend lacks it): nn_conv1_backward_relu_p, the input gradient
     * masked by the ReLU output x written over x. With it the model needs no top-level buffer
     * for the gradient of its last block's output. */
    void (*conv1_backward_relu)(nn_backend *b, float *x, float *dw, float *db, const float *dout,
                                const float *w, int cin, int cout, long P, nn_prec prec,
                                float *ws);
    void (*groupnorm_forward)(nn_backend *b, float *y, float *mean, float *rstd, const float *x,
                              const float *gamma, const float *beta, int N, long S, int C, int G,
                              int relu, float *ws, const nn_shard *sh);
    /* Optional: nn_groupnorm_forward_pool (unsharded). With it a down block's second GroupNorm
     * also makes the pool below it, one pass over its output fewer (unet.c). */
    void (*groupnorm_forward_pool)(nn_backend *b, float *y, float *mean, float *rstd,
                                   const float *x, const float *gamma, const float *beta, int N,
                                   int D, int H, int W, int C, int G, int relu, float *ws,
                                   float *pool, uint8_t *idx);
    void (*groupnorm_apply)(nn_backend *b, float *y, const float *x, const float *mean,
                            const float *rstd, const float *gamma, const float *beta, int N,
                            long S, int C, int G, int relu, float *ws);
    void (*groupnorm_backward)(nn_backend *b, float *dx, float *dgamma, float *dbeta,
                               const float *dy, const float *x, const float *y, const float *mean,
                               const float *rstd, const float *gamma, int N, long S, int C, int G,
                               int relu, float *ws, const nn_shard *sh);
    /* Optional: nn_groupnorm_backward_x, with its workspace at least groupnorm_x_ws(C, K)
     * floats (in bf16 dx rounded to bf16 where gn_round is set). With it every GroupNorm
     * backward with a ReLU takes its mask from x (one array fewer read) and an
     * activation-checkpointed model keeps two top-level buffers fewer (unet.c); that plan also
     * relies on conv3d_backward with dw NULL not reading inA and inB,
     * so that din and dinB may be their buffers. */
    void (*groupnorm_backward_x)(nn_backend *b, float *dx, float *dgamma, float *dbeta,
                                 const float *dy, const float *dz, const float *wz, int K,
                                 const float *x, const float *mean, const float *rstd,
                                 const float *gamma, const float *beta, int N, long S, int C,
                                 int G, nn_prec prec, float *ws, const nn_shard *sh);
    size_t (*groupnorm_x_ws)(int C, int K);
    void (*maxpool3d_forward)(nn_backend *b, float *out, uint8_t *idx, const float *in, int N,
                              int D, int H, int W, int C);
    void (*maxpool3d_backward)(nn_backend *b, float *din, const float *dout, const uint8_t *idx,
                               int N, int D, int H, int W, int C);
    /* Optional: nn_maxpool3d_backward_rbf16. With it (and conv_round) a bf16 run's skip + pool
     * gradient needs no rounding pass of its own (unet.c). */
    void (*maxpool3d_backward_rbf16)(nn_backend *b, float *din, const float *dout,
                                     const uint8_t *idx, int N, int D, int H, int W, int C);
    void (*to_channels_last)(nn_backend *b, float *dst, const float *src, int N, int C, long S);
    void (*to_channels_first)(nn_backend *b, float *dst, const float *src, int N, int C, long S);
    void (*round_bf16)(nn_backend *b, float *x, size_t n);
    /* Optional: nn_bf16_narrow and nn_bf16_widen. With them a bf16 run without checkpointing
     * keeps the conv outputs of its down blocks in half the memory (unet.c). */
    void (*bf16_narrow)(nn_backend *b, uint16_t *dst, const float *src, size_t n);
    void (*bf16_widen)(nn_backend *b, float *dst, const uint16_t *src, size_t n);

    /* ---- loss and metrics (loss.h; ce_weight and dice are host arrays) ----------------------- */
    int (*loss)(nn_backend *b, float *dlogits, const float *logits, const uint16_t *labels,
                const float *ce_weight, int N, long S, int K, double *loss, double *ce,
                double *dice, float *ws, const nn_shard *sh);
    int (*hard_dice)(nn_backend *b, float *dice, const float *logits, const uint16_t *labels,
                     int N, long S, int K, const nn_shard *sh);
    void (*argmax)(nn_backend *b, uint16_t *out, const float *logits, long P, int K);

    /* ---- optimizer (optim.h): o gives the kind and hyperparameters, o->step advances as in
     * nn_optim_step, `state` is the state array the update uses ----------------------------- */
    void (*clip_grad_norm)(nn_backend *b, float *grads, size_t n, double max_norm);
    void (*optim_step)(nn_backend *b, nn_optim *o, float *params, const float *grads,
                       float *state, double lr);
};

/* The CPU engine's table (static; never destroyed). */
nn_backend *nn_backend_cpu(void);

/* The CPU engine behind a device backend's discipline (tests): memory of its own, so a caller
 * that forgets an upload, download or stage computes on stale data and is caught by comparing
 * with nn_backend_cpu(). 0 or ERR_NOMEM; free with b->destroy(b). */
int nn_backend_cpu_devmem(nn_backend **out);

/* Reads the recorded status (0 when none) and clears it. */
int nn_backend_status(nn_backend *b);

/* Records err as the backend's status unless one is recorded already; returns err. */
int nn_backend_fail(nn_backend *b, int err);

#endif
