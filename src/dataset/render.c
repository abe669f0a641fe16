/* render: voxelisation and shard rendering (see render.h). */
#include "dataset/render.h"

#include "core/err.h"

#include <math.h>
#include <string.h>

int ds_voxelize(const float *pts, int64_t n, int grid, int32_t *idx) {
    if (n <= 0)
        return 0;
    float mins[3], maxs[3];
    for (int a = 0; a < 3; a++)
        mins[a] = maxs[a] = pts[a];
    for (int64_t i = 0; i < n; i++)
        for (int a = 0; a < 3; a++) {
            float v = pts[3 * i + a];
            if (!isfinite(v))
                return err_set(ERR_FORMAT, "point %lld is not finite", (long long)i);
            if (v < mins[a])
                mins[a] = v;
            if (v > maxs[a])
                maxs[a] = v;
        }
    float max_extent = maxs[0] - mins[0];
    for (int a = 1; a < 3; a++) {
        float e = maxs[a] - mins[a];
        if (e > max_extent)
            max_extent = e;
    }
    const float fgrid = (float)grid;
    float voxel_size = (max_extent + 1e-6f) / fgrid;
    if (!isfinite(voxel_size) || !(voxel_size > 0))
        return err_set(ERR_FORMAT, "point cloud extent %g cannot be voxelised", (double)max_extent);
    /* span = max of scaled per axis; scaled is recomputed in the second pass (same expression,
     * same float32 result) instead of storing n*3 floats. */
    float span[3] = {0, 0, 0};
    for (int64_t i = 0; i < n; i++)
        for (int a = 0; a < 3; a++) {
            float s = (pts[3 * i + a] - mins[a]) / voxel_size;
            if (i == 0 || s > span[a])
                span[a] = s;
        }
    float offset[3];
    for (int a = 0; a < 3; a++)
        offset[a] = (fgrid - span[a]) / 2.0f;
    for (int64_t i = 0; i < n; i++)
        for (int a = 0; a < 3; a++) {
            float s = (pts[3 * i + a] - mins[a]) / voxel_size;
            float f = floorf(s + offset[a]);
            int32_t v;
            if (!(f >= 0.0f))
                v = 0; /* also NaN, which numpy's int cast then clip also sends to 0 */
            else if (f > (float)(grid - 1))
                v = grid - 1;
            else
                v = (int32_t)f;
            idx[3 * i + a] = v;
        }
    return 0;
}

void ds_render_clear(float *vol, uint16_t *mask, const int64_t ext[3]) {
    size_t nv = (size_t)ext[0] * (size_t)ext[1] * (size_t)ext[2];
    memset(vol, 0, 3 * nv * sizeof *vol);
    memset(mask, 0, nv * sizeof *mask);
}

void ds_render_fractal(float *vol, uint16_t *mask, const int64_t start[3], const int64_t stop[3],
                       const int32_t *idx, int64_t n, const float color[3], uint16_t label) {
    int64_t ld = stop[0] - start[0], lh = stop[1] - start[1], lw = stop[2] - start[2];
    size_t plane = (size_t)ld * (size_t)lh * (size_t)lw;
    for (int64_t i = 0; i < n; i++) {
        int64_t d = idx[3 * i] - start[0], h = idx[3 * i + 1] - start[1],
                w = idx[3 * i + 2] - start[2];
        if (d < 0 || d >= ld || h < 0 || h >= lh || w < 0 || w >= lw)
            continue;
        size_t o = ((size_t)d * (size_t)lh + (size_t)h) * (size_t)lw + (size_t)w;
        vol[o] = color[0];
        vol[plane + o] = color[1];
        vol[2 * plane + o] = color[2];
        mask[o] = label;
    }
}
