/* cmd_trace: `scaffold trace [options] -- CMD ARGS...`: the option table and the closing lines;
 * tracectl/tracectl.h runs the command under libscaffold_trace.so. */
#include "cli/cli.h"
#include "core/err.h"
#include "tracectl/tracectl.h"

#include <stdio.h>
#include <string.h>

int cmd_trace(int argc, char **argv) {
    const char *out = "traces", *data_dirs = NULL, *exclude = NULL, *lib = NULL;
    int flush_ms = 0, wait_s = 30, no_mpi = 0, metrics_ms = -1;
    const opt_spec opts[] = {
        OPT_STR_(0, "out", &out, "DIR", "directory for the traces (default: ./traces; created)"),
        OPT_STR_(0, "data-dirs", &data_dirs, "A:B",
                 "trace only paths under these directories (default: all)"),
        OPT_STR_(0, "exclude", &exclude, "A:B", "never trace paths under these directories"),
        OPT_INT_(0, "flush-ms", &flush_ms, 1, 3600000, "N",
                 "flush interval in milliseconds (default 1000): the most a killed process can "
                 "lose"),
        OPT_INT_(0, "wait", &wait_s, 0, 86400, "S",
                 "after CMD exits, wait up to S seconds (default 30) for processes it left "
                 "running, such as an MPI singleton's daemon, so their traces are complete"),
        OPT_FLAG_(0, "no-mpi", &no_mpi,
                  "do not preload libscaffold_trace_mpi.so (MPI calls are then not traced)"),
        OPT_INT_(0, "metrics-ms", &metrics_ms, 0, 3600000, "N",
                 "sample system metrics (CPU time, RSS, I/O bytes, context switches, load, "
                 "memory) every N ms into counter events (default: off)"),
        OPT_STR_(0, "lib", &lib, "PATH",
                 "the tracer library (default: libscaffold_trace.so next to this executable, or "
                 "$SCAFFOLD_TRACE_LIB)"),
        OPT_END_};
    const opt_cmd cmd = {
        "trace", "[options] -- CMD [ARGS...]",
        "Runs CMD with the I/O tracer preloaded (and its MPI sibling, which records MPI calls\n"
        "through PMPI). Every process (forks and execs included) writes\n"
        "DIR/trace-<hash>-preload.pfw.gz in dftracer's format (2.x; SCAFFOLD_TRACE_FORMAT=1: 1.x).",
        opts, OPT_POS_REST,
        "The exit status is CMD's (128+N if it died of signal N). Other settings are the\n"
        "SCAFFOLD_TRACE_* environment variables described in docs/trace.md."};
    int i, pst = cli_parse(&cmd, argc, argv, &i);
    if (pst >= 0)
        return pst;
    if (i < argc && !strcmp(argv[i], "--"))
        i++;
    if (i >= argc) {
        fprintf(stderr, "scaffold trace: no command given; usage: scaffold trace [options] -- "
                        "CMD [ARGS...]\n");
        return 2;
    }
    const tracectl_opts to = {out, data_dirs, exclude, lib, flush_ms, metrics_ms, no_mpi};
    tracectl_run r;
    /* A run that cannot be prepared is the user's to fix (2); one that cannot start, ours (1). */
    int rc = tracectl_prepare(&to, &r);
    if (rc) {
        fprintf(stderr, "scaffold trace: %s\n", err_msg());
        return rc == ERR_NOMEM ? 1 : 2;
    }
    if ((rc = tracectl_exec(argv + i, wait_s, &r)) != 0) {
        fprintf(stderr, "scaffold trace: %s\n", err_msg());
        return 1;
    }
    if (r.interrupted)
        fprintf(stderr, "scaffold trace: interrupted while waiting for processes the command "
                        "started; their trace files are written when they exit\n");
    else if (r.orphans_left)
        fprintf(stderr,
                "scaffold trace: processes the command started still run after %d s; their "
                "trace files are written when they exit (--wait S waits longer)\n",
                wait_s);
    tracectl_count(&r);
    fprintf(stderr, "scaffold trace: %ld trace file%s (%.1f KiB) in %s; command exit status %d\n",
            r.files, r.files == 1 ? "" : "s", (double)r.bytes / 1024.0, r.outabs, r.status);
    return r.status;
}
