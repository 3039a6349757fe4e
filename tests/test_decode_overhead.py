"""Decoding's per-round work outside the forwards: top-k candidates against a slow twin, warm_up."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import llm_helpers  # noqa: E402,F401  (single-threaded torch)
from llm_helpers import tiny_qwen3  # noqa: E402
from reference_decode import slow_topk  # noqa: E402

from mfd_theory.llm import build_drafter  # noqa: E402
from mfd_theory.llm.decoding.generate import build_tree, speculative_generate  # noqa: E402
from mfd_theory.llm.decoding.trees import _topk, _topk_torch  # noqa: E402
from mfd_theory.llm.decoding.warmup import warm_up  # noqa: E402


@pytest.mark.parametrize("shape,k", [((3, 5, 50), 7), ((4, 40), 40), ((2, 1, 9), 1)])
def test_topk_equals_the_slow_twin(shape, k):
    x = torch.log_softmax(torch.randn(shape, generator=torch.Generator().manual_seed(k)), dim=-1)
    vals, ids = _topk(x, k)
    ref_vals, ref_ids = slow_topk(x.numpy(), k)
    # continuous random values have no ties, so the ids are unique and must match exactly
    assert np.array_equal(ids, ref_ids) and np.array_equal(vals, ref_vals)
    assert vals.dtype == np.float64 and ids.dtype == np.int64


@pytest.mark.parametrize("select", [_topk, _topk_torch])
def test_topk_ties_go_to_the_lower_ids(select):
    # the cut and the order follow the builders' rule: lower token id first among equal values
    uniform = torch.log_softmax(torch.zeros(1, 10), dim=-1)
    assert select(uniform, 2)[1].tolist() == [[0, 1]]
    x = torch.tensor([[0.0, -1.0, 0.0, -1.0, -2.0, -1.0]])
    for k in range(1, 7):
        vals, ids = select(x, k)
        ref_vals, ref_ids = slow_topk(x.numpy(), k)
        assert np.array_equal(ids, ref_ids) and np.array_equal(vals, ref_vals), k
    # rows of a few distinct values (many ties), several leading axes, float32 and bfloat16
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randint(-3, 1, (3, 4, 60), generator=g).to(dtype)
        for k in (1, 5, 17, 60):
            vals, ids = select(x, k)
            ref_vals, ref_ids = slow_topk(x.float().numpy(), k)
            assert np.array_equal(ids, ref_ids) and np.array_equal(vals, ref_vals), (dtype, k)


def test_nan_drafts_are_still_refused():
    log_q = torch.log_softmax(torch.randn(2, 3, 20), dim=-1)
    log_q[1, 2, 5] = float("nan")
    with pytest.raises(ValueError):
        build_tree("mfd", torch.log_softmax(torch.zeros(2), 0), log_q, 8)


def test_warm_up_runs_every_method_and_leaves_decoding_unchanged():
    target = tiny_qwen3(seed=3)
    drafter = build_drafter(target, block_size=4, num_layers=1, num_modes=2, seed=1)
    prompt = torch.tensor([1, 2, 3, 4, 5])
    before = speculative_generate(target, drafter, prompt, 8, "mfd", budget=8).tokens
    warm_up(target, drafter, budget=8)
    warm_up()  # the tree builders alone
    assert speculative_generate(target, drafter, prompt, 8, "mfd", budget=8).tokens == before
    with pytest.raises(ValueError, match="methods"):
        warm_up(methods=("beam",))
