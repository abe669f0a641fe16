/* calls.h: every libc symbol the tracer intercepts, once. Each row gives the wrapper's shape, the
 * return type, the symbol, its parameters, the arguments passed on to the real function, the
 * value returned (with errno ENOSYS) when this libc lacks the symbol, then the shape's own
 * columns (the event op from TRC_OPS, and the expressions for the event's args).
 *
 * Two things are generated from this table: the pointers to the real functions with their lazy
 * resolver (real.c, declared here as trc_real_<symbol>), and the wrappers of every shape but
 * SPECIAL (wrap_posix.c, wrap_stdio.c); SPECIAL rows are written by hand next to the generated
 * ones. Shapes (the parameters the generated code relies on are named fd, path, fp, off, ...):
 *   SEQ     fd read/write at the tracked position:   op, count, a1
 *   POS     fd read/write at an explicit offset:     op, count, offset, a1, a2
 *   SEEK    lseek (fd, off, whence)                  op
 *   FD      other descriptor call:                   op, offset, count, a1, a2
 *   PATH    (dirfd, path) call:                      op, dirfd, path, fd, offset, a1, a2
 *   TWOPATH rename/link (traced if either path is):  op, dirfd1, path1, dirfd2, path2, a1
 *   OPENV   open with a variadic mode:               op, dirfd
 *   OPEN2   open without mode (__open_2):            op, dirfd
 *   CREAT   creat (path, mode):                      op
 *   COPY    sendfile/copy_file_range:                op, in fd, out fd, offset pointer, count
 *   MMAP    mmap (addr, len, prot, flags, fd, off):  op
 *   FOPEN   fopen (path, mode):                      op
 *   SCLOSE  fclose/pclose (fp):                      op
 *   FRW     fread/fwrite (p, size, n, fp):           op
 *   SONE    one-item stream call (fp):               op, success condition, position step
 *   SCALL   other stream call (fp):                  op, resync condition, offset, a1, a2
 *   SVOID   stream call returning nothing (fp):      op */
#ifndef SCAFFOLD_TRACE_CALLS_H
#define SCAFFOLD_TRACE_CALLS_H

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
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
int __isoc99_fscanf(FILE *fp, const char *fmt, ...);
int __isoc99_vfscanf(FILE *fp, const char *fmt, va_list ap);

#define TRC_POSIX_CALLS(X)                                                                         \
    X(OPENV, int, open, (const char *path, int flags, ...), (path, flags, mode), -1, TRC_OP_open,   \
      AT_FDCWD)                                                                                     \
    X(OPENV, int, open64, (const char *path, int flags, ...), (path, flags, mode), -1,             \
      TRC_OP_open, AT_FDCWD)                                                                        \
    X(OPENV, int, openat, (int dirfd, const char *path, int flags, ...), (dirfd, path, flags, mode),\
      -1, TRC_OP_openat, dirfd)                                                                     \
    X(OPENV, int, openat64, (int dirfd, const char *path, int flags, ...),                         \
      (dirfd, path, flags, mode), -1, TRC_OP_openat, dirfd)                                         \
    X(CREAT, int, creat, (const char *path, mode_t mode), (path, mode), -1, TRC_OP_creat)           \
    X(CREAT, int, creat64, (const char *path, mode_t mode), (path, mode), -1, TRC_OP_creat)         \
    X(OPEN2, int, __open_2, (const char *path, int flags), (path, flags), -1, TRC_OP_open, AT_FDCWD)\
    X(OPEN2, int, __open64_2, (const char *path, int flags), (path, flags), -1, TRC_OP_open,        \
      AT_FDCWD)                                                                                     \
    X(OPEN2, int, __openat_2, (int dirfd, const char *path, int flags), (dirfd, path, flags), -1,  \
      TRC_OP_openat, dirfd)                                                                         \
    X(OPEN2, int, __openat64_2, (int dirfd, const char *path, int flags), (dirfd, path, flags),    \
      -1, TRC_OP_openat, dirfd)                                                                     \
    X(SPECIAL, int, close, (int fd), (fd), -1, 0)                                                   \
    X(SPECIAL, int, close_range, (unsigned first, unsigned last, int flags), (first, last, flags),  \
      -1, 0)                                                                                        \
    X(SPECIAL, int, dup, (int fd), (fd), -1, 0)                                                     \
    X(SPECIAL, int, dup2, (int oldfd, int newfd), (oldfd, newfd), -1, 0)                            \
    X(SPECIAL, int, dup3, (int oldfd, int newfd, int flags), (oldfd, newfd, flags), -1, 0)          \
    X(SPECIAL, int, fcntl, (int fd, int cmd, ...), (fd, cmd, arg), -1, 0)                           \
    X(SPECIAL, int, fcntl64, (int fd, int cmd, ...), (fd, cmd, arg), -1, 0)                         \
    X(SEQ, ssize_t, read, (int fd, void *buf, size_t n), (fd, buf, n), -1, TRC_OP_read, n, 0)       \
    X(SEQ, ssize_t, write, (int fd, const void *buf, size_t n), (fd, buf, n), -1, TRC_OP_write, n,  \
      0)                                                                                            \
    X(SEQ, ssize_t, readv, (int fd, const struct iovec *iov, int cnt), (fd, iov, cnt), -1,          \
      TRC_OP_readv, trc_iov_total(iov, cnt), cnt)                                                   \
    X(SEQ, ssize_t, writev, (int fd, const struct iovec *iov, int cnt), (fd, iov, cnt), -1,         \
      TRC_OP_writev, trc_iov_total(iov, cnt), cnt)                                                  \
    X(POS, ssize_t, pread, (int fd, void *buf, size_t n, off_t off), (fd, buf, n, off), -1,         \
      TRC_OP_pread, n, off, 0, 0)                                                                   \
    X(POS, ssize_t, pread64, (int fd, void *buf, size_t n, off64_t off), (fd, buf, n, off), -1,     \
      TRC_OP_pread, n, off, 0, 0)                                                                   \
    X(POS, ssize_t, pwrite, (int fd, const void *buf, size_t n, off_t off), (fd, buf, n, off), -1,  \
      TRC_OP_pwrite, n, off, 0, 0)                                                                  \
    X(POS, ssize_t, pwrite64, (int fd, const void *buf, size_t n, off64_t off), (fd, buf, n, off),  \
      -1, TRC_OP_pwrite, n, off, 0, 0)                                                              \
    X(POS, ssize_t, preadv, (int fd, const struct iovec *iov, int cnt, off_t off),                  \
      (fd, iov, cnt, off), -1, TRC_OP_preadv, trc_iov_total(iov, cnt), off, cnt, 0)                 \
    X(POS, ssize_t, preadv64, (int fd, const struct iovec *iov, int cnt, off64_t off),              \
      (fd, iov, cnt, off), -1, TRC_OP_preadv, trc_iov_total(iov, cnt), off, cnt, 0)                 \
    X(POS, ssize_t, pwritev, (int fd, const struct iovec *iov, int cnt, off_t off),                 \
      (fd, iov, cnt, off), -1, TRC_OP_pwritev, trc_iov_total(iov, cnt), off, cnt, 0)                \
    X(POS, ssize_t, pwritev64, (int fd, const struct iovec *iov, int cnt, off64_t off),             \
      (fd, iov, cnt, off), -1, TRC_OP_pwritev, trc_iov_total(iov, cnt), off, cnt, 0)                \
    X(POS, ssize_t, preadv2, (int fd, const struct iovec *iov, int cnt, off_t off, int fl),         \
      (fd, iov, cnt, off, fl), -1, TRC_OP_preadv2, trc_iov_total(iov, cnt), off, cnt, fl)           \
    X(POS, ssize_t, preadv64v2, (int fd, const struct iovec *iov, int cnt, off64_t off, int fl),    \
      (fd, iov, cnt, off, fl), -1, TRC_OP_preadv2, trc_iov_total(iov, cnt), off, cnt, fl)           \
    X(POS, ssize_t, pwritev2, (int fd, const struct iovec *iov, int cnt, off_t off, int fl),        \
      (fd, iov, cnt, off, fl), -1, TRC_OP_pwritev2, trc_iov_total(iov, cnt), off, cnt, fl)          \
    X(POS, ssize_t, pwritev64v2, (int fd, const struct iovec *iov, int cnt, off64_t off, int fl),   \
      (fd, iov, cnt, off, fl), -1, TRC_OP_pwritev2, trc_iov_total(iov, cnt), off, cnt, fl)          \
    X(SEEK, off_t, lseek, (int fd, off_t off, int whence), (fd, off, whence), -1, TRC_OP_lseek)     \
    X(SEEK, off64_t, lseek64, (int fd, off64_t off, int whence), (fd, off, whence), -1,             \
      TRC_OP_lseek)                                                                                 \
    X(FD, int, fsync, (int fd), (fd), -1, TRC_OP_fsync, -1, 0, 0, 0)                                \
    X(FD, int, fdatasync, (int fd), (fd), -1, TRC_OP_fdatasync, -1, 0, 0, 0)                        \
    X(FD, int, ftruncate, (int fd, off_t len), (fd, len), -1, TRC_OP_ftruncate, len, 0, 0, 0)       \
    X(FD, int, ftruncate64, (int fd, off64_t len), (fd, len), -1, TRC_OP_ftruncate, len, 0, 0, 0)   \
    X(FD, int, posix_fadvise, (int fd, off_t off, off_t len, int adv), (fd, off, len, adv), ENOSYS, \
      TRC_OP_posix_fadvise, off, len, adv, 0)                                                       \
    X(FD, int, posix_fadvise64, (int fd, off64_t off, off64_t len, int adv), (fd, off, len, adv),   \
      ENOSYS, TRC_OP_posix_fadvise, off, len, adv, 0)                                               \
    X(FD, int, fchmod, (int fd, mode_t mode), (fd, mode), -1, TRC_OP_fchmod, -1, 0, 0, mode)        \
    X(FD, ssize_t, getdents64, (int fd, void *buf, size_t n), (fd, buf, n), -1, TRC_OP_getdents64,  \
      -1, n, 0, 0)                                                                                  \
    X(FD, int, fstat, (int fd, struct stat *b), (fd, b), -1, TRC_OP_fstat, -1, 0, 0, 0)             \
    X(FD, int, fstat64, (int fd, struct stat64 *b), (fd, b), -1, TRC_OP_fstat, -1, 0, 0, 0)         \
    X(FD, int, __fxstat, (int v, int fd, struct stat *b), (v, fd, b), -1, TRC_OP_fxstat, -1, 0, 0,  \
      0)                                                                                            \
    X(FD, int, __fxstat64, (int v, int fd, struct stat64 *b), (v, fd, b), -1, TRC_OP_fxstat, -1, 0, \
      0, 0)                                                                                         \
    X(COPY, ssize_t, sendfile, (int out, int in, off_t *offp, size_t n), (out, in, offp, n), -1,    \
      TRC_OP_sendfile, in, out, offp, n)                                                            \
    X(COPY, ssize_t, sendfile64, (int out, int in, off64_t *offp, size_t n), (out, in, offp, n),    \
      -1, TRC_OP_sendfile, in, out, offp, n)                                                        \
    X(COPY, ssize_t, copy_file_range,                                                               \
      (int in, off64_t *inoff, int out, off64_t *outoff, size_t n, unsigned flags),                 \
      (in, inoff, out, outoff, n, flags), -1, TRC_OP_copy_file_range, in, out, inoff, n)            \
    X(MMAP, void *, mmap, (void *addr, size_t len, int prot, int flags, int fd, off_t off),         \
      (addr, len, prot, flags, fd, off), MAP_FAILED, TRC_OP_mmap)                                   \
    X(MMAP, void *, mmap64, (void *addr, size_t len, int prot, int flags, int fd, off64_t off),     \
      (addr, len, prot, flags, fd, off), MAP_FAILED, TRC_OP_mmap)                                   \
    X(SPECIAL, int, munmap, (void *addr, size_t len), (addr, len), -1, 0)                           \
    X(SPECIAL, int, msync, (void *addr, size_t len, int flags), (addr, len, flags), -1, 0)          \
    X(PATH, int, stat, (const char *path, struct stat *b), (path, b), -1, TRC_OP_stat, AT_FDCWD,    \
      path, -1, -1, 0, 0)                                                                           \
    X(PATH, int, stat64, (const char *path, struct stat64 *b), (path, b), -1, TRC_OP_stat,          \
      AT_FDCWD, path, -1, -1, 0, 0)                                                                 \
    X(PATH, int, lstat, (const char *path, struct stat *b), (path, b), -1, TRC_OP_lstat, AT_FDCWD,  \
      path, -1, -1, 0, 0)                                                                           \
    X(PATH, int, lstat64, (const char *path, struct stat64 *b), (path, b), -1, TRC_OP_lstat,        \
      AT_FDCWD, path, -1, -1, 0, 0)                                                                 \
    X(PATH, int, fstatat, (int d, const char *path, struct stat *b, int fl), (d, path, b, fl), -1,  \
      TRC_OP_fstatat, d, path, d, -1, fl, 0)                                                        \
    X(PATH, int, fstatat64, (int d, const char *path, struct stat64 *b, int fl),                    \
      (d, path, b, fl), -1, TRC_OP_fstatat, d, path, d, -1, fl, 0)                                  \
    X(PATH, int, statx, (int d, const char *path, int fl, unsigned mask, struct statx *b),          \
      (d, path, fl, mask, b), -1, TRC_OP_statx, d, path, d, -1, fl, mask)                           \
    X(PATH, int, __xstat, (int v, const char *path, struct stat *b), (v, path, b), -1,              \
      TRC_OP_xstat, AT_FDCWD, path, -1, -1, 0, 0)                                                   \
    X(PATH, int, __xstat64, (int v, const char *path, struct stat64 *b), (v, path, b), -1,          \
      TRC_OP_xstat, AT_FDCWD, path, -1, -1, 0, 0)                                                   \
    X(PATH, int, __lxstat, (int v, const char *path, struct stat *b), (v, path, b), -1,             \
      TRC_OP_lxstat, AT_FDCWD, path, -1, -1, 0, 0)                                                  \
    X(PATH, int, __lxstat64, (int v, const char *path, struct stat64 *b), (v, path, b), -1,         \
      TRC_OP_lxstat, AT_FDCWD, path, -1, -1, 0, 0)                                                  \
    X(PATH, int, __fxstatat, (int v, int d, const char *path, struct stat *b, int fl),              \
      (v, d, path, b, fl), -1, TRC_OP_fxstatat, d, path, d, -1, fl, 0)                              \
    X(PATH, int, __fxstatat64, (int v, int d, const char *path, struct stat64 *b, int fl),          \
      (v, d, path, b, fl), -1, TRC_OP_fxstatat, d, path, d, -1, fl, 0)                              \
    X(PATH, int, access, (const char *path, int m), (path, m), -1, TRC_OP_access, AT_FDCWD, path,   \
      -1, -1, m, 0)                                                                                 \
    X(PATH, int, faccessat, (int d, const char *path, int m, int fl), (d, path, m, fl), -1,         \
      TRC_OP_faccessat, d, path, d, -1, m, 0)                                                       \
    X(PATH, int, mkdir, (const char *path, mode_t m), (path, m), -1, TRC_OP_mkdir, AT_FDCWD, path,  \
      -1, -1, 0, m)                                                                                 \
    X(PATH, int, mkdirat, (int d, const char *path, mode_t m), (d, path, m), -1, TRC_OP_mkdirat, d, \
      path, d, -1, 0, m)                                                                            \
    X(PATH, int, rmdir, (const char *path), (path), -1, TRC_OP_rmdir, AT_FDCWD, path, -1, -1, 0, 0) \
    X(PATH, int, unlink, (const char *path), (path), -1, TRC_OP_unlink, AT_FDCWD, path, -1, -1, 0,  \
      0)                                                                                            \
    X(PATH, int, unlinkat, (int d, const char *path, int fl), (d, path, fl), -1, TRC_OP_unlinkat,   \
      d, path, d, -1, fl, 0)                                                                        \
    X(PATH, int, remove, (const char *path), (path), -1, TRC_OP_remove, AT_FDCWD, path, -1, -1, 0,  \
      0)                                                                                            \
    X(PATH, int, symlink, (const char *target, const char *path), (target, path), -1,               \
      TRC_OP_symlink, AT_FDCWD, path, -1, -1, 0, 0)                                                 \
    X(PATH, ssize_t, readlink, (const char *path, char *buf, size_t n), (path, buf, n), -1,         \
      TRC_OP_readlink, AT_FDCWD, path, -1, -1, 0, 0)                                                \
    X(PATH, int, chmod, (const char *path, mode_t m), (path, m), -1, TRC_OP_chmod, AT_FDCWD, path,  \
      -1, -1, 0, m)                                                                                 \
    X(PATH, int, chown, (const char *path, uid_t u, gid_t g), (path, u, g), -1, TRC_OP_chown,       \
      AT_FDCWD, path, -1, -1, 0, 0)                                                                 \
    X(PATH, int, utime, (const char *path, const struct utimbuf *tm), (path, tm), -1, TRC_OP_utime, \
      AT_FDCWD, path, -1, -1, 0, 0)                                                                 \
    X(SPECIAL, int, utimensat, (int d, const char *path, const struct timespec tm[2], int fl),      \
      (d, path, tm, fl), -1, 0)                                                                     \
    X(PATH, int, mkfifo, (const char *path, mode_t m), (path, m), -1, TRC_OP_mkfifo, AT_FDCWD,      \
      path, -1, -1, 0, m)                                                                           \
    X(PATH, int, truncate, (const char *path, off_t len), (path, len), -1, TRC_OP_truncate,         \
      AT_FDCWD, path, -1, len, 0, 0)                                                                \
    X(PATH, int, truncate64, (const char *path, off64_t len), (path, len), -1, TRC_OP_truncate,     \
      AT_FDCWD, path, -1, len, 0, 0)                                                                \
    X(TWOPATH, int, rename, (const char *a, const char *b), (a, b), -1, TRC_OP_rename, AT_FDCWD, a, \
      AT_FDCWD, b, 0)                                                                               \
    X(TWOPATH, int, renameat, (int da, const char *a, int db, const char *b), (da, a, db, b), -1,   \
      TRC_OP_renameat, da, a, db, b, 0)                                                             \
    X(TWOPATH, int, renameat2, (int da, const char *a, int db, const char *b, unsigned fl),         \
      (da, a, db, b, fl), -1, TRC_OP_renameat2, da, a, db, b, fl)                                   \
    X(TWOPATH, int, link, (const char *a, const char *b), (a, b), -1, TRC_OP_link, AT_FDCWD, a,     \
      AT_FDCWD, b, 0)                                                                               \
    X(TWOPATH, int, linkat, (int da, const char *a, int db, const char *b, int fl),                 \
      (da, a, db, b, fl), -1, TRC_OP_linkat, da, a, db, b, fl)                                      \
    X(SPECIAL, int, chdir, (const char *path), (path), -1, 0)                                       \
    X(SPECIAL, int, fchdir, (int fd), (fd), -1, 0)                                                  \
    X(SPECIAL, DIR *, opendir, (const char *path), (path), NULL, 0)                                 \
    X(SPECIAL, DIR *, fdopendir, (int fd), (fd), NULL, 0)                                           \
    X(SPECIAL, struct dirent *, readdir, (DIR *d), (d), NULL, 0)                                    \
    X(SPECIAL, struct dirent64 *, readdir64, (DIR *d), (d), NULL, 0)                                \
    X(SPECIAL, int, closedir, (DIR *d), (d), -1, 0)                                                 \
    X(SPECIAL, pid_t, fork, (void), (), -1, 0)                                                      \
    X(SPECIAL, int, execve, (const char *path, char *const argv[], char *const envp[]),             \
      (path, argv, envp), -1, 0)                                                                    \
    X(SPECIAL, int, execvpe, (const char *file, char *const argv[], char *const envp[]),            \
      (file, argv, envp), -1, 0)                                                                    \
    X(SPECIAL, void, _exit, (int status), (status), , 0)                                            \
    X(SPECIAL, void, _Exit, (int status), (status), , 0)

#define TRC_STDIO_CALLS(X)                                                                         \
    X(FOPEN, FILE *, fopen, (const char *path, const char *mode), (path, mode), NULL, TRC_OP_fopen)  \
    X(FOPEN, FILE *, fopen64, (const char *path, const char *mode), (path, mode), NULL,              \
      TRC_OP_fopen)                                                                                 \
    X(SPECIAL, FILE *, fdopen, (int fd, const char *mode), (fd, mode), NULL, 0)                     \
    X(SPECIAL, FILE *, freopen, (const char *path, const char *mode, FILE *fp), (path, mode, fp),   \
      NULL, 0)                                                                                      \
    X(SPECIAL, FILE *, freopen64, (const char *path, const char *mode, FILE *fp), (path, mode, fp), \
      NULL, 0)                                                                                      \
    X(SCLOSE, int, fclose, (FILE *fp), (fp), EOF, TRC_OP_fclose)                                    \
    X(SCLOSE, int, pclose, (FILE *fp), (fp), -1, TRC_OP_pclose)                                     \
    X(FRW, size_t, fread, (void *p, size_t size, size_t n, FILE *fp), (p, size, n, fp), 0,          \
      TRC_OP_fread)                                                                                 \
    X(FRW, size_t, fwrite, (const void *p, size_t size, size_t n, FILE *fp), (p, size, n, fp), 0,   \
      TRC_OP_fwrite)                                                                                \
    X(SPECIAL, char *, fgets, (char *buf, int n, FILE *fp), (buf, n, fp), NULL, 0)                  \
    X(SPECIAL, int, fputs, (const char *str, FILE *fp), (str, fp), EOF, 0)                          \
    X(SONE, int, fgetc, (FILE *fp), (fp), EOF, TRC_OP_fgetc, ret != EOF, 1)                         \
    X(SONE, int, getc, (FILE *fp), (fp), EOF, TRC_OP_getc, ret != EOF, 1)                           \
    X(SONE, int, fputc, (int c, FILE *fp), (c, fp), EOF, TRC_OP_fputc, ret != EOF, 1)               \
    X(SONE, int, putc, (int c, FILE *fp), (c, fp), EOF, TRC_OP_putc, ret != EOF, 1)                 \
    X(SONE, int, getw, (FILE *fp), (fp), EOF, TRC_OP_getw,                                          \
      !(ret == EOF && (feof(fp) || ferror(fp))), (int64_t)sizeof(int))                              \
    X(SONE, int, putw, (int w, FILE *fp), (w, fp), EOF, TRC_OP_putw, ret == 0, (int64_t)sizeof(int))\
    X(SONE, int, ungetc, (int c, FILE *fp), (c, fp), EOF, TRC_OP_ungetc, ret != EOF && pos > 0, -1) \
    X(SPECIAL, int, vfprintf, (FILE *fp, const char *fmt, va_list ap), (fp, fmt, ap), -1, 0)        \
    X(SPECIAL, int, __isoc99_vfscanf, (FILE *fp, const char *fmt, va_list ap), (fp, fmt, ap), EOF,  \
      0)                                                                                            \
    X(SCALL, int, fseek, (FILE *fp, long off, int whence), (fp, off, whence), -1, TRC_OP_fseek,     \
      ret == 0, (int64_t)off, whence, 0)                                                            \
    X(SCALL, int, fseeko, (FILE *fp, off_t off, int whence), (fp, off, whence), -1, TRC_OP_fseeko,  \
      ret == 0, (int64_t)off, whence, 0)                                                            \
    X(SCALL, int, fseeko64, (FILE *fp, off64_t off, int whence), (fp, off, whence), -1,             \
      TRC_OP_fseeko, ret == 0, (int64_t)off, whence, 0)                                             \
    X(SCALL, long, ftell, (FILE *fp), (fp), -1, TRC_OP_ftell, 0, -1, 0, 0)                          \
    X(SCALL, off_t, ftello, (FILE *fp), (fp), -1, TRC_OP_ftello, 0, -1, 0, 0)                       \
    X(SCALL, off64_t, ftello64, (FILE *fp), (fp), -1, TRC_OP_ftello, 0, -1, 0, 0)                   \
    X(SCALL, int, fgetpos, (FILE *fp, fpos_t *pos), (fp, pos), -1, TRC_OP_fgetpos, 0, -1, 0, 0)     \
    X(SCALL, int, fgetpos64, (FILE *fp, fpos64_t *pos), (fp, pos), -1, TRC_OP_fgetpos, 0, -1, 0, 0) \
    X(SCALL, int, fsetpos, (FILE *fp, const fpos_t *pos), (fp, pos), -1, TRC_OP_fsetpos, ret == 0,  \
      -1, 0, 0)                                                                                     \
    X(SCALL, int, fsetpos64, (FILE *fp, const fpos64_t *pos), (fp, pos), -1, TRC_OP_fsetpos,        \
      ret == 0, -1, 0, 0)                                                                           \
    X(SPECIAL, void, rewind, (FILE *fp), (fp), , 0)                                                 \
    X(SCALL, int, fflush, (FILE *fp), (fp), EOF, TRC_OP_fflush, 0, -1, 0, 0)                        \
    X(SCALL, int, setvbuf, (FILE *fp, char *buf, int mode, size_t size), (fp, buf, mode, size),     \
      -1, TRC_OP_setvbuf, 0, -1, mode, (int64_t)size)                                               \
    X(SCALL, int, feof, (FILE *fp), (fp), 0, TRC_OP_feof, 0, -1, 0, 0)                              \
    X(SCALL, int, ferror, (FILE *fp), (fp), 0, TRC_OP_ferror, 0, -1, 0, 0)                          \
    X(SCALL, int, ftrylockfile, (FILE *fp), (fp), -1, TRC_OP_ftrylockfile, 0, -1, 0, 0)             \
    X(SVOID, void, clearerr, (FILE *fp), (fp), , TRC_OP_clearerr)                                   \
    X(SVOID, void, flockfile, (FILE *fp), (fp), , TRC_OP_flockfile)                                 \
    X(SVOID, void, funlockfile, (FILE *fp), (fp), , TRC_OP_funlockfile)

/* The plain (pre-C99) fscanf family: <stdio.h> maps the names to __isoc99_*, so the real
 * pointer of vfscanf is resolved by its symbol name under another identifier. */
#define TRC_EXTRA_REALS(X) X(SPECIAL, int, plain_vfscanf, (FILE *fp, const char *fmt, va_list ap), (fp, fmt, ap), EOF, "vfscanf")

/* Pointers to the real functions (real.c), resolved on first use or at load. */
#define TRC_DECLARE_REAL(shape, ret, sym, params, ...) extern ret(*trc_real_##sym) params;
TRC_POSIX_CALLS(TRC_DECLARE_REAL)
TRC_STDIO_CALLS(TRC_DECLARE_REAL)
TRC_EXTRA_REALS(TRC_DECLARE_REAL)
#undef TRC_DECLARE_REAL

/* Looks a real symbol up (dlsym RTLD_NEXT, then the base versions for compat-only symbols such
 * as the old stat ABI) and stores it in *slot; 1 when found. */
int trc_real_resolve(const char *symbol, void **slot);
/* Resolves every row at load time, so no wrapper calls dlsym while the program runs. */
void trc_real_resolve_all(void);

/* 1 when the real function of `sym` is known (resolving it on first use). */
#define TRC_REAL_OK(sym)                                                                           \
    (TRC_LIKELY(trc_real_##sym != NULL) || trc_real_resolve(#sym, (void **)&trc_real_##sym))

#endif
