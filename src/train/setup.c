/* setup: builds a training run's state (see train.h): layout check, fractals, dataset, model,
 * optimizer, loaders, initial weights and CE class weights. */
#include "train/train.h"

#include "core/cpus.h"
#include "core/err.h"
#include "core/log.h"
#include "core/mem.h"
#include "fractal/library.h"
#include "nn/layers.h"
#include "nn/loss.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every level of the U-Net halves the block; MaxPool needs it even and the bottleneck at least 2
 * voxels per sharded axis (reference §10.3). */
static int check_layout(const scaffold_config *c, const ds_layout *l) {
    static const char *axis_name[3] = {"D", "H", "W"};
    const int L = c->unet_layers;
    for (int a = 0; a < 3; a++) {
        const int k = ds_layout_count_of(l, a);
        if (k == 1)
            continue;
        if (c->vol_size % k)
            return err_set(ERR_CONFIG,
                           "dc_num_shards: %d shards along %s do not divide the %d voxels of the "
                           "volume; use a power of two",
                           k, axis_name[a], c->vol_size);
        const int block = c->vol_size / k;
        if (block % (1 << L) || block >> L < 2)
            return err_set(ERR_CONFIG,
                           "dc_num_shards: %d shards along %s give %d-voxel blocks, which the "
                           "U-Net's %d levels reduce to %g voxel(s) at the bottleneck; every "
                           "level's block must be even and the bottleneck's at least 2 voxels: "
                           "use at most %d shards along %s or raise unet_bottleneck_dim",
                           k, axis_name[a], block, L, (double)block / (1 << L),
                           (c->vol_size >> L) / 2 > 0 ? (c->vol_size >> L) / 2 : 1,
                           axis_name[a]);
    }
    return 0;
}

/* A cached dataset for this config whose meta.yaml records another shard layout (a copied or
 * edited cache entry) is refused here, before the run folder is written; dataset_open_world
 * checks it again. Rank 0 reads one meta.yaml. */
static int check_cached_layout(const scaffold_config *c, const ds_layout *l) {
    char id[DS_CONFIG_ID_LEN + 1], cfgdir[FS_PATH_MAX], dir[FS_PATH_MAX], meta[FS_PATH_MAX + 16];
    ds_spec spec = ds_spec_of(c);
    ds_config_id(&spec, id);
    snprintf(cfgdir, sizeof cfgdir, "%s/%s", c->dataset_dir, id);
    if (c->datagen_from_scratch || !fs_is_dir(cfgdir))
        return 0;
    int rc = ds_cache_find(cfgdir, id, NULL, dir, sizeof dir);
    if (rc <= 0)
        return rc;
    ds_meta m;
    snprintf(meta, sizeof meta, "%s/meta.yaml", dir);
    rc = ds_meta_read(meta, &m);
    if (rc == 0 && !ds_layout_equivalent(&m.layout, l)) {
        char a[64], b[64];
        rc = err_set(ERR_CONFIG,
                     "dc_num_shards: the cached dataset %s was built for %s shards, the config "
                     "asks for %s; delete that dataset directory (or set datagen_from_scratch: 1) "
                     "to regenerate it for this layout",
                     dir, ds_layout_counts_str(&m.layout, a, sizeof a),
                     ds_layout_counts_str(l, b, sizeof b));
    }
    return rc;
}

int train_check(const scaffold_config *c, const dist_world *w, ds_layout *l) {
    int rc = ds_layout_from_config(c, l);
    if (rc == 0)
        rc = par_grid_check(w->size, ds_layout_total(l));
    if (rc == 0)
        rc = check_layout(c, l);
    if (rc == 0 && w->rank == 0)
        rc = check_cached_layout(c, l);
    if (rc == 0 && c->restart && !c->run_dir[0])
        rc = err_set(ERR_USAGE, "--restart needs --run-dir DIR (the run folder to resume)");
    char threads[768];
    train_threads_choose(w, threads, sizeof threads);
    dist_node_cpu u; /* one node split gives the ranks per node and their CPU use */
    dist_node_cpu_use(w, nn_threads(), &u);
    if (rc == 0)
        rc = train_preflight(c, l, w, u.ranks);
    rc = dist_agree(w, rc);
    if (rc == 0 && w->rank == 0) {
        log_info("%s", threads);
        train_cpu_report(&u);
    }
    return rc;
}

void train_threads_choose(const dist_world *w, char *line, size_t n) {
    cpus_given g;
    cpus_probe(&g);
    const int share = dist_node_mask_sharing(w), t = cpus_threads_per_rank(&g, share);
    char quota[32] = "none", cpt[32] = "unset";
    if (g.quota > 0)
        snprintf(quota, sizeof quota, "%.3g CPUs", g.quota);
    if (g.per_task > 0)
        snprintf(cpt, sizeof cpt, "%d", g.per_task);
    const char *omp = getenv("OMP_NUM_THREADS");
    char given[320];
    snprintf(given, sizeof given, "%d CPU(s) in the affinity mask, shared by %d rank(s) of this "
             "node; cgroup CPU quota %s; SLURM_CPUS_PER_TASK %s", g.mask, share, quota, cpt);
    if (omp && *omp) {
        snprintf(line, n, "threads: %d per rank from OMP_NUM_THREADS=%s (the CPUs given would "
                 "make %d: %s); %s", nn_threads(), omp, t, given, cpus_wait_note());
        return;
    }
    nn_set_threads(t);
    snprintf(line, n, "threads: %d per rank from the CPUs given: %s (OMP_NUM_THREADS to choose); "
             "%s", t, given, cpus_wait_note());
}

/* OMP_NUM_THREADS that shares cpus among ranks, at least 1. */
static int threads_per_rank(int cpus, int ranks) {
    return ranks > 0 && cpus / ranks > 1 ? cpus / ranks : 1;
}

void train_cpu_report(const dist_node_cpu *n) {
    const dist_node_cpu u = *n;
    const int fair = threads_per_rank(u.cpus_launcher, u.ranks);
    if (u.over_bound > 0)
        log_warn("%d of the %d rank(s) on this node run more OpenMP threads than the CPUs they "
                 "are bound to (%d threads on %d CPU(s) in all), so threads share cores and "
                 "every step is slower; launch with `mpirun --bind-to none` (Open MPI binds each "
                 "of up to 2 ranks to one core) and OMP_NUM_THREADS=%d",
                 u.over_bound, u.ranks, u.threads, u.cpus, fair);
    else if (u.cpus > 0 && u.threads > u.cpus)
        log_warn("the %d rank(s) on this node run %d OpenMP threads on %d CPU(s), so threads "
                 "share cores and every step is slower; set OMP_NUM_THREADS=%d (CPUs / ranks)",
                 u.ranks, u.threads, u.cpus, threads_per_rank(u.cpus, u.ranks));
    else if (u.cpus > 0 && u.cpus_launcher > u.cpus && u.threads < u.cpus_launcher)
        log_warn("the %d rank(s) on this node are bound to %d of the %d CPUs their launcher may "
                 "use, so %d stay idle; launch with `mpirun --bind-to none` and "
                 "OMP_NUM_THREADS=%d to use them",
                 u.ranks, u.cpus, u.cpus_launcher, u.cpus_launcher - u.cpus, fair);
}

void train_state_free(train_state *s) {
    train_grad_free(s);
    par_grid_free(&s->grid);
    ds_loader_destroy(s->train);
    ds_loader_destroy(s->val);
    memsource_free(&s->mem);
    dataset_close(s->ds);
    nn_unet_free(&s->model);
    nn_optim_free(&s->opt);
    train_device_close(&s->dev); /* after the model that used it */
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
    /* The replicas holding this shard split the sample; the sum over the world adds the
     * shards. */
    size_t lo, hi;
    dist_block(&s->grid.replicas, (size_t)k, &lo, &hi);
    log_progress pr;
    log_progress_start(&pr, (long)(hi - lo), 0);
    for (size_t i = lo; i < hi && rc == 0; i++) {
        rc = dataset_read_sample(s->ds, DS_TRAIN, idx[i], vol, mask);
        if (rc == 0)
            rc = nn_label_counts(counts, mask, s->ds->mask_elems, K);
        double per, el, eta;
        if (log_progress_due(&pr, (long)(i + 1 - lo), &per, &el, &eta))
            log_info("CE class weights: mask %zu of %zu on this rank, %.2f s per mask, ETA %.0f s",
                     i + 1 - lo, hi - lo, per, eta);
    }
    rc = dist_agree(s->w, rc);
    if (rc == 0) {
        dist_sum_u64(s->w, counts, (size_t)K);
        nn_ce_class_weights(s->ce_w, counts, K);
        log_info("CE class weights from %lld sampled masks: background %.4g, foreground %.4g",
                 (long long)k, (double)s->ce_w[0], K > 1 ? (double)s->ce_w[1] : 0.0);
    }
    MEM_FREE(idx, counts, mask, vol);
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
    ds_spec spec = ds_spec_of(c);
    rc = dataset_prepare(&spec, s->w, dsdir, sizeof dsdir, &pi);
    if (rc)
        return rc;
    log_info("dataset %s: %s (%d volumes)", pi.config_id, pi.reused ? "reused" : "generated",
             pi.num_volumes);
    rc = dataset_open_world(dsdir, &spec, s->w, &s->ds);
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

void train_model_of(const scaffold_config *c, int sharded, nn_unet_spec *spec, nn_unet_opts *o) {
    *spec = (nn_unet_spec){3, c->n_categories + 1, c->unet_layers, c->unet_base_channels,
                           c->group_norm_groups};
    const int k = config_optimizer(c);
    *o = (nn_unet_opts){.precision = c->torch_amp ? NN_BF16 : NN_FP32,
                        .checkpointing = c->activation_checkpointing,
                        .sharded = sharded,
                        .optimizer = k == CFG_OPT_SGD       ? NN_OPT_SGD
                                     : k == CFG_OPT_RMSPROP ? NN_OPT_RMSPROP
                                                            : NN_OPT_ADAM};
}

/* Model, optimizer, batch buffers. Local; the caller agrees. */
static int build_model(const scaffold_config *c, train_state *s) {
    nn_unet_spec spec;
    nn_unet_opts o;
    train_model_of(c, s->grid.T > 1, &spec, &o);
    o.backend = s->dev.be;
    const nn_optim_kind kind = (nn_optim_kind)o.optimizer;
    const int64_t *e = s->ds->ext;
    int rc = nn_unet_spec_check(&spec, (int)e[0], (int)e[1], (int)e[2]);
    if (rc == 0)
        rc = nn_unet_create_opts(&s->model, &spec, &o, c->local_batch_size, (int)e[0], (int)e[1],
                                 (int)e[2]);
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
    /* One store per shard, over the replicas that hold it. */
    if (use_mem)
        rc = memsource_load(&s->mem, s->ds, &s->grid.replicas);
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

/* The process grid of the layout (the dataset's shard ids). Collective. */
static int build_grid(const ds_layout *l, const dist_world *w, train_state *s) {
    int axes[3];
    for (int i = 0; i < l->n; i++)
        axes[i] = l->dims[i] - 2;
    int rc = par_grid_create(&s->grid, w, l->n, axes, l->counts);
    s->replicas = s->grid.nrep;
    s->replica = s->grid.replica;
    return rc;
}

int train_setup(scaffold_config *c, const ds_layout *l, const dist_world *w, train_device *dev,
                train_state *s) {
    memset(s, 0, sizeof *s);
    s->cfg = c;
    s->w = w;
    s->dev = *dev;
    memset(dev, 0, sizeof *dev);
    if (w->rank == 0 && s->dev.note[0])
        log_info("%s", s->dev.note);
    int rc = build_grid(l, w, s);
    if (rc == 0)
        rc = open_data(c, s);
    if (rc == 0)
        rc = dist_agree(w, build_model(c, s));
    if (rc == 0 && s->grid.T > 1) {
        par_spatial_init(&s->sp, &s->grid, !strcmp(c->group_norm_stats, "global"));
        s->model.shard = &s->sp.ops;
    }
    if (rc == 0)
        rc = train_grad_init(s, 1.0 / s->replicas);
    if (rc == 0)
        rc = build_loaders(c, s);
    if (rc == 0)
        rc = dist_agree(w, nn_unet_init_params(&s->model, (uint64_t)c->seed));
    if (rc == 0) {
        char shards[64];
        snprintf(shards, sizeof shards, "%d x %d x %d", s->grid.counts[0], s->grid.counts[1],
                 s->grid.counts[2]);
        char on[32] = "CPU";
        if (s->dev.gpu >= 0)
            snprintf(on, sizeof on, "GPU %d", s->dev.gpu);
        log_info("model: U-Net with %d levels, base %d channels, %zu parameters (%.1f MiB), %s%s "
                 "on the %s; %s; "
                 "%d replica(s) x batch %d; %s spatial shard(s) of %lldx%lldx%lld (%s GroupNorm "
                 "statistics); %lld training / %lld validation samples",
                 s->model.spec.layers, s->model.spec.base_channels, s->model.nparams,
                 s->model.nparams * 4.0 / 1048576.0,
                 s->model.opts.precision == NN_BF16 ? "bf16 compute" : "fp32",
                 s->model.opts.checkpointing ? ", activation checkpointing" : "", on,
                 nn_optim_name(s->opt.kind), s->replicas,
                 c->local_batch_size, shards, (long long)s->ds->ext[0],
                 (long long)s->ds->ext[1], (long long)s->ds->ext[2],
                 s->grid.T > 1 ? c->group_norm_stats : "whole-volume",
                 (long long)s->ds->n[DS_TRAIN], (long long)s->ds->n[DS_VAL]);
        rc = compute_ce_weights(s);
    }
    if (rc)
        train_state_free(s);
    return rc;
}
