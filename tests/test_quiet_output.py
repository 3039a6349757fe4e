"""`mfd reproduce`'s output: progress bars off a terminal, the notebook kernel's start-up warning,
transformers' deprecation notices from inside HF assisted decoding."""

from __future__ import annotations

import logging

import nbformat
import pytest

from mfd_theory.progress import LOG_INTERVAL_S, bar_settings, use_log_bars


def test_bars_redraw_rarely_off_a_terminal_and_as_usual_on_one():
    assert bar_settings(True, {}) == {}
    off = bar_settings(False, {})
    assert float(off["TQDM_MININTERVAL"]) == LOG_INTERVAL_S >= 10
    assert float(off["TQDM_MAXINTERVAL"]) >= float(off["TQDM_MININTERVAL"])
    # a user's own setting wins
    assert "TQDM_MININTERVAL" not in bar_settings(False, {"TQDM_MININTERVAL": "1"})


def test_use_log_bars_fills_the_given_environment_off_a_terminal():
    env: dict[str, str] = {}
    set_ = use_log_bars(env)  # pytest captures stdout: not a terminal
    assert set_ and env == set_


def test_mfd_run_into_a_pipe_gives_bars_the_long_interval():
    # tqdm reads TQDM_* when first imported: mfd must set them before anything imports tqdm
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if not k.startswith("TQDM_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent),
                                                      env.get("PYTHONPATH")]))
    code = ("from mfd_theory.cli import main; main(['--help']); from tqdm import tqdm; "
            "b = tqdm(total=1, disable=False); print('INTERVAL', b.mininterval); b.close()")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"INTERVAL {float(LOG_INTERVAL_S)}" in out.stdout, out.stdout[-500:]


def test_training_bar_into_a_pipe_redraws_rarely(tmp_path):
    """The training loop's loss display must not force a redraw per step (tqdm's set_postfix
    redraws by default, whatever the interval): 40 steps into a pipe give a handful of redraws."""
    pytest.importorskip("torch")
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if not k.startswith("TQDM_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent),
                                                      env.get("PYTHONPATH")]))
    code = ("from mfd_theory.cli import main; main(['--help'])\n"
            "import torch\nfrom mfd_theory.llm.training.train import run_training\n"
            "m = torch.nn.Linear(2, 1)\nx = torch.ones(4, 2)\n"
            "run_training(%r, m, lambda step: (m(x).pow(2).mean(), {}), steps=40, lr=1e-2, warmup=0, "
            "ckpt_every=100, config={'t': 1}, progress=True)\n" % str(tmp_path / "run"))
    # bytes: text mode would turn every carriage return into a newline
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    redraws = out.stderr.count(b"\r")
    assert 1 <= redraws <= 4, out.stderr[-2000:]


def test_notebook_kernel_start_up_warning_is_not_printed(tmp_path, capfd):
    pytest.importorskip("nbclient")
    from mfd_theory.reproduce import run_notebook

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(6 * 7)")]
    path = tmp_path / "t.ipynb"
    nbformat.write(nb, path)
    out = run_notebook(path)
    assert out.cells[0].outputs[0]["text"].strip() == "42"
    err = capfd.readouterr().err
    assert "Kernel is running over TCP" not in err and "IPKernelApp" not in err, err


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_assisted_baseline_drops_transformers_known_deprecation_only():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import numpy as np
    from transformers.utils import logging as hf_logging

    from llm_helpers import tiny_qwen3
    from mfd_theory.llm.measure.assisted import _generation_config, _quiet_known_deprecations, hf_assisted_baseline

    target, draft = tiny_qwen3(seed=0), tiny_qwen3(num_layers=1, seed=1)
    rec = _Records()
    root = logging.getLogger("transformers")
    root.addHandler(rec)
    # an earlier quiet command in the same process (e.g. mfd eval --quiet) may have raised
    # transformers' verbosity: this test needs its warnings
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()
    try:
        # transformers does emit it on this path (warning_once: clear its memory first)
        hf_logging.warning_once.cache_clear()
        ids = torch.zeros(1, 5, dtype=torch.long)
        target.generate(ids, generation_config=_generation_config(target, 0.0, 4), assistant_model=draft,
                        attention_mask=torch.ones_like(ids))
        assert any("generation_config` together with" in m for m in rec.messages), rec.messages
        rec.messages.clear()
        hf_logging.warning_once.cache_clear()
        rows = hf_assisted_baseline(target, draft, np.zeros((2, 5), dtype=np.int64), 4, temperatures=(0.0, 1.0))
        assert len(rows) == 4
        assert not any("generation_config` together with" in m for m in rec.messages), rec.messages
        # other messages still pass while the filter is on, and the filter goes away after
        with _quiet_known_deprecations():
            logging.getLogger("transformers.generation.utils").warning("something else")
        assert "something else" in rec.messages
        assert not logging.getLogger("transformers.generation.utils").filters
    finally:
        hf_logging.set_verbosity(verbosity)
        root.removeHandler(rec)
        hf_logging.warning_once.cache_clear()
