"""Drafters trained here for a real target, and the paper's comparison on it, replicated over seeds.

``mfd real-drafters --out DIR`` (default ``results/real-drafters``) runs, on a shipped target
(``mfd target list``; Qwen2.5-Coder-0.5B-Instruct by default):

* ``prompts/``: the real-target prompt sets (``mfd real``'s: HumanEval for evaluation only, the
  standard library's code and prose for training and calibration, split by source module), and the
  files this run reads: ``train.jsonl`` (the first ``--train-prompts`` of each domain's training
  split), ``calib.jsonl`` (``--calibration-prompts`` of each calibration split, never evaluated and
  never distilled), ``code.jsonl`` / ``prose.jsonl`` (``--eval-prompts`` of each evaluation split);
* ``distill/``: the target's answers to the training prompts (``mfd distill``, batched, sampled at
  ``--distill-temperature`` with top-p / top-k as the released MFD drafters' data);
* ``references/`` (``--references N``): N standard-library functions of the training split as
  teacher-forced answers (the code prompt's instruction answered by the function's own source;
  one target forward each, no generation; a function sharing a 12-token span with HumanEval is
  dropped), added to the distilled answers for every drafter;
* ``drafters/s<seed>/<kind>/``: each kind (``product`` K = 1, ``mfd-k2``, ``mfd-k4``, ``dartree``)
  for each seed, trained on the same data, steps and batches, with one target-feature pass
  shared by all of them, over a reduced draft vocabulary of the ``--draft-vocab`` tokens most
  frequent in the answers (its coverage recorded);
* ``eval/s<seed>/``: ``mfd eval`` of that seed's drafters on both evaluation sets at each
  temperature, every method at every budget, each cell's budget chosen by the theory from the
  calibration prompts before the first evaluated prompt (``predictions.json``), tau and the
  speedup over plain decoding timed in the same run;
* ``real_drafters.json``: per seed the training times and rows, and the replicated verdicts:
  each MFD tree (both scorers) and the DARTree drafter against the better product method
  (chain or DDTree, as the theory predicted), each at the budget seed 0's calibration chose,
  paired over the prompts, one observation per seed (``mfd_theory.stats``); each MFD tree against
  the product drafter's DDTree tree of the same N (what the target's ceiling predicts, the reach
  table of the report); the best-mode tree against the mixture tree. ``--figure FILE`` draws the
  gains over the product drafter with their intervals.

``--stages recipe`` (``--preset recipe``) runs the recipe comparison instead (or as well): on the
same distilled data and feature pass, a product drafter for each ``--recipes`` variant and each
of ``--recipe-seeds`` seeds under ``recipes/<variant>/s<seed>/``; the target's greedy answers to
``--heldout-prompts`` held-out prompts per domain (``heldout/``); each drafter's greedy tau on them
for the chain and DDTree at every ``--budgets`` N, from one target forward per answer
(:mod:`mfd_theory.llm.measure.heldout`, exactly what a T = 0 decode measures); and each variant
against ``tokens``, paired over the held-out prompts and replicated over the seeds, with its
training minutes, into ``real_recipe.json``.

A rerun resumes: finished steps are reused (``steps.json``), a drafter's training continues from
its last checkpoint. The config lives here (no torch import); the work is in
:mod:`mfd_theory.runs.experiments.real_drafters`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mfd_theory.configs.options import budgets_opt, Checked, Command, figure_option, opt, wrote, numerics_opt
from mfd_theory.shipped import SHIPPED

__all__ = ["KINDS", "RealDraftersConfig", "main"]

#: the drafter kinds: name -> (K, train-drafter kind)
KINDS = {"product": (1, "dflash"), "mfd-k2": (2, "dflash"), "mfd-k4": (4, "dflash"), "dartree": (1, "dartree")}

#: the recipe stage's variants of the product drafter's recipe: name -> the options it changes
#: ("tokens": the run's own recipe, the one every other is compared with)
RECIPES = {"tokens": {}, "soft": {"soft_share": None}, "random-init": {"init_layers": "random"},
           "block16": {"block_size": 16}}
STAGES = ("main", "recipe")


@dataclasses.dataclass(frozen=True)
class RealDraftersConfig(Checked):
    """Defaults (``--preset default``): what ``make reproduce`` runs, sized for 2 CPU cores
    (experiments/README.md says how)."""

    target: str = opt(tuple(SHIPPED)[0], "a shipped target's name (mfd target list) or a local Hugging Face "
                                         "target directory with its tokenizer")
    seeds: int = opt(3, "drafter seeds 0..R-1 (every kind trained and evaluated once per seed); the verdicts "
                        "are replicated over them", ge=1)
    threads: int = opt(2, "torch CPU threads", ge=1)
    numerics: str | None = numerics_opt()
    # data
    train_prompts: int = opt(96, "training prompts per domain (code, prose) the target answers", ge=1)
    answer_tokens: int = opt(96, "new tokens per distilled answer, at most", ge=8)
    distill_temperature: float = opt(0.7, "sampling temperature of the distilled answers (0: greedy)", ge=0)
    distill_top_p: float = opt(0.8, "top-p of the distilled answers", gt=0, le=1)
    distill_top_k: int = opt(20, "top-k of the distilled answers (0: off)", ge=0)
    distill_batch: int = opt(64, "answers generated at once", ge=1)
    references: int = opt(0, "standard-library functions of the training split added to the training data as "
                             "teacher-forced answers (each function's own source, read by one target forward, no "
                             "generation; 0: the distilled answers alone)", ge=0)
    reference_tokens: int = opt(192, "answer tokens kept per reference function", ge=8)
    # drafters
    kinds: tuple[str, ...] = opt(tuple(KINDS), "drafter kinds (product: K = 1, chain and DDTree; mfd-kK: MFD "
                                 "with K modes, mixture and best-mode trees; dartree: Domino)", choices=tuple(KINDS))
    block_size: int = opt(8, "drafter block size (it drafts block_size - 1 tokens)", ge=2)
    layers: int = opt(1, "draft layers", ge=1)
    target_layer_ids: tuple[int, ...] = opt((1, 11, 21), "target layers whose hidden states the drafter fuses", ge=0)
    draft_vocab: int = opt(16000, "draft vocabulary: the N tokens most frequent in the answers (0: all)", ge=0)
    init_layers: str = opt("target", "draft layers start random or as copies of the target's last layers",
                           choices=("random", "target"))
    steps: int = opt(300, "optimizer steps per drafter", ge=1)
    batch_size: int = opt(8, "sequences per step", ge=1)
    blocks_per_seq: int = opt(8, "training blocks per sequence", ge=1)
    lr: float = opt(2e-3, "peak learning rate", gt=0)
    feature_store: str = opt("ram", "where the target's hidden states for training are kept: ram (the target's dtype) "
                                    "or bf16-memmap (a bfloat16 file under the run's folder, half the bytes, on disk; "
                                    "features rounded to bfloat16)", choices=("ram", "bf16-memmap"))
    feature_cap_mb: int = opt(16384, "refuse to build features larger than this (MiB, in the chosen store)", ge=1)
    # evaluation
    eval_prompts: int = opt(4, "evaluation prompts per domain (code: HumanEval; prose)", ge=2)
    calibration_prompts: int = opt(1, "calibration prompts per domain (the theory's budget choice and the "
                                      "predictions; never evaluated)", ge=1)
    eval_tokens: int = opt(32, "new tokens per evaluated answer", ge=1)
    budgets: tuple[int, ...] = budgets_opt((16,), "tree sizes N the theory chooses among")
    temperatures: tuple[float, ...] = opt((0.0, 1.0), "decoding temperatures (0 = greedy)", ge=0)
    passes: int = opt(1, "timing passes of each evaluated decode", ge=1)
    # the recipe stage
    stages: tuple[str, ...] = opt(("main",), "what to run: main (every kind, seed and evaluation above), "
                                  "recipe (product drafters of each --recipes variant, measured by their greedy "
                                  "tau on held-out prompts)", choices=STAGES)
    recipes: tuple[str, ...] = opt(tuple(RECIPES), "recipe variants of the product drafter (tokens: this run's "
                                   "options; soft: trained on the target's top-k distribution, --soft-share; "
                                   "random-init: draft layers start random; block16: block size 16)",
                                   choices=tuple(RECIPES))
    recipe_seeds: int = opt(2, "seeds 0..R-1 of every recipe variant", ge=1)
    soft_share: float = opt(1.0, "the soft recipe's share of each position's loss on the target's distribution "
                                 "(1: self-distillation alone; 0: the tokens alone)", ge=0, le=1)
    soft_top_k: int = opt(32, "the soft recipe's target distribution: its top-k tokens, renormalised", ge=1)
    heldout_prompts: int = opt(8, "held-out prompts per domain of the recipe stage (calibration split, after "
                                  "the calibration prompts: never distilled, never evaluated)", ge=2)
    heldout_tokens: int = opt(64, "greedy answer tokens per held-out prompt", ge=2)

    def validate(self) -> None:
        for name in ("kinds", "budgets", "temperatures", "target_layer_ids", "stages", "recipes"):
            vals = getattr(self, name)
            if not vals:
                raise ValueError(f"--{name.replace('_', '-')}: give at least one")
            if len(set(vals)) != len(vals):
                raise ValueError(f"--{name.replace('_', '-')}: each value once, got {','.join(map(str, vals))}")
        if "recipe" in self.stages and "tokens" not in self.recipes:
            raise ValueError("--recipes: must include tokens (the recipe every variant is compared with)")
        if "product" not in self.kinds:
            raise ValueError("--kinds: must include product (the drafter every gain is measured against)")
        if self.draft_vocab == 1:
            raise ValueError("--draft-vocab: a draft vocabulary needs at least 2 tokens (0: the whole vocabulary)")


CLI = Command("real-drafters", __name__, RealDraftersConfig, __doc__, out="results/real-drafters", models=True,
              extras=(figure_option("also draw the replicated gains over the product drafter, with their intervals, "
                                    "into this file, a .png, .pdf or .svg (2 seeds or more)"),))


def main(argv: list[str] | None = None):
    """``mfd real-drafters``; returns the Result."""
    return CLI.main(argv, _run)


def _run(config: RealDraftersConfig, opts):
    from mfd_theory.shipped import check_target

    check_target(config.target, "--target")
    from mfd_theory.runs.experiments.real_drafters import run

    res = run(config, KINDS, opts.out, progress=not opts.quiet, recipes=RECIPES)
    if opts.figure and res.name == "real_drafters" and res.data.get("verdicts"):
        from mfd_theory.figures import save_figure
        from mfd_theory.figures.real import real_drafters_gains_figure

        existed = Path(opts.figure).exists()
        wrote(save_figure(real_drafters_gains_figure(res), opts.figure), existed)
    return res
