"""Side by side in one process: the target's greedy answers to the first 64 HumanEval prompts (the
prompts mfd tau answers), generated as generate_batch did before 2026-12-07 (prompts admitted in
input order, every group of free slots prefilled as one forward padded to its longest prompt; batch
32, as the reproduce preset had) and as it does now (longest prompt first, prefilled in groups of at
most PREFILL_GROUP; batch 64, all the prompts at once). Prints seconds, answer tokens/s, the ratio,
and how many answers are identical (a different batch may flip a near-tie in float round-off).

Run from the repository root with the converted target under results/targets:
  .venv/bin/python records/answers-2026-12-07/bench_answers.py
"""
import importlib
import json
import sys
import time

from mfd_theory.numerics import apply_numerics, numerics_provenance

apply_numerics("reproducible")  # the pin, set before torch loads: what make reproduce runs

import torch  # noqa: E402

from mfd_theory.llm.decoding.generate_batch import generate_batch  # noqa: E402
from mfd_theory.llm.models.target import load_local_target, TargetModel  # noqa: E402
from mfd_theory.llm.training.prompts import read_prompt_files  # noqa: E402
from mfd_theory.llm.training.real_prompts import write_prompt_sets  # noqa: E402
from mfd_theory.llm.training.distill import _next_turn  # noqa: E402

gb = importlib.import_module("mfd_theory.llm.decoding.generate_batch")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 64
torch.set_num_threads(2)
hf, tok = load_local_target("results/targets/qwen2.5-coder-0.5b-instruct", "cpu", "float32")
hf.eval()
write_prompt_sets("/tmp/bench_answers_prompts")
prompts = read_prompt_files(["/tmp/bench_answers_prompts/code-eval.jsonl"])[:N]
ids = [torch.tensor(_next_turn(p, tok, False, [])) for p in prompts]
target = TargetModel(hf)
lengths = [len(x) for x in ids]
print(f"{N} prompts, {sum(lengths)} prompt tokens (longest {max(lengths)}), 128 new tokens at most", flush=True)


def run(label, batch, before):
    order, group = gb.admission_order, gb.PREFILL_GROUP
    if before:
        gb.admission_order, gb.PREFILL_GROUP = (lambda lens: list(range(len(lens)))), 10 ** 9
    try:
        t = time.perf_counter()
        out = []
        for lo in range(0, N, 64):  # mfd distill's shards of 64 prompts, one generate_batch call each
            out += generate_batch(target, ids[lo: lo + 64], 128, batch=batch)
        s = time.perf_counter() - t
    finally:
        gb.admission_order, gb.PREFILL_GROUP = order, group
    n = sum(len(x) for x in out)
    print(f"{label}: {s:.1f} s, {n} answer tokens, {n / s:.1f} answer tokens/s", flush=True)
    return s, out


t_before, a_before = run("before (input order, one prefill per group, batch 32)", 32, True)
t_after, a_after = run("after (longest first, prefill groups of 16, batch 64)", 64, False)
same = sum(x == y for x, y in zip(a_before, a_after))
print(f"after / before speed: {t_before / t_after:.2f}x; identical answers: {same} of {N}")
prov = numerics_provenance()
print(json.dumps({"host_cpu": prov.get("cpu"), "isa": prov.get("isa_level"), "torch_threads": torch.get_num_threads(),
                  "before_s": round(t_before, 1), "after_s": round(t_after, 1), "identical": same, "prompts": N}))
