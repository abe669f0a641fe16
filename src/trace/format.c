/* format.c: the flusher's side of the tracer. It owns the dftracer JSON-lines serialisation of
 * ring records (FH lines before the first use of a path in each file, proper JSON escaping), and
 * the per-file summary counters (Darshan's size buckets, SEQ/CONSEC definitions, bytes, op
 * counts, time per class) kept in a bounded table and written as "FS" metadata lines at the end
 * of each file. Runs only on the flusher thread (or under the flush lock). */
#include "trace_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

const trc_opinfo trc_ops[TRC_OP_COUNT] = {
#define TRC_OP_INFO(id, name, cat, cls, fields, a1, a2) {name, #cat, a1, a2, cls, fields},
    TRC_OPS(TRC_OP_INFO)
#undef TRC_OP_INFO
};

/* ---------------------------------------------------------------- buffer */
int trc_buf_grow(trc_buf *b, size_t n) {
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->len + n + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

void trc_buf_u64(trc_buf *b, uint64_t v) {
    char tmp[24];
    int i = 24;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    trc_buf_put(b, tmp + i, (size_t)(24 - i));
}

void trc_buf_i64(trc_buf *b, int64_t v) {
    if (v < 0) {
        trc_buf_put(b, "-", 1);
        trc_buf_u64(b, (uint64_t)0 - (uint64_t)v);
    } else {
        trc_buf_u64(b, (uint64_t)v);
    }
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 when invalid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if ((c & 0xe0) == 0xc0) {
        len = 2;
        min = 0x80;
        c &= 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3;
        min = 0x800;
        c &= 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4;
        min = 0x10000;
        c &= 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    return len;
}

void trc_buf_json(trc_buf *b, const char *s, size_t n) {
    static const char hx[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    trc_buf_put(b, "\"", 1);
    size_t run = 0; /* start of the pending run of bytes that need no escaping */
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t l = c < 0x80 ? 1 : utf8_len(u + i, n - i);
        if (c >= 0x20 && c != '"' && c != '\\' && c != 0x7f && l) {
            i += l;
            continue;
        }
        trc_buf_put(b, s + run, i - run);
        char e[6] = {'\\', 'u', '0', '0', hx[(c >> 4) & 15], hx[c & 15]};
        if (c == '"')
            trc_buf_put(b, "\\\"", 2);
        else if (c == '\\')
            trc_buf_put(b, "\\\\", 2);
        else if (c == '\n')
            trc_buf_put(b, "\\n", 2);
        else if (c == '\t')
            trc_buf_put(b, "\\t", 2);
        else
            trc_buf_put(b, e, 6); /* control, DEL, or a byte that is not UTF-8 (as Latin-1) */
        i++;
        run = i;
    }
    trc_buf_put(b, s + run, n - run);
    trc_buf_put(b, "\"", 1);
}

/* ---------------------------------------------------------------- metadata lines */
static void line_head_m(trc_buf *b, const char *type, pid_t tid) {
    trc_buf_str(b, "{\"name\":\"");
    trc_buf_str(b, type);
    trc_buf_str(b, "\",\"cat\":\"dftracer\",\"pid\":");
    trc_buf_i64(b, trc_g.pid);
    trc_buf_str(b, ",\"tid\":");
    trc_buf_i64(b, tid);
    trc_buf_str(b, ",\"ph\":\"M\",\"args\":{\"hhash\":\"");
    trc_buf_str(b, trc_g.hhash);
    trc_buf_str(b, "\",\"name\":");
}

void trc_format_meta(trc_buf *b, const char *type, const char *name, const char *value_json,
                     pid_t tid) {
    line_head_m(b, type, tid);
    trc_buf_json(b, name, strlen(name));
    trc_buf_str(b, ",\"value\":");
    if (value_json) {
        trc_buf_str(b, value_json);
    } else {
        /* HH/SH: the value is the hash of the name. */
        char h[19];
        h[0] = '"';
        trc_hex16(trc_hash(name, strlen(name)), h + 1);
        h[17] = '"';
        h[18] = 0;
        trc_buf_str(b, h);
    }
    trc_buf_str(b, "}}\n");
}

void trc_format_fh(trc_buf *b, uint64_t h, const char *path, pid_t tid) {
    char v[19];
    v[0] = '"';
    trc_hex16(h, v + 1);
    v[17] = '"';
    v[18] = 0;
    trc_format_meta(b, "FH", path, v, tid);
}

static void ensure_fh(trc_buf *b, uint64_t h, pid_t tid) {
    int emit;
    const char *p = trc_path_lookup(h, trc_g.gen, &emit);
    if (p && emit)
        trc_format_fh(b, h, p, tid);
}

static void put_hash(trc_buf *b, const char *key, uint64_t h) {
    char v[17];
    trc_hex16(h, v);
    trc_buf_str(b, ",\"");
    trc_buf_str(b, key);
    trc_buf_str(b, "\":\"");
    trc_buf_put(b, v, 16);
    trc_buf_put(b, "\"", 1);
}

static void put_int(trc_buf *b, const char *key, int64_t v) {
    trc_buf_str(b, ",\"");
    trc_buf_str(b, key);
    trc_buf_str(b, "\":");
    trc_buf_i64(b, v);
}

static void event_head(trc_buf *b, uint64_t id, const char *name, size_t nlen, const char *cat,
                       size_t clen, pid_t pid, pid_t tid, uint64_t t0, uint64_t dur, int json) {
    trc_buf_str(b, "{\"id\":");
    trc_buf_u64(b, id);
    trc_buf_str(b, ",\"name\":");
    if (json) {
        trc_buf_json(b, name, nlen);
    } else {
        trc_buf_put(b, "\"", 1);
        trc_buf_put(b, name, nlen);
        trc_buf_put(b, "\"", 1);
    }
    trc_buf_str(b, ",\"cat\":");
    if (json) {
        trc_buf_json(b, cat, clen);
    } else {
        trc_buf_put(b, "\"", 1);
        trc_buf_put(b, cat, clen);
        trc_buf_put(b, "\"", 1);
    }
    trc_buf_str(b, ",\"pid\":");
    trc_buf_i64(b, pid);
    trc_buf_str(b, ",\"tid\":");
    trc_buf_i64(b, tid);
    trc_buf_str(b, ",\"ts\":");
    trc_buf_u64(b, (t0 + trc_g.anchor_ns) / 1000);
    trc_buf_str(b, ",\"dur\":");
    trc_buf_u64(b, dur / 1000);
    trc_buf_str(b, ",\"ph\":\"X\",\"args\":{\"hhash\":\"");
    trc_buf_str(b, trc_g.hhash);
    trc_buf_str(b, "\"");
}

static void summary_update(const trc_io_rec *r);

int trc_format_record(trc_buf *b, const trc_hdr *h, pid_t pid, pid_t tid) {
    if (h->type == TRC_REC_IO) {
        const trc_io_rec *r = (const trc_io_rec *)h;
        if (r->h.op >= TRC_OP_COUNT)
            return 0;
        const trc_opinfo *o = &trc_ops[r->h.op];
        if ((o->fields & TF_FHASH) && r->fhash)
            ensure_fh(b, r->fhash, tid);
        if ((o->fields & TF_H2) && r->h2)
            ensure_fh(b, r->h2, tid);
        event_head(b, r->id, o->name, strlen(o->name), o->cat, strlen(o->cat), pid, tid, r->t0,
                   r->dur, 0);
        put_int(b, "p_idx", r->p_idx);
        put_int(b, "level", r->level);
        if (o->fields & TF_FD)
            put_int(b, "fd", r->fd);
        if ((o->fields & TF_FHASH) && r->fhash)
            put_hash(b, "fhash", r->fhash);
        if (o->fields & TF_COUNT)
            put_int(b, "count", r->count);
        if ((o->fields & TF_OFFSET) && r->offset >= 0)
            put_int(b, "offset", r->offset);
        if (o->fields & TF_RET)
            put_int(b, "ret", r->ret);
        if (o->fields & TF_BYTES)
            put_int(b, "bytes", r->ret > 0 ? r->ret * r->a1 : 0);
        if ((o->fields & TF_A1) && o->a1[0])
            put_int(b, o->a1, r->a1);
        if ((o->fields & TF_A2) && o->a2[0] && !(r->h.op == TRC_OP_open && r->a2 < 0) &&
            !(r->h.op == TRC_OP_openat && r->a2 < 0))
            put_int(b, o->a2, r->a2);
        if ((o->fields & TF_H2) && r->h2)
            put_hash(b,
                     (r->h.op == TRC_OP_sendfile || r->h.op == TRC_OP_copy_file_range)
                         ? "out_fhash"
                         : "new_fhash",
                     r->h2);
        trc_buf_str(b, "}}\n");
        summary_update(r);
        return 1;
    }
    if (h->type == TRC_REC_REGION) {
        const trc_region_rec *r = (const trc_region_rec *)h;
        const char *name = (const char *)(r + 1);
        const char *cat = name + r->name_len + 1;
        const char *frag = cat + r->cat_len + 1;
        event_head(b, r->id, name, r->name_len, cat, r->cat_len, pid, tid, r->t0, r->dur, 1);
        put_int(b, "p_idx", r->p_idx);
        put_int(b, "level", r->level);
        trc_buf_put(b, frag, r->frag_len);
        trc_buf_str(b, "}}\n");
        return 1;
    }
    if (h->type == TRC_REC_META) {
        const trc_meta_rec *r = (const trc_meta_rec *)h;
        const char *key = (const char *)(r + 1);
        const char *val = key + r->key_len + 1;
        trc_buf json = {0};
        trc_buf_json(&json, val, r->val_len);
        trc_buf_put(&json, "", 1);
        if (json.p)
            trc_format_meta(b, "CM", key, json.p, tid);
        free(json.p);
        return 0;
    }
    return 0;
}

/* ---------------------------------------------------------------- summaries */
#define NBUCKET 10
typedef struct trc_fsum {
    uint64_t fhash;
    int64_t opens, closes, reads, writes, seeks, stats, syncs, mmaps, metas;
    int64_t bytes_read, bytes_written, max_byte_read, max_byte_written;
    int64_t seq_reads, seq_writes, consec_reads, consec_writes, rw_switches;
    int64_t last_byte_read, last_byte_written;
    int last_rw; /* 0 none, 1 read, 2 write */
    int64_t size_read[NBUCKET], size_write[NBUCKET];
    uint64_t read_ns, write_ns, meta_ns;
    uint64_t first_ns, last_ns;
} trc_fsum;

static trc_fsum *sums;
static size_t sums_cap, sums_n, sums_max;
static int sums_partial;

void trc_summary_reset(size_t max_files) {
    size_t cap = 64;
    while (cap < max_files * 2)
        cap <<= 1;
    if (sums && sums_cap == cap) {
        memset(sums, 0, cap * sizeof *sums);
    } else {
        if (sums)
            munmap(sums, sums_cap * sizeof *sums);
        void *m = mmap(NULL, cap * sizeof *sums, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        sums = m == MAP_FAILED ? NULL : m;
        sums_cap = sums ? cap : 0;
    }
    sums_n = 0;
    sums_max = max_files;
    sums_partial = 0;
}

static trc_fsum *sum_get(uint64_t h) {
    if (!sums)
        return NULL;
    size_t mask = sums_cap - 1;
    for (size_t j = h & mask;; j = (j + 1) & mask) {
        if (sums[j].fhash == h)
            return &sums[j];
        if (sums[j].fhash == 0) {
            if (sums_n >= sums_max) {
                sums_partial = 1; /* bounded memory: later files are not summarised */
                return NULL;
            }
            sums_n++;
            sums[j].fhash = h;
            sums[j].last_byte_read = sums[j].last_byte_written = -1;
            sums[j].max_byte_read = sums[j].max_byte_written = -1;
            return &sums[j];
        }
    }
}

/* Darshan's access-size buckets (darshan-common.h): 0-100, -1K, -10K, -100K, -1M, -4M, -10M,
 * -100M, -1G, more. */
static int bucket(int64_t v) {
    static const int64_t lim[NBUCKET - 1] = {101,     1025,     10241,     102401,    1048577,
                                             4194305, 10485761, 104857601, 1073741825};
    for (int i = 0; i < NBUCKET - 1; i++)
        if (v < lim[i])
            return i;
    return NBUCKET - 1;
}

static int64_t rec_bytes(const trc_io_rec *r) {
    switch (r->h.op) {
    case TRC_OP_fread:
    case TRC_OP_fwrite:
        return r->ret > 0 ? r->ret * r->a1 : 0;
    case TRC_OP_fgetc:
    case TRC_OP_getc:
    case TRC_OP_fputc:
    case TRC_OP_putc:
        return r->ret >= 0 ? 1 : 0;
    case TRC_OP_getw:
    case TRC_OP_putw:
        return r->ret != -1 ? (int64_t)sizeof(int) : 0;
    case TRC_OP_fputs:
        return r->ret >= 0 ? r->count : 0; /* count = strlen of the string */
    case TRC_OP_fscanf:
        return 0; /* bytes consumed are not known */
    default:
        return r->ret > 0 ? r->ret : 0;
    }
}

static void summary_update(const trc_io_rec *r) {
    const trc_opinfo *o = &trc_ops[r->h.op];
    if (!r->fhash || !(o->fields & TF_FHASH))
        return;
    trc_fsum *s = sum_get(r->fhash);
    if (!s)
        return;
    if (!s->first_ns || r->t0 < s->first_ns)
        s->first_ns = r->t0;
    if (r->t0 + r->dur > s->last_ns)
        s->last_ns = r->t0 + r->dur;
    switch (o->cls) {
    case TC_READ:
    case TC_WRITE: {
        int rd = o->cls == TC_READ;
        int64_t n = rec_bytes(r);
        if (rd) {
            s->reads++;
            s->read_ns += r->dur;
            s->bytes_read += n;
            s->size_read[bucket(n)]++;
        } else {
            s->writes++;
            s->write_ns += r->dur;
            s->bytes_written += n;
            s->size_write[bucket(n)]++;
        }
        if (s->last_rw && s->last_rw != (rd ? 1 : 2))
            s->rw_switches++;
        s->last_rw = rd ? 1 : 2;
        if (r->offset >= 0 && n > 0) {
            int64_t *last = rd ? &s->last_byte_read : &s->last_byte_written;
            /* Darshan: SEQ = any forward access, CONSEC = exactly adjacent. */
            if (*last >= 0 || r->offset > 0) {
                if (r->offset > *last)
                    (*(rd ? &s->seq_reads : &s->seq_writes))++;
                if (r->offset == *last + 1)
                    (*(rd ? &s->consec_reads : &s->consec_writes))++;
            }
            *last = r->offset + n - 1;
            int64_t *mx = rd ? &s->max_byte_read : &s->max_byte_written;
            if (*last > *mx)
                *mx = *last;
        }
        break;
    }
    case TC_OPEN:
        s->opens++;
        s->meta_ns += r->dur;
        break;
    case TC_CLOSE:
        s->closes++;
        s->meta_ns += r->dur;
        break;
    case TC_SEEK:
        s->seeks++;
        s->meta_ns += r->dur;
        break;
    case TC_STAT:
        s->stats++;
        s->meta_ns += r->dur;
        break;
    case TC_SYNC:
        s->syncs++;
        s->meta_ns += r->dur;
        break;
    case TC_MMAP:
        s->mmaps++;
        s->meta_ns += r->dur;
        break;
    default:
        s->metas++;
        s->meta_ns += r->dur;
        break;
    }
}

static void put_arr(trc_buf *b, const char *key, const int64_t *v, int n) {
    trc_buf_str(b, ",\"");
    trc_buf_str(b, key);
    trc_buf_str(b, "\":[");
    for (int i = 0; i < n; i++) {
        if (i)
            trc_buf_put(b, ",", 1);
        trc_buf_i64(b, v[i]);
    }
    trc_buf_put(b, "]", 1);
}

static void put_sec(trc_buf *b, const char *key, uint64_t ns) {
    char tmp[64];
    snprintf(tmp, sizeof tmp, ",\"%s\":%.6f", key, (double)ns * 1e-9);
    trc_buf_str(b, tmp);
}

void trc_summary_write(trc_buf *b, pid_t tid) {
    if (!sums)
        return;
    for (size_t j = 0; j < sums_cap; j++) {
        const trc_fsum *s = &sums[j];
        if (!s->fhash)
            continue;
        const char *path = trc_path_lookup(s->fhash, 0, NULL);
        line_head_m(b, "FS", tid);
        trc_buf_json(b, path ? path : "", path ? strlen(path) : 0);
        put_hash(b, "fhash", s->fhash);
        trc_buf_str(b, ",\"value\":{\"opens\":");
        trc_buf_i64(b, s->opens);
        put_int(b, "closes", s->closes);
        put_int(b, "reads", s->reads);
        put_int(b, "writes", s->writes);
        put_int(b, "seeks", s->seeks);
        put_int(b, "stats", s->stats);
        put_int(b, "syncs", s->syncs);
        put_int(b, "mmaps", s->mmaps);
        put_int(b, "other_meta", s->metas);
        put_int(b, "bytes_read", s->bytes_read);
        put_int(b, "bytes_written", s->bytes_written);
        put_int(b, "max_byte_read", s->max_byte_read);
        put_int(b, "max_byte_written", s->max_byte_written);
        put_int(b, "seq_reads", s->seq_reads);
        put_int(b, "seq_writes", s->seq_writes);
        put_int(b, "consec_reads", s->consec_reads);
        put_int(b, "consec_writes", s->consec_writes);
        put_int(b, "rw_switches", s->rw_switches);
        put_arr(b, "size_read", s->size_read, NBUCKET);
        put_arr(b, "size_write", s->size_write, NBUCKET);
        put_sec(b, "read_time", s->read_ns);
        put_sec(b, "write_time", s->write_ns);
        put_sec(b, "meta_time", s->meta_ns);
        put_int(b, "first_ts", (int64_t)((s->first_ns + trc_g.anchor_ns) / 1000));
        put_int(b, "last_ts", (int64_t)((s->last_ns + trc_g.anchor_ns) / 1000));
        trc_buf_str(b, "}}}\n");
    }
    if (sums_partial) {
        line_head_m(b, "FS", tid);
        trc_buf_str(b, "\"partial\",\"value\":{\"max_files\":");
        trc_buf_u64(b, sums_max);
        trc_buf_str(b, "}}}\n");
    }
}
