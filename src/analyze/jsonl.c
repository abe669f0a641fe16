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

/* A number token s[0..n) (sign, digits, optional fraction/exponent): 1 parsed into *v, 0 not a
 * number, -1 a number outside int64 (never wrapped or saturated: the caller skips what needs it). */
static int parse_num_range(const char *s, size_t n, int64_t *v) {
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
    int over = 0;
    while (p < e && ISDIG(*p)) {
        unsigned d = (unsigned)(*p - '0');
        if (x > (UINT64_MAX - d) / 10)
            over = 1;
        x = x * 10 + d;
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
        if (end != buf + n)
            return 0;
        /* 2^63 is the first double past INT64_MAX; llround is undefined beyond it */
        if (!isfinite(d) || d >= 9223372036854775808.0 || d < -9223372036854775808.0)
            return -1;
        *v = (int64_t)llround(d);
        return 1;
    }
    if (over || x > (uint64_t)INT64_MAX + (uint64_t)neg)
        return -1;
    *v = neg ? (int64_t)(0 - x) : (int64_t)x;
    return 1;
}

int an_parse_num(const char *s, size_t n, int64_t *v) { return parse_num_range(s, n, v) == 1; }

/* A number value, possibly quoted (dftracer v1 writes every value as a string). Integers are
 * converted while scanning (one pass); fractions and exponents go through parse_num_range.
 * *ok: 1 a number in int64, 0 not a number (null, true...: skipped), -1 a number beyond int64. */
static inline const char *scan_number(const char *p, const char *e, int64_t *v, int *ok) {
    *ok = 0;
    if (p < e && *p == '"') {
        const char *s;
        size_t n;
        const char *q = scan_string(p, e, &s, &n, NULL);
        if (q)
            *ok = parse_num_range(s, n, v);
        return q;
    }
    const char *st = p;
    int neg = 0;
    if (p < e && *p == '-') {
        neg = 1;
        p++;
    }
    uint64_t x = 0;
    int over = 0;
    const char *d0 = p;
    while (p < e && ISDIG(*p)) {
        unsigned d = (unsigned)(*p - '0');
        if (x > (UINT64_MAX - d) / 10)
            over = 1;
        x = x * 10 + d;
        p++;
    }
    if (p < e && (*p == '.' || *p == 'e' || *p == 'E')) {
        const char *q = skip_value(st, e);
        if (q)
            *ok = parse_num_range(st, (size_t)(q - st), v);
        return q;
    }
    if (p == d0) /* not a number (null, true, ...): skip it */
        return skip_value(st, e);
    /* "-9223372036854775808" is INT64_MIN; anything larger in magnitude is out of range (a
     * corrupt or hostile trace), reported rather than wrapped */
    if (over || x > (uint64_t)INT64_MAX + (uint64_t)neg) {
        *ok = -1;
        return p;
    }
    *v = neg ? (int64_t)(0 - x) : (int64_t)x;
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

/* Where an arg's number goes: a raw bit (ev->has) or a counter slot (ev->ctr_has). */
typedef struct {
    unsigned bit;
    int ctr; /* AN_CTR_*, or -1 */
} argdst;

/* The numeric args the reader uses, by key; bit 0 and ctr -1 for the others. */
static argdst arg_dest(const char *k, size_t kn) {
    argdst d = {0, -1};
    switch (kn) {
    case 3:
        if (KEYIS(k, kn, "ret"))
            d.bit = AN_RAW_RET;
        else if (KEYIS(k, kn, "dur"))
            d.bit = AN_RAW_ADUR;
        break;
    case 4:
        if (KEYIS(k, kn, "size"))
            d.bit = AN_RAW_SIZE;
        else if (KEYIS(k, kn, "vcsw"))
            d.ctr = AN_CTR_VCSW;
        break;
    case 5:
        if (KEYIS(k, kn, "count"))
            d.bit = AN_RAW_COUNT;
        else if (KEYIS(k, kn, "bytes"))
            d.bit = AN_RAW_BYTES;
        else if (KEYIS(k, kn, "flags"))
            d.bit = AN_RAW_FLAGS;
        else if (KEYIS(k, kn, "ivcsw"))
            d.ctr = AN_CTR_IVCSW;
        break;
    case 6:
        if (KEYIS(k, kn, "offset"))
            d.bit = AN_RAW_OFFSET;
        else if (KEYIS(k, kn, "whence"))
            d.bit = AN_RAW_WHENCE;
        else if (KEYIS(k, kn, "rss_kb"))
            d.ctr = AN_CTR_RSS_KB;
        break;
    case 7:
        if (KEYIS(k, kn, "dur_sum"))
            d.bit = AN_RAW_DURSUM;
        else if (KEYIS(k, kn, "ret_sum"))
            d.bit = AN_RAW_RETSUM;
        else if (KEYIS(k, kn, "dft_cnt"))
            d.bit = AN_RAW_DFTCNT;
        break;
    case 8:
        if (KEYIS(k, kn, "size_sum"))
            d.bit = AN_RAW_SIZESUM;
        break;
    case 9:
        if (KEYIS(k, kn, "bytes_sum"))
            d.bit = AN_RAW_SIZESUM;
        else if (KEYIS(k, kn, "comm_size"))
            d.bit = AN_RAW_COMMSZ;
        break;
    case 10:
        if (KEYIS(k, kn, "batch_size"))
            d.bit = AN_RAW_ITEMS;
        else if (KEYIS(k, kn, "num_events"))
            d.bit = AN_RAW_NUMEV;
        else if (KEYIS(k, kn, "cpu_sys_us"))
            d.ctr = AN_CTR_CPU_SYS_US;
        else if (KEYIS(k, kn, "read_bytes"))
            d.ctr = AN_CTR_READ_BYTES;
        break;
    case 11:
        if (KEYIS(k, kn, "cpu_user_us"))
            d.ctr = AN_CTR_CPU_USER_US;
        else if (KEYIS(k, kn, "write_bytes"))
            d.ctr = AN_CTR_WRITE_BYTES;
        else if (KEYIS(k, kn, "load1_milli"))
            d.ctr = AN_CTR_LOAD1_MILLI;
        break;
    case 12:
        if (KEYIS(k, kn, "mem_avail_kb"))
            d.ctr = AN_CTR_MEM_AVAIL_KB;
        else if (KEYIS(k, kn, "run_delay_us"))
            d.ctr = AN_CTR_RUN_DELAY_US;
        break;
    default:
        break;
    }
    return d;
}

static void set_arg(an_rawev *ev, unsigned bit, int64_t v) {
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
    case AN_RAW_DFTCNT: ev->dft_cnt = v; break;
    case AN_RAW_ADUR: ev->adur = v; break;
    case AN_RAW_NUMEV: ev->num_events = v; break;
    case AN_RAW_COMMSZ: ev->comm_size = v; break;
    default: break;
    }
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
        /* The string-valued args: hashes, names, metadata values. */
        const char **sp = NULL;
        size_t *sn = NULL;
        int *esc = NULL;
        switch (kn) {
        case 2:
            if (KEYIS(k, kn, "fs")) { /* FH: the file-system type our tracer records */
                sp = &ev->m_fs;
                sn = &ev->m_fs_n;
            }
            break;
        case 4:
            if (KEYIS(k, kn, "name")) {
                sp = &ev->m_name;
                sn = &ev->m_name_n;
                esc = &ev->m_name_esc;
            } else if (KEYIS(k, kn, "comm")) {
                sp = &ev->comm;
                sn = &ev->comm_n;
            }
            break;
        case 5:
            if (KEYIS(k, kn, "hhash")) {
                sp = &ev->hhash;
                sn = &ev->hhash_n;
            } else if (KEYIS(k, kn, "fhash")) {
                sp = &ev->fhash;
                sn = &ev->fhash_n;
            } else if (KEYIS(k, kn, "fname")) {
                sp = &ev->fname;
                sn = &ev->fname_n;
                esc = &ev->fname_esc;
            } else if (KEYIS(k, kn, "value")) {
                sp = &ev->m_value;
                sn = &ev->m_value_n;
            }
            break;
        case 8:
            if (KEYIS(k, kn, "hostname")) {
                sp = &ev->hostname;
                sn = &ev->hostname_n;
            }
            break;
        case 7:
            if (KEYIS(k, kn, "version")) {
                sp = &ev->version;
                sn = &ev->version_n;
            }
            break;
        case 9:
            if (KEYIS(k, kn, "exec_hash")) {
                sp = &ev->exec_hash;
                sn = &ev->exec_hash_n;
            }
            break;
        default:
            break;
        }
        if (sp) {
            p = scan_raw(p, e, sp, sn, esc);
        } else {
            argdst d = arg_dest(k, kn);
            if (d.bit || d.ctr >= 0) {
                int ok;
                int64_t v = 0;
                p = scan_number(p, e, &v, &ok);
                if (ok < 0)
                    ev->out_of_range = 1;
                else if (ok && d.bit)
                    set_arg(ev, d.bit, v);
                else if (ok) {
                    ev->ctr[d.ctr] = v;
                    ev->ctr_has |= 1u << d.ctr;
                }
            } else {
                p = skip_value(p, e);
            }
        }
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

/* The record kind of a "ph" value: a 1.x letter or a 2.x integer. */
static int ph_kind(const char *ph, size_t n, int *is_int) {
    *is_int = 0;
    if (n != 1)
        return AN_PH_OTHER;
    switch (ph[0]) {
    case '1': *is_int = 1; return AN_PH_COMPLETE;
    case '2': *is_int = 1; return AN_PH_COUNTER;
    case '3': *is_int = 1; return AN_PH_AGG;
    case '4': *is_int = 1; return AN_PH_META;
    case 'X': return AN_PH_COMPLETE;
    case 'C': return AN_PH_COUNTER;
    case 'A': return AN_PH_AGG;
    case 'M': return AN_PH_META;
    default: return AN_PH_OTHER;
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
            ev->has_ts = ok > 0;
        } else if (kn == 3 && k0 == 'd' && k[1] == 'u' && k[2] == 'r') {
            p = scan_number(p, e, &ev->dur, &ok);
            ev->has_dur = ok > 0;
        } else if (kn == 3 && k0 == 'p' && k[1] == 'i' && k[2] == 'd') {
            p = scan_number(p, e, &ev->pid, &ok);
            ev->has_pid = ok > 0;
        } else if (kn == 3 && k0 == 't' && k[1] == 'i' && k[2] == 'd') {
            p = scan_number(p, e, &ev->tid, &ok);
        } else if (kn == 4 && k0 == 't' && KEYIS(k, kn, "type")) {
            p = scan_number(p, e, &ev->type, &ok);
            ev->has_type = ok > 0;
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
        if (ok < 0)
            ev->out_of_range = 1;
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
    ev->ph_kind = ph_kind(ev->ph, ev->ph_n, &ev->ph_int);
    /* An early-2.x aggregate written as a counter ("C" with its call count). */
    if (ev->ph_kind == AN_PH_COUNTER && !ev->ph_int &&
        (ev->has & (AN_RAW_DFTCNT | AN_RAW_DURSUM | AN_RAW_SIZESUM | AN_RAW_RETSUM)))
        ev->ph_kind = AN_PH_AGG;
    /* Times beyond 2^61 us (73,000 years) or negative durations are not times. */
    if ((ev->has_ts && (ev->ts > AN_TS_MAX || ev->ts < -AN_TS_MAX)) ||
        (ev->has_dur && (ev->dur < 0 || ev->dur > AN_TS_MAX)) ||
        ((ev->has & AN_RAW_DURSUM) && (ev->dur_sum < 0 || ev->dur_sum > AN_TS_MAX)) ||
        ((ev->has & AN_RAW_ADUR) && (ev->adur < 0 || ev->adur > AN_TS_MAX)) ||
        ((ev->has & AN_RAW_DFTCNT) && ev->dft_cnt < 0))
        ev->out_of_range = 1;
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
