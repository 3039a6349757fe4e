"""The target's side of a batch: every request's attention rows (and GDN states) in batch buffers.

``BatchTarget`` prefills a request alone and appends it as a batch row, verifies every request's
tree in one forward over their rows packed one after another (projections, MLPs and GDN layers
over the real rows only; attention per request, each request's query rows gathered against its
own cache rows of a :class:`~mfd_theory.llm.models.kv.KVBuffer`), and commits each request's
accepted path. Design: docs/benchmarks.md ("Many requests at once").
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys

import numpy as np
import torch

from mfd_theory.llm.models.kv import KVBuffer
from mfd_theory.llm.models.target import TargetModel

__all__ = ["BatchTarget", "Verified"]


@functools.lru_cache(maxsize=None)
def _row_layer_class():
    """A cache layer whose ``update`` writes each packed row at its request's own offset."""
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


@dataclasses.dataclass
class Verified:
    """One verify pass over B requests' packed rows: ``logits`` [R, V] float32 (request b's root
    row at ``start[b]``, then its nodes), ``hidden`` the HF hidden-states tuple of [1, R, H] (or
    None), ``start`` [B + 1]."""

    logits: torch.Tensor
    hidden: tuple | None
    start: list[int]

    def rows(self, b: int) -> torch.Tensor:
        """Request b's logits [N_b + 1, V] (a view)."""
        return self.logits[self.start[b]: self.start[b + 1]]


class BatchTarget:
    """The target's batched state. ``add(prompt)`` prefills one request alone through ``target`` and
    appends it as the last batch row; ``drop(keep)`` keeps the listed rows; ``verify(roots, trees)``
    runs one forward over every row's [root, nodes]; ``commit(paths)`` keeps each row's root and
    accepted nodes.

    Request b's committed attention rows are ``[0, L_b)`` of its batch row. A verify pass runs the
    model once over every request's [root, nodes] rows packed into one sequence [1, R] (R = the
    sum of the trees' rows, no padding), each at position L_b + depth: projections, MLPs, norms,
    the LM head and (hybrids) the GDN layers see the real rows only. Attention writes request b's
    rows at ``[L_b, L_b + Q_b)`` of its batch row and attends per request: the packed queries are
    gathered into [B, Q, ...] (Q the largest tree's rows) against the first ``max_b L_b + Q`` cache
    rows under a float additive mask [B, 1, Q, max L + Q] that shows each query its own context and
    tree ancestors only, through the model's own attention function, and scattered back; only that
    gather is padded. On hybrid targets the GDN layers run over the whole forest at once
    (:meth:`HybridTree.verifying`)."""

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
        self._rows: tuple = ()  # each packed verify row's (request, cache row, row in its request) [R]
        self._q = 0  # the largest tree's rows in the pending verify
        self._pending: list[int] | None = None  # rows verified per request (root + nodes)
        self._parents: list[np.ndarray] = []
        self._gdn_round = None

    @property
    def batch_size(self) -> int:
        return len(self.lengths)

    @property
    def max_length(self) -> int:
        return max(self.lengths) if self.lengths else 0

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
        """Write a forward's packed rows [1, kvh, R, d] at each request's offset; the keys it reads."""
        self.kv[j].scatter(self._rows[0], self._rows[1], ks[0], vs[0])
        return self.kv[j].read(self.max_length + self._q)

    @contextlib.contextmanager
    def _per_request_attention(self, mask: torch.Tensor):
        """Inside the block the model's attention function (whichever it is configured with) runs
        per request: packed queries [1, h, R, d] gathered into [B, h, Q, d] against the batch cache
        rows under ``mask``, then scattered back to the packed rows."""
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        impl = getattr(self.target.model.config, "_attn_implementation", None) or "eager"
        had = impl in ALL_ATTENTION_FUNCTIONS._local_mapping
        before = ALL_ATTENTION_FUNCTIONS._local_mapping.get(impl)
        bi, ji = self._rows[0], self._rows[2]  # [R] each packed row's request and row within it

        def attention(module, query, key, value, attention_mask, **kwargs):
            inner = before if had else (ALL_ATTENTION_FUNCTIONS._global_mapping.get(impl) if impl != "eager"
                                        else getattr(sys.modules[type(module).__module__], "eager_attention_forward"))
            qp = query.new_zeros((self.batch_size, query.shape[1], self._q, query.shape[3]))  # [B, h, Q, d]
            qp[bi, :, ji] = query[0].transpose(0, 1)  # [R, h, d]
            out, weights = inner(module, qp, key, value, mask, **kwargs)  # [B, Q, h, d]
            return out[bi, ji][None], weights  # [1, R, h, d]

        ALL_ATTENTION_FUNCTIONS[impl] = attention
        try:
            yield
        finally:
            if had:
                ALL_ATTENTION_FUNCTIONS[impl] = before
            else:
                del ALL_ATTENTION_FUNCTIONS[impl]

    @torch.no_grad()
    def verify(self, roots: list[int], trees: list, hidden: bool = True) -> Verified:
        """One forward over every request's [root, nodes] rows, packed (see the class docstring)."""
        if self._pending is not None:
            raise ValueError("verify: the previous verification was not committed")
        bsz = self.batch_size
        if len(roots) != bsz or len(trees) != bsz:
            raise ValueError(f"verify: {bsz} requests in the batch, got {len(roots)} roots and {len(trees)} trees")
        t = self.target
        dev = t.device
        sizes = [0 if tr is None else len(tr) for tr in trees]
        for b, tr in enumerate(trees):
            t.check_positions(self.lengths[b] + 1 + (int(tr.depth.max()) if sizes[b] else 0))
        q = max(sizes) + 1
        start = np.concatenate([[0], np.cumsum(np.asarray(sizes) + 1)])
        ids, depth, anc, parents, depths = self._tree_rows(roots, trees, sizes, start, q)
        end = self.max_length + q
        for buf in self.kv:
            buf.reserve(end)
        lengths = torch.tensor(self.lengths, device=dev)
        row_b = torch.repeat_interleave(torch.arange(bsz), torch.tensor(sizes) + 1).to(dev)  # [R]
        row_j = (torch.arange(int(start[-1])) - torch.as_tensor(start[:-1]).repeat_interleave(
            torch.tensor(sizes) + 1)).to(dev)  # [R] row within its request
        self._rows, self._q = (row_b, lengths[row_b] + row_j, row_j), q
        cols = torch.arange(end, device=dev)
        vis = (cols[None, None, :] < lengths[:, None, None]).expand(bsz, q, end).clone()  # own context
        write_pos = lengths[:, None] + torch.arange(q, device=dev)[None]  # [B, Q]
        vis.scatter_(2, write_pos[:, None, :].expand(bsz, q, q), anc)
        mask = torch.zeros((bsz, 1, q, end), dtype=t.dtype, device=dev)
        mask.masked_fill_(~vis[:, None], torch.finfo(t.dtype).min)
        pos = (lengths[row_b] + depth)[None]  # [1, R]
        with self._per_request_attention(mask):
            if t.hybrid is None:
                out = t.forward(ids[None], pos, mask, self.cache, hidden)
            else:
                self._gdn_round = t.hybrid.start_round(parents, dev, depths)
                with t.hybrid.verifying(self._gdn_round, self._gdn_states):
                    out = t.forward(ids[None], pos, mask, self.cache, hidden)
        self._pending = [s + 1 for s in sizes]
        self._parents = parents
        return Verified(out.logits[0].float(), out.hidden_states if hidden else None, start.tolist())

    def _tree_rows(self, roots, trees, sizes, start, q):
        """Every request's verify rows, packed: token ids [R], depths [R], on the target's device;
        the padded ancestor mask [B, Q, Q] (a padded row sees itself only); each tree's parents
        and depths (numpy)."""
        bsz = len(roots)
        R = int(start[-1])
        ids = np.zeros(R, dtype=np.int64)
        depth = np.zeros(R, dtype=np.int64)
        anc = np.zeros((bsz, q, q), dtype=bool)
        anc[:, np.arange(q), np.arange(q)] = True  # padded rows see themselves
        parents, depths = [], []
        for b, (root, tr) in enumerate(zip(roots, trees)):
            s = int(start[b])
            ids[s] = int(root)
            if sizes[b]:
                n1 = sizes[b] + 1
                ids[s + 1: s + n1] = tr.token
                depth[s + 1: s + n1] = tr.depth
                anc[b, :n1, :n1] = tr.ancestor_mask()
                parents.append(np.asarray(tr.parent, dtype=np.int64))
                depths.append(np.asarray(tr.depth, dtype=np.int64))
            else:
                parents.append(np.empty(0, np.int64))
                depths.append(np.empty(0, np.int64))
        dev = self.target.device
        return (torch.from_numpy(ids).to(dev), torch.from_numpy(depth).to(dev), torch.from_numpy(anc).to(dev),
                parents, depths)

    def _gdn_states(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Every request's GDN state of layer ``idx``: the batch buffers [B, C, K], [B, Hv, Dk, Dv]."""
        return self._conv[idx], self._rec[idx]

    @torch.no_grad()
    def commit(self, paths: list) -> None:
        """Keep each request's root and accepted nodes ``paths[b]`` (a chain from its root)."""
        if self._pending is None:
            raise ValueError("commit: nothing to commit (call verify first)")
        if len(paths) != self.batch_size:
            raise ValueError(f"commit: {self.batch_size} requests, got {len(paths)} paths")
        keeps = []
        for b, path in enumerate(paths):
            p = np.asarray(path, dtype=np.int64).reshape(-1)
            par = self._parents[b]
            # a chain from the root: each node exists and is the child of the one before
            ok = ((p >= 0) & (p < self._pending[b] - 1)).all() and (
                p.size == 0 or (par[p] == np.concatenate([[-1], p[:-1]])).all())
            if not ok:
                raise ValueError(f"paths[{b}]: {p.tolist()} is not a chain from the root of request {b}'s tree")
            keeps.append([0, *(p + 1).tolist()])
        dev = self.target.device
        m = max(len(k) for k in keeps)
        if any(k != list(range(len(k))) for k in keeps):  # each request's kept rows moved down onto [L_b, ...)
            rel = np.tile(np.arange(m), (len(keeps), 1))
            for b, k in enumerate(keeps):
                rel[b, : len(k)] = k
            lengths = torch.tensor(self.lengths, device=dev)[:, None]
            src, dst = lengths + torch.from_numpy(rel).to(dev), lengths + torch.arange(m, device=dev)[None]
            for buf in self.kv:
                buf.move(src, dst)
        hyb = self.target.hybrid
        if hyb is not None:  # writes the batch buffers in place
            hyb.commit(self._gdn_round, keeps, self._gdn_states)
            self._gdn_round = None
        self.lengths = [n + len(k) for n, k in zip(self.lengths, keeps)]
        self._pending = None
