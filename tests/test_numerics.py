"""Numerics per run: --numerics fast | reproducible, the dtype choice with its probe, and greedy
losslessness in bfloat16 measured by the top-2 logit gap at each first difference."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import mfd_theory.llm.models.dtype as dt
from mfd_theory.numerics import MODE_ENV, PIN_ENV, apply_numerics, current_numerics, numerics_provenance

from llm_helpers import hf_greedy, tiny_qwen3

ROOT = Path(__file__).resolve().parents[1]


def _fresh(code: str, env: dict) -> dict:
    """Run ``code`` (which prints one JSON line) in a fresh interpreter with only ``env`` set of the
    numerics variables."""
    clean = {k: v for k, v in os.environ.items()
             if k not in (*PIN_ENV["avx2"], MODE_ENV, "MFD_NATIVE_NUMERICS", dt.DTYPE_ENV)}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


_SHOW = ("import json, os; from mfd_theory.numerics import apply_numerics; m = apply_numerics({mode!r}); "
         "print(json.dumps({{'mode': m, 'env': {{k: os.environ.get(k) for k in "
         "('ATEN_CPU_CAPABILITY', 'MKL_CBWR', 'ONEDNN_MAX_CPU_ISA', 'MFD_NUMERICS')}}}}))")


@pytest.mark.skipif(not set(PIN_ENV["avx2"]) or sys.platform != "linux", reason="Linux x86-64 pin")
def test_reproducible_pins_fast_unpins_what_it_set_and_keeps_the_users_own():
    from mfd_theory.numerics import cpu_isa_level

    if cpu_isa_level() is None:
        pytest.skip("the pin applies to x86-64 hosts with AVX2")
    rep = _fresh(_SHOW.format(mode="reproducible"), {})
    assert rep["mode"] == "reproducible" and rep["env"]["MKL_CBWR"] == "AVX2,STRICT"
    assert rep["env"]["MFD_NUMERICS"] == "reproducible"
    fast = _fresh(_SHOW.format(mode="fast"), {})
    assert fast["mode"] == "fast" and fast["env"]["MKL_CBWR"] is None and fast["env"]["ATEN_CPU_CAPABILITY"] is None
    # pinned first (as mfd does before reading the command), then switched to fast: the pin it set is gone
    both = _fresh("import json, os; from mfd_theory.numerics import apply_numerics; apply_numerics('reproducible'); "
                  "apply_numerics('fast'); print(json.dumps({'cbwr': os.environ.get('MKL_CBWR')}))", {})
    assert both["cbwr"] is None
    # a variable the user set survives fast numerics
    mine = _fresh(_SHOW.format(mode="fast"), {"MKL_CBWR": "COMPATIBLE"})
    assert mine["env"]["MKL_CBWR"] == "COMPATIBLE"
    # the process's mode comes from $MFD_NUMERICS when no mode is given
    inherit = _fresh(_SHOW.format(mode=None), {"MFD_NUMERICS": "fast"})
    assert inherit["mode"] == "fast" and inherit["env"]["MKL_CBWR"] is None


def test_bad_numerics_is_one_line_naming_it(monkeypatch):
    with pytest.raises(ValueError, match=r"^numerics: must be one of fast, reproducible, got 'quick'$"):
        apply_numerics("quick")
    monkeypatch.setenv(MODE_ENV, "speedy")
    with pytest.raises(ValueError, match=r"^\$MFD_NUMERICS: must be one of"):
        current_numerics()
    out = subprocess.run([sys.executable, "-m", "mfd_theory.cli", "real"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and out.stderr.strip() == ("mfd: error: $MFD_NUMERICS: must be one of fast, "
                                                          "reproducible, got 'speedy'")
    monkeypatch.setenv(MODE_ENV, "reproducible")
    out = subprocess.run([sys.executable, "-m", "mfd_theory.cli", "real", "--numerics", "quick"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--numerics" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_the_dtype_choice_follows_mode_flags_and_probe(monkeypatch):
    monkeypatch.delenv(dt.DTYPE_ENV, raising=False)
    dt._choice.cache_clear()
    assert dt.cpu_dtype_choice("reproducible")["dtype"] == "float32"
    # no bfloat16 instructions: float32 without a probe, and the reason says so
    monkeypatch.setattr(dt, "isa_flags", lambda: ["avx2", "fma"])
    dt._choice.cache_clear()
    c = dt.cpu_dtype_choice("fast")
    assert c["dtype"] == "float32" and c["probe"] is None and "emulated" in c["reason"]
    # bfloat16 instructions: the probe decides, at MIN_GAIN
    monkeypatch.setattr(dt, "isa_flags", lambda: ["avx2", "avx512f", "amx_bf16"])
    for speedup, want in ((2.4, "bfloat16"), (dt.MIN_GAIN, "bfloat16"), (1.1, "float32")):
        monkeypatch.setattr(dt, "probe_bf16", lambda s=speedup: {"float32_ms": s, "bfloat16_ms": 1.0, "bf16_speedup": s})
        dt._choice.cache_clear()
        c = dt.cpu_dtype_choice("fast")
        assert c["dtype"] == want and c["probe"]["bf16_speedup"] == speedup, (speedup, c)
    dt._choice.cache_clear()
    monkeypatch.setenv(dt.DTYPE_ENV, "bfloat16")
    assert dt.cpu_dtype_choice("reproducible")["dtype"] == "bfloat16"
    assert dt.resolve_dtype("auto") == torch.bfloat16 and dt.resolve_dtype("float32") == torch.float32
    monkeypatch.setenv(dt.DTYPE_ENV, "int8")
    with pytest.raises(ValueError, match=r"^\$MFD_CPU_DTYPE: must be float32 or bfloat16"):
        dt.cpu_dtype_choice()
    monkeypatch.delenv(dt.DTYPE_ENV)
    assert dt.resolve_dtype("auto", "cuda:0") == torch.bfloat16
    dt._choice.cache_clear()


def test_the_probe_times_both_dtypes():
    p = dt.probe_bf16(reps=1)
    assert p["float32_ms"] > 0 and p["bfloat16_ms"] > 0
    assert p["bf16_speedup"] == pytest.approx(p["float32_ms"] / p["bfloat16_ms"], rel=1e-2)


def test_every_result_records_mode_isa_and_dtype(monkeypatch):
    monkeypatch.setenv(MODE_ENV, "reproducible")
    dt._choice.cache_clear()
    dt.cpu_dtype_choice()
    prov = numerics_provenance()
    assert prov["mode"] == "reproducible" and isinstance(prov["isa_flags"], list)
    assert prov["cpu_dtype"]["dtype"] == "float32" and "reason" in prov["cpu_dtype"]
    from mfd_theory.results import Result

    assert Result("x", {}, {}).to_dict()["provenance"]["numerics"]["mode"] == "reproducible"


def test_commands_that_run_a_model_take_numerics():
    from mfd_theory.cli import BENCHES, COMMANDS

    models = ["real", "real-drafters", "e2e", "own-target", "natural", "distill", "train-drafter", "eval", "ceiling",
              "check-modes", "reproduce", "tau", "corpus"]
    for name in models:
        assert "numerics" in __import__(COMMANDS[name][0], fromlist=["x"]).CLI.fields, name
    out = subprocess.run([sys.executable, "-m", "mfd_theory.cli", "e2e", "--numerics", "fast", "--show-config"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    assert 'numerics = "fast"' in out.stdout
    for b in ("decode", "draft", "batch"):
        mod = __import__(BENCHES[b][0], fromlist=["x"])
        assert "numerics" in mod.CLI.fields, b


def test_a_command_restores_the_process_mode(monkeypatch):
    from mfd_theory.configs.options import _numerics

    monkeypatch.setenv(MODE_ENV, "reproducible")
    with _numerics("fast"):
        assert current_numerics() == "fast"
        with _numerics(None):  # a step run inside it inherits the mode
            assert current_numerics() == "fast"
        assert current_numerics() == "fast"
    assert current_numerics() == "reproducible"


def test_a_run_called_as_a_function_gives_back_the_callers_threads():
    """keeps_torch_threads: a run that sets torch's threads (and returns, or raises) leaves the
    caller's count; undecorated, the same function leaves its own (so the check can fail)."""
    from mfd_theory.configs.options import keeps_torch_threads

    def work(fail: bool):
        torch.set_num_threads(3)
        if fail:
            raise RuntimeError("stopped")
        return "done"

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert keeps_torch_threads(work)(False) == "done" and torch.get_num_threads() == 1
        with pytest.raises(RuntimeError, match="stopped"):
            keeps_torch_threads(work)(True)
        assert torch.get_num_threads() == 1
        assert work(False) == "done" and torch.get_num_threads() == 3  # what the decorator prevents
    finally:
        torch.set_num_threads(before)


# --------------------------------------------------------------- lossless in a lower precision
def test_logit_ulp():
    from mfd_theory.llm.measure.lossless import logit_ulp

    assert logit_ulp(20.0, torch.bfloat16) == 0.125
    assert logit_ulp(-20.0, torch.bfloat16) == 0.125
    assert logit_ulp(1.5, torch.bfloat16) == 2 ** -7
    assert logit_ulp(20.0, torch.float32) == 2.0 ** -19


def test_first_difference_reports_the_gap_a_plain_forward_gives():
    from mfd_theory.llm.measure.lossless import first_difference, logit_ulp

    model = tiny_qwen3(seed=3)
    prompt = [1, 2, 3, 4]
    want = hf_greedy(model, prompt, 8)
    got = list(want)
    got[5] = (got[5] + 1) % 64
    d = first_difference(model, prompt, want, got)
    # the slow twin: a forward over the prompt and the first five tokens, its top two logits
    with torch.no_grad():
        z = model(input_ids=torch.tensor([prompt + want[:5]])).logits[0, -1]
    a, b = sorted(z.tolist(), reverse=True)[:2]
    assert d["index"] == 5 and d["want"] == want[5] and d["got"] == got[5] and d["top2"][0] == want[5]
    assert d["gap"] == pytest.approx(a - b, abs=1e-5)
    assert d["got_below_top"] == pytest.approx(a - float(z[got[5]]), abs=1e-5) and d["got_below_top"] >= d["gap"] - 1e-6
    assert d["ulp"] == logit_ulp(a, torch.float32) and not d["near_tie"]
    assert first_difference(model, prompt, want, want) is None
    assert first_difference(model, prompt, want, want[:3]) is None  # a prefix: no token flipped


def test_greedy_equality_in_bfloat16_passes_near_ties_and_fails_a_flip(monkeypatch):
    """The check can fail: a decode whose token is changed where the target is not near a tie is
    a bug; a flip at a gap of one unit in the last place is numerics."""
    import mfd_theory.llm.measure.lossless as ll

    model = tiny_qwen3(seed=1).to(torch.bfloat16)
    rec = ll.greedy_equality(model, [[1, 2, 3], [4, 5]], new_tokens=6, budget=8, block=4, progress=False,
                             random_tokens=3)
    assert rec["dtype"] == "bfloat16" and rec["bugs"] == 0 and rec["ok"]
    assert set(rec["by_method"]) >= {"ar", "chain", "ddtree", "mfd", "dartree", "ddtree (batched)"}
    for m in rec["by_method"].values():
        assert m["differ"] == m["near_ties"] + m["bugs"] and 0 <= m["share_affected"] <= 1
    want = hf_greedy(model, [1, 2, 3], 6)
    with torch.no_grad():  # the target's least likely token at the third position: far from any tie
        z = model(input_ids=torch.tensor([[1, 2, 3] + want[:2]])).logits[0, -1].float()
    wrong = list(want)
    wrong[2] = int(z.argmin())
    row = ll._compare(model, [1, 2, 3], want, wrong)
    d = row["first_difference"]
    assert row["bug"] and not row["near_tie"] and not row["equal"] and d["got_below_top"] > 2 * d["ulp"]
    # the same flip judged with a tolerance wide enough to hold it is a near-tie
    monkeypatch.setattr(ll, "NEAR_TIE_ULPS", d["got_below_top"] / d["ulp"] + 1)
    row2 = ll._compare(model, [1, 2, 3], want, wrong)
    assert row2["near_tie"] and not row2["bug"]
    # a decode that stops early is a bug whatever the dtype
    assert ll._compare(model, [1, 2, 3], want, want[:4])["bug"]


# matrix products large enough for oneMKL's own kernels, backward passes and an optimizer: what
# training a drafter runs, without importing transformers (a fresh interpreter each time)
_TRAIN = ("import hashlib, json, torch; torch.set_num_threads(1); torch.manual_seed(0)\n"
          "m = torch.nn.Sequential(torch.nn.Linear(384, 768), torch.nn.GELU(), torch.nn.Linear(768, 384))\n"
          "opt = torch.optim.AdamW(m.parameters(), lr=1e-3)\n"
          "for _ in range(6):\n"
          "    x = torch.randn(96, 384); loss = (m(x) - x).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()\n"
          "h = hashlib.sha256(b''.join(p.detach().numpy().tobytes() for p in m.parameters())).hexdigest()\n"
          "print(json.dumps({'sha': h, 'cap': torch.backends.cpu.get_cpu_capability()}))")


def test_fast_numerics_repeat_on_the_same_host():
    """Fast numerics promise the same bits for the same seed, threads and host: two fresh processes
    (the libraries' own dispatch, nothing pinned) train a small model to the same bytes."""
    a = _fresh(_TRAIN, {"MFD_NUMERICS": "fast"})
    b = _fresh(_TRAIN, {"MFD_NUMERICS": "fast"})
    assert a == b
    # the check can fail: other numerics (torch's kernels without vectorisation) give other bits
    c = _fresh(_TRAIN, {"MFD_NUMERICS": "fast", "ATEN_CPU_CAPABILITY": "default"})
    assert c["cap"] == "DEFAULT" and c["sha"] != a["sha"]
