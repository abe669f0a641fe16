/* fsutil: filesystem helpers shared by every writer: mkdir -p, and atomic file creation
 * (write to a temporary name in the same directory, optionally fsync, then rename), so no
 * reader ever sees a half-written file under its final name. */
#ifndef SCAFFOLD_CORE_FSUTIL_H
#define SCAFFOLD_CORE_FSUTIL_H

#include <stddef.h>
#include <stdio.h>

#define FS_PATH_MAX 4096

/* An atomic output file: write through `fp`, then fs_atomic_commit() or fs_atomic_abort(). */
typedef struct fs_atomic {
    FILE *fp;
    char tmp[FS_PATH_MAX];
    char path[FS_PATH_MAX];
} fs_atomic;

/* Creates every missing directory of `path` (mode 0777 & umask). 0 or ERR_IO. */
int fs_mkdir_p(const char *path);

/* Opens `<dir>/.<name>.tmp.<pid>.<n>` for writing. 0 or ERR_IO (message names `path`). */
int fs_atomic_open(fs_atomic *a, const char *path);

/* Flushes, optionally fsyncs, closes and renames onto the final path. On failure the temporary
 * file is removed. 0 or ERR_IO. Fault point FAULT_KILL_AT_COMMIT (core/fault.h) sits between the
 * data and the rename. */
int fs_atomic_commit(fs_atomic *a, int do_fsync);

/* Removes the temporaries that writers which no longer run left in `dir` (a kill -9 inside
 * fs_atomic_commit leaves `.NAME.tmp.PID.N`; a hard-link swap leaves `NAME.link.PID`): those
 * whose PID is not a live process of this host. Files of live writers are kept. Returns the
 * number removed (0 when dir does not exist). */
long fs_remove_stale_temps(const char *dir);

/* Proves, leaving nothing behind, that directory `dir` exists and takes new files, or can be
 * created: a probe entry is created and removed in `dir`, or in its nearest existing ancestor (a
 * probe directory). 0 or ERR_IO naming the path that blocks it. */
int fs_check_creatable_dir(const char *dir);

/* Closes and removes the temporary file (safe to call twice). */
void fs_atomic_abort(fs_atomic *a);

/* Writes `n` bytes atomically to `path`. 0 or ERR_IO. */
int fs_write_file(const char *path, const void *data, size_t n, int do_fsync);

/* fopen(path, "rb") for a file that must not be a directory (fopen succeeds on one and the
 * reads then fail with odd sizes): NULL with errno = EISDIR for a directory. */
FILE *fs_open_read(const char *path);

/* Reads a whole file into a NUL-terminated malloc'ed buffer. 0 or ERR_IO/ERR_NOMEM. */
int fs_read_file(const char *path, char **data, size_t *n);

/* The records of an optional text file, one per line (lineno from 0, empty lines skipped) that
 * parse() takes (returns 1 after filling rec, elt bytes): *out malloc'ed, *n of them; a missing
 * file gives *out = NULL, *n = 0. 0, or ERR_IO/ERR_NOMEM naming the file. */
int fs_read_records(const char *path, size_t elt, int (*parse)(char *line, int lineno, void *rec),
                    void **out, int *n);

/* 1 if `path` exists (any type), 0 otherwise. */
int fs_exists(const char *path);

/* 1 if `path` is a directory. */
int fs_is_dir(const char *path);

/* Removes a directory tree (like rm -rf). 0 or ERR_IO. */
int fs_rm_rf(const char *path);

/* Makes `path` absolute (relative to the working directory) without resolving links;
 * removes "." and ".." components and duplicate slashes. 0 or ERR_RANGE if too long. */
int fs_abspath(const char *path, char *out, size_t outsz);

/* Checks that a directory can be created and written: creates it (and parents), then creates
 * and removes a probe file. 0 or ERR_IO naming the directory. */
int fs_check_writable_dir(const char *dir);

#endif
