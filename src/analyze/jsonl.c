/* jsonl: the JSON-lines scanner of the trace reader. A hand-written scanner picks only the
 * fields the analyzer needs (name, cat, ph, pid, tid, ts, dur and a dozen args) and skips the
 * rest without building a DOM; numbers are converted while scanning, quoted numbers (dftracer
 * v1) included; the key dispatch looks at length and first letter. */
#include "analyze/reader_int.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
int an_parse_num(const char *s, size_t n, int64_t *v) {
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
 * converted while scanning (one pass); fractions and exponents go through an_parse_num. */
static inline const char *scan_number(const char *p, const char *e, int64_t *v, int *ok) {
    *ok = 0;
    if (p < e && *p == '"') {
        const char *s;
        size_t n;
        const char *q = scan_string(p, e, &s, &n, NULL);
        if (q)
            *ok = an_parse_num(s, n, v);
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
            *ok = an_parse_num(st, (size_t)(q - st), v);
        return q;
    }
    if (p == d0) /* not a number (null, true, ...): skip it */
        return skip_value(st, e);
    /* clamped to int64_t: "-9223372036854775808" is INT64_MIN (negating its int64_t would
     * overflow), larger magnitudes (wrapped above) are out of any trace's range anyway */
    if (neg)
        *v = x > (uint64_t)INT64_MAX ? INT64_MIN : -(int64_t)x;
    else
        *v = x > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)x;
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
        case 2:
            if (KEYIS(k, kn, "fs")) { /* FH: the file-system type our tracer records */
                p = scan_raw(p, e, &ev->m_fs, &ev->m_fs_n, NULL);
                goto next;
            }
            break;
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
        case 10:
            if (KEYIS(k, kn, "batch_size"))
                bit = AN_RAW_ITEMS;
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
                case AN_RAW_ITEMS: ev->items = v; break;
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
    if (!ev->cat)
        ev->cat = ""; /* an event without "cat": the empty category, never a NULL string */
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
