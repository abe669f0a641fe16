/* cmd_analyze: `scaffold analyze TRACES...`: read dftracer traces, compute metrics, evaluate
 * the rules, print the report (text, --json) and optionally write the HTML page. */
#include "analyze/analyze.h"
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
    an_opts o = {.top = 10};
    int dump = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'j': o.json = 1; break;
        case 'H': o.html = optarg; break;
        case 'w':
            o.window_s = strtod(optarg, &end);
            if (*end || o.window_s <= 0) {
                fprintf(stderr, "scaffold analyze: --window needs a positive number of seconds, "
                                "got '%s'\n", optarg);
                return 2;
            }
            break;
        case 't':
            o.read.threads = (int)strtol(optarg, &end, 10);
            if (*end || o.read.threads < 1) {
                fprintf(stderr, "scaffold analyze: --threads needs a positive integer, got '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case 'n':
            o.top = (int)strtol(optarg, &end, 10);
            if (*end || o.top < 1) {
                fprintf(stderr, "scaffold analyze: --top needs a positive integer, got '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case 'r': o.rules = optarg; break;
        case 'D': dump = 1; break;
        case 'S': o.read.include_system = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
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
    if (optind >= argc) {
        fprintf(stderr, "scaffold analyze: no trace given (try 'scaffold analyze --help')\n");
        return 2;
    }
    int rc = an_analyze((const char *const *)argv + optind, argc - optind, &o, stdout, stderr);
    if (rc) {
        fprintf(stderr, "scaffold analyze: %s\n", err_msg());
        /* Unreadable or eventless traces are bad input (2), like a bad path. */
        return rc == ERR_FORMAT ? 2 : err_exit_status(rc);
    }
    return 0;
}
