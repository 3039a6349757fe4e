"""The drafters the repository ships for its real Qwen target: list them, or pack a trained one into the release.

``mfd drafter list`` shows each shipped drafter (``drafters/`` in the repository, or
``$MFD_DRAFTERS_DIR``): its kind, modes, target, size, the tau measured for it and where and how it
was trained (``--verify`` hashes its files against the release). Every command that takes a
drafter directory (``mfd tau --drafter``, ``mfd eval --drafter``, ``mfd check-modes``) also takes a
shipped name. ``mfd drafter pack NAME --run RUN --tau TAU_RUN ...`` writes the train-drafter run RUN's
drafter into the release as NAME: bfloat16 safetensors, checked to load for the target, at most
40 MB (the release at most 100 MB), with its provenance (data hash, training config and time, git
sha, numerics, host) and its tau from the ``mfd tau`` runs TAU_RUN (T = 0, T = 1) in ``RELEASE.json``. A retrain
replaces the files; ``make drafters`` retrains and packs the whole release.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from mfd_theory.configs.options import Checked, Command, opt, verb_argv
from mfd_theory.shipped_drafters import (MAX_DRAFTER_BYTES, drafters_dir, read_release, release_bytes,
                                         shipped_drafter_names, verify_drafter)

__all__ = ["DrafterConfig", "main"]

ACTIONS = ("list", "pack")


@dataclasses.dataclass(frozen=True)
class DrafterConfig(Checked):
    action: str = opt("list", "list (the shipped drafters) or pack (write a trained drafter into the release); also "
                              "the first word: mfd drafter pack NAME", choices=ACTIONS)
    name: str = opt("", "pack: the shipped name to write (letters, digits, '.', '-', '_'); also the word after pack")
    run: str = opt("", "pack: the train-drafter run directory (or its drafter/ checkpoint) to pack")
    tau: tuple[str, ...] = opt((), "pack: the mfd tau run directories that measured this drafter (their tau.json; "
                                    "say T = 0 and T = 1); repeat for several", split=False, empty=True)
    target: str = opt("qwen2.5-coder-0.5b-instruct", "pack: the target the drafter must load for (a shipped name or "
                                                     "a local Hugging Face directory)")
    out: str = opt("", "the release folder ('' means $MFD_DRAFTERS_DIR or the repository's drafters/)")
    verify: bool = opt(False, "list: hash each shipped drafter's files against the release")

    def validate(self) -> None:
        if self.action == "list":
            if self.name or self.run or self.tau:
                raise ValueError("--name: list takes no name, --run or --tau (mfd drafter pack NAME --run RUN "
                                 "--tau TAU_RUN writes one)")
            return
        import re

        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}", self.name or ""):
            raise ValueError(f"--name: pack needs a name of letters, digits, '.', '-' and '_' (got {self.name!r})")
        if not self.run:
            raise ValueError("--run: pack needs the train-drafter run directory to pack")
        if not Path(self.run).is_dir():
            raise ValueError(f"--run: {self.run} is not a directory")
        if not self.tau:
            raise ValueError("--tau: pack needs the mfd tau run that measured the drafter (its tau.json)")
        for t in self.tau:
            if not (Path(t) / "tau.json").is_file():
                raise ValueError(f"--tau: no tau.json in {t}")


CLI = Command("drafter", __name__, DrafterConfig, __doc__, out=False, models=True, examples=(
    "mfd drafter list  # the shipped drafters: kind, modes, size, measured tau, provenance",
    "mfd drafter pack qwen2.5-coder-0.5b-instruct-k1 --run runs/k1 --tau runs/tau-k1  # into the release",
    "mfd drafter list --verify  # the same, each file's sha256 checked against the release",
))


def main(argv: list[str] | None = None):
    """``mfd drafter``; returns the listing (list) or the release entry written (pack)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return CLI.main(verb_argv(argv, ACTIONS, "pack"), _run)


def _run(config: DrafterConfig, opts):
    root = Path(config.out) if config.out else drafters_dir()
    if config.action == "list":
        return _list(root, config.verify)
    from mfd_theory.runs.pipeline.drafter_release import pack

    return pack(config.name, Path(config.run), [Path(t) for t in config.tau], config.target, root)


def _best(runs: list[dict]) -> str:
    out = []
    for tau in runs:
        cells = [(c["tau"], c["label"]) for c in tau.get("cells", [])]
        if cells:
            t, label = max(cells)
            out.append(f"T = {tau.get('temperature', 0):g}: best tau {t:.3f} ({label}, {tau.get('set', '?')}, "
                       f"{tau.get('prompts', '?')} prompts)")
    return "; ".join(out) or "no tau recorded"


def _list(root: Path, verify: bool) -> list[dict]:
    release = read_release(root)
    names = shipped_drafter_names(root)
    print(f"shipped drafters in {root}: {len(names)}" + ("" if names else " (make drafters trains and packs them)"))
    rows = []
    for name in names:
        e = release["drafters"][name]
        row = {"name": name, **{k: e.get(k) for k in ("kind", "modes", "target", "bytes")}}
        size = release_bytes(e)
        state = ""
        if verify:
            problems = verify_drafter(name, root)
            row["verified"] = not problems
            state = ", sha256 verified" if not problems else f", FAILED: {'; '.join(problems)}"
        kind = "Domino (method dartree)" if e["kind"] == "dartree" else (
            f"MFD K = {e['modes']} (scorers mixture, best_mode)" if e["modes"] > 1 else "product (K = 1)")
        print(f"  {name}: {kind} for {e['target']}, {size / 1e6:.1f} MB{state}")
        print(f"    {_best(e.get('tau') or [])}")
        train = e.get("training") or {}
        secs = train.get("train_seconds")
        where = train.get("host") or "host not recorded"
        print(f"    trained {train.get('steps', '?')} steps on {train.get('data_tokens', '?')} tokens "
              f"(data {str(train.get('data_sha256', '?'))[:16]}), "
              + (f"{secs / 60:.0f} min" if secs else "time not recorded") + f", {where}")
        rows.append(row)
    over = [n for n in names if release_bytes(release["drafters"][n]) > MAX_DRAFTER_BYTES]
    if over:
        print(f"  over the {MAX_DRAFTER_BYTES / 1e6:.0f} MB cap: {', '.join(over)}")
    return rows
