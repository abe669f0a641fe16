/* test_unet: the whole U-Net against PyTorch (tools/torch_ref.py fixture: a 2-level, base-4
 * model on two 8^3 volumes): parameter names and shapes equal upstream's state_dict, logits,
 * loss, soft Dice, every parameter gradient, and the losses of 10 Adam steps with clipping.
 * Also: the parameter-count table of reference §9.4, initialisation bounds, the optimizers and
 * schedule against their formulas, CE weights, and checkpoint save/load including bad files. */
#include "fixture.h"
#include "nn/backend.h"
#include "nn/checkpoint.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "nn/unet.h"
#include "test.h"

#include "core/fsutil.h"
#include "core/rng.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_param_counts(void) {
    /* reference §9.4: n_classes 6, bottleneck dim 3, base 64 */
    static const struct {
        int scale;
        size_t params;
    } T[] = {{5, 5423238},      {6, 22400390},     {7, 90302342},       {8, 361896838},
             {9, 1448248198UL}, {10, 5793600390UL}, {11, 23174902662UL}};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        nn_unet_spec s = {3, 6, T[i].scale - 3, 64, 8};
        size_t n = nn_unet_param_count(&s);
        CHECK(n == T[i].params, "scale %d: %zu params, reference %zu", T[i].scale, n, T[i].params);
    }
}

typedef struct ufix {
    nn_st_file st;
    nn_unet m;
    float *x, *w;
    uint16_t *lab;
    int n, size;
} ufix;

/* Metadata key pfx + key of the fixture (exits when missing: a broken fixture). */
static int meta_int(const ufix *f, const char *pfx, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "%s%s", pfx, key);
    const char *v = nn_st_meta(&f->st, k);
    if (!v) {
        fprintf(stderr, "fixture %s lacks metadata %s\n", f->st.path, k);
        exit(1);
    }
    return atoi(v);
}

/* Loads DIR/FILE: a small U-Net's parameters, input, labels and class weights under tensor and
 * metadata names prefixed by pfx ("" in unet.safetensors, "unet." in bf16.safetensors), and
 * builds the model in precision prec. */
static int load_fixture(ufix *f, const char *dir, const char *file, const char *pfx, int prec) {
    char path[512], nm[128];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (nn_st_open(&f->st, path)) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    nn_unet_spec s = {3, meta_int(f, pfx, "classes"), meta_int(f, pfx, "layers"),
                      meta_int(f, pfx, "base"), meta_int(f, pfx, "groups")};
    const nn_unet_opts o = {.precision = prec};
    f->n = meta_int(f, pfx, "n");
    f->size = meta_int(f, pfx, "size");
    if (nn_unet_create_opts(&f->m, &s, &o, f->n, f->size, f->size, f->size)) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    /* Every parameter of ours must be in the PyTorch state_dict with the same shape, and the
     * state_dict must have nothing else. */
    int nfix = 0;
    snprintf(nm, sizeof nm, "%sparam.", pfx);
    for (int i = 0; i < f->st.nt; i++)
        nfix += !strncmp(f->st.t[i].name, nm, strlen(nm));
    CHECK(nfix == f->m.ntensors, "state_dict has %d tensors, the model %d", nfix, f->m.ntensors);
    for (int i = 0; i < f->m.ntensors; i++) {
        const nn_tensor_info *t = &f->m.tensors[i];
        snprintf(nm, sizeof nm, "%sparam.%s", pfx, t->name);
        const nn_st_entry *e = nn_st_find(&f->st, nm);
        CHECK(e != NULL, "tensor %s not in upstream's state_dict", t->name);
        if (!e)
            return 1;
        int same = e->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = e->shape[d] == t->shape[d];
        CHECK(same, "tensor %s: shape differs from PyTorch", t->name);
        nn_st_read_f32(&f->st, e, f->m.params + t->offset);
    }
    int64_t sh[5];
    snprintf(nm, sizeof nm, "%sx", pfx);
    f->x = fx_get(&f->st, nm, sh, NULL);
    snprintf(nm, sizeof nm, "%sweight", pfx);
    f->w = fx_get(&f->st, nm, NULL, NULL);
    snprintf(nm, sizeof nm, "%slabels", pfx);
    float *labf = fx_get(&f->st, nm, NULL, NULL);
    const size_t nv = (size_t)f->n * f->size * f->size * f->size;
    f->lab = malloc(nv * 2);
    for (size_t i = 0; i < nv; i++)
        f->lab[i] = (uint16_t)labf[i];
    free(labf);
    return 0;
}

static void test_unet_fixture(ufix *f) {
    nn_unet *m = &f->m;
    double loss, dice;
    nn_unet_zero_grad(m);
    int rc = nn_unet_forward_backward(m, f->x, f->lab, f->n, f->w, &loss, &dice);
    CHECK(rc == 0, "forward_backward: %s", err_msg());
    int64_t sh[5];
    float *lref = fx_get_cl(&f->st, "logits", sh);
    const size_t nl = fx_numel(sh, 5);
    /* fp32 through ~10 layers vs a float64 reference */
    check_close("unet logits", nn_unet_logits(m), lref, nl, 1e-4f, 1e-3f);
    float *lv = fx_get(&f->st, "loss", NULL, NULL);
    float got[2] = {(float)loss, (float)dice};
    check_close("unet loss and dice", got, lv, 2, 1e-5f, 1e-5f);
    /* every parameter gradient (GroupNorm makes small-variance gradients sensitive to the
     * rounding of the statistics, hence 1e-4 abs + 2e-3 rel) */
    int bad = 0;
    for (int i = 0; i < m->ntensors; i++) {
        char nm[128];
        snprintf(nm, sizeof nm, "grad.%s", m->tensors[i].name);
        float *g = fx_get(&f->st, nm, NULL, NULL);
        bad += check_close(nm, m->grads + m->tensors[i].offset, g, m->tensors[i].numel, 1e-4f,
                           2e-3f);
        free(g);
    }
    CHECK(bad == 0, "%d parameter gradients differ from PyTorch", bad);
    free(lref);
    free(lv);
}

/* Gradients, loss and Dice are bitwise identical with 1, 2 and 3 threads (fixed reduction
 * slices and chunk-to-copy assignment), on a model wide enough for the vector paths. */
/* ||a - b|| / ||b|| over n floats. */
static double rel_err(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* The small U-Net in bf16 against PyTorch 2.x CPU autocast (bf16.safetensors): logits, loss and
 * every parameter gradient. Our convolutions round once per result (PyTorch's backward passes
 * here round partial sums too, see test_layers), and rounding differences grow through the
 * layers, so the comparison is norm-wise: relative error at most 3% for the logits and 8% per
 * gradient tensor. Those bounds alone would let an fp32 model pass (at this width bf16 and fp32
 * differ little), so the loss, which sums every voxel and cancels the noise, must be at least 4x
 * closer to PyTorch's than our fp32 model's loss is (measured: 20x), and the whole gradient
 * vector closer than the fp32 model's (measured 0.3x in norm). */
static void test_unet_bf16(const char *dir) {
    ufix f[2];
    memset(f, 0, sizeof f);
    if (load_fixture(&f[0], dir, "bf16.safetensors", "unet.", NN_BF16) ||
        load_fixture(&f[1], dir, "bf16.safetensors", "unet.", NN_FP32)) {
        CHECK(0, "bf16 fixture: %s", err_msg());
        return;
    }
    double loss[2], dice[2];
    for (int k = 0; k < 2; k++) {
        nn_unet_zero_grad(&f[k].m);
        CHECK(nn_unet_forward_backward(&f[k].m, f[k].x, f[k].lab, f[k].n, f[k].w, &loss[k],
                                       &dice[k]) == 0,
              "bf16 forward_backward: %s", err_msg());
    }
    int64_t sh[5];
    float *lref = fx_get_cl(&f[0].st, "unet.logits", sh);
    float *lv = fx_get(&f[0].st, "unet.loss", NULL, NULL);
    const size_t nl = fx_numel(sh, 5);
    const double el = rel_err(nn_unet_logits(&f[0].m), lref, nl);
    const double el32 = rel_err(nn_unet_logits(&f[1].m), lref, nl);
    printf("bf16 U-Net vs PyTorch autocast: logits %.2e (fp32 model %.2e), loss %.6f vs %.6f "
           "(fp32 %.6f)\n",
           el, el32, loss[0], (double)lv[0], loss[1]);
    CHECK(el < 0.03 && el < el32, "bf16 logits: relative error %g (fp32 model %g)", el, el32);
    CHECK(fabs(loss[0] - lv[0]) < 0.25 * fabs(loss[1] - lv[0]),
          "bf16 loss %.7f vs PyTorch %.7f: no closer than the fp32 model's %.7f", loss[0],
          (double)lv[0], loss[1]);
    double worst = 0, worst32 = 0, d2 = 0, d32 = 0, r2 = 0;
    for (int i = 0; i < f[0].m.ntensors; i++) {
        char nm[160];
        const nn_tensor_info *t = &f[0].m.tensors[i];
        snprintf(nm, sizeof nm, "unet.grad.%s", t->name);
        float *g = fx_get(&f[0].st, nm, NULL, NULL);
        const float *g0 = f[0].m.grads + t->offset, *g1 = f[1].m.grads + t->offset;
        const double e = rel_err(g0, g, t->numel), e32 = rel_err(g1, g, t->numel);
        worst = fmax(worst, e), worst32 = fmax(worst32, e32);
        CHECK(e < 0.08, "bf16 gradient %s: relative error %g (fp32 model %g)", t->name, e, e32);
        for (size_t k = 0; k < t->numel; k++) {
            d2 += ((double)g0[k] - g[k]) * ((double)g0[k] - g[k]);
            d32 += ((double)g1[k] - g[k]) * ((double)g1[k] - g[k]);
            r2 += (double)g[k] * g[k];
        }
        free(g);
    }
    printf("bf16 U-Net gradients: worst tensor %.2e (fp32 model %.2e), all %.2e (fp32 model "
           "%.2e)\n",
           worst, worst32, sqrt(d2 / r2), sqrt(d32 / r2));
    CHECK(sqrt(d2) < 0.6 * sqrt(d32), "bf16 gradient vector: relative error %g, the fp32 model's "
                                      "%g",
          sqrt(d2 / r2), sqrt(d32 / r2));
    for (int k = 0; k < 2; k++) {
        nn_unet_free(&f[k].m);
        nn_st_close(&f[k].st);
        free(f[k].x), free(f[k].w), free(f[k].lab);
    }
    free(lref), free(lv);
}

/* Two samples of S voxels: x (3 channels) normal, labels 1..3 where channel 0 > 0.5, else 0. */
static void rand_batch(float *x, uint16_t *y, size_t S, uint64_t seed) {
    rng r = rng_make(seed, RNG_TEST, 0, 0);
    for (size_t i = 0; i < 2 * 3 * S; i++)
        x[i] = (float)rng_normal(&r);
    for (size_t i = 0; i < 2 * S; i++)
        y[i] = (uint16_t)(x[i] > 0.5f ? 1 + rng_below(&r, 3) : 0);
}

/* Activation checkpointing recomputes each block from its saved input: logits, loss, Dice and
 * every gradient bit-identical to the plain model, in fp32 and bf16, with less memory; also on
 * a backend without groupnorm_backward_x (as the CUDA backend), which keeps more, and whose
 * plain run takes the GroupNorm backward's ReLU masks from the outputs, not the inputs, and
 * rounds the skip + pool gradients in a pass of their own (no maxpool3d_backward_rbf16) and
 * pools in a pass of its own (no groupnorm_forward_pool). */
static void test_checkpointing(void) {
    static nn_backend nox;
    nox = *nn_backend_cpu();
    nox.groupnorm_backward_x = NULL;
    nox.maxpool3d_backward_rbf16 = NULL; /* and the skip + pool gradient's rounding pass */
    nox.groupnorm_forward_pool = NULL;   /* and the pools after the GroupNorms */
    /* fp32, bf16; 2 levels, 1 (the top up block is up[0]), 4 (as scale 7: every block below
     * the top keeps c2, with up blocks between two such levels) */
    for (int pl = 0; pl < 6; pl++) {
        const int prec = pl & 1, levels = pl < 4 ? 2 - pl / 2 : 4;
        nn_unet m[4]; /* plain, checkpointed, checkpointed and plain without the x op */
        for (int k = 0; k < 4; k++) {
            nn_unet_spec s = {3, 4, levels, 16, 4};
            const nn_unet_opts o = {.precision = prec, .checkpointing = k == 1 || k == 2,
                                    .backend = k >= 2 ? &nox : NULL};
            /* 16^3 with 16 channels: the top level's fp32 convolutions take the Winograd path */
            if (nn_unet_create_opts(&m[k], &s, &o, 2, 16, 16, 16)) {
                CHECK(0, "create: %s", err_msg());
                return;
            }
            nn_unet_init_params(&m[k], 5);
        }
        const size_t S = 16 * 16 * 16;
        CHECK(fx_algo_forced() ||
                  nn_conv3d_winograd(1, 16, 16, 16, 16, 16, NN_FP32) == nn_settings()->winograd,
              "the top level's fp32 convolution runs Winograd (unless SCAFFOLD_NN_WINOGRAD=0 or "
              "SCAFFOLD_NN_ALGO forces an algorithm)");
        float *x = malloc(2 * 3 * S * sizeof(float)), w[4] = {0.5f, 2, 2, 2};
        uint16_t *y = malloc(2 * S * sizeof(uint16_t));
        rand_batch(x, y, S, 6);
        double l[4], d[4];
        for (int rep = 0; rep < 2; rep++) /* twice: the second step starts from used slabs */
            for (int k = 0; k < 4; k++) {
                nn_unet_zero_grad(&m[k]);
                nn_unet_forward_backward(&m[k], x, y, 2, w, &l[k], &d[k]);
            }
        for (int k = 1; k < 4; k++)
            CHECK(!memcmp(m[0].grads, m[k].grads, m[0].nparams * sizeof(float)) &&
                      l[0] == l[k] && d[0] == d[k],
                  "%s: %s gradients, loss or Dice differ from the plain run (%s)",
                  prec ? "bf16" : "fp32", k == 3 ? "plain" : "checkpointed",
                  k >= 2 ? "without groupnorm_backward_x" : "cpu");
        CHECK(l[0] == l[1] && d[0] == d[1], "%s: checkpointed loss %.17g / dice %.17g vs %.17g / "
                                            "%.17g",
              prec ? "bf16" : "fp32", l[1], d[1], l[0], d[0]);
        CHECK(!memcmp(nn_unet_logits(&m[0]), nn_unet_logits(&m[1]), 2 * S * 4 * sizeof(float)),
              "checkpointed logits differ");
        float hd[2][2];
        double vl[2];
        for (int k = 0; k < 2; k++)
            nn_unet_evaluate(&m[k], x, y, 2, w, &vl[k], hd[k]);
        CHECK(vl[0] == vl[1] && !memcmp(hd[0], hd[1], sizeof hd[0]), "checkpointed evaluate");
        printf("checkpointing (%s, %d levels): activations %.1f MiB -> %.1f MiB\n",
               prec ? "bf16" : "fp32", levels, m[0].activation_floats * 4.0 / (1 << 20), m[1].activation_floats * 4.0 / (1 << 20));
        CHECK(m[1].activation_floats < m[2].activation_floats &&
                  m[2].activation_floats < m[0].activation_floats,
              "checkpointing saves no activation memory (%zu, %zu without groupnorm_backward_x, "
              "of %zu)",
              m[1].activation_floats, m[2].activation_floats, m[0].activation_floats);
        free(x), free(y);
        for (int k = 0; k < 4; k++)
            nn_unet_free(&m[k]);
    }
}

/* A bf16 run keeps its down blocks' conv outputs as bf16 (they hold bf16 values;
 * SCAFFOLD_NN_BF16_STORE=1): logits, loss, Dice, every gradient and evaluate bit-identical to
 * keeping them in fp32 (=0), in less memory; fp32 and checkpointed runs are unchanged. By
 * default (auto) only where that saves 256 MiB a sample: at scale 7 / base 64, not on these
 * small models. */
static void setting_env(const char *name, const char *v) {
    if (v)
        setenv(name, v, 1);
    else
        unsetenv(name);
    nn_settings_reload(); /* the engine reads its settings once */
}

static void bf16_store_env(const char *v) {
    setting_env("SCAFFOLD_NN_BF16_STORE", v);
}

/* Two models of 2 samples of 16^3 (spec {3, 4, levels, 16, 4}) in precision prec, the first
 * created with setting name = a, the second with = b (NULL: unset), from the same weights, each
 * run twice on the same batch (the second step starts from used slabs): their last losses and
 * Dice in l and d. 0, or -1 (reported) when a model cannot be created. */
static int twin_steps(nn_unet m[2], int levels, int prec, const char *name, const char *a,
                      const char *b, uint64_t seed, double l[2], double d[2]) {
    for (int k = 0; k < 2; k++) {
        nn_unet_spec s = {3, 4, levels, 16, 4};
        const nn_unet_opts o = {.precision = prec};
        setting_env(name, k ? b : a);
        if (nn_unet_create_opts(&m[k], &s, &o, 2, 16, 16, 16)) {
            CHECK(0, "create: %s", err_msg());
            if (k)
                nn_unet_free(&m[0]);
            return -1;
        }
        nn_unet_init_params(&m[k], seed);
    }
    const size_t S = 16 * 16 * 16;
    float *x = malloc(2 * 3 * S * sizeof(float)), w[4] = {0.5f, 2, 2, 2};
    uint16_t *y = malloc(2 * S * sizeof(uint16_t));
    rand_batch(x, y, S, seed + 1);
    for (int rep = 0; rep < 2; rep++)
        for (int k = 0; k < 2; k++) {
            nn_unet_zero_grad(&m[k]);
            nn_unet_forward_backward(&m[k], x, y, 2, w, &l[k], &d[k]);
        }
    free(x), free(y);
    return 0;
}

static void test_bf16_store(void) {
    const char *old = getenv("SCAFFOLD_NN_BF16_STORE");
    char *saved = old ? strdup(old) : NULL;
    for (int levels = 1; levels <= 2; levels++) {
        nn_unet m[2];
        const size_t S = 16 * 16 * 16;
        float *x = malloc(2 * 3 * S * sizeof(float)), w[4] = {0.5f, 2, 2, 2};
        uint16_t *y = malloc(2 * S * sizeof(uint16_t));
        rand_batch(x, y, S, 8);
        double l[2], d[2];
        if (twin_steps(m, levels, NN_BF16, "SCAFFOLD_NN_BF16_STORE", "1", "0", 7, l, d)) {
            free(x), free(y);
            return;
        }
        CHECK(!memcmp(m[0].grads, m[1].grads, m[0].nparams * sizeof(float)) && l[0] == l[1] &&
                  d[0] == d[1],
              "bf16 (%d levels): gradients, loss or Dice differ with the conv outputs kept as "
              "bf16 (loss %.17g vs %.17g)",
              levels, l[0], l[1]);
        CHECK(!memcmp(nn_unet_logits(&m[0]), nn_unet_logits(&m[1]), 2 * S * 4 * sizeof(float)),
              "bf16 (%d levels): logits differ with the conv outputs kept as bf16", levels);
        float hd[2][2];
        double vl[2];
        for (int k = 0; k < 2; k++)
            nn_unet_evaluate(&m[k], x, y, 2, w, &vl[k], hd[k]);
        CHECK(vl[0] == vl[1] && !memcmp(hd[0], hd[1], sizeof hd[0]), "bf16 store: evaluate");
        /* each down block above the bottleneck: two (2, S_l, cout) tensors at half size */
        size_t saved_floats = 0;
        for (int lv = 0; lv < levels; lv++) {
            const size_t n = (size_t)2 * (S >> (3 * lv)) * (16u << lv);
            saved_floats += 2 * (((n + 15) & ~(size_t)15) - (((n + 1) / 2 + 15) & ~(size_t)15));
        }
        CHECK(m[1].activation_floats - m[0].activation_floats == saved_floats,
              "bf16 store (%d levels): activations %zu vs %zu floats, expected %zu fewer",
              levels, m[0].activation_floats, m[1].activation_floats, saved_floats);
        /* auto, the default: these few MiB are not worth the passes */
        nn_unet ma;
        const nn_unet_opts oa = {.precision = NN_BF16};
        bf16_store_env(NULL);
        const nn_unet_spec sa = {3, 4, levels, 16, 4};
        if (nn_unet_create_opts(&ma, &sa, &oa, 2, 16, 16, 16) == 0) {
            CHECK(ma.activation_floats == m[1].activation_floats,
                  "bf16 store auto (%d levels): %zu activation floats, fp32 storage has %zu",
                  levels, ma.activation_floats, m[1].activation_floats);
            nn_unet_free(&ma);
        } else {
            CHECK(0, "create (auto): %s", err_msg());
        }
        free(x), free(y);
        for (int k = 0; k < 2; k++)
            nn_unet_free(&m[k]);
    }
    /* the plans with and without it: bf16 7 / 64 much smaller; fp32 and checkpointed equal */
    const nn_unet_spec s7 = {3, 6, 4, 64, 8};
    nn_unet_memory e[3][3];
    for (int k = 0; k < 3; k++) {
        bf16_store_env(k == 0 ? "1" : k == 1 ? "0" : NULL);
        for (int c = 0; c < 3; c++) {
            const nn_unet_opts o = {.precision = c == 1 ? NN_FP32 : NN_BF16,
                                    .checkpointing = c == 2};
            nn_unet_memory_estimate(&s7, &o, 1, 128, 128, 128, NN_OPT_ADAM, &e[k][c]);
        }
    }
    bf16_store_env(saved);
    free(saved);
    printf("scale 7 / base 64, batch 1: bf16 %.0f MiB (%.0f MiB with fp32 conv outputs), fp32 "
           "%.0f MiB\n",
           e[0][0].total / 1048576.0, e[1][0].total / 1048576.0, e[0][1].total / 1048576.0);
    CHECK(e[1][0].total - e[0][0].total > (size_t)600 << 20,
          "bf16 conv outputs as bf16 save only %zu bytes at scale 7 / base 64",
          e[1][0].total - e[0][0].total);
    CHECK(e[0][1].total == e[1][1].total && e[0][2].total == e[1][2].total,
          "fp32 or checkpointed plans depend on SCAFFOLD_NN_BF16_STORE");
    CHECK(e[2][0].total == e[0][0].total && e[2][1].total == e[0][1].total &&
              e[2][2].total == e[0][2].total,
          "scale 7 / base 64: the default (auto) plans %zu bytes in bf16, keeping the conv "
          "outputs as bf16 %zu",
          e[2][0].total, e[0][0].total);
}

/* Each block's inner activation a1 kept from the forward pass (SCAFFOLD_NN_KEEP_A1=1, the
 * default on small models) or made again in the backward pass (=0): logits, loss, Dice and
 * every gradient bit-identical, fp32 and bf16, with one (N, S_l, cout) tensor more per block
 * kept; at scale 7 / base 64 auto makes it again (1.2 GiB a sample). */
static void keep_a1_env(const char *v) {
    setting_env("SCAFFOLD_NN_KEEP_A1", v);
}

static void test_keep_a1(void) {
    const char *old = getenv("SCAFFOLD_NN_KEEP_A1");
    char *saved = old ? strdup(old) : NULL;
    for (int prec = 0; prec < 2; prec++) {
        nn_unet m[2];
        const int levels = 2;
        const size_t S = 16 * 16 * 16;
        double l[2], d[2];
        if (twin_steps(m, levels, prec, "SCAFFOLD_NN_KEEP_A1", NULL, "0", 9, l, d))
            return;
        CHECK(!memcmp(m[0].grads, m[1].grads, m[0].nparams * sizeof(float)) && l[0] == l[1] &&
                  d[0] == d[1] &&
                  !memcmp(nn_unet_logits(&m[0]), nn_unet_logits(&m[1]), 2 * S * 4 * sizeof(float)),
              "%s: gradients, loss, Dice or logits differ with a1 made again (loss %.17g vs %.17g)",
              prec ? "bf16" : "fp32", l[0], l[1]);
        size_t kept = 0; /* a1 of every block: 2 per level above the bottleneck, 1 at it */
        for (int lv = 0; lv <= levels; lv++) {
            const size_t n = (size_t)2 * (S >> (3 * lv)) * (16u << lv);
            kept += (lv < levels ? 2 : 1) * ((n + 15) & ~(size_t)15);
        }
        CHECK(m[0].activation_floats - m[1].activation_floats == kept,
              "%s: a1 kept takes %zu activation floats more, expected %zu",
              prec ? "bf16" : "fp32", m[0].activation_floats - m[1].activation_floats, kept);
        for (int k = 0; k < 2; k++)
            nn_unet_free(&m[k]);
    }
    const nn_unet_spec s7 = {3, 6, 4, 64, 8};
    const nn_unet_opts o7 = {.precision = NN_BF16};
    nn_unet_memory e[2];
    for (int k = 0; k < 2; k++) {
        keep_a1_env(k ? "0" : NULL);
        nn_unet_memory_estimate(&s7, &o7, 1, 128, 128, 128, NN_OPT_ADAM, &e[k]);
    }
    CHECK(e[0].total == e[1].total, "scale 7 / base 64: auto keeps a1 (%zu bytes, %zu without)",
          e[0].total, e[1].total);
    keep_a1_env(saved);
    free(saved);
}

/* nn_unet_memory_estimate is what nn_unet_create allocates, byte for byte. */
static void test_memory_estimate(void) {
    const int shapes[][4] = {{1, 16, 16, 16}, {2, 16, 8, 32}, {1, 32, 32, 32}};
    for (int si = 0; si < 3; si++)
        for (int prec = 0; prec < 2; prec++)
            for (int ck = 0; ck < 2; ck++)
                for (int opt = NN_OPT_ADAM; opt <= NN_OPT_RMSPROP; opt++) {
                    nn_unet_spec s = {3, 4, 2, 8, 4};
                    const nn_unet_opts uo = {.precision = prec, .checkpointing = ck,
                                             .sharded = si == 1};
                    const int *sh = shapes[si];
                    nn_unet_memory e;
                    nn_unet m;
                    nn_optim o;
                    CHECK(nn_unet_memory_estimate(&s, &uo, sh[0], sh[1], sh[2], sh[3], opt, &e) ==
                              0,
                          "estimate: %s", err_msg());
                    CHECK(nn_unet_create_opts(&m, &s, &uo, sh[0], sh[1], sh[2], sh[3]) == 0,
                          "create");
                    nn_optim_init(&o, (nn_optim_kind)opt, m.nparams);
                    CHECK(e.params == m.nparams * 4 && e.grads == m.nparams * 4,
                          "parameter bytes %zu vs %zu", e.params, m.nparams * 4);
                    CHECK(e.activations + e.workspace ==
                              m.activation_floats * 4 + m.activation_index_bytes,
                          "activations+workspace %zu vs the slabs %zu (batch %d %dx%dx%d prec %d "
                          "ckpt %d)",
                          e.activations + e.workspace,
                          m.activation_floats * 4 + m.activation_index_bytes, sh[0], sh[1], sh[2],
                          sh[3], prec, ck);
                    CHECK(e.optimizer == nn_optim_state_floats((nn_optim_kind)opt, m.nparams) * 4,
                          "optimizer bytes");
                    CHECK(e.total == e.params + e.grads + e.optimizer + e.activations + e.workspace,
                          "total");
                    nn_optim_free(&o);
                    nn_unet_free(&m);
                }
    /* At scale 7 / base 64 checkpointing keeps at most 45% of the activation memory (the
     * planned figure is 42%; small models are dominated by the top level's scratch). */
    nn_unet_memory plain, ck;
    const nn_unet_spec s7 = {3, 6, 4, 64, 8};
    const nn_unet_opts ckpt = {.checkpointing = 1};
    nn_unet_memory_estimate(&s7, NULL, 1, 128, 128, 128, NN_OPT_ADAM, &plain);
    nn_unet_memory_estimate(&s7, &ckpt, 1, 128, 128, 128, NN_OPT_ADAM, &ck);
    printf("scale 7 / base 64, batch 1: activations + workspace %.0f MiB, checkpointed %.0f MiB "
           "(%.0f%%); total %.0f MiB vs %.0f MiB\n",
           (plain.activations + plain.workspace) / 1048576.0,
           (ck.activations + ck.workspace) / 1048576.0,
           100.0 * (ck.activations + ck.workspace) / (plain.activations + plain.workspace),
           plain.total / 1048576.0, ck.total / 1048576.0);
    CHECK(ck.activations + ck.workspace <= 0.45 * (plain.activations + plain.workspace),
          "checkpointing keeps %zu of %zu activation bytes", ck.activations + ck.workspace,
          plain.activations + plain.workspace);
    const nn_unet_spec ok = {3, 4, 2, 8, 4};
    const nn_unet_opts bad = {.precision = 2};
    nn_unet_memory e;
    nn_unet m;
    CHECK(nn_unet_memory_estimate(&ok, &bad, 1, 16, 16, 16, NN_OPT_ADAM, &e) == ERR_CONFIG,
          "precision 2 must be refused");
    CHECK(nn_unet_create_opts(&m, &ok, &bad, 1, 16, 16, 16) == ERR_CONFIG,
          "precision 2 must be refused by create");
    CHECK(nn_unet_memory_estimate(&ok, NULL, 1, 10, 16, 16, NN_OPT_ADAM, &e) == ERR_CONFIG,
          "extent 10 with 2 layers must be refused");
}

static void test_thread_determinism(void) {
    nn_unet_spec s = {3, 4, 2, 16, 4};
    nn_unet m;
    if (nn_unet_create(&m, &s, 2, 16, 16, 8)) {
        CHECK(0, "create: %s", err_msg());
        return;
    }
    nn_unet_init_params(&m, 11);
    const size_t S = 16 * 16 * 8;
    float *x = malloc(2 * 3 * S * sizeof(float)), w[4] = {0.5f, 2, 2, 2};
    uint16_t *y = malloc(2 * S * sizeof(uint16_t));
    rand_batch(x, y, S, 12);
    float *g1 = malloc(m.nparams * sizeof(float));
    double l1 = 0, d1 = 0;
    const int saved = omp_get_max_threads();
    const int threads[3] = {1, 3, 2};
    for (int k = 0; k < 3; k++) {
        omp_set_num_threads(threads[k]);
        double l, d;
        nn_unet_zero_grad(&m);
        nn_unet_forward_backward(&m, x, y, 2, w, &l, &d);
        if (k == 0) {
            memcpy(g1, m.grads, m.nparams * sizeof(float));
            l1 = l, d1 = d;
        } else {
            CHECK(!memcmp(g1, m.grads, m.nparams * sizeof(float)) && l == l1 && d == d1,
                  "gradients with %d threads differ from 1 thread", threads[k]);
        }
    }
    omp_set_num_threads(saved);
    free(x), free(y), free(g1);
    nn_unet_free(&m);
}

static void test_unet_adam(ufix *f, nn_optim *o) {
    nn_unet *m = &f->m;
    float *lref = fx_get(&f->st, "adam.losses", NULL, NULL);
    float *nref = fx_get(&f->st, "adam.norms", NULL, NULL);
    const double lr = atof(nn_st_meta(&f->st, "lr"));
    float losses[10], norms[10];
    nn_optim_init(o, NN_OPT_ADAM, m->nparams);
    for (int s = 0; s < 10; s++) {
        double loss, dice;
        nn_unet_zero_grad(m);
        nn_unet_forward_backward(m, f->x, f->lab, f->n, f->w, &loss, &dice);
        norms[s] = (float)nn_clip_grad_norm(m->grads, m->nparams, 1.0);
        nn_optim_step(o, m->params, m->grads, lr);
        losses[s] = (float)loss;
    }
    for (int s = 0; s < 10; s++)
        printf("adam step %d: loss %.6f (torch %.6f)\n", s, losses[s], lref[s]);
    /* 10 steps of fp32 vs float64: the trajectories agree to ~1e-5 */
    check_close("10 Adam step losses", losses, lref, 10, 2e-4f, 1e-4f);
    check_close("10 Adam step grad norms", norms, nref, 10, 1e-4f, 1e-3f);
    free(lref);
    free(nref);
}

static void test_eval_predict(ufix *f) {
    nn_unet *m = &f->m;
    double loss, loss2, dice;
    float hd[4], hd2[4];
    CHECK(nn_unet_evaluate(m, f->x, f->lab, f->n, f->w, &loss, hd) == 0, "evaluate");
    nn_unet_zero_grad(m);
    nn_unet_forward_backward(m, f->x, f->lab, f->n, f->w, &loss2, &dice);
    CHECK(fabs(loss - loss2) < 1e-6 * (1 + fabs(loss)), "eval loss %g vs train loss %g", loss,
          loss2);
    nn_hard_dice(hd2, nn_unet_logits(m), f->lab, f->n, (long)f->size * f->size * f->size,
                 m->spec.n_classes);
    check_close("evaluate hard dice", hd, hd2, f->n, 0, 0);
    const size_t S = (size_t)f->size * f->size * f->size, K = m->spec.n_classes;
    float *lg = malloc(f->n * S * K * sizeof(float)), *cl = malloc(f->n * S * K * sizeof(float));
    uint16_t *mask = malloc(f->n * S * 2), *m2 = malloc(f->n * S * 2);
    CHECK(nn_unet_predict(m, f->x, f->n, lg, mask) == 0, "predict");
    nn_to_channels_last(cl, lg, f->n, (int)K, (long)S);
    check_close("predict logits = forward logits", cl, nn_unet_logits(m), f->n * S * K, 0, 0);
    nn_argmax(m2, nn_unet_logits(m), (long)(f->n * S), (int)K);
    CHECK(!memcmp(mask, m2, f->n * S * 2), "predict mask = argmax");
    CHECK(nn_unet_predict(m, f->x, f->n + 1, NULL, mask) == ERR_RANGE, "batch too large");
    free(lg), free(cl), free(mask), free(m2);
}

static void test_init(void) {
    nn_unet_spec s = {3, 4, 2, 8, 4};
    nn_unet a, b;
    nn_unet_create(&a, &s, 1, 8, 8, 8);
    nn_unet_create(&b, &s, 1, 8, 8, 8);
    nn_unet_init_params(&a, 42);
    nn_unet_init_params(&b, 42);
    CHECK(!memcmp(a.params, b.params, a.nparams * 4), "same seed, same weights");
    nn_unet_init_params(&b, 43);
    CHECK(memcmp(a.params, b.params, a.nparams * 4), "different seed, different weights");
    for (int i = 0; i < a.ntensors; i++) {
        const nn_tensor_info *t = &a.tensors[i];
        const float *p = a.params + t->offset;
        if (strstr(t->name, ".double_conv.1.") || strstr(t->name, ".double_conv.4.")) {
            const float v = strstr(t->name, ".weight") ? 1.0f : 0.0f;
            int ok = 1;
            for (size_t k = 0; k < t->numel; k++)
                ok &= p[k] == v;
            CHECK(ok, "%s must be all %g", t->name, (double)v);
            continue;
        }
        const nn_tensor_info *wt = strstr(t->name, ".bias") ? &a.tensors[i - 1] : t;
        const double fan = (double)wt->shape[1] * wt->shape[2] * wt->shape[3] * wt->shape[4];
        const double bound = 1 / sqrt(fan);
        double mx = 0, s2 = 0;
        for (size_t k = 0; k < t->numel; k++) {
            mx = fmax(mx, fabs(p[k]));
            s2 += (double)p[k] * p[k];
        }
        CHECK(mx <= bound, "%s: |w| %g exceeds 1/sqrt(fan_in) = %g", t->name, mx, bound);
        if (t->numel >= 500) {
            const double var = s2 / t->numel, want = bound * bound / 3;
            CHECK(fabs(var - want) < 0.15 * want, "%s: variance %g, uniform gives %g", t->name,
                  var, want);
        }
    }
    nn_unet_free(&a);
    nn_unet_free(&b);
    nn_unet_spec bad = {3, 4, 2, 8, 3};
    nn_unet c;
    CHECK(nn_unet_create(&c, &bad, 1, 8, 8, 8) == ERR_CONFIG, "groups must divide channels");
    CHECK(strstr(err_msg(), "group_norm_groups") != NULL, "message: %s", err_msg());
    CHECK(nn_unet_create(&c, &s, 1, 8, 10, 8) == ERR_CONFIG, "extent must be a multiple of 4");
    nn_unet_spec l0 = {3, 4, 0, 8, 4};
    CHECK(nn_unet_create(&c, &l0, 1, 8, 8, 8) == ERR_CONFIG, "layers >= 1");
}

static void test_optim_formulas(void) {
    /* Adam vs the formula in double, three steps on 3 parameters */
    float p[3] = {0.5f, -1.0f, 2.0f}, g[3] = {0.1f, -0.3f, 0.02f};
    double pd[3] = {0.5, -1.0, 2.0}, md[3] = {0}, vd[3] = {0};
    nn_optim o;
    nn_optim_init(&o, NN_OPT_ADAM, 3);
    for (int t = 1; t <= 3; t++) {
        nn_optim_step(&o, p, g, 0.01);
        for (int i = 0; i < 3; i++) {
            md[i] = 0.9 * md[i] + 0.1 * g[i];
            vd[i] = 0.999 * vd[i] + 0.001 * (double)g[i] * g[i];
            const double mh = md[i] / (1 - pow(0.9, t)), vh = vd[i] / (1 - pow(0.999, t));
            pd[i] -= 0.01 * mh / (sqrt(vh) + 1e-8);
        }
    }
    float pf[3] = {(float)pd[0], (float)pd[1], (float)pd[2]};
    check_close("adam 3 steps", p, pf, 3, 1e-6f, 1e-5f);
    nn_optim_free(&o);
    float q[2] = {1, 2}, gq[2] = {0.5f, -0.5f};
    nn_optim_init(&o, NN_OPT_SGD, 2);
    nn_optim_step(&o, q, gq, 0.1);
    const float qs[2] = {0.95f, 2.05f};
    check_close("sgd step", q, qs, 2, 1e-7f, 0);
    nn_optim_free(&o);
    nn_optim_init(&o, NN_OPT_RMSPROP, 2);
    q[0] = 1, q[1] = 2;
    nn_optim_step(&o, q, gq, 0.1);
    const double v = 0.01 * 0.25;
    const float qr[2] = {(float)(1 - 0.1 * 0.5 / (sqrt(v) + 1e-8)),
                         (float)(2 + 0.1 * 0.5 / (sqrt(v) + 1e-8))};
    check_close("rmsprop step", q, qr, 2, 1e-6f, 1e-6f);
    nn_optim_free(&o);
    nn_optim_kind k;
    CHECK(nn_optim_parse("ADAM", &k) == 0 && k == NN_OPT_ADAM, "parse ADAM");
    CHECK(nn_optim_parse("RMSprop", &k) == 0 && k == NN_OPT_RMSPROP, "parse RMSprop");
    CHECK(nn_optim_parse("adamw", &k) == ERR_CONFIG, "adamw is not supported");
    /* clipping: norm 5 -> scaled to 1 */
    float c[2] = {3, 4};
    double n = nn_clip_grad_norm(c, 2, 1.0);
    CHECK(fabs(n - 5) < 1e-6 && fabsf(c[0] - 0.6f) < 1e-5f && fabsf(c[1] - 0.8f) < 1e-5f,
          "clip: norm %g, g = (%g, %g)", n, c[0], c[1]);
    float c2[2] = {0.3f, 0.4f};
    nn_clip_grad_norm(c2, 2, 1.0);
    CHECK(c2[0] == 0.3f && c2[1] == 0.4f, "no clipping under the max norm");
    /* the norm's sum, bit for bit: 64 fixed slices, each 8 interleaved partial sums in double
     * (its last n % 8 into the first), slices added in order; on 1 thread and on several, for
     * sizes with empty, short and uneven slices */
    static const size_t ns[] = {1, 7, 63, 64, 1000, 100003};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        const size_t nn = ns[t];
        float *gv = malloc(nn * sizeof *gv);
        for (size_t i = 0; i < nn; i++)
            gv[i] = (float)sin(0.37 * (double)i + 1.0) * (i % 3 ? 1.0f : 1e-3f);
        double total = 0, plain = 0;
        for (int sl = 0; sl < 64; sl++) {
            const size_t lo = nn * sl / 64, hi = nn * (sl + 1) / 64;
            double a[8] = {0};
            size_t i = lo;
            for (; i + 8 <= hi; i += 8)
                for (int j = 0; j < 8; j++)
                    a[j] += (double)gv[i + j] * gv[i + j];
            for (; i < hi; i++)
                a[0] += (double)gv[i] * gv[i];
            total += ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        }
        for (size_t i = 0; i < nn; i++)
            plain += (double)gv[i] * gv[i];
        const int nth = omp_get_max_threads();
        omp_set_num_threads(1);
        const double n1 = nn_grad_norm(gv, nn);
        omp_set_num_threads(nth > 1 ? nth : 2);
        const double n2 = nn_grad_norm(gv, nn);
        omp_set_num_threads(nth);
        CHECK(n1 == sqrt(total) && n2 == n1 && fabs(n1 - sqrt(plain)) <= 1e-12 * sqrt(plain),
              "grad norm of %zu values: %.17g (1 thread) %.17g (%d) against %.17g by its "
              "definition, %.17g plainly summed",
              nn, n1, n2, nth > 1 ? nth : 2, sqrt(total), sqrt(plain));
        free(gv);
    }
    /* CosineAnnealingWarmRestarts(T_0 = 10, T_mult = 2, eta_min = 1e-5), lr0 = 1e-3 */
    const double lr0 = 1e-3, emin = 1e-5;
    CHECK(nn_lr_cosine_warm(lr0, 10, 2, emin, 0) == lr0, "epoch 1 runs at lr0");
    double l5 = nn_lr_cosine_warm(lr0, 10, 2, emin, 5);
    CHECK(fabs(l5 - (emin + (lr0 - emin) * 0.5)) < 1e-12, "half way: %g", l5);
    CHECK(fabs(nn_lr_cosine_warm(lr0, 10, 2, emin, 10) - lr0) < 1e-15, "restart after 10");
    double l20 = nn_lr_cosine_warm(lr0, 10, 2, emin, 20);
    CHECK(fabs(l20 - (emin + (lr0 - emin) * 0.5)) < 1e-12, "second cycle is 20 long: %g", l20);
    CHECK(fabs(nn_lr_cosine_warm(lr0, 10, 2, emin, 30) - lr0) < 1e-15, "restart after 10+20");
    CHECK(fabs(nn_lr_cosine_warm(lr0, 10, 1, emin, 13) - nn_lr_cosine_warm(lr0, 10, 1, emin, 3)) <
              1e-15,
          "T_mult 1 is periodic");
    /* CE weights */
    uint64_t cnt[4] = {90, 4, 6, 0};
    float w[4];
    nn_ce_class_weights(w, cnt, 4);
    const float wr[4] = {100.0f / 90, 10, 10, 10};
    check_close("ce weights", w, wr, 4, 0, 1e-6f);
    uint64_t allbg[3] = {10};
    nn_ce_class_weights(w, allbg, 3);
    CHECK(w[0] == 1 && w[1] == 1 && w[2] == 1, "uniform weights without foreground");
    uint16_t labs[5] = {0, 1, 1, 2, 0};
    uint64_t c3[3] = {0};
    CHECK(nn_label_counts(c3, labs, 5, 3) == 0 && c3[0] == 2 && c3[1] == 2 && c3[2] == 1,
          "label counts");
    labs[2] = 7;
    CHECK(nn_label_counts(c3, labs, 5, 3) == ERR_RANGE, "label out of range");
}

static void test_checkpoint(ufix *f, nn_optim *o) {
    char dir[] = "/tmp/scaffold-nn-ckpt.XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    char path[256], opath[300], other[256];
    snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
    nn_checkpoint_optim_path(path, opath, sizeof opath);
    CHECK(strstr(opath, "ckpt.optim.safetensors") != NULL, "sidecar name %s", opath);
    const char *meta[] = {"epoch", "7", "val_dice", "0.5"};
    CHECK(nn_checkpoint_save(path, &f->m, o, meta, 2) == 0, "save: %s", err_msg());
    nn_unet m2;
    nn_unet_create(&m2, &f->m.spec, 1, f->size, f->size, f->size);
    nn_optim o2;
    nn_optim_init(&o2, NN_OPT_ADAM, m2.nparams);
    nn_st_file info;
    CHECK(nn_checkpoint_load(path, &m2, &o2, &info) == 0, "load: %s", err_msg());
    CHECK(!memcmp(m2.params, f->m.params, m2.nparams * 4), "params round trip");
    CHECK(!memcmp(o2.state, o->state, 2 * m2.nparams * 4), "Adam state round trip");
    CHECK(o2.step == o->step, "step %lld vs %lld", (long long)o2.step, (long long)o->step);
    CHECK(nn_st_meta(&info, "epoch") && !strcmp(nn_st_meta(&info, "epoch"), "7"), "metadata");
    nn_st_close(&info);
    nn_unet_spec sp;
    CHECK(nn_checkpoint_spec(path, 0, &sp) == 0 && sp.layers == f->m.spec.layers &&
              sp.base_channels == f->m.spec.base_channels &&
              sp.n_classes == f->m.spec.n_classes && sp.groups == f->m.spec.groups,
          "spec inferred from the checkpoint");
    /* reserved metadata key */
    const char *badmeta[] = {"layers", "3"};
    CHECK(nn_checkpoint_save(path, &f->m, NULL, badmeta, 1) == ERR_USAGE, "reserved key");
    /* wrong architecture */
    nn_unet_spec s3 = f->m.spec;
    s3.base_channels *= 2;
    nn_unet m3;
    nn_unet_create(&m3, &s3, 1, f->size, f->size, f->size);
    CHECK(nn_checkpoint_load(path, &m3, NULL, NULL) == ERR_FORMAT, "shape mismatch");
    CHECK(strstr(err_msg(), "shape") != NULL, "message: %s", err_msg());
    nn_unet_free(&m3);
    /* a second save pairs a new sidecar; the old model file with the new sidecar is rejected */
    snprintf(other, sizeof other, "%s/old.safetensors", dir);
    char *data;
    size_t n;
    fs_read_file(path, &data, &n);
    fs_write_file(other, data, n, 0);
    char oold[300];
    nn_checkpoint_optim_path(other, oold, sizeof oold);
    CHECK(nn_checkpoint_save(path, &f->m, o, meta, 2) == 0, "second save");
    char *od;
    size_t on;
    fs_read_file(opath, &od, &on);
    fs_write_file(oold, od, on, 0);
    CHECK(nn_checkpoint_load(other, &m2, &o2, NULL) == ERR_FORMAT, "pair id mismatch detected");
    CHECK(strstr(err_msg(), "does not belong") != NULL, "message: %s", err_msg());
    /* truncated and garbage files */
    fs_write_file(other, data, n / 2, 0);
    CHECK(nn_checkpoint_load(other, &m2, NULL, NULL) == ERR_FORMAT, "truncated: %s", err_msg());
    fs_write_file(other, "hello world, not safetensors", 28, 0);
    CHECK(nn_checkpoint_load(other, &m2, NULL, NULL) == ERR_FORMAT, "garbage: %s", err_msg());
    memcpy(data + 8, "[", 1);
    fs_write_file(other, data, n, 0);
    CHECK(nn_checkpoint_load(other, &m2, NULL, NULL) == ERR_FORMAT, "bad JSON: %s", err_msg());
    CHECK(nn_checkpoint_load("/nonexistent/x.safetensors", &m2, NULL, NULL) == ERR_IO, "missing");
    /* Mutations of the length field and the JSON header never crash (ASan run) and never load
     * a tensor whose byte range does not match its shape. */
    {
        rng r = rng_make(99, RNG_TEST, 1, 0);
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--)
            hl = (hl << 8) | (unsigned char)data[i];
        memcpy(data + 8, "{", 1); /* undo the '[' above */
        int crashed = 0, accepted = 0;
        char *mut = malloc(n);
        for (int it = 0; it < 300; it++) {
            memcpy(mut, data, n);
            const int flips = 1 + (int)rng_below(&r, 3);
            for (int k = 0; k < flips; k++) {
                size_t at = (size_t)rng_below(&r, 8 + hl);
                static const char alphabet[] = "0123456789[]{}\",: \"\\eE-9";
                mut[at] = (char)(rng_below(&r, 2) ? alphabet[rng_below(&r, sizeof alphabet - 1)]
                                                  : (char)rng_below(&r, 256));
            }
            fs_write_file(other, mut, n, 0);
            int rc2 = nn_checkpoint_load(other, &m2, NULL, NULL);
            accepted += rc2 == 0;
            crashed += rc2 != 0 && rc2 != ERR_FORMAT && rc2 != ERR_IO && rc2 != ERR_NOMEM;
        }
        free(mut);
        CHECK(crashed == 0, "mutated headers: %d unexpected return codes", crashed);
        printf("header mutations: %d/300 still loadable (harmless edits)\n", accepted);
    }
    free(data);
    free(od);
    nn_optim_free(&o2);
    nn_unet_free(&m2);
    fs_rm_rf(dir);
}

/* `test_unet --write-ckpt PATH`: writes the checkpoint of an initialised 2-level, base-8,
 * 4-class model with perturbed GroupNorm parameters (for the PyTorch interop test). */
static int write_ckpt(const char *path) {
    nn_unet_spec s = {3, 4, 2, 8, 4};
    nn_unet m;
    if (nn_unet_create(&m, &s, 1, 8, 8, 8))
        return 1;
    nn_unet_init_params(&m, 2024);
    rng r = rng_make(5, RNG_TEST, 0, 0);
    for (int i = 0; i < m.ntensors; i++)
        if (strstr(m.tensors[i].name, ".double_conv.1.") ||
            strstr(m.tensors[i].name, ".double_conv.4."))
            for (size_t k = 0; k < m.tensors[i].numel; k++)
                m.params[m.tensors[i].offset + k] += 0.3f * (float)rng_normal(&r);
    const char *meta[] = {"note", "interop test"};
    int rc = nn_checkpoint_save(path, &m, NULL, meta, 1);
    if (rc)
        fprintf(stderr, "%s\n", err_msg());
    nn_unet_free(&m);
    return rc ? 1 : 0;
}

/* --activation-mib D H W C0 L SHARDED: the engine's planned activation + index slab in MiB
 * (fp32, batch 1, 6 classes, 8 groups), for tools/dist_model.py's check (tests/dist/run.sh). */
static int print_activation_mib(char **a) {
    nn_unet_spec s = {3, 6, atoi(a[4]), atoi(a[3]), 8};
    const nn_unet_opts o = {.sharded = atoi(a[5])};
    nn_unet_memory e;
    if (nn_unet_memory_estimate(&s, &o, 1, atoi(a[0]), atoi(a[1]), atoi(a[2]), NN_OPT_ADAM, &e)) {
        fprintf(stderr, "test_unet: %s\n", err_msg());
        return 2;
    }
    printf("%.3f\n", (double)(e.activations + e.workspace) / 1048576.0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && !strcmp(argv[1], "--write-ckpt"))
        return write_ckpt(argv[2]);
    if (argc == 8 && !strcmp(argv[1], "--activation-mib"))
        return print_activation_mib(argv + 2);
    if (fx_isa_setup(argc, argv))
        return 0;
    const char *dir = argc > 1 ? argv[1] : "tests/nn/fixtures";
    test_param_counts();
    test_thread_determinism();
    test_init();
    test_optim_formulas();
    ufix f;
    memset(&f, 0, sizeof f);
    if (load_fixture(&f, dir, "unet.safetensors", "", NN_FP32))
        return 1;
    test_unet_fixture(&f);
    test_eval_predict(&f);
    nn_optim o;
    test_unet_adam(&f, &o);
    test_checkpoint(&f, &o);
    nn_optim_free(&o);
    nn_unet_free(&f.m);
    nn_st_close(&f.st);
    free(f.x), free(f.w), free(f.lab);
    test_unet_bf16(dir);
    test_checkpointing();
    test_bf16_store();
    test_keep_a1();
    test_memory_estimate();
    return test_report();
}
