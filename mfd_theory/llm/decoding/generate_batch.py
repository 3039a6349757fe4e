"""Plain autoregressive generation of many prompts at once from a Hugging Face causal LM.

:func:`generate_batch` keeps up to ``batch`` sequences in one forward per new token. Prompts are
left padded to a common width with a 2D 0/1 attention mask (Hugging Face builds the additive mask
from it; no 4D bool mask is ever passed), every row gets its own position ids (0 at its first real
token), and all rows share one ``DynamicCache`` whose batch rows are the sequences'. A row stops at
its own EOS or at ``max_new_tokens``; finished rows leave the cache at once and waiting prompts take
their places (prefilled as a group, then joined to the cache, the narrower side left padded), so
the batch stays full while prompts remain. Columns that every remaining row masks are cut away.

Sampling is per row: prompt i draws with its own CPU ``torch.Generator`` seeded ``seeds[i]``, one
draw per token, from the same distribution and in the same way as
:class:`~mfd_theory.llm.decoding.sampling.Sampler` (so with ``top_k = 0`` a row's tokens are the
ones ``speculative_generate(..., "ar", seed=seeds[i])`` gives). A row's tokens therefore do not
depend on ``batch``, on the other prompts or on their order, up to the float round-off of batched
and padded matrix products, which can move a logit in its last bits and so, rarely, flip an argmax
near a tie or a draw that lands on a boundary between two tokens.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from mfd_theory.validation import check_int, check_real, is_real

from mfd_theory.llm.decoding.round import batch_prompts, eos_set, prompt_ids
from mfd_theory.llm.decoding.sampling import MIN_TEMPERATURE, sampling_probs
from mfd_theory.llm.models.target import TargetModel

__all__ = ["can_batch", "generate_batch", "generation_probs"]


def generation_probs(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """The distribution a row samples from: the logits cut to their ``top_k`` largest (0: all;
    ties with the k-th kept), then :func:`~mfd_theory.llm.decoding.sampling.sampling_probs`
    (softmax at ``temperature``, cut to the ``top_p`` nucleus). ``logits``: [..., V]."""
    z = logits.float()
    if 0 < top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    return sampling_probs(z, temperature, top_p)


def can_batch(model) -> bool:
    """Whether ``model`` (an HF causal LM or a TargetModel) takes ``batch`` > 1: full attention
    only. Padding a recurrent (Gated DeltaNet) layer's input is not undone by a mask."""
    target = model if isinstance(model, TargetModel) else TargetModel(model, check_mask=False)
    return target.hybrid is None


# ------------------------------------------------------------------------------------- checks
@dataclass(frozen=True)
class _Settings:
    prompts: list  # token id tensors [T_i], checked
    max_new_tokens: int
    temperature: float
    top_k: int
    top_p: float
    seeds: list | None  # one per prompt, None when greedy
    eos: frozenset
    batch: int


def _check_temperature(temperature) -> float:
    if not is_real(temperature) or temperature < 0 or 0 < temperature < MIN_TEMPERATURE:
        raise ValueError(f"temperature: must be 0 (greedy) or a finite number >= {MIN_TEMPERATURE:.3g}, "
                         f"got {temperature!r}")
    return float(temperature)


def _check_seeds(seeds, n: int, greedy: bool) -> list | None:
    if seeds is None:
        if greedy:
            return None
        raise ValueError(f"seeds: sampling needs one seed per prompt ({n}), got None")
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__len__"):
        raise ValueError(f"seeds: expected a list of {n} integers, got {type(seeds).__name__}")
    seeds = list(seeds)
    if len(seeds) != n:
        raise ValueError(f"seeds: expected one per prompt ({n}), got {len(seeds)}")
    return [check_int(f"seeds[{i}]", s, 0, 2 ** 64 - 1, integral_floats=True) for i, s in enumerate(seeds)]


def _check_prompts(prompts, target: TargetModel, max_new_tokens: int) -> list:
    rows = batch_prompts(prompts)
    out = []
    for i, row in enumerate(rows):
        try:
            out.append(prompt_ids(row, target, max_new_tokens))
        except ValueError as exc:
            raise ValueError(f"prompts[{i}]: {exc}") from None
    return out


def _settings(target: TargetModel, prompts, max_new_tokens, temperature, seeds, eos_token_id, top_k, top_p,
              batch) -> _Settings:
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, 1, integral_floats=True)
    temperature = _check_temperature(temperature)
    top_k = check_int("top_k", top_k, 0, integral_floats=True)
    top_p = check_real("top_p", top_p, 0, 1, low_open=True)
    batch = check_int("batch", batch, 1, integral_floats=True)
    if batch > 1 and target.hybrid is not None:
        raise ValueError(f"batch: must be 1 for a target with recurrent (Gated DeltaNet) layers, got {batch} "
                         "(left padding would run through their state)")
    rows = _check_prompts(prompts, target, max_new_tokens)
    seeds = _check_seeds(seeds, len(rows), temperature == 0)
    return _Settings(rows, max_new_tokens, temperature, top_k, top_p, seeds, eos_set(target, eos_token_id), batch)


# ------------------------------------------------------------------------------------- state
@dataclass
class _Row:
    index: int  # the prompt's place in the input
    gen: torch.Generator | None
    position: int  # the position id the next fed token takes
    tokens: list = field(default_factory=list)


def _map_kv(cache, fn) -> None:
    """Apply ``fn`` to every layer's keys and values [B, H, L, D]."""
    for layer in cache.layers:
        layer.keys, layer.values = fn(layer.keys), fn(layer.values)


def _left_pad(cache, mask: torch.Tensor, width: int) -> torch.Tensor:
    """Widen ``cache`` and ``mask`` [B, L] to ``width`` columns with masked columns on the left."""
    extra = width - mask.shape[1]
    if extra > 0:
        _map_kv(cache, lambda x: F.pad(x, (0, 0, extra, 0)))
        mask = F.pad(mask, (extra, 0))
    return mask


class _Batch:
    """The rows being generated: their shared cache, its mask [B, L] and each row's state."""

    def __init__(self, target: TargetModel):
        self.target = target
        self.rows: list[_Row] = []
        self.cache = None
        self.mask = None
        self.last = None  # [B] the tokens to feed next
        self.incoming = None  # a prefilled group's (cache, mask), until it joins

    def prefill(self, prompts: list) -> torch.Tensor:
        """Prefill ``prompts`` (the group's rows, left padded) into a new cache, kept aside in
        ``self.incoming``; returns their next-token logits [n, V] float32."""
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

    def join(self, rows: list[_Row], last: list[int], keep: list[int]) -> None:
        """Add the prefilled group's rows ``keep`` (their places in the group) with their tokens to feed."""
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
        """Feed every row's last token; returns the next-token logits [B, V] float32."""
        dev = self.target.device
        positions = torch.tensor([[r.position] for r in self.rows], device=dev)
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=1)
        out = self.target.forward(self.last[:, None], positions, self.mask, self.cache, hidden=False)
        for r in self.rows:
            r.position += 1
        return out.logits[:, -1].float()

    def keep(self, keep: list[int], last: list[int]) -> None:
        """Keep rows ``keep`` (their places in the batch), fed ``last`` next; drop the others."""
        if not keep:
            self.rows, self.cache, self.mask, self.last = [], None, None, None
            return
        if len(keep) < len(self.rows):
            idx = torch.tensor(keep, device=self.mask.device)
            _map_kv(self.cache, lambda x: x[idx])
            self.mask = self.mask[idx]
            self.rows = [self.rows[j] for j in keep]
        self.last = torch.tensor([last[j] for j in keep], device=self.mask.device)
        self._trim()

    def _trim(self) -> None:
        """Cut the leading columns no remaining row attends to."""
        start = int(torch.nonzero(self.mask.any(dim=0))[0])
        if start:
            _map_kv(self.cache, lambda x: x[:, :, start:])
            self.mask = self.mask[:, start:]


# ------------------------------------------------------------------------------------- the loop
def _draw(s: _Settings, logits: torch.Tensor, rows: list[_Row]) -> list[int]:
    """One token per row: the argmax when greedy, else a draw with the row's own generator."""
    if s.temperature == 0:
        return torch.argmax(logits, dim=-1).tolist()
    probs = generation_probs(logits, s.temperature, s.top_k, s.top_p).cpu()
    return [int(torch.multinomial(probs[i], 1, generator=r.gen)) for i, r in enumerate(rows)]


def _emit(s: _Settings, rows: list[_Row], tokens: list[int]) -> list[int]:
    """Append each row's token; returns the places of the rows that go on."""
    going = []
    for j, (r, tok) in enumerate(zip(rows, tokens)):
        r.tokens.append(tok)
        if tok not in s.eos and len(r.tokens) < s.max_new_tokens:
            going.append(j)
    return going


def _new_row(s: _Settings, i: int) -> _Row:
    gen = None if s.seeds is None else torch.Generator().manual_seed(s.seeds[i])
    return _Row(index=i, gen=gen, position=len(s.prompts[i]))


@torch.no_grad()
def generate_batch(model, prompts, max_new_tokens: int, *, temperature: float = 0.0, seeds=None,
                   eos_token_id=None, top_k: int = 0, top_p: float = 1.0, batch: int = 16,
                   on_finish: Callable[[int], None] | None = None, progress: bool = False) -> list[list[int]]:
    """Up to ``max_new_tokens`` new tokens for every prompt, ``batch`` sequences per forward;
    returns one token list per prompt, in prompt order (ending with the EOS token when one
    stopped it).

    ``model``: an HF causal LM (full attention; a Gated DeltaNet hybrid only with ``batch`` = 1)
    or a :class:`~mfd_theory.llm.models.target.TargetModel`, whose own cache is left alone.
    ``prompts``: a list of token id sequences (or a 2D tensor, or a tokenizer's batch output,
    as :func:`~mfd_theory.llm.decoding.round.batch_prompts` reads them); each must fit the
    target's context with ``max_new_tokens`` more tokens. ``temperature`` 0 is greedy; otherwise
    prompt i samples from :func:`generation_probs` (``top_k``, 0 = off, then ``top_p``) with a
    CPU generator seeded ``seeds[i]``. ``eos_token_id``: as ``speculative_generate``'s
    ``eos_token_id`` (default: the model's generation config's). ``on_finish(i)`` is called as
    prompt i finishes; ``progress`` shows a bar over prompts.

    A row's tokens do not depend on ``batch`` or on the other prompts, up to float round-off (see
    the module's docstring); greedy rows are the tokens of ``speculative_generate(..., "ar")``.
    """
    from tqdm.auto import tqdm

    target = model if isinstance(model, TargetModel) else TargetModel(model, check_mask=False)
    s = _settings(target, prompts, max_new_tokens, temperature, seeds, eos_token_id, top_k, top_p, batch)
    if on_finish is not None and not callable(on_finish):
        raise ValueError(f"on_finish: expected a callable (prompt index -> None), got {on_finish!r}")
    out: list[list[int] | None] = [None] * len(s.prompts)
    bar = tqdm(total=len(s.prompts), desc="generate", disable=not progress, leave=False)

    def finish(row: _Row) -> None:
        out[row.index] = row.tokens
        bar.update(1)
        if on_finish is not None:
            on_finish(row.index)

    waiting, state = deque(range(len(s.prompts))), _Batch(target)
    while waiting or state.rows:
        if waiting and len(state.rows) < s.batch:
            _admit(s, state, [waiting.popleft() for _ in range(min(s.batch - len(state.rows), len(waiting)))],
                   finish)
        if state.rows:
            tokens = _draw(s, state.step(), state.rows)
            going = _emit(s, state.rows, tokens)
            for j in sorted(set(range(len(state.rows))) - set(going)):
                finish(state.rows[j])
            state.keep(going, tokens)
    bar.close()
    return out


def _admit(s: _Settings, state: _Batch, group: list[int], finish: Callable[[_Row], None]) -> None:
    """Prefill prompts ``group``, draw their first tokens, and add those not yet finished to the batch."""
    rows = [_new_row(s, i) for i in group]
    tokens = _draw(s, state.prefill([s.prompts[i] for i in group]), rows)
    going = _emit(s, rows, tokens)
    for j in sorted(set(range(len(rows))) - set(going)):
        finish(rows[j])
    state.join(rows, tokens, going)
