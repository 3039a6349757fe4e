"""Training recipe pieces: the shared-context pass against its slow twin (a left-aligned copy of the
context per block), the feature file reused across runs, weight decay, and a corpus read as a data set."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mfd_theory.llm import build_drafter  # noqa: E402
from mfd_theory.llm.models.testing import tiny_qwen2, tiny_qwen3  # noqa: E402
from mfd_theory.llm.training.train import (  # noqa: E402
    DrafterTrainConfig, TargetFeatures, left_align_context, train_drafter,
)

VOCAB, MASK = 64, 63


@pytest.fixture(scope="module", params=["qwen3", "qwen2"])
def target(request):
    torch.manual_seed(0)
    make = tiny_qwen3 if request.param == "qwen3" else tiny_qwen2
    return make(vocab_size=VOCAB, hidden_size=32, num_layers=3, seed=1)


def _blocks(seqs, starts, s):
    ids = torch.tensor(seqs)
    out = []
    for b in range(ids.shape[0]):
        for t in starts[b]:
            blk = torch.full((s,), MASK)
            blk[0] = ids[b, t]
            out.append(blk)
    return torch.stack(out)


@pytest.mark.parametrize("modes", [1, 3])
def test_shared_context_equals_one_copy_per_block(target, modes):
    """Every block's log-probs (and the mixture weights) from the one shared pass equal those of its
    own left-aligned context copy, and so do the gradients of a loss over them."""
    d = build_drafter(target, 4, 2, num_modes=modes, seed=3, mask_token_id=MASK).float()
    if modes > 1:
        with torch.no_grad():
            d.mode_embed.normal_(0, 0.5)
            d.mode_gate.normal_(0, 0.5)
    g = torch.Generator().manual_seed(5)
    seqs = torch.randint(0, MASK, (3, 20), generator=g).tolist()
    starts = torch.tensor([[1, 7, 16], [4, 4, 11], [15, 2, 9]])
    with torch.no_grad():
        hs = target(input_ids=torch.tensor(seqs), output_hidden_states=True).hidden_states
    block_ids = _blocks(seqs, starts.tolist(), 4)
    ctx = d.fuse_hidden(hs)[:, : int(starts.max())]

    def run(shared):
        d.zero_grad()
        if shared:
            out = d.train_forward_shared(ctx.detach(), block_ids, starts)
        else:
            c, valid = left_align_context(ctx.detach().repeat_interleave(3, 0), starts.reshape(-1))
            out = d.train_forward(c, block_ids, valid)
        parts = out if isinstance(out, tuple) else (out,)
        loss = sum((p.float() * torch.linspace(0.1, 1, p.shape[-1])).sum() for p in parts)
        loss.backward()
        return [p.detach().clone() for p in parts], {n: q.grad.clone() for n, q in d.named_parameters()
                                                      if q.grad is not None}

    slow, g_slow = run(False)
    fast, g_fast = run(True)
    for a, b in zip(slow, fast):
        assert a.shape == b.shape
        torch.testing.assert_close(b, a, atol=2e-5, rtol=2e-5)
    assert g_slow.keys() == g_fast.keys() and g_slow
    for n in g_slow:
        torch.testing.assert_close(g_fast[n], g_slow[n], atol=2e-4, rtol=2e-4)


def test_shared_context_training_follows_the_per_block_curve(target, tmp_path):
    g = np.random.default_rng(0)
    seqs = [g.integers(0, MASK, size=int(n)).astype(np.int64) for n in g.integers(14, 30, size=10)]
    plens = np.full(len(seqs), 3)
    curves = {}
    for mode in ("per_block", "shared"):
        cfg = DrafterTrainConfig(block_size=4, batch_size=4, blocks_per_seq=5, steps=4, warmup=1, ckpt_every=10,
                                 context=mode, weight_decay=0.01)
        d = build_drafter(target, 4, 1, seed=0, mask_token_id=MASK)
        curves[mode] = train_drafter(target, d, seqs, plens, tmp_path / mode, cfg, progress=False)
        rec = json.loads((tmp_path / mode / "train_config.json").read_text())
        assert rec["train"]["weight_decay"] == 0.01
        assert rec.get("context") == ("shared" if mode == "shared" else None)
    for a, b in zip(curves["per_block"], curves["shared"]):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)
    with pytest.raises(ValueError, match="context"):
        DrafterTrainConfig(context="sometimes")
    with pytest.raises(ValueError, match="weight_decay"):
        DrafterTrainConfig(weight_decay=-0.1)


def test_feature_file_is_reused_only_for_the_same_sequences(target, tmp_path):
    g = np.random.default_rng(1)
    seqs = [g.integers(0, MASK, size=int(n)).astype(np.int64) for n in (9, 5, 12)]
    first = TargetFeatures.cached(target, seqs, [0, 2], tmp_path, key={"fingerprint": "x"})
    stamp = (tmp_path / "features.bf16").stat().st_mtime_ns
    again = TargetFeatures.cached(target, seqs, [0, 2], tmp_path, key={"fingerprint": "x"})
    assert (tmp_path / "features.bf16").stat().st_mtime_ns == stamp  # opened, not computed
    rows, width = np.array([2, 0]), 9
    for i in (1, 3):
        assert torch.equal(first.batch(rows, width)[i], again.batch(rows, width)[i])
    # these are the target's hidden states, rounded to bfloat16 (the batched forward's float32
    # round-off may move a value across a bfloat16 rounding boundary: one bfloat16 unit at most)
    with torch.no_grad():
        ref = target(input_ids=torch.tensor(seqs[2])[None], output_hidden_states=True).hidden_states
    torch.testing.assert_close(again.rows[2][3].float(), ref[3][0], atol=1e-6, rtol=2 ** -8)
    # a part of the sequences, in any order, and a part of the layers: read from the same file
    part = TargetFeatures.cached(target, [seqs[2], seqs[0]], [2], tmp_path, key={"fingerprint": "x"})
    assert (tmp_path / "features.bf16").stat().st_mtime_ns == stamp and part.index == [3]
    assert torch.equal(part.rows[0][3], again.rows[2][3]) and torch.equal(part.rows[1][3], again.rows[0][3])
    # other sequences, or another key: computed again
    other = [seqs[0], seqs[1], seqs[2][:-1]]
    TargetFeatures.cached(target, other, [0, 2], tmp_path, key={"fingerprint": "x"})
    assert json.loads((tmp_path / "features.json").read_text())["tokens"] == 25
    TargetFeatures.cached(target, other, [0, 2], tmp_path, key={"fingerprint": "y"})
    assert json.loads((tmp_path / "features.json").read_text())["fingerprint"] == "y"


def test_a_feature_record_without_the_sequence_list_is_upgraded_not_recomputed(target, tmp_path):
    g = np.random.default_rng(2)
    seqs = [g.integers(0, MASK, size=int(n)).astype(np.int64) for n in (7, 11)]
    TargetFeatures.cached(target, seqs, [1], tmp_path, key={"k": 1})
    rec = json.loads((tmp_path / "features.json").read_text())
    old = {k: v for k, v in rec.items() if k not in ("seq_sha256", "lengths")}  # as the first version wrote it
    (tmp_path / "features.json").write_text(json.dumps(old))
    stamp = (tmp_path / "features.bf16").stat().st_mtime_ns
    TargetFeatures.cached(target, seqs, [1], tmp_path, key={"k": 1})
    assert (tmp_path / "features.bf16").stat().st_mtime_ns == stamp
    assert json.loads((tmp_path / "features.json").read_text())["seq_sha256"] == rec["seq_sha256"]
    part = TargetFeatures.cached(target, seqs[1:], [1], tmp_path, key={"k": 1})
    assert (tmp_path / "features.bf16").stat().st_mtime_ns == stamp and part.rows[0][2].shape[0] == 11


def test_bench_train_runs_both_steps_on_the_same_blocks(tmp_path):
    from mfd_theory.cli import main as mfd

    assert mfd(["bench", "train", "--preset", "tiny", "--blocks-per-seq", "2,5", "--repeats", "1", "--seq-len", "40",
                "--batch", "2", "--quiet", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "bench_train_tiny.json").read_text())["data"]
    assert [r["blocks_per_seq"] for r in data["rows"]] == [2, 5]
    for r in data["rows"]:
        assert r["loss_difference"] < 1e-5 and r["loss"]["shared"] > 0
        assert r["ratio"] == pytest.approx(r["best_s"]["per_block"] / r["best_s"]["shared"])
