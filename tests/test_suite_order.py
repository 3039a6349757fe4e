"""The order `make test` hands its files to the workers (conftest.LONGEST_FIRST) stays in force:
every file it names exists, and the test command keeps the order it is given."""

from pathlib import Path

from conftest import LONGEST_FIRST

TESTS = Path(__file__).resolve().parent


def test_every_file_named_longest_first_exists():
    missing = [name for name in LONGEST_FIRST if not (TESTS / name).is_file()]
    assert missing == [] and len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


def test_make_test_hands_out_files_in_collection_order():
    """Without ``--no-loadscope-reorder`` pytest-xdist sorts the files by their number of tests
    and the order above is lost; without ``--dist loadfile`` a file's module fixtures are built on
    both workers."""
    line = next(ln for ln in (TESTS.parent / "Makefile").read_text().splitlines() if "-m pytest" in ln)
    assert "--dist loadfile" in line and "--no-loadscope-reorder" in line and "-n 2" in line
