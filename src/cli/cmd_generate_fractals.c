/* `scaffold generate_fractals`: builds (or completes) the fractal library of a config. */
#include "cli/cli.h"
#include "core/config.h"
#include "core/err.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "dist/dist.h"
#include "fractal/library.h"

#include <stdio.h>
#include <stdlib.h>

/* Shared by commands that take a config: parse + validate on every rank (cheap, and every rank
 * reads the same files), agree on the outcome, make directories absolute. Returns 0, 1 (help
 * printed) or the exit status to return. */
int cli_load_config(scaffold_config *c, int argc, char **argv, const dist_world *w,
                    const char *summary);

int cli_load_config(scaffold_config *c, int argc, char **argv, const dist_world *w,
                    const char *summary) {
    config_defaults(c);
    int rc = config_parse_args(c, argc, argv, 1);
    if (rc == 1) {
        if (w->rank == 0)
            config_usage(stdout, argv[0], summary);
        return -1;
    }
    if (rc == 0)
        rc = config_finalize(c);
    char abs[FS_PATH_MAX];
    if (rc == 0 && (rc = fs_abspath(c->fract_base_dir, abs, sizeof abs)) == 0)
        snprintf(c->fract_base_dir, sizeof c->fract_base_dir, "%s", abs);
    if (rc == 0 && (rc = fs_abspath(c->dataset_dir, abs, sizeof abs)) == 0)
        snprintf(c->dataset_dir, sizeof c->dataset_dir, "%s", abs);
    if (rc == 0 && (rc = fs_abspath(c->base_run_dir, abs, sizeof abs)) == 0)
        snprintf(c->base_run_dir, sizeof c->base_run_dir, "%s", abs);
    rc = dist_agree(w, rc);
    if (rc) {
        if (w->rank == 0)
            fprintf(stderr, "scaffold %s: %s\n", argv[0], err_msg());
        return err_exit_status(rc);
    }
    log_set_verbosity(c->verbose);
    return 0;
}

int cmd_generate_fractals(int argc, char **argv) {
    dist_world w;
    if (dist_init(&w, &argc, &argv) != 0) {
        fprintf(stderr, "scaffold: %s\n", err_msg());
        return 1;
    }
    log_set_rank(w.rank);
    scaffold_config c;
    int st = cli_load_config(&c, argc, argv, &w,
                             "Generates the IFS fractal classes (3DIFS_param/*.csv) and their 145 "
                             "instances each (instances/np<point_num>/*.npy). Existing valid files "
                             "are reused.");
    if (st) {
        dist_finalize(&w);
        return st < 0 ? 0 : st;
    }
    char cdir[FS_PATH_MAX], idir[FS_PATH_MAX];
    fractal_class_dir(&c, cdir, sizeof cdir);
    fractal_instance_dir(&c, idir, sizeof idir);
    log_info("generate_fractals: %d classes x 145 instances of %ld points, %d rank(s)",
             c.n_categories, c.point_num, w.size);
    log_info("classes:   %s", cdir);
    log_info("instances: %s", idir);
    fractal_summary s;
    double t0 = time_now();
    int rc = fractal_generate(&c, &w, &s);
    double secs = time_now() - t0;
    if (rc) {
        if (w.rank == 0)
            fprintf(stderr, "scaffold generate_fractals: %s\n", err_msg());
        dist_finalize(&w);
        return err_exit_status(rc);
    }
    if (w.rank == 0) {
        if (s.instances_fallback)
            log_warn("%ld instance(s) diverged with every attenuation and use the base class",
                     s.instances_fallback);
        printf("generate_fractals: %d classes (%d new, %ld attempts), %ld instances (%ld new, "
               "%ld reused), %.2f s, %.3g points/s\n",
               c.n_categories, s.classes_new, s.attempts, s.instances_total, s.instances_new,
               s.instances_reused, secs, secs > 0 ? s.points / secs : 0.0);
        fflush(stdout);
    }
    dist_finalize(&w);
    return 0;
}
