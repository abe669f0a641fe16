/* log: timestamped messages on stderr, progress lines and wall-clock timers.
 * By default only rank 0 prints info messages (log_set_rank); warnings and errors print on every
 * rank with the rank in the prefix. */
#ifndef SCAFFOLD_CORE_LOG_H
#define SCAFFOLD_CORE_LOG_H

/* Sets the rank used in prefixes and for rank-0-only info output; verbosity 0 = info,
 * 1 = debug, -1 = quiet (errors only). */
void log_set_rank(int rank);
void log_set_verbosity(int v);
int log_verbosity(void);

void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Progress of a long phase (an epoch's steps, the warmup, a validation pass): a line is due at
 * most every SCAFFOLD_PROGRESS_SECONDS (default 10) seconds, never after the last unit, so
 * phases shorter than that print none. `first` units were done before the phase started here
 * (an epoch resumed in its middle); rates and the ETA count only the units done since. */
typedef struct log_progress {
    double t0, last, every;
    long total, first;
} log_progress;
void log_progress_start(log_progress *p, long total, long first);
/* 1 when a line is due after `done` units: *per_unit seconds per unit, *elapsed seconds, *eta
 * seconds left. */
int log_progress_due(log_progress *p, long done, double *per_unit, double *elapsed, double *eta);

/* Seconds from an arbitrary fixed point (CLOCK_MONOTONIC). */
double time_now(void);

/* Unix time in microseconds (CLOCK_REALTIME). */
long long time_unix_us(void);

#endif
