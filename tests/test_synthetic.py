"""Tests of the synthetic multi-future families (mfd_theory.synthetic)."""

from __future__ import annotations

import numpy as np
import pytest

from mfd_theory import synthetic as syn
from mfd_theory.distributions import MixtureOfProducts


@pytest.mark.parametrize("name", sorted(syn.FAMILIES))
def test_family_builds_a_valid_seeded_target(name):
    a = syn.make(name, seed=3)
    b = syn.make(name, seed=3)
    assert isinstance(a.target, MixtureOfProducts)
    assert a.family == name
    np.testing.assert_array_equal(a.futures, b.futures)
    np.testing.assert_array_equal(a.target.log_q, b.target.log_q)
    F, L = a.futures.shape
    assert a.target.K == F and a.target.L == L
    assert len({tuple(r) for r in a.futures.tolist()}) == F  # futures are distinct
    assert a.futures.min() >= 0 and a.futures.max() < a.V
    assert abs(a.weights.sum() - 1.0) < 1e-12
    # each mode puts more mass on its own future's token than on any single token of the
    # background, except far out in the Zipf family where confidence decays below the top word
    own = np.take_along_axis(a.target.log_q, a.futures[:, :, None], axis=2)[..., 0]  # [F, L]
    if a.exact:
        assert (own == 0.0).all()
    elif name != "zipf_futures":
        assert (own >= np.log(0.5)).mean() > 0.9
    c = syn.make(name, seed=4)
    assert not np.array_equal(a.target.log_q, c.target.log_q) or not np.array_equal(a.weights, c.weights)


@pytest.mark.parametrize("m", [1, 3, 15])
def test_two_futures_disagree_in_exactly_m_positions(m):
    t = syn.two_futures(m=m, L=15, V=5, seed=m)
    assert t.disagreements()[0, 1] == m
    assert t.exact
    t2 = syn.two_futures(m=2, L=6, V=3, seed=0, positions=[1, 4])
    assert np.flatnonzero(t2.futures[0] != t2.futures[1]).tolist() == [1, 4]


def test_exact_futures_give_each_future_its_weight():
    t = syn.branching(F=3, L=8, V=6, branch_at=2, seed=1)
    for f, w in zip(t.futures, t.weights):
        assert np.isclose(np.exp(t.target.log_prefix_prob(f)), w, rtol=1e-12)


def test_branching_shares_prefix_then_all_differ():
    t = syn.branching(F=4, L=10, V=8, branch_at=3, seed=2)
    assert (t.futures[:, :3] == t.futures[0, :3]).all()
    assert len(set(t.futures[:, 3].tolist())) == 4


@pytest.mark.parametrize("F", [2, 3, 4])
def test_shifted_futures_disagree_everywhere_after_the_shift(F):
    t = syn.shifted(F=F, L=12, V=6, shift_at=4, seed=F)
    assert (t.futures[:, :4] == t.futures[0, :4]).all()
    # the base and the one-token insertion disagree at every position from the shift on
    assert (t.futures[0, 4:] != t.futures[1, 4:]).all()
    # the insertion is the base shifted right by one
    np.testing.assert_array_equal(t.futures[1, 5:], t.futures[0, 4:-1])


def test_noisy_futures_temperature_controls_peakedness():
    cold = syn.noisy_futures(F=2, L=6, V=10, temperature=0.1, seed=0)
    hot = syn.noisy_futures(F=2, L=6, V=10, temperature=5.0, seed=0)
    p_cold = np.exp(cold.target.log_q.max(axis=2)).mean()
    p_hot = np.exp(hot.target.log_q.max(axis=2)).mean()
    assert p_cold > 0.99 and p_hot < p_cold
    assert not cold.exact


def test_zipf_futures_follow_decaying_confidence():
    t = syn.zipf_futures(F=2, L=15, V=64, seed=0)
    conf = syn.decaying_confidence(15)
    np.testing.assert_allclose(conf[:5], syn.MEDUSA_HEAD_ACCURACY)
    assert np.all(np.diff(conf) < 0)
    own = np.exp(t.target.log_q[0, np.arange(15), t.futures[0]])  # [L]
    assert np.all(own >= conf - 1e-12)  # own token: confidence plus its share of the background
    assert np.all(own <= conf + (1 - conf) * 0.5)


@pytest.mark.parametrize(
    "call, arg",
    [
        (lambda: syn.two_futures(m=0), "m"),
        (lambda: syn.two_futures(m=16, L=15), "m"),
        (lambda: syn.two_futures(V=1), "V"),
        (lambda: syn.two_futures(m=2, L=5, positions=[1, 1]), "positions"),
        (lambda: syn.two_futures(weights=[1.0, -1.0]), "weights"),
        (lambda: syn.branching(F=5, V=4), "F"),
        (lambda: syn.branching(branch_at=15, L=15), "branch_at"),
        (lambda: syn.shifted(F=5), "F"),
        (lambda: syn.noisy_futures(temperature=0.0), "temperature"),
        (lambda: syn.zipf_futures(zipf_s=-1.0), "zipf_s"),
        (lambda: syn.two_futures(noise=1.5), "noise"),
        (lambda: syn.make("nope"), "family"),
        (lambda: syn.two_futures(seed=-1), "seed"),
        # a number given as text or a bool is refused, not converted
        (lambda: syn.two_futures(noise="0.1"), "noise"),
        (lambda: syn.branching(noise=True), "noise"),
        (lambda: syn.noisy_futures(peak="4"), "peak"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(call, arg):
    with pytest.raises(ValueError, match=arg):
        call()


def test_dflash_profile_comment_states_the_chain_tau_it_implies():
    # the comment above ACCURACY_PROFILES quotes 1 + sum_{d=1..15} 0.85^d; recompute it as the
    # coverage of a 15-token chain under a one-mode target that accepts each token w.p. 0.85
    import inspect
    import re

    from mfd_theory.coverage import coverage
    from mfd_theory.trees import chain_tree

    (c,) = syn.ACCURACY_PROFILES["dflash"]
    q = np.full((1, 15, 2), np.log(1 - c))
    q[:, :, 0] = np.log(c)
    tau = 1 + coverage(chain_tree(np.zeros(15, dtype=np.int64)), MixtureOfProducts([0.0], q))
    src = inspect.getsource(syn)
    m = re.search(r"1 \+ sum_\{d=1\.\.15\} 0\.85\^d = ([0-9.]+)", src)
    assert m is not None
    assert float(m.group(1)) == pytest.approx(tau, abs=0.005)  # the comment rounds to 2 decimals
