/* cmd_analyze: `scaffold analyze TRACES...`: read dftracer traces, compute metrics, evaluate
 * the rules, print the report (text, --json) and optionally write the HTML page. */
#include "analyze/analyze.h"
#include "cli/cli.h"
#include "core/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --fs-type PREFIX=TYPE, repeatable: checked, then kept in the list. */
typedef struct {
    const char *v[64];
    int n;
} fs_list;

static int add_fs_type(const opt_spec *spec, char **vals, int n, void *ctx) {
    (void)spec;
    (void)n;
    fs_list *l = ctx;
    int rc = an_fs_override_check(vals[0]);
    if (rc)
        return rc;
    if (l->n == 64)
        return err_set(ERR_USAGE, "at most 64 values");
    l->v[l->n++] = vals[0];
    return 0;
}

int cmd_analyze(int argc, char **argv) {
    an_opts o = {.top = 10};
    int dump = 0;
    fs_list fs = {.n = 0};
    const opt_spec opts[] = {
        OPT_FLAG_(0, "json", &o.json, "print the whole report as JSON on standard output"),
        OPT_STR_(0, "html", &o.html, "FILE", "also write a self-contained HTML page with SVG charts"),
        OPT_DOUBLE_(0, "window", &o.window_s, 1e-6, OPT_NO_MAX, "SEC",
                    "time-window width (default: about 60 windows)"),
        OPT_INT_(0, "threads", &o.read.threads, 1, OPT_NO_MAX, "N",
                 "reader threads (default: one per CPU)"),
        OPT_INT_(0, "top", &o.top, 1, OPT_NO_MAX, "N", "rows in the process/file tables (default 10)"),
        OPT_STR_(0, "rules", &o.rules, "FILE", "YAML overrides of rule thresholds (see --dump-rules)"),
        OPT_FLAG_(0, "dump-rules", &dump, "print the rule table (with sources) as YAML and exit"),
        OPT_FLAG_(0, "include-system", &o.read.include_system,
                  "keep /proc, /usr/lib, python files in the I/O metrics"),
        OPT_FN_(0, "fs-type", add_fs_type, &fs, 1, "PREFIX=TYPE",
                "file system of the paths under PREFIX (lustre, gpfs, beegfs, nfs, local, tmpfs, "
                "or a mount-table name: ext4, xfs, nfs4...); repeatable, the longest prefix wins; "
                "overrides what the trace records and what the paths suggest"),
        OPT_STR_(0, "catalog", &o.catalog, "FILE",
                 "lever catalog from scaffold tune: dimensions with a measured lever become "
                 "'applied & measured'"),
        OPT_END_};
    const opt_cmd cmd = {
        "analyze", "[options] TRACE...",
        "Reads dftracer traces (.pfw, .pfw.gz; files, directories, globs) and reports I/O\n"
        "metrics, bottleneck findings (WisIO/DFAnalyzer, Drishti, DL rules), the\n"
        "12-dimension checklist and a ranked proposal table.",
        opts, OPT_POS_ANY,
        "Exit status: 0 report produced (truncated inputs are reported as warnings),\n"
        "2 bad arguments or unreadable input, 1 runtime failure."};
    int first, st = cli_parse(&cmd, argc, argv, &first);
    if (st >= 0)
        return st;
    if (dump) {
        an_ruleset rs;
        int rc = an_rules_default(&rs);
        if (!rc && o.rules)
            rc = an_rules_load_overrides(&rs, o.rules);
        if (!rc)
            an_rules_dump(&rs, stdout);
        an_rules_free(&rs);
        if (rc)
            fprintf(stderr, "scaffold analyze: %s\n", err_msg());
        return rc ? err_exit_status(rc) : 0;
    }
    if (first >= argc) {
        fprintf(stderr, "scaffold analyze: no trace given (try 'scaffold analyze --help')\n");
        return 2;
    }
    o.read.fs_types = fs.v;
    o.read.nfs_types = fs.n;
    int rc = an_analyze((const char *const *)argv + first, argc - first, &o, stdout, stderr);
    if (rc) {
        fprintf(stderr, "scaffold analyze: %s\n", err_msg());
        /* Unreadable or eventless traces and a bad catalog are bad input (2), like a bad path. */
        return rc == ERR_FORMAT ? 2 : err_exit_status(rc);
    }
    return 0;
}
