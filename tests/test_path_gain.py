"""mfd path-gain: the experiment's numbers against their definitions, the CLI, report and figures."""

from __future__ import annotations

import numpy as np
import pytest

from mfd_theory.cli import main
import mfd_theory.commands.theory.path_gain as pg
import mfd_theory.runs.theory.path_gain as pgr
from mfd_theory.results import Result
from mfd_theory.speedup import default_profile, path_speedup, speedup

L = 6
SMALL = pg.Config(
    families=("two_futures", "branching"), Fs=(2, 8), two_futures_ms=(3,), seeds=(0,), L=L, budgets=(8, 32),
    Ks=(2,), memories=(0, 1, L - 1), depth_caps=(2, L), step_costs=(0.05, 1.0), profiles=("h100_qwen3-8b",),
)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("path_gain")
    return pg.run(SMALL, out_dir=out, progress=False), out


def test_coverage_against_the_limits_the_theory_fixes(small_run):
    """Oracle is the ceiling; memory 0 is the product tree of the marginals; full memory (no
    smoothing, temperature 1) is the oracle tree, so capping its depth cannot add coverage."""
    res, _ = small_run
    assert len(res.data["cells"]) == 3  # two_futures m=3, branching F=2 and F=8
    for cell in res.data["cells"]:
        m = {k: np.asarray(pgr.per_budget(cell["by_budget"], k)) for k in cell["methods"]}
        for name, cov in m.items():
            assert np.all(cov <= m["oracle"] + 1e-12), name
        np.testing.assert_allclose(m[f"path r=0 D={L}"], m["product"], atol=1e-12)
        np.testing.assert_allclose(m[f"path r={L - 1} D={L}"], m["oracle"], atol=1e-12)
        assert np.all(m[f"path r={L - 1} D=2"] <= m[f"path r={L - 1} D={L}"] + 1e-12)
        assert max(cell["depth_curves"]["path r=1 D=2"]) <= 2
    # eight futures and two modes: the mixture cannot hold them all, a memory-1 drafter can
    br8 = next(c for c in res.data["cells"] if c["family"] == "branching" and c["F"] == 8)
    assert (pgr.per_budget(br8["by_budget"], f"path r=1 D={L}")[-1]
            > pgr.per_budget(br8["by_budget"], "mixture K=2")[-1] + 0.5)


def test_result_rows_hold_no_per_budget_lists_and_record_the_seeds(small_run):
    """Long format: one row per method and budget (scalars only), curves as columnar tables, and
    the seeds the sweep ran with (not null)."""
    res, out = small_run
    assert res.seed == list(SMALL.seeds)
    assert Result.load(out / "path_gain.json").seed == list(SMALL.seeds)
    rows = pgr.budget_rows(res)
    assert len(rows) == sum(len(c["methods"]) for c in res.data["cells"]) * len(SMALL.budgets)
    assert all(not isinstance(v, (list, dict)) for r in rows for v in r.values())
    assert {r["budget"] for r in rows} == set(SMALL.budgets)
    for cell in res.data["cells"]:
        n = cell["coverage_curves"]["n"]
        assert all(len(v) == len(n) for v in cell["coverage_curves"].values())
        for r in cell["by_budget"]:  # the reported budgets are points of the curve
            assert cell["coverage_curves"][r["method"]][n.index(r["budget"])] == r["coverage"]
            assert cell["depth_curves"][r["method"]][n.index(r["budget"])] == r["depth"]
    for e in res.data["summary"]:
        assert all(not isinstance(v, (list, dict)) for r in e["by_budget"] for v in r.values())
        assert "coverage" not in e and "path_coverage" not in e


def test_best_speedups_recomputed_from_the_stored_curves(small_run):
    res, _ = small_run
    prof = default_profile("h100_qwen3-8b")
    for cell in res.data["cells"]:
        n = np.asarray(cell["coverage_curves"]["n"])
        assert np.array_equal(n, np.arange(1, 33))  # every budget up to 32 is on the grid
        for j, c in enumerate(SMALL.step_costs):
            row = cell["speed"][prof.name][j]
            for name in cell["methods"]:
                cov = np.asarray(cell["coverage_curves"][name])
                if name.startswith("path"):
                    s = path_speedup(cov, n, np.asarray(cell["depth_curves"][name]), prof, step_cost=c)
                else:
                    s = speedup(cov, n, prof)
                i = int(np.argmax(s))
                assert row[name]["budget"] == n[i] and row[name]["speedup"] == pytest.approx(s[i], rel=1e-12), name
    for e in res.data["summary"]:
        for x in e["speed"][prof.name]:
            best = max(x["speedup"], key=x["speedup"].get)
            assert x["winner"] == best or x["winner"].startswith("tie")
            assert sum(x["wins"].values()) == e["n_cells"]


def test_path_speedup_is_speedup_with_depth_passes():
    prof = default_profile("cpu_small")
    cov, n, d = np.array([2.0, 3.5]), np.array([8, 32]), np.array([3, 6])
    np.testing.assert_allclose(path_speedup(cov, n, d, prof), speedup(cov, n, prof, draft_passes=d))
    np.testing.assert_allclose(path_speedup(cov, n, d, prof, step_cost=0.0), speedup(cov, n, prof))
    np.testing.assert_allclose(path_speedup(cov, n, d, prof, step_cost=0.5),
                               speedup(cov, n, prof, draft_passes=1 + 0.5 * (d - 1)))
    with pytest.raises(ValueError, match="depth"):
        path_speedup(cov, n, np.array([0, 2]), prof)
    with pytest.raises(ValueError, match="step_cost"):
        path_speedup(cov, n, d, prof, step_cost=-1)


def test_rerun_resumes_and_report_block_renders(small_run, capsys):
    from mfd_theory.report import render

    res, out = small_run
    capsys.readouterr()
    pg.run(SMALL, out_dir=out, progress=False)
    assert "wrote 0 cell files" in capsys.readouterr().out
    text, changed, skipped = render("<!-- report:path-gain -->\nold\n<!-- /report:path-gain -->\n", out)
    assert changed == ["path-gain"] and skipped == []
    assert "| branching | F=8 |" in text and "| two_futures | m=3 |" in text and "old" not in text


@pytest.mark.parametrize("argv, flag", [
    (["--memories", "-1"], "--memories"), (["--families", "nope"], "--families"),
    (["--step-costs", "-0.5"], "--step-costs"), (["--Ks", "1"], "--Ks"), (["--smoothing", "2"], "--smoothing"),
])
def test_cli_refuses_bad_flags_before_writing(tmp_path, capsys, argv, flag):
    out = tmp_path / "o"
    assert main(["path-gain", *argv, "--out", str(out), "--quiet"]) == 2
    assert flag in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("argv, names", [
    (["--families", "shifted", "--Fs", "8"], ("--families", "shifted", "F <= 4", "--Fs 8")),
    (["--families", "branching", "shifted", "--Fs", "6", "8"], ("shifted", "F <= 4")),
    (["--families", "two_futures", "--two-futures-ms", "20", "--L", "6"], ("two_futures", "--L (6)", "20")),
])
def test_a_family_with_no_cell_is_refused_before_work(tmp_path, capsys, argv, names):
    """A family whose values the sweep skips entirely (shifted has at most 4 futures) would drop
    out of the result silently, or leave it empty with exit status 0: refused, naming why."""
    out = tmp_path / "o"
    assert main(["path-gain", *argv, "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert all(n in err for n in names), err
    assert not out.exists()
    with pytest.raises(ValueError, match="--families"):
        pg.Config(families=("shifted",), Fs=(8,))
    assert list(pgr.cells(pg.Config(families=("shifted",), Fs=(4, 8), seeds=(0,)))) == [("shifted", 4, None, 0)]


@pytest.mark.parametrize("argv, flag", [(["--families", "shifted", "--Fs", "2", "8"], "--Fs"),
                                        (["--families", "two_futures", "--two-futures-ms", "20"], "--two-futures-ms")])
def test_mixture_gain_refuses_values_a_family_cannot_make(tmp_path, capsys, argv, flag):
    out = tmp_path / "o"
    assert main(["mixture-gain", *argv, "--out", str(out), "--quiet"]) == 2
    assert f"error: {flag}: " in capsys.readouterr().err
    assert not out.exists()


def test_figures_draw_one_panel_per_family(small_run):
    import matplotlib.pyplot as plt

    from mfd_theory.figures import path as fpath

    res, _ = small_run
    fig = fpath.path_coverage_vs_budget(res)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 2 and len(axes[0].lines) == 3 + len(SMALL.memories)
    plt.close(fig)
    fig = fpath.path_speedup_vs_step_cost(res)
    assert len(fig.axes) == 2 and all(len(ax.lines) == 3 for ax in fig.axes)
    plt.close(fig)
