#!/usr/bin/env bash
# tests/cuda/emu_train.sh — the llmtrain binary built against cuda_emu (llmtrain-emu) trains
# configs/tiny.toml with run.backend = "cuda", and a checkpoint written by one backend resumes on
# the other. Reference: the CPU llmtrain on the same config, data and seed.
#
# Usage: emu_train.sh <llmtrain> <llmtrain-emu> <config.toml> <tiny_data_dir> <work_dir>
# The tiny dataset (tests/app's make_tiny_dataset fixture) replaces the Brown corpus; the model is
# tiny.toml's cut to 2 layers (width 256, seq_len 256) with micro_batch_size 2 to keep the emulated run
# to seconds. Checks (each prints what it compared):
#   1. 3 steps, cuda fp32 vs cpu: every train loss within 1e-4 relative, and the weights of the
#      final checkpoint (model.h5) tensor by tensor (tolerances at compare_weights);
#   2. 3 steps, cuda bf16 vs cpu: within 5e-3 relative (bf16 weights and activations; 3e-4 seen);
#      model.attention = "auto" there picks "native" (no cuDNN in the emulator; head size 64: the
#      FlashAttention-2 kernels of flash_forward.cu and flash_backward.cu on emulated tensor cores),
#      and the log says so; and again at head size 128 (model.n_head = 2: the forward's 4 warps with
#      Q in shared memory, the emulated H100's 128-key backward blocks) against a CPU run of it;
#   3. cpu trains 2 steps and checkpoints, cuda (fp32) resumes to step 3: step 3 matches run 1's cpu
#      loss within 1e-4; 4. the reverse (cuda checkpoints, cpu resumes), same check;
#   5. cuda in bf16 checkpoints (fp32 master weights saved), cpu resumes: within 5e-3;
#   (4 and 5 resume from the step-2 checkpoint that the 3-step cuda fp32 and bf16 runs of 1 and 2
#   write on the way, copied alone into a fresh run directory, instead of from 2-step cuda runs of
#   their own: the same checkpoint bits, since writing a checkpoint changes nothing in the run, and
#   4 emulated steps fewer;)
#   6. training.stochastic_rounding = true reaches the backend: 2 bf16 steps whose step-2 loss
#      differs from the round-to-nearest run's (the params after step 1 differ) yet stays within 5e-3 of cpu;
#   7. model.attention = "cublas": 3 fp32 steps with attention_workspace_mb = 1 (query tiles of 64 of
#      the 256 rows) within 1e-4 of cpu, and 3 bf16 steps in one tile with every layer recomputed
#      (activation_checkpoint.ratio = 1) within 5e-3;
# 18 emulated steps of 2 layers at seq_len 256 (22 before 4 and 5 reused the runs of 1 and 2: 145 s
# in a CI run; 132 s with the 18 steps at tiny.toml's 4 layers; 2 layers check the same paths).
set -euo pipefail
LLMTRAIN=$1 EMU=$2 CONFIG=$3 DATA=$4 WORK=$5
VOCAB=$(cat "$DATA/vocab_size.txt")
rm -rf "$WORK" && mkdir -p "$WORK"

# shellcheck source=tests/cuda/emu_train_lib.sh
source "$(dirname "$0")/emu_train_lib.sh"
# emu_train_lib.sh's run with tiny.toml cut to 2 layers (every check below is per layer or per run).
run_tiny() { run "$@" --set model.n_layer=2; }

run_tiny "$LLMTRAIN" "$WORK/cpu" cpu fp32 3
run_tiny "$EMU" "$WORK/cuda_fp32" cuda fp32 3 --set checkpoint.interval=2
compare "cuda fp32 vs cpu" "$WORK/cpu" "$WORK/cuda_fp32" 1e-4 1
compare_weights "cuda fp32 vs cpu" "$WORK/cpu" "$WORK/cuda_fp32"
run_tiny "$EMU" "$WORK/cuda_bf16" cuda bf16 3 --set checkpoint.interval=2
grep -q "attention: native (auto: this build has no cuDNN; FlashAttention-2" "$WORK/cuda_bf16.log" ||
    { echo "auto in bf16 at head size 64 without cuDNN did not pick native (FlashAttention-2)"; exit 1; }
compare "cuda bf16 (auto: native, FlashAttention-2 on emulated tensor cores) vs cpu" "$WORK/cpu" "$WORK/cuda_bf16" 5e-3 1
run_tiny "$LLMTRAIN" "$WORK/cpu_hs128" cpu fp32 3 --set model.n_head=2
run_tiny "$EMU" "$WORK/cuda_bf16_hs128" cuda bf16 3 --set model.n_head=2
grep -q "attention: native (auto: this build has no cuDNN; FlashAttention-2" "$WORK/cuda_bf16_hs128.log" ||
    { echo "auto in bf16 at head size 128 without cuDNN did not pick native (FlashAttention-2)"; exit 1; }
compare "cuda bf16 at head size 128 (native) vs cpu" "$WORK/cpu_hs128" "$WORK/cuda_bf16_hs128" 5e-3 1

run_tiny "$LLMTRAIN" "$WORK/cpu_then_cuda" cpu fp32 2
run_tiny "$EMU" "$WORK/cpu_then_cuda" cuda fp32 3
compare "cpu checkpoint resumed on cuda" "$WORK/cpu" "$WORK/cpu_then_cuda" 1e-4 3

resume_dir "$WORK/cuda_fp32" 2 "$WORK/cuda_then_cpu"
run_tiny "$LLMTRAIN" "$WORK/cuda_then_cpu" cpu fp32 3
compare "cuda checkpoint resumed on cpu" "$WORK/cpu" "$WORK/cuda_then_cpu" 1e-4 3
grep -q "resume: from .*step_2 at step 2 .*written by backend cuda/fp32" "$WORK/cuda_then_cpu.log" ||
    { echo "the cpu run did not report resuming from the cuda fp32 step-2 checkpoint"; exit 1; }

resume_dir "$WORK/cuda_bf16" 2 "$WORK/bf16_then_cpu"
run_tiny "$LLMTRAIN" "$WORK/bf16_then_cpu" cpu fp32 3
compare "cuda bf16 checkpoint resumed on cpu" "$WORK/cpu" "$WORK/bf16_then_cpu" 5e-3 3
grep -q "resume: from .*step_2 at step 2 .*written by backend cuda/bf16" "$WORK/bf16_then_cpu.log" ||
    { echo "the cpu run did not report resuming from the cuda bf16 step-2 checkpoint"; exit 1; }
run_tiny "$EMU" "$WORK/bf16_sr" cuda bf16 2 --set training.stochastic_rounding=true
compare "cuda bf16 stochastic rounding vs cpu" "$WORK/cpu" "$WORK/bf16_sr" 5e-3 1
step2_loss() { awk -F'\t' '$1 == 2 && $2 == "train" { print $3 }' "$1/losses.tsv"; }
nearest=$(step2_loss "$WORK/cuda_bf16") stochastic=$(step2_loss "$WORK/bf16_sr")
echo "step-2 loss: round-to-nearest $nearest, stochastic rounding $stochastic"
if [ "$nearest" = "$stochastic" ]; then
    echo "stochastic rounding changed nothing: is training.stochastic_rounding passed to the backend?"
    exit 1
fi

run_tiny "$EMU" "$WORK/cublas_fp32" cuda fp32 3 --set 'model.attention="cublas"' --set model.attention_workspace_mb=1
compare "cublas attention, fp32, 4 query tiles, vs cpu" "$WORK/cpu" "$WORK/cublas_fp32" 1e-4 1
run_tiny "$EMU" "$WORK/cublas_bf16" cuda bf16 3 --set 'model.attention="cublas"' --set activation_checkpoint.ratio=1
compare "cublas attention, bf16, recomputed layers, vs cpu" "$WORK/cpu" "$WORK/cublas_bf16" 5e-3 1
echo "emu_train: all checks passed"
