/* `scaffold scaling`: the option table of a scaling study (scaling/scaling.h runs it). */
#include "cli/cli.h"
#include "core/err.h"
#include "scaling/scaling.h"

#include <stdio.h>

int cmd_scaling(int argc, char **argv) {
    scaling_opts o = {NULL, "1 1 1", NULL, "weak", NULL, 0, 0};
    const opt_spec extra[] = {
        OPT_SECTION_("scaling study"),
        OPT_STR_(0, "ranks", &o.ranks, "LIST", "rank counts, comma-separated (1,2,4); required"),
        OPT_STR_(0, "shards", &o.shards, "\"A B C;...\"",
                 "dc_num_shards layouts, ';'-separated [\"1 1 1\"]"),
        OPT_STR_(0, "launcher", &o.launcher, "CMD",
                 "launcher prefix; {n} is replaced by the rank count, else -n N is appended "
                 "[mpirun --bind-to none --oversubscribe, with --allow-run-as-root as root]"),
        OPT_STR_(0, "mode", &o.mode, "weak|strong",
                 "weak: local_batch_size per replica fixed; strong: the configuration's "
                 "local_batch_size is the global batch, split over the replicas [weak]"),
        OPT_INT_(0, "threads", &o.threads, 1, 4096, "N",
                 "OMP_NUM_THREADS of every rank [inherited]"),
        OPT_DOUBLE_(0, "timeout", &o.timeout, 0, OPT_NO_MAX, "S",
                    "kill a point after S seconds (0: no limit) [0]"),
        OPT_STR_(0, "out", &o.out, "DIR", "study folder (created; resumed if it exists); required"),
        OPT_END_};
    const char *summary =
        "Runs a scaling study: one `scaffold benchmark` per point (rank count x shard layout)\n"
        "through a launcher, then OUT/scaling.csv (ranks, replicas, shards, samples/s, epoch\n"
        "time, FOM when converged, parallel efficiency, memory per rank), OUT/scaling.png and\n"
        "a summary line. Every point runs the merged configuration (so --epochs N caps each\n"
        "point). A failed point is recorded, not fatal; rerunning the same command resumes\n"
        "(finished points are kept).";
    scaffold_config c;
    config_defaults(&c);
    int rc = config_parse_args_opts(&c, argc, argv, 1, extra);
    if (rc == OPT_HELP) {
        config_usage_opts(stdout, "scaling", summary, extra);
        return 0;
    }
    if (rc == 0)
        rc = config_finalize(&c);
    int all_failed = 0;
    if (rc == 0)
        rc = scaling_study(&c, &o, &all_failed);
    if (rc) {
        fprintf(stderr, "scaffold scaling: %s\n", err_msg());
        return err_exit_status(rc);
    }
    return all_failed ? 1 : 0;
}
