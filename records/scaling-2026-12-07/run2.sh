#!/usr/bin/env bash
# Resumed 2026-12-07 04:41 from an updated clean clone (driver at ae6dcda, later steps at 851bd00): release-mfd4 on 12,500 tokens trained (from step 0) and measured; stopped at 07:05 as the K = 1 drafter at 3,125 tokens began. The log: records/scaling-2026-12-07/run2.log.
# issue 54 item 2: the data-scaling curve on this 2-core host, by mfd scaling --preset here, from a clean
# clone (/tmp/cc) at the commit printed below. The 200 k-token points are the release drafters' three
# seeds of each kind (trained and measured in records/drafters-2026-12-06, reused here). The K = 1
# drafter at 50 k tokens was trained by results/r54/run14.sh (the same train-drafter command the
# driver runs, from /tmp/cc at 5ee6651) and moved into the driver's layout before the driver started.
set -euo pipefail
cd /tmp/cc
export HF_HUB_OFFLINE=1 MFD_TARGETS_DIR=/work/main/results/targets
R=/work/main/results
D=/work/main/records/drafters-2026-12-06
git log --oneline -1
while pgrep -f "train-drafter --preset release-k1 --data /work/main/results/corpus-qwen" > /dev/null; do sleep 20; done
mkdir -p $R/scaling/drafters
if [ -d $R/r54/k1-50k ] && [ ! -e $R/scaling/drafters/release-k1-50000-s0 ]; then
  mv $R/r54/k1-50k $R/scaling/drafters/release-k1-50000-s0
fi
date
/tmp/cc/.venv/bin/mfd scaling --preset here --data $R/corpus-qwen --features-dir $R/r54/feat200k \
  --cache-dir $R/measure/answers --out $R/scaling \
  --reuse $R/r54/k1-l1-b16=$D/tau-k1-300.json --reuse $R/r54/k1-l1-b16-s1=$D/tau-k1-300-s1.json \
  --reuse $R/r54/k1-l1-b16-s2=$D/tau-k1-300-s2.json --reuse $R/r54/k4-l1-b16=$D/tau-k4-300.json \
  --reuse $R/r54/k4-l1-b16-s1=$D/tau-k4-300-s1.json --reuse $R/r54/k4-l1-b16-s2=$D/tau-k4-300-s2.json
date
