/* trace_int.h: internals shared by the files of libscaffold_trace.so (the LD_PRELOAD tracer).
 *
 * Data flow: a wrapper (wrap_posix.c, wrap_stdio.c) or an annotation (annot.c) appends a binary
 * record to its thread's single-producer ring (core.c); the flusher thread drains every ring,
 * formats dftracer JSON lines and per-file counters (format.c) and writes one gzip member per
 * flush. Path resolution, filtering and the fd table live in path.c. Nothing on the application's
 * I/O path takes a lock, allocates or compresses. */
#ifndef SCAFFOLD_TRACE_INT_H
#define SCAFFOLD_TRACE_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define TRC_API __attribute__((visibility("default")))
#define TRC_LIKELY(x) __builtin_expect(!!(x), 1)
#define TRC_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define TRC_TLS __attribute__((tls_model("initial-exec"))) __thread

#define TRC_VERSION "scaffold-trace-1.0"
#define TRC_MAX_DEPTH 32
#define TRC_FRAG_MAX 768 /* JSON fragment of one region's args */

/* ---------------------------------------------------------------- operations */
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
/* Summary class of an operation. */
enum { TC_OTHER, TC_READ, TC_WRITE, TC_OPEN, TC_CLOSE, TC_SEEK, TC_STAT, TC_SYNC, TC_MMAP, TC_META };

#define TRC_OPS(X)                                                                                 \
    X(open, "open", POSIX, TC_OPEN, TF_FD | TF_FHASH | TF_RET | TF_A1 | TF_A2, "flags", "mode")    \
    X(openat, "openat", POSIX, TC_OPEN, TF_FD | TF_FHASH | TF_RET | TF_A1 | TF_A2, "flags", "mode") \
    X(creat, "creat", POSIX, TC_OPEN, TF_FD | TF_FHASH | TF_RET | TF_A2, "", "mode")              \
    X(close, "close", POSIX, TC_CLOSE, TF_FD | TF_FHASH | TF_RET, "", "")                          \
    X(read, "read", POSIX, TC_READ, TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET, "", "")      \
    X(write, "write", POSIX, TC_WRITE, TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET, "", "")   \
    X(pread, "pread", POSIX, TC_READ, TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET, "", "")    \
    X(pwrite, "pwrite", POSIX, TC_WRITE, TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET, "", "") \
    X(readv, "readv", POSIX, TC_READ, TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1,    \
      "iovcnt", "")                                                                                \
    X(writev, "writev", POSIX, TC_WRITE, TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1, \
      "iovcnt", "")                                                                                \
    X(preadv, "preadv", POSIX, TC_READ, TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1,  \
      "iovcnt", "")                                                                                \
    X(pwritev, "pwritev", POSIX, TC_WRITE,                                                         \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1, "iovcnt", "")                      \
    X(preadv2, "preadv2", POSIX, TC_READ,                                                          \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1 | TF_A2, "iovcnt", "flags")         \
    X(pwritev2, "pwritev2", POSIX, TC_WRITE,                                                       \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1 | TF_A2, "iovcnt", "flags")         \
    X(lseek, "lseek", POSIX, TC_SEEK, TF_FD | TF_FHASH | TF_OFFSET | TF_RET | TF_A1, "whence", "") \
    X(fsync, "fsync", POSIX, TC_SYNC, TF_FD | TF_FHASH | TF_RET, "", "")                           \
    X(fdatasync, "fdatasync", POSIX, TC_SYNC, TF_FD | TF_FHASH | TF_RET, "", "")                   \
    X(ftruncate, "ftruncate", POSIX, TC_META, TF_FD | TF_FHASH | TF_OFFSET | TF_RET, "", "")       \
    X(truncate, "truncate", POSIX, TC_META, TF_FHASH | TF_OFFSET | TF_RET, "", "")                 \
    X(posix_fadvise, "posix_fadvise", POSIX, TC_META,                                              \
      TF_FD | TF_FHASH | TF_OFFSET | TF_COUNT | TF_RET | TF_A1, "advice", "")                      \
    X(sendfile, "sendfile", POSIX, TC_READ,                                                       \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1 | TF_H2, "out_fd", "")              \
    X(copy_file_range, "copy_file_range", POSIX, TC_READ,                                         \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1 | TF_H2, "out_fd", "")              \
    X(mmap, "mmap", POSIX, TC_MMAP, TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_A1 | TF_A2 | TF_RET,\
      "prot", "flags")                                                                             \
    X(munmap, "munmap", POSIX, TC_META, TF_FHASH | TF_COUNT | TF_RET, "", "")                      \
    X(msync, "msync", POSIX, TC_SYNC, TF_FHASH | TF_COUNT | TF_RET | TF_A1, "flags", "")           \
    X(stat, "stat", POSIX, TC_STAT, TF_FHASH | TF_RET, "", "")                                     \
    X(lstat, "lstat", POSIX, TC_STAT, TF_FHASH | TF_RET, "", "")                                   \
    X(fstat, "fstat", POSIX, TC_STAT, TF_FD | TF_FHASH | TF_RET, "", "")                           \
    X(fstatat, "fstatat", POSIX, TC_STAT, TF_FD | TF_FHASH | TF_RET | TF_A1, "flags", "")          \
    X(statx, "statx", POSIX, TC_STAT, TF_FD | TF_FHASH | TF_RET | TF_A1 | TF_A2, "flags", "mask")  \
    X(xstat, "__xstat", POSIX, TC_STAT, TF_FHASH | TF_RET, "", "")                                 \
    X(lxstat, "__lxstat", POSIX, TC_STAT, TF_FHASH | TF_RET, "", "")                               \
    X(fxstat, "__fxstat", POSIX, TC_STAT, TF_FD | TF_FHASH | TF_RET, "", "")                       \
    X(fxstatat, "__fxstatat", POSIX, TC_STAT, TF_FD | TF_FHASH | TF_RET | TF_A1, "flags", "")      \
    X(access, "access", POSIX, TC_META, TF_FHASH | TF_RET | TF_A1, "mode", "")                     \
    X(faccessat, "faccessat", POSIX, TC_META, TF_FHASH | TF_RET | TF_A1, "mode", "")               \
    X(dup, "dup", POSIX, TC_META, TF_FD | TF_FHASH | TF_RET, "", "")                               \
    X(dup2, "dup2", POSIX, TC_META, TF_FD | TF_FHASH | TF_RET, "", "")                             \
    X(dup3, "dup3", POSIX, TC_META, TF_FD | TF_FHASH | TF_RET | TF_A1, "flags", "")                \
    X(fcntl, "fcntl", POSIX, TC_META, TF_FD | TF_FHASH | TF_RET | TF_A1, "cmd", "")                \
    X(getdents64, "getdents64", POSIX, TC_META, TF_FD | TF_FHASH | TF_COUNT | TF_RET, "", "")      \
    X(opendir, "opendir", POSIX, TC_OPEN, TF_FD | TF_FHASH | TF_RET, "", "")                       \
    X(fdopendir, "fdopendir", POSIX, TC_OPEN, TF_FD | TF_FHASH | TF_RET, "", "")                   \
    X(readdir, "readdir", POSIX, TC_META, TF_FD | TF_FHASH | TF_RET, "", "")                       \
    X(closedir, "closedir", POSIX, TC_CLOSE, TF_FD | TF_FHASH | TF_RET, "", "")                    \
    X(mkdir, "mkdir", POSIX, TC_META, TF_FHASH | TF_RET | TF_A2, "", "mode")                       \
    X(mkdirat, "mkdirat", POSIX, TC_META, TF_FHASH | TF_RET | TF_A2, "", "mode")                   \
    X(rmdir, "rmdir", POSIX, TC_META, TF_FHASH | TF_RET, "", "")                                   \
    X(unlink, "unlink", POSIX, TC_META, TF_FHASH | TF_RET, "", "")                                 \
    X(unlinkat, "unlinkat", POSIX, TC_META, TF_FHASH | TF_RET | TF_A1, "flags", "")                \
    X(remove, "remove", POSIX, TC_META, TF_FHASH | TF_RET, "", "")                                 \
    X(rename, "rename", POSIX, TC_META, TF_FHASH | TF_H2 | TF_RET, "", "")                         \
    X(renameat, "renameat", POSIX, TC_META, TF_FHASH | TF_H2 | TF_RET, "", "")                     \
    X(renameat2, "renameat2", POSIX, TC_META, TF_FHASH | TF_H2 | TF_RET | TF_A1, "flags", "")      \
    X(link, "link", POSIX, TC_META, TF_FHASH | TF_H2 | TF_RET, "", "")                             \
    X(linkat, "linkat", POSIX, TC_META, TF_FHASH | TF_H2 | TF_RET, "", "")                         \
    X(symlink, "symlink", POSIX, TC_META, TF_FHASH | TF_RET, "", "")                               \
    X(readlink, "readlink", POSIX, TC_META, TF_FHASH | TF_RET, "", "")                             \
    X(chmod, "chmod", POSIX, TC_META, TF_FHASH | TF_RET | TF_A2, "", "mode")                       \
    X(fchmod, "fchmod", POSIX, TC_META, TF_FD | TF_FHASH | TF_RET | TF_A2, "", "mode")             \
    X(chown, "chown", POSIX, TC_META, TF_FHASH | TF_RET, "", "")                                   \
    X(utime, "utime", POSIX, TC_META, TF_FHASH | TF_RET, "", "")                                   \
    X(utimensat, "utimensat", POSIX, TC_META, TF_FHASH | TF_RET, "", "")                           \
    X(mkfifo, "mkfifo", POSIX, TC_META, TF_FHASH | TF_RET | TF_A2, "", "mode")                     \
    X(chdir, "chdir", POSIX, TC_META, TF_FHASH | TF_RET, "", "")                                   \
    X(fchdir, "fchdir", POSIX, TC_META, TF_FD | TF_FHASH | TF_RET, "", "")                         \
    X(fork, "fork", POSIX, TC_OTHER, TF_RET, "", "")                                               \
    X(exec, "exec", POSIX, TC_OTHER, TF_FHASH | TF_RET, "", "")                                  \
    X(fopen, "fopen", STDIO, TC_OPEN, TF_FD | TF_FHASH | TF_RET, "", "")                           \
    X(fdopen, "fdopen", STDIO, TC_OPEN, TF_FD | TF_FHASH | TF_RET, "", "")                         \
    X(freopen, "freopen", STDIO, TC_OPEN, TF_FD | TF_FHASH | TF_RET, "", "")                       \
    X(fclose, "fclose", STDIO, TC_CLOSE, TF_FD | TF_FHASH | TF_RET, "", "")                        \
    X(fread, "fread", STDIO, TC_READ,                                                              \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1 | TF_BYTES, "size", "")             \
    X(fwrite, "fwrite", STDIO, TC_WRITE,                                                           \
      TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET | TF_A1 | TF_BYTES, "size", "")             \
    X(fgets, "fgets", STDIO, TC_READ, TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET, "", "")    \
    X(fputs, "fputs", STDIO, TC_WRITE, TF_FD | TF_FHASH | TF_COUNT | TF_OFFSET | TF_RET, "", "")        \
    X(fgetc, "fgetc", STDIO, TC_READ, TF_FD | TF_FHASH | TF_OFFSET | TF_RET, "", "")               \
    X(getc, "getc", STDIO, TC_READ, TF_FD | TF_FHASH | TF_OFFSET | TF_RET, "", "")                 \
    X(fputc, "fputc", STDIO, TC_WRITE, TF_FD | TF_FHASH | TF_OFFSET | TF_RET, "", "")              \
    X(putc, "putc", STDIO, TC_WRITE, TF_FD | TF_FHASH | TF_OFFSET | TF_RET, "", "")                \
    X(getw, "getw", STDIO, TC_READ, TF_FD | TF_FHASH | TF_OFFSET | TF_RET, "", "")                 \
    X(putw, "putw", STDIO, TC_WRITE, TF_FD | TF_FHASH | TF_OFFSET | TF_RET, "", "")                \
    X(ungetc, "ungetc", STDIO, TC_OTHER, TF_FD | TF_FHASH | TF_RET, "", "")                        \
    X(fprintf, "fprintf", STDIO, TC_WRITE, TF_FD | TF_FHASH | TF_OFFSET | TF_RET, "", "")          \
    X(fscanf, "fscanf", STDIO, TC_READ, TF_FD | TF_FHASH | TF_RET, "", "")                         \
    X(fseek, "fseek", STDIO, TC_SEEK, TF_FD | TF_FHASH | TF_OFFSET | TF_RET | TF_A1, "whence", "") \
    X(fseeko, "fseeko", STDIO, TC_SEEK, TF_FD | TF_FHASH | TF_OFFSET | TF_RET | TF_A1, "whence", "")\
    X(ftell, "ftell", STDIO, TC_SEEK, TF_FD | TF_FHASH | TF_RET, "", "")                           \
    X(ftello, "ftello", STDIO, TC_SEEK, TF_FD | TF_FHASH | TF_RET, "", "")                         \
    X(rewind, "rewind", STDIO, TC_SEEK, TF_FD | TF_FHASH, "", "")                                  \
    X(fgetpos, "fgetpos", STDIO, TC_SEEK, TF_FD | TF_FHASH | TF_RET, "", "")                       \
    X(fsetpos, "fsetpos", STDIO, TC_SEEK, TF_FD | TF_FHASH | TF_RET, "", "")                       \
    X(fflush, "fflush", STDIO, TC_SYNC, TF_FD | TF_FHASH | TF_RET, "", "")                         \
    X(setvbuf, "setvbuf", STDIO, TC_OTHER, TF_FD | TF_FHASH | TF_RET | TF_A1 | TF_A2, "mode", "size")\
    X(feof, "feof", STDIO, TC_OTHER, TF_FD | TF_FHASH | TF_RET, "", "")                            \
    X(ferror, "ferror", STDIO, TC_OTHER, TF_FD | TF_FHASH | TF_RET, "", "")                        \
    X(clearerr, "clearerr", STDIO, TC_OTHER, TF_FD | TF_FHASH, "", "")                             \
    X(flockfile, "flockfile", STDIO, TC_OTHER, TF_FD | TF_FHASH, "", "")                           \
    X(ftrylockfile, "ftrylockfile", STDIO, TC_OTHER, TF_FD | TF_FHASH | TF_RET, "", "")            \
    X(funlockfile, "funlockfile", STDIO, TC_OTHER, TF_FD | TF_FHASH, "", "")                       \
    X(pclose, "pclose", STDIO, TC_CLOSE, TF_FD | TF_FHASH | TF_RET, "", "")

enum trc_op {
#define TRC_OP_ENUM(id, name, cat, cls, fields, a1, a2) TRC_OP_##id,
    TRC_OPS(TRC_OP_ENUM)
#undef TRC_OP_ENUM
    TRC_OP_COUNT
};

typedef struct trc_opinfo {
    const char *name, *cat, *a1, *a2;
    int cls, fields;
} trc_opinfo;
extern const trc_opinfo trc_ops[TRC_OP_COUNT];

/* ---------------------------------------------------------------- records */
enum { TRC_REC_PAD = 0, TRC_REC_IO = 1, TRC_REC_REGION = 2, TRC_REC_META = 3 };

/* Common header of every ring record; sizes are multiples of 8. */
typedef struct trc_hdr {
    uint32_t size;
    uint16_t type;
    uint16_t op;
} trc_hdr;

typedef struct trc_io_rec {
    trc_hdr h;
    int32_t fd;
    int32_t level;
    uint64_t id;
    int64_t p_idx;
    uint64_t t0, dur; /* ns, CLOCK_MONOTONIC */
    uint64_t fhash, h2;
    int64_t offset, count, ret, a1, a2;
} trc_io_rec;

/* Region: followed by name, cat and the args fragment (NUL-terminated, then padding). */
typedef struct trc_region_rec {
    trc_hdr h;
    int32_t level;
    uint16_t name_len, cat_len, frag_len, pad_;
    uint64_t id;
    int64_t p_idx;
    uint64_t t0, dur;
} trc_region_rec;

/* Metadata: followed by key and value (NUL-terminated). */
typedef struct trc_meta_rec {
    trc_hdr h;
    uint16_t key_len, val_len;
    uint32_t pad_;
} trc_meta_rec;

/* ---------------------------------------------------------------- per-thread state */
typedef struct trc_frame {
    uint64_t id;
    uint64_t t0;
    uint16_t frag_len;
    char name[64];
    char cat[32];
    char frag[TRC_FRAG_MAX];
} trc_frame;

enum { TRC_T_FREE = 0, TRC_T_OWNED = 1, TRC_T_EXITED = 2 };

typedef struct trc_thread {
    struct trc_thread *next; /* global list, never unlinked (slots are reused) */
    int state;               /* TRC_T_*, atomic */
    pid_t tid;
    char *ring;
    uint64_t cap; /* power of two */
    uint64_t head; /* producer position (atomic, release) */
    uint64_t tail; /* consumer position (atomic, release) */
    uint64_t tail_cache;
    uint64_t wake_at;
    uint64_t next_id, id_end;
    uint64_t dropped;
    int depth;
    trc_frame frames[TRC_MAX_DEPTH];
} trc_thread;

/* ---------------------------------------------------------------- fd table, paths */
typedef struct trc_fd {
    uint64_t phash; /* hash of the absolute path, 0 = unknown (atomic) */
    int64_t pos;    /* tracked file position (read/write/lseek; stdio position for FILE*) */
    uint32_t traced;
    uint32_t flags;
} trc_fd;

typedef struct trc_rule {
    char *prefix;
    size_t len;
    int include;
} trc_rule;

typedef struct trc_config {
    int enabled, posix, stdio, signals, keep_env, compress, level;
    int flush_ms;
    size_t flush_bytes, ring_bytes, max_files, max_paths;
    char prefix[PATH_MAX]; /* absolute output prefix */
    trc_rule *rules;
    int nrules, have_include;
} trc_config;

/* Process-wide state (the one singleton LD_PRELOAD forces). */
typedef struct trc_global {
    trc_config cfg;
    int active;      /* recording: TRC_FAM_* bits (atomic); read on every intercepted call */
    int state;       /* TRC_S_* */
    pid_t pid, ppid;
    uint64_t anchor_ns; /* realtime - monotonic, for epoch timestamps */
    uint64_t start_ns;  /* monotonic time the current file's process image started tracing */
    char host[256];
    char hhash[17];
    char exe[256];
    char *cmdline;
    trc_fd *fds;
    int nfds;
    trc_thread *threads; /* atomic list head */
    uint64_t next_id;    /* atomic, handed out in blocks */
    int wake_fd;         /* eventfd the flusher polls (atomic) */
    int out_fd;          /* trace file (atomic), -1 = not open */
    int done_rd, done_wr; /* closed by the flusher once the final flush is written */
    int sig_pending;      /* signal number asking for a final flush (atomic) */
    int flusher_on;       /* flusher thread running (atomic) */
    int stop;
    pthread_t flusher;
    pthread_mutex_t flush_lock;
    unsigned file_seq;    /* files opened by this process image (exec failure, fork) */
    unsigned gen;         /* output-file generation: FH lines are re-emitted per file */
    char ld_preload[PATH_MAX];
} trc_global;

enum { TRC_FAM_POSIX = 1, TRC_FAM_STDIO = 2, TRC_FAM_ANNOT = 4 };
/* 1 when the calling thread may record a path-based call of this family. */
#define trc_on(family) ((__atomic_load_n(&trc_g.active, __ATOMIC_RELAXED) & (family)) && !trc_busy)
enum { TRC_S_OFF = 0, TRC_S_RUNNING = 1, TRC_S_FINAL = 2 };

extern trc_global trc_g;
extern TRC_TLS int trc_busy;
extern TRC_TLS trc_thread *trc_self;

/* ---------------------------------------------------------------- core.c */
static inline uint64_t trc_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
/* The fixed wrapper body shared by the POSIX and STDIO wrappers: mark the thread busy (no
 * re-entrant recording), time the real call, keep its errno, restore it before returning. */
#define T0()                                                                                       \
    trc_busy = 1;                                                                                  \
    uint64_t t0_ = trc_now()
#define T1()                                                                                       \
    uint64_t t1_ = trc_now();                                                                      \
    int e_ = errno
#define TDONE()                                                                                    \
    trc_busy = 0;                                                                                  \
    errno = e_
trc_thread *trc_thread_get(void);
/* Reserves `size` bytes (multiple of 8) in the calling thread's ring; NULL = dropped. */
void *trc_reserve(trc_thread *t, uint32_t size);
void trc_commit(trc_thread *t, uint32_t size);
uint64_t trc_new_id(trc_thread *t);
/* Writes everything and closes the file (exit, exec, signals). */
void trc_finalize(void);
/* After a failed exec: opens a new file and resumes. */
void trc_resume(void);
void trc_fork_child(void);
/* Internal fd bookkeeping: the application closed or overwrote one of our descriptors. */
void trc_fd_stolen(int fd);
uint64_t trc_hash(const void *p, size_t n);
void trc_hex16(uint64_t h, char out[17]);
/* Real functions the core itself needs (resolved with dlsym(RTLD_NEXT)). */
void *trc_real(const char *name);

/* ---------------------------------------------------------------- path.c */
void trc_paths_init(size_t max_paths);
void trc_paths_reset_gen(void);
/* Interns an absolute path; returns its hash (never 0). */
uint64_t trc_path_intern(const char *abs);
/* The path of a hash, or NULL; *emit is set when it was not yet emitted in generation gen. */
const char *trc_path_lookup(uint64_t h, unsigned gen, int *emit);
/* Absolute, lexically normalised path of (dirfd, path); 0 on success. */
int trc_path_resolve(int dirfd, const char *path, char *out, size_t cap);
/* 1 when the absolute path passes the include/exclude rules. */
int trc_path_traced(const char *abs);
int trc_rules_init(trc_config *c, const char *inc, const char *exc);
void trc_cwd_set(const char *abs);
const char *trc_cwd(void);

static inline trc_fd *trc_fd_slot(int fd) {
    return (fd >= 0 && fd < trc_g.nfds && trc_g.fds) ? &trc_g.fds[fd] : 0;
}
/* The slot of fd if that fd is traced and recording is on; the fast filter of every wrapper. */
static inline trc_fd *trc_fd_traced(int fd, int family) {
    if (TRC_UNLIKELY(!(__atomic_load_n(&trc_g.active, __ATOMIC_RELAXED) & family)) || trc_busy)
        return 0;
    trc_fd *s = trc_fd_slot(fd);
    return (s && __atomic_load_n(&s->traced, __ATOMIC_RELAXED)) ? s : 0;
}
void trc_fd_set(int fd, uint64_t phash, int traced, int64_t pos);
void trc_fd_clear(int fd);
void trc_fd_copy(int from, int to);
/* Resolves and interns (dirfd, path); returns hash (0 if untraced) and sets *traced. */
uint64_t trc_path_classify(int dirfd, const char *path, int *traced, int intern_untraced);

/* ---------------------------------------------------------------- format.c */
typedef struct trc_buf {
    char *p;
    size_t len, cap;
} trc_buf;
/* Grows b to hold n more bytes; 0 on success. */
int trc_buf_grow(trc_buf *b, size_t n);
/* Inline so constant strings become a few moves; only growth is a call. */
static inline void trc_buf_put(trc_buf *b, const char *s, size_t n) {
    if (TRC_UNLIKELY(b->len + n + 1 > b->cap) && trc_buf_grow(b, n) != 0)
        return; /* out of memory: the line is lost, the process is not */
    __builtin_memcpy(b->p + b->len, s, n);
    b->len += n;
}
static inline void trc_buf_str(trc_buf *b, const char *s) { trc_buf_put(b, s, __builtin_strlen(s)); }
void trc_buf_u64(trc_buf *b, uint64_t v);
void trc_buf_i64(trc_buf *b, int64_t v);
/* JSON string with quotes and escapes (invalid UTF-8 bytes become \u00XX). */
void trc_buf_json(trc_buf *b, const char *s, size_t n);
/* Appends the JSON line(s) for one ring record (FH lines first when needed); returns events. */
int trc_format_record(trc_buf *b, const trc_hdr *h, pid_t pid, pid_t tid);
void trc_format_meta(trc_buf *b, const char *type, const char *name, const char *value_json,
                     pid_t tid);
void trc_format_fh(trc_buf *b, uint64_t h, const char *path, pid_t tid);
void trc_summary_reset(size_t max_files);
void trc_summary_write(trc_buf *b, pid_t tid);

/* ---------------------------------------------------------------- wrap_*.c, annot.c */
void trc_wrap_resolve_all(void);
void trc_mmap_reset(void);
void trc_annot_fork_child(trc_thread *t);

/* Fills the common fields of an I/O record and commits it (called with trc_busy set). */
void trc_emit_io(int op, int fd, uint64_t fhash, uint64_t t0, uint64_t t1, int64_t offset,
                 int64_t count, int64_t ret, int64_t a1, int64_t a2, uint64_t h2);
/* The value trc_g.active takes while running. */
int trc_active_bits(void);

#endif
