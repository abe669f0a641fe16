/* test_job: core/job, the child-job runner of scaling and tune: output in a fresh log, the exit
 * status (and 128 + signal), the environment settings, the resume record, the timeout with and
 * without a grace period, and nothing of the job's session left running after it. */
#include "core/job.h"
#include "test.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/scaffold-test-job-XXXXXX";

static int sh(const char *cmd, const char *log, double timeout, double grace,
              const char *const *env, job_result *r) {
    char *const argv[] = {"sh", "-c", (char *)cmd, NULL};
    const job_spec s = {.who = "test", .path = "/bin/sh", .argv = argv, .log = log,
                        .timeout_s = timeout, .grace_s = grace, .env = env};
    return job_run(&s, r);
}

static void slurp(const char *path, char *buf, size_t cap) {
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
}

/* Process pid ends within 5 s: no longer exists, or is a zombie (ended; whoever adopted it
 * reaps it when it can). */
static int gone_soon(int pid) {
    for (int i = 0; i < 100; i++) {
        char path[64], st[512];
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        slurp(path, st, sizeof st);
        const char *p = strrchr(st, ')');
        if (kill(pid, 0) != 0 || !st[0] || (p && p[1] == ' ' && p[2] == 'Z'))
            return 1;
        usleep(50 * 1000);
    }
    return 0;
}

static int started_sid;
static unsigned long long started_at;
static void on_start(void *ctx, int sid, unsigned long long start) {
    (void)ctx;
    started_sid = sid;
    started_at = start;
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char log[256], buf[4096];
    snprintf(log, sizeof log, "%s/log.txt", dir);
    job_result r;

    /* Output of both streams in the log, an older log replaced, the exit status. */
    FILE *f = fopen(log, "w");
    fputs("an older run's line\n", f);
    fclose(f);
    const char *env[] = {"SCAFFOLD_TEST_JOB=set by the job", NULL};
    CHECK(sh("echo out; echo err >&2; echo \"$SCAFFOLD_TEST_JOB\"; read x || echo eof; exit 3",
             log, 0, 0, env, &r) == 0, "job_run");
    slurp(log, buf, sizeof buf);
    CHECK(r.status == 3 && !r.timed_out, "status %d timed_out %d", r.status, r.timed_out);
    CHECK(!strcmp(buf, "out\nerr\nset by the job\neof\n"), "log: '%s'", buf);
    CHECK(job_inflight == 0, "no job in flight after the run");

    /* Died of a signal: 128 + N. */
    sh("kill -9 $$", log, 0, 0, NULL, &r);
    CHECK(r.status == 137, "killed: status %d", r.status);

    /* The resume record names the session while it runs. */
    char *const argv[] = {"sh", "-c", "exit 0", NULL};
    const job_spec s = {.who = "test", .path = "/bin/sh", .argv = argv, .log = log,
                        .on_start = on_start};
    CHECK(job_run(&s, &r) == 0 && started_sid > 1 && started_at > 0, "on_start: sid %d start %llu",
          started_sid, started_at);

    /* The timeout, at once and with a grace period; a background process the job started (in
     * another process group of the session) goes with it. */
    char pidf[300], cmd[600];
    snprintf(pidf, sizeof pidf, "%s/bg.pid", dir);
    for (int grace = 0; grace <= 1; grace++) {
        snprintf(cmd, sizeof cmd, "set -m; sleep 300 & echo $! > %s; sleep 300", pidf);
        CHECK(sh(cmd, log, 0.5, grace, NULL, &r) == 0, "job_run");
        CHECK(r.timed_out && r.wall_s < 30, "grace %d: timed_out %d after %.1f s", grace,
              r.timed_out, r.wall_s);
        slurp(pidf, buf, sizeof buf);
        int bg = atoi(buf);
        CHECK(bg > 1 && gone_soon(bg), "grace %d: the background process %d still runs", grace,
              bg);
        if (bg > 1)
            kill(bg, SIGKILL);
    }
    char rm[300];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    if (system(rm) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    return test_report();
}
