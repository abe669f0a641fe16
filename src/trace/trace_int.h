/* trace_int.h: internals shared by the files of libscaffold_trace.so (the LD_PRELOAD tracer).
 *
 * Data flow: a wrapper (wrap_posix.c, wrap_stdio.c, generated from the call table in calls.h) or
 * an annotation (annot.c) appends a binary record to its thread's single-producer ring (ring.c);
 * a record is published by its header word, written last, so the producer never updates a shared
 * position. The flusher thread (flush.c) drains every ring, formats dftracer JSON lines and the
 * per-file counters (format.c), compresses each member whole in memory (libdeflate, zlib
 * fallback) and writes it with one write(). Time stamps come from clock.c (TSC where invariant,
 * converted by the flusher), real libc functions from real.c, path resolution, filtering and the
 * fd table from path.c, configuration and the process lifecycle from core.c. Nothing on the
 * application's I/O path takes a lock, allocates, formats or compresses. */
#ifndef SCAFFOLD_TRACE_INT_H
#define SCAFFOLD_TRACE_INT_H

#include "scaffold/trace_ops.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define TRC_API __attribute__((visibility("default")))
#define TRC_LIKELY(x) __builtin_expect(!!(x), 1)
#define TRC_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define TRC_TLS __attribute__((tls_model("initial-exec"))) __thread

#define TRC_VERSION "scaffold-trace-2.1"

/* dftracer 2.x "type" values (docs/trace_format.rst upstream): the layer that wrote an event. */
#define TRC_TYPE_DFTRACER "1"
#define TRC_TYPE_C_APP "2"
#define TRC_TYPE_LIBC_IO "3"
#define TRC_TYPE_PSUTIL "7"
#define TRC_TYPE_MPI "10"
enum { TRC_USED_LIBC_IO = 1, TRC_USED_C_APP = 2, TRC_USED_MPI = 4, TRC_USED_SYS = 8 };
extern unsigned trc_used; /* flusher side: layers seen in the current file */
#define TRC_MAX_DEPTH 32
#define TRC_FRAG_MAX 768 /* JSON fragment of one region's args */

/* ---------------------------------------------------------------- operations */
/* The calls and what their events carry: TRC_OPS in scaffold/trace_ops.h (shared with the
 * analyzer). */
enum trc_op {
#define TRC_OP_ENUM(id, name, cat, cls, oc, fields, a1, a2) TRC_OP_##id,
    TRC_OPS(TRC_OP_ENUM)
#undef TRC_OP_ENUM
    TRC_OP_COUNT
};

typedef struct trc_opinfo {
    const char *name, *cat, *a1, *a2;
    int cls, fields;
} trc_opinfo;
extern const trc_opinfo trc_ops[TRC_OP_COUNT];

/* ---------------------------------------------------------------- ring records */
/* Every record starts with one 64-bit header word: size (bytes, a multiple of 8) in bits 0-15,
 * the type in bits 16-23, a type-specific byte (the op, or a region's level) in bits 24-31 and
 * a 32-bit value (the fd) in bits 32-63. The producer writes the body, then clears the header
 * slot that follows the record, then stores the header (release): a zero header means "not
 * written yet", so the header is the publication and the flusher needs no shared head position.
 * The producer always keeps 8 bytes of room for that cleared slot. */
enum { TRC_REC_NONE = 0, TRC_REC_PAD = 1, TRC_REC_IO = 2, TRC_REC_BEGIN = 3, TRC_REC_REGION = 4,
       TRC_REC_META = 5, TRC_REC_MPI = 6, TRC_REC_PROC = 7 };

static inline uint64_t trc_hdr(uint32_t size, unsigned type, unsigned sub, int32_t val) {
    return (uint64_t)(size & 0xffff) | (uint64_t)(type & 0xff) << 16 |
           (uint64_t)(sub & 0xff) << 24 | (uint64_t)(uint32_t)val << 32;
}
#define TRC_HDR_SIZE(h) ((uint32_t)((h)&0xffff))
#define TRC_HDR_TYPE(h) ((unsigned)(((h) >> 16) & 0xff))
#define TRC_HDR_SUB(h) ((unsigned)(((h) >> 24) & 0xff))
#define TRC_HDR_VAL(h) ((int32_t)(uint32_t)((h) >> 32))

/* I/O record: 56 bytes, +8 with a1, +16 with a1 and a2 (or h2, the second path hash; no op has
 * both). Header: op and fd. The flusher assigns the event id. */
typedef struct trc_io_rec {
    uint64_t hdr;
    uint64_t t0;        /* clock ticks (clock.c) */
    uint64_t dur_level; /* duration in ticks (bits 0-55), nesting level (bits 56-63) */
    uint64_t fhash;
    int64_t offset, count, ret;
    int64_t a1, a2; /* present when the op's fields ask for them */
} trc_io_rec;
#define TRC_IO_BASE 56u

/* Region begin (16 bytes): header sub = level; id = the region's event id. Lets the flusher
 * name the parent (p_idx) of every event recorded inside the region. */
typedef struct trc_begin_rec {
    uint64_t hdr;
    uint64_t id;
} trc_begin_rec;

/* Region end: header sub = level; followed by name, cat and the args fragment (NUL-terminated). */
typedef struct trc_region_rec {
    uint64_t hdr;
    uint64_t id;
    uint64_t t0, dur; /* ticks */
    uint16_t name_len, cat_len, frag_len, pad_;
} trc_region_rec;

/* An MPI call (mpi_hooks.h): header sub = the MPI op, val = root/peer (TRC_MPI_NONE none). */
typedef struct trc_mpi_rec {
    uint64_t hdr;
    uint64_t t0;
    uint64_t dur_level; /* as trc_io_rec */
    uint32_t comm_id, comm_size;
    int32_t rank, req_op;
    int32_t nreq, pad_;
    int64_t count, bytes;
    uint64_t fhash;
    int64_t offset;
} trc_mpi_rec;

/* Metadata (TRC_REC_META: a "CM" line; TRC_REC_PROC: a "PR" line whose value is a JSON number):
 * followed by key and value (NUL-terminated). */
typedef struct trc_meta_rec {
    uint64_t hdr;
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
    /* producer (the owning thread) */
    char *ring;
    uint64_t cap, mask;   /* power of two */
    uint64_t head;        /* next write position (private to the producer) */
    uint64_t tail_cache;  /* last tail seen */
    uint64_t unwoken;     /* bytes written since the flusher was last woken */
    uint64_t next_id, id_end;
    uint64_t dropped;
    int depth;
    pid_t tid;
    trc_frame frames[TRC_MAX_DEPTH];
    /* shared */
    struct trc_thread *next; /* global list, never unlinked (slots are reused) */
    int state;               /* TRC_T_*, atomic */
    uint64_t tail __attribute__((aligned(64))); /* consumer position (atomic, release) */
    /* consumer (the flusher) */
    uint64_t parents[TRC_MAX_DEPTH + 2]; /* event id of the open region at each level */
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
    int enabled, posix, stdio, signals, keep_env, compress, level, clock_tsc;
    int format; /* 2: dftracer 2.x shape (integer ph/type, no brackets); 1: the 1.x shape */
    int mpi;    /* record MPI calls when the MPI sibling library is loaded */
    int adapt; /* 0: always `level`, 1: the fast encoder while behind, 2: always the fast one */
    int flush_ms;
    int metrics_ms; /* system-metrics sampling interval, 0 = off */
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
    uint64_t start_ns;  /* CLOCK_MONOTONIC time the current file's process image started */
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
    pthread_t flusher;
    pthread_mutex_t flush_lock;
    unsigned file_seq;    /* files opened by this process image (exec failure, fork) */
    unsigned gen;         /* output-file generation: FH lines are re-emitted per file */
    char ld_preload[PATH_MAX];
} trc_global;

enum { TRC_FAM_POSIX = 1, TRC_FAM_STDIO = 2, TRC_FAM_ANNOT = 4, TRC_FAM_MPI = 8 };
enum { TRC_S_OFF = 0, TRC_S_RUNNING = 1, TRC_S_FINAL = 2 };

extern trc_global trc_g;
extern TRC_TLS int trc_busy;
extern TRC_TLS trc_thread *trc_self;

/* 1 when the calling thread may record a path-based call of this family. */
static inline int trc_on(int family) {
    return (__atomic_load_n(&trc_g.active, __ATOMIC_RELAXED) & family) && !trc_busy;
}

/* ---------------------------------------------------------------- clock.c */
/* The recording clock: raw TSC ticks where the TSC is invariant and the kernel uses it as its
 * clocksource (checked at start), CLOCK_MONOTONIC nanoseconds otherwise. The flusher converts
 * ticks to nanoseconds piecewise-linearly between (TSC, CLOCK_MONOTONIC) anchors it takes. */
extern int trc_clock_is_tsc;
static inline uint64_t trc_mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
static inline uint64_t trc_clock(void) {
#if defined(__x86_64__)
    if (TRC_LIKELY(trc_clock_is_tsc)) {
        uint32_t lo, hi;
        __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
        return (uint64_t)hi << 32 | lo;
    }
#endif
    return trc_mono_ns();
}
/* Decides the clock (want: 1 tsc if possible, 0 monotonic) and takes the first anchor. */
void trc_clock_init(int want_tsc);
/* Takes an anchor now if the last one is old enough (flusher, under the flush lock). */
void trc_clock_anchor(void);
/* Ticks to nanoseconds of CLOCK_MONOTONIC, and a tick duration to nanoseconds. */
uint64_t trc_clock_ns(uint64_t ticks);
uint64_t trc_clock_dur_ns(uint64_t ticks);
/* CLOCK_REALTIME - CLOCK_MONOTONIC at start, in ns: epoch timestamps never run backwards. */
extern uint64_t trc_realtime_anchor_ns;

/* ---------------------------------------------------------------- wrapper bodies */
/* A traced call: trc_call_begin marks the thread busy (the tracer's own work and any call the
 * real function makes are not recorded) and reads the clock; trc_call_end restores the errno the
 * real call left and clears the mark. */
static inline uint64_t trc_call_begin(void) {
    trc_busy = 1;
    return trc_clock();
}
static inline void trc_call_end(int err) {
    trc_busy = 0;
    errno = err;
}

/* ---------------------------------------------------------------- ring.c */
trc_thread *trc_thread_get(void);
/* Space for `size` bytes (multiple of 8) in t's ring, or NULL (dropped after ~2 s full). */
void *trc_reserve_slow(trc_thread *t, uint32_t size);
static inline void *trc_reserve(trc_thread *t, uint32_t size) {
    uint64_t off = t->head & t->mask;
    if (TRC_LIKELY(off + size <= t->cap && t->head + size + 8 - t->tail_cache <= t->cap))
        return t->ring + off;
    return trc_reserve_slow(t, size);
}
void trc_wake_batch(trc_thread *t);
/* Publishes a record: clears the next header slot, stores the header (release), advances. */
static inline void trc_publish(trc_thread *t, void *rec, uint64_t hdr) {
    uint32_t size = TRC_HDR_SIZE(hdr);
    *(uint64_t *)(t->ring + ((t->head + size) & t->mask)) = 0;
    __atomic_store_n((uint64_t *)rec, hdr, __ATOMIC_RELEASE);
    t->head += size;
    t->unwoken += size;
    if (TRC_UNLIKELY(t->unwoken >= trc_g.cfg.flush_bytes))
        trc_wake_batch(t);
}
uint64_t trc_new_id(trc_thread *t);
/* Appends one I/O event for the calling thread (called with trc_busy set). */
void trc_emit_io(int op, int fd, uint64_t fhash, uint64_t t0, uint64_t t1, int64_t offset,
                 int64_t count, int64_t ret, int64_t a1, int64_t a2, uint64_t h2);
/* Empties a ring of the parent's pending records in a fork child. */
void trc_ring_forget(trc_thread *t);
void trc_rings_fork_child(void);

/* ---------------------------------------------------------------- flush.c */
void trc_start_flusher(void);
void trc_wake_flusher(void);
/* Drains every ring into the file; final writes the summaries, the end event and closes it.
 * Caller holds flush_lock. */
void trc_flush_locked(int final);
/* Per-file state for a new output file (fork child, resume after a failed exec). */
void trc_flush_new_file(void);
void trc_flush_fork_child(void);
/* The flusher's descriptors: the wake eventfd and the "final flush done" pipe a signal handler
 * waits on (created at start, renewed after a failed exec, closed once the final flush is out). */
void trc_flush_init_fds(void);
void trc_flush_renew_done(void);
void trc_flush_done(void);
/* The application closed or overwrote one of our descriptors. */
void trc_fd_stolen(int fd);
int trc_move_high(int fd);

/* ---------------------------------------------------------------- mpi.c */
/* 1 once the MPI sibling library (libscaffold_trace_mpi.so) has attached to this process. */
int trc_mpi_present(void);

/* ---------------------------------------------------------------- core.c */
void trc_finalize(void);
void trc_resume(void);
int trc_active_bits(void);

/* ---------------------------------------------------------------- path.c */
uint64_t trc_hash(const void *p, size_t n);
void trc_hex16(uint64_t h, char out[17]);
void trc_paths_init(size_t max_paths);
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
/* Type of the file system holding an absolute path ("ext4", "lustre", ...; "unknown"), from the
 * mount table read once per process image (flusher side). */
const char *trc_fs_type(const char *abs);

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
static inline uint64_t trc_fd_hash(trc_fd *s) { return __atomic_load_n(&s->phash, __ATOMIC_RELAXED); }
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
/* Formats the records of one thread's drain: call trc_format_thread first, then one
 * trc_format_record per record; returns the X events appended. */
void trc_format_thread(trc_thread *t);
int trc_format_record(trc_buf *b, trc_thread *t, uint64_t hdr, const void *rec);
void trc_format_meta(trc_buf *b, const char *type, const char *name, const char *value_json,
                     pid_t tid);
void trc_format_fh(trc_buf *b, uint64_t h, const char *path, pid_t tid);
void trc_format_reset(void);

/* Where the fields of each event line end, for the fast encoder (linez.c): the formatter logs
 * one trc_line per event line it writes into the stage; trc_lines_take hands the log over and
 * starts a new one (call it whenever the stage text is written out). */
#define TRC_LINE_KEYS 256
#define TRC_LINE_MAX 2048
#define TRC_LINE_PIECES 16
typedef struct trc_line {
    uint32_t start;  /* offset of the line in the stage text */
    uint8_t key;     /* lines of one key share a layout (the op) */
    uint8_t npieces;
    uint16_t ends[TRC_LINE_PIECES]; /* end of each field, from the line start */
} trc_line;
const trc_line *trc_lines_take(size_t *n);

/* ---------------------------------------------------------------- sample.c */
/* Appends one system-metrics sample (two counter lines) to b (flusher side). */
void trc_sample(trc_buf *b);

/* ---------------------------------------------------------------- linez.c */
/* Largest member trc_linez_encode writes for n bytes of text. */
size_t trc_linez_bound(size_t n);
/* Encodes text[0..n) as one gzip member, modelling each described line on the previous line
 * of its key; returns the member size. */
size_t trc_linez_encode(const char *text, size_t n, const trc_line *lines, size_t nlines,
                        unsigned char *out);
void trc_summary_reset(size_t max_files);
void trc_summary_write(trc_buf *b, pid_t tid);

/* ---------------------------------------------------------------- wrap_*.c, annot.c */
void trc_mmap_reset(void);
void trc_annot_fork_child(trc_thread *t);
/* Appends a metadata record (TRC_REC_META or TRC_REC_PROC) for the calling thread. */
void trc_emit_meta(unsigned type, const char *key, const char *value);

#endif
