/* claim: lock files with a holder record, liveness by PID (same host) or age, a heartbeat thread
 * (see claim.h). */
#include "core/claim.h"

#include "core/err.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/rng.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- who we are */

static char my_host[256], my_boot[40];
static pthread_once_t ident_once = PTHREAD_ONCE_INIT;

static void ident_init(void) {
    if (gethostname(my_host, sizeof my_host) != 0)
        snprintf(my_host, sizeof my_host, "unknown");
    my_host[sizeof my_host - 1] = '\0';
    for (char *p = my_host; *p; p++) /* the record is space-separated */
        if (*p == ' ' || *p == '\t' || *p == '\n')
            *p = '_';
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(my_boot, sizeof my_boot, f))
            my_boot[0] = '\0';
        my_boot[strcspn(my_boot, "\n")] = '\0';
        fclose(f);
    }
}

int claim_proc_info(long pid, int *session, unsigned long long *start) {
    char p[64], buf[1024];
    snprintf(p, sizeof p, "/proc/%ld/stat", pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name may hold spaces and parentheses: fields restart after the last ')'. */
    char *s = strrchr(buf, ')');
    char st;
    int ppid, pgrp, sess;
    if (!s || sscanf(s + 1, " %c %d %d %d", &st, &ppid, &pgrp, &sess) != 4)
        return -1;
    if (session)
        *session = sess;
    if (start) {
        s++;
        for (int field = 3; field < 22 && s; field++) /* s points before field `field` */
            s = strchr(s + 1, ' ');
        *start = s ? strtoull(s + 1, NULL, 10) : 0;
    }
    return 0;
}

/* Start time of a process in clock ticks since boot, 0 if unknown. */
static unsigned long long proc_start(long pid) {
    unsigned long long s = 0;
    return claim_proc_info(pid, NULL, &s) == 0 ? s : 0;
}

double claim_stale_seconds(void) {
    const char *e = getenv("SCAFFOLD_CLAIM_STALE_SECONDS");
    if (e && *e) {
        char *end;
        double v = strtod(e, &end);
        if (end != e && !*end && v >= 0)
            return v;
    }
    return CLAIM_STALE_SECONDS;
}

double claim_heartbeat_seconds(void) {
    double h = claim_stale_seconds() / 4;
    return h > CLAIM_HEARTBEAT_SECONDS ? CLAIM_HEARTBEAT_SECONDS : h < 0.05 ? 0.05 : h;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---- the claims this process holds, refreshed by one background thread */

typedef struct held {
    char path[FS_PATH_MAX];
    char token[17];
    int lost_reported;
} held;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static held *reg;
static int nreg, capreg, hb_started;

static int reg_find(const char *path) {
    for (int i = 0; i < nreg; i++)
        if (!strcmp(reg[i].path, path))
            return i;
    return -1;
}

static void *heartbeat_main(void *arg) {
    (void)arg;
    for (;;) {
        sleep_s(claim_heartbeat_seconds());
        pthread_mutex_lock(&reg_mu);
        for (int i = 0; i < nreg; i++) {
            /* A refresh that finds no file: another job judged this claim stale (this process
             * was stopped longer than the stale age) and broke it. Said once; the work goes on,
             * as the other job writes the same bytes. */
            if (utimensat(AT_FDCWD, reg[i].path, NULL, 0) != 0 && errno == ENOENT &&
                !reg[i].lost_reported) {
                reg[i].lost_reported = 1;
                log_warn("%s: this process's claim was taken over by another job (it was not "
                         "refreshed for %.0f s)", reg[i].path, claim_stale_seconds());
            }
        }
        pthread_mutex_unlock(&reg_mu);
    }
    return NULL;
}

/* A forked child holds none of its parent's claims (they name the parent's PID) and has no
 * heartbeat thread: it starts with an empty registry. */
static void atfork_prepare(void) { pthread_mutex_lock(&reg_mu); }
static void atfork_parent(void) { pthread_mutex_unlock(&reg_mu); }
static void atfork_child(void) {
    nreg = 0;
    hb_started = 0;
    pthread_mutex_unlock(&reg_mu);
}
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void atfork_init(void) {
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

static int reg_add(const char *path, const char *token) {
    pthread_once(&atfork_once, atfork_init);
    pthread_mutex_lock(&reg_mu);
    int rc = 0;
    if (nreg == capreg) {
        int nc = capreg ? 2 * capreg : 16;
        held *n = realloc(reg, (size_t)nc * sizeof *n);
        if (!n)
            rc = err_set(ERR_NOMEM, "out of memory recording the claim %s", path);
        else
            reg = n, capreg = nc;
    }
    if (rc == 0) {
        held *h = &reg[nreg++];
        memset(h, 0, sizeof *h);
        snprintf(h->path, sizeof h->path, "%s", path);
        snprintf(h->token, sizeof h->token, "%s", token);
        if (!hb_started) {
            pthread_attr_t at;
            pthread_t t;
            pthread_attr_init(&at);
            pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
            if (pthread_create(&t, &at, heartbeat_main, NULL) == 0)
                hb_started = 1;
            pthread_attr_destroy(&at);
        }
    }
    pthread_mutex_unlock(&reg_mu);
    return rc;
}

int claim_held(const char *path) {
    pthread_mutex_lock(&reg_mu);
    int i = reg_find(path);
    pthread_mutex_unlock(&reg_mu);
    return i >= 0;
}

/* ---- records */

static void make_record(char *rec, size_t cap, char token[17]) {
    pthread_once(&ident_once, ident_init);
    static unsigned counter;
    uint64_t t = rng_mix64((uint64_t)time_unix_us() ^ ((uint64_t)getpid() << 40) ^
                           ((uint64_t)__atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED) << 20));
    snprintf(token, 17, "%016llx", (unsigned long long)t);
    snprintf(rec, cap, "scaffold-claim host=%s boot=%s pid=%ld start=%llu since=%lld token=%s\n",
             my_host, my_boot[0] ? my_boot : "-", (long)getpid(), proc_start(getpid()),
             (long long)time(NULL), token);
}

int claim_read(const char *path, claim_holder *h) {
    memset(h, 0, sizeof *h);
    struct stat st;
    if (stat(path, &st) != 0)
        return errno == ENOENT ? ERR_NOTFOUND
                               : err_set(ERR_IO, "cannot read claim %s: %s", path, strerror(errno));
    double age = difftime(time(NULL), st.st_mtime);
    h->age_s = age > 0 ? age : 0; /* another host's clock may run ahead */
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? ERR_NOTFOUND : 0; /* unreadable: judged by age */
    char line[600] = "";
    if (!fgets(line, sizeof line, f))
        line[0] = '\0';
    fclose(f);
    char boot[40] = "";
    int n = sscanf(line, "scaffold-claim host=%255s boot=%39s pid=%ld start=%llu since=%lld "
                         "token=%16s", h->host, boot, &h->pid, &h->start, &h->since, h->token);
    h->parsed = n == 6;
    snprintf(h->boot, sizeof h->boot, "%s", strcmp(boot, "-") ? boot : "");
    if (!h->parsed)
        h->host[0] = h->token[0] = '\0';
    return 0;
}

int claim_alive(const claim_holder *h, char *why, size_t whycap) {
    pthread_once(&ident_once, ident_init);
    char dummy[8];
    if (!why)
        why = dummy, whycap = sizeof dummy;
    double stale = claim_stale_seconds();
    if (!h->parsed) {
        snprintf(why, whycap, "an unreadable claim record, refreshed %.0f s ago", h->age_s);
        return h->age_s < stale;
    }
    if (!strcmp(h->host, my_host) && my_boot[0] && !strcmp(h->boot, my_boot)) {
        if (h->pid <= 0 || (kill((pid_t)h->pid, 0) != 0 && errno == ESRCH)) {
            snprintf(why, whycap, "process %ld on %s is gone", h->pid, h->host);
            return 0;
        }
        unsigned long long s = proc_start(h->pid);
        if ((s && s != h->start) || (h->pid == (long)getpid() && s == h->start)) {
            /* Another program under a reused PID, or this process's own record that it no
             * longer holds (claim_try looks up the held claims first). */
            snprintf(why, whycap, "process %ld on %s is not the one that took it", h->pid,
                     h->host);
            return 0;
        }
        snprintf(why, whycap, "process %ld on %s", h->pid, h->host);
        return 1;
    }
    /* Another host: only the refreshes tell. */
    if (h->age_s >= stale) {
        snprintf(why, whycap, "process %ld on %s, not refreshed for %.0f s (stale after %.0f s)",
                 h->pid, h->host, h->age_s, stale);
        return 0;
    }
    snprintf(why, whycap, "process %ld on %s, refreshed %.0f s ago", h->pid, h->host, h->age_s);
    return 1;
}

/* Writes the record to `tmp` and links it to `path`: 1 taken, 0 exists, or ERR_IO. */
static int link_record(const char *path, const char *tmp, const char *rec) {
    size_t len = strlen(rec);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return err_set(ERR_IO, "cannot create claim %s: %s", path, strerror(errno));
    int bad = write(fd, rec, len) != (ssize_t)len;
    int e = errno;
    if (close(fd) != 0 && !bad)
        bad = 1, e = errno;
    if (bad) {
        unlink(tmp);
        return err_set(ERR_IO, "cannot create claim %s: %s", path, strerror(e));
    }
    int r = link(tmp, path);
    e = errno;
    struct stat st;
    /* Over NFS a lost reply can report an error for a link that was made: the link count says. */
    if (r != 0 && e != EEXIST && stat(tmp, &st) == 0 && st.st_nlink == 2)
        r = 0;
    unlink(tmp);
    if (r == 0)
        return 1;
    if (e == EEXIST)
        return 0;
    if (e == EPERM || e == ENOTSUP || e == EOPNOTSUPP || e == ENOSYS || e == EMLINK) {
        /* No hard links here: an exclusive create (atomic on NFSv3+ too). */
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0)
            return errno == EEXIST ? 0
                                   : err_set(ERR_IO, "cannot create claim %s: %s", path,
                                             strerror(errno));
        bad = write(fd, rec, len) != (ssize_t)len;
        e = errno;
        if (close(fd) != 0 && !bad)
            bad = 1, e = errno;
        if (bad) {
            unlink(path);
            return err_set(ERR_IO, "cannot create claim %s: %s", path, strerror(e));
        }
        return 1;
    }
    return err_set(ERR_IO, "cannot create claim %s: %s", path, strerror(e));
}

static int same_record(const claim_holder *a, const claim_holder *b) {
    if (a->parsed != b->parsed)
        return 0;
    if (a->parsed)
        return !strcmp(a->token, b->token);
    return 1; /* both unreadable: nothing tells them apart, and neither is a live record */
}

/* Breaks the claim of a holder judged dead: PATH is renamed aside, and put back if the record
 * renamed is not the one judged (a new holder took it in between). 0 or ERR_IO. */
static int break_claim(const char *path, const claim_holder *dead, const char *token,
                       const char *why) {
    char aside[FS_PATH_MAX + 40];
    snprintf(aside, sizeof aside, "%s.%s.dead", path, token);
    if (rename(path, aside) != 0)
        return errno == ENOENT ? 0
                               : err_set(ERR_IO, "cannot take over claim %s: %s", path,
                                         strerror(errno));
    claim_holder got;
    if (claim_read(aside, &got) == 0 && same_record(&got, dead)) {
        unlink(aside);
        log_info("%s: taking over the claim of a writer that is gone (%s)", path, why);
        return 0;
    }
    if (link(aside, path) != 0 && errno == EEXIST)
        log_warn("%s: a claim taken while this job took over a dead one could not be put back; "
                 "two jobs may work on this item (they write the same bytes)", path);
    unlink(aside);
    return 0;
}

int claim_try(const char *path, claim_holder *h) {
    if (claim_held(path))
        return 1;
    char rec[512], token[17], tmp[FS_PATH_MAX + 40];
    make_record(rec, sizeof rec, token);
    snprintf(tmp, sizeof tmp, "%s.%s.new", path, token);
    for (int attempt = 0; attempt < 16; attempt++) {
        int rc = link_record(path, tmp, rec);
        if (rc == 1)
            return reg_add(path, token) == 0 ? 1 : err_code();
        if (rc < 0)
            return rc;
        claim_holder cur;
        rc = claim_read(path, &cur);
        if (rc == ERR_NOTFOUND)
            continue; /* released in between */
        if (rc < 0)
            return rc;
        char why[400];
        if (claim_alive(&cur, why, sizeof why)) {
            if (h)
                *h = cur;
            return 0;
        }
        if ((rc = break_claim(path, &cur, token, why)) < 0)
            return rc;
    }
    return err_set(ERR_IO, "cannot take claim %s: it changed hands 16 times in a row", path);
}

static double wait_limit(void) {
    const char *e = getenv("SCAFFOLD_CLAIM_WAIT_SECONDS");
    double v = e && *e ? strtod(e, NULL) : 0;
    return v > 0 ? v : 0;
}

/* One step of a wait: progress lines and the bound. 0 to go on waiting, or ERR_IO. */
static int wait_step(const char *path, const char *what, const claim_holder *h, double t0,
                     double *last_report) {
    double now = time_now(), waited = now - t0, limit = wait_limit();
    char why[400];
    claim_alive(h, why, sizeof why);
    if (*last_report < 0 && waited >= 1) { /* a wait of a moment goes unsaid */
        log_info("waiting for %s: another job is writing it (%s; claim %s)", what, why, path);
        *last_report = now;
    } else if (*last_report >= 0 && now - *last_report >= 30) {
        log_info("still waiting for %s after %.0f s (%s)", what, waited, why);
        *last_report = now;
    }
    if (limit > 0 && waited > limit)
        return err_set(ERR_IO, "gave up waiting for %s after %.0f s (SCAFFOLD_CLAIM_WAIT_SECONDS): "
                       "it is claimed by %s; if that job is gone, delete %s", what, waited, why,
                       path);
    /* Short polls first (a small item is often done within a second), then one a second. */
    sleep_s(waited < 2 ? 0.05 : waited < 10 ? 0.25 : 1.0);
    return 0;
}

int claim_take(const char *path, const char *what) {
    double t0 = time_now(), last = -1;
    for (;;) {
        claim_holder h;
        int rc = claim_try(path, &h);
        if (rc < 0)
            return rc;
        if (rc == 1)
            break;
        if ((rc = wait_step(path, what, &h, t0, &last)) < 0)
            return rc;
    }
    if (last >= 0)
        log_info("%s: the other job is done after %.0f s of waiting", what, time_now() - t0);
    return 0;
}

int claim_wait(const char *path, const char *what) {
    double t0 = time_now(), last = -1;
    for (;;) {
        claim_holder h;
        int rc = claim_read(path, &h);
        if (rc == ERR_NOTFOUND || claim_held(path))
            return 0;
        if (rc < 0)
            return rc;
        if (!claim_alive(&h, NULL, 0))
            return 0;
        if ((rc = wait_step(path, what, &h, t0, &last)) < 0)
            return rc;
    }
}

void claim_release(const char *path) {
    char token[17] = "";
    pthread_mutex_lock(&reg_mu);
    int i = reg_find(path);
    if (i >= 0) {
        snprintf(token, sizeof token, "%s", reg[i].token);
        reg[i] = reg[--nreg];
    }
    pthread_mutex_unlock(&reg_mu);
    if (i < 0)
        return;
    claim_holder h;
    if (claim_read(path, &h) == 0 && h.parsed && !strcmp(h.token, token))
        unlink(path);
}
