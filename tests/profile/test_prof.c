/* test_prof: the region timer (core/prof.h) and the .cali writer and reader (core/cali.h). */
#include "core/cali.h"
#include "core/err.h"
#include "core/prof.h"
#include "test.h"

#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Spins at least us microseconds (in nanoseconds: a microsecond count truncated a negative
 * nanosecond difference toward zero when the spin crossed a second, ending up to 1 us early). */
static void spin_us(long us) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do
        clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < us * 1000L);
}

/* The node of a path ("a/b") in a tree, or -1. */
static int node_of(const prof_node *nd, size_t n, const char *path) {
    char buf[1024];
    for (size_t i = 0; i < n; i++) {
        prof_path(nd, i, buf, sizeof buf);
        if (!strcmp(buf, path))
            return (int)i;
    }
    return -1;
}

static void test_off(void) {
    prof_reset();
    prof_begin(PROF_EPOCH);
    prof_end(PROF_EPOCH);
    prof_node *nd;
    size_t n;
    CHECK(prof_tree(&nd, &n) == 0 && n == 0, "off: nothing recorded (%zu nodes)", n);
    CHECK(prof_nthreads() == 0, "off: no thread state made (%d)", prof_nthreads());
    free(nd);
}

static void test_nesting(void) {
    prof_reset();
    CHECK(prof_start(1000) == 0, "start");
    for (int k = 0; k < 3; k++) {
        prof_begin(PROF_EPOCH);
        spin_us(200);
        prof_begin(PROF_BATCH_LOOP);
        spin_us(300);
        prof_end(PROF_BATCH_LOOP);
        prof_end(PROF_EPOCH);
    }
    /* an early return: the end of the outer region closes the inner one */
    prof_begin(PROF_VALIDATION);
    prof_begin(PROF_FORWARD);
    prof_begin(PROF_LOSS);
    prof_end(PROF_VALIDATION);
    prof_end(PROF_CHECKPOINT); /* never opened: ignored */
    prof_stop();
    prof_node *nd;
    size_t n;
    CHECK(prof_tree(&nd, &n) == 0, "tree");
    const int e = node_of(nd, n, "epoch"), b = node_of(nd, n, "epoch/batch_loop");
    CHECK(e >= 0 && b >= 0 && nd[b].parent == e, "epoch/batch_loop nested");
    if (e >= 0 && b >= 0) {
        CHECK(nd[e].count == 3 && nd[b].count == 3, "counts %llu %llu",
              (unsigned long long)nd[e].count, (unsigned long long)nd[b].count);
        CHECK(nd[b].incl_ns >= 3 * 300000 && nd[e].incl_ns >= nd[b].incl_ns + 3 * 200000,
              "inclusive times %lld %lld", (long long)nd[e].incl_ns, (long long)nd[b].incl_ns);
        CHECK(nd[e].excl_ns == nd[e].incl_ns - nd[b].incl_ns && nd[b].excl_ns == nd[b].incl_ns,
              "exclusive = inclusive - children");
        CHECK(nd[e].depth == 0 && nd[b].depth == 1, "depths");
    }
    const int l = node_of(nd, n, "validation/forward/loss");
    CHECK(l >= 0 && nd[l].count == 1, "an outer end closes the regions opened inside it");
    CHECK(node_of(nd, n, "checkpoint") < 0, "an end without a begin records nothing");
    /* timeline: one event per closed region, inside their parents */
    prof_thread_view v;
    prof_thread_get(0, &v);
    CHECK(v.nevents == 9 && v.dropped == 0, "events %zu dropped %llu", v.nevents,
          (unsigned long long)v.dropped);
    CHECK(!strcmp(v.name, "main"), "the starting thread is named main (%s)", v.name);
    int ok = 1;
    for (size_t i = 0; i < v.nevents; i++)
        ok &= v.events[i].t1 >= v.events[i].t0 && v.events[i].t0 >= 0;
    CHECK(ok, "event times ordered and after time zero");
    free(nd);
}

static void *worker(void *arg) {
    (void)arg;
    prof_thread_name("checkpoint_writer");
    prof_begin(PROF_CHECKPOINT_WRITER);
    prof_begin(PROF_WRITE);
    spin_us(100);
    prof_end(PROF_WRITE);
    prof_end(PROF_CHECKPOINT_WRITER);
    return NULL;
}

static void test_threads_and_limits(void) {
    prof_reset();
    CHECK(prof_start(4) == 0, "start with 4 events per thread");
    prof_begin(PROF_MAIN);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    for (int k = 0; k < 10; k++) {
        prof_begin(PROF_MINIBATCH);
        prof_end(PROF_MINIBATCH);
    }
    /* deeper than the stack: timed by the enclosing region, the ends still match */
    for (int k = 0; k < PROF_MAX_DEPTH + 5; k++)
        prof_begin(PROF_FORWARD);
    for (int k = 0; k < PROF_MAX_DEPTH + 5; k++)
        prof_end(PROF_FORWARD);
    prof_begin(PROF_LOSS);
    prof_end(PROF_LOSS);
    prof_end(PROF_MAIN);
    prof_stop();
    CHECK(prof_nthreads() == 2, "two threads (%d)", prof_nthreads());
    prof_thread_view v0, v1;
    prof_thread_get(0, &v0);
    prof_thread_get(1, &v1);
    CHECK(!strcmp(v1.name, "checkpoint_writer") && v1.nevents == 2 && v1.tid != v0.tid,
          "the writer's track: %s, %zu events", v1.name, v1.nevents);
    CHECK(v0.nevents == 4 && v0.dropped > 0, "events past the buffer are dropped (%zu, %llu)",
          v0.nevents, (unsigned long long)v0.dropped);
    prof_node *nd;
    size_t n;
    CHECK(prof_tree(&nd, &n) == 0, "tree");
    int mb = node_of(nd, n, "main/minibatch"), w = node_of(nd, n, "checkpoint_writer/write");
    CHECK(mb >= 0 && nd[mb].count == 10, "the tree counts regions whose events were dropped");
    CHECK(w >= 0 && nd[w].parent >= 0 && nd[nd[w].parent].parent == -1,
          "another thread's regions are a root of their own");
    CHECK(node_of(nd, n, "main/loss") >= 0, "the stack is sound after going past its depth");
    int f = node_of(nd, n, "main/forward");
    CHECK(f >= 0 && nd[f].count == 1, "regions past the depth limit are not counted apart");
    free(nd);
}

static void test_names(void) {
    prof_reset();
    const int a = prof_id("down_list.3", PROF_KIND_REGION);
    CHECK(a >= PROF_NFIXED && prof_id("down_list.3", PROF_KIND_REGION) == a, "interned");
    CHECK(!strcmp(prof_name(a), "down_list.3"), "name back");
    CHECK(prof_id("epoch", PROF_KIND_REGION) == PROF_EPOCH, "fixed names are found");
    CHECK(prof_kind_of(PROF_MPI_ALLREDUCE) == PROF_KIND_MPI, "MPI kind");
    const int bad = prof_id("a/b", PROF_KIND_REGION);
    CHECK(!strcmp(prof_name(bad), "(other)"), "a name with '/' is (other): %s", prof_name(bad));
    char longname[200];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    CHECK(prof_id(longname, PROF_KIND_REGION) == bad, "a name too long is (other)");
    prof_reset();
}

/* ---- .cali ------------------------------------------------------------------------------ */

static void test_cali_roundtrip(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/rt.cali", dir);
    FILE *fp = fopen(path, "w");
    cali_writer w;
    cali_w_init(&w, fp);
    int64_t reg = cali_w_attr(&w, "region", CALI_TYPE_STRING, CALI_PROP_NESTED | 20, NULL, NULL);
    int64_t t = cali_w_attr(&w, "avg#inclusive#sum#time.duration", CALI_TYPE_DOUBLE,
                            CALI_PROP_ASVALUE, "Avg time/rank", "sec");
    int64_t a = cali_w_node(&w, reg, "main", -1);
    int64_t b = cali_w_node(&w, reg, "odd,name=with\\escapes", a);
    const char *v1[1] = {"1.5"}, *v2[1] = {"0.25"};
    cali_w_ctx(&w, &a, 1, &t, v1, 1);
    cali_w_ctx(&w, &b, 1, &t, v2, 1);
    cali_w_adiak(&w, "cmdline", CALI_TYPE_STRING, "set of string", "runinfo", "[a,b=c]");
    cali_w_adiak(&w, "jobsize", CALI_TYPE_UINT, "unsigned int", "mpi", "4");
    cali_w_global(&w, "note", CALI_TYPE_STRING, "two\nlines");
    cali_w_globals(&w);
    fclose(fp);
    cali_file f;
    CHECK(cali_read(path, &f) == 0, "read back: %s", err_msg());
    if (!f.nctx)
        return;
    CHECK(f.nctx == 2, "two records");
    char p[256];
    CHECK(cali_ctx_path(&f, &f.ctx[1], p, sizeof p) == 2 &&
              !strcmp(p, "main/odd,name=with\\escapes"),
          "escaped path: %s", p);
    const char *v = cali_ctx_value(&f, &f.ctx[1], "avg#inclusive#sum#time.duration");
    CHECK(v && !strcmp(v, "0.25"), "value");
    CHECK(cali_attr_prop(&f, t) == CALI_PROP_ASVALUE && !strcmp(cali_attr_type(&f, t), "double"),
          "attribute properties and type");
    CHECK(!strcmp(cali_global(&f, "cmdline"), "[a,b=c]") &&
              !strcmp(cali_global(&f, "jobsize"), "4") &&
              !strcmp(cali_global(&f, "note"), "two\nlines"),
          "globals");
    CHECK(cali_global(&f, "nothing") == NULL, "absent global");
    cali_free(&f);
}

/* A file laid out as Caliper's spot service writes one (function and loop attributes, an MPI
 * function, metrics with aliases, Adiak globals in a chain), typed for this test. */
static const char *const caliper_style =
    "__rec=node,id=12,attr=10,data=64,parent=3\n"
    "__rec=node,id=13,attr=8,data=attribute.alias,parent=12\n"
    "__rec=node,id=20,attr=13,data=Avg time/rank,parent=5\n"
    "__rec=node,id=21,attr=10,data=65,parent=20\n"
    "__rec=node,id=22,attr=8,data=avg#inclusive#sum#time.duration,parent=21\n"
    "__rec=node,id=30,attr=10,data=268,parent=3\n"
    "__rec=node,id=31,attr=8,data=function,parent=30\n"
    "__rec=node,id=32,attr=8,data=loop,parent=30\n"
    "__rec=node,id=33,attr=8,data=mpi.function,parent=30\n"
    "__rec=node,id=40,attr=31,data=main\n"
    "__rec=ctx,ref=40,attr=22,data=10.0\n"
    "__rec=node,id=41,attr=32,data=cycle,parent=40\n"
    "__rec=ctx,ref=41,attr=22,data=9.5\n"
    "__rec=node,id=42,attr=33,data=MPI_Allreduce,parent=41\n"
    "__rec=ctx,ref=42,attr=22,data=1.25\n"
    "__rec=node,id=50,attr=10,data=1612,parent=3\n"
    "__rec=node,id=51,attr=8,data=cali.caliper.version,parent=50\n"
    "__rec=node,id=52,attr=51,data=2.10.0\n"
    "__rec=node,id=53,attr=8,data=user,parent=50\n"
    "__rec=node,id=54,attr=53,data=someone,parent=52\n"
    "__rec=globals,ref=54\n";

static int write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    if (!fp)
        return -1;
    fputs(text, fp);
    return fclose(fp);
}

static void test_cali_caliper_style(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/spot.cali", dir);
    write_text(path, caliper_style);
    cali_file f;
    CHECK(cali_read(path, &f) == 0, "Caliper-style file: %s", err_msg());
    if (f.nctx != 3)
        return;
    char p[256];
    cali_ctx_path(&f, &f.ctx[2], p, sizeof p);
    CHECK(!strcmp(p, "main/cycle/MPI_Allreduce"), "path over function, loop, mpi.function: %s",
          p);
    CHECK(!strcmp(cali_global(&f, "user"), "someone") &&
              !strcmp(cali_global(&f, "cali.caliper.version"), "2.10.0"),
          "chained globals");
    cali_free(&f);
}

static void expect_bad(const char *dir, const char *name, const char *text, int code,
                       const char *word) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (text)
        write_text(path, text);
    cali_file f;
    int rc = cali_read(path, &f);
    CHECK(rc == code && strstr(err_msg(), path) && strstr(err_msg(), word),
          "%s: rc %d, message: %s", name, rc, err_msg());
    if (rc == 0)
        cali_free(&f);
}

static void test_cali_bad(const char *dir) {
    expect_bad(dir, "garbage.cali", "this is not a cali file\n", ERR_FORMAT, "__rec");
    expect_bad(dir, "empty.cali", "", ERR_FORMAT, "empty");
    expect_bad(dir, "truncated.cali", "__rec=node,id=12,attr=10,data=64,parent=3\n", ERR_FORMAT,
               "truncated");
    expect_bad(dir, "badref.cali", "__rec=ctx,ref=99,attr=8,data=x\n__rec=globals\n", ERR_FORMAT,
               "line 1");
    expect_bad(dir, "mismatch.cali",
               "__rec=node,id=12,attr=8,data=a\n__rec=ctx,ref=12,attr=8=8,data=1\n"
               "__rec=globals\n",
               ERR_FORMAT, "line 2");
    expect_bad(dir, "badnode.cali", "__rec=node,id=x,attr=8\n__rec=globals\n", ERR_FORMAT,
               "line 1");
    expect_bad(dir, "twice.cali",
               "__rec=node,id=12,attr=8,data=a\n__rec=node,id=12,attr=8,data=b\n__rec=globals\n",
               ERR_FORMAT, "second time");
    expect_bad(dir, "missing.cali", NULL, ERR_IO, "missing.cali");
}

int main(void) {
    char dir[] = "/tmp/scaffold-test-prof.XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    test_off();
    test_nesting();
    test_threads_and_limits();
    test_names();
    test_cali_roundtrip(dir);
    test_cali_caliper_style(dir);
    test_cali_bad(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return test_report();
}
