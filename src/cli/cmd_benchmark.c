/* `scaffold benchmark`: the main job (see src/train/bench.h). */
#include "cli/cli.h"
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"
#include "dist/dist.h"
#include "train/bench.h"

#include <stdio.h>

int cmd_benchmark(int argc, char **argv) {
    dist_world w;
    scaffold_config c;
    parity_opts po = {NULL, 0};
    const opt_spec extra[] = {
        OPT_SECTION_("same-data comparison with PyTorch (bench/train/torch_train.py)"),
        OPT_STR_(0, "save-initial-weights", &po.initial_weights, "FILE",
                 "write the initial weights as safetensors with upstream's tensor names"),
        OPT_FLAG_(0, "save-sample-order", &po.sample_order,
                  "write sample_order.csv: every step's samples, loss and Dice per replica"),
        OPT_END_};
    int st = cli_config_start_opts(
        &argc, &argv, &w, &c,
        "Trains the 3D U-Net over MPI (data parallelism, and spatial parallelism with\n"
        "dc_num_shards) until the validation hard Dice reaches target_dice (or the epoch cap).\n"
        "Generates the fractal library and the dataset first if they are missing. Writes a run\n"
        "folder under base_run_dir (config.yaml, restart.sh, train_stats.csv, checkpoints/,\n"
        "figures/). Resume with --restart --run-dir DIR.",
        extra);
    if (st >= 0)
        return st;
    bench_result r;
    int rc = bench_run(&c, &w, argc, argv, &po, &r);
    if (rc)
        return cli_fail(&w, "benchmark", rc);
    if (w.rank == 0) {
        if (r.converged)
            printf("benchmark: reached val dice %.4f >= %.3f at epoch %d on %d rank(s); "
                   "time to target %.2f s (training wall time, I/O included); "
                   "sum of epoch durations %.2f s; FOM (upstream, 1/sum) %.5g 1/s; "
                   "checkpoints %.1f MB in %.2f s; %.3g samples/s; peak memory per rank %.2f "
                   "GiB (max), %.2f GiB (min); precision %s; run folder %s\n",
                   r.val_dice, c.target_dice, r.last_epoch, w.size, r.wall_s, r.sum_epoch_s,
                   r.fom_upstream, r.ckpt_bytes / 1e6, r.ckpt_s, r.samples_per_s, r.rss_max_gib,
                   r.rss_min_gib, c.torch_amp ? "bf16" : "fp32", c.run_dir);
        else
            printf("benchmark: stopped at epoch %d (cap %d) with val dice %.4f < %.3f on %d "
                   "rank(s); no FOM (not converged); training wall time %.2f s; sum of epoch "
                   "durations %.2f s; checkpoints %.1f MB in %.2f s; %.3g samples/s; peak "
                   "memory per rank %.2f GiB (max), %.2f GiB (min); precision %s; run folder "
                   "%s\n",
                   r.last_epoch, c.epochs, r.val_dice, c.target_dice, w.size, r.wall_s,
                   r.sum_epoch_s, r.ckpt_bytes / 1e6, r.ckpt_s, r.samples_per_s, r.rss_max_gib,
                   r.rss_min_gib, c.torch_amp ? "bf16" : "fp32", c.run_dir);
        fflush(stdout);
    }
    dist_finalize(&w);
    return 0;
}
