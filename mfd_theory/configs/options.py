"""The command-line framework of every ``mfd`` command: a frozen config dataclass in, a checked run out.

A command is its config dataclass, whose fields are made with :func:`opt` (help line, bounds,
choices), and the function that runs it. :class:`Command` builds the parser from the fields,
resolves the starting values (dataclass defaults, then ``--preset NAME``, then ``--config FILE``,
then the options typed), checks every value and every output path before any work, and calls
the function. The rules every command follows and the preset files are described in
experiments/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import shutil
import sys
import textwrap
import tomllib
import types
import typing
from pathlib import Path

from mfd_theory.formatting import OneLineParser, help_summary
from mfd_theory.progress import quiet_transformers
from mfd_theory.results import wrote
from mfd_theory.validation import check_choice, check_figure_file, check_int, check_out_dir, check_out_file, check_real

__all__ = ["EXPERIMENTS", "Checked", "Command", "Interrupted", "check_config", "figure_option", "file_option", "flag", "keeps_torch_threads", "load_preset",
           "numerics_opt", "opt",
           "preset_names", "preset_values", "read_config", "remove_empty_tree", "save_result", "show_default", "switch", "to_toml", "wrote", "verb_argv"]

#: the repository's preset files, one folder per command module (the package is installed from
#: its checkout, so the folder sits beside ``mfd_theory/``)
EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def opt(default, help: str, *, ge=None, gt=None, le=None, lt=None, choices=None, empty: bool = False,
        required: bool = False, split: bool = True, unset: str = ""):
    """A config field with its help line and allowed values (for tuples: every element).

    ``ge``/``gt``/``le``/``lt`` bound numbers; ``choices`` lists the allowed values; a tuple field
    must be non-empty unless ``empty``. ``required``: the command line (or a config file) must give
    it. ``split``: a tuple option's words are also split at commas (not for file paths, which may
    hold commas; such an option may be repeated). ``unset``: for a None default, what None means,
    shown as the default in ``--help``.
    """
    meta = dict(help=help, ge=ge, gt=gt, le=le, lt=lt, choices=choices, empty=empty, required=required,
                split=split, unset=unset)
    return dataclasses.field(default=default, metadata=meta)


def seed_opt(help: str = "random seed", default: int = 0):
    """The ``seed`` field every command declares: an integer >= 0 (what numpy's generators take),
    default 0; ``help`` says what it seeds."""
    return opt(default, help, ge=0)


def numerics_opt():
    """The ``numerics`` field of every command that runs a model (:mod:`mfd_theory.numerics`)."""
    return opt(None, "CPU numerics: fast (the libraries' own kernels, and bfloat16 where this host computes it "
                     "faster, decided by its flags and a probe) or reproducible (float32 pinned to AVX2: the same bits "
                     "on every host); the choice and the host are recorded in every result",
               choices=("fast", "reproducible"), unset="$MFD_NUMERICS, else reproducible")


def budgets_opt(default: tuple[int, ...], help: str = "tree budgets N"):
    """The ``budgets`` field every command with draft trees declares: tree sizes N (nodes), each an
    integer >= 1, at least one; ``help`` says which trees they size."""
    return opt(tuple(default), help, ge=1)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# ------------------------------------------------------------------------------------ field kinds
@dataclasses.dataclass(frozen=True)
class _Kind:
    base: type  # bool, int, float or str (of each element, for a tuple)
    many: bool  # a tuple field
    optional: bool  # None allowed


_KINDS: dict[type, dict[str, _Kind]] = {}


def _kinds(cls) -> dict[str, _Kind]:
    """{field: kind} from the annotations (``int``, ``tuple[int, ...]``, ``int | None``)."""
    if cls not in _KINDS:
        out = {}
        for name, hint in typing.get_type_hints(cls).items():
            optional = False
            if typing.get_origin(hint) in (typing.Union, types.UnionType):
                args = [a for a in typing.get_args(hint) if a is not type(None)]
                optional, hint = True, args[0]
            many = typing.get_origin(hint) is tuple
            base = typing.get_args(hint)[0] if many else hint
            out[name] = _Kind(base if base in (bool, int, float, str) else str, many, optional)
        _KINDS[cls] = out
    return _KINDS[cls]


def _fields(cls) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def _check_one(name: str, value, meta, base: type):
    """``value`` checked as one element of kind ``base`` within the field's bounds and choices
    (ValueError naming ``name``); returns it, a float field's integer as a float."""
    if base is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{name}: must be true or false, got {value!r}")
    elif base is int:
        low = meta.get("ge") if meta.get("gt") is None else meta["gt"] + 1
        high = meta.get("le") if meta.get("lt") is None else meta["lt"] - 1
        check_int(name, value, low, high)
    elif base is float:
        low_open, high_open = meta.get("gt") is not None, meta.get("lt") is not None
        low = meta["gt"] if low_open else meta.get("ge")
        high = meta["lt"] if high_open else meta.get("le")
        value = check_real(name, value, low, high, low_open=low_open, high_open=high_open)
    elif not isinstance(value, str):
        raise ValueError(f"{name}: must be a string, got {value!r}")
    if meta.get("choices") is not None:
        check_choice(name, value, meta["choices"])
    return value


def _check_field(name: str, value, meta, kind: _Kind):
    """A whole field's value checked (a tuple element by element); returns it normalised."""
    if value is None and kind.optional:
        return None
    if not kind.many:
        return _check_one(name, value, meta, kind.base)
    if not isinstance(value, (tuple, list)):
        raise ValueError(f"{name}: must be a list of values, got {value!r}")
    if not value and not meta.get("empty"):
        raise ValueError(f"{name}: needs at least one value")
    return tuple(_check_one(name, x, meta, kind.base) for x in value)


def check_config(cfg) -> None:
    """Raise ValueError naming the flag of the first field outside its declared values."""
    kinds = _kinds(type(cfg))
    for f in _fields(type(cfg)):
        _check_field(flag(f.name), getattr(cfg, f.name), f.metadata, kinds[f.name])


class Checked:
    """Mixin for config dataclasses: per-field checks, then the class's own ``validate()``."""

    def __post_init__(self):
        check_config(self)
        self.validate()

    def validate(self) -> None:
        """Checks across fields (override); raise ValueError naming the flag."""


# ------------------------------------------------------------------------------------ TOML files
def show_default(value) -> str:
    """A default as ``--help`` prints it: booleans as true / false, tuples comma-separated, the
    empty string as ''."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    if value == "":
        return "''"
    return str(value)


def _toml_scalar(value, base: type) -> str:
    if base is bool:
        return "true" if value else "false"
    if base is float:
        return repr(float(value))  # finite (checked): repr round-trips and is valid TOML
    if base is int:
        return str(int(value))
    return json.dumps(value, ensure_ascii=False)  # JSON's string escapes are TOML's basic-string ones


def _bounds_text(meta) -> str:
    """The allowed values in a few words: ``>= 1``, ``in [0, 1)``, ``one of a, b``."""
    low = (meta["gt"], "(") if meta.get("gt") is not None else (meta.get("ge"), "[")
    high = (meta["lt"], ")") if meta.get("lt") is not None else (meta.get("le"), "]")
    if low[0] is not None and high[0] is not None:
        text = f"in {low[1]}{low[0]:g}, {high[0]:g}{high[1]}"
    elif low[0] is not None:
        text = f"{'>' if low[1] == '(' else '>='} {low[0]:g}"
    elif high[0] is not None:
        text = f"{'<' if high[1] == ')' else '<='} {high[0]:g}"
    else:
        text = ""
    if meta.get("choices") is not None:
        text = "one of " + ", ".join(map(str, meta["choices"]))
    return text


def to_toml(config, title: str) -> str:
    """Every field of ``config`` as TOML, one line each with its help as a comment (a field left
    at None is a commented line saying what None means), under the comment line ``title``."""
    kinds = _kinds(type(config))
    lines = [f"# {title}", ""]
    for f in _fields(type(config)):
        value, kind, meta = getattr(config, f.name), kinds[f.name], f.metadata
        note = meta["help"] + (f" [{_bounds_text(meta)}]" if _bounds_text(meta) else "")
        if value is None:
            lines.append(f"# {f.name} = (unset: {meta.get('unset') or 'none'})  # {note}")
        elif kind.many:
            lines.append(f"{f.name} = [{', '.join(_toml_scalar(x, kind.base) for x in value)}]  # {note}")
        else:
            lines.append(f"{f.name} = {_toml_scalar(value, kind.base)}  # {note}")
    return "\n".join(lines) + "\n"


def read_config(cls, path: str | os.PathLike, source: str) -> dict:
    """The field values a TOML file gives (a field it leaves out keeps its default), each checked;
    ValueError starting with ``source`` (the option that named the file) and naming the key."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{source}: cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{source}: {path} is not a valid TOML file: {exc}") from None
    fields = {f.name: f for f in _fields(cls)}
    kinds = _kinds(cls)
    out = {}
    for key, value in data.items():
        if key not in fields:
            raise ValueError(f"{source}: unknown key {key!r} in {path} (not an option of this command)")
        try:
            out[key] = _check_field(key, value, fields[key].metadata, kinds[key])
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None
    return out


def preset_names(folder: str) -> list[str]:
    """The presets of a command: the stems of ``experiments/<folder>/*.toml`` (none when missing)."""
    d = EXPERIMENTS / folder
    return sorted(p.stem for p in d.glob("*.toml")) if d.is_dir() else []


def preset_values(cls, folder: str, name: str) -> dict:
    """The field values of preset ``name`` (``experiments/<folder>/<name>.toml``)."""
    d = EXPERIMENTS / folder
    if not d.is_dir():
        raise ValueError(f"--preset: no folder {d}: the preset files live in the repository's experiments/ "
                         "folder (give --config FILE instead)")
    if name not in preset_names(folder):
        raise ValueError(f"--preset: no preset {name!r}; choose one of {', '.join(preset_names(folder))} "
                         f"(the files in {d})")
    path = d / f"{name}.toml"
    values = read_config(cls, path, f"--preset {name} ({path})")
    if any(f.name == "preset" for f in _fields(cls)):  # the field that records the preset file is its name
        values["preset"] = name
    return values


def load_preset(cls, folder: str, name: str, **overrides):
    """``cls`` from preset ``name``'s file with ``overrides`` applied."""
    return cls(**{**preset_values(cls, folder, name), **overrides})


# ------------------------------------------------------------------------------------ the command
@dataclasses.dataclass(frozen=True)
class _Extra:
    """A run option that is not part of the config (it is not recorded in the results)."""

    name: str
    help: str
    kind: str  # "switch" (off by default), "figure" (a figure file) or "file" (an output file)

    @property
    def path(self) -> bool:
        return self.kind != "switch"


def switch(name: str, help: str) -> _Extra:
    """An on/off run option (``--prepare-only``), off by default."""
    return _Extra(name, help, "switch")


def figure_option(help: str, name: str = "figure") -> _Extra:
    """An optional figure file to draw (``--figure PATH``): a .png, .pdf or .svg whose folder can be
    written, checked before any work."""
    return _Extra(name, help, "figure")


def file_option(name: str, help: str) -> _Extra:
    """An optional output file (``--out PATH`` of ``mfd report``): not a directory, its folder
    writable, checked before any work."""
    return _Extra(name, help, "file")


def _parse_bool(flag_: str, text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{flag_}: expected true or false, got {text!r}")


def _words(raw, split: bool) -> list[str]:
    words = [raw] if isinstance(raw, str) else list(raw)
    return [x for w in words for x in (w.replace(",", " ").split() if split else [w])]


def _convert(f: dataclasses.Field, kind: _Kind, raw):
    """An option's text (or, for a tuple, its words) as the field's type; ValueError naming the flag."""
    name = flag(f.name)

    def one(text: str):
        if kind.base is bool:
            return _parse_bool(name, text)
        if kind.base is str:
            return text
        try:
            return kind.base(text)
        except ValueError:
            what = "an integer" if kind.base is int else "a number"
            raise ValueError(f"{name}: expected {what}, got {text!r}") from None

    if kind.many:
        return tuple(one(w) for w in _words(raw, f.metadata.get("split", True)))
    return one(raw)


class Command:
    """One ``mfd`` command built from its config dataclass.

    ``name``: the words after ``mfd`` (``"bench decode"``); ``module``: the command module's
    ``__name__`` (its last part names the preset folder ``experiments/<part>/``); ``doc``: the
    module docstring (its first paragraph is what ``--help`` shows). ``out``: the default of
    ``--out`` (None: required; False: the command has no ``--out``) and ``out_help`` its help; a
    config field named ``out`` takes the option's value, one named ``preset`` records the name of
    the preset file the values started from (so ``--show-config``'s key and ``--preset`` agree). ``extras``: run
    options beside the config (:func:`switch`, :func:`figure_option`). ``models``: the command
    loads Hugging Face models, so ``--quiet`` silences transformers too. ``examples``: command lines
    (``mfd X ...  # what it does``) that ``--help`` ends with; by default they are made from the
    required options and the presets (:meth:`example_lines`).
    """

    def __init__(self, name: str, module: str, config: type, doc: str | None, *, out: str | bool | None = "results",
                 out_help: str = "directory that receives every output file", extras: tuple = (),
                 models: bool = False, prog: str | None = None, examples: tuple[str, ...] = ()):
        self.name, self.config, self.doc, self.examples = name, config, doc, tuple(examples)
        if module == "__main__":  # run as ``python -m mfd_theory.commands...``: the module's own name
            module = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None) or module
        self.folder = module.rpartition(".")[2]
        self.prog = prog or f"mfd {name}"
        self.out, self.out_help, self.extras, self.models = out, out_help, tuple(extras), models
        self.fields = {f.name: f for f in _fields(config)}

    # -------------------------------------------------------------------- the parser
    def default_preset(self) -> str:
        f = self.fields.get("preset")
        return f.default if f is not None else "default"

    def example_lines(self) -> list[str]:
        """Command lines for ``--help``'s examples: the given ``examples``, else the required
        options alone, a preset other than the default, and the --show-config / --config round
        trip; each ``command  # what it does``."""
        if self.examples:
            return list(self.examples)
        needed = [f"{flag(n)} {n.upper()}" for n, f in self.fields.items()
                  if f.metadata.get("required") and n not in ("out", "preset")]
        if self.out is None and "out" not in self.fields or ("out" in self.fields and self.fields["out"].default is None):
            needed.append("--out DIR")
        first = " ".join([self.prog, *needed])
        lines = [f"{first}  # " + ("the required options, every other at its default" if needed
                                    else "every option at its default")]
        other = [n for n in preset_names(self.folder) if n != self.default_preset()]
        if other:
            lines.append(f"{first} --preset {other[0]}  # the starting values of experiments/{self.folder}/{other[0]}.toml")
        lines.append(f"{self.prog} --show-config > my.toml  # every option as TOML: edit it, then "
                     f"{self.prog} --config my.toml")
        return lines

    def parser(self) -> argparse.ArgumentParser:
        width = max(shutil.get_terminal_size().columns - 2, 40)  # what argparse wraps the options at
        desc = textwrap.fill(help_summary(self.doc), width, break_on_hyphens=False)
        epilog = "examples:\n" + "\n".join(f"  {ln}" for ln in self.example_lines())
        p = OneLineParser(prog=self.prog, description=desc, epilog=epilog,
                                    formatter_class=argparse.RawDescriptionHelpFormatter,
                                    argument_default=argparse.SUPPRESS)
        kinds = _kinds(self.config)
        for f in self.fields.values():
            if f.name in ("out", "preset"):
                continue
            self._add_field(p, f, kinds[f.name])
        out_default = self.fields["out"].default if "out" in self.fields else self.out
        if out_default is not False:
            shown = "none, required" if out_default is None else out_default
            p.add_argument("--out", metavar="DIR", help=f"{self.out_help} (default: {shown})".replace("%", "%%"))
        p.add_argument("--quiet", action="store_true", help="no progress bars (default: off)")
        for e in self.extras:
            if e.path:
                none = "no figure" if e.kind == "figure" else "none"
                p.add_argument(flag(e.name), metavar="PATH", help=f"{e.help} (default: {none})")
            else:
                p.add_argument(flag(e.name), action="store_true", help=f"{e.help} (default: off)")
        names = preset_names(self.folder)
        where = f"experiments/{self.folder}/NAME.toml"
        p.add_argument("--preset", metavar="NAME",
                       help=f"starting values from the file {where} ({', '.join(names) or 'none found'}); "
                            f"options given explicitly override them (default: {self.default_preset()})")
        p.add_argument("--config", metavar="FILE",
                       help="starting values from a TOML file (the format --show-config prints), applied after "
                            "--preset; options given explicitly override them (default: none)")
        p.add_argument("--show-config", action="store_true",
                       help="print every option's resolved value as TOML, the --config format, and stop (default: off)")
        return p

    @staticmethod
    def _add_field(p: argparse.ArgumentParser, f: dataclasses.Field, kind: _Kind) -> None:
        meta = f.metadata
        choices = meta.get("choices")
        metavar = "{" + ",".join(map(str, choices)) + "}" if choices is not None else None
        if f.default is None:
            shown = meta.get("unset") or "none"
        elif meta.get("required"):
            shown = "none, required"
        else:
            shown = show_default(f.default)
        text = meta["help"]
        if kind.base is bool and not kind.many:
            # a bare --flag means true, as a switch; --flag false also reads
            p.add_argument(flag(f.name), dest=f.name, nargs="?", const="true", metavar="{true,false}",
                           help=f"{text} (default: {shown})".replace("%", "%%"))
            return
        if kind.many:
            how = "comma- or space-separated" if meta.get("split", True) else "space-separated, or the option repeated"
            p.add_argument(flag(f.name), dest=f.name, nargs="+", metavar=metavar or f.name.upper(),
                           action="extend" if not meta.get("split", True) else "store",
                           help=f"{text}; {how} (default: {shown})".replace("%", "%%"))
            return
        p.add_argument(flag(f.name), dest=f.name, metavar=metavar or f.name.upper(),
                       help=f"{text} (default: {shown})".replace("%", "%%"))

    # -------------------------------------------------------------------- resolving the values
    def resolve(self, given: dict, *, check_paths: bool = True):
        """(config, options) from the parsed options: starting values from the dataclass, then
        ``--preset``, then ``--config``, then the options given; every value checked and, with
        ``check_paths``, every output path (ValueError naming the flag)."""
        values: dict = {}
        if "preset" in given:
            values.update(preset_values(self.config, self.folder, given["preset"]))
        if "config" in given:
            values.update(read_config(self.config, given["config"], f"--config {given['config']}"))
        kinds = _kinds(self.config)
        for name, f in self.fields.items():
            if name in given and name != "preset":
                values[name] = _convert(f, kinds[name], given[name])
        if check_paths:
            missing = [flag(n) for n, f in self.fields.items() if f.metadata.get("required") and not values.get(n)]
            if self.out is None and "out" not in self.fields and "out" not in given:
                missing.append("--out")
            if missing:
                raise ValueError(f"the following arguments are required: {', '.join(missing)}")
        config = self.config(**values)
        out = config.out if "out" in self.fields else given.get("out", self.out)
        opts = argparse.Namespace(out=out, quiet=bool(given.get("quiet")), show_config=bool(given.get("show_config")))
        for e in self.extras:
            setattr(opts, e.name, given.get(e.name, "" if e.path else False))
        if check_paths:  # every path the command will write, before any work
            if out not in (False, ""):  # "": an optional --out whose default the command picks
                check_out_dir(out, "--out")
            if getattr(config, "cache_dir", ""):
                check_out_dir(config.cache_dir, "--cache-dir")
            for e in self.extras:
                if e.path and getattr(opts, e.name):
                    check = check_figure_file if e.kind == "figure" else check_out_file
                    check(getattr(opts, e.name), flag(e.name))
        return config, opts

    def parse(self, argv: list[str] | None = None):
        """(config, options) of ``argv``; a bad value is a usage error (exit status 2, one line
        naming the flag, nothing written)."""
        parser = self.parser()
        given = vars(parser.parse_args(sys.argv[1:] if argv is None else argv))
        try:
            return self.resolve(given, check_paths=not given.get("show_config"))
        except ValueError as exc:
            parser.error(str(exc))

    def to_toml(self, config) -> str:
        return to_toml(config, f"{self.prog}: every option, as {self.prog} --config FILE reads it "
                               "(an option given on the command line overrides the file)")

    def main(self, argv, action):
        """Parse and check ``argv``, then ``action(config, options)`` (its result is returned);
        ``--show-config`` prints the config instead and returns None.

        A config field named ``threads`` (> 0) sets torch's CPU threads for the action (restored
        after); one named ``numerics`` puts the action on those numerics (before torch starts, when
        it has not: :func:`mfd_theory.numerics.apply_numerics`; the process's mode is restored after). An action that fails or is interrupted leaves no directory it made and left empty
        (``--out``, ``--cache-dir``): bad input writes nothing, even when a check that needs torch
        or the models comes late. An interruption is raised again as :class:`Interrupted`, whose
        message says what was kept."""
        config, opts = self.parse(argv)
        if opts.show_config:
            sys.stdout.write(self.to_toml(config))
            return None
        if opts.quiet and self.models:
            quiet_transformers()
        out = opts.out if self.out is not False or "out" in self.fields else None
        dirs = [d for d in (out, getattr(config, "cache_dir", "")) if d]
        new = [top for top in map(_first_missing, dirs) if top is not None]
        try:
            with self.flag_errors(), _numerics(getattr(config, "numerics", None)), \
                    _torch_threads(getattr(config, "threads", 0)):
                return action(config, opts)
        except KeyboardInterrupt as exc:
            for top in new:
                remove_empty_tree(top)
            if isinstance(exc, Interrupted):
                raise
            kept = out and Path(out).is_dir() and any(p.is_file() for p in Path(out).rglob("*"))
            raise Interrupted(f"the files written so far are kept in {out}" if kept else "nothing was written") \
                from exc
        except BaseException:
            for top in new:
                remove_empty_tree(top)
            raise

    @contextlib.contextmanager
    def flag_errors(self):
        """A ValueError whose message starts with a field's Python name (``max_new_tokens: ...``,
        the library's style) is raised again naming the flag (``--max-new-tokens: ...``), so every
        refusal names what the user typed; ``out_dir`` (and ``run_dir``, for a command without a
        cache directory) is ``--out``."""
        try:
            yield
        except ValueError as exc:
            head, sep, rest = str(exc).partition(": ")
            names = {**{n: flag(n) for n in self.fields}, "out_dir": "--out"}
            if "cache_dir" not in self.fields and self.out is not False:
                names["run_dir"] = "--out"  # the one run directory such a command writes is --out
            if sep and head in names:
                raise ValueError(f"{names[head]}: {rest}") from exc
            raise


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a command; the message says what it left behind (``mfd`` prints it)."""


def _first_missing(path) -> Path | None:
    """The outermost folder of ``path`` (itself included) that does not exist yet: what a run that
    makes ``path`` creates. None when ``path`` exists."""
    p = Path(path)
    if p.exists():
        return None
    while not p.parent.exists():
        p = p.parent
    return p


def remove_empty_tree(path: Path) -> bool:
    """Remove ``path`` when it is a folder whose tree holds no file (only empty folders); True when
    it was removed. A tree with any file in it is left whole."""
    path = Path(path)
    if not path.is_dir() or any(not p.is_dir() for p in path.rglob("*")):
        return False
    for d in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        d.rmdir()
    path.rmdir()
    return True


@contextlib.contextmanager
def _numerics(mode: str | None):
    """The process on ``mode`` inside the block (None: as it is), its mode variable restored after."""
    from mfd_theory.numerics import MODE_ENV, apply_numerics

    before = os.environ.get(MODE_ENV)
    apply_numerics(mode)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(MODE_ENV, None)
        else:
            os.environ[MODE_ENV] = before


def keeps_torch_threads(fn):
    """``fn`` sets torch's CPU threads for its own work (training on several, decoding on one);
    the caller's count is put back when it returns or raises. A run called as a library function
    (a notebook's ``e2e.run``, a test) would otherwise leave the whole process on the run's last
    count: two threads left behind in a process that shares the machine's cores with others makes
    every later small-model call wait at OpenMP barriers (measured: 2-3x slower decodes)."""

    @functools.wraps(fn)
    def kept(*args, **kwargs):
        import torch

        before = torch.get_num_threads()
        try:
            return fn(*args, **kwargs)
        finally:
            if torch.get_num_threads() != before:
                torch.set_num_threads(before)

    return kept


@contextlib.contextmanager
def _torch_threads(n: int):
    """torch's CPU threads set to ``n`` inside the block and restored after (nothing for n <= 0,
    or without torch); torch is imported only here, when a command that uses it runs."""
    import importlib.util

    if not isinstance(n, int) or n <= 0 or importlib.util.find_spec("torch") is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def save_result(result, path: str | os.PathLike) -> Path:
    """Save a Result atomically and say so (and whether an older file was replaced)."""
    path = Path(path)
    existed = path.exists()
    result.save(path)
    wrote(path, existed)
    return path


def verb_argv(argv: list[str], actions: tuple[str, ...], named: str) -> list[str]:
    """A command's first word as its ``--action`` (one of ``actions``), and the word after ``named``
    (the verb that takes a name: ``mfd target get NAME``, ``mfd drafter pack NAME``) as its
    ``--name``; anything else is returned as given."""
    if argv and argv[0] in actions:
        verb, rest = argv[0], argv[1:]
        head = ["--action", verb]
        if verb == named and rest and not rest[0].startswith("-"):
            head += ["--name", rest[0]]
            rest = rest[1:]
        return head + rest
    return list(argv)
