"""A run's CPU numerics: *reproducible* (the same bits on every x86-64 host with AVX2) or *fast*.

torch's own kernels and oneMKL pick their code path by the CPU they run on, so the same seed
trains different weights on an AVX-512 host and on an AVX2 one, and oneMKL's choice differs between
CPU models and vendors. :func:`pin_cpu_numerics` fixes both to AVX2 before torch starts: that is
the *reproducible* numerics, float32. The *fast* numerics leaves the libraries' own dispatch alone
and lets a model run in bfloat16 where the host computes it faster (decided by its flags and a
short probe, :mod:`mfd_theory.llm.models.dtype`). :func:`apply_numerics` sets one of the two for a
process before torch starts (every ``mfd`` command that runs a model takes ``--numerics``); what is
in force is in :func:`numerics_provenance`. See docs/statistics.md ("Determinism") and
docs/benchmarks.md ("Numerics").
"""

from __future__ import annotations

import os
import platform
import sys
import warnings

__all__ = ["COMMON_LEVEL", "MODES", "MODE_ENV", "PIN_ENV", "apply_numerics", "check_numerics", "cpu_isa_level",
           "current_numerics", "isa_flags", "numerics_provenance", "pin_cpu_numerics", "record_dtype_choice"]

#: the two numerics a run can have: the libraries' own dispatch and bfloat16 where it is faster,
#: or the AVX2 pin and float32 (the same bits on every host of this kind)
MODES = ("fast", "reproducible")
#: the variable that carries a process's numerics to what it starts (torchrun ranks, worker lanes)
MODE_ENV = "MFD_NUMERICS"
#: the CPU flags that decide the numerics (the rest of /proc/cpuinfo is not recorded)
ISA_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16",
             "avx512_fp16", "amx_bf16", "amx_int8", "amx_tile")

#: the variables the pin sets, per level: torch's kernel dispatch (ATen), oneMKL's conditional
#: numerical reproducibility (strict: the same bits whatever the CPU model or thread count), and
#: oneDNN's ISA cap
PIN_ENV = {
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AVX512,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
#: the level every host is pinned to by default: the one x86-64 hosts of this kind share (an AVX-512
#: host runs AVX2 code too, a little slower, and then gives the same bits as an AVX2-only one)
COMMON_LEVEL = "avx2"
#: set to 1 to leave the libraries' own dispatch alone (faster on newer CPUs, not portable)
OPT_OUT = "MFD_NATIVE_NUMERICS"
#: the pin variables this process set itself (fast numerics removes these, never the user's own)
_SET_HERE: set[str] = set()
#: the last CPU dtype choice of this process (:func:`record_dtype_choice`)
_DTYPE_CHOICE: dict = {}


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_isa_level() -> str | None:
    """'avx512' or 'avx2' on an x86-64 host that has it (from /proc/cpuinfo), else None."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    flags = _cpu_flags()
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return None


def isa_flags() -> list[str]:
    """The flags of :data:`ISA_FLAGS` this CPU has (empty off x86-64 Linux)."""
    flags = _cpu_flags()
    return [f for f in ISA_FLAGS if f in flags]


def check_numerics(mode, name: str = "numerics") -> str:
    """``mode`` when it is one of :data:`MODES`, else a ValueError naming ``name``."""
    if mode not in MODES:
        raise ValueError(f"{name}: must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def current_numerics() -> str:
    """This process's numerics: what :func:`apply_numerics` set (``$MFD_NUMERICS``), else
    'fast' under ``MFD_NATIVE_NUMERICS=1``, else 'reproducible'."""
    mode = os.environ.get(MODE_ENV, "")
    if mode:
        return check_numerics(mode, f"${MODE_ENV}")
    return "fast" if os.environ.get(OPT_OUT, "") not in ("", "0") else "reproducible"


def apply_numerics(mode: str | None = None) -> str:
    """Put this process (and what it starts) on ``mode`` (None: :func:`current_numerics`) before
    torch starts: 'reproducible' pins the dispatch (:func:`pin_cpu_numerics`), 'fast' leaves it
    alone. Returns the mode.

    torch reads the dispatch variables once, when it is imported: called after that, the mode is
    still recorded (it picks the dtype of models loaded later), the dispatch stays what it was, and
    :func:`numerics_provenance` says which dispatch ran. A variable the user set is never changed."""
    mode = current_numerics() if mode is None else check_numerics(mode)
    os.environ[MODE_ENV] = mode
    if mode == "reproducible" and os.environ.get(OPT_OUT, "") not in ("", "0"):
        os.environ.pop(OPT_OUT)  # the explicit choice wins over the older opt-out variable
    if "torch" not in sys.modules:
        if mode == "reproducible":
            pin_cpu_numerics()
        else:
            for k in list(_SET_HERE):
                os.environ.pop(k, None)
                _SET_HERE.discard(k)
    return mode


def pin_cpu_numerics(level: str | None = "auto") -> dict[str, str]:
    """Set the dispatch variables for ``level`` ('auto': :data:`COMMON_LEVEL` on every host that
    has it, so that an AVX-512 host and an AVX2-only one train the same weights; 'avx512' pins a
    fleet of AVX-512 hosts to their own level) unless the user set them already or set
    ``MFD_NATIVE_NUMERICS=1``; returns what is in force.

    Call it before torch is imported: torch reads these variables when it starts, so a pin set
    afterwards is ignored, and a warning says so."""
    if os.environ.get(OPT_OUT, "") not in ("", "0"):
        return {}
    if level == "auto":
        level = COMMON_LEVEL if cpu_isa_level() is not None else None
    if level is None:
        return {}
    if level not in PIN_ENV:
        raise ValueError(f"level: must be 'auto', None or one of {sorted(PIN_ENV)}, got {level!r}")
    wanted = PIN_ENV[level]
    unset = [k for k in wanted if k not in os.environ]  # a variable the user set stays as it is
    if "torch" in sys.modules and unset:
        warnings.warn("pin_cpu_numerics: torch is already imported, so its kernel dispatch is not pinned "
                      "(call it before importing torch)", RuntimeWarning, stacklevel=2)
    for k in unset:
        os.environ[k] = wanted[k]
        _SET_HERE.add(k)
    return {k: os.environ[k] for k in wanted}


def numerics_provenance() -> dict:
    """What decides the bits of a run on this host: the CPU, its ISA level, the pin variables in
    force, and (when torch is loaded) the capability its kernels actually run with and its threads."""
    out = {"machine": platform.machine(), "cpu": _cpu_model(), "isa_level": cpu_isa_level(), "isa_flags": isa_flags(),
           "mode": current_numerics(), "native": os.environ.get(OPT_OUT, "") not in ("", "0"),
           "env": {k: os.environ.get(k) for k in PIN_ENV["avx2"]}}
    out["pinned"] = all(out["env"][k] is not None for k in PIN_ENV["avx2"])
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        out["torch_threads"] = torch.get_num_threads()
    if _DTYPE_CHOICE:
        out["cpu_dtype"] = dict(_DTYPE_CHOICE)  # what a CPU model loaded with dtype "auto" runs in, and why
    return out


def record_dtype_choice(choice: dict) -> None:
    """Keep the CPU dtype choice of this process (made where models are loaded) for
    :func:`numerics_provenance`, so every result records it."""
    _DTYPE_CHOICE.clear()
    _DTYPE_CHOICE.update(choice)


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None
