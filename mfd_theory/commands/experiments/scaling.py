"""The data-scaling curve: a drafter's held-out tau on all of HumanEval against its training tokens.

``mfd scaling --out DIR`` (default ``results/scaling``) trains each ``--kinds`` recipe (a ``mfd
train-drafter`` preset: the release's K = 1 and MFD K = 4 by default) on the first ``--sizes``
tokens of the same corpus (each size a prefix of the next; the target's features of the largest
are computed once into ``--features-dir`` and read by every smaller run), ``--seeds`` seeds at each
size and ``--largest-seeds`` at the largest, and measures each with ``mfd tau`` (greedy tau at
``--budget`` on all 164 HumanEval problems, answers cached in ``--cache-dir``). Every size trains
for its preset's steps (the release's 300 steps of 8 sequences), so the curve measures what more
data buys at a fixed training budget (a smaller set is seen more often); a preset of other steps
asks the other question. Each step runs as its own ``mfd`` process (so that each has its own
numerics), into

* ``drafters/<kind>-<tokens>-s<seed>/``: the train-drafter run (a rerun resumes from its checkpoints);
* ``tau/<kind>-<tokens>-s<seed>/tau.json``: its tau record (kept once written);
* ``scaling.json``: per drafter its data, training and per-problem tau, rewritten after each drafter
  is measured (the ones still to come listed as pending; ``--assemble`` writes it and does nothing
  else); the ``real-scaling`` report block draws the curve from it and gives MFD's gain over the
  K = 1 drafter's DDTree at each size as a verdict (paired over the problems, over seeds where a
  size has several).

``--reuse RUN=TAU`` puts a run made elsewhere (and the tau record that measured it) in the place of
the job of the same kind, size and seed. The config lives here (no torch import); the work is in
:mod:`mfd_theory.runs.experiments.scaling`.
"""

from __future__ import annotations

import dataclasses

from mfd_theory.configs.options import Checked, Command, opt, switch
from mfd_theory.shipped import SHIPPED

__all__ = ["CLI", "ScalingConfig", "main"]

_NUMERICS = ("fast", "reproducible")


@dataclasses.dataclass(frozen=True)
class ScalingConfig(Checked):
    """Defaults (``--preset default``): the curve the drafters issue asks for (four sizes, each 4x
    the last, up to 2 M tokens); ``--preset here`` is the one a 2-core CPU ran (up to 200 k)."""

    target: str = opt(tuple(SHIPPED)[0], "a shipped target's name (mfd target list) or a local Hugging Face "
                                         "target directory with its tokenizer")
    data: str = opt("results/corpus", "the corpus written by mfd corpus: every drafter trains on its instructions")
    features_dir: str = opt("results/scaling/features", "where the target's features of the training data are kept "
                                                       "and shared by every run (empty: each run computes its own)")
    kinds: tuple[str, ...] = opt(("release-k1", "release-mfd4"), "train-drafter presets, one drafter kind each "
                                 "(experiments/train_drafter/); one must train a K = 1 drafter, the one MFD's gain "
                                 "is measured against")
    sizes: tuple[int, ...] = opt((31250, 125000, 500000, 2000000), "training tokens: each drafter trains on the "
                                 "first N tokens of the corpus (whole sequences)", ge=1)
    seeds: int = opt(1, "seeds 0..R-1 of each kind at every size but the largest", ge=1)
    largest_seeds: int = opt(3, "seeds 0..R-1 of each kind at the largest size", ge=1)
    budget: int = opt(32, "the tree budget N at which tau is read (DDTree and MFD trees of N nodes)", ge=1)
    tau_preset: str = opt("release", "the mfd tau preset (experiments/tau/) that measures each drafter")
    cache_dir: str = opt("results/measure/answers", "where mfd tau keeps the target's answers")
    threads: int = opt(2, "torch CPU threads of every step", ge=1)
    train_numerics: str | None = opt(None, "numerics of the training steps (unset: the preset's)",
                                     choices=_NUMERICS, unset="each train-drafter preset's")
    tau_numerics: str | None = opt(None, "numerics of the tau steps (unset: the preset's)", choices=_NUMERICS,
                                   unset="the tau preset's")
    reuse: tuple[str, ...] = opt((), "RUN_DIR=TAU_JSON: a train-drafter run made elsewhere and the tau record that "
                                 "measured it, in place of the job of its kind, size and seed", split=False, empty=True)

    def validate(self) -> None:
        from mfd_theory.configs.options import preset_names

        for name in ("kinds", "sizes"):
            vals = getattr(self, name)
            if len(set(vals)) != len(vals):
                raise ValueError(f"--{name}: each value once, got {','.join(map(str, vals))}")
        if not self.kinds:
            raise ValueError("--kinds: give at least one train-drafter preset")
        if len(self.sizes) < 2:
            raise ValueError(f"--sizes: a curve needs at least two sizes, got {len(self.sizes)}")
        known = preset_names("train_drafter")
        bad = [k for k in self.kinds if k not in known]
        if bad:
            raise ValueError(f"--kinds: no train-drafter preset {', '.join(bad)} (choose among {', '.join(known)})")
        from mfd_theory.runs.experiments.scaling import preset_kind

        if "K=1" not in {preset_kind(k) for k in self.kinds}:
            raise ValueError("--kinds: one preset must train a K = 1 drafter (MFD's gain is measured against it)")
        if self.tau_preset not in preset_names("tau"):
            raise ValueError(f"--tau-preset: no tau preset {self.tau_preset!r} (choose among "
                             f"{', '.join(preset_names('tau'))})")
        for r in self.reuse:
            if "=" not in r:
                raise ValueError(f"--reuse: give RUN_DIR=TAU_JSON, got {r!r}")


CLI = Command("scaling", __name__, ScalingConfig, __doc__, out="results/scaling", models=True, extras=(switch(
    "assemble", "train and measure nothing: write scaling.json from the drafters already measured (the others "
                "listed as pending), as the run itself does after each one"),), examples=(
    "mfd scaling --data results/corpus  # the issue's curve: four sizes up to 2 M tokens, K = 1 and MFD K = 4",
    "mfd scaling --preset here --data results/corpus-qwen  # the curve a 2-core CPU ran (up to 200 k tokens)",
))


def main(argv: list[str] | None = None):
    """``mfd scaling``; returns the Result (``scaling.json``)."""
    return CLI.main(argv, _run)


def _run(config: ScalingConfig, opts):
    from mfd_theory.shipped import check_target

    check_target(config.target, "--target")
    from mfd_theory.runs.experiments.scaling import run

    res = run(config, opts.out, quiet=opts.quiet, assemble_only=opts.assemble)
    from mfd_theory.report.scaling import curve_text

    print(curve_text(res.data))
    return res


if __name__ == "__main__":
    main()
