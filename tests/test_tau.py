"""``mfd tau``: greedy tau at full size from one target forward per answer, equal to what real
decoding measures, under float32 and bfloat16; its answers cached; its speed rule checked."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mfd_theory.cli import main as mfd  # noqa: E402

from pipeline_helpers import save_tiny_target, write_prompts  # noqa: E402

TRAIN_ARGS = ["--block-size", "4", "--steps", "4", "--batch-size", "4", "--ckpt-every", "2", "--lr", "3e-3",
              "--quiet"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tau")
    target = save_tiny_target(root / "target")
    files = [str(p) for p in write_prompts(root / "prompts")]
    assert mfd(["distill", "--target", str(target), "--prompts", *files, "--out", str(root / "data"),
                "--max-new-tokens", "12", "--shard-size", "4", "--quiet"]) == 0
    assert mfd(["train-drafter", "--target", str(target), "--data", str(root / "data"), "--out",
                str(root / "k1"), *TRAIN_ARGS]) == 0
    assert mfd(["train-drafter", "--target", str(target), "--data", str(root / "data"), "--out",
                str(root / "k2"), "--modes", "2", *TRAIN_ARGS]) == 0
    argv = ["tau", "--target", str(target), "--drafter", str(root / "k1"), "--drafter", str(root / "k2"),
            "--prompts", files[0], "--budgets", "3,6", "--max-new-tokens", "12", "--batch", "2",
            "--cache-dir", str(root / "answers"), "--timing-prompts", "2", "--out", str(root / "tau"), "--quiet"]
    assert mfd(argv) == 0
    return root, target, files, argv


def test_tau_equals_real_greedy_decoding_of_each_answer(run):
    """Every per-answer tau of the record is the tau speculative_generate measures when it decodes
    that prompt greedily for the answer's length (the slow twin: real decoding)."""
    from mfd_theory.llm.decoding.generate import speculative_generate
    from mfd_theory.llm.models.drafter import load_drafter
    from mfd_theory.llm.models.target import TargetModel, load_local_target
    from mfd_theory.llm.training.distill import load_distill_data

    root, target_dir, _, _ = run
    rec = json.loads((root / "tau" / "tau.json").read_text())["data"]
    (name, s), = rec["sets"].items()
    assert name == "alpha" and s["prompts"] == 3
    seqs, plens, _ = load_distill_data(s["answers"])
    hf, _ = load_local_target(target_dir, "cpu", "float32")
    tm = TargetModel(hf)
    checked = 0
    for row in rec["drafters"]:
        drafter = load_drafter(row["drafter"], hf).eval()
        cells = {(c["method"], c["scorer"]) for g in row["sets"][name]["budgets"].values() for c in g["cells"]}
        assert cells == ({("chain", None), ("ddtree", None)} if row["modes"] == 1
                         else {("mfd", "mixture"), ("mfd", "best_mode"), ("ddtree", None)})
        for n, got in row["sets"][name]["budgets"].items():
            assert got["kept_tokens"] == got["answer_tokens"]  # float32: the answers are this forward's greedy
            for c in got["cells"]:
                for seq, p, t in zip(seqs, plens, c["per_sequence_tau"]):
                    res = speculative_generate(tm, drafter, list(seq[:p]), len(seq) - p, c["method"],
                                               budget=int(n), scorer=c["scorer"], metrics=False)
                    assert res.tokens == list(seq[p:]) and res.tau == pytest.approx(t), (c, n)
                    checked += 1
    assert checked == (2 + 3) * 2 * 3  # k1: 2 cells, k2: 3 cells; 2 budgets; 3 answers


def test_answers_are_cached_per_target_and_numerics(run, capsys):
    root, _, _, argv = run
    folders = sorted(p.name for p in (root / "answers").iterdir())
    assert len(folders) == 1 and folders[0].startswith("alpha-")
    stamp = (root / "answers" / folders[0] / "manifest.json").stat().st_mtime_ns
    assert mfd([*argv[:-3], "--timing-prompts", "0", "--out", str(root / "tau2"), "--quiet"]) == 0
    assert (root / "answers" / folders[0] / "manifest.json").stat().st_mtime_ns == stamp  # read, not remade
    a = json.loads((root / "tau" / "tau.json").read_text())["data"]["drafters"]
    b = json.loads((root / "tau2" / "tau.json").read_text())["data"]["drafters"]
    assert [r["sets"]["alpha"]["budgets"] for r in a] == [r["sets"]["alpha"]["budgets"] for r in b]
    assert "timing" not in b[0]["sets"]["alpha"]


def test_speed_rule_is_tau_times_plain_time_per_token_over_round_cost(run):
    root, _, _, _ = run
    rec = json.loads((root / "tau" / "tau.json").read_text())
    assert rec["provenance"]["numerics"]["mode"] == "reproducible" and rec["data"]["dtype"] == "float32"
    for row in rec["data"]["drafters"]:
        t = row["sets"]["alpha"]["timing"]
        assert t["ar_s_per_token"] > 0 and len(t["cells"]) == len(row["sets"]["alpha"]["budgets"]) * (
            2 if row["modes"] == 1 else 3)
        for c in t["cells"]:
            assert c["full_set_predicted_speedup"] == pytest.approx(
                c["full_set_tau"] * t["ar_s_per_token"] / c["round_s"])
            assert c["speedup"] > 0 and 1 <= c["tau"] <= 4
            # the check that can fail: prompt j predicted from the other prompt's costs, never its own
            h = c["held_out"]
            assert len(h["predicted"]) == len(h["measured"]) == 2 and min(h["predicted"]) > 0
        sc = t["speed_check"]
        assert sc["timed_prompts"] == 2 and sc["median_predicted_over_measured"] > 0 and sc["worst_relative_error"] >= 0


def test_the_timed_decodes_show_their_progress_and_tokens_per_second(run, capsys):
    """The timed part of a tau run decodes for real (minutes on a CPU): a bar counts plain decoding's
    decodes (one per prompt, made once for every drafter of a set), another the drafter's (one per
    prompt, cell and budget), with the last decode's tokens/s."""
    from mfd_theory.llm.models.drafter import load_drafter
    from mfd_theory.llm.models.target import TargetModel, load_local_target
    from mfd_theory.llm.training.distill import load_distill_data
    from mfd_theory.runs.pipeline.tau import _plain_timing, _timing

    root, target_dir, _, _ = run
    rec = json.loads((root / "tau" / "tau.json").read_text())["data"]
    seqs, plens, _ = load_distill_data(rec["sets"]["alpha"]["answers"])
    hf, _ = load_local_target(target_dir, "cpu", "float32")
    drafter = load_drafter(next(r["drafter"] for r in rec["drafters"] if r["modes"] == 1), hf).eval()
    prompts = [list(map(int, seqs[i][: int(plens[i])])) for i in range(2)]
    capsys.readouterr()
    got = _timing(TargetModel(hf), drafter, prompts, [("chain", None), ("ddtree", None)], [3], 6, progress=True,
                  label="timed decodes, k1")
    err = capsys.readouterr().err
    assert len(got["cells"]) == 2 and got["plain_shared"] is False
    assert "timed decodes, plain" in err and "0/2 [" in err  # 2 prompts
    assert "timed decodes, k1" in err and "0/4 [" in err and "tokens/s" in err  # 2 prompts x 2 cells
    # plain decodes made once and handed to every drafter: its time per token is theirs
    plain = _plain_timing(TargetModel(hf), prompts, 6)
    assert plain.shape == (2, 3) and ((plain[:, 1] >= 1) & (plain[:, 1] <= 6)).all()
    got = _timing(TargetModel(hf), drafter, prompts, [("chain", None)], [3], 6, progress=False, ar=plain)
    assert got["plain_shared"] is True and got["ar_s_per_token"] == plain[:, 0].sum() / plain[:, 1].sum()
    assert "timed decodes" not in capsys.readouterr().err


def test_bad_input_names_the_flag(run, tmp_path, capsys):
    root, target, files, _ = run
    assert mfd(["tau", "--target", str(target), "--drafter", str(tmp_path / "none"), "--prompts", files[0],
                "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--drafter" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
    assert mfd(["tau", "--target", str(target), "--drafter", str(root / "k1"), "--sets", "poetry",
                "--out", str(tmp_path / "o")]) == 2
    assert "--sets" in capsys.readouterr().err


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_heldout_tau_equals_real_decoding_in_both_dtypes(dtype):
    """The round-by-round twin against real decoding on the answers that model gives itself, in
    float32 and in bfloat16 (where the answer is cut at the first position its forward would not
    pick; up to that cut the rounds are the real decode's)."""
    from mfd_theory.llm.decoding.generate import speculative_generate
    from mfd_theory.llm.measure.heldout import heldout_greedy_tau
    from mfd_theory.llm.models.drafter import build_drafter
    from mfd_theory.llm.models.target import TargetModel

    from llm_helpers import tiny_qwen3

    model = tiny_qwen3(seed=4).to(dtype)
    tm = TargetModel(model)
    prompts = [[1, 2, 3], [5, 9], [7, 7, 8, 2], [11, 3]]
    drafter = build_drafter(model, 5, 1, 1, 0)
    seqs = [np.array(p + speculative_generate(tm, None, p, 10, "ar", metrics=False).tokens) for p in prompts]
    same = 0
    for seq, p in zip(seqs, prompts):
        got = heldout_greedy_tau(model, drafter, [seq], [len(p)], 6, cells=[("ddtree", None)])
        res = speculative_generate(tm, drafter, p, len(seq) - len(p), "ddtree", budget=6, metrics=False)
        if got["kept_tokens"] == got["answer_tokens"] and res.tokens == list(seq[len(p):]):
            assert res.tau == pytest.approx(got["cells"][0]["tau"])
            same += 1
        else:  # only a lower precision may cut an answer or flip a token, and only at a near-tie
            assert dtype != torch.float32
    assert same >= (len(prompts) if dtype == torch.float32 else 2)


def test_many_drafters_and_budgets_at_once_equal_one_call_each():
    """One target forward per answer shared by drafters and budgets changes nothing: the batched
    measurement equals heldout_greedy_tau called per drafter and budget (itself checked against
    real decoding in tests/test_heldout_tau.py)."""
    from mfd_theory.llm.measure.heldout import heldout_greedy_tau, heldout_greedy_tau_many
    from mfd_theory.llm.models.drafter import build_drafter

    from llm_helpers import hf_greedy, tiny_qwen2

    target = tiny_qwen2(vocab_size=12, seed=1)
    drafters = {"k1": build_drafter(target, 5, 1, 1, 3, mask_token_id=11, target_layer_ids=[0, 2]).eval(),
                "k2": build_drafter(target, 4, 1, 2, 4, mask_token_id=11, target_layer_ids=[1]).eval()}
    prompts = [[3, 7, 1], [5, 2], [6, 6, 10, 4]]
    seqs = [np.array(p + hf_greedy(target, p, 9)) for p in prompts]
    plens = [len(p) for p in prompts]
    many = heldout_greedy_tau_many(target, drafters, seqs, plens, [1, 4, 8], chunk=2)
    for name, d in drafters.items():
        for n in (1, 4, 8):
            assert many[name][n] == heldout_greedy_tau(target, d, seqs, plens, n, chunk=5)


def test_draft_vocab_coverage_counts_the_answer_tokens_it_can_draft():
    """Slow twin: count, token by token, the answer tokens inside the draft vocabulary."""
    from mfd_theory.llm.models.drafter import build_drafter
    from mfd_theory.runs.pipeline.tau import vocab_coverage

    from llm_helpers import tiny_qwen2

    hf = tiny_qwen2(vocab_size=64, hidden_size=32, num_layers=2, seed=0)
    assert vocab_coverage(build_drafter(hf, 4, 1, seed=0, mask_token_id=63), [np.arange(9)], [3]) is None
    vocab = [1, 4, 5, 9, 30]
    d = build_drafter(hf, 4, 1, seed=0, mask_token_id=63, draft_vocab=vocab)
    seqs = [np.array([1, 2, 4, 5, 9, 9, 7]), np.array([30, 30, 3, 1])]
    plens = [2, 1]
    answer = [t for x, p in zip(seqs, plens) for t in x[p:]]
    got = vocab_coverage(d, seqs, plens)
    assert got == {"size": 5, "answer_tokens": len(answer),
                   "coverage": pytest.approx(sum(t in vocab for t in answer) / len(answer))}
    assert got["coverage"] == pytest.approx(6 / 8)


def test_sampled_tau_equals_real_sampled_decoding_of_each_answer(run):
    """--temperature 1: the answers are the target's samples (prompt g with mfd distill's seed for
    (--seed, g)), and each per-answer tau of the record is what speculative_generate measures when it
    decodes that prompt at T = 1 with that seed: the decode emits exactly the answer (lossless, keyed
    draws), whatever the tree, and the replay's rounds are its rounds (the slow twin: real decoding)."""
    from mfd_theory.llm.decoding.generate import speculative_generate
    from mfd_theory.llm.models.drafter import load_drafter
    from mfd_theory.llm.models.target import TargetModel, load_local_target
    from mfd_theory.llm.training.distill import answer_seeds, load_distill_data

    root, target_dir, files, argv = run
    out = root / "tau-t1"
    args = list(argv[:-5])
    args[args.index("--cache-dir") + 1] = str(root / "answers-t1")  # the greedy cache's test counts its folders
    assert mfd([*args, "--timing-prompts", "0", "--temperature", "1", "--seed", "3", "--out", str(out),
                "--chimera-budget", "6", "--chimera-answers", "2", "--quiet"]) == 0
    rec = json.loads((out / "tau.json").read_text())
    assert rec["data"]["temperature"] == 1.0 and "T = 1 decode" in rec["data"]["rule"]
    s = rec["data"]["sets"]["alpha"]
    greedy = json.loads((root / "tau" / "tau.json").read_text())["data"]["sets"]["alpha"]["answers"]
    from pathlib import Path

    assert Path(s["answers"]).name != Path(greedy).name  # sampled answers are keyed apart from the greedy ones
    seqs, plens, _ = load_distill_data(s["answers"])
    seeds = answer_seeds(s["answers"], 3)
    assert len(set(seeds)) == len(seqs) == 3
    hf, _ = load_local_target(target_dir, "cpu", "float32")
    tm = TargetModel(hf)
    plain = [speculative_generate(tm, None, list(q[:p]), len(q) - p, "ar", temperature=1.0, seed=sd, metrics=False)
             for q, p, sd in zip(seqs, plens, seeds)]
    assert [r.tokens for r in plain] == [list(q[p:]) for q, p in zip(seqs, plens)]  # the answers are those samples
    checked = 0
    for row in rec["data"]["drafters"]:
        drafter = load_drafter(row["drafter"], hf).eval()
        for n, got in row["sets"]["alpha"]["budgets"].items():
            assert got["kept_tokens"] == got["answer_tokens"]
            for c in got["cells"]:
                for q, p, sd, t in zip(seqs, plens, seeds, c["per_sequence_tau"]):
                    res = speculative_generate(tm, drafter, list(q[:p]), len(q) - p, c["method"], budget=int(n),
                                               scorer=c["scorer"], temperature=1.0, seed=sd, metrics=False)
                    assert res.tokens == list(q[p:]) and res.tau == pytest.approx(t), (c, n)
                    checked += 1
    assert checked == (2 + 3) * 2 * 3
    # the chimeras' rounds are the sampled decodes' rounds of the first 2 answers at N = 6 (but a last
    # round with nothing left to draft): rounds = (answer tokens - 1) / tau, the bonus included
    for row in rec["data"]["drafters"]:
        ch = row["sets"]["alpha"]["chimeras"]
        assert ch["answers"] == 2 and ch["p_temperature"] == 1.0
        for c in ch["cells"]:
            cell = next(x for x in row["sets"]["alpha"]["budgets"]["6"]["cells"]
                        if (x["method"], x["scorer"]) == (c["method"], c["scorer"]))
            rounds = sum((len(q) - p - 1) / t for q, p, t in zip(seqs[:2], plens[:2], cell["per_sequence_tau"][:2]))
            assert round(rounds) - 2 <= c["rounds"] <= round(rounds), c
    # a wrong seed is a different decode: the replay is not a check that holds for any seed
    wrong = [speculative_generate(tm, None, list(q[:p]), len(q) - p, "ar", temperature=1.0, seed=sd + 1,
                                  metrics=False).tokens for q, p, sd in zip(seqs, plens, seeds)]
    assert wrong != [list(q[p:]) for q, p in zip(seqs, plens)]


def test_sampled_prefix_cuts_where_the_forward_draws_another_token():
    """Slow twin: draw each response token from its row with the seed's keyed draws, one at a time."""
    from mfd_theory.llm.decoding.sampling import Sampler
    from mfd_theory.llm.measure.heldout import sampled_prefix

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(9, 7, generator=g) * 2
    sampler = Sampler(1.0, 1.0, 17)
    p = 3
    resp = [sampler.draw(logits[j]) for j in range(p - 1, 8)]
    seq = np.array([0, 1, 2, *resp])
    assert sampled_prefix(seq, p, logits, {"temperature": 1.0}, 17) == len(seq)
    flipped = seq.copy()
    flipped[p + 2] = (flipped[p + 2] + 1) % 7
    assert sampled_prefix(flipped, p, logits, {"temperature": 1.0}, 17) == p + 2


def test_chimera_budget_adds_each_cells_dead_and_chimera_shares(run, capsys):
    """``--chimera-budget``: every drafter's entry of the set gains the round-by-round dead and
    chimera shares of each of its cells over the first ``--chimera-answers`` answers, what the
    library function gives for the same answers; printed one line per cell."""
    from mfd_theory.llm.measure.round_chimeras import round_chimeras_many
    from mfd_theory.llm.models.drafter import load_drafter
    from mfd_theory.llm.models.target import load_local_target
    from mfd_theory.llm.training.distill import load_distill_data
    from mfd_theory.runs.pipeline.tau import _cells

    root, target_dir, _, argv = run
    out = root / "tau-chimeras"
    argv = [a for a in argv if a != "--quiet"]
    argv[argv.index("--out") + 1] = str(out)
    assert mfd(argv + ["--chimera-budget", "5", "--chimera-answers", "2"]) == 0
    printed = capsys.readouterr().out
    rec = json.loads((out / "tau.json").read_text())["data"]
    s = rec["sets"]["alpha"]
    seqs, plens, _ = load_distill_data(s["answers"])
    hf, _ = load_local_target(target_dir, "cpu", "float32")
    drafters = {row["drafter"]: load_drafter(row["drafter"], hf).eval() for row in rec["drafters"]}
    want = round_chimeras_many(hf, drafters, seqs[:2], plens[:2], 5, {n: _cells(d) for n, d in drafters.items()})
    for row in rec["drafters"]:
        got = row["sets"]["alpha"]["chimeras"]
        assert got["budget"] == 5 and got["answers"] == 2 and got["stride"] == 1
        w = want["drafters"][row["drafter"]]
        assert [(c["method"], c["scorer"]) for c in got["cells"]] == [(c["method"], c["scorer"]) for c in w]
        for g, c in zip(got["cells"], w):
            assert g["rounds"] == c["rounds"] > 0 and g["dead_share"] == c["dead_share"]
            assert g["chimera_share"] == c["chimera_share"] and g["oracle_dead_share"] == c["oracle_dead_share"]
            assert f"{g['method']}" in printed and "the oracle tree's dead" in printed
        assert got["resumed"] == 0
    # the same command on the same --out resumes from the answers kept under <out>/chimeras/<set>/
    assert len(list((out / "chimeras" / "alpha").glob("answer-*.json"))) == 2
    assert mfd(argv + ["--chimera-budget", "5", "--chimera-answers", "2"]) == 0
    again = json.loads((out / "tau.json").read_text())["data"]
    for row, first in zip(again["drafters"], rec["drafters"]):
        a, b = row["sets"]["alpha"]["chimeras"], first["sets"]["alpha"]["chimeras"]
        assert a["resumed"] == 2 and a["cells"] == b["cells"] and a["cost"] == b["cost"]
