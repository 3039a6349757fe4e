"""``mfd natural``: the stdlib corpus and its split, and a micro run of the whole thing through the CLI
(the ceiling it runs is tested in test_ceiling.py)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mfd_theory.cli import main as mfd  # noqa: E402
import mfd_theory.llm.training.natural_corpus as nc
from mfd_theory.results import Result  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------ the corpus


def _fake_stdlib(root: Path, n_modules: int = 40, n_topics: int = 30) -> Path:
    for i in range(n_modules):
        body = (f'"""Module {i}."""\n\n\ndef f{i}(x, y):\n    """Add {i} to the sum.\n\n    More text.\n    """\n'
                f"    z = x + y\n    return z + {i}\n")
        (root / f"mod{i}.py").write_text(body)
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text('"""A package."""\nVALUE = 1\n')
    for skip in ("test", "idlelib", "site-packages"):
        (root / skip).mkdir()
        (root / skip / "hidden.py").write_text("SECRET = 1\n")
    (root / "bad.py").write_text("def broken(:\n")
    (root / "pydoc_data").mkdir()
    filler = "It keeps going with some further words, to be continued by the model later on, and then some more. "
    topics = {f"topic{i}": (f"Topic {i} explains one thing, in a first sentence long enough to be a prompt on its "
                            f"own. {filler * 2}\n\nA second paragraph about topic {i} starts here and runs on for a "
                            f"while before it ends. {filler * 2}\n")
              for i in range(n_topics)}
    (root / "pydoc_data" / "topics.py").write_text("topics = " + repr(topics) + "\n")
    return root


def test_units_exclude_tests_and_read_topics_as_prose(tmp_path):
    units = nc.list_units(_fake_stdlib(tmp_path))
    names = {u.name for u in units}
    assert "pkg" in names and "mod0" in names and "pydoc_data.topics:topic3" in names
    assert not any("hidden" in n or n == "bad" for n in names)
    assert {u.kind for u in units if u.name.startswith("pydoc_data")} == {"prose"}
    assert [u.name for u in units] == sorted(names)


def test_split_is_by_unit_deterministic_and_order_free(tmp_path):
    units = nc.list_units(_fake_stdlib(tmp_path))
    train, held = nc.split_units(units, 0.3)
    shuffled = units[:]
    random.Random(1).shuffle(shuffled)
    train2, held2 = nc.split_units(shuffled, 0.3)
    assert {u.name for u in held} == {u.name for u in held2} and {u.name for u in train} == {u.name for u in train2}
    assert not {u.name for u in held} & {u.name for u in train}
    assert len(held) + len(train) == len(units)
    # the rule is a function of the name alone
    assert all(nc.is_heldout(u.name, 0.3) for u in held) and not any(nc.is_heldout(u.name, 0.3) for u in train)
    # about the asked share (binomial, 5 sigma)
    n = len(units)
    assert abs(len(held) - 0.3 * n) <= 5 * math.sqrt(n * 0.21)
    with pytest.raises(ValueError, match="heldout_fraction"):
        nc.is_heldout("x", 1.0)


def test_no_held_out_text_in_training_and_the_check_can_fail(tmp_path):
    units = nc.list_units(_fake_stdlib(tmp_path))
    train, held = nc.split_units(units, 0.3)
    nc.check_no_leak([u.text for u in train], held, min_chars=50)
    leaky = [u.text for u in train] + ["prefix " + held[0].text + " suffix"]
    with pytest.raises(ValueError, match="occurs in the training text"):
        nc.check_no_leak(leaky, held, min_chars=50)


def test_prompts_come_from_held_out_units_only(tmp_path):
    units = nc.list_units(_fake_stdlib(tmp_path))
    train, held = nc.split_units(units, 0.3)
    code = nc.code_prompts(held, 5)
    prose = nc.prose_prompts(held, 5)
    held_names = {u.name for u in held}
    assert code and prose
    assert all(p["unit"] in held_names for p in code + prose)
    for p in code:  # signature + docstring; the body is what the target is to write
        assert p["prompt"].startswith("def ") and p["prompt"].endswith('"""\n') and "return" not in p["prompt"]
        assert "return" in p["reference"]
    for p in prose:
        assert p["prompt"].rstrip().endswith(".") and p["reference"].strip()
    # written as mfd eval reads them
    path = nc.write_prompts(tmp_path / "out" / "code.jsonl", code, "code")
    from mfd_theory.llm.training.prompts import read_prompt_files

    read = read_prompt_files([str(path)])
    assert [p.id for p in read] == [p["id"] for p in code] and {p.dataset for p in read} == {"code"}


def test_real_stdlib_split(tmp_path):
    """On this interpreter's stdlib: both domains on both sides, prompts parse, provenance hashes."""
    units = nc.list_units()
    assert sum(u.kind == "code" for u in units) > 300 and sum(u.kind == "prose" for u in units) > 40
    train, held = nc.split_units(units, 0.15)
    prov = nc.provenance(units, train, held)
    assert prov["text_sha256"] == nc.text_hash(list(reversed(units)))  # order-free
    assert sum(1 for _, _, s in prov["units"] if s == "heldout") == len(held)
    code = nc.code_prompts(held, 6)
    import ast

    for p in code:
        ast.parse(p["prompt"] + "    pass\n")  # a signature + docstring that only lacks its body
    assert all(p["unit"] in {u.name for u in held} for p in code + nc.prose_prompts(held, 6))


# ------------------------------------------------------------------------------------ the run


STEPS = ("corpus", "target", "ceiling", "distill", "drafter-k1", "drafter-k2", "drafter-dartree", "eval")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The micro run as ``mfd reproduce`` runs it on two cores: ``--prepare-only`` (every step but
    the evaluation), then the whole command, which only evaluates."""
    import contextlib
    import io

    results = tmp_path_factory.mktemp("natural") / "results"
    out = results / "natural"
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        assert mfd(["natural", "--preset", "micro", "--out", str(out), "--quiet", "--prepare-only",
                    "--threads", "1"]) == 0
    steps = json.loads((out / "steps.json").read_text())["steps"]
    assert list(steps) == list(STEPS[:-1]) and all(s["done"] for s in steps.values())
    assert not (out / "natural.json").exists() and not (out / "eval").exists()
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        assert mfd(["natural", "--preset", "micro", "--out", str(out), "--quiet"]) == 0
    text = said.getvalue()
    assert all(f"{name}: finished earlier, reusing" in text for name in STEPS[:-1]), text
    assert "\n== eval: " in text
    return results, out


def test_micro_run_produces_every_part(run):
    _, out = run
    steps = json.loads((out / "steps.json").read_text())["steps"]
    assert list(steps) == list(STEPS) and all(s["done"] for s in steps.values())
    assert (out / "target" / "config.json").is_file() and (out / "target" / "tokenizer.json").is_file()
    res = Result.load(out / "natural.json")
    d = res.data
    assert set(d["target"]["perplexity"]) == {"code", "prose"}
    assert all(v["perplexity"] > 1 for v in d["target"]["perplexity"].values())
    for dom in ("code", "prose"):
        c = d["ceiling"][dom]
        assert set(c) == {"1", "0.7"}
        for n in ("1", "4"):
            cov = c["1"]["by_budget"][n]["coverage"]
            assert 0 <= cov["product"][0] <= cov["oracle"][0] + 1e-9  # no product tree covers more than the oracle
            assert cov["mixture K=2"][0] <= cov["oracle"][0] + 1e-9
        assert c["1"]["tc"][0] is not None
    rows = d["e2e"]["rows"]
    got = {(r["dataset"], r["temperature"], r["method"], r["K"]) for r in rows}
    for ds in ("code", "prose"):
        for t in (0.0, 1.0):
            assert {(ds, t, "ar", 0), (ds, t, "ddtree", 1), (ds, t, "mfd", 2), (ds, t, "dartree", 1)} <= got
    assert all(r["matches_ar"] for r in rows if r["temperature"] == 0 and r["method"] != "ar")
    # the ddtree-on-MFD ablation is off by default (--ddtree-on-mfd)
    assert not any(r["method"] == "ddtree" and r["K"] > 1 for r in rows)
    methods = {g["method"] for g in d["e2e"]["best_budget"]}
    assert methods == {"mfd", "dartree"}
    # the ceiling's predicted tau gain beside the measured one (tests/test_e2e_ceiling.py, rows of this
    # shape): the micro run evaluates one prompt per domain, which pairs nothing
    assert d["e2e"]["gain_reach"] == [] and {r["n_prompts"] for r in rows} == {1}
    prov = d["provenance"]
    assert prov["python_version"] and len(prov["text_sha256"]) == 64 and prov["subset"] is True
    held = {n for n, _, s in prov["units"] if s == "heldout"}
    ids = [json.loads(x)["id"] for f in ("code.jsonl", "prose.jsonl")
           for x in (out / "prompts" / f).read_text().splitlines()]
    assert ids and all(i.rsplit(":", 2 if "topics:" not in i else 1)[0] in held for i in ids)


def test_rerun_reuses_every_step(run, capsys):
    _, out = run
    capsys.readouterr()
    assert mfd(["natural", "--preset", "micro", "--out", str(out), "--quiet"]) == 0
    said = capsys.readouterr().out
    for name in STEPS:
        assert f"{name}: finished earlier, reusing" in said, name
    assert "\n== " not in said


def test_report_block_from_the_run(run):
    from mfd_theory.report import BLOCKS, natural_block, render

    results, out = run
    res = Result.load(out / "natural.json")
    text = natural_block(res)
    ppl = res.data["target"]["perplexity"]
    assert f"code {ppl['code']['perplexity']:.1f}" in text and f"prose {ppl['prose']['perplexity']:.1f}" in text
    n_rows = sum(r["method"] != "ar" for r in res.data["e2e"]["rows"])
    import re

    lines = text.splitlines()
    assert len([ln for ln in lines if re.match(r"\| (code|prose) \| [01] \| (ddtree|mfd|mfd best-mode|dartree) \| "
                                               r"(K = \d+|dartree) \| ", ln)]) == n_rows
    assert len([ln for ln in lines if re.match(r"\| (code|prose) \| [01] \| (mfd \(K|mfd best-mode \(K|ddtree on|"
                                               r"dartree \| \d+ vs)", ln)]) \
        == len(res.data["e2e"]["best_budget"])
    c = res.data["ceiling"]["code"]["1"]["by_budget"]["4"]["coverage"]
    assert f"| code | 1 | 4 | {c['product'][0]:.2f}" in text
    assert BLOCKS["natural"][0] == "natural/natural.json"
    new, changed, skipped = render("x\n<!-- report:natural -->\nold\n<!-- /report:natural -->\n", results)
    assert changed == ["natural"] and text in new


def test_bad_options_exit_2(tmp_path, capsys):
    for argv, flag in ((["--modes", "2,4"], "--modes"), (["--preset", "huge"], "--preset"),
                       (["--ceiling-modes", "2,4"], "--ceiling-modes"), (["--methods", "ar,beam"], "--methods"),
                       (["--hidden", "102"], "--heads")):
        assert mfd(["natural", "--out", str(tmp_path / "o"), *argv]) == 2, argv
        assert flag in capsys.readouterr().err, argv
    assert not (tmp_path / "o").exists()


def test_config_knows_evals_methods_and_reproduce_runs_it():
    import mfd_theory.commands.experiments.natural as exp
    from mfd_theory.llm.decoding.generate import METHODS
    from mfd_theory.report import BLOCKS
    from mfd_theory.reproduce import STEPS as REPRO

    assert tuple(exp._METHODS) == tuple(METHODS)
    argv = next(a for _, module, a in REPRO if module == "mfd_theory.commands.experiments.natural")
    assert Path("results") / BLOCKS["natural"][0] == Path(argv[argv.index("--out") + 1]) / "natural.json"
    from mfd_theory.report_files import BLOCK_FILES

    assert "<!-- report:natural -->" in (ROOT / BLOCK_FILES["natural"]).read_text()


def test_out_at_a_file_is_a_usage_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for out in (blocker, blocker / "sub"):
        assert mfd(["natural", "--preset", "micro", "--out", str(out)]) == 2
        assert "--out" in capsys.readouterr().err
    assert blocker.read_text() == "x"


def test_docs_show_the_commands_the_experiment_runs():
    """The page that holds the natural block shows the exact commands the experiment runs."""
    import re

    from mfd_theory.commands.experiments.natural import NaturalConfig, command_lines
    from mfd_theory.report_files import BLOCK_FILES

    flat = re.sub(r"\s*\\\n\s*", " ", (ROOT / BLOCK_FILES["natural"]).read_text())
    for line in command_lines(NaturalConfig()):
        assert line in flat, line


def test_held_out_prompts_skip_text_a_training_prompt_or_an_earlier_one_has():
    from mfd_theory.runs.experiments.natural import unseen_prompts

    seen = {"def f(x):", "class A:"}
    held = [{"prompt": t, "id": i} for i, t in enumerate(["class A:", "import os", "import os", "x = 1", "y = 2"])]
    got = unseen_prompts(held, seen, 2)
    assert [p["id"] for p in got] == [1, 3]  # "class A:" is a training prompt, the second "import os" a repeat
    assert {"import os", "x = 1"} <= seen and "y = 2" not in seen  # only what was taken is marked
    assert [p["id"] for p in unseen_prompts(held, seen, 5)] == [4]  # fewer when fewer are left
