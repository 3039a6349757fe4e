"""The held-out greedy tau (one target forward per sequence, every round replayed from it) against
its slow twin, the decode itself: ``speculative_generate`` at T = 0 on the same prompt and number
of new tokens, round by round."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_helpers import greedy_answers, hf_greedy  # noqa: E402

from mfd_theory.llm import build_drafter  # noqa: E402
from mfd_theory.llm.decoding.generate import speculative_generate  # noqa: E402
from mfd_theory.llm.measure.heldout import greedy_prefix, heldout_greedy_tau, tree_accepts  # noqa: E402
from mfd_theory.llm.models.testing import tiny_llama, tiny_qwen2, tiny_qwen3  # noqa: E402
from mfd_theory.trees import DraftTree  # noqa: E402

V = 12
# no prompt holds id 0: the tiny models' generation config calls it padding, which HF generate masks
PROMPTS = [[3, 7, 1, 9, 4], [5, 2], [1, 2, 3, 4, 5, 6, 7, 8], [6, 6, 10]]
NEW = [14, 9, 20, 1]


def _slow_tau(target, drafter, prompts, new, method, budget, scorer):
    """The twin: decode each prompt losslessly at T = 0 and read every round's accepted length."""
    rounds, per_seq = [], []
    for p, n in zip(prompts, new):
        res = speculative_generate(target, drafter, torch.tensor(p), n, method, budget=budget, temperature=0.0,
                                   scorer=scorer)
        acc = [s.accepted for s in res.steps]
        rounds += acc
        per_seq.append(float(np.mean(acc) + 1) if acc else float("nan"))
    return rounds, per_seq


@pytest.mark.parametrize("family,modes,vocab,budget", [
    (tiny_qwen3, 1, None, 8), (tiny_qwen2, 1, None, 1), (tiny_llama, 2, None, 6), (tiny_qwen3, 2, [0, 1, 2, 3, 5, 8, 9], 8),
    (tiny_qwen2, 4, None, 16),
])
def test_heldout_tau_equals_the_decode_round_by_round(family, modes, vocab, budget):
    target = family(vocab_size=V, seed=1, init_std=0.6) if family is tiny_qwen3 else family(vocab_size=V, seed=1)
    drafter = build_drafter(target, 5, 1, num_modes=modes, seed=2, mask_token_id=V - 1, target_layer_ids=[0, 2],
                            draft_vocab=vocab).eval()
    seqs, plens = greedy_answers(target, PROMPTS, NEW)
    got = heldout_greedy_tau(target, drafter, seqs, plens, budget, chunk=3)
    assert got["kept_tokens"] == got["answer_tokens"] == sum(NEW)
    for cell in got["cells"]:
        rounds, per_seq = _slow_tau(target, drafter, PROMPTS, NEW, cell["method"], budget, cell["scorer"])
        assert cell["rounds"] == len(rounds)
        assert cell["tokens"] == sum(a + 1 for a in rounds) == sum(NEW) - len(PROMPTS)
        assert cell["tau"] == pytest.approx(np.mean(rounds) + 1, abs=1e-12)
        assert cell["per_sequence_tau"][:3] == pytest.approx(per_seq[:3], abs=1e-12)
    methods = [(c["method"], c["scorer"]) for c in got["cells"]]
    assert methods == ([("chain", None), ("ddtree", None)] if modes == 1 else [("mfd", "mixture"), ("mfd", "best_mode")])


@pytest.mark.parametrize("vocab,budget", [(None, 8), ([0, 1, 2, 3, 5, 8, 9], 6)])
def test_heldout_dartree_tau_equals_the_decode_round_by_round(vocab, budget):
    """DARTree: each root's tree grown from that row's backbone states with the path correction (on
    the draft vocabulary when there is one) gives the rounds the real dartree decode has."""
    target = tiny_qwen3(vocab_size=V, seed=1, init_std=0.6)
    drafter = build_drafter(target, 5, 1, seed=3, mask_token_id=V - 1, target_layer_ids=[0, 2], kind="dartree",
                            rank=4, draft_vocab=vocab).eval()
    with torch.no_grad():  # a correction large enough to reorder the trees (random init is near zero)
        drafter.correction.up.weight.mul_(40.0)
    seqs, plens = greedy_answers(target, PROMPTS, NEW)
    got = heldout_greedy_tau(target, drafter, seqs, plens, budget, chunk=3)
    assert [(c["method"], c["scorer"]) for c in got["cells"]] == [("chain", None), ("ddtree", None), ("dartree", None)]
    for cell in got["cells"]:
        rounds, per_seq = _slow_tau(target, drafter, PROMPTS, NEW, cell["method"], budget, cell["scorer"])
        assert cell["rounds"] == len(rounds) and cell["tau"] == pytest.approx(np.mean(rounds) + 1, abs=1e-12)
        assert cell["per_sequence_tau"][:3] == pytest.approx(per_seq[:3], abs=1e-12)
    # the correction matters here: DARTree's rounds differ from the backbone's DDTree somewhere
    ddtree, dartree = got["cells"][1], got["cells"][2]
    assert ddtree["per_sequence_tau"] != dartree["per_sequence_tau"] or ddtree["anchor_accepted"] != dartree["anchor_accepted"]


def test_a_drafter_that_accepts_something_is_measured_so():
    """A check that can fail: with a random drafter over 12 tokens some roots accept, and the chain
    tau is then above 1 on the twin and here alike (the suite above would pass vacuously at tau 1)."""
    target = tiny_qwen3(vocab_size=4, seed=5, init_std=0.6)
    drafter = build_drafter(target, 5, 1, seed=0, mask_token_id=3, target_layer_ids=[0, 2]).eval()
    seqs = [np.array(p + hf_greedy(target, p, 24), dtype=np.int64) for p in ([1, 2], [2, 3, 1])]
    got = heldout_greedy_tau(target, drafter, seqs, [2, 3], 16, cells=[("ddtree", None)])
    rounds, _ = _slow_tau(target, drafter, [[1, 2], [2, 3, 1]], [24, 24], "ddtree", 16, None)
    assert got["cells"][0]["tau"] == pytest.approx(np.mean(rounds) + 1) and got["cells"][0]["tau"] > 1.2


def test_a_sequence_cut_where_it_stops_being_greedy():
    target = tiny_qwen3(vocab_size=V, seed=1, init_std=0.6)
    p = [3, 7, 1]
    greedy = hf_greedy(target, p, 10)
    seq = np.array(p + greedy[:6] + [(greedy[6] + 1) % V] + greedy[7:], dtype=np.int64)
    with torch.no_grad():
        logits = target(torch.tensor(seq)[None]).logits[0]
    assert greedy_prefix(seq, 3, logits) == 3 + 6
    # the replay computes logits from the prompt's last row on only: the same cut from those rows
    with torch.no_grad():
        tail = target(torch.tensor(seq)[None], logits_to_keep=len(seq) - 3 + 1).logits[0]
    assert tail.shape[0] == len(seq) - 2
    torch.testing.assert_close(tail, logits[2:], rtol=0, atol=1e-5)
    assert greedy_prefix(seq, 3, tail, first_row=2) == 3 + 6
    with pytest.raises(ValueError, match="first_row"):
        greedy_prefix(seq, 3, tail, first_row=3)
    drafter = build_drafter(target, 4, 1, seed=0, mask_token_id=V - 1, target_layer_ids=[1]).eval()
    got = heldout_greedy_tau(target, drafter, [seq], [3], 4)
    assert (got["kept_tokens"], got["answer_tokens"]) == (6, 10)


def test_tree_accepts_the_longest_path_of_the_continuation():
    # root -> 5 -> 7 -> 2 and root -> 5 -> 8, root -> 1
    tree = DraftTree(np.array([-1, 0, 1, 0, -1]), np.array([5, 7, 2, 8, 1]), np.array([1, 2, 3, 2, 1]))
    assert tree_accepts(tree, np.array([5, 7, 2, 9])) == 3
    assert tree_accepts(tree, np.array([5, 8, 0])) == 2
    assert tree_accepts(tree, np.array([1, 5])) == 1
    assert tree_accepts(tree, np.array([4])) == 0
    assert tree_accepts(None, np.array([5])) == 0


def test_bad_arguments_are_named():
    target = tiny_qwen3(vocab_size=V, seed=1)
    drafter = build_drafter(target, 4, 1, seed=0, mask_token_id=V - 1, target_layer_ids=[1]).eval()
    seq = [np.arange(6)]
    with pytest.raises(ValueError, match="budget"):
        heldout_greedy_tau(target, drafter, seq, [2], 0)
    with pytest.raises(ValueError, match="plens"):
        heldout_greedy_tau(target, drafter, seq, [2, 3], 4)
    with pytest.raises(ValueError, match="plens"):
        heldout_greedy_tau(target, drafter, seq, [6], 4)
    with pytest.raises(ValueError, match="cells"):
        heldout_greedy_tau(target, drafter, seq, [2], 4, cells=[("mfd", "mixture")])
    with pytest.raises(ValueError, match="cells"):
        heldout_greedy_tau(target, drafter, seq, [2], 4, cells=[("dartree", None)])


@pytest.mark.parametrize("method,scorer", [("ddtree", None), ("mfd", "mixture"), ("mfd", "best_mode")])
def test_a_budget_above_the_draft_vocabulary_never_drafts_outside_it(method, scorer):
    """Found by the twin above: with 7 draft tokens and N = 8 the candidate cut took a -inf token."""
    target = tiny_qwen3(vocab_size=V, seed=1, init_std=0.6)
    vocab = [0, 1, 2, 3, 5, 8, 9]
    drafter = build_drafter(target, 5, 1, num_modes=1 if method == "ddtree" else 2, seed=2, mask_token_id=V - 1,
                            target_layer_ids=[0, 2], draft_vocab=vocab).eval()
    res = speculative_generate(target, drafter, torch.tensor([5, 2]), 9, method, budget=8, temperature=0.0,
                               scorer=scorer, keep_trees=True)
    drafted = {int(x) for s in res.steps if s.tree is not None for x in s.tree.token}
    assert drafted and drafted <= set(vocab)
