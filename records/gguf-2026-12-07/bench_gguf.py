"""GGUF -> HF conversion of the shipped targets, transformers' own parsing (each file's header parsed
three times, the tensor-name map rebuilt per module) against _parsed_once, side by side in one run;
the two directories' files compared byte for byte."""
import contextlib, hashlib, platform, subprocess, sys, time
from pathlib import Path
import torch
from mfd_theory.llm.models import gguf
from mfd_theory import shipped

torch.set_num_threads(2)
out = Path(sys.argv[1])
names = sys.argv[2:]
print("host:", subprocess.run(["sh", "-c", "lscpu | grep 'Model name' | sed 's/.*: *//'"], capture_output=True, text=True).stdout.strip(),
      "| flags:", " ".join(f for f in ("avx2", "avx512f", "amx_bf16") if f in open("/proc/cpuinfo").read()), "| torch", torch.__version__)
real = gguf._parsed_once
for name in names:
    src = shipped.locate_pieces(shipped.SHIPPED[name])[0] if len(shipped.SHIPPED[name].pieces) == 1 else None
    times = {}
    for label in ("transformers' own parsing", "parsed once"):
        gguf._parsed_once = real if label == "parsed once" else contextlib.nullcontext
        dest = out / f"{name}-{label.split()[0].strip(chr(39))}"
        t0 = time.perf_counter()
        gguf.materialise_shipped(name, dest, announce=lambda *a: None)
        times[label] = time.perf_counter() - t0
    files = sorted(p.name for p in dest.iterdir() if p.is_file() and p.name != "mfd_target.json")
    a, b = (out / f"{name}-transformers", out / f"{name}-parsed")
    same = all(hashlib.sha256((a / f).read_bytes()).digest() == hashlib.sha256((b / f).read_bytes()).digest() for f in files)
    print(f"{name}: transformers' own parsing {times[chr(116)+'ransformers'+chr(39)+' own parsing']:.1f} s, parsed once {times['parsed once']:.1f} s "
          f"({times[chr(116)+'ransformers'+chr(39)+' own parsing'] / times['parsed once']:.2f}x); {len(files)} files byte-identical: {same}")
