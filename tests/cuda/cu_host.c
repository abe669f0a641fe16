/* cu_host: the CUDA backend's host-side logic, on any machine (no GPU needed): the device key,
 * local rank from the environment in upstream's priority order, the GPU pick and the per-rank
 * device decision, the algorithm cache, the bucketed all-reduce plan (on synthetic tensors, and
 * on a real U-Net's against the CPU path's buckets), the slab layout, cuDNN's 32-bit shape
 * limit, and the workspace plans; the lazy loading of cuDNN, cuBLAS and NCCL (nothing loaded
 * before first use, a missing library reported by name) and cuDNN's descriptors of every U-Net
 * convolution (real cuDNN, no GPU needed); the skip connection's split into two convolutions;
 * the device memory plan of a bf16 model with bf16 storage. Last, the real collective selection
 * (cu_device_select) under MPI with this machine's probe. */
#include "core/err.h"
#include "parallel/grad.h"
#include "nn/backend.h"
#include "nn/cuda/cu_int.h"
#include "nn/unet.h"
#include "test.h"

#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- a fake environment ---------------------------------------------------------------------- */
static const char *fake_names[8], *fake_vals[8];
static int fake_n;
static const char *fake_get(const char *name) {
    for (int i = 0; i < fake_n; i++)
        if (!strcmp(fake_names[i], name))
            return fake_vals[i];
    return NULL;
}
static void fake_set(const char *name, const char *val) {
    fake_names[fake_n] = name;
    fake_vals[fake_n++] = val;
}

static void test_want(void) {
    cu_want w;
    CHECK(cu_want_parse("cpu", &w) == 0 && w == CU_WANT_CPU, "cpu");
    CHECK(cu_want_parse("cuda", &w) == 0 && w == CU_WANT_CUDA, "cuda");
    CHECK(cu_want_parse("auto", &w) == 0 && w == CU_WANT_AUTO, "auto");
    CHECK(cu_want_parse("gpu", &w) == ERR_CONFIG && strstr(err_msg(), "key 'device'"), "%s",
          err_msg());
    CHECK(cu_want_parse("CUDA", &w) == ERR_CONFIG, "values are lower case, as the config's");
}

static void test_local_rank(void) {
    int lr = -7;
    const char *var = NULL;
    fake_n = 0;
    CHECK(cu_local_rank_from_env(fake_get, &lr, &var) == 1 && lr == -7, "none set");
    /* Each variable alone is found, and wins over every variable after it. */
    int nv = 0;
    while (cu_local_rank_vars[nv])
        nv++;
    CHECK(nv == 7, "upstream lists 7 variables, got %d", nv);
    for (int i = 0; i < nv; i++) {
        fake_n = 0;
        for (int j = nv - 1; j >= i; j--)
            fake_set(cu_local_rank_vars[j], j == i ? "3" : "5");
        int rc = cu_local_rank_from_env(fake_get, &lr, &var);
        CHECK(rc == 0 && lr == 3 && !strcmp(var, cu_local_rank_vars[i]), "var %s: rc %d lr %d",
              cu_local_rank_vars[i], rc, lr);
    }
    CHECK(!strcmp(cu_local_rank_vars[0], "LOCAL_RANK") &&
              !strcmp(cu_local_rank_vars[2], "OMPI_COMM_WORLD_LOCAL_RANK") &&
              !strcmp(cu_local_rank_vars[6], "FLUX_TASK_LOCAL_ID"),
          "priority order of reference 10.1");
    const char *bad[] = {"x", "", "-1", "2x", "99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        fake_n = 0;
        fake_set("SLURM_LOCALID", bad[i]);
        int rc = cu_local_rank_from_env(fake_get, &lr, &var);
        CHECK(rc == ERR_CONFIG && strstr(err_msg(), "SLURM_LOCALID"), "'%s': rc %d %s", bad[i],
              rc, err_msg());
    }
}

static void test_pick(void) {
    int g = 99;
    CHECK(cu_pick_gpu(0, 3, &g) == 0 && g == -1, "no GPU");
    CHECK(cu_pick_gpu(1, 5, &g) == 0 && g == 0, "one visible GPU whatever the local rank");
    CHECK(cu_pick_gpu(4, 2, &g) == 0 && g == 2, "several: the local rank's");
    CHECK(cu_pick_gpu(4, 0, &g) == 0 && g == 0, "local rank 0");
    int rc = cu_pick_gpu(4, 4, &g);
    CHECK(rc == ERR_CONFIG && strstr(err_msg(), "local rank 4") && strstr(err_msg(), "4 GPUs"),
          "%s", err_msg());
}

static void test_decide(void) {
    int g;
    char note[512];
    /* cpu: never looks at the devices */
    for (int nd = -1; nd <= 2; nd++) {
        int rc = cu_device_decide(CU_WANT_CPU, nd, "x", 0, NULL, &g, note, sizeof note);
        CHECK(rc == 0 && g == -1 && note[0] == '\0', "cpu with ndev %d", nd);
    }
    int rc = cu_device_decide(CU_WANT_AUTO, -1, "cudaGetDeviceCount: no driver", 0, NULL, &g, note,
                              sizeof note);
    CHECK(rc == 0 && g == -1 && strstr(note, "no GPU visible") &&
              strstr(note, "cudaGetDeviceCount: no driver") && strstr(note, "using the CPU"),
          "auto without a driver: %s", note);
    rc = cu_device_decide(CU_WANT_AUTO, 0, "", 0, NULL, &g, note, sizeof note);
    CHECK(rc == 0 && g == -1 && strstr(note, "no CUDA device"), "auto, 0 devices: %s", note);
    rc = cu_device_decide(CU_WANT_CUDA, -1, "cudaGetDeviceCount: no driver", 0, NULL, &g, note,
                          sizeof note);
    CHECK(rc == ERR_CONFIG && g == -1 && strstr(err_msg(), "key 'device'") &&
              strstr(err_msg(), "no GPU is visible") && strstr(err_msg(), "device: auto or cpu"),
          "cuda without a GPU: %s", err_msg());
    rc = cu_device_decide(CU_WANT_AUTO, 2, "", 1, NULL, &g, note, sizeof note);
    CHECK(rc == 0 && g == 1 && strstr(note, "GPU 1"), "auto, 2 GPUs, local rank 1: %s", note);
    rc = cu_device_decide(CU_WANT_CUDA, 1, "", 3, NULL, &g, note, sizeof note);
    CHECK(rc == 0 && g == 0, "cuda, 1 GPU, local rank 3 -> GPU 0");
    rc = cu_device_decide(CU_WANT_CUDA, 2, "", 3, NULL, &g, note, sizeof note);
    CHECK(rc == ERR_CONFIG && strstr(err_msg(), "key 'device'") &&
              strstr(err_msg(), "local rank 3"),
          "cuda, local rank beyond the GPUs: %s", err_msg());
    /* A run that must stay on the CPU (e.g. spatially sharded): auto says why and stays on the
     * CPU, an explicit cuda is refused with the reason. */
    const char *why = "spatial sharding runs on the CPU backend only";
    rc = cu_device_decide(CU_WANT_AUTO, 1, "", 0, why, &g, note, sizeof note);
    CHECK(rc == 0 && g == -1 && strstr(note, "GPU 0 visible") && strstr(note, why) &&
              strstr(note, "using the CPU"),
          "auto, CPU only: %s", note);
    rc = cu_device_decide(CU_WANT_CUDA, 1, "", 0, why, &g, note, sizeof note);
    CHECK(rc == ERR_CONFIG && g == -1 && strstr(err_msg(), "key 'device'") &&
              strstr(err_msg(), why),
          "cuda, CPU only: %s", err_msg());
    /* Without a GPU the reason to stay on the CPU is not the one given. */
    rc = cu_device_decide(CU_WANT_AUTO, 0, "", 0, why, &g, note, sizeof note);
    CHECK(rc == 0 && g == -1 && strstr(note, "no CUDA device"), "auto, no GPU, CPU only: %s",
          note);
}

static void test_algo_cache(void) {
    static cu_algo_cache c; /* 100+ KiB: not on the stack */
    memset(&c, 0, sizeof c);
    const cu_conv_key base = {3, 0, 1, 64, 32, 32, 32, 64};
    CHECK(cu_algo_slot(&c, &base) == 0 && c.n == 1, "first key, slot 0");
    CHECK(cu_algo_slot(&c, &base) == 0 && c.n == 1, "same key, same slot");
    CHECK(c.e[0].op[CU_OP_FWD].found == 0 && c.e[0].op[CU_OP_BWD_FILTER].found == 0,
          "new entries are unmeasured");
    /* every field of the key tells entries apart */
    for (int f = 0; f < 8; f++) {
        cu_conv_key k = base;
        int *v = (int *)&k; /* the key is 8 ints */
        v[f] += 1;
        const int before = c.n;
        int s = cu_algo_slot(&c, &k);
        CHECK(s == before && c.n == before + 1, "field %d changes the slot (%d)", f, s);
        CHECK(!cu_conv_key_eq(&k, &base), "field %d: keys differ", f);
        CHECK(cu_algo_slot(&c, &k) == s, "field %d: found again", f);
    }
    char s[160];
    cu_conv_key_str(&base, s, sizeof s);
    CHECK(!strcmp(s, "conv3d k3 fp32 N1 C64 D32 H32 W32 K64"), "key string '%s'", s);
    const cu_conv_key t = {2, 1, 2, 32, 16, 16, 16, 64};
    cu_conv_key_str(&t, s, sizeof s);
    CHECK(!strcmp(s, "conv k2s2 bf16 N2 C32 D16 H16 W16 K64"), "key string '%s'", s);
    /* full: an error, not an overwrite */
    cu_conv_key k = base;
    int rc = 0;
    while (c.n < CU_ALGO_CACHE_MAX && rc >= 0) {
        k.N++;
        rc = cu_algo_slot(&c, &k);
    }
    k.N++;
    rc = cu_algo_slot(&c, &k);
    CHECK(rc == ERR_RANGE && strstr(err_msg(), "cache full") && c.n == CU_ALGO_CACHE_MAX,
          "full cache: rc %d %s", rc, err_msg());
    CHECK(cu_algo_slot(&c, &base) == 0, "old keys still found when full");
}

/* Checks a bucket plan against its tensors: exact cover from the end backwards, tensor-aligned,
 * every bucket but the lowest reaches the cap, and each closes at the tensor that reaches it. */
static int check_plan(const size_t *off, const size_t *num, int nt, size_t cap,
                      const cu_bucket *b, int nb) {
    int bad = 0;
    size_t total = nt ? off[nt - 1] + num[nt - 1] : 0, end = total;
    int next_last = nt - 1;
    for (int i = 0; i < nb; i++) {
        bad |= b[i].last != next_last || b[i].first > b[i].last;
        bad |= b[i].offset + b[i].count != end || b[i].offset != off[b[i].first];
        size_t sum = 0;
        for (int t = b[i].first; t <= b[i].last; t++)
            sum += num[t];
        bad |= sum != b[i].count;
        bad |= b[i].first > 0 && b[i].count < cap;
        bad |= b[i].count - num[b[i].first] >= cap;
        end = b[i].offset;
        next_last = b[i].first - 1;
    }
    bad |= end != 0 || next_last != -1;
    return !bad;
}

/* Starting buckets as the backward pass finishes tensors (cu_grad_ready): replaying tensors
 * final in reverse order, a bucket starts exactly when its lowest tensor is final, in plan
 * order, and every bucket has started once tensor 0 is. */
static int check_starts(const cu_bucket *b, int nb, int nt) {
    int started = 0, ok = 1;
    for (int first = nt; first >= 0; first--) {
        const int now = cu_buckets_startable(b, nb, started, first);
        ok &= now >= started;
        for (int i = 0; i < now; i++)
            ok &= b[i].first >= first; /* only final tensors */
        if (now < nb)
            ok &= b[now].first < first; /* the next one is not ready yet */
        started = now;
    }
    return ok && started == nb;
}

static void test_wcache(void) {
    static cu_wcache c;
    memset(&c, 0, sizeof c);
    c.version = 1;
    float w[4];
    int fresh = -1;
    int i = cu_wcache_find(&c, &w[0], 8, 8, 16, 3, &fresh);
    CHECK(i == 0 && fresh == 1 && c.n == 1 && c.e[0].version != c.version && !c.e[0].packed,
          "a new weight: fresh and stale");
    c.e[0].packed = &w[3];
    c.e[0].version = c.version; /* packed now */
    i = cu_wcache_find(&c, &w[0], 8, 8, 16, 3, &fresh);
    CHECK(i == 0 && fresh == 0 && c.e[0].version == c.version, "found again: current");
    c.version++; /* the parameters changed */
    i = cu_wcache_find(&c, &w[0], 8, 8, 16, 3, &fresh);
    CHECK(i == 0 && fresh == 0 && c.e[0].version != c.version, "after a change: stale, kept");
    i = cu_wcache_find(&c, &w[1], 16, 16, 8, 2, &fresh);
    CHECK(i == 1 && fresh == 1 && c.n == 2, "a second weight");
    c.e[0].version = c.version;
    i = cu_wcache_find(&c, &w[0], 8, 8, 32, 3, &fresh);
    CHECK(i == 0 && fresh == 1 && c.e[0].packed == &w[3] && c.e[0].cout == 32 &&
              c.e[0].version != c.version,
          "the same address with another shape: remade (old buffer handed back)");
    c.e[0].version = c.version;
    i = cu_wcache_find(&c, &w[0], 4, 8, 32, 3, &fresh);
    CHECK(i == 0 && fresh == 1 && c.e[0].ca == 4 && c.e[0].version != c.version,
          "the same weight split at another channel (a skip input): packed again");
    static float many[CU_WCACHE_MAX + 1];
    memset(&c, 0, sizeof c);
    for (int k = 0; k < CU_WCACHE_MAX; k++)
        cu_wcache_find(&c, &many[k], 1, 1, 1, 3, &fresh);
    CHECK(c.n == CU_WCACHE_MAX && cu_wcache_find(&c, &many[CU_WCACHE_MAX], 1, 1, 1, 3, &fresh) ==
                                      ERR_RANGE && strstr(err_msg(), "CU_WCACHE_MAX"),
          "full: %s", err_msg());
}

static void test_buckets(void) {
    size_t off[64], num[64];
    cu_bucket b[64];
    uint64_t r = 12345;
    for (int trial = 0; trial < 200; trial++) {
        const int nt = 1 + trial % 40;
        size_t o = 0;
        for (int i = 0; i < nt; i++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            num[i] = 1 + (r >> 33) % (trial % 3 == 0 ? 5000 : 300);
            off[i] = o;
            o += num[i];
        }
        const size_t cap = 1 + (size_t)(trial * 37 % 2000);
        int nb = cu_bucket_plan(off, num, nt, cap, b);
        CHECK(nb >= 1 && nb <= nt && check_plan(off, num, nt, cap, b, nb),
              "trial %d: %d tensors, cap %zu, %d buckets", trial, nt, cap, nb);
        CHECK(check_starts(b, nb, nt), "trial %d: buckets start as their tensors finish",
              trial);
    }
    /* cap above the total: one bucket; cap 1: one bucket per tensor */
    size_t o2[3] = {0, 10, 30}, n2[3] = {10, 20, 5};
    int nb = cu_bucket_plan(o2, n2, 3, 1000, b);
    CHECK(nb == 1 && b[0].offset == 0 && b[0].count == 35 && b[0].first == 0 && b[0].last == 2,
          "one bucket");
    nb = cu_bucket_plan(o2, n2, 3, 1, b);
    CHECK(nb == 3 && b[0].first == 2 && b[1].first == 1 && b[2].first == 0, "one per tensor");
    nb = cu_bucket_plan(o2, n2, 3, 25, b);
    CHECK(nb == 2 && b[0].first == 1 && b[0].count == 25 && b[1].first == 0 && b[1].count == 10,
          "last tensors first: {1,2} then {0}");
    nb = cu_bucket_plan(o2, n2, 3, 22, b);
    CHECK(nb == 2 && b[0].first == 1 && b[0].last == 2 && b[0].count == 25 && b[1].last == 0,
          "a bucket closes at the tensor that reaches the cap");
    size_t gap[3] = {0, 11, 30};
    CHECK(cu_bucket_plan(gap, n2, 3, 25, b) == ERR_RANGE && strstr(err_msg(), "contiguous"),
          "a gap is refused: %s", err_msg());
    CHECK(cu_bucket_plan(o2, n2, 3, 0, b) == ERR_RANGE, "cap 0 is refused");
    /* A real U-Net's state_dict: 25 MiB buckets (DDP's default). */
    nn_unet m;
    const nn_unet_spec s = {.in_channels = 3, .n_classes = 6, .layers = 2, .base_channels = 16,
                            .groups = 8};
    if (nn_unet_create(&m, &s, 1, 8, 8, 8) != 0) {
        CHECK(0, "nn_unet_create: %s", err_msg());
        return;
    }
    size_t *uo = malloc(sizeof(size_t) * m.ntensors), *un = malloc(sizeof(size_t) * m.ntensors);
    cu_bucket *ub = malloc(sizeof(cu_bucket) * m.ntensors);
    for (int i = 0; i < m.ntensors; i++) {
        uo[i] = m.tensors[i].offset;
        un[i] = m.tensors[i].numel;
    }
    /* The same buckets as the CPU path's all-reduce (src/parallel/grad.c) for the same size. */
    dist_world w = {.comm = MPI_COMM_WORLD}; /* no progress thread: thread_level 0 */
    MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &w.size);
    const char *mb[3] = {"4", "0.02", "0.004"};
    for (int i = 0; i < 3; i++) {
        setenv("SCAFFOLD_GRAD_BUCKET_MB", mb[i], 1);
        const size_t cap = (size_t)(atof(mb[i]) * 1048576.0 / sizeof(float));
        nb = cu_bucket_plan(uo, un, m.ntensors, cap, ub);
        CHECK(nb >= 1 && check_plan(uo, un, m.ntensors, cap, ub, nb),
              "U-Net (%d tensors, %zu params), cap %zu: %d buckets", m.ntensors, m.nparams, cap,
              nb);
        par_grad g;
        if (par_grad_init(&g, &w, &m, 1.0) != 0) {
            CHECK(0, "par_grad_init: %s", err_msg());
            continue;
        }
        int same = g.np == nb;
        for (int k = 0; same && k < nb; k++)
            same = g.piece[k].first == ub[k].first && g.piece[k].lo == ub[k].offset &&
                   g.piece[k].hi == ub[k].offset + ub[k].count;
        CHECK(same, "cap %zu: %d buckets, the CPU path's %d differ", cap, nb, g.np);
        par_grad_free(&g);
    }
    unsetenv("SCAFFOLD_GRAD_BUCKET_MB");
    free(uo);
    free(un);
    free(ub);
    nn_unet_free(&m);
}

static void test_slab(void) {
    const size_t ns[4] = {1, 63, 1000, 90302342};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 3; k++) {
            const size_t st = nn_optim_state_floats((nn_optim_kind)k, ns[i]);
            cu_slab_layout l;
            cu_slab_plan(ns[i], st, &l);
            CHECK(l.params == 0 && l.grads % 256 == 0 && l.state % 256 == 0 && l.bytes % 256 == 0,
                  "aligned");
            CHECK(l.grads >= ns[i] * 4 && l.state >= l.grads + ns[i] * 4 &&
                      l.bytes >= l.state + st * 4 && l.bytes < l.state + st * 4 + 256,
                  "n %zu kind %d: regions %zu %zu %zu", ns[i], k, l.grads, l.state, l.bytes);
        }
    CHECK(nn_optim_state_floats(NN_OPT_SGD, 10) == 0 &&
              nn_optim_state_floats(NN_OPT_ADAM, 10) == 20,
          "state sizes");
}

static void test_shapes(void) {
    /* Every layer of scale 7 / base 64 fits; scale 9's first level does not. */
    int ok = 1;
    for (int l = 0; l <= 4; l++) {
        const int d = 128 >> l, ch = 64 << l;
        ok &= cu_check_conv_shape(1, d, d, d, ch, ch, 0) == 0;
        ok &= cu_check_conv_shape(1, d, d, d, 2 * ch, ch, 0) == 0;
        if (l > 0)
            ok &= cu_check_conv_shape(1, d, d, d, ch, ch / 2, 1) == 0;
    }
    CHECK(ok, "scale 7 base 64 layers fit: %s", err_msg());
    int rc = cu_check_conv_shape(1, 512, 512, 512, 64, 64, 0);
    CHECK(rc == ERR_CONFIG && strstr(err_msg(), "2^31") && strstr(err_msg(), "dc_num_shards"),
          "512^3 x 64: %s", err_msg());
    /* transposed: the output (twice the extent) counts */
    CHECK(cu_check_conv_shape(1, 256, 256, 256, 128, 64, 1) == ERR_CONFIG,
          "ConvTranspose3d to 512^3 x 64 refused");
    CHECK(cu_check_conv_shape(1, 256, 256, 256, 64, 64, 0) == 0, "256^3 x 64 fits (2^30)");
    CHECK(cu_check_conv_shape(1, 0, 8, 8, 4, 4, 0) == ERR_CONFIG, "empty extent refused");
}

static int plan_ok(const cu_ws_plan *p) {
    size_t sum = 0;
    for (int i = 0; i < p->n; i++) {
        if (p->off[i] != sum || p->off[i] % 256 || p->size[i] % 256)
            return 0;
        sum += p->size[i];
    }
    return sum == p->total && p->n <= CU_WS_REGIONS;
}

static void test_ws_plans(void) {
    cu_ws_plan p, q;
    for (int bf = 0; bf <= 1; bf++) {
        cu_conv3d_ws_plan(&p, 2, 16, 8, 4, 96, 32, bf);
        CHECK(plan_ok(&p) && p.n == 4, "conv3d plan");
        CHECK(p.size[0] >= (size_t)2 * 16 * 8 * 4 * 96 * (bf ? 2 : 4) &&
                  p.size[1] >= (size_t)27 * 96 * 32 * (bf ? 2 : 4),
              "conv3d regions hold x and dW");
        CHECK(bf ? p.size[2] >= (size_t)2 * 512 * 32 * 2 && p.size[3] >= (size_t)2 * 512 * 96 * 2
                 : p.size[2] == 0 && p.size[3] == 0,
              "conv3d bf16-only regions (bf16 %d)", bf);
        cu_convt3d_ws_plan(&p, 2, 4, 4, 4, 64, 32, bf);
        CHECK(plan_ok(&p) && p.n == 6 && p.size[0] >= (size_t)2 * 512 * 32 * (bf ? 2 : 4) &&
                  p.size[5] >= (size_t)3 * 32 * 8,
              "convt3d plan");
        CHECK(bf ? p.size[3] >= (size_t)2 * 512 * 32 * 2 : p.size[3] == 0, "convt3d out/din16");
        cu_conv1_ws_plan(&p, 4096, 64, 6, bf);
        CHECK(plan_ok(&p) && p.n == 7 && (bf ? p.size[3] >= (size_t)4096 * 64 * 4 : p.size[3] == 0),
              "conv1 plan");
    }
    cu_groupnorm_ws_plan(&p, 2, 100000, 64);
    CHECK(plan_ok(&p) && p.size[0] >= (size_t)2 * cu_slices(100000) * 3 * 64 * 8, "gn plan");
    cu_loss_ws_plan(&p, 2, 4096, 6);
    CHECK(plan_ok(&p) && p.n == 7 && p.size[0] >= (size_t)2 * 4096 * 6 * 4 &&
              p.size[1] >= CU_RED_BLOCKS * 16,
          "loss plan");
    cu_dice_ws_plan(&p, 3, 6);
    cu_norm_ws_plan(&q);
    CHECK(plan_ok(&p) && plan_ok(&q) && q.size[0] >= CU_RED_BLOCKS * 8, "dice and norm plans");
    CHECK(cu_slices(1) == 1 && cu_slices(1024) == 2 && cu_slices(128L * 128 * 128) == 1024 &&
              cu_slices(512) == 1,
          "slices");
    CHECK(cu_packed_bytes(64, 32, 3, 0) == (size_t)27 * 64 * 32 * 4 &&
              cu_packed_bytes(64, 32, 2, 1) == (size_t)8 * 64 * 32 * 2,
          "packed bytes");
}

/* Whether a library whose file name contains `name` is mapped into this process. */
static int mapped(const char *name) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[1024];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, name) != NULL;
    fclose(f);
    return found;
}

/* dl.c: the libraries stay unloaded until a function of theirs is called (run first, before
 * anything else touches them); a missing one is a clear error, not a crash at start-up. */
static void test_lazy_libraries(void) {
    CHECK(mapped("libcudnn") == 0 && mapped("libcublas") == 0 && mapped("libnccl") == 0,
          "no cuDNN, cuBLAS or NCCL mapped at start");
    CHECK(!cu_dl_loaded(CU_DL_CUDNN) && !cu_dl_loaded(CU_DL_CUBLAS) && !cu_dl_loaded(CU_DL_NCCL) &&
              !cu_dl_error(CU_DL_CUDNN),
          "nothing loaded, nothing failed");
    /* a library that is not there: the call fails with the library's status and names it */
    cu_dl_use_soname(CU_DL_NCCL, "libscaffold-test-no-nccl.so.2");
    ncclUniqueId id;
    CHECK(ncclGetUniqueId(&id) == ncclSystemError, "NCCL missing: ncclSystemError");
    const char *e = ncclGetErrorString(ncclSystemError);
    CHECK(e && strstr(e, "libscaffold-test-no-nccl.so.2 could not be loaded") &&
              strstr(e, "LD_LIBRARY_PATH"),
          "NCCL's error string says which library and the fix: %s", e ? e : "(null)");
    cu_dl_use_soname(CU_DL_CUBLAS, "libscaffold-test-no-cublas.so.13");
    cublasHandle_t h;
    const cublasStatus_t bs = cublasCreate(&h);
    CHECK(bs == CUBLAS_STATUS_NOT_INITIALIZED, "cuBLAS missing: not initialised (%d)", (int)bs);
    CHECK(cu_fail_blas(bs, "cublasCreate", "x.c", 1) == ERR_INTERNAL &&
              strstr(err_msg(), "libscaffold-test-no-cublas.so.13 could not be loaded"),
          "the backend's cuBLAS error names the library: %s", err_msg());
    CHECK(mapped("libnccl") == 0 && mapped("libcublas") == 0, "still nothing mapped");
    cu_dl_use_soname(CU_DL_NCCL, NULL);
    cu_dl_use_soname(CU_DL_CUBLAS, NULL);
    CHECK(!cu_dl_error(CU_DL_NCCL) && !cu_dl_error(CU_DL_CUBLAS), "default sonames back");
}

/* cuDNN's descriptors for every convolution of a scale-7 / base-64 U-Net in both precisions, and
 * for the two halves of each split skip convolution: cuDNN (really loaded now, no GPU needed)
 * agrees with our output shapes. */
static void test_descriptors(void) {
    const int scale = 7, base = 64, Lv = scale - 3, N = 1 << scale;
    int ok = 1, n = 0;
    for (int bf = 0; bf <= 1; bf++) {
        for (int l = 0; l <= Lv; l++) {
            const int d = N >> l, c = base << l, cin = l ? c / 2 : 3;
            const cu_conv_key k1 = {3, bf, 1, cin, d, d, d, c}, k2 = {3, bf, 1, c, d, d, d, c};
            ok &= cu_conv_desc_check(&k1) == 0 && cu_conv_desc_check(&k2) == 0;
            n += 2;
            if (l < Lv) {
                /* up block at level l: ConvTranspose3d from level l+1 (as the stride-2
                 * problem: x = its output), its first conv on the skip + upsample and parts */
                const cu_conv_key kt = {2, bf, 1, c, d, d, d, 2 * c};
                const cu_conv_key ks = {3, bf, 1, 2 * c, d, d, d, c};
                ok &= cu_conv_desc_check(&kt) == 0 && cu_conv_desc_check(&ks) == 0;
                cu_conv_part part[2];
                const int np = cu_conv3d_parts(1, bf, c, c, c, part);
                for (int i = 0; i < np; i++) {
                    const cu_conv_key kp = {3, bf, 1, part[i].C, d, d, d, c};
                    ok &= cu_conv_desc_check(&kp) == 0;
                }
                n += 2 + np;
            }
        }
    }
    CHECK(ok, "cuDNN descriptors of %d U-Net convolutions agree with our shapes: %s", n,
          err_msg());
    const cu_conv_key bad = {3, 0, 1, 0, 8, 8, 8, 4};
    CHECK(cu_conv_desc_check(&bad) == ERR_INTERNAL && strstr(err_msg(), "cuDNN error"),
          "cuDNN refuses 0 channels, reported: %s", err_msg());
    CHECK(cu_dl_loaded(CU_DL_CUDNN) && mapped("libcudnn") == 1, "cuDNN loaded by its first use");
    CHECK(mapped("libcublas") == 0 && mapped("libnccl") == 0, "cuBLAS and NCCL still not loaded");
}

/* The skip connection's convolution: one or two cuDNN calls (cu_conv3d_parts). */
static void test_skip_parts(void) {
    int split = -1;
    CHECK(cu_skip_mode_parse(NULL, &split) == 0 && split == 1, "default: split");
    CHECK(cu_skip_mode_parse("", &split) == 0 && split == 1, "empty: split");
    CHECK(cu_skip_mode_parse("gather", &split) == 0 && split == 0, "gather");
    CHECK(cu_skip_mode_parse("split", &split) == 0 && split == 1, "split");
    CHECK(cu_skip_mode_parse("concat", &split) == ERR_CONFIG &&
              strstr(err_msg(), "SCAFFOLD_CUDA_SKIP='concat'"),
          "bad value names the variable: %s", err_msg());
    cu_conv_part p[2];
    CHECK(cu_conv3d_parts(1, 0, 64, 64, 64, p) == 2 && p[0].c0 == 0 && p[0].C == 64 &&
              p[0].w_off == 0 && p[1].c0 == 64 && p[1].C == 64 &&
              p[1].w_off == (size_t)27 * 64 * 64,
          "fp32 skip split: two convolutions, the second filter after the first");
    CHECK(cu_conv3d_parts(1, 0, 48, 16, 32, p) == 2 && p[1].c0 == 48 && p[1].C == 16 &&
              (p[1].w_off + (size_t)27 * p[1].C * 32) * 4 == cu_packed_bytes(64, 32, 3, 0),
          "unequal parts fill the packed buffer exactly");
    CHECK(cu_conv3d_parts(1, 1, 64, 64, 64, p) == 1 && p[0].C == 128, "bf16: gathered");
    CHECK(cu_conv3d_parts(0, 0, 64, 64, 64, p) == 1 && p[0].C == 128, "gather mode");
    CHECK(cu_conv3d_parts(1, 0, 3, 0, 64, p) == 1 && p[0].C == 3 && p[0].w_off == 0,
          "no skip: one convolution");
}

/* The CUDA table's device memory plan: with its bf16 storage entries a bf16 model without
 * checkpointing keeps its down blocks' convolution outputs as bf16 (unet.c h16). */
static void test_memory_plan(void) {
    nn_backend t, t_no16;
    const nn_unet_spec s = {3, 5, 4, 64, 8}; /* scale 7: layers 4, base 64, 5 classes */
    const int Lv = 4, E = 128;
    nn_unet_memory m16, m32, f32a, f32b;
    for (int bf = 0; bf <= 1; bf++) {
        cu_backend_table(&t, bf);
        t_no16 = t;
        t_no16.bf16_narrow = NULL;
        t_no16.bf16_widen = NULL;
        nn_unet_opts o = {.precision = bf ? NN_BF16 : NN_FP32, .backend = &t};
        nn_unet_opts o2 = o;
        o2.backend = &t_no16;
        int rc = nn_unet_memory_estimate(&s, &o, 1, E, E, E, NN_OPT_ADAM, bf ? &m16 : &f32a);
        rc |= nn_unet_memory_estimate(&s, &o2, 1, E, E, E, NN_OPT_ADAM, bf ? &m32 : &f32b);
        CHECK(rc == 0, "estimates: %s", err_msg());
    }
    CHECK(t.bf16_narrow && t.bf16_widen && t.conv_round && !t.gn_round && t.device &&
              !t.host_access && !strcmp(t.name, "cuda"),
          "the CUDA table: bf16 storage entries, convolutions round, GroupNorm fp32");
    /* the saving: per down block above the bottleneck, c1 and c2 at 2 bytes instead of 4 */
    size_t saved = 0;
    for (int l = 0; l < Lv; l++) {
        const size_t n = (size_t)(E >> l) * (E >> l) * (E >> l) * (64 << l);
        saved += 2 * (((n + 15) & ~(size_t)15) - (((n + 1) / 2 + 15) & ~(size_t)15)) * 4;
    }
    CHECK(m32.activations - m16.activations == saved && m16.workspace == m32.workspace,
          "bf16 storage saves %zu MiB of %zu MiB of activations", saved >> 20,
          m32.activations >> 20);
    CHECK(f32a.activations == f32b.activations, "fp32: no bf16 storage");
    printf("device memory at scale 7 / base 64, batch 1, bf16: activations %.2f GiB with bf16 "
           "storage (%.2f GiB without), workspace %.2f GiB, total %.2f GiB; fp32: activations "
           "%.2f GiB, total %.2f GiB\n",
           m16.activations / 1073741824.0, m32.activations / 1073741824.0,
           m16.workspace / 1073741824.0, m16.total / 1073741824.0,
           f32a.activations / 1073741824.0, f32a.total / 1073741824.0);
}

/* The real selection on this machine. With a reason to stay on the CPU, auto is the CPU whatever
 * the machine has and an explicit cuda is refused on every rank; without one, auto takes a GPU
 * exactly when the probe finds one. */
static void test_select(void) {
    int g = 5;
    char note[512];
    const char *why = "this test keeps the CPU";
    int rc = cu_device_select("cpu", MPI_COMM_WORLD, NULL, &g, note, sizeof note);
    CHECK(rc == 0 && g == -1, "cpu");
    rc = cu_device_select("auto", MPI_COMM_WORLD, why, &g, note, sizeof note);
    CHECK(rc == 0 && g == -1 && strstr(note, "using the CPU"), "auto, CPU only: CPU (rc %d: %s)",
          rc, note);
    rc = cu_device_select("cuda", MPI_COMM_WORLD, why, &g, note, sizeof note);
    CHECK(rc == ERR_CONFIG && g == -1 && strstr(err_msg(), "key 'device'"), "cuda: %s",
          err_msg());
    rc = cu_device_select("bogus", MPI_COMM_WORLD, NULL, &g, note, sizeof note);
    CHECK(rc == ERR_CONFIG, "bad value");
    char probe[256];
    const int ndev = cu_probe(probe, sizeof probe);
    rc = cu_device_select("auto", MPI_COMM_WORLD, NULL, &g, note, sizeof note);
    CHECK(rc == 0 && (ndev > 0 ? g >= 0 : g == -1), "auto with %d GPUs: GPU %d (%s)", ndev, g,
          ndev < 0 ? probe : "probe ok");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    test_lazy_libraries(); /* first: nothing may have loaded the libraries yet */
    test_descriptors();
    test_skip_parts();
    test_memory_plan();
    test_want();
    test_local_rank();
    test_pick();
    test_decide();
    test_algo_cache();
    test_buckets();
    test_wcache();
    test_slab();
    test_shapes();
    test_ws_plans();
    test_select();
    MPI_Finalize();
    return test_report();
}
