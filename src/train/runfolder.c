/* runfolder: run folder creation/resume, restart.sh, train_stats.csv (see runfolder.h). */
#include "train/runfolder.h"

#include "core/err.h"
#include "core/log.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Single-quotes a word for sh. */
static void sh_quote(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputs("'\\''", f);
        else
            fputc(*s, f);
    }
    fputc('\'', f);
}

static int write_restart_script(const scaffold_config *c, const dist_world *w, int argc,
                                char **argv) {
    char path[FS_PATH_MAX], exe[FS_PATH_MAX], cwd[FS_PATH_MAX];
    snprintf(path, sizeof path, "%s/restart.sh", c->run_dir);
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        snprintf(exe, sizeof exe, "scaffold");
    else
        exe[n] = '\0';
    if (!getcwd(cwd, sizeof cwd))
        snprintf(cwd, sizeof cwd, ".");
    fs_atomic a;
    int rc = fs_atomic_open(&a, path);
    if (rc)
        return rc;
    FILE *f = a.fp;
    fprintf(f, "#!/usr/bin/env bash\n"
               "# Resumes this run from its checkpoints (written by scaffold benchmark).\n"
               "# The merged configuration is config.yaml beside this script.\n"
               "set -e\nRUN_DIR=\"$(cd \"$(dirname \"$0\")\" && pwd)\"\n"
               "# sbatch runs a copy of this script from its spool folder: then the folder of the "
               "run\n[ -f \"$RUN_DIR/config.yaml\" ] || RUN_DIR=");
    sh_quote(f, c->run_dir);
    fprintf(f, "\ncd ");
    sh_quote(f, cwd);
    fputc('\n', f);
    /* The launcher the run was started with (its variables, dist.h), so that a run started by
     * srun inside a job resumes with srun, with the PMI plugin this binary's MPI needs; else
     * the mpirun of the MPI this binary was built with (an MPICH binary started by Open MPI's
     * mpirun runs as N independent singletons). $MPIRUN overrides it. */
    const dist_launcher l = w->launcher;
    const int mpich = !strcmp(dist_mpi_name(), "MPICH");
    const char *launcher = mpich ? "mpirun.mpich" : "mpirun.openmpi";
    if (l.kind == DIST_L_SRUN || l.kind == DIST_L_SRUN_PMI2 ||
        (l.kind == DIST_L_PMIX && getenv("SLURM_STEP_ID")))
        launcher = mpich ? "srun --mpi=pmi2" : "srun --mpi=pmix";
    else if (l.kind == DIST_L_FLUX)
        launcher = "flux run";
    if (l.kind != DIST_L_NONE)
        fprintf(f, "# started by %s (%s)\n", l.name, l.vars);
    if (!strncmp(launcher, "mpirun", 6) && w->size > 1)
        fprintf(f, "MPIRUN=${MPIRUN:-$(command -v %s || echo mpirun)}\nexec $MPIRUN -n %d ",
                launcher, w->size);
    else if (strncmp(launcher, "mpirun", 6))
        fprintf(f, "MPIRUN=${MPIRUN:-%s}\nexec $MPIRUN -n %d ", launcher, w->size);
    else
        fprintf(f, "exec ");
    sh_quote(f, exe);
    fprintf(f, " benchmark -c \"$RUN_DIR/config.yaml\"");
    /* Keep only the options that are not configuration (the config.yaml has those). */
    for (int i = 1; i < argc; i++)
        if (argv[i][0] == '-' && argv[i][1] == 'v' && strspn(argv[i] + 1, "v") == strlen(argv[i] + 1))
            fprintf(f, " %s", argv[i]);
    fprintf(f, " --restart --run-dir \"$RUN_DIR\" \"$@\"\n");
    rc = fs_atomic_commit(&a, 1);
    if (rc == 0 && chmod(path, 0755) != 0)
        rc = err_set(ERR_IO, "cannot chmod %s: %s", path, strerror(errno));
    return rc;
}

const char *const run_resume_mutable_keys[] = {
    "epochs", "checkpoint_interval", "checkpoint_on_signal", "async_save",
    "dataloader_num_workers", "data_store", "device", "warmup_batches", "dataset_dir",
    "fract_base_dir", "base_run_dir", "job_name", "datagen_from_scratch",
    "dataset_reuse_enforce_commit_id", "more_determinism", "loss_freq", NULL};

/* Keys that are the mechanics of a resume itself, never recorded as changes. */
static int resume_mechanics(const char *k) {
    return !strcmp(k, "run_dir") || !strcmp(k, "train_from_scratch");
}

static int resume_mutable(const char *k) {
    for (int i = 0; run_resume_mutable_keys[i]; i++)
        if (!strcmp(run_resume_mutable_keys[i], k))
            return 1;
    return 0;
}

int run_config_resume_check(const scaffold_config *c, char *changed, size_t n) {
    changed[0] = '\0';
    char path[FS_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/config.yaml", c->run_dir);
    scaffold_config *saved = malloc(sizeof *saved);
    if (!saved)
        return err_set(ERR_NOMEM, "out of memory reading %s", path);
    config_defaults(saved);
    int rc = config_load_file(saved, path);
    if (rc == 0)
        rc = config_finalize(saved);
    if (rc) {
        char why[ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", err_msg());
        free(saved);
        return err_set(ERR_CONFIG,
                       "--restart: cannot read the run's configuration (%s), so the resume cannot "
                       "be checked against it; restore %s or start a new run",
                       why, path);
    }
    char bad[ERR_MSG_MAX - 400] = "", a[CFG_VALUE_TEXT_MAX], b[CFG_VALUE_TEXT_MAX];
    size_t ob = 0, oc = 0;
    int nbad = 0;
    for (int k = 0; k < CFG_NKEYS; k++) {
        const char *name = config_key_name(k);
        config_value_text(c, k, a, sizeof a);
        config_value_text(saved, k, b, sizeof b);
        if (!strcmp(a, b) || resume_mechanics(name))
            continue;
        /* The spatial layout: with whole-volume GroupNorm statistics a sharded run computes
         * the unsharded one, so a resume may change it (per-shard statistics would not). */
        const int layout = !strcmp(name, "dc_num_shards") || !strcmp(name, "dc_shard_dims");
        const int global = !strcmp(c->group_norm_stats, "global") &&
                           !strcmp(saved->group_norm_stats, "global");
        if (resume_mutable(name) || (layout && global)) {
            if (oc < n)
                oc += (size_t)snprintf(changed + oc, n - oc, "%s%s: [%s, %s]", oc ? ", " : "",
                                       name, b, a);
        } else {
            nbad++;
            if (ob < sizeof bad)
                ob += (size_t)snprintf(bad + ob, sizeof bad - ob, "%s%s (%.60s now, %.60s in the "
                                       "run)", ob ? ", " : "", name, a, b);
        }
    }
    free(saved);
    if (nbad)
        return err_set(ERR_CONFIG,
                       "--restart: %d key%s would change what the resumed run computes: %s; %s "
                       "holds the run's configuration. Resume without changing %s, or start a new "
                       "run (a resume may change only: epochs, checkpoint_interval, "
                       "checkpoint_on_signal, async_save, dataloader_num_workers, data_store, "
                       "device, warmup_batches, the data directories, job_name, and the spatial "
                       "layout with global GroupNorm statistics)",
                       nbad, nbad == 1 ? "" : "s", bad, path, nbad == 1 ? "it" : "them");
    return 0;
}

/* A resume that changed mutable keys: config.yaml takes the new values (so restart.sh goes on
 * with them) and config_changes.yaml, a YAML list, records when and what from and to. */
static int record_resume_changes(const scaffold_config *c, const char *changed) {
    char p[FS_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/config.yaml", c->run_dir);
    /* The merged configuration differs from the saved one only in the changed keys and in the
     * resume's own mechanics, which keep the saved values. */
    scaffold_config *w = malloc(sizeof *w), *saved = malloc(sizeof *saved);
    int rc = w && saved ? 0 : err_set(ERR_NOMEM, "out of memory writing %s", p);
    if (rc == 0) {
        config_defaults(saved);
        rc = config_load_file(saved, p);
    }
    if (rc == 0) {
        *w = *c;
        w->from_flag[CFG_K_run_dir] = 0; /* a saved config must not turn a new run into a resume */
        w->run_dir[0] = '\0';
        w->train_from_scratch = saved->train_from_scratch;
        rc = config_write_yaml(w, p, 0);
    }
    free(w);
    free(saved);
    if (rc)
        return rc;
    snprintf(p, sizeof p, "%s/config_changes.yaml", c->run_dir);
    char *old = NULL;
    size_t n = 0;
    if (fs_exists(p) && (rc = fs_read_file(p, &old, &n)) != 0)
        return rc;
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
    size_t cap = n + strlen(changed) + 128;
    char *txt = malloc(cap);
    if (!txt) {
        free(old);
        return err_set(ERR_NOMEM, "out of memory writing %s", p);
    }
    int len = snprintf(txt, cap, "%s- resumed: \"%s\"\n  changed: {%s}\n", old ? old : "", stamp,
                       changed);
    rc = fs_write_file(p, txt, (size_t)len, 1);
    free(txt);
    free(old);
    if (rc == 0)
        log_info("resume: changed %s (from, to); recorded in config.yaml and %s", changed, p);
    return rc;
}

static int copy_file(const char *src, const char *dst) {
    char *data = NULL;
    size_t n = 0;
    int rc = fs_read_file(src, &data, &n);
    if (rc == 0)
        rc = fs_write_file(dst, data, n, 1);
    free(data);
    return rc;
}

static int create_fresh(scaffold_config *c) {
    int rc = fs_mkdir_p(c->base_run_dir);
    if (rc)
        return err_prefix("base_run_dir");
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    char dir[FS_PATH_MAX];
    for (int k = 0; k < 1000; k++) {
        if (k == 0)
            snprintf(dir, sizeof dir, "%s/%s_%s", c->base_run_dir, c->job_name, stamp);
        else
            snprintf(dir, sizeof dir, "%s/%s_%s-%d", c->base_run_dir, c->job_name, stamp, k);
        if (mkdir(dir, 0777) == 0) {
            snprintf(c->run_dir, sizeof c->run_dir, "%s", dir);
            return 0;
        }
        if (errno != EEXIST)
            return err_set(ERR_IO, "cannot create run folder %s: %s (check base_run_dir)", dir,
                           strerror(errno));
    }
    return err_set(ERR_IO, "cannot create a run folder under %s", c->base_run_dir);
}

int run_folder_setup(scaffold_config *c, const dist_world *w, int argc, char **argv) {
    int rc = 0;
    int fresh = c->run_dir[0] == '\0';
    if (!fresh) {
        c->restart = 1;
        c->train_from_scratch = 0;
    }
    if (w->rank == 0) {
        if (fresh) {
            rc = create_fresh(c);
        } else {
            char abs[FS_PATH_MAX];
            rc = fs_abspath(c->run_dir, abs, sizeof abs);
            if (rc == 0 && !fs_is_dir(abs))
                rc = err_set(ERR_USAGE, "--run-dir %s: no such run folder", abs);
            if (rc == 0)
                snprintf(c->run_dir, sizeof c->run_dir, "%s", abs);
        }
        char p[FS_PATH_MAX + 32];
        if (rc == 0 && !fresh) {
            /* Temporaries of writers killed mid-save (kill -9 inside a checkpoint, CSV or
             * figure write) are never renamed: remove those whose process is gone. */
            snprintf(p, sizeof p, "%s/%s", c->run_dir, c->checkpoint_dir);
            long n = fs_remove_stale_temps(p) + fs_remove_stale_temps(c->run_dir);
            snprintf(p, sizeof p, "%s/figures", c->run_dir);
            n += fs_remove_stale_temps(p);
            snprintf(p, sizeof p, "%s/%s/.pending", c->run_dir, c->checkpoint_dir);
            n += fs_remove_stale_temps(p);
            if (n)
                log_info("removed %ld temporary file(s) of an interrupted save from %s", n,
                         c->run_dir);
        }
        if (rc == 0 && !fresh) {
            char changed[2048];
            rc = run_config_resume_check(c, changed, sizeof changed);
            if (rc == 0 && changed[0])
                rc = record_resume_changes(c, changed);
        }
        if (rc == 0) {
            snprintf(p, sizeof p, "%s/%s", c->run_dir, c->checkpoint_dir);
            rc = fs_mkdir_p(p);
        }
        if (rc == 0) {
            snprintf(p, sizeof p, "%s/figures", c->run_dir);
            rc = fs_mkdir_p(p);
        }
        if (rc == 0 && fresh) {
            snprintf(p, sizeof p, "%s/config.yaml", c->run_dir);
            rc = config_write_yaml(c, p, 0);
            if (rc == 0) {
                snprintf(p, sizeof p, "%s/overrides.yaml", c->run_dir);
                rc = config_write_yaml(c, p, 1);
            }
            if (rc == 0 && c->n_files > 0) {
                snprintf(p, sizeof p, "%s/base_config.yaml", c->run_dir);
                rc = copy_file(c->files[0], p);
            }
            if (rc == 0)
                rc = write_restart_script(c, w, argc, argv);
        }
    }
    rc = dist_agree(w, rc);
    if (rc)
        return rc;
    dist_bcast(w, c->run_dir, sizeof c->run_dir, 0);
    return 0;
}

/* One CSV row, floats formatted as Python's str() (upstream writes the CSV from Python). */
static void stats_row_print(FILE *f, const run_stats_row *r) {
    char v[7][64];
    config_pyfloat(r->epoch_loss, v[0], sizeof v[0]);
    config_pyfloat(r->overall_loss, v[1], sizeof v[1]);
    config_pyfloat(r->val_loss_epoch, v[2], sizeof v[2]);
    config_pyfloat(r->val_loss_avg, v[3], sizeof v[3]);
    config_pyfloat(r->train_dice, v[4], sizeof v[4]);
    config_pyfloat(r->val_dice, v[5], sizeof v[5]);
    config_pyfloat(r->epoch_duration, v[6], sizeof v[6]);
    fprintf(f, "%d,%s,%s,%s,%s,%s,%s,%s,%ld,%ld\n", r->epoch, v[0], v[1], v[2], v[3], v[4], v[5],
            v[6], r->optimizer_steps, r->total_optimizer_steps);
}

int run_stats_append(const char *run_dir, const run_stats_row *r) {
    char path[FS_PATH_MAX];
    snprintf(path, sizeof path, "%s/train_stats.csv", run_dir);
    int fresh = !fs_exists(path);
    FILE *f = fopen(path, "a");
    if (!f)
        return err_set(ERR_IO, "cannot append to %s: %s", path, strerror(errno));
    if (fresh)
        fprintf(f, "%s\n", RUN_STATS_HEADER);
    stats_row_print(f, r);
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    return bad ? err_set(ERR_IO, "cannot write %s", path) : 0;
}

/* A row of train_stats.csv after the header; a torn last line after a crash is skipped. */
static int parse_stats_row(char *l, int lineno, void *rec) {
    run_stats_row *r = rec;
    return lineno > 0 &&
           sscanf(l, "%d,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%ld,%ld", &r->epoch, &r->epoch_loss,
                  &r->overall_loss, &r->val_loss_epoch, &r->val_loss_avg, &r->train_dice,
                  &r->val_dice, &r->epoch_duration, &r->optimizer_steps,
                  &r->total_optimizer_steps) == 10;
}

int run_stats_read(const char *run_dir, run_stats_row **rows, int *n) {
    char path[FS_PATH_MAX];
    snprintf(path, sizeof path, "%s/train_stats.csv", run_dir);
    void *r;
    int rc = fs_read_records(path, sizeof **rows, parse_stats_row, &r, n);
    *rows = r;
    return rc;
}

int run_stats_truncate(const char *run_dir, int start_epoch) {
    char path[FS_PATH_MAX];
    snprintf(path, sizeof path, "%s/train_stats.csv", run_dir);
    if (!fs_exists(path))
        return 0;
    run_stats_row *rows = NULL;
    int n = 0;
    int rc = run_stats_read(run_dir, &rows, &n);
    fs_atomic a;
    if (rc == 0)
        rc = fs_atomic_open(&a, path);
    if (rc == 0) {
        /* Reprinting is exact: the shortest round-trip format reads back to the same text. */
        fprintf(a.fp, "%s\n", RUN_STATS_HEADER);
        for (int i = 0; i < n; i++)
            if (rows[i].epoch < start_epoch)
                stats_row_print(a.fp, &rows[i]);
        rc = fs_atomic_commit(&a, 1);
    }
    free(rows);
    return rc;
}

int run_folder_clean(const scaffold_config *c) {
    char p[FS_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/train_stats.csv", c->run_dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/predictions", c->run_dir);
    int rc = fs_rm_rf(p);
    snprintf(p, sizeof p, "%s/%s", c->run_dir, c->checkpoint_dir);
    DIR *d = opendir(p);
    if (d) {
        struct dirent *e;
        char f[FS_PATH_MAX + 300];
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.' && (e->d_name[1] == '\0' || !strcmp(e->d_name, "..")))
                continue;
            snprintf(f, sizeof f, "%s/%s", p, e->d_name);
            fs_rm_rf(f); /* files, and the staging folder of a save */
            err_clear();
        }
        closedir(d);
    }
    return rc;
}
