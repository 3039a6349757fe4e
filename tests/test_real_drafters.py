"""``mfd real-drafters`` end to end on a tiny local target: the prompts it reads, distilled data,
every kind for two seeds over a reduced vocabulary, ``mfd eval`` per seed (lossless at T = 0), the
replicated verdicts over the seeds, and a rerun that reuses every finished step."""

import json
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_helpers import tiny_qwen3  # noqa: E402
from pipeline_helpers import CHAT_TEMPLATE  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    from mfd_theory.llm.training.corpus import generate_documents, train_tokenizer

    d = tmp_path_factory.mktemp("target")
    tok = train_tokenizer(generate_documents(200, seed=0), vocab_size=96)
    tok.chat_template = CHAT_TEMPLATE
    eos = int(tok.convert_tokens_to_ids(tok.eos_token))
    # a long context: the real prompt sets' docstrings are hundreds of byte-level tokens
    model = tiny_qwen3(vocab_size=len(tok), hidden_size=32, num_layers=2, seed=0, eos_token_id=eos,
                       max_position_embeddings=8192)
    model.save_pretrained(str(d))
    tok.save_pretrained(str(d))
    return d


ARGS = ["--seeds", "2", "--kinds", "product", "mfd-k2", "dartree", "--train-prompts", "3", "--answer-tokens", "8",
        "--distill-batch", "4", "--block-size", "4", "--target-layer-ids", "0", "1", "--draft-vocab", "40",
        "--steps", "3", "--batch-size", "2", "--blocks-per-seq", "2", "--eval-prompts", "2",
        "--calibration-prompts", "1", "--eval-tokens", "6", "--budgets", "4", "6", "--temperatures", "0", "1",
        "--threads", "1", "--quiet"]


def test_the_study_runs_and_resumes(tiny_target, tmp_path, capsys):
    from mfd_theory.commands.experiments import real_drafters

    out = tmp_path / "study"
    recipe = ["--stages", "recipe", "--recipes", "tokens", "--heldout-prompts", "2", "--heldout-tokens", "6"]
    # the recipe stage first, in the same folder, seed 0 only: the main stage copies its tokens drafter
    real_drafters.main(["--target", str(tiny_target), *ARGS, *recipe, "--recipe-seeds", "1", "--out", str(out)])
    capsys.readouterr()
    res = real_drafters.main(["--target", str(tiny_target), *ARGS, "--out", str(out)])
    data = res.data
    assert capsys.readouterr().out.count("(the recipe stage's tokens drafter, copied)") == 1  # seed 0; seed 1 trained
    tok0, prod0 = out / "recipes" / "tokens" / "s0", out / "drafters" / "s0" / "product"
    assert [t["seconds"] for t in data["trained"] if (t["kind"], t["seed"]) == ("product", 0)] == [
        json.loads((tok0 / "study.json").read_text())["seconds"]]  # the recipe stage's training time
    for f in ("model.safetensors", "config.json"):
        assert (prod0 / "drafter" / f).read_bytes() == (tok0 / "drafter" / f).read_bytes()
    assert (tok0 / "heldout.json").is_file() and not (prod0 / "heldout.json").exists()  # the drafter, not its measure
    # the files it read: disjoint splits, the evaluation sets per domain
    rows = {n: [json.loads(x) for x in (out / "prompts" / f"{n}.jsonl").read_text().splitlines()]
            for n in ("train", "calib", "code", "prose")}
    assert len(rows["train"]) == 6 and len(rows["calib"]) == 2 and len(rows["code"]) == len(rows["prose"]) == 2
    texts = {n: {json.dumps(r["messages"]) for r in v} for n, v in rows.items()}
    assert not texts["train"] & (texts["calib"] | texts["code"] | texts["prose"])
    assert not texts["calib"] & (texts["code"] | texts["prose"])
    assert data["distill"]["n_sequences"] == 6
    # every kind for every seed, over a 40-token draft vocabulary
    assert sorted((t["kind"], t["seed"]) for t in data["trained"]) == sorted(
        (k, s) for k in ("product", "mfd-k2", "dartree") for s in (0, 1))
    assert all(t["draft_vocab"]["size"] == 40 and 0 < t["draft_vocab"]["coverage"] <= 1 for t in data["trained"])
    cfg = json.loads((out / "drafters" / "s1" / "mfd-k2" / "drafter" / "config.json").read_text())
    assert cfg["draft_vocab_size"] == 40 and cfg["dflash_config"]["num_modes"] == 2
    # per seed the evaluation: every speculative row lossless at T = 0
    for run in data["runs"]:
        greedy = [r for r in run["rows"] if r["temperature"] == 0 and r["method"] != "ar"]
        assert greedy and all(r["matches_ar"] for r in greedy)
        assert {r["drafter"] for r in run["rows"] if r["method"] != "ar"} == {"product", "mfd-k2", "dartree"}
    # the verdicts: per data set and temperature, MFD (both scorers) and DARTree against product, and the scorers
    got = {(v["dataset"], v["temperature"], v["question"], v["a"]["method"], v["a"]["scorer"]) for v in data["verdicts"]}
    for ds in ("code", "prose"):
        for t in (0.0, 1.0):
            assert {(ds, t, "against_product", "mfd", "mixture"), (ds, t, "against_product", "mfd", "best_mode"),
                    (ds, t, "against_product", "dartree", None), (ds, t, "scorer", "mfd", "best_mode")} <= got
    for v in data["verdicts"]:
        assert len(v["tau_runs"]) == 2 and v["b"]["method"] in ("chain", "ddtree", "mfd")
        assert v["tau_cmp"] is None or v["tau_cmp"]["verdict"] in ("gain", "loss", "equivalent", "inconclusive")
    # the report block: the setup, every drafter's training, each compared cell per seed, the verdicts
    from mfd_theory.report import BLOCKS, Results
    from mfd_theory.results import Result

    saved = Result.load(out / "real_drafters.json")
    text = BLOCKS["real-drafters"].make(Results.holding(saved, out / "real_drafters.json"))
    assert "a draft vocabulary of the 40 tokens" in text
    for kind in ("product", "mfd-k2", "dartree"):
        assert f"| {kind} | " in text
    cells = [ln for ln in text.splitlines() if ln.startswith(("| code |", "| prose |"))]
    assert len(cells) >= len({(p["dataset"], p["temperature"], tuple(p[s])) for p in data["pairs"] for s in "ab"})
    for v in data["verdicts"]:
        if v["tau_cmp"]:
            assert f"{100 * v['tau_cmp']['gain']:+.1f}% [" in text
    assert "**no**" not in text  # every T = 0 cell matched plain decoding above
    # C1, the walk check: each T = 1 tree cell's accepted per round beside its drafted trees' expected acceptance
    c1 = text[text.index("C1 as a check of the decoder's walk"):].splitlines()
    for ds in ("code", "prose"):
        rows_ = [[r for r in run["rows"] if r["dataset"] == ds and r["temperature"] == 1 and r["method"] == "ddtree"
                  and r["drafter"] == "product" and r["budget"] == 4][0] for run in data["runs"]]
        want = (" / ".join(f"{r['accepted_mean']:.2f}" for r in rows_) + " | "
                + " / ".join(f"{r['covered_mass_insample']:.2f}" for r in rows_) + " |")
        assert any(ln.startswith(f"| {ds} | 1 | ddtree (product) N = 4 |") and want in ln for ln in c1), (want, c1)
    assert not any(ln.startswith(("| code | 0 |", "| prose | 0 |")) for ln in c1)  # T > 0 only
    capsys.readouterr()
    # the same-N question pairs each MFD tree with the product drafter's DDTree where both chose one N
    for v in data["verdicts"]:
        if v["question"] == "same_n":
            assert v["a"]["method"] == "mfd" and v["b"] == {"method": "ddtree", "drafter": "product",
                                                            "budget": v["a"]["budget"], "scorer": None}
    # the headline block: one row per question asked, each verdict's number in it
    head = BLOCKS["real-headline"].make(Results.holding(saved, out / "real_drafters.json"))
    assert head.startswith("| question | the last run's answer | full table |")
    for v in data["verdicts"]:
        if v["question"] == "against_product" and v["a"]["scorer"] == "mixture" and v["speed_cmp"]:
            c = v["speed_cmp"]
            assert (f"{v['dataset']} T = {v['temperature']:g}: {100 * c['gain']:+.0f}% "
                    f"[{100 * c['lo']:+.0f}%, {100 * c['hi']:+.0f}%] **{c['verdict']}**") in head
    assert "How well are tau and speedup predicted before decoding" in head
    capsys.readouterr()
    # a rerun reuses every step and gives the same rows; it draws the gains figure on request
    fig = tmp_path / "gains.png"
    loud = [a for a in ARGS if a != "--quiet"]  # printing more is no other study: nothing is redone
    again = real_drafters.main(["--target", str(tiny_target), *loud, "--out", str(out), "--figure", str(fig)])
    printed = capsys.readouterr().out
    assert printed.count("finished earlier") == 1 + 6 + 2
    assert again.data["runs"] == data["runs"] and again.data["verdicts"] == data["verdicts"]
    assert fig.stat().st_size > 10_000
    # the recipe stage again, two seeds: seed 0 is its own, finished; seed 1 is the main stage's, copied
    rec = real_drafters.main(["--target", str(tiny_target), *ARGS, *recipe, "--recipe-seeds", "2", "--out", str(out)])
    printed = capsys.readouterr().out
    assert printed.count("(the main stage's, copied)") == 1 and "recipe tokens s0: finished earlier" in printed
    main_runs = {t["seed"]: t for t in data["trained"] if t["kind"] == "product"}
    for t in rec.data["trained"]:
        assert t["seconds"] == main_runs[t["seed"]]["seconds"]  # the main stage's training time, not a copy's
        for f in ("model.safetensors", "config.json"):
            assert ((out / "recipes" / "tokens" / f"s{t['seed']}" / "drafter" / f).read_bytes()
                    == (out / "drafters" / f"s{t['seed']}" / "product" / "drafter" / f).read_bytes())
    assert {m["recipe"] for m in rec.data["measured"]} == {"tokens"}


def test_study_pairs_ask_each_question_at_the_chosen_budgets():
    from mfd_theory.runs.experiments.real_drafters import study_pairs

    choices = [dict(method="ddtree", drafter="product", scorer=None, budget=16, temperature=1.0, dataset="code"),
               dict(method="mfd", drafter="mfd-k2", scorer="mixture", budget=16, temperature=1.0, dataset="code"),
               dict(method="mfd", drafter="mfd-k2", scorer="best_mode", budget=32, temperature=1.0, dataset="code")]
    # the theory predicted the chain faster than DDTree: the faster-method question is against the chain
    preds = [dict(method="chain", drafter="product", budget=7, scorer=None, temperature=1.0, dataset="code",
                  predicted_speedup=1.2),
             dict(method="ddtree", drafter="product", budget=16, scorer=None, temperature=1.0, dataset="code",
                  predicted_speedup=1.1)]
    pairs = study_pairs(choices, preds, {"product": 1, "mfd-k2": 2}, 8, [1.0], ["code"])
    got = {(p["question"], p["a"], p["b"]) for p in pairs}
    chain, ddt = ("chain", "product", 7, None), ("ddtree", "product", 16, None)
    mix, best = ("mfd", "mfd-k2", 16, "mixture"), ("mfd", "mfd-k2", 32, "best_mode")
    assert got == {("against_product", mix, chain), ("against_product", best, chain),
                   ("same_n", mix, ddt),  # the best-mode tree chose N = 32: no same-N pair for it
                   ("scorer", best, mix)}


def test_reach_rows_put_the_measured_gain_beside_the_ceilings():
    import numpy as np

    from mfd_theory.report.real_drafters import reach_rows
    from mfd_theory.stats import compare

    tau = dict(gain=0.06, lo=-0.02, hi=0.15, verdict="inconclusive", n_runs=3)
    d = {"target": "t", "runs": [{"rows": [dict(drafter="mfd-k2", K=2)]}],
         "verdicts": [dict(question="same_n", dataset="code", temperature=1.0, tau_cmp=tau,
                           a=dict(method="mfd", drafter="mfd-k2", budget=16, scorer="mixture"),
                           b=dict(method="ddtree", drafter="product", budget=16, scorer=None)),
                      dict(question="same_n", dataset="code", temperature=0.0, tau_cmp=tau,  # T = 0: no ceiling
                           a=dict(method="mfd", drafter="mfd-k2", budget=16, scorer="mixture"),
                           b=dict(method="ddtree", drafter="product", budget=16, scorer=None))]}
    per = {"product": [2.0, 3.0, 2.5], "mixture K=2": [2.4, 3.3, 2.6]}
    ceiling = {"targets": {"t": {"ceiling": {"code": {"1": {"by_budget": {"16": {"per_prompt": per}}}}}}}}
    (row,) = reach_rows(d, ceiling)
    want = compare(1 + np.array(per["mixture K=2"]), 1 + np.array(per["product"])).gain
    assert row["predicted"]["gain"] == pytest.approx(want)
    assert row["reach"] == pytest.approx(0.06 / want) and row["reach_lo"] == pytest.approx(-0.02 / want)
    assert reach_rows(d, {"targets": {"other": {}}}) == []  # another target's ceiling says nothing of this one


def test_the_recipe_stage_trains_each_variant_and_measures_it_on_held_out_prompts(tiny_target, tmp_path, capsys):
    from mfd_theory.commands.experiments import real_drafters
    from mfd_theory.llm.measure.heldout import heldout_greedy_tau
    from mfd_theory.llm.models.drafter import load_drafter
    from mfd_theory.llm.training.distill import load_distill_data

    out = tmp_path / "recipe"
    argv = ["--target", str(tiny_target), *ARGS, "--stages", "recipe", "--recipe-seeds", "2", "--heldout-prompts", "2",
            "--heldout-tokens", "6", "--soft-top-k", "4", "--budgets", "4", "--answer-tokens", "20", "--out", str(out)]
    res = real_drafters.main(argv)
    data = res.data
    assert not (out / "real_drafters.json").exists() and not (out / "eval").exists()  # the main stage did not run
    held = [json.loads(x) for x in (out / "prompts" / "heldout.jsonl").read_text().splitlines()]
    train = {json.dumps(json.loads(x)["messages"]) for x in (out / "prompts" / "train.jsonl").read_text().splitlines()}
    calib = {json.dumps(json.loads(x)["messages"]) for x in (out / "prompts" / "calib.jsonl").read_text().splitlines()}
    assert len(held) == 4 and not {json.dumps(r["messages"]) for r in held} & (train | calib)
    assert sorted((t["recipe"], t["seed"]) for t in data["trained"]) == sorted(
        (r, s) for r in ("tokens", "soft", "random-init", "block16") for s in (0, 1))
    blocks = {t["recipe"]: json.loads((out / "recipes" / t["recipe"] / "s0" / "drafter" / "config.json").read_text())
              ["block_size"] for t in data["trained"]}
    assert blocks == {"tokens": 4, "soft": 4, "random-init": 4, "block16": 16}
    run_cfg = json.loads((out / "recipes" / "soft" / "s0" / "train_config.json").read_text())
    assert run_cfg["train"]["soft_share"] == 1.0 and "soft_share" not in json.loads(
        (out / "recipes" / "tokens" / "s0" / "train_config.json").read_text())["train"]
    # each measurement is the held-out tau of that checkpoint, recomputed here
    seqs, plens, _ = load_distill_data(out / "heldout")
    from mfd_theory.llm.models.target import load_local_target

    hf, _ = load_local_target(str(tiny_target), "cpu", "float32")
    m = next(x for x in data["measured"] if x["recipe"] == "soft" and x["seed"] == 1)
    again = heldout_greedy_tau(hf, load_drafter(out / "recipes" / "soft" / "s1" / "drafter", hf).eval(), seqs, plens, 4)
    assert [c["tau"] for c in again["cells"]] == pytest.approx([c["tau"] for c in m["budgets"]["4"]["cells"]])
    got = {(c["method"], c["recipe"]) for c in data["comparisons"]}
    assert got == {(mt, r) for mt in ("chain", "ddtree") for r in ("soft", "random-init", "block16")}
    assert all(c["cmp"] is None or c["cmp"]["n_runs"] == 2 for c in data["comparisons"])
    from mfd_theory.report import BLOCKS, Results
    from mfd_theory.results import Result

    saved = Result.load(out / "real_recipe.json")
    text = BLOCKS["real-recipe"].make(Results.holding(saved, out / "real_recipe.json"))
    tau = [c["tau"] for c in m["budgets"]["4"]["cells"]]
    row = next(ln for ln in text.splitlines() if ln.startswith("| soft |"))
    assert f"{tau[0]:.2f}" in row.split(" | ")[4].split(" / ")[1] and f"{tau[1]:.2f}" in row.split(" | ")[5]
    assert sum(ln.startswith(("| soft | chain", "| block16 | ddtree")) for ln in text.splitlines()) == 2
    capsys.readouterr()
    real_drafters.main(argv)
    assert capsys.readouterr().out.count("finished earlier") == 1 + 1 + 8
    # another budget list measures every drafter again (no drafter trained: the target alone is loaded)
    more = real_drafters.main([*argv, "--budgets", "4", "6"])
    assert capsys.readouterr().out.count("finished earlier") == 1 + 1 + 8
    assert all(set(m["budgets"]) == {"4", "6"} and m["measured_budgets"] == [4, 6] for m in more.data["measured"])
    for old, new in zip(data["measured"], more.data["measured"]):  # the same drafters on the same answers
        assert (old["recipe"], old["seed"], old["budgets"]["4"]) == (new["recipe"], new["seed"], new["budgets"]["4"])
    # another top-k retrains the soft recipe only
    real_drafters.main([*argv, "--soft-top-k", "2", "--budgets", "4", "6"])
    assert capsys.readouterr().out.count("finished earlier") == 1 + 1 + 6


def test_reference_answers_join_the_training_data(tiny_target, tmp_path, capsys):
    """--references N: N standard-library functions as teacher-forced answers, written once as a data
    set of their own, trained on after the distilled answers (a new key: the drafter trains again)."""
    from mfd_theory.commands.experiments import real_drafters
    from mfd_theory.llm.training.distill import load_distill_data

    out = tmp_path / "refs"
    base = ["--target", str(tiny_target), *ARGS, "--stages", "recipe", "--recipes", "tokens", "--recipe-seeds", "1",
            "--heldout-prompts", "2", "--heldout-tokens", "6", "--budgets", "4", "--out", str(out)]
    plain = real_drafters.main(base)
    assert plain.data["references"] is None and not (out / "references").exists()
    cfg0 = json.loads((out / "recipes" / "tokens" / "s0" / "train_config.json").read_text())
    res = real_drafters.main([*base, "--references", "3", "--reference-tokens", "16"])
    note = res.data["references"]
    assert note["functions"] == note["n_sequences"] == 3 and note["max_tokens"] == 16
    seqs, plens, manifest = load_distill_data(out / "references")
    assert len(seqs) == 3 and all(len(x) - p <= 17 for x, p in zip(seqs, plens))
    assert note["n_response_tokens"] == manifest["n_response_tokens"]
    cfg = json.loads((out / "recipes" / "tokens" / "s0" / "train_config.json").read_text())
    # the distilled answers (one per training prompt that got an answer) and then the 3 references
    assert cfg0["n_sequences"] >= 4 and cfg["n_sequences"] == cfg0["n_sequences"] + 3
    assert cfg["data_hash"] != cfg0["data_hash"]
    steps = json.loads((out / "steps.json").read_text())["steps"]
    assert steps["references"]["done"] and steps["references"]["files"]  # its bytes are recorded
    capsys.readouterr()
    real_drafters.main([*base, "--references", "3", "--reference-tokens", "16"])
    assert "references: finished earlier" in capsys.readouterr().out


@pytest.mark.parametrize("argv,match", [
    (["--stages", "recipe", "--recipes", "soft"], "must include tokens"),
    (["--kinds", "mfd-k2"], "must include product"),
    (["--kinds", "product", "product"], "each value once"),
    (["--draft-vocab", "1"], "at least 2 tokens"),
    (["--budgets", ""], "budgets"),
])
def test_bad_options_are_refused(argv, match, tmp_path, capsys):
    from mfd_theory.commands.experiments import real_drafters

    with pytest.raises(SystemExit) as exc:
        real_drafters.main(["--target", str(tmp_path), *argv, "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    assert match in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_two_fresh_runs_give_the_same_bits_and_tau(tiny_target, tmp_path, capsys):
    """Same seed and threads on one machine: every checkpoint and data file of two independent runs
    has the same sha256 (mfd compare-runs says identical, exit 0), and every cell the same tau."""
    from mfd_theory.commands import compare_runs
    from mfd_theory.commands.experiments import real_drafters

    args = ["--target", str(tiny_target), *ARGS, "--kinds", "product", "mfd-k2", "--temperatures", "0",
            "--budgets", "4"]
    a = real_drafters.main([*args, "--out", str(tmp_path / "a")])
    b = real_drafters.main([*args, "--out", str(tmp_path / "b")])

    def taus(res):
        return [[(r["dataset"], r["method"], r["drafter"], r["budget"], r["scorer"], r["tau"]) for r in run["rows"]]
                for run in res.data["runs"]]

    assert taus(a) == taus(b)
    capsys.readouterr()
    assert compare_runs.main(["--runs", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "identical" in out and "train product s1" in out
