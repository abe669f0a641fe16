/* loader: the samplers and the prefetching batch loader.
 *
 * Samplers (pure functions, shared by the loader and by tests):
 *  - training = torch DistributedSampler(shuffle=True, drop_last=False): per epoch, a permutation
 *    of the n samples from the stream (seed, RNG_SAMPLER, epoch), identical on every rank; padded
 *    by repeating its leading entries up to total = ceil(n / R) * R; replica r takes entries
 *    r, r + R, r + 2R, ... (num_samples = ceil(n / R) each, so every replica gets the same number
 *    of batches). Upstream seeds torch's generator with seed + epoch and uses seed 0 (not the
 *    config seed); pass 0 to mirror that.
 *  - validation = _UnpaddedDistributedSampler: replica r gets the contiguous range
 *    [r*base + min(r, rem), +base + (r < rem)) in order, unpadded (counts may differ by one).
 * Batches are consecutive groups of `batch` sampled indices; the last one may be short.
 *
 * The loader reads batches through a pluggable sample source (ds_source: files, or later the
 * in-memory store) with W worker threads and a bounded queue of prefetch*W batch slots, whose
 * buffers are allocated once at creation. Workers claim batches in sampler order and read each
 * straight into a free slot; ds_loader_next() hands batches to the caller strictly in sampler
 * order (whatever the thread timing, the batch contents are the same for every W), copying the
 * slot into the caller's preallocated buffers. W = 0 reads on the calling thread, straight into
 * the caller's buffers. Workers persist across epochs (persistent_workers=True).
 *
 * Threads: one thread (the owner) calls create/start_epoch/next/stop/destroy. With W > 0 only the
 * workers call the source's read, concurrently; a source that is not safe for that
 * (src->concurrent == 0, e.g. a collective store method) forces W = 0, so every read happens on
 * the owner thread in the same order on every rank. stop() and destroy() never hang: workers
 * finish the read in progress (at most one batch) and exit; batches not yet delivered are
 * dropped. */
#ifndef SCAFFOLD_DATASET_LOADER_H
#define SCAFFOLD_DATASET_LOADER_H

#include <stddef.h>
#include <stdint.h>

/* A sample source. read() fills n samples (given by their index within `split`) into vol
 * (sample j at vol + j * vol_elems) and mask (sample j at mask + j * mask_elems). Returns 0 or a
 * negative ERR_* code after err_set() with a message naming the file/row at fault. */
typedef struct ds_source {
    int (*read)(void *ctx, int split, const int64_t *idx, int n, float *vol, uint16_t *mask);
    void *ctx;
    size_t vol_elems;  /* floats per sample: 3 * d * h * w of the shard */
    size_t mask_elems; /* uint16 per sample: d * h * w */
    int concurrent;    /* 1: read may run in several threads at once */
} ds_source;

enum { DS_TRAIN = 0, DS_VAL = 1 };

/* ---- samplers */

/* Samples per replica per epoch: training ceil(n / R); validation the contiguous share. */
int64_t ds_sampler_count(int split, int64_t n, int replicas, int replica);

/* Fills out[0 .. ds_sampler_count) with replica `replica`'s dataset indices for `epoch` (`seed`
 * and `epoch` only matter for training). Returns the count, or ERR_RANGE for bad arguments /
 * ERR_NOMEM (training allocates n uint32 of scratch). */
int64_t ds_sampler_indices(int split, int64_t n, int replicas, int replica, uint64_t seed,
                           int64_t epoch, int64_t *out);

/* ---- loader */

typedef struct ds_loader ds_loader; /* opaque */

typedef struct ds_loader_opts {
    ds_source src;
    int split;       /* DS_TRAIN (shuffled, padded) or DS_VAL (contiguous, unpadded) */
    int64_t n;       /* samples in the split */
    int batch;       /* local batch size (>= 1) */
    int replicas;    /* data-parallel replicas (>= 1) */
    int replica;     /* this replica's index in [0, replicas) */
    uint64_t seed;   /* sampler seed (upstream: 0) */
    int workers;     /* W >= 0 (dataloader_num_workers) */
    int prefetch;    /* batches queued per worker (<= 0: 2, as torch's prefetch_factor) */
} ds_loader_opts;

/* Creates a loader and starts its workers. Buffers: prefetch * W slots of batch samples.
 * 0, ERR_RANGE/ERR_USAGE (bad options) or ERR_NOMEM. */
int ds_loader_create(ds_loader **out, const ds_loader_opts *o);

/* Batches per epoch for this replica (ceil(count / batch); equal on every replica for
 * training). */
int64_t ds_loader_num_batches(const ds_loader *l);

/* Samples per epoch for this replica. */
int64_t ds_loader_num_samples(const ds_loader *l);

/* Starts epoch `epoch` (the sampler's epoch: 1-based in training, 0 in warmup). A previous epoch
 * not fully consumed is abandoned (its queued batches are dropped). 0 or ERR_NOMEM. */
int ds_loader_start_epoch(ds_loader *l, int64_t epoch);

/* The same, starting at batch `first` of the epoch (a run resumed from a save inside the epoch):
 * the batches before it are neither read nor delivered. */
int ds_loader_start_epoch_at(ds_loader *l, int64_t epoch, int64_t first);

/* Delivers the next batch of the epoch into the caller's buffers (vol: batch * vol_elems floats,
 * mask: batch * mask_elems) and its size in *count. Returns 1 with a batch, 0 at the end of the
 * epoch (or before any start_epoch), or a negative ERR_* from the source (the loader stays
 * usable: the next start_epoch starts afresh). */
int ds_loader_next(ds_loader *l, float *vol, uint16_t *mask, int *count);

/* Zero-copy variant of next(): *vol and *mask point at the batch inside the loader (a prefetch
 * slot, or with W = 0 one loader-owned buffer), valid until the next call of next, next_ref,
 * start_epoch, stop or destroy; the slot is only refilled after that. Same return values.
 * RATIONALE: at scale 7 a sample is 28 MiB and copying it costs about as much as reading it
 * from the page cache, on the training thread; the benchmark reads batches in place. */
int ds_loader_next_ref(ds_loader *l, const float **vol, const uint16_t **mask, int *count);

/* The dataset indices of the batch last delivered by next() (valid until the next call). */
const int64_t *ds_loader_last_indices(const ds_loader *l);

/* Stops the workers (joins them). Idempotent; next() then reads on the calling thread. */
void ds_loader_stop(ds_loader *l);

/* Stops and frees (NULL-safe). */
void ds_loader_destroy(ds_loader *l);

/* Accounting since creation: seconds the caller spent blocked in next() and batches delivered. */
double ds_loader_wait_seconds(const ds_loader *l);

#endif
