/* cmd_analyze: `scaffold analyze TRACES...`: read dftracer traces, compute metrics, evaluate
 * the rules, print the report (text, --json) and optionally write the HTML page. */
#include "analyze/metrics.h"
#include "analyze/report.h"
#include "analyze/rules.h"
#include "analyze/trace.h"
#include "cli/cli.h"
#include "core/err.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: scaffold analyze [options] TRACE... \n\n"
            "Reads dftracer traces (.pfw, .pfw.gz; files, directories, globs) and reports I/O\n"
            "metrics, bottleneck findings (WisIO/DFAnalyzer, Drishti, DL rules), the\n"
            "12-dimension checklist and a ranked proposal table.\n\n"
            "options:\n"
            "  --json              print the whole report as JSON on standard output\n"
            "  --html FILE         also write a self-contained HTML page with SVG charts\n"
            "  --window SEC        time-window width (default: about 60 windows)\n"
            "  --threads N         reader threads (default: one per CPU)\n"
            "  --top N             rows in the process/file tables (default 10)\n"
            "  --rules FILE        YAML overrides of rule thresholds (see --dump-rules)\n"
            "  --dump-rules        print the rule table (with sources) as YAML and exit\n"
            "  --include-system    keep /proc, /usr/lib, python files in the I/O metrics\n"
            "  -h, --help          this help\n\n"
            "Exit status: 0 report produced (truncated inputs are reported as warnings),\n"
            "2 bad arguments or unreadable input, 1 runtime failure.\n");
}

int cmd_analyze(int argc, char **argv) {
    static const struct option opts[] = {{"json", no_argument, 0, 'j'},
                                         {"html", required_argument, 0, 'H'},
                                         {"window", required_argument, 0, 'w'},
                                         {"threads", required_argument, 0, 't'},
                                         {"top", required_argument, 0, 'n'},
                                         {"rules", required_argument, 0, 'r'},
                                         {"dump-rules", no_argument, 0, 'D'},
                                         {"include-system", no_argument, 0, 'S'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int json = 0, dump = 0, top = 10;
    const char *html = NULL, *rules = NULL;
    double window = 0;
    an_read_opts ro = {0};
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'j': json = 1; break;
        case 'H': html = optarg; break;
        case 'w':
            window = strtod(optarg, &end);
            if (*end || window <= 0) {
                fprintf(stderr, "scaffold analyze: --window needs a positive number of seconds, "
                                "got '%s'\n", optarg);
                return 2;
            }
            break;
        case 't':
            ro.threads = (int)strtol(optarg, &end, 10);
            if (*end || ro.threads < 1) {
                fprintf(stderr, "scaffold analyze: --threads needs a positive integer, got '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case 'n':
            top = (int)strtol(optarg, &end, 10);
            if (*end || top < 1) {
                fprintf(stderr, "scaffold analyze: --top needs a positive integer, got '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case 'r': rules = optarg; break;
        case 'D': dump = 1; break;
        case 'S': ro.include_system = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    an_ruleset rs;
    if (an_rules_default(&rs)) {
        fprintf(stderr, "scaffold analyze: %s\n", err_msg());
        return 1;
    }
    int rc = 0;
    if (rules && (rc = an_rules_load_overrides(&rs, rules))) {
        fprintf(stderr, "scaffold analyze: %s\n", err_msg());
        an_rules_free(&rs);
        return err_exit_status(rc);
    }
    if (dump) {
        an_rules_dump(&rs, stdout);
        an_rules_free(&rs);
        return 0;
    }
    if (optind >= argc) {
        fprintf(stderr, "scaffold analyze: no trace given (try 'scaffold analyze --help')\n");
        an_rules_free(&rs);
        return 2;
    }
    char **files = NULL;
    size_t nf = 0;
    rc = an_expand_inputs((const char *const *)argv + optind, argc - optind, &files, &nf);
    if (rc) {
        fprintf(stderr, "scaffold analyze: %s\n", err_msg());
        an_rules_free(&rs);
        return 2;
    }
    an_trace t;
    an_metrics m;
    an_report rep;
    memset(&m, 0, sizeof m);
    memset(&rep, 0, sizeof rep);
    rc = an_trace_read(&t, files, nf, &ro);
    for (size_t i = 0; i < nf; i++)
        free(files[i]);
    free(files);
    if (rc) {
        fprintf(stderr, "scaffold analyze: %s\n", err_msg());
        an_trace_free(&t);
        an_rules_free(&rs);
        return rc == ERR_FORMAT ? 2 : err_exit_status(rc);
    }
    for (size_t i = 0; i < t.ninputs; i++)
        if (t.inputs[i].note[0])
            fprintf(stderr, "scaffold analyze: warning: %s: %s\n", t.inputs[i].path,
                    t.inputs[i].note);
    if ((rc = an_metrics_compute(&t, window, &m)) || (rc = an_report_build(&rep, &t, &m, &rs))) {
        fprintf(stderr, "scaffold analyze: %s\n", err_msg());
        goto out;
    }
    if (json)
        an_report_json(&rep, stdout, top);
    else
        an_report_text(&rep, stdout, top);
    if (html && (rc = an_report_html(&rep, html, top))) {
        fprintf(stderr, "scaffold analyze: %s\n", err_msg());
        goto out;
    }
    if (html && !json)
        printf("html report: %s\n", html);
out:
    an_report_free(&rep);
    an_metrics_free(&m);
    an_trace_free(&t);
    an_rules_free(&rs);
    return rc ? err_exit_status(rc) : 0;
}
