/* linez.c: the flusher's fast gzip encoder, used when the flusher falls behind the application.
 *
 * Consecutive trace lines of the same kind differ in a few fields (id, ts, offset...). The
 * formatter records, for each event line, a key (its op) and where each of its fields ends
 * (trc_lines); this encoder then writes every line as deflate matches against the previous line
 * of the same key, field by field: a field equal to the previous one extends the running match,
 * a different field contributes its common prefix to the match and the rest as literals. No
 * hash table and no search: about 20 deflate symbols per line with the fixed Huffman code
 * (RFC 1951 block type 1), several times faster than a general compressor, at about twice the
 * size of libdeflate level 1. Any line without a description is written as literals, so the
 * output is always a valid gzip member of exactly the given text. */
#include "trace_int.h"

#include <string.h>
#ifdef TRC_HAVE_LIBDEFLATE
#include <libdeflate.h>
#else
#include <zlib.h>
#endif

/* ---------------------------------------------------------------- fixed Huffman code */
typedef struct {
    uint16_t code; /* bit-reversed, ready for an LSB-first stream */
    uint8_t len;
} hcode;

static hcode lit[286];     /* literal/length symbols */
static hcode dist[30];     /* distance symbols */
static uint8_t len_sym[259], len_extra_bits[259]; /* by match length 3..258 */
static uint16_t len_extra[259];
static int ready;

static uint16_t reverse(uint16_t c, int n) {
    uint16_t r = 0;
    for (int i = 0; i < n; i++)
        r = (uint16_t)(r << 1 | ((c >> i) & 1));
    return r;
}

static void init_tables(void) {
    for (int s = 0; s < 286; s++) {
        int n, c;
        if (s < 144)
            n = 8, c = 0x30 + s;
        else if (s < 256)
            n = 9, c = 0x190 + (s - 144);
        else if (s < 280)
            n = 7, c = s - 256;
        else
            n = 8, c = 0xc0 + (s - 280);
        lit[s] = (hcode){reverse((uint16_t)c, n), (uint8_t)n};
    }
    for (int s = 0; s < 30; s++)
        dist[s] = (hcode){reverse((uint16_t)s, 5), 5};
    /* Length symbols 257..284 cover 3..257 with extra bits; 285 is exactly 258. */
    static const uint16_t base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                      31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
    static const uint8_t ebits[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                      2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
    for (int k = 0; k < 29; k++) {
        int hi = k < 28 ? base[k] + (1 << ebits[k]) - 1 : 258;
        for (int l = base[k]; l <= hi && l <= 258; l++) {
            len_sym[l] = (uint8_t)k;
            len_extra_bits[l] = ebits[k];
            len_extra[l] = (uint16_t)(l - base[k]);
        }
    }
    len_sym[258] = 28;
    len_extra_bits[258] = 0;
    len_extra[258] = 0;
    ready = 1;
}

/* Distance d (1..32768): symbol and extra bits. */
static inline void dist_code(unsigned d, unsigned *sym, unsigned *nb, unsigned *extra) {
    if (d <= 4) {
        *sym = d - 1;
        *nb = 0;
        *extra = 0;
        return;
    }
    unsigned x = d - 1;
    unsigned hb = 31u - (unsigned)__builtin_clz(x); /* highest bit, >= 2 */
    unsigned second = (x >> (hb - 1)) & 1;
    *sym = 2 * hb + second;
    *nb = hb - 1;
    *extra = x & ((1u << (hb - 1)) - 1);
}

/* ---------------------------------------------------------------- bit writer */
typedef struct {
    unsigned char *out;
    uint64_t acc;
    int n;
} bits;

static inline void put(bits *w, uint64_t v, int n) {
    w->acc |= v << w->n;
    w->n += n;
    if (w->n >= 32) {
        uint32_t word = (uint32_t)w->acc;
        memcpy(w->out, &word, 4);
        w->out += 4;
        w->acc >>= 32;
        w->n -= 32;
    }
}

static inline void put_lit(bits *w, unsigned char c) { put(w, lit[c].code, lit[c].len); }

static void put_lits(bits *w, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        put_lit(w, (unsigned char)s[i]);
}

/* A match of len bytes at distance d; short runs are cheaper (and legal) as literals. */
static void put_match(bits *w, const char *s, size_t len, unsigned d) {
    if (len < 3) {
        put_lits(w, s, len);
        return;
    }
    unsigned dsym, dnb, dextra;
    dist_code(d, &dsym, &dnb, &dextra);
    while (len >= 3) {
        size_t l = len > 258 ? 258 : len;
        if (len > 258 && len - 258 < 3)
            l = len - 3; /* keep a legal (>= 3) remainder */
        const hcode *c = &lit[257 + len_sym[l]];
        put(w, c->code, c->len);
        if (len_extra_bits[l])
            put(w, len_extra[l], len_extra_bits[l]);
        put(w, dist[dsym].code, 5);
        if (dnb)
            put(w, dextra, (int)dnb);
        len -= l;
        s += l;
    }
    put_lits(w, s, len);
}

/* ---------------------------------------------------------------- encoder */
size_t trc_linez_bound(size_t n) { return n + n / 8 + 64; }

static uint32_t crc32_of(const char *p, size_t n) {
#ifdef TRC_HAVE_LIBDEFLATE
    return libdeflate_crc32(0, p, n);
#else
    return (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const unsigned char *)p, (uInt)n);
#endif
}

size_t trc_linez_encode(const char *text, size_t n, const trc_line *lines, size_t nlines,
                        unsigned char *out) {
    if (!ready)
        init_tables();
    static const unsigned char gz[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
    memcpy(out, gz, sizeof gz);
    bits w = {out + sizeof gz, 0, 0};
    put(&w, 1, 1); /* BFINAL: one block */
    put(&w, 1, 2); /* BTYPE 01: fixed Huffman codes */
    const trc_line *prev[TRC_LINE_KEYS] = {0};
    size_t pos = 0;
    for (size_t i = 0; i < nlines; i++) {
        const trc_line *L = &lines[i];
        if (L->start < pos || L->start > n)
            continue;
        put_lits(&w, text + pos, L->start - pos); /* text between described lines */
        pos = L->start;
        const trc_line *P = prev[L->key];
        prev[L->key] = L;
        if (!P || P->npieces != L->npieces || L->start - P->start > 32768 - TRC_LINE_MAX) {
            continue; /* no usable model: the line goes out as literals with the next gap */
        }
        /* Field by field against the previous line of the same key. */
        size_t run = 0;           /* pending match length */
        const char *run_src = 0;  /* first byte of the pending match in the current line */
        unsigned run_dist = 0;
        size_t cb = L->start, pb = P->start;
        for (int k = 0; k < L->npieces; k++) {
            size_t ce = L->start + L->ends[k], pe = P->start + P->ends[k];
            size_t cl = ce - cb, pl = pe - pb, c = 0;
            const char *cs = text + cb, *ps = text + pb;
            size_t m = cl < pl ? cl : pl;
            while (c < m && cs[c] == ps[c])
                c++;
            unsigned d = (unsigned)(cb - pb);
            if (c && run && d == run_dist) {
                run += c; /* contiguous in both lines: one longer match */
            } else if (c) {
                if (run)
                    put_match(&w, run_src, run, run_dist);
                run = c;
                run_src = cs;
                run_dist = d;
            }
            if (c < cl) {
                if (run)
                    put_match(&w, run_src, run, run_dist);
                run = 0;
                put_lits(&w, cs + c, cl - c);
            }
            cb = ce;
            pb = pe;
        }
        if (run)
            put_match(&w, run_src, run, run_dist);
        pos = cb;
    }
    put_lits(&w, text + pos, n - pos);
    put(&w, lit[256].code, lit[256].len); /* end of block */
    while (w.n > 0) {                     /* flush to a byte boundary */
        *w.out++ = (unsigned char)w.acc;
        w.acc >>= 8;
        w.n -= 8;
    }
    uint32_t crc = crc32_of(text, n), isize = (uint32_t)n;
    unsigned char tr[8] = {(unsigned char)crc,         (unsigned char)(crc >> 8),
                           (unsigned char)(crc >> 16), (unsigned char)(crc >> 24),
                           (unsigned char)isize,       (unsigned char)(isize >> 8),
                           (unsigned char)(isize >> 16), (unsigned char)(isize >> 24)};
    memcpy(w.out, tr, 8);
    return (size_t)(w.out + 8 - out);
}
