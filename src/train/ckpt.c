/* ckpt: checkpoint pairs, best links, async writer, resume (see ckpt.h). */
#include "train/ckpt.h"

#include "core/err.h"
#include "core/fault.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/prof.h"
#include "nn/checkpoint.h"
#include "nn/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

void ckpt_writer_init(ckpt_writer *w, const char *dir, int async) {
    memset(w, 0, sizeof *w);
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    w->async = async;
}

/* The staging folder of a save (see ckpt.h): inside the checkpoint folder, so that renames out
 * of it are atomic. */
#define CKPT_PENDING ".pending"

static void path_of(const char *dir, const char *tag, int optim, char *buf, size_t n) {
    snprintf(buf, n, "%s/checkpoint_%s%s.safetensors", dir, tag, optim ? ".optim" : "");
}

static void pending_dir(const char *dir, char *buf, size_t n) {
    snprintf(buf, n, "%s/" CKPT_PENDING, dir);
}

static long long file_size(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 ? (long long)st.st_size : 0;
}

/* Renames (entries in the same directory) are durable once the directory is synced. */
static void sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* The k-th rename of a save (fault point KILL_IN_PAIR fires before it). */
static int pair_step(const char *src, const char *dst, int link_it, int k, long kill_at) {
    if (kill_at > 0 && k == kill_at)
        raise(SIGKILL);
    if (!link_it) {
        if (rename(src, dst) != 0)
            return err_set(ERR_IO, "cannot rename %s to %s: %s", src, dst, strerror(errno));
        return 0;
    }
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.link.%ld", dst, (long)getpid());
    unlink(tmp);
    if (link(src, tmp) != 0 || rename(tmp, dst) != 0) {
        int e = errno;
        unlink(tmp);
        return err_set(ERR_IO, "cannot link %s to %s: %s", dst, src, strerror(e));
    }
    return 0;
}

/* The metadata of a save: the scalars, and those of a save inside an epoch. */
typedef struct ckpt_meta {
    char v[10][64];
    char *acc; /* "a,b,c,..." (partial saves), malloc'ed */
    const char *kv[2 * 12];
    int n;
} ckpt_meta;

static int meta_build(ckpt_meta *m, const ckpt_state *st) {
    memset(m, 0, sizeof *m);
    snprintf(m->v[0], 64, "%d", st->epoch);
    snprintf(m->v[1], 64, "%.17g", st->val_loss_avg);
    snprintf(m->v[2], 64, "%.17g", st->val_dice);
    snprintf(m->v[3], 64, "%.17g", st->best_val_loss);
    snprintf(m->v[4], 64, "%ld", st->total_optimizer_steps);
    snprintf(m->v[5], 64, "%ld", st->global_step);
    snprintf(m->v[6], 64, "%.17g", st->lr);
    const char *keys[7] = {"epoch", "val_loss_avg", "val_dice", "best_val_loss",
                           "total_optimizer_steps", "global_step", "lr"};
    for (int i = 0; i < 7; i++) {
        m->kv[m->n * 2] = keys[i];
        m->kv[m->n * 2 + 1] = m->v[i];
        m->n++;
    }
    m->kv[m->n * 2] = "rng";
    m->kv[m->n * 2 + 1] = "counter-based streams keyed by (seed, purpose, epoch): no state";
    m->n++;
    if (st->partial_steps > 0) {
        size_t cap = (size_t)st->world * 3 * 26 + 1, o = 0;
        m->acc = malloc(cap);
        if (!m->acc)
            return err_set(ERR_NOMEM, "out of memory for the checkpoint metadata");
        m->acc[0] = '\0';
        for (int i = 0; i < 3 * st->world; i++)
            o += (size_t)snprintf(m->acc + o, cap - o, "%s%.17g", i ? "," : "", st->partial_acc[i]);
        snprintf(m->v[7], 64, "%d", st->partial_steps);
        snprintf(m->v[8], 64, "%.17g", st->partial_seconds);
        snprintf(m->v[9], 64, "%d", st->world);
        const char *pk[4] = {"epoch_steps_done", "epoch_seconds_done", "world_size",
                             "epoch_partial_sums"};
        const char *pv[4] = {m->v[7], m->v[8], m->v[9], m->acc};
        for (int i = 0; i < 4; i++) {
            m->kv[m->n * 2] = pk[i];
            m->kv[m->n * 2 + 1] = pv[i];
            m->n++;
        }
    }
    return 0;
}

/* Writes the pair (model + optimizer sidecar, nn/checkpoint.h) from the given buffers: both files
 * complete and synced in the staging folder, then renamed over `last` (sidecar first), then
 * linked as `best`. */
static int write_pair(ckpt_writer *w, const float *params, const float *state) {
    /* Shallow views whose slabs are the buffers to save (the live ones or a snapshot). */
    nn_unet view = *w->model;
    view.params = (float *)params;
    nn_optim ov = {0};
    ov.kind = w->kind;
    ov.step = w->opt_step;
    ov.n = view.nparams;
    ov.state = (float *)state;
    ckpt_meta meta;
    int rc = meta_build(&meta, &w->st);
    char stage[4200], sm[4300], so[4300], pm[4300], po[4300];
    pending_dir(w->dir, stage, sizeof stage);
    if (rc == 0)
        rc = fs_mkdir_p(stage);
    path_of(stage, "last", 0, sm, sizeof sm);
    path_of(stage, "last", 1, so, sizeof so);
    path_of(w->dir, "last", 0, pm, sizeof pm);
    path_of(w->dir, "last", 1, po, sizeof po);
    if (fault_hit(FAULT_KILL_IN_SAVE, w->st.epoch))
        fault_arm(FAULT_KILL_AT_COMMIT, fault_arg(FAULT_KILL_IN_SAVE, 1));
    const long kill_at = fault_hit(FAULT_KILL_IN_PAIR, w->st.epoch) ? fault_arg(FAULT_KILL_IN_PAIR, 1) : 0;
    unlink(sm); /* a staged pair of an earlier interrupted save is superseded */
    unlink(so);
    prof_begin(PROF_WRITE);
    if (rc == 0)
        rc = nn_checkpoint_save(sm, &view, &ov, meta.kv, meta.n);
    prof_end(PROF_WRITE);
    free(meta.acc);
    if (rc)
        return rc;
    sync_dir(stage);
    const int optim = fs_exists(so); /* optimizers without state (SGD) have no sidecar */
    w->bytes_written += file_size(so) + file_size(sm);
    if (optim)
        rc = pair_step(so, po, 0, 1, kill_at);
    if (rc == 0)
        rc = pair_step(sm, pm, 0, 2, kill_at);
    sync_dir(w->dir);
    for (int f = 1; f >= 0 && rc == 0 && w->make_best; f--) {
        char src[4300], dst[4300];
        path_of(w->dir, "last", f, src, sizeof src);
        path_of(w->dir, "best", f, dst, sizeof dst);
        if (f == 0 || optim)
            rc = pair_step(src, dst, 1, f ? 3 : 4, kill_at);
    }
    if (w->make_best)
        sync_dir(w->dir);
    return rc;
}

static void *writer_main(void *arg) {
    ckpt_writer *w = arg;
    /* The writer must not take cores from the training threads: OpenMP teams stall at every
     * barrier when one member is descheduled, which cost more than the save itself (measured:
     * 0.88x with a normal-priority writer on 2 cores). At the lowest priority the writer runs in
     * the gaps (loader waits, all-reduce, logging) and on spare cores. */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
    prof_thread_name("checkpoint_writer");
    prof_begin(PROF_CHECKPOINT_WRITER);
    double t0 = time_now();
    w->result = write_pair(w, w->snap_params, w->snap_state);
    if (w->result)
        snprintf(w->errmsg, sizeof w->errmsg, "%s", err_msg());
    w->seconds += time_now() - t0;
    prof_end(PROF_CHECKPOINT_WRITER);
    return NULL;
}

int ckpt_finish(ckpt_writer *w) {
    if (w->pending) {
        pthread_join(w->thread, NULL);
        w->pending = 0;
        if (w->result)
            err_set(w->result, "%s", w->errmsg);
    }
    return w->result;
}

int ckpt_save(ckpt_writer *w, const nn_unet *m, const nn_optim *o, const ckpt_state *st,
              int make_best) {
    int prev = ckpt_finish(w);
    if (prev)
        return prev;
    w->model = m;
    w->kind = o->kind;
    w->opt_step = o->step;
    w->st = *st;
    w->make_best = make_best;
    /* The partial sums go with the (possibly asynchronous) save: a copy of them. */
    w->st.partial_acc = NULL;
    if (st->partial_steps > 0) {
        double *a = realloc(w->acc_copy, (size_t)st->world * 3 * sizeof *a);
        if (!a)
            return err_set(ERR_NOMEM, "out of memory for the checkpoint's partial sums");
        memcpy(a, st->partial_acc, (size_t)st->world * 3 * sizeof *a);
        w->acc_copy = w->st.partial_acc = a;
    }
    size_t nstate = nn_optim_state_floats(o->kind, m->nparams);
    if (!w->async) {
        double t0 = time_now();
        w->result = write_pair(w, m->params, o->state);
        w->seconds += time_now() - t0;
        return w->result;
    }
    if (!w->snap_params) {
        w->snap_params = malloc(m->nparams * sizeof(float));
        w->snap_state = malloc((nstate ? nstate : 1) * sizeof(float));
        if (!w->snap_params || !w->snap_state)
            return err_set(ERR_NOMEM, "out of memory for the checkpoint snapshot");
    }
    prof_begin(PROF_CAPTURE);
    memcpy(w->snap_params, m->params, m->nparams * sizeof(float));
    if (nstate)
        memcpy(w->snap_state, o->state, nstate * sizeof(float));
    prof_end(PROF_CAPTURE);
    w->result = 0;
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
        double t0 = time_now();
        w->result = write_pair(w, w->snap_params, w->snap_state);
        w->seconds += time_now() - t0;
        return w->result;
    }
    w->pending = 1;
    return 0;
}

void ckpt_writer_free(ckpt_writer *w) {
    ckpt_finish(w);
    MEM_FREE(w->snap_params, w->snap_state, w->acc_copy);
    w->snap_params = w->snap_state = NULL;
    w->acc_copy = NULL;
}

static double meta_num(const nn_st_file *st, const char *key) {
    const char *v = nn_st_meta(st, key);
    return v ? atof(v) : 0;
}

/* The scalars of a checkpoint's metadata (partial sums allocated when present). */
static int scalars_of(const nn_st_file *f, ckpt_state *s) {
    memset(s, 0, sizeof *s);
    s->epoch = (int)meta_num(f, "epoch");
    s->val_loss_avg = meta_num(f, "val_loss_avg");
    s->val_dice = meta_num(f, "val_dice");
    s->best_val_loss = meta_num(f, "best_val_loss");
    s->total_optimizer_steps = (long)meta_num(f, "total_optimizer_steps");
    s->global_step = (long)meta_num(f, "global_step");
    s->lr = meta_num(f, "lr");
    s->partial_steps = (int)meta_num(f, "epoch_steps_done");
    if (s->partial_steps <= 0) {
        s->partial_steps = 0;
        return 0;
    }
    s->partial_seconds = meta_num(f, "epoch_seconds_done");
    s->world = (int)meta_num(f, "world_size");
    const char *acc = nn_st_meta(f, "epoch_partial_sums");
    if (s->world < 1 || s->world > 1 << 24 || !acc)
        return err_set(ERR_FORMAT, "%s: a save inside epoch %d without its world size or partial "
                                   "sums", f->path, s->epoch + 1);
    s->partial_acc = malloc((size_t)s->world * 3 * sizeof *s->partial_acc);
    if (!s->partial_acc)
        return err_set(ERR_NOMEM, "out of memory reading %s", f->path);
    const char *p = acc;
    for (int i = 0; i < 3 * s->world; i++) {
        char *end;
        s->partial_acc[i] = strtod(p, &end);
        if (end == p || (*end != ',' && *end != '\0') || (*end == '\0' && i + 1 < 3 * s->world)) {
            free(s->partial_acc);
            s->partial_acc = NULL;
            return err_set(ERR_FORMAT, "%s: epoch_partial_sums does not hold %d numbers", f->path,
                           3 * s->world);
        }
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* One checkpoint file found by a resume: where, and what its header says. */
typedef struct ckpt_file {
    char path[4300];
    const char *where; /* "checkpoint_last", "checkpoint_best", "the staging folder" */
    int ok;            /* the header opened */
    char why[320];     /* why not, or what is wrong with it */
    char pair[40];
    int sidecar;       /* a model file that has an optimizer sidecar */
    int epoch, steps;  /* progress (model files) */
} ckpt_file;

enum { CK_LAST, CK_PENDING, CK_BEST, CK_N }; /* same progress: this order */

static void file_probe(ckpt_file *f, int model) {
    nn_st_file st;
    f->ok = 0;
    if (!fs_exists(f->path)) {
        snprintf(f->why, sizeof f->why, "missing");
        return;
    }
    if (nn_st_open(&st, f->path) != 0) {
        snprintf(f->why, sizeof f->why, "%s", err_msg());
        err_clear();
        return;
    }
    const char *pair = nn_st_meta(&st, "pair_id");
    snprintf(f->pair, sizeof f->pair, "%s", pair ? pair : "");
    if (model) {
        f->sidecar = nn_st_meta(&st, "optimizer_file") != NULL;
        f->epoch = (int)meta_num(&st, "epoch");
        f->steps = (int)meta_num(&st, "epoch_steps_done");
    }
    nn_st_close(&st);
    f->ok = 1;
}

/* Where the chosen pair's files go: `last` (the file of the same tag at `dst`), keeping a
 * file there that belongs to no consistent pair as *.corrupt (evidence of what went wrong). */
static int install(const ckpt_file *src, const char *dst, const ckpt_file *all, int nall) {
    if (!strcmp(src->path, dst))
        return 0;
    int o = -1;
    for (int i = 0; i < nall; i++)
        if (!strcmp(all[i].path, dst))
            o = i;
    const ckpt_file *old = o >= 0 ? &all[o] : NULL;
    if (old && fs_exists(dst)) {
        /* paired: a file of the other kind (models at even indexes, sidecars at odd) has its id */
        int paired = 0;
        for (int i = (o + 1) % 2; i < nall && old->ok && old->pair[0]; i += 2)
            paired |= all[i].ok && !strcmp(all[i].pair, old->pair);
        if (!paired) {
            char q[4400];
            snprintf(q, sizeof q, "%s.corrupt", dst);
            if (rename(dst, q) == 0)
                log_warn("%s is unusable (%s); kept as %s", dst, old->ok ? "no file pairs with it"
                                                                     : old->why, q);
        }
    }
    /* From the staging folder: moved; from best: linked (best keeps its names). */
    return pair_step(src->path, dst, strstr(src->path, "/" CKPT_PENDING "/") == NULL, 0, 0);
}

int ckpt_exists(const char *dir) {
    char p[4300], stage[4200];
    pending_dir(dir, stage, sizeof stage);
    path_of(dir, "last", 0, p, sizeof p);
    if (fs_exists(p))
        return 1;
    path_of(dir, "best", 0, p, sizeof p);
    if (fs_exists(p))
        return 1;
    path_of(stage, "last", 0, p, sizeof p);
    return fs_exists(p);
}

int ckpt_load(const char *dir, nn_unet *m, nn_optim *o, ckpt_state *st, const char **which) {
    static const char *const where[CK_N] = {"checkpoint_last", "the staging folder of an "
                                            "interrupted save", "checkpoint_best"};
    char stage[4200];
    pending_dir(dir, stage, sizeof stage);
    /* models[i], sidecars[i]: the files of location i */
    ckpt_file f[2 * CK_N];
    memset(f, 0, sizeof f);
    int nmodels = 0;
    for (int i = 0; i < CK_N; i++)
        for (int opt = 0; opt < 2; opt++) {
            ckpt_file *x = &f[2 * i + opt];
            path_of(i == CK_PENDING ? stage : dir, i == CK_BEST ? "best" : "last", opt, x->path,
                    sizeof x->path);
            x->where = where[i];
            file_probe(x, !opt);
            nmodels += !opt && fs_exists(x->path);
        }
    if (nmodels == 0)
        return err_set(ERR_NOTFOUND, "no checkpoint in %s (neither checkpoint_last nor "
                                     "checkpoint_best)", dir);
    /* Candidates: a model and the sidecar with its pair id (anywhere), newest first. */
    int cm[CK_N], cs[CK_N], nc = 0;
    for (int i = 0; i < CK_N; i++) {
        const ckpt_file *mf = &f[2 * i];
        if (!mf->ok)
            continue;
        int side = -1;
        for (int j = 0; j < CK_N && mf->sidecar; j++) {
            int k = (i + j) % CK_N; /* its own location first */
            if (f[2 * k + 1].ok && mf->pair[0] && !strcmp(f[2 * k + 1].pair, mf->pair)) {
                side = 2 * k + 1;
                break;
            }
        }
        if (mf->sidecar && side < 0) {
            snprintf(f[2 * i].why, sizeof f[2 * i].why, "no optimizer file has its pair id %s",
                     mf->pair);
            continue;
        }
        int at = nc++;
        while (at > 0 && (f[cm[at - 1]].epoch < mf->epoch ||
                          (f[cm[at - 1]].epoch == mf->epoch && f[cm[at - 1]].steps < mf->steps))) {
            cm[at] = cm[at - 1];
            cs[at] = cs[at - 1];
            at--;
        }
        cm[at] = 2 * i;
        cs[at] = side;
    }
    int chosen = -1;
    for (int c = 0; c < nc && chosen < 0; c++) {
        nn_st_file info;
        int rc = nn_checkpoint_load_pair(f[cm[c]].path, cs[c] >= 0 ? f[cs[c]].path : NULL, m, o,
                                         &info);
        if (rc == 0) {
            rc = scalars_of(&info, st);
            nn_st_close(&info);
        }
        if (rc == 0)
            chosen = c;
        else
            snprintf(f[cm[c]].why, sizeof f[cm[c]].why, "%s", err_msg());
    }
    if (chosen < 0) {
        /* Nothing is renamed: the files stay as they are for whoever looks into it. */
        char msg[ERR_MSG_MAX - 200];
        size_t o2 = 0;
        for (int i = 0; i < CK_N; i++)
            if (fs_exists(f[2 * i].path) && o2 < sizeof msg)
                o2 += (size_t)snprintf(msg + o2, sizeof msg - o2, "%s%s: %.200s", o2 ? "; " : "",
                                       f[2 * i].where, f[2 * i].ok && !f[2 * i].why[0]
                                                           ? "unusable" : f[2 * i].why);
        return err_set(ERR_FORMAT, "no consistent checkpoint pair in %s (%s); resume from a copy "
                                   "of the run, or start a new run", dir, msg);
    }
    const ckpt_file *cmf = &f[cm[chosen]], *csf = cs[chosen] >= 0 ? &f[cs[chosen]] : NULL;
    *which = cmf->where;
    /* Tidy, now that a pair is loaded: it becomes `last` (sidecar first), a torn `best` whose
     * one file is this pair's gets the other, and the staging folder is emptied. */
    char dm[4300], dop[4300];
    path_of(dir, "last", 0, dm, sizeof dm);
    path_of(dir, "last", 1, dop, sizeof dop);
    int rc = csf ? install(csf, dop, f, 2 * CK_N) : 0;
    if (rc == 0)
        rc = install(cmf, dm, f, 2 * CK_N);
    const ckpt_file *bm = &f[2 * CK_BEST], *bo = &f[2 * CK_BEST + 1];
    if (rc == 0 && csf && bm->ok && bo->ok && strcmp(bm->pair, bo->pair)) {
        char bp[4300];
        int fix_side = !strcmp(bm->pair, cmf->pair), fix_model = !strcmp(bo->pair, cmf->pair);
        if (fix_side || fix_model) {
            path_of(dir, "best", fix_side, bp, sizeof bp);
            rc = pair_step(fix_side ? dop : dm, bp, 1, 0, 0);
            if (rc == 0)
                log_info("checkpoint_best was torn by an interrupted save; relinked to the "
                         "resumed pair");
        }
    }
    if (rc == 0) {
        fs_rm_rf(stage);
        sync_dir(dir);
    }
    if (rc)
        free(st->partial_acc);
    return rc;
}

int ckpt_resume(const char *dir, const dist_world *w, int required, nn_unet *m, nn_optim *o,
                ckpt_state *st, int *resumed) {
    const char *which = "";
    int rc = 0, fresh = 0;
    if (w->rank == 0) {
        rc = ckpt_load(dir, m, o, st, &which);
        if (rc == ERR_NOTFOUND && !required) {
            log_info("train_from_scratch is 0 but there is no checkpoint: starting fresh");
            rc = 0;
            fresh = 1;
            err_clear();
        }
        /* A save inside an epoch holds every rank's partial sums: the same world only. */
        if (rc == 0 && !fresh && st->partial_steps > 0 && st->world != w->size) {
            rc = err_set(ERR_CONFIG,
                         "%s was saved %d step(s) into epoch %d by %d rank(s): resume it on %d "
                         "rank(s) (restart.sh does), or from an epoch's end",
                         which, st->partial_steps, st->epoch + 1, st->world, st->world);
            free(st->partial_acc);
            st->partial_acc = NULL;
        }
    }
    rc = dist_agree(w, rc);
    dist_bcast(w, &fresh, sizeof fresh, 0);
    *resumed = rc == 0 && !fresh;
    if (!*resumed)
        return rc;
    dist_bcast(w, m->params, m->nparams * sizeof(float), 0);
    size_t ns = nn_optim_state_floats(o->kind, m->nparams);
    if (ns)
        dist_bcast(w, o->state, ns * sizeof(float), 0);
    dist_bcast(w, &o->step, sizeof o->step, 0);
    double *acc = w->rank == 0 ? st->partial_acc : NULL;
    dist_bcast(w, st, sizeof *st, 0);
    st->partial_acc = acc;
    if (st->partial_steps > 0) {
        if (w->rank != 0)
            st->partial_acc = malloc((size_t)st->world * 3 * sizeof *st->partial_acc);
        rc = dist_agree(w, st->partial_acc ? 0 : err_set(ERR_NOMEM, "out of memory"));
        if (rc) {
            free(st->partial_acc);
            st->partial_acc = NULL;
            return rc;
        }
        dist_bcast(w, st->partial_acc, (size_t)st->world * 3 * sizeof *st->partial_acc, 0);
        log_info("resumed from %s: epoch %d done and %d step(s) of epoch %d (val dice %.4f)",
                 which, st->epoch, st->partial_steps, st->epoch + 1, st->val_dice);
    } else {
        log_info("resumed from %s: epoch %d done (val dice %.4f)", which, st->epoch, st->val_dice);
    }
    return 0;
}
