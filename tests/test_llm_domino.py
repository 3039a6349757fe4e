"""Domino drafter and method "dartree": tree growth vs its slow twin, losslessness, checkpoints, training."""

import itertools
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_helpers import detectable_distance, hf_greedy, sampled_continuations_pvalue, tiny_qwen3  # noqa: E402
from reference_decode import slow_path_tree  # noqa: E402

from mfd_theory.llm import TargetModel  # noqa: E402
from mfd_theory.llm.decoding.generate import build_tree, speculative_generate  # noqa: E402
from mfd_theory.llm.models.domino import DominoDrafter  # noqa: E402
from mfd_theory.llm.models.drafter import build_drafter, load_drafter  # noqa: E402

PROMPTS = [[3, 7, 1, 9, 4], [50, 2], [11, 12, 13, 14, 15, 16, 17, 18, 19]]
SCORE_TOL = 1e-5  # float32 GRU and log-softmax evaluated for one path vs a batched frontier: rounding only
P_MIN = 1e-3  # chi-square p-value floor: fixed seeds, so a pass is deterministic, not flaky


@pytest.fixture(scope="module")
def model():
    return tiny_qwen3(seed=0)


@pytest.fixture(scope="module")
def target(model):
    return TargetModel(model)


def _domino(model, block_size=5, seed=3, rank=8, strong=False):
    d = build_drafter(model, block_size=block_size, num_layers=1, seed=seed, kind="dartree", rank=rank)
    if strong:  # peaked block logits and a correction driven by the path's tokens
        h = d.config.hidden_size
        with torch.no_grad():
            d.norm.weight.mul_(8.0)
            d.correction.in_proj.weight[:, :h].mul_(100.0)  # the previous token's half of the input
            d.correction.gru.weight_ih.mul_(5.0)
            d.correction.up.weight.mul_(20.0)
    return d.eval()


def _drafted(model, drafter, prompt=(3, 7, 1, 9, 4), root=4):
    with torch.no_grad():
        hs = model(torch.tensor([list(prompt)]), output_hidden_states=True).hidden_states
    drafter.reset()
    _, log_q = drafter.draft_modes(drafter.fuse_hidden(hs), root)
    return log_q[0]  # [L, V]


# ------------------------------------------------------------------------------------ building
def test_build_kind(model):
    d = build_drafter(model, block_size=4, num_layers=1, kind="dartree", rank=5)
    assert isinstance(d, DominoDrafter) and d.num_modes == 1 and d.correction_rank == 5
    plain = set(dict(build_drafter(model, block_size=4, num_layers=1).named_parameters()))
    extra = set(dict(d.named_parameters())) - plain
    assert extra == {"correction.in_proj.weight", "correction.gru.weight_ih", "correction.gru.weight_hh",
                     "correction.gru.bias_ih", "correction.gru.bias_hh", "correction.up.weight"}
    assert d.correction.up.weight.shape == (64, 5)


@pytest.mark.parametrize("kind", ["domino", "", None, 3, "DARTREE"])
def test_bad_kind(model, kind):
    with pytest.raises(ValueError, match="kind"):
        build_drafter(model, block_size=4, num_layers=1, kind=kind)


def test_bad_modes_and_rank(model):
    with pytest.raises(ValueError, match="num_modes"):
        build_drafter(model, block_size=4, num_layers=1, num_modes=2, kind="dartree")
    with pytest.raises(ValueError, match="rank"):
        build_drafter(model, block_size=4, num_layers=1, kind="dartree", rank=0)
    with pytest.raises(ValueError, match="rank"):
        build_drafter(model, block_size=4, num_layers=1, rank=4)


def test_dartree_needs_a_domino_drafter(model, target):
    with pytest.raises(ValueError, match="Domino"):
        speculative_generate(target, build_drafter(model, block_size=4, num_layers=1), [1, 2], 4, "dartree")
    with pytest.raises(ValueError, match="dartree"):
        build_tree("dartree", torch.zeros(1), torch.zeros(1, 3, 5), 4)
    # a per-round cut keeps a tree's first nodes, which a depth-by-depth tree does not order best first
    with pytest.raises(ValueError, match="budget_rule"):
        speculative_generate(target, _domino(model), [1, 2], 4, "dartree", budget=4, budget_rule=lambda g: 2)


# ------------------------------------------------------------------------------------ tree growth
@pytest.mark.parametrize("budget,strong,depths", [(1, False, 4), (6, False, 4), (20, True, 4), (40, True, 2),
                                                  (300, True, 2), (60, True, 4)])
def test_grow_tree_equals_best_first_twin(model, budget, strong, depths):
    d = _domino(model, strong=strong)
    log_q = _drafted(model, d)[:depths]
    tree, times = d.grow_tree(4, log_q, budget)
    ref = slow_path_tree(d, 4, log_q, budget)
    got = dict(zip(tree.paths(), tree.log_score.tolist()))
    assert set(got) == set(ref)
    assert len(tree) == min(budget, sum(64 ** i for i in range(1, depths + 1)))
    assert max(abs(got[p] - ref[p]) for p in ref) < SCORE_TOL
    assert 1 <= len(times) <= depths and all(t >= 0 for t in times)
    assert (np.diff(tree.depth) >= 0).all()  # grown depth by depth


def test_children_depend_on_the_path(model):
    """With a strong correction the same token at the same depth gets a different conditional under
    different parents (a product tree's would be equal)."""
    d = _domino(model, strong=True)
    tree, _ = d.grow_tree(4, _drafted(model, d), 30)
    cond = tree.log_score - np.where(tree.parent >= 0, tree.log_score[np.maximum(tree.parent, 0)], 0.0)
    by_key: dict = {}
    for i, key in enumerate(zip(tree.depth.tolist(), tree.token.tolist())):
        by_key.setdefault(key, []).append(cond[i])
    spread = max(max(v) - min(v) for v in by_key.values() if len(v) > 1)
    assert spread > 0.1


def test_no_correction_is_the_product_tree(model):
    """With the correction's output zeroed every parent has the block's own distribution: the
    grown tree is DDTree's product tree (same paths, same scores)."""
    d = _domino(model, strong=True)
    with torch.no_grad():
        d.correction.up.weight.zero_()
    log_q = _drafted(model, d)
    for budget in (3, 17, 50):
        tree, _ = d.grow_tree(4, log_q, budget)
        ref = build_tree("ddtree", torch.zeros(1), log_q[None], budget)
        got = dict(zip(tree.paths(), tree.log_score.tolist()))
        want = dict(zip(ref.paths(), ref.log_score.tolist()))
        assert set(got) == set(want)
        assert max(abs(got[p] - want[p]) for p in want) < SCORE_TOL


def test_teacher_forced_training_forward_matches_drafting(model):
    """train_forward's corrected distribution at position d, fed the true path x_0..x_{d-1}, is the
    one the tree growth uses for that path's children (same weights, rounding only)."""
    d = _domino(model, strong=True)
    prompt, root = [3, 7, 1, 9, 4], 4
    log_q = _drafted(model, d, prompt, root)
    path = [5, 17, 2, 60]
    with torch.no_grad():
        ctx = d.fuse_hidden(model(torch.tensor([prompt]), output_hidden_states=True).hidden_states)
        block = torch.full((1, 5), int(d.mask_token_id))
        block[0, 0] = root
        out = d.train_forward(ctx, block, None, paths=torch.tensor([[root, *path]]))  # [1, 4, V]
    for depth in range(4):
        ref = d.corrected_log_probs(root, path[:depth], log_q)
        assert torch.allclose(out[0, depth], ref, atol=SCORE_TOL)
    with pytest.raises(ValueError, match="paths"):
        d.train_forward(ctx, block, None)


# ------------------------------------------------------------------------------------ decoding

def test_greedy_equals_hf_generate(model, target):
    """Budgets below and above the block's L = 4; a strongly corrected drafter and a plain one."""
    for drafter, prompt, n, budget in itertools.product(
            (_domino(model), _domino(model, seed=5, strong=True)), PROMPTS, (1, 9, 24), (2, 12)):
        res = speculative_generate(target, drafter, prompt, n, "dartree", budget=budget, keep_trees=True)
        assert res.tokens == hf_greedy(model, prompt, n), (prompt, n, budget)
        for s in res.steps:
            assert s.tree_size <= budget
            if s.tree_size:
                assert len(s.t_draft_depths) >= 2 and all(t >= 0 for t in s.t_draft_depths)
                assert sum(s.t_draft_depths) <= s.t_draft + 1e-3
                assert s.predicted == pytest.approx(s.accepted)  # greedy: one-hot conditionals


def test_sampled_decoding_is_the_targets_own_sampling():
    """1,500 three-token continuations through method "dartree" (V = 5, block size 3): the output
    distribution is the target's own (chi-square). Sized as the other methods' check
    (test_llm_decode): at level P_MIN it finds an output off by a chi-square distance of 0.075 with
    probability >= 0.99 (with the 4,000 draws before: 0.028)."""
    assert detectable_distance(1_500, 5 ** 3 - 1, P_MIN) <= 0.075
    m = tiny_qwen3(vocab_size=5, hidden_size=16, num_layers=1, seed=3, init_std=0.5)
    d = _domino(m, block_size=3, seed=1, rank=4, strong=True)
    # seeds 1,500-2,999, as test_llm_decode's check (why: there)
    assert sampled_continuations_pvalue(m, vocab_size=5, n=1_500, methods=("dartree",), drafter=d,
                                        first_seed=1_500) > P_MIN


# ------------------------------------------------------------------------------------ checkpoints
def test_checkpoint_round_trip(model, tmp_path):
    d = _domino(model, strong=True)
    d.save_pretrained(tmp_path / "dom")
    cfg = json.loads((tmp_path / "dom" / "config.json").read_text())
    assert cfg["architectures"] == ["DominoDraftModel"]
    assert cfg["dflash_config"]["dartree"]["rank"] == 8
    assert set(cfg["dflash_config"]["dartree"]["parameters"]) == {
        n for n in d.state_dict() if n.startswith("correction.")}
    back = load_drafter(tmp_path / "dom", model)
    assert isinstance(back, DominoDrafter) and back.correction_rank == 8
    assert DominoDrafter.from_pretrained(tmp_path / "dom", model).correction_rank == 8
    for (n, a), (m, b) in zip(d.state_dict().items(), back.state_dict().items()):
        assert n == m and torch.equal(a, b)
    log_q = _drafted(model, d)
    t1, _ = d.grow_tree(4, log_q, 25)
    t2, _ = back.eval().grow_tree(4, _drafted(model, back), 25)
    assert t1 == t2


def test_checkpoint_refused_for_another_target(model, tmp_path):
    _domino(model).save_pretrained(tmp_path / "dom")
    other = tiny_qwen3(seed=9)  # same shapes, other weights
    with pytest.raises(ValueError, match="another target"):
        load_drafter(tmp_path / "dom", other)


def test_train_drafter_trains_the_correction(model, tmp_path):
    """A few teacher-forced steps: the head's weights move, the loss falls, the checkpoint loads."""
    from mfd_theory.llm.training.train import DrafterTrainConfig, train_drafter

    g = np.random.default_rng(0)
    data = g.integers(0, 64, size=(8, 20))
    d = build_drafter(model, block_size=4, num_layers=1, seed=0, kind="dartree", rank=4)
    before = d.correction.up.weight.detach().clone()
    cfg = DrafterTrainConfig(block_size=4, num_layers=1, batch_size=4, blocks_per_seq=2, steps=12, lr=1e-2,
                             warmup=1, ckpt_every=100)
    curve = train_drafter(model, d, data, 6, tmp_path / "run", cfg, progress=False)
    assert len(curve) == 12
    assert not torch.equal(before, d.correction.up.weight)
    assert np.mean([c["loss"] for c in curve[-3:]]) < np.mean([c["loss"] for c in curve[:3]])
    back = load_drafter(tmp_path / "run" / "drafter", model)
    assert isinstance(back, DominoDrafter) and torch.equal(back.correction.up.weight, d.correction.up.weight)


def test_grow_tree_bad_input(model):
    d = _domino(model)
    with pytest.raises(ValueError, match="draft_modes"):
        d.grow_tree(4, torch.zeros(4, 64), 8)  # nothing drafted yet
    log_q = _drafted(model, d)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="budget"):
            d.grow_tree(4, log_q, bad)
    with pytest.raises(ValueError, match="log_q"):
        d.grow_tree(4, torch.cat([log_q, log_q]), 8)  # deeper than the drafted block
