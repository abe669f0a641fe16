/* cache: config_id, meta.yaml, lookup of the newest matching dataset, staging directories
 * (see cache.h). */
#include "dataset/cache.h"

#include "core/err.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/sha256.h"
#include "core/yamlx.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *const ds_include_keys[] = {
    "dataset_format_version", "n_categories", "n_instances_used_per_fractal", "problem_scale",
    "seed", "variance_threshold", "n_fracts_per_vol", "val_split", "dc_num_shards",
    "dc_shard_dims"};
#define DS_NINCLUDE (sizeof ds_include_keys / sizeof ds_include_keys[0])

static size_t put_list(char *buf, size_t n, size_t o, const int *v, int k) {
    o += (size_t)snprintf(buf + (o < n ? o : n), o < n ? n - o : 0, "[");
    for (int i = 0; i < k; i++)
        o += (size_t)snprintf(buf + (o < n ? o : n), o < n ? n - o : 0, i ? ",%d" : "%d", v[i]);
    o += (size_t)snprintf(buf + (o < n ? o : n), o < n ? n - o : 0, "]");
    return o;
}

int ds_config_json(const ds_spec *c, char *buf, size_t n) {
    ds_layout k = ds_layout_canonical(&c->layout);
    char vt[64];
    config_pyfloat(c->variance_threshold, vt, sizeof vt);
    /* Keys in sorted order (sort_keys=True). */
    size_t o = (size_t)snprintf(buf, n, "{\"dataset_format_version\":%d,\"dc_num_shards\":",
                                DS_FORMAT_VERSION);
    o = put_list(buf, n, o, k.counts, k.n);
    o += (size_t)snprintf(buf + (o < n ? o : n), o < n ? n - o : 0, ",\"dc_shard_dims\":");
    o = put_list(buf, n, o, k.dims, k.n);
    o += (size_t)snprintf(buf + (o < n ? o : n), o < n ? n - o : 0,
                          ",\"n_categories\":%d,\"n_fracts_per_vol\":%d,"
                          "\"n_instances_used_per_fractal\":%d,\"problem_scale\":%d,\"seed\":%d,"
                          "\"val_split\":%d,\"variance_threshold\":%s}",
                          c->n_categories, c->n_fracts_per_vol, c->n_instances_used_per_fractal,
                          c->problem_scale, c->seed, c->val_split, vt);
    if (o >= n)
        return err_set(ERR_RANGE, "dataset config JSON longer than %zu bytes", n);
    return (int)o;
}

void ds_config_id(const ds_spec *c, char id[DS_CONFIG_ID_LEN + 1]) {
    char json[1024], hex[65];
    unsigned char d[SHA256_DIGEST_LEN];
    int len = ds_config_json(c, json, sizeof json);
    sha256(json, len > 0 ? (size_t)len : 0, d);
    sha256_hex(d, hex);
    memcpy(id, hex, DS_CONFIG_ID_LEN);
    id[DS_CONFIG_ID_LEN] = '\0';
}

static void utc_iso(char *buf, size_t n) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char s[32];
    strftime(s, sizeof s, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, n, "%s.%06ld+00:00", s, ts.tv_nsec / 1000);
}

static void write_int_list(FILE *f, const int *v, int n) {
    fputc('[', f);
    for (int i = 0; i < n; i++)
        fprintf(f, i ? ", %d" : "%d", v[i]);
    fputc(']', f);
}

int ds_meta_write(const char *path, const ds_spec *c, int num_volumes, int n_train,
                  int n_val, const int *train_vals, int n_train_vals, const int *val_vals,
                  int n_val_vals) {
    char id[DS_CONFIG_ID_LEN + 1], vt[64], when[64];
    ds_config_id(c, id);
    utc_iso(when, sizeof when);
    fs_atomic a;
    int rc = fs_atomic_open(&a, path);
    if (rc)
        return rc;
    FILE *f = a.fp;
    fprintf(f, "config_id: '%s'\n", id);
    fprintf(f, "dataset_format_version: %d\n", DS_FORMAT_VERSION);
    fprintf(f, "config_subset:\n");
    fprintf(f, "  dataset_format_version: %d\n", DS_FORMAT_VERSION);
    fprintf(f, "  n_categories: %d\n", c->n_categories);
    fprintf(f, "  n_instances_used_per_fractal: %d\n", c->n_instances_used_per_fractal);
    fprintf(f, "  problem_scale: %d\n", c->problem_scale);
    fprintf(f, "  seed: %d\n", c->seed);
    fprintf(f, "  variance_threshold: %s\n", config_pyfloat(c->variance_threshold, vt, sizeof vt));
    fprintf(f, "  n_fracts_per_vol: %d\n", c->n_fracts_per_vol);
    fprintf(f, "  val_split: %d\n", c->val_split);
    fprintf(f, "  dc_num_shards: ");
    write_int_list(f, c->layout.counts, c->layout.n);
    fprintf(f, "\n  dc_shard_dims: ");
    write_int_list(f, c->layout.dims, c->layout.n);
    fprintf(f, "\ninclude_keys:\n");
    for (size_t i = 0; i < DS_NINCLUDE; i++)
        fprintf(f, "- %s\n", ds_include_keys[i]);
    fprintf(f, "code_commit: %s\n", DS_CODE_VERSION);
    fprintf(f, "created_at: '%s'\n", when);
    fprintf(f, "vol_size: %d\n", c->vol_size);
    fprintf(f, "num_volumes: %d\n", num_volumes);
    fprintf(f, "n_train: %d\n", n_train);
    fprintf(f, "n_val: %d\n", n_val);
    fprintf(f, "train_mask_values: ");
    write_int_list(f, train_vals, n_train_vals);
    fprintf(f, "\nval_mask_values: ");
    write_int_list(f, val_vals, n_val_vals);
    fputc('\n', f);
    return fs_atomic_commit(&a, 0);
}

/* ---- meta.yaml reader */

typedef struct {
    int n, v[3];
} meta_ints;

typedef struct {
    ds_meta m;
    yaml_node_t *subset;
    meta_ints counts, dims;
} meta_doc;

#define META(k) YAMLX_AT(meta_doc, m.k)
static const yamlx_field meta_fields[] = {
    {"config_id", YAMLX_STR, META(config_id), .flags = YAMLX_REQUIRED},
    {"dataset_format_version", YAMLX_INT, META(format_version), .flags = YAMLX_REQUIRED},
    {"code_commit", YAMLX_STR, META(code_commit), .flags = YAMLX_CUT},
    {"created_at", YAMLX_STR, META(created_at), .flags = YAMLX_CUT},
    {"vol_size", YAMLX_INT, META(vol_size)},
    {"num_volumes", YAMLX_INT, META(num_volumes)},
    {"n_train", YAMLX_INT, META(n_train)},
    {"n_val", YAMLX_INT, META(n_val)},
    {"config_subset", YAMLX_MAP, YAMLX_AT(meta_doc, subset), .flags = YAMLX_REQUIRED},
};
static const yamlx_field subset_fields[] = {
    {"n_categories", YAMLX_INT, META(n_categories), .min = 1, .max = 65535,
     .flags = YAMLX_REQUIRED},
    {"problem_scale", YAMLX_INT, META(problem_scale), .min = 1, .max = 16,
     .flags = YAMLX_REQUIRED},
    {"n_fracts_per_vol", YAMLX_INT, META(n_fracts_per_vol), .flags = YAMLX_REQUIRED},
    {"n_instances_used_per_fractal", YAMLX_INT, META(n_instances_used_per_fractal),
     .flags = YAMLX_REQUIRED},
    {"seed", YAMLX_INT, META(seed), .flags = YAMLX_REQUIRED},
    {"val_split", YAMLX_INT, META(val_split), .flags = YAMLX_REQUIRED},
    {"variance_threshold", YAMLX_DOUBLE, META(variance_threshold)},
    {"dc_num_shards", YAMLX_INTS, YAMLX_AT(meta_doc, counts), .flags = YAMLX_REQUIRED},
    {"dc_shard_dims", YAMLX_INTS, YAMLX_AT(meta_doc, dims), .flags = YAMLX_REQUIRED},
};

static int meta_check(const char *path, ds_meta *m, const meta_doc *r) {
    *m = r->m;
    if (strlen(m->config_id) != DS_CONFIG_ID_LEN)
        return err_set(ERR_FORMAT, "%s: config_id '%s' is not %d characters long", path,
                       m->config_id, DS_CONFIG_ID_LEN);
    if (r->counts.n != r->dims.n)
        return err_set(ERR_FORMAT, "%s: dc_num_shards and dc_shard_dims differ in length", path);
    m->layout.n = r->counts.n;
    memcpy(m->layout.counts, r->counts.v, sizeof r->counts.v);
    memcpy(m->layout.dims, r->dims.v, sizeof r->dims.v);
    if (!m->vol_size)
        m->vol_size = 1 << m->problem_scale;
    if (m->vol_size != 1 << m->problem_scale)
        return err_set(ERR_FORMAT, "%s: vol_size %d does not match problem_scale %d", path,
                       m->vol_size, m->problem_scale);
    return ds_layout_check(&m->layout, m->vol_size, ERR_FORMAT, path);
}

int ds_meta_read(const char *path, ds_meta *m) {
    meta_doc r;
    memset(&r, 0, sizeof r);
    memset(m, 0, sizeof *m);
    snprintf(r.m.code_commit, sizeof r.m.code_commit, "no-commit-id");
    yamlx_doc d;
    int rc = yamlx_load_file(&d, path, "dataset metadata", ERR_FORMAT);
    if (rc == 0) {
        rc = yamlx_map_read(&d, yamlx_root(&d), meta_fields, YAMLX_N(meta_fields), &r, NULL, 0);
        if (rc == 0)
            rc = yamlx_map_read(&d, r.subset, subset_fields, YAMLX_N(subset_fields), &r,
                                "config_subset", 0);
        yamlx_free(&d);
    }
    if (rc == 0)
        rc = meta_check(path, m, &r);
    if (rc && rc != ERR_NOMEM) {
        char why[ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", err_msg());
        rc = err_set(rc, "%s; delete this dataset directory to regenerate it", why);
    }
    return rc;
}

/* ---- lookup, pruning, staging */

int ds_cache_find(const char *cfgdir, const char *config_id, const char *commit, char *out,
                  size_t n) {
    DIR *d = opendir(cfgdir);
    if (!d) {
        if (errno == ENOENT)
            return 0;
        return err_set(ERR_IO, "cannot list %s: %s", cfgdir, strerror(errno));
    }
    char best_when[64] = "", best_name[256] = "";
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue; /* ".", "..", staging directories */
        char dir[FS_PATH_MAX], meta[FS_PATH_MAX];
        snprintf(dir, sizeof dir, "%s/%s", cfgdir, e->d_name);
        if (!fs_is_dir(dir))
            continue;
        snprintf(meta, sizeof meta, "%s/meta.yaml", dir);
        ds_meta m;
        if (ds_meta_read(meta, &m)) {
            log_warn("skipping cached dataset %s: %s", dir, err_msg());
            err_clear();
            continue;
        }
        if (strcmp(m.config_id, config_id) || m.format_version != DS_FORMAT_VERSION)
            continue;
        if (commit && strcmp(m.code_commit, commit))
            continue;
        int newer = !found || strcmp(m.created_at, best_when) > 0 ||
                    (strcmp(m.created_at, best_when) == 0 && strcmp(e->d_name, best_name) > 0);
        if (newer) {
            found = 1;
            snprintf(best_when, sizeof best_when, "%s", m.created_at);
            snprintf(best_name, sizeof best_name, "%s", e->d_name);
        }
    }
    closedir(d);
    if (found)
        snprintf(out, n, "%s/%s", cfgdir, best_name);
    return found;
}

void ds_cache_claim_path(const char *cfgdir, char *buf, size_t n) {
    snprintf(buf, n, "%s/.claim", cfgdir);
}

int ds_cache_has_staging(const char *cfgdir) {
    DIR *d = opendir(cfgdir);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d)))
        found = !strncmp(e->d_name, ".tmp_", 5);
    closedir(d);
    return found;
}

int ds_cache_remove_staging(const char *cfgdir, int *removed) {
    *removed = 0;
    DIR *d = opendir(cfgdir);
    if (!d)
        return errno == ENOENT ? 0 : err_set(ERR_IO, "cannot list %s: %s", cfgdir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, ".tmp_", 5))
            continue;
        char dir[FS_PATH_MAX];
        snprintf(dir, sizeof dir, "%s/%s", cfgdir, e->d_name);
        if (fs_rm_rf(dir) == 0) {
            (*removed)++;
            log_info("removed %s, left by a dataset generation that is gone", dir);
        } else {
            log_warn("cannot remove the staging directory %s: %s", dir, err_msg());
            err_clear();
        }
    }
    closedir(d);
    return 0;
}

static void stamp(char *buf, size_t n, time_t t) {
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(buf, n, "%Y%m%d-%H%M%S", &tm);
}

int ds_cache_make_staging(const char *cfgdir, char *out, size_t n) {
    int rc = fs_mkdir_p(cfgdir);
    if (rc)
        return rc;
    char ts[32];
    stamp(ts, sizeof ts, time(NULL));
    uint64_t r = rng_mix64((uint64_t)time_unix_us() ^ ((uint64_t)getpid() << 32));
    for (int attempt = 0; attempt < 16; attempt++) {
        snprintf(out, n, "%s/.tmp_%s_%ld_%08x", cfgdir, ts, (long)getpid(),
                 (unsigned)(rng_mix64(r + (uint64_t)attempt) & 0xffffffffu));
        if (mkdir(out, 0777) == 0)
            return 0;
        if (errno != EEXIST)
            return err_set(ERR_IO, "cannot create directory %s: %s", out, strerror(errno));
    }
    return err_set(ERR_IO, "cannot create a staging directory in %s", cfgdir);
}

int ds_cache_publish(const char *staging, const char *cfgdir, char *out, size_t n) {
    /* One syncfs for the whole dataset instead of an fsync per file: the rename below must not
     * become durable before the data it names. */
    int fd = open(staging, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        if (syncfs(fd) != 0)
            log_warn("syncfs(%s): %s", staging, strerror(errno));
        close(fd);
    }
    for (int attempt = 0; attempt < 5; attempt++) {
        char ts[32];
        stamp(ts, sizeof ts, time(NULL));
        snprintf(out, n, "%s/%s__%s", cfgdir, ts, DS_CODE_VERSION);
        /* renameat2(RENAME_NOREPLACE) semantics via a check: rename() onto an existing empty
         * directory would succeed, so refuse any existing name. Only rank 0 publishes. */
        if (!fs_exists(out)) {
            if (rename(staging, out) == 0)
                return 0;
            if (errno != EEXIST && errno != ENOTEMPTY)
                return err_set(ERR_IO, "cannot rename %s to %s: %s", staging, out,
                               strerror(errno));
        }
        sleep(1); /* two datasets finished within the same second: take the next one */
    }
    return err_set(ERR_IO, "cannot publish %s: %s exists", staging, out);
}
