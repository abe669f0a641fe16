/* rules: the default rule table (data with provenance), YAML overrides, evaluation into
 * findings with severities and named entities (see rules.h). */
#include "analyze/rules.h"

#include "analyze/out.h"
#include "core/err.h"
#include "core/yamlx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CITE_WISIO                                                                                 \
    "Yildirim, Devarajan, Kougkas, Sun, Mohror. WisIO: Automated I/O Bottleneck Detection with "   \
    "Multi-Perspective Views for HPC Workflows. ICS 2025. "                                        \
    "https://dl.acm.org/doi/10.1145/3721145.3730395"
#define CITE_DFANALYZER                                                                            \
    "DFAnalyzer rules.py (unoverlapped_io), llnl/dfanalyzer; thresholds as in WisIO (ICS 2025) "  \
    "https://github.com/llnl/dfanalyzer"
#define CITE_DFDIAG                                                                                \
    "DFDiagnoser rule_defs/dlio/low_compute_util.yaml, https://github.com/llnl/DFDiagnoser"
#define CITE_DRISHTI                                                                               \
    "Bez, Ather, Byna. Drishti: Guiding end-users in the I/O optimization journey. PDSW 2022. "    \
    "https://ieeexplore.ieee.org/document/10027503"
#define CITE_MOHAN                                                                                 \
    "Mohan, Phanishayee, Raniwala, Chidambaram. Analyzing and Mitigating Data Stalls in DNN "      \
    "Training. VLDB 2021. https://arxiv.org/abs/2007.06775"
#define CITE_CHECKFREQ                                                                             \
    "Mohan, Phanishayee, Chidambaram. CheckFreq: Frequent, Fine-Grained DNN Checkpointing. "       \
    "FAST 2021. https://www.usenix.org/conference/fast21/presentation/mohan"

#define CITE_WAITSTATES                                                                            \
    "Boehme, Geimer, Arnold, Voigtlaender, Wolf. Identifying the Root Causes of Wait States in "  \
    "Large-Scale Parallel Applications. ACM TOPC 3(2), 2016. https://doi.org/10.1145/2934661"
#define CITE_HOEFLER                                                                               \
    "Hoefler, Belli. Scientific Benchmarking of Parallel Computing Systems. SC 2015. "             \
    "https://doi.org/10.1145/2807591.2807644"
#define CITE_TELEMETRY                                                                             \
    "CPU time over wall time from per-process counters (getrusage), as dftracer 2.1's telemetry "  \
    "collectors sample them; https://github.com/llnl-asr/dftracer"

static const an_rule DEFAULT_RULES[] = {
    {"run.short_phase", "measurement practice", CITE_HOEFLER,
     "The measured phase is too short to rank bottlenecks", "measured_phase_s", "<", 5.0, NULL,
     NULL, 0, "guard", "measurement", 1},
    {"mpi.collective_wait_linked", "wait-state root causes (Scalasca)", CITE_WAITSTATES,
     "Ranks wait in a collective for the last rank, delayed by what it did just before",
     "mpi_linked_wait_share", ">=", 0.5, "mpi_wait_share", ">=", 0.02, "bottleneck",
     "collective-wait", 1},
    {"sys.cpu_vs_wait", "system-metrics counters", CITE_TELEMETRY,
     "CPU-bound and waiting processes (from the counters)", "cpu_procs", ">=", 1, NULL, NULL, 0,
     "info", "cpu", 1},
    {"wisio.excessive_metadata", "WisIO/DFAnalyzer", CITE_WISIO,
     "Excessive metadata access", "metadata_time_share", ">=", 0.5, NULL, NULL, 0, "bottleneck",
     "metadata", 1},
    {"wisio.operation_imbalance", "WisIO/DFAnalyzer", CITE_WISIO,
     "Read/write operation imbalance", "op_imbalance", ">", 0.1, NULL, NULL, 0, "info",
     "read-write-mix", 1},
    {"wisio.size_imbalance", "WisIO/DFAnalyzer", CITE_WISIO, "Read/write size imbalance",
     "rw_size_imbalance", ">", 0.1, NULL, NULL, 0, "info", "read-write-mix", 1},
    {"wisio.small_reads", "WisIO/DFAnalyzer", CITE_WISIO, "Small reads dominate I/O time",
     "read_time_share", ">", 0.5, "read_mean_size", "<", 1048576, "bottleneck", "small-io", 1},
    {"wisio.small_writes", "WisIO/DFAnalyzer", CITE_WISIO, "Small writes dominate I/O time",
     "write_time_share", ">", 0.5, "write_mean_size", "<", 1048576, "bottleneck", "small-io", 1},
    {"wisio.random_operations", "WisIO/DFAnalyzer", CITE_WISIO, "Random access operations",
     "random_share", ">", 0.5, NULL, NULL, 0, "bottleneck", "sequentiality", 1},
    {"dfanalyzer.unoverlapped_io", "DFAnalyzer", CITE_DFANALYZER,
     "I/O not overlapped with compute", "unoverlapped_io_share", ">", 0.5, "io_share", ">=", 0.02,
     "bottleneck", "overlap", 1},
    {"dfdiagnoser.low_compute_util", "DFDiagnoser", CITE_DFDIAG, "Low compute utilisation",
     "compute_util", "<", 0.7, NULL, NULL, 0, "bottleneck", "compute-utilisation", 1},
    {"drishti.small_requests", "Drishti (P05/P06)", CITE_DRISHTI,
     "Many small (<= 1 MiB) requests", "small_request_share", ">", 0.1, "small_requests", ">",
     1000, "bottleneck", "small-io", 1},
    {"drishti.random_operations", "Drishti (P11/P13)", CITE_DRISHTI, "Random operations",
     "random_share", ">", 0.2, "random_ops", ">", 1000, "bottleneck", "sequentiality", 1},
    {"drishti.stdio", "Drishti (S01)", CITE_DRISHTI, "STDIO carries a large share of bytes",
     "stdio_byte_share", ">", 0.1, NULL, NULL, 0, "bottleneck", "interface", 1},
    {"drishti.metadata_time", "Drishti (P17)", CITE_DRISHTI,
     "A (file, process) record spends > 30 s in metadata", "meta_record_max_s", ">", 30.0, NULL,
     NULL, 0, "bottleneck", "metadata", 1},
    {"drishti.stragglers", "Drishti (P19, per rank)", CITE_DRISHTI, "Straggler ranks in I/O time",
     "straggler_ratio", ">", 0.15, "io_share", ">=", 0.02, "bottleneck", "load-balance", 1},
    {"drishti.size_imbalance", "Drishti (P21/P22, per rank)", CITE_DRISHTI,
     "Data size imbalance across ranks", "rank_bytes_imbalance", ">", 0.3, "io_share", ">=", 0.02,
     "bottleneck", "load-balance", 1},
    {"dl.data_loader_stall", "Mohan et al. (data stalls)", CITE_MOHAN,
     "Training waits on the data loader", "loader_stall_share", ">", 0.1, NULL, NULL, 0,
     "bottleneck", "data-loader", 1},
    {"dl.checkpoint_burst", "CheckFreq", CITE_CHECKFREQ, "Checkpoints stall training",
     "checkpoint_share", ">", 0.1, NULL, NULL, 0, "bottleneck", "checkpoint", 1},
};

#define NDEFAULT (sizeof DEFAULT_RULES / sizeof DEFAULT_RULES[0])

int an_rules_default(an_ruleset *rs) {
    rs->rules = malloc(sizeof DEFAULT_RULES);
    if (!rs->rules)
        return err_set(ERR_NOMEM, "analyze: out of memory");
    memcpy(rs->rules, DEFAULT_RULES, sizeof DEFAULT_RULES);
    rs->n = NDEFAULT;
    return 0;
}

void an_rules_free(an_ruleset *rs) {
    if (!rs)
        return;
    free(rs->rules);
    rs->rules = NULL;
    rs->n = 0;
}

static void yaml_str(FILE *out, const char *key, const char *v) {
    fprintf(out, "    %s: \"", key);
    for (; v && *v; v++) {
        if (*v == '"' || *v == '\\')
            fputc('\\', out);
        fputc(*v, out);
    }
    fputs("\"\n", out);
}

void an_rules_dump(const an_ruleset *rs, FILE *out) {
    fprintf(out, "# scaffold analyze rule table (override with --rules FILE: id + threshold, "
                 "threshold2, enabled)\nrules:\n");
    for (size_t i = 0; i < rs->n; i++) {
        const an_rule *r = &rs->rules[i];
        fprintf(out, "  - id: %s\n", r->id);
        yaml_str(out, "source", r->source);
        yaml_str(out, "citation", r->citation);
        yaml_str(out, "title", r->title);
        fprintf(out, "    metric: %s\n    op: \"%s\"\n    threshold: %g\n", r->metric, r->op,
                r->threshold);
        if (r->metric2)
            fprintf(out, "    metric2: %s\n    op2: \"%s\"\n    threshold2: %g\n", r->metric2,
                    r->op2, r->threshold2);
        fprintf(out, "    level: %s\n    category: %s\n    enabled: %s\n", r->level, r->category,
                r->enabled ? "true" : "false");
    }
}

/* One entry of an overrides file; the other keys of a rule (source, citation, metric, ...) are
 * documentation, ignored: a dumped table can be edited and fed back. */
typedef struct {
    char id[128];
    double threshold, threshold2; /* NAN: not given */
    int enabled;                  /* -1: not given */
} rule_override;

static const yamlx_field override_fields[] = {
    {"id", YAMLX_STR, YAMLX_AT(rule_override, id), .flags = YAMLX_REQUIRED},
    {"threshold", YAMLX_DOUBLE, YAMLX_AT(rule_override, threshold)},
    {"threshold2", YAMLX_DOUBLE, YAMLX_AT(rule_override, threshold2)},
    {"enabled", YAMLX_BOOL, YAMLX_AT(rule_override, enabled)},
};
static const yamlx_field overrides_root[] = {
    {"rules", YAMLX_LIST, .off = 0, .size = sizeof(yaml_node_t *)},
};

/* Applies the entries of list `rules` in order. */
static int apply_overrides(an_ruleset *rs, yamlx_doc *d, yaml_node_t *rules) {
    for (size_t i = 0; i < yamlx_len(rules); i++) {
        yaml_node_t *e = yamlx_item(d, rules, i);
        rule_override o = {"", NAN, NAN, -1};
        int rc = yamlx_map_read(d, e, override_fields, YAMLX_N(override_fields), &o, NULL, 0);
        if (rc)
            return rc;
        an_rule *cur = NULL;
        for (size_t k = 0; k < rs->n && !cur; k++)
            if (!strcmp(rs->rules[k].id, o.id))
                cur = &rs->rules[k];
        if (!cur)
            return err_set(ERR_CONFIG, "%s:%zu: unknown rule id '%s' (see scaffold analyze "
                           "--dump-rules)", d->label, e->start_mark.line + 1, o.id);
        if (!isnan(o.threshold))
            cur->threshold = o.threshold;
        if (!isnan(o.threshold2))
            cur->threshold2 = o.threshold2;
        if (o.enabled >= 0)
            cur->enabled = o.enabled;
    }
    return 0;
}

int an_rules_load_overrides(an_ruleset *rs, const char *path) {
    yamlx_doc d;
    int rc = yamlx_load_file(&d, path, "rules file", ERR_CONFIG);
    if (rc == 0) {
        yaml_node_t *rules = NULL;
        rc = yamlx_map_read(&d, yamlx_root(&d), overrides_root, 1, &rules, NULL, 1);
        if (rc == 0)
            rc = apply_overrides(rs, &d, rules);
        yamlx_free(&d);
    }
    return rc ? err_prefix("analyze") : 0;
}

const char *an_severity(double share) {
    if (share >= 0.5)
        return "critical";
    if (share >= 0.25)
        return "high";
    if (share >= 0.10)
        return "medium";
    if (share >= 0.02)
        return "low";
    return "trivial";
}

static double safe_div(double a, double b) {
    return b > 0 ? a / b : 0;
}

/* ------------------------------------------------------------------ the metrics rules read
 * One reader per metric: the value, or -1 with *why when the metric does not apply to this
 * trace. A new metric is one reader and one row of RULE_METRICS. */
#define METRIC(fn)                                                                                 \
    static int fn(const an_trace *t __attribute__((unused)), const an_metrics *m, double *v,      \
                  const char **why __attribute__((unused)))
#define NOT_APPLICABLE(reason) return (*why = (reason), -1)
#define NO_IO_TIME "no I/O time in the trace"

/* Processes that did any I/O (imbalance needs two). */
static size_t io_procs(const an_metrics *m) {
    size_t k = 0;
    for (size_t p = 0; p < m->nprocs; p++)
        k += m->procs[p].ops > 0;
    return k;
}

METRIC(metadata_time_share) {
    if (m->io_time_s <= 0)
        NOT_APPLICABLE(NO_IO_TIME);
    *v = m->t_s[AN_T_META] / m->io_time_s;
    return 0;
}
METRIC(op_imbalance) {
    uint64_t rops = m->ops[AN_T_READ], wops = m->ops[AN_T_WRITE];
    if (rops + wops == 0)
        NOT_APPLICABLE("no read or write operation");
    *v = fabs((double)wops - (double)rops) / (double)(rops + wops);
    return 0;
}
METRIC(rw_size_imbalance) {
    double b = (double)(m->bytes_read + m->bytes_written);
    if (b <= 0)
        NOT_APPLICABLE("no bytes read or written (sizes absent: args off?)");
    *v = fabs((double)m->bytes_written - (double)m->bytes_read) / b;
    return 0;
}
METRIC(read_time_share) {
    if (m->io_time_s <= 0)
        NOT_APPLICABLE(NO_IO_TIME);
    *v = m->t_s[AN_T_READ] / m->io_time_s;
    return 0;
}
METRIC(write_time_share) {
    if (m->io_time_s <= 0)
        NOT_APPLICABLE(NO_IO_TIME);
    *v = m->t_s[AN_T_WRITE] / m->io_time_s;
    return 0;
}
METRIC(read_mean_size) {
    if (!m->ops[AN_T_READ] || !m->bytes_read)
        NOT_APPLICABLE("no read with a known size");
    *v = (double)m->bytes_read / (double)m->ops[AN_T_READ];
    return 0;
}
METRIC(write_mean_size) {
    if (!m->ops[AN_T_WRITE] || !m->bytes_written)
        NOT_APPLICABLE("no write with a known size");
    *v = (double)m->bytes_written / (double)m->ops[AN_T_WRITE];
    return 0;
}
METRIC(random_share) {
    uint64_t classified = m->read_classified + m->write_classified;
    if (!classified)
        NOT_APPLICABLE("no read/write with a known offset");
    *v = (double)(m->read_random + m->write_random) / (double)classified;
    return 0;
}
METRIC(random_ops) {
    *v = (double)(m->read_random + m->write_random);
    return 0;
}
METRIC(unoverlapped_io_share) {
    if (!m->has_compute)
        NOT_APPLICABLE("no compute annotation in the trace, so overlap cannot be measured");
    if (m->io_union_s <= 0)
        NOT_APPLICABLE(NO_IO_TIME);
    *v = m->unoverlapped_io_s / m->io_union_s;
    return 0;
}
METRIC(io_share) {
    *v = m->io_share;
    return 0;
}
METRIC(compute_util) {
    if (!m->has_compute)
        NOT_APPLICABLE("no compute annotation in the trace");
    *v = m->compute_util;
    return 0;
}
METRIC(small_request_share) {
    if (!m->data_ops_known_size)
        NOT_APPLICABLE("no read/write with a known size");
    *v = (double)m->small_ops / (double)m->data_ops_known_size;
    return 0;
}
METRIC(small_requests) {
    *v = (double)m->small_ops;
    return 0;
}
METRIC(stdio_byte_share) {
    double b = (double)(m->stdio_bytes + m->posix_bytes + m->mpiio_bytes);
    if (b <= 0)
        NOT_APPLICABLE("no bytes moved");
    *v = (double)m->stdio_bytes / b;
    return 0;
}
METRIC(meta_record_max_s) {
    *v = m->meta_max_record_s;
    return 0;
}
METRIC(straggler_ratio) {
    if (io_procs(m) < 2)
        NOT_APPLICABLE("fewer than two processes do I/O");
    *v = m->straggler_ratio;
    return 0;
}
METRIC(rank_bytes_imbalance) {
    if (io_procs(m) < 2)
        NOT_APPLICABLE("fewer than two processes do I/O");
    if (m->bytes_read + m->bytes_written == 0)
        NOT_APPLICABLE("no bytes moved");
    *v = m->bytes_imbalance;
    return 0;
}
METRIC(loader_stall_share) {
    if (!m->has_fetch)
        NOT_APPLICABLE("no data-loader (fetch) annotation in the trace");
    *v = safe_div(m->stall_s, m->proc_time_s);
    return 0;
}
METRIC(measured_phase_s) {
    if (t->n == 0)
        NOT_APPLICABLE("no event");
    *v = m->phase_s;
    return 0;
}
METRIC(mpi_linked_wait_share) {
    if (!m->has_mpi)
        NOT_APPLICABLE("no MPI event in the trace (trace MPI programs with scaffold trace, "
                       "which preloads libscaffold_trace_mpi.so)");
    if (!m->coll_complete)
        NOT_APPLICABLE("no collective seen on every member of its communicator");
    if (m->coll_wait_s <= 0)
        NOT_APPLICABLE("no rank waited in a collective");
    *v = m->link.wait_s / m->coll_wait_s;
    return 0;
}
METRIC(mpi_wait_share) {
    if (!m->has_mpi || m->mpi_proc_time_s <= 0)
        NOT_APPLICABLE("no MPI event in the trace");
    *v = m->coll_wait_s / m->mpi_proc_time_s;
    return 0;
}
METRIC(cpu_procs) {
    if (!m->has_cpu)
        NOT_APPLICABLE("no CPU counters in the trace (SCAFFOLD_TRACE_METRICS_MS or scaffold "
                       "trace --metrics-ms)");
    *v = (double)m->ncpu_procs;
    return 0;
}
METRIC(checkpoint_share) {
    if (!m->ckpt_time_s)
        NOT_APPLICABLE("no checkpoint annotation and no checkpoint-like file written");
    *v = safe_div(m->ckpt_time_s, m->wall_s);
    return 0;
}
#undef METRIC
#undef NOT_APPLICABLE
#undef NO_IO_TIME

/* The share of run time at stake when a bottleneck rule on a metric fires (what a fix could
 * win): the time of the class of operations concerned, over process or wall time. */
static double stake_meta(const an_metrics *m) {
    return an_class_share(m, AN_T_META);
}
static double stake_read(const an_metrics *m) {
    return an_class_share(m, AN_T_READ);
}
static double stake_write(const an_metrics *m) {
    return an_class_share(m, AN_T_WRITE);
}
static double data_share(const an_metrics *m) {
    return an_class_share(m, AN_T_READ) + an_class_share(m, AN_T_WRITE);
}
static double stake_random(const an_metrics *m) {
    uint64_t c = m->read_classified + m->write_classified;
    return (c ? (double)(m->read_random + m->write_random) / (double)c : 0) * data_share(m);
}
static double proc_time(const an_metrics *m) {
    return m->proc_time_s > 0 ? m->proc_time_s : 1;
}
static double wall_time(const an_metrics *m) {
    return m->wall_s > 0 ? m->wall_s : 1;
}
static double stake_unoverlapped(const an_metrics *m) {
    return m->unoverlapped_io_s / proc_time(m);
}
static double stake_compute(const an_metrics *m) {
    return 1.0 - m->compute_util;
}
static double stake_small(const an_metrics *m) {
    return (m->data_ops_known_size ? (double)m->small_ops / (double)m->data_ops_known_size : 0) *
           data_share(m);
}
static double stake_stdio(const an_metrics *m) {
    return m->io_time_s > 0 ? m->stdio_time_s / m->io_time_s * m->exposed_io_s / proc_time(m) : 0;
}
static double stake_straggler(const an_metrics *m) {
    return (m->io_max_s - m->io_median_s) / wall_time(m);
}
static double stake_stall(const an_metrics *m) {
    return m->stall_s / proc_time(m);
}
static double stake_ckpt(const an_metrics *m) {
    return m->ckpt_time_s / wall_time(m);
}
static double stake_mpi_linked(const an_metrics *m) {
    return m->mpi_proc_time_s > 0 ? m->link.wait_s / m->mpi_proc_time_s : 0;
}

/* Every metric a rule may name: its unit (how a message writes it), its reader and the run time
 * at stake when a bottleneck rule on it fires (NULL: none, it only qualifies another). */
static const an_rule_metric_def RULE_METRICS[] = {
    {"metadata_time_share", AN_UNIT_SHARE, metadata_time_share, stake_meta},
    {"op_imbalance", AN_UNIT_SHARE, op_imbalance, NULL},
    {"rw_size_imbalance", AN_UNIT_SHARE, rw_size_imbalance, NULL},
    {"read_time_share", AN_UNIT_SHARE, read_time_share, stake_read},
    {"write_time_share", AN_UNIT_SHARE, write_time_share, stake_write},
    {"read_mean_size", AN_UNIT_BYTES, read_mean_size, NULL},
    {"write_mean_size", AN_UNIT_BYTES, write_mean_size, NULL},
    {"random_share", AN_UNIT_SHARE, random_share, stake_random},
    {"random_ops", AN_UNIT_COUNT, random_ops, NULL},
    {"unoverlapped_io_share", AN_UNIT_SHARE, unoverlapped_io_share, stake_unoverlapped},
    {"io_share", AN_UNIT_SHARE, io_share, NULL},
    {"compute_util", AN_UNIT_SHARE, compute_util, stake_compute},
    {"small_request_share", AN_UNIT_SHARE, small_request_share, stake_small},
    {"small_requests", AN_UNIT_COUNT, small_requests, NULL},
    {"stdio_byte_share", AN_UNIT_SHARE, stdio_byte_share, stake_stdio},
    {"meta_record_max_s", AN_UNIT_SECONDS, meta_record_max_s, stake_meta},
    {"straggler_ratio", AN_UNIT_SHARE, straggler_ratio, stake_straggler},
    {"rank_bytes_imbalance", AN_UNIT_SHARE, rank_bytes_imbalance, stake_straggler},
    {"loader_stall_share", AN_UNIT_SHARE, loader_stall_share, stake_stall},
    {"measured_phase_s", AN_UNIT_SECONDS, measured_phase_s, NULL},
    {"mpi_linked_wait_share", AN_UNIT_SHARE, mpi_linked_wait_share, stake_mpi_linked},
    {"mpi_wait_share", AN_UNIT_SHARE, mpi_wait_share, NULL},
    {"cpu_procs", AN_UNIT_COUNT, cpu_procs, NULL},
    {"checkpoint_share", AN_UNIT_SHARE, checkpoint_share, stake_ckpt},
};

const an_rule_metric_def *an_rule_metric_find(const char *name) {
    for (size_t i = 0; i < sizeof RULE_METRICS / sizeof RULE_METRICS[0]; i++)
        if (!strcmp(RULE_METRICS[i].name, name))
            return &RULE_METRICS[i];
    return NULL;
}

int an_rule_metric(const char *name, const an_trace *t, const an_metrics *m, double *v,
                   const char **why) {
    const an_rule_metric_def *d = an_rule_metric_find(name);
    *why = NULL;
    if (!d) {
        *why = "unknown metric";
        return -1;
    }
    return d->read(t, m, v, why);
}

static int holds(const char *op, double v, double thr) {
    if (!strcmp(op, ">"))
        return v > thr;
    if (!strcmp(op, ">="))
        return v >= thr;
    if (!strcmp(op, "<"))
        return v < thr;
    if (!strcmp(op, "<="))
        return v <= thr;
    return 0;
}

/* Share of run time at stake for a rule (its metric's, see RULE_METRICS); none for info rules. */
static double stake_of(const an_rule *r, const an_metrics *m) {
    if (!strcmp(r->level, "info"))
        return 0;
    const an_rule_metric_def *d = an_rule_metric_find(r->metric);
    return d && d->stake ? d->stake(m) : 0;
}

/* The linked collective wait: its cause's category (what a fix must change), message and
 * entities: the collective and the ranks that waited, the late rank and what it did, the file. */
static void mpi_linked(an_finding *f, const an_trace *t, const an_metrics *m) {
    const an_mpi_link *l = &m->link;
    static const char *const cat[AN_ACT_COUNT] = {"checkpoint", "load-balance", "data-loader",
                                                  "metadata", "load-balance", "load-balance"};
    f->category = cat[l->activity];
    char lab[64];
    an_proc_label(t, l->proc, lab, sizeof lab);
    const char *coll = an_strtab_get(&t->names, l->coll);
    double mpi_share = m->mpi_s > 0 ? 100 * m->coll_wait_s / m->mpi_s : 0;
    snprintf(f->message, sizeof f->message,
             "%.3f s of waiting in %s (%.0f%% of all collective waiting, which is %.0f%% of MPI "
             "time) is %s's %s just before: %s arrived last at %llu of the %llu instances where "
             "ranks waited, after %.3f s of %s. One phenomenon, not two bottlenecks: shorten or "
             "overlap that work and the wait goes",
             l->wait_s, coll, 100 * f->value, mpi_share, lab, an_activity_names[l->activity], lab,
             (unsigned long long)l->instances, (unsigned long long)l->waited_instances,
             l->activity_s, an_activity_names[l->activity]);
    snprintf(f->entities[f->nentities++], sizeof f->entities[0],
             "collective %s: %.3f s waited for the last rank (all collectives: %.3f s)", coll,
             l->wait_s, m->coll_wait_s);
    snprintf(f->entities[f->nentities++], sizeof f->entities[0],
             "process %s: last to arrive %llu time(s), %.3f s of %s before", lab,
             (unsigned long long)l->instances, l->activity_s, an_activity_names[l->activity]);
    if (l->file) {
        const char *path = an_strtab_get(&t->files, l->file);
        size_t pl = strlen(path);
        snprintf(f->entities[f->nentities++], sizeof f->entities[0], "file %s%s",
                 pl > 150 ? "..." : "", pl > 150 ? path + pl - 150 : path);
    }
}

/* CPU-bound versus waiting, per process, from the counters. */
static void cpu_entities(an_finding *f, const an_trace *t, const an_metrics *m) {
    snprintf(f->message, sizeof f->message,
             "%zu of %zu process(es) with CPU counters are CPU-bound (running or runnable >= 0.7 "
             "of the time), %zu waiting (<= 0.2: in I/O, MPI or sleep), %zu in between",
             m->ncpu_bound, m->ncpu_procs, m->ncpu_waiting,
             m->ncpu_procs - m->ncpu_bound - m->ncpu_waiting);
    for (size_t p = 0; p < m->nprocs && f->nentities < AN_MAX_ENTITIES; p++) {
        double u = m->procs[p].cpu_util, w = m->procs[p].cpu_want;
        if (u < 0)
            continue;
        char lab[64];
        an_proc_label(t, (uint32_t)p, lab, sizeof lab);
        snprintf(f->entities[f->nentities++], sizeof f->entities[0],
                 "process %s: %.2f core(s) running, %.2f waiting for a CPU: %s", lab, u, w - u,
                 w >= 0.7 ? "CPU-bound" : w <= 0.2 ? "waiting" : "partly busy");
    }
}

/* Names the entities behind a finding: files, processes or windows. */
static void add_entities(an_finding *f, const an_trace *t, const an_metrics *m) {
    const char *cat = f->category;
    char lab[64];
    if (!strcmp(cat, "load-balance")) {
        uint32_t ps[2] = {m->straggler_proc, m->bytes_max_proc};
        for (int k = 0; k < 2; k++) {
            if (k == 1 && ps[1] == ps[0])
                break;
            an_proc_label(t, ps[k], lab, sizeof lab);
            const an_proc_stat *st = &m->procs[ps[k]];
            char b[32];
            an_fmt_bytes((double)(st->read_bytes + st->write_bytes), b, sizeof b);
            snprintf(f->entities[f->nentities++], sizeof f->entities[0],
                     "process %s: %.3f s I/O outside checkpoints (median %.3f s), %s", lab,
                     st->io_nockpt_s, m->io_median_s, b);
        }
        if (m->bytes_min_proc != m->bytes_max_proc && f->nentities < AN_MAX_ENTITIES) {
            an_proc_label(t, m->bytes_min_proc, lab, sizeof lab);
            const an_proc_stat *st = &m->procs[m->bytes_min_proc];
            char b[32];
            an_fmt_bytes((double)(st->read_bytes + st->write_bytes - st->ckpt_write_bytes), b,
                        sizeof b);
            snprintf(f->entities[f->nentities++], sizeof f->entities[0],
                     "process %s: fewest bytes (%s)", lab, b);
        }
        return;
    }
    if (!strcmp(cat, "overlap") || !strcmp(cat, "data-loader") ||
        !strcmp(cat, "compute-utilisation") || !strcmp(cat, "checkpoint")) {
        /* The processes with the most exposed time, then the worst window. */
        uint32_t best = 0;
        double bv = -1;
        for (size_t p = 0; p < m->nprocs; p++) {
            const an_proc_stat *st = &m->procs[p];
            double v = !strcmp(cat, "data-loader") ? st->stall_s
                       : !strcmp(cat, "checkpoint") ? st->ckpt_s
                       : !strcmp(cat, "overlap")    ? st->unoverlapped_io_s
                                                    : st->span_s - st->compute_s;
            if (v > bv) {
                bv = v;
                best = (uint32_t)p;
            }
        }
        if (m->nprocs) {
            an_proc_label(t, best, lab, sizeof lab);
            snprintf(f->entities[f->nentities++], sizeof f->entities[0],
                     "process %s: %.3f s exposed of %.3f s", lab, bv, m->procs[best].span_s);
        }
        size_t wb = 0;
        double wv = -1;
        for (size_t w = 0; w < m->nwindows; w++) {
            const an_window *win = &m->windows[w];
            double v = !strcmp(cat, "checkpoint")    ? win->ckpt_s
                       : !strcmp(cat, "data-loader") ? win->fetch_s
                                                     : win->t_s[0] + win->t_s[1] + win->t_s[2] +
                                                           win->t_s[3] + win->t_s[4];
            if (v > wv) {
                wv = v;
                wb = w;
            }
        }
        if (m->nwindows && wv > 0)
            snprintf(f->entities[f->nentities++], sizeof f->entities[0],
                     "window %zu [%.2f s, %.2f s]: %.3f process-seconds", wb, wb * m->window_s,
                     (wb + 1) * m->window_s, wv);
        if (!strcmp(cat, "checkpoint") && m->ckpt_bytes) {
            char b[32], bw[32];
            an_fmt_bytes((double)m->ckpt_bytes, b, sizeof b);
            an_fmt_bytes(m->ckpt_bw, bw, sizeof bw);
            snprintf(f->entities[f->nentities++], sizeof f->entities[0],
                     "%llu checkpoint events, %s written at %s/s", (unsigned long long)m->ckpt_events,
                     b, bw);
        }
        return;
    }
    /* File-level rules: the top files by the relevant time or count. */
    int used[AN_MAX_ENTITIES];
    int nu = 0;
    for (int round = 0; round < 3 && f->nentities < 3; round++) {
        size_t bi = SIZE_MAX;
        double bv = 0;
        for (size_t k = 0; k < m->nfiles; k++) {
            int skip = 0;
            for (int u = 0; u < nu; u++)
                skip |= used[u] == (int)k;
            if (skip)
                continue;
            const an_file_stat *fs = &m->files[k];
            double v = !strcmp(cat, "metadata")        ? fs->t_s[AN_T_META]
                       : !strcmp(cat, "sequentiality") ? (double)fs->random
                       : !strcmp(cat, "interface")     ? (double)(fs->bytes_read + fs->bytes_written)
                       : !strcmp(cat, "small-io")      ? fs->t_s[AN_T_READ] + fs->t_s[AN_T_WRITE]
                                                       : fs->time_s;
            if (v > bv) {
                bv = v;
                bi = k;
            }
        }
        if (bi == SIZE_MAX)
            break;
        used[nu++] = (int)bi;
        const an_file_stat *fs = &m->files[bi];
        const char *path = an_strtab_get(&t->files, fs->file);
        size_t pl = strlen(path);
        const char *shown = pl > 110 ? path + pl - 110 : path;
        uint64_t data_ops = fs->reads + fs->writes;
        char b[32];
        an_fmt_bytes(data_ops ? (double)(fs->bytes_read + fs->bytes_written) / (double)data_ops : 0, b,
                    sizeof b);
        snprintf(f->entities[f->nentities++], sizeof f->entities[0],
                 "file %s%s: %.3f s meta, %.3f s data, %llu ops, %llu random, mean %s", pl > 110 ? "..." : "",
                 shown, fs->t_s[AN_T_META], fs->t_s[AN_T_READ] + fs->t_s[AN_T_WRITE],
                 (unsigned long long)fs->ops, (unsigned long long)fs->random, b);
    }
}

static int cmp_finding(const void *a, const void *b) {
    const an_finding *x = a, *y = b;
    /* a guard first, then bottlenecks by time at stake, then info */
    int xg = !strcmp(x->severity, "guard"), yg = !strcmp(y->severity, "guard");
    if (xg != yg)
        return yg - xg;
    int xi = !strcmp(x->severity, "info"), yi = !strcmp(y->severity, "info");
    if (xi != yi)
        return xi - yi;
    if (x->stake_pct != y->stake_pct)
        return x->stake_pct > y->stake_pct ? -1 : 1;
    return strcmp(x->rule->id, y->rule->id);
}

/* A metric's value (or threshold) in its unit. */
static const char *fmt_val(const char *metric, double v, char *buf, size_t cap) {
    const an_rule_metric_def *d = an_rule_metric_find(metric);
    switch (d ? d->unit : AN_UNIT_SHARE) {
    case AN_UNIT_BYTES: an_fmt_bytes(v, buf, cap); break;
    case AN_UNIT_SECONDS: snprintf(buf, cap, "%.2f s", v); break;
    case AN_UNIT_COUNT: snprintf(buf, cap, "%.0f", v); break;
    default: snprintf(buf, cap, "%.1f%%", 100 * v); break;
    }
    return buf;
}

int an_rules_eval(const an_ruleset *rs, const an_trace *t, const an_metrics *m,
                  an_finding **out, size_t *nout, char **skipped) {
    *out = calloc(rs->n + 1, sizeof **out);
    *nout = 0;
    size_t scap = 4096, slen = 0;
    char *sk = skipped ? malloc(scap) : NULL;
    if (!*out || (skipped && !sk)) {
        free(*out);
        free(sk);
        return err_set(ERR_NOMEM, "analyze: out of memory");
    }
    if (sk)
        sk[0] = 0;
    for (size_t i = 0; i < rs->n; i++) {
        const an_rule *r = &rs->rules[i];
        if (!r->enabled)
            continue;
        double v = 0, v2 = 0;
        const char *why = NULL;
        int ok = an_rule_metric(r->metric, t, m, &v, &why) == 0;
        if (ok && r->metric2)
            ok = an_rule_metric(r->metric2, t, m, &v2, &why) == 0;
        if (!ok) {
            if (sk) {
                int w = snprintf(sk + slen, scap - slen, "%s: %s\n", r->id, why ? why : "n/a");
                if (w > 0 && slen + (size_t)w < scap)
                    slen += (size_t)w;
            }
            continue;
        }
        if (!holds(r->op, v, r->threshold) || (r->metric2 && !holds(r->op2, v2, r->threshold2)))
            continue;
        an_finding *f = &(*out)[(*nout)++];
        f->rule = r;
        f->category = r->category;
        f->value = v;
        f->value2 = v2;
        double st = stake_of(r, m);
        if (st < 0)
            st = 0;
        if (st > 1)
            st = 1;
        f->stake_pct = 100 * st;
        f->severity = !strcmp(r->level, "info")    ? "info"
                      : !strcmp(r->level, "guard") ? "guard"
                                                   : an_severity(st);
        char a[32], b[32], c[32], d[32];
        if (r->metric2)
            snprintf(f->message, sizeof f->message, "%s: %s = %s (%s %s) and %s = %s (%s %s)",
                     r->title, r->metric, fmt_val(r->metric, v, a, sizeof a), r->op,
                     fmt_val(r->metric, r->threshold, b, sizeof b), r->metric2,
                     fmt_val(r->metric2, v2, c, sizeof c), r->op2,
                     fmt_val(r->metric2, r->threshold2, d, sizeof d));
        else
            snprintf(f->message, sizeof f->message, "%s: %s = %s (%s %s)", r->title, r->metric,
                     fmt_val(r->metric, v, a, sizeof a), r->op,
                     fmt_val(r->metric, r->threshold, b, sizeof b));
        if (!strcmp(r->metric, "mpi_linked_wait_share"))
            mpi_linked(f, t, m);
        else if (!strcmp(r->metric, "cpu_procs"))
            cpu_entities(f, t, m);
        else if (!strcmp(r->metric, "measured_phase_s"))
            snprintf(f->message, sizeof f->message,
                     "The measured phase (%s) lasts %.2f s, under %.0f s: start-up, first-call and "
                     "short-run effects dominate so short a run (a 2-second run made a barrier "
                     "look like 65%% of the time), so the bottlenecks below are not ranked and "
                     "nothing is proposed; measure a longer run",
                     m->phase_what ? m->phase_what : "whole run", v, r->threshold);
        else
            add_entities(f, t, m);
    }
    /* A guard that fired: the bottlenecks are listed with their facts, not ranked. */
    int guarded = 0;
    for (size_t i = 0; i < *nout; i++)
        guarded |= !strcmp((*out)[i].severity, "guard");
    for (size_t i = 0; guarded && i < *nout; i++)
        if (!strcmp((*out)[i].rule->level, "bottleneck"))
            (*out)[i].severity = "unranked";
    qsort(*out, *nout, sizeof **out, cmp_finding);
    if (skipped)
        *skipped = sk;
    return 0;
}
