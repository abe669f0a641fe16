/* log: stderr logging and clocks (see log.h). */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int log_rank;
static int log_verb;

void log_set_rank(int rank) {
    log_rank = rank;
}

void log_set_verbosity(int v) {
    log_verb = v;
}

int log_verbosity(void) {
    return log_verb;
}

static void log_emit(const char *level, const char *fmt, va_list ap) {
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    fprintf(stderr, "[%02d:%02d:%02d][rank=%d]%s %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec, log_rank,
            level, msg);
}

/* A level's function: the message goes out when `shown`, tagged with `tag`. */
#define LOG_LEVEL(name, shown, tag)                                                                \
    void name(const char *fmt, ...) {                                                              \
        if (!(shown))                                                                              \
            return;                                                                                \
        va_list ap;                                                                                \
        va_start(ap, fmt);                                                                         \
        log_emit(tag, fmt, ap);                                                                    \
        va_end(ap);                                                                                \
    }
LOG_LEVEL(log_info, log_rank == 0 && log_verb >= 0, "")
LOG_LEVEL(log_debug, log_verb >= 1, "[debug]")
LOG_LEVEL(log_warn, 1, "[warning]")
LOG_LEVEL(log_error, 1, "[error]")
#undef LOG_LEVEL

double time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

long long time_unix_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

void log_progress_start(log_progress *p, long total, long first) {
    const char *e = getenv("SCAFFOLD_PROGRESS_SECONDS");
    p->t0 = p->last = time_now();
    p->every = e && *e ? atof(e) : 10.0;
    p->total = total;
    p->first = first;
}

int log_progress_due(log_progress *p, long done, double *per_unit, double *elapsed, double *eta) {
    double now = time_now();
    if (now - p->last < p->every || done >= p->total || done <= p->first)
        return 0;
    p->last = now;
    *elapsed = now - p->t0;
    *per_unit = *elapsed / (double)(done - p->first);
    *eta = *per_unit * (double)(p->total - done);
    return 1;
}
