/* rules: the bottleneck rules as data, with provenance, and their evaluation into findings.
 *
 * Each rule is one row: an id, the tool/paper it comes from, a metric with a comparison and a
 * threshold, an optional second condition (Drishti's absolute counts, WisIO's mean size), a
 * level (info rules describe the workload, they are not bottlenecks) and a recommendation
 * category. The default table reproduces WisIO/DFAnalyzer, Drishti and DFDiagnoser thresholds
 * plus deep-learning rules (data-loader stall, checkpoint burst); `--rules FILE` (YAML) can
 * change thresholds or disable rules, and `--dump-rules` prints the table as YAML. Severity of
 * a finding follows the share of run time at stake: critical >= 50%, high >= 25%,
 * medium >= 10%, low >= 2%, trivial below. */
#ifndef SCAFFOLD_ANALYZE_RULES_H
#define SCAFFOLD_ANALYZE_RULES_H

#include "analyze/metrics.h"

#include <stdio.h>

typedef struct an_rule {
    const char *id;
    const char *source;    /* WisIO, DFAnalyzer, Drishti, DFDiagnoser, DLIO, Mohan et al., ... */
    const char *citation;  /* authors, venue, year, URL */
    const char *title;
    const char *metric;    /* a name of an_rule_metric_find()'s table */
    const char *op;        /* ">", ">=", "<" */
    double threshold;
    const char *metric2;   /* second condition, or NULL */
    const char *op2;
    double threshold2;
    const char *level;     /* "info", "bottleneck", or "guard" (when it fires, the bottlenecks
                            * are not ranked: their severity is "unranked", no proposal) */
    const char *category;  /* recommendation category */
    int enabled;
} an_rule;

#define AN_MAX_ENTITIES 5

typedef struct an_finding {
    const an_rule *rule;
    const char *category;  /* the rule's, or for a linked collective wait its cause's */
    double value, value2;
    double stake_pct;      /* share of run time at stake, 0..100 */
    const char *severity;  /* critical/high/medium/low/trivial, or "info" */
    int nentities;
    char entities[AN_MAX_ENTITIES][200];
    char message[400];
} an_finding;

typedef struct an_ruleset {
    an_rule *rules;
    size_t n;
} an_ruleset;

/* A copy of the default table. 0 or ERR_NOMEM. */
int an_rules_default(an_ruleset *rs);
void an_rules_free(an_ruleset *rs);
/* Applies a YAML override file (rules: [{id, threshold, threshold2, enabled}]).
 * 0, or ERR_CONFIG naming the file, line and key. */
int an_rules_load_overrides(an_ruleset *rs, const char *path);
/* Writes the table as YAML. */
void an_rules_dump(const an_ruleset *rs, FILE *out);

/* The metrics the rules name (metric, metric2), one table in rules.c: each with its unit (how
 * a finding's message writes its value and threshold), its reader, and the share of run time
 * at stake when a bottleneck rule on it fires. */
typedef enum { AN_UNIT_SHARE, AN_UNIT_SECONDS, AN_UNIT_BYTES, AN_UNIT_COUNT } an_unit;

typedef struct an_rule_metric_def {
    const char *name;
    an_unit unit;
    /* 0 and *v, or -1 when the metric does not apply to this trace (*why says why). */
    int (*read)(const an_trace *t, const an_metrics *m, double *v, const char **why);
    /* Share of run time at stake in [0,1] (clamped by the caller); NULL: none. */
    double (*stake)(const an_metrics *m);
} an_rule_metric_def;

/* The metric called name, or NULL. */
const an_rule_metric_def *an_rule_metric_find(const char *name);

/* Value of a named metric. Returns 0 and sets *v, or -1 when the metric does not apply to
 * this trace (e.g. overlap without compute annotations) or is unknown; *why then says why. */
int an_rule_metric(const char *name, const an_trace *t, const an_metrics *m, double *v,
                   const char **why);

/* Evaluates every enabled rule. *out is malloc'ed (free it); bottleneck findings come first,
 * sorted by time at stake, then info findings. `skipped` (may be NULL) receives, for each
 * rule that could not be evaluated, "id: reason" lines (malloc'ed string). 0 or ERR_NOMEM. */
int an_rules_eval(const an_ruleset *rs, const an_trace *t, const an_metrics *m,
                  an_finding **out, size_t *nout, char **skipped);

/* Severity name for a share of run time in [0,1]. */
const char *an_severity(double share);

#endif
