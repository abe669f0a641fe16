/* generate: dataset_prepare, i.e. cache lookup and, when nothing matches, the MPI-parallel
 * generation of every (volume, shard) file into a staging directory that is renamed when complete
 * (see dataset.h and cache.h). */
#include "dataset/dataset.h"

#include "core/claim.h"
#include "core/err.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/npy.h"
#include "dataset/compose.h"
#include "dataset/render.h"
#include "fractal/library.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes one array as .npy under its final name in the staging directory, via a temporary name
 * (no fsync: the staging directory is synced once before it is published). */
static int write_npy(const char *path, npy_dtype dt, int ndim, const int64_t *shape,
                     const void *data, size_t nbytes) {
    fs_atomic a;
    int rc = fs_atomic_open(&a, path);
    if (rc)
        return rc;
    rc = npy_write_header(a.fp, dt, ndim, shape);
    if (rc == 0 && fwrite(data, 1, nbytes, a.fp) != nbytes)
        rc = err_set(ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (rc) {
        fs_atomic_abort(&a);
        return err_prefix("%s", path);
    }
    return fs_atomic_commit(&a, 0);
}

/* Per-rank generation state: buffers reused across tasks, and the voxelised fractals of the
 * volume last loaded (consecutive tasks of one volume share them). */
typedef struct gen_state {
    const ds_spec *c;
    const ds_plan *plan;
    ds_layout layout;
    float *pts;       /* (point_num, 3) */
    int32_t **vox;    /* per fractal of the current volume: (point_num, 3) */
    int cur_vol;
    float *vol;       /* largest shard (3, d, h, w) */
    uint16_t *mask;   /* (d, h, w) */
    long long bytes, files;
} gen_state;

static int load_volume_fractals(gen_state *g, int v) {
    if (g->cur_vol == v)
        return 0;
    const ds_spec *c = g->c;
    int64_t shape[2] = {c->fractals.point_num, 3};
    for (int k = 0; k < g->plan->n_fracts_per_vol; k++) {
        const int *row = g->plan->contents + (size_t)v * 2 * (size_t)g->plan->n_fracts_per_vol;
        int cat = row[2 * k], inst = row[2 * k + 1];
        char path[FS_PATH_MAX];
        fractal_instance_path(&c->fractals, cat, inst, path, sizeof path);
        int rc = npy_read_into(path, NPY_F32, 2, shape, g->pts);
        if (rc) {
            g->cur_vol = -1;
            if (!fs_exists(path))
                return err_set(rc, "fractal instance %s is missing; generate the fractal library "
                               "first (scaffold generate_fractals -c CONFIG)", path);
            char msg[ERR_MSG_MAX];
            snprintf(msg, sizeof msg, "%s", err_msg());
            return err_set(rc, "fractal library: %s; run scaffold generate_fractals -c CONFIG, "
                           "which regenerates it", msg);
        }
        rc = ds_voxelize(g->pts, c->fractals.point_num, c->vol_size, g->vox[k]);
        if (rc) {
            g->cur_vol = -1;
            return err_prefix("%s", path);
        }
    }
    g->cur_vol = v;
    return 0;
}

static int gen_task(gen_state *g, const char *staging, int v, int sid) {
    int rc = load_volume_fractals(g, v);
    if (rc)
        return rc;
    int64_t start[3], stop[3], ext[3];
    rc = ds_layout_region(&g->layout, g->c->vol_size, sid, start, stop);
    if (rc)
        return rc;
    for (int a = 0; a < 3; a++)
        ext[a] = stop[a] - start[a];
    /* The buffers are all zero here (calloc, then every task un-paints what it painted), so no
     * memset of the whole shard: fractals cover ~1% of the voxels. */
    const int *row = g->plan->contents + (size_t)v * 2 * (size_t)g->plan->n_fracts_per_vol;
    for (int k = 0; k < g->plan->n_fracts_per_vol; k++) {
        int cat = row[2 * k];
        float color[3];
        for (int ch = 0; ch < 3; ch++)
            color[ch] = (float)g->plan->colors[3 * cat + ch]; /* float64 -> float32 on assign */
        ds_render_fractal(g->vol, g->mask, start, stop, g->vox[k], g->c->fractals.point_num, color,
                          (uint16_t)(cat + 1));
    }
    const char *split = g->plan->is_val[v] ? "validation" : "training";
    char path[FS_PATH_MAX];
    size_t nvox = (size_t)ext[0] * (size_t)ext[1] * (size_t)ext[2];
    int64_t vshape[4] = {3, ext[0], ext[1], ext[2]};
    snprintf(path, sizeof path, "%s/volumes/%s/%d_shard%06d.npy", staging, split, v, sid);
    rc = write_npy(path, NPY_F32, 4, vshape, g->vol, 3 * nvox * sizeof(float));
    if (rc)
        return rc;
    snprintf(path, sizeof path, "%s/masks/%s/%d_shard%06d_mask.npy", staging, split, v, sid);
    rc = write_npy(path, NPY_U16, 3, vshape + 1, g->mask, nvox * sizeof(uint16_t));
    const float zero[3] = {0, 0, 0};
    for (int k = 0; k < g->plan->n_fracts_per_vol; k++)
        ds_render_fractal(g->vol, g->mask, start, stop, g->vox[k], g->c->fractals.point_num, zero, 0);
    if (rc)
        return rc;
    g->bytes += (long long)(3 * nvox * sizeof(float) + nvox * sizeof(uint16_t) + 2 * 128);
    g->files += 2;
    return 0;
}

static int gen_alloc(gen_state *g) {
    const ds_spec *c = g->c;
    int64_t maxv = 1;
    for (int a = 0; a < 3; a++) { /* chunk 0 is the largest along every axis */
        int64_t s, e;
        ds_chunk(c->vol_size, ds_layout_count_of(&g->layout, a), 0, &s, &e);
        maxv *= e - s;
    }
    g->pts = malloc((size_t)c->fractals.point_num * 3 * sizeof *g->pts);
    g->vox = calloc((size_t)g->plan->n_fracts_per_vol, sizeof *g->vox);
    g->vol = calloc((size_t)maxv * 3, sizeof *g->vol);
    g->mask = calloc((size_t)maxv, sizeof *g->mask);
    int ok = g->pts && g->vox && g->vol && g->mask;
    for (int k = 0; ok && k < g->plan->n_fracts_per_vol; k++)
        ok = (g->vox[k] = malloc((size_t)c->fractals.point_num * 3 * sizeof(int32_t))) != NULL;
    g->cur_vol = -1;
    return ok ? 0 : err_set(ERR_NOMEM, "dataset generation: out of memory (shard of %lld voxels)",
                            (long long)maxv);
}

static void gen_free(gen_state *g) {
    for (int k = 0; g->vox && k < g->plan->n_fracts_per_vol; k++)
        free(g->vox[k]);
    MEM_FREE(g->vox, g->pts, g->vol, g->mask);
}

static int make_tree(const char *staging, const ds_plan *plan) {
    static const char *const sub[] = {"volumes/training", "volumes/validation", "masks/training",
                                      "masks/validation"};
    char p[FS_PATH_MAX];
    for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", staging, sub[i]);
        int rc = fs_mkdir_p(p);
        if (rc)
            return rc;
    }
    snprintf(p, sizeof p, "%s/volumes_contents.csv", staging);
    return ds_plan_write_csv(plan, p);
}

/* Collective: the layout checked and the volume plan made from the spec (freed on error, where
 * it is zeroed), agreed. */
static int prepare_plan(const ds_spec *c, const dist_world *w, ds_plan *plan) {
    int rc = ds_layout_check(&c->layout, c->vol_size, ERR_CONFIG,
                             "keys 'dc_num_shards'/'dc_shard_dims'");
    if (rc == 0 && c->n_categories > 65535)
        rc = err_set(ERR_CONFIG, "key 'n_categories': %d classes do not fit the uint16 mask",
                     c->n_categories);
    if (rc == 0)
        rc = ds_plan_make(c, plan);
    else
        memset(plan, 0, sizeof *plan);
    rc = dist_agree(w, rc);
    if (rc)
        ds_plan_free(plan);
    return rc;
}

/* Rank 0: looks for a cached dataset (*found, its folder in path); without one, takes the
 * config_id's claim (cache.h), which also makes debris removal safe, and looks again, as the job
 * it waited for (*waited) may have published what this one needs. The claim is kept only when
 * this job must generate. */
static int find_or_claim(const ds_spec *c, const char *cfgdir, const char *claim, char *path,
                         size_t pathsz, dataset_prep_info *info, int *found, int *waited) {
    const char *commit = c->enforce_commit_id ? DS_CODE_VERSION : NULL;
    int rc = 0;
    /* Nothing is written before we know we must generate: a cached dataset on a read-only
     * file system is still usable. */
    if (!c->from_scratch) {
        rc = ds_cache_find(cfgdir, info->config_id, commit, path, pathsz);
        *found = rc == 1;
        if (rc == 1)
            rc = 0;
    }
    if (rc == 0 && *found && ds_cache_has_staging(cfgdir)) {
        /* A killed generation's staging directory beside a usable dataset: removed when its
         * writer is gone (never waited for; on a read-only file system it just stays). */
        if (claim_try(claim, NULL) == 1) {
            ds_cache_remove_staging(cfgdir, &info->stale_removed);
            claim_release(claim);
        }
        err_clear();
    }
    if (rc == 0 && !*found)
        rc = fs_check_writable_dir(cfgdir);
    if (rc == 0 && !*found) {
        char what[FS_PATH_MAX + 64];
        snprintf(what, sizeof what, "the dataset %s (config_id %s)", cfgdir, info->config_id);
        double t_wait = time_now();
        rc = claim_take(claim, what);
        *waited = time_now() - t_wait > 0.05;
        if (rc == 0)
            rc = ds_cache_remove_staging(cfgdir, &info->stale_removed);
        /* The job this one waited for may have published what it needs. */
        if (rc == 0 && !c->from_scratch) {
            rc = ds_cache_find(cfgdir, info->config_id, commit, path, pathsz);
            *found = rc == 1;
            if (rc == 1)
                rc = 0;
        }
        if (rc || *found)
            claim_release(claim);
    }
    return rc;
}

/* Collective: this rank's block of the (volume, shard) tasks written into staging, rank 0
 * reporting progress; g's byte and file counts say what was written. Agreed. */
static int generate_tasks(gen_state *g, const dist_world *w, const char *staging, double t0) {
    const int ntotal = ds_layout_total(&g->layout);
    const size_t ntasks = (size_t)g->plan->num_volumes * (size_t)ntotal;
    int rc = gen_alloc(g);
    size_t lo, hi;
    dist_block(w, ntasks, &lo, &hi);
    double last_log = t0;
    for (size_t t = lo; rc == 0 && t < hi; t++) {
        rc = gen_task(g, staging, (int)(t / (size_t)ntotal), (int)(t % (size_t)ntotal));
        double now = time_now();
        if (w->rank == 0 && (now - last_log > 5.0 || t + 1 == hi)) {
            log_info("dataset: rank 0 %zu/%zu tasks, %.1f MB written, %.1f s", t + 1 - lo,
                     hi - lo, (double)g->bytes / 1e6, now - t0);
            last_log = now;
        }
    }
    gen_free(g);
    return dist_agree(w, rc);
}

/* Rank 0: the staging tree's meta.yaml (with the mask values of both splits), then the tree
 * published under cfgdir; path receives the published folder. */
static int publish(const ds_spec *c, const ds_plan *plan, const char *staging,
                   const char *cfgdir, char *path, size_t pathsz) {
    int *tv = malloc(((size_t)c->n_categories + 1) * 2 * sizeof *tv);
    if (!tv)
        return err_set(ERR_NOMEM, "out of memory");
    int *vv = tv + c->n_categories + 1;
    int ntv = ds_plan_mask_values(plan, 0, tv), nvv = ds_plan_mask_values(plan, 1, vv);
    snprintf(path, pathsz, "%s/meta.yaml", staging);
    int rc = ds_meta_write(path, c, plan->num_volumes, plan->n_train, plan->n_val, tv, ntv, vv,
                           nvv);
    free(tv);
    if (rc == 0)
        rc = ds_cache_publish(staging, cfgdir, path, pathsz);
    return rc;
}

/* Rank 0, after a failed generation: nothing partial stays visible; the staging directory is
 * removed here (a killed run leaves it hidden, with its claim, until the next holder removes
 * it), keeping the error's message. */
static void discard_staging(const char *staging, int rc) {
    if (!staging[0] || !fs_is_dir(staging))
        return;
    char msg[ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", err_msg());
    fs_rm_rf(staging);
    err_set(rc, "%s", msg);
}

int dataset_prepare(const ds_spec *c, const dist_world *w, char *dir, size_t dirsz,
                    dataset_prep_info *info) {
    dataset_prep_info local;
    if (!info)
        info = &local;
    memset(info, 0, sizeof *info);
    ds_config_id(c, info->config_id);
    char cfgdir[FS_PATH_MAX];
    snprintf(cfgdir, sizeof cfgdir, "%s/%s", c->dataset_dir, info->config_id);

    ds_plan plan;
    int rc = prepare_plan(c, w, &plan);
    if (rc)
        return rc;
    info->num_volumes = plan.num_volumes;

    char path[FS_PATH_MAX] = "", claim[FS_PATH_MAX + 16];
    ds_cache_claim_path(cfgdir, claim, sizeof claim);
    int found = 0, waited = 0;
    if (w->rank == 0)
        rc = find_or_claim(c, cfgdir, claim, path, sizeof path, info, &found, &waited);
    rc = dist_agree(w, rc);
    if (rc) {
        ds_plan_free(&plan);
        return rc;
    }
    dist_bcast(w, &found, sizeof found, 0);
    if (found) {
        dist_bcast(w, path, sizeof path, 0);
        log_info("dataset: reusing %s%s", path,
                 waited ? " (generated by another job while this one waited)" : "");
        info->reused = 1;
        snprintf(dir, dirsz, "%s", path);
        ds_plan_free(&plan);
        return 0;
    }

    /* Generate: rank 0 makes the staging tree and the contents CSV. */
    char staging[FS_PATH_MAX] = "";
    if (w->rank == 0) {
        rc = ds_cache_make_staging(cfgdir, staging, sizeof staging);
        if (rc == 0)
            rc = make_tree(staging, &plan);
    }
    rc = dist_agree(w, rc);
    dist_bcast(w, staging, sizeof staging, 0);
    if (rc == 0)
        log_info("dataset: generating %d volumes x %d shard(s) (config_id %s, %d^3 voxels, "
                 "%d rank(s)) in %s",
                 plan.num_volumes, ds_layout_total(&c->layout), info->config_id, c->vol_size,
                 w->size, staging);
    double t0 = time_now();
    gen_state g;
    memset(&g, 0, sizeof g);
    g.c = c;
    g.plan = &plan;
    g.layout = c->layout;
    if (rc == 0)
        rc = generate_tasks(&g, w, staging, t0);
    info->bytes = dist_sum_ll(w, g.bytes);
    info->files = dist_sum_ll(w, g.files);
    if (rc == 0 && w->rank == 0)
        rc = publish(c, &plan, staging, cfgdir, path, sizeof path);
    rc = dist_agree(w, rc);
    info->seconds = dist_max_double(w, time_now() - t0);
    if (rc && w->rank == 0)
        discard_staging(staging, rc);
    if (w->rank == 0)
        claim_release(claim); /* every rank has finished writing (agreed above) */
    if (rc) {
        ds_plan_free(&plan);
        return rc;
    }
    dist_bcast(w, path, sizeof path, 0);
    snprintf(dir, dirsz, "%s", path);
    ds_plan_free(&plan);
    return 0;
}
