/* ifs: the 3D iterated-function-system fractals of ScaFFold: a class is two affine maps
 * (params (2, 13): row-major 3x3 matrix, translation, selection probability), points come from
 * the chaos game, a class is accepted when its normalised point cloud is spread out enough, and
 * the 145 instances of a class scale one of its 12 map parameters by a factor.
 * Every draw comes from rng streams keyed by (seed, purpose, attempt) or (seed, purpose, class,
 * instance), so results do not depend on the number of ranks. Pure computation, no I/O. */
#ifndef SCAFFOLD_FRACTAL_IFS_H
#define SCAFFOLD_FRACTAL_IFS_H

#include <stddef.h>
#include <stdint.h>

#define IFS_MAPS 2
#define IFS_COLS 13
#define IFS_NPARAMS (IFS_MAPS * IFS_COLS)
#define IFS_INSTANCES 145
#define IFS_RUNAWAY 1e10

typedef struct ifs_params {
    double p[IFS_MAPS][IFS_COLS];
} ifs_params;

/* The proposal of class-search attempt `attempt`: 26 values Uniform(-1, 1) (rows in order,
 * columns 0..12), then column 12 overwritten with |det A_t| / (|det A_0| + |det A_1|).
 * (If both determinants are 0 the probabilities are 0.5 each.) */
void ifs_propose(uint64_t seed, uint64_t attempt, ifs_params *out);

/* Chaos game: pts[0] = origin, pts[n] = A_t pts[n-1] + b_t with t = 0 if u < p[0][12] else 1,
 * u drawn from the stream (seed, purpose, a, b). pts is (n, 3) row-major double. Returns 1 if
 * no coordinate ever exceeded IFS_RUNAWAY in magnitude, else 0 (generation continues). */
int ifs_chaos(const ifs_params *ip, uint64_t seed, uint64_t purpose, uint64_t a, uint64_t b,
              double *pts, size_t n);

/* Acceptance test of a class (upstream generate_single_category): all points finite, per-axis
 * range finite and > 0, per-axis population variance of (pts - mean) * (2*normalize/range)
 * strictly greater than `threshold` on all three axes, and `no_runaway`. `var_out` (may be
 * NULL) receives the three normalised variances. Returns 1 if accepted. */
int ifs_accept(const double *pts, size_t n, int no_runaway, double normalize, double threshold,
               double var_out[3]);

/* Row `i` (0..144) of the instance weight table: row 0 all ones; row 1 + 12*p + k scales
 * parameter p (0..11) by factor k of {0.4,...,0.9,1.1,...,1.6}. */
void ifs_instance_weights(int i, double w[12]);

/* Generates instance (cls, inst) of class `base` into pts (n, 3) float32: weights of row inst
 * applied to columns 0..11 of both maps; on runaway or non-finite points retried with the
 * attenuated weights 1 + (w-1)*f for f in 0.5, 0.25, 0.1 (same stream each time), then with the
 * base class itself. `work` is n*3 doubles of scratch. Returns the attempt that succeeded
 * (0 = full weights, 1..3 attenuated, 4 = base class) or -1 if even the base class fails. */
int ifs_instance(const ifs_params *base, uint64_t seed, int cls, int inst, float *pts, double *work,
                 size_t n);

#endif
