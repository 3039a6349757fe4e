"""Result JSON round-trips and ResultStore resume."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mfd_theory.results import Result, ResultStore, atomic_write_text, to_jsonable

json_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=6), json_values, max_size=4),
       st.one_of(st.none(), st.integers(0, 2**31), st.lists(st.integers(0, 2**31), min_size=1, max_size=4)))
def test_result_json_round_trip(tmp_path_factory, data, seed):
    path = tmp_path_factory.mktemp("res") / "r.json"
    r = Result("demo", {"N": 64, "L": 15}, data, seed=seed)
    r.save(path)
    back = Result.load(path)
    assert (back.name, back.config, back.data, back.seed) == ("demo", {"N": 64, "L": 15}, data, seed)
    assert back.provenance["versions"]["numpy"] == np.__version__
    assert {"git_sha", "created", "host"} <= set(back.provenance)


def test_numpy_and_special_floats_are_stored():
    d = to_jsonable({"a": np.arange(3), "b": np.float32(0.5), "c": -np.inf, "d": np.nan, "e": (1, 2)})
    assert d == {"a": [0, 1, 2], "b": 0.5, "c": "-inf", "d": None, "e": [1, 2]}
    json.dumps(d, allow_nan=False)  # strict JSON, no NaN tokens


def _strict_load(path):
    def refuse(token):
        raise ValueError(f"non-standard JSON constant {token}")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_missing_values_are_null_and_columns_stay_numeric(tmp_path):
    rows = [{"budget": 16, "speedup": 1.25}, {"budget": 32, "speedup": float("nan")},
            {"budget": 64, "speedup": np.float64("nan")}]
    Result("rows", {}, {"rows": rows}).save(tmp_path / "r.json")
    raw = _strict_load(tmp_path / "r.json")  # standard JSON: no NaN token, no "nan" string
    assert [r["speedup"] for r in raw["data"]["rows"]] == [1.25, None, None]
    back = Result.load(tmp_path / "r.json")
    col = np.array([r["speedup"] for r in back.data["rows"]], dtype=float)  # what a column reader does
    assert col.dtype == np.float64 and col[0] == 1.25 and np.isnan(col[1:]).all()


def test_no_temporary_files_left(tmp_path):
    Result("x", {}, {"v": 1}).save(tmp_path / "x.json")
    atomic_write_text(tmp_path / "y.txt", "hello")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json", "y.txt"]


def test_store_resumes_without_recomputing(tmp_path):
    calls = []

    def compute(n):
        calls.append(n)
        return Result("cell", {"n": n}, {"value": n * n})

    store = ResultStore(tmp_path / "sweep")
    first = [store.get_or_compute(f"n={n}", lambda n=n: compute(n)).data["value"] for n in range(3)]
    assert calls == [0, 1, 2]
    store2 = ResultStore(tmp_path / "sweep")  # a new process resuming the sweep
    again = [store2.get_or_compute(f"n={n}", lambda n=n: compute(n)).data["value"] for n in range(4)]
    assert calls == [0, 1, 2, 3] and again == first + [9]
    assert store2.keys() == ["n=0", "n=1", "n=2", "n=3"]


def test_store_recomputes_a_corrupt_cell(tmp_path):
    store = ResultStore(tmp_path)
    (tmp_path / "k=1.json").write_text("{not json")
    r = store.get_or_compute("k=1", lambda: Result("c", {}, {"ok": True}))
    assert r.data == {"ok": True} and store.load("k=1").data == {"ok": True}


def test_store_rejects_bad_keys(tmp_path):
    with pytest.raises(ValueError, match="key"):
        ResultStore(tmp_path).path("../escape")


def test_load_missing_or_invalid(tmp_path):
    with pytest.raises(FileNotFoundError, match="path"):
        Result.load(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text('{"name": "x"}')
    with pytest.raises(ValueError, match="path"):
        Result.load(tmp_path / "bad.json")


def _git(repo, *args):
    import subprocess

    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(repo), "PATH": __import__("os").environ["PATH"]})


def test_git_sha_dirty_ignores_exactly_the_files_the_report_writes(tmp_path):
    """A run after `mfd reproduce` rewrote the README, docs/ and the tracked figures is not
    '+dirty'; any other change is."""
    from mfd_theory.report_files import FIGURES, report_files
    from mfd_theory.results import git_sha

    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / FIGURES).mkdir()
    figures = (f"{FIGURES}/chimera_bound.png", f"{FIGURES}/real_ceiling.png")
    for name in report_files() + figures + ("code.py", "docs/design.md"):
        (repo / name).write_text("committed\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "x")
    sha = git_sha(repo)
    assert sha is not None and len(sha) == 40  # clean
    for name in report_files() + figures:  # what mfd report and the runs' figures write: still clean
        (repo / name).write_text("rewritten by mfd report\n")
    assert git_sha(repo) == sha
    (repo / "untracked.txt").write_text("new\n")  # untracked files never count
    assert git_sha(repo) == sha
    for other in ("code.py", "docs/design.md"):  # any other tracked file: dirty
        (repo / other).write_text("edited\n")
        assert git_sha(repo) == sha + "+dirty"
        _git(repo, "checkout", "--", other)
    assert git_sha(repo) == sha
    assert git_sha(tmp_path) is None  # not a repository
