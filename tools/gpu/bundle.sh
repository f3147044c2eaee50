#!/usr/bin/env bash
# tools/gpu/bundle.sh — packs the CUDA build for a GPU machine that has the NVIDIA driver and CUDA
# libraries but none of our other dependencies (a lent machine cannot install packages).
#
# Usage: tools/gpu/bundle.sh [out_dir (default .gpu)]; tested by tests/cuda/bundle_test.sh
# Builds (Release, nvcc) app/llmtrain and app/llmtrain-plan (both linked with the CUDA backend),
# tests/cuda/test_cuda_gpu, tests/app/make_tiny_dataset and two benchmarks in $BUILD (default
# build), then writes
# <out_dir>/bundle.tar.gz holding, under llmtrain-gpu/:
#   app/, tests/, tools/bench/   the executables, in their build-tree places (gpu_bench.sh's BUILD)
#   lib/           every shared library they load except glibc's, libstdc++/libgcc_s (the target's
#                  own are newer and compatible) and CUDA's (cudart, cuBLASLt, cuDNN: the target's
#                  own, found by tools/gpu/run.sh)
#   openmpi/       Open MPI's plugin folder and help texts (MPI_Init loads plugins at run time), and
#                  bin/mpirun (orterun) with orted: tools/gpu/run.sh's multirank stage starts several
#                  ranks on the one GPU with it (on one node mpirun forks the ranks itself)
# tools/gpu/run.sh unpacks and runs it. The binaries need glibc >= this machine's (2.36).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-.gpu}
BUILD=${BUILD:-build}
if [ "${NO_BUILD:-0}" != 1 ]; then  # NO_BUILD=1: use what $BUILD holds (the ctest does)
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$BUILD" -j "$(nproc)" --target llmtrain llmtrain-plan test_cuda_gpu make_tiny_dataset attention_bench \
        offload_bench checkpoint_bench
fi
for exe in app/llmtrain app/llmtrain-plan tests/cuda/test_cuda_gpu; do
    deps=$(ldd "$BUILD/$exe")  # not piped into grep -q: its early exit would fail the pipe (pipefail)
    [[ $deps == *libcudart* ]] || { echo "bundle: $BUILD/$exe is not linked with CUDA (nvcc not found?)"; exit 1; }
done

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
ROOT=$STAGE/llmtrain-gpu
mkdir -p "$ROOT/app" "$ROOT/tests/cuda" "$ROOT/tests/app" "$ROOT/tools/bench" "$ROOT/lib" "$ROOT/openmpi/bin"
cp "$BUILD/app/llmtrain" "$BUILD/app/llmtrain-plan" "$ROOT/app/"
cp "$BUILD/tests/cuda/test_cuda_gpu" "$ROOT/tests/cuda/"
cp "$BUILD/tests/app/make_tiny_dataset" "$ROOT/tests/app/"
cp "$BUILD/tools/bench/attention_bench" "$ROOT/tools/bench/"  # gpu_bench.sh's attention timings
cp "$BUILD/tools/bench/offload_bench" "$ROOT/tools/bench/"    # the offloaded optimizer's step
cp "$BUILD/tools/bench/checkpoint_bench" "$ROOT/tools/bench/" # an asynchronous checkpoint's blocked time

# Libraries the target provides itself (glibc, the C++ runtime, the driver and CUDA's libraries).
SKIP='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libstdc\+\+|libgcc_s|libcuda\.so|libcudart|libcublas|libcudnn|libnccl)'
ompi_plugins=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
cp -L "$(command -v mpirun)" "$ROOT/openmpi/bin/mpirun"  # Open MPI 4's orterun
cp -L "$(command -v orted)" "$ROOT/openmpi/bin/orted"
for f in "$ROOT/app/llmtrain" "$ROOT/app/llmtrain-plan" "$ROOT/tests/cuda/test_cuda_gpu" "$ROOT/tests/app/make_tiny_dataset" \
         "$ROOT/tools/bench/attention_bench" "$ROOT/tools/bench/offload_bench" "$ROOT/tools/bench/checkpoint_bench" \
         "$ROOT/openmpi/bin/mpirun" "$ROOT/openmpi/bin/orted" "$ompi_plugins"/*.so; do
    ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
    [[ $name =~ $SKIP ]] && continue
    cp -L "$path" "$ROOT/lib/$name"
done
cp -r "$ompi_plugins" "$ROOT/openmpi/plugins"
cp -r /usr/share/openmpi "$ROOT/openmpi/share"

mkdir -p "$OUT"
tar -C "$STAGE" -czf "$OUT/bundle.tar.gz" llmtrain-gpu
echo "bundle: $OUT/bundle.tar.gz ($(du -h "$OUT/bundle.tar.gz" | cut -f1); $(find "$ROOT/lib" -type f | wc -l) libraries)"
