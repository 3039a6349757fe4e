"""The documentation (README.md, docs/*.md, experiments/README.md) says only what the code does.

* Python code blocks: a block with ``# prints:`` comments is run and its output compared (the
  README's quickstart; ``test_api.py`` checks its length and runs it too); every other block
  needs models or data that are not here (a local Qwen3-8B, a trained target), so it is compiled
  and its import lines are executed, which checks every name it imports.
* Command lines, in shell blocks and in inline code: ``mfd ...`` (also under torchrun, and
  ``python -m mfd_theory...`` modules) must name a command that exists, and every ``--option`` it
  passes must be one that command's ``--help`` lists; a ``--preset NAME`` must be one of that
  command's files in ``experiments/``, and a ``--config`` file under ``experiments/`` must exist;
  ``python X.py`` must name a script of the repository; ``make X`` must be a target of the
  Makefile.
* Relative links and images point at files of the repository.
* The README's command table names every command in ``COMMANDS`` and ``BENCHES``; no page counts
  the notebooks wrongly.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import re
import shlex
from functools import lru_cache
from pathlib import Path

import pytest

from mfd_theory.cli import BENCHES, COMMANDS, main

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md")) + [ROOT / "experiments" / "README.md"]
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def code_blocks(path: Path) -> list[tuple[str, str]]:
    """(language, body) of every fenced block of a Markdown file."""
    return [(m.group(1), m.group(2)) for m in _BLOCK.finditer(path.read_text(encoding="utf-8"))]


def _ids(paths):
    return [str(p.relative_to(ROOT)) for p in paths]


# ------------------------------------------------------------------------------ Python blocks


def _printed_promises(code: str) -> list[list[str]]:
    return [line.split("# prints:")[1].split("(")[0].split() for line in code.splitlines() if "# prints:" in line]


@pytest.mark.parametrize("path", DOCS, ids=_ids(DOCS))
def test_python_blocks_run_or_at_least_import(path, capsys):
    for lang, code in code_blocks(path):
        if lang != "python":
            continue
        tree = compile(code, f"{path.name} python block", "exec", ast.PyCF_ONLY_AST)
        if "# prints:" in code:
            capsys.readouterr()
            exec(compile(tree, f"{path.name} python block", "exec"), {})
            printed = capsys.readouterr().out.strip().splitlines()
            promised = _printed_promises(code)
            assert len(printed) == len(promised), (path.name, printed)
            for got, want in zip(printed, promised):
                assert [float(x) for x in got.split()] == [float(x) for x in want], (got, want)
        else:  # needs a real model: run what it imports (every imported name must exist)
            imports = ast.Module(body=[n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))],
                                 type_ignores=[])
            assert imports.body, f"{path.name}: a Python block that imports nothing"
            exec(compile(imports, f"{path.name} python block imports", "exec"), {})


# ------------------------------------------------------------------------------ command lines


@lru_cache(maxsize=None)
def _help_of(kind: str, name: str) -> str:
    """The --help text of an mfd command ('mfd', 'distill' / 'bench decode') or a module's main."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        if kind == "mfd":
            assert main(name.split() + ["--help"]) == 0, name
        else:
            try:
                importlib.import_module(name).main(["--help"])
            except SystemExit as exc:
                assert exc.code in (0, None), name
    return out.getvalue()


def _preset_problems(name: str, tokens: list[str], line: str) -> list[str]:
    """A ``--preset`` that names no file of the command's ``experiments/`` folder, or a ``--config``
    under ``experiments/`` that does not exist."""
    from mfd_theory.configs.options import preset_names

    if not any(t in ("--preset", "--config") for t in tokens):
        return []
    module = (BENCHES[name.split()[1]] if name.startswith("bench ") else COMMANDS[name])[0]
    folder = importlib.import_module(module).CLI.folder
    out = []
    for opt_, value in zip(tokens, tokens[1:]):
        if opt_ == "--preset" and value not in preset_names(folder):
            out.append(f"{line}: no preset {value!r} in experiments/{folder}/")
        if opt_ == "--config" and value.startswith("experiments/") and not (ROOT / value).is_file():
            out.append(f"{line}: no file {value}")
    return out


def command_problems(line: str) -> list[str]:
    """What is wrong with one command line of the docs (empty: nothing, or not a command we know)."""
    line = line.split(" #")[0].strip()
    if not line or line.split()[0] not in ("mfd", "make", "torchrun", "python", "python3"):
        return []  # a comment, or not a command line (a file listing, a shell step we do not check)
    try:
        tokens = shlex.split(line)
    except ValueError:
        return [f"unparseable: {line}"]
    if tokens[0] == "torchrun" and "-m" in tokens:
        tokens = tokens[tokens.index("-m") + 1:]
    help_text = None
    if tokens[0] == "make":
        targets = re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M)
        return [f"no make target {t!r}: {line}" for t in tokens[1:2] if t not in targets]
    if tokens[0] == "mfd" or tokens[:2] == ["mfd_theory.cli"] or tokens[0] == "mfd_theory.cli":
        rest = tokens[1:]
        if not rest or rest[0].startswith("-"):
            return []  # `mfd --version` and the like
        if rest[0].startswith("<"):
            return []  # a placeholder: `mfd <command> --help`
        if rest[0] == "bench":
            if len(rest) < 2 or rest[1] not in BENCHES:
                return [f"no benchmark {' '.join(rest[:2])!r}: {line}"]
            name = f"bench {rest[1]}"
        elif rest[0] in COMMANDS:
            name = rest[0]
        else:
            return [f"no command {rest[0]!r}: {line}"]
        help_text = _help_of("mfd", name)
        problems = _preset_problems(name, tokens, line)
        if problems:
            return problems
    elif tokens[0] in ("python", "python3"):
        if len(tokens) > 2 and tokens[1] == "-m" and tokens[2].startswith("mfd_theory"):
            module = tokens[2]
            if module == "mfd_theory.cli":
                return command_problems(" ".join(["mfd"] + tokens[3:]))
        elif len(tokens) > 1 and tokens[1].endswith(".py"):
            return [] if (ROOT / tokens[1]).is_file() else [f"no script {tokens[1]}: {line}"]
        else:
            return []
        try:
            help_text = _help_of("module", module)
        except ModuleNotFoundError:
            return [f"no module {module}: {line}"]
    else:
        return []
    options = {t.split("=")[0] for t in tokens if t.startswith("--")}
    return [f"{line}: {o} is not an option of that command" for o in sorted(options)
            if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", help_text)]


def _command_lines(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    lines = []
    for lang, body in code_blocks(path):
        if lang in ("bash", "sh", "shell", ""):
            lines += re.sub(r"\\\n\s*", " ", body).splitlines()
    prose = _BLOCK.sub("", text)
    lines += [m.group(1) for m in re.finditer(r"`((?:mfd|python|python3|make|torchrun) [^`]+)`", prose)]
    return lines


@pytest.mark.parametrize("path", DOCS, ids=_ids(DOCS))
def test_every_command_line_names_real_commands_and_options(path):
    problems = [p for line in _command_lines(path) for p in command_problems(line)]
    assert problems == []


def test_command_check_catches_what_it_is_for():
    assert command_problems("mfd e2e --preset micro --budgets 16") == []
    assert command_problems("mfd e2e --no-such-flag 3")
    assert command_problems("mfd nonsense --x")
    assert command_problems("mfd bench nonsense")
    assert command_problems("make no-such-target")
    assert command_problems("python experiments/e2e.py --preset micro")  # the scripts became preset files
    assert command_problems("mfd e2e --preset huge")
    assert command_problems("mfd bench decode --preset small --threads 1") == []
    assert command_problems("mfd e2e --config experiments/e2e/no_such.toml")
    assert command_problems("mfd e2e --config experiments/e2e/micro.toml --target-steps 8") == []
    assert command_problems("torchrun --standalone -m mfd_theory.cli eval --no-such 1")
    assert command_problems("python -m mfd_theory.commands.theory.chimera_exact --out mfd_theory/data") == []


# ------------------------------------------------------------------------------ links, lists


@pytest.mark.parametrize("path", DOCS, ids=_ids(DOCS))
def test_relative_links_point_at_files(path):
    text = _BLOCK.sub("", path.read_text(encoding="utf-8"))
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        if not (path.parent / target.split("#")[0]).exists():
            bad.append(target)
    assert bad == []


def _figures_reproduce_draws() -> set[str]:
    """The figure names (stems) ``make reproduce`` draws: the ``--figure`` files of its steps, and
    what the notebooks it runs save (every string constant of their code cells, which is where each
    names the figures it writes)."""
    import json

    from mfd_theory.reproduce import NOTEBOOKS

    from mfd_theory.reproduce import REAL, STEPS

    names = set()
    for _, _, argv in [*STEPS, REAL]:  # a step that draws its own figure (--figure PATH)
        if "--figure" in argv:
            names.add(Path(argv[argv.index("--figure") + 1]).stem)
    for nb in NOTEBOOKS:
        for cell in json.loads((ROOT / nb).read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                tree = ast.parse("".join(cell["source"]))
                names |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return names


def cited_figures_nothing_makes(texts: dict[str, str], tracked: set[str], drawn: set[str]) -> list[str]:
    """Each ``paper_figs/NAME.ext`` a page cites that is neither in git (``tracked``) nor saved by a
    notebook ``make reproduce`` runs (``drawn``: their names without the extension)."""
    bad = []
    for page, text in texts.items():
        for fig in sorted(set(re.findall(r"paper_figs/([A-Za-z0-9_.-]+\.(?:png|pdf|svg))", text))):
            if fig not in tracked and fig.rsplit(".", 1)[0] not in drawn:
                bad.append(f"{page}: paper_figs/{fig}")
    return bad


def test_every_cited_figure_is_committed_or_drawn_by_reproduce():
    import subprocess

    listed = subprocess.run(["git", "ls-files", "paper_figs"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: the tracked figures cannot be listed")
    tracked = {Path(p).name for p in listed.stdout.split()}
    drawn = _figures_reproduce_draws()
    texts = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in DOCS}
    assert cited_figures_nothing_makes(texts, tracked, drawn) == []
    # the check can fail: a figure nobody makes, and a drawn one that is neither tracked nor drawn
    assert cited_figures_nothing_makes({"x.md": "see paper_figs/no_such_figure.png"}, tracked, drawn) == [
        "x.md: paper_figs/no_such_figure.png"]
    assert "e2e_speedup_check" in drawn and "chimera_share_settings.png" in tracked


def heading_anchors(text: str) -> set[str]:
    """The anchors a Markdown page offers: each heading's slug as GitHub makes it (lower case,
    punctuation dropped, spaces to hyphens) and every ``<a id="...">``."""
    text = _BLOCK.sub("", text)
    out = set(re.findall(r'<a (?:id|name)="([^"]+)"', text))
    for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        out.add(re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-"))
    return out


@pytest.mark.parametrize("path", DOCS, ids=_ids(DOCS))
def test_every_anchor_a_page_links_to_exists(path):
    text = _BLOCK.sub("", path.read_text(encoding="utf-8"))
    bad = []
    for target in re.findall(r"\]\(([^)\s]*#[^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target):
            continue
        page, frag = target.split("#", 1)
        dest = path if not page else path.parent / page
        if dest.suffix == ".md" and dest.exists() and frag not in heading_anchors(dest.read_text(encoding="utf-8")):
            bad.append(target)
    assert bad == []


def test_the_front_page_links_long_pages_by_anchor():
    """A reader sent from the front page to a page of over 300 lines lands on the section meant
    (the map of the documentation, which lists the pages themselves, aside)."""
    text = _BLOCK.sub("", (ROOT / "README.md").read_text(encoding="utf-8"))
    text = re.sub(r"^## Map of the documentation\n.*?(?=^## )", "", text, flags=re.S | re.M)
    bare = [t for t in re.findall(r"\]\(([^)\s#]+\.md)\)", text)
            if (ROOT / t).exists() and len((ROOT / t).read_text(encoding="utf-8").splitlines()) > 300]
    assert bare == []
    assert heading_anchors("## `mfd real-drafters`\n## Words (and more)\n") == {"mfd-real-drafters", "words-and-more"}


@pytest.mark.parametrize("path", DOCS, ids=_ids(DOCS))
def test_every_page_links_long_pages_by_anchor(path):
    """Every page, not only the front one, sends a reader to a page of over 300 lines by the
    anchor of the section meant (the README's map of the documentation and code blocks aside; the
    blocks `mfd report` writes are checked too, so a block function that links a bare page fails)."""
    text = _BLOCK.sub("", path.read_text(encoding="utf-8"))
    if path == ROOT / "README.md":
        text = re.sub(r"^## Map of the documentation\n.*?(?=^## )", "", text, flags=re.S | re.M)
    bare = [t for t in re.findall(r"\]\(([^)\s#]+\.md)\)", text)
            if (path.parent / t).exists() and len((path.parent / t).read_text(encoding="utf-8").splitlines()) > 300]
    assert bare == []


def test_readme_lists_every_command():
    text = (ROOT / "README.md").read_text()
    table = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `mfd ([a-z0-9-]+(?: [a-z0-9-]+)?)` \|", table, re.M))
    assert listed == set(COMMANDS) | {f"bench {b}" for b in BENCHES}


def test_notebook_counts_are_right():
    n = len(list((ROOT / "notebooks").glob("*.ipynb")))
    words = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for k, w in words.items():
            if k != n:
                assert not re.search(rf"\b(?:the {w}|{w}|{k}) notebooks\b", text, re.I), (path.name, w)
