/* wrap_stdio.c: the STDIO interposers of libscaffold_trace.so. A FILE* is traced when its
 * descriptor (fileno) is, so the fd table is the only lookup and no FILE* map (or lock) is
 * needed. The slot's position field holds the stream position, advanced by the bytes each call
 * moves; fread/fwrite report `ret` in items (dftracer's convention) plus `bytes`. */
#include "trace_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int __isoc99_fscanf(FILE *fp, const char *fmt, ...);
int __isoc99_vfscanf(FILE *fp, const char *fmt, va_list ap);
/* <stdio.h> maps fscanf/vfscanf to the __isoc99_ names; the plain (pre-C99) symbols still exist
 * and are wrapped under their own assembler names. */
int trc_plain_fscanf(FILE *fp, const char *fmt, ...) __asm__("fscanf");
int trc_plain_vfscanf(FILE *fp, const char *fmt, va_list ap) __asm__("vfscanf");

#define REAL(ret, name, params) static ret(*real_##name) params
#define MAP(name)                                                                                  \
    (TRC_LIKELY(real_##name != NULL) ||                                                            \
     (real_##name = (__typeof__(real_##name))dlsym(RTLD_NEXT, #name)) != NULL)
#define NOSYS(rv)                                                                                  \
    do {                                                                                           \
        errno = ENOSYS;                                                                            \
        return rv;                                                                                 \
    } while (0)

static inline int sfd(FILE *fp) { return fp ? fileno_unlocked(fp) : -1; }
static inline uint64_t fdhash(trc_fd *s) { return __atomic_load_n(&s->phash, __ATOMIC_RELAXED); }


/* The stream's traced slot, or NULL (fast exit). */
#define STREAM(fp) trc_fd *s = trc_fd_traced(sfd(fp), TRC_FAM_STDIO)

static int mode_append(const char *mode) { return mode && strchr(mode, 'a') != NULL; }

/* ================================================================ open/close */
REAL(FILE *, fopen, (const char *, const char *));
REAL(FILE *, fopen64, (const char *, const char *));
REAL(FILE *, fdopen, (int, const char *));
REAL(FILE *, freopen, (const char *, const char *, FILE *));
REAL(FILE *, freopen64, (const char *, const char *, FILE *));
REAL(int, fclose, (FILE *));
REAL(int, pclose, (FILE *));

static FILE *fopen_common(FILE *(*real)(const char *, const char *), const char *path,
                          const char *mode) {
    if (!trc_on(TRC_FAM_STDIO))
        return real(path, mode);
    T0();
    FILE *fp = real(path, mode);
    T1();
    int traced = 0;
    uint64_t h = trc_path_classify(AT_FDCWD, path, &traced, 0);
    int fd = sfd(fp);
    if (fd >= 0)
        trc_fd_set(fd, h, traced, mode_append(mode) ? -1 : 0);
    if (traced)
        trc_emit_io(TRC_OP_fopen, fd, h, t0_, t1_, -1, 0, fp ? fd : -1, 0, 0, 0);
    TDONE();
    return fp;
}

TRC_API FILE *fopen(const char *path, const char *mode) {
    if (!MAP(fopen))
        NOSYS(NULL);
    return fopen_common(real_fopen, path, mode);
}
TRC_API FILE *fopen64(const char *path, const char *mode) {
    if (!MAP(fopen64))
        NOSYS(NULL);
    return fopen_common(real_fopen64, path, mode);
}

TRC_API FILE *fdopen(int fd, const char *mode) {
    if (!MAP(fdopen))
        NOSYS(NULL);
    trc_fd *s = trc_fd_traced(fd, TRC_FAM_STDIO);
    if (TRC_LIKELY(!s))
        return real_fdopen(fd, mode);
    T0();
    FILE *fp = real_fdopen(fd, mode);
    T1();
    trc_emit_io(TRC_OP_fdopen, fd, fdhash(s), t0_, t1_, -1, 0, fp ? fd : -1, 0, 0, 0);
    TDONE();
    return fp;
}

static FILE *freopen_common(FILE *(*real)(const char *, const char *, FILE *), const char *path,
                            const char *mode, FILE *old) {
    if (!trc_on(TRC_FAM_STDIO))
        return real(path, mode, old);
    int oldfd = sfd(old);
    T0();
    FILE *fp = real(path, mode, old);
    T1();
    if (oldfd >= 0)
        trc_fd_clear(oldfd);
    int traced = 0;
    uint64_t h = path ? trc_path_classify(AT_FDCWD, path, &traced, 0) : 0;
    int fd = sfd(fp);
    if (fd >= 0 && path)
        trc_fd_set(fd, h, traced, mode_append(mode) ? -1 : 0);
    if (traced)
        trc_emit_io(TRC_OP_freopen, fd, h, t0_, t1_, -1, 0, fp ? fd : -1, 0, 0, 0);
    TDONE();
    return fp;
}

TRC_API FILE *freopen(const char *path, const char *mode, FILE *old) {
    if (!MAP(freopen))
        NOSYS(NULL);
    return freopen_common(real_freopen, path, mode, old);
}
TRC_API FILE *freopen64(const char *path, const char *mode, FILE *old) {
    if (!MAP(freopen64))
        NOSYS(NULL);
    return freopen_common(real_freopen64, path, mode, old);
}

static int close_common(int op, int (*real)(FILE *), FILE *fp) {
    if (trc_busy || !fp)
        return real(fp);
    int fd = sfd(fp);
    trc_fd *s = trc_fd_slot(fd);
    if (!s)
        return real(fp);
    int traced = s->traced && (trc_g.active & TRC_FAM_STDIO);
    uint64_t h = fdhash(s);
    trc_fd_clear(fd); /* before closing: the number may be reused at once */
    if (!traced)
        return real(fp);
    T0();
    int ret = real(fp);
    T1();
    trc_emit_io(op, fd, h, t0_, t1_, -1, 0, ret, 0, 0, 0);
    TDONE();
    return ret;
}

TRC_API int fclose(FILE *fp) {
    if (!MAP(fclose))
        NOSYS(EOF);
    return close_common(TRC_OP_fclose, real_fclose, fp);
}
TRC_API int pclose(FILE *fp) {
    if (!MAP(pclose))
        NOSYS(-1);
    return close_common(TRC_OP_pclose, real_pclose, fp);
}

/* ================================================================ data */
REAL(size_t, fread, (void *, size_t, size_t, FILE *));
REAL(size_t, fwrite, (const void *, size_t, size_t, FILE *));

TRC_API size_t fread(void *p, size_t size, size_t n, FILE *fp) {
    if (!MAP(fread))
        NOSYS(0);
    STREAM(fp);
    if (TRC_LIKELY(!s))
        return real_fread(p, size, n, fp);
    T0();
    size_t ret = real_fread(p, size, n, fp);
    T1();
    int64_t off = s->pos;
    if (off >= 0)
        s->pos = off + (int64_t)(ret * size);
    trc_emit_io(TRC_OP_fread, sfd(fp), fdhash(s), t0_, t1_, off, (int64_t)n, (int64_t)ret,
                (int64_t)size, 0, 0);
    TDONE();
    return ret;
}

TRC_API size_t fwrite(const void *p, size_t size, size_t n, FILE *fp) {
    if (!MAP(fwrite))
        NOSYS(0);
    STREAM(fp);
    if (TRC_LIKELY(!s))
        return real_fwrite(p, size, n, fp);
    T0();
    size_t ret = real_fwrite(p, size, n, fp);
    T1();
    int64_t off = s->pos;
    if (off >= 0)
        s->pos = off + (int64_t)(ret * size);
    trc_emit_io(TRC_OP_fwrite, sfd(fp), fdhash(s), t0_, t1_, off, (int64_t)n, (int64_t)ret,
                (int64_t)size, 0, 0);
    TDONE();
    return ret;
}

REAL(char *, fgets, (char *, int, FILE *));
REAL(int, fputs, (const char *, FILE *));
REAL(int, fgetc, (FILE *));
REAL(int, getc, (FILE *));
REAL(int, fputc, (int, FILE *));
REAL(int, putc, (int, FILE *));
REAL(int, getw, (FILE *));
REAL(int, putw, (int, FILE *));
REAL(int, ungetc, (int, FILE *));

TRC_API char *fgets(char *buf, int n, FILE *fp) {
    if (!MAP(fgets))
        NOSYS(NULL);
    STREAM(fp);
    if (TRC_LIKELY(!s))
        return real_fgets(buf, n, fp);
    T0();
    char *ret = real_fgets(buf, n, fp);
    T1();
    int64_t got = ret ? (int64_t)strlen(ret) : -1; /* ret: bytes read, -1 at EOF/error */
    int64_t off = s->pos;
    if (off >= 0 && got > 0)
        s->pos = off + got;
    trc_emit_io(TRC_OP_fgets, sfd(fp), fdhash(s), t0_, t1_, off, n, got, 0, 0, 0);
    TDONE();
    return ret;
}

TRC_API int fputs(const char *str, FILE *fp) {
    if (!MAP(fputs))
        NOSYS(EOF);
    STREAM(fp);
    if (TRC_LIKELY(!s))
        return real_fputs(str, fp);
    T0();
    int ret = real_fputs(str, fp);
    T1();
    int64_t len = (int64_t)strlen(str);
    int64_t off = s->pos;
    if (off >= 0 && ret >= 0)
        s->pos = off + len;
    trc_emit_io(TRC_OP_fputs, sfd(fp), fdhash(s), t0_, t1_, off, len, ret, 0, 0, 0);
    TDONE();
    return ret;
}

/* One-item calls: ret is the libc return; the position moves by `step` bytes on success. */
#define ONE_ITEM(op, realcall, okcond, step)                                                       \
    STREAM(fp);                                                                                    \
    if (TRC_LIKELY(!s))                                                                            \
        return realcall;                                                                           \
    T0();                                                                                          \
    int ret = realcall;                                                                            \
    T1();                                                                                          \
    int64_t off = s->pos;                                                                          \
    if (off >= 0 && (okcond))                                                                      \
        s->pos = off + (step);                                                                     \
    trc_emit_io(op, sfd(fp), fdhash(s), t0_, t1_, off, 0, ret, 0, 0, 0);                           \
    TDONE();                                                                                       \
    return ret

TRC_API int fgetc(FILE *fp) {
    if (!MAP(fgetc))
        NOSYS(EOF);
    ONE_ITEM(TRC_OP_fgetc, real_fgetc(fp), ret != EOF, 1);
}
TRC_API int getc(FILE *fp) {
    if (!MAP(getc))
        NOSYS(EOF);
    ONE_ITEM(TRC_OP_getc, real_getc(fp), ret != EOF, 1);
}
TRC_API int fputc(int c, FILE *fp) {
    if (!MAP(fputc))
        NOSYS(EOF);
    ONE_ITEM(TRC_OP_fputc, real_fputc(c, fp), ret != EOF, 1);
}
TRC_API int putc(int c, FILE *fp) {
    if (!MAP(putc))
        NOSYS(EOF);
    ONE_ITEM(TRC_OP_putc, real_putc(c, fp), ret != EOF, 1);
}
TRC_API int getw(FILE *fp) {
    if (!MAP(getw))
        NOSYS(EOF);
    ONE_ITEM(TRC_OP_getw, real_getw(fp), !(ret == EOF && (feof(fp) || ferror(fp))),
             (int64_t)sizeof(int));
}
TRC_API int putw(int w, FILE *fp) {
    if (!MAP(putw))
        NOSYS(EOF);
    ONE_ITEM(TRC_OP_putw, real_putw(w, fp), ret == 0, (int64_t)sizeof(int));
}
TRC_API int ungetc(int c, FILE *fp) {
    if (!MAP(ungetc))
        NOSYS(EOF);
    ONE_ITEM(TRC_OP_ungetc, real_ungetc(c, fp), ret != EOF && off > 0, -1);
}

REAL(int, vfprintf, (FILE *, const char *, va_list));
static int (*real_vfscanf)(FILE *, const char *, va_list);
REAL(int, __isoc99_vfscanf, (FILE *, const char *, va_list));

static int vfprintf_common(FILE *fp, const char *fmt, va_list ap) {
    STREAM(fp);
    if (TRC_LIKELY(!s))
        return real_vfprintf(fp, fmt, ap);
    T0();
    int ret = real_vfprintf(fp, fmt, ap);
    T1();
    int64_t off = s->pos;
    if (off >= 0 && ret > 0)
        s->pos = off + ret;
    trc_emit_io(TRC_OP_fprintf, sfd(fp), fdhash(s), t0_, t1_, off, 0, ret, 0, 0, 0);
    TDONE();
    return ret;
}

TRC_API int fprintf(FILE *fp, const char *fmt, ...) {
    if (!MAP(vfprintf))
        NOSYS(-1);
    va_list ap;
    va_start(ap, fmt);
    int ret = vfprintf_common(fp, fmt, ap);
    va_end(ap);
    return ret;
}
TRC_API int vfprintf(FILE *fp, const char *fmt, va_list ap) {
    if (!MAP(vfprintf))
        NOSYS(-1);
    return vfprintf_common(fp, fmt, ap);
}

static void *plain_vfscanf(void) { return dlsym(RTLD_NEXT, "vfscanf"); }

static int vfscanf_common(int (*real)(FILE *, const char *, va_list), FILE *fp, const char *fmt,
                          va_list ap) {
    STREAM(fp);
    if (TRC_LIKELY(!s))
        return real(fp, fmt, ap);
    T0();
    int ret = real(fp, fmt, ap);
    T1();
    s->pos = -1; /* bytes consumed are unknown */
    trc_emit_io(TRC_OP_fscanf, sfd(fp), fdhash(s), t0_, t1_, -1, 0, ret, 0, 0, 0);
    TDONE();
    return ret;
}

TRC_API int trc_plain_fscanf(FILE *fp, const char *fmt, ...) {
    if (!real_vfscanf && !(real_vfscanf = (__typeof__(real_vfscanf))plain_vfscanf()))
        NOSYS(EOF);
    va_list ap;
    va_start(ap, fmt);
    int ret = vfscanf_common(real_vfscanf, fp, fmt, ap);
    va_end(ap);
    return ret;
}
TRC_API int __isoc99_fscanf(FILE *fp, const char *fmt, ...) {
    if (!MAP(__isoc99_vfscanf))
        NOSYS(EOF);
    va_list ap;
    va_start(ap, fmt);
    int ret = vfscanf_common(real___isoc99_vfscanf, fp, fmt, ap);
    va_end(ap);
    return ret;
}
TRC_API int trc_plain_vfscanf(FILE *fp, const char *fmt, va_list ap) {
    if (!real_vfscanf && !(real_vfscanf = (__typeof__(real_vfscanf))plain_vfscanf()))
        NOSYS(EOF);
    return vfscanf_common(real_vfscanf, fp, fmt, ap);
}
TRC_API int __isoc99_vfscanf(FILE *fp, const char *fmt, va_list ap) {
    if (!MAP(__isoc99_vfscanf))
        NOSYS(EOF);
    return vfscanf_common(real___isoc99_vfscanf, fp, fmt, ap);
}

/* ================================================================ positioning */
REAL(int, fseek, (FILE *, long, int));
REAL(int, fseeko, (FILE *, off_t, int));
REAL(int, fseeko64, (FILE *, off64_t, int));
REAL(long, ftell, (FILE *));
REAL(off_t, ftello, (FILE *));
REAL(off64_t, ftello64, (FILE *));
REAL(void, rewind, (FILE *));
REAL(int, fgetpos, (FILE *, fpos_t *));
REAL(int, fsetpos, (FILE *, const fpos_t *));
REAL(int, fgetpos64, (FILE *, fpos64_t *));
REAL(int, fsetpos64, (FILE *, const fpos64_t *));

/* After a successful seek the stream position is asked from stdio (cheap: no system call). */
static void resync(trc_fd *s, FILE *fp) {
    if (MAP(ftello64))
        s->pos = (int64_t)real_ftello64(fp);
}

#define SEEK_STREAM(op, realcall)                                                                  \
    STREAM(fp);                                                                                    \
    if (TRC_LIKELY(!s))                                                                            \
        return realcall;                                                                           \
    T0();                                                                                          \
    int ret = realcall;                                                                            \
    T1();                                                                                          \
    if (ret == 0)                                                                                  \
        resync(s, fp);                                                                             \
    trc_emit_io(op, sfd(fp), fdhash(s), t0_, t1_, (int64_t)off, 0, ret, whence, 0, 0);             \
    TDONE();                                                                                       \
    return ret

TRC_API int fseek(FILE *fp, long off, int whence) {
    if (!MAP(fseek))
        NOSYS(-1);
    SEEK_STREAM(TRC_OP_fseek, real_fseek(fp, off, whence));
}
TRC_API int fseeko(FILE *fp, off_t off, int whence) {
    if (!MAP(fseeko))
        NOSYS(-1);
    SEEK_STREAM(TRC_OP_fseeko, real_fseeko(fp, off, whence));
}
TRC_API int fseeko64(FILE *fp, off64_t off, int whence) {
    if (!MAP(fseeko64))
        NOSYS(-1);
    SEEK_STREAM(TRC_OP_fseeko, real_fseeko64(fp, off, whence));
}

#define TELL_STREAM(op, type, realcall)                                                            \
    STREAM(fp);                                                                                    \
    if (TRC_LIKELY(!s))                                                                            \
        return realcall;                                                                           \
    T0();                                                                                          \
    type ret = realcall;                                                                           \
    T1();                                                                                          \
    trc_emit_io(op, sfd(fp), fdhash(s), t0_, t1_, -1, 0, (int64_t)ret, 0, 0, 0);                   \
    TDONE();                                                                                       \
    return ret

TRC_API long ftell(FILE *fp) {
    if (!MAP(ftell))
        NOSYS(-1);
    TELL_STREAM(TRC_OP_ftell, long, real_ftell(fp));
}
TRC_API off_t ftello(FILE *fp) {
    if (!MAP(ftello))
        NOSYS(-1);
    TELL_STREAM(TRC_OP_ftello, off_t, real_ftello(fp));
}
TRC_API off64_t ftello64(FILE *fp) {
    if (!MAP(ftello64))
        NOSYS(-1);
    TELL_STREAM(TRC_OP_ftello, off64_t, real_ftello64(fp));
}
TRC_API int fgetpos(FILE *fp, fpos_t *pos) {
    if (!MAP(fgetpos))
        NOSYS(-1);
    TELL_STREAM(TRC_OP_fgetpos, int, real_fgetpos(fp, pos));
}
TRC_API int fgetpos64(FILE *fp, fpos64_t *pos) {
    if (!MAP(fgetpos64))
        NOSYS(-1);
    TELL_STREAM(TRC_OP_fgetpos, int, real_fgetpos64(fp, pos));
}

#define SETPOS_STREAM(realcall)                                                                    \
    STREAM(fp);                                                                                    \
    if (TRC_LIKELY(!s))                                                                            \
        return realcall;                                                                           \
    T0();                                                                                          \
    int ret = realcall;                                                                            \
    T1();                                                                                          \
    if (ret == 0)                                                                                  \
        resync(s, fp);                                                                             \
    trc_emit_io(TRC_OP_fsetpos, sfd(fp), fdhash(s), t0_, t1_, -1, 0, ret, 0, 0, 0);                \
    TDONE();                                                                                       \
    return ret

TRC_API int fsetpos(FILE *fp, const fpos_t *pos) {
    if (!MAP(fsetpos))
        NOSYS(-1);
    SETPOS_STREAM(real_fsetpos(fp, pos));
}
TRC_API int fsetpos64(FILE *fp, const fpos64_t *pos) {
    if (!MAP(fsetpos64))
        NOSYS(-1);
    SETPOS_STREAM(real_fsetpos64(fp, pos));
}

TRC_API void rewind(FILE *fp) {
    if (!MAP(rewind))
        return;
    STREAM(fp);
    if (TRC_LIKELY(!s)) {
        real_rewind(fp);
        return;
    }
    T0();
    real_rewind(fp);
    T1();
    s->pos = 0;
    trc_emit_io(TRC_OP_rewind, sfd(fp), fdhash(s), t0_, t1_, 0, 0, 0, 0, 0, 0);
    TDONE();
}

/* ================================================================ buffering and state */
REAL(int, fflush, (FILE *));
REAL(int, setvbuf, (FILE *, char *, int, size_t));
REAL(int, feof, (FILE *));
REAL(int, ferror, (FILE *));
REAL(void, clearerr, (FILE *));
REAL(void, flockfile, (FILE *));
REAL(int, ftrylockfile, (FILE *));
REAL(void, funlockfile, (FILE *));

#define STATE_INT(op, realcall, a1v, a2v)                                                          \
    STREAM(fp);                                                                                    \
    if (TRC_LIKELY(!s))                                                                            \
        return realcall;                                                                           \
    T0();                                                                                          \
    int ret = realcall;                                                                            \
    T1();                                                                                          \
    trc_emit_io(op, sfd(fp), fdhash(s), t0_, t1_, -1, 0, ret, a1v, a2v, 0);                        \
    TDONE();                                                                                       \
    return ret

#define STATE_VOID(op, realcall)                                                                   \
    STREAM(fp);                                                                                    \
    if (TRC_LIKELY(!s)) {                                                                          \
        realcall;                                                                                  \
        return;                                                                                    \
    }                                                                                              \
    T0();                                                                                          \
    realcall;                                                                                      \
    T1();                                                                                          \
    trc_emit_io(op, sfd(fp), fdhash(s), t0_, t1_, -1, 0, 0, 0, 0, 0);                              \
    TDONE()

TRC_API int fflush(FILE *fp) {
    if (!MAP(fflush))
        NOSYS(EOF);
    STATE_INT(TRC_OP_fflush, real_fflush(fp), 0, 0);
}
TRC_API int setvbuf(FILE *fp, char *buf, int mode, size_t size) {
    if (!MAP(setvbuf))
        NOSYS(-1);
    STATE_INT(TRC_OP_setvbuf, real_setvbuf(fp, buf, mode, size), mode, (int64_t)size);
}
TRC_API int feof(FILE *fp) {
    if (!MAP(feof))
        NOSYS(0);
    STATE_INT(TRC_OP_feof, real_feof(fp), 0, 0);
}
TRC_API int ferror(FILE *fp) {
    if (!MAP(ferror))
        NOSYS(0);
    STATE_INT(TRC_OP_ferror, real_ferror(fp), 0, 0);
}
TRC_API int ftrylockfile(FILE *fp) {
    if (!MAP(ftrylockfile))
        NOSYS(-1);
    STATE_INT(TRC_OP_ftrylockfile, real_ftrylockfile(fp), 0, 0);
}
TRC_API void clearerr(FILE *fp) {
    if (!MAP(clearerr))
        return;
    STATE_VOID(TRC_OP_clearerr, real_clearerr(fp));
}
TRC_API void flockfile(FILE *fp) {
    if (!MAP(flockfile))
        return;
    STATE_VOID(TRC_OP_flockfile, real_flockfile(fp));
}
TRC_API void funlockfile(FILE *fp) {
    if (!MAP(funlockfile))
        return;
    STATE_VOID(TRC_OP_funlockfile, real_funlockfile(fp));
}
