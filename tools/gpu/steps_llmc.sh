# shellcheck shell=bash
# tools/gpu/steps_llmc.sh — sourced by tools/gpu/run.sh: issue 44's steps, llmtrain with FP8 beside its
# bf16 run and llm.c measured in the same call (docs/gpu_acceptance.md "FP8 and llm.c"). Uses
# run.sh's DIR, DATA, LOGS, RUNS, LLMTRAIN and report().
#
# llm.c (karpathy/llm.c, never committed here) comes in the bundle when tools/gpu/bundle.sh was given
# LLMC_SRC: $DIR/llmc/src (its source), $DIR/llmc/train_gpt2cu (built there for sm_90, when nvcc
# could) and $DIR/llmc/BUILD.txt; $DIR/tools/prep/llmc_shard writes its input. Without llm.c in the
# bundle its steps write the "not run: no llm.c in the bundle" line (an info row, not a failure).

# step_bench_fp8 <model> <paths> <steps> <s per run> <mode> [llmtrain args]: llmtrain's training runs
# with training.fp8 = mode (gpu_bench.sh's FP8: labels <model>-<path>+fp8_<mode>), stopped after their
# last step, into bench-<model>-fp8-<mode>.txt; the bf16 runs of the same paths are the train-<model>
# / gpt2-<model> steps' (gpu_report.py: FP8 over bf16).
step_bench_fp8() {
    MODELS=$1 ATTENTIONS=$2 FP8=$5 TORCH=0 ATTENTION_BENCH=0 CHECKPOINT=none BUILD=$DIR LOGDIR=$LOGS/bench-$1 \
        RUN_TIMEOUT=$4 bash tools/bench/gpu_bench.sh "$3" "${@:6}" | tee "$LOGS/bench-$1-fp8-$5.txt"
}

# llmc_make <llm.c source dir> <sm, e.g. 90> <nvcc> [cudnn-frontend include dir]: builds train_gpt2cu there:
#   make train_gpt2cu GPU_COMPUTE_CAPABILITY=<sm> NO_MULTI_GPU=1 NO_USE_MPI=1 USE_CUDNN=0 NVCC_LDFLAGS="-lcublas -lcublasLt"
# (no NCCL, MPI or cuDNN; the Makefile's -lnvidia-ml dropped: without nvml.h llm.c calls no NVML).
# With a cudnn-frontend include dir (copied to <src>/cudnn-frontend/include, where the Makefile
# looks): USE_CUDNN=1 (llm.c's cuDNN attention, llmc/cudnn_att.cpp), -lcudnn, and
# NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING, so the frontend's NVRTC and driver calls (its sm_100
# engines, which an H100 never runs) are looked up at run time, not linked; that mode reads its
# cuDNN symbols through cudnn_frontend::cudnn_dlhandle, which a two-line object built here defines
# as null (dlsym's RTLD_DEFAULT: the linked libcudnn's own symbols). With nvcc 13+, first one
# line of llmc/cuda_utils.cuh: CUDA 13 dropped cudaMemAdvise's int-device form, so its
# out-of-memory fallback's "prefer the host" advice names cudaMemLocation{Host, 0} (the same
# advice; the fallback only runs when cudaMalloc fails). Prints the make line; on failure make's end.
# Used by tools/gpu/bundle.sh (sm 90) and llmc_exe on the device.
llmc_make() {
    local src=$1 sm=$2 nvcc=$3 fe=${4:-}
    if "$nvcc" --version | grep -q "release \(1[3-9]\|[2-9][0-9]\)\."; then
        sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
            "$src/llmc/cuda_utils.cuh"
        echo "patched llmc/cuda_utils.cuh for CUDA 13: cudaMemAdvise(..., cudaMemLocation{cudaMemLocationTypeHost, 0})"
    fi
    local line=(make train_gpt2cu "GPU_COMPUTE_CAPABILITY=$sm" NO_MULTI_GPU=1 NO_USE_MPI=1 USE_CUDNN=0
                "NVCC_LDFLAGS=-lcublas -lcublasLt")
    if [ -n "$fe" ]; then
        mkdir -p "$src/cudnn-frontend" "$src/build" && cp -r "$fe" "$src/cudnn-frontend/include"
        printf '%s\n' "// llmtrain's build: cudnn-frontend's dynamic loading finds cuDNN in the global scope" \
            "namespace cudnn_frontend { void* cudnn_dlhandle = nullptr; }" >"$src/build/fe_dlhandle.cpp"
        "$nvcc" -c "$src/build/fe_dlhandle.cpp" -o "$src/build/fe_dlhandle.o" || return 1
        line=(make train_gpt2cu "GPU_COMPUTE_CAPABILITY=$sm" NO_MULTI_GPU=1 NO_USE_MPI=1 USE_CUDNN=1
              "PFLAGS=-DENABLE_BF16 -DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING"
              "NVCC_LDFLAGS=-lcublas -lcublasLt -lcudnn build/fe_dlhandle.o")
    fi
    echo "make: $(printf '%q ' "${line[@]}")"
    (cd "$src" && PATH=$(dirname "$nvcc"):$PATH "${line[@]}" >make.log 2>&1) || { tail -20 "$src/make.log"; return 1; }
}

# llmc_exe [limit s]: the path of llm.c's train_gpt2cu, built on this machine from the bundle's
# source (llmc_make for this device's compute capability) when the bundle has none and nvcc is
# here; nothing printed when there is no llm.c (llmc-build.log says why).
llmc_exe() {
    local d=$DIR/llmc nvcc cc
    [ -x "$d/train_gpt2cu" ] && { echo "$d/train_gpt2cu"; return 0; }
    [ -d "$d/src" ] || return 1
    nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null) || return 1
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')
    [[ $cc =~ ^[0-9]+$ ]] || cc=90
    echo "llm.c: building train_gpt2cu here (sm_$cc, $nvcc)" >&2
    timeout -k 5 "${1:-300}" bash -c "source tools/gpu/steps_llmc.sh && llmc_make $(printf '%q ' "$d/src" "$cc" "$nvcc")" \
        >"$LOGS/llmc-build.log" 2>&1 && cp "$d/src/train_gpt2cu" "$d/train_gpt2cu" && echo "$d/train_gpt2cu"
}

# step_llmc <model> <steps> <limit s>: llm.c's train_gpt2cu at the model's shape as our runs take it
# (configs/<model>.toml's n_layer -> -e d<n_layer>, random init; micro_batch_size -> -b, seq_len -> -t;
# 8 micro-batches a step, gpu_bench.sh's; -x steps), no recompute (-r 0, as the documented H100
# figures), on the same tokens as our runs: $DATA/train.h5 written as an llm.c shard (llmc_shard;
# val reads the same shard, 1 batch at the start and the end, outside the timed steps; -s 0: no
# sampling). Into bench-<model>-llmc.txt: gpu_report.py llmc-line's bench line (label <model>-llmc):
# tokens/s from each step's milliseconds, steps 4+ averaged as ours, peak = llm.c's device memory
# in use after its allocations. llm.c's cuDNN build (train_gpt2cu_cudnn, its fastest) where the
# bundle has it, else its own attention.
step_llmc() {
    local model=$1 steps=$2 limit=$3 out=$LOGS/bench-$1-llmc.txt log=$LOGS/llmc-$1.log t0=$SECONDS exe cfg
    local build="own attention"
    if [ ! -d "$DIR/llmc" ]; then
        echo "bench: label=$model-llmc error=\"not run: no llm.c in the bundle (tools/gpu/bundle.sh LLMC_SRC)\"" | tee "$out"
        return 0
    fi
    if [ -x "$DIR/llmc/train_gpt2cu_cudnn" ]; then
        exe=$DIR/llmc/train_gpt2cu_cudnn build=cudnn
    else
        exe=$(llmc_exe $((limit - 30)))
    fi || {
        echo "bench: label=$model-llmc error=\"llm.c has no train_gpt2cu and did not build here (llmc-build.log)\"" | tee "$out"
        return 1
    }
    cfg=$("$LLMTRAIN" --config "configs/$model.toml" --print-config) || { echo "cannot resolve configs/$model.toml"; return 1; }
    key() { awk -v k="$1" '$1 == k && $2 == "=" { print $3; exit }' <<<"$cfg"; }
    local b t l
    b=$(key micro_batch_size) t=$(key seq_len) l=$(key n_layer)
    "$DIR/tools/prep/llmc_shard" "$DATA/train.h5" "$DATA/llmc-$model.bin" $((b * t + 1)) || return 1
    mkdir -p "$RUNS/llmc"  # its working directory: no tokenizer, no HellaSwag, no output dir (-o) there
    local left=$((limit - (SECONDS - t0)))
    [ "$left" -gt 0 ] || left=1
    (cd "$RUNS/llmc" && timeout -k 5 "$left" "$exe" -e "d$l" -b "$b" -t "$t" -d $((b * t * 8)) \
        -x "$steps" -r 0 -i "$DATA/llmc-$model.bin" -j "$DATA/llmc-$model.bin" -v 1000000 -m 1 -s 0 -h 0) >"$log" 2>&1
    local rc=$?
    tail -3 "$log"
    report llmc-line "$model-llmc" "$log" --build "$build" | tee "$out"
    rm -rf "$RUNS/llmc" "$DATA/llmc-$model.bin"
    return $rc
}
