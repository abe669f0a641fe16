/* cache: the dataset cache (reference §7.1).
 *
 *   <dataset_dir>/<config_id>/<YYYYmmdd-HHMMSS>__<version>/    a finished dataset
 *   <dataset_dir>/<config_id>/.tmp_<ts>_<pid>_<hex8>/            a dataset being generated
 *
 * config_id = the first 12 hex digits of SHA-256 of the canonical JSON of the include keys
 * (json.dumps(subset, separators=(",",":"), sort_keys=True); floats as Python's repr; the shard
 * layout canonicalised by sorting (dim, count) pairs by dim). The default config hashes to
 * 18d3c8efe010, as upstream. <version> is DS_CODE_VERSION (no git at run time).
 *
 * meta.yaml (written last, before the staging directory is renamed) holds config_id,
 * dataset_format_version, config_subset (shard layout in the requested order), include_keys,
 * code_commit, created_at (UTC ISO, microseconds), and our additions: vol_size, num_volumes,
 * n_train, n_val, train_mask_values, val_mask_values (upstream keeps the last two in pickles).
 *
 * Reuse picks the newest (created_at, then name) non-hidden directory whose meta.yaml matches
 * config_id and the format version (and code_commit when dataset_reuse_enforce_commit_id).
 *
 * Generation runs under the claim <dataset_dir>/<config_id>/.claim (core/claim.h): one job
 * generates a given config_id at a time, jobs that need it meanwhile wait and then reuse what it
 * published, and staging directories are removed only by a holder of that claim (holding it
 * proves that every earlier writer is gone, on whatever host it ran). */
#ifndef SCAFFOLD_DATASET_CACHE_H
#define SCAFFOLD_DATASET_CACHE_H

#include "core/version.h"
#include "dataset/spec.h"
#include "dataset/layout.h"

#include <stddef.h>

#define DS_FORMAT_VERSION 5
#define DS_CODE_VERSION "scaffold-" SCAFFOLD_VERSION
#define DS_CONFIG_ID_LEN 12

/* What meta.yaml says about a dataset. */
typedef struct ds_meta {
    char config_id[DS_CONFIG_ID_LEN + 1];
    int format_version;
    char code_commit[128];
    char created_at[64];
    ds_layout layout; /* requested order */
    int n_categories, n_instances_used_per_fractal, problem_scale, seed, n_fracts_per_vol,
        val_split;
    double variance_threshold;
    int vol_size, num_volumes, n_train, n_val; /* 0 if absent (then derived by the reader) */
} ds_meta;

/* Canonical JSON of the include keys into buf. Returns the length or ERR_RANGE if too small. */
int ds_config_json(const ds_spec *c, char *buf, size_t n);

/* config_id of a config (12 lower-case hex digits + NUL). */
void ds_config_id(const ds_spec *c, char id[DS_CONFIG_ID_LEN + 1]);

/* Writes meta.yaml for config c into `path` (atomically). Extra fields from the caller. 0/ERR_IO */
int ds_meta_write(const char *path, const ds_spec *c, int num_volumes, int n_train,
                  int n_val, const int *train_vals, int n_train_vals, const int *val_vals,
                  int n_val_vals);

/* Parses meta.yaml. 0, ERR_IO (unreadable) or ERR_FORMAT naming the file and the field. */
int ds_meta_read(const char *path, ds_meta *m);

/* Looks in `cfgdir` (= <dataset_dir>/<config_id>) for the newest finished dataset matching
 * config_id (and `commit` if non-NULL). Returns 1 with its path in out, 0 if none, or an error
 * (an unreadable cfgdir). Datasets whose meta.yaml is missing or corrupt are skipped with a
 * warning. */
int ds_cache_find(const char *cfgdir, const char *config_id, const char *commit, char *out,
                  size_t n);

/* The claim that covers generation in cfgdir: <cfgdir>/.claim. */
void ds_cache_claim_path(const char *cfgdir, char *buf, size_t n);

/* Whether cfgdir holds staging directories (".tmp_*"). */
int ds_cache_has_staging(const char *cfgdir);

/* Deletes every staging directory of cfgdir: the debris of generations whose writers are gone.
 * Call it only while holding cfgdir's claim. *removed gets how many. 0, or ERR_IO when cfgdir
 * cannot be listed. */
int ds_cache_remove_staging(const char *cfgdir, int *removed);

/* Creates a fresh staging directory in cfgdir and returns its path. */
int ds_cache_make_staging(const char *cfgdir, char *out, size_t n);

/* Flushes the staging directory's file system (syncfs) and renames it to
 * <cfgdir>/<YYYYmmdd-HHMMSS>__DS_CODE_VERSION (waiting for the next second if that name exists).
 * The final path goes to out. 0 or ERR_IO. */
int ds_cache_publish(const char *staging, const char *cfgdir, char *out, size_t n);

#endif
