/* test_analyze: unit tests of the trace analyzer: JSON line scanning (v1 strings, v2 hashes,
 * escapes, malformed input), classification, Darshan bucket edges, multi-member and truncated
 * gzip, access-pattern classification, overlap, rule overrides, the do-less guard on the
 * strategy catalogue and the compare verdicts. Usage: test_analyze TMPDIR */
#include "analyze/compare.h"
#include "analyze/metrics.h"
#include "analyze/report.h"
#include "analyze/rules.h"
#include "analyze/trace.h"
#include "core/err.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

static const char *tmpdir;

static int parse(const char *s, an_rawev *ev) {
    return an_parse_line(s, s + strlen(s), ev);
}

static void test_parse(void) {
    an_rawev ev;
    CHECK(parse("[", &ev) == 0, "bracket line skipped");
    CHECK(parse("]", &ev) == 0, "closing bracket skipped");
    CHECK(parse("   ", &ev) == 0, "blank skipped");
    CHECK(parse("not json", &ev) == -1, "garbage is malformed");
    CHECK(parse("{\"name\":\"read\",\"ts\":12", &ev) == -1, "cut line is malformed");
    int r = parse("{\"id\":236,\"name\":\"pread\",\"cat\":\"POSIX\",\"pid\":1028567,\"tid\":1028567,"
                  "\"ts\":1744611915154466,\"dur\":3,\"ph\":\"X\",\"args\":{\"hhash\":"
                  "9509357668201227806,\"p_idx\":231,\"fd\":16,\"fhash\":16070890475139568535,"
                  "\"ret\":16,\"count\":16,\"offset\":0,\"level\":11}}",
                  &ev);
    CHECK(r == 1, "v1.0.8 line parses");
    CHECK(ev.ts == 1744611915154466LL && ev.dur == 3 && ev.pid == 1028567, "numbers");
    CHECK(ev.fhash_n == 20 && !memcmp(ev.fhash, "16070890475139568535", 20), "numeric hash kept raw");
    CHECK((ev.has & AN_RAW_RET) && ev.ret == 16 && (ev.has & AN_RAW_OFFSET) && ev.offset == 0,
          "ret/offset");
    r = parse(" {\"id\":\"5\",\"name\":\"write\",\"cat\":\"POSIX\",\"pid\":\"13\",\"tid\":\"2\",\"ts\":"
              "\"1698080323825066\",\"dur\":\"106189\",\"ph\":\"X\",\"args\":{\"hostname\":\"c237\","
              "\"ret\":\"3276800\",\"fname\":\"/p/a b\\\"q\\\\.bat\",\"fd\":18}}",
              &ev);
    CHECK(r == 1, "v1 all-strings line parses");
    CHECK(ev.ts == 1698080323825066LL && ev.dur == 106189 && ev.ret == 3276800, "quoted numbers");
    char buf[64];
    size_t n = an_json_unescape(ev.fname, ev.fname_n, buf, sizeof buf);
    buf[n] = 0;
    CHECK(!strcmp(buf, "/p/a b\"q\\.bat"), "escapes decoded: %s", buf);
    r = parse("{\"name\":\"PR\",\"cat\":\"dftracer\",\"pid\":7,\"ph\":\"M\",\"args\":{\"name\":"
              "\"core_affinity\",\"value\":[1,2,[3]]}},",
              &ev);
    CHECK(r == 1 && ev.m_value_n == 9, "array value kept raw, trailing comma ok (%d)", r);
    r = parse("{\"name\":\"x\",\"ts\":1.5e3,\"dur\":2,\"ph\":\"X\"} junk", &ev);
    CHECK(r == -1, "trailing junk is malformed");
    r = parse("{\"name\":\"x\",\"ts\":1.5e3,\"dur\":2,\"ph\":\"X\"}", &ev);
    CHECK(r == 1 && ev.ts == 1500, "float timestamp");
}

static void test_classify(void) {
    unsigned fl;
#define CL(n, c) an_classify(n, strlen(n), c, strlen(c), &fl)
    CHECK(CL("pread64", "POSIX") == AN_OP_READ && fl == AN_F_POSIX, "pread64 is a read");
    CHECK(CL("pwritev2", "posix") == AN_OP_WRITE, "pwritev2 is a write");
    CHECK(CL("openat", "POSIX") == AN_OP_META, "openat is metadata");
    CHECK(CL("newfstatat", "POSIX") == AN_OP_META, "newfstatat is metadata");
    CHECK(CL("fdatasync", "POSIX") == AN_OP_SYNC, "fdatasync is sync");
    CHECK(CL("fread", "STDIO") == AN_OP_READ && fl == AN_F_STDIO, "fread is a STDIO read");
    CHECK(CL("mmap", "POSIX") == AN_OP_IO_OTHER, "mmap is other");
    CHECK(CL("fetch.iter", "dataloader") == AN_OP_FETCH, "fetch.iter is the wait");
    CHECK(CL("fetch.block", "dataloader") == AN_OP_NONE, "fetch.block is the body");
    CHECK(CL("fetch", "dataloader") == AN_OP_FETCH, "our fetch");
    CHECK(CL("TFFramework.compute", "ai_framework") == AN_OP_COMPUTE, "DLIO compute");
    CHECK(CL("forward", "compute") == AN_OP_COMPUTE, "forward");
    CHECK(CL("capture", "checkpoint") == AN_OP_CKPT, "checkpoint");
    CHECK(CL("epoch.block", "pipeline") == AN_OP_EPOCH, "epoch.block");
    CHECK(CL("epoch", "pipeline") == AN_OP_EPOCH, "epoch");
    CHECK(CL("all_reduce", "comm") == AN_OP_COMM, "comm");
#undef CL
}

static void test_buckets(void) {
    CHECK(an_bucket_of(0) == 0 && an_bucket_of(100) == 0 && an_bucket_of(101) == 1, "0-100 edge");
    CHECK(an_bucket_of(1024) == 1 && an_bucket_of(1025) == 2, "1K edge");
    CHECK(an_bucket_of(1048576) == 4 && an_bucket_of(1048577) == 5, "1M edge");
    CHECK(an_bucket_of(4194304) == 5 && an_bucket_of(4194305) == 6, "4M edge");
    CHECK(an_bucket_of(1073741824) == 8 && an_bucket_of(1073741825) == 9, "1G edge");
}

/* Writes `text` as a gzip file of `members` independent members (split at line boundaries). */
static void write_gz(const char *path, const char *text, int members) {
    FILE *f = fopen(path, "wb");
    size_t len = strlen(text), per = len / (size_t)members + 1, off = 0;
    while (off < len) {
        size_t end = off + per < len ? off + per : len;
        while (end < len && text[end - 1] != '\n')
            end++;
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        deflateInit2(&zs, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY);
        unsigned char out[1 << 16];
        zs.next_in = (unsigned char *)text + off;
        zs.avail_in = (uInt)(end - off);
        do {
            zs.next_out = out;
            zs.avail_out = sizeof out;
            deflate(&zs, Z_FINISH);
            fwrite(out, 1, sizeof out - zs.avail_out, f);
        } while (zs.avail_out == 0);
        deflateEnd(&zs);
        off = end;
    }
    fclose(f);
}

static char *make_trace(int nreads) {
    size_t cap = 1 << 20, len = 0;
    char *s = malloc(cap);
    len += (size_t)snprintf(s + len, cap - len,
                            "[\n{\"name\":\"HH\",\"cat\":\"dftracer\",\"pid\":9,\"tid\":9,\"ph\":\"M\","
                            "\"args\":{\"name\":\"hostA\",\"value\":\"aa\"}}\n"
                            "{\"name\":\"FH\",\"cat\":\"dftracer\",\"pid\":9,\"tid\":9,\"ph\":\"M\","
                            "\"args\":{\"name\":\"/data/f.bin\",\"value\":\"ff\"}}\n");
    /* Offsets: 0, 4096 (consecutive), 16384 (sequential gap), 0 (random), then consecutive. */
    long long off[] = {0, 4096, 16384, 0, 4096};
    for (int i = 0; i < nreads; i++) {
        long long o = i < 5 ? off[i] : 4096LL * (i - 3);
        /* Written in reverse time order to exercise the sort. */
        len += (size_t)snprintf(s + len, cap - len,
                                "{\"name\":\"pread64\",\"cat\":\"POSIX\",\"pid\":9,\"tid\":9,\"ts\":%d,"
                                "\"dur\":10,\"ph\":\"X\",\"args\":{\"hhash\":\"aa\",\"fhash\":\"ff\","
                                "\"ret\":4096,\"offset\":%lld}}\n",
                                1000000 - i * 100, o);
    }
    len += (size_t)snprintf(s + len, cap - len, "]");
    return s;
}

static void test_gzip_and_patterns(void) {
    char p1[512], p2[512];
    snprintf(p1, sizeof p1, "%s/multi.pfw.gz", tmpdir);
    char *text = make_trace(400);
    write_gz(p1, text, 5);
    char *files[1] = {p1};
    an_trace t;
    an_read_opts o = {.threads = 2};
    int rc = an_trace_read(&t, files, 1, &o);
    CHECK(rc == 0, "multi-member read: %s", err_msg());
    CHECK(t.n == 400, "all 400 events read across members, got %zu", t.n);
    CHECK(t.inputs[0].members == 5, "5 members, got %llu", (unsigned long long)t.inputs[0].members);
    CHECK(!t.inputs[0].truncated && !t.inputs[0].malformed, "clean file");
    int sorted = 1;
    for (size_t i = 1; i < t.n; i++)
        sorted &= t.ts[i] >= t.ts[i - 1];
    CHECK(sorted, "events sorted by time");
    CHECK(t.n && !strcmp(an_strtab_get(&t.files, t.file[0]), "/data/f.bin"), "FH resolved");
    CHECK(t.nprocs == 1 && !strcmp(an_strtab_get(&t.hosts, t.procs[0].host), "hostA"),
          "HH resolved");
    an_trace_free(&t);
    /* Access patterns on 5 reads with known classes (time order = reversed file order). */
    snprintf(p2, sizeof p2, "%s/pattern.pfw", tmpdir);
    free(text);
    text = make_trace(5);
    /* make_trace writes times descending; the reader sorts ascending, so the first in time is
     * the last written: re-create with ascending offsets in time order by reversing. */
    FILE *f = fopen(p2, "w");
    fputs(text, f);
    fclose(f);
    files[0] = p2;
    rc = an_trace_read(&t, files, 1, &o);
    CHECK(rc == 0 && t.n == 5, "pattern file read");
    an_metrics m;
    rc = an_metrics_compute(&t, 0, &m);
    CHECK(rc == 0, "metrics");
    /* In time order the offsets are 4096, 0, 16384, 4096, 0 (the list reversed):
     * 4096 first-not-at-0 -> random; 0 < 8192 -> random; 16384 > 4096 -> sequential;
     * 4096 < 20480 -> random; 0 -> random. */
    CHECK(m.read_classified == 5, "5 classified, got %llu", (unsigned long long)m.read_classified);
    CHECK(m.read_random == 4 && m.read_seq == 1 && m.read_consec == 0,
          "random 4 / seq 1 / consec 0, got %llu/%llu/%llu", (unsigned long long)m.read_random,
          (unsigned long long)m.read_seq, (unsigned long long)m.read_consec);
    CHECK(m.hist_read[an_bucket_of(4096)] == 5, "histogram");
    CHECK(m.bytes_read == 5 * 4096, "bytes");
    an_metrics_free(&m);
    an_trace_free(&t);
    free(text);
    /* Truncation: cut the multi-member file in the middle of its third member. */
    char p3[512];
    snprintf(p3, sizeof p3, "%s/cut.pfw.gz", tmpdir);
    f = fopen(p1, "rb");
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *all = malloc((size_t)sz);
    size_t got = fread(all, 1, (size_t)sz, f);
    fclose(f);
    f = fopen(p3, "wb");
    fwrite(all, 1, got / 2, f);
    fclose(f);
    free(all);
    files[0] = p3;
    rc = an_trace_read(&t, files, 1, &o);
    CHECK(rc == 0, "truncated file still yields a trace: %s", err_msg());
    CHECK(t.inputs[0].truncated, "truncation detected");
    CHECK(t.n > 100 && t.n < 400, "partial events kept: %zu", t.n);
    CHECK(strstr(t.inputs[0].note, "truncated") != NULL, "note names the truncation: %s",
          t.inputs[0].note);
    an_trace_free(&t);
    /* A file with nothing readable is an error naming the file. */
    char p4[512];
    snprintf(p4, sizeof p4, "%s/garbage.pfw", tmpdir);
    f = fopen(p4, "w");
    fputs("hello\nworld\n", f);
    fclose(f);
    files[0] = p4;
    rc = an_trace_read(&t, files, 1, &o);
    CHECK(rc == ERR_FORMAT && strstr(err_msg(), "garbage.pfw"), "garbage rejected: %s", err_msg());
    an_trace_free(&t);
}

static void test_overlap(void) {
    char p[512];
    snprintf(p, sizeof p, "%s/overlap.pfw", tmpdir);
    FILE *f = fopen(p, "w");
    /* compute [0,100 ms], read [50,150 ms] on another thread, fetch [150,170 ms]. */
    fputs("[\n"
          "{\"name\":\"forward\",\"cat\":\"compute\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":100000,\"ph\":\"X\"}\n"
          "{\"name\":\"read\",\"cat\":\"POSIX\",\"pid\":1,\"tid\":2,\"ts\":50000,\"dur\":100000,\"ph\":\"X\",\"args\":{\"ret\":1048576,\"fname\":\"/d/x\"}}\n"
          "{\"name\":\"fetch\",\"cat\":\"dataloader\",\"pid\":1,\"tid\":1,\"ts\":150000,\"dur\":20000,\"ph\":\"X\"}\n"
          "]",
          f);
    fclose(f);
    char *files[1] = {p};
    an_trace t;
    an_read_opts o = {0};
    CHECK(an_trace_read(&t, files, 1, &o) == 0, "overlap trace");
    an_metrics m;
    CHECK(an_metrics_compute(&t, 0, &m) == 0, "metrics");
    CHECK(fabs(m.io_compute_overlap_s - 0.05) < 1e-9, "overlap 50 ms, got %g", m.io_compute_overlap_s);
    CHECK(fabs(m.unoverlapped_io_s - 0.05) < 1e-9, "unoverlapped 50 ms");
    CHECK(fabs(m.stall_s - 0.02) < 1e-9, "stall 20 ms");
    CHECK(fabs(m.wall_s - 0.17) < 1e-9, "wall 170 ms");
    CHECK(fabs(m.compute_util - 100.0 / 170.0) < 1e-9, "compute util");
    an_metrics_free(&m);
    an_trace_free(&t);
}

static void test_rules_and_catalogue(void) {
    an_ruleset rs;
    CHECK(an_rules_default(&rs) == 0, "default rules");
    int has_small = 0, has_drishti_meta = 0;
    for (size_t i = 0; i < rs.n; i++) {
        CHECK(rs.rules[i].citation && strstr(rs.rules[i].citation, "http"),
              "rule %s cites a URL", rs.rules[i].id);
        /* the rules name their metrics; each name must be a row of the metric table */
        CHECK(an_rule_metric_find(rs.rules[i].metric) &&
                  (!rs.rules[i].metric2 || an_rule_metric_find(rs.rules[i].metric2)),
              "rule %s: its metrics are in the table", rs.rules[i].id);
        has_small |= !strcmp(rs.rules[i].id, "wisio.small_reads") && rs.rules[i].threshold == 0.5 &&
                     rs.rules[i].threshold2 == 1048576;
        has_drishti_meta |= !strcmp(rs.rules[i].id, "drishti.metadata_time") &&
                            rs.rules[i].threshold == 30;
    }
    CHECK(has_small && has_drishti_meta, "WisIO and Drishti thresholds");
    char p[512];
    snprintf(p, sizeof p, "%s/rules.yaml", tmpdir);
    FILE *f = fopen(p, "w");
    fputs("rules:\n  - id: wisio.small_reads\n    threshold: 0.9\n  - enabled: false\n    id: "
          "drishti.stdio\n",
          f);
    fclose(f);
    CHECK(an_rules_load_overrides(&rs, p) == 0, "override loads: %s", err_msg());
    for (size_t i = 0; i < rs.n; i++) {
        if (!strcmp(rs.rules[i].id, "wisio.small_reads"))
            CHECK(rs.rules[i].threshold == 0.9, "threshold overridden");
        if (!strcmp(rs.rules[i].id, "drishti.stdio"))
            CHECK(!rs.rules[i].enabled, "rule disabled");
    }
    f = fopen(p, "w");
    fputs("rules:\n  - id: no.such.rule\n    threshold: 1\n", f);
    fclose(f);
    int rc = an_rules_load_overrides(&rs, p);
    CHECK(rc == ERR_CONFIG && strstr(err_msg(), "no.such.rule") && strstr(err_msg(), "rules.yaml"),
          "unknown id rejected: %s", err_msg());
    an_rules_free(&rs);
    CHECK(!strcmp(an_severity(0.6), "critical") && !strcmp(an_severity(0.3), "high") &&
              !strcmp(an_severity(0.15), "medium") && !strcmp(an_severity(0.05), "low") &&
              !strcmp(an_severity(0.001), "trivial"),
          "severity bins");
    size_t ns;
    const an_strategy *s = an_strategies(&ns);
    for (size_t i = 0; i < ns; i++) {
        CHECK(!s[i].does_less && !an_text_does_less(s[i].desc) && !an_text_does_less(s[i].name),
              "strategy %s does not do less", s[i].key);
        CHECK(strstr(s[i].citation, "http") != NULL, "strategy %s cites a URL", s[i].key);
        CHECK(s[i].dim >= 1 && s[i].dim <= 12, "strategy %s has a checklist dimension", s[i].key);
        CHECK((!strcmp(s[i].privilege, "no-sudo") || !strcmp(s[i].privilege, "sudo") ||
               !strcmp(s[i].privilege, "admin-only")) &&
                  s[i].apply[0] && s[i].rollback[0],
              "strategy %s has a privilege class, a change and a rollback", s[i].key);
        /* The seed's FS_TYPE rule: every L3 strategy (striping, near-node, OS/kernel, metadata
         * servers) is gated on the file system. */
        if (s[i].dim >= 8 && s[i].dim <= 10)
            CHECK(s[i].fs != 0, "L3 strategy %s is gated on the file system", s[i].key);
    }
    CHECK(an_text_does_less("Reduce checkpoint frequency to every 4 epochs"), "do-less detector");
    CHECK(an_text_does_less("write fewer checkpoints"), "do-less detector 2");
    CHECK(!an_text_does_less("Asynchronous checkpointing"), "not do-less");
}

static an_run mkrun(double wall, uint64_t ckpt, double io) {
    an_run r;
    memset(&r, 0, sizeof r);
    r.wall_s = wall;
    r.epoch_mean_s = wall / 4;
    r.epochs = 4;
    r.ckpt_events = ckpt;
    r.ckpt_bytes = ckpt * 100;
    r.bytes_read = 1000;
    r.bytes_written = ckpt * 100;
    r.compute_events = 300;
    r.io_time_s = io;
    return r;
}

static void test_compare(void) {
    an_run b[3] = {mkrun(100, 4, 30), mkrun(101, 4, 30), mkrun(99.5, 4, 30)};
    an_run fast[2] = {mkrun(70, 4, 30), mkrun(71, 4, 30)};
    an_run less[2] = {mkrun(90, 2, 20), mkrun(90.5, 2, 20)};
    an_run same[2] = {mkrun(100.2, 4, 30), mkrun(100.6, 4, 30)};
    an_run guard[2] = {mkrun(106, 4, 10), mkrun(106.5, 4, 10)};
    an_run slow[2] = {mkrun(120, 4, 30), mkrun(121, 4, 30)};
    an_compare_result r;
    an_compare(b, 3, fast, 2, 0.01, &r);
    CHECK(!strcmp(r.verdict, "keep"), "speedup kept: %s", r.reason);
    CHECK(r.wall_hi < 0 && r.wall_lo <= r.wall_med && r.wall_med <= r.wall_hi, "range ordered");
    an_compare(b, 3, less, 2, 0.01, &r);
    CHECK(!strcmp(r.verdict, "reject") && r.does_less && strstr(r.reason, "does less, not faster"),
          "fewer checkpoints rejected: %s", r.reason);
    an_compare(b, 3, same, 2, 0.01, &r);
    CHECK(!strcmp(r.verdict, "inconclusive"), "noise inconclusive: %s", r.reason);
    an_compare(b, 3, guard, 2, 0.01, &r);
    CHECK(!strcmp(r.verdict, "reject") && r.guard_triggered, "guard: %s", r.reason);
    an_compare(b, 3, slow, 2, 0.01, &r);
    CHECK(!strcmp(r.verdict, "reject") && !r.guard_triggered && !r.does_less, "regression: %s",
          r.reason);
    /* One side without any I/O: the text says so, never "I/O time +0.0%". */
    an_run noio[2] = {mkrun(70, 4, 0), mkrun(71, 4, 0)};
    an_compare(b, 3, noio, 2, 0.01, &r);
    char *txt = NULL;
    size_t tn = 0;
    FILE *mf = open_memstream(&txt, &tn);
    an_compare_text(b, 3, noio, 2, &r, mf);
    fclose(mf);
    CHECK(r.io_none == 2 && txt && strstr(txt, "I/O time: the candidate has no I/O events") &&
              !strstr(txt, "I/O time: +0.0%"),
          "candidate without I/O: %s", txt ? strstr(txt, "I/O time") : "(none)");
    free(txt);
}

/* ------------------------------------------------------------------ parallel decode */

/* A trace with nreads reads over 3 files (FH lines first), in time order. */
static char *make_big(int nreads, int pid, const char *host, size_t *len_out) {
    size_t cap = 256 + (size_t)nreads * 200, len = 0;
    char *s = malloc(cap);
    len += (size_t)snprintf(s + len, cap - len,
                            "[\n{\"name\":\"HH\",\"cat\":\"dftracer\",\"pid\":%d,\"tid\":%d,\"ph\":\"M\","
                            "\"args\":{\"name\":\"%s\",\"value\":\"h%d\"}}\n",
                            pid, pid, host, pid);
    for (int f = 0; f < 3; f++)
        len += (size_t)snprintf(s + len, cap - len,
                                "{\"name\":\"FH\",\"cat\":\"dftracer\",\"pid\":%d,\"tid\":%d,\"ph\":"
                                "\"M\",\"args\":{\"name\":\"/p/lustre/d%d/f%d.bin\",\"value\":\"f%d%d\","
                                "\"fs\":\"lustre\"}}\n",
                                pid, pid, pid, f, pid, f);
    for (int i = 0; i < nreads; i++)
        len += (size_t)snprintf(s + len, cap - len,
                                "{\"id\":%d,\"name\":\"pread\",\"cat\":\"POSIX\",\"pid\":%d,\"tid\":%d,"
                                "\"ts\":%d,\"dur\":%d,\"ph\":\"X\",\"args\":{\"hhash\":\"h%d\","
                                "\"fhash\":\"f%d%d\",\"ret\":%d,\"offset\":%d}}\n",
                                i, pid, pid, 1000 + i * 7, 1 + i % 5, pid, pid, i % 3, 1 + i % 4000,
                                i * 13);
    *len_out = len;
    return s;
}

/* Writes text as gzip members cut at the given byte offsets (anywhere, not only at newlines). */
static void write_gz_cuts(FILE *f, const char *text, size_t len, const size_t *cuts, int ncuts) {
    size_t off = 0;
    for (int k = 0; k <= ncuts; k++) {
        size_t end = k < ncuts ? cuts[k] : len;
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        deflateInit2(&zs, 1, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY);
        unsigned char out[1 << 16];
        zs.next_in = (unsigned char *)text + off;
        zs.avail_in = (uInt)(end - off);
        do {
            zs.next_out = out;
            zs.avail_out = sizeof out;
            deflate(&zs, Z_FINISH);
            fwrite(out, 1, sizeof out - zs.avail_out, f);
        } while (zs.avail_out == 0);
        deflateEnd(&zs);
        off = end;
    }
}

static int read_trace(const char *path, int threads, int64_t part, an_trace *t) {
    char *files[1] = {(char *)path};
    an_read_opts o = {.threads = threads, .part_bytes = part};
    return an_trace_read(t, files, 1, &o);
}

/* Same events, same files, same processes, in the same order. */
static int same_trace(const an_trace *a, const an_trace *b, const char *what) {
    if (a->n != b->n) {
        fprintf(stderr, "  %s: %zu vs %zu events\n", what, a->n, b->n);
        return 0;
    }
    for (size_t i = 0; i < a->n; i++) {
        char la[64], lb[64];
        an_proc_label(a, a->proc[i], la, sizeof la);
        an_proc_label(b, b->proc[i], lb, sizeof lb);
        if (a->ts[i] != b->ts[i] || a->dur[i] != b->dur[i] || a->bytes[i] != b->bytes[i] ||
            a->offset[i] != b->offset[i] ||
            strcmp(an_strtab_get(&a->files, a->file[i]), an_strtab_get(&b->files, b->file[i])) ||
            strcmp(an_strtab_get(&a->names, a->name[i]), an_strtab_get(&b->names, b->name[i])) ||
            strcmp(la, lb) || a->file_fs[a->file[i]] != b->file_fs[b->file[i]]) {
            fprintf(stderr, "  %s: event %zu differs\n", what, i);
            return 0;
        }
    }
    return 1;
}

static void test_parts(void) {
    char p[512];
    size_t len;
    char *text = make_big(20000, 9, "hostA", &len);
    an_trace one, many;
    /* Members cut anywhere (mid-line included), read whole and in 2 and 4 byte-range parts. */
    snprintf(p, sizeof p, "%s/cuts.pfw.gz", tmpdir);
    FILE *f = fopen(p, "wb");
    size_t cuts[39];
    for (int k = 0; k < 39; k++)
        cuts[k] = len / 40 * (size_t)(k + 1) + (size_t)(k * 37 % 101);
    write_gz_cuts(f, text, len, cuts, 39);
    fclose(f);
    CHECK(read_trace(p, 1, 0, &one) == 0 && one.n == 20000, "member-split file read whole: %zu",
          one.n);
    CHECK(one.inputs[0].members == 40 && !one.inputs[0].malformed, "40 members, no bad line");
    CHECK(one.n && !strcmp(an_strtab_get(&one.files, one.file[0]), "/p/lustre/d9/f0.bin") &&
              one.file_fs[one.file[0]] == AN_FS_LUSTRE && one.file_fs_how[one.file[0]] == AN_FSHOW_TRACE,
          "FH resolved, fs type recorded by the tracer");
    for (int th = 2; th <= 4; th += 2) {
        CHECK(read_trace(p, th, 4096, &many) == 0, "parts: %s", err_msg());
        CHECK(same_trace(&one, &many, "parts"), "%d parts (lines cut between members) = whole", th);
        CHECK(many.inputs[0].members == 40 && !many.inputs[0].malformed,
              "%d parts: 40 members, no bad line (%llu)", th,
              (unsigned long long)many.inputs[0].malformed);
        an_trace_free(&many);
    }
    /* One member only: a single part decodes it, the others find nothing. */
    snprintf(p, sizeof p, "%s/single.pfw.gz", tmpdir);
    f = fopen(p, "wb");
    write_gz_cuts(f, text, len, NULL, 0);
    fclose(f);
    CHECK(read_trace(p, 2, 4096, &many) == 0 && same_trace(&one, &many, "single"),
          "single-member file in 2 parts = whole");
    an_trace_free(&many);
    /* Plain text in parts. */
    snprintf(p, sizeof p, "%s/plain.pfw", tmpdir);
    f = fopen(p, "wb");
    fwrite(text, 1, len, f);
    fclose(f);
    CHECK(read_trace(p, 2, 65536, &many) == 0 && same_trace(&one, &many, "plain"),
          "plain text in 2 parts = whole");
    an_trace_free(&many);
    /* Concatenated from two writers (another process on another host, its own FH/HH). */
    size_t len2;
    char *text2 = make_big(5000, 10, "hostB", &len2);
    snprintf(p, sizeof p, "%s/concat.pfw.gz", tmpdir);
    f = fopen(p, "wb");
    write_gz_cuts(f, text, len, cuts, 39);
    size_t cut2[3] = {len2 / 4, len2 / 2, len2 * 3 / 4};
    write_gz_cuts(f, text2, len2, cut2, 3);
    fclose(f);
    an_trace cat1;
    CHECK(read_trace(p, 1, 0, &cat1) == 0 && cat1.n == 25000 && cat1.nprocs == 2,
          "concatenated writers: both processes, all events (%zu, %zu procs)", cat1.n, cat1.nprocs);
    CHECK(read_trace(p, 2, 4096, &many) == 0 && same_trace(&cat1, &many, "concat"),
          "concatenated writers in parts = whole");
    an_trace_free(&many);
    an_trace_free(&cat1);
    /* Truncated: the parts keep what precedes the cut, like a whole read. */
    snprintf(p, sizeof p, "%s/cuts.pfw.gz", tmpdir);
    f = fopen(p, "rb");
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *all = malloc((size_t)sz);
    size_t got = fread(all, 1, (size_t)sz, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/cut2.pfw.gz", tmpdir);
    f = fopen(p, "wb");
    fwrite(all, 1, got * 2 / 3, f);
    fclose(f);
    an_trace cut1;
    CHECK(read_trace(p, 1, 0, &cut1) == 0 && cut1.inputs[0].truncated && cut1.n > 10000 &&
              cut1.n < 20000,
          "truncated: partial events kept (%zu)", cut1.n);
    CHECK(read_trace(p, 2, 4096, &many) == 0 && same_trace(&cut1, &many, "truncated") &&
              many.inputs[0].truncated,
          "truncated file in parts = whole");
    an_trace_free(&many);
    an_trace_free(&cut1);
    /* A corrupt member in the middle: that member's complete lines before the damage, and every
     * member after it, are kept. */
    size_t mid = got / 2;
    for (size_t k = 0; k < 64; k++)
        all[mid + k] ^= 0x5a;
    snprintf(p, sizeof p, "%s/corrupt.pfw.gz", tmpdir);
    f = fopen(p, "wb");
    fwrite(all, 1, got, f);
    fclose(f);
    an_trace bad1;
    CHECK(read_trace(p, 1, 0, &bad1) == 0 && bad1.n > 18000 && bad1.n < 20000 &&
              strstr(bad1.inputs[0].note, "corrupt") && strstr(bad1.inputs[0].note, "after it"),
          "corrupt member: the rest recovered (%zu events; %s)", bad1.n, bad1.inputs[0].note);
    CHECK(read_trace(p, 2, 4096, &many) == 0 && same_trace(&bad1, &many, "corrupt"),
          "corrupt member, in parts = whole");
    an_trace_free(&many);
    an_trace_free(&bad1);
    free(all);
    an_trace_free(&one);
    free(text);
    free(text2);
}

/* --fs-type overrides, recorded types, and the path guess. */
static void test_fs(void) {
    CHECK(an_fs_class("ext4", 4) == AN_FS_LOCAL && an_fs_class("nfs4", 4) == AN_FS_NFS &&
              an_fs_class("lustre", 6) == AN_FS_LUSTRE && an_fs_class("tmpfs", 5) == AN_FS_TMPFS &&
              an_fs_class("zork", 4) < 0,
          "file-system classes of mount-table names");
    CHECK(an_fs_infer("/p/lustre3/x/y.h5") == AN_FS_LUSTRE && an_fs_infer("/gpfs/a") == AN_FS_GPFS &&
              an_fs_infer("/dev/shm/x") == AN_FS_TMPFS && an_fs_infer("/home/u/x") == AN_FS_NFS &&
              an_fs_infer("/data/x") == AN_FS_UNKNOWN,
          "classes guessed from paths");
    CHECK(an_fs_override_check("/p/lustre3=lustre") == 0 && an_fs_override_check("lustre") != 0 &&
              an_fs_override_check("/x=zork") != 0 && strstr(err_msg(), "zork"),
          "--fs-type values checked: %s", err_msg());
    char p[512];
    snprintf(p, sizeof p, "%s/fs.pfw", tmpdir);
    FILE *f = fopen(p, "w");
    fputs("{\"name\":\"read\",\"cat\":\"POSIX\",\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":1,\"ph\":\"X\","
          "\"args\":{\"fname\":\"/p/lustre3/a.bin\",\"ret\":1}}\n"
          "{\"name\":\"read\",\"cat\":\"POSIX\",\"pid\":1,\"tid\":1,\"ts\":2,\"dur\":1,\"ph\":\"X\","
          "\"args\":{\"fname\":\"/scratch/job/b.bin\",\"ret\":1}}\n",
          f);
    fclose(f);
    char *files[1] = {p};
    const char *ov[2] = {"/scratch=xfs", "/scratch/job/=nfs"};
    an_read_opts o = {.threads = 1, .fs_types = ov, .nfs_types = 2};
    an_trace t;
    CHECK(an_trace_read(&t, files, 1, &o) == 0 && t.n == 2, "fs trace read");
    if (t.n == 2) {
        CHECK(t.file_fs[t.file[0]] == AN_FS_LUSTRE && t.file_fs_how[t.file[0]] == AN_FSHOW_PATH,
              "lustre guessed from /p/lustre3");
        CHECK(t.file_fs[t.file[1]] == AN_FS_NFS && t.file_fs_how[t.file[1]] == AN_FSHOW_USER,
              "longest --fs-type prefix wins");
    }
    an_trace_free(&t);
}

/* Inputs that were undefined behaviour (found by UBSan; the sanitizer build of this test in
 * tests/analyze/run.sh aborts on them before the fix): an X event without "cat" (a NULL string
 * reached memcmp/memcpy), timestamps of +-9e18 (signed overflow of max - min in the sort), and
 * three found by fuzzing: a counter's dur_sum of INT64_MAX (ts + dur), an fread's ret * size and
 * a read's offset + bytes past INT64_MAX. Out-of-range numbers are skipped and counted, never
 * wrapped or zeroed: a dur of 2^64+5 us (wrapped to 5 before), 1e300 and a negative dur
 * (zeroed without a word before). */
static void test_ub_inputs(void) {
    char p[512];
    snprintf(p, sizeof p, "%s/ub.pfw", tmpdir);
    FILE *f = fopen(p, "w");
    fputs("[\n"
          "{\"name\":\"read\",\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":1,\"ph\":\"X\"}\n"
          "{\"name\":\"read\",\"pid\":1,\"tid\":1,\"ts\":9000000000000000000,\"dur\":1,\"ph\":\"X\"}\n"
          "{\"name\":\"read\",\"pid\":1,\"tid\":1,\"ts\":-9000000000000000000,\"dur\":1,\"ph\":\"X\"}\n"
          "{\"name\":\"read\",\"pid\":1,\"tid\":1,\"ts\":5,\"dur\":9000000000000000000,\"ph\":\"X\"}\n"
          "{\"name\":\"write\",\"cat\":\"POSIX\",\"pid\":1,\"tid\":1,\"ts\":3,\"dur\":1,\"ph\":\"X\"}\n"
          "{\"name\":\"read\",\"cat\":\"POSIX\",\"pid\":1,\"tid\":1,\"ts\":2305843009213693952,"
          "\"ph\":\"C\",\"args\":{\"dur_sum\":9223372036854775807}}\n"
          "{\"name\":\"fread\",\"cat\":\"STDIO\",\"pid\":1,\"tid\":1,\"ts\":8,\"dur\":1,\"ph\":\"X\","
          "\"args\":{\"fname\":\"/d/x\",\"ret\":4611686018427387904,\"size\":4}}\n"
          "{\"name\":\"read\",\"cat\":\"POSIX\",\"pid\":1,\"tid\":1,\"ts\":9,\"dur\":1,\"ph\":\"X\","
          "\"args\":{\"fname\":\"/d/x\",\"offset\":3107,\"ret\":9223372036854775807}}\n"
          "{\"name\":\"read\",\"cat\":\"POSIX\",\"pid\":1,\"tid\":1,\"ts\":10,"
          "\"dur\":18446744073709551621,\"ph\":\"X\"}\n"
          "{\"name\":\"read\",\"cat\":\"POSIX\",\"pid\":1,\"tid\":1,\"ts\":11,\"dur\":1e300,\"ph\":\"X\"}\n"
          "{\"name\":\"read\",\"cat\":\"POSIX\",\"pid\":1,\"tid\":1,\"ts\":12,\"dur\":-3,\"ph\":\"X\"}\n"
          "{\"name\":\"read\",\"cat\":\"POSIX\",\"pid\":1,\"tid\":1,\"ts\":13,\"dur\":1,\"ph\":1,"
          "\"args\":{\"ret\":-99999999999999999999}}\n"
          "]\n",
          f);
    fclose(f);
    char *files[1] = {p};
    an_trace t;
    an_read_opts o = {.threads = 1};
    int rc = an_trace_read(&t, files, 1, &o);
    CHECK(rc == 0 && t.n == 4, "no-cat event kept, out-of-range times rejected: rc %d n %zu", rc,
          t.n);
    CHECK(t.inputs[0].out_of_range == 8 && t.inputs[0].malformed == 0 && t.out_of_range == 8,
          "8 out-of-range lines (ts +-9e18, dur 9e18, a counter's dur_sum, dur 2^64+5, 1e300, "
          "-3, ret -1e20) skipped and counted, got %llu (malformed %llu)",
          (unsigned long long)t.inputs[0].out_of_range, (unsigned long long)t.inputs[0].malformed);
    CHECK(strstr(t.inputs[0].note, "8 event(s) with an out-of-range number") != NULL,
          "the warning says so: %s", t.inputs[0].note);
    for (size_t i = 0; i < t.n; i++)
        CHECK(t.dur[i] <= 1, "no wrapped or clamped duration kept (event %zu: %lld)", i,
              (long long)t.dur[i]);
    CHECK(t.n == 4 && t.ts[0] == 1 && !strcmp(an_strtab_get(&t.cats, t.cat[0]), ""),
          "the event without cat has the empty category");
    int64_t fread_bytes = 0, read_bytes = 0;
    for (size_t i = 0; i < t.n; i++) {
        if (t.ts[i] == 8)
            fread_bytes = t.bytes[i];
        if (t.ts[i] == 9)
            read_bytes = t.bytes[i];
    }
    CHECK(fread_bytes == -1, "an fread whose ret * size passes INT64_MAX has no size, got %lld",
          (long long)fread_bytes);
    CHECK(read_bytes == INT64_MAX, "a read of INT64_MAX bytes at offset 3107 kept, got %lld",
          (long long)read_bytes);
    an_metrics m;
    an_ruleset rs;
    an_report r;
    CHECK(an_metrics_compute(&t, 0, &m) == 0 && an_rules_default(&rs) == 0 &&
              an_report_build(&r, &t, &m, &rs, NULL) == 0,
          "metrics and report on the odd trace");
    an_report_free(&r);
    an_rules_free(&rs);
    an_metrics_free(&m);
    an_trace_free(&t);
}

/* dftracer 2.x shape (2.1.1 and later, e.g. 2.2.0): integer ph and type, no brackets, args only
 * with metadata on, start/end records with num_events, aggregated records (ph 3, dft_cnt and
 * _sum fields or a plain value when it never varied) written after the end, counter samples
 * (ph 2), an empty file and a file without its end record. */
static void test_shape2(void) {
    an_rawev ev;
    int r = parse("{\"id\":5,\"name\":\"read\",\"cat\":\"POSIX\",\"type\":3,\"pid\":9,\"tid\":9,"
                  "\"ts\":1796359838475274,\"dur\":13,\"ph\":1}", &ev);
    CHECK(r == 1 && ev.ph_kind == AN_PH_COMPLETE && ev.ph_int && ev.has_type && ev.type == 3 &&
              ev.dur == 13 && !ev.fhash, "2.x complete event without args");
    r = parse("{\"name\":\"HH\",\"cat\":\"dftracer\",\"type\":1,\"pid\":9,\"tid\":9,\"ph\":4,"
              "\"args\":{\"hhash\":\"68\",\"name\":\"vm\",\"value\":\"68\"}}", &ev);
    CHECK(r == 1 && ev.ph_kind == AN_PH_META && ev.m_name_n == 2, "2.x metadata");
    r = parse("{\"name\":\"read\",\"cat\":\"POSIX\",\"type\":3,\"ts\":1796359996000000,\"ph\":3,"
              "\"pid\":9,\"tid\":9,\"args\":{\"dur_sum\":839,\"ret_sum\":556800,\"dft_cnt\":600}}", &ev);
    CHECK(r == 1 && ev.ph_kind == AN_PH_AGG && ev.dft_cnt == 600 && ev.dur_sum == 839,
          "2.x aggregated record");
    r = parse("{\"name\":\"proc\",\"cat\":\"sys\",\"type\":7,\"ts\":5,\"ph\":2,\"pid\":9,\"tid\":0,"
              "\"args\":{\"cpu_user_us\":1500,\"cpu_sys_us\":20,\"rss_kb\":100}}", &ev);
    CHECK(r == 1 && ev.ph_kind == AN_PH_COUNTER &&
              (ev.ctr_has & (1u << AN_CTR_CPU_USER_US)) && ev.ctr[AN_CTR_CPU_USER_US] == 1500,
          "counter sample");
    r = parse("{\"name\":\"read\",\"cat\":\"POSIX\",\"ts\":5,\"ph\":\"C\",\"pid\":9,\"tid\":9,"
              "\"args\":{\"count\":4,\"dur_sum\":10,\"ret_sum\":400}}", &ev);
    CHECK(r == 1 && ev.ph_kind == AN_PH_AGG, "early 2.x aggregate written as \"C\"");
    r = parse("{\"name\":\"x\",\"ts\":5,\"ph\":7}", &ev);
    CHECK(r == 1 && ev.ph_kind == AN_PH_OTHER, "unknown ph is not an event");

    char d[512], p1[600], p2[600], p3[600];
    snprintf(d, sizeof d, "%s/shape2", tmpdir);
    mkdir(d, 0755);
    snprintf(p1, sizeof p1, "%s/a-preload.pfw.gz", d);
    snprintf(p2, sizeof p2, "%s/b-preload.pfw.gz", d);
    snprintf(p3, sizeof p3, "%s/c-preload.pfw.gz", d);
    const char *a =
        "{\"name\":\"HH\",\"cat\":\"dftracer\",\"type\":1,\"pid\":9,\"tid\":9,\"ph\":4,\"args\":"
        "{\"hhash\":\"68\",\"name\":\"vm\",\"value\":\"68\"}}\n"
        "{\"name\":\"SH\",\"cat\":\"dftracer\",\"type\":1,\"pid\":9,\"tid\":9,\"ph\":4,\"args\":"
        "{\"hhash\":\"68\",\"name\":\"/usr/bin/srun;-n;2;x\",\"value\":\"e1\"}}\n"
        "{\"id\":1,\"name\":\"start\",\"cat\":\"dftracer\",\"type\":1,\"pid\":9,\"tid\":9,\"ts\":1000,"
        "\"dur\":0,\"ph\":1,\"args\":{\"hhash\":\"68\",\"exec_hash\":\"e1\",\"version\":20003}}\n"
        "{\"name\":\"PR\",\"cat\":\"dftracer\",\"type\":1,\"pid\":9,\"tid\":9,\"ph\":4,\"args\":"
        "{\"hhash\":\"68\",\"name\":\"rank\",\"value\":\"0\"}}\n"
        "{\"name\":\"FH\",\"cat\":\"dftracer\",\"type\":1,\"pid\":9,\"tid\":9,\"ph\":4,\"args\":"
        "{\"hhash\":\"68\",\"name\":\"/d/a.npy\",\"value\":\"f1\"}}\n"
        "{\"id\":2,\"name\":\"read\",\"cat\":\"POSIX\",\"type\":3,\"pid\":9,\"tid\":9,\"ts\":1100,"
        "\"dur\":5,\"ph\":1,\"args\":{\"hhash\":\"68\",\"ret\":928,\"fhash\":\"f1\"}}\n"
        "{\"name\":\"proc\",\"cat\":\"sys\",\"type\":7,\"ts\":1200,\"ph\":2,\"pid\":9,\"tid\":0,"
        "\"args\":{\"cpu_user_us\":100,\"cpu_sys_us\":0}}\n"
        "{\"id\":603,\"name\":\"end\",\"cat\":\"dftracer\",\"type\":1,\"pid\":9,\"tid\":9,\"ts\":3000,"
        "\"dur\":0,\"ph\":1,\"args\":{\"hhash\":\"68\",\"num_events\":602}}\n"
        "{\"name\":\"read\",\"cat\":\"POSIX\",\"type\":3,\"ts\":1000,\"ph\":3,\"pid\":9,\"tid\":9,"
        "\"args\":{\"hhash\":\"68\",\"dur_sum\":839,\"ret\":928,\"dft_cnt\":590}}\n"
        "{\"name\":\"open64\",\"cat\":\"POSIX\",\"type\":3,\"ts\":1000,\"ph\":3,\"pid\":9,\"tid\":9,"
        "\"args\":{\"hhash\":\"68\",\"dur\":2,\"dft_cnt\":8}}\n";
    write_gz(p1, a, 2);
    /* b: cut before its end record */
    const char *b =
        "{\"id\":1,\"name\":\"start\",\"cat\":\"dftracer\",\"type\":1,\"pid\":10,\"tid\":10,\"ts\":1000,"
        "\"dur\":0,\"ph\":1}\n"
        "{\"id\":2,\"name\":\"write\",\"cat\":\"POSIX\",\"type\":3,\"pid\":10,\"tid\":10,\"ts\":1100,"
        "\"dur\":5,\"ph\":1}\n";
    write_gz(p2, b, 1);
    FILE *f = fopen(p3, "w"); /* empty: a forked child that traced nothing */
    fclose(f);
    char *files[3] = {p1, p2, p3};
    an_trace t;
    an_read_opts o = {.threads = 2};
    int rc = an_trace_read(&t, files, 3, &o);
    CHECK(rc == 0, "2.x files read: %s", err_msg());
    if (rc)
        return;
    CHECK(t.inputs[0].calls == 601 && t.inputs[0].num_events == 602 && t.inputs[0].has_end &&
              t.inputs[0].shape2, "calls %llu, num_events %llu",
          (unsigned long long)t.inputs[0].calls, (unsigned long long)t.inputs[0].num_events);
    CHECK(strstr(t.inputs[0].note, "short: the end record counts 603 event(s), 601 read") != NULL,
          "a file with fewer calls than its end record declares is said short: '%s'",
          t.inputs[0].note);
    CHECK(strstr(t.inputs[1].note, "no end record") != NULL, "a cut 2.x file is said: '%s'",
          t.inputs[1].note);
    CHECK(t.inputs[2].empty && !t.inputs[2].note[0] && !t.inputs[2].failed,
          "an empty file is not an error");
    CHECK(t.records == 8 && t.nctrs == 1 && t.ctrs[0].v[AN_CTR_CPU_USER_US] == 100,
          "records as dftracer_stats counts them (%llu), counters kept (%zu)",
          (unsigned long long)t.records, t.nctrs);
    uint32_t p9 = 0;
    for (uint32_t k = 0; k < t.nprocs; k++)
        if (t.procs[k].pid == 9)
            p9 = k;
    CHECK(!strcmp(t.procs[p9].exe, "srun") && t.procs[p9].launcher && t.procs[p9].rank == -1,
          "the srun launcher is recognised and has no rank (exe '%s', rank %d)",
          t.procs[p9].exe, t.procs[p9].rank);
    an_metrics m;
    CHECK(an_metrics_compute(&t, 0, &m) == 0, "metrics");
    CHECK(m.ops[AN_T_READ] == 591 && m.bytes_read == 928 * 591ull && m.ops[AN_T_META] == 8 &&
              fabs(m.t_s[AN_T_META] - 16e-6) < 1e-9 && fabs(m.t_s[AN_T_READ] - 844e-6) < 1e-9,
          "aggregated records enter the metrics as their calls, bytes and time (reads %llu, "
          "bytes %llu)", (unsigned long long)m.ops[AN_T_READ], (unsigned long long)m.bytes_read);
    CHECK(m.hist_read[an_bucket_of(928)] == 591, "the histogram counts every folded call");
    an_metrics_free(&m);
    an_trace_free(&t);
}

/* MPI analysis on a synthetic 4-rank trace in our 2.x shape: NB barriers, each preceded on rank 0
 * by a 0.5 s write to a checkpoint file while ranks 1-3 wait; ts in us from T0. With a long
 * measured phase the linked-cause rule fires naming rank 0 and its checkpoint writes; a short one
 * trips the run.short_phase guard (bottlenecks unranked, no proposal). Counters make rank 0
 * CPU-bound and rank 1 waiting. */
static void write_mpi_trace(const char *dir, int nb, int64_t gap_us) {
    const int64_t T0 = 1800000000000000LL;
    for (int r = 0; r < 4; r++) {
        char p[600];
        snprintf(p, sizeof p, "%s/r%d.pfw", dir, r);
        FILE *f = fopen(p, "w");
        int pid = 100 + r;
        fprintf(f, "{\"name\":\"HH\",\"cat\":\"dftracer\",\"type\":1,\"pid\":%d,\"tid\":%d,\"ph\":4,"
                   "\"args\":{\"hhash\":\"h\",\"name\":\"n1\",\"value\":\"h\"}}\n", pid, pid);
        fprintf(f, "{\"name\":\"PR\",\"cat\":\"dftracer\",\"type\":1,\"pid\":%d,\"tid\":%d,\"ph\":4,"
                   "\"args\":{\"hhash\":\"h\",\"name\":\"rank\",\"value\":\"%d\"}}\n", pid, pid, r);
        fprintf(f, "{\"name\":\"FH\",\"cat\":\"dftracer\",\"type\":1,\"pid\":%d,\"tid\":%d,\"ph\":4,"
                   "\"args\":{\"hhash\":\"h\",\"name\":\"/ckpt/checkpoint_%d.pt\",\"value\":\"f%d\"}}\n",
                pid, pid, r, r);
        fprintf(f, "{\"id\":1,\"name\":\"MPI_Init\",\"cat\":\"MPI\",\"type\":10,\"pid\":%d,\"tid\":%d,"
                   "\"ts\":%lld,\"dur\":1000,\"ph\":1,\"args\":{\"hhash\":\"h\",\"comm\":\"0000abcd\","
                   "\"comm_size\":4,\"rank\":%d}}\n", pid, pid, (long long)T0, r);
        int64_t t = T0 + 1000;
        for (int b = 0; b < nb; b++) {
            int64_t arrive = t + (r == 0 ? 500000 : 1000);
            if (r == 0)
                fprintf(f, "{\"id\":%d,\"name\":\"write\",\"cat\":\"POSIX\",\"type\":3,\"pid\":%d,"
                           "\"tid\":%d,\"ts\":%lld,\"dur\":499000,\"ph\":1,\"args\":{\"hhash\":\"h\","
                           "\"fhash\":\"f0\",\"count\":1048576,\"ret\":1048576}}\n",
                        10 + 2 * b, pid, pid, (long long)(t + 500));
            int64_t end = t + 500000 + 2000;
            fprintf(f, "{\"id\":%d,\"name\":\"MPI_Barrier\",\"cat\":\"MPI\",\"type\":10,\"pid\":%d,"
                       "\"tid\":%d,\"ts\":%lld,\"dur\":%lld,\"ph\":1,\"args\":{\"hhash\":\"h\","
                       "\"comm\":\"0000abcd\",\"comm_size\":4,\"rank\":%d,\"bytes\":0}}\n",
                    11 + 2 * b, pid, pid, (long long)arrive, (long long)(end - arrive), r);
            t = end + gap_us;
        }
        fprintf(f, "{\"id\":9999,\"name\":\"MPI_Finalize\",\"cat\":\"MPI\",\"type\":10,\"pid\":%d,"
                   "\"tid\":%d,\"ts\":%lld,\"dur\":100,\"ph\":1,\"args\":{\"hhash\":\"h\","
                   "\"comm\":\"0000abcd\",\"comm_size\":4,\"rank\":%d}}\n", pid, pid, (long long)t, r);
        if (r < 2) /* rank 0 busy, rank 1 idle */
            for (int k = 0; k < 2; k++)
                fprintf(f, "{\"name\":\"proc\",\"cat\":\"sys\",\"type\":7,\"pid\":%d,\"tid\":0,"
                           "\"ts\":%lld,\"ph\":2,\"args\":{\"cpu_user_us\":%lld,\"cpu_sys_us\":0}}\n",
                        pid, (long long)(T0 + k * (t - T0)),
                        (long long)(k * (r == 0 ? 9 * (t - T0) / 10 : (t - T0) / 20)));
        fclose(f);
    }
}

static void test_mpi(void) {
    char d1[512], d2[512];
    snprintf(d1, sizeof d1, "%s/mpi_long", tmpdir);
    snprintf(d2, sizeof d2, "%s/mpi_short", tmpdir);
    mkdir(d1, 0755);
    mkdir(d2, 0755);
    write_mpi_trace(d1, 6, 2000000); /* ~15 s measured */
    write_mpi_trace(d2, 2, 1000);    /* ~1 s measured */
    for (int k = 0; k < 2; k++) {
        char *files[4], names[4][600];
        for (int r = 0; r < 4; r++) {
            snprintf(names[r], sizeof names[r], "%s/r%d.pfw", k ? d2 : d1, r);
            files[r] = names[r];
        }
        an_trace t;
        an_read_opts o = {.threads = 1};
        an_metrics m;
        an_ruleset rs;
        an_report rep;
        if (an_trace_read(&t, files, 4, &o) || an_metrics_compute(&t, 0, &m) ||
            an_rules_default(&rs) || an_report_build(&rep, &t, &m, &rs, NULL)) {
            CHECK(0, "MPI trace analysed: %s", err_msg());
            return;
        }
        const an_finding *link = NULL, *guard = NULL;
        for (size_t i = 0; i < rep.nfindings; i++) {
            if (!strcmp(rep.findings[i].rule->id, "mpi.collective_wait_linked"))
                link = &rep.findings[i];
            if (!strcmp(rep.findings[i].rule->id, "run.short_phase"))
                guard = &rep.findings[i];
        }
        int nb = k ? 2 : 6;
        CHECK(m.has_mpi && m.coll_complete == (uint64_t)nb && fabs(m.coll_wait_s - nb * 3 * 0.499) < 1e-6,
              "%d barriers matched on 4 ranks, 3 x 0.499 s waited each (%.6f s)", nb, m.coll_wait_s);
        CHECK(link && t.procs[m.link.proc].rank == 0 && m.link.activity == AN_ACT_CKPT &&
                  m.link.instances == (uint64_t)nb && !strcmp(link->category, "checkpoint") &&
                  strstr(link->message, "rank 0's checkpoint writes") &&
                  strstr(link->entities[2], "/ckpt/checkpoint_0.pt"),
              "the wait is linked to rank 0's checkpoint writes: %s", link ? link->message : "none");
        if (!k) {
            CHECK(!guard && link && strcmp(link->severity, "unranked") && rep.nprops > 0,
                  "a 15 s phase is ranked (severity %s, %zu proposals)", link ? link->severity : "-",
                  rep.nprops);
            uint32_t r0 = 0, r1 = 0;
            for (uint32_t p = 0; p < t.nprocs; p++) {
                if (t.procs[p].rank == 0)
                    r0 = p;
                if (t.procs[p].rank == 1)
                    r1 = p;
            }
            CHECK(m.has_cpu && m.procs[r0].cpu_want >= 0.7 && m.procs[r1].cpu_want <= 0.2 &&
                      m.ncpu_bound == 1 && m.ncpu_waiting == 1,
                  "rank 0 CPU-bound (%.2f), rank 1 waiting (%.2f)", m.procs[r0].cpu_want,
                  m.procs[r1].cpu_want);
        } else {
            CHECK(guard && link && !strcmp(link->severity, "unranked") && rep.nprops == 0 &&
                      m.phase_s < 5,
                  "a %.2f s phase: guard fired, the linked wait unranked, no proposal (%zu)",
                  m.phase_s, rep.nprops);
        }
        an_report_free(&rep);
        an_rules_free(&rs);
        an_metrics_free(&m);
        an_trace_free(&t);
    }
}

int main(int argc, char **argv) {
    tmpdir = argc > 1 ? argv[1] : "/tmp";
    test_parse();
    test_classify();
    test_buckets();
    test_gzip_and_patterns();
    test_ub_inputs();
    test_shape2();
    test_mpi();
    test_parts();
    test_fs();
    test_overlap();
    test_rules_and_catalogue();
    test_compare();
    return test_report();
}
