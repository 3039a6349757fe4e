"""The batch simulator: replays equal their slow twin, the oracle is the best, traces are checked,
synthetic texts are seeded and their drafter calibrated, and (torch) a replay of real traces
decodes what the batched decoder decodes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference_batch_sim as ref
from mfd_theory.batch_sim import SIM_POLICIES, DecodeTraces, replay, rescore, synthetic_traces


@st.composite
def traces(draw):
    P, T, C = draw(st.integers(1, 5)), draw(st.integers(2, 7)), draw(st.integers(1, 6))
    D = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    ties = draw(st.booleans())
    scores = np.full((P, T - 1, C), -np.inf)
    paths = np.full((P, T - 1, D), -1, dtype=np.int64)
    for i in range(P):
        for s in range(T - 1):
            n = int(rng.integers(0, C + 1))
            v = np.round(rng.uniform(-6, 0, n), 0 if ties else 6)
            scores[i, s, :n] = np.sort(v)[::-1]
            if n:
                k = int(rng.integers(0, min(D, n) + 1))
                paths[i, s, :k] = np.sort(rng.choice(n, size=k, replace=False))
    lengths = rng.integers(1, T + 1, size=P)
    return DecodeTraces(scores, paths, lengths)


@settings(deadline=None, max_examples=80)
@given(traces(), st.sampled_from(SIM_POLICIES), st.integers(1, 4), st.integers(1, 4), st.integers(1, 5),
       st.booleans())
def test_replay_equals_the_slow_twin(tr, policy, budget, batch, cap, static):
    r = replay(tr, policy, budget, batch, cap=cap, static=static)
    recs, sizes = ref.replay(tr, policy, budget, batch, cap, static)
    assert list(zip(r.request.tolist(), r.position.tolist(), r.nodes.tolist(), r.accepted.tolist())) == recs
    assert r.round_size.tolist() == sizes
    assert (r.request_rounds == np.bincount([q[0] for q in recs], minlength=tr.n_requests)).all()
    nodes, acc = rescore(tr, r, policy, cap=cap)  # a policy on its own rounds gives what it gave
    assert (nodes == r.nodes).all() and (acc == r.accepted).all()


@settings(deadline=None, max_examples=60)
@given(traces(), st.integers(1, 3), st.integers(1, 4))
def test_the_oracle_accepts_the_most_and_bounds_every_policy(tr, budget, cap):
    base = replay(tr, "per_request", budget, tr.n_requests, cap=cap)
    _, best = rescore(tr, base, "oracle", cap=cap)
    for pol in SIM_POLICIES:
        _, acc = rescore(tr, base, pol, cap=cap)
        for rd in np.unique(base.round):
            at = base.round == rd
            if pol == "per_request" and budget > cap:
                continue  # per-request trees are not capped, so they may hold more nodes
            assert acc[at].sum() <= best[at].sum()
    for rd in np.unique(base.round):  # and it is the brute-force best
        at = np.flatnonzero(base.round == rd)
        sc = [tr.scores[base.request[j], base.position[j]] for j in at]
        pa = [tr.paths[base.request[j], base.position[j]] for j in at]
        sz = [tr.sizes[base.request[j], base.position[j]] for j in at]
        assert best[at].sum() == ref.oracle_best(sc, pa, sz, budget, cap)


def test_traces_and_policies_are_checked_by_name():
    s = np.log(np.array([[[0.5, 0.25, 0.1]]]))
    p = np.array([[[0, 2]]])
    tr = DecodeTraces(s, p, [2])
    assert tr.accepted(0, 0, 3) == 2 and tr.accepted(0, 0, 2) == 1
    with pytest.raises(ValueError, match="scores: not best first"):
        DecodeTraces(s[:, :, ::-1], p, [2])
    with pytest.raises(ValueError, match="scores: a finite score after -inf"):
        DecodeTraces(np.array([[[-1.0, -np.inf, -2.0]]]), p * 0 - 1, [2])
    with pytest.raises(ValueError, match="paths: a node index outside"):
        DecodeTraces(s, np.array([[[0, 3]]]), [2])
    with pytest.raises(ValueError, match="paths: each must list rising"):
        DecodeTraces(s, np.array([[[2, 0]]]), [2])
    with pytest.raises(ValueError, match="lengths"):
        DecodeTraces(s, p, [3])
    with pytest.raises(ValueError, match="policy"):
        replay(tr, "greedy", 2, 1)
    with pytest.raises(ValueError, match="budget"):
        replay(tr, "global", 0, 1)
    with pytest.raises(ValueError, match="traces"):
        replay(s, "global", 2, 1)


def test_synthetic_traces_are_seeded_and_a_target_drafter_is_calibrated():
    a = synthetic_traces(6, 24, cap=8, seed=3)
    b = synthetic_traces(6, 24, cap=8, seed=3)
    c = synthetic_traces(6, 24, cap=8, seed=4)
    assert np.array_equal(a.scores, b.scores) and np.array_equal(a.paths, b.paths)
    assert not np.array_equal(a.scores, c.scores)
    # noise 0: the drafter is the target, so a tree's covered mass is its expected acceptance
    # (docs/background.md): over many roots the accepted mean matches the covered-mass mean
    tr = synthetic_traces(40, 64, cap=8, seed=0)
    live = tr.sizes > 0
    mass = np.where(np.isfinite(tr.scores), np.exp(tr.scores), 0.0).sum(axis=2)[live]
    got = (tr.paths >= 0).sum(axis=2)[live]  # the whole tree's acceptance
    z = (got.mean() - mass.mean()) / (got.std(ddof=1) / np.sqrt(got.size))
    assert abs(z) < 4, z
    noisy = synthetic_traces(40, 64, cap=8, noise=2.0, seed=0)  # a drafter sure in the wrong places
    nl = noisy.sizes > 0
    assert (noisy.paths >= 0).sum(axis=2)[nl].mean() < 0.9 * got.mean()
    with pytest.raises(ValueError, match="hard_share"):
        synthetic_traces(2, 8, hard_share=(0.1, 1.5))
    with pytest.raises(ValueError, match="surprise"):
        synthetic_traces(2, 8, surprise=-1.0)


def test_mixture_traces_build_mixture_trees():
    tr = synthetic_traces(3, 16, cap=6, modes=3, noise=0.5, seed=1)
    assert (tr.sizes[:, :-1] > 0).all() and tr.scores.shape == (3, 15, 6)
