"""The package's internal import graph: no cycles anywhere, and ``mfd_theory.llm`` never reaches up.

The graph is read from the source with :mod:`ast` (nothing is imported), counting imports at module
level and inside functions alike, since a function-level import still ties the two modules together.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mfd_theory

PKG = Path(mfd_theory.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules that ``name`` imports (the most specific known module of each import)."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    out: set[str] = set()

    def add(target: str):
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)

    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "mfd_theory" or a.name.startswith("mfd_theory."):
                    add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not (mod == "mfd_theory" or mod.startswith("mfd_theory.")):
                continue
            for a in node.names:  # `from pkg import submodule` imports the submodule
                if f"{mod}.{a.name}" in known:
                    add(f"{mod}.{a.name}")
                else:
                    add(mod)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {name: _imports(name, path, known) for name, path in mods.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_graph_reader_sees_relative_absolute_and_function_level_imports():
    graph = import_graph()
    # sanity: the reader finds edges of each kind, so an empty graph cannot pass the tests below
    assert "mfd_theory.llm.drafter" in graph["mfd_theory.llm"]  # absolute, in a package __init__
    assert "mfd_theory.llm.e2e" in graph["mfd_theory.experiments.e2e"]  # relative, inside a function
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_llm_does_not_import_report_or_experiments():
    bad = [f"{m} imports {d}" for m, deps in import_graph().items() if m.startswith("mfd_theory.llm")
           for d in deps if d == "mfd_theory.report" or d.startswith("mfd_theory.experiments")]
    assert not bad, bad
