"""One request's part of a round, the same in the one-request and the batched loop.

The argument checks, the prompt (one validation), and ``Request``: a request's sampler, tokens and
records, how deep its next tree may go, and how a round's tokens are emitted up to EOS or
``max_new_tokens``. The loops themselves: ``generate.py`` (one request), ``batch.py`` (many).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from mfd_theory.trees import DraftTree
from mfd_theory.validation import check_int, check_real, is_real

from mfd_theory.llm.decoding.metrics import RoundMetrics
from mfd_theory.llm.decoding.records import DecodeResult, StepRecord
from mfd_theory.llm.decoding.sampling import MIN_TEMPERATURE, Sampler
from mfd_theory.llm.decoding.trees import METHODS, check_scorer
from mfd_theory.llm.models.drafter import check_drafter_target
from mfd_theory.llm.models.target import TargetModel

__all__ = ["Request", "as_target", "batch_prompts", "check_decoding", "check_seed", "eos_set", "positions_needed",
           "prompt_ids", "token_tensor"]


def positions_needed(prompt_tokens: int, max_new_tokens: int) -> int:
    """Positions a ``prompt_tokens`` prompt plus ``max_new_tokens`` new tokens occupy in the target:
    the last new token is never fed back, so one fewer than their sum."""
    return int(prompt_tokens) + int(max_new_tokens) - 1


def as_target(target) -> TargetModel:
    """``target`` itself, or an HF model wrapped on the fly."""
    return target if isinstance(target, TargetModel) else TargetModel(target)


def check_decoding(target: TargetModel, drafter, method, budget, temperature, top_p, max_new_tokens,
                   scorer: str | None = None) -> str | None:
    """The arguments every decoding loop takes, and the drafter against the target; returns the
    scorer the method decodes with (:func:`~mfd_theory.llm.decoding.trees.check_scorer`)."""
    if method not in METHODS:
        raise ValueError(f"method: must be one of {METHODS}, got {method!r}")
    scorer = check_scorer(method, scorer)
    check_int("budget", budget, 1, integral_floats=True)
    check_int("max_new_tokens", max_new_tokens, 1, integral_floats=True)
    if not is_real(temperature) or temperature < 0 or 0 < temperature < MIN_TEMPERATURE:
        raise ValueError(f"temperature: must be 0 (greedy) or a finite number >= {MIN_TEMPERATURE:.3g}, "
                         f"got {temperature!r}")
    check_real("top_p", top_p, 0, 1, low_open=True)
    if method == "ar":
        return scorer
    if drafter is None:
        raise ValueError(f"drafter: method {method!r} needs a drafter")
    if method == "dartree" and not drafter.grows_trees:
        raise ValueError("drafter: method 'dartree' needs a Domino drafter (build_drafter(..., kind='dartree'))")
    if int(drafter.block_size) < 2:
        raise ValueError(f"drafter: block_size must be >= 2, got {drafter.block_size}")
    cfg = drafter.config
    if cfg is not None:
        if int(cfg.vocab_size) != target.vocab_size:
            raise ValueError(f"drafter: vocabulary of {cfg.vocab_size} tokens, the target's has {target.vocab_size}")
        if int(cfg.hidden_size) != target.hidden_size:
            raise ValueError(f"drafter: hidden size {cfg.hidden_size}, the target's is {target.hidden_size}")
    bad = [i for i in drafter.target_layer_ids if not 0 <= int(i) < target.num_layers]
    if bad:
        raise ValueError(f"drafter: target_layer_ids {bad} do not exist in a {target.num_layers}-layer target")
    check_drafter_target(drafter, target.model)
    return scorer


def check_seed(seed, requests: int = 1) -> int:
    """Request i samples with a generator seeded ``seed + i``; torch.Generator.manual_seed takes
    [0, 2**64 - 1], so ``seed + requests - 1`` must fit (integral floats count as integers)."""
    try:
        return check_int("seed", seed, 0, 2 ** 64 - requests, integral_floats=True)
    except ValueError:
        raise ValueError(f"seed: must be an integer in [0, 2**64 - {requests}] (request i samples with seed + i), "
                         f"got {seed!r}") from None


def _eos_ids(value) -> list:
    """``eos_token_id`` as a flat list of Python values (one id, a sequence, an array or a tensor)."""
    if isinstance(value, torch.Tensor):
        return value.reshape(-1).tolist() if value.dim() <= 1 else [value]
    if isinstance(value, np.ndarray):
        return value.reshape(-1).tolist() if value.ndim <= 1 else [value]
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    return [value]


def eos_set(target: TargetModel, eos_token_id) -> frozenset[int]:
    """The tokens that end a request: ``eos_token_id`` (an id, or several as a list, tuple, set, 1-D
    array or tensor; each an integer in [0, V)), by default the target's generation config's, else
    its config's; none if neither names one (or an empty list is given)."""
    if eos_token_id is None:
        gc = getattr(target.model, "generation_config", None)
        eos_token_id = getattr(gc, "eos_token_id", None) if gc is not None else None
        if eos_token_id is None:
            eos_token_id = getattr(target.config, "eos_token_id", None)
        if eos_token_id is None:
            return frozenset()
        return frozenset(int(e) for e in _eos_ids(eos_token_id))  # the model's own, as it names them
    out = set()
    for e in _eos_ids(eos_token_id):
        try:
            out.add(check_int("eos_token_id", e, 0, target.vocab_size - 1))
        except ValueError:
            raise ValueError(f"eos_token_id: expected token ids in [0, {target.vocab_size}) (one id, or a list, "
                             f"array or 1-D tensor of them), got {eos_token_id!r}") from None
    return frozenset(out)


def _as_ids(input_ids) -> torch.Tensor:
    """Token ids (tensor, array, list) or a tokenizer's output (a ``BatchEncoding`` or any mapping,
    whose ``input_ids`` entry is used) as a tensor."""
    if isinstance(input_ids, Mapping):
        if "input_ids" not in input_ids:
            raise ValueError(f"input_ids: a mapping without an 'input_ids' entry (keys {sorted(map(str, input_ids))})")
        input_ids = input_ids["input_ids"]
    if input_ids is None or isinstance(input_ids, (str, bytes)):
        raise ValueError(f"input_ids: expected token ids (a tensor, a list of ints or a tokenizer's output), "
                         f"got {input_ids!r}")
    try:
        return torch.as_tensor(input_ids)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"input_ids: expected token ids (a tensor, a list of ints or a tokenizer's output), "
                         f"got {type(input_ids).__name__}: {exc}") from exc


def batch_prompts(prompts) -> list:
    """The prompts of a batch as a list: a list (or tuple) of prompts as it is, the rows of a 2-D
    tensor or array, or a tokenizer's batch output (a mapping whose ``input_ids`` holds one row
    per prompt), each row cut to its ``attention_mask``'s ones when there is one (left or right
    padding; a row's ones must be contiguous)."""
    if isinstance(prompts, Mapping):
        if "input_ids" not in prompts:
            raise ValueError(f"prompts: a mapping without an 'input_ids' entry (keys {sorted(map(str, prompts))})")
        rows, mask = prompts["input_ids"], prompts.get("attention_mask")
        if isinstance(rows, (torch.Tensor, np.ndarray)) and rows.ndim != 2:
            raise ValueError(f"prompts: a tokenizer's batch output holds input_ids [B, T], got shape {tuple(rows.shape)}")
        rows = list(rows)
        if mask is not None:
            mask = list(mask)
            if len(mask) != len(rows):
                raise ValueError(f"prompts: {len(rows)} rows of input_ids but {len(mask)} of attention_mask")
            rows = [_unpadded(i, r, m) for i, (r, m) in enumerate(zip(rows, mask))]
        return rows
    if isinstance(prompts, (torch.Tensor, np.ndarray)):
        if prompts.ndim != 2:
            raise ValueError(f"prompts: a tensor of prompts must be [B, T] (one row each), got shape "
                             f"{tuple(prompts.shape)}")
        return list(prompts)
    if isinstance(prompts, (str, bytes)) or not hasattr(prompts, "__len__") or len(prompts) == 0:
        raise ValueError(f"prompts: expected a non-empty list of prompts (or a tokenizer's batch output), "
                         f"got {type(prompts).__name__}" + (" of length 0" if hasattr(prompts, "__len__") else ""))
    return list(prompts)


def _unpadded(i: int, row, mask) -> torch.Tensor:
    """Row ``i`` of a padded batch, cut to its attention mask's ones (contiguous)."""
    m = torch.as_tensor(np.asarray(mask) if not isinstance(mask, torch.Tensor) else mask).reshape(-1)
    r = _as_ids(row).reshape(-1)
    if m.shape != r.shape or not bool(((m == 0) | (m == 1)).all()):
        raise ValueError(f"prompts[{i}]: attention_mask must be 0/1 and as long as its input_ids row")
    on = torch.nonzero(m).reshape(-1)
    if on.numel() and int(on[-1] - on[0]) + 1 != on.numel():
        raise ValueError(f"prompts[{i}]: attention_mask has a gap (padding only at one end is supported)")
    return r[on]


def token_tensor(ids: torch.Tensor, vocab_size: int, name: str = "input_ids") -> torch.Tensor:
    """Token ids of any integer dtype (int8 to int64, unsigned too) as int64, each in [0, V):
    the embedding takes int64 ids only. Booleans, floats and complex numbers are refused."""
    if ids.dtype == torch.bool or ids.dtype.is_floating_point or ids.dtype.is_complex:
        raise ValueError(f"{name}: token ids must be integers, got dtype {ids.dtype}")
    wide = ids.to(torch.float64)  # every integer dtype converts; an out-of-range id stays out of range
    if ids.numel() and (float(wide.min()) < 0 or float(wide.max()) >= vocab_size):
        raise ValueError(f"{name}: token ids must lie in [0, {vocab_size})")
    return ids.to(torch.int64)


def prompt_ids(input_ids, target: TargetModel, max_new_tokens: int) -> torch.Tensor:
    """The prompt as token ids [T], checked: integers of the target's vocabulary, one non-empty
    sequence ([T] or [1, T]), and room in the target's context for it plus ``max_new_tokens``."""
    ids = _as_ids(input_ids)
    if ids.dim() == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.dim() != 1:
        raise ValueError(f"input_ids: expected one sequence [T] or [1, T], got shape {tuple(ids.shape)}")
    if ids.numel() == 0:
        raise ValueError("input_ids: the prompt is empty")
    ids = token_tensor(ids, target.vocab_size)
    target.check_positions(ids.numel())  # the prompt alone
    need = positions_needed(ids.numel(), max_new_tokens)
    if target.max_positions is not None and need > target.max_positions:
        raise ValueError(f"max_new_tokens: a {ids.numel()}-token prompt plus {int(max_new_tokens)} new tokens "
                         f"needs {need} positions, beyond the target's context of {target.max_positions}")
    return ids


@dataclass
class Request:
    """One request's decoding state: its prompt, sampler, output and rounds, and the next root."""

    ids: torch.Tensor  # the prompt [T]
    sampler: Sampler
    result: DecodeResult
    max_new_tokens: int
    eos: frozenset
    index: int = 0  # its place among the batch's prompts
    root: int = 0  # the last emitted token, the next round's root
    done: bool = False
    t_start: float = 0.0

    @classmethod
    def start(cls, target: TargetModel, input_ids, max_new_tokens: int, method: str, sampler: Sampler,
              eos: frozenset, index: int = 0, scorer: str | None = None) -> "Request":
        ids = prompt_ids(input_ids, target, max_new_tokens)
        result = DecodeResult(tokens=[], method=method, prompt_len=int(ids.numel()), scorer=scorer)
        return cls(ids, sampler, result, int(max_new_tokens), eos, index)

    def depth_left(self, root_position: int, max_positions: int | None, block_depth: int) -> int:
        """How deep this round's tree may go: a deeper node could only emit a token past
        ``max_new_tokens`` or sit beyond the context (the root is at ``root_position``, a depth-d
        node at root_position + d), and a block drafts ``block_depth`` positions."""
        depth = self.max_new_tokens - len(self.result.tokens) - 1
        if max_positions is not None:
            depth = min(depth, max_positions - 1 - root_position)
        return min(max(depth, 0), block_depth)

    def emit(self, tokens: list[int]) -> int:
        """Append a round's tokens up to the first EOS or ``max_new_tokens`` (then the request is
        done); returns how many were appended."""
        out = self.result.tokens
        count = 0
        for tok in tokens:
            out.append(tok)
            count += 1
            if tok in self.eos:
                self.done, self.result.stopped_by = True, "eos"
                break
            if len(out) >= self.max_new_tokens:
                self.done = True
                break
        return count

    def record(self, m: RoundMetrics, path: list[int], count: int, times: dict, tree: DraftTree | None,
               keep_trees: bool, t_draft_depths: tuple = ()) -> StepRecord:
        """Append the round's record: ``path`` its accepted nodes, ``count`` the tokens it emitted."""
        step = StepRecord.of_round(m, min(len(path), count), count, times, tree, keep_trees, t_draft_depths)
        self.result.steps.append(step)
        return step
