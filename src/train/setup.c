/* setup: builds a training run's state (see train.h): layout check, fractals, dataset, model,
 * optimizer, loaders, initial weights and CE class weights. */
#include "train/train.h"

#include "core/err.h"
#include "core/log.h"
#include "fractal/library.h"
#include "nn/loss.h"

#include <stdlib.h>
#include <string.h>

int train_check(const scaffold_config *c, const dist_world *w) {
    int T = 1, rc = 0;
    for (int i = 0; i < c->dc_num_shards.n; i++)
        T *= c->dc_num_shards.v[i];
    if (w->size % T != 0)
        rc = err_set(ERR_CONFIG,
                     "world size %d is not divisible by the number of spatial shards %d "
                     "(dc_num_shards); run on a multiple of %d ranks or change dc_num_shards",
                     w->size, T, T);
    else if (T > 1)
        rc = err_set(ERR_CONFIG, "dc_num_shards with more than one shard (spatial "
                                 "parallelism) is not supported by scaffold benchmark yet; "
                                 "use [1, 1, 1] (the dataset generator supports shards)");
    else if (c->restart && !c->run_dir[0])
        rc = err_set(ERR_USAGE, "--restart needs --run-dir DIR (the run folder to resume)");
    return dist_agree(w, rc);
}

void train_state_free(train_state *s) {
    ds_loader_destroy(s->train);
    ds_loader_destroy(s->val);
    memsource_free(&s->mem);
    dataset_close(s->ds);
    nn_unet_free(&s->model);
    nn_optim_free(&s->opt);
    free(s->ce_w);
    free(s->dice_buf);
    memset(s, 0, sizeof *s);
}

/* CE class weights (reference §11.4): label counts over the sampled training masks, split over
 * the ranks and summed, so the weights do not depend on the rank count. */
static int compute_ce_weights(train_state *s) {
    const scaffold_config *c = s->cfg;
    int K = c->n_categories + 1;
    int64_t n_train = s->ds->n[DS_TRAIN];
    int64_t *idx = malloc((size_t)(n_train > 0 ? n_train : 1) * sizeof *idx);
    uint64_t *counts = calloc((size_t)K, sizeof *counts);
    uint16_t *mask = malloc(s->ds->mask_elems * sizeof *mask);
    float *vol = malloc(s->ds->vol_elems * sizeof *vol);
    int rc = idx && counts && mask && vol ? 0 : err_set(ERR_NOMEM, "out of memory");
    int64_t k = rc ? 0 : dataset_ce_indices(n_train, c->ce_weight_sample_fraction, idx);
    size_t lo, hi;
    dist_block(s->w, (size_t)k, &lo, &hi);
    for (size_t i = lo; i < hi && rc == 0; i++) {
        rc = dataset_read_sample(s->ds, DS_TRAIN, idx[i], vol, mask);
        if (rc == 0)
            rc = nn_label_counts(counts, mask, s->ds->mask_elems, K);
    }
    rc = dist_agree(s->w, rc);
    if (rc == 0) {
        dist_sum_u64(s->w, counts, (size_t)K);
        nn_ce_class_weights(s->ce_w, counts, K);
        log_info("CE class weights from %lld sampled masks: background %.4g, foreground %.4g",
                 (long long)k, (double)s->ce_w[0], K > 1 ? (double)s->ce_w[1] : 0.0);
    }
    free(idx);
    free(counts);
    free(mask);
    free(vol);
    return rc;
}

/* The fractal library and the dataset, reused when present (not part of the FOM), opened for
 * this rank's shard. */
static int open_data(scaffold_config *c, train_state *s) {
    fractal_summary fs;
    fractal_spec fsp = fractal_spec_of(c);
    int rc = fractal_generate(&fsp, s->w, &fs);
    if (rc)
        return rc;
    if (fs.instances_new || fs.classes_new)
        log_info("fractals: %d new classes, %ld new instances in %.2f s", fs.classes_new,
                 fs.instances_new, fs.class_seconds + fs.instance_seconds);
    char dsdir[FS_PATH_MAX];
    dataset_prep_info pi;
    rc = dataset_prepare(c, s->w, dsdir, sizeof dsdir, &pi);
    if (rc)
        return rc;
    log_info("dataset %s: %s (%d volumes)", pi.config_id, pi.reused ? "reused" : "generated",
             pi.num_volumes);
    rc = dataset_open_world(dsdir, c, s->w, &s->ds);
    if (rc)
        return rc;
    int64_t n_train = s->ds->n[DS_TRAIN], n_val = s->ds->n[DS_VAL];
    long global_batch = (long)c->local_batch_size * s->replicas;
    if (global_batch > n_train || global_batch > n_val)
        rc = err_set(ERR_CONFIG,
                     "global batch size %ld (local_batch_size %d x %d replicas) exceeds the %s "
                     "set (%lld samples); lower local_batch_size or the rank count, or raise "
                     "n_instances_used_per_fractal",
                     global_batch, c->local_batch_size, s->replicas,
                     global_batch > n_train ? "training" : "validation",
                     (long long)(global_batch > n_train ? n_train : n_val));
    return dist_agree(s->w, rc);
}

/* Model, optimizer, batch buffers. Local; the caller agrees. */
static int build_model(const scaffold_config *c, train_state *s) {
    nn_unet_spec spec = {3, c->n_categories + 1, c->unet_layers, c->unet_base_channels,
                         c->group_norm_groups};
    const int64_t *e = s->ds->ext;
    int rc = nn_unet_spec_check(&spec, (int)e[0], (int)e[1], (int)e[2]);
    if (rc == 0)
        rc = nn_unet_create(&s->model, &spec, c->local_batch_size, (int)e[0], (int)e[1],
                            (int)e[2]);
    nn_optim_kind kind = config_optimizer(c) == CFG_OPT_SGD       ? NN_OPT_SGD
                         : config_optimizer(c) == CFG_OPT_RMSPROP ? NN_OPT_RMSPROP
                                                                  : NN_OPT_ADAM;
    if (rc == 0)
        rc = nn_optim_init(&s->opt, kind, s->model.nparams);
    s->ce_w = malloc((size_t)spec.n_classes * sizeof *s->ce_w);
    s->dice_buf = malloc((size_t)c->local_batch_size * sizeof *s->dice_buf);
    if (rc == 0 && (!s->ce_w || !s->dice_buf))
        rc = err_set(ERR_NOMEM, "out of memory for batch buffers");
    return rc;
}

/* The training and validation loaders over the files or the in-memory store. Collective. */
static int build_loaders(const scaffold_config *c, train_state *s) {
    int use_mem = !strcmp(c->data_store, "memory"), rc = 0;
    if (use_mem)
        rc = memsource_load(&s->mem, s->ds, s->w);
    if (rc == 0) {
        ds_source src = use_mem ? memsource_source(&s->mem) : dataset_file_source(s->ds);
        ds_loader_opts lo = {src,        DS_TRAIN,           s->ds->n[DS_TRAIN],
                             c->local_batch_size, s->replicas, s->replica,
                             (uint64_t)c->seed,   c->dataloader_num_workers, 0};
        rc = ds_loader_create(&s->train, &lo);
        lo.split = DS_VAL;
        lo.n = s->ds->n[DS_VAL];
        if (rc == 0)
            rc = ds_loader_create(&s->val, &lo);
    }
    return dist_agree(s->w, rc);
}

int train_setup(scaffold_config *c, const dist_world *w, train_state *s) {
    memset(s, 0, sizeof *s);
    s->cfg = c;
    s->w = w;
    int T = 1;
    for (int i = 0; i < c->dc_num_shards.n; i++)
        T *= c->dc_num_shards.v[i];
    s->replicas = w->size / T;
    s->replica = w->rank / T;
    s->grad_scale = 1.0 / s->replicas;
    s->dp = *w; /* one shard per replica (train_check): the replicas are the world */
    int rc = open_data(c, s);
    if (rc == 0)
        rc = dist_agree(w, build_model(c, s));
    if (rc == 0)
        rc = build_loaders(c, s);
    if (rc == 0) {
        nn_unet_init_params(&s->model, (uint64_t)c->seed);
        log_info("model: U-Net with %d levels, base %d channels, %zu parameters (%.1f MiB); %s; "
                 "%d replica(s) x batch %d; %lld training / %lld validation samples",
                 s->model.spec.layers, s->model.spec.base_channels, s->model.nparams,
                 s->model.nparams * 4.0 / 1048576.0, nn_optim_name(s->opt.kind), s->replicas,
                 c->local_batch_size, (long long)s->ds->n[DS_TRAIN],
                 (long long)s->ds->n[DS_VAL]);
        rc = compute_ce_weights(s);
    }
    if (rc)
        train_state_free(s);
    return rc;
}
