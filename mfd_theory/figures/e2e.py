"""Figures for the end-to-end run (``end_to_end.json``): tau and speedup against budget per method,
predicted against measured acceptance, dead-node share, training curves.

Every function takes the result's ``data`` dict (or the whole saved result) and returns a Figure.
"""

from __future__ import annotations

import math

__all__ = ["tau_vs_budget", "speedup_vs_budget", "predicted_vs_measured", "dead_share", "loss_curves",
           "speedup_check_figure"]

_STYLE = {
    ("ddtree", "product"): dict(color="C0", marker="o", label="ddtree (product drafter)"),
    ("mfd", "mfd-k2"): dict(color="C3", marker="s", label="mfd K=2"),
    ("mfd", "mfd-k4"): dict(color="C1", marker="D", label="mfd K=4"),
    ("ddtree", "mfd-k2"): dict(color="C3", marker="s", ls=":", mfc="none", label="ddtree on K=2 marginals"),
    ("ddtree", "mfd-k4"): dict(color="C1", marker="D", ls=":", mfc="none", label="ddtree on K=4 marginals"),
    ("dartree", "dartree"): dict(color="C2", marker="^", label="dartree (Domino drafter)"),
}


def _data(res) -> dict:
    return res["data"] if "data" in res and "rows" in res["data"] else res


def _series(rows, temp):
    out: dict = {}
    for r in rows:
        if r["temperature"] == temp and r["method"] not in ("ar", "chain"):
            out.setdefault((r["method"], r["drafter"]), []).append(r)
    return {k: sorted(v, key=lambda r: r["budget"]) for k, v in out.items()}


def _style(key):
    return _STYLE.get(key, dict(marker="x", label=f"{key[0]} ({key[1]})"))


def _by_budget(res, key: str, ylabel: str, with_ar: bool):
    """One column per temperature: ``key`` of every tree method against the budget N, the chain
    as a dashed line; error bars from ``<key>_std`` where the rows have it."""
    import matplotlib.pyplot as plt

    rows = _data(res)["rows"]
    temps = sorted({r["temperature"] for r in rows})
    fig, axes = plt.subplots(1, len(temps), figsize=(5.2 * len(temps), 3.8), squeeze=False)
    for j, temp in enumerate(temps):
        ax = axes[0, j]
        for skey, rs in _series(rows, temp).items():
            y = [r[key] for r in rs]
            err = [r.get(f"{key}_std") for r in rs]
            if all(isinstance(e, (int, float)) and not _nan(e) for e in err):
                ax.errorbar([r["budget"] for r in rs], y, yerr=err, capsize=2, **_style(skey))
            else:
                ax.plot([r["budget"] for r in rs], y, **_style(skey))
        for r in rows:
            if r["temperature"] == temp and r["method"] == "chain":
                ax.axhline(r[key], color="gray", ls="--", lw=1, label=f"chain (L={r['budget']})")
        if with_ar:
            ax.axhline(1.0, color="k", lw=0.8, label="ar")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tree budget N")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.set_title(f"T = {temp:g}" + (" (greedy)" if temp == 0 else ""))
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def tau_vs_budget(res):
    """tau (tokens per target call) against the tree budget N; one panel per temperature.

    Only acceptance is drawn, which seeded training and decoding make identical run to run, so
    the tracked PNG changes only when the models or the method change. Timings are in
    :func:`speedup_vs_budget`.
    """
    return _by_budget(res, "tau", "tau (tokens per target call)", with_ar=False)


def speedup_vs_budget(res):
    """Measured speedup vs ar against the tree budget N (error bars: std over timing passes when
    the rows have them). Timing-dependent: its PNG differs run to run and is not tracked."""
    return _by_budget(res, "speedup", "speedup vs ar", with_ar=True)


def predicted_vs_measured(res):
    """Measured mean accepted length vs the tree's predicted acceptance (its covered mass).

    T = 1: prediction = covered mass under the sampling distribution; error bars are 2 standard
    errors of the per-round difference. T = 0: the greedy prediction is exact by construction, so
    the soft (T = 1) covered mass is drawn instead, against the greedy accepted length.
    """
    import matplotlib.pyplot as plt

    rows = [r for r in _data(res)["rows"] if r["method"] != "ar"]
    fig, ax = plt.subplots(figsize=(5.5, 5))
    hi = 0.0
    for temp, marker in ((1.0, "o"), (0.0, "^")):
        rs = [r for r in rows if r["temperature"] == temp]
        if not rs:
            continue
        if temp == 1.0:
            x = [r["covered_mass_insample"] for r in rs]
            err = [2 * r["pred_gap_se"] if not _nan(r["pred_gap_se"]) else 0.0 for r in rs]
            ax.errorbar(x, [r["accepted_mean"] for r in rs], yerr=err, fmt=marker, ms=5, capsize=2,
                        label="T = 1: predicted = covered mass (±2 s.e.)")
        else:
            x = [r["covered_mass_mean"] for r in rs]
            ax.plot(x, [r["accepted_mean"] for r in rs], marker, ms=5, mfc="none",
                    label="T = 0: soft covered mass vs greedy accepted")
        hi = max(hi, max(x), max(r["accepted_mean"] for r in rs))
    ax.plot([0, hi * 1.05], [0, hi * 1.05], "k--", lw=1, label="measured = predicted")
    ax.set_xlabel("predicted accepted tokens per round")
    ax.set_ylabel("measured accepted tokens per round")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def speedup_check_figure(res):
    """Predicted against measured speedup, every speculative row, before any cell was timed.

    Left: the prediction from the theory's acceptance (the trees' predicted covered mass) and the
    round cost model; right: the same cost model with the measured acceptance (its error is the
    cost model's alone). Horizontal bars: the measured pass-to-pass standard deviation; the band
    is +-5% around equality. Results without a round profile give an empty, labelled figure.
    """
    import matplotlib.pyplot as plt

    rows = [r for r in _data(res)["rows"] if r["method"] != "ar" and not _nan(r.get("speedup"))
            and not _nan(r.get("speedup_from_insample_coverage"))]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6), sharex=True, sharey=True)
    if not rows:
        for ax in axes:
            ax.text(0.5, 0.5, "no predicted speedups in these results", ha="center", va="center",
                    transform=ax.transAxes)
        return fig
    hi = 1.1 * max(max(r["speedup"] + (r.get("speedup_std") or 0) for r in rows),
                   max(max(r["speedup_from_insample_coverage"], r.get("speedup_from_measured_tau") or 0) for r in rows))
    for ax, key, title in ((axes[0], "speedup_from_insample_coverage", "theory's acceptance + round cost model"),
                           (axes[1], "speedup_from_measured_tau", "measured acceptance + round cost model")):
        grid = [0, hi]
        ax.fill_between(grid, [0.95 * g for g in grid], [1.05 * g for g in grid], color="0.85", label="±5%")
        ax.plot(grid, grid, "k--", lw=1, label="predicted = measured")
        for temp, marker in ((0.0, "^"), (1.0, "o")):
            rs = [r for r in rows if r["temperature"] == temp and not _nan(r.get(key))]
            for k, st in _series(rs, temp).items():
                style = {kk: v for kk, v in _style(k).items() if kk in ("color", "label")}
                ax.errorbar([r["speedup"] for r in st], [r[key] for r in st],
                            xerr=[r.get("speedup_std") or 0.0 for r in st], fmt=marker, ms=5, capsize=2,
                            color=style.get("color"), label=f"T = {temp:g}, {style.get('label', k)}")
            chain = [r for r in rs if r["method"] == "chain"]
            if chain:
                ax.errorbar([r["speedup"] for r in chain], [r[key] for r in chain],
                            xerr=[r.get("speedup_std") or 0.0 for r in chain], fmt=marker, ms=5, capsize=2,
                            color="0.3", mfc="none", label=f"T = {temp:g}, chain")
        ax.set_xlim(0, hi)
        ax.set_ylim(0, hi)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("measured speedup over AR (± std over passes)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("predicted speedup over AR")
    axes[1].legend(fontsize=6, loc="upper left")
    fig.tight_layout()
    return fig


def prediction_check_figure(res):
    """Predicted before decoding (calibration prompts only) against measured, per cell.

    Left: tau, the prediction with +-2 standard errors of its calibration mean; right: speedup,
    the prediction's 95% interval from the acceptance alone (timing noise is not in it) against
    the measured mean +- std over timing passes. Grey band: +-5% around equality. Hollow markers:
    the cells of the theory's chosen budgets (off the grid, or a per-round rule)."""
    import matplotlib.pyplot as plt

    d = _data(res)
    cells = (d.get("prediction") or {}).get("cells") or []
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    if not cells:
        for ax in axes:
            ax.text(0.5, 0.5, "no out-of-sample predictions in these results", ha="center", va="center",
                    transform=ax.transAxes)
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
    axes[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def dead_share(res, eps_label: str = "1e-3"):
    """Share of tree nodes whose target prefix probability is strictly below eps (the decoder's
    rule, ``mfd_theory.llm.decode.DEAD_EPS``), against the budget."""
    import matplotlib.pyplot as plt

    rows = _data(res)["rows"]
    temps = sorted({r["temperature"] for r in rows})
    fig, axes = plt.subplots(1, len(temps), figsize=(5.2 * len(temps), 4), squeeze=False)
    for j, temp in enumerate(temps):
        ax = axes[0, j]
        for key, rs in _series(rows, temp).items():
            ax.plot([r["budget"] for r in rs], [100 * r["dead_share"] for r in rs], **_style(key))
        ax.vlines(64, 27, 33, color="gray", lw=8, alpha=0.4, label="paper: 27-33% at N = 64")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tree budget N")
        ax.set_ylabel(f"dead nodes (P(s) < {eps_label}, strictly), %")
        ax.set_title(f"T = {temp:g}")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def loss_curves(res):
    """Training loss of the target, the draft LM and every block drafter."""
    import matplotlib.pyplot as plt

    curves = _data(res)["loss_curves"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, c in curves.items():
        if not c:
            continue
        ax = axes[0] if name in ("target", "draft_lm") else axes[1]
        ax.plot([p["step"] for p in c], [p["loss"] for p in c], label=name, lw=1)
    axes[0].set_title("language models (next-token CE)")
    axes[1].set_title("block drafters (weighted block NLL per position)")
    for ax in axes:
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _nan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v == "nan"
