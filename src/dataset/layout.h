/* layout: the physical shard layout of a dataset (reference §7.5, format v5).
 *
 * A layout lists, in the order the user requested them, n (1..3) pairs (dim, count) where dim is
 * an NCDHW axis (2 = D, 3 = H, 4 = W) and count the number of chunks along it. The shard id of a
 * chunk is the row-major index of its per-dim chunk indices over the layout's counts, in the
 * layout's order. Chunks follow torch.chunk: chunk = ceil(size/n), start = i*chunk,
 * stop = min(size, start+chunk); an empty chunk is an error (the layout is rejected up front).
 *
 * Per-dim indices are always passed as idx[3] for (D, H, W), whatever the layout order, so that a
 * reader maps its spatial position onto a dataset written with the same dims in another order
 * (both hash to the same config_id). */
#ifndef SCAFFOLD_DATASET_LAYOUT_H
#define SCAFFOLD_DATASET_LAYOUT_H


#include <stddef.h>
#include <stdint.h>

typedef struct ds_layout {
    int n;         /* number of (dim, count) pairs */
    int dims[3];   /* 2, 3 or 4; unique */
    int counts[3]; /* >= 1 */
} ds_layout;


/* Validates an arbitrary layout for a grid of `vol_size` per side. `what` names its source in
 * the message. 0 or ERR_CONFIG/ERR_FORMAT (code given by `code`). */
int ds_layout_check(const ds_layout *l, int vol_size, int code, const char *what);

/* The same layout sorted by dim (the canonical form hashed into config_id). */
ds_layout ds_layout_canonical(const ds_layout *l);

/* 1 if two layouts give the same count for every dim (order ignored; missing dims count 1). */
int ds_layout_equivalent(const ds_layout *a, const ds_layout *b);

/* Number of shards (product of counts). */
int ds_layout_total(const ds_layout *l);

/* Count of chunks along spatial axis a (0 = D, 1 = H, 2 = W); 1 if the axis is not sharded. */
int ds_layout_count_of(const ds_layout *l, int axis);

/* Shard id -> chunk index per spatial axis (D, H, W). */
void ds_layout_indices(const ds_layout *l, int id, int idx[3]);

/* Chunk index per spatial axis -> shard id. ERR_RANGE if an index is outside its count or
 * non-zero on an unsharded axis. */
int ds_layout_id(const ds_layout *l, const int idx[3], int *id);

/* torch.chunk semantics: chunk i of n over `size`: [*start, *stop). Returns 0, or ERR_RANGE for
 * an empty chunk. */
int ds_chunk(int64_t size, int n, int i, int64_t *start, int64_t *stop);

/* The region of shard `id` in a vol_size^3 grid: start[3], stop[3] for (D, H, W). 0 or
 * ERR_RANGE. */
int ds_layout_region(const ds_layout *l, int vol_size, int id, int64_t start[3], int64_t stop[3]);

/* Formats "[a, b, c]" of the counts or dims (for messages and meta.yaml). */
const char *ds_layout_counts_str(const ds_layout *l, char *buf, size_t n);
const char *ds_layout_dims_str(const ds_layout *l, char *buf, size_t n);

#endif
