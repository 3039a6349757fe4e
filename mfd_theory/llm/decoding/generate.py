"""Tree-verified speculative decoding: one loop for "ar", "chain", "ddtree", "mfd" and "dartree".

A round (after a prefill that yields the first token, the *root*):

1. draft   - the drafter appends the newly committed context features and drafts one block:
             ``(log_pi [K], log_q [K, L, V])``;
2. tree    - the method's builder turns it into a DraftTree (the only place methods differ):
             "ar" no tree, "chain" DFlash's argmax chain, "ddtree" the product tree over the
             (marginal) per-position distributions, "mfd" the mixture tree; "dartree" grows
             its tree with the Domino drafter's path correction, one step per depth
             (:meth:`mfd_theory.llm.models.domino.DominoDrafter.grow_tree`; counted as drafting time);
3. verify  - one target forward over [root, nodes] with the ancestor-plus-context mask;
4. walk    - the lossless rule (docs/background.md): at the current node draw x from the
             target's conditional (argmax when greedy); if x is a child move there, otherwise
             emit x (the bonus token) and stop;
5. commit  - keep the KV rows of the root and the accepted nodes; the bonus is the next root.

Every round is recorded (:class:`StepRecord`) with the tree's exact predicted acceptance from the
verify forward's own conditionals: ``sum over nodes of prod of the target's conditionals along the
path`` (accepted tokens = covered mass). Greedy decoding's conditionals are one-hot, so there the
prediction is exact per step; ``covered_mass`` is the same sum under the target's temperature-1
softmax, the quantity the paper's coverage argument is about.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from mfd_theory.coverage import prefix_log_probs, variance_from_prefix_probs
from mfd_theory.trees import DraftTree, chain_tree, mixture_tree, product_tree

from mfd_theory.llm.models.drafter import check_drafter_target
from mfd_theory.llm.models.target import TargetModel

__all__ = ["METHODS", "DEAD_EPS", "StepRecord", "DecodeResult", "speculative_generate", "sampling_probs",
           "walk_tree", "build_tree"]

METHODS = ("ar", "chain", "ddtree", "mfd", "dartree")


def positions_needed(prompt_tokens: int, max_new_tokens: int) -> int:
    """Positions a ``prompt_tokens`` prompt plus ``max_new_tokens`` new tokens occupy in the target:
    the last new token is never fed back, so one fewer than their sum."""
    return int(prompt_tokens) + int(max_new_tokens) - 1
DEAD_EPS = 1e-3  # a node is "dead" when the target's prefix probability is below this
# Below float32's smallest normal number, T itself is subnormal or rounds to 0 in the float32
# division, and softmax(z / T) turns to 0/0; such temperatures are refused (0 means greedy).
MIN_TEMPERATURE = float(torch.finfo(torch.float32).tiny)


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


@dataclass
class DecodeResult:
    tokens: list[int]
    method: str
    steps: list[StepRecord] = field(default_factory=list)
    prompt_len: int = 0
    t_prefill: float = 0.0
    t_total: float = 0.0
    stopped_by: str = "max_new_tokens"  # or "eos"

    @property
    def target_calls(self) -> int:
        return 1 + len(self.steps)

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

    def speedup_over(self, ar: "DecodeResult") -> float:
        """AR time per output token / this method's time per output token (same harness)."""
        return (ar.t_total / len(ar.tokens)) / (self.t_total / len(self.tokens))

    def summary(self) -> dict[str, Any]:
        return {
            "method": self.method, "new_tokens": len(self.tokens), "rounds": len(self.steps),
            "tau": self.tau, "mean_accepted": self.mean_accepted, "mean_predicted": self.mean_predicted,
            "mean_covered_mass": self.mean_covered_mass, "tokens_per_s": self.tokens_per_s,
            "mean_tree_size": float(np.mean([s.tree_size for s in self.steps])) if self.steps else 0.0,
            "dead_share": float(np.mean([s.dead_share for s in self.steps if s.tree_size])) if any(
                s.tree_size for s in self.steps) else float("nan"),
            "overhead_share": self.overhead_share(), "time_split": self.time_split(),
            "stopped_by": self.stopped_by,
        }


# ---------------------------------------------------------------------------------------- sampling
def sampling_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """The distribution the target samples from: softmax(logits / T), cut to the top-p nucleus.

    The row maximum is subtracted before dividing, so (logits - max) / T <= 0 never overflows: any
    T down to float32's smallest normal number (``MIN_TEMPERATURE``) gives a proper distribution,
    the argmax (ties shared) as T -> 0."""
    z = logits.float()
    probs = torch.softmax((z - z.max(dim=-1, keepdim=True).values) / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        keep = sorted_p.cumsum(dim=-1) - sorted_p < top_p  # the top token is always kept
        sorted_p = sorted_p * keep
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def walk_tree(children: dict[tuple[int, int], int], draw: Callable[[int], int]) -> tuple[list[int], int]:
    """The lossless walk. ``children[(parent, token)] = node`` (parent -1 is the root); ``draw(row)``
    samples the target's next token at verify row ``row`` (0 = root, node i -> i + 1).
    Returns (accepted node indices, bonus token)."""
    path: list[int] = []
    node = -1
    while True:
        x = draw(node + 1)
        nxt = children.get((node, x))
        if nxt is None:
            return path, x
        path.append(nxt)
        node = nxt


def children_map(tree: DraftTree | None) -> dict[tuple[int, int], int]:
    if tree is None:
        return {}
    return {(int(p), int(t)): i for i, (p, t) in enumerate(zip(tree.parent.tolist(), tree.token.tolist()))}


# ---------------------------------------------------------------------------------------- trees
def _topk(log_q: torch.Tensor, k: int):
    """The k largest entries of every row (last axis), in descending order, ties to the lower
    token id (in the cut and in the order, the builders' tie rule): float64 values and int64
    ids, numpy.

    On CPU, a partial selection (``np.argpartition``, O(V) per row) followed by a sort of the k
    selected entries is several times faster than ``torch.topk`` at V in the thousands (0.2 vs
    0.8 ms for [4, 15, 2048], k = 64). On an accelerator the selection runs there and only k
    entries per row are copied back. Either selection may cut a run of equal values anywhere;
    the rows where it did are redone from their k-th value, keeping the lowest ids of the run."""
    if log_q.device.type != "cpu":
        return _topk_torch(log_q, k)
    x = log_q.detach()
    x = x.numpy() if x.dtype in (torch.float32, torch.float64) else x.float().numpy()
    v = x.shape[-1]
    flat = x.reshape(-1, v)  # [rows, V]
    ids = np.argpartition(flat, v - k, axis=1)[:, v - k:]  # [rows, k]
    kth = np.take_along_axis(flat, ids, axis=1).min(axis=1)  # [rows]; NaN rows are refused later
    for r in np.flatnonzero((flat >= kth[:, None]).sum(axis=1) > k):  # a run of kth cut by the partition
        above = np.flatnonzero(flat[r] > kth[r])
        ids[r] = np.concatenate([above, np.flatnonzero(flat[r] == kth[r])[: k - above.size]])
    ids = np.sort(ids, axis=1)  # then a stable sort by value leaves equal values in id order
    vals = np.take_along_axis(flat, ids, axis=1).astype(np.float64)
    order = np.argsort(-vals, axis=1, kind="stable")  # descending
    ids, vals = np.take_along_axis(ids, order, axis=1), np.take_along_axis(vals, order, axis=1)
    return vals.reshape(*x.shape[:-1], k), ids.reshape(*x.shape[:-1], k)


def _topk_torch(log_q: torch.Tensor, k: int):
    """:func:`_topk` with torch operations on the tensor's own device (the accelerator path)."""
    x = log_q.detach()
    vals, ids = torch.topk(x, k, dim=-1)
    kth = vals[..., -1:]
    need = k - (x > kth).sum(dim=-1, keepdim=True)  # places left for entries equal to kth
    eq = x == kth
    keep = (x > kth) | (eq & (eq.cumsum(dim=-1) <= need))  # k per row, NaN rows aside
    if bool((keep.sum(dim=-1) == k).all()):  # otherwise a NaN row, which the builder refuses
        ids = keep.nonzero()[:, -1].reshape(*x.shape[:-1], k)  # increasing ids per row
        vals, order = torch.sort(x.gather(-1, ids), dim=-1, descending=True, stable=True)
        ids = ids.gather(-1, order)
    return vals.double().cpu().numpy(), ids.cpu().numpy()


def build_tree(method: str, log_pi: torch.Tensor, log_q: torch.Tensor, budget: int) -> DraftTree | None:
    """The method's tree from a drafted block (log_pi [K], log_q [K, L, V]); None for "ar"."""
    if method == "ar":
        return None
    k_cand = min(int(budget), log_q.shape[-1])
    if method == "chain":
        best = int(torch.argmax(log_pi))
        toks = torch.argmax(log_q[best], dim=-1)[: int(budget)]  # [<=L]
        return chain_tree(toks.cpu().numpy())
    if method == "ddtree":
        if log_q.shape[0] == 1:
            marg = log_q[0]
        else:  # a product tree over the mixture's per-position marginals
            marg = torch.logsumexp(log_pi[:, None, None] + log_q, dim=0)  # [L, V]
        vals, ids = _topk(marg, k_cand)
        return product_tree(np.minimum(vals, 0.0), budget, token_ids=ids)
    if method == "mfd":
        vals, ids = _topk(log_q, k_cand)  # [K, L, k]: exact within each mode's top-k candidates
        lp = log_pi.double().cpu().numpy()
        lp = lp - np.logaddexp.reduce(lp)
        return mixture_tree(lp, np.minimum(vals, 0.0), budget, token_ids=ids)
    if method == "dartree":
        raise ValueError("method: 'dartree' grows its tree with the drafter's path correction "
                         "(DominoDrafter.grow_tree), not from a drafted block alone")
    raise ValueError(f"method: must be one of {METHODS}, got {method!r}")


def _first_nodes(tree: DraftTree, n: int) -> DraftTree:
    """The tree's first ``n`` nodes: prefix-closed, since parents precede children."""
    n = max(1, min(int(n), len(tree)))
    return DraftTree(tree.parent[:n], tree.token[:n], tree.depth[:n], tree.log_score[:n], validate=False)


# ---------------------------------------------------------------------------------------- metrics
def _node_conditionals(tree: DraftTree, logits: torch.Tensor, temperature: float, top_p: float):
    """(decoding-rule log conditionals [N], metric log conditionals [N]) of each node's token given
    its parent's path, read from the verify forward's own logits [N+1, V]."""
    dev = logits.device
    parent_row = torch.as_tensor(tree.parent + 1, device=dev)
    tok = torch.as_tensor(tree.token, device=dev)
    rows = torch.unique(parent_row)
    if temperature == 0:
        lsm = torch.log_softmax(logits[rows], dim=-1)  # only rows that are parents
        greedy = torch.argmax(logits[rows], dim=-1)
        where = torch.searchsorted(rows, parent_row)
        metric = lsm[where, tok]
        dec = torch.where(greedy[where] == tok, 0.0, float("-inf"))
    else:
        probs = sampling_probs(logits[rows], temperature, top_p)
        where = torch.searchsorted(rows, parent_row)
        dec = torch.log(probs[where, tok])
        metric = dec
    return dec.double().cpu().numpy(), metric.double().cpu().numpy()


def _dead_and_splices(tree: DraftTree, metric_lp: np.ndarray) -> tuple[float, int]:
    """Share of dead nodes, and how many dead nodes splice the live branches' tokens by depth."""
    n = len(tree)
    dead = metric_lp < np.log(DEAD_EPS)
    if not dead.any():
        return 0.0, 0
    live = ~dead
    live_pairs = set(zip(tree.depth[live].tolist(), tree.token[live].tolist()))
    ok = np.array([(d, t) in live_pairs for d, t in zip(tree.depth.tolist(), tree.token.tolist())], dtype=bool)
    splice = ok.copy()
    for i in range(n):  # parents precede children
        p = tree.parent[i]
        if p >= 0:
            splice[i] &= splice[p]
    return float(dead.mean()), int((dead & splice).sum())


def round_metrics(tree: DraftTree | None, logits: torch.Tensor, temperature: float, top_p: float,
                  metrics: bool = True) -> tuple:
    """One round's coverage bookkeeping from its verify logits [N+1, V]: (decoding-rule node
    conditionals or None, predicted E[accepted], covered mass, Var[accepted], dead share, dead
    splices). Without a tree everything is 0; with ``metrics=False`` the numbers are NaN."""
    n = 0 if tree is None else len(tree)
    if not (n and metrics):
        nan = float("nan") if n else 0.0
        return None, nan, nan, nan, nan, 0
    dec, metric = _node_conditionals(tree, logits, temperature, top_p)
    dec_lp = prefix_log_probs(tree.parent, tree.depth, dec)
    met_lp = prefix_log_probs(tree.parent, tree.depth, metric)
    var = variance_from_prefix_probs(tree.depth, np.exp(dec_lp))
    return (dec, float(np.exp(dec_lp).sum()), float(np.exp(met_lp).sum()), var) + _dead_and_splices(tree, met_lp)


# ---------------------------------------------------------------------------------------- loop
def _clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _eos_set(target: TargetModel, eos_token_id) -> set[int]:
    if eos_token_id is None:
        gc = getattr(target.model, "generation_config", None)
        eos_token_id = getattr(gc, "eos_token_id", None) if gc is not None else None
        if eos_token_id is None:
            eos_token_id = getattr(target.config, "eos_token_id", None)
    if eos_token_id is None:
        return set()
    if isinstance(eos_token_id, (list, tuple, set)):
        return {int(e) for e in eos_token_id}
    return {int(eos_token_id)}


def _is_real(x) -> bool:
    """A finite real number (bools excluded): what every numeric argument must be first."""
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_)) and (
        isinstance(x, numbers.Integral) or math.isfinite(x))  # ints of any size are finite


def _check_count(name: str, value, low: int, high: int | None = None) -> None:
    """An integer in [low, high] (integral floats such as 64.0 count as integers)."""
    if not _is_real(value) or int(value) != value or value < low or (high is not None and value > high):
        span = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name}: must be an integer {span}, got {value!r}")


def _validate(target: TargetModel, drafter, method, budget, temperature, top_p, max_new_tokens) -> None:
    if method not in METHODS:
        raise ValueError(f"method: must be one of {METHODS}, got {method!r}")
    _check_count("budget", budget, 1)
    _check_count("max_new_tokens", max_new_tokens, 1)
    if not _is_real(temperature) or temperature < 0 or 0 < temperature < MIN_TEMPERATURE:
        raise ValueError(f"temperature: must be 0 (greedy) or a finite number >= {MIN_TEMPERATURE:.3g}, "
                         f"got {temperature!r}")
    if not _is_real(top_p) or not 0 < top_p <= 1:
        raise ValueError(f"top_p: must lie in (0, 1], got {top_p!r}")
    if method == "ar":
        return
    if drafter is None:
        raise ValueError(f"drafter: method {method!r} needs a drafter")
    if method == "dartree" and not hasattr(drafter, "grow_tree"):
        raise ValueError("drafter: method 'dartree' needs a Domino drafter (build_drafter(..., kind='dartree'))")
    if int(drafter.block_size) < 2:
        raise ValueError(f"drafter: block_size must be >= 2, got {drafter.block_size}")
    cfg = getattr(drafter, "config", None)
    if cfg is not None:
        if int(cfg.vocab_size) != target.vocab_size:
            raise ValueError(f"drafter: vocabulary of {cfg.vocab_size} tokens, the target's has {target.vocab_size}")
        if int(cfg.hidden_size) != target.hidden_size:
            raise ValueError(f"drafter: hidden size {cfg.hidden_size}, the target's is {target.hidden_size}")
    bad = [i for i in drafter.target_layer_ids if not 0 <= int(i) < target.num_layers]
    if bad:
        raise ValueError(f"drafter: target_layer_ids {bad} do not exist in a {target.num_layers}-layer target")
    check_drafter_target(drafter, target.model)


def _prompt_ids(input_ids) -> torch.Tensor:
    """The prompt as a tensor: token ids (tensor, array, list) or a tokenizer's output (a
    ``BatchEncoding`` or any mapping, whose ``input_ids`` entry is used)."""
    if isinstance(input_ids, Mapping):
        if "input_ids" not in input_ids:
            raise ValueError(f"input_ids: a mapping without an 'input_ids' entry (keys {sorted(map(str, input_ids))})")
        input_ids = input_ids["input_ids"]
    if input_ids is None or isinstance(input_ids, (str, bytes)):
        raise ValueError(f"input_ids: expected token ids (a tensor, a list of ints or a tokenizer's output), "
                         f"got {input_ids!r}")
    try:
        return torch.as_tensor(input_ids)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"input_ids: expected token ids (a tensor, a list of ints or a tokenizer's output), "
                         f"got {type(input_ids).__name__}: {exc}") from exc


@torch.no_grad()
def speculative_generate(target, drafter, input_ids, max_new_tokens: int, method: str, budget: int = 64,
                         temperature: float = 0.0, top_p: float = 1.0, seed: int = 0, *,
                         eos_token_id=None, keep_trees: bool = False, metrics: bool = True,
                         budget_rule: Callable[[np.ndarray], int] | None = None) -> DecodeResult:
    """Generate up to ``max_new_tokens`` tokens for one prompt; lossless for every method.

    ``input_ids`` is the prompt, [T] or [1, T]: a tensor, array or list of token ids, or a
    tokenizer's output (``apply_chat_template(..., return_tensors="pt")`` returns a
    ``BatchEncoding``; its ``input_ids`` are used). ``target`` is a :class:`TargetModel` (or an
    HF model, wrapped on the fly); ``drafter`` any
    drafter from :mod:`mfd_theory.llm.models.drafter` (unused for "ar"). ``eos_token_id`` defaults to the
    target's generation config. Greedy when ``temperature == 0``; otherwise the walk samples from
    softmax(logits / temperature) cut to ``top_p``, with a CPU generator seeded by ``seed``.
    ``metrics=False`` skips the per-step coverage bookkeeping (for timing runs); ``keep_trees``
    stores each step's tree and decoding-rule node conditionals in its record. ``budget_rule``
    (e.g. :class:`mfd_theory.speedup.PerRoundBudget`) chooses each round's tree size: the tree is
    built at ``budget`` and cut to the first ``budget_rule(node gains)`` nodes, the gains being the
    drafter's probability of each node's prefix in the builder's best-first order (tree time).

    Context limit: T prompt tokens plus n new ones occupy T + n - 1 positions (the last emitted
    token is never fed to the target), which must fit the target's ``max_position_embeddings``.
    Each round's tree is cut to the depth that the positions and the new tokens left allow, so
    generation ends exactly where AR decoding (and HF ``generate``) ends.

    On return the target holds the *committed state*: its cache is the prompt plus every output
    token but the last, exactly what a prefill of ``prompt + tokens[:-1]`` gives (the same state
    HF ``generate`` leaves); ``target.verify(tokens[-1], ...)`` continues the sequence.
    """
    if not isinstance(target, TargetModel):
        target = TargetModel(target)
    _validate(target, drafter, method, budget, temperature, top_p, max_new_tokens)
    if budget_rule is not None and not callable(budget_rule):
        raise ValueError(f"budget_rule: expected a callable (node gains -> tree size), got {budget_rule!r}")
    if budget_rule is not None and method == "dartree":
        # a Domino tree is not stored best first, so its first n nodes need not be its top n
        raise ValueError("budget_rule: not available with method 'dartree' (its tree is grown depth by depth, "
                         "not in best-first order)")
    _check_count("seed", seed, 0, 2 ** 64 - 1)  # the range torch.Generator.manual_seed takes
    ids = _prompt_ids(input_ids)
    if ids.numel() and (ids.dtype == torch.bool or ids.dtype.is_floating_point or ids.dtype.is_complex):
        raise ValueError(f"input_ids: token ids must be integers, got dtype {ids.dtype}")
    if ids.dim() == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.dim() != 1:
        raise ValueError(f"input_ids: expected one sequence [T] or [1, T], got shape {tuple(ids.shape)}")
    if ids.numel() == 0:
        raise ValueError("input_ids: the prompt is empty")
    target._check_positions(ids.numel())  # the prompt alone
    need = positions_needed(ids.numel(), max_new_tokens)
    if target.max_positions is not None and need > target.max_positions:
        raise ValueError(f"max_new_tokens: a {ids.numel()}-token prompt plus {int(max_new_tokens)} new tokens "
                         f"needs {need} positions, beyond the target's context of {target.max_positions}")
    eos = _eos_set(target, eos_token_id)
    gen = torch.Generator().manual_seed(int(seed))
    dev = target.device
    use_draft = method != "ar"

    def draw_from(logits_row: torch.Tensor) -> int:
        if temperature == 0:
            return int(torch.argmax(logits_row))
        p = sampling_probs(logits_row, temperature, top_p).cpu()
        return int(torch.multinomial(p, 1, generator=gen))

    result = DecodeResult(tokens=[], method=method, prompt_len=int(ids.numel()))
    t0 = _clock(dev)
    logits0, hidden = target.prefill(ids, hidden=use_draft)
    tokens = result.tokens
    root = draw_from(logits0)
    ctx = pending_hidden = keep_rows = None
    if use_draft:
        drafter.reset()
        if hasattr(drafter, "observe_tokens"):
            drafter.observe_tokens(ids.tolist())
        ctx = drafter.fuse_hidden(hidden)  # [1, T, H]
    result.t_prefill = _clock(dev) - t0
    tokens.append(root)
    done = root in eos
    if done:
        result.stopped_by = "eos"
    while not done and len(tokens) < max_new_tokens:
        ta = _clock(dev)
        if use_draft:
            if ctx is None:
                ctx = drafter.fuse_hidden(tuple(h.index_select(1, keep_rows) for h in pending_hidden))
            log_pi, log_q = drafter.draft_modes(ctx, root)  # [K], [K, L, V]
            ctx = pending_hidden = None
            # deeper nodes could only emit tokens past max_new_tokens or sit beyond the context:
            # the root sits at position target.length, a depth-d node at target.length + d
            depth = int(max_new_tokens) - len(tokens) - 1
            if target.max_positions is not None:
                depth = min(depth, target.max_positions - 1 - target.length)
            log_q = log_q[:, :max(depth, 0)]  # [K, <=L, V]
        grow = use_draft and log_q.shape[1] > 0
        tree, depth_times = None, ()
        if grow and method == "dartree":
            t_backbone = _clock(dev) - ta
            tree, times = drafter.grow_tree(root, log_q[0], int(budget), clock=lambda: _clock(dev))
            depth_times = (t_backbone, *times)
        tb = _clock(dev)
        if grow and method != "dartree":
            tree = build_tree(method, log_pi, log_q, int(budget))
        if tree is not None and budget_rule is not None and len(tree) > 1:
            tree = _first_nodes(tree, budget_rule(np.exp(tree.log_score)))
        n = 0 if tree is None else len(tree)
        mask = target.tree_mask(tree)  # [1, 1, N+1, P+N+1] float additive
        tc = _clock(dev)
        out = target.verify(root, tree, hidden=use_draft, mask=mask)  # logits [N+1, V]
        td = _clock(dev)
        children = children_map(tree)
        if temperature == 0:
            greedy = torch.argmax(out.logits, dim=-1).tolist()  # one transfer for the whole tree
            path, bonus = walk_tree(children, lambda r: greedy[r])
        else:
            path, bonus = walk_tree(children, lambda r: draw_from(out.logits[r]))
        emitted = [int(tree.token[i]) for i in path] + [bonus]
        te = _clock(dev)
        dec, predicted, covered, predicted_var, dead_share, dead_splices = round_metrics(
            tree, out.logits, temperature, top_p, metrics)
        tf = _clock(dev)
        count = 0
        for tok in emitted:
            tokens.append(tok)
            count += 1
            if tok in eos:
                done, result.stopped_by = True, "eos"
                break
            if len(tokens) >= max_new_tokens:
                done = True
                break
        if done:  # leave the committed state: every emitted token but the last has been fed
            target.commit(path[: count - 1])
        else:
            target.commit(path)
            if use_draft:  # fused into context features at the next draft (drafter time)
                keep_rows = torch.tensor([0] + [i + 1 for i in path], device=dev)
                pending_hidden = out.hidden_states
                if hasattr(drafter, "observe_tokens"):
                    drafter.observe_tokens([root] + emitted[:-1])
            root = bonus
        tg = _clock(dev)
        result.steps.append(StepRecord(
            tree_size=n, accepted=min(len(path), count), emitted=count, predicted=predicted, covered_mass=covered,
            dead_share=dead_share, dead_splices=dead_splices, t_draft=tb - ta, t_tree=tc - tb,
            t_verify=td - tc, t_walk=te - td, t_commit=tg - tf,
            tree=tree if keep_trees else None, node_log_cond=dec if keep_trees else None,
            predicted_var=predicted_var, t_draft_depths=depth_times,
        ))
    result.t_total = _clock(dev) - t0
    return result
