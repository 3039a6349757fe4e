"""The target's own ceiling on a prompt: its oracle, product and K-mode trees and their exact coverage.

:class:`TargetScorer` gives the target's tempered conditionals for many prefixes per forward (tree
forwards on a :class:`~mfd_theory.llm.models.target.TargetModel`: attention or hybrid, CPU or
CUDA); :func:`sample_paths` samples blocks in batches with the exact conditionals along them;
:func:`prompt_ceiling` measures one prompt at one temperature and :func:`measure_ceiling` a set of
prompts. What is measured and what it bounds: docs/ceiling.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from mfd_theory.ceiling_stats import mean_and_se, total_correlation, tree_builder
from mfd_theory.distributions import MixtureOfProducts
from mfd_theory.fit import fit_mixture_rows, path_log_likelihoods
from mfd_theory.llm.models.target import TargetModel
from mfd_theory.path_trees import best_first
from mfd_theory.results import atomic_write_text
from mfd_theory.trees import DraftTree, product_tree, total_prefixes
from mfd_theory.validation import check_int, check_real

__all__ = ["CeilingOptions", "PathSample", "TargetScorer", "accepted_lengths", "measure_ceiling",
           "oracle_tree_of", "prompt_ceiling", "sample_paths"]


def _as_target(model) -> TargetModel:
    return model if isinstance(model, TargetModel) else TargetModel(model)


def _context(context) -> list[int]:
    ids = [int(t) for t in (context.tolist() if hasattr(context, "tolist") else context)]
    if len(ids) < 2:
        raise ValueError(f"context: needs at least two tokens (the last one is the root every forward starts "
                         f"from), got {len(ids)}")
    return ids


def _closure(prefixes) -> list[tuple[int, ...]]:
    """Every non-empty prefix of ``prefixes`` (a prefix-closed set, as a tree's nodes), shortest first."""
    out: set[tuple[int, ...]] = set()
    for p in prefixes:
        for d in range(1, len(p) + 1):
            out.add(tuple(p[:d]))
    return sorted(out, key=lambda s: (len(s), s))


def _chunks(prefixes: list[tuple[int, ...]], max_tokens: int) -> list[list[tuple[int, ...]]]:
    """``prefixes`` in groups whose prefix closure (plus the root row) fits in ``max_tokens`` rows."""
    out, cur, held = [], [], set()
    for p in sorted(set(prefixes)):
        new = [p[:d] for d in range(1, len(p) + 1) if p[:d] not in held]
        if cur and len(held) + len(new) + 1 > max_tokens:
            out.append(cur)
            cur, held = [], set()
            new = [p[:d] for d in range(1, len(p) + 1)]
        cur.append(p)
        held.update(new)
    if cur or not out:
        out.append(cur)
    return out


class TargetScorer:
    """``log P_T(. | context + prefix)`` of a causal LM at temperature T, many prefixes per forward.

    The context's last token is the root of every forward: the context but that token is prefilled
    once into a :class:`~mfd_theory.llm.models.target.TargetModel`, and a set of prefixes is one
    verify forward over the tree of their prefixes (float additive ancestor mask; hybrids through
    their GDN tree rule), whose rows are the conditionals at the root and at every node; the
    pending rows are then discarded. Forwards hold at most ``max_tokens`` rows. Rows are memoised
    as float32 [V], as the forward made them (600 KB each at V = 152k; ``L``: only prefixes shorter
    than L are asked for). It is the drafter
    :func:`mfd_theory.path_trees.best_first` searches, with ``has_row`` / ``prefetch`` so that the
    oracle search expands many frontier nodes per forward. ``prefilled``: the target's cache already
    holds the context but its last token (a caller that moves one cache along an answer), and
    nothing is prefilled.

    ``hold``: keep the rows of every forward in the target's cache (pending, never committed) and
    run each later forward over the new nodes alone, on top of them
    (:meth:`~mfd_theory.llm.models.target.TargetModel.extend`), instead of over the whole prefix
    closure of what it asks for; attention-only targets (a hybrid runs as without it). At most
    ``max_held`` rows are held; past that they are dropped and the next forward starts anew.
    :meth:`release` drops them (the caller's cache then holds the context but its last token
    again); a caller that moves the cache on must call it first.
    """

    def __init__(self, model, context, L: int, temperature: float = 1.0, max_tokens: int = 1024,
                 prefilled: bool = False, hold: bool = False, max_held: int = 8192):
        self.L = check_int("L", L, 1, integral_floats=True)
        self.temperature = check_real("temperature", temperature, 0, low_open=True)
        self.max_tokens = check_int("max_tokens", max_tokens, 2)
        ctx = _context(context)
        self.target = _as_target(model)
        self.V = self.target.vocab_size
        self.root = ctx[-1]
        if not prefilled:
            self.target.prefill(torch.tensor(ctx[:-1]), hidden=False)
        elif self.target.cache is None or self.target.length != len(ctx) - 1 or self.target._pending:
            # the caller keeps the cache at the context but its last token (a decode's rounds move it on)
            raise ValueError(f"prefilled: the target's cache must hold the context but its last token "
                             f"({len(ctx) - 1} tokens, nothing pending), it holds {self.target.length}")
        self.target.check_positions(len(ctx) + self.L)
        self.rows: dict[tuple[int, ...], np.ndarray] = {}
        self.forwards = 0  # verify forwards run
        self.tokens = 0  # rows those forwards computed
        self.hold = bool(hold) and getattr(self.target, "hybrid", None) is None
        self.max_held = check_int("max_held", max_held, 2)
        self._held: dict[tuple[int, ...], int] = {}  # prefix -> its pending cache row (root 0), with hold
        self.prefetch([()])

    @torch.no_grad()
    def _forward(self, prefixes) -> tuple[dict, torch.Tensor]:
        """One forward over the closure of ``prefixes`` (with ``hold``: the part of it not held):
        ({prefix: row index}, log-probs [rows, V] on the device) of the rows it computed."""
        if self._held:
            nodes = [p for p in _closure(prefixes) if p not in self._held]
            if len(self._held) + len(nodes) <= self.max_held:
                return self._extend(nodes)
            self.release()
        nodes = _closure(prefixes)
        tree = DraftTree.from_paths(nodes) if nodes else None
        out = self.target.verify(self.root, tree, hidden=False)
        self.forwards += 1
        self.tokens += len(nodes) + 1
        index = {(): 0}
        if tree is not None:
            index.update({p: n + 1 for n, p in enumerate(tree.paths())})
        logp = torch.log_softmax(out.logits.float() / self.temperature, dim=-1)  # [N+1, V]
        if self.hold and len(index) <= self.max_held:
            self._held = dict(index)
            self._keep_rows(index, logp)
        else:
            self.target.discard()
        return index, logp

    def _extend(self, nodes: list[tuple[int, ...]]) -> tuple[dict, torch.Tensor]:
        """The rows of ``nodes`` (a closure's new part, shortest first) on top of the held ones."""
        if not nodes:
            return {}, torch.empty((0, self.V))
        base = len(self._held)
        new = {p: base + i for i, p in enumerate(nodes)}
        visible = np.zeros((len(nodes), base + len(nodes)), dtype=bool)
        for i, p in enumerate(nodes):
            for d in range(len(p) + 1):  # the root, every ancestor (held or new) and the node itself
                q = p[:d]
                visible[i, self._held[q] if q in self._held else new[q]] = True
        logits = self.target.extend([p[-1] for p in nodes], [len(p) for p in nodes], visible)
        self._held.update(new)
        self.forwards += 1
        self.tokens += len(nodes)
        logp = torch.log_softmax(logits / self.temperature, dim=-1)  # [n, V]
        index = {p: i for i, p in enumerate(nodes)}
        self._keep_rows(index, logp)
        return index, logp

    def _keep_rows(self, index: dict, logp: torch.Tensor) -> None:
        """With ``hold``, every row a forward computed is kept (a later forward will not compute a
        held node's row again), deeper ones than L included."""
        keep = [p for p in index if p not in self.rows]
        if keep:
            self.rows.update(zip(keep, logp[[index[p] for p in keep]].cpu().numpy()))

    def release(self) -> None:
        """Drop the held rows (``hold``): the target's cache holds the context but its last token again."""
        if self._held:
            self.target.discard()
            self._held = {}

    def has_row(self, prefix) -> bool:
        return tuple(prefix) in self.rows

    def prefetch(self, prefixes) -> None:
        """Rows for every prefix of ``prefixes`` not held yet, in as few forwards as ``max_tokens`` allows."""
        want = [tuple(int(t) for t in p) for p in prefixes]
        want = [p for p in want if p not in self.rows and len(p) < self.L]
        if not want:
            return
        for chunk in _chunks(want, self.max_tokens):
            index, logp = self._forward(chunk)
            keep = [p for p in index if p not in self.rows and len(p) < self.L]
            rows = logp[[index[p] for p in keep]].cpu().numpy()  # [n, V] float32: the search reads it as float64
            self.rows.update(zip(keep, rows))

    def log_cond(self, prefix) -> np.ndarray:
        key = tuple(int(t) for t in prefix)
        if key not in self.rows:
            self.prefetch([key])
        return self.rows[key]

    @torch.no_grad()
    def log_probs(self, tree: DraftTree) -> np.ndarray:
        """log P_T(s) [N] of every node of ``tree``: the rows at its parents, held or from forwards
        over the tree's internal nodes (no row is kept)."""
        paths = tree.paths()
        parents = [p[:-1] for p in paths]
        cond = np.empty(len(paths))
        todo: dict[tuple[int, ...], list[int]] = {}
        for n, par in enumerate(parents):
            row = self.rows.get(par)
            if row is not None:
                cond[n] = row[paths[n][-1]]
            else:
                todo.setdefault(par, []).append(n)
        for chunk in _chunks(list(todo), self.max_tokens) if todo else []:
            index, logp = self._forward(chunk)
            nodes = [n for par in chunk if par in index for n in todo[par]]
            if nodes:
                r = torch.tensor([index[parents[n]] for n in nodes], device=logp.device)
                t = torch.tensor([paths[n][-1] for n in nodes], device=logp.device)
                cond[nodes] = logp[r, t].double().cpu().numpy()
            for par in chunk:  # held by an earlier forward (hold): its row was kept then
                if par not in index:
                    cond[todo[par]] = self.rows[par][[paths[n][-1] for n in todo[par]]]
        out = np.empty(len(paths))
        for n in range(len(paths)):
            p = tree.parent[n]
            out[n] = (out[p] if p >= 0 else 0.0) + cond[n]
        return out


def oracle_tree_of(scorer: TargetScorer, budget: int, lookahead: int = 32) -> DraftTree:
    """The target's exact top-``budget`` prefixes (depth <= L), best first: ``path_tree``'s search
    with the target as the drafter, ``lookahead`` frontier rows fetched per forward."""
    budget = check_int("budget", budget, 1)
    lookahead = check_int("lookahead", lookahead, 0)
    N = min(budget, total_prefixes([scorer.V] * scorer.L, budget))
    parent, token, depth, score = best_first(scorer, scorer.L, scorer.V, N, lookahead=lookahead)
    return DraftTree(parent, token, depth, score, validate=False)


@dataclasses.dataclass
class PathSample:
    """Blocks sampled from the target at one temperature, with the exact conditionals along them."""

    tokens: np.ndarray  # [M, L] int64: the sampled paths
    log_p: np.ndarray  # [M, L]: log P_T(x_i | context, x_<i) of each sampled token
    entropy: np.ndarray  # [M, L]: entropy (nats) of each conditional row
    top_ids: np.ndarray  # [M, L, k] int64: each row's k most probable tokens
    top_p: np.ndarray  # [M, L, k]: their probabilities
    marginal: np.ndarray  # [L, V]: the mean of the rows (the Rao-Blackwellised marginals)

    @property
    def M(self) -> int:
        return int(self.tokens.shape[0])


@torch.no_grad()
def sample_paths(model, context, L: int, M: int, temperature: float = 1.0, seed: int = 0, top_k: int = 256,
                 batch: int = 64) -> PathSample:
    """``M`` blocks of ``L`` tokens sampled from the target at ``temperature`` (full vocabulary, no
    top-k / top-p; an end-of-sequence token is an ordinary token here), ``batch`` at a time: the
    context is run once per batch, its cache repeated ``batch`` times (attention rows and, on a
    hybrid, the Gated DeltaNet states, through the cache layers' own ``reorder_cache``), then the
    model's own one-token steps. Each row's entropy and the mean row are taken over the whole
    vocabulary; only the top ``top_k`` entries of each row are kept."""
    L, M = check_int("L", L, 1, integral_floats=True), check_int("M", M, 1, integral_floats=True)
    T = check_real("temperature", temperature, 0, low_open=True)
    top_k, batch = check_int("top_k", top_k, 1), check_int("batch", batch, 1)
    ctx = _context(context)
    target = _as_target(model)
    target.check_positions(len(ctx) + L)
    V, dev, C = target.vocab_size, target.device, len(ctx)
    k = min(top_k, V)
    gen = torch.Generator(device=dev).manual_seed(int(seed))
    tokens, log_p, ent = np.empty((M, L), np.int64), np.empty((M, L)), np.empty((M, L))
    top_ids, top_p = np.empty((M, L, k), np.int64), np.empty((M, L, k))
    total = torch.zeros((L, V), dtype=torch.float64, device=dev)  # [L, V]
    ids = torch.tensor([ctx], device=dev)  # [1, C]
    done = 0
    while done < M:
        b = min(batch, M - done)
        cache = target.new_cache()
        logits = target.forward(ids, torch.arange(C, device=dev)[None], None, cache, False).logits[:, -1]  # [1, V]
        logits = logits.expand(b, -1)
        rep = torch.zeros(b, dtype=torch.long, device=dev)
        for layer in cache.layers:
            layer.reorder_cache(rep)  # b copies of the context's rows / states
        for i in range(L):
            lp = torch.log_softmax(logits.float() / T, dim=-1)  # [b, V]
            p = lp.exp()
            # inverse-CDF draw in float64 (torch.multinomial is several times slower on CPU): the
            # first token whose cumulative mass exceeds a uniform draw over the row's total
            cdf = p.double().cumsum(-1)  # [b, V]
            u = torch.rand((b, 1), generator=gen, dtype=torch.float64, device=dev) * cdf[:, -1:]
            tok = torch.searchsorted(cdf, u, right=True).clamp_(max=V - 1)  # [b, 1]
            sl = slice(done, done + b)
            tokens[sl, i] = tok[:, 0].cpu().numpy()
            log_p[sl, i] = lp.gather(1, tok)[:, 0].double().cpu().numpy()
            ent[sl, i] = (-torch.where(p > 0, p * lp, torch.zeros_like(p)).sum(-1)).double().cpu().numpy()
            tv, ti = torch.topk(lp, k, dim=-1)  # [b, k]
            top_ids[sl, i], top_p[sl, i] = ti.cpu().numpy(), tv.double().exp().cpu().numpy()
            total[i] += p.double().sum(0)
            if i + 1 < L:
                pos = torch.full((b, 1), C + i, device=dev)
                logits = target.forward(tok, pos, None, cache, False).logits[:, -1]  # [b, V]
        done += b
    marginal = (total / total.sum(-1, keepdim=True)).cpu().numpy()  # float32 rows' round-off divided out
    return PathSample(tokens, log_p, ent, top_ids, top_p, marginal)


def accepted_lengths(tree: DraftTree, samples: np.ndarray) -> np.ndarray:
    """Per sample [M]: the depth of its longest prefix that is a node of ``tree`` (what a round of
    tree verification accepts when the target draws that sample)."""
    nodes = set(tree.paths())
    x = np.asarray(samples, dtype=np.int64)
    acc = np.zeros(x.shape[0], dtype=np.int64)
    for m in range(x.shape[0]):
        d = 0
        while d < x.shape[1] and tuple(x[m, : d + 1].tolist()) in nodes:
            d += 1
        acc[m] = d
    return acc


def _first(tree: DraftTree, n: int) -> DraftTree:
    """The first ``n`` nodes of a best-first tree (prefix-closed: parents come first)."""
    n = min(n, len(tree))
    return DraftTree(tree.parent[:n], tree.token[:n], tree.depth[:n], tree.log_score[:n], validate=False)


@dataclasses.dataclass(frozen=True)
class CeilingOptions:
    """What one prompt's ceiling measures (every field checked by :meth:`check`)."""

    L: int = 15  # block length
    budgets: tuple[int, ...] = (1, 4, 16, 64)  # tree sizes N
    modes: tuple[int, ...] = (1, 2, 4)  # K of the fitted mixtures (1: the product tree)
    scorers: tuple[str, ...] = ("mixture",)  # how a fitted mixture becomes a tree (ceiling_stats.SCORERS)
    samples: int = 512  # M paths per half (build, check)
    top_k: int = 256  # tokens kept of each conditional for the mixture fit (the rest shaped like the marginals)
    eps: float = 1e-3  # a node is dead when P_T(s) <= eps
    dead_at: int = 64  # tree size of the dead share
    batch: int = 64  # sampled paths per forward
    max_tokens: int = 1024  # rows per tree forward
    lookahead: int = 32  # frontier rows the oracle search fetches per forward
    fit_restarts: int = 2
    fit_iters: int = 60
    floor: float = 1e-9  # uniform share mixed into every fitted row

    def check(self) -> "CeilingOptions":
        check_int("L", self.L, 1)
        for name in ("budgets", "modes"):
            vals = getattr(self, name)
            if not vals:
                raise ValueError(f"{name}: give at least one value")
            for v in vals:
                check_int(name, v, 1)
        if 1 not in self.modes:
            raise ValueError(f"modes: must include 1 (the product tree every gain is against), got {self.modes}")
        if not self.scorers:
            raise ValueError("scorers: give at least one")
        for s in self.scorers:
            tree_builder(s)
        for name in ("samples", "top_k", "dead_at", "batch", "fit_restarts", "fit_iters"):
            check_int(name, getattr(self, name), 2 if name == "samples" else 1)
        check_int("max_tokens", self.max_tokens, 2)
        check_int("lookahead", self.lookahead, 0)
        check_real("eps", self.eps, 0, 1, low_open=True, high_open=True)
        check_real("floor", self.floor, 0, 1, low_open=True, high_open=True)
        return self


def prompt_ceiling(model, context, temperature: float = 1.0, options: CeilingOptions = CeilingOptions(),
                   seed: int = 0) -> dict:
    """One prompt's ceiling at one temperature T > 0 (a JSON-ready record).

    Two sets of ``options.samples`` paths (build, check); from the build set the product tree of
    the Rao-Blackwellised marginals and, per K > 1 and scorer, the tree of a K-mode mixture fitted
    by :func:`mfd_theory.fit.fit_mixture_rows`; the oracle tree by best-first search on the target.
    ``coverage``: per tree and budget, sum_s P_T(s) over its first N nodes, exact given the tree;
    ``mc``: the mean accepted length of the check paths and its standard error; ``tc``: the
    block's total correlation (:func:`mfd_theory.ceiling_stats.total_correlation`, on both sets);
    ``heldout``: the mean log Q(x) of the check paths per K and its gain over K = 1 (mean, s.e.),
    every K fitted on the same top-k rows (``product``: the whole rows' marginals, for the cost of
    keeping only k tokens of each row);
    ``dead``: the product tree's nodes with P_T(s) <= eps at ``dead_at`` nodes, and of those the
    splices (the prefix of no build path); ``count_dead_share``: the share whose sample-count
    estimate (build paths through the node / samples) is <= eps."""
    opt = options.check()
    T = check_real("temperature", temperature, 0, low_open=True)
    target = _as_target(model)
    V, L = target.vocab_size, opt.L
    t0 = time.perf_counter()
    kw = dict(temperature=T, top_k=opt.top_k, batch=opt.batch)
    build = sample_paths(target, context, L, opt.samples, seed=int(seed) * 2, **kw)
    check = sample_paths(target, context, L, opt.samples, seed=int(seed) * 2 + 1, **kw)
    t_sample = time.perf_counter() - t0
    scorer = TargetScorer(target, context, L, T, opt.max_tokens)
    n_max = max(max(opt.budgets), opt.dead_at)
    t0 = time.perf_counter()
    oracle = oracle_tree_of(scorer, n_max, opt.lookahead)
    t_oracle = time.perf_counter() - t0
    trees = {"oracle": (oracle, oracle.log_score)}
    marg = (1 - opt.floor) * build.marginal + opt.floor / V  # [L, V]
    product = MixtureOfProducts.product(np.log(marg))
    t0 = time.perf_counter()
    ptree = product_tree(product, n_max)
    trees["product"] = (ptree, scorer.log_probs(ptree))
    models, fits = {}, {}
    for K in sorted(set(opt.modes)):
        mix, info = fit_mixture_rows(build.tokens, build.top_ids, build.top_p, K, V, seed=int(seed),
                                     n_restarts=opt.fit_restarts, max_iter=opt.fit_iters, floor=opt.floor,
                                     tail=build.marginal, return_info=True)
        models[K] = mix  # K = 1 too: the held-out baseline with the same truncated rows
        fits[str(K)] = {"weights": np.exp(mix.log_pi).tolist(), "objective": info.objective, "n_iter": info.n_iter}
        if K == 1:
            continue
        for name in opt.scorers:
            tree = tree_builder(name)(mix, n_max)
            trees[f"{name} K={K}"] = (tree, scorer.log_probs(tree))
    t_trees = time.perf_counter() - t0
    coverage, mc = {}, {}
    for name, (tree, lp) in trees.items():
        cum = np.cumsum(np.exp(lp))
        coverage[name] = {str(n): float(cum[min(n, len(tree)) - 1]) for n in opt.budgets}
        mc[name] = {str(n): mean_and_se(accepted_lengths(_first(tree, n), check.tokens)) for n in opt.budgets}
    ll = {K: path_log_likelihoods(m, check.tokens) for K, m in models.items()}  # [M] each
    heldout = {str(K): {"ll": float(v.mean()), **({"gain": mean_and_se(v - ll[1])} if K != 1 else {})}
               for K, v in ll.items()}
    heldout["product"] = {"ll": float(path_log_likelihoods(product, check.tokens).mean())}  # the whole rows' marginals
    tc = total_correlation((build.marginal + check.marginal) / 2, np.concatenate([build.entropy, check.entropy]))
    plp = trees["product"][1][:opt.dead_at]
    dead = plp <= math.log(opt.eps)
    counts: dict[tuple, int] = {}
    for r in build.tokens:
        for d in range(1, L + 1):
            key = tuple(r[:d].tolist())
            counts[key] = counts.get(key, 0) + 1
    est = np.array([counts.get(s, 0) / build.M for s in _first(ptree, opt.dead_at).paths()])  # sample-count P(s)
    unseen = est == 0
    n_dead = len(plp)
    return {
        "temperature": T, "L": L, "V": V, "samples": opt.samples, "budgets": list(opt.budgets),
        "coverage": coverage, "mc": mc, "tc": tc, "heldout": heldout,
        "ll_target": mean_and_se(check.log_p.sum(axis=1)), "fits": fits,
        "dead": {"nodes": n_dead, "dead": int(dead.sum()), "dead_share": float(dead.mean()) if n_dead else 0.0,
                 "dead_splices": int((dead & unseen).sum()),
                 "dead_splice_share": float((dead & unseen).mean()) if n_dead else 0.0,
                 "dead_mass_lost": float(np.exp(plp[dead]).sum()),
                 # the same share judged by sample counts (P(s) = paths through s / samples), as a
                 # count-based estimate of the target would: it cannot tell dead from unsampled
                 "count_dead_share": float((est <= opt.eps).mean()) if n_dead else 0.0},
        "forwards": scorer.forwards, "forward_rows": scorer.tokens,
        "seconds": {"sample": round(t_sample, 3), "oracle": round(t_oracle, 3), "trees": round(t_trees, 3)},
    }


def measure_ceiling(model, contexts, temperatures=(1.0, 0.7), options: CeilingOptions = CeilingOptions(),
                    seed: int = 0, out_dir=None, key: str = "", progress: bool = True) -> list[dict]:
    """:func:`prompt_ceiling` for every ``(dataset, id, token ids)`` of ``contexts`` at every
    temperature; returns the records, each with its dataset, id and prompt length. With
    ``out_dir``, each record is written as it is made (``<out_dir>/<dataset>-<n>-T<t>.json``) and a
    rerun with the same ``key`` (the options' hash) reuses it."""
    from tqdm.auto import tqdm

    opt = options.check()
    temps = [check_real("temperatures", t, 0, low_open=True) for t in temperatures]
    if not temps:
        raise ValueError("temperatures: give at least one (each > 0)")
    target = _as_target(model)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    records = []
    counts: dict[str, int] = {}
    jobs = []
    for c_i, (dataset, pid, ids) in enumerate(contexts):
        n = counts.get(dataset, 0)
        counts[dataset] = n + 1
        for t_i, T in enumerate(temps):
            jobs.append((c_i, t_i, dataset, pid, ids, n, T))
    for c_i, t_i, dataset, pid, ids, n, T in tqdm(jobs, desc="ceiling", disable=not progress):
        path = out / f"{dataset}-{n:03d}-T{T:g}.json" if out is not None else None
        if path is not None and path.is_file():
            rec = json.loads(path.read_text())
            if rec.get("key") == key and rec.get("id") == pid:
                records.append(rec)
                continue
        t0 = time.perf_counter()
        rec = prompt_ceiling(target, ids, T, opt, seed=int(seed) * 100_003 + 1000 * c_i + t_i)
        rec.update(dataset=dataset, id=pid, prompt_tokens=len(ids), key=key,
                   wall_s=round(time.perf_counter() - t0, 3))
        if path is not None:
            atomic_write_text(path, json.dumps(rec))
        records.append(rec)
    return records
