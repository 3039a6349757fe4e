#!/usr/bin/env bash
# make reproduce's drafter step alone (issue 54 item 6), from the clean clone /tmp/cc, nothing else running
set -euo pipefail
cd /tmp/cc
export HF_HUB_OFFLINE=1 MFD_TARGETS_DIR=/work/main/results/targets
git log --oneline -1
date
/usr/bin/time -v .venv/bin/mfd tau --preset reproduce --out /work/main/results/shipped --cache-dir /work/main/results/answers
date
