/* backend: the CUDA backend's entries of the U-Net's operation table (src/nn/backend.h) over the
 * device library (cu.h): memory and copies, the batch staging ring, the packed-weight cache,
 * the CE weights' device copy, and one wrapper per layer that turns the device library's
 * status into the table's recorded status.
 *
 * Packed weights: cuDNN reads convolution weights in its own layout and the compute precision
 * (cu_pack_*). Each weight the U-Net passes is packed on its first use after a change of the
 * parameters into a buffer of its own, found by the weight's address (cu_wcache, host.c). The
 * parameters change only through upload and optim_step, which advance the cache's version, so
 * a weight is packed once per optimizer step and reused by the forward pass, the recomputation
 * of activation checkpointing and the backward pass. */
#include "nn/cuda/cu_int.h"

#include "nn/backend.h"

#include <stdlib.h>
#include <string.h>

#define STAGE_SLOTS 2

typedef struct cu_be {
    nn_backend b; /* first: the table */
    cu_ctx *c;
    cu_wcache wc;
    /* batch staging: x then y in each slot */
    cu_stage *st;
    size_t st_bytes;
    int slot; /* last slot staged, -1 before the first */
    /* CE class weights: the host values last uploaded and their device copy */
    float ce_host[256];
    float *ce_dev;
    int ce_k;
} cu_be;

static cu_be *be_of(nn_backend *b) {
    return (cu_be *)b;
}

/* Records a failure of the device library (rc < 0) as the table's status. */
static int rec(nn_backend *b, int rc) {
    return rc ? nn_backend_fail(b, rc) : 0;
}

/* The ops are skipped once a failure is recorded (backend.h): their inputs may be garbage. */
#define SKIP_IF_FAILED(b)                                                                          \
    do {                                                                                           \
        if ((b)->status)                                                                           \
            return;                                                                                \
    } while (0)

static int check_prec(nn_backend *b, nn_prec prec) {
    if (prec != b->prec)
        return rec(b, err_set(ERR_INTERNAL,
                              "CUDA backend created for %s, asked for a %s op: one context "
                              "computes in one precision",
                              b->prec == NN_BF16 ? "bf16" : "fp32",
                              prec == NN_BF16 ? "bf16" : "fp32"));
    return 0;
}

static int check_unsharded(nn_backend *b, const nn_shard *sh) {
    if (sh)
        return rec(b, err_set(ERR_CONFIG, "the CUDA backend does not run spatially sharded "
                                          "models: use device: cpu with dc_num_shards"));
    return 0;
}

/* ---- memory ---------------------------------------------------------------------------------- */

static int be_alloc(nn_backend *b, void **p, size_t bytes) {
    be_of(b)->wc.version++; /* a new buffer may reuse the address of a freed weight */
    return cu_alloc(p, bytes);
}

static void be_free(nn_backend *b, void *p) {
    if (!p)
        return;
    cu_sync(be_of(b)->c); /* no queued op may still use it */
    cu_free(p);
    be_of(b)->wc.version++;
}

static int be_upload(nn_backend *b, void *dst, const void *src, size_t bytes) {
    be_of(b)->wc.version++;
    return rec(b, cu_upload(be_of(b)->c, dst, src, bytes));
}

static int be_download(nn_backend *b, void *dst, const void *src, size_t bytes) {
    return rec(b, cu_download(be_of(b)->c, dst, src, bytes));
}

static void be_zero(nn_backend *b, void *p, size_t bytes) {
    SKIP_IF_FAILED(b);
    rec(b, cu_zero(be_of(b)->c, p, bytes));
}

static void be_workspace(nn_backend *b, float *ws, size_t floats) {
    cu_ctx_set_workspace(be_of(b)->c, ws, floats * sizeof(float));
}

/* Two slots: while the ops of one batch run, the next batch is copied into the other. Before a
 * slot is refilled, the copy stream waits for every op queued up to the staging of the batch
 * after it, i.e. for every use of the slot's previous batch. */
static int be_stage(nn_backend *b, const float *x, size_t nx, const uint16_t *y, size_t ny,
                    const float **xd, const uint16_t **yd) {
    cu_be *e = be_of(b);
    if (b->status)
        return b->status;
    const size_t xb = (nx * sizeof(float) + 255) & ~(size_t)255, bytes = xb + ny * sizeof *y;
    if (bytes > e->st_bytes) { /* first batch, or a larger one: a new ring */
        cu_stage_free(e->st);
        e->st = NULL;
        e->st_bytes = 0;
        e->slot = -1;
        int rc = cu_stage_create(e->c, &e->st, bytes, STAGE_SLOTS);
        if (rc)
            return rec(b, rc);
        e->st_bytes = bytes;
    }
    if (e->slot >= 0) {
        int rc = cu_stage_release(e->st, e->slot);
        if (rc)
            return rec(b, rc);
    }
    const int s = (e->slot + 1) % STAGE_SLOTS;
    char *h = cu_stage_host(e->st, s);
    if (!h)
        return rec(b, err_code() ? err_code() : ERR_INTERNAL);
    memcpy(h, x, nx * sizeof(float));
    if (ny)
        memcpy(h + xb, y, ny * sizeof *y);
    int rc = cu_stage_send(e->st, s, bytes);
    if (rc)
        return rec(b, rc);
    char *d = cu_stage_device(e->st, s);
    if (!d)
        return rec(b, err_code() ? err_code() : ERR_INTERNAL);
    e->slot = s;
    *xd = (const float *)d;
    if (yd)
        *yd = ny ? (const uint16_t *)(d + xb) : NULL;
    return 0;
}

/* ---- workspace sizes: the device library's plans, in floats -------------------------------- */

static size_t plan_floats(const cu_ws_plan *p) {
    return (p->total + sizeof(float) - 1) / sizeof(float);
}

/* The CUDA table is made per precision (the sizes depend on it): two sets of entries. */
static size_t conv3d_ws_p(int N, int D, int H, int W, int cin, int cout, int bf16) {
    cu_ws_plan p;
    cu_conv3d_ws_plan(&p, N, D, H, W, cin, cout, bf16);
    return plan_floats(&p);
}
static size_t conv3d_ws_f32(int N, int D, int H, int W, int cin, int cout, int sharded) {
    (void)sharded;
    return conv3d_ws_p(N, D, H, W, cin, cout, 0);
}
static size_t conv3d_ws_b16(int N, int D, int H, int W, int cin, int cout, int sharded) {
    (void)sharded;
    return conv3d_ws_p(N, D, H, W, cin, cout, 1);
}
static size_t convt3d_ws(int N, int D, int H, int W, int cin, int cout, nn_prec prec) {
    cu_ws_plan p;
    cu_convt3d_ws_plan(&p, N, D, H, W, cin, cout, prec == NN_BF16);
    return plan_floats(&p);
}
static size_t conv1_ws(long P, int cin, int cout, nn_prec prec) {
    cu_ws_plan p;
    cu_conv1_ws_plan(&p, P, cin, cout, prec == NN_BF16);
    return plan_floats(&p);
}
static size_t groupnorm_ws(int N, long S, int C) {
    cu_ws_plan p;
    cu_groupnorm_ws_plan(&p, N, S, C);
    return plan_floats(&p);
}
static size_t loss_ws(int N, long S, int K) {
    cu_ws_plan p, q, r;
    cu_loss_ws_plan(&p, N, S, K);
    cu_dice_ws_plan(&q, N, K);
    cu_norm_ws_plan(&r); /* the optimizer's clipping runs between passes, in the same region */
    size_t m = p.total > q.total ? p.total : q.total;
    m = m > r.total ? m : r.total;
    return (m + sizeof(float) - 1) / sizeof(float);
}

/* ---- packed weights ------------------------------------------------------------------------- */

/* The packed copy of weight w (k = 3: Conv3d (cout, ca + cb, 3,3,3) for inputs of ca and cb
 * channels; k = 2: ConvTranspose3d (ca, cout, 2,2,2), cb = 0), packed now if the parameters
 * changed since. NULL on failure (recorded). */
static const void *packed(nn_backend *b, const float *w, int ca, int cb, int cout, int k) {
    cu_be *e = be_of(b);
    const int cin = ca + cb;
    int fresh = 0;
    int i = cu_wcache_find(&e->wc, w, ca, cin, cout, k, &fresh);
    if (i < 0) {
        rec(b, i);
        return NULL;
    }
    cu_wcache_entry *en = &e->wc.e[i];
    if (fresh || !en->packed) {
        cu_sync(e->c); /* an old buffer may still be read by queued ops */
        cu_free(en->packed);
        en->packed = NULL;
        int rc = cu_alloc(&en->packed, cu_packed_bytes(cin, cout, k, b->prec == NN_BF16));
        if (rc) {
            en->packed = NULL;
            rec(b, rc);
            return NULL;
        }
    }
    if (en->version != e->wc.version) {
        int rc = k == 3 ? cu_pack_conv3d(e->c, en->packed, w, cout, ca, cb)
                        : cu_pack_convt3d(e->c, en->packed, w, cin, cout);
        if (rc) {
            rec(b, rc);
            return NULL;
        }
        en->version = e->wc.version;
    }
    return en->packed;
}

/* The packed weights of a convolution layer (see packed); NULL, skipping the layer, when the
 * backend already failed, prec is not its precision, the layer is sharded or packing failed. */
static const void *layer_weights(nn_backend *b, nn_prec prec, const nn_shard *sh, const float *w,
                                 int ca, int cb, int cout, int k) {
    if (b->status || check_prec(b, prec) || check_unsharded(b, sh))
        return NULL;
    return packed(b, w, ca, cb, cout, k);
}

/* ---- layers ---------------------------------------------------------------------------------- */

static void conv3d_forward(nn_backend *b, float *out, const float *inA, int ca, const float *inB,
                           int cb, const float *w, int cout, int N, int D, int H, int W,
                           nn_prec prec, const nn_shard *sh, float *ws) {
    (void)ws;
    const void *wp = layer_weights(b, prec, sh, w, ca, inB ? cb : 0, cout, 3);
    if (wp)
        rec(b, cu_conv3d_forward(be_of(b)->c, out, inA, ca, inB, cb, wp, cout, N, D, H, W));
}

static void conv3d_backward(nn_backend *b, float *din, float *dinB, float *dw, const float *dout,
                            const float *inA, int ca, const float *inB, int cb, const float *w,
                            int cout, int N, int D, int H, int W, nn_prec prec,
                            const nn_shard *sh, float *ws) {
    (void)ws;
    const void *wp = layer_weights(b, prec, sh, w, ca, inB ? cb : 0, cout, 3);
    if (wp)
        rec(b, cu_conv3d_backward(be_of(b)->c, din, dinB, dw, dout, inA, ca, inB, cb, wp, cout, N,
                                  D, H, W));
}

static void convt3d_forward(nn_backend *b, float *out, const float *in, const float *w,
                            const float *bias, int cin, int cout, int N, int D, int H, int W,
                            nn_prec prec, float *ws) {
    (void)ws;
    const void *wp = layer_weights(b, prec, NULL, w, cin, 0, cout, 2);
    if (wp)
        rec(b, cu_convt3d_forward(be_of(b)->c, out, in, wp, bias, cin, cout, N, D, H, W));
}

static void convt3d_backward(nn_backend *b, float *din, float *dw, float *db, const float *dout,
                             long ldo, const float *in, const float *w, int cin, int cout, int N,
                             int D, int H, int W, nn_prec prec, float *ws) {
    (void)ws;
    const void *wp = layer_weights(b, prec, NULL, w, cin, 0, cout, 2);
    if (wp)
        rec(b, cu_convt3d_backward(be_of(b)->c, din, dw, db, dout, ldo, in, wp, cin, cout, N, D,
                                   H, W));
}

static void conv1_forward(nn_backend *b, float *out, const float *in, const float *w,
                          const float *bias, int cin, int cout, long P, nn_prec prec, float *ws) {
    (void)ws;
    SKIP_IF_FAILED(b);
    if (!check_prec(b, prec))
        rec(b, cu_conv1_forward(be_of(b)->c, out, in, w, bias, cin, cout, P));
}

static void conv1_backward(nn_backend *b, float *din, float *dw, float *db, const float *dout,
                           const float *in, const float *w, int cin, int cout, long P,
                           nn_prec prec, float *ws) {
    (void)ws;
    SKIP_IF_FAILED(b);
    if (!check_prec(b, prec))
        rec(b, cu_conv1_backward(be_of(b)->c, din, dw, db, dout, in, w, cin, cout, P));
}

static void groupnorm_forward(nn_backend *b, float *y, float *mean, float *rstd, const float *x,
                              const float *gamma, const float *beta, int N, long S, int C, int G,
                              int relu, float *ws, const nn_shard *sh) {
    (void)ws;
    SKIP_IF_FAILED(b);
    if (!check_unsharded(b, sh))
        rec(b, cu_groupnorm_forward(be_of(b)->c, y, mean, rstd, x, gamma, beta, N, S, C, G,
                                    relu));
}

static void groupnorm_apply(nn_backend *b, float *y, const float *x, const float *mean,
                            const float *rstd, const float *gamma, const float *beta, int N,
                            long S, int C, int G, int relu, float *ws) {
    (void)ws;
    SKIP_IF_FAILED(b);
    rec(b, cu_groupnorm_apply(be_of(b)->c, y, x, mean, rstd, gamma, beta, N, S, C, G, relu));
}

static void groupnorm_backward(nn_backend *b, float *dx, float *dgamma, float *dbeta,
                               const float *dy, const float *x, const float *y, const float *mean,
                               const float *rstd, const float *gamma, int N, long S, int C, int G,
                               int relu, float *ws, const nn_shard *sh) {
    (void)ws;
    SKIP_IF_FAILED(b);
    if (!check_unsharded(b, sh))
        rec(b, cu_groupnorm_backward(be_of(b)->c, dx, dgamma, dbeta, dy, x, y, mean, rstd, gamma,
                                     N, S, C, G, relu));
}

static void maxpool_forward(nn_backend *b, float *out, uint8_t *idx, const float *in, int N,
                            int D, int H, int W, int C) {
    SKIP_IF_FAILED(b);
    rec(b, cu_maxpool3d_forward(be_of(b)->c, out, idx, in, N, D, H, W, C));
}

static void maxpool_backward(nn_backend *b, float *din, const float *dout, const uint8_t *idx,
                             int N, int D, int H, int W, int C) {
    SKIP_IF_FAILED(b);
    rec(b, cu_maxpool3d_backward(be_of(b)->c, din, dout, idx, N, D, H, W, C));
}

static void to_last(nn_backend *b, float *dst, const float *src, int N, int C, long S) {
    SKIP_IF_FAILED(b);
    rec(b, cu_to_channels_last(be_of(b)->c, dst, src, N, C, S));
}

static void to_first(nn_backend *b, float *dst, const float *src, int N, int C, long S) {
    SKIP_IF_FAILED(b);
    rec(b, cu_to_channels_first(be_of(b)->c, dst, src, N, C, S));
}

static void round_bf16(nn_backend *b, float *x, size_t n) {
    SKIP_IF_FAILED(b);
    rec(b, cu_round_bf16(be_of(b)->c, x, n));
}

static void bf16_narrow(nn_backend *b, uint16_t *dst, const float *src, size_t n) {
    SKIP_IF_FAILED(b);
    rec(b, cu_bf16_narrow(be_of(b)->c, dst, src, n));
}

static void bf16_widen(nn_backend *b, float *dst, const uint16_t *src, size_t n) {
    SKIP_IF_FAILED(b);
    rec(b, cu_bf16_widen(be_of(b)->c, dst, src, n));
}

/* ---- loss, metrics, optimizer ------------------------------------------------------------------ */

/* The device copy of the K CE weights, uploaded when they differ from the last ones. */
static const float *ce_weights(nn_backend *b, const float *w, int K) {
    cu_be *e = be_of(b);
    if (K < 1 || K > 256) {
        rec(b, err_set(ERR_RANGE, "%d classes: the loss supports 1..256", K));
        return NULL;
    }
    if (!e->ce_dev) {
        int rc = cu_alloc((void **)&e->ce_dev, 256 * sizeof(float));
        if (rc) {
            e->ce_dev = NULL;
            rec(b, rc);
            return NULL;
        }
    }
    if (K != e->ce_k || memcmp(e->ce_host, w, (size_t)K * sizeof *w)) {
        if (rec(b, cu_upload(e->c, e->ce_dev, w, (size_t)K * sizeof *w)))
            return NULL;
        memcpy(e->ce_host, w, (size_t)K * sizeof *w);
        e->ce_k = K;
    }
    return e->ce_dev;
}

static int loss(nn_backend *b, float *dlogits, const float *logits, const uint16_t *labels,
                const float *ce_weight, int N, long S, int K, double *l, double *ce, double *dice,
                float *ws, const nn_shard *sh) {
    (void)ws;
    if (b->status)
        return b->status;
    if (check_unsharded(b, sh))
        return b->status;
    const float *w = ce_weights(b, ce_weight, K);
    if (!w)
        return b->status;
    return rec(b, cu_loss(be_of(b)->c, dlogits, logits, labels, w, N, S, K, l, ce, dice));
}

static int hard_dice(nn_backend *b, float *dice, const float *logits, const uint16_t *labels,
                     int N, long S, int K, const nn_shard *sh) {
    if (b->status)
        return b->status;
    if (check_unsharded(b, sh))
        return b->status;
    return rec(b, cu_hard_dice(be_of(b)->c, dice, logits, labels, N, S, K));
}

static void argmax(nn_backend *b, uint16_t *out, const float *logits, long P, int K) {
    SKIP_IF_FAILED(b);
    rec(b, cu_argmax(be_of(b)->c, out, logits, P, K));
}

static void clip_grad_norm(nn_backend *b, float *grads, size_t n, double max_norm) {
    SKIP_IF_FAILED(b);
    rec(b, cu_clip_grad_norm(be_of(b)->c, grads, n, max_norm, NULL));
}

static void optim_step(nn_backend *b, nn_optim *o, float *params, const float *grads,
                       float *state, double lr) {
    SKIP_IF_FAILED(b);
    be_of(b)->wc.version++;
    rec(b, cu_optim_step(be_of(b)->c, o, params, grads, state, o->n, lr));
}

/* ---- the table ------------------------------------------------------------------------------- */

static void be_destroy(nn_backend *b) {
    if (!b)
        return;
    cu_be *e = be_of(b);
    if (e->c)
        cu_sync(e->c);
    for (int i = 0; i < e->wc.n; i++)
        cu_free(e->wc.e[i].packed);
    cu_free(e->ce_dev);
    cu_stage_free(e->st);
    cu_ctx_free(e->c);
    free(e);
}

void cu_backend_table(nn_backend *b, int bf16) {
    memset(b, 0, sizeof *b);
    b->name = "cuda";
    b->device = 1;
    b->host_access = 0;
    b->prec = bf16 ? NN_BF16 : NN_FP32;
    /* GroupNorm stays fp32 (autocast on GPUs), so the model rounds its outputs (gn_round 0);
     * the convolutions write bf16 values in bf16 (their outputs and input gradients come from
     * bf16 tensors or are rounded), so no rounding pass follows them (conv_round 1). */
    b->conv_round = 1;
    b->destroy = be_destroy;
    b->alloc = be_alloc;
    b->free = be_free;
    b->upload = be_upload;
    b->download = be_download;
    b->zero = be_zero;
    b->workspace = be_workspace;
    b->stage = be_stage;
    b->conv3d_ws = bf16 ? conv3d_ws_b16 : conv3d_ws_f32;
    b->convt3d_ws = convt3d_ws;
    b->conv1_ws = conv1_ws;
    b->groupnorm_ws = groupnorm_ws;
    b->loss_ws = loss_ws;
    b->conv3d_forward = conv3d_forward;
    b->conv3d_backward = conv3d_backward;
    b->convt3d_forward = convt3d_forward;
    b->convt3d_backward = convt3d_backward;
    b->conv1_forward = conv1_forward;
    b->conv1_backward = conv1_backward;
    b->groupnorm_forward = groupnorm_forward;
    b->groupnorm_apply = groupnorm_apply;
    b->groupnorm_backward = groupnorm_backward;
    b->maxpool3d_forward = maxpool_forward;
    b->maxpool3d_backward = maxpool_backward;
    b->to_channels_last = to_last;
    b->to_channels_first = to_first;
    b->round_bf16 = round_bf16;
    /* bf16 storage: a bf16 model without checkpointing keeps its down blocks' convolution
     * outputs (bf16 values) in half the memory until the backward pass (unet.c, h16) */
    b->bf16_narrow = bf16_narrow;
    b->bf16_widen = bf16_widen;
    b->loss = loss;
    b->hard_dice = hard_dice;
    b->argmax = argmax;
    b->clip_grad_norm = clip_grad_norm;
    b->optim_step = optim_step;
}

int cu_backend_create(nn_backend **out, int gpu, int bf16, size_t algo_ws_bytes) {
    *out = NULL;
    cu_be *e = calloc(1, sizeof *e);
    if (!e)
        return err_set(ERR_NOMEM, "CUDA backend: out of host memory");
    int rc = cu_ctx_create(&e->c, gpu, bf16, 0, algo_ws_bytes);
    if (rc) {
        free(e);
        return rc;
    }
    e->slot = -1;
    cu_backend_table(&e->b, bf16);
    *out = &e->b;
    return 0;
}

cu_ctx *cu_backend_ctx(nn_backend *b) {
    return be_of(b)->c;
}
