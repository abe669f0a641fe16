/* metrics: everything the rules and reports need, computed from a loaded trace in a few passes.
 *
 * Views: whole run, per process, per file, per (file, process) and per time window. Time is
 * split into read / write / metadata / sync / other. Access patterns per (file, process) come
 * from the offsets (explicit pread/pwrite offsets, else a position tracked through open, seek,
 * read and write) with Darshan's definitions: consecutive = starts where the previous access
 * ended, sequential = starts at or after it, random = anything else. Overlap of I/O, compute,
 * data-loader waits and checkpoints uses per-process interval unions. Events on system paths
 * (/proc, /usr/lib, ...) are left out of every I/O figure unless the reader kept them. */
#ifndef SCAFFOLD_ANALYZE_METRICS_H
#define SCAFFOLD_ANALYZE_METRICS_H

#include "analyze/trace.h"

#include <stdint.h>

/* Darshan's access-size buckets: 0-100, 100-1K, 1K-10K, 10K-100K, 100K-1M, 1M-4M, 4M-10M,
 * 10M-100M, 100M-1G, 1G+ (upper bounds inclusive, as darshan-posix.c bins them). */
#define AN_NBUCKETS 10
extern const char *const an_bucket_names[AN_NBUCKETS];
int an_bucket_of(int64_t bytes);

enum { AN_T_READ, AN_T_WRITE, AN_T_META, AN_T_SYNC, AN_T_OTHER, AN_T_COUNT };

/* Time spans [s[i], e[i]) in start order, with a cursor for monotone queries (work.c): the
 * interval unions of metrics.c and the phase regions of work.c. */
typedef struct an_spans {
    int64_t *s, *e;
    size_t n, cap, cur;
} an_spans;

/* Appends [s, e). 0 or ERR_NOMEM. */
int an_spans_add(an_spans *l, int64_t s, int64_t e);
/* Frees the arrays (the struct itself is the caller's). */
void an_spans_free(an_spans *l);

typedef struct an_proc_stat {
    double span_s;          /* first event start to last event end */
    double mpi_s, mpi_wait_s; /* time in MPI calls; of it, waiting in collectives for the last
                               * arriver */
    uint64_t mpi_calls, mpi_last; /* MPI calls; collective instances this process arrived last at */
    double cpu_util;        /* CPU time (user+sys) / wall between counter samples, in cores;
                             * -1 when the trace has no CPU counters for the process */
    double cpu_want;        /* the same plus the time it waited for a CPU (run queue delay):
                             * >= 0.7 CPU-bound, <= 0.2 waiting (I/O, MPI, sleep) */
    double io_s;            /* union of I/O intervals */
    double t_s[AN_T_COUNT]; /* summed durations per I/O class */
    double compute_s, fetch_s, ckpt_s, comm_s; /* unions */
    double io_compute_overlap_s, fetch_compute_overlap_s, io_ckpt_overlap_s;
    double unoverlapped_io_s, stall_s, io_nockpt_s;
    uint64_t read_bytes, write_bytes, ckpt_write_bytes, ops;
    uint64_t epochs;
} an_proc_stat;

typedef struct an_file_stat {
    uint32_t file;
    uint64_t ops, reads, writes, metas, opens, stats;
    uint64_t bytes_read, bytes_written;
    uint64_t seq, consec, random, classified;
    double t_s[AN_T_COUNT], time_s;
    uint32_t nprocs, first_proc;
    int64_t read_extent; /* max(offset + bytes) over reads with a known offset */
    uint64_t bytes_read_known;
    int is_ckpt;
    int fs; /* AN_FS_* */
} an_file_stat;

typedef struct an_window {
    double t_s[AN_T_COUNT]; /* process-seconds of I/O in the window */
    double compute_s, fetch_s, ckpt_s;
    uint64_t bytes_read, bytes_written, ops;
} an_window;

/* One MPI call name: calls, time, bytes, and for collectives the time ranks waited for the
 * last arriver and the mean arrival skew of the instances matched on every member. */
typedef struct an_mpi_call {
    uint32_t name;
    int kind; /* AN_MPIK_* */
    uint64_t calls, instances;
    double time_s, wait_s, skew_sum_s;
    uint64_t bytes;
} an_mpi_call;

enum { AN_MPIK_OTHER, AN_MPIK_COLL, AN_MPIK_WAIT, AN_MPIK_INIT, AN_MPIK_FINALIZE, AN_MPIK_IO };

/* What the last rank into a collective was doing between its previous MPI call and its arrival
 * (the seed's "the barrier stall and the checkpoint cost are the same phenomenon"). */
enum { AN_ACT_CKPT, AN_ACT_WRITE, AN_ACT_READ, AN_ACT_META, AN_ACT_COMPUTE, AN_ACT_UNTRACED,
       AN_ACT_COUNT };
extern const char *const an_activity_names[AN_ACT_COUNT];

typedef struct an_mpi_link {
    uint32_t proc;       /* the late process */
    int activity;        /* AN_ACT_* */
    uint32_t coll;       /* name id of the collective */
    uint32_t file;       /* the file of that activity's I/O with the most time, 0 none */
    uint64_t instances;  /* instances of the group; of all instances where ranks waited */
    uint64_t waited_instances;
    double wait_s;       /* the other ranks' waits in those instances */
    double activity_s;   /* the late process's time in that activity before them */
} an_mpi_link;

typedef struct an_metrics {
    /* run */
    int64_t t0_us, t1_us;
    double wall_s, proc_time_s; /* proc_time_s = sum of process spans */
    size_t nprocs, nhosts, nthreads, nfiles_io, nevents, nio_events, nignored_events;
    /* I/O time, three ways (the report labels each):
     *   io_time_s       sum of the durations of every I/O call over all threads and processes
     *                   (t_s[] splits it by class): 30 threads reading for 1 s count 30 s;
     *   io_union_s      sum over processes of each process's union of I/O intervals (threads
     *                   of a process count once), compared with proc_time_s;
     *   io_wall_union_s wall-clock union of every I/O interval of the job, compared with wall_s. */
    double t_s[AN_T_COUNT], io_time_s, io_union_s, io_wall_union_s;
    uint64_t ops[AN_T_COUNT], bytes_read, bytes_written;
    uint64_t hist_read[AN_NBUCKETS], hist_write[AN_NBUCKETS];
    uint64_t data_ops_known_size, small_ops;  /* <= 1 MiB, Drishti's "small" */
    double small_time_s;                      /* time of data ops < 64 KiB (op-count bound) */
    double io_share;                          /* io_union_s / proc_time_s */
    int io_meaningful;                        /* io_share >= 5% */
    /* interfaces */
    uint64_t stdio_bytes, posix_bytes, mpiio_bytes, stdio_ops, posix_ops;
    double stdio_time_s, posix_time_s;
    /* access pattern (reads and writes with a known offset) */
    uint64_t read_seq, read_consec, read_random, read_classified;
    uint64_t write_seq, write_consec, write_random, write_classified;
    /* annotations */
    int has_compute, has_fetch, has_ckpt_annot, has_epochs;
    double compute_s, fetch_s, stall_s, unoverlapped_io_s, io_compute_overlap_s;
    double compute_util; /* compute union / span, over processes with compute */
    double exposed_io_s; /* I/O the application waits for: unoverlapped I/O when compute is
                          * annotated, else the I/O union (threads' I/O counted once) */
    /* checkpoints */
    uint64_t ckpt_events, ckpt_bytes;
    double ckpt_time_s;       /* max over processes of the checkpoint union (job-level stall) */
    double ckpt_write_time_s; /* summed durations of checkpoint writes */
    double ckpt_bw;           /* ckpt_bytes / ckpt_time_s (bytes/s), 0 when unknown */
    /* epochs (from the process with the most epoch events) */
    uint64_t epochs;
    double epoch_mean_s, epoch_min_s, epoch_max_s, epoch_first_s, epoch_last_s;
    /* stragglers (per-process I/O time outside checkpoints) */
    double straggler_ratio, io_max_s, io_median_s, io_min_s;
    uint32_t straggler_proc;
    double bytes_imbalance; /* (max - min) / max of per-process non-checkpoint bytes */
    uint32_t bytes_max_proc, bytes_min_proc;
    /* metadata */
    uint64_t meta_records_over_30s; /* (file, process) records with > 30 s of metadata */
    double meta_max_record_s;
    uint32_t meta_max_file, meta_max_proc;
    uint64_t repeated_stats;        /* stat-like calls on a (file, process) beyond the first */
    uint64_t redundant_read_bytes;  /* bytes read beyond each file's read extent */
    /* classification */
    int op_count_bound;  /* 1 op-count-bound, 0 bandwidth-bound */
    double mean_xfer;    /* bytes per data op */
    /* files */
    size_t nshared_files, nhdf5_files, nnetcdf_files, nckpt_files;
    /* The file system that carries the I/O: the class (AN_FS_*) with the most I/O time, its
     * name, its share of the I/O time, one of its files, and how the class was known
     * (AN_FSHOW_*: recorded by the tracer, --fs-type, or guessed from the path). */
    int fs, fs_how;
    const char *fs_hint;
    double fs_share;
    uint32_t fs_example;
    /* MPI (cat MPI/MPIIO events: the tracer's MPI sibling, dftracer's MPI layer) */
    int has_mpi;
    double mpi_s;          /* MPI call time summed over processes */
    double mpi_proc_time_s; /* spans of the processes with MPI events */
    double coll_wait_s;    /* waiting for the last arriver in collectives, summed over ranks */
    uint64_t coll_instances, coll_complete; /* collective instances; seen on every member */
    an_mpi_call *mpi_calls; /* per call name, by time descending */
    size_t nmpi_calls;
    an_mpi_link link;      /* the dominant linked cause (link.instances == 0: none) */
    /* the measured phase: the training phase (epochs), else MPI_Init to MPI_Finalize, else the
     * whole run; bottlenecks are not ranked when it is too short (run.short_phase) */
    double phase_s;
    const char *phase_what;
    /* CPU from the system-metrics counters */
    int has_cpu;
    size_t ncpu_bound, ncpu_waiting, ncpu_procs;
    /* views */
    an_proc_stat *procs;   /* [nprocs] */
    an_file_stat *files;   /* [nfiles], sorted by time_s descending */
    size_t nfiles;
    an_window *windows;
    size_t nwindows;
    double window_s;
} an_metrics;

/* Computes the metrics. window_s <= 0 picks a window giving about 60 windows.
 * 0 or ERR_NOMEM. */
int an_metrics_compute(const an_trace *t, double window_s, an_metrics *m);

/* Share of process time that I/O class k (AN_T_*) exposes to the application: its part of the
 * summed I/O time, scaled to the exposed I/O time (so 30 concurrent reader threads or reads
 * hidden under compute do not count as 30x or as stalls). */
static inline double an_class_share(const an_metrics *m, int k) {
    if (m->io_time_s <= 0 || m->proc_time_s <= 0)
        return 0;
    return m->t_s[k] / m->io_time_s * m->exposed_io_s / m->proc_time_s;
}
void an_metrics_free(an_metrics *m);

/* mpistat.c: the MPI pass (per call and rank, collective instances and their wait skew, the
 * linked cause), the measured phase and CPU-bound versus waiting from the counters. Called by
 * an_metrics_compute after its I/O passes. 0 or ERR_NOMEM. */
int an_metrics_mpi(const an_trace *t, an_metrics *m);
/* 1 for a checkpoint-like path (checkpoint, ckpt, .pt, .pth, .safetensors). */
int an_is_ckpt_path(const char *p);

#endif
