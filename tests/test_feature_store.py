"""Target features kept in a bfloat16 memory map on disk: the same states as in RAM, rounded to
bfloat16 once, handed to the drafter at the target's dtype; refused over the cap."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llm_helpers import tiny_qwen2  # noqa: E402

from mfd_theory.llm.training.train import TargetFeatures  # noqa: E402


def _seqs():
    rng = np.random.default_rng(0)
    return [rng.integers(1, 60, n) for n in (7, 12, 3, 9, 12)]


def test_memmap_features_are_the_ram_features_rounded_to_bfloat16(tmp_path):
    model = tiny_qwen2(vocab_size=64, seed=2)
    seqs = _seqs()
    ram = TargetFeatures(model, seqs, [0, 2], chunk=2)
    mm = TargetFeatures(model, seqs, [0, 2], chunk=3, store="bf16-memmap", directory=tmp_path)
    assert mm.path.is_file() and mm.store == "bf16-memmap"
    # the slow twin: each sequence's own forward, its hidden states rounded to bfloat16 and back
    with torch.no_grad():
        for j, s in enumerate(seqs):
            hs = model(input_ids=torch.tensor(s)[None], output_hidden_states=True).hidden_states
            for i in (1, 3):
                want = hs[i][0].to(torch.bfloat16)
                assert torch.equal(mm.rows[j][i], want)
                assert torch.allclose(ram.rows[j][i], hs[i][0], atol=1e-5)
    rows = np.array([4, 0, 2])
    a, b = ram.batch(rows, 10), mm.batch(rows, 10)
    for i in (1, 3):
        assert b[i].dtype == torch.float32 and b[i].shape == a[i].shape
        assert torch.equal(b[i], a[i].to(torch.bfloat16).float())
    assert all(x is None for k, x in enumerate(b) if k not in (1, 3))
    sub = mm.subset([3, 1])
    assert sub.store == "bf16-memmap" and torch.equal(sub.rows[0][1], mm.rows[3][1])
    sub.check([seqs[3], seqs[1]], [0, 2])


def test_store_size_and_cap(tmp_path):
    model = tiny_qwen2(vocab_size=64, seed=2)
    seqs = _seqs()
    ram_mb = TargetFeatures.size_mb(model, seqs, [0, 2])
    assert TargetFeatures.size_mb(model, seqs, [0, 2], "bf16-memmap") == pytest.approx(ram_mb / 2)
    with pytest.raises(ValueError, match=r"^cap_mb: the features take .* over the cap"):
        TargetFeatures(model, seqs, [0, 2], store="bf16-memmap", directory=tmp_path, cap_mb=1e-6)
    with pytest.raises(ValueError, match=r"^store: must be one of ram, bf16-memmap"):
        TargetFeatures(model, seqs, [0], store="disk")
    with pytest.raises(ValueError, match=r"^directory:"):
        TargetFeatures(model, seqs, [0], store="bf16-memmap")
