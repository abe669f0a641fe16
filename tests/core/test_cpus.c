/* test_cpus: the CPUs given to a process (core/cpus.h): the cgroup CPU quota read from fake
 * cgroup trees (v2 cpu.max, v1 cfs files, ancestors, a container's root, no quota, junk) and the
 * threads per rank from mask, quota, SLURM_CPUS_PER_TASK and the ranks sharing the mask. */
#include "core/cpus.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256];

static void put(const char *rel, const char *text) {
    char p[512], cmd[600];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", p);
    if (system(cmd) != 0)
        return;
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void clean(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'/*", root);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot clean %s\n", root);
}

static void quota(const char *name, const char *cg, double want) {
    double q = cpus_cgroup_quota(cg, root);
    CHECK(q > want - 1e-9 && q < want + 1e-9, "%s: quota %g, wanted %g", name, q, want);
}

int main(void) {
    snprintf(root, sizeof root, "%s/scaffold-cpus.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    /* cgroup v2: the process's folder, its ancestors (the tightest wins), "max" = none. */
    put("job/step/cpu.max", "max 100000\n");
    put("job/cpu.max", "150000 100000\n");
    quota("v2 ancestor's quota", "0::/job/step\n", 1.5);
    put("job/step/cpu.max", "100000 100000\n");
    quota("v2 own quota tighter", "0::/job/step\n", 1.0);
    clean();
    put("cpu.max", "max 100000\n");
    quota("v2 no quota", "0::/\n", 0);
    /* A container: /proc/self/cgroup names a path the mounted tree does not have; the root's
     * own file is the container's limit. */
    put("cpu.max", "400000 100000\n");
    quota("v2 container root", "0::/docker/abc\n", 4.0);
    clean();
    /* cgroup v1: the cpu controller's cfs files (in "cpu" or "cpu,cpuacct"), -1 = none. */
    put("cpu/slurm/job1/cpu.cfs_quota_us", "200000\n");
    put("cpu/slurm/job1/cpu.cfs_period_us", "100000\n");
    put("cpu/cpu.cfs_quota_us", "-1\n");
    put("cpu/cpu.cfs_period_us", "100000\n");
    quota("v1 job quota", "4:memory:/x\n3:cpu:/slurm/job1\n1:cpuacct:/\n", 2.0);
    quota("v1 no quota at the root", "3:cpu:/\n", 0);
    clean();
    put("cpu,cpuacct/cpu.cfs_quota_us", "50000\n");
    put("cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    quota("v1 cpu,cpuacct", "2:cpu,cpuacct:/\n", 0.5);
    /* Nothing readable, junk: no quota. */
    clean();
    quota("no cgroup files", "0::/a\n", 0);
    put("cpu.max", "lots\n");
    quota("junk cpu.max", "0::/\n", 0);
    quota("junk /proc/self/cgroup", "garbage without colons", 0);
    quota("empty /proc/self/cgroup", "", 0);
    clean();
    rmdir(root);

    /* Threads per rank. */
    struct {
        cpus_given g;
        int share, want;
    } t[] = {
        {{8, 0, 0}, 1, 8},   /* the mask */
        {{8, 0, 0}, 2, 4},   /* two unbound ranks on it */
        {{8, 0, 0}, 3, 2},   /* rounded down */
        {{2, 0, 0}, 4, 1},   /* at least 1 */
        {{8, 2.5, 0}, 1, 2}, /* the quota, rounded down */
        {{8, 0.5, 0}, 1, 1}, /* a quota under one CPU: 1 */
        {{8, 4, 0}, 2, 2},   /* the quota shared */
        {{8, 0, 3}, 1, 3},   /* SLURM_CPUS_PER_TASK */
        {{8, 0, 16}, 1, 8},  /* ... never above the mask */
        {{8, 0, 6}, 2, 4},   /* ... nor above the share */
        {{0, 0, 0}, 1, 1},   /* unknown mask */
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        int n = cpus_threads_per_rank(&t[i].g, t[i].share);
        CHECK(n == t[i].want, "case %zu (mask %d, quota %g, per task %d, sharing %d): %d threads, "
              "wanted %d", i, t[i].g.mask, t[i].g.quota, t[i].g.per_task, t[i].share, n,
              t[i].want);
    }
    /* The probe reads this process: a mask of at least one CPU, SLURM_CPUS_PER_TASK parsed. */
    setenv("SLURM_CPUS_PER_TASK", "3", 1);
    cpus_given g;
    cpus_probe(&g);
    CHECK(g.mask >= 1 && g.per_task == 3, "probe: mask %d, per task %d", g.mask, g.per_task);
    setenv("SLURM_CPUS_PER_TASK", "3x", 1);
    cpus_probe(&g);
    CHECK(g.per_task == 0, "probe: junk SLURM_CPUS_PER_TASK read as %d", g.per_task);
    return test_report();
}
