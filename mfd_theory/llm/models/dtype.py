"""The dtype a model runs in on this host, under the process's numerics.

*reproducible* numerics (:func:`mfd_theory.numerics.apply_numerics`) runs every model in float32.
*fast* numerics runs CPU models in bfloat16 only where the host computes it faster: the CPU must
have bfloat16 instructions (``avx512_bf16`` or ``amx_bf16``; elsewhere torch emulates bfloat16 and
is many times slower than float32), and a probe of about a tenth of a second must find bfloat16 at
least :data:`MIN_GAIN` times faster than float32 on the shape that dominates a tree verification
or a teacher-forced forward (a [64, 896] x [896, 4864] linear, the Qwen target's MLP). The choice,
its reason and the probe's timings are recorded in every result (``provenance.numerics.cpu_dtype``).

``MFD_CPU_DTYPE`` (float32 / bfloat16) overrides the choice, for a test that must run the
bfloat16 path on a host that would not pick it, or a user who knows better; the record says so.
"""

from __future__ import annotations

import functools
import os
import time

import torch

from mfd_theory.numerics import current_numerics, isa_flags, record_dtype_choice

__all__ = ["BF16_FLAGS", "DTYPE_ENV", "MIN_GAIN", "cpu_dtype_choice", "probe_bf16", "resolve_dtype"]

#: CPU flags under which bfloat16 runs natively (else torch emulates it)
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
#: bfloat16 must be at least this much faster than float32 in the probe to be chosen
MIN_GAIN = 1.25
#: the override variable: float32 or bfloat16
DTYPE_ENV = "MFD_CPU_DTYPE"
_PROBE_SHAPE = (64, 896, 4864)  # rows (tree nodes or teacher-forced tokens), in features, out features


def _best_ms(fn, reps: int) -> float:
    fn()  # warm-up: first-call dispatch and packing
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def probe_bf16(reps: int = 5) -> dict:
    """Milliseconds of the probe linear, float32 and bfloat16, best of ``reps`` each."""
    m, k, n = _PROBE_SHAPE
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(m, k, generator=gen)
    w = torch.randn(n, k, generator=gen) * k ** -0.5
    xb, wb = x.bfloat16(), w.bfloat16()
    with torch.no_grad():
        f32 = _best_ms(lambda: torch.nn.functional.linear(x, w), reps)
        bf16 = _best_ms(lambda: torch.nn.functional.linear(xb, wb), reps)
    return {"shape": list(_PROBE_SHAPE), "float32_ms": round(f32, 3), "bfloat16_ms": round(bf16, 3),
            "bf16_speedup": round(f32 / bf16, 3)}


@functools.cache
def _choice(mode: str, override: str, capability: str, threads: int) -> dict:
    flags = isa_flags()
    base = {"mode": mode, "isa_flags": flags, "torch_cpu_capability": capability, "torch_threads": threads}
    if override:
        if override not in ("float32", "bfloat16"):
            raise ValueError(f"${DTYPE_ENV}: must be float32 or bfloat16, got {override!r}")
        return {**base, "dtype": override, "reason": f"set by ${DTYPE_ENV}", "probe": None}
    if mode == "reproducible":
        return {**base, "dtype": "float32", "reason": "reproducible numerics: float32 on every host", "probe": None}
    if not set(BF16_FLAGS) & set(flags):
        return {**base, "dtype": "float32", "probe": None,
                "reason": "no bfloat16 instructions (avx512_bf16, amx_bf16): bfloat16 would be emulated"}
    probe = probe_bf16()
    fast = probe["bf16_speedup"] >= MIN_GAIN
    why = (f"bfloat16 {probe['bf16_speedup']:.2f}x float32 in the probe"
           + (f" (>= {MIN_GAIN})" if fast else f" (< {MIN_GAIN}: not worth its rounding)"))
    return {**base, "dtype": "bfloat16" if fast else "float32", "reason": why, "probe": probe}


def cpu_dtype_choice(mode: str | None = None) -> dict:
    """The dtype (``"float32"`` / ``"bfloat16"``) a CPU model loaded with dtype "auto" runs in
    under ``mode`` (None: the process's numerics), with ``reason``, the CPU flags that decided it
    and the probe's timings (None where no probe ran). Probed once per process and setting."""
    mode = current_numerics() if mode is None else mode
    choice = dict(_choice(mode, os.environ.get(DTYPE_ENV, ""), torch.backends.cpu.get_cpu_capability(),
                          torch.get_num_threads()))
    record_dtype_choice(choice)  # every result of this process records it (provenance.numerics.cpu_dtype)
    return choice


def resolve_dtype(name: str, device: str = "cpu") -> torch.dtype:
    """torch dtype for a ``--dtype`` value: "auto" is bfloat16 on CUDA and :func:`cpu_dtype_choice`
    on a CPU; any other name is that dtype."""
    if name == "auto":
        if str(device).startswith("cuda"):
            return torch.bfloat16
        return getattr(torch, cpu_dtype_choice()["dtype"])
    return getattr(torch, name)
