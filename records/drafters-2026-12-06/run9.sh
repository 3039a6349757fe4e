#!/usr/bin/env bash
# (its shell was stopped at 19:45 during the first training, which went on to its end at 20:21 with a 10-minute stop, 19:30-19:40, for a probe beside it; run10.sh ran seed 1's tau, and seed 2 was not run this session)
# issue 54: MFD K = 4 seeds 1 and 2 (its second and third), trained exactly as the release drafter
# (preset release-mfd4, same data and features), each then greedy tau at N = 32 on all 164 HumanEval
# problems (the tau preset 'release', budgets 32), so K = 4 and K = 1 both have three seeds
set -euo pipefail
cd /work/main
export HF_HUB_OFFLINE=1
M=.venv/bin/mfd
OUT=results/r54
for S in 1 2; do
  date
  $M train-drafter --preset release-mfd4 --data results/corpus-qwen --features-dir $OUT/feat200k --seed $S --out $OUT/k4-l1-b16-s$S
  date
  $M tau --preset release --budgets 32 --drafter $OUT/k4-l1-b16-s$S --out $OUT/tau-k4-l1-b16-s$S
done
date
