/* config: defaults, YAML files, flags, validation and YAML output (see config.h). */
#include "core/config.h"

#include "core/err.h"
#include "core/fsutil.h"
#include "core/yamlx.h"

#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A key: how its value is read (yamlx.h; PyYAML's types, as upstream reads the file), its
 * default and its help. */
typedef struct {
    yamlx_field f;
    const char *def;
    const char *help;
} cfg_desc;

#define CFG_Y_INT YAMLX_INT
#define CFG_Y_FLOAT YAMLX_DOUBLE
#define CFG_Y_STR YAMLX_STR
#define CFG_Y_LIST YAMLX_INTS
static const cfg_desc cfg_table[CFG_NKEYS] = {
#define CFG_DESC(name, type, def, help)                                                            \
    {{#name, CFG_Y_##type, YAMLX_AT(scaffold_config, name), .flags = YAMLX_TYPED}, def, help},
    CFG_KEYS(CFG_DESC)
#undef CFG_DESC
};

/* Keys that scaffold writes into a run's config.yaml, or upstream accepts, with no effect here. */
static const char *const cfg_aux[] = {
    "command",   "config",      "verbose",    "restart",  "run_iter",           "benchmark_run_dir",
    "unet_layers", "vol_size",  "point_num",  "scheduler_metadata", "machine_name", "scale",
    "dc_total_shards", "config_files", NULL};

/* Keys that hold a list (a YAML list for another key is a rejected "sweep"). */
static int cfg_is_list(int k) {
    return cfg_table[k].f.type == YAMLX_INTS;
}

static int cfg_find(const char *name) {
    for (int k = 0; k < CFG_NKEYS; k++)
        if (!strcmp(cfg_table[k].f.key, name))
            return k;
    return -1;
}

static int cfg_is_aux(const char *name) {
    for (int i = 0; cfg_aux[i]; i++)
        if (!strcmp(cfg_aux[i], name))
            return 1;
    return 0;
}

const char *config_pyfloat(double v, char *buf, size_t n) {
    if (isnan(v)) {
        snprintf(buf, n, "nan");
        return buf;
    }
    if (isinf(v)) {
        snprintf(buf, n, v > 0 ? "inf" : "-inf");
        return buf;
    }
    /* Shortest digits that round-trip (Python's repr), then Python's layout rules. */
    char e[64];
    int prec;
    for (prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, v);
        if (strtod(e, NULL) == v)
            break;
    }
    char *ep = strchr(e, 'e');
    int exp10 = atoi(ep + 1);
    *ep = '\0';
    char digits[32];
    int nd = 0, neg = e[0] == '-';
    for (char *p = e; *p; p++)
        if (isdigit((unsigned char)*p))
            digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    char out[64];
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (exp10 < -4 || exp10 >= 16) {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, (size_t)nd - 1);
            o += (size_t)nd - 1;
        }
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+',
                              abs(exp10));
    } else if (exp10 < 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -exp10 - 1; i++)
            out[o++] = '0';
        memcpy(out + o, digits, (size_t)nd);
        o += (size_t)nd;
    } else {
        for (int i = 0; i <= exp10; i++)
            out[o++] = i < nd ? digits[i] : '0';
        out[o++] = '.';
        if (nd > exp10 + 1) {
            memcpy(out + o, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
            o += (size_t)(nd - exp10 - 1);
        } else {
            out[o++] = '0';
        }
    }
    out[o] = '\0';
    snprintf(buf, n, "%s", out);
    return buf;
}

/* Where a key's value came from, for messages. */
static void cfg_where(int k, const char *src, char *buf, size_t n) {
    if (src && !strncmp(src, "--", 2))
        snprintf(buf, n, "%s", src);
    else if (src)
        snprintf(buf, n, "%s: key '%s'", src, cfg_table[k].f.key);
    else
        snprintf(buf, n, "key '%s'", cfg_table[k].f.key);
}

/* Sets key k from a text: a default, or a flag's value (`src` "--flag"; a list's values are
 * joined with commas). */
static int cfg_set_scalar(scaffold_config *c, int k, const char *text, const char *src) {
    char where[CFG_STR_MAX + 64];
    cfg_where(k, src, where, sizeof where);
    return yamlx_set(&cfg_table[k].f, c, text, where, ERR_CONFIG);
}

void config_defaults(scaffold_config *c) {
    memset(c, 0, sizeof *c);
    for (int k = 0; k < CFG_NKEYS; k++)
        if (cfg_set_scalar(c, k, cfg_table[k].def, "default") != 0)
            abort(); /* a bad default is a programming error caught by the first test run */
}

static void cfg_append(char *list, const char *key) {
    size_t u = strlen(list);
    snprintf(list + u, CFG_STR_MAX - u, "%s'%s'", u ? ", " : "", key);
}

/* One key of a configuration file. Unknown keys and lists for single-valued keys are collected
 * into `unknown` and `sweeps` (CFG_STR_MAX each), to be reported together. */
static int cfg_load_pair(scaffold_config *c, yamlx_doc *d, const yaml_node_pair_t *p,
                         char *unknown, char *sweeps) {
    yaml_node_t *vn = yaml_document_get_node(&d->doc, p->value);
    const char *key = yamlx_text(yaml_document_get_node(&d->doc, p->key));
    if (!key)
        return err_set(ERR_CONFIG, "%s: configuration keys must be plain names", d->label);
    if (!strcmp(key, "dataset_num_shards") || !strcmp(key, "dataset_shard_dims"))
        return err_set(ERR_CONFIG, "%s: key '%s' is no longer supported; use "
                       "dc_num_shards/dc_shard_dims", d->label, key);
    if (!strcmp(key, "dist")) {
        const char *v = yamlx_text(vn);
        return v && !strcmp(v, "0") ? err_set(ERR_CONFIG, "%s: key 'dist': dist: 0 is not "
                                              "supported (scaffold is always distributed; remove "
                                              "the key)", d->label)
                                    : 0;
    }
    int k = cfg_find(key);
    if (k < 0 || (vn->type == YAML_SEQUENCE_NODE && !cfg_is_list(k))) {
        if (k >= 0 || !cfg_is_aux(key))
            cfg_append(k < 0 ? unknown : sweeps, key);
        return 0;
    }
    char where[CFG_STR_MAX + 64];
    cfg_where(k, d->label, where, sizeof where);
    int rc = yamlx_set_node(d, &cfg_table[k].f, c, vn, where);
    if (rc == 0)
        c->from_file[k] = 1;
    return rc;
}

int config_load_file(scaffold_config *c, const char *path) {
    yamlx_doc d;
    int rc = yamlx_load_file(&d, path, "config file", ERR_CONFIG);
    if (rc)
        return rc;
    yaml_node_t *root = yamlx_root(&d); /* NULL: an empty file, no overrides */
    char unknown[CFG_STR_MAX] = "", sweeps[CFG_STR_MAX] = "";
    if (root && root->type != YAML_MAPPING_NODE)
        rc = err_set(ERR_CONFIG, "%s: expected a mapping of configuration keys, found a %s", path,
                     yamlx_kind(root));
    for (yaml_node_pair_t *p = root ? root->data.mapping.pairs.start : NULL;
         rc == 0 && root && p < root->data.mapping.pairs.top; p++)
        rc = cfg_load_pair(c, &d, p, unknown, sweeps);
    if (rc == 0 && sweeps[0])
        rc = err_set(ERR_CONFIG,
                     "%s: %s: parameter sweeps are no longer supported; got a list for a "
                     "single-valued key. Launch one benchmark run per parameter setting.",
                     path, sweeps);
    if (rc == 0 && unknown[0])
        rc = err_set(ERR_CONFIG, "%s: unknown config key(s): %s (see 'scaffold benchmark --help' "
                                 "for the valid keys)", path, unknown);
    yamlx_free(&d);
    return rc;
}

/* The command line of a configuration-driven command is one option table (core/opt.h): the
 * command's own options, -c/--config, -v/--verbose, --restart, then a flag for every key. Key
 * flags are recorded while parsing and applied after every file is loaded, so an explicit flag
 * wins whatever its position. */
typedef struct cfg_cli {
    scaffold_config *c;
    int nflags;
    struct cfg_flag_rec {
        int k;
        int n;
        char *vals[CFG_LIST_MAX]; /* point into argv */
    } *flags;
    char names[CFG_NKEYS][64]; /* "--problem-scale" without the dashes */
    opt_spec tab[CFG_NKEYS + CFG_MAX_EXTRA_OPTS + 8];
} cfg_cli;

static int cfg_opt_file(const opt_spec *o, char **vals, int n, void *ctx) {
    (void)o, (void)n;
    scaffold_config *c = ((cfg_cli *)ctx)->c;
    if (c->n_files >= CFG_MAX_FILES)
        return err_set(ERR_USAGE, "at most %d config files", CFG_MAX_FILES);
    snprintf(c->files[c->n_files++], CFG_STR_MAX, "%s", vals[0]);
    return 0;
}

static int cfg_opt_key(const opt_spec *o, char **vals, int n, void *ctx) {
    cfg_cli *cl = ctx;
    struct cfg_flag_rec *r = &cl->flags[cl->nflags++];
    r->k = (int)((o->name - cl->names[0]) / (ptrdiff_t)sizeof cl->names[0]);
    r->n = n < CFG_LIST_MAX ? n : CFG_LIST_MAX;
    for (int i = 0; i < r->n; i++)
        r->vals[i] = vals[i];
    return 0;
}

static int cfg_cli_build(cfg_cli *cl, scaffold_config *c, const opt_spec *extra) {
    memset(cl, 0, sizeof *cl);
    cl->c = c;
    int n = 0;
    for (const opt_spec *e = extra; e && e->type != OPT_END; e++) {
        if (n >= CFG_MAX_EXTRA_OPTS)
            return err_set(ERR_INTERNAL, "more than %d command options", CFG_MAX_EXTRA_OPTS);
        cl->tab[n++] = *e;
    }
    cl->tab[n++] = (opt_spec)OPT_FN_('c', "config", cfg_opt_file, cl, 1, "FILE",
                                     "configuration file (repeatable: the first is the base, "
                                     "later files override it in order)");
    cl->tab[n++] = (opt_spec)OPT_COUNT_('v', "verbose", &c->verbose, "more output (repeatable)");
    cl->tab[n++] = (opt_spec)OPT_FLAG_(0, "restart", &c->restart,
                                       "resume the run in --run-dir from its checkpoints");
    cl->tab[n++] = (opt_spec)OPT_SECTION_("configuration keys (precedence: default < file < flag):");
    for (int k = 0; k < CFG_NKEYS; k++) {
        snprintf(cl->names[k], sizeof cl->names[k], "%s", cfg_table[k].f.key);
        for (char *p = cl->names[k]; *p; p++)
            if (*p == '_')
                *p = '-';
        yamlx_type t = cfg_table[k].f.type;
        const char *arg = t == YAMLX_INTS  ? "I I I"
                          : t == YAMLX_STR ? "STR"
                          : t == YAMLX_INT ? "INT"
                                           : "NUM";
        cl->tab[n++] = (opt_spec){.name = cl->names[k], .type = OPT_FN, .fn = cfg_opt_key,
                                  .ctx = cl, .nargs = cfg_is_list(k) ? CFG_LIST_MAX : 1,
                                  .arg = arg, .help = cfg_table[k].help, .def = cfg_table[k].def};
    }
    cl->tab[n] = (opt_spec)OPT_END_;
    return 0;
}

int config_parse_args_opts(scaffold_config *c, int argc, char **argv, int require_config,
                           const opt_spec *extra) {
    cfg_cli *cl = malloc(sizeof *cl);
    if (!cl)
        return err_set(ERR_NOMEM, "out of memory parsing the command line");
    int rc = cfg_cli_build(cl, c, extra);
    cl->flags = rc ? NULL : malloc(sizeof *cl->flags * (size_t)(argc > 0 ? argc : 1));
    if (!rc && !cl->flags)
        rc = err_set(ERR_NOMEM, "out of memory parsing the command line");
    const opt_cmd cmd = {argv[0], NULL, NULL, cl->tab, OPT_POS_NONE, NULL};
    int first;
    if (!rc)
        rc = opt_parse(&cmd, argc, argv, &first);
    if (!rc && require_config && c->n_files == 0)
        rc = err_set(ERR_USAGE, "a configuration file is required: scaffold %s -c FILE.yml",
                     argv[0]);
    for (int f = 0; f < c->n_files && !rc; f++)
        rc = config_load_file(c, c->files[f]);
    /* Key flags, applied after every file, in command-line order. */
    for (int i = 0; i < cl->nflags && !rc; i++) {
        const struct cfg_flag_rec *r = &cl->flags[i];
        char joined[256] = "", flag[80];
        for (int j = 0; j < r->n; j++) {
            size_t u = strlen(joined);
            snprintf(joined + u, sizeof joined - u, "%s%s", j ? "," : "", r->vals[j]);
        }
        snprintf(flag, sizeof flag, "--%s", cl->names[r->k]);
        rc = cfg_set_scalar(c, r->k, joined, flag);
        if (!rc)
            c->from_flag[r->k] = 1;
    }
    free(cl->flags);
    free(cl);
    return rc;
}

int config_parse_args(scaffold_config *c, int argc, char **argv, int require_config) {
    return config_parse_args_opts(c, argc, argv, require_config, NULL);
}

/* Source of a key's current value, for messages: the last file that set it, or the flag. */
static void cfg_src(const scaffold_config *c, int k, char *buf, size_t n) {
    if (c->from_flag[k]) {
        char flag[128];
        snprintf(flag, sizeof flag, "--%s", cfg_table[k].f.key);
        for (char *p = flag + 2; *p; p++)
            if (*p == '_')
                *p = '-';
        snprintf(buf, n, "%s", flag);
    } else if (c->from_file[k] && c->n_files > 0) {
        snprintf(buf, n, "%s: key '%s'", c->files[c->n_files - 1], cfg_table[k].f.key);
        /* Find the last file that mentions the key for an exact message. */
        for (int f = c->n_files - 1; f >= 0; f--) {
            char *txt = NULL;
            if (fs_read_file(c->files[f], &txt, NULL) == 0) {
                char pat[160];
                snprintf(pat, sizeof pat, "%s:", cfg_table[k].f.key);
                int hit = strstr(txt, pat) != NULL;
                free(txt);
                if (hit) {
                    snprintf(buf, n, "%s: key '%s'", c->files[f], cfg_table[k].f.key);
                    break;
                }
            }
        }
        err_clear();
    } else {
        snprintf(buf, n, "default of key '%s'", cfg_table[k].f.key);
    }
}

#define CFG_FAIL(k, ...)                                                                           \
    do {                                                                                           \
        char src_[CFG_STR_MAX + 64], msg_[CFG_STR_MAX + 256];                                                    \
        cfg_src(c, CFG_K_##k, src_, sizeof src_);                                                  \
        snprintf(msg_, sizeof msg_, __VA_ARGS__);                                                  \
        return err_set(ERR_CONFIG, "%s: %s", src_, msg_);                                          \
    } while (0)

static int is_bool(int v) {
    return v == 0 || v == 1;
}

/* config_finalize in steps, in the order the keys are checked (the first bad key is the one
 * reported): sizes and rates, the GroupNorm divisibility, the remaining numbers, the shard
 * layout, the words and paths, the 0/1 switches. */
static int check_sizes(const scaffold_config *c) {
    if (c->n_categories < 1)
        CFG_FAIL(n_categories, "must be a positive integer, got %d", c->n_categories);
    if (c->problem_scale < 3 || c->problem_scale > 12)
        CFG_FAIL(problem_scale, "must be between 3 and 12, got %d", c->problem_scale);
    if (c->unet_bottleneck_dim < 0 || c->unet_bottleneck_dim > c->problem_scale - 1)
        CFG_FAIL(unet_bottleneck_dim, "must be in [0, problem_scale-1] = [0, %d], got %d",
                 c->problem_scale - 1, c->unet_bottleneck_dim);
    if (c->n_fracts_per_vol < 1)
        CFG_FAIL(n_fracts_per_vol, "must be a positive integer, got %d", c->n_fracts_per_vol);
    if (c->n_instances_used_per_fractal < c->n_fracts_per_vol)
        CFG_FAIL(n_instances_used_per_fractal, "must be at least n_fracts_per_vol (%d), got %d",
                 c->n_fracts_per_vol, c->n_instances_used_per_fractal);
    if (c->local_batch_size < 1)
        CFG_FAIL(local_batch_size, "must be a positive integer, got %d", c->local_batch_size);
    if (c->dataloader_num_workers < 0 || c->dataloader_num_workers > 64)
        CFG_FAIL(dataloader_num_workers, "must be in [0, 64], got %d", c->dataloader_num_workers);
    if (c->val_split <= 0 || c->val_split >= 100)
        CFG_FAIL(val_split, "must be a percentage in [1, 99], got %d", c->val_split);
    if (!(c->starting_learning_rate > 0))
        CFG_FAIL(starting_learning_rate, "must be > 0");
    if (!(c->min_learning_rate >= 0) || c->min_learning_rate > c->starting_learning_rate)
        CFG_FAIL(min_learning_rate, "must be in [0, starting_learning_rate]");
    if (c->T_0 < 1)
        CFG_FAIL(T_0, "must be a positive integer, got %d", c->T_0);
    if (c->T_mult < 1)
        CFG_FAIL(T_mult, "must be a positive integer, got %d", c->T_mult);
    if (!(c->variance_threshold >= 0))
        CFG_FAIL(variance_threshold, "must be >= 0");
    if (!(c->normalize > 0))
        CFG_FAIL(normalize, "must be > 0");
    if (c->group_norm_groups < 1)
        CFG_FAIL(group_norm_groups, "must be a positive integer, got %d", c->group_norm_groups);
    if (c->unet_base_channels < 1)
        CFG_FAIL(unet_base_channels, "must be a positive integer, got %d", c->unet_base_channels);
    return 0;
}

/* unet_base_channels must be a multiple of group_norm_groups: blame the key the user set. */
static int check_groups(const scaffold_config *c) {
    if (c->unet_base_channels % c->group_norm_groups != 0) {
        /* Blame the key the user set (both when both were set): a default is no one's choice. */
        int k_ch = CFG_K_unet_base_channels, k_g = CFG_K_group_norm_groups;
        int set_ch = c->from_file[k_ch] || c->from_flag[k_ch];
        int set_g = c->from_file[k_g] || c->from_flag[k_g];
        char src_ch[CFG_STR_MAX + 64], src_g[CFG_STR_MAX + 64];
        cfg_src(c, k_ch, src_ch, sizeof src_ch);
        cfg_src(c, k_g, src_g, sizeof src_g);
        int g = c->group_norm_groups, ch = c->unet_base_channels;
        if (set_g && !set_ch)
            return err_set(ERR_CONFIG, "%s: %d does not divide unet_base_channels (%d, the "
                           "default): GroupNorm splits every channel count into that many groups; "
                           "use a divisor of %d, such as %d", src_g, g, ch, ch,
                           ch % 8 == 0 ? 8 : 1);
        return err_set(ERR_CONFIG, "%s: %d is not a multiple of group_norm_groups (%d%s%s): "
                       "GroupNorm splits every channel count into that many groups; use a "
                       "multiple of %d (e.g. %d) or set group_norm_groups to a divisor of %d",
                       src_ch, ch, g, set_g ? ", from " : ", the default", set_g ? src_g : "", g,
                       (ch / g + 1) * g, ch);
    }
    return 0;
}

static int check_numbers(const scaffold_config *c) {
    if (c->warmup_batches < 0)
        CFG_FAIL(warmup_batches, "must be >= 0, got %d", c->warmup_batches);
    if (!(c->ce_weight_sample_fraction > 0 && c->ce_weight_sample_fraction <= 1))
        CFG_FAIL(ce_weight_sample_fraction, "must be in (0, 1]");
    if (!(c->target_dice > 0 && c->target_dice <= 1))
        CFG_FAIL(target_dice, "must be in (0, 1]");
    if (c->epochs != -1 && c->epochs < 1)
        CFG_FAIL(epochs, "must be -1 (until target_dice) or a positive cap, got %d", c->epochs);
    if (c->datagen_batch_size < 1)
        CFG_FAIL(datagen_batch_size, "must be a positive integer");
    return 0;
}

/* Also sets vol_size, which the shard bounds need. */
static int check_shards(scaffold_config *c) {
    if (c->dc_num_shards.n != c->dc_shard_dims.n)
        CFG_FAIL(dc_num_shards, "must have as many entries as dc_shard_dims (%d vs %d)",
                 c->dc_num_shards.n, c->dc_shard_dims.n);
    c->vol_size = 1 << c->problem_scale;
    for (int i = 0; i < c->dc_num_shards.n; i++) {
        if (c->dc_num_shards.v[i] < 1 || c->dc_num_shards.v[i] > c->vol_size)
            CFG_FAIL(dc_num_shards, "entries must be in [1, vol_size=%d], got %d", c->vol_size,
                     c->dc_num_shards.v[i]);
        int d = c->dc_shard_dims.v[i];
        if (d < 2 || d > 4)
            CFG_FAIL(dc_shard_dims, "entries must be 2 (D), 3 (H) or 4 (W), got %d", d);
        for (int j = 0; j < i; j++)
            if (c->dc_shard_dims.v[j] == d)
                CFG_FAIL(dc_shard_dims, "entries must be unique, %d appears twice", d);
    }
    return 0;
}

static int check_words(const scaffold_config *c) {
    if (config_optimizer(c) < 0)
        CFG_FAIL(optimizer, "must be ADAM, SGD or RMSProp, got '%s'", c->optimizer);
    if (strcmp(c->framework, "torch") != 0)
        CFG_FAIL(framework, "only 'torch' is accepted (kept for compatibility), got '%s'",
                 c->framework);
    if (strcmp(c->group_norm_stats, "global") != 0 && strcmp(c->group_norm_stats, "shard") != 0)
        CFG_FAIL(group_norm_stats, "must be 'global' (statistics of the whole volume) or 'shard' "
                 "(per spatial shard, as upstream DistConv), got '%s'", c->group_norm_stats);
    if (strcmp(c->data_store, "files") != 0 && strcmp(c->data_store, "memory") != 0)
        CFG_FAIL(data_store, "must be 'files' or 'memory', got '%s'", c->data_store);
    if (strcmp(c->device, "cpu") != 0 && strcmp(c->device, "cuda") != 0 &&
        strcmp(c->device, "auto") != 0)
        CFG_FAIL(device, "must be 'cpu', 'cuda' or 'auto', got '%s'", c->device);
#ifndef SCAFFOLD_CUDA
    if (!strcmp(c->device, "cuda"))
        CFG_FAIL(device, "'cuda' needs a build with the CUDA backend: rebuild with 'make CUDA=1' "
                         "(binary in build-cuda/), or use device: auto or cpu");
#endif
    if (!c->base_run_dir[0])
        CFG_FAIL(base_run_dir, "must not be empty");
    if (!c->dataset_dir[0])
        CFG_FAIL(dataset_dir, "must not be empty");
    if (!c->fract_base_dir[0])
        CFG_FAIL(fract_base_dir, "must not be empty");
    if (!c->checkpoint_dir[0] || strchr(c->checkpoint_dir, '/'))
        CFG_FAIL(checkpoint_dir, "must be a plain folder name");
    if (!c->job_name[0]) {
        char src[CFG_STR_MAX + 64];
        cfg_src(c, CFG_K_job_name, src, sizeof src);
        return err_set(ERR_CONFIG, "%s is empty; give a plain name (it starts the run folder's "
                       "name)", src);
    }
    if (strchr(c->job_name, '/'))
        CFG_FAIL(job_name, "must be a plain name without '/', got '%s'", c->job_name);
    return 0;
}

static int check_switches(const scaffold_config *c) {
#define CFG_BOOL_CHECK(k)                                                                          \
    if (!is_bool(c->k))                                                                            \
        CFG_FAIL(k, "must be 0 or 1, got %d", c->k);
    CFG_BOOL_CHECK(disable_scheduler)
    CFG_BOOL_CHECK(more_determinism)
    CFG_BOOL_CHECK(datagen_from_scratch)
    CFG_BOOL_CHECK(train_from_scratch)
    CFG_BOOL_CHECK(torch_amp)
    CFG_BOOL_CHECK(activation_checkpointing)
    CFG_BOOL_CHECK(dataset_reuse_enforce_commit_id)
    CFG_BOOL_CHECK(async_save)
    CFG_BOOL_CHECK(checkpoint_on_signal)
#undef CFG_BOOL_CHECK
    return 0;
}

int config_finalize(scaffold_config *c) {
    int rc;
    if ((rc = check_sizes(c)) || (rc = check_groups(c)) || (rc = check_numbers(c)) ||
        (rc = check_shards(c)) || (rc = check_words(c)) || (rc = check_switches(c)))
        return rc;
    c->unet_layers = c->problem_scale - c->unet_bottleneck_dim;
    c->point_num = (long)(((double)c->vol_size * c->vol_size * c->vol_size) / 256.0);
    return 0;
}

int config_optimizer(const scaffold_config *c) {
    if (!strcasecmp(c->optimizer, "ADAM"))
        return CFG_OPT_ADAM;
    if (!strcasecmp(c->optimizer, "SGD"))
        return CFG_OPT_SGD;
    if (!strcasecmp(c->optimizer, "RMSProp"))
        return CFG_OPT_RMSPROP;
    return -1;
}

void config_usage_opts(FILE *out, const char *cmd, const char *summary,
                       const opt_spec *extra) {
    scaffold_config *c = malloc(sizeof *c);
    cfg_cli *cl = malloc(sizeof *cl);
    if (c && cl && cfg_cli_build(cl, c, extra) == 0) {
        const opt_cmd oc = {cmd, "-c FILE.yml [-c OVERRIDE.yml ...] [--KEY VALUE ...]", summary,
                             cl->tab, OPT_POS_NONE, NULL};
        opt_usage(&oc, out);
    }
    free(cl);
    free(c);
}

void config_usage(FILE *out, const char *cmd, const char *summary) {
    config_usage_opts(out, cmd, summary, NULL);
}

/* A string as a double-quoted YAML scalar (escapes ", \\ and control characters). */
static size_t yaml_str(char *buf, size_t n, const char *s) {
    size_t o = 0;
#define PUT(...) o += (size_t)snprintf(buf + (o < n ? o : n), o < n ? n - o : 0, __VA_ARGS__)
    PUT("\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            PUT("\\%c", *p);
        else if (*p < 0x20)
            PUT("\\x%02x", *p);
        else
            PUT("%c", *p);
    }
    PUT("\"");
#undef PUT
    return o;
}

size_t config_value_text(const scaffold_config *c, int k, char *buf, size_t n) {
    if (n)
        buf[0] = '\0';
    if (k < 0 || k >= CFG_NKEYS)
        return 0;
    const char *field = (const char *)c + cfg_table[k].f.off;
    char num[64];
    switch (cfg_table[k].f.type) {
    case YAMLX_INT:
        return (size_t)snprintf(buf, n, "%d", *(const int *)field);
    case YAMLX_DOUBLE:
        return (size_t)snprintf(buf, n, "%s", config_pyfloat(*(const double *)field, num, sizeof num));
    case YAMLX_STR:
        return yaml_str(buf, n, field);
    case YAMLX_INTS: {
        const cfg_list *l = (const cfg_list *)field;
        size_t o = (size_t)snprintf(buf, n, "[");
        for (int i = 0; i < l->n; i++)
            o += (size_t)snprintf(buf + (o < n ? o : n), o < n ? n - o : 0, "%s%d", i ? ", " : "",
                                  l->v[i]);
        o += (size_t)snprintf(buf + (o < n ? o : n), o < n ? n - o : 0, "]");
        return o;
    }
    default:
        return 0;
    }
}

const char *config_key_name(int k) {
    return k >= 0 && k < CFG_NKEYS ? cfg_table[k].f.key : "";
}

int config_write_yaml(const scaffold_config *c, const char *path, int only_flags) {
    fs_atomic a;
    int rc = fs_atomic_open(&a, path);
    if (rc)
        return rc;
    char val[CFG_VALUE_TEXT_MAX];
    for (int k = 0; k < CFG_NKEYS; k++) {
        if (only_flags && !c->from_flag[k])
            continue;
        if (k == CFG_K_run_dir && !c->from_flag[k])
            continue; /* a saved config must not turn a new run into a resume */
        config_value_text(c, k, val, sizeof val);
        fprintf(a.fp, "%s: %s\n", cfg_table[k].f.key, val);
    }
    if (!only_flags)
        fprintf(a.fp, "unet_layers: %d\nvol_size: %d\npoint_num: %ld\n", c->unet_layers,
                c->vol_size, c->point_num);
    return fs_atomic_commit(&a, 1);
}

/* The canonical text: one "key: value" line per key, then the options that change what a run
 * does (--restart). */
char *config_canonical(const scaffold_config *c, size_t *len) {
    size_t cap = (size_t)CFG_NKEYS * (CFG_VALUE_TEXT_MAX + 64) + 64, o = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    for (int k = 0; k < CFG_NKEYS; k++) {
        o += (size_t)snprintf(buf + o, cap - o, "%s: ", cfg_table[k].f.key);
        size_t v = config_value_text(c, k, buf + o, cap - o);
        o += v < cap - o ? v : cap - o - 1;
        o += (size_t)snprintf(buf + o, cap - o, "\n");
    }
    o += (size_t)snprintf(buf + o, cap - o, "restart: %d\n", c->restart);
    *len = o;
    return buf;
}

int config_diff_canonical(const char *mine, const char *theirs, char *msg, size_t n) {
    size_t o = 0;
    int ndiff = 0;
    msg[0] = '\0';
    const char *a = mine, *b = theirs;
    while (*a || *b) {
        const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
        size_t la = ea ? (size_t)(ea - a) : strlen(a), lb = eb ? (size_t)(eb - b) : strlen(b);
        if (la != lb || memcmp(a, b, la) != 0) {
            /* "key: value" -> "key (value here, value there)" */
            const char *ca = memchr(a, ':', la), *cb = memchr(b, ':', lb);
            int kl = ca ? (int)(ca - a) : (int)la;
            const char *va = ca ? ca + 2 : "", *vb = cb ? cb + 2 : "";
            int lva = ca ? (int)(la - (size_t)(va - a)) : 0, lvb = cb ? (int)(lb - (size_t)(vb - b)) : 0;
            if (o < n)
                o += (size_t)snprintf(msg + o, n - o, "%s%.*s (%.*s here, %.*s on rank 0)",
                                      ndiff ? ", " : "", kl, a, lva > 80 ? 80 : lva, va,
                                      lvb > 80 ? 80 : lvb, vb);
            ndiff++;
        }
        a = ea ? ea + 1 : a + la;
        b = eb ? eb + 1 : b + lb;
    }
    return ndiff;
}
