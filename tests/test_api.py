"""The package's public surface: import graph, top-level exports, the README quickstart."""

from __future__ import annotations

import ast
from pathlib import Path

import mfd_theory

PKG = Path(mfd_theory.__file__).resolve().parent


#: folders of the package that are not the theory core
_NOT_CORE = ("figures", "llm", "commands")


def _core_units() -> dict[str, list[Path]]:
    """The core's top-level units: a module file, or a package (folder) with all of its files."""
    units = {p.stem: [p] for p in PKG.glob("*.py")}
    for d in PKG.iterdir():
        if (d / "__init__.py").is_file() and d.name not in _NOT_CORE:
            units[d.name] = sorted(d.rglob("*.py"))
    return units


def _core_import_graph() -> dict[str, set[str]]:
    """unit -> the core units it imports anywhere (top level or inside a function)."""
    units = _core_units()
    graph: dict[str, set[str]] = {}
    for unit, paths in units.items():
        deps: set[str] = set()
        for path in paths:
            in_package = len(paths) > 1 or path.name == "__init__.py"
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom):
                    if node.level == 1 and in_package:  # from .x import y: inside the same package
                        continue
                    if node.level == 1 and node.module:  # from .x import y
                        deps.add(node.module.split(".")[0])
                    elif node.level == 1:  # from . import x
                        deps.update(a.name for a in node.names)
                    elif node.module and node.module.startswith("mfd_theory."):
                        deps.add(node.module.split(".")[1])
                elif isinstance(node, ast.Import):
                    deps.update(a.name.split(".")[1] for a in node.names if a.name.startswith("mfd_theory."))
        graph[unit] = {d for d in deps if d in units and d != unit}
    return graph


def test_core_import_graph_sees_the_core_packages():
    graph = _core_import_graph()
    # the packages count as one unit each, with their submodules' imports (so a cycle through them shows)
    assert {"speedup", "chimeras", "_kernels"} <= set(graph)
    assert {"trees", "coverage", "distributions", "_kernels", "validation"} <= graph["chimeras"]
    assert "sequoia" in graph["speedup"] and "validation" in graph["speedup"]


def test_core_modules_import_each_other_without_cycles():
    graph = _core_import_graph()
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            assert state.get(d) != 1, f"import cycle: {' -> '.join(stack + [m, d])}"
            if d not in state:
                visit(d, stack + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def test_top_level_exports_and_lazy_import():
    import subprocess
    import sys

    code = (
        "import sys, mfd_theory\n"
        "assert 'numba' not in sys.modules and 'torch' not in sys.modules, 'eager import'\n"
        "from mfd_theory import (product_tree, mixture_tree, oracle_tree, chain_tree, DraftTree, coverage,\n"
        "    acceptance_variance, depth_profile, simulate_acceptance, chimera_mask, count_chimeras,\n"
        "    MixtureOfProducts, fit_mixture, sequoia_tree, make_target)\n"
        "import mfd_theory.coverage as cov\n"
        "assert coverage is cov and callable(coverage)\n"
        "assert 'torch' not in sys.modules\n"
        "for name in mfd_theory.__all__:\n"
        "    getattr(mfd_theory, name)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_coverage_is_the_same_object_in_any_import_order():
    import numpy as np

    from mfd_theory import MixtureOfProducts, coverage, oracle_tree
    from mfd_theory.coverage import coverage as coverage_fn

    target = MixtureOfProducts.futures([[0, 1], [1, 0]], vocab_size=2)
    tree = oracle_tree(target, 4)
    assert coverage(tree, target) == coverage_fn(tree, target) == 2.0
    assert np.allclose(coverage.depth_profile(tree, target), [1.0, 1.0])


def test_product_tree_accepts_what_marginals_returns():
    import numpy as np
    import pytest

    from mfd_theory import MixtureOfProducts, product_tree

    target = MixtureOfProducts.futures([[0, 1, 2], [2, 1, 0]], weights=[0.7, 0.3], vocab_size=3)
    marg = target.marginals()
    assert product_tree(marg, 7) == product_tree(marg.log_q[0], 7)
    with pytest.raises(ValueError, match="log_q: a MixtureOfProducts with K = 2"):
        product_tree(target, 7)
    assert np.isfinite(product_tree(marg, 7).log_score).all()


def _readme_quickstart() -> str:
    text = (PKG.parent / "README.md").read_text()
    start = text.index("```python\n") + len("```python\n")
    return text[start:text.index("```", start)]


def test_readme_quickstart_runs_and_prints_what_it_says(capsys):
    code = _readme_quickstart()
    assert len(code.strip().splitlines()) <= 16  # a quickstart, not a tutorial
    exec(compile(code, "README.md quickstart", "exec"), {})
    printed = capsys.readouterr().out.strip().splitlines()
    promised = [line.split("# prints:")[1].split("(")[0].split() for line in code.splitlines() if "# prints:" in line]
    assert len(printed) == len(promised)
    for got, want in zip(printed, promised):
        assert [float(x) for x in got.split()] == [float(x) for x in want], (got, want)


def test_mixture_tree_takes_a_mixture_as_product_tree_does():
    import pytest

    from mfd_theory import MixtureOfProducts, mixture_tree, product_tree

    target = MixtureOfProducts.futures([[0, 1, 2], [2, 1, 0]], weights=[0.7, 0.3], vocab_size=3, noise=0.2)
    assert mixture_tree(target, 7) == mixture_tree(target.log_pi, target.log_q, 7)
    assert mixture_tree(target, budget=7) == mixture_tree(target.log_pi, target.log_q, 7)
    marg = target.marginals()  # one mode: both builders take it and agree
    assert mixture_tree(marg, 5) == product_tree(marg, 5)
    with pytest.raises(ValueError, match="budget"):
        mixture_tree(target, 7, 7)
    with pytest.raises(ValueError, match="budget"):
        mixture_tree(target)


def test_count_chimeras_eps_counts_the_nodes_a_noisy_target_almost_never_produces():
    import numpy as np
    import pytest

    from mfd_theory import MixtureOfProducts, chimera_mask, count_chimeras, product_tree

    seqs = [[0, 1, 2], [2, 1, 0]]
    exact = MixtureOfProducts.futures(seqs, vocab_size=4)
    noisy = MixtureOfProducts.futures(seqs, vocab_size=4, noise=1e-3)
    tree = product_tree(exact.marginals(), 8)
    want = count_chimeras(tree, exact)
    assert want.total > 0 and count_chimeras(tree, noisy).total == 0  # eps = 0: today's count
    got = count_chimeras(tree, noisy, eps=1e-3)
    assert got == want  # the noise gives a chimera at most ~(noise / V) per off-future token
    assert got.total == int(chimera_mask(tree, noisy, 1e-3).sum())
    assert count_chimeras(tree, np.array(seqs)) == want  # futures: eps = 0 only
    with pytest.raises(ValueError, match="eps"):
        count_chimeras(tree, np.array(seqs), eps=1e-3)
    with pytest.raises(ValueError, match="eps"):
        count_chimeras(tree, noisy, eps=-1.0)


def test_weights_that_do_not_sum_to_one_are_refused():
    import numpy as np
    import pytest

    from mfd_theory import MixtureOfProducts, make_target

    seqs = [[0, 1], [1, 0], [1, 1]]
    with pytest.raises(ValueError, match="weights: must sum to 1"):
        MixtureOfProducts.futures(seqs, weights=[3, 2, 1], vocab_size=2)
    with pytest.raises(ValueError, match="weights: must sum to 1"):
        make_target("two_futures", weights=[3.0, 1.0])
    m = MixtureOfProducts.futures(seqs, weights=[0.5, 0.3, 0.2], vocab_size=2)
    assert np.allclose(np.exp(m.log_pi), [0.5, 0.3, 0.2])
    assert np.allclose(make_target("two_futures", weights=[0.75, 0.25]).weights, [0.75, 0.25])


def test_dir_lists_public_names_only():
    names = dir(mfd_theory)
    assert "annotations" not in names and "importlib" not in names
    assert not [n for n in names if n.startswith("_") and not n.startswith("__")]
    assert set(mfd_theory.__all__) <= set(names)
