#!/usr/bin/env python3
"""tests/cluster/nothing_half_committed.py CHECKPOINTS_DIR — after a fault, nothing half-written was
committed: `latest` names a checkpoint with its state.toml, and no step_N after it exists. Used by
cluster_faults.sh and cluster_slurm_faults.sh after each fault. Prints one line and exits 0, or
fails an assertion naming the directory."""
import os
import re
import sys

ck = sys.argv[1]
latest = open(os.path.join(ck, 'latest')).read().strip()
assert os.path.isfile(os.path.join(ck, latest, 'state.toml')), f'{ck}: latest names {latest}, which has no state.toml'
n = int(latest.split('_')[1])
later = [d for d in os.listdir(ck) if re.fullmatch(r'step_\d+', d) and int(d[5:]) > n]
assert not later, f'{ck}: {later} committed after latest {latest}'
print(f'{ck}: latest {latest} is complete; nothing later committed')
