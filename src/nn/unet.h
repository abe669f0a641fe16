/* unet: the ScaFFold 3D U-Net (reference §9) as one object: parameter, gradient and activation
 * slabs allocated once for a maximum batch and a volume size, training forward+backward with the
 * ScaFFold loss, evaluation, and inference.
 *
 * Typical use by the benchmark (every rank does the same, so the weights agree bit for bit):
 *
 *   nn_unet_spec s = {.in_channels = 3, .n_classes = n_categories + 1,
 *                     .layers = problem_scale - unet_bottleneck_dim,
 *                     .base_channels = 64, .groups = group_norm_groups};
 *   nn_unet m;  nn_optim o;
 *   nn_unet_create(&m, &s, local_batch_size, 1 << problem_scale, ...same for H, W);
 *   nn_unet_init_params(&m, seed);
 *   nn_optim_init(&o, NN_OPT_ADAM, m.nparams);
 *   per batch:  nn_unet_zero_grad(&m);
 *               nn_unet_forward_backward(&m, x, y, n, ce_w, &loss, &dice);
 *               MPI_Allreduce(MPI_IN_PLACE, m.grads, m.nparams, MPI_FLOAT, MPI_SUM, comm);
 *               (scale m.grads by 1/ranks; a device backend reduces m.dgrads with NCCL)
 *               nn_unet_step(&m, &o, lr, 1.0);   (clip_grad_norm_ 1.0, then the update)
 *   per epoch:  lr = nn_lr_cosine_warm(lr0, T_0, T_mult, eta_min, epochs_done);
 *   validation: nn_unet_evaluate(&m, x, y, n, ce_w, &val_loss, dice_per_sample);
 *
 * Inputs: volumes are float32 (n, in_channels, D, H, W) (NumPy/PyTorch order), masks uint16
 * (n, D, H, W) with values < n_classes. Internally activations are channels-last (layers.h).
 * Parameters are stored in PyTorch's layout, in state_dict order, under upstream's names
 * (nn_unet.tensors), so a checkpoint is the state_dict. */
#ifndef SCAFFOLD_NN_UNET_H
#define SCAFFOLD_NN_UNET_H

#include <stddef.h>
#include <stdint.h>

struct nn_backend;
struct nn_optim;

typedef struct nn_unet_spec {
    int in_channels;   /* 3 */
    int n_classes;     /* n_categories + 1 (at most 256) */
    int layers;        /* L = problem_scale - unet_bottleneck_dim, >= 1 */
    int base_channels; /* 64 upstream; the extension key unet_base_channels changes it */
    int groups;        /* group_norm_groups: must divide base_channels */
} nn_unet_spec;

/* How the model computes (all zero: fp32, no checkpointing, unsharded workspace).
 *  - precision: NN_FP32 (torch_amp: 0) or NN_BF16 (torch_amp: 1): convolutions in bf16 with
 *    fp32 accumulation and the tensors between layers in bf16, as PyTorch's CPU autocast;
 *    GroupNorm statistics, softmax, loss, Dice, master weights and the optimizer stay fp32.
 *  - checkpointing (activation_checkpointing): keep only each U-Net block's output (and its
 *    GroupNorm statistics) and recompute the block's internals in backward, as upstream's
 *    torch.utils.checkpoint per block; gradients are bit-identical to the plain run.
 *  - sharded: the model will be given an nn_shard (spatial parallelism); the workspace then
 *    holds a whole block's padded copy, which the halo exchange fills, and activation_floats
 *    counts it. A model created without it allocates that workspace beside its own at its first
 *    sharded step (unless its own is large enough), outside activation_floats: set it.
 *  - backend: the operation table every pass runs through (backend.h); NULL: the CPU engine.
 *    On a device backend (the CUDA one) the parameters, gradients, optimizer state and
 *    activations live in its memory: see "Device backends" below. The model does not own it.
 *  - optimizer (nn_optim_kind): on a device backend, the optimizer whose state the model's
 *    device slab holds (nn_unet_step refuses another); ignored on the CPU, where the state is
 *    nn_optim's. */
typedef struct nn_unet_opts {
    int precision;
    int checkpointing;
    int sharded;
    struct nn_backend *backend;
    int optimizer;
} nn_unet_opts;

typedef struct nn_tensor_info {
    char name[96]; /* upstream state_dict key, e.g. "down_list.0.double_conv.0.weight" */
    int ndim;
    int64_t shape[5];
    size_t offset; /* into params / grads (floats) */
    size_t numel;
} nn_tensor_info;

struct nn_unet_plan;

typedef struct nn_unet {
    nn_unet_spec spec;
    int max_batch, d, h, w; /* allocation size: batch and volume extent */
    int ntensors;
    nn_tensor_info *tensors; /* state_dict order */
    size_t nparams;
    float *params; /* one slab, nparams floats */
    float *grads;  /* one slab, same layout; the benchmark all-reduces it directly */
    /* The backend's parameters, gradients and optimizer state (one allocation): params and
     * grads themselves and no state on the CPU; device memory on a device backend, where
     * params and grads above are host mirrors (nn_unet_upload, nn_unet_download). */
    float *dparams, *dgrads, *dstate;
    nn_unet_opts opts;             /* precision and checkpointing, from nn_unet_create_opts */
    size_t activation_floats;      /* size of the activation + workspace slab (floats) */
    size_t activation_index_bytes; /* size of the index slab (MaxPool argmax) */
    struct nn_unet_plan *plan; /* internal */
    /* Optional hooks, NULL by default (set after nn_unet_create):
     *  - shard: the model holds one block of a volume split over ranks (layers.h, nn_shard);
     *    d, h, w above are then the block's extent.
     *  - grad_ready(grad_ctx, first): called during the backward pass each time the gradients
     *    of tensors first..ntensors-1 are final (they become final in reverse state_dict
     *    order), so that a data-parallel all-reduce of those slab ranges can start while the
     *    rest of the backward pass runs (src/parallel/grad.h). */
    const struct nn_shard *shard;
    void (*grad_ready)(void *grad_ctx, int first);
    void *grad_ctx;
} nn_unet;

/* Validates a spec and a volume extent (each divisible by 2^layers). 0 or ERR_CONFIG naming the
 * offending value and the fix. */
int nn_unet_spec_check(const nn_unet_spec *s, int d, int h, int w);

/* Number of parameters of a spec (the table of reference §9.4 for base 64). */
size_t nn_unet_param_count(const nn_unet_spec *s);

/* Memory a model needs, in bytes: exactly what nn_unet_create_opts allocates for this spec,
 * options (NULL: defaults), batch and extent (activations: the activation and index slabs less
 * the workspace; workspace: the largest layer's scratch, part of the activation slab), plus the
 * optimizer state of `optimizer` (nn_optim_kind). 0 or ERR_CONFIG (as nn_unet_create). */
typedef struct nn_unet_memory {
    size_t params, grads, optimizer, activations, workspace, total;
} nn_unet_memory;
int nn_unet_memory_estimate(const nn_unet_spec *s, const nn_unet_opts *o, int batch, int d,
                            int h, int w, int optimizer, nn_unet_memory *out);

/* Builds the model and allocates every slab for batches of up to max_batch volumes of (d,h,w).
 * Parameters are zero until nn_unet_init_params or a checkpoint load. 0, ERR_CONFIG or
 * ERR_NOMEM (with the number of bytes asked for). nn_unet_free is NULL-safe. */
int nn_unet_create(nn_unet *m, const nn_unet_spec *s, int max_batch, int d, int h, int w);
/* The same with options (o NULL: defaults; see nn_unet_opts). ERR_CONFIG for bad options. */
int nn_unet_create_opts(nn_unet *m, const nn_unet_spec *s, const nn_unet_opts *o, int max_batch,
                        int d, int h, int w);
void nn_unet_free(nn_unet *m);

/* PyTorch's default initialisation (reference §9.6) from our RNG (purpose RNG_MODEL_INIT,
 * a = tensor index): conv weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)), GroupNorm
 * weight 1 and bias 0. Identical on every rank for the same seed. On a device backend the
 * values are uploaded too: 0 or the upload's error. */
int nn_unet_init_params(nn_unet *m, uint64_t seed);

/* Zeroes the backend's gradients (m->grads itself on the CPU). */
void nn_unet_zero_grad(nn_unet *m);

/* ---- Device backends ------------------------------------------------------------------------
 * The passes and nn_unet_step compute on dparams, dgrads and dstate. The host side sees them
 * through copies, made only when asked for (no-ops on the CPU backend):
 *  - nn_unet_upload: m->params (and o->state, o->step's state, when o is not NULL) to the
 *    backend, after writing parameters on the host (a checkpoint load, a broadcast, a restored
 *    snapshot). nn_unet_init_params does it itself.
 *  - nn_unet_download: the backend's parameters, gradients and (o not NULL) optimizer state to
 *    m->params, m->grads and o->state, before reading them on the host (checkpoints, tests).
 * 0 or the backend's error. */
int nn_unet_upload(nn_unet *m, const struct nn_optim *o);
int nn_unet_download(nn_unet *m, struct nn_optim *o);

/* One optimizer step on the backend: clip_grad_norm_(max_norm) when max_norm > 0, then o's
 * update (nn_optim_step's formulas) of the parameters with learning rate lr. 0, ERR_CONFIG (o's
 * kind is not the one the device slab was made for) or the backend's error. */
int nn_unet_step(nn_unet *m, struct nn_optim *o, double lr, double max_norm);

/* Index of a tensor by state_dict name, or -1. */
int nn_unet_find_tensor(const nn_unet *m, const char *name);

/* Training step without the update: forward on n <= max_batch samples, the ScaFFold loss with
 * CE class weights ce_weight[n_classes], and backward. Gradients ACCUMULATE into m->grads
 * (call nn_unet_zero_grad first). Returns the loss and the soft foreground Dice (train Dice).
 * 0, ERR_RANGE (bad label, n too large) or ERR_NUMERIC (non-finite loss). */
int nn_unet_forward_backward(nn_unet *m, const float *x, const uint16_t *y, int n,
                             const float *ce_weight, double *loss, double *dice);

/* Validation: forward only; the loss (weighted CE + 1 - soft foreground Dice over the batch)
 * and the hard foreground Dice of each sample into dice[n]. 0 or ERR_RANGE. */
int nn_unet_evaluate(nn_unet *m, const float *x, const uint16_t *y, int n,
                     const float *ce_weight, double *loss, float *dice);

/* Inference: forward only. logits (n, n_classes, D, H, W) and/or mask (n, D, H, W) argmax
 * labels; either may be NULL. 0 or ERR_RANGE. */
int nn_unet_predict(nn_unet *m, const float *x, int n, float *logits, uint16_t *mask);

/* Channels-last logits (n, D, H, W, n_classes) of the last forward pass (tests); backend
 * memory (download it on a device backend). */
const float *nn_unet_logits(const nn_unet *m);

/* Seconds spent in the last forward_backward, split (forward, loss, backward). */
void nn_unet_last_times(const nn_unet *m, double *fwd, double *loss, double *bwd);

#endif
