/* gunzip: streams the lines of one trace file into its chunk: plain text, or gzip decoded member
 * after member (libdeflate for whole members when available, zlib streaming otherwise and for
 * damaged members), keeping every complete line before a truncation or corruption. */
#include "analyze/reader_int.h"

#include "core/err.h"

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
        an_chunk_line(c, b + start, nl);
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
                an_chunk_line(c, p, e);
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

void an_load_file(chunk *c) {
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
                an_chunk_line(c, out, out + have);
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
