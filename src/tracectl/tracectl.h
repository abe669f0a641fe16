/* tracectl: the launching side of the I/O tracer, which `scaffold trace` (cli/cmd_trace.c) is the
 * option table of. It owns locating libscaffold_trace.so (and its MPI sibling), the environment
 * that preloads and configures it (LD_PRELOAD, SCAFFOLD_TRACE_*), running a command under it
 * (forwarding SIGINT/SIGTERM, waiting for the descendants it orphans so that their trace files are
 * complete) and counting the trace files a run wrote.
 *
 * It is a module of libscaffold, apart from src/trace: the tracer itself is the LD_PRELOAD
 * library, built without libscaffold so that it can load into any process, while this side uses
 * libscaffold's errors and file helpers. It is not part of analyze either, which reads traces
 * and never starts processes. */
#ifndef SCAFFOLD_TRACECTL_TRACECTL_H
#define SCAFFOLD_TRACECTL_TRACECTL_H

#include <limits.h>
#include <stddef.h>

/* `scaffold trace`'s options (NULL / 0 / -1: the default). */
typedef struct tracectl_opts {
    const char *out;       /* the traces' directory (created) */
    const char *data_dirs; /* "A:B": trace only paths under these */
    const char *exclude;   /* "A:B": never trace paths under these */
    const char *lib;       /* the tracer library; NULL: $SCAFFOLD_TRACE_LIB or beside the exe */
    int flush_ms;          /* > 0: SCAFFOLD_TRACE_FLUSH_MS */
    int metrics_ms;        /* >= 0: SCAFFOLD_TRACE_METRICS_MS */
    int no_mpi;            /* do not preload the MPI sibling */
} tracectl_opts;

/* A traced run, from its preparation to its trace files. */
typedef struct tracectl_run {
    char outabs[PATH_MAX];   /* the absolute traces' directory */
    char **known;            /* trace files there before the run (not counted) */
    size_t nknown;
    int status;              /* the command's exit status (128 + N: died of signal N) */
    int orphans_left;        /* descendants still ran when the wait ended */
    int interrupted;         /* ... because a signal ended the wait */
    long files;              /* trace files this run wrote, and their bytes */
    long long bytes;
} tracectl_run;

/* Finds the library, makes the output directory, and sets this process's environment so that
 * the command it starts is traced; notes the trace files already there. Returns 0, or ERR_USAGE
 * (err_msg: the message, e.g. "--data-dirs: ...") or ERR_NOMEM. */
int tracectl_prepare(const tracectl_opts *o, tracectl_run *r);

/* Runs argv (execvp) and waits for it, then up to wait_s seconds for the processes it left
 * running (this process is their subreaper); SIGINT and SIGTERM are forwarded to it. Fills
 * r->status, orphans_left, interrupted; returns 0, or ERR_IO when it could not fork or wait (the
 * command's own failure to start is its exit status 127, with a line on its stderr). */
int tracectl_exec(char **argv, int wait_s, tracectl_run *r);

/* Counts the trace files (trace-*.pfw[.gz]) the run wrote into r->files and r->bytes, and frees
 * what prepare noted. */
void tracectl_count(tracectl_run *r);

#endif
