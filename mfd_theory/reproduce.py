"""``mfd reproduce``: the main job on embedded defaults.

Runs every experiment with its default config into ``results/`` (each skips work already saved),
executes the notebooks, which draw the figures into ``paper_figs/``, and finally runs
``mfd report``, which rewrites the result blocks of the README and ``docs/`` from the new
``results/*.json``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (label, module, argv) in order; each module exposes main(argv)
STEPS: list[tuple[str, str, list[str]]] = [
    ("core table", "mfd_theory.experiments.core_table", ["--figure", "paper_figs/coverage_vs_budget.png"]),
    ("chimera bound", "mfd_theory.experiments.chimera_bound", []),
    ("chimera share", "mfd_theory.experiments.chimera_share", []),
    ("mixture gain", "mfd_theory.experiments.mixture_gain", []),
    ("path gain", "mfd_theory.experiments.path_gain", []),
    ("end to end", "mfd_theory.experiments.e2e", ["--preset", "default", "--out", "results"]),
    # The hybrid run stops at N = 64: at 128 and 256 every method measured below AR's speed
    # (0.84-0.97 and 0.54-0.59, run of 2026-11-30), and those cells were over half its decode time.
    ("end to end, hybrid target", "mfd_theory.experiments.e2e",
     ["--preset", "default", "--target-arch", "qwen3_5", "--budgets", "16,32,64", "--out", "results/hybrid"]),
    ("own target", "mfd_theory.experiments.own_target", ["--out", "results/own_target"]),
    ("natural text", "mfd_theory.experiments.natural", ["--out", "results/natural"]),
]
NOTEBOOKS: list[str] = [
    "notebooks/01_chimera_bound.ipynb",
    "notebooks/02_chimera_share.ipynb",
    "notebooks/03_mixture_gain.ipynb",
    "notebooks/04_end_to_end.ipynb",
    "notebooks/05_path_gain.ipynb",
]


def run_notebook(path: Path, small: bool = False, timeout: int = 1800):
    """Execute a notebook from its own folder and return the executed copy.

    The file on disk is not modified (notebooks are committed without outputs). ``small`` sets
    MFD_NOTEBOOK_SMALL=1, which the notebooks read to run a tiny version (into
    ``results/notebook_small/``, see :func:`mfd_theory.figures.notebook_output`).
    """
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    # the kernel inherits the environment: MFD_NOTEBOOK_SMALL picks the size, and MPLBACKEND is
    # removed so the kernel uses its inline backend and the executed copy holds the images
    saved = {k: os.environ.get(k) for k in ("MFD_NOTEBOOK_SMALL", "MPLBACKEND")}
    os.environ["MFD_NOTEBOOK_SMALL"] = "1" if small else "0"
    os.environ.pop("MPLBACKEND", None)
    try:
        # The kernel's log level ERROR drops its start-up warning about running over TCP (the
        # kernel talks only to this process, on the local machine).
        NotebookClient(nb, timeout=timeout, kernel_name="python3", extra_arguments=["--IPKernelApp.log_level=ERROR"],
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        return nb
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main(argv=None) -> None:
    from .formatting import help_summary

    parser = argparse.ArgumentParser(prog="mfd reproduce", description=help_summary(__doc__))
    parser.add_argument("--skip-notebooks", action="store_true",
                        help="run the experiments only, draw no figures (default: off)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars (default: off)")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    t_all = time.perf_counter()
    seconds: dict[str, float] = {}

    def record() -> None:  # after every step, so an interrupted run keeps what it measured
        from .results import Result

        Result("reproduce_times", {"skip_notebooks": args.skip_notebooks, "cpu_count": os.cpu_count()},
               {"seconds": seconds, "total_s": time.perf_counter() - t_all}).save(ROOT / "results" / "reproduce_times.json")

    for label, module, step_argv in STEPS:
        print(f"\n=== {label} ({module})", flush=True)
        t0 = time.perf_counter()
        importlib.import_module(module).main(list(step_argv) + (["--quiet"] if args.quiet else []))
        seconds[label] = time.perf_counter() - t0
        print(f"--- {label}: {seconds[label]:.1f} s", flush=True)
        record()
    if not args.skip_notebooks:
        for nb in NOTEBOOKS:
            print(f"\n=== notebook {nb}", flush=True)
            t0 = time.perf_counter()
            run_notebook(ROOT / nb)
            seconds[nb] = time.perf_counter() - t0
            print(f"--- {nb}: {seconds[nb]:.1f} s", flush=True)
            record()
    print("\n=== report (the result blocks of README.md and docs/ from results/)", flush=True)
    from .report import main as report

    report(["--results", "results"])
    print(f"\nreproduce finished in {time.perf_counter() - t_all:.0f} s; results/ and paper_figs/ are up to date")
