/* dataset: the volume dataset as the benchmark sees it (reference §7-§8).
 *
 * Contract for `scaffold benchmark` (and `scaffold generate_dataset`):
 *
 *  1. dataset_prepare(spec, world, dir, ...)  collective; the fractal library must already exist
 *     (run fractal_generate first). Finds the newest cached dataset whose meta.yaml matches the
 *     config's config_id, or generates one (cache.h for the layout, compose.h/render.h for the
 *     content), and returns its directory on every rank. Generation splits the
 *     num_volumes x n_shards (volume, shard) tasks in blocks over the ranks, agrees on failures,
 *     logs progress on rank 0 and fills a summary (volumes, bytes, seconds). The instance library
 *     is only read.
 *
 *  2. dataset_open_world(dir, spec, world, &ds) collective; reads meta.yaml, lists the sample ids
 *     of both splits (file stems minus the shard suffix, sorted as strings, as upstream), picks
 *     the shard this rank reads (rank % T decomposed row-major over the config's dc_num_shards,
 *     mapped by dim onto the dataset's layout, which must have the same counts per dim), checks
 *     every file of that shard (.npy header, dtype, shape, file size) and that every rank sees the
 *     same id list (SHA-256 compared with rank 0's). Failures are agreed on all ranks; a missing
 *     or corrupt file is named in the message. dataset_open() is the local, non-collective part
 *     for one explicit shard.
 *
 *  3. A loader per split (loader.h): dataset_loader_create(), or ds_loader_create with the
 *     source from dataset_file_source() (or any other ds_source, e.g. the in-memory store), then
 *     start_epoch / next (or next_ref, zero-copy) / stop. Sample i of a split is
 *     ds->ids[split][i]; its volume is (3, d, h, w) float32 and its mask (d, h, w) uint16 with
 *     (d, h, w) = ds->ext, the shard's extent. Every file was checked at open; a read error
 *     during an epoch (file changed since) is returned by next() on that rank only: agree on it
 *     (dist_agree) at the next collective step, e.g. with the gradient all-reduce's status.
 *
 *  4. dataset_ce_indices(): the training masks sampled for the CE class weights.
 *
 * File layout of a dataset directory:
 *   meta.yaml, volumes_contents.csv,
 *   volumes/{training,validation}/<vol>_shard<id:06d>.npy        float32 (3, d, h, w)
 *   masks/{training,validation}/<vol>_shard<id:06d>_mask.npy      uint16 (d, h, w)
 * An unsharded dataset has one shard per volume (_shard000000). */
#ifndef SCAFFOLD_DATASET_DATASET_H
#define SCAFFOLD_DATASET_DATASET_H

#include "dataset/spec.h"
#include "core/fsutil.h"
#include "dataset/cache.h"
#include "dataset/layout.h"
#include "dataset/loader.h"
#include "mpi/dist.h"

#include <stddef.h>
#include <stdint.h>

/* What dataset_prepare did. Counts are over all ranks. */
typedef struct dataset_prep_info {
    char config_id[DS_CONFIG_ID_LEN + 1];
    int reused;             /* 1: a cached dataset was found, nothing was written */
    int num_volumes;        /* of the dataset */
    long long files;        /* files written (generation only) */
    long long bytes;        /* bytes written (generation only) */
    double seconds;         /* wall time of the generation (max over ranks) */
    int stale_removed;      /* stale staging directories deleted */
} dataset_prep_info;

/* Collective. See the contract above. `dir` receives the dataset directory (absolute if
 * spec->dataset_dir is). 0 or an agreed ERR_* (ERR_CONFIG for a config that gives no dataset,
 * ERR_IO/ERR_FORMAT naming the file otherwise). `info` may be NULL. */
int dataset_prepare(const ds_spec *spec, const dist_world *w, char *dir, size_t dirsz,
                    dataset_prep_info *info);

/* An opened dataset. Fields are read-only for users. */
typedef struct dataset {
    char dir[FS_PATH_MAX];
    ds_meta meta;          /* layout, vol_size, n_categories ... */
    int64_t n[2];          /* samples per split (DS_TRAIN, DS_VAL) */
    char **ids[2];         /* sample ids per split, sorted as strings */
    int shard_id;          /* the physical shard this opener reads */
    int shard_idx[3];      /* its chunk index along D, H, W */
    int64_t start[3];      /* its region in the full volume */
    int64_t stop[3];
    int64_t ext[3];        /* (d, h, w) = stop - start */
    size_t vol_elems;      /* 3 * d * h * w */
    size_t mask_elems;     /* d * h * w */
} dataset;

/* Opens `dir` for the shard with chunk indices idx[3] along (D, H, W) (NULL: shard 0).
 * Reads meta.yaml and lists the ids; does not read the sample files (dataset_check does).
 * 0 or ERR_* naming the file. *out is freed with dataset_close. */
int dataset_open(const char *dir, const int idx[3], dataset **out);

/* Checks every volume and mask file of the opened shard in both splits: present, valid .npy
 * header, expected dtype and shape, file size matching the header. 0 or the first error, naming
 * the file. */
int dataset_check(const dataset *ds);

/* The chunk indices (D, H, W) of world rank `rank` under the config's layout: rank % T
 * decomposed row-major over dc_num_shards in dc_shard_dims order (DistConv's shard_ind). */
void dataset_rank_shard(const ds_layout *l, int rank, int idx[3]);

/* Collective: dataset_open for this rank's shard (see dataset_rank_shard), checks that the
 * dataset layout has the config's counts per dim, dataset_check, and the cross-rank id-list
 * hash check. Errors agreed on all ranks. */
int dataset_open_world(const char *dir, const ds_spec *spec, const dist_world *w,
                       dataset **out);

void dataset_close(dataset *ds); /* NULL-safe */

/* Paths of sample i of a split (volume or mask file of the opened shard). */
void dataset_volume_path(const dataset *ds, int split, int64_t i, char *buf, size_t n);
void dataset_mask_path(const dataset *ds, int split, int64_t i, char *buf, size_t n);

/* Reads sample i of a split into vol (vol_elems floats) and mask (mask_elems). Validates the
 * header, dtype, shape and file size on every read. 0 or ERR_* naming the file. Thread-safe. */
int dataset_read_sample(const dataset *ds, int split, int64_t i, float *vol, uint16_t *mask);

/* A ds_source reading this dataset's files (concurrent = 1). The dataset must outlive it. */
ds_source dataset_file_source(const dataset *ds);

/* Shorthand: a loader over this dataset's files for one split (DS_TRAIN: shuffled and padded
 * per epoch; DS_VAL: contiguous, unpadded), local batch `batch`, data-parallel replica `replica`
 * of `replicas` (ddp_ind / ddp_ranks: rank / T and size / T with T spatial shards), sampler
 * `seed` (upstream: 0), `workers` threads (dataloader_num_workers). See loader.h. */
int dataset_loader_create(ds_loader **out, const dataset *ds, int split, int batch,
                          int replicas, int replica, uint64_t seed, int workers);

/* The CE class-weight sample (upstream §11.4 step 1): k = min(max(ceil(n_train * fraction), 1),
 * n_train) training indices at torch.linspace(0, n_train - 1, k) (float32, torch's symmetric
 * formula) truncated to integers. Writes k values to out (capacity n_train) and returns k
 * (0 if n_train <= 0). */
int64_t dataset_ce_indices(int64_t n_train, double fraction, int64_t *out);

#endif
