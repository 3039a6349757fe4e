"""Training: losses against slow twins, resumable checkpoints, drafter/target compatibility."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mfd_theory.llm import build_drafter  # noqa: E402
from mfd_theory.llm.training.corpus import CorpusConfig, build_corpus  # noqa: E402
from mfd_theory.runs.experiments.e2e import load_trained_drafter  # noqa: E402
from mfd_theory.llm.training.train import (  # noqa: E402
    DrafterTrainConfig, LMConfig, LMTrainConfig, TargetFeatures, block_loss, left_align_context, load_lm,
    make_distill_data, mode_diagnostics, position_weights, train_drafter, train_lm,
)

from reference_e2e import block_loss_mixture, block_loss_product, left_align  # noqa: E402

ARCH = LMConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16,
                intermediate_size=64, max_position_embeddings=128)
TRAIN = LMTrainConfig(seq_len=16, batch_size=4, steps=6, lr=3e-3, warmup=2, ckpt_every=2, seed=0)


@pytest.fixture(scope="module")
def corpus():
    torch.set_num_threads(1)
    return build_corpus(CorpusConfig(n_train=200, n_heldout=10, vocab_size=160, seed=0))


@pytest.fixture(scope="module")
def target(corpus, tmp_path_factory):
    model, _ = train_lm(corpus, tmp_path_factory.mktemp("t") / "run", ARCH, TRAIN, progress=False)
    return model


def test_position_weights_decay():
    w = position_weights(4, 2.0)
    np.testing.assert_allclose(w.numpy(), np.exp(-np.arange(4) / 2.0), rtol=1e-6)
    with pytest.raises(ValueError, match="gamma"):
        position_weights(4, 0.0)
    with pytest.raises(ValueError, match="gamma: must be a finite number > 0"):
        position_weights(4, float("nan"))


@pytest.mark.parametrize("bad", [{"steps": 0}, {"steps": True}, {"grad_accum": 0}, {"grad_accum": 1.5}])
def test_run_training_refuses_bad_counts_before_writing(tmp_path, bad):
    from mfd_theory.llm.training.train import run_training

    model = torch.nn.Linear(2, 1)
    kw = {"steps": 2, "lr": 1e-3, "warmup": 1, "ckpt_every": 1, "config": {}, **bad}
    (name,) = bad
    with pytest.raises(ValueError, match=f"{name}: must be an integer >= 1"):
        run_training(tmp_path / "run", model, lambda step: (model.weight.sum(), {}), progress=False, **kw)
    assert not (tmp_path / "run").exists()


def test_distill_data_refuses_a_bad_length(target):
    with pytest.raises(ValueError, match="gen_len: must be an integer >= 1, got 0"):
        make_distill_data(target, np.zeros((1, 2), dtype=np.int64), 0, progress=False)


def test_product_loss_matches_reference():
    g = torch.Generator().manual_seed(0)
    lp = torch.log_softmax(torch.randn(3, 4, 7, generator=g), -1)
    labels = torch.randint(0, 7, (3, 4), generator=g)
    w = position_weights(4, 3.0)
    loss, _ = block_loss(lp, labels, w)
    # float32 sums of a dozen terms: 1e-5 relative.
    assert float(loss) == pytest.approx(block_loss_product(lp, labels, w), rel=1e-5)


def test_mixture_loss_matches_reference_and_reduces_to_product_at_k1():
    g = torch.Generator().manual_seed(1)
    log_q = torch.log_softmax(torch.randn(3, 2, 4, 7, generator=g), -1)
    log_pi = torch.log_softmax(torch.randn(3, 2, generator=g), -1)
    labels = torch.randint(0, 7, (3, 4), generator=g)
    w = position_weights(4, 3.0)
    loss, logs = block_loss((log_pi, log_q), labels, w, balance=0.0)
    assert float(loss) == pytest.approx(block_loss_mixture(log_pi, log_q, labels, w), rel=1e-5)
    assert logs["usage0"] + logs["usage1"] == pytest.approx(1.0, abs=1e-6)
    one, _ = block_loss((torch.zeros(3, 1), log_q[:, :1]), labels, w)
    prod, _ = block_loss(log_q[:, 0], labels, w)
    assert float(one) == pytest.approx(float(prod), rel=1e-6)


def test_left_align_matches_reference():
    ctx = torch.randn(3, 6, 2)
    t = torch.tensor([2, 5, 3])
    got, valid = left_align_context(ctx, t)
    want, want_valid = left_align(ctx, t)
    assert torch.equal(valid, want_valid)
    assert torch.equal(got[valid], want[want_valid])


def test_interrupted_training_resumes_to_the_same_curve(corpus, tmp_path):
    full, curve_full = train_lm(corpus, tmp_path / "full", ARCH, TRAIN, progress=False)
    _, part = train_lm(corpus, tmp_path / "cut", ARCH, TRAIN, progress=False, stop_after=3)
    assert len(part) == 3 and (tmp_path / "cut" / "train_state" / "state.json").is_file()
    resumed, curve = train_lm(corpus, tmp_path / "cut", ARCH, TRAIN, progress=False)
    assert len(curve) == TRAIN.steps
    # Same batches, restored optimizer: the curves agree up to float noise of AdamW's update.
    np.testing.assert_allclose([c["loss"] for c in curve], [c["loss"] for c in curve_full], rtol=1e-4)
    assert (tmp_path / "cut" / "model" / "config.json").is_file()
    assert not (tmp_path / "cut" / "train_state").exists()
    # A finished run is loaded, not retrained.
    again, curve2 = train_lm(corpus, tmp_path / "cut", ARCH, TRAIN, progress=False)
    assert curve2 == json.loads((tmp_path / "cut" / "loss_curve.json").read_text())


def test_corrupt_training_checkpoint_is_a_clear_error(corpus, tmp_path):
    train_lm(corpus, tmp_path, ARCH, TRAIN, progress=False, stop_after=2)
    (tmp_path / "train_state" / "weights.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="corrupt training checkpoint"):
        train_lm(corpus, tmp_path, ARCH, TRAIN, progress=False)


def test_run_dir_with_another_config_is_refused(corpus, tmp_path):
    train_lm(corpus, tmp_path, ARCH, TRAIN, progress=False, stop_after=1)
    other = LMTrainConfig(**{**TRAIN.__dict__, "lr": 1e-3})
    with pytest.raises(ValueError, match=r"other settings \(train\.lr: 0\.003 there, 0\.001 now\)"):
        train_lm(corpus, tmp_path, ARCH, other, progress=False)


def test_missing_model_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="no model checkpoint"):
        load_lm(tmp_path)


def test_corrupt_model_checkpoint(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="corrupt model checkpoint"):
        load_lm(tmp_path)


def test_distill_data_extends_prompts(corpus, target):
    prompts = corpus.prompts(3, 6, "train")
    data = make_distill_data(target, prompts, 5, temperature=1.0, seed=0, progress=False)
    assert data.shape == (3, 11)
    np.testing.assert_array_equal(data[:, :6], prompts)
    np.testing.assert_array_equal(data, make_distill_data(target, prompts, 5, 1.0, seed=0, progress=False))


def test_drafter_training_saves_dflash_checkpoint_and_checks_target(corpus, target, tmp_path):
    data = make_distill_data(target, corpus.prompts(8, 6, "train"), 10, seed=0, progress=False)
    cfg = DrafterTrainConfig(block_size=4, num_modes=2, batch_size=4, blocks_per_seq=2, steps=3,
                             warmup=1, ckpt_every=2)
    drafter = build_drafter(target, 4, 1, num_modes=2, seed=0, mask_token_id=corpus.mask_id)
    curve = train_drafter(target, drafter, data, 6, tmp_path, cfg, progress=False)
    assert len(curve) == 3 and "usage1" in curve[-1]
    cfg_json = json.loads((tmp_path / "drafter" / "config.json").read_text())
    assert cfg_json["dflash_config"]["mask_token_id"] == corpus.mask_id
    back = load_trained_drafter(tmp_path / "drafter", target)
    assert back.num_modes == 2
    diag = mode_diagnostics(target, back, data, 6, n_blocks=8)
    assert sum(diag["pi_mean"]) == pytest.approx(1.0, abs=1e-5)
    assert 0.5 <= diag["resp_max_mean"] <= 1.0
    assert len(diag["mode_tv_per_position"]) == 3
    other, _ = train_lm(corpus, tmp_path / "other", ARCH,
                        LMTrainConfig(**{**TRAIN.__dict__, "seed": 1, "steps": 1}), progress=False)
    with pytest.raises(ValueError, match="another target"):
        load_trained_drafter(tmp_path / "drafter", other)


ROUNDOFF_F32 = 1e-5  # the same float32 forward over a longer input: other blocking, other last bits


def test_precomputed_features_equal_the_per_step_forward(corpus, target):
    """The slow twin is the per-step forward over the batch's first max(t) tokens."""
    data = make_distill_data(target, corpus.prompts(12, 6, "train"), 10, seed=0, progress=False)
    seqs = list(np.asarray(data))
    feats = TargetFeatures(target, seqs, [0, 1], chunk=5)
    assert feats.index == [1, 2]
    rows, width = np.array([3, 0, 7, 3]), 9
    ids = torch.tensor(np.stack([seqs[j][:width] for j in rows]))
    with torch.no_grad():
        ref = target(input_ids=ids, output_hidden_states=True).hidden_states
    got = feats.batch(rows, width)
    assert len(got) == len(ref) and [i for i, g in enumerate(got) if g is not None] == [1, 2]
    for i in (1, 2):
        assert torch.allclose(got[i], ref[i], atol=ROUNDOFF_F32, rtol=ROUNDOFF_F32)
    assert TargetFeatures.size_mb(target, seqs, [0, 1]) == pytest.approx(len(seqs) * 16 * 32 * 2 * 4 / 2 ** 20)
    # without soft targets the base model runs without its head: the very same hidden states
    with_head = TargetFeatures(target, seqs, [0, 1], chunk=5, top_k=2)
    assert all(torch.equal(a[i], b[i]) for a, b in zip(feats.rows, with_head.rows) for i in (1, 2))


def test_drafter_training_records_how_its_features_were_made(corpus, target, tmp_path):
    data = make_distill_data(target, corpus.prompts(8, 6, "train"), 10, seed=0, progress=False)
    curves = {}
    for cap in (0, 64):
        cfg = DrafterTrainConfig(block_size=4, batch_size=4, blocks_per_seq=2, steps=3, warmup=1, ckpt_every=2,
                                 feature_cache_mb=cap)
        drafter = build_drafter(target, 4, 1, seed=0, mask_token_id=corpus.mask_id)
        curves[cap] = train_drafter(target, drafter, data, 6, tmp_path / str(cap), cfg, progress=False)
        rec = json.loads((tmp_path / str(cap) / "train_config.json").read_text())
        assert rec["target_features"] == ("per_step" if cap == 0 else "precomputed")
        assert "feature_cache_mb" not in rec["train"]
    # the same training either way, up to the forward's last bits
    for a, b in zip(curves[0], curves[64]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)
    with pytest.raises(ValueError, match="feature_cache_mb"):
        DrafterTrainConfig(feature_cache_mb=-1)


def test_missing_drafter_checkpoint(target, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_trained_drafter(tmp_path / "nope", target)


def test_drafter_prompt_len_validated(corpus, target, tmp_path):
    drafter = build_drafter(target, 4, 1, mask_token_id=corpus.mask_id)
    data = np.zeros((2, 6), dtype=np.int64)
    with pytest.raises(ValueError, match="prompt_len"):
        train_drafter(target, drafter, data, 5, tmp_path, DrafterTrainConfig(block_size=4), progress=False)
