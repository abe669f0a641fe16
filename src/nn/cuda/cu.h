/* cu: the CUDA backend's device library, built only with `make CUDA=1`: device selection
 * (reference §10.1), one context per process (streams, cuDNN and cuBLAS handles, workspace,
 * convolution-algorithm cache), the parameter/gradient/optimizer slab, every layer of the 3D U-Net
 * forward and backward on device memory, the ScaFFold loss and Dice, the fused optimizers and
 * gradient clipping, pinned staging buffers for the loader, and the NCCL gradient all-reduce.
 *
 * Contracts (the CPU engine's, src/nn/layers.h, loss.h, optim.h, unless stated here):
 *  - Tensor pointers are DEVICE pointers; activations are float32, channels-last (N, D, H, W, C)
 *    as on the CPU, so every op is compared element by element with its CPU twin. Parameters and
 *    their gradients keep PyTorch's layout (checkpoints are the same files).
 *  - Convolution weights are packed once per optimizer step into cuDNN's layout and the context's
 *    compute precision (cu_pack_*), and the packed copy is what the convolutions read.
 *  - Precision: fp32 contexts compute in fp32 with TF32 off (cuDNN FMA math, cuBLAS
 *    CUBLAS_COMPUTE_32F); bf16 contexts (torch_amp: 1) run convolutions and the 1x1 GEMM on bf16 copies with
 *    fp32 accumulation and round their outputs to bf16 values (PyTorch autocast), while
 *    GroupNorm, loss, Dice and optimizer stay fp32 with double statistics.
 *  - Weight and bias gradients ACCUMULATE, input gradients are OVERWRITTEN (as on the CPU).
 *  - Ops are asynchronous on the context's compute stream and never allocate: scratch comes from
 *    the context's workspace, sized from the cu_*_ws_plan totals. Every reduction
 *    has a fixed partition combined in a fixed order, and cuDNN algorithms are chosen among the
 *    deterministic ones, so a run repeats bit for bit on the same GPU.
 *  - Functions return 0 or a negative ERR_* code with a message (core/err.h); a CUDA, cuDNN,
 *    cuBLAS or NCCL failure is ERR_INTERNAL naming the call. Asynchronous failures surface at the
 *    next call that synchronises (cu_sync, cu_download, loss, Dice). */
#ifndef SCAFFOLD_NN_CUDA_CU_H
#define SCAFFOLD_NN_CUDA_CU_H

#include "nn/optim.h"

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

/* ==== Host-side logic (no GPU needed; unit-tested on any machine) =========================== */

/* ---- Device selection ------------------------------------------------------------------------
 * The `device` key: cpu, cuda or auto (cuda when every rank sees a GPU). */
typedef enum cu_want { CU_WANT_CPU = 0, CU_WANT_CUDA = 1, CU_WANT_AUTO = 2 } cu_want;
/* 0 or ERR_CONFIG naming the key. */
int cu_want_parse(const char *s, cu_want *w);

/* Local-rank variables in upstream's priority order (NULL-terminated). */
extern const char *const cu_local_rank_vars[];
typedef const char *(*cu_getenv_fn)(const char *name);
/* The first variable of cu_local_rank_vars that is set: 0 with *local_rank and *var (its name),
 * 1 when none is set, ERR_CONFIG when it is not a non-negative integer (naming it). */
int cu_local_rank_from_env(cu_getenv_fn get, int *local_rank, const char **var);

/* Upstream's rule: one visible GPU -> it; several -> the local rank's. *gpu = -1 when ndev is 0.
 * ERR_CONFIG when the local rank has no GPU of its own (local_rank >= ndev > 1). */
int cu_pick_gpu(int ndev, int local_rank, int *gpu);

/* One rank's decision. ndev < 0 means the probe failed (probe_msg says why). cpu_only: NULL when
 * the run can use a GPU, else why it cannot (e.g. spatial sharding runs on the CPU backend
 * only). *gpu = -1 means the CPU; `note` receives the one line to print (empty when there is
 * nothing to say). ERR_CONFIG (naming the key 'device' and the fix) when `cuda` was asked for
 * and cannot be honoured. */
int cu_device_decide(cu_want want, int ndev, const char *probe_msg, int local_rank,
                     const char *cpu_only, int *gpu, char *note, size_t note_len);

/* ---- Algorithm cache -------------------------------------------------------------------------
 * One entry per cuDNN convolution problem: the cuDNN convolution's input x (N, C, D, H, W), its
 * filter (K, C, k, k, k), stride = k (k = 2, ConvTranspose3d as the adjoint of a stride-2
 * convolution) or 1 with padding 1 (k = 3), and the precision. Per cuDNN operation
 * (forward, backward data, backward filter) the algorithm chosen by measurement. */
enum { CU_OP_FWD = 0, CU_OP_BWD_DATA = 1, CU_OP_BWD_FILTER = 2, CU_NOPS = 3 };
#define CU_ALGO_CACHE_MAX 128
typedef struct cu_conv_key {
    int k;     /* 3 (Conv3d k3 p1) or 2 (stride-2 k2, the ConvTranspose3d problem) */
    int bf16;  /* compute precision */
    int N, C, D, H, W, K;
} cu_conv_key;
typedef struct cu_algo {
    int found;     /* 0 until measured */
    int algo;      /* the chosen cudnnConvolution*Algo_t (fastest deterministic one) */
    int math;      /* its cudnnMathType_t */
    size_t ws;     /* its workspace bytes */
    float ms;      /* its time as cuDNN measured it */
    int best_algo; /* the fastest algorithm of any kind (deterministic or not), for the bench */
    int best_math;
    size_t best_ws;
    float best_ms;
} cu_algo;
typedef struct cu_algo_entry {
    cu_conv_key key;
    cu_algo op[CU_NOPS];
} cu_algo_entry;
typedef struct cu_algo_cache {
    int n;
    cu_algo_entry e[CU_ALGO_CACHE_MAX];
} cu_algo_cache;
int cu_conv_key_eq(const cu_conv_key *a, const cu_conv_key *b);
/* Index of the key's entry, adding it when absent; ERR_RANGE when the cache is full. */
int cu_algo_slot(cu_algo_cache *c, const cu_conv_key *k);
/* "conv3d k3 bf16 N1 C128 D64 H64 W64 K64" for logs and the benchmark. */
void cu_conv_key_str(const cu_conv_key *k, char *buf, size_t n);

/* ---- Packed-weight cache ---------------------------------------------------------------------
 * The backend table's packed copies of convolution weights (cu_pack_*), found by the weight's
 * device address. An entry is current while its version equals the cache's, which the owner
 * advances whenever parameters may change (upload, optimizer step, allocation), so each weight
 * is packed once per change however many passes read it. */
#define CU_WCACHE_MAX 128
typedef struct cu_wcache_entry {
    const float *w; /* the weight in PyTorch layout */
    void *packed;   /* its packed copy (owned by the cache's user) */
    int ca, cin, cout, k; /* ca: channels of the first input (the packing splits at it) */
    long version;   /* of the packed copy */
} cu_wcache_entry;
typedef struct cu_wcache {
    int n;
    long version;
    cu_wcache_entry e[CU_WCACHE_MAX];
} cu_wcache;
/* Index of w's entry for inputs of ca + (cin - ca) channels (ca = cin: one input; k = 2: ca
 * is cin). *fresh = 1 when the entry was added now or w now has another shape: its
 * packed buffer (NULL when new, else the old one for the caller to free) must be (re)made, and
 * its version is stale. ERR_RANGE when the cache is full. */
int cu_wcache_find(cu_wcache *c, const float *w, int ca, int cin, int cout, int k, int *fresh);

/* ---- Bucketed all-reduce plan ----------------------------------------------------------------
 * Gradient tensors (state_dict order, contiguous in the slab) grouped into buckets exactly as
 * the CPU path's all-reduce does (src/parallel/grad.c): from the LAST tensor backwards (the order in
 * which backward finishes them), a bucket closes at the tensor that brings it to cap floats or
 * more; the lowest bucket may be smaller. Bucket i covers floats [offset, offset+count) and
 * tensors first..last; it may start once tensors >= first are final. Returns the number of
 * buckets, or ERR_RANGE when the tensors are not contiguous from offset 0 or cap is 0. `out`
 * has room for ntensors buckets. */
typedef struct cu_bucket {
    size_t offset, count;
    int first, last;
} cu_bucket;
int cu_bucket_plan(const size_t *offset, const size_t *numel, int ntensors, size_t cap,
                   cu_bucket *out);
/* With buckets 0..started-1 of a plan started and tensors >= first final: how many buckets may
 * have started (the plan's order, each once every tensor of it is final). */
int cu_buckets_startable(const cu_bucket *b, int nb, int started, int first);

/* ---- The slab: one device allocation for parameters, gradients and optimizer state ----------
 * Byte offsets of each region (256-byte aligned) and the total. */
typedef struct cu_slab_layout {
    size_t params, grads, state, bytes;
} cu_slab_layout;
void cu_slab_plan(size_t nparams, size_t state_floats, cu_slab_layout *l);

/* ---- Shape validation ------------------------------------------------------------------------
 * cuDNN's legacy descriptors hold sizes and strides in 32-bit ints: every tensor of one sample
 * must have fewer than 2^31 elements. ERR_CONFIG naming the layer shape and the fixes. */
int cu_check_conv_shape(int N, int D, int H, int W, int cin, int cout, int transposed);

/* ---- The skip connection's convolution ------------------------------------------------------
 * A Conv3d with a second input (the up blocks' skip) reaches cuDNN in one of two ways:
 *  split:  two convolutions, one per input, with the filter split by input channel (the second
 *          accumulating into the output, beta = 1): no copy of the inputs. fp32 only.
 *  gather: the inputs concatenated into the workspace, one convolution. Always in bf16, where
 *          the conversion to bf16 writes a copy anyway and concatenates for free (and two bf16
 *          outputs added would round twice, unlike PyTorch's one convolution).
 * SCAFFOLD_CUDA_SKIP=split|gather picks the fp32 way (default split); 0 or ERR_CONFIG naming
 * the variable. */
int cu_skip_mode_parse(const char *s, int *split);
/* The cuDNN convolutions of a Conv3d k3 with inputs of ca and cb channels (cb = 0: one input):
 * part i covers input channels [c0, c0 + C) and reads the packed filter from element w_off
 * (cu_pack_conv3d packs the parts one after the other, each (cout, 27, C)). Returns 1 or 2. */
typedef struct cu_conv_part {
    int c0, C;
    size_t w_off;
} cu_conv_part;
int cu_conv3d_parts(int split, int bf16, int ca, int cb, int cout, cu_conv_part part[2]);

/* ---- Workspace plans ---------------------------------------------------------------------------
 * Each op carves its scratch from the context's workspace as fixed regions (offsets in bytes,
 * 256-byte aligned; a region an op does not need in a precision has size 0). The op and the
 * sizing share the plan, so a workspace sized from the plan totals always fits. Regions:
 *  conv3d:  0 x = cat(inA, inB) in the compute type, 1 dW (cuDNN layout), 2 y or dy in bf16,
 *           3 dx in bf16
 *  convt3d: 0 dout packed (compute type), 1 in as bf16, 2 dW, 3 out or din in bf16,
 *           4 bias partial sums, 5 bias sums
 *  conv1:   0 in as bf16, 1 dout as bf16, 2 w as bf16, 3 fp32 GEMM result, 4 fp32 dW,
 *           5 bias partial sums, 6 bias sums
 *  groupnorm: 0 partial sums, 1 sums, 2 backward coefficients
 *  loss:    0 probabilities (when dlogits is NULL), 1 CE block sums, 2 bad labels, 3 class
 *           partial sums, 4 class sums, 5 Dice coefficients, 6 results
 *  dice:    0 counts, 1 bad label;   norm: 0 block sums, 1 results */
#define CU_WS_REGIONS 8
#define CU_RED_BLOCKS 1024 /* blocks of the grid-wide reductions (= kern.h CUK_RED_BLOCKS) */
typedef struct cu_ws_plan {
    int n;
    size_t off[CU_WS_REGIONS], size[CU_WS_REGIONS];
    size_t total;
} cu_ws_plan;
void cu_conv3d_ws_plan(cu_ws_plan *p, int N, int D, int H, int W, int cin, int cout, int bf16);
void cu_convt3d_ws_plan(cu_ws_plan *p, int N, int D, int H, int W, int cin, int cout, int bf16);
void cu_conv1_ws_plan(cu_ws_plan *p, long P, int cin, int cout, int bf16);
void cu_groupnorm_ws_plan(cu_ws_plan *p, int N, long S, int C);
void cu_loss_ws_plan(cu_ws_plan *p, int N, long S, int K);
void cu_dice_ws_plan(cu_ws_plan *p, int N, int K);
void cu_norm_ws_plan(cu_ws_plan *p);
/* Bytes of a packed convolution weight (k^3 * cin * cout elements of the compute type). */
size_t cu_packed_bytes(int cin, int cout, int k, int bf16);
/* Reduction slices per sample for a reduction over S voxels (fixed by the shape alone). */
int cu_slices(long S);

/* ==== Device side (needs a GPU) ============================================================== */

/* Visible GPUs (>= 0), or -1 with `why` saying why the probe failed (no driver, ...). */
int cu_probe(char *why, size_t n);

/* Collective over comm: every rank probes its GPUs, picks one (cu_pick_gpu with the local rank
 * from the environment, else from MPI's shared-memory split), and the ranks agree: the GPU on
 * every rank or the CPU on every rank. *gpu = -1 means the CPU; `note` receives the one line
 * for rank 0 to print (empty when there is nothing to say). A rank's error is returned on that
 * rank only (the caller agrees on it with dist_agree). */
int cu_device_select(const char *want, MPI_Comm comm, const char *cpu_only, int *gpu, char *note,
                     size_t note_len);

typedef struct cu_ctx cu_ctx;

/* Context on GPU `gpu`: streams, handles, `ws_bytes` of op workspace (0: none until
 * cu_ctx_set_workspace) and `algo_ws_bytes` for cuDNN's algorithms (allocated here, once).
 * bf16: the torch_amp: 1 precision. */
int cu_ctx_create(cu_ctx **out, int gpu, int bf16, size_t ws_bytes, size_t algo_ws_bytes);
void cu_ctx_free(cu_ctx *c);
/* Points the op workspace at `bytes` of the caller's device memory (freeing the context's own),
 * e.g. the workspace region of the U-Net's activation slab. The caller keeps it alive. */
void cu_ctx_set_workspace(cu_ctx *c, void *ws, size_t bytes);
int cu_ctx_bf16(const cu_ctx *c);
/* The skip connection's way (cu_conv3d_parts): from SCAFFOLD_CUDA_SKIP at creation; always
 * gather in bf16. Set it before packing weights (the packing depends on it). */
int cu_ctx_skip_split(const cu_ctx *c);
void cu_ctx_set_skip_split(cu_ctx *c, int split);
/* The algorithm cache (read-only; for the benchmark and logs). */
const cu_algo_cache *cu_ctx_algos(const cu_ctx *c);
/* Waits for the compute stream; reports any asynchronous failure. */
int cu_sync(cu_ctx *c);

/* Device memory for setup-time buffers (never called by ops). */
int cu_alloc(void **p, size_t bytes);
void cu_free(void *p);
/* Synchronous copies through the compute stream (setup, checkpoints, tests). */
int cu_upload(cu_ctx *c, void *dst, const void *src, size_t bytes);
int cu_download(cu_ctx *c, void *dst, const void *src, size_t bytes);
/* Asynchronous zeroing on the compute stream (gradients). */
int cu_zero(cu_ctx *c, void *p, size_t bytes);

/* The slab (cu_slab_plan) in one allocation: params, grads, state (Adam m then v, RMSprop v). */
typedef struct cu_slab {
    void *base;
    float *params, *grads, *state;
    size_t nparams, state_floats;
    cu_slab_layout layout;
} cu_slab;
int cu_slab_create(cu_slab *s, size_t nparams, nn_optim_kind kind);
void cu_slab_free(cu_slab *s);

/* ---- Weight packing: PyTorch layout -> cuDNN's (K, k, k, k, C) in the compute precision ------
 * wp holds cu_packed_bytes(cin, cout, k, bf16) bytes. A Conv3d's packing depends on its inputs'
 * channels ca + cb and the context's skip mode (cu_conv3d_parts): pack with the ca, cb of the
 * ops that will read it. */
int cu_pack_conv3d(cu_ctx *c, void *wp, const float *w, int cout, int ca, int cb); /* k3 */
int cu_pack_convt3d(cu_ctx *c, void *wp, const float *w, int cin, int cout);       /* k2 */
/* Sets up cuDNN's descriptors of a convolution key as the ops do and checks that cuDNN's output
 * shape is ours: cuDNN only, no GPU needed (tests run it on every U-Net shape). */
int cu_conv_desc_check(const cu_conv_key *k);

/* ---- Conv3d k3 p1, no bias (layers.h nn_conv3d_*), wp packed by cu_pack_conv3d ------------- */
int cu_conv3d_forward(cu_ctx *c, float *out, const float *inA, int ca, const float *inB, int cb,
                      const void *wp, int cout, int N, int D, int H, int W);
/* dw accumulates. The input gradient is overwritten as nn_conv3d_backward_p writes it: with
 * dinB NULL, din (N,D,H,W,ca+cb) receives all of it (skipped when din is NULL); with dinB (a
 * second input is required), din (N,D,H,W,ca) and dinB (N,D,H,W,cb) receive the two parts. */
int cu_conv3d_backward(cu_ctx *c, float *din, float *dinB, float *dw, const float *dout,
                       const float *inA, int ca, const float *inB, int cb, const void *wp,
                       int cout, int N, int D, int H, int W);

/* ---- ConvTranspose3d k2 s2 + bias (layers.h nn_convt3d_*), wp packed by cu_pack_convt3d ---- */
int cu_convt3d_forward(cu_ctx *c, float *out, const float *in, const void *wp, const float *b,
                       int cin, int cout, int N, int D, int H, int W);
int cu_convt3d_backward(cu_ctx *c, float *din, float *dw, float *db, const float *dout, long ldo,
                        const float *in, const void *wp, int cin, int cout, int N, int D, int H,
                        int W);

/* ---- Conv3d k1 + bias, the output layer, on cuBLAS (w in PyTorch layout) --------------------- */
int cu_conv1_forward(cu_ctx *c, float *out, const float *in, const float *w, const float *b,
                     int cin, int cout, long P);
int cu_conv1_backward(cu_ctx *c, float *din, float *dw, float *db, const float *dout,
                      const float *in, const float *w, int cin, int cout, long P);

/* ---- GroupNorm (+ ReLU), ReLU, MaxPool3d(2), concatenation, layout (layers.h) ------------- */
int cu_groupnorm_forward(cu_ctx *c, float *y, float *mean, float *rstd, const float *x,
                         const float *gamma, const float *beta, int N, long S, int C, int G,
                         int relu);
int cu_groupnorm_apply(cu_ctx *c, float *y, const float *x, const float *mean, const float *rstd,
                       const float *gamma, const float *beta, int N, long S, int C, int G,
                       int relu);
int cu_groupnorm_backward(cu_ctx *c, float *dx, float *dgamma, float *dbeta, const float *dy,
                          const float *x, const float *y, const float *mean, const float *rstd,
                          const float *gamma, int N, long S, int C, int G, int relu);
int cu_relu_forward(cu_ctx *c, float *y, const float *x, size_t n);
int cu_relu_backward(cu_ctx *c, float *dx, const float *dy, const float *y, size_t n);
int cu_maxpool3d_forward(cu_ctx *c, float *out, uint8_t *idx, const float *in, int N, int D,
                         int H, int W, int C);
int cu_maxpool3d_backward(cu_ctx *c, float *din, const float *dout, const uint8_t *idx, int N,
                          int D, int H, int W, int C);
int cu_concat_forward(cu_ctx *c, float *out, const float *a, int ca, const float *b, int cb,
                      long P);
int cu_concat_backward(cu_ctx *c, float *da, float *db, const float *dout, int ca, int cb,
                       long P);
int cu_to_channels_last(cu_ctx *c, float *dst, const float *src, int N, int C, long S);
int cu_to_channels_first(cu_ctx *c, float *dst, const float *src, int N, int C, long S);

/* ---- Loss and metrics (loss.h). Synchronous: they return host values; ce_weight is a device
 * array of K floats, dice (N) a host array. ------------------------------------------------ */
int cu_loss(cu_ctx *c, float *dlogits, const float *logits, const uint16_t *labels,
            const float *ce_weight, int N, long S, int K, double *loss, double *ce, double *dice);
int cu_hard_dice(cu_ctx *c, float *dice, const float *logits, const uint16_t *labels, int N,
                 long S, int K);
int cu_argmax(cu_ctx *c, uint16_t *out, const float *logits, long P, int K);

/* ---- Optimizers and clipping (optim.h) ----------------------------------------------------
 * One fused update of params[n] from grads[n] with o's kind and hyperparameters; o->step is
 * incremented as nn_optim_step does. `state` is the device state (the slab's), o->state is not
 * used. */
int cu_optim_step(cu_ctx *c, nn_optim *o, float *params, const float *grads, float *state,
                  size_t n, double lr);
/* clip_grad_norm_ on the device (no host round trip unless `norm` is not NULL, which receives
 * the norm before clipping). */
int cu_clip_grad_norm(cu_ctx *c, float *grads, size_t n, double max_norm, double *norm);
int cu_scale(cu_ctx *c, float *x, size_t n, float s);
/* x rounded in place to bf16 values (nn_round_bf16). */
int cu_round_bf16(cu_ctx *c, float *x, size_t n);
/* bf16 storage of tensors that hold bf16 values (nn_bf16_narrow, nn_bf16_widen). */
int cu_bf16_narrow(cu_ctx *c, uint16_t *dst, const float *src, size_t n);
int cu_bf16_widen(cu_ctx *c, float *dst, const uint16_t *src, size_t n);

/* ---- Loader staging: pinned host slots and asynchronous host-to-device copies -------------
 * A ring of `nslots` slots of `bytes`. The loader fills cu_stage_host(slot) (which first waits
 * until that slot's previous copy is done), cu_stage_send() starts the copy on the context's
 * copy stream, and cu_stage_device() makes the compute stream wait for it (no host wait), so the
 * copy of batch i+1 overlaps the compute of batch i. NULL returns carry an err_msg(). */
typedef struct cu_stage cu_stage;
int cu_stage_create(cu_ctx *c, cu_stage **out, size_t bytes, int nslots);
void cu_stage_free(cu_stage *s);
void *cu_stage_host(cu_stage *s, int slot);
int cu_stage_send(cu_stage *s, int slot, size_t bytes);
void *cu_stage_device(cu_stage *s, int slot);
/* Marks the slot's device data consumed by everything queued so far on the compute stream (the
 * next cu_stage_send to that slot waits for it on the copy stream). */
int cu_stage_release(cu_stage *s, int slot);

/* ---- The U-Net's operation table (src/nn/backend.h) on GPU `gpu` --------------------------
 * A context in the precision of bf16 (torch_amp) with `algo_ws_bytes` of cuDNN algorithm
 * workspace; the op workspace is the model's (the table's workspace entry). Packed convolution
 * weights are cached per weight and remade after each change of the parameters (cu_wcache).
 * Free with (*out)->destroy(*out). */
struct nn_backend;
int cu_backend_create(struct nn_backend **out, int gpu, int bf16, size_t algo_ws_bytes);
/* The entries and properties of that table without a context (no GPU needed): its sizes and
 * optional entries, for memory plans (nn_unet_memory_estimate) and tests. Its ops must not
 * be called. */
void cu_backend_table(struct nn_backend *b, int bf16);
/* The context of a table made by cu_backend_create (tests, benchmark). */
cu_ctx *cu_backend_ctx(struct nn_backend *b);

/* ---- NCCL: one communicator per process, bootstrapped over MPI ------------------------------
 * Collective over comm (every rank with its own GPU): rank 0 creates the NCCL id, MPI_Bcast
 * sends it, every rank joins; failures are agreed before and after the join. */
typedef struct cu_comm cu_comm;
int cu_comm_create(cu_comm **out, cu_ctx *c, MPI_Comm comm);
void cu_comm_free(cu_comm *m);
/* Sums bucket b of grads over the ranks and scales it by `scale` (1/replicas), on the comm
 * stream after everything queued so far on the compute stream (call it when the bucket's
 * gradients are final: it overlaps the rest of backward). */
int cu_allreduce_bucket(cu_comm *m, float *grads, const cu_bucket *b, float scale);
/* Makes the compute stream wait for every bucket started so far. */
int cu_allreduce_wait(cu_comm *m);

/* A model's bucketed gradient all-reduce (the device twin of src/parallel/grad.h): the buckets of
 * cu_bucket_plan over the gradient tensors (offsets and sizes in floats, state_dict order,
 * contiguous in `grads`, a device array), each summed and scaled by `scale` (1/replicas).
 * cu_grad_ready is the model's grad_ready callback (ctx = the cu_grad): it starts every bucket
 * whose tensors are all final. cu_grad_finish starts the rest and makes the compute stream wait
 * for all of them; every rank issues every bucket in the same order whatever happened before
 * (a failure is agreed afterwards), so no rank waits forever. */
typedef struct cu_grad cu_grad;
int cu_grad_create(cu_grad **out, cu_comm *m, float *grads, const size_t *offset,
                   const size_t *numel, int ntensors, size_t cap, float scale);
void cu_grad_free(cu_grad *g);
void cu_grad_begin(cu_grad *g);
void cu_grad_ready(void *ctx, int first);
int cu_grad_finish(cu_grad *g);

#endif
