/* memsource: the dataset in the distributed in-memory store (see memsource.h). */
#include "train/memsource.h"

#include "core/err.h"
#include "core/log.h"

#include <stdlib.h>
#include <string.h>

int memsource_load(memsource *m, const dataset *ds, const dist_world *w) {
    memset(m, 0, sizeof *m);
    m->vol_elems = ds->vol_elems;
    m->mask_elems = ds->mask_elems;
    double t0 = time_now();
    int rc = store_create(&m->st, w->comm, NULL);
    if (rc)
        return rc;
    static const char *names[2][2] = {{"train_volume", "train_mask"},
                                      {"val_volume", "val_mask"}};
    for (int split = 0; split < 2 && rc == 0; split++) {
        int64_t lo, hi;
        store_nsplit(ds->n[split], w->size, w->rank, &lo, &hi);
        int64_t n = hi - lo;
        float *vol = malloc((size_t)(n > 0 ? n : 1) * ds->vol_elems * sizeof *vol);
        uint16_t *mask = malloc((size_t)(n > 0 ? n : 1) * ds->mask_elems * sizeof *mask);
        int lrc = vol && mask ? 0 : err_set(ERR_NOMEM, "out of memory loading the store");
        for (int64_t i = 0; i < n && lrc == 0; i++)
            lrc = dataset_read_sample(ds, split, lo + i, vol + (size_t)i * ds->vol_elems,
                                      mask + (size_t)i * ds->mask_elems);
        rc = dist_agree(w, lrc);
        if (rc == 0)
            rc = store_add(m->st, names[split][0], STORE_FLOAT32, (int64_t)ds->vol_elems, n, vol,
                           &m->var_vol[split]);
        if (rc == 0)
            rc = store_add(m->st, names[split][1], STORE_BYTE,
                           (int64_t)(ds->mask_elems * sizeof(uint16_t)), n, mask,
                           &m->var_mask[split]);
        m->bytes_local += n * (long long)(ds->vol_elems * 4 + ds->mask_elems * 2);
        free(vol);
        free(mask);
    }
    if (rc) {
        store_free(&m->st);
        return rc;
    }
    log_info("data_store memory: %.1f MB per rank loaded in %.2f s (%s, %s)",
             m->bytes_local / 1e6, time_now() - t0, store_method_name(store_get_method(m->st)),
             store_thread_safe(m->st) ? "thread-safe gets" : "gets on the training thread");
    return 0;
}

static int mem_read(void *ctx, int split, const int64_t *idx, int n, float *vol, uint16_t *mask) {
    memsource *m = ctx;
    int rc = store_get_batch(m->st, m->var_vol[split], idx, n, vol,
                             (size_t)n * m->vol_elems * sizeof *vol);
    if (rc == 0)
        rc = store_get_batch(m->st, m->var_mask[split], idx, n, mask,
                             (size_t)n * m->mask_elems * sizeof *mask);
    return rc;
}

ds_source memsource_source(memsource *m) {
    ds_source s = {mem_read, m, m->vol_elems, m->mask_elems, store_thread_safe(m->st)};
    return s;
}

void memsource_free(memsource *m) {
    if (m->st)
        store_free(&m->st);
}
