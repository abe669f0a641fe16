/* unet: builds the U-Net of reference §9.3 from a spec, owns its slabs, and runs forward,
 * loss and backward by calling the layers in sequence (no autograd graph, as llm.c).
 *
 * Memory: parameters and gradients are one slab each; every activation the backward pass needs
 * (per DoubleConv: conv outputs, GroupNorm+ReLU outputs, GN statistics; pools and their argmax;
 * upsample outputs; logits), the gradient buffers (one per level for the skip connections, and
 * three scratch buffers sized for the top level) and the shared layer workspace are carved out
 * of one activation slab sized at creation for the maximum batch. Kernels never allocate. */
#include "nn/unet.h"
#include "nn/unet_int.h"

#include "core/err.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/prof.h"
#include "core/rng.h"
#include "nn/backend.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- creation ----------------------------------------------------------------------------- */

void nn_unet_free(nn_unet *m) {
    if (!m)
        return;
    MEM_FREE(m->tensors, m->params, m->grads);
    struct nn_unet_plan *p = m->plan;
    if (p && p->be) {
        nn_backend *be = p->be;
        be->free(be, p->ws_sh);
        be->free(be, p->slab);
        be->free(be, p->islab);
        be->free(be, p->pslab);
        nn_backend_status(be); /* a failure of the freed model is no concern of the next */
    }
    free(p);
    memset(m, 0, sizeof *m);
}

/* A device backend's slab: parameters, gradients and the optimizer state of opts.optimizer,
 * zeroed, in one allocation. */
static int param_slab(nn_unet *m) {
    nn_backend *be = m->plan->be;
    const size_t pb = (m->nparams * sizeof(float) + 255) & ~(size_t)255;
    const size_t ns = nn_optim_state_floats((nn_optim_kind)m->opts.optimizer, m->nparams);
    const size_t bytes = 2 * pb + ns * sizeof(float);
    if (be->alloc(be, &m->plan->pslab, bytes))
        return err_prefix("U-Net parameters, gradients and optimizer state (%.2f GiB on %s)",
                          (double)bytes / (1u << 30), be->name);
    char *b = m->plan->pslab;
    m->dparams = (float *)b;
    m->dgrads = (float *)(b + pb);
    m->dstate = ns ? (float *)(b + 2 * pb) : NULL;
    be->zero(be, b, bytes);
    return nn_backend_status(be);
}

int nn_unet_create(nn_unet *m, const nn_unet_spec *s, int max_batch, int d, int h, int w) {
    return nn_unet_create_opts(m, s, NULL, max_batch, d, h, w);
}

int nn_unet_create_opts(nn_unet *m, const nn_unet_spec *s, const nn_unet_opts *o, int max_batch,
                        int d, int h, int w) {
    static const nn_unet_opts defaults = {0};
    memset(m, 0, sizeof *m);
    if (!o)
        o = &defaults;
    int rc = unet_check(s, o, d, h, w);
    if (rc)
        return rc;
    m->opts = *o;
    if (max_batch < 1)
        return err_set(ERR_CONFIG, "batch size %d: it must be at least 1", max_batch);
    m->spec = *s;
    m->max_batch = max_batch;
    m->d = d;
    m->h = h;
    m->w = w;
    struct nn_unet_plan *p = calloc(1, sizeof *p);
    if (!p)
        return err_set(ERR_NOMEM, "U-Net plan: out of memory");
    m->plan = p;
    const int N = max_batch;
    m->ntensors = unet_build_tensors(s, NULL, &m->nparams, NULL);
    m->tensors = calloc((size_t)m->ntensors, sizeof *m->tensors);
    m->params = mem_alloc_big(m->nparams * sizeof(float));
    m->grads = mem_alloc_big(m->nparams * sizeof(float));
    if (!m->tensors || !m->params || !m->grads) {
        nn_unet_free(m);
        return err_set(ERR_NOMEM, "U-Net parameters: cannot allocate 2 x %zu floats", m->nparams);
    }
    unet_build_tensors(s, m->tensors, NULL, p);
    memset(m->params, 0, m->nparams * sizeof(float));
    memset(m->grads, 0, m->nparams * sizeof(float));
    unet_plan_dims(p, s, o, d, h, w);
    nn_backend *be = p->be;
    if (be->device && (rc = param_slab(m))) {
        nn_unet_free(m);
        return rc;
    }
    if (!be->device) {
        m->dparams = m->params;
        m->dgrads = m->grads;
    }
    size_t floats, ibytes, wsf;
    unet_plan_slabs(p, s, N, &floats, &ibytes, &wsf);
    m->activation_floats = floats;
    m->activation_index_bytes = ibytes;
    void *slab = NULL, *islab = NULL;
    rc = be->alloc(be, &slab, floats * sizeof(float));
    if (rc == 0 && (rc = be->alloc(be, &islab, ibytes)))
        be->free(be, slab);
    if (rc) {
        const size_t bytes = floats * sizeof(float) + ibytes;
        nn_unet_free(m);
        if (rc != ERR_NOMEM)
            return err_prefix("U-Net activations");
        return err_set(ERR_NOMEM,
                       "U-Net activations: cannot allocate %.2f GiB for batch %d at %dx%dx%d%s%s; "
                       "lower local_batch_size, problem_scale or unet_base_channels, or turn on "
                       "activation_checkpointing",
                       (double)bytes / (1u << 30), max_batch, d, h, w, be->device ? " on " : "",
                       be->device ? be->name : "");
    }
    p->slab = slab;
    p->islab = islab;
    unet_plan_slabs(p, s, N, &floats, &ibytes, &wsf);
    p->ws_floats = wsf;
    be->workspace(be, p->ws, wsf);
    return 0;
}

int nn_unet_init_params(nn_unet *m, uint64_t seed) {
    for (int i = 0; i < m->ntensors; i++) {
        const nn_tensor_info *t = &m->tensors[i];
        float *x = m->params + t->offset;
        const char *nm = t->name;
        const size_t len = strlen(nm);
        const int is_bias = len > 5 && !strcmp(nm + len - 5, ".bias");
        /* GroupNorm tensors are modules 1 and 4 of a DoubleConv's Sequential. */
        const int is_norm = strstr(nm, ".double_conv.1.") || strstr(nm, ".double_conv.4.");
        if (is_norm) {
            const float v = is_bias ? 0.0f : 1.0f;
            for (size_t k = 0; k < t->numel; k++)
                x[k] = v;
            continue;
        }
        /* fan_in: Conv3d weight (out, in, k, k, k) -> in*k^3; ConvTranspose3d weight (in, out,
         * k, k, k) -> out*k^3 (PyTorch uses dim 1 for both); a bias uses its weight's fan_in. */
        const nn_tensor_info *wt = is_bias ? &m->tensors[i - 1] : t;
        const double fan_in = (double)wt->shape[1] * wt->shape[2] * wt->shape[3] * wt->shape[4];
        const double bound = 1.0 / sqrt(fan_in);
        rng r = rng_make(seed, RNG_MODEL_INIT, (uint64_t)i, 0);
        for (size_t k = 0; k < t->numel; k++)
            x[k] = (float)((2.0 * rng_uniform(&r) - 1.0) * bound);
    }
    return nn_unet_upload(m, NULL);
}

void nn_unet_zero_grad(nn_unet *m) {
    nn_backend *be = m->plan->be;
    be->zero(be, m->dgrads, m->nparams * sizeof(float));
}

/* The optimizer's state floats, or ERR_CONFIG when the device slab holds another kind's. */
static int state_floats(const nn_unet *m, const nn_optim *o, size_t *ns) {
    *ns = nn_optim_state_floats(o->kind, m->nparams);
    if (m->plan->be->device && o->kind != (nn_optim_kind)m->opts.optimizer)
        return err_set(ERR_CONFIG, "optimizer %s on a model whose %s slab holds %s state: "
                                   "create the model with nn_unet_opts.optimizer = its kind",
                       nn_optim_name(o->kind), m->plan->be->name,
                       nn_optim_name((nn_optim_kind)m->opts.optimizer));
    if (o->n != m->nparams)
        return err_set(ERR_CONFIG, "optimizer for %zu parameters on a model of %zu", o->n,
                       m->nparams);
    return 0;
}

/* The host <-> device copies of the model: the parameters, the gradients (down only) and the
 * optimizer state (o not NULL). 0 or the backend's error. */
static int model_copy(nn_unet *m, const nn_optim *o, int down) {
    nn_backend *be = m->plan->be;
    if (!be->device)
        return 0;
    size_t ns = 0;
    int rc = o ? state_floats(m, o, &ns) : 0;
    float *const host[3] = {m->params, m->grads, o ? o->state : NULL};
    float *const dev[3] = {m->dparams, m->dgrads, m->dstate};
    const size_t n[3] = {m->nparams, m->nparams, ns};
    for (int i = 0; rc == 0 && i < 3; i++)
        if (i == 0 || (i == 1 ? down : ns != 0))
            rc = down ? be->download(be, host[i], dev[i], n[i] * sizeof(float))
                      : be->upload(be, dev[i], host[i], n[i] * sizeof(float));
    return rc;
}

int nn_unet_upload(nn_unet *m, const nn_optim *o) {
    return model_copy(m, o, 0);
}

int nn_unet_download(nn_unet *m, nn_optim *o) {
    return model_copy(m, o, 1);
}

int nn_unet_step(nn_unet *m, nn_optim *o, double lr, double max_norm) {
    nn_backend *be = m->plan->be;
    size_t ns;
    int rc = state_floats(m, o, &ns);
    if (rc)
        return rc;
    if (max_norm > 0)
        be->clip_grad_norm(be, m->dgrads, m->nparams, max_norm);
    be->optim_step(be, o, m->dparams, m->dgrads, be->device ? m->dstate : o->state, lr);
    return nn_backend_status(be);
}

const float *nn_unet_logits(const nn_unet *m) {
    return m->plan->logits;
}

void nn_unet_last_times(const nn_unet *m, double *fwd, double *loss, double *bwd) {
    *fwd = m->plan->t_fwd;
    *loss = m->plan->t_loss;
    *bwd = m->plan->t_bwd;
}

/* ---- forward / backward ----------------------------------------------------------------- */

/* The backend's parameters and gradients of tensor idx, and one operation of the backend's
 * table (backend.h) with the plan `p` in scope: every layer below runs through it. */
#define P_(m, idx) ((m)->dparams + (m)->tensors[idx].offset)
#define G_(m, idx) ((m)->dgrads + (m)->tensors[idx].offset)
#define OPI(name, ...) p->be->name(p->be, __VA_ARGS__)

/* Layer and block regions: when recording and the backend runs its ops on the host (else one
 * load and one branch). */
static inline void lay_begin(const struct nn_unet_plan *p, int id) {
    if (prof_active() && p->prof_layers)
        prof_begin_(id);
}
static inline void lay_end(const struct nn_unet_plan *p, int id) {
    if (prof_active() && p->prof_layers)
        prof_end_(id);
}

/* The region of each op of the table (bench/nn/bench_step --layer's names). */
enum {
    OPR_to_channels_last = PROF_TO_LAYOUT,
    OPR_to_channels_first = PROF_TO_LAYOUT,
    OPR_conv3d_forward = PROF_CONV3D_FWD,
    OPR_convt3d_forward = PROF_CONVT3D_FWD,
    OPR_conv1_forward = PROF_CONV1_FWD,
    OPR_conv1_backward = PROF_CONV1_BWD,
    OPR_conv1_backward_relu = PROF_CONV1_BWD,
    OPR_groupnorm_forward = PROF_GNRELU_FWD,
    OPR_groupnorm_forward_pool = PROF_GNRELU_FWD,
    OPR_groupnorm_apply = PROF_GNRELU_APPLY,
    OPR_groupnorm_backward = PROF_GNRELU_BWD,
    OPR_groupnorm_backward_x = PROF_GNRELU_BWD,
    OPR_maxpool3d_forward = PROF_MAXPOOL_FWD,
    OPR_maxpool3d_backward = PROF_MAXPOOL_BWD,
    OPR_maxpool3d_backward_rbf16 = PROF_MAXPOOL_BWD,
    OPR_round_bf16 = PROF_ROUND_BF16,
    OPR_bf16_narrow = PROF_BF16_STORE,
    OPR_bf16_widen = PROF_BF16_STORE
};
#define OP(name, ...)                                                                              \
    (lay_begin(p, OPR_##name), p->be->name(p->be, __VA_ARGS__), lay_end(p, OPR_##name))

/* The convolutions' backward passes, each in its region: a call asking for the weight and the
 * input gradient is issued as two when the layers are timed, weight first (the CPU engine runs
 * the two passes in that order inside one call, so the results and the work are the same; on a
 * CPU with AMX the transposed convolution's fused pass then runs as two). */
static void conv3d_bwd(const struct nn_unet_plan *p, float *din, float *dinB, float *dw,
                       const float *dout, const float *inA, int ca, const float *inB, int cb,
                       const float *w, int cout, int N, int D, int H, int W, nn_prec prec,
                       const nn_shard *sh, float *ws) {
    nn_backend *be = p->be;
    if (!(prof_active() && p->prof_layers)) {
        be->conv3d_backward(be, din, dinB, dw, dout, inA, ca, inB, cb, w, cout, N, D, H, W, prec,
                            sh, ws);
        return;
    }
    if (dw) {
        prof_begin_(PROF_CONV3D_BWD_WEIGHT);
        be->conv3d_backward(be, NULL, NULL, dw, dout, inA, ca, inB, cb, w, cout, N, D, H, W, prec,
                            sh, ws);
        prof_end_(PROF_CONV3D_BWD_WEIGHT);
    }
    if (din) {
        prof_begin_(PROF_CONV3D_BWD_DATA);
        be->conv3d_backward(be, din, dinB, NULL, dout, inA, ca, inB, cb, w, cout, N, D, H, W, prec,
                            sh, ws);
        prof_end_(PROF_CONV3D_BWD_DATA);
    }
}

static void convt3d_bwd(const struct nn_unet_plan *p, float *din, float *dw, float *db,
                        const float *dout, long ldo, const float *in, const float *w, int cin,
                        int cout, int N, int D, int H, int W, nn_prec prec, float *ws) {
    nn_backend *be = p->be;
    if (!(prof_active() && p->prof_layers)) {
        be->convt3d_backward(be, din, dw, db, dout, ldo, in, w, cin, cout, N, D, H, W, prec, ws);
        return;
    }
    if (dw || db) {
        prof_begin_(PROF_CONVT3D_BWD_WEIGHT);
        be->convt3d_backward(be, NULL, dw, db, dout, ldo, in, w, cin, cout, N, D, H, W, prec, ws);
        prof_end_(PROF_CONVT3D_BWD_WEIGHT);
    }
    if (din) {
        prof_begin_(PROF_CONVT3D_BWD_DATA);
        be->convt3d_backward(be, din, NULL, NULL, dout, ldo, in, w, cin, cout, N, D, H, W, prec,
                             ws);
        prof_end_(PROF_CONVT3D_BWD_DATA);
    }
}

/* The workspace of a Conv3d k3: the slab's, or for a sharded model created unsharded the
 * whole-block one allocated at its first step (ensure_ws). */
static float *conv_ws(const nn_unet *m) {
    return m->plan->ws_sh ? m->plan->ws_sh : m->plan->ws;
}

/* Tensors first..ntensors-1 have their final gradient (for an overlapped all-reduce). */
static void grad_ready(nn_unet *m, int first) {
    if (m->grad_ready)
        m->grad_ready(m->grad_ctx, first);
}

/* bf16 (PyTorch CPU autocast): the tensors between layers are bf16 (GroupNorm computes in fp32
 * but returns bf16 for a bf16 input, so do ReLU and the concatenation; MaxPool, cast to fp32,
 * sees bf16 values), and so are the gradients arriving at them. Rounds in place. */
static void to_prec(const struct nn_unet_plan *p, float *x, size_t n) {
    if (p->prec == NN_BF16)
        OP(round_bf16, x, n);
}

/* The GroupNorm ops' relu argument: the ReLU bit, plus the rounding to bf16 when the backend
 * does it inside the op (then gn_to_prec, the pass that would follow, does nothing). */
static int gn_bits(const struct nn_unet_plan *p, int relu) {
    return relu | (p->prec == NN_BF16 && p->be->gn_round ? NN_GN_RBF16 : 0);
}

/* ck2: a block below the top level keeps c2 (in b->a2's buffer) instead of its output, so that
 * its backward need not run conv2 again; its output relu(gn(c2)) is made from the saved
 * statistics where it is read, by the op that makes a1 again (bit-identical, as for a1). */
static int keeps_c2(const struct nn_unet_plan *p, const dc_block *b) {
    return p->ck2 && b->level > 0;
}

/* bf16 where the backend's convolutions round and its pool backward can round: a down block's
 * output gradient (skip + pool) is rounded by the pool's backward, which adds the pool part
 * (only there does the sum differ from the skip part, already bf16), not by a pass of its own:
 * at scale 6 / base 64 that pass read and wrote 64 MiB per sample (round_bf16 3.9 ms a step on
 * a Xeon with AMX). */
static int pool_rounds(const struct nn_unet_plan *p) {
    return p->prec == NN_BF16 && p->be->conv_round && p->be->maxpool3d_backward_rbf16;
}

static void gn_to_prec(const struct nn_unet_plan *p, float *x, size_t n) {
    if (!p->be->gn_round)
        to_prec(p, x, n);
}

/* y = relu(gn(x)) of block b's first GroupNorm (second: its second) from the saved statistics,
 * rounded as the forward rounds it: a1, or a block output, made again bit for bit. */
static void gn_remake(nn_unet *m, const dc_block *b, int second, float *y, const float *x,
                      int N) {
    struct nn_unet_plan *p = m->plan;
    const int l = b->level;
    OP(groupnorm_apply, y, x, second ? b->m2 : b->m1, second ? b->r2 : b->r1,
       P_(m, second ? b->g2w : b->g1w), P_(m, second ? b->g2b : b->g1b), N, p->S[l], b->cout,
       p->G, gn_bits(p, 1), p->ws);
    gn_to_prec(p, y, (size_t)N * p->S[l] * b->cout);
}

/* Down block b's GroupNorm 2 also makes the pool below it (groupnorm_forward_pool), where every
 * block has its own buffers (no checkpointing), the volume is whole and the op's output is the
 * block's (rounded inside the op in bf16); pool_forward then has nothing to do. At scale 6 /
 * base 64 the pool read 64 MiB of the top block's output back from memory a sample. */
static int pool_in_gn(const nn_unet *m, const dc_block *b) {
    const struct nn_unet_plan *p = m->plan;
    return p->be->groupnorm_forward_pool && !p->ckpt && !m->shard && b->level < p->L &&
           b == &p->down[b->level] && (p->prec != NN_BF16 || p->be->gn_round);
}

/* Forward of one DoubleConv: c1 = conv(in), a1 = relu(gn(c1)), c2 = conv(a1), and (a2 given)
 * a2 = relu(gn(c2)) with the statistics saved. The caller chooses where c1, a1, c2 and a2 live:
 * without checkpointing c1 and c2 are the block's own (kept for backward) and a1 goes to the
 * scratch gT (free until backward, which recomputes it); with checkpointing c1 and c2 share the
 * scratch cs (c1 is dead once a1 exists). a2 NULL (checkpointed backward's recompute): the saved
 * statistics give a1 without a statistics pass, and the block output a2 and its statistics are
 * already saved, so GN2 is skipped; c2 NULL as well: c2 was kept from the forward pass (the top
 * up block's, ck2), so the recompute stops at a1. Same inputs, same kernels: the recomputed
 * tensors equal the forward ones bit for bit. */
static void dc_forward(nn_unet *m, dc_block *b, const float *inA, int ca, const float *inB, int cb,
                       int N, float *c1, float *a1, float *c2, float *a2) {
    struct nn_unet_plan *p = m->plan;
    const int l = b->level;
    const int D = p->dd[l], H = p->hh[l], W = p->ww[l];
    const size_t n = (size_t)N * p->S[l] * b->cout;
    const nn_shard *sh = m->shard;
    OP(conv3d_forward, c1, inA, ca, inB, cb, P_(m, b->w1), b->cout, N, D, H, W, p->prec, sh,
       conv_ws(m));
    if (!a2) {
        gn_remake(m, b, 0, a1, c1, N);
    } else {
        OP(groupnorm_forward, a1, b->m1, b->r1, c1, P_(m, b->g1w), P_(m, b->g1b), N, p->S[l],
           b->cout, p->G, gn_bits(p, 1), p->ws, sh);
        gn_to_prec(p, a1, n);
    }
    if (!c2)
        return;
    OP(conv3d_forward, c2, a1, b->cout, NULL, 0, P_(m, b->w2), b->cout, N, D, H, W, p->prec, sh,
       conv_ws(m));
    if (a2 && pool_in_gn(m, b)) {
        OP(groupnorm_forward_pool, a2, b->m2, b->r2, c2, P_(m, b->g2w), P_(m, b->g2b), N, D, H, W,
           b->cout, p->G, gn_bits(p, 1), p->ws, p->pool[l + 1], p->pidx[l + 1]);
    } else if (a2) {
        OP(groupnorm_forward, a2, b->m2, b->r2, c2, P_(m, b->g2w), P_(m, b->g2b), N, p->S[l],
           b->cout, p->G, gn_bits(p, 1), p->ws, sh);
        gn_to_prec(p, a2, n);
    }
}

/* Backward of one DoubleConv up to its first convolution: GN2 (dY, the gradient of b->a2, in
 * place), conv2 (input gradient into tmp, weight gradient) and GN1 (in place in tmp), leaving
 * the gradient of c1 in tmp for the caller's conv1 backward. Buffers (dc_backward_tail gives
 * the usual ones): without checkpointing c1, c2 are the block's own and a1 is recomputed here;
 * with checkpointing the caller has just recomputed c1, a1 and c2 (c2 may be tmp: dead once
 * GN2's backward has read it). gn2_x: b->a2 is gone, GN2 takes its ReLU mask from c2. single:
 * dY is rounded already where the backend's convolutions round: one convolution op's input
 * gradient, not a sum, or a skip + pool sum rounded by the pool's backward (pool_rounds). */
static void dc_backward_bufs(nn_unet *m, dc_block *b, float *dY, int masked, int single, int N,
                             const float *c1, float *a1, const float *c2, float *tmp, int gn2_x) {
    struct nn_unet_plan *p = m->plan;
    const int l = b->level;
    const int D = p->dd[l], H = p->hh[l], W = p->ww[l];
    const size_t n = (size_t)N * p->S[l] * b->cout;
    if (!p->ckpt && !b->a1)
        gn_remake(m, b, 0, a1, c1, N);
    if (!single || !p->be->conv_round)
        to_prec(p, dY, n); /* e.g. skip + pool gradients, summed in bf16 by autograd */
    const nn_shard *sh = m->shard;
    /* masked: dY already went through the ReLU's backward (and b->a2 may hold it) */
    /* The ReLU masks from the GroupNorms' inputs (c2, c1) where the backend can
     * (groupnorm_backward_x): the same bits as from their outputs, one array fewer read. A
     * 32^3 x 64 bf16 GroupNorm's backward alone 1.16 -> 0.83 ms; in a 5 / 64 bf16 step 8.0 ->
     * 6.9 ms, the step 1.02x (median of 6 alternated runs), on a Xeon with AMX */
    const int gx = p->be->groupnorm_backward_x != NULL;
    if (gn2_x || (gx && !masked)) {
        OP(groupnorm_backward_x, dY, G_(m, b->g2w), G_(m, b->g2b), dY, NULL, NULL, 0, c2, b->m2,
           b->r2, P_(m, b->g2w), P_(m, b->g2b), N, p->S[l], b->cout, p->G, p->prec, p->ws, sh);
        gn_to_prec(p, dY, n);
    } else {
        OP(groupnorm_backward, dY, G_(m, b->g2w), G_(m, b->g2b), dY, c2, masked ? NULL : b->a2,
           b->m2, b->r2, P_(m, b->g2w), N, p->S[l], b->cout, p->G, gn_bits(p, !masked), p->ws,
           sh);
        gn_to_prec(p, dY, n);
    }
    grad_ready(m, b->g2w);
    conv3d_bwd(p, tmp, NULL, G_(m, b->w2), dY, a1, b->cout, NULL, 0, P_(m, b->w2), b->cout, N, D, H,
               W, p->prec, sh, conv_ws(m));
    grad_ready(m, b->w2);
    if (gx)
        OP(groupnorm_backward_x, tmp, G_(m, b->g1w), G_(m, b->g1b), tmp, NULL, NULL, 0, c1, b->m1,
           b->r1, P_(m, b->g1w), P_(m, b->g1b), N, p->S[l], b->cout, p->G, p->prec, p->ws, sh);
    else
        OP(groupnorm_backward, tmp, G_(m, b->g1w), G_(m, b->g1b), tmp, c1, a1, b->m1, b->r1,
           P_(m, b->g1w), N, p->S[l], b->cout, p->G, gn_bits(p, 1), p->ws, sh);
    grad_ready(m, b->g1w);
    gn_to_prec(p, tmp, n);
}

/* dc_backward_bufs with the plan's buffers: c1, c2 the block's own or (checkpointing) cs, gT;
 * a1 in gH; the gradient of c1 left in gT. On return c1 and a1 are dead. */
static void dc_backward_tail(nn_unet *m, dc_block *b, float *dY, int masked, int single, int N) {
    struct nn_unet_plan *p = m->plan;
    if (b->h1) {
        const size_t n = (size_t)N * p->S[b->level] * b->cout;
        OP(bf16_widen, b->c1, b->h1, n);
        OP(bf16_widen, b->c2, b->h2, n);
    }
    const int k2 = keeps_c2(p, b);
    dc_backward_bufs(m, b, dY, masked, single, N, p->ckpt ? p->cs : b->c1, b->a1 ? b->a1 : p->gH,
                     k2 ? b->a2 : p->ckpt ? p->gT : b->c2, p->gT, k2);
}

/* conv1's backward (gradient of c1 in gT): weight gradient, and the input gradient into din, or
 * for an up block into din (skip part) and dinB (upsample part). */
static void dc_backward_conv1(nn_unet *m, dc_block *b, const float *inA, int ca,
                              const float *inB, int cb, float *din, float *dinB, int N) {
    struct nn_unet_plan *p = m->plan;
    const int l = b->level;
    conv3d_bwd(p, din, dinB, G_(m, b->w1), p->gT, inA, ca, inB, cb, P_(m, b->w1), b->cout, N,
               p->dd[l], p->hh[l], p->ww[l], p->prec, m->shard, conv_ws(m));
    grad_ready(m, b->w1);
}

/* The block whose output is up block j's input: the bottleneck, or the previous up block. */
static const dc_block *up_src(const struct nn_unet_plan *p, int j) {
    return j == 0 ? &p->down[p->L] : &p->up[j - 1];
}

/* Where b's output is read: b->a2, or dst, where block_out made it. */
static const float *out_at(const struct nn_unet_plan *p, const dc_block *b, float *dst) {
    return keeps_c2(p, b) ? dst : b->a2;
}

static const float *block_out(nn_unet *m, const dc_block *b, float *dst, int N) {
    if (keeps_c2(m->plan, b))
        gn_remake(m, b, 1, dst, b->a2, N);
    return out_at(m->plan, b, dst);
}

/* The layers in front of a block: the pool of down block i >= 1, the upsample of up block j
 * (into p->upt[j], which checkpointing points at a scratch buffer before each call). */
static void pool_forward(nn_unet *m, int i, int N, const float *in) {
    struct nn_unet_plan *p = m->plan;
    OP(maxpool3d_forward, p->pool[i], p->pidx[i], in, N, p->dd[i - 1], p->hh[i - 1],
       p->ww[i - 1], p->ch[i - 1]);
}

/* in: the output of up_src(j) (block_out) */
static void up_forward(nn_unet *m, int j, int N, const float *in) {
    struct nn_unet_plan *p = m->plan;
    const int l = p->L - 1 - j;
    OP(convt3d_forward, p->upt[j], in, P_(m, p->upw[j]), P_(m, p->upb[j]), p->ch[l + 1],
       p->ch[l], N, p->dd[l + 1], p->hh[l + 1], p->ww[l + 1], p->prec, p->ws);
}

/* Block b's conv input (first operand, channels; second operand, channels); an up block's skip
 * where block_out made it. */
static void block_input(nn_unet *m, const dc_block *b, int is_up, int j, const float **inA,
                        int *ca, const float **inB, int *cb) {
    struct nn_unet_plan *p = m->plan;
    const int l = b->level;
    if (is_up) {
        *inA = out_at(p, &p->down[l], p->sb), *ca = p->ch[l], *inB = p->upt[j], *cb = p->ch[l];
    } else if (l == 0) {
        *inA = p->xin, *ca = m->spec.in_channels, *inB = NULL, *cb = 0;
    } else {
        *inA = p->pool[l], *ca = p->ch[l - 1], *inB = NULL, *cb = 0;
    }
}

/* ck2: the scratch roles of block_forward and dc_backward_tail for a block at the top level
 * (down block 0's c1 and c2 in tY, a1 in tX; the upsample in tX) or below it (cs, gT, gH and
 * gG the quarters of tX; the pool output is in the top up block's output, see unet_plan_slabs). */
static void ckpt_roles(struct nn_unet_plan *p, int top) {
    if (!p->ck2)
        return;
    if (top) {
        p->cs = p->tY;
        p->gT = p->gH = p->tX;
    } else {
        p->cs = p->tX;
        p->gT = p->tX + p->q;
        p->gH = p->tX + 2 * p->q;
        p->gG = p->tX + 3 * p->q;
    }
}

/* Forward of block b (up block j when is_up), with the pool or upsample in front of it.
 * Without checkpointing every tensor has its own buffer. With it, only the block output and the
 * statistics are kept: the upsample goes to gH, c1 and c2 to cs, a1 to gT; with ck2 the top up
 * block keeps c1 instead, in its output's buffer (c2 in tY, a1 and its output in tX, top_out),
 * and the blocks below the top level keep c2 (keeps_c2; their output goes to sb, read by the
 * next pool only). recompute (checkpointed backward): the upsample to gH, c1 to cs, a1 to gH
 * (the upsample is dead once c1 exists), c2 to gT unless kept, as dc_backward_tail expects. */
static void block_forward(nn_unet *m, dc_block *b, int is_up, int j, int N, int recompute) {
    struct nn_unet_plan *p = m->plan;
    const float *inA, *inB;
    int ca, cb;
    ckpt_roles(p, b->level == 0);
    if (is_up) {
        if (p->ckpt)
            p->upt[j] = p->gH;
        up_forward(m, j, N, block_out(m, up_src(p, j), p->ub, N));
        block_out(m, &p->down[b->level], p->sb, N); /* the skip, for block_input */
    } else if (b->level > 0 && !pool_in_gn(m, &p->down[b->level - 1])) {
        /* the forward pass left the previous block's output in sb */
        const dc_block *prev = &p->down[b->level - 1];
        pool_forward(m, b->level, N,
                     recompute ? block_out(m, prev, p->sb, N) : out_at(p, prev, p->sb));
    }
    block_input(m, b, is_up, j, &inA, &ca, &inB, &cb);
    if (recompute)
        dc_forward(m, b, inA, ca, inB, cb, N, p->cs, p->gH, keeps_c2(p, b) ? NULL : p->gT, NULL);
    else if (p->ck2 && is_up && b->level == 0)
        dc_forward(m, b, inA, ca, inB, cb, N, b->a2, p->tX, p->tY, p->tX);
    else if (keeps_c2(p, b)) /* the skip in sb is dead once c1 exists */
        dc_forward(m, b, inA, ca, inB, cb, N, p->cs, p->gT, b->a2, p->sb);
    else if (p->ckpt)
        dc_forward(m, b, inA, ca, inB, cb, N, p->cs, p->gT, p->cs, b->a2);
    else
        dc_forward(m, b, inA, ca, inB, cb, N, b->c1, b->a1 ? b->a1 : p->gT, b->c2, b->a2);
    if (b->h1 && !recompute) {
        const size_t n = (size_t)N * p->S[b->level] * b->cout;
        OP(bf16_narrow, b->h1, b->c1, n);
        OP(bf16_narrow, b->h2, b->c2, n);
    }
}

/* The last up block's output, the 1x1 conv's input: its own buffer, or with ck2 tX (its buffer
 * holds c1 from the forward pass to its backward, which then need not recompute conv1; tX is
 * free from the end of the forward pass until that backward). */
static float *top_out(const struct nn_unet_plan *p) {
    return p->ck2 ? p->tX : p->up[p->L - 1].a2;
}

static void forward(nn_unet *m, const float *x, int N) {
    struct nn_unet_plan *p = m->plan;
    const int L = p->L;
    prof_begin(PROF_FORWARD);
    OP(to_channels_last, p->xin, x, N, m->spec.in_channels, p->S[0]);
    for (int i = 0; i <= L; i++) {
        lay_begin(p, p->prof_down[i]);
        block_forward(m, &p->down[i], 0, 0, N, 0);
        lay_end(p, p->prof_down[i]);
    }
    for (int j = 0; j < L; j++) {
        lay_begin(p, p->prof_up[j]);
        block_forward(m, &p->up[j], 1, j, N, 0);
        lay_end(p, p->prof_up[j]);
    }
    lay_begin(p, p->prof_up[L]);
    OP(conv1_forward, p->logits, top_out(p), P_(m, p->outw), P_(m, p->outb), p->ch[0], p->K,
       (long)N * p->S[0], p->prec, p->ws);
    lay_end(p, p->prof_up[L]);
    prof_end(PROF_FORWARD);
    p->batch = N;
}

/* ck2: the backward of the top up block (up block L - 1) in the four top-level tensors that
 * remain: the skip A (down block 0's output), B (this block's c1, kept from the forward pass),
 * tX (this block's output, read by the 1x1 conv's weight gradient before) and tY. Keeping c1
 * rather than c2 trades a conv2 (c -> c) for a conv1 (2c -> c) and its upsample. The tensors
 * of the plain run that do not fit are not kept: the gradient of the output is made inside
 * GN2's backward from dlogits (over c2, its x), GN1's mask comes from c1,
 * and conv2's and conv1's input gradients are written over their inputs once their weight
 * gradients are done. Same kernels, same order of sums: the gradients are the plain run's. */
static void top_up_backward_ck2(nn_unet *m, int N) {
    struct nn_unet_plan *p = m->plan;
    const int L = p->L, j = L - 1, c = p->ch[0], D = p->dd[0], H = p->hh[0], W = p->ww[0];
    dc_block *b = &p->up[j];
    float *A = p->down[0].a2, *B = b->a2, *X = p->tX, *Y = p->tY;
    const size_t n = (size_t)N * p->S[0] * c;
    const nn_shard *sh = m->shard;
    /* recompute: a1 from c1 (B, since the forward pass) into X, c2 into Y */
    gn_remake(m, b, 0, X, B, N);
    OP(conv3d_forward, Y, X, c, NULL, 0, P_(m, b->w2), c, N, D, H, W, p->prec, sh, conv_ws(m));
    OP(groupnorm_backward_x, Y, G_(m, b->g2w), G_(m, b->g2b), NULL, p->dlogits, P_(m, p->outw),
       p->K, Y, b->m2, b->r2, P_(m, b->g2w), P_(m, b->g2b), N, p->S[0], c, p->G, p->prec, p->ws,
       sh);
    grad_ready(m, b->g2w);
    gn_to_prec(p, Y, n);
    conv3d_bwd(p, NULL, NULL, G_(m, b->w2), Y, X, c, NULL, 0, P_(m, b->w2), c, N, D, H, W, p->prec,
               sh, conv_ws(m));
    grad_ready(m, b->w2);
    conv3d_bwd(p, X, NULL, NULL, Y, X, c, NULL, 0, P_(m, b->w2), c, N, D, H, W, p->prec, sh,
               conv_ws(m));
    OP(groupnorm_backward_x, X, G_(m, b->g1w), G_(m, b->g1b), X, NULL, NULL, 0, B, b->m1, b->r1,
       P_(m, b->g1w), P_(m, b->g1b), N, p->S[0], c, p->G, p->prec, p->ws, sh);
    grad_ready(m, b->g1w);
    gn_to_prec(p, X, n);
    /* conv1: the upsample into B; its input gradient's skip part into Y (dr[0]), the upsample
     * part over the upsample */
    p->upt[j] = B;
    up_forward(m, j, N, block_out(m, up_src(p, j), Y, N)); /* B: c1 is dead; Y: c2's gradient */
    conv3d_bwd(p, NULL, NULL, G_(m, b->w1), X, A, c, B, c, P_(m, b->w1), c, N, D, H, W, p->prec, sh,
               conv_ws(m));
    grad_ready(m, b->w1);
    conv3d_bwd(p, Y, B, NULL, X, A, c, B, c, P_(m, b->w1), c, N, D, H, W, p->prec, sh, conv_ws(m));
    /* convT's input once more, in X's first quarter (X is dead; gG is its last quarter) */
    convt3d_bwd(p, j == 0 ? p->dr[L] : p->gG, G_(m, p->upw[j]), G_(m, p->upb[j]), B, c,
                block_out(m, up_src(p, j), X, N), P_(m, p->upw[j]), p->ch[1], c, N, p->dd[1],
                p->hh[1], p->ww[1], p->prec, p->ws);
    grad_ready(m, p->upw[j]);
}

/* ck2: the backward of down block 0, with dY in tY (dr[0]): c1 into the last up block's output
 * (dead), a1 into tX, c2 over this block's output (its mask then comes from c2). */
static void down0_backward_ck2(nn_unet *m, int N) {
    struct nn_unet_plan *p = m->plan;
    const int c = p->ch[0], D = p->dd[0], H = p->hh[0], W = p->ww[0], ci = m->spec.in_channels;
    dc_block *b = &p->down[0];
    float *c1 = p->up[p->L - 1].a2, *a1 = p->tX, *c2 = b->a2;
    dc_forward(m, b, p->xin, ci, NULL, 0, N, c1, a1, c2, NULL);
    /* conv2's input gradient over c2 (read by GN2's backward only) */
    dc_backward_bufs(m, b, p->tY, 0, p->L > 0 && pool_rounds(p), N, c1, a1, c2, c2, 1);
    conv3d_bwd(p, NULL, NULL, G_(m, b->w1), c2, p->xin, ci, NULL, 0, P_(m, b->w1), c, N, D, H, W,
               p->prec, m->shard, conv_ws(m));
    grad_ready(m, b->w1);
}

/* Gradient buffers: gG carries the gradient of the current up block's output (from the 1x1 conv
 * or the previous convT); dr[l] the gradient of down block l's output, which the skip connection
 * writes and the pool's backward adds to; gH and gT are scratch. */
static void backward(nn_unet *m, int N) {
    struct nn_unet_plan *p = m->plan;
    const int L = p->L;
    const long S0 = p->S[0];
    const float *inA, *inB;
    int ca, cb;
    prof_begin(PROF_BACKWARD);
    lay_begin(p, p->prof_up[L]);
    to_prec(p, p->dlogits, (size_t)N * S0 * p->K);
    /* The gradient of the last block's output: over that output, through its ReLU, where the
     * backend can (the output is dead once the mask is read: GN2's backward then runs without
     * the ReLU); else into gG. */
    const int top_inplace = p->be->conv1_backward_relu != NULL;
    float *dtop = top_inplace ? p->up[L - 1].a2 : p->gG;
    ckpt_roles(p, 0);
    if (p->ck2) /* the input gradient is made again inside the top block's GN2 backward */
        OP(conv1_backward, NULL, G_(m, p->outw), G_(m, p->outb), p->dlogits, top_out(p),
           P_(m, p->outw), p->ch[0], p->K, (long)N * S0, p->prec, p->ws);
    else if (top_inplace)
        OP(conv1_backward_relu, dtop, G_(m, p->outw), G_(m, p->outb), p->dlogits, P_(m, p->outw),
           p->ch[0], p->K, (long)N * S0, p->prec, p->ws);
    else
        OP(conv1_backward, dtop, G_(m, p->outw), G_(m, p->outb), p->dlogits, p->up[L - 1].a2,
           P_(m, p->outw), p->ch[0], p->K, (long)N * S0, p->prec, p->ws);
    grad_ready(m, p->outw);
    lay_end(p, p->prof_up[L]);
    for (int j = L - 1; j >= 0; j--) {
        const int l = L - 1 - j;
        const int c = p->ch[l];
        dc_block *b = &p->up[j];
        lay_begin(p, p->prof_up[j]);
        if (p->ck2 && j == L - 1) {
            top_up_backward_ck2(m, N);
            lay_end(p, p->prof_up[j]);
            continue;
        }
        if (p->ckpt) {
            lay_begin(p, PROF_RECOMPUTE);
            block_forward(m, b, 1, j, N, 1);
            lay_end(p, PROF_RECOMPUTE);
        }
        const int last = j == L - 1;
        dc_backward_tail(m, b, last ? dtop : p->gG, last && top_inplace, 1, N);
        if (p->ckpt) {
            /* the upsample again, into gH (a1, dead since GN1's backward): conv1 needs it */
            p->upt[j] = p->gH;
            up_forward(m, j, N, out_at(p, up_src(p, j), p->ub)); /* still there */
        }
        /* conv1's input gradient: the skip part is the first contribution to dr[l], the
         * upsample part (into a dead buffer: gH holding a1, or cs holding c1) feeds convT. */
        float *dup = p->ckpt ? p->cs : p->gH;
        block_input(m, b, 1, j, &inA, &ca, &inB, &cb);
        dc_backward_conv1(m, b, inA, ca, inB, cb, p->dr[l], dup, N);
        float *du = j == 0 ? p->dr[L] : p->gG;
        convt3d_bwd(p, du, G_(m, p->upw[j]), G_(m, p->upb[j]), dup, c,
                    out_at(p, up_src(p, j), p->ub), P_(m, p->upw[j]), p->ch[l + 1], c, N,
                    p->dd[l + 1], p->hh[l + 1], p->ww[l + 1], p->prec, p->ws);
        grad_ready(m, p->upw[j]);
        lay_end(p, p->prof_up[j]);
    }
    for (int i = L; i >= 0; i--) {
        dc_block *b = &p->down[i];
        lay_begin(p, p->prof_down[i]);
        if (p->ck2 && i == 0) {
            down0_backward_ck2(m, N);
            lay_end(p, p->prof_down[i]);
            break;
        }
        if (p->ckpt) {
            lay_begin(p, PROF_RECOMPUTE);
            block_forward(m, b, 0, 0, N, 1);
            lay_end(p, PROF_RECOMPUTE);
        }
        /* below L: skip + pool */
        dc_backward_tail(m, b, p->dr[i], 0, i == L || pool_rounds(p), N);
        block_input(m, b, 0, 0, &inA, &ca, &inB, &cb);
        dc_backward_conv1(m, b, inA, ca, inB, cb, i == 0 ? NULL : p->gH, NULL, N);
        if (i > 0 && pool_rounds(p))
            OP(maxpool3d_backward_rbf16, p->dr[i - 1], p->gH, p->pidx[i], N, p->dd[i - 1],
               p->hh[i - 1], p->ww[i - 1], p->ch[i - 1]);
        else if (i > 0)
            OP(maxpool3d_backward, p->dr[i - 1], p->gH, p->pidx[i], N, p->dd[i - 1], p->hh[i - 1],
               p->ww[i - 1], p->ch[i - 1]);
        lay_end(p, p->prof_down[i]);
    }
    prof_end(PROF_BACKWARD);
}

/* Checks the batch, and gives a sharded model created without nn_unet_opts.sharded its
 * whole-block convolution workspace (once), unless the planned one is already large enough. */
static int check_batch(nn_unet *m, int n) {
    if (n < 1 || n > m->max_batch)
        return err_set(ERR_RANGE, "batch of %d samples: the model was built for 1..%d", n,
                       m->max_batch);
    struct nn_unet_plan *p = m->plan;
    if (m->shard && p->be->device && !p->be->host_access)
        return err_set(ERR_CONFIG, "the %s backend does not run spatially sharded models "
                                   "(dc_num_shards): use device: cpu",
                       p->be->name);
    if (m->shard && !p->sharded && !p->ws_sh && unet_ws_sharded(p, m->max_batch) > p->ws_floats) {
        const size_t fl = unet_ws_sharded(p, m->max_batch);
        void *ws = NULL;
        if (p->be->alloc(p->be, &ws, fl * sizeof(float)))
            return err_set(ERR_NOMEM, "U-Net: cannot allocate the %.2f GiB workspace of a sharded "
                                      "model (create it with nn_unet_opts.sharded to plan it)",
                           (double)fl * sizeof(float) / (1u << 30));
        p->ws_sh = ws;
    }
    return 0;
}

/* The batch as the backend reads it: x (n volumes) and y (n masks, may be NULL) staged into its
 * memory (the same pointers on the CPU). */
static int stage_batch(nn_unet *m, int n, const float *x, const uint16_t *y, const float **xd,
                       const uint16_t **yd) {
    struct nn_unet_plan *p = m->plan;
    const size_t S0 = (size_t)p->S[0];
    return p->be->stage(p->be, x, (size_t)n * m->spec.in_channels * S0, y, y ? (size_t)n * S0 : 0,
                        xd, yd);
}

/* The end of a pass: rc, else the failure the backend recorded during it (cleared either way,
 * so the next pass starts clean). */
static int pass_done(struct nn_unet_plan *p, int rc) {
    const int st = nn_backend_status(p->be);
    return rc ? rc : st;
}

/* The first part of a pass: the batch checked and staged (*yd: the masks as the backend reads
 * them; y and yd may be NULL), then the forward pass, which took *fwd_s seconds. 0, or the
 * failure (the pass is then done). */
static int pass_begin(nn_unet *m, int n, const float *x, const uint16_t *y, const uint16_t **yd,
                      double *fwd_s) {
    const float *xd = NULL;
    int rc = check_batch(m, n);
    if (rc || (rc = stage_batch(m, n, x, y, &xd, yd)))
        return pass_done(m->plan, rc);
    double t0 = time_now();
    forward(m, xd, n);
    *fwd_s = time_now() - t0;
    return 0;
}

int nn_unet_forward_backward(nn_unet *m, const float *x, const uint16_t *y, int n,
                             const float *ce_weight, double *loss, double *dice) {
    struct nn_unet_plan *p = m->plan;
    const uint16_t *yd = NULL;
    double fwd_s, t1;
    int rc = pass_begin(m, n, x, y, &yd, &fwd_s);
    if (rc)
        return rc;
    t1 = time_now();
    prof_begin(PROF_LOSS);
    rc = OPI(loss, p->dlogits, p->logits, yd, ce_weight, n, p->S[0], p->K, loss, NULL, dice, p->ws,
             m->shard);
    prof_end(PROF_LOSS);
    if (rc)
        return pass_done(p, rc);
    if (!isfinite(*loss))
        return pass_done(p, err_set(ERR_NUMERIC, "training loss is %g: the model diverged (lower "
                                                 "the learning rate)",
                                    *loss));
    double t2 = time_now();
    backward(m, n);
    double t3 = time_now();
    p->t_fwd = fwd_s;
    p->t_loss = t2 - t1;
    p->t_bwd = t3 - t2;
    return pass_done(p, 0);
}

int nn_unet_evaluate(nn_unet *m, const float *x, const uint16_t *y, int n,
                     const float *ce_weight, double *loss, float *dice) {
    const uint16_t *yd = NULL;
    double fwd_s;
    int rc = pass_begin(m, n, x, y, &yd, &fwd_s);
    if (rc)
        return rc;
    struct nn_unet_plan *p = m->plan;
    prof_begin(PROF_LOSS);
    rc = OPI(loss, NULL, p->logits, yd, ce_weight, n, p->S[0], p->K, loss, NULL, NULL, p->ws,
             m->shard);
    if (rc == 0)
        rc = OPI(hard_dice, dice, p->logits, yd, n, p->S[0], p->K, m->shard);
    prof_end(PROF_LOSS);
    return pass_done(p, rc);
}

/* The outputs go through dlogits (unused by a forward-only pass) and a download, which on the
 * CPU is a copy. */
int nn_unet_predict(nn_unet *m, const float *x, int n, float *logits, uint16_t *mask) {
    double fwd_s;
    int rc = pass_begin(m, n, x, NULL, NULL, &fwd_s);
    if (rc)
        return rc;
    struct nn_unet_plan *p = m->plan;
    const size_t P = (size_t)n * p->S[0];
    if (logits) {
        OP(to_channels_first, p->dlogits, p->logits, n, p->K, p->S[0]);
        if (!p->be->status)
            rc = p->be->download(p->be, logits, p->dlogits, P * p->K * sizeof(float));
    }
    if (mask && rc == 0) {
        OPI(argmax, (uint16_t *)p->dlogits, p->logits, (long)P, p->K);
        if (!p->be->status)
            rc = p->be->download(p->be, mask, p->dlogits, P * sizeof(uint16_t));
    }
    return pass_done(p, rc);
}
