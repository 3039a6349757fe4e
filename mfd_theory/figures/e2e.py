"""Figures for the end-to-end run (``end_to_end.json``, also the hybrid target's under
``results/hybrid/``) and for ``mfd eval``'s ``eval.json``: tau and speedup against budget per
method, predicted against measured acceptance, dead-node share, training curves.

Every function takes the whole result (a :class:`~mfd_theory.results.Result` or its saved dict),
or only its ``data`` dict, and returns a Figure. With the whole result the figure names its run in
its bottom-right corner (:func:`mfd_theory.figures.run_label`).
"""

from __future__ import annotations

import math

from mfd_theory.figures import PAGE_WIDTH_IN, reveal_overlaps, stamp_run
from mfd_theory.formatting import method_label

__all__ = ["tau_vs_budget", "speedup_vs_budget", "predicted_vs_measured", "dead_share", "loss_curves",
           "speedup_check_figure", "prediction_check_figure", "eval_figure"]

# every series its own colour and marker; a tree over another drafter's marginals is dotted and hollow
_STYLE = {
    ("ddtree", "product"): dict(color="C0", marker="o", label="ddtree (product drafter)"),
    ("mfd", "mfd-k2"): dict(color="C3", marker="s", label="mfd K=2"),
    ("mfd", "mfd-k4"): dict(color="C1", marker="D", label="mfd K=4"),
    ("ddtree", "mfd-k2"): dict(color="C4", marker="v", ls=":", mfc="none", label="ddtree on K=2 marginals"),
    ("ddtree", "mfd-k4"): dict(color="C5", marker="<", ls=":", mfc="none", label="ddtree on K=4 marginals"),
    ("dartree", "dartree"): dict(color="C2", marker="^", label="dartree (Domino drafter)"),
}
# (colour, marker) pairs for series the table above does not name (mfd eval's drafter labels)
_SPARE = [("C0", "o"), ("C3", "s"), ("C2", "^"), ("C1", "D"), ("C4", "v"), ("C5", "<"), ("C6", ">"),
          ("C8", "P"), ("C9", "X"), ("C7", "*")]
_ARCH = {"qwen3": "Qwen3 (attention)", "qwen3_5": "Qwen3.5 hybrid (3 of 4 layers Gated DeltaNet)"}


def _data(res) -> dict:
    if hasattr(res, "data") and hasattr(res, "config"):
        return res.data
    return res["data"] if "data" in res and "rows" in res["data"] else res


def _config(res) -> dict:
    if hasattr(res, "data") and hasattr(res, "config"):
        return dict(res.config or {})
    if "data" in res and "rows" in res["data"]:
        return res.get("config") or {}
    return {}


def _series_key(r: dict) -> tuple:
    """(method as tables name it, drafter): mfd's best-mode rows are a series of their own."""
    return method_label(r["method"], r.get("scorer")), r["drafter"]


def _series(rows, temp):
    out: dict = {}
    for r in rows:
        if r["temperature"] == temp and r["method"] not in ("ar", "chain"):
            out.setdefault(_series_key(r), []).append(r)
    return {k: sorted(v, key=lambda r: r["budget"]) for k, v in out.items()}


def _styles(rows) -> dict:
    """{(method, drafter): plot style} for every tree series in ``rows``: the fixed styles of the
    e2e run's drafters, and unused (colour, marker) pairs for any other, in a stable order."""
    keys = sorted({_series_key(r) for r in rows if r["method"] not in ("ar", "chain")})
    out = {k: dict(_STYLE[k]) for k in keys if k in _STYLE}
    used = {(st["color"], st["marker"]) for st in out.values()}
    spare = iter([p for p in _SPARE if p not in used])
    for k in keys:
        if k not in out:
            color, marker = next(spare, ("k", "x"))
            out[k] = dict(color=color, marker=marker, label=f"{k[0]} ({k[1]})")
    return out


def _chain_lines(ax, rows, temp, key):
    """The chain rows at ``temp`` as horizontal lines, one dash pattern per drafter (the same in
    every panel); drafters whose chains give the same value share a line and its label."""
    drafters = sorted({r["drafter"] for r in rows if r["method"] == "chain"})
    chains = [r for r in rows if r["temperature"] == temp and r["method"] == "chain" and not _nan(r.get(key))]
    by_value: dict = {}
    for r in sorted(chains, key=lambda r: r["drafter"]):
        by_value.setdefault(round(float(r[key]), 9), []).append(r)
    for value, rs in by_value.items():
        i = drafters.index(rs[0]["drafter"])
        who = " = ".join(r["drafter"] for r in rs) + ", " if len(drafters) > 1 else ""
        ax.axhline(value, color=("0.45", "0.65", "0.3")[i % 3], ls=("--", "-.", (0, (1, 1)))[i % 3], lw=1.2,
                   label=f"chain ({who}L={rs[0]['budget']})")


def _prompt_se(row: dict, key: str = "tau") -> float | None:
    """The standard error of ``key`` over the row's prompts (``prompt_<key>``: one value per
    prompt, the spread a rerun on other prompts would see); None with fewer than two prompts."""
    vals = [v for v in row.get(f"prompt_{key}") or [] if not _nan(v)]
    if len(vals) < 2:
        return None
    mean = sum(vals) / len(vals)
    return math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1) / len(vals))


def _errors(rs, key):
    """Error bars of ``key`` for the rows ``rs``: its ``<key>_std`` (timing passes), else for tau
    the standard error over prompts; None unless every row has one."""
    err = [r.get(f"{key}_std") for r in rs]
    if key == "tau" and not all(isinstance(e, (int, float)) and not _nan(e) for e in err):
        err = [_prompt_se(r, key) for r in rs]
    return err if all(isinstance(e, (int, float)) and not _nan(e) for e in err) else None


def _budget_panel(ax, rows, temp, key, styles, with_ar):
    """``key`` of every tree series at ``temp`` against the budget N (error bars from
    :func:`_errors`), the chain as horizontal lines; coincident series are kept visible and named
    in a note under the panel. The y range holds every value and the AR line at 1 (with
    ``with_ar``) with a margin, so no line lies on the frame."""
    lines, names, ys = [], [], []
    for skey, rs in _series(rows, temp).items():
        rs = [r for r in rs if not _nan(r.get(key))]
        if not rs:
            continue
        x, y = [r["budget"] for r in rs], [r[key] for r in rs]
        err = _errors(rs, key)
        if err is not None:
            lines.append(ax.errorbar(x, y, yerr=err, capsize=2, **styles[skey])[0])  # its data line
            ys += [v - e for v, e in zip(y, err)] + [v + e for v, e in zip(y, err)]
        else:
            lines += ax.plot(x, y, **styles[skey])
        ys += y
        names.append(styles[skey]["label"])
    _chain_lines(ax, rows, temp, key)
    ys += [r[key] for r in rows if r["temperature"] == temp and r["method"] == "chain" and not _nan(r.get(key))]
    if with_ar:
        ax.axhline(1.0, color="k", lw=0.8, label="ar")
        ys.append(1.0)
    if ys:
        lo, hi = min(ys), max(ys)
        pad = 0.08 * (hi - lo) if hi > lo else 0.05 * max(abs(hi), 1.0)
        ax.set_ylim(lo - pad, hi + pad)
    reveal_overlaps(ax, lines, note_loc="below", names=names)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tree budget N")
    ax.grid(alpha=0.3)
    ax.set_title(f"T = {temp:g}" + (" (greedy)" if temp == 0 else ""), fontsize=10)


def _legend_entries(axes, styles, lines: bool = True):
    """({label: handle}, labels in first-seen order) over all panels; a tree series' handle is
    drawn from its style, so a line widened in one panel to show an overlap keeps its own look."""
    from matplotlib.lines import Line2D

    by_label = {st["label"]: st for st in styles.values()}
    handles, labels = {}, []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in handles:
                st = by_label.get(lab)
                kw = {k: v for k, v in st.items() if k != "label"} if st else {}
                if st and not lines:
                    kw["ls"] = "none"
                handles[lab] = Line2D([], [], **kw) if st else h
                labels.append(lab)
    labels.sort(key=lambda lab: lab not in by_label)  # the tree series first, then chain and ar (stable)
    return handles, labels


def _budget_grid(res, panels, title=None):
    """One row per (key, ylabel, with_ar) in ``panels``, one column per temperature; one legend
    for the whole figure, to the right of the panels."""
    import matplotlib.pyplot as plt

    rows = _data(res)["rows"]
    temps = sorted({r["temperature"] for r in rows})
    styles = _styles(rows)
    # the legend takes 2.5 in on the right; the whole no wider than the page
    fig, axes = plt.subplots(len(panels), len(temps), squeeze=False,
                             figsize=(min(PAGE_WIDTH_IN, 3.5 * len(temps) + 2.6), 3.6 * len(panels) + 0.4))
    for i, (key, ylabel, with_ar) in enumerate(panels):
        for j, temp in enumerate(temps):
            _budget_panel(axes[i, j], rows, temp, key, styles, with_ar)
        axes[i, 0].set_ylabel(ylabel)
    handles, labels = _legend_entries(axes, styles)
    if title is None:
        arch = _config(res).get("target_arch")
        title = f"target: {_ARCH.get(arch, arch)}" if arch else None
    if title:
        fig.suptitle(title, fontsize=11)  # tight_layout keeps the panels (and their titles) below it
    fig.tight_layout(rect=(0, 0, 1 - 2.5 / fig.get_size_inches()[0], 1))
    fig.legend([handles[lab] for lab in labels], labels, loc="center left", fontsize=8,
               bbox_to_anchor=(1 - 2.45 / fig.get_size_inches()[0], 0.5), frameon=False)
    stamp_run(fig, res)
    return fig


def tau_vs_budget(res):
    """tau (tokens per target call) against the tree budget N; one panel per temperature, error
    bars one standard error over the evaluated prompts.

    Only acceptance is drawn, which seeded training and decoding make identical run to run, so
    the tracked PNG changes only when the models or the method change. Timings are in
    :func:`speedup_vs_budget`.
    """
    return _budget_grid(res, [("tau", "tau (tokens per target call)\nbars: ± s.e. over prompts", False)])


def speedup_vs_budget(res):
    """Measured speedup vs ar against the tree budget N (error bars: std over timing passes when
    the rows have them). Timing-dependent: its PNG differs run to run and is not tracked."""
    return _budget_grid(res, [("speedup", "speedup vs ar\nbars: ± std over timing passes", True)])


def eval_figure(res, dataset: str | None = None):
    """``mfd eval``'s figure for one data set: tau (top row) and measured speedup (bottom row)
    against the budget, one column per temperature."""
    d = _data(res)
    rows = [r for r in d["rows"] if dataset is None or r.get("dataset") == dataset]
    sub = {"config": _config(res), "data": {**d, "rows": rows}} if _config(res) else {"rows": rows}
    if hasattr(res, "name"):
        sub["name"] = res.name
    elif isinstance(res, dict) and "name" in res:
        sub["name"] = res["name"]
    return _budget_grid(sub, [("tau", "tau (tokens per target call)\nbars: ± s.e. over prompts", False),
                              ("speedup", "speedup vs ar\nbars: ± std over timing passes", True)],
                        title=f"data set: {dataset}" if dataset else None)


def predicted_vs_measured(res):
    """Measured mean accepted length vs the tree's predicted acceptance (its covered mass).

    T = 1: prediction = covered mass under the sampling distribution; error bars are 2 standard
    errors of the per-round difference. T = 0: the greedy prediction is exact by construction, so
    the soft (T = 1) covered mass is drawn instead, against the greedy accepted length.
    """
    import matplotlib.pyplot as plt

    rows = [r for r in _data(res)["rows"] if r["method"] != "ar"]
    fig, ax = plt.subplots(figsize=(6.2, 5.6))
    vals = []
    for temp, marker in ((1.0, "o"), (0.0, "^")):
        rs = [r for r in rows if r["temperature"] == temp and not _nan(r.get("accepted_mean"))]
        if not rs:
            continue
        if temp == 1.0:
            x = [r["covered_mass_insample"] for r in rs]
            err = [2 * r["pred_gap_se"] if not _nan(r["pred_gap_se"]) else 0.0 for r in rs]
            ax.errorbar(x, [r["accepted_mean"] for r in rs], yerr=err, fmt=marker, ms=5, capsize=2,
                        label="T = 1: each cell's covered mass (bars: ±2 s.e.)")
        else:
            x = [r["covered_mass_mean"] for r in rs]
            ax.plot(x, [r["accepted_mean"] for r in rs], marker, ms=5, mfc="none",
                    label="T = 0: greedy accepted against the T = 1 mass")
        vals += x + [r["accepted_mean"] for r in rs]
    lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
    pad = 0.06 * (hi - lo or 1.0)
    grid = [lo - pad, hi + pad]
    ax.plot(grid, grid, "k--", lw=1, label="measured = predicted")
    ax.set_xlim(*grid)
    ax.set_ylim(*grid)
    ax.set_xlabel("predicted accepted draft tokens per round (covered mass)")
    ax.set_ylabel("measured accepted draft tokens per round")
    fig.suptitle("Claim 1 on the trained target: accepted = covered mass", fontsize=10)
    # the legend above the axes, so it covers no cell (T = 1, T = 0, then the diagonal); the T = 0
    # series explained under the axes
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: (not labels[i].startswith("T = 1"), labels[i].startswith("measured")))
    ax.legend([handles[i] for i in order], [labels[i] for i in order], fontsize=8, loc="lower left",
              bbox_to_anchor=(0.0, 1.0), frameon=False)
    ax.annotate("T = 0: a greedy walk accepts exactly the covered path, so the prediction is exact by "
                "construction; the hollow\ntriangles set the greedy accepted length against the mass the "
                "same trees cover under T = 1 sampling.", (0, 0), xycoords="axes fraction", xytext=(0, -42),
                textcoords="offset points", fontsize=8, color="0.3", va="top")
    fig.tight_layout()
    stamp_run(fig, res)
    return fig


def speedup_check_figure(res):
    """Predicted against measured speedup, every speculative row, before any cell was timed.

    Left column: the prediction from the theory's acceptance (the trees' predicted covered mass)
    and the round cost model; right: the same cost model with the measured acceptance (its error
    is the cost model's alone). One row per temperature, every series in its own colour and marker.
    Horizontal bars: the measured pass-to-pass standard deviation; the band is ±5% around
    equality. Both axes span the data (not from 0). Results without a round profile give an
    empty, labelled figure.
    """
    import matplotlib.pyplot as plt

    rows = [r for r in _data(res)["rows"] if r["method"] != "ar" and not _nan(r.get("speedup"))
            and not _nan(r.get("speedup_from_insample_coverage"))]
    temps = sorted({r["temperature"] for r in rows}) or [None]
    fig, axes = plt.subplots(len(temps), 2, figsize=(PAGE_WIDTH_IN, 3.6 * len(temps)), sharex=True, sharey=True,
                             squeeze=False)
    if not rows:
        for ax in axes.flat:
            ax.text(0.5, 0.5, "no predicted speedups in these results", ha="center", va="center",
                    transform=ax.transAxes)
        stamp_run(fig, res)
        return fig
    styles = _styles(rows)
    # the range of the data (both axes alike), not from 0: the points fill the panel
    every = [r["speedup"] + s * (r.get("speedup_std") or 0) for r in rows for s in (-1, 1)]
    every += [r[k] for r in rows for k in ("speedup_from_insample_coverage", "speedup_from_measured_tau")
              if not _nan(r.get(k))]
    lo, hi = min(every), max(every)
    pad = 0.06 * (hi - lo or 1.0)
    lo, hi = lo - pad, hi + pad
    for i, temp in enumerate(temps):
        for ax, key, title in ((axes[i, 0], "speedup_from_insample_coverage", "theory's acceptance + round cost model"),
                               (axes[i, 1], "speedup_from_measured_tau", "measured acceptance + round cost model")):
            grid = [lo, hi]
            ax.fill_between(grid, [0.95 * g for g in grid], [1.05 * g for g in grid], color="0.85", label="±5%")
            ax.plot(grid, grid, "k--", lw=1, label="predicted = measured")
            rs = [r for r in rows if r["temperature"] == temp and not _nan(r.get(key))]
            for k, st in _series(rs, temp).items():
                style = styles[k]
                ax.errorbar([r["speedup"] for r in st], [r[key] for r in st],
                            xerr=[r.get("speedup_std") or 0.0 for r in st], fmt=style["marker"], ms=6, capsize=2,
                            color=style["color"], mfc=style.get("mfc"), label=style["label"])
            chain = [r for r in rs if r["method"] == "chain"]
            if chain:
                ax.errorbar([r["speedup"] for r in chain], [r[key] for r in chain],
                            xerr=[r.get("speedup_std") or 0.0 for r in chain], fmt="x", ms=6, capsize=2,
                            color="0.3", label="chain")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            ax.set_title(f"T = {temp:g}: {title}", fontsize=9)
            ax.grid(alpha=0.3)
        axes[i, 0].set_ylabel("predicted speedup over AR")
    for ax in axes[-1]:
        ax.set_xlabel("measured speedup over AR\n(± std over passes)")
    handles, labels = _legend_entries(axes, styles, lines=False)
    width = fig.get_size_inches()[0]
    fig.tight_layout(rect=(0, 0, 1 - 2.5 / width, 1))
    fig.legend([handles[lab] for lab in labels], labels, loc="center left", fontsize=8,
               bbox_to_anchor=(1 - 2.45 / width, 0.5), frameon=False)
    stamp_run(fig, res)
    return fig


def prediction_check_figure(res):
    """Predicted before decoding (calibration prompts only) against measured, per cell.

    Left: tau, the prediction with ±2 standard errors of its calibration mean; right: speedup,
    the prediction's 95% interval from the acceptance alone (timing noise is not in it) against
    the measured mean ± std over timing passes. Grey band: ±5% around equality. Hollow markers:
    the cells of the theory's chosen budgets (off the grid, or a per-round rule)."""
    import matplotlib.pyplot as plt

    d = _data(res)
    cells = (d.get("prediction") or {}).get("cells") or []
    fig, axes = plt.subplots(1, 2, figsize=(PAGE_WIDTH_IN, 4.6))
    if not cells:
        for ax in axes:
            ax.text(0.5, 0.5, "no out-of-sample predictions in these results", ha="center", va="center",
                    transform=ax.transAxes)
        stamp_run(fig, res)
        return fig
    for ax, key, title in ((axes[0], "tau", "tau (tokens per target call)"),
                           (axes[1], "speedup", "speedup over AR")):
        rs = [c for c in cells if not _nan(c.get(key)) and not _nan(c.get(f"predicted_{key}"))]
        lo = 0.9 * min(min(c[key] for c in rs), min(c[f"predicted_{key}"] for c in rs))
        hi = 1.1 * max(max(c[key] for c in rs), max(c[f"predicted_{key}"] for c in rs))
        grid = [lo, hi]
        ax.fill_between(grid, [0.95 * g for g in grid], [1.05 * g for g in grid], color="0.85", label="±5%")
        ax.plot(grid, grid, "k--", lw=1, label="predicted = measured")
        for temp, marker in ((0.0, "^"), (1.0, "o")):
            for on_grid in (True, False):
                sub = [c for c in rs if c["temperature"] == temp and c["on_grid"] == on_grid]
                if not sub:
                    continue
                x = [c[key] for c in sub]
                y = [c[f"predicted_{key}"] for c in sub]
                if key == "tau":
                    yerr = [2 * (c.get("predicted_tau_se") or 0.0) for c in sub]
                    xerr = None
                else:
                    yerr = [[max(0.0, c["predicted_speedup"] - (c.get("predicted_speedup_lo") or c["predicted_speedup"]))
                             for c in sub],
                            [max(0.0, (c.get("predicted_speedup_hi") or c["predicted_speedup"]) - c["predicted_speedup"])
                             for c in sub]]
                    xerr = [c.get("speedup_std") or 0.0 for c in sub]
                ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt=marker, ms=5, capsize=2,
                            color="C0" if temp == 0 else "C3", mfc=None if on_grid else "none",
                            label=f"T = {temp:g}" + ("" if on_grid else ", chosen budgets"))
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("measured" + (" (± std over timing passes)" if key == "speedup" else ""))
        ax.set_ylabel("predicted before decoding")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    stamp_run(fig, res)
    return fig


def dead_share(res, eps_label: str = "1e-3"):
    """Share of tree nodes whose target prefix probability is strictly below eps (the decoder's
    rule, ``mfd_theory.llm.decoding.generate.DEAD_EPS``), against the budget.

    A dead node is not a chimera (a real target defines no futures to splice), so the paper's
    27-33% chimera share is not drawn here; the synthetic chimera shares are in ``chimera_share.png``.
    """
    import matplotlib.pyplot as plt

    rows = _data(res)["rows"]
    rows = [r for r in rows if r["method"] in ("ar", "chain") or not _nan(r.get("dead_share"))]
    temps = sorted({r["temperature"] for r in rows})
    styles = _styles(rows)
    fig, axes = plt.subplots(1, len(temps), figsize=(min(PAGE_WIDTH_IN, 3.6 * len(temps) + 2.6), 4.2), squeeze=False)
    for j, temp in enumerate(temps):
        ax = axes[0, j]
        lines = []
        for key, rs in _series(rows, temp).items():
            lines += ax.plot([r["budget"] for r in rs], [100 * r["dead_share"] for r in rs], **styles[key])
        reveal_overlaps(ax, lines, note_loc="below")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tree budget N")
        ax.set_ylabel(f"dead nodes (P(s) < {eps_label}, strictly), %")
        ax.set_title(f"T = {temp:g}")
        ax.grid(alpha=0.3)
    fig.text(0.5, 1.0, "dead = target prefix probability below eps; not the paper's chimera share\n"
             "(a real target has no futures to splice)", ha="center", va="bottom", fontsize=9, color="0.25")
    # one legend beside the panels, where it covers no series
    handles, labels = _legend_entries(axes, styles)
    width = fig.get_size_inches()[0]
    fig.tight_layout(rect=(0, 0, 1 - 2.5 / width, 0.95))
    fig.legend([handles[lab] for lab in labels], labels, loc="center left", fontsize=8,
               bbox_to_anchor=(1 - 2.45 / width, 0.5), frameon=False)
    stamp_run(fig, res)
    return fig


def _plain_log_ticks(axis):
    """Plain numbers (0.6, 1, 2) instead of mathtext powers (6x10^-1) on a log axis; minor ticks
    at 2, 3, 4, 6 x 10^k are labelled too when the axis spans under two decades."""
    from matplotlib.ticker import FuncFormatter

    def plain(v, _pos):
        return f"{v:g}"

    def minor(v, _pos):
        lo, hi = sorted(axis.get_view_interval())  # read when drawn: after autoscaling
        if v <= 0 or lo <= 0 or math.log10(hi / lo) >= 2:
            return ""
        mant = round(v / 10 ** math.floor(math.log10(v) + 1e-9), 6)
        return f"{v:g}" if mant in (2, 3, 4, 6) else ""

    axis.set_major_formatter(FuncFormatter(plain))
    axis.set_minor_formatter(FuncFormatter(minor))


def loss_curves(res):
    """Training loss of the target, the draft LM and every block drafter (log axis, plain labels)."""
    import matplotlib.pyplot as plt

    curves = _data(res)["loss_curves"]
    fig, axes = plt.subplots(1, 2, figsize=(PAGE_WIDTH_IN, 3.8))
    for name, c in curves.items():
        if not c:
            continue
        ax = axes[0] if name in ("target", "draft_lm") else axes[1]
        ax.plot([p["step"] for p in c], [p["loss"] for p in c], label=name, lw=1)
    axes[0].set_title("language models: next-token cross-entropy")
    axes[1].set_title("block drafters: weighted block NLL")
    axes[0].set_ylabel("loss (nats per token)")
    axes[1].set_ylabel("loss (nats per drafted position)")
    for ax in axes:
        ax.set_xlabel("optimizer step")
        ax.set_yscale("log")
        _plain_log_ticks(ax.yaxis)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    stamp_run(fig, res)
    return fig


def _nan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v == "nan"
