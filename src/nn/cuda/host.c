/* host: the CUDA backend's host-side decisions, free of any CUDA call so that they are tested on
 * machines without a GPU: device selection (reference §10.1), the algorithm cache, the bucketed
 * all-reduce plan, the slab layout, shape limits and workspace sizes (see cu.h). */
#include "nn/cuda/cu.h"

#include "core/err.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cu_want_parse(const char *s, cu_want *w) {
    if (!strcmp(s, "cpu"))
        *w = CU_WANT_CPU;
    else if (!strcmp(s, "cuda"))
        *w = CU_WANT_CUDA;
    else if (!strcmp(s, "auto"))
        *w = CU_WANT_AUTO;
    else
        return err_set(ERR_CONFIG, "key 'device': must be 'cpu', 'cuda' or 'auto', got '%s'", s);
    return 0;
}

const char *const cu_local_rank_vars[] = {
    "LOCAL_RANK",     "MV2_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_LOCAL_RANK", "PALS_LOCAL_RANKID",         "SLURM_LOCALID",
    "FLUX_TASK_LOCAL_ID", NULL};

int cu_local_rank_from_env(cu_getenv_fn get, int *local_rank, const char **var) {
    for (int i = 0; cu_local_rank_vars[i]; i++) {
        const char *v = get(cu_local_rank_vars[i]);
        if (!v)
            continue;
        char *end;
        errno = 0;
        long r = strtol(v, &end, 10);
        if (errno || end == v || *end != '\0' || r < 0 || r > INT_MAX)
            return err_set(ERR_CONFIG,
                           "environment variable %s='%s' is not a local rank (a non-negative "
                           "integer): fix or unset it",
                           cu_local_rank_vars[i], v);
        *local_rank = (int)r;
        *var = cu_local_rank_vars[i];
        return 0;
    }
    return 1;
}

int cu_pick_gpu(int ndev, int local_rank, int *gpu) {
    *gpu = -1;
    if (ndev <= 0)
        return 0;
    if (ndev == 1) {
        *gpu = 0;
        return 0;
    }
    if (local_rank < 0 || local_rank >= ndev)
        return err_set(ERR_CONFIG,
                       "local rank %d has no GPU of its own: %d GPUs are visible; run at most %d "
                       "ranks per node, or give each rank one GPU (CUDA_VISIBLE_DEVICES)",
                       local_rank, ndev, ndev);
    *gpu = local_rank;
    return 0;
}

int cu_device_decide(cu_want want, int ndev, const char *probe_msg, int local_rank,
                     const char *cpu_only, int *gpu, char *note, size_t note_len) {
    *gpu = -1;
    note[0] = '\0';
    if (want == CU_WANT_CPU)
        return 0;
    const char *name = want == CU_WANT_CUDA ? "cuda" : "auto";
    if (ndev <= 0) {
        char why[256];
        if (ndev < 0)
            snprintf(why, sizeof why, "%s", probe_msg && probe_msg[0] ? probe_msg : "probe failed");
        else
            snprintf(why, sizeof why, "no CUDA device");
        if (want == CU_WANT_CUDA)
            return err_set(ERR_CONFIG,
                           "key 'device': cuda, but no GPU is visible (%s): use device: auto or "
                           "cpu, or check the driver and CUDA_VISIBLE_DEVICES",
                           why);
        snprintf(note, note_len, "device auto: no GPU visible (%s); using the CPU", why);
        return 0;
    }
    int g;
    int rc = cu_pick_gpu(ndev, local_rank, &g);
    if (rc)
        return err_prefix("key 'device': %s", name);
    if (cpu_only) {
        if (want == CU_WANT_CUDA)
            return err_set(ERR_CONFIG, "key 'device': cuda: %s; use device: auto or cpu",
                           cpu_only);
        snprintf(note, note_len, "device auto: GPU %d visible, but %s; using the CPU", g,
                 cpu_only);
        return 0;
    }
    *gpu = g;
    snprintf(note, note_len, "device %s: GPU %d (of %d visible)", name, g, ndev);
    return 0;
}

int cu_conv_key_eq(const cu_conv_key *a, const cu_conv_key *b) {
    return a->k == b->k && a->bf16 == b->bf16 && a->N == b->N && a->C == b->C && a->D == b->D &&
           a->H == b->H && a->W == b->W && a->K == b->K;
}

int cu_algo_slot(cu_algo_cache *c, const cu_conv_key *k) {
    for (int i = 0; i < c->n; i++)
        if (cu_conv_key_eq(&c->e[i].key, k))
            return i;
    if (c->n >= CU_ALGO_CACHE_MAX) {
        char s[160];
        cu_conv_key_str(k, s, sizeof s);
        return err_set(ERR_RANGE,
                       "cuDNN algorithm cache full (%d convolution shapes) at %s: a U-Net has "
                       "far fewer; raise CU_ALGO_CACHE_MAX",
                       CU_ALGO_CACHE_MAX, s);
    }
    cu_algo_entry *e = &c->e[c->n];
    memset(e, 0, sizeof *e);
    e->key = *k;
    return c->n++;
}

void cu_conv_key_str(const cu_conv_key *k, char *buf, size_t n) {
    snprintf(buf, n, "%s %s N%d C%d D%d H%d W%d K%d", k->k == 3 ? "conv3d k3" : "conv k2s2",
             k->bf16 ? "bf16" : "fp32", k->N, k->C, k->D, k->H, k->W, k->K);
}

int cu_wcache_find(cu_wcache *c, const float *w, int ca, int cin, int cout, int k, int *fresh) {
    *fresh = 0;
    int i = 0;
    while (i < c->n && c->e[i].w != w)
        i++;
    if (i == c->n) {
        if (c->n >= CU_WCACHE_MAX)
            return err_set(ERR_RANGE,
                           "packed-weight cache full (%d convolution weights): a U-Net has far "
                           "fewer; raise CU_WCACHE_MAX",
                           CU_WCACHE_MAX);
        memset(&c->e[i], 0, sizeof c->e[i]);
        c->e[i].w = w;
        c->n++;
        *fresh = 1;
    }
    cu_wcache_entry *e = &c->e[i];
    if (e->ca != ca || e->cin != cin || e->cout != cout || e->k != k) {
        e->ca = ca;
        e->cin = cin;
        e->cout = cout;
        e->k = k;
        *fresh = 1;
    }
    if (*fresh)
        e->version = c->version - 1;
    return i;
}

int cu_bucket_plan(const size_t *offset, const size_t *numel, int ntensors, size_t cap,
                   cu_bucket *out) {
    if (cap == 0)
        return err_set(ERR_RANGE, "all-reduce bucket size must be positive");
    size_t expect = 0;
    for (int i = 0; i < ntensors; i++) {
        if (offset[i] != expect)
            return err_set(ERR_RANGE,
                           "gradient tensor %d starts at float %zu, expected %zu: buckets need "
                           "contiguous tensors",
                           i, offset[i], expect);
        expect += numel[i];
    }
    /* src/parallel/grad.c's rule: from the last tensor backwards, a bucket closes at the tensor that
     * brings it to cap floats or more (the lowest bucket may be smaller). */
    int nb = 0, last = ntensors - 1;
    size_t hi = expect, acc = 0;
    for (int t = ntensors - 1; t >= 0; t--) {
        acc += numel[t];
        if (acc < cap && t > 0)
            continue;
        out[nb].offset = offset[t];
        out[nb].count = hi - offset[t];
        out[nb].first = t;
        out[nb].last = last;
        nb++;
        hi = offset[t];
        acc = 0;
        last = t - 1;
    }
    return nb;
}

int cu_buckets_startable(const cu_bucket *b, int nb, int started, int first) {
    while (started < nb && b[started].first >= first)
        started++;
    return started;
}

static size_t align256(size_t b) {
    return (b + 255) & ~(size_t)255;
}

void cu_slab_plan(size_t nparams, size_t state_floats, cu_slab_layout *l) {
    const size_t pb = align256(nparams * sizeof(float));
    l->params = 0;
    l->grads = pb;
    l->state = 2 * pb;
    l->bytes = 2 * pb + align256(state_floats * sizeof(float));
}

int cu_check_conv_shape(int N, int D, int H, int W, int cin, int cout, int transposed) {
    if (N < 1 || D < 1 || H < 1 || W < 1 || cin < 1 || cout < 1)
        return err_set(ERR_CONFIG, "convolution shape N%d D%d H%d W%d cin %d cout %d: every "
                                   "extent must be positive", N, D, H, W, cin, cout);
    /* Largest tensor of one sample: the input, the output (twice the extent when transposed) */
    const double vox = (double)D * H * W;
    const double out_vox = transposed ? 8 * vox : vox;
    const double big = vox * cin > out_vox * cout ? vox * cin : out_vox * cout;
    if (big >= 2147483648.0)
        return err_set(ERR_CONFIG,
                       "%s of %dx%dx%d voxels with %d -> %d channels: a sample's tensor has %.0f "
                       "elements, more than cuDNN's 32-bit limit (2^31); use spatial shards "
                       "(dc_num_shards) or fewer channels (unet_base_channels)",
                       transposed ? "ConvTranspose3d" : "Conv3d", D, H, W, cin, cout, big);
    return 0;
}

int cu_slices(long S) {
    long s = S / 512;
    return s < 1 ? 1 : s > 1024 ? 1024 : (int)s;
}

int cu_skip_mode_parse(const char *s, int *split) {
    *split = 1;
    if (!s || !s[0] || !strcmp(s, "split"))
        return 0;
    if (!strcmp(s, "gather")) {
        *split = 0;
        return 0;
    }
    return err_set(ERR_CONFIG, "SCAFFOLD_CUDA_SKIP='%s': must be 'split' or 'gather' (how the "
                               "skip connection reaches cuDNN in fp32); unset it for the default",
                   s);
}

int cu_conv3d_parts(int split, int bf16, int ca, int cb, int cout, cu_conv_part part[2]) {
    if (split && !bf16 && cb > 0) {
        part[0] = (cu_conv_part){0, ca, 0};
        part[1] = (cu_conv_part){ca, cb, (size_t)27 * ca * cout};
        return 2;
    }
    part[0] = (cu_conv_part){0, ca + cb, 0};
    return 1;
}

/* Appends a region of `elems` elements of `esize` bytes (0 elements: an empty region). */
static void plan_add(cu_ws_plan *p, double elems, size_t esize) {
    p->off[p->n] = p->total;
    p->size[p->n] = align256((size_t)elems * esize);
    p->total += p->size[p->n];
    p->n++;
}

static void plan_start(cu_ws_plan *p) {
    memset(p, 0, sizeof *p);
}

/* Per-channel sums of N samples of S voxels: partials and sums (kern.h cuk_chan_sums). */
static void plan_chan_sums(cu_ws_plan *p, int N, long S, int C) {
    plan_add(p, (double)N * cu_slices(S) * 3 * C, sizeof(double));
    plan_add(p, (double)N * 3 * C, sizeof(double));
}

void cu_conv3d_ws_plan(cu_ws_plan *p, int N, int D, int H, int W, int cin, int cout, int bf16) {
    const double P = (double)N * D * H * W;
    const size_t e = bf16 ? 2 : 4;
    plan_start(p);
    plan_add(p, P * cin, e);
    plan_add(p, 27.0 * cin * cout, e);
    plan_add(p, bf16 ? P * cout : 0, 2);
    plan_add(p, bf16 ? P * cin : 0, 2);
}

void cu_convt3d_ws_plan(cu_ws_plan *p, int N, int D, int H, int W, int cin, int cout, int bf16) {
    const double P = (double)N * D * H * W, Po = 8 * P;
    const size_t e = bf16 ? 2 : 4;
    plan_start(p);
    plan_add(p, Po * cout, e);
    plan_add(p, bf16 ? P * cin : 0, 2);
    plan_add(p, 8.0 * cin * cout, e);
    plan_add(p, bf16 ? (P * cin > Po * cout ? P * cin : Po * cout) : 0, 2);
    plan_chan_sums(p, 1, (long)(Po > 0 ? Po : 0), cout);
}

void cu_conv1_ws_plan(cu_ws_plan *p, long P, int cin, int cout, int bf16) {
    const double cmax = cin > cout ? cin : cout;
    plan_start(p);
    plan_add(p, bf16 ? (double)P * cin : 0, 2);
    plan_add(p, bf16 ? (double)P * cout : 0, 2);
    plan_add(p, bf16 ? (double)cin * cout : 0, 2);
    plan_add(p, bf16 ? (double)P * cmax : 0, 4);
    plan_add(p, bf16 ? (double)cin * cout : 0, 4);
    plan_chan_sums(p, 1, P, cout);
}

void cu_groupnorm_ws_plan(cu_ws_plan *p, int N, long S, int C) {
    plan_start(p);
    plan_chan_sums(p, N, S, C);
    plan_add(p, 2.0 * N * C, sizeof(float)); /* 2 per (n, g), G <= C */
}

void cu_loss_ws_plan(cu_ws_plan *p, int N, long S, int K) {
    plan_start(p);
    plan_add(p, (double)N * S * K, sizeof(float));
    plan_add(p, 2.0 * CU_RED_BLOCKS, sizeof(double));
    plan_add(p, CU_RED_BLOCKS, sizeof(int));
    plan_chan_sums(p, N, S, K);
    plan_add(p, 2.0 * N * K, sizeof(double));
    plan_add(p, 8, sizeof(double));
}

void cu_dice_ws_plan(cu_ws_plan *p, int N, int K) {
    plan_start(p);
    plan_add(p, 3.0 * N * K, sizeof(unsigned long long));
    plan_add(p, 1, sizeof(int));
}

void cu_norm_ws_plan(cu_ws_plan *p) {
    plan_start(p);
    plan_add(p, CU_RED_BLOCKS, sizeof(double));
    plan_add(p, 2, sizeof(double));
}

size_t cu_packed_bytes(int cin, int cout, int k, int bf16) {
    return (size_t)k * k * k * cin * cout * (bf16 ? 2 : 4);
}
