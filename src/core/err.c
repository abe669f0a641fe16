/* err: thread-local last-error message and the code table (see err.h). */
#include "core/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char err_buf[ERR_MSG_MAX];
static _Thread_local int err_last;

int err_set(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    err_last = code;
    return code;
}

int err_prefix(const char *fmt, ...) {
    char pre[ERR_MSG_MAX], tmp[2 * ERR_MSG_MAX + 4];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    snprintf(tmp, sizeof tmp, "%s: %s", pre, err_buf);
    size_t n = strlen(tmp);
    if (n >= sizeof err_buf)
        n = sizeof err_buf - 1;
    memcpy(err_buf, tmp, n);
    err_buf[n] = '\0';
    return err_last;
}

const char *err_msg(void) {
    return err_buf;
}

int err_code(void) {
    return err_last;
}

void err_clear(void) {
    err_buf[0] = '\0';
    err_last = 0;
}

const char *err_name(int code) {
    switch (code) {
#define ERR_NAME(name, val, status, text)                                                          \
    case val:                                                                                      \
        return text;
        ERR_LIST(ERR_NAME)
#undef ERR_NAME
    }
    return "unknown error";
}

int err_exit_status(int code) {
    switch (code) {
#define ERR_STATUS(name, val, status, text)                                                        \
    case val:                                                                                      \
        return status;
        ERR_LIST(ERR_STATUS)
#undef ERR_STATUS
    }
    return 1;
}
