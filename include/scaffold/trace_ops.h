/* trace_ops.h: the POSIX and stdio calls, in one table shared by the tracer and the analyzer.
 *
 * TRC_OPS lists the calls the LD_PRELOAD tracer (src/trace) records, one row each: the event's
 * op id and name, its category (cat "POSIX" or "STDIO"), the class the tracer's per-file summary
 * counts it in, the class the analyzer (src/analyze) counts it in, which args the event carries
 * and the names of its two free args. TRC_OP_ALIASES adds the names other tracers (dftracer)
 * write for the same calls (64-bit and internal glibc variants, process control) with their
 * analyzer class. The analyzer classifies an event of either table by its name, whichever tracer
 * wrote it. Include-only (macros and enums): the tracer stays free of libscaffold.
 *
 * The two classes differ where the analyzer's metrics follow DFAnalyzer's lists (line and
 * character stdio calls, sendfile, mmap, dup, fgetpos/fsetpos are "other" I/O there, fork is
 * process control) while the tracer's Darshan-style summary counts them as reads, writes, seeks
 * or metadata. */
#ifndef SCAFFOLD_TRACE_OPS_H
#define SCAFFOLD_TRACE_OPS_H

/* Which args an event carries (format.c prints them in this order). */
enum {
    TF_FD = 1 << 0,
    TF_FHASH = 1 << 1,
    TF_COUNT = 1 << 2,
    TF_OFFSET = 1 << 3,
    TF_RET = 1 << 4,
    TF_A1 = 1 << 5,
    TF_A2 = 1 << 6,
    TF_H2 = 1 << 7,   /* second path hash (rename target, sendfile out file) */
    TF_BYTES = 1 << 8 /* fread/fwrite: bytes = a1 (item size) * ret */
};
/* The class the tracer's per-file summary counts a call in (format.c). */
enum {
    TC_OTHER, TC_READ, TC_WRITE, TC_OPEN, TC_CLOSE, TC_SEEK, TC_STAT, TC_SYNC, TC_MMAP, TC_META
};

/* The class the analyzer counts a call in (classify.c maps it to its AN_OP_* ops). */
enum { OC_OTHER, OC_READ, OC_WRITE, OC_META, OC_SYNC, OC_PCTL };

/* X(id, name, cat, summary class, analyzer class, fields, a1, a2) */
#define TRC_OPS(X)                                                                                 \
    X(open, "open", POSIX, TC_OPEN, OC_META,                                                       \
      TF_FD | TF_FHASH | TF_RET | TF_A1 | TF_A2, "flags", "mode")                                  \
    X(openat, "openat", POSIX, TC_OPEN, OC_META,                                                   \
      TF_FD | TF_FHASH | TF_RET | TF_A1 | TF_A2, "flags", "mode")                                  \
    X(creat, "creat", POSIX, TC_OPEN, OC_META, TF_FD | TF_FHASH | TF_RET | TF_A2, "", "mode")      \
    X(close, "close", POSIX, TC_CLOSE, OC_META, TF_FD | TF_FHASH | TF_RET, "", "")                 \
    X(read, "read", POSIX, TC_READ, OC_READ,                                                       \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET, "", "")                                    \
    X(write, "write", POSIX, TC_WRITE, OC_WRITE,                                                   \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET, "", "")                                    \
    X(pread, "pread", POSIX, TC_READ, OC_READ,                                                     \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET, "", "")                                    \
    X(pwrite, "pwrite", POSIX, TC_WRITE, OC_WRITE,                                                 \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET, "", "")                                    \
    X(readv, "readv", POSIX, TC_READ, OC_READ,                                                     \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1, "iovcnt", "")                      \
    X(writev, "writev", POSIX, TC_WRITE, OC_WRITE,                                                 \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1, "iovcnt", "")                      \
    X(preadv, "preadv", POSIX, TC_READ, OC_READ,                                                   \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1, "iovcnt", "")                      \
    X(pwritev, "pwritev", POSIX, TC_WRITE, OC_WRITE,                                               \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1, "iovcnt", "")                      \
    X(preadv2, "preadv2", POSIX, TC_READ, OC_READ,                                                 \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1 | TF_A2, "iovcnt", "flags")         \
    X(pwritev2, "pwritev2", POSIX, TC_WRITE, OC_WRITE,                                             \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1 | TF_A2, "iovcnt", "flags")         \
    X(lseek, "lseek", POSIX, TC_SEEK, OC_META,                                                     \
      TF_FD | TF_FHASH | TF_OFFSET | TF_RET | TF_A1, "whence", "")                                 \
    X(fsync, "fsync", POSIX, TC_SYNC, OC_SYNC, TF_FD | TF_FHASH | TF_RET, "", "")                  \
    X(fdatasync, "fdatasync", POSIX, TC_SYNC, OC_SYNC, TF_FD | TF_FHASH | TF_RET, "", "")          \
    X(ftruncate, "ftruncate", POSIX, TC_META, OC_META,                                             \
      TF_FD | TF_FHASH | TF_OFFSET | TF_RET, "", "")                                               \
    X(truncate, "truncate", POSIX, TC_META, OC_META, TF_FHASH | TF_OFFSET | TF_RET, "", "")        \
    X(posix_fadvise, "posix_fadvise", POSIX, TC_META, OC_OTHER,                                    \
      TF_FD | TF_FHASH | TF_OFFSET | TF_COUNT | TF_RET | TF_A1, "advice", "")                      \
    X(sendfile, "sendfile", POSIX, TC_READ, OC_OTHER,                                              \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1 | TF_H2, "out_fd", "")              \
    X(copy_file_range, "copy_file_range", POSIX, TC_READ, OC_OTHER,                                \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1 | TF_H2, "out_fd", "")              \
    X(mmap, "mmap", POSIX, TC_MMAP, OC_OTHER,                                                      \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_A1 | TF_A2 | TF_RET, "prot", "flags")           \
    X(munmap, "munmap", POSIX, TC_META, OC_OTHER, TF_FHASH | TF_COUNT | TF_RET, "", "")            \
    X(msync, "msync", POSIX, TC_SYNC, OC_SYNC, TF_FHASH | TF_COUNT | TF_RET | TF_A1, "flags", "")  \
    X(stat, "stat", POSIX, TC_STAT, OC_META, TF_FHASH | TF_RET, "", "")                            \
    X(lstat, "lstat", POSIX, TC_STAT, OC_META, TF_FHASH | TF_RET, "", "")                          \
    X(fstat, "fstat", POSIX, TC_STAT, OC_META, TF_FD | TF_FHASH | TF_RET, "", "")                  \
    X(fstatat, "fstatat", POSIX, TC_STAT, OC_META, TF_FD | TF_FHASH | TF_RET | TF_A1, "flags", "") \
    X(statx, "statx", POSIX, TC_STAT, OC_META,                                                     \
      TF_FD | TF_FHASH | TF_RET | TF_A1 | TF_A2, "flags", "mask")                                  \
    X(xstat, "__xstat", POSIX, TC_STAT, OC_META, TF_FHASH | TF_RET, "", "")                        \
    X(lxstat, "__lxstat", POSIX, TC_STAT, OC_META, TF_FHASH | TF_RET, "", "")                      \
    X(fxstat, "__fxstat", POSIX, TC_STAT, OC_META, TF_FD | TF_FHASH | TF_RET, "", "")              \
    X(fxstatat, "__fxstatat", POSIX, TC_STAT, OC_META,                                             \
      TF_FD | TF_FHASH | TF_RET | TF_A1, "flags", "")                                              \
    X(access, "access", POSIX, TC_META, OC_META, TF_FHASH | TF_RET | TF_A1, "mode", "")            \
    X(faccessat, "faccessat", POSIX, TC_META, OC_META, TF_FHASH | TF_RET | TF_A1, "mode", "")      \
    X(dup, "dup", POSIX, TC_META, OC_OTHER, TF_FD | TF_FHASH | TF_RET, "", "")                     \
    X(dup2, "dup2", POSIX, TC_META, OC_OTHER, TF_FD | TF_FHASH | TF_RET, "", "")                   \
    X(dup3, "dup3", POSIX, TC_META, OC_OTHER, TF_FD | TF_FHASH | TF_RET | TF_A1, "flags", "")      \
    X(fcntl, "fcntl", POSIX, TC_META, OC_META, TF_FD | TF_FHASH | TF_RET | TF_A1, "cmd", "")       \
    X(getdents64, "getdents64", POSIX, TC_META, OC_META,                                           \
      TF_FD | TF_FHASH | TF_COUNT | TF_RET, "", "")                                                \
    X(opendir, "opendir", POSIX, TC_OPEN, OC_META, TF_FD | TF_FHASH | TF_RET, "", "")              \
    X(fdopendir, "fdopendir", POSIX, TC_OPEN, OC_META, TF_FD | TF_FHASH | TF_RET, "", "")          \
    X(readdir, "readdir", POSIX, TC_META, OC_META, TF_FD | TF_FHASH | TF_RET, "", "")              \
    X(closedir, "closedir", POSIX, TC_CLOSE, OC_META, TF_FD | TF_FHASH | TF_RET, "", "")           \
    X(mkdir, "mkdir", POSIX, TC_META, OC_META, TF_FHASH | TF_RET | TF_A2, "", "mode")              \
    X(mkdirat, "mkdirat", POSIX, TC_META, OC_META, TF_FHASH | TF_RET | TF_A2, "", "mode")          \
    X(rmdir, "rmdir", POSIX, TC_META, OC_META, TF_FHASH | TF_RET, "", "")                          \
    X(unlink, "unlink", POSIX, TC_META, OC_META, TF_FHASH | TF_RET, "", "")                        \
    X(unlinkat, "unlinkat", POSIX, TC_META, OC_META, TF_FHASH | TF_RET | TF_A1, "flags", "")       \
    X(remove, "remove", POSIX, TC_META, OC_META, TF_FHASH | TF_RET, "", "")                        \
    X(rename, "rename", POSIX, TC_META, OC_META, TF_FHASH | TF_H2 | TF_RET, "", "")                \
    X(renameat, "renameat", POSIX, TC_META, OC_META, TF_FHASH | TF_H2 | TF_RET, "", "")            \
    X(renameat2, "renameat2", POSIX, TC_META, OC_META,                                             \
      TF_FHASH | TF_H2 | TF_RET | TF_A1, "flags", "")                                              \
    X(link, "link", POSIX, TC_META, OC_META, TF_FHASH | TF_H2 | TF_RET, "", "")                    \
    X(linkat, "linkat", POSIX, TC_META, OC_META, TF_FHASH | TF_H2 | TF_RET | TF_A1, "flags", "")   \
    X(symlink, "symlink", POSIX, TC_META, OC_META, TF_FHASH | TF_RET, "", "")                      \
    X(readlink, "readlink", POSIX, TC_META, OC_META, TF_FHASH | TF_RET, "", "")                    \
    X(chmod, "chmod", POSIX, TC_META, OC_META, TF_FHASH | TF_RET | TF_A2, "", "mode")              \
    X(fchmod, "fchmod", POSIX, TC_META, OC_META, TF_FD | TF_FHASH | TF_RET | TF_A2, "", "mode")    \
    X(chown, "chown", POSIX, TC_META, OC_META, TF_FHASH | TF_RET, "", "")                          \
    X(utime, "utime", POSIX, TC_META, OC_META, TF_FHASH | TF_RET, "", "")                          \
    X(utimensat, "utimensat", POSIX, TC_META, OC_META, TF_FHASH | TF_RET, "", "")                  \
    X(mkfifo, "mkfifo", POSIX, TC_META, OC_META, TF_FHASH | TF_RET | TF_A2, "", "mode")            \
    X(chdir, "chdir", POSIX, TC_META, OC_META, TF_FHASH | TF_RET, "", "")                          \
    X(fchdir, "fchdir", POSIX, TC_META, OC_META, TF_FD | TF_FHASH | TF_RET, "", "")                \
    X(fork, "fork", POSIX, TC_OTHER, OC_PCTL, TF_RET, "", "")                                      \
    X(exec, "exec", POSIX, TC_OTHER, OC_OTHER, TF_FHASH | TF_RET, "", "")                          \
    X(fopen, "fopen", STDIO, TC_OPEN, OC_META, TF_FD | TF_FHASH | TF_RET, "", "")                  \
    X(fdopen, "fdopen", STDIO, TC_OPEN, OC_META, TF_FD | TF_FHASH | TF_RET, "", "")                \
    X(freopen, "freopen", STDIO, TC_OPEN, OC_META, TF_FD | TF_FHASH | TF_RET, "", "")              \
    X(fclose, "fclose", STDIO, TC_CLOSE, OC_META, TF_FD | TF_FHASH | TF_RET, "", "")               \
    X(fread, "fread", STDIO, TC_READ, OC_READ,                                                     \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1 | TF_BYTES, "size", "")             \
    X(fwrite, "fwrite", STDIO, TC_WRITE, OC_WRITE,                                                 \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1 | TF_BYTES, "size", "")             \
    X(fgets, "fgets", STDIO, TC_READ, OC_OTHER,                                                    \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET, "", "")                                    \
    X(fputs, "fputs", STDIO, TC_WRITE, OC_OTHER,                                                   \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET, "", "")                                    \
    X(fgetc, "fgetc", STDIO, TC_READ, OC_OTHER, TF_FD | TF_FHASH | TF_OFFSET | TF_RET, "", "")     \
    X(getc, "getc", STDIO, TC_READ, OC_OTHER, TF_FD | TF_FHASH | TF_OFFSET | TF_RET, "", "")       \
    X(fputc, "fputc", STDIO, TC_WRITE, OC_OTHER, TF_FD | TF_FHASH | TF_OFFSET | TF_RET, "", "")    \
    X(putc, "putc", STDIO, TC_WRITE, OC_OTHER, TF_FD | TF_FHASH | TF_OFFSET | TF_RET, "", "")      \
    X(getw, "getw", STDIO, TC_READ, OC_OTHER, TF_FD | TF_FHASH | TF_OFFSET | TF_RET, "", "")       \
    X(putw, "putw", STDIO, TC_WRITE, OC_OTHER, TF_FD | TF_FHASH | TF_OFFSET | TF_RET, "", "")      \
    X(ungetc, "ungetc", STDIO, TC_OTHER, OC_OTHER, TF_FD | TF_FHASH | TF_RET, "", "")              \
    X(fprintf, "fprintf", STDIO, TC_WRITE, OC_OTHER,                                               \
      TF_FD | TF_FHASH | TF_OFFSET | TF_RET, "", "")                                               \
    X(fscanf, "fscanf", STDIO, TC_READ, OC_OTHER, TF_FD | TF_FHASH | TF_RET, "", "")               \
    X(fseek, "fseek", STDIO, TC_SEEK, OC_META,                                                     \
      TF_FD | TF_FHASH | TF_OFFSET | TF_RET | TF_A1, "whence", "")                                 \
    X(fseeko, "fseeko", STDIO, TC_SEEK, OC_META,                                                   \
      TF_FD | TF_FHASH | TF_OFFSET | TF_RET | TF_A1, "whence", "")                                 \
    X(ftell, "ftell", STDIO, TC_SEEK, OC_META, TF_FD | TF_FHASH | TF_RET, "", "")                  \
    X(ftello, "ftello", STDIO, TC_SEEK, OC_META, TF_FD | TF_FHASH | TF_RET, "", "")                \
    X(rewind, "rewind", STDIO, TC_SEEK, OC_META, TF_FD | TF_FHASH, "", "")                         \
    X(fgetpos, "fgetpos", STDIO, TC_SEEK, OC_OTHER, TF_FD | TF_FHASH | TF_RET, "", "")             \
    X(fsetpos, "fsetpos", STDIO, TC_SEEK, OC_OTHER, TF_FD | TF_FHASH | TF_RET, "", "")             \
    X(fflush, "fflush", STDIO, TC_SYNC, OC_SYNC, TF_FD | TF_FHASH | TF_RET, "", "")                \
    X(setvbuf, "setvbuf", STDIO, TC_OTHER, OC_OTHER,                                               \
      TF_FD | TF_FHASH | TF_RET | TF_A1 | TF_A2, "mode", "size")                                   \
    X(feof, "feof", STDIO, TC_OTHER, OC_OTHER, TF_FD | TF_FHASH | TF_RET, "", "")                  \
    X(ferror, "ferror", STDIO, TC_OTHER, OC_OTHER, TF_FD | TF_FHASH | TF_RET, "", "")              \
    X(clearerr, "clearerr", STDIO, TC_OTHER, OC_OTHER, TF_FD | TF_FHASH, "", "")                   \
    X(flockfile, "flockfile", STDIO, TC_OTHER, OC_OTHER, TF_FD | TF_FHASH, "", "")                 \
    X(ftrylockfile, "ftrylockfile", STDIO, TC_OTHER, OC_OTHER, TF_FD | TF_FHASH | TF_RET, "", "")  \
    X(funlockfile, "funlockfile", STDIO, TC_OTHER, OC_OTHER, TF_FD | TF_FHASH, "", "")             \
    X(pclose, "pclose", STDIO, TC_CLOSE, OC_OTHER, TF_FD | TF_FHASH | TF_RET, "", "")

/* X(name, analyzer class): the same calls under the names other tracers write. */
#define TRC_OP_ALIASES(X)                                                                          \
    X("pread64", OC_READ) X("preadv64", OC_READ) X("fread_unlocked", OC_READ)                      \
    X("pwrite64", OC_WRITE) X("pwritev64", OC_WRITE) X("fwrite_unlocked", OC_WRITE)                \
    X("sync", OC_SYNC) X("syncfs", OC_SYNC) X("sync_file_range", OC_SYNC) X("open64", OC_META)     \
    X("openat64", OC_META) X("__open_2", OC_META) X("__open64_2", OC_META) X("creat64", OC_META)   \
    X("close_range", OC_META) X("fopen64", OC_META) X("freopen64", OC_META)                        \
    X("__xstat64", OC_META) X("__lxstat64", OC_META) X("__fxstat64", OC_META)                      \
    X("__fxstatat64", OC_META) X("stat64", OC_META) X("lstat64", OC_META) X("fstat64", OC_META)    \
    X("fstatat64", OC_META) X("newfstatat", OC_META) X("lseek64", OC_META) X("fseeko64", OC_META)  \
    X("symlinkat", OC_META) X("readlinkat", OC_META) X("readdir64", OC_META)                       \
    X("getdents", OC_META) X("fchmodat", OC_META) X("fchown", OC_META) X("lchown", OC_META)        \
    X("fcntl64", OC_META) X("ftruncate64", OC_META) X("truncate64", OC_META) X("utimes", OC_META)  \
    X("mknod", OC_META) X("fallocate", OC_META) X("posix_fallocate", OC_META) X("seek", OC_META)   \
    X("vfork", OC_PCTL) X("execl", OC_PCTL) X("execlp", OC_PCTL) X("execle", OC_PCTL)              \
    X("execv", OC_PCTL) X("execvp", OC_PCTL) X("execvpe", OC_PCTL) X("execve", OC_PCTL)            \
    X("exit", OC_PCTL) X("_exit", OC_PCTL) X("wait", OC_PCTL) X("waitpid", OC_PCTL)                \
    X("kill", OC_PCTL) X("pipe", OC_PCTL) X("posix_spawn", OC_PCTL) X("posix_spawnp", OC_PCTL)

#endif
