/* checkpoint: saving and loading U-Net checkpoints as safetensors (see checkpoint.h). */
#include "nn/checkpoint.h"

#include "core/err.h"
#include "core/log.h"
#include "core/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const reserved[] = {"format", "in_channels", "n_classes", "layers",
                                       "base_channels", "group_norm_groups", "pair_id",
                                       "optimizer", "optimizer_step", "optimizer_file"};

void nn_checkpoint_optim_path(const char *path, char *out, size_t outsz) {
    const char *suf = ".safetensors";
    size_t n = strlen(path), s = strlen(suf);
    if (n > s && !strcmp(path + n - s, suf))
        snprintf(out, outsz, "%.*s.optim.safetensors", (int)(n - s), path);
    else
        snprintf(out, outsz, "%s.optim.safetensors", path);
}

static const char *optim_prefix(nn_optim_kind k, int which) {
    if (k == NN_OPT_ADAM)
        return which == 0 ? "exp_avg." : "exp_avg_sq.";
    return "square_avg.";
}

static int optim_ntensors(nn_optim_kind k) {
    return k == NN_OPT_ADAM ? 2 : k == NN_OPT_RMSPROP ? 1 : 0;
}

int nn_checkpoint_save(const char *path, const nn_unet *m, const nn_optim *opt,
                       const char *const *meta, int nmeta) {
    for (int i = 0; i < nmeta; i++)
        for (size_t r = 0; r < sizeof reserved / sizeof reserved[0]; r++)
            if (!strcmp(meta[2 * i], reserved[r]))
                return err_set(ERR_USAGE, "checkpoint metadata key '%s' is reserved", meta[2 * i]);
    char pair[32], opath[4096], step[32] = "0";
    if (opt)
        snprintf(step, sizeof step, "%lld", (long long)opt->step);
    snprintf(pair, sizeof pair, "%016llx",
             (unsigned long long)(time_unix_us() * 2654435761ULL) ^ ((unsigned long long)getpid() << 40));
    nn_checkpoint_optim_path(path, opath, sizeof opath);
    const char *obase = strrchr(opath, '/') ? strrchr(opath, '/') + 1 : opath;
    int rc = 0;
    const int nt = m->ntensors;
    nn_st_out *t = calloc((size_t)nt * 2 + 1, sizeof *t);
    const char **md = calloc((size_t)(nmeta + 16) * 2, sizeof *md);
    char *names = calloc((size_t)nt * 2, 112);
    if (!t || !md || !names) {
        rc = err_set(ERR_NOMEM, "checkpoint %s: out of memory", path);
        goto out;
    }
    if (opt && optim_ntensors(opt->kind) > 0) {
        const int k = optim_ntensors(opt->kind);
        int n = 0;
        for (int w = 0; w < k; w++)
            for (int i = 0; i < nt; i++, n++) {
                snprintf(names + (size_t)n * 112, 112, "%s%s", optim_prefix(opt->kind, w),
                         m->tensors[i].name);
                t[n].name = names + (size_t)n * 112;
                t[n].data = opt->state + (size_t)w * m->nparams + m->tensors[i].offset;
                t[n].ndim = m->tensors[i].ndim;
                memcpy(t[n].shape, m->tensors[i].shape, sizeof(int64_t) * 5);
            }
        const char *om[] = {"format", NN_CKPT_FORMAT "-optim", "optimizer", nn_optim_name(opt->kind),
                            "optimizer_step", step, "pair_id", pair};
        if ((rc = nn_st_write(opath, t, n, om, 4)))
            goto out;
    }
    for (int i = 0; i < nt; i++) {
        t[i].name = m->tensors[i].name;
        t[i].data = m->params + m->tensors[i].offset;
        t[i].ndim = m->tensors[i].ndim;
        memcpy(t[i].shape, m->tensors[i].shape, sizeof(int64_t) * 5);
    }
    char v[5][16];
    snprintf(v[0], 16, "%d", m->spec.in_channels);
    snprintf(v[1], 16, "%d", m->spec.n_classes);
    snprintf(v[2], 16, "%d", m->spec.layers);
    snprintf(v[3], 16, "%d", m->spec.base_channels);
    snprintf(v[4], 16, "%d", m->spec.groups);
    int k = 0;
    md[k++] = "format", md[k++] = NN_CKPT_FORMAT;
    md[k++] = "in_channels", md[k++] = v[0];
    md[k++] = "n_classes", md[k++] = v[1];
    md[k++] = "layers", md[k++] = v[2];
    md[k++] = "base_channels", md[k++] = v[3];
    md[k++] = "group_norm_groups", md[k++] = v[4];
    md[k++] = "pair_id", md[k++] = pair;
    if (opt) {
        md[k++] = "optimizer", md[k++] = nn_optim_name(opt->kind);
        md[k++] = "optimizer_step", md[k++] = step;
        if (optim_ntensors(opt->kind) > 0)
            md[k++] = "optimizer_file", md[k++] = obase;
    }
    for (int i = 0; i < 2 * nmeta; i++)
        md[k++] = meta[i];
    rc = nn_st_write(path, t, nt, md, k / 2);
out:
    MEM_FREE(t, md, names);
    return rc;
}

/* Reads tensors named prefix+model name into dst (slab layout); strict when `strict`. */
static int load_tensors(const nn_st_file *st, const nn_unet *m, const char *prefix, float *dst,
                        int expect_total) {
    char name[160];
    for (int i = 0; i < m->ntensors; i++) {
        const nn_tensor_info *ti = &m->tensors[i];
        snprintf(name, sizeof name, "%s%s", prefix, ti->name);
        const nn_st_entry *e = nn_st_find(st, name);
        if (!e)
            return err_set(ERR_FORMAT,
                           "%s: tensor '%s' is missing; the checkpoint is not a U-Net with %d "
                           "layers, base %d channels and %d classes",
                           st->path, name, m->spec.layers, m->spec.base_channels,
                           m->spec.n_classes);
        int same = e->ndim == ti->ndim;
        for (int d = 0; same && d < ti->ndim; d++)
            same = e->shape[d] == ti->shape[d];
        if (!same) {
            char a[96] = "", b[96] = "";
            for (int d = 0; d < e->ndim; d++)
                snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? "," : "",
                         (long long)e->shape[d]);
            for (int d = 0; d < ti->ndim; d++)
                snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? "," : "",
                         (long long)ti->shape[d]);
            return err_set(ERR_FORMAT, "%s: tensor '%s' has shape (%s), the model needs (%s)",
                           st->path, name, a, b);
        }
        int rc = nn_st_read_f32(st, e, dst + ti->offset);
        if (rc)
            return rc;
    }
    if (expect_total >= 0 && st->nt != expect_total) {
        for (int i = 0; i < st->nt; i++) {
            const char *n = st->t[i].name;
            if (strncmp(n, prefix, strlen(prefix)) ||
                nn_unet_find_tensor(m, n + strlen(prefix)) < 0)
                return err_set(ERR_FORMAT, "%s: unexpected tensor '%s' (not part of this U-Net)",
                               st->path, n);
        }
    }
    return 0;
}

int nn_checkpoint_load(const char *path, nn_unet *m, nn_optim *opt, nn_st_file *info) {
    return nn_checkpoint_load_pair(path, NULL, m, opt, info);
}

int nn_checkpoint_load_pair(const char *path, const char *optim_path, nn_unet *m, nn_optim *opt,
                            nn_st_file *info) {
    nn_st_file st;
    int rc = nn_st_open(&st, path);
    if (rc)
        return rc;
    rc = load_tensors(&st, m, "", m->params, m->ntensors);
    if (!rc && opt) {
        const char *kind = nn_st_meta(&st, "optimizer");
        const char *pair = nn_st_meta(&st, "pair_id");
        const char *stepv = nn_st_meta(&st, "optimizer_step");
        if (!kind || strcmp(kind, nn_optim_name(opt->kind))) {
            rc = err_set(ERR_FORMAT, "%s: the checkpoint holds %s optimizer state, the run uses %s",
                         path, kind ? kind : "no", nn_optim_name(opt->kind));
        } else if (optim_ntensors(opt->kind) > 0) {
            char opath[4096];
            if (optim_path)
                snprintf(opath, sizeof opath, "%s", optim_path);
            else
                nn_checkpoint_optim_path(path, opath, sizeof opath);
            nn_st_file os;
            rc = nn_st_open(&os, opath);
            if (!rc) {
                const char *opair = nn_st_meta(&os, "pair_id");
                if (!pair || !opair || strcmp(pair, opair))
                    rc = err_set(ERR_FORMAT,
                                 "%s: optimizer state does not belong to %s (pair ids differ: "
                                 "the save was interrupted); restart from another checkpoint",
                                 opath, path);
                for (int w = 0; !rc && w < optim_ntensors(opt->kind); w++)
                    rc = load_tensors(&os, m, optim_prefix(opt->kind, w),
                                      opt->state + (size_t)w * m->nparams, -1);
                nn_st_close(&os);
            }
        }
        if (!rc)
            opt->step = stepv ? strtoll(stepv, NULL, 10) : 0;
    }
    if (!rc && info)
        *info = st;
    else
        nn_st_close(&st);
    return rc;
}

int nn_checkpoint_spec(const char *path, int groups, nn_unet_spec *s) {
    nn_st_file st;
    int rc = nn_st_open(&st, path);
    if (rc)
        return rc;
    const nn_st_entry *w0 = nn_st_find(&st, "down_list.0.double_conv.0.weight");
    if (!w0 || w0->ndim != 5) {
        rc = err_set(ERR_FORMAT,
                     "%s: no tensor 'down_list.0.double_conv.0.weight' of rank 5: not a ScaFFold "
                     "U-Net state_dict",
                     path);
        goto out;
    }
    int L = 0;
    char name[128];
    for (;;) {
        snprintf(name, sizeof name, "down_list.%d.maxpool_conv.1.double_conv.0.weight", L + 1);
        if (!nn_st_find(&st, name))
            break;
        L++;
    }
    snprintf(name, sizeof name, "up_list.%d.conv.weight", L);
    const nn_st_entry *wo = nn_st_find(&st, name);
    if (L < 1 || !wo || wo->ndim != 5) {
        rc = err_set(ERR_FORMAT, "%s: found %d down blocks but no output layer '%s'", path, L,
                     name);
        goto out;
    }
    s->in_channels = (int)w0->shape[1];
    s->base_channels = (int)w0->shape[0];
    s->layers = L;
    s->n_classes = (int)wo->shape[0];
    const char *g = nn_st_meta(&st, "group_norm_groups");
    s->groups = g ? atoi(g) : groups > 0 ? groups : 8;
    if (s->groups < 1 || s->base_channels % s->groups)
        rc = err_set(ERR_FORMAT,
                     "%s: group_norm_groups = %d does not divide the %d base channels; pass the "
                     "value the model was trained with (--group-norm-groups)",
                     path, s->groups, s->base_channels);
out:
    nn_st_close(&st);
    return rc;
}
