/* checkpoint: U-Net checkpoints as safetensors files that upstream's PyTorch code can read.
 *
 * PATH holds exactly the model's state_dict (upstream tensor names, float32, PyTorch layout),
 * so `UNet.load_state_dict(safetensors.torch.load_file(PATH))` works unchanged (strict), plus
 * string metadata: format, the architecture (in_channels, n_classes, layers, base_channels,
 * group_norm_groups), a pair id, and the caller's key/value pairs (epoch, RNG state, ...).
 * The optimizer state cannot live in PATH (strict loading rejects unknown keys), so it goes in a
 * sidecar, nn_checkpoint_optim_path(PATH) = PATH with ".safetensors" replaced by
 * ".optim.safetensors", holding PyTorch's per-parameter names ("exp_avg.<param>",
 * "exp_avg_sq.<param>" for Adam, "square_avg.<param>" for RMSprop) and the step count. Both
 * files are written atomically, sidecar first; both carry the same pair id, and loading checks
 * it, so a crash between the two renames is detected instead of silently mixing states. */
#ifndef SCAFFOLD_NN_CHECKPOINT_H
#define SCAFFOLD_NN_CHECKPOINT_H

#include "nn/optim.h"
#include "nn/safetensors.h"
#include "nn/unet.h"

#include <stddef.h>

#define NN_CKPT_FORMAT "scaffold-unet-1"

/* The optimizer sidecar path of a checkpoint path. */
void nn_checkpoint_optim_path(const char *path, char *out, size_t outsz);

/* Writes the model (and, when opt is not NULL, the optimizer sidecar). meta: nmeta key/value
 * pairs (keys must not collide with the reserved ones above). 0, ERR_IO or ERR_USAGE. */
int nn_checkpoint_save(const char *path, const nn_unet *m, const nn_optim *opt,
                       const char *const *meta, int nmeta);

/* Loads parameters into a model built with the same architecture: every tensor of the model
 * must be present with the same shape, and no other tensor may be (ERR_FORMAT naming the
 * tensor). When opt is not NULL the sidecar is loaded too (its kind must match opt->kind and its
 * pair id the model file's). When info is not NULL it receives the opened header (metadata via
 * nn_st_meta; close with nn_st_close). */
int nn_checkpoint_load(const char *path, nn_unet *m, nn_optim *opt, nn_st_file *info);

/* The same with the sidecar at `optim_path` (NULL: nn_checkpoint_optim_path(path)): a resume
 * pairs files by their pair id wherever an interrupted save left them. */
int nn_checkpoint_load_pair(const char *path, const char *optim_path, nn_unet *m, nn_optim *opt,
                            nn_st_file *info);

/* Infers the architecture of a checkpoint (scaffold's or a PyTorch state_dict saved as
 * safetensors) from its tensor names and shapes. GroupNorm groups cannot be inferred: they come
 * from the metadata when present, else from `groups` (> 0), else 8 (upstream's default).
 * 0 or ERR_FORMAT naming what is missing. */
int nn_checkpoint_spec(const char *path, int groups, nn_unet_spec *s);

#endif
