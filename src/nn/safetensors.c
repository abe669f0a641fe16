/* safetensors: a minimal, validating reader and an atomic writer (see safetensors.h). The JSON
 * parser accepts exactly the subset safetensors uses (objects, strings, non-negative integer
 * arrays) and rejects everything else with the byte offset of the fault. */
#include "nn/safetensors.h"

#include "core/err.h"
#include "core/fsutil.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- writer ----------------------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) {
    sb_put(b, s, strlen(s));
}

static void sb_json_string(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char esc[8];
        if (*c == '"' || *c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*c;
            sb_put(b, esc, 2);
        } else if (*c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *c);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

int nn_st_write(const char *path, const nn_st_out *t, int nt, const char *const *meta, int nmeta) {
    sbuf h = {0};
    sb_str(&h, "{");
    int first = 1;
    if (nmeta > 0) {
        sb_str(&h, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            if (i)
                sb_str(&h, ",");
            sb_json_string(&h, meta[2 * i]);
            sb_str(&h, ":");
            sb_json_string(&h, meta[2 * i + 1]);
        }
        sb_str(&h, "}");
        first = 0;
    }
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        size_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++)
            numel *= (size_t)t[i].shape[d];
        char tmp[64];
        if (!first)
            sb_str(&h, ",");
        first = 0;
        sb_json_string(&h, t[i].name);
        sb_str(&h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t[i].ndim; d++) {
            snprintf(tmp, sizeof tmp, "%s%" PRId64, d ? "," : "", t[i].shape[d]);
            sb_str(&h, tmp);
        }
        snprintf(tmp, sizeof tmp, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off,
                 off + numel * 4);
        sb_str(&h, tmp);
        off += numel * 4;
    }
    sb_str(&h, "}");
    while (!h.oom && h.n % 8)
        sb_str(&h, " ");
    if (h.oom) {
        free(h.p);
        return err_set(ERR_NOMEM, "%s: cannot build the safetensors header", path);
    }
    fs_atomic a;
    int rc = fs_atomic_open(&a, path);
    if (rc) {
        free(h.p);
        return rc;
    }
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)h.n >> (8 * i));
    int ok = fwrite(len, 1, 8, a.fp) == 8 && fwrite(h.p, 1, h.n, a.fp) == h.n;
    free(h.p);
    for (int i = 0; ok && i < nt; i++) {
        size_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++)
            numel *= (size_t)t[i].shape[d];
        /* float32 is written in host order: scaffold targets little-endian hosts only. */
        ok = fwrite(t[i].data, sizeof(float), numel, a.fp) == numel;
    }
    if (!ok) {
        int e = errno;
        fs_atomic_abort(&a);
        return err_set(ERR_IO, "%s: write failed (%s); check free space", path, strerror(e));
    }
    return fs_atomic_commit(&a, 1);
}

/* ---- JSON subset parser ----------------------------------------------------------------- */

typedef struct jp {
    const char *s, *end, *path;
    const char *p;
} jp;

static int jp_fail(jp *j, const char *what) {
    return err_set(ERR_FORMAT, "%s: safetensors header is not valid (%s at byte %ld of the JSON "
                               "header); the file is corrupt or not a safetensors file",
                   j->path, what, (long)(j->p - j->s));
}

static void jp_ws(jp *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int jp_expect(jp *j, char c) {
    jp_ws(j);
    if (j->p >= j->end || *j->p != c) {
        char what[32];
        snprintf(what, sizeof what, "expected '%c'", c);
        return jp_fail(j, what);
    }
    j->p++;
    return 0;
}

static int jp_peek(jp *j) {
    jp_ws(j);
    return j->p < j->end ? *j->p : -1;
}

static void put_utf8(char **o, unsigned cp) {
    char *q = *o;
    if (cp < 0x80) {
        *q++ = (char)cp;
    } else if (cp < 0x800) {
        *q++ = (char)(0xC0 | (cp >> 6));
        *q++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *q++ = (char)(0xE0 | (cp >> 12));
        *q++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *q++ = (char)(0x80 | (cp & 0x3F));
    }
    *o = q;
}

/* Parses a JSON string into a malloc'ed C string. */
static int jp_string(jp *j, char **out) {
    int rc = jp_expect(j, '"');
    if (rc)
        return rc;
    const char *start = j->p;
    size_t cap = 1;
    while (j->p < j->end && *j->p != '"') {
        if (*j->p == '\\')
            j->p++;
        j->p++;
        cap += 3;
    }
    if (j->p >= j->end)
        return jp_fail(j, "unterminated string");
    char *s = malloc(cap + 1), *o = s;
    if (!s)
        return err_set(ERR_NOMEM, "%s: out of memory reading the header", j->path);
    for (const char *c = start; c < j->p; c++) {
        if (*c != '\\') {
            if ((unsigned char)*c < 0x20) {
                free(s);
                return jp_fail(j, "control character in string");
            }
            *o++ = *c;
            continue;
        }
        c++;
        switch (*c) {
        case '"':
        case '\\':
        case '/':
            *o++ = *c;
            break;
        case 'b':
            *o++ = '\b';
            break;
        case 'f':
            *o++ = '\f';
            break;
        case 'n':
            *o++ = '\n';
            break;
        case 'r':
            *o++ = '\r';
            break;
        case 't':
            *o++ = '\t';
            break;
        case 'u': {
            unsigned cp = 0;
            for (int k = 1; k <= 4; k++) {
                char h = (c + k < j->p) ? c[k] : 0;
                int v = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
                if (v < 0) {
                    free(s);
                    return jp_fail(j, "bad \\u escape");
                }
                cp = cp * 16 + (unsigned)v;
            }
            c += 4;
            put_utf8(&o, cp);
            break;
        }
        default:
            free(s);
            return jp_fail(j, "bad escape");
        }
    }
    *o = 0;
    j->p++; /* closing quote */
    *out = s;
    return 0;
}

static int jp_uint(jp *j, uint64_t *v) {
    jp_ws(j);
    if (j->p >= j->end || *j->p < '0' || *j->p > '9')
        return jp_fail(j, "expected a non-negative integer");
    uint64_t x = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (x > (UINT64_MAX - 9) / 10)
            return jp_fail(j, "integer too large");
        x = x * 10 + (uint64_t)(*j->p - '0');
        j->p++;
    }
    *v = x;
    return 0;
}

/* [u, u, ...] into v[max]; *n = count. */
static int jp_uint_array(jp *j, uint64_t *v, int max, int *n) {
    int rc = jp_expect(j, '[');
    if (rc)
        return rc;
    *n = 0;
    if (jp_peek(j) == ']') {
        j->p++;
        return 0;
    }
    for (;;) {
        if (*n >= max)
            return jp_fail(j, "too many array elements");
        if ((rc = jp_uint(j, &v[(*n)++])))
            return rc;
        int c = jp_peek(j);
        j->p++;
        if (c == ']')
            return 0;
        if (c != ',')
            return jp_fail(j, "expected ',' or ']'");
    }
}

static int parse_tensor(jp *j, nn_st_entry *e) {
    int rc = jp_expect(j, '{');
    if (rc)
        return rc;
    int have_dtype = 0, have_shape = 0, have_off = 0;
    if (jp_peek(j) == '}')
        return jp_fail(j, "empty tensor entry");
    for (;;) {
        char *key = NULL;
        if ((rc = jp_string(j, &key)) || (rc = jp_expect(j, ':'))) {
            free(key);
            return rc;
        }
        if (!strcmp(key, "dtype")) {
            char *v = NULL;
            rc = jp_string(j, &v);
            if (!rc && strlen(v) >= sizeof e->dtype)
                rc = jp_fail(j, "unknown dtype");
            if (!rc)
                snprintf(e->dtype, sizeof e->dtype, "%s", v);
            free(v);
            have_dtype = 1;
        } else if (!strcmp(key, "shape")) {
            uint64_t v[NN_ST_MAX_DIMS];
            rc = jp_uint_array(j, v, NN_ST_MAX_DIMS, &e->ndim);
            for (int d = 0; !rc && d < e->ndim; d++) {
                if (v[d] > (uint64_t)1 << 40)
                    rc = jp_fail(j, "dimension too large");
                e->shape[d] = (int64_t)v[d];
            }
            have_shape = 1;
        } else if (!strcmp(key, "data_offsets")) {
            uint64_t v[2];
            int n = 0;
            rc = jp_uint_array(j, v, 2, &n);
            if (!rc && n != 2)
                rc = jp_fail(j, "data_offsets needs 2 values");
            e->begin = v[0];
            e->end = v[1];
            have_off = 1;
        } else {
            rc = jp_fail(j, "unknown key in tensor entry");
        }
        free(key);
        if (rc)
            return rc;
        int c = jp_peek(j);
        j->p++;
        if (c == '}')
            break;
        if (c != ',')
            return jp_fail(j, "expected ',' or '}'");
    }
    if (!have_dtype || !have_shape || !have_off)
        return jp_fail(j, "tensor entry lacks dtype, shape or data_offsets");
    return 0;
}

static int parse_meta(jp *j, nn_st_file *st) {
    int rc = jp_expect(j, '{');
    if (rc)
        return rc;
    if (jp_peek(j) == '}') {
        j->p++;
        return 0;
    }
    for (;;) {
        char *k = NULL, *v = NULL;
        if ((rc = jp_string(j, &k)) || (rc = jp_expect(j, ':')) || (rc = jp_string(j, &v))) {
            free(k);
            free(v);
            return rc;
        }
        char **m = realloc(st->meta, sizeof(char *) * 2 * (st->nmeta + 1));
        if (!m) {
            free(k);
            free(v);
            return err_set(ERR_NOMEM, "%s: out of memory", j->path);
        }
        st->meta = m;
        m[2 * st->nmeta] = k;
        m[2 * st->nmeta + 1] = v;
        st->nmeta++;
        int c = jp_peek(j);
        j->p++;
        if (c == '}')
            return 0;
        if (c != ',')
            return jp_fail(j, "expected ',' or '}' in __metadata__");
    }
}

static size_t dtype_size(const char *dt) {
    static const struct {
        const char *n;
        size_t s;
    } T[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4},
             {"I16", 2}, {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"U16", 2}, {"U32", 4},
             {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (!strcmp(T[i].n, dt))
            return T[i].s;
    return 0;
}

size_t nn_st_numel(const nn_st_entry *e) {
    size_t n = 1;
    for (int d = 0; d < e->ndim; d++)
        n *= (size_t)e->shape[d];
    return n;
}

/* The header's JSON object: every tensor's entry (name, dtype, shape, byte range) into st->t, and
 * the metadata. */
static int parse_header(jp *j, nn_st_file *st) {
    int rc;
    if ((rc = jp_expect(j, '{')))
        return rc;
    if (jp_peek(j) == '}') {
        j->p++;
    } else {
        for (;;) {
            char *key = NULL;
            if ((rc = jp_string(j, &key)) || (rc = jp_expect(j, ':'))) {
                free(key);
                return rc;
            }
            if (!strcmp(key, "__metadata__")) {
                free(key);
                if ((rc = parse_meta(j, st)))
                    return rc;
            } else {
                nn_st_entry *t = realloc(st->t, sizeof *t * (st->nt + 1));
                if (!t) {
                    free(key);
                    return err_set(ERR_NOMEM, "%s: out of memory", j->path);
                }
                st->t = t;
                memset(&t[st->nt], 0, sizeof t[0]);
                t[st->nt].name = key;
                st->nt++;
                if ((rc = parse_tensor(j, &t[st->nt - 1])))
                    return rc;
            }
            int c = jp_peek(j);
            j->p++;
            if (c == '}')
                break;
            if (c != ',') {
                j->p--;
                return jp_fail(j, "expected ',' or '}'");
            }
        }
    }
    jp_ws(j);
    if (j->p != j->end)
        return jp_fail(j, "trailing bytes after the JSON object");
    return 0;
}

/* Every entry's dtype known, its byte range inside the data (buf bytes) and matching its shape,
 * and no name twice. */
static int check_entries(const nn_st_file *st, const char *path, uint64_t buf) {
    for (int i = 0; i < st->nt; i++) {
        const nn_st_entry *e = &st->t[i];
        size_t is = dtype_size(e->dtype);
        if (!is)
            return err_set(ERR_FORMAT, "%s: tensor '%s' has unknown dtype '%s'", path, e->name,
                           e->dtype);
        /* numel * itemsize without overflow: it must not exceed the data buffer anyway */
        uint64_t bytes = is;
        int too_big = 0;
        for (int d = 0; d < e->ndim; d++) {
            const uint64_t dim = (uint64_t)e->shape[d];
            if (dim && bytes > buf / dim)
                too_big = 1;
            bytes = too_big ? 0 : bytes * dim;
        }
        if (too_big || e->end < e->begin || e->end > buf || e->end - e->begin != bytes)
            return err_set(ERR_FORMAT,
                           "%s: tensor '%s' byte range [%" PRIu64 ", %" PRIu64
                           ") does not match its shape and dtype or lies past the end of the file "
                           "(%" PRIu64 " data bytes); the file is truncated or corrupt",
                           path, e->name, e->begin, e->end, buf);
        for (int k = 0; k < i; k++)
            if (!strcmp(st->t[k].name, e->name))
                return err_set(ERR_FORMAT, "%s: tensor '%s' appears twice", path, e->name);
    }
    return 0;
}

int nn_st_open(nn_st_file *st, const char *path) {
    memset(st, 0, sizeof *st);
    st->path = strdup(path);
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        nn_st_close(st);
        return err_set(ERR_IO, "%s: cannot open checkpoint (%s)", path, strerror(e));
    }
    uint8_t len[8];
    char *hdr = NULL;
    int rc = 0;
    fseeko(f, 0, SEEK_END);
    const uint64_t fsize = (uint64_t)ftello(f);
    fseeko(f, 0, SEEK_SET);
    if (fread(len, 1, 8, f) != 8) {
        rc = err_set(ERR_FORMAT, "%s: too short for a safetensors file (%" PRIu64 " bytes)", path,
                     fsize);
        goto out;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | len[i];
    if (n < 2 || n > NN_ST_MAX_HEADER || n > fsize - 8) {
        rc = err_set(ERR_FORMAT,
                     "%s: safetensors header length %" PRIu64 " is impossible for a %" PRIu64
                     "-byte file; the file is truncated or not a safetensors file",
                     path, n, fsize);
        goto out;
    }
    hdr = malloc(n + 1);
    if (!hdr) {
        rc = err_set(ERR_NOMEM, "%s: cannot allocate the %" PRIu64 "-byte header", path, n);
        goto out;
    }
    if (fread(hdr, 1, n, f) != n) {
        rc = err_set(ERR_IO, "%s: cannot read the header", path);
        goto out;
    }
    hdr[n] = 0;
    st->data_start = 8 + n;
    jp j = {.s = hdr, .end = hdr + n, .path = path, .p = hdr};
    if ((rc = parse_header(&j, st)))
        goto out;
    rc = check_entries(st, path, fsize - st->data_start);
out:
    free(hdr);
    fclose(f);
    if (rc)
        nn_st_close(st);
    return rc;
}

void nn_st_close(nn_st_file *st) {
    if (!st)
        return;
    for (int i = 0; i < st->nt; i++)
        free(st->t[i].name);
    free(st->t);
    for (int i = 0; i < 2 * st->nmeta; i++)
        free(st->meta[i]);
    free(st->meta);
    free(st->path);
    memset(st, 0, sizeof *st);
}

const nn_st_entry *nn_st_find(const nn_st_file *st, const char *name) {
    for (int i = 0; i < st->nt; i++)
        if (!strcmp(st->t[i].name, name))
            return &st->t[i];
    return NULL;
}

const char *nn_st_meta(const nn_st_file *st, const char *key) {
    for (int i = 0; i < st->nmeta; i++)
        if (!strcmp(st->meta[2 * i], key))
            return st->meta[2 * i + 1];
    return NULL;
}

static float half_to_float(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1F, m = h & 0x3FF, bits;
    if (e == 0) {
        if (m == 0) {
            bits = s;
        } else { /* subnormal */
            e = 127 - 15 + 1;
            while (!(m & 0x400)) {
                m <<= 1;
                e--;
            }
            m &= 0x3FF;
            bits = s | (e << 23) | (m << 13);
        }
    } else if (e == 31) {
        bits = s | 0x7F800000u | (m << 13);
    } else {
        bits = s | ((e + 127 - 15) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

int nn_st_read_f32(const nn_st_file *st, const nn_st_entry *e, float *dst) {
    const size_t n = nn_st_numel(e);
    const size_t is = dtype_size(e->dtype);
    if (strcmp(e->dtype, "F32") && strcmp(e->dtype, "F16") && strcmp(e->dtype, "BF16") &&
        strcmp(e->dtype, "F64"))
        return err_set(ERR_FORMAT, "%s: tensor '%s' has dtype %s; a float tensor (F32, F16, "
                                   "BF16 or F64) is needed",
                       st->path, e->name, e->dtype);
    FILE *f = fopen(st->path, "rb");
    if (!f)
        return err_set(ERR_IO, "%s: cannot reopen (%s)", st->path, strerror(errno));
    int rc = 0;
    if (fseeko(f, (off_t)(st->data_start + e->begin), SEEK_SET)) {
        rc = err_set(ERR_IO, "%s: seek failed", st->path);
    } else if (is == 4) {
        if (fread(dst, 4, n, f) != n)
            rc = err_set(ERR_IO, "%s: tensor '%s' is truncated", st->path, e->name);
    } else {
        /* Convert through a small bounce buffer. */
        unsigned char buf[8 * 4096];
        size_t done = 0;
        while (!rc && done < n) {
            size_t k = n - done < 4096 ? n - done : 4096;
            if (fread(buf, is, k, f) != k) {
                rc = err_set(ERR_IO, "%s: tensor '%s' is truncated", st->path, e->name);
                break;
            }
            for (size_t i = 0; i < k; i++) {
                if (is == 8) {
                    double d;
                    memcpy(&d, buf + 8 * i, 8);
                    dst[done + i] = (float)d;
                } else {
                    uint16_t h;
                    memcpy(&h, buf + 2 * i, 2);
                    if (!strcmp(e->dtype, "BF16")) {
                        uint32_t b = (uint32_t)h << 16;
                        memcpy(&dst[done + i], &b, 4);
                    } else {
                        dst[done + i] = half_to_float(h);
                    }
                }
            }
            done += k;
        }
    }
    fclose(f);
    return rc;
}
