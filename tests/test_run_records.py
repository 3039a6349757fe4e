"""Step records (mfd_theory.run_records): each step's checkpoint and data files by sha256, kept in
steps.json by Steps, and ``mfd compare-runs``, which names the first step two runs part at."""

import hashlib
import json

import pytest

from mfd_theory.run_records import compare_records, file_digests, read_records, step_digest


def _tree(root, files: dict):
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def test_file_digests_keep_checkpoints_and_data_by_their_bytes(tmp_path):
    _tree(tmp_path, {"drafter/model.safetensors": b"weights", "drafter/config.json": b"{}", "answers.jsonl": b"a\n",
                     "sub/x.npy": b"np", "study.json": b"{\"seconds\": 3}", ".cache/y.bin": b"hidden", "notes.txt": b"t"})
    got = file_digests(tmp_path)
    # the twin: hashlib over the files named by hand
    want = {rel: hashlib.sha256(data).hexdigest() for rel, data in
            {"answers.jsonl": b"a\n", "drafter/model.safetensors": b"weights", "sub/x.npy": b"np"}.items()}
    assert got == want and list(got) == sorted(want)
    assert file_digests(tmp_path / "answers.jsonl") == {"answers.jsonl": want["answers.jsonl"]}
    assert file_digests(tmp_path / "study.json") == {} and file_digests(tmp_path / "absent") == {}
    # the digest is order-free and moves with any byte
    assert step_digest(dict(reversed(list(got.items())))) == step_digest(got)
    (tmp_path / "sub" / "x.npy").write_bytes(b"nq")
    assert step_digest(file_digests(tmp_path)) != step_digest(got)


def test_compare_records_names_the_first_step_that_differs():
    a = {"distill": {"d.safetensors": "1"}, "train": {"m.safetensors": "2"}, "eval": {"per_prompt.jsonl": "3"}}
    assert compare_records(a, json.loads(json.dumps(a))) == {
        "steps": [{"step": s, "status": "same", "files": []} for s in a], "first_difference": None, "identical": True}
    b = {"distill": {"d.safetensors": "1"}, "train": {"m.safetensors": "X"}, "eval": {"per_prompt.jsonl": "Y"},
         "extra": {}}
    res = compare_records(a, b)
    assert res["first_difference"] == "train" and not res["identical"]
    assert [(s["step"], s["status"], s["files"]) for s in res["steps"]] == [
        ("distill", "same", []), ("train", "differs", ["m.safetensors"]), ("eval", "differs", ["per_prompt.jsonl"]),
        ("extra", "only in b", [])]
    # a file present in one run only is a difference too
    res = compare_records({"s": {"a.npy": "1"}}, {"s": {"a.npy": "1", "b.npy": "2"}})
    assert res["steps"][0] == {"step": "s", "status": "differs", "files": ["b.npy"]}


def test_steps_record_each_steps_files_and_fill_them_in_for_older_runs(tmp_path):
    from mfd_theory.runs.steps import Steps

    out = tmp_path / "one"
    steps = Steps(tmp_path / "steps.json")
    steps.run("make", "k1", "make it", out, lambda: (out / "done.jsonl").is_file(),
              lambda: _tree(out, {"done.jsonl": b"x\n", "log.json": b"{}"}))
    entry = json.loads((tmp_path / "steps.json").read_text())["steps"]["make"]
    assert entry["done"] and entry["files"] == {"done.jsonl": hashlib.sha256(b"x\n").hexdigest()}
    # a record written before files were kept gains them when the step is reused
    data = json.loads((tmp_path / "steps.json").read_text())
    del data["steps"]["make"]["files"]
    (tmp_path / "steps.json").write_text(json.dumps(data))
    again = Steps(tmp_path / "steps.json")
    assert not again.run("make", "k1", "make it", out, lambda: True, lambda: pytest.fail("reran a finished step"))
    assert read_records(tmp_path) == {"make": entry["files"]}


def test_read_records_refuses_what_is_not_a_record(tmp_path):
    with pytest.raises(ValueError, match="run: no steps.json"):
        read_records(tmp_path)
    (tmp_path / "steps.json").write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        read_records(tmp_path)
    (tmp_path / "steps.json").write_text(json.dumps({"steps": {"a": {"done": True}}}))
    with pytest.raises(ValueError, match="records no file hashes"):
        read_records(tmp_path / "steps.json")


def test_compare_runs_exits_0_when_identical_1_at_a_difference_and_2_on_bad_input(tmp_path, capsys):
    from mfd_theory.cli import main

    def run(name, weights):
        d = tmp_path / name
        d.mkdir()
        rec = {"distill": {"done": True, "files": {"d.safetensors": "1"}},
               "train": {"done": True, "files": {"m.safetensors": weights}}}
        (d / "steps.json").write_text(json.dumps({"steps": rec}))
        return str(d)

    a, b, c = run("a", "w"), run("b", "w"), run("c", "v")
    assert main(["compare-runs", "--runs", a, b]) == 0
    assert "identical" in capsys.readouterr().out
    out = tmp_path / "cmp.json"
    assert main(["compare-runs", "--runs", a, c, "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "the runs part at step 'train'" in printed and "m.safetensors" in printed
    assert json.loads(out.read_text())["first_difference"] == "train"
    assert main(["compare-runs", "--runs", a]) == 2
    assert "--runs: give exactly two runs" in capsys.readouterr().err
    assert main(["compare-runs", "--runs", a, str(tmp_path / "nowhere")]) == 2
    assert "--runs: no steps.json" in capsys.readouterr().err
