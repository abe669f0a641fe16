/* spec: what the dataset code needs to know, as its own small struct (ds_spec) instead of the
 * whole configuration, the way nn_unet_spec serves the engine. ds_spec_of() is the one adapter
 * from a scaffold_config; everything else in src/dataset takes a const ds_spec *. */
#ifndef SCAFFOLD_DATASET_SPEC_H
#define SCAFFOLD_DATASET_SPEC_H

#include "core/config.h"
#include "dataset/layout.h"
#include "fractal/library.h"

typedef struct ds_spec {
    const char *dataset_dir;    /* root of the cache */
    int seed;                   /* every stream's seed (an int in config_id's JSON) */
    int n_categories;
    int n_instances_used_per_fractal;
    int n_fracts_per_vol;
    int val_split;              /* percent */
    int problem_scale;
    int vol_size;               /* 2^problem_scale */
    double variance_threshold;  /* part of config_id (the library's folder) */
    ds_layout layout;           /* dc_shard_dims / dc_num_shards, in the order given */
    int from_scratch;           /* datagen_from_scratch: ignore cached datasets */
    int enforce_commit_id;      /* dataset_reuse_enforce_commit_id */
    fractal_spec fractals;      /* the instance library the volumes are composed from */
} ds_spec;

/* The spec of a configuration (its strings are not copied: c must outlive it). The layout is
 * copied as given; ds_layout_check validates it where it is used. */
ds_spec ds_spec_of(const scaffold_config *c);

/* The layout of a config (dc_shard_dims, dc_num_shards), validated against vol_size
 * (no empty chunk). 0 or ERR_CONFIG naming the key. */
int ds_layout_from_config(const scaffold_config *c, ds_layout *out);

#endif
