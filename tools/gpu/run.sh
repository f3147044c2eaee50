#!/usr/bin/env bash
# tools/gpu/run.sh — on a GPU machine: unpacks tools/gpu/bundle.sh's bundle, runs the CUDA tests on
# the real device (test_cuda_gpu: every op and the model against the CPU backend, cuDNN attention
# against ours), then tools/bench/gpu_bench.sh (tokens/s and MFU, GPT-2 124M and 1.5B, with each
# attention path: native, cublas, cudnn) and tools/bench/offload_bench (the offloaded optimizer's
# step, serial against double-buffered, and its trace), then llmtrain-plan with GPT-2 1.5B's layers
# timed on the device (the planner's inputs measured rather than derived from FLOPs). Logs go to
# $LOGS (default $OUT when set, else gpu-logs/).
#
# Usage: tools/gpu/run.sh [bundle.tar.gz (default .gpu/bundle.tar.gz)] [bench steps (default 10)]
# Writes 7 files (the device tool returns 8 at most): env.txt, test_cuda_gpu.log, bench.txt,
# llmtrain_logs.txt (every bench run's llmtrain log, one after the other), offload.txt,
# offload_trace.json and plan.txt.
# Run from the repository root (configs/ and tools/ are read from the tree). Needs the NVIDIA driver
# and CUDA 13's cudart and cuBLASLt, and cuDNN 9 (a system install or pip's nvidia-* wheels).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUNDLE=${1:-.gpu/bundle.tar.gz}
STEPS=${2:-10}
LOGS=${LOGS:-${OUT:-gpu-logs}}
mkdir -p "$LOGS"
DIR=$(mktemp -d)/llmtrain-gpu
tar -C "$(dirname "$DIR")" -xzf "$BUNDLE" || { echo "run.sh: cannot unpack $BUNDLE"; exit 2; }

# The folder holding `lib` (e.g. libcudnn.so.9), searched where CUDA and pip's wheels put it.
find_lib() {
    local f
    for root in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu / ; do
        f=$(find "$root" -xdev -name "$1" -print -quit 2>/dev/null)
        [ -n "$f" ] && { dirname "$f"; return 0; }
    done
    return 1
}
cuda_libdirs=
for lib in libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libcudnn.so.9; do
    d=$(find_lib "$lib") || { echo "run.sh: $lib not found on this machine"; exit 2; }
    cuda_libdirs=${cuda_libdirs:+$cuda_libdirs:}$d
done
source tools/gpu/bundle_env.sh
bundle_env "$DIR" "$cuda_libdirs"

{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    ldd "$DIR/app/llmtrain" | grep -E "not found|cudart|cublasLt|cudnn"
} 2>&1 | tee "$LOGS/env.txt"

echo "== test_cuda_gpu"
"$DIR/tests/cuda/test_cuda_gpu" >"$LOGS/test_cuda_gpu.log" 2>&1
echo "test_cuda_gpu exit $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$LOGS/test_cuda_gpu.log"

echo "== gpu_bench (model.attention: native, cublas, cudnn)"
BUILD=$DIR bash tools/bench/gpu_bench.sh "$STEPS" 2>&1 | tee "$LOGS/bench.txt"
for f in "$DIR"/gpu_bench/*.log; do [ -f "$f" ] && { echo "==== $(basename "$f")"; cat "$f"; }; done >"$LOGS/llmtrain_logs.txt"

echo "== offload_bench (bf16, 1.5B / 8 ranks' shard: 200 M parameters)"
"$DIR/tools/bench/offload_bench" --backend cuda --params 200 --trace "$LOGS/offload_trace.json" 2>&1 |
    tee "$LOGS/offload.txt"

echo "== llmtrain-plan --profile (GPT-2 1.5B, layer times measured on this GPU, 8 x this GPU's memory)"
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
"$DIR/app/llmtrain-plan" --config configs/gpt2-1.5b.toml --world-size 8 --device-memory "${mem}MiB" --profile \
    --link-gbps 200 --compare 2>&1 | tee "$LOGS/plan.txt"
