"""The released MFD checkpoint layout: bf16 single-file and sharded checkpoints with ``mode_embed``
and a ``mode_gate`` of any shape load, decode losslessly (greedy == HF generate) and round-trip;
the names the package wrote before still load; sharded saves; bad layouts are refused."""

import json
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_helpers import hf_greedy, tiny_hybrid, tiny_qwen3  # noqa: E402
from released_helpers import INDEX, rename_tensors, write_released  # noqa: E402

from mfd_theory.llm.decoding.generate import speculative_generate  # noqa: E402
from mfd_theory.llm.models.drafter import MFDDrafter, build_drafter, load_drafter  # noqa: E402
from mfd_theory.llm.models.target import TargetModel  # noqa: E402

K = 8  # as released


@pytest.fixture(scope="module")
def target():
    return tiny_qwen3(seed=2)


def _mfd(target, k=K, seed=5):
    d = build_drafter(target, block_size=5, num_layers=2, num_modes=k, seed=seed)
    with torch.no_grad():
        d.mode_embed.normal_(0, 0.5, generator=torch.Generator().manual_seed(seed))
        d.mode_gate.normal_(0, 1.0, generator=torch.Generator().manual_seed(seed + 1))
    return d


def _feats(target, drafter, n=9, seed=0):
    ids = torch.randint(0, target.config.vocab_size, (1, n), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return drafter.fuse_hidden(target(ids, output_hidden_states=True).hidden_states)


def _bf16(state):
    return {n: v.to(torch.bfloat16).float() for n, v in state.items()}


def _load_quiet(directory, target, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d = load_drafter(directory, target, **kw)
    return d, [str(w.message) for w in caught]


@pytest.mark.parametrize("shard_bytes", [None, 20_000])
def test_a_released_checkpoint_loads_with_its_gate_kept_unused(target, tmp_path, shard_bytes):
    d = _mfd(target)
    write_released(d, tmp_path, shard_bytes=shard_bytes)
    files = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    assert (len(files) > 2) == (shard_bytes is not None) and (tmp_path / INDEX).is_file() == (shard_bytes is not None)
    e, notes = _load_quiet(tmp_path, target)
    assert type(e) is MFDDrafter and e.num_modes == K and not e.gate_used
    assert any("mode_gate.weight [8, 32]" in n and "unused" in n for n in notes) and "uniform" in e.gate_note
    assert e.mode_gate.weight.shape == (K, 32) and e.mode_gate.weight.dtype == torch.float32  # kept, cast
    want = _bf16({n: v for n, v in d.state_dict().items() if n != "mode_gate"})
    got = e.state_dict()
    assert all(torch.equal(got[n], v) for n, v in want.items())  # the bf16 values, exactly
    log_pi, log_q = e.draft_modes(_feats(target, e), 3)
    assert torch.equal(log_pi, torch.full((K,), -torch.log(torch.tensor(float(K)))))
    assert log_q.shape == (K, 4, 64)
    # the backbone and modes as stored: the drafts equal those of the original drafter cast to bf16 values
    ref = build_drafter(target, block_size=5, num_layers=2, num_modes=K)
    ref.load_state_dict({**want, "mode_gate": torch.zeros(32)})
    assert torch.allclose(ref.draft_modes(_feats(target, ref), 3)[1], log_q, atol=1e-6)


@pytest.mark.parametrize("method", ["chain", "ddtree", "mfd"])
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_a_released_checkpoint_decodes_losslessly(target, tmp_path, method, dtype):
    write_released(_mfd(target, seed=7), tmp_path, shard_bytes=20_000)
    drafter, _ = _load_quiet(tmp_path, target, dtype=dtype)
    assert next(drafter.parameters()).dtype == (dtype or torch.float32)
    prompt = [5, 17, 33, 2, 9]
    res = speculative_generate(TargetModel(target), drafter, prompt, 24, method, budget=12)
    assert res.tokens == hf_greedy(target, prompt, 24)


@pytest.mark.parametrize("method", ["ddtree", "mfd"])
def test_a_released_checkpoint_on_a_hybrid_target_decodes_losslessly(tmp_path, method):
    """As MFD-Qwen3.5-4B: the drafter of a Gated DeltaNet hybrid, every other hidden layer read."""
    hybrid = tiny_hybrid(seed=4)
    n = hybrid.config.num_hidden_layers
    d = build_drafter(hybrid, block_size=5, num_layers=2, num_modes=K, seed=3, target_layer_ids=list(range(0, n, 2)))
    with torch.no_grad():
        d.mode_embed.normal_(0, 0.5, generator=torch.Generator().manual_seed(3))
    write_released(d, tmp_path, shard_bytes=20_000)
    drafter, notes = _load_quiet(tmp_path, hybrid)
    assert drafter.num_modes == K and not drafter.gate_used and notes
    prompt = [3, 8, 21, 40, 11]
    res = speculative_generate(TargetModel(hybrid), drafter, prompt, 20, method, budget=12)
    assert res.tokens == hf_greedy(hybrid, prompt, 20)


def test_a_released_checkpoint_round_trips_with_its_own_gate(target, tmp_path):
    write_released(_mfd(target), tmp_path / "a")
    e, _ = _load_quiet(tmp_path / "a", target)
    e.save_pretrained(tmp_path / "b")
    f, notes = _load_quiet(tmp_path / "b", target)
    assert not f.gate_used and notes and torch.equal(f.mode_gate.weight, e.mode_gate.weight)
    assert all(torch.equal(a, b) for a, b in zip(e.state_dict().values(), f.state_dict().values()))


@pytest.mark.parametrize("gate", ["own", "none"])
def test_an_own_gate_is_used_and_a_missing_one_gives_uniform_weights(target, tmp_path, gate):
    d = _mfd(target)
    write_released(d, tmp_path, gate=gate)
    e, notes = _load_quiet(tmp_path, target)
    log_pi, _ = e.draft_modes(_feats(target, e), 3)
    if gate == "own":
        assert e.gate_used and not notes
        ref = build_drafter(target, block_size=5, num_layers=2, num_modes=K)
        ref.load_state_dict(_bf16(d.state_dict()))
        assert torch.allclose(log_pi, ref.draft_modes(_feats(target, ref), 3)[0], atol=1e-6)
        assert float(log_pi.max() - log_pi.min()) > 0.1  # not uniform: the gate is in use
    else:
        assert not e.gate_used and any("no mode_gate" in n for n in notes)
        assert torch.allclose(log_pi, torch.full((K,), -torch.log(torch.tensor(float(K)))))


def test_a_linear_gate_to_one_logit_is_the_packages_gate(target, tmp_path):
    """mode_gate.weight [1, H] (a Linear(H, 1)) is the same map as the package's mode_gate [H]."""
    d = _mfd(target, k=3)
    d.save_pretrained(tmp_path)
    rename_tensors(tmp_path, {"mode_gate": "mode_gate.weight"})
    from safetensors.torch import load_file, save_file
    t = load_file(str(tmp_path / "model.safetensors"))
    t["mode_gate.weight"] = t["mode_gate.weight"][None]  # [1, H]
    save_file(t, str(tmp_path / "model.safetensors"))
    e, notes = _load_quiet(tmp_path, target)
    assert e.gate_used and not notes and torch.equal(e.mode_gate, d.mode_gate.detach())


def test_checkpoints_with_the_former_names_still_load(target, tmp_path):
    """What save_pretrained wrote before the rename: mode_embeddings [K, H] and weight_readout [H]."""
    d = _mfd(target, k=3)
    d.save_pretrained(tmp_path)
    rename_tensors(tmp_path, {"mode_embed": "mode_embeddings", "mode_gate": "weight_readout"})
    from safetensors.torch import load_file
    assert {"mode_embeddings", "weight_readout"} <= set(load_file(str(tmp_path / "model.safetensors")))
    e, notes = _load_quiet(tmp_path, target)
    assert e.gate_used and not notes
    assert all(torch.equal(a, b) for a, b in zip(d.state_dict().values(), e.state_dict().values()))
    feats = _feats(target, d)
    assert all(torch.equal(x, y) for x, y in zip(d.draft_modes(feats, 4), e.draft_modes(feats, 4)))
    assert e.mode_embeddings is e.mode_embed and e.weight_readout is e.mode_gate  # the former attributes
    e.save_pretrained(tmp_path / "again")  # written back in the new names
    assert {"mode_embed", "mode_gate"} <= set(load_file(str(tmp_path / "again" / "model.safetensors")))


def test_no_embedding_or_lm_head_is_stored(target, tmp_path):
    write_released(_mfd(target), tmp_path, shard_bytes=20_000)
    names = json.loads((tmp_path / INDEX).read_text())["weight_map"]
    assert "mode_embed" in names and not any("embed_tokens" in n or "lm_head" in n for n in names)


def test_a_recorded_k_must_match_mode_embed(target, tmp_path):
    write_released(_mfd(target), tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["num_modes"] = 4
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="num_modes is 4, mode_embed holds 8 modes"):
        load_drafter(tmp_path, target)


def test_a_broken_shard_index_is_refused(target, tmp_path):
    write_released(_mfd(target), tmp_path, shard_bytes=20_000)
    index = json.loads((tmp_path / INDEX).read_text())
    index["weight_map"]["layers.9.mlp.up_proj.weight"] = "model-00001-of-00099.safetensors"
    (tmp_path / INDEX).write_text(json.dumps(index))
    with pytest.raises(FileNotFoundError, match="model-00001-of-00099.safetensors"):
        load_drafter(tmp_path, target)
    index["weight_map"]["layers.9.mlp.up_proj.weight"] = index["weight_map"]["mode_embed"]
    (tmp_path / INDEX).write_text(json.dumps(index))
    with pytest.raises(ValueError, match="lists tensors its shards do not hold"):
        load_drafter(tmp_path, target)


def test_sharded_save_splits_and_a_later_single_save_leaves_no_stale_index(target, tmp_path):
    d = _mfd(target, k=2)
    d.save_pretrained(tmp_path, max_shard_size=10_000)
    shards = sorted(tmp_path.glob("model-*-of-*.safetensors"))
    assert len(shards) > 2 and all(p.stat().st_size < 10_000 + 4_096 for p in shards)
    feats = _feats(target, d)
    assert all(torch.equal(x, y) for x, y in zip(d.draft_modes(feats, 4), load_drafter(tmp_path, target).draft_modes(feats, 4)))
    d.save_pretrained(tmp_path)
    assert not (tmp_path / INDEX).exists() and not list(tmp_path.glob("model-*-of-*.safetensors"))
    assert (tmp_path / "model.safetensors").is_file()
    with pytest.raises(ValueError, match="max_shard_size"):
        d.save_pretrained(tmp_path, max_shard_size=0)
