"""The drafter's shared-context attention and in-place cache against the slow twin (first version)."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from transformers import Qwen3Config, Qwen3ForCausalLM  # noqa: E402

import llm_helpers  # noqa: E402,F401  (single-threaded torch)
from mfd_theory.llm.models.reference_drafter import SlowDraftCache, slow_train_modes  # noqa: E402

from mfd_theory.llm.models.drafter import build_drafter  # noqa: E402

# Same weights and the same sums; only the key order inside one softmax and the SDPA kernel
# (masked vs unmasked, folded heads) differ: float32 rounding of log-probs of size ~log V.
ATOL = 2e-5


def _target(heads=4, kv_heads=2, hidden=32, vocab=64, seed=0):
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=3,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=hidden // heads,
                      max_position_embeddings=4096, tie_word_embeddings=False, use_sliding_window=False)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(cfg).eval()


def _feats(drafter, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return drafter.hidden_norm(torch.randn(1, n, drafter.config.hidden_size, generator=g))  # [1, n, H]


def _rounds(drafter, twin, feats, cuts, roots, folds=None):
    """Feed feats in pieces (cut points) to both; compare every round's output. ``folds``: the
    drafter's ``fold_modes`` per round (default: left as it is)."""
    drafter.reset(), twin.reset()
    for i, ((a, b), root) in enumerate(zip(zip(cuts[:-1], cuts[1:]), roots)):
        if folds is not None:
            drafter.fold_modes = folds[i]
        pi, q = drafter.draft_modes(feats[:, a:b], root)
        ref_pi, ref_q = twin.draft_modes(feats[:, a:b], root)
        assert q.shape == ref_q.shape and pi.shape == ref_pi.shape
        assert torch.allclose(q, ref_q, atol=ATOL, rtol=0), float((q - ref_q).abs().max())
        assert torch.allclose(pi, ref_pi, atol=ATOL, rtol=0)


@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (4, 4), (4, 1)])
@pytest.mark.parametrize("k,fold", [(1, None), (3, True), (3, False)])
def test_rounds_equal_the_slow_twin(heads, kv_heads, k, fold):
    """Both ways of attending K modes (one folded, masked call; one call per mode) on CPU."""
    tgt = _target(heads, kv_heads)
    d = build_drafter(tgt, block_size=5, num_layers=2, num_modes=k, seed=1)
    d.fold_modes = fold
    with torch.no_grad():
        if k > 1:  # distinct modes and a non-uniform readout, so a mode mix-up would show
            d.mode_embeddings.normal_(0, 1.0)
            d.weight_readout.normal_(0, 1.0)
        feats = _feats(d, 20)
        # a round with no new rows (t = 0) redrafts from the same context
        _rounds(d, SlowDraftCache(d), feats, [0, 6, 9, 9, 10, 16, 20], [3, 7, 7, 11, 2, 5])


def test_growth_past_the_capacity_keeps_outputs_and_amortises():
    tgt = _target()
    d = build_drafter(tgt, block_size=4, num_layers=1, num_modes=2, seed=2)
    with torch.no_grad():
        d.mode_embeddings.normal_(0, 1.0)
        feats = _feats(d, 700, seed=3)
        cuts = [0, 100, 240, 250, 400, 401, 600, 700]
        _rounds(d, SlowDraftCache(d), feats, cuts, [1, 2, 3, 4, 5, 6, 7])
    assert d.context_length == 700 and d.cache_capacity >= 700 + 2 * 4
    assert d.cache_capacity <= 2 * (700 + 2 * 4)  # doubling, not one slot per row


def test_switching_between_folded_and_per_mode_rounds_mid_sequence():
    """Per-mode rounds write no block mask; a folded round after them must still see every
    context column (and none of an earlier block's mask), also across a capacity growth."""
    tgt = _target()
    d = build_drafter(tgt, block_size=4, num_layers=2, num_modes=3, seed=7)
    with torch.no_grad():
        d.mode_embeddings.normal_(0, 1.0)
        d.weight_readout.normal_(0, 1.0)
        feats = _feats(d, 400, seed=8)
        cuts = [0, 5, 7, 8, 20, 21, 250, 252, 400]
        _rounds(d, SlowDraftCache(d), feats, cuts, [1, 2, 3, 4, 5, 6, 7, 8],
                folds=[True, False, False, True, False, True, False, True])


def test_cache_grows_in_place_between_reallocations():
    """Rounds that fit the capacity write into the same buffers (no per-round copy of the cache)."""
    tgt = _target()
    d = build_drafter(tgt, block_size=4, num_layers=2, num_modes=2, seed=4)
    feats = _feats(d, 60)
    d.reset()
    d.draft_modes(feats[:, :10], 1)
    ptrs = [x.data_ptr() for buf in d._cache for x in (buf.keys, buf.values)]
    cap = d.cache_capacity
    for a in range(10, 60, 5):
        d.draft_modes(feats[:, a:a + 5], 1)
    assert d.cache_capacity == cap and [x.data_ptr() for buf in d._cache for x in (buf.keys, buf.values)] == ptrs


def test_reset_then_a_new_sequence_sees_no_stale_rows():
    """After reset the buffers are reused: the old sequence's rows and mask columns must not leak."""
    tgt = _target()
    d = build_drafter(tgt, block_size=4, num_layers=2, num_modes=3, seed=5)
    with torch.no_grad():
        d.mode_embeddings.normal_(0, 1.0)
        long, short = _feats(d, 90, seed=6), _feats(d, 12, seed=7)
        d.reset()
        for a in range(0, 90, 9):
            d.draft_modes(long[:, a:a + 9], 4)
        _rounds(d, SlowDraftCache(d), short, [0, 5, 8, 12], [1, 2, 3])


@pytest.mark.parametrize("k", [1, 3])
def test_train_forward_equals_the_slow_twin_with_padding(k):
    tgt = _target(seed=1)
    d = build_drafter(tgt, block_size=4, num_layers=2, num_modes=k, seed=6)
    with torch.no_grad():
        if k > 1:
            d.mode_embeddings.normal_(0, 1.0)
            d.weight_readout.normal_(0, 1.0)
    feats = torch.cat([_feats(d, 9, seed=8), _feats(d, 9, seed=9)])  # [2, 9, H]
    valid = torch.tensor([[False] * 4 + [True] * 5, [True] * 9])
    block = torch.tensor([[5, 63, 63, 63], [7, 63, 63, 63]])
    for ctx_valid in (None, valid):
        out = d.train_forward(feats, block, ctx_valid)
        pi, q = out if k > 1 else (None, out[:, None])
        ref_pi, ref_q = slow_train_modes(d, feats, block, ctx_valid)
        assert torch.allclose(q, ref_q, atol=ATOL, rtol=0)
        if k > 1:
            assert torch.allclose(pi, ref_pi, atol=ATOL, rtol=0)


def test_heads_not_a_multiple_of_kv_heads_is_refused():
    tgt = _target()
    cfg = build_drafter(tgt, block_size=4, num_layers=1).config
    cfg.num_key_value_heads = 3
    from mfd_theory.llm.models.drafter import BlockDrafter

    with pytest.raises(ValueError, match="num_key_value_heads"):
        BlockDrafter(cfg, tgt)
