/* report: checklist, proposals, and the text and JSON renderings (see report.h). */
#include "analyze/report.h"

#include "core/err.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define C_DRISHTI "Bez et al., Drishti, PDSW 2022, https://ieeexplore.ieee.org/document/10027503"
#define C_WISIO "Yildirim et al., WisIO, ICS 2025, https://dl.acm.org/doi/10.1145/3721145.3730395"
#define C_MOHAN "Mohan et al., Analyzing and Mitigating Data Stalls in DNN Training, VLDB 2021, https://arxiv.org/abs/2007.06775"
#define C_DLIO "Devarajan et al., DLIO: A Data-Centric Benchmark for Scientific Deep Learning Applications, CCGrid 2021, https://ieeexplore.ieee.org/document/9499416"
#define C_CHECKFREQ "Mohan et al., CheckFreq, FAST 2021, https://www.usenix.org/conference/fast21/presentation/mohan"
#define C_SCR "Moody et al., Design, Modeling, and Evaluation of a Scalable Multi-level Checkpointing System (SCR), SC 2010, https://doi.org/10.1109/SC.2010.18"
#define C_HERMES "Kougkas et al., Hermes: a heterogeneous-aware multi-tiered distributed I/O buffering system, HPDC 2018, https://doi.org/10.1145/3208040.3208059"

static const an_strategy STRATEGIES[] = {
    {"coalesce-small-io", "Buffer and coalesce small requests",
     "Aggregate the small reads/writes into >= 4 MiB transfers through a staging buffer (or "
     "readv/writev), keeping the same bytes in the same order",
     1, "Drishti (rec. 2), WisIO small-io", C_DRISHTI, "small-io", 0.7, 0},
    {"collective-io", "MPI-IO collective buffering",
     "Route the shared-file accesses through MPI-IO collectives (romio_cb_read/write, "
     "cb_buffer_size=64 MiB) so aggregators issue few large requests",
     5, "Drishti (rec. 3)", C_DRISHTI, "small-io,sequentiality", 0.5, 0},
    {"metadata-cache", "Cache metadata results",
     "Cache stat()/open() results and keep descriptors open across iterations instead of "
     "re-opening and re-stat'ing the same files",
     2, "Drishti (rec. 6), WisIO metadata", C_DRISHTI, "metadata", 0.6, 0},
    {"shard-small-files", "Pack per-sample files into shards",
     "Store the samples in few large shard files with an index so one open serves many samples "
     "(same samples, same bytes)",
     11, "DLIO (Devarajan et al.)", C_DLIO, "metadata", 0.5, 0},
    {"metadata-path", "Metadata-path tuning",
     "Spread the directory over metadata servers (Lustre DNE, lfs mkdir -c) or use Data-on-MDT "
     "for small files",
     11, "WisIO metadata (L3), Drishti", C_WISIO, "metadata", 0.3, 0},
    {"prefetch-loader", "Prefetching data loader",
     "Read the next batches in background loader threads (prefetch depth >= 2, persistent "
     "workers) so fetch overlaps the current step's compute",
     3, "Mohan et al. (data stalls)", C_MOHAN, "data-loader,overlap,compute-utilisation", 0.8, 0},
    {"async-io", "Asynchronous I/O",
     "Issue the reads ahead of use (io_uring, posix_fadvise WILLNEED, HDF5 async VOL) so the "
     "same accesses overlap compute",
     3, "Drishti (rec. 8), WisIO read-time", C_DRISHTI, "overlap,sequentiality", 0.6, 0},
    {"app-cache", "Application-level data cache",
     "Keep hot samples resident (DL-aware cache, page cache) so repeated or random accesses of "
     "the same pattern are served from memory",
     2, "Mohan et al. (MinIO cache)", C_MOHAN, "sequentiality,data-loader", 0.5, 0},
    {"readahead", "Kernel readahead for sequential reads",
     "Raise readahead (POSIX_FADV_SEQUENTIAL per file, or blockdev --setra) so small sequential "
     "reads are served from larger device reads",
     10, "WisIO sequentiality (L3), Drishti", C_WISIO, "small-io", 0.4, 0},
    {"stage-in", "Stage data on node-local storage",
     "Copy the input files once to node-local NVMe, a burst buffer or /dev/shm and read them "
     "there with the unchanged access pattern",
     4, "Hermes (Kougkas et al.)", C_HERMES, "sequentiality,small-io,metadata,data-loader", 0.5,
     0},
    {"async-checkpoint", "Asynchronous checkpointing",
     "Snapshot the state in memory and persist it from a background thread while training "
     "continues (same checkpoints, same bytes)",
     12, "CheckFreq (Mohan et al.)", C_CHECKFREQ, "checkpoint", 0.8, 0},
    {"multilevel-checkpoint", "Multi-level checkpointing",
     "Write each checkpoint to node-local storage and drain it to the parallel file system in "
     "the background",
     9, "SCR (Moody et al.)", C_SCR, "checkpoint", 0.6, 0},
    {"striping", "Match striping to the transfer size",
     "Stripe large shared or checkpoint files over several OSTs with a stripe size aligned to "
     "the transfers (lfs setstripe -c 4-8 -S 4m)",
     8, "Drishti (rec. 7)", C_DRISHTI, "checkpoint,load-balance", 0.3, 0},
    {"stdio-to-posix", "Move bulk data off STDIO",
     "Read/write bulk data with POSIX or MPI-IO and large buffers instead of many small STDIO "
     "calls",
     7, "Drishti (rec. 1)", C_DRISHTI, "interface", 0.5, 0},
    {"rebalance", "Rebalance data across ranks",
     "Give every rank the same bytes (size-aware sample assignment, sort samples by size) so no "
     "rank waits for a slower one",
     7, "Drishti (rec. 7), WisIO stragglers", C_DRISHTI, "load-balance", 0.6, 0},
    {"hdf5-tuning", "HDF5 chunk cache and collective metadata",
     "Size the HDF5 chunk cache to the working set and enable collective metadata operations",
     6, "Drishti (HDF5 snippets)", C_DRISHTI, "small-io,metadata", 0.4, 0},
    {"writeback-tuning", "Dirty-page writeback tuning",
     "Lower vm.dirty_background_ratio so checkpoint bursts start draining earlier (needs root; "
     "node-wide effect)",
     10, "WisIO write-time (L3)", C_WISIO, "checkpoint", 0.2, 0},
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

static int has_cat(const char *list, const char *cat) {
    size_t n = strlen(cat);
    for (const char *p = list; (p = strstr(p, cat)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
            return 1;
    return 0;
}

/* Whether a strategy fits the trace at all (e.g. collective I/O needs shared files). */
static int strategy_fits(const an_strategy *s, const an_metrics *m, const char **why) {
    *why = NULL;
    if (!strcmp(s->key, "collective-io") && !m->nshared_files)
        return *why = "no file is shared by two processes", 0;
    if (!strcmp(s->key, "hdf5-tuning") && !m->nhdf5_files)
        return *why = "no HDF5 file", 0;
    if ((!strcmp(s->key, "metadata-path") || !strcmp(s->key, "striping")) &&
        strcmp(m->fs_hint, "lustre") && strcmp(m->fs_hint, "gpfs"))
        return *why = "paths do not look like a striped parallel file system", 0;
    if (!strcmp(s->key, "striping") && m->op_count_bound)
        return *why = "I/O is op-count-bound; striping targets bandwidth", 0;
    if (!strcmp(s->key, "readahead")) {
        uint64_t c = m->read_classified;
        if (!c || (double)m->read_seq / (double)c < 0.8)
            return *why = "reads are not mostly sequential", 0;
    }
    if (!strcmp(s->key, "shard-small-files") && m->nfiles_io < 16)
        return *why = "few files", 0;
    return 1;
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

static const an_finding *find_cat(const an_report *r, const char *cat) {
    for (size_t i = 0; i < r->nfindings; i++)
        if (strcmp(r->findings[i].severity, "info") && !strcmp(r->findings[i].rule->category, cat))
            return &r->findings[i];
    return NULL;
}

static void build_checklist(an_report *r) {
    const an_metrics *m = r->m;
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
    double pt = m->proc_time_s > 0 ? m->proc_time_s : 1;
    uint64_t data_ops = m->ops[AN_T_READ] + m->ops[AN_T_WRITE];
    double small_share = m->data_ops_known_size ? (double)m->small_ops / (double)m->data_ops_known_size : 0;
    char b1[32], b2[32];
    an_fmt_bytes(m->mean_xfer, b1, sizeof b1);
    for (int d = 0; d < AN_NDIMS; d++) {
        r->checklist[d].dim = d + 1;
        r->checklist[d].name = names[d];
    }
    an_check *c = r->checklist;
    const an_finding *f;
    /* 1 buffering */
    if ((f = find_cat(r, "small-io"))) {
        c[0].applicable = 1;
        c[0].impact_pct = f->stake_pct * 0.7;
        snprintf(c[0].reason, sizeof c[0].reason,
                 "%.0f%% of %llu data ops are <= 1 MiB (mean %s); %s fired", 100 * small_share,
                 (unsigned long long)data_ops, b1, f->rule->id);
    } else if (!data_ops) {
        snprintf(c[0].reason, sizeof c[0].reason, "the trace has no read or write operation");
    } else {
        snprintf(c[0].reason, sizeof c[0].reason,
                 "transfers are already large: mean %s, %.1f%% of %llu data ops <= 1 MiB", b1,
                 100 * small_share, (unsigned long long)data_ops);
    }
    /* 2 caching */
    double redundant = m->bytes_read ? (double)m->redundant_read_bytes / (double)m->bytes_read : 0;
    double rep = m->ops[AN_T_META] ? (double)m->repeated_stats / (double)m->ops[AN_T_META] : 0;
    if ((f = find_cat(r, "metadata")) || (f = find_cat(r, "sequentiality")) || redundant > 0.1) {
        c[1].applicable = 1;
        c[1].impact_pct = f ? f->stake_pct * 0.5 : 100 * redundant * an_class_share(m, AN_T_READ);
        an_fmt_bytes((double)m->redundant_read_bytes, b2, sizeof b2);
        snprintf(c[1].reason, sizeof c[1].reason,
                 "%s re-read within files, %llu repeated stat calls (%.0f%% of metadata ops)%s%s",
                 b2, (unsigned long long)m->repeated_stats, 100 * rep, f ? "; " : "",
                 f ? f->rule->id : "");
    } else {
        an_fmt_bytes((double)m->redundant_read_bytes, b2, sizeof b2);
        snprintf(c[1].reason, sizeof c[1].reason,
                 "nothing is re-used: %s re-read (%.1f%% of reads), %llu repeated stat calls", b2,
                 100 * redundant, (unsigned long long)m->repeated_stats);
    }
    /* 3 prefetching */
    if ((f = find_cat(r, "data-loader")) || (f = find_cat(r, "overlap")) ||
        (f = find_cat(r, "compute-utilisation"))) {
        c[2].applicable = 1;
        c[2].impact_pct = f->stake_pct * 0.8;
        snprintf(c[2].reason, sizeof c[2].reason,
                 "%.1f%% of I/O time is not hidden under compute, data-loader waits %.1f%% of "
                 "process time; %s fired",
                 m->io_union_s > 0 ? 100 * m->unoverlapped_io_s / m->io_union_s : 0,
                 100 * m->stall_s / pt, f->rule->id);
    } else if (!m->has_compute) {
        snprintf(c[2].reason, sizeof c[2].reason,
                 "cannot be judged from this trace: no compute annotation, so overlap is "
                 "unknown; all I/O is %.1f%% of process time",
                 100 * m->io_share);
    } else {
        snprintf(c[2].reason, sizeof c[2].reason,
                 "I/O is already overlapped: %.1f%% of I/O time runs under compute, loader "
                 "waits %.1f%% of process time",
                 m->io_union_s > 0 ? 100 * m->io_compute_overlap_s / m->io_union_s : 0,
                 100 * m->stall_s / pt);
    }
    /* 4 stage-in/out */
    double read_share = an_class_share(m, AN_T_READ);
    if (read_share >= 0.05 || ((f = find_cat(r, "sequentiality")) && f->stake_pct >= 2)) {
        c[3].applicable = 1;
        c[3].impact_pct = 100 * read_share * 0.5;
        an_fmt_bytes((double)m->bytes_read, b2, sizeof b2);
        snprintf(c[3].reason, sizeof c[3].reason,
                 "reads expose %.1f%% of process time (%s read); data on '%s' paths", 100 * read_share,
                 b2, m->fs_hint);
    } else {
        snprintf(c[3].reason, sizeof c[3].reason,
                 "reads expose only %.1f%% of process time (< 5%%); staging cannot pay for its copy",
                 100 * read_share);
    }
    /* 5 MPI-IO */
    if (m->mpiio_bytes || (m->nshared_files && (find_cat(r, "small-io") || find_cat(r, "sequentiality")))) {
        c[4].applicable = 1;
        f = find_cat(r, "small-io") ? find_cat(r, "small-io") : find_cat(r, "sequentiality");
        c[4].impact_pct = f ? f->stake_pct * 0.5 : 0;
        snprintf(c[4].reason, sizeof c[4].reason,
                 "%zu file(s) shared by several processes with small or random accesses",
                 m->nshared_files);
    } else if (!m->nshared_files) {
        snprintf(c[4].reason, sizeof c[4].reason,
                 "file-per-process: none of the %zu files is accessed by two processes, so "
                 "collective buffering has nothing to aggregate",
                 m->nfiles_io);
    } else {
        snprintf(c[4].reason, sizeof c[4].reason,
                 "%zu shared file(s), but accesses are large (mean %s) and not random",
                 m->nshared_files, b1);
    }
    /* 6 HDF5 */
    if (m->nhdf5_files && m->io_meaningful) {
        c[5].applicable = 1;
        c[5].impact_pct = 100 * m->io_share * 0.3;
        snprintf(c[5].reason, sizeof c[5].reason, "%zu HDF5 file(s) carry I/O (%.1f%% of process time)",
                 m->nhdf5_files, 100 * m->io_share);
    } else {
        snprintf(c[5].reason, sizeof c[5].reason,
                 m->nhdf5_files ? "HDF5 files present but I/O is only %.1f%% of process time"
                                : "no HDF5 file among the %.0f files accessed",
                 m->nhdf5_files ? 100 * m->io_share : (double)m->nfiles_io);
    }
    /* 7 other middleware / framework loader */
    if ((f = find_cat(r, "data-loader")) || (f = find_cat(r, "interface")) || (f = find_cat(r, "load-balance"))) {
        c[6].applicable = 1;
        c[6].impact_pct = f->stake_pct * 0.6;
        snprintf(c[6].reason, sizeof c[6].reason, "%s fired (%.1f%% of run time at stake)",
                 f->rule->id, f->stake_pct);
    } else if (m->nnetcdf_files && m->io_meaningful) {
        c[6].applicable = 1;
        c[6].impact_pct = 100 * m->io_share * 0.3;
        snprintf(c[6].reason, sizeof c[6].reason, "%zu NetCDF file(s) carry I/O", m->nnetcdf_files);
    } else {
        snprintf(c[6].reason, sizeof c[6].reason,
                 m->has_fetch ? "the data loader waits only %.1f%% of process time, STDIO and "
                                "rank balance are fine"
                              : "no data-loader annotation and no NetCDF file; STDIO share "
                                "%.1f%% of bytes",
                 m->has_fetch ? 100 * m->stall_s / pt
                              : (m->stdio_bytes + m->posix_bytes
                                     ? 100.0 * (double)m->stdio_bytes /
                                           (double)(m->stdio_bytes + m->posix_bytes + m->mpiio_bytes)
                                     : 0));
    }
    /* 8 striping */
    int pfs = !strcmp(m->fs_hint, "lustre") || !strcmp(m->fs_hint, "gpfs");
    double write_share = an_class_share(m, AN_T_WRITE);
    if (pfs && !m->op_count_bound && (read_share + write_share) >= 0.05) {
        c[7].applicable = 1;
        c[7].impact_pct = 100 * (read_share + write_share) * 0.3;
        snprintf(c[7].reason, sizeof c[7].reason,
                 "bandwidth-bound I/O (mean %s) on %s paths, %.1f%% of process time", b1,
                 m->fs_hint, 100 * (read_share + write_share));
    } else if (m->op_count_bound) {
        snprintf(c[7].reason, sizeof c[7].reason,
                 "I/O is op-count-bound (metadata and < 64 KiB transfers take most of the I/O "
                 "time, mean %s): striping only helps bandwidth-bound transfers",
                 b1);
    } else if (!pfs) {
        snprintf(c[7].reason, sizeof c[7].reason,
                 "the files live on '%s' paths, not a striped parallel file system", m->fs_hint);
    } else {
        snprintf(c[7].reason, sizeof c[7].reason,
                 "data transfers take only %.1f%% of process time", 100 * (read_share + write_share));
    }
    /* 9 near-node / burst buffer */
    double ckpt_share = m->wall_s > 0 ? m->ckpt_time_s / m->wall_s : 0;
    if (m->io_meaningful && (ckpt_share >= 0.02 || read_share >= 0.05 || write_share >= 0.05)) {
        c[8].applicable = 1;
        c[8].impact_pct = 100 * (ckpt_share * 0.6 + (read_share + write_share) * 0.3);
        snprintf(c[8].reason, sizeof c[8].reason,
                 "I/O is %.1f%% of process time; checkpoints %.1f%% of wall time", 100 * m->io_share,
                 100 * ckpt_share);
    } else {
        snprintf(c[8].reason, sizeof c[8].reason,
                 "I/O is %.1f%% of process time and checkpoints %.1f%% of wall time: a faster tier "
                 "has little to accelerate",
                 100 * m->io_share, 100 * ckpt_share);
    }
    /* 10 OS/kernel */
    const char *why = NULL;
    if ((find_cat(r, "small-io") && strategy_fits(&STRATEGIES[8], m, &why)) ||
        (find_cat(r, "checkpoint"))) {
        c[9].applicable = 1;
        f = find_cat(r, "small-io") ? find_cat(r, "small-io") : find_cat(r, "checkpoint");
        c[9].impact_pct = f->stake_pct * 0.3;
        snprintf(c[9].reason, sizeof c[9].reason,
                 "%s fired; readahead/writeback are node-wide and need root (check tunability)",
                 f->rule->id);
    } else {
        snprintf(c[9].reason, sizeof c[9].reason,
                 "no small sequential reads and no write bursts to absorb (reads %.1f%%, writes "
                 "%.1f%% of process time)",
                 100 * read_share, 100 * write_share);
    }
    /* 11 metadata path */
    double meta_share_io = m->io_time_s > 0 ? m->t_s[AN_T_META] / m->io_time_s : 0;
    if ((f = find_cat(r, "metadata")) || (meta_share_io >= 0.3 && m->io_meaningful)) {
        c[10].applicable = 1;
        c[10].impact_pct = f ? f->stake_pct * 0.5 : 100 * an_class_share(m, AN_T_META) * 0.5;
        snprintf(c[10].reason, sizeof c[10].reason,
                 "metadata is %.0f%% of I/O time (%llu ops over %zu files)", 100 * meta_share_io,
                 (unsigned long long)m->ops[AN_T_META], m->nfiles_io);
    } else {
        snprintf(c[10].reason, sizeof c[10].reason,
                 "metadata is %.1f%% of I/O time (%llu ops), %.2f%% of process time",
                 100 * meta_share_io, (unsigned long long)m->ops[AN_T_META],
                 100 * an_class_share(m, AN_T_META));
    }
    /* 12 compute/communication overlap */
    if ((f = find_cat(r, "checkpoint")) || ckpt_share >= 0.02) {
        c[11].applicable = 1;
        c[11].impact_pct = 100 * ckpt_share * 0.8;
        char bw[32];
        an_fmt_bytes(m->ckpt_bw, bw, sizeof bw);
        snprintf(c[11].reason, sizeof c[11].reason,
                 "checkpoints block %.1f%% of wall time (%llu events, %s/s)", 100 * ckpt_share,
                 (unsigned long long)m->ckpt_events, bw);
    } else {
        snprintf(c[11].reason, sizeof c[11].reason,
                 m->ckpt_time_s > 0 ? "checkpoints take only %.2f%% of wall time"
                                    : "no checkpoint in the trace (%.0f annotated events, no "
                                      "checkpoint-like file written)",
                 m->ckpt_time_s > 0 ? 100 * ckpt_share : (double)m->ckpt_events);
    }
    if (!m->io_meaningful)
        for (int d = 0; d < AN_NDIMS; d++)
            if (c[d].applicable && c[d].impact_pct > 100 * m->io_share)
                c[d].impact_pct = 100 * m->io_share;
}

int an_report_build(an_report *r, const an_trace *t, const an_metrics *m, const an_ruleset *rs) {
    memset(r, 0, sizeof *r);
    r->t = t;
    r->m = m;
    if (an_rules_eval(rs, t, m, &r->findings, &r->nfindings, &r->skipped))
        return ERR_NOMEM;
    build_checklist(r);
    r->props = calloc(NSTRAT, sizeof *r->props);
    if (!r->props)
        return err_set(ERR_NOMEM, "analyze: out of memory");
    for (size_t k = 0; k < NSTRAT; k++) {
        const an_strategy *s = &STRATEGIES[k];
        const char *why;
        /* Guard rail: never propose doing less work. */
        if (s->does_less || an_text_does_less(s->desc) || an_text_does_less(s->name))
            continue;
        if (!strategy_fits(s, m, &why))
            continue;
        an_proposal *p = NULL;
        for (size_t i = 0; i < r->nfindings; i++) {
            const an_finding *f = &r->findings[i];
            if (!strcmp(f->severity, "info") || !has_cat(s->categories, f->rule->category))
                continue;
            if (!p) {
                p = &r->props[r->nprops++];
                p->s = s;
            }
            double app = f->stake_pct * s->recover;
            if (app > p->app_pct)
                p->app_pct = app;
            size_t l = strlen(p->findings);
            if (!strstr(p->findings, f->rule->id) && l + strlen(f->rule->id) + 3 < sizeof p->findings)
                snprintf(p->findings + l, sizeof p->findings - l, "%s%s", l ? ", " : "",
                         f->rule->id);
        }
        if (p) {
            p->sys_pct = sys_impact(s, m, p->sys_basis, sizeof p->sys_basis);
            p->score = 0.5 * p->app_pct + 0.5 * p->sys_pct;
        }
    }
    qsort(r->props, r->nprops, sizeof *r->props, cmp_prop);
    return 0;
}

void an_report_free(an_report *r) {
    if (!r)
        return;
    free(r->findings);
    free(r->skipped);
    free(r->props);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------------ text */

static void text_rule(FILE *out, const char *title) {
    fprintf(out, "\n== %s\n", title);
}

void an_report_text(const an_report *r, FILE *out, int top) {
    const an_trace *t = r->t;
    const an_metrics *m = r->m;
    char b1[32], b2[32], b3[32];
    fprintf(out, "scaffold analyze: %zu file(s), %zu events, %zu process(es) on %zu host(s), "
                 "%zu thread(s), wall %.3f s\n",
            t->ninputs, t->n, m->nprocs, m->nhosts, m->nthreads, m->wall_s);
    for (size_t i = 0; i < t->ninputs; i++)
        if (t->inputs[i].note[0])
            fprintf(out, "  warning: %s: %s\n", t->inputs[i].path, t->inputs[i].note);
    if (t->clock_skew)
        fprintf(out, "  warning: clock skew between hosts: first timestamps spread %.1f s "
                     "(std-dev > 30 s); cross-host timing is unreliable\n",
                t->host_start_stddev_s);
    if (m->nignored_events)
        fprintf(out, "  note: %zu events on system paths (/usr/lib, /proc, python, ...) left out "
                     "(--include-system keeps them)\n",
                m->nignored_events);
    text_rule(out, "I/O summary");
    an_fmt_bytes((double)m->bytes_read, b1, sizeof b1);
    an_fmt_bytes((double)m->bytes_written, b2, sizeof b2);
    an_fmt_bytes(m->mean_xfer, b3, sizeof b3);
    fprintf(out, "  I/O is %.1f%% of process time (%.3f s of %.3f s)%s\n", 100 * m->io_share,
            m->io_union_s, m->proc_time_s,
            m->io_meaningful ? "" : "  -> NOT a meaningful share of the run: fixes cannot gain much");
    fprintf(out, "  time: read %.3f s, write %.3f s, metadata %.3f s, sync %.3f s, other %.3f s\n",
            m->t_s[AN_T_READ], m->t_s[AN_T_WRITE], m->t_s[AN_T_META], m->t_s[AN_T_SYNC],
            m->t_s[AN_T_OTHER]);
    fprintf(out, "  ops: read %llu, write %llu, metadata %llu, sync %llu; bytes read %s, written %s, "
                 "mean transfer %s\n",
            (unsigned long long)m->ops[AN_T_READ], (unsigned long long)m->ops[AN_T_WRITE],
            (unsigned long long)m->ops[AN_T_META], (unsigned long long)m->ops[AN_T_SYNC], b1, b2,
            b3);
    fprintf(out, "  shape: %s (%.0f%% of I/O time in metadata and < 64 KiB transfers)\n",
            m->op_count_bound ? "op-count-bound" : "bandwidth-bound",
            m->io_time_s > 0 ? 100 * (m->t_s[AN_T_META] + m->small_time_s) / m->io_time_s : 0);
    double tot = (double)(m->stdio_bytes + m->posix_bytes + m->mpiio_bytes);
    fprintf(out, "  interfaces: POSIX %llu ops, STDIO %llu ops (%.1f%% of bytes, %.3f s)\n",
            (unsigned long long)m->posix_ops, (unsigned long long)m->stdio_ops,
            tot > 0 ? 100 * (double)m->stdio_bytes / tot : 0, m->stdio_time_s);
    uint64_t rc = m->read_classified, wc = m->write_classified;
    fprintf(out, "  access pattern: reads %llu classified: %.0f%% consecutive, %.0f%% sequential, "
                 "%.0f%% random; writes %llu: %.0f%% / %.0f%% / %.0f%%\n",
            (unsigned long long)rc, rc ? 100.0 * (double)m->read_consec / (double)rc : 0,
            rc ? 100.0 * (double)m->read_seq / (double)rc : 0,
            rc ? 100.0 * (double)m->read_random / (double)rc : 0, (unsigned long long)wc,
            wc ? 100.0 * (double)m->write_consec / (double)wc : 0,
            wc ? 100.0 * (double)m->write_seq / (double)wc : 0,
            wc ? 100.0 * (double)m->write_random / (double)wc : 0);
    fprintf(out, "  access sizes (Darshan buckets, reads/writes):");
    for (int k = 0; k < AN_NBUCKETS; k++)
        if (m->hist_read[k] || m->hist_write[k])
            fprintf(out, " %s:%llu/%llu", an_bucket_names[k], (unsigned long long)m->hist_read[k],
                    (unsigned long long)m->hist_write[k]);
    fputc('\n', out);
    if (m->has_compute || m->has_fetch)
        fprintf(out, "  overlap: compute utilisation %.1f%%, unoverlapped I/O %.3f s (%.1f%% of I/O), "
                     "data-loader stall %.3f s (%.1f%% of process time)\n",
                100 * m->compute_util, m->unoverlapped_io_s,
                m->io_union_s > 0 ? 100 * m->unoverlapped_io_s / m->io_union_s : 0, m->stall_s,
                m->proc_time_s > 0 ? 100 * m->stall_s / m->proc_time_s : 0);
    else
        fprintf(out, "  overlap: no compute/data-loader annotations in the trace\n");
    if (m->epochs)
        fprintf(out, "  epochs: %llu, mean %.3f s (min %.3f, max %.3f, first %.3f, last %.3f)\n",
                (unsigned long long)m->epochs, m->epoch_mean_s, m->epoch_min_s, m->epoch_max_s,
                m->epoch_first_s, m->epoch_last_s);
    if (m->ckpt_time_s > 0 || m->ckpt_events) {
        an_fmt_bytes((double)m->ckpt_bytes, b1, sizeof b1);
        an_fmt_bytes(m->ckpt_bw, b2, sizeof b2);
        fprintf(out, "  checkpoints: %llu events, %s, %.3f s (%.1f%% of wall), %s/s\n",
                (unsigned long long)m->ckpt_events, b1, m->ckpt_time_s,
                m->wall_s > 0 ? 100 * m->ckpt_time_s / m->wall_s : 0, b2);
    }
    if (m->nprocs > 1)
        fprintf(out, "  ranks: I/O time outside checkpoints max %.3f s, median %.3f s, min %.3f s "
                     "(straggler ratio %.1f%%), byte imbalance %.1f%%\n",
                m->io_max_s, m->io_median_s, m->io_min_s, 100 * m->straggler_ratio,
                100 * m->bytes_imbalance);
    text_rule(out, "Findings");
    size_t nb = 0;
    for (size_t i = 0; i < r->nfindings; i++) {
        const an_finding *f = &r->findings[i];
        if (!strcmp(f->severity, "info"))
            continue;
        nb++;
        fprintf(out, "  [%s] %s (%s) -- %.1f%% of run time at stake, category %s\n", f->severity,
                f->rule->id, f->rule->source, f->stake_pct, f->rule->category);
        fprintf(out, "      %s\n", f->message);
        for (int e = 0; e < f->nentities; e++)
            fprintf(out, "      - %s\n", f->entities[e]);
    }
    if (!nb)
        fprintf(out, "  none: no bottleneck rule fired\n");
    for (size_t i = 0; i < r->nfindings; i++)
        if (!strcmp(r->findings[i].severity, "info"))
            fprintf(out, "  [info] %s: %s\n", r->findings[i].rule->id, r->findings[i].message);
    text_rule(out, "12-dimension checklist");
    for (int d = 0; d < AN_NDIMS; d++) {
        const an_check *c = &r->checklist[d];
        if (c->applicable)
            fprintf(out, "  %2d. %-52s APPLICABLE (~%.1f%% of run time): %s\n", c->dim, c->name,
                    c->impact_pct, c->reason);
        else
            fprintf(out, "  %2d. %-52s not applicable: %s\n", c->dim, c->name, c->reason);
    }
    text_rule(out, "Proposals (weighted score = 50% app impact + 50% system impact)");
    if (!r->nprops)
        fprintf(out, "  none: nothing to fix\n");
    else
        fprintf(out, "  %-3s %-38s %8s %8s %8s  %s\n", "#", "strategy", "app %", "sys %", "score",
                "source");
    for (size_t i = 0; i < r->nprops; i++) {
        const an_proposal *p = &r->props[i];
        fprintf(out, "  %-3zu %-38s %8.1f %8.1f %8.1f  %s\n", i + 1, p->s->name, p->app_pct,
                p->sys_pct, p->score, p->s->source);
        fprintf(out, "      %s (dimension %d; for %s; system: %s)\n", p->s->desc, p->s->dim,
                p->findings, p->sys_basis);
    }
    text_rule(out, "Top processes by I/O time");
    /* Simple selection of the top processes. */
    size_t shown = 0;
    uint8_t *done = calloc(m->nprocs + 1, 1);
    while (done && shown < (size_t)top && shown < m->nprocs) {
        size_t best = SIZE_MAX;
        for (size_t p = 0; p < m->nprocs; p++)
            if (!done[p] && (best == SIZE_MAX || m->procs[p].io_s > m->procs[best].io_s))
                best = p;
        done[best] = 1;
        shown++;
        const an_proc_stat *st = &m->procs[best];
        char lab[64];
        an_proc_label(t, (uint32_t)best, lab, sizeof lab);
        an_fmt_bytes((double)(st->read_bytes + st->write_bytes), b1, sizeof b1);
        fprintf(out, "  %-24s io %.3f s (r %.3f w %.3f m %.3f) of %.3f s, %s, %llu ops\n", lab,
                st->io_s, st->t_s[AN_T_READ], st->t_s[AN_T_WRITE], st->t_s[AN_T_META], st->span_s,
                b1, (unsigned long long)st->ops);
    }
    free(done);
    text_rule(out, "Top files by I/O time");
    for (size_t k = 0; k < m->nfiles && k < (size_t)top; k++) {
        const an_file_stat *fs = &m->files[k];
        an_fmt_bytes((double)(fs->bytes_read + fs->bytes_written), b1, sizeof b1);
        fprintf(out, "  %.3f s  %8llu ops  %10s  %s%s\n", fs->time_s, (unsigned long long)fs->ops,
                b1, an_strtab_get(&t->files, fs->file), fs->nprocs > 1 ? " (shared)" : "");
    }
    fprintf(out, "\nsummary: %zu events, %.1f%% I/O, %zu finding(s), top proposal: %s\n", t->n,
            100 * m->io_share, nb, r->nprops ? r->props[0].s->name : "none");
}

/* ------------------------------------------------------------------ JSON */

static void json_inputs(an_jw *w, const an_trace *t) {
    an_jw_arr(w, "inputs");
    for (size_t i = 0; i < t->ninputs; i++) {
        const an_input *in = &t->inputs[i];
        an_jw_obj(w, NULL);
        an_jw_str(w, "path", in->path);
        an_jw_u64(w, "events", in->events);
        an_jw_u64(w, "lines", in->lines);
        an_jw_u64(w, "malformed", in->malformed);
        an_jw_u64(w, "gzip_members", in->members);
        an_jw_bool(w, "truncated", in->truncated);
        an_jw_bool(w, "failed", in->failed);
        an_jw_u64(w, "unknown_metadata", in->unknown_meta);
        an_jw_str(w, "note", in->note);
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
}

static void json_u64s(an_jw *w, const char *key, const uint64_t *v, int n) {
    an_jw_arr(w, key);
    for (int k = 0; k < n; k++)
        an_jw_u64(w, NULL, v[k]);
    an_jw_end(w, ']');
}

static void json_pattern(an_jw *w, const char *key, uint64_t cls, uint64_t con, uint64_t seq,
                         uint64_t rnd) {
    an_jw_obj(w, key);
    an_jw_u64(w, "classified", cls);
    an_jw_u64(w, "consecutive", con);
    an_jw_u64(w, "sequential", seq);
    an_jw_u64(w, "random", rnd);
    an_jw_end(w, '}');
}

static void json_io(an_jw *w, const an_metrics *m) {
    static const char *const tn[AN_T_COUNT] = {"read", "write", "metadata", "sync", "other"};
    an_jw_obj(w, "io");
    an_jw_num(w, "share", m->io_share);
    an_jw_bool(w, "meaningful", m->io_meaningful);
    an_jw_num(w, "union_s", m->io_union_s);
    an_jw_num(w, "wall_union_s", m->io_wall_union_s);
    an_jw_num(w, "summed_s", m->io_time_s);
    an_jw_obj(w, "time_s");
    for (int k = 0; k < AN_T_COUNT; k++)
        an_jw_num(w, tn[k], m->t_s[k]);
    an_jw_end(w, '}');
    an_jw_obj(w, "ops");
    for (int k = 0; k < AN_T_COUNT; k++)
        an_jw_u64(w, tn[k], m->ops[k]);
    an_jw_end(w, '}');
    an_jw_u64(w, "bytes_read", m->bytes_read);
    an_jw_u64(w, "bytes_written", m->bytes_written);
    an_jw_num(w, "mean_transfer", m->mean_xfer);
    an_jw_str(w, "shape", m->op_count_bound ? "op-count-bound" : "bandwidth-bound");
    an_jw_obj(w, "stdio");
    an_jw_u64(w, "ops", m->stdio_ops);
    an_jw_u64(w, "bytes", m->stdio_bytes);
    an_jw_num(w, "time_s", m->stdio_time_s);
    an_jw_end(w, '}');
    an_jw_obj(w, "posix");
    an_jw_u64(w, "ops", m->posix_ops);
    an_jw_u64(w, "bytes", m->posix_bytes);
    an_jw_end(w, '}');
    an_jw_obj(w, "histogram");
    an_jw_arr(w, "buckets");
    for (int k = 0; k < AN_NBUCKETS; k++)
        an_jw_str(w, NULL, an_bucket_names[k]);
    an_jw_end(w, ']');
    json_u64s(w, "read", m->hist_read, AN_NBUCKETS);
    json_u64s(w, "write", m->hist_write, AN_NBUCKETS);
    an_jw_end(w, '}');
    an_jw_obj(w, "access_pattern");
    json_pattern(w, "read", m->read_classified, m->read_consec, m->read_seq, m->read_random);
    json_pattern(w, "write", m->write_classified, m->write_consec, m->write_seq, m->write_random);
    an_jw_end(w, '}');
    an_jw_end(w, '}');
}

static void json_findings(an_jw *w, const an_report *r) {
    an_jw_arr(w, "findings");
    for (size_t i = 0; i < r->nfindings; i++) {
        const an_finding *f = &r->findings[i];
        an_jw_obj(w, NULL);
        an_jw_str(w, "id", f->rule->id);
        an_jw_str(w, "source", f->rule->source);
        an_jw_str(w, "citation", f->rule->citation);
        an_jw_str(w, "severity", f->severity);
        an_jw_str(w, "category", f->rule->category);
        an_jw_num(w, "value", f->value);
        an_jw_num(w, "threshold", f->rule->threshold);
        an_jw_num(w, "stake_pct", f->stake_pct);
        an_jw_str(w, "message", f->message);
        an_jw_arr(w, "entities");
        for (int e = 0; e < f->nentities; e++)
            an_jw_str(w, NULL, f->entities[e]);
        an_jw_end(w, ']');
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
    an_jw_str(w, "not_evaluated", r->skipped ? r->skipped : "");
}

static void json_checklist_proposals(an_jw *w, const an_report *r) {
    an_jw_arr(w, "checklist");
    for (int d = 0; d < AN_NDIMS; d++) {
        const an_check *c = &r->checklist[d];
        an_jw_obj(w, NULL);
        an_jw_i64(w, "dim", c->dim);
        an_jw_str(w, "name", c->name);
        an_jw_str(w, "verdict", c->applicable ? "applicable" : "not applicable");
        an_jw_num(w, "impact_pct", c->applicable ? c->impact_pct : 0);
        an_jw_str(w, "reason", c->reason);
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
    an_jw_arr(w, "proposals");
    for (size_t i = 0; i < r->nprops; i++) {
        const an_proposal *p = &r->props[i];
        an_jw_obj(w, NULL);
        an_jw_u64(w, "rank", i + 1);
        an_jw_str(w, "strategy", p->s->name);
        an_jw_str(w, "key", p->s->key);
        an_jw_str(w, "description", p->s->desc);
        an_jw_i64(w, "dimension", p->s->dim);
        an_jw_num(w, "app_impact_pct", p->app_pct);
        an_jw_num(w, "system_impact_pct", p->sys_pct);
        an_jw_num(w, "weighted_score", p->score);
        an_jw_str(w, "source", p->s->source);
        an_jw_str(w, "citation", p->s->citation);
        an_jw_str(w, "for", p->findings);
        an_jw_str(w, "system_basis", p->sys_basis);
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
}

static void json_tables(an_jw *w, const an_report *r, int top) {
    const an_trace *t = r->t;
    const an_metrics *m = r->m;
    an_jw_arr(w, "processes");
    for (size_t p = 0; p < m->nprocs && p < (size_t)(top * 20); p++) {
        const an_proc_stat *st = &m->procs[p];
        char lab[64];
        an_proc_label(t, (uint32_t)p, lab, sizeof lab);
        an_jw_obj(w, NULL);
        an_jw_str(w, "label", lab);
        an_jw_i64(w, "pid", t->procs[p].pid);
        an_jw_i64(w, "rank", t->procs[p].rank);
        an_jw_num(w, "io_s", st->io_s);
        an_jw_num(w, "io_outside_checkpoint_s", st->io_nockpt_s);
        an_jw_num(w, "read_s", st->t_s[AN_T_READ]);
        an_jw_num(w, "write_s", st->t_s[AN_T_WRITE]);
        an_jw_num(w, "metadata_s", st->t_s[AN_T_META]);
        an_jw_num(w, "span_s", st->span_s);
        an_jw_num(w, "compute_s", st->compute_s);
        an_jw_num(w, "stall_s", st->stall_s);
        an_jw_u64(w, "bytes_read", st->read_bytes);
        an_jw_u64(w, "bytes_written", st->write_bytes);
        an_jw_u64(w, "ops", st->ops);
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
    an_jw_arr(w, "files");
    for (size_t k = 0; k < m->nfiles && k < (size_t)top; k++) {
        const an_file_stat *fs = &m->files[k];
        an_jw_obj(w, NULL);
        an_jw_str(w, "path", an_strtab_get(&t->files, fs->file));
        an_jw_num(w, "time_s", fs->time_s);
        an_jw_num(w, "metadata_s", fs->t_s[AN_T_META]);
        an_jw_u64(w, "ops", fs->ops);
        an_jw_u64(w, "bytes_read", fs->bytes_read);
        an_jw_u64(w, "bytes_written", fs->bytes_written);
        an_jw_u64(w, "random", fs->random);
        an_jw_u64(w, "classified", fs->classified);
        an_jw_u64(w, "processes", fs->nprocs);
        an_jw_end(w, '}');
    }
    an_jw_end(w, ']');
    an_jw_obj(w, "windows");
    an_jw_num(w, "width_s", m->window_s);
    an_jw_arr(w, "rows");
    for (size_t k = 0; k < m->nwindows; k++) {
        const an_window *win = &m->windows[k];
        an_jw_arr(w, NULL);
        for (int c = 0; c < AN_T_COUNT; c++)
            an_jw_num(w, NULL, win->t_s[c]);
        an_jw_num(w, NULL, win->compute_s);
        an_jw_num(w, NULL, win->fetch_s);
        an_jw_num(w, NULL, win->ckpt_s);
        an_jw_u64(w, NULL, win->bytes_read);
        an_jw_u64(w, NULL, win->bytes_written);
        an_jw_end(w, ']');
    }
    an_jw_end(w, ']');
    static const char *const cols[] = {"read_s",    "write_s", "metadata_s",   "sync_s",
                                       "other_s",   "compute_s", "fetch_s",    "checkpoint_s",
                                       "bytes_read", "bytes_written"};
    an_jw_arr(w, "columns");
    for (size_t k = 0; k < sizeof cols / sizeof cols[0]; k++)
        an_jw_str(w, NULL, cols[k]);
    an_jw_end(w, ']');
    an_jw_end(w, '}');
}

void an_report_json(const an_report *r, FILE *out, int top) {
    const an_trace *t = r->t;
    const an_metrics *m = r->m;
    an_jw w;
    an_jw_init(&w, out);
    an_jw_obj(&w, NULL);
    an_jw_str(&w, "tool", "scaffold analyze");
    an_jw_i64(&w, "format", 1);
    json_inputs(&w, t);
    an_jw_obj(&w, "run");
    an_jw_u64(&w, "events", t->n);
    an_jw_u64(&w, "processes", m->nprocs);
    an_jw_u64(&w, "hosts", m->nhosts);
    an_jw_u64(&w, "threads", m->nthreads);
    an_jw_u64(&w, "files", m->nfiles_io);
    an_jw_num(&w, "wall_s", m->wall_s);
    an_jw_num(&w, "process_time_s", m->proc_time_s);
    an_jw_bool(&w, "clock_skew", t->clock_skew);
    an_jw_num(&w, "host_start_stddev_s", t->host_start_stddev_s);
    an_jw_u64(&w, "ignored_system_events", m->nignored_events);
    an_jw_num(&w, "load_seconds", t->load_seconds);
    an_jw_end(&w, '}');
    json_io(&w, m);
    an_jw_obj(&w, "overlap");
    an_jw_bool(&w, "has_compute", m->has_compute);
    an_jw_bool(&w, "has_fetch", m->has_fetch);
    an_jw_num(&w, "compute_util", m->compute_util);
    an_jw_num(&w, "unoverlapped_io_s", m->unoverlapped_io_s);
    an_jw_num(&w, "loader_stall_s", m->stall_s);
    an_jw_end(&w, '}');
    an_jw_obj(&w, "checkpoint");
    an_jw_u64(&w, "events", m->ckpt_events);
    an_jw_u64(&w, "bytes", m->ckpt_bytes);
    an_jw_num(&w, "time_s", m->ckpt_time_s);
    an_jw_num(&w, "bandwidth_Bps", m->ckpt_bw);
    an_jw_num(&w, "share_of_wall", m->wall_s > 0 ? m->ckpt_time_s / m->wall_s : 0);
    an_jw_end(&w, '}');
    an_jw_obj(&w, "epochs");
    an_jw_u64(&w, "count", m->epochs);
    an_jw_num(&w, "mean_s", m->epoch_mean_s);
    an_jw_num(&w, "min_s", m->epochs ? m->epoch_min_s : 0);
    an_jw_num(&w, "max_s", m->epoch_max_s);
    an_jw_end(&w, '}');
    an_jw_obj(&w, "stragglers");
    an_jw_num(&w, "ratio", m->straggler_ratio);
    an_jw_num(&w, "io_max_s", m->io_max_s);
    an_jw_num(&w, "io_median_s", m->io_median_s);
    an_jw_num(&w, "bytes_imbalance", m->bytes_imbalance);
    an_jw_end(&w, '}');
    json_findings(&w, r);
    json_checklist_proposals(&w, r);
    json_tables(&w, r, top);
    an_jw_end(&w, '}');
    fputc('\n', out);
}
