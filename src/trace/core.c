/* core.c: the tracer runtime. It owns configuration (environment), process start-up and
 * shutdown, the per-thread single-producer rings, the background flusher thread that turns rings
 * into gzip members (one complete member per flush, so a killed process loses at most the last
 * flush interval), and the process lifecycle: fork (the child starts a fresh file and drops the
 * parent's pending events), exec (final flush first), exit/_exit, SIGTERM/SIGINT (final flush,
 * then the original disposition). */
#include "trace_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zlib.h>

trc_global trc_g = {.wake_fd = -1, .out_fd = -1, .done_rd = -1, .done_wr = -1,
                    .flush_lock = PTHREAD_MUTEX_INITIALIZER};
TRC_TLS int trc_busy;
TRC_TLS trc_thread *trc_self;

static pthread_key_t thread_key;
static int thread_key_ok;
static struct sigaction old_term, old_int;
static int sig_installed;

void *trc_real(const char *name) {
    void *p = dlsym(RTLD_NEXT, name);
    return p;
}

/* ---------------------------------------------------------------- configuration */
static void warn_env(const char *name, const char *val, const char *want) {
    char msg[512];
    int n = snprintf(msg, sizeof msg, "scaffold-trace: %s='%s' is not %s; using the default\n",
                     name, val, want);
    if (n > 0)
        (void)!write(2, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
}

static const char *env2(const char *a, const char *b) {
    const char *v = getenv(a);
    if ((!v || !*v) && b)
        v = getenv(b);
    return (v && *v) ? v : NULL;
}

static long env_long(const char *name, const char *alt, long def, long min, long max) {
    const char *v = env2(name, alt);
    if (!v)
        return def;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < min || x > max) {
        warn_env(v == getenv(name) ? name : alt, v, "an integer in range");
        return def;
    }
    return x;
}

static int env_bool(const char *name, int def) {
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"))
        return 1;
    if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") ||
        !strcasecmp(v, "off"))
        return 0;
    warn_env(name, v, "0 or 1");
    return def;
}

static void config_load(trc_config *c) {
    memset(c, 0, sizeof *c);
    c->enabled = !env_bool("SCAFFOLD_TRACE_DISABLE", 0);
    const char *dft = getenv("DFTRACER_ENABLE");
    if (dft && !strcmp(dft, "0"))
        c->enabled = 0;
    if (!env_bool("SCAFFOLD_TRACE", 1))
        c->enabled = 0;
    int dio = env_bool("DFTRACER_DISABLE_IO", 0);
    c->posix = env_bool("SCAFFOLD_TRACE_POSIX", !env_bool("DFTRACER_DISABLE_POSIX", 0)) && !dio;
    c->stdio = env_bool("SCAFFOLD_TRACE_STDIO", !env_bool("DFTRACER_DISABLE_STDIO", 0)) && !dio;
    c->signals = env_bool("SCAFFOLD_TRACE_SIGNALS", 1);
    c->keep_env = env_bool("SCAFFOLD_TRACE_KEEP_ENV", 1);
    c->compress = env_bool("SCAFFOLD_TRACE_COMPRESS", 1);
    const char *dc = getenv("DFTRACER_TRACE_COMPRESSION");
    if (dc && !getenv("SCAFFOLD_TRACE_COMPRESS"))
        c->compress = strcmp(dc, "0") != 0;
    c->level = (int)env_long("SCAFFOLD_TRACE_LEVEL", NULL, 1, 1, 9);
    c->flush_ms = (int)env_long("SCAFFOLD_TRACE_FLUSH_MS", NULL, 1000, 1, 3600 * 1000);
    long fb = env_long("SCAFFOLD_TRACE_FLUSH_MIB", NULL, 1, 1, 1024) << 20;
    if (!getenv("SCAFFOLD_TRACE_FLUSH_MIB"))
        fb = env_long("DFTRACER_WRITE_BUFFER_SIZE", NULL, fb, 1, 1L << 30);
    c->flush_bytes = (size_t)fb;
    size_t ring = (size_t)env_long("SCAFFOLD_TRACE_BUFFER_MIB", NULL, 8, 1, 4096) << 20;
    size_t p2 = 1u << 16;
    while (p2 < ring || p2 < 2 * c->flush_bytes)
        p2 <<= 1;
    c->ring_bytes = p2;
    if (c->flush_bytes > p2 / 2)
        c->flush_bytes = p2 / 2;
    c->max_files = (size_t)env_long("SCAFFOLD_TRACE_MAX_FILES", NULL, 4096, 16, 1 << 22);
    c->max_paths = (size_t)env_long("SCAFFOLD_TRACE_MAX_PATHS", NULL, 65536, 1024, 1 << 24);
    const char *pre = env2("SCAFFOLD_TRACE_PREFIX", "DFTRACER_LOG_FILE");
    if (!pre)
        pre = "./trace";
    if (trc_path_resolve(AT_FDCWD, pre, c->prefix, sizeof c->prefix) != 0)
        snprintf(c->prefix, sizeof c->prefix, "/tmp/trace");
}

/* ---------------------------------------------------------------- process identity */
static void read_identity(void) {
    trc_g.pid = getpid();
    trc_g.ppid = getppid();
    if (gethostname(trc_g.host, sizeof trc_g.host - 1) != 0)
        strcpy(trc_g.host, "localhost");
    trc_hex16(trc_hash(trc_g.host, strlen(trc_g.host)), trc_g.hhash);
    /* cmdline: NUL-separated argv; joined with ';' as dftracer does for its SH string. */
    char buf[8192];
    ssize_t n = 0;
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, buf, sizeof buf - 1);
        close(fd);
    }
    if (n < 0)
        n = 0;
    buf[n] = 0;
    const char *exe = NULL;
    for (ssize_t i = 0; i < n;) {
        const char *tok = buf + i;
        size_t tl = strlen(tok);
        if (!exe && tok[0] != '-' && !strstr(tok, "python") && strcmp(tok, "env") != 0)
            exe = tok;
        i += (ssize_t)tl + 1;
    }
    if (!exe)
        exe = n ? buf : "DEFAULT";
    const char *slash = strrchr(exe, '/');
    snprintf(trc_g.exe, sizeof trc_g.exe, "%s", slash ? slash + 1 : exe);
    for (ssize_t i = 0; i + 1 < n; i++)
        if (buf[i] == 0)
            buf[i] = ';';
    free(trc_g.cmdline);
    trc_g.cmdline = strdup(buf);
    struct timespec rt, mo;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mo);
    trc_g.anchor_ns = ((uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec) -
                      ((uint64_t)mo.tv_sec * 1000000000ull + (uint64_t)mo.tv_nsec);
}

/* ---------------------------------------------------------------- internal descriptors */
/* Keeps our descriptors away from the low numbers applications reuse, dup2 onto or close in
 * loops. */
static int move_high(int fd) {
    if (fd < 0)
        return fd;
    int lim = trc_g.nfds > 0 ? trc_g.nfds : 1024;
    int want = lim > 1024 ? 900 : lim / 2;
    int nfd = fcntl(fd, F_DUPFD_CLOEXEC, want);
    if (nfd < 0)
        return fd;
    close(fd);
    return nfd;
}

static void make_wake_fd(void) {
    int fd = move_high(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    __atomic_store_n(&trc_g.wake_fd, fd, __ATOMIC_RELEASE);
}

static void make_done_pipe(void) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) == 0) {
        trc_g.done_rd = move_high(p[0]);
        trc_g.done_wr = move_high(p[1]);
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

static void wake_flusher(void) {
    int fd = __atomic_load_n(&trc_g.wake_fd, __ATOMIC_ACQUIRE);
    if (fd >= 0) {
        uint64_t one = 1;
        (void)!write(fd, &one, sizeof one);
    }
}

/* ---------------------------------------------------------------- output file */
static z_stream zs;
static int zs_ready, member_open, file_opened, file_failed;
static unsigned char zout[1 << 18];
static uint64_t num_events;
static char out_path[PATH_MAX + 64];
static trc_buf stage, hdrbuf;

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int out_fd_get(void) {
    int fd = __atomic_load_n(&trc_g.out_fd, __ATOMIC_ACQUIRE);
    if (fd < 0 && file_opened) {
        /* The application closed our descriptor: append to the same file. */
        fd = move_high(open(out_path, O_WRONLY | O_APPEND | O_CLOEXEC));
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
            mkdir(tmp, 0755);
            *p = '/';
        }
    }
    mkdir(tmp, 0755);
}

static void format_header(trc_buf *b) {
    char h[17], val[64];
    pid_t tid = (pid_t)syscall(SYS_gettid);
    trc_buf_str(b, "[\n");
    trc_format_meta(b, "HH", trc_g.host, NULL, tid);
    trc_hex16(trc_hash(trc_g.exe, strlen(trc_g.exe)), h);
    char exe_hash[17];
    memcpy(exe_hash, h, 17);
    trc_format_meta(b, "SH", trc_g.exe, NULL, tid);
    const char *cmd = trc_g.cmdline ? trc_g.cmdline : "";
    char cmd_hash[17];
    trc_hex16(trc_hash(cmd, strlen(cmd)), cmd_hash);
    trc_format_meta(b, "SH", cmd, NULL, tid);
    const char *cwd = trc_cwd();
    uint64_t ch = trc_path_intern(cwd);
    int emit;
    trc_path_lookup(ch, trc_g.gen, &emit); /* marks it emitted for this file */
    trc_format_fh(b, ch, cwd, tid);
    snprintf(val, sizeof val, "\"%d\"", (int)trc_g.ppid);
    trc_format_meta(b, "PR", "ppid", val, tid);
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!rank)
        rank = getenv("PMI_RANK");
    if (!rank)
        rank = getenv("PMIX_RANK");
    if (!rank)
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
    char ch_hex[17];
    trc_hex16(ch, ch_hex);
    uint64_t ts = (trc_g.start_ns + trc_g.anchor_ns) / 1000;
    trc_buf_str(b, "{\"id\":0,\"name\":\"start\",\"cat\":\"dftracer\",\"pid\":");
    trc_buf_i64(b, trc_g.pid);
    trc_buf_str(b, ",\"tid\":");
    trc_buf_i64(b, tid);
    trc_buf_str(b, ",\"ts\":");
    trc_buf_u64(b, ts);
    trc_buf_str(b, ",\"dur\":0,\"ph\":\"X\",\"args\":{\"hhash\":\"");
    trc_buf_str(b, trc_g.hhash);
    trc_buf_str(b, "\",\"cmd_hash\":\"");
    trc_buf_str(b, cmd_hash);
    trc_buf_str(b, "\",\"exec_hash\":\"");
    trc_buf_str(b, exe_hash);
    trc_buf_str(b, "\",\"cwd\":\"");
    trc_buf_str(b, ch_hex);
    trc_buf_str(b, "\",\"version\":\"" TRC_VERSION "\",\"date\":");
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
    /* anchor_ns (realtime - monotonic) is the same for an exec'd image of the same pid, so the
     * image's own monotonic start time keeps the name unique (it collided: a new image truncated
     * the file of the image before the exec). */
    snprintf(ident, sizeof ident, "%s-%s-%d-%llu-%llu-%u", trc_g.exe, trc_g.host, (int)trc_g.pid,
             (unsigned long long)trc_g.anchor_ns, (unsigned long long)trc_now(), trc_g.file_seq);
    trc_hex16(trc_hash(ident, strlen(ident)), h);
    snprintf(out_path, sizeof out_path, "%s-%s-preload.pfw%s", trc_g.cfg.prefix, h,
             trc_g.cfg.compress ? ".gz" : "");
    mkdir_parents(out_path);
    int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        char msg[PATH_MAX + 200];
        int n = snprintf(msg, sizeof msg,
                         "scaffold-trace: cannot create trace file %s: %s (set "
                         "SCAFFOLD_TRACE_PREFIX to a writable directory/prefix); tracing off\n",
                         out_path, strerror(errno));
        if (n > 0)
            (void)!write(2, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
        file_failed = 1;
        __atomic_store_n(&trc_g.active, 0, __ATOMIC_RELAXED);
        return -1;
    }
    fd = move_high(fd);
    __atomic_store_n(&trc_g.out_fd, fd, __ATOMIC_RELEASE);
    file_opened = 1;
    return 0;
}

static int zwrite(int flush) {
    int fd = out_fd_get();
    do {
        zs.next_out = zout;
        zs.avail_out = sizeof zout;
        int rc = deflate(&zs, flush);
        if (rc == Z_STREAM_ERROR)
            return -1;
        size_t have = sizeof zout - zs.avail_out;
        if (have && fd >= 0 && write_all(fd, zout, have) != 0)
            return -1;
    } while (zs.avail_out == 0 || (flush == Z_FINISH && zs.avail_in > 0));
    return 0;
}

/* Appends bytes to the current member, opening the file (and writing its header) first. */
static int feed(const char *p, size_t n) {
    if (!n)
        return 0;
    if (!trc_g.cfg.compress) {
        int fd = out_fd_get();
        return fd >= 0 ? write_all(fd, p, n) : -1;
    }
    if (!zs_ready) {
        memset(&zs, 0, sizeof zs);
        if (deflateInit2(&zs, trc_g.cfg.level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
            return -1;
        zs_ready = 1;
        member_open = 1;
    } else if (!member_open) {
        deflateReset(&zs);
        member_open = 1;
    }
    zs.next_in = (unsigned char *)(uintptr_t)p;
    zs.avail_in = (unsigned)n;
    return zwrite(Z_NO_FLUSH);
}

static void end_member(void) {
    if (trc_g.cfg.compress && member_open) {
        zs.next_in = NULL;
        zs.avail_in = 0;
        zwrite(Z_FINISH);
        member_open = 0;
    }
}

/* ---------------------------------------------------------------- draining */
static void drain_thread(trc_thread *t) {
    int st = __atomic_load_n(&t->state, __ATOMIC_ACQUIRE);
    if (st == TRC_T_FREE)
        return;
    uint64_t head = __atomic_load_n(&t->head, __ATOMIC_ACQUIRE);
    uint64_t tail = t->tail;
    uint64_t mask = t->cap - 1;
    while (tail < head) {
        const trc_hdr *h = (const trc_hdr *)(t->ring + (tail & mask));
        if (h->size < sizeof(trc_hdr) || h->size > t->cap)
            break; /* cannot happen unless memory was corrupted; stop rather than loop */
        if (h->type != TRC_REC_PAD)
            num_events += (uint64_t)trc_format_record(&stage, h, trc_g.pid, t->tid);
        tail += h->size;
        if (stage.len > (1u << 20)) {
            feed(stage.p, stage.len);
            stage.len = 0;
        }
    }
    __atomic_store_n(&t->tail, tail, __ATOMIC_RELEASE);
    if (st == TRC_T_EXITED && tail == head) {
        /* Reusable by a new thread once drained. */
        t->head = t->tail = t->tail_cache = 0;
        t->depth = 0;
        __atomic_store_n(&t->state, TRC_T_FREE, __ATOMIC_RELEASE);
    }
}

/* Drains every ring into one gzip member. Caller holds flush_lock. */
static void flush_locked(int final) {
    stage.len = 0;
    if (!file_opened) {
        /* Open (and write the header) before formatting, so FH lines are not repeated. */
        int pending = 0;
        for (trc_thread *t = __atomic_load_n(&trc_g.threads, __ATOMIC_ACQUIRE); t; t = t->next)
            if (__atomic_load_n(&t->state, __ATOMIC_ACQUIRE) != TRC_T_FREE &&
                __atomic_load_n(&t->head, __ATOMIC_ACQUIRE) != t->tail)
                pending = 1;
        if (!pending)
            return; /* a process with no events writes no file */
        if (open_file() != 0)
            return;
        hdrbuf.len = 0;
        format_header(&hdrbuf);
        if (feed(hdrbuf.p, hdrbuf.len) != 0)
            return;
    }
    for (trc_thread *t = __atomic_load_n(&trc_g.threads, __ATOMIC_ACQUIRE); t; t = t->next)
        drain_thread(t);
    if (final && (file_opened || stage.len)) {
        pid_t tid = (pid_t)syscall(SYS_gettid);
        trc_summary_write(&stage, tid);
        uint64_t dropped = 0;
        for (trc_thread *t = __atomic_load_n(&trc_g.threads, __ATOMIC_ACQUIRE); t; t = t->next)
            dropped += t->dropped;
        uint64_t ts = (trc_now() + trc_g.anchor_ns) / 1000;
        trc_buf_str(&stage, "{\"id\":");
        trc_buf_u64(&stage, __atomic_fetch_add(&trc_g.next_id, 1, __ATOMIC_RELAXED));
        trc_buf_str(&stage, ",\"name\":\"end\",\"cat\":\"dftracer\",\"pid\":");
        trc_buf_i64(&stage, trc_g.pid);
        trc_buf_str(&stage, ",\"tid\":");
        trc_buf_i64(&stage, tid);
        trc_buf_str(&stage, ",\"ts\":");
        trc_buf_u64(&stage, ts);
        trc_buf_str(&stage, ",\"dur\":0,\"ph\":\"X\",\"args\":{\"hhash\":\"");
        trc_buf_str(&stage, trc_g.hhash);
        trc_buf_str(&stage, "\",\"num_events\":");
        trc_buf_u64(&stage, num_events + 2); /* + start and end */
        trc_buf_str(&stage, ",\"dropped\":");
        trc_buf_u64(&stage, dropped);
        trc_buf_str(&stage, "}}\n]\n");
    }
    if (stage.len)
        feed(stage.p, stage.len);
    stage.len = 0;
    end_member();
    if (final) {
        int fd = __atomic_exchange_n(&trc_g.out_fd, -1, __ATOMIC_ACQ_REL);
        if (fd >= 0)
            close(fd);
    }
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
        int rc = poll(&p, fd >= 0 ? 1 : 0, trc_g.cfg.flush_ms);
        if (rc > 0 && (p.revents & POLLIN)) {
            uint64_t v;
            (void)!read(fd, &v, sizeof v);
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
            flush_locked(0);
        pthread_mutex_unlock(&trc_g.flush_lock);
    }
    __atomic_store_n(&trc_g.flusher_on, 0, __ATOMIC_RELEASE);
    return NULL;
}

static void start_flusher(void) {
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

/* ---------------------------------------------------------------- threads and rings */
static void thread_exit(void *p) {
    trc_thread *t = p;
    if (t && t == trc_self) {
        trc_self = NULL;
        __atomic_store_n(&t->state, TRC_T_EXITED, __ATOMIC_RELEASE);
    }
}

trc_thread *trc_thread_get(void) {
    if (trc_self)
        return trc_self;
    if (__atomic_load_n(&trc_g.state, __ATOMIC_ACQUIRE) != TRC_S_RUNNING)
        return NULL;
    trc_thread *t = NULL;
    for (trc_thread *c = __atomic_load_n(&trc_g.threads, __ATOMIC_ACQUIRE); c; c = c->next) {
        int fr = TRC_T_FREE;
        if (__atomic_load_n(&c->state, __ATOMIC_RELAXED) == TRC_T_FREE &&
            __atomic_compare_exchange_n(&c->state, &fr, TRC_T_OWNED, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            t = c;
            break;
        }
    }
    if (!t) {
        size_t cap = trc_g.cfg.ring_bytes;
        void *m = mmap(NULL, sizeof(trc_thread) + cap, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            return NULL;
        t = m;
        t->ring = (char *)m + ((sizeof(trc_thread) + 63) & ~(size_t)63);
        t->cap = cap;
        /* The ring must fit after the aligned header: give up its tail if needed. */
        while ((size_t)(t->ring - (char *)m) + t->cap > sizeof(trc_thread) + cap)
            t->cap >>= 1;
        t->state = TRC_T_OWNED;
        trc_thread *h = __atomic_load_n(&trc_g.threads, __ATOMIC_ACQUIRE);
        do
            t->next = h;
        while (!__atomic_compare_exchange_n(&trc_g.threads, &h, t, 1, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE));
    }
    t->tid = (pid_t)syscall(SYS_gettid);
    t->depth = 0;
    t->dropped = 0;
    t->next_id = t->id_end = 0;
    t->wake_at = __atomic_load_n(&t->head, __ATOMIC_RELAXED) + trc_g.cfg.flush_bytes;
    trc_self = t;
    if (thread_key_ok)
        pthread_setspecific(thread_key, t);
    if (!__atomic_load_n(&trc_g.flusher_on, __ATOMIC_ACQUIRE))
        start_flusher();
    return t;
}

uint64_t trc_new_id(trc_thread *t) {
    if (t->next_id == t->id_end) {
        /* Ids come in blocks so threads do not share a cache line per event. */
        t->next_id = __atomic_fetch_add(&trc_g.next_id, 1024, __ATOMIC_RELAXED);
        t->id_end = t->next_id + 1024;
    }
    return t->next_id++;
}

void *trc_reserve(trc_thread *t, uint32_t size) {
    uint64_t head = t->head;
    uint64_t off = head & (t->cap - 1);
    uint64_t need = size + ((off + size > t->cap) ? t->cap - off : 0);
    if (head + need - t->tail_cache > t->cap) {
        t->tail_cache = __atomic_load_n(&t->tail, __ATOMIC_ACQUIRE);
        if (head + need - t->tail_cache > t->cap) {
            /* Full: let the flusher catch up (back-pressure), for at most ~2 s. */
            for (int i = 0; i < 20000; i++) {
                if (!__atomic_load_n(&trc_g.flusher_on, __ATOMIC_ACQUIRE))
                    start_flusher();
                wake_flusher();
                struct timespec ts = {0, 100000};
                nanosleep(&ts, NULL);
                t->tail_cache = __atomic_load_n(&t->tail, __ATOMIC_ACQUIRE);
                if (head + need - t->tail_cache <= t->cap)
                    break;
                if (__atomic_load_n(&trc_g.state, __ATOMIC_ACQUIRE) != TRC_S_RUNNING)
                    break;
            }
            if (head + need - t->tail_cache > t->cap) {
                t->dropped++;
                return NULL;
            }
        }
    }
    if (off + size > t->cap) {
        trc_hdr *pad = (trc_hdr *)(t->ring + off);
        pad->size = (uint32_t)(t->cap - off);
        pad->type = TRC_REC_PAD;
        pad->op = 0;
        head += t->cap - off;
        off = 0;
        /* Publishing the pad alone is harmless: the flusher skips it. */
        __atomic_store_n(&t->head, head, __ATOMIC_RELEASE);
    }
    return t->ring + off;
}

void trc_commit(trc_thread *t, uint32_t size) {
    ((trc_hdr *)(t->ring + (t->head & (t->cap - 1))))->size = size;
    uint64_t h = t->head + size;
    __atomic_store_n(&t->head, h, __ATOMIC_RELEASE);
    if (TRC_UNLIKELY(h >= t->wake_at)) {
        t->wake_at = h + trc_g.cfg.flush_bytes;
        if (!__atomic_load_n(&trc_g.flusher_on, __ATOMIC_ACQUIRE))
            start_flusher();
        wake_flusher();
    }
}

void trc_emit_io(int op, int fd, uint64_t fhash, uint64_t t0, uint64_t t1, int64_t offset,
                 int64_t count, int64_t ret, int64_t a1, int64_t a2, uint64_t h2) {
    trc_thread *t = trc_self;
    if (TRC_UNLIKELY(!t) && !(t = trc_thread_get()))
        return;
    trc_io_rec *r = trc_reserve(t, sizeof *r);
    if (!r)
        return;
    r->h.type = TRC_REC_IO;
    r->h.op = (uint16_t)op;
    r->fd = fd;
    int d = t->depth < TRC_MAX_DEPTH ? t->depth : TRC_MAX_DEPTH;
    r->level = d + 1;
    r->p_idx = d ? (int64_t)t->frames[d - 1].id - 1 : -1; /* frame ids are handles (+1) */
    r->id = trc_new_id(t);
    r->t0 = t0;
    r->dur = t1 - t0;
    r->fhash = fhash;
    r->h2 = h2;
    r->offset = offset;
    r->count = count;
    r->ret = ret;
    r->a1 = a1;
    r->a2 = a2;
    trc_commit(t, sizeof *r);
}

/* ---------------------------------------------------------------- lifecycle */
void trc_finalize(void) {
    int saved = errno, busy = trc_busy;
    trc_busy = 1;
    pthread_mutex_lock(&trc_g.flush_lock);
    if (trc_g.state == TRC_S_RUNNING) {
        __atomic_store_n(&trc_g.active, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&trc_g.state, TRC_S_FINAL, __ATOMIC_RELEASE);
        flush_locked(1);
        if (trc_g.done_wr >= 0) {
            close(trc_g.done_wr); /* wakes a signal handler waiting for this flush */
            trc_g.done_wr = -1;
        }
    }
    pthread_mutex_unlock(&trc_g.flush_lock);
    wake_flusher();
    trc_busy = busy;
    errno = saved;
}

static void new_file_state(void) {
    file_opened = 0;
    file_failed = 0;
    member_open = 0;
    num_events = 0;
    trc_g.start_ns = trc_now();
    trc_g.file_seq++;
    trc_g.gen++;
    trc_summary_reset(trc_g.cfg.max_files);
}

void trc_resume(void) {
    int busy = trc_busy;
    trc_busy = 1;
    pthread_mutex_lock(&trc_g.flush_lock);
    if (trc_g.state == TRC_S_FINAL && trc_g.cfg.enabled) {
        new_file_state();
        if (trc_g.done_rd >= 0)
            close(trc_g.done_rd);
        trc_g.done_rd = -1;
        make_done_pipe();
        __atomic_store_n(&trc_g.state, TRC_S_RUNNING, __ATOMIC_RELEASE);
        __atomic_store_n(&trc_g.active, trc_active_bits(), __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&trc_g.flush_lock);
    /* The old flusher exits once it sees the final state; wait so the new one can start. */
    for (int i = 0; i < 2000 && __atomic_load_n(&trc_g.flusher_on, __ATOMIC_ACQUIRE); i++) {
        wake_flusher();
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    start_flusher();
    trc_busy = busy;
}

static void atfork_prepare(void) {
    if (trc_g.state != TRC_S_OFF)
        pthread_mutex_lock(&trc_g.flush_lock);
}

static void atfork_parent(void) {
    if (trc_g.state != TRC_S_OFF)
        pthread_mutex_unlock(&trc_g.flush_lock);
}

/* The child keeps nothing of the parent's pending events: every ring is emptied, other threads'
 * slots are freed, and the first flush opens the child's own file. */
static void atfork_child(void) {
    if (trc_g.state == TRC_S_OFF)
        return;
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    trc_g.flush_lock = fresh;
    trc_g.pid = getpid();
    trc_g.ppid = getppid();
    trc_g.flusher_on = 0;
    trc_g.sig_pending = 0;
    /* Parent's descriptors: the child must never write to the parent's file or wake fd. */
    int fds[4] = {trc_g.wake_fd, trc_g.out_fd, trc_g.done_rd, trc_g.done_wr};
    trc_g.wake_fd = trc_g.out_fd = trc_g.done_rd = trc_g.done_wr = -1;
    for (int i = 0; i < 4; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    zs_ready = 0; /* the parent's stream state is not ours to finish */
    memset(&zs, 0, sizeof zs);
    for (trc_thread *t = trc_g.threads; t; t = t->next) {
        t->tail = t->tail_cache = t->head;
        t->wake_at = 0; /* the first event starts the child's flusher */
        if (t != trc_self) {
            t->head = t->tail = t->tail_cache = 0;
            t->depth = 0;
            t->state = TRC_T_FREE;
        } else {
            t->tid = (pid_t)syscall(SYS_gettid);
            trc_annot_fork_child(t);
        }
    }
    trc_mmap_reset();
    new_file_state();
    if (trc_g.state == TRC_S_RUNNING)
        trc_g.active = trc_active_bits();
}

void trc_fork_child(void) { atfork_child(); }

static void on_signal(int sig) {
    int saved = errno;
    int busy = trc_busy;
    trc_busy = 1;
    if (getpid() == trc_g.pid && __atomic_load_n(&trc_g.state, __ATOMIC_ACQUIRE) == TRC_S_RUNNING) {
        if (__atomic_load_n(&trc_g.flusher_on, __ATOMIC_ACQUIRE) && trc_g.done_rd >= 0) {
            /* Only async-signal-safe calls here: the flusher thread does the work. */
            __atomic_store_n(&trc_g.sig_pending, sig, __ATOMIC_RELEASE);
            wake_flusher();
            struct pollfd p = {trc_g.done_rd, POLLIN, 0};
            for (int i = 0; i < 50; i++) {
                int rc = poll(&p, 1, 100);
                if (rc > 0 || (rc < 0 && errno != EINTR))
                    break;
                if (__atomic_load_n(&trc_g.state, __ATOMIC_ACQUIRE) != TRC_S_RUNNING &&
                    !__atomic_load_n(&trc_g.flusher_on, __ATOMIC_ACQUIRE))
                    break;
            }
        } else if (pthread_mutex_trylock(&trc_g.flush_lock) == 0) {
            /* No flusher (e.g. a fork child before its first event): best effort inline. */
            pthread_mutex_unlock(&trc_g.flush_lock);
            trc_finalize();
        }
    }
    /* Re-raise with the original disposition: the exit status shows the signal. */
    sigaction(sig, sig == SIGTERM ? &old_term : &old_int, NULL);
    trc_busy = busy;
    errno = saved;
    raise(sig);
}

static void install_signals(void) {
    struct sigaction cur;
    int sigs[2] = {SIGTERM, SIGINT};
    for (int i = 0; i < 2; i++) {
        if (sigaction(sigs[i], NULL, &cur) != 0 || cur.sa_handler != SIG_DFL ||
            (cur.sa_flags & SA_SIGINFO))
            continue; /* the application (or a shell) already decided */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART;
        sigaction(sigs[i], &sa, sigs[i] == SIGTERM ? &old_term : &old_int);
        sig_installed = 1;
    }
}

int trc_active_bits(void) {
    return (trc_g.cfg.posix ? TRC_FAM_POSIX : 0) | (trc_g.cfg.stdio ? TRC_FAM_STDIO : 0) |
           TRC_FAM_ANNOT;
}

__attribute__((constructor(101))) static void trc_init(void) {
    int saved = errno;
    trc_busy = 1;
    trc_wrap_resolve_all();
    snprintf(trc_g.ld_preload, sizeof trc_g.ld_preload, "%s",
             getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "");
    config_load(&trc_g.cfg);
    if (!trc_g.cfg.enabled) {
        trc_busy = 0;
        errno = saved;
        return;
    }
    read_identity();
    struct rlimit rl;
    long n = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rlim_t m = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > (1u << 20) ? (1u << 20) : rl.rlim_max;
        if (m < rl.rlim_cur && rl.rlim_cur != RLIM_INFINITY)
            m = rl.rlim_cur;
        n = (long)m;
        if (n < 1024)
            n = 1024;
        if (n > (1L << 20))
            n = 1L << 20;
    }
    void *m = mmap(NULL, (size_t)n * sizeof(trc_fd), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        trc_busy = 0;
        errno = saved;
        return;
    }
    trc_g.fds = m;
    trc_g.nfds = (int)n;
    trc_paths_init(trc_g.cfg.max_paths);
    trc_cwd();
    trc_rules_init(&trc_g.cfg, env2("SCAFFOLD_TRACE_INCLUDE", "DFTRACER_DATA_DIR"),
                   getenv("SCAFFOLD_TRACE_EXCLUDE"));
    trc_summary_reset(trc_g.cfg.max_files);
    trc_g.gen = 1;
    trc_g.start_ns = trc_now();
    trc_g.next_id = 1; /* 0 is the start event */
    if (pthread_key_create(&thread_key, thread_exit) == 0)
        thread_key_ok = 1;
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    if (trc_g.cfg.signals)
        install_signals();
    make_wake_fd();
    make_done_pipe();
    __atomic_store_n(&trc_g.state, TRC_S_RUNNING, __ATOMIC_RELEASE);
    __atomic_store_n(&trc_g.active, trc_active_bits(), __ATOMIC_RELEASE);
    start_flusher();
    trc_busy = 0;
    errno = saved;
}

__attribute__((destructor)) static void trc_fini(void) {
    if (trc_g.state == TRC_S_RUNNING && getpid() == trc_g.pid)
        trc_finalize();
}
