/* cmd_tune: `scaffold tune`, the measured accept/revert optimisation loop (see tune/tune.h).
 * The tuner's options sit in the one option table beside the configuration flags; the command
 * line is validated as a whole, then the configuration arguments (-c FILE, --key value) are
 * passed on, unchanged, to every run. */
#include "cli/cli.h"
#include "core/err.h"
#include "tune/tune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char SUMMARY[] =
    "Measures the configuration (N traced runs), classifies its bottleneck, then tries one\n"
    "lever value at a time: sequential A-B pairs with the incumbent (at least N and 3, more\n"
    "until the 99% interval of the change excludes zero, at most --max-repeats), and guards\n"
    "(does less, phantom throughput, degraded convergence, non-finite losses); an accepted\n"
    "value becomes the incumbent, and a final paired check against the baseline decides what\n"
    "best.yml keeps. Writes DIR/tune.json,\n"
    "lever_catalog.yaml, best.yml, report.html and every run (folder, trace, log).\n"
    "The levers file: levers: [{name: KEY | env:NAME | launch:ranks_x_threads, values: [...]}].\n"
    "Keys that define the workload (problem_scale, n_categories, seed, ...) are refused.\n"
    "Exit status: 0 done, 2 bad input (nothing written), 1 failure.";

/* "--budget_s" and "--budget-s" are the same option. */
static int same_name(const char *arg, const char *name, size_t *len) {
    size_t n = strlen(name);
    for (size_t i = 0; i < n; i++) {
        char a = arg[i] == '_' ? '-' : arg[i], b = name[i] == '_' ? '-' : name[i];
        if (a != b)
            return 0;
    }
    *len = n;
    return arg[n] == 0 || arg[n] == '=';
}

int cmd_tune(int argc, char **argv) {
    const char *out = NULL, *levers = NULL, *objective = "throughput", *launcher = NULL;
    int repeats = 3, max_repeats = 8, np = 1, resume = 0, no_disc = 0;
    double budget = 0, noise_pct = 1;
    const opt_spec opts[] = {
        OPT_SECTION_("tuner options"),
        OPT_STR_(0, "out", &out, "DIR", "where the results and runs go (required)"),
        OPT_STR_(0, "levers", &levers, "FILE",
                 "the levers to try (default: the built-in catalog for this machine plus the "
                 "levers the analyzer proposes on the baseline)"),
        OPT_STR_(0, "objective", &objective, "O",
                 "throughput (samples/s over the steady epochs of runs capped at --epochs, "
                 "default 3), time-to-target or epoch-time"),
        OPT_INT_(0, "repeats", &repeats, 1, TUNE_MAX_REPEATS, "N",
                 "baseline runs, and the A-B pairs a trial starts with (default 3; a verdict "
                 "needs at least 3 pairs)"),
        OPT_INT_(0, "max-repeats", &max_repeats, 1, TUNE_MAX_REPEATS, "M",
                 "the most A-B pairs a trial adds before it is called inconclusive, with the "
                 "pairs it would need (default 8)"),
        OPT_DOUBLE_(0, "budget-s", &budget, 1, OPT_NO_MAX, "S",
                    "start no trial that would end after S seconds"),
        OPT_INT_(0, "np", &np, 1, OPT_NO_MAX, "N", "ranks per run (default 1)"),
        OPT_STR_(0, "launcher", &launcher, "CMD",
                 "e.g. \"mpirun --oversubscribe\" (default mpirun when --np > 1); '-n R' is "
                 "appended"),
        OPT_DOUBLE_(0, "noise", &noise_pct, 0, 100, "PCT", "smallest noise band (default 1)"),
        OPT_FLAG_(0, "no-discriminator", &no_disc, "skip the thread and precision probes"),
        OPT_FLAG_(0, "resume", &resume, "continue a killed tune in DIR (same arguments)"),
        OPT_END_};
    scaffold_config *c = malloc(sizeof *c);
    char **cfg = calloc((size_t)argc + 1, sizeof *cfg);
    if (!c || !cfg) {
        fprintf(stderr, "scaffold tune: out of memory\n");
        free(c);
        free(cfg);
        return 1;
    }
    config_defaults(c);
    int rc = config_parse_args_opts(c, argc, argv, 1, opts);
    free(c);
    if (rc == OPT_HELP) {
        config_usage_opts(stdout, argv[0], SUMMARY, opts);
        free(cfg);
        return 0;
    }
    tune_opts o;
    memset(&o, 0, sizeof o);
    if (rc == 0 && !strcmp(objective, "throughput"))
        o.objective = TUNE_OBJ_THROUGHPUT;
    else if (rc == 0 && !strcmp(objective, "time-to-target"))
        o.objective = TUNE_OBJ_TTT;
    else if (rc == 0 && !strcmp(objective, "epoch-time"))
        o.objective = TUNE_OBJ_EPOCH;
    else if (rc == 0)
        rc = err_set(ERR_USAGE, "--objective: throughput, time-to-target or epoch-time, got '%s'",
                     objective);
    if (rc) {
        fprintf(stderr, "scaffold tune: %s\n", err_msg());
        free(cfg);
        return err_exit_status(rc);
    }
    /* The configuration arguments: everything but the tuner's own options. */
    int nc = 0;
    cfg[nc++] = argv[0];
    for (int i = 1; i < argc; i++) {
        int tuner = 0;
        for (const opt_spec *s = opts; s->type != OPT_END && !tuner; s++) {
            size_t len;
            if (s->type == OPT_SECTION || strncmp(argv[i], "--", 2) ||
                !same_name(argv[i] + 2, s->name, &len))
                continue;
            tuner = 1;
            if (s->type != OPT_FLAG && !argv[i][2 + len])
                i++; /* its value */
        }
        if (!tuner)
            cfg[nc++] = argv[i];
    }
    o.cfg_argc = nc;
    o.cfg_argv = cfg;
    o.out = out;
    o.levers_file = levers;
    o.repeats = repeats;
    o.max_repeats = max_repeats < repeats && max_repeats == 8 ? repeats : max_repeats;
    o.budget_s = budget;
    o.np = np;
    o.launcher = launcher;
    o.noise = noise_pct / 100;
    o.discriminate = !no_disc;
    o.resume = resume;
    rc = tune_main(&o);
    if (rc)
        fprintf(stderr, "scaffold tune: %s\n", err_msg());
    free(cfg);
    return rc ? err_exit_status(rc) : 0;
}
