/* report: turns metrics and findings into the analysis report: the 12-dimension checklist (one
 * verdict per dimension, with the reason drawn from the trace), the proposal table (strategies
 * with their sources, app and system impact, 50/50 weighted score, sorted), and the renderers:
 * terminal text and JSON here, HTML in html.c. Strategies that do less work (fewer checkpoints,
 * less data, fewer epochs) are not in the catalogue and are filtered if one ever slips in. */
#ifndef SCAFFOLD_ANALYZE_REPORT_H
#define SCAFFOLD_ANALYZE_REPORT_H

#include "analyze/metrics.h"
#include "analyze/out.h"
#include "analyze/rules.h"
#include "analyze/trace.h"

#include <stdio.h>

#define AN_NDIMS 12

typedef struct an_check {
    int dim;              /* 1..12 */
    const char *name;
    int applicable;
    double impact_pct;    /* estimated share of run time at stake (applicable only) */
    char reason[400];
} an_check;

typedef struct an_strategy {
    const char *key, *name, *desc;
    int dim;              /* checklist dimension */
    const char *source, *citation;
    const char *categories; /* finding categories it addresses, comma separated */
    double recover;       /* assumed recoverable fraction of the time at stake */
    int does_less;        /* 1 would mean "less work": never proposed */
} an_strategy;

typedef struct an_proposal {
    const an_strategy *s;
    double app_pct, sys_pct, score;
    char findings[160];   /* rule ids that motivate it */
    char sys_basis[160];  /* what the system impact estimate is based on */
} an_proposal;

typedef struct an_report {
    const an_trace *t;
    const an_metrics *m;
    an_finding *findings;
    size_t nfindings;
    char *skipped;        /* rules not evaluated, "id: reason" lines */
    an_check checklist[AN_NDIMS];
    an_proposal *props;
    size_t nprops;
} an_report;

/* Evaluates the rules and builds checklist and proposals. 0 or ERR_NOMEM. */
int an_report_build(an_report *r, const an_trace *t, const an_metrics *m, const an_ruleset *rs);
void an_report_free(an_report *r);

/* The strategy catalogue (for tests: none may do less work). */
const an_strategy *an_strategies(size_t *n);
/* 1 if a text describes doing less work (fewer checkpoints, less data, skipping epochs...). */
int an_text_does_less(const char *s);

void an_report_text(const an_report *r, FILE *out, int top);
void an_report_json(const an_report *r, FILE *out, int top);
/* Writes the self-contained HTML page atomically. 0 or ERR_IO. (html.c) */
int an_report_html(const an_report *r, const char *path, int top);


#endif
