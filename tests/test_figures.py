"""Figures: the library leaves the matplotlib backend alone, saved PNGs are byte-stable, and the
tracked end-to-end figure does not depend on timings."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")


def _e2e_rows():
    rows = []
    for temp in (0.0, 1.0):
        rows.append(dict(method="ar", drafter="none", K=0, budget=0, temperature=temp, tau=1.0, speedup=1.0))
        rows.append(dict(method="chain", drafter="product", K=1, budget=7, temperature=temp, tau=2.5, speedup=1.2))
        for n, tau in ((16, 4.0), (64, 5.0)):
            rows.append(dict(method="ddtree", drafter="product", K=1, budget=n, temperature=temp, tau=tau,
                             speedup=1.5, dead_share=0.5))
            rows.append(dict(method="mfd", drafter="mfd-k2", K=2, budget=n, temperature=temp, tau=tau + 0.2,
                             speedup=1.4, dead_share=0.4))
    return {"rows": rows}


def test_figure_modules_do_not_switch_the_backend():
    # a notebook's inline backend must survive drawing; "svg" stands in for it here
    code = (
        "import matplotlib; matplotlib.use('svg')\n"
        "from mfd_theory.figures.core import coverage_vs_budget\n"
        "from mfd_theory.figures.chimeras import share_figure\n"
        "from mfd_theory.figures import mixture\n"
        "from mfd_theory.experiments.core_table import CoreTableConfig, run\n"
        "coverage_vs_budget(run(CoreTableConfig(V=30, budgets=(4, 8))))\n"
        "print(matplotlib.get_backend())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={"PATH": "", "MPLBACKEND": "svg"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().lower() == "svg"


def test_saved_png_is_byte_stable(tmp_path):
    from mfd_theory.experiments.core_table import CoreTableConfig, run
    from mfd_theory.figures import save_figure
    from mfd_theory.figures.core import coverage_vs_budget

    res = run(CoreTableConfig(V=30, budgets=(4, 8)))
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    save_figure(coverage_vs_budget(res), a)
    save_figure(coverage_vs_budget(res), b)
    assert a.read_bytes() == b.read_bytes()
    assert b"Matplotlib version" not in a.read_bytes()  # no version stamp that changes with upgrades


def test_tracked_e2e_figure_ignores_timings(tmp_path):
    from mfd_theory.figures import save_figure
    from mfd_theory.figures.e2e import speedup_vs_budget, tau_vs_budget

    d1 = _e2e_rows()
    d2 = copy.deepcopy(d1)
    for r in d2["rows"]:
        r["speedup"] *= 1.07  # another run: same acceptance, other timings
    paths = [tmp_path / f"{i}.png" for i in range(4)]
    save_figure(tau_vs_budget(d1), paths[0])
    save_figure(tau_vs_budget(d2), paths[1])
    assert paths[0].read_bytes() == paths[1].read_bytes()
    save_figure(speedup_vs_budget(d1), paths[2])
    save_figure(speedup_vs_budget(d2), paths[3])
    assert paths[2].read_bytes() != paths[3].read_bytes()  # the timing figure does move (untracked)


def test_timing_figure_is_not_tracked():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(["git", "check-ignore", "-q", "paper_figs/e2e_speedup_vs_budget.png"], cwd=root)
    assert out.returncode == 0


def test_chimera_bound_panel_a_plots_zero_at_zero():
    from mfd_theory.figures.chimeras import bound_figure

    table = [dict(m=m, bound=2 ** (m - 1) - 1, min=2 ** (m - 1) - 1, max=2 ** m - 2, ties=0, instances=10)
             for m in range(1, 5)]
    res = {"verify": {"table": table, "instances": 40, "violations": 0},
           "ties": {"table": table, "config": {"grid": 3}}, "multi_future": []}
    fig = bound_figure(res)
    ax = fig.axes[0]
    assert ax.get_yscale() == "symlog"
    assert ax.lines[0].get_ydata()[0] == 0  # m = 1: bound 0 drawn at 0, not moved to 0.5
    assert ax.get_ylim()[0] <= 0


def test_share_figure_has_one_line_per_family_and_readable_labels():
    from mfd_theory.figures.chimeras import share_figure

    rows = []
    for fam in ("two_futures", "branching"):
        for m in range(1, 13):
            rows.append(dict(family=fam, kwargs={"m": m, "L": 15, "V": 32}, budgets=[16, 64],
                             chimera_share=[0.1 * (m % 5), 0.2], cov_product=[1.0, 2.0], cov_mixture=[1.0, 2.0],
                             cov_oracle=[1.0, 2.0]))
    fig = share_figure({"settings": rows, "paper_range": [0.27, 0.33]})
    a, b = fig.axes[0], fig.axes[1]
    assert len([ln for ln in a.lines if ln.get_label().endswith("settings)")]) == 2  # not 24 lines
    assert min(t.get_fontsize() for t in b.get_yticklabels()) >= 8


def test_mixture_gain_legend_outside_and_enough_ticks():
    from mfd_theory.figures.mixture import mixture_gain_bars

    fams = ("two_futures", "branching", "zipf_futures")
    summary = {f: {"multi": {k: {"predicted_gain": {"p": g}} for k, g in
                             (("mixture", 0.2 * (i + 1)), ("mixture_hard", 0.19), ("mixture_exact", 0.02))}}
               for i, f in enumerate(fams)}
    res = {"config": {"families": list(fams), "profiles": ["p"]},
           "data": {"summary": summary, "profiles": {"p": {"assumption": True}}}}
    fig = mixture_gain_bars(res)
    ax = fig.axes[0]
    ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
    assert len(ticks) >= 5
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    axes_box = ax.get_window_extent()
    assert legend.x0 >= axes_box.x1 - 1  # beside the axes, covering no bar
