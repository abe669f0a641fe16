/* cpus: the CPUs this process was given, as the scheduler and the kernel say: the affinity mask
 * (taskset, a launcher's binding, a cpuset cgroup), the CPU quota of its cgroup (cgroup v2
 * cpu.max or v1 cpu.cfs_quota_us / cpu.cfs_period_us, the tightest of its own and its
 * ancestors') and Slurm's SLURM_CPUS_PER_TASK; and the thread count per rank they allow. */
#ifndef SCAFFOLD_CORE_CPUS_H
#define SCAFFOLD_CORE_CPUS_H

#include <stddef.h>

typedef struct cpus_given {
    int mask;          /* CPUs in the affinity mask (0: unknown) */
    double quota;      /* CPUs the cgroup quota allows (0: no quota) */
    int per_task;      /* SLURM_CPUS_PER_TASK (0: unset or not a positive integer) */
} cpus_given;

/* Reads the three of this process. */
void cpus_probe(cpus_given *g);

/* The cgroup CPU quota (CPUs, 0: none) of the cgroup described by `proc_cgroup` (the text of
 * /proc/self/cgroup) under the cgroup file system mounted at `root` (/sys/fs/cgroup). */
double cpus_cgroup_quota(const char *proc_cgroup, const char *root);

/* Threads per rank: the CPUs of the mask within the quota (at least 1), divided among the
 * `sharing` ranks of the node that have the same mask, at most per_task. */
int cpus_threads_per_rank(const cpus_given *g, int sharing);

/* What the OpenMP runtime's waiting threads do, as the executable set it up before the runtime
 * started (src/cli/main.c): one note for the log ("" when nothing was said). */
void cpus_set_wait_note(const char *note);
const char *cpus_wait_note(void);

#endif
