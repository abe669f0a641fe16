/* library: class search and instance generation over MPI, with reuse of valid files
 * (see library.h). */
#include "fractal/library.h"

#include "core/claim.h"
#include "core/err.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/npy.h"
#include "core/rng.h"
#include "core/sha256.h"

#include <scaffold/trace.h>

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

fractal_spec fractal_spec_of(const scaffold_config *c) {
    fractal_spec s = {c->fract_base_dir, (uint64_t)c->seed, c->variance_threshold, c->normalize,
                      c->point_num, c->n_categories, c->datagen_batch_size,
                      c->datagen_from_scratch};
    return s;
}

void fractal_class_dir(const fractal_spec *s, char *buf, size_t n) {
    char vt[64];
    snprintf(buf, n, "%s/var%s/seed%llu/3DIFS_param", s->base_dir,
             config_pyfloat(s->variance_threshold, vt, sizeof vt), (unsigned long long)s->seed);
}

void fractal_instance_dir(const fractal_spec *s, char *buf, size_t n) {
    char vt[64];
    snprintf(buf, n, "%s/var%s/seed%llu/instances/np%ld", s->base_dir,
             config_pyfloat(s->variance_threshold, vt, sizeof vt), (unsigned long long)s->seed,
             s->point_num);
}

void fractal_instance_path(const fractal_spec *s, int cat, int inst, char *buf, size_t n) {
    char dir[FS_PATH_MAX];
    fractal_instance_dir(s, dir, sizeof dir);
    snprintf(buf, n, "%s/%06d/%06d_%04d.npy", dir, cat, cat, inst);
}

/* Parses the text of a class file (2 rows x 13 finite numbers). */
static int parse_class(const char *txt, const char *path, ifs_params *out) {
    const char *p = txt;
    for (int t = 0; t < IFS_MAPS; t++) {
        for (int j = 0; j < IFS_COLS; j++) {
            char *end;
            errno = 0;
            double v = strtod(p, &end);
            if (end == p || errno || !isfinite(v))
                return err_set(ERR_FORMAT, "%s: corrupt class file (row %d, column %d)", path,
                               t + 1, j + 1);
            out->p[t][j] = v;
            p = end;
            char want = j < IFS_COLS - 1 ? ',' : '\n';
            if (*p != want)
                return err_set(ERR_FORMAT, "%s: corrupt class file (expected 2 rows x 13 values)",
                               path);
            p++;
        }
    }
    if (*p != '\0')
        return err_set(ERR_FORMAT, "%s: corrupt class file (trailing data)", path);
    return 0;
}

/* Reads a class file: its parameters and the SHA-256 of its bytes (hex, 65 bytes). */
static int read_class(const char *path, ifs_params *out, char *sha_hex) {
    char *txt = NULL;
    size_t n = 0;
    int rc = fs_read_file(path, &txt, &n);
    if (rc == 0)
        rc = parse_class(txt, path, out);
    if (rc == 0 && sha_hex) {
        unsigned char d[SHA256_DIGEST_LEN];
        sha256(txt, n, d);
        sha256_hex(d, sha_hex);
    }
    free(txt);
    return rc;
}

int fractal_read_class(const char *path, ifs_params *out) {
    return read_class(path, out, NULL);
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

/* Removes the temporaries (".NAME.tmp.PID.N") that killed writers left in `dir`. Called only
 * while holding the claim that covers `dir` (see library.h): only the holder writes there, so
 * every temporary present belongs to a writer that is gone, on whatever host it ran. */
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

/* A claim left by a writer that is gone, on an item that needs no work (a killed job had claimed
 * it, another finished it): taken over and released, with the item's debris. Nothing happens
 * while a live writer holds it. */
static void clear_dead_claim(const char *dir, const char *claim_name) {
    char claim[FS_PATH_MAX + 32];
    snprintf(claim, sizeof claim, "%s/%s", dir, claim_name);
    if (!fs_exists(claim))
        return;
    if (claim_try(claim, NULL) == 1) {
        remove_debris(dir);
        claim_release(claim);
    }
    err_clear();
}

/* Class files present: valid[i] = 1 for NNNNNN.csv index i that parses. With `fix` (the class
 * claim is held), debris is removed and corrupt files are deleted (they will be regenerated).
 * Returns the count. */
static int scan_classes(const char *dir, unsigned char *valid, ifs_params *params, int cap,
                        int fix) {
    memset(valid, 0, (size_t)cap);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    if (fix)
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
            if (fix) {
                log_warn("%s; removing it so it is regenerated", err_msg());
                unlink(p);
            }
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

/* Class search (collective): makes sure at least `need` valid class files exist. */
static int generate_classes(const fractal_spec *c, const dist_world *w, int need,
                            fractal_summary *s) {
    char dir[FS_PATH_MAX];
    fractal_class_dir(c, dir, sizeof dir);
    /* Index space: existing files may use indices up to this cap. */
    const int cap = need + 4096;
    unsigned char *valid = calloc((size_t)cap, 1);
    ifs_params *params = calloc((size_t)cap, sizeof *params);
    int rc = valid && params ? 0 : err_set(ERR_NOMEM, "out of memory");
    int have = 0;
    char claim[FS_PATH_MAX + 16];
    snprintf(claim, sizeof claim, "%s/.claim", dir);
    if (w->rank == 0 && rc == 0) {
        rc = fs_mkdir_p(dir);
        if (rc == 0)
            have = scan_classes(dir, valid, params, cap, 0);
        /* Too few: search under the class claim (another job may be searching: wait for it,
         * then look again, as it may have written what this job needs). */
        if (rc == 0 && have < need) {
            char what[FS_PATH_MAX + 32];
            snprintf(what, sizeof what, "the fractal classes in %s", dir);
            rc = claim_take(claim, what);
            if (rc == 0)
                have = scan_classes(dir, valid, params, cap, 1);
        } else if (rc == 0) {
            clear_dead_claim(dir, ".claim");
        }
    }
    rc = dist_agree(w, rc);
    if (rc) {
        if (w->rank == 0)
            claim_release(claim);
        free(valid);
        free(params);
        return rc;
    }
    dist_bcast(w, &have, sizeof have, 0);
    int remaining = need - have;
    double t0 = time_now();
    size_t n = (size_t)c->point_num;
    double *pts = malloc(n * 3 * sizeof *pts);
    if (!pts)
        rc = err_set(ERR_NOMEM, "out of memory for %zu points", n);
    rc = dist_agree(w, rc);
    if (rc) {
        if (w->rank == 0)
            claim_release(claim);
        free(valid);
        free(params);
        return rc;
    }
    long base = 0, accepted_total = 0, prev_per = 0;
    double last_report = t0;
    ifs_params *mine = malloc((size_t)c->batch_size * sizeof *mine);
    long long *mine_at = malloc((size_t)c->batch_size * sizeof *mine_at);
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
        if (per > c->batch_size)
            per = c->batch_size;
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
            ifs_propose(c->seed, (uint64_t)a, &ip);
            int ok = ifs_chaos(&ip, c->seed, RNG_CLASS_CHAOS, (uint64_t)a, 0, pts, n);
            if (ifs_accept(pts, n, ok, c->normalize, c->variance_threshold, NULL)) {
                mine[nmine] = ip;
                mine_at[nmine++] = a;
            }
        }
        log_debug("class round: attempts %ld..%ld, %d accepted, %.3f s", first, first + per - 1,
                  nmine, time_now() - tr0);
        /* Gather the accepted proposals on rank 0, in rank order = attempt order. */
        int total = 0;
        dist_gather_ints(w, &nmine, 1, counts, 0);
        ifs_params *all = NULL;
        if (w->rank == 0) {
            for (int r = 0; r < w->size; r++) {
                displs[r] = total * IFS_NPARAMS;
                total += counts[r];
                counts[r] *= IFS_NPARAMS;
            }
            all = malloc((size_t)(total ? total : 1) * sizeof *all);
        }
        dist_gatherv_doubles(w, (const double *)mine, nmine * IFS_NPARAMS, (double *)all, counts,
                             displs, 0);
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
                         need - remaining, need, base,
                         100.0 * (double)accepted_total / (double)base);
                last_report = now;
            }
            if (remaining > 0 && base >= attempt_cap)
                rc = err_set(ERR_CONFIG,
                             "no fractal class found after %ld attempts: variance_threshold %g "
                             "is too high for %ld points per fractal (lower it or "
                             "problem_scale)",
                             base, c->variance_threshold, c->point_num);
        }
        rc = dist_agree(w, rc);
        dist_bcast(w, &remaining, sizeof remaining, 0);
    }
    if (w->rank == 0)
        claim_release(claim);
    s->attempts += base;
    s->points += (double)base * (double)n;
    s->class_seconds += time_now() - t0;
    free(mine);
    free(mine_at);
    free(counts);
    free(displs);
    free(pts);
    free(valid);
    free(params);
    return rc;
}

/* A class file of the library, as rank 0 lists them (valid files only, in name order). */
typedef struct lib_class {
    char name[16]; /* "NNNNNN.csv" */
    char sha[SHA256_DIGEST_LEN * 2 + 1];
    ifs_params p;
} lib_class;

static int is_class_name(const char *nm) {
    return strlen(nm) == 10 && !strcmp(nm + 6, ".csv") && strspn(nm, "0123456789") == 6;
}

static int list_classes(const char *dir, lib_class **out, int *n) {
    struct dirent **list = NULL;
    *out = NULL;
    *n = 0;
    int m = scandir(dir, &list, NULL, alphasort);
    if (m < 0)
        return err_set(ERR_IO, "cannot list %s: %s", dir, strerror(errno));
    lib_class *cl = calloc((size_t)(m ? m : 1), sizeof *cl);
    int got = 0;
    char p[FS_PATH_MAX];
    for (int i = 0; i < m; i++) {
        const char *nm = list[i]->d_name;
        if (cl && is_class_name(nm)) {
            snprintf(p, sizeof p, "%s/%s", dir, nm);
            /* scan_classes removed corrupt files before; one that turned corrupt since is
             * skipped here and regenerated by the next run. */
            if (read_class(p, &cl[got].p, cl[got].sha) == 0) {
                snprintf(cl[got].name, sizeof cl[got].name, "%s", nm);
                got++;
            }
        }
        free(list[i]);
    }
    free(list);
    err_clear();
    if (!cl)
        return err_set(ERR_NOMEM, "out of memory listing %s", dir);
    *out = cl;
    *n = got;
    return 0;
}

/* rejected.csv of a point count: (class file, sha, category) pairs whose instances diverge. */
typedef struct lib_reject {
    char name[16];
    char sha[SHA256_DIGEST_LEN * 2 + 1];
    int cat;
} lib_reject;

static int read_rejected(const char *path, lib_reject **out, int *n) {
    *out = NULL;
    *n = 0;
    if (!fs_exists(path))
        return 0;
    char *txt = NULL;
    int rc = fs_read_file(path, &txt, NULL);
    if (rc)
        return rc;
    size_t lines = 1;
    for (const char *q = txt; *q; q++)
        lines += *q == '\n';
    lib_reject *r = malloc(lines * sizeof *r); /* one entry per line at most */
    char *save = NULL;
    for (char *l = strtok_r(txt, "\n", &save); l && r; l = strtok_r(NULL, "\n", &save)) {
        lib_reject x;
        if (sscanf(l, "%15[0-9.csv],%64[0-9a-f],%d", x.name, x.sha, &x.cat) != 3)
            continue; /* a line written by someone else: ignore it */
        r[(*n)++] = x;
    }
    free(txt);
    if (!r)
        return err_set(ERR_NOMEM, "out of memory reading %s", path);
    *out = r;
    return 0;
}

static int is_rejected(const lib_reject *r, int nr, const lib_class *c, int cat) {
    for (int i = 0; i < nr; i++)
        if (r[i].cat == cat && !strcmp(r[i].sha, c->sha) && !strcmp(r[i].name, c->name))
            return 1;
    return 0;
}

/* The class of each category (see library.h): category i takes class i unless rejected for it,
 * else the first class beyond the categories that no category uses and that is not rejected for
 * it. as[i] = index into cl, or -1 when no class is left. Returns the number of categories
 * without a class. */
static int assign_classes(const lib_class *cl, int ncl, const lib_reject *rj, int nrj, int ncat,
                          int *as) {
    unsigned char *used = calloc((size_t)(ncl ? ncl : 1), 1);
    int missing = 0;
    for (int i = 0; i < ncat; i++) {
        as[i] = -1;
        if (i < ncl && !is_rejected(rj, nrj, &cl[i], i))
            as[i] = i;
        for (int k = ncat; k < ncl && as[i] < 0 && used; k++)
            if (!used[k] && !is_rejected(rj, nrj, &cl[k], i))
                as[i] = k;
        if (as[i] >= 0 && used)
            used[as[i]] = 1;
        else
            missing++;
    }
    free(used);
    return missing;
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

/* Whether the category folder `dir` is complete for class `c`: its .source names c and all its
 * instances are valid. Read-only: a complete category needs no claim (and a read-only library
 * stays usable). */
static int category_complete(const fractal_spec *s, const char *dir, int cat, const lib_class *c) {
    char src[FS_PATH_MAX + 16], want[128], p[FS_PATH_MAX];
    snprintf(src, sizeof src, "%s/.source", dir);
    snprintf(want, sizeof want, "%s %s\n", c->name, c->sha);
    char *have = NULL;
    int ok = fs_exists(src) && fs_read_file(src, &have, NULL) == 0 && !strcmp(have, want);
    free(have);
    err_clear();
    for (int i = 0; ok && i < IFS_INSTANCES; i++) {
        fractal_instance_path(s, cat, i, p, sizeof p);
        ok = instance_valid(p, s->point_num);
    }
    return ok;
}

/* Makes the category folder `dir` belong to class `c`: when its .source names another class (or
 * is missing), the instances are stale and removed, then .source is rewritten. Returns the
 * number of stale instances removed, or a negative error. Removal comes before the new record,
 * so a kill in between leaves a folder that the next run cleans again. Called only while holding
 * the category's claim: a job that is still writing this folder holds it, so nothing of a live
 * writer is ever removed. */
static long claim_category(const char *dir, int cat, const lib_class *c) {
    char src[FS_PATH_MAX + 16], want[128];
    snprintf(src, sizeof src, "%s/.source", dir);
    snprintf(want, sizeof want, "%s %s\n", c->name, c->sha);
    char *have = NULL;
    if (fs_exists(src) && fs_read_file(src, &have, NULL) == 0 && !strcmp(have, want)) {
        free(have);
        return 0;
    }
    free(have);
    err_clear();
    long removed = 0;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char prefix[16], p[FS_PATH_MAX + 300];
        snprintf(prefix, sizeof prefix, "%06d_", cat);
        while ((e = readdir(d)) != NULL) {
            size_t l = strlen(e->d_name);
            if (strncmp(e->d_name, prefix, 7) || l < 4 || strcmp(e->d_name + l - 4, ".npy"))
                continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            removed += unlink(p) == 0;
        }
        closedir(d);
    }
    int rc = fs_write_file(src, want, strlen(want), 0);
    return rc ? rc : removed;
}

/* Records (class, category) pairs in rejected.csv, atomically, under its own claim: the file is
 * read again under it, so pairs that another job recorded meanwhile are kept. */
static int add_rejected(const char *idir, const char *path, const lib_class *cl, const int *as,
                        const int *failed, int ncat) {
    char claim[FS_PATH_MAX + 32];
    snprintf(claim, sizeof claim, "%s/.rejected.claim", idir);
    int rc = claim_take(claim, path);
    if (rc)
        return rc;
    remove_debris(idir); /* rejected.csv's temporaries, the only ones in this folder */
    lib_reject *old = NULL;
    int nold = 0;
    fs_atomic a;
    rc = read_rejected(path, &old, &nold);
    if (rc == 0)
        rc = fs_atomic_open(&a, path);
    if (rc == 0) {
        for (int i = 0; i < nold; i++)
            fprintf(a.fp, "%s,%s,%d\n", old[i].name, old[i].sha, old[i].cat);
        for (int i = 0; i < ncat; i++)
            if (failed[i] && !is_rejected(old, nold, &cl[as[i]], i))
                fprintf(a.fp, "%s,%s,%d\n", cl[as[i]].name, cl[as[i]].sha, i);
        rc = fs_atomic_commit(&a, 0);
    }
    free(old);
    claim_release(claim);
    return rc;
}

static void category_claim_path(const char *idir, int cat, char *buf, size_t n) {
    snprintf(buf, n, "%s/%06d/.claim", idir, cat);
}

/* What one pass of instance generation found (rank 0's view, broadcast). */
typedef struct inst_pass {
    int nclasses;  /* class files listed */
    int missing;   /* categories without a class: more classes are needed */
    int rejected;  /* categories whose class diverged here (recorded; assign again) */
    int pending;   /* categories that another job is generating (claimed): wait, then look again */
    int wait_cat;  /* the first of them */
} inst_pass;

/* Collective. One pass of instance generation for the current class assignment, over the
 * categories that are incomplete and not claimed by another job; `made` (rank 0, ncat * 145)
 * marks the instances this job wrote. Claims are taken by rank 0 and released once every rank
 * has finished writing. */
static int generate_instances(const fractal_spec *c, const dist_world *w, fractal_summary *s,
                              unsigned char *made, inst_pass *out) {
    char cdir[FS_PATH_MAX], idir[FS_PATH_MAX], rjpath[FS_PATH_MAX + 16];
    fractal_class_dir(c, cdir, sizeof cdir);
    fractal_instance_dir(c, idir, sizeof idir);
    snprintf(rjpath, sizeof rjpath, "%s/rejected.csv", idir);
    const int ncat = c->n_categories;
    const long total = (long)ncat * IFS_INSTANCES;
    ifs_params *cls = calloc((size_t)ncat, sizeof *cls);
    int *work = malloc((size_t)total * sizeof *work); /* cat * 145 + inst */
    int *as = malloc((size_t)ncat * sizeof *as), *failed = calloc((size_t)ncat, sizeof *failed);
    unsigned char *held = calloc((size_t)ncat, 1); /* rank 0: claims taken in this pass */
    lib_class *cl = NULL;
    lib_reject *rj = NULL;
    int ncl = 0, nrj = 0, nwork = 0;
    long stale = 0;
    int rc = cls && work && as && failed && held ? 0 : err_set(ERR_NOMEM, "out of memory");
    memset(out, 0, sizeof *out);
    out->wait_cat = -1;
    char claim[FS_PATH_MAX + 32];
    if (w->rank == 0 && rc == 0) {
        rc = list_classes(cdir, &cl, &ncl);
        if (rc == 0)
            rc = fs_mkdir_p(idir);
        if (rc == 0)
            rc = read_rejected(rjpath, &rj, &nrj);
        if (rc == 0)
            out->missing = assign_classes(cl, ncl, rj, nrj, ncat, as);
        if (rc == 0)
            clear_dead_claim(idir, ".rejected.claim");
        int nheld = 0;
        for (int cat = 0; cat < ncat && rc == 0 && out->missing == 0; cat++) {
            char d[FS_PATH_MAX + 16];
            snprintf(d, sizeof d, "%s/%06d", idir, cat);
            rc = fs_mkdir_p(d);
            if (rc)
                continue;
            if (category_complete(c, d, cat, &cl[as[cat]])) {
                clear_dead_claim(d, ".claim");
                continue;
            }
            category_claim_path(idir, cat, claim, sizeof claim);
            int r = claim_try(claim, NULL);
            if (r < 0) {
                rc = r;
            } else if (r == 1) {
                held[cat] = 1;
                nheld++;
            } else if (out->pending++ == 0) {
                out->wait_cat = cat;
            }
        }
        /* The claims are ours: read the shared records again, as the jobs that held them before
         * may have rejected a class for them (they record it before releasing). */
        if (rc == 0 && nheld) {
            free(cl), free(rj);
            cl = NULL, rj = NULL;
            rc = list_classes(cdir, &cl, &ncl);
            if (rc == 0)
                rc = read_rejected(rjpath, &rj, &nrj);
            if (rc == 0)
                out->missing = assign_classes(cl, ncl, rj, nrj, ncat, as);
        }
        for (int cat = 0; cat < ncat && rc == 0 && out->missing == 0; cat++) {
            if (!held[cat])
                continue;
            char d[FS_PATH_MAX + 16], p[FS_PATH_MAX];
            snprintf(d, sizeof d, "%s/%06d", idir, cat);
            remove_debris(d);
            cls[cat] = cl[as[cat]].p;
            long st = claim_category(d, cat, &cl[as[cat]]);
            if (st < 0)
                rc = (int)st;
            stale += st > 0 ? st : 0;
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
    out->nclasses = ncl;
    rc = dist_agree(w, rc);
    dist_bcast(w, out, sizeof *out, 0);
    if (rc == 0 && !out->missing) {
        dist_bcast(w, &nwork, sizeof nwork, 0);
        dist_bcast(w, cls, (size_t)ncat * sizeof *cls, 0);
        dist_bcast(w, work, (size_t)nwork * sizeof *work, 0);
    }
    s->instances_total = total;
    s->instances_stale += stale;
    size_t lo = 0, hi = 0;
    if (rc == 0 && !out->missing)
        dist_block(w, (size_t)nwork, &lo, &hi);
    size_t n = (size_t)c->point_num;
    float *pts = malloc(n * 3 * sizeof *pts);
    double *scratch = malloc(n * 3 * sizeof *scratch);
    if (!pts || !scratch)
        rc = err_set(ERR_NOMEM, "out of memory for %zu points", n);
    double t0 = time_now(), last = t0;
    long fallback = 0, attempts = 0, written = 0;
    for (size_t k = lo; k < hi && rc == 0; k++) {
        int cat = work[k] / IFS_INSTANCES, inst = work[k] % IFS_INSTANCES;
        if (failed[cat])
            continue; /* this class is being replaced: its other instances are moot */
        int a = ifs_instance(&cls[cat], c->seed, cat, inst, pts, scratch, n);
        attempts += a < 0 ? 5 : a + 1;
        if (a < 0) {
            /* Diverges even with the class's own parameters at this point count. */
            failed[cat] = 1;
            continue;
        }
        fallback += a == 4;
        char p[FS_PATH_MAX];
        fractal_instance_path(c, cat, inst, p, sizeof p);
        int64_t shape[2] = {(int64_t)n, 3};
        rc = npy_save(p, NPY_F32, 2, shape, pts);
        written += rc == 0;
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
    if (rc == 0)
        dist_max_ints(w, failed, ncat);
    out->rejected = 0;
    for (int i = 0; i < ncat; i++)
        out->rejected += failed[i] != 0;
    if (rc == 0 && w->rank == 0) {
        for (int k = 0; k < nwork; k++)
            if (!failed[work[k] / IFS_INSTANCES])
                made[work[k]] = 1;
        if (out->rejected) {
            for (int i = 0; i < ncat; i++)
                if (failed[i])
                    log_warn("class %s diverges at %ld points as category %d; category %d takes "
                             "another class (recorded in %s)",
                             cl[as[i]].name, c->point_num, i, i, rjpath);
            rc = add_rejected(idir, rjpath, cl, as, failed, ncat);
        }
    }
    rc = dist_agree(w, rc);
    /* Every rank has finished writing: the categories are complete (or recorded as rejected). */
    for (int cat = 0; w->rank == 0 && cat < ncat; cat++)
        if (held[cat]) {
            category_claim_path(idir, cat, claim, sizeof claim);
            claim_release(claim);
        }
    s->instances_new += dist_sum_ll(w, written);
    s->instances_fallback += dist_sum_ll(w, fallback);
    s->points += (double)dist_sum_ll(w, attempts) * (double)n;
    s->instance_seconds += dist_max_double(w, time_now() - t0);
    free(pts), free(scratch), free(cls), free(work), free(as), free(failed), free(cl), free(rj);
    free(held);
    return rc;
}

/* datagen_from_scratch: empties `dir` (all but its claim) under its claim, so that a job still
 * writing there is waited for, never cut short. */
static int clear_claimed(const char *dir, const char *claim_name) {
    if (!fs_is_dir(dir))
        return 0;
    char claim[FS_PATH_MAX + 32], what[FS_PATH_MAX + 32];
    snprintf(claim, sizeof claim, "%s/%s", dir, claim_name);
    snprintf(what, sizeof what, "%s (to delete it: datagen_from_scratch)", dir);
    int rc = claim_take(claim, what);
    if (rc)
        return rc;
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[FS_PATH_MAX + 300];
    while (d && rc == 0 && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            !strncmp(e->d_name, claim_name, strlen(claim_name)))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        /* Category folders are cleared under their own claims (below), not here. */
        if (!strcmp(claim_name, ".rejected.claim") && fs_is_dir(p))
            continue;
        rc = fs_rm_rf(p);
    }
    if (d)
        closedir(d);
    claim_release(claim);
    return rc;
}

static int from_scratch(const fractal_spec *c) {
    char cdir[FS_PATH_MAX], idir[FS_PATH_MAX], sub[FS_PATH_MAX + 300];
    fractal_class_dir(c, cdir, sizeof cdir);
    fractal_instance_dir(c, idir, sizeof idir);
    int rc = clear_claimed(cdir, ".claim");
    if (rc == 0)
        rc = clear_claimed(idir, ".rejected.claim");
    DIR *d = rc == 0 ? opendir(idir) : NULL;
    struct dirent *e;
    while (d && rc == 0 && (e = readdir(d)) != NULL) {
        snprintf(sub, sizeof sub, "%s/%s", idir, e->d_name);
        if (e->d_name[0] != '.' && fs_is_dir(sub))
            rc = clear_claimed(sub, ".claim");
    }
    if (d)
        closedir(d);
    return rc;
}

int fractal_generate(const fractal_spec *c, const dist_world *w, fractal_summary *s) {
    memset(s, 0, sizeof *s);
    int rc = 0;
    const long total = (long)c->n_categories * IFS_INSTANCES;
    unsigned char *made = NULL;
    if (w->rank == 0) {
        /* Fail early, before any file is written, if the library root cannot be created. */
        rc = fs_check_writable_dir(c->base_dir);
        if (rc == 0 && !(made = calloc((size_t)total, 1)))
            rc = err_set(ERR_NOMEM, "out of memory");
        if (rc == 0 && c->from_scratch)
            rc = from_scratch(c);
    }
    rc = dist_agree(w, rc);
    if (rc) {
        free(made);
        return rc;
    }
    /* Classes, then instances; a category whose class diverges here takes another class (a
     * new one is searched for when none is left) until every category has its 145 instances.
     * Each such round rejects at least one (class, category) pair of a finite library or adds a
     * class, so the bound only guards against a bug. Categories that other jobs are generating
     * are waited for, one at a time, and looked at again. */
    int need = c->n_categories;
    inst_pass ip;
    for (int round = 0, pass = 0; rc == 0; pass++) {
        if (round == 1000) {
            rc = err_set(ERR_INTERNAL, "fractal library: no stable class assignment after %d "
                                       "rounds", round);
            break;
        }
        scaffold_trace_region tr = SCAFFOLD_TRACE_REGION_BEGIN("generate_classes",
                                                               SCAFFOLD_TRACE_CAT_DATA);
        int before = s->classes_new;
        rc = generate_classes(c, w, need, s);
        if (pass == 0)
            s->classes_reused = need - (s->classes_new - before);
        SCAFFOLD_TRACE_REGION_INT(tr, "attempts", s->attempts);
        SCAFFOLD_TRACE_REGION_END(tr);
        dist_barrier(w);
        if (rc)
            break;
        tr = SCAFFOLD_TRACE_REGION_BEGIN("generate_instances", SCAFFOLD_TRACE_CAT_DATA);
        rc = generate_instances(c, w, s, made, &ip);
        SCAFFOLD_TRACE_REGION_INT(tr, "instances_new", s->instances_new);
        SCAFFOLD_TRACE_REGION_END(tr);
        s->classes_rejected += ip.rejected;
        if (rc)
            break;
        if (ip.missing || ip.rejected) {
            round++;
            /* More classes: the listed ones plus one per category without a class. */
            if (ip.missing)
                need = ip.nclasses + ip.missing;
            continue;
        }
        if (!ip.pending)
            break;
        if (w->rank == 0) {
            char idir[FS_PATH_MAX], claim[FS_PATH_MAX + 32], what[64];
            fractal_instance_dir(c, idir, sizeof idir);
            category_claim_path(idir, ip.wait_cat, claim, sizeof claim);
            snprintf(what, sizeof what, "fractal category %d (%ld points)", ip.wait_cat,
                     c->point_num);
            rc = claim_wait(claim, what);
        }
        rc = dist_agree(w, rc);
    }
    /* Reused: every instance of the library that this job did not write (found in place, or
     * written by another job meanwhile). */
    long mine = 0;
    for (long i = 0; made && i < total; i++)
        mine += made[i];
    dist_bcast(w, &mine, sizeof mine, 0);
    s->instances_reused = total - mine;
    free(made);
    return rc;
}
