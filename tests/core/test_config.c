/* Unit tests for src/core/config: defaults, files, overrides, flags, validation, YAML output. */
#include "core/config.h"
#include "core/err.h"
#include "core/fsutil.h"
#include "test.h"

#include <string.h>

static void write(const char *path, const char *txt) {
    fs_write_file(path, txt, strlen(txt), 0);
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
