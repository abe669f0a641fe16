/* claim: per-item claims that let independent jobs (separate mpirun/srun/sbatch jobs, on one
 * node or many) build a shared cache on one file system, network file systems included, without
 * two writers ever working on one item and without removing the files of a writer that still
 * runs.
 *
 * A claim is a lock file PATH (e.g. "<item>/.claim") holding one line that says who holds it:
 *   scaffold-claim host=<hostname> boot=<boot id> pid=<pid> start=<process start, clock ticks
 *   since boot> since=<unix seconds> token=<16 hex digits>
 * Taking a claim writes that record under a unique temporary name beside PATH and hard-links it
 * to PATH: link() fails with EEXIST when PATH exists, atomically on the server (NFSv3 and later,
 * Lustre, GPFS; no flock/fcntl locks, which network file systems implement unevenly), and the
 * record is complete the moment PATH appears. A file system without hard links falls back to
 * O_CREAT|O_EXCL. The holder's process refreshes PATH's modification time every
 * claim_heartbeat_seconds() from a background thread while it holds the claim.
 *
 * The holder is provably gone, and its claim is taken over (its debris may be removed), when:
 *  - it ran on this host (same host name and same boot id) and its PID is no longer a process,
 *    or is a process that started at another time (the PID was reused); or
 *  - PATH was not refreshed for claim_stale_seconds() (600 s by default;
 *    SCAFFOLD_CLAIM_STALE_SECONDS overrides it): the only test possible for another host.
 * A dead holder's claim is broken by renaming PATH to a unique name and checking that the
 * renamed record is the one judged dead; if a live holder got in between, it is linked back.
 *
 * Files that a claimed item's writers leave behind (temporaries, staging folders) are removed
 * only by the next holder of the same claim: holding it proves every earlier writer is gone. */
#ifndef SCAFFOLD_CORE_CLAIM_H
#define SCAFFOLD_CORE_CLAIM_H

#include <stddef.h>

#define CLAIM_STALE_SECONDS 600.0
#define CLAIM_HEARTBEAT_SECONDS 30.0

/* Who holds a claim, as its record says. */
typedef struct claim_holder {
    int parsed;           /* 0: the record could not be read as one (judged by age only) */
    char host[256];
    char boot[40];
    long pid;
    unsigned long long start;
    long long since;      /* unix seconds when it was taken */
    char token[17];
    double age_s;         /* seconds since the file was last refreshed */
} claim_holder;

/* Facts about a running process from /proc/PID/stat: its session id and its start time in clock
 * ticks since boot (field 22; with the PID, it names one process over time). Either pointer may
 * be NULL. 0, or -1 when there is no such process. (The tuner finds a run's session with it.) */
int claim_proc_info(long pid, int *session, unsigned long long *start);

/* The stale age: SCAFFOLD_CLAIM_STALE_SECONDS when set to a number >= 0, else 600 s. */
double claim_stale_seconds(void);
/* How often a holder refreshes its claims: a quarter of the stale age, at most 30 s. */
double claim_heartbeat_seconds(void);

/* Reads the record of PATH. 0, or ERR_NOTFOUND when PATH does not exist. */
int claim_read(const char *path, claim_holder *h);

/* Whether holder h still runs, by the rules above. When `why` is not NULL it receives a short
 * description ("process 123 on node7 is gone", "host node8, refreshed 12 s ago"). */
int claim_alive(const claim_holder *h, char *why, size_t whycap);

/* Tries once to take PATH: 1 taken (or already held by this process), 0 held by a live writer
 * (*h describes it when h is not NULL), or an error (ERR_IO naming PATH). A dead holder's claim
 * is taken over, with a log line naming it. */
int claim_try(const char *path, claim_holder *h);

/* Takes PATH, waiting while a live writer holds it. `what` names the item in the progress lines
 * (one when the wait starts, then one every 30 s). SCAFFOLD_CLAIM_WAIT_SECONDS, when set to a
 * number > 0, bounds the wait: ERR_IO then, naming the holder and how to break its claim. */
int claim_take(const char *path, const char *what);

/* Waits, without taking it, until PATH is released or its holder is gone (same messages and
 * bound as claim_take). 0 or ERR_IO. */
int claim_wait(const char *path, const char *what);

/* Releases a claim this process holds: stops refreshing it and removes PATH if it still holds
 * this process's record. Releasing a claim not held is a no-op. */
void claim_release(const char *path);

/* Whether this process holds PATH (taken and not released). */
int claim_held(const char *path);

#endif
