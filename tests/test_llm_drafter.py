"""Block and MFD drafters: DFlash checkpoint layout, save/load, K = 1 equivalence, cache, bad input."""

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from safetensors.torch import save_file  # noqa: E402

from llm_helpers import tiny_qwen3  # noqa: E402

from mfd_theory.llm.models.drafter import (  # noqa: E402
    BlockDrafter, MFDDrafter, build_drafter, default_target_layer_ids, load_drafter,
)

ATOL = 1e-5  # same weights, different batch shapes / concatenation order: rounding only


@pytest.fixture(scope="module")
def target():
    return tiny_qwen3(seed=2)


def _ctx(target, n=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, target.config.vocab_size, (1, n), generator=g)
    with torch.no_grad():
        return target(ids, output_hidden_states=True).hidden_states


def test_parameters_exclude_the_targets_embeddings_and_head(target):
    d = build_drafter(target, block_size=4, num_layers=2)
    names = set(dict(d.named_parameters()))
    assert not any("embed" in n or "lm_head" in n for n in names)
    assert {"fc.weight", "hidden_norm.weight", "norm.weight", "layers.1.mlp.down_proj.weight"} <= names
    assert d.block_size == 4 and d.num_modes == 1 and d.mask_token_id == 63
    assert d.target_layer_ids == default_target_layer_ids(4, 2)
    m = build_drafter(target, block_size=4, num_layers=2, num_modes=3)
    assert isinstance(m, MFDDrafter) and m.num_modes == 3
    assert set(dict(m.named_parameters())) - names == {"mode_embed", "mode_gate"}


def test_default_layer_ids():
    assert default_target_layer_ids(36, 1) == [18]
    assert default_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]


def test_draft_shapes_and_normalisation(target):
    d = build_drafter(target, block_size=5, num_layers=1)
    lq = d.draft(d.fuse_hidden(_ctx(target)), 3)
    assert lq.shape == (4, 64)
    assert torch.allclose(lq.exp().sum(-1), torch.ones(4), atol=1e-5)
    m = build_drafter(target, block_size=5, num_layers=1, num_modes=3)
    log_pi, log_q = m.draft(m.fuse_hidden(_ctx(target)), 3)
    assert log_pi.shape == (3,) and log_q.shape == (3, 4, 64)
    assert abs(float(log_pi.exp().sum()) - 1) < 1e-5


def test_cached_rounds_equal_one_training_forward(target):
    """Context appended over rounds (the drafter's own cache) == the whole context at once."""
    for k in (1, 3):
        d = build_drafter(target, block_size=4, num_layers=2, num_modes=k, seed=1)
        feats = d.fuse_hidden(_ctx(target, 9))  # [1, 9, H]
        d.reset()
        d.draft_modes(feats[:, :5], 7)
        d.draft_modes(feats[:, 5:8], 11)
        log_pi, log_q = d.draft_modes(feats[:, 8:], 13)
        block = torch.tensor([[13] + [d.mask_token_id] * 3])
        out = d.train_forward(feats, block)
        ref_pi, ref_q = out if k > 1 else (torch.zeros(1, 1), out[:, None])
        assert torch.allclose(log_q, ref_q[0], atol=ATOL)
        assert torch.allclose(log_pi, ref_pi[0], atol=ATOL)


def test_left_padding_equals_unpadded(target):
    d = build_drafter(target, block_size=4, num_layers=2, num_modes=2, seed=3)
    feats = d.fuse_hidden(_ctx(target, 6))
    block = torch.tensor([[5, 63, 63, 63]])
    pi0, q0 = d.train_forward(feats, block)
    padded = torch.cat([torch.randn(1, 3, feats.shape[-1]), feats], dim=1)
    valid = torch.tensor([[False] * 3 + [True] * 6])
    pi1, q1 = d.train_forward(torch.cat([padded, torch.cat([feats[:, :3] * 0, feats], 1)]),
                              block.repeat(2, 1), torch.cat([valid, torch.ones(1, 9, dtype=torch.bool)]))
    assert torch.allclose(q1[0], q0[0], atol=ATOL) and torch.allclose(pi1[0], pi0[0], atol=ATOL)


def test_train_forward_is_differentiable(target):
    m = build_drafter(target, block_size=4, num_layers=1, num_modes=2)
    hs = _ctx(target)
    log_pi, log_q = m.train_forward(m.fuse_hidden(hs), torch.tensor([[5, 63, 63, 63]]))
    (log_q[..., 0].sum() + log_pi.sum() * 0 + torch.logsumexp(log_pi, -1).sum()).backward()
    assert m.fc.weight.grad is not None and m.mode_embeddings.grad is not None
    assert target.lm_head.weight.grad is None  # the target stays frozen (no grads requested)


def test_mfd_with_one_mode_equals_the_block_drafter(target):
    d = build_drafter(target, block_size=5, num_layers=2, seed=4)
    m = MFDDrafter(d.config, target, num_modes=1)
    missing, unexpected = m.load_state_dict(d.state_dict(), strict=False)
    assert set(missing) == {"mode_embed", "mode_gate"} and not unexpected
    feats = d.fuse_hidden(_ctx(target))
    block = torch.tensor([[9, 63, 63, 63, 63]])
    log_pi, log_q = m.train_forward(feats, block)
    assert torch.equal(log_q[:, 0], d.train_forward(feats, block))
    assert torch.equal(log_pi, torch.zeros(1, 1))
    d.reset(), m.reset()
    pi, q = m.draft(feats, 9)
    assert torch.equal(q[0], d.draft(feats, 9)) and torch.equal(pi, torch.zeros(1))


@pytest.mark.parametrize("k", [1, 3])
def test_save_load_round_trip(target, tmp_path, k):
    d = build_drafter(target, block_size=4, num_layers=2, num_modes=k, seed=5)
    with torch.no_grad():
        for p in d.parameters():
            p.add_(0.01 * torch.randn_like(p))  # norms away from 1 too
    d.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["block_size"] == 4 and cfg["dflash_config"]["target_layer_ids"] == d.target_layer_ids
    e = BlockDrafter.from_pretrained(tmp_path, target)
    assert type(e) is type(d) and e.num_modes == k
    for (n1, a), (n2, b) in zip(d.state_dict().items(), e.state_dict().items()):
        assert n1 == n2 and torch.equal(a, b)
    feats = d.fuse_hidden(_ctx(target))
    d.reset(), e.reset()
    assert all(torch.equal(x, y) for x, y in zip(d.draft_modes(feats, 4), e.draft_modes(feats, 4)))


def test_a_checkpoint_in_dflash_layout_loads(target, tmp_path):
    """Written by hand the way DFlash's Qwen3 drafters are published (not via save_pretrained)."""
    c = target.config
    H, hd, nh, nkv, I = c.hidden_size, c.head_dim, c.num_attention_heads, c.num_key_value_heads, c.intermediate_size
    config = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "attention_bias": False,
        "block_size": 6, "num_target_layers": c.num_hidden_layers, "num_hidden_layers": 2,
        "dflash_config": {"target_layer_ids": [0, 2], "mask_token_id": 60},
        "hidden_size": H, "head_dim": hd, "num_attention_heads": nh, "num_key_value_heads": nkv,
        "intermediate_size": I, "hidden_act": "silu", "rms_norm_eps": 1e-6, "vocab_size": c.vocab_size,
        "max_position_embeddings": 512, "rope_theta": 1000000.0, "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    g = torch.Generator().manual_seed(0)
    shapes = {"fc.weight": (H, 2 * H), "hidden_norm.weight": (H,), "norm.weight": (H,)}
    for i in range(2):
        p = f"layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (nh * hd, H), p + "self_attn.k_proj.weight": (nkv * hd, H),
            p + "self_attn.v_proj.weight": (nkv * hd, H), p + "self_attn.o_proj.weight": (H, nh * hd),
            p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H), p + "mlp.down_proj.weight": (H, I),
            p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
        })
    tensors = {k: 1 + 0.05 * torch.randn(s, generator=g) if len(s) == 1 else 0.05 * torch.randn(s, generator=g)
               for k, s in shapes.items()}
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(tmp_path / "model.safetensors"))
    d = load_drafter(tmp_path, target)
    assert type(d) is BlockDrafter
    assert d.block_size == 6 and d.mask_token_id == 60 and d.target_layer_ids == [0, 2]
    sd = d.state_dict()
    assert set(sd) == set(tensors) and all(torch.equal(sd[k], v) for k, v in tensors.items())
    assert d.draft(d.fuse_hidden(_ctx(target)), 1).shape == (5, 64)


def test_foreign_checkpoint_is_rejected(target, tmp_path):
    d = build_drafter(target, block_size=4, num_layers=1)
    d.save_pretrained(tmp_path)
    from safetensors.torch import load_file
    sd = load_file(str(tmp_path / "model.safetensors"))
    sd["candidate_selector.hidden_projection.weight"] = torch.zeros(2, 2)
    save_file(sd, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="layout"):
        load_drafter(tmp_path, target)


def test_mismatched_vocab_or_hidden_size(target, tmp_path):
    d = build_drafter(target, block_size=4, num_layers=1)
    d.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="vocab_size"):
        load_drafter(tmp_path, tiny_qwen3(vocab_size=80))
    with pytest.raises(ValueError, match="hidden_size"):
        load_drafter(tmp_path, tiny_qwen3(hidden_size=48))


def test_block_size_below_two(target):
    with pytest.raises(ValueError, match="block_size"):
        build_drafter(target, block_size=1, num_layers=1)


def test_bad_layer_ids_and_mask_token(target):
    with pytest.raises(ValueError, match="target_layer_ids"):
        build_drafter(target, block_size=4, num_layers=1, target_layer_ids=[7])
    with pytest.raises(ValueError, match="mask_token_id"):
        build_drafter(target, block_size=4, num_layers=1, mask_token_id=64)
