/* path.c: the tracer's view of the namespace. It owns the path table (absolute path <-> 64-bit
 * hash, insert-only and lock-free so that open() never waits), the fd table (one slot per possible
 * descriptor, sized to RLIMIT_NOFILE, so there is no fd-modulo aliasing), the cached working
 * directory, lexical path normalisation, the include/exclude rules (longest prefix wins), and
 * the file-system type of a path (the mount table, read once). */
#include "trace_int.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---------------------------------------------------------------- hashing */
uint64_t trc_hash(const void *p, size_t n) {
    /* FNV-1a then a murmur finaliser: cheap, and well mixed in the low bits the table uses. */
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h ? h : 1;
}

void trc_hex16(uint64_t h, char out[17]) {
    static const char hx[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--, h >>= 4)
        out[i] = hx[h & 15];
    out[16] = 0;
}

/* ---------------------------------------------------------------- path table */
typedef struct trc_pent {
    uint64_t hash; /* 0 empty, 1 being written, else the hash (atomic) */
    char *path;
    unsigned gen; /* file generation in which the FH line was last emitted (atomic) */
} trc_pent;

static trc_pent *ptab;
static size_t ptab_cap;

void trc_paths_init(size_t max_paths) {
    size_t cap = 1024;
    while (cap < max_paths * 2)
        cap <<= 1;
    void *m = mmap(NULL, cap * sizeof(trc_pent), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return;
    ptab = m;
    ptab_cap = cap;
}

uint64_t trc_path_intern(const char *abs) {
    size_t n = strlen(abs);
    uint64_t h = trc_hash(abs, n);
    if (h == 1)
        h = 2; /* 1 marks a slot being written */
    if (!ptab)
        return h;
    size_t mask = ptab_cap - 1;
    /* Bounded probing: past 64 probes the table is too full; the hash still names the file. */
    for (size_t i = 0, j = h & mask; i < 64; i++, j = (j + 1) & mask) {
        trc_pent *e = &ptab[j];
        uint64_t cur = __atomic_load_n(&e->hash, __ATOMIC_ACQUIRE);
        if (cur == h)
            return h;
        if (cur == 1) { /* another thread is writing this slot: wait for it (a few ns) */
            while ((cur = __atomic_load_n(&e->hash, __ATOMIC_ACQUIRE)) == 1)
                ;
            if (cur == h)
                return h;
            continue;
        }
        if (cur != 0)
            continue;
        uint64_t zero = 0;
        if (!__atomic_compare_exchange_n(&e->hash, &zero, 1, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            if (zero == h)
                return h;
            i--; /* re-examine this slot */
            j = (j - 1) & mask;
            continue;
        }
        e->path = strdup(abs);
        e->gen = 0;
        __atomic_store_n(&e->hash, e->path ? h : 0, __ATOMIC_RELEASE);
        return h;
    }
    return h;
}

const char *trc_path_lookup(uint64_t h, unsigned gen, int *emit) {
    if (emit)
        *emit = 0;
    if (!ptab || h < 2)
        return NULL;
    size_t mask = ptab_cap - 1;
    for (size_t i = 0, j = h & mask; i < 64; i++, j = (j + 1) & mask) {
        trc_pent *e = &ptab[j];
        uint64_t cur = __atomic_load_n(&e->hash, __ATOMIC_ACQUIRE);
        if (cur == 0)
            return NULL;
        if (cur != h)
            continue;
        if (emit && gen) {
            unsigned old = __atomic_exchange_n(&e->gen, gen, __ATOMIC_RELAXED);
            *emit = old != gen;
        }
        return e->path;
    }
    return NULL;
}

/* ---------------------------------------------------------------- cwd */
static char *cwd_cur; /* immutable strings; replaced atomically, old ones leak (chdir is rare) */

void trc_cwd_set(const char *abs) {
    char *s = strdup(abs);
    if (s)
        __atomic_store_n(&cwd_cur, s, __ATOMIC_RELEASE);
}

const char *trc_cwd(void) {
    const char *c = __atomic_load_n(&cwd_cur, __ATOMIC_ACQUIRE);
    if (!c) {
        char buf[PATH_MAX];
        if (getcwd(buf, sizeof buf)) {
            trc_cwd_set(buf);
            c = __atomic_load_n(&cwd_cur, __ATOMIC_ACQUIRE);
        }
    }
    return c ? c : "/";
}

/* ---------------------------------------------------------------- normalisation */
/* Lexical normalisation in place: collapses //, removes ., resolves .. (never above /). */
static void normalise(char *p) {
    char *out = p, *in = p;
    /* p starts with '/' */
    while (*in) {
        while (*in == '/')
            in++;
        if (!*in)
            break;
        char *seg = in;
        while (*in && *in != '/')
            in++;
        size_t len = (size_t)(in - seg);
        if (len == 1 && seg[0] == '.')
            continue;
        if (len == 2 && seg[0] == '.' && seg[1] == '.') {
            while (out > p && *--out != '/')
                ;
            continue;
        }
        *out++ = '/';
        memmove(out, seg, len);
        out += len;
    }
    if (out == p)
        *out++ = '/';
    *out = 0;
}

static int fd_path(int fd, char *out, size_t cap) {
    trc_fd *s = trc_fd_slot(fd);
    if (s) {
        uint64_t h = __atomic_load_n(&s->phash, __ATOMIC_RELAXED);
        const char *p = h ? trc_path_lookup(h, 0, NULL) : NULL;
        if (p && strlen(p) < cap) {
            strcpy(out, p);
            return 0;
        }
    }
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    long n = syscall(SYS_readlinkat, AT_FDCWD, link, out, cap - 1);
    if (n <= 0 || out[0] != '/')
        return -1;
    out[n] = 0;
    return 0;
}

int trc_path_resolve(int dirfd, const char *path, char *out, size_t cap) {
    if (!path || cap < 2)
        return -1;
    size_t pl = strlen(path);
    if (path[0] == '/') {
        if (pl >= cap)
            return -1;
        memcpy(out, path, pl + 1);
    } else {
        char base[PATH_MAX];
        if (dirfd == AT_FDCWD) {
            const char *c = trc_cwd();
            if (strlen(c) >= sizeof base)
                return -1;
            strcpy(base, c);
        } else if (fd_path(dirfd, base, sizeof base) != 0) {
            return -1;
        }
        size_t bl = strlen(base);
        if (bl + 1 + pl >= cap)
            return -1;
        memcpy(out, base, bl);
        out[bl] = '/';
        memcpy(out + bl + 1, path, pl + 1);
    }
    normalise(out);
    return 0;
}

/* ---------------------------------------------------------------- rules */
static int add_rule(trc_config *c, const char *p, size_t n, int include) {
    if (n == 0)
        return 0;
    char tmp[PATH_MAX], abs[PATH_MAX];
    if (n >= sizeof tmp)
        return -1;
    memcpy(tmp, p, n);
    tmp[n] = 0;
    if (trc_path_resolve(AT_FDCWD, tmp, abs, sizeof abs) != 0)
        return -1;
    trc_rule *r = realloc(c->rules, (size_t)(c->nrules + 1) * sizeof *r);
    if (!r)
        return -1;
    c->rules = r;
    r[c->nrules].prefix = strdup(abs);
    r[c->nrules].len = strlen(abs);
    r[c->nrules].include = include;
    if (!r[c->nrules].prefix)
        return -1;
    if (r[c->nrules].len == 1) /* "/" matches everything: length 0 in the comparison */
        r[c->nrules].len = 0;
    c->nrules++;
    if (include)
        c->have_include = 1;
    return 0;
}

static void add_list(trc_config *c, const char *list, int include) {
    if (!list)
        return;
    const char *s = list;
    while (*s) {
        const char *e = strchr(s, ':');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (!(include && n == 3 && !strncmp(s, "all", 3))) /* DFTRACER_DATA_DIR=all */
            add_rule(c, s, n, include);
        s += n;
        if (*s == ':')
            s++;
    }
}

int trc_rules_init(trc_config *c, const char *inc, const char *exc) {
    add_list(c, inc, 1);
    add_list(c, exc, 0);
    /* Defaults: pseudo file systems. The trace files themselves and Python's library are
     * excluded by trc_path_traced below. */
    add_list(c, "/proc:/sys:/dev", 0);
    return 0;
}

/* Matches when `prefix` is the path or a leading directory of it. */
static int prefix_match(const char *path, size_t pl, const char *prefix, size_t len) {
    if (len == 0)
        return 1;
    if (pl < len || memcmp(path, prefix, len) != 0)
        return 0;
    return path[len] == 0 || path[len] == '/';
}

/* Length of the leading part of path ending with a ".../lib/pythonX[.Y]" component, or 0. */
static size_t python_lib_len(const char *path) {
    const char *p = path;
    while ((p = strstr(p, "/lib/python")) != NULL) {
        const char *q = p + 11;
        if (*q >= '0' && *q <= '9') {
            while (*q && *q != '/')
                q++;
            return (size_t)(q - path);
        }
        p += 11;
    }
    return 0;
}

int trc_path_traced(const char *abs) {
    size_t pl = strlen(abs);
    /* The tracer's own output is never traced (also when another process reads it). */
    if ((pl > 4 && !strcmp(abs + pl - 4, ".pfw")) || (pl > 7 && !strcmp(abs + pl - 7, ".pfw.gz")))
        return 0;
    const trc_config *c = &trc_g.cfg;
    long best = -1;
    int verdict = !c->have_include;
    for (int i = 0; i < c->nrules; i++) {
        const trc_rule *r = &c->rules[i];
        if (!prefix_match(abs, pl, r->prefix, r->len))
            continue;
        /* Longest prefix wins; on a tie an exclusion beats an inclusion. */
        if ((long)r->len > best || ((long)r->len == best && !r->include)) {
            best = (long)r->len;
            verdict = r->include;
        }
    }
    size_t py = python_lib_len(abs);
    if (py && (long)py > best)
        verdict = 0;
    return verdict;
}

/* ---------------------------------------------------------------- fd table */
void trc_fd_set(int fd, uint64_t phash, int traced, int64_t pos) {
    trc_fd *s = trc_fd_slot(fd);
    if (!s)
        return;
    s->pos = pos;
    s->flags = 0;
    __atomic_store_n(&s->phash, phash, __ATOMIC_RELAXED);
    __atomic_store_n(&s->traced, (uint32_t)(traced != 0), __ATOMIC_RELEASE);
}

void trc_fd_clear(int fd) {
    trc_fd *s = trc_fd_slot(fd);
    if (!s)
        return;
    __atomic_store_n(&s->traced, 0u, __ATOMIC_RELAXED);
    __atomic_store_n(&s->phash, 0ull, __ATOMIC_RELAXED);
}

void trc_fd_copy(int from, int to) {
    trc_fd *a = trc_fd_slot(from), *b = trc_fd_slot(to);
    if (!b)
        return;
    if (!a) {
        trc_fd_clear(to);
        return;
    }
    trc_fd_set(to, __atomic_load_n(&a->phash, __ATOMIC_RELAXED),
               (int)__atomic_load_n(&a->traced, __ATOMIC_RELAXED), a->pos);
}

uint64_t trc_path_classify(int dirfd, const char *path, int *traced, int intern_untraced) {
    char abs[PATH_MAX];
    *traced = 0;
    if (trc_path_resolve(dirfd, path, abs, sizeof abs) != 0)
        return 0;
    *traced = trc_path_traced(abs);
    if (!*traced && !intern_untraced)
        return 0;
    return trc_path_intern(abs);
}

/* ---------------------------------------------------------------- file-system types */
typedef struct {
    char *dir;  /* mount point */
    size_t len;
    char type[24];
} trc_mount;

static trc_mount *mounts;
static int nmounts = -1; /* -1: not read yet */

/* Mount points escape space, tab, newline and backslash as \ooo. */
static void unescape_octal(char *s) {
    char *o = s;
    for (; *s; s++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' && s[2] <= '7' &&
            s[3] >= '0' && s[3] <= '7') {
            *o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
            s += 3;
        } else {
            *o++ = *s;
        }
    }
    *o = 0;
}

static void read_mounts(void) {
    nmounts = 0;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/mounts", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf)
            break;
        if (len + 4096 > cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                break;
            buf = nb;
            cap *= 2;
        }
        long n = syscall(SYS_read, fd, buf + len, cap - len - 1);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    syscall(SYS_close, fd);
    if (!buf)
        return;
    buf[len] = 0;
    int maxm = 0;
    for (char *line = buf, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        /* device mountpoint type options dump pass */
        char *dev = strtok_r(line, " ", &line), *dir = dev ? strtok_r(NULL, " ", &line) : NULL;
        char *type = dir ? strtok_r(NULL, " ", &line) : NULL;
        if (!type)
            continue;
        if (nmounts == maxm) {
            maxm = maxm ? 2 * maxm : 64;
            trc_mount *nm = realloc(mounts, (size_t)maxm * sizeof *nm);
            if (!nm)
                break;
            mounts = nm;
        }
        unescape_octal(dir);
        trc_mount *m = &mounts[nmounts];
        m->dir = strdup(dir);
        if (!m->dir)
            break;
        m->len = strlen(m->dir);
        snprintf(m->type, sizeof m->type, "%s", type);
        nmounts++;
    }
    free(buf);
}

const char *trc_fs_type(const char *abs) {
    if (nmounts < 0)
        read_mounts();
    /* The longest mount point that is the path or a leading directory of it; the last one
     * listed wins a tie (a later mount over the same point hides the earlier one). */
    const trc_mount *best = NULL;
    size_t pl = strlen(abs);
    for (int i = 0; i < nmounts; i++) {
        const trc_mount *m = &mounts[i];
        size_t l = (m->len == 1 && m->dir[0] == '/') ? 0 : m->len;
        if (!prefix_match(abs, pl, m->dir, l))
            continue;
        if (!best || l >= ((best->len == 1 && best->dir[0] == '/') ? 0 : best->len))
            best = m;
    }
    return best ? best->type : "unknown";
}
