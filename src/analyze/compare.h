/* compare: paired comparison of baseline and candidate runs, each side with replicates.
 *
 * A run is summarised by its times (whole run, and each phase the benchmark's annotations
 * separate: setup/dataset generation, warmup, training, after training) and by the work it did.
 * Work is counted in application units when the trace has epoch annotations: epochs, optimizer
 * steps, training and validation samples (the `batch_size` of each fetch), bytes delivered to
 * the application (each fetch's `bytes`, whatever tier served them), checkpoint events and
 * bytes (written inside checkpoint regions or to checkpoint files by any thread). File-system
 * bytes are reported per phase but are not work: fewer bytes read for the same samples is a
 * data-path change (a cache, an in-memory store), not doing less. Without annotations the work
 * falls back to file-system bytes, checkpoints and compute events.
 *
 * The verdict follows three guards: (1) a candidate that does less work is rejected as "does
 * less, not faster"; (2) a system-side gain (less I/O time, more I/O bandwidth) that costs the
 * application more than 2% time, beyond the noise band, is rejected (non-degradation guard);
 * (3) a time change is only credited when the whole candidate range lies outside the noise band,
 * otherwise the verdict is inconclusive. Time is the training phase when annotated (dataset
 * generation and warmup excluded, as the benchmark's figure of merit), else the whole run. */
#ifndef SCAFFOLD_ANALYZE_COMPARE_H
#define SCAFFOLD_ANALYZE_COMPARE_H

#include "analyze/metrics.h"
#include "analyze/trace.h"

#include <stdint.h>
#include <stdio.h>

#define AN_CMP_CATS 16

/* Phases of a benchmark process, from its annotations: setup (fractal and dataset generation,
 * loading, class weights: before the first fetch/compute), warmup (fetch/compute before the
 * first epoch), training (first epoch start to last epoch end), after (final checkpoint,
 * figures). A process without epoch annotations is all setup. */
enum { AN_PH_SETUP, AN_PH_WARMUP, AN_PH_TRAIN, AN_PH_AFTER, AN_PH_COUNT };
extern const char *const an_phase_names[AN_PH_COUNT];

/* Application work of a run (sums over processes unless noted). Index 0 = training,
 * 1 = validation (fetches inside evaluation regions). */
typedef struct an_work {
    int annotated;              /* epoch annotations present: the counts below are meaningful */
    uint64_t epochs;            /* max over processes */
    uint64_t nprocs;            /* processes with epoch annotations (the ranks) */
    uint64_t steps;             /* optimizer steps in training ("step" compute events, else
                                 * compute events outside evaluation) */
    uint64_t batches[2], samples[2];
    int samples_known[2];       /* every batch stated its batch_size */
    uint64_t delivered_bytes;   /* fetch `bytes` in training (train + validation) */
    int delivered_known;
    uint64_t ckpt_events, ckpt_bytes;
    uint64_t fs_read[AN_PH_COUNT], fs_written[AN_PH_COUNT]; /* file-system bytes per phase */
    double phase_s[AN_PH_COUNT]; /* wall span of each phase, earliest start to latest end */
} an_work;

/* Measures the work of a loaded trace (m from an_metrics_compute on the same trace).
 * 0 or ERR_NOMEM. (work.c) */
int an_work_compute(const an_trace *t, const an_metrics *m, an_work *w);

typedef struct an_run {
    char label[512];
    double wall_s, epoch_mean_s, io_time_s, io_bw;
    double time_s;              /* the compared time: training phase when annotated, else wall */
    uint64_t epochs, ckpt_events, ckpt_bytes, bytes_read, bytes_written, compute_events, events;
    an_work work;
    int ncats;
    char cat_name[AN_CMP_CATS][32];
    uint64_t cat_events[AN_CMP_CATS];
    char warning[300];
} an_run;

/* One measure compared between replicated sides: candidate / baseline - 1 as the median ratio
 * and the range (min cand / max base - 1 .. max cand / min base - 1); the noise band is half
 * the relative spread of either side's replicates, never below the floor. */
typedef struct an_delta {
    double med, lo, hi, noise;
} an_delta;

/* NAN fields when either side has no positive value. */
void an_delta_of(const double *base, size_t nb, const double *cand, size_t nc, double min_noise,
                 an_delta *d);
/* +1: the candidate is larger beyond the band (the whole range above 0 and the median change
 * beyond the noise), -1: smaller beyond it, 0: within the band. */
int an_delta_sign(const an_delta *d);
/* Median of v[0..n) (sorts v). */
double an_median(double *v, size_t n);

typedef struct an_compare_result {
    const char *verdict;       /* "keep", "reject", "inconclusive" */
    int does_less, guard_triggered;
    int app_units;             /* work compared in application units (both sides annotated) */
    const char *time_basis;    /* "training phase" or "whole run" */
    double noise;              /* the noise band used (fraction) */
    double wall_med, wall_lo, wall_hi;    /* compared time, candidate vs baseline (fractions,
                                           * -0.1 = 10% faster) */
    double epoch_med, epoch_lo, epoch_hi; /* NAN when no epoch annotations */
    double io_med;             /* I/O time change (0 when a side has no I/O: see io_none) */
    int io_none;               /* bit 0: no baseline run has I/O time, bit 1: no candidate run */
    char less[300];            /* what the candidate does less of */
    char datapath[300];        /* fewer file-system bytes for the same work, when it happens */
    char reason[900];
} an_compare_result;

/* Reads one run (file, directory or glob) and summarises it. 0 or an error code. */
int an_run_load(const char *path, const an_read_opts *opts, an_run *run);

/* Compares; min_noise is the smallest noise band assumed (fraction, e.g. 0.01). */
void an_compare(const an_run *base, size_t nb, const an_run *cand, size_t nc, double min_noise,
                an_compare_result *r);

/* The work check alone (guard 1): fills r->does_less, r->less, r->app_units and r->datapath. */
void an_compare_work(const an_run *base, size_t nb, const an_run *cand, size_t nc,
                     an_compare_result *r);

void an_compare_text(const an_run *base, size_t nb, const an_run *cand, size_t nc,
                     const an_compare_result *r, FILE *out);
void an_compare_json(const an_run *base, size_t nb, const an_run *cand, size_t nc,
                     const an_compare_result *r, FILE *out);

#endif
