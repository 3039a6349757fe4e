"""A drafter started as a true copy of the target's last layers (``init_layers_from_target``):
the draft layers take the target's attention layout (Qwen2's q/k/v biases, Qwen3's q/k norms),
every tensor is copied, and the copied stack computes what the target's top computes."""

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mfd_theory.llm.models.drafter import attention_layout, build_drafter, load_drafter  # noqa: E402
from mfd_theory.llm.models.testing import tiny_llama, tiny_qwen2, tiny_qwen3  # noqa: E402
from mfd_theory.runs.pipeline.train_drafter import init_layers_from_target  # noqa: E402

ATOL = 1e-5  # the same float32 arithmetic in another order


def _untrivial(model, seed=0):
    """``model`` with every bias and norm weight drawn at random (transformers starts biases at zero
    and norms at one, where a copy that dropped them would still match)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif name.endswith("norm.weight"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
    return model


@pytest.fixture(scope="module")
def qwen2():
    return _untrivial(tiny_qwen2(seed=4))


@pytest.fixture(scope="module")
def qwen3():
    return _untrivial(tiny_qwen3(seed=5))


def _copy(target, layers, **kw):
    d = build_drafter(target, 6, layers, seed=1, mask_token_id=60, **kw)
    return d, init_layers_from_target(d, target)


def _tokens(target, n, seed=0):
    """Hidden states of n random tokens [1, n, H] (the target's embeddings) at positions p0..p0+n-1."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, target.config.vocab_size, (1, n), generator=g)
    return target.model.embed_tokens(ids).detach()


def _draft_stack(d, x, pos, final_norm=True):
    """The drafter's layers over block states x [1, S, H] at positions pos [1, S] with no context:
    each layer's attention reads the block's own S keys, unmasked."""
    attn = d.layers[0].self_attn
    empty = x.new_zeros(1, attn.num_kv_heads, 0, attn.head_dim)  # [1, kvh, 0, d]
    cos, sin = d.rotary_emb(x, pos)
    h = x
    for layer in d.layers:
        h = layer(h, cos, sin, (empty, empty), None)
    return d.norm(h) if final_norm else h


def _target_stack(target, layers, x, pos, final_norm=True):
    """The target's last ``layers`` decoder layers (and its final norm) over x [1, S, H] at
    positions pos, with the causal mask lifted (every position sees every other, as a draft block does)."""
    emb = target.model.rotary_emb(x, pos)
    mask = x.new_zeros(1, 1, x.shape[1], x.shape[1])  # additive, nothing masked
    h = x
    for layer in target.model.layers[-layers:]:
        h = layer(h, attention_mask=mask, position_ids=pos, position_embeddings=emb)
    return target.model.norm(h) if final_norm else h


def test_a_qwen2_drafter_has_qwen2_attention(qwen2):
    d = build_drafter(qwen2, 6, 1)
    attn = d.layers[0].self_attn
    assert attn.q_proj.bias is not None and attn.k_proj.bias is not None and attn.v_proj.bias is not None
    assert attn.o_proj.bias is None  # Qwen2Attention: o_proj has no bias
    assert not any("q_norm" in n or "k_norm" in n for n in d.state_dict())
    assert attention_layout(d.config) == (True, False, False)
    old = build_drafter(qwen2, 6, 1, layout="qwen3")  # DFlash's Qwen3 layer, as before
    assert attention_layout(old.config) == (False, False, True)
    assert "layers.0.self_attn.q_norm.weight" in old.state_dict()
    with pytest.raises(ValueError, match="layout"):
        build_drafter(qwen2, 6, 1, layout="qwen2")


@pytest.mark.parametrize("layers", [1, 2])
def test_every_tensor_is_copied_from_its_source(qwen2, layers):
    d, copied = _copy(qwen2, layers)
    n = len(qwen2.model.layers)
    mine, theirs = d.state_dict(), qwen2.state_dict()
    layer_names = {k for k in mine if k.startswith("layers.")}
    assert set(copied) == layer_names | {"norm.weight"}  # every draft-layer tensor, and the final norm
    for k, src in copied.items():
        assert torch.equal(mine[k], theirs[src]), (k, src)
    for j in range(layers):
        assert copied[f"layers.{j}.self_attn.q_proj.bias"] == f"model.layers.{n - layers + j}.self_attn.q_proj.bias"
    assert copied["norm.weight"] == "model.norm.weight"
    assert torch.equal(d.norm.weight, qwen2.model.norm.weight)
    assert not torch.equal(d.norm.weight, torch.ones_like(d.norm.weight))  # not merely both at one
    assert not torch.equal(mine["layers.0.self_attn.q_proj.bias"], torch.zeros(32))


@pytest.mark.parametrize("layers", [1, 2])
def test_a_single_token_passes_the_draft_layer_as_the_target_layer(qwen2, layers):
    d, _ = _copy(qwen2, layers)
    x = _tokens(qwen2, 1, seed=layers)
    pos = torch.tensor([[5]])
    with torch.no_grad():
        for j in range(layers):  # layer by layer: one key, the token's own
            got = d.layers[j](x, *d.rotary_emb(x, pos), (x.new_zeros(1, 2, 0, 8),) * 2, None)
            src = qwen2.model.layers[len(qwen2.model.layers) - layers + j]
            want = src(x, position_ids=pos, position_embeddings=qwen2.model.rotary_emb(x, pos))
            assert torch.allclose(got, want, atol=ATOL), (j, float((got - want).abs().max()))
        assert torch.allclose(_draft_stack(d, x, pos), _target_stack(qwen2, layers, x, pos), atol=ATOL)


@pytest.mark.parametrize("layers", [1, 2])
def test_a_block_passes_the_draft_stack_as_the_unmasked_target_top(qwen2, layers):
    """Several tokens exercise what one cannot (with one key the scores do not matter): the q/k
    biases and the rotary positions. Breaking one copied q bias must break the match."""
    d, _ = _copy(qwen2, layers)
    x = _tokens(qwen2, 5, seed=10 + layers)
    pos = torch.arange(3, 8)[None]
    with torch.no_grad():
        want = _target_stack(qwen2, layers, x, pos)
        assert torch.allclose(_draft_stack(d, x, pos), want, atol=ATOL)
        spread = torch.tensor([[3, 4, 5, 6, 12]])  # other relative positions (RoPE ignores a common shift)
        assert not torch.allclose(_draft_stack(d, x, spread), want, atol=1e-3)
        d.layers[0].self_attn.q_proj.bias.add_(0.5)
        assert not torch.allclose(_draft_stack(d, x, pos), want, atol=1e-3)


def test_a_qwen3_target_copies_its_q_k_norms(qwen3):
    d, copied = _copy(qwen3, 2)
    assert attention_layout(d.config) == (False, False, True)
    n = len(qwen3.model.layers)
    for j in range(2):
        for name in ("q_norm", "k_norm"):
            src = getattr(qwen3.model.layers[n - 2 + j].self_attn, name).weight
            assert torch.equal(getattr(d.layers[j].self_attn, name).weight, src)
            assert copied[f"layers.{j}.self_attn.{name}.weight"] == f"model.layers.{n - 2 + j}.self_attn.{name}.weight"
    x, pos = _tokens(qwen3, 4), torch.arange(2, 6)[None]
    with torch.no_grad():
        assert torch.allclose(_draft_stack(d, x, pos), _target_stack(qwen3, 2, x, pos), atol=ATOL)


def test_a_llama_target_copies_without_biases_or_q_k_norms():
    llama = _untrivial(tiny_llama(seed=6))
    d, copied = _copy(llama, 1)
    assert attention_layout(d.config) == (False, False, False)
    x, pos = _tokens(llama, 3), torch.arange(3)[None]
    with torch.no_grad():
        assert torch.allclose(_draft_stack(d, x, pos), _target_stack(llama, 1, x, pos), atol=ATOL)


def test_a_drafter_that_cannot_hold_a_copy_is_refused(qwen2):
    with pytest.raises(ValueError, match=r"^--init-layers: draft layer 0 cannot hold a true copy .*q_norm") as e:
        init_layers_from_target(build_drafter(qwen2, 6, 1, layout="qwen3"), qwen2)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="--init-layers: the drafter has 5 layers, the target only 4"):
        init_layers_from_target(build_drafter(qwen2, 6, 5), qwen2)


def test_the_layout_round_trips_through_a_checkpoint(qwen2, tmp_path):
    d, _ = _copy(qwen2, 2)
    d.save_pretrained(tmp_path / "d")
    raw = json.loads((tmp_path / "d" / "config.json").read_text())
    assert (raw["attention_bias"], raw["o_proj_bias"], raw["qk_norm"]) == (True, False, False)
    back = load_drafter(tmp_path / "d", qwen2)
    assert attention_layout(back.config) == (True, False, False)
    assert back.state_dict().keys() == d.state_dict().keys()
    assert all(torch.equal(v, d.state_dict()[k]) for k, v in back.state_dict().items())


def test_a_config_without_the_keys_loads_as_before(qwen2, tmp_path):
    """Checkpoints written before the keys existed hold Qwen3-shaped layers: q/k norms, and biases
    on all four projections exactly when attention_bias is true."""
    old = build_drafter(qwen2, 6, 1, layout="qwen3", seed=2)
    old.save_pretrained(tmp_path / "old")
    path = tmp_path / "old" / "config.json"
    raw = json.loads(path.read_text())
    for key in ("qk_norm", "o_proj_bias"):
        raw.pop(key)
    path.write_text(json.dumps(raw))
    back = load_drafter(tmp_path / "old", qwen2)
    assert attention_layout(back.config) == (False, False, True)
    assert torch.equal(back.layers[0].self_attn.q_norm.weight, old.layers[0].self_attn.q_norm.weight)
    assert attention_layout(type(back.config)(attention_bias=True)) == (True, True, True)
