#!/usr/bin/env bash
# after run7's K = 1 seed 2 training (run7.sh stopped before its MFD K = 4 seed 1 part):
# its greedy tau at N = 32, then the main job's two real-target steps as make reproduce runs them
# (without --figure: mfd report --record results redraws the tracked figures from the records)
set -euo pipefail
cd /work/main
export HF_HUB_OFFLINE=1
M=.venv/bin/mfd
OUT=results/r54
while kill -0 27380 2>/dev/null; do sleep 10; done
date
test -f $OUT/k1-l1-b16-s2/run_record.json
$M tau --preset release --budgets 32 --drafter $OUT/k1-l1-b16-s2 --out $OUT/tau-k1-l1-b16-s2
date
$M real --preset reproduce --out results/real
date
$M real-drafters --preset reproduce --out results/real-drafters
date
