"""The shipped drafters' release: ``mfd drafter pack`` writes a trained drafter in bfloat16 with its
provenance and tau, ``mfd drafter list`` shows and verifies it, and every ``--drafter`` (and
``load_drafter``) takes its name; caps, damaged files and unknown names are refused."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mfd_theory.cli import main as mfd  # noqa: E402
from mfd_theory import shipped_drafters as sd  # noqa: E402

from pipeline_helpers import save_tiny_target, write_prompts  # noqa: E402

TRAIN_ARGS = ["--block-size", "4", "--steps", "3", "--batch-size", "4", "--ckpt-every", "3", "--lr", "3e-3",
              "--quiet"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A tiny target, a K = 1 and a K = 2 drafter trained on its answers, their tau run."""
    root = tmp_path_factory.mktemp("shipped")
    target = save_tiny_target(root / "target")
    files = [str(p) for p in write_prompts(root / "prompts")]
    assert mfd(["distill", "--target", str(target), "--prompts", *files, "--out", str(root / "data"),
                "--max-new-tokens", "10", "--shard-size", "4", "--quiet"]) == 0
    for name, extra in (("k1", []), ("k2", ["--modes", "2"])):
        assert mfd(["train-drafter", "--target", str(target), "--data", str(root / "data"), "--out",
                    str(root / name), *TRAIN_ARGS, *extra]) == 0
    assert mfd(["tau", "--target", str(target), "--drafter", str(root / "k1"), "--drafter", str(root / "k2"),
                "--prompts", files[0], "--budgets", "3", "--max-new-tokens", "10", "--batch", "2",
                "--cache-dir", str(root / "answers"), "--out", str(root / "tau"), "--quiet"]) == 0
    return root, target


def _pack(root, target, release, name, run):
    return mfd(["drafter", "pack", name, "--run", str(root / run), "--tau", str(root / "tau"), "--target",
                str(target), "--out", str(release), "--quiet"])


@pytest.fixture(scope="module")
def release(made):
    root, target = made
    rel = root / "release"
    assert _pack(root, target, rel, "tiny-k1", "k1") == 0
    assert _pack(root, target, rel, "tiny-k2", "k2") == 0
    return rel


def test_pack_writes_bfloat16_weights_and_provenance(made, release):
    from safetensors.torch import load_file

    root, target = made
    rec = json.loads((release / sd.RELEASE_FILE).read_text())
    assert rec["format"] == sd.FORMAT and sorted(rec["drafters"]) == ["tiny-k1", "tiny-k2"]
    for name, run, modes in (("tiny-k1", "k1", 1), ("tiny-k2", "k2", 2)):
        e = rec["drafters"][name]
        assert (e["kind"], e["modes"], e["dtype"], e["block_size"]) == ("dflash", modes, "bfloat16", 4)
        orig = load_file(str(root / run / "drafter" / "model.safetensors"))
        packed = load_file(str(release / name / "model.safetensors"))
        assert sorted(orig) == sorted(packed)
        for k, v in orig.items():  # each float tensor is the original rounded to bfloat16, nothing else
            want = v.to(torch.bfloat16) if v.is_floating_point() else v
            assert packed[k].dtype == want.dtype and torch.equal(packed[k], want), k
        for fname, f in e["files"].items():
            assert f["sha256"] == sd.file_sha256(release / name / fname) and f["bytes"] == (release / name / fname).stat().st_size
        assert e["bytes"] == sum(f["bytes"] for f in e["files"].values())
        assert "distilled_prompts.json" in e["files"] and "config.json" in e["files"]
        # training: the run's own record of time and provenance, its config
        runrec = json.loads((root / run / "run_record.json").read_text())
        assert e["training"]["train_seconds"] == runrec["train_seconds"] > 0
        assert runrec["sessions"][-1]["last_step"] == 3 and e["training"]["steps"] == 3
        assert e["training"]["config"] == json.loads((root / run / "train_config.json").read_text())
        # tau: exactly the cells the tau run measured for this drafter
        tau = json.loads((root / "tau" / "tau.json").read_text())
        row, = [d for d in tau["data"]["drafters"] if d["drafter"].endswith(f"{run}/drafter")]
        want = sorted(c["tau"] for b in row["sets"]["alpha"]["budgets"].values() for c in b["cells"])
        (got,) = e["tau"]
        assert got["temperature"] == 0.0 and sorted(c["tau"] for c in got["cells"]) == want
        assert len(want) == (2 if modes == 1 else 3)
        sha = (e["packed"]["git_sha"] or "").split("+")[0]  # the tree may turn dirty between two commands
        assert sha == (tau["provenance"]["git_sha"] or "").split("+")[0]


def test_list_shows_and_verifies_the_release(made, release, capsys):
    rows = mfd(["drafter", "list", "--out", str(release), "--verify"])
    out = capsys.readouterr().out
    assert rows == 0 and "tiny-k1: product (K = 1)" in out and "tiny-k2: MFD K = 2" in out
    assert out.count("sha256 verified") == 2 and "T = 0: best tau" in out


def test_a_shipped_name_loads_where_a_directory_does(made, release, monkeypatch):
    from mfd_theory.configs.pipeline.local_target import checkpoint_dir
    from mfd_theory.llm.models.drafter import load_drafter
    from mfd_theory.llm.models.target import load_local_target

    root, target = made
    monkeypatch.setenv("MFD_DRAFTERS_DIR", str(release))
    assert checkpoint_dir("tiny-k2") == release / "tiny-k2"
    hf, _ = load_local_target(target, "cpu", "float32")
    by_name, by_dir = load_drafter("tiny-k2", hf), load_drafter(release / "tiny-k2", hf)
    assert by_name.num_modes == 2
    for (a, x), (b, y) in zip(by_name.state_dict().items(), by_dir.state_dict().items()):
        assert a == b and torch.equal(x, y)
    # a command takes the name: tau of the shipped drafter by name equals tau of its directory
    common = ["tau", "--target", str(target), "--prompts", str(root / "prompts" / "alpha.jsonl"), "--budgets", "3",
              "--max-new-tokens", "10", "--batch", "2", "--cache-dir", str(root / "answers"), "--quiet"]
    assert mfd([*common, "--drafter", "tiny-k1", "--out", str(root / "tau-name")]) == 0
    assert mfd([*common, "--drafter", str(release / "tiny-k1"), "--out", str(root / "tau-dir")]) == 0
    cells = [json.loads((root / d / "tau.json").read_text())["data"]["drafters"][0]["sets"] for d in ("tau-name", "tau-dir")]
    assert cells[0] == cells[1]


def test_a_damaged_file_or_unknown_name_is_refused(made, release, tmp_path, monkeypatch, capsys):
    import shutil

    from mfd_theory.configs.pipeline.local_target import checkpoint_dir

    copy = tmp_path / "rel"
    shutil.copytree(release, copy)
    monkeypatch.setenv("MFD_DRAFTERS_DIR", str(copy))
    with pytest.raises(ValueError, match=r"--drafter: tiny-k3 is neither a directory nor a shipped drafter.*"
                                         r"did you mean tiny-k2 or tiny-k1"):
        checkpoint_dir("tiny-k3")
    w = copy / "tiny-k1" / "model.safetensors"
    data = bytearray(w.read_bytes())
    data[-1] ^= 0xFF
    w.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"--drafter: shipped drafter tiny-k1 .* model.safetensors's sha256 differs"):
        checkpoint_dir("tiny-k1")
    assert sd.verify_drafter("tiny-k2", copy) == []
    assert mfd(["drafter", "list", "--verify"]) == 0
    assert "tiny-k1: product (K = 1) for" in (out := capsys.readouterr().out) and "FAILED: model.safetensors's" in out


def test_caps_refuse_a_pack_and_leave_the_release_as_it_was(made, release, tmp_path, monkeypatch, capsys):
    import shutil

    from mfd_theory.runs.pipeline import drafter_release

    root, target = made
    copy = tmp_path / "rel"
    shutil.copytree(release, copy)
    before = {p.relative_to(copy): p.read_bytes() for p in sorted(copy.rglob("*")) if p.is_file()}
    size = json.loads((copy / sd.RELEASE_FILE).read_text())["drafters"]["tiny-k1"]["bytes"]
    monkeypatch.setattr(drafter_release, "MAX_DRAFTER_BYTES", size - 1)
    assert _pack(root, target, copy, "tiny-k1", "k1") == 2
    assert "over the" in capsys.readouterr().err
    monkeypatch.setattr(drafter_release, "MAX_DRAFTER_BYTES", 10 * size)
    monkeypatch.setattr(drafter_release, "MAX_RELEASE_BYTES", size + 1)  # tiny-k2 already holds more than 1 byte
    assert _pack(root, target, copy, "tiny-k1", "k1") == 2
    assert "the release would hold" in capsys.readouterr().err
    after = {p.relative_to(copy): p.read_bytes() for p in sorted(copy.rglob("*")) if p.is_file()}
    assert after == before  # nothing written, nothing half-written


def test_pack_refuses_a_tau_run_of_another_drafter(made, tmp_path, capsys):
    root, target = made
    assert mfd(["drafter", "pack", "x", "--run", str(root / "data"), "--tau", str(root / "tau"),
                "--out", str(tmp_path / "r")]) == 2
    assert "--run: no drafter checkpoint" in capsys.readouterr().err
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "tau.json").write_text((root / "tau" / "tau.json").read_text().replace("k1/drafter", "zz/drafter"))
    assert mfd(["drafter", "pack", "x", "--run", str(root / "k1"), "--tau", str(tmp_path / "other"),
                "--target", str(target), "--out", str(tmp_path / "r")]) == 2
    assert "--tau:" in (err := capsys.readouterr().err) and "not " in err
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_the_committed_release_matches_its_files_and_caps():
    """The repository's own release (drafters/): every file's size and sha256 as RELEASE.json says,
    each drafter within 40 MB and the release within 100 MB, bfloat16, for the shipped Qwen target,
    with its training data's hash and the tau measured for it at T = 0 and T = 1."""
    root = sd.drafters_dir()
    names = sd.shipped_drafter_names(root)
    if not names:
        pytest.skip(f"no release in {root}")
    rel = sd.read_release(root)
    total = 0
    for name in names:
        e = rel["drafters"][name]
        assert sd.verify_drafter(name, root) == [], name
        assert e["bytes"] == sd.release_bytes(e) <= sd.MAX_DRAFTER_BYTES and e["dtype"] == "bfloat16"
        assert e["target"] == "qwen2.5-coder-0.5b-instruct" and e["training"]["data_sha256"]
        assert sorted(t["temperature"] for t in e["tau"]) == [0.0, 1.0]
        assert all(len(t["cells"]) > 0 and t["prompts"] == 164 for t in e["tau"])
        total += e["bytes"]
    assert total <= sd.MAX_RELEASE_BYTES
