/* job: the one child-job runner of scaffold, used by `scaffold scaling` (one benchmark per study
 * point) and `scaffold tune` (one traced benchmark per run). It owns starting a command with its
 * output in a log file, ending it and everything it started (a timeout, a signal to the caller,
 * the caller's death), and the record a resumed caller needs to find what a killed one left.
 *
 * A job lives in a session of its own, led by a supervisor process forked from the caller:
 * launchers give each rank a process group of its own, but every process the job starts stays in
 * that session. The supervisor has PR_SET_PDEATHSIG, so when the caller dies (kill -9 included)
 * it ends the whole session (SIGTERM, SIGKILL after 5 s) and exits; it also removes whatever the
 * command leaves behind when it ends. The session id is the supervisor's pid, which is also the
 * id of the supervisor's process group. */
#ifndef SCAFFOLD_CORE_JOB_H
#define SCAFFOLD_CORE_JOB_H

#include <signal.h>

/* What to run and how to end it. */
typedef struct job_spec {
    const char *who;           /* names the caller in the line written when exec fails */
    const char *path;          /* the executable (execv) */
    char *const *argv;
    const char *log;           /* stdout and stderr go to this fresh file (an older one is
                                * unlinked first, so that a writer left from an earlier run
                                * keeps its own file); stdin is /dev/null */
    double timeout_s;          /* end the job after this long (<= 0: no limit) */
    double grace_s;            /* at the timeout: 0: SIGKILL to the session at once; > 0:
                                * SIGTERM to the supervisor (which ends its session), SIGKILL
                                * after grace_s */
    const char *const *env;    /* "NAME=VALUE" settings for the command, NULL-terminated; or
                                * NULL (it inherits the caller's environment otherwise) */
    /* Called once the job's session exists (its id and start time), so that a resumed caller
     * can find what a killed one left running; NULL: not recorded. */
    void (*on_start)(void *ctx, int sid, unsigned long long start);
    void *ctx;
} job_spec;

typedef struct job_result {
    int status;     /* exit status, or 128 + the signal that ended the command */
    int timed_out;  /* ended by the timeout (status is then what the kill left) */
    double wall_s;  /* seconds from start to end */
} job_result;

/* Runs the job to its end. Returns 0 once the job ran (r says how it ended), or ERR_IO when it
 * could not be started (fork failed). SIGTERM, SIGINT and SIGHUP are blocked between the fork
 * and the moment job_inflight names the new session, so that a caller's handler never misses
 * a job it must take along. */
int job_run(const job_spec *s, job_result *r);

/* The session (= supervisor pid = its process group) of the job in flight, 0 when none: for
 * the caller's signal handlers. */
extern volatile sig_atomic_t job_inflight;
/* For the caller's signal handlers (async-signal-safe): asks the job in flight, if any, to end;
 * its supervisor then ends every process of its session, the caller's death notwithstanding. */
void job_end_inflight(void);

/* Sends `sig` to every process of session `sid` but the caller, unless a process `sid` runs
 * that started at another time than `start` (the id was reused; start 0: not checked).
 * Returns how many processes were signalled. */
int job_session_kill(int sid, unsigned long long start, int sig);

/* Start time of process pid in clock ticks since boot (0 if unknown). */
unsigned long long job_proc_start(int pid);

#endif
