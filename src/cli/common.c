/* common: what the configuration-driven commands (generate_fractals, generate_dataset,
 * benchmark) share: MPI start-up, rank-aware logging, the configuration loaded and validated on
 * every rank with the outcome agreed, and the one-message failure path. */
#include "cli/cli.h"
#include "core/err.h"
#include "core/fsutil.h"
#include "core/log.h"

#include <stdio.h>

int cli_parse(const opt_cmd *cmd, int argc, char **argv, int *first) {
    int rc = opt_parse(cmd, argc, argv, first);
    if (rc == OPT_HELP) {
        opt_usage(cmd, stdout);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "scaffold %s: %s\n", cmd->name, err_msg());
        return err_exit_status(rc);
    }
    return -1;
}

int cli_config_start(int *argc, char ***argv, dist_world *w, scaffold_config *c,
                     const char *summary) {
    return cli_config_start_opts(argc, argv, w, c, summary, NULL);
}

int cli_config_start_opts(int *argc, char ***argv, dist_world *w, scaffold_config *c,
                          const char *summary, const opt_spec *extra) {
    if (dist_init(w, argc, argv) != 0) {
        fprintf(stderr, "scaffold: %s\n", err_msg());
        return 1;
    }
    log_set_rank(w->rank);
    char **av = *argv;
    config_defaults(c);
    int rc = config_parse_args_opts(c, *argc, av, 1, extra);
    if (rc == OPT_HELP) {
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
