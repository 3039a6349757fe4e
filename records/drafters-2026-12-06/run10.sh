#!/usr/bin/env bash
# (its C3 step, every 4th round, was stopped after 8 minutes at about 10 minutes an answer; run11.sh ran every 16th round)
# issue 54: after MFD K = 4 seed 1's training (started by run9.sh, whose shell was stopped so that
# seed 2 does not follow this session), its greedy tau at N = 32 on all 164 HumanEval problems (the
# tau preset 'release', budgets 32); then, once the chimera code is committed (/tmp/c3.go), C3 over
# the decoding rounds of the first 8 HumanEval problems for the two shipped drafters
set -uo pipefail
cd /work/main
export HF_HUB_OFFLINE=1
M=.venv/bin/mfd
OUT=results/r54
while kill -0 7197 2>/dev/null; do sleep 20; done
date
$M tau --preset release --budgets 32 --drafter $OUT/k4-l1-b16-s1 --out $OUT/tau-k4-l1-b16-s1
date
while [ ! -f /tmp/c3.go ]; do sleep 20; done
date
$M tau --preset c3 --prompts results/c3/he8.jsonl --chimera-answers 8 --chimera-stride 4 \
  --drafter qwen2.5-coder-0.5b-instruct-k1 --drafter qwen2.5-coder-0.5b-instruct-mfd4 --out results/c3/he8-s4
date
