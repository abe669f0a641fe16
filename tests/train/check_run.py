"""Checks a benchmark run folder: every file upstream writes, the CSV's exact columns and epochs,
PNG figures, and that checkpoint_last loads as a PyTorch-style state_dict whose names/shapes
match the model. usage: check_run.py RUN_DIR EPOCHS [CHECKPOINTS(0/1)]"""
import csv
import json
import os
import struct
import sys

run, epochs = sys.argv[1], int(sys.argv[2])
ck = len(sys.argv) > 3 and sys.argv[3] == "1"
for f in ["config.yaml", "overrides.yaml", "base_config.yaml", "restart.sh", "train_stats.csv",
          "figures/train_loss.png", "figures/val_dice.png", "figures/val_loss.png"]:
    assert os.path.isfile(os.path.join(run, f)), f"missing {f}"
assert os.access(os.path.join(run, "restart.sh"), os.X_OK), "restart.sh not executable"
assert os.path.isdir(os.path.join(run, "checkpoints"))
with open(os.path.join(run, "train_stats.csv")) as f:
    header = f.readline().strip()
    assert header == ("epoch,epoch_loss,overall_loss,val_loss_epoch,val_loss_avg,train_dice,"
                      "val_dice,epoch_duration,optimizer_steps,total_optimizer_steps"), header
    f.seek(0)
    rows = list(csv.DictReader(f))
ep = [int(r["epoch"]) for r in rows]
assert ep == list(range(1, epochs + 1)), f"epochs {ep}"
total = 0
for r in rows:
    total += int(r["optimizer_steps"])
    assert int(r["total_optimizer_steps"]) == total
    assert float(r["overall_loss"]) > 0 and 0 <= float(r["val_dice"]) <= 1
    assert float(r["epoch_duration"]) > 0
for png in ["train_loss", "val_dice", "val_loss"]:
    with open(os.path.join(run, "figures", png + ".png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", png
if ck:
    p = os.path.join(run, "checkpoints", "checkpoint_last.safetensors")
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    meta = hdr.pop("__metadata__")
    assert int(meta["epoch"]) == epochs, meta
    # The saved scalars are those of the saved epoch (the CSV's last row).
    assert abs(float(meta["val_dice"]) - float(rows[-1]["val_dice"])) < 1e-12, (meta, rows[-1])
    assert "down_list.0.double_conv.0.weight" in hdr and "up_list.0.up.weight" in hdr, list(hdr)[:5]
    assert all(v["dtype"] == "F32" for v in hdr.values())
    b = os.path.join(run, "checkpoints", "checkpoint_best.safetensors")
    assert os.path.exists(b)
    print(f"checkpoint: {len(hdr)} tensors, epoch {meta['epoch']}")
print(f"run folder ok: {len(rows)} epochs")
