"""Held-out perplexity (mfd_theory.llm.measure.perplexity) against a token-by-token twin."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_helpers import tiny_qwen3  # noqa: E402

from mfd_theory.llm.measure.perplexity import perplexity  # noqa: E402


def test_perplexity_is_the_exp_of_the_mean_next_token_loss_over_its_windows():
    model = tiny_qwen3(vocab_size=32, hidden_size=16, num_layers=1, seed=2)
    stream = np.random.default_rng(0).integers(0, 32, size=200)
    got = perplexity(model, stream, seq_len=12, windows=5, seed=3, batch=2)
    starts = np.random.default_rng([3, 7]).integers(0, len(stream) - 12, size=5)  # the windows it documents
    losses = []
    with torch.no_grad():
        for s in starts:
            w = stream[s: s + 12]
            logp = torch.log_softmax(model(torch.from_numpy(w[None])).logits[0].double(), dim=-1)
            losses.append(-sum(float(logp[i, w[i + 1]]) for i in range(11)) / 11)
    assert got["loss"] == pytest.approx(np.mean(losses), rel=1e-5)
    assert got["perplexity"] == pytest.approx(math.exp(np.mean(losses)), rel=1e-5)
    assert got["loss_se"] == pytest.approx(np.std(losses, ddof=1) / math.sqrt(5), rel=1e-4)
    assert perplexity(model, stream, 12, 1)["loss_se"] is None  # one window: no spread
    with pytest.raises(ValueError, match="stream"):
        perplexity(model, stream[:10], seq_len=12, windows=2)
