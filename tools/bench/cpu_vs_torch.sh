#!/usr/bin/env bash
# tools/bench/cpu_vs_torch.sh — runs bench_cpu and torch_eager.py on the same model, batch and
# machine, alternating ROUNDS times, and prints tokens/s of each (best of the rounds) and the ratios.
# PyTorch runs twice per round: as installed, and with OPENBLAS_CORETYPE set to the kernels that
# bench_cpu selected (Debian's OpenBLAS falls back to generic kernels on CPUs it does not know;
# torch uses the same library), so the second is the fair kernel-for-kernel baseline.
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

tok() { sed -n 's/^tokens\/s \([0-9.]*\).*/\1/p' <<<"$1"; }
cpu() { sed -n 's/.*tokens per cpu-second \([0-9.]*\).*/\1/p' <<<"$1"; }
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (b > a) ? b : a }'; }
# best tokens/s and best tokens per CPU-second of: ours, torch as installed, torch with our kernels
o=0 oc=0 d=0 dc=0 t=0 tc=0
for ((r = 1; r <= rounds; r++)); do
  out=$("$bench"); echo "$out"
  o=$(max "$o" "$(tok "$out")"); oc=$(max "$oc" "$(cpu "$out")")
  core=$(sed -n 's/.*OpenBLAS core \([A-Za-z0-9]*\).*/\1/p' <<<"$out")
  out=$("$python" "$here/torch_eager.py"); echo "$out (OpenBLAS as installed)"
  d=$(max "$d" "$(tok "$out")"); dc=$(max "$dc" "$(cpu "$out")")
  out=$(OPENBLAS_CORETYPE=$core "$python" "$here/torch_eager.py"); echo "$out (OPENBLAS_CORETYPE=$core)"
  t=$(max "$t" "$(tok "$out")"); tc=$(max "$tc" "$(cpu "$out")")
done
awk -v o="$o" -v oc="$oc" -v d="$d" -v dc="$dc" -v t="$t" -v tc="$tc" -v n="$rounds" -v c="$core" 'BEGIN {
  printf "cpu_vs_torch, best of %d rounds (tokens/s | tokens per cpu-second):\n", n
  printf "  llmtrain cpu                           %8.1f | %8.1f\n", o, oc
  printf "  PyTorch eager, OpenBLAS as installed   %8.1f | %8.1f   ratio %.2fx | %.2fx\n", d, dc, o / d, oc / dc
  printf "  PyTorch eager, OPENBLAS_CORETYPE=%-8s %6.1f | %8.1f   ratio %.2fx | %.2fx\n", c, t, tc, o / t, oc / tc }'
