/* annot.c: the annotation API exported by libscaffold_trace.so (scaffold/trace.h). Regions live
 * in a per-thread stack of frames (so level/p_idx are right under threads); BEGIN writes a small
 * record naming the region's id and level (the flusher uses it as the parent of the events
 * inside), arguments are formatted into the frame as a JSON fragment when they are attached, and
 * the region itself is one ring record written at END. Nothing here locks or allocates. */
#include "scaffold/trace.h"
#include "trace_int.h"

#include <errno.h>
#include <string.h>

static size_t cpy(char *dst, size_t cap, const char *src) {
    size_t n = src ? strnlen(src, cap - 1) : 0;
    if (n)
        memcpy(dst, src, n);
    dst[n] = 0;
    return n;
}

static trc_thread *annot_thread(void) {
    if (!__atomic_load_n(&trc_g.active, __ATOMIC_RELAXED) || trc_busy)
        return NULL;
    trc_thread *t = trc_self;
    if (!t) {
        trc_busy = 1;
        t = trc_thread_get();
        trc_busy = 0;
    }
    return t;
}

static scaffold_trace_region api_begin(const char *name, const char *cat) {
    int saved = errno;
    trc_thread *t = annot_thread();
    if (!t || t->depth >= TRC_MAX_DEPTH) {
        errno = saved;
        return 0;
    }
    trc_frame *f = &t->frames[t->depth];
    f->id = trc_new_id(t) + 1; /* +1: handle 0 means "not traced"; the event id is id-1 */
    cpy(f->name, sizeof f->name, name && *name ? name : "region");
    cpy(f->cat, sizeof f->cat, cat && *cat ? cat : "C_APP");
    f->frag_len = 0;
    trc_busy = 1;
    trc_begin_rec *b = trc_reserve(t, sizeof *b);
    if (b) {
        b->id = f->id - 1;
        trc_publish(t, b, trc_hdr(sizeof *b, TRC_REC_BEGIN, (unsigned)t->depth + 1, 0));
    }
    trc_busy = 0;
    f->t0 = trc_clock();
    t->depth++;
    errno = saved;
    return f->id;
}

static trc_frame *find(trc_thread *t, scaffold_trace_region r, int *idx) {
    for (int i = t->depth - 1; i >= 0; i--)
        if (t->frames[i].id == r) {
            if (idx)
                *idx = i;
            return &t->frames[i];
        }
    return NULL;
}

/* Appends `,"key":` + value to the frame's fragment if it fits (else the arg is dropped). */
static void frag_add(trc_frame *f, const char *key, const char *val, size_t vlen, int quote) {
    char tmp[TRC_FRAG_MAX];
    size_t n = 0;
    char k[32];
    size_t kl = cpy(k, sizeof k, key && *key ? key : "arg");
    tmp[n++] = ',';
    tmp[n++] = '"';
    for (size_t i = 0; i < kl && n < sizeof tmp - 8; i++) {
        unsigned char c = (unsigned char)k[i];
        tmp[n++] = (c < 0x20 || c == '"' || c == '\\' || c >= 0x7f) ? '_' : (char)c;
    }
    tmp[n++] = '"';
    tmp[n++] = ':';
    if (quote)
        tmp[n++] = '"';
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < vlen && n < sizeof tmp - 8; i++) {
        unsigned char c = (unsigned char)val[i];
        if (!quote || (c >= 0x20 && c != '"' && c != '\\' && c < 0x7f)) {
            tmp[n++] = (char)c;
        } else if (c == '"' || c == '\\') {
            tmp[n++] = '\\';
            tmp[n++] = (char)c;
        } else {
            /* Control and non-ASCII bytes as \u00XX: always valid JSON. */
            tmp[n++] = '\\';
            tmp[n++] = 'u';
            tmp[n++] = '0';
            tmp[n++] = '0';
            tmp[n++] = hx[c >> 4];
            tmp[n++] = hx[c & 15];
        }
    }
    if (quote)
        tmp[n++] = '"';
    if (f->frag_len + n > sizeof f->frag)
        return;
    memcpy(f->frag + f->frag_len, tmp, n);
    f->frag_len = (uint16_t)(f->frag_len + n);
}

static void api_int(scaffold_trace_region r, const char *key, int64_t v) {
    trc_thread *t = trc_self;
    trc_frame *f = t ? find(t, r, NULL) : NULL;
    if (!f)
        return;
    char num[24];
    int i = 24;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        num[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        num[--i] = '-';
    frag_add(f, key, num + i, (size_t)(24 - i), 0);
}

static void api_str(scaffold_trace_region r, const char *key, const char *v) {
    trc_thread *t = trc_self;
    trc_frame *f = t ? find(t, r, NULL) : NULL;
    if (!f)
        return;
    frag_add(f, key, v ? v : "", v ? strnlen(v, 127) : 0, 1);
}

static void emit_frame(trc_thread *t, int i, uint64_t t1) {
    trc_frame *f = &t->frames[i];
    size_t nl = strlen(f->name), cl = strlen(f->cat);
    uint32_t size = (uint32_t)((sizeof(trc_region_rec) + nl + 1 + cl + 1 + f->frag_len + 1 + 7) &
                               ~(size_t)7);
    trc_region_rec *r = trc_reserve(t, size);
    if (!r)
        return;
    r->name_len = (uint16_t)nl;
    r->cat_len = (uint16_t)cl;
    r->frag_len = f->frag_len;
    r->id = f->id - 1;
    r->t0 = f->t0;
    r->dur = t1 - f->t0;
    char *p = (char *)(r + 1);
    memcpy(p, f->name, nl + 1);
    memcpy(p + nl + 1, f->cat, cl + 1);
    memcpy(p + nl + 1 + cl + 1, f->frag, f->frag_len);
    p[nl + 1 + cl + 1 + f->frag_len] = 0;
    trc_publish(t, r, trc_hdr(size, TRC_REC_REGION, (unsigned)i + 1, 0));
}

static void api_end(scaffold_trace_region r) {
    int saved = errno;
    trc_thread *t = trc_self;
    int idx;
    if (!t || !find(t, r, &idx) || trc_busy) {
        errno = saved;
        return;
    }
    trc_busy = 1;
    uint64_t t1 = trc_clock();
    /* Closing an outer region closes the inner ones left open (missing END on an error path). */
    for (int i = t->depth - 1; i >= idx; i--)
        if (__atomic_load_n(&trc_g.active, __ATOMIC_RELAXED))
            emit_frame(t, i, t1);
    t->depth = idx;
    trc_busy = 0;
    errno = saved;
}

void trc_emit_meta(unsigned type, const char *key, const char *value) {
    int saved = errno;
    trc_thread *t = annot_thread();
    if (!t || !key) {
        errno = saved;
        return;
    }
    trc_busy = 1;
    size_t kl = strnlen(key, 255), vl = value ? strnlen(value, 4095) : 0;
    uint32_t size = (uint32_t)((sizeof(trc_meta_rec) + kl + 1 + vl + 1 + 7) & ~(size_t)7);
    trc_meta_rec *r = trc_reserve(t, size);
    if (r) {
        r->key_len = (uint16_t)kl;
        r->val_len = (uint16_t)vl;
        char *p = (char *)(r + 1);
        memcpy(p, key, kl);
        p[kl] = 0;
        if (vl)
            memcpy(p + kl + 1, value, vl);
        p[kl + 1 + vl] = 0;
        trc_publish(t, r, trc_hdr(size, type, 0, 0));
    }
    trc_busy = 0;
    errno = saved;
}

static void api_metadata(const char *key, const char *value) { trc_emit_meta(TRC_REC_META, key, value); }

static int api_active(void) { return __atomic_load_n(&trc_g.active, __ATOMIC_RELAXED) != 0; }

void trc_annot_fork_child(trc_thread *t) {
    /* Regions opened by the parent belong to the parent's file. */
    t->depth = 0;
}

TRC_API const scaffold_trace_api scaffold_trace_api_v1 = {
    1, sizeof(scaffold_trace_api), api_begin, api_int, api_str, api_end, api_metadata, api_active};
