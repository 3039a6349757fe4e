"""bench_decode runs end to end at a micro size and writes the latency profile format."""

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import llm_helpers  # noqa: E402,F401  (single-threaded torch)

from mfd_theory.commands.bench.bench_decode import BenchDecodeConfig, report, run  # noqa: E402


def test_bench_decode_micro(tmp_path):
    cfg = BenchDecodeConfig(shape="micro", block_size=4, num_modes=2, budget=8, prompt_len=8, max_new_tokens=6,
                            prompts=1, profile_sizes="1,4,16", profile_repeats=1, profile_tokens=4)
    res = run(cfg, out_dir=tmp_path, progress=False)
    assert set(res.data["methods"]) == {"ar", "chain", "ddtree", "mfd"}
    prof = json.loads((tmp_path / "verify_latency_cpu.json").read_text())
    assert {"name", "device", "model", "assumption", "t_target_ms", "t_draft_ms", "tree_sizes", "verify_ms"} <= set(prof)
    assert prof["tree_sizes"] == [1, 3, 4, 16] and len(prof["verify_ms"]) == 4 and prof["assumption"] is False
    from mfd_theory.speedup import load_latency_profile

    loaded = load_latency_profile(tmp_path / "verify_latency_cpu.json")  # the round fields validate
    assert loaded.measured_round and loaded.draft_modes == (2,)
    assert {(t.method, t.K) for t in loaded.overhead} == {("chain", 2), ("ddtree", 2), ("mfd", 2)}
    assert (tmp_path / "bench_decode.json").is_file() and not (tmp_path / "bench_decode_qwen3_5.json").exists()
    assert "outside the two forwards" in report(res)
