"""Batched tree verification: every request decodes what it decodes alone, in one forward per round."""

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from scipy.stats import chisquare  # noqa: E402

from llm_helpers import NanGateDrafter, OracleDrafter, hf_greedy, tiny_hybrid, tiny_qwen3  # noqa: E402

from mfd_theory.llm import TargetModel, build_drafter  # noqa: E402
from mfd_theory.llm.decoding.batch import BatchTarget, speculative_generate_batch  # noqa: E402
from mfd_theory.llm.decoding.generate import sampling_probs, speculative_generate  # noqa: E402
from mfd_theory.trees import product_tree  # noqa: E402

# mixed lengths; token 0 (the helpers' pad id) avoided so HF generate's inferred mask is all ones
PROMPTS = [[3, 7, 1, 9, 4], [50, 2], [11, 12, 13, 14, 15, 16, 17, 18, 19], [5, 33, 8]]
P_MIN = 1e-3


@pytest.fixture(scope="module")
def model():
    return tiny_qwen3(seed=0)


@pytest.fixture(scope="module")
def target(model):
    return TargetModel(model)



def _drafters(model):
    return {
        "oracle2": OracleDrafter(model, block_size=6, num_modes=2, seed=1),
        "block": build_drafter(model, block_size=5, num_layers=1, seed=3),
        "mfd3": build_drafter(model, block_size=5, num_layers=1, num_modes=3, seed=4),
    }


@pytest.mark.parametrize("method", ["ar", "chain", "ddtree", "mfd"])
def test_greedy_batch_equals_hf_generate(model, target, method):
    refs = {n: [hf_greedy(model, p, n) for p in PROMPTS] for n in (1, 7, 20)}
    for (name, drafter), n, policy, max_batch in itertools.product(
            _drafters(model).items(), (1, 7, 20), ("per_request", "global", "proportional", "off"), (None, 2)):
        if method == "ar" and name != "block":
            continue
        res = speculative_generate_batch(target, drafter, PROMPTS, n, method, budget=10, policy=policy,
                                         max_batch=max_batch)
        assert [r.tokens for r in res.results] == refs[n], (name, n, policy, max_batch)
        if n > 1 and method != "ar" and policy != "off":
            assert any(sum(r.nodes) for r in res.rounds)  # trees were verified
        if policy == "off" or method == "ar":
            assert all(sum(r.nodes) == 0 for r in res.rounds)


def test_greedy_best_mode_batch_equals_hf_generate(model, target):
    """Batched "mfd" with the best-mode scorer, both budget policies, a drafter with unreadable
    mode weights among them: every request decodes HF's greedy tokens."""
    refs = {n: [hf_greedy(model, p, n) for p in PROMPTS] for n in (7, 20)}
    drafters = _drafters(model)
    drafters["mfd3, NaN weights"] = NanGateDrafter(drafters["mfd3"])
    for (name, drafter), n, policy, max_batch in itertools.product(
            drafters.items(), (7, 20), ("per_request", "global"), (None, 2)):
        res = speculative_generate_batch(target, drafter, PROMPTS, n, "mfd", budget=10, policy=policy,
                                         max_batch=max_batch, scorer="best_mode")
        assert [r.tokens for r in res.results] == refs[n], (name, n, policy, max_batch)
        assert res.scorer == "best_mode" and all(r.scorer == "best_mode" for r in res.results)
        assert any(sum(r.nodes) for r in res.rounds)
    with pytest.raises(ValueError, match="scorer"):
        speculative_generate_batch(target, drafters["block"], PROMPTS, 4, "ddtree", scorer="best_mode")


def test_batch_rounds_accept_draft_tokens(model, target):
    """The oracle drafter's trees are mostly right: many tokens per round, in both policies."""
    drafter = OracleDrafter(model, block_size=6, num_modes=2, seed=1)
    for policy in ("per_request", "global", "proportional"):
        res = speculative_generate_batch(target, drafter, PROMPTS, 30, "mfd", budget=12, policy=policy)
        assert res.tau > 2.5, (policy, res.tau)
        assert max(r.batch_size for r in res.rounds) == len(PROMPTS)
        for r in res.rounds:  # per request: accepted <= predicted-capable tree depth, nodes within budget
            assert all(a <= 5 for a in r.accepted)
            if policy == "per_request":
                assert all(n <= 12 for n in r.nodes)
            else:
                assert sum(r.nodes) <= 12 * r.batch_size


def test_early_finish_by_eos_and_continuous_batching(model, target):
    drafter = build_drafter(model, block_size=5, num_layers=1, seed=3)
    ref_free = [hf_greedy(model, p, 16) for p in PROMPTS]
    j = next(j for j in range(2, 16) if ref_free[1][j] not in ref_free[1][:j])
    eos = ref_free[1][j]  # request 1 ends at its token j (a first occurrence); the others may end too
    refs = [hf_greedy(model, p, 16, eos=eos) for p in PROMPTS]
    assert len(refs[1]) == j + 1
    for max_batch in (None, 1, 3):
        res = speculative_generate_batch(target, drafter, PROMPTS, 16, "ddtree", budget=8, eos_token_id=eos,
                                         max_batch=max_batch)
        assert [r.tokens for r in res.results] == refs, max_batch
        assert res.results[1].stopped_by == "eos"
        assert max(r.batch_size for r in res.rounds) == (max_batch or len(PROMPTS))
        assert all(np.isfinite(res.latency))


def test_a_requests_output_does_not_depend_on_its_batch(model, target):
    """Cache isolation: the same request among other requests, alone, or first/last decodes the same
    (greedy for every policy; sampled for per_request, whose tree does not depend on the others)."""
    drafter = build_drafter(model, block_size=5, num_layers=1, num_modes=2, seed=6)
    p = [9, 9, 21, 4]
    for policy, temp in (("per_request", 0.0), ("global", 0.0), ("proportional", 0.0), ("per_request", 1.0)):
        alone = speculative_generate_batch(target, drafter, [p], 18, "mfd", budget=8, policy=policy,
                                           temperature=temp, seed=5).results[0].tokens
        for others in ([[1, 2, 3]], [[40] * 12, [7, 8]]):
            mixed = speculative_generate_batch(target, drafter, [p] + others, 18, "mfd", budget=8, policy=policy,
                                               temperature=temp, seed=5).results[0].tokens
            assert mixed == alone, (policy, temp, others)


def test_sampled_batch_first_tokens_follow_the_target(model, target):
    """Chi-square of the first two tokens of two requests decoded together, against the target."""
    drafter = OracleDrafter(model, block_size=5, num_modes=2, seed=3)
    prompts = [[3, 7, 1], [50, 2, 44, 5]]
    temp = 1.3
    probs = []
    for p in prompts:
        with torch.no_grad():
            probs.append(sampling_probs(model(torch.tensor([p])).logits[0, -1], temp).numpy())
    counts = [np.zeros(model.config.vocab_size) for _ in prompts]
    runs = 600
    for s in range(runs):
        res = speculative_generate_batch(target, drafter, prompts, 2, "ddtree", budget=6, policy="global",
                                         temperature=temp, seed=1000 + 2 * s)
        for b, r in enumerate(res.results):
            counts[b][r.tokens[0]] += 1
    for c, p in zip(counts, probs):
        keep = p * runs >= 5
        obs = np.append(c[keep], c[~keep].sum())
        exp = np.append(p[keep], p[~keep].sum()) * runs
        assert chisquare(obs, exp).pvalue > P_MIN


def test_batch_verify_equals_one_request_verify(model, target):
    """The batched forward's logits at every tree row equal the one-request verify's."""
    g = torch.Generator().manual_seed(0)
    trees = []
    for depth in (3, 2, 4):
        lq = torch.log_softmax(torch.randn(depth, 64, generator=g), dim=-1).double().numpy()
        trees.append(product_tree(lq, 7))
    trees.append(None)
    bt = BatchTarget(target)
    roots = []
    for p in PROMPTS:
        logits, _ = bt.add(torch.tensor(p), hidden=False)
        roots.append(int(logits.argmax()))
    ver = bt.verify(roots, trees, hidden=False)
    assert ver.logits.shape[0] == sum(1 + (0 if t is None else len(t)) for t in trees)  # packed: real rows only
    for b, (p, tree) in enumerate(zip(PROMPTS, trees)):
        single = TargetModel(model)
        single.prefill(torch.tensor(p), hidden=False)
        ref = single.verify(roots[b], tree, hidden=False).logits
        torch.testing.assert_close(ver.rows(b), ref, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="not a chain"):
        bt.commit([[1], [], [], []] if trees[0].parent[1] != -1 else [[2, 0], [], [], []])
    bt.commit([[], [], [], []])


@pytest.mark.parametrize("gdn_commit", ["path", "replay", "select"])
def test_hybrid_greedy_batch_equals_hf_generate(gdn_commit):
    model = tiny_hybrid("qwen3_5", seed=0)
    target = TargetModel(model, gdn_commit=gdn_commit)
    drafters = {"block": build_drafter(model, block_size=5, num_layers=1, seed=3),
                "oracle2": OracleDrafter(model, block_size=5, num_modes=2, seed=1)}
    refs = [hf_greedy(model, p, 14) for p in PROMPTS]
    for (name, drafter), method, policy in itertools.product(drafters.items(), ("ddtree", "mfd"),
                                                             ("per_request", "global", "proportional")):
        res = speculative_generate_batch(target, drafter, PROMPTS, 14, method, budget=8, policy=policy,
                                         max_batch=3)
        assert [r.tokens for r in res.results] == refs, (name, method, policy)
    assert speculative_generate_batch(target, drafters["oracle2"], PROMPTS, 14, "mfd", budget=8).tau > 2
    assert [r.tokens for r in speculative_generate_batch(target, None, PROMPTS, 14, "ar").results] == refs
    for policy in ("per_request", "global"):  # the released drafters' best-mode trees
        res = speculative_generate_batch(target, drafters["oracle2"], PROMPTS, 14, "mfd", budget=8, policy=policy,
                                         max_batch=3, scorer="best_mode")
        assert [r.tokens for r in res.results] == refs, policy


def test_batch_matches_one_request_decoding_records(model, target):
    """B = 1 per_request decodes exactly what speculative_generate does, round for round."""
    drafter = build_drafter(model, block_size=5, num_layers=1, num_modes=2, seed=6)
    for p in PROMPTS:
        one = speculative_generate(target, drafter, p, 15, "mfd", budget=9)
        bat = speculative_generate_batch(target, drafter, [p], 15, "mfd", budget=9).results[0]
        assert bat.tokens == one.tokens
        assert [s.tree_size for s in bat.steps] == [s.tree_size for s in one.steps]
        assert [s.accepted for s in bat.steps] == [s.accepted for s in one.steps]
        np.testing.assert_allclose([s.predicted for s in bat.steps], [s.predicted for s in one.steps], atol=1e-5)


def test_bad_batch_input_is_refused(model, target):
    drafter = build_drafter(model, block_size=5, num_layers=1, seed=3)
    with pytest.raises(ValueError, match="policy"):
        speculative_generate_batch(target, drafter, PROMPTS, 4, "ddtree", policy="greedy")
    with pytest.raises(ValueError, match="plan"):
        speculative_generate_batch(target, drafter, PROMPTS, 4, "ddtree", policy="auto")
    with pytest.raises(ValueError, match=r"prompts\[1\]"):
        speculative_generate_batch(target, drafter, [[1, 2], []], 4, "ddtree")
    with pytest.raises(ValueError, match="prompts"):
        speculative_generate_batch(target, drafter, [], 4, "ddtree")
    with pytest.raises(ValueError, match="dartree"):
        speculative_generate_batch(target, drafter, PROMPTS, 4, "dartree")
    with pytest.raises(ValueError, match="max_batch"):
        speculative_generate_batch(target, drafter, PROMPTS, 4, "ddtree", max_batch=0)
    with pytest.raises(ValueError, match="total_budget"):
        speculative_generate_batch(target, drafter, PROMPTS, 4, "ddtree", policy="global", total_budget=0)
    with pytest.raises(ValueError, match="total_budget.*ignore"):
        speculative_generate_batch(target, drafter, PROMPTS, 4, "ddtree", total_budget=40)
    with pytest.raises(ValueError, match="node_cap.*ignore"):
        speculative_generate_batch(target, drafter, PROMPTS, 4, "ddtree", policy="off", node_cap=4)
    domino = build_drafter(model, block_size=5, num_layers=1, seed=5, kind="dartree")
    with pytest.raises(ValueError, match="dartree"):
        speculative_generate_batch(target, domino, PROMPTS, 4, "ddtree")


def test_batched_eval_rows_are_lossless_and_relative_to_batched_ar(model, target):
    from mfd_theory.llm.measure.evaluate import make_cells
    from mfd_theory.llm.measure.evaluate_batch import decode_batch_cells

    drafters = {"k1": build_drafter(model, block_size=5, num_layers=1, seed=3),
                "k2": build_drafter(model, block_size=5, num_layers=1, num_modes=2, seed=4)}
    cells = make_cells(drafters, ("ar", "chain", "ddtree", "mfd"), [6])
    for policy in ("per_request", "global"):
        rows = decode_batch_cells(target, cells, PROMPTS[:3], batch_size=2, policy=policy, temperatures=[0.0, 1.0],
                                  max_new_tokens=8, passes=2, eos_token_id=[], progress=False)
        assert len(rows) == 2 * len(cells)
        for r in rows:
            assert r["batch_size"] == 2 and len(r["tokens_per_s_passes"]) == 2
            if r["temperature"] == 0:
                assert r["matches_ar"] is True, r
            if r["method"] == "ar":
                assert r["speedup"] == pytest.approx(1.0) and r["tau"] == pytest.approx(1.0)
            else:
                assert r["budget_policy"] == ("per_request" if r["method"] == "chain" else policy)
    domino = build_drafter(model, block_size=5, num_layers=1, seed=5, kind="dartree")
    with pytest.raises(ValueError, match="dartree"):
        decode_batch_cells(target, make_cells({"d": domino}, ("ar", "dartree"), [6]), PROMPTS, batch_size=2,
                           policy="per_request", temperatures=[0.0], max_new_tokens=4)
    with pytest.raises(ValueError, match="auto"):
        decode_batch_cells(target, cells, PROMPTS, batch_size=2, policy="auto", temperatures=[0.0], max_new_tokens=4)


def test_auto_switching_off_and_on_keeps_the_drafter_context_whole(model, target, monkeypatch):
    """Under "auto", AR rounds keep their rows for the drafter; when drafting resumes its context
    holds exactly the target's committed rows, and the output stays the target's greedy one."""
    import mfd_theory.llm.decoding.batch as batch_mod
    from mfd_theory.llm.models.drafter import BatchDraftContext

    class Switching:  # off for two rounds, then trees, then off again, ...
        calls = 0

        def choose(self, b):
            self.calls += 1
            return ("off", 0) if (self.calls // 2) % 2 == 0 else ("per_request", 6)

    seen = {}
    init, draft = batch_mod.BatchTarget.__init__, BatchDraftContext.draft

    def init_spy(self, *a, **k):
        init(self, *a, **k)
        seen["bt"] = self

    checks = []

    def draft_spy(self, new_feats, roots):
        out = draft(self, new_feats, roots)
        checks.append(list(self.lengths) == list(seen["bt"].lengths))
        return out

    monkeypatch.setattr(batch_mod.BatchTarget, "__init__", init_spy)
    monkeypatch.setattr(BatchDraftContext, "draft", draft_spy)
    drafter = build_drafter(model, block_size=5, num_layers=1, num_modes=2, seed=6)
    res = speculative_generate_batch(target, drafter, PROMPTS, 20, "mfd", policy="auto", plan=Switching())
    assert [r.tokens for r in res.results] == [hf_greedy(model, p, 20) for p in PROMPTS]
    assert {r.policy for r in res.rounds} == {"off", "per_request"}
    assert len(checks) >= 2 and all(checks)


def test_chain_under_the_global_policy_ranks_chains_by_their_scores(model, target):
    """Chain nodes carry the drafter's prefix log-probability, so a global round shares its total
    by what each chain is worth; with all-zero scores the ties went to the lower request index and
    requests 2 and 3 got no node while 0 and 1 took twice the share, round after round."""
    from mfd_theory.allocation import allocate_global

    drafter = build_drafter(model, block_size=8, num_layers=1, seed=3)
    prompts = [[3, 7, 1, 9], [5, 6, 7], [1, 2], [9, 9, 4]]
    res = speculative_generate_batch(target, drafter, prompts, 24, "chain", budget=3, policy="global",
                                     eos_token_id=[], keep_trees=True)
    assert [r.tokens for r in res.results] == [hf_greedy(model, p, 24) for p in prompts]
    full = [r for r in res.rounds if r.batch_size == 4]
    assert full and any(r.nodes[3] > 0 for r in full) and any(r.nodes[2] > 0 for r in full)
    trees = [[s.tree for s in r.steps] for r in res.results]
    for t in (t for ts in trees for t in ts if t is not None and len(t) > 1):
        assert (np.diff(t.log_score) <= 0).all() and (t.log_score < 0).all()  # a prefix's log-probability
    # the first round's counts are the global top-12 of the four chains' scores (each capped at 6)
    first = [ts[0] for ts in trees]
    assert list(allocate_global([t.log_score for t in first], 12, cap=6)) == [len(t) for t in first]


@pytest.mark.parametrize("api", ["one", "batch"])
def test_prompt_dtypes_and_eos_forms_are_accepted_or_refused_by_name(model, target, api):
    drafter = build_drafter(model, block_size=5, num_layers=1, seed=3)
    p = [3, 7, 1, 9]
    ref = hf_greedy(model, p, 6)

    def run(prompt, **kw):
        if api == "one":
            return speculative_generate(target, drafter, prompt, 6, "ddtree", budget=4, **kw).tokens
        return speculative_generate_batch(target, drafter, [prompt], 6, "ddtree", budget=4, **kw).results[0].tokens

    for dt in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64):
        assert run(np.array(p, dtype=dt)) == ref, dt  # every integer dtype reads as int64 ids
    for dt in (torch.int8, torch.uint8, torch.int16, torch.uint16, torch.int32, torch.uint32):
        assert run(torch.tensor(p, dtype=dt)) == ref, dt
    for bad in (np.array(p, dtype=np.complex64), torch.tensor(p, dtype=torch.complex64),
                np.array(p, dtype=np.float32), torch.tensor(p, dtype=torch.bfloat16), np.array(p, dtype=bool)):
        with pytest.raises(ValueError, match="input_ids: token ids must be integers"):
            run(bad)
    with pytest.raises(ValueError, match=r"input_ids: token ids must lie in \[0, 64\)"):
        run(np.array([3, 2 ** 64 - 1], dtype=np.uint64))
    eos = ref[2]
    want = ref[: ref.index(eos) + 1]
    for form in (eos, np.int64(eos), torch.tensor(eos), torch.tensor([eos, 63]), np.array([eos, 63]), [eos], (eos,)):
        assert run(p, eos_token_id=form) == want, form
    for bad in (torch.tensor([[eos, 1]]), 2.5, -1, 64, True, "a", [eos, "x"], [1.5], [[eos]]):
        with pytest.raises(ValueError, match="eos_token_id: expected token ids in"):
            run(p, eos_token_id=bad)


def test_a_tokenizers_batch_output_is_read_row_by_row(model, target):
    """A padded batch ({"input_ids": [B, T], "attention_mask": [B, T]}, left or right padding)
    decodes each row's unpadded prompt; a mask with a gap or of another shape is refused."""
    drafter = build_drafter(model, block_size=5, num_layers=1, seed=3)
    a, b = [3, 7, 1, 9, 4], [50, 2]
    refs = [hf_greedy(model, a, 6), hf_greedy(model, b, 6)]
    for ids, mask in (([a, [0, 0, 0] + b], [[1] * 5, [0, 0, 0, 1, 1]]),  # left padding
                      ([a, b + [0, 0, 0]], [[1] * 5, [1, 1, 0, 0, 0]])):  # right padding
        for conv in (torch.tensor, np.array, lambda x: x):
            enc = {"input_ids": conv(ids), "attention_mask": conv(mask)}
            res = speculative_generate_batch(target, drafter, enc, 6, "ddtree", budget=4)
            assert [r.tokens for r in res.results] == refs
    assert [r.tokens for r in speculative_generate_batch(target, drafter, {"input_ids": [a, b]}, 6, "ddtree",
                                                         budget=4).results] == refs
    assert [r.tokens for r in speculative_generate_batch(target, drafter, torch.tensor([a, a]), 6, "ddtree",
                                                         budget=4).results] == [refs[0]] * 2
    with pytest.raises(ValueError, match=r"prompts\[1\]: attention_mask has a gap"):
        speculative_generate_batch(target, drafter, {"input_ids": [a, a], "attention_mask": [[1] * 5, [1, 0, 1, 1, 1]]},
                                   6, "ddtree")
    with pytest.raises(ValueError, match=r"prompts\[0\]: attention_mask must be 0/1"):
        speculative_generate_batch(target, drafter, {"input_ids": [a], "attention_mask": [[1, 1]]}, 6, "ddtree")
    with pytest.raises(ValueError, match="prompts: a mapping without an 'input_ids'"):
        speculative_generate_batch(target, drafter, {"ids": [a]}, 6, "ddtree")
    with pytest.raises(ValueError, match=r"prompts: a tokenizer's batch output holds input_ids \[B, T\]"):
        speculative_generate_batch(target, drafter, {"input_ids": torch.tensor(a)}, 6, "ddtree")


def test_auto_checks_its_plan_and_refuses_a_total_it_would_ignore(model, target):
    drafter = build_drafter(model, block_size=5, num_layers=1, seed=3)

    class Fixed:
        def __init__(self, out):
            self.out = out

        def choose(self, b):
            return self.out

    for out, what in ((("greedy", 4), "policy 'greedy'"), (("per_request", 0), "nodes 0"), (("global", 0), "nodes 0"),
                      (("per_request", 2.5), "nodes 2.5"), (None, r"\(policy, nodes\)"),
                      (("per_request",), r"\(policy, nodes\)"), (("auto", 4), "policy 'auto'")):
        with pytest.raises(ValueError, match=rf"plan: choose\(2\) .*{what}"):
            speculative_generate_batch(target, drafter, PROMPTS[:2], 6, "ddtree", policy="auto", plan=Fixed(out))
    with pytest.raises(ValueError, match="total_budget: under policy 'auto'"):
        speculative_generate_batch(target, drafter, PROMPTS[:2], 6, "ddtree", policy="auto",
                                   plan=Fixed(("per_request", 4)), total_budget=7)
    res = speculative_generate_batch(target, drafter, PROMPTS[:2], 6, "ddtree", policy="auto",
                                     plan=Fixed(("global", 9.0)))  # an integral float is a count
    assert [r.tokens for r in res.results] == [hf_greedy(model, p, 6) for p in PROMPTS[:2]]


@pytest.mark.parametrize("method", ["ddtree", "chain"])
def test_a_replay_of_greedy_traces_decodes_what_the_batched_decoder_decodes(model, target, method):
    """At T = 0 a round's tree and acceptance depend on its root's position only, so the traces of
    one drafting pass per position replay any policy's decode: round for round, the same nodes
    and accepted tokens as speculative_generate_batch, static batches of B as the bench runs them."""
    from mfd_theory.batch_sim import replay
    from mfd_theory.llm.measure.batch_trace import decode_traces

    drafter = OracleDrafter(model, block_size=6, num_modes=1, seed=1, corrupt=0.0)  # deterministic drafts
    prompts = PROMPTS + [[21, 22, 23], [8, 8, 8, 8]]
    tr, texts = decode_traces(target, drafter, method, prompts, 14, cap=12)
    assert texts == [hf_greedy(model, p, 14) for p in prompts]
    for policy, bsz in (("per_request", 3), ("global", 3), ("global", 6), ("per_request", 1)):
        rep = replay(tr, policy, 6, bsz)
        rounds, acc = [], []
        for s in range(0, len(prompts), bsz):
            res = speculative_generate_batch(target, drafter, prompts[s: s + bsz], 14, method, budget=6,
                                             policy=policy, eos_token_id=[])
            rounds += res.request_rounds
            acc += [a for r in res.rounds for a in r.accepted]
        assert rep.request_rounds.tolist() == rounds, (policy, bsz)
        assert rep.accepted.tolist() == acc, (policy, bsz)
