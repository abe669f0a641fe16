/* Unit tests of the dataset module's pure parts: SHA-256, config_id, shard layout, samplers,
 * composition plan, voxelisation, CE-weight indices. */
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"
#include "mpi/dist.h"
#include "core/sha256.h"
#include "dataset/cache.h"
#include "dataset/compose.h"
#include "dataset/dataset.h"
#include "dataset/layout.h"
#include "dataset/loader.h"
#include "dataset/render.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static void hex_of(const void *data, size_t n, char *hex) {
    unsigned char d[SHA256_DIGEST_LEN];
    sha256(data, n, d);
    sha256_hex(d, hex);
}

static void test_sha256(void) {
    char hex[65];
    hex_of("", 0, hex);
    CHECK(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "%s",
          hex);
    hex_of("abc", 3, hex);
    CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "%s",
          hex);
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of(m, strlen(m), hex);
    CHECK(!strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"), "%s",
          hex);
    /* One million 'a' fed in odd-sized pieces (exercises the buffering). */
    sha256_ctx c;
    sha256_init(&c);
    char a[997];
    memset(a, 'a', sizeof a);
    size_t left = 1000000;
    while (left) {
        size_t k = left < sizeof a ? left : sizeof a;
        sha256_update(&c, a, k);
        left -= k;
    }
    unsigned char d[32];
    sha256_final(&c, d);
    sha256_hex(d, hex);
    CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"), "%s",
          hex);
}

/* The dataset code takes its own spec; these tests vary configurations. */
static void cfg_id(const scaffold_config *c, char *id) {
    ds_spec sp = ds_spec_of(c);
    ds_config_id(&sp, id);
}

static int cfg_plan(const scaffold_config *c, ds_plan *p) {
    ds_spec sp = ds_spec_of(c);
    return ds_plan_make(&sp, p);
}

static void test_config_id(void) {
    scaffold_config c;
    config_defaults(&c);
    CHECK(config_finalize(&c) == 0, "%s", err_msg());
    char json[1024], id[16];
    ds_spec sp = ds_spec_of(&c);
    ds_config_json(&sp, json, sizeof json);
    CHECK(!strcmp(json, "{\"dataset_format_version\":5,\"dc_num_shards\":[1,1,1],\"dc_shard_dims\""
                        ":[2,3,4],\"n_categories\":5,\"n_fracts_per_vol\":3,\"n_instances_used_"
                        "per_fractal\":145,\"problem_scale\":7,\"seed\":42,\"val_split\":30,"
                        "\"variance_threshold\":0.15}"),
          "%s", json);
    cfg_id(&c, id);
    CHECK(!strcmp(id, "18d3c8efe010"), "default config_id %s (upstream: 18d3c8efe010)", id);
    /* Layout canonicalisation: [1,2,1] over [3,2,4] == [2,1,1] over [2,3,4]. */
    scaffold_config a = c, b = c;
    a.dc_num_shards = (cfg_list){3, {2, 1, 1}};
    b.dc_num_shards = (cfg_list){3, {1, 2, 1}};
    b.dc_shard_dims = (cfg_list){3, {3, 2, 4}};
    char ia[16], ib[16];
    cfg_id(&a, ia);
    cfg_id(&b, ib);
    CHECK(!strcmp(ia, ib) && strcmp(ia, id), "canonical layout ids %s %s", ia, ib);
    /* Every include key changes the id; a non-include key does not. */
    scaffold_config t = c;
    t.seed = 43;
    cfg_id(&t, ia);
    CHECK(strcmp(ia, id), "seed changes config_id");
    t = c;
    t.variance_threshold = 0.2;
    cfg_id(&t, ia);
    CHECK(strcmp(ia, id), "variance_threshold changes config_id");
    t = c;
    t.epochs = 7;
    t.local_batch_size = 4;
    cfg_id(&t, ia);
    CHECK(!strcmp(ia, id), "epochs/local_batch_size do not change config_id");
}

static void test_layout(void) {
    int64_t s, e;
    CHECK(ds_chunk(32, 3, 0, &s, &e) == 0 && s == 0 && e == 11, "chunk 0: %lld %lld",
          (long long)s, (long long)e);
    CHECK(ds_chunk(32, 3, 2, &s, &e) == 0 && s == 22 && e == 32, "chunk 2: %lld %lld",
          (long long)s, (long long)e);
    CHECK(ds_chunk(4, 3, 2, &s, &e) == ERR_RANGE, "torch.chunk: 4 over 3 has an empty chunk");
    ds_layout l = {3, {2, 3, 4}, {2, 2, 1}};
    CHECK(ds_layout_total(&l) == 4, "total");
    for (int id = 0; id < 4; id++) {
        int idx[3], back = -1;
        ds_layout_indices(&l, id, idx);
        CHECK(ds_layout_id(&l, idx, &back) == 0 && back == id, "id round trip %d -> %d", id,
              back);
    }
    int idx[3];
    ds_layout_indices(&l, 1, idx); /* row-major: the last sharded dim varies fastest */
    CHECK(idx[0] == 0 && idx[1] == 1 && idx[2] == 0, "id 1 -> (%d,%d,%d)", idx[0], idx[1],
          idx[2]);
    ds_layout r = {3, {3, 2, 4}, {2, 2, 1}}; /* same counts, other order */
    CHECK(ds_layout_equivalent(&l, &r), "equivalent layouts");
    int id_l, id_r;
    int pos[3] = {1, 0, 0};
    ds_layout_id(&l, pos, &id_l);
    ds_layout_id(&r, pos, &id_r);
    CHECK(id_l == 2 && id_r == 1, "ids follow the layout order: %d %d", id_l, id_r);
    int64_t st[3], sp[3];
    CHECK(ds_layout_region(&l, 32, 3, st, sp) == 0 && st[0] == 16 && st[1] == 16 && st[2] == 0 &&
              sp[0] == 32 && sp[1] == 32 && sp[2] == 32,
          "region of shard 3");
    int bad[3] = {0, 0, 1};
    CHECK(ds_layout_id(&l, bad, &id_l) == ERR_RANGE, "index on an unsharded axis");
    ds_layout dup = {2, {2, 2, 0}, {1, 1, 0}};
    CHECK(ds_layout_check(&dup, 32, ERR_CONFIG, "t") == ERR_CONFIG, "duplicate dim rejected");
    ds_layout empty = {1, {2, 0, 0}, {3, 0, 0}};
    CHECK(ds_layout_check(&empty, 4, ERR_CONFIG, "t") == ERR_CONFIG, "empty chunk rejected");
    /* DistConv shard_ind: rank % T row-major over the config's counts. */
    ds_layout_indices(&l, 0, idx);
    dataset_rank_shard(&l, 6, idx); /* 6 % 4 = 2 -> (1, 0, 0) */
    CHECK(idx[0] == 1 && idx[1] == 0 && idx[2] == 0, "rank 6 -> (%d,%d,%d)", idx[0], idx[1],
          idx[2]);
}

static void test_samplers(void) {
    const int64_t ns[] = {1, 5, 12, 13, 100};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (int R = 1; R <= 4; R++) {
            int64_t n = ns[a];
            int64_t per = (n + R - 1) / R;
            int counts[128] = {0};
            int64_t buf[128];
            int bad = 0, vcount[128] = {0};
            for (int r = 0; r < R; r++) {
                int64_t k = ds_sampler_indices(DS_TRAIN, n, R, r, 0, 3, buf);
                bad |= k != per;
                for (int64_t i = 0; i < k; i++)
                    counts[buf[i]]++;
                int64_t kv = ds_sampler_indices(DS_VAL, n, R, r, 0, 3, buf);
                for (int64_t i = 0; i < kv; i++) {
                    vcount[buf[i]]++;
                    if (i && buf[i] != buf[i - 1] + 1)
                        bad = 1; /* contiguous */
                }
            }
            int64_t dup = 0;
            for (int64_t i = 0; i < n; i++) {
                bad |= counts[i] < 1 || vcount[i] != 1;
                dup += counts[i] - 1;
            }
            CHECK(!bad && dup == per * R - n,
                  "n=%lld R=%d: every sample once (+%lld padding), equal counts, val contiguous",
                  (long long)n, R, (long long)dup);
        }
    int64_t e1[100], e1b[100], e2[100];
    ds_sampler_indices(DS_TRAIN, 100, 2, 1, 0, 1, e1);
    ds_sampler_indices(DS_TRAIN, 100, 2, 1, 0, 1, e1b);
    ds_sampler_indices(DS_TRAIN, 100, 2, 1, 0, 2, e2);
    CHECK(!memcmp(e1, e1b, 50 * sizeof e1[0]), "same epoch, same order");
    CHECK(memcmp(e1, e2, 50 * sizeof e1[0]), "another epoch, another order");
    /* Padding repeats the leading entries of the permutation (torch): n = 5, R = 4 -> total 8,
     * the padded list is perm[0..5) + perm[0..3). Replica 1 takes entries 1 and 5 = perm[0]. */
    int64_t r0[2], r1[2];
    ds_sampler_indices(DS_TRAIN, 5, 4, 0, 0, 1, r0);
    ds_sampler_indices(DS_TRAIN, 5, 4, 1, 0, 1, r1);
    CHECK(r1[1] == r0[0], "padding repeats the leading entries");
    CHECK(ds_sampler_count(DS_VAL, 10, 4, 0) == 3 && ds_sampler_count(DS_VAL, 10, 4, 3) == 2,
          "unpadded validation counts");
}

static void test_plan(void) {
    scaffold_config c;
    config_defaults(&c);
    config_finalize(&c);
    ds_plan p;
    CHECK(cfg_plan(&c, &p) == 0, "%s", err_msg());
    CHECK(p.nipf == 144 && p.num_volumes == 240 && p.n_val == 72 && p.n_train == 168,
          "default plan: nipf %d, %d volumes, %d val", p.nipf, p.num_volumes, p.n_val);
    int per_cat[5] = {0}, bad = 0, nval = 0;
    int seen[5][145];
    memset(seen, 0, sizeof seen);
    for (int v = 0; v < p.num_volumes; v++) {
        nval += p.is_val[v];
        for (int k = 0; k < 3; k++) {
            int cat = p.contents[v * 6 + 2 * k], inst = p.contents[v * 6 + 2 * k + 1];
            if (cat < 0 || cat >= 5 || inst < 0 || inst >= 145) {
                bad = 1;
                continue;
            }
            per_cat[cat]++;
            seen[cat][inst]++;
        }
    }
    for (int cat = 0; cat < 5; cat++) {
        bad |= per_cat[cat] != 144;
        for (int i = 0; i < 145; i++)
            bad |= seen[cat][i] > 1; /* 144 <= 145: one round, no repeats */
    }
    CHECK(!bad && nval == 72, "144 distinct instances per category, 72 validation volumes");
    for (int i = 0; i < 15; i++)
        bad |= !(p.colors[i] >= 0 && p.colors[i] < 1);
    CHECK(!bad, "colours in [0, 1)");
    /* Categories are shuffled across volumes (not all volume 0's fractals of category 0). */
    int mixed = 0;
    for (int v = 0; v < 10; v++)
        mixed |= p.contents[v * 6] != p.contents[v * 6 + 2];
    CHECK(mixed, "pairs are shuffled");
    ds_plan_free(&p);
    /* More instances than 145: several rounds. */
    c.n_instances_used_per_fractal = 300;
    c.n_categories = 2;
    CHECK(cfg_plan(&c, &p) == 0 && p.nipf == 300 && p.num_volumes == 200, "300 per class");
    ds_plan_free(&p);
    c.n_instances_used_per_fractal = 3;
    c.n_categories = 1;
    CHECK(cfg_plan(&c, &p) == ERR_CONFIG, "one volume cannot be split: %s", err_msg());
    ds_plan_free(&p);
}

static void test_voxelize(void) {
    float pts[6] = {0, 0, 0, 1, 0, 0};
    int32_t idx[6];
    CHECK(ds_voxelize(pts, 2, 4, idx) == 0, "voxelize");
    CHECK(idx[0] == 0 && idx[1] == 2 && idx[2] == 2 && idx[3] == 3 && idx[4] == 2 && idx[5] == 2,
          "isotropic scaling and centring: (%d,%d,%d) (%d,%d,%d)", idx[0], idx[1], idx[2], idx[3],
          idx[4], idx[5]);
    pts[4] = NAN;
    CHECK(ds_voxelize(pts, 2, 4, idx) == ERR_FORMAT, "non-finite point rejected");
    /* Rendering: later fractals overwrite, region offsets. */
    float vol[3 * 8];
    uint16_t mask[8];
    int64_t ext[3] = {2, 2, 2}, st[3] = {2, 2, 2}, sp[3] = {4, 4, 4};
    ds_render_clear(vol, mask, ext);
    int32_t v1[6] = {2, 2, 2, 3, 3, 3}, v2[3] = {3, 3, 3}, out[3] = {0, 0, 0};
    float c1[3] = {0.1f, 0.2f, 0.3f}, c2[3] = {0.7f, 0.8f, 0.9f};
    ds_render_fractal(vol, mask, st, sp, v1, 2, c1, 1);
    ds_render_fractal(vol, mask, st, sp, v2, 1, c2, 2);
    ds_render_fractal(vol, mask, st, sp, out, 1, c2, 3); /* outside the region: ignored */
    CHECK(mask[0] == 1 && mask[7] == 2 && mask[1] == 0 && vol[0] == 0.1f && vol[7] == 0.7f &&
              vol[8 + 7] == 0.8f && vol[16] == 0.3f && vol[1] == 0.0f,
          "render: overwrite order, channels first, background 0");
}

static void test_ce(void) {
    int64_t out[200];
    int64_t k = dataset_ce_indices(168, 0.1, out);
    const int64_t want[17] = {0, 10, 20, 31, 41, 52, 62, 73, 83, 93, 104, 114, 125, 135, 146, 156,
                              167};
    CHECK(k == 17 && !memcmp(out, want, sizeof want), "CE sample for n_train=168 (reference)");
    CHECK(dataset_ce_indices(5, 0.01, out) == 1 && out[0] == 0, "at least one mask");
    CHECK(dataset_ce_indices(5, 1.0, out) == 5 && out[4] == 4, "at most n_train masks");
    CHECK(dataset_ce_indices(0, 0.1, out) == 0, "empty training set");
}

/* `test_dataset prepare CONFIG-ARGS...`: dataset_prepare alone (no fractal generation), as the
 * benchmark calls it; prints the directory or the agreed error. */
static int mode_prepare(int argc, char **argv) {
    dist_world w;
    dist_init(&w, NULL, NULL);
    log_set_rank(w.rank);
    scaffold_config c;
    config_defaults(&c);
    int rc = config_parse_args(&c, argc - 1, argv + 1, 1);
    if (rc == 0)
        rc = config_finalize(&c);
    ds_spec sp = ds_spec_of(&c);
    char dir[FS_PATH_MAX];
    dataset_prep_info info;
    if (rc == 0)
        rc = dataset_prepare(&sp, &w, dir, sizeof dir, &info);
    if (w.rank == 0) {
        if (rc)
            fprintf(stderr, "prepare: %s\n", err_msg());
        else
            printf("prepare: %s %s\n", info.reused ? "reused" : "generated", dir);
    }
    dist_finalize(&w);
    return err_exit_status(rc);
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "prepare"))
        return mode_prepare(argc, argv);
    /* `test_dataset ce` reads "N FRACTION" lines and prints the CE indices of each (compared
     * with torch by run.sh). */
    if (argc == 2 && !strcmp(argv[1], "ce")) {
        long n;
        double f;
        while (scanf("%ld %lf", &n, &f) == 2) {
            int64_t *out = malloc((size_t)(n > 0 ? n : 1) * sizeof *out);
            int64_t k = dataset_ce_indices(n, f, out);
            for (int64_t i = 0; i < k; i++)
                printf(i ? ",%lld" : "%lld", (long long)out[i]);
            printf("\n");
            free(out);
        }
        return 0;
    }
    test_sha256();
    test_config_id();
    test_layout();
    test_samplers();
    test_plan();
    test_voxelize();
    test_ce();
    return test_report();
}
