"""TargetModel's in-place KV cache against HF's concatenating DynamicCache (the slow twin)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_helpers import tiny_qwen3  # noqa: E402

from mfd_theory.llm.models.target import TargetModel  # noqa: E402
from mfd_theory.trees import DraftTree  # noqa: E402

# Same weights and inputs; only the memory layout of the cached keys (a view of a longer buffer
# instead of a fresh contiguous tensor) differs, which can change a kernel's float32 rounding.
ATOL = 1e-5


def _tree():
    return DraftTree.from_paths([(5,), (9,), (5, 2), (5, 7), (9, 2), (5, 2, 11), (5, 7, 3), (9, 2, 2)])


def _random_chain(tree, rng):
    """An accepted path: from the root, step to a random child until a random stop."""
    parent = np.asarray(tree.parent)
    path, at = [], -1
    while True:
        kids = np.flatnonzero(parent == at)
        if not len(kids) or rng.random() < 0.3:
            return path
        at = int(rng.choice(kids))
        path.append(at)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_rounds_equal_the_concatenating_cache_across_growth(attn):
    model = tiny_qwen3(seed=2, attn=attn, max_position_embeddings=1024)
    fast, slow = TargetModel(model), TargetModel(model, cache_in_place=False)
    prompt = torch.arange(250) % 60  # 250 rows: the buffers start at 256 and grow within a few rounds
    for a, b in zip(fast.prefill(prompt)[1], slow.prefill(prompt)[1]):
        assert torch.allclose(a, b, atol=ATOL, rtol=0)
    rng = np.random.default_rng(0)
    tree, root = _tree(), 42
    caps = {fast.cache.layers[0].kv.capacity}  # 256 after the prompt
    for _ in range(12):
        out_f, out_s = fast.verify(root, tree), slow.verify(root, tree)
        assert torch.allclose(out_f.logits, out_s.logits, atol=ATOL, rtol=0)
        path = _random_chain(tree, rng)
        fast.commit(path), slow.commit(path)
        caps.add(fast.cache.layers[0].kv.capacity)
        root = int(torch.argmax(out_f.logits[0]))
    assert fast.length == slow.length and len(caps) > 1  # it did grow
    for lf, ls in zip(fast.cache.layers, slow.cache.layers):
        assert type(lf).__name__ == "InPlaceLayer" and type(ls).__name__ == "DynamicLayer"
        assert lf.keys.shape == ls.keys.shape
        assert torch.allclose(lf.keys, ls.keys, atol=ATOL, rtol=0)
        assert torch.allclose(lf.values, ls.values, atol=ATOL, rtol=0)


def test_rounds_write_in_place_between_growths():
    """While the capacity suffices, a verify + commit round moves no cached row (same buffers)."""
    model = tiny_qwen3(seed=3, max_position_embeddings=1024)
    t = TargetModel(model)
    t.prefill(torch.arange(20) % 60)
    tree = _tree()
    t.verify(1, tree)
    t.commit([0])
    ptrs = [(layer.kv.keys.data_ptr(), layer.kv.values.data_ptr()) for layer in t.cache.layers]
    for r in range(6):
        t.verify(2 + r, tree)
        t.commit([1, 4])
    assert [(layer.kv.keys.data_ptr(), layer.kv.values.data_ptr()) for layer in t.cache.layers] == ptrs
    assert all(layer.keys.data_ptr() == layer.kv.keys.data_ptr() for layer in t.cache.layers)
    # a new sequence starts from fresh buffers, and from no stale rows
    t.prefill(torch.arange(5) % 60)
    assert t.cache.layers[0].keys.shape[-2] == 5
