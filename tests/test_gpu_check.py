"""gpu-check runs end to end on CPU at a micro size; its greedy comparison tells ties from failures."""

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import llm_helpers  # noqa: E402,F401  (single-threaded torch)

from mfd_theory.cli import main as cli_main  # noqa: E402
from mfd_theory.commands.bench.gpu_check import GpuCheckConfig, report, run  # noqa: E402
from mfd_theory.runs.bench.gpu_check import _compare  # noqa: E402
from mfd_theory.speedup import load_latency_profile  # noqa: E402


MICRO = dict(device="cpu", small=True, shape="micro", e2e=False, prompt_len=8, new_tokens=8, tree_sizes="1,4,16",
             draft_contexts="16,40", repeats=1, profile_context=16, profile_tokens=4, budget=8, block_size=4,
             num_modes=2)


def test_gpu_check_micro_on_cpu(tmp_path, monkeypatch):
    import mfd_theory.runs.experiments.e2e as e2e
    from mfd_theory.configs.e2e import preset_config

    calls = []

    class Done:
        name = "end_to_end"

    monkeypatch.setattr(e2e, "run_e2e", lambda cfg, out, progress: calls.append((cfg, out, progress)) or Done())
    res = run(GpuCheckConfig(**{**MICRO, "e2e": True}), out_dir=tmp_path, progress=False)
    greedy = res.data["greedy"]
    assert {r["method"] for r in greedy} == {"ar", "chain", "ddtree", "mfd", "dartree"}
    assert {r["drafter"] for r in greedy if r["method"] == "dartree"} == {"random-domino"}
    assert all(r["status"] == "equal" for r in greedy), [r for r in greedy if r["status"] != "equal"]
    assert max(r["tau"] for r in greedy if r["drafter"] == "replay") > 1.5  # trees were partly accepted
    # the written profile is the full round profile, not verify times alone
    prof = load_latency_profile(tmp_path / "verify_latency_cpu_small.json", make_monotone=True)
    assert list(prof.tree_sizes) == [1, 3, 4, 16] and not prof.assumption  # 3: the chain (block 4)
    assert list(prof.draft_modes) == [1, 2] and prof.draw_ms > 0 and prof.context_probe
    assert {(o.method, o.K) for o in prof.overhead} == {("chain", 1), ("ddtree", 1), ("mfd", 2)}
    assert res.data["round_profile"]["overhead"]
    assert set(res.data["draft_ms"]) == {"K=1,T=16", "K=1,T=40", "K=2,T=16", "K=2,T=40"}
    assert calls == [(preset_config("micro", device="cpu"), tmp_path / "gpu_check_e2e", False)]  # the step, not its work
    assert set(res.data["elapsed_s"]) == {"greedy", "round_profile", "draft_latency", "ceiling", "e2e"}
    ce = res.data["ceiling"]  # the ceiling's GPU path, run here on CPU at the small sizes
    cov = ce["coverage"]
    assert set(cov) == {"oracle", "product", "mixture K=2"} and ce["samples"] == 16 and ce["L"] == 3
    assert all(cov[t][n] <= cov["oracle"][n] + 1e-6 for t in cov for n in cov[t])
    assert res.data["within_budget"] and res.data["total_s"] >= sum(res.data["elapsed_s"].values()) > 0
    assert json.loads((tmp_path / "gpu_check_cpu_small.json").read_text())["name"] == "gpu_check"
    text = report(res)
    assert "greedy equality vs HF generate: equal 8" in text and "round profile: AR round" in text
    assert "ceiling (one prompt, L = 3, N = 16, T = 1): oracle" in text
    assert "of the 480 s budget" in text and "OVER BUDGET" not in text


def test_gpu_check_says_when_it_ran_over_its_budget(tmp_path):
    res = run(GpuCheckConfig(**{**MICRO, "time_budget_s": 1e-3}), out_dir=tmp_path, progress=False)
    assert not res.data["within_budget"] and "OVER BUDGET" in report(res)


def test_compare_tells_a_near_tie_from_a_failure():
    scores = [torch.tensor([5.0, 4.99, 0.0]), torch.tensor([5.0, 1.0, 0.0])]
    assert _compare([0, 0], [0, 0], scores)["status"] == "equal"
    assert _compare([1, 0], [0, 0], scores)["status"] == "near-tie"
    assert _compare([0, 1], [0, 0], scores)["status"] == "FAIL"
    assert _compare([0], [0, 0], scores)["status"] == "FAIL (length)"


def test_cuda_without_a_gpu_is_a_clear_error(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert cli_main(["bench", "gpu-check", "--device", "cuda", "--out", str(tmp_path)]) == 2
    assert "CUDA is not available" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
