"""Side by side in one process: the replay's teacher-forced target forward (mfd tau, one per answer)
with the LM head over every position, as before 2026-12-07, and over the answer's rows only
(logits_to_keep), on the target's greedy answers to the first 16 HumanEval prompts; best of 2
interleaved passes each. Prints seconds, the ratio and whether every answer's greedy cut and the
hidden states are identical.

Run from the repository root after mfd tau --preset reproduce has cached the answers:
  .venv/bin/python records/answers-2026-12-07/bench_replay_forward.py results/answers/code-eval-<hash>
"""
import json
import sys
import time

from mfd_theory.numerics import apply_numerics, numerics_provenance

apply_numerics("reproducible")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from mfd_theory.llm.measure.heldout import greedy_prefix  # noqa: E402
from mfd_theory.llm.models.target import load_local_target  # noqa: E402
from mfd_theory.llm.training.distill import load_distill_data  # noqa: E402

torch.set_num_threads(2)
hf, _ = load_local_target("results/targets/qwen2.5-coder-0.5b-instruct", "cpu", "float32")
hf.eval()
seqs, plens, _ = load_distill_data(sys.argv[1])
seqs, plens = seqs[:16], plens[:16]
print(f"{len(seqs)} answers, {sum(len(s) for s in seqs)} tokens, {sum(len(s) - p for s, p in zip(seqs, plens))} "
      "of them answer tokens", flush=True)


@torch.no_grad()
def run(keep: bool):
    t, cuts, hs = time.perf_counter(), [], []
    for s, p in zip(seqs, plens):
        ids = torch.from_numpy(np.asarray(s, dtype=np.int64))[None]
        if keep:
            out = hf(input_ids=ids, output_hidden_states=True, logits_to_keep=int(len(s) - p + 1))
            cuts.append(greedy_prefix(s, p, out.logits[0], first_row=int(p) - 1))
        else:
            out = hf(input_ids=ids, output_hidden_states=True)
            cuts.append(greedy_prefix(s, p, out.logits[0]))
        hs.append(out.hidden_states[-2][0, -1].clone())
    return time.perf_counter() - t, cuts, hs


times = {False: [], True: []}
for _ in range(2):
    for keep in (False, True):
        s, cuts, hs = run(keep)
        times[keep].append(s)
        if not keep:
            want = (cuts, hs)
        else:
            same_cuts = cuts == want[0]
            same_hidden = all(torch.equal(a, b) for a, b in zip(hs, want[1]))
        print(f"{'answer rows only' if keep else 'every position'}: {s:.1f} s", flush=True)
before, after = min(times[False]), min(times[True])
print(f"before {before:.1f} s, after {after:.1f} s: {before / after:.2f}x; identical cuts: {same_cuts}, "
      f"identical hidden states: {same_hidden}")
prov = numerics_provenance()
print(json.dumps({"host_cpu": prov.get("cpu"), "isa": prov.get("isa_level"), "torch_threads": torch.get_num_threads(),
                  "before_s": round(before, 2), "after_s": round(after, 2), "identical_cuts": same_cuts,
                  "identical_hidden": same_hidden}))
