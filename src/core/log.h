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

/* Seconds from an arbitrary fixed point (CLOCK_MONOTONIC). */
double time_now(void);

/* Unix time in microseconds (CLOCK_REALTIME). */
long long time_unix_us(void);

#endif
