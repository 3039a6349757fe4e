"""bench draft and warm_up run end to end at a micro size (timings are not asserted)."""

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import llm_helpers  # noqa: E402,F401  (single-threaded torch)

from mfd_theory.cli import main as cli_main  # noqa: E402
from mfd_theory.commands.bench.bench_draft import BenchDraftConfig, report, run  # noqa: E402
from mfd_theory.report import render  # noqa: E402


def test_bench_draft_micro(tmp_path):
    cfg = BenchDraftConfig(shape="micro", block_size=4, contexts="8,40", modes="1,2", new_rows=2, rounds=2,
                           verify_nodes=4, repeats=1)
    res = run(cfg, out_dir=tmp_path, progress=False)
    saved = json.loads((tmp_path / "bench_draft_micro.json").read_text())  # one file per preset shape
    rep = saved["data"]["repeats"][0]
    assert set(rep["draft_ms"]) == ({f"{p},K={k},T={t}" for p in ("before", "after") for k in (1, 2) for t in (8, 40)}
                                    | {f"folded,K=2,T={t}" for t in (8, 40)})
    assert all(v > 0 for v in rep["draft_ms"].values())
    assert "after: K=2 T=40 / K=1 T=40" in saved["data"]["ratios"]
    assert len(saved["data"]["load_avg_1min"]) == 2
    assert "target <= 2.5" in report(res)
    # the README's bench-draft-micro block is generated from that file
    text, changed, skipped = render("<!-- report:bench-draft-micro -->\nold\n<!-- /report:bench-draft-micro -->\n"
                                    "<!-- report:bench-draft-tiny -->\nold\n<!-- /report:bench-draft-tiny -->\n",
                                    tmp_path)
    assert changed == ["bench-draft-micro"] and skipped == ["bench-draft-tiny"]
    for k in (1, 2):
        for t in (8, 40):
            before, after = (rep["draft_ms"][f"{p},K={k},T={t}"] for p in ("before", "after"))
            folded = f"{rep['draft_ms'][f'folded,K={k},T={t}']:.2f}" if k > 1 else "-"
            assert f"| K = {k}, T = {t} | {before:.2f} | {folded} | {after:.2f} |" in text  # one repeat: one value per cell
    ratio = saved["data"]["ratios"]["after: K=2 T=40 / K=1 T=40"][0]
    assert "| T = 40: K = 2 / K = 1 (target <= 2.5) |" in text and f"{ratio:.2f} / {ratio:.2f} / {ratio:.2f} |" in text
    fold = saved["data"]["ratios"]["folded: K=2 T=40 / K=1 T=40"][0]
    assert f"{fold:.2f} / {fold:.2f} / {fold:.2f} |" in text and "(folded, masked)" in text
    assert "verify at T = 40" in text and "1-minute load average" in text
    assert rep["kv_repeat_ms"]["40"] > 0 and "`repeat_kv`" in text  # micro: 4 query heads, 2 kv heads
    assert rep["verify_concat_ms"]["40"] > 0 and "concatenating / in place at T = 40" in text


@pytest.mark.parametrize("argv,msg", [(["--modes", "2,4"], "modes: must include 1"),
                                      (["--contexts", "0,8"], "contexts"),
                                      (["--preset", "nope"], "preset")])
def test_bench_draft_bad_input(tmp_path, capsys, argv, msg):
    assert cli_main(["bench", "draft", "--out", str(tmp_path), *argv]) == 2
    assert msg in capsys.readouterr().err
    assert not list(tmp_path.glob("bench_draft*.json"))


def test_bench_draft_puts_every_k_beside_k1_and_the_target_on_k4(tmp_path):
    cfg = BenchDraftConfig(shape="micro", block_size=4, contexts="8,40", modes="1,2,4,8", new_rows=2, rounds=1,
                           verify_nodes=4, repeats=1)
    res = run(cfg, out_dir=tmp_path, progress=False)
    ratios = res.data["ratios"]
    for k in (2, 4, 8):
        for path in ("before", "after", "folded"):
            assert f"{path}: K={k} T=40 / K=1 T=40" in ratios
    printed = report(res)
    assert "after / K = 1 at T = 40 (median): K = 2: " in printed and ", K = 8: " in printed
    assert [ln.split()[1] for ln in printed.splitlines() if ln.rstrip().endswith("target <= 2.5")] == ["K=4"] * 3
    text, changed, _ = render("<!-- report:bench-draft-micro -->\nold\n<!-- /report:bench-draft-micro -->\n", tmp_path)
    assert changed == ["bench-draft-micro"]
    for k in (2, 4, 8):
        label = f"| T = 40: K = {k} / K = 1{' (target <= 2.5)' if k == 4 else ''} |"
        assert label in text
        after = ratios[f"after: K={k} T=40 / K=1 T=40"][0]
        assert f"{after:.2f} / {after:.2f} / {after:.2f} |" in text
