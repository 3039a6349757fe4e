"""Test-suite settings shared by every test module.

Hypothesis profiles: "mfd" (default) has no deadline, because the first call of a numba kernel
compiles it and takes seconds, and a modest example count so the whole suite stays fast on two
cores, with the examples fixed (derandomized); "mfd-thorough" runs many more random examples
(HYPOTHESIS_PROFILE=mfd-thorough).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")  # no display in tests; the library leaves the backend alone

_ROOT = Path(__file__).resolve().parent.parent
if importlib.util.find_spec("mfd_theory") is None:
    sys.path.insert(0, str(_ROOT))  # run from a checkout that was not pip-installed

# the same CPU kernel dispatch as the mfd command (pinned before any test imports torch), so tests see
# the numerics the package's runs use
from mfd_theory.numerics import pin_cpu_numerics  # noqa: E402

pin_cpu_numerics()

_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
# derandomize: the default run draws the same examples every time, so the statistical checks
# (Monte Carlo within 4 standard errors) cannot flake in CI; the thorough profile stays random.
settings.register_profile(
    "mfd", deadline=None, max_examples=30, suppress_health_check=_SUPPRESS, print_blob=True,
    derandomize=True, database=None,
)
settings.register_profile(
    "mfd-thorough", deadline=None, max_examples=500, suppress_health_check=_SUPPRESS
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "mfd"))
