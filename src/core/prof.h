/* prof: the profiler's one timer. Named regions nest on a stack per thread; each region's calls
 * and inclusive time accumulate in a calling-context tree per thread (merged over threads by
 * path when read), and each closed region is kept as one timeline event while its thread's event
 * buffer has room. The benchmark's `--profile` (src/train/profile.h) writes them as Caliper
 * `.cali` files, Chrome trace-event JSON and a text report.
 *
 * Cost: when recording is off, prof_begin and prof_end are one load and one predictable branch.
 * When on, two clock reads (CLOCK_MONOTONIC) and a walk of the current node's children; nothing
 * is allocated once a thread has its state (the starting thread gets it in prof_start, any other
 * thread at its first region).
 *
 *   prof_begin(PROF_EPOCH);
 *   ... work, nested regions ...
 *   prof_end(PROF_EPOCH);
 *
 * Contract: end every region on the thread that began it. An end closes the innermost open
 * region with that id and every region opened inside it (an early return that skipped their ends
 * loses nothing); an end with no open region of its id is ignored. The region table below is the
 * one list of the project's region names; prof_id() adds names made at run time (the U-Net's
 * blocks, "down_list.0"...). A name holds no '/' (paths are joined with it). */
#ifndef SCAFFOLD_CORE_PROF_H
#define SCAFFOLD_CORE_PROF_H

#include <stddef.h>
#include <stdint.h>

/* What a region is, as Caliper's attributes tell them apart: an annotated region ("region"), or
 * an MPI call ("mpi.function", what Caliper's profile.mpi records). */
typedef enum { PROF_KIND_REGION = 0, PROF_KIND_MPI = 1 } prof_kind;

/* X(ID, name, kind, where it is). Names follow upstream ScaFFold's Caliper regions where it has
 * them (batch_loop, update_loss, checkpoint, warmup, cleanup_or_resume, generate_figures); the
 * layer passes are named as bench/nn/bench_step --layer prints them. */
#define PROF_REGIONS(X)                                                                            \
    X(MAIN, "main", PROF_KIND_REGION, "the whole command")                                         \
    X(BENCHMARK, "benchmark", PROF_KIND_REGION, "bench_run: everything after the argument checks") \
    X(SETUP, "setup", PROF_KIND_REGION, "fractals, dataset, model, optimizer, loaders")            \
    X(CLEANUP_OR_RESUME, "cleanup_or_resume", PROF_KIND_REGION, "resume or clean the run folder")  \
    X(WARMUP, "warmup", PROF_KIND_REGION, "untimed warmup steps, state restored")                  \
    X(EPOCH, "epoch", PROF_KIND_REGION, "one epoch: training, validation, statistics, checkpoint") \
    X(BATCH_LOOP, "batch_loop", PROF_KIND_REGION, "the training batches of an epoch")              \
    X(LOADER_WAIT, "loader_wait", PROF_KIND_REGION, "waiting for the next batch (fetch)")          \
    X(MINIBATCH, "minibatch", PROF_KIND_REGION, "one optimizer step after its batch arrived")      \
    X(FORWARD, "forward", PROF_KIND_REGION, "the U-Net's forward pass")                            \
    X(LOSS, "loss", PROF_KIND_REGION, "loss and Dice (and their gradient in training)")            \
    X(BACKWARD, "backward", PROF_KIND_REGION, "the U-Net's backward pass")                         \
    X(RECOMPUTE, "recompute", PROF_KIND_REGION, "a block's forward again (checkpointing)")         \
    X(ALL_REDUCE, "all_reduce", PROF_KIND_REGION, "gradient all-reduce left after backward")       \
    X(OPTIMIZER, "optimizer", PROF_KIND_REGION, "gradient clipping and the update")                \
    X(UPDATE_LOSS, "update_loss", PROF_KIND_REGION, "the step's loss and Dice into the sums")      \
    X(VALIDATION, "validation", PROF_KIND_REGION, "the validation pass of an epoch")               \
    X(EPOCH_STATS, "epoch_stats", PROF_KIND_REGION, "sums over replicas, train_stats.csv row")     \
    X(CHECKPOINT, "checkpoint", PROF_KIND_REGION, "a checkpoint save (rank 0 writes)")             \
    X(CAPTURE, "capture", PROF_KIND_REGION, "the state copied for the save")                       \
    X(WRITE, "write", PROF_KIND_REGION, "the checkpoint files written")                            \
    X(CHECKPOINT_WRITER, "checkpoint_writer", PROF_KIND_REGION, "the async save thread")           \
    X(GENERATE_FIGURES, "generate_figures", PROF_KIND_REGION, "figures and the FOM (rank 0)")      \
    X(HALO_WAIT, "halo_wait", PROF_KIND_REGION, "waiting for a halo exchange (spatial shards)")    \
    X(GN_ALLREDUCE, "gn_allreduce", PROF_KIND_REGION, "GroupNorm sums over spatial shards")        \
    X(LOSS_ALLREDUCE, "loss_allreduce", PROF_KIND_REGION, "loss and Dice sums over shards")        \
    X(TO_LAYOUT, "to_channels_last", PROF_KIND_REGION, "the input to channels-last")               \
    X(CONV3D_FWD, "conv3d_fwd", PROF_KIND_REGION, "Conv3d k3 forward")                             \
    X(CONV3D_BWD_DATA, "conv3d_bwd_data", PROF_KIND_REGION, "Conv3d k3 input gradient")            \
    X(CONV3D_BWD_WEIGHT, "conv3d_bwd_weight", PROF_KIND_REGION, "Conv3d k3 weight gradient")       \
    X(CONVT3D_FWD, "convt3d_fwd", PROF_KIND_REGION, "ConvTranspose3d k2 s2 forward")               \
    X(CONVT3D_BWD_DATA, "convt3d_bwd_data", PROF_KIND_REGION, "ConvTranspose3d input gradient")    \
    X(CONVT3D_BWD_WEIGHT, "convt3d_bwd_weight", PROF_KIND_REGION,                                  \
      "ConvTranspose3d weight and bias gradient")                                                  \
    X(CONV1_FWD, "conv1_fwd", PROF_KIND_REGION, "the 1x1 output conv forward")                     \
    X(CONV1_BWD, "conv1_bwd", PROF_KIND_REGION, "the 1x1 output conv backward")                    \
    X(GNRELU_FWD, "gnrelu_fwd", PROF_KIND_REGION, "GroupNorm+ReLU forward (statistics)")           \
    X(GNRELU_APPLY, "gnrelu_apply", PROF_KIND_REGION, "GroupNorm+ReLU from saved statistics")      \
    X(GNRELU_BWD, "gnrelu_bwd", PROF_KIND_REGION, "GroupNorm+ReLU backward")                       \
    X(MAXPOOL_FWD, "maxpool_fwd", PROF_KIND_REGION, "MaxPool3d forward")                           \
    X(MAXPOOL_BWD, "maxpool_bwd", PROF_KIND_REGION, "MaxPool3d backward")                          \
    X(ROUND_BF16, "round_bf16", PROF_KIND_REGION, "tensors rounded to bf16 (torch_amp: 1)")        \
    X(BF16_STORE, "bf16_store", PROF_KIND_REGION, "conv outputs kept as bf16 and widened back")    \
    X(MPI_ALLREDUCE, "MPI_Allreduce", PROF_KIND_MPI, "")                                           \
    X(MPI_IALLREDUCE, "MPI_Iallreduce", PROF_KIND_MPI, "")                                         \
    X(MPI_WAITALL, "MPI_Waitall", PROF_KIND_MPI, "")                                               \
    X(MPI_BCAST, "MPI_Bcast", PROF_KIND_MPI, "")                                                   \
    X(MPI_BARRIER, "MPI_Barrier", PROF_KIND_MPI, "")

enum prof_fixed_id {
#define PROF_ENUM(id, name, kind, what) PROF_##id,
    PROF_REGIONS(PROF_ENUM)
#undef PROF_ENUM
        PROF_NFIXED
};

#define PROF_MAX_IDS 1024   /* fixed and run-time names together */
#define PROF_NAME_MAX 64    /* bytes of a name with its NUL */
#define PROF_MAX_DEPTH 64   /* deeper regions are timed by their enclosing one only */
#define PROF_MAX_THREADS 256

/* Nonzero while recording (read by the inline functions below; set by prof_start/prof_stop). */
extern int prof_on_;

void prof_begin_(int id);
void prof_end_(int id);

static inline void prof_begin(int id) {
    if (__builtin_expect(prof_on_, 0))
        prof_begin_(id);
}
static inline void prof_end(int id) {
    if (__builtin_expect(prof_on_, 0))
        prof_end_(id);
}
static inline int prof_active(void) {
    return __builtin_expect(prof_on_, 0);
}

/* The id of a region name, adding it to the table (thread-safe; callable whether recording or
 * not). A name is at most PROF_NAME_MAX - 1 bytes; a longer one, a name with '/', or a full
 * table gives the id of "(other)". */
int prof_id(const char *name, prof_kind kind);
const char *prof_name(int id);
prof_kind prof_kind_of(int id);

/* Starts recording, with time zero now. The calling thread's state is allocated here; each
 * thread keeps at most `events` timeline events (others count as dropped; <= 0: 200000).
 * 0 or ERR_NOMEM (recording stays off). Starting again while recording is a no-op. */
int prof_start(long events);

/* Stops recording and closes the calling thread's open regions at the current time. Other
 * threads must have closed theirs (joined, or idle between regions) before the data are read. */
void prof_stop(void);

/* Frees every thread's data and the run-time names (tests). Recording must be off. */
void prof_reset(void);

/* Nanoseconds since time zero on the monotonic clock, and the Unix time (us) of time zero. */
int64_t prof_now_ns(void);
long long prof_zero_unix_us(void);

/* Names the calling thread's timeline track ("main", "checkpoint_writer"). Only while recording;
 * the first call on a thread may allocate its state. */
void prof_thread_name(const char *name);

/* ---- reading (after prof_stop) ---------------------------------------------------------- */

/* The calling-context tree merged over threads by path, in preorder (a node's subtree follows
 * it; children in the order first entered). parent -1 for roots (each thread's outermost
 * regions). excl_ns = incl_ns minus the children's incl_ns. */
typedef struct prof_node {
    int id, parent, depth;
    uint64_t count;
    int64_t incl_ns, excl_ns;
} prof_node;

/* *out malloc'ed (free it); 0 or ERR_NOMEM. */
int prof_tree(prof_node **out, size_t *n);

/* The path of node i ("main/benchmark/epoch") into buf (names joined by '/'). */
void prof_path(const prof_node *nodes, size_t i, char *buf, size_t cap);

/* Timeline events of the threads that recorded (closed regions, times in ns from zero). */
typedef struct prof_event {
    int32_t id, depth;
    int64_t t0, t1;
} prof_event;

typedef struct prof_thread_view {
    const char *name; /* the thread's track name ("thread N" unless named) */
    int tid;          /* the kernel's thread id */
    const prof_event *events;
    size_t nevents;
    uint64_t dropped; /* events past the buffer */
} prof_thread_view;

int prof_nthreads(void);
void prof_thread_get(int i, prof_thread_view *v);

#endif
