#!/usr/bin/env python3
"""Independent numpy checks of a generated dataset (reference §7).

  check_dataset.py full DATASET INSTANCE_DIR N_CAT VAL_SPLIT NFPV
      meta.yaml, volumes_contents.csv, split counts, shapes and dtypes, mask values, colours per
      class, background, and an exact numpy re-implementation of the float32 voxelisation and
      rendering compared byte for byte with every (unsharded) volume and mask.
  check_dataset.py concat SHARDED FULL
      every volume and mask of SHARDED, reassembled from its shards with torch.chunk semantics,
      equals FULL byte for byte.
Prints one line per failure and exits 1 on any.
"""
import csv
import glob
import os
import sys

import numpy as np
import yaml

fails = []


def fail(msg):
    fails.append(msg)
    print("FAIL", msg)


def voxelize(points, grid):
    """Upstream points_to_voxel_indices in float32 (NumPy weak-scalar promotion), x->D y->H z->W."""
    p = points.astype(np.float32)
    mins = p.min(axis=0)
    maxs = p.max(axis=0)
    max_extent = np.float32((maxs - mins).max())
    voxel_size = np.float32(np.float32(max_extent + np.float32(1e-6)) / np.float32(grid))
    scaled = ((p - mins) / voxel_size).astype(np.float32)
    span = scaled.max(axis=0)
    offset = ((np.float32(grid) - span) / np.float32(2)).astype(np.float32)
    idx = np.floor((scaled + offset).astype(np.float32)).astype(np.int64)
    idx = np.clip(idx, 0, grid - 1)
    return np.unique(idx, axis=0)


def load_rows(ds):
    with open(os.path.join(ds, "volumes_contents.csv")) as f:
        return [[int(x) for x in r] for r in csv.reader(f) if r]


def split_of(ds, v):
    for s in ("training", "validation"):
        if glob.glob(os.path.join(ds, "volumes", s, f"{v}_shard*.npy")):
            return s
    return None


def full(ds, inst_dir, ncat, val_split, nfpv):
    meta = yaml.safe_load(open(os.path.join(ds, "meta.yaml")))
    for k in ("config_id", "dataset_format_version", "config_subset", "include_keys",
              "code_commit", "created_at"):
        if k not in meta:
            fail(f"meta.yaml lacks {k}")
    if meta.get("dataset_format_version") != 5:
        fail("dataset_format_version != 5")
    grid = int(meta["vol_size"])
    rows = load_rows(ds)
    nvol = len(rows)
    if nvol != meta["num_volumes"]:
        fail(f"{nvol} csv rows, meta num_volumes {meta['num_volumes']}")
    for i, r in enumerate(rows):
        if r[0] != i or len(r) != 1 + 2 * nfpv:
            fail(f"csv row {i}: {r}")
        for k in range(nfpv):
            if not (0 <= r[1 + 2 * k] < ncat and 0 <= r[2 + 2 * k] < 145):
                fail(f"csv row {i}: bad (cat, inst) {r[1 + 2 * k]}, {r[2 + 2 * k]}")
    n_val = nvol * val_split // 100
    splits = [split_of(ds, v) for v in range(nvol)]
    if splits.count("validation") != n_val or splits.count("training") != nvol - n_val:
        fail(f"split counts {splits.count('training')}/{splits.count('validation')}, "
             f"want {nvol - n_val}/{n_val}")
    colors = {}
    for v, r in enumerate(rows):
        s = splits[v]
        vol = np.load(os.path.join(ds, "volumes", s, f"{v}_shard000000.npy"))
        mask = np.load(os.path.join(ds, "masks", s, f"{v}_shard000000_mask.npy"))
        if vol.dtype != np.float32 or vol.shape != (3, grid, grid, grid):
            fail(f"volume {v}: {vol.dtype} {vol.shape}")
            continue
        if mask.dtype != np.uint16 or mask.shape != (grid, grid, grid):
            fail(f"mask {v}: {mask.dtype} {mask.shape}")
            continue
        if mask.max() > ncat:
            fail(f"mask {v}: value {mask.max()} > n_categories")
        if np.any(vol[:, mask == 0] != 0):
            fail(f"volume {v}: background voxels are not zero")
        for c in np.unique(mask):
            if c == 0:
                continue
            col = vol[:, mask == c]
            first = col[:, 0].copy()
            if not np.all(col == first[:, None]):
                fail(f"volume {v}: class {c - 1} voxels carry several colours")
            if c in colors and not np.array_equal(colors[c], first):
                fail(f"class {c - 1}: colour differs between volumes")
            colors.setdefault(c, first)
        # Exact reconstruction from the instances, in order, later fractals overwriting.
        ref_mask = np.zeros((grid,) * 3, np.uint16)
        vox = []
        for k in range(nfpv):
            cat, inst = r[1 + 2 * k], r[2 + 2 * k]
            pts = np.load(os.path.join(inst_dir, f"{cat:06d}", f"{cat:06d}_{inst:04d}.npy"))
            idx = voxelize(pts, grid)
            vox.append((cat, idx))
            ref_mask[idx[:, 0], idx[:, 1], idx[:, 2]] = cat + 1
        if not np.array_equal(ref_mask, mask):
            fail(f"mask {v}: differs from the numpy voxelisation at "
                 f"{int((ref_mask != mask).sum())} voxels")
        # Each listed class is in the mask unless all its voxels were overwritten later.
        for k, (cat, idx) in enumerate(vox):
            later = set()
            for _, j in vox[k + 1:]:
                later |= set(map(tuple, j))
            survives = any(tuple(t) not in later for t in idx)
            if survives and not np.any(mask == cat + 1):
                fail(f"mask {v}: class {cat} listed in volumes_contents.csv is absent")
        ref_vol = np.zeros((3,) + (grid,) * 3, np.float32)
        for c, col in colors.items():
            ref_vol[:, ref_mask == c] = col[:, None]
        if ref_vol.tobytes() != vol.tobytes():
            fail(f"volume {v}: differs from the reconstruction")
    for c, col in colors.items():
        if not np.all((col >= 0) & (col < 1)):
            fail(f"class {c - 1}: colour {col} outside [0, 1)")
    if len(colors) >= 2 and len({tuple(c) for c in colors.values()}) != len(colors):
        fail("two classes share a colour")


def chunk(size, n, i):
    c = -(-size // n)
    return i * c, min(size, i * c + c)


def concat(sharded, fulldir):
    meta = yaml.safe_load(open(os.path.join(sharded, "meta.yaml")))
    counts = meta["config_subset"]["dc_num_shards"]
    dims = meta["config_subset"]["dc_shard_dims"]
    grid = int(meta["vol_size"])
    total = int(np.prod(counts))
    nvol = len(load_rows(fulldir))
    checked = 0
    for v in range(nvol):
        s = split_of(fulldir, v)
        if split_of(sharded, v) != s:
            fail(f"volume {v}: split differs")
            continue
        vol = np.full((3,) + (grid,) * 3, np.nan, np.float32)
        mask = np.full((grid,) * 3, 65535, np.uint16)
        for sid in range(total):
            idx, rem = [0, 0, 0], sid
            for d, c in reversed(list(zip(dims, counts))):  # row-major over the layout order
                idx[d - 2] = rem % c
                rem //= c
            sl = []
            for ax in range(3):
                c = dict(zip(dims, counts)).get(ax + 2, 1)
                a, b = chunk(grid, c, idx[ax])
                sl.append(slice(a, b))
            pv = np.load(os.path.join(sharded, "volumes", s, f"{v}_shard{sid:06d}.npy"))
            pm = np.load(os.path.join(sharded, "masks", s, f"{v}_shard{sid:06d}_mask.npy"))
            want = tuple(x.stop - x.start for x in sl)
            if pm.shape != want or pv.shape != (3,) + want:
                fail(f"volume {v} shard {sid}: shape {pv.shape}, want (3,)+{want}")
                continue
            vol[:, sl[0], sl[1], sl[2]] = pv
            mask[sl[0], sl[1], sl[2]] = pm
        fv = np.load(os.path.join(fulldir, "volumes", s, f"{v}_shard000000.npy"))
        fm = np.load(os.path.join(fulldir, "masks", s, f"{v}_shard000000_mask.npy"))
        if vol.tobytes() != fv.tobytes() or mask.tobytes() != fm.tobytes():
            fail(f"volume {v}: reassembled shards differ from the unsharded volume")
        checked += 1
    if checked != nvol:
        fail(f"only {checked}/{nvol} volumes checked")


if __name__ == "__main__":
    if sys.argv[1] == "full":
        full(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    elif sys.argv[1] == "concat":
        concat(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: check_dataset.py full|concat ...")
    sys.exit(1 if fails else 0)
