/* trace: the dftracer trace reader (see trace.h): input expansion, gzip/plain line streaming,
 * a hand-written JSON field scanner, per-file chunks built in parallel threads, and the
 * time-ordered merge into global columns. */
#include "analyze/trace.h"

#include "core/err.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#ifdef AN_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

/* ------------------------------------------------------------------ input expansion */

typedef struct {
    char **v;
    size_t n, cap;
} strvec;

static int strvec_push(strvec *s, const char *p) {
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        char **v = realloc(s->v, nc * sizeof *v);
        if (!v)
            return err_set(ERR_NOMEM, "analyze: out of memory listing inputs");
        s->v = v;
        s->cap = nc;
    }
    s->v[s->n] = strdup(p);
    if (!s->v[s->n])
        return err_set(ERR_NOMEM, "analyze: out of memory listing inputs");
    s->n++;
    return 0;
}

static int is_trace_name(const char *name) {
    size_t n = strlen(name);
    return (n > 4 && !strcmp(name + n - 4, ".pfw")) || (n > 7 && !strcmp(name + n - 7, ".pfw.gz"));
}

static int walk_dir(const char *dir, strvec *out, int depth) {
    if (depth > 32)
        return 0;
    DIR *d = opendir(dir);
    if (!d)
        return err_set(ERR_IO, "analyze: cannot open directory %s: %s", dir, strerror(errno));
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        size_t len = strlen(dir) + strlen(de->d_name) + 2;
        char *p = malloc(len);
        if (!p) {
            rc = err_set(ERR_NOMEM, "analyze: out of memory listing %s", dir);
            break;
        }
        snprintf(p, len, "%s/%s", dir, de->d_name);
        struct stat st;
        if (stat(p, &st) == 0) {
            if (S_ISDIR(st.st_mode))
                rc = walk_dir(p, out, depth + 1);
            else if (S_ISREG(st.st_mode) && is_trace_name(de->d_name))
                rc = strvec_push(out, p);
        }
        free(p);
    }
    closedir(d);
    return rc;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int an_expand_inputs(const char *const *paths, int npaths, char ***out, size_t *nout) {
    strvec v = {0};
    int rc = 0;
    *out = NULL;
    *nout = 0;
    for (int i = 0; i < npaths && !rc; i++) {
        const char *p = paths[i];
        struct stat st;
        if (stat(p, &st) == 0) {
            if (S_ISDIR(st.st_mode)) {
                size_t before = v.n;
                rc = walk_dir(p, &v, 0);
                if (!rc && v.n == before)
                    rc = err_set(ERR_USAGE,
                                 "analyze: directory %s holds no trace files (*.pfw, *.pfw.gz); "
                                 "point at the folder the tracer wrote (DFTRACER_LOG_FILE prefix)",
                                 p);
            } else {
                rc = strvec_push(&v, p);
            }
        } else if (strpbrk(p, "*?[")) {
            glob_t g;
            int gr = glob(p, 0, NULL, &g);
            if (gr != 0) {
                rc = err_set(ERR_USAGE, "analyze: pattern %s matches no file", p);
            } else {
                size_t before = v.n;
                for (size_t k = 0; k < g.gl_pathc && !rc; k++) {
                    struct stat s2;
                    if (stat(g.gl_pathv[k], &s2) == 0 && S_ISDIR(s2.st_mode))
                        rc = walk_dir(g.gl_pathv[k], &v, 0);
                    else
                        rc = strvec_push(&v, g.gl_pathv[k]);
                }
                if (!rc && v.n == before)
                    rc = err_set(ERR_USAGE, "analyze: pattern %s matches no trace file", p);
            }
            globfree(&g);
        } else {
            rc = err_set(ERR_USAGE, "analyze: %s: %s (give trace files, directories or globs)", p,
                         strerror(errno));
        }
    }
    if (rc) {
        for (size_t i = 0; i < v.n; i++)
            free(v.v[i]);
        free(v.v);
        return rc;
    }
    qsort(v.v, v.n, sizeof *v.v, cmp_str);
    /* Drop duplicates (a file named twice, or by a path and by its directory). */
    size_t w = 0;
    for (size_t i = 0; i < v.n; i++) {
        if (w && !strcmp(v.v[w - 1], v.v[i])) {
            free(v.v[i]);
            continue;
        }
        v.v[w++] = v.v[i];
    }
    *out = v.v;
    *nout = w;
    return 0;
}

/* ------------------------------------------------------------------ JSON scanning */

static inline const char *skip_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
        p++;
    return p;
}

/* p points at '"'. Returns the position after the closing quote, or NULL. A plain byte loop:
 * trace strings are short, and two memchr calls per string cost more than they save. */
static inline const char *scan_string(const char *p, const char *e, const char **s, size_t *n,
                                      int *esc) {
    p++;
    const char *st = p;
    int es = 0;
    while (p < e) {
        char c = *p;
        if (c == '"') {
            *s = st;
            *n = (size_t)(p - st);
            if (esc)
                *esc = es;
            return p + 1;
        }
        if (c == '\\') {
            es = 1;
            p += 2;
            continue;
        }
        p++;
    }
    return NULL;
}

static const char *skip_value(const char *p, const char *e) {
    if (p >= e)
        return NULL;
    if (*p == '"') {
        const char *s;
        size_t n;
        return scan_string(p, e, &s, &n, NULL);
    }
    if (*p == '{' || *p == '[') {
        int depth = 0;
        while (p < e) {
            char c = *p;
            if (c == '"') {
                const char *s;
                size_t n;
                p = scan_string(p, e, &s, &n, NULL);
                if (!p)
                    return NULL;
                continue;
            }
            if (c == '{' || c == '[')
                depth++;
            else if (c == '}' || c == ']') {
                depth--;
                if (depth == 0)
                    return p + 1;
            }
            p++;
        }
        return NULL;
    }
    while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' &&
           *p != '\r' && *p != '\n')
        p++;
    return p;
}

#define ISDIG(c) ((unsigned)((c) - '0') < 10u)

/* Parses a number token s[0..n) (digits, sign, optional fraction/exponent). */
static int parse_num(const char *s, size_t n, int64_t *v) {
    if (n == 0)
        return 0;
    const char *p = s, *e = s + n;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    } else if (*p == '+') {
        p++;
    }
    if (p >= e || !ISDIG(*p))
        return 0;
    uint64_t x = 0;
    while (p < e && ISDIG(*p)) {
        x = x * 10 + (uint64_t)(*p - '0');
        p++;
    }
    if (p < e) {
        if (*p != '.' && *p != 'e' && *p != 'E')
            return 0;
        char buf[64];
        if (n >= sizeof buf)
            return 0;
        memcpy(buf, s, n);
        buf[n] = 0;
        char *end;
        double d = strtod(buf, &end);
        if (end != buf + n || !isfinite(d))
            return 0;
        *v = (int64_t)llround(d);
        return 1;
    }
    *v = neg ? -(int64_t)x : (int64_t)x;
    return 1;
}

/* A number value, possibly quoted (dftracer v1 writes every value as a string). Integers are
 * converted while scanning (one pass); fractions and exponents go through parse_num. */
static inline const char *scan_number(const char *p, const char *e, int64_t *v, int *ok) {
    *ok = 0;
    if (p < e && *p == '"') {
        const char *s;
        size_t n;
        const char *q = scan_string(p, e, &s, &n, NULL);
        if (q)
            *ok = parse_num(s, n, v);
        return q;
    }
    const char *st = p;
    int neg = 0;
    if (p < e && *p == '-') {
        neg = 1;
        p++;
    }
    uint64_t x = 0;
    const char *d0 = p;
    while (p < e && ISDIG(*p)) {
        x = x * 10 + (uint64_t)(*p - '0');
        p++;
    }
    if (p < e && (*p == '.' || *p == 'e' || *p == 'E')) {
        const char *q = skip_value(st, e);
        if (q)
            *ok = parse_num(st, (size_t)(q - st), v);
        return q;
    }
    if (p == d0) /* not a number (null, true, ...): skip it */
        return skip_value(st, e);
    *v = neg ? -(int64_t)x : (int64_t)x;
    *ok = 1;
    return p;
}

/* A value kept as raw text: a string's content, or the token/array text otherwise. */
static const char *scan_raw(const char *p, const char *e, const char **s, size_t *n, int *esc) {
    if (p < e && *p == '"')
        return scan_string(p, e, s, n, esc);
    const char *q = skip_value(p, e);
    if (q) {
        *s = p;
        *n = (size_t)(q - p);
        if (esc)
            *esc = 0;
    }
    return q;
}

#define KEYIS(k, kn, lit) ((kn) == sizeof(lit) - 1 && !memcmp((k), (lit), sizeof(lit) - 1))

static const char *parse_args(const char *p, const char *e, an_rawev *ev) {
    p++; /* '{' */
    for (;;) {
        p = skip_ws(p, e);
        if (p >= e)
            return NULL;
        if (*p == '}')
            return p + 1;
        if (*p != '"')
            return NULL;
        const char *k;
        size_t kn;
        p = scan_string(p, e, &k, &kn, NULL);
        if (!p)
            return NULL;
        p = skip_ws(p, e);
        if (p >= e || *p != ':')
            return NULL;
        p = skip_ws(p + 1, e);
        int ok = 0;
        int64_t v = 0;
        unsigned bit = 0;
        switch (kn) {
        case 3:
            if (KEYIS(k, kn, "ret"))
                bit = AN_RAW_RET;
            break;
        case 4:
            if (KEYIS(k, kn, "size"))
                bit = AN_RAW_SIZE;
            else if (KEYIS(k, kn, "name")) {
                p = scan_raw(p, e, &ev->m_name, &ev->m_name_n, &ev->m_name_esc);
                goto next;
            }
            break;
        case 5:
            if (KEYIS(k, kn, "hhash")) {
                p = scan_raw(p, e, &ev->hhash, &ev->hhash_n, NULL);
                goto next;
            } else if (KEYIS(k, kn, "fhash")) {
                p = scan_raw(p, e, &ev->fhash, &ev->fhash_n, NULL);
                goto next;
            } else if (KEYIS(k, kn, "count"))
                bit = AN_RAW_COUNT;
            else if (KEYIS(k, kn, "bytes"))
                bit = AN_RAW_BYTES;
            else if (KEYIS(k, kn, "flags"))
                bit = AN_RAW_FLAGS;
            else if (KEYIS(k, kn, "fname")) {
                p = scan_raw(p, e, &ev->fname, &ev->fname_n, &ev->fname_esc);
                goto next;
            } else if (KEYIS(k, kn, "value")) {
                p = scan_raw(p, e, &ev->m_value, &ev->m_value_n, NULL);
                goto next;
            }
            break;
        case 6:
            if (KEYIS(k, kn, "offset"))
                bit = AN_RAW_OFFSET;
            else if (KEYIS(k, kn, "whence"))
                bit = AN_RAW_WHENCE;
            break;
        case 7:
            if (KEYIS(k, kn, "dur_sum"))
                bit = AN_RAW_DURSUM;
            else if (KEYIS(k, kn, "ret_sum"))
                bit = AN_RAW_RETSUM;
            break;
        case 8:
            if (KEYIS(k, kn, "hostname")) {
                p = scan_raw(p, e, &ev->hostname, &ev->hostname_n, NULL);
                goto next;
            } else if (KEYIS(k, kn, "size_sum"))
                bit = AN_RAW_SIZESUM;
            break;
        case 9:
            if (KEYIS(k, kn, "bytes_sum"))
                bit = AN_RAW_SIZESUM;
            break;
        default:
            break;
        }
        if (bit) {
            p = scan_number(p, e, &v, &ok);
            if (p && ok) {
                ev->has |= bit;
                switch (bit) {
                case AN_RAW_RET: ev->ret = v; break;
                case AN_RAW_OFFSET: ev->offset = v; break;
                case AN_RAW_COUNT: ev->count = v; break;
                case AN_RAW_SIZE: ev->size = v; break;
                case AN_RAW_BYTES: ev->bytes = v; break;
                case AN_RAW_FLAGS: ev->flags = v; break;
                case AN_RAW_WHENCE: ev->whence = v; break;
                case AN_RAW_DURSUM: ev->dur_sum = v; break;
                case AN_RAW_SIZESUM: ev->size_sum = v; break;
                case AN_RAW_RETSUM: ev->ret_sum = v; break;
                default: break;
                }
            }
        } else {
            p = skip_value(p, e);
        }
    next:
        if (!p)
            return NULL;
        p = skip_ws(p, e);
        if (p < e && *p == ',') {
            p++;
            continue;
        }
        if (p < e && *p == '}')
            return p + 1;
        return NULL;
    }
}

int an_parse_line(const char *p, const char *e, an_rawev *ev) {
    memset(ev, 0, sizeof *ev);
    p = skip_ws(p, e);
    if (p >= e)
        return 0;
    if (*p == '[' || *p == ']') {
        /* The "[" / "]" bracket lines (possibly "[{...}" on one line in hand-made files). */
        p = skip_ws(p + 1, e);
        if (p >= e || *p == ']' || *p == ',')
            return 0;
    }
    if (*p != '{')
        return -1;
    p++;
    for (;;) {
        p = skip_ws(p, e);
        if (p >= e)
            return -1;
        if (*p == '}') {
            p++;
            break;
        }
        if (*p != '"')
            return -1;
        const char *k;
        size_t kn;
        p = scan_string(p, e, &k, &kn, NULL);
        if (!p)
            return -1;
        p = skip_ws(p, e);
        if (p >= e || *p != ':')
            return -1;
        p = skip_ws(p + 1, e);
        int ok = 0;
        /* Dispatch on length and first letter: one or two byte compares per key. */
        char k0 = kn ? k[0] : 0;
        if (kn == 4 && k0 == 'n' && KEYIS(k, kn, "name"))
            p = scan_raw(p, e, &ev->name, &ev->name_n, &ev->name_esc);
        else if (kn == 3 && k0 == 'c' && k[1] == 'a' && k[2] == 't')
            p = scan_raw(p, e, &ev->cat, &ev->cat_n, NULL);
        else if (kn == 2 && k0 == 'p' && k[1] == 'h')
            p = scan_raw(p, e, &ev->ph, &ev->ph_n, NULL);
        else if (kn == 2 && k0 == 't' && k[1] == 's') {
            p = scan_number(p, e, &ev->ts, &ok);
            ev->has_ts = ok;
        } else if (kn == 3 && k0 == 'd' && k[1] == 'u' && k[2] == 'r') {
            p = scan_number(p, e, &ev->dur, &ok);
            ev->has_dur = ok;
        } else if (kn == 3 && k0 == 'p' && k[1] == 'i' && k[2] == 'd') {
            p = scan_number(p, e, &ev->pid, &ok);
            ev->has_pid = ok;
        } else if (kn == 3 && k0 == 't' && k[1] == 'i' && k[2] == 'd') {
            p = scan_number(p, e, &ev->tid, &ok);
        } else if (kn == 4 && k0 == 'a' && KEYIS(k, kn, "args")) {
            if (p < e && *p == '{')
                p = parse_args(p, e, ev);
            else
                p = skip_value(p, e);
        } else {
            p = skip_value(p, e);
        }
        if (!p)
            return -1;
        p = skip_ws(p, e);
        if (p < e && *p == ',') {
            p++;
            continue;
        }
        if (p < e && *p == '}') {
            p++;
            break;
        }
        return -1;
    }
    /* Allow a trailing comma (JSON-array style traces) and nothing else. */
    p = skip_ws(p, e);
    if (p < e && *p == ',')
        p = skip_ws(p + 1, e);
    if (p < e && *p != ']')
        return -1;
    if (!ev->ph) {
        ev->ph = "X";
        ev->ph_n = 1;
    }
    return 1;
}

size_t an_json_unescape(const char *s, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 4 < cap; i++) {
        char c = s[i];
        if (c != '\\' || i + 1 >= n) {
            out[o++] = c;
            continue;
        }
        c = s[++i];
        switch (c) {
        case 'n': out[o++] = '\n'; break;
        case 't': out[o++] = '\t'; break;
        case 'r': out[o++] = '\r'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'u': {
            unsigned cp = 0;
            size_t k = 0;
            for (; k < 4 && i + 1 + k < n && isxdigit((unsigned char)s[i + 1 + k]); k++) {
                char h = s[i + 1 + k];
                cp = cp * 16 + (unsigned)(isdigit((unsigned char)h) ? h - '0' : (tolower(h) - 'a' + 10));
            }
            i += k;
            if (cp < 0x80) {
                out[o++] = (char)cp;
            } else if (cp < 0x800) {
                out[o++] = (char)(0xC0 | (cp >> 6));
                out[o++] = (char)(0x80 | (cp & 0x3F));
            } else {
                out[o++] = (char)(0xE0 | (cp >> 12));
                out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[o++] = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default: out[o++] = c; break;
        }
    }
    return o;
}

/* ------------------------------------------------------------------ classification */

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

static const char *const IO_READ[] = {"read", "pread", "pread64", "readv", "preadv", "preadv64",
                                      "preadv2", "fread", "fread_unlocked", NULL};
static const char *const IO_WRITE[] = {"write", "pwrite", "pwrite64", "writev", "pwritev",
                                       "pwritev64", "pwritev2", "fwrite", "fwrite_unlocked", NULL};
static const char *const IO_SYNC[] = {"fsync", "fdatasync", "msync", "sync", "syncfs",
                                      "sync_file_range", "fflush", NULL};
static const char *const IO_META[] = {
    "open", "open64", "openat", "openat64", "__open_2", "__open64_2", "creat", "creat64", "close",
    "close_range", "fopen", "fopen64", "fdopen", "freopen", "freopen64", "fclose", "__xstat",
    "__xstat64", "__lxstat", "__lxstat64", "__fxstat", "__fxstat64", "__fxstatat", "__fxstatat64",
    "stat", "stat64", "lstat", "lstat64", "fstat", "fstat64", "fstatat", "fstatat64", "newfstatat",
    "statx", "access", "faccessat", "lseek", "lseek64", "fseek", "fseeko", "fseeko64", "ftell",
    "ftello", "rewind", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "remove", "rename",
    "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat", "readlink", "readlinkat",
    "opendir", "fdopendir", "closedir", "readdir", "readdir64", "getdents", "getdents64", "chdir",
    "fchdir", "chmod", "fchmod", "fchmodat", "chown", "fchown", "lchown", "fcntl", "fcntl64",
    "ftruncate", "ftruncate64", "truncate", "truncate64", "utime", "utimes", "utimensat",
    "mkfifo", "mknod", "fallocate", "posix_fallocate", "seek", NULL};
static const char *const IO_PCTL[] = {"fork", "vfork", "execl", "execlp", "execle", "execv",
                                      "execvp", "execvpe", "execve", "exit", "_exit", "wait",
                                      "waitpid", "kill", "pipe", "posix_spawn", "posix_spawnp",
                                      NULL};

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
        if (name_in(name, nn, IO_READ))
            return AN_OP_READ;
        if (name_in(name, nn, IO_WRITE))
            return AN_OP_WRITE;
        if (name_in(name, nn, IO_META))
            return AN_OP_META;
        if (name_in(name, nn, IO_SYNC))
            return AN_OP_SYNC;
        if (name_in(name, nn, IO_PCTL))
            return AN_OP_PCTL;
        return AN_OP_IO_OTHER;
    }
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

/* Sub-kinds needing per-name handling when deriving bytes/offsets. */
enum { SK_NONE, SK_FRW, SK_LSEEK, SK_FSEEK, SK_FTELL, SK_OPEN };

static int subkind(const char *name, size_t nn) {
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

/* ------------------------------------------------------------------ per-file chunks */

typedef struct {
    uint32_t name, cat; /* local ids in c->names / c->cats */
    uint8_t op, flags, sub;
} pairinfo;

typedef struct {
    int64_t pid;
    uint32_t hostkey; /* local id in keys */
    int rank;
} lproc;

typedef struct chunk {
    size_t n, cap;
    int64_t *ts, *dur, *offset, *bytes;
    uint32_t *pair, *filekey, *proc, *tid;
    uint8_t *flags;
    an_strtab names, cats, keys;
    uint32_t *resolved; /* per key: the key holding the resolved string (FH/HH), or itself */
    uint32_t nresolved;
    pairinfo *pairs;
    uint32_t npairs, cappairs;
    an_imap pairmap, procmap;
    lproc *procs;
    uint32_t nprocs, capprocs;
    /* caches of the previous event's strings */
    const char *last_name;
    size_t last_name_n;
    uint32_t last_name_id;
    char last_cat[64];
    size_t last_cat_n;
    uint32_t last_cat_id;
    char last_host[64];
    size_t last_host_n;
    uint32_t last_host_key;
    char last_file[64];
    size_t last_file_n;
    uint32_t last_file_key;
    int file_rank;      /* rank from a DLIO-style file name, -1 */
    an_input *in;
    uint64_t metadata;
    int oom;
} chunk;

static int chunk_init(chunk *c, an_input *in) {
    memset(c, 0, sizeof *c);
    c->in = in;
    c->file_rank = -1;
    c->last_name_id = AN_STR_NONE;
    c->last_cat_id = AN_STR_NONE;
    c->last_host_key = AN_STR_NONE;
    c->last_file_key = AN_STR_NONE;
    if (an_strtab_init(&c->names) || an_strtab_init(&c->cats) || an_strtab_init(&c->keys) ||
        an_imap_init(&c->pairmap, 64) || an_imap_init(&c->procmap, 8))
        return ERR_NOMEM;
    return 0;
}

static void chunk_free_columns(chunk *c) {
    free(c->ts);
    free(c->dur);
    free(c->offset);
    free(c->bytes);
    free(c->pair);
    free(c->filekey);
    free(c->proc);
    free(c->tid);
    free(c->flags);
    c->ts = c->dur = c->offset = c->bytes = NULL;
    c->pair = c->filekey = c->proc = c->tid = NULL;
    c->flags = NULL;
}

static void chunk_free(chunk *c) {
    chunk_free_columns(c);
    an_strtab_free(&c->names);
    an_strtab_free(&c->cats);
    an_strtab_free(&c->keys);
    an_imap_free(&c->pairmap);
    an_imap_free(&c->procmap);
    free(c->resolved);
    free(c->pairs);
    free(c->procs);
}

#define GROW(ptr, cap)                                                                             \
    do {                                                                                           \
        void *np_ = realloc((ptr), (cap) * sizeof *(ptr));                                         \
        if (!np_)                                                                                  \
            return ERR_NOMEM;                                                                      \
        (ptr) = np_;                                                                               \
    } while (0)

static int chunk_reserve(chunk *c) {
    if (c->n < c->cap)
        return 0;
    size_t nc = c->cap ? c->cap * 2 : 65536;
    GROW(c->ts, nc);
    GROW(c->dur, nc);
    GROW(c->offset, nc);
    GROW(c->bytes, nc);
    GROW(c->pair, nc);
    GROW(c->filekey, nc);
    GROW(c->proc, nc);
    GROW(c->tid, nc);
    GROW(c->flags, nc);
    c->cap = nc;
    return 0;
}

/* Interns a key (hash token or inline string) and makes sure `resolved` covers it. */
static uint32_t chunk_key(chunk *c, const char *s, size_t n) {
    uint32_t id = an_strtab_intern(&c->keys, s, n);
    if (id == AN_STR_NONE)
        return id;
    if (id >= c->nresolved) {
        uint32_t nc = c->nresolved ? c->nresolved : 64;
        while (nc <= id)
            nc *= 2;
        uint32_t *r = realloc(c->resolved, nc * sizeof *r);
        if (!r)
            return AN_STR_NONE;
        for (uint32_t i = c->nresolved; i < nc; i++)
            r[i] = i;
        c->resolved = r;
        c->nresolved = nc;
    }
    return id;
}

/* Interns a string that may carry JSON escapes. */
static uint32_t chunk_key_esc(chunk *c, const char *s, size_t n, int esc) {
    if (!esc)
        return chunk_key(c, s, n);
    char buf[8192];
    size_t m = an_json_unescape(s, n, buf, sizeof buf);
    return chunk_key(c, buf, m);
}

static uint32_t chunk_proc(chunk *c, int64_t pid, uint32_t hostkey) {
    /* Keyed by pid alone: a trace file belongs to one host, and some events (v1.0.5 metadata,
     * DLIO's) carry no host hash, which must not split the process in two. */
    uint64_t key = (uint64_t)pid;
    int ins = 0;
    uint32_t *v = an_imap_get(&c->procmap, key, c->nprocs, &ins);
    if (!v)
        return AN_STR_NONE;
    if (ins) {
        if (c->nprocs == c->capprocs) {
            uint32_t nc = c->capprocs ? c->capprocs * 2 : 8;
            lproc *p = realloc(c->procs, nc * sizeof *p);
            if (!p)
                return AN_STR_NONE;
            c->procs = p;
            c->capprocs = nc;
        }
        c->procs[c->nprocs] = (lproc){.pid = pid, .hostkey = hostkey, .rank = -1};
        return c->nprocs++;
    }
    if (hostkey && !c->procs[*v].hostkey)
        c->procs[*v].hostkey = hostkey;
    return *v;
}

static uint32_t chunk_pair(chunk *c, const an_rawev *ev) {
    uint32_t nid;
    if (c->last_name_id != AN_STR_NONE && ev->name_n == c->last_name_n &&
        !memcmp(ev->name, c->last_name, ev->name_n)) {
        nid = c->last_name_id;
    } else {
        if (ev->name_esc) {
            char buf[1024];
            size_t m = an_json_unescape(ev->name, ev->name_n, buf, sizeof buf);
            nid = an_strtab_intern(&c->names, buf, m);
        } else {
            nid = an_strtab_intern(&c->names, ev->name, ev->name_n);
        }
        if (nid == AN_STR_NONE)
            return nid;
        /* The cached name points into the names arena, which may move; keep the arena copy. */
        c->last_name_id = nid;
        c->last_name = an_strtab_get(&c->names, nid);
        c->last_name_n = an_strtab_len(&c->names, nid);
        if (ev->name_esc)
            c->last_name_id = AN_STR_NONE; /* escaped forms do not compare equal to raw text */
    }
    uint32_t cid;
    if (c->last_cat_id != AN_STR_NONE && ev->cat_n == c->last_cat_n &&
        !memcmp(ev->cat, c->last_cat, ev->cat_n)) {
        cid = c->last_cat_id;
    } else {
        cid = an_strtab_intern(&c->cats, ev->cat, ev->cat_n);
        if (cid == AN_STR_NONE)
            return cid;
        if (ev->cat_n < sizeof c->last_cat) {
            memcpy(c->last_cat, ev->cat, ev->cat_n);
            c->last_cat_n = ev->cat_n;
            c->last_cat_id = cid;
        }
    }
    int ins = 0;
    uint32_t *v = an_imap_get(&c->pairmap, ((uint64_t)nid << 32) | cid, c->npairs, &ins);
    if (!v)
        return AN_STR_NONE;
    if (!ins)
        return *v;
    if (c->npairs == c->cappairs) {
        uint32_t nc = c->cappairs ? c->cappairs * 2 : 64;
        pairinfo *p = realloc(c->pairs, nc * sizeof *p);
        if (!p)
            return AN_STR_NONE;
        c->pairs = p;
        c->cappairs = nc;
    }
    const char *nm = an_strtab_get(&c->names, nid);
    size_t nl = an_strtab_len(&c->names, nid);
    const char *ct = an_strtab_get(&c->cats, cid);
    size_t cl = an_strtab_len(&c->cats, cid);
    unsigned fl = 0;
    int op = an_classify(nm, nl, ct, cl, &fl);
    c->pairs[c->npairs] = (pairinfo){.name = nid, .cat = cid, .op = (uint8_t)op,
                                     .flags = (uint8_t)fl,
                                     .sub = (uint8_t)(AN_IS_IO(op) ? subkind(nm, nl) : SK_NONE)};
    return c->npairs++;
}

static uint32_t chunk_host(chunk *c, const an_rawev *ev) {
    const char *h = ev->hhash ? ev->hhash : ev->hostname;
    size_t hn = ev->hhash ? ev->hhash_n : ev->hostname_n;
    if (!h)
        return 0;
    if (c->last_host_key != AN_STR_NONE && hn == c->last_host_n && !memcmp(h, c->last_host, hn))
        return c->last_host_key;
    uint32_t k = chunk_key(c, h, hn);
    if (k != AN_STR_NONE && hn < sizeof c->last_host) {
        memcpy(c->last_host, h, hn);
        c->last_host_n = hn;
        c->last_host_key = k;
    }
    return k;
}

static void chunk_metadata(chunk *c, const an_rawev *ev) {
    c->metadata++;
    const char *nm = ev->name;
    size_t nn = ev->name_n;
    if ((KEYIS(nm, nn, "FH") || KEYIS(nm, nn, "HH")) && ev->m_value && ev->m_name) {
        uint32_t hk = chunk_key(c, ev->m_value, ev->m_value_n);
        uint32_t sk = chunk_key_esc(c, ev->m_name, ev->m_name_n, ev->m_name_esc);
        if (hk != AN_STR_NONE && sk != AN_STR_NONE)
            c->resolved[hk] = sk;
        else
            c->oom = 1;
        return;
    }
    if (KEYIS(nm, nn, "SH") || KEYIS(nm, nn, "CM") || KEYIS(nm, nn, "thread_name"))
        return;
    if (KEYIS(nm, nn, "PR") || KEYIS(nm, nn, "process_name")) {
        int64_t rank = -1;
        if (KEYIS(nm, nn, "PR") && ev->m_name && KEYIS(ev->m_name, ev->m_name_n, "rank") &&
            ev->m_value) {
            if (!parse_num(ev->m_value, ev->m_value_n, &rank))
                rank = -1;
        } else {
            /* process_name "Rank N" (dftracer under MPI), in name or value. */
            const char *s[2] = {ev->m_name, ev->m_value};
            size_t sn[2] = {ev->m_name_n, ev->m_value_n};
            for (int i = 0; i < 2 && rank < 0; i++)
                if (s[i] && sn[i] > 5 && !strncasecmp(s[i], "rank ", 5) &&
                    !parse_num(s[i] + 5, sn[i] - 5, &rank))
                    rank = -1;
        }
        if (rank >= 0 && ev->has_pid) {
            uint32_t pr = chunk_proc(c, ev->pid, chunk_host(c, ev));
            if (pr != AN_STR_NONE)
                c->procs[pr].rank = (int)rank;
        }
        return;
    }
    c->in->unknown_meta++;
}

static int chunk_add(chunk *c, const an_rawev *ev) {
    char ph = ev->ph_n ? ev->ph[0] : 'X';
    if (ph == 'M') {
        chunk_metadata(c, ev);
        return 0;
    }
    if (ph != 'X' && ph != 'C')
        return 0; /* B/E/i/... events are not produced by dftracer; ignore them */
    if (!ev->has_ts || !ev->name)
        return -1;
    if (chunk_reserve(c))
        return ERR_NOMEM;
    uint32_t pr = chunk_pair(c, ev);
    if (pr == AN_STR_NONE)
        return ERR_NOMEM;
    const pairinfo *pi = &c->pairs[pr];
    uint32_t hk = chunk_host(c, ev);
    uint32_t proc = chunk_proc(c, ev->has_pid ? ev->pid : 0, hk == AN_STR_NONE ? 0 : hk);
    if (proc == AN_STR_NONE)
        return ERR_NOMEM;
    uint32_t fk = 0;
    if (ev->fhash) {
        /* Consecutive events mostly touch the same file: skip the hash lookup then. */
        if (c->last_file_key != AN_STR_NONE && ev->fhash_n == c->last_file_n &&
            !memcmp(ev->fhash, c->last_file, ev->fhash_n)) {
            fk = c->last_file_key;
        } else {
            fk = chunk_key(c, ev->fhash, ev->fhash_n);
            if (fk != AN_STR_NONE && ev->fhash_n < sizeof c->last_file) {
                memcpy(c->last_file, ev->fhash, ev->fhash_n);
                c->last_file_n = ev->fhash_n;
                c->last_file_key = fk;
            }
        }
    } else if (ev->fname)
        fk = chunk_key_esc(c, ev->fname, ev->fname_n, ev->fname_esc);
    if (fk == AN_STR_NONE)
        return ERR_NOMEM;
    size_t i = c->n++;
    int64_t dur = ev->has_dur ? ev->dur : 0;
    int64_t bytes = -1, off = -1;
    uint8_t fl = pi->flags;
    if (ph == 'C') {
        fl |= AN_F_COUNTER;
        if (ev->has & AN_RAW_DURSUM)
            dur = ev->dur_sum;
        if (ev->has & AN_RAW_SIZESUM)
            bytes = ev->size_sum;
        else if (ev->has & AN_RAW_RETSUM)
            bytes = ev->ret_sum;
    } else if (pi->op == AN_OP_READ || pi->op == AN_OP_WRITE) {
        if (ev->has & AN_RAW_BYTES)
            bytes = ev->bytes;
        else if (pi->sub == SK_FRW && (ev->has & AN_RAW_SIZE) && (ev->has & AN_RAW_RET))
            bytes = ev->ret * ev->size; /* fread/fwrite return items, not bytes */
        else if (ev->has & AN_RAW_RET)
            bytes = ev->ret;
        if (bytes < 0)
            bytes = -1;
        if (ev->has & AN_RAW_OFFSET)
            off = ev->offset;
    } else if (pi->sub == SK_LSEEK && (ev->has & AN_RAW_RET) && ev->ret >= 0) {
        off = ev->ret;
        fl |= AN_F_SEEKPOS;
    } else if (pi->sub == SK_FSEEK && (ev->has & AN_RAW_OFFSET) && (ev->has & AN_RAW_WHENCE) &&
               ev->whence == 0) {
        off = ev->offset;
        fl |= AN_F_SEEKPOS;
    } else if (pi->sub == SK_FTELL && (ev->has & AN_RAW_RET) && ev->ret >= 0) {
        off = ev->ret;
        fl |= AN_F_SEEKPOS;
    } else if (pi->sub == SK_OPEN) {
        off = 0;
        if ((ev->has & AN_RAW_FLAGS) && (ev->flags & 02000))
            fl |= AN_F_APPEND;
    }
    c->ts[i] = ev->ts;
    c->dur[i] = dur < 0 ? 0 : dur;
    c->offset[i] = off;
    c->bytes[i] = bytes;
    c->pair[i] = pr;
    c->filekey[i] = fk;
    c->proc[i] = proc;
    c->tid[i] = (uint32_t)ev->tid;
    c->flags[i] = fl;
    return 0;
}

static void chunk_line(chunk *c, const char *p, const char *e) {
    c->in->lines++;
    an_rawev ev;
    int r = an_parse_line(p, e, &ev);
    if (r == 0)
        return;
    if (r > 0) {
        int rc = chunk_add(c, &ev);
        if (rc == 0)
            return;
        if (rc == ERR_NOMEM) {
            c->oom = 1;
            return;
        }
    }
    if (!c->in->malformed)
        c->in->first_bad_line = c->in->lines;
    c->in->malformed++;
}

/* ------------------------------------------------------------------ file streaming */

#define IN_BUF (1u << 20)
#define OUT_BUF (4u << 20)
#define MAX_LINE (64u << 20)

/* Feeds the complete lines of buf[0..*have) to the chunk and keeps the partial last line. */
static int feed_lines(chunk *c, char **buf, size_t *have, size_t *cap, int final) {
    char *b = *buf;
    size_t start = 0;
    for (;;) {
        char *nl = memchr(b + start, '\n', *have - start);
        if (!nl)
            break;
        chunk_line(c, b + start, nl);
        start = (size_t)(nl - b) + 1;
    }
    size_t rest = *have - start;
    if (final) {
        if (rest) {
            /* The last line has no newline: v2 ends with "]", a crashed writer mid-line. */
            an_rawev ev;
            const char *p = b + start, *e = b + *have;
            int r = an_parse_line(p, e, &ev);
            if (r < 0) {
                c->in->truncated = 1;
                if (!c->in->note[0])
                    snprintf(c->in->note, sizeof c->in->note,
                             "the last line is incomplete (%zu bytes dropped)", rest);
            } else {
                chunk_line(c, p, e);
            }
        }
        *have = 0;
        return 0;
    }
    if (start)
        memmove(b, b + start, rest);
    *have = rest;
    if (rest == *cap) {
        if (*cap >= MAX_LINE) {
            /* A single line longer than 64 MiB is not a trace line; drop it. */
            c->in->malformed++;
            *have = 0;
            return 0;
        }
        char *nb = realloc(b, *cap * 2);
        if (!nb)
            return ERR_NOMEM;
        *buf = nb;
        *cap *= 2;
    }
    return 0;
}

#ifdef AN_HAVE_LIBDEFLATE
/* Fast path: decodes whole gzip members with libdeflate (about 2-3x zlib's inflate, which is
 * most of the load time) and feeds their lines. Stops at the first member it cannot decode in
 * one piece (truncated, corrupt, larger than 1 GiB, trailing junk) and returns that member's
 * file offset, where the zlib streaming path takes over and recovers what it can. */
static off_t gzip_fast(chunk *c, int fd, char **out, size_t *have, size_t *cap) {
    struct stat st;
    if (fstat(fd, &st) || st.st_size < 18)
        return 0;
    size_t fsz = (size_t)st.st_size, off = 0;
    unsigned char *in = mmap(NULL, fsz, PROT_READ, MAP_PRIVATE, fd, 0);
    if (in == MAP_FAILED)
        return 0;
    struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
    while (d && off + 18 <= fsz && in[off] == 0x1f && in[off + 1] == 0x8b) {
        enum libdeflate_result r;
        size_t ain = 0, aout = 0, want = 64u << 20;
        for (;;) {
            if (*cap - *have < want) {
                char *nb = realloc(*out, *have + want);
                if (!nb) {
                    c->oom = 1;
                    goto stop;
                }
                *out = nb;
                *cap = *have + want;
            }
            r = libdeflate_gzip_decompress_ex(d, in + off, fsz - off, *out + *have, *cap - *have,
                                              &ain, &aout);
            if (r != LIBDEFLATE_INSUFFICIENT_SPACE || want >= (1u << 30))
                break;
            want *= 2;
        }
        if (r != LIBDEFLATE_SUCCESS)
            break;
        c->in->members++;
        *have += aout;
        off += ain;
        if (feed_lines(c, out, have, cap, 0)) {
            c->oom = 1;
            break;
        }
    }
stop:
    if (d)
        libdeflate_free_decompressor(d);
    munmap(in, fsz);
    return (off_t)off;
}
#endif

static void load_file(chunk *c) {
    an_input *in = c->in;
    int fd = open(in->path, O_RDONLY);
    if (fd < 0) {
        in->failed = 1;
        snprintf(in->note, sizeof in->note, "cannot open: %s", strerror(errno));
        return;
    }
    size_t cap = OUT_BUF, have = 0;
    char *out = malloc(cap);
    unsigned char *inb = malloc(IN_BUF);
    if (!out || !inb) {
        c->oom = 1;
        goto done;
    }
    ssize_t got = read(fd, inb, IN_BUF);
    if (got < 0) {
        in->failed = 1;
        snprintf(in->note, sizeof in->note, "cannot read: %s", strerror(errno));
        goto done;
    }
    if (got >= 2 && inb[0] == 0x1f && inb[1] == 0x8b) {
#ifdef AN_HAVE_LIBDEFLATE
        off_t start = gzip_fast(c, fd, &out, &have, &cap);
        if (c->oom)
            goto done;
        if (start > 0) {
            if (lseek(fd, start, SEEK_SET) != start) {
                snprintf(in->note, sizeof in->note, "cannot seek: %s", strerror(errno));
                goto done;
            }
            got = read(fd, inb, IN_BUF);
            if (got <= 0) {
                feed_lines(c, &out, &have, &cap, 1); /* every member decoded */
                goto done;
            }
        }
#endif
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        if (inflateInit2(&zs, 15 + 16) != Z_OK) {
            c->oom = 1;
            goto done;
        }
        zs.next_in = inb;
        zs.avail_in = (uInt)got;
        int eof = 0, in_member = 1;
        for (;;) {
            if (zs.avail_in == 0 && !eof) {
                got = read(fd, inb, IN_BUF);
                if (got < 0) {
                    snprintf(in->note, sizeof in->note, "read error: %s", strerror(errno));
                    in->truncated = 1;
                    break;
                }
                if (got == 0)
                    eof = 1;
                zs.next_in = inb;
                zs.avail_in = (uInt)got;
            }
            if (!in_member) {
                if (zs.avail_in == 0 && eof)
                    break;
                if (zs.avail_in == 0)
                    continue;
                /* A new member must start with the gzip magic; anything else (zero padding
                 * from a preallocated file) ends the stream. */
                if (zs.next_in[0] != 0x1f) {
                    snprintf(in->note, sizeof in->note,
                             "%u bytes of non-gzip data after member %llu ignored", zs.avail_in,
                             (unsigned long long)in->members);
                    break;
                }
                inflateReset(&zs);
                in_member = 1;
            }
            if (zs.avail_in == 0 && eof) {
                in->truncated = 1;
                snprintf(in->note, sizeof in->note,
                         "gzip stream truncated inside member %llu; kept every complete line "
                         "before the cut",
                         (unsigned long long)in->members + 1);
                break;
            }
            zs.next_out = (unsigned char *)out + have;
            zs.avail_out = (uInt)(cap - have);
            int zr = inflate(&zs, Z_NO_FLUSH);
            have = cap - zs.avail_out;
            if (zr == Z_STREAM_END) {
                in->members++;
                in_member = 0;
            } else if (zr == Z_BUF_ERROR) {
                /* No progress possible: need input (handled above) or output space. */
            } else if (zr != Z_OK) {
                in->truncated = 1;
                snprintf(in->note, sizeof in->note,
                         "corrupt gzip data in member %llu (%s); kept every complete line before it",
                         (unsigned long long)in->members + 1, zs.msg ? zs.msg : "data error");
                break;
            }
            if (feed_lines(c, &out, &have, &cap, 0)) {
                c->oom = 1;
                break;
            }
        }
        inflateEnd(&zs);
        if (in->truncated && have) {
            /* Drop the partial line cut by the truncation: it cannot be complete. */
            an_rawev ev;
            if (an_parse_line(out, out + have, &ev) > 0)
                chunk_line(c, out, out + have);
            have = 0;
        }
        feed_lines(c, &out, &have, &cap, 1);
    } else {
        size_t pos = 0;
        while (got > 0) {
            size_t room = cap - have;
            size_t take = (size_t)got - pos < room ? (size_t)got - pos : room;
            memcpy(out + have, inb + pos, take);
            have += take;
            pos += take;
            if (feed_lines(c, &out, &have, &cap, 0)) {
                c->oom = 1;
                break;
            }
            if (pos == (size_t)got) {
                got = read(fd, inb, IN_BUF);
                pos = 0;
            }
        }
        if (got < 0)
            snprintf(in->note, sizeof in->note, "read error: %s", strerror(errno));
        feed_lines(c, &out, &have, &cap, 1);
    }
done:
    free(out);
    free(inb);
    close(fd);
}

/* ------------------------------------------------------------------ sorting */

/* Stable ordering of ts[0..n) into perm (LSD radix sort, 16-bit digits, on ts - min). */
static int sort_perm(const int64_t *ts, size_t n, uint32_t *perm) {
    int sorted = 1;
    int64_t mn = n ? ts[0] : 0, mx = mn;
    for (size_t i = 0; i < n; i++) {
        perm[i] = (uint32_t)i;
        if (ts[i] < mn)
            mn = ts[i];
        if (ts[i] > mx)
            mx = ts[i];
        if (i && ts[i] < ts[i - 1])
            sorted = 0;
    }
    if (sorted || n < 2)
        return 0;
    uint64_t range = (uint64_t)(mx - mn);
    int passes = 0;
    while (passes < 4 && (range >> (16 * passes)))
        passes++;
    uint64_t *key = malloc(n * sizeof *key), *key2 = malloc(n * sizeof *key2);
    uint32_t *perm2 = malloc(n * sizeof *perm2);
    size_t *cnt = malloc(65536 * sizeof *cnt);
    if (!key || !key2 || !perm2 || !cnt) {
        free(key);
        free(key2);
        free(perm2);
        free(cnt);
        return ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++)
        key[i] = (uint64_t)(ts[i] - mn);
    for (int p = 0; p < passes; p++) {
        int sh = 16 * p;
        memset(cnt, 0, 65536 * sizeof *cnt);
        for (size_t i = 0; i < n; i++)
            cnt[(key[i] >> sh) & 0xFFFF]++;
        size_t sum = 0;
        for (size_t d = 0; d < 65536; d++) {
            size_t t = cnt[d];
            cnt[d] = sum;
            sum += t;
        }
        for (size_t i = 0; i < n; i++) {
            size_t dst = cnt[(key[i] >> sh) & 0xFFFF]++;
            key2[dst] = key[i];
            perm2[dst] = perm[i];
        }
        uint64_t *tk = key;
        key = key2;
        key2 = tk;
        uint32_t *tp = perm;
        memcpy(tp, perm2, n * sizeof *perm2);
    }
    free(key);
    free(key2);
    free(perm2);
    free(cnt);
    return 0;
}

#define PERMUTE(col, T)                                                                            \
    do {                                                                                           \
        T *nc_ = malloc(c->n * sizeof(T));                                                         \
        if (!nc_)                                                                                  \
            goto oom;                                                                              \
        for (size_t i_ = 0; i_ < c->n; i_++)                                                       \
            nc_[i_] = c->col[perm[i_]];                                                            \
        free(c->col);                                                                              \
        c->col = nc_;                                                                              \
    } while (0)

static int chunk_sort(chunk *c) {
    if (c->n < 2)
        return 0;
    uint32_t *perm = malloc(c->n * sizeof *perm);
    if (!perm || sort_perm(c->ts, c->n, perm))
        goto oom;
    int identity = 1;
    for (size_t i = 0; i < c->n && identity; i++)
        identity = perm[i] == i;
    if (!identity) {
        PERMUTE(ts, int64_t);
        PERMUTE(dur, int64_t);
        PERMUTE(offset, int64_t);
        PERMUTE(bytes, int64_t);
        PERMUTE(pair, uint32_t);
        PERMUTE(filekey, uint32_t);
        PERMUTE(proc, uint32_t);
        PERMUTE(tid, uint32_t);
        PERMUTE(flags, uint8_t);
    }
    free(perm);
    return 0;
oom:
    free(perm);
    return ERR_NOMEM;
}

/* ------------------------------------------------------------------ parallel driver */

typedef struct {
    chunk *chunks;
    size_t nfiles;
    size_t next;
    pthread_mutex_t mu;
} pool;

static int rank_from_filename(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    const char *t = strstr(b, "trace-");
    if (!t)
        return -1;
    t += 6;
    char *end;
    long r = strtol(t, &end, 10);
    if (end == t || strncmp(end, "-of-", 4))
        return -1;
    return (int)r;
}

static void *worker(void *arg) {
    pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        size_t i = p->next++;
        pthread_mutex_unlock(&p->mu);
        if (i >= p->nfiles)
            break;
        chunk *c = &p->chunks[i];
        load_file(c);
        c->file_rank = rank_from_filename(c->in->path);
        c->in->events = c->n;
        if (!c->oom && chunk_sort(c))
            c->oom = 1;
    }
    return NULL;
}

static const char *const IGNORED_PATTERNS[] = {
    /* DFAnalyzer's IGNORED_FILE_PATTERNS: system and interpreter files, not the workload's. */
    "/dev/", "/etc/", "/gapps/python", "/lib/python", "/proc/", "/software/", "/sys/", "/usr/lib",
    "/usr/tce/backend", "/usr/tce/packages", "/venv", "__pycache__", "/usr/share/", "/usr/local/lib",
    "/site-packages/", "/dist-packages/", NULL};

static int is_system_path(const char *p) {
    for (const char *const *q = IGNORED_PATTERNS; *q; q++)
        if (strstr(p, *q))
            return 1;
    return 0;
}

typedef struct {
    uint32_t *name, *cat, *proc; /* per pair / per local proc */
    uint8_t *op, *flags;
    uint32_t *file;              /* per key: global file id, or AN_STR_NONE = unresolved yet */
} remap;

/* Min-heap over chunk heads for the k-way merge. */
typedef struct {
    int64_t ts;
    uint32_t c;
} head;

static void heap_down(head *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && (h[l].ts < h[m].ts || (h[l].ts == h[m].ts && h[l].c < h[m].c)))
            m = l;
        if (r < n && (h[r].ts < h[m].ts || (h[r].ts == h[m].ts && h[r].c < h[m].c)))
            m = r;
        if (m == i)
            return;
        head t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

void an_trace_free(an_trace *t) {
    if (!t)
        return;
    free(t->ts);
    free(t->dur);
    free(t->offset);
    free(t->bytes);
    free(t->name);
    free(t->cat);
    free(t->file);
    free(t->proc);
    free(t->tid);
    free(t->op);
    free(t->flags);
    free(t->file_ignored);
    an_strtab_free(&t->names);
    an_strtab_free(&t->cats);
    an_strtab_free(&t->files);
    an_strtab_free(&t->hosts);
    free(t->procs);
    for (size_t i = 0; i < t->ninputs; i++)
        free(t->inputs[i].path);
    free(t->inputs);
    memset(t, 0, sizeof *t);
}

static int merge_chunks(an_trace *t, chunk *ch, size_t nc, const an_read_opts *opts) {
    size_t total = 0;
    for (size_t i = 0; i < nc; i++)
        total += ch[i].n;
    if (an_strtab_init(&t->names) || an_strtab_init(&t->cats) || an_strtab_init(&t->files) ||
        an_strtab_init(&t->hosts))
        return ERR_NOMEM;
    size_t m = total ? total : 1;
    t->ts = malloc(m * sizeof *t->ts);
    t->dur = malloc(m * sizeof *t->dur);
    t->offset = malloc(m * sizeof *t->offset);
    t->bytes = malloc(m * sizeof *t->bytes);
    t->name = malloc(m * sizeof *t->name);
    t->cat = malloc(m * sizeof *t->cat);
    t->file = malloc(m * sizeof *t->file);
    t->proc = malloc(m * sizeof *t->proc);
    t->tid = malloc(m * sizeof *t->tid);
    t->op = malloc(m);
    t->flags = malloc(m);
    remap *rm = calloc(nc ? nc : 1, sizeof *rm);
    head *heap = malloc((nc ? nc : 1) * sizeof *heap);
    size_t *pos = calloc(nc ? nc : 1, sizeof *pos);
    an_strtab prockeys;
    int rc = ERR_NOMEM;
    if (an_strtab_init(&prockeys))
        goto out;
    if (!t->ts || !t->dur || !t->offset || !t->bytes || !t->name || !t->cat || !t->file ||
        !t->proc || !t->tid || !t->op || !t->flags || !rm || !heap || !pos)
        goto out;
    size_t proccap = 16;
    t->procs = malloc(proccap * sizeof *t->procs);
    if (!t->procs)
        goto out;
    /* Per-chunk remap tables: pairs -> global name/cat/op, local procs -> global procs. */
    for (size_t k = 0; k < nc; k++) {
        chunk *c = &ch[k];
        remap *r = &rm[k];
        r->name = malloc((c->npairs + 1) * sizeof *r->name);
        r->cat = malloc((c->npairs + 1) * sizeof *r->cat);
        r->op = malloc(c->npairs + 1);
        r->flags = malloc(c->npairs + 1);
        r->proc = malloc((c->nprocs + 1) * sizeof *r->proc);
        r->file = malloc((c->keys.n + 1) * sizeof *r->file);
        if (!r->name || !r->cat || !r->op || !r->flags || !r->proc || !r->file)
            goto out;
        for (uint32_t i = 0; i < c->npairs; i++) {
            const pairinfo *pi = &c->pairs[i];
            r->name[i] = an_strtab_intern(&t->names, an_strtab_get(&c->names, pi->name),
                                          an_strtab_len(&c->names, pi->name));
            r->cat[i] = an_strtab_intern(&t->cats, an_strtab_get(&c->cats, pi->cat),
                                         an_strtab_len(&c->cats, pi->cat));
            if (r->name[i] == AN_STR_NONE || r->cat[i] == AN_STR_NONE)
                goto out;
            r->op[i] = pi->op;
            r->flags[i] = pi->flags;
        }
        for (uint32_t i = 0; i < c->keys.n; i++)
            r->file[i] = AN_STR_NONE;
        for (uint32_t i = 0; i < c->nprocs; i++) {
            lproc *lp = &c->procs[i];
            uint32_t hk = lp->hostkey < c->nresolved ? c->resolved[lp->hostkey] : lp->hostkey;
            const char *host = an_strtab_get(&c->keys, hk);
            size_t hl = an_strtab_len(&c->keys, hk);
            uint32_t hid = an_strtab_intern(&t->hosts, host, hl);
            char key[600];
            int kl = snprintf(key, sizeof key, "%.*s\x1f%lld", (int)(hl > 500 ? 500 : hl), host,
                              (long long)lp->pid);
            uint32_t before = prockeys.n;
            uint32_t gid = an_strtab_intern(&prockeys, key, (size_t)kl);
            if (hid == AN_STR_NONE || gid == AN_STR_NONE)
                goto out;
            gid -= 1; /* prockeys id 0 is "" */
            if (prockeys.n != before) {
                if (t->nprocs == proccap) {
                    proccap *= 2;
                    an_proc *np = realloc(t->procs, proccap * sizeof *np);
                    if (!np)
                        goto out;
                    t->procs = np;
                }
                t->procs[t->nprocs++] = (an_proc){.host = hid, .pid = lp->pid, .rank = -1};
            }
            int rank = lp->rank >= 0 ? lp->rank : (c->nprocs == 1 ? c->file_rank : -1);
            if (rank >= 0)
                t->procs[gid].rank = rank;
            r->proc[i] = gid;
        }
    }
    /* k-way merge by timestamp; ties keep file order, so the result is deterministic. */
    size_t hn = 0;
    for (size_t k = 0; k < nc; k++)
        if (ch[k].n)
            heap[hn++] = (head){.ts = ch[k].ts[0], .c = (uint32_t)k};
    for (size_t i = hn; i-- > 0;)
        heap_down(heap, hn, i);
    size_t o = 0;
    while (hn) {
        uint32_t k = heap[0].c;
        chunk *c = &ch[k];
        remap *r = &rm[k];
        size_t i = pos[k];
        /* Copy the run of this chunk that stays ahead of the next chunk's head. */
        int64_t limit = INT64_MAX;
        if (hn > 1) {
            limit = heap[1].ts;
            if (hn > 2 && heap[2].ts < limit)
                limit = heap[2].ts;
        }
        do {
            uint32_t pr = c->pair[i];
            uint32_t fk = c->filekey[i];
            uint32_t gf = 0;
            if (fk) {
                gf = r->file[fk];
                if (gf == AN_STR_NONE) {
                    uint32_t rk = fk < c->nresolved ? c->resolved[fk] : fk;
                    gf = an_strtab_intern(&t->files, an_strtab_get(&c->keys, rk),
                                          an_strtab_len(&c->keys, rk));
                    if (gf == AN_STR_NONE)
                        goto out;
                    r->file[fk] = gf;
                }
            }
            t->ts[o] = c->ts[i];
            t->dur[o] = c->dur[i];
            t->offset[o] = c->offset[i];
            t->bytes[o] = c->bytes[i];
            t->name[o] = r->name[pr];
            t->cat[o] = r->cat[pr];
            t->op[o] = r->op[pr];
            t->flags[o] = (uint8_t)(c->flags[i] | r->flags[pr]);
            t->file[o] = gf;
            t->proc[o] = r->proc[c->proc[i]];
            t->tid[o] = c->tid[i];
            o++;
            i++;
        } while (i < c->n && c->ts[i] < limit);
        pos[k] = i;
        if (i < c->n) {
            heap[0].ts = c->ts[i];
        } else {
            heap[0] = heap[--hn];
            chunk_free_columns(c);
        }
        heap_down(heap, hn, 0);
    }
    t->n = o;
    /* System-path flags per file, applied to the events unless asked to keep them. */
    t->file_ignored = calloc(t->files.n + 1, 1);
    if (!t->file_ignored)
        goto out;
    for (uint32_t f = 1; f < t->files.n; f++)
        t->file_ignored[f] = (uint8_t)is_system_path(an_strtab_get(&t->files, f));
    if (!opts->include_system)
        for (size_t i = 0; i < t->n; i++)
            if (t->file[i] && t->file_ignored[t->file[i]])
                t->flags[i] |= AN_F_IGNORED;
    /* Threads per process. */
    an_imap tids;
    if (an_imap_init(&tids, 1024))
        goto out;
    for (size_t i = 0; i < t->n; i++) {
        int ins = 0;
        if (!an_imap_get(&tids, ((uint64_t)t->proc[i] << 32) | t->tid[i], 0, &ins)) {
            an_imap_free(&tids);
            goto out;
        }
        if (ins)
            t->procs[t->proc[i]].nthreads++;
    }
    an_imap_free(&tids);
    /* Clock skew: the spread of each host's first timestamp (DFAnalyzer warns above 30 s). */
    if (t->hosts.n > 2) {
        size_t nh = t->hosts.n;
        int64_t *first = malloc(nh * sizeof *first);
        if (!first)
            goto out;
        for (size_t h = 0; h < nh; h++)
            first[h] = INT64_MAX;
        for (size_t i = 0; i < t->n; i++) {
            uint32_t h = t->procs[t->proc[i]].host;
            if (t->ts[i] < first[h])
                first[h] = t->ts[i];
        }
        double s = 0, s2 = 0;
        int k = 0;
        for (size_t h = 0; h < nh; h++)
            if (first[h] != INT64_MAX) {
                double v = (double)(first[h] - t->ts[0]) / 1e6;
                s += v;
                s2 += v * v;
                k++;
            }
        free(first);
        if (k >= 2) {
            double mean = s / k, var = s2 / k - mean * mean;
            t->host_start_stddev_s = var > 0 ? sqrt(var) : 0;
            t->clock_skew = t->host_start_stddev_s > 30.0;
        }
    }
    rc = 0;
out:
    for (size_t k = 0; k < nc; k++) {
        free(rm ? rm[k].name : NULL);
        free(rm ? rm[k].cat : NULL);
        free(rm ? rm[k].op : NULL);
        free(rm ? rm[k].flags : NULL);
        free(rm ? rm[k].proc : NULL);
        free(rm ? rm[k].file : NULL);
    }
    free(rm);
    free(heap);
    free(pos);
    an_strtab_free(&prockeys);
    if (rc)
        err_set(ERR_NOMEM, "analyze: out of memory merging %zu events", total);
    return rc;
}

int an_trace_read(an_trace *t, char *const *files, size_t nfiles, const an_read_opts *opts) {
    memset(t, 0, sizeof *t);
    double t0 = 0;
    {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t0 = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    }
    t->inputs = calloc(nfiles ? nfiles : 1, sizeof *t->inputs);
    chunk *ch = calloc(nfiles ? nfiles : 1, sizeof *ch);
    if (!t->inputs || !ch) {
        free(ch);
        return err_set(ERR_NOMEM, "analyze: out of memory");
    }
    t->ninputs = nfiles;
    int rc = 0;
    for (size_t i = 0; i < nfiles; i++) {
        t->inputs[i].path = strdup(files[i]);
        if (!t->inputs[i].path || chunk_init(&ch[i], &t->inputs[i])) {
            rc = err_set(ERR_NOMEM, "analyze: out of memory");
            for (size_t k = 0; k <= i; k++)
                chunk_free(&ch[k]);
            free(ch);
            return rc;
        }
    }
    int nth = opts && opts->threads > 0 ? opts->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nth < 1)
        nth = 1;
    if ((size_t)nth > nfiles)
        nth = (int)nfiles;
    pool p = {.chunks = ch, .nfiles = nfiles, .next = 0};
    pthread_mutex_init(&p.mu, NULL);
    pthread_t *th = calloc((size_t)(nth > 0 ? nth : 1), sizeof *th);
    int started = 0;
    for (int i = 0; th && i < nth - 1; i++)
        if (pthread_create(&th[i], NULL, worker, &p) == 0)
            started++;
    worker(&p); /* the calling thread works too */
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);
    pthread_mutex_destroy(&p.mu);
    int oom = 0;
    for (size_t i = 0; i < nfiles; i++) {
        oom |= ch[i].oom;
        t->total_lines += t->inputs[i].lines;
        t->total_malformed += t->inputs[i].malformed;
        t->metadata_events += ch[i].metadata;
        if (t->inputs[i].malformed && !t->inputs[i].note[0])
            snprintf(t->inputs[i].note, sizeof t->inputs[i].note,
                     "%llu malformed line(s) skipped, first at line %llu",
                     (unsigned long long)t->inputs[i].malformed,
                     (unsigned long long)t->inputs[i].first_bad_line);
    }
    static const an_read_opts dflt = {0};
    if (oom)
        rc = err_set(ERR_NOMEM, "analyze: out of memory reading the traces");
    else
        rc = merge_chunks(t, ch, nfiles, opts ? opts : &dflt);
    for (size_t i = 0; i < nfiles; i++)
        chunk_free(&ch[i]);
    free(ch);
    if (!rc && t->n == 0) {
        char names[512] = "";
        size_t off = 0;
        for (size_t i = 0; i < nfiles && off < sizeof names - 80; i++)
            off += (size_t)snprintf(names + off, sizeof names - off, "%s%s (%s)", i ? "; " : "",
                                    t->inputs[i].path,
                                    t->inputs[i].note[0] ? t->inputs[i].note : "no events");
        rc = err_set(ERR_FORMAT,
                     "analyze: no trace event could be read from %zu file(s): %s; expected "
                     "dftracer JSON lines ({\"name\":..,\"ts\":..,\"ph\":\"X\"})",
                     nfiles, names);
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t->load_seconds = (double)ts.tv_sec + ts.tv_nsec * 1e-9 - t0;
    return rc;
}

void an_proc_label(const an_trace *t, uint32_t proc, char *buf, size_t cap) {
    const an_proc *p = &t->procs[proc];
    if (p->rank >= 0)
        snprintf(buf, cap, "rank %d", p->rank);
    else {
        const char *h = an_strtab_get(&t->hosts, p->host);
        snprintf(buf, cap, "%s%s%lld", h, h[0] ? ":" : "pid ", (long long)p->pid);
    }
}
