"""Plain autoregressive generation of many prompts at once from a Hugging Face causal LM.

:func:`generate_batch` keeps up to ``batch`` sequences in one forward per new token. Each sequence
lives in a slot (a batch row) of a key/value store allocated once per call (per attention layer
[batch, kv_heads, capacity, d], capacity the longest prompt plus ``max_new_tokens``): sequence b's
rows are ``[0, length_b)`` of slot b, a step writes each row's new keys at its own ``length_b`` in
place, and attention reads the first ``max length + 1`` columns under a float additive mask
[B, 1, 1, W] that hides each slot's unused columns (never a bool 4D mask: under transformers 5.x the
eager kernel adds the mask to the scores). Position ids are the column indices (0 at a sequence's
first token). A row stops at its own EOS or at ``max_new_tokens``; finished rows leave at once
(the last slots move into their places, so the active rows stay slots ``[0, B)``) and waiting
prompts take the free slots, longest prompt first (:func:`admission_order`): they are prefilled
in groups of at most ``PREFILL_GROUP``, each left padded to its longest under its own causal
mask, and their real rows written into their slots' first columns. Nothing is concatenated,
re-padded or trimmed as rows come and go. When every prompt starts with the same tokens (a chat
template's system turn; at least ``MIN_SHARED_PREFIX`` of them), that prefix is run once and its
keys and values are copied into each new slot, so a prefill feeds only the rest of each prompt.

Sampling is per row and keyed: prompt i's n-th token is
:func:`~mfd_theory.llm.decoding.sampling.draw_tokens`'s draw n with seed ``seeds[i]`` (a
counter-based uniform from (seed, n), then the inverse CDF of the row's cut distribution), every
row of a step drawn in one vectorised call. It is the draw
:class:`~mfd_theory.llm.decoding.sampling.Sampler` makes, so with ``top_k = 0`` a row's tokens are
the ones ``speculative_generate(..., "ar", seed=seeds[i])`` gives. A row's tokens therefore do not
depend on ``batch``, on the other prompts or on their order, up to the float round-off of batched
and padded matrix products, which can move a logit in its last bits and so, rarely, flip an argmax
near a tie or a draw that lands on a boundary between two tokens.

A target with recurrent (Gated DeltaNet) layers runs one prompt at a time through its own HF cache.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from mfd_theory.validation import check_int, check_real, is_real

from mfd_theory.llm.decoding.round import batch_prompts, eos_set, prompt_ids
from mfd_theory.llm.decoding.sampling import MIN_TEMPERATURE, cut_distribution, draw_tokens
from mfd_theory.llm.models.kv import KVBuffer
from mfd_theory.llm.models.target import TargetModel

__all__ = ["MIN_SHARED_PREFIX", "PREFILL_GROUP", "admission_order", "can_batch", "generate_batch", "generation_probs"]

#: a common prefix of every prompt (two or more) at least this long is run once and its keys and
#: values copied into each slot (a chat template's system turn, say); a shorter one is not worth
#: its own forward
MIN_SHARED_PREFIX = 4

#: prompts taking free slots at once are prefilled in groups of at most this many (in admission
#: order, so of similar lengths): a group's forward pads each prompt to the group's longest. Sixteen
#: chat prompts already make products of a thousand rows or more; other sizes were not measured
PREFILL_GROUP = 16


def generation_probs(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """The distribution a row samples from, [..., V] float32: the logits cut to their ``top_k``
    largest (0: all; ties with the k-th kept), softmax at ``temperature``, cut to the ``top_p``
    nucleus (:func:`~mfd_theory.llm.decoding.sampling.cut_distribution`, spread back over the
    vocabulary). ``logits``: [..., V]."""
    z = logits.float()
    flat = z.reshape(-1, z.shape[-1])  # [B, V]
    ids, probs = cut_distribution(flat, temperature, top_k, top_p)
    if ids is not None:
        probs = torch.zeros_like(flat).scatter_(-1, ids, probs)
    return probs.reshape(z.shape)


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
    seed: int | None  # None when greedy
    tokens: list = field(default_factory=list)


@functools.lru_cache(maxsize=None)
def _slot_layer_class():
    """A cache layer whose ``update`` hands the new keys and values to its :class:`_Slots`."""
    from transformers.cache_utils import DynamicLayer

    class SlotLayer(DynamicLayer):
        owner: "_Slots"
        kv_index: int

        def update(self, key_states, value_states, *args, **kwargs):
            self.keys, self.values = self.owner._update(self.kv_index, key_states, value_states)
            self.is_initialized = True
            return self.keys, self.values

        def get_seq_length(self, *args, **kwargs) -> int:
            return self.owner.past

    return SlotLayer


class _Slots:
    """The rows being generated: row b (``rows[b]``) in slot b of per-layer buffers
    [batch, kv_heads, capacity, d] (:class:`~mfd_theory.llm.models.kv.KVBuffer`), holding
    ``length[b]`` key/value rows; the active rows are always slots ``[0, B)``."""

    def __init__(self, target: TargetModel, batch: int, capacity: int):
        self.target, self.batch, self.capacity = target, batch, capacity
        self.cache = target.new_cache()
        cls = _slot_layer_class()
        for j, layer in enumerate(self.cache.layers):
            layer.__class__ = cls
            layer.owner, layer.kv_index = self, j
        self.kv: list[KVBuffer | None] = [None] * len(self.cache.layers)
        self.rows: list[_Row] = []
        self.length: list[int] = []  # key/value rows held per active slot
        self.last: list[int] = []  # per active slot, the token to feed next
        self.width = 0  # the columns a step's attention reads
        self.past = 0  # the columns held before the running forward (HF asks the cache for them)
        self._plan = None  # where the running forward's new rows go (set by share / prefill / step)
        self.shared = 0  # the prompts' common prefix held in ``prefix`` (its length P; 0: none)
        self.prefix: list | None = None  # per layer the prefix's (keys, values) [1, kvh, P, d]
        self._incoming: list[int] | None = None  # a prefilled group's prompt lengths, until it joins

    def _update(self, j: int, keys: torch.Tensor, values: torch.Tensor):
        """Write one layer's new rows [B, kvh, Q, d] where ``_plan`` says; return what attention reads."""
        buf = self.kv[j]
        if buf is None:
            buf = self.kv[j] = KVBuffer.like(keys, self.capacity, batch=self.batch)
        kind, *plan = self._plan
        if kind == "shared":  # the prompts' common prefix, run once: kept aside, attends to itself
            self.prefix[j] = (keys, values)  # [1, kvh, P, d]
            return keys, values
        if kind == "prefill":  # left padded suffixes: real rows only, written after the prefix in their slots
            slot, bi, ji, col, first = plan  # [M] each, then the group's first slot
            g, n = keys.shape[0], self.shared
            if n:
                pk, pv = self.prefix[j]
                buf.keys[first:first + g, :, :n] = pk.to(buf.dtype)  # every slot starts with the prefix
                buf.values[first:first + g, :, :n] = pv.to(buf.dtype)
            buf.keys[slot, :, col] = keys[bi, :, ji].to(buf.dtype)  # [M, kvh, d]
            buf.values[slot, :, col] = values[bi, :, ji].to(buf.dtype)
            if not n:
                return keys, values  # the group attends to its own rows
            return (torch.cat([pk.expand(g, -1, -1, -1), keys], dim=2),  # [G, kvh, P + W, d]
                    torch.cat([pv.expand(g, -1, -1, -1), values], dim=2))
        (start,) = plan  # [B] each slot's write column
        buf.write(start, keys, values)  # slots [0, B)
        b = keys.shape[0]
        return buf.keys[:b, :, :self.width], buf.values[:b, :, :self.width]  # [B, kvh, W, d] views

    @torch.no_grad()
    def share(self, prefix: torch.Tensor) -> None:
        """Run the prompts' common prefix ``prefix`` [P] once (causal, one row); every prefill after
        this copies its keys and values into the new slots' first P columns and feeds only the rest
        of each prompt."""
        t, dev = self.target, self.target.device
        n = len(prefix)
        cols = torch.arange(n, device=dev)
        mask = torch.zeros((1, 1, n, n), dtype=t.dtype, device=dev)
        mask.masked_fill_(cols[None, None, None, :] > cols[None, None, :, None], torch.finfo(t.dtype).min)
        self.prefix = [None] * len(self.kv)
        self._plan, self.past = ("shared",), 0
        t.forward(prefix.to(dev)[None], cols[None], mask, self.cache, hidden=False, last_only=True)
        self._plan, self.shared = None, n

    @torch.no_grad()
    def prefill(self, rows: list[_Row], prompts: list) -> torch.Tensor:
        """Prefill ``prompts`` (the rows' token ids, each longer than the shared prefix) into the next
        free slots; returns their next-token logits [G, V] float32. The rows join only through
        :meth:`join`."""
        t, dev, n = self.target, self.target.device, self.shared
        g, first = len(prompts), len(self.rows)
        lens = torch.tensor([len(p) - n for p in prompts], device=dev)  # [G] tokens after the prefix
        w = int(lens.max())
        ids = torch.zeros((g, w), dtype=torch.int64, device=dev)
        for i, p in enumerate(prompts):
            ids[i, w - len(p) + n:] = p[n:].to(dev)
        off = w - lens  # [G] padding columns on the left
        cols = torch.arange(w, device=dev)
        real = cols[None] >= off[:, None]  # [G, W]
        positions = n + (cols[None] - off[:, None]).clamp(min=0)  # [G, W]
        seen = (cols[None, None, :] <= cols[None, :, None]) & real[:, None, :]  # [G, Q, K] causal, real keys
        seen |= torch.eye(w, dtype=torch.bool, device=dev)[None]  # a padding query sees itself
        seen = torch.cat([seen.new_ones((g, w, n)), seen], dim=2)  # [G, Q, P + W]: the prefix is seen by all
        mask = torch.zeros((g, 1, w, n + w), dtype=t.dtype, device=dev)
        mask.masked_fill_(~seen[:, None], torch.finfo(t.dtype).min)  # [G, 1, W, P + W] float additive
        bi, ji = real.nonzero(as_tuple=True)  # [M]
        self._plan = ("prefill", first + bi, bi, ji, n + ji - off[bi], first)
        self.past = n
        out = t.forward(ids, positions, mask, self.cache, hidden=False, last_only=True)
        self._plan = None
        self._incoming = [len(p) for p in prompts]
        return out.logits[:, -1].float()

    def join(self, rows: list[_Row], last: list[int], keep: list[int]) -> None:
        """Add the prefilled group's rows ``keep`` (their places in the group), fed ``last`` next."""
        lengths, self._incoming = self._incoming, None
        first = len(self.rows)
        self.rows += rows
        self.length += lengths
        self.last += last
        self.keep(list(range(first)) + [first + j for j in keep])

    @torch.no_grad()
    def step(self) -> torch.Tensor:
        """Feed every row's last token; returns the next-token logits [B, V] float32."""
        t, dev = self.target, self.target.device
        b = len(self.rows)
        length = torch.tensor(self.length, device=dev)  # [B]
        self.past = max(self.length)
        self.width = self.past + 1
        cols = torch.arange(self.width, device=dev)
        mask = torch.zeros((b, 1, 1, self.width), dtype=t.dtype, device=dev)
        mask.masked_fill_((cols[None] > length[:, None])[:, None, None], torch.finfo(t.dtype).min)  # [B, 1, 1, W]
        self._plan = ("step", length)
        ids = torch.tensor(self.last, device=dev)[:, None]  # [B, 1]
        out = t.forward(ids, length[:, None], mask, self.cache, hidden=False)
        self._plan = None
        self.length = [n + 1 for n in self.length]
        return out.logits[:, -1].float()

    def keep(self, keep: list[int]) -> None:
        """Keep the rows in slots ``keep`` (ascending), drop the others: each hole below the kept
        count takes the last kept row above it (one slot's copy per moved row)."""
        n = len(keep)
        if n == len(self.rows):
            return
        kept = set(keep)
        holes = [j for j in range(n) if j not in kept]
        movers = [j for j in keep if j >= n]  # as many as holes
        if holes:
            dev = self.target.device
            src, dst = torch.tensor(movers, device=dev), torch.tensor(holes, device=dev)
            for buf in self.kv:
                if buf is not None:
                    buf.keys[dst] = buf.keys[src]
                    buf.values[dst] = buf.values[src]
        order = list(range(n))
        for h, m in zip(holes, movers):
            order[h] = m
        self.rows = [self.rows[j] for j in order]
        self.length = [self.length[j] for j in order]
        self.last = [self.last[j] for j in order]


# ------------------------------------------------------------------------------------- the loop
def _draw(s: _Settings, logits: torch.Tensor, rows: list[_Row]) -> list[int]:
    """One token per row: the argmax when greedy, else each row's keyed draw (all rows at once)."""
    if s.temperature == 0:
        return torch.argmax(logits, dim=-1).tolist()
    return draw_tokens(logits, s.temperature, [r.seed for r in rows], [len(r.tokens) for r in rows], s.top_k,
                       s.top_p)


def _emit(s: _Settings, rows: list[_Row], tokens: list[int]) -> list[int]:
    """Append each row's token; returns the places of the rows that go on."""
    going = []
    for j, (r, tok) in enumerate(zip(rows, tokens)):
        r.tokens.append(tok)
        if tok not in s.eos and len(r.tokens) < s.max_new_tokens:
            going.append(j)
    return going


def _new_row(s: _Settings, i: int) -> _Row:
    return _Row(index=i, seed=None if s.seeds is None else s.seeds[i])


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
    prompt i samples from :func:`generation_probs` (``top_k``, 0 = off, then ``top_p``), its n-th
    token the keyed draw (``seeds[i]``, n) of :func:`~mfd_theory.llm.decoding.sampling.draw_tokens`.
    ``eos_token_id``: as ``speculative_generate``'s ``eos_token_id`` (default: the model's
    generation config's). ``on_finish(i)`` is called as prompt i finishes; ``progress`` shows a
    bar over prompts.

    A row's tokens do not depend on ``batch`` or on the other prompts, up to float round-off (see
    the module's docstring); greedy rows are the tokens of ``speculative_generate(..., "ar")``, and
    so are sampled rows with ``top_k`` 0 and the same seed.
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

    if target.hybrid is not None:
        for i in range(len(s.prompts)):
            _one_prompt(s, target, i, finish)
        bar.close()
        return out
    waiting = deque(admission_order([len(p) for p in s.prompts]))
    state = _Slots(target, s.batch, max(len(p) for p in s.prompts) + s.max_new_tokens)
    shared = _common_prefix(s.prompts) if len(s.prompts) > 1 else 0
    if shared >= MIN_SHARED_PREFIX:
        state.share(s.prompts[0][:shared])
    while waiting or state.rows:
        if waiting and len(state.rows) < s.batch:
            free = min(s.batch - len(state.rows), len(waiting))
            group = [waiting.popleft() for _ in range(free)]
            for lo in range(0, len(group), PREFILL_GROUP):  # similar lengths together: little padding
                _admit(s, state, group[lo: lo + PREFILL_GROUP], finish)
        if state.rows:
            tokens = _draw(s, state.step(), state.rows)
            going = _emit(s, state.rows, tokens)
            for j in sorted(set(range(len(state.rows))) - set(going)):
                finish(state.rows[j])
            state.last = tokens
            state.keep(going)
    bar.close()
    return out


def admission_order(lengths: list[int]) -> list[int]:
    """The order prompts take free slots in: longest first (ties by place), so that the prompts
    prefilled together have similar lengths and their left padding, which a prefill computes like
    real tokens, stays small."""
    return sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i))


def _common_prefix(prompts: list) -> int:
    """The length of the prompts' longest common prefix, short of the shortest prompt (every prompt
    keeps a token of its own to prefill)."""
    n = min(len(p) for p in prompts) - 1
    first = prompts[0][:n]
    for p in prompts[1:]:
        if n == 0:
            break
        diff = torch.nonzero(p[:n] != first[:n])
        n = int(diff[0]) if len(diff) else n
    return n


def _admit(s: _Settings, state: _Slots, group: list[int], finish: Callable[[_Row], None]) -> None:
    """Prefill prompts ``group``, draw their first tokens, and add those not yet finished to the batch."""
    rows = [_new_row(s, i) for i in group]
    tokens = _draw(s, state.prefill(rows, [s.prompts[i] for i in group]), rows)
    going = _emit(s, rows, tokens)
    for j in sorted(set(range(len(rows))) - set(going)):
        finish(rows[j])
    state.join(rows, tokens, going)


def _one_prompt(s: _Settings, target: TargetModel, i: int, finish: Callable[[_Row], None]) -> None:
    """Prompt ``i`` alone through a fresh HF cache of ``target`` (causal, no mask, no padding)."""
    dev = target.device
    row, ids = _new_row(s, i), s.prompts[i].to(dev)[None]  # [1, T]
    cache = target.new_cache()
    pos = torch.arange(ids.shape[1], device=dev)[None]
    logits = target.forward(ids, pos, None, cache, hidden=False, last_only=True).logits[:, -1].float()
    while True:
        tok = _draw(s, logits, [row])
        if not _emit(s, [row], tok):
            finish(row)
            return
        pos = pos[:, -1:] + 1
        logits = target.forward(torch.tensor([tok], device=dev), pos, None, cache, hidden=False).logits[:, -1].float()
