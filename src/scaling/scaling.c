/* scaling: the scaling study (see scaling.h): its points, their commands and jobs, the results
 * read back from their logs, scaling.csv and scaling.png. */
#include "scaling/scaling.h"

#include "core/err.h"
#include "core/fsutil.h"
#include "core/job.h"
#include "core/log.h"
#include "train/bench.h"
#include "train/plot.h"
#include "train/runfolder.h"

#include <math.h>
#include <signal.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SC_MAX_RANKS 64
#define SC_MAX_SHARDS 16
#define SC_MAX_POINTS (SC_MAX_RANKS * SC_MAX_SHARDS)

typedef struct sc_point {
    int ranks, shards[3], replicas, batch;
    char id[64];
    /* results */
    int ok, converged;
    char status[256];
    double sps, epoch_s, fom, ttt, rss_max, rss_min, eff;
    double wait; /* share of the time its threads waited for a CPU (the benchmark's summary) */
} sc_point;

/* "1,2,4" -> ints (each >= 1). */
static int parse_ranks(const char *s, int *v, int *n) {
    *n = 0;
    for (const char *p = s; *p;) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 1 || x > 1 << 20 || (*end && *end != ','))
            return err_set(ERR_USAGE, "--ranks: expected a comma-separated list of positive "
                                      "integers such as 1,2,4, got '%s'", s);
        if (*n == SC_MAX_RANKS)
            return err_set(ERR_USAGE, "--ranks: at most %d rank counts", SC_MAX_RANKS);
        v[(*n)++] = (int)x;
        p = *end ? end + 1 : end;
    }
    return *n ? 0 : err_set(ERR_USAGE, "--ranks: empty list");
}

/* "1 1 1;2 1 1" -> layouts of three counts (dc_num_shards over the config's dc_shard_dims). */
static int parse_shards(const char *s, int (*v)[3], int *n) {
    *n = 0;
    for (const char *p = s; *p;) {
        int a, b, c, used = 0;
        if (sscanf(p, " %d %d %d %n", &a, &b, &c, &used) != 3 || a < 1 || b < 1 || c < 1 ||
            (p[used] && p[used] != ';'))
            return err_set(ERR_USAGE, "--shards: expected layouts of three positive counts "
                                      "separated by ';' such as \"1 1 1;2 1 1\", got '%s'", s);
        if (*n == SC_MAX_SHARDS)
            return err_set(ERR_USAGE, "--shards: at most %d layouts", SC_MAX_SHARDS);
        v[*n][0] = a, v[*n][1] = b, v[*n][2] = c;
        (*n)++;
        p += used + (p[used] == ';');
    }
    return *n ? 0 : err_set(ERR_USAGE, "--shards: empty list");
}

/* Appends s to buf single-quoted for sh. */
static void sh_quote(char *buf, size_t n, const char *s) {
    size_t o = strlen(buf);
    if (o + 1 < n)
        buf[o++] = '\'';
    for (; *s && o + 5 < n; s++) {
        if (*s == '\'') {
            memcpy(buf + o, "'\\''", 4);
            o += 4;
        } else {
            buf[o++] = *s;
        }
    }
    if (o + 1 < n)
        buf[o++] = '\'';
    buf[o] = '\0';
}

static void appendf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t n, const char *fmt, ...) {
    size_t o = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    if (o < n)
        vsnprintf(buf + o, n - o, fmt, ap);
    va_end(ap);
}

/* The running point's job (core/job.h): SIGTERM/SIGINT/SIGHUP of the study end its whole
 * session (a launcher or rank left behind would keep the cores), then the study dies of the
 * signal. */
static void sc_on_signal(int sig) {
    job_end_inflight();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Runs `cmd` with sh as a job, output to `log`; kills it after `timeout` seconds (0: none).
 * Returns the exit status, 128 + signal, 124 (timed out) or -1 (could not start). */
static int run_logged(const char *cmd, const char *log, double timeout, int threads) {
    char omp[48];
    const char *env[2] = {NULL, NULL};
    if (threads > 0) {
        snprintf(omp, sizeof omp, "OMP_NUM_THREADS=%d", threads);
        env[0] = omp;
    }
    char *const argv[] = {"sh", "-c", (char *)cmd, NULL};
    const job_spec js = {
        .who = "scaling", .path = "/bin/sh", .argv = argv, .log = log, .timeout_s = timeout,
        .env = env};
    job_result r;
    if (job_run(&js, &r))
        return -1;
    return r.timed_out ? 124 : r.status;
}

/* The number after `key` in `line` (NAN if absent). */
static double after(const char *line, const char *key) {
    const char *p = strstr(line, key);
    return p ? strtod(p + strlen(key), NULL) : NAN;
}

/* The number right before " samples/s" in the summary line. */
static double samples_per_s(const char *line) {
    const char *p = strstr(line, " samples/s");
    if (!p)
        return NAN;
    while (p > line && p[-1] != ' ')
        p--;
    return strtod(p, NULL);
}

/* Reads the point's log: the benchmark summary line, or the error line. */
static void collect(sc_point *pt, const char *dir, int st) {
    char path[FS_PATH_MAX + 64], line[8192], err[1024] = "";
    snprintf(path, sizeof path, "%s/log.txt", dir);
    FILE *f = fopen(path, "r");
    char summary[8192] = "";
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "benchmark: ", 11))
            snprintf(summary, sizeof summary, "%s", line);
        else if (strstr(line, "scaffold benchmark: ") || strstr(line, "ERROR"))
            snprintf(err, sizeof err, "%s", line);
    }
    if (f)
        fclose(f);
    pt->sps = pt->epoch_s = pt->fom = pt->ttt = pt->rss_max = pt->rss_min = pt->wait = NAN;
    if (st != 0 || !summary[0]) {
        err[strcspn(err, "\n")] = '\0';
        for (char *p = err; *p; p++)
            if (*p == ',' || *p == '"')
                *p = ';';
        snprintf(pt->status, sizeof pt->status, "failed: exit %d%s%s", st, err[0] ? ": " : "",
                 err);
        return;
    }
    pt->ok = 1;
    pt->converged = !strncmp(summary, "benchmark: reached", 18);
    snprintf(pt->status, sizeof pt->status, "%s", pt->converged ? "converged" : "ok");
    pt->sps = samples_per_s(summary);
    pt->rss_max = after(summary, "peak memory per rank ");
    pt->rss_min = after(summary, "GiB (max), ");
    pt->wait = after(summary, BENCH_WAIT_KEY) / 100;
    if (pt->converged) {
        pt->fom = after(summary, "FOM (upstream, 1/sum) ");
        pt->ttt = after(summary, "time to target ");
    }
    const char *rf = strstr(summary, "run folder ");
    if (rf) {
        char run[FS_PATH_MAX];
        snprintf(run, sizeof run, "%s", rf + 11);
        run[strcspn(run, "\n")] = '\0';
        run_stats_row *rows = NULL;
        int n = 0;
        if (run_stats_read(run, &rows, &n) == 0 && n > 0) {
            double s = 0;
            for (int i = 0; i < n; i++)
                s += rows[i].epoch_duration;
            pt->epoch_s = s / n;
        }
        free(rows);
    }
}

#define SC_HEADER                                                                                  \
    "ranks,replicas,shards,local_batch_size,status,samples_per_s,epoch_s,fom_upstream,"           \
    "time_to_target_s,parallel_efficiency,mem_per_rank_gib_max,mem_per_rank_gib_min,cpu_wait"

static void row(FILE *f, const sc_point *p) {
    fprintf(f, "%d,%d,%dx%dx%d,%d,%s,%.6g,%.6g,%.6g,%.6g,%.6g,%.4g,%.4g,%.4g\n", p->ranks,
            p->replicas, p->shards[0], p->shards[1], p->shards[2], p->batch, p->status, p->sps,
            p->epoch_s, p->fom, p->ttt, p->eff, p->rss_max, p->rss_min, p->wait);
}

/* result.csv of a finished point (header + row), read back on resume. */
static int save_result(const char *dir, const sc_point *p) {
    char path[FS_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/result.csv", dir);
    fs_atomic a;
    int rc = fs_atomic_open(&a, path);
    if (rc)
        return rc;
    fprintf(a.fp, "%s\n", SC_HEADER);
    row(a.fp, p);
    return fs_atomic_commit(&a, 1);
}

static int load_result(const char *dir, sc_point *p) {
    char path[FS_PATH_MAX + 64], line[1024];
    snprintf(path, sizeof path, "%s/result.csv", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int got = 0;
    if (fgets(line, sizeof line, f) && fgets(line, sizeof line, f)) {
        /* ranks,replicas,shards,batch,status,... : the status has no comma (collect). */
        char *fld[13];
        int nf = 0;
        for (char *t = strtok(line, ",\n"); t && nf < 13; t = strtok(NULL, ",\n"))
            fld[nf++] = t;
        if (nf == 12 || nf == 13) { /* 12: a study from before the cpu_wait column */
            snprintf(p->status, sizeof p->status, "%s", fld[4]);
            p->ok = strncmp(fld[4], "failed", 6) != 0;
            p->converged = !strcmp(fld[4], "converged");
            p->sps = atof(fld[5]);
            p->epoch_s = atof(fld[6]);
            p->fom = atof(fld[7]);
            p->ttt = atof(fld[8]);
            p->rss_max = atof(fld[10]);
            p->rss_min = atof(fld[11]);
            p->wait = nf == 13 ? atof(fld[12]) : NAN;
            got = 1;
        }
    }
    fclose(f);
    return got;
}

/* OUT/config.yaml: written on the first run; a resumed study must have the same. */
static int study_config(const scaffold_config *c, const char *out) {
    char path[FS_PATH_MAX + 64], fresh[FS_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/config.yaml", out);
    snprintf(fresh, sizeof fresh, "%s/.config.yaml.new", out);
    int rc = config_write_yaml(c, fresh, 0);
    if (rc)
        return rc;
    if (!fs_exists(path)) {
        if (rename(fresh, path) != 0)
            return err_set(ERR_IO, "cannot rename %s: %s", fresh, strerror(errno));
        return 0;
    }
    scaffold_config a, b;
    config_defaults(&a);
    config_defaults(&b);
    rc = config_load_file(&a, path);
    if (rc == 0)
        rc = config_load_file(&b, fresh);
    unlink(fresh);
    if (rc)
        return rc;
    char diff[768] = "", va[CFG_VALUE_TEXT_MAX], vb[CFG_VALUE_TEXT_MAX];
    int nd = 0;
    for (int k = 0; k < CFG_NKEYS; k++) {
        config_value_text(&a, k, va, sizeof va);
        config_value_text(&b, k, vb, sizeof vb);
        if (strcmp(va, vb) && nd++ < 4)
            appendf(diff, sizeof diff, "%s%s (study %s, now %s)", nd > 1 ? ", " : "",
                    config_key_name(k), va, vb);
    }
    if (nd)
        rc = err_set(ERR_USAGE,
                     "%s: the study was started with another configuration (%d key%s differ%s: "
                     "%s%s); resume with the same -c files and flags, or use another --out",
                     path, nd, nd == 1 ? "" : "s", nd == 1 ? "s" : "", diff, nd > 4 ? ", ..." : "");
    return rc;
}

static int plot_study(const char *path, const sc_point *pts, int np, const int (*shards)[3],
                      int nsh, const sc_point *base) {
    double x[SC_MAX_POINTS], y[SC_MAX_POINTS], e[SC_MAX_POINTS];
    double ix[SC_MAX_POINTS], iy[SC_MAX_POINTS], ie[SC_MAX_POINTS];
    plot_series tput[SC_MAX_SHARDS + 1], eff[SC_MAX_SHARDS + 1];
    char labels[SC_MAX_SHARDS][48];
    int ns = 0, off = 0, ni = 0, rmax = 1;
    for (int s = 0; s < nsh; s++) {
        const int start = off;
        for (int i = 0; i < np; i++) {
            const sc_point *p = &pts[i];
            if (memcmp(p->shards, shards[s], sizeof p->shards) || !p->ok)
                continue;
            x[off] = p->ranks;
            y[off] = p->sps;
            e[off] = 100.0 * p->eff;
            rmax = p->ranks > rmax ? p->ranks : rmax;
            off++;
        }
        if (off == start)
            continue;
        snprintf(labels[ns], sizeof labels[ns], "shards %dx%dx%d", shards[s][0], shards[s][1],
                 shards[s][2]);
        tput[ns] = (plot_series){labels[ns], x + start, y + start, off - start, 0};
        eff[ns] = (plot_series){labels[ns], x + start, e + start, off - start, 0};
        ns++;
    }
    /* Ideal: the base point's throughput times the rank ratio; 100% efficiency. */
    for (int r = base ? base->ranks : 1; base && r <= rmax; r *= 2) {
        ix[ni] = r;
        iy[ni] = base->sps * r / base->ranks;
        ie[ni] = 100;
        ni++;
    }
    if (ni) {
        tput[ns] = (plot_series){"ideal", ix, iy, ni, 1};
        eff[ns] = (plot_series){"ideal", ix, ie, ni, 1};
    }
    const plot_panel panels[2] = {
        {"ranks", "training samples/s", 0, ns + (ni > 0), tput},
        {"ranks", "parallel efficiency (%)", 0, ns + (ni > 0), eff}};
    return plot_png(path, "scaling study", panels, 2);
}


/* Checks the options, makes the configuration's directories and OUT absolute (out), creates
 * OUT and writes or checks OUT/config.yaml. */
static int sc_prepare(scaffold_config *c, const scaling_opts *o, int *ranks, int *nr,
                      int (*shards)[3], int *nsh, char *out, size_t cap) {
    int rc = 0;
    if (!o->ranks || !o->out)
        rc = err_set(ERR_USAGE, "--ranks LIST and --out DIR are required");
    if (rc == 0)
        rc = parse_ranks(o->ranks, ranks, nr);
    if (rc == 0)
        rc = parse_shards(o->shards, shards, nsh);
    if (rc == 0 && strcmp(o->mode, "weak") && strcmp(o->mode, "strong"))
        rc = err_set(ERR_USAGE, "--mode: expected weak or strong, got '%s'", o->mode);
    if (rc == 0 && c->dc_shard_dims.n != 3)
        rc = err_set(ERR_CONFIG, "dc_shard_dims: scaling layouts give 3 counts, the "
                                 "configuration has %d dims", c->dc_shard_dims.n);
    char *dirs[3] = {c->fract_base_dir, c->dataset_dir, c->base_run_dir}, abs[FS_PATH_MAX];
    for (int i = 0; i < 3 && rc == 0; i++)
        if ((rc = fs_abspath(dirs[i], abs, sizeof abs)) == 0)
            snprintf(dirs[i], CFG_STR_MAX, "%s", abs);
    if (rc == 0)
        rc = fs_abspath(o->out, out, cap);
    if (rc == 0)
        rc = fs_mkdir_p(out);
    if (rc == 0)
        rc = study_config(c, out);
    return rc;
}

/* The points, in order: layouts, then rank counts. Returns how many. */
static int sc_points(sc_point *pts, const int *ranks, int nr, const int (*shards)[3], int nsh,
                     const scaffold_config *c, const char *mode) {
    int np = 0;
    for (int s = 0; s < nsh; s++)
        for (int r = 0; r < nr; r++) {
            sc_point *p = &pts[np++];
            memset(p, 0, sizeof *p);
            p->ranks = ranks[r];
            p->sps = p->epoch_s = p->fom = p->ttt = p->rss_max = p->rss_min = NAN;
            memcpy(p->shards, shards[s], sizeof p->shards);
            int T = shards[s][0] * shards[s][1] * shards[s][2];
            p->replicas = p->ranks / T;
            p->batch = c->local_batch_size;
            if (!strcmp(mode, "strong") && p->replicas > 0)
                p->batch = c->local_batch_size / p->replicas;
            snprintf(p->id, sizeof p->id, "n%d_s%dx%dx%d", p->ranks, shards[s][0], shards[s][1],
                     shards[s][2]);
        }
    return np;
}

/* What every point shares: the study folder, the launcher prefix, this executable. */
typedef struct sc_study {
    const scaling_opts *o;
    const scaffold_config *c;
    const char *out, *launcher;
    char exe[FS_PATH_MAX];
} sc_study;

/* The point's shell command: its stale run folder removed, then the launcher running
 * `scaffold benchmark` with the study's configuration and the point's layout. */
static void sc_point_command(char *cmd, size_t cap, const sc_study *S, const char *dir,
                             const sc_point *p) {
    /* A killed point leaves a partial run folder: start it afresh. */
    snprintf(cmd, cap, "rm -rf ");
    appendf(cmd, cap, "'%s/runs' && ", dir);
    const char *q = strstr(S->launcher, "{n}");
    if (q)
        appendf(cmd, cap, "%.*s%d%s ", (int)(q - S->launcher), S->launcher, p->ranks, q + 3);
    else
        appendf(cmd, cap, "%s -n %d ", S->launcher, p->ranks);
    sh_quote(cmd, cap, S->exe);
    appendf(cmd, cap, " benchmark -c ");
    char cfgp[FS_PATH_MAX + 32], runs[FS_PATH_MAX + 160];
    snprintf(cfgp, sizeof cfgp, "%s/config.yaml", S->out);
    snprintf(runs, sizeof runs, "%s/runs", dir);
    sh_quote(cmd, cap, cfgp);
    appendf(cmd, cap, " --base-run-dir ");
    sh_quote(cmd, cap, runs);
    appendf(cmd, cap, " --dc-num-shards %d %d %d --local-batch-size %d", p->shards[0],
            p->shards[1], p->shards[2], p->batch);
}

/* Point i of np: its result.csv when an earlier study finished it, else it runs (or is refused
 * for its layout) and its result.csv is written. Returns an error only when its folder cannot
 * be made. */
static int sc_run_point(const sc_study *S, sc_point *p, int i, int np) {
    char dir[FS_PATH_MAX + 128], cmd[16384], log[FS_PATH_MAX + 160];
    snprintf(dir, sizeof dir, "%s/points/%s", S->out, p->id);
    snprintf(log, sizeof log, "%s/log.txt", dir);
    if (load_result(dir, p)) {
        log_info("scaling: point %s already done (%s)", p->id, p->status);
        return 0;
    }
    int rc = fs_mkdir_p(dir);
    if (rc)
        return rc;
    const int T = p->shards[0] * p->shards[1] * p->shards[2];
    const int local_batch = S->c->local_batch_size;
    if (p->ranks % T) {
        snprintf(p->status, sizeof p->status,
                 "failed: %d ranks are not a multiple of the %d shards", p->ranks, T);
    } else if (!strcmp(S->o->mode, "strong") && local_batch % p->replicas) {
        snprintf(p->status, sizeof p->status,
                 "failed: strong scaling needs local_batch_size %d divisible by %d replicas",
                 local_batch, p->replicas);
    } else {
        sc_point_command(cmd, sizeof cmd, S, dir, p);
        log_info("scaling: point %d/%d %s: %d rank(s), shards %dx%dx%d, batch %d", i + 1, np,
                 p->id, p->ranks, p->shards[0], p->shards[1], p->shards[2], p->batch);
        int st = run_logged(cmd, log, S->o->timeout, S->o->threads);
        collect(p, dir, st);
    }
    if (save_result(dir, p) != 0)
        log_warn("scaling: %s", err_msg());
    log_info("scaling: point %s: %s%s", p->id, p->status,
             p->ok || !fs_exists(log) ? "" : " (see its log.txt)");
    if (p->ok && p->wait > BENCH_BUSY_WAIT)
        log_warn("scaling: point %s: its threads waited %.0f%% of the time for a CPU: more "
                 "ranks times threads than cores, or other work on them; its rate and "
                 "efficiency are not the machine's",
                 p->id, 100 * p->wait);
    return 0;
}

/* Efficiency against the successful point with the fewest ranks (the first such), which is
 * returned (NULL: none succeeded). */
static const sc_point *sc_efficiency(sc_point *pts, int np) {
    const sc_point *base = NULL;
    for (int i = 0; i < np; i++)
        if (pts[i].ok && pts[i].sps > 0 && (!base || pts[i].ranks < base->ranks))
            base = &pts[i];
    for (int i = 0; i < np; i++)
        pts[i].eff = base && pts[i].ok
                         ? (pts[i].sps / base->sps) / ((double)pts[i].ranks / base->ranks)
                         : NAN;
    return base;
}

static int sc_write_csv(const char *path, const sc_point *pts, int np) {
    fs_atomic a;
    int rc = fs_atomic_open(&a, path);
    if (rc)
        return rc;
    fprintf(a.fp, "%s\n", SC_HEADER);
    for (int i = 0; i < np; i++)
        row(a.fp, &pts[i]);
    return fs_atomic_commit(&a, 1);
}

/* The summary line: the best point, the efficiency at the most ranks. */
static void sc_summary(const sc_study *S, const sc_point *pts, int np, int done, int failed,
                       const sc_point *base, const char *csv, const char *png) {
    const sc_point *best = NULL, *last = NULL;
    for (int i = 0; i < np; i++)
        if (pts[i].ok) {
            if (!best || pts[i].sps > best->sps)
                best = &pts[i];
            if (!last || pts[i].ranks >= last->ranks)
                last = &pts[i];
        }
    if (best)
        printf("scaling: %d points (%d ok, %d failed), %s mode; best %.3g samples/s at %d "
               "rank(s), shards %dx%dx%d; efficiency at %d ranks, shards %dx%dx%d: %.0f%% of %d "
               "rank(s); %s, %s\n",
               np, done, failed, S->o->mode, best->sps, best->ranks, best->shards[0],
               best->shards[1], best->shards[2], last->ranks, last->shards[0], last->shards[1],
               last->shards[2], 100.0 * last->eff, base->ranks, csv, png);
    else
        printf("scaling: %d points, all failed (see %s/points/*/log.txt); %s\n", np, S->out, csv);
    fflush(stdout);
}

int scaling_study(scaffold_config *c, const scaling_opts *o, int *all_failed) {
    int ranks[SC_MAX_RANKS], nr = 0, shards[SC_MAX_SHARDS][3], nsh = 0;
    char out[FS_PATH_MAX];
    int rc = sc_prepare(c, o, ranks, &nr, shards, &nsh, out, sizeof out);
    if (rc)
        return rc;
    sc_study S = {.o = o, .c = c, .out = out};
    ssize_t el = readlink("/proc/self/exe", S.exe, sizeof S.exe - 1);
    snprintf(S.exe + (el > 0 ? el : 0), sizeof S.exe - (size_t)(el > 0 ? el : 0), "%s",
             el > 0 ? "" : "scaffold");
    signal(SIGTERM, sc_on_signal);
    signal(SIGINT, sc_on_signal);
    signal(SIGHUP, sc_on_signal);
    S.launcher = o->launcher ? o->launcher
                 /* No binding: Open MPI binds each of up to 2 ranks to one core, where a rank's
                  * --threads would share it. */
                 : geteuid() == 0 ? "mpirun --allow-run-as-root --bind-to none --oversubscribe"
                                  : "mpirun --bind-to none --oversubscribe";
    sc_point pts[SC_MAX_POINTS];
    int np = sc_points(pts, ranks, nr, (const int(*)[3])shards, nsh, c, o->mode);
    int done = 0, failed = 0;
    for (int i = 0; i < np; i++) {
        if ((rc = sc_run_point(&S, &pts[i], i, np)) != 0)
            return rc;
        done += pts[i].ok;
        failed += !pts[i].ok;
    }
    const sc_point *base = sc_efficiency(pts, np);
    char csv[FS_PATH_MAX + 32], png[FS_PATH_MAX + 32];
    snprintf(csv, sizeof csv, "%s/scaling.csv", out);
    snprintf(png, sizeof png, "%s/scaling.png", out);
    rc = sc_write_csv(csv, pts, np);
    if (rc == 0)
        rc = plot_study(png, pts, np, (const int(*)[3])shards, nsh, base);
    if (rc)
        return rc;
    sc_summary(&S, pts, np, done, failed, base, csv, png);
    *all_failed = done == 0;
    return 0;
}
