/* cmd_predict: `scaffold predict`, the forward pass of a U-Net checkpoint on one volume.
 * Reads scaffold checkpoints and PyTorch state_dicts of upstream's UNet saved as safetensors
 * (architecture inferred from tensor names and shapes); writes logits and/or the argmax mask as
 * .npy (atomically). Bad arguments, a bad checkpoint or a volume of the wrong shape exit 2 with
 * one message naming the file and the fix. */
#include "cli/cli.h"
#include "core/err.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/npy.h"
#include "nn/checkpoint.h"
#include "nn/unet.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(int rc) {
    fprintf(stderr, "scaffold predict: %s\n", err_msg());
    return rc;
}

/* Loads --input and checks it is a finite float32 volume (in_channels, D, H, W) for the model.
 * Returns 0 (*vol: the voxels, *shp: its shape as text), else the exit status after the message. */
static int load_volume(const char *input, int in_channels, npy_header *h, float **vol, char *shp,
                       size_t cap) {
    *vol = NULL;
    int lrc = npy_load(input, h, (void **)vol);
    if (lrc == ERR_FORMAT) {
        /* The user's own file: nothing here regenerates it. */
        char msg[ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err_msg());
        err_set(lrc, "%s; --input must be a whole .npy file as numpy.save writes it (was it "
                "copied completely?)", msg);
        return fail(2);
    }
    if (lrc)
        return fail(lrc == ERR_NOMEM ? 1 : 2);
    npy_shape_str(h->ndim, h->shape, shp, cap);
    if (h->dtype != NPY_F32 || h->ndim != 4 || h->shape[0] != in_channels) {
        free(*vol);
        fprintf(stderr,
                "scaffold predict: %s: expected a float32 volume of shape (%d, D, H, W), found "
                "%s %s; volumes are written by generate_dataset as (3, D, H, W) float32\n",
                input, in_channels, npy_descr(h->dtype), shp);
        return 2;
    }
    /* A NaN or Inf voxel would give a mask that looks like a result. */
    size_t bad = 0, nvals = h->nbytes / sizeof(float);
    for (size_t i = 0; i < nvals; i++)
        bad += !isfinite((*vol)[i]);
    if (bad) {
        free(*vol);
        fprintf(stderr, "scaffold predict: %s: %zu of %zu values are not finite (NaN or Inf); "
                        "predict needs a finite volume\n", input, bad, nvals);
        return 2;
    }
    return 0;
}

int cmd_predict(int argc, char **argv) {
    const char *ckpt = NULL, *input = NULL, *logits_out = NULL, *mask_out = NULL;
    int groups = 0, threads = 0;
    const opt_spec opts[] = {
        OPT_STR_(0, "checkpoint", &ckpt, "FILE",
                 "scaffold checkpoint, or upstream's PyTorch UNet state_dict saved with "
                 "safetensors.torch.save_file"),
        OPT_STR_(0, "input", &input, "VOLUME.npy",
                 "float32 array (C, D, H, W), C = the model's input channels (3), D, H, W "
                 "multiples of 2^layers"),
        OPT_STR_(0, "logits", &logits_out, "OUT.npy", "write float32 logits (n_classes, D, H, W)"),
        OPT_STR_(0, "mask", &mask_out, "OUT.npy", "write uint16 argmax labels (D, H, W)"),
        OPT_INT_(0, "group-norm-groups", &groups, 1, OPT_NO_MAX, "G",
                 "GroupNorm groups of a checkpoint without scaffold metadata (PyTorch files; "
                 "default 8, upstream's default)"),
        OPT_INT_(0, "threads", &threads, 1, OPT_NO_MAX, "N",
                 "OpenMP threads (default: OMP_NUM_THREADS or all cores)"),
        OPT_END_};
    const opt_cmd cmd = {"predict", "--checkpoint FILE --input VOLUME.npy [--logits OUT.npy] "
                                    "[--mask OUT.npy] [options]",
                         "Runs the U-Net of a checkpoint on one volume.", opts, OPT_POS_NONE,
                         NULL};
    int first, st = cli_parse(&cmd, argc, argv, &first);
    if (st >= 0)
        return st;
    if (!ckpt || !input) {
        fprintf(stderr, "scaffold predict: --checkpoint and --input are required (see 'scaffold "
                        "predict --help')\n");
        return 2;
    }
    if (threads)
        omp_set_num_threads(threads);

    if (fs_is_dir(ckpt)) {
        fprintf(stderr, "scaffold predict: --checkpoint %s is a directory; give a checkpoint "
                        "file such as RUN/checkpoints/checkpoint_best.safetensors\n", ckpt);
        return 2;
    }
    nn_unet_spec spec;
    if (nn_checkpoint_spec(ckpt, groups, &spec))
        return fail(2);
    npy_header h;
    float *vol;
    char shp[128];
    int vst = load_volume(input, spec.in_channels, &h, &vol, shp, sizeof shp);
    if (vst)
        return vst;
    const int D = (int)h.shape[1], H = (int)h.shape[2], W = (int)h.shape[3];
    nn_unet m;
    int rc = nn_unet_create(&m, &spec, 1, D, H, W);
    if (rc) {
        free(vol);
        err_prefix("%s (volume %s)", input, shp);
        return fail(rc == ERR_NOMEM ? 1 : 2);
    }
    if ((rc = nn_checkpoint_load(ckpt, &m, NULL, NULL))) {
        free(vol);
        nn_unet_free(&m);
        return fail(2);
    }
    const size_t S = (size_t)D * H * W, K = (size_t)spec.n_classes;
    float *logits = logits_out ? malloc(S * K * sizeof(float)) : NULL;
    uint16_t *mask = malloc(S * sizeof(uint16_t));
    if ((logits_out && !logits) || !mask) {
        free(vol), free(logits), free(mask);
        nn_unet_free(&m);
        err_set(ERR_NOMEM, "cannot allocate the outputs");
        return fail(1);
    }
    const double t0 = time_now();
    rc = nn_unet_predict(&m, vol, 1, logits, mask);
    const double dt = time_now() - t0;
    if (!rc && logits_out) {
        const int64_t sh[4] = {(int64_t)K, D, H, W};
        rc = npy_save(logits_out, NPY_F32, 4, sh, logits);
    }
    if (!rc && mask_out) {
        const int64_t sh[3] = {D, H, W};
        rc = npy_save(mask_out, NPY_U16, 3, sh, mask);
    }
    if (!rc) {
        size_t fg = 0;
        for (size_t i = 0; i < S; i++)
            fg += mask[i] != 0;
        printf("predict: %dx%dx%d volume, U-Net layers %d base %d, %zu classes, %.3f s, "
               "foreground %.2f%%%s%s%s%s\n",
               D, H, W, spec.layers, spec.base_channels, K, dt, 100.0 * fg / S,
               logits_out ? ", logits " : "", logits_out ? logits_out : "",
               mask_out ? ", mask " : "", mask_out ? mask_out : "");
    }
    free(vol), free(logits), free(mask);
    nn_unet_free(&m);
    return rc ? fail(err_exit_status(rc)) : 0;
}
