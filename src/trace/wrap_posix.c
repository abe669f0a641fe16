/* wrap_posix.c: the POSIX interposers of libscaffold_trace.so. The wrappers of the common shapes
 * are generated from the call table (calls.h); the others are written below. Every wrapper has
 * one body: take the fast exit when recording is off or the descriptor/path is not traced (for
 * the data path the exported function only tests the descriptor and tail-calls libc; the timing
 * and the record live in a separate non-inlined function, so the untraced path builds no frame),
 * else time the real call, keep its errno, append one record to the thread's ring, restore errno.
 * The fd table is kept right through open/dup/fcntl/close even for untraced descriptors, and
 * chdir/fchdir keep the cached cwd right. Names of the 64-bit aliases (open64, pread64,
 * stat64...) are reported without the suffix so analyzers that match exact names (read, pread,
 * open, stat) count their bytes. */
#include "trace_int.h"

#include "calls.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

#define TRC_STRIP(...) __VA_ARGS__

/* errno = ENOSYS and the row's failure value: this libc lacks the symbol. */
static inline void set_nosys(void) { errno = ENOSYS; }

/* NULL tests through a helper: glibc marks these parameters nonnull, but callers do pass NULL
 * and the real function decides what happens. */
static int is_null(const void *p) { return p == NULL; }

static inline int is_internal_fd(int fd) {
    return fd >= 0 && (fd == trc_g.wake_fd || fd == trc_g.out_fd || fd == trc_g.done_rd ||
                       fd == trc_g.done_wr);
}

static size_t trc_iov_total(const struct iovec *iov, int n) {
    size_t t = 0;
    for (int i = 0; iov && i < n; i++)
        t += iov[i].iov_len;
    return t;
}

/* ================================================================ generated shapes */

/* Sequential read/write: the offset is the tracked position, which then advances. */
#define GEN_SEQ(ret_t, sym, params, args, fail, op, count, a1v)                                    \
    static __attribute__((noinline)) ret_t sym##_traced(trc_fd *s, TRC_STRIP params) {            \
        uint64_t t0 = trc_call_begin();                                                            \
        ret_t ret = trc_real_##sym args;                                                           \
        uint64_t t1 = trc_clock();                                                                 \
        int err = errno;                                                                           \
        int64_t pos = s->pos;                                                                      \
        if (ret > 0 && pos >= 0)                                                                   \
            s->pos = pos + ret;                                                                    \
        trc_emit_io(op, fd, trc_fd_hash(s), t0, t1, pos, (int64_t)(count), ret, a1v, 0, 0);       \
        trc_call_end(err);                                                                         \
        return ret;                                                                                \
    }                                                                                              \
    TRC_API ret_t sym params {                                                                     \
        if (TRC_UNLIKELY(!TRC_REAL_OK(sym))) {                                                     \
            set_nosys();                                                                           \
            return fail;                                                                           \
        }                                                                                          \
        trc_fd *s = trc_fd_traced(fd, TRC_FAM_POSIX);                                              \
        if (TRC_LIKELY(!s))                                                                        \
            return trc_real_##sym args;                                                            \
        return sym##_traced(s, TRC_STRIP args);                                                    \
    }

/* Positioned read/write: the offset is the argument; the position does not move. */
#define GEN_POS(ret_t, sym, params, args, fail, op, count, offset, a1v, a2v)                       \
    static __attribute__((noinline)) ret_t sym##_traced(trc_fd *s, TRC_STRIP params) {            \
        uint64_t t0 = trc_call_begin();                                                            \
        ret_t ret = trc_real_##sym args;                                                           \
        uint64_t t1 = trc_clock();                                                                 \
        int err = errno;                                                                           \
        trc_emit_io(op, fd, trc_fd_hash(s), t0, t1, (int64_t)(offset), (int64_t)(count), ret,    \
                    a1v, a2v, 0);                                                                  \
        trc_call_end(err);                                                                         \
        return ret;                                                                                \
    }                                                                                              \
    TRC_API ret_t sym params {                                                                     \
        if (TRC_UNLIKELY(!TRC_REAL_OK(sym))) {                                                     \
            set_nosys();                                                                           \
            return fail;                                                                           \
        }                                                                                          \
        trc_fd *s = trc_fd_traced(fd, TRC_FAM_POSIX);                                              \
        if (TRC_LIKELY(!s))                                                                        \
            return trc_real_##sym args;                                                            \
        return sym##_traced(s, TRC_STRIP args);                                                    \
    }

/* lseek: the result is the new position, also kept for untraced descriptors (a later open of a
 * traced path may dup them). */
#define GEN_SEEK(ret_t, sym, params, args, fail, op)                                               \
    TRC_API ret_t sym params {                                                                     \
        if (TRC_UNLIKELY(!TRC_REAL_OK(sym))) {                                                     \
            set_nosys();                                                                           \
            return fail;                                                                           \
        }                                                                                          \
        trc_fd *s = trc_fd_traced(fd, TRC_FAM_POSIX);                                              \
        if (TRC_LIKELY(!s)) {                                                                      \
            ret_t r = trc_real_##sym args;                                                         \
            trc_fd *u = trc_fd_slot(fd);                                                           \
            if (u && r >= 0)                                                                       \
                u->pos = (int64_t)r;                                                               \
            return r;                                                                              \
        }                                                                                          \
        uint64_t t0 = trc_call_begin();                                                            \
        ret_t ret = trc_real_##sym args;                                                           \
        uint64_t t1 = trc_clock();                                                                 \
        int err = errno;                                                                           \
        if (ret >= 0)                                                                              \
            s->pos = (int64_t)ret;                                                                 \
        trc_emit_io(op, fd, trc_fd_hash(s), t0, t1, (int64_t)off, 0, (int64_t)ret, whence, 0, 0); \
        trc_call_end(err);                                                                         \
        return ret;                                                                                \
    }

/* Any other call on one descriptor. */
#define GEN_FD(ret_t, sym, params, args, fail, op, offset, count, a1v, a2v)                        \
    TRC_API ret_t sym params {                                                                     \
        if (TRC_UNLIKELY(!TRC_REAL_OK(sym))) {                                                     \
            set_nosys();                                                                           \
            return fail;                                                                           \
        }                                                                                          \
        trc_fd *s = trc_fd_traced(fd, TRC_FAM_POSIX);                                              \
        if (TRC_LIKELY(!s))                                                                        \
            return trc_real_##sym args;                                                            \
        uint64_t t0 = trc_call_begin();                                                            \
        ret_t ret = trc_real_##sym args;                                                           \
        uint64_t t1 = trc_clock();                                                                 \
        int err = errno;                                                                           \
        trc_emit_io(op, fd, trc_fd_hash(s), t0, t1, (int64_t)(offset), (int64_t)(count),         \
                    (int64_t)ret, a1v, (int64_t)(a2v), 0);                                         \
        trc_call_end(err);                                                                         \
        return ret;                                                                                \
    }

/* A (dirfd, path) call, traced when the resolved path passes the filter; with an empty path and
 * a directory descriptor (AT_EMPTY_PATH) the call is about that descriptor. */
static uint64_t path_hash(int dirfd, const char *path, int *traced) {
    if (!is_null(path) && !path[0] && dirfd != AT_FDCWD) {
        trc_fd *d = trc_fd_slot(dirfd);
        *traced = d && d->traced;
        return d ? trc_fd_hash(d) : 0;
    }
    return trc_path_classify(dirfd, path, traced, 0);
}

#define GEN_PATH(ret_t, sym, params, args, fail, op, dirfd, pathv, fdv, offset, a1v, a2v)          \
    TRC_API ret_t sym params {                                                                     \
        if (TRC_UNLIKELY(!TRC_REAL_OK(sym))) {                                                     \
            set_nosys();                                                                           \
            return fail;                                                                           \
        }                                                                                          \
        if (!trc_on(TRC_FAM_POSIX))                                                                \
            return trc_real_##sym args;                                                            \
        int traced = 0;                                                                            \
        trc_busy = 1;                                                                              \
        uint64_t h = path_hash(dirfd, pathv, &traced);                                             \
        trc_busy = 0;                                                                              \
        if (!traced)                                                                               \
            return trc_real_##sym args;                                                            \
        uint64_t t0 = trc_call_begin();                                                            \
        ret_t ret = trc_real_##sym args;                                                           \
        uint64_t t1 = trc_clock();                                                                 \
        int err = errno;                                                                           \
        trc_emit_io(op, fdv, h, t0, t1, (int64_t)(offset), 0, (int64_t)ret, a1v, (int64_t)(a2v),  \
                    0);                                                                            \
        trc_call_end(err);                                                                         \
        return ret;                                                                                \
    }

/* rename, link: traced when either path is; the event names the second path's hash too. */
#define GEN_TWOPATH(ret_t, sym, params, args, fail, op, d1, p1, d2, p2, a1v)                       \
    TRC_API ret_t sym params {                                                                     \
        if (TRC_UNLIKELY(!TRC_REAL_OK(sym))) {                                                     \
            set_nosys();                                                                           \
            return fail;                                                                           \
        }                                                                                          \
        if (!trc_on(TRC_FAM_POSIX))                                                                \
            return trc_real_##sym args;                                                            \
        int tr1 = 0, tr2 = 0;                                                                      \
        trc_busy = 1;                                                                              \
        uint64_t h1 = trc_path_classify(d1, p1, &tr1, 0);                                          \
        uint64_t h2 = trc_path_classify(d2, p2, &tr2, 0);                                          \
        trc_busy = 0;                                                                              \
        if (!tr1 && !tr2)                                                                          \
            return trc_real_##sym args;                                                            \
        uint64_t t0 = trc_call_begin();                                                            \
        ret_t ret = trc_real_##sym args;                                                           \
        uint64_t t1 = trc_clock();                                                                 \
        int err = errno;                                                                           \
        trc_emit_io(op, -1, h1, t0, t1, -1, 0, ret, a1v, 0, h2);                                   \
        trc_call_end(err);                                                                         \
        return ret;                                                                                \
    }

/* Opening: the new descriptor's slot is set (traced or not: it may be a directory that openat
 * resolves against, or be dup'ed), and a traced path records the event. */
static int needs_mode(int flags) {
    return (flags & O_CREAT) || ((flags & O_TMPFILE) == O_TMPFILE);
}

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

/* The end of a traced open: bookkeeping, event, errno; returns the descriptor. */
static int open_done(int op, int dirfd, const char *path, int flags, mode_t mode, int fd,
                     uint64_t t0) {
    uint64_t t1 = trc_clock();
    int err = errno;
    after_open(op, dirfd, path, flags, (int)mode, fd, t0, t1);
    trc_call_end(err);
    return fd;
}

#define GEN_OPENV(ret_t, sym, params, args, fail, op, dirfd)                                       \
    TRC_API ret_t sym params {                                                                     \
        mode_t mode = 0;                                                                           \
        if (needs_mode(flags)) {                                                                   \
            va_list ap;                                                                            \
            va_start(ap, flags);                                                                   \
            mode = (mode_t)va_arg(ap, int);                                                        \
            va_end(ap);                                                                            \
        }                                                                                          \
        if (TRC_UNLIKELY(!TRC_REAL_OK(sym))) {                                                     \
            set_nosys();                                                                           \
            return fail;                                                                           \
        }                                                                                          \
        if (!trc_on(TRC_FAM_POSIX))                                                                \
            return trc_real_##sym args;                                                            \
        uint64_t t0 = trc_call_begin();                                                            \
        int fd = trc_real_##sym args;                                                              \
        return open_done(op, dirfd, path, flags, mode, fd, t0);                                    \
    }

#define GEN_OPEN2(ret_t, sym, params, args, fail, op, dirfd)                                       \
    TRC_API ret_t sym params {                                                                     \
        mode_t mode = 0;                                                                           \
        if (TRC_UNLIKELY(!TRC_REAL_OK(sym))) {                                                     \
            set_nosys();                                                                           \
            return fail;                                                                           \
        }                                                                                          \
        if (!trc_on(TRC_FAM_POSIX))                                                                \
            return trc_real_##sym args;                                                            \
        uint64_t t0 = trc_call_begin();                                                            \
        int fd = trc_real_##sym args;                                                              \
        return open_done(op, dirfd, path, flags, mode, fd, t0);                                    \
    }

#define GEN_CREAT(ret_t, sym, params, args, fail, op)                                              \
    TRC_API ret_t sym params {                                                                     \
        int flags = O_CREAT | O_WRONLY | O_TRUNC;                                                  \
        if (TRC_UNLIKELY(!TRC_REAL_OK(sym))) {                                                     \
            set_nosys();                                                                           \
            return fail;                                                                           \
        }                                                                                          \
        if (!trc_on(TRC_FAM_POSIX))                                                                \
            return trc_real_##sym args;                                                            \
        uint64_t t0 = trc_call_begin();                                                            \
        int fd = trc_real_##sym args;                                                              \
        return open_done(op, AT_FDCWD, path, flags, mode, fd, t0);                                 \
    }

/* Two-descriptor copies: traced when either side is; fd/fhash name the source. */
#define GEN_COPY(ret_t, sym, params, args, fail, op, in, out, offp, n)                             \
    TRC_API ret_t sym params {                                                                     \
        if (TRC_UNLIKELY(!TRC_REAL_OK(sym))) {                                                     \
            set_nosys();                                                                           \
            return fail;                                                                           \
        }                                                                                          \
        trc_fd *si = trc_fd_traced(in, TRC_FAM_POSIX), *so = trc_fd_traced(out, TRC_FAM_POSIX);   \
        if (TRC_LIKELY(!si && !so))                                                                \
            return trc_real_##sym args;                                                            \
        int64_t off = (offp) ? (int64_t) * (offp) : (si ? si->pos : -1);                           \
        uint64_t t0 = trc_call_begin();                                                            \
        ret_t ret = trc_real_##sym args;                                                           \
        uint64_t t1 = trc_clock();                                                                 \
        int err = errno;                                                                           \
        if (!(offp) && si && ret > 0 && si->pos >= 0)                                              \
            si->pos += ret;                                                                        \
        trc_emit_io(op, in, si ? trc_fd_hash(si) : 0, t0, t1, off, (int64_t)(n), ret, out, 0,     \
                    so ? trc_fd_hash(so) : 0);                                                     \
        trc_call_end(err);                                                                         \
        return ret;                                                                                \
    }

/* Small table of traced mappings so munmap/msync can name their file. mmap is rare enough for
 * a spin lock; entries beyond the table are simply not attributed. */
#define NMAP 256
static struct {
    uintptr_t addr;
    size_t len;
    uint64_t h;
} maps[NMAP];
static int maps_lock, nmaps_live;

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
    __atomic_add_fetch(&nmaps_live, 1, __ATOMIC_RELAXED);
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

#define GEN_MMAP(ret_t, sym, params, args, fail, op)                                               \
    TRC_API ret_t sym params {                                                                     \
        if (TRC_UNLIKELY(!TRC_REAL_OK(sym))) {                                                     \
            set_nosys();                                                                           \
            return fail;                                                                           \
        }                                                                                          \
        trc_fd *s = (flags & MAP_ANONYMOUS) ? NULL : trc_fd_traced(fd, TRC_FAM_POSIX);            \
        if (TRC_LIKELY(!s))                                                                        \
            return trc_real_##sym args;                                                            \
        uint64_t t0 = trc_call_begin();                                                            \
        void *ret = trc_real_##sym args;                                                           \
        uint64_t t1 = trc_clock();                                                                 \
        int err = errno;                                                                           \
        if (ret != MAP_FAILED)                                                                     \
            maps_put(ret, len, trc_fd_hash(s));                                                    \
        trc_emit_io(op, fd, trc_fd_hash(s), t0, t1, (int64_t)off, (int64_t)len,                   \
                    ret == MAP_FAILED ? -1 : 0, prot, flags, 0);                                   \
        trc_call_end(err);                                                                         \
        return ret;                                                                                \
    }

#define GEN_SPECIAL(...)
#define GEN_ROW(shape, ...) GEN_##shape(__VA_ARGS__)
TRC_POSIX_CALLS(GEN_ROW)

/* ================================================================ close, dup */
TRC_API int close(int fd) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(close))) {
        set_nosys();
        return -1;
    }
    if (trc_busy)
        return trc_real_close(fd);
    if (TRC_UNLIKELY(is_internal_fd(fd)))
        trc_fd_stolen(fd);
    trc_fd *s = trc_fd_slot(fd);
    if (!s || !__atomic_load_n(&s->traced, __ATOMIC_RELAXED) || !trc_on(TRC_FAM_POSIX)) {
        if (s && __atomic_load_n(&s->phash, __ATOMIC_RELAXED))
            trc_fd_clear(fd);
        return trc_real_close(fd);
    }
    uint64_t h = trc_fd_hash(s);
    /* Clear before closing: once closed, another thread may get this number from open(). */
    trc_fd_clear(fd);
    uint64_t t0 = trc_call_begin();
    int ret = trc_real_close(fd);
    uint64_t t1 = trc_clock();
    int err = errno;
    trc_emit_io(TRC_OP_close, fd, h, t0, t1, -1, 0, ret, 0, 0, 0);
    trc_call_end(err);
    return ret;
}

TRC_API int close_range(unsigned first, unsigned last, int flags) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(close_range))) {
        set_nosys();
        return -1;
    }
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
    return trc_real_close_range(first, last, flags);
}

/* Tracking follows the descriptor to its copy; the event names the source. */
static void dup_event(int op, int oldfd, int ret, uint64_t t0, uint64_t t1, int64_t a1) {
    if (ret >= 0)
        trc_fd_copy(oldfd, ret);
    trc_fd *s = trc_fd_slot(oldfd);
    if (s && __atomic_load_n(&s->traced, __ATOMIC_RELAXED))
        trc_emit_io(op, oldfd, trc_fd_hash(s), t0, t1, -1, 0, ret, a1, 0, 0);
}

TRC_API int dup(int fd) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(dup))) {
        set_nosys();
        return -1;
    }
    if (!trc_on(TRC_FAM_POSIX))
        return trc_real_dup(fd);
    uint64_t t0 = trc_call_begin();
    int ret = trc_real_dup(fd);
    uint64_t t1 = trc_clock();
    int err = errno;
    dup_event(TRC_OP_dup, fd, ret, t0, t1, 0);
    trc_call_end(err);
    return ret;
}

TRC_API int dup2(int oldfd, int newfd) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(dup2))) {
        set_nosys();
        return -1;
    }
    if (!trc_busy && is_internal_fd(newfd) && oldfd != newfd)
        trc_fd_stolen(newfd);
    if (!trc_on(TRC_FAM_POSIX))
        return trc_real_dup2(oldfd, newfd);
    uint64_t t0 = trc_call_begin();
    int ret = trc_real_dup2(oldfd, newfd);
    uint64_t t1 = trc_clock();
    int err = errno;
    if (ret >= 0 && oldfd != newfd)
        dup_event(TRC_OP_dup2, oldfd, ret, t0, t1, 0);
    trc_call_end(err);
    return ret;
}

TRC_API int dup3(int oldfd, int newfd, int flags) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(dup3))) {
        set_nosys();
        return -1;
    }
    if (!trc_busy && is_internal_fd(newfd) && oldfd != newfd)
        trc_fd_stolen(newfd);
    if (!trc_on(TRC_FAM_POSIX))
        return trc_real_dup3(oldfd, newfd, flags);
    uint64_t t0 = trc_call_begin();
    int ret = trc_real_dup3(oldfd, newfd, flags);
    uint64_t t1 = trc_clock();
    int err = errno;
    dup_event(TRC_OP_dup3, oldfd, ret, t0, t1, flags);
    trc_call_end(err);
    return ret;
}

/* fcntl's third argument is an int or a pointer; on the supported ABIs (x86-64, aarch64) passing
 * it on as an unsigned long is exact for both. */
static int fcntl_common(int (*real)(int, int, ...), int fd, int cmd, unsigned long arg) {
    trc_fd *s = trc_fd_traced(fd, TRC_FAM_POSIX);
    int isdup = cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC;
    if (!s && !(isdup && !trc_busy && trc_g.fds))
        return real(fd, cmd, arg);
    if (!s) { /* untraced dup: the new descriptor's slot must not keep stale data */
        int ret = real(fd, cmd, arg);
        if (ret >= 0)
            trc_fd_copy(fd, ret);
        return ret;
    }
    uint64_t t0 = trc_call_begin();
    int ret = real(fd, cmd, arg);
    uint64_t t1 = trc_clock();
    int err = errno;
    if (isdup && ret >= 0)
        trc_fd_copy(fd, ret);
    trc_emit_io(TRC_OP_fcntl, fd, trc_fd_hash(s), t0, t1, -1, 0, ret, cmd, 0, 0);
    trc_call_end(err);
    return ret;
}

TRC_API int fcntl(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    unsigned long arg = va_arg(ap, unsigned long);
    va_end(ap);
    if (TRC_UNLIKELY(!TRC_REAL_OK(fcntl))) {
        set_nosys();
        return -1;
    }
    return fcntl_common(trc_real_fcntl, fd, cmd, arg);
}

TRC_API int fcntl64(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    unsigned long arg = va_arg(ap, unsigned long);
    va_end(ap);
    if (TRC_UNLIKELY(!TRC_REAL_OK(fcntl64))) {
        set_nosys();
        return -1;
    }
    return fcntl_common(trc_real_fcntl64, fd, cmd, arg);
}

/* ================================================================ mappings */
/* munmap/msync: traced when the address lies in a traced mapping. */
static uint64_t mapped_file(void *addr, int drop) {
    if (!__atomic_load_n(&nmaps_live, __ATOMIC_RELAXED) || !trc_on(TRC_FAM_POSIX))
        return 0;
    return maps_find(addr, drop);
}

TRC_API int munmap(void *addr, size_t len) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(munmap))) {
        set_nosys();
        return -1;
    }
    uint64_t h = mapped_file(addr, 1);
    if (!h)
        return trc_real_munmap(addr, len);
    uint64_t t0 = trc_call_begin();
    int ret = trc_real_munmap(addr, len);
    uint64_t t1 = trc_clock();
    int err = errno;
    trc_emit_io(TRC_OP_munmap, -1, h, t0, t1, -1, (int64_t)len, ret, 0, 0, 0);
    trc_call_end(err);
    return ret;
}

TRC_API int msync(void *addr, size_t len, int flags) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(msync))) {
        set_nosys();
        return -1;
    }
    uint64_t h = mapped_file(addr, 0);
    if (!h)
        return trc_real_msync(addr, len, flags);
    uint64_t t0 = trc_call_begin();
    int ret = trc_real_msync(addr, len, flags);
    uint64_t t1 = trc_clock();
    int err = errno;
    trc_emit_io(TRC_OP_msync, -1, h, t0, t1, -1, (int64_t)len, ret, flags, 0, 0);
    trc_call_end(err);
    return ret;
}

TRC_API int utimensat(int d, const char *path, const struct timespec tm[2], int fl) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(utimensat))) {
        set_nosys();
        return -1;
    }
    int traced = 0;
    uint64_t h = 0;
    /* A NULL path is the futimens() form, about d itself: not a path call. */
    if (!is_null(path) && trc_on(TRC_FAM_POSIX)) {
        trc_busy = 1;
        h = path_hash(d, path, &traced);
        trc_busy = 0;
    }
    if (!traced)
        return trc_real_utimensat(d, path, tm, fl);
    uint64_t t0 = trc_call_begin();
    int ret = trc_real_utimensat(d, path, tm, fl);
    uint64_t t1 = trc_clock();
    int err = errno;
    trc_emit_io(TRC_OP_utimensat, d, h, t0, t1, -1, 0, ret, 0, 0, 0);
    trc_call_end(err);
    return ret;
}

/* ================================================================ cwd */
/* After a successful chdir/fchdir the kernel's answer becomes the cached cwd (symlinks make the
 * lexical answer differ). */
static void refresh_cwd(const char *fallback) {
    char buf[PATH_MAX];
    if (syscall(SYS_getcwd, buf, sizeof buf) > 0)
        trc_cwd_set(buf);
    else if (fallback)
        trc_cwd_set(fallback);
}

TRC_API int chdir(const char *path) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(chdir))) {
        set_nosys();
        return -1;
    }
    if (trc_busy || !trc_g.fds)
        return trc_real_chdir(path);
    trc_busy = 1;
    char abs[PATH_MAX];
    int ok = trc_path_resolve(AT_FDCWD, path, abs, sizeof abs) == 0;
    int traced = ok && (trc_g.active & TRC_FAM_POSIX) && trc_path_traced(abs);
    uint64_t t0 = trc_clock();
    int ret = trc_real_chdir(path);
    uint64_t t1 = trc_clock();
    int err = errno;
    if (ret == 0)
        refresh_cwd(ok ? abs : NULL);
    if (traced)
        trc_emit_io(TRC_OP_chdir, -1, trc_path_intern(abs), t0, t1, -1, 0, ret, 0, 0, 0);
    trc_call_end(err);
    return ret;
}

TRC_API int fchdir(int fd) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(fchdir))) {
        set_nosys();
        return -1;
    }
    if (trc_busy || !trc_g.fds)
        return trc_real_fchdir(fd);
    trc_fd *s = trc_fd_slot(fd);
    int traced = s && s->traced && (trc_g.active & TRC_FAM_POSIX);
    uint64_t t0 = trc_call_begin();
    int ret = trc_real_fchdir(fd);
    uint64_t t1 = trc_clock();
    int err = errno;
    if (ret == 0)
        refresh_cwd(NULL);
    if (traced)
        trc_emit_io(TRC_OP_fchdir, fd, trc_fd_hash(s), t0, t1, -1, 0, ret, 0, 0, 0);
    trc_call_end(err);
    return ret;
}

/* ================================================================ directories */
TRC_API DIR *opendir(const char *path) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(opendir))) {
        set_nosys();
        return NULL;
    }
    if (!trc_on(TRC_FAM_POSIX))
        return trc_real_opendir(path);
    uint64_t t0 = trc_call_begin();
    DIR *d = trc_real_opendir(path);
    uint64_t t1 = trc_clock();
    int err = errno;
    int traced = 0;
    uint64_t h = trc_path_classify(AT_FDCWD, path, &traced, 1);
    int fd = d ? dirfd(d) : -1;
    if (fd >= 0)
        trc_fd_set(fd, h, traced, 0);
    if (traced)
        trc_emit_io(TRC_OP_opendir, fd, h, t0, t1, -1, 0, d ? fd : -1, 0, 0, 0);
    trc_call_end(err);
    return d;
}

TRC_API DIR *fdopendir(int fd) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(fdopendir))) {
        set_nosys();
        return NULL;
    }
    trc_fd *s = trc_fd_traced(fd, TRC_FAM_POSIX);
    if (TRC_LIKELY(!s))
        return trc_real_fdopendir(fd);
    uint64_t t0 = trc_call_begin();
    DIR *d = trc_real_fdopendir(fd);
    uint64_t t1 = trc_clock();
    int err = errno;
    trc_emit_io(TRC_OP_fdopendir, fd, trc_fd_hash(s), t0, t1, -1, 0, d ? fd : -1, 0, 0, 0);
    trc_call_end(err);
    return d;
}

/* readdir and readdir64: one body, the entry type differs. */
static trc_fd *dir_traced(DIR *d, int *fd) {
    *fd = !is_null(d) ? dirfd(d) : -1;
    return trc_fd_traced(*fd, TRC_FAM_POSIX);
}

static void readdir_event(int fd, trc_fd *s, uint64_t t0, const void *ret) {
    uint64_t t1 = trc_clock();
    int err = errno;
    trc_emit_io(TRC_OP_readdir, fd, trc_fd_hash(s), t0, t1, -1, 0, ret ? 1 : 0, 0, 0, 0);
    trc_call_end(err);
}

TRC_API struct dirent *readdir(DIR *d) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(readdir))) {
        set_nosys();
        return NULL;
    }
    int fd;
    trc_fd *s = dir_traced(d, &fd);
    if (TRC_LIKELY(!s))
        return trc_real_readdir(d);
    uint64_t t0 = trc_call_begin();
    struct dirent *ret = trc_real_readdir(d);
    readdir_event(fd, s, t0, ret);
    return ret;
}

TRC_API struct dirent64 *readdir64(DIR *d) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(readdir64))) {
        set_nosys();
        return NULL;
    }
    int fd;
    trc_fd *s = dir_traced(d, &fd);
    if (TRC_LIKELY(!s))
        return trc_real_readdir64(d);
    uint64_t t0 = trc_call_begin();
    struct dirent64 *ret = trc_real_readdir64(d);
    readdir_event(fd, s, t0, ret);
    return ret;
}

TRC_API int closedir(DIR *d) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(closedir))) {
        set_nosys();
        return -1;
    }
    int fd = (!is_null(d) && !trc_busy) ? dirfd(d) : -1;
    trc_fd *s = trc_fd_slot(fd);
    if (!s)
        return trc_real_closedir(d);
    int traced = s->traced && (trc_g.active & TRC_FAM_POSIX);
    uint64_t h = trc_fd_hash(s);
    trc_fd_clear(fd);
    if (!traced)
        return trc_real_closedir(d);
    uint64_t t0 = trc_call_begin();
    int ret = trc_real_closedir(d);
    uint64_t t1 = trc_clock();
    int err = errno;
    trc_emit_io(TRC_OP_closedir, fd, h, t0, t1, -1, 0, ret, 0, 0, 0);
    trc_call_end(err);
    return ret;
}

/* ================================================================ processes */
TRC_API pid_t fork(void) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(fork))) {
        set_nosys();
        return -1;
    }
    int rec = trc_on(TRC_FAM_POSIX);
    uint64_t t0 = trc_clock();
    pid_t p = trc_real_fork(); /* the atfork handlers reset the child's state */
    if (p != 0 && rec) {
        int err = errno;
        trc_busy = 1;
        trc_emit_io(TRC_OP_fork, -1, 0, t0, trc_clock(), -1, 0, p, 0, 0, 0);
        trc_call_end(err);
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
    uint64_t t = trc_clock();
    if (trc_g.active & TRC_FAM_POSIX)
        trc_emit_io(TRC_OP_exec, -1, h, t, t, -1, 0, 0, 0, 0, 0);
    trc_busy = 0;
    trc_finalize();
    errno = e;
    return 1;
}

/* exec with the tracer's environment kept; resumes tracing when the exec fails. */
static int exec_common(int (*real)(const char *, char *const[], char *const[]), const char *path,
                       char *const argv[], char *const envp[]) {
    int r = before_exec(path);
    char **env = r ? keep_env(envp) : NULL;
    int ret = real(path, argv, env ? env : envp);
    int e = errno;
    free_env(env);
    if (r)
        trc_resume();
    errno = e;
    return ret;
}

TRC_API int execve(const char *path, char *const argv[], char *const envp[]) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(execve))) {
        set_nosys();
        return -1;
    }
    return exec_common(trc_real_execve, path, argv, envp);
}

TRC_API int execvpe(const char *file, char *const argv[], char *const envp[]) {
    if (TRC_UNLIKELY(!TRC_REAL_OK(execvpe))) {
        set_nosys();
        return -1;
    }
    return exec_common(trc_real_execvpe, file, argv, envp);
}

TRC_API int execv(const char *path, char *const argv[]) { return execve(path, argv, environ); }

TRC_API int execvp(const char *file, char *const argv[]) { return execvpe(file, argv, environ); }

/* The execl family: the variadic arguments gathered into an argv array (malloc'ed). */
static char **gather_argv(const char *first, va_list ap, va_list ap2) {
    size_t n = 1;
    while (va_arg(ap, const char *))
        n++;
    char **argv = malloc((n + 1) * sizeof *argv);
    if (!argv)
        return NULL;
    argv[0] = (char *)first;
    for (size_t i = 1; i <= n; i++)
        argv[i] = va_arg(ap2, char *);
    return argv;
}

TRC_API int execl(const char *path, const char *arg, ...) {
    va_list ap, ap2;
    va_start(ap, arg);
    va_start(ap2, arg);
    char **argv = gather_argv(arg, ap, ap2);
    va_end(ap);
    va_end(ap2);
    if (!argv)
        return -1;
    int ret = execve(path, argv, environ);
    int e = errno;
    free(argv);
    errno = e;
    return ret;
}

TRC_API int execlp(const char *file, const char *arg, ...) {
    va_list ap, ap2;
    va_start(ap, arg);
    va_start(ap2, arg);
    char **argv = gather_argv(arg, ap, ap2);
    va_end(ap);
    va_end(ap2);
    if (!argv)
        return -1;
    int ret = execvpe(file, argv, environ);
    int e = errno;
    free(argv);
    errno = e;
    return ret;
}

TRC_API int execle(const char *path, const char *arg, ...) {
    va_list ap, ap2;
    va_start(ap, arg);
    va_start(ap2, arg);
    char **argv = gather_argv(arg, ap, ap2);
    char *const *envp = va_arg(ap2, char *const *); /* after the NULL that ends argv */
    va_end(ap);
    va_end(ap2);
    if (!argv)
        return -1;
    int ret = execve(path, argv, envp);
    int e = errno;
    free(argv);
    errno = e;
    return ret;
}

/* _exit/_Exit skip the destructor: the final member is written here. */
static void final_flush_before_exit(void) {
    if (!trc_busy && __atomic_load_n(&trc_g.state, __ATOMIC_ACQUIRE) == TRC_S_RUNNING &&
        getpid() == trc_g.pid)
        trc_finalize();
}

TRC_API void _exit(int status) {
    if (TRC_REAL_OK(_exit)) {
        final_flush_before_exit();
        trc_real__exit(status);
    }
    syscall(SYS_exit_group, status);
    __builtin_unreachable();
}

TRC_API void _Exit(int status) {
    if (TRC_REAL_OK(_Exit)) {
        final_flush_before_exit();
        trc_real__Exit(status);
    }
    syscall(SYS_exit_group, status);
    __builtin_unreachable();
}
