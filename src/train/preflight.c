/* preflight: what `scaffold benchmark` checks before it writes its first byte (see train.h):
 * the directories it will create, the run folder it resumes, the global batch against the
 * dataset's splits, the model against the shard extent, and the memory plan: the memory a run
 * needs per rank, estimated from the configuration, and the refusal of a run that cannot fit in
 * its node's memory.
 *
 * The model's terms are the engine's own plan (nn_unet_memory_estimate: exactly what
 * nn_unet_create_opts allocates, with this run's precision, checkpointing and sharding) for N =
 * local_batch_size samples of this rank's shard extent; the activation term includes the
 * largest layer workspace and the pooling index bytes. The data buffers are the loader's
 * prefetch slots (two batches per worker, at least two) plus, with data_store: memory, this
 * rank's share of the training and validation samples. The warmup (warmup_batches > 0) and
 * asynchronous checkpoints keep a copy of the parameters and the optimizer state (one at a time:
 * the warmup's is freed before the first save). */
#include "train/train.h"

#include "core/err.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "dataset/compose.h"
#include "train/ckpt.h"
#include "train/runfolder.h"

#include <stdio.h>
#include <string.h>

/* The node's memory: MemTotal, or a smaller cgroup limit (containers, batch jobs). */
static double node_memory_bytes(void) {
    double total = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
                total = (double)kb * 1024.0;
        fclose(f);
    }
    const char *limits[2] = {"/sys/fs/cgroup/memory.max",
                             "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (int i = 0; i < 2; i++) {
        unsigned long long v;
        f = fopen(limits[i], "r");
        if (!f)
            continue;
        if (fscanf(f, "%llu", &v) == 1 && v > 0 && (total == 0 || (double)v < total))
            total = (double)v;
        fclose(f);
    }
    return total;
}

int train_memory_plan(const scaffold_config *c, const ds_layout *l, train_mem_plan *p) {
    memset(p, 0, sizeof *p);
    nn_unet_spec spec;
    nn_unet_opts o;
    train_model_of(c, ds_layout_total(l) > 1, &spec, &o);
    for (int a = 0; a < 3; a++) {
        int n = ds_layout_count_of(l, a);
        p->ext[a] = (c->vol_size + n - 1) / n;
    }
    const int N = c->local_batch_size;
    nn_unet_memory e;
    int rc =
        nn_unet_memory_estimate(&spec, &o, N, p->ext[0], p->ext[1], p->ext[2], o.optimizer, &e);
    if (rc)
        return rc;
    p->params = (double)e.params;
    p->grads = (double)e.grads;
    p->optim = (double)e.optimizer;
    /* The warmup's snapshot (restored after it) or the async writer's. */
    if (c->warmup_batches > 0 || c->async_save)
        p->snapshot = p->params + p->optim;
    p->activations = (double)e.activations + (double)e.workspace;
    const double voxels = (double)p->ext[0] * p->ext[1] * p->ext[2];
    const double sample = voxels * (3 * 4 + 2); /* float32 volume (3 channels) + uint16 mask */
    int slots = 2 * (c->dataloader_num_workers > 1 ? c->dataloader_num_workers : 1);
    p->data = (double)slots * N * sample;
    if (!strcmp(c->data_store, "memory")) {
        ds_plan plan;
        ds_spec dsp = ds_spec_of(c);
        if (ds_plan_make(&dsp, &plan) == 0) {
            /* Each replica holds its share of the volumes of its shard. */
            int T = ds_layout_total(l);
            p->data += sample * (double)plan.num_volumes * T / (double)(T > 0 ? T : 1);
            ds_plan_free(&plan);
        }
        err_clear();
    }
    p->total = p->params + p->grads + p->optim + p->snapshot + p->activations + p->data;
    p->node_memory = node_memory_bytes();
    return 0;
}

static const char *gib(double b, char *buf, size_t n) {
    if (b >= 1024.0 * 1024 * 1024 * 1024)
        snprintf(buf, n, "%.3g TiB", b / (1024.0 * 1024 * 1024 * 1024));
    else if (b >= 1024.0 * 1024 * 1024)
        snprintf(buf, n, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else
        snprintf(buf, n, "%.1f MiB", b / (1024.0 * 1024));
    return buf;
}

int train_memory_check(const scaffold_config *c, const ds_layout *l, const dist_world *w,
                       int ranks_on_node) {
    train_mem_plan p;
    int rc = train_memory_plan(c, l, &p);
    if (rc)
        return rc;
    char a[32], b[32], o[32], d[32], t[32], nt[32], nm[32], mem[32], sn[32];
    double node = p.total * (ranks_on_node > 0 ? ranks_on_node : 1);
    const int fits = p.node_memory <= 0 || node <= p.node_memory;
    if (fits && w->rank == 0)
        log_info("memory plan per rank: parameters %s, gradients %s, optimizer %s, snapshot %s, "
                 "activations %s (batch %d of %dx%dx%d), data buffers %s; %s per rank, %s for "
                 "the %d rank(s) on this node, of %s",
                 gib(p.params, a, sizeof a), gib(p.grads, b, sizeof b), gib(p.optim, o, sizeof o),
                 gib(p.snapshot, sn, sizeof sn),
                 gib(p.activations, d, sizeof d), c->local_batch_size, p.ext[0], p.ext[1],
                 p.ext[2], gib(p.data, t, sizeof t), gib(p.total, nt, sizeof nt),
                 gib(node, nm, sizeof nm), ranks_on_node, gib(p.node_memory, mem, sizeof mem));
    if (fits)
        return 0;
    return err_set(ERR_CONFIG,
                   "this run needs an estimated %s per rank (activations %s for batch %d of "
                   "%dx%dx%d voxels, parameters, gradients and optimizer %s), %s for the %d "
                   "rank(s) on this node, more than its %s of memory; lower local_batch_size, "
                   "unet_base_channels or problem_scale, split each volume over more ranks with "
                   "spatial shards (dc_num_shards)%s",
                   gib(p.total, nt, sizeof nt), gib(p.activations, d, sizeof d),
                   c->local_batch_size, p.ext[0], p.ext[1], p.ext[2],
                   gib(p.params + p.grads + p.optim + p.snapshot, o, sizeof o), gib(node, nm, sizeof nm),
                   ranks_on_node, gib(p.node_memory, mem, sizeof mem),
                   /* not bf16: a choice of numerics, saving memory only without checkpointing */
                   c->activation_checkpointing ? "" : ", or recompute activations "
                                                      "(activation_checkpointing: 1)");
}

/* A checkpoint a resume could read (either tag, or an interrupted save's staging folder). */
static int has_checkpoint(const scaffold_config *c) {
    char p[FS_PATH_MAX * 2];
    snprintf(p, sizeof p, "%s/%s", c->run_dir, c->checkpoint_dir);
    return ckpt_exists(p);
}

int train_preflight(const scaffold_config *c, const ds_layout *l, const dist_world *w,
                    int ranks_on_node) {
    int rc = 0;
    /* Every directory the run writes, proven creatable (a probe created and removed) before
     * anything is written: bad input (exit 2) naming the key. A resume writes in its run
     * folder, a new run under base_run_dir. */
    const char *dirs[3][2] = {{c->fract_base_dir, "fract_base_dir"},
                              {c->dataset_dir, "dataset_dir"},
                              {c->run_dir[0] ? c->run_dir : c->base_run_dir,
                               c->run_dir[0] ? "run_dir" : "base_run_dir"}};
    for (int i = 0; i < 3 && rc == 0; i++)
        if ((i < 2 || !c->run_dir[0] || fs_is_dir(c->run_dir)) &&
            fs_check_creatable_dir(dirs[i][0])) {
            char why[ERR_MSG_MAX];
            snprintf(why, sizeof why, "%s", err_msg());
            rc = err_set(ERR_CONFIG, "%s: %s; give a directory this user can create and write",
                         dirs[i][1], why);
        }
    /* A resume needs a run folder with a checkpoint (an explicit run_dir is a resume). */
    if (rc == 0 && c->run_dir[0]) {
        if (!fs_is_dir(c->run_dir))
            rc = err_set(ERR_USAGE, "--run-dir %s: no such run folder", c->run_dir);
        else if (!has_checkpoint(c))
            rc = err_set(ERR_USAGE,
                         "--run-dir %s holds no checkpoint to resume from (%s/checkpoint_last or "
                         "checkpoint_best.safetensors); give the folder of a run that saved one "
                         "(checkpoint_interval > 0), or start a new run without --run-dir",
                         c->run_dir, c->checkpoint_dir);
        else {
            /* The resume continues the same run: only the keys that may change differ. */
            char changed[2048];
            rc = run_config_resume_check(c, changed, sizeof changed);
        }
    }
    /* The global batch against the splits the dataset will have. */
    ds_plan plan;
    ds_spec dsp = ds_spec_of(c);
    if (rc == 0 && (rc = ds_plan_make(&dsp, &plan)) == 0) {
        long replicas = w->size / (ds_layout_total(l) > 0 ? ds_layout_total(l) : 1);
        long global_batch = (long)c->local_batch_size * replicas;
        if (global_batch > plan.n_train || global_batch > plan.n_val)
            rc = err_set(ERR_CONFIG,
                         "global batch size %ld (local_batch_size %d x %ld replicas) exceeds the "
                         "%s set (%d samples); lower local_batch_size or the rank count, or raise "
                         "n_instances_used_per_fractal",
                         global_batch, c->local_batch_size, replicas,
                         global_batch > plan.n_train ? "training" : "validation",
                         global_batch > plan.n_train ? plan.n_train : plan.n_val);
        ds_plan_free(&plan);
    }
    /* The model against this rank's shard extent (the engine's estimate checks it), then the
     * memory it all needs. */
    train_mem_plan mp;
    if (rc == 0)
        rc = train_memory_plan(c, l, &mp);
    if (rc == 0)
        rc = train_memory_check(c, l, w, ranks_on_node);
    return rc;
}
