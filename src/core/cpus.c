/* cpus: the CPUs given to this process (see cpus.h). */
#include "core/cpus.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Quota of one cgroup folder: v2 "max 100000" or "QUOTA PERIOD" in cpu.max, v1 the two cfs
 * files; 0 when none. */
static double quota_of(const char *dir) {
    char p[4200];
    long long q = -1, per = 0;
    snprintf(p, sizeof p, "%s/cpu.max", dir);
    FILE *f = fopen(p, "r");
    if (f) {
        char first[32] = "";
        if (fscanf(f, "%31s %lld", first, &per) == 2 && strcmp(first, "max"))
            q = atoll(first);
        fclose(f);
    } else {
        snprintf(p, sizeof p, "%s/cpu.cfs_quota_us", dir);
        if ((f = fopen(p, "r"))) {
            if (fscanf(f, "%lld", &q) != 1)
                q = -1;
            fclose(f);
        }
        snprintf(p, sizeof p, "%s/cpu.cfs_period_us", dir);
        if ((f = fopen(p, "r"))) {
            if (fscanf(f, "%lld", &per) != 1)
                per = 0;
            fclose(f);
        }
    }
    return q > 0 && per > 0 ? (double)q / (double)per : 0;
}

/* The tightest quota of `dir` and its ancestors down to `top`. */
static double quota_walk(char *dir, size_t top) {
    double best = 0;
    for (;;) {
        double q = quota_of(dir);
        if (q > 0 && (best == 0 || q < best))
            best = q;
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < top)
            break;
        *slash = '\0';
    }
    return best;
}

double cpus_cgroup_quota(const char *proc_cgroup, const char *root) {
    double best = 0;
    const char *line = proc_cgroup;
    while (line && *line) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[1024];
        if (len < sizeof buf) {
            memcpy(buf, line, len);
            buf[len] = '\0';
            /* "ID:CONTROLLERS:PATH": v2 has ID 0 and no controllers, v1 lists "cpu" */
            char *c1 = strchr(buf, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
            if (c2) {
                *c2 = '\0';
                const char *ctl = c1 + 1, *path = c2 + 1;
                char dir[4200];
                int v2 = !*ctl, v1 = 0;
                for (const char *t = ctl; !v2 && *t;) { /* "cpu" in "cpu,cpuacct" */
                    size_t n = strcspn(t, ",");
                    v1 |= n == 3 && !strncmp(t, "cpu", 3);
                    t += n + (t[n] == ',');
                }
                if (v1 || v2) {
                    /* The folder of the process, or (in a container, whose cgroup is mounted
                     * as the root) the root's own. */
                    const char *sub = v2 ? "" : !strcmp(ctl, "cpu") ? "/cpu" : "/cpu,cpuacct";
                    char mount[1100];
                    snprintf(mount, sizeof mount, "%s%s", root, sub);
                    if (v1) {
                        FILE *probe;
                        snprintf(dir, sizeof dir, "%s/cpu.cfs_period_us", mount);
                        if (!(probe = fopen(dir, "r")))
                            snprintf(mount, sizeof mount, "%s/cpu", root);
                        else
                            fclose(probe);
                    }
                    snprintf(dir, sizeof dir, "%s%s", mount, strcmp(path, "/") ? path : "");
                    double q = quota_walk(dir, strlen(mount));
                    snprintf(dir, sizeof dir, "%s", mount);
                    double qr = quota_of(dir);
                    if (q > 0 && (best == 0 || q < best))
                        best = q;
                    if (qr > 0 && (best == 0 || qr < best))
                        best = qr;
                }
            }
        }
        line = end ? end + 1 : NULL;
    }
    return best;
}

void cpus_probe(cpus_given *g) {
    memset(g, 0, sizeof *g);
    cpu_set_t s;
    CPU_ZERO(&s);
    if (sched_getaffinity(0, sizeof s, &s) == 0)
        g->mask = CPU_COUNT(&s);
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f) {
        char txt[8192];
        size_t n = fread(txt, 1, sizeof txt - 1, f);
        txt[n] = '\0';
        fclose(f);
        g->quota = cpus_cgroup_quota(txt, "/sys/fs/cgroup");
    }
    const char *t = getenv("SLURM_CPUS_PER_TASK");
    char *end;
    long v = t ? strtol(t, &end, 10) : 0;
    g->per_task = t && *t && !*end && v > 0 && v < 1 << 20 ? (int)v : 0;
}

int cpus_threads_per_rank(const cpus_given *g, int sharing) {
    int n = g->mask > 0 ? g->mask : 1;
    if (g->quota > 0 && floor(g->quota) < n)
        n = g->quota >= 1 ? (int)floor(g->quota) : 1;
    n /= sharing > 1 ? sharing : 1;
    if (g->per_task > 0 && g->per_task < n)
        n = g->per_task;
    return n > 0 ? n : 1;
}

static char cpus_wait[128];

void cpus_set_wait_note(const char *note) {
    snprintf(cpus_wait, sizeof cpus_wait, "%s", note ? note : "");
}

const char *cpus_wait_note(void) {
    return cpus_wait;
}
