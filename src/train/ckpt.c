/* ckpt: checkpoint pairs, best links, async writer, resume (see ckpt.h). */
#include "train/ckpt.h"

#include "core/err.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "nn/safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void ckpt_writer_init(ckpt_writer *w, const char *dir, int async) {
    memset(w, 0, sizeof *w);
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    w->async = async;
}

static const char *state_prefix(nn_optim_kind k, int which) {
    if (k == NN_OPT_ADAM)
        return which == 0 ? "exp_avg." : "exp_avg_sq.";
    return "square_avg.";
}

static int state_tensors(nn_optim_kind k) {
    return k == NN_OPT_ADAM ? 2 : k == NN_OPT_RMSPROP ? 1 : 0;
}

static void path_of(const char *dir, const char *tag, int optim, char *buf, size_t n) {
    snprintf(buf, n, "%s/checkpoint_%s%s.safetensors", dir, tag, optim ? ".optim" : "");
}

static long long file_size(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 ? (long long)st.st_size : 0;
}

/* Writes the pair from the given buffers. */
static int write_pair(ckpt_writer *w, const float *params, const float *state) {
    const nn_unet *m = w->model;
    int nt = m->ntensors, ns = state_tensors(w->kind);
    char id[64], meta_v[10][64];
    snprintf(id, sizeof id, "%d-%ld-%lx", w->st.epoch, w->st.total_optimizer_steps,
             (unsigned long)random());
    snprintf(meta_v[0], 64, "%d", w->st.epoch);
    snprintf(meta_v[1], 64, "%.17g", w->st.val_loss_avg);
    snprintf(meta_v[2], 64, "%.17g", w->st.val_dice);
    snprintf(meta_v[3], 64, "%.17g", w->st.best_val_loss);
    snprintf(meta_v[4], 64, "%ld", w->st.total_optimizer_steps);
    snprintf(meta_v[5], 64, "%ld", w->st.global_step);
    snprintf(meta_v[6], 64, "%.17g", w->st.lr);
    snprintf(meta_v[7], 64, "%lld", (long long)w->opt_step);
    snprintf(meta_v[8], 64, "%s", nn_optim_name(w->kind));
    snprintf(meta_v[9], 64, "%d,%d,%d,%d,%d", m->spec.in_channels, m->spec.n_classes,
             m->spec.layers, m->spec.base_channels, m->spec.groups);
    const char *meta[] = {"format", "scaffold-checkpoint-1", "save_id", id,
                          "epoch", meta_v[0], "val_loss_avg", meta_v[1], "val_dice", meta_v[2],
                          "best_val_loss", meta_v[3], "total_optimizer_steps", meta_v[4],
                          "global_step", meta_v[5], "lr", meta_v[6], "optimizer_step", meta_v[7],
                          "optimizer", meta_v[8], "unet_spec", meta_v[9],
                          "rng", "counter-based streams keyed by (seed, purpose, epoch): no state"};
    const int nmeta = (int)(sizeof meta / sizeof meta[0]) / 2;
    char po[4200], pm[4200];
    path_of(w->dir, "last", 1, po, sizeof po);
    path_of(w->dir, "last", 0, pm, sizeof pm);
    int rc = 0;
    /* Optimizer file first, model second: the model file's rename completes the save. */
    nn_st_out *t = calloc((size_t)(nt * (ns ? ns : 1)), sizeof *t);
    char (*names)[128] = calloc((size_t)(nt * (ns ? ns : 1)), sizeof *names);
    if (!t || !names) {
        free(t);
        free(names);
        return err_set(ERR_NOMEM, "out of memory saving a checkpoint");
    }
    for (int s = 0; s < ns; s++)
        for (int i = 0; i < nt; i++) {
            nn_st_out *o = &t[s * nt + i];
            snprintf(names[s * nt + i], 128, "%s%s", state_prefix(w->kind, s), m->tensors[i].name);
            o->name = names[s * nt + i];
            o->data = state + (size_t)s * m->nparams + m->tensors[i].offset;
            o->ndim = m->tensors[i].ndim;
            memcpy(o->shape, m->tensors[i].shape, sizeof m->tensors[i].shape);
        }
    rc = nn_st_write(po, t, nt * ns, meta, nmeta);
    if (rc == 0) {
        for (int i = 0; i < nt; i++) {
            t[i].name = m->tensors[i].name;
            t[i].data = params + m->tensors[i].offset;
            t[i].ndim = m->tensors[i].ndim;
            memcpy(t[i].shape, m->tensors[i].shape, sizeof m->tensors[i].shape);
        }
        rc = nn_st_write(pm, t, nt, meta, nmeta);
    }
    free(t);
    free(names);
    if (rc)
        return rc;
    w->bytes_written += file_size(po) + file_size(pm);
    if (w->make_best) {
        for (int f = 0; f < 2 && rc == 0; f++) {
            char src[4200], dst[4200], tmp[4300];
            path_of(w->dir, "last", f, src, sizeof src);
            path_of(w->dir, "best", f, dst, sizeof dst);
            snprintf(tmp, sizeof tmp, "%s.link.%ld", dst, (long)getpid());
            unlink(tmp);
            if (link(src, tmp) != 0 || rename(tmp, dst) != 0) {
                rc = err_set(ERR_IO, "cannot link %s to %s: %s", dst, src, strerror(errno));
                unlink(tmp);
            }
        }
    }
    return rc;
}

static void *writer_main(void *arg) {
    ckpt_writer *w = arg;
    double t0 = time_now();
    w->result = write_pair(w, w->snap_params, w->snap_state);
    if (w->result)
        snprintf(w->errmsg, sizeof w->errmsg, "%s", err_msg());
    w->seconds += time_now() - t0;
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
    memcpy(w->snap_params, m->params, m->nparams * sizeof(float));
    if (nstate)
        memcpy(w->snap_state, o->state, nstate * sizeof(float));
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
    free(w->snap_params);
    free(w->snap_state);
    w->snap_params = w->snap_state = NULL;
}

static int load_tensors(const nn_st_file *st, const char *prefix, nn_unet *m, float *dst,
                        const char *path) {
    for (int i = 0; i < m->ntensors; i++) {
        char name[160];
        snprintf(name, sizeof name, "%s%s", prefix, m->tensors[i].name);
        const nn_st_entry *e = nn_st_find(st, name);
        if (!e)
            return err_set(ERR_FORMAT, "%s: tensor '%s' is missing", path, name);
        int same = e->ndim == m->tensors[i].ndim;
        for (int d = 0; same && d < e->ndim; d++)
            same = e->shape[d] == m->tensors[i].shape[d];
        if (!same)
            return err_set(ERR_FORMAT, "%s: tensor '%s' has a different shape than this model "
                                       "(check unet_base_channels, problem_scale, "
                                       "unet_bottleneck_dim, n_categories)", path, name);
        int rc = nn_st_read_f32(st, e, dst + m->tensors[i].offset);
        if (rc)
            return rc;
    }
    return 0;
}

int ckpt_load_model(const char *path, nn_unet *m) {
    nn_st_file st;
    int rc = nn_st_open(&st, path);
    if (rc)
        return rc;
    rc = load_tensors(&st, "", m, m->params, path);
    nn_st_close(&st);
    return rc;
}

static double meta_num(const nn_st_file *st, const char *key) {
    const char *v = nn_st_meta(st, key);
    return v ? atof(v) : 0;
}

static int load_pair(const char *dir, const char *tag, nn_unet *m, nn_optim *o, ckpt_state *s) {
    char pm[4200], po[4200];
    path_of(dir, tag, 0, pm, sizeof pm);
    path_of(dir, tag, 1, po, sizeof po);
    if (!fs_exists(pm))
        return err_set(ERR_NOTFOUND, "%s does not exist", pm);
    nn_st_file fm, fo;
    int rc = nn_st_open(&fm, pm);
    if (rc)
        return rc;
    rc = nn_st_open(&fo, po);
    if (rc) {
        nn_st_close(&fm);
        return rc;
    }
    const char *idm = nn_st_meta(&fm, "save_id"), *ido = nn_st_meta(&fo, "save_id");
    const char *kind = nn_st_meta(&fm, "optimizer");
    if (!idm || !ido || strcmp(idm, ido) != 0)
        rc = err_set(ERR_FORMAT, "%s and %s come from different saves (interrupted save)", pm, po);
    else if (!kind || strcmp(kind, nn_optim_name(o->kind)) != 0)
        rc = err_set(ERR_FORMAT, "%s was saved with optimizer %s, this run uses %s", pm,
                     kind ? kind : "?", nn_optim_name(o->kind));
    if (rc == 0)
        rc = load_tensors(&fm, "", m, m->params, pm);
    for (int sidx = 0; rc == 0 && sidx < state_tensors(o->kind); sidx++)
        rc = load_tensors(&fo, state_prefix(o->kind, sidx), m, o->state + (size_t)sidx * m->nparams,
                          po);
    if (rc == 0) {
        s->epoch = (int)meta_num(&fm, "epoch");
        s->val_loss_avg = meta_num(&fm, "val_loss_avg");
        s->val_dice = meta_num(&fm, "val_dice");
        s->best_val_loss = meta_num(&fm, "best_val_loss");
        s->total_optimizer_steps = (long)meta_num(&fm, "total_optimizer_steps");
        s->global_step = (long)meta_num(&fm, "global_step");
        s->lr = meta_num(&fm, "lr");
        o->step = (int64_t)meta_num(&fm, "optimizer_step");
    }
    nn_st_close(&fm);
    nn_st_close(&fo);
    return rc;
}

int ckpt_load(const char *dir, nn_unet *m, nn_optim *o, ckpt_state *st, const char **which) {
    int rc = load_pair(dir, "last", m, o, st);
    if (rc == 0) {
        *which = "last";
        return 0;
    }
    if (rc != ERR_NOTFOUND) {
        log_warn("checkpoint_last is unusable (%s); renaming it *.corrupt and using "
                 "checkpoint_best", err_msg());
        for (int f = 0; f < 2; f++) {
            char p[4200], q[4300];
            path_of(dir, "last", f, p, sizeof p);
            snprintf(q, sizeof q, "%s.corrupt", p);
            rename(p, q);
        }
    }
    int rb = load_pair(dir, "best", m, o, st);
    if (rb == 0) {
        *which = "best";
        return 0;
    }
    if (rb == ERR_NOTFOUND && rc == ERR_NOTFOUND)
        return err_set(ERR_NOTFOUND, "no checkpoint in %s (neither checkpoint_last nor "
                                     "checkpoint_best)", dir);
    return rb;
}
