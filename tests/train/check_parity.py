#!/usr/bin/env python3
"""Compares a scaffold run with the PyTorch reference of tests/train/fixtures/parity.json
(tools/train_parity_ref.py): same initial weights (hash of the tensor bytes) and sample order
exactly, then per-step training losses and soft Dice, per-epoch training loss, validation loss
and validation hard Dice within fp32 noise of PyTorch in float64.

fp32 noise is measured, not guessed: the fixtures hold, per value, the largest deviation from
float64 of PyTorch fp32 runs from the same weights and from weights moved by one ulp
(tools/train_parity_ref.py). A value passes when its deviation is at most NOISE_FACTOR times the
largest noise seen up to that step (rounding carried forward does not shrink), and never fails
below a floor (FLOOR relative; the validation hard Dice DICE_FLOOR absolute, a few voxels).

usage: check_parity.py FIXTURE VARIANT RUN_DIR INIT.safetensors
Exit 0 when everything agrees, 1 with the first disagreements, 3 when the fixtures are stale
(the initial weights or the order changed: regenerate with tools/train_parity_ref.py). Prints,
per kind of value, the deviation that came closest to its tolerance."""
import csv
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from train_parity_ref import st_data_hash  # noqa: E402

NOISE_FACTOR, FLOOR, DICE_FLOOR = 4.0, 5e-6, 1e-3


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def main(fixture, variant, run_dir, init):
    fx = json.load(open(fixture))["variants"][variant]
    if st_data_hash(init) != fx["init_sha256"]:
        print(f"{variant}: the initial weights differ from the fixtures' (the model init or its "
              f"RNG changed): regenerate with tools/train_parity_ref.py")
        return 3
    order = list(csv.DictReader(open(os.path.join(run_dir, "sample_order.csv"))))
    got = [[int(o["epoch"]), int(o["step"]), int(o["replica"]), o["samples"]] for o in order]
    if got != fx["order"]:
        print(f"{variant}: the sample order differs from the fixtures' (the dataset or the "
              f"sampler changed): regenerate with tools/train_parity_ref.py")
        return 3
    ref, noise = fx["torch_float64"], fx["fp32_noise"]
    worst, seen, bad = {}, {}, []

    def check(kind, what, v, r, n, floor=FLOOR, absolute=False):
        """v against r; n: the fp32 noise of this value."""
        seen[kind] = max(seen.get(kind, 0.0), n)
        tol = max(floor, NOISE_FACTOR * seen[kind])
        d = abs(v - r) if absolute else rel(v, r)
        w = worst.get(kind)
        if w is None or d / tol > w[0] / w[1]:
            worst[kind] = (d, tol)
        if d > tol:
            bad.append(f"{what}: scaffold {v!r} vs PyTorch {r!r} ({'abs' if absolute else 'rel'} "
                       f"deviation {d:.2e} > {tol:.2e}; fp32 noise here {n:.2e})")

    for o, (l64, d64), (nl, nd) in zip(order, ref["steps"], noise["steps"]):
        where = f"epoch {o['epoch']} step {o['step']} replica {o['replica']}"
        check("step loss", f"{where} loss", float(o["loss"]), l64, nl)
        check("step soft Dice", f"{where} soft Dice", float(o["dice"]), d64, nd)
    stats = list(csv.DictReader(open(os.path.join(run_dir, "train_stats.csv"))))
    if len(stats) != len(ref["epochs"]):
        print(f"{variant}: {len(stats)} epochs in train_stats.csv, the fixtures have "
              f"{len(ref['epochs'])}")
        return 1
    for st, e64, n in zip(stats, ref["epochs"], noise["epochs"]):
        e = st["epoch"]
        check("epoch training loss", f"epoch {e} training loss", float(st["overall_loss"]),
              e64[0], n[0])
        check("validation loss", f"epoch {e} validation loss", float(st["val_loss_avg"]), e64[1],
              n[1])
        check("validation hard Dice", f"epoch {e} validation hard Dice", float(st["val_dice"]),
              e64[2], n[2], floor=DICE_FLOOR, absolute=True)
    print(f"{variant}: closest to its tolerance (deviation from PyTorch float64 / tolerance): " +
          "; ".join(f"{k} {d:.1e}/{t:.1e}" for k, (d, t) in worst.items()))
    for b in bad[:5]:
        print(f"{variant}: {b}")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
