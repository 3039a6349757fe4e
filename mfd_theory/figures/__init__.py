"""Plotting functions: each takes result objects (or their dicts) and returns a matplotlib Figure.

Topic modules: :mod:`.core` (coverage vs budget), :mod:`.chimeras`, :mod:`.mixture`, :mod:`.e2e`,
:mod:`.path`, :mod:`.batch`, :mod:`.real`. Shared here: :func:`stamp_run` (every figure names the run it was drawn from, in its
bottom-right corner, with the result's date and commit) and :func:`reveal_overlaps` (lines that lie on each other stay visible).
matplotlib is imported lazily inside the functions (it is an optional extra).
"""

import importlib
from pathlib import Path
from typing import NamedTuple

_TOPICS = ("core", "chimeras", "mixture", "e2e", "path", "batch", "real")


def __getattr__(name):
    for topic in _TOPICS:
        try:
            mod = importlib.import_module(f"{__name__}.{topic}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{topic}":
                continue
            raise
        if hasattr(mod, name):
            return getattr(mod, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: the page width a figure must read at (px; a README or docs page scales a wider PNG down to it)
PAGE_PX = 800
#: the smallest text a figure may show at :data:`PAGE_PX` (px)
MIN_TEXT_PX = 9
#: the dpi :func:`save_figure` writes at
DPI = 150
#: the most panels (axes) side by side in one row of a figure
MAX_PANELS_PER_ROW = 3
#: the smallest font a figure uses (points): ticks, legends, notes and the run label
MIN_FONT_PT = 8
#: the widest a figure may be drawn (inches): its smallest font, MIN_FONT_PT, at a saved width of
#: PAGE_WIDTH_IN scaled to PAGE_PX shows at MIN_FONT_PT * PAGE_PX / (72 * PAGE_WIDTH_IN) = 9.3 px,
#: with room for what bbox_inches="tight" adds (a legend above, the run label below)
PAGE_WIDTH_IN = 9.5


def text_px_at_page(fig, page_px: int = PAGE_PX) -> tuple[float, str]:
    """(size in px, text) of the smallest visible text of ``fig`` once saved as :func:`save_figure`
    saves it and shown ``page_px`` wide (a narrower PNG is shown at its own size).

    Saves the figure (in memory) to read the PNG's pixel width, then walks every visible, non-empty
    Text artist (titles, labels, tick labels, legends, notes, the run label): a text of F points in
    a PNG of W px at :data:`DPI` shows at F * DPI / 72 * min(1, page_px / W) px.
    """
    import io
    import struct

    from matplotlib.text import Text

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    width = struct.unpack(">I", buf.getvalue()[16:20])[0]  # the PNG's IHDR width
    scale = DPI / 72 * min(1.0, page_px / width)
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and _drawn(t)]
    smallest = min(texts, key=lambda t: t.get_fontsize())
    return smallest.get_fontsize() * scale, smallest.get_text()


def _drawn(text) -> bool:
    """Whether a Text is drawn: it and every artist above it visible (a hidden axes' labels are not)."""
    a = text
    while a is not None:
        if not a.get_visible():
            return False
        a = getattr(a, "axes", None) if a is not getattr(a, "axes", None) else None
    return True


def panels_per_row(fig) -> int:
    """The most visible axes side by side in one row of ``fig`` (axes whose heights overlap by
    more than half of the shorter one count as one row)."""
    boxes = [ax.get_position() for ax in fig.axes if ax.get_visible()]
    most = 0
    for b in boxes:
        row = [c for c in boxes if min(b.y1, c.y1) - max(b.y0, c.y0) > 0.5 * min(b.height, c.height)]
        most = max(most, len(row))
    return most


def panel_grid(n: int, panel_w: float, panel_h: float, sharey: bool = False, squeeze_width: bool = True):
    """A figure with ``n`` panels in rows of at most :data:`MAX_PANELS_PER_ROW` (the last row's
    unused axes hidden), each about ``panel_w`` x ``panel_h`` inches, no wider than
    :data:`PAGE_WIDTH_IN`; returns (fig, list of the n axes, in reading order)."""
    import matplotlib.pyplot as plt

    cols = min(n, MAX_PANELS_PER_ROW)
    rows = -(-n // cols)
    width = min(PAGE_WIDTH_IN, panel_w * cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width, panel_h * rows), squeeze=False, sharey=sharey)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


#: gid of the run label's Text (see :func:`stamp_run`), so tests and callers can find it
RUN_LABEL_GID = "run-label"


def _config_and_name(res) -> tuple[dict | None, str | None]:
    """(config, name) of a Result, a saved result's dict, or (None, None) for a bare data dict."""
    if hasattr(res, "config") and hasattr(res, "data"):
        return dict(res.config or {}), getattr(res, "name", None)
    if isinstance(res, dict) and isinstance(res.get("config"), dict) and "data" in res:
        return res["config"], res.get("name")
    return None, None


def _join(values) -> str:
    values = list(values)
    if len(values) > 4 and all(isinstance(v, int) for v in values):
        return f"{values[0]}..{values[-1]} ({len(values)} values)"
    return ",".join(str(v) for v in values)


def run_label(res, drawn: str | None = None) -> str:
    """One line naming the run a figure was drawn from, built from the result's config.

    e.g. ``run: e2e default preset, qwen3 4x128`` or ``run: mixture_gain, seeds 0,1,2, ...``.
    A bare data dict (no config) gives ``run: not named (drawn from data without its config)``.
    ``drawn`` (e.g. ``"K 1 (product) and 4 (mixture), N 16..1024"``) says which of the run's sweep the
    figure draws, in place of the sweep's own values (K, N) where a figure draws part of them, so the
    label describes what is drawn.
    """
    cfg, name = _config_and_name(res)
    if cfg is None:
        return "run: not named (drawn from data without its config)"
    name = (name or "").split("/")[0] or "result"
    if name == "bench_batch":
        arch = cfg.get("target_arch", "qwen3")
        return (f"run: bench batch on the e2e {cfg.get('e2e_preset', cfg.get('preset', '?'))} preset's {arch} target, B "
                f"{_join(cfg.get('batch_sizes', []))}, N {_join(cfg.get('budgets', []))}, seed {cfg.get('seed', '?')}")
    if name == "end_to_end" or "target_layers" in cfg:  # an e2e run's config, whatever its file is called
        arch = cfg.get("target_arch", "qwen3")
        kind = " (Gated DeltaNet hybrid)" if arch == "qwen3_5" else ""
        size = f" {cfg['target_layers']}x{cfg['target_hidden']}" if "target_layers" in cfg else ""
        return f"run: e2e {cfg.get('preset', '?')} preset, {arch}{kind}{size}, seed {cfg.get('seed', '?')}"
    if name == "eval":
        drafters = [str(d).rstrip("/").split("/")[-1] for d in cfg.get("drafter") or []]
        return (f"run: eval of {cfg.get('target', '?')}, drafters {', '.join(drafters) or '?'}, "
                f"seed {cfg.get('seed', '?')}")
    if name == "core_table":
        return (f"run: core_table, {cfg.get('n_futures')}-future target, L={cfg.get('L')}, V={cfg.get('V')}, "
                f"noise={cfg.get('noise')}, seed {cfg.get('seed')}")
    if name == "chimera_share":
        return (f"run: chimera_share, L={cfg.get('L')}, V={cfg.get('V')}, {cfg.get('n_seeds')} seeds per setting, "
                f"seed {cfg.get('seed')}")
    if name == "real":
        return (f"run: mfd real, {cfg.get('prompts_per_domain')} prompts per domain, {cfg.get('samples')} sampled "
                f"paths per prompt and T, K {_join(cfg.get('modes', []))}, seed {cfg.get('seed')}")
    if name == "real_drafters":
        return (f"run: mfd real-drafters, {cfg.get('target', '?')}, kinds {_join(cfg.get('kinds', []))}, "
                f"{cfg.get('seeds', '?')} seeds, {cfg.get('steps', '?')} steps, {cfg.get('eval_prompts', '?')} prompts "
                "per domain")
    if name in ("mixture_gain", "path_gain"):
        head = f"run: {name}, L={cfg.get('L')}, seeds {_join(cfg.get('seeds', []))}"
        if drawn:
            return f"{head}; drawn: {drawn}"
        return f"{head}, K {_join(cfg.get('Ks', []))}, N {_join(cfg.get('budgets', []))}"
    if name == "chimera_bound":
        ties = (f", {cfg['n_tie_instances']:,} on the grid 1..{cfg.get('grid', '?')} in (b)"
                if "n_tie_instances" in cfg else "")
        return (f"run: chimera_bound, {cfg.get('n_instances', 0):,} random instances (m <= {cfg.get('m_max')}) in (a)"
                f"{ties}, seed {cfg.get('seed')}" + (f"; drawn: {drawn}" if drawn else ""))
    label = f"run: {name}" + (f", seed {cfg['seed']}" if "seed" in cfg else "")
    return label + (f"; drawn: {drawn}" if drawn else "")


def run_stamp(res) -> str:
    """When and from which commit the result was made, from its provenance: ``2026-12-01, commit
    59efbfb`` (``+dirty`` kept), or "" for data without provenance. The result's own date, not the
    drawing's, so the same result always gives the same figure."""
    prov = getattr(res, "provenance", None)
    if prov is None and isinstance(res, dict):
        prov = res.get("provenance")
    if not isinstance(prov, dict):
        return ""
    parts = []
    if prov.get("created"):
        parts.append(str(prov["created"])[:10])
    sha = prov.get("git_sha")
    if sha:
        head, dirty = str(sha).split("+")[0], "+dirty" if "+dirty" in str(sha) else ""
        parts.append(f"commit {head[:7]}{dirty}")
    return ", ".join(parts)


def stamp_run(fig, res, drawn: str | None = None):
    """Write :func:`run_label` of ``res`` (with ``drawn``: what of the run the figure draws) and its
    :func:`run_stamp` (date, commit) in small grey text below the figure's bottom-right corner
    (below everything tight_layout placed, so it covers nothing), broken into lines at its commas
    where it is wider than the figure (so it never widens the saved PNG); returns the Text."""
    stamp = run_stamp(res)
    parts = [p + "," for p in run_label(res, drawn).split(", ")]
    parts[-1] = parts[-1][:-1]
    if stamp:
        parts.append(f"({stamp})")
    chars = max(30, int(fig.get_figwidth() * 72 / (MIN_FONT_PT * 0.6)))  # about 0.6 em a character
    lines = [""]
    for p in parts:
        if lines[-1] and len(lines[-1]) + 1 + len(p) > chars:
            lines.append(p)
        else:
            lines[-1] = f"{lines[-1]} {p}" if lines[-1] else p
    return fig.text(0.995, 0.0, "\n".join(lines), ha="right", va="top", fontsize=MIN_FONT_PT, color="0.45",
                    gid=RUN_LABEL_GID)


def reveal_overlaps(ax, lines, tol: float = 1e-6, note_loc=(0.02, 0.02), names=None):
    """Keep lines that lie on each other visible, and say so on the axes.

    ``lines`` (Line2D, in drawing order) are grouped by equal data (same x, y within ``tol``
    relative); in each group of two or more the lower lines are widened and lightened so they show
    as a halo around the top one, and a note "A = B (lines coincide)" (or "(within x%)" for a
    larger ``tol``) is written in the axes corner ``note_loc``, or with ``note_loc="below"`` under
    the axes' x label, wrapped to the axes' width (where it covers no data, however long the
    names). ``names`` (parallel to ``lines``) name them in the note, by default their labels.
    Returns the notes' texts.
    """
    import numpy as np

    name_of = {id(ln): (names[i] if names else ln.get_label()) for i, ln in enumerate(lines)}
    groups: list[list] = []
    for ln in lines:
        x, y = np.asarray(ln.get_xdata(), float), np.asarray(ln.get_ydata(), float)
        for g in groups:
            gx, gy = np.asarray(g[0].get_xdata(), float), np.asarray(g[0].get_ydata(), float)
            if gx.shape == x.shape and np.allclose(gx, x) and np.allclose(gy, y, rtol=tol, atol=tol * 1e-3):
                g.append(ln)
                break
        else:
            groups.append([ln])
    notes = []
    for g in groups:
        if len(g) < 2:
            continue
        g = sorted(g, key=lambda ln: ln.get_zorder())  # stable: drawing order among equal zorders
        top_lw = g[-1].get_linewidth()
        for depth, ln in enumerate(reversed(g[:-1]), start=1):
            if ln.get_linewidth() < top_lw + 2.5 * depth:
                ln.set_linewidth(top_lw + 2.5 * depth)
                ln.set_alpha(0.45)
                ln.set_markersize(ln.get_markersize() + 2.5 * depth)
            ln.set_zorder(min(ln.get_zorder(), g[-1].get_zorder() - 0.1 * depth))
        shown = [name_of[id(ln)] for ln in g if not name_of[id(ln)].startswith("_")]
        notes.append(" = ".join(shown) + (" (lines coincide)" if tol <= 1e-6 else f" (within {100 * tol:g}%)"))
    if notes and note_loc == "below":
        import textwrap

        width = ax.get_position().width * ax.figure.get_figwidth()  # inches
        chars = max(20, int(width * 72 / (8 * 0.55)))  # 8-pt text, about 0.55 em per character
        text = "\n".join(textwrap.fill(n, chars) for n in notes)
        ax.annotate(text, (0.0, 0.0), xycoords="axes fraction", xytext=(0, -36), textcoords="offset points",
                    ha="left", va="top", fontsize=8, color="0.25", gid="overlap-note")
    elif notes:
        ax.text(*note_loc, "\n".join(notes), transform=ax.transAxes, fontsize=8, color="0.25",
                ha="left" if note_loc[0] < 0.5 else "right", va="bottom" if note_loc[1] < 0.5 else "top",
                bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="0.8", alpha=0.85), zorder=10)
    return notes


class NotebookOutput(NamedTuple):
    """What a notebook draws and where (see :func:`notebook_output`)."""

    full: bool  #: True: draw the full results file; False: compute a small run
    fig_dir: Path  #: where its figures (and a small run's results) go
    note: str | None  #: "small run: ..." for a small run (printed, and stamped on each figure)


def notebook_output(results_file, small: bool = False) -> NotebookOutput:
    """Decide what a notebook draws from and where its figures go.

    With ``results_file`` present (written by the experiment's command or ``mfd reproduce``) and
    ``small`` false, the notebook draws that file into ``paper_figs/`` (beside ``results/``). Else
    (a fresh clone, or ``small`` asked for) it computes a small run and everything goes under
    ``results/notebook_small/``, so a small run never replaces a tracked figure.
    """
    results_file = Path(results_file)
    if results_file.is_file() and not small:
        return NotebookOutput(True, results_file.parent.parent / "paper_figs", None)
    why = "small size asked for" if small else f"no {results_file.parent.name}/{results_file.name}"
    return NotebookOutput(False, results_file.parent / "notebook_small",
                          f"small run: {why}, not the full results")


def save_figure(fig, path, note: str | None = None) -> str:
    """Save a figure (PNG, 150 dpi) atomically, creating the folder; returns the path.

    The file carries no version or date metadata, so the same figure gives the same bytes on
    every run (a tracked PNG changes only when what it shows changes). ``note`` (a small run's
    :attr:`NotebookOutput.note`) is written in red above the figure first.
    """
    import io

    from mfd_theory.results import atomic_write_bytes

    if note:
        fig.text(0.5, 1.0, note, ha="center", va="bottom", color="tab:red", fontsize=9)
    path = Path(path)
    buf = io.BytesIO()
    fmt = path.suffix.lstrip(".") or "png"
    meta = {"Software": None} if fmt == "png" else {"Creator": None, "Producer": None, "CreationDate": None} \
        if fmt == "pdf" else None
    fig.savefig(buf, format=fmt, dpi=150, bbox_inches="tight", metadata=meta)
    atomic_write_bytes(path, buf.getvalue())
    return str(path)
