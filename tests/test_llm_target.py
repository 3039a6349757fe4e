"""TargetModel: tree verification matches full recomputation, KV compaction, bad input."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_helpers import tiny_qwen3  # noqa: E402

from mfd_theory.llm.models.target import TargetModel, ancestor_mask, tree_attention_mask  # noqa: E402
from mfd_theory.trees import DraftTree  # noqa: E402

ATOL = 1e-4  # float32 forwards over differently shaped batches differ in rounding only


@pytest.fixture(scope="module")
def model():
    return tiny_qwen3(seed=1)


def _tree():
    paths = [(5,), (9,), (5, 2), (5, 7), (9, 2), (5, 2, 11), (5, 7, 3), (9, 2, 2)]
    return DraftTree.from_paths(paths)


def _full_logits(model, seq):
    with torch.no_grad():
        return model(torch.tensor([seq])).logits[0, -1].float()


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_verify_equals_recomputing_each_path(attn):
    model = tiny_qwen3(seed=1, attn=attn)
    t = TargetModel(model)
    prompt = [4, 8, 15, 16, 23]
    t.prefill(torch.tensor(prompt))
    tree = _tree()
    out = t.verify(42, tree)
    assert out.logits.shape == (len(tree) + 1, model.config.vocab_size)
    assert torch.allclose(out.logits[0], _full_logits(model, prompt + [42]), atol=ATOL)
    for i, path in enumerate(tree.paths()):
        ref = _full_logits(model, prompt + [42] + list(path))
        assert torch.allclose(out.logits[i + 1], ref, atol=ATOL), i


def test_kv_compaction_equals_recomputing_the_accepted_path(model):
    t = TargetModel(model)
    prompt = [1, 2, 3, 4]
    t.prefill(torch.tensor(prompt))
    tree = _tree()
    t.verify(42, tree)
    path_nodes = [1, 4, 7]  # (9,), (9, 2), (9, 2, 2): not a prefix of storage order, so rows move
    assert [tuple(tree.paths()[i]) for i in path_nodes][-1] == (9, 2, 2)
    t.commit(path_nodes)
    assert t.length == len(prompt) + 4
    ref = TargetModel(model, check_mask=False)
    ref.prefill(torch.tensor(prompt + [42, 9, 2, 2]))
    for a, b in zip(t.cache.layers, ref.cache.layers):
        assert torch.allclose(a.keys, b.keys, atol=ATOL)
        assert torch.allclose(a.values, b.values, atol=ATOL)
    # the next round continues from the compacted cache exactly as from a fresh prefill
    nxt = t.verify(7, None).logits[0]
    assert torch.allclose(nxt, _full_logits(model, prompt + [42, 9, 2, 2, 7]), atol=ATOL)


def test_commit_of_a_prefix_path_crops(model):
    t = TargetModel(model)
    t.prefill(torch.tensor([1, 2, 3]))
    tree = DraftTree.from_paths([(5,), (5, 6), (5, 6, 7)])
    t.verify(9, tree)
    t.commit([0, 1])
    assert t.length == 6 and t.cache.get_seq_length() == 6


def test_float_mask_layout():
    anc = np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], bool)
    m = tree_attention_mask(anc, 2, torch.float32, "cpu")
    assert m.shape == (1, 1, 3, 5) and m.dtype == torch.float32
    assert (m[0, 0, :, :2] == 0).all()
    assert m[0, 0, 2, 3] == torch.finfo(torch.float32).min and m[0, 0, 2, 4] == 0


class _IgnoresMask(torch.nn.Module):
    """A causal LM wrapper that drops the attention mask: tree verification would be wrong."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.config = inner.config

    def forward(self, input_ids=None, attention_mask=None, **kw):
        return self.inner(input_ids=input_ids, **kw)


class _RejectsMask(_IgnoresMask):
    def forward(self, input_ids=None, attention_mask=None, **kw):
        if attention_mask is not None and attention_mask.dim() == 4:
            raise RuntimeError("4D masks are not supported")
        return self.inner(input_ids=input_ids, **kw)


@pytest.mark.parametrize("cls", [_IgnoresMask, _RejectsMask])
def test_model_without_4d_mask_support_is_rejected(model, cls):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="4D attention mask"):
            TargetModel(cls(model))
    # a wrapper that passes **kwargs on gets the cache under the name transformers 5.x reads,
    # not the deprecated past_key_values (which warns)
    assert not [w for w in caught if "past_key_values" in str(w.message)]


def test_flash_attention_is_rejected(model):
    m = tiny_qwen3(seed=1)
    m.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="4D tree mask"):
        TargetModel(m)


def test_empty_prompt(model):
    with pytest.raises(ValueError, match="empty"):
        TargetModel(model).prefill(torch.tensor([], dtype=torch.long))


def test_prompt_longer_than_context():
    m = tiny_qwen3(seed=1, max_position_embeddings=16)
    with pytest.raises(ValueError, match="context"):
        TargetModel(m).prefill(torch.arange(20) % 10)


def test_out_of_vocab_prompt(model):
    with pytest.raises(ValueError, match="token ids"):
        TargetModel(model).prefill(torch.tensor([1, 999]))


def test_commit_without_verify_and_double_verify(model):
    t = TargetModel(model)
    t.prefill(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="nothing to commit"):
        t.commit([])
    t.verify(3, None)
    with pytest.raises(ValueError, match="not committed"):
        t.verify(3, None)
    with pytest.raises(ValueError, match="path"):
        t.commit([0])


def test_float_tree_mask_opens_exactly_the_context_and_the_ancestors():
    """tree_attention_mask: 0 over the whole context and over ancestor-or-self columns, the dtype's
    minimum elsewhere (checked against ancestry recomputed from the token paths)."""
    from mfd_theory.trees import product_tree

    g = np.random.default_rng(0)
    past = 5
    for n in (1, 7, 64):
        lq = np.log(g.dirichlet(np.ones(9), size=6))
        tree = product_tree(lq, n)
        mask = tree_attention_mask(ancestor_mask(tree, "cpu"), past, torch.float32, "cpu")[0, 0].numpy()
        assert mask.shape == (n + 1, past + n + 1)
        assert (mask[:, :past] == 0).all()
        paths = [()] + [tuple(p) for p in tree.paths()]
        for i, pi in enumerate(paths):
            for j, pj in enumerate(paths):
                is_anc = pi[: len(pj)] == pj
                assert mask[i, past + j] == (0 if is_anc else torch.finfo(torch.float32).min)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_extend_adds_tree_rows_on_top_of_the_pending_ones_as_a_full_recompute_does(attn):
    """verify a tree's first level, then extend it twice (deeper nodes whose ancestors are pending
    rows or rows of the same extend): every new row's logits equal a full forward of its path, a
    sibling's row is hidden from it, and discard brings back the committed cache."""
    model = tiny_qwen3(seed=1, attn=attn)
    t = TargetModel(model)
    prompt = [4, 8, 15, 16, 23]
    t.prefill(torch.tensor(prompt))
    t.verify(42, DraftTree.from_paths([(5,), (9,)]))  # pending rows: root 0, (5,) 1, (9,) 2
    rows = {(): 0, (5,): 1, (9,): 2}
    for new in ([(5, 2), (9, 2), (5, 2, 11)], [(9, 2, 2), (5, 7)]):
        base = len(rows)
        idx = {p: base + i for i, p in enumerate(new)}
        vis = np.zeros((len(new), base + len(new)), bool)
        for i, p in enumerate(new):
            for d in range(len(p) + 1):
                vis[i, rows.get(p[:d], idx.get(p[:d], -1))] = True
        logits = t.extend([p[-1] for p in new], [len(p) for p in new], vis)
        rows.update(idx)
        assert logits.shape == (len(new), model.config.vocab_size) and t._pending == len(rows)
        for i, p in enumerate(new):
            assert torch.allclose(logits[i], _full_logits(model, prompt + [42] + list(p)), atol=ATOL), p
    with pytest.raises(ValueError, match="commit: the pending rows were extended"):
        t.commit([0])
    t.discard()
    assert t.length == len(prompt) and t.cache.get_seq_length() == len(prompt) and t._pending == 0
    assert torch.allclose(t.verify(7, None).logits[0], _full_logits(model, prompt + [7]), atol=ATOL)


def test_extend_bad_input(model):
    t = TargetModel(model)
    t.prefill(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="nothing pending"):
        t.extend([5], [1], np.ones((1, 1), bool))
    t.verify(9, None)
    for tokens, depth, vis, words in (([5], [1], np.ones((1, 1), bool), r"visible \[n, 1 \+ n\]"),
                                      ([5], [0], np.ones((1, 2), bool), "depth >= 1"),
                                      ([5], [1], np.array([[0, 1]], bool), "sees the root"),
                                      ([10 ** 6], [1], np.ones((1, 2), bool), "token ids")):
        with pytest.raises(ValueError, match=words):
            t.extend(tokens, depth, vis)
    assert t._pending == 1  # nothing was added by a refused extend
