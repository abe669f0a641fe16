/* test_launcher: the launcher's world against MPI's (dist_launcher_detect/check): which
 * launcher's variables count when launchers nest, the batch step that started nothing, malformed
 * values, and the messages of a mismatch. Environments are set with setenv, as a launcher would.
 * No MPI world is needed (the check is given MPI's size and rank). */
#include "core/err.h"
#include "mpi/dist.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static const char *const all_vars[] = {
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE",     "PMI_RANK",
    "PMI_JOBID",            "FLUX_JOB_SIZE",        "FLUX_TASK_RANK", "SLURM_STEP_NUM_TASKS",
    "SLURM_NTASKS",         "SLURM_PROCID",         "SLURM_STEP_ID",  "PMIX_RANK",
    NULL};

/* Sets exactly the variables of `env` ("A=1 B=2"), unsetting the others. */
static void env_only(const char *env) {
    for (int i = 0; all_vars[i]; i++)
        unsetenv(all_vars[i]);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", env);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        *eq = '\0';
        setenv(tok, eq + 1, 1);
    }
}

/* detect(env) must give kind/size/rank. */
static void detect(const char *env, int kind, int size, int rank) {
    env_only(env);
    dist_launcher l;
    dist_launcher_detect(NULL, &l);
    CHECK(l.kind == kind && l.size == size && l.rank == rank,
          "%s: kind %d size %d rank %d (%s), wanted kind %d size %d rank %d", env, l.kind, l.size,
          l.rank, l.name, kind, size, rank);
}

/* check(env, mpi size, rank) must return want; a refusal's message must match every pattern. */
static void check(const char *env, int size, int rank, int want, const char *const *pats) {
    env_only(env);
    dist_launcher l;
    dist_launcher_detect(NULL, &l);
    err_clear();
    int rc = dist_launcher_check(&l, size, rank);
    CHECK(rc == want, "%s, MPI %d/%d: rc %d, wanted %d (%s)", env, rank, size, rc, want,
          err_msg());
    for (int i = 0; pats && pats[i]; i++)
        CHECK(strstr(err_msg(), pats[i]) != NULL, "%s: message lacks '%s': %s", env, pats[i],
              err_msg());
}

/* A lookup table instead of the environment (the `get` argument). */
static const char *fake_get(const char *name) {
    return !strcmp(name, "SLURM_STEP_NUM_TASKS") ? "8" : !strcmp(name, "SLURM_PROCID") ? "5" : NULL;
}

int main(void) {
    /* Nothing set: a plain singleton. */
    detect("", DIST_L_NONE, -1, -1);
    check("", 1, 0, 0, NULL);
    /* srun: a step's task count and this task's id. */
    detect("SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_ID=0 PMIX_RANK=1",
           DIST_L_SRUN, 2, 1);
    /* A step of an older Slurm without SLURM_STEP_NUM_TASKS: SLURM_NTASKS. */
    detect("SLURM_NTASKS=4 SLURM_PROCID=3 SLURM_STEP_ID=0", DIST_L_SRUN, 4, 3);
    /* A batch script's own step: SLURM_NTASKS and SLURM_PROCID=0, but no step started it. */
    detect("SLURM_NTASKS=2 SLURM_PROCID=0", DIST_L_NONE, -1, -1);
    check("SLURM_NTASKS=2 SLURM_PROCID=0", 1, 0, 0, NULL);
    /* Open MPI's mpirun inside an sbatch allocation: its own variables win over Slurm's. */
    detect("OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 PMIX_RANK=1 SLURM_NTASKS=4 "
           "SLURM_PROCID=0",
           DIST_L_OMPI, 2, 1);
    check("OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 SLURM_NTASKS=4 SLURM_PROCID=0", 2, 1, 0,
          NULL);
    /* Hydra inside an allocation: its proxy is a 1-task srun step (stale PMIX_RANK=0 too). */
    detect("PMI_SIZE=2 PMI_RANK=1 PMIX_RANK=0 SLURM_STEP_NUM_TASKS=1 SLURM_PROCID=0 "
           "SLURM_STEP_ID=0",
           DIST_L_HYDRA, 2, 1);
    check("PMI_SIZE=2 PMI_RANK=1 PMIX_RANK=0 SLURM_STEP_NUM_TASKS=1 SLURM_PROCID=0", 2, 1, 0,
          NULL);
    /* srun --mpi=pmi2: PMI_SIZE with PMI_JOBID, the step of as many tasks. */
    detect("PMI_SIZE=2 PMI_RANK=0 PMI_JOBID=3.1 SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0",
           DIST_L_SRUN_PMI2, 2, 0);
    detect("FLUX_JOB_SIZE=4 FLUX_TASK_RANK=2", DIST_L_FLUX, 4, 2);
    /* PMIx alone says a rank, no size. */
    detect("PMIX_RANK=3", DIST_L_PMIX, -1, 3);
    /* Malformed values are ignored (the next launcher, or none). */
    detect("OMPI_COMM_WORLD_SIZE=two SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0", DIST_L_SRUN, 2, 0);
    detect("SLURM_STEP_NUM_TASKS=0 SLURM_PROCID=0", DIST_L_NONE, -1, -1);
    detect("SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=x", DIST_L_SRUN, 2, -1);
    detect("PMI_SIZE=99999999999999999999 PMI_RANK=0", DIST_L_NONE, -1, -1);
    /* A lookup function instead of the environment. */
    dist_launcher l;
    dist_launcher_detect(fake_get, &l);
    CHECK(l.kind == DIST_L_SRUN && l.size == 8 && l.rank == 5, "fake get: %d %d %d", l.kind,
          l.size, l.rank);

    /* Mismatches: the message names the launcher, its size, MPI's, the variables and a fix. */
    const char *srun_pats[] = {"srun started 2 tasks but ", " sees a world of 1",
                               "SLURM_STEP_NUM_TASKS=2, SLURM_PROCID=1", "use srun --mpi=", NULL};
    check("SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=1 SLURM_STEP_ID=0", 1, 0, ERR_USAGE, srun_pats);
    check("SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=1 SLURM_STEP_ID=0", 2, 1, 0, NULL);
    const char *ompi_pats[] = {"mpirun (Open MPI) started 3 processes but ", "a world of 1",
                               "OMPI_COMM_WORLD_SIZE=3", NULL};
    check("OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_RANK=2", 1, 0, ERR_USAGE, ompi_pats);
    const char *hydra_pats[] = {"mpiexec (Hydra, PMI) started 2 processes", "PMI_SIZE=2", NULL};
    check("PMI_SIZE=2 PMI_RANK=0", 1, 0, ERR_USAGE, hydra_pats);
    const char *flux_pats[] = {"flux run started 4 processes", "flux run", NULL};
    check("FLUX_JOB_SIZE=4 FLUX_TASK_RANK=0", 1, 0, ERR_USAGE, flux_pats);
    /* Same size, another rank: named as such. */
    const char *rank_pats[] = {"started this process as task 1 but ", "gives it rank 0 of 2",
                               NULL};
    check("SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=1", 2, 0, ERR_USAGE, rank_pats);
    const char *pmix_pats[] = {"a PMIx launcher started this process as process 3", NULL};
    check("PMIX_RANK=3", 1, 0, ERR_USAGE, pmix_pats);
    /* The fix is the one for the MPI this binary is built with. */
    const char *fix = !strcmp(dist_mpi_name(), "MPICH") ? "--mpi=pmi2" : "--mpi=pmix";
    const char *fix_pats[] = {fix, dist_mpi_name(), NULL};
    check("SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0", 1, 0, ERR_USAGE, fix_pats);
    env_only("");
    return test_report();
}
