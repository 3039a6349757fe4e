"""The winner-take-all drafter objective: its loss against a slow twin, its guard against dead modes
on a toy where a mode would die, and the trainer with it (resume, determinism, what a run records)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mfd_theory.llm import build_drafter  # noqa: E402
from mfd_theory.llm.training.corpus import CorpusConfig, build_corpus  # noqa: E402
from mfd_theory.llm.training.train import (  # noqa: E402
    DrafterTrainConfig, LMConfig, LMTrainConfig, block_loss, config_hash, make_distill_data, position_weights,
    train_drafter, train_lm,
)

from reference_e2e import block_loss_wta  # noqa: E402

REL = 1e-5  # float32 sums of a dozen terms against float64 ones


def _outputs(seed: int, B: int = 5, K: int = 3, L: int = 4, V: int = 7):
    g = torch.Generator().manual_seed(seed)
    log_q = torch.log_softmax(torch.randn(B, K, L, V, generator=g), -1)
    log_pi = torch.log_softmax(torch.randn(B, K, generator=g), -1)
    labels = torch.randint(0, V, (B, L), generator=g)
    return log_pi, log_q, labels


@pytest.mark.parametrize("eps", [0.0, 0.05, 0.3])
def test_wta_loss_matches_the_slow_twin(eps):
    w = position_weights(4, 3.0)
    for seed in range(4):
        log_pi, log_q, labels = _outputs(seed)
        loss, logs = block_loss((log_pi, log_q), labels, w, objective="wta", wta_eps=eps)
        want, winners = block_loss_wta(log_pi, log_q, labels, w, eps)
        assert float(loss) == pytest.approx(want, rel=REL)
        usage = np.bincount(winners, minlength=3) / len(winners)
        assert [logs[f"usage{k}"] for k in range(3)] == pytest.approx(usage.tolist(), abs=1e-7)


def test_wta_ties_go_to_the_first_mode_and_k1_is_the_product_loss():
    w = position_weights(4, 3.0)
    log_pi, log_q, labels = _outputs(7)
    log_q = log_q.clone()
    log_q[:, 2] = log_q[:, 1]  # modes 1 and 2 tie on every block
    log_q[:, 0] = log_q[:, 0] - 5.0  # ...and beat mode 0 (no longer normalised; the loss does not care)
    loss, logs = block_loss((log_pi, log_q), labels, w, objective="wta", wta_eps=0.1)
    want, winners = block_loss_wta(log_pi, log_q, labels, w, 0.1)
    assert winners == [1] * 5 and logs["usage1"] == 1.0 and logs["usage2"] == 0.0
    assert float(loss) == pytest.approx(want, rel=REL)
    one, _ = block_loss((torch.zeros(5, 1), log_q[:, :1]), labels, w, objective="wta", wta_eps=0.1)
    prod, _ = block_loss(log_q[:, 0], labels, w)
    assert float(one) == pytest.approx(float(prod), rel=1e-6)


def test_wta_gradient_reaches_every_mode_only_with_the_guard():
    w = position_weights(4, 3.0)
    log_pi, _, labels = _outputs(3)
    for eps, dead_grad in ((0.0, False), (0.05, True)):
        logits = torch.randn(5, 3, 4, 7, generator=torch.Generator().manual_seed(1))
        logits[:, 2].scatter_(-1, labels[:, :, None], -20.0)  # mode 2 loses every block
        logits.requires_grad_(True)
        loss, _ = block_loss((log_pi, torch.log_softmax(logits, -1)), labels, w, objective="wta", wta_eps=eps)
        loss.backward()
        assert bool(logits.grad[:, 2].abs().sum() > 0) is dead_grad


def _toy_start() -> torch.Tensor:
    """Per-mode logits [K = 2, L = 4, V = 6]: mode 0 uniform, mode 1 sure of a token neither
    future holds, so mode 0 wins every block at first."""
    start = torch.zeros(2, 4, 6)
    start[1] = -4.0
    start[1, :, 5] = 4.0
    return start


def _toy_run(eps: float, steps: int = 300, seed: int = 0):
    """Two futures that disagree at every position, drawn 50/50 in batches of 16; free per-mode
    logits and a free gate, trained with the WTA objective. Returns log_q [K, L, V] and the futures."""
    futures = torch.tensor([[0, 1, 2, 3], [4, 5, 0, 1]])
    q = torch.nn.Parameter(_toy_start())
    gate = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.Adam([q, gate], lr=0.05)
    w = position_weights(4, 4.0)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        labels = futures[torch.from_numpy(rng.integers(0, 2, size=16))]
        B = len(labels)
        out = (torch.log_softmax(gate, -1)[None].expand(B, 2), torch.log_softmax(q, -1)[None].expand(B, 2, 4, 6))
        loss, _ = block_loss(out, labels, w, objective="wta", wta_eps=eps)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return torch.log_softmax(q, -1).detach(), futures


def test_the_guard_keeps_a_mode_alive_that_plain_wta_lets_die():
    lq, futures = _toy_run(0.0)
    assert torch.equal(lq[1], torch.log_softmax(_toy_start(), -1)[1])  # never won, never moved: dead
    lq, futures = _toy_run(0.05)
    assert sorted(lq.argmax(-1).tolist()) == sorted(futures.tolist())  # one mode per future


def test_bad_objective_and_eps_are_refused():
    with pytest.raises(ValueError, match="objective: must be one of mixture, wta"):
        DrafterTrainConfig(objective="min")
    with pytest.raises(ValueError, match="wta_eps"):
        DrafterTrainConfig(objective="wta", wta_eps=1.0)
    log_pi, log_q, labels = _outputs(0)
    with pytest.raises(ValueError, match="objective"):
        block_loss((log_pi, log_q), labels, position_weights(4, 3.0), objective="min")


def test_a_mixture_run_records_and_hashes_what_it_did_before_the_objective_existed():
    cfg = DrafterTrainConfig(num_modes=4)
    rec = cfg.recorded()
    assert "objective" not in rec and "wta_eps" not in rec and rec["num_modes"] == 4
    assert config_hash(cfg) == config_hash({k: v for k, v in rec.items()})
    assert config_hash(DrafterTrainConfig(num_modes=4, wta_eps=0.2)) == config_hash(cfg)  # no effect: same run
    wta = DrafterTrainConfig(num_modes=4, objective="wta")
    assert wta.recorded()["objective"] == "wta" and config_hash(wta) != config_hash(cfg)


# ------------------------------------------------------------------ the trainer with objective "wta"

ARCH = LMConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16,
                intermediate_size=64, max_position_embeddings=128)
CFG = DrafterTrainConfig(block_size=4, num_modes=2, batch_size=4, blocks_per_seq=2, steps=4, warmup=1,
                         ckpt_every=2, objective="wta", wta_eps=0.1)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    torch.set_num_threads(1)
    corpus = build_corpus(CorpusConfig(n_train=120, n_heldout=8, vocab_size=150, seed=0))
    target, _ = train_lm(corpus, tmp_path_factory.mktemp("t") / "run", ARCH,
                         LMTrainConfig(seq_len=16, batch_size=4, steps=4, warmup=1, ckpt_every=2), progress=False)
    data = make_distill_data(target, corpus.prompts(8, 6, "train"), 10, seed=0, progress=False)
    return corpus, target, data


def _fresh(setup):
    corpus, target, _ = setup
    return build_drafter(target, 4, 1, num_modes=2, seed=0, mask_token_id=corpus.mask_id)


def test_wta_training_resumes_to_the_same_curve_and_repeats_bit_for_bit(setup, tmp_path):
    _, target, data = setup
    a, b = _fresh(setup), _fresh(setup)
    full = train_drafter(target, a, data, 6, tmp_path / "a", CFG, progress=False)
    again = train_drafter(target, b, data, 6, tmp_path / "b", CFG, progress=False)
    assert [c["loss"] for c in full] == [c["loss"] for c in again]
    for (n, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), n
    assert {"usage0", "usage1", "nll_mixture", "gate_ce"} <= set(full[-1])
    part = train_drafter(target, _fresh(setup), data, 6, tmp_path / "c", CFG, progress=False, stop_after=2)
    assert len(part) == 2
    rest = train_drafter(target, _fresh(setup), data, 6, tmp_path / "c", CFG, progress=False)
    # the same batches and the same optimizer state: identical up to float32 reduction order
    np.testing.assert_allclose([c["loss"] for c in rest], [c["loss"] for c in full], rtol=1e-5)
    rec = json.loads((tmp_path / "c" / "train_config.json").read_text())["train"]
    assert rec["objective"] == "wta" and rec["wta_eps"] == 0.1


def test_the_objectives_train_differently_and_a_directory_keeps_its_own(setup, tmp_path):
    _, target, data = setup
    mix = train_drafter(target, _fresh(setup), data, 6, tmp_path / "m",
                        DrafterTrainConfig(**{**CFG.__dict__, "objective": "mixture"}), progress=False)
    wta = train_drafter(target, _fresh(setup), data, 6, tmp_path / "w", CFG, progress=False)
    assert "kl_usage" in mix[-1] and "kl_usage" not in wta[-1]
    assert [c["loss"] for c in mix] != [c["loss"] for c in wta]
    with pytest.raises(ValueError, match=r"other settings \(train\.objective: unset there, \"wta\" now"):
        train_drafter(target, _fresh(setup), data, 6, tmp_path / "m", CFG, progress=False)


def test_a_training_checkpoint_with_the_former_parameter_names_resumes(setup, tmp_path):
    """A run interrupted before the rename (train_state holding mode_embeddings / weight_readout)."""
    from safetensors.torch import load_file, save_file

    _, target, data = setup
    cfg = DrafterTrainConfig(**{**CFG.__dict__, "objective": "mixture"})
    full = train_drafter(target, _fresh(setup), data, 6, tmp_path / "a", cfg, progress=False)
    train_drafter(target, _fresh(setup), data, 6, tmp_path / "b", cfg, progress=False, stop_after=2)
    path = tmp_path / "b" / "train_state" / "weights.safetensors"
    old = {"mode_embed": "mode_embeddings", "mode_gate": "weight_readout"}
    save_file({old.get(k, k): v for k, v in load_file(str(path)).items()}, str(path))
    rest = train_drafter(target, _fresh(setup), data, 6, tmp_path / "b", cfg, progress=False)
    np.testing.assert_allclose([c["loss"] for c in rest], [c["loss"] for c in full], rtol=1e-5)
