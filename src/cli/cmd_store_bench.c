/* cmd_store_bench: `scaffold store-bench`, the command-line face of store_bench.h (argument
 * parsing and exit codes only; the measurements live in src/store/store_bench.c). */
#include "cli/cli.h"
#include "core/err.h"
#include "mpi/dist.h"
#include "store/store_bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --row-bytes / --batch: a comma-separated list of sizes, each >= 1 (--batch at most 2^20). */
static int sb_list(const opt_spec *o, char **vals, int n, void *ctx) {
    (void)n;
    store_bench_opts *b = ctx;
    int is_batch = !strcmp(o->name, "batch");
    int64_t *dst = is_batch ? b->batches : b->row_bytes;
    int *cnt = is_batch ? &b->nbatches : &b->nrow_bytes;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", vals[0]);
    *cnt = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (*cnt >= STORE_BENCH_MAX_LIST)
            return err_set(ERR_USAGE, "takes at most %d values", STORE_BENCH_MAX_LIST);
        int64_t v;
        if (opt_parse_size(tok, &v) || v < 1 || (is_batch && v > (1 << 20)))
            return err_set(ERR_USAGE, "expected a comma-separated list of whole numbers in [1, %s] "
                           "(k, m, g suffixes allowed), got '%s'", is_batch ? "1048576" : "2^62",
                           tok);
        dst[(*cnt)++] = v;
    }
    return *cnt ? 0 : err_set(ERR_USAGE, "expected at least one value, got '%s'", vals[0]);
}

static int sb_methods(const opt_spec *o, char **vals, int n, void *ctx) {
    (void)o, (void)n;
    store_bench_opts *b = ctx;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", vals[0]);
    b->nmethods = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (b->nmethods >= 2)
            return err_set(ERR_USAGE, "takes rma, coll or rma,coll, got '%s'", vals[0]);
        int rc = store_method_parse(tok, &b->methods[b->nmethods++]);
        if (rc)
            return rc;
    }
    return b->nmethods ? 0 : err_set(ERR_USAGE, "takes rma, coll or rma,coll, got '%s'", vals[0]);
}

int cmd_store_bench(int argc, char **argv) {
    store_bench_opts o;
    store_bench_opts_default(&o);
    const char *pe = getenv("DDSTORE_PROFILE");
    o.profile = pe && *pe && strcmp(pe, "0") != 0;
    int64_t shard_mb = o.shard_bytes >> 20, get_mb = o.get_bytes >> 20, seed = (int64_t)o.seed;
    const opt_spec opts[] = {
        OPT_FN_(0, "method", sb_methods, &o, 1, "LIST", "rma,coll (default both)"),
        OPT_FN_(0, "row-bytes", sb_list, &o, 1, "LIST",
                "row sizes, k/m suffixes allowed (default 3136,12544,204800,1048576)"),
        OPT_FN_(0, "batch", sb_list, &o, 1, "LIST",
                "1 = get(), >1 = get_batch() (default 1,128)"),
        OPT_SIZE_(0, "rows-per-rank", &o.rows_per_rank, 1, OPT_NO_MAX, "N",
                  "rows in each rank's shard, at most (default 4096)"),
        OPT_SIZE_(0, "shard-mb", &shard_mb, 1, 1 << 30, "N",
                  "... and at most this many MiB per shard (default 256)"),
        OPT_SIZE_(0, "nget", &o.nget, 1, OPT_NO_MAX, "N",
                  "rows read per rank per timed run, at most (default 4000)"),
        OPT_SIZE_(0, "get-mb", &get_mb, 1, 1 << 30, "N",
                  "... and at most this many MiB per run (default 256)"),
        OPT_INT_(0, "repeats", &o.repeats, 1, 63, "N",
                 "timed runs per configuration; the median is reported (default 5)"),
        OPT_INT_(0, "threads", &o.threads, 1, 64, "N", "rma reader threads per rank (default 1)"),
        OPT_FLAG_(0, "remote-only", &o.remote_only,
                  "read only rows of other ranks (default: uniform over all)"),
        OPT_FLAG_(0, "profile", &o.profile,
                  "add post/wait/copy us per row (store_profile; also DDSTORE_PROFILE=1)"),
        OPT_SIZE_(0, "coll-max-bytes", &o.coll_max_bytes, 1, OPT_NO_MAX, "N",
                  "coll round cap (default DDSTORE_ALLTOALL_MAX_BYTES or 2m)"),
        OPT_SIZE_(0, "seed", &seed, 0, OPT_NO_MAX, "N", "index stream seed (default 1)"),
        OPT_STR_(0, "csv", &o.csv, "FILE", "also write the results as CSV (rank 0)"),
        OPT_END_};
    const opt_cmd cmd = {
        "store-bench", "[options]   (under mpirun -n N)",
        "Measures the in-memory sample store: us per row and MB/s per rank for single-row\n"
        "get() (batch 1) versus get_batch(B), per method and row size, as DDStore's\n"
        "bench_get.py reports them, against the local memcpy of the same rows.",
        opts, OPT_POS_NONE, NULL};
    /* Arguments are checked before MPI starts, so `--help` and typos need no mpirun. Every rank
     * parses the same argv, so every rank reaches the same verdict. */
    int first, rc = cli_parse(&cmd, argc, argv, &first);
    if (rc >= 0)
        return rc;
    o.shard_bytes = shard_mb << 20;
    o.get_bytes = get_mb << 20;
    o.seed = (uint64_t)seed;
    dist_world w;
    if ((rc = dist_init(&w, &argc, &argv))) {
        if (w.rank == 0)
            fprintf(stderr, "scaffold store-bench: %s\n", err_msg());
        return err_exit_status(rc);
    }
    rc = store_bench_run(&o, w.comm, stdout);
    if (rc)
        return cli_fail(&w, "store-bench", rc);
    dist_finalize(&w);
    return 0;
}
