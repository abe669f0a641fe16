/* tracectl: the tracer's launching side (see tracectl.h). */
#include "tracectl/tracectl.h"

#include "core/err.h"
#include "core/fsutil.h"

#include <dirent.h>
#include <errno.h>
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

/* SCAFFOLD_TRACE_INCLUDE / _EXCLUDE from a ':' list of directories. */
static int trace_set_list(const char *var, const char *opt, const char *dirs) {
    char list[8192];
    if (trace_abs_list(dirs, list, sizeof list) != 0)
        return err_prefix("%s", opt);
    setenv(var, list, 1);
    return 0;
}

static void trace_set_int(const char *var, int v) {
    char s[32];
    snprintf(s, sizeof s, "%d", v);
    setenv(var, s, 1);
}

/* LD_PRELOAD: the tracer, its MPI sibling when there is one, then whatever the user already
 * preloads. */
static int trace_set_preload(const char *libpath, int no_mpi) {
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
    const char *old = getenv("LD_PRELOAD");
    size_t pl = strlen(libpath) + strlen(mpilib) + (old ? strlen(old) : 0) + 3;
    char *preload = malloc(pl);
    if (!preload)
        return err_set(ERR_NOMEM, "out of memory");
    snprintf(preload, pl, "%s%s%s%s%s", libpath, mpilib[0] ? ":" : "", mpilib,
             old && *old ? ":" : "", old ? old : "");
    setenv("LD_PRELOAD", preload, 1);
    free(preload);
    return 0;
}

int tracectl_prepare(const tracectl_opts *o, tracectl_run *r) {
    memset(r, 0, sizeof *r);
    char libpath[PATH_MAX], prefix[PATH_MAX + 16];
    int rc = trace_find_lib(o->lib, libpath, sizeof libpath);
    if (rc)
        return rc;
    if (fs_mkdir_p(o->out) != 0 || fs_check_writable_dir(o->out) != 0 ||
        fs_abspath(o->out, r->outabs, sizeof r->outabs) != 0) {
        char msg[ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err_msg());
        return err_set(ERR_USAGE, "--out '%s': %s (choose a writable directory)", o->out, msg);
    }
    snprintf(prefix, sizeof prefix, "%s/trace", r->outabs);
    if ((rc = trace_set_preload(libpath, o->no_mpi)) != 0)
        return rc;
    setenv("SCAFFOLD_TRACE_PREFIX", prefix, 1);
    if (o->data_dirs &&
        (rc = trace_set_list("SCAFFOLD_TRACE_INCLUDE", "--data-dirs", o->data_dirs)) != 0)
        return rc;
    if (o->exclude &&
        (rc = trace_set_list("SCAFFOLD_TRACE_EXCLUDE", "--exclude", o->exclude)) != 0)
        return rc;
    if (o->flush_ms > 0)
        trace_set_int("SCAFFOLD_TRACE_FLUSH_MS", o->flush_ms);
    if (o->metrics_ms >= 0)
        trace_set_int("SCAFFOLD_TRACE_METRICS_MS", o->metrics_ms);
    unsetenv("SCAFFOLD_TRACE_DISABLE");
    trace_known(r->outabs, &r->known, &r->nknown);
    return 0;
}

int tracectl_exec(char **argv, int wait_s, tracectl_run *r) {
    fflush(NULL);
#ifdef __linux__
    /* Descendants that outlive CMD (Open MPI's singleton daemon, anything daemonised) are
     * reparented to us instead of init, so we can wait for them to write their traces. */
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
#endif
    pid_t pid = fork();
    if (pid < 0)
        return err_set(ERR_IO, "fork failed: %s", strerror(errno));
    if (pid == 0) {
        execvp(argv[0], argv);
        fprintf(stderr, "scaffold trace: cannot run '%s': %s\n", argv[0], strerror(errno));
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
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return err_set(ERR_IO, "waitpid: %s", strerror(errno));
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
    trace_child_pid = 0;
    trace_signalled = 0;
    r->orphans_left = trace_reap_orphans(wait_s);
    r->interrupted = r->orphans_left && trace_signalled;
    return 0;
}

void tracectl_count(tracectl_run *r) {
    r->files = 0;
    r->bytes = 0;
    DIR *d = opendir(r->outabs);
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
            snprintf(p, sizeof p, "%s/%s", r->outabs, e->d_name);
            if (!trace_is_known(r->known, r->nknown, e->d_name) && stat(p, &sb) == 0) {
                r->files++;
                r->bytes += (long long)sb.st_size;
            }
        }
        closedir(d);
    }
    for (size_t k = 0; k < r->nknown; k++)
        free(r->known[k]);
    free(r->known);
    r->known = NULL;
    r->nknown = 0;
}
