#!/usr/bin/env bash
# tools/bench/pipeline_memory.sh — per-stage memory of one uniform recompute ratio against per-stage
# recompute counts with the same total, from `--dry-run --world-size N` (the real run's allocations
# counted: app/state/model_state.cpp). Under 1F1B stage s holds min(P - s, m) micro-batches, so recomputing
# on early stages saves m-fold where late stages save once: the same total recompute (the same extra
# compute) gives a lower peak when it is moved forward.
# Usage: pipeline_memory.sh <llmtrain> [config (default configs/gpt2-1.5b.toml)] [pp (8)] [world (64)]
#        [grad_accum_steps (16)] [uniform ratio (0.5)] [per-stage counts (default: a front-loaded list)]
set -euo pipefail
BIN=$1 CFG=${2:-configs/gpt2-1.5b.toml} PP=${3:-8} WORLD=${4:-64} M=${5:-16} RATIO=${6:-0.5}
COUNTS=${7:-}
common=(--config "$CFG" --dry-run --world-size "$WORLD" --set "parallel.pp=$PP" --set parallel.zero_stage=1
        --set "training.grad_accum_steps=$M")
uniform=$("$BIN" "${common[@]}" --set "activation_checkpoint.ratio=$RATIO")
if [ -z "$COUNTS" ]; then  # the same total as the uniform ratio, given to the stages holding the most
    COUNTS=$(printf '%s\n' "$uniform" | /usr/bin/python3 -c "
import sys
rows = [l.split() for l in sys.stdin if l.split()[:1] == ['1']]
layers = [int(r[2]) for r in rows]; total = sum(int(r[3]) for r in rows)
counts = []
for n in layers:
    c = min(n, total); counts.append(c); total -= c
print('[' + ', '.join(map(str, counts)) + ']')")
fi
front=$("$BIN" "${common[@]}" --set "activation_checkpoint.layers_per_stage=$COUNTS")
/usr/bin/python3 - "$PP" "$RATIO" "$COUNTS" <<PY
import sys
P, ratio, counts = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def rows(text):  # ZeRO-1 rows: stage -> (layers, recomputed, in flight, activations MiB, device total MiB)
    out = {}
    for l in text.splitlines():
        f = l.split()
        if f[:1] == ['1'] and '|' in f:
            out[int(f[1])] = (int(f[2]), int(f[3]), int(f[4]), float(f[8]), float(f[12]))
    return out
u, c = rows('''$uniform'''), rows('''$front''')
print(f'per-stage memory at ZeRO-1, MiB (activations / device total): uniform ratio {ratio} vs counts {counts}')
print('stage layers in_flight | recomputed  activations     total | recomputed  activations     total')
for s in range(P):
    print(f'{s:5d} {u[s][0]:6d} {u[s][2]:9d} | {u[s][1]:10d} {u[s][3]:12.1f} {u[s][4]:9.1f} | {c[s][1]:10d} {c[s][3]:12.1f} {c[s][4]:9.1f}')
tu, tc = sum(v[1] for v in u.values()), sum(v[1] for v in c.values())
mu, mc = max(v[4] for v in u.values()), max(v[4] for v in c.values())
print(f'recomputed layers in all: {tu} vs {tc}; largest stage total: {mu:.1f} vs {mc:.1f} MiB ({mc / mu:.2f}x)')
PY
