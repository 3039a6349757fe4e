"""Figure for the batched-decoding benchmark (``bench_batch.json``): throughput against batch size
per budget policy, measured (solid) and predicted before the run (dashed), and the curve the
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


def _data(res) -> dict:
    return res["data"] if "data" in res and "rows" in res["data"] else res


def _best(rows, b, method, policy, key):
    cand = [r for r in rows if r["batch_size"] == b and r["method"] == method and r["policy"] == policy]
    return max(cand, key=lambda r: r.get("full_tokens_per_s", r["steady_tokens_per_s"]))[key] if cand else None


def batch_throughput(res, run_label: str | None = None):
    """Left: measured tokens/s over the whole decode (all requests) against B, one line per (method,
    policy) at its best measured N; dashed: the steady rate predicted for that same cell before the run.
    Right: the GPU prediction from the packaged verify table (best policy vs AR)."""
    import matplotlib.pyplot as plt

    d = _data(res)
    rows = d["rows"]
    sizes = sorted({r["batch_size"] for r in rows})
    fig, (ax, gx) = plt.subplots(1, 2, figsize=(11.5, 4.2))
    for (method, policy), style in SERIES.items():
        meas = [_best(rows, b, method, policy, "full_tokens_per_s" if "full_tokens_per_s" in rows[0]
                      else "steady_tokens_per_s") for b in sizes]
        if all(m is None for m in meas):
            continue
        pred = [_best(rows, b, method, policy, "predicted_tokens_per_s") for b in sizes]
        ax.plot(sizes, meas, lw=1.6, ms=6, **style)
        ax.plot(sizes, pred, lw=1.0, ls="--", color=style["color"], alpha=0.8)
    ax.plot([], [], color="0.3", ls="--", lw=1.0, label="predicted before the run (same cell)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(b) for b in sizes])
    ax.set_xlabel("batch size B (requests decoded together)")
    ax.set_ylabel("tokens / s, all requests (whole decode)")
    ax.set_title("measured on this machine")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    gpu = d.get("gpu_predicted", [])
    for method, color, marker in (("ddtree", "C0", "s"), ("mfd", "C3", "^")):
        g = sorted((r for r in gpu if r["method"] == method), key=lambda r: r["batch_size"])
        if g:
            gx.plot([r["batch_size"] for r in g], [r["tokens_per_s"] / r["ar_tokens_per_s"] for r in g], color=color,
                    marker=marker, label=f"{'MFD' if method == 'mfd' else 'DDTree'}, best predicted policy")
    gx.axhline(1.0, color="black", lw=1, label="batched AR")
    gx.set_xscale("log", base=2)
    gx.set_xticks(sizes, [str(b) for b in sizes])
    gx.set_xlabel("batch size B")
    gx.set_ylabel("throughput / batched AR's (PREDICTED)")
    gx.set_title(f"PREDICTED for {d.get('gpu_profile', 'a GPU')} (assumed table)", fontsize=10)
    gx.legend(fontsize=8, loc="upper right")
    gx.grid(alpha=0.3)
    label = run_label or f"run: mfd bench batch, {d.get('model', '')}"
    fig.text(0.995, 0.005, label, ha="right", va="bottom", fontsize=7, color="0.4")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig
