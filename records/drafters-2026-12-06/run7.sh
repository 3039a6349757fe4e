#!/usr/bin/env bash
# (stopped during its first training, at 17:06: the training went on to its end; run8.sh did the rest of the K = 1 part, and the K = 4 seed 1 part was not run this session)
# issue 54: toward seeds per kind. K = 1 seed 2 (its third seed) and MFD K = 4 seed 1 (its second),
# trained exactly as the release drafters (presets release-k1 / release-mfd4, same data and features),
# then greedy tau at N = 32 on all 164 HumanEval problems (the tau preset 'release', budgets 32)
set -euo pipefail
cd /work/main
export HF_HUB_OFFLINE=1
M=.venv/bin/mfd
OUT=results/r54
date
$M train-drafter --preset release-k1 --data results/corpus-qwen --features-dir $OUT/feat200k --seed 2 --out $OUT/k1-l1-b16-s2
date
$M tau --preset release --budgets 32 --drafter $OUT/k1-l1-b16-s2 --out $OUT/tau-k1-l1-b16-s2
date
$M train-drafter --preset release-mfd4 --data results/corpus-qwen --features-dir $OUT/feat200k --seed 1 --out $OUT/k4-l1-b16-s1
date
$M tau --preset release --budgets 32 --drafter $OUT/k4-l1-b16-s1 --out $OUT/tau-k4-l1-b16-s1
date
