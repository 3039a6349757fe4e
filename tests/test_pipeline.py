"""``mfd distill`` -> ``mfd train-drafter`` -> ``mfd eval`` on a tiny saved Qwen3 target, through
the CLI: files, lossless greedy rows, resuming, torchrun (gloo, 2 processes), --init-from, bad input."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mfd_theory.cli import main as mfd  # noqa: E402

from pipeline_helpers import save_tiny_target, write_prompts  # noqa: E402

EVAL_ARGS = ["--budgets", "4", "--temperatures", "0,1", "--max-new-tokens", "8", "--passes", "1", "--quiet",
             "--calibration-count", "1"]  # the test files are small: one prompt per data set predicts
TRAIN_ARGS = ["--block-size", "4", "--steps", "4", "--batch-size", "4", "--ckpt-every", "2", "--lr", "3e-3",
              "--quiet"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Target, prompts, distilled data, a K=1 and a K=3 drafter, and one evaluation."""
    root = tmp_path_factory.mktemp("pipeline")
    target = save_tiny_target(root / "target")
    files = [str(p) for p in write_prompts(root / "prompts")]
    assert mfd(["distill", "--target", str(target), "--prompts", *files, "--out", str(root / "data"),
                "--max-new-tokens", "16", "--shard-size", "2", "--quiet"]) == 0
    assert mfd(["train-drafter", "--target", str(target), "--data", str(root / "data"), "--out",
                str(root / "k1"), *TRAIN_ARGS]) == 0
    assert mfd(["train-drafter", "--target", str(target), "--data", str(root / "data"), "--out",
                str(root / "k3"), "--modes", "3", "--grad-accum", "2", *TRAIN_ARGS]) == 0
    calib = root / "prompts" / "calibration.jsonl"
    calib.write_text("\n".join(json.dumps({"prompt": t}) for t in ("seven times six", "a list of names")) + "\n")
    assert mfd(["eval", "--target", str(target), "--drafter", str(root / "k1"), "--drafter", str(root / "k3"),
                "--prompts", *files, "--out", str(root / "eval"), "--calibration-prompts", str(calib),
                *EVAL_ARGS]) == 0
    return root, target, files


def test_distill_writes_shards_and_manifest(run):
    from mfd_theory.llm.training.distill import load_distill_data

    root, _, _ = run
    seqs, plens, manifest = load_distill_data(root / "data")
    # 5 prompts, one of them two turns: 6 sequences in ceil(5 / 2) = 3 shards
    assert manifest["n_sequences"] == 6 and len(manifest["shards"]) == 3
    assert len(seqs) == len(plens) == 6
    assert all(len(s) > p >= 1 for s, p in zip(seqs, plens))
    meta = [(s["id"], s["turn"]) for s in _samples(root / "data")]
    assert ("mt", 0) in meta and ("mt", 1) in meta
    first, second = meta.index(("mt", 0)), meta.index(("mt", 1))
    # the second turn's prompt holds the first turn's exchange, so it is longer than the whole first sequence
    assert plens[second] > len(seqs[first])


def test_distill_records_its_settings_where_the_docs_say(run):
    root, _, _ = run
    saved = json.loads((root / "data" / "train_config.json").read_text())
    assert saved["max_new_tokens"] == 16 and saved["format"] == "mfd-distill-v1"
    docs = (Path(__file__).resolve().parent.parent / "docs" / "own-target.md").read_text()
    assert "`OUT/train_config.json`" in docs and "distill_config" not in docs


def test_rerun_with_other_options_names_out_and_what_differs(run, capsys):
    """A rerun into a directory made with other options is refused naming --out and each setting
    that differs with its two values; the directory is left as it was."""
    root, target, files = run
    before = sorted((p.name, p.stat().st_mtime_ns) for p in (root / "data").iterdir())
    assert mfd(["distill", "--target", str(target), "--prompts", *files, "--out", str(root / "data"),
                "--max-new-tokens", "17", "--shard-size", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "error: --out: " in err and "max_new_tokens: 16 there, 17 now" in err, err
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (root / "data").iterdir()) == before
    assert mfd(["train-drafter", "--target", str(target), "--data", str(root / "data"), "--out", str(root / "k1"),
                *TRAIN_ARGS, "--modes", "2"]) == 2
    err = capsys.readouterr().err
    assert "error: --out: " in err and "num_modes: 1 there, 2 now" in err, err


def test_target_that_is_missing_or_a_file_says_so(run, tmp_path, capsys):
    _, _, files = run
    afile = tmp_path / "afile"
    afile.write_text("x")
    for target, why in ((afile, "is a file, not a model directory"), (tmp_path / "none", "does not exist")):
        assert mfd(["distill", "--target", str(target), "--prompts", *files, "--out", str(tmp_path / "o")]) == 2
        assert f"error: --target: {target} {why}" in capsys.readouterr().err
    from mfd_theory.llm.models.target import load_local_target

    # the Python loader checks the path first: not transformers' "repo id" error
    with pytest.raises(ValueError, match="target: .* does not exist"):
        load_local_target(tmp_path / "none")
    model, tok = load_local_target(run[1])
    assert not model.training and not any(p.requires_grad for p in model.parameters()) and tok is not None


def test_commands_run_on_their_threads_and_restore_torch(run, tmp_path, monkeypatch):
    """--threads (default 1, the repeatable choice) holds while the command runs; torch's own
    setting is back afterwards."""
    import mfd_theory.runs.pipeline.entry as distill

    seen = []
    monkeypatch.setattr(distill, "_distill", lambda config, opts: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    base = ["distill", "--target", str(run[1]), "--prompts", run[2][0], "--out", str(tmp_path / "o")]
    assert mfd(base) == 0 and mfd([*base, "--threads", "2"]) == 0
    assert seen == [1, 2] and torch.get_num_threads() == before


def _samples(directory):
    from safetensors import safe_open

    out = []
    for f in sorted(Path(directory).glob("shard-*.safetensors")):
        with safe_open(str(f), framework="np") as h:
            out += json.loads(h.metadata()["samples"])
    return out


def test_drafters_are_dflash_checkpoints_with_fingerprint(run):
    root, _, _ = run
    for name, arch in (("k1", "DFlashDraftModel"), ("k3", "MFDDraftModel")):
        d = root / name / "drafter"
        cfg = json.loads((d / "config.json").read_text())
        assert cfg["architectures"] == [arch] and cfg["block_size"] == 4
        assert (d / "model.safetensors").is_file()
        assert json.loads((d / "target_fingerprint.json").read_text())["target"]
    curve = json.loads((root / "k3" / "loss_curve.json").read_text())
    assert len(curve) == 4 and all(np.isfinite(c["loss"]) for c in curve)


def test_eval_rows_are_lossless_and_complete(run):
    root, _, _ = run
    res = json.loads((root / "eval" / "eval.json").read_text())
    rows = res["data"]["rows"]
    need = ("dataset", "drafter", "K", "method", "budget", "temperature", "n_prompts", "n_rounds", "tau",
            "accepted_mean", "covered_mass_insample", "covered_mass_mean", "dead_share", "tokens_per_s",
            "speedup", "speedup_passes", "speedup_std", "tokens_per_s_std")
    for r in rows:
        assert all(k in r for k in need), r
        assert isinstance(r["budget"], int)
        # one type per column: matches_ar is checked on greedy rows and null (not checked) on
        # sampled ones, and lossless_checked, a bool on every row, says which
        assert r["lossless_checked"] is (r["temperature"] == 0), r
        if r["temperature"] == 0:
            assert r["matches_ar"] is True, r
        else:
            assert "matches_ar" in r and r["matches_ar"] is None, r
    assert {r["dataset"] for r in rows} == {"alpha", "beta"}
    mfd_rows = [r for r in rows if r["method"] == "mfd"]
    assert mfd_rows and {r["drafter"] for r in mfd_rows} == {"k3"} and all(r["K"] == 3 for r in mfd_rows)
    assert {(r["method"], r["drafter"]) for r in rows} >= {("chain", "k1"), ("ddtree", "k1"), ("chain", "k3"),
                                                           ("ddtree", "k3")}
    beta = next(r for r in rows if r["dataset"] == "beta" and r["method"] == "ar" and r["temperature"] == 0)
    assert beta["n_prompts"] == 2
    per = [json.loads(x) for x in (root / "eval" / "per_prompt.jsonl").read_text().splitlines()]
    assert len(per) == sum(r["n_prompts"] for r in rows) > 0  # one record per prompt, cell and temperature
    for p in per:
        assert len(p["accepted"]) == p["rounds"] and sum(p["turn_lengths"]) == len(p["tokens"])
    mt = [p for p in per if p["id"] == "mt"]
    assert mt and all(len(p["turn_lengths"]) == 2 for p in mt)
    assert list((root / "eval").glob("tau_speedup_vs_budget-*.png"))
    # every row carries the speedup the round profile (measured before decoding) predicts
    assert res["data"]["round_profile"]["overhead"]
    for r in rows:
        assert isinstance(r["speedup_from_insample_coverage"], float) and isinstance(r["speedup_from_measured_tau"], float), r
    assert res["data"]["speedup_check"]["n_rows"] == sum(r["method"] != "ar" for r in rows)


def test_eval_predicts_from_calibration_prompts_before_decoding(run):
    root, _, files = run
    res = json.loads((root / "eval" / "eval.json").read_text())
    pred = json.loads((root / "eval" / "predictions.json").read_text())["data"]
    assert pred["written_at_unix"] < res["data"]["evaluation_started_unix"]
    ids = {p["id"] for p in pred["calibration_prompts"]}  # one of the calibration file's lines
    assert len(ids) == 1 and ids <= {"calibration-1", "calibration-2"}
    assert not {p["sha256"] for p in pred["calibration_prompts"]} & {p["sha256"] for p in pred["evaluation_prompts"]}
    # one prediction per evaluated data set and cell
    assert {c["dataset"] for c in pred["cells"]} == {"alpha", "beta"}
    # the calibration file serves both data sets: it is decoded once, so each cell has one entry, of no one set
    entries = pred["calibration"]["entries"]
    keys = [(e["method"], e["drafter"], e["scorer"], e["temperature"], e["budget"], e["per_round"]) for e in entries]
    assert entries and len(keys) == len(set(keys)) and {e["calibration_set"] for e in entries} == {None}
    # the naive rule's timings: the round profile's greedy decodes, and its sampled ones at T = 1
    assert {c["temperature"] for c in pred["calibration_speed"]} == {0.0, 1.0}
    assert all(c["naive_calibration_timed"] == ("greedy" if c["temperature"] == 0 else "sampled")
               for c in pred["budget_choice"] if "naive_calibration_best" in c)
    # (a greedy calibration decode of this tiny target can stop at EOS at once: no rounds, no prediction)
    predicted = [r for r in res["data"]["rows"] if r["method"] != "ar" and r["predicted_tau"] is not None]
    assert res["data"]["prediction"]["n_cells"] == len(predicted) >= 10
    assert all(r["prediction_source"] == "calibrated" for r in predicted)


def test_eval_holds_calibration_prompts_back_by_default(run, tmp_path):
    root, target, _ = run
    many = tmp_path / "many.jsonl"
    many.write_text("\n".join(json.dumps({"prompt": f"item number {i} of the list", "id": f"p{i}"})
                              for i in range(5)) + "\n")
    out = tmp_path / "eval"
    assert mfd(["eval", "--target", str(target), "--drafter", str(root / "k1"), "--prompts", str(many),
                "--out", str(out), *EVAL_ARGS, "--calibration-count", "2", "--profile-prompts", "1",
                "--methods", "ar,ddtree"]) == 0
    pred = json.loads((out / "predictions.json").read_text())["data"]
    held = {p["id"] for p in pred["calibration_prompts"]}
    evaluated = {json.loads(x)["id"] for x in (out / "per_prompt.jsonl").read_text().splitlines()}
    assert len(held) == 2 and len(evaluated) == 3 and not held & evaluated
    assert held | evaluated == {f"p{i}" for i in range(5)}
    # the same prompts as calibration and evaluation are refused before any work
    assert mfd(["eval", "--target", str(target), "--drafter", str(root / "k1"), "--prompts", str(many),
                "--out", str(tmp_path / "e2"), "--calibration-prompts", str(many), *EVAL_ARGS]) == 2
    assert not (tmp_path / "e2" / "predictions.json").exists()
    # holding back every prompt leaves nothing to evaluate: refused, naming the flag
    assert mfd(["eval", "--target", str(target), "--drafter", str(root / "k1"), "--prompts", str(many),
                "--out", str(tmp_path / "e3"), *EVAL_ARGS, "--calibration-count", "5"]) == 2


def test_distill_resume_skips_finished_shards_and_remakes_a_missing_one(run):
    root, target, files = run
    data = root / "data"
    before = {p.name: p.read_bytes() for p in data.glob("shard-*.safetensors")}
    stamps = {p.name: p.stat().st_mtime_ns for p in data.glob("shard-*.safetensors")}
    (data / "shard-00001.safetensors").unlink()
    assert mfd(["distill", "--target", str(target), "--prompts", *files, "--out", str(data),
                "--max-new-tokens", "16", "--shard-size", "2", "--quiet"]) == 0
    after = {p.name: p.read_bytes() for p in data.glob("shard-*.safetensors")}
    assert after == before  # the remade shard is identical (seeded per prompt)
    for name in ("shard-00000.safetensors", "shard-00002.safetensors"):
        assert (data / name).stat().st_mtime_ns == stamps[name]
    # another configuration in the same directory is refused
    assert mfd(["distill", "--target", str(target), "--prompts", *files, "--out", str(data),
                "--max-new-tokens", "5", "--quiet"]) == 2


def test_training_resumes_to_the_same_curve(run, tmp_path):
    from mfd_theory.llm.training.distill import load_distill_data
    from mfd_theory.llm.models.drafter import build_drafter
    from mfd_theory.llm.models.target import load_local_target
    from mfd_theory.llm.training.train import DrafterTrainConfig, train_drafter

    root, target_dir, _ = run
    target, _ = load_local_target(target_dir)
    seqs, plens, _ = load_distill_data(root / "data")
    cfg = DrafterTrainConfig(block_size=4, num_modes=2, batch_size=4, blocks_per_seq=2, steps=4, lr=3e-3,
                             warmup=1, ckpt_every=1, grad_accum=2)

    def fresh():
        return build_drafter(target, 4, 1, num_modes=2, seed=0)

    full = train_drafter(target, fresh(), seqs, plens, tmp_path / "a", cfg, progress=False)
    part = train_drafter(target, fresh(), seqs, plens, tmp_path / "b", cfg, progress=False, stop_after=2)
    assert len(part) == 2
    rest = train_drafter(target, fresh(), seqs, plens, tmp_path / "b", cfg, progress=False)
    # the same batches and the same optimizer state: identical up to float32 reduction order
    np.testing.assert_allclose([c["loss"] for c in rest], [c["loss"] for c in full], rtol=1e-5)


def _torchrun(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "mfd_theory.cli", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)


def test_eval_under_torchrun_matches_one_process(run, tmp_path):
    root, target, files = run
    out = tmp_path / "eval2"
    proc = _torchrun(["eval", "--target", str(target), "--drafter", str(root / "k1"), "--drafter",
                      str(root / "k3"), "--prompts", *files, "--out", str(out), "--calibration-prompts",
                      str(root / "prompts" / "calibration.jsonl"), *EVAL_ARGS], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one = json.loads((root / "eval" / "eval.json").read_text())["data"]
    two = json.loads((out / "eval.json").read_text())["data"]
    assert two["n_processes"] == 2

    def key(r):
        return (r["dataset"], r["temperature"], r["drafter"], r["method"], r["budget"])

    a, b = {key(r): r for r in one["rows"]}, {key(r): r for r in two["rows"]}
    assert a.keys() == b.keys()
    for k in a:
        assert b[k]["tau"] == a[k]["tau"] and b[k]["n_rounds"] == a[k]["n_rounds"], k
    tok = lambda p: ((p["dataset"], p["id"], p["drafter"], p["method"], p["budget"], p["temperature"]),  # noqa: E731
                     p["tokens"])
    per1 = dict(tok(json.loads(x)) for x in (root / "eval" / "per_prompt.jsonl").read_text().splitlines())
    per2 = dict(tok(json.loads(x)) for x in (out / "per_prompt.jsonl").read_text().splitlines())
    assert per1 == per2


def test_training_under_torchrun_matches_one_process(run, tmp_path):
    root, target, _ = run
    args = ["train-drafter", "--target", str(target), "--data", str(root / "data"), "--modes", "2",
            "--block-size", "4", "--steps", "3", "--batch-size", "4", "--lr", "3e-3", "--quiet"]
    assert mfd([*args, "--out", str(tmp_path / "one")]) == 0
    proc = _torchrun([*args, "--out", str(tmp_path / "two")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    c1 = json.loads((tmp_path / "one" / "loss_curve.json").read_text())
    c2 = json.loads((tmp_path / "two" / "loss_curve.json").read_text())
    # each rank takes half of every batch; DDP averages the gradients: the same run up to float32
    # reduction order, over 3 steps of AdamW
    np.testing.assert_allclose([c["loss"] for c in c2], [c["loss"] for c in c1], rtol=1e-4)


def test_init_from_starts_exactly_at_the_checkpoint(run, tmp_path):
    from mfd_theory.llm.models.drafter import drafter_from_checkpoint, load_drafter
    from mfd_theory.llm.models.target import load_local_target

    root, target_dir, _ = run
    target, _ = load_local_target(target_dir)
    base = load_drafter(root / "k1" / "drafter", target)
    mfd3 = drafter_from_checkpoint(root / "k1" / "drafter", target, 3)
    assert mfd3.num_modes == 3 and float(mfd3.mode_embeddings.detach().abs().sum()) == 0.0
    ids = torch.randint(0, target.config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(0))
    hs = target(input_ids=ids, output_hidden_states=True).hidden_states
    base.reset()
    mfd3.reset()
    _, lq_base = base.draft_modes(base.fuse_hidden(hs), 5)
    log_pi, lq = mfd3.draft_modes(mfd3.fuse_hidden(hs), 5)
    torch.testing.assert_close(log_pi.exp(), torch.full((3,), 1 / 3))
    for k in range(3):
        torch.testing.assert_close(lq[k], lq_base[0], rtol=0, atol=1e-6)  # same weights, same arithmetic
    # through the CLI: training from the checkpoint runs and records where it started
    assert mfd(["train-drafter", "--target", str(target_dir), "--data", str(root / "data"), "--out",
                str(tmp_path / "from"), "--modes", "2", "--init-from", str(root / "k1" / "drafter"),
                "--steps", "2", "--batch-size", "4", "--quiet"]) == 0
    cfg = json.loads((tmp_path / "from" / "train_config.json").read_text())
    assert cfg["init_from"].endswith("drafter") and cfg["train"]["block_size"] == 4


def test_dartree_drafter_from_scratch_and_from_a_dflash_checkpoint(run, tmp_path):
    """--kind dartree trains a Domino drafter (checkpoint DominoDraftModel, decodable with method
    dartree); from a DFlash checkpoint it starts exactly at that checkpoint's distributions."""
    from mfd_theory.llm.models.domino import DominoDrafter, domino_from_checkpoint
    from mfd_theory.llm.models.drafter import load_drafter
    from mfd_theory.llm.models.target import load_local_target

    root, target_dir, files = run
    target, _ = load_local_target(target_dir)
    assert mfd(["train-drafter", "--target", str(target_dir), "--data", str(root / "data"), "--out",
                str(tmp_path / "dom"), "--kind", "dartree", "--rank", "4", *TRAIN_ARGS]) == 0
    dom = load_drafter(tmp_path / "dom" / "drafter", target)
    assert isinstance(dom, DominoDrafter) and dom.correction_rank == 4
    cfg = json.loads((tmp_path / "dom" / "train_config.json").read_text())
    assert cfg["kind"] == "dartree" and cfg["rank"] == 4
    # mfd eval decodes it with method dartree, losslessly
    assert mfd(["eval", "--target", str(target_dir), "--drafter", str(tmp_path / "dom"), "--methods", "ar,dartree",
                "--prompts", files[0], "--out", str(tmp_path / "ev"),
                "--calibration-prompts", str(root / "prompts" / "calibration.jsonl"), *EVAL_ARGS]) == 0
    rows = json.loads((tmp_path / "ev" / "eval.json").read_text())["data"]["rows"]
    assert any(r["method"] == "dartree" for r in rows)
    assert all(r["matches_ar"] for r in rows if r["temperature"] == 0)

    # from the K = 1 DFlash checkpoint: same backbone, correction zero, so the same distributions
    base = load_drafter(root / "k1" / "drafter", target)
    dom0 = domino_from_checkpoint(root / "k1" / "drafter", target, rank=3)
    ids = torch.randint(0, target.config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(1))
    hs = target(input_ids=ids, output_hidden_states=True).hidden_states
    base.reset()
    dom0.reset()
    _, lq_base = base.draft_modes(base.fuse_hidden(hs), 5)
    _, lq = dom0.draft_modes(dom0.fuse_hidden(hs), 5)
    torch.testing.assert_close(lq, lq_base, rtol=0, atol=1e-6)
    path = [int(t) for t in lq_base[0].argmax(-1)[:2]]
    corrected = dom0.corrected_log_probs(5, path, lq[0])  # [V] at depth 3, after a two-token path
    torch.testing.assert_close(corrected, torch.log_softmax(lq_base[0, 2].float(), -1), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="modes"):
        domino_from_checkpoint(root / "k3" / "drafter", target)
    assert mfd(["train-drafter", "--target", str(target_dir), "--data", str(root / "data"), "--out",
                str(tmp_path / "dom2"), "--kind", "dartree", "--init-from", str(root / "k1" / "drafter"),
                "--steps", "2", "--batch-size", "4", "--quiet"]) == 0
    assert isinstance(load_drafter(tmp_path / "dom2" / "drafter", target), DominoDrafter)


@pytest.mark.parametrize("content, why", [
    ("{not json\n", "line 1: not valid JSON"),
    ('{"prompt": "ok"}\n{"id": 3}\n', "line 2: needs exactly one of"),
    ('{"turns": []}\n', "line 1: \"turns\" must be"),
    ('{"messages": [{"role": "user"}]}\n', "line 1: \"messages\"[0]"),
    ("\n\n", "empty file"),
])
def test_malformed_prompt_file_exits_2_before_loading(run, tmp_path, capsys, content, why):
    root, target, _ = run
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    for cmd in (["distill", "--target", str(target), "--prompts", str(bad), "--out", str(tmp_path / "o1")],
                ["eval", "--target", str(target), "--drafter", str(root / "k1"), "--prompts", str(bad),
                 "--out", str(tmp_path / "o2")]):
        assert mfd(cmd) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and why in err, err
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_target_without_tokenizer_exits_2(run, tmp_path, capsys):
    _, _, files = run
    bare = save_tiny_target(tmp_path / "bare", tokenizer=False)
    assert mfd(["distill", "--target", str(bare), "--prompts", *files, "--out", str(tmp_path / "o")]) == 2
    assert "no tokenizer" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_drafter_of_another_target_exits_2(run, tmp_path, capsys):
    root, _, files = run
    other = save_tiny_target(tmp_path / "other", seed=1)  # same shapes, other weights
    assert mfd(["eval", "--target", str(other), "--drafter", str(root / "k1"), "--prompts", files[0],
                "--out", str(tmp_path / "o"), *EVAL_ARGS]) == 2
    err = capsys.readouterr().err
    assert "another target" in err and "error: --drafter: " in err
    # and data distilled from another target is refused by train-drafter
    assert mfd(["train-drafter", "--target", str(other), "--data", str(root / "data"), "--out",
                str(tmp_path / "t"), *TRAIN_ARGS]) == 2
    err = capsys.readouterr().err
    assert "another target" in err and "error: --data: " in err
    # both refused after loading the models, yet before making their output directories
    assert not (tmp_path / "o").exists() and not (tmp_path / "t").exists()


def test_bad_options_exit_2_naming_the_flag(run, tmp_path, capsys):
    """Every refusal names the flag the user typed (``--max-new-tokens``, not ``max_new_tokens``)
    and leaves no output directory behind."""
    root, target, files = run
    base = ["eval", "--target", str(target), "--drafter", str(root / "k1"), "--prompts", files[0],
            "--out", str(tmp_path / "o"), "--calibration-count", "1", "--methods", "chain,ddtree"]
    for extra, flag in ((["--methods", "ar,beam"], "--methods"), (["--budgets", "0"], "--budgets"),
                        (["--budgets", "8", "x"], "--budgets"),
                        (["--temperatures", "-1"], "--temperatures"), (["--passes", "0"], "--passes"),
                        (["--max-new-tokens", "0"], "--max-new-tokens"), (["--max-prompts", "0"], "--max-prompts"),
                        (["--profile-prompts", "-1"], "--profile-prompts"),
                        (["--calibration-count", "0"], "--calibration-count"),
                        (["--calibration-count", "5"], "--calibration-count"),  # leaves no prompt to evaluate
                        (["--device", "tpu"], "--device"),
                        (["--drafter", str(tmp_path)], "--drafter"),
                        (["--max-new-tokens", "400"], "--prompts")):  # past the tiny target's context
        assert mfd([*base, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert f"error: {flag}: " in err, (extra, err)
    assert mfd(["eval", "--target", str(tmp_path), "--drafter", str(root / "k1"), "--prompts", files[0],
                "--out", str(tmp_path / "o"), "--calibration-count", "1"]) == 2
    assert "error: --target: " in capsys.readouterr().err
    assert mfd(["eval", "--target", str(target), "--drafter", str(root / "k1"), "--prompts",
                str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "o"), "--calibration-count", "1"]) == 2
    assert "error: --prompts: " in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    train = ["train-drafter", "--target", str(target), "--data", str(root / "data"), "--out", str(tmp_path / "t")]
    for extra, flag in ((["--kind", "beam"], "--kind"), (["--kind", "dartree", "--modes", "2"], "--modes"),
                        (["--rank", "4"], "--rank"), (["--kind", "dartree", "--rank", "0"], "--rank"),
                        (["--grad-accum", "0"], "--grad-accum"), (["--block-size", "1"], "--block-size"),
                        (["--lr", "0"], "--lr"), (["--balance", "-1"], "--balance"),
                        (["--mode-noise", "-1"], "--mode-noise"), (["--warmup", "-1"], "--warmup"),
                        (["--init-from", str(tmp_path)], "--init-from"), (["--layers", "0"], "--layers")):
        assert mfd([*train, *TRAIN_ARGS, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert f"error: {flag}: " in err, (extra, err)
    assert mfd(["train-drafter", "--target", str(target), "--data", str(tmp_path), "--out", str(tmp_path / "t"),
                *TRAIN_ARGS]) == 2
    assert "error: --data: " in capsys.readouterr().err
    assert not (tmp_path / "t").exists()
    distill = ["distill", "--target", str(target), "--prompts", *files, "--out", str(tmp_path / "d")]
    for extra, flag in ((["--max-new-tokens", "0"], "--max-new-tokens"), (["--shard-size", "0"], "--shard-size"),
                        (["--temperature", "-1"], "--temperature"), (["--device", "tpu"], "--device"),
                        (["--max-new-tokens", "400"], "--prompts")):
        assert mfd([*distill, *extra, "--quiet"]) == 2, extra
        err = capsys.readouterr().err
        assert f"error: {flag}: " in err, (extra, err)
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("command", ["distill", "train-drafter", "eval", "ceiling"])
def test_help_shows_every_options_default(command, capsys, monkeypatch):
    """``--help`` states each option's default: the value, "off" for a switch, what happens without
    it for an option that has no value default, "required" for one that must be given."""
    import importlib

    from test_help import parse_help

    cli = importlib.import_module(f"mfd_theory.commands.pipeline.{command.replace('-', '_')}").CLI
    monkeypatch.setenv("COLUMNS", "2000")  # one line per option
    assert mfd([command, "--help"]) == 0
    options = {inv.split()[0]: h for inv, h in parse_help(capsys.readouterr().out)[1].items()}
    fields = [f for f in dataclasses.fields(cli.config) if "help" in f.metadata]
    assert len(fields) >= 8
    for f in fields:
        flag = "--" + f.name.replace("_", "-")
        line = options[flag]
        if f.metadata["required"]:
            want = "(default: none, required)"
        elif f.default is None:
            want = f"(default: {f.metadata['unset']})"
        elif isinstance(f.default, tuple):
            want = f"(default: {','.join(map(str, f.default))})"
        elif isinstance(f.default, bool):
            want = f"(default: {str(f.default).lower()})"
        else:
            want = f"(default: {f.default})"
        assert line.endswith(want), (flag, line, want)
    assert options["--out"].endswith("(default: none, required)")


def test_eval_knows_the_decoding_methods():
    """``mfd eval``'s torch-free list of methods is the decoder's."""
    from mfd_theory.configs.pipeline.eval import METHODS as listed
    from mfd_theory.llm.decoding.generate import METHODS

    assert tuple(listed) == tuple(METHODS)


def test_distill_under_torchrun_writes_the_same_data(run, tmp_path):
    root, target, files = run
    out = tmp_path / "data2"
    proc = _torchrun(["distill", "--target", str(target), "--prompts", *files, "--out", str(out),
                      "--max-new-tokens", "16", "--shard-size", "2", "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # shard s was made by rank s % 2; answers are seeded per prompt, so the bytes are the same
    for shard in sorted((root / "data").glob("shard-*.safetensors")):
        assert (out / shard.name).read_bytes() == shard.read_bytes(), shard.name


def test_a_tokenizer_without_mask_token_warns_with_the_id_used(run, tmp_path):
    import shutil
    import warnings

    from mfd_theory.llm.models.drafter import load_drafter
    from mfd_theory.llm.models.target import load_local_target

    root, target_dir, _ = run
    bare = tmp_path / "target"
    shutil.copytree(target_dir, bare)
    tc = json.loads((bare / "tokenizer_config.json").read_text())
    tc.pop("mask_token", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(tc))
    target, tok = load_local_target(bare)
    assert tok.mask_token_id is None
    base = ["train-drafter", "--target", str(bare), "--data", str(root / "data"), *TRAIN_ARGS[:-1], "--steps", "1"]
    with pytest.warns(UserWarning, match=r"mask_token_id: .* uses id \d+ .*--mask-token-id") as rec:
        assert mfd([*base, "--out", str(tmp_path / "fallback"), "--quiet"]) == 0
    used = int(str(rec[0].message).split(" uses id ")[1].split()[0])
    assert load_drafter(tmp_path / "fallback" / "drafter", target).mask_token_id == used
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a chosen id: no warning
        assert mfd([*base, "--out", str(tmp_path / "chosen"), "--mask-token-id", "7", "--quiet"]) == 0
    assert load_drafter(tmp_path / "chosen" / "drafter", target).mask_token_id == 7


@pytest.mark.parametrize("value", ["-1", "100000"])
def test_bad_mask_token_id_exits_2_naming_it(run, tmp_path, capsys, value):
    root, target_dir, _ = run
    assert mfd(["train-drafter", "--target", str(target_dir), "--data", str(root / "data"), "--out",
                str(tmp_path / "x"), "--mask-token-id", value, *TRAIN_ARGS]) == 2
    assert "error: --mask-token-id: " in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_eval_refuses_methods_no_drafter_can_run(run, tmp_path, capsys):
    root, target, files = run
    out = tmp_path / "o"
    assert mfd(["eval", "--target", str(target), "--drafter", str(root / "k1"), "--prompts", *files,
                "--out", str(out), "--methods", "ar,mfd", *EVAL_ARGS]) == 2
    err = capsys.readouterr().err
    assert "--methods" in err and "'mfd'" in err and "K > 1" in err
    assert not out.exists()  # not even an empty directory


def test_eval_ddtree_on_mfd_false_leaves_out_the_ablation_only(run, tmp_path, capsys):
    """``--ddtree-on-mfd false``: no ddtree cell on the K = 3 drafter, every other cell still there;
    a request left with nothing for a drafter to run is refused, naming the flag."""
    root, target, files = run
    out = tmp_path / "o"
    assert mfd(["eval", "--target", str(target), "--drafter", str(root / "k1"), "--drafter", str(root / "k3"),
                "--prompts", *files, "--out", str(out), "--methods", "ar,ddtree,mfd", "--ddtree-on-mfd", "false",
                "--profile-prompts", "0", *EVAL_ARGS]) == 0
    rows = json.loads((out / "eval.json").read_text())["data"]["rows"]
    got = {(r["method"], r["drafter"]) for r in rows}
    assert got == {("ar", "none"), ("ddtree", "k1"), ("mfd", "k3")}
    capsys.readouterr()
    bad = tmp_path / "bad"
    assert mfd(["eval", "--target", str(target), "--drafter", str(root / "k3"), "--prompts", *files,
                "--out", str(bad), "--methods", "ar,ddtree", "--ddtree-on-mfd", "false", *EVAL_ARGS]) == 2
    err = capsys.readouterr().err
    assert "--ddtree-on-mfd" in err and not bad.exists()


def test_eval_spec_bench_answers_give_our_tau_and_speedup(run, tmp_path):
    """``--format spec-bench`` answer files, read the Spec-Bench way, give each row's tau and its
    Spec-Bench-convention speedup (and, pooled, the row's own per-pass speedups). The lists are
    given space-separated, the syntax every other command takes."""
    from mfd_theory.llm.measure.spec_bench import model_id, read_answers, spec_bench_speed

    root, target, files = run
    out = tmp_path / "sb"
    assert mfd(["eval", "--target", str(target), "--drafter", str(root / "k1"), "--prompts", *files,
                "--out", str(out), "--methods", "chain", "ddtree", "--budgets", "4", "8", "--temperatures", "0", "1",
                "--max-new-tokens", "8", "--passes", "2", "--profile-prompts", "0", "--format", "spec-bench",
                "--quiet"]) == 0
    res = json.loads((out / "eval.json").read_text())
    rows = res["data"]["rows"]
    assert res["config"]["budgets"] == [4, 8] and res["config"]["temperatures"] == [0.0, 1.0]
    assert {r["method"] for r in rows} == {"ar", "chain", "ddtree"}
    assert {r["budget"] for r in rows if r["method"] == "ddtree"} == {4, 8}
    n_prompts = sum(r["n_prompts"] for r in rows if r["method"] == "ar" and r["temperature"] == 0)
    checked = 0
    for r in rows:
        mid = model_id(r)
        base = model_id({"method": "ar", "temperature": r["temperature"]})
        runs = [out / "spec_bench" / f"run_{k}" for k in (1, 2)]
        answers = read_answers(runs[0] / f"{mid}.jsonl")
        assert len(answers) == n_prompts and {a["category"] for a in answers} == {"alpha", "beta"}
        for a in answers:
            c = a["choices"][0]
            assert a["model_id"] == mid and len(c["turns"]) == len(c["new_tokens"]) == len(c["wall_time"])
            assert all(isinstance(t, str) for t in c["turns"]) and min(c["accept_lengths"], default=1) >= 1
        per_run = [spec_bench_speed(d / f"{mid}.jsonl", d / f"{base}.jsonl", category=r["dataset"]) for d in runs]
        pooled = [spec_bench_speed(d / f"{mid}.jsonl", d / f"{base}.jsonl", category=r["dataset"], pooled=True)
                  for d in runs]
        assert per_run[1]["tau"] == per_run[0]["tau"]
        if r["tau"] is None:  # no round at all (every answer ended at its first token)
            assert per_run[0]["tau"] is None
            continue
        assert per_run[0]["tau"] == pytest.approx(r["tau"], rel=1e-12)
        if r["speedup_spec_bench"] is None:
            assert any(x["speedup"] is None for x in per_run)
            continue
        assert np.mean([x["speedup"] for x in per_run]) == pytest.approx(r["speedup_spec_bench"], rel=1e-12)
        assert [x["speedup"] for x in pooled] == pytest.approx(r["speedup_passes"], rel=1e-9)
        checked += 1
    assert checked >= len(rows) // 2
    multi = [a for a in read_answers(out / "spec_bench" / "run_1" / "ar-temperature-0.jsonl") if a["prompt_id"] == "mt"]
    assert len(multi) == 1 and len(multi[0]["choices"][0]["turns"]) == 2


def test_eval_batch_size_decodes_losslessly_in_batches(run, tmp_path, capsys):
    root, target, files = run
    out = tmp_path / "batched"
    args = ["eval", "--target", str(target), "--drafter", str(root / "k1"), "--drafter", str(root / "k3"),
            "--prompts", *files, *EVAL_ARGS, "--batch-size", "2",
            "--calibration-prompts", str(root / "prompts" / "calibration.jsonl")]
    for policy in ("global", "auto"):
        o = out / policy
        assert mfd([*args, "--out", str(o), "--budget-policy", policy]) == 0
        res = json.loads((o / "eval.json").read_text())["data"]
        assert res["batch_size"] == 2 and res["budget_policy"] == policy
        rows = res["rows"]
        assert {r["method"] for r in rows} == {"ar", "chain", "ddtree", "mfd"}
        for r in rows:
            assert r["lossless_checked"] is (r["temperature"] == 0)
            if r["temperature"] == 0:
                assert r["matches_ar"] is True, r
        if policy == "auto":  # the plans were measured on the calibration prompts and written first
            plans = json.loads((o / "batch_plans.json").read_text())
            assert plans["written_at_unix"] < res["evaluation_started_unix"]
            assert set(plans["plans"]) == {"ddtree/k1", "ddtree/k3", "mfd/k3"}
    capsys.readouterr()
    assert mfd([*args, "--out", str(tmp_path / "x"), "--format", "spec-bench"]) == 2
    assert "--format" in capsys.readouterr().err
    assert mfd(["eval", "--target", str(target), "--drafter", str(root / "k1"), "--prompts", *files, *EVAL_ARGS,
                "--budget-policy", "global", "--out", str(tmp_path / "y")]) == 2
    assert "--batch-size" in capsys.readouterr().err and not (tmp_path / "y").exists()


def test_eval_refuses_to_calibrate_on_the_drafters_distilled_prompts(run, tmp_path, capsys):
    """A drafter records the prompts its data answered; calibrating on them would score the
    prediction on what the drafter was fitted to, so eval refuses them by name and writes nothing."""
    from mfd_theory.runs.pipeline.train_drafter import DISTILLED_PROMPTS

    root, target, files = run
    recorded = json.loads((root / "k1" / "drafter" / DISTILLED_PROMPTS).read_text())["sha256"]
    assert len(recorded) == 6  # the six distilled sequences' prompts (one prompt had two turns)
    out = tmp_path / "eval"
    capsys.readouterr()
    # calibrate on one distilled prompt file, evaluate the others
    assert mfd(["eval", "--target", str(target), "--drafter", str(root / "k1"), "--drafter", str(root / "k3"),
                "--prompts", *files[1:], "--out",
                str(out), "--calibration-prompts", files[0], *EVAL_ARGS]) == 2
    err = capsys.readouterr().err
    assert "--calibration-prompts" in err and "answered by mfd distill" in err and "'k1'" in err
    assert not out.exists()


def test_eval_knows_the_scorers():
    """``mfd eval``'s torch-free list of scorers is the decoder's."""
    from mfd_theory.configs.pipeline.eval import SCORERS as listed
    from mfd_theory.llm.decoding.trees import SCORERS

    assert tuple(listed) == tuple(SCORERS)


def test_eval_scorers_decode_both_mfd_trees_and_predict_each(run, tmp_path, capsys):
    """``--scorers mixture,best_mode``: an mfd row per scorer and budget, both lossless, each with
    its own prediction written before decoding, named apart in the printed table; also batched
    (``--budget-policy auto`` plans both); a scorer without mfd, or an unknown one, exits 2."""
    root, target, files = run
    args = ["eval", "--target", str(target), "--drafter", str(root / "k3"), "--prompts", *files,
            "--methods", "ar,mfd", "--scorers", "mixture,best_mode", *EVAL_ARGS,
            "--calibration-prompts", str(root / "prompts" / "calibration.jsonl")]
    out = tmp_path / "o"
    capsys.readouterr()
    assert mfd([*args, "--out", str(out)]) == 0
    assert "| mfd best-mode | k3 |" in capsys.readouterr().out
    res = json.loads((out / "eval.json").read_text())
    rows = [r for r in res["data"]["rows"] if r["method"] == "mfd"]
    assert sorted({r["scorer"] for r in rows}) == ["best_mode", "mixture"]
    assert len({(r["dataset"], r["scorer"], r["budget"], r["temperature"]) for r in rows}) == len(rows) == 2 * 2 * 2
    assert all(r["matches_ar"] is True for r in rows if r["temperature"] == 0)
    # (the tiny target's greedy calibration answers end at once, so only T > 0 rows are predicted)
    assert all(r["predicted_tau"] is not None for r in rows if r["temperature"] > 0)
    assert res["config"]["scorers"] == ["mixture", "best_mode"]
    pred = json.loads((out / "predictions.json").read_text())["data"]
    assert {c["scorer"] for c in pred["cells"] if c["method"] == "mfd"} == {"mixture", "best_mode"}
    assert {c["scorer"] for c in pred["budget_choice"]} == {"mixture", "best_mode"}
    assert {c["scorer"] for c in pred["calibration_speed"]} == {None, "best_mode"}  # None: the mixture's key
    assert {g["scorer"] for g in res["data"]["best_budgets"]} == {"mixture", "best_mode"}
    o = tmp_path / "batched"
    assert mfd([*args, "--out", str(o), "--batch-size", "2", "--budget-policy", "auto"]) == 0
    batched = json.loads((o / "eval.json").read_text())["data"]["rows"]
    assert {r["scorer"] for r in batched if r["method"] == "mfd"} == {"mixture", "best_mode"}
    assert all(r["matches_ar"] is True for r in batched if r["temperature"] == 0)
    assert set(json.loads((o / "batch_plans.json").read_text())["plans"]) == {"mfd/k3", "mfd/k3/best_mode"}
    capsys.readouterr()
    for extra in (["--scorers", "best"], ["--methods", "ar,ddtree", "--scorers", "best_mode"]):
        bad = tmp_path / "bad"
        assert mfd([*args, *extra, "--out", str(bad)]) == 2, extra
        assert "error: --scorers: " in capsys.readouterr().err
        assert not bad.exists()
