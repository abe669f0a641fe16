/* npy: .npy header parsing/validation and array I/O (see npy.h). */
#include "core/npy.h"

#include "core/err.h"
#include "core/fsutil.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct {
    npy_dtype dt;
    const char *descr;
    size_t size;
} npy_types[] = {
    {NPY_F32, "<f4", 4}, {NPY_F64, "<f8", 8}, {NPY_U8, "|u1", 1},  {NPY_I8, "|i1", 1},
    {NPY_U16, "<u2", 2}, {NPY_I16, "<i2", 2}, {NPY_U32, "<u4", 4}, {NPY_I32, "<i4", 4},
    {NPY_U64, "<u8", 8}, {NPY_I64, "<i8", 8}, {NPY_BOOL, "|b1", 1},
};
#define NPY_NTYPES (sizeof npy_types / sizeof npy_types[0])

size_t npy_itemsize(npy_dtype dt) {
    for (size_t i = 0; i < NPY_NTYPES; i++)
        if (npy_types[i].dt == dt)
            return npy_types[i].size;
    return 0;
}

const char *npy_descr(npy_dtype dt) {
    for (size_t i = 0; i < NPY_NTYPES; i++)
        if (npy_types[i].dt == dt)
            return npy_types[i].descr;
    return "?";
}

size_t npy_count(const npy_header *h) {
    size_t n = 1;
    for (int i = 0; i < h->ndim; i++)
        n *= (size_t)h->shape[i];
    return n;
}

const char *npy_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "(");
    for (int i = 0; i < ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (o < n)
        o += (size_t)snprintf(buf + o, n - o, ndim == 1 ? ",)" : ")");
    return buf;
}

static npy_dtype descr_to_dtype(const char *d) {
    /* Accept '=' and, for one-byte types, '<' as the native little-endian spelling too. */
    char norm[8];
    size_t n = strlen(d);
    if (n < 2 || n > 6)
        return NPY_INVALID;
    memcpy(norm, d, n + 1);
    if (norm[0] == '=')
        norm[0] = '<';
    for (size_t i = 0; i < NPY_NTYPES; i++) {
        const char *t = npy_types[i].descr;
        if (!strcmp(norm, t))
            return npy_types[i].dt;
        if (npy_types[i].size == 1 && (norm[0] == '<' || norm[0] == '>') && !strcmp(norm + 1, t + 1))
            return npy_types[i].dt;
    }
    return NPY_INVALID;
}

/* Minimal parser for the header dict: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } */
typedef struct {
    const char *p, *end;
} hp;

static void hp_ws(hp *s) {
    while (s->p < s->end && isspace((unsigned char)*s->p))
        s->p++;
}

static int hp_str(hp *s, char *out, size_t n) {
    hp_ws(s);
    if (s->p >= s->end || (*s->p != '\'' && *s->p != '"'))
        return -1;
    char q = *s->p++;
    size_t o = 0;
    while (s->p < s->end && *s->p != q) {
        if (o + 1 >= n)
            return -1;
        out[o++] = *s->p++;
    }
    if (s->p >= s->end)
        return -1;
    s->p++;
    out[o] = '\0';
    return 0;
}

static int hp_char(hp *s, char c) {
    hp_ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return 0;
    }
    return -1;
}

static int hp_word(hp *s, const char *w) {
    hp_ws(s);
    size_t n = strlen(w);
    if ((size_t)(s->end - s->p) >= n && !memcmp(s->p, w, n)) {
        s->p += n;
        return 0;
    }
    return -1;
}

static int parse_dict(const char *txt, size_t len, npy_header *h, char *why, size_t whyn) {
    hp s = {txt, txt + len};
    int have_descr = 0, have_order = 0, have_shape = 0;
    if (hp_char(&s, '{')) {
        snprintf(why, whyn, "header does not start with '{'");
        return -1;
    }
    for (;;) {
        char key[32], val[32];
        if (hp_char(&s, '}') == 0)
            break;
        if (hp_str(&s, key, sizeof key) || hp_char(&s, ':')) {
            snprintf(why, whyn, "malformed header dictionary");
            return -1;
        }
        if (!strcmp(key, "descr")) {
            if (hp_str(&s, val, sizeof val)) {
                snprintf(why, whyn, "'descr' is not a simple dtype string (structured arrays are "
                                    "not supported)");
                return -1;
            }
            h->dtype = descr_to_dtype(val);
            if (h->dtype == NPY_INVALID) {
                snprintf(why, whyn, "unsupported dtype '%s' (need little-endian int/uint/float)",
                         val);
                return -1;
            }
            have_descr = 1;
        } else if (!strcmp(key, "fortran_order")) {
            if (hp_word(&s, "False") == 0) {
                have_order = 1;
            } else if (hp_word(&s, "True") == 0) {
                snprintf(why, whyn, "Fortran-ordered arrays are not supported (save with "
                                    "np.ascontiguousarray)");
                return -1;
            } else {
                snprintf(why, whyn, "malformed 'fortran_order'");
                return -1;
            }
        } else if (!strcmp(key, "shape")) {
            if (hp_char(&s, '(')) {
                snprintf(why, whyn, "malformed 'shape'");
                return -1;
            }
            h->ndim = 0;
            for (;;) {
                hp_ws(&s);
                if (hp_char(&s, ')') == 0)
                    break;
                if (s.p >= s.end || !isdigit((unsigned char)*s.p)) {
                    snprintf(why, whyn, "malformed 'shape'");
                    return -1;
                }
                char *e;
                errno = 0;
                long long v = strtoll(s.p, &e, 10);
                if (errno || v < 0 || e > s.end) {
                    snprintf(why, whyn, "bad dimension in 'shape'");
                    return -1;
                }
                s.p = e;
                if (h->ndim >= NPY_MAX_DIMS) {
                    snprintf(why, whyn, "more than %d dimensions", NPY_MAX_DIMS);
                    return -1;
                }
                h->shape[h->ndim++] = v;
                hp_ws(&s);
                if (hp_char(&s, ',') == 0)
                    continue;
                if (hp_char(&s, ')') == 0)
                    break;
                snprintf(why, whyn, "malformed 'shape'");
                return -1;
            }
            have_shape = 1;
        } else {
            snprintf(why, whyn, "unknown header key '%s'", key);
            return -1;
        }
        if (hp_char(&s, ',') == 0)
            continue;
        if (hp_char(&s, '}') == 0)
            break;
        snprintf(why, whyn, "malformed header dictionary");
        return -1;
    }
    if (!have_descr || !have_order || !have_shape) {
        snprintf(why, whyn, "header lacks %s", !have_descr ? "'descr'" : !have_order ? "'fortran_order'" : "'shape'");
        return -1;
    }
    return 0;
}

int npy_read_header(FILE *f, const char *path, npy_header *h) {
    unsigned char pre[12];
    memset(h, 0, sizeof *h);
    if (fseek(f, 0, SEEK_SET) != 0 || fread(pre, 1, 10, f) != 10)
        return err_set(ERR_FORMAT, "%s: truncated .npy file (no header)", path);
    if (memcmp(pre, "\x93NUMPY", 6) != 0)
        return err_set(ERR_FORMAT, "%s: not a .npy file (bad magic)", path);
    unsigned major = pre[6];
    size_t hlen, pos;
    if (major == 1) {
        hlen = (size_t)pre[8] | ((size_t)pre[9] << 8);
        pos = 10;
    } else if (major == 2 || major == 3) {
        if (fread(pre + 10, 1, 2, f) != 2)
            return err_set(ERR_FORMAT, "%s: truncated .npy header", path);
        hlen = (size_t)pre[8] | ((size_t)pre[9] << 8) | ((size_t)pre[10] << 16) |
               ((size_t)pre[11] << 24);
        pos = 12;
    } else {
        return err_set(ERR_FORMAT, "%s: unsupported .npy version %u.%u", path, major, pre[7]);
    }
    if (hlen > (1u << 24))
        return err_set(ERR_FORMAT, "%s: implausible .npy header length %zu", path, hlen);
    char *txt = malloc(hlen + 1);
    if (!txt)
        return err_set(ERR_NOMEM, "%s: out of memory", path);
    if (fread(txt, 1, hlen, f) != hlen) {
        free(txt);
        return err_set(ERR_FORMAT, "%s: truncated .npy header", path);
    }
    txt[hlen] = '\0';
    char why[160];
    int bad = parse_dict(txt, hlen, h, why, sizeof why);
    free(txt);
    if (bad)
        return err_set(ERR_FORMAT, "%s: bad .npy header: %s", path, why);
    h->data_offset = pos + hlen;
    size_t count = 1;
    for (int i = 0; i < h->ndim; i++) {
        if (h->shape[i] != 0 && count > SIZE_MAX / 16 / (size_t)h->shape[i])
            return err_set(ERR_FORMAT, "%s: .npy shape too large", path);
        count *= (size_t)h->shape[i];
    }
    h->nbytes = count * npy_itemsize(h->dtype);
    struct stat st;
    if (fstat(fileno(f), &st) != 0)
        return err_set(ERR_IO, "%s: %s", path, strerror(errno));
    size_t want = h->data_offset + h->nbytes;
    if ((size_t)st.st_size < want)
        return err_set(ERR_FORMAT,
                       "%s: truncated .npy file: header promises %zu data bytes, file has %lld",
                       path, h->nbytes, (long long)st.st_size - (long long)h->data_offset);
    if ((size_t)st.st_size > want)
        return err_set(ERR_FORMAT, "%s: .npy file has %lld trailing bytes after the array", path,
                       (long long)((size_t)st.st_size - want));
    if (fseek(f, (long)h->data_offset, SEEK_SET) != 0)
        return err_set(ERR_IO, "%s: seek failed", path);
    return 0;
}

int npy_load(const char *path, npy_header *h, void **data) {
    FILE *f = fs_open_read(path);
    if (!f)
        return err_set(ERR_IO, "cannot open %s: %s", path, strerror(errno));
    int rc = npy_read_header(f, path, h);
    if (rc) {
        fclose(f);
        return rc;
    }
    void *buf = malloc(h->nbytes ? h->nbytes : 1);
    if (!buf) {
        fclose(f);
        return err_set(ERR_NOMEM, "%s: out of memory for %zu bytes", path, h->nbytes);
    }
    if (fread(buf, 1, h->nbytes, f) != h->nbytes) {
        free(buf);
        fclose(f);
        return err_set(ERR_IO, "%s: read failed", path);
    }
    fclose(f);
    *data = buf;
    return 0;
}

int npy_expect(const char *path, const npy_header *h, npy_dtype dtype, int ndim,
               const int64_t *shape) {
    int same = h->dtype == dtype && h->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = h->shape[i] == shape[i];
    if (same)
        return 0;
    char a[128], b[128];
    return err_set(ERR_FORMAT, "%s: expected %s %s, found %s %s", path, npy_descr(dtype),
                   npy_shape_str(ndim, shape, a, sizeof a), npy_descr(h->dtype),
                   npy_shape_str(h->ndim, h->shape, b, sizeof b));
}

int npy_read_into(const char *path, npy_dtype dtype, int ndim, const int64_t *shape, void *buf) {
    FILE *f = fs_open_read(path);
    if (!f)
        return err_set(ERR_IO, "cannot open %s: %s", path, strerror(errno));
    npy_header h;
    int rc = npy_read_header(f, path, &h);
    if (!rc)
        rc = npy_expect(path, &h, dtype, ndim, shape);
    if (rc) {
        fclose(f);
        return rc;
    }
    if (fread(buf, 1, h.nbytes, f) != h.nbytes) {
        fclose(f);
        return err_set(ERR_IO, "%s: read failed", path);
    }
    fclose(f);
    return 0;
}

int npy_write_header(FILE *f, npy_dtype dtype, int ndim, const int64_t *shape) {
    /* Built in memory and written with one call, so an unbuffered stream makes one write(2). */
    char buf[640], sh[256];
    int n = snprintf(buf + 10, sizeof buf - 10,
                     "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", npy_descr(dtype),
                     npy_shape_str(ndim, shape, sh, sizeof sh));
    /* Pad with spaces so that magic(6)+version(2)+len(2)+dict+'\n' is a multiple of 64. */
    size_t total = 10 + (size_t)n + 1;
    size_t pad = (64 - total % 64) % 64;
    size_t hlen = (size_t)n + pad + 1;
    const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                   (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
    memcpy(buf, pre, sizeof pre);
    memset(buf + 10 + n, ' ', pad);
    buf[10 + hlen - 1] = '\n';
    if (fwrite(buf, 1, 10 + hlen, f) != 10 + hlen)
        return err_set(ERR_IO, "write failed");
    return 0;
}

int npy_save(const char *path, npy_dtype dtype, int ndim, const int64_t *shape, const void *data) {
    if (npy_itemsize(dtype) == 0 || ndim < 0 || ndim > NPY_MAX_DIMS)
        return err_set(ERR_INTERNAL, "%s: bad dtype or rank", path);
    size_t count = 1;
    for (int i = 0; i < ndim; i++)
        count *= (size_t)shape[i];
    size_t nbytes = count * npy_itemsize(dtype);
    fs_atomic a;
    int rc = fs_atomic_open(&a, path);
    if (rc)
        return rc;
    /* Two large writes: no stdio buffer, so the array is not copied through one. */
    setvbuf(a.fp, NULL, _IONBF, 0);
    if (npy_write_header(a.fp, dtype, ndim, shape) != 0 ||
        (nbytes && fwrite(data, 1, nbytes, a.fp) != nbytes)) {
        int e = errno;
        fs_atomic_abort(&a);
        return err_set(ERR_IO, "cannot write %s: %s", path, strerror(e));
    }
    return fs_atomic_commit(&a, 0);
}
