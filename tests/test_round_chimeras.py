"""Dead nodes and chimeras over every round of a replayed decode (the paper's C3 on a real target),
against a slow twin: each round's tree from the drafter, every node's P_T(s) from one full forward
of the context and the node's path (no cache), the oracle tree by enumerating every prefix, the
splices by their definition."""

import itertools
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_helpers import greedy_answers  # noqa: E402

import reference  # noqa: E402
from mfd_theory.coverage import spliced_chimera_mask  # noqa: E402
from mfd_theory.llm import build_drafter  # noqa: E402
from mfd_theory.llm.measure.heldout import default_cells, heldout_greedy_tau, root_trees, round_walk, tree_accepts  # noqa: E402
from mfd_theory.llm.measure.round_chimeras import EPS, round_chimeras_many, splices_of, summarise_rounds  # noqa: E402
from mfd_theory.llm.models.testing import tiny_qwen2, tiny_qwen3  # noqa: E402
from mfd_theory.trees import DraftTree  # noqa: E402

V = 8
PROMPTS = [[3, 7, 1, 6, 4], [5, 2], [1, 2, 3, 4, 5, 6]]
NEW = [9, 6, 11]
FORWARD = 5e-5  # float32: a cached tree row against one full forward


def test_splices_are_nodes_made_of_the_references_tokens_but_not_its_nodes():
    ref = DraftTree.from_paths([(1,), (1, 2), (1, 2, 3), (4,), (4, 5), (4, 5, 6)])
    tree = DraftTree.from_paths([(1,), (1, 5), (1, 5, 3), (1, 2), (4,), (4, 2), (4, 2, 6), (7,), (1, 7)])
    got = dict(zip(tree.paths(), splices_of(tree, ref)))
    assert got == {(1,): False, (1, 5): True, (1, 5, 3): True, (1, 2): False, (4,): False, (4, 2): True,
                   (4, 2, 6): True, (7,): False, (1, 7): False}
    assert not splices_of(tree, None).any() and not splices_of(tree, DraftTree.from_paths([])).any()


def test_splices_of_whole_futures_are_the_theorys_spliced_chimeras():
    """With every prefix of F equal-length futures as the reference, a splice is exactly a node that
    :func:`spliced_chimera_mask` counts (every token some future's at its position, no future's prefix)."""
    rng = np.random.default_rng(0)
    for _ in range(30):
        futures = rng.integers(0, 3, size=(int(rng.integers(1, 4)), 4))
        ref = DraftTree.from_paths({tuple(f[:d]) for f in futures.tolist() for d in range(1, 5)})
        paths = {tuple(rng.integers(0, 3, size=d).tolist()) for d in rng.integers(1, 5, size=25)}
        tree = DraftTree.from_paths({p[:d] for p in paths for d in range(1, len(p) + 1)})
        np.testing.assert_array_equal(splices_of(tree, ref), spliced_chimera_mask(tree, futures))


_ROWS: dict = {}  # (model id, context + prefix) -> the next-token log-probabilities after it


@torch.no_grad()
def _log_p(model, context, path) -> float:
    """log P(path | context): the sum of each token's row, a row from one full forward of the
    context and the prefix before it (no cache; memoised by the whole token sequence)."""
    total = 0.0
    for i, t in enumerate(path):
        key = (id(model), tuple(context) + tuple(path[:i]))
        if key not in _ROWS:
            ids = torch.tensor([list(key[1])])
            _ROWS[key] = torch.log_softmax(model(input_ids=ids).logits[0, -1].double(), -1).numpy()
        total += float(_ROWS[key][t])
    return total


@torch.no_grad()
def _slow_records(model, drafter, seq, p, end, budget, cell, eps):
    """The twin: the cell's rounds from the replay's walk, each round's tree (target ids), every
    node's log P from full forwards, the oracle of the same N and depth by enumerating every prefix,
    the splices and dead counts by their definitions."""
    hs = model(input_ids=torch.from_numpy(seq)[None], output_hidden_states=True).hidden_states
    draft_ids = drafter.draft_index(torch.from_numpy(seq)).numpy()
    vocab = None if drafter.draft_vocab is None else drafter.draft_vocab.numpy()
    trees, acc = {}, {}
    for _, _, r, tree in root_trees(drafter, hs, seq, p, end, [budget], [cell]):
        acc[r] = tree_accepts(tree, draft_ids[r + 1: end])
        trees[r] = tree
    recs, t = [], p
    for a in round_walk(acc, p, end - 1):
        r, t = t, t + a + 1
        tree = trees[r]
        if tree is None or not len(tree):
            continue
        paths = [tuple(int(vocab[x]) if vocab is not None else int(x) for x in s) for s in tree.paths()]
        ctx = seq[: r + 1].tolist()
        lp = np.array([_log_p(model, ctx, s) for s in paths])
        depth = min(int(drafter.block_size) - 1, end - r - 2)
        every = [s for d in range(1, depth + 1) for s in itertools.product(range(V), repeat=d)]
        oracle, olp = reference.top_n_tree(lambda s: _log_p(model, ctx, s), every, budget)
        oset = set(oracle)
        allowed = {d: {s[-1] for s in oracle if len(s) == d} for d in range(1, depth + 1)}
        splice = np.array([s not in oset and all(x in allowed[i + 1] for i, x in enumerate(s)) for s in paths])
        dead = [lp <= math.log(e) for e in eps]
        recs.append({"root": r, "nodes": len(paths), "covered": float(np.exp(lp).sum()),
                     "dead": [int(d.sum()) for d in dead], "splices": int(splice.sum()),
                     "chimeras": [int((d & splice).sum()) for d in dead], "oracle_nodes": len(oracle),
                     "oracle_covered": float(np.exp(olp).sum()),
                     "oracle_dead": [int((np.array(olp) <= math.log(e)).sum()) for e in eps]})
    return recs


@pytest.mark.parametrize("family,modes,vocab", [(tiny_qwen3, 1, None), (tiny_qwen2, 2, [0, 1, 2, 3, 5, 6])])
def test_every_rounds_counts_equal_the_slow_twin(family, modes, vocab, monkeypatch):
    target = family(vocab_size=V, seed=1, init_std=0.6) if family is tiny_qwen3 else family(vocab_size=V, seed=1)
    drafter = build_drafter(target, 4, 1, num_modes=modes, seed=2, mask_token_id=V - 1, target_layer_ids=[0, 2],
                            draft_vocab=vocab).eval()
    seqs, plens = greedy_answers(target, PROMPTS, NEW)
    budget, eps = 6, (0.05, 0.01)  # thresholds a tiny model's few-token prefixes cross
    from mfd_theory.llm.measure import round_chimeras as rc

    seen = []  # the round records as measured, answer by answer
    real = rc.answer_round_chimeras
    monkeypatch.setattr(rc, "answer_round_chimeras", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    got = round_chimeras_many(target, {"d": drafter}, seqs, plens, budget, eps=eps, chunk=3)
    cells = default_cells(drafter)
    assert [(c["method"], c["scorer"]) for c in got["drafters"]["d"]] == cells
    tau = heldout_greedy_tau(target, drafter, seqs, plens, budget)
    for cell, summary, tcell in zip(cells, got["drafters"]["d"], tau["cells"]):
        want = [_slow_records(target, drafter, s, p, len(s), budget, cell, eps) for s, p in zip(seqs, plens)]
        for answer, (w, g) in enumerate(zip(want, [a["d"][cell] for a in seen])):
            assert [r["root"] for r in g] == [r["root"] for r in w], (cell, answer)
            for rg, rw in zip(g, w):
                for key in ("nodes", "dead", "splices", "chimeras", "oracle_nodes", "oracle_dead"):
                    assert rg[key] == rw[key], (cell, answer, rg["root"], key)
                assert rg["covered"] == pytest.approx(rw["covered"], abs=FORWARD)
                assert rg["oracle_covered"] == pytest.approx(rw["oracle_covered"], abs=FORWARD)
                # the floor: no tree of at most N nodes holds more live nodes than the oracle
                assert rg["oracle_nodes"] - rg["oracle_dead"][0] >= rg["nodes"] - rg["dead"][0]
        # every round of the decode but a last one with nothing left to draft
        assert tcell["rounds"] - len(seqs) <= summary["rounds"] <= tcell["rounds"]
        slow = summarise_rounds(want, eps)
        assert {k: v for k, v in summary.items() if k not in ("method", "scorer")} == slow | {
            k: summary[k] for k in ("covered", "oracle_covered")}
        assert summary["covered"] == pytest.approx(summarise_rounds(want, eps)["covered"], abs=FORWARD)
    visited = {(i, r["root"]) for i, a in enumerate(seen) for recs in a["d"].values() for r in recs}
    cost = got["cost"]
    assert cost["roots"] == len(visited) and cost["forwards"] >= cost["oracle_forwards"] >= cost["roots"]
    assert cost["rows"] >= cost["oracle_rows"] >= cost["oracle_forwards"]
    shares = [s for c in got["drafters"]["d"] for s in c["dead_share"] + c["chimera_share"]]
    assert any(0 < s < 1 for s in shares)  # the thresholds cut these trees: the check can tell counts apart


def test_stride_keeps_every_kth_round_and_no_oracle_leaves_its_entries_empty():
    target = tiny_qwen3(vocab_size=V, seed=1, init_std=0.6)
    drafter = build_drafter(target, 4, 1, seed=2, mask_token_id=V - 1, target_layer_ids=[0, 2]).eval()
    seqs, plens = greedy_answers(target, PROMPTS, NEW)
    every = round_chimeras_many(target, {"d": drafter}, seqs, plens, 5, oracle=False)["drafters"]["d"]
    half = round_chimeras_many(target, {"d": drafter}, seqs, plens, 5, stride=2, oracle=False)["drafters"]["d"]
    for e, h in zip(every, half):
        assert h["rounds"] < e["rounds"] and h["chimera_share"] is None and h["oracle_dead_share"] is None
        assert set(h["per_answer"]) == {"dead_share"} and len(e["dead_share"]) == len(EPS)


def test_a_store_resumes_answer_by_answer_and_keys_what_the_rounds_depend_on(tmp_path, monkeypatch):
    """With ``store``, each answer's rounds are written as it ends; a rerun reads them back (nothing
    measured again: the measurement is made to fail) and summarises to the same record; an answer
    missing or unreadable in the store is measured again; another budget or another drafter's weights
    is another key, so nothing stored under the first is read."""
    from mfd_theory.llm.measure import round_chimeras as rc

    target = tiny_qwen3(vocab_size=V, seed=1, init_std=0.6)
    drafter = build_drafter(target, 4, 1, seed=2, mask_token_id=V - 1, target_layer_ids=[0, 2]).eval()
    seqs, plens = greedy_answers(target, PROMPTS, NEW)
    store = tmp_path / "store"
    first = round_chimeras_many(target, {"d": drafter}, seqs, plens, 5, store=store, store_key=["t"])
    files = sorted(store.glob("answer-*.json"))
    assert len(files) == len(seqs) and first["resumed"] == 0

    def same(a, b):
        assert a["drafters"] == b["drafters"] and a["cost"] == b["cost"]
        assert a["seconds"] == pytest.approx(b["seconds"], abs=0.01 * len(seqs))

    real = rc.answer_round_chimeras
    monkeypatch.setattr(rc, "answer_round_chimeras", lambda *a, **k: pytest.fail("measured again"))
    again = round_chimeras_many(target, {"d": drafter}, seqs, plens, 5, store=store, store_key=["t"])
    same(again, first)
    assert again["resumed"] == len(seqs)
    monkeypatch.setattr(rc, "answer_round_chimeras", real)
    files[1].unlink()
    files[2].write_text("{not json")
    part = round_chimeras_many(target, {"d": drafter}, seqs, plens, 5, store=store, store_key=["t"])
    assert part["resumed"] == len(seqs) - 2 and part["drafters"] == first["drafters"]
    assert len(list(store.glob("answer-*.json"))) == len(seqs)
    other = build_drafter(target, 4, 1, seed=3, mask_token_id=V - 1, target_layer_ids=[0, 2]).eval()
    for kw in ({"budget": 4, "drafters": {"d": drafter}}, {"budget": 5, "drafters": {"d": other}},
               {"budget": 5, "drafters": {"d": drafter}, "store_key": ["another target"]}):
        got = round_chimeras_many(target, kw["drafters"], seqs, plens, kw["budget"], store=store,
                                  store_key=kw.get("store_key", ["t"]))
        assert got["resumed"] == 0
    assert rc.drafter_fingerprint(drafter) != rc.drafter_fingerprint(other)
    assert rc.drafter_fingerprint(drafter) == rc.drafter_fingerprint(
        build_drafter(target, 4, 1, seed=2, mask_token_id=V - 1, target_layer_ids=[0, 2]).eval())


def test_bad_arguments_are_named():
    target = tiny_qwen3(vocab_size=V, seed=1)
    drafter = build_drafter(target, 4, 1, seed=2, mask_token_id=V - 1, target_layer_ids=[0, 2]).eval()
    seqs, plens = [np.array([1, 2, 3, 4], dtype=np.int64)], [2]
    for kw, word in (({"eps": (0.0,)}, "eps"), ({"eps": (1.5,)}, "eps"), ({"stride": 0}, "stride"),
                     ({"temperature": 0.0}, "temperature")):
        with pytest.raises(ValueError, match=word):
            round_chimeras_many(target, {"d": drafter}, seqs, plens, 4, **kw)
    with pytest.raises(ValueError, match="plens"):
        round_chimeras_many(target, {"d": drafter}, seqs, [2, 2], 4)
