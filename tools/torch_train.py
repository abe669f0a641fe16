#!/usr/bin/env python3
"""The PyTorch baseline of bench/train: trains the same U-Net (tools/torch_ref.py) with the same
loss, CE class weights, optimizer (Adam, PyTorch defaults), gradient clipping (1.0) and schedule
(CosineAnnealingWarmRestarts stepped per epoch) on scaffold's own dataset files, one process,
until the validation hard foreground Dice reaches the target. Every epoch reads the .npy files
(as a DataLoader with num_workers=0 would), so I/O is included as in scaffold's FOM.

usage: torch_train.py DATASET_DIR --classes K --layers L --base B --groups G [--lr 1e-3]
         [--min-lr 1e-4] [--T0 10] [--Tmult 2] [--batch 1] [--seed 42] [--target 0.95]
         [--max-epochs 100] [--threads N] [--ce-fraction 0.1] [--warmup 2]
prints per-epoch lines and "torch_time_to_target_s SECONDS epochs N val_dice D".
Run with /usr/bin/python3 (Debian's torch)."""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import UNet, ce_weights, hard_dice, scaffold_loss  # noqa: E402


def split_ids(ds, split):
    d = os.path.join(ds, "volumes", split)
    ids = sorted(f.split("_shard")[0] for f in os.listdir(d) if f.endswith(".npy"))
    return ids


def load(ds, split, i):
    v = np.load(os.path.join(ds, "volumes", split, f"{i}_shard000000.npy"))
    m = np.load(os.path.join(ds, "masks", split, f"{i}_shard000000_mask.npy"))
    return torch.from_numpy(v), torch.from_numpy(m.astype(np.int64))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--classes", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--base", type=int, required=True)
    ap.add_argument("--groups", type=int, required=True)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--T0", type=int, default=10)
    ap.add_argument("--Tmult", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--max-epochs", type=int, default=100)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--ce-fraction", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    train, val = split_ids(a.dataset, "training"), split_ids(a.dataset, "validation")
    model = UNet(3, a.classes, a.layers, a.groups, a.base)
    k = min(max(math.ceil(len(train) * a.ce_fraction), 1), len(train))
    idx = torch.linspace(0, len(train) - 1, k).long().tolist()
    w = ce_weights(torch.stack([load(a.dataset, "training", train[i])[1] for i in idx]), a.classes)
    w = w.float()
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, a.T0, a.Tmult, a.min_lr)

    def batches(ids, order):
        for s in range(0, len(order), a.batch):
            vs, ms = zip(*[load(a.dataset, "training" if ids is train else "validation", ids[j])
                           for j in order[s:s + a.batch]])
            yield torch.stack(vs), torch.stack(ms)

    # Warmup (untimed; state restored), as scaffold does.
    state = ({k_: v.clone() for k_, v in model.state_dict().items()}, opt.state_dict())
    for n, (x, y) in enumerate(batches(train, list(range(len(train))))):
        if n >= a.warmup:
            break
        loss, _ = scaffold_loss(model(x), y, w)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.load_state_dict(state[0])
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, a.T0, a.Tmult, a.min_lr)
    t0 = time.perf_counter()
    dice, epoch = 0.0, 0
    while dice < a.target and epoch < a.max_epochs:
        epoch += 1
        te = time.perf_counter()
        g = torch.Generator()
        g.manual_seed(a.seed + epoch)
        order = torch.randperm(len(train), generator=g).tolist()
        model.train()
        tl = 0.0
        for x, y in batches(train, order):
            loss, _ = scaffold_loss(model(x), y, w)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            tl += float(loss) * x.shape[0]
        model.eval()
        ds = 0.0
        with torch.no_grad():
            for x, y in batches(val, list(range(len(val)))):
                ds += float(hard_dice(model(x), y).sum())
        dice = ds / len(val)
        sched.step()
        print(f"torch epoch {epoch}: loss {tl / len(train):.4f}, val dice {dice:.4f}, "
              f"{time.perf_counter() - te:.2f} s", flush=True)
    print(f"torch_time_to_target_s {time.perf_counter() - t0:.3f} epochs {epoch} val_dice {dice:.4f}")


if __name__ == "__main__":
    main()
