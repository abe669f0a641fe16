/* scaling: a scaling study (what upstream's run_scaling_study.sh and collate_scaling_study.py do
 * by hand). For every point (rank count x shard layout) it launches one `scaffold benchmark`
 * through a launcher as a job of core/job.h, in its own folder, then collates scaling.csv,
 * scaling.png and a summary line. `scaffold scaling` (cli/cmd_scaling.c) is its option table.
 *
 *   OUT/config.yaml              the merged configuration every point runs (refused on resume
 *                                when the configuration differs)
 *   OUT/points/<id>/log.txt      the point's output; runs/ its run folder
 *   OUT/points/<id>/result.csv   written (atomically) when the point ends, success or failure:
 *                                a resumed study skips the points that have one
 *   OUT/scaling.csv, scaling.png
 *
 * The study does not use MPI: it only starts launchers (mpirun, srun, flux run ...). */
#ifndef SCAFFOLD_SCALING_SCALING_H
#define SCAFFOLD_SCALING_SCALING_H

#include "core/config.h"

/* The study's options (the command line's words, checked by scaling_study). */
typedef struct scaling_opts {
    const char *ranks;    /* "1,2,4": rank counts; required */
    const char *shards;   /* "1 1 1;2 1 1": dc_num_shards layouts */
    const char *launcher; /* prefix, {n} replaced by the rank count; NULL: mpirun */
    const char *mode;     /* "weak" or "strong" */
    const char *out;      /* the study folder; required */
    int threads;          /* OMP_NUM_THREADS of every rank (0: inherited) */
    double timeout;       /* seconds before a point is killed (0: none) */
} scaling_opts;

/* Runs (or resumes) the study of configuration c (finalized; its directories are made
 * absolute here) and prints its summary line on stdout. Returns 0 when it ran, *all_failed
 * saying whether no point succeeded; an error code (err_msg says why) for bad options, a
 * configuration that differs from the study's, or output that could not be written. SIGTERM,
 * SIGINT and SIGHUP end the running point's job with the study. */
int scaling_study(scaffold_config *c, const scaling_opts *o, int *all_failed);

#endif
