#!/usr/bin/env bash
# issue 54: the 200 k-token K = 1 drafter trained 400 steps more (from its 300-step checkpoint, a new cosine schedule),
# then greedy tau on all 164 HumanEval problems at N = 16, 32, 64
set -euo pipefail
cd /work/main
export HF_HUB_OFFLINE=1
M=.venv/bin/mfd
T=qwen2.5-coder-0.5b-instruct
OUT=results/r54
date
$M train-drafter --target $T --data results/corpus-qwen --corpus-part instruct --max-tokens 200000 --features-dir $OUT/feat200k --context shared --threads 2 --numerics reproducible --steps 400 --batch-size 8 --blocks-per-seq 16 --lr 1e-3 --weight-decay 0.01 --init-from $OUT/k1-l1-b16/drafter --out $OUT/k1-l1-b16-700
date
$M tau --target $T --drafter $OUT/k1-l1-b16-700 --sets code --budgets 16,32,64 --max-new-tokens 128 --batch 32 --threads 2 --numerics fast --cache-dir results/measure/answers --out $OUT/tau-k1-l1-b16-700
date
