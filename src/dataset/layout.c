/* layout: shard ids, chunk arithmetic and layout validation (see layout.h). */
#include "dataset/layout.h"

#include "core/err.h"

#include <stdio.h>

int ds_chunk(int64_t size, int n, int i, int64_t *start, int64_t *stop) {
    if (n < 1 || i < 0 || i >= n)
        return err_set(ERR_RANGE, "chunk %d of %d is out of range", i, n);
    int64_t chunk = (size + n - 1) / n;
    int64_t s = (int64_t)i * chunk;
    int64_t e = s + chunk < size ? s + chunk : size;
    if (s >= e)
        return err_set(ERR_RANGE,
                       "chunk %d of %d over %lld elements is empty (torch.chunk gives fewer "
                       "chunks); choose a shard count that keeps every chunk non-empty",
                       i, n, (long long)size);
    *start = s;
    *stop = e;
    return 0;
}

int ds_layout_check(const ds_layout *l, int vol_size, int code, const char *what) {
    if (l->n < 1 || l->n > 3)
        return err_set(code, "%s: shard layout needs 1 to 3 (dim, count) pairs, got %d", what,
                       l->n);
    for (int i = 0; i < l->n; i++) {
        if (l->dims[i] < 2 || l->dims[i] > 4)
            return err_set(code, "%s: shard dims must be 2 (D), 3 (H) or 4 (W), got %d", what,
                           l->dims[i]);
        for (int j = 0; j < i; j++)
            if (l->dims[j] == l->dims[i])
                return err_set(code, "%s: shard dim %d appears twice", what, l->dims[i]);
        if (l->counts[i] < 1 || l->counts[i] > vol_size)
            return err_set(code, "%s: shard count %d along dim %d must be in [1, %d]", what,
                           l->counts[i], l->dims[i], vol_size);
        int64_t s, e;
        for (int k = 0; k < l->counts[i]; k++)
            if (ds_chunk(vol_size, l->counts[i], k, &s, &e))
                return err_set(code,
                               "%s: %d shards along dim %d leave chunk %d of a %d-voxel axis "
                               "empty (torch.chunk semantics); use a count that divides %d",
                               what, l->counts[i], l->dims[i], k, vol_size, vol_size);
    }
    return 0;
}

ds_layout ds_layout_canonical(const ds_layout *l) {
    ds_layout c = *l;
    for (int i = 1; i < c.n; i++) /* insertion sort by dim */
        for (int j = i; j > 0 && c.dims[j - 1] > c.dims[j]; j--) {
            int t = c.dims[j];
            c.dims[j] = c.dims[j - 1];
            c.dims[j - 1] = t;
            t = c.counts[j];
            c.counts[j] = c.counts[j - 1];
            c.counts[j - 1] = t;
        }
    return c;
}

int ds_layout_count_of(const ds_layout *l, int axis) {
    for (int i = 0; i < l->n; i++)
        if (l->dims[i] == axis + 2)
            return l->counts[i];
    return 1;
}

int ds_layout_equivalent(const ds_layout *a, const ds_layout *b) {
    for (int ax = 0; ax < 3; ax++)
        if (ds_layout_count_of(a, ax) != ds_layout_count_of(b, ax))
            return 0;
    return 1;
}

int ds_layout_total(const ds_layout *l) {
    int t = 1;
    for (int i = 0; i < l->n; i++)
        t *= l->counts[i];
    return t;
}

void ds_layout_indices(const ds_layout *l, int id, int idx[3]) {
    idx[0] = idx[1] = idx[2] = 0;
    for (int i = l->n - 1; i >= 0; i--) { /* row-major: the last pair varies fastest */
        idx[l->dims[i] - 2] = id % l->counts[i];
        id /= l->counts[i];
    }
}

int ds_layout_id(const ds_layout *l, const int idx[3], int *id) {
    for (int ax = 0; ax < 3; ax++)
        if (idx[ax] < 0 || idx[ax] >= ds_layout_count_of(l, ax))
            return err_set(ERR_RANGE, "shard index %d along axis %d is outside [0, %d)", idx[ax],
                           ax + 2, ds_layout_count_of(l, ax));
    int v = 0;
    for (int i = 0; i < l->n; i++)
        v = v * l->counts[i] + idx[l->dims[i] - 2];
    *id = v;
    return 0;
}

int ds_layout_region(const ds_layout *l, int vol_size, int id, int64_t start[3],
                     int64_t stop[3]) {
    if (id < 0 || id >= ds_layout_total(l))
        return err_set(ERR_RANGE, "shard id %d is outside [0, %d)", id, ds_layout_total(l));
    int idx[3];
    ds_layout_indices(l, id, idx);
    for (int ax = 0; ax < 3; ax++) {
        int rc = ds_chunk(vol_size, ds_layout_count_of(l, ax), idx[ax], &start[ax], &stop[ax]);
        if (rc)
            return rc;
    }
    return 0;
}

static const char *fmt_list(const int *v, int n, char *buf, size_t sz) {
    size_t o = (size_t)snprintf(buf, sz, "[");
    for (int i = 0; i < n && o < sz; i++)
        o += (size_t)snprintf(buf + o, sz - o, i ? ", %d" : "%d", v[i]);
    if (o < sz)
        snprintf(buf + o, sz - o, "]");
    return buf;
}

const char *ds_layout_counts_str(const ds_layout *l, char *buf, size_t n) {
    return fmt_list(l->counts, l->n, buf, n);
}

const char *ds_layout_dims_str(const ds_layout *l, char *buf, size_t n) {
    return fmt_list(l->dims, l->n, buf, n);
}
