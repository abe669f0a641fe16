/* loss: the ScaFFold training loss, its gradient, and the Dice metrics (reference §11.4, §11.6).
 *
 * Logits are channels-last (N, S, K): K = n_classes values per voxel, S voxels per sample.
 * Labels are uint16 class indices (N, S). With lp = log_softmax(logits), p = exp(lp), t the
 * one-hot labels and w the CE class weights:
 *   CE   = sum_v w[y_v] * (-lp[v, y_v]) / sum_v w[y_v]         (weighted mean over the batch)
 *   dice = mean over samples b and classes c >= 1 of (I + 1e-6) / (S + 1e-6),
 *          I = 2 sum_v p*t, S = sum_v p + sum_v t (S := I when S == 0)
 *   loss = CE + (1 - dice)
 * The hard Dice of validation uses the argmax one-hot instead of p; per sample it is the mean
 * over classes 1..K-1, and a class absent from both prediction and label scores 1. */
#ifndef SCAFFOLD_NN_LOSS_H
#define SCAFFOLD_NN_LOSS_H

#include "nn/layers.h"

#include <stddef.h>
#include <stdint.h>

#define NN_DICE_EPS 1e-6

/* Workspace floats for nn_loss(). */
size_t nn_loss_ws_floats(int N, int K);

/* Computes the loss (and CE and soft foreground Dice separately when the pointers are not NULL).
 * When dlogits is not NULL it receives dloss/dlogits (N, S, K), overwritten. Returns 0, or
 * ERR_RANGE if a label is >= K (the message names the value and K). */
int nn_loss(float *dlogits, const float *logits, const uint16_t *labels, const float *ce_weight,
            int N, long S, int K, double *loss, double *ce, double *dice, float *ws);

/* Hard (argmax) foreground Dice per sample into dice[N]. Labels >= K are ERR_RANGE. */
int nn_hard_dice(float *dice, const float *logits, const uint16_t *labels, int N, long S, int K);

/* The same on one block of a sharded volume: every sum is over the whole volume (sh->sum), so
 * the loss, the Dice values and the gradient of the loss are those of the unsharded model; a bad
 * label on any shard is an error on all of them (sh may be NULL). */
int nn_loss_sh(float *dlogits, const float *logits, const uint16_t *labels,
               const float *ce_weight, int N, long S, int K, double *loss, double *ce,
               double *dice, float *ws, const nn_shard *sh);
int nn_hard_dice_sh(float *dice, const float *logits, const uint16_t *labels, int N, long S,
                    int K, const nn_shard *sh);

/* Argmax over the K classes of each voxel (first maximum wins), P voxels. */
void nn_argmax(uint16_t *out, const float *logits, long P, int K);

/* Adds the label histogram of n labels into counts[K] (labels >= K are ERR_RANGE). */
int nn_label_counts(uint64_t *counts, const uint16_t *labels, size_t n, int K);

/* CE class weights from label counts (reference §11.4): total = sum counts, w[0] =
 * total/background, w[c >= 1] = total/foreground (one weight shared by all foreground classes);
 * all ones when either count is 0. */
void nn_ce_class_weights(float *w, const uint64_t *counts, int K);

#endif
