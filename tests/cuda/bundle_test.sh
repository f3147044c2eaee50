#!/usr/bin/env bash
# tests/cuda/bundle_test.sh — tools/gpu/bundle.sh's bundle runs on a machine that has none of our
# dependencies: in a chroot holding only glibc, the C++ runtime, CUDA's cudart/cuBLASLt/cuDNN and
# the unpacked bundle, with tools/gpu/run.sh's environment, test_cuda_gpu loads (and exits 77: no
# GPU) and llmtrain trains 2 CPU steps of configs/tiny.toml on the tiny dataset (MPI_Init as a
# singleton, HDF5, SentencePiece, checkpoint written) and, under the bundle's mpirun, 2 ranks of
# ZeRO-1 train 2 CPU steps, llmtrain-plan solves a plan (GLPK), and its
# --profile with run.backend = "cuda" reaches the CUDA backend (which reports that there is no GPU).
# Needs root (chroot, mknod, bind mounts):
# exits 77 (skipped) where they are refused.
#
# Usage: bundle_test.sh <repo root> <build dir> <work dir>
set -euo pipefail
SRC=$1 BUILD=$2 WORK=$3
R=$WORK/root
cleanup() { umount "$R/proc" "$R/cuda" 2>/dev/null || true; }
trap cleanup EXIT
cleanup
rm -rf "$WORK" && mkdir -p "$R"/{lib64,lib/x86_64-linux-gnu,cuda,tmp,dev,proc,work}
NO_BUILD=1 BUILD=$BUILD bash "$SRC/tools/gpu/bundle.sh" "$WORK"
if ! { mknod "$R/dev/null" c 1 3 2>/dev/null && chmod 666 "$R/dev/null" &&
        mount --bind /proc "$R/proc" 2>/dev/null && mount --bind -o ro /usr/local/cuda/lib "$R/cuda" 2>/dev/null; }; then
    echo "bundle_test: needs root for mknod and bind mounts; skipped"; exit 77
fi
cp -L /lib64/ld-linux-x86-64.so.2 "$R/lib64/"
for l in libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libresolv.so.2 libstdc++.so.6 libgcc_s.so.1; do
    cp -L "/lib/x86_64-linux-gnu/$l" "$R/lib/x86_64-linux-gnu/"
done
tar -C "$R/work" -xzf "$WORK/bundle.tar.gz"
cp "$SRC/configs/tiny.toml" "$R/work/"

D=/work/llmtrain-gpu
# tools/gpu/run.sh's environment, with /cuda standing for the target's CUDA libraries.
source "$SRC/tools/gpu/bundle_env.sh"
unset LD_LIBRARY_PATH  # nothing of this machine's may leak into the chroot
bundle_env "$D" /cuda
rc=0
chroot "$R" "$D/tests/cuda/test_cuda_gpu" || rc=$?
[ "$rc" = 77 ] || { echo "test_cuda_gpu in the chroot exited $rc (expected 77: loads, finds no GPU)"; exit 1; }
chroot "$R" "$D/tests/app/make_tiny_dataset" /tmp/data
chroot "$R" "$D/app/llmtrain" --config /work/tiny.toml --set 'run.run_dir="/tmp/run"' --set run.max_steps=2 \
    --set "model.vocab_size=$(cat "$R/tmp/data/vocab_size.txt")" --set 'data.train="/tmp/data/train.h5"' \
    --set 'data.val="/tmp/data/val.h5"' --set training.micro_batch_size=2 --set run.eval_interval=0 \
    --set run.sample_interval=0 --set metrics.enabled=false
[ -d "$R/tmp/run/checkpoints/step_2" ] || { echo "bundle_test: no checkpoint at step 2"; exit 1; }
# The bundle's mpirun (tools/gpu/run.sh's multirank stage) starts 2 ranks: ZeRO-1 for 2 CPU steps.
chroot "$R" "$D/openmpi/bin/mpirun" --oversubscribe -np 2 "$D/app/llmtrain" --config /work/tiny.toml \
    --set 'run.run_dir="/tmp/run2"' --set run.max_steps=2 --set "model.vocab_size=$(cat "$R/tmp/data/vocab_size.txt")" \
    --set 'data.train="/tmp/data/train.h5"' --set 'data.val="/tmp/data/val.h5"' --set training.micro_batch_size=2 \
    --set parallel.zero_stage=1 --set run.eval_interval=0 --set run.sample_interval=0 --set metrics.enabled=false \
    >"$WORK/mpirun.txt" 2>&1 || { echo "bundle_test: the bundle's mpirun failed:"; cat "$WORK/mpirun.txt"; exit 1; }
grep -q "world 2, dp 2" "$WORK/mpirun.txt" || { echo "bundle_test: mpirun started no 2-rank run:"; cat "$WORK/mpirun.txt"; exit 1; }
chroot "$R" "$D/tools/bench/offload_bench" --backend cpu --params 1 --steps 1 --trace /tmp/offload.json
[ -s "$R/tmp/offload.json" ] || { echo "bundle_test: offload_bench wrote no trace"; exit 1; }
chroot "$R" "$D/app/llmtrain-plan" --config /work/tiny.toml --world-size 2 --device-memory 1GiB \
    --device-tflops 1 >"$WORK/plan.txt" || { echo "bundle_test: llmtrain-plan failed"; cat "$WORK/plan.txt"; exit 1; }
grep -q "^best:" "$WORK/plan.txt" || { echo "bundle_test: llmtrain-plan printed no plan"; exit 1; }
# --profile on the CUDA backend: the bundled llmtrain-plan links it and finds its libraries here;
# with no GPU the backend itself refuses (tools/gpu/run.sh profiles GPT-2 1.5B with it on the GPU).
rc=0
chroot "$R" "$D/app/llmtrain-plan" --config /work/tiny.toml --set 'run.backend="cuda"' --world-size 2 \
    --device-memory 1GiB --profile --reps 1 >"$WORK/plan_cuda.txt" 2>&1 || rc=$?
if [ $rc != 1 ] || ! grep -q "no CUDA device is present" "$WORK/plan_cuda.txt"; then
    echo "bundle_test: llmtrain-plan --profile on cuda exited $rc (expected 1: no CUDA device is present):"
    cat "$WORK/plan_cuda.txt"; exit 1
fi
echo "bundle_test: the bundle ran in a bare root"
