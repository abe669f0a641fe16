/* `scaffold benchmark`: the main job (see src/train/bench.h), and its profile (--profile,
 * src/train/profile.h). */
#include "cli/cli.h"
#include "core/config.h"
#include "core/err.h"
#include "core/log.h"
#include "core/prof.h"
#include "mpi/dist.h"
#include "core/fsutil.h"
#include "train/bench.h"
#include "train/profile.h"
#include "train/stop.h"

#include <math.h>
#include <stdio.h>

static int profile_formats(const opt_spec *o, char **vals, int n, void *ctx) {
    (void)o;
    (void)n;
    return train_profile_formats(vals[0], &((train_profile *)ctx)->formats);
}

static int profile_dir(const opt_spec *o, char **vals, int n, void *ctx) {
    (void)o;
    (void)n;
    train_profile *p = ctx;
    if (!vals[0][0])
        return err_set(ERR_USAGE, "an empty folder name");
    snprintf(p->dir, sizeof p->dir, "%s", vals[0]);
    return 0;
}

/* The summary line of a run that trained (rank 0), and the warning of a busy host. */
static void print_summary(const bench_result *r, const scaffold_config *c, int ranks) {
    char mb[48] = "n/a (no full-size batch)";
    if (!isnan(r->minibatch_time_s))
        snprintf(mb, sizeof mb, "%.4f s", r->minibatch_time_s);
    if (r->converged)
        printf("benchmark: reached val dice %.4f >= %.3f at epoch %d on %d rank(s); "
               "time to target %.2f s (training wall time, I/O included); "
               "sum of epoch durations %.2f s; FOM (upstream, 1/sum) %.5g 1/s; ",
               r->val_dice, c->target_dice, r->last_epoch, ranks, r->wall_s, r->sum_epoch_s,
               r->fom_upstream);
    else
        printf("benchmark: stopped at epoch %d (cap %d) with val dice %.4f < %.3f on %d "
               "rank(s); no FOM (not converged); training wall time %.2f s; sum of epoch "
               "durations %.2f s; ",
               r->last_epoch, c->epochs, r->val_dice, c->target_dice, ranks, r->wall_s,
               r->sum_epoch_s);
    char wait[48] = "n/a";
    if (r->cpu_wait >= 0)
        snprintf(wait, sizeof wait, "%.1f%%", 100 * r->cpu_wait);
    printf("median minibatch time %s; checkpoints %.1f MB in %.2f s; %.3g samples/s; peak "
           "memory per rank %.2f GiB (max), %.2f GiB (min); " BENCH_WAIT_KEY "%s (max); "
           "precision %s; run folder %s\n",
           mb, r->ckpt_bytes / 1e6, r->ckpt_s, r->samples_per_s, r->rss_max_gib, r->rss_min_gib,
           wait, c->torch_amp ? "bf16" : "fp32", c->run_dir);
    fflush(stdout);
    if (r->cpu_wait > BENCH_BUSY_WAIT)
        log_warn("benchmark: the training threads waited %.0f%% of the time for a CPU (the "
                 "most on any rank): other work shares these cores, or a rank runs more "
                 "threads than it has cores (OMP_NUM_THREADS); the times and the FOM are "
                 "not this machine's",
                 100 * r->cpu_wait);
}

int cmd_benchmark(int argc, char **argv) {
    dist_world w;
    scaffold_config c;
    train_profile prof = {.on = train_profile_env(), .formats = PROFILE_ALL};
    int flag = 0;
    parity_opts po = {NULL, 0};
    const opt_spec extra[] = {
        OPT_SECTION_("Profiling (ARCHITECTURE decision 11; docs/usage.md \"Profiling\")"),
        OPT_FLAG_(0, "profile", &flag,
                  "time the run's regions (also SCAFFOLD_PROFILE=1): report and files in "
                  "<run folder>/profile"),
        OPT_FN_(0, "profile-format", profile_formats, &prof, 1, "LIST",
                "cali, perfetto and/or text, comma-separated [cali,perfetto,text]"),
        OPT_FN_(0, "profile-dir", profile_dir, &prof, 1, "DIR",
                "write the profile there instead of <run folder>/profile"),
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
        "figures/, and profile/ with --profile). Resume with --restart --run-dir DIR.",
        extra);
    if (st >= 0)
        return st;
    prof.on |= flag;
    int rc = train_profile_start(&w, &prof);
    if (rc)
        return cli_fail(&w, "benchmark", rc);
    bench_result r;
    prof_begin(PROF_BENCHMARK);
    rc = bench_run(&c, &w, argc, argv, &po, &r);
    prof_end(PROF_BENCHMARK);
    if (rc) {
        train_profile_abort(&prof);
        return cli_fail(&w, "benchmark", rc);
    }
    rc = train_profile_finish(&w, &prof, &c, &r);
    if (rc)
        return cli_fail(&w, "benchmark", rc);
    if (r.stop_signal) {
        /* One line, then the status a shell gives a process ended by that signal. */
        if (w.rank == 0) {
            char where[160], saved[FS_PATH_MAX + 160];
            if (r.stop_epoch == 0)
                snprintf(where, sizeof where, "during the warmup (nothing trained since %s)",
                         r.last_epoch ? "the checkpoint it resumed from" : "the start");
            else if (r.stop_step < r.stop_steps)
                snprintf(where, sizeof where, "after step %ld of %ld of epoch %d", r.stop_step,
                         r.stop_steps, r.stop_epoch);
            else
                snprintf(where, sizeof where, "at the end of epoch %d", r.stop_epoch);
            if (r.stop_saved)
                snprintf(saved, sizeof saved, "checkpoint saved there; resume with %s/restart.sh",
                         c.run_dir);
            else if (r.stop_epoch == 0)
                snprintf(saved, sizeof saved, "resume with %s/restart.sh%s", c.run_dir,
                         r.last_epoch ? "" : " once a checkpoint exists");
            else
                snprintf(saved, sizeof saved, "no checkpoint (checkpointing is off: set "
                         "checkpoint_interval, or --checkpoint-on-signal 1)");
            printf("benchmark: stopped by %s %s; %s; run folder %s\n",
                   train_stop_name(r.stop_signal), where, saved, c.run_dir);
            fflush(stdout);
        }
        dist_finalize(&w);
        return 128 + r.stop_signal;
    }
    if (w.rank == 0 && r.epochs_run == 0) {
        /* A resumed run that had already ended: no epoch, no time or rate to report. */
        if (r.converged)
            printf("benchmark: nothing to train: the run had reached val dice %.4f >= %.3f at "
                   "epoch %d; run folder %s\n",
                   r.val_dice, c.target_dice, r.last_epoch, c.run_dir);
        else
            printf("benchmark: nothing to train: the run had ended at epoch %d (cap %d) with val "
                   "dice %.4f < %.3f; raise the cap to go on (restart.sh --epochs N); run folder "
                   "%s\n",
                   r.last_epoch, c.epochs, r.val_dice, c.target_dice, c.run_dir);
        fflush(stdout);
    } else if (w.rank == 0) {
        print_summary(&r, &c, w.size);
    }
    dist_finalize(&w);
    return 0;
}
