/* Unit tests for src/core/config: defaults, files, overrides, flags, validation, YAML output. */
#include "core/config.h"
#include "core/err.h"
#include "core/fsutil.h"
#include "core/yamlx.h"
#include "test.h"

#include <string.h>
#include <time.h>

static void write(const char *path, const char *txt) {
    fs_write_file(path, txt, strlen(txt), 0);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* "k: " and `lists` nested empty lists: a document `lists` + 1 collections deep. */
static const char *nested(char *buf, size_t n, int lists) {
    size_t o = (size_t)snprintf(buf, n, "k: ");
    for (int i = 0; i < lists && o + 2 < n; i++)
        buf[o++] = '[';
    for (int i = 0; i < lists && o + 1 < n; i++)
        buf[o++] = ']';
    buf[o] = '\0';
    return buf;
}

/* The checks of yamlx_load_text on `txt` (labelled "t"): 0 or the error code. */
static int check_text(const char *txt, size_t n) {
    yamlx_doc d;
    int rc = yamlx_load_text(&d, txt, n, "t", ERR_CONFIG);
    if (rc == 0)
        yamlx_free(&d);
    return rc;
}

/* config_load_file on `txt`: its return code, and its time in *secs. */
static int load_timed(scaffold_config *c, const char *path, const char *txt, double *secs) {
    write(path, txt);
    config_defaults(c);
    double t0 = now_s();
    int rc = config_load_file(c, path);
    *secs = now_s() - t0;
    return rc;
}

int main(void) {
    char dir[] = "/tmp/scaffold-cfg-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char base[256], over[256], out[256], bad[256];
    snprintf(base, sizeof base, "%s/base.yml", dir);
    snprintf(over, sizeof over, "%s/over.yml", dir);
    snprintf(out, sizeof out, "%s/out.yml", dir);
    snprintf(bad, sizeof bad, "%s/bad.yml", dir);
    write(base, "problem_scale: 6\nn_categories: 4\nseed: 7\nstarting_learning_rate: 0.002\n"
                "dc_num_shards: [2, 1, 1]\noptimizer: \"SGD\"\n");
    write(over, "n_categories: 3\nT_0: 5\n");

    scaffold_config c;
    config_defaults(&c);
    CHECK(c.problem_scale == 7 && c.n_categories == 5 && c.T_0 == 10 && c.seed == 42, "defaults");
    CHECK(!strcmp(c.optimizer, "ADAM") && c.target_dice == 0.95, "string/float defaults");

    char *argv1[] = {"benchmark", "-c", base, "--seed", "9", "-c", over, "--T-0=3", NULL};
    int rc = config_parse_args(&c, 8, argv1, 1);
    CHECK(rc == 0, "parse: %s", err_msg());
    CHECK(c.problem_scale == 6, "file value (%d)", c.problem_scale);
    CHECK(c.n_categories == 3, "later file overrides (%d)", c.n_categories);
    CHECK(c.seed == 9, "flag beats file even before a later -c (%d)", c.seed);
    CHECK(c.T_0 == 3, "--T-0=3 (%d)", c.T_0);
    CHECK(c.dc_num_shards.n == 3 && c.dc_num_shards.v[0] == 2, "list from file");
    CHECK(c.starting_learning_rate == 0.002, "float from file");
    CHECK(config_finalize(&c) == 0, "finalize: %s", err_msg());
    CHECK(c.vol_size == 64 && c.point_num == 1024 && c.unet_layers == 3, "derived %d %ld %d",
          c.vol_size, c.point_num, c.unet_layers);
    CHECK(config_optimizer(&c) == CFG_OPT_SGD, "optimizer enum");

    /* Written YAML reloads to the same values. */
    CHECK(config_write_yaml(&c, out, 0) == 0, "write yaml: %s", err_msg());
    scaffold_config d;
    config_defaults(&d);
    CHECK(config_load_file(&d, out) == 0, "reload own config.yaml: %s", err_msg());
    CHECK(d.seed == 9 && d.T_0 == 3 && d.starting_learning_rate == 0.002 &&
              d.dc_num_shards.v[0] == 2 && !strcmp(d.optimizer, "SGD"),
          "round trip");

    /* List flags take 3 values. */
    config_defaults(&c);
    char *argv2[] = {"benchmark", "-c", base, "--dc-num-shards", "1", "2", "1", NULL};
    CHECK(config_parse_args(&c, 7, argv2, 1) == 0 && c.dc_num_shards.v[1] == 2, "list flag: %s",
          err_msg());

    /* Validation errors name the file and key. */
    write(bad, "unet_bottleneck_dim: 9\n");
    config_defaults(&c);
    char *argv3[] = {"benchmark", "-c", bad, NULL};
    CHECK(config_parse_args(&c, 3, argv3, 1) == 0, "parse");
    rc = config_finalize(&c);
    CHECK(rc == ERR_CONFIG && strstr(err_msg(), "bad.yml: key 'unet_bottleneck_dim'"), "range: %s",
          err_msg());
    write(bad, "dc_shard_dims: [2, 2, 4]\n");
    config_defaults(&c);
    CHECK(config_load_file(&c, bad) == 0 && config_finalize(&c) == ERR_CONFIG &&
              strstr(err_msg(), "unique"),
          "unique dims: %s", err_msg());
    write(bad, "optimizer: LBFGS\n");
    config_defaults(&c);
    CHECK(config_load_file(&c, bad) == 0 && config_finalize(&c) == ERR_CONFIG, "optimizer");
    write(bad, "- a\n- b\n");
    CHECK(config_load_file(&c, bad) == ERR_CONFIG && strstr(err_msg(), "mapping"), "not a map");
    /* A key given twice is refused, naming both lines (it used to keep the last silently). */
    write(bad, "seed: 1\nproblem_scale: 5\nseed: 2\n");
    CHECK(config_load_file(&c, bad) == ERR_CONFIG &&
              strstr(err_msg(), "bad.yml: key 'seed' appears twice in one mapping (lines 1 and 3)"),
          "duplicate key: %s", err_msg());
    /* A channel count that the groups do not divide: blamed on the key the user set, in its
     * file (it blamed "the default of group_norm_groups"). */
    write(bad, "unet_base_channels: 7\n");
    config_defaults(&c);
    CHECK(config_parse_args(&c, 3, argv3, 1) == 0 && config_finalize(&c) == ERR_CONFIG &&
              strstr(err_msg(), "bad.yml: key 'unet_base_channels': 7 is not a multiple of "
                                "group_norm_groups (8, the default)") &&
              !strstr(err_msg(), "default of key"),
          "base channels vs default groups: %s", err_msg());
    write(bad, "group_norm_groups: 5\n");
    config_defaults(&c);
    CHECK(config_parse_args(&c, 3, argv3, 1) == 0 && config_finalize(&c) == ERR_CONFIG &&
              strstr(err_msg(), "bad.yml: key 'group_norm_groups': 5 does not divide "
                                "unet_base_channels"),
          "groups vs default channels: %s", err_msg());
    write(bad, "group_norm_groups: 5\nunet_base_channels: 12\n");
    config_defaults(&c);
    CHECK(config_parse_args(&c, 3, argv3, 1) == 0 && config_finalize(&c) == ERR_CONFIG &&
              strstr(err_msg(), "key 'unet_base_channels': 12") &&
              strstr(err_msg(), "from ") && strstr(err_msg(), "key 'group_norm_groups'"),
          "both set: both named: %s", err_msg());
    /* An empty job name says so. */
    write(bad, "job_name: \"\"\n");
    config_defaults(&c);
    CHECK(config_load_file(&c, bad) == 0 && config_finalize(&c) == ERR_CONFIG &&
              strstr(err_msg(), "key 'job_name' is empty") && !strstr(err_msg(), "'/'"),
          "empty job_name: %s", err_msg());
    write(bad, "seed: 1\n  x: : [\n");
    CHECK(config_load_file(&c, bad) == ERR_CONFIG && strstr(err_msg(), "YAML"), "syntax: %s",
          err_msg());
    write(bad, "dataset_num_shards: [1,1,1]\n");
    CHECK(config_load_file(&c, bad) == ERR_CONFIG && strstr(err_msg(), "dc_num_shards"),
          "legacy key");
    write(bad, "seed: \"42\"\n");
    CHECK(config_load_file(&c, bad) == ERR_CONFIG && strstr(err_msg(), "integer"),
          "quoted number is a string");
    write(bad, "vol_size: 128\nmachine_name: \"x\"\nscheduler_metadata: {a: 1}\n");
    CHECK(config_load_file(&c, bad) == 0, "aux keys accepted: %s", err_msg());
    write(bad, "");
    CHECK(config_load_file(&c, bad) == 0, "empty override file");

    /* Aliases are shared nodes: the reader must not walk them as a tree. The fuzzer's input (now
     * tests/fuzz/corpus/config/recursive_alias.yml): a mapping anchored &s holding aliases to
     * itself; the duplicate-key check followed every alias to a depth of 64, 2^64 steps, a hang.
     * Each of these is one clear error naming the file and line, in well under a second (a
     * sanitizer build included). */
    double secs;
    rc = load_timed(&c, bad, "&s\ne: *s\ns: *s", &secs);
    CHECK(rc == ERR_CONFIG && strstr(err_msg(), "bad.yml:1: recursive alias: this mapping "
                                                "contains an alias to itself"),
          "recursive alias (root): %d %s", rc, err_msg());
    CHECK(secs < 1.0, "recursive alias refused in %.3f s", secs);
    rc = load_timed(&c, bad, "seed: 1\nk: &a [*a, *a]\n", &secs);
    CHECK(rc == ERR_CONFIG && strstr(err_msg(), "bad.yml:2: recursive alias: this list"),
          "recursive alias (list): %d %s", rc, err_msg());
    CHECK(secs < 1.0, "recursive list alias refused in %.3f s", secs);
    /* Billion laughs: 40 anchors, each naming the previous one twice (2^40 nodes as a tree). */
    char bomb[2048];
    size_t o = (size_t)snprintf(bomb, sizeof bomb, "a0: &a0 [x, x]\n");
    for (int i = 1; i < 40; i++)
        o += (size_t)snprintf(bomb + o, sizeof bomb - o, "a%d: &a%d [*a%d, *a%d]\n", i, i, i - 1,
                              i - 1);
    rc = load_timed(&c, bad, bomb, &secs);
    CHECK(rc == ERR_CONFIG && strstr(err_msg(), "bad.yml:16: aliases expand this list to more "
                                                "than ") && strstr(err_msg(), "alias bomb"),
          "alias bomb: %d %s", rc, err_msg());
    CHECK(secs < 1.0, "alias bomb refused in %.3f s", secs);
    /* Nesting: 64 levels (the root mapping and 63 lists) pass the check, 65 are refused (the
     * harness's deep_nesting.yml has 71). */
    char deep[512];
    rc = load_timed(&c, bad, nested(deep, sizeof deep, 64), &secs);
    CHECK(rc == ERR_CONFIG && strstr(err_msg(), "bad.yml:1: collections nested deeper than 64 "
                                                "levels"),
          "deep nesting: %d %s", rc, err_msg());
    CHECK(secs < 1.0, "deep nesting refused in %.3f s", secs);
    nested(deep, sizeof deep, 63);
    CHECK(check_text(deep, strlen(deep)) == 0, "64 levels accepted: %s",
          err_msg());
    /* The depth counts through aliases: 40 lists anchored, then named under 30 more. */
    o = (size_t)snprintf(deep, sizeof deep, "a: &d ");
    for (int i = 0; i < 40; i++)
        deep[o++] = '[';
    for (int i = 0; i < 40; i++)
        deep[o++] = ']';
    o += (size_t)snprintf(deep + o, sizeof deep - o, "\nb: ");
    for (int i = 0; i < 30; i++)
        deep[o++] = '[';
    o += (size_t)snprintf(deep + o, sizeof deep - o, "*d");
    for (int i = 0; i < 30; i++)
        deep[o++] = ']';
    deep[o] = '\0';
    CHECK(check_text(deep, o) == ERR_CONFIG &&
              strstr(err_msg(), "t:1: collections nested deeper than 64 levels"),
          "deep through an alias: %s", err_msg());
    /* Ordinary aliases still load: a scalar and a list, each named twice. */
    rc = load_timed(&c, bad, "seed: &s 7\nn_categories: *s\ndc_num_shards: &l [2, 1, 1]\n"
                             "dc_shard_dims: [2, 3, 4]\nscheduler_metadata: {a: *l, b: *l}\n",
                    &secs);
    CHECK(rc == 0 && c.seed == 7 && c.n_categories == 7 && c.dc_num_shards.v[0] == 2,
          "shared aliases: %s", err_msg());
    /* Duplicates are found by sorting the keys: a mapping of 20000 keys is checked in linear-
     * logarithmic time, and the pair named is the one a scan in document order meets first. */
    size_t cap = 20000 * 16 + 64;
    char *many = malloc(cap);
    if (!many)
        return 1;
    o = 0;
    for (int i = 0; i < 20000; i++)
        o += (size_t)snprintf(many + o, cap - o, "k%d: %d\n", 19999 - i, i);
    snprintf(many + o, cap - o, "k5: x\nk7: y\n");
    rc = load_timed(&c, bad, many, &secs);
    CHECK(rc == ERR_CONFIG && strstr(err_msg(), "key 'k5' appears twice in one mapping (lines "
                                                "19995 and 20001)"),
          "duplicate among many keys: %s", err_msg());
    CHECK(secs < 1.0, "20000 keys checked in %.3f s", secs);
    free(many);
    rc = load_timed(&c, bad, "a: 1\nb: 1\nb: 2\na: 2\n", &secs);
    CHECK(rc == ERR_CONFIG && strstr(err_msg(), "key 'b' appears twice in one mapping (lines 2 "
                                                "and 3)"),
          "first duplicate in document order: %s", err_msg());

    /* Canonical text and its diff (the rank agreement of the merged configuration). */
    scaffold_config e;
    config_defaults(&c);
    config_defaults(&e);
    e.seed = 7;
    e.local_batch_size = 2;
    snprintf(e.dataset_dir, sizeof e.dataset_dir, "/other/datasets");
    size_t la, lb;
    char *ta = config_canonical(&c, &la), *tb = config_canonical(&e, &lb);
    char msg[1024];
    CHECK(ta && tb && config_diff_canonical(ta, ta, msg, sizeof msg) == 0 && !msg[0],
          "same text: no difference");
    int nd = config_diff_canonical(tb, ta, msg, sizeof msg);
    CHECK(nd == 3 && strstr(msg, "seed (7 here, 42 on rank 0)") &&
              strstr(msg, "local_batch_size (2 here, 1 on rank 0)") &&
              strstr(msg, "dataset_dir (\"/other/datasets\" here, \"datasets\" on rank 0)"),
          "differing keys named (%d): %s", nd, msg);
    free(tb);
    e = c;
    e.restart = 1;
    tb = config_canonical(&e, &lb);
    CHECK(config_diff_canonical(tb, ta, msg, sizeof msg) == 1 && strstr(msg, "restart (1 here"),
          "--restart is part of the text: %s", msg);
    free(ta);
    free(tb);
    char val[CFG_VALUE_TEXT_MAX];
    config_value_text(&c, CFG_K_dc_num_shards, val, sizeof val);
    CHECK(!strcmp(val, "[1, 1, 1]") && !strcmp(config_key_name(CFG_K_seed), "seed"),
          "value text %s", val);

    /* Python float formatting. */
    char b[64];
    CHECK(!strcmp(config_pyfloat(0.15, b, sizeof b), "0.15"), "0.15 -> %s", b);
    CHECK(!strcmp(config_pyfloat(1.0, b, sizeof b), "1.0"), "1.0 -> %s", b);
    CHECK(!strcmp(config_pyfloat(1e-5, b, sizeof b), "1e-05"), "1e-05 -> %s", b);
    CHECK(!strcmp(config_pyfloat(0.0001, b, sizeof b), "0.0001"), "0.0001 -> %s", b);
    CHECK(!strcmp(config_pyfloat(123.5, b, sizeof b), "123.5"), "123.5 -> %s", b);
    CHECK(!strcmp(config_pyfloat(1e16, b, sizeof b), "1e+16"), "1e16 -> %s", b);
    CHECK(!strcmp(config_pyfloat(0.1 + 0.2, b, sizeof b), "0.30000000000000004"), "0.1+0.2 -> %s",
          b);
    fs_rm_rf(dir);
    return test_report();
}
