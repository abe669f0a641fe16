/* flush.c: the flusher thread and the output file. Every FLUSH_MS, every FLUSH_MIB written by a
 * thread, and at exit, exec and a signal, the flusher drains every ring, formats the records
 * (format.c) and writes complete gzip members: each member is compressed whole in memory
 * (libdeflate when built with it, zlib otherwise) and reaches the file in one write(), so a
 * killed process leaves whole members (at most the last flush interval is lost) and gzip, zcat
 * and dftracer's readers accept the file; only a SIGKILL landing during that write's copy can
 * cut the last member, which the analyzer reads up to the cut. The tracer's own file I/O goes through raw
 * system calls, never through its own wrappers. */
#include "trace_int.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifdef TRC_HAVE_LIBDEFLATE
#include <libdeflate.h>
#else
#include <zlib.h>
#endif

/* A member is written once this much text is staged (bounded memory, good compression). */
#define MEMBER_TEXT (2u << 20)

/* ---------------------------------------------------------------- raw system calls */
static long sys_write(int fd, const void *p, size_t n) { return syscall(SYS_write, fd, p, n); }
static int sys_close(int fd) { return (int)syscall(SYS_close, fd); }
static int sys_open(const char *path, int flags, int mode) {
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        long w = sys_write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* ---------------------------------------------------------------- internal descriptors */
/* Keeps our descriptors away from the low numbers applications reuse, dup2 onto or close in
 * loops. */
int trc_move_high(int fd) {
    if (fd < 0)
        return fd;
    int lim = trc_g.nfds > 0 ? trc_g.nfds : 1024;
    int want = lim > 1024 ? 900 : lim / 2;
    int nfd = (int)syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, want);
    if (nfd < 0)
        return fd;
    sys_close(fd);
    return nfd;
}

static void make_wake_fd(void) {
    int fd = trc_move_high(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    __atomic_store_n(&trc_g.wake_fd, fd, __ATOMIC_RELEASE);
}

static void make_done_pipe(void) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) == 0) {
        trc_g.done_rd = trc_move_high(p[0]);
        trc_g.done_wr = trc_move_high(p[1]);
    }
}

void trc_fd_stolen(int fd) {
    if (fd < 0)
        return;
    int x = fd;
    __atomic_compare_exchange_n(&trc_g.wake_fd, &x, -1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    x = fd;
    __atomic_compare_exchange_n(&trc_g.out_fd, &x, -1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    if (trc_g.done_rd == fd)
        trc_g.done_rd = -1;
    if (trc_g.done_wr == fd)
        trc_g.done_wr = -1;
}

void trc_wake_flusher(void) {
    int fd = __atomic_load_n(&trc_g.wake_fd, __ATOMIC_ACQUIRE);
    if (fd >= 0) {
        uint64_t one = 1;
        (void)sys_write(fd, &one, sizeof one);
    }
}

/* ---------------------------------------------------------------- output file */
static int file_opened, file_failed;
static uint64_t num_events;
static char out_path[PATH_MAX + 64];
static trc_buf stage;
static unsigned char *zbuf;
static size_t zcap;
#ifdef TRC_HAVE_LIBDEFLATE
static struct libdeflate_compressor *comp;
#else
static z_stream zs;
static int zs_ready;
#endif

static int out_fd_get(void) {
    int fd = __atomic_load_n(&trc_g.out_fd, __ATOMIC_ACQUIRE);
    if (fd < 0 && file_opened) {
        /* The application closed our descriptor: append to the same file. */
        fd = trc_move_high(sys_open(out_path, O_WRONLY | O_APPEND | O_CLOEXEC, 0));
        __atomic_store_n(&trc_g.out_fd, fd, __ATOMIC_RELEASE);
    }
    return fd;
}

static void mkdir_parents(const char *path) {
    char tmp[PATH_MAX + 64];
    snprintf(tmp, sizeof tmp, "%s", path);
    char *slash = strrchr(tmp, '/');
    if (!slash || slash == tmp)
        return;
    *slash = 0;
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            syscall(SYS_mkdirat, AT_FDCWD, tmp, 0755);
            *p = '/';
        }
    }
    syscall(SYS_mkdirat, AT_FDCWD, tmp, 0755);
}

static void format_header(trc_buf *b) {
    char val[64];
    pid_t tid = (pid_t)syscall(SYS_gettid);
    int v2 = trc_g.cfg.format == 2;
    if (!v2)
        trc_buf_str(b, "[\n"); /* 2.x: newline-delimited JSON and nothing else */
    trc_format_meta(b, "HH", trc_g.host, NULL, tid);
    char exe_hash[17], cmd_hash[17], cwd_hex[17];
    trc_hex16(trc_hash(trc_g.exe, strlen(trc_g.exe)), exe_hash);
    trc_format_meta(b, "SH", trc_g.exe, NULL, tid);
    const char *cmd = trc_g.cmdline ? trc_g.cmdline : "";
    trc_hex16(trc_hash(cmd, strlen(cmd)), cmd_hash);
    trc_format_meta(b, "SH", cmd, NULL, tid);
    const char *cwd = trc_cwd();
    uint64_t ch = trc_path_intern(cwd);
    int emit;
    trc_path_lookup(ch, trc_g.gen, &emit); /* marks it emitted for this file */
    trc_format_fh(b, ch, cwd, tid);
    snprintf(val, sizeof val, "\"%d\"", (int)trc_g.ppid);
    trc_format_meta(b, "PR", "ppid", val, tid);
    /* A launcher (srun inside an allocation step, mpirun under a job) may carry a rank variable
     * of its own step; it is not a rank of the job it launches. */
    static const char *const launchers[] = {"mpirun", "mpiexec", "orterun", "prterun", "prte",
                                            "prted", "orted", "srun", "slurmstepd",
                                            "hydra_pmi_proxy", "mpiexec.hydra", NULL};
    int launcher = 0;
    for (const char *const *l = launchers; *l; l++)
        launcher |= !strncmp(trc_g.exe, *l, strlen(*l)) &&
                    (!trc_g.exe[strlen(*l)] || trc_g.exe[strlen(*l)] == '.');
    const char *rank = launcher ? NULL : getenv("OMPI_COMM_WORLD_RANK");
    if (!rank && !launcher)
        rank = getenv("PMI_RANK");
    if (!rank && !launcher)
        rank = getenv("PMIX_RANK");
    if (!rank && !launcher)
        rank = getenv("SLURM_PROCID");
    if (rank && strlen(rank) < 20 && strspn(rank, "0123456789") == strlen(rank)) {
        snprintf(val, sizeof val, "\"%s\"", rank);
        trc_format_meta(b, "PR", "rank", val, tid);
    }
    /* start event (dftracer: cat "dftracer", dur 0, process identity in args). */
    time_t now = time(NULL);
    struct tm tmv;
    char date[64];
    localtime_r(&now, &tmv);
    strftime(date, sizeof date, "%a %b %e %H:%M:%S %Y", &tmv);
    trc_hex16(ch, cwd_hex);
    trc_buf_str(b, v2 ? "{\"id\":0,\"name\":\"start\",\"cat\":\"dftracer\",\"type\":1,\"pid\":"
                      : "{\"id\":0,\"name\":\"start\",\"cat\":\"dftracer\",\"pid\":");
    trc_buf_i64(b, trc_g.pid);
    trc_buf_str(b, ",\"tid\":");
    trc_buf_i64(b, tid);
    trc_buf_str(b, ",\"ts\":");
    trc_buf_u64(b, (trc_g.start_ns + trc_realtime_anchor_ns) / 1000);
    trc_buf_str(b, v2 ? ",\"dur\":0,\"ph\":1,\"args\":{\"hhash\":\""
                      : ",\"dur\":0,\"ph\":\"X\",\"args\":{\"hhash\":\"");
    trc_buf_str(b, trc_g.hhash);
    trc_buf_str(b, "\",\"cmd_hash\":\"");
    trc_buf_str(b, cmd_hash);
    trc_buf_str(b, "\",\"exec_hash\":\"");
    trc_buf_str(b, exe_hash);
    trc_buf_str(b, "\",\"cwd\":\"");
    trc_buf_str(b, cwd_hex);
    trc_buf_str(b, "\",\"version\":\"" TRC_VERSION "\",\"clock\":\"");
    trc_buf_str(b, trc_clock_is_tsc ? "tsc" : "monotonic");
    trc_buf_str(b, "\",\"date\":");
    trc_buf_json(b, date, strlen(date));
    trc_buf_str(b, ",\"ppid\":");
    trc_buf_i64(b, trc_g.ppid);
    trc_buf_str(b, "}}\n");
}

static int open_file(void) {
    if (file_failed)
        return -1;
    char h[17];
    char ident[600];
    /* The realtime anchor is the same for an exec'd image of the same pid, so the image's own
     * start time keeps the name unique (a new image must not truncate the previous one's). */
    snprintf(ident, sizeof ident, "%s-%s-%d-%llu-%llu-%u", trc_g.exe, trc_g.host, (int)trc_g.pid,
             (unsigned long long)trc_realtime_anchor_ns, (unsigned long long)trc_mono_ns(),
             trc_g.file_seq);
    trc_hex16(trc_hash(ident, strlen(ident)), h);
    snprintf(out_path, sizeof out_path, "%s-%s-preload.pfw%s", trc_g.cfg.prefix, h,
             trc_g.cfg.compress ? ".gz" : "");
    mkdir_parents(out_path);
    int fd = sys_open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        char msg[PATH_MAX + 200];
        int n = snprintf(msg, sizeof msg,
                         "scaffold-trace: cannot create trace file %s: %s (set "
                         "SCAFFOLD_TRACE_PREFIX to a writable directory/prefix); tracing off\n",
                         out_path, strerror(errno));
        if (n > 0)
            (void)sys_write(2, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
        file_failed = 1;
        __atomic_store_n(&trc_g.active, 0, __ATOMIC_RELAXED);
        return -1;
    }
    __atomic_store_n(&trc_g.out_fd, trc_move_high(fd), __ATOMIC_RELEASE);
    file_opened = 1;
    return 0;
}

static int zbuf_reserve(size_t n) {
    if (n <= zcap)
        return 0;
    unsigned char *z = realloc(zbuf, n);
    if (!z)
        return -1;
    zbuf = z;
    zcap = n;
    return 0;
}

/* Set during a flush that found a backlog: the application produces faster than the flusher
 * compresses, so the members of that flush use the fast encoder. */
static int behind;

/* Compresses text[0..n) into one complete gzip member and writes it with one write(). */
static int write_member(const char *text, size_t n) {
    size_t nlines;
    const trc_line *lines = trc_lines_take(&nlines);
    if (!n)
        return 0;
    int fd = out_fd_get();
    if (fd < 0)
        return -1;
    if (!trc_g.cfg.compress)
        return write_all(fd, text, n);
    size_t clen;
    if (trc_g.cfg.adapt == 2 || (trc_g.cfg.adapt == 1 && behind)) {
        if (zbuf_reserve(trc_linez_bound(n)) != 0)
            return -1;
        clen = trc_linez_encode(text, n, lines, nlines, zbuf);
        return write_all(fd, zbuf, clen);
    }
#ifdef TRC_HAVE_LIBDEFLATE
    if (!comp && !(comp = libdeflate_alloc_compressor(trc_g.cfg.level)))
        return -1;
    if (zbuf_reserve(libdeflate_gzip_compress_bound(comp, n)) != 0)
        return -1;
    clen = libdeflate_gzip_compress(comp, text, n, zbuf, zcap);
    if (!clen)
        return -1;
#else
    if (!zs_ready) {
        memset(&zs, 0, sizeof zs);
        int lvl = trc_g.cfg.level > 9 ? 9 : trc_g.cfg.level;
        if (deflateInit2(&zs, lvl, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
            return -1;
        zs_ready = 1;
    } else {
        deflateReset(&zs);
    }
    if (zbuf_reserve(deflateBound(&zs, (uLong)n)) != 0)
        return -1;
    zs.next_in = (unsigned char *)(uintptr_t)text;
    zs.avail_in = (uInt)n;
    zs.next_out = zbuf;
    zs.avail_out = (uInt)zcap;
    if (deflate(&zs, Z_FINISH) != Z_STREAM_END)
        return -1;
    clen = zcap - zs.avail_out;
#endif
    return write_all(fd, zbuf, clen);
}

/* ---------------------------------------------------------------- draining */
static int ring_pending(trc_thread *t) {
    if (__atomic_load_n(&t->state, __ATOMIC_ACQUIRE) == TRC_T_FREE)
        return 0;
    const uint64_t *h = (const uint64_t *)(t->ring + (t->tail & t->mask));
    return __atomic_load_n(h, __ATOMIC_ACQUIRE) != 0;
}

/* Formats the thread's published records (at most one ring's worth, so a producer that keeps
 * writing cannot hold the flusher), writing members as the text grows. */
static void drain_thread(trc_thread *t) {
    int st = __atomic_load_n(&t->state, __ATOMIC_ACQUIRE);
    if (st == TRC_T_FREE)
        return;
    uint64_t tail = t->tail, start = tail, stop = tail + t->cap;
    int formatted = 0;
    while (tail < stop) {
        const uint64_t *hp = (const uint64_t *)(t->ring + (tail & t->mask));
        uint64_t h = __atomic_load_n(hp, __ATOMIC_ACQUIRE);
        if (!h)
            break;
        uint32_t size = TRC_HDR_SIZE(h);
        if (size < 8 || size > t->cap)
            break; /* cannot happen unless memory was corrupted; stop rather than loop */
        if (TRC_HDR_TYPE(h) != TRC_REC_PAD) {
            if (!formatted) {
                trc_format_thread(t);
                formatted = 1;
            }
            num_events += (uint64_t)trc_format_record(&stage, t, h, hp);
        }
        tail += size;
        if (tail - start > 2 * trc_g.cfg.flush_bytes)
            behind = 1; /* more than two wake-ups' worth was waiting */
        if (stage.len >= MEMBER_TEXT) {
            /* Give the producer its room back before the (slow) compression. */
            __atomic_store_n(&t->tail, tail, __ATOMIC_RELEASE);
            write_member(stage.p, stage.len);
            stage.len = 0;
        }
    }
    __atomic_store_n(&t->tail, tail, __ATOMIC_RELEASE);
    if (st == TRC_T_EXITED && !ring_pending(t)) {
        /* Reusable by a new thread once drained. */
        t->depth = 0;
        __atomic_store_n(&t->state, TRC_T_FREE, __ATOMIC_RELEASE);
    }
}

/* The end record (dftracer 2.x: the trace's one self-description): num_events = the events
 * written before it (start included), dropped events, and the effective configuration, the
 * layers built in and the layers that produced an event, as nested objects. */
static void format_end(trc_buf *b) {
    pid_t tid = (pid_t)syscall(SYS_gettid);
    int v2 = trc_g.cfg.format == 2;
    const trc_config *c = &trc_g.cfg;
    trc_summary_write(b, tid);
    uint64_t dropped = 0;
    for (trc_thread *t = __atomic_load_n(&trc_g.threads, __ATOMIC_ACQUIRE); t; t = t->next)
        dropped += t->dropped;
    trc_buf_str(b, "{\"id\":");
    trc_buf_u64(b, __atomic_fetch_add(&trc_g.next_id, 1, __ATOMIC_RELAXED));
    trc_buf_str(b, v2 ? ",\"name\":\"end\",\"cat\":\"dftracer\",\"type\":1,\"pid\":"
                      : ",\"name\":\"end\",\"cat\":\"dftracer\",\"pid\":");
    trc_buf_i64(b, trc_g.pid);
    trc_buf_str(b, ",\"tid\":");
    trc_buf_i64(b, tid);
    trc_buf_str(b, ",\"ts\":");
    trc_buf_u64(b, (trc_mono_ns() + trc_realtime_anchor_ns) / 1000);
    trc_buf_str(b, v2 ? ",\"dur\":0,\"ph\":1,\"args\":{\"hhash\":\""
                      : ",\"dur\":0,\"ph\":\"X\",\"args\":{\"hhash\":\"");
    trc_buf_str(b, trc_g.hhash);
    trc_buf_str(b, "\",\"num_events\":");
    trc_buf_u64(b, num_events + 1); /* + start */
    trc_buf_str(b, ",\"dropped\":");
    trc_buf_u64(b, dropped);
    const struct {
        const char *key;
        int64_t v;
    } cfg[] = {{",\"cfg\":{\"format\":", c->format},
               {",\"posix\":", c->posix},
               {",\"stdio\":", c->stdio},
               {",\"metadata\":1,\"compression\":", c->compress},
               {",\"level\":", c->level},
               {",\"flush_ms\":", c->flush_ms},
               {",\"metrics_ms\":", c->metrics_ms}};
    for (size_t k = 0; k < sizeof cfg / sizeof *cfg; k++) {
        trc_buf_str(b, cfg[k].key);
        trc_buf_i64(b, cfg[k].v);
    }
    trc_buf_str(b, ",\"clock\":");
    trc_buf_str(b, trc_clock_is_tsc ? "\"tsc\"" : "\"monotonic\"");
    trc_buf_str(b, ",\"log_file\":");
    trc_buf_json(b, out_path, strlen(out_path));
    trc_buf_str(b, "},\"build\":{\"mpi\":");
    trc_buf_i64(b, trc_mpi_present());
    trc_buf_str(b, ",\"hdf5\":0,\"hip\":0,\"cuda\":0}");
    static const char *const used[] = {"LIBC_IO", "C_APP", "MPI", "PSUTIL"};
    trc_buf_str(b, ",\"used\":{");
    for (int k = 0, n = 0; k < 4; k++)
        if (trc_used & (1u << k)) {
            if (n++)
                trc_buf_put(b, ",", 1);
            trc_buf_put(b, "\"", 1);
            trc_buf_str(b, used[k]);
            trc_buf_str(b, "\":1");
        }
    trc_buf_str(b, v2 ? "}}}\n" : "}}}\n]\n");
}

/* System-metrics samples waiting for the file (a process that records no event writes no file,
 * so its samples are dropped; the buffer is bounded). */
static trc_buf samples;
static uint64_t next_sample_ns;

/* Takes a sample when one is due (or at the final flush); returns ms until the next one, or the
 * flush interval when sampling is off. Flusher side, under the flush lock. */
static int sample_due(int final) {
    int ms = trc_g.cfg.metrics_ms;
    if (ms <= 0)
        return trc_g.cfg.flush_ms;
    uint64_t now = trc_mono_ns();
    if (final || now >= next_sample_ns) {
        if (samples.len > (64u << 10))
            samples.len = 0;
        trc_sample(&samples);
        next_sample_ns = now + (uint64_t)ms * 1000000u;
    }
    uint64_t left = (next_sample_ns - now) / 1000000u + 1;
    return left < (uint64_t)trc_g.cfg.flush_ms ? (int)left : trc_g.cfg.flush_ms;
}

void trc_flush_locked(int final) {
    stage.len = 0;
    behind = 0;
    trc_clock_anchor();
    if (final)
        sample_due(1);
    if (!file_opened) {
        /* Open (and write the header) before formatting, so FH lines are not repeated. */
        int pending = 0;
        for (trc_thread *t = __atomic_load_n(&trc_g.threads, __ATOMIC_ACQUIRE); t; t = t->next)
            pending |= ring_pending(t);
        if (!pending)
            return; /* a process with no events writes no file */
        if (open_file() != 0)
            return;
        format_header(&stage);
    }
    if (samples.len) {
        trc_buf_put(&stage, samples.p, samples.len);
        samples.len = 0;
    }
    for (trc_thread *t = __atomic_load_n(&trc_g.threads, __ATOMIC_ACQUIRE); t; t = t->next)
        drain_thread(t);
    if (final)
        format_end(&stage);
    write_member(stage.p, stage.len);
    stage.len = 0;
    if (final) {
        int fd = __atomic_exchange_n(&trc_g.out_fd, -1, __ATOMIC_ACQ_REL);
        if (fd >= 0)
            sys_close(fd);
    }
}

void trc_flush_new_file(void) {
    trc_used = 0;
    samples.len = 0;
    next_sample_ns = 0;
    file_opened = 0;
    file_failed = 0;
    num_events = 0;
    trc_g.start_ns = trc_mono_ns();
    trc_g.file_seq++;
    trc_g.gen++;
    trc_format_reset();
    trc_summary_reset(trc_g.cfg.max_files);
}

/* A fork child must never write to the parent's file or wake its flusher: the descriptors go,
 * the compressor state is the child's own, and the child starts a new file at its first flush. */
void trc_flush_fork_child(void) {
    int fds[4] = {trc_g.wake_fd, trc_g.out_fd, trc_g.done_rd, trc_g.done_wr};
    trc_g.wake_fd = trc_g.out_fd = trc_g.done_rd = trc_g.done_wr = -1;
    for (int i = 0; i < 4; i++)
        if (fds[i] >= 0)
            sys_close(fds[i]);
#ifndef TRC_HAVE_LIBDEFLATE
    zs_ready = 0;
    memset(&zs, 0, sizeof zs);
#endif
    trc_flush_new_file();
}

/* ---------------------------------------------------------------- flusher thread */
static void *flusher_main(void *arg) {
    (void)arg;
    trc_busy = 1; /* nothing this thread does is traced */
    for (;;) {
        int fd = __atomic_load_n(&trc_g.wake_fd, __ATOMIC_ACQUIRE);
        if (fd < 0) {
            make_wake_fd();
            fd = __atomic_load_n(&trc_g.wake_fd, __ATOMIC_ACQUIRE);
        }
        struct pollfd p = {fd, POLLIN, 0};
        pthread_mutex_lock(&trc_g.flush_lock);
        int wait_ms = trc_g.state == TRC_S_RUNNING ? sample_due(0) : trc_g.cfg.flush_ms;
        pthread_mutex_unlock(&trc_g.flush_lock);
        int rc = poll(&p, fd >= 0 ? 1 : 0, wait_ms);
        if (rc > 0 && (p.revents & POLLIN)) {
            uint64_t v;
            (void)!syscall(SYS_read, fd, &v, sizeof v);
        } else if (rc > 0 && (p.revents & POLLNVAL)) {
            trc_fd_stolen(fd);
        }
        if (__atomic_load_n(&trc_g.state, __ATOMIC_ACQUIRE) != TRC_S_RUNNING)
            break;
        if (__atomic_load_n(&trc_g.sig_pending, __ATOMIC_ACQUIRE)) {
            trc_finalize();
            break;
        }
        pthread_mutex_lock(&trc_g.flush_lock);
        if (trc_g.state == TRC_S_RUNNING)
            trc_flush_locked(0);
        pthread_mutex_unlock(&trc_g.flush_lock);
    }
    __atomic_store_n(&trc_g.flusher_on, 0, __ATOMIC_RELEASE);
    return NULL;
}

void trc_start_flusher(void) {
    int expect = 0;
    if (!__atomic_compare_exchange_n(&trc_g.flusher_on, &expect, 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED))
        return;
    if (__atomic_load_n(&trc_g.wake_fd, __ATOMIC_ACQUIRE) < 0)
        make_wake_fd();
    if (trc_g.done_wr < 0)
        make_done_pipe();
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    sigset_t all;
    sigfillset(&all);
    pthread_attr_setsigmask_np(&at, &all); /* signals go to application threads */
    if (pthread_create(&trc_g.flusher, &at, flusher_main, NULL) != 0)
        __atomic_store_n(&trc_g.flusher_on, 0, __ATOMIC_RELEASE);
    pthread_attr_destroy(&at);
}

void trc_flush_init_fds(void) {
    make_wake_fd();
    make_done_pipe();
}

void trc_flush_renew_done(void) {
    if (trc_g.done_rd >= 0)
        sys_close(trc_g.done_rd);
    trc_g.done_rd = -1;
    make_done_pipe();
}

void trc_flush_done(void) {
    if (trc_g.done_wr >= 0) {
        sys_close(trc_g.done_wr); /* wakes a signal handler waiting for this flush */
        trc_g.done_wr = -1;
    }
}
