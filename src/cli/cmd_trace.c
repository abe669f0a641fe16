/* cmd_trace: `scaffold trace [options] -- CMD ARGS...` runs a command (and everything it forks
 * or execs) under libscaffold_trace.so and reports the trace files it wrote. It owns only the
 * launching: locating the library, setting LD_PRELOAD and the SCAFFOLD_TRACE_* variables,
 * forwarding SIGINT/SIGTERM to the child, waiting for orphaned descendants (so their trace
 * files are complete when it returns), and the closing summary line. */
#include "cli/cli.h"
#include "core/err.h"
#include "core/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

static volatile sig_atomic_t trace_child_pid, trace_signalled;

static void trace_forward(int sig) {
    trace_signalled = 1; /* also ends the wait for orphans */
    if (trace_child_pid > 0)
        kill((pid_t)trace_child_pid, sig);
}

/* Names of the trace files already in dir (so the summary counts only this run's). */
static int trace_known(const char *dir, char ***names, size_t *n) {
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    size_t cap = 0;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "trace-", 6) != 0)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            char **p = realloc(*names, cap * sizeof *p);
            if (!p)
                break;
            *names = p;
        }
        if (((*names)[*n] = strdup(e->d_name)) != NULL)
            (*n)++;
    }
    closedir(d);
    return 0;
}

static int trace_is_known(char **names, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(names[i], name))
            return 1;
    return 0;
}

/* The tracer library: --lib, $SCAFFOLD_TRACE_LIB, or next to /proc/self/exe (or ../lib). */
static int trace_find_lib(const char *opt, char *out, size_t cap) {
    const char *cand[3] = {opt, getenv("SCAFFOLD_TRACE_LIB"), NULL};
    for (int i = 0; i < 2; i++) {
        if (!cand[i] || !*cand[i])
            continue;
        if (access(cand[i], R_OK) != 0)
            return err_set(ERR_USAGE, "tracer library '%s' (from %s) is not readable: %s",
                           cand[i], i ? "$SCAFFOLD_TRACE_LIB" : "--lib", strerror(errno));
        return fs_abspath(cand[i], out, cap);
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            const char *rel[2] = {"libscaffold_trace.so", "../lib/libscaffold_trace.so"};
            for (int i = 0; i < 2; i++) {
                char p[PATH_MAX + 64];
                snprintf(p, sizeof p, "%s/%s", exe, rel[i]);
                if (access(p, R_OK) == 0)
                    return fs_abspath(p, out, cap);
            }
        }
    }
    return err_set(ERR_USAGE,
                   "cannot find libscaffold_trace.so next to the scaffold executable; build it "
                   "with 'make' or pass --lib PATH");
}

/* Absolute form of each entry of a ':' list (the child may chdir before it opens files). */
static int trace_abs_list(const char *in, char *out, size_t cap) {
    out[0] = 0;
    size_t used = 0;
    const char *s = in;
    while (*s) {
        const char *e = strchr(s, ':');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n) {
            char one[PATH_MAX], abs[PATH_MAX];
            if (n >= sizeof one)
                return err_set(ERR_USAGE, "path list entry too long in '%s'", in);
            memcpy(one, s, n);
            one[n] = 0;
            if (fs_abspath(one, abs, sizeof abs) != 0)
                return err_set(ERR_USAGE, "cannot make '%s' absolute", one);
            size_t al = strlen(abs);
            if (used + al + 2 > cap)
                return err_set(ERR_USAGE, "path list '%s' too long", in);
            if (used)
                out[used++] = ':';
            memcpy(out + used, abs, al + 1);
            used += al;
        }
        s += n;
        if (*s == ':')
            s++;
    }
    return 0;
}

/* Reaps the descendants reparented to us after CMD exited, polling for up to wait_s seconds.
 * Returns 1 when some are still running at the deadline, 0 when none are left. */
static int trace_reap_orphans(int wait_s) {
    struct timespec t0, now, nap = {0, 10 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!trace_signalled) {
        int st;
        pid_t r = waitpid(-1, &st, WNOHANG);
        if (r > 0)
            continue;
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) /* ECHILD: nothing left */
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec) >=
            (double)wait_s)
            return 1;
        nanosleep(&nap, NULL);
    }
    return waitpid(-1, NULL, WNOHANG) < 0 ? 0 : 1;
}

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
    char libpath[PATH_MAX], outabs[PATH_MAX], prefix[PATH_MAX + 16];
    if (trace_find_lib(lib, libpath, sizeof libpath) != 0) {
        fprintf(stderr, "scaffold trace: %s\n", err_msg());
        return 2;
    }
    if (fs_mkdir_p(out) != 0 || fs_check_writable_dir(out) != 0 ||
        fs_abspath(out, outabs, sizeof outabs) != 0) {
        fprintf(stderr, "scaffold trace: --out '%s': %s (choose a writable directory)\n", out,
                err_msg());
        return 2;
    }
    snprintf(prefix, sizeof prefix, "%s/trace", outabs);
    /* The MPI sibling built beside the tracer (for this build's MPI): preloaded after it. It
     * loads into any process without pulling in libmpi and records only MPI calls. */
    char mpilib[PATH_MAX] = "";
    if (!no_mpi) {
        const char *slash = strrchr(libpath, '/');
        int dl = slash ? (int)(slash - libpath) + 1 : 0;
        snprintf(mpilib, sizeof mpilib, "%.*slibscaffold_trace_mpi.so", dl, libpath);
        if (access(mpilib, R_OK) != 0)
            mpilib[0] = 0;
    }
    /* Preload ours first; keep whatever the user already preloads. */
    const char *old = getenv("LD_PRELOAD");
    size_t pl = strlen(libpath) + strlen(mpilib) + (old ? strlen(old) : 0) + 3;
    char *preload = malloc(pl);
    if (!preload) {
        fprintf(stderr, "scaffold trace: out of memory\n");
        return 1;
    }
    snprintf(preload, pl, "%s%s%s%s%s", libpath, mpilib[0] ? ":" : "", mpilib,
             old && *old ? ":" : "", old ? old : "");
    setenv("LD_PRELOAD", preload, 1);
    free(preload);
    setenv("SCAFFOLD_TRACE_PREFIX", prefix, 1);
    char list[8192];
    if (data_dirs) {
        if (trace_abs_list(data_dirs, list, sizeof list) != 0) {
            fprintf(stderr, "scaffold trace: --data-dirs: %s\n", err_msg());
            return 2;
        }
        setenv("SCAFFOLD_TRACE_INCLUDE", list, 1);
    }
    if (exclude) {
        if (trace_abs_list(exclude, list, sizeof list) != 0) {
            fprintf(stderr, "scaffold trace: --exclude: %s\n", err_msg());
            return 2;
        }
        setenv("SCAFFOLD_TRACE_EXCLUDE", list, 1);
    }
    if (flush_ms > 0) {
        char v[32];
        snprintf(v, sizeof v, "%d", flush_ms);
        setenv("SCAFFOLD_TRACE_FLUSH_MS", v, 1);
    }
    if (metrics_ms >= 0) {
        char v[32];
        snprintf(v, sizeof v, "%d", metrics_ms);
        setenv("SCAFFOLD_TRACE_METRICS_MS", v, 1);
    }
    unsetenv("SCAFFOLD_TRACE_DISABLE");

    char **known;
    size_t nknown;
    trace_known(outabs, &known, &nknown);
    fflush(NULL);
#ifdef __linux__
    /* Descendants that outlive CMD (Open MPI's singleton daemon, anything daemonised) are
     * reparented to us instead of init, so we can wait for them to write their traces. */
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
#endif
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "scaffold trace: fork failed: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        execvp(argv[i], argv + i);
        fprintf(stderr, "scaffold trace: cannot run '%s': %s\n", argv[i], strerror(errno));
        _exit(127);
    }
    trace_child_pid = pid;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = trace_forward;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "scaffold trace: waitpid: %s\n", strerror(errno));
            return 1;
        }
    }
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
    trace_child_pid = 0;
    trace_signalled = 0;
    int left = trace_reap_orphans(wait_s);
    if (left > 0 && trace_signalled)
        fprintf(stderr, "scaffold trace: interrupted while waiting for processes the command "
                        "started; their trace files are written when they exit\n");
    else if (left > 0)
        fprintf(stderr,
                "scaffold trace: processes the command started still run after %d s; their "
                "trace files are written when they exit (--wait S waits longer)\n",
                wait_s);

    /* Summary: trace files written during this run. */
    long files = 0;
    long long bytes = 0;
    DIR *d = opendir(outabs);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            size_t n = strlen(e->d_name);
            if (strncmp(e->d_name, "trace-", 6) != 0 ||
                !(n > 7 && (!strcmp(e->d_name + n - 7, ".pfw.gz") ||
                            !strcmp(e->d_name + n - 4, ".pfw"))))
                continue;
            char p[PATH_MAX + 300];
            struct stat sb;
            snprintf(p, sizeof p, "%s/%s", outabs, e->d_name);
            if (!trace_is_known(known, nknown, e->d_name) && stat(p, &sb) == 0) {
                files++;
                bytes += (long long)sb.st_size;
            }
        }
        closedir(d);
    }
    for (size_t k = 0; k < nknown; k++)
        free(known[k]);
    free(known);
    fprintf(stderr, "scaffold trace: %ld trace file%s (%.1f KiB) in %s; command exit status %d\n",
            files, files == 1 ? "" : "s", (double)bytes / 1024.0, outabs, rc);
    return rc;
}
