/* fsutil: mkdir -p, atomic files, small whole-file reads (see fsutil.h). */
#include "core/fsutil.h"

#include "core/err.h"
#include "core/fault.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_mkdir_p(const char *path) {
    char buf[FS_PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return err_set(ERR_IO, "%s: invalid directory path", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0777) != 0) {
                if (errno != EEXIST)
                    return err_set(ERR_IO, "cannot create directory %s: %s", buf,
                                   strerror(errno));
                if (!fs_is_dir(buf))
                    return err_set(ERR_IO,
                                   "cannot create directory %s: a file of that name exists", buf);
            }
            buf[i] = c;
        }
    }
    return 0;
}

int fs_atomic_open(fs_atomic *a, const char *path) {
    static atomic_uint counter;
    memset(a, 0, sizeof *a);
    size_t n = strlen(path);
    if (n + 64 >= sizeof a->tmp)
        return err_set(ERR_IO, "%s: path too long", path);
    memcpy(a->path, path, n + 1);
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path + 1) : 0;
    const char *base = path + dirlen;
    snprintf(a->tmp, sizeof a->tmp, "%.*s.%s.tmp.%ld.%u", (int)dirlen, path, base, (long)getpid(),
             atomic_fetch_add(&counter, 1));
    a->fp = fopen(a->tmp, "wb");
    if (!a->fp)
        return err_set(ERR_IO, "cannot write %s: %s", path, strerror(errno));
    /* Writers emit headers and tensors piecewise; a 1 MiB buffer turns stdio's 4 KiB write(2)
     * calls into few large ones (seen as a small-request finding in our own traces). */
    setvbuf(a->fp, NULL, _IOFBF, (size_t)1 << 20);
    return 0;
}

int fs_atomic_commit(fs_atomic *a, int do_fsync) {
    if (a->fp)
        fflush(a->fp);
    /* A kill -9 at the worst moment: the data is in the temporary file, the rename not done. */
    if (fault_hit(FAULT_KILL_AT_COMMIT, 0))
        raise(SIGKILL);
    if (!a->fp)
        return err_set(ERR_IO, "%s: file was not open", a->path);
    int bad = ferror(a->fp) || fflush(a->fp) != 0;
    int e = errno;
    if (!bad && do_fsync && fsync(fileno(a->fp)) != 0) {
        bad = 1;
        e = errno;
    }
    if (fclose(a->fp) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    a->fp = NULL;
    if (!bad && rename(a->tmp, a->path) != 0) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        unlink(a->tmp);
        return err_set(ERR_IO, "cannot write %s: %s", a->path, strerror(e));
    }
    return 0;
}

void fs_atomic_abort(fs_atomic *a) {
    if (a->fp) {
        fclose(a->fp);
        a->fp = NULL;
    }
    if (a->tmp[0])
        unlink(a->tmp);
    a->tmp[0] = '\0';
}

/* The writer's PID in a temporary's name, or 0 if the name is not one of ours. */
static long temp_writer(const char *name) {
    const char *t = name[0] == '.' ? strstr(name, ".tmp.") : NULL;
    const char *l = strstr(name, ".link.");
    const char *p = t ? t + 5 : l ? l + 6 : NULL;
    if (!p)
        return 0;
    char *end;
    long pid = strtol(p, &end, 10);
    if (pid <= 0 || end == p || (t ? *end != '.' : *end != '\0'))
        return 0;
    return pid;
}

long fs_remove_stale_temps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    long removed = 0;
    struct dirent *e;
    char p[FS_PATH_MAX + 300];
    while ((e = readdir(d)) != NULL) {
        long pid = temp_writer(e->d_name);
        if (pid <= 0 || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* alive (or not ours to judge) */
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        removed += unlink(p) == 0;
    }
    closedir(d);
    return removed;
}

/* Proves that `p`, an existing directory, takes a new entry: creates and removes a probe (a
 * directory when `dir`, else a file). access() is not proof: root passes it on /proc and on a
 * read-only bind mount, and a quota or an ACL may still refuse. 0, or errno. */
static int probe_entry(const char *p, int dir) {
    char probe[FS_PATH_MAX + 64];
    static atomic_uint counter;
    snprintf(probe, sizeof probe, "%s/.scaffold-probe.%ld.%u", p, (long)getpid(),
             atomic_fetch_add(&counter, 1));
    if (dir) {
        if (mkdir(probe, 0700) != 0)
            return errno;
        rmdir(probe);
        return 0;
    }
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return errno;
    close(fd);
    unlink(probe);
    return 0;
}

int fs_check_creatable_dir(const char *dir) {
    char p[FS_PATH_MAX];
    int rc = fs_abspath(dir, p, sizeof p);
    if (rc)
        return err_set(ERR_IO, "%s: path too long", dir);
    for (int missing = 0;; missing = 1) {
        struct stat st;
        if (stat(p, &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                return err_set(ERR_IO, "cannot create directory %s: %s is not a directory", dir,
                               p);
            /* The nearest existing directory must take what will be created in it. */
            int e = probe_entry(p, missing);
            if (e)
                return err_set(ERR_IO, "cannot %s directory %s: %s refuses new entries (%s)",
                               missing ? "create" : "write", dir, p, strerror(e));
            return 0;
        }
        if (errno != ENOENT)
            return err_set(ERR_IO, "cannot create directory %s: %s: %s", dir, p, strerror(errno));
        char *slash = strrchr(p, '/');
        if (!slash || slash == p)
            return 0; /* the root exists */
        *slash = '\0';
    }
}

int fs_write_file(const char *path, const void *data, size_t n, int do_fsync) {
    fs_atomic a;
    int rc = fs_atomic_open(&a, path);
    if (rc)
        return rc;
    if (n && fwrite(data, 1, n, a.fp) != n) {
        int e = errno;
        fs_atomic_abort(&a);
        return err_set(ERR_IO, "cannot write %s: %s", path, strerror(e));
    }
    return fs_atomic_commit(&a, do_fsync);
}

FILE *fs_open_read(const char *path) {
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (f && fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        errno = EISDIR;
        return NULL;
    }
    return f;
}

int fs_read_file(const char *path, char **data, size_t *n) {
    FILE *f = fs_open_read(path);
    if (!f)
        return err_set(ERR_IO, "cannot read %s: %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            return err_set(ERR_NOMEM, "%s: out of memory", path);
        }
        len += fread(buf + len, 1, cap - len - 1, f);
        if (len < cap - 1)
            break;
        cap *= 2;
        char *nb = realloc(buf, cap);
        if (!nb)
            free(buf);
        buf = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return err_set(ERR_IO, "cannot read %s", path);
    }
    buf[len] = '\0';
    *data = buf;
    if (n)
        *n = len;
    return 0;
}

int fs_read_records(const char *path, size_t elt, int (*parse)(char *line, int lineno, void *rec),
                    void **out, int *n) {
    *out = NULL;
    *n = 0;
    if (!fs_exists(path))
        return 0;
    char *txt = NULL;
    int rc = fs_read_file(path, &txt, NULL);
    if (rc)
        return rc;
    size_t lines = 1;
    for (const char *q = txt; *q; q++)
        lines += *q == '\n';
    char *r = malloc(lines * elt); /* one record per line at most */
    char *save = NULL;
    int lineno = 0;
    for (char *l = strtok_r(txt, "\n", &save); l && r; l = strtok_r(NULL, "\n", &save))
        *n += parse(l, lineno++, r + (size_t)*n * elt);
    free(txt);
    if (!r)
        return err_set(ERR_NOMEM, "out of memory reading %s", path);
    *out = r;
    return 0;
}

int fs_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

int fs_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int fs_rm_rf(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : err_set(ERR_IO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d)
            return err_set(ERR_IO, "cannot open directory %s: %s", path, strerror(errno));
        struct dirent *e;
        char sub[FS_PATH_MAX];
        int rc = 0;
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            if ((rc = fs_rm_rf(sub)) != 0)
                break;
        }
        closedir(d);
        if (rc)
            return rc;
        if (rmdir(path) != 0)
            return err_set(ERR_IO, "cannot remove %s: %s", path, strerror(errno));
        return 0;
    }
    if (unlink(path) != 0)
        return err_set(ERR_IO, "cannot remove %s: %s", path, strerror(errno));
    return 0;
}

int fs_abspath(const char *path, char *out, size_t outsz) {
    char tmp[FS_PATH_MAX];
    if (path[0] == '/') {
        if (strlen(path) >= sizeof tmp)
            return err_set(ERR_RANGE, "%s: path too long", path);
        strcpy(tmp, path);
    } else {
        char cwd[FS_PATH_MAX];
        if (!getcwd(cwd, sizeof cwd))
            return err_set(ERR_IO, "cannot get working directory: %s", strerror(errno));
        if ((size_t)snprintf(tmp, sizeof tmp, "%s/%s", cwd, path) >= sizeof tmp)
            return err_set(ERR_RANGE, "%s: path too long", path);
    }
    /* Normalise component by component into out. */
    size_t o = 0;
    const char *p = tmp;
    if (outsz < 2)
        return err_set(ERR_RANGE, "%s: path too long", path);
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *q = p;
        while (*q && *q != '/')
            q++;
        size_t len = (size_t)(q - p);
        if (len == 1 && p[0] == '.') {
            /* skip */
        } else if (len == 2 && p[0] == '.' && p[1] == '.') {
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--;
        } else {
            if (o + 1 + len + 1 > outsz)
                return err_set(ERR_RANGE, "%s: path too long", path);
            out[o++] = '/';
            memcpy(out + o, p, len);
            o += len;
        }
        p = q;
    }
    if (o == 0)
        out[o++] = '/';
    out[o] = '\0';
    return 0;
}

int fs_check_writable_dir(const char *dir) {
    int rc = fs_mkdir_p(dir);
    if (rc)
        return rc;
    char probe[FS_PATH_MAX];
    snprintf(probe, sizeof probe, "%s/.scaffold_probe.%ld", dir, (long)getpid());
    FILE *f = fopen(probe, "wb");
    if (!f)
        return err_set(ERR_IO, "directory %s is not writable: %s", dir, strerror(errno));
    fclose(f);
    unlink(probe);
    return 0;
}
