/* job: one child command in a session of its own, led by a supervisor (see job.h). */
#include "core/job.h"
#include "core/log.h"

#include "core/claim.h"
#include "core/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

volatile sig_atomic_t job_inflight;

void job_end_inflight(void) {
    const int sid = job_inflight;
    if (sid > 0)
        kill(sid, SIGTERM); /* the supervisor ends its session: SIGTERM, SIGKILL after 5 s */
}

unsigned long long job_proc_start(int pid) {
    unsigned long long s = 0;
    return claim_proc_info(pid, NULL, &s) == 0 ? s : 0;
}

int job_session_kill(int sid, unsigned long long start, int sig) {
    if (sid <= 1)
        return 0;
    unsigned long long lead = 0;
    /* The leader runs under another start time: the id now names another session. (While any
     * process of a session lives, its id is not reused, so members without a leader are
     * ours.) */
    if (start && claim_proc_info(sid, NULL, &lead) == 0 && lead != start)
        return 0;
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int pid = atoi(e->d_name), sess;
        if (pid <= 1 || pid == (int)getpid() || claim_proc_info(pid, &sess, NULL) || sess != sid)
            continue;
        n += kill(pid, sig) == 0;
    }
    closedir(d);
    return n;
}

static void nap_20ms(void) {
    const struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

static int exit_code(int st) {
    return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
}

static volatile sig_atomic_t sup_stop;
static void sup_on_signal(int sig) {
    (void)sig;
    sup_stop = 1;
}

/* The command itself (the supervisor's child; never returns). */
static void exec_command(const job_spec *s) {
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    int fd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
    }
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
        dup2(devnull, 0);
    for (const char *const *e = s->env; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        char name[256];
        if (!eq || (size_t)(eq - *e) >= sizeof name)
            continue;
        snprintf(name, sizeof name, "%.*s", (int)(eq - *e), *e);
        setenv(name, eq + 1, 1);
    }
    execv(s->path, s->argv);
    fprintf(stderr, "scaffold %s: cannot run %s: %s\n", s->who, s->path, strerror(errno));
    _exit(127);
}

/* The supervisor (a child of the caller; never returns): leads a new session, dies with the
 * caller, runs the command in the session and ends everything left in it. `old`: the signal
 * mask to restore once its handlers are in place. */
static void supervise(pid_t caller, const job_spec *s, const sigset_t *old) {
    setsid();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = sup_on_signal; /* no SA_RESTART: waits return at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigprocmask(SIG_SETMASK, old, NULL);
    /* The caller's death (kill -9 included) sends SIGTERM here. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != caller)
        _exit(137); /* it died before the line above */
    pid_t c = fork();
    if (c == 0)
        exec_command(s);
    int st = 0x7f00;
    double term_at = 0;
    while (c > 0) {
        pid_t r = waitpid(c, &st, WNOHANG);
        if (r == c || (r < 0 && errno != EINTR))
            break;
        if (sup_stop && !term_at) {
            job_session_kill(getpid(), 0, SIGTERM);
            term_at = time_now();
        } else if (term_at && time_now() - term_at > 5) {
            job_session_kill(getpid(), 0, SIGKILL);
        }
        nap_20ms();
    }
    /* What the command left running (an orphaned rank, a daemon) goes with it. */
    job_session_kill(getpid(), 0, SIGKILL);
    _exit(exit_code(st));
}

/* Waits for the supervisor `pid`, enforcing the timeout; returns its wait status. */
static int wait_job(const job_spec *s, pid_t pid, double t0, int *timed_out) {
    int st = 0;
    double killed_at = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return st;
        if (r < 0 && errno != EINTR)
            return 0x7f00;
        double el = time_now() - t0;
        if (s->timeout_s > 0 && el > s->timeout_s && !killed_at) {
            *timed_out = 1;
            killed_at = el;
            if (s->grace_s > 0) {
                kill(pid, SIGTERM); /* the supervisor ends its session */
            } else {
                kill(-pid, SIGKILL);
                job_session_kill(pid, 0, SIGKILL);
            }
        } else if (killed_at && el > killed_at + s->grace_s) {
            kill(pid, SIGKILL);
            job_session_kill(pid, 0, SIGKILL);
        }
        nap_20ms();
    }
}

int job_run(const job_spec *s, job_result *r) {
    memset(r, 0, sizeof *r);
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGHUP);
    unlink(s->log);
    double t0 = time_now();
    fflush(NULL);
    pid_t caller = getpid();
    sigprocmask(SIG_BLOCK, &block, &old);
    pid_t pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        return err_set(ERR_IO, "fork: %s", strerror(errno));
    }
    if (pid == 0)
        supervise(caller, s, &old);
    job_inflight = pid;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (s->on_start)
        s->on_start(s->ctx, pid, job_proc_start(pid));
    int st = wait_job(s, pid, t0, &r->timed_out);
    /* Whatever is left of the session (the supervisor removes it; this covers a supervisor that
     * was killed itself). */
    job_session_kill(pid, 0, SIGKILL);
    job_inflight = 0;
    r->wall_s = time_now() - t0;
    r->status = exit_code(st);
    return 0;
}
