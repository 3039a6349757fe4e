"""Global top-N allocation over a batch equals brute force over the union of the requests' prefixes."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mfd_theory.allocation import allocate_global, split_evenly
from mfd_theory.trees import mixture_tree, product_tree


def _all_prefixes(log_pi, log_q):
    """Every prefix of a K-mode mixture of products with its log mixture score (slow, obvious)."""
    k, length, v = log_q.shape
    out = []
    for d in range(1, length + 1):
        for toks in itertools.product(range(v), repeat=d):
            per_mode = log_pi + sum(log_q[:, i, t] for i, t in enumerate(toks))
            out.append((toks, float(np.logaddexp.reduce(per_mode))))
    return out


def _brute_global(requests, n_total):
    """Global top-n over (request, prefix); the same order as the builders within a request is not
    needed here: only scores and which request wins a tie across requests are compared."""
    rows = [(b, toks, s) for b, (lp, lq) in enumerate(requests) for toks, s in _all_prefixes(lp, lq)]
    rows.sort(key=lambda r: (-r[2], r[0]))
    return rows[:n_total]


def _random_requests(rng, b, k, length, v, ties=False):
    reqs = []
    for _ in range(b):
        logits = rng.normal(size=(k, length, v)) * 2
        if ties:
            logits = np.round(logits)  # equal values inside and across requests
        lq = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
        lp = np.log(rng.dirichlet(np.ones(k))) if k > 1 else np.zeros(1)
        reqs.append((lp, lq))
    return reqs


def _trees(requests, n):
    return [product_tree(lq[0], n) if lq.shape[0] == 1 else mixture_tree(lp, lq, n) for lp, lq in requests]


@settings(deadline=None, max_examples=40)
@given(seed=st.integers(0, 10_000), b=st.integers(1, 4), k=st.integers(1, 2), n_total=st.integers(0, 30),
       ties=st.booleans())
def test_global_allocation_equals_brute_force(seed, b, k, n_total, ties):
    rng = np.random.default_rng(seed)
    reqs = _random_requests(rng, b, k, 3, 3, ties)
    trees = _trees(reqs, max(n_total, 1))
    counts = allocate_global([t.log_score for t in trees], n_total)
    brute = _brute_global(reqs, n_total)
    assert counts.sum() == len(brute)
    chosen = sorted(s for t, c in zip(trees, counts) for s in t.log_score[:c])
    np.testing.assert_allclose(chosen, sorted(s for _, _, s in brute), atol=1e-9)
    # each request keeps a first slice of its best-first tree: prefix-closed
    for t, c in zip(trees, counts):
        assert all(p < i for i, p in enumerate(t.parent[:c]))
    if not ties:  # distinct scores: the same (request, prefix) pairs exactly
        got = {(bi, tuple(int(x) for x in path)) for bi, (t, c) in enumerate(zip(trees, counts))
               for path in (t.paths()[:c] if c else [])}
        assert got == {(bi, toks) for bi, toks, _ in brute}


def test_ties_across_requests_go_to_the_lower_request():
    lq = np.log(np.full((1, 2, 2), 0.5))
    trees = [product_tree(lq[0], 6) for _ in range(3)]  # identical requests: every score ties across them
    counts = allocate_global([t.log_score for t in trees], 5)
    assert counts.tolist() == [2, 2, 1]  # scores log .5 (x2 each request) first, lower requests first
    # all six depth-1 nodes (score .5), then the first depth-2 node (.25) goes to request 0
    assert allocate_global([t.log_score for t in trees], 7).tolist() == [3, 2, 2]


def test_global_never_covers_less_than_an_even_split():
    """By the drafter's own score (the quantity allocated), global top-N >= any split of the same total."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        reqs = _random_requests(rng, 4, 2, 4, 5)
        trees = _trees(reqs, 40)
        counts = allocate_global([t.log_score for t in trees], 40)
        even = split_evenly(40, [len(t) for t in trees])
        mass = lambda cs: sum(np.exp(t.log_score[:c]).sum() for t, c in zip(trees, cs))  # noqa: E731
        assert mass(counts) >= mass(even) - 1e-12


def test_a_cap_is_the_top_n_of_the_capped_lists():
    rng = np.random.default_rng(5)
    reqs = _random_requests(rng, 3, 2, 3, 4)
    trees = _trees(reqs, 30)
    scores = [t.log_score for t in trees]
    for cap in (1, 3, 7):
        counts = allocate_global(scores, 12, cap=cap)
        assert counts.max() <= cap and counts.sum() == min(12, 3 * cap)
        assert counts.tolist() == allocate_global([s[:cap] for s in scores], 12).tolist()
    with pytest.raises(ValueError, match="cap"):
        allocate_global(scores, 12, cap=0)


def test_split_evenly():
    assert split_evenly(10, [8, 8, 8]).tolist() == [4, 3, 3]
    assert split_evenly(10, [1, 8, 8]).tolist() == [1, 5, 4]
    assert split_evenly(100, [2, 3]).tolist() == [2, 3]
    assert split_evenly(0, [2, 3]).tolist() == [0, 0]


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="n_total"):
        allocate_global([np.zeros(2)], -1)
    with pytest.raises(ValueError, match="n_total"):
        allocate_global([np.zeros(2)], True)
    with pytest.raises(ValueError, match=r"scores\[1\].*best-first"):
        allocate_global([np.zeros(2), np.array([-2.0, -1.0])], 3)
    with pytest.raises(ValueError, match=r"scores\[0\].*NaN"):
        allocate_global([np.array([np.nan])], 1)
    with pytest.raises(ValueError, match=r"scores\[0\].*1-D"):
        allocate_global([np.zeros((2, 2))], 1)


@settings(deadline=None, max_examples=60)
@given(st.integers(0, 2 ** 16), st.integers(1, 3), st.integers(0, 12), st.booleans())
def test_proportional_allocation_maximises_the_sum_of_log_tau_as_brute_force(seed, b, n_total, ties):
    """Each request's gains in log tau fall along its best-first order (concave in the count), so the
    merge of the gains is the best split of n_total: compared with every split, by its objective."""
    from mfd_theory.allocation import allocate_proportional

    rng = np.random.default_rng(seed)
    scores = []
    for lp, lq in _random_requests(rng, b, 1, 2, 3, ties=ties):
        scores.append(product_tree(lq[0], int(rng.integers(1, 6))).log_score)

    def objective(counts):
        return sum(np.log1p(np.exp(s[:c]).sum()) for s, c in zip(scores, counts))

    got = allocate_proportional(scores, n_total)
    assert got.sum() == min(n_total, sum(len(s) for s in scores)) and (got <= [len(s) for s in scores]).all()
    best = max(objective(c) for c in itertools.product(*[range(len(s) + 1) for s in scores])
               if sum(c) == got.sum())
    assert objective(got) == pytest.approx(best, rel=1e-12, abs=1e-12)
    with pytest.raises(ValueError, match=r"scores\[1\]: not in best-first order"):
        allocate_proportional([np.array([-1.0]), np.array([-2.0, -1.0])], 2)
