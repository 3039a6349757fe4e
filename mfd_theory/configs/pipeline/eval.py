"""tau and speedup of drafters on prompt files under DDTree's protocol, every row predicted first.

``mfd eval --target DIR --drafter RUN ... --prompts FILE.jsonl ... --out EVAL`` decodes every
prompt with every method the drafters can run (``ar`` always) at every budget and temperature and
writes ``eval.json``, ``per_prompt.jsonl`` and a figure per data set; before the first evaluated
prompt it measures the round cost model and the acceptance on calibration prompts and writes
``predictions.json``. It runs on one process or under
``torchrun --nproc_per_node P -m mfd_theory.cli eval ...`` with the same rows.
This module holds its config (no torch import); the input checks and the entry point are in
:mod:`mfd_theory.runs.pipeline.entry`, the work in :mod:`mfd_theory.runs.pipeline.eval`. The
three commands for your own target are described in docs/own-target.md.
"""

from __future__ import annotations

import dataclasses

from mfd_theory.configs.options import budgets_opt, Command, opt
from mfd_theory.configs.pipeline.local_target import PROMPT_FORMAT, TargetOptions

__all__ = ["EvalConfig", "METHODS", "SCORERS", "CLI"]

#: the decoding methods (those of :mod:`mfd_theory.llm.decoding.generate`, kept here so that the
#: config needs no torch import; a test checks that they agree)
METHODS = ("ar", "chain", "ddtree", "mfd", "dartree")
#: method mfd's scorers (:data:`mfd_theory.llm.decoding.trees.SCORERS`, kept here for the same reason)
SCORERS = ("mixture", "best_mode")


@dataclasses.dataclass(frozen=True)
class EvalConfig(TargetOptions):
    drafter: tuple[str, ...] = opt((), "drafter checkpoint (or train-drafter run) directory, or a shipped drafter's name (mfd drafter list); repeat for several",
                                   required=True, split=False, empty=True)
    prompts: tuple[str, ...] = opt((), f"JSONL prompt files (one data set each): {PROMPT_FORMAT}", required=True,
                                   split=False, empty=True)
    methods: tuple[str, ...] = opt(("ar", "chain", "ddtree", "mfd"), "methods to run, ar always among them",
                                   choices=METHODS)
    ddtree_on_mfd: str = opt("true", "also run ddtree on each K > 1 drafter (the product tree over its "
                                     "per-position marginals: the ablation that separates mixture training from "
                                     "the mixture tree)", choices=("true", "false"))
    scorers: tuple[str, ...] = opt(("mixture",), "how mfd ranks a tree's prefixes, each a cell of its own: mixture "
                                   "(sum_k pi_k Q_k, the package's MFD tree) and / or best_mode (max_k Q_k, the "
                                   "released MFD drafters' rule, which reads no mode weights)", choices=SCORERS)
    budgets: tuple[int, ...] = budgets_opt((16, 32, 64), "tree budgets (nodes) for ddtree and mfd")
    temperatures: tuple[float, ...] = opt((0.0, 1.0), "sampling temperatures (0 = greedy)", ge=0)
    max_new_tokens: int = opt(128, "answer length cap per turn", ge=1)
    max_prompts: int | None = opt(None, "per data set, the first n prompts after a shuffle with seed 0",
                                  unset="all", ge=1)
    enable_thinking: bool = opt(False, "chat template with thinking enabled")
    passes: int = opt(3, "timing passes (speedups carry their spread)", ge=1)
    profile_prompts: int = opt(2, "calibration prompts that also time the round cost model (at most all of them; "
                                  "0: no profile and no prediction)", ge=0)
    calibration_prompts: str | None = opt(None, "a JSONL file of prompts decoded before the evaluation to predict "
                                                "every row's tau and speedup",
                                          unset="the first --calibration-count prompts of each data set (after "
                                                "the shuffle), which are then not evaluated")
    calibration_count: int = opt(8, "calibration prompts per data set (or taken from --calibration-prompts)", ge=1)
    format: str = opt("mfd", "mfd: eval.json, per_prompt.jsonl and figures; spec-bench: also every method's "
                             "answers in Spec-Bench's model_answer JSONL layout, OUT/spec_bench/run_<pass>/"
                             "<model_id>.jsonl (one file per timing pass, as Spec-Bench keeps one per run). "
                             "Their accept_lengths count the bonus token (tokens per target call, our tau); "
                             "new_tokens and wall_time are decode only (the prefill's first token and time left "
                             "out, as our speedup does). Spec-Bench's speedup is the mean per-answer tokens/s "
                             "over the baseline's (each row's speedup_spec_bench); ours, speedup, pools tokens "
                             "and time over the answers", choices=("mfd", "spec-bench"))
    batch_size: int = opt(1, "requests decoded together (1: one at a time, DDTree's protocol). Above 1 every cell "
                             "decodes the first turns of its prompts B at a time in one target forward per round, "
                             "and rows report throughput over all requests against batched AR at the same B", ge=1)
    budget_policy: str = opt("per_request", "with --batch-size above 1: per_request (every tree --budgets nodes), "
                                            "global (B times the budget per round, spent on the global top "
                                            "prefixes), off (batched AR), auto (the policy and size the batch cost "
                                            "model, measured on the calibration prompts before the evaluation, "
                                            "predicts fastest)", choices=("per_request", "global", "off", "auto"))

    def validate(self) -> None:
        super().validate()
        if self.batch_size == 1 and self.budget_policy != "per_request":
            raise ValueError(f"--budget-policy: {self.budget_policy} shares a budget across a batch; it needs "
                             "--batch-size above 1")
        if self.batch_size > 1:
            if "dartree" in self.methods:
                raise ValueError("--methods: dartree grows its trees depth by depth and is not batched; leave it "
                                 "out with --batch-size above 1")
            if self.format != "mfd":
                raise ValueError("--format: spec-bench answer files are written for one-at-a-time decoding "
                                 "(--batch-size 1)")
        if "mfd" not in self.methods and tuple(dict.fromkeys(self.scorers)) != ("mixture",):
            raise ValueError(f"--scorers: {','.join(self.scorers)} ranks method mfd's trees; add mfd to --methods "
                             f"(now {','.join(self.methods)})")
        if self.profile_prompts == 0 and self.calibration_prompts is not None:
            raise ValueError("--calibration-prompts: needs --profile-prompts > 0 (nothing is predicted without "
                             "the round profile)")

    def plan(self) -> tuple[list[str], list[int], list[float]]:
        """(methods, ar first and each once; budgets, sorted, each once; temperatures)."""
        methods = list(dict.fromkeys(self.methods))
        if "ar" not in methods:  # speedups and matches_ar are relative to ar
            methods = ["ar", *methods]
        return methods, sorted(set(self.budgets)), list(self.temperatures)


CLI = Command("eval", __name__, EvalConfig, __doc__, out=None,
              out_help="output directory (eval.json, per_prompt.jsonl, figures)", models=True)


def stored_options(config: EvalConfig, opts) -> dict:
    """The options as the result files record them: every field, ``out`` and ``quiet``, the lists
    as the run uses them."""
    methods, budgets, temps = config.plan()
    return {**{k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(config).items()},
            "out": str(opts.out), "quiet": opts.quiet, "methods": methods, "budgets": budgets, "temperatures": temps}


def calibration_sets(prompts: list, config: EvalConfig) -> dict:
    """{data set: calibration prompts}: the first ``--calibration-count`` prompts of each data set
    of the shuffled ``prompts`` (held back from the evaluation), or, with
    ``--calibration-prompts``, that file's first prompts under the key None (serving every data
    set). Empty when nothing is predicted (``--profile-prompts 0``)."""
    from mfd_theory.llm.training.prompts import read_prompt_files, shuffle_take

    if config.profile_prompts == 0:
        return {}
    n = config.calibration_count
    if config.calibration_prompts is not None:
        own = shuffle_take(read_prompt_files([config.calibration_prompts]), n)
        texts = {p.messages for p in prompts}
        shared = [p.id for p in own if p.messages in texts]
        if shared:
            raise ValueError(f"--calibration-prompts: {len(shared)} prompt(s) also appear in --prompts "
                             f"(ids {shared[:5]}); calibration and evaluation prompts must be disjoint")
        return {None: own}
    out = {}
    for ds in dict.fromkeys(p.dataset for p in prompts):
        group = [p for p in prompts if p.dataset == ds]
        if len(group) <= n:
            raise ValueError(f"--calibration-count: data set {ds!r} has {len(group)} prompt{'s' * (len(group) != 1)}; holding back {n} "
                             "for calibration leaves none to evaluate (lower it, or give --calibration-prompts)")
        out[ds] = group[:n]
    return out
