"""The error of amx-x3's three bf16 products (docs/nn.md, "amx-x3") against fp32 and plain bf16,
on one Conv3d-sized GEMM: 4096 positions, K = 64 channels x 27 taps, 64 outputs, x ~ N(0, 1),
w ~ N(0, 0.05^2). Products of the bf16 parts are exact in fp64 here, so the numbers are the
splitting's own error (the AMX tiles add fp32 summation on top, as fp32 SGEMM has).
usage: python3 tools/x3_accuracy.py   (PyTorch, any version: Debian's python3-torch will do)"""
import torch


def bf16(a):  # nearest bf16, ties to even, kept in fp32
    return a.to(torch.bfloat16).to(torch.float32)


def main():
    torch.manual_seed(0)
    x = torch.randn(4096, 64 * 27)
    w = torch.randn(64 * 27, 64) * 0.05
    exact = x.double() @ w.double()
    xh, wh = bf16(x), bf16(w)
    xl, wl = bf16(x - xh), bf16(w - wh)
    x3 = xh.double() @ wh.double() + xl.double() @ wh.double() + xh.double() @ wl.double()
    big = exact.abs().max()
    for name, v in (("amx-x3 (hi*hi + lo*hi + hi*lo)", x3), ("fp32 SGEMM", (x @ w).double()),
                    ("plain bf16", xh.double() @ wh.double())):
        e = (v - exact).abs()
        print(f"{name:32s} largest error / largest value {e.max() / big:.2e}, "
              f"error norm / result norm {((e ** 2).sum() / (exact ** 2).sum()).sqrt():.2e}")


if __name__ == "__main__":
    main()
