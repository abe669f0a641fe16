/* ref: the naive references (ref.h). */
#include "nn/ref.h"

#include <string.h>

void nn_ref_conv3d_forward(float *out, const float *in, const float *w, int cin, int cout, int N,
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

void nn_ref_conv3d_backward(float *din, float *dw, const float *dout, const float *in,
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
