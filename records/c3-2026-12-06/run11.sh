#!/usr/bin/env bash
# issue 54, C3 over decoding rounds: the two shipped drafters' 64-node trees at every 16th round of the
# greedy decodes of the first 8 HumanEval problems (run10.sh's every-4th-round run was stopped after
# 8 minutes: at about 10 minutes an answer it would not have ended this session)
set -uo pipefail
cd /work/main
export HF_HUB_OFFLINE=1
date
.venv/bin/mfd tau --preset c3 --prompts results/c3/he8.jsonl --chimera-answers 8 --chimera-stride 16 \
  --drafter qwen2.5-coder-0.5b-instruct-k1 --drafter qwen2.5-coder-0.5b-instruct-mfd4 --out results/c3/he8-s16
date
