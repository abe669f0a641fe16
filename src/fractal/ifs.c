/* ifs: class proposals, the chaos game, class acceptance and instances (see ifs.h). */
#include "fractal/ifs.h"

#include "core/rng.h"

#include <math.h>
#include <string.h>

static double det3(const double *m) {
    return m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) +
           m[2] * (m[3] * m[7] - m[4] * m[6]);
}

void ifs_propose(uint64_t seed, uint64_t attempt, ifs_params *out) {
    rng r = rng_make(seed, RNG_CLASS_PARAMS, attempt, 0);
    for (int t = 0; t < IFS_MAPS; t++)
        for (int j = 0; j < IFS_COLS; j++)
            out->p[t][j] = 2.0 * rng_uniform(&r) - 1.0;
    double d0 = fabs(det3(out->p[0])), d1 = fabs(det3(out->p[1]));
    double s = d0 + d1;
    out->p[0][12] = s > 0 ? d0 / s : 0.5;
    out->p[1][12] = s > 0 ? d1 / s : 0.5;
}

int ifs_chaos(const ifs_params *ip, uint64_t seed, uint64_t purpose, uint64_t a, uint64_t b,
              double *pts, size_t n) {
    if (n == 0)
        return 1;
    rng r = rng_make(seed, purpose, a, b);
    const double *maps = &ip->p[0][0];
    /* u < p0 with u = k * 2^-53 is exactly k < ceil(p0 * 2^53): compare integers, no
     * int-to-double conversion on the hot path (p0 is in [0, 1], so the product is exact). */
    const uint64_t thr = (uint64_t)ceil(maps[12] * 0x1.0p53);
    double x = 0, y = 0, z = 0;
    int runaway = 0;
    pts[0] = pts[1] = pts[2] = 0;
    for (size_t i = 1; i < n; i++) {
        /* Branch-free map choice: the draw is unpredictable, so a branch would mispredict half
         * the time; an address computed from the comparison costs nothing. */
        const double *m = maps + IFS_COLS * (size_t)((rng_u64(&r) >> 11) >= thr);
        /* Grouped so that the three products of each row are independent (shorter chain). */
        double nx = (m[0] * x + m[1] * y) + (m[2] * z + m[9]);
        double ny = (m[3] * x + m[4] * y) + (m[5] * z + m[10]);
        double nz = (m[6] * x + m[7] * y) + (m[8] * z + m[11]);
        x = nx;
        y = ny;
        z = nz;
        pts[3 * i] = x;
        pts[3 * i + 1] = y;
        pts[3 * i + 2] = z;
        /* NaN compares false, so it is caught by the finiteness check of the caller. */
        runaway |= (fabs(x) > IFS_RUNAWAY) | (fabs(y) > IFS_RUNAWAY) | (fabs(z) > IFS_RUNAWAY);
    }
    int ok = !runaway;
    return ok;
}

int ifs_accept(const double *pts, size_t n, int no_runaway, double normalize, double threshold,
               double var_out[3]) {
    int ok = no_runaway && n > 0;
    for (int ax = 0; ax < 3; ax++) {
        double mn = INFINITY, mx = -INFINITY, sum = 0;
        int finite = 1;
        for (size_t i = 0; i < n; i++) {
            double v = pts[3 * i + ax];
            finite &= isfinite(v);
            mn = v < mn ? v : mn;
            mx = v > mx ? v : mx;
            sum += v;
        }
        double range = mx - mn;
        if (!finite || !isfinite(range) || !(range > 0)) {
            if (var_out)
                var_out[ax] = NAN;
            ok = 0;
            continue;
        }
        /* Two passes as numpy does: normalise, then the population variance. */
        double mean = sum / (double)n, scale = 2.0 * normalize / range;
        double s1 = 0;
        for (size_t i = 0; i < n; i++)
            s1 += (pts[3 * i + ax] - mean) * scale;
        double m2 = s1 / (double)n, s2 = 0;
        for (size_t i = 0; i < n; i++) {
            double d = (pts[3 * i + ax] - mean) * scale - m2;
            s2 += d * d;
        }
        double var = s2 / (double)n;
        if (var_out)
            var_out[ax] = var;
        if (!(var > threshold))
            ok = 0;
    }
    return ok;
}

void ifs_instance_weights(int i, double w[12]) {
    static const double factors[12] = {0.4, 0.5, 0.6, 0.7, 0.8, 0.9,
                                       1.1, 1.2, 1.3, 1.4, 1.5, 1.6};
    for (int j = 0; j < 12; j++)
        w[j] = 1.0;
    if (i >= 1 && i < IFS_INSTANCES)
        w[(i - 1) / 12] = factors[(i - 1) % 12];
}

static int all_finite(const double *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return 0;
    return 1;
}

int ifs_instance(const ifs_params *base, uint64_t seed, int cls, int inst, float *pts, double *work,
                 size_t n) {
    static const double atten[5] = {1.0, 0.5, 0.25, 0.1, 0.0};
    double w[12];
    ifs_instance_weights(inst, w);
    for (int a = 0; a < 5; a++) {
        ifs_params ip = *base;
        for (int t = 0; t < IFS_MAPS; t++)
            for (int j = 0; j < 12; j++)
                ip.p[t][j] *= 1.0 + (w[j] - 1.0) * atten[a];
        int ok = ifs_chaos(&ip, seed, RNG_INSTANCE_CHAOS, (uint64_t)cls, (uint64_t)inst, work, n);
        if (ok && all_finite(work, 3 * n)) {
            for (size_t i = 0; i < 3 * n; i++)
                pts[i] = (float)work[i];
            return a;
        }
    }
    return -1;
}
