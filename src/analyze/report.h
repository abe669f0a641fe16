/* report: the analysis report. model.c turns metrics and findings into proposals (strategies
 * with their sources, file-system gating, privilege class, rollback, app and system impact, 50/50
 * weighted score, sorted) and derives the 12-dimension checklist from them (one verdict per
 * dimension, with the reason drawn from the trace), so the two never disagree; catalog.c reads
 * the tuner's lever catalog; report.c renders text and JSON, html.c the HTML page. Strategies
 * that do less work (fewer checkpoints, less data, fewer epochs) are not in the catalogue and are
 * filtered if one ever slips in. */
#ifndef SCAFFOLD_ANALYZE_REPORT_H
#define SCAFFOLD_ANALYZE_REPORT_H

#include "analyze/metrics.h"
#include "analyze/out.h"
#include "analyze/rules.h"
#include "analyze/trace.h"

#include <stdio.h>

#define AN_NDIMS 12

/* One lever a tuner tried (scaffold tune's lever_catalog.yaml; see docs/analyze.md). */
typedef struct an_lever {
    char name[128], value[128], verdict[16], guard[160], reason[320];
    int dim;                /* checklist dimension 1..12 */
    double fom_baseline, fom_candidate, gain, band; /* NAN when absent */
} an_lever;

typedef struct an_catalog {
    an_lever *levers;
    size_t n;
    char host[128], cpu[128], objective[32];
} an_catalog;

/* Reads a lever catalog. 0, or ERR_CONFIG naming the file, the entry and the key. */
int an_catalog_load(const char *path, an_catalog *c);
void an_catalog_free(an_catalog *c);

/* Checklist verdicts (the seed's: applied & measured / applicable / not applicable, plus the
 * case of a benefit for the system but not the application). */
enum { AN_V_NA, AN_V_SYSTEM, AN_V_APP, AN_V_MEASURED };
extern const char *const an_verdict_names[4];

typedef struct an_check {
    int dim;              /* 1..12 */
    const char *name;
    int verdict;          /* AN_V_* */
    int applicable;       /* verdict != AN_V_NA */
    double impact_pct;    /* application impact (% of run time) of its best proposal */
    double sys_pct;       /* system impact of its best proposal */
    const an_lever *lever; /* the best measured lever (AN_V_MEASURED) */
    char reason[560];
} an_check;

typedef struct an_strategy {
    const char *key, *name, *desc;
    int dim;              /* checklist dimension */
    const char *source, *citation;
    const char *categories; /* finding categories it addresses, comma separated */
    double recover;       /* assumed recoverable fraction of the time at stake */
    int does_less;        /* 1 would mean "less work": never proposed */
    unsigned fs;          /* file-system classes it applies to (bits 1 << AN_FS_*); 0 = any */
    const char *privilege; /* "no-sudo", "sudo" or "admin-only" */
    const char *apply;     /* the change, as a command or a setting */
    const char *rollback;  /* how to undo it */
} an_strategy;

/* A proposal: a strategy the trace motivates (a bottleneck finding of its category), that fits
 * the trace and the file system. Its checklist dimension's verdict is AN_V_APP, or AN_V_SYSTEM
 * when the application gains under 1% of run time and only the system side measurably gains. */
typedef struct an_proposal {
    const an_strategy *s;
    double app_pct, sys_pct, score;
    int system_only;
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

/* Evaluates the rules and builds proposals and the checklist from one model; a lever catalog
 * (may be NULL) marks dimensions applied & measured. 0 or ERR_NOMEM. */
int an_report_build(an_report *r, const an_trace *t, const an_metrics *m, const an_ruleset *rs,
                    const an_catalog *cat);
/* Names of the file-system classes a strategy applies to ("any" when not gated). */
void an_strategy_fs(const an_strategy *s, char *buf, size_t cap);
void an_report_free(an_report *r);

/* The strategy catalogue (for tests: none may do less work). */
const an_strategy *an_strategies(size_t *n);
/* 1 if a text describes doing less work (fewer checkpoints, less data, skipping epochs...). */
int an_text_does_less(const char *s);

void an_report_text(const an_report *r, FILE *out, int top);
void an_report_json(const an_report *r, FILE *out, int top);
/* Writes the self-contained HTML page atomically. 0 or ERR_IO. (html.c) */
int an_report_html(const an_report *r, const char *path, int top);
/* Writes s (NULL: nothing) with <, >, & and " escaped, for HTML text and attribute values; the
 * one escaper of scaffold's HTML pages (tune's report.html uses it too). (html.c) */
void an_html_escape(FILE *o, const char *s);


#endif
