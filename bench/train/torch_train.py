#!/usr/bin/env python3
"""The same-data PyTorch harness of bench/train: upstream ScaFFold's training (reference §11) in
PyTorch, on scaffold's own dataset folder.

Model, loss, CE class weights, optimizer, clipping, schedule and metrics are upstream's: the
U-Net of tools/torch_ref.py (upstream's module names), loss = weighted CE + (1 - soft foreground
Dice), CE class weights from the masks at torch.linspace(0, n_train-1, k).long() (ids sorted as
strings), Adam (PyTorch defaults), clip_grad_norm_(1.0), CosineAnnealingWarmRestarts stepped
once per epoch after validation, validation = mean per-sample hard foreground Dice (argmax
one-hot; an absent and unpredicted class scores 1) and the sample-weighted validation loss.
Data parallelism is emulated in one process: R replicas each take their DistributedSampler
share (shuffle, seed SAMPLER_SEED + epoch, padded, strided) and the gradient is the mean of
their losses' gradients, which is what DDP computes. Every step reads the .npy files.

Same-data options (scaffold writes both on request, see `scaffold benchmark --help`):
  --init FILE     start from these weights (scaffold --save-initial-weights FILE; strict load)
  --order FILE    follow this per-step sample order (scaffold --save-sample-order writes
                  RUN/sample_order.csv); replicas and batch size are taken from it
  --sampler scaffold
                  compute scaffold's own order for every epoch (its sampler, ported), seeded
                  with --sampler-seed (default: the config seed), for runs longer than a
                  recorded order; the default `torch` is upstream's DistributedSampler (seed 0)

usage: torch_train.py DATASET_DIR [--scaffold-config RUN/config.yaml] [--classes K --layers L
         --base B] [--groups G] [--init FILE] [--order FILE] [--replicas R] [--batch B]
         [--optimizer ADAM|SGD|RMSProp] [--lr 1e-3] [--min-lr 1e-4] [--T0 10] [--Tmult 2]
         [--no-scheduler] [--seed 42] [--sampler torch|scaffold] [--sampler-seed S]
         [--target 0.95] [--epochs N] [--max-epochs 100] [--threads N] [--ce-fraction 0.1] [--warmup 0] [--amp]
         [--dtype float32|float64] [--init-ulp-noise SEED] [--steps-out CSV] [--stats-out CSV]
         [--channels-last] [--quiet]
--scaffold-config takes the hyperparameters of a scaffold run folder's config.yaml (model,
optimizer, learning rates, schedule, batch, seed, warmup, target, CE fraction, torch_amp);
explicit options override it. --classes is the number of output classes (n_categories + 1);
with --init the architecture is read from the file. --amp runs the forward pass under CPU
autocast to bfloat16 (upstream's torch_amp: 1); the default is fp32. --channels-last keeps the
model and every batch in torch.channels_last_3d (PyTorch's CPU tuning advice for oneDNN).
--init-ulp-noise moves every initial weight by one float32 ulp (random direction): the spread of
such runs is the size of fp32 noise. --epochs N trains exactly
N epochs (no early stop); otherwise training stops at the first epoch whose validation Dice
reaches --target, or after --max-epochs.
Prints one line per epoch and, last,
  "torch_time_to_target_s SECONDS epochs N val_dice D converged 0|1"
(SECONDS: training wall time after warmup, reading and validation included).
Runs with PyTorch 2.x (bench venv: source bench/venv.sh; $(bench_venv torch)) or Debian's 1.13.
"""
import argparse
import copy
import csv
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from torch_ref import UNet, _model_from_state, ce_weights, hard_dice, scaffold_loss, st_read  # noqa: E402


def die(msg):
    print(f"torch_train.py: {msg}", file=sys.stderr)
    sys.exit(2)


def split_ids(ds, split):
    d = os.path.join(ds, "volumes", split)
    if not os.path.isdir(d):
        die(f"{d}: not a scaffold dataset folder (expected volumes/{split}/); give the folder "
            f"holding meta.yaml, e.g. datasets/<config_id>/<timestamp>__<version>")
    ids = sorted(f.split("_shard")[0] for f in os.listdir(d) if f.endswith(".npy"))
    if not ids:
        die(f"{d}: no samples")
    return ids  # sorted as strings, as upstream's FractalDataset and scaffold do


class Data:
    def __init__(self, ds, dtype):
        self.ds, self.dtype = ds, dtype
        self.ids = {s: split_ids(ds, s) for s in ("training", "validation")}

    def load(self, split, sid):
        v = np.load(os.path.join(self.ds, "volumes", split, f"{sid}_shard000000.npy"))
        m = np.load(os.path.join(self.ds, "masks", split, f"{sid}_shard000000_mask.npy"))
        return torch.from_numpy(v).to(self.dtype), torch.from_numpy(m.astype(np.int64))

    def batch(self, split, sids):
        vs, ms = zip(*[self.load(split, s) for s in sids])
        return torch.stack(vs), torch.stack(ms)


# scaffold's sampler (src/core/rng.c, src/dataset/loader.c), ported so that the harness can follow
# scaffold's order for any epoch (--sampler scaffold): a SplitMix64 stream keyed by (seed,
# RNG_SAMPLER = 8, epoch, 0), a Fisher-Yates permutation with Lemire's bounded draws, padded by
# repetition, replica r taking entries r, r + R, ...
_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def scaffold_permutation(seed, epoch, n):
    k = _mix64((seed & _M64) ^ 0x5CAFF01D)
    k = _mix64(k ^ ((8 * _GOLDEN) & _M64))
    k = _mix64(k ^ _mix64((epoch + 0x632BE59BD9B4E019) & _M64))
    k = _mix64(k ^ _mix64(0x8CB92BA72F3D8DD7))
    ctr = 0

    def u64():
        nonlocal ctr
        ctr += 1
        return _mix64((k + ctr * _GOLDEN) & _M64)

    def below(m):
        x = u64()
        prod = x * m
        if prod & _M64 < m:
            t = ((1 << 64) - m) % m
            while prod & _M64 < t:
                x = u64()
                prod = x * m
        return prod >> 64

    perm = list(range(n))
    for i in range(n, 1, -1):
        j = below(i)
        perm[i - 1], perm[j] = perm[j], perm[i - 1]
    return perm


def sampler_steps(n, replicas, batch, seed, epoch, kind="torch"):
    """Every replica's share of the epoch cut into batches: steps[k][r] = replica r's dataset
    indices of step k. kind "torch": DistributedSampler(shuffle=True, seed, drop_last=False)
    (upstream); "scaffold": scaffold's permutation, padded and split the same way."""
    if kind == "scaffold":
        idx = scaffold_permutation(seed, epoch, n)
    else:
        g = torch.Generator()
        g.manual_seed(seed + epoch)
        idx = torch.randperm(n, generator=g).tolist()
    total = math.ceil(n / replicas) * replicas
    pad = total - n
    idx += (idx * math.ceil(pad / n))[:pad] if pad else []
    shares = [idx[r:total:replicas] for r in range(replicas)]
    per = len(shares[0])
    return [[shares[r][s:s + batch] for r in range(replicas)] for s in range(0, per, batch)]


def read_order(path):
    """sample_order.csv -> {epoch: [[ids of replica 0, ids of replica 1, ...] per step]}."""
    order = {}
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        die(f"--order {path}: {e.strerror}")
    if not rows or "samples" not in rows[0]:
        die(f"--order {path}: not a sample_order.csv (header epoch,step,replica,samples,...)")
    for row in rows:
        try:
            e, s, r = int(row["epoch"]), int(row["step"]), int(row["replica"])
        except (TypeError, ValueError):
            die(f"--order {path}: bad row {row}")
        steps = order.setdefault(e, [])
        while len(steps) < s:
            steps.append([])
        while len(steps[s - 1]) <= r:
            steps[s - 1].append(None)
        steps[s - 1][r] = row["samples"].split()
    for e, steps in order.items():
        for k, st in enumerate(steps):
            if not st or any(x is None for x in st):
                die(f"--order {path}: epoch {e} step {k + 1} misses a replica's row")
    return order


def read_scaffold_config(path):
    """The flat `key: value` YAML that scaffold writes as a run folder's config.yaml."""
    cfg = {}
    try:
        with open(path) as f:
            for line in f:
                if ":" not in line or line.lstrip().startswith("#"):
                    continue
                k, v = line.split(":", 1)
                cfg[k.strip()] = v.strip().strip('"')
    except OSError as e:
        die(f"--scaffold-config {path}: {e.strerror}")
    return cfg


# option <- (config.yaml key, conversion); explicit options win over the file
_FROM_CONFIG = {
    "classes": ("n_categories", lambda v: int(v) + 1),
    "layers": ("unet_layers", int),
    "base": ("unet_base_channels", int),
    "groups": ("group_norm_groups", int),
    "batch": ("local_batch_size", int),
    "optimizer": ("optimizer", str),
    "lr": ("starting_learning_rate", float),
    "min_lr": ("min_learning_rate", float),
    "T0": ("T_0", int),
    "Tmult": ("T_mult", int),
    "no_scheduler": ("disable_scheduler", lambda v: int(v) != 0),
    "seed": ("seed", int),
    "target": ("target_dice", float),
    "ce_fraction": ("ce_weight_sample_fraction", float),
    "warmup": ("warmup_batches", int),
    "amp": ("torch_amp", lambda v: int(v) != 0),
}
_DEFAULTS = {"groups": 0, "batch": 1, "optimizer": "ADAM", "lr": 1e-3, "min_lr": 1e-4, "T0": 10,
             "Tmult": 2, "no_scheduler": False, "seed": 42, "target": 0.95, "ce_fraction": 0.1,
             "warmup": 0, "amp": False}


def build_model(a):
    if a.init:
        try:
            tensors, meta = st_read(a.init)
        except (OSError, ValueError, KeyError) as e:
            die(f"--init {a.init}: cannot read a safetensors file ({e})")
        groups = a.groups or int(meta.get("group_norm_groups", 8))
        sd = {k: torch.from_numpy(v.astype(np.float32)) for k, v in tensors.items()}
        model = _model_from_state(sd, groups)
        model.load_state_dict(sd)  # strict: upstream's names and shapes
        return model
    if a.classes is None or a.layers is None or a.base is None:
        die("give --classes, --layers and --base (or --init FILE)")
    torch.manual_seed(a.seed)
    return UNet(3, a.classes, a.layers, a.groups or 8, a.base)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset")
    ap.add_argument("--classes", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--base", type=int)
    ap.add_argument("--scaffold-config")
    ap.add_argument("--groups", type=int)
    ap.add_argument("--init")
    ap.add_argument("--order")
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--optimizer")
    ap.add_argument("--lr", type=float)
    ap.add_argument("--min-lr", type=float)
    ap.add_argument("--T0", type=int)
    ap.add_argument("--Tmult", type=int)
    ap.add_argument("--no-scheduler", action="store_const", const=True)
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--sampler", choices=["torch", "scaffold"], default="torch")
    ap.add_argument("--sampler-seed", type=int)
    ap.add_argument("--target", type=float)
    ap.add_argument("--epochs", type=int, default=0)
    ap.add_argument("--max-epochs", type=int, default=100)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--ce-fraction", type=float)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--amp", action="store_const", const=True)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--init-ulp-noise", type=int, metavar="SEED")
    ap.add_argument("--steps-out")
    ap.add_argument("--stats-out")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    cfg = read_scaffold_config(a.scaffold_config) if a.scaffold_config else {}
    for opt_name, (key, conv) in _FROM_CONFIG.items():
        if getattr(a, opt_name) is None and key in cfg:
            try:
                setattr(a, opt_name, conv(cfg[key]))
            except ValueError:
                die(f"--scaffold-config {a.scaffold_config}: bad {key}: {cfg[key]!r}")
        if getattr(a, opt_name) is None and opt_name in _DEFAULTS:
            setattr(a, opt_name, _DEFAULTS[opt_name])
    if a.sampler_seed is None:  # upstream's DistributedSampler: 0; scaffold's: the config seed
        a.sampler_seed = 0 if a.sampler == "torch" else a.seed
    if a.amp and a.dtype == "float64":
        die("--amp (bfloat16 autocast) and --dtype float64 exclude each other")
    if a.replicas < 1 or a.batch < 1 or a.threads < 1:
        die("--replicas, --batch and --threads must be >= 1")
    torch.set_num_threads(a.threads)
    dtype = torch.float64 if a.dtype == "float64" else torch.float32
    data = Data(a.dataset, dtype)
    train, val = data.ids["training"], data.ids["validation"]
    order = read_order(a.order) if a.order else None
    if order:
        first = order[min(order)][0]
        a.replicas, a.batch = len(first), len(first[0])
        known = set(train)
        for e, steps in order.items():
            for st in steps:
                for ids in st:
                    bad = [i for i in ids if i not in known]
                    if bad:
                        die(f"--order {a.order}: epoch {e}: sample '{bad[0]}' is not in "
                            f"{a.dataset}/volumes/training (another dataset?)")
    model = build_model(a)
    if a.init_ulp_noise is not None:
        # every initial weight moved by one float32 ulp up or down (random): a trajectory as
        # valid as the unperturbed one, whose spread measures how far fp32 rounding alone carries
        # training (tools/train_parity_ref.py calibrates the parity test with it)
        g = torch.Generator()
        g.manual_seed(a.init_ulp_noise)
        with torch.no_grad():
            for p in model.parameters():
                up = torch.rand(p.shape, generator=g) < 0.5
                p.copy_(torch.where(up, torch.nextafter(p, torch.full_like(p, math.inf)),
                                    torch.nextafter(p, torch.full_like(p, -math.inf))))
    model = model.to(dtype)
    if a.channels_last:  # before the optimizer takes the parameters
        model = model.to(memory_format=torch.channels_last_3d)
    classes = model.up_list[-1].conv.out_channels

    # CE class weights (reference §11.4): masks at linspace indices of the sorted ids.
    k = min(max(math.ceil(len(train) * a.ce_fraction), 1), len(train))
    idx = torch.linspace(0, len(train) - 1, k).long().tolist()
    w = ce_weights(torch.stack([data.load("training", train[i])[1] for i in idx]), classes)
    w = w.float().to(dtype)  # upstream computes the weights in float32

    # upstream's choice (trainer.py): "ADAM" -> Adam, "SGD" -> SGD, anything else -> RMSprop;
    # names here are case-insensitive as in scaffold
    kind = a.optimizer.upper()
    if kind == "ADAM":
        opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    elif kind == "SGD":
        opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    elif kind == "RMSPROP":
        opt = torch.optim.RMSprop(model.parameters(), lr=a.lr)
    else:
        die(f"--optimizer {a.optimizer}: use ADAM, SGD or RMSProp")
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, a.T0, a.Tmult, a.min_lr)

    def steps_of(epoch):
        if order is None:
            return [[[train[i] for i in b] for b in st]
                    for st in sampler_steps(len(train), a.replicas, a.batch, a.sampler_seed, epoch,
                                            a.sampler)]
        if epoch not in order:
            die(f"--order {a.order} has no epoch {epoch}; record at least as many epochs with "
                f"scaffold (--epochs) or pass --epochs {max(order)}")
        return order[epoch]

    def train_step(step):
        """One optimizer step over every replica's batch; returns [(loss, dice, n)] per replica."""
        opt.zero_grad(set_to_none=True)
        out = []
        for ids in step:
            x, y = data.batch("training", ids)
            if a.channels_last:
                x = x.to(memory_format=torch.channels_last_3d)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp):
                logits = model(x)
            loss, dice = scaffold_loss(logits.to(dtype), y, w)
            (loss / len(step)).backward()  # DDP: the mean of the replicas' gradients
            out.append((loss.item(), dice.item(), len(ids)))
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()
        return out

    def val_batches():
        n, R = len(val), a.replicas
        base, rem = divmod(n, R)
        for r in range(R):  # _UnpaddedDistributedSampler: contiguous shares, in order
            lo = r * base + min(r, rem)
            share = val[lo:lo + base + (r < rem)]
            for s in range(0, len(share), a.batch):
                yield share[s:s + a.batch]

    def validate(max_batches=None):
        model.eval()
        dsum = lsum = nsum = 0.0
        with torch.no_grad():
            for b, ids in enumerate(val_batches()):
                if max_batches is not None and b >= max_batches:
                    break
                x, y = data.batch("validation", ids)
                if a.channels_last:
                    x = x.to(memory_format=torch.channels_last_3d)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp):
                    logits = model(x).to(dtype)
                loss, _ = scaffold_loss(logits, y, w)
                dsum += float(hard_dice(logits, y).sum())
                lsum += loss.item() * len(ids)
                nsum += len(ids)
        model.train()
        return dsum, lsum, nsum

    if a.warmup > 0:  # untimed, state restored (reference §11.7)
        snap = ({k_: v.clone() for k_, v in model.state_dict().items()},
                copy.deepcopy(opt.state_dict()), copy.deepcopy(sched.state_dict()))
        # the sampler's epoch 0 (a recorded order has none: its first epoch)
        for st in steps_of(0 if order is None else min(order))[:a.warmup]:
            train_step(st)
        validate(a.warmup)
        model.load_state_dict(snap[0])
        opt.load_state_dict(snap[1])
        sched.load_state_dict(snap[2])

    steps_f = open(a.steps_out, "w", newline="") if a.steps_out else None
    stats_f = open(a.stats_out, "w", newline="") if a.stats_out else None
    if steps_f:
        steps_f.write("epoch,step,replica,samples,loss,dice\n")
    if stats_f:
        stats_f.write("epoch,overall_loss,train_dice,val_loss_avg,val_dice,lr,epoch_duration\n")
    t0 = time.perf_counter()
    dice, epoch = 0.0, 0
    while True:
        if a.epochs > 0:
            if epoch >= a.epochs:
                break
        elif dice >= a.target or epoch >= a.max_epochs:
            break
        epoch += 1
        te = time.perf_counter()
        lr = opt.param_groups[0]["lr"]
        model.train()
        tl = td = tn = 0.0
        for k, st in enumerate(steps_of(epoch)):
            for r, (loss, d, n) in enumerate(train_step(st)):
                tl += loss * n
                td += d * n
                tn += n
                if steps_f:
                    steps_f.write(f"{epoch},{k + 1},{r},{' '.join(st[r])},{loss!r},{d!r}\n")
        vd, vl, vn = validate()
        dice = vd / vn
        if not a.no_scheduler:
            sched.step()
        dt = time.perf_counter() - te
        if stats_f:
            stats_f.write(f"{epoch},{tl / tn!r},{td / tn!r},{vl / vn!r},{dice!r},{lr!r},{dt!r}\n")
            stats_f.flush()
        if not a.quiet:
            print(f"torch epoch {epoch}: loss {tl / tn:.4f}, train dice {td / tn:.4f}, "
                  f"val dice {dice:.4f}, val loss {vl / vn:.4f}, lr {lr:.3g}, {dt:.2f} s",
                  flush=True)
    for f in (steps_f, stats_f):
        if f:
            f.close()
    print(f"torch_time_to_target_s {time.perf_counter() - t0:.3f} epochs {epoch} "
          f"val_dice {dice:.4f} converged {int(dice >= a.target)}")


if __name__ == "__main__":
    main()
