/* dist: MPI world setup, error agreement and small collectives (see dist.h). */
#include "mpi/dist.h"

#include "core/err.h"
#include "core/prof.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int dist_we_initialised;

const char *dist_mpi_name(void) {
#if defined(MPICH_VERSION)
    return "MPICH";
#elif defined(OMPI_MAJOR_VERSION)
    return "Open MPI";
#else
    return "MPI";
#endif
}

static const char *env_get(const char *name) {
    return getenv(name);
}

/* A variable's value as a non-negative int, -1 when unset or not an integer. */
static int env_int(const char *(*get)(const char *), const char *name) {
    const char *v = get(name);
    if (!v || !*v)
        return -1;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    return errno || *end || x < 0 || x > 1 << 30 ? -1 : (int)x;
}

/* Records launcher `kind` from its size and rank variables (size_var may be NULL). Returns 1 when
 * the launcher is recorded (a size, or a rank for a launcher without one). */
static int launcher_from(const char *(*get)(const char *), dist_launcher *l, int kind,
                         const char *name, const char *size_var, const char *rank_var) {
    int size = size_var ? env_int(get, size_var) : -1, rank = env_int(get, rank_var);
    if (size_var ? size < 1 : rank < 0)
        return 0;
    l->kind = kind;
    l->size = size;
    l->rank = rank;
    snprintf(l->name, sizeof l->name, "%s", name);
    int o = 0;
    if (size_var)
        o = snprintf(l->vars, sizeof l->vars, "%s=%d", size_var, size);
    if (rank >= 0)
        snprintf(l->vars + o, sizeof l->vars - (size_t)o, "%s%s=%d", o ? ", " : "", rank_var, rank);
    return 1;
}

void dist_launcher_detect(const char *(*get)(const char *), dist_launcher *l) {
    memset(l, 0, sizeof *l);
    l->size = l->rank = -1;
    if (!get)
        get = env_get;
    if (launcher_from(get, l, DIST_L_OMPI, "mpirun (Open MPI)", "OMPI_COMM_WORLD_SIZE",
                      "OMPI_COMM_WORLD_RANK"))
        return;
    /* PMI_SIZE: Hydra's mpiexec, or srun's pmi2 plugin (which also sets PMI_JOBID, for a step
     * of as many tasks). */
    int pmi = env_int(get, "PMI_SIZE");
    int srun_pmi2 = pmi > 0 && get("PMI_JOBID") && env_int(get, "SLURM_STEP_NUM_TASKS") == pmi;
    if (launcher_from(get, l, srun_pmi2 ? DIST_L_SRUN_PMI2 : DIST_L_HYDRA,
                      srun_pmi2 ? "srun (PMI-2)" : "mpiexec (Hydra, PMI)", "PMI_SIZE", "PMI_RANK"))
        return;
    if (launcher_from(get, l, DIST_L_FLUX, "flux run", "FLUX_JOB_SIZE", "FLUX_TASK_RANK"))
        return;
    if (launcher_from(get, l, DIST_L_SRUN, "srun", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID"))
        return;
    if (get("SLURM_STEP_ID") &&
        launcher_from(get, l, DIST_L_SRUN, "srun", "SLURM_NTASKS", "SLURM_PROCID"))
        return;
    launcher_from(get, l, DIST_L_PMIX, "a PMIx launcher", NULL, "PMIX_RANK");
}

/* What to do about a launcher that this binary's MPI does not follow. */
static const char *launcher_fix(int kind) {
    const int mpich = !strcmp(dist_mpi_name(), "MPICH"), ompi = !strcmp(dist_mpi_name(), "Open MPI");
    switch (kind) {
    case DIST_L_SRUN:
    case DIST_L_SRUN_PMI2:
    case DIST_L_PMIX:
        return mpich ? "use srun --mpi=pmi2 with this MPICH build"
               : ompi ? "use srun --mpi=pmix with this Open MPI build (srun --mpi=list shows "
                        "the plugins)"
                      : "use the srun --mpi plugin of the MPI this binary is built with";
    case DIST_L_OMPI:
        return mpich ? "this MPICH build is started by Open MPI's mpirun; use mpirun.mpich (or "
                       "srun --mpi=pmi2)"
                     : "start it with the mpirun of the MPI it is built with";
    case DIST_L_HYDRA:
        return ompi ? "this Open MPI build is started by MPICH's mpiexec; use mpirun.openmpi "
                      "(or srun --mpi=pmix)"
                    : "start it with the mpiexec of the MPI it is built with";
    case DIST_L_FLUX:
        return ompi ? "use flux run -o pmi=pmix with this Open MPI build"
                    : "use flux run with the PMI this binary's MPI speaks (simple PMI for MPICH)";
    }
    return "start it with the launcher of the MPI it is built with";
}

int dist_launcher_check(const dist_launcher *l, int mpi_size, int mpi_rank) {
    if (l->kind == DIST_L_NONE)
        return 0;
    const int task = l->kind == DIST_L_SRUN || l->kind == DIST_L_SRUN_PMI2;
    const char *what = task ? "task" : "process";
    if (l->size > 0 && l->size != mpi_size)
        return err_set(ERR_USAGE,
                       "%s started %d %s but %s sees a world of %d: this binary's MPI did not "
                       "join the launcher's world (%s); %s",
                       l->name, l->size, task ? "tasks" : "processes", dist_mpi_name(), mpi_size,
                       l->vars,
                       launcher_fix(l->kind));
    if (l->rank >= 0 && l->rank != mpi_rank)
        return err_set(ERR_USAGE,
                       "%s started this process as %s %d but %s gives it rank %d of %d: this "
                       "binary's MPI did not join the launcher's world (%s); %s",
                       l->name, what, l->rank, dist_mpi_name(), mpi_rank, mpi_size, l->vars,
                       launcher_fix(l->kind));
    return 0;
}
/* An MPI call as a profile region of its own (Caliper's profile.mpi: time per MPI function). */
#define TIMED(id, call)                                                                            \
    do {                                                                                           \
        prof_begin(PROF_##id);                                                                     \
        call;                                                                                      \
        prof_end(PROF_##id);                                                                       \
    } while (0)

int dist_init(dist_world *w, int *argc, char ***argv) {
    /* Read before MPI_Init, which may set some of these variables itself. */
    dist_launcher l;
    dist_launcher_detect(NULL, &l);
    w->launcher = l;
    int inited = 0;
    MPI_Initialized(&inited);
    w->thread_level = MPI_THREAD_SINGLE;
    if (!inited) {
        if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &w->thread_level) != MPI_SUCCESS)
            return err_set(ERR_MPI, "MPI_Init_thread failed");
        dist_we_initialised = 1;
    } else {
        MPI_Query_thread(&w->thread_level);
    }
    w->comm = MPI_COMM_WORLD;
    MPI_Comm_rank(w->comm, &w->rank);
    MPI_Comm_size(w->comm, &w->size);
    /* An MPI that did not join the launcher's world runs as N independent singletons, each
     * believing it is the whole run (two run folders, a wrong result): every process refuses. */
    int rc = dist_launcher_check(&l, w->size, w->rank);
    if (rc) {
        if (l.rank >= 0)
            w->rank = l.rank;
        dist_finalize(w);
    }
    return rc;
}

void dist_world_of(dist_world *w, MPI_Comm comm) {
    memset(w, 0, sizeof *w);
    w->comm = comm;
    MPI_Comm_rank(comm, &w->rank);
    MPI_Comm_size(comm, &w->size);
    MPI_Query_thread(&w->thread_level);
}

void dist_finalize(dist_world *w) {
    (void)w;
    int fin = 0;
    MPI_Finalized(&fin);
    if (dist_we_initialised && !fin)
        MPI_Finalize();
}

int dist_agree(const dist_world *w, int rc) {
    if (w->size == 1)
        return rc;
    /* Lowest failing rank wins: encode (failed ? rank : size). */
    int mine = rc ? w->rank : w->size, first = w->size;
    TIMED(MPI_ALLREDUCE, MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, w->comm));
    if (first == w->size)
        return 0;
    int code = rc;
    char msg[ERR_MSG_MAX];
    if (w->rank == first)
        snprintf(msg, sizeof msg, "%s", err_msg());
    TIMED(MPI_BCAST, MPI_Bcast(&code, 1, MPI_INT, first, w->comm));
    TIMED(MPI_BCAST, MPI_Bcast(msg, sizeof msg, MPI_CHAR, first, w->comm));
    if (w->rank != first)
        err_set(code, "%s", msg);
    return code;
}

/* CPUs in pid's affinity mask, OR-ed into *set when set is not NULL; 0 if unknown. */
static int affinity_cpus(pid_t pid, cpu_set_t *set) {
    cpu_set_t s;
    CPU_ZERO(&s);
    if (sched_getaffinity(pid, sizeof s, &s) != 0)
        return 0;
    if (set)
        CPU_OR(set, set, &s);
    return CPU_COUNT(&s);
}

void dist_node_cpu_use(const dist_world *w, int threads, dist_node_cpu *out) {
    memset(out, 0, sizeof *out);
    cpu_set_t mask;
    CPU_ZERO(&mask);
    const int own = affinity_cpus(0, &mask);
    /* The launcher's mask (mpirun's daemon, srun's step daemon, the shell): what binding took
     * away from this rank. */
    const int parent = affinity_cpus(getppid(), NULL);
    /* bound: more threads than the mask, which a launcher narrowed (else: too many threads) */
    long long v[4] = {1, threads, own > 0 && threads > own && own < parent, parent};
    MPI_Comm node;
    if (MPI_Comm_split_type(w->comm, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_LONG_LONG, MPI_SUM, node);
        MPI_Allreduce(MPI_IN_PLACE, v + 3, 1, MPI_LONG_LONG, MPI_MAX, node);
        MPI_Allreduce(MPI_IN_PLACE, &mask, (int)sizeof mask, MPI_BYTE, MPI_BOR, node);
        MPI_Comm_free(&node);
    }
    out->ranks = (int)v[0];
    out->threads = (int)v[1];
    out->over_bound = (int)v[2];
    out->cpus = own > 0 ? CPU_COUNT(&mask) : 0;
    out->cpus_launcher = (int)v[3];
}

int dist_node_mask_sharing(const dist_world *w) {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0)
        return 1;
    MPI_Comm node;
    if (w->size == 1 || MPI_Comm_split_type(w->comm, MPI_COMM_TYPE_SHARED, w->rank,
                                            MPI_INFO_NULL, &node) != MPI_SUCCESS)
        return 1;
    int n = 1, same = 0;
    MPI_Comm_size(node, &n);
    cpu_set_t *all = malloc((size_t)n * sizeof *all);
    int ok = all != NULL, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, node);
    if (all_ok) {
        MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, node);
        for (int i = 0; i < n; i++)
            same += CPU_EQUAL(&all[i], &mine);
    }
    free(all);
    MPI_Comm_free(&node);
    return same > 0 ? same : 1;
}

void dist_barrier(const dist_world *w) {
    TIMED(MPI_BARRIER, MPI_Barrier(w->comm));
}

/* MPI counts are int: every buffer collective goes through chunks of at most 2^30 elements. */
#define DIST_CHUNK ((size_t)1 << 30)

void dist_bcast(const dist_world *w, void *buf, size_t n, int root) {
    for (size_t off = 0; off < n; off += DIST_CHUNK) {
        size_t len = n - off < DIST_CHUNK ? n - off : DIST_CHUNK;
        TIMED(MPI_BCAST, MPI_Bcast((char *)buf + off, (int)len, MPI_BYTE, root, w->comm));
    }
}

static void sum_chunked(const dist_world *w, void *buf, size_t n, size_t elem, MPI_Datatype t) {
    for (size_t off = 0; off < n; off += DIST_CHUNK) {
        size_t len = n - off < DIST_CHUNK ? n - off : DIST_CHUNK;
        TIMED(MPI_ALLREDUCE,
              MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * elem, (int)len, t, MPI_SUM, w->comm));
    }
}

void dist_sum_doubles(const dist_world *w, double *buf, size_t n) {
    sum_chunked(w, buf, n, sizeof *buf, MPI_DOUBLE);
}

void dist_sum_floats(const dist_world *w, float *buf, size_t n) {
    sum_chunked(w, buf, n, sizeof *buf, MPI_FLOAT);
}

void dist_sum_u64(const dist_world *w, uint64_t *buf, size_t n) {
    sum_chunked(w, buf, n, sizeof *buf, MPI_UINT64_T);
}

double dist_max_double(const dist_world *w, double v) {
    double r = v;
    TIMED(MPI_ALLREDUCE, MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, MPI_MAX, w->comm));
    return r;
}

double dist_sum_double(const dist_world *w, double v) {
    double r = v;
    TIMED(MPI_ALLREDUCE, MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, MPI_SUM, w->comm));
    return r;
}

void dist_gather_doubles(const dist_world *w, const double *mine, int n, double *all, int root) {
    MPI_Gather(mine, n, MPI_DOUBLE, all, n, MPI_DOUBLE, root, w->comm);
}

void dist_gather_ints(const dist_world *w, const int *mine, int n, int *all, int root) {
    MPI_Gather(mine, n, MPI_INT, all, n, MPI_INT, root, w->comm);
}

void dist_gatherv_doubles(const dist_world *w, const double *mine, int n, double *all,
                          const int counts[], const int displs[], int root) {
    MPI_Gatherv(mine, n, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, root, w->comm);
}

int dist_max_int(const dist_world *w, int v) {
    int r = v;
    if (w->size > 1)
        MPI_Allreduce(&v, &r, 1, MPI_INT, MPI_MAX, w->comm);
    return r;
}

void dist_max_ints(const dist_world *w, int *buf, int n) {
    if (w->size > 1)
        MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_INT, MPI_MAX, w->comm);
}

long long dist_sum_ll(const dist_world *w, long long v) {
    long long r = v;
    TIMED(MPI_ALLREDUCE, MPI_Allreduce(&v, &r, 1, MPI_LONG_LONG, MPI_SUM, w->comm));
    return r;
}

void dist_block(const dist_world *w, size_t n, size_t *lo, size_t *hi) {
    size_t per = (n + (size_t)w->size - 1) / (size_t)w->size;
    size_t a = per * (size_t)w->rank, b = a + per;
    if (a > n)
        a = n;
    if (b > n)
        b = n;
    *lo = a;
    *hi = b;
}

void dist_max_doubles(const dist_world *w, double *buf, size_t n) {
    for (size_t off = 0; off < n; off += DIST_CHUNK) {
        size_t len = n - off < DIST_CHUNK ? n - off : DIST_CHUNK;
        TIMED(MPI_ALLREDUCE,
              MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)len, MPI_DOUBLE, MPI_MAX, w->comm));
    }
}

/* Pieces of a gathered stream: small enough for a static buffer on the root (no allocation,
 * so a root short of memory still drains every sender). */
#define STREAM_PIECE ((size_t)1 << 20)

int dist_gather_stream(const dist_world *w, const void *buf, size_t n, int root,
                       int (*sink)(void *ctx, int rank, const char *data, size_t n, int last),
                       void *ctx) {
    enum { TAG_STREAM = 7301 };
    static char piece[STREAM_PIECE];
    if (w->rank != root) {
        size_t off = 0;
        do { /* an empty buffer is one empty piece: the root learns the end either way */
            size_t k = n - off < STREAM_PIECE ? n - off : STREAM_PIECE;
            MPI_Send((const char *)buf + off, (int)k, MPI_BYTE, root, TAG_STREAM, w->comm);
            off += k;
            if (k < STREAM_PIECE)
                break;
        } while (1);
        return 0;
    }
    /* The root keeps receiving after a failed sink, so that no sender is left blocked. A piece
     * shorter than STREAM_PIECE ends a rank's stream. */
    int rc = 0;
    for (int r = 0; r < w->size; r++) {
        if (r == root) {
            if (rc == 0)
                rc = sink(ctx, r, buf, n, 1);
            continue;
        }
        for (;;) {
            MPI_Status st;
            int k = 0;
            MPI_Recv(piece, (int)STREAM_PIECE, MPI_BYTE, r, TAG_STREAM, w->comm, &st);
            MPI_Get_count(&st, MPI_BYTE, &k);
            int last = (size_t)k < STREAM_PIECE;
            if (rc == 0)
                rc = sink(ctx, r, piece, (size_t)k, last);
            if (last)
                break;
        }
    }
    return rc;
}

void dist_mpi_info(char *standard, size_t ns, char *library, size_t nl) {
    int major = 0, minor = 0, len = 0;
    MPI_Get_version(&major, &minor);
    snprintf(standard, ns, "%d.%d", major, minor);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Get_library_version(lib, &len);
    lib[len < MPI_MAX_LIBRARY_VERSION_STRING ? len : MPI_MAX_LIBRARY_VERSION_STRING - 1] = 0;
    /* the first line (MPICH's string runs over many lines of build details) */
    size_t k = strcspn(lib, "\n");
    while (k > 0 && (lib[k - 1] == ' ' || lib[k - 1] == '\t' || lib[k - 1] == '\r'))
        k--;
    snprintf(library, nl, "%.*s", (int)k, lib);
}
