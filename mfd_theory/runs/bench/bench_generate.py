"""The torch half of ``mfd bench generate`` (:mod:`mfd_theory.commands.bench.bench_generate`):
batched plain generation as it was (``_generate_batch_baseline``, kept here as the benchmark's
"before") against :func:`~mfd_theory.llm.decoding.generate_batch.generate_batch` ("after"), on the
same target and prompts in one process.

The baseline is the algorithm ``generate_batch`` had until issue 53: one HF ``DynamicCache`` whose
rows are the sequences, grown by concatenation every step (and re-padded, cut and concatenated as
rows leave and join), the cut distribution built over the whole sorted vocabulary (top-k by a
mask, then ``sampling_probs``' full sort for top-p), and one ``torch.multinomial`` per row with the
row's own ``torch.Generator``. Its tokens are those of ``speculative_generate`` before the keyed
draws: greedy rows equal the new path's, sampled rows come from the same distribution but not the
same draws.
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from mfd_theory.configs.options import keeps_torch_threads
from mfd_theory.llm.decoding.generate_batch import generate_batch
from mfd_theory.llm.decoding.round import batch_prompts, eos_set, prompt_ids
from mfd_theory.llm.decoding.sampling import sampling_probs
from mfd_theory.llm.models.target import TargetModel, load_local_target
from mfd_theory.numerics import numerics_provenance

__all__ = ["INSTRUCTIONS", "measure", "tiny_target"]

#: short instructions for a chat target, cycled (with a number) when more prompts are asked for
INSTRUCTIONS = (
    "Write a Python function that reverses a string.",
    "Explain what a hash map is in two sentences.",
    "Write a SQL query that counts the rows of a table named users.",
    "What does the `yield` keyword do in Python?",
    "Write a bash one-liner that lists the ten largest files in a directory.",
    "Give an example of a list comprehension that squares even numbers.",
    "How do I read a JSON file in Python?",
    "Write a function that checks whether a number is prime.",
    "What is the difference between a process and a thread?",
    "Write a JavaScript function that debounces another function.",
    "Explain big-O notation briefly.",
    "Write a Python class for a stack with push, pop and peek.",
    "How do I merge two dictionaries in Python?",
    "Write a regular expression that matches an email address.",
    "What is a race condition?",
    "Write a recursive function for the Fibonacci numbers, then an iterative one.",
)


# ------------------------------------------------------------------------------ the baseline
def _old_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """The old cut distribution [B, V]: top-k by masking, then ``sampling_probs`` (a full sort for top-p)."""
    z = logits.float()
    if 0 < top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    return sampling_probs(z, temperature, top_p)


@dataclass
class _OldRow:
    index: int
    gen: torch.Generator | None
    position: int
    tokens: list = field(default_factory=list)


def _map_kv(cache, fn) -> None:
    for layer in cache.layers:
        layer.keys, layer.values = fn(layer.keys), fn(layer.values)


def _left_pad(cache, mask: torch.Tensor, width: int) -> torch.Tensor:
    extra = width - mask.shape[1]
    if extra > 0:
        _map_kv(cache, lambda x: F.pad(x, (0, 0, extra, 0)))
        mask = F.pad(mask, (extra, 0))
    return mask


class _OldBatch:
    """The old rows: one ``DynamicCache`` [B, kvh, L, d] per layer, left padded, its 2D mask [B, L]."""

    def __init__(self, target: TargetModel):
        self.target, self.rows, self.cache, self.mask, self.last, self.incoming = target, [], None, None, None, None

    def prefill(self, prompts: list) -> torch.Tensor:
        dev, width = self.target.device, max(len(p) for p in prompts)
        ids = torch.zeros((len(prompts), width), dtype=torch.int64, device=dev)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = p.to(dev)
            mask[i, width - len(p):] = 1
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        cache = self.target.new_cache()
        out = self.target.forward(ids, positions, mask, cache, hidden=False, last_only=True)
        self.incoming = (cache, mask)
        return out.logits[:, -1].float()

    def join(self, rows: list, last: list[int], keep: list[int]) -> None:
        cache, mask = self.incoming
        self.incoming = None
        if not keep:
            return
        if len(keep) < mask.shape[0]:
            idx = torch.tensor(keep, device=mask.device)
            _map_kv(cache, lambda x: x[idx])
            mask = mask[idx]
        new_last = torch.tensor([last[j] for j in keep], device=mask.device)
        if not self.rows:
            self.cache, self.mask, self.last = cache, mask, new_last
        else:
            width = max(mask.shape[1], self.mask.shape[1])
            self.mask = torch.cat([_left_pad(self.cache, self.mask, width), _left_pad(cache, mask, width)])
            for mine, theirs in zip(self.cache.layers, cache.layers):
                mine.keys = torch.cat([mine.keys, theirs.keys])
                mine.values = torch.cat([mine.values, theirs.values])
            self.last = torch.cat([self.last, new_last])
        self.rows.extend(rows[j] for j in keep)

    def step(self) -> torch.Tensor:
        dev = self.target.device
        positions = torch.tensor([[r.position] for r in self.rows], device=dev)
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=1)
        out = self.target.forward(self.last[:, None], positions, self.mask, self.cache, hidden=False)
        for r in self.rows:
            r.position += 1
        return out.logits[:, -1].float()

    def keep(self, keep: list[int], last: list[int]) -> None:
        if not keep:
            self.rows, self.cache, self.mask, self.last = [], None, None, None
            return
        if len(keep) < len(self.rows):
            idx = torch.tensor(keep, device=self.mask.device)
            _map_kv(self.cache, lambda x: x[idx])
            self.mask = self.mask[idx]
            self.rows = [self.rows[j] for j in keep]
        self.last = torch.tensor([last[j] for j in keep], device=self.mask.device)
        start = int(torch.nonzero(self.mask.any(dim=0))[0])
        if start:
            _map_kv(self.cache, lambda x: x[:, :, start:])
            self.mask = self.mask[:, start:]


@torch.no_grad()
def _generate_batch_baseline(target: TargetModel, prompts, max_new_tokens: int, *, temperature: float = 0.0,
                             seeds=None, top_k: int = 0, top_p: float = 1.0, batch: int = 16,
                             eos_token_id=None) -> list[list[int]]:
    """``generate_batch`` as it was before issue 53 (see the module docstring); arguments already valid."""
    rows_in = [prompt_ids(r, target, max_new_tokens) for r in batch_prompts(prompts)]
    eos = eos_set(target, eos_token_id)
    out: list = [None] * len(rows_in)

    def draw(logits, rows):
        if temperature == 0:
            return torch.argmax(logits, dim=-1).tolist()
        probs = _old_probs(logits, temperature, top_k, top_p).cpu()
        return [int(torch.multinomial(probs[i], 1, generator=r.gen)) for i, r in enumerate(rows)]

    def emit(rows, tokens):
        going = []
        for j, (r, tok) in enumerate(zip(rows, tokens)):
            r.tokens.append(tok)
            if tok not in eos and len(r.tokens) < max_new_tokens:
                going.append(j)
            else:
                out[r.index] = r.tokens
        return going

    waiting, state = deque(range(len(rows_in))), _OldBatch(target)
    while waiting or state.rows:
        if waiting and len(state.rows) < batch:
            group = [waiting.popleft() for _ in range(min(batch - len(state.rows), len(waiting)))]
            rows = [_OldRow(i, None if seeds is None else torch.Generator().manual_seed(int(seeds[i])),
                            len(rows_in[i])) for i in group]
            tokens = draw(state.prefill([rows_in[i] for i in group]), rows)
            state.join(rows, tokens, emit(rows, tokens))
        if state.rows:
            tokens = draw(state.step(), state.rows)
            state.keep(emit(state.rows, tokens), tokens)
    return out


# ------------------------------------------------------------------------------ the measurement
def tiny_target(seed: int = 0):
    """A random tiny Qwen3 (4 layers, width 128, 512 tokens, no EOS) for a quick run."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=1024,
                      initializer_range=0.2, tie_word_embeddings=False, eos_token_id=None, pad_token_id=None,
                      bos_token_id=None, use_sliding_window=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = None
    return model


def _prompts(cfg, tok) -> list[list[int]]:
    if tok is None:  # the tiny target: random token ids of 8 to 48 tokens, all lengths different
        g = torch.Generator().manual_seed(cfg.seed)
        return [torch.randint(0, 512, (8 + (7 * i) % 41,), generator=g).tolist() for i in range(cfg.prompts)]
    from mfd_theory.llm.training.prompts import render

    n = len(INSTRUCTIONS)
    return [render([("user", INSTRUCTIONS[i % n] + ("" if i < n else f" ({i // n + 1})"))], tok)
            for i in range(cfg.prompts)]


def _load(cfg):
    """(HF model, tokenizer or None, what it is)."""
    if cfg.target == "tiny":
        return tiny_target(cfg.seed), None, "a random tiny Qwen3 (4 layers, width 128, 512 tokens)"
    model, tok = load_local_target(cfg.target, "cpu", cfg.dtype)
    return model, tok, cfg.target


class _ForwardClock:
    """Calls of the HF model's forward and the seconds spent inside them (hooks on its top module;
    the cache's writes, which run inside, included)."""

    def __init__(self, model):
        self.calls, self.seconds, self._t0 = 0, 0.0, None
        self._hooks = [model.register_forward_pre_hook(self._start), model.register_forward_hook(self._stop)]

    def _start(self, *_):
        self._t0 = time.perf_counter()

    def _stop(self, *_):
        self.calls += 1
        self.seconds += time.perf_counter() - self._t0

    def reset(self) -> None:
        self.calls, self.seconds = 0, 0.0

    def remove(self) -> None:
        for h in self._hooks:
            h.remove()


def _load_avg() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


@keeps_torch_threads
def measure(cfg, progress: bool = True) -> dict:
    """Both paths on the same prompts, ``repeats`` times interleaved (old, new, old, new, ...): each
    one's tokens, seconds, tokens/s, and model forwards (count and seconds inside them) per repeat,
    the ratio of the fastest of each, whether greedy rows agree, and the host."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    model, tok, what = _load(cfg)
    load_s = time.perf_counter() - t0
    target = TargetModel(model)
    prompts = _prompts(cfg, tok)
    seeds = [cfg.seed * 1_000_003 + i for i in range(len(prompts))]
    kw = dict(temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p, batch=cfg.batch)
    paths = {"before": _generate_batch_baseline, "after": generate_batch}
    for fn in paths.values():  # warm-up: two short prompts
        fn(target, prompts[:2], 2, seeds=seeds[:2], **{**kw, "batch": 2})
    runs = {name: [] for name in paths}
    outs = {}
    clock = _ForwardClock(model)
    load_before = _load_avg()
    try:
        for rep in range(cfg.repeats):
            for name, fn in paths.items():
                if progress:
                    print(f"repeat {rep + 1}/{cfg.repeats}: {name} ...", flush=True)
                clock.reset()
                t0 = time.perf_counter()
                rows = fn(target, prompts, cfg.max_new_tokens, seeds=seeds, **kw)
                dt = time.perf_counter() - t0
                n = sum(map(len, rows))
                runs[name].append({"tokens": n, "seconds": dt, "tokens_per_s": n / dt, "forwards": clock.calls,
                                   "forward_seconds": clock.seconds})
                outs[name] = rows
    finally:
        clock.remove()
    load_after = _load_avg()
    differ = [i for i, (a, b) in enumerate(zip(outs["before"], outs["after"])) if a != b]
    best = {name: max(r["tokens_per_s"] for r in rs) for name, rs in runs.items()}
    return {
        "target": what, "load_s": load_s, "prompts": len(prompts), "prompt_tokens": [len(p) for p in prompts],
        "runs": runs, "best_tokens_per_s": best, "ratio": best["after"] / best["before"],
        "ratios": [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(runs["after"], runs["before"])],
        "greedy": cfg.temperature == 0, "rows_that_differ": differ,
        "host": {**numerics_provenance(), "cpu_flags": _isa_flags(), "cores": os.cpu_count()},
        "load_before": load_before, "load_after": load_after,
    }


def _isa_flags() -> list[str]:
    """The vector ISA flags /proc/cpuinfo lists (AVX, AVX-512, AMX, FMA), sorted."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return sorted(x for x in line.split(":", 1)[1].split()
                                  if x.startswith(("avx", "amx", "fma", "f16c")))
    except OSError:
        pass
    return []
