"""The Drafter protocol: every drafter decoding sees declares what it can do, and a batch gets the
drafting state the drafter chooses (decoding looks at no class name)."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_helpers import DecoyDrafter, OracleDrafter, tiny_qwen3  # noqa: E402

from mfd_theory.llm import TargetModel, build_drafter  # noqa: E402
from mfd_theory.llm.decoding.batch import speculative_generate_batch  # noqa: E402
from mfd_theory.llm.models.drafter import BatchDraftContext  # noqa: E402
from mfd_theory.llm.models.protocol import Drafter, SequentialBatch, TreeGrower  # noqa: E402


@pytest.fixture(scope="module")
def model():
    return tiny_qwen3(seed=0)


def test_every_drafter_satisfies_the_protocol_and_declares_tree_growth(model):
    drafters = {"block": build_drafter(model, block_size=4, num_layers=1, seed=1),
                "mfd": build_drafter(model, block_size=4, num_layers=1, num_modes=2, seed=1),
                "domino": build_drafter(model, block_size=4, num_layers=1, seed=1, kind="dartree"),
                "oracle": OracleDrafter(model, block_size=4), "decoy": DecoyDrafter(model, block_size=4)}
    grows = {"block": False, "mfd": False, "domino": True, "oracle": True, "decoy": True}
    for name, d in drafters.items():
        assert isinstance(d, Drafter), name
        assert d.grows_trees is grows[name], name
        assert isinstance(d, TreeGrower) is grows[name], name
        d.observe_tokens([1, 2, 3])  # every drafter takes the committed tokens (most ignore them)
    assert isinstance(drafters["block"].batch_context(), BatchDraftContext)
    assert isinstance(drafters["mfd"].batch_context(), BatchDraftContext)
    assert isinstance(drafters["oracle"].batch_context(), SequentialBatch)
    with pytest.raises(ValueError, match="dartree"):
        drafters["domino"].batch_context()


def test_batched_seed_leaves_room_for_every_request(model):
    """Request i samples with seed + i, which torch.Generator.manual_seed takes up to 2**64 - 1."""
    target = TargetModel(model)
    prompts = [[1, 2], [3, 4, 5], [6]]
    top = 2 ** 64 - len(prompts)
    res = speculative_generate_batch(target, None, prompts, 2, "ar", temperature=1.0, seed=top)
    assert [len(r.tokens) for r in res.results] == [2, 2, 2]
    with pytest.raises(ValueError, match="seed"):
        speculative_generate_batch(target, None, prompts, 2, "ar", temperature=1.0, seed=top + 1)
