"""The pages' intervals and "seeds to decide" (mfd_theory.report.intervals): a stored tau
comparison of width 0 (seeds that agreed exactly) is printed with tau's resolution floor, and the
seeds column states its power."""

from __future__ import annotations

import math

import numpy as np

from mfd_theory.report.intervals import floored, floored_entries, seeds_to_decide, to_decide_note, tokens_of
from mfd_theory.report.real_drafters import _verdicts
from mfd_theory.stats import compare, decide_power, tau_resolution


def _entry(a, b, **extra):
    c = compare(a, b).to_dict()
    return {"question": "same_n", "dataset": "code", "temperature": 1.0, "tau_cmp": c, "speed_cmp": None,
            "tau_runs": [[float(x.mean()), float(y.mean())] for x, y in zip(a, b)],
            "a": dict(method="mfd", drafter="mfd-k2", budget=16, scorer="mixture"),
            "b": dict(method="ddtree", drafter="product", budget=16, scorer=None), **extra}


def test_a_zero_width_stored_interval_is_printed_with_the_resolution_floor():
    tau = np.array([[3.0, 2.5, 3.5, 4.0]] * 3)  # three seeds, identical: the stored interval has width 0
    e = _entry(tau, tau)
    assert e["tau_cmp"]["lo"] == e["tau_cmp"]["hi"] == 0.0
    got = floored(e, 48)["tau_cmp"]
    step = float(tau_resolution(3.25, 48))  # the step of the larger side's tau (the cell's mean over its prompts)
    half = 1.959963984540054 * math.sqrt(step * step / 3 / 4)
    assert abs(math.log1p(got["hi"]) - half) < 1e-12 and abs(math.log1p(got["lo"]) + half) < 1e-12
    assert got["verdict"] == "inconclusive" and got["se_from"] == "resolution"
    assert floored(e, None) is e  # no token count: left as stored
    assert tokens_of({"eval_tokens": 48}) == 48 and tokens_of({"max_new_tokens": 64}) == 64 and tokens_of({}) is None
    text = "\n".join(_verdicts({"verdicts": [e]}, {"eval_tokens": 48}))
    assert "+0.0% [+0.0%, +0.0%]" not in text and "[-" in text
    assert "80% power" in text and "more tokens" in text
    assert floored_entries(None, {}) == []


def test_seeds_to_decide_states_80_percent_power():
    g = np.random.default_rng(0)
    b = np.exp(g.normal(1.0, 0.2, size=(3, 12)))
    a = b * np.exp(np.array([[0.06], [-0.01], [0.02]]) + g.normal(0, 0.01, size=(3, 12)))
    c = compare(a, b).to_dict()
    assert c["verdict"] == "inconclusive"
    r = int(seeds_to_decide(c))
    x = np.log1p(c["run_gains"])
    assert decide_power(x.mean(), x.std(ddof=1), r) >= 0.8 > decide_power(x.mean(), x.std(ddof=1), r - 1)
    assert seeds_to_decide({**c, "verdict": "gain"}) == "3 (run)"
    assert seeds_to_decide(None) == "-"
    assert "probability 80%" in to_decide_note() and "50% power" in to_decide_note()
