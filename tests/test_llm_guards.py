"""Real-model guards: the context limit, unsupported targets, argument checks, committed state."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_helpers import OracleDrafter, hf_greedy, tiny_qwen3  # noqa: E402

from mfd_theory.llm import TargetModel, build_drafter  # noqa: E402
from mfd_theory.llm.decoding.generate import METHODS, sampling_probs, speculative_generate  # noqa: E402
from mfd_theory.trees import DraftTree  # noqa: E402

ATOL = 1e-4  # float32 forwards over differently shaped batches differ in rounding only


@pytest.fixture(scope="module")
def model():
    return tiny_qwen3(seed=0)


@pytest.fixture(scope="module")
def target(model):
    return TargetModel(model)


@pytest.fixture(scope="module")
def block(model):
    return build_drafter(model, block_size=4, num_layers=1)


@pytest.fixture(scope="module")
def short():
    """A target with a 64-position context."""
    return tiny_qwen3(seed=2, max_position_embeddings=64)



def _prompt(n, seed=0):
    return torch.randint(1, 60, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


# ------------------------------------------------------------------------------- context limit
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("block_size", [8, 16])
def test_generation_near_the_context_limit_finishes_like_hf(short, method, block_size):
    """50 prompt + 10 new tokens on a 64-position target: an accepting drafter's full-depth trees
    would run past position 63 (depth 15 in the first round, depth 7 in the second); the depth is
    capped to the positions and new tokens left, and the output is HF's."""
    prompt = _prompt(50)
    drafter = OracleDrafter(short, block_size=block_size, num_modes=2, seed=1, corrupt=0.0)
    res = speculative_generate(TargetModel(short), drafter, prompt, 10, method, budget=16)
    assert res.tokens == hf_greedy(short, prompt, 10)
    if method != "ar":
        assert max(s.accepted for s in res.steps) >= 2  # the drafter was really accepted


@pytest.mark.parametrize("method", ["ar", "mfd"])
def test_a_full_context_prompt_plus_one_token(short, method):
    """A generation of T prompt + n new tokens occupies T + n - 1 positions (the last emitted token
    is never fed back): 64 + 1 fits a 64-position target, as HF generate agrees; 64 + 2 does not."""
    prompt = _prompt(64, seed=1)
    drafter = OracleDrafter(short, block_size=6, num_modes=2, seed=1, corrupt=0.0)
    res = speculative_generate(TargetModel(short), drafter, prompt, 1, method, budget=16)
    assert res.tokens == hf_greedy(short, prompt, 1)
    res = speculative_generate(TargetModel(short), drafter, prompt[:60], 5, method, budget=16)
    assert res.tokens == hf_greedy(short, prompt[:60], 5)
    with pytest.raises(ValueError, match="max_new_tokens: a 64-token prompt plus 2 new tokens needs 65 positions"):
        speculative_generate(TargetModel(short), drafter, prompt, 2, method, budget=16)


# ------------------------------------------------------------------------------- unsupported targets
def test_flex_attention_target_is_refused_at_construction():
    m = tiny_qwen3(seed=1)
    m.config._attn_implementation = "flex_attention"
    with pytest.raises(ValueError, match="attn_implementation"):
        TargetModel(m)


def test_multi_device_target_is_refused_at_construction():
    m = tiny_qwen3(seed=1)
    # what accelerate records for device_map="auto" over two GPUs (or GPU plus CPU offload)
    m.hf_device_map = {"model.embed_tokens": 0, "model.layers": 0, "model.norm": 1, "lm_head": 1}
    with pytest.raises(ValueError, match="device_map"):
        TargetModel(m)
    m.hf_device_map = {"": 0}  # device_map="auto" on a single device is fine
    TargetModel(m, check_mask=False)


def test_parameters_on_two_devices_are_refused():
    m = tiny_qwen3(seed=1)
    m.lm_head.to("meta")  # a second device without any hf_device_map
    with pytest.raises(ValueError, match="hf_model.*devices"):
        TargetModel(m)


# ------------------------------------------------------------------------------- argument checks
@pytest.mark.parametrize("name, value", [
    ("budget", None), ("budget", math.nan), ("budget", math.inf), ("budget", "8"), ("budget", 2.5),
    ("max_new_tokens", None), ("max_new_tokens", math.nan), ("max_new_tokens", math.inf),
    ("temperature", None), ("temperature", math.nan), ("temperature", "1"), ("temperature", 1e-40),
    ("top_p", None), ("top_p", math.nan),
    ("seed", None), ("seed", 1.5), ("seed", -1), ("seed", "3"), ("seed", 2 ** 64),
])
def test_bad_arguments_name_themselves(target, block, name, value):
    kw = dict(max_new_tokens=4, method="mfd", budget=8, temperature=0.5, top_p=1.0, seed=0)
    kw[name] = value
    with pytest.raises(ValueError, match=name):
        speculative_generate(target, block, [1, 2, 3], **kw)


@pytest.mark.parametrize("ids", [[1.0, 2.0], torch.tensor([1.0, 2.0]), torch.tensor([True, False]),
                                 np.array([1.5, 2.0])])
def test_non_integer_input_ids_are_refused(target, block, ids):
    with pytest.raises(ValueError, match="input_ids"):
        speculative_generate(target, block, ids, 4, "mfd")
    with pytest.raises(ValueError, match="input_ids"):
        target.prefill(torch.as_tensor(ids))


def test_integral_values_of_other_types_are_accepted(model, target, block):
    ref = hf_greedy(model, [1, 2, 3], 4)
    res = speculative_generate(target, block, np.array([1, 2, 3], dtype=np.int32), np.int64(4), "mfd",
                               budget=8.0, seed=2 ** 64 - 1)
    assert res.tokens == ref


def test_tiny_temperature_samples_the_argmax(model, target, block):
    """softmax(logits / T) for the smallest usable T: the max is subtracted first, so nothing
    overflows, and sampling is greedy decoding (the tiny model's logits have no exact ties)."""
    tiny = torch.finfo(torch.float32).tiny
    logits = torch.tensor([[3.0, 1.0, -2.0], [0.5, 0.25, 4.0]])
    assert torch.equal(sampling_probs(logits, tiny), torch.tensor([[1.0, 0, 0], [0, 0, 1.0]]))
    prompt = [5, 9, 2, 7]
    for method in ("ar", "chain", "mfd"):
        res = speculative_generate(target, block, prompt, 8, method, budget=8, temperature=1e-30, seed=1)
        assert res.tokens == hf_greedy(model, prompt, 8)


# ------------------------------------------------------------------------------- commit
def _verified(model):
    t = TargetModel(model, check_mask=False)
    t.prefill(torch.tensor([1, 2, 3, 4]))
    tree = DraftTree.from_paths([(5,), (9,), (5, 2), (5, 7), (9, 2), (5, 2, 11)])
    t.verify(42, tree)
    return t, tree


@pytest.mark.parametrize("kind", ["siblings", "repeat", "skips the root's child", "wrong order", "other branch"])
def test_commit_refuses_a_path_that_is_not_a_chain_from_the_root(model, kind):
    t, tree = _verified(model)
    node = {tuple(p): i for i, p in enumerate(tree.paths())}
    path = {
        "siblings": [node[(5,)], node[(9,)]],
        "repeat": [node[(5,)], node[(5,)]],
        "skips the root's child": [node[(5, 2)]],
        "wrong order": [node[(5, 2)], node[(5,)]],
        "other branch": [node[(5,)], node[(9, 2)]],
    }[kind]
    with pytest.raises(ValueError, match="path"):
        t.commit(path)
    t.commit([node[(9,)], node[(9, 2)]])  # the refused commit left the verification pending and intact
    ref = TargetModel(model, check_mask=False)
    ref.prefill(torch.tensor([1, 2, 3, 4, 42, 9, 2]))
    for a, b in zip(t.cache.layers, ref.cache.layers):
        assert torch.allclose(a.keys, b.keys, atol=ATOL) and torch.allclose(a.values, b.values, atol=ATOL)


@pytest.mark.parametrize("method", METHODS)
def test_cache_holds_exactly_the_committed_sequence_at_return(model, method):
    """At return the cache is the prompt plus every output token but the last (which was never fed
    to the target), whether generation stopped at max_new_tokens or at EOS, mid-path or on a bonus."""
    prompt = [3, 7, 1, 9, 4]
    free = hf_greedy(model, prompt, 12)
    cases = [(n, []) for n in (1, 2, 5, 9, 12)] + [(12, free[j]) for j in range(10) if free[j] not in free[:j]]
    mid_path = 0
    for n, eos in cases:
        t = TargetModel(model, check_mask=False)
        res = speculative_generate(t, OracleDrafter(model, 6, 2, seed=n), prompt, n, method, budget=12,
                                   eos_token_id=eos)
        fed = prompt + res.tokens[:-1]
        mid_path += bool(res.steps) and res.steps[-1].emitted <= res.steps[-1].accepted  # EOS on a draft token
        assert t.length == len(fed) and t.cache.get_seq_length() == len(fed), (n, eos)
        ref = TargetModel(model, check_mask=False)
        ref.prefill(torch.tensor(fed))
        for a, b in zip(t.cache.layers, ref.cache.layers):
            assert a.keys.shape == b.keys.shape
            assert torch.allclose(a.keys, b.keys, atol=ATOL) and torch.allclose(a.values, b.values, atol=ATOL)
        # the returned state continues like a fresh one: feed the last token as the next root
        nxt = int(t.verify(res.tokens[-1]).logits[0].argmax())
        t.commit([])
        assert nxt == hf_greedy(model, prompt + res.tokens, 1)[0]
    assert mid_path > 0 or method == "ar"  # the last round's path was cut short, and still committed


def test_a_tokenizer_output_is_taken_as_its_input_ids(model, target, block):
    from transformers import BatchEncoding

    ref = speculative_generate(target, block, torch.tensor([[5, 6, 7, 8]]), 6, "ddtree", budget=4).tokens
    enc = BatchEncoding({"input_ids": torch.tensor([[5, 6, 7, 8]]), "attention_mask": torch.ones(1, 4)})
    assert speculative_generate(target, block, enc, 6, "ddtree", budget=4).tokens == ref
    assert speculative_generate(target, block, {"input_ids": [5, 6, 7, 8]}, 6, "ddtree", budget=4).tokens == ref


@pytest.mark.parametrize("junk", [None, "5 6 7", b"\x05", object(), {"ids": [1, 2]}, [[1, 2], [3]],
                                  {"input_ids": None}])
def test_junk_input_ids_are_refused_naming_them(target, block, junk):
    with pytest.raises(ValueError, match="input_ids"):
        speculative_generate(target, block, junk, 4, "mfd")
