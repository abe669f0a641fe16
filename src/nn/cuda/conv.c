/* conv: the U-Net's convolutions on the GPU (see cu.h): Conv3d k3 p1 and ConvTranspose3d k2 s2
 * on cuDNN, the 1x1 output convolution on cuBLAS, weight packing, and the choice of cuDNN
 * algorithms by measurement (cudnnFind*Ex on the real buffers), cached per shape.
 *
 * ConvTranspose3d(cin -> cout, k2 s2) is the adjoint of the stride-2 convolution whose input x
 * is the transposed convolution's output (N, cout, 2D, 2H, 2W) and whose filter is PyTorch's
 * (cin, cout, 2, 2, 2) read as (K = cin, C = cout): its forward is cuDNN's backward-data, its
 * input gradient cuDNN's forward, its weight gradient cuDNN's backward-filter with x = dout.
 *
 * Layout: activations NDHWC (CUDNN_TENSOR_NHWC for 5-D tensors), filters (K, k, k, k, C)
 * (CUDNN_TENSOR_NHWC filters), packed from PyTorch's (K, C, k, k, k) by cu_pack_*; weight
 * gradients come back through a workspace and are added in PyTorch's layout. */
#include "nn/cuda/cu_int.h"

#include "core/log.h"

#include <string.h>

/* Math type of the search and of every fp32 execution: FMA only (TF32 off). */
static cudnnMathType_t search_math(const cu_ctx *c) {
    return c->bf16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
}

static int desc_set(cu_conv_desc *d, const cu_conv_key *k) {
    const cudnnDataType_t t = k->bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    const int s = k->k == 2 ? 2 : 1, pad = k->k == 3 ? 1 : 0;
    const int xd[5] = {k->N, k->C, k->D, k->H, k->W};
    const int yd[5] = {k->N, k->K, k->D / s, k->H / s, k->W / s};
    const int wd[5] = {k->K, k->C, k->k, k->k, k->k};
    const int padv[3] = {pad, pad, pad}, stride[3] = {s, s, s}, dil[3] = {1, 1, 1};
    DNN_TRY(cudnnSetTensorNdDescriptorEx(d->x, CUDNN_TENSOR_NHWC, t, 5, xd));
    DNN_TRY(cudnnSetTensorNdDescriptorEx(d->y, CUDNN_TENSOR_NHWC, t, 5, yd));
    DNN_TRY(cudnnSetFilterNdDescriptor(d->w, t, CUDNN_TENSOR_NHWC, 5, wd));
    DNN_TRY(cudnnSetConvolutionNdDescriptor(d->conv, 3, padv, stride, dil,
                                            CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    /* cuDNN must agree with our output shape. */
    int od[5];
    DNN_TRY(cudnnGetConvolutionNdForwardOutputDim(d->conv, d->x, d->w, 5, od));
    for (int i = 0; i < 5; i++)
        if (od[i] != yd[i]) {
            char key[160];
            cu_conv_key_str(k, key, sizeof key);
            return err_set(ERR_INTERNAL, "cuDNN output dim %d of %s is %d, expected %d", i, key,
                           od[i], yd[i]);
        }
    return 0;
}

static int desc_make(cu_conv_desc *d) {
    DNN_TRY(cudnnCreateTensorDescriptor(&d->x));
    DNN_TRY(cudnnCreateTensorDescriptor(&d->y));
    DNN_TRY(cudnnCreateFilterDescriptor(&d->w));
    DNN_TRY(cudnnCreateConvolutionDescriptor(&d->conv));
    d->made = 1;
    return 0;
}

int cu_conv_desc_check(const cu_conv_key *k) {
    cu_conv_desc d;
    memset(&d, 0, sizeof d);
    int rc = desc_make(&d);
    if (!rc)
        rc = desc_set(&d, k);
    if (d.x)
        cudnnDestroyTensorDescriptor(d.x);
    if (d.y)
        cudnnDestroyTensorDescriptor(d.y);
    if (d.w)
        cudnnDestroyFilterDescriptor(d.w);
    if (d.conv)
        cudnnDestroyConvolutionDescriptor(d.conv);
    return rc;
}

int cu_conv_slot(cu_ctx *c, const cu_conv_key *k, int *slot) {
    int i = cu_algo_slot(&c->algos, k);
    if (i < 0)
        return i;
    cu_conv_desc *d = &c->desc[i];
    if (!d->made) {
        int rc = desc_make(d);
        if (rc)
            return rc;
    }
    if (!d->ready) {
        int rc = desc_set(d, k);
        if (rc)
            return rc;
        d->ready = 1;
    }
    *slot = i;
    return 0;
}

int cu_conv_exec(cu_ctx *c, int slot, int op, int algo, int math, size_t ws, const void *a,
                 const void *b, void *out, int accumulate) {
    const cu_conv_desc *d = &c->desc[slot];
    const float one = 1.0f, zero = accumulate ? 1.0f : 0.0f;
    if (ws > c->algo_ws_bytes)
        return err_set(ERR_RANGE, "cuDNN algorithm needs %zu bytes of workspace, %zu available",
                       ws, c->algo_ws_bytes);
    DNN_TRY(cudnnSetConvolutionMathType(d->conv, (cudnnMathType_t)math));
    if (op == CU_OP_FWD)
        DNN_TRY(cudnnConvolutionForward(c->dnn, &one, d->x, a, d->w, b, d->conv,
                                        (cudnnConvolutionFwdAlgo_t)algo, c->algo_ws, ws, &zero,
                                        d->y, out));
    else if (op == CU_OP_BWD_DATA)
        DNN_TRY(cudnnConvolutionBackwardData(c->dnn, &one, d->w, a, d->y, b, d->conv,
                                             (cudnnConvolutionBwdDataAlgo_t)algo, c->algo_ws, ws,
                                             &zero, d->x, out));
    else
        DNN_TRY(cudnnConvolutionBackwardFilter(c->dnn, &one, d->x, a, d->y, b, d->conv,
                                               (cudnnConvolutionBwdFilterAlgo_t)algo, c->algo_ws,
                                               ws, &zero, d->w, out));
    return 0;
}

/* One measured candidate, whatever the operation's perf struct. */
typedef struct perf {
    int algo, ok, det, math;
    float ms;
    size_t mem;
} perf;

#define PERF_MAX 16
#define PERF_COPY(dst, src, n)                                                                     \
    for (int i_ = 0; i_ < (n); i_++) {                                                             \
        dst[i_].algo = (int)src[i_].algo;                                                          \
        dst[i_].ok = src[i_].status == CUDNN_STATUS_SUCCESS;                                       \
        dst[i_].det = src[i_].determinism == CUDNN_DETERMINISTIC;                                  \
        dst[i_].math = (int)src[i_].mathType;                                                      \
        dst[i_].ms = src[i_].time;                                                                 \
        dst[i_].mem = src[i_].memory;                                                              \
    }

/* Measures every algorithm of the operation on the real buffers (cudnnFind*Ex writes `out`,
 * which every caller overwrites afterwards) and keeps the fastest deterministic one. */
static int conv_find(cu_ctx *c, int slot, int op, const void *a, const void *b, void *out) {
    const cu_conv_desc *d = &c->desc[slot];
    cu_algo *al = &c->algos.e[slot].op[op];
    perf p[PERF_MAX];
    int n = 0;
    DNN_TRY(cudnnSetConvolutionMathType(d->conv, search_math(c)));
    if (op == CU_OP_FWD) {
        cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        DNN_TRY(cudnnFindConvolutionForwardAlgorithmEx(
            c->dnn, d->x, a, d->w, b, d->conv, d->y, out, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, r,
            c->algo_ws, c->algo_ws_bytes));
        PERF_COPY(p, r, n);
    } else if (op == CU_OP_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        DNN_TRY(cudnnFindConvolutionBackwardDataAlgorithmEx(
            c->dnn, d->w, a, d->y, b, d->conv, d->x, out, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
            &n, r, c->algo_ws, c->algo_ws_bytes));
        PERF_COPY(p, r, n);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        DNN_TRY(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            c->dnn, d->x, a, d->y, b, d->conv, d->w, out,
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, r, c->algo_ws, c->algo_ws_bytes));
        PERF_COPY(p, r, n);
    }
    int pick = -1, best = -1;
    for (int i = 0; i < n; i++) {
        if (!p[i].ok || p[i].mem > c->algo_ws_bytes)
            continue;
        if (best < 0 || p[i].ms < p[best].ms)
            best = i;
        /* fp32: only FMA kernels (a TF32 kernel would break the 1e-4 agreement with the CPU) */
        const int math_ok = c->bf16 || p[i].math == CUDNN_FMA_MATH;
        if (p[i].det && math_ok && (pick < 0 || p[i].ms < p[pick].ms))
            pick = i;
    }
    char key[160];
    cu_conv_key_str(&c->algos.e[slot].key, key, sizeof key);
    static const char *const opname[CU_NOPS] = {"forward", "backward-data", "backward-filter"};
    if (pick < 0)
        return err_set(ERR_INTERNAL,
                       "cuDNN has no deterministic %s algorithm for %s within %zu bytes of "
                       "workspace (%d candidates measured)",
                       opname[op], key, c->algo_ws_bytes, n);
    al->found = 1;
    al->algo = p[pick].algo;
    al->math = c->bf16 ? p[pick].math : CUDNN_FMA_MATH;
    al->ws = p[pick].mem;
    al->ms = p[pick].ms;
    al->best_algo = p[best].algo;
    al->best_math = p[best].math;
    al->best_ws = p[best].mem;
    al->best_ms = p[best].ms;
    log_debug("cuDNN %s %s: algorithm %d (%.3f ms, %zu bytes); fastest of any kind %d (%.3f ms)",
              opname[op], key, al->algo, al->ms, al->ws, al->best_algo, al->best_ms);
    return 0;
}

/* The operation's algorithm, measured on first use (cudnnFind writes `out`). */
int cu_conv_measure(cu_ctx *c, int slot, int op, const void *a, const void *b, void *out) {
    return c->algos.e[slot].op[op].found ? 0 : conv_find(c, slot, op, a, b, out);
}

/* The operation with its cached algorithm; `accumulate` adds to out (then the algorithm must
 * have been measured before out held anything: cu_conv_measure first). */
static int conv_run(cu_ctx *c, int slot, int op, const void *a, const void *b, void *out,
                    int accumulate) {
    const cu_algo *al = &c->algos.e[slot].op[op];
    if (!al->found) {
        if (accumulate)
            return err_set(ERR_INTERNAL, "cuDNN algorithm not measured before an accumulating "
                                         "call (it would overwrite the output)");
        int rc = conv_find(c, slot, op, a, b, out);
        if (rc)
            return rc;
    }
    return cu_conv_exec(c, slot, op, al->algo, al->math, al->ws, a, b, out, accumulate);
}

/* ---- packing --------------------------------------------------------------------------------- */

int cu_pack_conv3d(cu_ctx *c, void *wp, const float *w, int cout, int ca, int cb) {
    cu_conv_part part[2];
    const int np = cu_conv3d_parts(c->skip_split, c->bf16, ca, cb, cout, part);
    for (int i = 0; i < np; i++)
        CU_TRY(cuk_pack(c->stream, (char *)wp + part[i].w_off * (c->bf16 ? 2 : 4), c->bf16,
                        w + (size_t)part[i].c0 * 27, cout, part[i].C, 27, ca + cb));
    return 0;
}

int cu_pack_convt3d(cu_ctx *c, void *wp, const float *w, int cin, int cout) {
    CU_TRY(cuk_pack(c->stream, wp, c->bf16, w, cin, cout, 8, cout));
    return 0;
}

/* ---- Conv3d k3 p1 -----------------------------------------------------------------------------
 * cu_conv3d_parts: one cuDNN convolution over the input (concatenated with the skip in the
 * workspace when there is one), or, for the skip in fp32 split mode, one per input with its part
 * of the filter: y = conv(A, W_A) + conv(B, W_B), dA and dB each from its own backward-data (no
 * concatenation, no split), dW_A and dW_B from two backward-filters. */

typedef struct conv3d_call {
    cu_ws_plan pl;
    int np;              /* cuDNN convolutions: 1, or 2 (split skip) */
    cu_conv_part part[2];
    int slot[2];         /* their algorithm-cache slots */
    size_t esize;        /* bytes of the compute type */
} conv3d_call;

/* Common start of the Conv3d ops: shape check, workspace plan, parts and their slots. */
static int conv3d_begin(cu_ctx *c, conv3d_call *k, int N, int D, int H, int W, int ca, int cb,
                        int cout, const char *op) {
    int rc = cu_check_conv_shape(N, D, H, W, ca + cb, cout, 0);
    if (rc)
        return rc;
    cu_conv3d_ws_plan(&k->pl, N, D, H, W, ca + cb, cout, c->bf16);
    if ((rc = cu_ws_check(c, &k->pl, op)))
        return rc;
    k->esize = c->bf16 ? 2 : 4;
    k->np = cu_conv3d_parts(c->skip_split, c->bf16, ca, cb, cout, k->part);
    for (int i = 0; i < k->np; i++) {
        const cu_conv_key key = {3, c->bf16, N, k->part[i].C, D, H, W, cout};
        if ((rc = cu_conv_slot(c, &key, &k->slot[i])))
            return rc;
    }
    return 0;
}

static const void *wpart(const conv3d_call *k, const void *wp, int i) {
    return (const char *)wp + k->part[i].w_off * k->esize;
}

/* x = cat(inA, inB) in the compute type (in place when it already is: fp32 without a skip). */
static int conv3d_input(cu_ctx *c, const cu_ws_plan *pl, const float *inA, int ca,
                        const float *inB, int cb, long long P, const void **x) {
    *x = inA;
    if (!inB && !c->bf16)
        return 0;
    void *xb = cu_ws_at(c, pl, 0);
    CU_TRY(cuk_gather(c->stream, xb, c->bf16, inA, ca, ca, inB, cb, cb, P));
    *x = xb;
    return 0;
}

int cu_conv3d_forward(cu_ctx *c, float *out, const float *inA, int ca, const float *inB, int cb,
                      const void *wp, int cout, int N, int D, int H, int W) {
    const long long P = (long long)N * D * H * W;
    if (!inB)
        cb = 0;
    conv3d_call k;
    int rc = conv3d_begin(c, &k, N, D, H, W, ca, cb, cout, "conv3d forward");
    if (rc)
        return rc;
    if (k.np == 2) {
        /* both measured before the first runs: cudnnFind writes out, the second adds to it */
        if ((rc = cu_conv_measure(c, k.slot[0], CU_OP_FWD, inA, wpart(&k, wp, 0), out)) ||
            (rc = cu_conv_measure(c, k.slot[1], CU_OP_FWD, inB, wpart(&k, wp, 1), out)) ||
            (rc = conv_run(c, k.slot[0], CU_OP_FWD, inA, wpart(&k, wp, 0), out, 0)))
            return rc;
        return conv_run(c, k.slot[1], CU_OP_FWD, inB, wpart(&k, wp, 1), out, 1);
    }
    const void *x;
    if ((rc = conv3d_input(c, &k.pl, inA, ca, inB, cb, P, &x)))
        return rc;
    void *y = c->bf16 ? cu_ws_at(c, &k.pl, 2) : (void *)out;
    if ((rc = conv_run(c, k.slot[0], CU_OP_FWD, x, wp, y, 0)))
        return rc;
    if (c->bf16)
        CU_TRY(cuk_convert(c->stream, out, y, 1, NULL, cout, P * cout, 0, 0));
    return 0;
}

/* The split skip's backward (fp32): dW_A, dW_B into the workspace's dW region and added in
 * PyTorch's layout; dA, dB straight into din, dinB (or, for one whole input gradient, into the
 * workspace's region 0 and concatenated into din). */
static int conv3d_backward_split(cu_ctx *c, const conv3d_call *k, float *din, float *dinB,
                                 float *dw, const float *dout, const float *inA, int ca,
                                 const float *inB, int cb, const void *wp, int cout, long long P) {
    const float *in[2] = {inA, inB};
    float *dW = cu_ws_at(c, &k->pl, 1);
    int rc;
    for (int i = 0; i < 2; i++)
        if ((rc = conv_run(c, k->slot[i], CU_OP_BWD_FILTER, in[i], dout, dW + k->part[i].w_off,
                           0)))
            return rc;
    for (int i = 0; i < 2; i++)
        CU_TRY(cuk_unpack_add(c->stream, dw + (size_t)k->part[i].c0 * 27, dW + k->part[i].w_off,
                              0, cout, k->part[i].C, 27, ca + cb));
    if (!din && !dinB)
        return 0;
    float *whole = dinB ? NULL : cu_ws_at(c, &k->pl, 0); /* region 0 holds P * (ca + cb) */
    float *dx[2] = {dinB ? din : whole, dinB ? dinB : whole + P * ca};
    for (int i = 0; i < 2; i++)
        if (dx[i] && (rc = conv_run(c, k->slot[i], CU_OP_BWD_DATA, wpart(k, wp, i), dout, dx[i],
                                    0)))
            return rc;
    if (whole)
        CU_TRY(cuk_gather(c->stream, din, 0, dx[0], ca, ca, dx[1], cb, cb, P));
    return 0;
}

int cu_conv3d_backward(cu_ctx *c, float *din, float *dinB, float *dw, const float *dout,
                       const float *inA, int ca, const float *inB, int cb, const void *wp,
                       int cout, int N, int D, int H, int W) {
    const long long P = (long long)N * D * H * W;
    if (dinB && !inB)
        return err_set(ERR_RANGE, "conv3d backward: a second input gradient without a second "
                                  "input");
    if (!inB)
        cb = 0;
    const int cin = ca + cb;
    conv3d_call k;
    int rc = conv3d_begin(c, &k, N, D, H, W, ca, cb, cout, "conv3d backward");
    if (rc)
        return rc;
    if (k.np == 2)
        return conv3d_backward_split(c, &k, din, dinB, dw, dout, inA, ca, inB, cb, wp, cout, P);
    const void *x;
    if ((rc = conv3d_input(c, &k.pl, inA, ca, inB, cb, P, &x)))
        return rc;
    const void *dy = dout;
    if (c->bf16) {
        void *d16 = cu_ws_at(c, &k.pl, 2);
        CU_TRY(cuk_gather(c->stream, d16, 1, dout, cout, cout, NULL, 0, 0, P));
        dy = d16;
    }
    void *dW = cu_ws_at(c, &k.pl, 1);
    if ((rc = conv_run(c, k.slot[0], CU_OP_BWD_FILTER, x, dy, dW, 0)))
        return rc;
    CU_TRY(cuk_unpack_add(c->stream, dw, dW, c->bf16, cout, cin, 27, cin));
    if (!din && !dinB)
        return 0;
    /* cuDNN writes the whole input gradient: into din itself (fp32, one destination), else into
     * the workspace (bf16: region 3; fp32: region 0, whose x the backward-filter queued above
     * has read), then split and converted. */
    const int split = dinB != NULL;
    void *dx = c->bf16 ? cu_ws_at(c, &k.pl, 3) : split ? cu_ws_at(c, &k.pl, 0) : (void *)din;
    if ((rc = conv_run(c, k.slot[0], CU_OP_BWD_DATA, wp, dy, dx, 0)))
        return rc;
    if (c->bf16 || split)
        CU_TRY(cuk_split(c->stream, din, split ? ca : cin, dinB, split ? cb : 0, dx, c->bf16, P));
    return 0;
}

/* ---- ConvTranspose3d k2 s2 ------------------------------------------------------------------ */

static int convt3d_begin(cu_ctx *c, cu_ws_plan *pl, int *slot, int N, int D, int H, int W,
                         int cin, int cout, const char *op) {
    int rc = cu_check_conv_shape(N, D, H, W, cin, cout, 1);
    if (rc)
        return rc;
    cu_convt3d_ws_plan(pl, N, D, H, W, cin, cout, c->bf16);
    if ((rc = cu_ws_check(c, pl, op)))
        return rc;
    const cu_conv_key k = {2, c->bf16, N, cout, 2 * D, 2 * H, 2 * W, cin};
    return cu_conv_slot(c, &k, slot);
}

/* The transposed convolution's input in the compute type. */
static int convt3d_input(cu_ctx *c, const cu_ws_plan *pl, const float *in, int cin, long long P,
                         const void **x) {
    *x = in;
    if (!c->bf16)
        return 0;
    void *x16 = cu_ws_at(c, pl, 1);
    CU_TRY(cuk_gather(c->stream, x16, 1, in, cin, cin, NULL, 0, 0, P));
    *x = x16;
    return 0;
}

int cu_convt3d_forward(cu_ctx *c, float *out, const float *in, const void *wp, const float *b,
                       int cin, int cout, int N, int D, int H, int W) {
    const long long P = (long long)N * D * H * W, Po = 8 * P;
    cu_ws_plan pl;
    int slot, rc = convt3d_begin(c, &pl, &slot, N, D, H, W, cin, cout, "convtranspose3d forward");
    const void *x;
    if (rc || (rc = convt3d_input(c, &pl, in, cin, P, &x)))
        return rc;
    void *y = c->bf16 ? cu_ws_at(c, &pl, 3) : (void *)out;
    if ((rc = conv_run(c, slot, CU_OP_BWD_DATA, wp, x, y, 0)))
        return rc;
    /* + bias, in place for fp32; bf16 rounds the biased output as autocast's bf16 add does */
    CU_TRY(cuk_convert(c->stream, out, y, c->bf16, b, cout, Po * cout, 0, c->bf16));
    return 0;
}

int cu_convt3d_backward(cu_ctx *c, float *din, float *dw, float *db, const float *dout, long ldo,
                        const float *in, const void *wp, int cin, int cout, int N, int D, int H,
                        int W) {
    const long long P = (long long)N * D * H * W, Po = 8 * P;
    cu_ws_plan pl;
    int slot, rc = convt3d_begin(c, &pl, &slot, N, D, H, W, cin, cout, "convtranspose3d backward");
    const void *xin; /* the transposed convolution's input: cuDNN's dy */
    if (rc || (rc = convt3d_input(c, &pl, in, cin, P, &xin)))
        return rc;
    /* dout packed to cout values per voxel in the compute type */
    const void *g = dout;
    if (ldo != cout || c->bf16) {
        void *gp = cu_ws_at(c, &pl, 0);
        CU_TRY(cuk_gather(c->stream, gp, c->bf16, dout, ldo, cout, NULL, 0, 0, Po));
        g = gp;
    }
    if (db) {
        double *part = cu_ws_at(c, &pl, 4), *sums = cu_ws_at(c, &pl, 5);
        CU_TRY(cuk_chan_sums(c->stream, sums, part, CUK_SUM, dout, ldo, NULL, NULL, NULL, NULL,
                             NULL, 0, 1, Po, cout, cu_slices((long)Po)));
        CU_TRY(cuk_add_sums(c->stream, db, sums, cout, c->bf16));
    }
    void *dW = cu_ws_at(c, &pl, 2);
    if ((rc = conv_run(c, slot, CU_OP_BWD_FILTER, g, xin, dW, 0)))
        return rc;
    CU_TRY(cuk_unpack_add(c->stream, dw, dW, c->bf16, cin, cout, 8, cout));
    if (!din)
        return 0;
    void *dx = c->bf16 ? cu_ws_at(c, &pl, 3) : (void *)din;
    if ((rc = conv_run(c, slot, CU_OP_FWD, g, wp, dx, 0)))
        return rc;
    if (c->bf16)
        CU_TRY(cuk_convert(c->stream, din, dx, 1, NULL, cin, P * cin, 0, 0));
    return 0;
}

/* ---- Conv3d k1 + bias on cuBLAS ------------------------------------------------------------------
 * Row-major (P, c) activations are column-major (c, P) matrices: out^T = w * in^T, i.e.
 * out (cout x P) = w^T(cin x cout)^T in (cin x P); din (cin x P) = w (cin x cout) dout (cout x P);
 * dw (cin x cout) += in (cin x P) dout^T (P x cout). */

static int gemm(cu_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                const void *A, int lda, const void *B, int ldb, float beta, float *C, int ldc) {
    const float one = 1.0f;
    const cudaDataType_t t = c->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    BLAS_TRY(cublasGemmEx(c->blas, ta, tb, m, n, k, &one, A, t, lda, B, t, ldb, &beta, C,
                          CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

static int conv1_begin(cu_ctx *c, cu_ws_plan *pl, long P, int cin, int cout, const char *op) {
    if (P < 1 || P > 2147483647L || cin < 1 || cout < 1)
        return err_set(ERR_CONFIG, "%s: %ld voxels x %d -> %d channels: cuBLAS needs 1..2^31-1 "
                                   "voxels per call", op, P, cin, cout);
    cu_conv1_ws_plan(pl, P, cin, cout, c->bf16);
    return cu_ws_check(c, pl, op);
}

int cu_conv1_forward(cu_ctx *c, float *out, const float *in, const float *w, const float *b,
                     int cin, int cout, long P) {
    cu_ws_plan pl;
    int rc = conv1_begin(c, &pl, P, cin, cout, "conv1 forward");
    if (rc)
        return rc;
    const void *A = w, *B = in;
    float *C = out;
    if (c->bf16) {
        void *in16 = cu_ws_at(c, &pl, 0), *w16 = cu_ws_at(c, &pl, 2);
        CU_TRY(cuk_gather(c->stream, in16, 1, in, cin, cin, NULL, 0, 0, P));
        CU_TRY(cuk_gather(c->stream, w16, 1, w, cin, cin, NULL, 0, 0, cout));
        A = w16;
        B = in16;
        C = cu_ws_at(c, &pl, 3);
    }
    if ((rc = gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, cout, (int)P, cin, A, cin, B, cin, 0.0f, C, cout)))
        return rc;
    CU_TRY(cuk_convert(c->stream, out, C, 0, b, cout, (long long)P * cout, 0, c->bf16));
    return 0;
}

int cu_conv1_backward(cu_ctx *c, float *din, float *dw, float *db, const float *dout,
                      const float *in, const float *w, int cin, int cout, long P) {
    cu_ws_plan pl;
    int rc = conv1_begin(c, &pl, P, cin, cout, "conv1 backward");
    if (rc)
        return rc;
    if (db) {
        double *part = cu_ws_at(c, &pl, 5), *sums = cu_ws_at(c, &pl, 6);
        CU_TRY(cuk_chan_sums(c->stream, sums, part, CUK_SUM, dout, cout, NULL, NULL, NULL, NULL,
                             NULL, 0, 1, P, cout, cu_slices(P)));
        CU_TRY(cuk_add_sums(c->stream, db, sums, cout, c->bf16));
    }
    if (!c->bf16) {
        if ((rc = gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, cin, cout, (int)P, in, cin, dout, cout, 1.0f,
                       dw, cin)))
            return rc;
        if (din && (rc = gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, cin, (int)P, cout, w, cin, dout, cout,
                              0.0f, din, cin)))
            return rc;
        return 0;
    }
    void *in16 = cu_ws_at(c, &pl, 0), *d16 = cu_ws_at(c, &pl, 1), *w16 = cu_ws_at(c, &pl, 2);
    float *r32 = cu_ws_at(c, &pl, 3), *dw32 = cu_ws_at(c, &pl, 4);
    CU_TRY(cuk_gather(c->stream, in16, 1, in, cin, cin, NULL, 0, 0, P));
    CU_TRY(cuk_gather(c->stream, d16, 1, dout, cout, cout, NULL, 0, 0, P));
    if ((rc = gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, cin, cout, (int)P, in16, cin, d16, cout, 0.0f,
                   dw32, cin)))
        return rc;
    CU_TRY(cuk_convert(c->stream, dw, dw32, 0, NULL, cin, (long long)cin * cout, 1, 1));
    if (!din)
        return 0;
    CU_TRY(cuk_gather(c->stream, w16, 1, w, cin, cin, NULL, 0, 0, cout));
    if ((rc = gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, cin, (int)P, cout, w16, cin, d16, cout, 0.0f, r32,
                   cin)))
        return rc;
    CU_TRY(cuk_convert(c->stream, din, r32, 0, NULL, cin, (long long)P * cin, 0, 1));
    return 0;
}
