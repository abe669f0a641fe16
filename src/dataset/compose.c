/* compose: dataset composition plan (see compose.h). */
#include "dataset/compose.h"

#include "core/err.h"
#include "core/fsutil.h"
#include "core/mem.h"
#include "core/rng.h"
#include "fractal/ifs.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void ds_plan_free(ds_plan *p) {
    MEM_FREE(p->contents, p->is_val, p->colors);
    p->contents = NULL;
    p->is_val = NULL;
    p->colors = NULL;
}

int ds_plan_make(const ds_spec *c, ds_plan *p) {
    memset(p, 0, sizeof *p);
    int nfpv = c->n_fracts_per_vol, ncat = c->n_categories;
    if (nfpv < 1 || ncat < 1)
        return err_set(ERR_CONFIG, "n_categories and n_fracts_per_vol must be positive");
    p->n_categories = ncat;
    p->n_fracts_per_vol = nfpv;
    p->nipf = c->n_instances_used_per_fractal / nfpv * nfpv;
    p->num_volumes = ncat * (p->nipf / nfpv);
    if (p->num_volumes < 1)
        return err_set(ERR_CONFIG,
                       "key 'n_instances_used_per_fractal': %d instances per class make no volume "
                       "of %d fractals; use at least n_fracts_per_vol",
                       c->n_instances_used_per_fractal, nfpv);
    /* int(num_volumes * val_split / 100) in Python: exact integer division for these sizes. */
    p->n_val = (int)((long long)p->num_volumes * c->val_split / 100);
    p->n_train = p->num_volumes - p->n_val;
    if (p->n_train < 1 || p->n_val < 1)
        return err_set(ERR_CONFIG,
                       "key 'val_split': %d%% of %d volumes leaves an empty %s split; use more "
                       "instances (n_instances_used_per_fractal) or categories",
                       c->val_split, p->num_volumes, p->n_train < 1 ? "training" : "validation");
    size_t npairs = (size_t)ncat * (size_t)p->nipf;
    p->contents = malloc(npairs * 2 * sizeof *p->contents);
    p->is_val = calloc((size_t)p->num_volumes, 1);
    p->colors = malloc((size_t)ncat * 3 * sizeof *p->colors);
    int *pairs = malloc(npairs * 2 * sizeof *pairs);
    uint32_t *perm = malloc((npairs > (size_t)p->num_volumes ? npairs : (size_t)p->num_volumes) *
                            sizeof *perm);
    if (!p->contents || !p->is_val || !p->colors || !pairs || !perm) {
        free(pairs);
        free(perm);
        ds_plan_free(p);
        return err_set(ERR_NOMEM, "dataset plan: out of memory");
    }
    /* Steps 2-3: per-category draws without replacement (random.sample's distribution). */
    size_t k = 0;
    for (int cat = 0; cat < ncat; cat++) {
        int remaining = p->nipf;
        for (int round = 0; remaining > 0; round++) {
            int take = remaining < IFS_INSTANCES ? remaining : IFS_INSTANCES;
            rng r = rng_make((uint64_t)c->seed, RNG_DATASET_COMPOSE, 1 + (uint64_t)cat,
                             (uint64_t)round);
            int pool[IFS_INSTANCES];
            for (int i = 0; i < IFS_INSTANCES; i++)
                pool[i] = i;
            for (int i = 0; i < take; i++) { /* partial Fisher-Yates */
                int j = i + (int)rng_below(&r, (uint64_t)(IFS_INSTANCES - i));
                int t = pool[i];
                pool[i] = pool[j];
                pool[j] = t;
                pairs[2 * k] = cat;
                pairs[2 * k + 1] = pool[i];
                k++;
            }
            remaining -= take;
        }
    }
    rng rs = rng_make((uint64_t)c->seed, RNG_DATASET_COMPOSE, 0, 0);
    rng_permutation(&rs, perm, npairs);
    for (size_t i = 0; i < npairs; i++) {
        p->contents[2 * i] = pairs[2 * perm[i]];
        p->contents[2 * i + 1] = pairs[2 * perm[i] + 1];
    }
    /* Step 4: the first n_val entries of a uniform permutation are a uniform random subset. */
    rng rv = rng_make((uint64_t)c->seed, RNG_DATASET_SPLIT, 0, 0);
    rng_permutation(&rv, perm, (size_t)p->num_volumes);
    for (int i = 0; i < p->n_val; i++)
        p->is_val[perm[i]] = 1;
    rng rc = rng_make((uint64_t)c->seed, RNG_DATASET_COLORS, 0, 0);
    for (int i = 0; i < ncat * 3; i++)
        p->colors[i] = rng_uniform(&rc);
    free(pairs);
    free(perm);
    return 0;
}

int ds_plan_write_csv(const ds_plan *p, const char *path) {
    fs_atomic a;
    int rc = fs_atomic_open(&a, path);
    if (rc)
        return rc;
    int w = 2 * p->n_fracts_per_vol;
    for (int v = 0; v < p->num_volumes; v++) {
        fprintf(a.fp, "%d", v);
        for (int j = 0; j < w; j++)
            fprintf(a.fp, ",%d", p->contents[(size_t)v * (size_t)w + (size_t)j]);
        fputc('\n', a.fp);
    }
    return fs_atomic_commit(&a, 0);
}

int ds_plan_mask_values(const ds_plan *p, int val, int *out) {
    int ncat = p->n_categories;
    unsigned char *seen = calloc((size_t)ncat + 1, 1);
    if (!seen)
        return 0;
    seen[0] = 1;
    for (int v = 0; v < p->num_volumes; v++) {
        if (p->is_val[v] != (val != 0))
            continue;
        for (int j = 0; j < p->n_fracts_per_vol; j++) {
            int cat = p->contents[(size_t)v * 2 * (size_t)p->n_fracts_per_vol + 2 * (size_t)j];
            if (cat >= 0 && cat < ncat)
                seen[cat + 1] = 1;
        }
    }
    int n = 0;
    for (int i = 0; i <= ncat; i++)
        if (seen[i])
            out[n++] = i;
    free(seen);
    return n;
}
