/* test_spatial: the U-Net split over ranks (src/parallel/grid.h) against the unsharded model.
 *
 *   mpirun -n R test_spatial SD SH SW
 *       dc_num_shards [SD, SH, SW] over dims [2, 3, 4]; R / (SD*SH*SW) replicas. With global
 *       GroupNorm statistics, the logits of every block, the loss and Dice, the hard Dice of
 *       evaluation and every parameter gradient after the bucketed all-reduce (sum over shards,
 *       mean over replicas) equal those of the unsharded model run by every rank on the whole
 *       volumes of all replicas, within 1e-5 relative (per tensor: |got - want| <= 1e-5 *
 *       (max |want| + |want|)).
 *   mpirun -n 2 test_spatial 2 1 1 --fixture FILE
 *       group_norm_stats: shard against tools/torch_dist_ref.py's emulation of upstream DistConv
 *       (per-shard GroupNorm) in float64; and the fixture differs from the whole-volume
 *       statistics, so this test tells the two semantics apart. */
#include "core/err.h"
#include "parallel/grad.h"
#include "parallel/grid.h"
#include "nn/fixture.h"
#include "nn/unet.h"
#include "mpi_test.h"

#include <string.h>

static dist_world W;

/* Block (d0.., ext) of a channels-first volume batch (N, C, D, H, W) -> out (N, C, ext). */
static void cut_block(float *out, const float *in, int N, int C, const int full[3],
                      const int d0[3], const int ext[3]) {
    size_t o = 0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int z = 0; z < ext[0]; z++)
                for (int y = 0; y < ext[1]; y++)
                    for (int x = 0; x < ext[2]; x++)
                        out[o++] = in[((((size_t)n * C + c) * full[0] + d0[0] + z) * full[1] + d0[1] +
                                       y) * full[2] + d0[2] + x];
}

/* Channels-last logits block (N, ext, K) from the full (N, full, K). */
static void cut_logits(float *out, const float *in, int N, int K, const int full[3],
                       const int d0[3], const int ext[3]) {
    size_t o = 0;
    for (int n = 0; n < N; n++)
        for (int z = 0; z < ext[0]; z++)
            for (int y = 0; y < ext[1]; y++)
                for (int x = 0; x < ext[2]; x++) {
                    const float *v = in + ((((size_t)n * full[0] + d0[0] + z) * full[1] + d0[1] +
                                            y) * full[2] + d0[2] + x) * K;
                    memcpy(out + o, v, sizeof(float) * K);
                    o += K;
                }
}

/* Label block (N, ext) from full labels (N, full). */
static void cut_labels(uint16_t *out, const uint16_t *in, int N, const int full[3],
                       const int d0[3], const int ext[3]) {
    size_t o = 0;
    for (int n = 0; n < N; n++)
        for (int z = 0; z < ext[0]; z++)
            for (int y = 0; y < ext[1]; y++)
                for (int x = 0; x < ext[2]; x++)
                    out[o++] = in[(((size_t)n * full[0] + d0[0] + z) * full[1] + d0[1] + y) *
                                      full[2] + d0[2] + x];
}

/* One training step of the sharded model: forward, loss, backward, gradient all-reduce. */
static int step(nn_unet *m, par_grad *gr, const float *x, const uint16_t *y, int N,
                const float *w, double *loss, double *dice) {
    nn_unet_zero_grad(m);
    par_grad_begin(gr);
    int rc = nn_unet_forward_backward(m, x, y, N, w, loss, dice);
    par_grad_finish(gr);
    return rc;
}

static float maxabs(const float *a, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabsf(a[i]) > m ? fabsf(a[i]) : m;
    return m;
}

/* check_close with the tolerance relative to the tensor's largest value. */
static int close_rel(const char *name, const float *got, const float *want, size_t n, float rel,
                     float rtol) {
    return check_close(name, got, want, n, rel * maxabs(want, n), rtol);
}

typedef struct job {
    nn_unet_spec spec;
    int N, full[3];
    float *x, *w;     /* x: (nrep, N, 3, full) */
    uint16_t *y;      /* (nrep, N, full) */
} job;

/* Random volumes for every replica (the same on every rank), labels from the inputs. */
static void make_job(job *j, int nrep, int N, int size) {
    nn_unet_spec s = {3, 3, 2, 4, 2};
    j->spec = s;
    j->N = N;
    j->full[0] = j->full[1] = j->full[2] = size;
    const size_t S = (size_t)size * size * size, nx = (size_t)nrep * N * 3 * S;
    j->x = malloc(nx * sizeof(float));
    j->y = malloc((size_t)nrep * N * S * sizeof(uint16_t));
    j->w = malloc(3 * sizeof(float));
    uint64_t st = 12345;
    for (size_t i = 0; i < nx; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        j->x[i] = (float)((double)(st >> 11) / 9007199254740992.0 * 2 - 1);
    }
    for (int b = 0; b < nrep * N; b++)
        for (size_t v = 0; v < S; v++) {
            const float *xb = j->x + (size_t)b * 3 * S;
            j->y[(size_t)b * S + v] = (uint16_t)((xb[v] > 0.3f) + (xb[S + v] > 0.5f));
        }
    j->w[0] = 0.7f;
    j->w[1] = j->w[2] = 1.9f;
}

/* The sharded model of this rank: block extent/offset from the grid; hooks attached. */
static int make_sharded_p(nn_unet *m, const job *j, const par_grid *g, par_spatial *sp,
                          par_grad *gr, int gn_global, int ckpt, int prec, int d0[3],
                          int ext[3]) {
    for (int a = 0; a < 3; a++) {
        ext[a] = j->full[a] / g->counts[a];
        d0[a] = g->idx[a] * ext[a];
    }
    const nn_unet_opts o = {.precision = prec, .checkpointing = ckpt};
    if (nn_unet_create_opts(m, &j->spec, &o, j->N, ext[0], ext[1], ext[2]))
        return 1;
    par_spatial_init(sp, g, gn_global);
    m->shard = &sp->ops;
    return par_grad_init(gr, g->world, m, 1.0 / g->nrep);
}

static int make_sharded(nn_unet *m, const job *j, const par_grid *g, par_spatial *sp,
                        par_grad *gr, int gn_global, int ckpt, int d0[3], int ext[3]) {
    return make_sharded_p(m, j, g, sp, gr, gn_global, ckpt, NN_FP32, d0, ext);
}

static void test_global(const int counts[3]) {
    static const int axes[3] = {0, 1, 2};
    par_grid g;
    if (par_grid_create(&g, &W, 3, axes, counts)) {
        CHECK(0, "grid: %s", err_msg());
        return;
    }
    job j;
    make_job(&j, g.nrep, 2, 16);
    const int *full = j.full;
    const size_t S = (size_t)full[0] * full[1] * full[2];
    const int K = j.spec.n_classes, N = j.N;
    /* Reference: the unsharded model on each replica's batch; gradients averaged. */
    nn_unet ref;
    CHECK(nn_unet_create(&ref, &j.spec, N, full[0], full[1], full[2]) == 0, "%s", err_msg());
    nn_unet_init_params(&ref, 5);
    float *gsum = calloc(ref.nparams, sizeof(float));
    float *lref = malloc((size_t)N * S * K * sizeof(float));
    double loss_ref = 0, dice_ref = 0, vloss_ref = 0;
    float hd_ref[2];
    for (int r = 0; r < g.nrep; r++) {
        double l, d;
        nn_unet_zero_grad(&ref);
        const float *xr = j.x + (size_t)r * N * 3 * S;
        const uint16_t *yr = j.y + (size_t)r * N * S;
        CHECK(nn_unet_forward_backward(&ref, xr, yr, N, j.w, &l, &d) == 0, "%s", err_msg());
        for (size_t i = 0; i < ref.nparams; i++)
            gsum[i] += ref.grads[i] / (float)g.nrep;
        if (r == g.replica) {
            loss_ref = l;
            dice_ref = d;
            memcpy(lref, nn_unet_logits(&ref), (size_t)N * S * K * sizeof(float));
            CHECK(nn_unet_evaluate(&ref, xr, yr, N, j.w, &vloss_ref, hd_ref) == 0, "%s",
                  err_msg());
        }
    }
    /* Sharded. */
    nn_unet m;
    par_spatial sp;
    par_grad gr;
    int d0[3], ext[3];
    CHECK(make_sharded(&m, &j, &g, &sp, &gr, 1, 0, d0, ext) == 0, "%s", err_msg());
    memcpy(m.params, ref.params, ref.nparams * sizeof(float));
    const size_t Sb = (size_t)ext[0] * ext[1] * ext[2];
    float *xb = malloc((size_t)N * 3 * Sb * sizeof(float));
    float *lb = malloc((size_t)N * Sb * K * sizeof(float));
    uint16_t *ybl = malloc(N * Sb * sizeof(uint16_t));
    cut_block(xb, j.x + (size_t)g.replica * N * 3 * S, N, 3, full, d0, ext);
    cut_labels(ybl, j.y + (size_t)g.replica * N * S, N, full, d0, ext);
    double loss, dice;
    CHECK(step(&m, &gr, xb, ybl, N, j.w, &loss, &dice) == 0, "%s", err_msg());
    CHECK(par_spatial_status(&sp) == 0, "%s", err_msg());
    char nm[160];
    snprintf(nm, sizeof nm, "[%d,%d,%d] x %d: logits of block (%d,%d,%d)", counts[0], counts[1],
             counts[2], g.nrep, g.idx[0], g.idx[1], g.idx[2]);
    cut_logits(lb, lref, N, K, full, d0, ext);
    close_rel(nm, nn_unet_logits(&m), lb, (size_t)N * Sb * K, 1e-5f, 1e-5f);
    CHECK(fabs(loss - loss_ref) <= 1e-5 * fabs(loss_ref), "loss %.9g vs %.9g", loss, loss_ref);
    CHECK(fabs(dice - dice_ref) <= 1e-5 * fabs(dice_ref), "dice %.9g vs %.9g", dice, dice_ref);
    int bad = 0;
    for (int i = 0; i < m.ntensors; i++) {
        const nn_tensor_info *t = &m.tensors[i];
        snprintf(nm, sizeof nm, "[%d,%d,%d] x %d: grad %s", counts[0], counts[1], counts[2],
                 g.nrep, t->name);
        bad += close_rel(nm, m.grads + t->offset, gsum + t->offset, t->numel, 1e-5f, 1e-5f);
    }
    CHECK(bad == 0, "%d gradients differ from the unsharded model's", bad);
    /* The same shard with activation checkpointing: the same gradients, bit for bit. */
    {
        nn_unet mc;
        par_spatial spc;
        par_grad grc;
        double lc, dc;
        CHECK(make_sharded(&mc, &j, &g, &spc, &grc, 1, 1, d0, ext) == 0, "%s", err_msg());
        memcpy(mc.params, ref.params, ref.nparams * sizeof(float));
        CHECK(step(&mc, &grc, xb, ybl, N, j.w, &lc, &dc) == 0, "%s", err_msg());
        CHECK(par_spatial_status(&spc) == 0, "%s", err_msg());
        CHECK(lc == loss && dc == dice &&
                  !memcmp(mc.grads, m.grads, m.nparams * sizeof(float)),
              "[%d,%d,%d] x %d: checkpointed shard's loss, Dice or gradients differ", counts[0],
              counts[1], counts[2], g.nrep);
        par_grad_free(&grc);
        nn_unet_free(&mc);
    }
    /* bf16: the plain shard (its down blocks' conv outputs kept as bf16) and the checkpointed
     * one (which keeps none) give the same loss, Dice and gradients, bit for bit. */
    {
        nn_unet mb[2];
        par_spatial spb[2];
        par_grad grb[2];
        double lb2[2], db2[2];
        for (int k = 0; k < 2; k++) {
            CHECK(make_sharded_p(&mb[k], &j, &g, &spb[k], &grb[k], 1, k, NN_BF16, d0, ext) == 0,
                  "%s", err_msg());
            memcpy(mb[k].params, ref.params, ref.nparams * sizeof(float));
            CHECK(step(&mb[k], &grb[k], xb, ybl, N, j.w, &lb2[k], &db2[k]) == 0, "%s",
                  err_msg());
            CHECK(par_spatial_status(&spb[k]) == 0, "%s", err_msg());
        }
        CHECK(lb2[0] == lb2[1] && db2[0] == db2[1] &&
                  !memcmp(mb[0].grads, mb[1].grads, m.nparams * sizeof(float)),
              "[%d,%d,%d] x %d: bf16 shard, plain and checkpointed: loss %.17g / %.17g, Dice or "
              "gradients differ",
              counts[0], counts[1], counts[2], g.nrep, lb2[0], lb2[1]);
        CHECK(fabs(lb2[0] - loss) <= 0.05 * fabs(loss), "bf16 shard loss %.9g vs fp32 %.9g",
              lb2[0], loss);
        for (int k = 0; k < 2; k++) {
            par_grad_free(&grb[k]);
            nn_unet_free(&mb[k]);
        }
    }
    /* Evaluation: loss and per-sample hard Dice over the whole volume. */
    double vloss;
    float hd[2];
    CHECK(nn_unet_evaluate(&m, xb, ybl, N, j.w, &vloss, hd) == 0, "%s", err_msg());
    CHECK(fabs(vloss - vloss_ref) <= 1e-5 * fabs(vloss_ref), "val loss %.9g vs %.9g", vloss,
          vloss_ref);
    for (int n = 0; n < N; n++)
        CHECK(fabsf(hd[n] - hd_ref[n]) <= 1e-6f, "hard dice %d: %.9g vs %.9g", n, hd[n],
              hd_ref[n]);
    par_grad_free(&gr);
    nn_unet_free(&m);
    nn_unet_free(&ref);
    par_grid_free(&g);
    free(gsum), free(lref), free(xb), free(lb), free(ybl);
    free(j.x), free(j.y), free(j.w);
}

/* group_norm_stats: shard against the PyTorch emulation of upstream DistConv. */
static void test_shard_fixture(const char *path) {
    static const int axes[3] = {0, 1, 2}, counts[3] = {2, 1, 1};
    nn_st_file st;
    if (nn_st_open(&st, path)) {
        CHECK(0, "%s", err_msg());
        return;
    }
    par_grid g;
    if (par_grid_create(&g, &W, 3, axes, counts)) {
        CHECK(0, "grid: %s", err_msg());
        return;
    }
    job j;
    nn_unet_spec s = {3, atoi(nn_st_meta(&st, "classes")), atoi(nn_st_meta(&st, "layers")),
                      atoi(nn_st_meta(&st, "base")), atoi(nn_st_meta(&st, "groups"))};
    j.spec = s;
    j.N = atoi(nn_st_meta(&st, "n"));
    j.full[0] = j.full[1] = j.full[2] = atoi(nn_st_meta(&st, "size"));
    const int N = j.N, K = s.n_classes, *full = j.full;
    const size_t S = (size_t)full[0] * full[1] * full[2];
    j.x = fx_get(&st, "x", NULL, NULL);
    j.w = fx_get(&st, "weight", NULL, NULL);
    float *yf = fx_get(&st, "labels", NULL, NULL);
    nn_unet m;
    par_spatial sp;
    par_grad gr;
    int d0[3], ext[3];
    CHECK(make_sharded(&m, &j, &g, &sp, &gr, 0, 0, d0, ext) == 0, "%s", err_msg());
    for (int i = 0; i < m.ntensors; i++) {
        char nm[128];
        snprintf(nm, sizeof nm, "param.%s", m.tensors[i].name);
        float *p = fx_get(&st, nm, NULL, NULL);
        memcpy(m.params + m.tensors[i].offset, p, m.tensors[i].numel * sizeof(float));
        free(p);
    }
    const size_t Sb = (size_t)ext[0] * ext[1] * ext[2];
    float *xb = malloc((size_t)N * 3 * Sb * sizeof(float));
    uint16_t *ybl = malloc(N * Sb * sizeof(uint16_t)), *yfull = malloc(N * S * sizeof(uint16_t));
    for (size_t i = 0; i < (size_t)N * S; i++)
        yfull[i] = (uint16_t)yf[i];
    cut_block(xb, j.x, N, 3, full, d0, ext);
    cut_labels(ybl, yfull, N, full, d0, ext);
    double loss, dice;
    CHECK(step(&m, &gr, xb, ybl, N, j.w, &loss, &dice) == 0, "%s", err_msg());
    int64_t sh[5];
    float *lfull = fx_get_cl(&st, "logits", sh), *lb = malloc((size_t)N * Sb * K * sizeof(float));
    CHECK(fx_numel(sh, 5) == (size_t)N * S * K, "fixture logits: %zu values", fx_numel(sh, 5));
    cut_logits(lb, lfull, N, K, full, d0, ext);
    /* fp32 against float64 through ~10 layers: the tolerances of tests/nn's U-Net fixture. */
    check_close("shard GroupNorm: logits vs PyTorch per-shard emulation", nn_unet_logits(&m), lb,
                (size_t)N * Sb * K, 1e-4f, 1e-3f);
    float *lv = fx_get(&st, "loss", NULL, NULL), got[2] = {(float)loss, (float)dice};
    check_close("shard GroupNorm: loss and dice", got, lv, 2, 1e-5f, 1e-5f);
    int bad = 0;
    for (int i = 0; i < m.ntensors; i++) {
        char nm[160];
        snprintf(nm, sizeof nm, "grad.%s", m.tensors[i].name);
        float *gf = fx_get(&st, nm, NULL, NULL);
        bad += check_close(nm, m.grads + m.tensors[i].offset, gf, m.tensors[i].numel, 1e-4f,
                           2e-3f);
        free(gf);
    }
    CHECK(bad == 0, "%d gradients differ from the per-shard emulation", bad);
    /* The same block with whole-volume statistics must NOT match: the fixture discriminates. */
    sp.ops.gn_global = 1;
    CHECK(step(&m, &gr, xb, ybl, N, j.w, &loss, &dice) == 0, "%s", err_msg());
    double dmax = 0;
    const float *lg = nn_unet_logits(&m);
    for (size_t i = 0; i < (size_t)N * Sb * K; i++)
        dmax = fmax(dmax, fabs((double)lg[i] - lb[i]));
    dmax = dist_max_double(&W, dmax);
    CHECK(dmax > 1e-2, "global statistics give the per-shard logits too (max diff %.3g): the "
                       "fixture does not tell the semantics apart", dmax);
    par_grad_free(&gr);
    nn_unet_free(&m);
    par_grid_free(&g);
    nn_st_close(&st);
    free(xb), free(yfull), free(ybl), free(yf), free(lfull), free(lb), free(lv), free(j.x), free(j.w);
}

int main(int argc, char **argv) {
    if (dist_init(&W, &argc, &argv))
        return 1;
    int counts[3] = {argc > 3 ? atoi(argv[1]) : 2, argc > 3 ? atoi(argv[2]) : 1,
                     argc > 3 ? atoi(argv[3]) : 1};
    if (argc > 5 && !strcmp(argv[4], "--fixture"))
        test_shard_fixture(argv[5]);
    else
        test_global(counts);
    /* Every rank's counts into rank 0's report. */
    return mpi_test_report(&W);
}
