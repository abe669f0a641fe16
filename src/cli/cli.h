/* cli: the `scaffold` subcommands. Each returns the process exit status (0 ok, 2 bad input,
 * 1 runtime failure). A command initialises MPI itself if it needs it (dist_init), so commands
 * such as `trace` and `analyze` never touch MPI. */
#ifndef SCAFFOLD_CLI_CLI_H
#define SCAFFOLD_CLI_CLI_H

int cmd_generate_fractals(int argc, char **argv);
int cmd_generate_dataset(int argc, char **argv);
int cmd_benchmark(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_analyze(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_store_bench(int argc, char **argv);

#endif
