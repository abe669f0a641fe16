/* tune: `scaffold tune`, the measured accept/revert optimisation loop around the benchmark.
 *
 * A tune measures a baseline (N traced runs of the configuration), classifies the bottleneck
 * with a discriminator (thread and precision probes, loader-wait, I/O and checkpoint shares from
 * the analyzer), orders the levers by what can move that bottleneck, then tries one lever value
 * at a time: sequential A-B pairs with the incumbent (A B B A ...), a verdict from the pairs'
 * 99% interval of the change and the guards (does less, phantom throughput, degraded
 * convergence, non-finite or rising losses), pairs added until the interval excludes zero or
 * --max-repeats is reached, and an accepted value becomes the incumbent. Every run is traced
 * (`scaffold trace`), every finished trial is journaled so `--resume` continues where a killed
 * tune stopped, and the outputs are tune.json, lever_catalog.yaml, best.yml and report.html.
 *
 * Files: levers.c (lever kinds, the levers file, the built-in catalog, analyzer proposals mapped
 * to levers), runner.c (one traced benchmark run and its measurements), verdict.c (the guards
 * and the verdict of a trial), journal.c (resume), output.c (tune.json, lever_catalog.yaml,
 * best.yml, report.html), tune.c (the loop). */
#ifndef SCAFFOLD_TUNE_TUNE_H
#define SCAFFOLD_TUNE_TUNE_H

#include "analyze/compare.h"
#include "core/config.h"

#include <stdio.h>

/* ------------------------------------------------------------------ levers */

#define TUNE_MAX_LEVERS 64
#define TUNE_MAX_VALUES 16
#define TUNE_NAME_MAX 64
#define TUNE_VALUE_MAX 256

typedef enum { TUNE_L_CONFIG, TUNE_L_ENV, TUNE_L_LAUNCH } tune_lever_kind;

/* What a lever can move (orders the levers after the discriminator). */
typedef enum { TUNE_C_INPUT, TUNE_C_CKPT, TUNE_C_COMPUTE, TUNE_C_OTHER } tune_lever_class;

typedef struct tune_lever {
    char name[TUNE_NAME_MAX];     /* config key, env:NAME or launch:ranks_x_threads */
    tune_lever_kind kind;
    int key;                      /* config key index (TUNE_L_CONFIG) */
    int nvalues;
    char values[TUNE_MAX_VALUES][TUNE_VALUE_MAX];
    int dimension;                /* checklist dimension 1..12 */
    tune_lever_class cls;
    char origin[96];              /* "levers file", "built-in", "analyzer: prefetch-loader" */
    char blocked[240];            /* non-empty: not tried, and why */
} tune_lever;

typedef struct tune_levers {
    int n;
    tune_lever l[TUNE_MAX_LEVERS];
} tune_levers;

/* Keys that define the workload (changing them changes the benchmark, not its speed) and keys
 * scaffold tune manages itself; both are refused as levers. NULL-terminated. */
extern const char *const tune_workload_keys[];
extern const char *const tune_managed_keys[];

/* Parses a levers file (YAML `levers: [{name: KEY, values: [...], dimension: N}]`). Each
 * config value is validated as `scaffold benchmark` would see it: the user's configuration
 * arguments (cfg_argv[0] is the command name) plus `--KEY=VALUE`. Errors name the file, the
 * entry and the key: ERR_CONFIG, and *out is left empty. tune_levers_parse reads from memory
 * (the fuzz harness); `label` names the input in messages. */
int tune_levers_load(const char *path, int cfg_argc, char **cfg_argv, tune_levers *out);
int tune_levers_parse(const char *text, size_t n, const char *label, int cfg_argc,
                      char **cfg_argv, tune_levers *out);

/* Checks a lever's name and values and sets its kind and key; 0 or ERR_CONFIG. */
int tune_lever_check(tune_lever *l, int cfg_argc, char **cfg_argv);

/* The built-in catalog for this machine's shape (ncpu cores, the base layout ranks x threads).
 * stage_dir: the /dev/shm folder the dataset_dir lever stages the dataset in (NULL: none). */
void tune_levers_builtin(const scaffold_config *base, int ncpu, int ranks, int threads,
                         const char *stage_dir, tune_levers *out);

/* An analyzer proposal mapped to a lever of the benchmark: returns the lever name (and the
 * dimension) or NULL, with *why = the system change it needs instead. */
const char *tune_proposal_lever(const char *strategy_key, const char **why);

/* Checklist dimension and class of a lever name (config key, env: or launch:). */
int tune_lever_dimension(const char *name);
tune_lever_class tune_lever_class_of(const char *name);

/* ------------------------------------------------------------------ one run */

#define TUNE_MAX_EPOCHS 512
#define TUNE_MAX_REPEATS 16
/* The fewest A-B pairs a verdict that rests on the noise is drawn from: the band is measured
 * from the pairs' spread, and fewer than 3 pairs say too little about it. */
#define TUNE_MIN_PAIRS 3

/* The measurements of one benchmark run. */
typedef struct tune_meas {
    int ok;                  /* ran to completion and was measured */
    int numeric;             /* failed with a non-finite loss */
    char error[400];
    double throughput;       /* training samples/s over the steady epochs (2..E) */
    double epoch_s;          /* median steady epoch duration */
    double ttt_s;            /* time to target (training wall time), NAN if not converged */
    double wall_s;           /* the whole command, seconds */
    double cpu_wait;         /* share of the training its threads waited for a CPU (the
                              * benchmark's summary line; NAN: not said) */
    int converged, nepochs;
    double samples_per_epoch, samples_per_step, batches_per_epoch;
    double loss[TUNE_MAX_EPOCHS], val_loss[TUNE_MAX_EPOCHS], val_dice[TUNE_MAX_EPOCHS];
    an_run run;              /* compare's summary of the trace (work, times) */
    char run_dir[1024], trace_dir[1024];
    char host[128], cpu[160], layout[32], started[32];
} tune_meas;

/* How runs are launched. */
typedef struct tune_launch {
    const char *self;        /* the scaffold executable */
    int cfg_argc;            /* the user's configuration arguments (-c FILE, --key value) */
    char **cfg_argv;
    int np;                  /* ranks (1: no launcher unless one was given) */
    const char *launcher;    /* "mpirun ..." or NULL */
    int epochs_cap;          /* > 0: --epochs for every run */
    double timeout_s;        /* kill a run after this long (<= 0: none) */
    /* Called once a run's session exists (its id and start time), so that a resumed tune can
     * find what a killed one left running; NULL: not recorded. */
    void (*on_start)(void *ctx, int sid, unsigned long long start);
    void *ctx;
} tune_launch;

/* One setting: the config-key overrides, env settings and the layout a run uses. */
typedef struct tune_setting {
    int n;
    int lever[TUNE_MAX_LEVERS]; /* index in the levers */
    char value[TUNE_MAX_LEVERS][TUNE_VALUE_MAX];
} tune_setting;

/* Sets (or replaces) the value of lever li in s. */
void tune_setting_put(tune_setting *s, int li, const char *value);
/* "name=value name=value" (or "baseline"). */
void tune_setting_str(const tune_setting *s, const tune_levers *lv, char *buf, size_t cap);

/* Runs the benchmark once with setting `s`, traced, in `dir` (created), and measures it.
 * Returns 0 when the run could be attempted (m->ok says whether it succeeded), or an error
 * (the tracer missing, the directory unwritable).
 *
 * The run is a job of core/job.h: a session of its own, led by a supervisor process forked from
 * the tuner, that ends with the tuner (kill -9 included) and takes along whatever the run leaves
 * behind; L->on_start gets its session id (job_inflight names it while it runs). A timeout
 * sends SIGTERM to the supervisor, SIGKILL 10 s later. */
int tune_run_one(const tune_launch *L, const tune_levers *lv, const tune_setting *s,
                 const char *dir, tune_meas *m);

/* This machine: host name, CPU model, online CPUs. */
void tune_machine(char *host, size_t hcap, char *cpu, size_t ccap, int *ncpu);

/* ------------------------------------------------------------------ journal (resume) */

typedef struct tune_journal_child {
    char trial[32];
    char side;
    int rep;
    int sid;                 /* the run's session (its supervisor's pid) */
    unsigned long long start; /* the supervisor's start time */
} tune_journal_child;

typedef struct tune_journal {
    tune_meas *runs;         /* every run line read */
    char (*trial)[32];
    char *side;              /* 'A' incumbent, 'B' candidate, 'P' probe */
    int *rep;
    int nruns;
    char **done;             /* finished trials */
    int ndone;
    tune_journal_child *child; /* every run started (child lines) */
    int nchild;
} tune_journal;

/* Reads OUT/journal.tsv for --resume (ERR_USAGE if missing, empty or written with another
 * signature); a torn last line is cut off the file. */
int tune_journal_read(const char *path, const char *signature, tune_journal *j);
/* A run of a finished trial, or NULL. */
const tune_meas *tune_journal_find(const tune_journal *j, const char *trial, char side, int rep);
void tune_journal_free(tune_journal *j);
/* Opens the journal for appending (append) or creates it with its header. */
int tune_journal_start(const char *path, const char *signature, int append, FILE **out);
int tune_journal_run(FILE *f, const char *trial, char side, int rep, const tune_meas *m);
int tune_journal_done(FILE *f, const char *trial);
/* Records that a run started, in session sid (a `child` line, synced before the run does
 * anything), so that --resume can end what a killed tune left running. */
int tune_journal_child_started(FILE *f, const char *trial, char side, int rep, int sid,
                               unsigned long long start);
/* Whether the journal holds a `run` line (the measurement) for this run. */
int tune_journal_has_run(const tune_journal *j, const char *trial, char side, int rep);

/* ------------------------------------------------------------------ verdicts */

typedef enum { TUNE_OBJ_THROUGHPUT, TUNE_OBJ_TTT, TUNE_OBJ_EPOCH } tune_objective;
extern const char *const tune_objective_names[3];

/* The figure of merit of a run for an objective, and whether higher is better. */
double tune_fom(const tune_meas *m, tune_objective o);
int tune_fom_higher_better(tune_objective o);
/* The finite figures of merit of runs m[0..n) into v (TUNE_MAX_REPEATS at most); their count. */
int tune_foms(const tune_meas *m, int n, tune_objective o, double *v);

typedef struct tune_verdict {
    const char *verdict;     /* accept | revert | guard-reject | inconclusive | blocked */
    const char *guard;       /* the guard that fired ("" if none) */
    int firm;                /* the verdict does not rest on the noise (a failed run, a
                              * non-finite loss, does less, a changed batch): more pairs would
                              * not change it */
    tune_objective judged;   /* the FOM the verdict used (epoch time for batch levers) */
    double base_med, cand_med; /* medians of that FOM */
    an_delta d;              /* candidate vs incumbent, from the pairs: med = the mean change
                              * (exp of the mean log ratio, - 1), lo..hi its 99% interval,
                              * noise = the floor (--noise); oriented: > 0 better */
    int pairs;               /* A-B pairs the change was measured from */
    int more_pairs;          /* inconclusive: about how many more pairs would likely decide it
                              * (-1: none would, the change is within the floor; 0: decided) */
    double tput_gain, epoch_gain; /* relative changes, NAN if unknown */
    char reason[700];
} tune_verdict;

/* The verdict of a trial: pairs (a[i], b[i]) of incumbent and candidate runs made one after the
 * other, i < min(na, nb). Each pair gives the log ratio of the FOMs (a drift of a busy machine
 * hits both runs of a pair alike, so it cancels); the change is their mean, with a 99% Student
 * t interval (99%, not 95%: the pairs are looked at after each one, and a stricter interval
 * keeps the chance of a false verdict over those repeated looks near 5%). A verdict needs at
 * least TUNE_MIN_PAIRS pairs and an interval beyond zero by more than the floor; otherwise the
 * trial is inconclusive and says how many more pairs would likely decide it. `batch_lever`:
 * the lever changes the batch (local_batch_size, the rank count): judged on epoch time and the
 * samples per step may differ. min_noise is the band floor (fraction). */
void tune_judge(const tune_meas *a, int na, const tune_meas *b, int nb, tune_objective obj,
                int batch_lever, double min_noise, tune_verdict *v);

/* ------------------------------------------------------------------ analysis of a run */

#define TUNE_MAX_PROPS 24

/* What `scaffold analyze` says about one run's trace: the 12-dimension checklist, the proposals
 * and the shares the discriminator uses. */
typedef struct tune_analysis {
    int ok;
    char error[300];
    struct {
        int dim, applicable;
        char name[80], verdict[40];
        double impact_pct;
        char reason[400];
    } check[12];
    int nprops;
    struct {
        char key[40], name[96];
        int dim;
        double app_pct, sys_pct, score;
    } prop[TUNE_MAX_PROPS];
    double loader_wait_share; /* data-loader stall / process time */
    double io_share;          /* exposed I/O / process time */
    double ckpt_share;        /* checkpoint stall / wall time */
} tune_analysis;

/* Analyzes one run's traces (reader, metrics, rules, checklist, proposals), with a lever
 * catalog when `catalog` is not NULL (dimensions applied & measured). 0 or ERR_*. */
int tune_analyze(const char *trace_dir, const char *catalog, tune_analysis *a);

/* ------------------------------------------------------------------ the tune */

typedef struct tune_opts {
    int cfg_argc;
    char **cfg_argv;         /* argv[0] is "tune"; -c files and --key flags */
    const char *levers_file; /* NULL: built-in catalog + analyzer proposals */
    tune_objective objective;
    int repeats;             /* N: runs of the baseline, and the pairs a trial starts with
                              * (default 3) */
    int max_repeats;         /* the most pairs a trial runs before it is inconclusive
                              * (default 8; at least repeats) */
    double budget_s;         /* <= 0: no budget */
    int np;
    const char *launcher;
    const char *out;
    int resume;
    double noise;            /* band floor (fraction, default 0.01) */
    int discriminate;        /* run the discriminator probes (default 1) */
} tune_opts;

/* One trial: the incumbent (side A) and a candidate (side B) interleaved, or one side only
 * (the baseline, the discriminator probes). */
typedef struct tune_trial {
    char id[32];             /* baseline, probe-threads, probe-precision, t01.., final */
    int lever;               /* index in the levers, -1 for baseline/probes/final */
    char value[TUNE_VALUE_MAX];
    tune_setting inc, cand;
    tune_meas *a, *b;        /* [repeats] each; b NULL when there is no candidate */
    int na, nb;
    int batch_lever;
    int done;
    tune_verdict v;
} tune_trial;

#define TUNE_MAX_TRIALS 256

typedef struct tune_state {
    const tune_opts *o;
    tune_launch L;
    tune_levers lv;
    int order[TUNE_MAX_LEVERS];  /* levers in the order they are tried */
    char out[1024], self[1024];
    char host[128], cpu[160];
    int ncpu, ranks, threads;
    char signature[65];
    char stage_dir[64];          /* the built-in dataset_dir lever's /dev/shm folder, or "" */
    FILE *journal;
    tune_journal prev;           /* what --resume found */
    tune_trial *trials;
    int ntrials;
    tune_trial *baseline, *final, *probe_threads, *probe_precision;
    tune_setting incumbent;
    double t0, elapsed_s, run_s_sum; /* wall clock, and the sum of run times (for the ETA) */
    int runs_done, runs_planned, trials_planned;
    int runs_busy; /* runs of this invocation whose threads waited over BENCH_BUSY_WAIT */
    const char *stopped;         /* "complete" or "budget" */
    char untried[2048];
    /* discriminator */
    const char *cls;
    char cls_reason[400];
    double thread_speedup, precision_speedup;
    tune_analysis base_an, best_an;
    /* analyzer proposals mapped to levers, or the system change they need */
    int nmapped;
    struct {
        char key[40], lever[TUNE_NAME_MAX];
        const char *why;
    } mapped[TUNE_MAX_PROPS];
} tune_state;

/* Writes tune.json, lever_catalog.yaml, best.yml, report.html and tune.svg into S->out
 * (atomically).
 * (output.c) */
int tune_write_outputs(const tune_state *S);

/* What a tune recommends, one answer for best.yml, tune.json, report.html and the summary line.
 * When the final paired check of the best setting against the baseline ran, its numbers are
 * quoted (both medians from its own pairs) and the setting is kept only if it accepted it. */
typedef struct tune_best {
    const tune_setting *set;  /* the overrides recommended (NULL: none, the baseline) */
    const tune_setting *tried; /* the incumbent the trials reached (NULL: none accepted) */
    int checked;              /* the final paired check ran */
    double base, cand;        /* medians of the FOM: baseline and candidate, as compared */
    an_delta d;               /* candidate vs that baseline (> 0 better) */
    int pairs;
    const char *verdict;      /* the final check's verdict, "baseline" or "unconfirmed" */
    char basis[200];          /* what `base` is ("the baseline", "the incumbent of t03") */
} tune_best;
void tune_best_of(const tune_state *S, tune_best *b);

/* The summary line on stdout (output.c). */
void tune_print_summary(const tune_state *S, FILE *out);

/* Runs the whole tune. 0, or ERR_* with the message in err_msg() (ERR_CONFIG/ERR_USAGE for bad
 * input: nothing is written then). */
int tune_main(const tune_opts *o);

#endif
