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
#include <yaml.h>

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

/* ---- meta.yaml reader: a flat view of a two-level mapping ("key" / "parent.key"), where a
 * sequence of scalars becomes "a,b,c". */

#define META_MAX 64
typedef struct meta_kv {
    char key[96];
    char val[256];
} meta_kv;

static int meta_parse(const char *path, meta_kv *kv, int *nkv) {
    int drc = yamlx_check_file(path, NULL, ERR_FORMAT);
    if (drc)
        return err_prefix("dataset metadata");
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(ERR_IO, "cannot read %s: %s", path, strerror(errno));
    yaml_parser_t p;
    yaml_parser_initialize(&p);
    yaml_parser_set_input_file(&p, f);
    char stack[2][96] = {"", ""};
    int depth = 0;       /* mapping depth */
    int expect_key[3] = {1, 1, 1};
    int in_seq = 0;
    int n = 0, rc = 0, done = 0;
    char cur[96] = "";
    while (!done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            rc = err_set(ERR_FORMAT, "%s: not valid YAML (line %zu: %s); delete this dataset "
                         "directory to regenerate it",
                         path, p.problem_mark.line + 1, p.problem ? p.problem : "?");
            break;
        }
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        case YAML_MAPPING_START_EVENT:
            if (depth >= 2) {
                rc = err_set(ERR_FORMAT, "%s: unexpected nesting", path);
                done = 1;
                break;
            }
            if (depth > 0)
                snprintf(stack[depth - 1], sizeof stack[0], "%s", cur);
            depth++;
            expect_key[depth] = 1;
            break;
        case YAML_MAPPING_END_EVENT:
            depth--;
            if (depth > 0)
                expect_key[depth] = 1;
            break;
        case YAML_SEQUENCE_START_EVENT:
            if (n < META_MAX) {
                if (depth == 2)
                    snprintf(kv[n].key, sizeof kv[n].key, "%s.%s", stack[0], cur);
                else
                    snprintf(kv[n].key, sizeof kv[n].key, "%s", cur);
                kv[n].val[0] = '\0';
            }
            in_seq = 1;
            break;
        case YAML_SEQUENCE_END_EVENT:
            in_seq = 0;
            if (n < META_MAX)
                n++;
            expect_key[depth] = 1;
            break;
        case YAML_SCALAR_EVENT: {
            const char *s = (const char *)ev.data.scalar.value;
            if (in_seq) {
                if (n < META_MAX) {
                    size_t l = strlen(kv[n].val);
                    snprintf(kv[n].val + l, sizeof kv[n].val - l, "%s%s", l ? "," : "", s);
                }
            } else if (expect_key[depth]) {
                snprintf(cur, sizeof cur, "%s", s);
                expect_key[depth] = 0;
            } else {
                if (n < META_MAX) {
                    if (depth == 2)
                        snprintf(kv[n].key, sizeof kv[n].key, "%s.%s", stack[0], cur);
                    else
                        snprintf(kv[n].key, sizeof kv[n].key, "%s", cur);
                    snprintf(kv[n].val, sizeof kv[n].val, "%s", s);
                    n++;
                }
                expect_key[depth] = 1;
            }
            break;
        }
        default:
            break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    fclose(f);
    *nkv = n;
    return rc;
}

static const char *kv_get(const meta_kv *kv, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (!strcmp(kv[i].key, key))
            return kv[i].val;
    return NULL;
}

static int kv_int(const meta_kv *kv, int n, const char *key, int *out, int required,
                  const char *path) {
    const char *s = kv_get(kv, n, key);
    if (!s) {
        if (required)
            return err_set(ERR_FORMAT, "%s: field '%s' is missing; delete this dataset directory "
                           "to regenerate it", path, key);
        *out = 0;
        return 0;
    }
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < -2147483647L || v > 2147483647L)
        return err_set(ERR_FORMAT, "%s: field '%s' is not an integer ('%s')", path, key, s);
    *out = (int)v;
    return 0;
}

static int kv_list(const meta_kv *kv, int n, const char *key, int *out, int *cnt,
                   const char *path) {
    const char *s = kv_get(kv, n, key);
    if (!s)
        return err_set(ERR_FORMAT, "%s: field '%s' is missing", path, key);
    int k = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || k >= 3)
            return err_set(ERR_FORMAT, "%s: field '%s' must be a list of up to 3 integers", path,
                           key);
        out[k++] = (int)v;
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            return err_set(ERR_FORMAT, "%s: field '%s' must be a list of integers", path, key);
    }
    *cnt = k;
    return 0;
}

int ds_meta_read(const char *path, ds_meta *m) {
    meta_kv *kv = calloc(META_MAX, sizeof *kv);
    if (!kv)
        return err_set(ERR_NOMEM, "out of memory");
    int n = 0;
    int rc = meta_parse(path, kv, &n);
    memset(m, 0, sizeof *m);
    const char *s;
    if (rc == 0) {
        s = kv_get(kv, n, "config_id");
        if (!s || strlen(s) != DS_CONFIG_ID_LEN)
            rc = err_set(ERR_FORMAT, "%s: field 'config_id' is missing or malformed", path);
        else
            snprintf(m->config_id, sizeof m->config_id, "%s", s);
    }
    if (rc == 0)
        rc = kv_int(kv, n, "dataset_format_version", &m->format_version, 1, path);
    if (rc == 0) {
        s = kv_get(kv, n, "code_commit");
        snprintf(m->code_commit, sizeof m->code_commit, "%s", s ? s : "no-commit-id");
        s = kv_get(kv, n, "created_at");
        snprintf(m->created_at, sizeof m->created_at, "%s", s ? s : "");
    }
    int cnt_n = 0, cnt_d = 0;
    if (rc == 0)
        rc = kv_list(kv, n, "config_subset.dc_num_shards", m->layout.counts, &cnt_n, path);
    if (rc == 0)
        rc = kv_list(kv, n, "config_subset.dc_shard_dims", m->layout.dims, &cnt_d, path);
    if (rc == 0 && cnt_n != cnt_d)
        rc = err_set(ERR_FORMAT, "%s: dc_num_shards and dc_shard_dims differ in length", path);
    m->layout.n = cnt_n;
    if (rc == 0)
        rc = kv_int(kv, n, "config_subset.n_categories", &m->n_categories, 1, path);
    if (rc == 0)
        rc = kv_int(kv, n, "config_subset.problem_scale", &m->problem_scale, 1, path);
    if (rc == 0)
        rc = kv_int(kv, n, "config_subset.n_fracts_per_vol", &m->n_fracts_per_vol, 1, path);
    if (rc == 0)
        rc = kv_int(kv, n, "config_subset.n_instances_used_per_fractal",
                    &m->n_instances_used_per_fractal, 1, path);
    if (rc == 0)
        rc = kv_int(kv, n, "config_subset.seed", &m->seed, 1, path);
    if (rc == 0)
        rc = kv_int(kv, n, "config_subset.val_split", &m->val_split, 1, path);
    if (rc == 0 && (s = kv_get(kv, n, "config_subset.variance_threshold")))
        m->variance_threshold = strtod(s, NULL);
    if (rc == 0)
        rc = kv_int(kv, n, "vol_size", &m->vol_size, 0, path);
    if (rc == 0)
        rc = kv_int(kv, n, "num_volumes", &m->num_volumes, 0, path);
    if (rc == 0)
        rc = kv_int(kv, n, "n_train", &m->n_train, 0, path);
    if (rc == 0)
        rc = kv_int(kv, n, "n_val", &m->n_val, 0, path);
    if (rc == 0 && (m->problem_scale < 1 || m->problem_scale > 16))
        rc = err_set(ERR_FORMAT, "%s: problem_scale %d is out of range", path, m->problem_scale);
    if (rc == 0 && !m->vol_size)
        m->vol_size = 1 << m->problem_scale;
    if (rc == 0 && m->vol_size != 1 << m->problem_scale)
        rc = err_set(ERR_FORMAT, "%s: vol_size %d does not match problem_scale %d", path,
                     m->vol_size, m->problem_scale);
    if (rc == 0 && (m->n_categories < 1 || m->n_categories > 65535))
        rc = err_set(ERR_FORMAT, "%s: n_categories %d is out of range", path, m->n_categories);
    if (rc == 0)
        rc = ds_layout_check(&m->layout, m->vol_size, ERR_FORMAT, path);
    free(kv);
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
