/* err: the project's error convention.
 *
 * Library functions return 0 on success and a negative ERR_* code on failure, after recording
 * one human-readable message with err_set(). The message names the file or key at fault and the
 * fix. Only the CLI turns an error into an exit status (err_exit_status()). The message lives in
 * thread-local storage, so loader threads can report errors without locks. */
#ifndef SCAFFOLD_CORE_ERR_H
#define SCAFFOLD_CORE_ERR_H

#include <stddef.h>

/* X-macro: code, value, exit status, short name. */
#define ERR_LIST(X)                                                                                \
    X(ERR_OK, 0, 0, "ok")                                                                          \
    X(ERR_USAGE, -1, 2, "usage error")                                                             \
    X(ERR_CONFIG, -2, 2, "configuration error")                                                    \
    X(ERR_IO, -3, 1, "I/O error")                                                                  \
    X(ERR_FORMAT, -4, 1, "corrupt or unsupported file")                                            \
    X(ERR_NOMEM, -5, 1, "out of memory")                                                           \
    X(ERR_RANGE, -6, 1, "value out of range")                                                      \
    X(ERR_NUMERIC, -7, 1, "numerical failure")                                                     \
    X(ERR_MPI, -8, 1, "MPI error")                                                                 \
    X(ERR_NOTFOUND, -9, 1, "not found")                                                            \
    X(ERR_INTERNAL, -10, 1, "internal error")

enum err_code {
#define ERR_ENUM(name, val, status, text) name = val,
    ERR_LIST(ERR_ENUM)
#undef ERR_ENUM
};

#define ERR_MSG_MAX 1024

/* Records the message for the current thread and returns `code` (so `return err_set(...)`). */
int err_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends "context: " to the current message (keeps the code). Returns the current code. */
int err_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The current thread's last message ("" if none) and code (0 if none). */
const char *err_msg(void);
int err_code(void);
void err_clear(void);

/* Short name of a code, and the process exit status the CLI uses for it (2 = bad input). */
const char *err_name(int code);
int err_exit_status(int code);

#endif
