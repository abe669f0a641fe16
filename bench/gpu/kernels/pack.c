/* pack: convolution weights between PyTorch's layout and cuDNN's (kernels.cu: k_pack,
 * k_unpack_add), once per optimizer step per weight and once per weight gradient.
 *   Reference: the permutation written out here (the CPU engine repacks inside its
 *              convolutions and has no separate function): Conv3d (cout, cin, 27) -> per part
 *              of cu_conv3d_parts (one, or two for the fp32 split skip) (cout, 27, C);
 *              ConvTranspose3d (cin, cout, 8) -> (cin, 8, cout); bf16 by round to nearest even.
 *              Its own check: unpacking (adding into zeros) gives the weights back exactly.
 *   v1: cu_pack_conv3d (split skip, gathered skip, bf16), cu_pack_convt3d, and cuk_unpack_add
 *       (the weight gradient's way back, adding into an accumulated gradient).
 * Tolerance: exact (permutations; bf16 rounding is deterministic). Shape: the scale-7 U-Net's
 * top up block, Conv3d 64 + 64 -> 64 and ConvTranspose3d 128 -> 64; --quick 8 + 8 -> 16 and
 * 16 -> 8. Bytes: read and write each weight (bf16 writes half). */
#include "kh.h"
#include "nn/layers.h"

#if KH_GPU
static cu_ctx *ctx16; /* the bf16 packings' context (the packed type is the context's) */
#endif

typedef struct pk {
    void *wp;
    float *dw;
    const float *w;
    const void *dW;
    int cout, ca, cb, k, bf16;
} pk;

/* The packed layout as cu.h documents it (cu_conv3d_parts): the input channels in one part, or,
 * for the fp32 split skip, two parts one after the other, each (K, S, its channels). */
typedef struct part {
    int c0, C;
    size_t w_off;
} part_t;
static int parts(int split, int bf16, int ca, int cb, int K, part_t *p) {
    if (split && !bf16 && cb > 0) {
        p[0] = (part_t){0, ca, 0};
        p[1] = (part_t){ca, cb, (size_t)27 * ca * K};
        return 2;
    }
    p[0] = (part_t){0, ca + cb, 0};
    return 1;
}

/* The reference packing into dst (elements of 4 bytes or, bf16, the upper halves of rounded
 * floats) for a Conv3d with the given parts, or a ConvTranspose3d (k = 2: K = cin, C = cout). */
static void ref_pack(uint32_t *dst, const float *w, int K, int C, int S, const part_t *part,
                     int np, int bf16) {
    for (int q = 0; q < np; q++)
        for (int k = 0; k < K; k++)
            for (int s = 0; s < S; s++)
                for (int c = 0; c < part[q].C; c++) {
                    float v = w[((size_t)k * C + part[q].c0 + c) * S + s];
                    uint32_t u;
                    if (bf16)
                        v = nn_bf16_round(v);
                    memcpy(&u, &v, 4);
                    dst[part[q].w_off + ((size_t)k * S + s) * part[q].C + c] = bf16 ? u >> 16 : u;
                }
}

#if KH_GPU
static int pack_v1(kh *h, void *arg) {
    pk *a = arg;
    return a->k == 3 ? cu_pack_conv3d(h->ctx, a->wp, a->w, a->cout, a->ca, a->cb)
                     : cu_pack_convt3d(h->ctx, a->wp, a->w, a->ca, a->cout);
}
static int unpack_v1(kh *h, void *arg) {
    pk *a = arg;
    const int K = a->k == 3 ? a->cout : a->ca, C = a->k == 3 ? a->ca + a->cb : a->cout;
    cudaError_t e = cuk_unpack_add(h->ctx->stream, a->dw, a->dW, 0, K, C, a->k * a->k * a->k, C);
    return e == cudaSuccess ? 0 : cu_fail_cuda(e, "cuk_unpack_add", __FILE__, __LINE__);
}
#endif

/* One weight: k = 3 Conv3d (cout, ca + cb), split or gathered, or k = 2 ConvTranspose3d
 * (ca -> cout); bf16 packs for a bf16 context. */
static void one(kh *h, int k, int cout, int ca, int cb, int split, int bf16) {
    const int S = k * k * k, K = k == 3 ? cout : ca, C = k == 3 ? ca + cb : cout;
    const size_t nw = (size_t)K * C * S;
    part_t part[2];
    const int np = k == 3 ? parts(split, bf16, ca, cb, cout, part) : parts(0, 0, C, 0, K, part);
    char what[96];
    snprintf(what, sizeof what, "%s %d%s->%d %s%s", k == 3 ? "conv3d" : "convT", ca,
             cb ? "+skip" : "", cout, bf16 ? "bf16" : "fp32",
             k == 3 && cb && !bf16 ? (np == 2 ? " split" : " gathered") : "");
    kh_seed(13 + (uint64_t)k * 7 + (uint64_t)split * 3 + (uint64_t)bf16);
    float *w = kh_rand(nw, 0.1f, 0);
    uint32_t *ref = kh_alloc(nw * 4);
    ref_pack(ref, w, K, C, S, part, np, bf16);
    /* the reference's own check (fp32): unpack into zeros gives w back */
    if (!bf16) {
        float *back = kh_alloc(nw * 4);
        for (int q = 0; q < np; q++)
            for (int kk = 0; kk < K; kk++)
                for (int s = 0; s < S; s++)
                    for (int c = 0; c < part[q].C; c++) {
                        float v;
                        memcpy(&v, &ref[part[q].w_off + ((size_t)kk * S + s) * part[q].C + c], 4);
                        back[((size_t)kk * C + part[q].c0 + c) * S + s] += v;
                    }
        kh_same(h, "cpu", what, back, w, nw * 4, 0, 0);
        free(back);
    }
#if KH_GPU
    if (k == 3) { /* the product's plan of the parts is the one packed here */
        cu_conv_part cp[2];
        int same = cu_conv3d_parts(split, bf16, ca, cb, cout, cp) == np;
        for (int q = 0; q < np && same; q++)
            same = cp[q].c0 == part[q].c0 && cp[q].C == part[q].C && cp[q].w_off == part[q].w_off;
        char w3[120];
        snprintf(w3, sizeof w3, "%s: cu_conv3d_parts", what);
        kh_row(h, "cpu", w3, "exact", !same, !same, same, 0, 0);
    }
    if (kh_runs(h, 1)) {
        cu_ctx *fp32 = h->ctx;
        if (bf16)
            h->ctx = ctx16; /* every call below, timing included, on the bf16 context */
        cu_ctx_set_skip_split(h->ctx, split);
        pk a = {kh_dev(h, NULL, nw * 4), NULL, kh_dev(h, w, nw * 4), NULL, cout, ca, cb, k, bf16};
        kh_run(h, pack_v1, &a, "v1 pack");
        void *got = kh_host(h, a.wp, nw * (bf16 ? 2 : 4));
        uint16_t *ref16 = NULL;
        const void *want = ref;
        if (bf16) {
            ref16 = kh_alloc(nw * 2);
            for (size_t i = 0; i < nw; i++)
                ref16[i] = (uint16_t)ref[i];
            want = ref16;
        }
        kh_same(h, "v1", what, got, want, nw * (bf16 ? 2 : 4), kh_bench(h, pack_v1, &a),
                nw * (bf16 ? 6.0 : 8.0));
        free(got), free(ref16);
        if (!bf16 && np == 1) {
            /* the gradient's way back: dW (cuDNN layout) added into an accumulated gradient */
            float *dw0 = kh_rand(nw, 0.01f, 0), *want2 = kh_alloc(nw * 4);
            for (int kk = 0; kk < K; kk++)
                for (int s = 0; s < S; s++)
                    for (int c = 0; c < C; c++) {
                        float v;
                        const size_t i = ((size_t)kk * C + c) * S + s;
                        memcpy(&v, &ref[((size_t)kk * S + s) * C + c], 4);
                        want2[i] = dw0[i] + v;
                    }
            a.dw = kh_dev(h, dw0, nw * 4);
            a.dW = a.wp;
            kh_run(h, unpack_v1, &a, "v1 unpack");
            float *g2 = kh_host(h, a.dw, nw * 4);
            char w2[120];
            snprintf(w2, sizeof w2, "%s: unpack-add", what);
            kh_same(h, "v1", w2, g2, want2, nw * 4, kh_bench(h, unpack_v1, &a), nw * 12.0);
            free(dw0), free(want2), free(g2);
        }
        cu_ctx_set_skip_split(h->ctx, 1);
        h->ctx = fp32;
    }
#endif
    free(w), free(ref);
}

int main(int argc, char **argv) {
    kh h;
    kh_init(&h, "pack", 1, argc, argv);
    const int c = h.quick ? 8 : 64;
    kh_start(&h, 0, 0);
#if KH_GPU
    if (h.gpu && cu_ctx_create(&ctx16, 0, 1, 0, 0))
        kh_die("bf16 context");
#endif
    one(&h, 3, 2 * c, c, c, 1, 0); /* conv3d with the skip, split (fp32 default) */
    one(&h, 3, 2 * c, c, c, 0, 0); /* gathered */
    one(&h, 3, 2 * c, 2 * c, 0, 1, 0); /* no skip */
    one(&h, 3, 2 * c, c, c, 0, 1); /* bf16 */
    one(&h, 2, c, 2 * c, 0, 0, 0); /* ConvTranspose3d */
    one(&h, 2, c, 2 * c, 0, 0, 1);
#if KH_GPU
    if (ctx16) {
        cu_sync(ctx16);
        cu_ctx_free(ctx16);
    }
#endif
    return kh_finish(&h);
}
