/* journal: what a tune has measured, so `--resume` continues a killed tune (see tune.h).
 *
 * OUT/journal.tsv is append-only text: a header with the tune's signature (a hash of
 * everything that defines it: configuration arguments, levers, objective, repeats, launch),
 * then one `child` line per run started (its session id and start time, so that --resume can
 * end what a killed tune left running), one `run` line per finished run (every measurement a
 * verdict uses, numbers with 17 significant digits so they read back exactly) and one `done`
 * line per finished trial. Each line is flushed and fsynced. On resume, only trials with a `done` line are reused, so a killed
 * tune loses at most the trial in flight, and the verdicts are recomputed from the same numbers
 * by the same code: the same verdicts. */
#include "tune/tune.h"

#include "core/err.h"
#include "core/mem.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define JOURNAL_MAGIC "scaffold-tune-journal 1"

enum { J_INT, J_DBL, J_U64, J_STR, J_ARR };

typedef struct {
    const char *name;
    int type;
    size_t off, size; /* size: bytes (strings) or elements (arrays) */
} jfield;

#define JF(n, t, f, sz) {n, t, offsetof(tune_meas, f), sz}
static const jfield fields[] = {
    JF("ok", J_INT, ok, 0),
    JF("numeric", J_INT, numeric, 0),
    JF("error", J_STR, error, sizeof(((tune_meas *)0)->error)),
    JF("throughput", J_DBL, throughput, 0),
    JF("epoch_s", J_DBL, epoch_s, 0),
    JF("ttt_s", J_DBL, ttt_s, 0),
    JF("wall_s", J_DBL, wall_s, 0),
    JF("cpu_wait", J_DBL, cpu_wait, 0),
    JF("converged", J_INT, converged, 0),
    JF("nepochs", J_INT, nepochs, 0),
    JF("samples_per_epoch", J_DBL, samples_per_epoch, 0),
    JF("samples_per_step", J_DBL, samples_per_step, 0),
    JF("batches_per_epoch", J_DBL, batches_per_epoch, 0),
    JF("loss", J_ARR, loss, TUNE_MAX_EPOCHS),
    JF("val_loss", J_ARR, val_loss, TUNE_MAX_EPOCHS),
    JF("val_dice", J_ARR, val_dice, TUNE_MAX_EPOCHS),
    JF("run_dir", J_STR, run_dir, sizeof(((tune_meas *)0)->run_dir)),
    JF("trace_dir", J_STR, trace_dir, sizeof(((tune_meas *)0)->trace_dir)),
    JF("host", J_STR, host, sizeof(((tune_meas *)0)->host)),
    JF("cpu", J_STR, cpu, sizeof(((tune_meas *)0)->cpu)),
    JF("layout", J_STR, layout, sizeof(((tune_meas *)0)->layout)),
    JF("started", J_STR, started, sizeof(((tune_meas *)0)->started)),
    JF("label", J_STR, run.label, sizeof(((tune_meas *)0)->run.label)),
    JF("r_wall_s", J_DBL, run.wall_s, 0),
    JF("r_time_s", J_DBL, run.time_s, 0),
    JF("r_epoch_mean_s", J_DBL, run.epoch_mean_s, 0),
    JF("r_io_time_s", J_DBL, run.io_time_s, 0),
    JF("r_io_bw", J_DBL, run.io_bw, 0),
    JF("r_epochs", J_U64, run.epochs, 0),
    JF("r_ckpt_events", J_U64, run.ckpt_events, 0),
    JF("r_ckpt_bytes", J_U64, run.ckpt_bytes, 0),
    JF("r_bytes_read", J_U64, run.bytes_read, 0),
    JF("r_bytes_written", J_U64, run.bytes_written, 0),
    JF("r_compute_events", J_U64, run.compute_events, 0),
    JF("r_events", J_U64, run.events, 0),
    JF("w_annotated", J_INT, run.work.annotated, 0),
    JF("w_epochs", J_U64, run.work.epochs, 0),
    JF("w_nprocs", J_U64, run.work.nprocs, 0),
    JF("w_steps", J_U64, run.work.steps, 0),
    JF("w_batches0", J_U64, run.work.batches[0], 0),
    JF("w_batches1", J_U64, run.work.batches[1], 0),
    JF("w_samples0", J_U64, run.work.samples[0], 0),
    JF("w_samples1", J_U64, run.work.samples[1], 0),
    JF("w_samples_known0", J_INT, run.work.samples_known[0], 0),
    JF("w_samples_known1", J_INT, run.work.samples_known[1], 0),
    JF("w_delivered", J_U64, run.work.delivered_bytes, 0),
    JF("w_delivered_known", J_INT, run.work.delivered_known, 0),
    JF("w_ckpt_events", J_U64, run.work.ckpt_events, 0),
    JF("w_ckpt_bytes", J_U64, run.work.ckpt_bytes, 0),
    JF("w_fs_read0", J_U64, run.work.fs_read[0], 0),
    JF("w_fs_read1", J_U64, run.work.fs_read[1], 0),
    JF("w_fs_read2", J_U64, run.work.fs_read[2], 0),
    JF("w_fs_read3", J_U64, run.work.fs_read[3], 0),
    JF("w_fs_written0", J_U64, run.work.fs_written[0], 0),
    JF("w_fs_written1", J_U64, run.work.fs_written[1], 0),
    JF("w_fs_written2", J_U64, run.work.fs_written[2], 0),
    JF("w_fs_written3", J_U64, run.work.fs_written[3], 0),
    JF("w_phase0", J_DBL, run.work.phase_s[0], 0),
    JF("w_phase1", J_DBL, run.work.phase_s[1], 0),
    JF("w_phase2", J_DBL, run.work.phase_s[2], 0),
    JF("w_phase3", J_DBL, run.work.phase_s[3], 0),
};
#undef JF
#define NFIELDS (sizeof fields / sizeof fields[0])

/* Strings: tab, newline and backslash escaped, so a line is one record. */
static void put_str(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '\t')
            fputs("\\t", f);
        else if (*s == '\n')
            fputs("\\n", f);
        else if (*s == '\\')
            fputs("\\\\", f);
        else
            fputc(*s, f);
    }
}

static void get_str(const char *s, char *out, size_t cap) {
    size_t u = 0;
    for (; *s && u + 1 < cap; s++) {
        if (*s == '\\' && s[1]) {
            s++;
            out[u++] = *s == 't' ? '\t' : *s == 'n' ? '\n' : *s;
        } else {
            out[u++] = *s;
        }
    }
    out[u] = 0;
}

static void put_dbl(FILE *f, double v) {
    if (isnan(v))
        fputs("nan", f);
    else
        fprintf(f, "%.17g", v);
}

static int sync_line(FILE *f) {
    if (fflush(f) || fsync(fileno(f)))
        return err_set(ERR_IO, "writing the tune journal: %s", strerror(errno));
    return 0;
}

int tune_journal_run(FILE *f, const char *trial, char side, int rep, const tune_meas *m) {
    fprintf(f, "run\t%s\t%c\t%d", trial, side, rep);
    for (size_t i = 0; i < NFIELDS; i++) {
        const jfield *j = &fields[i];
        const char *p = (const char *)m + j->off;
        fprintf(f, "\t%s=", j->name);
        switch (j->type) {
        case J_INT: fprintf(f, "%d", *(const int *)p); break;
        case J_U64: fprintf(f, "%llu", (unsigned long long)*(const uint64_t *)p); break;
        case J_DBL: put_dbl(f, *(const double *)p); break;
        case J_STR: put_str(f, p); break;
        case J_ARR:
            for (int e = 0; e < m->nepochs && e < (int)j->size; e++) {
                if (e)
                    fputc(',', f);
                put_dbl(f, ((const double *)p)[e]);
            }
            break;
        }
    }
    fputc('\n', f);
    return sync_line(f);
}

int tune_journal_child_started(FILE *f, const char *trial, char side, int rep, int sid,
                               unsigned long long start) {
    if (!f)
        return 0;
    fprintf(f, "child\t%s\t%c\t%d\t%d\t%llu\n", trial, side, rep, sid, start);
    return sync_line(f);
}

int tune_journal_has_run(const tune_journal *j, const char *trial, char side, int rep) {
    for (int i = 0; i < j->nruns; i++)
        if (j->side[i] == side && j->rep[i] == rep && !strcmp(j->trial[i], trial))
            return 1;
    return 0;
}

int tune_journal_done(FILE *f, const char *trial) {
    fprintf(f, "done\t%s\n", trial);
    return sync_line(f);
}

static void set_field(tune_meas *m, const char *key, const char *val) {
    for (size_t i = 0; i < NFIELDS; i++) {
        const jfield *j = &fields[i];
        if (strcmp(j->name, key))
            continue;
        char *p = (char *)m + j->off;
        switch (j->type) {
        case J_INT: *(int *)p = atoi(val); break;
        case J_U64: *(uint64_t *)p = strtoull(val, NULL, 10); break;
        case J_DBL: *(double *)p = strtod(val, NULL); break;
        case J_STR: get_str(val, p, j->size); break;
        case J_ARR: {
            double *a = (double *)p;
            size_t e = 0;
            for (const char *s = val; *s && e < j->size; e++) {
                char *end;
                a[e] = strtod(s, &end);
                if (end == s)
                    break;
                s = *end == ',' ? end + 1 : end;
            }
            break;
        }
        }
        return;
    }
}

void tune_journal_free(tune_journal *j) {
    MEM_FREE(j->runs, j->trial, j->side, j->rep);
    for (int i = 0; i < j->ndone; i++)
        free(j->done[i]);
    free(j->done);
    free(j->child);
    memset(j, 0, sizeof *j);
}

int tune_journal_read(const char *path, const char *signature, tune_journal *j) {
    memset(j, 0, sizeof *j);
    FILE *f = fopen(path, "r");
    if (!f)
        return err_set(ERR_USAGE, "--resume: %s: %s (nothing to resume; drop --resume)", path,
                       strerror(errno));
    size_t cap = 1 << 17;
    char *line = malloc(cap);
    int rc = line ? 0 : err_set(ERR_NOMEM, "out of memory");
    int first = 1;
    long valid = 0;
    while (rc == 0 && fgets(line, (int)cap, f)) {
        size_t len = strlen(line);
        if (len && line[len - 1] != '\n')
            break; /* a torn last line: the run it described is not finished */
        valid = ftell(f);
        line[--len] = 0;
        if (first) {
            first = 0;
            char want[256];
            snprintf(want, sizeof want, "%s\t%s", JOURNAL_MAGIC, signature);
            if (strcmp(line, want)) {
                rc = err_set(ERR_USAGE,
                             "--resume: %s was written by a tune with other settings "
                             "(configuration, levers, objective, repeats or launch differ); "
                             "resume with the same arguments or use a new --out",
                             path);
            }
            continue;
        }
        char *save = NULL, *kind = strtok_r(line, "\t", &save);
        if (!kind)
            continue;
        if (!strcmp(kind, "done")) {
            char *t = strtok_r(NULL, "\t", &save);
            char **nd = realloc(j->done, (size_t)(j->ndone + 1) * sizeof *nd);
            if (!t || !nd || !(nd[j->ndone] = strdup(t))) {
                if (nd)
                    j->done = nd;
                rc = err_set(ERR_NOMEM, "out of memory reading %s", path);
                break;
            }
            j->done = nd;
            j->ndone++;
            continue;
        }
        if (!strcmp(kind, "child")) {
            char *t = strtok_r(NULL, "\t", &save), *sd = strtok_r(NULL, "\t", &save),
                 *rp = strtok_r(NULL, "\t", &save), *sid = strtok_r(NULL, "\t", &save),
                 *st = strtok_r(NULL, "\t", &save);
            if (!t || !sd || !rp || !sid || !st)
                continue;
            tune_journal_child *nc = realloc(j->child, (size_t)(j->nchild + 1) * sizeof *nc);
            if (!nc) {
                rc = err_set(ERR_NOMEM, "out of memory reading %s", path);
                break;
            }
            j->child = nc;
            tune_journal_child *c = &j->child[j->nchild++];
            snprintf(c->trial, sizeof c->trial, "%s", t);
            c->side = sd[0];
            c->rep = atoi(rp);
            c->sid = atoi(sid);
            c->start = strtoull(st, NULL, 10);
            continue;
        }
        if (strcmp(kind, "run"))
            continue;
        char *t = strtok_r(NULL, "\t", &save), *sd = strtok_r(NULL, "\t", &save),
             *rp = strtok_r(NULL, "\t", &save);
        if (!t || !sd || !rp)
            continue;
        tune_meas *nr = realloc(j->runs, (size_t)(j->nruns + 1) * sizeof *nr);
        char(*ntr)[32] = realloc(j->trial, (size_t)(j->nruns + 1) * sizeof *ntr);
        if (nr)
            j->runs = nr;
        if (ntr)
            j->trial = ntr;
        char *ns = realloc(j->side, (size_t)(j->nruns + 1));
        if (ns)
            j->side = ns;
        int *nrp = realloc(j->rep, (size_t)(j->nruns + 1) * sizeof *nrp);
        if (nrp)
            j->rep = nrp;
        if (!nr || !ntr || !ns || !nrp) {
            rc = err_set(ERR_NOMEM, "out of memory reading %s", path);
            break;
        }
        tune_meas *m = &j->runs[j->nruns];
        memset(m, 0, sizeof *m);
        m->cpu_wait = NAN; /* a journal from before the field */
        snprintf(j->trial[j->nruns], 32, "%s", t);
        j->side[j->nruns] = sd[0];
        j->rep[j->nruns] = atoi(rp);
        for (char *kv = strtok_r(NULL, "\t", &save); kv; kv = strtok_r(NULL, "\t", &save)) {
            char *eq = strchr(kv, '=');
            if (eq) {
                *eq = 0;
                set_field(m, kv, eq + 1);
            }
        }
        j->nruns++;
    }
    if (rc == 0 && first)
        rc = err_set(ERR_USAGE, "--resume: %s is empty (nothing to resume; drop --resume)", path);
    free(line);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    /* Cut a torn last line, so the next record starts on a line of its own. */
    if (rc == 0 && size > valid && truncate(path, valid) != 0)
        rc = err_set(ERR_IO, "cannot repair %s: %s", path, strerror(errno));
    if (rc)
        tune_journal_free(j);
    return rc;
}

const tune_meas *tune_journal_find(const tune_journal *j, const char *trial, char side, int rep) {
    int done = 0;
    for (int i = 0; i < j->ndone && !done; i++)
        done = !strcmp(j->done[i], trial);
    if (!done)
        return NULL;
    for (int i = j->nruns - 1; i >= 0; i--)
        if (j->side[i] == side && j->rep[i] == rep && !strcmp(j->trial[i], trial))
            return &j->runs[i];
    return NULL;
}

int tune_journal_start(const char *path, const char *signature, int append, FILE **out) {
    FILE *f = fopen(path, append ? "a" : "w");
    if (!f)
        return err_set(ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (!append)
        fprintf(f, "%s\t%s\n", JOURNAL_MAGIC, signature);
    *out = f;
    return sync_line(f);
}
