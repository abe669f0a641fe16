/* tune: the loop of `scaffold tune` (see tune.h): validate everything before writing, the
 * baseline, the discriminator, the levers in the order the bottleneck class suggests, paired
 * interleaved trials with verdicts, an accepted value becoming the incumbent, a final paired
 * confirmation of the best setting against the baseline, the budget, resume and progress. */
#include "tune/tune.h"

#include "analyze/analyze.h"
#include "core/err.h"
#include "core/fsutil.h"
#include "core/job.h"
#include "core/log.h"
#include "core/sha256.h"
#include "train/bench.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void fmt_dur(double s, char *buf, size_t cap) {
    if (!isfinite(s) || s < 0)
        snprintf(buf, cap, "?");
    else if (s < 90)
        snprintf(buf, cap, "%.0fs", s);
    else if (s < 5400)
        snprintf(buf, cap, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else
        snprintf(buf, cap, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

/* ------------------------------------------------------------------ analysis of a trace */

int tune_analyze(const char *trace_dir, const char *catalog, tune_analysis *a) {
    memset(a, 0, sizeof *a);
    const char *p1[1] = {trace_dir};
    const an_opts o = {.read = {.threads = 1}, .catalog = catalog};
    an_session s;
    int rc = an_session_run(&s, p1, 1, &o, NULL);
    if (rc == 0) {
        for (int d = 0; d < 12 && d < AN_NDIMS; d++) {
            const an_check *c = &s.rep.checklist[d];
            a->check[d].dim = c->dim;
            a->check[d].applicable = c->applicable;
            snprintf(a->check[d].verdict, sizeof a->check[d].verdict, "%s",
                     an_verdict_names[c->verdict]);
            a->check[d].impact_pct = c->impact_pct;
            snprintf(a->check[d].name, sizeof a->check[d].name, "%s", c->name ? c->name : "");
            snprintf(a->check[d].reason, sizeof a->check[d].reason, "%s", c->reason);
        }
        for (size_t i = 0; i < s.rep.nprops && a->nprops < TUNE_MAX_PROPS; i++) {
            const an_proposal *p = &s.rep.props[i];
            int k = a->nprops++;
            snprintf(a->prop[k].key, sizeof a->prop[k].key, "%s", p->s->key);
            snprintf(a->prop[k].name, sizeof a->prop[k].name, "%s", p->s->name);
            a->prop[k].dim = p->s->dim;
            a->prop[k].app_pct = p->app_pct;
            a->prop[k].sys_pct = p->sys_pct;
            a->prop[k].score = p->score;
        }
        /* Shares of the training phase (rank-seconds), where the tuner's levers act: process
         * start, generation and warmup would dilute them in short runs. */
        an_work w;
        memset(&w, 0, sizeof w);
        double pt = s.m.proc_time_s;
        if (an_work_compute(&s.t, &s.m, &w) == 0 && w.annotated && w.phase_s[AN_PH_TRAIN] > 0)
            pt = w.phase_s[AN_PH_TRAIN] * (double)w.nprocs;
        pt = pt > 0 ? pt : 1;
        a->loader_wait_share = fmin(1, s.m.stall_s / pt);
        a->io_share = fmin(1, s.m.exposed_io_s / pt);
        double wall = w.annotated ? w.phase_s[AN_PH_TRAIN] : s.m.wall_s;
        a->ckpt_share = wall > 0 ? fmin(1, s.m.ckpt_time_s / wall) : 0;
        a->ok = 1;
    } else {
        snprintf(a->error, sizeof a->error, "%s", err_msg());
    }
    an_session_free(&s);
    return rc;
}

/* ------------------------------------------------------------------ signals */

static void on_signal(int sig) {
    /* The run's supervisor ends its session (it would also notice the tuner's death). */
    job_end_inflight();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* ------------------------------------------------------------------ runs and trials */

static void progress(tune_state *S, const tune_trial *t, const char *what) {
    char el[32], eta[32];
    fmt_dur(time_now() - S->t0, el, sizeof el);
    double per = S->runs_done ? S->run_s_sum / S->runs_done : NAN;
    fmt_dur(per * (S->runs_planned - S->runs_done), eta, sizeof eta);
    int idx = (int)(t - S->trials) + 1;
    int of = S->trials_planned > S->ntrials ? S->trials_planned : S->ntrials;
    fprintf(stderr, "tune: [%d/%d] %s: %s (elapsed %s, ETA %s)\n", idx, of, t->id, what, el,
            eta);
}

/* The run being started, for its journal `child` line. */
typedef struct run_id {
    tune_state *S;
    const char *trial;
    char side;
    int rep;
} run_id;

static void journal_child(void *ctx, int sid, unsigned long long start) {
    run_id *r = ctx;
    tune_journal_child_started(r->S->journal, r->trial, r->side, r->rep, sid, start);
}

/* One run of a trial, from the journal when the trial finished before a kill. `of`: the runs
 * the side is planned to have (shown in the progress line). */
static int one_run(tune_state *S, tune_trial *t, char side, int rep, int of, tune_meas *m) {
    const tune_meas *j = tune_journal_find(&S->prev, t->id, side, rep);
    if (j) {
        *m = *j;
        return 0;
    }
    char dir[1300], what[600], set[512];
    snprintf(dir, sizeof dir, "%s/trials/%s/%c%d", S->out, t->id, side, rep + 1);
    const tune_setting *s = side == 'B' ? &t->cand : &t->inc;
    tune_setting_str(s, &S->lv, set, sizeof set);
    snprintf(what, sizeof what, "run %c%d/%d%s (%s)", side, rep + 1, of,
             t->nb && rep + 1 > S->o->repeats ? " (a pair added: no verdict yet)" : "", set);
    progress(S, t, what);
    run_id id = {S, t->id, side, rep};
    S->L.on_start = journal_child;
    S->L.ctx = &id;
    int rc = tune_run_one(&S->L, &S->lv, s, dir, m);
    S->L.on_start = NULL;
    if (rc)
        return rc;
    S->runs_done++;
    S->run_s_sum += m->wall_s;
    if (!m->ok)
        fprintf(stderr, "tune:   %s failed: %s\n", dir, m->error);
    if (m->ok && m->cpu_wait > BENCH_BUSY_WAIT) {
        S->runs_busy++;
        fprintf(stderr, "tune:   %s: its threads waited %.0f%% of the time for a CPU (other work "
                "on these cores): its times measure the host, and widen this pair's noise\n",
                dir, 100 * m->cpu_wait);
    }
    return tune_journal_run(S->journal, t->id, side, rep, m);
}

static void judge(tune_state *S, tune_trial *t);

/* Whether a trial of `pairs` pairs has its verdict: a firm one at once (a failed run, a
 * non-finite loss, does less, a changed batch); one that rests on the noise from the planned
 * pairs on, and only when it is not inconclusive. */
static int decided(const tune_trial *t, int pairs, int nmin) {
    if (t->v.firm)
        return 1;
    return pairs >= nmin && strcmp(t->v.verdict, "inconclusive") != 0;
}

/* The pairs a two-sided trial runs at least, and at most. */
static int pairs_min(const tune_state *S) {
    return S->o->repeats > TUNE_MIN_PAIRS ? S->o->repeats : TUNE_MIN_PAIRS;
}
static int pairs_max(const tune_state *S) {
    int m = S->o->max_repeats > 0 ? S->o->max_repeats : 8;
    return m > pairs_min(S) ? (m < TUNE_MAX_REPEATS ? m : TUNE_MAX_REPEATS) : pairs_min(S);
}

/* Runs a trial. A one-sided trial is the baseline (A) or a discriminator probe (P): na runs.
 * A two-sided one is sequential A-B pairs in ABBA order (A1 B1, B2 A2, A3 B3 ...), so a drift of
 * the machine and the cost of coming second hit both sides alike, judged after each pair: from
 * the planned pairs on (at least TUNE_MIN_PAIRS) until the verdict is decided or pairs_max()
 * pairs ran. A resumed trial replays its journaled runs through the same decisions. */
static int run_trial(tune_state *S, tune_trial *t) {
    char sa = t->nb == 0 && t != S->baseline ? 'P' : 'A';
    int resumed = tune_journal_find(&S->prev, t->id, sa, 0) != NULL;
    int rc = 0;
    if (t->nb == 0) {
        for (int r = 0; r < t->na && rc == 0; r++)
            rc = one_run(S, t, sa, r, t->na, &t->a[r]);
    } else {
        const int nmin = pairs_min(S), nmax = pairs_max(S);
        for (int r = 0; r < nmax && rc == 0; r++) {
            int of = r < nmin ? nmin : nmax;
            for (int k = 0; k < 2 && rc == 0; k++) {
                int b_side = (r % 2 == 0) == (k == 1);
                rc = b_side ? one_run(S, t, 'B', r, of, &t->b[r])
                            : one_run(S, t, 'A', r, of, &t->a[r]);
            }
            t->na = t->nb = r + 1;
            if (rc == 0) {
                judge(S, t);
                if (decided(t, r + 1, nmin))
                    break;
            }
        }
    }
    if (rc)
        return rc;
    t->done = 1;
    if (resumed)
        return 0;
    return tune_journal_done(S->journal, t->id);
}

static tune_trial *new_trial(tune_state *S, const char *id, int lever, const char *value,
                             const tune_setting *inc, const tune_setting *cand, int na, int nb) {
    if (S->ntrials >= TUNE_MAX_TRIALS)
        return NULL;
    tune_trial *t = &S->trials[S->ntrials];
    memset(t, 0, sizeof *t);
    /* Two-sided trials add pairs until a verdict: room for the most. */
    t->a = calloc((size_t)(nb ? TUNE_MAX_REPEATS : na ? na : 1), sizeof *t->a);
    t->b = calloc((size_t)(nb ? TUNE_MAX_REPEATS : 1), sizeof *t->b);
    if (!t->a || !t->b) {
        free(t->a);
        free(t->b);
        return NULL;
    }
    S->ntrials++;
    snprintf(t->id, sizeof t->id, "%s", id);
    t->lever = lever;
    snprintf(t->value, sizeof t->value, "%s", value ? value : "");
    if (inc)
        t->inc = *inc;
    if (cand)
        t->cand = *cand;
    t->na = na;
    t->nb = nb;
    t->v.verdict = "";
    t->v.guard = "";
    return t;
}

/* ------------------------------------------------------------------ setup */

/* The merged configuration the user's arguments give, validated. */
static int load_config(const tune_opts *o, scaffold_config *c) {
    for (int i = 1; i < o->cfg_argc; i++) {
        const char *a = o->cfg_argv[i];
        if (!strcmp(a, "--restart") || !strncmp(a, "--run-dir", 9) || !strncmp(a, "--run_dir", 9))
            return err_set(ERR_USAGE, "%s: scaffold tune starts every run fresh in its own "
                                      "folder; remove it", a);
    }
    config_defaults(c);
    int rc = config_parse_args(c, o->cfg_argc, o->cfg_argv, 1);
    if (rc == 1)
        return err_set(ERR_USAGE, "unexpected --help among the configuration arguments");
    if (rc == 0)
        rc = config_finalize(c);
    return rc;
}

static int lever_index(const tune_levers *lv, const char *name) {
    for (int i = 0; i < lv->n; i++)
        if (!strcmp(lv->l[i].name, name))
            return i;
    return -1;
}

/* Adds a lever that only the discriminator probes use (never tried as a trial). */
static int probe_lever(tune_state *S, const char *name, tune_lever_kind kind, int key) {
    int i = lever_index(&S->lv, name);
    if (i >= 0 || S->lv.n >= TUNE_MAX_LEVERS)
        return i;
    tune_lever *l = &S->lv.l[S->lv.n];
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    l->kind = kind;
    l->key = key;
    l->dimension = tune_lever_dimension(name);
    l->cls = tune_lever_class_of(name);
    snprintf(l->origin, sizeof l->origin, "discriminator probe");
    snprintf(l->blocked, sizeof l->blocked, "probe only");
    return S->lv.n++;
}

static void make_signature(tune_state *S, const char *levers_text) {
    sha256_ctx c;
    sha256_init(&c);
    char buf[512];
    /* "pairs=2": trials of sequential pairs (an older journal, judged otherwise, is refused). */
    snprintf(buf, sizeof buf, "obj=%d repeats=%d max=%d pairs=2 np=%d launcher=%s epochs=%d "
             "noise=%.6g disc=%d\n",
             (int)S->o->objective, S->o->repeats, pairs_max(S), S->o->np,
             S->o->launcher ? S->o->launcher : "", S->L.epochs_cap, S->o->noise,
             S->o->discriminate);
    sha256_update(&c, buf, strlen(buf));
    for (int i = 1; i < S->o->cfg_argc; i++) {
        sha256_update(&c, S->o->cfg_argv[i], strlen(S->o->cfg_argv[i]) + 1);
    }
    sha256_update(&c, levers_text, strlen(levers_text));
    unsigned char d[SHA256_DIGEST_LEN];
    sha256_final(&c, d);
    sha256_hex(d, S->signature);
}

/* Ends what a killed tune left running: every run journaled as started (a `child` line)
 * without its measurement may still have processes in its session (the supervisor ends them
 * when the tuner dies, unless it was killed too): SIGTERM, then SIGKILL after 5 s, waiting up
 * to 10 s more for them to be gone. Then removes the unfinished trial folders. */
static void clean_unfinished(tune_state *S) {
    for (int i = 0; i < S->prev.nchild; i++) {
        const tune_journal_child *c = &S->prev.child[i];
        if (tune_journal_has_run(&S->prev, c->trial, c->side, c->rep))
            continue;
        int n = job_session_kill(c->sid, c->start, SIGTERM);
        if (!n)
            continue;
        fprintf(stderr, "tune: --resume: %d process%s of run %s %c%d of the killed tune still "
                "ran (session %d); ending them\n", n, n == 1 ? "" : "es", c->trial, c->side,
                c->rep + 1, c->sid);
        double t0 = time_now();
        int killed = 0;
        while ((n = job_session_kill(c->sid, c->start, 0)) > 0 && time_now() - t0 < 15) {
            if (!killed && time_now() - t0 > 5) {
                job_session_kill(c->sid, c->start, SIGKILL);
                killed = 1;
            }
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (n > 0)
            fprintf(stderr, "tune: --resume: %d process%s of session %d still run after 15 s "
                    "(not ours to end?); continuing\n", n, n == 1 ? "" : "es", c->sid);
    }
    char tdir[1100];
    snprintf(tdir, sizeof tdir, "%s/trials", S->out);
    DIR *d = opendir(tdir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        int done = 0;
        for (int i = 0; i < S->prev.ndone && !done; i++)
            done = !strcmp(S->prev.done[i], e->d_name);
        if (done)
            continue;
        char sub[1400];
        snprintf(sub, sizeof sub, "%s/%s", tdir, e->d_name);
        fs_rm_rf(sub);
    }
    closedir(d);
}

/* ------------------------------------------------------------------ discriminator */

static double med_tput(const tune_meas *m, int n) {
    double v[TUNE_MAX_REPEATS];
    int k = 0;
    for (int i = 0; i < n && k < TUNE_MAX_REPEATS; i++)
        if (m[i].ok && isfinite(m[i].throughput))
            v[k++] = m[i].throughput;
    return an_median(v, (size_t)k);
}

static int class_rank(const char *cls, tune_lever_class c) {
    static const tune_lever_class input_first[4] = {TUNE_C_INPUT, TUNE_C_CKPT, TUNE_C_COMPUTE,
                                                    TUNE_C_OTHER};
    static const tune_lever_class ckpt_first[4] = {TUNE_C_CKPT, TUNE_C_INPUT, TUNE_C_COMPUTE,
                                                   TUNE_C_OTHER};
    static const tune_lever_class compute_first[4] = {TUNE_C_COMPUTE, TUNE_C_INPUT, TUNE_C_CKPT,
                                                      TUNE_C_OTHER};
    const tune_lever_class *o = !strcmp(cls, "input-bound")        ? input_first
                                : !strcmp(cls, "checkpoint-bound") ? ckpt_first
                                                                   : compute_first;
    for (int i = 0; i < 4; i++)
        if (o[i] == c)
            return i;
    return 4;
}

static void classify(tune_state *S) {
    const tune_analysis *a = &S->base_an;
    double bt = med_tput(S->baseline->a, S->baseline->na);
    S->thread_speedup = S->precision_speedup = NAN;
    if (S->probe_threads && S->probe_threads->a[0].ok)
        S->thread_speedup = bt / S->probe_threads->a[0].throughput;
    if (S->probe_precision && S->probe_precision->a[0].ok) {
        double p = S->probe_precision->a[0].throughput;
        /* bf16 over fp32, whichever side the baseline is on (the probe flips torch_amp). */
        S->precision_speedup = !strcmp(S->probe_precision->value, "0") ? bt / p : p / bt;
    }
    char ts[32] = "n/a", ps[32] = "n/a";
    if (isfinite(S->thread_speedup))
        snprintf(ts, sizeof ts, "%.2fx", S->thread_speedup);
    if (isfinite(S->precision_speedup))
        snprintf(ps, sizeof ps, "%.2fx", S->precision_speedup);
    double lw = a->ok ? a->loader_wait_share : 0, io = a->ok ? a->io_share : 0,
           ck = a->ok ? a->ckpt_share : 0;
    if (lw >= 0.10 || io >= 0.10)
        S->cls = "input-bound";
    else if (ck >= 0.10)
        S->cls = "checkpoint-bound";
    else if ((isfinite(S->thread_speedup) && S->thread_speedup >= 1.3) ||
             (isfinite(S->precision_speedup) && S->precision_speedup >= 1.3))
        S->cls = "compute-bound";
    else if (isfinite(S->thread_speedup) && S->thread_speedup < 1.1 &&
             (!isfinite(S->precision_speedup) || S->precision_speedup < 1.1))
        S->cls = "latency-bound";
    else
        S->cls = "compute-bound";
    snprintf(S->cls_reason, sizeof S->cls_reason,
             "loader wait %.1f%% and exposed I/O %.1f%% of the training phase, checkpoints "
             "%.1f%% of it; %d threads vs 1: %s; bf16 vs fp32: %s%s",
             100 * lw, 100 * io, 100 * ck, S->threads, ts, ps,
             isfinite(S->precision_speedup) && S->precision_speedup < 1.05
                 ? " (no precision speedup: bf16 may have no effect in this build)"
                 : "");
    /* Levers that can move this bottleneck first; the file's order within a class. */
    int n = 0;
    for (int pass = 0; pass < 5; pass++)
        for (int i = 0; i < S->lv.n; i++)
            if (class_rank(S->cls, S->lv.l[i].cls) == pass && strcmp(S->lv.l[i].origin,
                                                                     "discriminator probe"))
                S->order[n++] = i;
    for (int i = n; i < TUNE_MAX_LEVERS; i++)
        S->order[i] = -1;
}

/* The analyzer's proposals on the baseline: a lever of the benchmark, or a system change. */
static void map_proposals(tune_state *S, int add_levers) {
    for (int i = 0; i < S->base_an.nprops && S->nmapped < TUNE_MAX_PROPS; i++) {
        const char *why = NULL;
        const char *lever = tune_proposal_lever(S->base_an.prop[i].key, &why);
        int k = S->nmapped++;
        snprintf(S->mapped[k].key, sizeof S->mapped[k].key, "%s", S->base_an.prop[i].key);
        snprintf(S->mapped[k].lever, sizeof S->mapped[k].lever, "%s", lever ? lever : "");
        S->mapped[k].why = lever ? NULL : why;
        if (!lever || !add_levers)
            continue;
        int li = lever_index(&S->lv, lever);
        if (li >= 0) {
            size_t u = strlen(S->lv.l[li].origin);
            snprintf(S->lv.l[li].origin + u, sizeof S->lv.l[li].origin - u, "; analyzer: %s",
                     S->base_an.prop[i].key);
        }
    }
}

/* ------------------------------------------------------------------ the tune */

static const char *current_value(const tune_state *S, int li, char *buf, size_t cap) {
    for (int i = 0; i < S->incumbent.n; i++)
        if (S->incumbent.lever[i] == li)
            return S->incumbent.value[i];
    const tune_lever *l = &S->lv.l[li];
    if (l->kind == TUNE_L_LAUNCH)
        snprintf(buf, cap, "%dx%d", S->ranks, S->threads);
    else if (l->kind == TUNE_L_ENV)
        snprintf(buf, cap, "%s", getenv(l->name + 4) ? getenv(l->name + 4) : "(unset)");
    else
        snprintf(buf, cap, "(configuration)");
    return buf;
}

static int ranks_of(const tune_state *S, const tune_setting *s) {
    int r = S->ranks, t;
    for (int i = 0; i < s->n; i++)
        if (S->lv.l[s->lever[i]].kind == TUNE_L_LAUNCH)
            sscanf(s->value[i], "%dx%d", &r, &t);
    return r;
}

static void judge(tune_state *S, tune_trial *t) {
    int batch = t->lever >= 0 && (!strcmp(S->lv.l[t->lever].name, "local_batch_size") ||
                                  ranks_of(S, &t->inc) != ranks_of(S, &t->cand));
    if (t == S->final)
        batch = ranks_of(S, &t->inc) != ranks_of(S, &t->cand);
    t->batch_lever = batch;
    tune_judge(t->a, t->na, t->b, t->nb, S->o->objective, batch, S->o->noise, &t->v);
    if (S->o->objective == TUNE_OBJ_TTT && !strcmp(t->v.verdict, "accept"))
        for (int i = 0; i < t->nb; i++)
            if (!t->b[i].converged) {
                t->v.verdict = "guard-reject";
                t->v.guard = "convergence";
                snprintf(t->v.reason, sizeof t->v.reason,
                         "degraded convergence: run B%d did not reach the target", i + 1);
            }
}

static int check_baseline(const tune_state *S) {
    const tune_trial *b = S->baseline;
    for (int i = 0; i < b->na; i++) {
        if (!b->a[i].ok)
            return err_set(ERR_IO, "baseline run %d failed: %s (see %s/trials/baseline)", i + 1,
                           b->a[i].error, S->out);
        if (S->o->objective == TUNE_OBJ_TTT && !b->a[i].converged)
            return err_set(ERR_CONFIG, "baseline run %d did not reach target_dice within its "
                                       "epochs; raise epochs (-1 = until the target) or use "
                                       "--objective throughput", i + 1);
    }
    return 0;
}

/* The baseline's runs, then the run timeout they give and their analysis (the proposals mapped
 * to levers). */
static int run_baseline(tune_state *S) {
    const int N = S->o->repeats;
    tune_setting empty;
    memset(&empty, 0, sizeof empty);
    S->baseline = new_trial(S, "baseline", -1, NULL, &empty, NULL, N, 0);
    if (!S->baseline)
        return err_set(ERR_NOMEM, "out of memory");
    S->runs_planned = N;
    int rc = run_trial(S, S->baseline);
    if (rc == 0)
        rc = check_baseline(S);
    if (rc)
        return rc;
    /* A run that hangs is killed: ten times the slowest baseline run, at least two minutes. */
    double slowest = 0;
    for (int i = 0; i < N; i++)
        slowest = fmax(slowest, S->baseline->a[i].wall_s);
    S->L.timeout_s = fmax(120, 10 * slowest);
    tune_analyze(S->baseline->a[0].trace_dir, NULL, &S->base_an);
    map_proposals(S, S->o->levers_file == NULL);
    return 0;
}

/* Discriminator probes: one run each, fewer threads and the other precision. */
static int run_probes(tune_state *S) {
    tune_setting empty;
    memset(&empty, 0, sizeof empty);
    if (S->threads > 1) {
        int li = probe_lever(S, "env:OMP_NUM_THREADS", TUNE_L_ENV, -1);
        tune_setting p = empty;
        if (li >= 0) {
            tune_setting_put(&p, li, "1");
            S->probe_threads = new_trial(S, "probe-threads", -1, "1", &p, NULL, 1, 0);
        }
    }
    int li = probe_lever(S, "torch_amp", TUNE_L_CONFIG, -1);
    scaffold_config *c = malloc(sizeof *c);
    if (li >= 0 && c && load_config(S->o, c) == 0) {
        tune_setting p = empty;
        char v[8];
        snprintf(v, sizeof v, "%d", !c->torch_amp);
        tune_setting_put(&p, li, v);
        S->probe_precision = new_trial(S, "probe-precision", -1, v, &p, NULL, 1, 0);
    }
    free(c);
    S->runs_planned += (S->probe_threads != NULL) + (S->probe_precision != NULL);
    int rc = 0;
    if (S->probe_threads && (rc = run_trial(S, S->probe_threads)))
        return rc;
    if (S->probe_precision && (rc = run_trial(S, S->probe_precision)))
        return rc;
    return 0;
}

/* Would NP more pairs overrun the budget? (A trial the journal has finished costs nothing.) */
static int over_budget(const tune_state *S, const char *id, int NP) {
    double per = S->runs_done ? S->run_s_sum / S->runs_done : 0;
    int resumed = tune_journal_find(&S->prev, id, 'A', 0) != NULL;
    return S->o->budget_s > 0 && !resumed && time_now() - S->t0 + per * 2 * NP > S->o->budget_s;
}

/* Trial `id`: value vi of lever li against the incumbent (NP pairs), or, past the budget, the
 * value noted as untried. An accepted value becomes the incumbent's. */
static int try_value(tune_state *S, const char *id, int li, int vi, int NP) {
    const tune_lever *l = &S->lv.l[li];
    char cur[TUNE_VALUE_MAX];
    tune_setting cand = S->incumbent;
    tune_setting_put(&cand, li, l->values[vi]);
    /* The budget: stop before a trial that cannot finish in time. */
    if (over_budget(S, id, NP)) {
        S->stopped = "budget";
        size_t u = strlen(S->untried);
        snprintf(S->untried + u, sizeof S->untried - u, "%s%s=%s", u ? " " : "", l->name,
                 l->values[vi]);
        S->runs_planned -= 2 * NP;
        return 0;
    }
    tune_trial *t = new_trial(S, id, li, l->values[vi], &S->incumbent, &cand, NP, NP);
    if (!t)
        return err_set(ERR_NOMEM, "too many trials (at most %d)", TUNE_MAX_TRIALS);
    const char *was = current_value(S, li, cur, sizeof cur);
    char what[600];
    snprintf(what, sizeof what, "%s=%s (incumbent %s)", l->name, l->values[vi], was);
    progress(S, t, what);
    int rc = run_trial(S, t);
    if (rc)
        return rc;
    fprintf(stderr, "tune:   %s=%s: %s%s%s -- %s\n", l->name, l->values[vi], t->v.verdict,
            t->v.guard[0] ? " " : "", t->v.guard, t->v.reason);
    if (!strcmp(t->v.verdict, "accept"))
        S->incumbent = cand;
    S->elapsed_s = time_now() - S->t0;
    tune_write_outputs(S);
    return 0;
}

/* The best setting against the baseline, paired again (within the budget), and its analysis.
 * A setting the final check did not confirm is not the best: the baseline is. */
static int final_check(tune_state *S, int NP) {
    if (!S->incumbent.n || over_budget(S, "final", NP)) {
        if (S->incumbent.n)
            S->stopped = "budget";
        S->best_an = S->base_an;
        return 0;
    }
    tune_setting empty;
    memset(&empty, 0, sizeof empty);
    S->final = new_trial(S, "final", -1, NULL, &empty, &S->incumbent, NP, NP);
    if (!S->final)
        return err_set(ERR_NOMEM, "out of memory");
    progress(S, S->final, "the best setting against the baseline");
    int rc = run_trial(S, S->final);
    if (rc)
        return rc;
    fprintf(stderr, "tune:   final check: %s%s%s -- %s\n", S->final->v.verdict,
            S->final->v.guard[0] ? " " : "", S->final->v.guard, S->final->v.reason);
    /* The best setting's analysis with this tune's catalog: the dimensions it measured. */
    char cat[1200];
    snprintf(cat, sizeof cat, "%s/lever_catalog.yaml", S->out);
    tune_write_outputs(S);
    if (!strcmp(S->final->v.verdict, "accept"))
        tune_analyze(S->final->b[0].trace_dir, cat, &S->best_an);
    else
        S->best_an = S->base_an;
    return 0;
}

static int tune_loop(tune_state *S) {
    int rc = run_baseline(S);
    if (rc == 0 && S->o->discriminate)
        rc = run_probes(S);
    if (rc)
        return rc;
    classify(S);
    fprintf(stderr, "tune: bottleneck class: %s (%s)\n", S->cls, S->cls_reason);
    /* Plan: every value of every lever, in order. */
    int planned = 0;
    for (int k = 0; S->order[k] >= 0 && k < TUNE_MAX_LEVERS; k++)
        if (!S->lv.l[S->order[k]].blocked[0])
            planned += S->lv.l[S->order[k]].nvalues;
    const int NP = pairs_min(S); /* pairs a trial runs at least */
    S->runs_planned += planned * 2 * NP + 2 * NP;
    S->trials_planned = S->ntrials + planned + 1;
    int tn = 0;
    S->stopped = "complete";
    for (int k = 0; k < TUNE_MAX_LEVERS && S->order[k] >= 0; k++) {
        int li = S->order[k];
        if (S->lv.l[li].blocked[0])
            continue;
        for (int vi = 0; vi < S->lv.l[li].nvalues; vi++) {
            char id[32];
            snprintf(id, sizeof id, "t%02d", ++tn);
            if ((rc = try_value(S, id, li, vi, NP)))
                return rc;
        }
    }
    return final_check(S, NP);
}

/* Whether the recommended setting sets some lever to `value`. */
static int uses_value(const tune_state *S, const char *value) {
    tune_best b;
    tune_best_of(S, &b);
    for (int i = 0; b.set && i < b.set->n; i++)
        if (!strcmp(b.set->value[i], value))
            return 1;
    return 0;
}

/* The options tune_main checks before anything else. */
static int check_opts(const tune_opts *o) {
    if (!o->out || !o->out[0])
        return err_set(ERR_USAGE, "--out DIR is required (where tune.json and the runs go)");
    if (o->repeats < 1 || o->repeats > TUNE_MAX_REPEATS)
        return err_set(ERR_USAGE, "--repeats must be 1..%d", TUNE_MAX_REPEATS);
    if (o->max_repeats && (o->max_repeats < o->repeats || o->max_repeats < TUNE_MIN_PAIRS ||
                           o->max_repeats > TUNE_MAX_REPEATS))
        return err_set(ERR_USAGE, "--max-repeats %d: must be in [%d, %d] and at least --repeats "
                       "(%d): a verdict needs at least %d pairs", o->max_repeats,
                       TUNE_MIN_PAIRS, TUNE_MAX_REPEATS, o->repeats, TUNE_MIN_PAIRS);
    return 0;
}

/* The levers: the --levers file, or the built-in ones for configuration c and this machine.
 * *text: what the signature covers (the file's text, or the built-in set's name). */
static int load_levers(tune_state *S, const scaffold_config *c, char **text) {
    const tune_opts *o = S->o;
    if (o->levers_file) {
        int rc = tune_levers_load(o->levers_file, o->cfg_argc, o->cfg_argv, &S->lv);
        if (rc)
            return rc;
        size_t n;
        if (fs_read_file(o->levers_file, text, &n))
            *text = NULL;
        return 0;
    }
    /* The staged dataset lives in a folder of this tune's own (named after its --out), so
     * tunes never share or remove each other's, and a resumed tune finds its own. */
    char abs[1024], hex[65];
    unsigned char d[SHA256_DIGEST_LEN];
    int rc = fs_abspath(o->out, abs, sizeof abs);
    if (rc)
        return rc;
    sha256(abs, strlen(abs), d);
    sha256_hex(d, hex);
    snprintf(S->stage_dir, sizeof S->stage_dir, "/dev/shm/scaffold-tune-%.12s", hex);
    tune_levers_builtin(c, S->ncpu, S->ranks, S->threads, S->stage_dir, &S->lv);
    char buf[64];
    snprintf(buf, sizeof buf, "built-in ncpu=%d", S->ncpu);
    *text = strdup(buf);
    return 0;
}

/* OUT/journal.tsv: read back (and what a killed tune left running ended) with --resume, else
 * refused when it exists; then OUT is made and the journal opened for appending. */
static int open_journal(tune_state *S) {
    char jpath[1100];
    snprintf(jpath, sizeof jpath, "%s/journal.tsv", S->out);
    int rc;
    if (S->o->resume) {
        if ((rc = tune_journal_read(jpath, S->signature, &S->prev)))
            return rc;
        clean_unfinished(S);
    } else if (fs_exists(jpath)) {
        return err_set(ERR_USAGE, "%s already holds a tune (journal.tsv): continue it with "
                                  "--resume or choose a new --out", S->out);
    }
    /* Everything is valid: from here on, files are written. */
    if ((rc = fs_mkdir_p(S->out)) || (rc = fs_check_writable_dir(S->out)) ||
        (rc = tune_journal_start(jpath, S->signature, S->o->resume, &S->journal)))
        return rc;
    return 0;
}

static void free_state(tune_state *S) {
    if (S) {
        if (S->journal)
            fclose(S->journal);
        tune_journal_free(&S->prev);
        for (int i = 0; S->trials && i < S->ntrials; i++) {
            free(S->trials[i].a);
            free(S->trials[i].b);
        }
        free(S->trials);
    }
    free(S);
}

int tune_main(const tune_opts *o) {
    tune_state *S = calloc(1, sizeof *S);
    scaffold_config *c = malloc(sizeof *c);
    char *levers_text = NULL;
    int rc = S && c ? 0 : err_set(ERR_NOMEM, "out of memory");
    if (rc)
        goto out;
    S->o = o;
    S->t0 = time_now();
    S->stopped = "complete";
    if ((rc = check_opts(o)) || (rc = load_config(o, c)))
        goto out;
    tune_machine(S->host, sizeof S->host, S->cpu, sizeof S->cpu, &S->ncpu);
    S->ranks = o->np > 0 ? o->np : 1;
    const char *omp = getenv("OMP_NUM_THREADS");
    S->threads = omp && atoi(omp) > 0 ? atoi(omp) : S->ncpu;
    /* The epoch cap: throughput needs steady epochs (all but the first). */
    if (o->objective == TUNE_OBJ_TTT) {
        S->L.epochs_cap = 0;
    } else {
        S->L.epochs_cap = c->epochs > 0 ? c->epochs : 3;
        if (S->L.epochs_cap < 2) {
            rc = err_set(ERR_USAGE, "--epochs %d: the %s objective needs at least 2 epochs (the "
                                    "first is not steady)", c->epochs,
                         tune_objective_names[o->objective]);
            goto out;
        }
    }
    if ((rc = load_levers(S, c, &levers_text)))
        goto out;
    ssize_t sl = readlink("/proc/self/exe", S->self, sizeof S->self - 1);
    if (sl <= 0) {
        rc = err_set(ERR_IO, "cannot find the scaffold executable (/proc/self/exe)");
        goto out;
    }
    S->self[sl] = 0;
    if ((rc = fs_abspath(o->out, S->out, sizeof S->out)))
        goto out;
    S->L.self = S->self;
    S->L.cfg_argc = o->cfg_argc;
    S->L.cfg_argv = o->cfg_argv;
    S->L.np = S->ranks;
    S->L.launcher = o->launcher;
    make_signature(S, levers_text ? levers_text : "");
    if ((rc = open_journal(S)))
        goto out;
    S->trials = calloc(TUNE_MAX_TRIALS, sizeof *S->trials);
    if (!S->trials) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    fprintf(stderr, "tune: %s on %s (%s, %d CPUs), layout %dx%d, %d repeats, objective %s%s\n",
            o->resume ? "resuming" : "starting", S->host, S->cpu, S->ncpu, S->ranks, S->threads,
            o->repeats, tune_objective_names[o->objective],
            o->levers_file ? "" : ", built-in levers + the analyzer's proposals");
    rc = tune_loop(S);
    S->elapsed_s = time_now() - S->t0;
    if (S->ntrials && (rc == 0 || S->baseline->done)) {
        int wrc = tune_write_outputs(S);
        if (rc == 0)
            rc = wrc;
    }
    if (rc == 0)
        tune_print_summary(S, stdout);
    /* A dataset staged in memory that the best setting does not use is memory taken from the
     * machine: removed once the tune is over (kept after a failure, for --resume). */
    if (rc == 0 && S->stage_dir[0] && !uses_value(S, S->stage_dir) && fs_is_dir(S->stage_dir))
        fs_rm_rf(S->stage_dir);
out:
    free_state(S);
    free(c);
    free(levers_text);
    return rc;
}
