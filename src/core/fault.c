/* fault: the fault-injection table, parsed once from the environment (see fault.h). */
#include "core/fault.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    const char *env, *fmt, *what;
    int keyed, counted, nvals;
} fault_desc;

static const fault_desc fault_table[FAULT_NPOINTS] = {
#define FAULT_DESC(name, keyed, counted, nvals, fmt, what)                                          \
    {"SCAFFOLD_FAULT_" #name, fmt, what, keyed, counted, nvals},
    FAULT_POINTS(FAULT_DESC)
#undef FAULT_DESC
};

static struct {
    int armed;
    long vals[FAULT_MAX_VALS];
    atomic_long hits;   /* matching hits so far */
    atomic_long fire_at; /* counted points: the hit that fires */
} fault_state[FAULT_NPOINTS];

static pthread_once_t fault_once = PTHREAD_ONCE_INIT;

/* "A:B" or "A" with exactly nvals integers. */
static int fault_parse(const char *s, int nvals, long *v) {
    const char *p = s;
    for (int i = 0; i < nvals; i++) {
        char *end;
        errno = 0;
        v[i] = strtol(p, &end, 10);
        if (errno || end == p)
            return -1;
        p = end;
        if (i + 1 < nvals) {
            if (*p != ':')
                return -1;
            p++;
        }
    }
    return *p ? -1 : 0;
}

static void fault_load(void) {
    for (int i = 0; i < FAULT_NPOINTS; i++) {
        const fault_desc *d = &fault_table[i];
        const char *e = getenv(d->env);
        atomic_store(&fault_state[i].fire_at, -1);
        if (!e || !*e)
            continue;
        long v[FAULT_MAX_VALS] = {0};
        if (fault_parse(e, d->nvals, v) != 0) {
            fprintf(stderr, "scaffold: ignoring %s='%s': expected %s (%s)\n", d->env, e, d->fmt,
                    d->what);
            continue;
        }
        for (int k = 0; k < FAULT_MAX_VALS; k++)
            fault_state[i].vals[k] = v[k];
        /* The count is the last value of a counted point; 0 or less disarms it. */
        long count = d->counted ? v[d->nvals - 1] : 1;
        if (count < 1)
            continue;
        fault_state[i].armed = 1;
        atomic_store(&fault_state[i].fire_at, count);
    }
}

int fault_hit(fault_point p, long key) {
    pthread_once(&fault_once, fault_load);
    if ((unsigned)p >= FAULT_NPOINTS)
        return 0;
    long at = atomic_load(&fault_state[p].fire_at);
    if (at < 1)
        return 0;
    if (fault_table[p].keyed && fault_state[p].armed && key != fault_state[p].vals[0])
        return 0;
    return atomic_fetch_add(&fault_state[p].hits, 1) + 1 == at;
}

long fault_arg(fault_point p, int i) {
    pthread_once(&fault_once, fault_load);
    if ((unsigned)p >= FAULT_NPOINTS || i < 0 || i >= FAULT_MAX_VALS || !fault_state[p].armed)
        return -1;
    return fault_state[p].vals[i];
}

void fault_arm(fault_point p, long n) {
    pthread_once(&fault_once, fault_load);
    if ((unsigned)p >= FAULT_NPOINTS || n < 1)
        return;
    atomic_store(&fault_state[p].fire_at, atomic_load(&fault_state[p].hits) + n);
}

const char *fault_env(fault_point p) {
    return (unsigned)p < FAULT_NPOINTS ? fault_table[p].env : "";
}

const char *fault_format(fault_point p) {
    return (unsigned)p < FAULT_NPOINTS ? fault_table[p].fmt : "";
}

const char *fault_what(fault_point p) {
    return (unsigned)p < FAULT_NPOINTS ? fault_table[p].what : "";
}
