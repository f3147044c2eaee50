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
#   llmc/          only with LLMC_SRC (below): llm.c's source (src/), train_gpt2cu and BUILD.txt, and
#                  tools/prep/llmc_shard (our HDF5 tokens -> an llm.c shard): run.sh's llm.c steps
# tools/gpu/run.sh unpacks and runs it. The binaries need glibc >= this machine's (2.36).
#
# LLMC_SRC (optional): karpathy/llm.c, never committed here: a git directory (e.g. the mirror the
# `fetch` tool makes, /work/.mirror/karpathy+llm.c/repo; its HEAD is archived) or a source tree.
# train_gpt2cu is built once per llm.c commit into $BUILD/llmc/<commit>/ (kept for the next bundle) by
# tools/gpu/steps_llmc.sh's llmc_make for sm_$LLMC_SM (default 90: H100/H200; no NCCL, MPI or cuDNN,
# one line patched for CUDA 13; BUILD.txt records the make line). If that fails, the bundle carries
# the source alone and run.sh runs the same make on the device where nvcc is.
# LLMC_CUDNN_FRONTEND (optional, with LLMC_SRC): NVIDIA/cudnn-frontend (a git directory, whose HEAD's
# include/ is taken, or its include directory): llm.c is also built with its cuDNN attention into
# llmc/train_gpt2cu_cudnn (its fastest build; once per llm.c and frontend commit), which run.sh then runs.
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

llmc_exes=()  # their libraries too
if [ -n "${LLMC_SRC:-}" ]; then
    [ "${NO_BUILD:-0}" = 1 ] || cmake --build "$BUILD" -j "$(nproc)" --target llmc_shard
    mkdir -p "$ROOT/llmc" "$ROOT/tools/prep"
    cp "$BUILD/tools/prep/llmc_shard" "$ROOT/tools/prep/"
    if git -C "$LLMC_SRC" rev-parse HEAD >/dev/null 2>&1; then
        commit=$(git -C "$LLMC_SRC" rev-parse HEAD)
    else
        commit=tree-$(find "$LLMC_SRC" -type f -name '*.c*' -o -type f -name '*.h' -o -type f -name Makefile | sort | xargs cat | sha256sum | cut -c1-12)
    fi
    L=$(realpath "$BUILD")/llmc/$commit
    if [ ! -f "$L/BUILD.txt" ]; then
        rm -rf "$L" && mkdir -p "$L/src"
        if [ "${commit#tree-}" = "$commit" ]; then git -C "$LLMC_SRC" archive HEAD | tar -x -C "$L/src"; else cp -r "$LLMC_SRC"/. "$L/src"; fi
        cp -r "$L/src" "$L/work"
        t0=$SECONDS
        source tools/gpu/steps_llmc.sh
        if llmc_make "$L/work" "${LLMC_SM:-90}" "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" >"$L/make.txt" 2>&1; then
            cp "$L/work/train_gpt2cu" "$L/train_gpt2cu"
            result="built here in $((SECONDS - t0)) s"
        else
            result="did not build here ($((SECONDS - t0)) s; make's end below): run.sh builds it on the device"
        fi
        rm -rf "$L/work"
        { echo "llm.c $commit, own attention (train_gpt2cu)"; cat "$L/make.txt"; echo "result: $result"; } >"$L/BUILD.txt"
    fi
    cp -r "$L/src" "$L/BUILD.txt" "$ROOT/llmc/"
    if [ -n "${LLMC_CUDNN_FRONTEND:-}" ]; then
        fe=$(git -C "$LLMC_CUDNN_FRONTEND" rev-parse HEAD 2>/dev/null || echo tree)
        C=$L/cudnn-$fe
        if [ ! -f "$C/BUILD.txt" ]; then
            rm -rf "$C" && mkdir -p "$C/fe" && cp -r "$L/src" "$C/work"
            if [ "$fe" = tree ]; then cp -r "$LLMC_CUDNN_FRONTEND" "$C/fe/include"; else
                git -C "$LLMC_CUDNN_FRONTEND" archive HEAD include | tar -x -C "$C/fe"; fi
            t0=$SECONDS
            source tools/gpu/steps_llmc.sh
            if llmc_make "$C/work" "${LLMC_SM:-90}" "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" "$C/fe/include" \
                >"$C/make.txt" 2>&1; then
                cp "$C/work/train_gpt2cu" "$C/train_gpt2cu_cudnn"
                result="built here in $((SECONDS - t0)) s"
            else
                result="did not build here ($((SECONDS - t0)) s; make's end above): run.sh runs the own-attention build"
            fi
            rm -rf "$C/work" "$C/fe"
            { echo "llm.c $commit with cuDNN attention (train_gpt2cu_cudnn), cudnn-frontend $fe"; cat "$C/make.txt"
              echo "result: $result"; } >"$C/BUILD.txt"
        fi
        cat "$C/BUILD.txt" >>"$ROOT/llmc/BUILD.txt"
        [ -f "$C/train_gpt2cu_cudnn" ] && cp "$C/train_gpt2cu_cudnn" "$ROOT/llmc/"
        echo "bundle: llm.c with cuDNN: $(sed -n 's/^result: //p' "$C/BUILD.txt")"
    fi
    llmc_exes=("$ROOT/tools/prep/llmc_shard")
    for f in train_gpt2cu train_gpt2cu_cudnn; do
        [ -f "$L/$f" ] && cp "$L/$f" "$ROOT/llmc/"
        [ -f "$ROOT/llmc/$f" ] && llmc_exes+=("$ROOT/llmc/$f")
    done
    echo "bundle: llm.c $commit: $(sed -n 's/^result: //p' "$L/BUILD.txt" | head -1)"
fi

# Libraries the target provides itself (glibc, the C++ runtime, the driver and CUDA's libraries).
SKIP='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libstdc\+\+|libgcc_s|libcuda\.so|libcudart|libcublas|libcudnn|libnccl)'
ompi_plugins=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
cp -L "$(command -v mpirun)" "$ROOT/openmpi/bin/mpirun"  # Open MPI 4's orterun
cp -L "$(command -v orted)" "$ROOT/openmpi/bin/orted"
for f in "$ROOT/app/llmtrain" "$ROOT/app/llmtrain-plan" "$ROOT/tests/cuda/test_cuda_gpu" "$ROOT/tests/app/make_tiny_dataset" \
         "$ROOT/tools/bench/attention_bench" "$ROOT/tools/bench/offload_bench" "$ROOT/tools/bench/checkpoint_bench" \
         "$ROOT/openmpi/bin/mpirun" "$ROOT/openmpi/bin/orted" "$ompi_plugins"/*.so "${llmc_exes[@]}"; do
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
