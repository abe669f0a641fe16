/* config: the benchmark configuration: every upstream key with its default, our extension keys,
 * YAML loading (libyaml) with strict validation, command-line flags for every key, derived
 * values, and writing the merged configuration back as YAML.
 *
 * Precedence: built-in default < config files (-c FILE, repeatable; later files override
 * earlier ones) < explicit command-line flag. Errors name the file and the key, and map to exit
 * status 2 (ERR_CONFIG / ERR_USAGE). Key names and flag names are upstream's
 * (`problem_scale` <-> `--problem-scale`, `T_0` <-> `--T-0`). */
#ifndef SCAFFOLD_CORE_CONFIG_H
#define SCAFFOLD_CORE_CONFIG_H

#include "core/opt.h"

#include <stdio.h>

#define CFG_STR_MAX 1024
#define CFG_MAX_EXTRA_OPTS 32 /* options of the command itself beside the keys */
#define CFG_MAX_FILES 16
#define CFG_LIST_MAX 3

typedef struct cfg_list {
    int n;
    int v[CFG_LIST_MAX];
} cfg_list;

/* The X-macro of keys: X(name, type, default, help). Types: INT, FLOAT, STR, LIST. The order is
 * the order of `scaffold CMD --help` and of the written config.yaml. */
#define CFG_KEYS(X)                                                                                \
    X(base_run_dir, STR, "benchmark_runs", "parent directory of run folders")                      \
    X(dataset_dir, STR, "datasets", "root of the volume dataset cache")                            \
    X(fract_base_dir, STR, "fractals", "root of the fractal library")                              \
    X(seed, INT, "42", "base seed of every random stream")                                         \
    X(dataloader_num_workers, INT, "1", "loader threads per rank (0 = read on the caller)")        \
    X(dc_num_shards, LIST, "[1, 1, 1]", "spatial shards per sharded dim (3 ints)")                 \
    X(dc_shard_dims, LIST, "[2, 3, 4]", "NCDHW dims that are sharded (3 ints in {2,3,4})")         \
    X(checkpoint_interval, INT, "-1", "checkpoint every N epochs (<= 0 disables)")                 \
    X(n_categories, INT, "5", "number of fractal classes")                                         \
    X(n_instances_used_per_fractal, INT, "145", "instances drawn per class")                      \
    X(problem_scale, INT, "7", "volume size is 2^problem_scale per side")                          \
    X(unet_bottleneck_dim, INT, "3", "log2 of the bottleneck spatial size")                        \
    X(target_dice, FLOAT, "0.95", "validation hard foreground Dice that ends training")           \
    X(local_batch_size, INT, "1", "samples per replica per step")                                  \
    X(optimizer, STR, "ADAM", "ADAM, SGD or RMSProp")                                              \
    X(starting_learning_rate, FLOAT, "0.001", "initial learning rate")                             \
    X(min_learning_rate, FLOAT, "0.0001", "eta_min of the cosine schedule")                        \
    X(T_0, INT, "10", "first cosine cycle length (epochs)")                                        \
    X(T_mult, INT, "2", "cosine cycle growth factor")                                              \
    X(disable_scheduler, INT, "0", "1 keeps the learning rate constant")                           \
    X(variance_threshold, FLOAT, "0.15", "per-axis variance a fractal class must exceed")         \
    X(n_fracts_per_vol, INT, "3", "fractal instances per volume")                                  \
    X(val_split, INT, "30", "percent of volumes used for validation")                              \
    X(epochs, INT, "-1", "epoch cap (-1 = until target_dice)")                                     \
    X(more_determinism, INT, "0", "1 = deterministic algorithms (accepted; always on here)")       \
    X(datagen_from_scratch, INT, "0", "1 deletes the fractal library before generating")           \
    X(train_from_scratch, INT, "1", "1 deletes stats and checkpoints; 0 resumes")                  \
    X(torch_amp, INT, "1", "1 = bf16 convolutions, fp32 accumulation (autocast); 0 = fp32")        \
    X(framework, STR, "torch", "accepted for compatibility (only 'torch')")                        \
    X(checkpoint_dir, STR, "checkpoints", "checkpoint subfolder of the run folder")                \
    X(loss_freq, INT, "1", "accepted and stored (unused upstream too)")                            \
    X(normalize, FLOAT, "1", "class search: points span 2*normalize per axis")                     \
    X(group_norm_groups, INT, "8", "GroupNorm groups (must divide every channel count)")          \
    X(group_norm_stats, STR, "global", "sharded GroupNorm statistics: global or shard (upstream)") \
    X(warmup_batches, INT, "64", "untimed warmup batches per rank")                                \
    X(activation_checkpointing, INT, "0", "1 = recompute each U-Net block in backward (CPU)")      \
    X(ce_weight_sample_fraction, FLOAT, "0.1", "fraction of training masks sampled for CE weights") \
    X(dataset_reuse_enforce_commit_id, INT, "0", "1 = a cached dataset must match the code version") \
    X(job_name, STR, "benchmark", "run folder name prefix")                                        \
    X(async_save, INT, "0", "1 writes checkpoints in a background thread")                         \
    X(checkpoint_on_signal, INT, "0", "1 checkpoints when SIGTERM/SIGINT/SIGUSR1 stops the run")   \
    X(unet_base_channels, INT, "64", "channels of the first U-Net level (extension)")              \
    X(data_store, STR, "files", "files or memory (distributed in-memory store; extension)")        \
    X(datagen_batch_size, INT, "10000", "per-rank class attempts per round")                       \
    X(device, STR, "auto", "cpu, cuda or auto (cuda when a GPU is visible; needs make CUDA=1)")   \
    X(run_dir, STR, "", "resume in this run folder")

enum cfg_key {
#define CFG_ENUM(name, type, def, help) CFG_K_##name,
    CFG_KEYS(CFG_ENUM)
#undef CFG_ENUM
        CFG_NKEYS
};

typedef struct scaffold_config {
#define CFG_FIELD_INT(name) int name;
#define CFG_FIELD_FLOAT(name) double name;
#define CFG_FIELD_STR(name) char name[CFG_STR_MAX];
#define CFG_FIELD_LIST(name) cfg_list name;
#define CFG_FIELD(name, type, def, help) CFG_FIELD_##type(name)
    CFG_KEYS(CFG_FIELD)
#undef CFG_FIELD
    /* Derived (config_finalize). */
    int unet_layers; /* problem_scale - unet_bottleneck_dim */
    int vol_size;    /* 2^problem_scale */
    long point_num;  /* vol_size^3 / 256 */
    /* Provenance. */
    int n_files;
    char files[CFG_MAX_FILES][CFG_STR_MAX]; /* -c files in order */
    unsigned char from_flag[CFG_NKEYS];     /* 1 if set by an explicit flag */
    unsigned char from_file[CFG_NKEYS];     /* 1 if set by a config file */
    int restart;                            /* --restart */
    int verbose;                            /* -v count */
} scaffold_config;

/* Fills every key with its default. */
void config_defaults(scaffold_config *c);

/* Applies one YAML file (a mapping of known keys). Unknown keys, lists for single-valued keys,
 * wrong types: ERR_CONFIG naming the file and every offending key. Auxiliary keys written by
 * scaffold itself into a run's config.yaml (vol_size, point_num, unet_layers, machine_name,
 * scheduler_metadata, restart, ...) are accepted and ignored (derived values are recomputed). */
int config_load_file(scaffold_config *c, const char *path);

/* Parses a command line: -c/--config FILE (repeatable), -v/--verbose, --restart, and a flag for
 * every key (`--key value` or `--key=value`; lists take 3 values). Files are loaded first in
 * order, then flags are applied, so explicit flags win whatever their position. `-h/--help`
 * returns 1 (caller prints config_usage and exits 0). Positional arguments are an error.
 * Returns 0, 1 (help) or ERR_USAGE/ERR_CONFIG. If `require_config` and no -c was given:
 * ERR_USAGE. */
int config_parse_args(scaffold_config *c, int argc, char **argv, int require_config);

/* The same, with the command's own options (`extra`, OPT_END-terminated, at most
 * CFG_MAX_EXTRA_OPTS; NULL for none) in the one option table (core/opt.h) beside -c, -v,
 * --restart and the key flags. */
int config_parse_args_opts(scaffold_config *c, int argc, char **argv, int require_config,
                           const opt_spec *extra);

/* Range checks across keys and the derived values. ERR_CONFIG naming the key. */
int config_finalize(scaffold_config *c);

/* Prints the usage of a command that takes the configuration flags. */
void config_usage(FILE *out, const char *cmd, const char *summary);
void config_usage_opts(FILE *out, const char *cmd, const char *summary, const opt_spec *extra);

/* Writes the merged configuration (all keys, derived ones too) as YAML. `only_flags` writes
 * only the keys set by explicit flags (overrides.yaml). Atomic. 0 or ERR_IO. */
int config_write_yaml(const scaffold_config *c, const char *path, int only_flags);

/* The text of key k's value as config.yaml holds it ("42", "0.15", "\"ADAM\"", "[1, 1, 1]") into
 * buf (at most CFG_VALUE_TEXT_MAX bytes are ever needed); returns its length. */
#define CFG_VALUE_TEXT_MAX (4 * CFG_STR_MAX + 8)
size_t config_value_text(const scaffold_config *c, int k, char *buf, size_t n);
const char *config_key_name(int k);

/* The merged configuration as one canonical text ("key: value" lines, every key, then the
 * --restart option), malloc'ed, for comparing ranks: equal texts = equal runs. NULL when out of
 * memory. */
char *config_canonical(const scaffold_config *c, size_t *len);

/* Compares two canonical texts line by line. Writes "key (value here, value on rank 0), ..." for
 * every differing key into msg and returns the number of differing keys (0 = same). */
int config_diff_canonical(const char *mine, const char *theirs, char *msg, size_t n);

/* Formats a double the way Python's str(float) does (0.15 -> "0.15", 1.0 -> "1.0",
 * 1e-05 -> "1e-05"): upstream uses it in paths such as var0.15 and in CSV files. */
const char *config_pyfloat(double v, char *buf, size_t n);

/* The optimizer key as an enum. */
enum cfg_optimizer { CFG_OPT_ADAM = 0, CFG_OPT_SGD = 1, CFG_OPT_RMSPROP = 2 };
int config_optimizer(const scaffold_config *c);

#endif
