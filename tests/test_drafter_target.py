"""A drafter belongs to one target: refused with another target of the same shapes (by its
embedding / LM-head tables, its recorded fingerprint, its ``num_target_layers``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mfd_theory.llm import build_drafter, load_drafter  # noqa: E402
from mfd_theory.llm.decoding.generate import speculative_generate  # noqa: E402

from llm_helpers import tiny_qwen3  # noqa: E402

PROMPT = torch.tensor([3, 1, 4, 1, 5])


@pytest.fixture(scope="module")
def a():
    return tiny_qwen3(seed=0)


@pytest.fixture(scope="module")
def b():
    return tiny_qwen3(seed=1)  # same shapes as a, other weights


@pytest.mark.parametrize("k", [1, 2])
def test_decoding_refuses_a_drafter_built_on_another_target(a, b, k):
    d = build_drafter(b, block_size=4, num_layers=1, num_modes=k)
    method = "mfd" if k > 1 else "ddtree"
    with pytest.raises(ValueError, match="another target"):
        speculative_generate(a, d, PROMPT, 6, method, budget=4)
    # on its own target it decodes, losslessly
    out = speculative_generate(b, d, PROMPT, 6, method, budget=4).tokens
    assert out == speculative_generate(b, None, PROMPT, 6, "ar").tokens


def test_an_equal_copy_of_the_target_is_accepted(a):
    twin = tiny_qwen3(seed=0)  # the same weights, other tensors
    d = build_drafter(twin, block_size=4, num_layers=1)
    assert speculative_generate(a, d, PROMPT, 5, "ddtree", budget=4).tokens == \
        speculative_generate(a, None, PROMPT, 5, "ar").tokens


def test_loading_a_checkpoint_of_another_target_is_refused(a, b, tmp_path):
    build_drafter(b, block_size=4, num_layers=1, num_modes=2).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="another target"):
        load_drafter(tmp_path, a)
    assert load_drafter(tmp_path, b).num_modes == 2


def test_layer_count_is_compared(tmp_path):
    small, big = tiny_qwen3(num_layers=2, seed=3), tiny_qwen3(num_layers=4, seed=3)
    # layer id 0 exists in both, so only num_target_layers tells them apart
    d = build_drafter(small, block_size=4, num_layers=1, target_layer_ids=[0])
    d.save_pretrained(tmp_path)
    cfg = (tmp_path / "config.json").read_text().replace('"target_fingerprint"', '"_dropped"')
    (tmp_path / "config.json").write_text(cfg)  # no fingerprint: the layer count alone must catch it
    with pytest.raises(ValueError, match="num_target_layers"):
        load_drafter(tmp_path, big)
    d.config.num_target_layers = 2
    with pytest.raises(ValueError, match="another target|4 layers"):
        speculative_generate(big, d, PROMPT, 4, "ddtree", budget=4)


def test_fingerprint_does_not_depend_on_the_load_dtype():
    from mfd_theory.llm.models.fingerprint import target_fingerprint

    m32 = tiny_qwen3(seed=3)
    m16 = tiny_qwen3(seed=3).to(torch.bfloat16)
    assert m16.lm_head.weight.dtype == torch.bfloat16
    assert target_fingerprint(m32) == target_fingerprint(m16)


@pytest.mark.parametrize("large", [False, True])
def test_fingerprint_covers_the_decoder_layers(large):
    from mfd_theory.llm.models.fingerprint import target_fingerprint

    # ``large``: a tensor big enough to be sampled, changed in every value.
    m = tiny_qwen3(seed=4, hidden_size=64 if large else 32)
    before = target_fingerprint(m)
    w = m.model.layers[1].mlp.down_proj.weight if large else m.model.layers[1].input_layernorm.weight
    assert (w.numel() > 4096) == large
    with torch.no_grad():
        w.mul_(1.5)
    assert target_fingerprint(m) != before
