"""The Domino drafter and DARTree's path-dependent draft tree (method "dartree").

``DominoDrafter`` is the DFlash block drafter plus ``PathCorrection``, a GRU over the path whose
rank-r logit correction makes each depth's distribution depend on the tokens above it;
``grow_path_tree`` grows the exact top-N tree of such a drafter one depth at a time. Design,
training, cost and checkpoint layout: docs/results.md ("DARTree: path-dependent trees").
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from mfd_theory.trees import DraftTree

from mfd_theory.llm.models.drafter import BlockDrafter, _draft_value, _hf_model, load_drafter

__all__ = ["DominoDrafter", "PathCorrection", "domino_from_checkpoint", "grow_path_tree", "DEFAULT_RANK",
           "ARCHITECTURE"]

DEFAULT_RANK = 32
ARCHITECTURE = "DominoDraftModel"


class PathCorrection(nn.Module):
    """The causal correction head: ``g_d = GRU(in_proj([e(x_{d-1}) ; h_d]), g_{d-1})`` with
    ``g_0 = 0`` and x_0 the block's root, h_d the backbone's final state at depth d, and
    ``log q~(x_d | x_<d) = log_softmax(log q_block(x_d) + up(g_d))`` (``up``: r -> V, no bias)."""

    def __init__(self, hidden_size: int, vocab_size: int, rank: int):
        super().__init__()
        self.in_proj = nn.Linear(2 * hidden_size, rank, bias=False)
        self.gru = nn.GRUCell(rank, rank)
        self.up = nn.Linear(rank, vocab_size, bias=False)

    def step(self, state: torch.Tensor, prev_emb: torch.Tensor, block_state: torch.Tensor) -> torch.Tensor:
        """One depth: state [F, r], previous token's embedding [F, H], backbone state [F, H] -> [F, r]."""
        return self.gru(self.in_proj(torch.cat([prev_emb, block_state.to(prev_emb.dtype)], dim=-1)), state)

    def delta(self, state: torch.Tensor) -> torch.Tensor:
        """Logit correction [F, V] (float32) from the path state [F, r]."""
        return self.up(state).float()


class DominoDrafter(BlockDrafter):
    """DFlash backbone plus :class:`PathCorrection`; trained teacher-forced (:meth:`train_forward`),
    drafting one backbone pass per round, then :meth:`grow_tree` one correction step per depth."""

    kind = "dartree"
    architecture = ARCHITECTURE  # registers the class with load_drafter / build_drafter
    teacher_forced = True  # train_forward needs the block's true tokens (see train_drafter)
    grows_trees = True

    def __init__(self, config, target: Any, rank: int | None = None):
        super().__init__(config, target)
        saved = _draft_value(config, "dartree") or {}
        r = rank if rank is not None else saved.get("rank", DEFAULT_RANK)
        if isinstance(r, bool) or int(r) != r or int(r) < 1:
            raise ValueError(f"rank: the correction head's rank must be an integer >= 1, got {r!r}")
        self.correction_rank = int(r)
        self.correction = PathCorrection(config.hidden_size, config.vocab_size, self.correction_rank)
        self._block_states: torch.Tensor | None = None

    # Every block forward (training and drafting) ends in _log_probs on the final block states of
    # positions 1..L; they are kept so the correction head can read them.
    def _log_probs(self, h: torch.Tensor) -> torch.Tensor:
        self._block_states = h  # [B, L, H]
        return super()._log_probs(h)

    def _token_embeddings(self, ids: torch.Tensor) -> torch.Tensor:
        """[B, S] token ids -> [B, S, H], the target's (frozen) embeddings as the backbone reads them."""
        return super()._block_embeddings(ids)

    # ------------------------------------------------------------------ training
    def train_forward(self, ctx_feats, block_ids, ctx_valid=None, paths: torch.Tensor | None = None):
        """Corrected log-probs [B, block_size - 1, V], teacher-forced on ``paths`` [B, block_size]:
        the block's true tokens (x_0 the root), so position d's correction sees x_0..x_{d-1}."""
        if paths is None:
            raise ValueError("paths: the Domino drafter's correction is teacher-forced; pass the block's "
                             "true tokens [B, block_size]")
        if paths.shape != block_ids.shape:
            raise ValueError(f"paths: expected shape {tuple(block_ids.shape)} like block_ids, got {tuple(paths.shape)}")
        log_q = super().train_forward(ctx_feats, block_ids, ctx_valid)  # [B, L, V]
        h = self._block_states  # [B, L, H]
        emb = self._token_embeddings(paths[:, :-1])  # [B, L, H]: x_0..x_{L-1}
        state = h.new_zeros(h.shape[0], self.correction_rank)  # [B, r]
        deltas = []
        for d in range(h.shape[1]):
            state = self.correction.step(state, emb[:, d], h[:, d])
            deltas.append(self.correction.delta(state))
        delta = torch.stack(deltas, dim=1)  # [B, L, V]
        if self._reduced_output:  # log_q covers the draft vocabulary only (reduced_output)
            delta = delta.index_select(-1, self.draft_vocab.to(delta.device))
        # outside a draft vocabulary log_q is -inf and stays so: those tokens are never drafted
        return torch.log_softmax(log_q + delta, dim=-1)  # [B, L, V] (or [B, L, V'])

    # ------------------------------------------------------------------ drafting
    def last_block_states(self) -> torch.Tensor:
        """Final backbone states [L, H] of the last :meth:`draft_modes` call (positions 1..L)."""
        h = self._block_states
        if h is None or h.dim() != 3 or h.shape[0] != 1:
            raise ValueError("drafter: no drafted block to grow a tree from (call draft_modes first)")
        return h[0]

    @torch.no_grad()
    def corrected_log_probs(self, root_token: int, path, log_q: torch.Tensor) -> torch.Tensor:
        """The corrected distribution [V] after ``root_token`` and the drafted ``path`` (tokens at
        depths 1..d), for the block of the last :meth:`draft_modes` call; ``log_q`` [D, V] its block
        log-probs. One path at a time: what :meth:`grow_tree` batches."""
        h = self.last_block_states()
        toks = torch.tensor([[int(root_token), *[int(t) for t in path]]], device=h.device)
        emb = self._token_embeddings(toks)[0]  # [d+1, H]
        state = h.new_zeros(1, self.correction_rank)
        for d in range(len(path) + 1):
            state = self.correction.step(state, emb[d:d + 1], h[d:d + 1])
        return torch.log_softmax(log_q[len(path)].float() + self.correction.delta(state)[0], dim=-1)

    @torch.no_grad()
    def grow_tree(self, root_token: int, log_q: torch.Tensor, budget: int,
                  clock: Callable[[], float] | None = None) -> tuple[DraftTree, list[float]]:
        """The exact top-``budget`` tree under the corrected path scores, grown depth by depth
        (:func:`grow_path_tree` with the GRU correction as the step).

        ``log_q`` [D, V]: the block log-probs of the last :meth:`draft_modes` call, possibly cut to
        fewer depths D <= L. Returns the tree (nodes depth by depth, ``log_score`` = corrected path
        log-probability) and the seconds each depth took (measured with ``clock``)."""
        return self.grow_tree_from(self.last_block_states(), root_token, log_q, budget, clock=clock)

    def drafted_block_states(self) -> torch.Tensor:
        """Final backbone states [B, L, H] of the last block forward, every row (a batch of roots:
        :mod:`mfd_theory.llm.measure.heldout` grows one tree per row with :meth:`grow_tree_from`)."""
        if self._block_states is None:
            raise ValueError("drafter: no drafted block (run a block forward first)")
        return self._block_states

    @torch.no_grad()
    def grow_tree_from(self, h: torch.Tensor, root_token: int, log_q: torch.Tensor, budget: int, *,
                       draft_ids: bool = False, clock: Callable[[], float] | None = None
                       ) -> tuple[DraftTree, list[float]]:
        """:meth:`grow_tree` for the block whose final backbone states are ``h`` [L, H].

        ``draft_ids``: ``log_q`` [D, V'] is over the draft vocabulary (as :meth:`reduced_output`
        gives it) and the tree's tokens are draft indices (:meth:`draft_index`); the correction
        then reads each drafted token's target id and adds its logits on the draft vocabulary only,
        the same distribution as on the whole vocabulary, where every other token is -inf."""
        if log_q.shape[0] > h.shape[0]:
            raise ValueError(f"log_q: {log_q.shape[0]} depths, but the drafted block has {h.shape[0]}")
        vocab = self.draft_vocab.to(h.device) if draft_ids and self.draft_vocab is not None else None

        def step(state, prev, d):
            ids = prev if vocab is None or d == 0 else vocab[prev]  # the root is a target id
            emb = self._token_embeddings(ids[None])[0]  # [F, H]
            state = self.correction.step(state, emb, h[d].expand(len(prev), -1))  # [F, r]
            delta = self.correction.delta(state)
            if vocab is not None:
                delta = delta.index_select(-1, vocab)
            return state, torch.log_softmax(log_q[d].float()[None] + delta, dim=-1)

        return grow_path_tree(root_token, log_q.shape[0], budget, step, h.new_zeros(1, self.correction_rank),
                              clock)

    def batch_context(self):
        """Refused: a batch drafts blocks only, and this drafter's trees depend on their paths."""
        raise ValueError("drafter: batched decoding does not grow path-dependent (dartree) trees")

    # ------------------------------------------------------------------ checkpoints
    def save_pretrained(self, directory) -> Path:
        directory = super().save_pretrained(directory)
        path = directory / "config.json"
        cfg = json.loads(path.read_text())
        cfg["architectures"] = [ARCHITECTURE]
        names = sorted(n for n in self.state_dict() if n.startswith("correction."))
        cfg["dflash_config"]["dartree"] = {"rank": self.correction_rank, "parameters": names}
        path.write_text(json.dumps(cfg, indent=2, default=str) + "\n")
        return directory


def domino_from_checkpoint(directory, target: Any, rank: int | None = None) -> DominoDrafter:
    """A Domino drafter whose backbone is the DFlash checkpoint in ``directory`` (DARTree's recipe:
    a trained block drafter plus a new correction head). The head's output matrix starts at zero,
    so the new drafter drafts exactly the checkpoint's distributions until training moves it. A
    Domino checkpoint is loaded as it is (``rank``, if given, must match its head)."""
    base = load_drafter(directory, target)
    if isinstance(base, DominoDrafter):
        if rank is not None and int(rank) != base.correction_rank:
            raise ValueError(f"rank: {rank} differs from the Domino checkpoint's {base.correction_rank} in {directory}")
        return base
    if base.num_modes != 1:
        raise ValueError(f"directory: the checkpoint in {directory} has {base.num_modes} modes; a Domino "
                         "drafter starts from a single-mode (DFlash) drafter")
    drafter = DominoDrafter(base.config, _hf_model(target), rank)
    state = {n: v for n, v in base.state_dict().items() if not n.startswith("rotary_emb.")}
    if base.d2t is not None:
        drafter.set_draft_vocab(base.draft_vocab)
    missing, unexpected = drafter.load_state_dict(state, strict=False)
    left = [m for m in missing if not m.startswith(("rotary_emb.", "correction."))]
    if left or unexpected:
        raise ValueError(f"directory: checkpoint in {directory} does not fit a Domino backbone ({left}, {unexpected})")
    with torch.no_grad():
        drafter.correction.up.weight.zero_()
    param = next(base.parameters())
    return drafter.to(device=param.device, dtype=param.dtype)


def grow_path_tree(root_token: int, depth_max: int, budget: int, step: Callable, state0: torch.Tensor,
                   clock: Callable[[], float] | None = None) -> tuple[DraftTree, list[float]]:
    """The exact top-``budget`` draft tree of a path-dependent drafter, one batched step per depth.

    ``step(state [F, ...], prev_tokens [F], d) -> (state [F, ...], log-probs [F, V])`` advances the
    drafter's path state of F frontier nodes by their last tokens and returns each one's
    distribution for depth d + 1 (0-based d); ``state0`` [1, ...] is the root's state. Paths are
    scored by their summed log-probabilities. Scores never increase along a path and ties favour
    earlier (shallower) nodes, so the kept top N is prefix-closed, and it is the exact top N of all
    paths up to ``depth_max``. Returns (tree with ``log_score`` = path score, seconds per depth)."""
    if isinstance(budget, bool) or int(budget) != budget or int(budget) < 1:
        raise ValueError(f"budget: must be an integer >= 1, got {budget!r}")
    clock = clock or time.perf_counter
    n_max = int(budget)
    dev = state0.device
    state = state0  # [F, ...], F = frontier size
    prev = torch.tensor([int(root_token)], device=dev)  # [F] each frontier node's token
    front_node = np.array([-1])  # [F] node index (-1: the root)
    front_score = np.zeros(1)  # [F] path log-probabilities
    parent: list[np.ndarray] = []
    token: list[np.ndarray] = []
    depth: list[np.ndarray] = []
    score = np.zeros(0)  # [n] every node created so far
    alive = np.zeros(0, dtype=bool)  # [n] in the current top-N
    times = []
    for d in range(int(depth_max)):
        t0 = clock()
        state, lp = step(state, prev, d)  # [F, ...], [F, V]
        kept = np.flatnonzero(alive)
        # a child can enter only by beating the N-th kept score (when N nodes are kept)
        worst = np.partition(score[kept], len(kept) - n_max)[len(kept) - n_max] if len(kept) >= n_max \
            else -np.inf
        cand_t = torch.as_tensor(front_score, device=dev)[:, None] + lp.double().clamp_max(0.0)  # [F, V]
        rows_t, toks_t = torch.nonzero(cand_t > worst, as_tuple=True)  # row-major: by parent, then token
        cand = cand_t[rows_t, toks_t].cpu().numpy()
        rows, toks = rows_t.cpu().numpy(), toks_t.cpu().numpy()
        pool = np.concatenate([score[kept], cand])
        # stable: on equal scores the kept (shallower, earlier) nodes win, so parents precede children
        top = np.sort(np.argsort(-pool, kind="stable")[:n_max])
        alive[:] = False
        alive[kept[top[top < len(kept)]]] = True
        new = top[top >= len(kept)] - len(kept)  # indices into cand, ascending
        rows, toks = rows[new], toks[new]
        first = len(score)
        parent.append(front_node[rows])
        token.append(toks)
        depth.append(np.full(len(new), d + 1))
        score = np.concatenate([score, cand[new]])
        alive = np.concatenate([alive, np.ones(len(new), dtype=bool)])
        times.append(clock() - t0)
        if not len(new):
            break
        state = state.index_select(0, torch.as_tensor(rows, device=dev))  # [F', ...]
        prev = torch.as_tensor(toks, device=dev)
        front_node = first + np.arange(len(new))
        front_score = cand[new]
    par = np.concatenate(parent) if parent else np.zeros(0, dtype=np.int64)
    keep = np.flatnonzero(alive)
    remap = np.full(len(score) + 1, -1, dtype=np.int64)
    remap[keep] = np.arange(len(keep))
    tok = np.concatenate(token) if token else np.zeros(0, dtype=np.int64)
    dep = np.concatenate(depth) if depth else np.zeros(0, dtype=np.int64)
    tree = DraftTree(np.where(par[keep] < 0, -1, remap[par[keep]]), tok[keep], dep[keep], score[keep])
    return tree, times
