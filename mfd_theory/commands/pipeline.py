"""``mfd distill``, ``mfd train-drafter`` and ``mfd eval``: your own target, from data to speedup.

Each command works on a local Hugging Face target directory (config, weights and tokenizer) and
runs on one process or under ``torchrun --nproc_per_node P -m mfd_theory.cli <command> ...``
(gloo on CPU, nccl on CUDA) with the same results. Every option is checked, and every input file
read, before a model is loaded or anything is written; bad input raises ValueError (the ``mfd``
command turns it into exit status 2 with the message).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from mfd_theory.validation import check_out_dir, make_out_dir

__all__ = ["distill_main", "train_drafter_main", "eval_main", "load_target"]

_DTYPES = ("auto", "float32", "bfloat16", "float16")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


# --------------------------------------------------------------------------------------- shared


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", required=True, help="local Hugging Face target directory (with its tokenizer)")
    parser.add_argument("--device", default="auto",
                        help="auto (CUDA when available), cpu, cuda (each torchrun rank takes its GPU) or cuda:N")
    parser.add_argument("--dtype", default="auto", choices=_DTYPES,
                        help="target weights' dtype (auto: bfloat16 on CUDA, float32 on CPU)")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _check_target_dir(path: str, flag: str = "--target") -> Path:
    d = Path(path)
    if not (d / "config.json").is_file():
        raise ValueError(f"{flag}: no config.json in {d}")
    if not any((d / f).is_file() for f in _TOKENIZER_FILES):
        raise ValueError(f"{flag}: {d} has no tokenizer (none of {', '.join(_TOKENIZER_FILES)}); "
                         "save it there with tokenizer.save_pretrained")
    return d


def _positive_int(flag: str, v) -> int:
    if v is None or isinstance(v, bool) or int(v) != v or v < 1:
        raise ValueError(f"{flag}: must be an integer >= 1, got {v!r}")
    return int(v)


def _temperature(flag: str, t: float) -> float:
    if not math.isfinite(t) or t < 0:
        raise ValueError(f"{flag}: must be finite and >= 0, got {t}")
    return float(t)


def _int_list(flag: str, value) -> list[int]:
    words = _list_tokens(value)
    try:
        vals = [int(x) for x in words]
    except ValueError as exc:
        raise ValueError(f"{flag}: expected integers (comma- or space-separated), got {' '.join(words)!r}") from exc
    if not vals or min(vals) < 1:
        raise ValueError(f"{flag}: expected integers >= 1, got {' '.join(words)!r}")
    return sorted(set(vals))


def _float_list(flag: str, value) -> list[float]:
    words = _list_tokens(value)
    try:
        vals = [float(x) for x in words]
    except ValueError as exc:
        raise ValueError(f"{flag}: expected numbers (comma- or space-separated), got {' '.join(words)!r}") from exc
    if not vals:
        raise ValueError(f"{flag}: expected at least one value")
    return [_temperature(flag, t) for t in vals]


def _torch_dtype(name: str, device: str):
    import torch

    if name == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return getattr(torch, name)


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def load_target(directory, device: str = "cpu", dtype: str = "auto"):
    """(frozen HF causal LM, tokenizer) from a local directory; ValueError naming the problem."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = _check_target_dir(str(directory), "target")
    try:
        tok = AutoTokenizer.from_pretrained(str(d))
    except Exception as exc:  # noqa: BLE001 - any loader failure is the directory's fault
        raise ValueError(f"target: cannot load the tokenizer in {d}: {exc}") from exc
    try:
        model = AutoModelForCausalLM.from_pretrained(str(d), dtype=_torch_dtype(dtype, device),
                                                     attn_implementation="sdpa")
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"target: cannot load the model in {d}: {exc}") from exc
    model = model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, tok


def _list_tokens(value) -> list[str]:
    """The items of a list option given as one comma-separated word, several space-separated
    words, or both (``16,32``, ``16 32``, ``16, 32``): the syntax every ``mfd`` command takes."""
    words = [value] if isinstance(value, str) else list(value)
    return [x for w in words for x in w.replace(",", " ").split()]


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose ``--help`` shows every option's default.

    An option with a value default gets ``(default: VALUE)`` appended; a switch ``(default: off)``;
    an option whose default is None must say in its own help what happens without it (checked
    when the parser is built, so a new option cannot forget it)."""

    def add_argument(self, *args, **kwargs):
        action = super().add_argument(*args, **kwargs)
        if action.option_strings and action.help and not action.required and action.dest != "help":
            if isinstance(action, argparse._StoreTrueAction):
                action.help += " (default: off)"
            elif action.default is None:
                if "default" not in action.help:
                    raise AssertionError(f"{action.option_strings[0]}: a None default must be explained in its help")
            elif "default" not in action.help:
                d = action.default
                shown = ",".join(map(str, d)) if isinstance(d, (list, tuple)) else d
                action.help += f" (default: {shown})".replace("%", "%%")
        return action


def _flag_errors(parser: argparse.ArgumentParser):
    """A context in which a ValueError that starts with a Python parameter name (``max_new_tokens:
    ...``, the library's style) is raised again naming the command-line flag (``--max-new-tokens:
    ...``), so every bad-input message of these commands names what the user typed."""
    import contextlib

    names = {a.dest: a.option_strings[-1] for a in parser._actions if a.option_strings and a.dest != "help"}
    names["out_dir"] = "--out"

    @contextlib.contextmanager
    def ctx():
        try:
            yield
        except ValueError as exc:
            msg = str(exc)
            head, sep, rest = msg.partition(": ")
            if sep and head in names:
                raise ValueError(f"{names[head]}: {rest}") from exc
            raise

    return ctx()


def _say(dist, msg: str) -> None:
    if dist is None or dist.main:
        print(msg, flush=True)


# --------------------------------------------------------------------------------------- distill


def _distill_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mfd distill", description=distill_main.__doc__.split(": ", 1)[1])
    _common(parser)
    parser.add_argument("--prompts", nargs="+", required=True, help="JSONL prompt files")
    parser.add_argument("--out", required=True, help="output directory (shards + manifest.json)")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="answer length cap per turn")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="sampling temperature (1 keeps all the target's futures; 0 is greedy)")
    parser.add_argument("--enable-thinking", action="store_true", help="chat template with thinking on")
    parser.add_argument("--shard-size", type=int, default=64, help="prompts per shard (the unit of resuming)")
    return parser


def distill_main(argv: list[str] | None = None) -> dict:
    """``mfd distill``: the target's own answers to prompt files (self-distillation data)."""
    parser = _distill_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    with _flag_errors(parser):
        return _distill(args)


def _distill(args) -> dict:
    _positive_int("--max-new-tokens", args.max_new_tokens)
    _positive_int("--shard-size", args.shard_size)
    _temperature("--temperature", args.temperature)
    from mfd_theory.llm.training.prompts import read_prompt_files

    prompts = read_prompt_files(args.prompts)
    _check_target_dir(args.target)
    check_out_dir(args.out, "--out")

    from mfd_theory.llm.training.dist import setup, teardown
    from mfd_theory.llm.training.distill import distill_prompts, prompt_files_digest

    dist = setup(args.device)
    try:
        if args.quiet:
            _quiet_transformers()
        target, tok = load_target(args.target, dist.device, args.dtype)
        config = {"prompt_files": prompt_files_digest(args.prompts), "max_new_tokens": args.max_new_tokens,
                  "temperature": args.temperature, "seed": args.seed, "enable_thinking": args.enable_thinking,
                  "dtype": str(next(target.parameters()).dtype).replace("torch.", "")}
        from mfd_theory.llm.training.distill import check_context
        from mfd_theory.llm.models.target import TargetModel

        # the context check distill_prompts repeats, here before the output directory is made
        check_context(prompts, tok, args.enable_thinking, args.max_new_tokens, TargetModel(target).max_positions)
        out = make_out_dir(args.out, "--out")
        manifest = distill_prompts(target, tok, prompts, out, max_new_tokens=args.max_new_tokens,
                                   temperature=args.temperature, seed=args.seed,
                                   enable_thinking=args.enable_thinking, config=config,
                                   shard_size=args.shard_size, dist=dist, progress=not args.quiet)
        _say(dist, f"{manifest['n_sequences']} sequences, {manifest['n_response_tokens']} response tokens "
                   f"in {len(manifest['shards'])} shards")
        _say(dist, f"wrote {out / 'manifest.json'}")
        return manifest
    finally:
        teardown(dist)


# --------------------------------------------------------------------------------------- train


def _train_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mfd train-drafter", description=train_drafter_main.__doc__.split(": ", 1)[1])
    _common(parser)
    parser.add_argument("--data", required=True, help="data set directory written by mfd distill")
    parser.add_argument("--out", required=True, help="run directory (checkpoints; the drafter in OUT/drafter)")
    parser.add_argument("--modes", type=int, default=1, help="K: 1 = product (DFlash) drafter, > 1 = MFD")
    parser.add_argument("--kind", default="dflash",
                        help="dflash: a block drafter (product, or MFD with --modes > 1); dartree: a Domino "
                             "drafter (block drafter plus a path-correction head, decoded with method dartree)")
    parser.add_argument("--rank", type=int, default=None,
                        help="with --kind dartree: the correction head's rank (default 32, or the checkpoint's)")
    parser.add_argument("--block-size", type=int, default=None, help="block size (default 16, or the --init-from one)")
    parser.add_argument("--layers", type=int, default=None, help="draft layers (default 1, or the --init-from one)")
    parser.add_argument("--steps", type=int, default=1000, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per micro-batch (all ranks together)")
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--blocks-per-seq", type=int, default=4, help="training blocks drawn per sequence")
    parser.add_argument("--lr", type=float, default=6e-4, help="peak learning rate (cosine schedule)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps (default steps // 20)")
    parser.add_argument("--balance", type=float, default=0.1, help="MFD load-balancing weight")
    parser.add_argument("--ckpt-every", type=int, default=100, help="steps between checkpoints")
    parser.add_argument("--init-from", default=None,
                        help="start from this DFlash checkpoint directory (default: a new drafter)")
    parser.add_argument("--mask-token-id", type=int, default=None,
                        help="the drafter's mask token id (default: the tokenizer's mask token; without one, "
                             "the id published drafters use for this vocabulary, else the last id, with a warning)")
    parser.add_argument("--mode-noise", type=float, default=0.1,
                        help="with --init-from and K > 1: std of the mode embeddings relative to the "
                             "target's embedding rms (0 starts exactly at the checkpoint, but identical "
                             "modes then get identical gradients and never separate)")
    return parser


def train_drafter_main(argv: list[str] | None = None) -> list[dict]:
    """``mfd train-drafter``: a product (K = 1), MFD (K > 1) or Domino (``--kind dartree``) drafter on a distilled data set."""
    parser = _train_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    with _flag_errors(parser):
        return _train(args)


def _train(args) -> list[dict]:
    K = _positive_int("--modes", args.modes)
    if args.kind not in ("dflash", "dartree"):
        raise ValueError(f"--kind: must be dflash or dartree, got {args.kind!r}")
    if args.kind == "dartree" and K != 1:
        raise ValueError(f"--modes: a dartree (Domino) drafter has one mode, got --modes {K}")
    if args.rank is not None and (args.kind != "dartree" or args.rank < 1):
        raise ValueError(f"--rank: an integer >= 1, and only with --kind dartree (got {args.rank}, kind {args.kind})")
    for name in ("steps", "batch_size", "grad_accum", "blocks_per_seq", "ckpt_every"):
        _positive_int("--" + name.replace("_", "-"), getattr(args, name))
    if args.block_size is not None and args.block_size < 2:
        raise ValueError(f"--block-size: must be >= 2, got {args.block_size}")
    if args.layers is not None:
        _positive_int("--layers", args.layers)
    if not (math.isfinite(args.lr) and args.lr > 0):
        raise ValueError(f"--lr: must be > 0, got {args.lr}")
    if not (math.isfinite(args.balance) and args.balance >= 0):
        raise ValueError(f"--balance: must be finite and >= 0, got {args.balance}")
    if not (math.isfinite(args.mode_noise) and args.mode_noise >= 0):
        raise ValueError(f"--mode-noise: must be >= 0, got {args.mode_noise}")
    if args.warmup is not None and args.warmup < 0:
        raise ValueError(f"--warmup: must be >= 0, got {args.warmup}")
    if args.init_from is not None and not (Path(args.init_from) / "config.json").is_file():
        raise ValueError(f"--init-from: no DFlash checkpoint (config.json) in {args.init_from}")
    if args.mask_token_id is not None and (args.mask_token_id < 0 or args.init_from is not None):
        raise ValueError(f"--mask-token-id: must be a token id >= 0 and is not used with "
                         f"--init-from (the checkpoint has its own), got {args.mask_token_id}")
    from mfd_theory.llm.training.distill import load_distill_data

    seqs, plens, manifest = load_distill_data(args.data)
    _check_target_dir(args.target)
    check_out_dir(args.out, "--out")

    import torch

    from mfd_theory.llm.training.dist import setup, teardown
    from mfd_theory.llm.models.drafter import build_drafter, drafter_from_checkpoint
    from mfd_theory.llm.models.fingerprint import target_fingerprint
    from mfd_theory.llm.training.train import DrafterTrainConfig, train_drafter

    dist = setup(args.device)
    try:
        if args.quiet:
            _quiet_transformers()
        target, tok = load_target(args.target, dist.device, args.dtype)
        fp = target_fingerprint(target)
        if manifest.get("target_fingerprint") != fp:
            raise ValueError(f"--data: {args.data} was distilled from another target (fingerprint "
                             f"{manifest.get('target_fingerprint')}, this target's is {fp}; data distilled "
                             "before the fingerprint's version 2 records an older one: distill again)")
        if args.init_from is not None:
            try:
                if args.kind == "dartree":
                    from mfd_theory.llm.models.domino import domino_from_checkpoint

                    drafter = domino_from_checkpoint(args.init_from, target, args.rank)
                else:
                    drafter = drafter_from_checkpoint(args.init_from, target, K)
            except (OSError, RuntimeError) as exc:
                raise ValueError(f"--init-from: cannot load {args.init_from}: {exc}") from exc
            for name, mine, want in (("--block-size", drafter.block_size, args.block_size),
                                     ("--layers", len(drafter.layers), args.layers)):
                if want is not None and want != mine:
                    raise ValueError(f"{name}: {want} differs from the --init-from checkpoint's {mine}")
            if K > 1 and args.mode_noise > 0 and not drafter.mode_embeddings.detach().abs().sum():
                # Break the tie between identical modes (see --mode-noise), seeded: same on every rank.
                rms = float(target.get_input_embeddings().weight.float().pow(2).mean().sqrt())
                g = torch.Generator().manual_seed(args.seed)
                noise = torch.randn(drafter.mode_embeddings.shape, generator=g) * args.mode_noise * rms
                drafter.mode_embeddings.data.copy_(noise.to(drafter.mode_embeddings))
        else:
            mask = args.mask_token_id if args.mask_token_id is not None else getattr(tok, "mask_token_id", None)
            n_vocab = int(target.get_input_embeddings().num_embeddings)
            if mask is not None and not 0 <= int(mask) < n_vocab:
                raise ValueError(f"--mask-token-id: {mask} is not a token of the target's {n_vocab}-token vocabulary")
            drafter = build_drafter(target, args.block_size or 16, args.layers or 1, num_modes=K, seed=args.seed,
                                    mask_token_id=mask, kind=args.kind, rank=args.rank)
            if mask is None:
                import warnings

                warnings.warn(f"mask_token_id: the tokenizer has no mask token, so the drafter uses id "
                              f"{drafter.mask_token_id} as its mask; pass --mask-token-id to choose it",
                              stacklevel=2)
        drafter = drafter.float()  # float32 weights for the optimizer, whatever the target's dtype
        out = make_out_dir(args.out, "--out")  # every check passed: now the run directory is made
        cfg = DrafterTrainConfig(
            block_size=int(drafter.block_size), num_layers=len(drafter.layers), num_modes=K,
            batch_size=args.batch_size, blocks_per_seq=args.blocks_per_seq, steps=args.steps, lr=args.lr,
            warmup=args.warmup if args.warmup is not None else max(1, args.steps // 20), balance=args.balance,
            ckpt_every=args.ckpt_every, seed=args.seed, grad_accum=args.grad_accum)
        extra = {"kind": args.kind, "rank": getattr(drafter, "correction_rank", None),
                 "init_from": None if args.init_from is None else str(Path(args.init_from).resolve()),
                 "mode_noise": args.mode_noise if args.init_from is not None and K > 1 else None}
        curve = train_drafter(target, drafter, seqs, plens, out, cfg, progress=not args.quiet,
                              dist=dist, extra_config=extra)
        if len(curve):
            _say(dist, f"step {curve[-1]['step']}: loss {curve[-1]['loss']:.4f} (first step {curve[0]['loss']:.4f})")
        _say(dist, f"wrote {out / 'drafter'}")
        return curve
    finally:
        teardown(dist)


# --------------------------------------------------------------------------------------- eval


def _drafter_dir(path: str) -> Path:
    d = Path(path)
    if (d / "drafter" / "config.json").is_file():  # a train-drafter run directory
        d = d / "drafter"
    if not (d / "config.json").is_file():
        raise ValueError(f"--drafter: no drafter checkpoint (config.json) in {path}")
    return d


def _label(d: Path, taken: set) -> str:
    base = d.parent.name if d.name == "drafter" else d.name
    label, i = base, 2
    while label in taken:
        label, i = f"{base}-{i}", i + 1
    taken.add(label)
    return label


def _eval_parser() -> argparse.ArgumentParser:
    from mfd_theory.llm.decoding.generate import METHODS

    parser = _Parser(prog="mfd eval", description=eval_main.__doc__.split(": ", 1)[1])
    _common(parser)
    parser.add_argument("--drafter", action="append", required=True,
                        help="drafter checkpoint (or train-drafter run) directory; repeat for several")
    parser.add_argument("--prompts", nargs="+", required=True, help="JSONL prompt files (one data set each)")
    parser.add_argument("--out", required=True, help="output directory (eval.json, per_prompt.jsonl, figures)")
    parser.add_argument("--methods", nargs="+", default="ar,chain,ddtree,mfd",
                        help="subset of " + ",".join(METHODS) + ", comma- or space-separated (ar is always run)")
    parser.add_argument("--ddtree-on-mfd", default="true", choices=("true", "false"),
                        help="also run ddtree on each K > 1 drafter (the product tree over its per-position "
                             "marginals: the ablation that separates mixture training from the mixture tree)")
    parser.add_argument("--budgets", nargs="+", default="16,32,64",
                        help="tree budgets (nodes) for ddtree and mfd, comma- or space-separated")
    parser.add_argument("--temperatures", nargs="+", default="0,1",
                        help="sampling temperatures (0 = greedy), comma- or space-separated")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="answer length cap per turn")
    parser.add_argument("--max-prompts", type=int, default=None,
                        help="per data set, the first n prompts after a shuffle with seed 0 (default: all)")
    parser.add_argument("--enable-thinking", action="store_true", help="chat template with thinking on")
    parser.add_argument("--passes", type=int, default=3, help="timing passes (speedups carry their spread)")
    parser.add_argument("--profile-prompts", type=int, default=2,
                        help="calibration prompts that also time the round cost model (at most all of them; "
                             "0: no profile and no prediction)")
    parser.add_argument("--calibration-prompts", default=None, metavar="FILE.jsonl",
                        help="prompts decoded before the evaluation to predict every row's tau and speedup; "
                             "default: the first --calibration-count prompts of each data set (after the "
                             "shuffle), which are then not evaluated")
    parser.add_argument("--calibration-count", type=int, default=8,
                        help="calibration prompts per data set (or taken from --calibration-prompts)")
    parser.add_argument("--format", default="mfd", choices=("mfd", "spec-bench"),
                        help="mfd: eval.json, per_prompt.jsonl and figures; spec-bench: also every method's "
                             "answers in Spec-Bench's model_answer JSONL layout, OUT/spec_bench/run_<pass>/"
                             "<model_id>.jsonl (one file per timing pass, as Spec-Bench keeps one per run). "
                             "Their accept_lengths count the bonus token (tokens per target call, our tau); "
                             "new_tokens and wall_time are decode only (the prefill's first token and time left "
                             "out, as our speedup does). Spec-Bench's speedup is the mean per-answer tokens/s "
                             "over the baseline's (each row's speedup_spec_bench); ours, speedup, pools tokens "
                             "and time over the answers")
    parser.add_argument("--batch-size", type=int, default=1,
                        help="requests decoded together (1: one at a time, DDTree's protocol). Above 1 every cell "
                             "decodes the first turns of its prompts B at a time in one target forward per round, "
                             "and rows report throughput over all requests against batched AR at the same B")
    parser.add_argument("--budget-policy", default="per_request", choices=("per_request", "global", "off", "auto"),
                        help="with --batch-size above 1: per_request (every tree --budgets nodes), global (B times "
                             "the budget per round, spent on the global top prefixes), off (batched AR), auto (the "
                             "policy and size the batch cost model, measured on the calibration prompts before the "
                             "evaluation, predicts fastest)")
    return parser


def eval_main(argv: list[str] | None = None):
    """``mfd eval``: tau and speedup of drafters on prompt files under DDTree's protocol."""
    parser = _eval_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    with _flag_errors(parser):
        return _eval(args)


def _eval(args):
    from mfd_theory.llm.decoding.generate import METHODS

    methods = _list_tokens(args.methods)
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise ValueError(f"--methods: unknown {bad}; choose from {','.join(METHODS)}")
    methods = list(dict.fromkeys(methods))
    if "ar" not in methods:  # speedups and matches_ar are relative to ar
        methods = ["ar", *methods]
    budgets = _int_list("--budgets", args.budgets)
    temps = _float_list("--temperatures", args.temperatures)
    _positive_int("--max-new-tokens", args.max_new_tokens)
    _positive_int("--passes", args.passes)
    if args.max_prompts is not None:
        _positive_int("--max-prompts", args.max_prompts)
    if args.profile_prompts < 0:
        raise ValueError(f"--profile-prompts: must be >= 0, got {args.profile_prompts}")
    _positive_int("--calibration-count", args.calibration_count)
    _positive_int("--batch-size", args.batch_size)
    if args.batch_size == 1 and args.budget_policy != "per_request":
        raise ValueError(f"--budget-policy: {args.budget_policy} shares a budget across a batch; it needs "
                         "--batch-size above 1")
    if args.batch_size > 1:
        if "dartree" in methods:
            raise ValueError("--methods: dartree grows its trees depth by depth and is not batched; leave it out "
                             "with --batch-size above 1")
        if args.format != "mfd":
            raise ValueError("--format: spec-bench answer files are written for one-at-a-time decoding "
                             "(--batch-size 1)")
    from mfd_theory.llm.training.prompts import read_prompt_files, shuffle_take

    prompts = read_prompt_files(args.prompts)
    prompts = shuffle_take(prompts, max(sum(p.dataset == q.dataset for q in prompts) for p in prompts))
    calib_sets = _calibration_sets(prompts, args)  # {data set: calibration prompts}
    held = {(p.dataset, p.id) for ps in calib_sets.values() for p in ps} if args.calibration_prompts is None else set()
    prompts = shuffle_take([p for p in prompts if (p.dataset, p.id) not in held], args.max_prompts)
    _check_target_dir(args.target)
    ddirs = [_drafter_dir(p) for p in args.drafter]
    check_out_dir(args.out, "--out")

    from mfd_theory.results import Result, atomic_write_text

    from mfd_theory.llm.training.dist import setup, teardown
    from mfd_theory.llm.models.drafter import load_drafter
    from mfd_theory.llm.measure.evaluate import (
        first_ids, add_speedup_predictions, best_budgets, decode_cells, format_gains, format_rows, make_cells,
        mfd_gains, per_prompt_records, prediction_summary, rows_from_records, speedup_check,
    )
    from mfd_theory.llm.measure.predict import (
        attach_predictions, calibrate_acceptance, choose_budgets, load_predictions, predict_cells, prediction_check,
        prediction_lines, prompt_digest, write_predictions,
    )
    from mfd_theory.llm.measure.profile import measure_round_profile
    from mfd_theory.llm.models.target import TargetModel

    dist = setup(args.device)
    try:
        if args.quiet:
            _quiet_transformers()
        target_hf, tok = load_target(args.target, dist.device, args.dtype)
        drafters, taken, info = {}, set(), {}
        for d in ddirs:
            try:
                dr = load_drafter(d, target_hf).eval()
            except ValueError as exc:  # e.g. trained for another target; the library names its parameter
                raise ValueError(f"--drafter: {str(exc).split(': ', 1)[-1]}") from exc
            except (OSError, RuntimeError, KeyError, TypeError) as exc:
                raise ValueError(f"--drafter: cannot load {d}: {exc}") from exc
            label = _label(d, taken)
            drafters[label] = dr
            info[label] = {"dir": str(d), "K": int(dr.num_modes), "block_size": int(dr.block_size)}
        cells = make_cells(drafters, methods, budgets, ddtree_on_mfd=args.ddtree_on_mfd == "true")
        _check_cells(cells, methods, drafters)
        target = TargetModel(target_hf)
        from mfd_theory.llm.training.distill import check_context

        # every prompt (and its later turns, at worst) fits the target's context: checked here,
        # not half-way through the decoding
        check_context([*prompts, *(p for ps in calib_sets.values() for p in ps)], tok, args.enable_thinking,
                      args.max_new_tokens, target.max_positions)
        if args.batch_size > 1 and dist.world > 1:
            raise ValueError("--batch-size: batched evaluation runs in one process (drop torchrun)")
        out = make_out_dir(args.out, "--out")  # every check passed: now the output directory is made
        if args.batch_size > 1:
            return _eval_batched(args, target, tok, cells, prompts, calib_sets, methods, budgets, temps, info, out)
        profile, pred_path, speed, choices = None, out / "predictions.json", {}, []
        if calib_sets and any(c.method != "ar" for c in cells):
            # Everything the predictions use, measured before the first evaluated prompt: the round
            # cost model and the acceptance calibration, on calibration prompts only.
            first = {ds: [first_ids(p, tok, args.enable_thinking) for p in ps] for ds, ps in calib_sets.items()}
            evaluated = [{"index": i, "id": p.id, "dataset": p.dataset,
                          "sha256": prompt_digest(first_ids(p, tok, args.enable_thinking))}
                         for i, p in enumerate(prompts)]
            pooled = [ids for ids_ in first.values() for ids in ids_]
            profile = measure_round_profile(target, cells, pooled[: args.profile_prompts], max(2, args.max_new_tokens),
                                            name="round_profile", device=str(dist.device),
                                            model=Path(args.target).name, progress=not args.quiet, speed_out=speed)
            predictions, cal_prompts, summaries = [], [], []
            for ds in dict.fromkeys(p.dataset for p in prompts):
                key = ds if ds in first else None  # a --calibration-prompts file serves every data set
                cal = calibrate_acceptance(target, cells, first[key], temperatures=temps,
                                           max_new_tokens=args.max_new_tokens, seed=args.seed, eos_token_id=None,
                                           progress=not args.quiet)
                cal.prompts = [{"index": i, "id": p.id, "dataset": p.dataset, "sha256": prompt_digest(ids)}
                               for i, (p, ids) in enumerate(zip(calib_sets[key], first[key]))]
                predictions += predict_cells(cal, cells, temps, profile, dataset=ds)
                choices += choose_budgets(cal, cells, temps, profile, speed, on_grid=True, dataset=ds)
                cal_prompts += [c for c in cal.prompts if c not in cal_prompts]
                summaries.append(cal)
            merged = summaries[0]
            merged.entries = [e for c in summaries for e in c.entries]
            merged.prompts = cal_prompts
            if dist.main:  # every rank calibrates (they stay in step); one writes
                write_predictions(pred_path, predictions=predictions, choices=choices, cal=merged,
                                  evaluation_prompts=evaluated, profile=profile, config=vars(args), seed=args.seed,
                                  extra={"calibration_speed": [{"method": m, "drafter": d, "budget": n, "speedup": v}
                                                               for (m, d, n), v in speed.items()]})
        if dist.main and not args.quiet and profile is not None:
            print(f"wrote {pred_path} (before the evaluation)")
        eval_started = time.time()
        records = decode_cells(target, cells, prompts, temperatures=temps, max_new_tokens=args.max_new_tokens,
                               seed=args.seed, passes=args.passes, tokenizer=tok,
                               enable_thinking=args.enable_thinking, dist=dist, progress=not args.quiet)
        if not dist.main:
            return None
        rows = rows_from_records(records, cells)
        prediction = None
        if profile is not None:
            add_speedup_predictions(rows, records, profile)
            saved = load_predictions(pred_path)  # what was written before the evaluation
            attach_predictions(rows, saved)
            prediction = prediction_check(saved, rows)
        gains = mfd_gains(rows)
        best = best_budgets(rows)
        cfg = {k: v for k, v in vars(args).items()}
        cfg.update(methods=methods, budgets=budgets, temperatures=temps, world_size=dist.world)
        data = {"rows": rows, "mfd_gains": gains, "best_budgets": best,
                "prediction_check": prediction_summary(rows, records), "drafters": info,
                "datasets": {ds: sum(p.dataset == ds for p in prompts)
                             for ds in dict.fromkeys(p.dataset for p in prompts)},
                "n_processes": dist.world,
                "round_profile": profile.to_dict() if profile is not None else None,
                "speedup_check": speedup_check(rows) if profile is not None else None,
                "prediction": prediction, "evaluation_started_unix": eval_started}
        res = Result("eval", config=cfg, data=data, seed=args.seed)
        res.save(out / "eval.json")
        atomic_write_text(out / "per_prompt.jsonl",
                          "".join(json.dumps(r) + "\n" for r in per_prompt_records(records)))
        answer_files = []
        if args.format == "spec-bench":
            from mfd_theory.llm.measure.spec_bench import write_answers

            answer_files = write_answers(out / "spec_bench", records, tok)
        print("\n".join(format_rows(rows)))
        if best:
            print("\nbest budget per dataset, temperature, drafter and method:")
            for b in best:
                print(f"  {b['dataset']} T={b['temperature']:g} {b['drafter']} {b['method']}: N = {b['budget']} "
                      f"(tau {b['tau']:.2f}, speedup {b['speedup']:.2f})")
        gl = format_gains(gains)
        if gl:
            print("\n".join(gl))
        for line in prediction_lines(prediction):
            print(line)
        print(f"wrote {out / 'eval.json'}")
        print(f"wrote {out / 'per_prompt.jsonl'}")
        if answer_files:
            print(f"wrote {len(answer_files)} Spec-Bench answer files under {out / 'spec_bench'}/")
        for path in _figures(res, out):
            print(f"wrote {path}")
        return res
    finally:
        teardown(dist)


def _eval_batched(args, target, tok, cells, prompts, calib_sets, methods, budgets, temps, info, out):
    """``mfd eval --batch-size B``: batched rows (:mod:`mfd_theory.llm.measure.evaluate_batch`); with
    ``--budget-policy auto`` the plan of every tree cell is measured on the calibration prompts and
    written to ``batch_plans.json`` before the first evaluated prompt."""
    from mfd_theory.results import Result, atomic_write_text, to_jsonable

    from mfd_theory.llm.measure.evaluate import first_ids
    from mfd_theory.llm.measure.evaluate_batch import decode_batch_cells

    b = int(args.batch_size)
    plans = {}
    if args.budget_policy == "auto":
        from mfd_theory.llm.measure.batch_predict import make_batch_plan, measure_batch_profile, predict_batch_acceptance

        pooled = [first_ids(p, tok, args.enable_thinking) for ps in calib_sets.values() for p in ps]
        if not pooled:
            raise ValueError("--budget-policy: auto needs calibration prompts (--calibration-count or "
                             "--calibration-prompts)")
        saved = {}
        for c in cells:
            key = (c.method, c.drafter_label)
            if c.method in ("ar", "chain") or key in plans:
                continue
            prof = measure_batch_profile(target, c.drafter, c.method, pooled, [b], budgets, args.max_new_tokens,
                                         seed=args.seed)
            acc = predict_batch_acceptance(target, c.drafter, c.method, pooled, [b], budgets, args.max_new_tokens,
                                           seed=args.seed)
            plans[key] = make_batch_plan(prof, acc)
            saved[f"{c.method}/{c.drafter_label}"] = {"profile": prof.to_dict(), "plan": plans[key].table[b],
                                                      "choice": list(plans[key].choose(b))}
        atomic_write_text(out / "batch_plans.json", json.dumps(to_jsonable(
            {"written_at_unix": time.time(), "batch_size": b, "plans": saved}), indent=1) + "\n")
        if not args.quiet:
            print(f"wrote {out / 'batch_plans.json'} (before the evaluation)")
    eval_started = time.time()
    rows = decode_batch_cells(target, cells, prompts, batch_size=b, policy=args.budget_policy, temperatures=temps,
                              max_new_tokens=args.max_new_tokens, seed=args.seed, passes=args.passes, tokenizer=tok,
                              enable_thinking=args.enable_thinking, plans=plans, progress=not args.quiet)
    cfg = dict(vars(args))
    cfg.update(methods=methods, budgets=budgets, temperatures=temps)
    data = {"rows": rows, "drafters": info, "batch_size": b, "budget_policy": args.budget_policy,
            "datasets": {ds: sum(p.dataset == ds for p in prompts) for ds in dict.fromkeys(p.dataset for p in prompts)},
            "evaluation_started_unix": eval_started}
    res = Result("eval", config=cfg, data=data, seed=args.seed)
    res.save(out / "eval.json")
    print(f"batch size {b}, budget policy {args.budget_policy} (first turns; tokens/s over all requests)")
    for r in rows:
        extra = f", speedup {r['speedup']:.2f}" if "speedup" in r else ""
        print(f"  {r['dataset']} T={r['temperature']:g} {r['drafter']} {r['method']} N={r['budget']}: "
              f"tau {r['tau'] or float('nan'):.2f}, {r['tokens_per_s']:.1f} tok/s{extra}, latency {r['latency_s']:.3f} s")
    print(f"wrote {out / 'eval.json'}")
    return res


def _check_cells(cells: list, methods: list[str], drafters: dict) -> None:
    """Refuse a request that would silently decode nothing: a method no drafter can run (mfd needs
    K > 1, dartree a Domino drafter, chain/ddtree a block drafter), or a drafter none of the
    methods runs."""
    for m in methods:
        if m != "ar" and not any(c.method == m for c in cells):
            kinds = ", ".join(f"{label} (K = {d.num_modes}{', Domino' if getattr(d, 'kind', '') == 'dartree' else ''})"
                              for label, d in drafters.items())
            raise ValueError(f"--methods: no drafter can run {m!r} (drafters: {kinds}); mfd needs K > 1, "
                             "dartree a Domino drafter, chain a block drafter, ddtree a block drafter with K = 1 "
                             "(or any K with --ddtree-on-mfd true)")
    for label in drafters:
        if not any(c.drafter_label == label for c in cells):
            raise ValueError(f"--drafter: {label} runs none of --methods {','.join(methods)} "
                             "(a Domino drafter runs dartree only; a K > 1 drafter runs ddtree only with --ddtree-on-mfd true)")


def _calibration_sets(prompts: list, args) -> dict:
    """{data set: calibration prompts}: the first ``--calibration-count`` prompts of each data set
    of the shuffled ``prompts`` (held back from the evaluation), or, with
    ``--calibration-prompts``, that file's first prompts under the key None (serving every data
    set). Empty when nothing is predicted (``--profile-prompts 0``)."""
    from mfd_theory.llm.training.prompts import read_prompt_files, shuffle_take

    if args.profile_prompts == 0:
        if args.calibration_prompts is not None:
            raise ValueError("--calibration-prompts: needs --profile-prompts > 0 (nothing is predicted without "
                             "the round profile)")
        return {}
    n = args.calibration_count
    if args.calibration_prompts is not None:
        own = shuffle_take(read_prompt_files([args.calibration_prompts]), n)
        texts = {p.messages for p in prompts}
        shared = [p.id for p in own if p.messages in texts]
        if shared:
            raise ValueError(f"--calibration-prompts: {len(shared)} prompt(s) also appear in --prompts "
                             f"(ids {shared[:5]}); calibration and evaluation prompts must be disjoint")
        return {None: own}
    out = {}
    for ds in dict.fromkeys(p.dataset for p in prompts):
        group = [p for p in prompts if p.dataset == ds]
        if len(group) <= n:
            raise ValueError(f"--calibration-count: data set {ds!r} has {len(group)} prompts; holding back {n} "
                             "for calibration leaves none to evaluate (lower it, or give --calibration-prompts)")
        out[ds] = group[:n]
    return out


def _figures(res, out: Path) -> list[Path]:
    """tau and measured speedup against the budget, one figure per data set
    (``tau_speedup_vs_budget-<data set>.png``), each naming the run it was drawn from."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    from mfd_theory.figures import save_figure
    from mfd_theory.figures.e2e import eval_figure

    rows = res.data["rows"]
    paths = []
    for ds in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == ds and r["speedup"] is not None]
        if not any(r["method"] in ("ddtree", "mfd") for r in mine):
            continue
        fig = eval_figure(res, ds)
        paths.append(Path(save_figure(fig, out / f"tau_speedup_vs_budget-{ds}.png")))
        plt.close(fig)
    return paths
