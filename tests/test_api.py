"""The package's public surface: import graph, top-level exports, the README quickstart."""

from __future__ import annotations

import ast
from pathlib import Path

import mfd_theory

PKG = Path(mfd_theory.__file__).resolve().parent


def _core_import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere (top level or inside a function)."""
    graph: dict[str, set[str]] = {}
    for path in PKG.glob("*.py"):
        mod = path.stem
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1 and node.module:  # from .x import y
                    deps.add(node.module.split(".")[0])
                elif node.level == 1:  # from . import x
                    deps.update(a.name for a in node.names)
                elif node.module and node.module.startswith("mfd_theory."):
                    deps.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                deps.update(a.name.split(".")[1] for a in node.names if a.name.startswith("mfd_theory."))
        graph[mod] = {d for d in deps if (PKG / f"{d}.py").is_file() and d != mod}
    return graph


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
