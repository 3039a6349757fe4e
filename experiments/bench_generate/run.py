"""Tokens per second of one-at-a-time against batched generation from a target, side by side.

One-at-a-time is what ``mfd distill`` did before batching: ``speculative_generate(..., "ar")``
prompt after prompt. Batched is ``generate_batch`` with ``--batch`` rows per forward. Both
answer the same prompts with the same settings in one run (one short warm-up each first), and the
script prints each one's tokens, seconds and tokens/s, their ratio, and whether the tokens are
identical (greedy by default, where they must be, up to float round-off near ties).

    python experiments/bench_generate/run.py --target results/targets/qwen2.5-coder-0.5b-instruct \\
        --prompts 16 --new-tokens 64 --batch 16 --threads 2
    python experiments/bench_generate/run.py --tiny            # a random tiny Qwen3, no files needed

Not a test: timings depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from mfd_theory.runs.bench.bench_generate import INSTRUCTIONS, tiny_target  # noqa: E402  (the benchmark's own)


def _args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--target", help="a local Hugging Face model directory (with its tokenizer)")
    src.add_argument("--tiny", action="store_true", help="a random tiny Qwen3 instead of a real target")
    ap.add_argument("--prompts", type=int, default=16, help="prompts to answer (default 16)")
    ap.add_argument("--new-tokens", type=int, default=64, help="new tokens per prompt at most (default 64)")
    ap.add_argument("--single", type=int, default=0,
                    help="answer only the first N prompts one at a time (0: all; its tokens/s is a rate, so a "
                         "subset measures it while the batched run answers every prompt)")
    ap.add_argument("--batch", type=int, default=16, help="rows per forward of the batched run (default 16)")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    ap.add_argument("--temperature", type=float, default=0.0, help="0 (greedy, the default) or a sampling temperature")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args(argv)
    for name in ("prompts", "new_tokens", "batch", "threads"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    if not 0 <= args.single <= args.prompts:
        ap.error(f"--single: must be in [0, --prompts], got {args.single}")
    if args.temperature < 0:
        ap.error(f"--temperature: must be >= 0, got {args.temperature}")
    return args


def _load(args):
    """(model, prompts as token id lists, what they are)."""
    import torch

    if args.tiny:
        model = tiny_target()
        g = torch.Generator().manual_seed(0)
        lengths = [8 + (7 * i) % 41 for i in range(args.prompts)]  # 8 to 48 tokens, all different
        prompts = [torch.randint(0, 512, (n,), generator=g).tolist() for n in lengths]
        return model.to(args.device), prompts, "a random tiny Qwen3 (4 layers, width 128, 512 tokens)"
    from mfd_theory.llm.models.target import load_local_target
    from mfd_theory.llm.training.prompts import render

    model, tok = load_local_target(args.target, args.device)
    prompts = [render([("user", INSTRUCTIONS[i % len(INSTRUCTIONS)] + ("" if i < len(INSTRUCTIONS) else f" ({i})"))],
                      tok) for i in range(args.prompts)]
    return model, prompts, args.target


def _one_at_a_time(model, prompts, args):
    from mfd_theory.llm.decoding.generate import speculative_generate

    return [speculative_generate(model, None, p, args.new_tokens, "ar", temperature=args.temperature, seed=i,
                                 metrics=False).tokens for i, p in enumerate(prompts)]


def _batched(model, prompts, args):
    from mfd_theory.llm.decoding.generate_batch import generate_batch

    return generate_batch(model, prompts, args.new_tokens, temperature=args.temperature,
                          seeds=list(range(len(prompts))), batch=args.batch)


def _timed(fn, *a):
    t0 = time.perf_counter()
    out = fn(*a)
    return out, time.perf_counter() - t0


def main(argv=None) -> dict:
    args = _args(argv)
    import torch

    torch.set_num_threads(args.threads)
    model, prompts, what = _load(args)
    from mfd_theory.llm.models.target import TargetModel

    target = TargetModel(model)  # both runs share one wrapper (its mask probe is not timed)
    warm = argparse.Namespace(**{**vars(args), "new_tokens": 2})
    _one_at_a_time(target, prompts[:1], warm)
    _batched(target, prompts[:2], warm)
    single, t_single = _timed(_one_at_a_time, target, prompts[:args.single or len(prompts)], args)
    batched, t_batched = _timed(_batched, target, prompts, args)
    n_single, n_batched = sum(map(len, single)), sum(map(len, batched))
    differ = [i for i, (a, b) in enumerate(zip(single, batched)) if a != b]
    res = {"target": what, "prompts": len(prompts), "single_prompts": len(single), "prompt_tokens": [len(p) for p in prompts],
           "new_tokens": args.new_tokens, "batch": args.batch, "threads": args.threads,
           "temperature": args.temperature, "device": args.device,
           "one_at_a_time": {"tokens": n_single, "seconds": t_single, "tokens_per_s": n_single / t_single},
           "batched": {"tokens": n_batched, "seconds": t_batched, "tokens_per_s": n_batched / t_batched},
           "identical": not differ, "rows_that_differ": differ}
    res["speedup"] = res["batched"]["tokens_per_s"] / res["one_at_a_time"]["tokens_per_s"]
    print(f"target: {what}")
    print(f"{len(prompts)} prompts ({min(res['prompt_tokens'])}-{max(res['prompt_tokens'])} tokens), "
          f"up to {args.new_tokens} new tokens each, temperature {args.temperature}, {args.threads} thread(s), "
          f"{args.device}")
    for name in ("one_at_a_time", "batched"):
        r = res[name]
        label = (f"one at a time ({len(single)})" if name == "one_at_a_time"
                 else f"batched (B = {args.batch}, {len(prompts)})")
        print(f"{label:>18}: {r['tokens']:6d} tokens in {r['seconds']:8.2f} s = {r['tokens_per_s']:8.2f} tokens/s")
    print(f"{'ratio':>18}: {res['speedup']:.2f}x")
    print(f"{'identical tokens':>18}: {'yes' if not differ else f'no (rows {differ})'} "
          f"(the {len(single)} prompts both answered)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
