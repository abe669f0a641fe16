/* stop: the signals that end a run cleanly. SIGTERM (what Slurm sends at a time limit, or the
 * signal chosen with --signal), SIGINT (Ctrl-C) and SIGUSR1 (a common --signal choice) are
 * recorded while the benchmark trains; the training loop polls at every step boundary, all
 * ranks together (a signal delivered to one rank only, as a launcher may do, stops every rank
 * at the same step), finishes the step, saves a checkpoint when checkpointing is on, prints one
 * line and exits with 128 + the signal's number (143, 130, 138). A second signal while the first
 * is being honoured ends the process at once (the default action). */
#ifndef SCAFFOLD_TRAIN_STOP_H
#define SCAFFOLD_TRAIN_STOP_H

#include "mpi/dist.h"

/* Installs the handlers (the previous ones are kept for train_stop_uninstall). */
void train_stop_install(void);
void train_stop_uninstall(void);

/* Collective over `w`: the signal some rank received (the largest number when several did), 0
 * when none. Every rank returns the same value. */
int train_stop_poll(const dist_world *w);

/* "SIGTERM", "SIGINT", "SIGUSR1", or "signal N". */
const char *train_stop_name(int sig);

#endif
