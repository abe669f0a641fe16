# src/nn: the training engine. The microkernels are compiled once per instruction set by
# kern_<isa>.c, whose `#pragma GCC target` sets the target whatever the flags here (so the
# sanitizer and per-path test builds need no special rules); gemm.c dispatches at run time. -O3 lets GCC fully unroll the register-blocked microkernels;
# -ffp-contract=fast allows fused multiply-add (ISO C mode turns contraction off by default);
# -fno-math-errno lets sqrtf become a vector instruction (nothing here reads errno).
MODULE_CFLAGS_nn := -O3 -ffp-contract=fast -fno-math-errno
