/* core.c: the tracer runtime around the rings and the flusher. It owns the configuration (the
 * environment), process start-up (constructor) and shutdown (destructor), and the process
 * lifecycle: fork (the child starts a fresh file and drops the parent's pending events), exec
 * (final flush first, resume if the exec fails), exit/_exit, SIGTERM/SIGINT (final flush by the
 * flusher, then the original disposition decides the exit status). */
#include "trace_int.h"

#include "calls.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

trc_global trc_g = {.wake_fd = -1, .out_fd = -1, .done_rd = -1, .done_wr = -1,
                    .flush_lock = PTHREAD_MUTEX_INITIALIZER};
TRC_TLS int trc_busy;

static struct sigaction old_term, old_int;

/* ---------------------------------------------------------------- configuration */
static void warn_env(const char *name, const char *val, const char *want) {
    char msg[512];
    int n = snprintf(msg, sizeof msg, "scaffold-trace: %s='%s' is not %s; using the default\n",
                     name, val, want);
    if (n > 0)
        (void)!syscall(SYS_write, 2, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
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
    /* The trace shape: 2 (dftracer 2.x, the current release) unless 1 is asked for. dftracer has
     * no variable for this, so there is no DFTRACER_* equivalent. */
    c->format = (int)env_long("SCAFFOLD_TRACE_FORMAT", NULL, 2, 1, 2);
    c->mpi = env_bool("SCAFFOLD_TRACE_MPI", 1);
    c->signals = env_bool("SCAFFOLD_TRACE_SIGNALS", 1);
    c->keep_env = env_bool("SCAFFOLD_TRACE_KEEP_ENV", 1);
    c->compress = env_bool("SCAFFOLD_TRACE_COMPRESS", 1);
    const char *dc = getenv("DFTRACER_TRACE_COMPRESSION");
    if (dc && !getenv("SCAFFOLD_TRACE_COMPRESS"))
        c->compress = strcmp(dc, "0") != 0;
    /* Level 1 by measurement (docs/trace.md): the fastest level that still compresses trace
     * lines ~20x; 0 stores. libdeflate accepts up to 12, zlib up to 9. */
    c->level = (int)env_long("SCAFFOLD_TRACE_LEVEL", NULL, 1, 0, 12);
    /* While the flusher falls behind, members use the fast line encoder (linez.c). */
    c->adapt = (int)env_long("SCAFFOLD_TRACE_ADAPT", NULL, 1, 0, 2);
    const char *clk = getenv("SCAFFOLD_TRACE_CLOCK");
    c->clock_tsc = 1;
    if (clk && *clk) {
        if (!strcmp(clk, "monotonic"))
            c->clock_tsc = 0;
        else if (strcmp(clk, "tsc") != 0)
            warn_env("SCAFFOLD_TRACE_CLOCK", clk, "tsc or monotonic");
    }
    c->flush_ms = (int)env_long("SCAFFOLD_TRACE_FLUSH_MS", NULL, 1000, 1, 3600 * 1000);
    /* System metrics (counter events) every N ms; 0 = off. Below 10 ms the sampler would cost
     * more than it tells. */
    c->metrics_ms = (int)env_long("SCAFFOLD_TRACE_METRICS_MS", NULL, 0, 0, 3600 * 1000);
    if (c->metrics_ms > 0 && c->metrics_ms < 10) {
        warn_env("SCAFFOLD_TRACE_METRICS_MS", getenv("SCAFFOLD_TRACE_METRICS_MS"),
                 "0 or at least 10 (ms)");
        c->metrics_ms = 0;
    }
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
    long n = 0;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = syscall(SYS_read, fd, buf, sizeof buf - 1);
        syscall(SYS_close, fd);
    }
    if (n < 0)
        n = 0;
    buf[n] = 0;
    const char *exe = NULL;
    for (long i = 0; i < n;) {
        const char *tok = buf + i;
        size_t tl = strlen(tok);
        if (!exe && tok[0] != '-' && !strstr(tok, "python") && strcmp(tok, "env") != 0)
            exe = tok;
        i += (long)tl + 1;
    }
    if (!exe)
        exe = n ? buf : "DEFAULT";
    const char *slash = strrchr(exe, '/');
    snprintf(trc_g.exe, sizeof trc_g.exe, "%s", slash ? slash + 1 : exe);
    for (long i = 0; i + 1 < n; i++)
        if (buf[i] == 0)
            buf[i] = ';';
    free(trc_g.cmdline);
    trc_g.cmdline = strdup(buf);
}

/* ---------------------------------------------------------------- lifecycle */
int trc_active_bits(void) {
    return (trc_g.cfg.posix ? TRC_FAM_POSIX : 0) | (trc_g.cfg.stdio ? TRC_FAM_STDIO : 0) |
           (trc_g.cfg.mpi ? TRC_FAM_MPI : 0) | TRC_FAM_ANNOT;
}

void trc_finalize(void) {
    int saved = errno, busy = trc_busy;
    trc_busy = 1;
    pthread_mutex_lock(&trc_g.flush_lock);
    if (trc_g.state == TRC_S_RUNNING) {
        __atomic_store_n(&trc_g.active, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&trc_g.state, TRC_S_FINAL, __ATOMIC_RELEASE);
        trc_flush_locked(1);
        trc_flush_done();
    }
    pthread_mutex_unlock(&trc_g.flush_lock);
    trc_wake_flusher();
    trc_busy = busy;
    errno = saved;
}

void trc_resume(void) {
    int busy = trc_busy;
    trc_busy = 1;
    pthread_mutex_lock(&trc_g.flush_lock);
    if (trc_g.state == TRC_S_FINAL && trc_g.cfg.enabled) {
        trc_flush_new_file();
        trc_flush_renew_done();
        __atomic_store_n(&trc_g.state, TRC_S_RUNNING, __ATOMIC_RELEASE);
        __atomic_store_n(&trc_g.active, trc_active_bits(), __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&trc_g.flush_lock);
    /* The old flusher exits once it sees the final state; wait so the new one can start. */
    for (int i = 0; i < 2000 && __atomic_load_n(&trc_g.flusher_on, __ATOMIC_ACQUIRE); i++) {
        trc_wake_flusher();
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    trc_start_flusher();
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
    trc_flush_fork_child();
    trc_rings_fork_child();
    trc_mmap_reset();
    if (trc_g.state == TRC_S_RUNNING)
        trc_g.active = trc_active_bits();
}

static void on_signal(int sig) {
    int saved = errno;
    int busy = trc_busy;
    trc_busy = 1;
    if (getpid() == trc_g.pid && __atomic_load_n(&trc_g.state, __ATOMIC_ACQUIRE) == TRC_S_RUNNING) {
        if (__atomic_load_n(&trc_g.flusher_on, __ATOMIC_ACQUIRE) && trc_g.done_rd >= 0) {
            /* Only async-signal-safe calls here: the flusher thread does the work. */
            __atomic_store_n(&trc_g.sig_pending, sig, __ATOMIC_RELEASE);
            trc_wake_flusher();
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
    }
}

/* The fd table: one slot per possible descriptor (RLIMIT_NOFILE, at most 1 Mi), touched lazily. */
static int fd_table_init(void) {
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
    if (m == MAP_FAILED)
        return -1;
    trc_g.fds = m;
    trc_g.nfds = (int)n;
    return 0;
}

__attribute__((constructor(101))) static void trc_init(void) {
    int saved = errno;
    trc_busy = 1;
    trc_real_resolve_all();
    snprintf(trc_g.ld_preload, sizeof trc_g.ld_preload, "%s",
             getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "");
    config_load(&trc_g.cfg);
    if (!trc_g.cfg.enabled || fd_table_init() != 0) {
        trc_busy = 0;
        errno = saved;
        return;
    }
    trc_clock_init(trc_g.cfg.clock_tsc);
    read_identity();
    trc_paths_init(trc_g.cfg.max_paths);
    trc_cwd();
    trc_rules_init(&trc_g.cfg, env2("SCAFFOLD_TRACE_INCLUDE", "DFTRACER_DATA_DIR"),
                   getenv("SCAFFOLD_TRACE_EXCLUDE"));
    trc_summary_reset(trc_g.cfg.max_files);
    trc_g.gen = 1;
    trc_g.start_ns = trc_mono_ns();
    trc_g.next_id = 1; /* 0 is the start event */
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    if (trc_g.cfg.signals)
        install_signals();
    trc_flush_init_fds();
    __atomic_store_n(&trc_g.state, TRC_S_RUNNING, __ATOMIC_RELEASE);
    __atomic_store_n(&trc_g.active, trc_active_bits(), __ATOMIC_RELEASE);
    trc_start_flusher();
    trc_busy = 0;
    errno = saved;
}

__attribute__((destructor)) static void trc_fini(void) {
    if (trc_g.state == TRC_S_RUNNING && getpid() == trc_g.pid)
        trc_finalize();
}
