"""The one key/value buffer (KVBuffer) against its slow twin, over random batched operations."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from reference_decode import SlowKV  # noqa: E402

from mfd_theory.llm.models.kv import MIN_CAPACITY, KVBuffer  # noqa: E402

KVH, D = 2, 3


def _rows(g, b, n):
    return torch.randn(b, KVH, n, D, generator=g), torch.randn(b, KVH, n, D, generator=g)


def _same(fast: KVBuffer, slow: SlowKV, lengths):
    assert fast.batch_size == len(lengths) == len(slow.k)
    for b, n in enumerate(lengths):
        k, v = slow.rows(b, n)
        assert torch.equal(fast.keys[b, :, :n], k) and torch.equal(fast.values[b, :, :n], v)


@pytest.mark.parametrize("seed", range(4))
def test_random_operations_equal_the_slow_twin(seed):
    """Sequences join with prompts of different lengths, get rows written at their own offsets
    (all of them, or a ragged subset), have rows moved down over overlapping ranges (a commit),
    leave, and the buffer grows past its capacity on the way."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    fast, slow, lengths = None, SlowKV(), []
    for step in range(40):
        op = rng.integers(4) if lengths else 0
        if op == 0 and len(lengths) < 5:  # a new sequence
            n = int(rng.integers(0, 300))
            k, v = _rows(g, 1, n)
            if fast is None:
                fast = KVBuffer.like(k, batch=0)
            fast.append(k, v)
            slow.append(k, v)
            lengths.append(n)
        elif op == 1:  # write Q rows after every sequence's length (a verify pass or a ragged append)
            q = int(rng.integers(1, 40))
            k, v = _rows(g, len(lengths), q)
            ragged = rng.random() < 0.5  # each sequence keeps its first t_b of the q rows
            t = rng.integers(0, q + 1, size=len(lengths)) if ragged else np.full(len(lengths), q)
            valid = torch.arange(q)[None] < torch.from_numpy(t)[:, None] if ragged else None
            fast.reserve(max(lengths) + q)
            if len(set(lengths)) == 1 and not ragged and rng.random() < 0.5:
                fast.write(lengths[0], k, v)  # the same offset for every sequence: one slice write
            else:
                fast.write(torch.tensor(lengths), k, v, valid)
            slow.write(lengths, k, v, valid)
            lengths = [n + int(tb) for n, tb in zip(lengths, t)]
        elif op == 2 and min(lengths) >= 8:  # a commit: kept rows moved down, ranges overlapping
            picks = [sorted(rng.choice(8, size=4, replace=False).tolist()) for _ in lengths]
            src = torch.tensor([[n - 8 + j for j in p] for n, p in zip(lengths, picks)])  # [B, 4]
            dst = torch.tensor([[n - 8 + j for j in range(4)] for n in lengths])
            fast.move(src, dst)
            slow.move(src.tolist(), dst.tolist())
        elif op == 3 and len(lengths) > 1:  # some sequences leave
            keep = sorted(rng.choice(len(lengths), size=int(rng.integers(1, len(lengths))), replace=False).tolist())
            fast.select(torch.tensor(keep))
            slow.select(keep)
            lengths = [lengths[i] for i in keep]
        if fast is not None:
            _same(fast, slow, lengths)
    assert fast.capacity > MIN_CAPACITY  # it grew on the way


def test_growth_doubles_and_keeps_the_used_rows():
    g = torch.Generator().manual_seed(0)
    k, v = _rows(g, 1, 10)
    buf = KVBuffer.like(k, 10)
    buf.write(0, k, v)
    assert buf.capacity == MIN_CAPACITY and not buf.reserve(MIN_CAPACITY)
    ptr = buf.keys.data_ptr()
    assert buf.reserve(MIN_CAPACITY + 1, used=10) and buf.capacity == 2 * MIN_CAPACITY
    assert buf.keys.data_ptr() != ptr and torch.equal(buf.read(10)[0], k) and torch.equal(buf.read(10)[1], v)
    assert buf.reserve(5 * MIN_CAPACITY) and buf.capacity == 5 * MIN_CAPACITY  # never less than asked
    assert not bool(buf.keys[:, :, 10:].any())  # fresh rows are zero: a batched read sees finite numbers
    with pytest.raises(ValueError, match="valid"):
        buf.write(0, k, v, valid=torch.ones(1, 10, dtype=torch.bool))
