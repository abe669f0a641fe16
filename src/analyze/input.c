/* input: expands the analyzer's arguments (files, directories walked recursively for *.pfw and
 * *.pfw.gz, shell globs) into a sorted list of trace files without duplicates. */
#include "analyze/trace.h"

#include "core/err.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    char **v;
    size_t n, cap;
} strvec;

static int strvec_push(strvec *s, const char *p) {
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        char **v = realloc(s->v, nc * sizeof *v);
        if (!v)
            return err_set(ERR_NOMEM, "analyze: out of memory listing inputs");
        s->v = v;
        s->cap = nc;
    }
    s->v[s->n] = strdup(p);
    if (!s->v[s->n])
        return err_set(ERR_NOMEM, "analyze: out of memory listing inputs");
    s->n++;
    return 0;
}

static int is_trace_name(const char *name) {
    size_t n = strlen(name);
    return (n > 4 && !strcmp(name + n - 4, ".pfw")) || (n > 7 && !strcmp(name + n - 7, ".pfw.gz"));
}

static int walk_dir(const char *dir, strvec *out, int depth) {
    if (depth > 32)
        return 0;
    DIR *d = opendir(dir);
    if (!d)
        return err_set(ERR_IO, "analyze: cannot open directory %s: %s", dir, strerror(errno));
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        size_t len = strlen(dir) + strlen(de->d_name) + 2;
        char *p = malloc(len);
        if (!p) {
            rc = err_set(ERR_NOMEM, "analyze: out of memory listing %s", dir);
            break;
        }
        snprintf(p, len, "%s/%s", dir, de->d_name);
        struct stat st;
        if (stat(p, &st) == 0) {
            if (S_ISDIR(st.st_mode))
                rc = walk_dir(p, out, depth + 1);
            else if (S_ISREG(st.st_mode) && is_trace_name(de->d_name))
                rc = strvec_push(out, p);
        }
        free(p);
    }
    closedir(d);
    return rc;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int an_expand_inputs(const char *const *paths, int npaths, char ***out, size_t *nout) {
    strvec v = {0};
    int rc = 0;
    *out = NULL;
    *nout = 0;
    for (int i = 0; i < npaths && !rc; i++) {
        const char *p = paths[i];
        struct stat st;
        if (stat(p, &st) == 0) {
            if (S_ISDIR(st.st_mode)) {
                size_t before = v.n;
                rc = walk_dir(p, &v, 0);
                if (!rc && v.n == before)
                    rc = err_set(ERR_USAGE,
                                 "analyze: directory %s holds no trace files (*.pfw, *.pfw.gz); "
                                 "point at the folder the tracer wrote (DFTRACER_LOG_FILE prefix)",
                                 p);
            } else {
                rc = strvec_push(&v, p);
            }
        } else if (strpbrk(p, "*?[")) {
            glob_t g;
            int gr = glob(p, 0, NULL, &g);
            if (gr != 0) {
                rc = err_set(ERR_USAGE, "analyze: pattern %s matches no file", p);
            } else {
                size_t before = v.n;
                for (size_t k = 0; k < g.gl_pathc && !rc; k++) {
                    struct stat s2;
                    if (stat(g.gl_pathv[k], &s2) == 0 && S_ISDIR(s2.st_mode))
                        rc = walk_dir(g.gl_pathv[k], &v, 0);
                    else
                        rc = strvec_push(&v, g.gl_pathv[k]);
                }
                if (!rc && v.n == before)
                    rc = err_set(ERR_USAGE, "analyze: pattern %s matches no trace file", p);
            }
            globfree(&g);
        } else {
            rc = err_set(ERR_USAGE, "analyze: %s: %s (give trace files, directories or globs)", p,
                         strerror(errno));
        }
    }
    if (rc) {
        for (size_t i = 0; i < v.n; i++)
            free(v.v[i]);
        free(v.v);
        return rc;
    }
    qsort(v.v, v.n, sizeof *v.v, cmp_str);
    /* Drop duplicates (a file named twice, or by a path and by its directory). */
    size_t w = 0;
    for (size_t i = 0; i < v.n; i++) {
        if (w && !strcmp(v.v[w - 1], v.v[i])) {
            free(v.v[i]);
            continue;
        }
        v.v[w++] = v.v[i];
    }
    *out = v.v;
    *nout = w;
    return 0;
}
