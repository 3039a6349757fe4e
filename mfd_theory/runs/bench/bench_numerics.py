"""The work of ``mfd bench numerics``: the real target's forward costs under each numerics, side by side.

Each setting runs in a fresh interpreter (torch reads its dispatch variables once, at import), the
settings one after another in one run on one host: ``pin-float32`` (the reproducible numerics),
``native-float32`` (the libraries' own dispatch) and ``native-bfloat16`` (own dispatch, bfloat16
weights; on a host without bfloat16 instructions torch emulates it, and the setting is skipped
unless asked for, with the probe's ratio recorded instead). Every figure is the fastest of
``reps`` runs (on a shared machine preemption only ever adds time).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from mfd_theory.configs.options import keeps_torch_threads
from mfd_theory.numerics import PIN_ENV, isa_flags, numerics_provenance

__all__ = ["SETTINGS", "measure", "run_settings"]

#: setting -> (pinned, dtype)
SETTINGS = {"pin-float32": (True, "float32"), "native-float32": (False, "float32"),
            "native-bfloat16": (False, "bfloat16")}


def _best(fn, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@keeps_torch_threads
def measure(target: str, dtype: str, reps: int, context: int, tf_tokens: int, batch: int, threads: int) -> dict:
    """In this process: the teacher-forced forward of ``tf_tokens`` tokens (the body, no LM head),
    ``n`` new tokens after a ``context``-token cache (n = 1, 16, 64: plain decoding's step and a
    tree's verification), and one decode step of ``batch`` rows; seconds, fastest of ``reps``."""
    import torch
    from transformers import DynamicCache

    from mfd_theory.llm.models.target import load_local_target

    torch.set_num_threads(threads)
    hf, _ = load_local_target(target, "cpu", dtype)
    gen = torch.Generator().manual_seed(0)
    V = int(hf.config.vocab_size)
    ids = torch.randint(0, V, (1, max(tf_tokens, context)), generator=gen)
    out = {"dtype": str(next(hf.parameters()).dtype).replace("torch.", ""),
           "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}
    with torch.no_grad():
        hf.model(input_ids=ids[:, :8])  # warm-up
        s = _best(lambda: hf.model(input_ids=ids[:, :tf_tokens]), reps)
        out["teacher_forced_tokens_per_s"] = tf_tokens / s
        for n in (1, 16, 64):
            new = torch.randint(0, V, (1, n), generator=gen)

            def step():
                cache = DynamicCache()
                hf(input_ids=ids[:, :context], past_key_values=cache, use_cache=True)
                t0 = time.perf_counter()
                hf(input_ids=new, past_key_values=cache, use_cache=True)
                return time.perf_counter() - t0

            out[f"new_{n}_ms"] = 1e3 * min(step() for _ in range(reps))
        rows = torch.randint(0, V, (batch, 64), generator=gen)
        last = torch.randint(0, V, (batch, 1), generator=gen)

        def batch_step():
            cache = DynamicCache()
            hf(input_ids=rows, past_key_values=cache, use_cache=True)
            t0 = time.perf_counter()
            hf(input_ids=last, past_key_values=cache, use_cache=True)
            return time.perf_counter() - t0

        out["batch_step_tokens_per_s"] = batch / min(batch_step() for _ in range(reps))
    return out


def _child_env(pinned: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (*PIN_ENV["avx2"], "MFD_NATIVE_NUMERICS", "MFD_CPU_DTYPE")}
    env["MFD_NUMERICS"] = "reproducible" if pinned else "fast"
    if pinned:
        env.update(PIN_ENV["avx2"])
    return env


def run_settings(target: str, settings, reps: int, context: int, tf_tokens: int, batch: int, threads: int,
                 run_emulated: bool, progress: bool = True) -> dict:
    """Every setting in its own interpreter, one after another; {setting: figures or why skipped}."""
    from mfd_theory.llm.models.dtype import BF16_FLAGS, probe_bf16

    native_bf16 = bool(set(BF16_FLAGS) & set(isa_flags()))
    out = {}
    for name in settings:
        pinned, dtype = SETTINGS[name]
        if dtype == "bfloat16" and not native_bf16 and not run_emulated:
            out[name] = {"skipped": "no bfloat16 instructions (avx512_bf16, amx_bf16): torch emulates bfloat16",
                         "probe": probe_bf16()}
            if progress:
                print(f"{name}: skipped ({out[name]['skipped']}; probe linear bf16 "
                      f"{out[name]['probe']['bf16_speedup']:.2f}x float32)", flush=True)
            continue
        args = json.dumps([target, dtype, reps, context, tf_tokens, batch, threads])
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "mfd_theory.runs.bench.bench_numerics", args],
                             env=_child_env(pinned), capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"bench numerics: setting {name} failed: {res.stderr.strip().splitlines()[-1:]}")
        out[name] = {**json.loads(res.stdout.strip().splitlines()[-1]), "pinned": pinned,
                     "wall_s": round(time.perf_counter() - t0, 1)}
        if progress:
            print(f"{name}: measured in {out[name]['wall_s']} s", flush=True)
    return out


def host() -> dict:
    return {**numerics_provenance(), "cores": os.cpu_count()}


if __name__ == "__main__":  # one setting, in the fresh interpreter run_settings starts
    print(json.dumps(measure(*json.loads(sys.argv[1]))))
