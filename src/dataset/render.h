/* render: voxelisation of one fractal point cloud and rendering of fractals into a volume shard
 * (reference §7.3-7.4).
 *
 * Voxelisation reproduces upstream's float32 arithmetic in the same order (NumPy weak-scalar
 * promotion keeps everything float32): per axis mins/maxs; max_extent = max(maxs - mins);
 * voxel_size = (max_extent + 1e-6f) / grid; scaled = (p - mins) / voxel_size;
 * span = max(scaled) per axis; offset = (grid - span) / 2; idx = floor(scaled + offset), clipped
 * to [0, grid-1]. Scaling is isotropic (the longest axis fills the grid) and every instance is
 * centred. Point x -> D, y -> H, z -> W.
 *
 * Rendering: background 0; for each fractal in order, every voxel it covers gets the class colour
 * (float64 colour cast to float32) in the 3 channels and label cat + 1 in the mask, so later
 * fractals overwrite earlier ones. Only the voxels inside the shard's region are written, so a
 * shard is rendered without materialising the whole volume.
 *
 * RATIONALE: float contraction (FMA) would change floor() at voxel boundaries, so this module is
 * compiled with -ffp-contract=off (src/dataset/module.mk). */
#ifndef SCAFFOLD_DATASET_RENDER_H
#define SCAFFOLD_DATASET_RENDER_H

#include <stdint.h>

/* Voxelises n points (float32, (n, 3), x y z) on a grid of `grid` voxels per side into idx
 * ((n, 3) int32: d, h, w; duplicates kept, since rendering is idempotent). Returns 0, or
 * ERR_FORMAT if a point is not finite or the extent overflows (the caller names the file). */
int ds_voxelize(const float *pts, int64_t n, int grid, int32_t *idx);

/* Zeroes a shard of extent ext = (d, h, w): vol (3, d, h, w) float32 and mask (d, h, w). */
void ds_render_clear(float *vol, uint16_t *mask, const int64_t ext[3]);

/* Paints the n voxels of idx that fall inside [start, stop) (per axis D, H, W) with `color` and
 * `label`. vol is (3, d, h, w), mask (d, h, w), d = stop[0] - start[0] etc. */
void ds_render_fractal(float *vol, uint16_t *mask, const int64_t start[3], const int64_t stop[3],
                       const int32_t *idx, int64_t n, const float color[3], uint16_t label);

#endif
