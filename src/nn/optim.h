/* optim: optimizers over one flat parameter slab, gradient clipping, and the learning-rate
 * schedule (reference §11.2, §11.5).
 *
 * Adam, SGD and RMSprop follow PyTorch 1.13's single-tensor formulas with its defaults:
 *   Adam:    m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *            p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)   (b1 .9, b2 .999, eps 1e-8)
 *   SGD:     p -= lr g                                            (no momentum, no decay)
 *   RMSprop: v = a v + (1-a) g^2; p -= lr g / (sqrt(v) + eps)     (a .99, eps 1e-8)
 * The optimizer state (Adam m and v, RMSprop v) is one slab of state_floats() floats that the
 * caller may checkpoint as it is. */
#ifndef SCAFFOLD_NN_OPTIM_H
#define SCAFFOLD_NN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

typedef enum nn_optim_kind { NN_OPT_ADAM = 0, NN_OPT_SGD = 1, NN_OPT_RMSPROP = 2 } nn_optim_kind;

typedef struct nn_optim {
    nn_optim_kind kind;
    double beta1, beta2, eps, alpha; /* PyTorch defaults, set by nn_optim_init */
    int64_t step;                    /* optimizer steps taken (Adam's t) */
    size_t n;                        /* parameters */
    float *state;                    /* one slab: Adam m then v (2n), RMSprop v (n), SGD none */
} nn_optim;

/* Parses "adam", "sgd", "rmsprop" (case-insensitive; upstream's config values). 0 or ERR_CONFIG. */
int nn_optim_parse(const char *name, nn_optim_kind *kind);
const char *nn_optim_name(nn_optim_kind kind);

/* Floats of optimizer state for n parameters. */
size_t nn_optim_state_floats(nn_optim_kind kind, size_t n);

/* Allocates the zeroed state slab. 0 or ERR_NOMEM. nn_optim_free is NULL-safe. */
int nn_optim_init(nn_optim *o, nn_optim_kind kind, size_t n);
void nn_optim_free(nn_optim *o);

/* One update of params[n] from grads[n] with learning rate lr (OpenMP-parallel). */
void nn_optim_step(nn_optim *o, float *params, const float *grads, double lr);

/* Global L2 norm of grads[n] (accumulated in double). */
double nn_grad_norm(const float *grads, size_t n);

/* PyTorch clip_grad_norm_: scales grads by min(1, max_norm / (norm + 1e-6)); returns the norm
 * before clipping. */
double nn_clip_grad_norm(float *grads, size_t n, double max_norm);

/* CosineAnnealingWarmRestarts(T_0, T_mult, eta_min) after `epochs_done` scheduler steps
 * (stepped once per epoch, so epoch e >= 1 trains at nn_lr_cosine_warm(lr0, .., e - 1)):
 * lr = eta_min + (lr0 - eta_min) * (1 + cos(pi * T_cur / T_i)) / 2. */
double nn_lr_cosine_warm(double lr0, int T_0, int T_mult, double eta_min, long epochs_done);

#endif
