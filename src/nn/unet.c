/* unet: builds the U-Net of reference §9.3 from a spec, owns its slabs, and runs forward,
 * loss and backward by calling the layers in sequence (no autograd graph, as llm.c).
 *
 * Memory: parameters and gradients are one slab each; every activation the backward pass needs
 * (per DoubleConv: conv outputs, GroupNorm+ReLU outputs, GN statistics; pools and their argmax;
 * upsample outputs; logits), the gradient buffers (one per level for the skip connections, and
 * three scratch buffers sized for the top level) and the shared layer workspace are carved out
 * of one activation slab sized at creation for the maximum batch. Kernels never allocate. */
#include "nn/unet.h"

#include "core/err.h"
#include "core/log.h"
#include "core/rng.h"
#include "nn/layers.h"
#include "nn/loss.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXL 16

typedef struct dc_block {
    int cin, cout, level;
    int w1, g1w, g1b, w2, g2w, g2b; /* tensor indices */
    float *c1, *c2, *a2; /* (N, S, cout): conv outputs, block output (GN+ReLU of c2) */
    float *m1, *r1, *m2, *r2;       /* (N, G) */
} dc_block;

struct nn_unet_plan {
    int L, K, G;
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
    float *ws;
    float *slab;
    uint8_t *islab;
    int batch; /* samples in the last forward */
    double t_fwd, t_loss, t_bwd;
};

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

/* DoubleConv tensors under prefix; records indices in b when given. */
static void add_dc(nn_tensor_info *t, int *nt, size_t *off, const char *prefix, int cin, int cout,
                   dc_block *b) {
    char name[96];
    int idx[6];
    idx[0] = *nt;
    snprintf(name, sizeof name, "%s.double_conv.0.weight", prefix);
    add_tensor(t, nt, off, name, 5, cout, cin, 3, 3, 3);
    idx[1] = *nt;
    snprintf(name, sizeof name, "%s.double_conv.1.weight", prefix);
    add_tensor(t, nt, off, name, 1, cout, 0, 0, 0, 0);
    idx[2] = *nt;
    snprintf(name, sizeof name, "%s.double_conv.1.bias", prefix);
    add_tensor(t, nt, off, name, 1, cout, 0, 0, 0, 0);
    idx[3] = *nt;
    snprintf(name, sizeof name, "%s.double_conv.3.weight", prefix);
    add_tensor(t, nt, off, name, 5, cout, cout, 3, 3, 3);
    idx[4] = *nt;
    snprintf(name, sizeof name, "%s.double_conv.4.weight", prefix);
    add_tensor(t, nt, off, name, 1, cout, 0, 0, 0, 0);
    idx[5] = *nt;
    snprintf(name, sizeof name, "%s.double_conv.4.bias", prefix);
    add_tensor(t, nt, off, name, 1, cout, 0, 0, 0, 0);
    if (b) {
        b->cin = cin;
        b->cout = cout;
        b->w1 = idx[0];
        b->g1w = idx[1];
        b->g1b = idx[2];
        b->w2 = idx[3];
        b->g2w = idx[4];
        b->g2b = idx[5];
    }
}

/* Builds the tensor table (t may be NULL to count). Returns the tensor count. */
static int build_tensors(const nn_unet_spec *s, nn_tensor_info *t, size_t *nparams,
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
    build_tensors(s, NULL, &n, NULL);
    return n;
}

int nn_unet_find_tensor(const nn_unet *m, const char *name) {
    for (int i = 0; i < m->ntensors; i++)
        if (!strcmp(m->tensors[i].name, name))
            return i;
    return -1;
}

/* ---- creation ----------------------------------------------------------------------------- */

static size_t maxz(size_t a, size_t b) {
    return a > b ? a : b;
}

static void *alloc64(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64))
        return NULL;
    return p;
}

void nn_unet_free(nn_unet *m) {
    if (!m)
        return;
    free(m->tensors);
    free(m->params);
    free(m->grads);
    if (m->plan) {
        free(m->plan->slab);
        free(m->plan->islab);
        free(m->plan);
    }
    memset(m, 0, sizeof *m);
}

int nn_unet_create(nn_unet *m, const nn_unet_spec *s, int max_batch, int d, int h, int w) {
    memset(m, 0, sizeof *m);
    int rc = nn_unet_spec_check(s, d, h, w);
    if (rc)
        return rc;
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
    const int L = s->layers, N = max_batch;
    p->L = L;
    p->K = s->n_classes;
    p->G = s->groups;
    m->ntensors = build_tensors(s, NULL, &m->nparams, NULL);
    m->tensors = calloc((size_t)m->ntensors, sizeof *m->tensors);
    m->params = alloc64(m->nparams * sizeof(float));
    m->grads = alloc64(m->nparams * sizeof(float));
    if (!m->tensors || !m->params || !m->grads) {
        nn_unet_free(m);
        return err_set(ERR_NOMEM, "U-Net parameters: cannot allocate 2 x %zu floats", m->nparams);
    }
    build_tensors(s, m->tensors, NULL, p);
    memset(m->params, 0, m->nparams * sizeof(float));
    memset(m->grads, 0, m->nparams * sizeof(float));
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

    /* Plan the activation slab: first count, then carve. */
    size_t off = 0, ioff = 0;
    const int G = s->groups;
#define TAKE(ptr, nfl)                                                                             \
    do {                                                                                           \
        if (p->slab)                                                                               \
            (ptr) = p->slab + off;                                                                 \
        off += ((size_t)(nfl) + 15) & ~(size_t)15;                                                 \
    } while (0)
    for (int pass = 0; pass < 2; pass++) {
        off = 0;
        ioff = 0;
        for (int b = 0; b < 2 * L + 1; b++) {
            dc_block *blk = b <= L ? &p->down[b] : &p->up[b - L - 1];
            const size_t n = (size_t)N * p->S[blk->level] * blk->cout;
            TAKE(blk->c1, n);
            TAKE(blk->c2, n);
            TAKE(blk->a2, n);
            TAKE(blk->m1, (size_t)N * G);
            TAKE(blk->r1, (size_t)N * G);
            TAKE(blk->m2, (size_t)N * G);
            TAKE(blk->r2, (size_t)N * G);
        }
        for (int i = 1; i <= L; i++) {
            const size_t n = (size_t)N * p->S[i] * p->ch[i - 1];
            TAKE(p->pool[i], n);
            if (p->islab)
                p->pidx[i] = p->islab + ioff;
            ioff += (n + 63) & ~(size_t)63;
        }
        for (int j = 0; j < L; j++) {
            const int l = L - 1 - j;
            TAKE(p->upt[j], (size_t)N * p->S[l] * p->ch[l]);
        }
        for (int i = 0; i <= L; i++)
            TAKE(p->dr[i], (size_t)N * p->S[i] * p->ch[i]);
        const size_t top = (size_t)N * p->S[0] * p->ch[0];
        TAKE(p->xin, (size_t)N * p->S[0] * s->in_channels);
        TAKE(p->logits, (size_t)N * p->S[0] * p->K);
        TAKE(p->dlogits, (size_t)N * p->S[0] * p->K);
        TAKE(p->gG, top);
        TAKE(p->gT, top);
        TAKE(p->gH, 2 * top);
        /* Workspace: the largest any layer needs. */
        size_t ws = nn_loss_ws_floats(N, p->K);
        for (int b = 0; b < 2 * L + 1; b++) {
            const dc_block *blk = b <= L ? &p->down[b] : &p->up[b - L - 1];
            const int l = blk->level;
            ws = maxz(ws, nn_conv3d_ws_floats(N, p->dd[l], p->hh[l], p->ww[l], blk->cin,
                                              blk->cout));
            ws = maxz(ws, nn_conv3d_ws_floats(N, p->dd[l], p->hh[l], p->ww[l], blk->cout,
                                              blk->cout));
            ws = maxz(ws, nn_groupnorm_ws_floats(blk->cout));
        }
        for (int j = 0; j < L; j++) {
            const int l = L - 1 - j;
            ws = maxz(ws, nn_convt3d_ws_floats(N, p->dd[l + 1], p->hh[l + 1], p->ww[l + 1],
                                               p->ch[l + 1], p->ch[l]));
        }
        ws = maxz(ws, nn_conv1_ws_floats((long)N * p->S[0], p->ch[0], p->K));
        TAKE(p->ws, ws);
        if (pass == 0) {
            m->activation_floats = off;
            p->slab = alloc64(off * sizeof(float));
            p->islab = alloc64(ioff);
            if (!p->slab || !p->islab) {
                size_t bytes = off * sizeof(float) + ioff;
                nn_unet_free(m);
                return err_set(ERR_NOMEM,
                               "U-Net activations: cannot allocate %.2f GiB for batch %d at "
                               "%dx%dx%d; lower local_batch_size, problem_scale or "
                               "unet_base_channels",
                               (double)bytes / (1u << 30), max_batch, d, h, w);
            }
        }
    }
#undef TAKE
    return 0;
}

void nn_unet_init_params(nn_unet *m, uint64_t seed) {
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
}

void nn_unet_zero_grad(nn_unet *m) {
    memset(m->grads, 0, m->nparams * sizeof(float));
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

#define P_(m, idx) ((m)->params + (m)->tensors[idx].offset)
#define G_(m, idx) ((m)->grads + (m)->tensors[idx].offset)

/* The first GN+ReLU output (a1) is not kept: forward writes it to the scratch gT (free until
 * the backward pass), and backward recomputes it from c1 and the saved statistics into gH
 * (free until the block's input gradient is written there). One extra elementwise pass per
 * block saves one activation tensor per DoubleConv. */
static void dc_forward(nn_unet *m, dc_block *b, const float *inA, int ca, const float *inB, int cb,
                       int N) {
    struct nn_unet_plan *p = m->plan;
    const int l = b->level;
    const int D = p->dd[l], H = p->hh[l], W = p->ww[l];
    const nn_shard *sh = m->shard;
    float *a1 = p->gT;
    nn_conv3d_forward_sh(b->c1, inA, ca, inB, cb, P_(m, b->w1), b->cout, N, D, H, W, p->ws, sh);
    nn_groupnorm_forward_sh(a1, b->m1, b->r1, b->c1, P_(m, b->g1w), P_(m, b->g1b), N, p->S[l],
                            b->cout, p->G, 1, p->ws, sh);
    nn_conv3d_forward_sh(b->c2, a1, b->cout, NULL, 0, P_(m, b->w2), b->cout, N, D, H, W, p->ws,
                         sh);
    nn_groupnorm_forward_sh(b->a2, b->m2, b->r2, b->c2, P_(m, b->g2w), P_(m, b->g2b), N, p->S[l],
                            b->cout, p->G, 1, p->ws, sh);
}

/* Tensors first..ntensors-1 have their final gradient. */
static void grad_ready(nn_unet *m, int first) {
    if (m->grad_ready)
        m->grad_ready(m->grad_ctx, first);
}

/* dY (gradient of b->a2) is destroyed; din (N,S,ca+cb) receives the input gradient (if not
 * NULL; din may be gH, which is also where a1 is recomputed); tmp is scratch of (N,S,cout). */
static void dc_backward(nn_unet *m, dc_block *b, float *dY, const float *inA, int ca,
                        const float *inB, int cb, float *din, float *tmp, int N) {
    struct nn_unet_plan *p = m->plan;
    const int l = b->level;
    const int D = p->dd[l], H = p->hh[l], W = p->ww[l];
    const nn_shard *sh = m->shard;
    float *a1 = p->gH;
    nn_groupnorm_apply(a1, b->c1, b->m1, b->r1, P_(m, b->g1w), P_(m, b->g1b), N, p->S[l],
                       b->cout, p->G, 1, p->ws);
    nn_groupnorm_backward_sh(dY, G_(m, b->g2w), G_(m, b->g2b), dY, b->c2, b->a2, b->m2, b->r2,
                             P_(m, b->g2w), N, p->S[l], b->cout, p->G, 1, p->ws, sh);
    grad_ready(m, b->g2w);
    nn_conv3d_backward_sh(tmp, G_(m, b->w2), dY, a1, b->cout, NULL, 0, P_(m, b->w2), b->cout, N,
                          D, H, W, p->ws, sh);
    grad_ready(m, b->w2);
    nn_groupnorm_backward_sh(tmp, G_(m, b->g1w), G_(m, b->g1b), tmp, b->c1, a1, b->m1, b->r1,
                             P_(m, b->g1w), N, p->S[l], b->cout, p->G, 1, p->ws, sh);
    grad_ready(m, b->g1w);
    nn_conv3d_backward_sh(din, G_(m, b->w1), tmp, inA, ca, inB, cb, P_(m, b->w1), b->cout, N, D,
                          H, W, p->ws, sh);
    grad_ready(m, b->w1);
}

static void forward(nn_unet *m, const float *x, int N) {
    struct nn_unet_plan *p = m->plan;
    const int L = p->L;
    nn_to_channels_last(p->xin, x, N, m->spec.in_channels, p->S[0]);
    for (int i = 0; i <= L; i++) {
        if (i == 0) {
            dc_forward(m, &p->down[0], p->xin, m->spec.in_channels, NULL, 0, N);
        } else {
            nn_maxpool3d_forward(p->pool[i], p->pidx[i], p->down[i - 1].a2, N, p->dd[i - 1],
                                 p->hh[i - 1], p->ww[i - 1], p->ch[i - 1]);
            dc_forward(m, &p->down[i], p->pool[i], p->ch[i - 1], NULL, 0, N);
        }
    }
    for (int j = 0; j < L; j++) {
        const int l = L - 1 - j;
        const float *u = j == 0 ? p->down[L].a2 : p->up[j - 1].a2;
        nn_convt3d_forward(p->upt[j], u, P_(m, p->upw[j]), P_(m, p->upb[j]), p->ch[l + 1],
                           p->ch[l], N, p->dd[l + 1], p->hh[l + 1], p->ww[l + 1], p->ws);
        dc_forward(m, &p->up[j], p->down[l].a2, p->ch[l], p->upt[j], p->ch[l], N);
    }
    nn_conv1_forward(p->logits, p->up[L - 1].a2, P_(m, p->outw), P_(m, p->outb), p->ch[0], p->K,
                     (long)N * p->S[0], p->ws);
    p->batch = N;
}

static void backward(nn_unet *m, int N) {
    struct nn_unet_plan *p = m->plan;
    const int L = p->L;
    const long S0 = p->S[0];
    nn_conv1_backward(p->gG, G_(m, p->outw), G_(m, p->outb), p->dlogits, p->up[L - 1].a2,
                      P_(m, p->outw), p->ch[0], p->K, (long)N * S0, p->ws);
    grad_ready(m, p->outw);
    for (int j = L - 1; j >= 0; j--) {
        const int l = L - 1 - j;
        const int c = p->ch[l];
        dc_backward(m, &p->up[j], p->gG, p->down[l].a2, c, p->upt[j], c, p->gH, p->gT, N);
        /* Skip half of the concatenation gradient: the first contribution to dr[l]. */
        nn_concat_backward(p->dr[l], NULL, p->gH, c, c, (long)N * p->S[l]);
        const float *u = j == 0 ? p->down[L].a2 : p->up[j - 1].a2;
        float *du = j == 0 ? p->dr[L] : p->gG;
        nn_convt3d_backward(du, G_(m, p->upw[j]), G_(m, p->upb[j]), p->gH + c, 2L * c, u,
                            P_(m, p->upw[j]), p->ch[l + 1], c, N, p->dd[l + 1], p->hh[l + 1],
                            p->ww[l + 1], p->ws);
        grad_ready(m, p->upw[j]);
    }
    for (int i = L; i >= 0; i--) {
        if (i == 0) {
            dc_backward(m, &p->down[0], p->dr[0], p->xin, m->spec.in_channels, NULL, 0, NULL,
                        p->gT, N);
        } else {
            dc_backward(m, &p->down[i], p->dr[i], p->pool[i], p->ch[i - 1], NULL, 0, p->gH, p->gT,
                        N);
            nn_maxpool3d_backward(p->dr[i - 1], p->gH, p->pidx[i], N, p->dd[i - 1], p->hh[i - 1],
                                  p->ww[i - 1], p->ch[i - 1]);
        }
    }
}

static int check_batch(const nn_unet *m, int n) {
    if (n < 1 || n > m->max_batch)
        return err_set(ERR_RANGE, "batch of %d samples: the model was built for 1..%d", n,
                       m->max_batch);
    return 0;
}

int nn_unet_forward_backward(nn_unet *m, const float *x, const uint16_t *y, int n,
                             const float *ce_weight, double *loss, double *dice) {
    int rc = check_batch(m, n);
    if (rc)
        return rc;
    struct nn_unet_plan *p = m->plan;
    double t0 = time_now();
    forward(m, x, n);
    double t1 = time_now();
    rc = nn_loss_sh(p->dlogits, p->logits, y, ce_weight, n, p->S[0], p->K, loss, NULL, dice, p->ws,
                    m->shard);
    if (rc)
        return rc;
    if (!isfinite(*loss))
        return err_set(ERR_NUMERIC, "training loss is %g: the model diverged (lower the learning "
                                    "rate)",
                       *loss);
    double t2 = time_now();
    backward(m, n);
    double t3 = time_now();
    p->t_fwd = t1 - t0;
    p->t_loss = t2 - t1;
    p->t_bwd = t3 - t2;
    return 0;
}

int nn_unet_evaluate(nn_unet *m, const float *x, const uint16_t *y, int n,
                     const float *ce_weight, double *loss, float *dice) {
    int rc = check_batch(m, n);
    if (rc)
        return rc;
    struct nn_unet_plan *p = m->plan;
    forward(m, x, n);
    rc = nn_loss_sh(NULL, p->logits, y, ce_weight, n, p->S[0], p->K, loss, NULL, NULL, p->ws,
                    m->shard);
    if (rc)
        return rc;
    return nn_hard_dice_sh(dice, p->logits, y, n, p->S[0], p->K, m->shard);
}

int nn_unet_predict(nn_unet *m, const float *x, int n, float *logits, uint16_t *mask) {
    int rc = check_batch(m, n);
    if (rc)
        return rc;
    struct nn_unet_plan *p = m->plan;
    forward(m, x, n);
    if (logits)
        nn_to_channels_first(logits, p->logits, n, p->K, p->S[0]);
    if (mask)
        nn_argmax(mask, p->logits, (long)n * p->S[0], p->K);
    return 0;
}
