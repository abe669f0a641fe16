/* bf16: rounding to bf16 values in place (kernels.cu: k_convert with rounding), and the bf16
 * storage of tensors that hold bf16 values (k_narrow, k_widen: a bf16 model's down-block
 * convolution outputs kept in half the memory).
 *   CPU reference: nn_round_bf16, nn_bf16_narrow, nn_bf16_widen; rounding checked against
 *                  round-to-nearest-even written with integer arithmetic here (NaN stays a quiet
 *                  NaN, infinities stay, ties to even), storage against the round trip.
 *   v1: cu_round_bf16, cu_bf16_narrow, cu_bf16_widen.
 * Tolerance: exact (bit for bit), but for the GPU's rounding of a NaN: the GPU's conversion
 * (cvt.rn.bf16.f32) makes every NaN the canonical one, the CPU keeps its sign and upper payload,
 * so there a NaN must stay a NaN (kh_check with zero tolerance). The input mixes ordinary
 * values, exact ties, denormals, infinities and NaN. Shape: 64^3 x 128 values; --quick 4096. Bytes: round reads and writes
 * 4 bytes per value, narrow reads 4 and writes 2, widen the reverse. */
#include "kh.h"
#include "nn/layers.h"

typedef struct bf {
    float *x, *w;
    uint16_t *h16;
    const float *x0;
    size_t n;
} bf;

static float rne(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        u = (u | 0x00400000u) & 0xffff0000u; /* quiet NaN */
    } else {
        const uint32_t low = u & 0xffffu, keep = u & 0xffff0000u;
        const int up = low > 0x8000u || (low == 0x8000u && (keep & 0x10000u));
        u = keep + (up ? 0x10000u : 0);
    }
    memcpy(&f, &u, 4);
    return f;
}

#if KH_GPU
static int round_v1(kh *h, void *arg) {
    bf *a = arg;
    return cu_round_bf16(h->ctx, a->x, a->n);
}
static int narrow_v1(kh *h, void *arg) {
    bf *a = arg;
    return cu_bf16_narrow(h->ctx, a->h16, a->w, a->n);
}
static int widen_v1(kh *h, void *arg) {
    bf *a = arg;
    return cu_bf16_widen(h->ctx, a->w, a->h16, a->n);
}
#endif

int main(int argc, char **argv) {
    kh h;
    kh_init(&h, "bf16", 1, argc, argv);
    const size_t n = h.quick ? 4096 : (size_t)64 * 64 * 64 * 128;
    kh_start(&h, 0, 0);
    kh_seed(19);
    float *x0 = kh_rand(n, 3, 0), *x = kh_alloc(n * 4), *ref = kh_alloc(n * 4);
    const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x00000001u, 0x80008000u, 0x7f800000u,
                                0xff800000u, 0x7fc00001u, 0x7f800001u, 0x7f7fffffu, 0x00018000u};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
        memcpy(&x0[i * 37], &special[i], 4);
    for (size_t i = 0; i < n; i++)
        ref[i] = rne(x0[i]);
    double t;
    KH_CPU_MS(&h, t, {
        memcpy(x, x0, n * 4);
        nn_round_bf16(x, n);
    });
    kh_same(&h, "cpu", "round to nearest even", x, ref, n * 4, t, 8.0 * n);
    uint16_t *h16 = kh_alloc(n * 2);
    float *w = kh_alloc(n * 4);
    double t2, t3;
    KH_CPU_MS(&h, t2, nn_bf16_narrow(h16, x, n));
    KH_CPU_MS(&h, t3, nn_bf16_widen(w, h16, n));
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        ok = h16[i] == (uint16_t)(u >> 16);
    }
    kh_row(&h, "cpu", "narrow: upper halves", "exact", !ok, !ok, ok, t2, 6.0 * n);
    kh_same(&h, "cpu", "widen: round trip", w, x, n * 4, t3, 6.0 * n);
#if KH_GPU
    if (kh_runs(&h, 1)) {
        bf a = {kh_dev(&h, x0, n * 4), kh_dev(&h, NULL, n * 4), kh_dev(&h, NULL, n * 2), x0, n};
        kh_run(&h, round_v1, &a, "v1 round");
        float *g = kh_host(&h, a.x, n * 4);
        kh_check(&h, "v1", "round to nearest even", g, x, n, 0, 0, kh_bench(&h, round_v1, &a),
                 8.0 * n);
        kh_put(&h, a.w, x, n * 4);
        kh_run(&h, narrow_v1, &a, "v1 narrow");
        uint16_t *g16 = kh_host(&h, a.h16, n * 2);
        kh_same(&h, "v1", "narrow: upper halves", g16, h16, n * 2, kh_bench(&h, narrow_v1, &a),
                6.0 * n);
        if (cu_zero(h.ctx, a.w, n * 4))
            kh_die("zero");
        kh_run(&h, widen_v1, &a, "v1 widen");
        float *gw = kh_host(&h, a.w, n * 4);
        kh_same(&h, "v1", "widen: round trip", gw, x, n * 4, kh_bench(&h, widen_v1, &a), 6.0 * n);
        free(g), free(g16), free(gw);
    }
#endif
    free(x0), free(x), free(ref), free(h16), free(w);
    return kh_finish(&h);
}
