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
            parser.add_argument(flag, type=_parse_tuple(inner), default=default,
                                help=f"comma-separated (default: {','.join(map(str, default))})")
        else:
            kind = hint if hint in (int, float, str) else str
            parser.add_argument(flag, type=kind, default=default, help=f"(default: {default})")


def config_from_args(cls, args: argparse.Namespace):
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})
