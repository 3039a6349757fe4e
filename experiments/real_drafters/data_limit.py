"""What limits a drafter trained here for the real Qwen target: the steps, or the data?

Trains one product drafter (K = 1, the real-drafters recipe: block 8, 1 layer initialised from the
target's last layer, a frequency-chosen draft vocabulary) on the distilled answers of an
``mfd real-drafters`` run, optionally with more training text, and measures its greedy tau twice,
exactly as a T = 0 decode measures it (``mfd_theory.llm.measure.heldout``): on the run's held-out
answers (calibration-split prompts, never trained on) and on the first 16 training answers (what
it saw). A drafter whose training tau is far above its held-out tau has memorised its data.

More text, cheaply: ``--references N`` adds N standard-library functions of the training split
as teacher-forced answers (``mfd_theory.llm.training.real_prompts.reference_answers``, what
``mfd real-drafters --references N`` trains on): the code prompts' instruction answered by the
function's own source, read by one target forward (no generation). Their labels are human code,
not the target's answers.

    mfd real-drafters --preset reproduce --stages recipe --recipes tokens --recipe-seeds 1 --out RUN
    python experiments/real_drafters/data_limit.py --run RUN --name base --steps 200
    python experiments/real_drafters/data_limit.py --run RUN --name long --steps 1000
    python experiments/real_drafters/data_limit.py --run RUN --name refs --steps 1500 --references 400

Each run appends one JSON line to ``RUN/data_limit.jsonl``. Not a test: a diagnostic whose
numbers docs/real-targets.md quotes with their date.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="an mfd real-drafters output directory with distill/ and heldout/")
    ap.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--name", required=True, help="this drafter's name (its directory under RUN/data_limit/)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--draft-vocab", type=int, default=4096)
    ap.add_argument("--references", type=int, default=0, help="standard-library functions added as answers")
    ap.add_argument("--reference-tokens", type=int, default=192, help="answer tokens kept per function")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    from mfd_theory.runs.pipeline.train_drafter import frequent_tokens, init_layers_from_target
    from mfd_theory.llm.measure.heldout import heldout_greedy_tau
    from mfd_theory.llm.models.drafter import build_drafter
    from mfd_theory.llm.models.gguf import resolve_target
    from mfd_theory.llm.models.target import load_local_target
    from mfd_theory.llm.training.distill import load_distill_data
    from mfd_theory.llm.training.real_prompts import reference_answers
    from mfd_theory.llm.training.train import DrafterTrainConfig, TargetFeatures, train_drafter

    torch.set_num_threads(args.threads)
    run = Path(args.run)
    target_dir = resolve_target(args.target)
    target, tokenizer = load_local_target(target_dir, "cpu", "float32")
    for p in target.parameters():
        p.requires_grad_(False)
    target.eval()
    seqs, plens, _ = load_distill_data(run / "distill")
    hseqs, hplens, _ = load_distill_data(run / "heldout")
    n_distilled = len(seqs)
    if args.references:
        rs, rp, _, _ = reference_answers(tokenizer, args.references, args.reference_tokens,
                                         int(tokenizer.convert_tokens_to_ids("<|im_end|>")))
        seqs = list(seqs) + [np.asarray(x, dtype=np.int64) for x in rs]
        plens = np.concatenate([plens, np.asarray(rp, dtype=np.int64)])
    answer_tokens = int(sum(len(s) - int(p) for s, p in zip(seqs, plens)))
    layer_ids = [1, 11, 21]
    t0 = time.perf_counter()
    features = TargetFeatures(target, seqs, layer_ids)
    feature_s = time.perf_counter() - t0
    vocab, note = frequent_tokens(seqs, plens, args.draft_vocab, int(target.config.vocab_size))
    drafter = build_drafter(target, 8, 1, seed=args.seed, target_layer_ids=layer_ids, draft_vocab=vocab)
    init_layers_from_target(drafter, target)
    cfg = DrafterTrainConfig(block_size=8, num_layers=1, batch_size=8, blocks_per_seq=8, steps=args.steps,
                             lr=args.lr, warmup=max(1, args.steps // 25), ckpt_every=max(1, args.steps // 3),
                             seed=args.seed)
    t0 = time.perf_counter()
    curve = train_drafter(target, drafter, seqs, plens, run / "data_limit" / args.name, cfg, progress=True,
                          features=features)
    train_s = time.perf_counter() - t0
    drafter.eval()

    def taus(s, p):
        got = heldout_greedy_tau(target, drafter, s, p, 16)
        return {c["method"]: round(c["tau"], 3) for c in got["cells"]}

    rec = {"name": args.name, "steps": args.steps, "lr": args.lr, "seed": args.seed,
           "distilled_answers": n_distilled, "references": args.references, "answer_tokens": answer_tokens,
           "draft_vocab": note, "feature_s": round(feature_s, 1), "train_s": round(train_s, 1),
           "loss_first": round(float(curve[0]["loss"]), 3),
           "loss_last10": round(float(np.mean([c["loss"] for c in curve[-10:]])), 3),
           "heldout_tau_n16": taus(hseqs, hplens), "train_tau_n16": taus(seqs[:16], plens[:16]),
           "heldout_answers": len(hseqs), "date": time.strftime("%Y-%m-%d")}
    print(json.dumps(rec), flush=True)
    with open(run / "data_limit.jsonl", "a") as fh:
        fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
