#!/usr/bin/env bash
# tests/gpu/run_sh_test.sh — tools/gpu/run.sh's plumbing without a GPU: a bundle of stand-in
# executables (bash scripts that print what the real ones print: llmtrain's step, val, checkpoint
# and peak-memory lines and its losses.tsv, gtest's summary, offload_bench's, checkpoint_bench's and llmtrain-plan's
# reports) and a stand-in nvidia-smi run every stage. Honest about data: the bundle's
# make_tiny_dataset is the real one (run.sh's and gpu_bench.sh's synthetic data are real HDF5 files
# of the real sizes), and the stand-in llmtrain, before its fake steps, runs the real llmtrain built
# here with --dry-run on the same --config and --set arguments, shrunk for the CPU (run.backend
# "cpu", fp32, 1 layer of width 16, 1-rank parallel settings) with everything the data checks read
# kept: data.train/val, micro_batch_size x dp, seq_len, vocab_size, run.eval_interval (details
# where it is written, below); the Trainer opens the data with the real checks, and a failure ends
# the stand-in with llmtrain's message and exit status, as a real start would (a val split smaller
# than micro_batch_size x dp stopped every GPT-2 124M run of a GPU call that these stand-ins, then
# reading no data, passed). The stand-in llmtrain repeats itself bit for
# bit except with model.attention = "cudnn" (a random gradient norm) and when it resumes with
# stochastic rounding (the loss moves by 1e-5), as the H100 showed at 58d410c; its CPU val losses
# are 1e-6 from its CUDA ones. Checks:
#   1. every stage in one call: exit 0; $OUT holds summary.md, env.txt, logs.tar.gz (<= 8 files);
#      no llmtrain run stopped at its start ("llmtrain: error" in no log); the table finds
#      determinism SAME for native and cublas and DIFFERENT for cudnn, resume SAME
#      with round-to-nearest and DIFFERENT with stochastic rounding, tiny GPU vs CPU PASS, the
#      cudnn runs' checkpoint timed while the other runs were stopped before theirs, the plan;
#      no run directory is left behind;
#   2. a call whose budget is spent: the steps that cannot start are reported as skipped;
#   3. a step that hangs is cut at its time box and reported as timed out;
#   1b. the multirank stage (a stand-in mpirun) rows: PASS within 1e-5, FAIL for a layout the
#      stand-in moves by 1e-4, offload SAME as ZeRO-1, the resume PASS; no run stopped at its start.
# With `quick` (ctest gpu_run_sh_quick, ~30 s): run.sh quick at BOX_SCALE 20 (a fifth of each box)
# with a stand-in attention_bench that hangs at GPT-2 124M's shape:
#   Q1. exit 0; no llmtrain run stopped at its start; every step ran within its box (seconds <= box
#       + 2), the hung one killed at its box
#       and reported as timed out, the other steps going on after it; the table lists every step
#       (the checkpoint too, with time left); test_cuda_gpu's two parts ran with their gtest filters
#       (GPU-only first); attention rows with errors against cuDNN (at head size 128 native-99k's
#       too: the small backward tile, info); the ncu profile (a stand-in ncu: both kernels at both
#       shapes, the stall reasons under 0.1 left out); determinism, native vs cudnn at
#       step 1, resume, training, multirank (tp 2 within 1e-4) rows; <= 8 files in OUT; STATE removed;
#   Q2. a quick call whose budget (19 s) is below a step's 20 s minimum: the steps are
#       reported as skipped, the checkpoint as not run (optional), STATE removed.
#
# llm.c (issue 44): the bundle carries a stand-in llmc/train_gpt2cu (a script that checks its
# arguments and its input shard as llm.c's dataloader does — magic 20240520, version 1, the size
# the header's count gives, at least B*T+1 tokens — and prints train_gpt2.cu's lines) and the real
# llmc_shard; FP8 runs (training.fp8) run faster in the stand-in llmtrain (600K against 500K tok/s).
#   Q1 also: quick's fp8-124m and llmc-124m steps in place, within their boxes; rows for llm.c measured
#       in the call, FP8 over bf16 (1.20x), every path's ratio to llm.c (this call) and issue 44's
#       124M target; Q3. a bundle without llm.c: its step reported "not run" (info), the call passes.
#   1c. the llmc stage: 124M and 1.5B, FP8 tensorwise and rowwise, llm.c at d12 and d48.
#
# Usage: run_sh_test.sh <repo root> <python3> <work dir> <llmtrain> <make_tiny_dataset> <llmc_shard> [quick]
#   <llmtrain>, <make_tiny_dataset>, <llmc_shard>: this build's (tests/gpu/CMakeLists.txt passes their target files)
set -euo pipefail
SRC=$1 PY=$2 W=$3 LLMTRAIN=$4 MAKE_TINY_DATASET=$5 LLMC_SHARD=$6 MODE=${7:-all}
for x in "$LLMTRAIN" "$MAKE_TINY_DATASET" "$LLMC_SHARD"; do [ -x "$x" ] || { echo "run_sh_test: no executable $x"; exit 2; }; done
LLMTRAIN=$(realpath "$LLMTRAIN")  # the stand-in runs it from the repo root
rm -rf "$W" && mkdir -p "$W/bin" "$W/b/llmtrain-gpu/app" "$W/b/llmtrain-gpu/tests/cuda" "$W/b/llmtrain-gpu/tests/app" \
    "$W/b/llmtrain-gpu/tools/bench" "$W/b/llmtrain-gpu/lib" "$W/b/llmtrain-gpu/openmpi/bin" \
    "$W/b/llmtrain-gpu/tools/prep" "$W/b/llmtrain-gpu/llmc/src"
B=$W/b/llmtrain-gpu

cat >"$W/bin/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
case "$*" in
    -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)" ;;
    *nounits*) echo 81559 ;;
    *) echo "NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04" ;;
esac
EOF
# A stand-in ncu (Nsight Compute, run.sh quick's profile step): the layout of `ncu --metrics`
# output for the fused backward and the dQ sum, a stall reason under the step's 0.1 cut among them.
cat >"$W/bin/ncu" <<'EOF'
#!/usr/bin/env bash
[[ " $* " == *"/attention_bench native "* ]] || { echo "ncu stand-in: not attention_bench native: $*"; exit 2; }
echo "==PROF== Connected to process 1 (attention_bench)"
for k in "flash_backward_kernel<128, 128, 64>(__nv_bfloat16 *, float *)" "flash_dq_reduce_kernel<128, 128>(__nv_bfloat16 *)"; do
    echo "  void llmtrain::cuda::$k (24, 16, 1)x(256, 1, 1), Context 1, Stream 7, Device 0, CC 9.0"
    echo "    Section: Command line profiler metrics"
    echo "    ---------------------------------------------------------------------- ----------- ------------"
    echo "    Metric Name                                                            Metric Unit Metric Value"
    echo "    gpu__time_duration.sum                                                          us       397.57"
    echo "    smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio           inst         1.02"
    echo "    smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio              inst            0"
done
echo "==PROF== Disconnected from process 1"
EOF
# The stand-in llmtrain first runs the real one ($LLMTRAIN, by its absolute path in this build: it is
# linked against this machine's libraries as the bundle's copy would be against the lent machine's,
# and a second 9 MB copy in the bundle would only slow every unpacking) with --dry-run on the same
# --config and --set arguments, made small for the CPU by overrides that leave alone everything the
# data checks read: data.train/val (the real make_tiny_dataset's files, in the bundle at its real
# place), micro_batch_size, seq_len, vocab_size (GPT-2's 50,257 too: a dry run allocates B x T x V
# logits but touches none of them, ~250 MB resident), run.eval_interval, run.sample_interval. The
# Trainer opens the data with the real checks; a failure ends the stand-in with llmtrain's message
# and exit status, as the real run would end at its start. The stand-in mpirun runs one process for
# the ranks, so pp, tp and zero_group_size go to their 1-rank values and the dry run's micro-batch
# is micro_batch_size x dp (dp = -np / (pp x tp)): the loaders' "B*world" windows are the same.
# Open MPI's plugin and help paths point into the bundle, which has none: the dry run uses this
# machine's Open MPI, the one it is linked against.
{
    echo '#!/usr/bin/env bash'
    printf 'REAL=%q\n' "$LLMTRAIN"
    cat <<'EOF'
args=("$@")
declare -A set=()
print=0 cfg=/dev/null
while [ $# -gt 0 ]; do
    case $1 in
        --set) set[${2%%=*}]=${2#*=}; shift 2 ;;
        --config) cfg=$2; shift 2 ;;
        --print-config) print=1; shift ;;
        *) echo "stand-in llmtrain: unexpected $1"; exit 2 ;;
    esac
done
v() { local x=${set[$1]:-$2}; x=${x#\"}; echo "${x%\"}"; }
[ "$(v model.attention native)" = auto ] && { echo "model.attention: expected native, cublas or cudnn"; exit 2; }
if [ $print = 1 ]; then
    nl=$(awk '$1 == "n_layer" { print $3 }' "$cfg")  # the config's (GPT-2 1.5B: 48), for llm.c's -e d<n_layer>
    printf '%s\n' "n_layer = $nl" "n_head = 12" "n_embd = 768" "seq_len = 1024" "vocab_size = 50257" \
        "micro_batch_size = $(v training.micro_batch_size 32)" "grad_accum_steps = $(v training.grad_accum_steps 8)"
    exit 0
fi
real() { env -u OMPI_MCA_mca_base_component_path -u OPAL_PKGDATADIR "$REAL" "$@"; }
fp8=$(v training.fp8 off)  # kept in the dry run: the CPU backend computes FP8's numerics in fp32
small=(--set 'run.backend="cpu"' --set 'training.precision="fp32"' --set training.stochastic_rounding=false
       --set 'model.attention="native"' --set model.n_layer=1 --set model.n_head=1 --set model.n_kv_head=0
       --set model.n_embd=16 --set parallel.pp=1 --set parallel.tp=1 --set parallel.dp=0 --set parallel.zero_group_size=0)
dp=$((${STANDIN_NP:-1} / ($(v parallel.pp 1) * $(v parallel.tp 1))))
if [ "$dp" -gt 1 ]; then
    b=$(real "${args[@]}" "${small[@]}" --print-config 2>&1 | awk '$1 == "micro_batch_size" { print $3 }')
    [ -n "$b" ] && small+=(--set "training.micro_batch_size=$((b * dp))")
fi
out=$(real "${args[@]}" "${small[@]}" --dry-run 2>&1)
rc=$?
[ $rc = 0 ] || { echo "$out"; exit $rc; }
grep "^data: " <<<"$out" | sed 's/^/(stand-in llmtrain: dry run) /'
rd=$(v run.run_dir runs/x) max=$(v run.max_steps 10) ev=$(v run.eval_interval 0) att=$(v model.attention native)
sr=$(v training.stochastic_rounding false) cpu=0 fast=0
[ "$fp8" != off ] && fast=1
[ "$(v run.backend cuda)" = cpu ] && cpu=1
mkdir -p "$rd"
start=0
[ -f "$rd/losses.tsv" ] && start=$(awk -F'\t' '$2 == "train" { s = $1 } END { print s + 0 }' "$rd/losses.tsv")
[ -f "$rd/losses.tsv" ] || printf 'step\tkind\tloss\tlr\tgrad_norm\n' >"$rd/losses.tsv"
for ((s = start + 1; s <= max; s++)); do
    moved=0
    [ "$start" -gt 0 ] && [ "$sr" = true ] && moved=1
    printf -v loss '%.9g' "$((1000000 - s * 100 + moved))e-5"
    noise=0
    [ "$att" = cudnn ] && noise=$RANDOM
    [ "$(v parallel.zero_group_size 0)" = 2 ] && noise=1000  # sub-DP drifts 1e-4 from the 1-rank run
    printf -v norm '%.9g' "$((10000000 + s * 10000 + noise))e-7"
    printf '%d\ttrain\t%s\t0.0006\t%s\n' $s "$loss" "$norm" >>"$rd/losses.tsv"
    tok=$(( s == 1 ? 250000 : fast ? 600000 : 500000 ))
    echo "step $s/$max | loss $loss | lr 6.00e-04 | norm $norm | $tok tok/s | MFU 40.0% | 00:00:01 elapsed | ETA 00:00:01"
    if [ "$ev" -gt 0 ] && [ $((s % ev)) = 0 ]; then
        printf -v val '%.9g' "$((5000000 - s * 1000 + cpu))e-6"
        printf '%d\tval\t%s\t\t\n' $s "$val" >>"$rd/losses.tsv"
        echo "step $s/$max | val loss $val"
    fi
done
sleep 1  # the end-of-run checkpoint
mkdir -p "$rd/checkpoints/step_$max"
echo "checkpoint: saved $rd/checkpoints/step_$max (1.00 s)"
echo "peak device memory (MiB): rank 0 (stage 0) 14846.00"
EOF
} >"$B/app/llmtrain"
cat >"$B/openmpi/bin/mpirun" <<'EOF'
#!/usr/bin/env bash
# stand-in mpirun: one process stands for the ranks
while [ $# -gt 0 ]; do
    case $1 in
        --oversubscribe) shift ;;
        -np) export STANDIN_NP=$2; shift 2 ;;  # for the stand-in llmtrain's dry run (its dp)
        -x) shift 2 ;;
        *) exec "$@" ;;
    esac
done
EOF
cat >"$B/tests/cuda/test_cuda_gpu" <<'EOF'
#!/usr/bin/env bash
[ "${FAKE_HANG:-0}" = 1 ] && sleep 300
n=80  # the whole binary; 9 for a filter that selects (run.sh quick's GPU-only part), 71 for the rest
case ${1:-} in --gtest_filter=-*) n=71 ;; --gtest_filter=*) n=9 ;; esac
printf '%s\n' "[==========] $n tests from 9 test suites ran. (1000 ms total)" "[  PASSED  ] $n tests."
EOF
cp "$MAKE_TINY_DATASET" "$B/tests/app/make_tiny_dataset"  # the real one: real HDF5 files of the real sizes
cat >"$B/tools/bench/attention_bench" <<'EOF'
#!/usr/bin/env bash
[ "${FAKE_HANG:-0}" = attention-124m ] && [ "$2" = 32 ] && sleep 300
IFS=, read -ra paths <<<"$1"
for p in "${paths[@]}"; do
    if [ "$p" = cudnn ]; then
        echo "cudnn   B=$2 T=$3 C=$4 NH=$5: forward    0.165 ms ( 311.0 TFLOP/s), backward    0.610 ms ( 211.0 TFLOP/s); the reference"
    elif [ "$p" = native-99k ]; then  # the small tile: 0.26 of cuDNN's (the H200's figure at HS 128)
        echo "native-99k B=$2 T=$3 C=$4 NH=$5: forward    0.300 ms ( 171.0 TFLOP/s), backward    2.300 ms (  55.0 TFLOP/s); vs cudnn: out max abs 1.953e-03 = 0.0412 rms, dqkv max abs 2.441e-04 = 0.0190 rms"
    else
        printf '%-7s B=%s T=%s C=%s NH=%s: forward    0.300 ms ( 171.0 TFLOP/s), backward    1.200 ms ( 107.0 TFLOP/s); %s\n' \
            "$p" "$2" "$3" "$4" "$5" "vs cudnn: out max abs 1.953e-03 = 0.0412 rms, dqkv max abs 2.441e-04 = 0.0187 rms"
    fi
done
EOF
# A stand-in llm.c train_gpt2cu (steps_llmc.sh's arguments; the shard checked as llmc/dataloader.h
# does) printing train_gpt2.cu's lines: 262144 tokens in 504.12 ms (520K tok/s) after a slow step 1.
cat >"$B/llmc/train_gpt2cu" <<'EOF'
#!/usr/bin/env bash
declare -A o=()
while [ $# -gt 0 ]; do o[$1]=$2; shift 2; done
die() { echo "stand-in train_gpt2cu: $*"; exit 1; }
[[ ${o[-e]} =~ ^d(12|48)$ ]] || die "-e ${o[-e]}: expected d12 or d48"
[ "${o[-r]}" = 0 ] && [ "${o[-s]}" = 0 ] && [ "${o[-v]}" -gt 0 ] || die "expected -r 0 -s 0 -v > 0"
B=${o[-b]} T=${o[-t]} D=${o[-d]} X=${o[-x]}
[ "$D" = $((B * T * 8)) ] || die "-d $D: expected B*T*8"
for f in "${o[-i]}" "${o[-j]}"; do
    read -r magic version n < <(od -An -t d4 -N 12 "$f") || die "cannot read $f"
    [ "$magic $version" = "20240520 1" ] || { echo "Bad magic in the data file"; exit 1; }
    [ "$(stat -c %s "$f")" = $((1024 + 2 * n)) ] || { echo "Error: file size is not as expected"; exit 1; }
    [ "$n" -ge $((B * T + 1)) ] || die "assertion failed: shard_ntok >= B*T+1 ($n tokens in $f)"
done
echo "| micro batch size B    | $B |"
echo "| num_layers L          | ${o[-e]#d} |"
echo "batch_size B=$B * seq_len T=$T * num_processes=1 and total_batch_size=$D"
echo "=> setting grad_accum_steps=8"
echo "device memory usage: 15196 MiB / 81559 MiB"
echo "val loss 11.012345"
for ((s = 1; s <= X; s++)); do
    ms=504.12
    [ $s = 1 ] && ms=1280.00
    printf 'step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %s ms | %.1f%% bf16 MFU | %.0f tok/s\n' \
        $s "$X" 11.0 0 15.0 0 0.0003 "$ms" 42.0 520000
done
echo "val loss 10.512345"
echo "total average iteration time: 504.120000 ms"
EOF
printf "%s\n" "llm.c f1e2ace (stand-in), own attention (train_gpt2cu)" >"$B/llmc/BUILD.txt"
cp "$LLMC_SHARD" "$B/tools/prep/llmc_shard"  # the real one
cat >"$B/tools/bench/offload_bench" <<'EOF'
#!/usr/bin/env bash
echo "double-buffered vs serial: 1.60x (goal >= 1.5x); wall / max(d2h, host_adam, h2d) = 1.05 (goal <= 1.10)"
while [ $# -gt 0 ]; do [ "$1" = --trace ] && echo "{}" >"$2"; shift; done
EOF
cat >"$B/tools/bench/checkpoint_bench" <<'EOF'
#!/usr/bin/env bash
echo "  training blocked by the checkpoint: 1.210 s = 1.02x its copy (goal <= 1.2x), 1.05x the best copy; training went on"
echo "  writer: 10.00 s = 1900 MiB/s (files, fsync, SHA-256); dd of the same 19000 MiB with fsync: 9.00 s (mean of 2) = 2111 MiB/s; writer / dd = 0.90 (goal >= 0.8)"
EOF
cat >"$B/app/llmtrain-plan" <<'EOF'
#!/usr/bin/env bash
echo "times measured on the cuda backend (bf16), micro-batch 8 x 1024, median of 5: layer F 2.951 ms, B 6.010 ms, recompute 2.950 ms"
echo "best: pp 1 x dp 8, 1 micro-batches per step, ZeRO-1: predicted step 0.4500 s (1F1B simulated), 145636 tokens/s"
EOF
chmod +x "$W/bin/"* "$B"/app/* "$B"/tests/*/* "$B"/tools/bench/* "$B"/openmpi/bin/* "$B/llmc/train_gpt2cu"
tar -C "$W/b" -czf "$W/bundle.tar.gz" llmtrain-gpu

export TORCH=0 PATH=$W/bin:$PATH PYTHON=$PY STEPS=5 BROWN=$W/no-brown BUNDLE=$W/bundle.tar.gz STATE=$W/state
fail() { echo "FAILED: $*"; exit 1; }
# no_start_errors <logs.tar.gz>: no llmtrain run in the call's logs stopped at its start (the stand-in
# passes on the real dry run's "llmtrain: error: ..." line, e.g. a data file too small)
no_start_errors() {
    local e
    e=$(tar -xzOf "$1" | grep -a "^llmtrain: error" | sort | uniq -c) || true
    [ -z "$e" ] || fail "llmtrain runs stopped at their start (count, message):"$'\n'"$e"
}
row() { grep -F "| $1 |" "$2" || fail "no row '$1' in $2"; }

if [ "$MODE" = quick ]; then
    # Q1. quick, a fifth of each box, the attention step at 124M's shape hanging
    OUT=$W/outq BOX_SCALE=20 FAKE_HANG=attention-124m bash "$SRC/tools/gpu/run.sh" quick >"$W/quick.log" 2>&1 ||
        { cat "$W/quick.log"; fail "run.sh quick exited $?"; }
    S=$W/outq/summary.md
    cat "$S"
    [ "$(find "$W/outq" -type f | wc -l)" -le 8 ] || fail "more than 8 files in OUT"
    for f in summary.md env.txt logs.tar.gz; do [ -f "$W/outq/$f" ] || fail "no $f in OUT"; done
    [ ! -e "$W/state" ] || fail "quick left STATE ($W/state) behind"
    no_start_errors "$W/outq/logs.tar.gz"
    tar -xzOf "$W/outq/logs.tar.gz" logs/steps.tsv >"$W/steps.tsv" || fail "no steps.tsv in logs.tar.gz"
    cat "$W/steps.tsv"
    # every step within its box (whole seconds: the box plus the rounding of both ends and a start)
    awk -F'\t' '$3 != "skipped" && $3 != "not-run" && $4 > $5 + 2 { print "over its box: " $0; bad = 1 } END { exit bad }' \
        "$W/steps.tsv" || fail "a step ran past its box"
    [ "$(awk -F'\t' '$2 == "attention-124m" { print $3 }' "$W/steps.tsv")" = 124 ] || fail "the hung step was not killed at its box"
    expect=(test_cuda_gpu-gpu test_cuda_gpu-rest attention-124m attention-hs128 profile determinism-native determinism-cudnn
            paths-native-cudnn resume-nearest train-124m fp8-124m llmc-124m torch-124m multirank-ref zero1-np2 pp2-np2
            tp2-np2 llama-tiny checkpoint-1.5b)
    [ "$(cut -f2 "$W/steps.tsv" | tr '\n' ' ')" = "${expect[*]} " ] || fail "quick's steps, in order: ${expect[*]}"
    for st in "${expect[@]}"; do grep -q "^| quick/$st | [0-9]* | [0-9]* | " "$S" || fail "no steps-table row for $st"; done
    grep -q "^| quick/checkpoint-1.5b | [0-9]* | [0-9]* | ran to its end |" "$S" || fail "checkpoint did not run with time left"
    row "step quick/attention-124m" "$S" | grep -q "timed out" || fail "no timed-out row for the hung step"
    row "test_cuda_gpu (gpu)" "$S" | grep -q "9 passed, 0 failed .* PASS |" || fail "test_cuda_gpu's GPU-only part"
    row "test_cuda_gpu (rest)" "$S" | grep -q "71 passed, 0 failed .* PASS |" || fail "test_cuda_gpu's rest"
    row "attention native (B 8, T 2048, HS 128)" "$S" | grep -q "0.55x / 0.51x cuDNN | PASS |" || fail "attention at HS 128"
    row "attention native vs cudnn (B 8, T 2048, HS 128)" "$S" | grep -q "0.0187 rms .* PASS |" || fail "attention error"
    row "attention native-99k (B 8, T 2048, HS 128)" "$S" | grep -q "0.55x / 0.26x cuDNN | info |" ||
        fail "native-99k at HS 128 (the small backward tile, info)"
    row "attention native-99k vs cudnn (B 8, T 2048, HS 128)" "$S" | grep -q "0.0190 rms .* PASS |" ||
        fail "native-99k's error"
    ! grep -q "B 32, T 1024" "$S" || fail "the hung attention step left rows"
    tar -xzOf "$W/outq/logs.tar.gz" logs/profile.txt >"$W/profile.txt" || fail "no profile.txt in logs.tar.gz"
    if [ "$(grep -c "void llmtrain::cuda::flash_" "$W/profile.txt")" != 4 ] ||
        ! grep -q "gpu__time_duration.sum .* 397.57" "$W/profile.txt" || ! grep -q "lg_throttle" "$W/profile.txt" ||
        grep -q "sleeping\|==PROF==\|Metric Name" "$W/profile.txt"; then
        cat "$W/profile.txt"
        fail "the profile: both kernels at both shapes, durations and stalls >= 0.1 only"
    fi
    row "determinism native" "$S" | grep -q "| SAME (steps 1-3" || fail "determinism native"
    row "determinism cudnn" "$S" | grep -q "| DIFFERENT from step 1 " || fail "determinism cudnn"
    row "paths native vs cudnn at step 1" "$S" | grep -q "| PASS (steps 1-1: loss and grad norm within relative 0.01" ||
        fail "native vs cudnn at step 1"
    row "resume tiny bf16 nearest" "$S" | grep -q "| SAME (steps 11-20" || fail "resume nearest"
    row "GPT-2 124M native" "$S" | grep -qv "checkpoint" || fail "training native"
    row "GPT-2 124M cudnn" "$S" | grep -qv "checkpoint" || fail "quick's cudnn run wrote its checkpoint"
    # issue 44: llm.c measured in the call is every path's reference; FP8 over bf16; the 124M target
    row "GPT-2 124M llm.c (own attention)" "$S" | grep -q "| 520.0K (42.0% MFU, 15,196 MiB after allocation) | .* | info |" ||
        fail "llm.c's row"
    row "GPT-2 124M cudnn" "$S" | grep -q "| llm.c (this call) 520.0K | 0.96x llm.c | info |" || fail "cudnn vs llm.c"
    row "GPT-2 124M cudnn+fp8_tensorwise" "$S" | grep -q "600.0K .* 1.15x llm.c" || fail "the FP8 run"
    row "GPT-2 124M FP8 tensorwise over bf16 (cudnn)" "$S" | grep -q "| 600.0K vs 500.0K |  | 1.20x | info |" ||
        fail "FP8 over bf16"
    row "GPT-2 124M fastest path vs llm.c (this call)" "$S" | grep -q "| cudnn+fp8_tensorwise 600.0K | >= 1.00x llm.c 520.0K | 1.15x | PASS |" ||
        fail "issue 44's 124M target"
    for l in zero1 pp2; do
        row "multirank $l np2" "$S" | grep -q "| PASS (steps 1-10: loss and grad norm within relative 1e-05" || fail "multirank $l"
    done
    row "multirank tp2 np2" "$S" | grep -q "| PASS (steps 1-10: loss and grad norm within relative 0.0001" || fail "multirank tp2"
    row "llama-tiny fp32 GPU vs CPU" "$S" | grep -q "| PASS (steps 1-10: loss and grad norm within relative 0.0001" ||
        fail "llama-tiny fp32"
    row "llama-tiny bf16 native (GQA FlashAttention-2) vs CPU" "$S" | grep -q "| PASS (steps 1-3: " || fail "llama-tiny bf16"
    row "checkpoint_bench (1.5B)" "$S" | grep -q "PASS |" || fail "checkpoint"
    # Q2. the budget spent at once: the steps skipped, the checkpoint not run
    OUT=$W/outq2 BUDGET=19 bash "$SRC/tools/gpu/run.sh" quick >"$W/quick2.log" 2>&1 || fail "run.sh quick (budget) exited $?"
    for st in tp2-np2 attention-hs128; do
        row "step quick/$st" "$W/outq2/summary.md" | grep -q "skipped" || { cat "$W/quick2.log"; fail "$st not skipped"; }
    done
    row "step quick/checkpoint-1.5b" "$W/outq2/summary.md" | grep -q "not run: .* info |" || fail "checkpoint not 'not run'"
    [ ! -e "$W/state" ] || fail "quick (budget) left STATE behind"
    echo "run_sh_test: run.sh quick keeps its boxes, goes on past a hung step, lists every step and leaves nothing behind"
    exit 0
fi

# 1. every stage
OUT=$W/out bash "$SRC/tools/gpu/run.sh" tests checks bench124m bench1.5b checkpoint >"$W/all.log" 2>&1 ||
    { cat "$W/all.log"; fail "run.sh exited $?"; }
S=$W/out/summary.md
[ "$(find "$W/out" -type f | wc -l)" -le 8 ] || fail "more than 8 files in OUT"
for f in summary.md env.txt logs.tar.gz; do [ -f "$W/out/$f" ] || fail "no $f in OUT"; done
cat "$S"
no_start_errors "$W/out/logs.tar.gz"
row "test_cuda_gpu" "$S" | grep -q "80 passed, 0 failed .* PASS |" || fail "test_cuda_gpu row"
for p in native cublas; do row "determinism $p" "$S" | grep -q "| SAME (steps 1-4" || fail "determinism $p"; done
row "determinism cudnn" "$S" | grep -q "| DIFFERENT from step 1 " || fail "determinism cudnn not DIFFERENT"
row "resume tiny bf16 nearest" "$S" | grep -q "| SAME (steps 11-20" || fail "resume nearest"
row "resume tiny bf16 stochastic" "$S" | grep -q "| DIFFERENT from step 11 " || fail "resume stochastic"
row "tiny fp32 GPU vs CPU" "$S" | grep -q "| PASS (val at steps 125/250" || fail "tiny vs CPU"
row "GPT-2 124M cudnn" "$S" | grep -q "checkpoint 1.0 s" || fail "the cudnn run's checkpoint was not timed"
row "GPT-2 124M native" "$S" | grep -qv "checkpoint" || fail "the native run was not stopped before its checkpoint"
row "GPT-2 1.5B cublas" "$S" | grep -q "500.0K" || fail "1.5B cublas"
row "llmtrain-plan --profile (1.5B)" "$S" | grep -q "PASS |" || fail "plan"
row "offload_bench (cuda, bf16)" "$S" | grep -q "PASS |" || fail "offload"
row "checkpoint_bench (1.5B)" "$S" | grep -q "blocked 1.21 s = 1.02x the copy; writer 0.90 of dd .* PASS |" || fail "checkpoint"
! grep -q "| step " "$S" || fail "a step did not run to its end"
! grep -q "label=gpt2-1.5b-native" "$W/all.log" || fail "native attention ran at 1.5B"
left=$(find "$W/state/runs" "$W/state/llmtrain-gpu/gpu_bench" -mindepth 1 -maxdepth 1 -type d ! -name data | wc -l)
[ "$left" = 0 ] || fail "$left run directories left behind"

# 1b. the multirank stage in a call of its own (the stand-in mpirun runs one process): every layout
# PASSes against the 1-rank run except sub-DP (1e-4 off by the stand-in), offload is ZeRO-1's bitwise,
# the resume continues the 2-rank run; the earlier stages' rows stay in the table.
OUT=$W/out1b bash "$SRC/tools/gpu/run.sh" multirank >"$W/multirank.log" 2>&1 || { cat "$W/multirank.log"; fail "multirank exited $?"; }
S=$W/out1b/summary.md
no_start_errors "$W/out1b/logs.tar.gz"
for l in zero1-np2 zero3-np2 pp2-np2 zero2-np4 pp4-np4 offload-np2 pp2xdp2-np4; do
    row "multirank ${l%-np*} ${l##*-}" "$S" | grep -q "| PASS (steps 1-10: loss and grad norm within relative 1e-05" ||
        fail "multirank $l"
done
row "multirank subdp2x2 np4" "$S" | grep -q "| FAIL (" || fail "multirank subdp2x2 not FAIL"
row "multirank offload vs zero1 np2" "$S" | grep -q "| SAME (steps 1-10" || fail "multirank offload vs zero1"
row "multirank resume zero3 np2 to pp2xdp2 np4" "$S" | grep -q "| PASS (steps 1-10" || fail "multirank resume"
row "determinism native" "$S" >/dev/null
! grep -q "| step multirank" "$S" || fail "a multirank step did not run to its end"
[ -z "$(find "$W/state/runs" -mindepth 1 -maxdepth 1 -name 'mr-*')" ] || fail "multirank run directories left behind"

# 1c. the llmc stage (issue 44's table): 124M and 1.5B, bf16 cudnn, FP8 tensorwise and rowwise, llm.c at d12 and d48
OUT=$W/out1c STEPS=5 bash "$SRC/tools/gpu/run.sh" llmc >"$W/llmc.log" 2>&1 || { cat "$W/llmc.log"; fail "llmc exited $?"; }
S=$W/out1c/summary.md
no_start_errors "$W/out1c/logs.tar.gz"
for m in "124M" "1.5B"; do
    row "GPT-2 $m FP8 rowwise over bf16 (cudnn)" "$S" | grep -q "| 1.20x |" || fail "FP8 rowwise at $m"
    row "GPT-2 $m llm.c (own attention)" "$S" | grep -q "| info |" || fail "llm.c at $m"
done
row "GPT-2 1.5B FP8 tensorwise over bf16 (cudnn)" "$S" | grep -q "| >= 1.15x | 1.20x | PASS |" || fail "1.5B FP8 target"
row "GPT-2 1.5B FP8 vs llm.c (this call)" "$S" | grep -q "| >= 1.05x llm.c 520.0K | 1.15x | PASS |" || fail "1.5B vs llm.c"
tar -xzOf "$W/out1c/logs.tar.gz" logs/llmc-gpt2-1.5b.log | grep -q "^| num_layers L *| 48 |" ||
    fail "llm.c at 1.5B was not d48 (configs/gpt2-1.5b.toml's n_layer)"
! grep -q "| step llmc" "$S" || fail "an llmc step did not run to its end"
# Q3. a bundle without llm.c: its step says so (an info row) and passes
mv "$W/state/llmtrain-gpu/llmc" "$W/llmc-aside"
STATE=$W/state bash "$SRC/tools/gpu/run.sh" _step llmc gpt2-124m 5 30 >"$W/nollmc.log" 2>&1 || fail "llmc without llm.c exited $?"
mv "$W/llmc-aside" "$W/state/llmtrain-gpu/llmc"
mkdir -p "$W/nollmc" && cp "$W/state/logs/bench-gpt2-124m-llmc.txt" "$W/nollmc/"
"$PY" "$SRC/tools/gpu/gpu_report.py" summary "$W/nollmc" >"$W/nollmc.md"
row "GPT-2 124M llm.c" "$W/nollmc.md" | grep -q "| not run: no llm.c in the bundle .* | info |" || fail "no llm.c: not an info row"

# 2. a call whose budget is spent before its steps: each is reported as skipped
OUT=$W/out2 BUDGET=5 bash "$SRC/tools/gpu/run.sh" bench1.5b >"$W/budget.log" 2>&1 || fail "run.sh (budget) exited $?"
for s in gpt2-1.5b offload plan; do
    row "step bench1.5b/$s" "$W/out2/summary.md" | grep -q "skipped" || { cat "$W/budget.log"; fail "$s not skipped"; }
done
# 3. a hung step is cut at its time box (the budget's remainder, under 35 s, is the smaller)
OUT=$W/out3 BUDGET=35 FAKE_HANG=1 bash "$SRC/tools/gpu/run.sh" tests >"$W/hang.log" 2>&1 || fail "run.sh (hang) exited $?"
row "step tests/test_cuda_gpu" "$W/out3/summary.md" | grep -q "timed out" || { cat "$W/hang.log"; fail "no timed-out row"; }
echo "run_sh_test: run.sh's stages, table, budget and time boxes behave"
