#!/usr/bin/env bash
# Training-engine tests: layers and the whole U-Net against PyTorch fixtures, finite
# differences, optimized-vs-naive kernels, checkpoints, `scaffold predict` (errors, and interop
# with PyTorch when torch is installed), and the layer tests under ASan/UBSan.
cd "$(dirname "$0")/../.." && source tests/lib.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
FIX=tests/nn/fixtures
# Every kernel path this CPU can run (AVX-512, AVX2, portable), forced with SCAFFOLD_ISA; the
# binaries check that the path they ran is the one asked for.
ISAS=$("$BUILD/tests/nn/test_layers" --list-isas)
t_check "nn: at least the portable path is listed ($ISAS)" grep -qw portable <<<"$ISAS"
# SCAFFOLD_TEST_NN_MATRIX=0 runs each binary once on the default path and skips the forcing
# matrix and the sanitizer build: .ci/run sets it for its second and third builds (MPICH,
# CUDA=1), which compile the same kernel sources with the same compiler as the first, where the
# whole matrix runs.
MATRIX=${SCAFFOLD_TEST_NN_MATRIX:-1}
if [ "$MATRIX" = 0 ]; then
    echo "nn: SCAFFOLD_TEST_NN_MATRIX=0: default path only, no forcing matrix, no sanitizer build"
    t_cbin "$BUILD/tests/nn/test_layers" "$FIX"
    t_cbin "$BUILD/tests/nn/test_unet" "$FIX"
    t_cbin "$BUILD/tests/nn/test_ops"
    ISAS=
fi
for isa in $ISAS; do
    SCAFFOLD_ISA=$isa t_cbin "$BUILD/tests/nn/test_layers" "$FIX"
    SCAFFOLD_ISA=$isa t_cbin "$BUILD/tests/nn/test_unet" "$FIX"
    # every op's fast path against its plain reference (src/nn/ref.c), on random input
    SCAFFOLD_ISA=$isa t_cbin "$BUILD/tests/nn/test_ops"
done
SCAFFOLD_NN_WINOGRAD=0 t_cbin "$BUILD/tests/nn/test_ops"
# bf16 on the vdpbf16ps kernels where the AVX-512 path would take AMX tiles
if [ "$MATRIX" != 0 ] && grep -qw avx512 <<<"$ISAS"; then
    SCAFFOLD_ISA=avx512 SCAFFOLD_AMX=0 t_cbin "$BUILD/tests/nn/test_layers" "$FIX"
    SCAFFOLD_ISA=avx512 SCAFFOLD_AMX=0 t_cbin "$BUILD/tests/nn/test_unet" "$FIX"
fi
# Every Conv3d algorithm (nn/algo.h) on every shape class of the layer tests (Winograd's many-
# and few-tile shapes, the direct-only ones, concatenations, split input gradients), forced
# (where a forced algorithm does not apply, the rule runs); the bf16 ones through a C stand-in
# for vdpbf16ps (SCAFFOLD_BF16DP=emulate: the pair packing, padding and drivers) on a CPU
# without AVX512_BF16. Under emulation the rule already takes winograd-bf16 where it applies.
if [ "$MATRIX" != 0 ]; then
    BF16=emulate
    [ "$(SCAFFOLD_BF16DP= "$BUILD/tests/nn/test_layers" --bf16dp)" = 1 ] && BF16=
    for a in direct winograd direct-bf16 winograd-bf16 amx amx-x3; do
        case $a in *bf16) dp=$BF16 ;; *) dp= ;; esac
        SCAFFOLD_BF16DP=$dp SCAFFOLD_NN_ALGO=$a t_cbin "$BUILD/tests/nn/test_layers" "$FIX"
    done
    [ -z "$BF16" ] && SCAFFOLD_BF16DP=emulate t_cbin "$BUILD/tests/nn/test_layers" "$FIX"
    SCAFFOLD_BF16DP=emulate SCAFFOLD_NN_ALGO=direct-bf16 t_cbin "$BUILD/tests/nn/test_unet" "$FIX"
fi
# The settings table (nn/settings.h): each variable's reading, reloads; and docs/nn.md's
# "Environment variables" lists exactly the table's variables (each row's `SCAFFOLD_*` name)
t_cbin "$BUILD/tests/nn/test_settings"
table=$("$BUILD/tests/nn/test_settings" --names | sort)
documented=$(awk '/^### Environment variables/ { on = 1; next } /^#/ { on = 0 } on' docs/nn.md |
    grep -oE '^\| `SCAFFOLD_[A-Z0-9_]+`' | tr -d '|` ' | sort)
if [ -n "$table" ] && [ "$table" = "$documented" ]; then
    t_ok "nn: docs/nn.md's Environment variables are the settings table's ($(wc -l <<<"$table"))"
else
    t_fail "nn: docs/nn.md's Environment variables differ from the settings table" \
        "$(diff <(echo "$table") <(echo "$documented") | grep '^[<>]' | tr '\n' ' ')"
fi
# The choice itself: measurement, accuracy budget, cache, pin, forcing, bad files
t_cbin "$BUILD/tests/nn/test_algo"
SCAFFOLD_BF16DP=emulate t_cbin "$BUILD/tests/nn/test_algo"
out=$(SCAFFOLD_ISA=bogus "$BUILD/tests/nn/test_layers" --list-isas 2>&1)
t_check "nn: SCAFFOLD_ISA=bogus is reported" grep -q "SCAFFOLD_ISA=bogus: unknown path" <<<"$out"
if [ "$MATRIX" != 0 ]; then
    # the weight gradient's second path (tile partition, used for layers too big for replicas)
    SCAFFOLD_NN_DW_REPLICAS=0 t_cbin "$BUILD/tests/nn/test_layers" "$FIX"
    # Winograd off (the direct kernels on every shape), and slabs of a few planes (odd depths, which
    # Winograd's two-plane tiles round down, and several slabs per volume on both paths).
    SCAFFOLD_NN_WINOGRAD=0 t_cbin "$BUILD/tests/nn/test_unet" "$FIX"
    SCAFFOLD_NN_SLAB_BYTES=150000 t_cbin "$BUILD/tests/nn/test_layers" "$FIX"
    # Winograd's transformed weights a column group at a time (the path of layers whose U exceeds
    # 128 MiB, 1024 -> 512 at 16^3), here one column block per group on every Winograd shape
    SCAFFOLD_NN_WINO_UMAX=4096 t_cbin "$BUILD/tests/nn/test_layers" "$FIX"
    SCAFFOLD_NN_WINO_UMAX=4096 t_cbin "$BUILD/tests/nn/test_unet" "$FIX"
    # Winograd's chunks shared among the threads on every shape (by default the test shapes, few
    # channels, give each thread chunks of its own)
    SCAFFOLD_NN_WINO_OWN=0 t_cbin "$BUILD/tests/nn/test_layers" "$FIX"
    # fp32 Winograd's plane groups (one pass over the tiles per plane or pair of planes of the
    # transformed tile; by default only where U is larger than 640 KiB) on every shape, against
    # the naive loops, and on the U-Net
    for planes in 1 2; do
        SCAFFOLD_NN_WINO_PLANES=$planes t_cbin "$BUILD/tests/nn/test_layers" "$FIX"
    done
    SCAFFOLD_NN_WINO_PLANES=1 t_cbin "$BUILD/tests/nn/test_unet" "$FIX"
    OMP_NUM_THREADS=3 t_cbin "$BUILD/tests/nn/test_layers" "$FIX"
fi

d=$(t_tmpdir)
"$BUILD/tests/nn/test_unet" --write-ckpt "$d/c.safetensors" || t_fail "write checkpoint"
"$PYTHON" -c "
import numpy as np
r = np.random.default_rng(1)
np.save('$d/v.npy', r.standard_normal((3,8,8,8)).astype(np.float32))
np.save('$d/odd.npy', r.standard_normal((3,8,6,8)).astype(np.float32))
np.save('$d/v64.npy', r.standard_normal((3,8,8,8)))
np.save('$d/v2d.npy', r.standard_normal((8,8)).astype(np.float32))
"
t_expect_fail "predict: missing --input" 2 "required" "$SCAFFOLD" predict --checkpoint "$d/c.safetensors"
t_expect_fail "predict: unknown option" 2 "unknown" "$SCAFFOLD" predict --frobnicate
t_expect_fail "predict: bad --threads" 2 "positive integer" "$SCAFFOLD" predict --checkpoint x --input y --threads 0
t_expect_fail "predict: extent not a multiple of 2^layers" 2 "odd.npy.*multiple of 2\^layers" "$SCAFFOLD" predict --checkpoint "$d/c.safetensors" --input "$d/odd.npy" --mask "$d/o.npy"
t_expect_fail "predict: float64 volume" 2 "v64.npy: expected a float32 volume" "$SCAFFOLD" predict --checkpoint "$d/c.safetensors" --input "$d/v64.npy"
t_expect_fail "predict: 2-D volume" 2 "expected a float32 volume of shape \(3, D, H, W\)" "$SCAFFOLD" predict --checkpoint "$d/c.safetensors" --input "$d/v2d.npy"
t_expect_fail "predict: missing checkpoint" 2 "cannot open checkpoint" "$SCAFFOLD" predict --checkpoint "$d/none.safetensors" --input "$d/v.npy"
head -c 3000 "$d/c.safetensors" > "$d/trunc.safetensors"
t_expect_fail "predict: truncated checkpoint" 2 "trunc.safetensors.*(truncated|past the end)" "$SCAFFOLD" predict --checkpoint "$d/trunc.safetensors" --input "$d/v.npy"
printf 'not a checkpoint at all' > "$d/junk.safetensors"
t_expect_fail "predict: not a safetensors file" 2 "junk.safetensors" "$SCAFFOLD" predict --checkpoint "$d/junk.safetensors" --input "$d/v.npy"
t_check "predict: no half-written output after errors" test ! -e "$d/o.npy"
t_check "predict: --mask only" "$SCAFFOLD" predict --checkpoint "$d/c.safetensors" --input "$d/v.npy" --mask "$d/m.npy"
if "$PYTHON" -c "import torch" 2>/dev/null; then
    source tests/nn/interop.sh
else
    echo "skip PyTorch interop tests (torch not installed)"
fi
rm -rf "$d"

# Sanitizers (ASan + UBSan) on the layer and U-Net tests. Built here from src/nn and src/core
# only (the engine's whole dependency set), into $BUILD/nn-asan, when missing or stale.
if [ "${SCAFFOLD_TEST_SAN:-0}" != 1 ] && [ "$MATRIX" != 0 ]; then
    SB=$BUILD/nn-asan
    if [ ! -x "$SB/test_unet" ] || [ -n "$(find src/nn src/core tests/nn tests/test.h -newer "$SB/test_unet" -name '*.[ch]' 2>/dev/null | head -1)" ]; then
        mkdir -p "$SB"
        rm -f "$SB"/src_*.o # objects of sources since removed or renamed would link twice
        SANF="-std=c11 -D_GNU_SOURCE -O1 -g -fopenmp -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -Isrc -Iinclude -Itests"
        ok=1
        for f in src/nn/*.c src/core/*.c; do echo "$f"; done |
            xargs -P 2 -I{} sh -c 'mpicc '"$SANF"' -c {} -o '"$SB"'/$(echo {} | tr / _).o' || ok=0
        for t in test_layers test_unet; do
            mpicc $SANF tests/nn/$t.c "$SB"/src_*.o -lyaml -lz -lm -o "$SB/$t" || ok=0
        done
        [ $ok = 1 ] || t_fail "build ASan/UBSan nn tests"
    fi
    export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    [ -x "$SB/test_layers" ] && t_cbin "$SB/test_layers" "$FIX"
    [ -x "$SB/test_unet" ] && t_cbin "$SB/test_unet" "$FIX"
fi
t_report
