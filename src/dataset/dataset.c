/* dataset: opening a generated dataset, sample ids, shard selection, sample reads, the file
 * source for the loader and the CE-weight sample (see dataset.h). */
#include "dataset/dataset.h"

#include "core/err.h"
#include "core/fault.h"
#include "core/log.h"
#include "core/npy.h"
#include "core/sha256.h"

#include <scaffold/trace.h>

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

static const char *const split_dir[2] = {"training", "validation"};

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Lists the ids of one split: stems of volumes/<split>/<id>_shard<NNNNNN>.npy, unique, sorted as
 * strings. Only this opener's shard is listed, which also detects a missing shard file. */
static int list_ids(dataset *ds, int split) {
    char dir[FS_PATH_MAX], suffix[32];
    snprintf(dir, sizeof dir, "%s/volumes/%s", ds->dir, split_dir[split]);
    snprintf(suffix, sizeof suffix, "_shard%06d.npy", ds->shard_id);
    size_t slen = strlen(suffix);
    DIR *d = opendir(dir);
    if (!d)
        return err_set(ERR_IO, "cannot list %s: %s; the dataset is incomplete, delete %s to "
                       "regenerate it", dir, strerror(errno), ds->dir);
    size_t cap = 64, n = 0;
    char **ids = malloc(cap * sizeof *ids);
    int rc = ids ? 0 : err_set(ERR_NOMEM, "out of memory");
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || len <= slen || strcmp(e->d_name + len - slen, suffix))
            continue;
        if (n == cap) {
            char **t = realloc(ids, 2 * cap * sizeof *ids);
            if (!t) {
                rc = err_set(ERR_NOMEM, "out of memory");
                break;
            }
            ids = t;
            cap *= 2;
        }
        ids[n] = strndup(e->d_name, len - slen);
        if (!ids[n]) {
            rc = err_set(ERR_NOMEM, "out of memory");
            break;
        }
        n++;
    }
    closedir(d);
    if (rc) {
        for (size_t i = 0; i < n; i++)
            free(ids[i]);
        free(ids);
        return rc;
    }
    qsort(ids, n, sizeof *ids, cmp_str);
    ds->ids[split] = ids;
    ds->n[split] = (int64_t)n;
    return 0;
}

void dataset_close(dataset *ds) {
    if (!ds)
        return;
    for (int s = 0; s < 2; s++) {
        for (int64_t i = 0; ds->ids[s] && i < ds->n[s]; i++)
            free(ds->ids[s][i]);
        free(ds->ids[s]);
    }
    free(ds);
}

int dataset_open(const char *dir, const int idx[3], dataset **out) {
    *out = NULL;
    dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return err_set(ERR_NOMEM, "out of memory");
    snprintf(ds->dir, sizeof ds->dir, "%s", dir);
    char meta[FS_PATH_MAX];
    snprintf(meta, sizeof meta, "%s/meta.yaml", dir);
    int rc = ds_meta_read(meta, &ds->meta);
    if (rc == 0 && ds->meta.format_version != DS_FORMAT_VERSION)
        rc = err_set(ERR_FORMAT, "%s: dataset_format_version %d is not supported (expected %d); "
                     "delete the dataset to regenerate it", meta, ds->meta.format_version,
                     DS_FORMAT_VERSION);
    int zero[3] = {0, 0, 0};
    if (!idx)
        idx = zero;
    if (rc == 0)
        rc = ds_layout_id(&ds->meta.layout, idx, &ds->shard_id);
    if (rc == 0)
        rc = ds_layout_region(&ds->meta.layout, ds->meta.vol_size, ds->shard_id, ds->start,
                              ds->stop);
    if (rc == 0) {
        memcpy(ds->shard_idx, idx, sizeof ds->shard_idx);
        for (int a = 0; a < 3; a++)
            ds->ext[a] = ds->stop[a] - ds->start[a];
        ds->mask_elems = (size_t)ds->ext[0] * (size_t)ds->ext[1] * (size_t)ds->ext[2];
        ds->vol_elems = 3 * ds->mask_elems;
    }
    for (int s = 0; rc == 0 && s < 2; s++)
        rc = list_ids(ds, s);
    if (rc == 0 && ds->meta.num_volumes &&
        (ds->n[DS_TRAIN] != ds->meta.n_train || ds->n[DS_VAL] != ds->meta.n_val))
        rc = err_set(ERR_FORMAT, "%s: shard %d has %lld training and %lld validation volumes, "
                     "meta.yaml says %d and %d; delete the dataset to regenerate it", dir,
                     ds->shard_id, (long long)ds->n[DS_TRAIN], (long long)ds->n[DS_VAL],
                     ds->meta.n_train, ds->meta.n_val);
    if (rc) {
        dataset_close(ds);
        return rc;
    }
    *out = ds;
    return 0;
}

void dataset_volume_path(const dataset *ds, int split, int64_t i, char *buf, size_t n) {
    snprintf(buf, n, "%s/volumes/%s/%s_shard%06d.npy", ds->dir, split_dir[split],
             ds->ids[split][i], ds->shard_id);
}

void dataset_mask_path(const dataset *ds, int split, int64_t i, char *buf, size_t n) {
    snprintf(buf, n, "%s/masks/%s/%s_shard%06d_mask.npy", ds->dir, split_dir[split],
             ds->ids[split][i], ds->shard_id);
}

static int check_file(const char *path, npy_dtype dt, int ndim, const int64_t *shape) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(ERR_IO, "cannot open %s: %s", path, strerror(errno));
    npy_header h;
    int rc = npy_read_header(f, path, &h); /* also checks the file size against the header */
    fclose(f);
    return rc ? rc : npy_expect(path, &h, dt, ndim, shape);
}

int dataset_check(const dataset *ds) {
    int64_t vshape[4] = {3, ds->ext[0], ds->ext[1], ds->ext[2]};
    char p[FS_PATH_MAX];
    for (int s = 0; s < 2; s++)
        for (int64_t i = 0; i < ds->n[s]; i++) {
            dataset_volume_path(ds, s, i, p, sizeof p);
            int rc = check_file(p, NPY_F32, 4, vshape);
            if (rc == 0) {
                dataset_mask_path(ds, s, i, p, sizeof p);
                rc = check_file(p, NPY_U16, 3, vshape + 1);
            }
            if (rc) {
                /* Our own file: regenerating it is the fix (reading never repairs). */
                char msg[ERR_MSG_MAX];
                snprintf(msg, sizeof msg, "%s", err_msg());
                return err_set(rc, "dataset %s: %s; delete that dataset directory to regenerate "
                               "it", ds->dir, msg);
            }
        }
    return 0;
}

int dataset_read_sample(const dataset *ds, int split, int64_t i, float *vol, uint16_t *mask) {
    if (split < 0 || split > 1 || i < 0 || i >= ds->n[split])
        return err_set(ERR_RANGE, "sample %lld of split %d is out of range", (long long)i, split);
    int64_t vshape[4] = {3, ds->ext[0], ds->ext[1], ds->ext[2]};
    long slow_ms = fault_arg(FAULT_SLOW_READ, 0); /* tests: a slow file system */
    if (slow_ms > 0)
        nanosleep(&(struct timespec){slow_ms / 1000, slow_ms % 1000 * 1000000L}, NULL);
    char p[FS_PATH_MAX];
    dataset_volume_path(ds, split, i, p, sizeof p);
    int rc = npy_read_into(p, NPY_F32, 4, vshape, vol);
    if (rc == 0) {
        dataset_mask_path(ds, split, i, p, sizeof p);
        rc = npy_read_into(p, NPY_U16, 3, vshape + 1, mask);
    }
    return rc;
}

static int file_source_read(void *ctx, int split, const int64_t *idx, int n, float *vol,
                            uint16_t *mask) {
    const dataset *ds = ctx;
    for (int j = 0; j < n; j++) {
        /* dftracer's per-sample "item" event (on the worker thread that reads it), so traces
         * show read time per sample next to the training thread's "fetch" waits. */
        scaffold_trace_region tr = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_ITEM,
                                                               SCAFFOLD_TRACE_CAT_DATA);
        SCAFFOLD_TRACE_REGION_INT(tr, "index", idx[j]);
        int rc = dataset_read_sample(ds, split, idx[j], vol + (size_t)j * ds->vol_elems,
                                     mask + (size_t)j * ds->mask_elems);
        SCAFFOLD_TRACE_REGION_END(tr);
        if (rc)
            return rc;
    }
    return 0;
}

ds_source dataset_file_source(const dataset *ds) {
    ds_source s;
    s.read = file_source_read;
    s.ctx = (void *)ds;
    s.vol_elems = ds->vol_elems;
    s.mask_elems = ds->mask_elems;
    s.concurrent = 1;
    return s;
}

int dataset_loader_create(ds_loader **out, const dataset *ds, int split, int batch,
                          int replicas, int replica, uint64_t seed, int workers) {
    if (split != DS_TRAIN && split != DS_VAL)
        return err_set(ERR_USAGE, "loader: split must be DS_TRAIN or DS_VAL");
    ds_loader_opts o = {dataset_file_source(ds), split, ds->n[split], batch, replicas, replica,
                        seed, workers, 0};
    return ds_loader_create(out, &o);
}

void dataset_rank_shard(const ds_layout *l, int rank, int idx[3]) {
    int t = ds_layout_total(l);
    ds_layout_indices(l, rank % t, idx);
}

int dataset_open_world(const char *dir, const ds_spec *spec, const dist_world *w,
                       dataset **out) {
    *out = NULL;
    ds_layout cl = spec->layout;
    int idx[3] = {0, 0, 0};
    dataset *ds = NULL;
    int rc = ds_layout_check(&cl, spec->vol_size, ERR_CONFIG, "keys 'dc_num_shards'/'dc_shard_dims'");
    if (rc == 0) {
        dataset_rank_shard(&cl, w->rank, idx);
        rc = dataset_open(dir, idx, &ds);
    }
    if (rc == 0 && !ds_layout_equivalent(&cl, &ds->meta.layout)) {
        char a[64], b[64], c2[64], d2[64];
        rc = err_set(ERR_FORMAT,
                     "%s: dataset shard layout %s over dims %s does not match the config's "
                     "dc_num_shards %s over dc_shard_dims %s; generate a dataset for this layout",
                     dir, ds_layout_counts_str(&ds->meta.layout, a, sizeof a),
                     ds_layout_dims_str(&ds->meta.layout, b, sizeof b),
                     ds_layout_counts_str(&cl, c2, sizeof c2), ds_layout_dims_str(&cl, d2, sizeof d2));
    }
    if (rc == 0)
        rc = dataset_check(ds);
    rc = dist_agree(w, rc);
    /* Every rank must see the same id lists (upstream's ids hash guard). */
    unsigned char mine[SHA256_DIGEST_LEN], root[SHA256_DIGEST_LEN];
    memset(mine, 0, sizeof mine);
    if (rc == 0) {
        sha256_ctx h;
        sha256_init(&h);
        for (int s = 0; s < 2; s++) {
            for (int64_t i = 0; i < ds->n[s]; i++) {
                sha256_update(&h, ds->ids[s][i], strlen(ds->ids[s][i]));
                sha256_update(&h, "\n", 1);
            }
            sha256_update(&h, "|", 1);
        }
        sha256_final(&h, mine);
        memcpy(root, mine, sizeof root);
        dist_bcast(w, root, sizeof root, 0);
        if (memcmp(root, mine, sizeof mine))
            rc = err_set(ERR_FORMAT, "%s: this rank sees a different list of sample ids than "
                         "rank 0 (is the dataset directory shared by every rank?)", dir);
        rc = dist_agree(w, rc);
    }
    if (rc) {
        dataset_close(ds);
        return rc;
    }
    *out = ds;
    return 0;
}

int64_t dataset_ce_indices(int64_t n_train, double fraction, int64_t *out) {
    if (n_train <= 0)
        return 0;
    double want = ceil((double)n_train * fraction);
    int64_t k = want < 1 ? 1 : (want > (double)n_train ? n_train : (int64_t)want);
    if (k == 1) {
        out[0] = 0;
        return 1;
    }
    /* torch.linspace(0, n_train - 1, k).long() as torch's CPU kernel computes it in float32:
     * step = (end - start) / (k - 1); an element before k/2 is start + step*i, one after is
     * end - step*(k-1-i). The kernel runs vectorised (8 float lanes with AVX2 or without SIMD):
     * while at least 16 elements remain it fills two 8-lane vectors whose lanes are
     * base + j*step, base chosen by the vector's first index; the rest uses the scalar formula.
     * The rounding differs between the forms and .long() truncates, so all are mirrored: the
     * scalar expressions (and the vector bases) are fused multiply-adds in torch's AVX2 build,
     * the lanes are not (fmaf exactly where torch fuses; this file is compiled without
     * contraction). Checked against torch 1.13 for thousands of (n_train, fraction) pairs.
     * (An AVX-512 torch build uses 16 lanes and may differ at rare indices.) */
    const int64_t V = 8;
    const float start = 0.0f, end = (float)(n_train - 1);
    const float step = (end - start) / (float)(k - 1);
    const int64_t halfway = k / 2;
    int64_t i = 0;
    for (; i <= k - 2 * V; i += 2 * V)
        for (int64_t b = i; b < i + 2 * V; b += V) {
            float base = b < halfway ? fmaf(step, (float)b, start)
                                     : fmaf(-step, (float)(k - b - 1), end);
            for (int64_t j = 0; j < V; j++)
                out[b + j] = (int64_t)(j == 0 ? base : base + (float)j * step);
        }
    for (; i < k; i++) {
        float v = i < halfway ? fmaf(step, (float)i, start) : fmaf(-step, (float)(k - i - 1), end);
        out[i] = (int64_t)v;
    }
    return k;
}
