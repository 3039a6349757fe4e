"""The repository stands alone: nothing sends a reader to notes that live outside it."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the two notes that sit beside the repository (spelled in pieces so this file does not name them)
OUTSIDE_NOTES = tuple(stem + ".md" for stem in ("DESIGN", "ANCHORS"))


def test_no_reference_to_notes_outside_the_repository():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    hits = []
    for name in files:
        path = ROOT / name
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        hits += [f"{name}: {note}" for note in OUTSIDE_NOTES if note in text]
    assert hits == []


def test_background_doc_exists_with_what_a_reader_needs():
    text = (ROOT / "docs" / "background.md").read_text()
    for needed in ("## Notation", "lossless", "DDTree", "DFlash", "Reference figures", "arXiv"):
        assert needed in text
