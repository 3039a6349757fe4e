"""Stored replicated comparisons as the pages print them: tau's interval floored by its
resolution, and "seeds to decide" at a stated power (mfd_theory.stats, docs/statistics.md).

A comparison written before ``compare`` had floors may have width 0 when the seeds happened to
agree; tau over a fixed number of new tokens moves in steps of one round, so :func:`floored`
widens its interval to what that step allows (``mfd_theory.stats.floor_interval``) and re-words
its verdict. Speed (a timing) is continuous and left as stored.
"""

from __future__ import annotations

from mfd_theory.stats import MARGIN, POWER, floor_interval, runs_to_decide, tau_resolution

__all__ = ["MAX_SEEDS", "TOKEN_KEYS", "floored", "floored_entries", "seeds_to_decide", "to_decide_note", "tokens_of"]

#: the most seeds the projection of :func:`seeds_to_decide` looks at
MAX_SEEDS = 50
#: the config keys, in order, that hold the new tokens a prompt's tau was measured over
TOKEN_KEYS = ("eval_tokens", "eval_new_tokens", "max_new_tokens")


def tokens_of(config: dict | None) -> int | None:
    """The new tokens per prompt of a run's config (None when it does not say)."""
    for k in TOKEN_KEYS:
        v = (config or {}).get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
            return v
    return None


def floored(entry: dict, tokens: int | None) -> dict:
    """A copy of a stored comparison entry (``tau_cmp``, ``tau_runs``: per run [a's tau, b's])
    whose ``tau_cmp`` carries the resolution floor of tau over ``tokens`` new tokens, the step of
    the larger tau measured (the coarsest of the two sides). Unchanged without ``tokens`` or taus."""
    c = entry.get("tau_cmp")
    taus = [t for pair in entry.get("tau_runs") or [] for t in pair if isinstance(t, (int, float)) and t > 0]
    if not c or not tokens or not taus:
        return entry
    return {**entry, "tau_cmp": floor_interval(c, float(tau_resolution(max(taus), tokens)))}


def floored_entries(entries: list[dict] | None, config: dict | None) -> list[dict]:
    """:func:`floored` on every entry, with the run's new tokens per prompt from ``config``."""
    tokens = tokens_of(config)
    return [floored(e, tokens) for e in entries or []]


def seeds_to_decide(c: dict | None, power: float = POWER) -> str:
    """How many seeds would decide the stored comparison ``c`` at its own level with probability
    ``power`` (:func:`mfd_theory.stats.runs_to_decide`): "3 (run)" for one decided already, "-"
    for a single run's, "> 50" when no affordable number would, "more tokens" when the interval is
    the resolution's (seeds that agree exactly cannot sharpen it; longer answers can)."""
    if not c or c.get("model") != "runs":
        return "-"
    if c["verdict"] != "inconclusive":
        return f"{c['n_runs']} (run)"
    if c.get("se_from") == "resolution":
        return "more tokens"
    r = runs_to_decide(c["run_gains"], margin=c.get("margin", MARGIN), level=c["level"], max_runs=MAX_SEEDS,
                       power=power)
    return f"> {MAX_SEEDS}" if r is None else str(r)


def to_decide_note(power: float = POWER) -> str:
    """The sentence under a table with a "seeds to decide" column."""
    return (f"Seeds to decide: for an inconclusive verdict, the fewest seeds at which a new replication would reach a "
            f"verdict (gain, loss or equivalent) with probability {power:.0%}, if the seeds' true mean and spread were "
            f"those measured (`mfd_theory.stats.runs_to_decide`, power {power:g}; holding the measured mean and "
            f"spread fixed instead, the median case, would give about 50% power); \"> {MAX_SEEDS}\" when not within "
            f"{MAX_SEEDS}, \"more tokens\" when the interval is tau's resolution (seeds that agree exactly cannot "
            "narrow it); for a decided one, the seeds run. Tau intervals are never narrower than tau's step over the "
            "new tokens of a prompt allows (docs/statistics.md, \"Floors\").")
