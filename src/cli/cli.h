/* cli: the `scaffold` subcommands. Each returns the process exit status (0 ok, 2 bad input,
 * 1 runtime failure). A command initialises MPI itself if it needs it (dist_init), so commands
 * such as `trace` and `analyze` never touch MPI. */
#ifndef SCAFFOLD_CLI_CLI_H
#define SCAFFOLD_CLI_CLI_H

#include "core/config.h"
#include "core/opt.h"
#include "mpi/dist.h"

int cmd_generate_fractals(int argc, char **argv);
int cmd_generate_dataset(int argc, char **argv);
int cmd_benchmark(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_analyze(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_store_bench(int argc, char **argv);
int cmd_scaling(int argc, char **argv);
int cmd_tune(int argc, char **argv);

/* Starts a configuration-driven command: MPI (dist_init), logging, the configuration parsed
 * from argv and validated on every rank, directories made absolute, the outcome agreed.
 * Returns -1 when the command should go on; otherwise the exit status to return (0 after
 * --help, 2 for bad input), with MPI already finalised. */
int cli_config_start(int *argc, char ***argv, dist_world *w, scaffold_config *c,
                     const char *summary);

/* The same for a command with options of its own beside the configuration flags (`extra`, an
 * OPT_END-terminated table of core/opt.h; they are filled before anything else happens). */
int cli_config_start_opts(int *argc, char ***argv, dist_world *w, scaffold_config *c,
                          const char *summary, const opt_spec *extra);

/* Parses the command line of a command that does not read the configuration, with its option
 * table (core/opt.h). Returns -1 when the command should go on (*first = index of the first
 * positional argument), otherwise the exit status: 0 after printing the help, 2 after printing
 * one "scaffold NAME: message" line. Every rank reaches the same verdict without MPI; only a
 * failure under a launcher of several ranks starts MPI, so that rank 0 has said why before any
 * rank leaves. */
int cli_parse(const opt_cmd *cmd, int argc, char **argv, int *first);

/* Prints "scaffold CMD: <err_msg()>" on rank 0, finalises MPI, returns the exit status of rc. */
int cli_fail(dist_world *w, const char *cmd, int rc);

#endif
