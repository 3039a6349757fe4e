"""``mfd own-target``'s prompt files: no held-out prompt repeats a training (distilled) prompt."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")

from mfd_theory.runs.experiments.own_target import write_prompt_files  # noqa: E402


def test_heldout_prompts_skip_the_ones_a_training_document_opens_with(tmp_path):
    corpus = SimpleNamespace(train_docs=["the cat sat on it", "a dog ran far away"],
                             heldout_docs=["the cat sat down now", "one bird sang", "one bird sang again", "two fish"])
    train, held = write_prompt_files(corpus, tmp_path, 2, 2, 3)
    rows = [json.loads(x) for x in held.read_text().splitlines()]
    # "the cat sat" is a training prompt and the second "one bird sang" repeats the first: both skipped
    assert rows == [{"id": 1, "prompt": "one bird sang"}, {"id": 3, "prompt": "two fish"}]
    assert [json.loads(x)["prompt"] for x in train.read_text().splitlines()] == ["the cat sat", "a dog ran"]
    with pytest.raises(ValueError, match="only 2 held-out documents open with words no training prompt"):
        write_prompt_files(corpus, tmp_path, 2, 3, 3)
