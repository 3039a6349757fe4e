"""The target's side of a batch: every request's attention rows (and GDN states) in batch buffers.

``BatchTarget`` prefills a request alone and appends it as a batch row, verifies every request's
tree in one forward (each request's rows written at its own offset of a
:class:`~mfd_theory.llm.models.kv.KVBuffer`), and commits each request's accepted path on its
own. Design: docs/benchmarks.md ("Many requests at once").
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from mfd_theory.llm.models.kv import KVBuffer
from mfd_theory.llm.models.target import TargetModel

__all__ = ["BatchTarget"]


@functools.lru_cache(maxsize=None)
def _row_layer_class():
    """A cache layer whose ``update`` writes each batch row's new keys at that row's own offset."""
    from transformers.cache_utils import DynamicLayer

    class RowLayer(DynamicLayer):
        owner: "BatchTarget"
        kv_index: int

        def update(self, key_states, value_states, *args, **kwargs):
            self.keys, self.values = self.owner._write(self.kv_index, key_states, value_states)
            self.is_initialized = True
            return self.keys, self.values

        def get_seq_length(self, *args, **kwargs) -> int:
            return self.owner.max_length

    return RowLayer


class BatchTarget:
    """The target's batched state. ``add(prompt)`` prefills one request alone through ``target`` and
    appends it as the last batch row; ``drop(keep)`` keeps the listed rows; ``verify(roots, trees)``
    runs one forward over every row's [root, nodes]; ``commit(paths)`` keeps each row's root and
    accepted nodes.

    Request b's committed attention rows are ``[0, L_b)`` of its batch row; a verify pass writes its
    Q query rows at ``[L_b, L_b + Q)`` and reads the first ``max_b L_b + Q`` rows under a float
    additive mask [B, 1, Q, max L + Q] that shows each query its own context and tree ancestors
    only. Trees are padded to ``Q = max_b N_b + 1`` rows (a padded row sees its context and itself;
    its outputs are never read). On hybrid targets each GDN layer runs the one-request tree rule
    request by request inside the same forward (:meth:`HybridTree.verifying`)."""

    def __init__(self, target: TargetModel):
        if not isinstance(target, TargetModel):
            target = TargetModel(target)
        self.target = target
        self.cache = target.new_cache()
        hyb = target.hybrid
        self.kv_layers = list(range(len(self.cache.layers))) if hyb is None else list(hyb.kv_layers)
        cls = _row_layer_class()
        for j, i in enumerate(self.kv_layers):
            layer = self.cache.layers[i]
            layer.__class__ = cls
            layer.owner, layer.kv_index = self, j
        self.kv: list[KVBuffer | None] = [None] * len(self.kv_layers)
        self._conv: dict[int, torch.Tensor] = {}  # per GDN layer [B, C, K]
        self._rec: dict[int, torch.Tensor] = {}  # per GDN layer [B, Hv, Dk, Dv]
        self.lengths: list[int] = []
        self._starts: torch.Tensor | None = None  # [B]: where the pending verify rows are written
        self._pending: list[int] | None = None  # rows verified per request (root + nodes)
        self._parents: list[np.ndarray] = []
        self._gdn_rounds: list = []

    @property
    def batch_size(self) -> int:
        return len(self.lengths)

    @property
    def max_length(self) -> int:
        return max(self.lengths) if self.lengths else 0

    def _gdn_state(self, b: int, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Request b's GDN state of layer ``idx``: views into the batch buffers."""
        return self._conv[idx][b: b + 1], self._rec[idx][b: b + 1]

    # ------------------------------------------------------------------ membership
    @torch.no_grad()
    def add(self, ids: torch.Tensor, hidden: bool = True):
        """Prefill one request alone and append it: returns (next-token logits [V], hidden tuple)."""
        if self._pending is not None:
            raise ValueError("add: the last verification was not committed")
        t = self.target
        logits, hid = t.prefill(ids, hidden=hidden)
        n = t.length
        for j, i in enumerate(self.kv_layers):
            layer = t.cache.layers[i]
            keys, values = layer.keys[:, :, :n], layer.values[:, :, :n]
            if self.kv[j] is None:
                self.kv[j] = KVBuffer.like(keys, batch=0)
            self.kv[j].append(keys, values)
        if t.hybrid is not None:
            for i in t.hybrid.gdn:
                layer = t.cache.layers[i]
                conv, rec = layer.conv_states[0], layer.recurrent_states[0]
                self._conv[i] = conv.clone() if i not in self._conv else torch.cat([self._conv[i], conv])
                self._rec[i] = rec.clone() if i not in self._rec else torch.cat([self._rec[i], rec])
        self.lengths.append(n)
        return logits, hid

    def drop(self, keep: list[int]) -> None:
        """Keep batch rows ``keep`` (in that order), drop the others."""
        if self._pending is not None:
            raise ValueError("drop: the last verification was not committed")
        keep = [int(i) for i in keep]
        if keep == list(range(self.batch_size)):
            return
        if not keep:
            self.kv = [None] * len(self.kv_layers)
            self._conv, self._rec, self.lengths = {}, {}, []
            return
        idx = torch.tensor(keep, device=self.target.device)
        for buf in self.kv:
            buf.select(idx)
        self._conv = {i: c.index_select(0, idx) for i, c in self._conv.items()}
        self._rec = {i: r.index_select(0, idx) for i, r in self._rec.items()}
        self.lengths = [self.lengths[i] for i in keep]

    # ------------------------------------------------------------------ forward
    def _write(self, j: int, ks: torch.Tensor, vs: torch.Tensor):
        """Write a forward's rows [B, kvh, Q, d] at each request's offset; the keys it reads."""
        self.kv[j].write(self._starts, ks, vs)
        return self.kv[j].read(self.max_length + ks.shape[2])

    @torch.no_grad()
    def verify(self, roots: list[int], trees: list, hidden: bool = True):
        """One forward over every request's [root, nodes] (padded to the largest tree):
        returns (logits [B, Q, V] float32, hidden_states tuple of [B, Q, H] or None)."""
        if self._pending is not None:
            raise ValueError("verify: the previous verification was not committed")
        bsz = self.batch_size
        if len(roots) != bsz or len(trees) != bsz:
            raise ValueError(f"verify: {bsz} requests in the batch, got {len(roots)} roots and {len(trees)} trees")
        t = self.target
        dev = t.device
        sizes = [0 if tr is None else len(tr) for tr in trees]
        q = max(sizes) + 1
        for b, tr in enumerate(trees):
            t.check_positions(self.lengths[b] + 1 + (int(tr.depth.max()) if sizes[b] else 0))
        ids, depth, anc = self._tree_rows(roots, trees, sizes, q)
        end = self.max_length + q
        for buf in self.kv:
            buf.reserve(end)
        lengths = torch.tensor(self.lengths, device=dev)
        self._starts = lengths
        cols = torch.arange(end, device=dev)
        vis = (cols[None, None, :] < lengths[:, None, None]).expand(bsz, q, end).clone()  # own context
        write_pos = lengths[:, None] + torch.arange(q, device=dev)[None]  # [B, Q]
        vis.scatter_(2, write_pos[:, None, :].expand(bsz, q, q), anc)
        mask = torch.zeros((bsz, 1, q, end), dtype=t.dtype, device=dev)
        mask.masked_fill_(~vis[:, None], torch.finfo(t.dtype).min)
        pos = lengths[:, None] + depth
        if t.hybrid is None:
            out = t.forward(ids, pos, mask, self.cache, hidden)
        else:
            self._gdn_rounds = [t.hybrid.start_round(*self._tree_arrays(tr, s), dev) for tr, s in zip(trees, sizes)]
            with t.hybrid.verifying(self._gdn_rounds, [s + 1 for s in sizes], self._gdn_state):
                out = t.forward(ids, pos, mask, self.cache, hidden)
        self._pending = [s + 1 for s in sizes]
        self._parents = [np.asarray(tr.parent, dtype=np.int64) if s else np.empty(0, np.int64)
                         for tr, s in zip(trees, sizes)]
        return out.logits.float(), (out.hidden_states if hidden else None)

    def _tree_rows(self, roots, trees, sizes, q):
        """Every request's verify rows, padded to ``q``: token ids [B, Q], depths [B, Q] and the
        ancestor mask [B, Q, Q] (a padded row sees itself only), on the target's device."""
        bsz = len(roots)
        ids = torch.zeros((bsz, q), dtype=torch.long)
        depth = torch.zeros((bsz, q), dtype=torch.long)
        anc = torch.zeros((bsz, q, q), dtype=torch.bool)
        anc[:, torch.arange(q), torch.arange(q)] = True  # padded rows see themselves
        for b, (root, tr) in enumerate(zip(roots, trees)):
            ids[b, 0] = int(root)
            if sizes[b]:
                n1 = sizes[b] + 1
                ids[b, 1:n1] = torch.from_numpy(np.asarray(tr.token, dtype=np.int64))
                depth[b, 1:n1] = torch.from_numpy(np.asarray(tr.depth, dtype=np.int64))
                anc[b, :n1, :n1] = torch.from_numpy(tr.ancestor_mask())
        dev = self.target.device
        return ids.to(dev), depth.to(dev), anc.to(dev)

    @staticmethod
    def _tree_arrays(tree, size: int):
        """(parent [N], depth [N]) of a request's tree, empty for no tree."""
        if not size:
            return np.zeros(0, np.int64), torch.zeros(0, dtype=torch.long)
        return np.asarray(tree.parent), torch.as_tensor(np.asarray(tree.depth, dtype=np.int64))

    @torch.no_grad()
    def commit(self, paths: list) -> None:
        """Keep each request's root and accepted nodes ``paths[b]`` (a chain from its root)."""
        if self._pending is None:
            raise ValueError("commit: nothing to commit (call verify first)")
        if len(paths) != self.batch_size:
            raise ValueError(f"commit: {self.batch_size} requests, got {len(paths)} paths")
        keeps = []
        for b, path in enumerate(paths):
            path = [int(i) for i in path]
            prev = -1
            for i in path:
                if not 0 <= i < self._pending[b] - 1 or int(self._parents[b][i]) != prev:
                    raise ValueError(f"paths[{b}]: {path} is not a chain from the root of request {b}'s tree")
                prev = i
            keeps.append([0] + [i + 1 for i in path])
        dev = self.target.device
        m = max(len(k) for k in keeps)
        lengths = torch.tensor(self.lengths, device=dev)[:, None]
        rel = torch.arange(m)[None].repeat(len(keeps), 1)
        for b, k in enumerate(keeps):
            rel[b, : len(k)] = torch.tensor(k)
        rel = rel.to(dev)
        if any(k != list(range(len(k))) for k in keeps):  # each request's kept rows moved down onto [L_b, ...)
            src, dst = lengths + rel, lengths + torch.arange(m, device=dev)[None]
            for buf in self.kv:
                buf.move(src, dst)
        hyb = self.target.hybrid
        if hyb is not None:  # writes through the views into the batch rows
            for b, keep in enumerate(keeps):
                hyb.commit(self._gdn_rounds[b], keep, functools.partial(self._gdn_state, b))
            self._gdn_rounds = []
        self.lengths = [n + len(k) for n, k in zip(self.lengths, keeps)]
        self._pending = None
