#!/usr/bin/env bash
# issue 54: MFD K = 4 trained exactly as the K = 1 300-step drafter (same data, features, schedule, seed), then greedy tau on all 164 HumanEval problems
set -euo pipefail
cd /work/main
export HF_HUB_OFFLINE=1
M=.venv/bin/mfd
T=qwen2.5-coder-0.5b-instruct
OUT=results/r54
COMMON="--target $T --data results/corpus-qwen --corpus-part instruct --max-tokens 200000 --target-layers 1,6,11,16,21 --features-dir $OUT/feat200k --context shared --threads 2 --numerics reproducible"
date
$M train-drafter $COMMON --modes 4 --steps 300 --block-size 16 --layers 1 --batch-size 8 --blocks-per-seq 16 --lr 1e-3 --weight-decay 0.01 --draft-vocab 8192 --out $OUT/k4-l1-b16
date
$M tau --target $T --drafter $OUT/k4-l1-b16 --sets code --budgets 16,32,64 --max-new-tokens 128 --batch 32 --threads 2 --numerics fast --cache-dir results/measure/answers --out $OUT/tau-k4-l1-b16
date
