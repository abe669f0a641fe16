/* levers: what scaffold tune may change (see tune.h): the lever kinds and their checks, the
 * levers file, the built-in catalog for this machine's shape, and the analyzer's proposals
 * mapped to the benchmark's levers (or to the system change they need). */
#include "tune/tune.h"

#include "core/err.h"
#include "core/yamlx.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

static const char *const cfg_names[] = {
#define TUNE_KEY_NAME(name, type, def, help) #name,
    CFG_KEYS(TUNE_KEY_NAME)
#undef TUNE_KEY_NAME
};

const char *const tune_workload_keys[] = {
    "problem_scale", "n_categories", "n_instances_used_per_fractal", "n_fracts_per_vol",
    "val_split", "target_dice", "seed", "unet_bottleneck_dim", "unet_base_channels",
    /* also fixed by the problem: the fractal classes and the model's normalisation */
    "variance_threshold", "normalize", "group_norm_groups", "dc_shard_dims", NULL};

const char *const tune_managed_keys[] = {"epochs", "run_dir", "base_run_dir", "job_name",
                                         "train_from_scratch", "datagen_from_scratch",
                                         "fract_base_dir", "checkpoint_dir", NULL};

static int in_list(const char *const *l, const char *s) {
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], s))
            return 1;
    return 0;
}

static int cfg_key_index(const char *name) {
    for (int k = 0; k < CFG_NKEYS; k++)
        if (!strcmp(cfg_names[k], name))
            return k;
    return -1;
}

/* Checklist dimension (the 12 of the analyzer) and class of each known lever. Compute-side
 * levers have no I/O dimension of their own; they are filed under 12 (compute/communication
 * overlap), the closest one, and say so in the catalog's reasons. */
static const struct {
    const char *name;
    int dim;
    tune_lever_class cls;
} lever_dims[] = {
    {"dataloader_num_workers", 3, TUNE_C_INPUT},
    {"data_store", 2, TUNE_C_INPUT},
    {"dataset_dir", 4, TUNE_C_INPUT},
    {"async_save", 12, TUNE_C_CKPT},
    {"checkpoint_interval", 12, TUNE_C_CKPT},
    {"torch_amp", 12, TUNE_C_COMPUTE},
    {"activation_checkpointing", 12, TUNE_C_COMPUTE},
    {"local_batch_size", 12, TUNE_C_COMPUTE},
    {"launch:ranks_x_threads", 12, TUNE_C_COMPUTE},
    {"env:OMP_NUM_THREADS", 12, TUNE_C_COMPUTE},
    {"more_determinism", 12, TUNE_C_COMPUTE},
    {"datagen_batch_size", 7, TUNE_C_OTHER},
    {"dataset_reuse_enforce_commit_id", 7, TUNE_C_OTHER},
};

int tune_lever_dimension(const char *name) {
    for (size_t i = 0; i < sizeof lever_dims / sizeof lever_dims[0]; i++)
        if (!strcmp(lever_dims[i].name, name))
            return lever_dims[i].dim;
    return 12;
}

tune_lever_class tune_lever_class_of(const char *name) {
    for (size_t i = 0; i < sizeof lever_dims / sizeof lever_dims[0]; i++)
        if (!strcmp(lever_dims[i].name, name))
            return lever_dims[i].cls;
    if (!strncmp(name, "env:OMP_", 8) || !strncmp(name, "env:GOMP_", 9))
        return TUNE_C_COMPUTE;
    return TUNE_C_OTHER;
}

/* Environment variables a lever must not set: the tracer's own and the preload list. */
static int env_reserved(const char *v) {
    return !strcmp(v, "LD_PRELOAD") || !strncmp(v, "SCAFFOLD_TRACE", 14) ||
           !strncmp(v, "DFTRACER_", 9) || !strcmp(v, "PATH");
}

/* Builds the argument vector a run would use with `--key=value` appended, and validates it the
 * way `scaffold benchmark` would. */
static int check_config_value(int argc, char **argv, const char *key, const char *value) {
    char **av = malloc((size_t)(argc + 2) * sizeof *av);
    if (!av)
        return err_set(ERR_NOMEM, "out of memory");
    char flag[TUNE_NAME_MAX + TUNE_VALUE_MAX + 8];
    snprintf(flag, sizeof flag, "--%s=%s", key, value);
    for (int i = 0; i < argc; i++)
        av[i] = argv[i];
    av[argc] = flag;
    av[argc + 1] = NULL;
    scaffold_config *c = malloc(sizeof *c);
    int rc = c ? 0 : err_set(ERR_NOMEM, "out of memory");
    if (rc == 0) {
        config_defaults(c);
        rc = config_parse_args(c, argc + 1, av, 1);
        if (rc == 0)
            rc = config_finalize(c);
        if (rc == 1)
            rc = err_set(ERR_USAGE, "unexpected --help");
    }
    free(c);
    free(av);
    return rc;
}

int tune_lever_check(tune_lever *l, int cfg_argc, char **cfg_argv) {
    const char *n = l->name;
    if (!strncmp(n, "env:", 4)) {
        const char *v = n + 4;
        int ok = *v && (isalpha((unsigned char)*v) || *v == '_');
        for (const char *p = v; *p && ok; p++)
            ok = isalnum((unsigned char)*p) || *p == '_';
        if (!ok)
            return err_set(ERR_CONFIG, "lever '%s': env: needs a variable name ([A-Za-z_][A-Za-z0-9_]*)",
                           n);
        if (env_reserved(v))
            return err_set(ERR_CONFIG,
                           "lever '%s': %s is set by scaffold tune itself (the tracer, the "
                           "preload list, the search path); choose another variable",
                           n, v);
        l->kind = TUNE_L_ENV;
        l->key = -1;
        return 0;
    }
    if (!strncmp(n, "launch:", 7)) {
        if (strcmp(n, "launch:ranks_x_threads"))
            return err_set(ERR_CONFIG, "lever '%s': the only launch lever is "
                                       "launch:ranks_x_threads (values like 1x2, 2x1)", n);
        for (int i = 0; i < l->nvalues; i++) {
            int r = 0, t = 0;
            char tail = 0;
            if (sscanf(l->values[i], "%dx%d%c", &r, &t, &tail) != 2 || r < 1 || t < 1 ||
                r > 4096 || t > 4096)
                return err_set(ERR_CONFIG, "lever '%s': value '%s' is not RANKSxTHREADS (e.g. "
                                           "2x1)", n, l->values[i]);
        }
        l->kind = TUNE_L_LAUNCH;
        l->key = -1;
        return 0;
    }
    int k = cfg_key_index(n);
    if (k < 0)
        return err_set(ERR_CONFIG,
                       "lever '%s' is neither a configuration key (see 'scaffold benchmark "
                       "--help'), env:NAME nor launch:ranks_x_threads", n);
    if (in_list(tune_workload_keys, n))
        return err_set(ERR_CONFIG,
                       "lever '%s' defines the workload: changing it changes the benchmark, not "
                       "its speed; remove it from the levers", n);
    if (in_list(tune_managed_keys, n))
        return err_set(ERR_CONFIG,
                       "lever '%s' is managed by scaffold tune (epoch cap, run folders, fresh "
                       "starts); remove it from the levers (set the cap with --epochs)", n);
    l->kind = TUNE_L_CONFIG;
    l->key = k;
    for (int i = 0; i < l->nvalues; i++) {
        int rc = check_config_value(cfg_argc, cfg_argv, n, l->values[i]);
        if (rc)
            return err_prefix("lever '%s' value '%s'", n, l->values[i]);
    }
    return 0;
}

/* ------------------------------------------------------------------ the levers file */

/* A value: a scalar, or a list of scalars for a list key (joined with commas). */
static int value_text(yamlx_doc *d, yaml_node_t *v, char *out, size_t cap) {
    if (v->type == YAML_SCALAR_NODE) {
        if (v->data.scalar.length >= cap || memchr(v->data.scalar.value, '\n',
                                                   v->data.scalar.length))
            return -1;
        memcpy(out, v->data.scalar.value, v->data.scalar.length);
        out[v->data.scalar.length] = 0;
        return 0;
    }
    size_t u = 0;
    out[0] = 0;
    for (size_t i = 0; i < yamlx_len(v); i++) {
        yaml_node_t *e = yamlx_item(d, v, i);
        if (!e || e->type != YAML_SCALAR_NODE || u + e->data.scalar.length + 2 >= cap)
            return -1;
        if (u)
            out[u++] = ',';
        memcpy(out + u, e->data.scalar.value, e->data.scalar.length);
        u += e->data.scalar.length;
        out[u] = 0;
    }
    return u ? 0 : -1;
}

typedef struct {
    tune_lever l;
    yaml_node_t *values;
} lever_entry;

static const yamlx_field entry_fields[] = {
    {"name", YAMLX_STR, YAMLX_AT(lever_entry, l.name), .flags = YAMLX_REQUIRED},
    {"values", YAMLX_LIST, YAMLX_AT(lever_entry, values), .flags = YAMLX_REQUIRED},
    {"dimension", YAMLX_INT, YAMLX_AT(lever_entry, l.dimension), .min = 1, .max = 12},
};
static const yamlx_field root_fields[] = {
    {"levers", YAMLX_LIST, .off = 0, .size = sizeof(yaml_node_t *), .flags = YAMLX_REQUIRED},
};

/* Entry `idx` (from 0) of the levers list into *l. */
static int parse_entry(yamlx_doc *d, yaml_node_t *e, int idx, tune_lever *l) {
    const char *label = d->label;
    char ctx[32];
    snprintf(ctx, sizeof ctx, "levers entry %d", idx + 1);
    lever_entry le;
    memset(&le, 0, sizeof le);
    int rc = yamlx_map_read(d, e, entry_fields, YAMLX_N(entry_fields), &le, ctx, 1);
    if (rc)
        return rc;
    *l = le.l;
    if (!yamlx_len(le.values))
        return err_set(ERR_CONFIG, "%s: levers entry %d: 'values' must be a non-empty list", label,
                       idx + 1);
    for (size_t i = 0; i < yamlx_len(le.values); i++) {
        if (l->nvalues >= TUNE_MAX_VALUES)
            return err_set(ERR_CONFIG, "%s: levers entry %d: more than %d values", label, idx + 1,
                           TUNE_MAX_VALUES);
        yaml_node_t *vv = yamlx_item(d, le.values, i);
        if (!vv || value_text(d, vv, l->values[l->nvalues], TUNE_VALUE_MAX))
            return err_set(ERR_CONFIG, "%s: levers entry %d: value %d must be a scalar (or a list "
                           "of scalars) of at most %d characters on one line", label, idx + 1,
                           l->nvalues + 1, TUNE_VALUE_MAX - 1);
        for (int j = 0; j < l->nvalues; j++)
            if (!strcmp(l->values[j], l->values[l->nvalues]))
                return err_set(ERR_CONFIG, "%s: levers entry %d: value '%s' given twice", label,
                               idx + 1, l->values[j]);
        l->nvalues++;
    }
    return 0;
}

static int parse_doc(yamlx_doc *d, int cfg_argc, char **cfg_argv, tune_levers *out) {
    const char *label = d->label;
    yaml_node_t *root = yamlx_root(d), *list = NULL;
    if (!root || root->type != YAML_MAPPING_NODE)
        return err_set(ERR_CONFIG, "%s: expected a mapping with a 'levers' list, e.g.\n"
                                   "  levers:\n    - name: dataloader_num_workers\n"
                                   "      values: [0, 2]",
                       label);
    int rc = yamlx_map_read(d, root, root_fields, 1, &list, NULL, 1);
    for (int idx = 0; rc == 0 && (size_t)idx < yamlx_len(list); idx++) {
        if (out->n >= TUNE_MAX_LEVERS)
            return err_set(ERR_CONFIG, "%s: more than %d levers", label, TUNE_MAX_LEVERS);
        tune_lever *l = &out->l[out->n];
        if ((rc = parse_entry(d, yamlx_item(d, list, (size_t)idx), idx, l)))
            return rc;
        for (int j = 0; j < out->n; j++)
            if (!strcmp(out->l[j].name, l->name))
                return err_set(ERR_CONFIG, "%s: levers entry %d: lever '%s' appears twice (put "
                                           "all its values in one entry)", label, idx + 1,
                               l->name);
        if (tune_lever_check(l, cfg_argc, cfg_argv))
            return err_prefix("%s: levers entry %d", label, idx + 1);
        if (!l->dimension)
            l->dimension = tune_lever_dimension(l->name);
        l->cls = tune_lever_class_of(l->name);
        snprintf(l->origin, sizeof l->origin, "levers file");
        out->n++;
    }
    if (rc == 0 && !out->n)
        return err_set(ERR_CONFIG, "%s: 'levers' is empty", label);
    return rc;
}

/* The document, parsed; *out is left empty on an error. */
static int parse_loaded(int rc, yamlx_doc *d, int cfg_argc, char **cfg_argv, tune_levers *out) {
    memset(out, 0, sizeof *out);
    if (rc)
        return rc;
    rc = parse_doc(d, cfg_argc, cfg_argv, out);
    yamlx_free(d);
    if (rc)
        memset(out, 0, sizeof *out);
    return rc;
}

int tune_levers_parse(const char *text, size_t n, const char *label, int cfg_argc,
                      char **cfg_argv, tune_levers *out) {
    yamlx_doc d;
    int rc = yamlx_load_text(&d, text, n, label, ERR_CONFIG);
    return parse_loaded(rc, &d, cfg_argc, cfg_argv, out);
}

int tune_levers_load(const char *path, int cfg_argc, char **cfg_argv, tune_levers *out) {
    yamlx_doc d;
    int rc = yamlx_load_file(&d, path, "levers file", ERR_CONFIG);
    return parse_loaded(rc, &d, cfg_argc, cfg_argv, out);
}

/* ------------------------------------------------------------------ built-in catalog */

static tune_lever *add(tune_levers *lv, const char *name, const char *origin) {
    if (lv->n >= TUNE_MAX_LEVERS)
        return NULL;
    tune_lever *l = &lv->l[lv->n++];
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    snprintf(l->origin, sizeof l->origin, "%s", origin);
    l->dimension = tune_lever_dimension(name);
    l->cls = tune_lever_class_of(name);
    return l;
}

static void value(tune_lever *l, int v) {
    if (l && l->nvalues < TUNE_MAX_VALUES)
        snprintf(l->values[l->nvalues++], TUNE_VALUE_MAX, "%d", v);
}

void tune_levers_builtin(const scaffold_config *base, int ncpu, int ranks, int threads,
                         const char *stage_dir, tune_levers *out) {
    memset(out, 0, sizeof *out);
    const char *o = "built-in";
    /* Input side: loader threads (prefetch), the in-memory store (cache), staging the dataset
     * in memory-backed storage. */
    tune_lever *l = add(out, "dataloader_num_workers", o);
    static const int workers[] = {0, 1, 2, 4};
    for (size_t i = 0; i < sizeof workers / sizeof workers[0]; i++)
        if (workers[i] != base->dataloader_num_workers && workers[i] <= 2 * ncpu)
            value(l, workers[i]);
    l = add(out, "data_store", o);
    snprintf(l->values[l->nvalues++], TUNE_VALUE_MAX, "%s",
             strcmp(base->data_store, "memory") ? "memory" : "files");
    l = add(out, "dataset_dir", o);
    struct statvfs sv;
    if (stage_dir && strncmp(base->dataset_dir, "/dev/shm", 8) &&
        statvfs("/dev/shm", &sv) == 0 && access("/dev/shm", W_OK) == 0 &&
        (double)sv.f_bavail * (double)sv.f_frsize > 1e9)
        snprintf(l->values[l->nvalues++], TUNE_VALUE_MAX, "%s", stage_dir);
    else
        snprintf(l->blocked, sizeof l->blocked,
                 "no writable memory-backed /dev/shm with 1 GB free to stage the dataset in");
    /* Checkpoints: the background writer. */
    l = add(out, "async_save", o);
    value(l, !base->async_save);
    if (base->checkpoint_interval <= 0)
        snprintf(l->blocked, sizeof l->blocked,
                 "this configuration writes no checkpoint (checkpoint_interval %d)",
                 base->checkpoint_interval);
    /* Compute side: precision, activation checkpointing, the rank x thread layout. */
    l = add(out, "torch_amp", o);
    value(l, !base->torch_amp);
    l = add(out, "activation_checkpointing", o);
    value(l, !base->activation_checkpointing);
    l = add(out, "launch:ranks_x_threads", o);
    for (int r = 1; r <= ncpu; r++)
        if (ncpu % r == 0 && !(r == ranks && ncpu / r == threads) && l->nvalues < TUNE_MAX_VALUES)
            snprintf(l->values[l->nvalues++], TUNE_VALUE_MAX, "%dx%d", r, ncpu / r);
    for (int i = 0; i < out->n; i++) {
        out->l[i].kind = !strncmp(out->l[i].name, "launch:", 7) ? TUNE_L_LAUNCH : TUNE_L_CONFIG;
        out->l[i].key = out->l[i].kind == TUNE_L_CONFIG ? cfg_key_index(out->l[i].name) : -1;
        if (!out->l[i].nvalues && !out->l[i].blocked[0])
            snprintf(out->l[i].blocked, sizeof out->l[i].blocked,
                     "no other value for this machine");
    }
}

/* ------------------------------------------------------------------ analyzer proposals */

static const struct {
    const char *strategy, *lever, *why;
} proposal_map[] = {
    {"prefetch-loader", "dataloader_num_workers", NULL},
    {"async-io", "dataloader_num_workers", NULL},
    {"app-cache", "data_store", NULL},
    {"stage-in", "dataset_dir", NULL},
    {"async-checkpoint", "async_save", NULL},
    {"coalesce-small-io", NULL,
     "the benchmark reads whole .npy samples; coalescing needs an application change"},
    {"collective-io", NULL, "no MPI-IO layer in the benchmark: its files are per-sample .npy"},
    {"metadata-cache", NULL, "needs an application change (cache stat/open results)"},
    {"shard-small-files", NULL,
     "the dataset layout is upstream's (per-volume files); sharding needs a format change"},
    {"metadata-path", NULL, "metadata servers and Data-on-MDT are file-system settings (admin)"},
    {"multilevel-checkpoint", NULL,
     "needs a node-local tier and a drain service (a system change), not a benchmark option"},
    {"striping", NULL, "lfs setstripe on the run and dataset directories (a file-system setting)"},
    {"stdio-to-posix", NULL, "needs an application change (the bulk data path is POSIX already)"},
    {"rebalance", NULL, "the sampler already gives every rank the same samples; needs a change"},
    {"hdf5-tuning", NULL, "no HDF5 file in the benchmark"},
    {"readahead", NULL, "blockdev --setra / posix_fadvise: a kernel setting (needs root)"},
    {"writeback-tuning", NULL, "vm.dirty_* sysctls: a node-wide kernel setting (needs root)"},
};

const char *tune_proposal_lever(const char *strategy_key, const char **why) {
    for (size_t i = 0; i < sizeof proposal_map / sizeof proposal_map[0]; i++)
        if (!strcmp(proposal_map[i].strategy, strategy_key)) {
            *why = proposal_map[i].why;
            return proposal_map[i].lever;
        }
    *why = "no lever of the benchmark implements this strategy";
    return NULL;
}
