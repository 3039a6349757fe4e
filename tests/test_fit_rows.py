"""The ceiling's estimators where the answer is known (torch-free): the EM on paths and exact rows
against its slow twin, recovery of a target that is a K-mode mixture, no gain on a product target,
the total correlation against enumeration, and the pooled tables and the reach table."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mfd_theory._kernels.fit import _em_rows
from mfd_theory.ceiling_stats import SCORERS, ceiling_reach, pool_ceiling, total_correlation, tree_builder
from mfd_theory.coverage import coverage
from mfd_theory.distributions import MixtureOfProducts
from mfd_theory.fit import _check_rows, fit_mixture_rows, path_log_likelihoods, rb_marginals
from mfd_theory.path_trees import MemoryDrafter
from mfd_theory.stats import compare
from mfd_theory.synthetic import noisy_futures
from mfd_theory.trees import mixture_tree, product_tree

from reference_fit import em_rows_step, exact_total_correlation

ROUNDOFF = 1e-10  # float64 sums over a few hundred terms in another order


def _dense(ids, p, V, tail=None):
    """The dense rows [n, L, V] that listed tokens ``ids`` / ``p`` [n, L, k] describe: each row's
    rest over its unlisted tokens in proportion to ``tail`` [L, V] (uniform by default)."""
    n, L, k = ids.shape
    tail = np.full((L, V), 1.0 / V) if tail is None else tail / tail.sum(1, keepdims=True)
    out = np.repeat(tail[None], n, axis=0)  # [n, L, V]
    np.put_along_axis(out, ids, 0.0, axis=2)
    free = out.sum(2, keepdims=True)
    out *= np.clip(1 - p.sum(-1, keepdims=True), 0, None) / np.where(free > 1e-12, free, np.inf)
    np.put_along_axis(out, ids, p, axis=2)
    return out


def exact_rows(target: MixtureOfProducts, x: np.ndarray) -> np.ndarray:
    """[n, L, V]: the target's exact conditional P(. | x_<i) along every path (its own posterior)."""
    d = MemoryDrafter(target, memory=target.L)
    return np.exp(np.array([[d.log_cond(row[:i]) for i in range(target.L)] for row in x]))


def _all_ids(p):
    return np.broadcast_to(np.arange(p.shape[2]), p.shape).copy()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), K=st.integers(1, 3), L=st.integers(1, 4), V=st.integers(2, 6),
       n=st.integers(1, 20), listed=st.booleans(), shaped=st.booleans())
def test_em_rows_step_matches_reference(seed, K, L, V, n, listed, shaped):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, V, size=(n, L)).astype(np.int64)
    k = max(1, V - 2) if listed else V
    rows = rng.dirichlet(np.ones(V), size=(n, L))
    ids = np.argsort(-rows, axis=2)[:, :, :k].copy()
    p = np.take_along_axis(rows, ids, axis=2)
    tail = rng.dirichlet(np.ones(V), size=L) if shaped else None
    _, ids, p, g, shape = _check_rows(x, ids, p, V, tail)
    log_pi = np.log(rng.dirichlet(np.ones(K)))
    log_q = np.log(rng.dirichlet(np.ones(V), size=(K, L)))
    obj, ref_pi, ref_q = em_rows_step(x, _dense(ids, p, V, tail), log_pi, log_q, 1e-6)
    lp, lq = log_pi.copy(), log_q.copy()
    trace, _ = _em_rows(x, ids, p, g, shape, lp, lq, 1, 0.0, 1e-6)
    assert trace[0] == pytest.approx(obj, abs=ROUNDOFF)
    np.testing.assert_allclose(np.exp(lp), np.exp(ref_pi), atol=ROUNDOFF)
    np.testing.assert_allclose(np.exp(lq), np.exp(ref_q), atol=ROUNDOFF)


def test_k1_is_the_mean_row_and_the_rest_goes_where_the_tail_says():
    rng = np.random.default_rng(0)
    n, L, V, k = 50, 3, 7, 4
    rows = rng.dirichlet(np.ones(V), size=(n, L))
    ids = np.argsort(-rows, axis=2)[:, :, :k].copy()
    p = np.take_along_axis(rows, ids, axis=2)
    x = rng.integers(0, V, size=(n, L))
    want = _dense(ids, p, V).mean(0)
    np.testing.assert_allclose(rb_marginals(ids, p, V), want, atol=ROUNDOFF)
    m = fit_mixture_rows(x, ids, p, 1, V, floor=1e-6)
    np.testing.assert_allclose(np.exp(m.log_q[0]), (1 - 1e-6) * want + 1e-6 / V, atol=1e-9)
    # the rest shaped like a given tail: the mean of the rows that tail completes
    shape = rng.dirichlet(np.ones(V), size=L)
    np.testing.assert_allclose(rb_marginals(ids, p, V, tail=shape), _dense(ids, p, V, shape).mean(0), atol=ROUNDOFF)
    # the whole row listed: exactly the mean of the rows
    np.testing.assert_allclose(rb_marginals(_all_ids(rows), rows, V), rows.mean(0), atol=ROUNDOFF)


@pytest.mark.parametrize("F,branch_at,listed", [(2, 0, False), (3, 2, False), (2, 0, True)])
def test_fit_finds_the_modes_of_a_mixture_target(F, branch_at, listed):
    """The target IS an F-mode mixture of products, its futures forking at ``branch_at`` (0: the
    first token decides the future, where every path's row is the same marginal and only the
    count correction can tell the modes apart). The K = F fit's tree covers what the target's own
    oracle tree covers, and clearly more than the product tree of the estimated marginals."""
    t = noisy_futures(F=F, L=6, V=16, temperature=0.7, seed=F, branch_at=branch_at).target
    x = t.sample(400, seed=5)
    rows = exact_rows(t, x)
    ids = np.argsort(-rows, axis=2)[:, :, :6].copy() if listed else _all_ids(rows)
    p = np.take_along_axis(rows, ids, axis=2)
    N = 16
    oracle = coverage(mixture_tree(t, N), t)
    fit = fit_mixture_rows(x, ids, p, F, t.V, seed=0, n_restarts=4)
    prod = fit_mixture_rows(x, ids, p, 1, t.V)
    got, base = coverage(mixture_tree(fit, N), t), coverage(product_tree(prod, N), t)
    assert oracle > 1.1 * base, (oracle, base)  # room a product tree cannot use
    assert got >= 0.98 * oracle, (got, oracle)
    # and its held-out paths say so: a clear log-likelihood gain over K = 1
    held = t.sample(400, seed=6)
    assert (path_log_likelihoods(fit, held) - path_log_likelihoods(prod, held)).mean() > 0.3


def test_no_gain_on_a_product_target():
    """A product target: a 2-mode fit builds the product tree's coverage (within 2%) and gains
    nothing on held-out paths (within noise), and the total correlation is ~0."""
    rng = np.random.default_rng(3)
    t = MixtureOfProducts.product(np.log(rng.dirichlet(np.full(12, 0.5), size=5)))
    x = t.sample(500, seed=1)
    rows = exact_rows(t, x)
    ids = _all_ids(rows)
    fit = fit_mixture_rows(x, ids, rows, 2, t.V, seed=0)
    prod = fit_mixture_rows(x, ids, rows, 1, t.V)
    for N in (4, 16, 64):
        c2, c1 = coverage(mixture_tree(fit, N), t), coverage(product_tree(prod, N), t)
        assert abs(c2 / c1 - 1) < 0.02, (N, c2, c1)
    held = t.sample(2000, seed=2)
    gain = path_log_likelihoods(fit, held) - path_log_likelihoods(prod, held)
    assert gain.mean() < 3 * gain.std(ddof=1) / math.sqrt(gain.size) + 0.01
    tc = total_correlation(rows.mean(0), -(rows * np.log(rows)).sum(-1))
    assert abs(tc["tc"]) < 0.05


def test_total_correlation_matches_enumeration():
    t = noisy_futures(F=3, L=4, V=6, temperature=1.0, seed=4, branch_at=1).target
    x = t.sample(3000, seed=7)
    rows = exact_rows(t, x)
    ent = -(rows * np.log(rows)).sum(-1)  # [n, L]
    got = total_correlation(rows.mean(0), ent)
    want = exact_total_correlation(t)
    assert want > 0.3  # a real coupling to find
    assert abs(got["tc"] - want) <= 4 * got["h_block_se"] + 0.01, (got, want)
    # the mixture that is the target captures all of it: its held-out gain over the product of
    # the marginals is the total correlation
    held = t.sample(3000, seed=8)
    gain = path_log_likelihoods(t, held) - path_log_likelihoods(t.marginals(), held)
    assert gain.mean() == pytest.approx(want, abs=4 * gain.std(ddof=1) / math.sqrt(gain.size))


def test_bad_rows_are_refused_naming_the_argument():
    x = np.zeros((3, 2), dtype=np.int64)
    ids = np.tile(np.arange(4), (3, 2, 1))
    p = np.full((3, 2, 4), 0.25)
    fit_mixture_rows(x, ids, p, 1, 4)
    for kw, msg in ((dict(row_ids=ids[:, :1]), "row_ids: expected shape"),
                    (dict(row_ids=np.zeros_like(ids)), "row_ids: a token appears twice"),
                    (dict(row_probs=p * 2), "row_probs: a row's listed probabilities sum to"),
                    (dict(row_probs=p[..., :3]), "row_probs: expected shape"),
                    (dict(row_ids=ids + 3), "row_ids: token ids must lie in"),
                    (dict(row_probs=np.full((3, 2, 4), 0.2)), "row_probs: rows that list every token"),
                    (dict(floor=0.0), "floor: must be"), (dict(K=0), "K: must be"),
                    (dict(tail=np.ones((3, 4))), "tail: expected shape"),
                    (dict(tail=-np.ones((2, 4))), "tail: must hold finite weights")):
        args = dict(samples=x, row_ids=ids, row_probs=p, K=2, vocab_size=4) | kw
        with pytest.raises(ValueError, match=msg):
            fit_mixture_rows(**args)
    with pytest.raises(ValueError, match="entropies: expected"):
        total_correlation(np.full((2, 4), 0.25), np.zeros((5, 3)))
    with pytest.raises(ValueError, match="scorers: unknown 'best'; choose from mixture"):
        tree_builder("best")
    assert tree_builder("mixture") is SCORERS["mixture"] is mixture_tree


# ------------------------------------------------------------------------------------ pooling


def _record(ds, pid, T, cov, rng):
    """A per-prompt record as prompt_ceiling writes it, with coverages ``cov`` {tree: {N: c}}."""
    return {"dataset": ds, "id": pid, "temperature": T, "L": 4, "samples": 10, "budgets": [4, 16],
            "coverage": cov, "mc": {k: {n: [c, 0.01] for n, c in v.items()} for k, v in cov.items()},
            "tc": {"tc": 2.0 + rng.normal(0, 0.1), "h_positions": 9.0, "h_block": 7.0, "h_block_se": 0.1},
            "heldout": {"1": {"ll": -7.0}, "2": {"ll": -6.5, "gain": [0.5 + rng.normal(0, 0.05), 0.1]}},
            "dead": {"nodes": 16, "dead_share": 0.1, "dead_splice_share": 0.05, "dead_mass_lost": 0.001},
            "forwards": 3, "prompt_tokens": 12, "wall_s": 1.0}


def _records(n=6):
    rng = np.random.default_rng(0)
    out = []
    for ds in ("code", "prose"):
        for i in range(n):
            base = {"4": 0.5 + 0.05 * i, "16": 0.8 + 0.05 * i}
            cov = {"product": base, "mixture K=2": {k: v * 1.05 for k, v in base.items()},
                   "oracle": {k: v * (1.10 + 0.01 * rng.standard_normal()) for k, v in base.items()}}
            out.append(_record(ds, f"{ds}{i}", 1.0, cov, rng))
    return out


def test_pool_pairs_over_prompts_with_one_bonferroni_family():
    recs = _records()
    pooled = pool_ceiling(recs)
    assert set(pooled) == {"code", "prose"} and set(pooled["code"]) == {"1"}
    tab = pooled["code"]["1"]
    assert tab["trees"] == ["product", "mixture K=2", "oracle"] and tab["n_prompts"] == 6
    cell = tab["by_budget"]["16"]
    family = 2 * 2 * 2  # two data sets x two budgets x two trees against the product
    code = [r for r in recs if r["dataset"] == "code"]
    want = compare([r["coverage"]["oracle"]["16"] for r in code], [r["coverage"]["product"]["16"] for r in code],
                   family=family).to_dict()
    assert cell["gain"]["oracle"] == want
    assert cell["gain"]["mixture K=2"]["gain"] == pytest.approx(0.05)
    assert cell["coverage"]["product"][0] == pytest.approx(np.mean([r["coverage"]["product"]["16"] for r in code]))
    assert tab["tc_share"]["2"] == pytest.approx(tab["heldout_gain"]["2"][0] / tab["tc"][0])
    one = pool_ceiling(code[:1])  # one prompt: no interval to pair
    assert one["code"]["1"]["by_budget"]["4"]["gain"]["oracle"] is None


def test_reach_is_the_measured_gain_over_the_predicted_one():
    recs = _records()
    pooled = pool_ceiling(recs)
    measured = [{"dataset": "code", "temperature": 1.0, "budget": 16, "K": 2, "drafter": "mfd-k2",
                 "gain": 0.01, "lo": -0.005, "hi": 0.025, "runs": 3},
                {"dataset": "prose", "temperature": 1.0, "budget": 16, "K": None, "drafter": "dartree",
                 "gain": 0.02, "lo": 0.0, "hi": 0.04},
                {"dataset": "code", "temperature": 0.7, "budget": 16, "K": 2, "drafter": "mfd-k2",
                 "gain": 0.01, "lo": 0.0, "hi": 0.02}]
    rows = ceiling_reach(pooled, measured)
    code = [r for r in recs if r["dataset"] == "code"]
    pred = compare([1 + r["coverage"]["mixture K=2"]["16"] for r in code],
                   [1 + r["coverage"]["product"]["16"] for r in code], family=3).to_dict()
    assert rows[0]["predicted"] == pred and rows[0]["ceiling"] == "mixture K=2" and rows[0]["runs"] == 3
    assert rows[0]["reach"] == pytest.approx(0.01 / pred["gain"])
    assert rows[0]["reach_lo"] == pytest.approx(-0.005 / pred["gain"])
    assert rows[1]["ceiling"] == "oracle" and rows[1]["reach"] > 0
    assert rows[2]["predicted"] is None and "T = 0.7" in rows[2]["why"]
    # one data set: dataset None finds it
    only = pool_ceiling(code)
    assert ceiling_reach(only, [dict(measured[0], dataset=None)])[0]["predicted"]["n_prompts"] == 6
    # the two drafters at budgets of their own: the K-mode tree at N = 16 against the product at N = 4
    two = ceiling_reach(pooled, [dict(measured[0], base_budget=4)])[0]
    assert two["predicted"] == compare([1 + r["coverage"]["mixture K=2"]["16"] for r in code],
                                       [1 + r["coverage"]["product"]["4"] for r in code], family=1).to_dict()
    assert two["predicted"]["gain"] > pred["gain"]  # a smaller product tree covers less
    assert "product N = 5" in ceiling_reach(pooled, [dict(measured[0], base_budget=5)])[0]["why"]
    with pytest.raises(ValueError, match="measured: an entry lacks 'gain'"):
        ceiling_reach(pooled, [{"temperature": 1.0, "budget": 4, "K": 2, "lo": 0, "hi": 0}])
