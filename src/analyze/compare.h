/* compare: paired comparison of baseline and candidate runs, each side with replicates.
 *
 * A run is summarised by its wall time, epoch times and the work it did (bytes, checkpoint
 * events, epochs, compute steps, events per category). The verdict follows three guards:
 * (1) a candidate that does less work (fewer bytes, checkpoints, epochs or steps) is rejected
 * as "does less, not faster"; (2) a system-side gain (less I/O time, more I/O bandwidth) that
 * costs the application more than 2% wall time is rejected (non-degradation guard); (3) a
 * wall-time change is only credited when the whole candidate range lies outside the baseline's
 * own noise band, otherwise the verdict is inconclusive. */
#ifndef SCAFFOLD_ANALYZE_COMPARE_H
#define SCAFFOLD_ANALYZE_COMPARE_H

#include "analyze/trace.h"

#include <stdint.h>
#include <stdio.h>

#define AN_CMP_CATS 16

typedef struct an_run {
    char label[512];
    double wall_s, epoch_mean_s, io_time_s, io_bw;
    uint64_t epochs, ckpt_events, ckpt_bytes, bytes_read, bytes_written, compute_events, events;
    int ncats;
    char cat_name[AN_CMP_CATS][32];
    uint64_t cat_events[AN_CMP_CATS];
    char warning[300];
} an_run;

typedef struct an_compare_result {
    const char *verdict;       /* "keep", "reject", "inconclusive" */
    int does_less, guard_triggered;
    double noise;              /* the noise band used (fraction) */
    double wall_med, wall_lo, wall_hi;    /* candidate vs baseline, fractions (-0.1 = 10% faster) */
    double epoch_med, epoch_lo, epoch_hi; /* NAN when no epoch annotations */
    double io_med;             /* I/O time change */
    char less[300];            /* what the candidate does less of */
    char reason[600];
} an_compare_result;

/* Reads one run (file, directory or glob) and summarises it. 0 or an error code. */
int an_run_load(const char *path, const an_read_opts *opts, an_run *run);

/* Compares; min_noise is the smallest noise band assumed (fraction, e.g. 0.01). */
void an_compare(const an_run *base, size_t nb, const an_run *cand, size_t nc, double min_noise,
                an_compare_result *r);

void an_compare_text(const an_run *base, size_t nb, const an_run *cand, size_t nc,
                     const an_compare_result *r, FILE *out);
void an_compare_json(const an_run *base, size_t nb, const an_run *cand, size_t nc,
                     const an_compare_result *r, FILE *out);

#endif
