# src/nn: the training engine. -O3 lets GCC fully unroll the register-blocked microkernels;
# -ffp-contract=fast allows fused multiply-add (ISO C mode turns contraction off by default).
MODULE_CFLAGS_nn := -O3 -ffp-contract=fast
