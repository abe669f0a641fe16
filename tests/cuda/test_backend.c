/* test_backend: the U-Net's operation table (src/nn/backend.h) on any machine. A model on
 * nn_backend_cpu_devmem (the CPU engine behind a device backend's discipline: memory of its
 * own, explicit copies) must equal the plain CPU model bit for bit in every pass (training
 * forward+backward, evaluation, prediction, optimizer steps), fp32 and bf16, with and without
 * activation checkpointing; the copies (nn_unet_upload, nn_unet_download) must be what moves
 * data, so a host write without an upload changes nothing on the backend. Also the table's
 * status rule and the model's refusals (optimizer kind, sharding on a non-host device). */
#include "core/err.h"
#include "nn/backend.h"
#include "nn/optim.h"
#include "nn/unet.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

enum { N = 2, E = 8, K = 4 };
static const nn_unet_spec spec = {.in_channels = 3, .n_classes = K, .layers = 2,
                                  .base_channels = 8, .groups = 4};
#define S ((size_t)E * E * E)

static float x[N * 3 * S], ce_w[K] = {0.5f, 1.0f, 1.5f, 2.0f};
static uint16_t y[N * S];

static void make_batch(void) {
    uint64_t r = 7;
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((r >> 40) * (1.0 / 8388608.0)) - 1.0f;
    }
    for (size_t i = 0; i < sizeof y / sizeof y[0]; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        y[i] = (uint16_t)((r >> 33) % K);
    }
}

static int same(const void *a, const void *b, size_t bytes) {
    return memcmp(a, b, bytes) == 0;
}

/* Both models through `steps` training steps, an evaluation and a prediction: equal bits. */
static void test_equal(int prec, int ckpt) {
    char tag[64];
    snprintf(tag, sizeof tag, "%s%s", prec == NN_BF16 ? "bf16" : "fp32",
             ckpt ? " checkpointing" : "");
    nn_backend *dev;
    if (nn_backend_cpu_devmem(&dev) != 0) {
        CHECK(0, "devmem backend: %s", err_msg());
        return;
    }
    nn_unet a, b;
    nn_optim oa, ob;
    const nn_unet_opts o = {.precision = prec, .checkpointing = ckpt};
    nn_unet_opts od = o;
    od.backend = dev;
    od.optimizer = NN_OPT_ADAM;
    int rc = nn_unet_create_opts(&a, &spec, &o, N, E, E, E);
    if (rc == 0)
        rc = nn_unet_create_opts(&b, &spec, &od, N, E, E, E);
    if (rc) {
        CHECK(0, "%s: create: %s", tag, err_msg());
        dev->destroy(dev);
        return;
    }
    CHECK(a.dparams == a.params && a.dgrads == a.grads && !a.dstate, "%s: CPU computes on the "
          "host slabs", tag);
    CHECK(b.dparams != b.params && b.dgrads != b.grads && b.dstate, "%s: devmem has its own", tag);
    nn_optim_init(&oa, NN_OPT_ADAM, a.nparams);
    nn_optim_init(&ob, NN_OPT_ADAM, b.nparams);
    CHECK(nn_unet_init_params(&a, 3) == 0 && nn_unet_init_params(&b, 3) == 0, "%s: init", tag);
    const size_t pb = a.nparams * sizeof(float);
    CHECK(same(b.dparams, a.params, pb), "%s: init uploads", tag);
    for (int step = 0; step < 3; step++) {
        double la, lb, da, db;
        nn_unet_zero_grad(&a);
        nn_unet_zero_grad(&b);
        CHECK(nn_unet_forward_backward(&a, x, y, N, ce_w, &la, &da) == 0 &&
                  nn_unet_forward_backward(&b, x, y, N, ce_w, &lb, &db) == 0,
              "%s step %d: passes: %s", tag, step, err_msg());
        CHECK(la == lb && da == db, "%s step %d: loss %.9g vs %.9g, dice %.9g vs %.9g", tag, step,
              la, lb, da, db);
        CHECK(same(nn_unet_logits(&a), nn_unet_logits(&b), N * S * K * sizeof(float)),
              "%s step %d: logits", tag, step);
        if (step == 0) {
            /* the host mirror of the gradients is stale until downloaded */
            memset(b.grads, 0, pb);
            CHECK(!same(b.grads, a.grads, pb), "%s: gradients not copied before a download",
                  tag);
        }
        CHECK(nn_unet_download(&b, &ob) == 0 && same(b.grads, a.grads, pb),
              "%s step %d: every gradient", tag, step);
        CHECK(nn_unet_step(&a, &oa, 1e-3, 1.0) == 0 && nn_unet_step(&b, &ob, 1e-3, 1.0) == 0,
              "%s step %d: update", tag, step);
        CHECK(same(b.dparams, a.params, pb) && oa.step == ob.step, "%s step %d: parameters",
              tag, step);
        CHECK(same(b.dstate, oa.state, 2 * pb), "%s step %d: Adam state", tag, step);
    }
    double la, lb;
    float dia[N], dib[N];
    CHECK(nn_unet_evaluate(&a, x, y, N, ce_w, &la, dia) == 0 &&
              nn_unet_evaluate(&b, x, y, N, ce_w, &lb, dib) == 0 && la == lb &&
              same(dia, dib, sizeof dia),
          "%s: evaluation", tag);
    float *pa = malloc(N * S * K * sizeof(float)), *pbuf = malloc(N * S * K * sizeof(float));
    uint16_t ma[N * S], mb[N * S];
    CHECK(nn_unet_predict(&a, x, N, pa, ma) == 0 && nn_unet_predict(&b, x, N, pbuf, mb) == 0 &&
              same(pa, pbuf, N * S * K * sizeof(float)) && same(ma, mb, sizeof ma),
          "%s: prediction", tag);
    /* A host write reaches the backend only through an upload. */
    CHECK(nn_unet_download(&b, &ob) == 0 && same(b.params, a.params, pb), "%s: download", tag);
    for (size_t i = 0; i < b.nparams; i++)
        b.params[i] *= 0.5f;
    CHECK(nn_unet_predict(&b, x, N, pbuf, NULL) == 0 &&
              same(pa, pbuf, N * S * K * sizeof(float)),
          "%s: a host write without an upload changes nothing", tag);
    CHECK(nn_unet_upload(&b, &ob) == 0 && nn_unet_predict(&b, x, N, pbuf, NULL) == 0 &&
              !same(pa, pbuf, N * S * K * sizeof(float)),
          "%s: after the upload the model is the new one", tag);
    free(pa);
    free(pbuf);
    nn_optim_free(&oa);
    nn_optim_free(&ob);
    nn_unet_free(&a);
    nn_unet_free(&b);
    dev->destroy(dev);
}

static void test_refusals(void) {
    nn_backend *dev;
    if (nn_backend_cpu_devmem(&dev) != 0)
        return;
    nn_unet m;
    nn_optim o;
    nn_unet_opts od = {.backend = dev, .optimizer = NN_OPT_RMSPROP};
    if (nn_unet_create_opts(&m, &spec, &od, 1, E, E, E) != 0) {
        CHECK(0, "create: %s", err_msg());
        dev->destroy(dev);
        return;
    }
    nn_optim_init(&o, NN_OPT_ADAM, m.nparams);
    CHECK(nn_unet_step(&m, &o, 1e-3, 1.0) == ERR_CONFIG && strstr(err_msg(), "RMSprop"),
          "an optimizer the slab was not made for: %s", err_msg());
    CHECK(nn_unet_upload(&m, &o) == ERR_CONFIG, "nor its state uploaded");
    nn_optim_free(&o);
    nn_optim_init(&o, NN_OPT_RMSPROP, m.nparams);
    CHECK(nn_unet_step(&m, &o, 1e-3, 0) == 0, "the right one: %s", err_msg());
    nn_optim_free(&o);
    nn_unet_free(&m);
    /* A device backend whose memory the host cannot read (as CUDA's) takes no sharded model. */
    nn_backend fake = *dev;
    fake.host_access = 0;
    nn_unet_opts of = {.sharded = 1, .backend = &fake};
    CHECK(nn_unet_create_opts(&m, &spec, &of, 1, E, E, E) == ERR_CONFIG &&
              strstr(err_msg(), "spatially sharded") && strstr(err_msg(), "device: cpu"),
          "sharding on a non-host device: %s", err_msg());
    of.sharded = 0;
    of.precision = NN_BF16; /* fake.prec is fp32 */
    CHECK(nn_unet_create_opts(&m, &spec, &of, 1, E, E, E) != 0, "a precision the device lacks");
    dev->destroy(dev);
    /* The status: the first failure is kept, read once, then clear. */
    nn_backend *cpu = nn_backend_cpu();
    CHECK(nn_backend_status(cpu) == 0, "the CPU table starts clean");
    nn_backend t = *cpu;
    nn_backend_fail(&t, ERR_RANGE);
    nn_backend_fail(&t, ERR_NOMEM);
    CHECK(nn_backend_status(&t) == ERR_RANGE && nn_backend_status(&t) == 0, "status rule");
}

int main(void) {
    make_batch();
    for (int prec = NN_FP32; prec <= NN_BF16; prec++)
        for (int ckpt = 0; ckpt <= 1; ckpt++)
            test_equal(prec, ckpt);
    test_refusals();
    return test_report();
}
