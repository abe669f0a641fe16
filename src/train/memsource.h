/* memsource: `data_store: memory` — the dataset held in the distributed in-memory store
 * (src/store). Each rank loads a contiguous share of every split once (DDStore's nsplit), the
 * store makes every sample readable from every rank, and the loader reads batches with
 * store_get_batch instead of files (a ds_source, dataset/loader.h). */
#ifndef SCAFFOLD_TRAIN_MEMSOURCE_H
#define SCAFFOLD_TRAIN_MEMSOURCE_H

#include "dataset/dataset.h"
#include "mpi/dist.h"
#include "store/store.h"

typedef struct memsource {
    store *st;
    int var_vol[2], var_mask[2]; /* per split */
    size_t vol_elems, mask_elems;
    long long bytes_local;       /* bytes this rank holds */
} memsource;

/* Collective: creates the store (RMA method) and loads this rank's share of both splits from
 * the dataset's files. 0 or an agreed error. */
int memsource_load(memsource *m, const dataset *ds, const dist_world *w);

/* The loader source reading from the store (concurrent when the store is thread-safe). */
ds_source memsource_source(memsource *m);

/* Collective: frees the store (NULL-safe on an unloaded memsource). */
void memsource_free(memsource *m);

#endif
