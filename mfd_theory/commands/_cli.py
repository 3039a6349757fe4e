"""Experiment configs: frozen dataclasses whose fields declare their help line and allowed values.

Each field is made with :func:`opt`, which stores the help text and the allowed range or choices
in the field's metadata. :func:`check_config` enforces them (every experiment config calls it in
``__post_init__`` through :class:`Checked`, so the library and the command line refuse the same
values), and :func:`parse_config` generates the ``mfd <command>`` parser from the same fields, so
defaults, help and validation are written once.

Command-line rules shared by every ``mfd`` command:

* ``--out DIR``: every file the command writes goes under ``DIR`` (default ``results``); figures
  are written only when a figure path is given. A result file that already exists is replaced
  and the command says so (``wrote PATH (replaced)``); sweep cells already saved under ``DIR``
  are reused (a rerun resumes), and the command says how many.
* ``--quiet``: no progress bars.
* Every option is checked before any work starts; a bad value exits with status 2 and a message
  naming the flag, and nothing is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import typing
from pathlib import Path

from mfd_theory.formatting import help_summary
from mfd_theory.results import wrote
from mfd_theory.validation import check_figure_file, check_out_dir, check_out_file

__all__ = [
    "Checked",
    "add_dataclass_args",
    "check_config",
    "check_out_dir",
    "check_figure_file",
    "check_out_file",
    "config_from_args",
    "flag",
    "opt",
    "parse_config",
    "save_result",
    "show_default",
    "wrote",
]


def opt(default, help: str, *, ge=None, gt=None, le=None, lt=None, choices=None, empty: bool = False):
    """A config field with its help line and allowed values (for tuples: every element).

    ``ge``/``gt``/``le``/``lt`` bound numbers; ``choices`` lists the allowed values; a tuple field
    must be non-empty unless ``empty`` is true. Floats must also be finite.
    """
    meta = dict(help=help, ge=ge, gt=gt, le=le, lt=lt, choices=choices, empty=empty)
    return dataclasses.field(default=default, metadata=meta)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _check_value(name: str, v, meta) -> None:
    where = f"{flag(name)}"
    if isinstance(v, bool):
        return
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"{where}: must be a finite number, got {v}")
    for key, ok, word in (("ge", lambda a, b: a >= b, ">="), ("gt", lambda a, b: a > b, ">"),
                          ("le", lambda a, b: a <= b, "<="), ("lt", lambda a, b: a < b, "<")):
        bound = meta.get(key)
        if bound is not None and isinstance(v, (int, float)) and not ok(v, bound):
            raise ValueError(f"{where}: must be {word} {bound:g}, got {v:g}")
    choices = meta.get("choices")
    if choices is not None and v not in choices:
        raise ValueError(f"{where}: must be one of {', '.join(map(str, choices))}; got {v!r}")


def check_config(cfg) -> None:
    """Raise ValueError naming the flag of the first field outside its declared values."""
    for f in dataclasses.fields(cfg):
        meta = f.metadata
        if "help" not in meta:
            continue
        v = getattr(cfg, f.name)
        if isinstance(v, tuple):
            if not v and not meta.get("empty"):
                raise ValueError(f"{flag(f.name)}: needs at least one value")
            for x in v:
                _check_value(f.name, x, meta)
        else:
            _check_value(f.name, v, meta)


class Checked:
    """Mixin for config dataclasses: per-field checks, then the class's own ``validate()``."""

    def __post_init__(self):
        check_config(self)
        self.validate()

    def validate(self) -> None:
        """Checks across fields (override); raise ValueError naming the flag."""


def _parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _parse_tuple(kind):
    def parse(text: str):
        try:
            return tuple(kind(x) for x in text.replace(" ", "").split(",") if x)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {kind.__name__} values, got {text!r}")

    return parse


def _field_default(f):
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


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


def add_dataclass_args(parser: argparse.ArgumentParser, cls, skip=()) -> None:
    """One option per field: ``--field-name``, typed from the annotation, help from the metadata."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        hint = hints[f.name]
        default = _field_default(f)
        help_ = f.metadata.get("help", "")
        choices = f.metadata.get("choices")
        origin = typing.get_origin(hint)
        if hint is bool:
            parser.add_argument(flag(f.name), type=_parse_bool, default=default, metavar="{true,false}",
                                help=f"{help_} (default: {show_default(default)})")
        elif origin is tuple:
            inner = typing.get_args(hint)[0]
            parser.add_argument(flag(f.name), type=_parse_tuple(inner), nargs="+", default=default,
                                help=f"{help_}; comma- or space-separated (default: {show_default(default)})")
        else:
            kind = hint if hint in (int, float, str) else str
            parser.add_argument(flag(f.name), type=kind, default=default,
                                choices=choices if kind is str and choices else None,
                                help=f"{help_} (default: {show_default(default)})")


def config_from_args(cls, args: argparse.Namespace, **extra):
    """Build ``cls`` from parsed options (ValueError from its checks names the flag)."""
    values = {}
    for f in dataclasses.fields(cls):
        if not hasattr(args, f.name):
            continue
        v = getattr(args, f.name)
        if isinstance(v, list):  # nargs="+" of comma-split tuples -> one flat tuple
            v = tuple(x for part in v for x in part)
        values[f.name] = v
    values.update(extra)
    return cls(**values)


def save_result(result, path: str | os.PathLike) -> Path:
    """Save a Result atomically and say so (and whether an older file was replaced)."""
    path = Path(path)
    existed = path.exists()
    result.save(path)
    wrote(path, existed)
    return path


def make_parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """A command's parser; ``description`` is the module docstring (its first paragraph, in plain
    text, is what ``--help`` shows)."""
    return argparse.ArgumentParser(prog=prog, description=help_summary(description))


def add_common(parser: argparse.ArgumentParser, out_default: str = "results") -> None:
    parser.add_argument("--out", default=out_default, metavar="DIR",
                        help=f"directory that receives every output file (default: {out_default})")
    parser.add_argument("--quiet", action="store_true", help="no progress bars (default: off)")


def finish(parser: argparse.ArgumentParser, cls, args: argparse.Namespace, **extra):
    """Config from parsed args, with every output path checked (``--out``, ``--figure``, and the
    config's ``cache_dir`` as ``--cache-dir``); a bad value is a usage error (exit 2)."""
    try:
        config = config_from_args(cls, args, **extra)
        # every path the command will write, before any work (each error names its flag)
        if hasattr(args, "out"):
            check_out_dir(args.out)
        if getattr(args, "figure", ""):
            check_figure_file(args.figure, "--figure")
        if getattr(config, "cache_dir", ""):
            check_out_dir(config.cache_dir, "--cache-dir")
    except ValueError as exc:
        parser.error(str(exc))
    return config


def parse_config(cls, argv=None, *, prog: str, description: str | None = None, out_default: str = "results"):
    """Parse ``argv`` into ``cls`` plus the shared ``--out`` and ``--quiet`` options, all checked
    (``description``: the module docstring)."""
    parser = make_parser(prog, description)
    add_dataclass_args(parser, cls)
    add_common(parser, out_default)
    args = parser.parse_args(argv)
    return finish(parser, cls, args), args
