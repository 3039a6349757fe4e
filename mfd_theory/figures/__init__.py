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


def run_label(res) -> str:
    """One line naming the run a figure was drawn from, built from the result's config.

    e.g. ``run: e2e default preset, qwen3 4x128`` or ``run: mixture_gain, seeds 0,1,2, ...``.
    A bare data dict (no config) gives ``run: not named (drawn from data without its config)``.
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
    if name == "chimera_bound":
        return (f"run: chimera_bound, {cfg.get('n_instances', 0):,} instances (m <= {cfg.get('m_max')}), "
                f"seed {cfg.get('seed')}")
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
        return (f"run: {name}, L={cfg.get('L')}, seeds {_join(cfg.get('seeds', []))}, "
                f"K {_join(cfg.get('Ks', []))}, N {_join(cfg.get('budgets', []))}")
    return f"run: {name}" + (f", seed {cfg['seed']}" if "seed" in cfg else "")


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


def stamp_run(fig, res):
    """Write :func:`run_label` of ``res`` and its :func:`run_stamp` (date, commit) in small grey
    text below the figure's bottom-right corner (below everything tight_layout placed, so it
    covers nothing); returns the Text."""
    stamp = run_stamp(res)
    return fig.text(0.995, 0.0, run_label(res) + (f" ({stamp})" if stamp else ""), ha="right", va="top", fontsize=8,
                    color="0.45", gid=RUN_LABEL_GID)


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
