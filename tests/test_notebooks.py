"""Every notebook executes at its small size (MFD_NOTEBOOK_SMALL=1; figures go to a temp dir).

nbclient raises CellExecutionError on the first failing cell, so a broken notebook fails here.
Notebook 04 runs the micro end-to-end preset (training included) at its small size.
"""

from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.mark.parametrize("name", ["01_chimera_bound.ipynb", "02_chimera_share.ipynb", "03_mixture_gain.ipynb", "04_end_to_end.ipynb",
                                  "05_path_gain.ipynb"])
def test_notebook_runs_at_small_size(name):
    pytest.importorskip("nbclient")
    from mfd_theory.reproduce import run_notebook

    if name.startswith("04"):
        pytest.importorskip("torch")
    nb = run_notebook(NOTEBOOKS / name, small=True, timeout=300)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "the notebook printed or drew nothing"
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    # figures render as images (not as "<Figure size ...>" text), once per figure the notebook saves
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    stdout = "".join(o.get("text", "") for o in outputs if o.get("name") == "stdout")
    saved = [ln for ln in stdout.splitlines() if ln.startswith("wrote ") and ln.endswith(".png")]
    assert saved and len(images) == len(saved), (len(images), saved)
    stderr = "".join(o.get("text", "") for o in outputs if o.get("name") == "stderr")
    assert "IProgress not found" not in stderr and "Warning" not in stderr, stderr


def test_committed_notebooks_have_no_outputs():
    import nbformat

    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), path.name
