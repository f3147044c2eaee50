#!/usr/bin/env bash
# tools/bench/host_adamw_vs_torch.sh — the host AdamW step (host_adamw_bench, fp32 grads and params)
# against torch.optim.AdamW on the CPU (host_adamw_torch.py, one fp32 tensor): same element count,
# same OMP_NUM_THREADS, the same work per parameter (read grad, w, m, v; write w, m, v, and the
# params copy on our side, which torch does not need). Builds nothing. Alternates ROUNDS times and
# prints each round's ratios, then the best G params/s of each over the rounds and their ratio (#9's goal:
# >= 5x; DeepSpeed's CPU-Adam claims 5-7x).
# PyTorch runs twice per round: as installed, and with glibc's malloc kept from mmap
# (MALLOC_MMAP_MAX_=0, MALLOC_TRIM_THRESHOLD_ huge). As installed, each step's temporaries (hundreds
# of MB) are fresh mmaps whose pages fault in again every step; the second run keeps them in the heap,
# the fair baseline for the arithmetic and memory traffic alone. host_adamw_bench allocates once.
# The machine may be shared: only numbers measured in one run of this script are comparable.
#
# Usage: tools/bench/host_adamw_vs_torch.sh [BUILD_DIR] [MILLIONS] [ROUNDS] [REPS]
#        (defaults: ./build, 64 million parameters, 2 rounds, 5 timed steps each; OMP_NUM_THREADS
#        defaults to all cores)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
millions=${2:-64}
rounds=${3:-2}
reps=${4:-5}
python=${LLMTRAIN_PYTHON:-/usr/bin/python3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
bench="$build/tools/bench/host_adamw_bench"
if [[ ! -x $bench ]]; then
  echo "host_adamw_vs_torch: $bench not found; build the target host_adamw_bench first" >&2
  exit 2
fi

# G params/s on the line starting with $2 (ours), or the best over the "torch AdamW" lines (torch)
rate() { sed -n "s/^$2.* \([0-9.e+-]*\) G params\/s.*/\1/p" <<<"$1" | sort -g | tail -1; }
max() { awk -v a="$1" -v b="${2:-0}" 'BEGIN { print (b > a) ? b : a }'; }
o=0 d=0 t=0
for ((r = 1; r <= rounds; r++)); do
  out=$("$bench" "$millions" "$reps"); echo "$out"
  ro=$(rate "$out" 'adamw fp32')
  out=$("$python" "$here/host_adamw_torch.py" --millions "$millions" --reps "$reps"); echo "$out (as installed)"
  rd=$(rate "$out" 'torch AdamW')
  out=$(MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1000000000000 \
        "$python" "$here/host_adamw_torch.py" --millions "$millions" --reps "$reps")
  echo "$out (MALLOC_MMAP_MAX_=0)"
  rt=$(rate "$out" 'torch AdamW')
  if [[ -z $ro || -z $rd || -z $rt ]]; then
    echo "host_adamw_vs_torch: a run printed no 'G params/s' figure (output above)" >&2
    exit 1
  fi
  awk -v r="$r" -v o="$ro" -v d="$rd" -v t="$rt" 'BEGIN {
    printf "round %d: ratio %.1fx to torch as installed, %.1fx to torch with MALLOC_MMAP_MAX_=0\n", r, o / d, o / t }'
  o=$(max "$o" "$ro") d=$(max "$d" "$rd") t=$(max "$t" "$rt")
done
awk -v o="$o" -v d="$d" -v t="$t" -v n="$rounds" -v m="$millions" -v k="$OMP_NUM_THREADS" 'BEGIN {
  printf "host_adamw_vs_torch, %g M fp32 parameters, %d threads, best of %d rounds (G params/s):\n", m, k, n
  printf "  %-48s %8.4g\n", "llmtrain host_adamw, fp32 grads/params", o
  printf "  %-48s %8.4g   ratio %.1fx\n", "torch AdamW (best variant), as installed", d, o / d
  printf "  %-48s %8.4g   ratio %.1fx\n", "torch AdamW (best variant), MALLOC_MMAP_MAX_=0", t, o / t }'
