"""What decoding returns: per-round records and per-request (or per-batch) results.

``StepRecord`` is one request's round, ``DecodeResult`` one request's output and rounds;
``BatchRound`` / ``BatchDecodeResult`` the same for a batch. Times are seconds, measured with the
device synchronised (``clock``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mfd_theory.trees import DraftTree

from mfd_theory.llm.decoding.metrics import RoundMetrics

__all__ = ["BatchDecodeResult", "BatchRound", "DecodeResult", "RoundTimes", "StepRecord", "clock"]


def clock(device: torch.device) -> float:
    """Seconds, after the device has finished its queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class RoundTimes:
    """The two sums every round record (one request's, or a batch's) derives from its five clocks."""

    t_draft: float
    t_tree: float
    t_verify: float
    t_walk: float
    t_commit: float

    @property
    def t_step(self) -> float:
        return self.t_draft + self.t_tree + self.t_verify + self.t_walk + self.t_commit

    @property
    def t_overhead(self) -> float:
        """Time outside the two forwards: tree build + mask, walk, compaction."""
        return self.t_tree + self.t_walk + self.t_commit


@dataclass
class StepRecord(RoundTimes):
    """One round of drafting, tree building, verification and commit (times in seconds)."""

    tree_size: int
    # draft tokens accepted and emitted (bonus excluded): an accepted EOS ends the round, and the
    # accepted draft tokens after it are not counted
    accepted: int
    emitted: int  # tokens this round added to the output (after EOS / max_new_tokens truncation)
    predicted: float  # exact E[accepted] for this tree under the decoding rule's conditionals
    covered_mass: float  # sum over nodes of the target's (temperature-1 when greedy) prefix probability
    dead_share: float  # share of nodes whose target prefix probability is below DEAD_EPS
    dead_splices: int  # dead nodes whose every token agrees with the same depth of a live branch
    t_draft: float
    t_tree: float
    t_verify: float
    t_walk: float
    t_commit: float
    tree: DraftTree | None = None  # kept with keep_trees=True
    node_log_cond: np.ndarray | None = None  # [N] decoding-rule conditionals, with keep_trees=True
    predicted_var: float = float("nan")  # exact Var[accepted] for this tree under the same conditionals
    # "dartree" only: seconds of the backbone pass ([0]) and of each depth's growth step ([d]);
    # they sum to t_draft up to the clock reads between them
    t_draft_depths: tuple[float, ...] = ()

    @classmethod
    def of_round(cls, m: RoundMetrics, accepted: int, emitted: int, times: dict, tree: DraftTree | None = None,
                 keep_trees: bool = False, t_draft_depths: tuple = ()) -> "StepRecord":
        """The record of a round: its tree's ``m``, its counts and ``times`` (the five ``t_*``)."""
        return cls(tree_size=m.tree_size, accepted=accepted, emitted=emitted, predicted=m.predicted,
                   covered_mass=m.covered_mass, dead_share=m.dead_share, dead_splices=m.dead_splices, **times,
                   tree=tree if keep_trees else None, node_log_cond=m.node_log_cond if keep_trees else None,
                   predicted_var=m.predicted_var, t_draft_depths=t_draft_depths)


@dataclass
class DecodeResult:
    tokens: list[int]
    method: str
    steps: list[StepRecord] = field(default_factory=list)
    prompt_len: int = 0
    t_prefill: float = 0.0
    t_total: float = 0.0
    stopped_by: str = "max_new_tokens"  # or "eos"
    scorer: str | None = None  # method "mfd": "mixture" or "best_mode" (None for the other methods)

    @property
    def tau(self) -> float:
        """Mean tokens per verification call, bonus included (the field's tau)."""
        return float(np.mean([s.accepted + 1 for s in self.steps])) if self.steps else float("nan")

    @property
    def mean_accepted(self) -> float:
        return float(np.mean([s.accepted for s in self.steps])) if self.steps else float("nan")

    @property
    def mean_predicted(self) -> float:
        return float(np.mean([s.predicted for s in self.steps])) if self.steps else float("nan")

    @property
    def mean_covered_mass(self) -> float:
        return float(np.mean([s.covered_mass for s in self.steps])) if self.steps else float("nan")

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.t_total if self.t_total > 0 else float("nan")

    def time_split(self) -> dict[str, float]:
        """Total seconds per component over all rounds (plus prefill)."""
        keys = ("t_draft", "t_tree", "t_verify", "t_walk", "t_commit")
        out = {k[2:]: float(sum(getattr(s, k) for s in self.steps)) for k in keys}
        out["prefill"] = self.t_prefill
        return out

    def overhead_share(self) -> float:
        """Share of round time spent outside the draft and verify forwards."""
        tot = sum(s.t_step for s in self.steps)
        return float(sum(s.t_overhead for s in self.steps) / tot) if tot > 0 else float("nan")

    def summary(self) -> dict[str, Any]:
        return {
            "method": self.method, "scorer": self.scorer, "new_tokens": len(self.tokens), "rounds": len(self.steps),
            "tau": self.tau, "mean_accepted": self.mean_accepted, "mean_predicted": self.mean_predicted,
            "mean_covered_mass": self.mean_covered_mass, "tokens_per_s": self.tokens_per_s,
            "mean_tree_size": float(np.mean([s.tree_size for s in self.steps])) if self.steps else 0.0,
            "dead_share": float(np.mean([s.dead_share for s in self.steps if s.tree_size])) if any(
                s.tree_size for s in self.steps) else float("nan"),
            "overhead_share": self.overhead_share(), "time_split": self.time_split(),
            "stopped_by": self.stopped_by,
        }


@dataclass
class BatchRound(RoundTimes):
    """One batched round (times in seconds, shared by every request of the round)."""

    batch_size: int
    policy: str
    nodes: list[int]  # tree size per request
    accepted: list[int]  # draft tokens accepted (and emitted) per request
    emitted: list[int]
    predicted: list[float]  # exact E[accepted] per request under the decoding rule's conditionals
    t_prefill: float  # requests that joined before this round
    t_draft: float
    t_tree: float
    t_verify: float
    t_walk: float
    t_commit: float


@dataclass
class BatchDecodeResult:
    results: list[DecodeResult]  # one per prompt, in the prompts' order
    rounds: list[BatchRound] = field(default_factory=list)
    method: str = ""
    policy: str = ""
    t_total: float = 0.0
    latency: list[float] = field(default_factory=list)  # seconds from the start to each request's end
    scorer: str | None = None  # method "mfd": "mixture" or "best_mode" (None for the other methods)

    @property
    def new_tokens(self) -> int:
        return sum(len(r.tokens) for r in self.results)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.t_total if self.t_total > 0 else float("nan")

    @property
    def tau(self) -> float:
        """Tokens per request per round (bonus included), over every request-round."""
        per = [a + 1 for r in self.rounds for a in r.accepted]
        return float(np.mean(per)) if per else float("nan")

    # ---------------------------------------------------------------- the whole decode, per request
    @property
    def request_rounds(self) -> list[int]:
        """Rounds each request took from its prefill to its last token (the full decode)."""
        return [len(r.steps) for r in self.results]

    @property
    def request_tokens_per_round(self) -> list[float]:
        """Each request's tokens emitted by its rounds over its rounds: its tau over the full decode
        (the prefill's token aside), NaN for a request that ended at its first token."""
        return [(len(r.tokens) - 1) / len(r.steps) if r.steps else float("nan") for r in self.results]

    @property
    def request_tokens_per_s(self) -> list[float]:
        """Each request's new tokens over its latency (the batch's start to the request's end)."""
        return [len(r.tokens) / t if t > 0 else float("nan") for r, t in zip(self.results, self.latency)]

    @property
    def t_rounds(self) -> float:
        """Seconds in rounds (prefills aside), over the whole decode."""
        return float(sum(r.t_step for r in self.rounds))

    @property
    def rounds_tokens_per_s(self) -> float:
        """Tokens the rounds emitted over the time in rounds, over the whole decode: the full-decode
        counterpart of a steady round's rate (every round counted, the batch's tail included)."""
        emitted = sum(sum(r.emitted) for r in self.rounds)
        t = self.t_rounds
        return emitted / t if t > 0 else float("nan")
