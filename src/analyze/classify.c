/* classify: operation classes of trace events by name and category (POSIX and stdio calls from
 * the table shared with the tracer, scaffold/trace_ops.h; dftracer's AI categories, DLIO's names),
 * the sub-kinds that need per-name handling when deriving bytes and offsets, and the
 * file-system class of a file (from its recorded type, a --fs-type override, or its path). */
#include "analyze/reader_int.h"

#include "core/err.h"
#include "scaffold/trace_ops.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

static int name_in(const char *name, size_t n, const char *const *list) {
    for (; *list; list++)
        if (strlen(*list) == n && !memcmp(*list, name, n))
            return 1;
    return 0;
}

static int ieq(const char *s, size_t n, const char *lit) {
    size_t m = strlen(lit);
    if (m != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)s[i]) != lit[i])
            return 0;
    return 1;
}

static int starts(const char *s, size_t n, const char *lit) {
    size_t m = strlen(lit);
    return n >= m && !memcmp(s, lit, m);
}

static int ends(const char *s, size_t n, const char *lit) {
    size_t m = strlen(lit);
    return n >= m && !memcmp(s + n - m, lit, m);
}

/* Every POSIX/stdio call name with the class the analyzer counts it in: the calls scaffold's
 * tracer records and the names other tracers write for them, from the table shared with the
 * tracer (scaffold/trace_ops.h; DFAnalyzer's POSIX_IO_CAT lists and their 64-bit variants). */
static const struct {
    const char *name;
    int oc;
} IO_CALLS[] = {
#define OP_ROW(id, name, cat, cls, oc, fields, a1, a2) {name, oc},
    TRC_OPS(OP_ROW)
#undef OP_ROW
#define ALIAS_ROW(name, oc) {name, oc},
    TRC_OP_ALIASES(ALIAS_ROW)
#undef ALIAS_ROW
};

/* The op of a POSIX/stdio call by name; AN_OP_IO_OTHER when not one of the classified ones. */
static int io_op(const char *name, size_t n) {
    static const int op_of[] = {[OC_OTHER] = AN_OP_IO_OTHER, [OC_READ] = AN_OP_READ,
                                [OC_WRITE] = AN_OP_WRITE,    [OC_META] = AN_OP_META,
                                [OC_SYNC] = AN_OP_SYNC,      [OC_PCTL] = AN_OP_PCTL};
    for (size_t i = 0; i < sizeof IO_CALLS / sizeof IO_CALLS[0]; i++)
        if (strlen(IO_CALLS[i].name) == n && !memcmp(IO_CALLS[i].name, name, n))
            return op_of[IO_CALLS[i].oc];
    return AN_OP_IO_OTHER;
}

int an_classify(const char *name, size_t nn, const char *cat, size_t cn, unsigned *flags) {
    *flags = 0;
    int posix = ieq(cat, cn, "posix"), stdio = ieq(cat, cn, "stdio");
    int mpiio = (cn >= 3 && !strncasecmp(cat, "mpi", 3)) && starts(name, nn, "MPI_File_");
    if (posix || stdio || mpiio) {
        *flags = posix ? AN_F_POSIX : stdio ? AN_F_STDIO : AN_F_MPIIO;
        if (mpiio) {
            if (starts(name, nn, "MPI_File_read") || starts(name, nn, "MPI_File_iread"))
                return AN_OP_READ;
            if (starts(name, nn, "MPI_File_write") || starts(name, nn, "MPI_File_iwrite"))
                return AN_OP_WRITE;
            if (starts(name, nn, "MPI_File_sync"))
                return AN_OP_SYNC;
            return AN_OP_META;
        }
        return io_op(name, nn);
    }
    /* MPI calls (our tracer's MPI sibling, dftracer 2.1+'s MPI layer): cat "MPI" */
    if (ieq(cat, cn, "mpi") && starts(name, nn, "MPI_"))
        return AN_OP_MPI;
    if (ieq(cat, cn, "dftracer"))
        return (ieq(name, nn, "start") || ieq(name, nn, "end")) ? AN_OP_TRACER : AN_OP_NONE;
    if (ieq(cat, cn, "compute"))
        return AN_OP_COMPUTE;
    if (ieq(cat, cn, "ai_framework"))
        return strstr(name, "compute") ? AN_OP_COMPUTE : AN_OP_NONE; /* name is NUL-terminated */
    if (ieq(cat, cn, "dataloader") || ieq(cat, cn, "data_loader")) {
        /* dftracer's iteration helpers: "<x>.iter" is the wait for the next item, "<x>.block"
         * is the consumer's loop body (it contains compute), so only the former is a fetch. */
        if (ends(name, nn, ".block"))
            return AN_OP_NONE;
        if (ieq(cat, cn, "data_loader") && !ends(name, nn, ".iter"))
            return AN_OP_NONE;
        return AN_OP_FETCH;
    }
    if (ieq(cat, cn, "checkpoint"))
        return AN_OP_CKPT;
    if (ieq(cat, cn, "comm"))
        return AN_OP_COMM;
    if (ieq(cat, cn, "pipeline")) {
        if (starts(name, nn, "epoch") && !ends(name, nn, ".iter"))
            return AN_OP_EPOCH;
        if (starts(name, nn, "train") && !ends(name, nn, ".iter"))
            return AN_OP_TRAIN;
        if (starts(name, nn, "evaluate") || starts(name, nn, "test"))
            return AN_OP_EVAL;
    }
    return AN_OP_NONE;
}

int an_subkind(const char *name, size_t nn) {
    static const char *const frw[] = {"fread", "fwrite", "fread_unlocked", "fwrite_unlocked", NULL};
    static const char *const lseek[] = {"lseek", "lseek64", NULL};
    static const char *const fseek[] = {"fseek", "fseeko", "fseeko64", NULL};
    static const char *const ftell[] = {"ftell", "ftello", NULL};
    static const char *const open[] = {"open", "open64", "openat", "openat64", "__open_2",
                                       "creat", "creat64", "fopen", "fopen64", NULL};
    if (name_in(name, nn, frw))
        return SK_FRW;
    if (name_in(name, nn, lseek))
        return SK_LSEEK;
    if (name_in(name, nn, fseek))
        return SK_FSEEK;
    if (name_in(name, nn, ftell))
        return SK_FTELL;
    if (name_in(name, nn, open))
        return SK_OPEN;
    return SK_NONE;
}

/* ------------------------------------------------------------------ file systems */

const char *const an_fs_names[AN_FS_COUNT] = {"unknown", "lustre", "gpfs", "beegfs",
                                              "nfs",     "local",  "tmpfs"};

int an_fs_class(const char *type, size_t n) {
    static const struct {
        const char *name;
        int cls;
    } map[] = {{"lustre", AN_FS_LUSTRE}, {"gpfs", AN_FS_GPFS},     {"beegfs", AN_FS_BEEGFS},
               {"nfs", AN_FS_NFS},       {"nfs4", AN_FS_NFS},      {"cifs", AN_FS_NFS},
               {"smb3", AN_FS_NFS},      {"9p", AN_FS_NFS},        {"local", AN_FS_LOCAL},
               {"ext2", AN_FS_LOCAL},    {"ext3", AN_FS_LOCAL},    {"ext4", AN_FS_LOCAL},
               {"xfs", AN_FS_LOCAL},     {"btrfs", AN_FS_LOCAL},   {"f2fs", AN_FS_LOCAL},
               {"zfs", AN_FS_LOCAL},     {"overlay", AN_FS_LOCAL}, {"vfat", AN_FS_LOCAL},
               {"local_nvme", AN_FS_LOCAL}, {"local_hdd", AN_FS_LOCAL}, {"tmpfs", AN_FS_TMPFS},
               {"ramfs", AN_FS_TMPFS},   {"unknown", AN_FS_UNKNOWN}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strlen(map[i].name) == n && !strncasecmp(type, map[i].name, n))
            return map[i].cls;
    return -1;
}

int an_fs_infer(const char *p) {
    if (strstr(p, "lustre") || !strncmp(p, "/p/", 3))
        return AN_FS_LUSTRE;
    if (strstr(p, "gpfs") || !strncmp(p, "/gs/", 4))
        return AN_FS_GPFS;
    if (strstr(p, "beegfs"))
        return AN_FS_BEEGFS;
    if (!strncmp(p, "/nfs", 4) || strstr(p, "/nfs/") || !strncmp(p, "/home/", 6) ||
        !strncmp(p, "/g/g", 4))
        return AN_FS_NFS;
    if (!strncmp(p, "/dev/shm", 8))
        return AN_FS_TMPFS;
    if (!strncmp(p, "/tmp/", 5) || !strncmp(p, "/var/tmp/", 9) || !strncmp(p, "/local/", 7))
        return AN_FS_LOCAL;
    return AN_FS_UNKNOWN;
}

int an_fs_override_check(const char *spec) {
    const char *eq = strchr(spec, '=');
    if (!eq || spec[0] != '/' || eq == spec)
        return err_set(ERR_USAGE,
                       "'%s' must be PREFIX=TYPE with an absolute prefix, e.g. "
                       "/p/lustre3=lustre",
                       spec);
    if (an_fs_class(eq + 1, strlen(eq + 1)) < 0)
        return err_set(ERR_USAGE,
                       "'%s': unknown type '%s' (use lustre, gpfs, beegfs, nfs, local, tmpfs, "
                       "or a mount-table name such as ext4, xfs, nfs4)",
                       spec, eq + 1);
    return 0;
}
