#!/usr/bin/env python3
"""tests/cluster/same_after.py REF RUN SINCE M WHAT — a run that resumed after step SINCE against a
reference run dir: the train losses of steps SINCE+1..M (the last line of each step: a resumed run
logs its steps again) equal to the letter, and every tensor of step_M's model.h5 bitwise equal.
Used by cluster_faults.sh (a cut run resumed against the unbroken one) and cluster_slurm_faults.sh
(a job carried on by Slurm against 2 ranks resumed from the same checkpoint). Prints one line naming
WHAT (what the reference is) and exits 0, or fails an assertion naming the step or tensor."""
import sys

import h5py
import numpy as np

ref, run, since, M, what = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]


def losses(d):
    """Step -> train loss text of losses.tsv's steps after `since`, the last line of each."""
    out = {}
    for line in list(open(d + '/losses.tsv'))[1:]:
        r = line.rstrip('\n').split('\t')
        if r[1] == 'train' and int(r[0]) > since:
            out[int(r[0])] = r[2]
    return out


a, b = losses(ref), losses(run)
assert sorted(a) == sorted(b) == list(range(since + 1, M + 1)), f'{run}: steps {sorted(b)[:3]}..., reference {sorted(a)[:3]}...'
bad = [s for s in a if a[s] != b[s]]
assert not bad, f'{run}: step {bad[0]} loss {b[bad[0]]} != {a[bad[0]]}'
fa, fb = h5py.File(f'{ref}/checkpoints/step_{M}/model.h5', 'r'), h5py.File(f'{run}/checkpoints/step_{M}/model.h5', 'r')
assert sorted(fa) == sorted(fb)
for k in fa:
    assert np.array_equal(fa[k][()], fb[k][()]), f'{run}: tensor {k} differs'
print(f'{run}: resumed after step {since}, {len(a)} losses and {len(fa)} tensors bitwise equal to {what}')
