/* gunzip: streams the lines of one part of one trace file into its chunk. A file is plain text
 * or gzip; gzip is decoded member after member: whole members with libdeflate when available
 * (several times zlib's speed), zlib streaming otherwise and for members that are damaged or
 * larger than the whole-member buffer. A large file is read by several threads at once: each
 * part is a byte range, and its reader starts at the first gzip member that begins in the range
 * (found by scanning for the gzip header and confirmed by decoding it) or, for plain text, at
 * the first line that begins in it. After a corrupt member the reader resynchronises on the next
 * member, so damage costs only the damaged member; a truncated last member keeps every complete
 * line before the cut. */
#include "analyze/reader_int.h"

#include "core/err.h"
#include "core/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#ifdef AN_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

#define OUT_BUF (4u << 20)
#define MAX_LINE (64u << 20)
#define MEMBER_MAX (64u << 20) /* larger members are streamed through zlib */
#define PART_MIN_GZ (4u << 20)   /* compressed bytes per part, at least */
#define PART_MIN_TEXT (32u << 20)

int an_plan_parts(const char *path, int threads, int64_t part_bytes, int64_t *size) {
    struct stat st;
    *size = 0;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return 1;
    *size = (int64_t)st.st_size;
    if (threads <= 1)
        return 1;
    unsigned char mg[2] = {0, 0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return 1;
    size_t got = fread(mg, 1, 2, f);
    fclose(f);
    int gz = got == 2 && mg[0] == 0x1f && mg[1] == 0x8b;
    int64_t per = part_bytes > 0 ? part_bytes : gz ? PART_MIN_GZ : PART_MIN_TEXT;
    int64_t n = *size / per;
    if (n < 2)
        return 1;
    return n < threads ? (int)n : threads;
}

/* ------------------------------------------------------------------ lines */

typedef struct {
    char *p;
    size_t have, cap;
} obuf;

static int obuf_room(obuf *b, size_t want) {
    return want ? MEM_RESERVE(b->p, b->cap, b->have + want - 1, OUT_BUF) : 0;
}

static char *dup_bytes(const char *p, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, p, n);
        d[n] = 0;
    }
    return d;
}

/* Feeds the complete lines of b to the chunk and keeps the partial last line. A part after the
 * first keeps its first line aside (c->head): it may continue the previous part's last line. */
static int feed_lines(chunk *c, obuf *b) {
    char *s = b->p;
    size_t start = 0;
    for (;;) {
        char *nl = memchr(s + start, '\n', b->have - start);
        if (!nl)
            break;
        size_t end = (size_t)(nl - s);
        if (c->want_head) {
            c->want_head = 0;
            c->head = dup_bytes(s + start, end - start);
            c->head_n = end - start;
            if (!c->head)
                return ERR_NOMEM;
        } else {
            an_chunk_line(c, s + start, nl);
        }
        start = end + 1;
    }
    size_t rest = b->have - start;
    if (start)
        memmove(s, s + start, rest);
    b->have = rest;
    if (rest >= MAX_LINE) {
        /* A single line longer than 64 MiB is not a trace line; drop it. */
        c->malformed++;
        b->have = 0;
    }
    return 0;
}

/* The text after the last newline when the part is done: the final line of the file (v2 ends
 * with "]" and no newline; a crashed writer cuts a line), or the part's tail for merge.c. */
static void finish_lines(chunk *c, obuf *b) {
    if (!b->have)
        return;
    if (c->want_head) { /* no newline in the whole part: all of it is the head */
        c->want_head = 0;
        c->head = dup_bytes(b->p, b->have);
        c->head_n = c->head ? b->have : 0;
    } else if (c->part + 1 < c->nparts) {
        c->tail = dup_bytes(b->p, b->have);
        c->tail_n = c->tail ? b->have : 0;
    } else {
        an_rawev ev;
        if (an_parse_line(b->p, b->p + b->have, &ev) < 0) {
            c->truncated = 1;
            if (!c->note[0])
                snprintf(c->note, sizeof c->note, "the last line is incomplete (%zu bytes dropped)",
                         b->have);
        } else {
            an_chunk_line(c, b->p, b->p + b->have);
        }
    }
    b->have = 0;
}

/* ------------------------------------------------------------------ gzip members */

enum { M_OK, M_TRUNC, M_CORRUPT, M_BIG, M_NOMEM };

/* A plausible gzip member header at m (RFC 1952: magic, deflate, reserved flag bits clear). */
static int member_header(const unsigned char *m, size_t left) {
    return left >= 18 && m[0] == 0x1f && m[1] == 0x8b && m[2] == 8 && !(m[3] & 0xe0);
}

/* Decodes the member at m with zlib, streaming its lines into the chunk (or, with sink NULL,
 * only checking it). *used = compressed bytes of the member when M_OK. */
static int member_zlib(chunk *c, obuf *b, const unsigned char *m, size_t left, size_t *used,
                       int sink) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, 15 + 16) != Z_OK)
        return M_NOMEM;
    unsigned char scratch[1 << 16];
    zs.next_in = (unsigned char *)(uintptr_t)m;
    int rc = M_TRUNC;
    size_t in_left = left;
    for (;;) {
        uInt step = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
        zs.avail_in = step;
        if (sink) {
            if (obuf_room(b, 1u << 20)) {
                rc = M_NOMEM;
                break;
            }
            zs.next_out = (unsigned char *)b->p + b->have;
            zs.avail_out = (uInt)(b->cap - b->have > (1u << 30) ? (1u << 30) : b->cap - b->have);
        } else {
            zs.next_out = scratch;
            zs.avail_out = sizeof scratch;
        }
        size_t before_out = zs.avail_out;
        int zr = inflate(&zs, Z_NO_FLUSH);
        in_left -= step - zs.avail_in;
        if (sink)
            b->have += before_out - zs.avail_out;
        if (sink && feed_lines(c, b)) {
            rc = M_NOMEM;
            break;
        }
        if (zr == Z_STREAM_END) {
            rc = M_OK;
            break;
        }
        if (zr == Z_BUF_ERROR && zs.avail_in == 0 && in_left == 0) {
            rc = M_TRUNC;
            break;
        }
        if (zr != Z_OK && zr != Z_BUF_ERROR) {
            rc = M_CORRUPT;
            break;
        }
    }
    *used = left - in_left;
    inflateEnd(&zs);
    return rc;
}

/* Decodes the member at m whole (libdeflate) into b; M_BIG when it is larger than MEMBER_MAX. */
static int member_whole(void *d, obuf *b, const unsigned char *m, size_t left, size_t *used) {
#ifdef AN_HAVE_LIBDEFLATE
    size_t want = 8u << 20;
    for (;;) {
        if (obuf_room(b, want))
            return M_NOMEM;
        size_t aout = 0, ain = 0;
        enum libdeflate_result r = libdeflate_gzip_decompress_ex(d, m, left, b->p + b->have,
                                                                 b->cap - b->have, &ain, &aout);
        if (r == LIBDEFLATE_SUCCESS) {
            b->have += aout;
            *used = ain;
            return M_OK;
        }
        if (r != LIBDEFLATE_INSUFFICIENT_SPACE)
            return M_CORRUPT; /* or truncated: the zlib path tells which and recovers lines */
        if (want >= MEMBER_MAX)
            return M_BIG;
        want *= 2;
    }
#else
    (void)d;
    (void)b;
    (void)m;
    (void)left;
    (void)used;
    return M_BIG; /* everything goes through zlib streaming */
#endif
}

/* The first offset >= from (and < limit) where a whole gzip member starts. */
static size_t find_member(void *d, const unsigned char *m, size_t size, size_t from, size_t limit) {
    obuf scratch = {0};
    size_t found = SIZE_MAX;
    for (size_t p = from; p < limit && p + 18 <= size;) {
        const unsigned char *q = memchr(m + p, 0x1f, limit - p);
        if (!q)
            break;
        p = (size_t)(q - m);
        if (member_header(m + p, size - p)) {
            size_t used;
            scratch.have = 0;
            int r = member_whole(d, &scratch, m + p, size - p, &used);
            if (r == M_BIG) /* too big to decode whole: a clean zlib pass decides */
                r = member_zlib(NULL, NULL, m + p, size - p, &used, 0);
            if (r == M_OK) {
                found = p;
                break;
            }
        }
        p++;
    }
    free(scratch.p);
    return found;
}

static void load_gzip(chunk *c, const unsigned char *m, size_t size, obuf *b) {
#ifdef AN_HAVE_LIBDEFLATE
    struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
    if (!d) {
        c->oom = 1;
        return;
    }
#else
    void *d = NULL;
#endif
    size_t end = c->part + 1 < c->nparts ? (size_t)c->range_end : size;
    size_t off = c->part ? find_member(d, m, size, (size_t)c->range_start, end) : 0;
    while (off < end && off < size) {
        if (!member_header(m + off, size - off)) {
            /* Not a member start: zero padding from a preallocated file, or junk. */
            if (!c->note[0])
                snprintf(c->note, sizeof c->note,
                         "%zu bytes of non-gzip data after member %llu ignored", size - off,
                         (unsigned long long)c->members);
            break;
        }
        size_t used = 0;
        int r = member_whole(d, b, m + off, size - off, &used);
        if (r == M_OK) {
            c->members++;
            off += used;
            if (feed_lines(c, b)) {
                c->oom = 1;
                break;
            }
            continue;
        }
        if (r == M_NOMEM) {
            c->oom = 1;
            break;
        }
        /* Large, truncated or corrupt: stream it, keeping every complete line. */
        r = member_zlib(c, b, m + off, size - off, &used, 1);
        if (r == M_OK) {
            c->members++;
            off += used;
            continue;
        }
        if (r == M_NOMEM) {
            c->oom = 1;
            break;
        }
        c->truncated = 1;
        /* The partial line cut by the damage cannot be complete. */
        an_rawev ev;
        if (b->have && an_parse_line(b->p, b->p + b->have, &ev) > 0)
            an_chunk_line(c, b->p, b->p + b->have);
        b->have = 0;
        if (r == M_TRUNC) {
            if (!c->note[0])
                snprintf(c->note, sizeof c->note,
                         "gzip stream truncated inside member %llu; kept every complete line "
                         "before the cut",
                         (unsigned long long)c->members + 1);
            break;
        }
        size_t next = find_member(d, m, size, off + 1, size);
        if (!c->note[0])
            snprintf(c->note, sizeof c->note,
                     "corrupt gzip data in member %llu; kept every complete line before it%s",
                     (unsigned long long)c->members + 1,
                     next != SIZE_MAX ? " and the members after it" : "");
        if (next == SIZE_MAX)
            break;
        off = next;
    }
#ifdef AN_HAVE_LIBDEFLATE
    libdeflate_free_decompressor(d);
#endif
}

/* Plain text: the lines that begin in [range_start, range_end). */
static void load_text(chunk *c, const char *m, size_t size) {
    size_t start = (size_t)c->range_start, end = c->part + 1 < c->nparts ? (size_t)c->range_end : size;
    if (start > 0) { /* a line begins here only after a newline */
        const char *nl = memchr(m + start - 1, '\n', size - (start - 1));
        start = nl ? (size_t)(nl - m) + 1 : size;
    }
    size_t p = start;
    while (p < end && p < size) {
        const char *nl = memchr(m + p, '\n', size - p);
        if (!nl) { /* the last line, without a newline */
            an_rawev ev;
            if (an_parse_line(m + p, m + size, &ev) < 0) {
                c->truncated = 1;
                snprintf(c->note, sizeof c->note, "the last line is incomplete (%zu bytes dropped)",
                         size - p);
            } else {
                an_chunk_line(c, m + p, m + size);
            }
            break;
        }
        if ((size_t)(nl - (m + p)) >= MAX_LINE)
            c->malformed++;
        else
            an_chunk_line(c, m + p, nl);
        p = (size_t)(nl - m) + 1;
    }
}

void an_load_part(chunk *c) {
    int fd = open(c->in->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        c->failed = 1;
        snprintf(c->note, sizeof c->note, "cannot open: %s", strerror(errno));
        return;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        c->failed = 1;
        snprintf(c->note, sizeof c->note, "not a regular file");
        close(fd);
        return;
    }
    size_t size = (size_t)st.st_size;
    if (size == 0) {
        c->empty = 1; /* dftracer leaves one per forked child that traced nothing */
        close(fd);
        return;
    }
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        c->failed = 1;
        snprintf(c->note, sizeof c->note, "cannot read: %s", strerror(errno));
        return;
    }
    madvise(m, size, MADV_SEQUENTIAL);
    c->want_head = c->part > 0;
    const unsigned char *u = m;
    if (size >= 2 && u[0] == 0x1f && u[1] == 0x8b) {
        obuf b = {0};
        load_gzip(c, u, size, &b);
        if (!c->oom)
            finish_lines(c, &b);
        free(b.p);
    } else {
        c->want_head = 0; /* plain parts start on a line */
        load_text(c, m, size);
    }
    munmap(m, size);
}
