"""The oracle search's read-ahead on the real target, side by side in one run: the search of
mfd_theory.path_trees.best_first as committed at 8733315 (each forward reads the best 32 children
waiting in the heap, one per expanded parent) against the working tree's (the search continued over
held rows, READ_AHEAD_CHARGE 0 and 0.5), at six roots of the greedy HumanEval answers in
results/measure/answers/he8-*; the same trees, forwards, rows and seconds.

    python records/c3-2026-12-06/oracle_read_ahead.py [threads]
"""
import glob
import importlib.util
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402

import mfd_theory.llm.measure.ceiling as ceiling  # noqa: E402
import mfd_theory.path_trees as path_trees  # noqa: E402
from mfd_theory.llm.models.target import TargetModel, load_local_target  # noqa: E402
from mfd_theory.llm.training.distill import load_distill_data  # noqa: E402
from mfd_theory.numerics import numerics_provenance  # noqa: E402

BEFORE = "8733315"
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
src = subprocess.run(["git", "show", f"{BEFORE}:mfd_theory/path_trees.py"], capture_output=True, text=True, check=True).stdout
with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
    f.write(src)
spec = importlib.util.spec_from_file_location("path_trees_before", f.name)
before = importlib.util.module_from_spec(spec)
spec.loader.exec_module(before)


def charged(c):
    def bf(*a, **k):
        path_trees.READ_AHEAD_CHARGE = c
        return path_trees.best_first(*a, **k)
    return bf


VARIANTS = [(f"{BEFORE}", before.best_first), ("charge 0", charged(0.0)), ("charge 0.5", charged(0.5))]
head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = subprocess.run(["git", "status", "--porcelain", "mfd_theory"], capture_output=True, text=True).stdout.strip()
num = numerics_provenance()
print(f"git {head}{'+dirty' if dirty else ''}; cpu {num.get('cpu')} ({num.get('isa_level')}; {' '.join(num.get('isa_flags') or [])}); "
      f"torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
hf, _ = load_local_target("qwen2.5-coder-0.5b-instruct", "cpu", "auto")
seqs, plens, _ = load_distill_data(sorted(glob.glob("results/measure/answers/he8-*"))[0])
target = TargetModel(hf)
L, N = 16, 64
tot = {n: [0, 0, 0.0] for n, _ in VARIANTS}
for i, off in ((0, 5), (0, 40), (1, 20), (2, 60), (3, 10), (4, 30)):
    seq, p = np.asarray(seqs[i]), int(plens[i])
    ctx = seq[: p + off]
    got = {}
    for name, bf in (VARIANTS if off % 2 else VARIANTS[::-1]):  # alternate the order
        ceiling.best_first = bf
        sc = ceiling.TargetScorer(target, ctx, L, 1.0)
        f0, r0 = sc.forwards, sc.tokens
        t = time.perf_counter()
        tree = ceiling.oracle_tree_of(sc, N)
        dt = time.perf_counter() - t
        got[name] = tree.paths()
        tot[name][0] += sc.forwards - f0
        tot[name][1] += sc.tokens - r0
        tot[name][2] += dt
        print(f"answer {i} root +{off}: {name}: {sc.forwards - f0} forwards, {sc.tokens - r0} rows, {dt:.1f} s, "
              f"mass {np.exp(tree.log_score).sum():.2f}", flush=True)
    assert all(g == got[VARIANTS[0][0]] for g in got.values()), "the variants' trees differ"
for n, (f, r, s) in tot.items():
    print(f"{n}: {f} forwards, {r} rows, {s:.1f} s; {s / tot[VARIANTS[0][0]][2]:.2f}x the time of {BEFORE}")
