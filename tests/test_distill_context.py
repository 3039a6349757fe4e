"""``mfd distill`` checks every prompt against the target's context before writing anything: a
prompt (or a later turn, counted at its worst case) that may not fit is refused naming its data
set, id and turn, and the corrected rerun into the same directory runs."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mfd_theory.cli import main as mfd  # noqa: E402

from pipeline_helpers import save_tiny_target  # noqa: E402

CONTEXT = 256  # save_tiny_target's max_position_embeddings


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return save_tiny_target(tmp_path_factory.mktemp("ctx") / "target")


def _files(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()) if d.exists() else []


@pytest.mark.parametrize("rows,new_tokens,turn", [
    # the first turn fits with room to spare; the second holds the first answer too and does not
    ([{"prompt": "ok", "id": "p0"}, {"turns": ["hi", "and then"], "id": "mt"}], 120, 1),
    # a single prompt whose answer alone runs past the context
    ([{"prompt": "hello there", "id": "long"}], CONTEXT + 8, 0),
])
def test_prompt_past_the_context_is_refused_before_writing_and_the_rerun_runs(target, tmp_path, capsys, rows,
                                                                              new_tokens, turn):
    prompts = tmp_path / "gamma.jsonl"
    prompts.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "data"
    argv = ["distill", "--target", str(target), "--prompts", str(prompts), "--out", str(out), "--quiet"]
    assert mfd([*argv, "--max-new-tokens", str(new_tokens)]) == 2
    err = capsys.readouterr().err
    bad = rows[-1]["id"]
    assert "'gamma'" in err and f"'{bad}'" in err and f"turn {turn}" in err and "--max-new-tokens" in err, err
    assert str(CONTEXT) in err
    assert _files(out) == []  # no train_config.json (nor anything else) to refuse the rerun
    # the corrected command runs in the same directory
    assert mfd([*argv, "--max-new-tokens", "8"]) == 0
    assert (out / "manifest.json").is_file()


def test_worst_case_check_counts_earlier_answers(target):
    from transformers import AutoTokenizer

    from mfd_theory.llm.training.distill import check_context
    from mfd_theory.llm.training.prompts import Prompt, render

    tok = AutoTokenizer.from_pretrained(str(target))
    p = Prompt(dataset="d", id="x", kind="turns", messages=(("user", "hi"),), turns=("more",))
    n0 = len(render(p.messages, tok))
    n1 = len(render([("user", "hi"), ("assistant", ""), ("user", "more")], tok))
    m = 20
    worst = n1 + m + m - 1  # turn 1: its prompt, the first answer at its longest, its own answer (minus one)
    assert worst > n0 + m - 1
    check_context([p], tok, False, m, worst)  # fits exactly
    with pytest.raises(ValueError, match="prompt 'x', turn 1"):
        check_context([p], tok, False, m, worst - 1)
    check_context([p], tok, False, m, None)  # no known limit: nothing to check
