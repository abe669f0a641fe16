/* dist: MPI world setup, error agreement and small collectives (see dist.h). */
#include "dist/dist.h"

#include "core/err.h"
#include "core/prof.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int dist_we_initialised;

/* An MPI call as a profile region of its own (Caliper's profile.mpi: time per MPI function). */
#define TIMED(id, call)                                                                            \
    do {                                                                                           \
        prof_begin(PROF_##id);                                                                     \
        call;                                                                                      \
        prof_end(PROF_##id);                                                                       \
    } while (0)

int dist_init(dist_world *w, int *argc, char ***argv) {
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
    return 0;
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
