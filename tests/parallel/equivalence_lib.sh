#!/usr/bin/env bash
# tests/parallel/equivalence_lib.sh — sourced by zero_equivalence.sh, pipeline_equivalence.sh,
# zero_reshard.sh and tp_equivalence.sh: run a small GPT-2 through the llmtrain binary under mpirun
# (CPU backend, 6 steps, checkpoint at the end) and compare two runs' train/val losses and final
# weights, bitwise or within a tolerance (see zero_equivalence.sh for the tolerances and the c_attn
# key-bias exception); `same`: two step_3 checkpoints' weights and AdamW moments bitwise.
# Needs: BIN (llmtrain), MPI (mpiexec), DATA (tiny dataset dir), WORK (work dir), VOCAB, PY (python3).
# LLAMA: the overrides that make the same runs a Llama (model.arch = "llama": 4 query heads of 8
# over 2 key/value heads, SwiGLU width 64, tied head), for each script's Llama cases.
LLAMA=(--set 'model.arch="llama"' --set model.n_embd=32 --set model.n_head=4 --set model.n_kv_head=2
       --set model.intermediate_size=64)

run() {  # run <np> <name> [--set overrides...]
    local np=$1 name=$2
    shift 2
    "$MPI" --oversubscribe -np "$np" "$BIN" --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=36 \
        --set model.seq_len=16 --set "model.vocab_size=$VOCAB" --set "data.train=\"$DATA/train.h5\"" \
        --set "data.val=\"$DATA/val.h5\"" --set "run.run_dir=\"$WORK/$name\"" --set metrics.enabled=false \
        --set training.micro_batch_size=2 --set run.log_interval=1 --set run.eval_interval=3 --set run.eval_steps=2 \
        --set run.sample_interval=3 --set run.sample_tokens=4 --set run.max_steps=6 --set checkpoint.interval=0 \
        --set training.grad_clip=0 --set optimizer.lr=0.01 --set lr_schedule.warmup_steps=2 --set lr_schedule.min_lr=0.001 \
        "$@" >"$WORK/$name.log" 2>&1 || { echo "FAILED: $name exited $?"; cat "$WORK/$name.log"; exit 1; }
}

# compare <reference> <run> <rel tolerance; 0 = bitwise> [<resumed at step>] [<weight abs tolerance,
# default 1e-6>] [<kinds, default "train val">]: train/val losses (the reference's after that step,
# for a run resumed there) and the final weights.
compare() {
    "$PY" - "$WORK/$1" "$WORK/$2" "$3" "${4:-0}" "${5:-1e-6}" "${6:-train val}" <<'PY'
import sys, h5py, numpy as np
ref, run, tol, since, wtol = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
kinds = sys.argv[6].split()
def losses(d):
    rows = [l.rstrip('\n').split('\t') for l in open(d + '/losses.tsv')][1:]
    return [(r[0], r[1], r[2]) for r in rows if int(r[0]) > since and r[1] in kinds]
a, b = losses(ref), losses(run)
assert len(a) == len(b) and len(a) > 0, f'{run}: {len(b)} loss lines, reference {len(a)}'
worst = 0.0
for (sa, ka, la), (sb, kb, lb) in zip(a, b):
    assert (sa, ka) == (sb, kb), f'{run}: line {sb} {kb} vs {sa} {ka}'
    if tol == 0:
        assert la == lb, f'{run}: step {sa} {ka} loss {lb} != {la} (bitwise expected)'
    else:
        worst = max(worst, abs(float(la) - float(lb)) / abs(float(la)))
fa = h5py.File(ref + '/checkpoints/step_6/model.h5', 'r'); fb = h5py.File(run + '/checkpoints/step_6/model.h5', 'r')
assert sorted(fa) == sorted(fb)
wmax = 0.0
for k in fa:
    x, y = fa[k][()], fb[k][()]
    if tol == 0:
        assert np.array_equal(x, y), f'{run}: tensor {k} differs (bitwise expected)'
    else:
        d = np.abs(x - y)
        if k.endswith('attn.c_attn.bias'):  # [q | k | v]: the key third is noise-driven (see above)
            C = x.shape[0] // 3
            assert d[C:2 * C].max() <= 2 * 0.01 * 6, f'{run}: {k} key bias moved {d[C:2*C].max()}'
            d[C:2 * C] = 0
        wmax = max(wmax, float(d.max()))
if tol > 0:
    assert worst <= tol and wmax <= wtol, f'{run}: loss rel diff {worst:.2e} (tol {tol}), weight abs diff {wmax:.2e} (tol {wtol:g})'
    print(f'{run}: losses within {worst:.2e} relative (tolerance {tol}), weights within {wmax:.2e} (tolerance {wtol:g})')
else:
    print(f'{run}: {len(a)} losses and {len(fa)} tensors bitwise equal to {ref}')
PY
}

same() {  # same <a> <b>: every tensor and every optimizer element bitwise equal
    "$PY" - "$WORK/$1/checkpoints/step_3" "$WORK/$2/checkpoints/step_3" <<'PY'
import sys, glob, h5py, numpy as np
a, b = sys.argv[1], sys.argv[2]
ma, mb = h5py.File(a + '/model.h5', 'r'), h5py.File(b + '/model.h5', 'r')
assert sorted(ma) == sorted(mb)
for k in ma:
    assert np.array_equal(ma[k][()], mb[k][()]), f'{b}: weights of {k} differ'
def moments(d):  # tensor -> (m, v) reassembled from every shard file by offset
    out = {}
    for f in sorted(glob.glob(d + '/optim_*.h5')):
        h = h5py.File(f, 'r')
        for k in h['m']:
            n = ma[k].size
            m, v = out.setdefault(k, (np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)))
            o = int(h['m'][k].attrs['offset']); p = h['m'][k][()]
            m[o:o + p.size] = p; v[o:o + p.size] = h['v'][k][()]
    return out
oa, ob = moments(a), moments(b)
assert sorted(oa) == sorted(ma) and sorted(ob) == sorted(ma), 'a tensor is missing from the optimizer shards'
for k in oa:
    for x, y, what in ((oa[k][0], ob[k][0], 'm'), (oa[k][1], ob[k][1], 'v')):
        assert not np.isnan(x).any() and not np.isnan(y).any(), f'{k}: {what} not fully covered'
        assert np.array_equal(x, y), f'{b}: {what} of {k} differs'
print(f'{b}: {len(ma)} tensors and their m, v equal to {a}')
PY
}
