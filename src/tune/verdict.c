/* verdict: the verdict of one trial (see tune.h), in this order:
 *   blocked       a candidate run failed for another reason than its numbers;
 *   guard-reject  non-finite or rising losses; does less (compare's work check: epochs,
 *                 samples, bytes delivered, checkpoints); phantom throughput (samples per step
 *                 changed without a batch lever, or samples/s up while epoch time is not down);
 *                 degraded convergence (training or validation loss above the incumbent's
 *                 beyond its band at any epoch, or a lower final Dice);
 *   accept / revert / inconclusive  the objective's figure of merit, candidate vs incumbent,
 *                 with compare's band statistics (the whole range beyond 0 and the median
 *                 beyond the noise band). */
#include "tune/tune.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *const tune_objective_names[3] = {"throughput", "time-to-target", "epoch-time"};

double tune_fom(const tune_meas *m, tune_objective o) {
    if (!m->ok)
        return NAN;
    switch (o) {
    case TUNE_OBJ_THROUGHPUT: return m->throughput;
    case TUNE_OBJ_TTT: return m->ttt_s;
    case TUNE_OBJ_EPOCH: return m->epoch_s;
    }
    return NAN;
}

int tune_fom_higher_better(tune_objective o) {
    return o == TUNE_OBJ_THROUGHPUT;
}

static double med_of(const tune_meas *m, int n, double (*get)(const tune_meas *, int), int i) {
    double v[TUNE_MAX_REPEATS];
    int k = 0;
    for (int r = 0; r < n && k < TUNE_MAX_REPEATS; r++) {
        double x = get(&m[r], i);
        if (isfinite(x))
            v[k++] = x;
    }
    return an_median(v, (size_t)k);
}

/* Half the relative spread of a per-epoch series over replicates. */
static double spread_of(const tune_meas *m, int n, double (*get)(const tune_meas *, int), int i) {
    double lo = INFINITY, hi = -INFINITY;
    for (int r = 0; r < n; r++) {
        double x = get(&m[r], i);
        if (isfinite(x)) {
            lo = fmin(lo, x);
            hi = fmax(hi, x);
        }
    }
    double md = med_of(m, n, get, i);
    return isfinite(lo) && md > 0 ? 0.5 * (hi - lo) / md : 0;
}

static double g_loss(const tune_meas *m, int i) { return i < m->nepochs ? m->loss[i] : NAN; }
static double g_vloss(const tune_meas *m, int i) { return i < m->nepochs ? m->val_loss[i] : NAN; }
static double g_dice(const tune_meas *m, int i) { return i < m->nepochs ? m->val_dice[i] : NAN; }
static double g_sps(const tune_meas *m, int i) { (void)i; return m->samples_per_step; }
static double g_spe(const tune_meas *m, int i) { (void)i; return m->samples_per_epoch; }

static void fom_delta(const tune_meas *a, int na, const tune_meas *b, int nb, tune_objective o,
                      double min_noise, an_delta *d, double *am, double *bm) {
    double x[TUNE_MAX_REPEATS], y[TUNE_MAX_REPEATS];
    int kx = 0, ky = 0;
    for (int i = 0; i < na && kx < TUNE_MAX_REPEATS; i++)
        x[kx++] = tune_fom(&a[i], o);
    for (int i = 0; i < nb && ky < TUNE_MAX_REPEATS; i++)
        y[ky++] = tune_fom(&b[i], o);
    an_delta_of(x, (size_t)kx, y, (size_t)ky, min_noise, d);
    double tx[TUNE_MAX_REPEATS], ty[TUNE_MAX_REPEATS];
    memcpy(tx, x, sizeof(double) * (size_t)kx);
    memcpy(ty, y, sizeof(double) * (size_t)ky);
    *am = an_median(tx, (size_t)kx);
    *bm = an_median(ty, (size_t)ky);
    if (!tune_fom_higher_better(o)) {
        /* Oriented so that > 0 is better: a time that falls by x% is a gain of x%. */
        double med = -d->med, lo = -d->hi, hi = -d->lo;
        d->med = med;
        d->lo = lo;
        d->hi = hi;
    }
}

/* The convergence guard's tolerance at one epoch: 2%, or twice the incumbent's own spread. */
static double conv_tol(const tune_meas *a, int na, double (*get)(const tune_meas *, int), int i) {
    return fmax(0.02, 2 * spread_of(a, na, get, i));
}

void tune_judge(const tune_meas *a, int na, const tune_meas *b, int nb, tune_objective obj,
                int batch_lever, double min_noise, tune_verdict *v) {
    memset(v, 0, sizeof *v);
    v->guard = "";
    v->judged = obj;
    v->base_med = v->cand_med = NAN;
    v->d.med = v->d.lo = v->d.hi = v->d.noise = NAN;
    v->tput_gain = v->epoch_gain = NAN;
    for (int i = 0; i < na; i++)
        if (!a[i].ok) {
            v->verdict = "blocked";
            snprintf(v->reason, sizeof v->reason, "the incumbent failed to run: %s",
                     a[i].error);
            return;
        }
    for (int i = 0; i < nb; i++)
        if (!b[i].ok) {
            if (b[i].numeric) {
                v->verdict = "guard-reject";
                v->guard = "non-finite";
                snprintf(v->reason, sizeof v->reason, "non-finite loss: %s", b[i].error);
            } else {
                v->verdict = "blocked";
                snprintf(v->reason, sizeof v->reason, "the candidate failed to run: %s",
                         b[i].error);
            }
            return;
        }
    /* The figure of merit, measured first so that a guard's verdict carries it as evidence. A
     * lever that changes the batch is judged on epoch time (the same samples per epoch), as
     * samples/s is easy to inflate with the batch. */
    tune_objective j = obj == TUNE_OBJ_THROUGHPUT && batch_lever ? TUNE_OBJ_EPOCH : obj;
    v->judged = j;
    fom_delta(a, na, b, nb, j, min_noise, &v->d, &v->base_med, &v->cand_med);
    /* Non-finite or rising losses. */
    for (int i = 0; i < nb; i++) {
        const tune_meas *m = &b[i];
        for (int e = 0; e < m->nepochs; e++)
            if (!isfinite(m->loss[e]) || !isfinite(m->val_loss[e])) {
                v->verdict = "guard-reject";
                v->guard = "non-finite";
                snprintf(v->reason, sizeof v->reason, "non-finite loss at epoch %d", e + 1);
                return;
            }
    }
    int ne = a[0].nepochs;
    for (int i = 1; i < na; i++)
        ne = a[i].nepochs < ne ? a[i].nepochs : ne;
    for (int i = 0; i < nb; i++)
        ne = b[i].nepochs < ne ? b[i].nepochs : ne;
    if (ne >= 2) {
        double c0 = med_of(b, nb, g_loss, 0), c1 = med_of(b, nb, g_loss, ne - 1);
        double a0 = med_of(a, na, g_loss, 0), a1 = med_of(a, na, g_loss, ne - 1);
        if (c1 > c0 * (1 + conv_tol(b, nb, g_loss, ne - 1)) && a1 <= a0) {
            v->verdict = "guard-reject";
            v->guard = "rising-loss";
            snprintf(v->reason, sizeof v->reason,
                     "rising losses: training loss %.4g at epoch 1 -> %.4g at epoch %d while the "
                     "incumbent's falls (%.4g -> %.4g)", c0, c1, ne, a0, a1);
            return;
        }
    }
    /* Does less: compare's work check on the traces. */
    an_run ra[TUNE_MAX_REPEATS], rb[TUNE_MAX_REPEATS];
    int ka = 0, kb = 0;
    for (int i = 0; i < na && ka < TUNE_MAX_REPEATS; i++)
        ra[ka++] = a[i].run;
    for (int i = 0; i < nb && kb < TUNE_MAX_REPEATS; i++)
        rb[kb++] = b[i].run;
    an_compare_result cr;
    memset(&cr, 0, sizeof cr);
    an_compare_work(ra, (size_t)ka, rb, (size_t)kb, &cr);
    if (cr.does_less) {
        v->verdict = "guard-reject";
        v->guard = "does-less";
        snprintf(v->reason, sizeof v->reason, "does less, not faster: %s", cr.less);
        return;
    }
    /* Phantom throughput: the effective batch changed without a batch lever. */
    double sa = med_of(a, na, g_sps, 0), sb = med_of(b, nb, g_sps, 0);
    double pa = med_of(a, na, g_spe, 0), pb = med_of(b, nb, g_spe, 0);
    if (!batch_lever && sa > 0 && sb > 0 && fabs(sb / sa - 1) > 0.01) {
        v->verdict = "guard-reject";
        v->guard = "phantom-throughput";
        snprintf(v->reason, sizeof v->reason,
                 "phantom throughput: %.3g samples per step against the incumbent's %.3g "
                 "(%.3g vs %.3g samples per epoch): the effective batch changed",
                 sb, sa, pb, pa);
        return;
    }
    an_delta dt, de;
    double ta, tb, ea, eb;
    fom_delta(a, na, b, nb, TUNE_OBJ_THROUGHPUT, min_noise, &dt, &ta, &tb);
    fom_delta(a, na, b, nb, TUNE_OBJ_EPOCH, min_noise, &de, &ea, &eb);
    v->tput_gain = dt.med;
    v->epoch_gain = de.med;
    if (obj == TUNE_OBJ_THROUGHPUT && an_delta_sign(&dt) > 0 && an_delta_sign(&de) <= 0) {
        v->verdict = "guard-reject";
        v->guard = "phantom-throughput";
        snprintf(v->reason, sizeof v->reason,
                 "phantom throughput: samples/s %+.1f%% but epoch time not down (%+.1f%% better, "
                 "band +-%.1f%%)", 100 * dt.med, 100 * de.med, 100 * de.noise);
        return;
    }
    /* Degraded convergence: the candidate's losses above the incumbent's beyond the band. */
    static const struct {
        const char *name;
        double (*get)(const tune_meas *, int);
    } series[2] = {{"training loss", g_loss}, {"validation loss", g_vloss}};
    for (int s = 0; s < 2; s++)
        for (int e = 0; e < ne; e++) {
            double x = med_of(a, na, series[s].get, e), y = med_of(b, nb, series[s].get, e);
            double tol = conv_tol(a, na, series[s].get, e);
            if (x > 0 && y > x * (1 + tol)) {
                v->verdict = "guard-reject";
                v->guard = "convergence";
                /* A batch lever changes the optimisation itself (fewer, larger steps per
                 * epoch): per-epoch losses then compare unlike things, and only the time to
                 * the target can say whether it pays. */
                snprintf(v->reason, sizeof v->reason,
                         "degraded convergence: %s %.4g at epoch %d against the incumbent's %.4g "
                         "(%+.1f%%, band %.1f%%)%s", series[s].name, y, e + 1, x,
                         100 * (y / x - 1), 100 * tol,
                         batch_lever && obj != TUNE_OBJ_TTT
                             ? "; the lever changes the global batch, so fewer steps per epoch: "
                               "--objective time-to-target judges it on the time to the target"
                             : "");
                return;
            }
        }
    if (ne >= 1) {
        double x = med_of(a, na, g_dice, ne - 1), y = med_of(b, nb, g_dice, ne - 1);
        double tol = fmax(0.02, 2 * x * spread_of(a, na, g_dice, ne - 1));
        if (y < x - tol) {
            v->verdict = "guard-reject";
            v->guard = "convergence";
            snprintf(v->reason, sizeof v->reason,
                     "degraded convergence: validation Dice %.4f at epoch %d against the "
                     "incumbent's %.4f (band %.3f)", y, ne, x, tol);
            return;
        }
    }
    int sign = an_delta_sign(&v->d);
    if (isnan(v->d.med)) {
        v->verdict = "blocked";
        snprintf(v->reason, sizeof v->reason, "no %s measured on one side",
                 tune_objective_names[j]);
        return;
    }
    v->verdict = sign > 0 ? "accept" : sign < 0 ? "revert" : "inconclusive";
    int n = snprintf(v->reason, sizeof v->reason,
                     "%s %+.1f%% (range %+.1f%% .. %+.1f%%, band +-%.1f%%, %s)%s",
                     tune_objective_names[j], 100 * v->d.med, 100 * v->d.lo, 100 * v->d.hi,
                     100 * v->d.noise,
                     sign > 0   ? "better beyond the noise"
                     : sign < 0 ? "worse beyond the noise"
                                : "within the noise",
                     j != obj ? "; judged on epoch time because the lever changes the batch" : "");
    if (cr.datapath[0] && n > 0 && (size_t)n < sizeof v->reason)
        snprintf(v->reason + n, sizeof v->reason - (size_t)n, "; %s", cr.datapath);
}
