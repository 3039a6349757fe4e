"""The random models and replay drafters that tests and benchmarks share
(:mod:`mfd_theory.llm.models.testing`)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import llm_helpers  # noqa: E402,F401  (single-threaded torch)

from mfd_theory.llm.models.testing import OracleDrafter, ReplayDrafter, random_qwen3, tiny_qwen3  # noqa: E402

SHAPE = (64, 32, 3, 4, 2, 8, 64)  # vocab, hidden, layers, heads, kv heads, head dim, intermediate


def test_random_qwen3_is_keyed_by_its_seed_and_drawn_as_asked():
    a, b, c = random_qwen3(SHAPE, seed=1), random_qwen3(SHAPE, seed=1), random_qwen3(SHAPE, seed=2)
    pa, pb, pc = (dict(m.named_parameters()) for m in (a, b, c))
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert not torch.equal(pa["model.layers.0.self_attn.q_proj.weight"], pc["model.layers.0.self_attn.q_proj.weight"])
    assert a.config.num_hidden_layers == 3 and random_qwen3(SHAPE, layers=1).config.num_hidden_layers == 1
    assert all(bool((p == 1).all()) for k, p in pa.items() if k.endswith("norm.weight"))
    m = dict(random_qwen3(SHAPE, std=0.05, head_std=1.0, vector_std=0.0, seed=3).named_parameters())
    assert abs(float(m["model.layers.0.mlp.up_proj.weight"].detach().std()) - 0.05) < 0.01
    assert abs(float(m["lm_head.weight"].detach().std()) - 1.0) < 0.1
    assert a.generation_config.eos_token_id is None and a.generation_config.pad_token_id == 0


def test_random_qwen3_rebuilds_rope_so_its_logits_match_an_ordinary_construction():
    """Built on the meta device, RoPE's inv_freq must be rebuilt: the same weights loaded into a
    model made the ordinary way give the same logits."""
    from transformers import Qwen3ForCausalLM

    fast = random_qwen3(SHAPE, seed=0)
    plain = Qwen3ForCausalLM(fast.config).eval()
    plain.load_state_dict(fast.state_dict())
    ids = torch.tensor([[1, 5, 9, 2, 7, 7, 3]])
    with torch.no_grad():
        assert torch.allclose(fast(ids).logits, plain(ids).logits, atol=1e-6)


def test_the_replay_returns_its_drafts_on_the_asked_device_and_the_oracle_drafts_the_greedy_chain():
    model = tiny_qwen3(seed=0)
    oracle = OracleDrafter(model, block_size=5, num_modes=2, seed=0, corrupt=0.0)
    oracle.observe_tokens([1, 2, 3])
    log_pi, log_q = oracle.draft_modes(None, 4)
    ids, chain = torch.tensor([[1, 2, 3, 4]]), []
    with torch.no_grad():
        for _ in range(4):
            chain.append(int(model(ids).logits[0, -1].argmax()))
            ids = torch.cat([ids, torch.tensor([[chain[-1]]])], dim=1)
    assert log_q.argmax(-1).tolist() == [chain, chain]  # corrupt 0: both modes are the chain
    assert torch.allclose(log_pi.exp(), torch.tensor([0.8, 0.2]))
    replay = ReplayDrafter([[1, 2, 3, 4] + chain], 64, block_size=5, seed=0, corrupt=0.0, device="meta")
    replay.observe_tokens([1, 2, 3])
    lp, lq = replay.draft_modes(None, 4)
    assert lp.device.type == lq.device.type == "meta" and tuple(lq.shape) == (2, 4, 64)
