/* trace: reading dftracer-format traces into columnar memory.
 *
 * Accepts `.pfw` and `.pfw.gz` files (gzip detected by magic, multi-member streams decoded member
 * after member), directories (every *.pfw / *.pfw.gz below, recursively) and shell globs. Files
 * are parsed in parallel (one worker thread per file, up to `threads`), each into its own chunk
 * with private string tables; chunks are then merged into one time-sorted set of columns with
 * global string tables. Handles dftracer v1 (all values as strings, inline fname/hostname,
 * numeric hashes), v1.0.5 (small integer hashes), v2 (16-hex string hashes, FH/HH/SH/PR
 * metadata) and our own tracer (args on, `bytes` for fread/fwrite). Truncated gzip streams and
 * malformed lines are reported per file and everything read before them is kept.
 *
 * Memory per event: 4 x int64 (ts, dur, offset, bytes) + 5 x uint32 + 2 x uint8 = 54 bytes. */
#ifndef SCAFFOLD_ANALYZE_TRACE_H
#define SCAFFOLD_ANALYZE_TRACE_H

#include "analyze/strtab.h"

#include <stddef.h>
#include <stdint.h>

/* Operation class of an event (column `op`). I/O classes follow DFAnalyzer's POSIX_IO_CAT
 * lists, extended with the 64-bit and vector variants it misses (pread64, preadv, openat...).
 * Annotation classes follow dftracer's AI categories and DLIO's names. */
enum an_op {
    AN_OP_NONE = 0,   /* an annotation we do not classify */
    AN_OP_READ,
    AN_OP_WRITE,
    AN_OP_META,
    AN_OP_SYNC,
    AN_OP_PCTL,       /* fork/exec/exit */
    AN_OP_IO_OTHER,   /* mmap, dup, ... */
    AN_OP_COMPUTE,    /* compute: forward/backward/step; DLIO ai_framework compute */
    AN_OP_FETCH,      /* dataloader: fetch (the consumer waiting for data) */
    AN_OP_CKPT,       /* checkpoint: capture/restart */
    AN_OP_COMM,       /* comm: all_reduce, barrier, ... */
    AN_OP_EPOCH,      /* pipeline: epoch */
    AN_OP_TRAIN,      /* pipeline: train */
    AN_OP_EVAL,       /* pipeline: evaluate/test */
    AN_OP_TRACER,     /* dftracer start/end */
    AN_OP_MPI,        /* an MPI call (cat MPI); MPI-IO calls are I/O classes with AN_F_MPIIO */
    AN_OP_COUNT
};

/* Bits of the `flags` column. */
#define AN_F_POSIX 0x01u
#define AN_F_STDIO 0x02u
#define AN_F_MPIIO 0x04u
#define AN_F_AGG 0x08u      /* an aggregated record: it stands for `offset` calls (dft_cnt) */
#define AN_F_APPEND 0x10u   /* open with O_APPEND: the position is the file end */
#define AN_F_SEEKPOS 0x20u  /* seek: `offset` holds the resulting position */
#define AN_F_IGNORED 0x40u  /* the file matches a system path (/proc, /usr/lib, ...) */

#define AN_IS_IO(op) ((op) >= AN_OP_READ && (op) <= AN_OP_IO_OTHER)

/* Counter values the reader keeps (the tracer's system-metrics sampler, docs/trace.md). */
enum { AN_CTR_CPU_USER_US, AN_CTR_CPU_SYS_US, AN_CTR_RSS_KB, AN_CTR_READ_BYTES, AN_CTR_WRITE_BYTES,
       AN_CTR_VCSW, AN_CTR_IVCSW, AN_CTR_LOAD1_MILLI, AN_CTR_MEM_AVAIL_KB, AN_CTR_RUN_DELAY_US,
       AN_NCTR };


/* File-system classes: what the tuning strategies of the seed's FS_TYPE tables are gated on.
 * LOCAL covers node-local disks (ext4, xfs, btrfs, overlay...), NFS the single-server network
 * file systems (nfs, cifs, 9p), TMPFS memory-backed ones. */
enum { AN_FS_UNKNOWN, AN_FS_LUSTRE, AN_FS_GPFS, AN_FS_BEEGFS, AN_FS_NFS, AN_FS_LOCAL, AN_FS_TMPFS,
       AN_FS_COUNT };
extern const char *const an_fs_names[AN_FS_COUNT];
/* Class of a file-system type as the mount table names it ("ext4", "lustre", "nfs4") or of a
 * class name ("local", "lustre"); -1 when the name is not known. */
int an_fs_class(const char *type, size_t n);
/* Class guessed from a path's mount-like prefix (/p/lustre3, /gpfs, /nfs, /dev/shm, /tmp...),
 * for traces that do not record the type. */
int an_fs_infer(const char *path);

typedef struct an_proc {
    uint32_t host;  /* id in hosts */
    int64_t pid;
    int rank;       /* -1 when unknown */
    uint32_t nthreads;
    uint64_t records;  /* records as dftracer_stats counts them (every line but metadata) */
    char exe[48];      /* executable name (start event's exec_hash through SH), "" unknown: of
                        * the latest image when the process exec'd (a launcher's forked child
                        * that became a rank is a rank) */
    int64_t exe_ts;    /* start time of that image */
    int launcher;      /* mpirun, srun, prterun, orted, slurmstepd...: not a rank */
} an_proc;

/* One sample of the tracer's system-metrics sampler (a counter record, ph 2 / "C"). */
typedef struct an_counter {
    uint32_t proc;
    int64_t ts;
    int64_t v[AN_NCTR];
    unsigned has; /* 1 << AN_CTR_* */
} an_counter;

/* One input file and what happened when reading it. */
typedef struct an_input {
    char *path;
    uint64_t events;       /* events kept (X and C) */
    uint64_t lines;        /* lines seen */
    uint64_t malformed;    /* lines that were not a JSON object we could read */
    uint64_t first_bad_line;
    uint64_t members;      /* gzip members decoded (0 for plain text) */
    uint64_t unknown_meta; /* metadata events of an unknown kind (ignored) */
    uint64_t out_of_range; /* events skipped: a number beyond int64, a negative or huge time */
    uint64_t first_oor_line;
    uint64_t calls;        /* complete events + the calls aggregated records stand for */
    uint64_t num_events;   /* what the end record(s) declare, 0 when absent */
    int has_end, shape2;   /* an end record was read; the file is in dftracer 2.x shape */
    int has_count;         /* the end record carried num_events */
    int ours;              /* written by libscaffold_trace.so (start version "scaffold-trace") */
    int empty;             /* 0 bytes (dftracer leaves one per forked child that did nothing) */
    int truncated;         /* the file ended inside a gzip member or a line */
    int failed;            /* could not be opened/read at all */
    char note[256];        /* the problem, for the report ("" if none) */
} an_input;

/* Largest |ts| and dur kept (µs); events beyond are malformed, so sums of two stay in int64. */
#define AN_TS_MAX (INT64_C(1) << 61)

typedef struct an_trace {
    size_t n;
    int64_t *ts;      /* µs since the Unix epoch, sorted ascending */
    int64_t *dur;     /* µs */
    int64_t *offset;  /* file offset of a read/write, position after a seek; -1 unknown.
                       * Annotations: the items (samples) the region handled, its
                       * `batch_size` arg; -1 unknown */
    int64_t *bytes;   /* bytes moved by a read/write; annotations: their `bytes` arg; -1 unknown */
    uint32_t *name;   /* id in names */
    uint32_t *cat;    /* id in cats */
    uint32_t *file;   /* id in files (0 = no file) */
    uint32_t *proc;   /* index in procs */
    uint32_t *tid;
    uint8_t *op;      /* enum an_op */
    uint8_t *flags;   /* AN_F_* */
    an_strtab names, cats, files, hosts;
    uint8_t *file_ignored; /* per file id: 1 when the path is a system path */
    an_strtab fstypes;     /* file-system types recorded by the tracer (FH "fs") */
    uint32_t *file_fstype; /* per file id: id in fstypes, 0 = not recorded */
    size_t nfile_fstype;
    uint8_t *file_fs;      /* per file id: AN_FS_* from --fs-type, the recorded type, or the path */
    uint8_t *file_fs_how;  /* per file id: AN_FSHOW_* (where file_fs came from) */
    an_proc *procs;
    size_t nprocs;
    an_counter *ctrs;      /* counter samples, in time order per process */
    size_t nctrs;
    /* records per lower-cased category, as dftracer_stats counts them */
    an_strtab rec_cats;
    uint64_t *rec_cat_n;
    uint64_t records, out_of_range;
    an_input *inputs;
    size_t ninputs;
    /* Clock skew between hosts: std-dev of per-host first timestamps (seconds), and whether
     * it exceeds the 30 s DFAnalyzer warning threshold. */
    double host_start_stddev_s;
    int clock_skew;
    uint64_t total_lines, total_malformed, metadata_events;
    double load_seconds;
    double phase_s[3]; /* load_seconds split: decode+parse, sort, merge */
} an_trace;

enum { AN_FSHOW_NONE, AN_FSHOW_PATH, AN_FSHOW_TRACE, AN_FSHOW_USER };

typedef struct an_read_opts {
    int threads;         /* worker threads; <= 0 means one per CPU */
    int include_system;  /* keep /proc, /usr/lib, ... files in the I/O metrics */
    const char *const *fs_types; /* "PREFIX=TYPE" overrides (longest prefix wins) */
    int nfs_types;
    int64_t part_bytes;  /* bytes per part of a large file; 0 = the default (tests set it small) */
} an_read_opts;

/* Calls event i stands for: an aggregated record's count (kept in its offset column), else 1. */
static inline uint64_t an_calls(const an_trace *t, size_t i) {
    return (t->flags[i] & AN_F_AGG) && t->offset[i] > 0 ? (uint64_t)t->offset[i] : 1;
}

/* Checks one --fs-type value ("PREFIX=TYPE"); 0 or ERR_USAGE naming the problem. */
int an_fs_override_check(const char *spec);

/* Expands `paths` (files, directories, globs) into a sorted list of trace files.
 * *out is malloc'ed (free each string and the array). 0, or ERR_USAGE when a path matches
 * nothing or a directory holds no trace (the message names it). */
int an_expand_inputs(const char *const *paths, int npaths, char ***out, size_t *nout);

/* Reads every file into `t` (zeroed by the callee). Per-file problems (truncation, bad lines,
 * unreadable files) are recorded in t->inputs and do not fail the call unless no event at all
 * could be read (ERR_FORMAT, message naming the files). */
int an_trace_read(an_trace *t, char *const *files, size_t nfiles, const an_read_opts *opts);

/* Frees the trace (NULL-safe). */
void an_trace_free(an_trace *t);

/* Kind of record, from "ph": dftracer 1.x letters or 2.x integers (1 complete "X", 2 counter "C",
 * 3 aggregated, 4 metadata "M"). A 1.x "C" line carrying aggregate fields (dft_cnt, or count with
 * dur_sum: early 2.x aggregation) is AGGREGATED; without them it is a COUNTER sample. */
enum { AN_PH_OTHER, AN_PH_COMPLETE, AN_PH_COUNTER, AN_PH_AGG, AN_PH_META };

/* Parses one JSON line into `t`-independent fields; exposed for unit tests. Returns 1 if the
 * line is an event or metadata object, 0 for a line to skip ('[', ']', blank), -1 if malformed. */
typedef struct an_rawev {
    const char *name, *cat, *ph;
    size_t name_n, cat_n, ph_n;
    int ph_kind;  /* AN_PH_* */
    int ph_int;   /* "ph" was an integer: dftracer 2.x shape */
    int64_t pid, tid, ts, dur, type;
    int has_ts, has_dur, has_pid, has_type;
    /* a number of the line (ts, dur, pid, tid or an arg the reader uses) does not fit in int64,
     * or a time is negative or beyond AN_TS_MAX: the event is skipped and counted */
    int out_of_range;
    const char *hhash, *fhash, *fname, *hostname, *m_name, *m_value, *m_fs;
    size_t hhash_n, fhash_n, fname_n, hostname_n, m_name_n, m_value_n, m_fs_n;
    const char *exec_hash, *comm, *version;
    size_t exec_hash_n, comm_n, version_n;
    int64_t ret, offset, count, size, bytes, flags, whence, dur_sum, size_sum, ret_sum, ccount;
    int64_t items; /* an annotation's batch_size: samples the region handled */
    int64_t dft_cnt, adur, num_events, comm_size;
    int64_t ctr[AN_NCTR];
    unsigned has; /* AN_RAW_HAS_* bits for the numeric args */
    unsigned ctr_has; /* 1 << AN_CTR_* */
    int name_esc, fname_esc, m_name_esc;
} an_rawev;

#define AN_RAW_RET 0x001u
#define AN_RAW_OFFSET 0x002u
#define AN_RAW_COUNT 0x004u
#define AN_RAW_SIZE 0x008u
#define AN_RAW_BYTES 0x010u
#define AN_RAW_FLAGS 0x020u
#define AN_RAW_WHENCE 0x040u
#define AN_RAW_DURSUM 0x080u
#define AN_RAW_SIZESUM 0x100u
#define AN_RAW_RETSUM 0x200u
#define AN_RAW_CCOUNT 0x400u
#define AN_RAW_ITEMS 0x800u
#define AN_RAW_DFTCNT 0x1000u
#define AN_RAW_ADUR 0x2000u   /* args.dur: an aggregated record's duration when every call took it */
#define AN_RAW_NUMEV 0x4000u  /* end record: num_events */
#define AN_RAW_COMMSZ 0x8000u /* MPI events: comm_size */

int an_parse_line(const char *p, const char *end, an_rawev *ev);

/* Decodes JSON string escapes of s[0..n) into out (cap bytes). Returns the decoded length. */
size_t an_json_unescape(const char *s, size_t n, char *out, size_t cap);

/* Classifies an event by name and category (both as given in the trace). Sets *flags bits
 * AN_F_POSIX/STDIO/MPIIO. */
int an_classify(const char *name, size_t name_n, const char *cat, size_t cat_n, unsigned *flags);

/* 1 when an executable name is a launcher (mpirun, srun, prterun, orted, slurmstepd...). */
int an_is_launcher(const char *exe);

/* Display label of a process: "rank N", "launcher NAME (host:pid)" or "host:pid". */
void an_proc_label(const an_trace *t, uint32_t proc, char *buf, size_t cap);

#endif
