"""The oracle search on the real target with its rows held in the cache or not, side by side in one
run: TargetScorer(hold=False) runs each forward over the whole prefix closure of the nodes it asks
for (as C3 ran before); hold=True keeps every forward's rows pending in the target's cache and runs
each later forward over its new nodes alone (TargetModel.extend); both with the read-ahead charge as
committed (0.5), and hold=True also at charge 0 (more rows read ahead, now cheaper). Six roots of
the greedy HumanEval answers in results/measure/answers/he8-* (the roots of
records/c3-2026-12-06/oracle_read_ahead.py); the trees compared (float32 rows computed in other batch shapes may order a near-tie differently), forwards, rows computed and
seconds, the variants' order alternated from root to root.

    python records/c3-2026-12-07/oracle_hold.py [threads]
"""
import glob
import os
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402

import mfd_theory.llm.measure.ceiling as ceiling  # noqa: E402
import mfd_theory.path_trees as path_trees  # noqa: E402
from mfd_theory.llm.models.target import TargetModel, load_local_target  # noqa: E402
from mfd_theory.llm.training.distill import load_distill_data  # noqa: E402
from mfd_theory.numerics import numerics_provenance  # noqa: E402

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
CHARGE = path_trees.READ_AHEAD_CHARGE
VARIANTS = [("closure", False, CHARGE), ("hold", True, CHARGE), ("hold, charge 0", True, 0.0)]
head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = subprocess.run(["git", "status", "--porcelain", "mfd_theory"], capture_output=True, text=True).stdout.strip()
num = numerics_provenance()
print(f"git {head}{'+dirty' if dirty else ''}; cpu {num.get('cpu')} ({num.get('isa_level')}; {' '.join(num.get('isa_flags') or [])}); "
      f"torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
hf, _ = load_local_target("qwen2.5-coder-0.5b-instruct", "cpu", "auto")
seqs, plens, _ = load_distill_data(sorted(glob.glob("results/measure/answers/he8-*"))[0])
target = TargetModel(hf)
L, N = 16, 64
tot = {n: [0, 0, 0.0] for n, _, _ in VARIANTS}
for i, off in ((0, 5), (0, 40), (1, 20), (2, 60), (3, 10), (4, 30)):
    seq, p = np.asarray(seqs[i]), int(plens[i])
    ctx = seq[: p + off]
    got = {}
    for name, hold, charge in (VARIANTS if off % 2 else VARIANTS[::-1]):  # alternate the order
        path_trees.READ_AHEAD_CHARGE = charge
        t = time.perf_counter()
        sc = ceiling.TargetScorer(target, ctx, L, 1.0, hold=hold)
        tree = ceiling.oracle_tree_of(sc, N)
        sc.release()
        dt = time.perf_counter() - t
        got[name] = tree.paths()
        tot[name][0] += sc.forwards
        tot[name][1] += sc.tokens
        tot[name][2] += dt
        print(f"answer {i} root +{off}: {name}: {sc.forwards} forwards, {sc.tokens} rows, {dt:.1f} s, "
              f"mass {np.exp(tree.log_score).sum():.2f}", flush=True)
    ref = set(got[VARIANTS[0][0]])
    print("  trees: " + "; ".join(f"{n}: {'the same' if g == got[VARIANTS[0][0]] else f'{len(ref - set(g))} prefixes differ'}"
                                  for n, g in got.items()), flush=True)
for n, (f, r, s) in tot.items():
    print(f"{n}: {f} forwards, {r} rows, {s:.1f} s; {s / tot[VARIANTS[0][0]][2]:.2f}x the time of closure")
