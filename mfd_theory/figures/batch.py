"""Figure for the batched-decoding benchmark (``bench_batch.json``): throughput against batch size
per budget policy, measured (solid) and predicted before the run (hollow markers), and the curve the
packaged GPU table predicts (an assumption, labelled as such)."""

from __future__ import annotations

__all__ = ["batch_throughput", "SERIES"]

# (method, policy) -> style; every series its own colour and marker
SERIES = {
    ("ar", "off"): dict(color="black", marker="o", label="AR (batched)"),
    ("chain", "per_request"): dict(color="0.5", marker="v", label="chain (DFlash)"),
    ("ddtree", "per_request"): dict(color="C0", marker="s", label="DDTree, best N per request"),
    ("ddtree", "global"): dict(color="C9", marker="D", label="DDTree, global top-N (best total)"),
    ("mfd", "per_request"): dict(color="C3", marker="^", label="MFD, best N per request"),
    ("mfd", "global"): dict(color="C1", marker="P", label="MFD, global top-N (best total)"),
    ("ddtree", "proportional"): dict(color="C5", marker="h", label="DDTree, proportional (best total)"),
    ("mfd", "proportional"): dict(color="C6", marker="p", label="MFD, proportional (best total)"),
    ("mfd", "auto"): dict(color="C2", marker="*", label="MFD, auto (predicted policy)"),
    ("ddtree", "auto"): dict(color="C4", marker="X", label="DDTree, auto (predicted policy)"),
}

_ARCH = {"qwen3": "Qwen3 (attention)", "qwen3_5": "Qwen3.5 hybrid (Gated DeltaNet + attention)"}


def _parts(res) -> tuple[dict, dict]:
    """(config, data) of a Result, its saved dict, or a bare data dict (config then empty)."""
    if hasattr(res, "data") and hasattr(res, "config"):
        return dict(res.config or {}), res.data
    if "data" in res and "rows" in res["data"]:
        return res.get("config") or {}, res["data"]
    return {}, res


def _best(rows, b, method, policy, key):
    cand = [r for r in rows if r["batch_size"] == b and r["method"] == method and r["policy"] == policy]
    return max(cand, key=lambda r: r.get("full_tokens_per_s", r["steady_tokens_per_s"]))[key] if cand else None


def batch_throughput(res, run_label: str | None = None):
    """Left: measured tokens/s over the whole decode (all requests) against B, one line per (method,
    policy) at its best measured N; hollow markers: the steady rate predicted for that same cell
    before the run. Right: the GPU prediction from the packaged verify table (best policy vs AR),
    which for a hybrid target is an attention model's table (none is packaged for a hybrid). One
    legend below both panels, so it covers no data."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from mfd_theory.figures import stamp_run

    config, d = _parts(res)
    rows = d["rows"]
    sizes = sorted({r["batch_size"] for r in rows})
    arch = config.get("target_arch") or ("qwen3_5" if "qwen3_5" in str(d.get("model", "")) else "qwen3")
    from mfd_theory.figures import PAGE_WIDTH_IN

    fig, (ax, gx) = plt.subplots(1, 2, figsize=(PAGE_WIDTH_IN, 5.6))
    handles = []
    for (method, policy), style in SERIES.items():
        meas = [_best(rows, b, method, policy, "full_tokens_per_s" if "full_tokens_per_s" in rows[0]
                      else "steady_tokens_per_s") for b in sizes]
        if all(m is None for m in meas):
            continue
        pred = [_best(rows, b, method, policy, "predicted_tokens_per_s") for b in sizes]
        handles.append(ax.plot(sizes, meas, lw=1.6, ms=6, **style)[0])
        # predicted: the same marker, hollow and unjoined, so eight curves do not tangle
        ax.plot(sizes, pred, ls="none", marker=style["marker"], ms=7, mfc="none", mew=1.0, color=style["color"],
                alpha=0.9)
    handles.append(Line2D([], [], ls="none", marker="o", ms=7, mfc="none", color="0.3",
                          label="hollow: steady rate predicted before the run (same cell)"))
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(b) for b in sizes])
    ax.set_xlabel("batch size B (requests decoded together)")
    ax.set_ylabel("tokens / s, all requests (whole decode)")
    ax.set_title(f"measured on this CPU:\nsmall {_ARCH.get(arch, arch)} target", fontsize=10)
    ax.grid(alpha=0.3)
    gpu = d.get("gpu_predicted", [])
    for method, color, marker in (("ddtree", "C0", "s"), ("mfd", "C3", "^")):
        g = sorted((r for r in gpu if r["method"] == method), key=lambda r: r["batch_size"])
        if g:
            gx.plot([r["batch_size"] for r in g], [r["tokens_per_s"] / r["ar_tokens_per_s"] for r in g], color=color,
                    marker=marker, label=f"{'MFD' if method == 'mfd' else 'DDTree'}, best predicted policy (GPU)")
    gx.axhline(1.0, color="black", lw=1)
    gx.set_xscale("log", base=2)
    gx.set_xticks(sizes, [str(b) for b in sizes])
    gx.set_xlabel("batch size B")
    gx.set_ylabel("throughput / batched AR's (PREDICTED)")
    profile = d.get("gpu_profile", "a GPU")
    gx.set_title(f"PREDICTED for a GPU:\nthe packaged {profile} table (assumed)", fontsize=10)
    if arch != "qwen3":
        # the only packaged GPU table is an attention model's: say so where the curve is drawn
        gx.annotate(f"{profile} is an attention model's verify table: no GPU table of a hybrid\ntarget is "
                    "packaged, so this panel prices the hybrid's rounds as attention ones", (0, 0),
                    xycoords="axes fraction", xytext=(0, -42), textcoords="offset points", fontsize=8,
                    color="0.3", va="top")
    gx.grid(alpha=0.3)
    handles += [h for h in gx.get_legend_handles_labels()[0]]
    # the panels above, the legend in the band below them, the run's label under it
    fig.tight_layout(rect=(0, 0.2, 1, 1))
    fig.legend(handles, [h.get_label() for h in handles], loc="upper center", bbox_to_anchor=(0.5, 0.17),
               ncol=3, fontsize=8, frameon=False)
    if run_label:
        fig.text(0.995, 0.0, run_label, ha="right", va="top", fontsize=8, color="0.45")
    else:
        stamp_run(fig, res if config else {"rows": rows})
    return fig
