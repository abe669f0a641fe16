#!/usr/bin/env bash
# tools/gpu_bundle.sh [--build DIR] [--out FILE]: packs a CUDA build's programs, stripped, with
# every shared library they need beyond the C runtime, the C++ runtime and the GPU driver, into
# one tarball that runs on a GPU node lacking this machine's packages (no MPI, no libyaml, no
# cairo: a bare CUDA image) — the case of compute nodes built from another image than the login
# node where scaffold was compiled. Open MPI comes with its components, launcher and help texts,
# relocated by OPAL_PREFIX. cuDNN, cuBLAS and NCCL are not packed (hundreds of MB): the node's
# own are found at run time (the CUDA toolkit's folders, then Python's nvidia-* wheels).
#
# On the node, from the repository root:
#     tar xzf FILE && source DIR/runtime/env.sh && BUILD=DIR bash tools/gpu_window.sh --only ...
# env.sh puts the packed libraries on LD_LIBRARY_PATH after the node's own CUDA libraries and
# says what it found. Build first with, e.g. (sm_90 only, to keep the bundle small):
#     make -j CUDA=1 BUILD=build-gpu CUDA_ARCH="-gencode arch=compute_90,code=sm_90" tests-bin
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu
OUTF=""
while [ $# -gt 0 ]; do
    case "$1" in
    --build) BUILD=${2:?--build needs a folder}; shift ;;
    --out) OUTF=${2:?--out needs a file}; shift ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_bundle: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
OUTF=${OUTF:-$BUILD-bundle.tar.gz}
[ -x "$BUILD/scaffold" ] && [ -x "$BUILD/tests/gpu/cu_ops" ] || {
    echo "gpu_bundle: $BUILD has no CUDA build (make CUDA=1 BUILD=$BUILD tests-bin)" >&2
    exit 2
}
OMPI_PREFIX=$(ompi_info --path prefix --parsable 2>/dev/null | sed -n 's/^path:prefix://p')
OMPI_PKGLIB=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
OMPI_PKGDATA=$(ompi_info --path pkgdatadir --parsable 2>/dev/null | sed -n 's/^path:pkgdatadir://p')
[ -n "$OMPI_PREFIX" ] && [ -d "$OMPI_PKGLIB" ] || {
    echo "gpu_bundle: the build's MPI is not Open MPI (ompi_info found nothing); only Open MPI is packed" >&2
    exit 2
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
R=$tmp/$BUILD/runtime
mkdir -p "$R/lib" "$R/cudart"

# the programs the GPU window runs, stripped of debug sections (the fat binaries stay)
progs=("$BUILD/scaffold" "$BUILD/tests/gpu/cu_ops" "$BUILD/tests/gpu/cu_unet"
    "$BUILD/bench/gpu/cu_conv" "$BUILD/bench/gpu/cu_step")
for f in "$BUILD"/bench/gpu/kernels/*; do [ -x "$f" ] && [ -f "$f" ] && progs+=("$f"); done
for p in "${progs[@]}"; do
    mkdir -p "$tmp/$(dirname "$p")"
    strip --strip-debug -o "$tmp/$p" "$p"
done

# Open MPI relocated: OPAL_PREFIX=$R/ompi makes its install folders $R/ompi/<path below prefix>.
# Components for networks a single GPU node does not use (UCX, OFI, PSM, verbs) are left out.
rel() { echo "${1#"$OMPI_PREFIX"/}"; }
O=$R/ompi
mkdir -p "$O/bin" "$O/$(rel "$OMPI_PKGLIB")" "$O/$(rel "$OMPI_PKGDATA")"
for b in orterun orted; do cp -L "$(command -v $b)" "$O/bin/$b"; done
ln -s orterun "$O/bin/mpirun"
comps=()
for c in "$OMPI_PKGLIB"/*.so; do
    case "$(basename "$c")" in *ucx* | *ofi* | *psm* | *openib* | *uct*) continue ;; esac
    cp "$c" "$O/$(rel "$OMPI_PKGLIB")/"
    comps+=("$c")
done
cp -r "$OMPI_PKGDATA"/. "$O/$(rel "$OMPI_PKGDATA")/"
# Open MPI's external PMIx: its plugins and help texts, relocated by PMIX_INSTALL_PREFIX
PMIX_PREFIX=$(dirname "$(dirname "$(readlink -f "$(ldd "$OMPI_PKGLIB/mca_pmix_ext3x.so" 2>/dev/null |
    awk '/libpmix\.so/ {print $3}')")")")
if [ -d "$PMIX_PREFIX/lib/pmix" ]; then
    mkdir -p "$R/pmix/lib"
    cp -r "$PMIX_PREFIX/lib/pmix" "$R/pmix/lib/"
    [ -d "$PMIX_PREFIX/share" ] && cp -r "$PMIX_PREFIX/share" "$R/pmix/"
    comps+=("$PMIX_PREFIX"/lib/pmix/*.so)
fi

# every library the programs, the launcher and the components load, but the C and C++
# runtimes (the node's own, newer or equal), the GPU driver, and CUDA's runtime (kept aside as a
# fallback for a node without the toolkit)
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libresolv\.|libutil\.|libstdc\+\+|libgcc_s|libcuda\.|libnvidia)'
ldd "${progs[@]}" "$O/bin/orterun" "$O/bin/orted" "${comps[@]}" 2>/dev/null |
    awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
    base=$(basename "$lib")
    [[ $base =~ $skip ]] && continue
    case "$base" in
    libcudart.so*) cp -L "$lib" "$R/cudart/$base" ;;
    *) cp -L "$lib" "$R/lib/$base" ;;
    esac
done
missing=$(ldd "${progs[@]}" 2>/dev/null | grep "not found" | sort -u || true)
[ -z "$missing" ] || { echo "gpu_bundle: unresolved libraries here:$missing" >&2; exit 1; }

cat >"$R/env.sh" <<'EOF'
# source BUILD/runtime/env.sh: the packed libraries and Open MPI on this node (see tools/gpu_bundle.sh)
_gb_r=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_gb_path=""
# the node's CUDA runtime, cuDNN, cuBLAS and NCCL: the toolkit's folders, else Python's wheels
for _gb_lib in libcudart.so.13 libcudnn.so.9 libcublas.so.13 libnccl.so.2; do
    _gb_f=""
    for _gb_d in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do
        [ -e "$_gb_d/$_gb_lib" ] && { _gb_f=$_gb_d/$_gb_lib; break; }
    done
    if [ -z "$_gb_f" ]; then
        _gb_f=$(find /usr /opt -name "$_gb_lib" -not -path '*/proc/*' 2>/dev/null | head -n 1)
    fi
    if [ -n "$_gb_f" ]; then
        case ":$_gb_path:" in *":$(dirname "$_gb_f"):"*) ;; *) _gb_path=$_gb_path:$(dirname "$_gb_f") ;; esac
        echo "gpu_bundle: $_gb_lib: $_gb_f"
    elif [ "$_gb_lib" = libcudart.so.13 ]; then
        _gb_path=$_gb_path:$_gb_r/cudart
        echo "gpu_bundle: $_gb_lib: the packed one"
    else
        echo "gpu_bundle: $_gb_lib: NOT FOUND on this node (the GPU backend needs it)"
    fi
done
export LD_LIBRARY_PATH=${_gb_path#:}:$_gb_r/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OPAL_PREFIX=$_gb_r/ompi
[ -d "$_gb_r/pmix" ] && export PMIX_INSTALL_PREFIX=$_gb_r/pmix PMIX_MCA_mca_base_component_path=$_gb_r/pmix/lib/pmix
export PATH=$_gb_r/ompi/bin:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_osc=^ucx,rdma
unset _gb_r _gb_path _gb_lib _gb_f _gb_d
EOF

mkdir -p "$(dirname "$OUTF")"
tar czf "$OUTF.tmp" -C "$tmp" "$BUILD"
mv "$OUTF.tmp" "$OUTF"
echo "gpu_bundle: $OUTF: $(du -h "$OUTF" | cut -f1) ($((${#progs[@]})) programs, $(ls "$R/lib" | wc -l) libraries, $(ls "$O/$(rel "$OMPI_PKGLIB")" | wc -l) Open MPI components)"
