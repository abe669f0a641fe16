/* backend: the CPU engine's entries of the operation table (backend.h), and the same engine
 * behind a device backend's discipline for tests (memory of its own, explicit copies). */
#include "nn/backend.h"

#include "core/err.h"
#include "core/mem.h"
#include "nn/loss.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int nn_backend_status(nn_backend *b) {
    const int s = b->status;
    if (s) /* the CPU table, shared by every model, is never written */
        b->status = 0;
    return s;
}

int nn_backend_fail(nn_backend *b, int err) {
    if (err && !b->status)
        b->status = err;
    return err;
}

/* ---- memory ---------------------------------------------------------------------------------- */

/* Zeroed, 64-byte aligned; calloc's block sits in front and its address just below the result.
 * calloc, not posix_memalign and memset: a large block comes zeroed from the kernel, so the pages
 * a run never touches (the fp32 Winograd part of the workspace in a bf16 run, 0.2 GiB at scale
 * 7 / base 64) stay out of its resident memory. From 2 MiB up the block starts on a huge page
 * and is advised for them (core/mem.h). */
static int cpu_alloc(nn_backend *b, void **p, size_t bytes) {
    (void)b;
    *p = NULL;
    const size_t align = bytes >= MEM_HUGE_PAGE ? MEM_HUGE_PAGE : 64;
    const size_t head = align + sizeof(void *);
    char *raw = bytes <= SIZE_MAX - head ? calloc(1, bytes + head) : NULL;
    if (!raw)
        return err_set(ERR_NOMEM, "cannot allocate %.2f GiB", (double)bytes / (1u << 30));
    char *a = raw + sizeof(void *);
    a += (align - (uintptr_t)a % align) % align;
    memcpy(a - sizeof(void *), &raw, sizeof raw);
    *p = a;
    mem_advise_huge(a, bytes);
    return 0;
}

static void cpu_free(nn_backend *b, void *p) {
    (void)b;
    if (!p)
        return;
    void *raw;
    memcpy(&raw, (char *)p - sizeof raw, sizeof raw);
    free(raw);
}

static int cpu_copy(nn_backend *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    if (dst != src && bytes)
        memcpy(dst, src, bytes);
    return 0;
}

static void cpu_zero(nn_backend *b, void *p, size_t bytes) {
    (void)b;
    /* in one piece per thread: the gradients' 22 MB at scale 5 / 64 were ~1 ms of one thread
     * while the other waited */
    enum { ZERO_PIECE = 1 << 20 };
    const long np = (long)((bytes + ZERO_PIECE - 1) / ZERO_PIECE);
#pragma omp parallel for schedule(static) num_threads(nn_threads()) if (np > 1)
    for (long i = 0; i < np; i++)
        memset((char *)p + (size_t)i * ZERO_PIECE, 0,
               bytes - (size_t)i * ZERO_PIECE < ZERO_PIECE ? bytes - (size_t)i * ZERO_PIECE
                                                           : ZERO_PIECE);
}

static void cpu_workspace(nn_backend *b, float *ws, size_t floats) {
    (void)b, (void)ws, (void)floats; /* every CPU layer takes its workspace as an argument */
}

static int cpu_stage(nn_backend *b, const float *x, size_t nx, const uint16_t *y, size_t ny,
                     const float **xd, const uint16_t **yd) {
    (void)b, (void)nx, (void)ny;
    *xd = x;
    if (yd)
        *yd = y;
    return 0;
}

/* ---- workspace sizes ------------------------------------------------------------------------- */

static size_t cpu_conv3d_ws(int N, int D, int H, int W, int cin, int cout, int sharded) {
    return sharded ? nn_conv3d_ws_floats_sh(N, D, H, W, cin, cout)
                   : nn_conv3d_ws_floats(N, D, H, W, cin, cout);
}

static size_t cpu_groupnorm_ws(int N, long S, int C) {
    (void)N, (void)S;
    return nn_groupnorm_ws_floats(C);
}

static size_t cpu_loss_ws(int N, long S, int K) {
    (void)S;
    return nn_loss_ws_floats(N, K);
}

/* ---- layers: the engine's functions with the backend first ---------------------------------- */

static void cpu_conv3d_forward(nn_backend *b, float *out, const float *inA, int ca,
                               const float *inB, int cb, const float *w, int cout, int N, int D,
                               int H, int W, nn_prec prec, const nn_shard *sh, float *ws) {
    (void)b;
    nn_conv3d_forward_p(out, inA, ca, inB, cb, w, cout, N, D, H, W, prec, sh, ws);
}

static void cpu_conv3d_backward(nn_backend *b, float *din, float *dinB, float *dw,
                                const float *dout, const float *inA, int ca, const float *inB,
                                int cb, const float *w, int cout, int N, int D, int H, int W,
                                nn_prec prec, const nn_shard *sh, float *ws) {
    (void)b;
    nn_conv3d_backward_p(din, dinB, dw, dout, inA, ca, inB, cb, w, cout, N, D, H, W, prec, sh,
                         ws);
}

static void cpu_convt3d_forward(nn_backend *b, float *out, const float *in, const float *w,
                                const float *bias, int cin, int cout, int N, int D, int H, int W,
                                nn_prec prec, float *ws) {
    (void)b;
    nn_convt3d_forward_p(out, in, w, bias, cin, cout, N, D, H, W, prec, ws);
}

static void cpu_convt3d_backward(nn_backend *b, float *din, float *dw, float *db,
                                 const float *dout, long ldo, const float *in, const float *w,
                                 int cin, int cout, int N, int D, int H, int W, nn_prec prec,
                                 float *ws) {
    (void)b;
    nn_convt3d_backward_p(din, dw, db, dout, ldo, in, w, cin, cout, N, D, H, W, prec, ws);
}

static void cpu_conv1_forward(nn_backend *b, float *out, const float *in, const float *w,
                              const float *bias, int cin, int cout, long P, nn_prec prec,
                              float *ws) {
    (void)b;
    nn_conv1_forward_p(out, in, w, bias, cin, cout, P, prec, ws);
}

static void cpu_conv1_backward(nn_backend *b, float *din, float *dw, float *db, const float *dout,
                               const float *in, const float *w, int cin, int cout, long P,
                               nn_prec prec, float *ws) {
    (void)b;
    nn_conv1_backward_p(din, dw, db, dout, in, w, cin, cout, P, prec, ws);
}

static void cpu_conv1_backward_relu(nn_backend *b, float *x, float *dw, float *db,
                                    const float *dout, const float *w, int cin, int cout, long P,
                                    nn_prec prec, float *ws) {
    (void)b;
    nn_conv1_backward_relu_p(x, dw, db, dout, w, cin, cout, P, prec, ws);
}

static void cpu_groupnorm_forward(nn_backend *b, float *y, float *mean, float *rstd,
                                  const float *x, const float *gamma, const float *beta, int N,
                                  long S, int C, int G, int relu, float *ws, const nn_shard *sh) {
    (void)b;
    nn_groupnorm_forward_sh(y, mean, rstd, x, gamma, beta, N, S, C, G, relu, ws, sh);
}

static void cpu_groupnorm_forward_pool(nn_backend *b, float *y, float *mean, float *rstd,
                                       const float *x, const float *gamma, const float *beta,
                                       int N, int D, int H, int W, int C, int G, int relu,
                                       float *ws, float *pool, uint8_t *idx) {
    (void)b;
    nn_groupnorm_forward_pool(y, mean, rstd, x, gamma, beta, N, D, H, W, C, G, relu, ws, pool,
                              idx);
}

static void cpu_groupnorm_apply(nn_backend *b, float *y, const float *x, const float *mean,
                                const float *rstd, const float *gamma, const float *beta, int N,
                                long S, int C, int G, int relu, float *ws) {
    (void)b;
    nn_groupnorm_apply(y, x, mean, rstd, gamma, beta, N, S, C, G, relu, ws);
}

static void cpu_groupnorm_backward(nn_backend *b, float *dx, float *dgamma, float *dbeta,
                                   const float *dy, const float *x, const float *y,
                                   const float *mean, const float *rstd, const float *gamma,
                                   int N, long S, int C, int G, int relu, float *ws,
                                   const nn_shard *sh) {
    (void)b;
    nn_groupnorm_backward_sh(dx, dgamma, dbeta, dy, x, y, mean, rstd, gamma, N, S, C, G, relu,
                             ws, sh);
}

static void cpu_groupnorm_backward_x(nn_backend *b, float *dx, float *dgamma, float *dbeta,
                                     const float *dy, const float *dz, const float *wz, int K,
                                     const float *x, const float *mean, const float *rstd,
                                     const float *gamma, const float *beta, int N, long S, int C,
                                     int G, nn_prec prec, float *ws, const nn_shard *sh) {
    (void)b;
    nn_groupnorm_backward_x(dx, dgamma, dbeta, dy, dz, wz, K, x, mean, rstd, gamma, beta, N, S,
                            C, G, prec, ws, sh);
}

static void cpu_maxpool3d_forward(nn_backend *b, float *out, uint8_t *idx, const float *in,
                                  int N, int D, int H, int W, int C) {
    (void)b;
    nn_maxpool3d_forward(out, idx, in, N, D, H, W, C);
}

static void cpu_maxpool3d_backward(nn_backend *b, float *din, const float *dout,
                                   const uint8_t *idx, int N, int D, int H, int W, int C) {
    (void)b;
    nn_maxpool3d_backward(din, dout, idx, N, D, H, W, C);
}

static void cpu_maxpool3d_backward_rbf16(nn_backend *b, float *din, const float *dout,
                                         const uint8_t *idx, int N, int D, int H, int W, int C) {
    (void)b;
    nn_maxpool3d_backward_rbf16(din, dout, idx, N, D, H, W, C);
}

static void cpu_to_channels_last(nn_backend *b, float *dst, const float *src, int N, int C,
                                 long S) {
    (void)b;
    nn_to_channels_last(dst, src, N, C, S);
}

static void cpu_to_channels_first(nn_backend *b, float *dst, const float *src, int N, int C,
                                  long S) {
    (void)b;
    nn_to_channels_first(dst, src, N, C, S);
}

static void cpu_round_bf16(nn_backend *b, float *x, size_t n) {
    (void)b;
    nn_round_bf16(x, n);
}

static void cpu_bf16_narrow(nn_backend *b, uint16_t *dst, const float *src, size_t n) {
    (void)b;
    nn_bf16_narrow(dst, src, n);
}

static void cpu_bf16_widen(nn_backend *b, float *dst, const uint16_t *src, size_t n) {
    (void)b;
    nn_bf16_widen(dst, src, n);
}

static int cpu_loss(nn_backend *b, float *dlogits, const float *logits, const uint16_t *labels,
                    const float *ce_weight, int N, long S, int K, double *loss, double *ce,
                    double *dice, float *ws, const nn_shard *sh) {
    (void)b;
    return nn_loss_sh(dlogits, logits, labels, ce_weight, N, S, K, loss, ce, dice, ws, sh);
}

static int cpu_hard_dice(nn_backend *b, float *dice, const float *logits, const uint16_t *labels,
                         int N, long S, int K, const nn_shard *sh) {
    (void)b;
    return nn_hard_dice_sh(dice, logits, labels, N, S, K, sh);
}

static void cpu_argmax(nn_backend *b, uint16_t *out, const float *logits, long P, int K) {
    (void)b;
    nn_argmax(out, logits, P, K);
}

static void cpu_clip_grad_norm(nn_backend *b, float *grads, size_t n, double max_norm) {
    (void)b;
    nn_clip_grad_norm(grads, n, max_norm);
}

static void cpu_optim_step(nn_backend *b, nn_optim *o, float *params, const float *grads,
                           float *state, double lr) {
    (void)b;
    float *own = o->state;
    o->state = state;
    nn_optim_step(o, params, grads, lr);
    o->state = own;
}

static nn_backend cpu_table = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .workspace = cpu_workspace,
    .stage = cpu_stage,
    .gn_round = 1,
    .conv_round = 1,
    .conv3d_ws = cpu_conv3d_ws,
    .convt3d_ws = nn_convt3d_ws_floats_p,
    .conv1_ws = nn_conv1_ws_floats_p,
    .groupnorm_ws = cpu_groupnorm_ws,
    .loss_ws = cpu_loss_ws,
    .conv3d_forward = cpu_conv3d_forward,
    .conv3d_backward = cpu_conv3d_backward,
    .convt3d_forward = cpu_convt3d_forward,
    .convt3d_backward = cpu_convt3d_backward,
    .conv1_forward = cpu_conv1_forward,
    .conv1_backward = cpu_conv1_backward,
    .conv1_backward_relu = cpu_conv1_backward_relu,
    .groupnorm_forward = cpu_groupnorm_forward,
    .groupnorm_forward_pool = cpu_groupnorm_forward_pool,
    .groupnorm_apply = cpu_groupnorm_apply,
    .groupnorm_backward = cpu_groupnorm_backward,
    .groupnorm_backward_x = cpu_groupnorm_backward_x,
    .groupnorm_x_ws = nn_groupnorm_x_ws_floats,
    .maxpool3d_forward = cpu_maxpool3d_forward,
    .maxpool3d_backward = cpu_maxpool3d_backward,
    .maxpool3d_backward_rbf16 = cpu_maxpool3d_backward_rbf16,
    .to_channels_last = cpu_to_channels_last,
    .to_channels_first = cpu_to_channels_first,
    .round_bf16 = cpu_round_bf16,
    .bf16_narrow = cpu_bf16_narrow,
    .bf16_widen = cpu_bf16_widen,
    .loss = cpu_loss,
    .hard_dice = cpu_hard_dice,
    .argmax = cpu_argmax,
    .clip_grad_norm = cpu_clip_grad_norm,
    .optim_step = cpu_optim_step,
};

nn_backend *nn_backend_cpu(void) {
    return &cpu_table; /* its entries never record a status: nothing writes it */
}

/* ---- the CPU engine as a device backend (tests) ----------------------------------------------- */

typedef struct devmem {
    nn_backend b; /* first: the table */
    void *batch;  /* the staged batch: x then y */
    size_t batch_bytes;
} devmem;

/* A staged batch is copied, as to a device: the caller's buffers are not read afterwards. */
static int devmem_stage(nn_backend *b, const float *x, size_t nx, const uint16_t *y, size_t ny,
                        const float **xd, const uint16_t **yd) {
    devmem *d = (devmem *)b;
    const size_t xb = (nx * sizeof(float) + 63) & ~(size_t)63, bytes = xb + ny * sizeof *y;
    if (bytes > d->batch_bytes) {
        cpu_free(b, d->batch);
        d->batch_bytes = 0;
        int rc = cpu_alloc(b, &d->batch, bytes);
        if (rc)
            return rc;
        d->batch_bytes = bytes;
    }
    char *p = d->batch;
    memcpy(p, x, nx * sizeof(float));
    if (ny)
        memcpy(p + xb, y, ny * sizeof *y);
    *xd = (const float *)p;
    if (yd)
        *yd = ny ? (const uint16_t *)(p + xb) : NULL;
    return 0;
}

static void devmem_destroy(nn_backend *b) {
    devmem *d = (devmem *)b;
    if (d)
        cpu_free(b, d->batch);
    free(d);
}

int nn_backend_cpu_devmem(nn_backend **out) {
    *out = NULL;
    devmem *d = calloc(1, sizeof *d);
    if (!d)
        return err_set(ERR_NOMEM, "backend: out of memory");
    d->b = cpu_table;
    d->b.name = "cpu-devmem";
    d->b.device = 1;
    d->b.host_access = 1;
    d->b.destroy = devmem_destroy;
    d->b.stage = devmem_stage;
    *out = &d->b;
    return 0;
}
