"""Real pretrained targets: the theory measured on Qwen2.5-Coder-0.5B-Instruct and SmolLM2-135M-Instruct.

``mfd real --out DIR`` (default ``results/real``) runs, on the targets shipped in pip wheels
(``mfd target list``; materialised once under results/targets):

* ``prompts/``: the prompt sets for real targets (:mod:`mfd_theory.llm.training.real_prompts`):
  code (HumanEval for evaluation only; training and calibration prompts from the standard
  library) and prose (instructions from the standard library's documentation), split by source
  module, with their hashes in ``manifest.json``;
* ``lossless/<target>.json``: every decoding method against Hugging Face greedy ``generate`` on
  evaluation prompts of both domains, one request each and as one batch, with a drafter that
  replays the target's own text (long accepted paths) and a random DFlash drafter of the target
  (the real drafter's code path); and the walk's draws at T = 1 against the target's exact
  distribution over one verified tree (chi-square);
* ``ceiling/<target>/``: the target's own ceiling (what ``mfd ceiling`` measures) on the first
  ``--prompts-per-domain`` evaluation prompts of each domain at each temperature: the oracle tree,
  the product tree of the target's marginals, fitted K-mode mixtures (mixture and best-mode
  trees), exact coverage by N, the product tree's dead share with every node's P(s) from the
  target itself beside the share a sample-count estimate gives, and the block's total correlation;
  one file per prompt and temperature (a rerun resumes), pooled into ``ceiling.json``;
* ``real.json``: everything the report block shows, as a Result.

The config lives here (no torch import); the work is in :mod:`mfd_theory.runs.experiments.real`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mfd_theory.ceiling_stats import SCORERS
from mfd_theory.configs.options import budgets_opt, Checked, Command, figure_option, opt, seed_opt, wrote, numerics_opt
from mfd_theory.shipped import SHIPPED

__all__ = ["RealConfig", "main"]

STAGES = ("prompts", "lossless", "ceiling")


@dataclasses.dataclass(frozen=True)
class RealConfig(Checked):
    """Defaults (``--preset default``): the full check, over an hour on 2 CPU cores; ``--preset reproduce``
    is what mfd reproduce runs (experiments/README.md says how each is sized)."""

    targets: tuple[str, ...] = opt(tuple(SHIPPED), "shipped targets to measure, the first is the main one",
                                   choices=tuple(SHIPPED))
    stages: tuple[str, ...] = opt(STAGES, "what to run (prompts always runs first when another stage needs it)",
                                  choices=STAGES)
    seed: int = seed_opt("random seed of the samples and the fits")
    threads: int = opt(2, "torch CPU threads", ge=1)
    numerics: str | None = numerics_opt()
    # the ceiling
    prompts_per_domain: int = opt(12, "evaluation prompts per domain (code: HumanEval; prose) the ceiling "
                                      "measures, the first n after a shuffle with seed 0", ge=2)
    temperatures: tuple[float, ...] = opt((1.0, 0.7), "sampling temperatures of the ceiling, each > 0", gt=0)
    block_length: int = opt(8, "L, tokens of a block (a drafter of block size 9 drafts 8)", ge=1)
    budgets: tuple[int, ...] = budgets_opt((16, 32, 64, 128), "tree sizes N")
    modes: tuple[int, ...] = opt((1, 2, 4, 8), "K of the fitted mixtures (1, the product tree, included)", ge=1)
    scorers: tuple[str, ...] = opt(("mixture", "best_mode"), "how a fitted mixture becomes a tree",
                                   choices=tuple(SCORERS))
    samples: int = opt(64, "paths sampled per prompt and temperature to fit on (as many again to check)", ge=2)
    dead_eps: float = opt(1e-3, "a node is dead when its target prefix probability is <= this", gt=0, lt=1)
    dead_at: int = opt(64, "tree size at which the product tree's dead share is measured", ge=1)
    lookahead: int = opt(64, "frontier nodes the oracle search fetches per forward beside the one it needs", ge=0)
    fit_restarts: int = opt(1, "EM restarts per fitted mixture", ge=1)
    fit_iters: int = opt(40, "EM iterations per fitted mixture, at most", ge=1)
    # the lossless check
    lossless_prompts: int = opt(4, "evaluation prompts of the lossless check (half code, half prose)", ge=1)
    lossless_tokens: int = opt(64, "new tokens per prompt in the lossless check", ge=1)
    lossless_budget: int = opt(64, "tree size N in the lossless check", ge=1)
    lossless_random_tokens: int = opt(0, "new tokens per prompt the random DFlash drafter decodes in the lossless "
                                         "check (0: --lossless-tokens); its trees are rejected at the root almost "
                                         "every round, so each round repeats one event", ge=0)
    walk_draws: int = opt(20000, "walks of one verified tree at T = 1 for the chi-square check", ge=100)

    def validate(self) -> None:
        for name in ("targets", "stages", "temperatures", "budgets", "modes", "scorers"):
            vals = getattr(self, name)
            if not vals:
                raise ValueError(f"--{name}: give at least one")
            if len(set(vals)) != len(vals):
                raise ValueError(f"--{name}: each value once, got {','.join(map(str, vals))}")
        if 1 not in self.modes:
            raise ValueError(f"--modes: must include 1 (the product tree every gain is against), got "
                             f"{','.join(map(str, self.modes))}")


CLI = Command("real", __name__, RealConfig, __doc__, out="results/real", models=True, extras=(figure_option(
    "also draw the first target's ceiling (coverage of each tree against N) into this file, a .png, .pdf or .svg"),))


def main(argv: list[str] | None = None):
    """``mfd real``; returns the Result."""
    return CLI.main(argv, _run)


def _run(config: RealConfig, opts):
    from mfd_theory.shipped import check_target

    for name in config.targets:
        check_target(name, "--targets")
    from mfd_theory.runs.experiments.real import run

    res = run(config, opts.out, progress=not opts.quiet)
    if opts.figure and "ceiling" in config.stages:
        from mfd_theory.figures import save_figure
        from mfd_theory.figures.real import real_ceiling_figure

        existed = Path(opts.figure).exists()
        wrote(save_figure(real_ceiling_figure(res), opts.figure), existed)
    return res
