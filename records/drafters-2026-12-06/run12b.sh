#!/usr/bin/env bash
# issue 54: the greedy tau of MFD K = 4 seed 2 (trained by run12.sh) at N = 32 on all 164 HumanEval
# problems (the tau preset 'release'), from the clone run12.sh trained from, reading the answers cached
# under /work/main
set -euo pipefail
cd /tmp/cc
export HF_HUB_OFFLINE=1 MFD_TARGETS_DIR=/work/main/results/targets
R=/work/main/results
git log --oneline -1
date
/tmp/cc/.venv/bin/mfd tau --preset release --budgets 32 --drafter $R/r54/k4-l1-b16-s2 --out $R/r54/tau-k4-l1-b16-s2 \
  --cache-dir $R/measure/answers
date
