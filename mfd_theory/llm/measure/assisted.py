"""An outside baseline: Hugging Face's own assisted generation with a small draft LM.

``target.generate(..., assistant_model=draft_lm)`` timed against the same target's plain
``generate``, per temperature, on the same prompts, forced to ``max_new_tokens`` (EOS does not stop
it) as in our own loop. Design: docs/results.md ("End to end on one machine").
"""

from __future__ import annotations

import contextlib
import copy
import logging
import re
import time
import warnings

import numpy as np
import torch

__all__ = ["hf_assisted_baseline"]


# What transformers says about its own internals while it runs assisted decoding (the assistant's
# generate call inside the candidate generator mixes a generation config with keyword arguments):
# deprecation notices a user of this baseline can do nothing about.
_KNOWN_DEPRECATIONS = ("Passing `generation_config` together with generation-related arguments",)
_TRANSFORMERS_LOGGERS = ("transformers.generation.utils", "transformers.generation.candidate_generator")


class _DropKnown(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(k in msg for k in _KNOWN_DEPRECATIONS)


@contextlib.contextmanager
def _quiet_known_deprecations():
    """Drop :data:`_KNOWN_DEPRECATIONS` (logged or warned) inside the block; everything else passes."""
    drop = _DropKnown()
    loggers = [logging.getLogger(n) for n in _TRANSFORMERS_LOGGERS]
    for lg in loggers:
        lg.addFilter(drop)
    try:
        with warnings.catch_warnings():
            for k in _KNOWN_DEPRECATIONS:
                warnings.filterwarnings("ignore", message=".*" + re.escape(k))
            yield
    finally:
        for lg in loggers:
            lg.removeFilter(drop)


def _generation_config(model, temperature: float, max_new_tokens: int):
    gc = copy.deepcopy(model.generation_config)
    gc.max_new_tokens = int(max_new_tokens)
    gc.min_new_tokens = int(max_new_tokens)
    gc.do_sample = temperature > 0
    gc.temperature = float(temperature) if temperature > 0 else 1.0
    gc.top_k = 0 if temperature > 0 else None
    gc.top_p = 1.0
    return gc


@torch.no_grad()
def hf_assisted_baseline(target, draft_lm, prompts: np.ndarray, max_new_tokens: int,
                         temperatures=(0.0,), seed: int = 0) -> list[dict]:
    """Rows ``{method: "hf_ar" | "hf_assisted", temperature, tokens, seconds, tokens_per_s, speedup}``.

    ``speedup`` is hf_ar's time per token over the row's (so 1.0 for hf_ar). ``target`` and
    ``draft_lm`` are HF causal LMs sharing a vocabulary; ``prompts`` int64 [n, P].
    """
    prompts = np.asarray(prompts, dtype=np.int64)
    if prompts.ndim != 2:
        raise ValueError(f"prompts: need int array [n, P], got shape {prompts.shape}")
    if target.config.vocab_size != draft_lm.config.vocab_size:
        raise ValueError("draft_lm: vocabulary differs from the target's")
    target.eval()
    draft_lm.eval()
    dev = next(target.parameters()).device

    def clock() -> float:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        return time.perf_counter()

    rows = []
    with _quiet_known_deprecations():
        for temp in temperatures:
            gc = _generation_config(target, temp, max_new_tokens)
            warm = torch.from_numpy(prompts[:1]).to(dev)
            target.generate(warm, generation_config=gc, attention_mask=torch.ones_like(warm))
            target.generate(warm, generation_config=gc, assistant_model=draft_lm,
                            attention_mask=torch.ones_like(warm))
            # Prompts outer, methods inner: both are timed interleaved, so drift hits them alike.
            per = {"hf_ar": [0, 0.0], "hf_assisted": [0, 0.0]}
            for i, p in enumerate(prompts):
                ids = torch.from_numpy(p[None]).to(dev)                    # [1, P]
                for name, extra in (("hf_ar", {}), ("hf_assisted", {"assistant_model": draft_lm})):
                    torch.manual_seed(seed + i)
                    t0 = clock()
                    out = target.generate(ids, generation_config=gc, attention_mask=torch.ones_like(ids),
                                          **extra)
                    per[name][1] += clock() - t0
                    per[name][0] += int(out.shape[1] - ids.shape[1])
            ar_tpt = per["hf_ar"][1] / max(1, per["hf_ar"][0])
            for name, (tokens, secs) in per.items():
                rows.append({"method": name, "temperature": float(temp), "tokens": tokens, "seconds": secs,
                             "tokens_per_s": tokens / secs if secs > 0 else float("nan"),
                             "speedup": ar_tpt / (secs / max(1, tokens)) if secs > 0 else float("nan")})
    return rows
