"""Bad input raises ValueError naming the argument (never a numba crash). One case per test."""

from __future__ import annotations

import numpy as np
import pytest

from mfd_theory.coverage import (
    chimera_mask,
    coverage,
    depth_profile,
    node_log_probs,
    simulate_acceptance,
    splice_mask,
)
from mfd_theory.distributions import MixtureOfProducts
from mfd_theory.trees import DraftTree, chain_tree, mixture_tree, oracle_tree, product_tree

LOG_Q = np.log(np.array([[[0.5, 0.25, 0.25], [0.2, 0.3, 0.5]]]))  # [K=1, L=2, V=3]
LOG_Q2 = np.stack([LOG_Q[0], LOG_Q[0][::-1]])  # [K=2, L=2, V=3]
LOG_PI2 = np.log([0.4, 0.6])


def target():
    return MixtureOfProducts(LOG_PI2, LOG_Q2)


def with_entry(arr, index, value):
    out = np.array(arr, dtype=np.float64)
    out[index] = value
    return out


def deep_tree():
    return DraftTree.from_paths([(0,), (0, 1), (0, 1, 2)])  # depth 3 > L = 2


def wide_tree():
    return DraftTree.from_paths([(0,), (3,)])  # token 3 >= V = 3


SMALL_TREE_PATHS = [(0,), (0, 1), (2,)]

CASES = {
    # ---- MixtureOfProducts
    "nan_log_q": (lambda: MixtureOfProducts(LOG_PI2, with_entry(LOG_Q2, (0, 0, 0), np.nan)), "log_q"),
    "posinf_log_q": (lambda: MixtureOfProducts(LOG_PI2, with_entry(LOG_Q2, (1, 1, 2), np.inf)), "log_q"),
    "nan_log_pi": (lambda: MixtureOfProducts(with_entry(LOG_PI2, 0, np.nan), LOG_Q2), "log_pi"),
    "posinf_log_pi": (lambda: MixtureOfProducts(with_entry(LOG_PI2, 1, np.inf), LOG_Q2), "log_pi"),
    "unnormalised_log_q": (lambda: MixtureOfProducts(LOG_PI2, LOG_Q2 + 0.1), "log_q"),
    "unnormalised_log_pi": (lambda: MixtureOfProducts(LOG_PI2 - 0.1, LOG_Q2), "log_pi"),
    "log_q_probability_above_one": (
        lambda: MixtureOfProducts(LOG_PI2, with_entry(LOG_Q2, (0, 0, 0), 0.5)), "log_q"),
    "log_pi_vs_log_q_modes": (lambda: MixtureOfProducts(np.log([1 / 3] * 3), LOG_Q2), "log_pi|log_q"),
    "log_q_ndim": (lambda: MixtureOfProducts(np.zeros(1), LOG_Q2[0]), "log_q"),
    "mop_product_log_q_ndim": (lambda: MixtureOfProducts.product(LOG_Q2), "log_q"),
    "futures_empty": (lambda: MixtureOfProducts.futures([], vocab_size=3), "sequences"),
    "futures_ragged": (lambda: MixtureOfProducts.futures([[0, 1], [1]], vocab_size=3), "sequences"),
    "futures_token_too_large": (lambda: MixtureOfProducts.futures([[0, 3]], vocab_size=3), "sequences"),
    "futures_token_negative": (lambda: MixtureOfProducts.futures([[0, -1]], vocab_size=3), "sequences"),
    "futures_negative_weight": (
        lambda: MixtureOfProducts.futures([[0, 1], [1, 0]], weights=[2.0, -1.0], vocab_size=3), "weights"),
    "futures_nan_weight": (
        lambda: MixtureOfProducts.futures([[0, 1], [1, 0]], weights=[np.nan, 1.0], vocab_size=3), "weights"),
    "futures_weights_length": (
        lambda: MixtureOfProducts.futures([[0, 1], [1, 0]], weights=[1.0], vocab_size=3), "weights"),
    "futures_noise_negative": (
        lambda: MixtureOfProducts.futures([[0, 1]], vocab_size=3, noise=-0.1), "noise"),
    "futures_noise_above_one": (
        lambda: MixtureOfProducts.futures([[0, 1]], vocab_size=3, noise=1.5), "noise"),
    "prefix_too_long": (lambda: target().log_prefix_prob([0, 1, 2]), "prefix"),
    "prefix_token_out_of_range": (lambda: target().log_prefix_prob([0, 3]), "prefix"),
    "prefix_token_negative": (lambda: target().log_prefix_prob([-1]), "prefix"),
    "node_log_probs_tree_too_deep": (lambda: target().node_log_probs(deep_tree()), "tree"),
    "sample_negative_n": (lambda: target().sample(-1, 0), "n"),
    # ---- builders
    "product_budget_zero": (lambda: product_tree(LOG_Q[0], 0), "budget"),
    "product_budget_negative": (lambda: product_tree(LOG_Q[0], -3), "budget"),
    "product_nan": (lambda: product_tree(with_entry(LOG_Q[0], (0, 1), np.nan), 4), "log_q"),
    "product_posinf": (lambda: product_tree(with_entry(LOG_Q[0], (0, 1), np.inf), 4), "log_q"),
    "product_log_q_ndim": (lambda: product_tree(LOG_Q2, 4), "log_q"),
    "mixture_budget_zero": (lambda: mixture_tree(LOG_PI2, LOG_Q2, 0), "budget"),
    "mixture_nan_log_q": (lambda: mixture_tree(LOG_PI2, with_entry(LOG_Q2, (1, 0, 0), np.nan), 4), "log_q"),
    "mixture_nan_log_pi": (lambda: mixture_tree(with_entry(LOG_PI2, 0, np.nan), LOG_Q2, 4), "log_pi"),
    "mixture_unnormalised_log_pi": (lambda: mixture_tree(LOG_PI2 + 0.3, LOG_Q2, 4), "log_pi"),
    "mixture_log_pi_vs_log_q": (lambda: mixture_tree(np.log([0.5, 0.25, 0.25]), LOG_Q2, 4), "log_pi|log_q"),
    "mixture_log_q_ndim": (lambda: mixture_tree(LOG_PI2, LOG_Q2[0], 4), "log_q"),
    "oracle_budget_zero": (lambda: oracle_tree(target(), 0), "budget"),
    # ---- candidate (top-k) input
    "token_ids_duplicate_in_row": (
        lambda: product_tree(LOG_Q[0, :, :2], 4, token_ids=np.array([[5, 5], [1, 2]])), "token_ids"),
    "token_ids_negative": (
        lambda: product_tree(LOG_Q[0, :, :2], 4, token_ids=np.array([[5, -1], [1, 2]])), "token_ids"),
    "token_ids_shape_mismatch": (
        lambda: product_tree(LOG_Q[0, :, :2], 4, token_ids=np.array([[5, 6, 7], [1, 2, 3]])),
        "token_ids|log_q"),
    "token_ids_not_integer": (
        lambda: product_tree(LOG_Q[0, :, :2], 4, token_ids=np.array([[0.5, 1.0], [1.0, 2.0]])), "token_ids"),
    "mixture_token_ids_duplicate": (
        lambda: mixture_tree(LOG_PI2, LOG_Q2[:, :, :2], 4,
                             token_ids=np.array([[[0, 1], [2, 2]], [[0, 1], [0, 1]]])), "token_ids"),
    "mixture_token_ids_shape_mismatch": (
        lambda: mixture_tree(LOG_PI2, LOG_Q2[:, :, :2], 4, token_ids=np.array([[0, 1], [2, 3]])),
        "token_ids|log_q"),
    "candidate_values_nan": (
        lambda: product_tree(with_entry(LOG_Q[0, :, :2], (1, 1), np.nan), 4,
                             token_ids=np.array([[0, 1], [1, 2]])), "log_q"),
    # ---- DraftTree
    "from_paths_not_prefix_closed": (lambda: DraftTree.from_paths([(0,), (1, 2)]), "paths"),
    "from_paths_duplicate": (lambda: DraftTree.from_paths([(0,), (0,)]), "paths"),
    "from_paths_negative_token": (lambda: DraftTree.from_paths([(0,), (0, -2)]), "paths"),
    "from_paths_score_length": (lambda: DraftTree.from_paths([(0,), (1,)], log_score=[0.0]), "log_score"),
    "chain_negative_token": (lambda: chain_tree([1, -1]), "tokens"),
    # ---- coverage family: tree vs target
    "coverage_tree_deeper_than_L": (lambda: coverage(deep_tree(), target()), "tree|target"),
    "coverage_token_out_of_V": (lambda: coverage(wide_tree(), target()), "tree|target"),
    "coverage_node_log_cond_length": (
        lambda: coverage(DraftTree.from_paths(SMALL_TREE_PATHS), node_log_cond=np.zeros(2)), "node_log_cond"),
    "coverage_node_log_cond_nan": (
        lambda: coverage(DraftTree.from_paths(SMALL_TREE_PATHS), node_log_cond=np.array([0.0, np.nan, -1.0])),
        "node_log_cond"),
    "coverage_node_log_cond_positive": (
        lambda: coverage(DraftTree.from_paths(SMALL_TREE_PATHS), node_log_cond=np.array([0.0, 0.5, -1.0])),
        "node_log_cond"),
    "coverage_needs_target_or_conditionals": (
        lambda: coverage(DraftTree.from_paths(SMALL_TREE_PATHS)), "target|node_log_cond"),
    "node_log_probs_token_out_of_V": (lambda: node_log_probs(wide_tree(), target()), "tree|target"),
    "depth_profile_tree_deeper_than_L": (lambda: depth_profile(deep_tree(), target()), "tree|target"),
    "simulate_tree_deeper_than_L": (lambda: simulate_acceptance(deep_tree(), target(), 10, 0), "tree|target"),
    "simulate_token_out_of_V": (lambda: simulate_acceptance(wide_tree(), target(), 10, 0), "tree|target"),
    "simulate_n_negative": (
        lambda: simulate_acceptance(DraftTree.from_paths(SMALL_TREE_PATHS), target(), -1, 0), "n"),
    "chimera_token_out_of_V": (lambda: chimera_mask(wide_tree(), target()), "tree|target"),
    "chimera_negative_eps": (
        lambda: chimera_mask(DraftTree.from_paths(SMALL_TREE_PATHS), target(), eps=-0.1), "eps"),
    "splice_empty_sequences": (
        lambda: splice_mask(DraftTree.from_paths(SMALL_TREE_PATHS), np.zeros((0, 2), dtype=np.int64)),
        "sequences"),
    "splice_sequences_shorter_than_tree": (
        lambda: splice_mask(deep_tree(), np.array([[0, 1], [1, 0]])), "sequences|tree"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_raises_value_error_naming_the_argument(case):
    call, name = CASES[case]
    with pytest.raises(ValueError, match=name):
        call()


# ----------------------------------------------------------------------------- what a user types at the command line
def test_a_mistyped_shipped_target_name_points_at_mfd_target_list():
    from mfd_theory.shipped import check_target, shipped_model

    for typo, meant in (("smollm2-135m", "smollm2-135m-instruct"), ("Qwen2.5-Coder-0.5B-Instruct",
                                                                    "qwen2.5-coder-0.5b-instruct")):
        with pytest.raises(ValueError, match=f"^--target: {typo} does not exist") as err:
            check_target(typo)
        assert f"did you mean '{meant}'?" in str(err.value) and "mfd target list" in str(err.value)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="^--target: .*; mfd target list shows the shipped targets$"):
        check_target("/no/such/model")
    with pytest.raises(ValueError, match="^--name: not a shipped target: 'smolm2-135m'.*did you mean 'smollm2-135m-instruct'"):
        shipped_model("smolm2-135m", "--name")


def test_a_drafter_path_that_does_not_exist_says_so(tmp_path):
    from mfd_theory.configs.pipeline.local_target import checkpoint_dir

    with pytest.raises(ValueError, match=f"^--drafter: {tmp_path / 'nonexistent'} does not exist"):
        checkpoint_dir(str(tmp_path / "nonexistent"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="^--drafter: .* is a file, not a drafter checkpoint directory"):
        checkpoint_dir(str(tmp_path / "file"))
    with pytest.raises(ValueError, match="^--drafter: no drafter checkpoint \\(config.json\\) in"):
        checkpoint_dir(str(tmp_path))
    (tmp_path / "run" / "drafter").mkdir(parents=True)
    (tmp_path / "run" / "drafter" / "config.json").write_text("{}")
    assert checkpoint_dir(str(tmp_path / "run")) == tmp_path / "run" / "drafter"


def test_mfd_eval_with_a_missing_drafter_says_it_does_not_exist(tmp_path, capsys):
    from mfd_theory.cli import main

    prompts = tmp_path / "p.jsonl"
    prompts.write_text(''.join(f'{{"prompt": "hi {i}"}}\n' for i in range(12)))
    tgt = tmp_path / "target"
    tgt.mkdir()
    (tgt / "config.json").write_text("{}")
    (tgt / "tokenizer.json").write_text("{}")
    assert main(["eval", "--target", str(tgt), "--drafter", "/nonexistent", "--prompts", str(prompts),
                 "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--drafter: /nonexistent does not exist" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["distill", "eval", "ceiling", "check-modes"])
def test_every_prompts_help_states_the_prompt_file_format(command, capsys, monkeypatch):
    from mfd_theory.cli import main
    from test_help import parse_help

    monkeypatch.setenv("COLUMNS", "2000")
    assert main([command, "--help"]) == 0
    _, options = parse_help(capsys.readouterr().out)
    line = next(text for inv, text in options.items() if inv.startswith("--prompts "))
    for word in ('"prompt" (a string)', '"messages"', '"turns"', '"id"', '"dataset"', "one JSON object per line"):
        assert word in line, (command, word)
