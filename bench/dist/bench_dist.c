/* bench_dist: one training step of the U-Net split over ranks (src/parallel), timed and split into
 * its parts, under mpirun. Every rank builds the model on its block of a synthetic volume
 * (D x H x W, any extents divisible as the layout needs), runs WARMUP + STEPS steps (forward,
 * loss, backward with the bucketed gradient all-reduce, Adam), and rank 0 prints one line:
 *
 *   dist ranks R replicas P shards a,b,c volume DxHxW threads T step_s S compute_s C
 *        halo_wait_s H gn_sum_s G skew_s K grad_exposed_s E grad_blocking_s B grad_hidden H%
 *        act_mib_per_rank M params P
 *
 * Times are medians over the steps of the per-step maximum over ranks. A barrier between the
 * backward pass and par_grad_finish separates the ranks' skew (skew_s: waiting for the slowest
 * rank's backward pass, which no overlap can hide) from the exposed gradient wait (what is left
 * of the all-reduce once every rank has finished computing). compute = step - halo wait - sums
 * - skew - exposed (what the rank spent computing, including the progress thread's share).
 * grad_blocking is a blocking all-reduce of the same gradient after the steps (median of
 * STEPS); hidden = 1 - exposed / blocking. act_mib is the activation + workspace slab of one
 * rank (nn_unet.activation_floats; the model is created with nn_unet_opts.sharded, so the slab
 * holds the whole-block workspace of its sharded convolutions); halo_mib_per_step what the
 * busiest rank sent per step; sums_bytes_per_step / sums_per_step the GroupNorm and loss sums
 * rank 0 contributed per step. */
#include "core/err.h"
#include "core/log.h"
#include "core/opt.h"
#include "parallel/grad.h"
#include "parallel/grid.h"
#include "nn/optim.h"
#include "nn/unet.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n ? v[(n - 1) / 2] : 0;
}

int main(int argc, char **argv) {
    dist_world w;
    if (dist_init(&w, &argc, &argv))
        return 1;
    log_set_rank(w.rank);
    int D = 64, H = 64, Wd = 64, base = 16, layers = 3, batch = 1, steps = 5, warm = 1;
    int sd = 1, shh = 1, sw = 1, shard_stats = 0;
    const opt_spec opts[] = {
        OPT_INT_(0, "d", &D, 2, 65536, "D", "volume depth"),
        OPT_INT_(0, "h", &H, 2, 65536, "H", "volume height"),
        OPT_INT_(0, "w", &Wd, 2, 65536, "W", "volume width"),
        OPT_INT_(0, "base", &base, 1, 4096, "C", "channels of the first level"),
        OPT_INT_(0, "layers", &layers, 1, 12, "L", "U-Net levels below the top"),
        OPT_INT_(0, "batch", &batch, 1, 1024, "N", "local batch"),
        OPT_INT_(0, "steps", &steps, 1, 1000, "K", "timed steps"),
        OPT_INT_(0, "warmup", &warm, 0, 1000, "K", "untimed steps"),
        OPT_INT_(0, "sd", &sd, 1, 4096, "N", "shards along D"),
        OPT_INT_(0, "sh", &shh, 1, 4096, "N", "shards along H"),
        OPT_INT_(0, "sw", &sw, 1, 4096, "N", "shards along W"),
        OPT_FLAG_(0, "shard-stats", &shard_stats, "per-shard GroupNorm statistics"),
        OPT_END_};
    const opt_cmd cmd = {"bench_dist", "[options]", "Times a sharded U-Net training step.", opts,
                         OPT_POS_NONE, NULL};
    int first, rc = opt_parse(&cmd, argc, argv, &first);
    if (rc == OPT_HELP) {
        if (w.rank == 0)
            opt_usage(&cmd, stdout);
        dist_finalize(&w);
        return 0;
    }
    static const int axes[3] = {0, 1, 2};
    const int counts[3] = {sd, shh, sw};
    par_grid g;
    if (rc == 0)
        rc = par_grid_create(&g, &w, 3, axes, counts);
    if (rc) {
        if (w.rank == 0)
            fprintf(stderr, "bench_dist: %s\n", err_msg());
        dist_finalize(&w);
        return 2;
    }
    const int ext[3] = {D / sd, H / shh, Wd / sw};
    nn_unet_spec spec = {3, 6, layers, base, 8 < base ? 8 : base};
    nn_unet m;
    nn_optim o;
    par_spatial sp;
    par_grad gr;
    rc = nn_unet_create_opts(&m, &spec, &(nn_unet_opts){.sharded = g.T > 1}, batch, ext[0],
                             ext[1], ext[2]);
    if (rc == 0)
        rc = nn_optim_init(&o, NN_OPT_ADAM, m.nparams);
    rc = dist_agree(&w, rc);
    if (rc) {
        if (w.rank == 0)
            fprintf(stderr, "bench_dist: %s\n", err_msg());
        dist_finalize(&w);
        return 1;
    }
    nn_unet_init_params(&m, 1);
    if (g.T > 1) {
        par_spatial_init(&sp, &g, !shard_stats);
        m.shard = &sp.ops;
    }
    par_grad_init(&gr, &w, &m, 1.0 / g.nrep);
    const size_t S = (size_t)ext[0] * ext[1] * ext[2];
    float *x = malloc((size_t)batch * 3 * S * sizeof *x), cw[6] = {1, 3, 3, 3, 3, 3};
    uint16_t *y = malloc((size_t)batch * S * sizeof *y);
    uint64_t st = 99 + (uint64_t)w.rank;
    for (size_t i = 0; i < (size_t)batch * 3 * S; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(st >> 11) / 9007199254740992.0 * 2 - 1);
    }
    for (size_t i = 0; i < (size_t)batch * S; i++)
        y[i] = (uint16_t)(x[i] > 0.5f ? 1 + i % 5 : 0);
    double *ts = calloc((size_t)steps, sizeof *ts), *th = calloc((size_t)steps, sizeof *th);
    double *tg = calloc((size_t)steps, sizeof *tg), *te = calloc((size_t)steps, sizeof *te);
    double *tc = calloc((size_t)steps, sizeof *tc), *tb = calloc((size_t)steps, sizeof *tb);
    double *tk = calloc((size_t)steps, sizeof *tk);
    for (int k = -warm; k < steps && rc == 0; k++) {
        double h0 = g.T > 1 ? sp.halo_wait_s : 0, s0 = g.T > 1 ? sp.sum_s : 0,
               e0 = gr.exposed_s, loss, dice;
        dist_barrier(&w);
        double t0 = time_now();
        nn_unet_zero_grad(&m);
        par_grad_begin(&gr);
        rc = nn_unet_forward_backward(&m, x, y, batch, cw, &loss, &dice);
        double k0 = time_now();
        dist_barrier(&w);
        double sk = time_now() - k0;
        par_grad_finish(&gr);
        nn_clip_grad_norm(m.grads, m.nparams, 1.0);
        nn_optim_step(&o, m.params, m.grads, 1e-3);
        double t = time_now() - t0;
        if (k < 0)
            continue;
        double hw = g.T > 1 ? sp.halo_wait_s - h0 : 0, sw_ = g.T > 1 ? sp.sum_s - s0 : 0;
        double ex = gr.exposed_s - e0;
        ts[k] = dist_max_double(&w, t);
        th[k] = dist_max_double(&w, hw);
        tg[k] = dist_max_double(&w, sw_);
        te[k] = dist_max_double(&w, ex);
        tk[k] = dist_max_double(&w, sk);
        tc[k] = dist_max_double(&w, t - hw - sw_ - ex - sk);
    }
    rc = dist_agree(&w, rc);
    /* The blocking all-reduce of the same gradient: what the overlap hides. */
    for (int k = 0; k < steps && rc == 0; k++) {
        dist_barrier(&w);
        double t0 = time_now();
        if (w.size > 1)
            dist_sum_floats(&w, m.grads, m.nparams);
        tb[k] = dist_max_double(&w, time_now() - t0);
    }
    double halo_mib = dist_max_double(&w, g.T > 1 ? sp.halo_bytes / 1048576.0 / (steps + warm) : 0);
    double sums_b = g.T > 1 ? (double)sp.sum_bytes / (steps + warm) : 0;
    double sums_n = g.T > 1 ? (double)sp.sums / (steps + warm) : 0;
    if (w.rank == 0 && rc == 0) {
        double step = median(ts, steps), ex = median(te, steps), bl = median(tb, steps);
        printf("dist ranks %d replicas %d shards %d,%d,%d volume %dx%dx%d threads %d step_s %.4f "
               "compute_s %.4f halo_wait_s %.4f gn_sum_s %.4f skew_s %.4f grad_exposed_s %.4f "
               "grad_blocking_s %.4f grad_hidden %.0f%% act_mib_per_rank %.2f params %zu "
               "halo_mib_per_step %.2f sums_bytes_per_step %.0f sums_per_step %.0f\n",
               w.size, g.nrep, sd, shh, sw, D, H, Wd, omp_get_max_threads(), step,
               median(tc, steps), median(th, steps), median(tg, steps), median(tk, steps), ex,
               bl,
               bl > 0 ? 100.0 * (1.0 - ex / bl) : 0.0, m.activation_floats * 4.0 / 1048576.0,
               m.nparams, halo_mib, sums_b, sums_n);
    }
    if (rc && w.rank == 0)
        fprintf(stderr, "bench_dist: %s\n", err_msg());
    par_grad_free(&gr);
    par_grid_free(&g);
    nn_unet_free(&m);
    nn_optim_free(&o);
    free(x), free(y), free(ts), free(th), free(tg), free(te), free(tc), free(tb), free(tk);
    dist_finalize(&w);
    return rc ? 1 : 0;
}
