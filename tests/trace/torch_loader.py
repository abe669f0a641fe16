#!/usr/bin/env python3
"""torch_loader.py: a real client for the tracer tests. A PyTorch DataLoader with 2 worker
processes reads small .npy samples with numpy.load (each sample: a header read and a small data
read), batches them, and runs a tiny model step per batch, as a training script would.

usage: torch_loader.py write DATA_DIR [SAMPLES]   (writes the samples)
       torch_loader.py train DATA_DIR [SAMPLES]   (2 epochs; prints "done N")
"""
import os
import sys

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class NpyDir(Dataset):
    def __init__(self, d, n):
        self.paths = [os.path.join(d, "sample_%05d.npy" % i) for i in range(n)]

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return torch.from_numpy(np.load(self.paths[i]))


def main():
    mode, d = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 400
    if mode == "write":
        os.makedirs(d, exist_ok=True)
        rng = np.random.default_rng(0)
        for i in range(n):
            np.save(os.path.join(d, "sample_%05d.npy" % i),
                    rng.standard_normal(1024).astype(np.float32))
        return
    torch.manual_seed(0)
    model = torch.nn.Linear(1024, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(NpyDir(d, n), batch_size=16, shuffle=True, num_workers=2)
    seen = 0
    for epoch in range(2):
        for x in loader:
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += x.shape[0]
    print("done %d" % seen)


if __name__ == "__main__":
    main()
