"""Same seed, same machine: identical checkpoints; and under the pinned CPU numerics (AVX2 on every
x86-64 host), identical across thread counts and oneMKL code paths (what differs between two hosts
of the same kind). docs/statistics.md, "Determinism"."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mfd_theory.llm import build_drafter  # noqa: E402
from mfd_theory.llm.training.corpus import CorpusConfig, build_corpus  # noqa: E402
from mfd_theory.llm.training.train import (  # noqa: E402
    DrafterTrainConfig, LMConfig, LMTrainConfig, make_distill_data, train_drafter, train_lm,
)
from mfd_theory.numerics import PIN_ENV, cpu_isa_level, numerics_provenance, pin_cpu_numerics  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _train_micro(tmp: Path):
    """A tiny target, its distilled data and a K = 2 drafter trained on it, from seed 0."""
    corpus = build_corpus(CorpusConfig(n_train=120, n_heldout=8, vocab_size=150, seed=0))
    arch = LMConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16, intermediate_size=64,
                    max_position_embeddings=128)
    target, _ = train_lm(corpus, tmp / "target", arch, LMTrainConfig(seq_len=16, batch_size=4, steps=4, warmup=1,
                                                                     ckpt_every=2), progress=False)
    data = make_distill_data(target, corpus.prompts(8, 6, "train"), 10, seed=0, progress=False)
    drafter = build_drafter(target, 4, 1, num_modes=2, seed=0, mask_token_id=corpus.mask_id)
    train_drafter(target, drafter, data, 6, tmp / "drafter",
                  DrafterTrainConfig(block_size=4, num_modes=2, batch_size=4, blocks_per_seq=2, steps=4, warmup=1,
                                     ckpt_every=2), progress=False)
    return target, drafter


def test_training_twice_gives_identical_weights(tmp_path):
    t1, d1 = _train_micro(tmp_path / "a")
    t2, d2 = _train_micro(tmp_path / "b")
    for m1, m2 in ((t1, t2), (d1, d2)):
        s1, s2 = m1.state_dict(), m2.state_dict()
        assert s1.keys() == s2.keys()
        for k in s1:
            assert torch.equal(s1[k], s2[k]), k


def test_pin_sets_the_dispatch_once_and_names_what_is_in_force(monkeypatch):
    for k in PIN_ENV["avx2"]:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.delenv("MFD_NATIVE_NUMERICS", raising=False)
    with pytest.warns(RuntimeWarning, match="torch is already imported"):
        got = pin_cpu_numerics("avx2")
    assert got == PIN_ENV["avx2"] and all(os.environ[k] == v for k, v in got.items())
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")  # a user's own setting wins
    assert pin_cpu_numerics("avx2")["MKL_CBWR"] == "COMPATIBLE"
    monkeypatch.setenv("MFD_NATIVE_NUMERICS", "1")
    assert pin_cpu_numerics() == {}
    with pytest.raises(ValueError, match="^level"):
        monkeypatch.delenv("MFD_NATIVE_NUMERICS")
        pin_cpu_numerics("sse2")
    prov = numerics_provenance()
    assert prov["torch_cpu_capability"] and prov["env"]["MKL_CBWR"] == "COMPATIBLE"


def _sums(out: Path) -> dict[str, str]:
    """{checkpoint kind: sha256} of the checkpoints under ``out/cache``."""
    return {p.relative_to(out).parts[1].rsplit("-", 1)[0]: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*.safetensors"))}


def _prepare_sums(out: Path, env: dict) -> dict[str, str]:
    """Checkpoint hashes of ``mfd e2e --preset micro --prepare-only`` in a fresh process."""
    clean = {k: v for k, v in os.environ.items() if k not in (*PIN_ENV["avx2"], "MFD_NATIVE_NUMERICS")}
    subprocess.run([sys.executable, "-m", "mfd_theory.cli", "e2e", "--preset", "micro", "--prepare-only", "--quiet",
                    "--out", str(out), "--threads", env.pop("THREADS", "1")],
                   check=True, cwd=ROOT, env={**clean, **env}, capture_output=True, timeout=600)
    return _sums(out)


@pytest.mark.skipif(cpu_isa_level() is None, reason="the pin applies to x86-64 hosts with AVX2")
def test_pinned_numerics_survive_thread_count_and_mkl_path_but_other_dispatch_does_not(micro_e2e_cache, tmp_path):
    # the base: the session's micro checkpoints (the same command, one thread, the pinned numerics)
    base = _sums(micro_e2e_cache.parent)
    assert set(base) >= {"target", "drafter-k1", "drafter-k2", "drafter-dartree"}
    # what another host changes: two torch threads, and oneMKL held to AVX2 instructions (on an
    # AVX-512 host this is the code path an AVX2-only host takes; on an AVX2 host it is its own)
    assert _prepare_sums(tmp_path / "b", {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "THREADS": "2"}) == base
    # the check can fail: torch's kernels on another instruction set give other weights
    other = _prepare_sums(tmp_path / "c", {"MFD_NATIVE_NUMERICS": "1", "ATEN_CPU_CAPABILITY": "default"})
    assert other["target"] != base["target"]


def test_auto_pins_every_host_to_the_common_level(monkeypatch):
    """An AVX-512 host is pinned to AVX2 like an AVX2-only one (the two then train the same
    weights); a host without AVX2, or not x86-64, is left alone."""
    import mfd_theory.numerics as nm

    for k in PIN_ENV["avx2"]:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.delenv("MFD_NATIVE_NUMERICS", raising=False)
    monkeypatch.setattr(nm.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(nm, "_cpu_flags", lambda: {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"})
    assert nm.cpu_isa_level() == "avx512"
    with pytest.warns(RuntimeWarning):  # torch is imported in the test process
        assert pin_cpu_numerics() == PIN_ENV["avx2"] == PIN_ENV[nm.COMMON_LEVEL]
    for k in PIN_ENV["avx2"]:
        monkeypatch.delenv(k)
    monkeypatch.setattr(nm, "_cpu_flags", lambda: {"sse4_2"})
    assert pin_cpu_numerics() == {}
    monkeypatch.setattr(nm, "_cpu_flags", lambda: {"avx2", "fma"})
    monkeypatch.setattr(nm.platform, "machine", lambda: "aarch64")
    assert pin_cpu_numerics() == {}
