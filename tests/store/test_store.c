/* Tests for src/store, mirroring DDStore's suites (test_single.py, test_multirank.py,
 * test_get_batch.py) at any rank count: run as `mpirun -n K test_store [rma|coll]`.
 *
 * `test_store METHOD big` runs only the 64-bit size test (about 2.2 GiB on rank 0).
 *
 * Rows are self-describing: element c of global row g holds a value derived from (g, c), so any
 * misplaced, stale or torn row is detected, whoever reads it. Every rank counts its own checks;
 * rank 0 prints the sums over ranks, and every rank exits 1 if any rank failed. Every sequence
 * of reads is identical on all ranks where the coll method needs it (same calls, same order). */
#include "core/err.h"
#include "core/rng.h"
#include "mpi/dist.h"
#include "store/store.h"
#include "test.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

static dist_world W;
static store_method METHOD;
static store_opts OPTS;

/* The value of element c of global row g, in type t (small enough to be exact in every type). */
static void expect_row(store_type t, int64_t re, int64_t g, void *out) {
    for (int64_t c = 0; c < re; c++) {
        int64_t v = g * 100 + c;
        switch (t) {
        case STORE_BYTE:
        case STORE_UINT8:
            ((uint8_t *)out)[c] = (uint8_t)(g * 7 + c * 3 + 1);
            break;
        case STORE_BOOL:
            ((uint8_t *)out)[c] = (uint8_t)((g + c) & 1);
            break;
        case STORE_INT32:
            ((int32_t *)out)[c] = (int32_t)(v ^ 0x5a5a);
            break;
        case STORE_INT64:
            ((int64_t *)out)[c] = v * 1000003 + ((int64_t)1 << 40);
            break;
        case STORE_FLOAT32:
            ((float *)out)[c] = (float)v + 0.5f;
            break;
        case STORE_FLOAT64:
            ((double *)out)[c] = (double)v + 0.25;
            break;
        default:
            break;
        }
    }
}

static int64_t rows_uneven(int r) { return 3 + r; } /* rank r holds r+3 rows */
static int64_t rows_even(int r) { (void)r; return 16; }
static int64_t rows_gap(int r) { return r == 1 ? 0 : 5; } /* rank 1 holds nothing */

static int64_t first_row(int64_t (*rows_of)(int), int r) {
    int64_t f = 0;
    for (int p = 0; p < r; p++)
        f += rows_of(p);
    return f;
}

static int64_t total_rows(int64_t (*rows_of)(int)) {
    return first_row(rows_of, W.size);
}

/* Adds a self-describing variable; returns the store_add code. */
static int add_var(store *s, const char *name, store_type t, int64_t re, int64_t (*rows_of)(int),
                   int *var) {
    int64_t n = rows_of(W.rank), f = first_row(rows_of, W.rank);
    size_t rb = (size_t)re * store_type_size(t);
    char *buf = malloc(rb * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        expect_row(t, re, f + i, buf + (size_t)i * rb);
    int rc = store_add(s, name, t, re, n, buf, var);
    free(buf); /* the store copied it */
    return rc;
}

/* Checks that rows of dst are the expected rows for the global indices idx[0..n). */
static int rows_ok(store_type t, int64_t re, const int64_t *idx, int64_t n, const char *dst) {
    size_t rb = (size_t)re * store_type_size(t);
    char *want = malloc(rb);
    int bad = 0;
    for (int64_t i = 0; i < n && !bad; i++) {
        expect_row(t, re, idx[i], want);
        if (memcmp(want, dst + (size_t)i * rb, rb)) {
            fprintf(stderr, "  rank %d: row %lld (global %lld) differs\n", W.rank, (long long)i,
                    (long long)idx[i]);
            bad = 1;
        }
    }
    free(want);
    return !bad;
}

static store *open_store(void) {
    store *s = NULL;
    int rc = store_create(&s, W.comm, &OPTS);
    CHECK(rc == 0, "store_create: %s", err_msg());
    return s;
}

/* ≙ test_single.py round trip per dtype + test_multirank.py: every rank reads every row with
 * get(), the first and last row of every shard, and whole-range get() across shards. */
static void test_roundtrip_types(void) {
    store *s = open_store();
    for (int t = 0; t < STORE_TYPE_COUNT; t++) {
        char name[32];
        snprintf(name, sizeof name, "v_%s", store_type_name((store_type)t));
        int var = -1;
        int rc = add_var(s, name, (store_type)t, 5, rows_uneven, &var);
        CHECK(rc == 0, "add %s: %s", name, err_msg());
        if (rc)
            continue;
        store_var_info info;
        CHECK(store_info(s, var, &info) == 0 && info.total_rows == total_rows(rows_uneven) &&
                  info.row_bytes == 5 * (int64_t)store_type_size((store_type)t) &&
                  info.first_row == first_row(rows_uneven, W.rank) &&
                  info.local_rows == rows_uneven(W.rank),
              "info of %s", name);
        CHECK(store_find(s, name) == var, "find %s", name);
        int64_t total = info.total_rows, rb = info.row_bytes;
        char *buf = malloc((size_t)(total * rb));
        int ok = 1;
        for (int64_t g = 0; g < total; g++) {
            rc = store_get(s, var, g, 1, buf, (size_t)rb);
            ok &= rc == 0 && rows_ok((store_type)t, 5, &g, 1, buf);
        }
        CHECK(ok, "%s: every row by get(): %s", name, err_msg());
        /* first and last row of every shard */
        ok = 1;
        for (int p = 0; p < W.size; p++) {
            int64_t f = first_row(rows_uneven, p), l = f + rows_uneven(p) - 1;
            int owner = -1;
            int64_t lr = -1;
            ok &= store_owner(s, var, l, &owner, &lr) == 0 && owner == p &&
                  lr == rows_uneven(p) - 1;
            ok &= store_get(s, var, f, 1, buf, (size_t)rb) == 0 &&
                  rows_ok((store_type)t, 5, &f, 1, buf);
            ok &= store_get(s, var, l, 1, buf, (size_t)rb) == 0 &&
                  rows_ok((store_type)t, 5, &l, 1, buf);
        }
        CHECK(ok, "%s: first/last row of every shard", name);
        /* whole range in one get (spans every shard) */
        memset(buf, 0xee, (size_t)(total * rb));
        rc = store_get(s, var, 0, total, buf, (size_t)(total * rb));
        int64_t *all = malloc((size_t)total * sizeof *all);
        for (int64_t g = 0; g < total; g++)
            all[g] = g;
        CHECK(rc == 0 && rows_ok((store_type)t, 5, all, total, buf), "%s: get(0, %lld): %s",
              name, (long long)total, err_msg());
        free(all);
        free(buf);
    }
    CHECK(store_free(&s) == 0 && s == NULL, "free");
    CHECK(store_free(&s) == 0, "second free is a no-op");
}

/* ≙ init + update + partial updates (test_single.py, test_multirank.py). */
static void test_init_update(void) {
    store *s = open_store();
    int var = -1;
    const int64_t re = 8, n = 6;
    int rc = store_add(s, "zeros", STORE_FLOAT32, re, n, NULL, &var);
    CHECK(rc == 0, "add without data: %s", err_msg());
    int64_t total = n * W.size;
    float *buf = malloc((size_t)(total * re) * sizeof *buf);
    rc = store_get(s, var, 0, total, buf, (size_t)(total * re) * sizeof *buf);
    int zero = rc == 0;
    for (int64_t i = 0; i < total * re; i++)
        zero &= buf[i] == 0.0f;
    if (!zero)
        for (int64_t i = 0; i < total * re; i++)
            if (buf[i] != 0.0f) {
                fprintf(stderr, "  rank %d rc %d: element %lld (row %lld) = %g\n", W.rank, rc,
                        (long long)i, (long long)(i / re), (double)buf[i]);
                break;
            }
    CHECK(zero, "a shard added without data reads as zeros: %s", err_msg());
    /* Updates must not overlap anyone's reads of those rows (store.h): wait for all readers. */
    CHECK(store_sync(s) == 0, "sync before updating");
    /* Rank r writes 1.0 into local row 0 and r+2 into local rows 4..5 (partial updates). */
    float row[8], two[8 * 2];
    for (int i = 0; i < 8; i++)
        row[i] = 1.0f;
    for (int i = 0; i < 16; i++)
        two[i] = (float)(W.rank + 2);
    CHECK(store_update(s, var, 0, 1, row) == 0, "update row 0");
    CHECK(store_update(s, var, 4, 2, two) == 0, "update rows 4..5");
    CHECK(store_update(s, var, 5, 2, row) == ERR_RANGE, "update past the shard is refused");
    CHECK(store_update(s, var, -1, 1, row) == ERR_RANGE, "update at a negative row is refused");
    CHECK(store_sync(s) == 0, "sync: %s", err_msg());
    rc = store_get(s, var, 0, total, buf, (size_t)(total * re) * sizeof *buf);
    int ok = rc == 0;
    for (int64_t g = 0; g < total; g++) {
        int p = (int)(g / n);
        int64_t l = g % n;
        float want = l == 0 ? 1.0f : l >= 4 ? (float)(p + 2) : 0.0f;
        for (int64_t c = 0; c < re; c++)
            ok &= buf[g * re + c] == want;
    }
    CHECK(ok, "updates on every rank are visible everywhere after sync");
    free(buf);
    store_free(&s);
}

/* ≙ two variables are independent; a rank with no rows; even shards. */
static void test_two_vars_and_empty_rank(void) {
    store *s = open_store();
    int a = -1, b = -1;
    CHECK(add_var(s, "a", STORE_INT64, 3, rows_even, &a) == 0, "add a: %s", err_msg());
    CHECK(add_var(s, "b", STORE_FLOAT64, 7, rows_gap, &b) == 0, "add b: %s", err_msg());
    CHECK(a != b, "distinct ids");
    int64_t ta = total_rows(rows_even), tb = total_rows(rows_gap);
    int64_t *ia = malloc((size_t)ta * sizeof *ia), *ib = malloc((size_t)tb * sizeof *ib);
    for (int64_t i = 0; i < ta; i++)
        ia[i] = ta - 1 - i;
    for (int64_t i = 0; i < tb; i++)
        ib[i] = tb - 1 - i;
    char *ba = malloc((size_t)ta * 24), *bb = malloc((size_t)tb * 56);
    int rc1 = store_get_batch(s, a, ia, ta, ba, (size_t)ta * 24);
    int rc2 = store_get_batch(s, b, ib, tb, bb, (size_t)tb * 56);
    CHECK(rc1 == 0 && rows_ok(STORE_INT64, 3, ia, ta, ba), "var a reversed: %s", err_msg());
    CHECK(rc2 == 0 && rows_ok(STORE_FLOAT64, 7, ib, tb, bb),
          "var b (rank 1 holds no rows) reversed: %s", err_msg());
    free(ia);
    free(ib);
    free(ba);
    free(bb);
    store_free(&s);
}

/* ≙ test_get_batch.py: random batches with repeats (n differs per rank, one rank asks for 0),
 * reversed full range == per-row get, single row. */
static void test_batches(void) {
    store *s = open_store();
    int var = -1;
    const int64_t re = 5;
    CHECK(add_var(s, "batch", STORE_INT32, re, rows_uneven, &var) == 0, "add: %s", err_msg());
    const int64_t total = total_rows(rows_uneven), rb = re * 4;
    int64_t nmax = 200 + 3 * W.size;
    int64_t *idx = malloc((size_t)nmax * sizeof *idx);
    char *buf = malloc((size_t)(nmax * rb));
    int ok = 1, repeats = 0;
    for (int iter = 0; iter < 5; iter++) {
        /* 200 + 3*rank indices; on iteration 2 the last rank asks for nothing. */
        int64_t n = 200 + 3 * W.rank;
        if (iter == 2 && W.rank == W.size - 1)
            n = 0;
        rng r = rng_make(1234, RNG_TEST, (uint64_t)W.rank, (uint64_t)iter);
        for (int64_t i = 0; i < n; i++)
            idx[i] = (int64_t)rng_below(&r, (uint64_t)total);
        for (int64_t i = 1; i < n; i++)
            repeats += idx[i] == idx[i - 1] || idx[i] == idx[0];
        memset(buf, 0xcd, (size_t)(nmax * rb));
        int rc = store_get_batch(s, var, idx, n, n ? buf : NULL, (size_t)(n * rb));
        ok &= rc == 0 && rows_ok(STORE_INT32, re, idx, n, buf);
    }
    CHECK(ok, "random batches with repeats across all ranks: %s", err_msg());
    /* A batch made of one row repeated. */
    for (int64_t i = 0; i < 50; i++)
        idx[i] = total - 1;
    CHECK(store_get_batch(s, var, idx, 50, buf, (size_t)(50 * rb)) == 0 &&
              rows_ok(STORE_INT32, re, idx, 50, buf),
          "one row repeated 50 times");
    /* Reversed full range compared row by row with get(). */
    int64_t *rev = malloc((size_t)total * sizeof *rev);
    for (int64_t i = 0; i < total; i++)
        rev[i] = total - 1 - i;
    char *rb1 = malloc((size_t)total * (size_t)rb), *rb2 = malloc((size_t)total * (size_t)rb);
    int rc = store_get_batch(s, var, rev, total, rb1, (size_t)(total * rb));
    ok = rc == 0;
    for (int64_t i = 0; i < total; i++)
        ok &= store_get(s, var, rev[i], 1, rb2 + i * rb, (size_t)rb) == 0;
    CHECK(ok && !memcmp(rb1, rb2, (size_t)(total * rb)) &&
              rows_ok(STORE_INT32, re, rev, total, rb1),
          "reversed full range == per-row get");
    /* Single row. */
    int64_t one = W.rank % total;
    CHECK(store_get_batch(s, var, &one, 1, buf, (size_t)rb) == 0 &&
              rows_ok(STORE_INT32, re, &one, 1, buf),
          "single-row batch");
    free(rev);
    free(rb1);
    free(rb2);
    free(idx);
    free(buf);
    store_free(&s);
}

/* Result every rank must see for an error made on rank `bad` only: with coll the error is agreed,
 * with rma it stays on the rank that made it. */
static int want_code(int bad, int code) {
    return (METHOD == STORE_COLL || W.rank == bad) ? code : 0;
}

/* ≙ test_batch_errors_leave_store_usable, extended: errors on one rank only, agreed or local
 * as the method says, then a valid call works. */
static void test_errors(void) {
    store *s = open_store();
    int var = -1;
    const int64_t re = 4;
    CHECK(add_var(s, "err", STORE_FLOAT32, re, rows_even, &var) == 0, "add: %s", err_msg());
    const int64_t total = total_rows(rows_even), rb = re * 4;
    int64_t idx[8] = {0, total - 1, 1, 2, 3, 4, 5, 6};
    char buf[8 * 16];
    const int bad = W.size - 1; /* the rank that misbehaves */
    int rc;

    int64_t oob[2] = {0, total};
    rc = store_get_batch(s, var, W.rank == bad ? oob : idx, 2, buf, sizeof buf);
    CHECK(rc == want_code(bad, ERR_RANGE), "index == total on rank %d: got %d (%s)", bad, rc,
          err_msg());
    if (rc)
        CHECK(strstr(err_msg(), "outside") != NULL, "message names the range: %s", err_msg());
    int64_t neg = -1;
    rc = store_get_batch(s, var, W.rank == bad ? &neg : idx, 1, buf, sizeof buf);
    CHECK(rc == want_code(bad, ERR_RANGE), "negative index: got %d", rc);
    /* 3 rows into a 2-row buffer (DDStore's ValueError). */
    rc = store_get_batch(s, var, idx, W.rank == bad ? 3 : 2, buf, (size_t)(2 * rb));
    CHECK(rc == want_code(bad, ERR_USAGE), "3 rows into 2 rows of space: got %d (%s)", rc,
          err_msg());
    /* Wrong element size ≙ a float64 buffer sized for float32 rows is too small the other way. */
    rc = store_get(s, var, 0, 2, buf, W.rank == bad ? (size_t)rb : sizeof buf);
    CHECK(rc == want_code(bad, ERR_USAGE), "get into a short buffer: got %d", rc);
    rc = store_get(s, var, W.rank == bad ? total - 1 : 0, 2, buf, sizeof buf);
    CHECK(rc == want_code(bad, ERR_RANGE), "range past the end: got %d", rc);
    rc = store_get(s, W.rank == bad ? 99 : var, 0, 1, buf, sizeof buf);
    CHECK(rc == want_code(bad, ERR_NOTFOUND), "unknown variable: got %d", rc);
    rc = store_get_batch(s, var, W.rank == bad ? NULL : idx, 1, buf, sizeof buf);
    CHECK(rc == want_code(bad, ERR_USAGE), "NULL index list: got %d", rc);
    rc = store_get(s, var, 0, W.rank == bad ? -1 : 1, buf, sizeof buf);
    CHECK(rc == want_code(bad, ERR_USAGE), "negative count: got %d", rc);
    CHECK(store_find(s, "nope") == ERR_NOTFOUND, "find of an unknown name");
    /* The store is still usable. */
    memset(buf, 0, sizeof buf);
    rc = store_get_batch(s, var, idx, 8, buf, sizeof buf);
    CHECK(rc == 0 && rows_ok(STORE_FLOAT32, re, idx, 8, buf), "valid batch after errors: %s",
          err_msg());

    /* Collective add errors are agreed on every rank and leave no variable behind. */
    int v2 = -1;
    rc = store_add(s, "mismatch", STORE_FLOAT32, W.rank == bad && W.size > 1 ? 5 : 4, 2, NULL,
                   &v2);
    if (W.size > 1)
        CHECK(rc == ERR_USAGE && strstr(err_msg(), "row_elems"), "row shape mismatch: %d %s", rc,
              err_msg());
    rc = store_add(s, "err", STORE_FLOAT32, 4, 2, NULL, &v2);
    CHECK(rc == ERR_USAGE, "duplicate name refused: %d", rc);
    rc = store_add(s, W.rank == bad ? "" : "ok", STORE_FLOAT32, 4, 2, NULL, &v2);
    CHECK(rc == ERR_USAGE, "an empty name on one rank fails on every rank: %d", rc);
    rc = store_add(s, "neg", STORE_INT32, 1, W.rank == bad ? -5 : 1, NULL, &v2);
    CHECK(rc == ERR_USAGE, "negative nrows on one rank fails on every rank: %d", rc);
    rc = store_add(s, "type", (store_type)99, 1, 1, NULL, &v2);
    CHECK(rc == ERR_USAGE, "invalid type refused: %d", rc);
    rc = add_var(s, "after", STORE_INT32, 2, rows_uneven, &v2);
    CHECK(rc == 0 && v2 == var + 1 + (W.size == 1), "a valid add after failed adds gets the next id: %d %d", rc,
          v2);
    int64_t last = total_rows(rows_uneven) - 1;
    CHECK(store_get(s, v2, last, 1, buf, sizeof buf) == 0 &&
              rows_ok(STORE_INT32, 2, &last, 1, buf),
          "new variable readable");
    store_free(&s);

    /* Options checked at create, agreed. */
    store_opts o = OPTS;
    o.coll_max_bytes = W.rank == bad ? 0 : o.coll_max_bytes;
    rc = store_create(&s, W.comm, &o);
    CHECK(rc == ERR_USAGE && s == NULL, "zero round cap on one rank: %d", rc);
    o = OPTS;
    o.coll_max_bytes = W.size > 1 && W.rank == bad ? 12345 : 54321;
    rc = store_create(&s, W.comm, &o);
    CHECK(W.size == 1 ? rc == 0 : rc == ERR_USAGE, "round cap differing across ranks: %d", rc);
    store_free(&s);
}

/* ≙ cap sweep (coll: cap < row gives one row per round, a huge cap gives one round) and split
 * reads (rma: rows of 3001 float32 = 12004 B with 4096-byte Gets). */
static void test_caps(void) {
    const int64_t caps[3] = {100, 4 * 12004 + 5, (int64_t)1 << 40};
    for (int c = 0; c < 3; c++) {
        store_opts o = OPTS;
        o.coll_max_bytes = caps[c];
        o.max_read_bytes = c == 0 ? 4096 : OPTS.max_read_bytes;
        store *s = NULL;
        CHECK(store_create(&s, W.comm, &o) == 0, "create: %s", err_msg());
        int var = -1;
        CHECK(add_var(s, "wide", STORE_FLOAT32, 3001, rows_uneven, &var) == 0, "add wide: %s",
              err_msg());
        const int64_t total = total_rows(rows_uneven), rb = 12004, n = 37;
        int64_t idx[37];
        rng r = rng_make(99, RNG_TEST, (uint64_t)W.rank, (uint64_t)c + 10);
        for (int64_t i = 0; i < n; i++)
            idx[i] = i % 5 == 4 ? idx[i - 1] + 1 < total ? idx[i - 1] + 1 : 0
                                : (int64_t)rng_below(&r, (uint64_t)total);
        char *buf = malloc((size_t)(n * rb));
        int rc = store_get_batch(s, var, idx, n, buf, (size_t)(n * rb));
        CHECK(rc == 0 && rows_ok(STORE_FLOAT32, 3001, idx, n, buf),
              "cap %lld, max read %lld: batch of 12004-byte rows: %s", (long long)o.coll_max_bytes,
              (long long)o.max_read_bytes, err_msg());
        free(buf);
        buf = malloc((size_t)(total * rb));
        rc = store_get(s, var, 0, total, buf, (size_t)(total * rb));
        int64_t *all = malloc((size_t)total * sizeof *all);
        for (int64_t i = 0; i < total; i++)
            all[i] = i;
        CHECK(rc == 0 && rows_ok(STORE_FLOAT32, 3001, all, total, buf),
              "cap %lld: whole range", (long long)o.coll_max_bytes);
        free(all);
        free(buf);
        store_free(&s);
    }
}

/* ≙ 4 threads x 50 batches of 32 on one variable (DDStore: method 1 only), while the main
 * thread does the training loop's MPI collectives on the user communicator. */
typedef struct {
    store *s;
    int var, tid, ok;
    int64_t total;
    char msg[256];
} thread_arg;

static void *reader(void *p) {
    thread_arg *a = p;
    int64_t idx[32];
    char *buf = malloc(32 * 40);
    a->ok = 1;
    for (int b = 0; b < 50 && a->ok; b++) {
        rng r = rng_make(7, RNG_TEST, (uint64_t)(W.rank * 16 + a->tid), (uint64_t)b);
        for (int i = 0; i < 32; i++)
            idx[i] = (int64_t)rng_below(&r, (uint64_t)a->total);
        int rc = store_get_batch(a->s, a->var, idx, 32, buf, 32 * 40);
        if (rc || !rows_ok(STORE_FLOAT64, 5, idx, 32, buf)) {
            a->ok = 0;
            snprintf(a->msg, sizeof a->msg, "batch %d: rc %d %s", b, rc, err_msg());
        }
    }
    free(buf);
    return NULL;
}

static void test_threads(void) {
    store_opts o = OPTS;
    o.profile = 1; /* the counters are updated by all threads at once */
    store *s = NULL;
    CHECK(store_create(&s, W.comm, &o) == 0, "create: %s", err_msg());
    int var = -1;
    CHECK(add_var(s, "threads", STORE_FLOAT64, 5, rows_even, &var) == 0, "add: %s", err_msg());
    if (!store_thread_safe(s)) {
        if (W.rank == 0)
            printf("skip threads: store_thread_safe() is 0 (method %s, thread level %d)\n",
                   store_method_name(METHOD), W.thread_level);
        store_free(&s);
        return;
    }
    thread_arg args[4];
    pthread_t th[4];
    for (int t = 0; t < 4; t++) {
        args[t] = (thread_arg){.s = s, .var = var, .tid = t, .total = total_rows(rows_even)};
        pthread_create(&th[t], NULL, reader, &args[t]);
    }
    /* Meanwhile: "gradient all-reduces" on the user's communicator. */
    double x = 1.0, sum = 0;
    int allred_ok = 1;
    for (int i = 0; i < 200; i++) {
        MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, W.comm);
        allred_ok &= sum == (double)W.size;
    }
    int ok = 1;
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        if (!args[t].ok)
            fprintf(stderr, "  rank %d thread %d: %s\n", W.rank, t, args[t].msg);
        ok &= args[t].ok;
    }
    CHECK(ok, "4 threads x 50 batches of 32 rows, all verified");
    store_profile pr;
    CHECK(store_get_profile(s, var, &pr, 0) == 0 && pr.calls == 4 * 50 && pr.rows == 4 * 50 * 32,
          "profile counted every thread's calls: %llu calls, %llu rows",
          (unsigned long long)pr.calls, (unsigned long long)pr.rows);
    CHECK(allred_ok, "concurrent all-reduces on the main thread");
    store_free(&s);
}

/* store_get_profile: exact call/row/remote/byte counts when on, zeros when off, reset. */
static void test_profile(void) {
    for (int on = 0; on <= 1; on++) {
        store_opts o = OPTS;
        o.profile = on;
        store *s = NULL;
        CHECK(store_create(&s, W.comm, &o) == 0, "create: %s", err_msg());
        int var = -1;
        CHECK(add_var(s, "prof", STORE_INT32, 4, rows_even, &var) == 0, "add: %s", err_msg());
        const int64_t total = total_rows(rows_even), per = rows_even(0);
        int64_t idx[20];
        uint64_t remote = 0;
        for (int i = 0; i < 20; i++) {
            idx[i] = (i * 7 + W.rank * 3) % total;
            remote += idx[i] / per != W.rank;
        }
        char buf[20 * 16];
        int ok = store_get_batch(s, var, idx, 20, buf, sizeof buf) == 0;
        ok &= store_get(s, var, 0, 1, buf, sizeof buf) == 0;
        remote += W.rank != 0;
        store_profile pr;
        CHECK(ok && store_get_profile(s, var, &pr, 1) == 0, "reads and profile");
        if (on)
            CHECK(pr.calls == 2 && pr.rows == 21 && pr.remote_rows == remote &&
                      pr.bytes == 21 * 16 && pr.post_ns + pr.wait_ns + pr.copy_ns > 0,
                  "profile counts: calls %llu rows %llu remote %llu (want %llu) bytes %llu",
                  (unsigned long long)pr.calls, (unsigned long long)pr.rows,
                  (unsigned long long)pr.remote_rows, (unsigned long long)remote,
                  (unsigned long long)pr.bytes);
        else
            CHECK(pr.calls == 0 && pr.rows == 0 && pr.post_ns == 0, "profile off: zeros");
        CHECK(store_get_profile(s, var, &pr, 0) == 0 && pr.calls == 0 && pr.rows == 0,
              "reset zeroes the counters");
        CHECK(store_get_profile(s, 42, &pr, 0) == ERR_NOTFOUND, "profile of an unknown var");
        store_free(&s);
    }
}

/* The integration pattern: one loader thread per rank calls get_batch (both methods: coll is
 * fine from a single thread per rank) while the main thread runs the training collectives. */
typedef struct {
    store *s;
    int var, ok;
    int64_t total;
} loader_arg;

static void *loader(void *p) {
    loader_arg *a = p;
    int64_t idx[16];
    char *buf = malloc(16 * 24);
    a->ok = 1;
    for (int b = 0; b < 40 && a->ok; b++) {
        rng r = rng_make(11, RNG_TEST, (uint64_t)W.rank, (uint64_t)b);
        /* Different sizes per rank and batch; 0 sometimes (coll must allow it). */
        int64_t n = (int64_t)rng_below(&r, 17);
        for (int64_t i = 0; i < n; i++)
            idx[i] = (int64_t)rng_below(&r, (uint64_t)a->total);
        int rc = store_get_batch(a->s, a->var, idx, n, buf, 16 * 24);
        a->ok &= rc == 0 && rows_ok(STORE_INT64, 3, idx, n, buf);
    }
    free(buf);
    return NULL;
}

static void test_loader_thread(void) {
    if (W.thread_level < MPI_THREAD_MULTIPLE) {
        if (W.rank == 0)
            printf("skip loader thread: MPI thread level %d\n", W.thread_level);
        return;
    }
    store *s = open_store();
    int var = -1;
    CHECK(add_var(s, "loader", STORE_INT64, 3, rows_uneven, &var) == 0, "add: %s", err_msg());
    loader_arg a = {.s = s, .var = var, .total = total_rows(rows_uneven)};
    pthread_t th;
    pthread_create(&th, NULL, loader, &a);
    double x = 2.0, sum = 0;
    int ok = 1;
    for (int i = 0; i < 100; i++) {
        MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, W.comm);
        ok &= sum == 2.0 * W.size;
    }
    pthread_join(th, NULL);
    CHECK(a.ok && ok, "a loader thread's batches next to main-thread all-reduces");
    store_free(&s);
}

/* Passive target progress (rma): rank 0 makes no MPI call for 1 s while every other rank
 * reads its rows. The reads must not wait for rank 0 to call MPI again (a training step that
 * computes would otherwise stall every reader). */
static void test_passive_progress(void) {
    if (METHOD != STORE_RMA || W.size < 2)
        return;
    store *s = open_store();
    int var = -1;
    CHECK(add_var(s, "progress", STORE_INT32, 16, rows_even, &var) == 0, "add: %s", err_msg());
    MPI_Barrier(W.comm);
    double worst = 0;
    if (W.rank == 0) {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
    } else {
        char buf[64];
        int ok = 1;
        double t0 = MPI_Wtime();
        for (int64_t g = 0; g < 100; g++) {
            int64_t row = g % rows_even(0); /* rank 0's rows */
            ok &= store_get(s, var, row, 1, buf, sizeof buf) == 0 &&
                  rows_ok(STORE_INT32, 16, &row, 1, buf);
        }
        worst = MPI_Wtime() - t0;
        CHECK(ok, "reads from a rank that makes no MPI calls");
        /* A read that needs the target's progress waits for the whole second. Under MPICH the
         * progress comes from a thread per rank (MPIR_CVAR_ASYNC_PROGRESS=1, set by run.sh):
         * with more ranks than cores it waits for a core, so the time is not a test there. */
        int timed = 1;
#ifdef MPICH_VERSION
        timed = W.size <= sysconf(_SC_NPROCESSORS_ONLN);
#endif
        if (timed)
            CHECK(worst < 0.5, "100 reads from a busy target took %.3f s (target idle 1 s)",
                  worst);
    }
    MPI_Barrier(W.comm);
    store_free(&s);
}

/* 64-bit sizes (run with the extra argument "big"; needs ~2.2 GiB): rank 0 holds 2^31 + 64
 * one-byte rows, so global indices, local offsets and window displacements pass 2^31, and a
 * range read crosses that boundary. Rows near 2^31 carry markers written with store_update. */
static uint8_t big_marker(int64_t g) { return (uint8_t)(g * 31 + 7) | 1; }

static void test_big(void) {
    const int64_t big = ((int64_t)1 << 31) + 64;
    const int64_t nrows = W.rank == 0 ? big : 64;
    store *s = open_store();
    int var = -1;
    int rc = store_add(s, "big", STORE_BYTE, 1, nrows, NULL, &var);
    CHECK(rc == 0, "add %lld one-byte rows on rank 0: %s", (long long)big, err_msg());
    if (rc) {
        store_free(&s);
        return;
    }
    /* Markers on local rows [2^31 - 64, 2^31 + 64) of rank 0, and on every row elsewhere. */
    const int64_t lo = W.rank == 0 ? ((int64_t)1 << 31) - 64 : 0, n = W.rank == 0 ? 128 : 64;
    store_var_info info;
    store_info(s, var, &info);
    uint8_t mk[128];
    for (int64_t i = 0; i < n; i++)
        mk[i] = big_marker(info.first_row + lo + i);
    CHECK(store_update(s, var, lo, n, mk) == 0, "update near 2^31");
    CHECK(store_sync(s) == 0, "sync");
    const int64_t two31 = (int64_t)1 << 31;
    int64_t idx[8] = {two31 + 3, two31 - 1, two31, info.total_rows - 1, two31 + 63, 5, two31 - 64,
                      two31 + 3};
    uint8_t got[256];
    rc = store_get_batch(s, var, idx, 8, got, sizeof got);
    int ok = rc == 0;
    for (int i = 0; i < 8; i++) {
        int64_t g = idx[i];
        uint8_t want = (g >= two31 - 64 && g < big) || g >= big ? big_marker(g) : 0;
        ok &= got[i] == want;
    }
    CHECK(ok, "batch of indices around 2^31: %s", err_msg());
    /* A range across the 2^31 boundary (and, with 2+ ranks, across rank 0's end). */
    const int64_t start = two31 - 40, cnt = W.size > 1 ? 64 + 40 + 20 : 80;
    rc = store_get(s, var, start, cnt, got, sizeof got);
    ok = rc == 0;
    for (int64_t i = 0; i < cnt; i++)
        ok &= got[i] == big_marker(start + i);
    CHECK(ok, "range [2^31 - 40, +%lld): %s", (long long)cnt, err_msg());
    int64_t owner_local = -1;
    int owner = -1;
    CHECK(store_owner(s, var, two31 + 1, &owner, &owner_local) == 0 && owner == 0 &&
              owner_local == two31 + 1,
          "owner of row 2^31 + 1");
    store_free(&s);
}

int main(int argc, char **argv) {
    if (dist_init(&W, &argc, &argv)) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    const char *m = argc > 1 ? argv[1] : "rma";
    store_opts_default(&OPTS);
    if (store_method_parse(m, &METHOD)) {
        fprintf(stderr, "%s\n", err_msg());
        return 2;
    }
    OPTS.method = METHOD;
    if (argc > 2 && !strcmp(argv[2], "big")) {
        test_big();
        int c[2] = {test_passed, test_failed}, sum[2];
        MPI_Allreduce(c, sum, 2, MPI_INT, MPI_SUM, W.comm);
        if (W.rank == 0)
            printf("%d passed, %d failed\n", sum[0], sum[1]);
        dist_finalize(&W);
        return sum[1] ? 1 : 0;
    }
    /* Parsing and the opaque handle's NULL behaviour. */
    store_method mm;
    CHECK(store_method_parse("coll", &mm) == 0 && mm == STORE_COLL, "parse coll");
    CHECK(store_method_parse("RMA", &mm) == ERR_USAGE, "parse is strict");
    CHECK(store_free(NULL) == 0, "store_free(NULL)");
    /* nsplit: contiguous, covering, sizes differ by at most one (DDStore's _nsplit). */
    int split_ok = 1;
    for (int64_t n = 0; n < 40; n++)
        for (int P = 1; P <= 7; P++) {
            int64_t prev = 0;
            for (int r = 0; r < P; r++) {
                int64_t lo, hi;
                store_nsplit(n, P, r, &lo, &hi);
                split_ok &= lo == prev && hi >= lo && hi - lo >= n / P && hi - lo <= n / P + 1;
                prev = hi;
            }
            split_ok &= prev == n;
        }
    CHECK(split_ok, "store_nsplit partitions 0..n-1 in rank order");

    test_roundtrip_types();
    test_init_update();
    test_two_vars_and_empty_rank();
    test_batches();
    test_errors();
    test_caps();
    test_threads();
    test_profile();
    test_loader_thread();
    test_passive_progress();

    int counts[2] = {test_passed, test_failed}, sums[2];
    MPI_Allreduce(counts, sums, 2, MPI_INT, MPI_SUM, W.comm);
    if (W.rank == 0)
        printf("%d passed, %d failed\n", sums[0], sums[1]);
    dist_finalize(&W);
    return sums[1] ? 1 : 0;
}
