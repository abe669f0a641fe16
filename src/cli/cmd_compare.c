/* cmd_compare: `scaffold compare BASE... -- CAND...`: paired comparison of replicated runs with
 * the do-less and non-degradation guards (see analyze/compare.h). */
#include "analyze/compare.h"
#include "analyze/profcmp.h"
#include "cli/cli.h"
#include "core/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Profiles: the regions that changed, with the same guards (analyze/profcmp.h). */
static int compare_profiles(char **b, size_t nb, char **c, size_t nc, double noise, int json) {
    an_prof_run *runs = calloc(nb + nc, sizeof *runs);
    if (!runs) {
        fprintf(stderr, "scaffold compare: out of memory\n");
        return 1;
    }
    int rc = 0;
    for (size_t k = 0; k < nb + nc && !rc; k++) {
        const char *p = k < nb ? b[k] : c[k - nb];
        rc = an_prof_load(p, &runs[k]);
        if (rc)
            fprintf(stderr, "scaffold compare: %s profile %s: %s\n",
                    k < nb ? "baseline" : "candidate", p, err_msg());
    }
    if (!rc) {
        an_prof_result r;
        rc = an_prof_compare(runs, nb, runs + nb, nc, noise, &r);
        if (rc)
            fprintf(stderr, "scaffold compare: %s\n", err_msg());
        else if (json)
            an_prof_json(runs, nb, runs + nb, nc, &r, stdout);
        else
            an_prof_text(runs, nb, runs + nb, nc, &r, stdout);
        an_prof_result_free(&r);
    }
    for (size_t k = 0; k < nb + nc; k++)
        an_prof_free(&runs[k]);
    free(runs);
    if (!rc)
        return 0;
    return rc == ERR_FORMAT || rc == ERR_USAGE ? 2 : err_exit_status(rc);
}

int cmd_compare(int argc, char **argv) {
    int json = 0;
    double noise_pct = 1;
    const opt_spec opts[] = {
        OPT_FLAG_(0, "json", &json, "print the comparison as JSON"),
        OPT_DOUBLE_(0, "noise", &noise_pct, 0, OPT_NO_MAX, "PCT",
                    "smallest noise band to assume, in percent (default 1)"),
        OPT_END_};
    const opt_cmd cmd = {
        "compare", "[--json] [--noise PCT] BASE... -- CAND...",
        "Each BASE/CAND is one run: a trace file, a directory of per-process traces or a\n"
        "glob; or a profile (benchmark --profile): a .cali file, or a run or profile folder\n"
        "holding profile.cali, whose changed regions are listed. Give several runs per side\n"
        "as replicates. Reports the training-phase\n"
        "and epoch time deltas as a range against the noise band, the work done on each\n"
        "side in application units when the benchmark's annotations are present (epochs,\n"
        "optimizer steps, samples, bytes delivered, checkpoints; file-system bytes per\n"
        "phase are shown but are not work) and a verdict: keep, reject (slower, 'does\n"
        "less, not faster', or the >2% app regression guard) or inconclusive.",
        opts, OPT_POS_REST, "Exit status: 0 (whatever the verdict), 2 bad arguments or input, 1 failure."};
    int i, st = cli_parse(&cmd, argc, argv, &i);
    if (st >= 0)
        return st;
    const double noise = noise_pct / 100.0;
    int sep = -1;
    for (int k = i; k < argc; k++)
        if (!strcmp(argv[k], "--")) {
            sep = k;
            break;
        }
    if (sep < 0 || sep == i || sep == argc - 1) {
        fprintf(stderr, "scaffold compare: give baseline and candidate runs separated by '--' "
                        "(scaffold compare BASE... -- CAND...)\n");
        return 2;
    }
    size_t nb = (size_t)(sep - i), nc = (size_t)(argc - sep - 1);
    /* profiles (.cali files, profile or run folders with one) or traces: one kind for all */
    size_t nprof = 0;
    for (int k = i; k < argc; k++)
        nprof += k != sep && an_prof_is_profile(argv[k]);
    if (nprof && nprof != nb + nc) {
        fprintf(stderr, "scaffold compare: give profiles (.cali files or folders holding "
                        "profile.cali) or traces on both sides, not a mix\n");
        return 2;
    }
    if (nprof)
        return compare_profiles(argv + i, nb, argv + sep + 1, nc, noise, json);
    an_run *runs = calloc(nb + nc, sizeof *runs);
    if (!runs) {
        fprintf(stderr, "scaffold compare: out of memory\n");
        return 1;
    }
    an_read_opts ro = {0};
    int rc = 0;
    for (size_t k = 0; k < nb + nc && !rc; k++) {
        const char *p = k < nb ? argv[i + (int)k] : argv[sep + 1 + (int)(k - nb)];
        rc = an_run_load(p, &ro, &runs[k]);
        if (rc)
            fprintf(stderr, "scaffold compare: %s run %s: %s\n", k < nb ? "baseline" : "candidate",
                    p, err_msg());
        else if (runs[k].warning[0])
            fprintf(stderr, "scaffold compare: warning: %s\n", runs[k].warning);
    }
    if (!rc) {
        an_compare_result r;
        an_compare(runs, nb, runs + nb, nc, noise, &r);
        if (json)
            an_compare_json(runs, nb, runs + nb, nc, &r, stdout);
        else
            an_compare_text(runs, nb, runs + nb, nc, &r, stdout);
    }
    free(runs);
    if (!rc)
        return 0;
    return rc == ERR_FORMAT || rc == ERR_USAGE ? 2 : err_exit_status(rc);
}
