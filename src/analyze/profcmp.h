/* profcmp: `scaffold compare` on profiles: two sides of replicated runs, each a .cali file or a
 * folder holding one (a run folder's profile/profile.cali, or the profile folder itself).
 *
 * A profile is read as its regions (path -> time per rank: the average over ranks of the
 * inclusive time, and calls per rank) and its globals. It reads scaffold's profile.cali (Caliper's
 * spot format), profile-ranks.cali (per-rank records, averaged over ranks) and Caliper's own files
 * of either kind (exclusive-only files are summed up their paths).
 *
 * The comparison applies compare.h's guards to profiles: (1) the workload (problem_scale,
 * unet_base_channels, n_categories, local_batch_size, precision, dc_num_shards) must be the same,
 * else the changed regions are shown without a verdict; (2) the candidate must do the same work
 * (epochs, training and validation samples: batches per rank times global_batch_size, checkpoint
 * writes, and the calls per minibatch of every region of the step but communication; a region of
 * the baseline's step that the candidate no longer runs is less work): a candidate doing less is
 * rejected as "does less, not faster";
 * (3) the time (the median minibatch time, upstream's minibatch_time_s, else the batch loop's
 * time per minibatch, else the whole run) is credited only when its whole range lies outside the
 * noise band. Regions are compared per minibatch (per run when the minibatches are unknown), and
 * those that changed beyond the band and by at least 0.1% of the step are listed. */
#ifndef SCAFFOLD_ANALYZE_PROFCMP_H
#define SCAFFOLD_ANALYZE_PROFCMP_H

#include <stddef.h>
#include <stdio.h>

typedef struct an_prof_region {
    char *path;        /* "main/benchmark/epoch/..." */
    double time;       /* inclusive seconds per rank (average over ranks) */
    double calls;      /* calls per rank (average; < 0: unknown) */
} an_prof_region;

typedef struct an_prof_run {
    char label[1024]; /* the path given */
    char file[4096];  /* the .cali file read */
    an_prof_region *r;
    size_t n;
    int ranks;
    double minibatch_time_s; /* the global, or NAN */
    double steps;            /* training minibatches per rank (-1: unknown) */
    double global_batch;     /* samples per minibatch over all ranks (global_batch_size, else
                              * the ranks) */
    double epochs, val_batches, ckpt_writes; /* -1: unknown */
    char workload[6][64];    /* values of the workload keys ("" when absent) */
} an_prof_run;

/* 1 when `path` is a profile: a .cali file, or a folder holding profile.cali or
 * profile/profile.cali. */
int an_prof_is_profile(const char *path);

/* Reads one profile. 0, ERR_IO or ERR_FORMAT naming the file (a damaged .cali, or one without
 * region times). */
int an_prof_load(const char *path, an_prof_run *run);
void an_prof_free(an_prof_run *run);

typedef struct an_prof_change {
    const char *path;
    double base, cand;  /* median over replicates of the time per minibatch (or per run) */
    double med, lo, hi; /* candidate / baseline - 1 */
    int only;           /* 0: both, 1: only in the baseline, 2: only in the candidate */
} an_prof_change;

typedef struct an_prof_result {
    const char *verdict;    /* "keep", "reject", "inconclusive" */
    int does_less, same_workload;
    int work_known;         /* the baseline has scaffold's work regions (epochs, minibatches...) */
    const char *time_basis; /* "median minibatch time", "batch loop per minibatch", "whole run" */
    double noise, med, lo, hi;
    int per_step;           /* region times are per minibatch */
    char workload_diff[300];
    char less[600];
    char reason[900];
    an_prof_change *ch;     /* changed regions, largest absolute change first */
    size_t nch;
} an_prof_result;

/* Compares; min_noise is the smallest noise band (fraction). 0 or ERR_NOMEM. Free the result's
 * changes with an_prof_result_free. */
int an_prof_compare(const an_prof_run *base, size_t nb, const an_prof_run *cand, size_t nc,
                    double min_noise, an_prof_result *r);
void an_prof_result_free(an_prof_result *r);

void an_prof_text(const an_prof_run *base, size_t nb, const an_prof_run *cand, size_t nc,
                  const an_prof_result *r, FILE *out);
void an_prof_json(const an_prof_run *base, size_t nb, const an_prof_run *cand, size_t nc,
                  const an_prof_result *r, FILE *out);

#endif
