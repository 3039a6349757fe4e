#!/usr/bin/env bash
# (the script that ran the benchmarks recorded in records/results/bench_*.json on 2026-12-07 at b0ea105, on the 2-core AMD EPYC (avx2 fma f16c, no AVX-512 / AMX), a C3 run stopped (SIGSTOP) meanwhile; its output went to /tmp/benchrec2, then mfd report --record /tmp/benchrec2)
# make bench's CPU benchmarks (not bench batch, which needs make toy's target) one after another, each
# started once the 1-minute load average is below 0.3
set -uo pipefail
cd /work/main
M=.venv/bin/mfd
O=/tmp/benchrec2
quiet() { while awk '{exit !($1 >= 0.3)}' /proc/loadavg; do sleep 10; done; echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*"; }
quiet trees; $M bench trees --out $O --quiet | tail -1
quiet fit; $M bench fit --out $O --quiet | tail -1
quiet decode; $M bench decode --out $O --quiet | tail -1
quiet decode hybrid; $M bench decode --preset hybrid --out $O --quiet | tail -1
quiet draft micro; $M bench draft --preset micro --out $O --quiet | tail -1
quiet draft tiny; $M bench draft --preset tiny --out $O --quiet | tail -1
date -u
