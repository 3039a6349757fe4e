"""Wall-time estimates of the own-model commands from a latency profile: what ``mfd distill`` and
``mfd eval`` would take on the device a profile describes, before anything runs there.

An estimate is the profile's per-token or per-round cost times the work, nothing else: distilling
is one autoregressive round per answer token at batch 1 (a batched run divides the rounds, not
measured on a GPU here, so the batch-1 figure is an upper bound), and evaluating decodes every
prompt once per method, each speculative method in ``tokens / tau`` rounds of
:meth:`~mfd_theory.speedup.profile.LatencyProfile.round_ms`. Training has no term in the cost
model (its cost is the drafter's forward and backward passes, which no profile times), so no
training estimate is made. With a shipped profile (an assumption, its ``note`` says so) the result
is an assumption too; :func:`command_time_estimates` says which profile it used.
"""

from __future__ import annotations

from mfd_theory.speedup.profile import LatencyProfile, _check_profile
from mfd_theory.validation import check_int, check_real

__all__ = ["command_time_estimates"]


def command_time_estimates(profile: LatencyProfile, *, answers: int, answer_tokens: int, eval_prompts: int,
                           eval_tokens: int, methods: dict[str, tuple[str, int, int, float]]) -> dict:
    """Hours of ``mfd distill`` (``answers`` x ``answer_tokens`` greedy tokens, batch 1) and of
    ``mfd eval`` (``eval_prompts`` x ``eval_tokens`` per method, plain decoding included) under
    ``profile``. ``methods``: label -> (method, K, N, tau): the decoding method (chain, ddtree,
    mfd, dartree: its overhead table when the profile has one), K modes, tree size N, and tau the tokens per round expected (e.g. the
    ceiling's coverage + 1, or a measured tau on CPU). Returns the profile's label, whether it is an
    assumption, and the hours by step and by method."""
    prof = _check_profile(profile)
    for name, v in (("answers", answers), ("answer_tokens", answer_tokens), ("eval_prompts", eval_prompts),
                    ("eval_tokens", eval_tokens)):
        check_int(name, v, 1)
    if not isinstance(methods, dict) or not methods:
        raise ValueError(f"methods: a non-empty dict label -> (method, K, N, tau), got {methods!r}")
    ms = 3_600_000.0
    distill_h = answers * answer_tokens * prof.t_ar() / ms
    tokens = eval_prompts * eval_tokens
    per_method = {"ar": tokens * prof.t_ar() / ms}
    for name, spec in methods.items():
        try:
            method, K, n, tau = spec
        except (TypeError, ValueError):
            raise ValueError(f"methods[{name!r}]: must be (method, K, N, tau), got {spec!r}") from None
        if method not in ("chain", "ddtree", "mfd", "dartree"):
            raise ValueError(f"methods[{name!r}]: method must be chain, ddtree, mfd or dartree, got {method!r}")
        check_int(f"methods[{name!r}] K", K, 1)
        check_int(f"methods[{name!r}] N", n, 1)
        check_real(f"methods[{name!r}] tau", tau, 1.0)
        round_ms = sum(prof.round_ms(method, K, n).values())
        per_method[name] = tokens / tau * round_ms / ms
    return {"profile": prof.label, "assumption": prof.assumption,
            "distill_h": distill_h, "eval_h": per_method, "eval_total_h": sum(per_method.values()),
            "training": "no estimate: the cost model has no training term"}

