/* `scaffold generate_dataset`: makes sure the fractal library exists, then finds or generates the
 * volume dataset of a config (the same code path `scaffold benchmark` runs at start-up). */
#include "cli/cli.h"
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"
#include "dataset/dataset.h"
#include "mpi/dist.h"
#include "fractal/library.h"

#include <stdio.h>

int cmd_generate_dataset(int argc, char **argv) {
    dist_world w;
    scaffold_config c;
    int st = cli_config_start(
        &argc, &argv, &w, &c,
        "Generates (or reuses) the volume dataset of a config under "
        "<dataset_dir>/<config_id>/<timestamp>__<version>/: volumes (3, D, H, W) float32 and "
        "masks (D, H, W) uint16 as .npy shard files, volumes_contents.csv and meta.yaml. The "
        "fractal library is generated first if incomplete. Reuses the newest cached dataset "
        "with the same config_id unless --datagen-from-scratch 1.");
    if (st >= 0)
        return st;
    fractal_summary fs;
    ds_spec dsp = ds_spec_of(&c);
    int rc = fractal_generate(&dsp.fractals, &w, &fs);
    char dir[FS_PATH_MAX];
    dataset_prep_info info;
    if (rc == 0)
        rc = dataset_prepare(&dsp, &w, dir, sizeof dir, &info);
    if (rc)
        return cli_fail(&w, "generate_dataset", rc);
    if (w.rank == 0) {
        if (info.reused)
            printf("generate_dataset: %d volumes reused (config_id %s) in %s\n", info.num_volumes,
                   info.config_id, dir);
        else
            printf("generate_dataset: %d volumes generated (config_id %s) in %s: %lld files, "
                   "%.1f MB written in %.2f s, %.1f MB/s, %d rank(s)\n",
                   info.num_volumes, info.config_id, dir, info.files, (double)info.bytes / 1e6,
                   info.seconds, info.seconds > 0 ? (double)info.bytes / 1e6 / info.seconds : 0.0,
                   w.size);
        fflush(stdout);
    }
    dist_finalize(&w);
    return 0;
}
