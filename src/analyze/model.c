/* model: the one model behind the proposals and the 12-dimension checklist. A strategy is
 * proposed when a bottleneck finding of its category fired, the trace allows it (collective I/O
 * needs shared files, readahead sequential reads, ...) and, for the strategies the seed's FS_TYPE
 * tables restrict (striping, metadata servers, kernel tuning, staging off a parallel file
 * system), the I/O lives on a file system it applies to. Each dimension's verdict is then read
 * off its proposals: applicable when one helps the application (>= 1% of run time), applicable
 * for the system only when the only gain is system-side, not applicable otherwise, with the
 * reason (gated out, does not fit, nothing fired) and the trace's facts for that dimension. A
 * lever catalog turns a dimension into "applied & measured". */
#include "analyze/report.h"

#include "core/err.h"
#include "core/mem.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const an_verdict_names[4] = {"not applicable",
                                         "applicable for the system, not the application",
                                         "applicable", "applied & measured"};

/* Proposals helping the application by less than this (% of run time) are system-side only. */
#define APP_MIN_PCT 1.0

#define C_DRISHTI "Bez et al., Drishti, PDSW 2022, https://ieeexplore.ieee.org/document/10027503"
#define C_WISIO "Yildirim et al., WisIO, ICS 2025, https://dl.acm.org/doi/10.1145/3721145.3730395"
#define C_MOHAN "Mohan et al., Analyzing and Mitigating Data Stalls in DNN Training, VLDB 2021, https://arxiv.org/abs/2007.06775"
#define C_DLIO "Devarajan et al., DLIO: A Data-Centric Benchmark for Scientific Deep Learning Applications, CCGrid 2021, https://ieeexplore.ieee.org/document/9499416"
#define C_CHECKFREQ "Mohan et al., CheckFreq, FAST 2021, https://www.usenix.org/conference/fast21/presentation/mohan"
#define C_SCR "Moody et al., Design, Modeling, and Evaluation of a Scalable Multi-level Checkpointing System (SCR), SC 2010, https://doi.org/10.1109/SC.2010.18"
#define C_HERMES "Kougkas et al., Hermes: a heterogeneous-aware multi-tiered distributed I/O buffering system, HPDC 2018, https://doi.org/10.1145/3208040.3208059"

#define FSM(k) (1u << (k))
#define FS_NET (FSM(AN_FS_LUSTRE) | FSM(AN_FS_GPFS) | FSM(AN_FS_BEEGFS) | FSM(AN_FS_NFS))
#define FS_STRIPED (FSM(AN_FS_LUSTRE) | FSM(AN_FS_GPFS) | FSM(AN_FS_BEEGFS))
#define REVERT "revert the change (the workload's accesses are unchanged)"

static const an_strategy STRATEGIES[] = {
    {"coalesce-small-io", "Buffer and coalesce small requests",
     "Aggregate the small reads/writes into >= 4 MiB transfers through a staging buffer (or "
     "readv/writev), keeping the same bytes in the same order",
     1, "Drishti (rec. 2), WisIO small-io", C_DRISHTI, "small-io", 0.7, 0, 0, "no-sudo",
     "application or loader change: one >= 4 MiB read per staging buffer", REVERT},
    {"collective-io", "MPI-IO collective buffering",
     "Route the shared-file accesses through MPI-IO collectives (romio_cb_read/write, "
     "cb_buffer_size=64 MiB) so aggregators issue few large requests",
     5, "Drishti (rec. 3)", C_DRISHTI, "small-io,sequentiality", 0.5, 0, 0, "no-sudo",
     "ROMIO_HINTS=<file with romio_cb_read enable, cb_buffer_size 67108864>", "unset ROMIO_HINTS"},
    {"metadata-cache", "Cache metadata results",
     "Cache stat()/open() results and keep descriptors open across iterations instead of "
     "re-opening and re-stat'ing the same files",
     2, "Drishti (rec. 6), WisIO metadata", C_DRISHTI, "metadata", 0.6, 0, 0, "no-sudo",
     "application change: keep descriptors and stat results across iterations", REVERT},
    {"shard-small-files", "Pack per-sample files into shards",
     "Store the samples in few large shard files with an index so one open serves many samples "
     "(same samples, same bytes)",
     11, "DLIO (Devarajan et al.)", C_DLIO, "metadata", 0.5, 0, 0, "no-sudo",
     "write the samples into shard files with an index; point the loader at them",
     "point the loader back at the per-sample files (keep them until the shards are checked)"},
    {"metadata-path", "Metadata-path tuning",
     "Spread the directory over metadata servers (Lustre DNE, lfs mkdir -c) or use Data-on-MDT "
     "for small files",
     11, "WisIO metadata (L3), Drishti", C_WISIO, "metadata", 0.3, 0, FSM(AN_FS_LUSTRE),
     "admin-only", "lfs mkdir -c <MDT count> DIR, or lfs setstripe -E 1M -L mdt DIR",
     "lfs migrate -m 0 DIR (back to one MDT); lfs setstripe -d DIR"},
    {"prefetch-loader", "Prefetching data loader",
     "Read the next batches in background loader threads (prefetch depth >= 2, persistent "
     "workers) so fetch overlaps the current step's compute",
     3, "Mohan et al. (data stalls)", C_MOHAN, "data-loader,overlap,compute-utilisation", 0.8, 0,
     0, "no-sudo", "loader setting: workers >= 1, prefetch depth >= 2, persistent workers",
     "set the loader's workers and prefetch depth back to their previous values"},
    {"async-io", "Asynchronous I/O",
     "Issue the reads ahead of use (io_uring, posix_fadvise WILLNEED, HDF5 async VOL) so the "
     "same accesses overlap compute",
     3, "Drishti (rec. 8), WisIO read-time", C_DRISHTI, "overlap,sequentiality", 0.6, 0, 0,
     "no-sudo", "application change: read ahead asynchronously", REVERT},
    {"app-cache", "Application-level data cache",
     "Keep hot samples resident (DL-aware cache, page cache) so repeated or random accesses of "
     "the same pattern are served from memory",
     2, "Mohan et al. (MinIO cache)", C_MOHAN, "sequentiality,data-loader", 0.5, 0, 0, "no-sudo",
     "loader change: an in-memory sample cache", "disable the cache"},
    {"readahead", "Kernel readahead for sequential reads",
     "Raise readahead (POSIX_FADV_SEQUENTIAL per file, or blockdev --setra) so small sequential "
     "reads are served from larger device reads",
     10, "WisIO sequentiality (L3), Drishti", C_WISIO, "small-io", 0.4, 0, FSM(AN_FS_LOCAL), "sudo",
     "sudo blockdev --setra 4096 /dev/<dev> (or posix_fadvise SEQUENTIAL per file, no sudo)",
     "sudo blockdev --setra <previous value from blockdev --getra> /dev/<dev>"},
    {"stage-in", "Stage data on node-local storage",
     "Copy the input files once to node-local NVMe, a burst buffer or /dev/shm and read them "
     "there with the unchanged access pattern",
     4, "Hermes (Kougkas et al.)", C_HERMES, "sequentiality,small-io,metadata,data-loader", 0.5,
     0, FS_NET, "no-sudo", "copy the inputs to node-local storage at job start; read them there",
     "read from the original location again; delete the staged copy"},
    {"async-checkpoint", "Asynchronous checkpointing",
     "Snapshot the state in memory and persist it from a background thread while training "
     "continues (same checkpoints, same bytes)",
     12, "CheckFreq (Mohan et al.)", C_CHECKFREQ, "checkpoint", 0.8, 0, 0, "no-sudo",
     "checkpoint setting: write from a background thread", "write checkpoints synchronously again"},
    {"multilevel-checkpoint", "Multi-level checkpointing",
     "Write each checkpoint to node-local storage and drain it to the parallel file system in "
     "the background",
     9, "SCR (Moody et al.)", C_SCR, "checkpoint", 0.6, 0, FS_NET, "no-sudo",
     "checkpoint to node-local storage, drain to the parallel file system in the background",
     "write checkpoints directly to the parallel file system again"},
    {"striping", "Match striping to the transfer size",
     "Stripe large shared or checkpoint files over several OSTs with a stripe size aligned to "
     "the transfers (lfs setstripe -c 4-8 -S 4m)",
     8, "Drishti (rec. 7)", C_DRISHTI, "checkpoint,load-balance", 0.3, 0, FS_STRIPED, "no-sudo",
     "lfs setstripe -c 4 -S 4m DIR before the files are written",
     "lfs setstripe -c 1 -S 1m DIR (new files; existing files keep their layout until rewritten)"},
    {"stdio-to-posix", "Move bulk data off STDIO",
     "Read/write bulk data with POSIX or MPI-IO and large buffers instead of many small STDIO "
     "calls",
     7, "Drishti (rec. 1)", C_DRISHTI, "interface", 0.5, 0, 0, "no-sudo",
     "application change: POSIX or MPI-IO for the bulk data", REVERT},
    {"rebalance", "Rebalance data across ranks",
     "Give every rank the same bytes (size-aware sample assignment, sort samples by size) so no "
     "rank waits for a slower one",
     7, "Drishti (rec. 7), WisIO stragglers", C_DRISHTI, "load-balance", 0.6, 0, 0, "no-sudo",
     "sampler change: size-aware assignment of samples to ranks", REVERT},
    {"hdf5-tuning", "HDF5 chunk cache and collective metadata",
     "Size the HDF5 chunk cache to the working set and enable collective metadata operations",
     6, "Drishti (HDF5 snippets)", C_DRISHTI, "small-io,metadata", 0.4, 0, 0, "no-sudo",
     "H5Pset_cache / H5Pset_all_coll_metadata_ops on the file access property list",
     "remove the calls (library defaults)"},
    {"writeback-tuning", "Dirty-page writeback tuning",
     "Lower vm.dirty_background_ratio so checkpoint bursts start draining earlier (node-wide "
     "effect)",
     10, "WisIO write-time (L3)", C_WISIO, "checkpoint", 0.2, 0, FSM(AN_FS_LOCAL), "sudo",
     "sudo sysctl -w vm.dirty_background_ratio=5",
     "sudo sysctl -w vm.dirty_background_ratio=<previous value from sysctl -n>"},
    {"io-scheduler", "I/O scheduler for random access",
     "Use the none scheduler on NVMe (mq-deadline on HDD) so random requests are not reordered "
     "behind each other",
     10, "Drishti sequentiality (L3)", C_DRISHTI, "sequentiality", 0.2, 0, FSM(AN_FS_LOCAL), "sudo",
     "echo none | sudo tee /sys/block/<dev>/queue/scheduler",
     "echo <previous scheduler from the same file> | sudo tee /sys/block/<dev>/queue/scheduler"},
    {"netfs-client", "Network file-system client tuning",
     "Larger NFS transfer sizes (rsize/wsize 1 MiB), a larger GPFS page pool or more BeeGFS "
     "client threads, so the same requests take fewer round trips",
     10, "WisIO read-time (L3), Drishti", C_WISIO, "small-io,metadata",
     0.3, 0, FSM(AN_FS_NFS) | FSM(AN_FS_GPFS) | FSM(AN_FS_BEEGFS), "admin-only",
     "NFS: mount -o rsize=1048576,wsize=1048576; GPFS: mmchconfig pagepool; BeeGFS: "
     "clientNumWorkerThreads",
     "remount with the previous options, or restore the previous setting"},
};

#define NSTRAT (sizeof STRATEGIES / sizeof STRATEGIES[0])

const an_strategy *an_strategies(size_t *n) {
    *n = NSTRAT;
    return STRATEGIES;
}

int an_text_does_less(const char *s) {
    static const char *const bad[] = {"fewer checkpoint", "reduce checkpoint", "checkpoint less",
                                      "less often",       "write less",        "read less",
                                      "fewer epochs",     "skip ",             "drop samples",
                                      "less data",        "do less",           "reduce the number of epochs",
                                      "subsample",        NULL};
    char low[1024];
    size_t n = strlen(s);
    if (n >= sizeof low)
        n = sizeof low - 1;
    for (size_t i = 0; i < n; i++)
        low[i] = (char)tolower((unsigned char)s[i]);
    low[n] = 0;
    for (const char *const *b = bad; *b; b++)
        if (strstr(low, *b))
            return 1;
    return 0;
}

void an_strategy_fs(const an_strategy *s, char *buf, size_t cap) {
    size_t l = 0;
    buf[0] = 0;
    if (!s->fs) {
        snprintf(buf, cap, "any");
        return;
    }
    for (int k = 1; k < AN_FS_COUNT; k++)
        if ((s->fs & FSM(k)) && l + 12 < cap)
            l += (size_t)snprintf(buf + l, cap - l, "%s%s", l ? "," : "", an_fs_names[k]);
}

static int has_cat(const char *list, const char *cat) {
    size_t n = strlen(cat);
    for (const char *p = list; (p = strstr(p, cat)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
            return 1;
    return 0;
}

/* Whether a strategy fits the trace's shape (independent of the file system). */
static int strategy_fits(const an_strategy *s, const an_metrics *m, const char **why) {
    *why = NULL;
    if (!strcmp(s->key, "collective-io") && !m->nshared_files)
        return *why = "no file is shared by two processes", 0;
    if (!strcmp(s->key, "hdf5-tuning") && !m->nhdf5_files)
        return *why = "no HDF5 file", 0;
    if (!strcmp(s->key, "striping") && m->op_count_bound)
        return *why = "the I/O is op-count-bound; striping helps bandwidth-bound transfers", 0;
    if (!strcmp(s->key, "readahead")) {
        uint64_t c = m->read_classified;
        if (!c || (double)m->read_seq / (double)c < 0.8)
            return *why = "reads are not mostly sequential", 0;
    }
    if (!strcmp(s->key, "shard-small-files") && m->nfiles_io < 16)
        return *why = "fewer than 16 files are accessed", 0;
    return 1;
}

/* Where the file system of the I/O was learnt, for reasons. */
static void fs_origin(const an_trace *t, const an_metrics *m, char *buf, size_t cap) {
    static const char *const how[] = {"nothing tells", "guessed from the path",
                                      "recorded by the tracer", "from --fs-type"};
    const char *ex = m->fs_example ? an_strtab_get(&t->files, m->fs_example) : "";
    size_t el = strlen(ex);
    snprintf(buf, cap, "%s%s%s%s", how[m->fs_how < 4 ? m->fs_how : 0], el ? ": " : "",
             el > 60 ? "..." : "", el > 60 ? ex + el - 60 : ex);
}

/* The file-system gate of a strategy; 0 with *why when the I/O is on a file system the strategy
 * does not apply to (or on an unknown one: the seed forbids guessing). */
static int fs_allows(const an_strategy *s, const an_trace *t, const an_metrics *m, char *why,
                     size_t cap) {
    if (!s->fs || (s->fs & FSM(m->fs)))
        return 1;
    char fsl[64], org[128];
    an_strategy_fs(s, fsl, sizeof fsl);
    if (m->fs == AN_FS_UNKNOWN) {
        fs_origin(t, m, org, sizeof org);
        snprintf(why, cap, "%s needs a %s file system and the I/O's is unknown (%s; give "
                 "--fs-type PREFIX=TYPE)", s->name, fsl, org);
    } else /* the dimension's facts say where the file system was learnt */
        snprintf(why, cap, "%s applies to %s, not %s", s->name, fsl, an_fs_names[m->fs]);
    return 0;
}

static double sys_impact(const an_strategy *s, const an_metrics *m, char *basis, size_t cap) {
    uint64_t data_ops = m->ops[AN_T_READ] + m->ops[AN_T_WRITE];
    uint64_t all_ops = data_ops + m->ops[AN_T_META] + m->ops[AN_T_SYNC] + m->ops[AN_T_OTHER];
    double bytes = (double)(m->bytes_read + m->bytes_written);
    double v = 0;
    basis[0] = 0;
    if (!strcmp(s->key, "coalesce-small-io") || !strcmp(s->key, "collective-io")) {
        double after = ceil(bytes / 4194304.0);
        v = data_ops ? 1.0 - after / (double)data_ops : 0;
        snprintf(basis, cap, "data ops %llu -> ~%.0f at 4 MiB each", (unsigned long long)data_ops,
                 after);
    } else if (!strcmp(s->key, "metadata-cache")) {
        v = m->ops[AN_T_META] ? (double)m->repeated_stats / (double)m->ops[AN_T_META] : 0;
        snprintf(basis, cap, "%llu repeated stat calls of %llu metadata ops",
                 (unsigned long long)m->repeated_stats, (unsigned long long)m->ops[AN_T_META]);
    } else if (!strcmp(s->key, "shard-small-files")) {
        v = all_ops ? 0.9 * (double)m->ops[AN_T_META] / (double)all_ops : 0;
        snprintf(basis, cap, "metadata ops are %.0f%% of %llu ops",
                 all_ops ? 100.0 * (double)m->ops[AN_T_META] / (double)all_ops : 0,
                 (unsigned long long)all_ops);
    } else if (!strcmp(s->key, "app-cache")) {
        v = m->bytes_read ? (double)m->redundant_read_bytes / (double)m->bytes_read : 0;
        snprintf(basis, cap, "re-read bytes / bytes read");
    } else if (!strcmp(s->key, "stage-in")) {
        v = bytes > 0 ? (double)m->bytes_read / bytes : 0;
        snprintf(basis, cap, "read traffic moved off the shared file system");
    } else if (!strcmp(s->key, "multilevel-checkpoint")) {
        v = m->bytes_written ? (double)m->ckpt_bytes / (double)m->bytes_written : 0;
        snprintf(basis, cap, "checkpoint bytes taken off the synchronous path");
    } else if (!strcmp(s->key, "stdio-to-posix")) {
        v = all_ops ? (double)m->stdio_ops / (double)all_ops : 0;
        snprintf(basis, cap, "STDIO share of operations");
    } else if (!strcmp(s->key, "rebalance")) {
        v = 0.5 * m->bytes_imbalance;
        snprintf(basis, cap, "peak per-rank load reduction");
    } else {
        snprintf(basis, cap, "not measurable from the application trace");
    }
    if (v < 0)
        v = 0;
    if (v > 1)
        v = 1;
    return 100 * v;
}

static int cmp_prop(const void *a, const void *b) {
    const an_proposal *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return strcmp(x->s->key, y->s->key);
}

/* ------------------------------------------------------------------ facts per dimension */

/* The trace's facts for dimension d (1-based), the context of every verdict. */
static void dim_facts(const an_report *r, int d, char *buf, size_t cap) {
    const an_metrics *m = r->m;
    double pt = m->proc_time_s > 0 ? m->proc_time_s : 1;
    uint64_t data_ops = m->ops[AN_T_READ] + m->ops[AN_T_WRITE];
    double small_share =
        m->data_ops_known_size ? (double)m->small_ops / (double)m->data_ops_known_size : 0;
    double read_share = an_class_share(m, AN_T_READ), write_share = an_class_share(m, AN_T_WRITE);
    double ckpt_share = m->wall_s > 0 ? m->ckpt_time_s / m->wall_s : 0;
    double meta_io = m->io_time_s > 0 ? m->t_s[AN_T_META] / m->io_time_s : 0;
    char b1[32], b2[32], org[128];
    an_fmt_bytes(m->mean_xfer, b1, sizeof b1);
    fs_origin(r->t, m, org, sizeof org);
    switch (d) {
    case 1:
        if (!data_ops)
            snprintf(buf, cap, "the trace has no read or write operation");
        else
            snprintf(buf, cap, "%.0f%% of %llu data ops are <= 1 MiB (mean %s)", 100 * small_share,
                     (unsigned long long)data_ops, b1);
        break;
    case 2:
        an_fmt_bytes((double)m->redundant_read_bytes, b2, sizeof b2);
        snprintf(buf, cap, "%s re-read within files (%.1f%% of reads), %llu repeated stat calls",
                 b2, m->bytes_read ? 100.0 * (double)m->redundant_read_bytes / (double)m->bytes_read : 0,
                 (unsigned long long)m->repeated_stats);
        break;
    case 3:
        if (m->has_compute)
            snprintf(buf, cap, "%.1f%% of I/O time runs under compute; the data loader waits "
                     "%.1f%% of process time",
                     m->io_union_s > 0 ? 100 * m->io_compute_overlap_s / m->io_union_s : 0,
                     100 * m->stall_s / pt);
        else
            snprintf(buf, cap, "no compute annotation, so overlap is unknown; I/O is %.1f%% of "
                     "process time", 100 * m->io_share);
        break;
    case 4:
        an_fmt_bytes((double)m->bytes_read, b2, sizeof b2);
        snprintf(buf, cap, "reads expose %.1f%% of process time (%s read); the I/O is on %s (%s)",
                 100 * read_share, b2, m->fs_hint, org);
        break;
    case 5:
        if (m->nshared_files)
            snprintf(buf, cap, "%zu file(s) shared by several processes; %s through MPI-IO",
                     m->nshared_files, m->mpiio_bytes ? "some bytes" : "no bytes");
        else
            snprintf(buf, cap, "file-per-process: none of the %zu files is accessed by two "
                     "processes, so collective buffering has nothing to aggregate", m->nfiles_io);
        break;
    case 6:
        if (m->nhdf5_files)
            snprintf(buf, cap, "%zu HDF5 file(s); I/O is %.1f%% of process time", m->nhdf5_files,
                     100 * m->io_share);
        else
            snprintf(buf, cap, "no HDF5 file among the %zu files accessed", m->nfiles_io);
        break;
    case 7: {
        double tot = (double)(m->stdio_bytes + m->posix_bytes + m->mpiio_bytes);
        double stdio = tot > 0 ? 100.0 * (double)m->stdio_bytes / tot : 0;
        if (m->has_fetch)
            snprintf(buf, cap, "the data loader waits %.1f%% of process time; STDIO carries %.1f%% "
                     "of bytes; byte imbalance across ranks %.0f%%", 100 * m->stall_s / pt, stdio,
                     100 * m->bytes_imbalance);
        else
            snprintf(buf, cap, "no data-loader annotation; %zu NetCDF file(s); STDIO carries "
                     "%.1f%% of bytes", m->nnetcdf_files, stdio);
        break;
    }
    case 8:
        snprintf(buf, cap, "%s I/O (mean transfer %s, %.0f%% of I/O time in metadata and "
                 "< 64 KiB transfers) on %s (%s)",
                 m->op_count_bound ? "op-count-bound" : "bandwidth-bound", b1,
                 m->io_time_s > 0 ? 100 * (m->t_s[AN_T_META] + m->small_time_s) / m->io_time_s : 0,
                 m->fs_hint, org);
        break;
    case 9:
        snprintf(buf, cap, "I/O is %.1f%% of process time, checkpoints %.1f%% of wall time; the "
                 "I/O is on %s (%s)", 100 * m->io_share, 100 * ckpt_share, m->fs_hint, org);
        break;
    case 10:
        snprintf(buf, cap, "reads expose %.1f%%, writes %.1f%% of process time; the I/O is on %s "
                 "(%s)", 100 * read_share, 100 * write_share, m->fs_hint, org);
        break;
    case 11:
        snprintf(buf, cap, "metadata is %.1f%% of I/O time (%llu ops over %zu files), %.2f%% of "
                 "process time", 100 * meta_io, (unsigned long long)m->ops[AN_T_META],
                 m->nfiles_io, 100 * an_class_share(m, AN_T_META));
        break;
    default:
        if (m->ckpt_time_s > 0) {
            an_fmt_bytes(m->ckpt_bw, b2, sizeof b2);
            snprintf(buf, cap, "checkpoints block %.1f%% of wall time (%llu events, %s/s)",
                     100 * ckpt_share, (unsigned long long)m->ckpt_events, b2);
        } else {
            snprintf(buf, cap, "no checkpoint in the trace (no checkpoint annotation, no "
                     "checkpoint-like file written)");
        }
        break;
    }
}

/* ------------------------------------------------------------------ proposals */

static const an_finding *finding_of(const an_report *r, const char *cat) {
    for (size_t i = 0; i < r->nfindings; i++)
        if (strcmp(r->findings[i].severity, "info") && !strcmp(r->findings[i].category, cat))
            return &r->findings[i];
    return NULL;
}

/* Why a dimension has no proposal: the first strategy that would have been motivated but was
 * gated out or does not fit; else that nothing of its categories fired. */
static const an_finding *guard_of(const an_report *r) {
    for (size_t i = 0; i < r->nfindings; i++)
        if (!strcmp(r->findings[i].severity, "guard"))
            return &r->findings[i];
    return NULL;
}

static void why_not(const an_report *r, int d, char *buf, size_t cap) {
    buf[0] = 0;
    const an_finding *g = guard_of(r);
    if (g) {
        snprintf(buf, cap, "not ranked: the measured phase (%s) lasts %.2f s, under %.0f s (%s)",
                 r->m->phase_what ? r->m->phase_what : "whole run", g->value,
                 g->rule->threshold, g->rule->id);
        return;
    }
    char cats[160] = "";
    size_t cl = 0;
    for (size_t k = 0; k < NSTRAT; k++) {
        const an_strategy *s = &STRATEGIES[k];
        if (s->dim != d)
            continue;
        int motivated = 0;
        for (const char *c = s->categories; *c;) {
            const char *e = strchr(c, ',');
            size_t n = e ? (size_t)(e - c) : strlen(c);
            char cat[40];
            snprintf(cat, sizeof cat, "%.*s", (int)n, c);
            if (finding_of(r, cat))
                motivated = 1;
            if (!strstr(cats, cat) && cl + n + 3 < sizeof cats)
                cl += (size_t)snprintf(cats + cl, sizeof cats - cl, "%s%s", cl ? "/" : "", cat);
            c += n + (e ? 1 : 0);
        }
        if (!motivated)
            continue;
        const char *fit;
        if (!fs_allows(s, r->t, r->m, buf, cap))
            return;
        if (!strategy_fits(s, r->m, &fit)) {
            snprintf(buf, cap, "%s does not fit: %s", s->name, fit);
            return;
        }
        snprintf(buf, cap, "%s: nothing measurable at stake", s->name);
        return;
    }
    snprintf(buf, cap, "no %s bottleneck fired", cl ? cats : "relevant");
}

static void propose(an_report *r) {
    const an_metrics *m = r->m;
    for (size_t k = 0; k < NSTRAT; k++) {
        const an_strategy *s = &STRATEGIES[k];
        const char *why;
        char fsw[256];
        /* Guard rail: never propose doing less work. */
        if (s->does_less || an_text_does_less(s->desc) || an_text_does_less(s->name) ||
            !strategy_fits(s, m, &why) || !fs_allows(s, r->t, m, fsw, sizeof fsw))
            continue;
        an_proposal p = {.s = s};
        int motivated = 0;
        for (size_t i = 0; i < r->nfindings; i++) {
            const an_finding *f = &r->findings[i];
            if (!strcmp(f->severity, "info") || !has_cat(s->categories, f->category))
                continue;
            motivated = 1;
            double app = f->stake_pct * s->recover;
            if (app > p.app_pct)
                p.app_pct = app;
            size_t l = strlen(p.findings);
            if (!strstr(p.findings, f->rule->id) && l + strlen(f->rule->id) + 3 < sizeof p.findings)
                snprintf(p.findings + l, sizeof p.findings - l, "%s%s", l ? ", " : "", f->rule->id);
        }
        if (!motivated)
            continue;
        /* I/O that is a small share of the run caps what any I/O change can give back. */
        if (!m->io_meaningful && p.app_pct > 100 * m->io_share)
            p.app_pct = 100 * m->io_share;
        p.sys_pct = sys_impact(s, m, p.sys_basis, sizeof p.sys_basis);
        if (p.app_pct < APP_MIN_PCT) {
            if (p.sys_pct <= 0)
                continue; /* nothing measurable for either side */
            p.system_only = 1;
        }
        p.score = 0.5 * p.app_pct + 0.5 * p.sys_pct;
        r->props[r->nprops++] = p;
    }
    qsort(r->props, r->nprops, sizeof *r->props, cmp_prop);
}

/* ------------------------------------------------------------------ checklist */

/* Verdict order for "the best verdict" of a dimension's levers. */
static int lever_rank(const char *v) {
    static const char *const order[] = {"accept", "inconclusive", "revert", "guard-reject"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(v, order[i]))
            return 4 - i;
    return 0; /* blocked */
}

static const an_lever *best_lever(const an_catalog *cat, int d) {
    const an_lever *best = NULL;
    for (size_t i = 0; cat && i < cat->n; i++) {
        const an_lever *l = &cat->levers[i];
        if (l->dim != d || !lever_rank(l->verdict))
            continue;
        if (!best || lever_rank(l->verdict) > lever_rank(best->verdict) ||
            (lever_rank(l->verdict) == lever_rank(best->verdict) && !isnan(l->gain) &&
             (isnan(best->gain) || l->gain > best->gain)))
            best = l;
    }
    return best;
}

static void build_checklist(an_report *r, const an_catalog *cat) {
    static const char *const names[AN_NDIMS] = {
        "L1 buffering (write coalescing/batching)",
        "L1 caching (chunk cache, app-level LRU, page cache)",
        "L1 prefetching (async I/O, background threads)",
        "L1 stage-in/stage-out (faster intermediate storage)",
        "L2 MPI-IO/ROMIO (collective buffering, data sieving)",
        "L2 HDF5 (chunk cache, metadata, page buffering)",
        "L2 other middleware (NetCDF, framework data loader)",
        "L3 filesystem striping/layout",
        "L3 near-node/burst-buffer acceleration",
        "L3 OS/kernel tuning (readahead, dirty ratio)",
        "Metadata-path tuning (DNE, Data-on-MDT, sharding)",
        "Compute/communication overlap (async checkpointing)"};
    for (int d = 1; d <= AN_NDIMS; d++) {
        an_check *c = &r->checklist[d - 1];
        c->dim = d;
        c->name = names[d - 1];
        char facts[320];
        dim_facts(r, d, facts, sizeof facts);
        const an_proposal *app = NULL, *sys = NULL;
        for (size_t i = 0; i < r->nprops; i++) {
            const an_proposal *p = &r->props[i];
            if (p->s->dim != d)
                continue;
            if (!p->system_only && (!app || p->app_pct > app->app_pct))
                app = p;
            if (p->system_only && (!sys || p->sys_pct > sys->sys_pct))
                sys = p;
        }
        if (app) {
            c->verdict = AN_V_APP;
            c->impact_pct = app->app_pct;
            c->sys_pct = app->sys_pct;
            snprintf(c->reason, sizeof c->reason, "%s (for %s); %s", app->s->name, app->findings,
                     facts);
        } else if (sys) {
            c->verdict = AN_V_SYSTEM;
            c->impact_pct = sys->app_pct;
            c->sys_pct = sys->sys_pct;
            snprintf(c->reason, sizeof c->reason,
                     "%s: system side %.0f%% (%s), but the application gains only %.1f%% of run "
                     "time; %s",
                     sys->s->name, sys->sys_pct, sys->sys_basis, sys->app_pct, facts);
        } else {
            char why[280];
            why_not(r, d, why, sizeof why);
            c->verdict = AN_V_NA;
            snprintf(c->reason, sizeof c->reason, "%s; %s", why, facts);
        }
        const an_lever *l = best_lever(cat, d);
        if (l) {
            char prev[560];
            snprintf(prev, sizeof prev, "%s", c->reason);
            c->verdict = AN_V_MEASURED;
            c->lever = l;
            char gain[64] = "";
            if (!isnan(l->gain) && isnan(l->band))
                snprintf(gain, sizeof gain, ", gain %+.1f%%", 100 * l->gain);
            else if (!isnan(l->gain))
                snprintf(gain, sizeof gain, ", gain %+.1f%% (noise band %.1f%%)", 100 * l->gain,
                         100 * l->band);
            snprintf(c->reason, sizeof c->reason, "%s %s=%s%s: %s (trace: %s)", l->verdict, l->name,
                     l->value, gain, l->reason, prev);
        }
        c->applicable = c->verdict != AN_V_NA;
    }
}

int an_report_build(an_report *r, const an_trace *t, const an_metrics *m, const an_ruleset *rs,
                    const an_catalog *cat) {
    memset(r, 0, sizeof *r);
    r->t = t;
    r->m = m;
    if (an_rules_eval(rs, t, m, &r->findings, &r->nfindings, &r->skipped))
        return ERR_NOMEM;
    r->props = calloc(NSTRAT, sizeof *r->props);
    if (!r->props)
        return err_set(ERR_NOMEM, "analyze: out of memory");
    if (!guard_of(r)) /* a run too short to rank bottlenecks gets no proposal */
        propose(r);
    build_checklist(r, cat);
    return 0;
}

void an_report_free(an_report *r) {
    if (!r)
        return;
    MEM_FREE(r->findings, r->skipped, r->props);
    memset(r, 0, sizeof *r);
}
