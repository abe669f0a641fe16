/* compose: which fractal instances make up each volume, the validation split and the class
 * colours (reference §7.2), with the project's counter-based RNG instead of Python's `random`
 * and NumPy's legacy MT19937 (statistically equivalent, not bit-identical to upstream).
 *
 *  1. nipf = n_instances_used_per_fractal // n_fracts_per_vol * n_fracts_per_vol.
 *  2. For each category c in order, draw instances without replacement from the 145 of the class
 *     in rounds of min(145, remaining) until nipf are drawn (stream (seed, COMPOSE, 1 + c, round)),
 *     giving (c, inst) pairs.
 *  3. Shuffle the n_categories * nipf pairs (stream (seed, COMPOSE, 0, 0)); consecutive groups
 *     of n_fracts_per_vol pairs form the volumes: num_volumes = n_categories * nipf / nfpv.
 *  4. Validation set: int(num_volumes * val_split / 100) distinct volume indices (stream
 *     (seed, SPLIT, 0, 0)); the rest are training volumes.
 *  5. One RGB colour per category, uniform in [0, 1) as float64 (stream (seed, COLORS, 0, 0)).
 * Every rank computes the same plan (no broadcast needed): nothing depends on the rank. */
#ifndef SCAFFOLD_DATASET_COMPOSE_H
#define SCAFFOLD_DATASET_COMPOSE_H

#include "dataset/spec.h"

typedef struct ds_plan {
    int n_categories;
    int n_fracts_per_vol;
    int nipf;        /* instances used per category (rounded down to a multiple of nfpv) */
    int num_volumes; /* n_categories * nipf / n_fracts_per_vol */
    int n_val, n_train;
    int *contents;         /* (num_volumes, 2 * nfpv): cat0, inst0, cat1, inst1, ... */
    unsigned char *is_val; /* (num_volumes): 1 = validation */
    double *colors;        /* (n_categories, 3) */
} ds_plan;

/* Computes the plan of a config. *p owns malloc'ed arrays (ds_plan_free). 0, ERR_CONFIG
 * (no volume would be produced) or ERR_NOMEM. */
int ds_plan_make(const ds_spec *c, ds_plan *p);

/* Frees the arrays (NULL-safe, idempotent). */
void ds_plan_free(ds_plan *p);

/* Writes volumes_contents.csv: one row per volume, `vol_idx,cat1,inst1,...` (upstream "%i"
 * rows, no header), atomically. 0 or ERR_IO. */
int ds_plan_write_csv(const ds_plan *p, const char *path);

/* Mask values present in a split according to the plan (0 and cat+1 of every listed fractal),
 * sorted: writes up to n_categories + 1 values to out and returns the count. */
int ds_plan_mask_values(const ds_plan *p, int val, int *out);

#endif
