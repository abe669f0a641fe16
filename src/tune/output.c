/* output: what a tune leaves in --out (see tune.h), every file written atomically:
 *   tune.json          the FOM definition, machine, baseline, discriminator, every trial with
 *                      its runs (host, CPU, layout, start time, folders, traces), best;
 *   lever_catalog.yaml every lever tried or blocked, with its evidence, in the format
 *                      `scaffold analyze --catalog` reads;
 *   best.yml           the accepted configuration overrides, usable as `-c best.yml`;
 *   report.html        the trial table, a FOM-per-trial chart with the bands, the analyzer's
 *                      checklist and proposals for the baseline and the best setting;
 *   tune.svg           that chart alone (for a README). */
#include "tune/tune.h"

#include "analyze/out.h"
#include "analyze/report.h"
#include "core/err.h"
#include "core/fsutil.h"
#include "train/bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *fom_unit(tune_objective o) {
    return o == TUNE_OBJ_THROUGHPUT ? "samples/s" : "s";
}

static const char *fom_definition(tune_objective o) {
    switch (o) {
    case TUNE_OBJ_THROUGHPUT:
        return "training samples per second over the steady epochs (all but the first) of a "
               "capped run, warmup and dataset generation excluded; samples counted from the "
               "trace (the batch_size of every fetch), epoch durations from train_stats.csv "
               "(maximum over ranks, validation included)";
    case TUNE_OBJ_TTT:
        return "the benchmark's time to target: training wall time until the validation Dice "
               "reaches target_dice, all I/O included, dataset generation and warmup excluded "
               "(lower is better)";
    case TUNE_OBJ_EPOCH:
        return "the median steady epoch duration (all but the first epoch) from "
               "train_stats.csv (lower is better)";
    }
    return "";
}

/* Median and band (half the relative spread, at least the floor) of a side's FOM. */
static void side_stats(const tune_meas *m, int n, tune_objective o, double floor_, double *med,
                       double *band) {
    double v[TUNE_MAX_REPEATS];
    int k = tune_foms(m, n, o, v);
    *med = an_median(v, (size_t)k);
    *band = k ? fmax(floor_, 0.5 * (v[k - 1] - v[0]) / *med) : NAN;
}

static void runs_json(an_jw *w, const char *key, const tune_meas *m, int n, tune_objective o) {
    an_jw_arr(w, key);
    for (int i = 0; i < n; i++) {
        const tune_meas *r = &m[i];
        an_jw_obj(w, NULL);
        an_jw_bool(w, "ok", r->ok);
        if (!r->ok)
            an_jw_str(w, "error", r->error);
        an_jw_num(w, "fom", tune_fom(r, o));
        an_jw_num(w, "throughput_samples_per_s", r->throughput);
        an_jw_num(w, "epoch_s", r->epoch_s);
        an_jw_num(w, "time_to_target_s", r->ttt_s);
        an_jw_bool(w, "converged", r->converged);
        an_jw_i64(w, "epochs", r->nepochs);
        an_jw_num(w, "samples_per_epoch", r->samples_per_epoch);
        an_jw_num(w, "samples_per_step", r->samples_per_step);
        an_jw_num(w, "batches_per_epoch", r->batches_per_epoch);
        an_jw_num(w, "final_train_loss", r->nepochs ? r->loss[r->nepochs - 1] : NAN);
        an_jw_num(w, "final_val_dice", r->nepochs ? r->val_dice[r->nepochs - 1] : NAN);
        an_jw_num(w, "wall_s", r->wall_s);
        an_jw_num(w, "cpu_wait", r->cpu_wait); /* over BENCH_BUSY_WAIT: a busy host's run */
        an_jw_str(w, "host", r->host);
        an_jw_str(w, "cpu", r->cpu);
        an_jw_str(w, "layout", r->layout);
        an_jw_str(w, "started", r->started);
        an_jw_str(w, "run_dir", r->run_dir);
        an_jw_str(w, "trace_dir", r->trace_dir);
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
}

static void foms_json(an_jw *w, const char *key, const tune_meas *m, int n, tune_objective o) {
    an_jw_arr(w, key);
    for (int i = 0; i < n; i++)
        an_jw_num(w, NULL, tune_fom(&m[i], o));
    an_jw_end(w, ']');
}

static void analysis_json(an_jw *w, const char *key, const tune_analysis *a) {
    an_jw_obj(w, key);
    an_jw_bool(w, "ok", a->ok);
    if (!a->ok)
        an_jw_str(w, "error", a->error);
    an_jw_arr(w, "checklist");
    for (int d = 0; a->ok && d < 12; d++) {
        an_jw_obj(w, NULL);
        an_jw_i64(w, "dimension", a->check[d].dim);
        an_jw_str(w, "name", a->check[d].name);
        an_jw_bool(w, "applicable", a->check[d].applicable);
        an_jw_str(w, "verdict", a->check[d].verdict);
        an_jw_num(w, "impact_pct", a->check[d].impact_pct);
        an_jw_str(w, "reason", a->check[d].reason);
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
    an_jw_arr(w, "proposals");
    for (int i = 0; i < a->nprops; i++) {
        an_jw_obj(w, NULL);
        an_jw_str(w, "strategy", a->prop[i].key);
        an_jw_str(w, "name", a->prop[i].name);
        an_jw_i64(w, "dimension", a->prop[i].dim);
        an_jw_num(w, "app_impact_pct", a->prop[i].app_pct);
        an_jw_num(w, "system_impact_pct", a->prop[i].sys_pct);
        an_jw_num(w, "weighted_score", a->prop[i].score);
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
    an_jw_num(w, "loader_wait_share", a->loader_wait_share);
    an_jw_num(w, "exposed_io_share", a->io_share);
    an_jw_num(w, "checkpoint_share", a->ckpt_share);
    an_jw_end(w, '}');
}

void tune_best_of(const tune_state *S, tune_best *b) {
    memset(b, 0, sizeof *b);
    double band;
    side_stats(S->baseline->a, S->baseline->na, S->o->objective, S->o->noise, &b->base, &band);
    b->cand = b->base;
    b->d.med = b->d.lo = b->d.hi = 0;
    b->d.noise = band;
    b->pairs = 0;
    b->verdict = "baseline";
    snprintf(b->basis, sizeof b->basis, "the baseline");
    b->tried = S->incumbent.n ? &S->incumbent : NULL;
    if (S->final && S->final->done) {
        /* The final check decides, and its own pairs give both numbers. */
        b->checked = 1;
        b->base = S->final->v.base_med;
        b->cand = S->final->v.cand_med;
        b->d = S->final->v.d;
        b->pairs = S->final->v.pairs;
        b->verdict = S->final->v.verdict;
        b->set = !strcmp(b->verdict, "accept") ? &S->incumbent : NULL;
        return;
    }
    for (int i = S->ntrials - 1; i >= 0; i--)
        if (S->trials[i].lever >= 0 && !strcmp(S->trials[i].v.verdict, "accept")) {
            /* Stopped at the budget before the final check: the last accepted trial, against
             * the incumbent it replaced, said so. */
            const tune_trial *t = &S->trials[i];
            b->set = &S->incumbent;
            b->base = t->v.base_med;
            b->cand = t->v.cand_med;
            b->d = t->v.d;
            b->pairs = t->v.pairs;
            b->verdict = "unconfirmed";
            snprintf(b->basis, sizeof b->basis, "the incumbent of trial %s", t->id);
            return;
        }
}

/* One sentence on what the tune recommends, for best.yml's header, report.html and stdout. */
static void best_sentence(const tune_state *S, const tune_best *b, char *buf, size_t cap) {
    tune_objective ob = S->o->objective;
    char tried[600] = "", set[600] = "";
    if (b->tried)
        tune_setting_str(b->tried, &S->lv, tried, sizeof tried);
    if (b->set)
        tune_setting_str(b->set, &S->lv, set, sizeof set);
    const char *on = tune_objective_names[ob], *u = fom_unit(ob);
    if (!b->tried) {
        snprintf(buf, cap, "no lever accepted: keep the baseline (%s %.4g %s)", on, b->base, u);
    } else if (b->checked && b->set) {
        snprintf(buf, cap, "%s: %s %.4g %s against %.4g at the baseline (%+.1f%%, 99%% interval "
                 "%+.1f%% .. %+.1f%%, floor +-%.1f%%, accept; final paired check, %d pairs)",
                 set, on, b->cand, u, b->base, 100 * b->d.med, 100 * b->d.lo, 100 * b->d.hi,
                 100 * b->d.noise, b->pairs);
    } else if (b->checked) {
        snprintf(buf, cap, "no override kept: the accepted setting %s was not confirmed by the "
                 "final paired check against the baseline (%s %.4g %s against %.4g, %+.1f%%, "
                 "99%% interval %+.1f%% .. %+.1f%%, %s over %d pairs); keep the baseline",
                 tried, on, b->cand, u, b->base, 100 * b->d.med, 100 * b->d.lo, 100 * b->d.hi,
                 b->verdict, b->pairs);
    } else {
        snprintf(buf, cap, "%s, unconfirmed: stopped at the budget before the final paired check "
                 "against the baseline; its last trial measured %s %.4g %s against %.4g for %s "
                 "(%+.1f%%)", set, on, b->cand, u, b->base, b->basis, 100 * b->d.med);
    }
}

void tune_print_summary(const tune_state *S, FILE *out) {
    int cnt[5] = {0};
    static const char *const names[5] = {"accept", "revert", "guard-reject", "inconclusive",
                                         "blocked"};
    int ntr = 0;
    for (int i = 0; i < S->ntrials; i++) {
        const tune_trial *t = &S->trials[i];
        if (t->lever < 0)
            continue;
        ntr++;
        for (int k = 0; k < 5; k++)
            if (!strcmp(t->v.verdict, names[k]))
                cnt[k]++;
    }
    tune_best b;
    tune_best_of(S, &b);
    char sent[1600], el[32];
    best_sentence(S, &b, sent, sizeof sent);
    double s = S->elapsed_s;
    if (s < 90)
        snprintf(el, sizeof el, "%.0fs", s);
    else if (s < 5400)
        snprintf(el, sizeof el, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else
        snprintf(el, sizeof el, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
    fprintf(out, "tune: %s; %d trials: %d accepted, %d reverted, %d guard-rejected, "
                 "%d inconclusive, %d blocked; bottleneck %s; %s in %s (%d runs); out %s\n",
            sent, ntr, cnt[0], cnt[1], cnt[2], cnt[3], cnt[4], S->cls ? S->cls : "?",
            S->stopped && !strcmp(S->stopped, "budget") ? "stopped at the budget"
                                                        : "every lever tried",
            el, S->runs_done, S->out);
    if (S->runs_busy)
        fprintf(out, "tune: %d of the %d runs shared their cores (threads waiting over %.0f%% of "
                     "the time for a CPU): the verdicts rest on a busy host's times\n",
                S->runs_busy, S->runs_done, 100 * BENCH_BUSY_WAIT);
    fflush(out);
}

/* tune.json: what the tune judged, on which machine, with which settings. */
static void json_setup(an_jw *w, const tune_state *S) {
    const tune_objective ob = S->o->objective;
    an_jw_str(w, "tool", "scaffold tune");
    an_jw_str(w, "objective", tune_objective_names[ob]);
    an_jw_obj(w, "fom");
    an_jw_str(w, "definition", fom_definition(ob));
    an_jw_str(w, "unit", fom_unit(ob));
    an_jw_bool(w, "higher_is_better", tune_fom_higher_better(ob));
    an_jw_str(w, "also_reported", "throughput (samples/s) and steady epoch time for every run; "
                                   "time to target when a run converged");
    an_jw_str(w, "batch_levers", "a lever that changes the batch (local_batch_size, the rank "
                                  "count) is judged on epoch time");
    an_jw_end(w, '}');
    an_jw_obj(w, "machine");
    an_jw_str(w, "host", S->host);
    an_jw_str(w, "cpu", S->cpu);
    an_jw_i64(w, "cpus", S->ncpu);
    an_jw_end(w, '}');
    an_jw_obj(w, "settings");
    an_jw_i64(w, "repeats", S->o->repeats);
    an_jw_i64(w, "max_repeats", S->o->max_repeats);
    an_jw_i64(w, "min_pairs_for_a_verdict", TUNE_MIN_PAIRS);
    an_jw_i64(w, "epochs_cap", S->L.epochs_cap);
    an_jw_num(w, "noise_floor", S->o->noise);
    an_jw_num(w, "budget_s", S->o->budget_s > 0 ? S->o->budget_s : NAN);
    char lay[32];
    snprintf(lay, sizeof lay, "%dx%d", S->ranks, S->threads);
    an_jw_str(w, "base_layout_ranks_x_threads", lay);
    an_jw_str(w, "launcher", S->o->launcher ? S->o->launcher : (S->ranks > 1 ? "mpirun" : ""));
    an_jw_str(w, "levers_file", S->o->levers_file ? S->o->levers_file : "");
    an_jw_arr(w, "config_args");
    for (int i = 1; i < S->o->cfg_argc; i++)
        an_jw_str(w, NULL, S->o->cfg_argv[i]);
    an_jw_end(w, ']');
    an_jw_end(w, '}');
}

/* tune.json: the baseline's runs and figure of merit. */
static void json_baseline(an_jw *w, const tune_state *S) {
    const tune_objective ob = S->o->objective;
    const tune_trial *b = S->baseline;
    double bm, bb;
    side_stats(b->a, b->na, ob, S->o->noise, &bm, &bb);
    an_jw_obj(w, "baseline");
    an_jw_str(w, "config", "the configuration arguments in settings.config_args");
    foms_json(w, "fom", b->a, b->na, ob);
    an_jw_num(w, "fom_median", bm);
    an_jw_num(w, "fom_band", bb);
    foms_json(w, "throughput", b->a, b->na, TUNE_OBJ_THROUGHPUT);
    foms_json(w, "epoch_s", b->a, b->na, TUNE_OBJ_EPOCH);
    foms_json(w, "time_to_target_s", b->a, b->na, TUNE_OBJ_TTT);
    runs_json(w, "runs", b->a, b->na, ob);
    an_jw_end(w, '}');
}

/* tune.json: the discriminator (bottleneck class, probes) and the lever order it gave. */
static void json_discriminator(an_jw *w, const tune_state *S) {
    const tune_objective ob = S->o->objective;
    an_jw_obj(w, "discriminator");
    an_jw_str(w, "class", S->cls ? S->cls : "");
    an_jw_str(w, "reason", S->cls_reason);
    an_jw_num(w, "thread_speedup", S->thread_speedup);
    an_jw_num(w, "precision_speedup_bf16_over_fp32", S->precision_speedup);
    an_jw_num(w, "loader_wait_share", S->base_an.loader_wait_share);
    an_jw_num(w, "exposed_io_share", S->base_an.io_share);
    an_jw_num(w, "checkpoint_share", S->base_an.ckpt_share);
    if (S->probe_threads)
        runs_json(w, "threads_probe", S->probe_threads->a, 1, ob);
    if (S->probe_precision)
        runs_json(w, "precision_probe", S->probe_precision->a, 1, ob);
    an_jw_arr(w, "lever_order");
    for (int k = 0; k < TUNE_MAX_LEVERS && S->order[k] >= 0; k++)
        an_jw_str(w, NULL, S->lv.l[S->order[k]].name);
    an_jw_end(w, ']');
    an_jw_end(w, '}');
}

/* tune.json: the analyzer's proposals mapped to levers, and the levers. */
static void json_levers(an_jw *w, const tune_state *S) {
    an_jw_arr(w, "proposals");
    for (int i = 0; i < S->nmapped; i++) {
        an_jw_obj(w, NULL);
        an_jw_str(w, "strategy", S->mapped[i].key);
        if (S->mapped[i].lever[0])
            an_jw_str(w, "lever", S->mapped[i].lever);
        else
            an_jw_str(w, "needs_system_change", S->mapped[i].why);
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
    an_jw_arr(w, "levers");
    for (int i = 0; i < S->lv.n; i++) {
        const tune_lever *l = &S->lv.l[i];
        if (!strcmp(l->origin, "discriminator probe"))
            continue;
        an_jw_obj(w, NULL);
        an_jw_str(w, "name", l->name);
        an_jw_arr(w, "values");
        for (int v = 0; v < l->nvalues; v++)
            an_jw_str(w, NULL, l->values[v]);
        an_jw_end(w, ']');
        an_jw_i64(w, "dimension", l->dimension);
        an_jw_str(w, "origin", l->origin);
        if (l->blocked[0])
            an_jw_str(w, "blocked", l->blocked);
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
}

/* tune.json: every finished trial with its verdict and runs. */
static void json_trials(an_jw *w, const tune_state *S) {
    const tune_objective ob = S->o->objective;
    an_jw_arr(w, "trials");
    for (int i = 0; i < S->ntrials; i++) {
        const tune_trial *t = &S->trials[i];
        if (t->lever < 0 || !t->done)
            continue;
        char set[600];
        tune_setting_str(&t->cand, &S->lv, set, sizeof set);
        an_jw_obj(w, NULL);
        an_jw_str(w, "id", t->id);
        an_jw_str(w, "lever", S->lv.l[t->lever].name);
        an_jw_str(w, "value", t->value);
        an_jw_i64(w, "dimension", S->lv.l[t->lever].dimension);
        an_jw_str(w, "setting", set);
        an_jw_str(w, "verdict", t->v.verdict);
        an_jw_str(w, "guard", t->v.guard);
        an_jw_str(w, "reason", t->v.reason);
        an_jw_str(w, "judged_on", tune_objective_names[t->v.judged]);
        double am, ab, cm, cb;
        side_stats(t->a, t->na, ob, S->o->noise, &am, &ab);
        side_stats(t->b, t->nb, ob, S->o->noise, &cm, &cb);
        an_jw_num(w, "fom_median", cm);
        an_jw_num(w, "fom_band", cb);
        an_jw_num(w, "incumbent_fom_median", am);
        an_jw_num(w, "incumbent_fom_band", ab);
        an_jw_num(w, "gain", t->v.d.med);
        an_jw_num(w, "gain_low", t->v.d.lo);
        an_jw_num(w, "gain_high", t->v.d.hi);
        an_jw_num(w, "noise_band", t->v.d.noise);
        an_jw_i64(w, "pairs", t->v.pairs);
        if (!strcmp(t->v.verdict, "inconclusive"))
            an_jw_i64(w, "more_pairs_needed", t->v.more_pairs);
        an_jw_num(w, "throughput_gain", t->v.tput_gain);
        an_jw_num(w, "epoch_time_gain", t->v.epoch_gain);
        runs_json(w, "incumbent_runs", t->a, t->na, ob);
        runs_json(w, "candidate_runs", t->b, t->nb, ob);
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
}

/* tune.json: the best setting, the overrides recommended (none when the final check did not
 * confirm them). */
static void json_best(an_jw *w, const tune_state *S) {
    const tune_objective ob = S->o->objective;
    tune_best bst;
    tune_best_of(S, &bst);
    char sent[1600];
    best_sentence(S, &bst, sent, sizeof sent);
    an_jw_obj(w, "best");
    an_jw_obj(w, "overrides");
    for (int i = 0; bst.set && i < bst.set->n; i++)
        an_jw_str(w, S->lv.l[bst.set->lever[i]].name, bst.set->value[i]);
    an_jw_end(w, '}');
    an_jw_obj(w, "accepted_in_trials");
    for (int i = 0; bst.tried && i < bst.tried->n; i++)
        an_jw_str(w, S->lv.l[bst.tried->lever[i]].name, bst.tried->value[i]);
    an_jw_end(w, '}');
    an_jw_bool(w, "confirmed", bst.set && bst.checked);
    an_jw_num(w, "fom_median", bst.cand);
    an_jw_num(w, "baseline_fom_median", bst.base);
    an_jw_str(w, "compared_with", bst.basis);
    an_jw_num(w, "gain", bst.d.med);
    an_jw_num(w, "gain_low", bst.d.lo);
    an_jw_num(w, "gain_high", bst.d.hi);
    an_jw_num(w, "noise_band", bst.d.noise);
    an_jw_i64(w, "pairs", bst.pairs);
    an_jw_str(w, "verdict_vs_baseline", bst.verdict);
    an_jw_str(w, "summary", sent);
    if (S->final && S->final->done) {
        runs_json(w, "baseline_runs", S->final->a, S->final->na, ob);
        runs_json(w, "best_runs", S->final->b, S->final->nb, ob);
    }
    an_jw_end(w, '}');
}

static void write_json(const tune_state *S, FILE *f) {
    an_jw w;
    an_jw_init(&w, f);
    an_jw_obj(&w, NULL);
    json_setup(&w, S);
    json_baseline(&w, S);
    json_discriminator(&w, S);
    json_levers(&w, S);
    json_trials(&w, S);
    an_jw_str(&w, "stopped", S->stopped ? S->stopped : "complete");
    an_jw_str(&w, "untried", S->untried);
    json_best(&w, S);
    an_jw_obj(&w, "analysis");
    analysis_json(&w, "baseline", &S->base_an);
    analysis_json(&w, "best", &S->best_an);
    an_jw_end(&w, '}');
    an_jw_num(&w, "elapsed_s", S->elapsed_s);
    an_jw_i64(&w, "runs", S->runs_done);
    an_jw_i64(&w, "runs_busy", S->runs_busy);
    an_jw_end(&w, '}');
    fputc('\n', f);
}

/* ------------------------------------------------------------------ lever_catalog.yaml */

static void yq(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if (*s == '\n')
            fputs("\\n", f);
        else if ((unsigned char)*s < 0x20)
            fputc(' ', f);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void ynum(FILE *f, const char *key, double v) {
    if (isfinite(v))
        fprintf(f, "    %s: %.6g\n", key, v);
}

static void write_catalog(const tune_state *S, FILE *f) {
    fputs("# scaffold tune: every lever tried or blocked, with its evidence. Read by\n"
          "# `scaffold analyze --catalog FILE` to mark checklist dimensions applied & measured.\n",
          f);
    fputs("version: 1\nhost: ", f);
    yq(f, S->host);
    fputs("\ncpu: ", f);
    yq(f, S->cpu);
    fprintf(f, "\nobjective: %s\nlevers:\n", tune_objective_names[S->o->objective]);
    for (int i = 0; i < S->ntrials; i++) {
        const tune_trial *t = &S->trials[i];
        if (t->lever < 0 || !t->done)
            continue;
        const tune_lever *l = &S->lv.l[t->lever];
        fputs("  - name: ", f);
        yq(f, l->name);
        fputs("\n    value: ", f);
        yq(f, t->value);
        fprintf(f, "\n    dimension: %d\n    verdict: %s\n", l->dimension, t->v.verdict);
        ynum(f, "fom_baseline", t->v.base_med);
        ynum(f, "fom_candidate", t->v.cand_med);
        ynum(f, "gain", t->v.d.med);
        ynum(f, "band", t->v.d.noise);
        fputs("    guard: ", f);
        yq(f, t->v.guard);
        fputs("\n    reason: ", f);
        char reason[900];
        snprintf(reason, sizeof reason, "%s%s", t->v.reason,
                 l->cls == TUNE_C_COMPUTE && l->dimension == 12
                     ? " (a compute lever, filed under dimension 12)"
                     : "");
        yq(f, reason);
        fputc('\n', f);
    }
    for (int i = 0; i < S->lv.n; i++) {
        const tune_lever *l = &S->lv.l[i];
        if (!l->blocked[0] || !strcmp(l->origin, "discriminator probe"))
            continue;
        fputs("  - name: ", f);
        yq(f, l->name);
        fputs("\n    value: ", f);
        yq(f, l->nvalues ? l->values[0] : "");
        fprintf(f, "\n    dimension: %d\n    verdict: blocked\n    guard: \"\"\n    reason: ",
                l->dimension);
        yq(f, l->blocked);
        fputc('\n', f);
    }
}

/* ------------------------------------------------------------------ best.yml */

static void write_best(const tune_state *S, FILE *f) {
    tune_best b;
    tune_best_of(S, &b);
    char sent[1600];
    best_sentence(S, &b, sent, sizeof sent);
    const tune_setting none = {0};
    const tune_setting *set = b.set ? b.set : &none;
    fprintf(f, "# scaffold tune: the recommended overrides (use with -c <your config> -c "
               "best.yml), on %s (%s).\n# ", S->host, S->cpu);
    /* The sentence, wrapped as comment lines. */
    for (const char *p = sent; *p;) {
        size_t n = strlen(p), cut = n;
        if (n > 96) {
            cut = 96;
            while (cut > 40 && p[cut] != ' ')
                cut--;
        }
        fwrite(p, 1, cut, f);
        p += cut;
        while (*p == ' ')
            p++;
        fputs(*p ? "\n# " : ".\n", f);
    }
    int keys = 0;
    for (int i = 0; i < set->n; i++) {
        const tune_lever *l = &S->lv.l[set->lever[i]];
        if (l->kind == TUNE_L_ENV)
            fprintf(f, "# environment: %s=%s\n", l->name + 4, set->value[i]);
        else if (l->kind == TUNE_L_LAUNCH)
            fprintf(f, "# launch: ranks x threads %s (mpirun -n R, OMP_NUM_THREADS=T)\n",
                    set->value[i]);
    }
    for (int i = 0; i < set->n; i++) {
        const tune_lever *l = &S->lv.l[set->lever[i]];
        if (l->kind != TUNE_L_CONFIG)
            continue;
        const char *v = set->value[i];
        if (strchr(v, ','))
            fprintf(f, "%s: [%s]\n", l->name, v);
        else {
            char *end;
            strtod(v, &end);
            fprintf(f, "%s: ", l->name);
            if (*v && !*end)
                fputs(v, f);
            else
                yq(f, v);
            fputc('\n', f);
        }
        keys++;
    }
    if (!keys)
        fputs("{}\n", f);
}

/* ------------------------------------------------------------------ report.html */

static const char *verdict_color(const char *v) {
    return !strcmp(v, "accept")         ? "#2e7d32"
           : !strcmp(v, "revert")       ? "#c62828"
           : !strcmp(v, "guard-reject") ? "#ef6c00"
           : !strcmp(v, "inconclusive") ? "#607d8b"
                                        : "#9e9e9e";
}

static void minmax(const tune_meas *m, int n, tune_objective o, double *lo, double *hi) {
    for (int i = 0; i < n; i++) {
        double x = tune_fom(&m[i], o);
        if (isfinite(x)) {
            *lo = fmin(*lo, x);
            *hi = fmax(*hi, x);
        }
    }
}

/* FOM per trial: the incumbent's median with its band (grey), the candidate's runs as a range
 * and its median as a dot coloured by the verdict. */
static void chart(FILE *o, const tune_state *S) {
    tune_objective ob = S->o->objective;
    const tune_trial *col[TUNE_MAX_TRIALS];
    int n = 0;
    for (int i = 0; i < S->ntrials; i++)
        if ((S->trials[i].lever >= 0 || &S->trials[i] == S->final) && S->trials[i].done)
            col[n++] = &S->trials[i];
    double lo = INFINITY, hi = -INFINITY;
    minmax(S->baseline->a, S->baseline->na, ob, &lo, &hi);
    for (int i = 0; i < n; i++) {
        minmax(col[i]->a, col[i]->na, ob, &lo, &hi);
        minmax(col[i]->b, col[i]->nb, ob, &lo, &hi);
    }
    if (!isfinite(lo)) {
        lo = 0;
        hi = 1;
    }
    double pad = fmax((hi - lo) * 0.15, fabs(hi) * 0.02 + 1e-9);
    lo -= pad;
    hi += pad;
    /* LB: the band below the plot for the trial labels, slanted ("t01 lever=value"). */
    const int L = 70, T = 20, H = 260, step = 46, LB = 130;
    int PW = (n + 1) * step + 20; /* the plot's width; the image adds room for the legend and
                                   * the last slanted label */
    if (PW < 530)
        PW = 530;
    int W = L + PW + 200;
#define Y(v) (T + H - (int)lround(((v) - lo) / (hi - lo) * H))
    fprintf(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "font-family=\"sans-serif\" role=\"img\" aria-label=\"FOM per trial\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
            W, T + H + LB + 70);
    fprintf(o, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" "
               "stroke=\"#ccc\"/>\n", L, T, PW, H);
    for (int k = 0; k <= 4; k++) {
        double v = lo + (hi - lo) * k / 4;
        fprintf(o, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\">%.4g</text>"
                   "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#eee\"/>\n",
                L - 4, Y(v) + 3, v, L, Y(v), L + PW, Y(v));
    }
    fprintf(o, "<text x=\"14\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\" "
               "transform=\"rotate(-90 14 %d)\">%s (%s)</text>\n",
            T + H / 2, T + H / 2, tune_objective_names[ob], fom_unit(ob));
    double bm, bb;
    side_stats(S->baseline->a, S->baseline->na, ob, S->o->noise, &bm, &bb);
    int x = L + step / 2 + 10;
    fprintf(o, "<rect x=\"%d\" y=\"%d\" width=\"16\" height=\"%d\" fill=\"#bbb\" opacity=\"0.5\"/>"
               "<circle cx=\"%d\" cy=\"%d\" r=\"4\" fill=\"#333\"/>"
               "<text x=\"%d\" y=\"%d\" font-size=\"10\" transform=\"rotate(40 %d %d)\">"
               "baseline</text>\n",
            x - 8, Y(bm * (1 + bb)), Y(bm * (1 - bb)) - Y(bm * (1 + bb)), x, Y(bm), x - 3,
            T + H + 12, x - 3, T + H + 12);
    for (int i = 0; i < n; i++) {
        const tune_trial *t = col[i];
        x = L + (i + 1) * step + step / 2 + 10;
        double am, ab, cm, cb, clo = INFINITY, chi = -INFINITY;
        side_stats(t->a, t->na, ob, S->o->noise, &am, &ab);
        side_stats(t->b, t->nb, ob, S->o->noise, &cm, &cb);
        minmax(t->b, t->nb, ob, &clo, &chi);
        if (isfinite(am))
            fprintf(o, "<rect x=\"%d\" y=\"%d\" width=\"16\" height=\"%d\" fill=\"#bbb\" "
                       "opacity=\"0.5\"/><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" "
                       "stroke=\"#666\"/>\n",
                    x - 8, Y(am * (1 + ab)), Y(am * (1 - ab)) - Y(am * (1 + ab)), x - 8, Y(am),
                    x + 8, Y(am));
        const char *c = verdict_color(t == S->final ? (strcmp(t->v.verdict, "accept")
                                                           ? t->v.verdict
                                                           : "accept")
                                                    : t->v.verdict);
        if (isfinite(clo))
            fprintf(o, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
                       "stroke-width=\"2\"/>\n", x, Y(clo), x, Y(chi), c);
        if (isfinite(cm))
            fprintf(o, "<circle cx=\"%d\" cy=\"%d\" r=\"5\" fill=\"%s\"><title>", x, Y(cm), c);
        else
            fprintf(o, "<circle cx=\"%d\" cy=\"%d\" r=\"5\" fill=\"none\" stroke=\"%s\"><title>",
                    x, T + H - 6, c);
        if (t == S->final)
            fputs("final: best vs baseline", o);
        else {
            an_html_escape(o, S->lv.l[t->lever].name);
            fputc('=', o);
            an_html_escape(o, t->value);
        }
        fprintf(o, ": %s</title></circle><text x=\"%d\" y=\"%d\" font-size=\"10\" "
                   "transform=\"rotate(40 %d %d)\">%s", t->v.verdict, x - 3, T + H + 12, x - 3,
                T + H + 12, t == S->final ? "best vs baseline" : t->id);
        if (t != S->final) {
            fputc(' ', o);
            an_html_escape(o, S->lv.l[t->lever].name);
            fputc('=', o);
            an_html_escape(o, t->value);
        }
        fputs("</text>\n", o);
    }
    static const char *const vs[5] = {"accept", "revert", "guard-reject", "inconclusive",
                                      "blocked"};
    for (int k = 0; k < 5; k++)
        fprintf(o, "<circle cx=\"%d\" cy=\"%d\" r=\"5\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" "
                   "font-size=\"11\">%s</text>\n", L + 10 + k * 110, T + H + LB + 40,
                verdict_color(vs[k]), L + 20 + k * 110, T + H + LB + 44, vs[k]);
    fprintf(o, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"10\" fill=\"#bbb\" "
               "opacity=\"0.5\"/><text x=\"%d\" y=\"%d\" font-size=\"11\">incumbent median "
               "&#177; noise band</text>\n", L + 10, T + H + LB + 54, L + 26, T + H + LB + 63);
    fputs("</svg>\n", o);
#undef Y
}

static void analysis_html(FILE *o, const char *title, const tune_analysis *a) {
    fprintf(o, "<h3>%s</h3>\n", title);
    if (!a->ok) {
        fputs("<p>not analysed: ", o);
        an_html_escape(o, a->error);
        fputs("</p>\n", o);
        return;
    }
    fputs("<table><tr><th>#</th><th>dimension</th><th>verdict</th><th>impact</th>"
          "<th>reason</th></tr>\n", o);
    for (int d = 0; d < 12; d++) {
        fprintf(o, "<tr><td>%d</td><td>", a->check[d].dim);
        an_html_escape(o, a->check[d].name);
        fputs("</td><td>", o);
        an_html_escape(o, a->check[d].verdict);
        fputs("</td><td>", o);
        if (a->check[d].applicable)
            fprintf(o, "%.1f%%", a->check[d].impact_pct);
        fputs("</td><td>", o);
        an_html_escape(o, a->check[d].reason);
        fputs("</td></tr>\n", o);
    }
    fputs("</table>\n<table><tr><th>proposal</th><th>dimension</th><th>app impact</th>"
          "<th>system impact</th><th>weighted score</th></tr>\n", o);
    for (int i = 0; i < a->nprops; i++) {
        fputs("<tr><td>", o);
        an_html_escape(o, a->prop[i].name);
        fprintf(o, " (%s)</td><td>%d</td><td>%.1f%%</td><td>%.1f%%</td><td>%.1f</td></tr>\n",
                a->prop[i].key, a->prop[i].dim, a->prop[i].app_pct, a->prop[i].sys_pct,
                a->prop[i].score);
    }
    if (!a->nprops)
        fputs("<tr><td colspan=\"5\">no proposal</td></tr>\n", o);
    fputs("</table>\n", o);
}

static void write_html(const tune_state *S, FILE *o) {
    tune_objective ob = S->o->objective;
    tune_best b;
    tune_best_of(S, &b);
    char sent[1600];
    best_sentence(S, &b, sent, sizeof sent);
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
          "<title>scaffold tune</title><style>body{font-family:sans-serif;margin:20px;"
          "max-width:1200px}table{border-collapse:collapse;margin:8px 0 18px}td,th{border:1px "
          "solid #ccc;padding:3px 6px;font-size:13px;vertical-align:top}th{background:#eee}"
          ".v{font-weight:bold}td.r{min-width:420px}</style></head><body>\n"
          "<h1>scaffold tune</h1>\n", o);
    fputs("<p>", o);
    an_html_escape(o, S->host);
    fputs(" &middot; ", o);
    an_html_escape(o, S->cpu);
    fprintf(o, " (%d CPUs) &middot; layout %dx%d &middot; sequential A-B pairs, %d to %d per "
               "trial (a verdict needs %d) &middot; objective <b>%s</b> (%s)</p>\n<p>",
            S->ncpu, S->ranks, S->threads, S->o->repeats, S->o->max_repeats, TUNE_MIN_PAIRS,
            tune_objective_names[ob], fom_unit(ob));
    an_html_escape(o, fom_definition(ob));
    fputs("</p>\n<h2>Summary</h2>\n<p>", o);
    an_html_escape(o, sent);
    fprintf(o, ". Bottleneck class: <b>%s</b> (", S->cls ? S->cls : "?");
    an_html_escape(o, S->cls_reason);
    fputs(").</p>\n<p>Best setting: ", o);
    char set[600] = "the baseline (no lever accepted)";
    if (b.set)
        tune_setting_str(b.set, &S->lv, set, sizeof set);
    else if (b.tried)
        snprintf(set, sizeof set, "the baseline (the accepted setting was not confirmed)");
    an_html_escape(o, set);
    fputs("</p>\n<h2>FOM per trial</h2>\n", o);
    chart(o, S);
    fputs("<h2>Trials</h2>\n<table><tr><th>trial</th><th>lever</th><th>value</th>"
          "<th>dimension</th><th>verdict</th><th>guard</th><th>incumbent</th>"
          "<th>candidate</th><th>gain (99% interval)</th><th>band</th><th>pairs</th>"
          "<th>reason</th></tr>\n", o);
    for (int i = 0; i < S->ntrials; i++) {
        const tune_trial *t = &S->trials[i];
        if ((t->lever < 0 && t != S->final) || !t->done)
            continue;
        fprintf(o, "<tr><td>%s</td><td>", t == S->final ? "final" : t->id);
        an_html_escape(o, t == S->final ? "best vs baseline" : S->lv.l[t->lever].name);
        fputs("</td><td>", o);
        if (t == S->final) {
            char fs[600];
            tune_setting_str(&t->cand, &S->lv, fs, sizeof fs);
            an_html_escape(o, fs);
        } else {
            an_html_escape(o, t->value);
        }
        fprintf(o, "</td><td>%d</td><td class=\"v\" style=\"color:%s\">%s</td><td>",
                t == S->final ? 0 : S->lv.l[t->lever].dimension, verdict_color(t->v.verdict),
                t->v.verdict);
        an_html_escape(o, t->v.guard);
        if (isfinite(t->v.d.med) && isfinite(t->v.d.noise))
            fprintf(o, "</td><td>%.4g</td><td>%.4g</td><td>%+.1f%% (%+.1f%% .. %+.1f%%)</td>"
                       "<td>&#177;%.1f%%</td><td>%d</td><td class=\"r\">", t->v.base_med,
                    t->v.cand_med, 100 * t->v.d.med, 100 * t->v.d.lo, 100 * t->v.d.hi,
                    100 * t->v.d.noise, t->v.pairs);
        else
            fprintf(o, "</td><td>&ndash;</td><td>&ndash;</td><td>&ndash;</td><td>&ndash;</td>"
                    "<td>%d</td><td class=\"r\">", t->v.pairs);
        an_html_escape(o, t->v.reason);
        fputs("</td></tr>\n", o);
    }
    fputs("</table>\n", o);
    int nb = 0;
    for (int i = 0; i < S->lv.n; i++)
        if (S->lv.l[i].blocked[0] && strcmp(S->lv.l[i].origin, "discriminator probe")) {
            if (!nb++)
                fputs("<h3>Blocked levers</h3>\n<ul>\n", o);
            fputs("<li>", o);
            an_html_escape(o, S->lv.l[i].name);
            fputs(": ", o);
            an_html_escape(o, S->lv.l[i].blocked);
            fputs("</li>\n", o);
        }
    if (nb)
        fputs("</ul>\n", o);
    if (S->untried[0]) {
        fputs("<p>Not tried (budget): ", o);
        an_html_escape(o, S->untried);
        fputs("</p>\n", o);
    }
    fputs("<h2>The analyzer's proposals on the baseline</h2>\n<table><tr><th>strategy</th>"
          "<th>lever</th></tr>\n", o);
    for (int i = 0; i < S->nmapped; i++) {
        fputs("<tr><td>", o);
        an_html_escape(o, S->mapped[i].key);
        fputs("</td><td>", o);
        if (S->mapped[i].lever[0])
            an_html_escape(o, S->mapped[i].lever);
        else {
            fputs("needs a system change: ", o);
            an_html_escape(o, S->mapped[i].why);
        }
        fputs("</td></tr>\n", o);
    }
    if (!S->nmapped)
        fputs("<tr><td colspan=\"2\">no proposal</td></tr>\n", o);
    fputs("</table>\n<h2>12-dimension checklist and proposals</h2>\n", o);
    analysis_html(o, "Baseline", &S->base_an);
    analysis_html(o, b.set ? "Best setting" : "Best setting (= baseline)", &S->best_an);
    fputs("</body></html>\n", o);
}

/* The same chart as a standalone image (for a README or a slide). */
static void write_svg(const tune_state *S, FILE *f) {
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
    chart(f, S);
}

int tune_write_outputs(const tune_state *S) {
    static const struct {
        const char *name;
        void (*write)(const tune_state *S, FILE *f);
    } out[] = {{"tune.json", write_json},   {"lever_catalog.yaml", write_catalog},
               {"best.yml", write_best},    {"report.html", write_html},
               {"tune.svg", write_svg}};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < sizeof out / sizeof *out; i++) {
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", S->out, out[i].name);
        fs_atomic a;
        rc = fs_atomic_open(&a, p);
        if (rc == 0) {
            out[i].write(S, a.fp);
            rc = fs_atomic_commit(&a, 1);
        }
    }
    return rc;
}
