"""Every notebook executes on a fresh clone's layout (no results file): it computes a small run,
says so, and writes under ``results/notebook_small/``, leaving the tracked ``paper_figs/`` alone.

nbclient raises CellExecutionError on the first failing cell, so a broken notebook fails here.
Notebook 04 runs the micro end-to-end preset as its small run, from the checkpoints that the test
session trains once (conftest.micro_e2e_cache).
"""

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
RESULTS_FILE = {"01_chimera_bound.ipynb": "chimera_bound.json", "02_chimera_share.ipynb": "chimera_share.json",
                "03_mixture_gain.ipynb": "mixture_gain.json", "04_end_to_end.ipynb": "end_to_end.json",
                "05_path_gain.ipynb": "path_gain.json"}


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", sorted(RESULTS_FILE))
def test_notebook_without_results_runs_small_and_leaves_paper_figs_alone(name, tmp_path, monkeypatch, request):
    pytest.importorskip("nbclient")
    from mfd_theory.reproduce import run_notebook

    # a fresh clone's layout: the notebook, an empty results/, the tracked paper_figs/
    (tmp_path / "notebooks").mkdir()
    shutil.copy(NOTEBOOKS / name, tmp_path / "notebooks" / name)
    (tmp_path / "results").mkdir()
    if name.startswith("04"):
        pytest.importorskip("torch")
        # its small run is the micro preset: the session's trained checkpoints, found by their cache keys
        shutil.copytree(request.getfixturevalue("micro_e2e_cache"), tmp_path / "results" / "notebook_small" / "cache")
    figs = tmp_path / "paper_figs"
    figs.mkdir()
    (figs / "chimera_bound.png").write_bytes(b"tracked figure")
    before = _files(figs)
    # the kernel imports this checkout's package
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("MFD_NOTEBOOK_SMALL", raising=False)
    nb = run_notebook(tmp_path / "notebooks" / name, small=False, timeout=300)

    assert _files(figs) == before, "a small run touched paper_figs/"
    assert not (tmp_path / "results" / RESULTS_FILE[name]).exists(), "a small run wrote the full results' path"
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    stdout = "".join(o.get("text", "") for o in outputs if o.get("name") == "stdout")
    assert "small run: no results/" + RESULTS_FILE[name] in stdout, stdout[:500]
    # figures render as images (not as "<Figure size ...>" text), once per figure the notebook saves,
    # and every saved one is under results/notebook_small/
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    saved = [ln[len("wrote "):] for ln in stdout.splitlines() if ln.startswith("wrote ") and ln.endswith(".png")]
    assert saved and len(images) == len(saved), (len(images), saved)
    small_dir = (tmp_path / "results" / "notebook_small").resolve()
    for f in saved:
        assert Path(f).resolve().parent == small_dir and Path(f).is_file(), f
    stderr = "".join(o.get("text", "") for o in outputs if o.get("name") == "stderr")
    assert "IProgress not found" not in stderr and "Warning" not in stderr, stderr


def test_notebook_output_draws_into_paper_figs_only_from_the_full_results(tmp_path):
    from mfd_theory.figures import notebook_output

    results = tmp_path / "results" / "mixture_gain.json"
    small = notebook_output(results)
    assert not small.full and small.fig_dir == tmp_path / "results" / "notebook_small"
    assert small.note.startswith("small run: no results/mixture_gain.json")
    results.parent.mkdir()
    results.write_text("{}")
    full = notebook_output(results)
    assert full.full and full.fig_dir == tmp_path / "paper_figs" and full.note is None
    forced = notebook_output(results, small=True)
    assert not forced.full and forced.fig_dir == tmp_path / "results" / "notebook_small"
    assert forced.note.startswith("small run: ")


def test_small_run_note_is_drawn_on_the_figure(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mfd_theory.figures import save_figure

    fig, ax = plt.subplots()
    ax.plot([0, 1])
    save_figure(fig, tmp_path / "f.png", note="small run: no results/x.json, not the full results")
    assert any(t.get_text().startswith("small run: ") for t in fig.texts)
    plt.close(fig)


def test_committed_notebooks_have_no_outputs():
    import nbformat

    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), path.name


def _e2e_result(arch: str):
    """A small saved e2e result with every field notebook 04 reads (not a real run: only drawn)."""
    from mfd_theory.results import Result

    rows = []
    for temp in (0.0, 1.0):
        ar = dict(accepted_mean=0.0, accepted_std=0.0, covered_mass_insample=None, covered_mass_mean=None,
                  pred_gap_z=None, pred_gap_se=None, dead_share=None)
        rows.append(dict(method="ar", drafter="none", K=0, budget=0, temperature=temp, tau=1.0, speedup=1.0, **ar))
        for method, drafter in (("ddtree", "product"), ("mfd", "mfd-k2")):
            for n in (16, 64):
                rows.append(dict(method=method, drafter=drafter, K=1, budget=n, temperature=temp, tau=3.0 + n / 64,
                                 accepted_mean=2.0 + n / 64, accepted_std=0.5, covered_mass_insample=2.0,
                                 covered_mass_mean=2.1, pred_gap_z=0.1, pred_gap_se=0.05, speedup=1.2,
                                 speedup_std=0.02, dead_share=0.4, speedup_from_insample_coverage=1.1,
                                 speedup_from_measured_tau=1.15))
    data = {"rows": rows, "timings_s": {"train": 1.0}, "loss_curves": {"target": [{"step": 1, "loss": 5.0},
                                                                                   {"step": 2, "loss": 4.0}]}}
    cfg = {"preset": "default", "target_arch": arch, "target_layers": 4, "target_hidden": 128, "seed": 0}
    return Result("end_to_end", cfg, data, seed=0)


@pytest.mark.parametrize("with_hybrid", [True, False])
def test_notebook_04_draws_the_hybrid_run_from_its_full_results(with_hybrid, tmp_path, monkeypatch):
    """With results/end_to_end.json present, notebook 04 also draws results/hybrid/end_to_end.json (when there)
    into paper_figs/: tau (tracked) and speedup (timing-dependent) of the hybrid target."""
    pytest.importorskip("nbclient")
    pytest.importorskip("torch")
    from mfd_theory.reproduce import run_notebook

    name = "04_end_to_end.ipynb"
    (tmp_path / "notebooks").mkdir()
    shutil.copy(NOTEBOOKS / name, tmp_path / "notebooks" / name)
    _e2e_result("qwen3").save(tmp_path / "results" / "end_to_end.json")
    if with_hybrid:
        _e2e_result("qwen3_5").save(tmp_path / "results" / "hybrid" / "end_to_end.json")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("MFD_NOTEBOOK_SMALL", raising=False)
    nb = run_notebook(tmp_path / "notebooks" / name, small=False, timeout=300)

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    stdout = "".join(o.get("text", "") for o in outputs if o.get("name") == "stdout")
    figs = tmp_path / "paper_figs"
    assert (figs / "e2e_tau_vs_budget.png").is_file()
    hybrid = [figs / "e2e_hybrid_tau_vs_budget.png", figs / "e2e_hybrid_speedup_vs_budget.png"]
    if with_hybrid:
        assert all(p.is_file() for p in hybrid), sorted(p.name for p in figs.iterdir())
    else:
        assert not any(p.exists() for p in hybrid)
        assert "hybrid figures not drawn: no results/hybrid/end_to_end.json" in stdout
