/* unet_int: the U-Net's plan (the model's shape, its slab layout and its per-run state), shared
 * by unet.c (creation, forward, backward) and unet_plan.c (checks, parameter table, layout),
 * and nothing else. */
#ifndef SCAFFOLD_NN_UNET_INT_H
#define SCAFFOLD_NN_UNET_INT_H

#include "nn/backend.h"
#include "nn/layers.h"
#include "nn/unet.h"

#include <stddef.h>
#include <stdint.h>

#define MAXL 16

typedef struct dc_block {
    int cin, cout, level;
    int w1, g1w, g1b, w2, g2w, g2b; /* tensor indices */
    /* (N, S, cout): conv outputs (NULL with checkpointing: recomputed into scratch), block
     * output (GN+ReLU of c2) */
    float *c1, *c2, *a2;
    float *m1, *r1, *m2, *r2; /* (N, G) */
    /* h16 (down blocks above the bottleneck): c1 and c2 kept as bf16 from the forward pass to
     * the backward pass; c1 and c2 are then the same-level up block's, free scratch at both
     * ends */
    uint16_t *h1, *h2;
    /* keep_a1: a1 = relu(gn(c1)) kept from the forward pass for conv2's weight gradient (NULL:
     * made again in the backward pass from c1 and the saved statistics) */
    float *a1;
} dc_block;

struct nn_unet_plan {
    nn_backend *be; /* every layer runs through it (backend.h) */
    int L, K, G;
    nn_prec prec;
    int ckpt; /* activation checkpointing: only block outputs (and GN statistics) are kept */
    int ck2;  /* checkpointing with the backend's groupnorm_backward_x: the top level's scratch
               * is tX and tY, and the other levels' is carved from them (ckpt_roles) */
    int sharded; /* ws sized for whole-block padded copies (sharded convolutions) */
    int h16;     /* bf16 without checkpointing: the down blocks' conv outputs kept as bf16 */
    int keep_a1; /* every block's a1 kept (dc_block.a1) */
    float *ws_sh; /* a sharded model created unsharded: its whole-block workspace, allocated at
                   * the first step when ws is smaller (NULL until then, or if ws suffices) */
    int dd[MAXL + 1], hh[MAXL + 1], ww[MAXL + 1], ch[MAXL + 1];
    long S[MAXL + 1];
    dc_block down[MAXL + 1], up[MAXL];
    int upw[MAXL], upb[MAXL], outw, outb;
    float *pool[MAXL + 1]; /* pool[i] = maxpool(r_{i-1}), (N, S_i, ch_{i-1}), i >= 1 */
    uint8_t *pidx[MAXL + 1];
    float *upt[MAXL]; /* convT output of up block j, (N, S_l, ch_l) */
    float *xin, *logits, *dlogits;
    float *dr[MAXL + 1];
    float *gG, *gT, *gH;
    /* checkpointing scratch: conv output, pool output and argmax of the block being run or
     * recomputed */
    float *cs, *pools;
    uint8_t *pidxs;
    float *tX, *tY; /* ck2: the two top-level scratch tensors */
    float *sb, *ub; /* ck2: where block_out makes a lower block's output for a skip or a pool
                     * (sb) and for an upsample (ub); both in the last up block's output,
                     * after the pool output */
    size_t q;       /* ck2: floats of a lower-level scratch slot (a quarter of a top tensor) */
    float *ws;
    size_t ws_floats;
    float *slab;
    uint8_t *islab;
    void *pslab; /* device backends: parameters, gradients and optimizer state */
    int batch; /* samples in the last forward */
    double t_fwd, t_loss, t_bwd;
    /* Profile regions (core/prof.h) of the blocks under upstream's module names: down_list.i
     * (i <= L), up_list.j (j < L) and up_list.L, the 1x1 OutConv. prof_layers: the layer
     * passes and blocks are timed (host backends only: a device backend's op has only been
     * queued when it returns). */
    int prof_down[MAXL + 1], prof_up[MAXL + 1];
    int prof_layers;
};

static inline size_t maxz(size_t a, size_t b) {
    return a > b ? a : b;
}

/* ---- unet_plan.c ------------------------------------------------------------------------- */

/* The spec's checks (nn_unet_spec_check) and the options': 0, or an err.h code with the
 * message set. */
int unet_check(const nn_unet_spec *s, const nn_unet_opts *o, int d, int h, int w);
/* The parameter table in upstream's state_dict order: fills t (when given) and p's tensor
 * indices (when given), sets *nparams (when given) to the parameter count; returns the tensor
 * count. */
int unet_build_tensors(const nn_unet_spec *s, nn_tensor_info *t, size_t *nparams,
                       struct nn_unet_plan *p);
/* Extents, channels and block levels of the plan for a (d, h, w) volume. */
void unet_plan_dims(struct nn_unet_plan *p, const nn_unet_spec *s, const nn_unet_opts *o, int d,
                    int h, int w);
/* The largest workspace any layer needs when the model is sharded. */
size_t unet_ws_sharded(const struct nn_unet_plan *p, int N);
/* Lays out the activation slab for batch N: with p->slab and p->islab NULL only counts (floats,
 * index bytes, and the workspace's share of the floats), else also carves the pointers. The
 * one definition of the layout, so nn_unet_memory_estimate is exact. */
void unet_plan_slabs(struct nn_unet_plan *p, const nn_unet_spec *s, int N, size_t *floats,
                     size_t *ibytes, size_t *ws_floats);

#endif
