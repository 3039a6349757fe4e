"""Progress bars off a terminal, and transformers' own bars and logs on ``--quiet``.

On a terminal a tqdm bar redraws itself in place. Written to a log file or a pipe, every redraw is
kept (a carriage return and a new copy of the bar, several times a second), which over a long run
is megabytes. tqdm takes defaults for every bar from ``TQDM_*`` environment variables, read when
tqdm is first imported, so ``mfd`` sets them at its start, before anything imports tqdm; the bars
(also those of notebook kernels, which inherit the environment) then redraw at most every
``TQDM_MININTERVAL`` seconds.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping, MutableMapping

__all__ = ["LOG_INTERVAL_S", "bar_settings", "close_bars", "quiet_transformers", "use_log_bars"]

#: seconds between redraws of a progress bar whose output is not a terminal
LOG_INTERVAL_S = 30


def bar_settings(on_terminal: bool, environ: Mapping[str, str]) -> dict[str, str]:
    """The ``TQDM_*`` variables to set: none on a terminal; off one, a redraw at most every
    :data:`LOG_INTERVAL_S` seconds (the monitor thread's forced redraw no more often). Variables
    the user has set already are left as they are."""
    if on_terminal:
        return {}
    want = {"TQDM_MININTERVAL": str(LOG_INTERVAL_S), "TQDM_MAXINTERVAL": str(LOG_INTERVAL_S)}
    return {k: v for k, v in want.items() if k not in environ}


def use_log_bars(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Apply :func:`bar_settings` for this process (stdout and stderr both terminals, or not) to
    ``environ`` (default ``os.environ``); returns what it set."""
    environ = os.environ if environ is None else environ
    on_terminal = all(s is not None and s.isatty() for s in (sys.stdout, sys.stderr))
    settings = bar_settings(on_terminal, environ)
    environ.update(settings)
    return settings


def quiet_transformers(environ: MutableMapping[str, str] | None = None) -> None:
    """No loading bars from transformers and the Hugging Face hub, and transformers' log at
    errors only (unless ``TRANSFORMERS_VERBOSITY`` is set already). Both libraries read the
    environment when first imported, so it is set in ``environ`` (default ``os.environ``); one
    already imported is switched through its own functions as well. Imports neither."""
    environ = os.environ if environ is None else environ
    environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    level = environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    hub = sys.modules.get("huggingface_hub")
    if hub is not None:
        hub.utils.disable_progress_bars()
    transformers = sys.modules.get("transformers")
    if transformers is not None:
        log = transformers.utils.logging
        log.set_verbosity(log.log_levels.get(level, log.ERROR))
        log.disable_progress_bar()


def close_bars() -> int:
    """Close every tqdm bar still open, as an interrupted loop leaves it (mid-line, with no line
    break after it), so that the next message starts on a line of its own; returns how many were
    closed. Imports nothing: without tqdm loaded there is no bar."""
    std = sys.modules.get("tqdm.std")
    if std is None:
        return 0
    bars = list(getattr(std.tqdm, "_instances", ()))  # tqdm's own registry of live bars
    for bar in bars:
        bar.close()
    return len(bars)
