"""``mfd ceiling`` and its measurement on tiny models: the batched oracle search, the trees' exact
coverage and the sampled rows against brute force (every prefix from a full forward, no cache), on
an attention and a hybrid target; two pooled prompts give a K = 2 gain; the record, the command
and its bad options; the gpu-check step on CPU."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import llm_helpers  # noqa: E402  (single-threaded torch)
import pipeline_helpers  # noqa: E402
from mfd_theory.cli import main as mfd  # noqa: E402
from mfd_theory.fit import fit_mixture_rows  # noqa: E402
from mfd_theory.llm.measure.ceiling import (  # noqa: E402
    CeilingOptions, TargetScorer, accepted_lengths, measure_ceiling, oracle_tree_of, prompt_ceiling, sample_paths,
)
from mfd_theory.llm.models.target import TargetModel  # noqa: E402
from mfd_theory.trees import mixture_tree, product_tree  # noqa: E402

import reference  # noqa: E402

# float32 forwards, cached tree rows against one full forward per prefix: the sharpened head gives
# logits of some tens, whose rounding differs by ~1e-5 between two kernels
FORWARD = 5e-5
HYBRID = 2e-4  # the same through Gated DeltaNet layers: the tree rule against the model's chunked kernel


def _tiny(V: int = 5, seed: int = 0, hybrid: bool = False):
    """A tiny target with sharp conditionals (prefixes differ clearly)."""
    model = (llm_helpers.tiny_hybrid(vocab_size=V, hidden_size=16, seed=seed) if hybrid
             else llm_helpers.tiny_qwen3(vocab_size=V, hidden_size=16, num_layers=1, seed=seed, attn="sdpa"))
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model


@torch.no_grad()
def _brute_force(model, context, L: int, V: int, T: float = 1.0) -> dict[tuple, np.ndarray]:
    """The tempered row log P_T(. | context + s) of every prefix s shorter than L, each from one full
    forward of context + s (no cache)."""
    rows = {}
    for d in range(L):
        for s in itertools.product(range(V), repeat=d):
            logits = model(input_ids=torch.tensor([list(context) + list(s)])).logits[0, -1].double()
            rows[s] = torch.log_softmax(logits / T, -1).numpy()
    return rows


def _prefix_lp(rows, s) -> float:
    return float(sum(rows[s[:i]][s[i]] for i in range(len(s))))


@pytest.mark.parametrize("hybrid", [False, True], ids=["attention", "hybrid"])
@pytest.mark.parametrize("T", [1.0, 0.7])
def test_oracle_search_equals_brute_force_however_it_batches(hybrid, T):
    """The same tree and rows however the search batches its forwards, and whether or not they hold
    their rows in the cache (``hold``: on an attention target each later forward computes its new
    nodes only; a hybrid runs as without it); the target's cache is as it was after release."""
    V, L, ctx = 4, 3, [1, 2, 3]
    model = _tiny(V, hybrid=hybrid)
    rows = _brute_force(model, ctx, L, V, T)
    every = [s for d in range(1, L + 1) for s in itertools.product(range(V), repeat=d)]
    want, _ = reference.top_n_tree(lambda s: _prefix_lp(rows, s), every, 30)
    target = TargetModel(model)
    tol = HYBRID if hybrid else FORWARD
    forwards, computed = {}, {}
    for hold in (False, True):
        for lookahead, max_tokens, max_held in ((0, 1024, 8192), (4, 1024, 8192), (64, 1024, 8192), (64, 4, 8192),
                                                (4, 1024, 12)):
            scorer = TargetScorer(target, ctx, L, T, max_tokens=max_tokens, hold=hold, max_held=max_held)
            assert scorer.hold == (hold and not hybrid)
            tree = oracle_tree_of(scorer, 30, lookahead=lookahead)
            assert tree.paths() == want, (hold, lookahead, max_tokens, max_held)
            np.testing.assert_allclose(tree.log_score, [_prefix_lp(rows, s) for s in want], atol=tol)
            np.testing.assert_allclose(scorer.log_probs(tree), [_prefix_lp(rows, s) for s in want], atol=tol)
            for s, row in rows.items():
                if scorer.has_row(s):
                    np.testing.assert_allclose(scorer.log_cond(s), row, atol=tol)
            scorer.release()
            assert target._pending == 0 and target.length == len(ctx) - 1
            forwards[(hold, lookahead, max_tokens, max_held)] = scorer.forwards
            computed[(hold, lookahead, max_tokens, max_held)] = scorer.tokens
    # the frontier batched: fewer forwards (depth bounds it), the same tree
    assert forwards[(False, 64, 1024, 8192)] < 0.6 * forwards[(False, 0, 1024, 8192)]
    if not hybrid:  # held rows are not computed again
        for key in ((0, 1024, 8192), (4, 1024, 8192)):
            assert computed[(True, *key)] < computed[(False, *key)], key


def test_exact_coverage_of_any_tree_and_mixture_trees_equal_brute_force():
    """A product tree, a fitted K = 2 mixture's tree (against the reference builder's top-N by the
    mixture) and a hand-made tree: log P_T(s) of every node from the scorer equals brute force, in
    one forward or in chunks of a few rows, holding the rows in the cache or not."""
    V, L, ctx, T = 4, 3, [2, 1, 3], 1.0
    model = _tiny(V, seed=1)
    rows = _brute_force(model, ctx, L, V, T)
    target = TargetModel(model)
    paths = sample_paths(target, ctx, L, 200, T, seed=3)
    mix = fit_mixture_rows(paths.tokens, paths.top_ids, paths.top_p, 2, V, seed=0)
    tree = mixture_tree(mix, 20)
    want, _ = reference.mixture_tree(mix.log_pi, mix.log_q, 20)
    assert tree.paths() == want
    from mfd_theory.trees import DraftTree

    hand = DraftTree.from_paths([(3,), (3, 0), (3, 0, 2), (1,), (1, 1)])
    for t in (product_tree(np.log(paths.marginal), 12), tree, hand):
        for max_tokens in (1024, 3):
            for hold in (False, True):
                scorer = TargetScorer(target, ctx, L, T, max_tokens=max_tokens, hold=hold)
                for _ in range(2):  # with hold, the second time from the rows the first one kept
                    np.testing.assert_allclose(scorer.log_probs(t), [_prefix_lp(rows, s) for s in t.paths()],
                                               atol=FORWARD)
                scorer.release()


@pytest.mark.parametrize("hybrid", [False, True], ids=["attention", "hybrid"])
def test_sampled_rows_are_the_targets_conditionals(hybrid):
    """Every kept row entry, log-probability and entropy along every sampled path equals brute
    force; the mean row is the exact marginal (within 5 s.e.); the first tokens pass a chi-square
    test against the root row at T = 0.7."""
    from scipy.stats import chisquare

    V, L, ctx, T = 4, 3, [3, 0, 2], 0.7
    model = _tiny(V, seed=2, hybrid=hybrid)
    rows = _brute_force(model, ctx, L, V, T)
    n = 1500
    ps = sample_paths(TargetModel(model), ctx, L, n, T, seed=4, top_k=3, batch=700)
    assert ps.tokens.shape == (n, L) and ps.top_ids.shape == (n, L, 3)
    tol = HYBRID if hybrid else FORWARD
    for m in range(0, n, 37):
        for i in range(L):
            row = rows[tuple(ps.tokens[m, :i])]
            assert ps.log_p[m, i] == pytest.approx(row[ps.tokens[m, i]], abs=tol)
            assert ps.entropy[m, i] == pytest.approx(-(np.exp(row) * row).sum(), abs=10 * tol)
            np.testing.assert_allclose(np.log(ps.top_p[m, i]), row[ps.top_ids[m, i]], atol=tol)
            assert set(ps.top_ids[m, i]) == set(np.argsort(-row, kind="stable")[:3])
    exact = np.zeros((L, V))
    for s in itertools.product(range(V), repeat=L):
        p = math.exp(_prefix_lp(rows, s))
        for i, t in enumerate(s):
            exact[i, t] += p
    np.testing.assert_allclose(ps.marginal[0], np.exp(rows[()]), atol=tol)  # the root row is exact
    assert np.all(np.abs(ps.marginal - exact) <= 5 * np.sqrt(exact * (1 - exact) / n) + 1e-6)
    obs = np.bincount(ps.tokens[:, 0], minlength=V)
    assert chisquare(obs, np.exp(rows[()]) * n / np.exp(rows[()]).sum()).pvalue > 1e-3


def test_two_pooled_prompts_give_a_positive_k2_gain():
    """Two prompts with different futures, pooled: a true two-future target. The K = 2 fit on the
    pooled paths (each with its own prompt's rows) builds a tree that covers clearly more of the
    pooled target than the product tree of the pooled marginals."""
    V, L, T = 6, 4, 1.0
    model = _tiny(V, seed=3)
    target = TargetModel(model)
    ctxs = ([1, 2, 3], [4, 0, 5])
    parts = [sample_paths(target, c, L, 300, T, seed=i) for i, c in enumerate(ctxs)]
    x = np.concatenate([p.tokens for p in parts])
    ids, pr = np.concatenate([p.top_ids for p in parts]), np.concatenate([p.top_p for p in parts])
    prod = fit_mixture_rows(x, ids, pr, 1, V)
    mix = fit_mixture_rows(x, ids, pr, 2, V, seed=0, n_restarts=4)
    scorers = [TargetScorer(target, c, L, T) for c in ctxs]

    def pooled(tree):
        return float(np.mean([np.exp(s.log_probs(tree)).sum() for s in scorers]))

    for N in (8, 32):
        c1, c2 = pooled(product_tree(prod, N)), pooled(mixture_tree(mix, N))
        assert c2 > 1.03 * c1, (N, c2, c1)


def test_discard_returns_to_the_context():
    model = _tiny(5)
    t = TargetModel(model)
    t.prefill(torch.tensor([1, 2]), hidden=False)
    from mfd_theory.trees import DraftTree

    tree = DraftTree.from_paths([(0,), (0, 1), (3,)])
    a = t.verify(4, tree, hidden=False).logits
    t.discard()
    assert t.length == 2
    b = t.verify(4, tree, hidden=False).logits
    torch.testing.assert_close(a, b)
    t.discard()
    with pytest.raises(ValueError, match="discard: nothing to discard"):
        t.discard()


def test_prompt_record_orders_its_trees_and_checks_by_monte_carlo():
    V, L = 8, 4
    model = _tiny(V, seed=4)
    opt = CeilingOptions(L=L, budgets=(1, 4, 16), modes=(1, 2), samples=400, dead_at=16, top_k=5, batch=400)
    rec = prompt_ceiling(model, [1, 5, 2], 1.0, opt, seed=0)
    cov, mc = rec["coverage"], rec["mc"]
    assert set(cov) == {"oracle", "product", "mixture K=2"}
    for n in ("1", "4", "16"):
        assert all(cov[name][n] <= cov["oracle"][n] + 1e-9 for name in cov)  # nothing covers more than the oracle
        for name in cov:  # the Monte-Carlo check agrees with the exact coverage
            assert abs(mc[name][n][0] - cov[name][n]) <= 5 * mc[name][n][1] + 0.01, (name, n)
    assert cov["oracle"]["1"] == pytest.approx(cov["product"]["1"])  # one node: the root row's best token
    tc = rec["tc"]
    assert tc["tc"] == pytest.approx(tc["h_positions"] - tc["h_block"]) and tc["h_block"] > 0
    held = rec["heldout"]
    assert set(held) == {"1", "2", "product"} and len(held["2"]["gain"]) == 2
    # K = 1 fitted on the top-5 rows costs what the cut costs, against the whole rows' marginals
    assert held["1"]["ll"] <= held["product"]["ll"] + 0.05
    assert rec["dead"]["nodes"] == 16 and 0 <= rec["dead"]["dead_splices"] <= rec["dead"]["dead"]
    assert rec["forwards"] >= 2
    json.dumps(rec)


def test_bad_options_are_refused_naming_them():
    model = _tiny(5)
    for opt, msg in ((CeilingOptions(modes=(2, 4)), "modes: must include 1"),
                     (CeilingOptions(scorers=("best-mode",)), "scorers: unknown 'best-mode'; choose from mixture"),
                     (CeilingOptions(budgets=()), "budgets: give at least one"),
                     (CeilingOptions(samples=1), "samples: must be an integer >= 2")):
        with pytest.raises(ValueError, match=msg):
            prompt_ceiling(model, [1, 2], 1.0, opt)
    with pytest.raises(ValueError, match="temperature: must be a finite number > 0, got 0.0"):
        prompt_ceiling(model, [1, 2], 0.0)
    with pytest.raises(ValueError, match="context: needs at least two tokens"):
        TargetScorer(model, [1], 3)
    with pytest.raises(ValueError, match="L: must be an integer >= 1, got 0"):
        TargetScorer(model, [1, 2], 0)
    with pytest.raises(ValueError, match="M: must be an integer >= 1, got 2.5"):
        sample_paths(model, [1, 2], 3, 2.5)


def test_accepted_lengths_match_a_direct_count():
    rng = np.random.default_rng(0)
    tree = product_tree(np.log(rng.dirichlet(np.ones(4), size=3)), 12)
    samples = rng.integers(0, 4, size=(200, 3))
    paths = set(tree.paths())
    slow = [sum(tuple(x[:d]) in paths for d in range(1, 4)) for x in samples.tolist()]  # prefix-closed tree
    assert accepted_lengths(tree, samples).tolist() == slow


def test_measure_resumes_from_its_files(tmp_path):
    model = _tiny(6)
    opt = CeilingOptions(L=3, budgets=(1, 4), modes=(1, 2), samples=20, dead_at=4, batch=20)
    ctxs = [("a", "p0", [1, 2]), ("a", "p1", [3, 4, 5])]
    recs = measure_ceiling(model, ctxs, (1.0, 0.7), opt, out_dir=tmp_path, key="k1", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-000-T0.7.json", "a-000-T1.json", "a-001-T0.7.json",
                                                           "a-001-T1.json"]
    again = measure_ceiling(model, ctxs, (1.0, 0.7), opt, out_dir=tmp_path, key="k1", progress=False)
    assert [r["wall_s"] for r in again] == [r["wall_s"] for r in recs]  # read back, not remeasured
    other = measure_ceiling(model, ctxs[:1], (1.0,), opt, out_dir=tmp_path, key="k2", progress=False)
    assert other[0]["key"] == "k2"


# ------------------------------------------------------------------------------------ the command


def test_mfd_ceiling_on_a_local_target(tmp_path, capsys):
    target = pipeline_helpers.save_tiny_target(tmp_path / "target")
    files = pipeline_helpers.write_prompts(tmp_path / "prompts")
    out = tmp_path / "out"
    argv = ["ceiling", "--target", str(target), "--prompts", *map(str, files), "--out", str(out), "--samples", "40",
            "--budgets", "1,4", "--dead-at", "4", "--block-length", "3", "--modes", "1,2", "--device", "cpu",
            "--max-prompts", "2", "--quiet"]
    assert mfd(argv) == 0
    said = capsys.readouterr().out
    from mfd_theory.results import Result

    res = Result.load(out / "ceiling.json")
    recs = res.data["records"]
    assert {(r["dataset"], r["temperature"]) for r in recs} == {(d, t) for d in ("alpha", "beta") for t in (1.0, 0.7)}
    assert len(recs) == 8 and len(list((out / "prompts").glob("*.json"))) == 8
    pooled = res.data["pooled"]
    assert set(pooled) == {"alpha", "beta"} and set(pooled["alpha"]) == {"1", "0.7"}
    assert "| alpha | 1 | 4 |" in said and "K = 2 gain (share)" in said and f"wrote {out / 'ceiling.json'}" in said
    assert mfd(argv) == 0  # a rerun reads every prompt back
    assert Result.load(out / "ceiling.json").data["records"][0]["wall_s"] == recs[0]["wall_s"]


@pytest.mark.parametrize("argv,flag", [(["--temperatures", "0"], "--temperatures"), (["--modes", "2,4"], "--modes"),
                                       (["--scorers", "best"], "--scorers"), (["--budgets", "4,4"], "--budgets"),
                                       (["--samples", "1"], "--samples")])
def test_mfd_ceiling_bad_options_exit_2_writing_nothing(tmp_path, capsys, argv, flag):
    target = pipeline_helpers.save_tiny_target(tmp_path / "target")
    files = pipeline_helpers.write_prompts(tmp_path / "prompts")
    out = tmp_path / "out"
    assert mfd(["ceiling", "--target", str(target), "--prompts", *map(str, files), "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert flag in err.strip().splitlines()[-1], err
    assert not out.exists()


def test_mfd_ceiling_out_that_cannot_be_created_exits_2_before_loading(tmp_path, capsys, monkeypatch):
    import mfd_theory.runs.pipeline.ceiling as run_half

    target = pipeline_helpers.save_tiny_target(tmp_path / "target")
    files = pipeline_helpers.write_prompts(tmp_path / "prompts")
    monkeypatch.setattr(run_half, "run", lambda *a, **k: pytest.fail("the work started before --out was checked"))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert mfd(["ceiling", "--target", str(target), "--prompts", *map(str, files), "--out", str(blocker / "o")]) == 2
    assert "--out" in capsys.readouterr().err and blocker.read_text() == "x"


def test_mean_and_se_is_the_one_summary_of_the_ceiling_and_its_pooling():
    """One implementation for the per-prompt summaries (llm.measure.ceiling) and the pooled ones
    (ceiling_stats): one value has an unknown error (None), never 0."""
    import statistics

    from mfd_theory.ceiling_stats import mean_and_se

    v = [1.0, 2.0, 4.0, 7.0]
    m, se = mean_and_se(v)
    assert m == pytest.approx(statistics.mean(v)) and se == pytest.approx(statistics.stdev(v) / 2.0)
    assert mean_and_se([3.0]) == [3.0, None] and mean_and_se([None, 2.0]) == [2.0, None]
    assert mean_and_se([]) == [None, None]


def test_a_hybrid_target_refuses_extend_and_its_scorer_runs_without_holding():
    target = TargetModel(_tiny(4, hybrid=True))
    target.prefill(torch.tensor([1, 2]))
    target.verify(3, None)
    with pytest.raises(ValueError, match="extend: attention-only"):
        target.extend([1], [1], np.ones((1, 2), bool))
    target.discard()
    assert not TargetScorer(target, [1, 2, 3], 2, hold=True).hold
