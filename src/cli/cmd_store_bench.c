/* cmd_store_bench: `scaffold store-bench`, the command-line face of store_bench.h (argument
 * parsing and exit codes only; the measurements live in src/store/store_bench.c). */
#include "cli/cli.h"
#include "core/err.h"
#include "dist/dist.h"
#include "store/store_bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: mpirun -n N scaffold store-bench [options]\n\n"
            "Measures the in-memory sample store: us per row and MB/s per rank for single-row\n"
            "get() (batch 1) versus get_batch(B), per method and row size, as DDStore's\n"
            "bench_get.py reports them, against the local memcpy of the same rows.\n\n"
            "options:\n"
            "  --method LIST          rma,coll (default both)\n"
            "  --row-bytes LIST       row sizes, k/m suffixes allowed (default "
            "3136,12544,204800,1048576)\n"
            "  --batch LIST           1 = get(), >1 = get_batch() (default 1,128)\n"
            "  --rows-per-rank N      rows in each rank's shard, at most (default 4096)\n"
            "  --shard-mb N           ... and at most this many MiB per shard (default 256)\n"
            "  --nget N               rows read per rank per timed run, at most (default 4000)\n"
            "  --get-mb N             ... and at most this many MiB per run (default 256)\n"
            "  --repeats N            timed runs per configuration; the median is reported "
            "(default 5)\n"
            "  --threads N            rma reader threads per rank (default 1)\n"
            "  --remote-only          read only rows of other ranks (default: uniform over all)\n"
            "  --profile              add post/wait/copy us per row (store_profile; also\n"
            "                         DDSTORE_PROFILE=1)\n"
            "  --coll-max-bytes N     coll round cap (default DDSTORE_ALLTOALL_MAX_BYTES or 2m)\n"
            "  --seed N               index stream seed (default 1)\n"
            "  --csv FILE             also write the results as CSV (rank 0)\n"
            "  --help                 this text\n");
}

/* "3136", "12k", "1m", "2g", "1t" -> bytes/count (binary multiples). */
static int parse_size(const char *opt, const char *s, int64_t *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return err_set(ERR_USAGE, "store-bench: %s '%s' is not a number", opt, s);
    int64_t mul = 1;
    if (*end == 'k' || *end == 'K')
        mul = 1024, end++;
    else if (*end == 'm' || *end == 'M')
        mul = 1024 * 1024, end++;
    else if (*end == 'g' || *end == 'G')
        mul = (int64_t)1 << 30, end++;
    else if (*end == 't' || *end == 'T')
        mul = (int64_t)1 << 40, end++;
    if (*end || v * (double)mul > 9e18)
        return err_set(ERR_USAGE, "store-bench: %s '%s' is not a size (e.g. 3136, 12k, 1m)",
                       opt, s);
    *out = (int64_t)(v * (double)mul);
    return 0;
}

static int parse_list(const char *opt, const char *s, int64_t *vals, int *n) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (*n >= STORE_BENCH_MAX_LIST)
            return err_set(ERR_USAGE, "store-bench: %s takes at most %d values", opt,
                           STORE_BENCH_MAX_LIST);
        int rc = parse_size(opt, tok, &vals[(*n)++]);
        if (rc)
            return rc;
    }
    return *n ? 0 : err_set(ERR_USAGE, "store-bench: %s needs a value", opt);
}

static int parse_args(int argc, char **argv, store_bench_opts *o, int *help) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            *help = 1;
            return 0;
        }
        if (!strcmp(a, "--remote-only")) {
            o->remote_only = 1;
            continue;
        }
        if (!strcmp(a, "--profile")) {
            o->profile = 1;
            continue;
        }
        if (i + 1 >= argc)
            return err_set(ERR_USAGE, "store-bench: %s needs a value (see --help)", a);
        const char *v = argv[++i];
        int64_t x = 0;
        int rc = 0;
        if (!strcmp(a, "--method")) {
            char buf[64];
            snprintf(buf, sizeof buf, "%s", v);
            o->nmethods = 0;
            for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && !rc;
                 tok = strtok_r(NULL, ",", &save)) {
                if (o->nmethods >= 2)
                    return err_set(ERR_USAGE, "store-bench: --method takes rma, coll or both");
                rc = store_method_parse(tok, &o->methods[o->nmethods++]);
            }
            if (!rc && !o->nmethods)
                rc = err_set(ERR_USAGE, "store-bench: --method needs rma and/or coll");
        } else if (!strcmp(a, "--row-bytes")) {
            rc = parse_list(a, v, o->row_bytes, &o->nrow_bytes);
        } else if (!strcmp(a, "--batch")) {
            rc = parse_list(a, v, o->batches, &o->nbatches);
        } else if (!strcmp(a, "--csv")) {
            o->csv = v;
        } else {
            rc = parse_size(a, v, &x);
            if (rc)
                return rc;
            if (!strcmp(a, "--rows-per-rank"))
                o->rows_per_rank = x;
            else if (!strcmp(a, "--shard-mb"))
                o->shard_bytes = x << 20;
            else if (!strcmp(a, "--nget"))
                o->nget = x;
            else if (!strcmp(a, "--get-mb"))
                o->get_bytes = x << 20;
            else if (!strcmp(a, "--repeats"))
                o->repeats = x > 1000 ? 1000 : (int)x;
            else if (!strcmp(a, "--threads"))
                o->threads = x > 1000 ? 1000 : (int)x;
            else if (!strcmp(a, "--coll-max-bytes"))
                o->coll_max_bytes = x ? x : -1;
            else if (!strcmp(a, "--seed"))
                o->seed = (uint64_t)x;
            else
                return err_set(ERR_USAGE, "store-bench: unknown option '%s' (see --help)", a);
        }
        if (rc)
            return rc;
    }
    return 0;
}

int cmd_store_bench(int argc, char **argv) {
    store_bench_opts o;
    store_bench_opts_default(&o);
    int help = 0;
    const char *pe = getenv("DDSTORE_PROFILE");
    o.profile = pe && *pe && strcmp(pe, "0") != 0;
    /* Arguments are checked before MPI starts, so `--help` and typos need no mpirun. Every rank
     * parses the same argv, so every rank reaches the same verdict. */
    int rc = parse_args(argc, argv, &o, &help);
    if (help) {
        usage(stdout);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "scaffold: %s\n", err_msg());
        return err_exit_status(rc);
    }
    dist_world w;
    if ((rc = dist_init(&w, &argc, &argv))) {
        fprintf(stderr, "scaffold: %s\n", err_msg());
        return 1;
    }
    rc = store_bench_run(&o, w.comm, stdout);
    if (rc && w.rank == 0)
        fprintf(stderr, "scaffold store-bench: %s\n", err_msg());
    dist_finalize(&w);
    return rc ? err_exit_status(rc) : 0;
}
