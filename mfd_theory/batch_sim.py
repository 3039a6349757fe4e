"""Batched decoding replayed from traces: every allocation policy over the whole decode, seeded.

:class:`DecodeTraces` holds, per request and text position, the tree a round rooted there would
verify (its best-first node scores) and the nodes the target accepts in it; they come from a real
drafter and target (``mfd_theory.llm.measure.batch_trace``) or from :func:`synthetic_traces`
(texts of varying difficulty, trees from the package's builders). :func:`replay` decodes them under
a policy, :func:`rescore` scores a policy on another decode's rounds. Findings: docs/benchmarks.md.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mfd_theory._kernels import batch_sim as _k
from mfd_theory.trees import mixture_tree, product_tree
from mfd_theory.validation import check_choice, check_int, check_real

__all__ = ["SIM_POLICIES", "DecodeTraces", "Replay", "replay", "rescore", "synthetic_traces"]

#: per_request: every tree ``budget`` nodes; global: the round's budget x B nodes on the global
#: top prefixes by the drafter's score; proportional: the same total on the nodes of largest gain
#: in log expected tokens per round (the drafter's own expectation); oracle: the counts that
#: accept the most, knowing what the target accepts (a ceiling no decoder can reach)
SIM_POLICIES = ("per_request", "global", "proportional", "oracle")
_CODES = {"per_request": _k.PER_REQUEST, "global": _k.GLOBAL, "proportional": _k.PROPORTIONAL,
          "oracle": _k.ORACLE}


@dataclasses.dataclass(frozen=True)
class DecodeTraces:
    """What a round would verify and accept at every position of every request's text.

    ``scores`` [P, T, C]: the log-scores (best first, ``-inf`` past the tree) of the C-node tree a
    round rooted at position s of request i builds (position s = the request's (s+1)-th token,
    the root); ``paths`` [P, T, D]: the indices of the tree's nodes the target accepts, along the
    accepted path (-1 after it); ``lengths`` [P]: tokens per request (the prefill's first token
    included), so positions 0 .. lengths[i] - 2 are roots. The first n nodes of a tree accept
    ``#{path nodes < n}`` tokens (parents precede children). Greedy decoding makes these a
    property of the text, whatever the policy that visits a position."""

    scores: np.ndarray
    paths: np.ndarray
    lengths: np.ndarray

    def __post_init__(self):
        s = np.ascontiguousarray(self.scores, dtype=np.float64)
        p = np.ascontiguousarray(self.paths, dtype=np.int64)
        n = np.ascontiguousarray(self.lengths, dtype=np.int64).reshape(-1)
        if s.ndim != 3 or p.ndim != 3 or s.shape[:2] != p.shape[:2]:
            raise ValueError(f"paths: expected [P, T, D] beside scores [P, T, C], got {p.shape} and {s.shape}")
        if n.shape[0] != s.shape[0] or (n < 1).any() or (n > s.shape[1] + 1).any():
            raise ValueError(f"lengths: expected {s.shape[0]} counts in [1, {s.shape[1] + 1}], got {n.tolist()}")
        if np.isnan(s).any() or np.isposinf(s).any():
            raise ValueError("scores: contains NaN or +inf")
        fin = np.isfinite(s)
        if (np.diff(fin.astype(np.int8), axis=2) > 0).any():
            raise ValueError("scores: a finite score after -inf (a tree's nodes come first, then padding)")
        both = fin[:, :, 1:] & fin[:, :, :-1]
        if ((s[:, :, 1:] - np.where(both, s[:, :, :-1], 0.0))[both] > 1e-12).any():
            raise ValueError("scores: not best first (a score rises along a tree)")
        sizes = fin.sum(axis=2)
        ok = (p >= -1) & (p < sizes[:, :, None])
        if not ok.all():
            raise ValueError("paths: a node index outside its tree")
        valid = p >= 0
        if (np.diff(valid.astype(np.int8), axis=2) > 0).any() or (np.diff(p, axis=2)[valid[:, :, 1:]] <= 0).any():
            raise ValueError("paths: each must list rising node indices, then -1")
        object.__setattr__(self, "scores", s)
        object.__setattr__(self, "paths", p)
        object.__setattr__(self, "lengths", n)
        object.__setattr__(self, "sizes", sizes.astype(np.int64))

    @property
    def n_requests(self) -> int:
        return self.scores.shape[0]

    def accepted(self, request: int, position: int, nodes: int) -> int:
        """Draft tokens the first ``nodes`` nodes of the tree at ``position`` accept."""
        return int(_k._accepted(self.paths[request, position], int(nodes)))


@dataclasses.dataclass(frozen=True)
class Replay:
    """A replayed decode: one entry per request-round (``round``, ``request``, ``position`` its
    root, ``nodes`` verified, ``accepted``), each round's batch size, and the settings."""

    round: np.ndarray
    request: np.ndarray
    position: np.ndarray
    nodes: np.ndarray
    accepted: np.ndarray
    round_size: np.ndarray
    lengths: np.ndarray
    policy: str
    budget: int
    batch_size: int
    static: bool

    @property
    def request_rounds(self) -> np.ndarray:
        """Rounds each request took over its whole decode [P]."""
        return np.bincount(self.request, minlength=self.lengths.shape[0])

    @property
    def request_tokens_per_round(self) -> np.ndarray:
        """Each request's tokens after the first over its rounds [P] (NaN: no round)."""
        r = self.request_rounds
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(r > 0, (self.lengths - 1) / r, np.nan)

    def steady(self) -> np.ndarray:
        """Which request-rounds belong to rounds holding a full batch (``batch_size`` requests, or
        a static group's size when the last group is smaller): the bench's steady rounds."""
        full = self.round_size[self.round]
        if not self.static:
            return full == self.batch_size
        P = self.lengths.shape[0]
        group = self.request // self.batch_size
        want = np.minimum(self.batch_size, P - group * self.batch_size)
        return full == want

    def steady_accepted(self) -> float:
        """Mean accepted per request over the steady rounds (the bench's per-round mean)."""
        s = self.steady()
        return float(self.accepted[s].mean()) if s.any() else float("nan")


def _check_policy(policy: str, budget, batch_size, cap):
    check_choice("policy", policy, SIM_POLICIES)
    budget = check_int("budget", budget, 1)
    batch_size = check_int("batch_size", batch_size, 1)
    cap = 2 * budget if cap is None else check_int("cap", cap, 1)
    return budget, batch_size, cap


def replay(traces: DecodeTraces, policy: str, budget: int, batch_size: int, *, cap: int | None = None,
           static: bool = True) -> Replay:
    """Decode every request of ``traces`` under ``policy`` (``SIM_POLICIES``), ``budget`` nodes per
    request and round (the global policies: budget x B per round, each request at most ``cap``,
    2 x budget by default, as the batched decoder caps it). ``static``: consecutive groups of
    ``batch_size`` requests, each decoded to its end (the bench's batches); otherwise
    ``batch_size`` slots that waiting requests fill as others end (continuous batching)."""
    if not isinstance(traces, DecodeTraces):
        raise ValueError(f"traces: expected DecodeTraces, got {type(traces).__name__}")
    budget, batch_size, cap = _check_policy(policy, budget, batch_size, cap)
    out = _k._replay(traces.scores, traces.paths, traces.sizes, traces.lengths, _CODES[policy], budget, batch_size,
                     cap, bool(static))
    return Replay(*out, lengths=traces.lengths, policy=policy, budget=budget, batch_size=batch_size,
                  static=bool(static))


def rescore(traces: DecodeTraces, decode: Replay, policy: str, *, cap: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, accepted) per request-round that ``policy`` gives on ``decode``'s own rounds (the same
    requests at the same positions, ``decode``'s budget): two policies compared on identical rounds."""
    if not isinstance(decode, Replay):
        raise ValueError(f"decode: expected a Replay, got {type(decode).__name__}")
    budget, _, cap = _check_policy(policy, decode.budget, decode.batch_size, cap)
    return _k._rescore(traces.scores, traces.paths, traces.sizes, decode.round, decode.request, decode.position,
                       _CODES[policy], budget, cap)


# ----------------------------------------------------------------------------- synthetic texts
def _difficulty(rng, T: int, hard_share: float, stay_hard: float) -> np.ndarray:
    """bool [T]: hard positions in runs (a hard position is followed by a hard one with
    probability ``stay_hard``), a ``hard_share`` of them in the long run."""
    # two-state chain with stationary hard share h: P(h -> h) = stay_hard, P(e -> h) = h (1 - stay_hard) / (1 - h)
    h = min(max(hard_share, 1e-6), 1 - 1e-6)
    to_hard = min(1.0, h * (1 - stay_hard) / (1 - h))
    hard = np.empty(T, dtype=bool)
    hard[0] = rng.random() < h
    u = rng.random(T)
    for s in range(1, T):
        hard[s] = u[s] < (stay_hard if hard[s - 1] else to_hard)
    return hard


def synthetic_traces(n_requests: int, length: int, *, vocab: int = 24, block: int = 7, cap: int = 32,
                     hard_share=(0.05, 0.6), stay_hard: float = 0.6, top_easy: float = 0.95, top_hard: float = 0.3,
                     tail: float = 0.5, noise: float = 0.0, surprise: float = 0.0, modes: int = 1,
                     seed: int = 0) -> DecodeTraces:
    """Traces of texts of varying difficulty, decoded with the package's builders.

    Request i's text has ``length`` tokens; its share of hard positions is drawn uniformly from
    ``hard_share`` (requests differ), hard positions come in runs (``stay_hard``). At an easy
    position the target's top token has probability ``top_easy``, at a hard one ``top_hard``; the
    other tokens share the rest geometrically (ratio ``tail``), in a random order per position, and
    the text's token there is drawn from that distribution. A round rooted at position s drafts
    the next ``block`` positions (fewer near the end): with ``noise`` = 0 the drafter is the target
    itself (its tree's covered mass is the expected acceptance); otherwise its log-probabilities
    are the target's plus Gaussian noise of that scale, renormalised (a drafter sure in the wrong
    places). ``surprise``: the noise scale added for a round whose root token was not the
    target's most likely one there (a block drafter has not yet read the target's features at the
    root, only its token). ``modes`` > 1 splits the drafter into that many noisy copies, mixed evenly, and builds
    mixture trees. The tree is the builder's top ``cap`` prefixes. Seeded by ``seed``."""
    P = check_int("n_requests", n_requests, 1)
    T = check_int("length", length, 2)
    V = check_int("vocab", vocab, 2)
    L = check_int("block", block, 1)
    cap = check_int("cap", cap, 1)
    K = check_int("modes", modes, 1)
    check_real("stay_hard", stay_hard, 0, 1)
    for name, v in (("top_easy", top_easy), ("top_hard", top_hard), ("tail", tail)):
        check_real(name, v, 0, 1, low_open=True, high_open=name != "top_easy")
    check_real("noise", noise, 0)
    check_real("surprise", surprise, 0)
    lo, hi = (check_real("hard_share", x, 0, 1) for x in hard_share)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    rest = tail ** np.arange(V - 1)
    rest /= rest.sum()
    scores = np.full((P, T - 1, cap), -np.inf)
    paths = np.full((P, T - 1, L), -1, dtype=np.int64)
    for i in range(P):
        hard = _difficulty(rng, T, rng.uniform(lo, hi), stay_hard)
        top = np.where(hard, top_hard, top_easy)
        logp = np.empty((T, V))
        for s in range(T):
            order = rng.permutation(V)
            p = np.empty(V)
            p[order[0]] = top[s]
            p[order[1:]] = (1 - top[s]) * rest
            logp[s] = np.log(p)
        text = np.array([rng.choice(V, p=np.exp(logp[s])) for s in range(T)])
        drafts = logp[None].repeat(K, axis=0)  # [K, T, V]
        if noise > 0:
            drafts = drafts + noise * rng.standard_normal(drafts.shape)
            drafts -= np.logaddexp.reduce(drafts, axis=2, keepdims=True)
        for s in range(T - 1):
            d = min(L, T - s - 2)  # the depth the decoder lets a round rooted at s use
            if d <= 0:
                continue
            rows = drafts[:, s + 1: s + 1 + d]  # [K, d, V]
            if surprise > 0 and text[s] != np.argmax(logp[s]):
                rows = rows + surprise * rng.standard_normal(rows.shape)
                rows = rows - np.logaddexp.reduce(rows, axis=2, keepdims=True)
            tree = (product_tree(rows[0], cap) if K == 1 else
                    mixture_tree(np.full(K, -np.log(K)), rows, cap))
            scores[i, s, : len(tree)] = tree.log_score
            node, j = -1, 0
            for tok in text[s + 1: s + 1 + d]:
                hit = np.flatnonzero((tree.parent == node) & (tree.token == tok))
                if hit.size == 0:
                    break
                node = int(hit[0])
                paths[i, s, j] = node
                j += 1
    return DecodeTraces(scores, paths, np.full(P, T))
