/* kern_wino16: the transforms of winograd-bf16 (algo.h; conv.c drives them), included by
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

/* nearest bf16 of each lane, as the upper halves (ties to even; a NaN may turn infinite) */
typedef uint16_t kt_vh __attribute__((vector_size(KT_VW * sizeof(uint16_t)), aligned(2),
                                      may_alias));

static inline __attribute__((always_inline)) void kw_store16(uint16_t *p, kt_vf v, int n) {
    kt_vu u = (kt_vu)kt_round_bf16(v) >> 16;
    const kt_vh h = __builtin_convertvector(u, kt_vh);
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

/* V[xi * ldv + k] = bf16((B^T d B)[xi]), as kt_wino_in with kw_bt4 along y and x */
static inline __attribute__((always_inline)) void kw_wi_vec(uint16_t *V, long ldv, const float *P,
                                                            long plane, long row, long C, int nk) {
    kt_vf t[4][6][6];
    for (int a = 0; a < 4; a++) {
        for (int b = 0; b < 6; b++) {
            kt_vf d[6];
            for (int c = 0; c < 6; c++)
                d[c] = kt_load_n(P + a * plane + b * row + c * C, nk);
            kw_bt4(t[a][b], d);
        }
        for (int c = 0; c < 6; c++) {
            kt_vf d[6], r[6];
            for (int b = 0; b < 6; b++)
                d[b] = t[a][b][c];
            kw_bt4(r, d);
            for (int b = 0; b < 6; b++)
                t[a][b][c] = r[b];
        }
    }
    for (int b = 0; b < 6; b++)
        for (int c = 0; c < 6; c++) {
            const kt_vf r[4] = {t[0][b][c] - t[2][b][c], t[1][b][c] + t[2][b][c],
                                t[2][b][c] - t[1][b][c], t[1][b][c] - t[3][b][c]};
            for (int a = 0; a < 4; a++)
                kw_store16(V + (a * 36 + b * 6 + c) * ldv, r[a], nk);
        }
}

static void kw_wino_in16(uint16_t *V, long ldv, const float *P, long plane, long row, long vox,
                         int C) {
    int k0 = 0;
    for (; k0 + KT_VW <= C; k0 += KT_VW)
        kw_wi_vec(V + k0, ldv, P + k0, plane, row, vox, KT_VW);
    if (k0 < C)
        kw_wi_vec(V + k0, ldv, P + k0, plane, row, vox, C - k0);
}

static inline __attribute__((always_inline)) void kw_wo_vec(float *out, long oplane, long orow,
                                                            long ncol, const float *M, long ldm,
                                                            int nc) {
    kt_vf f[4][4][4];
    for (int a = 0; a < 4; a++) {
        kt_vf e[6][4];
        for (int b = 0; b < 6; b++) {
            kt_vf m[6];
            for (int c = 0; c < 6; c++)
                m[c] = KT_LOAD(M + (a * 36 + b * 6 + c) * ldm);
            kw_at4(e[b], m);
        }
        for (int c = 0; c < 4; c++) {
            kt_vf m[6], o[4];
            for (int b = 0; b < 6; b++)
                m[b] = e[b][c];
            kw_at4(o, m);
            for (int b = 0; b < 4; b++)
                f[a][b][c] = o[b];
        }
    }
    for (int b = 0; b < 4; b++)
        for (int c = 0; c < 4; c++) {
            const kt_vf r[2] = {f[0][b][c] + f[1][b][c] + f[2][b][c],
                                f[1][b][c] - f[2][b][c] - f[3][b][c]};
            for (int a = 0; a < 2; a++)
                kt_store_n(out + a * oplane + b * orow + c * ncol, r[a], nc);
        }
}

static void kw_wino_out16(float *out, long oplane, long orow, long ovox, int ncol, const float *M,
                          long ldm) {
    int c0 = 0;
    for (; c0 + KT_VW <= ncol; c0 += KT_VW)
        kw_wo_vec(out + c0, oplane, orow, ovox, M + c0, ldm, KT_VW);
    if (c0 < ncol)
        kw_wo_vec(out + c0, oplane, orow, ovox, M + c0, ldm, ncol - c0);
}

/* Stores the bf16 of v's lanes as one half of n 32-bit words at p (a tile pair's layout: the
 * even tile in the low halves, the odd one in the high halves): the even tile writes whole
 * words (its partner's half zero, which an odd tile count leaves as the padding), the odd
 * one merges its half into them, so the even tile of a pair must be stored first. */
static inline __attribute__((always_inline)) void kw_store_pair(uint32_t *p, kt_vf v, int n,
                                                                int odd) {
    const kt_vu h = (kt_vu)kt_round_bf16(v) & 0xffff0000u;
    uint32_t *q = p;
    if (n == KT_VW) {
        kt_vu r = h >> 16;
        if (odd) {
            memcpy(&r, q, sizeof r);
            r = (r & 0xffffu) | h;
        }
        memcpy(q, &r, sizeof r);
    } else {
        for (int k = 0; k < n; k++)
            q[k] = odd ? (q[k] & 0xffffu) | h[k] : h[k] >> 16;
    }
}

/* The weight gradient's input transform: as kw_wino_in16, into the tile-pair layout (channel k
 * of the tile at word V[xi * ldv + k], the tile's half by `odd`). */
static void kw_wino_in16p(uint32_t *V, long ldv, const float *P, long plane, long row, long vox,
                          int C, int odd) {
    for (int k0 = 0; k0 < C; k0 += KT_VW) {
        const int nk = C - k0 < KT_VW ? C - k0 : KT_VW;
        kt_vf t[4][6][6];
        for (int a = 0; a < 4; a++) {
            for (int b = 0; b < 6; b++) {
                kt_vf d[6];
                for (int c = 0; c < 6; c++)
                    d[c] = kt_load_n(P + k0 + a * plane + b * row + c * vox, nk);
                kw_bt4(t[a][b], d);
            }
            for (int c = 0; c < 6; c++) {
                kt_vf d[6], r[6];
                for (int b = 0; b < 6; b++)
                    d[b] = t[a][b][c];
                kw_bt4(r, d);
                for (int b = 0; b < 6; b++)
                    t[a][b][c] = r[b];
            }
        }
        for (int b = 0; b < 6; b++)
            for (int c = 0; c < 6; c++) {
                const kt_vf r[4] = {t[0][b][c] - t[2][b][c], t[1][b][c] + t[2][b][c],
                                    t[2][b][c] - t[1][b][c], t[1][b][c] - t[3][b][c]};
                for (int a = 0; a < 4; a++)
                    kw_store_pair(V + (a * 36 + b * 6 + c) * ldv + k0, r[a], nk, odd);
            }
    }
}

/* dM = A dY A^T (kw_a4 along x and y, F(2,3)'s adjoint along z) of the 2x4x4 block at dy,
 * rounded to bf16 into the tile-pair layout: column j at word Mo[xi * ldm + j], j < ncp
 * (a multiple of the vector width), zero past ncol. */
static void kw_wino_gout16p(uint32_t *Mo, long ldm, const float *dy, long plane, long row,
                            long ldy, int ncol, int ncp, int odd) {
    for (int c0 = 0; c0 < ncp; c0 += KT_VW) {
        const int nc = ncol - c0 >= KT_VW ? KT_VW : ncol > c0 ? ncol - c0 : 0;
        kt_vf h[2][6][6];
        for (int a = 0; a < 2; a++) {
            kt_vf g[4][6];
            for (int b = 0; b < 4; b++) {
                kt_vf y[4];
                for (int c = 0; c < 4; c++)
                    y[c] = kt_load_n(dy + a * plane + b * row + c * ldy + c0, nc);
                kw_a4(g[b], y);
            }
            for (int c = 0; c < 6; c++) {
                kt_vf y[4], r[6];
                for (int b = 0; b < 4; b++)
                    y[b] = g[b][c];
                kw_a4(r, y);
                for (int b = 0; b < 6; b++)
                    h[a][b][c] = r[b];
            }
        }
        for (int b = 0; b < 6; b++)
            for (int c = 0; c < 6; c++) {
                const kt_vf r[4] = {h[0][b][c], h[0][b][c] + h[1][b][c], h[0][b][c] - h[1][b][c],
                                    -h[1][b][c]};
                for (int a = 0; a < 4; a++)
                    kw_store_pair(Mo + (a * 36 + b * 6 + c) * ldm + c0, r[a], KT_VW, odd);
            }
    }
}

/* dst[j] = bf16(s0[j]) | bf16(s1[j]) << 16 (s1 NULL: zero high halves), j < n (whole vectors:
 * a multiple of the vector width): two k rows of transformed weights as vdpbf16ps pairs. */
static void kw_pack_pairs(uint32_t *dst, const float *s0, const float *s1, int n) {
    for (int j = 0; j < n; j += KT_VW) {
        kt_vu r = (kt_vu)kt_round_bf16(KT_LOAD(s0 + j)) >> 16;
        if (s1)
            r |= (kt_vu)kt_round_bf16(KT_LOAD(s1 + j)) & 0xffff0000u;
        memcpy(dst + j, &r, sizeof r);
    }
}

/* U = G g G^T as kt_wino_w with kw_g6 along x and y (fp32; the caller rounds it into pairs) */
static void kw_wino_w16(float *u, long su, const float *w, long sc, int flip, int nc) {
    float g[27 * KT_VW];
    for (int v = 0; v < KT_VW; v++)
        for (int t = 0; t < 27; t++)
            g[t * KT_VW + v] = v < nc ? w[v * sc + (flip ? 26 - t : t)] : 0.0f;
    kt_vf a[3][3][6];
    for (int z = 0; z < 3; z++)
        for (int y = 0; y < 3; y++) {
            const float *p = g + (z * 9 + y * 3) * KT_VW;
            kw_g6(a[z][y], KT_LOAD(p), KT_LOAD(p + KT_VW), KT_LOAD(p + 2 * KT_VW));
        }
    for (int c = 0; c < 6; c++) {
        kt_vf b[3][6];
        for (int z = 0; z < 3; z++)
            kw_g6(b[z], a[z][0][c], a[z][1][c], a[z][2][c]);
        for (int bb = 0; bb < 6; bb++) {
            const kt_vf g0 = b[0][bb], g1 = b[1][bb], g2 = b[2][bb];
            const kt_vf r[4] = {g0, 0.5f * (g0 + g1 + g2), 0.5f * (g0 - g1 + g2), g2};
            for (int aa = 0; aa < 4; aa++)
                KT_STORE(u + (aa * 36 + bb * 6 + c) * su, r[aa]);
        }
    }
}

/* G^T dU G with kw_gt6, as kt_wino_wgt */
static void kw_wino_wgt16(float *d, const float *u, long su) {
    kt_vf a[4][6][3];
    for (int aa = 0; aa < 4; aa++)
        for (int bb = 0; bb < 6; bb++) {
            kt_vf m[6];
            for (int c = 0; c < 6; c++)
                m[c] = KT_LOAD(u + (aa * 36 + bb * 6 + c) * su);
            kw_gt6(a[aa][bb], m);
        }
    for (int x = 0; x < 3; x++) {
        kt_vf b[4][3];
        for (int aa = 0; aa < 4; aa++) {
            kt_vf m[6];
            for (int bb = 0; bb < 6; bb++)
                m[bb] = a[aa][bb][x];
            kw_gt6(b[aa], m);
        }
        for (int y = 0; y < 3; y++) {
            const kt_vf u0 = b[0][y], u1 = b[1][y], u2 = b[2][y], u3 = b[3][y];
            const kt_vf s12 = u1 + u2;
            KT_STORE(d + (0 * 9 + y * 3 + x) * KT_VW, u0 + 0.5f * s12);
            KT_STORE(d + (1 * 9 + y * 3 + x) * KT_VW, 0.5f * (u1 - u2));
            KT_STORE(d + (2 * 9 + y * 3 + x) * KT_VW, 0.5f * s12 + u3);
        }
    }
}
