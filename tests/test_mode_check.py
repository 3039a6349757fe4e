"""The check that a K-mode checkpoint is read as trained (``check_modes``, ``mfd check-modes``), on
released-layout checkpoints the tests write: one read right, and ones built to fail (mode embeddings
that throw the backbone off, as embeddings entering where it was not trained to see them would;
modes that are all alike)."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_helpers import tiny_qwen3  # noqa: E402
from pipeline_helpers import save_tiny_target, write_prompts  # noqa: E402
from released_helpers import write_released  # noqa: E402

from mfd_theory.cli import main as mfd  # noqa: E402
from mfd_theory.llm.models.drafter import build_drafter, drafter_from_checkpoint, load_drafter  # noqa: E402
from mfd_theory.llm.training.mode_check import chain_accepts, check_modes  # noqa: E402
from mfd_theory.llm.training.train import DrafterTrainConfig, make_distill_data, train_drafter  # noqa: E402

K = 4


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A random tiny target and a DFlash drafter trained briefly on its greedy answers (it accepts
    about a quarter of a token per block start: enough to be worse than), saved in bf16."""
    root = tmp_path_factory.mktemp("modes")
    target = tiny_qwen3(seed=3)
    rng = np.random.default_rng(0)
    data = make_distill_data(target, rng.integers(0, 64, size=(64, 4)), 24, temperature=0.0, progress=False)
    d = build_drafter(target, 5, 1, seed=0, target_layer_ids=[1, 3])
    cfg = DrafterTrainConfig(block_size=5, batch_size=16, blocks_per_seq=4, steps=300, lr=1e-2, warmup=5,
                             ckpt_every=1000)
    train_drafter(target, d, data, 4, root / "run", cfg, progress=False)
    d.save_pretrained(root / "dflash", dtype=torch.bfloat16)
    prompts = [[int(x) for x in rng.integers(0, 64, size=4)] for _ in range(4)]
    return target, root, prompts


def _released(trained, name: str, scale: float):
    """The DFlash drafter with K mode embeddings of ``scale`` x the target's embedding rms (0: all
    modes alike), written in the released layout and loaded back."""
    target, root, _ = trained
    m = drafter_from_checkpoint(root / "dflash", target, K)
    rms = float(target.get_input_embeddings().weight.pow(2).mean().sqrt())
    with torch.no_grad():
        m.mode_embed.copy_(torch.randn(K, m.mode_embed.shape[1], generator=torch.Generator().manual_seed(1)) * scale * rms)
    write_released(m, root / name)
    with pytest.warns(UserWarning, match="mode_gate"):
        return load_drafter(root / name, target)


def test_chain_accepts_counts_the_leading_matches():
    chains = torch.tensor([[1, 2, 3], [1, 9, 3], [7, 2, 3], [1, 2, 3]])
    assert chain_accepts(chains, torch.tensor([1, 2, 3])).tolist() == [3, 1, 0, 3]
    assert chain_accepts(chains, torch.tensor([1, 2, 4])).tolist() == [2, 1, 0, 2]


def test_modes_read_right_pass(trained):
    target, root, prompts = trained
    ref = load_drafter(root / "dflash", target)
    res = check_modes(target, _released(trained, "good", 0.3), prompts, ref, new_tokens=32)
    assert res.reference_accepted >= 0.15 and res.holds is True, res.report()
    assert res.identical_share < 0.9 and len(res.mode_accepted) == K and sum(res.mode_wins) == pytest.approx(1)
    assert res.mean_mode_accepted >= 0.75 * res.reference_accepted
    # the reference alone against itself: same numbers
    self_check = check_modes(target, ref, prompts, ref, new_tokens=32)
    assert self_check.mode_accepted == [self_check.reference_accepted] and self_check.identical_share is None


def test_modes_that_throw_the_backbone_off_fail(trained):
    target, root, prompts = trained
    ref = load_drafter(root / "dflash", target)
    res = check_modes(target, _released(trained, "off", 30.0), prompts, ref, new_tokens=32)
    assert res.holds is False and "do not enter the drafter as it was trained" in res.verdict, res.report()
    assert res.mean_mode_accepted < 0.75 * res.reference_accepted


def test_identical_modes_fail_and_no_reference_is_inconclusive(trained):
    target, root, prompts = trained
    same = check_modes(target, _released(trained, "same", 0.0), prompts, None, new_tokens=32)
    assert same.holds is False and same.identical_share == 1.0 and "same chain" in same.verdict
    alone = check_modes(target, _released(trained, "good2", 0.3), prompts, None, new_tokens=32)
    assert alone.holds is None and "no DFlash initialisation" in alone.verdict


def test_bad_arguments_are_refused(trained):
    target, root, prompts = trained
    ref = load_drafter(root / "dflash", target)
    with pytest.raises(ValueError, match="new_tokens"):
        check_modes(target, ref, prompts, new_tokens=0)
    with pytest.raises(ValueError, match="prompts"):
        check_modes(target, ref, [], new_tokens=8)
    with pytest.raises(ValueError, match="reference: must be a one-mode"):
        check_modes(target, ref, prompts, _released(trained, "k", 0.3), new_tokens=8)
    with pytest.raises(ValueError, match="raise new_tokens"):
        check_modes(target, ref, prompts, new_tokens=2)


@pytest.fixture(scope="module")
def cli_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    target_dir = save_tiny_target(root / "target")
    from mfd_theory.llm.models.target import load_local_target

    target, _ = load_local_target(target_dir)
    base = build_drafter(target, 4, 1, seed=0)
    base.save_pretrained(root / "dflash")
    for name in ("same", "apart"):  # zero mode embeddings (every mode the DFlash drafter), or distinct ones
        m = drafter_from_checkpoint(root / "dflash", target, K)
        if name == "apart":
            with torch.no_grad():
                m.mode_embed.normal_(0, 1.0, generator=torch.Generator().manual_seed(2))
        write_released(m, root / name)
    return root, target_dir, write_prompts(root / "prompts")


def test_the_command_writes_the_check_and_exits_1_when_it_fails(cli_files, capsys):
    root, target_dir, files = cli_files
    base = ["check-modes", "--target", str(target_dir), "--prompts", *map(str, files), "--new-tokens", "12",
            "--device", "cpu", "--quiet"]
    assert mfd([*base, "--drafter", str(root / "same"), "--out", str(root / "o1")]) == 1
    out = capsys.readouterr().out
    assert "fails: " in out and "same chain" in out and "load: " in out
    saved = json.loads((root / "o1" / "check_modes.json").read_text())["data"]
    assert saved["holds"] is False and saved["num_modes"] == K and saved["gate_used"] is False
    assert mfd([*base, "--drafter", str(root / "apart"), "--reference", str(root / "dflash"),
                "--out", str(root / "o2")]) == 0
    saved = json.loads((root / "o2" / "check_modes.json").read_text())["data"]
    assert saved["holds"] is not False and saved["reference_accepted"] is not None


@pytest.mark.parametrize("flag,value,msg", [("--drafter", "nowhere", "nowhere does not exist"),
                                            ("--reference", "apart", "--reference: ")])
def test_the_command_refuses_bad_input_and_writes_nothing(cli_files, capsys, flag, value, msg):
    root, target_dir, files = cli_files
    args = {"--drafter": str(root / "apart"), flag: str(root / value)}
    argv = ["check-modes", "--target", str(target_dir), "--prompts", *map(str, files), "--device", "cpu",
            "--out", str(root / "bad"), "--quiet"]
    for k, v in args.items():
        argv += [k, v]
    assert mfd(argv) == 2
    assert msg in capsys.readouterr().err
    assert not (root / "bad").exists()
