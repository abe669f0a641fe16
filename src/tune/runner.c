/* runner: one traced benchmark run of a setting and its measurements (see tune.h).
 *
 * The run is `scaffold trace --out DIR/trace -- [LAUNCHER -n R] scaffold benchmark ARGS`, a job
 * of core/job.h (a session of its own led by a supervisor), so that a timeout, a
 * signal to the tuner or the tuner's death ends the whole tree, with its output in DIR/log.txt
 * and its run folder under DIR/run. Measurements come from the run's
 * train_stats.csv (epoch durations, losses, Dice), its summary line (time to target) and its
 * trace through compare's summary (the samples actually processed, steps, work). */
#include "tune/tune.h"

#include "core/err.h"
#include "core/fsutil.h"
#include "core/job.h"
#include "train/bench.h"
#include "train/runfolder.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void tune_machine(char *host, size_t hcap, char *cpu, size_t ccap, int *ncpu) {
    if (gethostname(host, hcap) != 0)
        snprintf(host, hcap, "unknown");
    host[hcap - 1] = 0;
    snprintf(cpu, ccap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10)) {
                char *c = strchr(line, ':');
                if (c) {
                    c++;
                    while (*c == ' ' || *c == '\t')
                        c++;
                    c[strcspn(c, "\n")] = 0;
                    snprintf(cpu, ccap, "%s", c);
                }
                break;
            }
        fclose(f);
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    *ncpu = n > 0 ? (int)n : 1;
}

void tune_setting_put(tune_setting *s, int li, const char *value) {
    for (int i = 0; i < s->n; i++)
        if (s->lever[i] == li) {
            snprintf(s->value[i], TUNE_VALUE_MAX, "%s", value);
            return;
        }
    if (s->n < TUNE_MAX_LEVERS) {
        s->lever[s->n] = li;
        snprintf(s->value[s->n], TUNE_VALUE_MAX, "%s", value);
        s->n++;
    }
}

void tune_setting_str(const tune_setting *s, const tune_levers *lv, char *buf, size_t cap) {
    size_t u = 0;
    buf[0] = 0;
    for (int i = 0; i < s->n && u < cap; i++) {
        int w = snprintf(buf + u, cap - u, "%s%s=%s", i ? " " : "", lv->l[s->lever[i]].name,
                         s->value[i]);
        if (w > 0)
            u += (size_t)w;
    }
    if (!s->n)
        snprintf(buf, cap, "baseline");
}

/* Ranks and threads of a setting (launch lever, else the launch options and the environment). */
static void layout_of(const tune_launch *L, const tune_levers *lv, const tune_setting *s,
                      int *ranks, int *threads) {
    int ncpu;
    char h[8], c[8];
    tune_machine(h, sizeof h, c, sizeof c, &ncpu);
    *ranks = L->np > 0 ? L->np : 1;
    const char *omp = getenv("OMP_NUM_THREADS");
    *threads = omp && atoi(omp) > 0 ? atoi(omp) : ncpu;
    for (int i = 0; i < s->n; i++) {
        const tune_lever *l = &lv->l[s->lever[i]];
        if (l->kind == TUNE_L_LAUNCH)
            sscanf(s->value[i], "%dx%d", ranks, threads);
        else if (l->kind == TUNE_L_ENV && !strcmp(l->name, "env:OMP_NUM_THREADS") &&
                 atoi(s->value[i]) > 0)
            *threads = atoi(s->value[i]);
    }
}

#define MAX_ARGS 512

/* The single run folder the benchmark created under base. */
static int find_run_folder(const char *base, char *out, size_t cap) {
    DIR *d = opendir(base);
    if (!d)
        return -1;
    struct dirent *e;
    int found = -1;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(out, cap, "%s/%s", base, e->d_name);
        if (fs_is_dir(out)) {
            found = 0;
            break;
        }
    }
    closedir(d);
    return found;
}

/* The last line of the log that starts with `prefix` (into out), or "". */
static void log_line(const char *log, const char *prefix, char *out, size_t cap) {
    out[0] = 0;
    FILE *f = fopen(log, "r");
    if (!f)
        return;
    char line[2048];
    size_t pl = strlen(prefix);
    while (fgets(line, sizeof line, f)) {
        char *p = strstr(line, prefix);
        if (p && (p == line || p[-1] == ']' || p[-1] == ' ') && strlen(p) >= pl) {
            p[strcspn(p, "\n")] = 0;
            snprintf(out, cap, "%s", p);
        }
    }
    fclose(f);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void measure(const char *dir, const char *logp, int status, tune_meas *m) {
    char line[2048];
    log_line(logp, "benchmark: ", line, sizeof line);
    if (status != 0) {
        char err[2048];
        log_line(logp, "scaffold benchmark: ", err, sizeof err);
        if (!err[0])
            log_line(logp, "scaffold trace: ", err, sizeof err);
        snprintf(m->error, sizeof m->error, "exit status %d: %s", status,
                 err[0] ? err : "(no message; see log.txt)");
        m->numeric = strstr(err, "non-finite") != NULL;
        return;
    }
    char base[1100];
    snprintf(base, sizeof base, "%s/run", dir);
    if (find_run_folder(base, m->run_dir, sizeof m->run_dir)) {
        snprintf(m->error, sizeof m->error, "no run folder under %s", base);
        return;
    }
    run_stats_row *rows = NULL;
    int n = 0;
    if (run_stats_read(m->run_dir, &rows, &n) || n == 0) {
        snprintf(m->error, sizeof m->error, "%s/train_stats.csv has no epoch: %s", m->run_dir,
                 err_msg());
        free(rows);
        return;
    }
    m->nepochs = n < TUNE_MAX_EPOCHS ? n : TUNE_MAX_EPOCHS;
    double ep[TUNE_MAX_EPOCHS], steady_sum = 0;
    int ns = 0;
    for (int i = 0; i < m->nepochs; i++) {
        m->loss[i] = rows[i].overall_loss;
        m->val_loss[i] = rows[i].val_loss_avg;
        m->val_dice[i] = rows[i].val_dice;
        /* Steady epochs: all but the first (caches, threads and page faults warm up there). */
        if (i > 0 || m->nepochs == 1) {
            ep[ns++] = rows[i].epoch_duration;
            steady_sum += rows[i].epoch_duration;
        }
    }
    free(rows);
    qsort(ep, (size_t)ns, sizeof *ep, cmp_double);
    m->epoch_s = ns % 2 ? ep[ns / 2] : 0.5 * (ep[ns / 2 - 1] + ep[ns / 2]);
    const char *cw = strstr(line, BENCH_WAIT_KEY);
    m->cpu_wait = cw ? strtod(cw + strlen(BENCH_WAIT_KEY), NULL) / 100 : NAN;
    m->converged = strstr(line, "benchmark: reached") != NULL;
    const char *t = strstr(line, "time to target ");
    m->ttt_s = m->converged && t ? strtod(t + 15, NULL) : NAN;
    an_read_opts ro = {.threads = 1};
    if (an_run_load(m->trace_dir, &ro, &m->run)) {
        snprintf(m->error, sizeof m->error, "trace %s: %s", m->trace_dir, err_msg());
        return;
    }
    const an_work *w = &m->run.work;
    if (!w->annotated || !w->epochs || !w->batches[0]) {
        snprintf(m->error, sizeof m->error,
                 "trace %s has no epoch or fetch annotation (is the tracer library the one "
                 "built with this scaffold?)", m->trace_dir);
        return;
    }
    /* Throughput from the samples the trace says were processed, never from the nominal
     * batch: every epoch processes the same padded sample count. */
    double per_epoch = (double)(w->samples_known[0] ? w->samples[0] : w->batches[0]) /
                       (double)w->epochs;
    m->samples_per_epoch = per_epoch;
    m->batches_per_epoch = (double)w->batches[0] / (double)w->epochs;
    m->samples_per_step = w->steps ? (double)w->samples[0] / (double)w->steps : NAN;
    m->throughput = steady_sum > 0 ? per_epoch * ns / steady_sum : NAN;
    m->ok = 1;
}

int tune_run_one(const tune_launch *L, const tune_levers *lv, const tune_setting *s,
                 const char *dir, tune_meas *m) {
    memset(m, 0, sizeof *m);
    m->ttt_s = m->cpu_wait = NAN;
    if (fs_mkdir_p(dir))
        return err_prefix("tune run folder");
    char logp[1100], runbase[1100], flagbuf[TUNE_MAX_LEVERS][TUNE_NAME_MAX + TUNE_VALUE_MAX + 8];
    snprintf(m->trace_dir, sizeof m->trace_dir, "%s/trace", dir);
    snprintf(logp, sizeof logp, "%s/log.txt", dir);
    snprintf(runbase, sizeof runbase, "--base-run-dir=%s/run", dir);
    int ranks, threads;
    layout_of(L, lv, s, &ranks, &threads);
    int ncpu;
    tune_machine(m->host, sizeof m->host, m->cpu, sizeof m->cpu, &ncpu);
    snprintf(m->layout, sizeof m->layout, "%dx%d", ranks, threads);
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(m->started, sizeof m->started, "%Y-%m-%dT%H:%M:%SZ", &tmv);

    const char *av[MAX_ARGS];
    int ac = 0;
    char nbuf[16], epochs[32];
    av[ac++] = L->self;
    av[ac++] = "trace";
    av[ac++] = "--out";
    av[ac++] = m->trace_dir;
    av[ac++] = "--";
    char launcher[1024] = "";
    if (L->launcher || ranks > 1) {
        snprintf(launcher, sizeof launcher, "%s", L->launcher ? L->launcher : "mpirun");
        for (char *tok = strtok(launcher, " \t"); tok && ac < MAX_ARGS - 64;
             tok = strtok(NULL, " \t"))
            av[ac++] = tok;
        snprintf(nbuf, sizeof nbuf, "%d", ranks);
        av[ac++] = "-n";
        av[ac++] = nbuf;
    }
    av[ac++] = L->self;
    av[ac++] = "benchmark";
    for (int i = 1; i < L->cfg_argc && ac < MAX_ARGS - TUNE_MAX_LEVERS - 8; i++)
        av[ac++] = L->cfg_argv[i];
    for (int i = 0; i < s->n; i++) {
        const tune_lever *l = &lv->l[s->lever[i]];
        if (l->kind != TUNE_L_CONFIG)
            continue;
        snprintf(flagbuf[i], sizeof flagbuf[i], "--%s=%s", l->name, s->value[i]);
        av[ac++] = flagbuf[i];
    }
    av[ac++] = runbase;
    av[ac++] = "--job-name=tune";
    if (L->epochs_cap > 0) {
        snprintf(epochs, sizeof epochs, "--epochs=%d", L->epochs_cap);
        av[ac++] = epochs;
    }
    av[ac] = NULL;

    /* The run's environment: the setting's env levers, and with a launch lever the threads of
     * its layout. */
    char envbuf[TUNE_MAX_LEVERS + 1][TUNE_NAME_MAX + TUNE_VALUE_MAX + 8];
    const char *env[TUNE_MAX_LEVERS + 2];
    int ne = 0, has_launch = 0;
    for (int i = 0; i < s->n; i++) {
        const tune_lever *l = &lv->l[s->lever[i]];
        if (l->kind == TUNE_L_ENV) {
            snprintf(envbuf[ne], sizeof envbuf[ne], "%s=%s", l->name + 4, s->value[i]);
            env[ne] = envbuf[ne];
            ne++;
        }
        has_launch |= l->kind == TUNE_L_LAUNCH;
    }
    if (has_launch) {
        snprintf(envbuf[ne], sizeof envbuf[ne], "OMP_NUM_THREADS=%d", threads);
        env[ne] = envbuf[ne];
        ne++;
    }
    env[ne] = NULL;
    const job_spec js = {.who = "tune",
                         .path = L->self,
                         .argv = (char *const *)av,
                         .log = logp,
                         .timeout_s = L->timeout_s,
                         .grace_s = 10,
                         .env = env,
                         .on_start = L->on_start,
                         .ctx = L->ctx};
    job_result jr;
    int rc = job_run(&js, &jr);
    if (rc)
        return rc;
    m->wall_s = jr.wall_s;
    if (jr.timed_out) {
        snprintf(m->error, sizeof m->error, "timed out after %.0f s (see %s)", L->timeout_s,
                 logp);
        return 0;
    }
    measure(dir, logp, jr.status, m);
    return 0;
}
