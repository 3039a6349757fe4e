"""Figures: the library leaves the matplotlib backend alone, saved PNGs are byte-stable, and the
tracked end-to-end figure does not depend on timings."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


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
        "from mfd_theory.commands.theory.core_table import CoreTableConfig, run\n"
        "coverage_vs_budget(run(CoreTableConfig(V=30, budgets=(4, 8))))\n"
        "print(matplotlib.get_backend())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={"PATH": "", "MPLBACKEND": "svg"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().lower() == "svg"


def test_saved_png_is_byte_stable(tmp_path):
    from mfd_theory.commands.theory.core_table import CoreTableConfig, run
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
    for name in ("e2e_speedup_vs_budget", "e2e_hybrid_speedup_vs_budget"):
        out = subprocess.run(["git", "check-ignore", "-q", f"paper_figs/{name}.png"], cwd=root)
        assert out.returncode == 0, name
    out = subprocess.run(["git", "check-ignore", "-q", "paper_figs/e2e_hybrid_tau_vs_budget.png"], cwd=root)
    assert out.returncode == 1  # acceptance only: tracked


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


def _share_row(family, kwargs, share, cov=(1.0, 2.0), budgets=(16, 64)):
    """A chimera-share setting as the file stores it: one row per budget under by_budget."""
    return dict(family=family, kwargs=kwargs, by_budget=[
        dict(budget=b, nodes=b, chimera_share=s, chimera_share_std=0.0, eps_chimera_share=s, splice_share=s,
             chimera_mass=0.0, cov_product=c, cov_mixture=c, cov_oracle=c)
        for b, s, c in zip(budgets, share, cov)])


def test_share_figure_has_one_line_per_family_and_readable_labels():
    from mfd_theory.figures.chimeras import share_figure, share_settings_figure

    rows = []
    for fam in ("two_futures", "branching"):
        for m in range(1, 13):
            rows.append(_share_row(fam, {"m": m, "L": 15, "V": 32}, [0.1 * (m % 5), 0.2]))
    fig = share_figure({"settings": rows, "paper_range": [0.27, 0.33]})
    panels = [ax for ax in fig.axes if ax.get_gid() == "share-family"]
    (b,) = [ax for ax in share_settings_figure({"settings": rows}).axes if ax.get_gid() == "share-settings"]
    # small multiples: one panel per family, each with its one median line (not 12 lines, not 5 bands in one)
    assert [ax.get_title().split()[0] for ax in panels] == ["two_futures", "branching"]
    assert all(len([ln for ln in ax.lines if ln.get_label().startswith("median")]) == 1 for ax in panels)
    from matplotlib.collections import PolyCollection

    assert all(len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 1 for ax in panels)  # one band
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
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0  # bars measured from 0 on a linear axis
    ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
    assert len(ticks) >= 5
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    axes_box = ax.get_window_extent()
    assert legend.x0 >= axes_box.x1 - 1  # beside the axes, covering no bar


# --- the audit of the figures one by one (issue 21, D21) ------------------------------------------

E2E_CONFIG = {"preset": "default", "target_arch": "qwen3", "target_layers": 4, "target_hidden": 128, "seed": 0}
SERIES = [("ddtree", "product"), ("mfd", "mfd-k2"), ("mfd", "mfd-k4"), ("ddtree", "mfd-k2"), ("ddtree", "mfd-k4"),
          ("dartree", "dartree")]


def _full_e2e(arch="qwen3"):
    """A saved e2e result (config and data) with every series of the e2e run, both temperatures."""
    rows = []
    for temp in (0.0, 1.0):
        rows.append(dict(method="ar", drafter="none", K=0, budget=0, temperature=temp, tau=1.0, speedup=1.0))
        rows.append(dict(method="chain", drafter="product", K=1, budget=7, temperature=temp, tau=2.5, speedup=1.2,
                         speedup_std=0.01, speedup_from_insample_coverage=1.1, speedup_from_measured_tau=1.15))
        for i, (method, drafter) in enumerate(SERIES):
            for n in (16, 64):
                rows.append(dict(method=method, drafter=drafter, K=1, budget=n, temperature=temp,
                                 tau=4 + 0.1 * i + n / 64, speedup=1.3 + 0.05 * i, speedup_std=0.02,
                                 dead_share=0.3 + 0.01 * i + n / 640, speedup_from_insample_coverage=1.2 + 0.05 * i,
                                 speedup_from_measured_tau=1.25 + 0.05 * i))
    curves = {"target": [{"step": s, "loss": 6.0 * 0.99 ** s} for s in range(1, 300)],
              "draft_lm": [{"step": s, "loss": 5.5 * 0.99 ** s + 0.5} for s in range(1, 200)],
              "product": [{"step": s, "loss": 6.5 * 0.995 ** s + 0.9} for s in range(1, 200)]}
    return {"name": "end_to_end", "config": {**E2E_CONFIG, "target_arch": arch},
            "data": {"rows": rows, "loss_curves": curves}}


def _eval_result():
    """An ``mfd eval`` result like own-target's: two drafters, each with its chain; ddtree and mfd on the K = 2
    drafter give the same tau at T = 0 (a greedy decode of the same tree), and the same speedup at T = 1."""
    rows = []
    for temp in (0.0, 1.0):
        rows.append(dict(dataset="heldout", method="ar", drafter="none", K=0, budget=0, temperature=temp, tau=1.0,
                         speedup=1.0))
        for d, chain_tau, chain_speedup in (("drafter-k1", 1.37, 0.6), ("drafter-k2", 1.19, 0.5)):
            rows.append(dict(dataset="heldout", method="chain", drafter=d, K=1, budget=4, temperature=temp,
                             tau=chain_tau, speedup=chain_speedup))
        for n in (8, 32):
            rows.append(dict(dataset="heldout", method="ddtree", drafter="drafter-k1", K=1, budget=n, temperature=temp,
                             tau=1.8 + n / 100, speedup=0.7, speedup_std=0.02))
            rows.append(dict(dataset="heldout", method="ddtree", drafter="drafter-k2", K=2, budget=n, temperature=temp,
                             tau=1.7 + n / 100, speedup=0.6, speedup_std=0.02))
            rows.append(dict(dataset="heldout", method="mfd", drafter="drafter-k2", K=2, budget=n, temperature=temp,
                             tau=1.7 + n / 100 + (0.05 if temp else 0.0), speedup=0.6 if temp else 0.62,
                             speedup_std=0.02))
    cfg = {"target": "results/own_target/target", "drafter": ["results/own_target/drafter-k1",
                                                               "results/own_target/drafter-k2"], "seed": 0}
    return {"name": "eval", "config": cfg, "data": {"rows": rows}}


def _series_styles(ax):
    """(colour, marker) of every drawn series with a marker in ``ax``: the labelled lines and the data
    line of each error-bar container (not its caps)."""
    from matplotlib.colors import to_hex

    lines = [ln for ln in ax.lines if not ln.get_label().startswith("_")]
    lines += [c.lines[0] for c in ax.containers if hasattr(c, "has_xerr")]
    return [(to_hex(ln.get_color()), ln.get_marker()) for ln in lines
            if ln.get_marker() not in (None, "None", "", " ")]


def _assert_distinct_series(fig):
    for ax in fig.axes:
        styles = _series_styles(ax)
        assert len(styles) == len(set(styles)), (ax.get_title(), sorted(styles))


def test_e2e_series_have_distinct_colour_and_marker():
    from mfd_theory.figures.e2e import dead_share, speedup_check_figure, speedup_vs_budget, tau_vs_budget

    res = _full_e2e()
    for fn in (tau_vs_budget, speedup_vs_budget, dead_share, speedup_check_figure):
        fig = fn(res)
        _assert_distinct_series(fig)
        n = max(len(_series_styles(ax)) for ax in fig.axes)
        assert n >= len(SERIES), (fn.__name__, n)  # every series drawn, none merged away


def test_dead_share_does_not_draw_the_papers_chimera_band():
    from mfd_theory.figures.e2e import dead_share

    fig = dead_share(_full_e2e())
    labels = [a.get_label() for ax in fig.axes for a in ax.get_children()]
    assert not [lab for lab in labels if isinstance(lab, str) and ("paper" in lab or "27" in lab)]
    assert len(fig.axes[0].collections) == 0  # no band of any kind on the dead-node axis
    assert any("not the paper's chimera share" in t.get_text() for t in fig.texts)


def test_loss_curves_have_plain_tick_labels():
    from mfd_theory.figures.e2e import loss_curves

    fig = loss_curves(_full_e2e())
    fig.canvas.draw()
    for ax in fig.axes:
        labels = [t.get_text() for t in ax.get_yticklabels() + ax.get_yticklabels(minor=True)]
        shown = [lab for lab in labels if lab]
        assert not [lab for lab in shown if "times" in lab or "^" in lab or "$" in lab], shown
        assert len(shown) >= 3, shown  # plain numbers, enough of them to read the axis
        for lab in shown:
            float(lab)


def _coincident_pairs(ax):
    """Pairs (lower, upper) of lines in ``ax`` with the same data, in drawing order by zorder."""
    import numpy as np

    lines = [ln for ln in ax.lines if len(ln.get_xdata()) > 1 and ln.get_transform() == ax.transData
             and ln.get_linestyle() not in ("None", "", " ")]  # not error-bar caps (markers only)
    lines = sorted(lines, key=lambda ln: ln.get_zorder())
    out = []
    for i, a in enumerate(lines):
        for b in lines[i + 1:]:
            xa, xb = np.asarray(a.get_xdata(), float), np.asarray(b.get_xdata(), float)
            ya, yb = np.asarray(a.get_ydata(), float), np.asarray(b.get_ydata(), float)
            if xa.shape == xb.shape and np.allclose(xa, xb) and np.allclose(ya, yb):
                out.append((a, b))
    return out


def _assert_overlaps_visible(ax):
    """Every line drawn under another with the same data sticks out of it (wider) and the axes says so."""
    pairs = _coincident_pairs(ax)
    for lower, upper in pairs:
        assert lower.get_linewidth() >= upper.get_linewidth() + 2, (lower.get_label(), upper.get_label())
    if pairs:
        assert any("coincide" in t.get_text() for t in ax.texts), [t.get_text() for t in ax.texts]
    return len(pairs)


def test_core_figure_shows_the_oracle_under_the_mixture_and_labels_both_panels():
    from mfd_theory.commands.theory.core_table import CoreTableConfig, run
    from mfd_theory.figures.core import coverage_vs_budget

    fig = coverage_vs_budget(run(CoreTableConfig(V=30, budgets=(4, 8, 16, 64))))
    # exact modes: the mixture tree is the oracle's at every budget, in both panels
    assert sum(_assert_overlaps_visible(ax) for ax in fig.axes) >= 2
    # one legend above both panels names every tree (and the chain), covering neither panel
    (legend,) = fig.legends
    assert {"oracle", "mixture", "product"} <= {t.get_text() for t in legend.get_texts()}


def test_eval_figure_plots_tau_and_speedup_and_keeps_every_line_visible():
    from mfd_theory.figures.e2e import eval_figure

    fig = eval_figure(_eval_result(), "heldout")
    axes = fig.axes
    assert [ax.get_ylabel().split("\n")[0] for ax in axes if ax.get_ylabel()] == ["tau (tokens per target call)",
                                                                          "speedup vs ar"]
    _assert_distinct_series(fig)
    (legend,) = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert len(labels) == len(set(labels)), labels  # each entry once (two drafters' chains told apart)
    assert sum("chain" in lab for lab in labels) == 2
    assert _assert_overlaps_visible(axes[0]) == 1  # T = 0: ddtree and mfd on the K = 2 drafter coincide
    assert _assert_overlaps_visible(axes[3]) == 1  # T = 1, speedup (error bars): the same pair
    assert any("ddtree (drafter-k2) = mfd (drafter-k2)" in t.get_text() for t in axes[3].texts)
    fig.canvas.draw()
    title = fig._suptitle.get_window_extent()
    for ax in axes:
        assert not title.overlaps(ax.title.get_window_extent()), ax.get_title()


def test_eval_figures_are_written_per_data_set(tmp_path):
    from mfd_theory.runs.pipeline.eval import write_figures
    from mfd_theory.results import Result

    r = _eval_result()
    res = Result("eval", r["config"], r["data"], seed=0)
    (path,) = write_figures(res, tmp_path)
    assert path.name == "tau_speedup_vs_budget-heldout.png" and path.stat().st_size > 0


def test_mixture_oracle_is_drawn_under_and_visible():
    from mfd_theory.figures import mixture as fm

    res = _mixture_run()
    for fig in (fm.mixture_coverage_vs_budget(res), fm.mixture_speedup_vs_budget(res)):
        for ax in fig.axes:
            (oracle,) = [ln for ln in ax.lines if ln.get_label() == "oracle"]
            others = [ln for ln in ax.lines if ln is not oracle]
            assert others and all(oracle.get_zorder() < ln.get_zorder() for ln in others)
            assert all(oracle.get_linewidth() >= ln.get_linewidth() + 2 for ln in others)


def test_mixture_frac_vs_K_is_legible_and_shares_its_y_range():
    from mfd_theory.figures.mixture import mixture_frac_vs_K

    fig = mixture_frac_vs_K(_mixture_run(), budget=64)
    fig.canvas.draw()
    ylims = {ax.get_ylim() for ax in fig.axes}
    assert len(ylims) == 1, ylims
    texts = [t for ax in fig.axes for t in ax.texts + ax.get_xticklabels() + ax.get_yticklabels() + [ax.title]]
    texts += [t for ax in fig.axes for t in ax.get_legend().get_texts()]
    small = [(t.get_text(), t.get_fontsize()) for t in texts if t.get_text() and t.get_fontsize() < 8]
    assert not small, small


_MIXTURE: dict = {}


def _mixture_run():
    if "res" not in _MIXTURE:
        import tempfile

        import mfd_theory.commands.theory.mixture_gain as mg

        cfg = mg.Config(families=("two_futures", "branching"), Fs=(1, 2), two_futures_ms=(4,), Ks=(1, 2),
                        budgets=(16, 64), seeds=(0,), n_samples=500, hard=False, exact_fit=False, sequoia_depth=4,
                        confidences=(0.5,), confidence_Fs=(2,), noise_repeats=0)
        with tempfile.TemporaryDirectory() as d:
            _MIXTURE["res"] = mg.run(cfg, out_dir=d, progress=False)
    return _MIXTURE["res"]


def test_chimera_share_figure_defines_every_abbreviation():
    from mfd_theory.figures.chimeras import share_figure, share_settings_figure

    kw = {"two_futures": {"m": 4, "noise": 0.1}, "branching": {"F": 3, "branch_at": 3},
          "shifted": {"F": 2, "shift_at": 3}, "noisy_futures": {"F": 2, "temperature": 0.5},
          "zipf_futures": {"F": 2, "branch_at": 0, "accuracies": "medusa"}}
    rows = [_share_row(f, {**k, "L": 15, "V": 32}, [0.3, 0.2]) for f, k in kw.items()]
    bars = share_settings_figure({"settings": rows, "paper_range": [0.27, 0.33]})
    (b,) = [ax for ax in bars.axes if ax.get_gid() == "share-settings"]
    used = {part.split("=")[0] if "=" in part else part for t in b.get_yticklabels()
            for part in t.get_text().split("  ", 1)[1].split(", ")}
    assert {"m", "noise", "F", "b", "T", "medusa"} <= used
    legend = "".join(t.get_text() for ax in bars.axes for t in ax.texts if t.get_gid() == "share-abbreviations")
    for name in used:
        assert any(line.startswith(name + ":") or line.startswith(name + " /") for line in legend.splitlines()), name
    fig = share_figure({"settings": rows, "paper_range": [0.27, 0.33]})
    (c,) = [ax for ax in fig.axes if ax.get_gid() == "share-coverage"]
    # the mixture equals the oracle for every family: one dotted line stands for all, not five on top of each other
    assert len([ln for ln in c.lines if ln.get_linestyle() == ":"]) == 1


def _all_figures():
    """(name, figure) for every figure function, each given a whole result (config included)."""
    import mfd_theory.commands.theory.path_gain as pg
    from mfd_theory.commands.theory.core_table import CoreTableConfig, run
    from mfd_theory.figures import chimeras, e2e, mixture, path
    from mfd_theory.figures.core import coverage_vs_budget

    out = [("coverage_vs_budget", coverage_vs_budget(run(CoreTableConfig(V=30, budgets=(4, 8)))))]
    table = [dict(m=m, bound=2 ** (m - 1) - 1, min=2 ** (m - 1) - 1, max=2 ** m - 2, ties=0, instances=10)
             for m in range(1, 4)]
    bound = {"name": "chimera_bound", "config": {"n_instances": 30, "m_max": 3, "seed": 0},
             "data": {"verify": {"table": table, "instances": 30, "violations": 0},
                      "ties": {"table": table, "config": {"grid": 3}}, "multi_future": []}}
    out.append(("bound_figure", chimeras.bound_figure(bound)))
    rows = [_share_row("branching", {"F": 2, "branch_at": 0, "L": 15, "V": 32}, [0.3, 0.2])]
    share = {"name": "chimera_share", "config": {"L": 15, "V": 32, "n_seeds": 2, "seed": 0},
             "data": {"settings": rows, "paper_range": [0.27, 0.33]}}
    out.append(("share_figure", chimeras.share_figure(share)))
    out.append(("share_settings_figure", chimeras.share_settings_figure(share)))
    mix = _mixture_run()
    for name in ("mixture_coverage_vs_budget", "mixture_frac_vs_K", "mixture_speedup_vs_budget", "mixture_gain_bars",
                 "mixture_gain_vs_confidence"):
        out.append((name, getattr(mixture, name)(mix)))
    import tempfile

    cfg = pg.Config(families=("two_futures", "branching"), Fs=(2,), two_futures_ms=(4,), seeds=(0,), budgets=(16, 64),
                    Ks=(2,), memories=(1, 4), depth_caps=(4, 15), step_costs=(0.05, 1.0))
    with tempfile.TemporaryDirectory() as d:
        pres = pg.run(cfg, out_dir=d, progress=False)
    out += [("path_coverage_vs_budget", path.path_coverage_vs_budget(pres)),
            ("path_speedup_vs_step_cost", path.path_speedup_vs_step_cost(pres))]
    res = _full_e2e()
    for name in ("tau_vs_budget", "speedup_vs_budget", "predicted_vs_measured", "dead_share", "loss_curves",
                 "speedup_check_figure", "prediction_check_figure"):
        if name == "predicted_vs_measured":
            for r in res["data"]["rows"]:
                r.update(covered_mass_insample=2.0, covered_mass_mean=2.0, accepted_mean=2.1, pred_gap_se=0.1)
        out.append((name, getattr(e2e, name)(res)))
    out.append(("eval_figure", e2e.eval_figure(_eval_result(), "heldout")))
    from mfd_theory.figures.batch import batch_throughput

    out.append(("batch_throughput", batch_throughput(_batch_result())))
    out.append(("real_ceiling_figure", _real_figure()))
    out.append(("real_drafters_gains_figure", _real_drafters_figure()))
    return out


def _real_drafters_result():
    """An ``mfd real-drafters`` result with replicated verdicts of both questions the gains figure draws."""
    def cmp(gain, half):
        return dict(gain=gain, lo=gain - half, hi=gain + half, verdict="inconclusive", margin=0.03, n_runs=3,
                    n_prompts=4, level=0.975)

    verdicts = []
    for q, b in (("against_product", dict(method="chain", drafter="product", budget=7, scorer=None)),
                 ("same_n", dict(method="ddtree", drafter="product", budget=16, scorer=None)),
                 ("scorer", dict(method="mfd", drafter="mfd-k2", budget=16, scorer="mixture"))):
        for i, (ds, t) in enumerate((("code", 0.0), ("prose", 1.0))):
            verdicts.append(dict(question=q, dataset=ds, temperature=t, b=b,
                                 a=dict(method="mfd", drafter="mfd-k2", budget=16, scorer="best_mode"),
                                 tau_cmp=cmp(0.1 * (i + 1), 0.08), speed_cmp=cmp(-0.05 * (i + 1), 0.1)))
    cfg = {"target": "tiny-target", "kinds": ["product", "mfd-k2"], "seeds": 3, "steps": 200, "eval_prompts": 4}
    return {"name": "real_drafters", "config": cfg, "data": {"target": "tiny-target", "verdicts": verdicts}}


def _real_drafters_figure():
    from mfd_theory.figures.real import real_drafters_gains_figure

    return real_drafters_gains_figure(_real_drafters_result())


def _real_result():
    """An ``mfd real`` result whose one target has a ceiling pooled from per-prompt records."""
    from test_fit_rows import _records

    from mfd_theory.ceiling_stats import pool_ceiling

    cfg = {"prompts_per_domain": 6, "samples": 10, "modes": [1, 2], "seed": 0, "dead_at": 16, "block_length": 4}
    return {"name": "real", "config": cfg,
            "data": {"targets": {"tiny-target": {"ceiling": pool_ceiling(_records())}}}}


def _real_figure():
    from mfd_theory.figures.real import real_ceiling_figure

    return real_ceiling_figure(_real_result())


def _batch_result(arch="qwen3"):
    """A ``bench batch`` result: every series at B = 1..32, measured rising through the upper left
    of the panel (where a legend inside it would sit) and predicted a little off."""
    from mfd_theory.figures.batch import SERIES

    rows, sizes = [], (1, 2, 4, 8, 16, 32)
    for i, (method, policy) in enumerate(SERIES):
        for j, b in enumerate(sizes):
            v = 300 + 60 * j + 15 * i
            rows.append(dict(batch_size=b, method=method, policy=policy, budget=8, steady_tokens_per_s=v,
                             predicted_tokens_per_s=v * (1.1 if i % 2 else 0.9)))
    gpu = [dict(method=m, batch_size=b, tokens_per_s=(3.5 if m == "mfd" else 3.0) - 0.05 * b, ar_tokens_per_s=1.0)
           for m in ("ddtree", "mfd") for b in sizes]
    return {"name": "bench_batch", "config": {"e2e_preset": "default", "target_arch": arch, "batch_sizes": list(sizes),
                                              "budgets": [8], "seed": 0},
            "data": {"rows": rows, "gpu_predicted": gpu, "gpu_profile": "h100_qwen3-8b",
                     "model": f"e2e target target-59eacffc01 ({arch})"},
            "provenance": {"created": "2026-12-01T10:00:00+00:00", "git_sha": "59efbfb0123456789"}}


def test_every_figure_names_its_run():
    from mfd_theory.figures import RUN_LABEL_GID

    expect = {"coverage_vs_budget": "run: core_table, 3-future target", "bound_figure": "run: chimera_bound, 30",
              "share_": "run: chimera_share, L=15, V=32", "mixture_": "run: mixture_gain, L=15, seeds 0",
              "path_": "run: path_gain", "eval_figure": "run: eval of results/own_target/target, drafters drafter-k1",
              "batch_": "run: bench batch on the e2e default preset's qwen3 target",
              "real_ceiling": "run: mfd real, 6 prompts per domain, 10 sampled paths",
              "real_drafters": "run: mfd real-drafters, tiny-target, kinds product,mfd-k2, 3 seeds, 200 steps"}
    names = []
    for name, fig in _all_figures():
        labels = [t.get_text() for t in fig.texts if t.get_gid() == RUN_LABEL_GID]
        assert len(labels) == 1, (name, labels)
        want = next((v for k, v in expect.items() if name.startswith(k)), "run: e2e default preset, qwen3 4x128")
        assert labels[0].startswith(want), (name, labels[0])
        names.append(name)
    assert len(names) == 22


def test_hybrid_e2e_figure_says_which_target():
    from mfd_theory.figures import RUN_LABEL_GID
    from mfd_theory.figures.e2e import tau_vs_budget

    fig = tau_vs_budget(_full_e2e("qwen3_5"))
    assert "Gated DeltaNet" in fig._suptitle.get_text()
    (label,) = [t.get_text() for t in fig.texts if t.get_gid() == RUN_LABEL_GID]
    assert label.startswith("run: e2e default preset, qwen3_5")


def test_run_label_without_config_says_so():
    from mfd_theory.figures import run_label

    assert run_label({"rows": []}).startswith("run: not named")


# --- figures read at page width: nothing covers the data (issue 32) --------------------------------


def _data_points(ax, renderer):
    """Display coordinates of the data in ``ax``: line vertices (and points along each drawn
    segment), scatter offsets, error bars; and the window extents of bars. Lines not in data
    coordinates (axhline, axvline: reference levels across the whole axes) are left out."""
    import numpy as np
    from matplotlib.collections import LineCollection, PathCollection
    from matplotlib.container import BarContainer

    def along(xy, n):
        if len(xy) < 2:
            return xy
        t = np.linspace(0, 1, n)[:, None]
        return np.concatenate([a + t * (b - a) for a, b in zip(xy[:-1], xy[1:])])

    pts = [np.zeros((0, 2))]
    for ln in ax.lines:
        if ln.get_transform() != ax.transData or not ln.get_visible():
            continue
        xy = ax.transData.transform(np.asarray(ln.get_xydata(), float))
        xy = xy[np.isfinite(xy).all(axis=1)]
        pts.append(along(xy, 25) if ln.get_linestyle() not in ("None", "", " ") else xy)
    for c in ax.collections:
        if isinstance(c, PathCollection) and len(c.get_offsets()):
            pts.append(c.get_offset_transform().transform(np.asarray(c.get_offsets(), float)))
        elif isinstance(c, LineCollection) and c.get_transform() == ax.transData:
            pts += [along(ax.transData.transform(np.asarray(seg, float)), 10) for seg in c.get_segments()]
    bars = [p.get_window_extent(renderer) for cont in ax.containers if isinstance(cont, BarContainer)
            for p in cont.patches if p.get_width() and p.get_height()]
    pts = np.concatenate(pts)
    box = ax.get_window_extent(renderer)
    inside = (pts[:, 0] >= box.x0) & (pts[:, 0] <= box.x1) & (pts[:, 1] >= box.y0) & (pts[:, 1] <= box.y1)
    return pts[inside], bars


def covered_data(fig) -> list[tuple[str, str, int]]:
    """(what, axes title, how many data points or bars) for every legend (the axes' own and the
    figure's) and every text in an axes whose box covers data of that axes; empty: none does."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [("figure legend", lg.get_window_extent(renderer)) for lg in fig.legends]
    out = []
    for ax in fig.axes:
        mine = list(boxes)
        if ax.get_legend() is not None:
            mine.append(("legend", ax.get_legend().get_window_extent(renderer)))
        mine += [(f"text {t.get_text()[:40]!r}", t.get_window_extent(renderer)) for t in ax.texts
                 if t.get_visible() and t.get_text().strip()]
        pts, bars = _data_points(ax, renderer)
        for what, b in mine:
            x0, y0, x1, y1 = b.x0 + 1, b.y0 + 1, b.x1 - 1, b.y1 - 1  # touching is not covering
            n = int(((pts[:, 0] > x0) & (pts[:, 0] < x1) & (pts[:, 1] > y0) & (pts[:, 1] < y1)).sum())
            n += sum(1 for q in bars if q.x0 < x1 and q.x1 > x0 and q.y0 < y1 and q.y1 > y0)
            if n:
                out.append((what, ax.get_title().split("\n")[0][:40], n))
    return out


def test_the_overlap_check_finds_a_legend_on_the_data():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot(range(10), range(10), marker="o", label="rising")
    ax.legend(loc="upper left")
    ax.text(8.5, 0.5, "a note", ha="center")
    assert covered_data(fig) == []
    ax.get_legend().remove()
    ax.legend(loc="center")  # on the diagonal
    ax.text(4.5, 4.5, "on the line")
    found = {what.split(" ")[0] for what, _, _ in covered_data(fig)}
    assert found == {"legend", "text"}, covered_data(fig)


def test_no_legend_or_note_covers_data_in_any_figure():
    bad = {name: covered_data(fig) for name, fig in _all_figures()}
    assert {k: v for k, v in bad.items() if v} == {}


def test_path_figure_names_the_curves_on_the_oracle_above_the_axes():
    """The curves that reach the oracle are named under each panel's title, not in a box inside the
    axes, where it covered the curves that climb to the top left (two_futures at N = 16-32)."""
    import mfd_theory.commands.theory.path_gain as pg
    from mfd_theory.figures.path import path_coverage_vs_budget

    cfg = pg.Config(families=("two_futures",), Fs=(2,), two_futures_ms=(8,), seeds=(0,), budgets=(16, 64, 256),
                    Ks=(4,), memories=(1, 8), depth_caps=(4, 15), step_costs=(0.05, 1.0))
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        fig = path_coverage_vs_budget(pg.run(cfg, out_dir=d, progress=False))
    (ax,) = fig.axes
    assert "on the oracle (within 0.5%): " in ax.get_title() and not ax.texts
    assert covered_data(fig) == []


def test_batch_figure_says_what_it_measured_and_keeps_the_legend_off_the_data():
    from mfd_theory.figures import RUN_LABEL_GID
    from mfd_theory.figures.batch import batch_throughput

    fig = batch_throughput(_batch_result("qwen3_5"))
    left, right = fig.axes
    assert "hybrid" in left.get_title() and "PREDICTED" in right.get_title()
    assert any("no GPU table of a hybrid" in t.get_text() for t in right.texts)  # why an attention table
    assert left.get_legend() is None and len(fig.legends) == 1
    # predicted cells are hollow markers, not eight more dashed lines
    assert not [ln for ln in left.lines if ln.get_linestyle() == "--"]
    (label,) = [t.get_text() for t in fig.texts if t.get_gid() == RUN_LABEL_GID]
    assert "target-59eacffc01" not in label and label.endswith("(2026-12-01, commit 59efbfb)")
    assert covered_data(fig) == []


def test_figures_carry_the_date_and_commit_of_their_result():
    from mfd_theory.commands.theory.core_table import CoreTableConfig, run
    from mfd_theory.figures import RUN_LABEL_GID
    from mfd_theory.figures.core import coverage_vs_budget

    res = run(CoreTableConfig(V=30, budgets=(4, 8)))
    (label,) = [t.get_text() for t in coverage_vs_budget(res).texts if t.get_gid() == RUN_LABEL_GID]
    sha = (res.provenance["git_sha"] or "").split("+")[0][:7]
    assert res.provenance["created"][:10] in label and f"commit {sha}" in label
    res.provenance["created"], res.provenance["git_sha"] = "2026-01-02T03:04:05+00:00", "abcdef0123+dirty"
    (label,) = [t.get_text() for t in coverage_vs_budget(res).texts if t.get_gid() == RUN_LABEL_GID]
    assert label.endswith("(2026-01-02, commit abcdef0+dirty)")


def test_e2e_tau_has_error_bars_between_prompts_and_loss_curves_a_unit():
    from mfd_theory.figures.e2e import loss_curves, tau_vs_budget

    res = _full_e2e()
    for r in res["data"]["rows"]:
        r["prompt_tau"] = [r["tau"] - 0.2, r["tau"], r["tau"] + 0.2]
    fig = tau_vs_budget(res)
    ax = fig.axes[0]
    bars = [c for c in ax.containers if getattr(c, "has_yerr", False)]
    assert len(bars) >= len(SERIES)
    assert "s.e. over prompts" in ax.get_ylabel()
    seg = bars[0].lines[2][0].get_segments()[0]  # the first bar: tau ± 0.2 / sqrt(3)
    assert abs(abs(seg[1][1] - seg[0][1]) - 2 * 0.2 / 3 ** 0.5) < 1e-9
    assert all("nats per" in a.get_ylabel() for a in loss_curves(res).axes)


def test_e2e_axes_span_the_data_and_keep_the_ar_line_off_the_frame():
    from mfd_theory.figures.e2e import predicted_vs_measured, speedup_check_figure, speedup_vs_budget

    res = _full_e2e()
    for r in res["data"]["rows"]:
        r.update(speedup=r["speedup"] + 0.6, speedup_from_insample_coverage=r.get("speedup_from_insample_coverage", 1) + 0.6,
                 speedup_from_measured_tau=r.get("speedup_from_measured_tau", 1) + 0.6,
                 covered_mass_insample=3.0 + r["tau"] / 4, covered_mass_mean=3.0 + r["tau"] / 4,
                 accepted_mean=3.1 + r["tau"] / 4, pred_gap_se=0.05)
    for ax in speedup_check_figure(res).axes:
        lo, hi = ax.get_xlim()
        assert lo > 1.0 and hi < 2.5, (lo, hi)  # points in 1.8-2.2: not from 0
    fig = predicted_vs_measured(res)
    assert fig._suptitle is not None and fig._suptitle.get_text()
    assert fig.axes[0].get_xlim()[0] > 2.0
    assert any("exact by construction" in t.get_text() for t in fig.axes[0].texts)
    for ax in speedup_vs_budget(res).axes:
        lo, hi = ax.get_ylim()
        assert lo < 1.0 - 0.02 * (hi - lo)  # the ar line at 1 stands clear of the bottom frame


def test_mixture_gain_draws_a_fit_that_agrees_with_soft_em_once():
    from mfd_theory.figures.mixture import mixture_gain_bars

    fams = ("two_futures", "branching")
    summary = {f: {"multi": {k: {"predicted_gain": {"p": 0.2 * (i + 1) + d}} for k, d in
                             (("mixture", 0.0), ("mixture_hard", 0.001), ("mixture_exact", -0.002))}}
               for i, f in enumerate(fams)}
    res = {"config": {"families": list(fams), "profiles": ["p"]},
           "data": {"summary": summary, "profiles": {"p": {"assumption": True}}}}
    ax = mixture_gain_bars(res).axes[0]
    from matplotlib.container import BarContainer

    assert len([c for c in ax.containers if isinstance(c, BarContainer)]) == 1
    assert any("winner-take-all and exact fit" in t.get_text() for t in ax.get_legend().get_texts())


def test_chimera_bound_panel_c_spans_its_data_and_explains_its_markers():
    from mfd_theory.figures.chimeras import bound_figure

    table = [dict(m=m, bound=2 ** (m - 1) - 1, min=2 ** (m - 1) - 1, max=2 ** m - 2, ties=2, instances=10,
                  tie_violations=1, other_ties=3) for m in range(1, 11)]
    multi = [dict(F=3, pattern=["0|1|2"], columns=c, observed_min=c, splices=3 * c, proven=c < 4) for c in (2, 3, 4, 5)]
    fig = bound_figure({"verify": {"table": table, "instances": 100, "violations": 0},
                        "ties": {"table": table, "config": {"grid": 3}}, "multi_future": multi})
    a, b, c, _key = fig.axes  # the fourth: (b)'s key, beside (c)
    assert c.get_xlim()[1] <= 6 and a.get_xlabel() == b.get_xlabel() == "m (positions where the two futures disagree)"
    labels = [t.get_text() for t in c.get_legend().get_texts()]
    assert any(lab.startswith("filled:") for lab in labels) and any(lab.startswith("hollow:") for lab in labels)
    # side by side: the instances below the bound beside the tied ones' bars, never hidden behind them
    grey, red = [cont for cont in b.containers][1:]
    assert all(r.get_x() >= g.get_x() + g.get_width() - 1e-9 for g, r in zip(grey.patches, red.patches))


def test_real_ceiling_figure_draws_every_tree_of_every_panel_and_refuses_a_run_without_one():
    import pytest

    from mfd_theory.figures import RUN_LABEL_GID
    from mfd_theory.figures.real import real_ceiling_figure

    res = _real_result()
    fig = real_ceiling_figure(res)
    axes = fig.axes
    assert [a.get_title().split(" (")[0] for a in axes] == ["code, T = 1", "prose, T = 1"]
    tab = res["data"]["targets"]["tiny-target"]["ceiling"]["code"]["1"]
    # the product line's points are the pooled means at every budget
    bars = next(c for c in axes[0].containers if c.get_label() == "product tree (K = 1)")
    assert list(bars.lines[0].get_ydata()) == [tab["by_budget"][n]["coverage"]["product"][0] for n in ("4", "16")]
    labels = {t.get_text() for leg in fig.legends for t in leg.get_texts()}
    assert labels == {"product tree (K = 1)", "mixture tree K = 2", "oracle (best tree of N nodes)"}
    assert "dead at N = 16: 10%" in axes[0].get_title()
    assert any(t.get_gid() == RUN_LABEL_GID and "mfd real" in t.get_text() for t in fig.texts)
    with pytest.raises(ValueError, match="target: other has no ceiling"):
        real_ceiling_figure(res, target="other")


def test_real_drafters_gains_figure_draws_each_verdict_with_its_interval_and_refuses_a_run_without_one():
    import numpy as np

    from mfd_theory.figures.real import real_drafters_gains_figure

    res = _real_drafters_result()
    fig = real_drafters_gains_figure(res)
    drawn = [v for v in res["data"]["verdicts"] if v["question"] != "scorer"]  # the scorer question is not a gain over product
    for ax, key in zip(fig.axes[:2], ("tau_cmp", "speed_cmp")):
        xs = sorted(round(float(x), 6) for line in ax.lines if line.get_marker() == "o"
                    for x in np.atleast_1d(line.get_xdata()))
        assert xs == sorted(round(100 * v[key]["gain"], 6) for v in drawn)
    assert len(fig.axes[0].get_yticklabels()) == len(drawn)
    res["data"]["verdicts"] = [v for v in res["data"]["verdicts"] if v["question"] == "scorer"]
    with pytest.raises(ValueError, match="^result: holds no replicated verdict"):
        real_drafters_gains_figure(res)


def test_every_figure_reads_at_page_width():
    # issue 55 item 6: every figure's smallest text (ticks, legends, notes and the run label included)
    # is >= 9 px once its saved PNG is shown 800 px wide, with at most three panels side by side
    from mfd_theory.figures import MAX_PANELS_PER_ROW, MIN_TEXT_PX, panels_per_row, text_px_at_page

    small = []
    for name, fig in _all_figures():
        px, text = text_px_at_page(fig)
        if px < MIN_TEXT_PX or panels_per_row(fig) > MAX_PANELS_PER_ROW:
            small.append((name, round(px, 1), text[:40], panels_per_row(fig)))
    assert small == []


def test_tracked_figures_with_a_record_read_at_page_width():
    # every tracked figure the committed records redraw, measured as mfd report draws it
    import matplotlib.pyplot as plt

    from mfd_theory.figures import MAX_PANELS_PER_ROW, MIN_TEXT_PX, panels_per_row, text_px_at_page
    from mfd_theory.report.records import FIGURES, RECORDS, draw_figure

    from pathlib import Path

    records = Path(__file__).resolve().parent.parent / RECORDS
    drawn, small = 0, []
    for name, spec in FIGURES.items():
        if not (records / spec.file).is_file():
            continue
        fig = draw_figure(name, records)
        px, text = text_px_at_page(fig)
        if px < MIN_TEXT_PX or panels_per_row(fig) > MAX_PANELS_PER_ROW:
            small.append((name, round(px, 1), text[:40], panels_per_row(fig)))
        plt.close(fig)
        drawn += 1
    assert drawn >= 11 and small == []


def test_page_width_measure_fails_on_small_text():
    # the measure can fail: a 16-inch figure's 8-pt text shows at 5.6 px on an 800-px page
    import matplotlib.pyplot as plt

    from mfd_theory.figures import MIN_TEXT_PX, panel_grid, panels_per_row, text_px_at_page

    fig, axes = plt.subplots(1, 5, figsize=(16, 3))
    axes[0].set_title("small", fontsize=8)
    assert text_px_at_page(fig)[0] < MIN_TEXT_PX and panels_per_row(fig) == 5
    fig, axes = panel_grid(5, 3.2, 3.0)
    assert len(axes) == 5 and panels_per_row(fig) == 3


def test_mixture_footer_names_what_is_drawn():
    # the coverage panels draw the product (K = 1) and the headline K only, at the curves' budgets:
    # the footer says so, rather than every K and budget of the sweep
    from mfd_theory.figures import RUN_LABEL_GID
    from mfd_theory.figures.mixture import mixture_coverage_vs_budget, mixture_frac_vs_K

    mix = _mixture_run()
    K = max(mix.config["Ks"]) if hasattr(mix, "config") else max(mix["config"]["Ks"])
    (label,) = [t.get_text().replace("\n", " ") for t in mixture_coverage_vs_budget(mix).texts
                if t.get_gid() == RUN_LABEL_GID]
    assert "drawn: K 1 (product) and K " in label and "K 1,2" not in label, label
    (label,) = [t.get_text().replace("\n", " ") for t in mixture_frac_vs_K(mix).texts
                if t.get_gid() == RUN_LABEL_GID]
    assert "N 64" in label and str(K) in label, label


def test_chimera_bound_bars_do_not_hide_each_other():
    # panel (b): the three shares side by side (for m >= 4 the red bar is as tall as the grey one),
    # on a share axis that ends at 1
    from mfd_theory.figures.chimeras import bound_figure

    table = [dict(m=m, bound=2 ** (m - 1) - 1, min=2 ** (m - 1) - 1, max=2 ** m - 2, ties=5, tie_violations=5,
                  other_ties=3, instances=10) for m in range(1, 6)]
    res = {"verify": {"table": table, "instances": 50, "violations": 0},
           "ties": {"table": table, "config": {"grid": 3}}, "multi_future": []}
    ax = bound_figure(res).axes[1]
    boxes = [(round(p.get_x(), 6), round(p.get_x() + p.get_width(), 6)) for p in ax.patches]
    spans = sorted(boxes)
    assert all(a[1] <= b[0] + 1e-9 for a, b in zip(spans, spans[1:]))  # no two bars overlap
    assert ax.get_ylim()[1] == 1


def test_every_tracked_figure_is_on_a_page():
    # a tracked PNG that no page shows is read by no one: put it on its page or stop tracking it
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    tracked = subprocess.run(["git", "ls-files", "paper_figs/*.png"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.split()
    pages = "\n".join(p.read_text(encoding="utf-8") for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))])
    assert tracked and [f for f in tracked if f"paper_figs/{Path(f).name}" not in pages] == []
