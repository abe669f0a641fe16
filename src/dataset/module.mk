# dataset: voxelisation must follow upstream's float32 operation order exactly; forbid FMA
# contraction (GCC contracts by default outside strict ISO modes, and -march=native enables FMA).
MODULE_CFLAGS_dataset := -ffp-contract=off
