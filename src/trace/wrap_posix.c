/* wrap_posix.c: the POSIX interposers of libscaffold_trace.so. Each wrapper follows one body:
 * resolve the real symbol (dlsym RTLD_NEXT, once), take the fast exit when the descriptor or path
 * is not traced, else time the real call, save errno, append one record to the thread's ring,
 * restore errno. The fd table is kept right through open/dup/fcntl/close even for untraced
 * descriptors, and the namespace calls (chdir/fchdir) keep the cached cwd right.
 * Names of the 64-bit aliases (open64, pread64, stat64...) are reported without the suffix so
 * analyzers that match exact names (read, pread, open, stat) count their bytes. */
#include "trace_int.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <utime.h>

/* Symbols glibc no longer declares (old stat ABI, fortify open) or declares conditionally. */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);
int __xstat(int ver, const char *path, struct stat *buf);
int __xstat64(int ver, const char *path, struct stat64 *buf);
int __lxstat(int ver, const char *path, struct stat *buf);
int __lxstat64(int ver, const char *path, struct stat64 *buf);
int __fxstat(int ver, int fd, struct stat *buf);
int __fxstat64(int ver, int fd, struct stat64 *buf);
int __fxstatat(int ver, int dirfd, const char *path, struct stat *buf, int flags);
int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *buf, int flags);
int fcntl64(int fd, int cmd, ...);
ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags);
ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags);
pid_t vfork(void);
void _Exit(int status);

extern char **environ;

#define REAL(ret, name, params) static ret(*real_##name) params
/* Resolves once; a symbol this libc lacks makes the wrapper fail with ENOSYS. */
#define MAP(name)                                                                                  \
    (TRC_LIKELY(real_##name != NULL) ||                                                            \
     (real_##name = (__typeof__(real_##name))map_sym(#name)) != NULL)
#define NOSYS(rv)                                                                                  \
    do {                                                                                           \
        errno = ENOSYS;                                                                            \
        return rv;                                                                                 \
    } while (0)

static void *map_sym(const char *name) {
    void *p = dlsym(RTLD_NEXT, name);
    /* The pre-2.33 stat ABI exists only as compat versions, which plain dlsym does not see. */
    if (!p)
        p = dlvsym(RTLD_NEXT, name, "GLIBC_2.2.5");
    if (!p)
        p = dlvsym(RTLD_NEXT, name, "GLIBC_2.17");
    return p;
}

#define POSIX_ON() trc_on(TRC_FAM_POSIX)

/* NULL tests through a helper: glibc marks these parameters nonnull, but callers do pass NULL
 * and the real function decides what happens. */
static int is_null(const void *p) { return p == NULL; }

static inline uint64_t fdhash(trc_fd *s) { return __atomic_load_n(&s->phash, __ATOMIC_RELAXED); }

static inline int is_internal_fd(int fd) {
    return fd >= 0 && (fd == trc_g.wake_fd || fd == trc_g.out_fd || fd == trc_g.done_rd ||
                       fd == trc_g.done_wr);
}

/* ================================================================ open family */
REAL(int, open, (const char *, int, ...));
REAL(int, open64, (const char *, int, ...));
REAL(int, openat, (int, const char *, int, ...));
REAL(int, openat64, (int, const char *, int, ...));
REAL(int, creat, (const char *, mode_t));
REAL(int, creat64, (const char *, mode_t));
REAL(int, __open_2, (const char *, int));
REAL(int, __open64_2, (const char *, int));
REAL(int, __openat_2, (int, const char *, int));
REAL(int, __openat64_2, (int, const char *, int));

static int needs_mode(int flags) {
    return (flags & O_CREAT) || ((flags & O_TMPFILE) == O_TMPFILE);
}

/* Bookkeeping and event after any open-like call that returned fd. */
static void after_open(int op, int dirfd, const char *path, int flags, int mode, int fd,
                       uint64_t t0, uint64_t t1) {
    int traced = 0;
    /* Directories are interned even when untraced: openat() may resolve against them. */
    uint64_t h = trc_path_classify(dirfd, path, &traced, (flags & O_DIRECTORY) != 0);
    if (fd >= 0)
        trc_fd_set(fd, h, traced, (flags & O_APPEND) ? -1 : 0);
    if (traced)
        trc_emit_io(op, fd, h, t0, t1, -1, 0, fd, flags, needs_mode(flags) ? mode : -1, 0);
}

#define OPEN_BODY(realcall, op, dirfd)                                                             \
    if (!POSIX_ON())                                                                               \
        return realcall;                                                                           \
    T0();                                                                                          \
    int fd = realcall;                                                                             \
    T1();                                                                                          \
    after_open(op, dirfd, path, flags, (int)mode, fd, t0_, t1_);                                   \
    TDONE();                                                                                       \
    return fd

TRC_API int open(const char *path, int flags, ...) {
    mode_t mode = 0;
    if (needs_mode(flags)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if (!MAP(open))
        NOSYS(-1);
    OPEN_BODY(real_open(path, flags, mode), TRC_OP_open, AT_FDCWD);
}

TRC_API int open64(const char *path, int flags, ...) {
    mode_t mode = 0;
    if (needs_mode(flags)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if (!MAP(open64))
        NOSYS(-1);
    OPEN_BODY(real_open64(path, flags, mode), TRC_OP_open, AT_FDCWD);
}

TRC_API int openat(int dirfd, const char *path, int flags, ...) {
    mode_t mode = 0;
    if (needs_mode(flags)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if (!MAP(openat))
        NOSYS(-1);
    OPEN_BODY(real_openat(dirfd, path, flags, mode), TRC_OP_openat, dirfd);
}

TRC_API int openat64(int dirfd, const char *path, int flags, ...) {
    mode_t mode = 0;
    if (needs_mode(flags)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if (!MAP(openat64))
        NOSYS(-1);
    OPEN_BODY(real_openat64(dirfd, path, flags, mode), TRC_OP_openat, dirfd);
}

TRC_API int creat(const char *path, mode_t mode) {
    int flags = O_CREAT | O_WRONLY | O_TRUNC;
    if (!MAP(creat))
        NOSYS(-1);
    OPEN_BODY(real_creat(path, mode), TRC_OP_creat, AT_FDCWD);
}

TRC_API int creat64(const char *path, mode_t mode) {
    int flags = O_CREAT | O_WRONLY | O_TRUNC;
    if (!MAP(creat64))
        NOSYS(-1);
    OPEN_BODY(real_creat64(path, mode), TRC_OP_creat, AT_FDCWD);
}

TRC_API int __open_2(const char *path, int flags) {
    mode_t mode = 0;
    if (!MAP(__open_2))
        NOSYS(-1);
    OPEN_BODY(real___open_2(path, flags), TRC_OP_open, AT_FDCWD);
}

TRC_API int __open64_2(const char *path, int flags) {
    mode_t mode = 0;
    if (!MAP(__open64_2))
        NOSYS(-1);
    OPEN_BODY(real___open64_2(path, flags), TRC_OP_open, AT_FDCWD);
}

TRC_API int __openat_2(int dirfd, const char *path, int flags) {
    mode_t mode = 0;
    if (!MAP(__openat_2))
        NOSYS(-1);
    OPEN_BODY(real___openat_2(dirfd, path, flags), TRC_OP_openat, dirfd);
}

TRC_API int __openat64_2(int dirfd, const char *path, int flags) {
    mode_t mode = 0;
    if (!MAP(__openat64_2))
        NOSYS(-1);
    OPEN_BODY(real___openat64_2(dirfd, path, flags), TRC_OP_openat, dirfd);
}

/* ================================================================ close, dup */
REAL(int, close, (int));
REAL(int, close_range, (unsigned, unsigned, int));
REAL(int, dup, (int));
REAL(int, dup2, (int, int));
REAL(int, dup3, (int, int, int));
REAL(int, fcntl, (int, int, ...));
REAL(int, fcntl64, (int, int, ...));

TRC_API int close(int fd) {
    if (!MAP(close))
        NOSYS(-1);
    if (trc_busy)
        return real_close(fd);
    if (TRC_UNLIKELY(is_internal_fd(fd)))
        trc_fd_stolen(fd);
    trc_fd *s = trc_fd_slot(fd);
    if (!s || !__atomic_load_n(&s->traced, __ATOMIC_RELAXED) || !POSIX_ON()) {
        if (s && __atomic_load_n(&s->phash, __ATOMIC_RELAXED))
            trc_fd_clear(fd);
        return real_close(fd);
    }
    uint64_t h = fdhash(s);
    /* Clear before closing: once closed, another thread may get this number from open(). */
    trc_fd_clear(fd);
    T0();
    int ret = real_close(fd);
    T1();
    trc_emit_io(TRC_OP_close, fd, h, t0_, t1_, -1, 0, ret, 0, 0, 0);
    TDONE();
    return ret;
}

TRC_API int close_range(unsigned first, unsigned last, int flags) {
    if (!MAP(close_range))
        NOSYS(-1);
    if (!trc_busy && !(flags & CLOSE_RANGE_CLOEXEC)) {
        int fds[4] = {trc_g.wake_fd, trc_g.out_fd, trc_g.done_rd, trc_g.done_wr};
        for (int i = 0; i < 4; i++)
            if (fds[i] >= 0 && (unsigned)fds[i] >= first && (unsigned)fds[i] <= last)
                trc_fd_stolen(fds[i]);
        unsigned hi = last < (unsigned)trc_g.nfds ? last : (unsigned)trc_g.nfds - 1;
        for (unsigned fd = first; trc_g.fds && fd <= hi; fd++)
            if (trc_g.fds[fd].phash || trc_g.fds[fd].traced)
                trc_fd_clear((int)fd);
    }
    return real_close_range(first, last, flags);
}

static void dup_event(int op, int oldfd, int ret, uint64_t t0, uint64_t t1, int64_t a1) {
    if (ret >= 0)
        trc_fd_copy(oldfd, ret);
    trc_fd *s = trc_fd_slot(oldfd);
    if (s && __atomic_load_n(&s->traced, __ATOMIC_RELAXED))
        trc_emit_io(op, oldfd, fdhash(s), t0, t1, -1, 0, ret, a1, 0, 0);
}

TRC_API int dup(int fd) {
    if (!MAP(dup))
        NOSYS(-1);
    if (!POSIX_ON())
        return real_dup(fd);
    T0();
    int ret = real_dup(fd);
    T1();
    dup_event(TRC_OP_dup, fd, ret, t0_, t1_, 0);
    TDONE();
    return ret;
}

TRC_API int dup2(int oldfd, int newfd) {
    if (!MAP(dup2))
        NOSYS(-1);
    if (!trc_busy && is_internal_fd(newfd) && oldfd != newfd)
        trc_fd_stolen(newfd);
    if (!POSIX_ON())
        return real_dup2(oldfd, newfd);
    T0();
    int ret = real_dup2(oldfd, newfd);
    T1();
    if (ret >= 0 && oldfd != newfd)
        dup_event(TRC_OP_dup2, oldfd, ret, t0_, t1_, 0);
    TDONE();
    return ret;
}

TRC_API int dup3(int oldfd, int newfd, int flags) {
    if (!MAP(dup3))
        NOSYS(-1);
    if (!trc_busy && is_internal_fd(newfd) && oldfd != newfd)
        trc_fd_stolen(newfd);
    if (!POSIX_ON())
        return real_dup3(oldfd, newfd, flags);
    T0();
    int ret = real_dup3(oldfd, newfd, flags);
    T1();
    dup_event(TRC_OP_dup3, oldfd, ret, t0_, t1_, flags);
    TDONE();
    return ret;
}

/* fcntl's third argument is an int or a pointer; on the supported ABIs (x86-64, aarch64) passing
 * it on as an unsigned long is exact for both. */
static int fcntl_common(int (*real)(int, int, ...), int fd, int cmd, unsigned long arg) {
    trc_fd *s = trc_fd_traced(fd, TRC_FAM_POSIX);
    int isdup = cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC;
    if (!s && !(isdup && !trc_busy && trc_g.fds)) {
        return real(fd, cmd, arg);
    }
    if (!s) { /* untraced dup: the new descriptor's slot must not keep stale data */
        int ret = real(fd, cmd, arg);
        if (ret >= 0)
            trc_fd_copy(fd, ret);
        return ret;
    }
    T0();
    int ret = real(fd, cmd, arg);
    T1();
    if (isdup && ret >= 0)
        trc_fd_copy(fd, ret);
    trc_emit_io(TRC_OP_fcntl, fd, fdhash(s), t0_, t1_, -1, 0, ret, cmd, 0, 0);
    TDONE();
    return ret;
}

TRC_API int fcntl(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    unsigned long arg = va_arg(ap, unsigned long);
    va_end(ap);
    if (!MAP(fcntl))
        NOSYS(-1);
    return fcntl_common(real_fcntl, fd, cmd, arg);
}

TRC_API int fcntl64(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    unsigned long arg = va_arg(ap, unsigned long);
    va_end(ap);
    if (!MAP(fcntl64))
        NOSYS(-1);
    return fcntl_common(real_fcntl64, fd, cmd, arg);
}

/* ================================================================ data path */
REAL(ssize_t, read, (int, void *, size_t));
REAL(ssize_t, write, (int, const void *, size_t));
REAL(ssize_t, pread, (int, void *, size_t, off_t));
REAL(ssize_t, pread64, (int, void *, size_t, off64_t));
REAL(ssize_t, pwrite, (int, const void *, size_t, off_t));
REAL(ssize_t, pwrite64, (int, const void *, size_t, off64_t));
REAL(ssize_t, readv, (int, const struct iovec *, int));
REAL(ssize_t, writev, (int, const struct iovec *, int));
REAL(ssize_t, preadv, (int, const struct iovec *, int, off_t));
REAL(ssize_t, preadv64, (int, const struct iovec *, int, off64_t));
REAL(ssize_t, pwritev, (int, const struct iovec *, int, off_t));
REAL(ssize_t, pwritev64, (int, const struct iovec *, int, off64_t));
REAL(ssize_t, preadv2, (int, const struct iovec *, int, off_t, int));
REAL(ssize_t, preadv64v2, (int, const struct iovec *, int, off64_t, int));
REAL(ssize_t, pwritev2, (int, const struct iovec *, int, off_t, int));
REAL(ssize_t, pwritev64v2, (int, const struct iovec *, int, off64_t, int));
REAL(off_t, lseek, (int, off_t, int));
REAL(off64_t, lseek64, (int, off64_t, int));

/* The data-path wrappers are split in two: the exported wrapper only checks whether the
 * descriptor is traced and tail-calls the real function (no frame, no saved registers), and a
 * separate non-inlined function does the timing and the record. */
#define STRIP(...) __VA_ARGS__

/* Sequential read/write: the offset is the tracked position, which then advances. */
#define SEQ_WRAP(fn, op, P, A, count_expr, a1v)                                                    \
    static __attribute__((noinline)) ssize_t fn##_slow(trc_fd *s, STRIP P) {                      \
        T0();                                                                                      \
        ssize_t ret = real_##fn A;                                                                 \
        T1();                                                                                      \
        int64_t off = s->pos;                                                                      \
        if (ret > 0 && off >= 0)                                                                   \
            s->pos = off + ret;                                                                    \
        trc_emit_io(op, fd, fdhash(s), t0_, t1_, off, (int64_t)(count_expr), ret, a1v, 0, 0);     \
        TDONE();                                                                                   \
        return ret;                                                                                \
    }                                                                                              \
    TRC_API ssize_t fn P {                                                                         \
        if (!MAP(fn))                                                                              \
            NOSYS(-1);                                                                             \
        trc_fd *s = trc_fd_traced(fd, TRC_FAM_POSIX);                                              \
        if (TRC_LIKELY(!s))                                                                        \
            return real_##fn A;                                                                    \
        return fn##_slow(s, STRIP A);                                                              \
    }

/* Positioned read/write: the offset is the argument; the position does not move. */
#define POS_WRAP(fn, op, P, A, count_expr, offset, a1v, a2v)                                       \
    static __attribute__((noinline)) ssize_t fn##_slow(trc_fd *s, STRIP P) {                      \
        T0();                                                                                      \
        ssize_t ret = real_##fn A;                                                                 \
        T1();                                                                                      \
        trc_emit_io(op, fd, fdhash(s), t0_, t1_, (int64_t)(offset), (int64_t)(count_expr), ret,  \
                    a1v, a2v, 0);                                                                  \
        TDONE();                                                                                   \
        return ret;                                                                                \
    }                                                                                              \
    TRC_API ssize_t fn P {                                                                         \
        if (!MAP(fn))                                                                              \
            NOSYS(-1);                                                                             \
        trc_fd *s = trc_fd_traced(fd, TRC_FAM_POSIX);                                              \
        if (TRC_LIKELY(!s))                                                                        \
            return real_##fn A;                                                                    \
        return fn##_slow(s, STRIP A);                                                              \
    }

static size_t iov_total(const struct iovec *iov, int n) {
    size_t t = 0;
    for (int i = 0; iov && i < n; i++)
        t += iov[i].iov_len;
    return t;
}

SEQ_WRAP(read, TRC_OP_read, (int fd, void *buf, size_t n), (fd, buf, n), n, 0)
SEQ_WRAP(write, TRC_OP_write, (int fd, const void *buf, size_t n), (fd, buf, n), n, 0)
SEQ_WRAP(readv, TRC_OP_readv, (int fd, const struct iovec *iov, int cnt), (fd, iov, cnt),
         iov_total(iov, cnt), cnt)
SEQ_WRAP(writev, TRC_OP_writev, (int fd, const struct iovec *iov, int cnt), (fd, iov, cnt),
         iov_total(iov, cnt), cnt)
POS_WRAP(pread, TRC_OP_pread, (int fd, void *buf, size_t n, off_t off), (fd, buf, n, off), n, off,
         0, 0)
POS_WRAP(pread64, TRC_OP_pread, (int fd, void *buf, size_t n, off64_t off), (fd, buf, n, off), n,
         off, 0, 0)
POS_WRAP(pwrite, TRC_OP_pwrite, (int fd, const void *buf, size_t n, off_t off), (fd, buf, n, off),
         n, off, 0, 0)
POS_WRAP(pwrite64, TRC_OP_pwrite, (int fd, const void *buf, size_t n, off64_t off),
         (fd, buf, n, off), n, off, 0, 0)
POS_WRAP(preadv, TRC_OP_preadv, (int fd, const struct iovec *iov, int cnt, off_t off),
         (fd, iov, cnt, off), iov_total(iov, cnt), off, cnt, 0)
POS_WRAP(preadv64, TRC_OP_preadv, (int fd, const struct iovec *iov, int cnt, off64_t off),
         (fd, iov, cnt, off), iov_total(iov, cnt), off, cnt, 0)
POS_WRAP(pwritev, TRC_OP_pwritev, (int fd, const struct iovec *iov, int cnt, off_t off),
         (fd, iov, cnt, off), iov_total(iov, cnt), off, cnt, 0)
POS_WRAP(pwritev64, TRC_OP_pwritev, (int fd, const struct iovec *iov, int cnt, off64_t off),
         (fd, iov, cnt, off), iov_total(iov, cnt), off, cnt, 0)
POS_WRAP(preadv2, TRC_OP_preadv2, (int fd, const struct iovec *iov, int cnt, off_t off, int fl),
         (fd, iov, cnt, off, fl), iov_total(iov, cnt), off, cnt, fl)
POS_WRAP(preadv64v2, TRC_OP_preadv2,
         (int fd, const struct iovec *iov, int cnt, off64_t off, int fl), (fd, iov, cnt, off, fl),
         iov_total(iov, cnt), off, cnt, fl)
POS_WRAP(pwritev2, TRC_OP_pwritev2, (int fd, const struct iovec *iov, int cnt, off_t off, int fl),
         (fd, iov, cnt, off, fl), iov_total(iov, cnt), off, cnt, fl)
POS_WRAP(pwritev64v2, TRC_OP_pwritev2,
         (int fd, const struct iovec *iov, int cnt, off64_t off, int fl), (fd, iov, cnt, off, fl),
         iov_total(iov, cnt), off, cnt, fl)

#define SEEK_BODY(realcall)                                                                        \
    trc_fd *s = trc_fd_traced(fd, TRC_FAM_POSIX);                                                  \
    if (TRC_LIKELY(!s)) {                                                                          \
        __typeof__(realcall) r_ = realcall;                                                        \
        trc_fd *u_ = trc_fd_slot(fd);                                                              \
        if (u_ && r_ >= 0)                                                                         \
            u_->pos = (int64_t)r_;                                                                 \
        return r_;                                                                                 \
    }                                                                                              \
    T0();                                                                                          \
    __typeof__(realcall) ret = realcall;                                                           \
    T1();                                                                                          \
    if (ret >= 0)                                                                                  \
        s->pos = (int64_t)ret;                                                                     \
    trc_emit_io(TRC_OP_lseek, fd, fdhash(s), t0_, t1_, (int64_t)off, 0, (int64_t)ret, whence, 0,  \
                0);                                                                                \
    TDONE();                                                                                       \
    return ret

TRC_API off_t lseek(int fd, off_t off, int whence) {
    if (!MAP(lseek))
        NOSYS(-1);
    SEEK_BODY(real_lseek(fd, off, whence));
}
TRC_API off64_t lseek64(int fd, off64_t off, int whence) {
    if (!MAP(lseek64))
        NOSYS(-1);
    SEEK_BODY(real_lseek64(fd, off, whence));
}

/* ================================================================ other fd calls */
REAL(int, fsync, (int));
REAL(int, fdatasync, (int));
REAL(int, ftruncate, (int, off_t));
REAL(int, ftruncate64, (int, off64_t));
REAL(int, posix_fadvise, (int, off_t, off_t, int));
REAL(int, posix_fadvise64, (int, off64_t, off64_t, int));
REAL(int, fchmod, (int, mode_t));
REAL(ssize_t, getdents64, (int, void *, size_t));

#define FD_SIMPLE(op, type, realcall, offset, count, a1v, a2v)                                     \
    trc_fd *s = trc_fd_traced(fd, TRC_FAM_POSIX);                                                  \
    if (TRC_LIKELY(!s))                                                                            \
        return realcall;                                                                           \
    T0();                                                                                          \
    type ret = realcall;                                                                           \
    T1();                                                                                          \
    trc_emit_io(op, fd, fdhash(s), t0_, t1_, (int64_t)(offset), (int64_t)(count), (int64_t)ret,   \
                a1v, a2v, 0);                                                                      \
    TDONE();                                                                                       \
    return ret

TRC_API int fsync(int fd) {
    if (!MAP(fsync))
        NOSYS(-1);
    FD_SIMPLE(TRC_OP_fsync, int, real_fsync(fd), -1, 0, 0, 0);
}
TRC_API int fdatasync(int fd) {
    if (!MAP(fdatasync))
        NOSYS(-1);
    FD_SIMPLE(TRC_OP_fdatasync, int, real_fdatasync(fd), -1, 0, 0, 0);
}
TRC_API int ftruncate(int fd, off_t len) {
    if (!MAP(ftruncate))
        NOSYS(-1);
    FD_SIMPLE(TRC_OP_ftruncate, int, real_ftruncate(fd, len), len, 0, 0, 0);
}
TRC_API int ftruncate64(int fd, off64_t len) {
    if (!MAP(ftruncate64))
        NOSYS(-1);
    FD_SIMPLE(TRC_OP_ftruncate, int, real_ftruncate64(fd, len), len, 0, 0, 0);
}
TRC_API int posix_fadvise(int fd, off_t off, off_t len, int adv) {
    if (!MAP(posix_fadvise))
        NOSYS(ENOSYS);
    FD_SIMPLE(TRC_OP_posix_fadvise, int, real_posix_fadvise(fd, off, len, adv), off, len, adv, 0);
}
TRC_API int posix_fadvise64(int fd, off64_t off, off64_t len, int adv) {
    if (!MAP(posix_fadvise64))
        NOSYS(ENOSYS);
    FD_SIMPLE(TRC_OP_posix_fadvise, int, real_posix_fadvise64(fd, off, len, adv), off, len, adv,
              0);
}
TRC_API int fchmod(int fd, mode_t mode) {
    if (!MAP(fchmod))
        NOSYS(-1);
    FD_SIMPLE(TRC_OP_fchmod, int, real_fchmod(fd, mode), -1, 0, 0, (int64_t)mode);
}
TRC_API ssize_t getdents64(int fd, void *buf, size_t n) {
    if (!MAP(getdents64))
        NOSYS(-1);
    FD_SIMPLE(TRC_OP_getdents64, ssize_t, real_getdents64(fd, buf, n), -1, n, 0, 0);
}

REAL(ssize_t, sendfile, (int, int, off_t *, size_t));
REAL(ssize_t, sendfile64, (int, int, off64_t *, size_t));
REAL(ssize_t, copy_file_range, (int, off64_t *, int, off64_t *, size_t, unsigned));

/* Two-descriptor copies: traced when either side is; fd/fhash name the source. */
#define COPY_BODY(op, realcall, in, out, offp, n)                                                  \
    trc_fd *si = trc_fd_traced(in, TRC_FAM_POSIX), *so = trc_fd_traced(out, TRC_FAM_POSIX);       \
    if (TRC_LIKELY(!si && !so))                                                                    \
        return realcall;                                                                           \
    int64_t off = (offp) ? (int64_t) * (offp) : (si ? si->pos : -1);                               \
    T0();                                                                                          \
    ssize_t ret = realcall;                                                                        \
    T1();                                                                                          \
    if (!(offp) && si && ret > 0 && si->pos >= 0)                                                  \
        si->pos += ret;                                                                            \
    trc_emit_io(op, in, si ? fdhash(si) : 0, t0_, t1_, off, (int64_t)(n), ret, out, 0,             \
                so ? fdhash(so) : 0);                                                              \
    TDONE();                                                                                       \
    return ret

TRC_API ssize_t sendfile(int out, int in, off_t *offp, size_t n) {
    if (!MAP(sendfile))
        NOSYS(-1);
    COPY_BODY(TRC_OP_sendfile, real_sendfile(out, in, offp, n), in, out, offp, n);
}
TRC_API ssize_t sendfile64(int out, int in, off64_t *offp, size_t n) {
    if (!MAP(sendfile64))
        NOSYS(-1);
    COPY_BODY(TRC_OP_sendfile, real_sendfile64(out, in, offp, n), in, out, offp, n);
}
TRC_API ssize_t copy_file_range(int in, off64_t *inoff, int out, off64_t *outoff, size_t n,
                                unsigned flags) {
    if (!MAP(copy_file_range))
        NOSYS(-1);
    COPY_BODY(TRC_OP_copy_file_range, real_copy_file_range(in, inoff, out, outoff, n, flags), in,
              out, inoff, n);
}

/* ================================================================ mmap */
REAL(void *, mmap, (void *, size_t, int, int, int, off_t));
REAL(void *, mmap64, (void *, size_t, int, int, int, off64_t));
REAL(int, munmap, (void *, size_t));
REAL(int, msync, (void *, size_t, int));

/* Small table of traced mappings so munmap/msync can name their file. mmap is rare enough for
 * a spin lock; entries beyond the table are simply not attributed. */
#define NMAP 256
static struct {
    uintptr_t addr;
    size_t len;
    uint64_t h;
} maps[NMAP];
static int maps_lock;

static void maps_put(void *a, size_t len, uint64_t h) {
    while (__atomic_exchange_n(&maps_lock, 1, __ATOMIC_ACQUIRE))
        ;
    for (int i = 0; i < NMAP; i++)
        if (!maps[i].addr) {
            maps[i].addr = (uintptr_t)a;
            maps[i].len = len;
            maps[i].h = h;
            break;
        }
    __atomic_store_n(&maps_lock, 0, __ATOMIC_RELEASE);
}

static uint64_t maps_find(void *a, int drop) {
    uint64_t h = 0;
    while (__atomic_exchange_n(&maps_lock, 1, __ATOMIC_ACQUIRE))
        ;
    for (int i = 0; i < NMAP; i++)
        if (maps[i].addr && (uintptr_t)a >= maps[i].addr &&
            (uintptr_t)a < maps[i].addr + maps[i].len) {
            h = maps[i].h;
            if (drop && (uintptr_t)a == maps[i].addr)
                maps[i].addr = 0;
            break;
        }
    __atomic_store_n(&maps_lock, 0, __ATOMIC_RELEASE);
    return h;
}

void trc_mmap_reset(void) {
    memset(maps, 0, sizeof maps);
    maps_lock = 0;
}

static int nmaps_live;

#define MMAP_BODY(realcall)                                                                        \
    trc_fd *s = (flags & MAP_ANONYMOUS) ? NULL : trc_fd_traced(fd, TRC_FAM_POSIX);                \
    if (TRC_LIKELY(!s))                                                                            \
        return realcall;                                                                           \
    T0();                                                                                          \
    void *ret = realcall;                                                                          \
    T1();                                                                                          \
    if (ret != MAP_FAILED) {                                                                       \
        maps_put(ret, len, fdhash(s));                                                             \
        __atomic_add_fetch(&nmaps_live, 1, __ATOMIC_RELAXED);                                      \
    }                                                                                              \
    trc_emit_io(TRC_OP_mmap, fd, fdhash(s), t0_, t1_, (int64_t)off, (int64_t)len,                 \
                ret == MAP_FAILED ? -1 : 0, prot, flags, 0);                                       \
    TDONE();                                                                                       \
    return ret

TRC_API void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    if (!MAP(mmap))
        NOSYS(MAP_FAILED);
    MMAP_BODY(real_mmap(addr, len, prot, flags, fd, off));
}
TRC_API void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off) {
    if (!MAP(mmap64))
        NOSYS(MAP_FAILED);
    MMAP_BODY(real_mmap64(addr, len, prot, flags, fd, off));
}

TRC_API int munmap(void *addr, size_t len) {
    if (!MAP(munmap))
        NOSYS(-1);
    if (!__atomic_load_n(&nmaps_live, __ATOMIC_RELAXED) || !POSIX_ON())
        return real_munmap(addr, len);
    uint64_t h = maps_find(addr, 1);
    if (!h)
        return real_munmap(addr, len);
    T0();
    int ret = real_munmap(addr, len);
    T1();
    trc_emit_io(TRC_OP_munmap, -1, h, t0_, t1_, -1, (int64_t)len, ret, 0, 0, 0);
    TDONE();
    return ret;
}

TRC_API int msync(void *addr, size_t len, int flags) {
    if (!MAP(msync))
        NOSYS(-1);
    if (!__atomic_load_n(&nmaps_live, __ATOMIC_RELAXED) || !POSIX_ON())
        return real_msync(addr, len, flags);
    uint64_t h = maps_find(addr, 0);
    if (!h)
        return real_msync(addr, len, flags);
    T0();
    int ret = real_msync(addr, len, flags);
    T1();
    trc_emit_io(TRC_OP_msync, -1, h, t0_, t1_, -1, (int64_t)len, ret, flags, 0, 0);
    TDONE();
    return ret;
}

/* ================================================================ stat family */
REAL(int, stat, (const char *, struct stat *));
REAL(int, stat64, (const char *, struct stat64 *));
REAL(int, lstat, (const char *, struct stat *));
REAL(int, lstat64, (const char *, struct stat64 *));
REAL(int, fstat, (int, struct stat *));
REAL(int, fstat64, (int, struct stat64 *));
REAL(int, fstatat, (int, const char *, struct stat *, int));
REAL(int, fstatat64, (int, const char *, struct stat64 *, int));
REAL(int, statx, (int, const char *, int, unsigned, struct statx *));
REAL(int, __xstat, (int, const char *, struct stat *));
REAL(int, __xstat64, (int, const char *, struct stat64 *));
REAL(int, __lxstat, (int, const char *, struct stat *));
REAL(int, __lxstat64, (int, const char *, struct stat64 *));
REAL(int, __fxstat, (int, int, struct stat *));
REAL(int, __fxstat64, (int, int, struct stat64 *));
REAL(int, __fxstatat, (int, int, const char *, struct stat *, int));
REAL(int, __fxstatat64, (int, int, const char *, struct stat64 *, int));

/* A path call at (dirfd, path): traced when the resolved path passes the filter. With
 * AT_EMPTY_PATH and "" the call is about dirfd itself. */
#define PATH_BODY(op, dirfd, path, realcall, fdv, a1v, a2v)                                        \
    if (!POSIX_ON())                                                                               \
        return realcall;                                                                           \
    int traced_ = 0;                                                                               \
    uint64_t h_;                                                                                   \
    trc_busy = 1;                                                                                  \
    if (!is_null(path) && !(path)[0] && (dirfd) != AT_FDCWD) {                                             \
        trc_fd *ds_ = trc_fd_slot(dirfd);                                                          \
        traced_ = ds_ && ds_->traced;                                                              \
        h_ = ds_ ? fdhash(ds_) : 0;                                                                \
    } else {                                                                                       \
        h_ = trc_path_classify(dirfd, path, &traced_, 0);                                          \
    }                                                                                              \
    if (!traced_) {                                                                                \
        trc_busy = 0;                                                                              \
        return realcall;                                                                           \
    }                                                                                              \
    uint64_t t0_ = trc_now();                                                                      \
    int ret = realcall;                                                                            \
    T1();                                                                                          \
    trc_emit_io(op, fdv, h_, t0_, t1_, -1, 0, ret, a1v, a2v, 0);                                   \
    TDONE();                                                                                       \
    return ret

TRC_API int stat(const char *p, struct stat *b) {
    if (!MAP(stat))
        NOSYS(-1);
    PATH_BODY(TRC_OP_stat, AT_FDCWD, p, real_stat(p, b), -1, 0, 0);
}
TRC_API int stat64(const char *p, struct stat64 *b) {
    if (!MAP(stat64))
        NOSYS(-1);
    PATH_BODY(TRC_OP_stat, AT_FDCWD, p, real_stat64(p, b), -1, 0, 0);
}
TRC_API int lstat(const char *p, struct stat *b) {
    if (!MAP(lstat))
        NOSYS(-1);
    PATH_BODY(TRC_OP_lstat, AT_FDCWD, p, real_lstat(p, b), -1, 0, 0);
}
TRC_API int lstat64(const char *p, struct stat64 *b) {
    if (!MAP(lstat64))
        NOSYS(-1);
    PATH_BODY(TRC_OP_lstat, AT_FDCWD, p, real_lstat64(p, b), -1, 0, 0);
}
TRC_API int fstatat(int d, const char *p, struct stat *b, int fl) {
    if (!MAP(fstatat))
        NOSYS(-1);
    PATH_BODY(TRC_OP_fstatat, d, p, real_fstatat(d, p, b, fl), d, fl, 0);
}
TRC_API int fstatat64(int d, const char *p, struct stat64 *b, int fl) {
    if (!MAP(fstatat64))
        NOSYS(-1);
    PATH_BODY(TRC_OP_fstatat, d, p, real_fstatat64(d, p, b, fl), d, fl, 0);
}
TRC_API int statx(int d, const char *p, int fl, unsigned mask, struct statx *b) {
    if (!MAP(statx))
        NOSYS(-1);
    PATH_BODY(TRC_OP_statx, d, p, real_statx(d, p, fl, mask, b), d, fl, mask);
}
TRC_API int __xstat(int v, const char *p, struct stat *b) {
    if (!MAP(__xstat))
        NOSYS(-1);
    PATH_BODY(TRC_OP_xstat, AT_FDCWD, p, real___xstat(v, p, b), -1, 0, 0);
}
TRC_API int __xstat64(int v, const char *p, struct stat64 *b) {
    if (!MAP(__xstat64))
        NOSYS(-1);
    PATH_BODY(TRC_OP_xstat, AT_FDCWD, p, real___xstat64(v, p, b), -1, 0, 0);
}
TRC_API int __lxstat(int v, const char *p, struct stat *b) {
    if (!MAP(__lxstat))
        NOSYS(-1);
    PATH_BODY(TRC_OP_lxstat, AT_FDCWD, p, real___lxstat(v, p, b), -1, 0, 0);
}
TRC_API int __lxstat64(int v, const char *p, struct stat64 *b) {
    if (!MAP(__lxstat64))
        NOSYS(-1);
    PATH_BODY(TRC_OP_lxstat, AT_FDCWD, p, real___lxstat64(v, p, b), -1, 0, 0);
}
TRC_API int __fxstatat(int v, int d, const char *p, struct stat *b, int fl) {
    if (!MAP(__fxstatat))
        NOSYS(-1);
    PATH_BODY(TRC_OP_fxstatat, d, p, real___fxstatat(v, d, p, b, fl), d, fl, 0);
}
TRC_API int __fxstatat64(int v, int d, const char *p, struct stat64 *b, int fl) {
    if (!MAP(__fxstatat64))
        NOSYS(-1);
    PATH_BODY(TRC_OP_fxstatat, d, p, real___fxstatat64(v, d, p, b, fl), d, fl, 0);
}
TRC_API int fstat(int fd, struct stat *b) {
    if (!MAP(fstat))
        NOSYS(-1);
    FD_SIMPLE(TRC_OP_fstat, int, real_fstat(fd, b), -1, 0, 0, 0);
}
TRC_API int fstat64(int fd, struct stat64 *b) {
    if (!MAP(fstat64))
        NOSYS(-1);
    FD_SIMPLE(TRC_OP_fstat, int, real_fstat64(fd, b), -1, 0, 0, 0);
}
TRC_API int __fxstat(int v, int fd, struct stat *b) {
    if (!MAP(__fxstat))
        NOSYS(-1);
    FD_SIMPLE(TRC_OP_fxstat, int, real___fxstat(v, fd, b), -1, 0, 0, 0);
}
TRC_API int __fxstat64(int v, int fd, struct stat64 *b) {
    if (!MAP(__fxstat64))
        NOSYS(-1);
    FD_SIMPLE(TRC_OP_fxstat, int, real___fxstat64(v, fd, b), -1, 0, 0, 0);
}

/* ================================================================ namespace */
REAL(int, access, (const char *, int));
REAL(int, faccessat, (int, const char *, int, int));
REAL(int, mkdir, (const char *, mode_t));
REAL(int, mkdirat, (int, const char *, mode_t));
REAL(int, rmdir, (const char *));
REAL(int, unlink, (const char *));
REAL(int, unlinkat, (int, const char *, int));
REAL(int, remove, (const char *));
REAL(int, truncate, (const char *, off_t));
REAL(int, truncate64, (const char *, off64_t));
REAL(int, symlink, (const char *, const char *));
REAL(ssize_t, readlink, (const char *, char *, size_t));
REAL(int, chmod, (const char *, mode_t));
REAL(int, chown, (const char *, uid_t, gid_t));
REAL(int, utime, (const char *, const struct utimbuf *));
REAL(int, utimensat, (int, const char *, const struct timespec[2], int));
REAL(int, mkfifo, (const char *, mode_t));

TRC_API int access(const char *p, int m) {
    if (!MAP(access))
        NOSYS(-1);
    PATH_BODY(TRC_OP_access, AT_FDCWD, p, real_access(p, m), -1, m, 0);
}
TRC_API int faccessat(int d, const char *p, int m, int fl) {
    if (!MAP(faccessat))
        NOSYS(-1);
    PATH_BODY(TRC_OP_faccessat, d, p, real_faccessat(d, p, m, fl), d, m, 0);
}
TRC_API int mkdir(const char *p, mode_t m) {
    if (!MAP(mkdir))
        NOSYS(-1);
    PATH_BODY(TRC_OP_mkdir, AT_FDCWD, p, real_mkdir(p, m), -1, 0, (int64_t)m);
}
TRC_API int mkdirat(int d, const char *p, mode_t m) {
    if (!MAP(mkdirat))
        NOSYS(-1);
    PATH_BODY(TRC_OP_mkdirat, d, p, real_mkdirat(d, p, m), d, 0, (int64_t)m);
}
TRC_API int rmdir(const char *p) {
    if (!MAP(rmdir))
        NOSYS(-1);
    PATH_BODY(TRC_OP_rmdir, AT_FDCWD, p, real_rmdir(p), -1, 0, 0);
}
TRC_API int unlink(const char *p) {
    if (!MAP(unlink))
        NOSYS(-1);
    PATH_BODY(TRC_OP_unlink, AT_FDCWD, p, real_unlink(p), -1, 0, 0);
}
TRC_API int unlinkat(int d, const char *p, int fl) {
    if (!MAP(unlinkat))
        NOSYS(-1);
    PATH_BODY(TRC_OP_unlinkat, d, p, real_unlinkat(d, p, fl), d, fl, 0);
}
TRC_API int remove(const char *p) {
    if (!MAP(remove))
        NOSYS(-1);
    PATH_BODY(TRC_OP_remove, AT_FDCWD, p, real_remove(p), -1, 0, 0);
}
TRC_API int symlink(const char *target, const char *p) {
    if (!MAP(symlink))
        NOSYS(-1);
    PATH_BODY(TRC_OP_symlink, AT_FDCWD, p, real_symlink(target, p), -1, 0, 0);
}
TRC_API ssize_t readlink(const char *p, char *buf, size_t n) {
    if (!MAP(readlink))
        NOSYS(-1);
    if (!POSIX_ON())
        return real_readlink(p, buf, n);
    int traced = 0;
    trc_busy = 1;
    uint64_t h = trc_path_classify(AT_FDCWD, p, &traced, 0);
    if (!traced) {
        trc_busy = 0;
        return real_readlink(p, buf, n);
    }
    uint64_t t0_ = trc_now();
    ssize_t ret = real_readlink(p, buf, n);
    T1();
    trc_emit_io(TRC_OP_readlink, -1, h, t0_, t1_, -1, 0, ret, 0, 0, 0);
    TDONE();
    return ret;
}
TRC_API int chmod(const char *p, mode_t m) {
    if (!MAP(chmod))
        NOSYS(-1);
    PATH_BODY(TRC_OP_chmod, AT_FDCWD, p, real_chmod(p, m), -1, 0, (int64_t)m);
}
TRC_API int chown(const char *p, uid_t u, gid_t g) {
    if (!MAP(chown))
        NOSYS(-1);
    PATH_BODY(TRC_OP_chown, AT_FDCWD, p, real_chown(p, u, g), -1, 0, 0);
}
TRC_API int utime(const char *p, const struct utimbuf *t) {
    if (!MAP(utime))
        NOSYS(-1);
    PATH_BODY(TRC_OP_utime, AT_FDCWD, p, real_utime(p, t), -1, 0, 0);
}
TRC_API int utimensat(int d, const char *p, const struct timespec t[2], int fl) {
    if (!MAP(utimensat))
        NOSYS(-1);
    if (is_null(p)) /* futimens() form: about d itself */
        return real_utimensat(d, p, t, fl);
    PATH_BODY(TRC_OP_utimensat, d, p, real_utimensat(d, p, t, fl), d, 0, 0);
}
TRC_API int mkfifo(const char *p, mode_t m) {
    if (!MAP(mkfifo))
        NOSYS(-1);
    PATH_BODY(TRC_OP_mkfifo, AT_FDCWD, p, real_mkfifo(p, m), -1, 0, (int64_t)m);
}
/* truncate and its 64-bit alias: a path call whose offset argument is the new length. */
#define TRUNC_WRAP(fn, off_type)                                                                   \
    TRC_API int fn(const char *p, off_type len) {                                                  \
        if (!MAP(fn))                                                                              \
            NOSYS(-1);                                                                             \
        if (!POSIX_ON())                                                                           \
            return real_##fn(p, len);                                                              \
        int traced = 0;                                                                            \
        trc_busy = 1;                                                                              \
        uint64_t h = trc_path_classify(AT_FDCWD, p, &traced, 0);                                   \
        trc_busy = 0;                                                                              \
        if (!traced)                                                                               \
            return real_##fn(p, len);                                                              \
        T0();                                                                                      \
        int ret = real_##fn(p, len);                                                               \
        T1();                                                                                      \
        trc_emit_io(TRC_OP_truncate, -1, h, t0_, t1_, len, 0, ret, 0, 0, 0);                       \
        TDONE();                                                                                   \
        return ret;                                                                                \
    }
TRUNC_WRAP(truncate, off_t)
TRUNC_WRAP(truncate64, off64_t)

/* Two-path calls (rename, link): traced when either path is. */
REAL(int, rename, (const char *, const char *));
REAL(int, renameat, (int, const char *, int, const char *));
REAL(int, renameat2, (int, const char *, int, const char *, unsigned));
REAL(int, link, (const char *, const char *));
REAL(int, linkat, (int, const char *, int, const char *, int));

#define TWO_PATH(op, d1, p1, d2, p2, realcall, a1v)                                                \
    if (!POSIX_ON())                                                                               \
        return realcall;                                                                           \
    int tr1 = 0, tr2 = 0;                                                                          \
    trc_busy = 1;                                                                                  \
    uint64_t h1 = trc_path_classify(d1, p1, &tr1, 0);                                              \
    uint64_t h2 = trc_path_classify(d2, p2, &tr2, 0);                                              \
    if (!tr1 && !tr2) {                                                                            \
        trc_busy = 0;                                                                              \
        return realcall;                                                                           \
    }                                                                                              \
    uint64_t t0_ = trc_now();                                                                      \
    int ret = realcall;                                                                            \
    T1();                                                                                          \
    trc_emit_io(op, -1, h1, t0_, t1_, -1, 0, ret, a1v, 0, h2);                                     \
    TDONE();                                                                                       \
    return ret

TRC_API int rename(const char *a, const char *b) {
    if (!MAP(rename))
        NOSYS(-1);
    TWO_PATH(TRC_OP_rename, AT_FDCWD, a, AT_FDCWD, b, real_rename(a, b), 0);
}
TRC_API int renameat(int da, const char *a, int db, const char *b) {
    if (!MAP(renameat))
        NOSYS(-1);
    TWO_PATH(TRC_OP_renameat, da, a, db, b, real_renameat(da, a, db, b), 0);
}
TRC_API int renameat2(int da, const char *a, int db, const char *b, unsigned fl) {
    if (!MAP(renameat2))
        NOSYS(-1);
    TWO_PATH(TRC_OP_renameat2, da, a, db, b, real_renameat2(da, a, db, b, fl), fl);
}
TRC_API int link(const char *a, const char *b) {
    if (!MAP(link))
        NOSYS(-1);
    TWO_PATH(TRC_OP_link, AT_FDCWD, a, AT_FDCWD, b, real_link(a, b), 0);
}
TRC_API int linkat(int da, const char *a, int db, const char *b, int fl) {
    if (!MAP(linkat))
        NOSYS(-1);
    TWO_PATH(TRC_OP_linkat, da, a, db, b, real_linkat(da, a, db, b, fl), fl);
}

/* ================================================================ cwd */
REAL(int, chdir, (const char *));
REAL(int, fchdir, (int));

TRC_API int chdir(const char *p) {
    if (!MAP(chdir))
        NOSYS(-1);
    if (trc_busy || !trc_g.fds)
        return real_chdir(p);
    trc_busy = 1;
    char abs[PATH_MAX];
    int ok = trc_path_resolve(AT_FDCWD, p, abs, sizeof abs) == 0;
    int traced = ok && (trc_g.active & TRC_FAM_POSIX) && trc_path_traced(abs);
    uint64_t t0_ = trc_now();
    int ret = real_chdir(p);
    T1();
    if (ret == 0) {
        char buf[PATH_MAX];
        /* Symlinks make the lexical answer differ from the kernel's; ask the kernel. */
        if (getcwd(buf, sizeof buf))
            trc_cwd_set(buf);
        else if (ok)
            trc_cwd_set(abs);
    }
    if (traced)
        trc_emit_io(TRC_OP_chdir, -1, trc_path_intern(abs), t0_, t1_, -1, 0, ret, 0, 0, 0);
    TDONE();
    return ret;
}

TRC_API int fchdir(int fd) {
    if (!MAP(fchdir))
        NOSYS(-1);
    if (trc_busy || !trc_g.fds)
        return real_fchdir(fd);
    trc_busy = 1;
    trc_fd *s = trc_fd_slot(fd);
    int traced = s && s->traced && (trc_g.active & TRC_FAM_POSIX);
    uint64_t t0_ = trc_now();
    int ret = real_fchdir(fd);
    T1();
    if (ret == 0) {
        char buf[PATH_MAX];
        if (getcwd(buf, sizeof buf))
            trc_cwd_set(buf);
    }
    if (traced)
        trc_emit_io(TRC_OP_fchdir, fd, fdhash(s), t0_, t1_, -1, 0, ret, 0, 0, 0);
    TDONE();
    return ret;
}

/* ================================================================ directories */
REAL(DIR *, opendir, (const char *));
REAL(DIR *, fdopendir, (int));
REAL(struct dirent *, readdir, (DIR *));
REAL(struct dirent64 *, readdir64, (DIR *));
REAL(int, closedir, (DIR *));

TRC_API DIR *opendir(const char *p) {
    if (!MAP(opendir))
        NOSYS(NULL);
    if (!POSIX_ON())
        return real_opendir(p);
    T0();
    DIR *d = real_opendir(p);
    T1();
    int traced = 0;
    uint64_t h = trc_path_classify(AT_FDCWD, p, &traced, 1);
    int fd = d ? dirfd(d) : -1;
    if (fd >= 0)
        trc_fd_set(fd, h, traced, 0);
    if (traced)
        trc_emit_io(TRC_OP_opendir, fd, h, t0_, t1_, -1, 0, d ? fd : -1, 0, 0, 0);
    TDONE();
    return d;
}

TRC_API DIR *fdopendir(int fd) {
    if (!MAP(fdopendir))
        NOSYS(NULL);
    trc_fd *s = trc_fd_traced(fd, TRC_FAM_POSIX);
    if (TRC_LIKELY(!s))
        return real_fdopendir(fd);
    T0();
    DIR *d = real_fdopendir(fd);
    T1();
    trc_emit_io(TRC_OP_fdopendir, fd, fdhash(s), t0_, t1_, -1, 0, d ? fd : -1, 0, 0, 0);
    TDONE();
    return d;
}

#define READDIR_BODY(type, realcall)                                                               \
    int fd = !is_null(d) ? dirfd(d) : -1;                                                          \
    trc_fd *s = trc_fd_traced(fd, TRC_FAM_POSIX);                                                  \
    if (TRC_LIKELY(!s))                                                                            \
        return realcall;                                                                           \
    T0();                                                                                          \
    type *ret = realcall;                                                                          \
    T1();                                                                                          \
    trc_emit_io(TRC_OP_readdir, fd, fdhash(s), t0_, t1_, -1, 0, ret ? 1 : 0, 0, 0, 0);            \
    TDONE();                                                                                       \
    return ret

TRC_API struct dirent *readdir(DIR *d) {
    if (!MAP(readdir))
        NOSYS(NULL);
    READDIR_BODY(struct dirent, real_readdir(d));
}
TRC_API struct dirent64 *readdir64(DIR *d) {
    if (!MAP(readdir64))
        NOSYS(NULL);
    READDIR_BODY(struct dirent64, real_readdir64(d));
}

TRC_API int closedir(DIR *d) {
    if (!MAP(closedir))
        NOSYS(-1);
    int fd = (!is_null(d) && !trc_busy) ? dirfd(d) : -1;
    trc_fd *s = trc_fd_slot(fd);
    if (!s)
        return real_closedir(d);
    int traced = s->traced && (trc_g.active & TRC_FAM_POSIX);
    uint64_t h = fdhash(s);
    trc_fd_clear(fd);
    if (!traced)
        return real_closedir(d);
    T0();
    int ret = real_closedir(d);
    T1();
    trc_emit_io(TRC_OP_closedir, fd, h, t0_, t1_, -1, 0, ret, 0, 0, 0);
    TDONE();
    return ret;
}

/* ================================================================ processes */
REAL(pid_t, fork, (void));
REAL(int, execve, (const char *, char *const[], char *const[]));
REAL(int, execvpe, (const char *, char *const[], char *const[]));
REAL(void, _exit, (int));
REAL(void, _Exit, (int));

TRC_API pid_t fork(void) {
    if (!MAP(fork))
        NOSYS(-1);
    int rec = POSIX_ON();
    uint64_t t0 = trc_now();
    pid_t p = real_fork(); /* the atfork handlers reset the child's state */
    if (p != 0 && rec) {
        int e = errno;
        trc_busy = 1;
        trc_emit_io(TRC_OP_fork, -1, 0, t0, trc_now(), -1, 0, p, 0, 0, 0);
        trc_busy = 0;
        errno = e;
    }
    return p;
}

/* vfork's child would share (and corrupt) the tracer's memory: run a real fork instead, which
 * POSIX allows since a conforming vfork child only calls exec or _exit. */
TRC_API pid_t vfork(void) { return fork(); }

/* envp without LD_PRELOAD gets ours back, so the exec'd program is traced too. */
static char **keep_env(char *const envp[]) {
    if (!trc_g.cfg.keep_env || !trc_g.ld_preload[0] || !envp)
        return NULL;
    size_t n = 0;
    for (; envp[n]; n++)
        if (!strncmp(envp[n], "LD_PRELOAD=", 11))
            return NULL;
    char **e = malloc((n + 2) * sizeof *e);
    char *v = malloc(strlen(trc_g.ld_preload) + 12);
    if (!e || !v) {
        free(e);
        free(v);
        return NULL;
    }
    strcpy(v, "LD_PRELOAD=");
    strcat(v, trc_g.ld_preload);
    for (size_t i = 0; i < n; i++)
        e[i] = envp[i];
    e[n] = v;
    e[n + 1] = NULL;
    return e;
}

static void free_env(char **e) {
    if (!e)
        return;
    size_t n = 0;
    while (e[n])
        n++;
    if (n)
        free(e[n - 1]); /* the LD_PRELOAD entry keep_env appended */
    free(e);
}

/* Records the exec, writes and closes the trace (the new image starts its own file); returns 1
 * when the caller must resume after a failed exec. */
static int before_exec(const char *path) {
    if (trc_busy || __atomic_load_n(&trc_g.state, __ATOMIC_ACQUIRE) != TRC_S_RUNNING ||
        getpid() != trc_g.pid)
        return 0;
    int e = errno;
    trc_busy = 1;
    char abs[PATH_MAX];
    uint64_t h = 0;
    if (path && strchr(path, '/') && trc_path_resolve(AT_FDCWD, path, abs, sizeof abs) == 0)
        h = trc_path_intern(abs);
    else if (path)
        h = trc_path_intern(path); /* a PATH lookup: keep the name as given */
    uint64_t t = trc_now();
    if (trc_g.active & TRC_FAM_POSIX)
        trc_emit_io(TRC_OP_exec, -1, h, t, t, -1, 0, 0, 0, 0, 0);
    trc_busy = 0;
    trc_finalize();
    errno = e;
    return 1;
}

static void after_exec_failed(const char *path, int resumed) {
    if (!resumed)
        return;
    int e = errno;
    trc_resume();
    (void)path;
    errno = e;
}

TRC_API int execve(const char *path, char *const argv[], char *const envp[]) {
    if (!MAP(execve))
        NOSYS(-1);
    int r = before_exec(path);
    char **env = r ? keep_env(envp) : NULL;
    int ret = real_execve(path, argv, env ? env : envp);
    int e = errno;
    free_env(env);
    errno = e;
    after_exec_failed(path, r);
    return ret;
}

TRC_API int execvpe(const char *file, char *const argv[], char *const envp[]) {
    if (!MAP(execvpe))
        NOSYS(-1);
    int r = before_exec(file);
    char **env = r ? keep_env(envp) : NULL;
    int ret = real_execvpe(file, argv, env ? env : envp);
    int e = errno;
    free_env(env);
    errno = e;
    after_exec_failed(file, r);
    return ret;
}

TRC_API int execv(const char *path, char *const argv[]) { return execve(path, argv, environ); }

TRC_API int execvp(const char *file, char *const argv[]) { return execvpe(file, argv, environ); }

/* The execl family: gather the variadic arguments into an argv array. */
#define GATHER_ARGV(first, argv, envp_out)                                                         \
    va_list ap;                                                                                    \
    size_t n_ = 1;                                                                                 \
    va_start(ap, first);                                                                           \
    while (va_arg(ap, const char *))                                                               \
        n_++;                                                                                      \
    va_end(ap);                                                                                    \
    char **argv = malloc((n_ + 1) * sizeof *argv);                                                 \
    if (!argv)                                                                                     \
        NOSYS(-1);                                                                                 \
    va_start(ap, first);                                                                           \
    argv[0] = (char *)(first);                                                                     \
    for (size_t i_ = 1; i_ <= n_; i_++)                                                            \
        argv[i_] = va_arg(ap, char *);                                                             \
    envp_out;                                                                                      \
    va_end(ap)

TRC_API int execl(const char *path, const char *arg, ...) {
    GATHER_ARGV(arg, argv, (void)0);
    int ret = execve(path, argv, environ);
    int e = errno;
    free(argv);
    errno = e;
    return ret;
}

TRC_API int execlp(const char *file, const char *arg, ...) {
    GATHER_ARGV(arg, argv, (void)0);
    int ret = execvpe(file, argv, environ);
    int e = errno;
    free(argv);
    errno = e;
    return ret;
}

TRC_API int execle(const char *path, const char *arg, ...) {
    char *const *envp;
    GATHER_ARGV(arg, argv, envp = va_arg(ap, char *const *));
    int ret = execve(path, argv, envp);
    int e = errno;
    free(argv);
    errno = e;
    return ret;
}

TRC_API void _exit(int status) {
    if (MAP(_exit)) {
        if (!trc_busy && __atomic_load_n(&trc_g.state, __ATOMIC_ACQUIRE) == TRC_S_RUNNING &&
            getpid() == trc_g.pid)
            trc_finalize();
        real__exit(status);
    }
    syscall(SYS_exit_group, status);
    __builtin_unreachable();
}

TRC_API void _Exit(int status) {
    if (MAP(_Exit)) {
        if (!trc_busy && __atomic_load_n(&trc_g.state, __ATOMIC_ACQUIRE) == TRC_S_RUNNING &&
            getpid() == trc_g.pid)
            trc_finalize();
        real__Exit(status);
    }
    syscall(SYS_exit_group, status);
    __builtin_unreachable();
}

/* Resolving the hot symbols at load time keeps dlsym out of the first intercepted calls. */
void trc_wrap_resolve_all(void) {
    (void)MAP(open);
    (void)MAP(open64);
    (void)MAP(openat);
    (void)MAP(close);
    (void)MAP(read);
    (void)MAP(write);
    (void)MAP(pread);
    (void)MAP(pread64);
    (void)MAP(pwrite);
    (void)MAP(pwrite64);
    (void)MAP(lseek);
    (void)MAP(lseek64);
    (void)MAP(fstat);
    (void)MAP(stat);
    (void)MAP(fork);
    (void)MAP(execve);
    (void)MAP(_exit);
    (void)MAP(dup2);
    (void)MAP(fcntl);
    (void)MAP(mmap);
    (void)MAP(munmap);
}
