/* unet_plan: what a U-Net of a spec is before it runs: the spec's and options' checks, the
 * parameter table (upstream's state_dict names and order), the plan's extents and channels,
 * and the activation slab's layout, sized and carved by the same code (so the memory estimate
 * is exact). */
#include "nn/unet_int.h"

#include "core/err.h"
#include "core/prof.h"
#include "nn/optim.h"
#include "nn/settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes per sample the bf16 conv outputs must save for SCAFFOLD_NN_BF16_STORE=auto to keep them
 * (see unet_plan_dims). */
#define NN_BF16_STORE_AUTO_BYTES (256.0 * 1048576)
/* Bytes per sample up to which SCAFFOLD_NN_KEEP_A1=auto keeps the blocks' a1 (unet_plan_dims). */
#define NN_KEEP_A1_AUTO_BYTES (256.0 * 1048576)

int nn_unet_spec_check(const nn_unet_spec *s, int d, int h, int w) {
    if (s->layers < 1 || s->layers > MAXL)
        return err_set(ERR_CONFIG,
                       "U-Net layers = problem_scale - unet_bottleneck_dim = %d: it must be in "
                       "1..%d (make problem_scale larger than unet_bottleneck_dim)",
                       s->layers, MAXL);
    if (s->in_channels < 1 || s->in_channels > 4096)
        return err_set(ERR_CONFIG, "U-Net input channels %d out of range (1..4096)",
                       s->in_channels);
    if (s->n_classes < 2 || s->n_classes > 256)
        return err_set(ERR_CONFIG, "U-Net classes = n_categories + 1 = %d: it must be in 2..256",
                       s->n_classes);
    if (s->base_channels < 1 || s->base_channels > 65536)
        return err_set(ERR_CONFIG, "unet_base_channels = %d: it must be in 1..65536",
                       s->base_channels);
    if (s->groups < 1 || s->base_channels % s->groups)
        return err_set(ERR_CONFIG,
                       "group_norm_groups = %d must divide unet_base_channels = %d (every level "
                       "has a multiple of the base channels)",
                       s->groups, s->base_channels);
    const int q = 1 << s->layers;
    if (d < q || h < q || w < q || d % q || h % q || w % q)
        return err_set(ERR_CONFIG,
                       "volume %dx%dx%d: each extent must be a positive multiple of 2^layers = %d "
                       "(the U-Net halves it %d times)",
                       d, h, w, q, s->layers);
    return 0;
}

int unet_check(const nn_unet_spec *s, const nn_unet_opts *o, int d, int h, int w) {
    const int rc = nn_unet_spec_check(s, d, h, w);
    if (rc)
        return rc;
    if (o->precision != NN_FP32 && o->precision != NN_BF16)
        return err_set(ERR_CONFIG, "U-Net precision %d: it must be 0 (fp32) or 1 (bf16, "
                                   "torch_amp: 1)",
                       o->precision);
    if (o->checkpointing != 0 && o->checkpointing != 1)
        return err_set(ERR_CONFIG, "activation_checkpointing = %d: it must be 0 or 1",
                       o->checkpointing);
    if (o->sharded != 0 && o->sharded != 1)
        return err_set(ERR_CONFIG, "U-Net option sharded = %d: it must be 0 or 1", o->sharded);
    if (o->optimizer < NN_OPT_ADAM || o->optimizer > NN_OPT_RMSPROP)
        return err_set(ERR_CONFIG, "U-Net option optimizer = %d: unknown", o->optimizer);
    const nn_backend *be = o->backend;
    if (be && be->device && !be->host_access && o->sharded)
        return err_set(ERR_CONFIG, "the %s backend does not run spatially sharded models "
                                   "(dc_num_shards): use device: cpu",
                       be->name);
    if (be && be->device && !be->host_access && (nn_prec)o->precision != be->prec)
        return err_set(ERR_INTERNAL, "the %s backend computes in %s, the model asks for %s",
                       be->name, be->prec == NN_BF16 ? "bf16" : "fp32",
                       o->precision == NN_BF16 ? "bf16" : "fp32");
    return 0;
}

/* ---- parameter table ---------------------------------------------------------------------- */

static void add_tensor(nn_tensor_info *t, int *nt, size_t *off, const char *name, int ndim,
                       int64_t a, int64_t b, int64_t c, int64_t d, int64_t e) {
    nn_tensor_info *x = t ? &t[*nt] : NULL;
    int64_t sh[5] = {a, b, c, d, e};
    size_t numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= (size_t)sh[i];
    if (x) {
        snprintf(x->name, sizeof x->name, "%s", name);
        x->ndim = ndim;
        memcpy(x->shape, sh, sizeof sh);
        x->offset = *off;
        x->numel = numel;
    }
    (*nt)++;
    *off += numel;
}

/* DoubleConv tensors under prefix (conv, GroupNorm weight and bias, twice, as upstream's
 * nn.Sequential numbers them); records their indices in b when given. */
static void add_dc(nn_tensor_info *t, int *nt, size_t *off, const char *prefix, int cin, int cout,
                   dc_block *b) {
    static const char *const part[6] = {"0.weight", "1.weight", "1.bias",
                                        "3.weight", "4.weight", "4.bias"};
    const int first = *nt; /* the six tensors take consecutive indices */
    for (int i = 0; i < 6; i++) {
        char name[96];
        snprintf(name, sizeof name, "%s.double_conv.%s", prefix, part[i]);
        if (i % 3 == 0) /* the convolutions: cout x cin (then cout x cout) x 3 x 3 x 3 */
            add_tensor(t, nt, off, name, 5, cout, i ? cout : cin, 3, 3, 3);
        else
            add_tensor(t, nt, off, name, 1, cout, 0, 0, 0, 0);
    }
    if (b) {
        b->cin = cin;
        b->cout = cout;
        b->w1 = first;
        b->g1w = first + 1;
        b->g1b = first + 2;
        b->w2 = first + 3;
        b->g2w = first + 4;
        b->g2b = first + 5;
    }
}

/* Builds the tensor table (t may be NULL to count). Returns the tensor count. */
int unet_build_tensors(const nn_unet_spec *s, nn_tensor_info *t, size_t *nparams,
                       struct nn_unet_plan *p) {
    const int L = s->layers;
    int nt = 0;
    size_t off = 0;
    char prefix[96];
    long ch[MAXL + 2];
    for (int i = 0; i <= L; i++)
        ch[i] = (long)s->base_channels << i;
    add_dc(t, &nt, &off, "down_list.0", s->in_channels, (int)ch[0], p ? &p->down[0] : NULL);
    for (int i = 1; i <= L; i++) {
        snprintf(prefix, sizeof prefix, "down_list.%d.maxpool_conv.1", i);
        add_dc(t, &nt, &off, prefix, (int)ch[i - 1], (int)ch[i], p ? &p->down[i] : NULL);
    }
    for (int j = 0; j < L; j++) {
        const int l = L - 1 - j;
        char name[96];
        if (p)
            p->upw[j] = nt;
        snprintf(name, sizeof name, "up_list.%d.up.weight", j);
        add_tensor(t, &nt, &off, name, 5, ch[l + 1], ch[l], 2, 2, 2);
        if (p)
            p->upb[j] = nt;
        snprintf(name, sizeof name, "up_list.%d.up.bias", j);
        add_tensor(t, &nt, &off, name, 1, ch[l], 0, 0, 0, 0);
        snprintf(prefix, sizeof prefix, "up_list.%d.conv", j);
        add_dc(t, &nt, &off, prefix, (int)ch[l + 1], (int)ch[l], p ? &p->up[j] : NULL);
    }
    char name[96];
    if (p)
        p->outw = nt;
    snprintf(name, sizeof name, "up_list.%d.conv.weight", L);
    add_tensor(t, &nt, &off, name, 5, s->n_classes, ch[0], 1, 1, 1);
    if (p)
        p->outb = nt;
    snprintf(name, sizeof name, "up_list.%d.conv.bias", L);
    add_tensor(t, &nt, &off, name, 1, s->n_classes, 0, 0, 0, 0);
    if (nparams)
        *nparams = off;
    return nt;
}

size_t nn_unet_param_count(const nn_unet_spec *s) {
    size_t n = 0;
    unet_build_tensors(s, NULL, &n, NULL);
    return n;
}

int nn_unet_find_tensor(const nn_unet *m, const char *name) {
    for (int i = 0; i < m->ntensors; i++)
        if (!strcmp(m->tensors[i].name, name))
            return i;
    return -1;
}

/* Extents, channels and block levels of the plan for a (d, h, w) volume. */
void unet_plan_dims(struct nn_unet_plan *p, const nn_unet_spec *s, const nn_unet_opts *o, int d,
                    int h, int w) {
    const int L = s->layers;
    p->be = o->backend ? o->backend : nn_backend_cpu();
    p->L = L;
    p->K = s->n_classes;
    p->G = s->groups;
    p->prec = (nn_prec)o->precision;
    p->ckpt = o->checkpointing;
    p->ck2 = p->ckpt && p->be->groupnorm_backward_x;
    p->sharded = o->sharded;
    for (int i = 0; i <= L; i++) {
        p->dd[i] = d >> i;
        p->hh[i] = h >> i;
        p->ww[i] = w >> i;
        p->S[i] = (long)p->dd[i] * p->hh[i] * p->ww[i];
        p->ch[i] = s->base_channels << i;
        p->down[i].level = i;
    }
    for (int j = 0; j < L; j++)
        p->up[j].level = L - 1 - j;
    /* A bf16 run's conv outputs hold bf16 values (the convolutions round them), so keeping
     * them as bf16 loses nothing (the tests compare the two) but costs a pass each way over
     * them: 2% of a bf16 step at scale 5 / 64 and 6 / 64 on a Xeon with AMX, for 10 and 80 MiB
     * of 195 MiB and 1.3 GiB. So by default only where it saves at least
     * NN_BF16_STORE_AUTO_BYTES per sample (scale 7 / base 64: 640 MiB), or on a GPU, whose
     * memory is scarcer and whose passes are cheap. */
    const int store = nn_settings()->bf16_store;
    double saves = 0; /* bytes per sample: c1 and c2 of the down blocks above the bottleneck */
    for (int i = 0; i < L; i++)
        saves += 2.0 * p->S[i] * p->ch[i] * (sizeof(float) - sizeof(uint16_t));
    p->h16 = p->prec == NN_BF16 && !p->ckpt && L >= 1 && p->be->bf16_narrow &&
             p->be->bf16_widen &&
             (store == 1 || (store == NN_SET_STORE_AUTO &&
                             (p->be->device || saves >= NN_BF16_STORE_AUTO_BYTES)));
    /* a1 (GN1's output, conv2's input) made again in the backward pass costs a read of c1 and
     * a write per block. Where the tensors stay in cache that costs nothing (scale 5 / 64, 21
     * MiB: the remade a1 is read hot), beyond it 1.3% of a bf16 step (6 / 64, 155 MiB, Xeon
     * with AMX, 3 of 3 alternated). Kept by default where that memory is small; at 7 / 64 (1.2
     * GiB a sample) and with checkpointing made again. */
    double a1_bytes = 0;
    for (int i = 0; i <= L; i++)
        a1_bytes += (i < L ? 2.0 : 1.0) * p->S[i] * p->ch[i] * sizeof(float);
    const int keep = nn_settings()->keep_a1;
    p->keep_a1 = !p->ckpt && !p->be->device &&
                 (keep == 1 || (keep == NN_SET_STORE_AUTO && a1_bytes <= NN_KEEP_A1_AUTO_BYTES));
    p->prof_layers = !p->be->device || p->be->host_access;
    char nm[32];
    for (int i = 0; i <= L; i++) {
        snprintf(nm, sizeof nm, "down_list.%d", i);
        p->prof_down[i] = prof_id(nm, PROF_KIND_REGION);
        snprintf(nm, sizeof nm, "up_list.%d", i);
        p->prof_up[i] = prof_id(nm, PROF_KIND_REGION);
    }
}

/* Workspace floats of a Conv3d at level l, for a sharded or unsharded call. */
static size_t conv3d_ws(const struct nn_unet_plan *p, int N, int l, int cin, int cout, int sh) {
    return p->be->conv3d_ws(N, p->dd[l], p->hh[l], p->ww[l], cin, cout, sh);
}

/* The largest workspace any layer needs when the model is sharded. */
size_t unet_ws_sharded(const struct nn_unet_plan *p, int N) {
    size_t ws = 0;
    for (int b = 0; b < 2 * p->L + 1; b++) {
        const dc_block *blk = b <= p->L ? &p->down[b] : &p->up[b - p->L - 1];
        ws = maxz(ws, conv3d_ws(p, N, blk->level, blk->cin, blk->cout, 1));
        ws = maxz(ws, conv3d_ws(p, N, blk->level, blk->cout, blk->cout, 1));
    }
    return ws;
}
/* Carves the activation slab in order: floats at off (16-float aligned), index bytes at ioff
 * (64-byte aligned); with no slab (counting), the pointers are NULL and only the offsets move. */
typedef struct slab_carve {
    float *slab;
    uint8_t *islab;
    size_t off, ioff;
} slab_carve;

static float *take(slab_carve *c, size_t nfl) {
    float *ptr = c->slab ? c->slab + c->off : NULL;
    c->off += (nfl + 15) & ~(size_t)15;
    return ptr;
}

static uint8_t *itake(slab_carve *c, size_t n) {
    uint8_t *ptr = c->islab ? c->islab + c->ioff : NULL;
    c->ioff += (n + 63) & ~(size_t)63;
    return ptr;
}

/* Per DoubleConv: its conv outputs (none with checkpointing, bf16 in h16 mode), its output and
 * its GroupNorm statistics. */
static void carve_blocks(struct nn_unet_plan *p, slab_carve *c, int N) {
    const int L = p->L, G = p->G;
    for (int b = 0; b < 2 * L + 1; b++) {
        dc_block *blk = b <= L ? &p->down[b] : &p->up[b - L - 1];
        const size_t n = (size_t)N * p->S[blk->level] * blk->cout;
        blk->h1 = blk->h2 = NULL;
        if (p->ckpt) {
            blk->c1 = blk->c2 = NULL;
        } else if (p->h16 && b < L) {
            blk->h1 = (uint16_t *)take(c, (n + 1) / 2);
            blk->h2 = (uint16_t *)take(c, (n + 1) / 2);
        } else {
            blk->c1 = take(c, n);
            blk->c2 = take(c, n);
        }
        blk->a2 = take(c, n);
        blk->a1 = p->keep_a1 ? take(c, n) : NULL;
        blk->m1 = take(c, (size_t)N * G);
        blk->r1 = take(c, (size_t)N * G);
        blk->m2 = take(c, (size_t)N * G);
        blk->r2 = take(c, (size_t)N * G);
    }
    for (int i = 0; i < L && p->h16; i++) {
        p->down[i].c1 = p->up[L - 1 - i].c1;
        p->down[i].c2 = p->up[L - 1 - i].c2;
    }
}

/* Pool outputs and their argmax, upsample outputs, and the checkpointing scratch. */
static void carve_pools(struct nn_unet_plan *p, slab_carve *c, int N) {
    const int L = p->L;
    const size_t top = (size_t)N * p->S[0] * p->ch[0];
    const size_t pool1 = L >= 1 ? (size_t)N * p->S[1] * p->ch[0] : 0;
    if (p->ck2) {
        /* Two top-level tensors, tX and tY; the lower levels' scratch is carved from tX in
         * quarters (a level-l tensor, l >= 1, is at most a quarter of a top one) and their pool
         * output lives in the last up block's output, written only at the end of the forward
         * pass and dead once the top up block's backward is done (ckpt_roles). */
        p->tX = take(c, top);
        p->tY = take(c, top);
        p->q = (top / 4 + 15) & ~(size_t)15;
        p->pidxs = itake(c, pool1);
        for (int i = 1; i <= L; i++) {
            p->pool[i] = p->up[L - 1].a2;
            p->pidx[i] = p->pidxs;
        }
        /* sb: a level-1 tensor at most (N S_1 ch_1 = top / 4), ub: a level-1 one for the top
         * up block, a level-2 one below; with the pool output top / 8 + top / 4 + top / 4 */
        p->sb = p->ub = NULL;
        if (p->slab && L >= 1) {
            p->sb = p->pool[1] + ((pool1 + 15) & ~(size_t)15);
            p->ub = p->sb + (((size_t)N * p->S[1] * p->ch[1] + 15) & ~(size_t)15);
        }
    } else if (p->ckpt) {
        /* One block at a time: its conv output (the largest block's) and pool output (level
         * 1's, the largest); the upsample output lives in gH (see block_forward). */
        p->cs = take(c, top);
        p->pools = take(c, pool1);
        p->pidxs = itake(c, pool1);
        for (int i = 1; i <= L; i++) {
            p->pool[i] = p->pools;
            p->pidx[i] = p->pidxs;
        }
    } else {
        p->cs = p->pools = NULL;
        p->pidxs = NULL;
        for (int i = 1; i <= L; i++) {
            const size_t n = (size_t)N * p->S[i] * p->ch[i - 1];
            p->pool[i] = take(c, n);
            p->pidx[i] = itake(c, n);
        }
        for (int j = 0; j < L; j++) {
            const int l = L - 1 - j;
            p->upt[j] = take(c, (size_t)N * p->S[l] * p->ch[l]);
        }
    }
}

/* The skip gradients, the input, the logits and their gradient, and the gradient scratch. */
static void carve_grads(struct nn_unet_plan *p, const nn_unet_spec *s, slab_carve *c, int N) {
    const int L = p->L;
    const size_t top = (size_t)N * p->S[0] * p->ch[0];
    /* dr[l] (l < L) shares the buffer of the up block at level l's output: that output is dead
     * once the block's GroupNorm backward has read it, before its conv1 backward first writes
     * dr[l] (the next up block, which reads it as input, runs its backward earlier). */
    p->dr[L] = take(c, (size_t)N * p->S[L] * p->ch[L]);
    for (int l = 0; l < L; l++)
        p->dr[l] = p->up[L - 1 - l].a2;
    if (p->ck2) /* the top up block's output holds its own backward's tensors */
        p->dr[0] = p->tY;
    p->xin = take(c, (size_t)N * p->S[0] * s->in_channels);
    p->logits = take(c, (size_t)N * p->S[0] * p->K);
    p->dlogits = take(c, (size_t)N * p->S[0] * p->K);
    /* gG: the gradient of an up block's output. The last block's arrives in place over its
     * output when the backend folds the ReLU into the 1x1 conv's backward (conv1_backward_relu);
     * then gG only carries the convT gradients, level 1's at most. */
    const size_t lvl1 = L >= 1 ? (size_t)N * p->S[1] * p->ch[1] : 0;
    if (!p->ck2) {
        p->gG = take(c, p->be->conv1_backward_relu ? lvl1 : top);
        p->gT = take(c, top);
        p->gH = take(c, top);
    }
}

/* Workspace floats: the largest any layer needs. */
static size_t plan_ws(const struct nn_unet_plan *p, int N) {
    const int L = p->L;
    const nn_backend *be = p->be;
    size_t ws = be->loss_ws(N, p->S[0], p->K);
    for (int b = 0; b < 2 * L + 1; b++) {
        const dc_block *blk = b <= L ? &p->down[b] : &p->up[b - L - 1];
        const int l = blk->level;
        ws = maxz(ws, conv3d_ws(p, N, l, blk->cin, blk->cout, p->sharded));
        ws = maxz(ws, conv3d_ws(p, N, l, blk->cout, blk->cout, p->sharded));
        ws = maxz(ws, be->groupnorm_ws(N, p->S[l], blk->cout));
        if (be->groupnorm_x_ws) /* the backward's masks from x (unet.c dc_backward_bufs) */
            ws = maxz(ws, be->groupnorm_x_ws(blk->cout, 0));
    }
    for (int j = 0; j < L; j++) {
        const int l = L - 1 - j;
        ws = maxz(ws, be->convt3d_ws(N, p->dd[l + 1], p->hh[l + 1], p->ww[l + 1], p->ch[l + 1],
                                     p->ch[l], p->prec));
    }
    ws = maxz(ws, be->conv1_ws((long)N * p->S[0], p->ch[0], p->K, p->prec));
    if (p->ck2)
        ws = maxz(ws, be->groupnorm_x_ws(p->ch[0], p->K));
    return (ws + 15) & ~(size_t)15;
}

void unet_plan_slabs(struct nn_unet_plan *p, const nn_unet_spec *s, int N, size_t *floats,
                     size_t *ibytes, size_t *ws_floats) {
    slab_carve c = {.slab = p->slab, .islab = p->islab};
    carve_blocks(p, &c, N);
    carve_pools(p, &c, N);
    carve_grads(p, s, &c, N);
    const size_t ws = plan_ws(p, N);
    p->ws = take(&c, ws);
    *floats = c.off;
    *ibytes = c.ioff;
    *ws_floats = ws;
}

int nn_unet_memory_estimate(const nn_unet_spec *s, const nn_unet_opts *o, int batch, int d,
                            int h, int w, int optimizer, nn_unet_memory *out) {
    static const nn_unet_opts defaults = {0};
    memset(out, 0, sizeof *out);
    if (!o)
        o = &defaults;
    const int rc = unet_check(s, o, d, h, w);
    if (rc)
        return rc;
    if (batch < 1)
        return err_set(ERR_CONFIG, "batch size %d: it must be at least 1", batch);
    if (optimizer < NN_OPT_ADAM || optimizer > NN_OPT_RMSPROP)
        return err_set(ERR_CONFIG, "optimizer kind %d: unknown", optimizer);
    struct nn_unet_plan *p = calloc(1, sizeof *p);
    if (!p)
        return err_set(ERR_NOMEM, "U-Net plan: out of memory");
    size_t nparams = 0;
    unet_build_tensors(s, NULL, &nparams, p);
    unet_plan_dims(p, s, o, d, h, w);
    size_t floats, ibytes, wsf;
    unet_plan_slabs(p, s, batch, &floats, &ibytes, &wsf);
    free(p);
    out->params = nparams * sizeof(float);
    out->grads = nparams * sizeof(float);
    out->optimizer = nn_optim_state_floats((nn_optim_kind)optimizer, nparams) * sizeof(float);
    out->workspace = wsf * sizeof(float);
    out->activations = (floats - wsf) * sizeof(float) + ibytes;
    out->total = out->params + out->grads + out->optimizer + out->workspace + out->activations;
    return 0;
}
