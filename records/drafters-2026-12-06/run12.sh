#!/usr/bin/env bash
# issue 54: MFD K = 4 seed 2 (its third), trained exactly as the release drafter (preset
# release-mfd4, same data and features), then greedy tau at N = 32 on all 164 HumanEval problems
# (the tau preset 'release', budgets 32), so K = 4 and K = 1 both have three seeds. Run from a clean
# clone at ade1906 (/tmp/cc, its own editable install) so that work on main does not touch it.
set -euo pipefail
cd /tmp/cc
export HF_HUB_OFFLINE=1 MFD_TARGETS_DIR=/work/main/results/targets
M=/tmp/cc/.venv/bin/mfd
R=/work/main/results
OUT=$R/r54
git log --oneline -1
date
$M train-drafter --preset release-mfd4 --data $R/corpus-qwen --features-dir $OUT/feat200k --seed 2 --out $OUT/k4-l1-b16-s2
date
$M tau --preset release --budgets 32 --drafter $OUT/k4-l1-b16-s2 --out $OUT/tau-k4-l1-b16-s2
date
# (the tau step above was stopped after a minute: run from /tmp/cc, its relative --cache-dir missed the
# answers cached under /work/main; run12b.sh runs it with the cache given)
