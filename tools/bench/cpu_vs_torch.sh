#!/usr/bin/env bash
# tools/bench/cpu_vs_torch.sh — runs bench_cpu and torch_eager.py on the same model, batch and
# machine, alternating ROUNDS times, and prints tokens/s of each and their ratio (best of each).
# The machine may be shared: only numbers measured in one run of this script are comparable.
#
# Usage: tools/bench/cpu_vs_torch.sh [BUILD_DIR] [ROUNDS]   (BUILD_DIR defaults to ./build)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
rounds=${2:-2}
python=${LLMTRAIN_PYTHON:-/usr/bin/python3}
bench="$build/tools/bench/bench_cpu"
[[ -x $bench ]] || { echo "cpu_vs_torch: $bench not found; build the target bench_cpu first" >&2; exit 2; }

tok() { sed -n 's/^tokens\/s \([0-9.]*\).*/\1/p'; }
best_ours=0 best_torch=0
for ((r = 1; r <= rounds; r++)); do
  ours=$("$bench" | tee /dev/stderr | tok)
  theirs=$("$python" "$here/torch_eager.py" | tee /dev/stderr | tok)
  best_ours=$(awk -v a="$best_ours" -v b="$ours" 'BEGIN { print (b > a) ? b : a }')
  best_torch=$(awk -v a="$best_torch" -v b="$theirs" 'BEGIN { print (b > a) ? b : a }')
done
awk -v o="$best_ours" -v t="$best_torch" -v n="$rounds" 'BEGIN {
  printf "cpu_vs_torch: best of %d rounds: llmtrain cpu %.1f tokens/s, PyTorch eager %.1f tokens/s, ratio %.2fx\n", n, o, t, o / t }'
