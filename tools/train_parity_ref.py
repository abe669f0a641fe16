#!/usr/bin/env python3
"""Reference values of the step-level parity test (tests/train/parity.sh): scaffold and
PyTorch trained from the same initial weights, on the same samples in the same order, agree
step by step within fp32 noise.

For each variant below this script runs `scaffold benchmark` on tests/train/parity.yml with
--save-initial-weights and --save-sample-order, then the PyTorch harness
(bench/train/torch_train.py, upstream's training in PyTorch) from those weights in that order on
the same dataset folder, in float64 (the reference: PyTorch's own rounding out of the way) and
in float32, plain and from initial weights moved by one ulp (--init-ulp-noise, NOISE_RUNS
seeds): how far fp32 runs as valid as any stray from float64 at each step is the size of "fp32
noise" (Adam turns rounding in near-zero gradients into learning-rate-sized steps, so it grows
from 1e-7 at the first steps to 1e-4 after a few dozen). It writes
tests/train/fixtures/parity.json with, per variant: the hash of the initial weights' tensor bytes
and the sample order (so the test can tell stale fixtures from a divergence), the per-step
training loss and soft Dice of every replica, the per-epoch training loss, validation loss and
validation hard Dice, and the noise envelope of each (the largest deviation of the fp32 runs from
float64).

usage: tools/train_parity_ref.py [--build build] [--out tests/train/fixtures/parity.json]
Run from the repository root after `make`, with /usr/bin/python3 (Debian's torch 1.13 is fine)
or a PyTorch 2.x; needs mpirun for the 2-rank variant.
"""
import argparse
import csv
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

NOISE_RUNS = 8

# name, ranks, extra scaffold flags, epochs
VARIANTS = [
    ("r1b1", 1, [], 3),                           # 18 steps through a cosine step and a restart
    ("r2b1", 2, [], 2),                           # 2 replicas: DDP's mean gradient
    ("r1b2", 1, ["--local-batch-size", "2"], 2),  # batch 2: loss over the batch's voxels
]


def st_data_hash(path):
    """SHA-256 of a safetensors file's tensors (names, shapes, bytes in name order), metadata
    excluded (it holds a per-save id)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    h = hashlib.sha256()
    for name in sorted(k for k in header if k != "__metadata__"):
        e = header[name]
        b0, b1 = e["data_offsets"]
        h.update(f"{name}:{e['dtype']}:{e['shape']}\n".encode())
        h.update(data[b0:b1])
    return h.hexdigest()


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/train/fixtures/parity.json"))
    a = ap.parse_args()
    import torch  # here: the test's checker imports st_data_hash without torch
    scaffold = os.path.join(ROOT, a.build, "scaffold")
    harness = os.path.join(ROOT, "bench/train/torch_train.py")
    yml = os.path.join(ROOT, "tests/train/parity.yml")
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    tmp = tempfile.mkdtemp(prefix="parity-ref.")
    out = {"generator": "tools/train_parity_ref.py", "torch": torch.__version__,
           "config": open(yml).read(), "variants": {}}
    try:
        for name, ranks, flags, epochs in VARIANTS:
            w = os.path.join(tmp, name)
            init = os.path.join(w, "init.safetensors")
            os.makedirs(w)
            cmd = [scaffold, "benchmark", "-c", os.path.join(ROOT, "configs/benchmark_default.yml"),
                   "-c", yml, "--epochs", str(epochs), "--base-run-dir", os.path.join(w, "runs"),
                   "--dataset-dir", os.path.join(tmp, "datasets"),
                   "--fract-base-dir", os.path.join(tmp, "fractals"),
                   "--save-initial-weights", init, "--save-sample-order"] + flags
            if ranks > 1:
                cmd = ["mpirun", "--oversubscribe", "-n", str(ranks)] + cmd
            run(cmd, env=env)
            rd = os.path.join(w, "runs", os.listdir(os.path.join(w, "runs"))[0])
            dsroot = os.path.join(tmp, "datasets")
            cid = os.listdir(dsroot)[0]
            ds = os.path.join(dsroot, cid, os.listdir(os.path.join(dsroot, cid))[0])
            order = read_csv(os.path.join(rd, "sample_order.csv"))
            ref = {}
            runs = [("float64", []), ("float32", [])] + [
                (f"noise{k}", ["--init-ulp-noise", str(k)]) for k in range(1, NOISE_RUNS + 1)]
            for tag, extra in runs:
                dt = "float64" if tag == "float64" else "float32"
                run([sys.executable, harness, ds, "--scaffold-config", os.path.join(rd, "config.yaml"),
                     "--init", init, "--order", os.path.join(rd, "sample_order.csv"),
                     "--epochs", str(epochs), "--warmup", "0", "--threads", "1", "--dtype", dt,
                     "--steps-out", os.path.join(w, f"steps_{tag}.csv"),
                     "--stats-out", os.path.join(w, f"stats_{tag}.csv"), "--quiet"] + extra,
                    env=env)
                steps = read_csv(os.path.join(w, f"steps_{tag}.csv"))
                stats = read_csv(os.path.join(w, f"stats_{tag}.csv"))
                for s, o in zip(steps, order):
                    if (s["epoch"], s["step"], s["replica"], s["samples"]) != \
                            (o["epoch"], o["step"], o["replica"], o["samples"]):
                        sys.exit(f"{name}: the harness did not follow the order: {s} vs {o}")
                ref[tag] = {"steps": [[float(s["loss"]), float(s["dice"])] for s in steps],
                            "epochs": [[float(e["overall_loss"]), float(e["val_loss_avg"]),
                                        float(e["val_dice"]), float(e["lr"])] for e in stats]}
            # the noise envelope: per value, the largest deviation of an fp32 run from float64
            # (relative; the validation hard Dice absolute)
            r64 = ref["float64"]
            fp32 = [ref[t] for t, _ in runs[1:]]
            relf = lambda v, r: abs(v - r) / max(abs(r), 1e-12)
            noise = {
                "steps": [[max(relf(f["steps"][i][j], r64["steps"][i][j]) for f in fp32)
                           for j in range(2)] for i in range(len(r64["steps"]))],
                "epochs": [[max(relf(f["epochs"][i][0], r64["epochs"][i][0]) for f in fp32),
                            max(relf(f["epochs"][i][1], r64["epochs"][i][1]) for f in fp32),
                            max(abs(f["epochs"][i][2] - r64["epochs"][i][2]) for f in fp32)]
                           for i in range(len(r64["epochs"]))]}
            sc_stats = read_csv(os.path.join(rd, "train_stats.csv"))
            out["variants"][name] = {
                "ranks": ranks, "flags": flags, "epochs": epochs,
                "init_sha256": st_data_hash(init),
                "order": [[int(o["epoch"]), int(o["step"]), int(o["replica"]), o["samples"]]
                          for o in order],
                "torch_float64": ref["float64"], "torch_float32": ref["float32"],
                "fp32_noise": noise,
                "scaffold_at_generation": {
                    "steps": [[float(o["loss"]), float(o["dice"])] for o in order],
                    "epochs": [[float(e["overall_loss"]), float(e["val_loss_avg"]),
                                float(e["val_dice"])] for e in sc_stats]},
            }
            print(f"{name}: {len(order)} step rows, {epochs} epochs")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    tmpf = a.out + ".tmp"
    with open(tmpf, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    os.replace(tmpf, a.out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
