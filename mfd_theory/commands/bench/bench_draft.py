"""Drafting-round cost against context length and mode count, the shared-context drafter beside
its first version, and whether the target's verify path copies its cache every round.

Side by side in one run (never a timed test), on a random target of a ``mfd bench decode`` preset
shape and a random drafter sized to it, CPU threads fixed (1 by default):

1. **drafting.** For K in ``modes`` and each context T in ``contexts``: the drafter is fed T rows
   of context features, then ``rounds`` rounds each append ``new_rows`` rows and draft a block;
   the fastest round is kept (on a shared machine preemption only ever adds time) for the drafter ("after": modes share the context keys/values, the
   cache grows in place; on CPU the modes attend one SDPA call each over the shared cache), for
   the same drafter with its K modes folded into one masked SDPA call ("folded", K > 1 only: the
   single read of the context that a memory-bound device wants) and for the slow twin in
   ``mfd_theory/llm/models/reference_drafter.py`` ("before": the cache concatenated whole every round, the context
   copied into every mode's keys and repeated per query head). Printed: the targets' ratios, K = 1
   at the longest over the shortest context (target <= 3) and every K over K = 1 at the longest
   context side by side (the target <= 2.5 is K = 4's, or the largest K's when 4 is not timed;
   K = 8 is the released drafters' count), before and after (and folded).
2. **verify.** The target at the same contexts: one verify forward of an N-node product tree plus
   commit, with ``TargetModel``'s in-place cache ("after") and with HF's ``DynamicCache`` as it is
   ("before": ``DynamicCache.update`` concatenates every layer's keys and values with the new rows,
   the cache copied whole per round), and, apart, that ``torch.cat`` and the key/value head repeat
   HF's attention does for a GQA target given a mask.

The whole measurement is repeated ``repeats`` times (interleaved, so drift in machine load hits
both paths alike) and the spread of every ratio is printed. The "before" path ships with the
package (the slow twin the tests compare the drafter with), so this runs from an installed wheel. Writes ``<out>/bench_draft_<shape>.json`` (one file per shape;
``mfd report`` turns each into a block of docs/benchmarks.md). The config lives here (no torch
import); the work is in :mod:`mfd_theory.runs.bench.bench_draft`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from mfd_theory.configs.options import Checked, Command, opt, seed_opt, numerics_opt
from mfd_theory.runs.bench.shapes import SHAPES
from mfd_theory.results import Result
from mfd_theory.report.console import bench_draft_text as report

__all__ = ["BenchDraftConfig", "main", "report", "results_name", "run"]


@dataclass(frozen=True)
class BenchDraftConfig(Checked):
    preset: str = opt("micro", "the preset file (experiments/bench_draft/NAME.toml) these values started from, set by "
                      "--preset NAME")
    shape: str = opt("micro", "random target (and drafter) shape, one of mfd bench decode's shapes",
                     choices=tuple(SHAPES))
    block_size: int = opt(16, "drafter block size", ge=2)
    draft_layers: int = opt(1, "drafter layers", ge=1)
    modes: str = opt("1,2,4,8", "modes K to time, each compared with K = 1; the ratio target is K = 4's (the "
                                "largest K's if 4 is not timed)")
    contexts: str = opt("128,4096", "context rows T; the ratio target compares the longest with the shortest")
    new_rows: int = opt(4, "context rows appended per round (about tau)", ge=1)
    rounds: int = opt(15, "timed rounds per (K, T); the fastest is kept", ge=1)
    verify_nodes: int = opt(64, "tree size N of the timed verify forwards", ge=1)
    repeats: int = opt(3, "repeats of the whole measurement in one run", ge=1)
    threads: int = opt(1, "torch CPU threads", ge=1)
    numerics: str | None = numerics_opt()
    seed: int = seed_opt("random seed")
    out: str = opt("results", "output directory (the --out option)")

    def validate(self) -> None:
        modes = _ints("--modes", self.modes, 1)
        _ints("--contexts", self.contexts, 1)
        if 1 not in modes:
            raise ValueError(f"--modes: must include 1 (the baseline of the ratio), got {self.modes!r}")

    def plan(self) -> tuple[list[int], list[int]]:
        """(modes, contexts): each sorted, each value once."""
        return sorted(set(_ints("--modes", self.modes, 1))), sorted(set(_ints("--contexts", self.contexts, 1)))


def _ints(name: str, text: str, low: int) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{name}: expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < low:
        raise ValueError(f"{name}: need integers >= {low}, got {text!r}")
    return vals


def run(config: BenchDraftConfig = BenchDraftConfig(), out_dir: str | None = None, progress: bool = True) -> Result:
    """Measure (the torch half), then the ratios of every repeat, written to ``bench_draft_<shape>.json``."""
    from mfd_theory.runs.bench.bench_draft import measure

    modes, contexts = config.plan()
    m = measure(config, modes, contexts, progress)
    data = {"model": m["model"], "width": m["width"], "repeats": m["repeats"],
            "ratios": _ratios(m["repeats"], modes, contexts), "load_avg_1min": m["load_avg_1min"],
            "cpu_count": m["cpu_count"]}
    result = Result("bench_draft", dataclasses.asdict(config), data, seed=config.seed)
    result.save(Path(out_dir or config.out) / results_name(config.shape))
    return result


def results_name(shape: str) -> str:
    """One file per shape, so a run at one shape never overwrites another's."""
    return f"bench_draft_{shape}.json"


def _ratios(reps, modes, contexts) -> dict[str, list[float]]:
    """Per repeat: the two targets' ratios before and after (every K against K = 1), and the verify growth."""
    lo, hi, kmax = min(contexts), max(contexts), max(modes)
    out: dict[str, list[float]] = {}
    for rep in reps:
        d = rep["draft_ms"]
        for path in ("before", "after"):
            out.setdefault(f"{path}: K=1 T={hi} / K=1 T={lo}", []).append(d[f"{path},K=1,T={hi}"] / d[f"{path},K=1,T={lo}"])
            for k in (k for k in modes if k > 1):
                out.setdefault(f"{path}: K={k} T={hi} / K=1 T={hi}", []).append(
                    d[f"{path},K={k},T={hi}"] / d[f"{path},K=1,T={hi}"])
        a = rep["attention_ms"]
        out.setdefault(f"attention alone: K={kmax} T={hi} / K=1 T={hi}", []).append(
            a[f"K={kmax},T={hi}"] / a[f"K=1,T={hi}"])
        for k in (k for k in modes if k > 1):  # the K = 1 round is the same either way: folding only changes K > 1
            out.setdefault(f"folded: K={k} T={hi} / K=1 T={hi}", []).append(
                d[f"folded,K={k},T={hi}"] / d[f"after,K=1,T={hi}"])
        if kmax > 1:
            out.setdefault(f"folded attention alone: K={kmax} T={hi} / K=1 T={hi}", []).append(
                a[f"folded,K={kmax},T={hi}"] / a[f"K=1,T={hi}"])
            out.setdefault(f"speedup: K={kmax} T={hi} folded / after", []).append(
                d[f"folded,K={kmax},T={hi}"] / d[f"after,K={kmax},T={hi}"])
        out.setdefault(f"after minus attention: K={kmax} / K=1 at T={hi}", []).append(
            (d[f"after,K={kmax},T={hi}"] - a[f"K={kmax},T={hi}"]) / (d[f"after,K=1,T={hi}"] - a[f"K=1,T={hi}"]))
        out.setdefault(f"speedup: K={kmax} T={hi} before / after", []).append(
            d[f"before,K={kmax},T={hi}"] / d[f"after,K={kmax},T={hi}"])
        out.setdefault(f"verify: T={hi} / T={lo}", []).append(rep["verify_ms"][hi] / rep["verify_ms"][lo])
        out.setdefault(f"verify: concatenating / in-place cache at T={hi}", []).append(
            rep["verify_concat_ms"][hi] / rep["verify_ms"][hi])
        # shares of the verify with HF's concatenating cache, where both copies happen
        out.setdefault(f"verify: cache copy share at T={hi}", []).append(
            rep["cache_cat_ms"][hi] / rep["verify_concat_ms"][hi])
        out.setdefault(f"verify: kv head repeat share at T={hi}", []).append(
            rep["kv_repeat_ms"][hi] / rep["verify_concat_ms"][hi])
    return out


CLI = Command("bench draft", __name__, BenchDraftConfig, __doc__)


def main(argv=None) -> Result:
    return CLI.main(argv, _run)


def _run(cfg: BenchDraftConfig, opts) -> Result:
    result = run(cfg, progress=not opts.quiet)
    print(report(result))
    return result


if __name__ == "__main__":
    main()
