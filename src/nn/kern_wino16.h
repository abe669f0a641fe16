/* kern_wino16: the transforms of winograd-bf16 (algo.h; conv_wino.c drives them), included by
 * kern_tmpl.h and so compiled once per instruction set like the fp32 ones.
 *
 * The tile is fp32 Winograd's (2 x 4 x 4 outputs, F(2,3) along z and F(4,3) along y and x), but
 * F(4,3) takes the points 0, +-3/2, +-2/3 (and infinity) instead of 0, +-1, +-2. The
 * transformed operands are rounded to bf16 for vdpbf16ps, a relative error of 2^-9 each, which
 * the output transform amplifies by the size of its coefficients: with +-2 (coefficients up to
 * 8) a 64-channel layer's result was off the one-rounding result by 2.7% of its norm and 6-9%
 * of its largest value (simulated in double), with +-3/2 and +-2/3 (up to 3.4) by 1.2-1.5% and
 * 1.8-2.4%, the best of the symmetric sets of simple points tried.
 * For points {0, +-a, +-b} (M(x) = x (x^2 - a^2)(x^2 - b^2)):
 *   B^T rows [a^2 b^2, 0, -(a^2 + b^2), 0, 1, 0], [0, -+a b^2, -b^2, +-a, 1, 0],
 *            [0, -+a^2 b, -a^2, +-b, 1, 0], [0, a^2 b^2, 0, -(a^2 + b^2), 0, 1];
 *   A^T rows [1 1 1 1 1 0], [0 a -a b -b 0], [0 a^2 a^2 b^2 b^2 0], [0 a^3 -a^3 b^3 -b^3 1];
 *   G rows [1, 0, 0] / (a^2 b^2), [1, +-a, a^2] / (2 a^2 (a^2 - b^2)),
 *          [1, +-b, b^2] / (2 b^2 (b^2 - a^2)), [0, 0, 1].
 * (a = 1, b = 2 gives kern_tmpl.h's transforms.) */

#define KW_A 1.5f
#define KW_B (2.0f / 3.0f)
#define KW_A2 (KW_A * KW_A)
#define KW_B2 (KW_B * KW_B)
#define KW_AB2 (KW_A2 * KW_B2)

/* one vector's bf16 values, packed (16-bit lanes) */
typedef uint16_t kt_vh __attribute__((vector_size(KT_VW * sizeof(uint16_t)), aligned(2),
                                      may_alias));

/* The nearest bf16 of each lane: packed (kw_cvt16), or in the lower (kw_lo16) or upper
 * (kw_hi16) halves of 32-bit words, the other half zero. Where the includer has a conversion
 * instruction (KT_CVTBF16: vcvtneps2bf16 on AVX512_BF16, which also flushes denormal inputs to
 * zero and keeps NaNs quiet), that one instruction; else the integer rounding (five operations
 * per vector, as many as the transform's own arithmetic per stored value). */
#ifdef KT_CVTBF16
static inline __attribute__((always_inline)) kt_vh kw_cvt16(kt_vf v) {
    return (kt_vh)KT_CVTBF16(v);
}
static inline __attribute__((always_inline)) kt_vu kw_lo16(kt_vf v) {
    return __builtin_convertvector(kw_cvt16(v), kt_vu);
}
static inline __attribute__((always_inline)) kt_vu kw_hi16(kt_vf v) {
    return kw_lo16(v) << 16;
}
#else
static inline __attribute__((always_inline)) kt_vu kw_lo16(kt_vf v) {
    return (kt_vu)kt_round_bf16(v) >> 16;
}
static inline __attribute__((always_inline)) kt_vh kw_cvt16(kt_vf v) {
    return __builtin_convertvector(kw_lo16(v), kt_vh);
}
static inline __attribute__((always_inline)) kt_vu kw_hi16(kt_vf v) {
    return (kt_vu)kt_round_bf16(v) & 0xffff0000u;
}
#endif

static inline __attribute__((always_inline)) void kw_store16(uint16_t *p, kt_vf v, int n) {
    const kt_vh h = kw_cvt16(v);
    if (n == KT_VW)
        *(kt_vh *)p = h;
    else
        for (int k = 0; k < n; k++)
            p[k] = h[k];
}

static inline __attribute__((always_inline)) void kw_bt4(kt_vf r[6], const kt_vf d[6]) {
    const kt_vf t1 = d[4] - KW_B2 * d[2], t2 = KW_A * (d[3] - KW_B2 * d[1]);
    const kt_vf t3 = d[4] - KW_A2 * d[2], t4 = KW_B * (d[3] - KW_A2 * d[1]);
    r[0] = KW_AB2 * d[0] - (KW_A2 + KW_B2) * d[2] + d[4];
    r[1] = t1 + t2;
    r[2] = t1 - t2;
    r[3] = t3 + t4;
    r[4] = t3 - t4;
    r[5] = KW_AB2 * d[1] - (KW_A2 + KW_B2) * d[3] + d[5];
}

static inline __attribute__((always_inline)) void kw_at4(kt_vf o[4], const kt_vf m[6]) {
    const kt_vf s12 = m[1] + m[2], d12 = m[1] - m[2], s34 = m[3] + m[4], d34 = m[3] - m[4];
    o[0] = m[0] + s12 + s34;
    o[1] = KW_A * d12 + KW_B * d34;
    o[2] = KW_A2 * s12 + KW_B2 * s34;
    o[3] = (KW_A2 * KW_A) * d12 + (KW_B2 * KW_B) * d34 + m[5];
}

/* the adjoint of kw_at4 (the weight gradient's output-gradient transform) */
static inline __attribute__((always_inline)) void kw_a4(kt_vf r[6], const kt_vf y[4]) {
    const kt_vf pa = y[0] + KW_A2 * y[2], qa = KW_A * y[1] + (KW_A2 * KW_A) * y[3];
    const kt_vf pb = y[0] + KW_B2 * y[2], qb = KW_B * y[1] + (KW_B2 * KW_B) * y[3];
    r[0] = y[0];
    r[1] = pa + qa;
    r[2] = pa - qa;
    r[3] = pb + qb;
    r[4] = pb - qb;
    r[5] = y[3];
}

#define KW_NA (1.0f / (2.0f * KW_A2 * (KW_A2 - KW_B2)))
#define KW_NB (1.0f / (2.0f * KW_B2 * (KW_B2 - KW_A2)))

static inline __attribute__((always_inline)) void kw_g6(kt_vf r[6], kt_vf g0, kt_vf g1,
                                                         kt_vf g2) {
    const kt_vf ea = g0 + KW_A2 * g2, oa = KW_A * g1, eb = g0 + KW_B2 * g2, ob = KW_B * g1;
    r[0] = (1.0f / KW_AB2) * g0;
    r[1] = KW_NA * (ea + oa);
    r[2] = KW_NA * (ea - oa);
    r[3] = KW_NB * (eb + ob);
    r[4] = KW_NB * (eb - ob);
    r[5] = g2;
}

/* G^T of kw_g6 (6 points -> 3 taps) */
static inline __attribute__((always_inline)) void kw_gt6(kt_vf w[3], const kt_vf u[6]) {
    const kt_vf sa = KW_NA * (u[1] + u[2]), da = KW_NA * (u[1] - u[2]);
    const kt_vf sb = KW_NB * (u[3] + u[4]), db = KW_NB * (u[3] - u[4]);
    w[0] = (1.0f / KW_AB2) * u[0] + sa + sb;
    w[1] = KW_A * da + KW_B * db;
    w[2] = KW_A2 * sa + KW_B2 * sb + u[5];
}

/* Stores the bf16 of v's lanes as one half of n 32-bit words at p (a tile pair's layout: the
 * even tile in the low halves, the odd one in the high halves): the even tile writes whole
 * words (its partner's half zero, which an odd tile count leaves as the padding), the odd
 * one merges its half into them, so the even tile of a pair must be stored first. */
static inline __attribute__((always_inline)) void kw_store_pair(uint32_t *p, kt_vf v, int n,
                                                                int odd) {
    const kt_vu h = odd ? kw_hi16(v) : kw_lo16(v);
    uint32_t *q = p;
    if (n == KT_VW) {
        kt_vu r = h;
        if (odd) {
            memcpy(&r, q, sizeof r);
            r = (r & 0xffffu) | h;
        }
        memcpy(q, &r, sizeof r);
    } else {
        for (int k = 0; k < n; k++)
            q[k] = odd ? (q[k] & 0xffffu) | h[k] : h[k];
    }
}

