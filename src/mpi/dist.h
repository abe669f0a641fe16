/* dist: the MPI base (src/mpi). One `dist_world` per process (rank, size, communicator); a single
 * process started without mpirun is a valid 1-rank world (singleton init). The error agreement
 * here is what keeps a failure on one rank from hanging the others: every fallible collective
 * step ends with dist_agree(), which gives all ranks the same return code and the failing rank's
 * message.
 *
 * The product's collectives go through this module (the fractal library, the dataset, training,
 * the NCCL bootstrap of the CUDA backend); it includes no engine (nn/) header, so everything that
 * only needs MPI sits below the engine. On purpose outside it: src/trace (its PMPI wrappers are
 * MPI by nature), src/store (one-sided windows are its job) and src/parallel (non-blocking halo
 * exchanges with subarray datatypes and the overlapped gradient all-reduce, on communicators of
 * its own). The prefix stays `dist_`: a lower-case `mpi_` would collide with the Fortran
 * bindings' symbols (mpi_bcast, ...) that MPI libraries export. */
#ifndef SCAFFOLD_MPI_DIST_H
#define SCAFFOLD_MPI_DIST_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

/* The launcher that started this process, as its environment says. Launchers nest (mpirun or
 * Hydra's mpiexec inside an sbatch script or an srun step, whose variables the ranks inherit),
 * so the innermost one that sets a world size is the one that counts, in this order:
 *   Open MPI's mpirun   OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_RANK
 *   PMI (Hydra's mpiexec, or srun --mpi=pmi2)   PMI_SIZE, PMI_RANK
 *   flux run            FLUX_JOB_SIZE, FLUX_TASK_RANK
 *   srun                SLURM_STEP_NUM_TASKS (SLURM_NTASKS in a step without it), SLURM_PROCID
 *   PMIx alone          PMIX_RANK (a rank, no size)
 * Slurm's variables count only inside a job step (SLURM_STEP_NUM_TASKS or SLURM_STEP_ID set): a
 * batch script's own step carries SLURM_NTASKS and SLURM_PROCID=0 without having started
 * anything. Values that are not integers are ignored. */
typedef struct dist_launcher {
    char name[48];  /* "srun", "mpirun (Open MPI)", ...; "" when no launcher variable is set */
    char vars[160]; /* the variables read, "SLURM_STEP_NUM_TASKS=2, SLURM_PROCID=1" */
    int size, rank; /* -1 where the launcher does not say */
    int kind;       /* DIST_L_* */
} dist_launcher;
enum { DIST_L_NONE, DIST_L_OMPI, DIST_L_HYDRA, DIST_L_SRUN_PMI2, DIST_L_FLUX, DIST_L_SRUN,
       DIST_L_PMIX };

typedef struct dist_world {
    MPI_Comm comm;
    int rank;
    int size;
    int thread_level;       /* MPI thread support provided */
    dist_launcher launcher; /* what started the process, read before MPI_Init (which may set
                               some of the variables itself, e.g. a singleton's PMIX_RANK) */
} dist_world;

/* Fills `l` from the environment (`get` looks a variable up; NULL: getenv). */
void dist_launcher_detect(const char *(*get)(const char *), dist_launcher *l);

/* Compares MPI's world (size, rank) with the launcher's. 0 when they agree or the launcher says
 * nothing; else ERR_USAGE with one message naming the launcher, its size and MPI's, the
 * variables read and the fix for the MPI this binary is built with ("srun started 2 tasks but
 * MPI sees a world of 1: ... use srun --mpi=pmi2 ..."). */
int dist_launcher_check(const dist_launcher *l, int mpi_size, int mpi_rank);

/* The MPI this binary is built with: "Open MPI", "MPICH" or "MPI". */
const char *dist_mpi_name(void);

/* Initialises MPI (MPI_THREAD_MULTIPLE requested; the provided level is recorded) unless it
 * already is, and fills `w` for MPI_COMM_WORLD. Then checks the world against the launcher that
 * started the process (dist_launcher_check): on a mismatch MPI is finalised again, w->rank is the
 * launcher's rank of this process (so that the caller prints the message once, where it is 0)
 * and ERR_USAGE is returned on every process. 0, ERR_MPI or ERR_USAGE. */
int dist_init(dist_world *w, int *argc, char ***argv);

/* Fills `w` for an existing communicator (its rank and size; no launcher), so that code handed
 * a communicator (the NCCL bootstrap) reaches it through this module's collectives. */
void dist_world_of(dist_world *w, MPI_Comm comm);

/* Finalises MPI if dist_init initialised it. */
void dist_finalize(dist_world *w);

/* Collective. Combines every rank's local return code: if any rank failed, every rank returns
 * the failing code of the lowest failing rank and its err_msg() becomes that rank's message
 * (prefixed "rank R: " when it came from another rank). Returns 0 when all succeeded. */
int dist_agree(const dist_world *w, int rc);

/* Collective helpers that cannot fail in practice (MPI errors abort by default). */
void dist_barrier(const dist_world *w);
/* Collective. This node's CPU use, each rank passing the threads it computes with: the ranks on
 * the node, their threads, how many ranks run more threads than their affinity mask holds when
 * a launcher's binding narrowed that mask, the CPUs their masks cover together, and the most
 * CPUs a launcher process of theirs may use (what binding took away). 0 where unknown. */
typedef struct dist_node_cpu {
    int ranks, threads, over_bound, cpus, cpus_launcher;
} dist_node_cpu;
void dist_node_cpu_use(const dist_world *w, int threads, dist_node_cpu *out);
/* Collective: how many ranks of this node (this one included) have exactly this rank's affinity
 * mask, i.e. share its CPUs (unbound ranks all do). */
int dist_node_mask_sharing(const dist_world *w);
void dist_bcast(const dist_world *w, void *buf, size_t n, int root);
double dist_max_double(const dist_world *w, double v);
double dist_sum_double(const dist_world *w, double v);
long long dist_sum_ll(const dist_world *w, long long v);

/* In-place element-wise sums over every rank of `w`. Counts above 2^31 - 1 are split into
 * several collectives (MPI counts are int). */
void dist_sum_doubles(const dist_world *w, double *buf, size_t n);
void dist_sum_floats(const dist_world *w, float *buf, size_t n);
void dist_sum_u64(const dist_world *w, uint64_t *buf, size_t n);

/* Collective: rank r's n doubles at all[r * n] on `root` (all: size * n doubles there; ignored
 * elsewhere). */
void dist_gather_doubles(const dist_world *w, const double *mine, int n, double *all, int root);

/* Collective: rank r's n ints at all[r * n] on `root` (all: size * n ints there; ignored
 * elsewhere). */
void dist_gather_ints(const dist_world *w, const int *mine, int n, int *all, int root);
/* Collective: rank r's n doubles at all[displs[r]] on `root`, where counts[r] is rank r's n
 * (counts, displs and all are read on root only: every rank's count is known there first, e.g.
 * from dist_gather_ints). */
void dist_gatherv_doubles(const dist_world *w, const double *mine, int n, double *all,
                          const int counts[], const int displs[], int root);

/* Collective: the largest of every rank's v (signals, flags). */
int dist_max_int(const dist_world *w, int v);
/* In-place element-wise maximum of n ints (flags per item) over every rank of `w`. */
void dist_max_ints(const dist_world *w, int *buf, int n);
/* In-place element-wise maximum over every rank of `w`. */
void dist_max_doubles(const dist_world *w, double *buf, size_t n);

/* Collective. Every rank's bytes reach `root` in rank order (its own included), handed to
 * sink(ctx, rank, data, n, last) in pieces (last = 1 on a rank's final piece, which may be
 * empty); the root allocates nothing for it, so a stream of any size passes. After a sink
 * error the root drains the rest unseen. Returns the first sink error on the root, 0
 * elsewhere (agree on it). */
int dist_gather_stream(const dist_world *w, const void *buf, size_t n, int root,
                       int (*sink)(void *ctx, int rank, const char *data, size_t n, int last),
                       void *ctx);

/* The MPI standard version ("3.1") and the library's own first line of
 * MPI_Get_library_version ("Open MPI v4.1.4, ..."; "MPICH Version: 4.0"). */
void dist_mpi_info(char *standard, size_t ns, char *library, size_t nl);

/* Block partition of n items: this rank's [*lo, *hi). per = ceil(n/size). */
void dist_block(const dist_world *w, size_t n, size_t *lo, size_t *hi);

#endif
