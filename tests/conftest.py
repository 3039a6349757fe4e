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

# the reproducible numerics of the mfd command (pinned before any test imports torch, float32 models),
# so tests that check bits see the same kernels on every host; a test of the fast path asks for it
from mfd_theory.numerics import apply_numerics  # noqa: E402

os.environ["MFD_NUMERICS"] = "reproducible"
os.environ.pop("MFD_CPU_DTYPE", None)
apply_numerics("reproducible")

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


# ---------------------------------------------------------------- work the test session shares
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _torch_threads_as_found():
    """Each test leaves torch's thread count as it found it. A count left at 2 by one test (a run
    function called in-process, a test that sets its own) made every later small-model test of
    that worker 2-3x slower while the other worker shared the two cores (measured on the 2-core
    host, 2026-12-06). The library's runs restore it themselves (configs.options.keeps_torch_threads,
    tested in test_numerics); this covers what a test body sets."""
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    yield
    torch = sys.modules.get("torch")
    if torch is not None and before is not None and torch.get_num_threads() != before:
        torch.set_num_threads(before)


def _session_dir(tmp_path_factory) -> Path:
    """A folder every worker of this test session sees (and no other session): pytest-xdist gives
    each worker its own base temp folder inside the session's one."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def micro_e2e_cache(tmp_path_factory) -> Path:
    """The checkpoint cache of ``mfd e2e --preset micro``, trained once per test session (by
    ``--prepare-only``, one thread, as ``mfd reproduce`` does on two cores) under a file lock, so
    that the first worker to ask trains it and the others wait and reuse it. Tests copy it into
    their own run folder (``shutil.copytree(cache, run_dir / "cache")``) and never write into it; the cache keys decide
    what is reused, as they do for a user's rerun."""
    import fcntl

    from mfd_theory.commands.experiments.e2e import main

    root = _session_dir(tmp_path_factory)
    out = root / "shared-micro-e2e"
    with open(root / "shared-micro-e2e.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "prepared").is_file():
            assert main(["--preset", "micro", "--out", str(out), "--quiet", "--prepare-only", "--threads", "1"]) is None
            # --prepare-only trains (or finds) every checkpoint and evaluates nothing
            assert not (out / "end_to_end.json").exists() and not (out / "predictions.json").exists()
            kinds = {p.name.split("-")[0] for p in (out / "cache").iterdir()}
            assert kinds >= {"target", "draftlm", "distill", "drafter"}, kinds
            (out / "prepared").write_text("done\n")
    return out / "cache"



# ---------------------------------------------------------------- the order files are handed out in
#: the test files that take longest, longest first (seconds on the 2-core machine, 2026-12-06, both
#: workers busy; the files over 8 s). `make test` hands whole files to its two workers in collection
#: order (``--dist loadfile --no-loadscope-reorder``), each worker taking the next file when it is
#: free. By default pytest-xdist hands out the files with the most tests first, which put the long
#: files with few tests (test_real_*, test_notebooks) last, run by one worker while the other stood
#: idle. Longest first, the short files fill the gaps at the end. This orders the files only: every
#: test still runs, in its own file's order; a file not listed runs after these.
LONGEST_FIRST = (
    "test_notebooks.py",  # 80 s
    "test_llm_batch.py",  # 65
    "test_real_targets.py",  # 58
    "test_pipeline.py",  # 47
    "test_llm_decode.py",  # 45
    "test_llm_hybrid.py",  # 38
    "test_e2e.py",  # 34
    "test_real_drafters.py",  # 34
    "test_determinism.py",  # 25
    "test_llm_families.py",  # 19
    "test_generate_batch.py",  # 18
    "test_figures.py",  # 17
    "test_records.py",  # 16 (the full mfd report --check: 11 figures redrawn)
    "test_llm_guards.py",  # 12
    "test_real_prompts.py",  # 9
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order is kept
