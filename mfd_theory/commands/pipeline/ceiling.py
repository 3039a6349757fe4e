"""What a multi-future drafter could gain on your target, measured on the target alone, before training.

``mfd ceiling --target DIR --prompts FILE.jsonl ... --out DIR`` (the prompt formats of ``mfd
eval``) samples blocks from your target at each temperature and measures, per prompt and data set:
the target's oracle tree (its exact top-N prefixes), the product tree of its own per-position
marginals (the best a perfect DFlash / DDTree drafter ranks), the trees of K-mode mixtures fitted to
its exact conditionals along the samples (what a perfect K-mode drafter ranks), their exact
coverage with a Monte-Carlo check, the block's total correlation and the share of it each K
captures, and the product tree's dead nodes. It writes ``ceiling.json`` (every prompt's record and
the pooled tables) and one file per prompt and temperature under ``DIR/prompts/`` (a rerun with
the same options reuses them), and prints the table; docs/ceiling.md says how to read it. The
config lives here (no torch import); the work is in :mod:`mfd_theory.runs.pipeline.ceiling`.
"""

from __future__ import annotations

import dataclasses

from mfd_theory.ceiling_stats import SCORERS
from mfd_theory.configs.options import budgets_opt, Command, opt
from mfd_theory.configs.pipeline.local_target import PROMPT_FORMAT, TargetOptions, check_target_dir

__all__ = ["CeilingConfig", "main"]


@dataclasses.dataclass(frozen=True)
class CeilingConfig(TargetOptions):
    prompts: tuple[str, ...] = opt((), f"JSONL prompt files (one data set each; a multi-turn prompt's first turn): "
                                       f"{PROMPT_FORMAT}", required=True, split=False, empty=True)
    temperatures: tuple[float, ...] = opt((1.0, 0.7), "sampling temperatures T, each > 0 (at T = 0 every tree is "
                                                       "the greedy chain; 0.7 is the temperature MFD's training "
                                                       "data is sampled at)", gt=0)
    block_length: int = opt(15, "L, the tokens of a block (a drafter of block size 16 drafts 15)", ge=1)
    budgets: tuple[int, ...] = budgets_opt((1, 4, 16, 64), "tree sizes N")
    modes: tuple[int, ...] = opt((1, 2, 4), "K of the fitted mixtures; 1 (the product tree every gain is against) "
                                            "must be among them", ge=1)
    scorers: tuple[str, ...] = opt(("mixture",), "how a fitted mixture becomes a tree (mixture: its own top-N "
                                                 "prefixes, MFD's tree; best_mode: the top-N by its best mode, "
                                                 "the released MFD drafters' tree)", choices=tuple(SCORERS))
    samples: int = opt(512, "paths sampled per prompt and temperature to fit on (as many again check coverage by "
                            "Monte Carlo and score the fits)", ge=2)
    max_prompts: int | None = opt(None, "per data set, the first n prompts after a shuffle with seed 0",
                                  unset="all", ge=1)
    enable_thinking: bool = opt(False, "chat template with thinking enabled")
    top_k: int = opt(256, "tokens of each sampled path's conditional kept for the mixture fit (the rest of its "
                          "mass shaped like the marginals; the marginals and entropies use the whole row)", ge=1)
    dead_eps: float = opt(1e-3, "a node is dead when its target prefix probability is <= this", gt=0, lt=1)
    dead_at: int = opt(64, "tree size at which the product tree's dead share is measured", ge=1)
    batch: int = opt(64, "paths sampled per forward (the context's cache rows are repeated this many times)", ge=1)
    max_tokens: int = opt(1024, "rows per tree forward (the oracle search and the trees' exact coverage)", ge=2)
    lookahead: int = opt(32, "frontier nodes the oracle search fetches per forward beside the one it needs", ge=0)
    fit_restarts: int = opt(2, "EM restarts per fitted mixture", ge=1)
    fit_iters: int = opt(60, "EM iterations per fitted mixture, at most", ge=1)

    def validate(self) -> None:
        super().validate()
        for name in ("modes", "budgets", "temperatures", "scorers"):
            vals = getattr(self, name)
            if len(set(vals)) != len(vals):
                raise ValueError(f"--{name}: each value once, got {','.join(map(str, vals))}")
        if 1 not in self.modes:
            raise ValueError(f"--modes: must include 1 (the product tree every gain is against), got "
                             f"{','.join(map(str, self.modes))}")


CLI = Command("ceiling", __name__, CeilingConfig, __doc__, out=None,
              out_help="output directory (ceiling.json, one file per prompt and temperature)", models=True)


def main(argv: list[str] | None = None):
    """``mfd ceiling``; returns the Result."""
    return CLI.main(argv, _run)


def _run(config: CeilingConfig, opts):
    from mfd_theory.llm.training.prompts import read_prompt_files, shuffle_take

    prompts = shuffle_take(read_prompt_files(config.prompts), config.max_prompts)
    check_target_dir(config.target)
    from mfd_theory.runs.pipeline.ceiling import run

    return run(config, prompts, opts.out, progress=not opts.quiet)
