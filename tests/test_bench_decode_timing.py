"""``mfd bench decode`` says when its timings were disturbed: synthetic timings built to trip
each check of ``disturbed_timing``, and a quiet run that trips none (no torch needed)."""

from __future__ import annotations

import pytest

from mfd_theory.commands.bench.bench_decode import disturbed_timing, report
from mfd_theory.results import Result


def _data(ar=(0.010, 0.0102, 0.0099), chain=(1.0, 0.9), profile_ms=10.1, load=(0.1, 1.1), cores=2, threads=1):
    return {"device": "cpu", "model": "random-small",
            "methods": {"ar": {"tau": 1.0, "speedup_vs_ar": 1.0},
                        "chain": {"tau": chain[0], "speedup_vs_ar": chain[1]},
                        "ddtree": {"tau": 2.5, "speedup_vs_ar": 1.6},
                        "mfd": {"tau": 2.7, "speedup_vs_ar": 1.5}},
            "verify_profile": {"t_target_ms": profile_ms},
            "machine": {"ar_s_per_token": list(ar), "load_before": load[0], "load_after": load[1], "cores": cores,
                        "threads": threads, "device_type": "cpu"}}


def test_a_quiet_run_raises_nothing():
    assert disturbed_timing(_data()) == []


@pytest.mark.parametrize("change, words", [
    # the loaded run of the issue: AR at a fraction of its speed on one prompt, chain 1.69x at tau 1.00
    (dict(ar=(0.010, 0.151, 0.011)), "varied 15.10-fold between its 3 prompts"),
    (dict(chain=(1.0, 1.69)), "chain: speedup 1.69x at tau 1.00 is impossible"),
    (dict(profile_ms=25.0), "more than 1.5x apart"),
    (dict(load=(1.8, 1.9), threads=2), "other processes kept about 1.8 of the 2 cores busy"),
    (dict(load=(0.0, 3.2), threads=1), "other processes kept about 2.2 of the 2 cores busy"),
])
def test_each_sign_of_a_disturbed_timing_is_named(change, words):
    found = disturbed_timing(_data(**change))
    assert len(found) == 1 and words in found[0], found


def test_the_report_prints_the_warnings_before_the_table():
    data = _data(chain=(1.0, 1.69))
    data["timing_warnings"] = disturbed_timing(data)
    for r in data["methods"].values():
        r.update(tokens_per_s=100.0, mean_accepted=0.0, mean_predicted=0.0, mean_tree_size=1.0, overhead_share=0.0,
                 time_split_s={k: 1.0 for k in ("draft", "tree", "verify", "walk", "commit")})
    data["verify_profile"].update(t_draft_ms=1.0, tree_sizes=[1], verify_ms=[10.0])
    cfg = {"budget": 64, "block_size": 16, "num_modes": 4}
    text = report(Result("bench_decode", cfg, data, seed=0)).splitlines()
    assert text[0].startswith("warning: disturbed timing: chain: speedup 1.69x")
    assert text[1].startswith("warning: the times below do not measure the methods")
    assert not any(ln.startswith("warning") for ln in text[2:])
    data["timing_warnings"] = []
    assert not report(Result("bench_decode", cfg, data, seed=0)).startswith("warning")


def test_the_report_block_says_when_the_run_was_disturbed():
    from types import SimpleNamespace

    from mfd_theory.report.bench import bench_decode

    data = _data(chain=(1.0, 1.69))
    for r in data["methods"].values():
        r.update(tokens_per_s=100.0, overhead_share=0.0, time_split_s={k: 1.0 for k in ("draft", "tree", "verify",
                                                                                       "walk", "commit")})
    data["verify_profile"].update(tree_sizes=[1], verify_ms=[10.0])
    cfg = {"budget": 64, "block_size": 16, "num_modes": 4}
    quiet = bench_decode(SimpleNamespace(main=SimpleNamespace(data={**data, "timing_warnings": []}, config=cfg)))
    assert "disturbed" not in quiet
    data["timing_warnings"] = disturbed_timing(data)
    block = bench_decode(SimpleNamespace(main=SimpleNamespace(data=data, config=cfg)))
    assert "**This run's timing was disturbed**" in block and "chain: speedup 1.69x at tau 1.00" in block
