#!/usr/bin/env python3
"""PyTorch reference for scaffold's training engine (src/nn).

Builds the upstream ScaFFold U-Net (same module names, so state_dict keys match
ScaFFold/unet/unet_model.py and unet_parts.py), with the extension `base_channels`
(upstream hard-codes 64), and:

  fixtures OUTDIR          write the small reference fixtures the C tests compare against
                           (layers.safetensors, unet.safetensors), computed in float64 and
                           stored as float32
  fixtures-bf16 OUTDIR     bf16.safetensors: convolutions and the small U-Net under PyTorch
                           2.x CPU autocast to bfloat16 (run with the bench venv's python)
  bench SCALE BASE THREADS [REPS] [--bf16] [--channels-last]
                           time one training step (forward, loss, backward, Adam) of the
                           model at problem_scale SCALE, batch 1, on CPU (--bf16: under CPU
                           autocast; --channels-last: model and input in torch.channels_last_3d,
                           oneDNN's preferred layout on CPU); prints "torch_step_s MEDIAN ...
                           maxrss_mib RSS" (the baseline of bench/nn; run it with a PyTorch 2.x
                           from PyPI)
  run CKPT VOLUME OUT [--groups G]
                           load a safetensors checkpoint into the U-Net (strict
                           load_state_dict) and write its logits for a (3,D,H,W) volume
  export OUT --layers L --base B --classes K --groups G [--seed S]
                           write a PyTorch-initialised U-Net as safetensors (for predict)
  layer conv|convt|gn D CIN COUT THREADS [REPS] [--bf16] [--channels-last]
                           one layer's forward, backward-data and backward-weight passes (or
                           GroupNorm+ReLU forward/backward), median of REPS, in bench_step
                           --layer's format (the per-layer baseline of bench/nn)
  sgemm THREADS [M N K]    the machine's SGEMM rate: oneDNN's dnnl_sgemm (libdnnl, installed
                           with torch) on 2048^2 matrices, or C (MxN) = A (MxK) B (KxN) row-major,
                           best of 5; prints "sgemm_gflops RATE source"

safetensors is read and written with a few lines of Python (8-byte header length, JSON header,
raw little-endian data), so the `safetensors` package is not needed. fixtures, run and export
work with /usr/bin/python3 (Debian's numpy and torch: the numerics are the same); bench, layer,
sgemm and fixtures-bf16 are meant for PyTorch 2.x from PyPI (bench/venv.sh): Debian's 1.13 is
built against a reference BLAS, 7-10x slower, and its bf16 autocast policy differs.
"""
import json
import math
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------------------------------------
# safetensors I/O

_DT = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "U16": np.uint16}


def st_write(path, tensors, meta=None):
    header, off, blobs = {}, 0, []
    if meta:
        header["__metadata__"] = {str(k): str(v) for k, v in meta.items()}
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr)
        dt = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64",
              np.dtype(np.int64): "I64", np.dtype(np.uint16): "U16"}[a.dtype]
        b = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def st_read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        b0, b1 = e["data_offsets"]
        out[name] = np.frombuffer(data[b0:b1], dtype=np.dtype(_DT[e["dtype"]]).newbyteorder("<")
                                  ).reshape(e["shape"]).copy()
    return out, meta


# ---------------------------------------------------------------------------------------------
# the upstream model (module names as ScaFFold/unet/unet_parts.py and unet_model.py)

class DoubleConv(nn.Module):
    def __init__(self, cin, cout, groups):
        super().__init__()
        self.double_conv = nn.Sequential(
            nn.Conv3d(cin, cout, kernel_size=3, padding=1, bias=False),
            nn.GroupNorm(groups, cout),
            nn.ReLU(inplace=True),
            nn.Conv3d(cout, cout, kernel_size=3, padding=1, bias=False),
            nn.GroupNorm(groups, cout),
            nn.ReLU(inplace=True),
        )

    def forward(self, x):
        return self.double_conv(x)


class Down(nn.Module):
    def __init__(self, cin, cout, groups):
        super().__init__()
        self.maxpool_conv = nn.Sequential(nn.MaxPool3d(2), DoubleConv(cin, cout, groups))

    def forward(self, x):
        return self.maxpool_conv(x)


class Up(nn.Module):
    def __init__(self, cin, cout, groups):
        super().__init__()
        self.up = nn.ConvTranspose3d(cin, cin // 2, kernel_size=2, stride=2)
        self.conv = DoubleConv(cin, cout, groups)

    def forward(self, x1, x2):
        return self.conv(torch.cat([x2, self.up(x1)], dim=1))


class OutConv(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv3d(cin, cout, kernel_size=1)

    def forward(self, x):
        return self.conv(x)


class UNet(nn.Module):
    def __init__(self, n_channels, n_classes, layers, group_norm_groups=8, base_channels=64):
        super().__init__()
        self.layers = layers
        c = base_channels
        self.down_list = nn.ModuleList([DoubleConv(n_channels, c, group_norm_groups)])
        for _ in range(layers):
            self.down_list.append(Down(c, 2 * c, group_norm_groups))
            c *= 2
        self.up_list = nn.ModuleList()
        for _ in range(layers):
            self.up_list.append(Up(c, c // 2, group_norm_groups))
            c //= 2
        self.up_list.append(OutConv(c, n_classes))

    def forward(self, x):
        results = [self.down_list[0](x)]
        for i in range(1, self.layers + 1):
            results.append(self.down_list[i](results[i - 1]))
        results.reverse()
        out = results[0]
        for i in range(len(self.up_list) - 1):
            out = self.up_list[i](out, results[i + 1])
        return self.up_list[-1](out)


# ---------------------------------------------------------------------------------------------
# the ScaFFold loss (reference 11.4) and hard Dice (11.6)

def scaffold_loss(logits, labels, weight):
    lp = F.log_softmax(logits, dim=1)
    w = weight.to(lp.dtype)
    num = F.nll_loss(lp, labels, weight=w, reduction="none").sum()
    den = w[labels].sum()
    ce = num / torch.clamp(den, min=1e-12)
    p = lp.exp()
    t = F.one_hot(labels, logits.shape[1]).permute(0, 4, 1, 2, 3).to(p.dtype)
    dims = (2, 3, 4)
    inter = 2 * (p * t).sum(dims)
    s = p.sum(dims) + t.sum(dims)
    s = torch.where(s == 0, inter, s)
    dice = (inter + 1e-6) / (s + 1e-6)
    dice_fg = dice[:, 1:].mean()
    return ce + (1 - dice_fg), dice_fg


def hard_dice(logits, labels):
    k = logits.shape[1]
    pred = F.one_hot(logits.argmax(1), k).permute(0, 4, 1, 2, 3).double()
    t = F.one_hot(labels, k).permute(0, 4, 1, 2, 3).double()
    inter = 2 * (pred * t).sum((2, 3, 4))
    s = pred.sum((2, 3, 4)) + t.sum((2, 3, 4))
    s = torch.where(s == 0, inter, s)
    return ((inter + 1e-6) / (s + 1e-6))[:, 1:].mean(1)


def ce_weights(labels, k):
    counts = torch.bincount(labels.flatten(), minlength=k).double()
    total, bg = counts.sum(), counts[0]
    fg = total - bg
    w = torch.ones(k, dtype=torch.float64)
    if bg > 0 and fg > 0:
        w[0] = total / bg
        w[1:] = total / fg
    return w


# ---------------------------------------------------------------------------------------------
# fixtures

def _np(t):
    return t.detach().to(torch.float32).contiguous().numpy()


def _grad_fixture(out, prefix, fn, inputs, params):
    """Runs fn in float64, with dy random: records y, dy and the gradient of every input/param."""
    for t in list(inputs.values()) + list(params.values()):
        t.requires_grad_(True)
    y = fn(**inputs, **params)
    dy = torch.randn_like(y)
    (y * dy).sum().backward()
    for k, v in list(inputs.items()) + list(params.items()):
        out[f"{prefix}.{k}"] = _np(v)
        out[f"{prefix}.d{k}"] = _np(v.grad)
    out[f"{prefix}.y"] = _np(y)
    out[f"{prefix}.dy"] = _np(dy)


def fixtures(outdir):
    torch.manual_seed(1234)
    d = torch.float64
    out = {}
    r = lambda *s: torch.randn(*s, dtype=d)
    _grad_fixture(out, "conv3d", lambda x, w: F.conv3d(x, w, padding=1),
                  {"x": r(2, 3, 4, 6, 5)}, {"w": r(5, 3, 3, 3, 3) * 0.3})
    _grad_fixture(out, "conv3d_wide", lambda x, w: F.conv3d(x, w, padding=1),
                  {"x": r(1, 8, 4, 4, 4)}, {"w": r(20, 8, 3, 3, 3) * 0.2})
    _grad_fixture(out, "convt3d", lambda x, w, b: F.conv_transpose3d(x, w, b, stride=2),
                  {"x": r(2, 6, 2, 3, 2)}, {"w": r(6, 4, 2, 2, 2) * 0.3, "b": r(4)})
    _grad_fixture(out, "conv1", lambda x, w, b: F.conv3d(x, w, b),
                  {"x": r(2, 5, 4, 4, 4)}, {"w": r(3, 5, 1, 1, 1), "b": r(3)})
    _grad_fixture(out, "groupnorm", lambda x, g, b: F.group_norm(x, 4, g, b, eps=1e-5),
                  {"x": r(2, 8, 4, 4, 3) * 2 + 1}, {"g": r(8), "b": r(8)})
    _grad_fixture(out, "gnrelu", lambda x, g, b: F.relu(F.group_norm(x, 2, g, b, eps=1e-5)),
                  {"x": r(2, 6, 3, 4, 4)}, {"g": r(6), "b": r(6)})
    _grad_fixture(out, "relu", lambda x: F.relu(x), {"x": r(2, 3, 4, 4, 4)}, {})
    _grad_fixture(out, "maxpool", lambda x: F.max_pool3d(x, 2), {"x": r(2, 3, 4, 4, 6)}, {})
    _grad_fixture(out, "concat", lambda a, b: torch.cat([a, b], 1),
                  {"a": r(2, 3, 2, 3, 4), "b": r(2, 5, 2, 3, 4)}, {})
    _grad_fixture(out, "logsoftmax", lambda x: F.log_softmax(x, 1), {"x": r(2, 5, 3, 3, 4)}, {})

    # loss and its gradient, hard Dice
    k = 4
    z = (r(2, k, 4, 4, 4) * 2).requires_grad_(True)
    lab = torch.randint(0, k, (2, 4, 4, 4))
    lab[1][lab[1] == 3] = 2  # class 3 absent from sample 1's label
    w = ce_weights(lab, k)
    loss, dice = scaffold_loss(z, lab, w)
    loss.backward()
    out["loss.logits"] = _np(z)
    out["loss.labels"] = lab.numpy().astype(np.uint16)
    out["loss.weight"] = _np(w)
    out["loss.loss"] = np.array([loss.item()], dtype=np.float32)
    out["loss.dice"] = np.array([dice.item()], dtype=np.float32)
    out["loss.dlogits"] = _np(z.grad)
    out["loss.hard_dice"] = _np(hard_dice(z.detach(), lab))
    st_write(f"{outdir}/layers.safetensors", out, {"generator": "tools/torch_ref.py fixtures",
                                                    "torch": torch.__version__})

    # whole small U-Net: forward, loss, every parameter gradient, 10 Adam steps
    spec = dict(layers=2, base=4, classes=3, groups=2, n=2, size=8, lr=1e-2)
    torch.manual_seed(42)
    model = UNet(3, spec["classes"], spec["layers"], spec["groups"], spec["base"]).double()
    x = torch.randn(spec["n"], 3, spec["size"], spec["size"], spec["size"], dtype=d)
    # labels with structure: class by a smooth function of x, so training makes progress
    lab = (x[:, 0] > 0.3).long() + (x[:, 1] > 0.8).long()
    w = ce_weights(lab, spec["classes"])
    u = {}
    for name, p in model.state_dict().items():
        u[f"param.{name}"] = _np(p)
    u["x"] = _np(x)
    u["labels"] = lab.numpy().astype(np.uint16)
    u["weight"] = _np(w)
    logits = model(x)
    loss, dice = scaffold_loss(logits, lab, w)
    loss.backward()
    u["logits"] = _np(logits)
    u["loss"] = np.array([loss.item(), dice.item()], dtype=np.float32)
    for name, p in model.named_parameters():
        u[f"grad.{name}"] = _np(p.grad)
    opt = torch.optim.Adam(model.parameters(), lr=spec["lr"])
    losses, norms = [], []
    for _ in range(10):
        opt.zero_grad(set_to_none=True)
        loss, _ = scaffold_loss(model(x), lab, w)
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0).item())
        opt.step()
        losses.append(loss.item())
    u["adam.losses"] = np.array(losses, dtype=np.float32)
    u["adam.norms"] = np.array(norms, dtype=np.float32)
    st_write(f"{outdir}/unet.safetensors", u, {k: str(v) for k, v in spec.items()})
    print(f"fixtures written to {outdir}; adam losses {['%.5f' % v for v in losses]}")


def fixtures_bf16(outdir):
    """bf16 fixtures: the same layers and small U-Net as `fixtures`, run in float32 under PyTorch's
    CPU autocast to bfloat16 (needs PyTorch 2.x: 1.13 leaves ConvTranspose3d in fp32 and differs
    from the policy upstream runs with). Gradients are those autocast gives the fp32 leaves."""
    major = int(torch.__version__.split(".")[0])
    if major < 2:
        raise SystemExit("fixtures-bf16 needs PyTorch 2.x (bench venv: source bench/venv.sh; "
                         "$(bench_venv torch) tools/torch_ref.py fixtures-bf16 DIR)")
    torch.manual_seed(4321)
    f = torch.float32
    out = {}
    amp = lambda: torch.autocast("cpu", dtype=torch.bfloat16)

    def run(prefix, fn, inputs, params):
        leaves = dict(inputs, **params)
        for t in leaves.values():
            t.requires_grad_(True)
        with amp():
            y = fn(**leaves)
        # the gradient arriving at a bf16 output is bf16
        dy = torch.randn(y.shape, dtype=f).to(torch.bfloat16).to(y.dtype)
        y.backward(dy)
        for k, v in leaves.items():
            out[f"{prefix}.{k}"] = _np(v)
            out[f"{prefix}.d{k}"] = _np(v.grad)
        out[f"{prefix}.y"] = _np(y)
        out[f"{prefix}.dy"] = _np(dy)
        # The ideal of the same semantics: bf16 operands, exact (float64) sums, results rounded
        # to bf16 once. PyTorch's forward is this; its backward passes on CPUs without oneDNN
        # bf16 kernels round partial sums too (im2col/col2im in bf16), so they are further off.
        rb = lambda t: t.detach().to(torch.bfloat16).to(torch.float64)
        ideal = {k: rb(v).requires_grad_(True) for k, v in leaves.items()}
        yi = fn(**ideal)
        yi.backward(dy.to(torch.float64))
        out[f"{prefix}.ideal.y"] = _np(rb(yi))
        for k, v in ideal.items():
            out[f"{prefix}.ideal.d{k}"] = _np(rb(v.grad))

    r = lambda *sh: torch.randn(*sh, dtype=f)
    run("conv3d", lambda x, w: F.conv3d(x, w, padding=1), {"x": r(2, 8, 4, 6, 5)},
        {"w": r(12, 8, 3, 3, 3) * 0.2})
    run("convt3d", lambda x, w, b: F.conv_transpose3d(x, w, b, stride=2),
        {"x": r(2, 16, 2, 3, 2)}, {"w": r(16, 8, 2, 2, 2) * 0.3, "b": r(8)})
    run("conv1", lambda x, w, b: F.conv3d(x, w, b), {"x": r(2, 16, 4, 4, 4)},
        {"w": r(3, 16, 1, 1, 1) * 0.3, "b": r(3)})

    # the small U-Net of `fixtures` (same spec and seed), one training step's gradients
    spec = dict(layers=2, base=4, classes=3, groups=2, n=2, size=8)
    torch.manual_seed(42)
    model = UNet(3, spec["classes"], spec["layers"], spec["groups"], spec["base"])
    x = torch.randn(spec["n"], 3, spec["size"], spec["size"], spec["size"], dtype=f)
    lab = (x[:, 0] > 0.3).long() + (x[:, 1] > 0.8).long()
    w = ce_weights(lab, spec["classes"]).float()
    for name, prm in model.state_dict().items():
        out[f"unet.param.{name}"] = _np(prm)
    out["unet.x"] = _np(x)
    out["unet.labels"] = lab.numpy().astype(np.uint16)
    out["unet.weight"] = _np(w)
    with amp():
        logits = model(x)
    loss, dice = scaffold_loss(logits.float(), lab, w)
    loss.backward()
    out["unet.logits"] = _np(logits)
    out["unet.loss"] = np.array([loss.item(), dice.item()], dtype=np.float32)
    for name, prm in model.named_parameters():
        out[f"unet.grad.{name}"] = _np(prm.grad)
    meta = {"generator": "tools/torch_ref.py fixtures-bf16", "torch": torch.__version__}
    meta.update({f"unet.{k}": str(v) for k, v in spec.items()})
    st_write(f"{outdir}/bf16.safetensors", out, meta)
    print(f"bf16 fixtures written to {outdir} (PyTorch {torch.__version__} CPU autocast)")


# ---------------------------------------------------------------------------------------------

def bench(scale, base, threads, reps=5, classes=6, bottleneck=3, bf16=False,
          channels_last=False):
    """One training step of the model, median of reps after a warm-up step; bf16 runs the
    forward under CPU autocast to bfloat16 (upstream's torch_amp: 1); channels_last puts the
    model and its input in torch.channels_last_3d (PyTorch's CPU tuning advice: oneDNN's
    convolutions then skip their layout conversions; the bf16 step at scale 5 / 64 ran
    1.27-1.34x faster that way on a Xeon with AMX). Prints the median and the process's peak
    RSS."""
    import resource
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    size = 2 ** scale
    model = UNet(3, classes, scale - bottleneck, 8, base)
    x = torch.randn(1, 3, size, size, size)
    if channels_last:  # before the optimizer takes the parameters
        model = model.to(memory_format=torch.channels_last_3d)
        x = x.to(memory_format=torch.channels_last_3d)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    lab = torch.randint(0, classes, (1, size, size, size))
    w = ce_weights(lab, classes).float()
    times = []
    for i in range(reps + 1):
        if i == 1:  # the share of its threads' CPUs the timed steps got (busy host: well under 1)
            cpu0, wall0 = time.process_time(), time.perf_counter()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
        loss, _ = scaffold_loss(logits.float(), lab, w)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()
        if i > 0:  # the first step allocates and warms up
            times.append(time.perf_counter() - t0)
    share = (time.process_time() - cpu0) / ((time.perf_counter() - wall0) * threads)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"torch_step_s {sorted(times)[len(times) // 2]:.6f} reps {reps} threads {threads} "
          f"maxrss_mib {rss:.0f} precision {'bf16' if bf16 else 'fp32'} torch {torch.__version__} "
          f"format {'channels_last_3d' if channels_last else 'contiguous'} "
          f"cpu_share {share:.2f}")


def _median_time(fn, reps):
    fn()  # warm-up (allocations, oneDNN primitive creation)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]


def layer(op, d, cin, cout, threads, reps=5, bf16=False, channels_last=False):
    """One layer's passes, median of reps, in the same format as bench_step --layer;
    channels_last: every tensor in torch.channels_last_3d."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    dt = torch.bfloat16 if bf16 else torch.float32
    ops = torch.ops.aten
    fmt = torch.channels_last_3d if channels_last else torch.contiguous_format

    def randn(*size, **kw):  # 5-d tensors in the chosen memory format
        t = torch.randn(*size, **kw)
        return t.to(memory_format=fmt) if t.dim() == 5 else t

    def rep(name, t, flops):
        g = flops / t / 1e9 if flops else 0.0
        print(f"layer {name} {d} {cin} {cout} time_s {t:.6f} gflops {g:.1f}")

    with torch.no_grad():
        if op == "conv":
            x = randn(1, cin, d, d, d, dtype=dt)
            w = (randn(cout, cin, 3, 3, 3) * 0.05).to(dt)
            dy = randn(1, cout, d, d, d, dtype=dt)
            fl = 2.0 * d ** 3 * 27 * cin * cout
            args = (None, [1, 1, 1], [1, 1, 1], [1, 1, 1], False, [0, 0, 0], 1)
            rep("conv3d_fwd", _median_time(lambda: F.conv3d(x, w, padding=1), reps), fl)
            rep("conv3d_bwd_data", _median_time(
                lambda: ops.convolution_backward(dy, x, w, *args, [True, False, False]), reps), fl)
            rep("conv3d_bwd_weight", _median_time(
                lambda: ops.convolution_backward(dy, x, w, *args, [False, True, False]), reps), fl)
        elif op == "convt":
            x = randn(1, cin, d, d, d, dtype=dt)
            w = (randn(cin, cout, 2, 2, 2) * 0.05).to(dt)
            b = randn(cout, dtype=dt)
            dy = randn(1, cout, 2 * d, 2 * d, 2 * d, dtype=dt)
            fl = 2.0 * d ** 3 * 8 * cin * cout
            args = ([cout], [2, 2, 2], [0, 0, 0], [1, 1, 1], True, [0, 0, 0], 1)
            rep("convt3d_fwd", _median_time(
                lambda: F.conv_transpose3d(x, w, b, stride=2), reps), fl)
            rep("convt3d_bwd_data", _median_time(
                lambda: ops.convolution_backward(dy, x, w, *args, [True, False, False]), reps), fl)
            rep("convt3d_bwd_weight", _median_time(
                lambda: ops.convolution_backward(dy, x, w, *args, [False, True, True]), reps), fl)
        elif op == "gn":
            # GroupNorm + ReLU in fp32 (autocast runs GroupNorm in fp32 as well)
            x = randn(1, cout, d, d, d)
            g, b = randn(cout), randn(cout)
            rep("gnrelu_fwd", _median_time(lambda: F.relu(F.group_norm(x, 8, g, b)), reps), 0)
            with torch.enable_grad():
                xr = x.clone().requires_grad_(True)
                gr, br = g.clone().requires_grad_(True), b.clone().requires_grad_(True)
                y = F.relu(F.group_norm(xr, 8, gr, br))
                dy = torch.randn_like(y)

                def bwd():
                    torch.autograd.grad(y, (xr, gr, br), dy, retain_graph=True)
                rep("gnrelu_bwd", _median_time(bwd, reps), 0)
        else:
            raise SystemExit(f"unknown layer {op}")


def sgemm(threads, m=2048, n=2048, k=2048):
    import ctypes
    import os
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    a = np.random.rand(m, k).astype(np.float32)
    b = np.random.rand(k, n).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    try:
        f = ctypes.CDLL("libdnnl.so.2").dnnl_sgemm  # row-major, like numpy's arrays
        i64, fl, vp = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
        f.argtypes = [ctypes.c_char, ctypes.c_char, i64, i64, i64, fl, vp, i64, vp, i64, fl, vp, i64]
        run = lambda: f(b"N", b"N", m, n, k, 1.0, a.ctypes.data, k, b.ctypes.data, n, 0.0,
                        c.ctypes.data, n)
        src = "oneDNN dnnl_sgemm"
    except (OSError, AttributeError):
        torch.set_num_threads(threads)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        run = lambda: torch.mm(ta, tb)
        src = "torch.mm"
    best = 1e30
    for _ in range(5):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    print(f"sgemm_gflops {2 * m * n * k / best / 1e9:.1f} {src}")


def _model_from_state(sd, groups):
    n_down = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("down_list."))
    layers = n_down - 1
    w0 = sd["down_list.0.double_conv.0.weight"]
    outw = sd[f"up_list.{layers}.conv.weight"]
    return UNet(w0.shape[1], outw.shape[0], layers, groups, w0.shape[0])


def run(ckpt, volume, out, groups=None):
    tensors, meta = st_read(ckpt)
    if groups is None:
        groups = int(meta.get("group_norm_groups", 8))
    sd = {k: torch.from_numpy(v.astype(np.float32)) for k, v in tensors.items()}
    model = _model_from_state(sd, groups)
    model.load_state_dict(sd)  # strict: every key must match upstream's names
    x = torch.from_numpy(np.load(volume).astype(np.float32))[None]
    with torch.no_grad():
        np.save(out, model(x)[0].numpy())


def export(out, layers, base, classes, groups, seed=0):
    torch.manual_seed(seed)
    model = UNet(3, classes, layers, groups, base)
    st_write(out, {k: v.numpy() for k, v in model.state_dict().items()}, {"source": "pytorch"})


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    cmd = argv[1]
    if cmd == "fixtures":
        fixtures(argv[2])
    elif cmd == "fixtures-bf16":
        fixtures_bf16(argv[2])
    elif cmd == "bench":
        pos = [a for a in argv[2:] if not a.startswith("--")]
        bench(int(pos[0]), int(pos[1]), int(pos[2]), int(pos[3]) if len(pos) > 3 else 5,
              bf16="--bf16" in argv, channels_last="--channels-last" in argv)
    elif cmd == "layer":
        pos = [a for a in argv[2:] if not a.startswith("--")]
        layer(pos[0], int(pos[1]), int(pos[2]), int(pos[3]), int(pos[4]),
              int(pos[5]) if len(pos) > 5 else 5, "--bf16" in argv, "--channels-last" in argv)
    elif cmd == "sgemm":
        sgemm(int(argv[2]), *[int(x) for x in argv[3:6]])
    elif cmd == "run":
        groups = int(argv[argv.index("--groups") + 1]) if "--groups" in argv else None
        run(argv[2], argv[3], argv[4], groups)
    elif cmd == "export":
        a = dict(zip(argv[3::2], argv[4::2]))
        export(argv[2], int(a["--layers"]), int(a["--base"]), int(a["--classes"]),
               int(a["--groups"]), int(a.get("--seed", 0)))
    else:
        print(f"unknown command {cmd}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
