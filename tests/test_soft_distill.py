"""Self-distillation on the target's top-k distribution (``DrafterTrainConfig.soft_share``): the
loss against a hand-written twin, its limits (a one-hot target gives the token loss back), the
soft targets read from the features, a run that trains, and the refusals."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mfd_theory.llm import build_drafter  # noqa: E402
from mfd_theory.llm.models.testing import tiny_qwen3  # noqa: E402
from mfd_theory.llm.training.train import (  # noqa: E402
    DrafterTrainConfig, TargetFeatures, block_loss, position_weights, train_drafter,
)


def _slow_loss(log_q, labels, weights, sid, sp, share):
    """Twin for K = 1: per block, sum over positions of w_i * ((1 - s) log q(y_i) + s sum_v p(v) log q(v))."""
    total = 0.0
    B, L, _ = log_q.shape
    for b in range(B):
        for i in range(L):
            hard = float(log_q[b, i, labels[b, i]])
            soft = sum(float(sp[b, i, j]) * float(log_q[b, i, sid[b, i, j]]) for j in range(sid.shape[-1]))
            total += float(weights[i]) * ((1 - share) * hard + share * soft)
    return -total / B / float(weights.sum())


def _case(seed=0, B=3, L=4, V=9, k=3, K=None):
    g = torch.Generator().manual_seed(seed)
    shape = (B, L, V) if K is None else (B, K, L, V)
    log_q = torch.log_softmax(torch.randn(shape, generator=g), -1)
    labels = torch.randint(0, V, (B, L), generator=g)
    sid = torch.stack([torch.randperm(V, generator=g)[:k] for _ in range(B * L)]).view(B, L, k)
    sp = torch.softmax(torch.randn(B, L, k, generator=g), -1)
    return log_q, labels, sid, sp


@pytest.mark.parametrize("share", [0.0, 0.3, 1.0])
def test_soft_loss_matches_the_twin(share):
    log_q, labels, sid, sp = _case()
    w = position_weights(4, 2.0)
    loss, _ = block_loss(log_q, labels, w, soft=(sid, sp), soft_share=share)
    assert float(loss) == pytest.approx(_slow_loss(log_q, labels, w, sid, sp, share), rel=1e-5)


def test_a_one_hot_target_gives_the_token_loss_back_for_k1_and_mfd():
    for K in (None, 3):
        log_q, labels, sid, _ = _case(seed=1, K=K)
        sid = torch.cat([labels[..., None], sid[..., 1:]], -1)
        one_hot = torch.zeros(sid.shape)
        one_hot[..., 0] = 1.0
        w = position_weights(4, 3.0)
        out = log_q if K is None else (torch.log_softmax(torch.randn(3, K), -1), log_q)
        hard, _ = block_loss(out, labels, w, balance=0.0)
        soft, _ = block_loss(out, labels, w, balance=0.0, soft=(sid, one_hot), soft_share=1.0)
        assert float(soft) == pytest.approx(float(hard), rel=1e-6)
        other, _ = block_loss(out, labels, w, balance=0.0, soft=(sid, torch.softmax(torch.randn(sid.shape), -1)),
                              soft_share=1.0)
        assert float(other) != pytest.approx(float(hard), rel=1e-3)  # the soft target is read


def test_soft_targets_read_the_logits_that_predict_each_label():
    target = tiny_qwen3(vocab_size=16, seed=0)
    seqs = [np.array([1, 4, 2, 7, 3, 9, 5, 8, 6, 10]), np.array([2, 2, 5, 1, 3, 4, 12, 11])]
    f = TargetFeatures(target, seqs, [1], top_k=4)
    ids, vals = f.soft_targets(np.array([1, 0]), np.array([[2], [5]]), 3)
    with torch.no_grad():
        lg = target(torch.tensor(seqs[1])[None]).logits[0]
    v, ix = lg.topk(4, -1)
    assert torch.equal(ids[0], ix[2:5]) and torch.allclose(vals[0], v[2:5])
    with pytest.raises(ValueError, match="top_k"):
        TargetFeatures(target, seqs, [1]).soft_targets(np.array([0]), np.array([[1]]), 2)


def test_a_soft_run_trains_and_a_run_without_features_is_refused(tmp_path):
    target = tiny_qwen3(vocab_size=16, seed=0)
    cycle = np.array([1, 4, 2, 7, 3, 9, 5, 8])
    data = np.stack([np.roll(np.tile(cycle, 4), -r)[:24] for r in range(8)])
    cfg = DrafterTrainConfig(block_size=4, batch_size=4, blocks_per_seq=2, steps=30, lr=1e-2, warmup=1,
                             ckpt_every=100, soft_share=0.5, soft_top_k=4)
    d = build_drafter(target, 4, 1, seed=0, mask_token_id=15, target_layer_ids=[1], draft_vocab=list(range(12)))
    curve = train_drafter(target, d, data, 6, tmp_path / "a", cfg, progress=False)
    assert np.mean([c["loss"] for c in curve[-3:]]) < np.mean([c["loss"] for c in curve[:3]])
    assert cfg.recorded()["soft_share"] == 0.5
    assert "soft_share" not in DrafterTrainConfig().recorded()  # token runs keep their old hashes
    no_cache = DrafterTrainConfig(block_size=4, steps=2, soft_share=1.0, feature_cache_mb=0)
    with pytest.raises(ValueError, match="soft_share"):
        train_drafter(target, build_drafter(target, 4, 1, seed=0, mask_token_id=15, target_layer_ids=[1]), data, 6,
                      tmp_path / "b", no_cache, progress=False)
    with pytest.raises(ValueError, match="soft_share"):
        DrafterTrainConfig(soft_share=1.5)
