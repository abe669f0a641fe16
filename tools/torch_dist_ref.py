#!/usr/bin/env python3
"""PyTorch reference for scaffold's spatial parallelism (src/parallel, group_norm_stats: shard).

Upstream DistConv (reference scaffold-upstream.md section 10.3) splits the volume over ranks;
its convolutions exchange halos, so they compute exactly what the unsharded convolution
computes, but GroupNorm is purely local: each shard normalises with its own statistics. Loss
and Dice sums are reduced over the shards (SpatialAllReduce), so the loss is the one of the
whole volume. This script emulates that on one process: the upstream U-Net (tools/torch_ref.py)
on the whole volume with every GroupNorm replaced by one that normalises each of the SHARDS
chunks along D separately, in float64, and writes

  fixtures OUTDIR   OUTDIR/shard_gn.safetensors: parameters (state_dict names), input x, labels,
                    CE weights, logits, [loss, dice], and every parameter gradient

for tests/dist/test_spatial.c (2 ranks, dc_num_shards [2, 1, 1], group_norm_stats: shard).
Use /usr/bin/python3 (Debian's numpy and torch).
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import UNet, _np, ce_weights, scaffold_loss, st_write  # noqa: E402

SHARDS = 2


class ShardGroupNorm(nn.GroupNorm):
    """nn.GroupNorm with per-shard statistics: D split into SHARDS chunks (torch.chunk, as the
    dataset's shard layout), each normalised on its own; same parameters and names."""

    def forward(self, x):
        parts = [F.group_norm(h, self.num_groups, self.weight, self.bias, self.eps)
                 for h in x.chunk(SHARDS, dim=2)]
        return torch.cat(parts, dim=2)


def fixtures(outdir):
    spec = dict(layers=2, base=4, classes=3, groups=2, n=1, size=16, shards=SHARDS)
    torch.manual_seed(7)
    model = UNet(3, spec["classes"], spec["layers"], spec["groups"], spec["base"]).double()
    for m in model.modules():
        if isinstance(m, nn.GroupNorm):
            m.__class__ = ShardGroupNorm
    s = spec["size"]
    x = torch.randn(spec["n"], 3, s, s, s, dtype=torch.float64)
    lab = (x[:, 0] > 0.3).long() + (x[:, 1] > 0.8).long()
    w = ce_weights(lab, spec["classes"])
    out = {f"param.{k}": _np(v) for k, v in model.state_dict().items()}
    out["x"] = _np(x)
    out["labels"] = lab.numpy().astype(np.uint16)
    out["weight"] = _np(w)
    logits = model(x)
    loss, dice = scaffold_loss(logits, lab, w)
    loss.backward()
    out["logits"] = _np(logits)
    out["loss"] = np.array([loss.item(), dice.item()], dtype=np.float32)
    for k, p in model.named_parameters():
        out[f"grad.{k}"] = _np(p.grad)
    os.makedirs(outdir, exist_ok=True)
    st_write(f"{outdir}/shard_gn.safetensors", out,
             {**{k: str(v) for k, v in spec.items()},
              "generator": "tools/torch_dist_ref.py fixtures", "torch": torch.__version__})
    print(f"{outdir}/shard_gn.safetensors: loss {loss.item():.6f}, dice {dice.item():.6f}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "fixtures":
        sys.exit(__doc__)
    fixtures(sys.argv[2])
