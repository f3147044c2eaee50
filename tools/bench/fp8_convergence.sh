#!/usr/bin/env bash
# tools/bench/fp8_convergence.sh — training.fp8's convergence against the unquantized run, on the
# CPU backend (whose FP8 linear layers simulate the CUDA backend's numerics in fp32: docs/fp8.md):
# each config trains with fp8 "off", "tensorwise" and "rowwise" from the same seed on the same data,
# and the table gives each FP8 run's val losses beside the unquantized run's, the largest gap
# between the two train-loss curves (each smoothed over 50 logged steps, as single steps are
# noisy) and its tokens/s. Same seed, same batches: the gaps are what FP8's rounding does.
#
# Usage: [RECIPES="off tensorwise"] tools/bench/fp8_convergence.sh <llmtrain> <brown dir> [STEPS] [config...]
#   defaults: STEPS 1000, configs/tiny.toml configs/llama-tiny.toml, RECIPES "off tensorwise rowwise"
#   ("off" first: the gaps are measured against it)
# e.g.   tools/bench/fp8_convergence.sh build/app/llmtrain data/brown 1000
set -euo pipefail
BIN=$1 BROWN=$2 STEPS=${3:-1000}
shift $(( $# >= 3 ? 3 : $# ))
CONFIGS=("$@")
[[ ${#CONFIGS[@]} -gt 0 ]] || CONFIGS=(configs/tiny.toml configs/llama-tiny.toml)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# "<step> <loss>" of every logged step, smoothed: the mean of the last 50 logged losses.
smoothed() { grep -oE '^step [0-9]+/[0-9]+ \| loss [0-9.]+' "$1" | awk '{ split($2, s, "/"); l[NR] = $5; sum += $5;
    if (NR > 50) sum -= l[NR - 50]; print s[1], sum / (NR < 50 ? NR : 50) }'; }

echo "$STEPS steps each, cpu backend, $(getconf _NPROCESSORS_ONLN) cores:"
printf '%-18s %-10s %-30s %-14s %10s\n' config fp8 "val losses (every eval)" "max |d train|" "tokens/s"
for cfg in "${CONFIGS[@]}"; do
    name=$(basename "$cfg" .toml)
    for fp8 in ${RECIPES:-off tensorwise rowwise}; do
        rd=$WORK/$name-$fp8
        "$BIN" --config "$cfg" --set "run.run_dir=\"$rd\"" --set "run.max_steps=$STEPS" --set "training.fp8=\"$fp8\"" \
            --set "data.train=\"$BROWN/train.h5\"" --set "data.val=\"$BROWN/val.h5\"" --set run.log_interval=1 \
            --set run.sample_interval=0 --set checkpoint.interval=0 --set checkpoint.at_end=false \
            --set metrics.enabled=false --set 'checkpoint.resume="none"' >"$rd.log" 2>&1 ||
            { cat "$rd.log" >&2; exit 1; }
        smoothed "$rd.log" >"$rd.curve"
        vals=$(grep -oE 'val loss [0-9.]+' "$rd.log" | awk '{ printf "%s%s", (NR > 1 ? " " : ""), $3 }')
        gap=-
        [[ $fp8 == off ]] || gap=$(paste "$WORK/$name-off.curve" "$rd.curve" |
            awk '{ d = $2 - $4; if (d < 0) d = -d; if (d > m) m = d } END { printf "%.4f", m }')
        tps=$(grep -o '[0-9,]* tok/s' "$rd.log" | tail -n +2 | tr -d ', tok/s' | sort -n |
            awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
        printf '%-18s %-10s %-30s %-14s %10s\n' "$name" "$fp8" "$vals" "$gap" "$tps"
    done
done
