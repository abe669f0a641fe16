/* ops: the GPU twins of the CPU engine's non-convolution layers, loss, metrics and optimizers
 * (cu.h): argument checks that protect device memory, the workspace regions of each op, the
 * kernel sequence, and the host results of the synchronous ones (loss, Dice, norm). */
#include "nn/cuda/cu_int.h"

#include <math.h>
#include <string.h>

_Static_assert(CU_RED_BLOCKS == CUK_RED_BLOCKS, "reduction block counts of cu.h and kern.h");

/* Shapes the kernels index by: a wrong one would read or write outside the tensors. */
static int check_groups(int C, int G) {
    if (G < 1 || C % G != 0)
        return err_set(ERR_RANGE, "GroupNorm: %d groups do not divide %d channels", G, C);
    return 0;
}

static int check_even(int D, int H, int W) {
    if (D % 2 || H % 2 || W % 2)
        return err_set(ERR_RANGE, "MaxPool3d(2) needs even extents, got %dx%dx%d", D, H, W);
    return 0;
}

static int check_classes(int K) {
    if (K < 1 || K > 256)
        return err_set(ERR_RANGE, "%d classes: the loss supports 1..256", K);
    return 0;
}

/* The CPU's message for a mask value that is not a class (loss.c). */
static int bad_label(long v, int K) {
    return err_set(ERR_RANGE,
                   "mask label %ld is not a class index: the model has %d classes (0..%d); "
                   "check n_categories against the dataset",
                   v, K, K - 1);
}

/* ---- GroupNorm ---------------------------------------------------------------------------------- */

int cu_groupnorm_forward(cu_ctx *c, float *y, float *mean, float *rstd, const float *x,
                         const float *gamma, const float *beta, int N, long S, int C, int G,
                         int relu) {
    cu_ws_plan pl;
    cu_groupnorm_ws_plan(&pl, N, S, C);
    int rc = check_groups(C, G);
    if (rc || (rc = cu_ws_check(c, &pl, "groupnorm forward")))
        return rc;
    double *part = cu_ws_at(c, &pl, 0), *sums = cu_ws_at(c, &pl, 1);
    const int sl = cu_slices(S);
    /* mean, then the variance as a second pass around it (no E[x^2] - mean^2 cancellation) */
    CU_TRY(cuk_chan_sums(c->stream, sums, part, CUK_SUM, x, C, NULL, NULL, NULL, NULL, NULL, G, N,
                         S, C, sl));
    CU_TRY(cuk_gn_stats(c->stream, mean, rstd, sums, N, S, C, G, 0));
    CU_TRY(cuk_chan_sums(c->stream, sums, part, CUK_SUM_SQDEV, x, C, NULL, NULL, NULL, mean, NULL,
                         G, N, S, C, sl));
    CU_TRY(cuk_gn_stats(c->stream, mean, rstd, sums, N, S, C, G, 1));
    CU_TRY(cuk_gn_apply(c->stream, y, x, mean, rstd, gamma, beta, N, S, C, G, relu));
    return 0;
}

int cu_groupnorm_apply(cu_ctx *c, float *y, const float *x, const float *mean, const float *rstd,
                       const float *gamma, const float *beta, int N, long S, int C, int G,
                       int relu) {
    int rc = check_groups(C, G);
    if (rc)
        return rc;
    CU_TRY(cuk_gn_apply(c->stream, y, x, mean, rstd, gamma, beta, N, S, C, G, relu));
    return 0;
}

int cu_groupnorm_backward(cu_ctx *c, float *dx, float *dgamma, float *dbeta, const float *dy,
                          const float *x, const float *y, const float *mean, const float *rstd,
                          const float *gamma, int N, long S, int C, int G, int relu) {
    cu_ws_plan pl;
    cu_groupnorm_ws_plan(&pl, N, S, C);
    int rc = check_groups(C, G);
    if (rc || (rc = cu_ws_check(c, &pl, "groupnorm backward")))
        return rc;
    double *part = cu_ws_at(c, &pl, 0), *sums = cu_ws_at(c, &pl, 1);
    float *coef = cu_ws_at(c, &pl, 2);
    CU_TRY(cuk_chan_sums(c->stream, sums, part, CUK_SUM_GN_BWD, x, C, dy, relu ? y : NULL, NULL,
                         mean, rstd, G, N, S, C, cu_slices(S)));
    CU_TRY(cuk_gn_backward(c->stream, dx, dgamma, dbeta, dy, x, relu ? y : NULL, mean, rstd,
                           gamma, sums, coef, N, S, C, G, relu));
    return 0;
}

/* ---- element-wise layers -------------------------------------------------------------------------- */

int cu_relu_forward(cu_ctx *c, float *y, const float *x, size_t n) {
    CU_TRY(cuk_relu(c->stream, y, x, (long long)n));
    return 0;
}

int cu_relu_backward(cu_ctx *c, float *dx, const float *dy, const float *y, size_t n) {
    CU_TRY(cuk_relu_backward(c->stream, dx, dy, y, (long long)n));
    return 0;
}

int cu_maxpool3d_forward(cu_ctx *c, float *out, uint8_t *idx, const float *in, int N, int D,
                         int H, int W, int C) {
    int rc = check_even(D, H, W);
    if (rc)
        return rc;
    CU_TRY(cuk_maxpool(c->stream, out, idx, in, N, D, H, W, C));
    return 0;
}

int cu_maxpool3d_backward(cu_ctx *c, float *din, const float *dout, const uint8_t *idx, int N,
                          int D, int H, int W, int C) {
    int rc = check_even(D, H, W);
    if (rc)
        return rc;
    CU_TRY(cuk_maxpool_backward(c->stream, din, dout, idx, N, D, H, W, C));
    return 0;
}

int cu_concat_forward(cu_ctx *c, float *out, const float *a, int ca, const float *b, int cb,
                      long P) {
    CU_TRY(cuk_gather(c->stream, out, 0, a, ca, ca, b, cb, cb, P));
    return 0;
}

int cu_concat_backward(cu_ctx *c, float *da, float *db, const float *dout, int ca, int cb,
                       long P) {
    if (da)
        CU_TRY(cuk_gather(c->stream, da, 0, dout, ca + cb, ca, NULL, 0, 0, P));
    if (db)
        CU_TRY(cuk_gather(c->stream, db, 0, dout + ca, ca + cb, cb, NULL, 0, 0, P));
    return 0;
}

int cu_to_channels_last(cu_ctx *c, float *dst, const float *src, int N, int C, long S) {
    CU_TRY(cuk_layout(c->stream, dst, src, N, C, S, 1));
    return 0;
}

int cu_to_channels_first(cu_ctx *c, float *dst, const float *src, int N, int C, long S) {
    CU_TRY(cuk_layout(c->stream, dst, src, N, C, S, 0));
    return 0;
}

/* ---- loss and metrics ------------------------------------------------------------------------- */

int cu_loss(cu_ctx *c, float *dlogits, const float *logits, const uint16_t *labels,
            const float *ce_weight, int N, long S, int K, double *loss, double *ce, double *dice) {
    cu_ws_plan pl;
    cu_loss_ws_plan(&pl, N, S, K);
    int rc = check_classes(K);
    if (rc || (rc = cu_ws_check(c, &pl, "loss")))
        return rc;
    float *p = dlogits ? dlogits : cu_ws_at(c, &pl, 0);
    double *cep = cu_ws_at(c, &pl, 1), *part = cu_ws_at(c, &pl, 3), *sums = cu_ws_at(c, &pl, 4);
    double *coef = cu_ws_at(c, &pl, 5), *res = cu_ws_at(c, &pl, 6);
    int *bad = cu_ws_at(c, &pl, 2);
    CU_TRY(cuk_softmax_ce(c->stream, p, cep, bad, logits, labels, ce_weight, (long long)N * S, K));
    CU_TRY(cuk_chan_sums(c->stream, sums, part, CUK_SUM_CLASS, p, K, NULL, NULL, labels, NULL,
                         NULL, 0, N, S, K, cu_slices(S)));
    CU_TRY(cuk_loss_finalize(c->stream, res, coef, cep, bad, sums, N, K));
    if (dlogits)
        CU_TRY(cuk_loss_grad(c->stream, dlogits, labels, ce_weight, coef, res, N, S, K));
    double *h = c->host;
    CU_TRY(cudaMemcpyAsync(h, res, 5 * sizeof(double), cudaMemcpyDeviceToHost, c->stream));
    CU_TRY(cudaStreamSynchronize(c->stream));
    if (h[4] >= 0)
        return bad_label((long)h[4], K);
    if (loss)
        *loss = h[0];
    if (ce)
        *ce = h[1];
    if (dice)
        *dice = h[2];
    return 0;
}

int cu_hard_dice(cu_ctx *c, float *dice, const float *logits, const uint16_t *labels, int N,
                 long S, int K) {
    cu_ws_plan pl;
    cu_dice_ws_plan(&pl, N, K);
    int rc = check_classes(K);
    if (rc || (rc = cu_ws_check(c, &pl, "hard dice")))
        return rc;
    const size_t nc = (size_t)3 * N * K;
    if (nc * sizeof(unsigned long long) + sizeof(int) > CU_HOST_SCRATCH)
        return err_set(ERR_RANGE, "hard dice: %d samples x %d classes exceed the result buffer",
                       N, K);
    unsigned long long *cnt = cu_ws_at(c, &pl, 0);
    int *bad = cu_ws_at(c, &pl, 1);
    CU_TRY(cudaMemsetAsync(cnt, 0, nc * sizeof *cnt, c->stream));
    CU_TRY(cudaMemsetAsync(bad, 0xff, sizeof *bad, c->stream)); /* -1 */
    CU_TRY(cuk_dice_counts(c->stream, cnt, bad, logits, labels, N, S, K));
    unsigned long long *h = c->host;
    int *hbad = (int *)(h + nc);
    CU_TRY(cudaMemcpyAsync(h, cnt, nc * sizeof *cnt, cudaMemcpyDeviceToHost, c->stream));
    CU_TRY(cudaMemcpyAsync(hbad, bad, sizeof *bad, cudaMemcpyDeviceToHost, c->stream));
    CU_TRY(cudaStreamSynchronize(c->stream));
    if (*hbad >= 0)
        return bad_label(*hbad, K);
    /* nn_hard_dice's formula on the counts */
    for (int n = 0; n < N; n++) {
        const unsigned long long *cp = h + (size_t)n * 3 * K, *cl = cp + K, *cb = cl + K;
        double s = 0;
        for (int k = 1; k < K; k++) {
            const double I = 2.0 * cb[k];
            double Ss = (double)cp[k] + cl[k];
            if (Ss == 0)
                Ss = I;
            s += (I + 1e-6) / (Ss + 1e-6);
        }
        dice[n] = K > 1 ? (float)(s / (K - 1)) : 1.0f;
    }
    return 0;
}

int cu_argmax(cu_ctx *c, uint16_t *out, const float *logits, long P, int K) {
    int rc = check_classes(K);
    if (rc)
        return rc;
    CU_TRY(cuk_argmax(c->stream, out, logits, P, K));
    return 0;
}

/* ---- optimizers -------------------------------------------------------------------------------- */

int cu_optim_step(cu_ctx *c, nn_optim *o, float *params, const float *grads, float *state,
                  size_t n, double lr) {
    o->step++;
    const long long m = (long long)n;
    if (o->kind == NN_OPT_SGD) {
        CU_TRY(cuk_sgd(c->stream, params, grads, m, (float)lr));
    } else if (o->kind == NN_OPT_RMSPROP) {
        CU_TRY(cuk_rmsprop(c->stream, params, grads, state, m, (float)o->alpha, (float)lr,
                           (float)o->eps));
    } else {
        /* optim.c: bias corrections in double, the per-element update in float */
        const double bc1 = 1.0 - pow(o->beta1, (double)o->step);
        const double bc2 = 1.0 - pow(o->beta2, (double)o->step);
        CU_TRY(cuk_adam(c->stream, params, grads, state, state + n, m, (float)o->beta1,
                        (float)o->beta2, (float)(lr / bc1), (float)sqrt(bc2), (float)o->eps));
    }
    return 0;
}

int cu_clip_grad_norm(cu_ctx *c, float *grads, size_t n, double max_norm, double *norm) {
    cu_ws_plan pl;
    cu_norm_ws_plan(&pl);
    int rc = cu_ws_check(c, &pl, "gradient norm");
    if (rc)
        return rc;
    double *part = cu_ws_at(c, &pl, 0), *res = cu_ws_at(c, &pl, 1);
    CU_TRY(cuk_grad_norm(c->stream, res, part, grads, (long long)n, max_norm));
    CU_TRY(cuk_scale_by(c->stream, grads, (long long)n, (const float *)(res + 1)));
    if (norm) {
        double *h = c->host;
        CU_TRY(cudaMemcpyAsync(h, res, sizeof(double), cudaMemcpyDeviceToHost, c->stream));
        CU_TRY(cudaStreamSynchronize(c->stream));
        *norm = h[0];
    }
    return 0;
}

int cu_scale(cu_ctx *c, float *x, size_t n, float s) {
    CU_TRY(cuk_scale(c->stream, x, (long long)n, s));
    return 0;
}

int cu_round_bf16(cu_ctx *c, float *x, size_t n) {
    CU_TRY(cuk_convert(c->stream, x, x, 0, NULL, 1, (long long)n, 0, 1));
    return 0;
}

int cu_bf16_narrow(cu_ctx *c, uint16_t *dst, const float *src, size_t n) {
    CU_TRY(cuk_bf16_narrow(c->stream, dst, src, (long long)n));
    return 0;
}

int cu_bf16_widen(cu_ctx *c, float *dst, const uint16_t *src, size_t n) {
    CU_TRY(cuk_bf16_widen(c->stream, dst, src, (long long)n));
    return 0;
}
