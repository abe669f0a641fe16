/* library: class search and instance generation over MPI, with reuse of valid files
 * (see library.h). */
#include "fractal/library.h"

#include "core/claim.h"
#include "core/err.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/mem.h"
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

/* The state of one class search (generate_classes): the library's index space on rank 0, the
 * round's buffers on every rank, and the counts that size the next round. */
typedef struct class_search {
    const fractal_spec *c;
    const dist_world *w;
    char dir[FS_PATH_MAX];
    int cap;               /* index space: existing files may use indices up to this cap */
    int need, remaining;
    unsigned char *valid;  /* cap: index i holds a valid class file (rank 0) */
    ifs_params *params;    /* cap: its parameters (rank 0) */
    size_t n;              /* point_num */
    double *pts;           /* n x 3: one proposal's chaos game */
    ifs_params *mine;      /* batch_size: this rank's accepted proposals of the round */
    long long *mine_at;    /* their attempt numbers */
    int *counts, *displs;  /* w->size: the round's gather (rank 0) */
    long base;             /* attempts made so far, over all ranks */
    long accepted_total, prev_per;
    double last_report;
} class_search;

/* A search that finds nothing stops after this many attempts (ERR_CONFIG). */
#define CLASS_ATTEMPT_CAP 100000000L

static void class_search_free(class_search *cs) {
    MEM_FREE(cs->mine, cs->mine_at, cs->counts, cs->displs, cs->pts, cs->valid, cs->params);
}

/* Rank 0: counts the valid class files already there into *have. Too few: the search goes on
 * under the class claim (another job may be searching: wait for it, then look again, as it may
 * have written what this job needs). */
static int classes_scan_or_claim(class_search *cs, const char *claim, int *have) {
    int rc = fs_mkdir_p(cs->dir);
    if (rc == 0)
        *have = scan_classes(cs->dir, cs->valid, cs->params, cs->cap, 0);
    if (rc == 0 && *have < cs->need) {
        char what[FS_PATH_MAX + 32];
        snprintf(what, sizeof what, "the fractal classes in %s", cs->dir);
        rc = claim_take(claim, what);
        if (rc == 0)
            *have = scan_classes(cs->dir, cs->valid, cs->params, cs->cap, 1);
    } else if (rc == 0) {
        clear_dead_claim(cs->dir, ".claim");
    }
    return rc;
}

/* Collective. Per-rank attempts this round: upstream's rule once the acceptance rate is known;
 * the first round tries 4x what is needed (the rate is typically 20-60%). */
static long classes_round_attempts(class_search *cs) {
    const int size = cs->w->size;
    long per;
    if (cs->accepted_total == 0) {
        /* Rate unknown: start at 4x what is needed, then grow 4x per empty round. */
        per = cs->prev_per ? 4 * cs->prev_per : (4L * cs->remaining + size - 1) / size;
    } else {
        double rate = (double)cs->accepted_total / (double)cs->base;
        per = (long)ceil(ceil(1.1 * cs->remaining / rate) / size);
    }
    if (per > cs->c->batch_size)
        per = cs->c->batch_size;
    if (per < 1)
        per = 1;
    /* Only rank 0 knows the acceptance count: its choice is the one every rank uses, or the
     * ranks would try different attempt ranges and the library would depend on the rank
     * count. */
    dist_bcast(cs->w, &per, sizeof per, 0);
    cs->prev_per = per;
    return per;
}

/* This rank's attempts first..first+per-1: the accepted proposals go to cs->mine. Returns how
 * many. */
static int classes_try(class_search *cs, long first, long per) {
    const fractal_spec *c = cs->c;
    int nmine = 0;
    double tr0 = time_now();
    for (long a = first; a < first + per; a++) {
        ifs_params ip;
        ifs_propose(c->seed, (uint64_t)a, &ip);
        int ok = ifs_chaos(&ip, c->seed, RNG_CLASS_CHAOS, (uint64_t)a, 0, cs->pts, cs->n);
        if (ifs_accept(cs->pts, cs->n, ok, c->normalize, c->variance_threshold, NULL)) {
            cs->mine[nmine] = ip;
            cs->mine_at[nmine++] = a;
        }
    }
    log_debug("class round: attempts %ld..%ld, %d accepted, %.3f s", first, first + per - 1,
              nmine, time_now() - tr0);
    return nmine;
}

/* Collective. The round's accepted proposals of every rank on rank 0, in rank order = attempt
 * order (allocated there, *total of them; NULL elsewhere). */
static ifs_params *classes_gather(class_search *cs, int nmine, int *total) {
    const dist_world *w = cs->w;
    *total = 0;
    dist_gather_ints(w, &nmine, 1, cs->counts, 0);
    ifs_params *all = NULL;
    if (w->rank == 0) {
        for (int r = 0; r < w->size; r++) {
            cs->displs[r] = *total * IFS_NPARAMS;
            *total += cs->counts[r];
            cs->counts[r] *= IFS_NPARAMS;
        }
        all = malloc((size_t)(*total ? *total : 1) * sizeof *all);
    }
    dist_gatherv_doubles(w, (const double *)cs->mine, nmine * IFS_NPARAMS, (double *)all,
                         cs->counts, cs->displs, 0);
    return all;
}

/* Rank 0: writes the round's proposals that are not classes already into the lowest free
 * indices, until no more are needed. */
static int classes_keep(class_search *cs, const ifs_params *all, int total, fractal_summary *s) {
    int rc = 0;
    for (int i = 0; i < total && cs->remaining > 0 && rc == 0; i++) {
        int dup = 0;
        for (int k = 0; k < cs->cap && !dup; k++)
            dup = cs->valid[k] && same_params(&cs->params[k], &all[i]);
        if (dup)
            continue;
        int idx = 0;
        while (idx < cs->cap && cs->valid[idx])
            idx++;
        char path[FS_PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/%06d.csv", cs->dir, idx);
        rc = write_class(path, &all[i]);
        if (rc == 0) {
            cs->valid[idx] = 1;
            cs->params[idx] = all[i];
            cs->remaining--;
            s->classes_new++;
        }
    }
    return rc;
}

/* Rank 0, after a round: the progress line (at most every second), and the attempt cap, whose
 * error replaces the round's. */
static int classes_round_end(class_search *cs, int rc) {
    double now = time_now();
    if (now - cs->last_report > 1.0 || cs->remaining == 0) {
        log_info("classes: %d/%d accepted, %ld attempts (%.0f%% acceptance)",
                 cs->need - cs->remaining, cs->need, cs->base,
                 100.0 * (double)cs->accepted_total / (double)cs->base);
        cs->last_report = now;
    }
    if (cs->remaining > 0 && cs->base >= CLASS_ATTEMPT_CAP)
        rc = err_set(ERR_CONFIG,
                     "no fractal class found after %ld attempts: variance_threshold %g "
                     "is too high for %ld points per fractal (lower it or "
                     "problem_scale)",
                     cs->base, cs->c->variance_threshold, cs->c->point_num);
    return rc;
}

/* Class search (collective): makes sure at least `need` valid class files exist. */
static int generate_classes(const fractal_spec *c, const dist_world *w, int need,
                            fractal_summary *s) {
    class_search cs = {.c = c, .w = w, .need = need, .cap = need + 4096};
    fractal_class_dir(c, cs.dir, sizeof cs.dir);
    cs.valid = calloc((size_t)cs.cap, 1);
    cs.params = calloc((size_t)cs.cap, sizeof *cs.params);
    int rc = cs.valid && cs.params ? 0 : err_set(ERR_NOMEM, "out of memory");
    int have = 0;
    char claim[FS_PATH_MAX + 16];
    snprintf(claim, sizeof claim, "%s/.claim", cs.dir);
    if (w->rank == 0 && rc == 0)
        rc = classes_scan_or_claim(&cs, claim, &have);
    rc = dist_agree(w, rc);
    double t0 = 0;
    if (rc == 0) {
        dist_bcast(w, &have, sizeof have, 0);
        cs.remaining = need - have;
        t0 = time_now();
        cs.n = (size_t)c->point_num;
        cs.pts = malloc(cs.n * 3 * sizeof *cs.pts);
        if (!cs.pts)
            rc = err_set(ERR_NOMEM, "out of memory for %zu points", cs.n);
        rc = dist_agree(w, rc);
    }
    if (rc) {
        if (w->rank == 0)
            claim_release(claim);
        class_search_free(&cs);
        return rc;
    }
    cs.last_report = t0;
    cs.mine = malloc((size_t)c->batch_size * sizeof *cs.mine);
    cs.mine_at = malloc((size_t)c->batch_size * sizeof *cs.mine_at);
    cs.counts = calloc((size_t)w->size, sizeof *cs.counts);
    cs.displs = calloc((size_t)w->size, sizeof *cs.displs);
    while (cs.remaining > 0 && rc == 0) {
        long per = classes_round_attempts(&cs);
        int nmine = classes_try(&cs, cs.base + (long)w->rank * per, per), total;
        ifs_params *all = classes_gather(&cs, nmine, &total);
        cs.base += per * w->size;
        if (w->rank == 0) {
            cs.accepted_total += total;
            rc = classes_keep(&cs, all, total, s);
            free(all);
            rc = classes_round_end(&cs, rc);
        }
        rc = dist_agree(w, rc);
        dist_bcast(w, &cs.remaining, sizeof cs.remaining, 0);
    }
    if (w->rank == 0)
        claim_release(claim);
    s->attempts += cs.base;
    s->points += (double)cs.base * (double)cs.n;
    s->class_seconds += time_now() - t0;
    class_search_free(&cs);
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

/* A line of the rejection list; one written by someone else is ignored. */
static int parse_reject(char *l, int lineno, void *rec) {
    (void)lineno;
    lib_reject x;
    if (sscanf(l, "%15[0-9.csv],%64[0-9a-f],%d", x.name, x.sha, &x.cat) != 3)
        return 0;
    memcpy(rec, &x, sizeof x);
    return 1;
}

static int read_rejected(const char *path, lib_reject **out, int *n) {
    void *r;
    int rc = fs_read_records(path, sizeof **out, parse_reject, &r, n);
    *out = r;
    return rc;
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

/* One pass of instance generation (generate_instances): what rank 0 reads and claims, the work
 * every rank shares, and what the writing counts. */
typedef struct inst_plan {
    const fractal_spec *c;
    char cdir[FS_PATH_MAX], idir[FS_PATH_MAX], rjpath[FS_PATH_MAX + 16];
    int ncat;
    ifs_params *cls;      /* ncat: each category's class (broadcast) */
    int *work, nwork;     /* cat * 145 + inst: the instances to write (broadcast) */
    int *as;              /* ncat: each category's index into cl (rank 0) */
    int *failed;          /* ncat: categories whose class diverged (maximum over the ranks) */
    unsigned char *held;  /* ncat, rank 0: claims taken in this pass */
    lib_class *cl;        /* rank 0: the class files */
    lib_reject *rj;       /* rank 0: the rejected records */
    int ncl, nrj;
    long stale;           /* stale claims broken */
    long fallback, attempts, written;
    double t0;            /* when the writing started */
} inst_plan;

static void inst_plan_free(inst_plan *p) {
    free(p->cls), free(p->work), free(p->as), free(p->failed), free(p->cl), free(p->rj);
    free(p->held);
}

/* Rank 0: the class files, the rejected records and each category's class from them
 * (out->missing: categories left without one); the instance folder is made on the first
 * reading. */
static int instances_assign(inst_plan *p, inst_pass *out, int first) {
    free(p->cl), free(p->rj);
    p->cl = NULL, p->rj = NULL;
    int rc = list_classes(p->cdir, &p->cl, &p->ncl);
    if (rc == 0 && first)
        rc = fs_mkdir_p(p->idir);
    if (rc == 0)
        rc = read_rejected(p->rjpath, &p->rj, &p->nrj);
    if (rc == 0)
        out->missing = assign_classes(p->cl, p->ncl, p->rj, p->nrj, p->ncat, p->as);
    return rc;
}

/* Rank 0: claims every incomplete category that no other job holds (p->held, *nheld of them);
 * the ones held elsewhere are counted in out->pending. */
static int instances_claim(inst_plan *p, inst_pass *out, int *nheld) {
    int rc = 0;
    for (int cat = 0; cat < p->ncat && rc == 0 && out->missing == 0; cat++) {
        char d[FS_PATH_MAX + 16], claim[FS_PATH_MAX + 32];
        snprintf(d, sizeof d, "%s/%06d", p->idir, cat);
        rc = fs_mkdir_p(d);
        if (rc)
            continue;
        if (category_complete(p->c, d, cat, &p->cl[p->as[cat]])) {
            clear_dead_claim(d, ".claim");
            continue;
        }
        category_claim_path(p->idir, cat, claim, sizeof claim);
        int r = claim_try(claim, NULL);
        if (r < 0) {
            rc = r;
        } else if (r == 1) {
            p->held[cat] = 1;
            (*nheld)++;
        } else if (out->pending++ == 0) {
            out->wait_cat = cat;
        }
    }
    return rc;
}

/* Rank 0: the instances of the held categories that are missing or corrupt (removed) go to
 * p->work, with each category's class in p->cls. */
static int instances_list_work(inst_plan *p, const inst_pass *out) {
    const fractal_spec *c = p->c;
    int rc = 0;
    for (int cat = 0; cat < p->ncat && rc == 0 && out->missing == 0; cat++) {
        if (!p->held[cat])
            continue;
        char d[FS_PATH_MAX + 16], path[FS_PATH_MAX];
        snprintf(d, sizeof d, "%s/%06d", p->idir, cat);
        remove_debris(d);
        p->cls[cat] = p->cl[p->as[cat]].p;
        long st = claim_category(d, cat, &p->cl[p->as[cat]]);
        if (st < 0)
            rc = (int)st;
        p->stale += st > 0 ? st : 0;
        for (int i = 0; i < IFS_INSTANCES && rc == 0; i++) {
            fractal_instance_path(c, cat, i, path, sizeof path);
            if (instance_valid(path, c->point_num))
                continue;
            if (fs_exists(path)) {
                log_warn("%s is truncated or corrupt; regenerating it", path);
                unlink(path);
            }
            p->work[p->nwork++] = cat * IFS_INSTANCES + i;
        }
    }
    return rc;
}

/* Rank 0: assigns classes, claims the categories to generate and lists their work. */
static int instances_plan(inst_plan *p, inst_pass *out) {
    int rc = instances_assign(p, out, 1);
    if (rc == 0)
        clear_dead_claim(p->idir, ".rejected.claim");
    int nheld = 0;
    if (rc == 0)
        rc = instances_claim(p, out, &nheld);
    /* The claims are ours: read the shared records again, as the jobs that held them before
     * may have rejected a class for them (they record it before releasing). */
    if (rc == 0 && nheld)
        rc = instances_assign(p, out, 0);
    if (rc == 0)
        rc = instances_list_work(p, out);
    return rc;
}

/* This rank's block [lo, hi) of the work: each instance written as .npy, a diverging class
 * marked in p->failed (its other instances skipped); rank 0 reports progress. */
static int instances_write(inst_plan *p, const dist_world *w, size_t lo, size_t hi, int rc) {
    const fractal_spec *c = p->c;
    size_t n = (size_t)c->point_num;
    float *pts = malloc(n * 3 * sizeof *pts);
    double *scratch = malloc(n * 3 * sizeof *scratch);
    if (!pts || !scratch)
        rc = err_set(ERR_NOMEM, "out of memory for %zu points", n);
    double last = p->t0 = time_now();
    for (size_t k = lo; k < hi && rc == 0; k++) {
        int cat = p->work[k] / IFS_INSTANCES, inst = p->work[k] % IFS_INSTANCES;
        if (p->failed[cat])
            continue; /* this class is being replaced: its other instances are moot */
        int a = ifs_instance(&p->cls[cat], c->seed, cat, inst, pts, scratch, n);
        p->attempts += a < 0 ? 5 : a + 1;
        if (a < 0) {
            /* Diverges even with the class's own parameters at this point count. */
            p->failed[cat] = 1;
            continue;
        }
        p->fallback += a == 4;
        char path[FS_PATH_MAX];
        fractal_instance_path(c, cat, inst, path, sizeof path);
        int64_t shape[2] = {(int64_t)n, 3};
        rc = npy_save(path, NPY_F32, 2, shape, pts);
        p->written += rc == 0;
        double now = time_now();
        if (w->rank == 0 && (now - last > 2.0)) {
            double done = (double)(k - lo + 1);
            log_info("instances: ~%.0f/%d done (%.0f instances/s over %d ranks)",
                     done * w->size < p->nwork ? done * w->size : p->nwork, p->nwork,
                     done * w->size / (now - p->t0), w->size);
            last = now;
        }
    }
    free(pts), free(scratch);
    return rc;
}

/* Rank 0, after the writing: marks what this job made, and records the classes that diverged
 * (every category of theirs takes another class in the next pass). */
static int instances_record(const inst_plan *p, unsigned char *made, const inst_pass *out) {
    for (int k = 0; k < p->nwork; k++)
        if (!p->failed[p->work[k] / IFS_INSTANCES])
            made[p->work[k]] = 1;
    if (!out->rejected)
        return 0;
    for (int i = 0; i < p->ncat; i++)
        if (p->failed[i])
            log_warn("class %s diverges at %ld points as category %d; category %d takes "
                     "another class (recorded in %s)",
                     p->cl[p->as[i]].name, p->c->point_num, i, i, p->rjpath);
    return add_rejected(p->idir, p->rjpath, p->cl, p->as, p->failed, p->ncat);
}

/* Collective. One pass of instance generation for the current class assignment, over the
 * categories that are incomplete and not claimed by another job; `made` (rank 0, ncat * 145)
 * marks the instances this job wrote. Claims are taken by rank 0 and released once every rank
 * has finished writing. */
static int generate_instances(const fractal_spec *c, const dist_world *w, fractal_summary *s,
                              unsigned char *made, inst_pass *out) {
    inst_plan p = {.c = c, .ncat = c->n_categories};
    fractal_class_dir(c, p.cdir, sizeof p.cdir);
    fractal_instance_dir(c, p.idir, sizeof p.idir);
    snprintf(p.rjpath, sizeof p.rjpath, "%s/rejected.csv", p.idir);
    const int ncat = p.ncat;
    const long total = (long)ncat * IFS_INSTANCES;
    p.cls = calloc((size_t)ncat, sizeof *p.cls);
    p.work = malloc((size_t)total * sizeof *p.work);
    p.as = malloc((size_t)ncat * sizeof *p.as);
    p.failed = calloc((size_t)ncat, sizeof *p.failed);
    p.held = calloc((size_t)ncat, 1);
    int rc = p.cls && p.work && p.as && p.failed && p.held ? 0
                                                           : err_set(ERR_NOMEM, "out of memory");
    memset(out, 0, sizeof *out);
    out->wait_cat = -1;
    if (w->rank == 0 && rc == 0)
        rc = instances_plan(&p, out);
    out->nclasses = p.ncl;
    rc = dist_agree(w, rc);
    dist_bcast(w, out, sizeof *out, 0);
    if (rc == 0 && !out->missing) {
        dist_bcast(w, &p.nwork, sizeof p.nwork, 0);
        dist_bcast(w, p.cls, (size_t)ncat * sizeof *p.cls, 0);
        dist_bcast(w, p.work, (size_t)p.nwork * sizeof *p.work, 0);
    }
    s->instances_total = total;
    s->instances_stale += p.stale;
    size_t lo = 0, hi = 0;
    if (rc == 0 && !out->missing)
        dist_block(w, (size_t)p.nwork, &lo, &hi);
    rc = dist_agree(w, instances_write(&p, w, lo, hi, rc));
    if (rc == 0)
        dist_max_ints(w, p.failed, ncat);
    out->rejected = 0;
    for (int i = 0; i < ncat; i++)
        out->rejected += p.failed[i] != 0;
    if (rc == 0 && w->rank == 0)
        rc = instances_record(&p, made, out);
    rc = dist_agree(w, rc);
    /* Every rank has finished writing: the categories are complete (or recorded as rejected). */
    for (int cat = 0; w->rank == 0 && cat < ncat; cat++)
        if (p.held[cat]) {
            char claim[FS_PATH_MAX + 32];
            category_claim_path(p.idir, cat, claim, sizeof claim);
            claim_release(claim);
        }
    s->instances_new += dist_sum_ll(w, p.written);
    s->instances_fallback += dist_sum_ll(w, p.fallback);
    s->points += (double)dist_sum_ll(w, p.attempts) * (double)c->point_num;
    s->instance_seconds += dist_max_double(w, time_now() - p.t0);
    inst_plan_free(&p);
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
