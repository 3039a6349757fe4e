"""The package's layering, read from the source with :mod:`ast` (nothing is imported).

Floors, lowest first: the theory core, ``figures``, ``llm.models``, ``llm.decoding``,
``llm.training``, ``llm.measure``, ``report``, ``configs``, ``runs``, ``commands``, and on top the
entry points that name commands: ``cli`` (one command by name) and ``reproduce`` (a list of them).
A module imports only from its own floor or below; a private name (one leading underscore) or a private module or folder is imported only
inside the folder that holds it (the core's public wrappers and their ``_kernels`` are one folder's
two halves); and there is no import cycle. Imports inside functions, and modules named whole in a string (imported by
``importlib``), count like any other: they tie the two modules together just the same.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mfd_theory

PKG = Path(mfd_theory.__file__).resolve().parent

#: floors, lowest first: (name, module-name prefixes on that floor)
FLOORS = [
    ("core", ()),  # every module not named on a floor below
    ("figures", ("mfd_theory.figures",)),
    ("llm.models", ("mfd_theory.llm.models",)),
    ("llm.decoding", ("mfd_theory.llm.decoding",)),
    ("llm.training", ("mfd_theory.llm.training",)),
    ("llm.measure", ("mfd_theory.llm.measure", "mfd_theory.llm")),
    ("report", ("mfd_theory.report",)),  # the result blocks: text from results files, no torch
    ("configs", ("mfd_theory.configs",)),  # the option framework and the configs a driver builds
    ("runs", ("mfd_theory.runs",)),  # the work behind the commands: drivers, caches, torch halves
    ("commands", ("mfd_theory.commands",)),
    ("cli", ("mfd_theory.cli", "mfd_theory.reproduce")),  # the entry points that run commands by name
]


def floor(module: str) -> int:
    best, level = -1, 0
    for i, (_, prefixes) in enumerate(FLOORS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, level = len(p), i
    return level


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _edges(name: str, path: Path, known: set[str]):
    """(imported module, imported name or None) for every package import in ``name``."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]

    def most_specific(target: str) -> str:
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target

    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        # a module named whole in a string (``importlib.import_module("mfd_theory.x")``, the
        # command table of cli.py, reproduce's steps) is an import made by string: it ties the two
        # modules together like any other (a module naming itself or its own package, as a
        # command's name for ``python -m``, imports nothing)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known \
                and not (name == node.value or name.startswith(node.value + ".")):
            yield node.value, None
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "mfd_theory" or a.name.startswith("mfd_theory."):
                    yield most_specific(a.name), None
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
                    yield f"{mod}.{a.name}", None
                else:
                    yield most_specific(mod), a.name


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {name: {m for m, _ in _edges(name, path, known) if m and m != name} for name, path in mods.items()}


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


def _folder(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def private_owner(module: str, name: str | None, packages: set[str]) -> str | None:
    """The folder whose modules alone may import ``module`` (and ``name`` from it), or None when
    both are public. The highest private part of the module's path decides: ``a._b.c`` belongs to
    folder ``a``; else a private ``name`` belongs to the module's own folder."""
    parts = module.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    if name is not None and name.startswith("_") and not name.startswith("__"):
        return _folder(module, module in packages)
    return None


def private_imports() -> list[str]:
    mods = _modules()
    known = set(mods)
    packages = {m for m, p in mods.items() if p.name == "__init__.py"}
    bad = []
    for name, path in mods.items():
        here = _folder(name, name in packages)
        for mod, imported in _edges(name, path, known):
            owner = private_owner(mod, imported, packages)
            # inside: the owner folder itself, or a folder below it on the same floor (a floor of
            # its own, such as commands/ under mfd_theory/, is another room)
            if owner is None:
                continue
            inside = here == owner or (here.startswith(owner + ".") and floor(here) == floor(owner))
            if not inside:
                bad.append(f"{name} imports {mod}" + (f".{imported}" if imported else ""))
    return sorted(set(bad))


def upward_imports() -> list[str]:
    return sorted(f"{m} ({FLOORS[floor(m)][0]}) imports {d} ({FLOORS[floor(d)][0]})"
                  for m, deps in import_graph().items() for d in deps if floor(d) > floor(m))


def test_graph_reader_sees_absolute_relative_and_function_level_imports():
    graph = import_graph()
    assert "mfd_theory.commands.theory.core_table" in graph["mfd_theory.cli"]  # by string, in the command table
    # sanity: the reader finds edges of each kind, so an empty graph cannot pass the tests below
    assert "mfd_theory.llm.models" in graph["mfd_theory.llm"]  # absolute, in a package __init__
    assert "mfd_theory.runs.experiments.e2e" in graph["mfd_theory.commands.experiments.e2e"]  # inside a function
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_floors_are_read_as_intended():
    assert [floor(m) for m in ("mfd_theory.trees", "mfd_theory.figures.e2e", "mfd_theory.llm.models.target",
                               "mfd_theory.llm.decoding.batch", "mfd_theory.llm.training.train",
                               "mfd_theory.llm.measure.predict", "mfd_theory.report.e2e",
                               "mfd_theory.configs.e2e", "mfd_theory.runs.experiments.e2e",
                               "mfd_theory.commands.experiments.e2e", "mfd_theory.cli")] \
        == list(range(11))
    assert floor("mfd_theory.reproduce") == floor("mfd_theory.cli")
    assert floor("mfd_theory.report_files") == floor("mfd_theory")  # a core module, not the report floor
    pk = {"mfd_theory", "mfd_theory.llm", "mfd_theory.llm.models"}
    assert private_owner("mfd_theory._kernels.trees", "_product_tree", pk) == "mfd_theory"
    assert private_owner("mfd_theory.llm.models.drafter", "_draft_value", pk) == "mfd_theory.llm.models"
    assert private_owner("mfd_theory.commands._x", "opt", pk) == "mfd_theory.commands"
    assert private_owner("mfd_theory.llm.models.drafter", "load_drafter", pk) is None
    assert floor("mfd_theory.chimeras.bound") == floor("mfd_theory") != floor("mfd_theory.commands.x")


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def subpackage_graph(graph: dict[str, set[str]], packages: set[str]) -> dict[str, set[str]]:
    """The import graph between the subpackages (the folders under ``mfd_theory``): each module
    stands for the folder it lies in (a package's ``__init__`` for its own folder), and an edge joins
    two folders when a module of one imports a module of the other. A folder's own modules and its
    subfolders' are kept apart. The package's own folder (the core modules and ``cli.py``, the entry
    point that names every command) is no subpackage and is left out."""
    def folder(m: str) -> str:
        return _folder(m, m in packages)

    out: dict[str, set[str]] = {}
    for m, deps in graph.items():
        for d in deps:
            a, b = folder(m), folder(d)
            if a != b and "." in a and "." in b:
                out.setdefault(a, set()).add(b)
    return out


def test_no_cycles_among_subpackages():
    """No two folders import each other, even through others (issue: ``commands`` held the
    reproduce driver, which imports the experiments commands, which import the framework
    ``commands._cli``: the folder ``commands`` and ``commands.experiments`` formed a cycle)."""
    packages = {_module_name(p) for p in PKG.rglob("__init__.py")}
    cycle = find_cycle(subpackage_graph(import_graph(), packages))
    assert cycle is None, "folders import each other: " + " -> ".join(cycle)
    # the check can fail: the old layout, reproduce's code in the folder commands
    old = {"mfd_theory.commands.reproduce": {"mfd_theory.commands.experiments.e2e", "mfd_theory.commands._cli"},
           "mfd_theory.commands.experiments.e2e": {"mfd_theory.commands._cli"}}
    assert find_cycle(subpackage_graph(old, {"mfd_theory.commands", "mfd_theory.commands.experiments"})) is not None


def test_no_module_imports_from_a_higher_floor():
    bad = upward_imports()
    assert not bad, "\n".join(bad)


def test_no_private_name_is_imported_outside_its_folder():
    bad = private_imports()
    assert not bad, "\n".join(bad)


def test_no_package_code_reads_a_file_of_the_test_suite():
    """An installed wheel has no tests/: a module that finds a test file by path (a string naming
    ``tests`` in a path expression, or a test module loaded by name) fails outside a checkout."""
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                parts = [n for n in (node.left, node.right) if isinstance(n, ast.Constant)]
                if any(str(n.value).strip("/").split("/")[0] == "tests" for n in parts):
                    bad.append(f"{path.relative_to(PKG)}:{node.lineno}")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("tests/") \
                    and node.value.endswith(".py") and "\n" not in node.value:
                bad.append(f"{path.relative_to(PKG)}:{node.lineno}")
    assert bad == [], f"package code that reads the test suite: {bad}"


def _command(module: str) -> str | None:
    """The command a module of ``mfd_theory.commands`` belongs to (``X`` for ``X.py``; its torch half
    is ``mfd_theory.runs``'s, a library floor), or None for the shared CLI helpers and the
    subpackages themselves."""
    if not module.startswith("mfd_theory.commands."):
        return None
    rest = module[len("mfd_theory.commands."):]
    if rest.split(".")[-1].startswith("_") or "." not in rest and rest in (
            "report", "bench", "theory", "pipeline", "experiments"):
        return None
    return rest


def _command_deps(graph: dict, m: str) -> set[str]:
    """The modules ``m`` imports, with a command subpackage (its ``__init__``) standing for the
    commands it imports itself: importing ``commands.pipeline.mains`` ties a command to distill,
    train-drafter and eval as much as importing them by name."""
    out = set()
    for d in graph.get(m, ()):
        if d.startswith("mfd_theory.commands.") and _command(d) is None and not d.rpartition(".")[2].startswith("_"):
            out |= {x for x in graph.get(d, ()) if _command(x)}
        out.add(d)
    return out


def command_imports(graph: dict) -> set[tuple[str, str]]:
    """(command, command it imports) for every command module, by name, by string or through a
    command subpackage's ``__init__``."""
    strip = len("mfd_theory.commands.")
    return {(m[strip:], d[strip:]) for m in graph if _command(m)
            for d in _command_deps(graph, m) if _command(d) and _command(d) != _command(m)}


def test_no_command_imports_another_command():
    """A command that needs another's config or entry point takes it from a library floor
    (68 such imports before the report blocks became a floor, 20 before the commands' work moved
    to ``runs``, 24 before the configs that drivers build moved to ``configs`` and ``mfd reproduce``
    to the entry-point floor beside ``cli``)."""
    graph = import_graph()
    assert command_imports(graph) == set(), "a command imports another: move the shared code to a library floor"
    # the check can fail: the old layout, own-target taking e2e's presets from the e2e command and
    # the three steps' entry points through ``commands.pipeline``
    old = {"mfd_theory.commands.experiments.own_target": {"mfd_theory.commands.experiments.e2e",
                                                          "mfd_theory.commands.pipeline"},
           "mfd_theory.commands.pipeline": {"mfd_theory.commands.pipeline.distill"}}
    assert command_imports(old) == {("experiments.own_target", "experiments.e2e"),
                                    ("experiments.own_target", "pipeline.distill")}
    # reproduce runs every step by string from the top floor: the reader sees those imports
    assert {"mfd_theory.commands.experiments.e2e", "mfd_theory.commands.report"} <= graph["mfd_theory.reproduce"]
    assert _command("mfd_theory.commands.report.command") == "report.command"
    assert _command("mfd_theory.runs.pipeline.eval") is None  # a library floor, not a command
    assert _command("mfd_theory.configs.options") is None and _command("mfd_theory.report.e2e") is None
