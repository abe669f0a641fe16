/* Unit tests for src/core/claim: taking and releasing, live and dead holders (same host by PID,
 * another host by age, a reused PID, an unreadable record), waiting for a live holder, the wait
 * bound, the heartbeat, and mutual exclusion among many processes racing for one claim, a dead
 * holder's claim included. */
#include "core/claim.h"
#include "core/err.h"
#include "core/fsutil.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ThreadSanitizer builds (make test-tsan): the processes of these tests fork while the claim
 * heartbeat thread runs, and the children take claims (start their own). Allowed here: the
 * registry's lock is held across fork (pthread_atfork) and the thread holds nothing else. */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) {
    return "die_after_fork=0";
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void set_age(const char *path, double age_s) {
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= (time_t)age_s;
    t[1] = t[0];
    utimensat(AT_FDCWD, path, t, 0);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* A child that takes `path`, says so through the pipe, holds it for hold_ms, then exits without
 * releasing when `release` is 0 (a killed job's leftover claim). */
static pid_t holder(const char *path, int hold_ms, int release) {
    int p[2];
    if (pipe(p) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        int rc = claim_take(path, "test item");
        char c = rc == 0 ? 'y' : 'n';
        if (write(p[1], &c, 1) != 1)
            _exit(3);
        sleep_ms(hold_ms);
        if (release)
            claim_release(path);
        _exit(rc == 0 ? 0 : 1);
    }
    close(p[1]);
    char c = 0;
    if (read(p[0], &c, 1) != 1 || c != 'y')
        pid = -1;
    close(p[0]);
    return pid;
}

static void test_basic(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/basic.claim", dir);
    CHECK(claim_try(path, NULL) == 1, "a free claim is taken");
    CHECK(claim_held(path), "held after taking");
    claim_holder h;
    CHECK(claim_read(path, &h) == 0 && h.parsed && h.pid == (long)getpid() && h.since > 0,
          "the record names this process (parsed %d pid %ld)", h.parsed, h.pid);
    CHECK(claim_try(path, NULL) == 1, "taking a held claim again is a no-op");
    claim_release(path);
    CHECK(!fs_exists(path) && !claim_held(path), "release removes the file");
    claim_release(path); /* twice: no-op */
    CHECK(claim_read(path, &h) == ERR_NOTFOUND, "no record after release");
    /* No temporaries left beside it. */
    char cmd[700];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s | grep basic)\"", dir);
    CHECK(system(cmd) == 0, "no temporary left by taking and releasing");
}

static void test_holders(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/live.claim", dir);
    /* A live holder on this host: not taken, and described. */
    pid_t pid = holder(path, 400, 1);
    CHECK(pid > 0, "child took the claim");
    claim_holder h;
    CHECK(claim_try(path, &h) == 0 && h.pid == (long)pid, "a live holder keeps it (pid %ld)",
          h.pid);
    char why[400];
    CHECK(claim_alive(&h, why, sizeof why) && strstr(why, "process"), "alive: %s", why);
    /* claim_take waits until it is released. */
    double t0 = now_s();
    CHECK(claim_take(path, "the live item") == 0, "taken after the wait");
    double waited = now_s() - t0;
    CHECK(waited > 0.2, "claim_take waited for the holder (%.2f s)", waited);
    claim_release(path);
    waitpid(pid, NULL, 0);

    /* A dead holder on this host (exited without releasing): taken over at once. */
    pid = holder(path, 0, 0);
    waitpid(pid, NULL, 0);
    CHECK(fs_exists(path), "the dead holder left its claim");
    CHECK(claim_read(path, &h) == 0 && !claim_alive(&h, why, sizeof why) && strstr(why, "gone"),
          "judged gone: %s", why);
    t0 = now_s();
    CHECK(claim_try(path, NULL) == 1, "a dead holder's claim is taken over");
    CHECK(now_s() - t0 < 1, "without waiting");
    claim_release(path);

    /* A reused PID: a live process (our parent) with another start time. */
    char rec[600];
    claim_read(path, &h); /* absent now */
    snprintf(rec, sizeof rec, "scaffold-claim host=%s boot=%s pid=%ld start=1 since=1 token=0123456789abcdef\n",
             "HOST", "BOOT", (long)getppid());
    /* The host and boot id must be ours for the PID rule: take them from a record of ours. */
    CHECK(claim_try(path, NULL) == 1, "take (to read our own host and boot id)");
    claim_holder me;
    claim_read(path, &me);
    claim_release(path);
    snprintf(rec, sizeof rec, "scaffold-claim host=%s boot=%s pid=%ld start=1 since=1 token=0123456789abcdef\n",
             me.host, me.boot[0] ? me.boot : "-", (long)getppid());
    write_text(path, rec);
    CHECK(claim_read(path, &h) == 0 && h.parsed && !claim_alive(&h, why, sizeof why),
          "a live PID with another start time is another program: %s", why);
    CHECK(claim_try(path, NULL) == 1, "... and its claim is taken over");
    claim_release(path);

    /* Another host: alive while refreshed, gone once older than the stale age. */
    setenv("SCAFFOLD_CLAIM_STALE_SECONDS", "100", 1);
    write_text(path, "scaffold-claim host=elsewhere boot=b pid=1 start=1 since=1 token=00000000000000ff\n");
    CHECK(claim_try(path, &h) == 0 && !strcmp(h.host, "elsewhere"), "another host's fresh claim is kept");
    set_age(path, 150);
    CHECK(claim_read(path, &h) == 0 && !claim_alive(&h, why, sizeof why) && strstr(why, "not refreshed"),
          "another host's claim older than the stale age is gone: %s", why);
    CHECK(claim_try(path, NULL) == 1, "... and taken over");
    claim_release(path);
    /* An unreadable record: by age too. */
    write_text(path, "garbage\n");
    CHECK(claim_try(path, &h) == 0 && !h.parsed, "a fresh unreadable record is respected");
    set_age(path, 150);
    CHECK(claim_try(path, NULL) == 1, "an old unreadable record is taken over");
    claim_release(path);

    /* The wait bound names the holder and the way out. */
    write_text(path, "scaffold-claim host=elsewhere boot=b pid=77 start=1 since=1 token=00000000000000fe\n");
    setenv("SCAFFOLD_CLAIM_WAIT_SECONDS", "0.3", 1);
    int rc = claim_take(path, "the bounded item");
    CHECK(rc == ERR_IO && strstr(err_msg(), "gave up waiting for the bounded item") &&
              strstr(err_msg(), "elsewhere") && strstr(err_msg(), "delete"),
          "bounded wait: %d %s", rc, err_msg());
    rc = claim_wait(path, "the bounded item");
    CHECK(rc == ERR_IO, "claim_wait has the same bound");
    unsetenv("SCAFFOLD_CLAIM_WAIT_SECONDS");
    unlink(path);
    CHECK(claim_wait(path, "a free item") == 0, "claim_wait on a free item returns at once");
    unsetenv("SCAFFOLD_CLAIM_STALE_SECONDS");
}

/* In a child of its own: the heartbeat thread reads its period when it starts. */
static int heartbeat_child(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/hb.claim", dir);
    setenv("SCAFFOLD_CLAIM_STALE_SECONDS", "1", 1); /* heartbeat every 0.25 s */
    CHECK(claim_try(path, NULL) == 1, "take");
    set_age(path, 50);
    sleep_ms(700);
    claim_holder h;
    CHECK(claim_read(path, &h) == 0 && h.age_s < 5, "the holder refreshes its claim (age %.0f s)",
          h.age_s);
    claim_release(path);
    return test_failed;
}

static void test_heartbeat(const char *dir) {
    pid_t pid = fork();
    if (pid == 0)
        _exit(heartbeat_child(dir) ? 1 : 0);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "heartbeat (in a child)");
}

/* Many processes race for one claim, `rounds` times each; inside, each checks that nobody else
 * is (an O_EXCL marker) and increments a counter file non-atomically. */
static void race(const char *dir, const char *name, int nproc, int rounds, int dead_first) {
    char path[512], marker[512], counter[512];
    snprintf(path, sizeof path, "%s/%s.claim", dir, name);
    snprintf(marker, sizeof marker, "%s/%s.inside", dir, name);
    snprintf(counter, sizeof counter, "%s/%s.count", dir, name);
    write_text(counter, "0\n");
    if (dead_first) {
        pid_t p = holder(path, 0, 0); /* a dead holder's claim to break, by all at once */
        waitpid(p, NULL, 0);
    }
    pid_t kids[16];
    for (int k = 0; k < nproc; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            int bad = 0;
            for (int r = 0; r < rounds; r++) {
                if (claim_take(path, "raced item") != 0)
                    _exit(2);
                int fd = open(marker, O_CREAT | O_EXCL | O_WRONLY, 0644);
                if (fd < 0)
                    bad = 1;
                else
                    close(fd);
                FILE *f = fopen(counter, "r");
                int v = 0;
                if (f) {
                    if (fscanf(f, "%d", &v) != 1)
                        bad = 1;
                    fclose(f);
                }
                sleep_ms(1);
                char txt[32];
                snprintf(txt, sizeof txt, "%d\n", v + 1);
                write_text(counter, txt);
                unlink(marker);
                claim_release(path);
            }
            _exit(bad);
        }
    }
    int bad = 0;
    for (int k = 0; k < nproc; k++) {
        int st = 0;
        waitpid(kids[k], &st, 0);
        bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    FILE *f = fopen(counter, "r");
    int v = -1;
    if (f) {
        if (fscanf(f, "%d", &v) != 1)
            v = -1;
        fclose(f);
    }
    CHECK(bad == 0, "%s: no two processes held the claim at once (%d saw another inside)", name,
          bad);
    CHECK(v == nproc * rounds, "%s: every round counted once (%d of %d)", name, v, nproc * rounds);
    CHECK(!fs_exists(path), "%s: the claim is free at the end", name);
}

int main(void) {
    char dir[] = "/tmp/scaffold-claim-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    test_basic(dir);
    test_holders(dir);
    test_heartbeat(dir);
    race(dir, "race", 6, 40, 0);
    for (int i = 0; i < 5; i++)
        race(dir, "dead", 6, 3, 1);
    fs_rm_rf(dir);
    return test_report();
}
