/* analyze: the front of the trace analyzer for the command line. `scaffold analyze` is one call:
 * expand the inputs, read the traces (trace.h), compute the metrics (metrics.h), evaluate the
 * rules and build checklist and proposals (rules.h, report.h), then render text or JSON (and
 * HTML). The stages stay usable one by one through their own headers (tests, compare, bench). */
#ifndef SCAFFOLD_ANALYZE_ANALYZE_H
#define SCAFFOLD_ANALYZE_ANALYZE_H

#include "analyze/compare.h"
#include "analyze/metrics.h"
#include "analyze/report.h"
#include "analyze/rules.h"
#include "analyze/trace.h"

#include <stdio.h>

typedef struct an_opts {
    an_read_opts read;     /* reader threads, system paths */
    double window_s;       /* time-window width; <= 0 picks about 60 windows */
    int top;               /* rows in the process/file tables */
    int json;              /* JSON instead of text on `out` */
    const char *html;      /* also write this HTML page (NULL: none) */
    const char *rules;     /* YAML rule overrides (NULL: none) */
    const char *catalog;   /* lever catalog from scaffold tune (NULL: none) */
} an_opts;

/* The analysis behind `scaffold analyze` and the tuner: rules (the defaults, then o->rules),
 * catalog (o->catalog), the traces, their metrics and the report. */
typedef struct an_session {
    an_ruleset rs;
    an_catalog cat;
    an_trace t;
    an_metrics m;
    an_report rep;
} an_session;

/* Runs the analysis of the traces named by paths (files, directories, globs) up to the report,
 * printing the reader's per-file warnings on `warn` (NULL: none). 0, or an ERR_* code with the
 * message in err_msg(); an_session_free either way. */
int an_session_run(an_session *s, const char *const *paths, int npaths, const an_opts *o,
                   FILE *warn);
void an_session_free(an_session *s);

/* Analyzes the traces named by paths (files, directories, globs) and writes the report to out.
 * Per-file problems (truncation, bad lines) are printed as warnings on `warn` and do not fail.
 * 0, or an ERR_* code with the message in err_msg(). */
int an_analyze(const char *const *paths, int npaths, const an_opts *o, FILE *out, FILE *warn);

#endif
