/* common: what the configuration-driven commands (generate_fractals, generate_dataset,
 * benchmark) share: MPI start-up, rank-aware logging, the configuration loaded and validated on
 * every rank with the outcome agreed, and the one-message failure path. */
#include "cli/cli.h"
#include "core/err.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/sha256.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_parse(const opt_cmd *cmd, int argc, char **argv, int *first) {
    int rc = opt_parse(cmd, argc, argv, first);
    /* Every rank reaches the same verdict; one of them says it: the launcher's rank 0 (or the
     * process, when no launcher says), read before MPI starts. */
    dist_launcher l;
    dist_launcher_detect(NULL, &l);
    const int speak = l.rank <= 0;
    if (rc == OPT_HELP) {
        if (speak)
            opt_usage(cmd, stdout);
        return 0;
    }
    if (rc) {
        /* Under a launcher, the first rank to exit non-zero makes mpirun kill the others: a
         * silent rank leaving at once could take rank 0 down before it has said why (seen with 3
         * ranks on 2 cores). So the ranks meet under MPI first, as cli_fail does after start-up:
         * rank 0 prints, then the barrier, then everyone leaves. */
        char msg[ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err_msg()); /* dist_init may set its own */
        dist_world w;
        int ac = argc;
        char **av = argv;
        const int met = l.size > 1 && dist_init(&w, &ac, &av) == 0;
        if (met ? w.rank == 0 : speak)
            fprintf(stderr, "scaffold %s: %s\n", cmd->name, msg);
        if (met) {
            fflush(stderr);
            dist_barrier(&w);
            dist_finalize(&w);
        }
        return err_exit_status(rc);
    }
    return -1;
}

/* Collective: every rank's merged configuration must be rank 0's. Ranks started with other
 * files or flags (an MPMD launch, a different working directory for relative paths, an edited
 * file on one node) would otherwise train silently on different settings or hang in a
 * collective whose sizes differ. A hash first (32 bytes); only when one differs does rank 0's
 * text travel, so each differing rank can name its keys. */
static int cli_config_agree(const dist_world *w, const scaffold_config *c) {
    if (w->size == 1)
        return 0;
    size_t len = 0;
    char *mine = config_canonical(c, &len);
    unsigned char h[SHA256_DIGEST_LEN], h0[SHA256_DIGEST_LEN];
    if (mine)
        sha256(mine, len, h);
    else
        memset(h, 0, sizeof h); /* out of memory: differs from any real hash */
    memcpy(h0, h, sizeof h);
    dist_bcast(w, h0, sizeof h0, 0);
    int differ = memcmp(h, h0, sizeof h) != 0;
    if (dist_max_double(w, differ) == 0) {
        free(mine);
        return 0;
    }
    long long n0 = (long long)len;
    dist_bcast(w, &n0, sizeof n0, 0);
    char *theirs = w->rank == 0 ? mine : malloc((size_t)n0 + 1);
    char *tmp = theirs ? theirs : malloc(1 << 16);
    /* Every rank takes part in the broadcast, whatever its allocation did. */
    for (long long off = 0; off < n0; off += 1 << 16) {
        long long k = n0 - off < (1 << 16) ? n0 - off : (1 << 16);
        dist_bcast(w, theirs ? theirs + off : tmp, (size_t)k, 0);
    }
    int rc = 0;
    if (differ) {
        char keys[ERR_MSG_MAX - 200];
        if (!mine || !theirs) {
            rc = err_set(ERR_NOMEM, "out of memory comparing the configuration with rank 0's");
        } else {
            theirs[n0] = '\0';
            mine[len] = '\0';
            int nd = config_diff_canonical(mine, theirs, keys, sizeof keys);
            rc = err_set(ERR_CONFIG,
                         "rank %d's configuration differs from rank 0's in %d key%s: %s; start "
                         "every rank with the same -c files and flags (and absolute paths if the "
                         "working directories differ)",
                         w->rank, nd, nd == 1 ? "" : "s", keys);
        }
    }
    if (!theirs)
        free(tmp);
    if (theirs != mine)
        free(theirs);
    free(mine);
    return dist_agree(w, rc);
}

int cli_config_start(int *argc, char ***argv, dist_world *w, scaffold_config *c,
                     const char *summary) {
    return cli_config_start_opts(argc, argv, w, c, summary, NULL);
}

int cli_config_start_opts(int *argc, char ***argv, dist_world *w, scaffold_config *c,
                          const char *summary, const opt_spec *extra) {
    int rc = dist_init(w, argc, argv);
    char **av = *argv;
    if (rc) { /* printed once: by the process the launcher numbers 0 */
        if (w->rank == 0)
            fprintf(stderr, "scaffold %s: %s\n", av[0], err_msg());
        return err_exit_status(rc);
    }
    log_set_rank(w->rank);
    config_defaults(c);
    rc = config_parse_args_opts(c, *argc, av, 1, extra);
    /* --help on any rank is help on all (one rank leaving alone would hang the others). */
    if ((w->size > 1 ? dist_max_double(w, rc == OPT_HELP) : rc == OPT_HELP) > 0) {
        if (w->rank == 0)
            config_usage_opts(stdout, av[0], summary, extra);
        dist_finalize(w);
        return 0;
    }
    if (rc == 0)
        rc = config_finalize(c);
    /* Directories become absolute once, so every later path (and config.yaml) is unambiguous. */
    char *dirs[3] = {c->fract_base_dir, c->dataset_dir, c->base_run_dir};
    char abs[FS_PATH_MAX];
    for (int i = 0; i < 3 && rc == 0; i++)
        if ((rc = fs_abspath(dirs[i], abs, sizeof abs)) == 0)
            snprintf(dirs[i], CFG_STR_MAX, "%s", abs);
    rc = dist_agree(w, rc);
    if (rc == 0)
        rc = cli_config_agree(w, c);
    if (rc)
        return cli_fail(w, av[0], rc);
    log_set_verbosity(c->verbose);
    return -1;
}

int cli_fail(dist_world *w, const char *cmd, int rc) {
    if (w->rank == 0)
        fprintf(stderr, "scaffold %s: %s\n", cmd, err_msg());
    dist_finalize(w);
    return err_exit_status(rc);
}
