"""Wall-time estimates of the own-model commands from a latency profile (mfd_theory.speedup.estimates)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from reference import command_time_estimates_slow

from mfd_theory.speedup import default_profile
from mfd_theory.speedup.estimates import command_time_estimates

DOC = Path(__file__).resolve().parent.parent / "docs" / "own-target.md"
METHODS = {"chain": ("chain", 1, 15, 7.87), "ddtree": ("ddtree", 1, 256, 10.73)}


@given(answers=st.integers(1, 30), tokens=st.integers(1, 40), prompts=st.integers(1, 10), n=st.integers(1, 1024),
       tau=st.floats(1.0, 20.0), profile=st.sampled_from(["h100_qwen3-8b", "cpu_small"]))
def test_the_estimate_is_its_token_by_token_twin(answers, tokens, prompts, n, tau, profile):
    prof = default_profile(profile)
    methods = {"tree": ("ddtree", 1, n, tau), "mfd": ("mfd", 4, n, tau)}
    kw = dict(answers=answers, answer_tokens=tokens, eval_prompts=prompts, eval_tokens=tokens, methods=methods)
    fast, slow = command_time_estimates(prof, **kw), command_time_estimates_slow(prof, **kw)
    assert fast["distill_h"] == pytest.approx(slow["distill_h"], rel=1e-9)
    assert fast["eval_h"] == pytest.approx(slow["eval_h"], rel=1e-9)
    assert fast["eval_total_h"] == pytest.approx(sum(slow["eval_h"].values()), rel=1e-9)


def test_the_documented_gpu_table_is_what_the_function_gives():
    est = command_time_estimates(default_profile("h100_qwen3-8b"), answers=8000, answer_tokens=512, eval_prompts=80,
                                 eval_tokens=512, methods=METHODS)
    assert est["assumption"] and "ASSUMED" in est["profile"]
    text = " ".join(DOC.read_text().split())  # the paragraph, its line breaks as spaces
    assert f"an estimated {est['distill_h']:.1f} h to distill 8,000 answers x 512 tokens at batch 1" in text
    assert f"{est['eval_h']['ar']:.2f} h of plain decoding" in text
    assert f"{est['eval_h']['chain']:.2f} h with the chain (N = 15, tau 7.87)" in text
    assert f"{est['eval_h']['ddtree']:.2f} h with DDTree (N = 256, tau 10.73)" in text
    # a faster drafter (higher tau) takes less time, plain decoding does not change
    faster = command_time_estimates(default_profile(), answers=1, answer_tokens=1, eval_prompts=80, eval_tokens=512,
                                    methods={"ddtree": ("ddtree", 1, 256, 12.0)})
    assert faster["eval_h"]["ddtree"] < est["eval_h"]["ddtree"] and faster["eval_h"]["ar"] == est["eval_h"]["ar"]


@pytest.mark.parametrize("kw,match", [
    (dict(answers=0), "answers"),
    (dict(eval_tokens=1.5), "eval_tokens"),
    (dict(methods={}), "methods"),
    (dict(methods={"x": ("ddtree", 1, 16)}), r"methods\['x'\]"),
    (dict(methods={"x": ("beam", 1, 16, 2.0)}), "method must be"),
    (dict(methods={"x": ("ddtree", 1, 0, 2.0)}), "N"),
    (dict(methods={"x": ("ddtree", 1, 16, 0.5)}), "tau"),
])
def test_bad_input_names_the_argument(kw, match):
    args = dict(answers=1, answer_tokens=1, eval_prompts=1, eval_tokens=1, methods=METHODS) | kw
    with pytest.raises(ValueError, match=match):
        command_time_estimates(default_profile(), **args)
    with pytest.raises(ValueError, match="profile"):
        command_time_estimates("h100", **dict(args, methods=METHODS, answers=1, eval_tokens=1))
