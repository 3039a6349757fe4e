#!/usr/bin/env bash
# What made the records of 2026-12-06 (run from the repository root; results/ is not committed): one product
# drafter for the real Qwen target (make reproduce's recipe), mfd tau on all 164 HumanEval problems (its
# record: records/tau-qwen2.5-coder-humaneval-amd-epyc-2026-12-06.json), then the numerics benchmark.
# Fast numerics repeats only on the same host: another host gives other answers, another drafter, other tau.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
M=.venv/bin/mfd
T=qwen2.5-coder-0.5b-instruct
OUT=results/measure
date
.venv/bin/python - <<'PY'
from pathlib import Path
from mfd_theory.llm.training.real_prompts import write_prompt_sets
out = Path("results/measure/prompts")
write_prompt_sets(out)
lines = []
for dom in ("code", "prose"):
    lines += (out / f"{dom}-train.jsonl").read_text().splitlines()[:48]
(out / "train48.jsonl").write_text("\n".join(lines) + "\n")
PY
$M distill --target $T --prompts $OUT/prompts/train48.jsonl --max-new-tokens 64 --temperature 0.7 --top-p 0.8 --top-k 20 --batch 32 --threads 2 --numerics fast --out $OUT/data
date
$M train-drafter --target $T --data $OUT/data --steps 200 --block-size 8 --layers 1 --batch-size 8 --blocks-per-seq 8 --lr 2e-3 --draft-vocab 4096 --init-layers target --threads 2 --numerics fast --out $OUT/k1
date
$M tau --target $T --drafter $OUT/k1 --sets code --budgets 16,32,64 --max-new-tokens 128 --batch 32 --threads 2 --numerics fast --timing-prompts 1 --cache-dir $OUT/answers --out $OUT/tau
date
# then, with nothing else running: the numerics benchmark (records/bench_numerics-amd-epyc-2026-12-06.json)
$M bench numerics --reps 2 --out $OUT
