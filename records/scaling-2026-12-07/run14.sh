#!/usr/bin/env bash
# issue 54 item 2: the data-scaling curve. The release recipe (presets release-k1 / release-mfd4,
# 300 steps, seed 0) on the first 50,000 / 12,500 / 3,125 tokens (whole sequences) of the same
# corpus instructions as the release drafters (200,000 tokens, three seeds each already), the
# target's features read from the 200k file (a prefix of it); greedy tau at N = 32 on all 164
# HumanEval problems (tau preset 'release'). Run from a clean clone (/tmp/cc, its own editable
# install) at the commit printed below. Each step resumes (training from its checkpoints, tau
# from nothing: it is redone), so a rerun after an interruption goes on.
# Only its first step ran here (the K = 1 drafter on 50,000 tokens): the script was stopped after it
# and the rest handed to mfd scaling (run.sh); the training was paused 3 min (SIGSTOP) for
# records/c3-2026-12-07/oracle_hold.py. run14.log: its output, progress bars cut.
set -euo pipefail
cd /tmp/cc
export HF_HUB_OFFLINE=1 MFD_TARGETS_DIR=/work/main/results/targets
M=/tmp/cc/.venv/bin/mfd
R=/work/main/results
OUT=$R/r54
git log --oneline -1
train() {  # preset tokens name
  if [ ! -f $OUT/$3/run_record.json ] || ! grep -q "\"last_step\": 300" $OUT/$3/run_record.json; then
    date; $M train-drafter --preset $1 --data $R/corpus-qwen --features-dir $OUT/feat200k --max-tokens $2 --seed 0 --out $OUT/$3
  fi
}
tau() {  # out drafters...
  local out=$1; shift
  if [ ! -f $OUT/$out/tau.json ]; then
    date; $M tau --preset release --budgets 32 --cache-dir $R/measure/answers --out $OUT/$out $(for d in "$@"; do echo --drafter $OUT/$d; done)
  fi
}
train release-k1 50000 k1-50k
train release-k1 12500 k1-12k
train release-k1 3125 k1-3k
tau tau-scale-k1 k1-50k k1-12k k1-3k
train release-mfd4 50000 k4-50k
tau tau-scale-k4-50k k4-50k
train release-mfd4 12500 k4-12k
train release-mfd4 3125 k4-3k
tau tau-scale-k4-small k4-12k k4-3k
date
