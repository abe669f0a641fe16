/* library: class search and instance generation over MPI, with reuse of valid files
 * (see library.h). */
#include "fractal/library.h"

#include "core/err.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/npy.h"
#include "core/rng.h"

#include <scaffold/trace.h>

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void fractal_class_dir(const scaffold_config *c, char *buf, size_t n) {
    char vt[64];
    snprintf(buf, n, "%s/var%s/seed%d/3DIFS_param", c->fract_base_dir,
             config_pyfloat(c->variance_threshold, vt, sizeof vt), c->seed);
}

void fractal_instance_dir(const scaffold_config *c, char *buf, size_t n) {
    char vt[64];
    snprintf(buf, n, "%s/var%s/seed%d/instances/np%ld", c->fract_base_dir,
             config_pyfloat(c->variance_threshold, vt, sizeof vt), c->seed, c->point_num);
}

void fractal_instance_path(const scaffold_config *c, int cat, int inst, char *buf, size_t n) {
    char dir[FS_PATH_MAX];
    fractal_instance_dir(c, dir, sizeof dir);
    snprintf(buf, n, "%s/%06d/%06d_%04d.npy", dir, cat, cat, inst);
}

int fractal_read_class(const char *path, ifs_params *out) {
    char *txt = NULL;
    int rc = fs_read_file(path, &txt, NULL);
    if (rc)
        return rc;
    const char *p = txt;
    for (int t = 0; t < IFS_MAPS; t++) {
        for (int j = 0; j < IFS_COLS; j++) {
            char *end;
            errno = 0;
            double v = strtod(p, &end);
            if (end == p || errno || !isfinite(v)) {
                free(txt);
                return err_set(ERR_FORMAT, "%s: corrupt class file (row %d, column %d)", path,
                               t + 1, j + 1);
            }
            out->p[t][j] = v;
            p = end;
            char want = j < IFS_COLS - 1 ? ',' : '\n';
            if (*p != want) {
                free(txt);
                return err_set(ERR_FORMAT, "%s: corrupt class file (expected 2 rows x 13 values)",
                               path);
            }
            p++;
        }
    }
    int extra = *p != '\0';
    free(txt);
    if (extra)
        return err_set(ERR_FORMAT, "%s: corrupt class file (trailing data)", path);
    return 0;
}

static int write_class(const char *path, const ifs_params *ip) {
    fs_atomic a;
    int rc = fs_atomic_open(&a, path);
    if (rc)
        return rc;
    for (int t = 0; t < IFS_MAPS; t++)
        for (int j = 0; j < IFS_COLS; j++)
            fprintf(a.fp, "%.18e%c", ip->p[t][j], j < IFS_COLS - 1 ? ',' : '\n');
    /* No fsync, as for instances: the rename already protects against a killed process, and
     * fsync serialised on rank 0 was most of the class-search time (4 x ~40 ms at scale 8). */
    return fs_atomic_commit(&a, 0);
}

/* Removes temporary debris (".NAME.tmp.PID.N") left by a killed run. */
static void remove_debris(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[FS_PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' && strstr(e->d_name, ".tmp.")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    }
    closedir(d);
}

/* Class files present: valid[i] = 1 for NNNNNN.csv index i that parses. Corrupt files are
 * deleted (they will be regenerated). Returns the count, or a negative error. */
#define MAX_CLASS_INDEX 1000000
static int scan_classes(const char *dir, unsigned char *valid, ifs_params *params, int cap) {
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    remove_debris(dir);
    struct dirent *e;
    int count = 0;
    char p[FS_PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        if (strlen(e->d_name) != 10 || strcmp(e->d_name + 6, ".csv") ||
            strspn(e->d_name, "0123456789") != 6)
            continue;
        int idx = atoi(e->d_name);
        if (idx >= cap)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (fractal_read_class(p, &params[idx]) != 0) {
            log_warn("%s; removing it so it is regenerated", err_msg());
            unlink(p);
            continue;
        }
        valid[idx] = 1;
        count++;
    }
    closedir(d);
    err_clear();
    return count;
}

static int same_params(const ifs_params *a, const ifs_params *b) {
    return memcmp(a, b, sizeof *a) == 0;
}

/* Class search (collective). */
static int generate_classes(const scaffold_config *c, const dist_world *w, fractal_summary *s) {
    char dir[FS_PATH_MAX];
    fractal_class_dir(c, dir, sizeof dir);
    /* Index space: existing files may use indices up to this cap. */
    const int cap = c->n_categories + 4096;
    unsigned char *valid = calloc((size_t)cap, 1);
    ifs_params *params = calloc((size_t)cap, sizeof *params);
    int rc = valid && params ? 0 : err_set(ERR_NOMEM, "out of memory");
    int have = 0;
    if (w->rank == 0 && rc == 0) {
        rc = fs_mkdir_p(dir);
        if (rc == 0)
            have = scan_classes(dir, valid, params, cap);
    }
    rc = dist_agree(w, rc);
    if (rc) {
        free(valid);
        free(params);
        return rc;
    }
    dist_bcast(w, &have, sizeof have, 0);
    int remaining = c->n_categories - have;
    s->classes_reused = have < c->n_categories ? have : c->n_categories;
    double t0 = time_now();
    size_t n = (size_t)c->point_num;
    double *pts = malloc(n * 3 * sizeof *pts);
    if (!pts)
        rc = err_set(ERR_NOMEM, "out of memory for %zu points", n);
    rc = dist_agree(w, rc);
    if (rc) {
        free(valid);
        free(params);
        return rc;
    }
    long base = 0, accepted_total = 0, prev_per = 0;
    double last_report = t0;
    ifs_params *mine = malloc((size_t)c->datagen_batch_size * sizeof *mine);
    long long *mine_at = malloc((size_t)c->datagen_batch_size * sizeof *mine_at);
    int *counts = calloc((size_t)w->size, sizeof *counts);
    int *displs = calloc((size_t)w->size, sizeof *displs);
    const long attempt_cap = 100000000L;
    while (remaining > 0 && rc == 0) {
        /* Per-rank attempts this round: upstream's rule once the acceptance rate is known;
         * the first round tries 4x what is needed (the rate is typically 20-60%). */
        long per;
        if (accepted_total == 0) {
            /* Rate unknown: start at 4x what is needed, then grow 4x per empty round. */
            per = prev_per ? 4 * prev_per : (4L * remaining + w->size - 1) / w->size;
        } else {
            double rate = (double)accepted_total / (double)base;
            per = (long)ceil(ceil(1.1 * remaining / rate) / w->size);
        }
        if (per > c->datagen_batch_size)
            per = c->datagen_batch_size;
        if (per < 1)
            per = 1;
        /* Only rank 0 knows the acceptance count: its choice is the one every rank uses, or the
         * ranks would try different attempt ranges and the library would depend on the rank
         * count. */
        dist_bcast(w, &per, sizeof per, 0);
        prev_per = per;
        long first = base + (long)w->rank * per;
        int nmine = 0;
        double tr0 = time_now();
        for (long a = first; a < first + per; a++) {
            ifs_params ip;
            ifs_propose((uint64_t)c->seed, (uint64_t)a, &ip);
            int ok = ifs_chaos(&ip, (uint64_t)c->seed, RNG_CLASS_CHAOS, (uint64_t)a, 0, pts, n);
            if (ifs_accept(pts, n, ok, c->normalize, c->variance_threshold, NULL)) {
                mine[nmine] = ip;
                mine_at[nmine++] = a;
            }
        }
        log_debug("class round: attempts %ld..%ld, %d accepted, %.3f s", first, first + per - 1,
                  nmine, time_now() - tr0);
        /* Gather the accepted proposals on rank 0, in rank order = attempt order. */
        int total = 0;
        MPI_Gather(&nmine, 1, MPI_INT, counts, 1, MPI_INT, 0, w->comm);
        ifs_params *all = NULL;
        if (w->rank == 0) {
            for (int r = 0; r < w->size; r++) {
                displs[r] = total * IFS_NPARAMS;
                total += counts[r];
                counts[r] *= IFS_NPARAMS;
            }
            all = malloc((size_t)(total ? total : 1) * sizeof *all);
        }
        MPI_Gatherv(mine, nmine * IFS_NPARAMS, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, 0,
                    w->comm);
        base += per * w->size;
        if (w->rank == 0) {
            accepted_total += total;
            for (int i = 0; i < total && remaining > 0 && rc == 0; i++) {
                int dup = 0;
                for (int k = 0; k < cap && !dup; k++)
                    dup = valid[k] && same_params(&params[k], &all[i]);
                if (dup)
                    continue;
                int idx = 0;
                while (idx < cap && valid[idx])
                    idx++;
                char path[FS_PATH_MAX + 16];
                snprintf(path, sizeof path, "%s/%06d.csv", dir, idx);
                rc = write_class(path, &all[i]);
                if (rc == 0) {
                    valid[idx] = 1;
                    params[idx] = all[i];
                    remaining--;
                    s->classes_new++;
                }
            }
            free(all);
            double now = time_now();
            if (now - last_report > 1.0 || remaining == 0) {
                log_info("classes: %d/%d accepted, %ld attempts (%.0f%% acceptance)",
                         c->n_categories - remaining, c->n_categories, base,
                         100.0 * (double)accepted_total / (double)base);
                last_report = now;
            }
            if (remaining > 0 && base >= attempt_cap)
                rc = err_set(ERR_CONFIG,
                             "no fractal class found after %ld attempts: variance_threshold %g "
                             "is too high for problem_scale %d (lower it)",
                             base, c->variance_threshold, c->problem_scale);
        }
        rc = dist_agree(w, rc);
        dist_bcast(w, &remaining, sizeof remaining, 0);
    }
    s->attempts = base;
    s->points = (double)base * (double)n;
    s->class_seconds = time_now() - t0;
    free(mine);
    free(mine_at);
    free(counts);
    free(displs);
    free(pts);
    free(valid);
    free(params);
    return rc;
}

/* Class params of categories 0..n-1 = the first n class files in name order. */
static int load_first_classes(const char *dir, int n, ifs_params *out) {
    struct dirent **list = NULL;
    int m = scandir(dir, &list, NULL, alphasort);
    if (m < 0)
        return err_set(ERR_IO, "cannot list %s: %s", dir, strerror(errno));
    int got = 0, rc = 0;
    char p[FS_PATH_MAX];
    for (int i = 0; i < m; i++) {
        const char *nm = list[i]->d_name;
        if (rc == 0 && got < n && strlen(nm) == 10 && !strcmp(nm + 6, ".csv") &&
            strspn(nm, "0123456789") == 6) {
            snprintf(p, sizeof p, "%s/%s", dir, nm);
            rc = fractal_read_class(p, &out[got]);
            got++;
        }
        free(list[i]);
    }
    free(list);
    if (rc == 0 && got < n)
        rc = err_set(ERR_NOTFOUND, "%s holds %d fractal classes, %d needed; run scaffold "
                                   "generate_fractals", dir, got, n);
    return rc;
}

static int instance_valid(const char *path, long point_num) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    npy_header h;
    int ok = npy_read_header(f, path, &h) == 0 && h.dtype == NPY_F32 && h.ndim == 2 &&
             h.shape[0] == point_num && h.shape[1] == 3;
    fclose(f);
    err_clear();
    return ok;
}

static int generate_instances(const scaffold_config *c, const dist_world *w, fractal_summary *s) {
    char cdir[FS_PATH_MAX], idir[FS_PATH_MAX];
    fractal_class_dir(c, cdir, sizeof cdir);
    fractal_instance_dir(c, idir, sizeof idir);
    const int ncat = c->n_categories;
    const long total = (long)ncat * IFS_INSTANCES;
    ifs_params *cls = calloc((size_t)ncat, sizeof *cls);
    int *work = malloc((size_t)total * sizeof *work); /* cat * 145 + inst */
    int nwork = 0, rc = cls && work ? 0 : err_set(ERR_NOMEM, "out of memory");
    if (w->rank == 0 && rc == 0) {
        rc = load_first_classes(cdir, ncat, cls);
        for (int cat = 0; cat < ncat && rc == 0; cat++) {
            char d[FS_PATH_MAX + 16], p[FS_PATH_MAX];
            snprintf(d, sizeof d, "%s/%06d", idir, cat);
            rc = fs_mkdir_p(d);
            remove_debris(d);
            for (int i = 0; i < IFS_INSTANCES && rc == 0; i++) {
                fractal_instance_path(c, cat, i, p, sizeof p);
                if (instance_valid(p, c->point_num))
                    continue;
                if (fs_exists(p)) {
                    log_warn("%s is truncated or corrupt; regenerating it", p);
                    unlink(p);
                }
                work[nwork++] = cat * IFS_INSTANCES + i;
            }
        }
    }
    rc = dist_agree(w, rc);
    if (rc) {
        free(cls);
        free(work);
        return rc;
    }
    dist_bcast(w, &nwork, sizeof nwork, 0);
    dist_bcast(w, cls, (size_t)ncat * sizeof *cls, 0);
    dist_bcast(w, work, (size_t)nwork * sizeof *work, 0);
    s->instances_total = total;
    s->instances_reused = total - nwork;
    size_t lo, hi;
    dist_block(w, (size_t)nwork, &lo, &hi);
    size_t n = (size_t)c->point_num;
    float *pts = malloc(n * 3 * sizeof *pts);
    double *scratch = malloc(n * 3 * sizeof *scratch);
    if (!pts || !scratch)
        rc = err_set(ERR_NOMEM, "out of memory for %zu points", n);
    double t0 = time_now(), last = t0;
    long fallback = 0, attempts = 0;
    for (size_t k = lo; k < hi && rc == 0; k++) {
        int cat = work[k] / IFS_INSTANCES, inst = work[k] % IFS_INSTANCES;
        int a = ifs_instance(&cls[cat], (uint64_t)c->seed, cat, inst, pts, scratch, n);
        attempts += a < 0 ? 5 : a + 1;
        if (a < 0) {
            rc = err_set(ERR_NUMERIC, "instance %d of class %d diverges even with the base "
                                      "class parameters; delete %s/%06d.csv and rerun",
                         inst, cat, cdir, cat);
            break;
        }
        fallback += a == 4;
        char p[FS_PATH_MAX];
        fractal_instance_path(c, cat, inst, p, sizeof p);
        int64_t shape[2] = {(int64_t)n, 3};
        rc = npy_save(p, NPY_F32, 2, shape, pts);
        double now = time_now();
        if (w->rank == 0 && (now - last > 2.0)) {
            double done = (double)(k - lo + 1);
            log_info("instances: ~%.0f/%d done (%.0f instances/s over %d ranks)",
                     done * w->size < nwork ? done * w->size : nwork, nwork,
                     done * w->size / (now - t0), w->size);
            last = now;
        }
    }
    rc = dist_agree(w, rc);
    s->instances_new = dist_sum_ll(w, rc ? 0 : (long long)(hi - lo));
    s->instances_fallback = dist_sum_ll(w, fallback);
    s->points += (double)dist_sum_ll(w, attempts) * (double)n;
    s->instance_seconds = dist_max_double(w, time_now() - t0);
    free(pts);
    free(scratch);
    free(cls);
    free(work);
    return rc;
}

int fractal_generate(const scaffold_config *c, const dist_world *w, fractal_summary *s) {
    memset(s, 0, sizeof *s);
    int rc = 0;
    if (w->rank == 0) {
        /* Fail early, before any file is written, if the library root cannot be created. */
        rc = fs_check_writable_dir(c->fract_base_dir);
        if (rc == 0 && c->datagen_from_scratch) {
            char d[FS_PATH_MAX];
            fractal_class_dir(c, d, sizeof d);
            rc = fs_rm_rf(d);
            fractal_instance_dir(c, d, sizeof d);
            if (rc == 0)
                rc = fs_rm_rf(d);
        }
    }
    rc = dist_agree(w, rc);
    if (rc)
        return rc;
    scaffold_trace_region tr = SCAFFOLD_TRACE_REGION_BEGIN("generate_classes",
                                                           SCAFFOLD_TRACE_CAT_DATA);
    rc = generate_classes(c, w, s);
    SCAFFOLD_TRACE_REGION_INT(tr, "attempts", s->attempts);
    SCAFFOLD_TRACE_REGION_END(tr);
    dist_barrier(w);
    tr = SCAFFOLD_TRACE_REGION_BEGIN("generate_instances", SCAFFOLD_TRACE_CAT_DATA);
    if (rc == 0)
        rc = generate_instances(c, w, s);
    SCAFFOLD_TRACE_REGION_INT(tr, "instances_new", s->instances_new);
    SCAFFOLD_TRACE_REGION_END(tr);
    return rc;
}
