/* spec: the adapter from a configuration to the dataset's own spec (see spec.h). */
#include "dataset/spec.h"

#include "core/err.h"

/* The config's first n (dims, counts) pairs as a layout, unused pairs zero: the one place that
 * reads the layout keys. */
static void layout_of(const scaffold_config *c, int n, ds_layout *out) {
    out->n = n;
    for (int i = 0; i < n; i++) {
        out->dims[i] = c->dc_shard_dims.v[i];
        out->counts[i] = c->dc_num_shards.v[i];
    }
    for (int i = n; i < 3; i++)
        out->dims[i] = out->counts[i] = 0;
}

ds_spec ds_spec_of(const scaffold_config *c) {
    ds_spec s = {.dataset_dir = c->dataset_dir,
                 .seed = c->seed,
                 .n_categories = c->n_categories,
                 .n_instances_used_per_fractal = c->n_instances_used_per_fractal,
                 .n_fracts_per_vol = c->n_fracts_per_vol,
                 .val_split = c->val_split,
                 .problem_scale = c->problem_scale,
                 .vol_size = c->vol_size,
                 .variance_threshold = c->variance_threshold,
                 .from_scratch = c->datagen_from_scratch,
                 .enforce_commit_id = c->dataset_reuse_enforce_commit_id,
                 .fractals = fractal_spec_of(c)};
    layout_of(c, c->dc_num_shards.n < c->dc_shard_dims.n ? c->dc_num_shards.n : c->dc_shard_dims.n,
              &s.layout);
    return s;
}

int ds_layout_from_config(const scaffold_config *c, ds_layout *out) {
    if (c->dc_num_shards.n != c->dc_shard_dims.n)
        return err_set(ERR_CONFIG,
                       "key 'dc_num_shards': must have as many entries as dc_shard_dims");
    layout_of(c, c->dc_num_shards.n, out);
    return ds_layout_check(out, c->vol_size, ERR_CONFIG, "keys 'dc_num_shards'/'dc_shard_dims'");
}
