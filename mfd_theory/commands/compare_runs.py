"""``mfd compare-runs``: do two runs hold the same bits, and where do they first part?

``mfd compare-runs --runs A B`` reads the step records of two resumable runs (their output
directories, or their ``steps.json``: ``mfd real-drafters``, ``mfd natural``, ``mfd own-target``
and the steps of ``mfd reproduce`` that run them) and prints, step by step in the order the first
run ran them, whether every checkpoint and data file the step wrote has the same sha256 in both,
then the first step whose bits differ (the later ones read what it wrote). Exit status 0 when the
two runs are identical, 1 when they differ. ``--out FILE`` also writes the comparison as JSON.
What a record holds: :mod:`mfd_theory.run_records`.
"""

from __future__ import annotations

import dataclasses
import json

from mfd_theory.configs.options import Checked, Command, file_option, opt
from mfd_theory.results import atomic_write_text
from mfd_theory.run_records import compare_records, read_records

__all__ = ["CompareRunsConfig", "main"]


@dataclasses.dataclass(frozen=True)
class CompareRunsConfig(Checked):
    runs: tuple[str, ...] = opt((), "the two runs to compare: their output directories (or steps.json files)",
                                required=True, split=False, empty=True)

    def validate(self) -> None:
        if self.runs and len(self.runs) != 2:  # none: --show-config of the defaults (a run requires --runs)
            raise ValueError(f"--runs: give exactly two runs, got {len(self.runs)}")


CLI = Command("compare-runs", __name__, CompareRunsConfig, __doc__, out=False, extras=(
    file_option("out", "also write the comparison here as JSON"),), examples=(
    "mfd compare-runs --runs results/real-drafters /mnt/other/results/real-drafters  # step by step, "
    "the first that differs",
    "mfd compare-runs --runs run1/steps.json run2/steps.json --out results/compare.json  # the same, "
    "also as JSON",
))


def main(argv=None) -> int:
    return CLI.main(argv, _compare)


def _compare(config: CompareRunsConfig, opts) -> int:
    a, b = config.runs
    rec_a = _records(a)
    rec_b = _records(b)
    res = compare_records(rec_a, rec_b)
    width = max(len(s["step"]) for s in res["steps"])
    for s in res["steps"]:
        files = f" ({len(s['files'])} file(s): {', '.join(s['files'][:3])}{', ...' if len(s['files']) > 3 else ''})" \
            if s["files"] else ""
        print(f"{s['step']:<{width}}  {s['status']}{files}")
    if res["identical"]:
        print(f"identical: every file of the {len(res['steps'])} step(s) has the same sha256 in both runs")
    else:
        print(f"the runs part at step {res['first_difference']!r} (later steps read what it wrote)")
    if opts.out:
        atomic_write_text(opts.out, json.dumps({"runs": [a, b], **res}, indent=1) + "\n")
        print(f"wrote {opts.out}")
    return 0 if res["identical"] else 1


def _records(path: str) -> dict:
    try:
        return read_records(path)
    except ValueError as exc:
        raise ValueError(f"--runs: {str(exc).removeprefix('run: ')}") from None
