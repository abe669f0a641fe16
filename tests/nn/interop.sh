#!/usr/bin/env bash
# Checkpoint interoperability with PyTorch (needs torch): a scaffold checkpoint loads with a strict
# load_state_dict into the PyTorch U-Net of tools/torch_ref.py and gives the same logits as
# `scaffold predict`; a PyTorch-initialised state_dict runs in `scaffold predict`.
# Sourced by run.sh (uses t_* helpers and $d).
ckpt=$d/c.safetensors
"$BUILD/tests/nn/test_unet" --write-ckpt "$ckpt" || t_fail "write interop checkpoint"
"$PYTHON" -c "import numpy as np; np.save('$d/v.npy', np.random.default_rng(3).standard_normal((3,16,16,8)).astype(np.float32))"
t_check "predict runs a scaffold checkpoint" "$SCAFFOLD" predict --checkpoint "$ckpt" --input "$d/v.npy" --logits "$d/l.npy" --mask "$d/m.npy" --threads 2
"$PYTHON" tools/torch_ref.py run "$ckpt" "$d/v.npy" "$d/ref.npy" 2>&1 | tail -3
compare() { # logits mask reference
"$PYTHON" - "$@" <<'PY'
import sys, numpy as np
l, m, r = np.load(sys.argv[1]), np.load(sys.argv[2]), np.load(sys.argv[3])
assert l.shape == r.shape, (l.shape, r.shape)
err = np.abs(l - r).max()
print(f"  max |scaffold - torch| = {err:.3g} over {l.size} logits")
assert np.allclose(l, r, atol=1e-4, rtol=1e-3), err
top2 = np.sort(r, axis=0)
clear = (top2[-1] - top2[-2]) > 1e-4
assert m.dtype == np.uint16 and (m[clear] == r.argmax(0)[clear]).all()
PY
}
t_check "scaffold checkpoint in PyTorch: same logits as scaffold predict" compare "$d/l.npy" "$d/m.npy" "$d/ref.npy"
# A state_dict saved by PyTorch (no scaffold metadata): groups from the flag.
"$PYTHON" tools/torch_ref.py export "$d/pt.safetensors" --layers 2 --base 8 --classes 3 --groups 4 --seed 9
t_check "predict runs a PyTorch state_dict" "$SCAFFOLD" predict --checkpoint "$d/pt.safetensors" --input "$d/v.npy" --logits "$d/l2.npy" --mask "$d/m2.npy" --group-norm-groups 4
"$PYTHON" tools/torch_ref.py run "$d/pt.safetensors" "$d/v.npy" "$d/ref2.npy" --groups 4
t_check "PyTorch state_dict: scaffold predict = PyTorch logits" compare "$d/l2.npy" "$d/m2.npy" "$d/ref2.npy"
