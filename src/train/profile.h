/* profile: `scaffold benchmark --profile` (or SCAFFOLD_PROFILE=1): the regions of the timer
 * (core/prof.h) of every rank, gathered on rank 0 and written into the run folder's profile/:
 *
 *   profile.cali        Caliper's spot format: one record per region with the inclusive time
 *                       per rank (min, avg, max, total over ranks), the exclusive average and
 *                       the calls per rank, and Adiak's run metadata as globals. One run = one
 *                       profile for Thicket (Thicket.from_caliperreader) and Hatchet.
 *   profile-ranks.cali  one record per region and rank (mpi.rank, exclusive time
 *                       sum#time.duration, inclusive#sum#time.duration, calls): Hatchet's
 *                       GraphFrame.from_caliperreader indexes it by (node, rank).
 *   profile.json        Chrome trace-event JSON (Perfetto, chrome://tracing): one process per
 *                       rank, one track per thread, each region a complete ("X") slice.
 *   profile.txt         the region report, also printed (condensed) on stderr at the end.
 *
 * Adiak metadata follows Adiak's own names (user, launchdate, cmdline, hostname, cluster,
 * jobsize, numhosts, mpi_version, mpi_library...), upstream ScaFFold's for the run
 * (every configuration key, global_batch_size, ddp_ranks, total_shards, num_spatial_dims,
 * minibatch_time_s, final_epochs, total_optimizer_steps, FOM) and scaffold's for the rest
 * (scaffold_version, compiler, threads_per_rank, cpu_model, isa_path, precision,
 * time_to_target_s...). */
#ifndef SCAFFOLD_TRAIN_PROFILE_H
#define SCAFFOLD_TRAIN_PROFILE_H

#include "core/config.h"
#include "mpi/dist.h"
#include "train/bench.h"

enum { PROFILE_CALI = 1, PROFILE_PERFETTO = 2, PROFILE_TEXT = 4, PROFILE_ALL = 7 };

typedef struct train_profile {
    int on;           /* --profile, or SCAFFOLD_PROFILE in {1, true, on, yes} */
    unsigned formats; /* PROFILE_* bits (--profile-format; default all) */
    char dir[4096];   /* --profile-dir; empty: <run folder>/profile */
    long events;      /* timeline events kept per thread (SCAFFOLD_PROFILE_EVENTS) */
} train_profile;

/* "cali,perfetto,text" (any subset, comma-separated) into PROFILE_* bits. 0, or ERR_USAGE
 * naming the word that is not a format. */
int train_profile_formats(const char *s, unsigned *out);

/* 1 when SCAFFOLD_PROFILE is 1, true, on or yes (any case), as upstream's PROFILE_TORCH. */
int train_profile_env(void);

/* Collective, before any work: rank 0's switches become every rank's, an explicit profile
 * folder is checked (ERR_USAGE naming it when it cannot be created), then the timer starts on
 * every rank at a common time zero (after a barrier) and the `main` region opens. Nothing more
 * happens when the profile is off. Agreed result. */
int train_profile_start(const dist_world *w, train_profile *p);

/* Collective, after bench_run succeeded: closes the timer, gathers every rank's regions and
 * timeline on rank 0, writes the formats asked for (each file written to a temporary name and
 * renamed) and prints the condensed report on stderr. Agreed result. */
int train_profile_finish(const dist_world *w, const train_profile *p, const scaffold_config *c,
                         const bench_result *r);

/* Stops the timer without writing anything (a failed run). */
void train_profile_abort(const train_profile *p);

#endif
