#!/usr/bin/env bash
# tools/bench/multinode.sh — step time across 2 simulated nodes x 2 ranks with the inter-node link
# rate-limited (tools/cluster/cluster.sh, tbf), inside a node free (shared memory): plain DP, ZeRO-1,
# flat ZeRO-3 over all 4 ranks, ZeRO-3 in node-local groups (zero_group_size 2), and DP with the
# node-aware all-reduce (parallel.hierarchical_allreduce), all measured in one run (docs/multinode.md "Slow links, measured"). Needs root.
#
# For each link rate (unlimited, then RATES, default "1gbit 200mbit") and each layout: the median step
# time over STEPS steps (after 2 warm-up steps) of configs/tiny.toml at micro-batch 1 (4 x 256 = 1,024
# tokens a step); the bytes that crossed nodes per step, from the kernel's counters of each node's
# link (veth rx/tx on the bridge side; TCP/IP headers included); the dry run's model of them
# (llmtrain --dry-run --ranks-per-node 2: ring collectives); the step predicted with no overlap,
#   serial = compute + max over nodes of (bytes the node sent per step) / rate,
# and the bound with full overlap, max(compute, bytes / rate), compute being the same layout's step on
# the unlimited link. measured / serial tests the model (goal: within 25%), measured / bound how well
# the transfer hides behind the backward (goal: within 1.2x); node-local ZeRO-3 over flat ZeRO-3
# tests sub-DP's point (goal >= 1.5x at 200 Mbit/s). dp_serial and zero1_serial turn
# parallel.overlap_grad_reduce off; dp_hier turns parallel.hierarchical_allreduce on.
#
# Usage: [RATES="1gbit 200mbit"] [STEPS=8] tools/bench/multinode.sh <llmtrain> [config.toml]
set -euo pipefail
BIN=$(realpath "$1") CONFIG=$(realpath "${2:-configs/tiny.toml}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CLUSTER="$ROOT/tools/cluster/cluster.sh"
STEPS=${STEPS:-8}
RATES=${RATES:-1gbit 200mbit}
NAME=bench
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WORK=$(mktemp -d)
bash "$CLUSTER" down $NAME
trap 'bash "$CLUSTER" down $NAME; rm -rf "$WORK"' EXIT
bash "$CLUSTER" up $NAME 2 >/dev/null
declare -A LAYOUT=([dp]="parallel.zero_stage=0" [zero1]="parallel.zero_stage=1" [zero3]="parallel.zero_stage=3"
    [zero3_local]="parallel.zero_stage=3 parallel.zero_group_size=2"
    [dp_hier]="parallel.zero_stage=0 parallel.hierarchical_allreduce=true"
    [dp_serial]="parallel.zero_stage=0 parallel.overlap_grad_reduce=false"
    [zero1_serial]="parallel.zero_stage=1 parallel.overlap_grad_reduce=false")
ORDER=(dp_serial dp dp_hier zero1_serial zero1 zero3 zero3_local)
COMMON=(--set training.micro_batch_size=1 --set training.grad_accum_steps=1 --set run.log_interval=1
    --set run.eval_interval=0 --set run.sample_interval=0 --set checkpoint.interval=0 --set metrics.enabled=false
    --set 'checkpoint.resume="none"' --set run.max_steps=$((STEPS + 2)))
sets() { for kv in ${LAYOUT[$1]}; do printf -- '--set\n%s\n' "$kv"; done; }
node_bytes() {  # bytes node I has sent so far (the bridge side of its veth receives them)
    cat "/sys/class/net/lc-$NAME-$1/statistics/rx_bytes"
}

declare -A STEP SENT MODEL
for rate in none $RATES; do
    bash "$CLUSTER" rate $NAME "$rate"
    for l in "${ORDER[@]}"; do
        mapfile -t s < <(sets "$l")
        b0=$(node_bytes 0) b1=$(node_bytes 1)
        bash "$CLUSTER" mpirun $NAME -x OMP_NUM_THREADS=1 -np 4 "$BIN" --config "$CONFIG" "${COMMON[@]}" "${s[@]}" \
            --set "run.run_dir=\"$WORK/$l-$rate\"" >"$WORK/$l-$rate.log" 2>&1 || { cat "$WORK/$l-$rate.log" >&2; exit 1; }
        d0=$(($(node_bytes 0) - b0)) d1=$(($(node_bytes 1) - b1))
        # Median step seconds from the per-step tokens/s, skipping the 2 warm-up steps.
        STEP[$l,$rate]=$(grep -o '[0-9,]* tok/s' "$WORK/$l-$rate.log" | tail -n +3 | tr -d ', tok/s' |
            awk '{ print 1024 / $1 }' | sort -g | awk '{ t[NR] = $1 } END { print t[int((NR + 1) / 2)] }')
        # Per step: the whole run's bytes (start-up included) over its steps; the busier node's.
        SENT[$l,$rate]=$(awk -v a=$d0 -v b=$d1 -v n=$((STEPS + 2)) 'BEGIN { print (a > b ? a : b) / n, (a + b) / n }')
        if [[ $rate == none ]]; then
            MODEL[$l]=$("$BIN" --config "$CONFIG" "${COMMON[@]}" "${s[@]}" --dry-run --world-size 4 --ranks-per-node 2 |
                sed -n 's/.*MiB per step, \([0-9.]*\) MiB of it across nodes.*/\1/p')
        fi
    done
done

printf '%-12s %-8s %8s %12s %10s %10s %10s %10s %10s\n' layout link "step s" "crossed MiB" "model MiB" \
    "serial s" "bound s" "meas/ser" "meas/bnd"
for rate in none $RATES; do
    bits=$(python3 -c "import re,sys; m=re.fullmatch(r'(\d+(?:\.\d+)?)([kmg]?)bit', sys.argv[1]); print(0 if not m else float(m[1])*{'':1,'k':1e3,'m':1e6,'g':1e9}[m[2]])" "$rate")
    for l in "${ORDER[@]}"; do
        read -r busiest total <<<"${SENT[$l,$rate]}"
        awk -v l=$l -v r=$rate -v t="${STEP[$l,$rate]}" -v c="${STEP[$l,none]}" -v b="$busiest" -v tot="$total" \
            -v m="${MODEL[$l]:-0}" -v bits="$bits" 'BEGIN {
                x = bits > 0 ? 8 * b / bits : 0; p = c + x; q = c > x ? c : x
                printf "%-12s %-8s %8.3f %12.1f %10.1f %10.3f %10.3f %10.2f %10.2f\n", l, r, t, tot / 1048576, m, p, q, t / p, t / q }'
    done
done
for rate in $RATES; do
    awk -v r=$rate -v a="${STEP[zero3,$rate]}" -v b="${STEP[zero3_local,$rate]}" -v d="${STEP[dp,$rate]}" 'BEGIN {
        printf "at %s: node-local ZeRO-3 is %.2fx faster than flat ZeRO-3; DP takes %.2fx node-local ZeRO-3'"'"'s step\n", r, a / b, d / b }'
    awk -v r=$rate -v d="${STEP[dp,$rate]}" -v h="${STEP[dp_hier,$rate]}" -v s="${STEP[dp_serial,$rate]}" \
        -v z="${STEP[zero1,$rate]}" -v zs="${STEP[zero1_serial,$rate]}" 'BEGIN {
        printf "at %s: the node-aware all-reduce makes DP %.2fx faster; reducing during the backward makes DP %.2fx, ZeRO-1 %.2fx faster\n", r, d / h, s / d, zs / z }'
done
