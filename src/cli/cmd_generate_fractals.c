/* `scaffold generate_fractals`: builds (or completes) the fractal library of a config. */
#include "cli/cli.h"
#include "core/config.h"
#include "core/err.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "mpi/dist.h"
#include "fractal/library.h"

#include <stdio.h>
#include <stdlib.h>

int cmd_generate_fractals(int argc, char **argv) {
    dist_world w;
    scaffold_config c;
    int st = cli_config_start(&argc, &argv, &w, &c,
                              "Generates the IFS fractal classes (3DIFS_param/*.csv) and their 145 "
                              "instances each (instances/np<point_num>/*.npy). Existing valid "
                              "files are reused.");
    if (st >= 0)
        return st;
    char cdir[FS_PATH_MAX], idir[FS_PATH_MAX];
    fractal_spec fsp = fractal_spec_of(&c);
    fractal_class_dir(&fsp, cdir, sizeof cdir);
    fractal_instance_dir(&fsp, idir, sizeof idir);
    log_info("generate_fractals: %d classes x 145 instances of %ld points, %d rank(s)",
             c.n_categories, c.point_num, w.size);
    log_info("classes:   %s", cdir);
    log_info("instances: %s", idir);
    fractal_summary s;
    double t0 = time_now();
    int rc = fractal_generate(&fsp, &w, &s);
    double secs = time_now() - t0;
    if (rc)
        return cli_fail(&w, "generate_fractals", rc);
    if (w.rank == 0) {
        if (s.instances_fallback)
            log_warn("%ld instance(s) diverged with every attenuation and use the base class",
                     s.instances_fallback);
        if (s.instances_stale)
            log_warn("%ld instance(s) removed: their category now uses another class, or its class "
                     "file changed; regenerated",
                     s.instances_stale);
        printf("generate_fractals: %d classes (%d new, %d replaced at this scale, %ld attempts, "
               "%.2f s), %ld instances (%ld new, %ld reused, %ld stale, %.2f s), %.2f s, %.3g "
               "points/s\n",
               c.n_categories, s.classes_new, s.classes_rejected, s.attempts, s.class_seconds,
               s.instances_total, s.instances_new, s.instances_reused, s.instances_stale,
               s.instance_seconds, secs,
               secs > 0 ? s.points / secs : 0.0);
        fflush(stdout);
    }
    dist_finalize(&w);
    return 0;
}
