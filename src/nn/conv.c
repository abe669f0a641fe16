/* conv: Conv3d (k3 p1), ConvTranspose3d (k2 s2) and the 1x1 output Conv3d, forward and backward,
 * on channels-last tensors, as implicit GEMMs over taps (gemm.h), plus naive references.
 *
 * Algorithm (chosen by measurement, see docs/nn.md): the input is copied once into a
 * zero-padded channels-last buffer (fusing the skip concatenation); then for a 3x3x3 kernel the
 * output row (n, z, y, 0..W) is sum over the 27 taps of (W x cin) x (cin x cout) products whose
 * A operand is the padded input row shifted by the tap, read in place. The input gradient is
 * the same computation on the padded output gradient with the transposed, flipped kernel. The
 * weight gradient reduces over voxels in chunks of rows that fit in L2, each thread owning a
 * disjoint set of (tap, cin block, cout block) tiles, so no per-thread copies or atomics. */
#include "nn/gemm.h"
#include "nn/layers.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

int nn_threads(void) {
    int t = omp_get_max_threads();
    return t > NN_MAX_THREADS ? NN_MAX_THREADS : (t < 1 ? 1 : t);
}

static int nblocks(int n, int nr) {
    return (n + nr - 1) / nr;
}

/* Balanced split of n into nb parts: start of part b. */
static int split_at(int n, int nb, int b) {
    return (int)(((long)n * b) / nb);
}

/* ---- packing ---------------------------------------------------------------------------- */

/* Bp[ob][t][k][j] = w(col = ob*nr + j, k, t) with w addressed as w[col*sc + k*sk + t*st];
 * zero for col >= ncol. */
static void pack_b(float *Bp, const float *w, int ncol, int K, int T, long sc, long sk, long st,
                   int nr) {
    const int nb = nblocks(ncol, nr);
#pragma omp parallel for collapse(2) schedule(static)
    for (int ob = 0; ob < nb; ob++)
        for (int t = 0; t < T; t++)
            for (int k = 0; k < K; k++) {
                float *dst = Bp + (((size_t)ob * T + t) * K + k) * nr;
                for (int j = 0; j < nr; j++) {
                    int col = ob * nr + j;
                    dst[j] = col < ncol ? w[col * sc + k * sk + t * st] : 0.0f;
                }
            }
}

/* Zero-padded copy: P (N, D+2, H+2, W+2, ca+cb) from a (N,D,H,W,ca) and b (N,D,H,W,cb).
 * a has `lda_` floats per voxel (>= ca). */
static void pad_copy(float *P, const float *a, long lda_, int ca, const float *b, int cb, int N,
                     int D, int H, int W) {
    const int C = ca + cb;
    const long Hp = H + 2, Wp = W + 2, Dp = D + 2;
#pragma omp parallel for collapse(3) schedule(dynamic, 8)
    for (int n = 0; n < N; n++)
        for (int zp = 0; zp < Dp; zp++)
            for (int yp = 0; yp < Hp; yp++) {
                float *row = P + (((size_t)n * Dp + zp) * Hp + yp) * Wp * C;
                if (zp == 0 || zp == D + 1 || yp == 0 || yp == H + 1) {
                    memset(row, 0, sizeof(float) * Wp * C);
                    continue;
                }
                memset(row, 0, sizeof(float) * C);
                memset(row + (Wp - 1) * C, 0, sizeof(float) * C);
                const size_t src = (((size_t)n * D + zp - 1) * H + yp - 1) * W;
                for (int x = 0; x < W; x++) {
                    float *dst = row + (size_t)(x + 1) * C;
                    memcpy(dst, a + (src + x) * lda_, sizeof(float) * ca);
                    if (cb)
                        memcpy(dst + ca, b + (src + x) * cb, sizeof(float) * cb);
                }
            }
}

static size_t padded_floats(int N, int D, int H, int W, int C) {
    return (size_t)N * (D + 2) * (H + 2) * (W + 2) * C;
}

static size_t packed_floats(int ncol, int K, int T) {
    int nr = nn_gemm_nr(ncol);
    return (size_t)nblocks(ncol, nr) * nr * K * T;
}

/* ---- weight-gradient driver --------------------------------------------------------------
 * dWp[t][k][ncolpad] += sum over rows r and x of A(r, t)[x*lda + k] * G(r, t)[x*ldg + j]
 * Rows are numbered 0..nrows-1; rowptr() gives the A and G row starts for (row, tap). */
typedef struct tw_rows {
    /* conv3d: A = padded input, G = dout */
    const float *A, *G;
    int kind; /* 0 = conv3d, 1 = convT */
    int D, H, W;
    int cin, cout;
    long ldg_vox; /* floats per voxel of G */
} tw_rows;

static void tw_rowptr(const tw_rows *r, long row, int t, const float **a, const float **g) {
    const int D = r->D, H = r->H, W = r->W;
    const long n = row / ((long)D * H), zy = row % ((long)D * H);
    const long z = zy / H, y = zy % H;
    if (r->kind == 0) {
        const int dz = t / 9, dy = (t / 3) % 3, dx = t % 3;
        const long Hp = H + 2, Wp = W + 2;
        *a = r->A + (((n * (D + 2) + z + dz) * Hp + y + dy) * Wp + dx) * r->cin;
        *g = r->G + row * W * r->ldg_vox;
    } else {
        const int az = t / 4, by = (t / 2) % 2, cx = t % 2;
        *a = r->A + row * W * r->cin;
        *g = r->G + (((n * 2 * D + 2 * z + az) * 2 * H + 2 * y + by) * 2 * W + cx) * r->ldg_vox;
    }
}

#define TW_CHUNK_MAX 64
#define DW_REPLICAS_MAX 8
#define DW_REPLICA_BUDGET (64u << 20) /* bytes of per-thread weight-gradient copies */

/* Per-thread weight-gradient copies used for a (T, K, ncol) gradient: as many as fit the budget
 * (at most DW_REPLICAS_MAX); 0 or 1 means "partition tiles instead". Depends only on the shape,
 * so workspace sizing and the call agree whatever the thread count. */
static int dw_replicas(int T, int K, int ncol) {
    const int nr = nn_gemm_nr(ncol);
    const size_t bytes = (size_t)T * K * nblocks(ncol, nr) * nr * sizeof(float);
    size_t r = DW_REPLICA_BUDGET / (bytes ? bytes : 1);
    /* SCAFFOLD_NN_DW_REPLICAS lowers the cap (tests use 0 to exercise the tile partition). */
    const char *env = getenv("SCAFFOLD_NN_DW_REPLICAS");
    size_t cap = env ? (size_t)strtoul(env, NULL, 10) : DW_REPLICAS_MAX;
    if (cap > DW_REPLICAS_MAX)
        cap = DW_REPLICAS_MAX;
    return (int)(r > cap ? cap : r);
}

static size_t dw_floats(int T, int K, int ncol) {
    const int nr = nn_gemm_nr(ncol);
    return (size_t)T * K * nblocks(ncol, nr) * nr;
}

/* Voxels per weight-gradient chunk: about 256, at least one row. */
static int chunk_rows(int W) {
    int R = 256 / W;
    return R < 1 ? 1 : R > TW_CHUNK_MAX ? TW_CHUNK_MAX : R;
}

/* Per-thread floats to stage a partial column block of G (zero-padded to nr columns). */
static size_t gpad_floats(int W, int ncol) {
    return ncol % nn_gemm_nr(ncol) ? (size_t)chunk_rows(W) * W * nn_gemm_nr(ncol) : 0;
}

/* Workspace of weight_grad: the gradient in packed layout, its replicas, G staging. */
static size_t weight_grad_ws(int T, int K, int ncol, int W) {
    const int r = dw_replicas(T, K, ncol);
    return dw_floats(T, K, ncol) * (size_t)(r > 1 ? r + 1 : 1) +
           (size_t)NN_MAX_THREADS * gpad_floats(W, ncol);
}

/* All tiles of one chunk of rows into Wp. */
static void tw_chunk(float *Wp, const tw_rows *r, long r0, int nrr, int T, long lda, long ldg,
                     long t_lo, long t_hi, float *gpad) {
    const int K = r->cin, ncol = r->cout;
    const int nr = nn_gemm_nr(ncol), nb = nblocks(ncol, nr);
    const long ldw = (long)nb * nr;
    const int mkmax = nn_tw_mr(nr), nkb = (K + mkmax - 1) / mkmax;
    const float *arows[TW_CHUNK_MAX], *grows[TW_CHUNK_MAX];
    const float *ar[TW_CHUNK_MAX], *gr[TW_CHUNK_MAX];
    int last_t = -1;
    (void)T;
    for (long tile = t_lo; tile < t_hi; tile++) {
        const int t = (int)(tile / ((long)nkb * nb));
        const int kb = (int)((tile / nb) % nkb), ob = (int)(tile % nb);
        if (t != last_t) {
            for (int i = 0; i < nrr; i++)
                tw_rowptr(r, r0 + i, t, &arows[i], &grows[i]);
            last_t = t;
        }
        const int k0 = split_at(K, nkb, kb), k1 = split_at(K, nkb, kb + 1);
        const int n0 = ob * nr, nvalid = ncol - n0 < nr ? ncol - n0 : nr;
        long ldg_ = ldg;
        for (int i = 0; i < nrr; i++) {
            ar[i] = arows[i] + k0;
            gr[i] = grows[i] + n0;
        }
        if (nvalid < nr) {
            /* Partial block: stage G zero-padded to nr columns so the vector kernel runs; the
             * extra columns land in the padding of the packed gradient (ldw = nb * nr). */
            for (int i = 0; i < nrr; i++) {
                float *dst = gpad + (size_t)i * r->W * nr;
                for (int x = 0; x < r->W; x++) {
                    memcpy(dst + (size_t)x * nr, gr[i] + x * ldg, sizeof(float) * nvalid);
                    memset(dst + (size_t)x * nr + nvalid, 0, sizeof(float) * (nr - nvalid));
                }
                gr[i] = dst;
            }
            ldg_ = nr;
        }
        nn_tw_tile(nrr, ar, gr, r->W, lda, ldg_, k1 - k0, nr, nr,
                   Wp + ((size_t)t * K + k0) * ldw + n0, ldw);
    }
}

/* dWp[t][k][ncolpad] = sum over rows and x of A(row, t)[x*lda + k] * G(row, t)[x*ldg + j].
 * With R replicas: chunk c of rows accumulates into copy c % R, in chunk order, and the copies
 * are summed in order at the end, so the result does not depend on the threads. Work items are
 * (copy, share of the tiles) pairs taken dynamically: balanced when cores are shared, and no
 * barrier per chunk. Without copies (huge layers) each tile is one work item over all chunks. */
static void weight_grad(float *dWp, const tw_rows *r, long nrows, int T, long lda, long ldg) {
    const int K = r->cin, ncol = r->cout;
    const int nr = nn_gemm_nr(ncol), nb = nblocks(ncol, nr);
    const int mkmax = nn_tw_mr(nr), nkb = (K + mkmax - 1) / mkmax;
    const long ntiles = (long)T * nkb * nb;
    const size_t nw = dw_floats(T, K, ncol);
    /* Rows per chunk: about 256 voxels, so a chunk's A and G rows stay in L2. */
    const int R = chunk_rows(r->W);
    const size_t gp = gpad_floats(r->W, ncol);
    const long nchunks = (nrows + R - 1) / R;
    const int nth = nn_threads();
    int reps = dw_replicas(T, K, ncol);
    if (reps < 1)
        reps = 1;
    float *rep = reps > 1 ? dWp + nw : dWp, *gpad = dWp + nw * (reps > 1 ? reps + 1 : 1);
    /* Tile shares per copy: enough work items for every thread. */
    long parts = (nth + reps - 1) / reps;
    if (parts > ntiles)
        parts = ntiles;
    const long items = (long)reps * parts;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)reps * (long)nw; i++)
        rep[i] = 0.0f;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth)
    for (long it = 0; it < items; it++) {
        const int cp = (int)(it / parts);
        const long part = it % parts;
        const long lo = ntiles * part / parts, hi = ntiles * (part + 1) / parts;
        float *gp_t = gpad + (size_t)omp_get_thread_num() * gp;
        for (long c = cp; c < nchunks; c += reps) {
            const long r0 = c * R;
            const int nrr = (int)((nrows - r0) < R ? (nrows - r0) : R);
            tw_chunk(rep + (size_t)cp * nw, r, r0, nrr, T, lda, ldg, lo, hi, gp_t);
        }
    }
    if (reps > 1) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < nw; i++) {
            float s = 0;
            for (int k = 0; k < reps; k++)
                s += rep[(size_t)k * nw + i];
            dWp[i] = s;
        }
    }
}

/* ---- Conv3d k3 -------------------------------------------------------------------------- */

size_t nn_conv3d_ws_floats(int N, int D, int H, int W, int cin, int cout) {
    int cmax = cin > cout ? cin : cout;
    size_t pf = packed_floats(cout, cin, 27), pb = packed_floats(cin, cout, 27);
    size_t pw = weight_grad_ws(27, cin, cout, W);
    size_t p = pf > pb ? pf : pb;
    return padded_floats(N, D, H, W, cmax) + (p > pw ? p : pw) + 64;
}

/* 1 when output row (z, y) reads a border that the halo exchange fills (a row spans all of W,
 * so a sharded W makes every row a boundary row). */
static int halo_row(const nn_shard *sh, long z, long y, int D, int H) {
    return (sh->recv[0][0] && z == 0) || (sh->recv[0][1] && z == D - 1) ||
           (sh->recv[1][0] && y == 0) || (sh->recv[1][1] && y == H - 1) || sh->recv[2][0] ||
           sh->recv[2][1];
}

/* out rows (n, z, y, 0..W) = the 27-tap GEMM over the padded buffer P (C floats per voxel,
 * taps at aoff) with the packed kernel Bp of ncol columns. With a shard, P's border is being
 * filled by the halo exchange: rows that do not read it run first, overlapping the exchange,
 * then the exchange is completed and the boundary rows run. */
static void conv_rows(float *out, float *P, int C, const long *aoff, const float *Bp, int ncol,
                      int N, int D, int H, int W, const nn_shard *sh) {
    const int nr = nn_gemm_nr(ncol), nb = nblocks(ncol, nr);
    const nn_tg g = {.T = 27, .K = C, .aoff = aoff, .lda = C, .ldc = ncol, .nr = nr};
    const long Hp = H + 2, Wp = W + 2, rows = (long)N * D * H;
    if (sh)
        sh->halo_start(sh->ctx, P, N, D, H, W, C);
    for (int phase = 0; phase < (sh ? 2 : 1); phase++) {
        if (phase == 1)
            sh->halo_finish(sh->ctx, P, N, D, H, W, C);
#pragma omp parallel for collapse(2) schedule(dynamic, 2)
        for (int ob = 0; ob < nb; ob++)
            for (long row = 0; row < rows; row++) {
                const long n = row / ((long)D * H), z = (row / H) % D, y = row % H;
                if (sh && halo_row(sh, z, y, D, H) != phase)
                    continue;
                const float *A = P + ((n * (D + 2) + z) * Hp + y) * Wp * C;
                const int n0 = ob * nr, nvalid = ncol - n0 < nr ? ncol - n0 : nr;
                nn_tg_row(&g, W, A, Bp + (size_t)ob * 27 * C * nr, out + row * W * ncol + n0,
                          NULL, nvalid, NN_TG_ZERO);
            }
    }
}

void nn_conv3d_forward(float *out, const float *inA, int ca, const float *inB, int cb,
                       const float *w, int cout, int N, int D, int H, int W, float *ws) {
    nn_conv3d_forward_sh(out, inA, ca, inB, cb, w, cout, N, D, H, W, ws, NULL);
}

void nn_conv3d_forward_sh(float *out, const float *inA, int ca, const float *inB, int cb,
                          const float *w, int cout, int N, int D, int H, int W, float *ws,
                          const nn_shard *sh) {
    const int cin = ca + cb;
    float *P = ws, *Bp = ws + padded_floats(N, D, H, W, cin > cout ? cin : cout);
    pad_copy(P, inA, ca, ca, inB, cb, N, D, H, W);
    pack_b(Bp, w, cout, cin, 27, (long)cin * 27, 27, 1, nn_gemm_nr(cout));
    long aoff[27];
    const long Hp = H + 2, Wp = W + 2;
    for (int t = 0; t < 27; t++)
        aoff[t] = (((long)(t / 9) * Hp + (t / 3) % 3) * Wp + t % 3) * cin;
    conv_rows(out, P, cin, aoff, Bp, cout, N, D, H, W, sh);
}

void nn_conv3d_backward(float *din, float *dw, const float *dout, const float *inA, int ca,
                        const float *inB, int cb, const float *w, int cout, int N, int D, int H,
                        int W, float *ws) {
    nn_conv3d_backward_sh(din, dw, dout, inA, ca, inB, cb, w, cout, N, D, H, W, ws, NULL);
}

void nn_conv3d_backward_sh(float *din, float *dw, const float *dout, const float *inA, int ca,
                           const float *inB, int cb, const float *w, int cout, int N, int D,
                           int H, int W, float *ws, const nn_shard *sh) {
    const int cin = ca + cb;
    float *P = ws, *Bp = ws + padded_floats(N, D, H, W, cin > cout ? cin : cout);
    const long Hp = H + 2, Wp = W + 2;
    const long rows = (long)N * D * H;
    /* Weight gradient: padded (halo'd) input x output gradient, reduced over voxels. */
    if (dw) {
        pad_copy(P, inA, ca, ca, inB, cb, N, D, H, W);
        if (sh) {
            sh->halo_start(sh->ctx, P, N, D, H, W, cin);
            sh->halo_finish(sh->ctx, P, N, D, H, W, cin);
        }
        const tw_rows r = {.A = P, .G = dout, .kind = 0, .D = D, .H = H, .W = W, .cin = cin,
                           .cout = cout, .ldg_vox = cout};
        weight_grad(Bp, &r, rows, 27, cin, cout);
        const int nr = nn_gemm_nr(cout);
        const long ldw = (long)nblocks(cout, nr) * nr;
#pragma omp parallel for schedule(static)
        for (int oc = 0; oc < cout; oc++)
            for (int ic = 0; ic < cin; ic++)
                for (int t = 0; t < 27; t++)
                    dw[((size_t)oc * cin + ic) * 27 + t] += Bp[((size_t)t * cin + ic) * ldw + oc];
    }
    if (!din)
        return;
    /* Input gradient: the padded (halo'd) output gradient convolved with the flipped,
     * transposed kernel. */
    pad_copy(P, dout, cout, cout, NULL, 0, N, D, H, W);
    pack_b(Bp, w, cin, cout, 27, 27, (long)cin * 27, 1, nn_gemm_nr(cin));
    long aoff[27];
    for (int t = 0; t < 27; t++)
        aoff[t] = (((long)(2 - t / 9) * Hp + (2 - (t / 3) % 3)) * Wp + (2 - t % 3)) * cout;
    conv_rows(din, P, cout, aoff, Bp, cin, N, D, H, W, sh);
}

/* ---- ConvTranspose3d k2 s2 -------------------------------------------------------------- */

/* db[c] += sum over P voxels of dout[p*ldo + c], in NN_SLICES fixed slices summed in order. */
static void bias_grad(float *db, const float *dout, long ldo, long P, int C, float *ws) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(nn_threads())
    for (int sl = 0; sl < NN_SLICES; sl++) {
        float *acc = ws + (size_t)sl * C;
        memset(acc, 0, sizeof(float) * C);
        const long lo = P * sl / NN_SLICES, hi = P * (sl + 1) / NN_SLICES;
        for (long p = lo; p < hi; p++) {
            const float *d = dout + p * ldo;
            for (int c = 0; c < C; c++)
                acc[c] += d[c];
        }
    }
    for (int sl = 0; sl < NN_SLICES; sl++)
        for (int c = 0; c < C; c++)
            db[c] += ws[(size_t)sl * C + c];
}

size_t nn_convt3d_ws_floats(int N, int D, int H, int W, int cin, int cout) {
    (void)N, (void)D, (void)H;
    size_t pf = packed_floats(cout, cin, 8), pb = packed_floats(cin, cout, 8);
    size_t pw = weight_grad_ws(8, cin, cout, W);
    size_t p = pf > pb ? pf : pb;
    if (pw > p)
        p = pw;
    size_t bias = (size_t)NN_SLICES * cout;
    return (p > bias ? p : bias) + 4 * (size_t)cout + 64;
}

void nn_convt3d_forward(float *out, const float *in, const float *w, const float *b, int cin,
                        int cout, int N, int D, int H, int W, float *ws) {
    const int nr = nn_gemm_nr(cout), nb = nblocks(cout, nr);
    float *Bp = ws, *bias = ws + packed_floats(cout, cin, 8);
    for (int j = 0; j < nb * nr; j++)
        bias[j] = j < cout ? b[j] : 0.0f;
    /* w[ic][oc][t]: column oc stride 8, k = ic stride cout*8, tap stride 1. */
    pack_b(Bp, w, cout, cin, 8, 8, (long)cout * 8, 1, nr);
    const long aoff[1] = {0};
    const nn_tg g = {.T = 1, .K = cin, .aoff = aoff, .lda = cin, .ldc = 2L * cout, .nr = nr};
    const long rows = (long)N * D * H;
#pragma omp parallel for collapse(3) schedule(dynamic, 2)
    for (int ob = 0; ob < nb; ob++)
        for (long row = 0; row < rows; row++)
            for (int t = 0; t < 8; t++) {
                const long n = row / ((long)D * H), z = (row / H) % D, y = row % H;
                const int az = t / 4, by = (t / 2) % 2, cx = t % 2;
                const int n0 = ob * nr, nvalid = cout - n0 < nr ? cout - n0 : nr;
                float *C = out + (((n * 2 * D + 2 * z + az) * 2 * H + 2 * y + by) * 2 * W + cx) *
                                     cout + n0;
                nn_tg_row(&g, W, in + row * W * cin, Bp + ((size_t)ob * 8 + t) * cin * nr, C,
                          bias + n0, nvalid, NN_TG_BIAS);
            }
}

void nn_convt3d_backward(float *din, float *dw, float *db, const float *dout, long ldo,
                         const float *in, const float *w, int cin, int cout, int N, int D, int H,
                         int W, float *ws) {
    const long rows = (long)N * D * H;
    if (db)
        bias_grad(db, dout, ldo, 8 * rows * W, cout, ws);
    if (dw) {
        const tw_rows r = {.A = in, .G = dout, .kind = 1, .D = D, .H = H, .W = W, .cin = cin,
                           .cout = cout, .ldg_vox = ldo};
        weight_grad(ws, &r, rows, 8, cin, 2 * ldo);
        const int nr = nn_gemm_nr(cout);
        const long ldw = (long)nblocks(cout, nr) * nr;
#pragma omp parallel for schedule(static)
        for (int ic = 0; ic < cin; ic++)
            for (int oc = 0; oc < cout; oc++)
                for (int t = 0; t < 8; t++)
                    dw[((size_t)ic * cout + oc) * 8 + t] += ws[((size_t)t * cin + ic) * ldw + oc];
    }
    if (!din)
        return;
    const int nr = nn_gemm_nr(cin), nb = nblocks(cin, nr);
    float *Bp = ws;
    /* din[ic] = sum_t sum_oc dout(2p + t)[oc] w[ic][oc][t]: column ic stride cout*8, k = oc. */
    pack_b(Bp, w, cin, cout, 8, (long)cout * 8, 8, 1, nr);
    long aoff[8];
    for (int t = 0; t < 8; t++)
        aoff[t] = (((long)(t / 4) * 2 * H + (t / 2) % 2) * 2 * W + t % 2) * ldo;
    const nn_tg g = {.T = 8, .K = cout, .aoff = aoff, .lda = 2 * ldo, .ldc = cin, .nr = nr};
#pragma omp parallel for collapse(2) schedule(dynamic, 2)
    for (int ob = 0; ob < nb; ob++)
        for (long row = 0; row < rows; row++) {
            const long n = row / ((long)D * H), z = (row / H) % D, y = row % H;
            const float *A = dout + ((n * 2 * D + 2 * z) * 2 * H + 2 * y) * 2 * W * ldo;
            const int n0 = ob * nr, nvalid = cin - n0 < nr ? cin - n0 : nr;
            nn_tg_row(&g, W, A, Bp + (size_t)ob * 8 * cout * nr, din + row * W * cin + n0, NULL,
                      nvalid, NN_TG_ZERO);
        }
}

/* ---- Conv3d k1 (output layer) ----------------------------------------------------------- */

#define C1_ROW 64 /* voxels per GEMM row in the 1x1 convolution */

size_t nn_conv1_ws_floats(long P, int cin, int cout) {
    (void)P;
    size_t pf = packed_floats(cout, cin, 1), pb = packed_floats(cin, cout, 1);
    size_t pw = (size_t)NN_SLICES * cin * cout, bias = (size_t)NN_SLICES * cout;
    size_t m = pf > pb ? pf : pb;
    if (pw > m)
        m = pw;
    if (bias > m)
        m = bias;
    return m + 4 * (size_t)cout + 64;
}

void nn_conv1_forward(float *out, const float *in, const float *w, const float *b, int cin,
                      int cout, long P, float *ws) {
    const int nr = nn_gemm_nr(cout), nb = nblocks(cout, nr);
    float *Bp = ws, *bias = ws + packed_floats(cout, cin, 1);
    for (int j = 0; j < nb * nr; j++)
        bias[j] = j < cout ? b[j] : 0.0f;
    pack_b(Bp, w, cout, cin, 1, cin, 1, 0, nr);
    const long aoff[1] = {0};
    const nn_tg g = {.T = 1, .K = cin, .aoff = aoff, .lda = cin, .ldc = cout, .nr = nr};
    const long nrow = (P + C1_ROW - 1) / C1_ROW;
#pragma omp parallel for collapse(2) schedule(static)
    for (int ob = 0; ob < nb; ob++)
        for (long r = 0; r < nrow; r++) {
            const long p0 = r * C1_ROW;
            const int X = (int)(P - p0 < C1_ROW ? P - p0 : C1_ROW);
            const int n0 = ob * nr, nvalid = cout - n0 < nr ? cout - n0 : nr;
            nn_tg_row(&g, X, in + p0 * cin, Bp + (size_t)ob * cin * nr, out + p0 * cout + n0,
                      bias + n0, nvalid, NN_TG_BIAS);
        }
}

void nn_conv1_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                       const float *w, int cin, int cout, long P, float *ws) {
    if (db)
        bias_grad(db, dout, cout, P, cout, ws);
    if (dw) {
        /* Few output channels: each of NN_SLICES fixed voxel slices reduces into its own
         * (cin, cout) tile, then the tiles are summed in order (cin*cout floats per slice). */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nn_threads())
        for (int sl = 0; sl < NN_SLICES; sl++) {
            float *acc = ws + (size_t)sl * cin * cout;
            memset(acc, 0, sizeof(float) * cin * cout);
            const long lo = P * sl / NN_SLICES, hi = P * (sl + 1) / NN_SLICES;
            for (long p = lo; p < hi; p++) {
                const float *a = in + p * cin, *g = dout + p * cout;
                for (int ic = 0; ic < cin; ic++) {
                    const float av = a[ic];
                    float *accr = acc + (size_t)ic * cout;
                    for (int oc = 0; oc < cout; oc++)
                        accr[oc] += av * g[oc];
                }
            }
        }
        for (int sl = 0; sl < NN_SLICES; sl++)
            for (int ic = 0; ic < cin; ic++)
                for (int oc = 0; oc < cout; oc++)
                    dw[(size_t)oc * cin + ic] += ws[((size_t)sl * cin + ic) * cout + oc];
    }
    if (!din)
        return;
    const int nr = nn_gemm_nr(cin), nb = nblocks(cin, nr);
    float *Bp = ws;
    pack_b(Bp, w, cin, cout, 1, 1, cin, 0, nr);
    const long aoff[1] = {0};
    const nn_tg g = {.T = 1, .K = cout, .aoff = aoff, .lda = cout, .ldc = cin, .nr = nr};
    const long nrow = (P + C1_ROW - 1) / C1_ROW;
#pragma omp parallel for collapse(2) schedule(dynamic, 2)
    for (int ob = 0; ob < nb; ob++)
        for (long r = 0; r < nrow; r++) {
            const long p0 = r * C1_ROW;
            const int X = (int)(P - p0 < C1_ROW ? P - p0 : C1_ROW);
            const int n0 = ob * nr, nvalid = cin - n0 < nr ? cin - n0 : nr;
            nn_tg_row(&g, X, dout + p0 * cout, Bp + (size_t)ob * cout * nr, din + p0 * cin + n0,
                      NULL, nvalid, NN_TG_ZERO);
        }
}

/* ---- naive references ------------------------------------------------------------------- */

void nn_conv3d_forward_ref(float *out, const float *in, const float *w, int cin, int cout, int N,
                           int D, int H, int W) {
#pragma omp parallel for collapse(2) schedule(dynamic, 2)
    for (int n = 0; n < N; n++)
        for (int z = 0; z < D; z++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                    for (int oc = 0; oc < cout; oc++) {
                        double s = 0;
                        for (int t = 0; t < 27; t++) {
                            int zz = z + t / 9 - 1, yy = y + (t / 3) % 3 - 1, xx = x + t % 3 - 1;
                            if (zz < 0 || zz >= D || yy < 0 || yy >= H || xx < 0 || xx >= W)
                                continue;
                            const float *a = in + ((((size_t)n * D + zz) * H + yy) * W + xx) * cin;
                            for (int ic = 0; ic < cin; ic++)
                                s += (double)a[ic] * w[((size_t)oc * cin + ic) * 27 + t];
                        }
                        out[((((size_t)n * D + z) * H + y) * W + x) * cout + oc] = (float)s;
                    }
}

void nn_conv3d_backward_ref(float *din, float *dw, const float *dout, const float *in,
                            const float *w, int cin, int cout, int N, int D, int H, int W) {
    const size_t nin = (size_t)N * D * H * W * cin;
    if (din)
        memset(din, 0, sizeof(float) * nin);
    for (int n = 0; n < N; n++)
        for (int z = 0; z < D; z++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                    for (int t = 0; t < 27; t++) {
                        int zz = z + t / 9 - 1, yy = y + (t / 3) % 3 - 1, xx = x + t % 3 - 1;
                        if (zz < 0 || zz >= D || yy < 0 || yy >= H || xx < 0 || xx >= W)
                            continue;
                        const size_t ia = (((size_t)n * D + zz) * H + yy) * W + xx;
                        const float *g = dout + ((((size_t)n * D + z) * H + y) * W + x) * cout;
                        for (int oc = 0; oc < cout; oc++)
                            for (int ic = 0; ic < cin; ic++) {
                                const size_t iw = ((size_t)oc * cin + ic) * 27 + t;
                                if (dw)
                                    dw[iw] += in[ia * cin + ic] * g[oc];
                                if (din)
                                    din[ia * cin + ic] += w[iw] * g[oc];
                            }
                    }
}
