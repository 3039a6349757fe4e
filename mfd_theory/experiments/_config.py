"""Generate an argparse CLI from a frozen dataclass config (defaults are defined once)."""

from __future__ import annotations

import argparse
import dataclasses
import typing


def _parse_tuple(kind):
    def parse(text: str):
        return tuple(kind(x) for x in text.replace(" ", "").split(",") if x)

    return parse


def add_dataclass_args(parser: argparse.ArgumentParser, cls) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        flag = "--" + f.name.replace("_", "-")
        origin = typing.get_origin(hint)
        if hint is bool:
            parser.add_argument(flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=default,
                                help=f"(default: {default})")
        elif origin is tuple:
            inner = typing.get_args(hint)[0]
            parser.add_argument(flag, type=_parse_tuple(inner), nargs="+", default=default,
                                help=f"values, space- or comma-separated (default: {','.join(map(str, default))})")
        else:
            kind = hint if hint in (int, float, str) else str
            parser.add_argument(flag, type=kind, default=default, help=f"(default: {default})")


def config_from_args(cls, args: argparse.Namespace):
    values = {}
    for f in dataclasses.fields(cls):
        v = getattr(args, f.name)
        if isinstance(v, list):  # nargs="+" of comma-split tuples -> one flat tuple
            v = tuple(x for part in v for x in part)
        values[f.name] = v
    return cls(**values)


def parse_config(cls, argv=None, *, description: str | None = None, out_default: str = "results"):
    """Parse ``argv`` into ``cls`` plus the shared ``--out-dir`` and ``--quiet`` options."""
    parser = argparse.ArgumentParser(description=description)
    add_dataclass_args(parser, cls)
    parser.add_argument("--out-dir", default=out_default)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    return config_from_args(cls, args), args
