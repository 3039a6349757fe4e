#!/usr/bin/env bash
# issue 54: the 300-step K = 1 drafter retrained with seed 1 (what a rerun moves), greedy tau at N = 32 on all 164 HumanEval problems
set -euo pipefail
cd /work/main
export HF_HUB_OFFLINE=1
M=.venv/bin/mfd
T=qwen2.5-coder-0.5b-instruct
OUT=results/r54
date
$M train-drafter --preset release-k1 --data results/corpus-qwen --features-dir $OUT/feat200k --seed 1 --out $OUT/k1-l1-b16-s1
date
$M tau --preset release --budgets 32 --drafter $OUT/k1-l1-b16-s1 --out $OUT/tau-k1-l1-b16-s1
date
