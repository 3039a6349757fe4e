"""Resumable steps: :class:`Steps` keeps each step's key, command line, completion, wall time and
the sha256 of every file it wrote in ``steps.json`` (``mfd own-target``, ``mfd natural``, ``mfd
real-drafters``); :func:`run_command_steps` runs the pipeline commands (distill, train-drafter,
eval) as such steps, each keyed by what it reads."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Callable

from mfd_theory.llm.models.fingerprint import FINGERPRINT_VERSION
from mfd_theory.llm.training.train import config_hash
from mfd_theory.results import atomic_write_text
from mfd_theory.run_records import file_digests
from mfd_theory.runs.pipeline.entry import mains

__all__ = ["Steps", "run_command_steps"]


def run_command_steps(steps, commands: list[tuple], keys: dict, distill_inputs: list[str], config,
                      quiet: list[str]) -> None:
    """Run the distill / train-drafter / eval ``commands`` (``(name, command, argv, argv relative to
    the output directory, command line)``) as steps of ``steps``, each keyed by its relative command
    line and the keys of what it reads (distill: ``distill_inputs``; a drafter: distill; eval: every
    drafter), so that moving the output directory keeps them valid. ``keys`` gains each step's key.
    Data and drafters record the target's fingerprint: a new fingerprint version redoes distill
    and, through the keys, every step after it. Each step runs its command's entry point
    (:func:`mfd_theory.runs.pipeline.entry.mains`)."""
    entry = mains()
    marker = {"distill": "manifest.json", "train-drafter": "loss_curve.json", "eval": "eval.json"}
    for name, cmd, argv, rel, line in commands:
        upstream = distill_inputs if cmd == "distill" else (
            ["distill"] if cmd == "train-drafter" else [n for n, c, *_ in commands if c == "train-drafter"])
        keys[name] = config_hash(rel, [keys[u] for u in upstream])
        if cmd == "distill":
            keys[name] = config_hash(keys[name], f"fingerprint-v{FINGERPRINT_VERSION}")
        where = Path(argv[argv.index("--out") + 1])

        def work(cmd=cmd, argv=argv):
            threads = config.eval_threads if cmd == "eval" else config.threads
            entry[cmd](argv + ["--threads", str(threads)] + quiet)

        steps.run(name, keys[name], line, where, lambda w=where, m=marker[cmd]: (w / m).is_file(), work)


class Steps:
    """The step bookkeeping of ``mfd own-target``, ``mfd natural`` and ``mfd real-drafters``, kept in
    ``steps.json``: per step its key, what it runs (the command line), whether it finished, its wall
    time, and the sha256 of every checkpoint and data file it wrote (``files``,
    :mod:`mfd_theory.run_records`; ``mfd compare-runs`` names the first step two runs part at).

    :meth:`run` skips a step recorded as finished under the same key whose output is there, runs
    again from an empty output a step recorded under another key, and runs again into the same
    output a step that started but did not finish (the command resumes it). An unreadable file
    counts as empty: every step is redone.
    """

    def __init__(self, path: Path):
        self.path = path
        self.existed = path.is_file()
        self.data: dict = {"steps": {}}
        if self.existed:
            try:
                self.data = json.loads(path.read_text())
            except json.JSONDecodeError:
                pass  # unreadable: every step is redone (into its directory, which stays)
            if not isinstance(self.data.get("steps"), dict):
                self.data = {"steps": {}}

    def save(self) -> None:
        atomic_write_text(self.path, json.dumps(self.data, indent=1) + "\n")

    def run(self, name: str, key: str, line: str, output: Path, finished: Callable[[], bool],
            work: Callable[[], None]) -> bool:
        """Run ``work`` unless step ``name`` finished under ``key``; True when it ran."""
        entry = self.data["steps"].get(name) or {}
        if entry.get("key") == key and entry.get("done") and finished():
            print(f"{name}: finished earlier, reusing {output}", flush=True)
            if "files" not in entry:  # finished before step records were kept
                entry["files"] = file_digests(output)
                self.save()
            return False
        if entry.get("key") not in (None, key) and output.exists():
            print(f"{name}: its options or inputs changed since the last run; removing {output}", flush=True)
            if output.is_dir():
                shutil.rmtree(output)
            else:
                output.unlink()
        print(f"\n== {name}: {line}", flush=True)
        self.data["steps"][name] = {"key": key, "what": line, "done": False}
        self.save()
        t0 = time.perf_counter()
        work()
        self.data["steps"][name].update(done=True, seconds=round(time.perf_counter() - t0, 1),
                                        files=file_digests(output))
        self.save()
        return True
