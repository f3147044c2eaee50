#!/usr/bin/env bash
# tests/app/slow_commit.sh — the big-run rehearsal of a checkpoint on slow storage (docs/checkpoints.md
# "Who does what at a commit"). tests/app/slow_io.c (LD_PRELOAD) adds FSYNC_MS to every fsync under
# the run dir, so that each checkpoint's writes and rank 0's commit take several times
# parallel.timeout_s = 2 s, as a big model's do on shared storage. 2 ranks, ZeRO-1, a checkpoint at
# every step:
#   1. synchronous and asynchronous checkpoints: the run finishes (exit 0); the ranks waiting on a
#      busy one said so ("waits past parallel.timeout_s ... busy: ..."); its commit took more than
#      3 x timeout_s; every checkpoint verifies and step_2's model.h5 is byte for byte that of the
#      same run on fast storage (the reference: timing must not change what is saved). 2 steps (3
#      before: ~9 s more of slowed fsyncs per run): step_1's commit is already waited on while busy;
#   2. rank 0 stopped (SIGSTOP: alive to the kernel, silent to its peers) in the middle of its
#      commit: rank 1 ends the job within timeout_s + 5 s of the stop, naming rank 0 — a busy
#      rank is waited for only while it answers;
#   3. rank 0 SIGKILLed in the middle of its commit: the job ends within timeout_s + 5 s, and the
#      last committed checkpoint still verifies;
#   4. resume with the ranks verifying their shares: one byte of step_2's model.h5 flipped, the
#      rank whose share holds it refuses step_2 and the job resumes from step_1 (the newest intact).
# Usage: slow_commit.sh <llmtrain> <mpiexec> <libslow_io.so> <tiny_data_dir> <work_dir>
set -euo pipefail
BIN=$1 MPI=$2 SLOW=$3 DATA=$4 WORK=$5
VOCAB=$(cat "$DATA/vocab_size.txt")
TIMEOUT=2 FSYNC_MS=1200
rm -rf "$WORK" && mkdir -p "$WORK"
common=(--set model.n_layer=2 --set model.n_head=2 --set model.n_embd=64 --set model.seq_len=32
        --set "model.vocab_size=$VOCAB" --set "data.train=\"$DATA/train.h5\"" --set "data.val=\"$DATA/val.h5\""
        --set metrics.enabled=false --set training.micro_batch_size=2 --set run.eval_interval=0
        --set run.sample_interval=0 --set parallel.zero_stage=1 --set checkpoint.interval=1
        --set checkpoint.keep_last=0 --set "parallel.timeout_s=$TIMEOUT")
fail() { echo "FAILED: $*"; exit 1; }
# job <name> <steps> [--set ...]: 2 ranks on slow storage under $WORK/<name>, output in <name>.log.
job() {
    local name=$1 steps=$2
    shift 2
    "$MPI" --oversubscribe -np 2 -x "LD_PRELOAD=$SLOW" -x "LLMTRAIN_SLOW_IO_DIR=$WORK/$name" \
        -x "LLMTRAIN_SLOW_IO_FSYNC_MS=$FSYNC_MS" -x OMP_NUM_THREADS=1 "$BIN" "${common[@]}" \
        --set "run.run_dir=\"$WORK/$name\"" --set "run.max_steps=$steps" "$@"
}
verify() {  # every step_N of run dir $1 verifies (llmtrain-export-free: through the checkpoint's own SHA-256s)
    python3 - "$1" <<'EOF'
import hashlib, os, sys, tomllib
ck = os.path.join(sys.argv[1], "checkpoints")
for d in sorted(x for x in os.listdir(ck) if x.startswith("step_")):
    st = tomllib.load(open(os.path.join(ck, d, "state.toml"), "rb"))
    for name, sha in st["files"].items():
        data = open(os.path.join(ck, d, name), "rb").read()
        assert len(data) == st["bytes"][name], (d, name, "size")
        if sha == "sliced":  # model.h5 by slices: they tile the file, each with its SHA-256
            at = 0
            for lo, hi, h in st["slices"][name]:
                assert lo == at and hashlib.sha256(data[lo:hi]).hexdigest() == h, (d, name, lo, hi)
                at = hi
            assert at == len(data), (d, name, "slices end")
        else:
            assert hashlib.sha256(data).hexdigest() == sha, (d, name)
    print("verified", d)
EOF
}

# The reference: the same run on fast storage.
"$MPI" --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$BIN" "${common[@]}" --set "run.run_dir=\"$WORK/fast\"" \
    --set run.max_steps=2 >"$WORK/fast.log" 2>&1 || { cat "$WORK/fast.log"; fail "the fast reference run"; }

# 1. The run finishes on slow storage, synchronous and asynchronous.
for mode in false true; do
    name=slow_async_$mode
    t0=$(date +%s.%N)
    job "$name" 2 --set "checkpoint.async=$mode" >"$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "$name did not finish"; }
    t1=$(date +%s.%N)
    grep -q "waits past parallel.timeout_s = $TIMEOUT" "$WORK/$name.log" || { cat "$WORK/$name.log"; fail "$name: no rank waited knowingly"; }
    commit=$(grep -o 'commit [0-9.]* s' "$WORK/$name/log.txt" | awk '{print $2}' | sort -g | tail -1)
    awk -v c="$commit" -v t="$TIMEOUT" 'BEGIN { exit !(c > 3 * t) }' || fail "$name: the longest commit took $commit s, not > 3 x $TIMEOUT s"
    verify "$WORK/$name" >/dev/null || fail "$name: a checkpoint does not verify"
    cmp "$WORK/fast/checkpoints/step_2/model.h5" "$WORK/$name/checkpoints/step_2/model.h5" || fail "$name: model.h5 differs"
    printf '%s: finished in %.1f s, longest commit %s s (timeout_s %s); waits past the timeout:\n' "$name" \
        "$(echo "$t1 - $t0" | bc)" "$commit" "$TIMEOUT"
    grep "waits past parallel.timeout_s" "$WORK/$name.log" | head -2
done

# rank0_pid <run dir>: the pid of world rank 0 of the job training into that run dir.
rank0_pid() {
    for p in $(pgrep -f "run.run_dir=\"$1\"" || true); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=0'; then
            grep -q llmtrain "/proc/$p/cmdline" && [[ $(readlink "/proc/$p/exe") == *llmtrain* ]] && { echo "$p"; return; }
        fi
    done
}
# interrupt <name> <signal>: rank 0 gets the signal while it commits step_2 (its state.toml is
# being fsynced); prints the seconds from the signal to the job's end.
interrupt() {
    local name=$1 sig=$2
    job "$name" 6 --set checkpoint.async=false >"$WORK/$name.log" 2>&1 &
    local job_pid=$!
    for _ in $(seq 600); do [[ -e $WORK/$name/checkpoints/.tmp_step_2/state.toml ]] && break; sleep 0.05; done
    [[ -e $WORK/$name/checkpoints/.tmp_step_2/state.toml ]] || fail "$name: rank 0 never reached step 2's commit"
    local p
    p=$(rank0_pid "$WORK/$name")
    [[ -n $p ]] || fail "$name: rank 0's pid not found"
    local t0
    t0=$(date +%s.%N)
    kill "-$sig" "$p"
    local code=0
    wait "$job_pid" || code=$?
    local t1
    t1=$(date +%s.%N)
    [[ $sig == STOP ]] && kill -KILL "$p" 2>/dev/null || true
    [[ $code != 0 ]] || fail "$name: the job exited 0"
    echo "$t1 - $t0" | bc
}

# 2. Rank 0 stopped while it commits: silence ends the wait.
took=$(interrupt stopped STOP)
awk -v s="$took" -v t="$TIMEOUT" 'BEGIN { exit !(s < t + 5) }' || { cat "$WORK/stopped.log"; fail "stopped: the job ended $took s after rank 0 stopped"; }
grep -q "no answer to a liveness ping within [0-9.]* s from rank 0" "$WORK/stopped.log" || { cat "$WORK/stopped.log"; fail "stopped: rank 0 not named"; }
echo "stopped: the job ended $took s after rank 0 stopped mid-commit (timeout_s $TIMEOUT)"

# 3. Rank 0 killed while it commits.
took=$(interrupt killed KILL)
awk -v s="$took" -v t="$TIMEOUT" 'BEGIN { exit !(s < t + 5) }' || { cat "$WORK/killed.log"; fail "killed: the job ended $took s after rank 0 was killed"; }
verify "$WORK/killed" >/dev/null || fail "killed: the committed checkpoints do not verify"
echo "killed: the job ended $took s after rank 0 was killed mid-commit; step_1 intact"
# 4. A damaged byte found by one rank's share of the resume verification.
run4=$WORK/slow_async_true
python3 - "$run4/checkpoints/step_2/model.h5" <<'EOF'
import os, sys
p = sys.argv[1]
with open(p, "r+b") as f:  # a byte in the middle of the tensors' data
    f.seek(os.path.getsize(p) // 2)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0x40]))
EOF
"$MPI" --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$BIN" "${common[@]}" --set "run.run_dir=\"$run4\"" \
    --set run.max_steps=3 >"$WORK/resume.log" 2>&1 || { cat "$WORK/resume.log"; fail "resume past a damaged step_2"; }
grep -q "step_2 failed the ranks' shared verification (model.h5: SHA-256 of bytes" "$WORK/resume.log" ||
    { cat "$WORK/resume.log"; fail "resume: the damaged slice was not reported"; }
grep -q "resume: from $run4/checkpoints/step_1 at step 1" "$WORK/resume.log" || { cat "$WORK/resume.log"; fail "resume: not from step_1"; }
echo "resume: step_2's damaged slice refused by the rank that checked it; resumed from step_1"
echo "slow_commit: PASS"
