"""A stand-in experiment step for tests/test_reproduce.py: importable by name in a spawned lane.

``main([record_file, label, *flags])`` appends one JSON line (label, flags, pid, affinity, start and
end times) to ``record_file``. Flags: ``--sleep S`` sleeps S seconds; ``--wait-for F`` waits (up
to 20 s) until file F exists; ``--fail`` writes ``record_file + ".failed"`` and raises.
"""

import json
import os
import time
from pathlib import Path


def main(argv):
    path, label, *flags = argv
    start = time.time()
    if "--wait-for" in flags:
        marker = Path(flags[flags.index("--wait-for") + 1])
        while not marker.exists() and time.time() - start < 20:
            time.sleep(0.05)
    if "--sleep" in flags:
        time.sleep(float(flags[flags.index("--sleep") + 1]))
    if "--fail" in flags:
        Path(path + ".failed").write_text("x")
        raise RuntimeError(f"step {label} fails")
    aff = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    with open(path, "a") as fh:
        fh.write(json.dumps({"label": label, "flags": flags, "pid": os.getpid(), "affinity": aff,
                             "start": start, "end": time.time()}) + "\n")
