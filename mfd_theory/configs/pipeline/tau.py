"""Greedy tau of drafters on every prompt of a set, at full size, from one target forward per answer.

``mfd tau --target NAME --drafter DIR ... --out DIR`` answers every prompt greedily with the target
once (cached per target, numerics and prompt file), then replays each answer's T = 0 decode round by
round for every drafter, tree method and budget: by default all 164 HumanEval problems and the prose
evaluation prompts. ``--temperature 1`` does the same at T = 1 on answers the target samples with
keyed draws (a sampled decode of the answer's seed emits exactly that answer, so the replay is its
decode). With ``--timing-prompts`` it also decodes a few prompts for real and predicts
each cell's speedup over plain decoding from its round cost and its full-set tau; with
``--chimera-budget 64`` it counts the dead nodes and chimeras of every cell's 64-node trees over the
rounds of those decodes, beside the oracle tree's floor (``tau.json``).
This module holds its config (no torch import); the work is in :mod:`mfd_theory.runs.pipeline.tau`.
"""

from __future__ import annotations

import dataclasses

from mfd_theory.configs.options import Command, budgets_opt, opt
from mfd_theory.configs.pipeline.local_target import PROMPT_FORMAT, TargetOptions

__all__ = ["CLI", "TauConfig"]


@dataclasses.dataclass(frozen=True)
class TauConfig(TargetOptions):
    drafter: tuple[str, ...] = opt((), "drafter checkpoint (or train-drafter run) directory, or a shipped drafter's name (mfd drafter list); repeat for several",
                                   required=True, split=False, empty=True)
    prompts: tuple[str, ...] = opt((), f"JSONL prompt files, one data set each: {PROMPT_FORMAT}", split=False,
                                   empty=True, )
    sets: tuple[str, ...] = opt(("code", "prose"), "without --prompts: the package's evaluation sets (code: all 164 "
                                "HumanEval problems; prose: the standard library documentation's evaluation prompts)",
                                choices=("code", "prose"))
    budgets: tuple[int, ...] = budgets_opt((16, 32, 64), "tree budgets (nodes)")
    temperature: float = opt(0.0, "0: greedy answers and T = 0 decodes; > 0: answers the target samples at this "
                                  "temperature (prompt g seeded by --seed and g, as mfd distill seeds them) and the "
                                  "tau of decodes at it", ge=0)
    max_new_tokens: int = opt(256, "answer length cap", ge=1)
    batch: int = opt(16, "answers generated at once (the answers do not depend on it, up to float round-off)", ge=1)
    enable_thinking: bool = opt(False, "chat template with thinking enabled")
    timing_prompts: int = opt(0, "prompts per set also decoded for real and timed (plain decoding and every cell), "
                                 "for the round costs that turn tau into a predicted speedup (0: no timing)", ge=0)
    chimera_budget: int = opt(0, "N > 0: also the dead and chimera shares of every cell's N-node trees (the paper "
                                 "counts them at 64) over the rounds of the replayed decodes, each node's P(s) exact "
                                 "from the target at T = 1, beside the oracle tree of the same N at the same roots "
                                 "(chimeras: dead nodes that splice the oracle's paths); 0: not measured", ge=0)
    chimera_answers: int = opt(16, "with --chimera-budget: the first N answers of each set (0: all); a round costs "
                                   "tree forwards and an oracle search, so all of HumanEval takes hours on a CPU", ge=0)
    chimera_stride: int = opt(1, "with --chimera-budget: every N-th round of each answer's decode", ge=1)
    cache_dir: str = opt("results/answers", "where the target's answers are kept (one folder per target, numerics, "
                                            "prompt file, and temperature and seed when sampled)")

    def validate(self) -> None:
        super().validate()
        if 0 < self.temperature < 0.01:
            raise ValueError(f"--temperature: 0 (greedy) or at least 0.01, got {self.temperature}")


CLI = Command("tau", __name__, TauConfig, __doc__, out="results/tau", models=True, examples=(
    "mfd tau --target qwen2.5-coder-0.5b-instruct --drafter runs/k1 runs/k4  # all of HumanEval and the prose set",
    "mfd tau --target qwen2.5-coder-0.5b-instruct --drafter runs/k4 --numerics fast --timing-prompts 2  # with speed",
    "mfd tau --target /models/my-model --drafter runs/k1 --prompts eval.jsonl --budgets 32  # your prompts",
    "mfd tau --preset c3 --drafter qwen2.5-coder-0.5b-instruct-k1 --drafter qwen2.5-coder-0.5b-instruct-mfd4  # chimeras",
))
