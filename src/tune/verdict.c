/* verdict: the verdict of one trial (see tune.h), in this order:
 *   blocked       a candidate run failed for another reason than its numbers;
 *   guard-reject  non-finite or rising losses; does less (compare's work check: epochs,
 *                 samples, bytes delivered, checkpoints); phantom throughput (samples per step
 *                 changed without a batch lever, or samples/s up while epoch time is not down);
 *                 degraded convergence (training or validation loss above the incumbent's
 *                 beyond its band at any epoch, or a lower final Dice);
 *   accept / revert / inconclusive  the objective's figure of merit, candidate vs incumbent,
 *                 from the A-B pairs (see tune_judge in tune.h): the 99% interval of the mean
 *                 change beyond 0 and the change beyond the noise floor, from at least
 *                 TUNE_MIN_PAIRS pairs; an inconclusive trial says how many more pairs would
 *                 likely decide it. */
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

/* The finite values get(&m[r], i) of runs m[0..n) into v (TUNE_MAX_REPEATS at most); their count. */
static int finite_of(const tune_meas *m, int n, double (*get)(const tune_meas *, int), int i,
                     double *v) {
    int k = 0;
    for (int r = 0; r < n && k < TUNE_MAX_REPEATS; r++) {
        double x = get(&m[r], i);
        if (isfinite(x))
            v[k++] = x;
    }
    return k;
}

static double g_fom(const tune_meas *m, int o) {
    return tune_fom(m, (tune_objective)o);
}

int tune_foms(const tune_meas *m, int n, tune_objective o, double *v) {
    return finite_of(m, n, g_fom, (int)o, v);
}

static double med_of(const tune_meas *m, int n, double (*get)(const tune_meas *, int), int i) {
    double v[TUNE_MAX_REPEATS];
    return an_median(v, (size_t)finite_of(m, n, get, i, v));
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

/* Two-sided 99% quantile of Student's t with df degrees of freedom (df >= 16: the
 * Cornish-Fisher expansion around the normal quantile, within 0.2% there). */
static double t99(int df) {
    static const double t[16] = {NAN,   63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499,
                                 3.355, 3.250,  3.169, 3.106, 3.055, 3.012, 2.977, 2.947};
    if (df < 1)
        return NAN;
    if (df < 16)
        return t[df];
    const double z = 2.5758293, n = df;
    return z + (z * z * z + z) / (4 * n) +
           (5 * pow(z, 5) + 16 * z * z * z + 3 * z) / (96 * n * n);
}

/* The change of the FOM from the pairs (a[i], b[i]), i < n (see tune_judge): med = exp(mean of
 * the oriented log ratios) - 1, lo..hi its 99% t interval, noise = the floor (so an_delta_sign
 * says "beyond the noise" when the interval excludes zero and the change exceeds the floor: the
 * interval is the statistical doubt, the floor the smallest change worth a verdict). am, bm: the
 * medians of each side. *pairs: the pairs with a FOM on both sides;
 * *more: the pairs that would likely decide an undecided change (-1: none would). */
static void paired_delta(const tune_meas *a, const tune_meas *b, int n, tune_objective o,
                         double floor_, an_delta *d, double *am, double *bm, int *pairs,
                         int *more) {
    double x[TUNE_MAX_REPEATS], y[TUNE_MAX_REPEATS], g[TUNE_MAX_REPEATS];
    int k = 0, kx = 0, ky = 0;
    const double sign = tune_fom_higher_better(o) ? 1 : -1;
    for (int i = 0; i < n && i < TUNE_MAX_REPEATS; i++) {
        double fa = tune_fom(&a[i], o), fb = tune_fom(&b[i], o);
        if (isfinite(fa) && fa > 0)
            x[kx++] = fa;
        if (isfinite(fb) && fb > 0)
            y[ky++] = fb;
        if (isfinite(fa) && isfinite(fb) && fa > 0 && fb > 0)
            g[k++] = sign * log(fb / fa);
    }
    *am = an_median(x, (size_t)kx);
    *bm = an_median(y, (size_t)ky);
    *pairs = k;
    *more = 0;
    d->med = d->lo = d->hi = d->noise = NAN;
    if (!k)
        return;
    double mean = 0, ss = 0;
    for (int i = 0; i < k; i++)
        mean += g[i] / k;
    for (int i = 0; i < k; i++)
        ss += (g[i] - mean) * (g[i] - mean);
    double sd = k > 1 ? sqrt(ss / (k - 1)) : NAN;
    double h = k > 1 ? t99(k - 1) * sd / sqrt((double)k) : INFINITY;
    d->med = exp(mean) - 1;
    d->lo = isfinite(h) ? exp(mean - h) - 1 : -INFINITY;
    d->hi = isfinite(h) ? exp(mean + h) - 1 : INFINITY;
    d->noise = floor_;
    if (an_delta_sign(d) != 0 && k >= TUNE_MIN_PAIRS)
        return;
    /* Undecided: a change within the floor stays so however many pairs are run; otherwise the
     * pairs at which t * sd / sqrt(pairs) falls below the change (the normal quantile, and at
     * least the minimum number of pairs). */
    if (fabs(d->med) <= floor_) {
        *more = -1;
    } else if (k > 1) {
        double want = sd > 0 ? pow(2.5758293 * sd / fabs(mean), 2) : 0;
        double need = fmax(ceil(want), TUNE_MIN_PAIRS);
        *more = need > k ? (int)fmin(need - k, 1e6) : 1;
    } else {
        *more = TUNE_MIN_PAIRS - k;
    }
}

/* The convergence guard's tolerance at one epoch: 2%, or twice the incumbent's own spread. */
static double conv_tol(const tune_meas *a, int na, double (*get)(const tune_meas *, int), int i) {
    return fmax(0.02, 2 * spread_of(a, na, get, i));
}

/* A run of either side that failed: blocked, or rejected for a non-finite loss. Returns 1 when
 * that decided the verdict. */
static int judge_failed_runs(const tune_meas *a, int na, const tune_meas *b, int nb,
                             tune_verdict *v) {
    for (int i = 0; i < na; i++)
        if (!a[i].ok) {
            v->verdict = "blocked";
            snprintf(v->reason, sizeof v->reason, "the incumbent failed to run: %s",
                     a[i].error);
            return 1;
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
            return 1;
        }
    return 0;
}

/* Guard: a non-finite training or validation loss of the candidate. */
static int guard_non_finite(const tune_meas *b, int nb, tune_verdict *v) {
    for (int i = 0; i < nb; i++) {
        const tune_meas *m = &b[i];
        for (int e = 0; e < m->nepochs; e++)
            if (!isfinite(m->loss[e]) || !isfinite(m->val_loss[e])) {
                v->verdict = "guard-reject";
                v->guard = "non-finite";
                snprintf(v->reason, sizeof v->reason, "non-finite loss at epoch %d", e + 1);
                return 1;
            }
    }
    return 0;
}

/* Guard: the candidate's training loss rises over the ne epochs every run has while the
 * incumbent's falls. */
static int guard_rising_loss(const tune_meas *a, int na, const tune_meas *b, int nb, int ne,
                             tune_verdict *v) {
    if (ne < 2)
        return 0;
    double c0 = med_of(b, nb, g_loss, 0), c1 = med_of(b, nb, g_loss, ne - 1);
    double a0 = med_of(a, na, g_loss, 0), a1 = med_of(a, na, g_loss, ne - 1);
    if (!(c1 > c0 * (1 + conv_tol(b, nb, g_loss, ne - 1)) && a1 <= a0))
        return 0;
    v->verdict = "guard-reject";
    v->guard = "rising-loss";
    snprintf(v->reason, sizeof v->reason,
             "rising losses: training loss %.4g at epoch 1 -> %.4g at epoch %d while the "
             "incumbent's falls (%.4g -> %.4g)", c0, c1, ne, a0, a1);
    return 1;
}

/* Guard: does less, by compare's work check on the traces (cr: its result, whose datapath
 * note the verdict's reason carries). */
static int guard_does_less(const tune_meas *a, int na, const tune_meas *b, int nb,
                           an_compare_result *cr, tune_verdict *v) {
    an_run ra[TUNE_MAX_REPEATS], rb[TUNE_MAX_REPEATS];
    int ka = 0, kb = 0;
    for (int i = 0; i < na && ka < TUNE_MAX_REPEATS; i++)
        ra[ka++] = a[i].run;
    for (int i = 0; i < nb && kb < TUNE_MAX_REPEATS; i++)
        rb[kb++] = b[i].run;
    memset(cr, 0, sizeof *cr);
    an_compare_work(ra, (size_t)ka, rb, (size_t)kb, cr);
    if (!cr->does_less)
        return 0;
    v->firm = 1;
    v->verdict = "guard-reject";
    v->guard = "does-less";
    snprintf(v->reason, sizeof v->reason, "does less, not faster: %s", cr->less);
    return 1;
}

/* Guard: phantom throughput, either the effective batch changed without a batch lever or
 * samples/s went up while the epoch time did not go down. Sets v's throughput and epoch gains
 * on the way. */
static int guard_phantom(const tune_meas *a, int na, const tune_meas *b, int nb,
                         tune_objective obj, int batch_lever, double min_noise,
                         tune_verdict *v) {
    double sa = med_of(a, na, g_sps, 0), sb = med_of(b, nb, g_sps, 0);
    double pa = med_of(a, na, g_spe, 0), pb = med_of(b, nb, g_spe, 0);
    if (!batch_lever && sa > 0 && sb > 0 && fabs(sb / sa - 1) > 0.01) {
        v->firm = 1;
        v->verdict = "guard-reject";
        v->guard = "phantom-throughput";
        snprintf(v->reason, sizeof v->reason,
                 "phantom throughput: %.3g samples per step against the incumbent's %.3g "
                 "(%.3g vs %.3g samples per epoch): the effective batch changed",
                 sb, sa, pb, pa);
        return 1;
    }
    const int np = na < nb ? na : nb;
    an_delta dt, de;
    double ta, tb, ea, eb;
    int pt, pe, mt, me;
    paired_delta(a, b, np, TUNE_OBJ_THROUGHPUT, min_noise, &dt, &ta, &tb, &pt, &mt);
    paired_delta(a, b, np, TUNE_OBJ_EPOCH, min_noise, &de, &ea, &eb, &pe, &me);
    v->tput_gain = dt.med;
    v->epoch_gain = de.med;
    if (obj == TUNE_OBJ_THROUGHPUT && pt >= TUNE_MIN_PAIRS && an_delta_sign(&dt) > 0 &&
        an_delta_sign(&de) <= 0) {
        v->verdict = "guard-reject";
        v->guard = "phantom-throughput";
        snprintf(v->reason, sizeof v->reason,
                 "phantom throughput: samples/s %+.1f%% but epoch time not down (%+.1f%% better, "
                 "band +-%.1f%%)", 100 * dt.med, 100 * de.med, 100 * de.noise);
        return 1;
    }
    return 0;
}

/* Guard: degraded convergence, the candidate's losses above the incumbent's beyond the band at
 * some epoch, or its last validation Dice below. */
static int guard_convergence(const tune_meas *a, int na, const tune_meas *b, int nb, int ne,
                             tune_objective obj, int batch_lever, tune_verdict *v) {
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
                return 1;
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
            return 1;
        }
    }
    return 0;
}

/* No guard spoke: the verdict from the figure of merit's paired change (v->d) on objective j
 * (obj: the one asked for), with compare's datapath note when it has one. */
static void judge_fom(tune_objective obj, tune_objective j, double min_noise,
                      const char *datapath, tune_verdict *v) {
    int sign = an_delta_sign(&v->d);
    if (isnan(v->d.med)) {
        v->verdict = "blocked";
        snprintf(v->reason, sizeof v->reason, "no %s measured on one side",
                 tune_objective_names[j]);
        return;
    }
    const char *batch_note = j != obj ? "; judged on epoch time because the lever changes the "
                                        "batch" : "";
    int n;
    if (v->pairs < TUNE_MIN_PAIRS) {
        /* One or two pairs say nothing about the noise: no verdict from them. */
        v->verdict = "inconclusive";
        n = snprintf(v->reason, sizeof v->reason,
                     "%s %+.1f%% over %d pair%s: a verdict needs at least %d pairs (the noise "
                     "band is measured from their spread); run %d more%s",
                     tune_objective_names[j], 100 * v->d.med, v->pairs, v->pairs == 1 ? "" : "s",
                     TUNE_MIN_PAIRS, TUNE_MIN_PAIRS - v->pairs, batch_note);
    } else {
        v->verdict = sign > 0 ? "accept" : sign < 0 ? "revert" : "inconclusive";
        char more[200] = "";
        if (!sign && v->more_pairs < 0)
            snprintf(more, sizeof more, "; the change is within the %.1f%% floor: more pairs "
                     "would not make it a verdict", 100 * min_noise);
        else if (!sign)
            snprintf(more, sizeof more, "; about %d more pair%s would likely decide it "
                     "(--max-repeats)", v->more_pairs, v->more_pairs == 1 ? "" : "s");
        n = snprintf(v->reason, sizeof v->reason,
                     "%s %+.1f%% (99%% interval %+.1f%% .. %+.1f%% over %d pairs, floor "
                     "+-%.1f%%, %s)%s%s",
                     tune_objective_names[j], 100 * v->d.med, 100 * v->d.lo, 100 * v->d.hi,
                     v->pairs, 100 * v->d.noise,
                     sign > 0   ? "better beyond the noise"
                     : sign < 0 ? "worse beyond the noise"
                                : "within the noise",
                     more, batch_note);
    }
    if (datapath[0] && n > 0 && (size_t)n < sizeof v->reason)
        snprintf(v->reason + n, sizeof v->reason - (size_t)n, "; %s", datapath);
}

void tune_judge(const tune_meas *a, int na, const tune_meas *b, int nb, tune_objective obj,
                int batch_lever, double min_noise, tune_verdict *v) {
    memset(v, 0, sizeof *v);
    v->guard = "";
    v->judged = obj;
    v->base_med = v->cand_med = NAN;
    v->d.med = v->d.lo = v->d.hi = v->d.noise = NAN;
    v->tput_gain = v->epoch_gain = NAN;
    v->firm = 1; /* until the noise decides */
    if (judge_failed_runs(a, na, b, nb, v))
        return;
    /* The figure of merit, measured first so that a guard's verdict carries it as evidence. A
     * lever that changes the batch is judged on epoch time (the same samples per epoch), as
     * samples/s is easy to inflate with the batch. */
    tune_objective j = obj == TUNE_OBJ_THROUGHPUT && batch_lever ? TUNE_OBJ_EPOCH : obj;
    v->judged = j;
    const int np = na < nb ? na : nb;
    paired_delta(a, b, np, j, min_noise, &v->d, &v->base_med, &v->cand_med, &v->pairs,
                 &v->more_pairs);
    if (guard_non_finite(b, nb, v))
        return;
    /* The epochs every run has. */
    int ne = a[0].nepochs;
    for (int i = 1; i < na; i++)
        ne = a[i].nepochs < ne ? a[i].nepochs : ne;
    for (int i = 0; i < nb; i++)
        ne = b[i].nepochs < ne ? b[i].nepochs : ne;
    v->firm = 0;
    an_compare_result cr;
    if (guard_rising_loss(a, na, b, nb, ne, v) || guard_does_less(a, na, b, nb, &cr, v) ||
        guard_phantom(a, na, b, nb, obj, batch_lever, min_noise, v) ||
        guard_convergence(a, na, b, nb, ne, obj, batch_lever, v))
        return;
    judge_fom(obj, j, min_noise, cr.datapath, v);
}
