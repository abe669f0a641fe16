/* scaffold: the command-line entry point; dispatches to the subcommands of cli.h.
 * A subcommand whose module is not part of this build is declared weak and reported as such. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

#pragma weak cmd_generate_fractals
#pragma weak cmd_generate_dataset
#pragma weak cmd_benchmark
#pragma weak cmd_predict
#pragma weak cmd_trace
#pragma weak cmd_analyze
#pragma weak cmd_compare
#pragma weak cmd_store_bench
#pragma weak cmd_scaling
#pragma weak cmd_tune

#include "core/cpus.h"
#include "core/version.h"

#include <stdlib.h>

/* OpenMP's waiting threads. At every barrier libgomp spins 300,000 iterations (about a
 * millisecond) before it sleeps; on a node where another process takes a core, the spinning
 * members take the CPU that the descheduled member needs to reach the barrier (a neighbour on one
 * of two cores cost 8.5x the quiet time to target, PyTorch 4.8x). So a short spin, then sleep,
 * unless the user chose (OMP_WAIT_POLICY or GOMP_SPINCOUNT): 1,000 iterations, the count libgomp
 * itself falls back to when its team has more threads than CPUs. libgomp reads its environment once,
 * in its constructor: the Makefile links it statically (SCAFFOLD_OMP_STATIC), so that this
 * constructor, of a higher priority, runs first. main takes the variable out of the environment
 * again, so that child processes (`scaffold trace -- CMD`, the benchmarks of tune and scaling) get
 * the user's environment. */
#define SCAFFOLD_GOMP_SPINCOUNT "1000"
static int omp_wait_set;

#ifdef SCAFFOLD_OMP_STATIC
__attribute__((constructor(101))) static void omp_wait_default(void) {
    if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT"))
        omp_wait_set = setenv("GOMP_SPINCOUNT", SCAFFOLD_GOMP_SPINCOUNT, 1) == 0;
}
#endif

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} cli_command;

static void usage(FILE *out, const cli_command *cmds, size_t n) {
    fprintf(out, "usage: scaffold [--version] [--help] COMMAND [ARGS...]\n\n"
                 "The ScaFFold benchmark in C and the I/O tools around it.\n\ncommands:\n");
    for (size_t i = 0; i < n; i++)
        fprintf(out, "  %-18s %s%s\n", cmds[i].name, cmds[i].help,
                cmds[i].fn ? "" : " (not built)");
    fprintf(out, "\nRun 'scaffold COMMAND --help' for the options of a command.\n"
                 "Run on N ranks with: mpirun -n N scaffold COMMAND ...\n");
}

int main(int argc, char **argv) {
    if (omp_wait_set) {
        unsetenv("GOMP_SPINCOUNT");
        cpus_set_wait_note("waiting threads spin GOMP_SPINCOUNT=" SCAFFOLD_GOMP_SPINCOUNT
                           " iterations, then sleep (OMP_WAIT_POLICY or GOMP_SPINCOUNT to choose)");
    } else {
        char note[160];
        const char *p = getenv("OMP_WAIT_POLICY"), *c = getenv("GOMP_SPINCOUNT");
        if (p || c)
            snprintf(note, sizeof note, "waiting threads as set: %s%s%s%s%s",
                     p ? "OMP_WAIT_POLICY=" : "", p ? p : "", p && c ? ", " : "",
                     c ? "GOMP_SPINCOUNT=" : "", c ? c : "");
        else
            snprintf(note, sizeof note, "waiting threads: the OpenMP runtime's default (a shared "
                                        "runtime; set GOMP_SPINCOUNT=" SCAFFOLD_GOMP_SPINCOUNT ")");
        cpus_set_wait_note(note);
    }
    const cli_command cmds[] = {
        {"generate_fractals", cmd_generate_fractals, "generate the IFS fractal classes and instances"},
        {"generate_dataset", cmd_generate_dataset, "generate (or reuse) the volume dataset"},
        {"benchmark", cmd_benchmark, "train the 3D U-Net to the target Dice (the main job)"},
        {"scaling", cmd_scaling, "scaling study: benchmarks over rank counts and shard layouts"},
        {"predict", cmd_predict, "run a checkpoint on a volume"},
        {"trace", cmd_trace, "run a command under the I/O tracer"},
        {"analyze", cmd_analyze, "analyze traces: bottlenecks, checklist, proposals"},
        {"compare", cmd_compare, "compare baseline and candidate runs with guards"},
        {"store-bench", cmd_store_bench, "benchmark the distributed in-memory sample store"},
        {"tune", cmd_tune, "measured accept/revert tuning of the benchmark's levers"},
    };
    const size_t n = sizeof cmds / sizeof cmds[0];
    if (argc < 2) {
        usage(stderr, cmds, n);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout, cmds, n);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("scaffold %s\n", SCAFFOLD_VERSION);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        /* Accept generate-fractals as well as generate_fractals. */
        char alt[64];
        snprintf(alt, sizeof alt, "%s", cmds[i].name);
        for (char *p = alt; *p; p++)
            if (*p == '_')
                *p = '-';
        if (strcmp(argv[1], cmds[i].name) && strcmp(argv[1], alt))
            continue;
        if (!cmds[i].fn) {
            fprintf(stderr, "scaffold: command '%s' is not part of this build\n", cmds[i].name);
            return 2;
        }
        return cmds[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "scaffold: unknown command '%s' (see 'scaffold --help')\n", argv[1]);
    return 2;
}
