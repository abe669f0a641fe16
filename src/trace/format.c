/* format.c: the flusher's side of the tracer. It owns the dftracer JSON-lines serialisation of
 * ring records with a fast writer (two digits per table lookup, the constant parts of each line
 * prepared once per thread and op), the event ids and parents (p_idx) it derives while reading
 * each thread's records in order, the FH lines written before the first use of a path in each
 * file (with the path's file-system type), and the per-file summary counters (Darshan's size
 * buckets, SEQ/CONSEC definitions, bytes, op counts, time per class) kept in a bounded table and
 * written as "FS" metadata lines at the end of each file. Runs only on the flusher thread (or
 * under the flush lock). */
#include "mpi_hooks.h"
#include "trace_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

const trc_opinfo trc_ops[TRC_OP_COUNT] = {
#define TRC_OP_INFO(id, name, cat, cls, oc, fields, a1, a2) {name, #cat, a1, a2, cls, fields},
    TRC_OPS(TRC_OP_INFO)
#undef TRC_OP_INFO
};

/* Layers that produced an event in the current file (the end record's "used"). */
unsigned trc_used;

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

/* ---------------------------------------------------------------- fast writer */
static const char D2[] = "00010203040506070809101112131415161718192021222324252627282930313233343536"
                         "37383940414243444546474849505152535455565758596061626364656667686970717273"
                         "7475767778798081828384858687888990919293949596979899";

/* Writes v in decimal at p; returns the end. Two digits per step from a table. */
static inline char *w_u64(char *p, uint64_t v) {
    char tmp[20], *e = tmp + sizeof tmp, *q = e;
    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);
        v /= 100;
        q -= 2;
        memcpy(q, D2 + 2 * r, 2);
    }
    if (v >= 10) {
        q -= 2;
        memcpy(q, D2 + 2 * v, 2);
    } else {
        *--q = (char)('0' + v);
    }
    memcpy(p, q, (size_t)(e - q));
    return p + (e - q);
}

static inline char *w_i64(char *p, int64_t v) {
    if (v < 0) {
        *p++ = '-';
        return w_u64(p, (uint64_t)0 - (uint64_t)v);
    }
    return w_u64(p, (uint64_t)v);
}

static inline char *w_hex16(char *p, uint64_t h) {
    static const char hx[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--, h >>= 4)
        p[i] = hx[h & 15];
    return p + 16;
}

static inline char *w_lit(char *p, const char *s, size_t n) {
    memcpy(p, s, n);
    return p + n;
}
#define W_LIT(p, s) w_lit((p), (s), sizeof(s) - 1)

/* ---------------------------------------------------------------- metadata lines */
/* Metadata line head. The 2.x shape (dftracer 2.1.1 and later) adds "type" after "cat" and
 * writes "ph" as an integer (4 = metadata); the 1.x shape writes "ph":"M". */
static void line_head_m(trc_buf *b, const char *type, pid_t tid) {
    int v2 = trc_g.cfg.format == 2;
    trc_buf_str(b, "{\"name\":\"");
    trc_buf_str(b, type);
    /* custom metadata carries the type of the API that logged it (the C annotation API) */
    if (!v2)
        trc_buf_str(b, "\",\"cat\":\"dftracer\",\"pid\":");
    else if (!strcmp(type, "CM"))
        trc_buf_str(b, "\",\"cat\":\"dftracer\",\"type\":" TRC_TYPE_C_APP ",\"pid\":");
    else
        trc_buf_str(b, "\",\"cat\":\"dftracer\",\"type\":" TRC_TYPE_DFTRACER ",\"pid\":");
    trc_buf_i64(b, trc_g.pid);
    trc_buf_str(b, ",\"tid\":");
    trc_buf_i64(b, tid);
    trc_buf_str(b, v2 ? ",\"ph\":4,\"args\":{\"hhash\":\"" : ",\"ph\":\"M\",\"args\":{\"hhash\":\"");
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

/* FH line: path and hash as dftracer writes them, plus "fs", the type of the file system the
 * path lives on (readers that do not know the key ignore it). */
void trc_format_fh(trc_buf *b, uint64_t h, const char *path, pid_t tid) {
    line_head_m(b, "FH", tid);
    trc_buf_json(b, path, strlen(path));
    char v[32] = ",\"value\":\"";
    trc_hex16(h, v + 10);
    trc_buf_put(b, v, 26);
    trc_buf_str(b, "\",\"fs\":");
    const char *fs = trc_fs_type(path);
    trc_buf_json(b, fs, strlen(fs));
    trc_buf_str(b, "}}\n");
}

/* ---------------------------------------------------------------- event lines */
/* The constant parts of the current thread's lines: for each op the text from ,"name" to "ts":
 * (name, cat, pid, tid), built on first use; and ,"ph":"X","args":{"hhash":"...","p_idx":. */
typedef struct {
    uint8_t len;
    char s[119];
} tmpl;
static tmpl pre[TRC_OP_COUNT];
static tmpl mpre[TRC_MPI_COUNT]; /* the same for MPI calls */
_Static_assert(TRC_OP_COUNT + TRC_MPI_COUNT <= TRC_LINE_KEYS, "line keys: I/O ops and MPI ops");
static pid_t pre_tid = -1;
static pid_t pre_pid = -1;
static char mid[64];
static size_t mid_len;
static char a1key[TRC_OP_COUNT][24], a2key[TRC_OP_COUNT][24];
static uint8_t a1len[TRC_OP_COUNT], a2len[TRC_OP_COUNT];
static int keys_ready;

/* Event ids come from the process-wide counter in blocks, like the application threads'. */
static uint64_t id_next, id_end;
static uint64_t new_id(void) {
    if (id_next == id_end) {
        id_next = __atomic_fetch_add(&trc_g.next_id, 1024, __ATOMIC_RELAXED);
        id_end = id_next + 1024;
    }
    return id_next++;
}

/* Last path whose FH line is known to be written in this file (consecutive events mostly
 * touch the same file). */
static uint64_t fh_last;
static unsigned fh_gen;

void trc_format_reset(void) {
    pre_tid = -1;
    mid_len = 0;
    id_next = id_end = 0;
    fh_last = 0;
}

void trc_format_thread(trc_thread *t) {
    if (t->tid != pre_tid || trc_g.pid != pre_pid) {
        for (int k = 0; k < TRC_OP_COUNT; k++)
            pre[k].len = 0;
        for (int k = 0; k < TRC_MPI_COUNT; k++)
            mpre[k].len = 0;
        pre_tid = t->tid;
        pre_pid = trc_g.pid;
    }
    if (!mid_len)
        mid_len = (size_t)snprintf(mid, sizeof mid, ",\"ph\":%s,\"args\":{\"hhash\":\"%s\",\"p_idx\":",
                                   trc_g.cfg.format == 2 ? "1" : "\"X\"", trc_g.hhash);
    if (!keys_ready) {
        for (int k = 0; k < TRC_OP_COUNT; k++) {
            if (trc_ops[k].a1[0])
                a1len[k] = (uint8_t)snprintf(a1key[k], sizeof a1key[k], ",\"%s\":", trc_ops[k].a1);
            if (trc_ops[k].a2[0])
                a2len[k] = (uint8_t)snprintf(a2key[k], sizeof a2key[k], ",\"%s\":", trc_ops[k].a2);
        }
        keys_ready = 1;
    }
}

static const tmpl *op_prefix(int op) {
    tmpl *p = &pre[op];
    if (!p->len)
        p->len = (uint8_t)snprintf(p->s, sizeof p->s, ",\"name\":\"%s\",\"cat\":\"%s\"%s,\"pid\":%d,\"tid\":%d,\"ts\":",
                                   trc_ops[op].name, trc_ops[op].cat,
                                   trc_g.cfg.format == 2 ? ",\"type\":" TRC_TYPE_LIBC_IO : "",
                                   (int)trc_g.pid, (int)pre_tid);
    return p;
}

static void ensure_fh(trc_buf *b, uint64_t h, pid_t tid) {
    if (h == fh_last && fh_gen == trc_g.gen)
        return;
    int emit;
    const char *p = trc_path_lookup(h, trc_g.gen, &emit);
    if (p && emit)
        trc_format_fh(b, h, p, tid);
    fh_last = h;
    fh_gen = trc_g.gen;
}

static void summary_update(int op, const trc_io_rec *r, uint64_t t0, uint64_t dur);

/* The line log of the current stage (see trc_lines_take). */
static trc_line *lines;
static size_t nlines, caplines;

const trc_line *trc_lines_take(size_t *n) {
    *n = nlines;
    nlines = 0; /* the array stays valid until the next line is logged */
    return lines;
}

static trc_line *line_begin(size_t start) {
    if (nlines == caplines) {
        size_t nc = caplines ? 2 * caplines : 8192;
        trc_line *nl = realloc(lines, nc * sizeof *nl);
        if (!nl)
            return NULL;
        lines = nl;
        caplines = nc;
    }
    trc_line *L = &lines[nlines++];
    L->start = (uint32_t)start;
    L->npieces = 0;
    return L;
}

/* Ends a field of the line being written at p. */
static inline void piece(trc_line *L, const char *base, const char *p) {
    if (L && L->npieces < TRC_LINE_PIECES)
        L->ends[L->npieces++] = (uint16_t)(p - base);
}

/* The common head of an event line, from {"id" to "level": the id, the prepared name/cat/pid/tid
 * part, ts, dur, hhash and p_idx (the parent from the level in dur_level's top byte), logging the
 * field ends for the fast encoder; returns the end. */
static char *event_head(char *base, trc_line *L, uint8_t key, const tmpl *pr, const trc_thread *t,
                        uint64_t ticks, uint64_t dur_level, uint64_t *t0, uint64_t *dur) {
    unsigned level = (unsigned)(dur_level >> 56);
    int64_t pidx = level > 1 && level - 1 <= TRC_MAX_DEPTH ? (int64_t)t->parents[level - 1] : -1;
    *t0 = trc_clock_ns(ticks);
    *dur = trc_clock_dur_ns(dur_level & 0x00ffffffffffffffull);
    char *p = base;
    if (L)
        L->key = key;
    p = W_LIT(p, "{\"id\":");
    p = w_u64(p, new_id());
    piece(L, base, p);
    p = w_lit(p, pr->s, pr->len);
    p = w_u64(p, (*t0 + trc_realtime_anchor_ns) / 1000);
    piece(L, base, p);
    p = W_LIT(p, ",\"dur\":");
    p = w_u64(p, *dur / 1000);
    piece(L, base, p);
    p = w_lit(p, mid, mid_len);
    p = w_i64(p, pidx);
    piece(L, base, p);
    p = W_LIT(p, ",\"level\":");
    return w_u64(p, level);
}

static int format_io(trc_buf *b, trc_thread *t, uint64_t hdr, const trc_io_rec *r) {
    int op = (int)TRC_HDR_SUB(hdr);
    if (op >= TRC_OP_COUNT)
        return 0;
    const trc_opinfo *o = &trc_ops[op];
    uint32_t size = TRC_HDR_SIZE(hdr);
    int64_t a1 = size > TRC_IO_BASE ? r->a1 : 0, a2 = size > TRC_IO_BASE + 8 ? r->a2 : 0;
    if ((o->fields & TF_FHASH) && r->fhash)
        ensure_fh(b, r->fhash, t->tid);
    if ((o->fields & TF_H2) && a2)
        ensure_fh(b, (uint64_t)a2, t->tid);
    if (TRC_UNLIKELY(b->len + 640 > b->cap) && trc_buf_grow(b, 640) != 0)
        return 0;
    uint64_t t0, dur;
    const tmpl *pr = op_prefix(op);
    char *base = b->p + b->len, *p;
    trc_line *L = line_begin(b->len);
    p = event_head(base, L, (uint8_t)op, pr, t, r->t0, r->dur_level, &t0, &dur);
    if (o->fields & TF_FD) {
        p = W_LIT(p, ",\"fd\":");
        p = w_i64(p, TRC_HDR_VAL(hdr));
    }
    piece(L, base, p);
    if ((o->fields & TF_FHASH) && r->fhash) {
        p = W_LIT(p, ",\"fhash\":\"");
        p = w_hex16(p, r->fhash);
        *p++ = '"';
    }
    if (o->fields & TF_COUNT) {
        p = W_LIT(p, ",\"count\":");
        p = w_i64(p, r->count);
    }
    piece(L, base, p);
    if ((o->fields & TF_OFFSET) && r->offset >= 0) {
        p = W_LIT(p, ",\"offset\":");
        p = w_i64(p, r->offset);
    }
    piece(L, base, p);
    if (o->fields & TF_RET) {
        p = W_LIT(p, ",\"ret\":");
        p = w_i64(p, r->ret);
    }
    if (o->fields & TF_BYTES) {
        p = W_LIT(p, ",\"bytes\":");
        p = w_i64(p, r->ret > 0 ? r->ret * a1 : 0);
    }
    piece(L, base, p);
    if ((o->fields & TF_A1) && a1len[op])
        p = w_i64(w_lit(p, a1key[op], a1len[op]), a1);
    if ((o->fields & TF_A2) && a2len[op] && !((op == TRC_OP_open || op == TRC_OP_openat) && a2 < 0))
        p = w_i64(w_lit(p, a2key[op], a2len[op]), a2);
    if ((o->fields & TF_H2) && a2) {
        p = (op == TRC_OP_sendfile || op == TRC_OP_copy_file_range) ? W_LIT(p, ",\"out_fhash\":\"")
                                                                     : W_LIT(p, ",\"new_fhash\":\"");
        p = w_hex16(p, (uint64_t)a2);
        *p++ = '"';
    }
    p = W_LIT(p, "}}\n");
    piece(L, base, p);
    b->len = (size_t)(p - b->p);
    summary_update(op, r, t0, dur);
    return 1;
}

static const uint8_t mpi_kind[TRC_MPI_COUNT] = {
#define TRC_MPI_KIND(id, name, kind, peer) kind,
    TRC_MPI_OPS(TRC_MPI_KIND)
#undef TRC_MPI_KIND
};
static const uint8_t mpi_peer[TRC_MPI_COUNT] = {
#define TRC_MPI_PEER(id, name, kind, peer) peer,
    TRC_MPI_OPS(TRC_MPI_PEER)
#undef TRC_MPI_PEER
};

/* One MPI call: cat "MPI" (MPI-IO: "MPIIO"), type 10 as dftracer 2.1+ writes them; args: the
 * communicator (an id equal on all its members, its size, this rank), root or peer, count,
 * bytes, and for MPI-IO the file and offset, for waits the operation they completed. */
static int format_mpi(trc_buf *b, trc_thread *t, uint64_t hdr, const trc_mpi_rec *r) {
    int op = (int)TRC_HDR_SUB(hdr);
    if (op >= TRC_MPI_COUNT)
        return 0;
    int io = mpi_kind[op] == TRC_MK_IO;
    if (io && r->fhash)
        ensure_fh(b, r->fhash, t->tid);
    if (TRC_UNLIKELY(b->len + 768 > b->cap) && trc_buf_grow(b, 768) != 0)
        return 0;
    uint64_t t0, dur;
    tmpl *pr = &mpre[op];
    if (!pr->len)
        pr->len = (uint8_t)snprintf(pr->s, sizeof pr->s, ",\"name\":\"%s\",\"cat\":\"%s\"%s,\"pid\":%d,\"tid\":%d,\"ts\":",
                                    trc_mpi_names[op], io ? "MPIIO" : "MPI",
                                    trc_g.cfg.format == 2 ? ",\"type\":" TRC_TYPE_MPI : "",
                                    (int)trc_g.pid, (int)pre_tid);
    char *base = b->p + b->len, *p;
    trc_line *L = line_begin(b->len);
    p = event_head(base, L, (uint8_t)(TRC_OP_COUNT + op), pr, t, r->t0, r->dur_level, &t0, &dur);
    (void)t0;
    if (r->comm_size) {
        p = W_LIT(p, ",\"comm\":\"");
        static const char hx[] = "0123456789abcdef";
        for (int i = 7; i >= 0; i--)
            p[7 - i] = hx[(r->comm_id >> (4 * i)) & 15];
        p += 8;
        p = W_LIT(p, "\",\"comm_size\":");
        p = w_u64(p, r->comm_size);
        if (r->rank >= 0) {
            p = W_LIT(p, ",\"rank\":");
            p = w_i64(p, r->rank);
        }
    }
    piece(L, base, p);
    int32_t peer = TRC_HDR_VAL(hdr);
    if (peer != TRC_MPI_NONE && mpi_peer[op] != TRC_MP_NONE) {
        p = mpi_peer[op] == TRC_MP_ROOT ? W_LIT(p, ",\"root\":") : W_LIT(p, ",\"peer\":");
        p = w_i64(p, peer);
    }
    if (r->count >= 0) {
        p = W_LIT(p, ",\"count\":");
        p = w_i64(p, r->count);
    }
    piece(L, base, p);
    if (r->bytes >= 0) {
        p = W_LIT(p, ",\"bytes\":");
        p = w_i64(p, r->bytes);
    }
    piece(L, base, p);
    if (r->fhash) {
        p = W_LIT(p, ",\"fhash\":\"");
        p = w_hex16(p, r->fhash);
        *p++ = '"';
    }
    if (r->offset >= 0) {
        p = W_LIT(p, ",\"offset\":");
        p = w_i64(p, r->offset);
    }
    if (r->req_op != TRC_MPI_NONE && r->req_op >= 0 && r->req_op < TRC_MPI_COUNT) {
        p = W_LIT(p, ",\"req_op\":\"");
        size_t n = strlen(trc_mpi_names[r->req_op]);
        p = w_lit(p, trc_mpi_names[r->req_op], n);
        *p++ = '"';
    }
    if (mpi_kind[op] == TRC_MK_WAIT) {
        p = W_LIT(p, ",\"nreq\":");
        p = w_i64(p, r->nreq);
    }
    p = W_LIT(p, "}}\n");
    piece(L, base, p);
    b->len = (size_t)(p - b->p);
    return 1;
}

static int format_region(trc_buf *b, trc_thread *t, uint64_t hdr, const trc_region_rec *r) {
    unsigned level = TRC_HDR_SUB(hdr);
    const char *name = (const char *)(r + 1);
    const char *cat = name + r->name_len + 1;
    const char *frag = cat + r->cat_len + 1;
    int64_t pidx = level > 1 && level - 1 <= TRC_MAX_DEPTH ? (int64_t)t->parents[level - 1] : -1;
    trc_buf_str(b, "{\"id\":");
    trc_buf_u64(b, r->id);
    trc_buf_str(b, ",\"name\":");
    trc_buf_json(b, name, r->name_len);
    trc_buf_str(b, ",\"cat\":");
    trc_buf_json(b, cat, r->cat_len);
    if (trc_g.cfg.format == 2)
        trc_buf_str(b, ",\"type\":" TRC_TYPE_C_APP); /* the C annotation API's layer */
    trc_buf_str(b, ",\"pid\":");
    trc_buf_i64(b, trc_g.pid);
    trc_buf_str(b, ",\"tid\":");
    trc_buf_i64(b, t->tid);
    trc_buf_str(b, ",\"ts\":");
    trc_buf_u64(b, (trc_clock_ns(r->t0) + trc_realtime_anchor_ns) / 1000);
    trc_buf_str(b, ",\"dur\":");
    trc_buf_u64(b, trc_clock_dur_ns(r->dur) / 1000);
    trc_buf_put(b, mid, mid_len);
    trc_buf_i64(b, pidx);
    trc_buf_str(b, ",\"level\":");
    trc_buf_u64(b, level);
    trc_buf_put(b, frag, r->frag_len);
    trc_buf_str(b, "}}\n");
    return 1;
}

int trc_format_record(trc_buf *b, trc_thread *t, uint64_t hdr, const void *rec) {
    switch (TRC_HDR_TYPE(hdr)) {
    case TRC_REC_IO:
        trc_used |= TRC_USED_LIBC_IO;
        return format_io(b, t, hdr, rec);
    case TRC_REC_BEGIN: {
        unsigned level = TRC_HDR_SUB(hdr);
        if (level >= 1 && level <= TRC_MAX_DEPTH)
            t->parents[level] = ((const trc_begin_rec *)rec)->id;
        return 0;
    }
    case TRC_REC_REGION:
        trc_used |= TRC_USED_C_APP;
        return format_region(b, t, hdr, rec);
    case TRC_REC_MPI:
        trc_used |= TRC_USED_MPI;
        return format_mpi(b, t, hdr, rec);
    case TRC_REC_META:
    case TRC_REC_PROC: {
        const trc_meta_rec *r = rec;
        const char *key = (const char *)(r + 1);
        const char *val = key + r->key_len + 1;
        trc_buf json = {0};
        trc_buf_json(&json, val, r->val_len);
        trc_buf_put(&json, "", 1);
        if (json.p)
            trc_format_meta(b, TRC_HDR_TYPE(hdr) == TRC_REC_PROC ? "PR" : "CM", key, json.p,
                            t->tid);
        free(json.p);
        return 0;
    }
    default:
        return 0;
    }
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
static int summary_last_reset;

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
    summary_last_reset = 1;
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

static int64_t rec_bytes(int op, const trc_io_rec *r) {
    switch (op) {
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

/* Folds one I/O event (times in ns) into its file's summary; the last file is cached since
 * consecutive events mostly touch the same file. */
static void summary_update(int op, const trc_io_rec *r, uint64_t t0, uint64_t dur) {
    static trc_fsum *cached;
    if (summary_last_reset) {
        cached = NULL;
        summary_last_reset = 0;
    }
    const trc_opinfo *o = &trc_ops[op];
    if (!r->fhash || !(o->fields & TF_FHASH))
        return;
    trc_fsum *s = cached && cached->fhash == r->fhash ? cached : sum_get(r->fhash);
    if (!s)
        return;
    cached = s;
    if (!s->first_ns || t0 < s->first_ns)
        s->first_ns = t0;
    if (t0 + dur > s->last_ns)
        s->last_ns = t0 + dur;
    switch (o->cls) {
    case TC_READ:
    case TC_WRITE: {
        int rd = o->cls == TC_READ;
        int64_t n = rec_bytes(op, r);
        if (rd) {
            s->reads++;
            s->read_ns += dur;
            s->bytes_read += n;
            s->size_read[bucket(n)]++;
        } else {
            s->writes++;
            s->write_ns += dur;
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
        return;
    }
    /* the other calls: their count by class, their time as metadata time */
    case TC_OPEN: s->opens++; break;
    case TC_CLOSE: s->closes++; break;
    case TC_SEEK: s->seeks++; break;
    case TC_STAT: s->stats++; break;
    case TC_SYNC: s->syncs++; break;
    case TC_MMAP: s->mmaps++; break;
    default: s->metas++; break;
    }
    s->meta_ns += dur;
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
        put_int(b, "first_ts", (int64_t)((s->first_ns + trc_realtime_anchor_ns) / 1000));
        put_int(b, "last_ts", (int64_t)((s->last_ns + trc_realtime_anchor_ns) / 1000));
        trc_buf_str(b, "}}}\n");
    }
    if (sums_partial) {
        line_head_m(b, "FS", tid);
        trc_buf_str(b, "\"partial\",\"value\":{\"max_files\":");
        trc_buf_u64(b, sums_max);
        trc_buf_str(b, "}}}\n");
    }
}
