"""The torch half of ``mfd train-drafter`` (:mod:`mfd_theory.commands.pipeline.train_drafter`): load the
target, check the data was distilled from it, build (or load) the drafter, train."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from mfd_theory.runs.pipeline import say
from mfd_theory.llm.models.target import load_local_target
from mfd_theory.llm.models.drafter import attention_layout, build_drafter, drafter_from_checkpoint
from mfd_theory.llm.models.fingerprint import hf_model, target_fingerprint
from mfd_theory.llm.training.dist import setup, teardown
from mfd_theory.llm.training.train import DrafterTrainConfig, train_drafter
from mfd_theory.llm.measure.predict import prompt_digest
from mfd_theory.results import atomic_write_text, provenance
from mfd_theory.validation import make_out_dir

__all__ = ["DISTILLED_PROMPTS", "RUN_RECORD", "append_run_record", "distilled_prompts", "frequent_tokens", "init_layers_from_target", "train",
           "write_distilled_prompts"]


def train(config, data, out_dir, progress: bool = True) -> list[dict]:
    """Train the drafter ``config`` (a :class:`~mfd_theory.commands.pipeline.train_drafter.TrainDrafterConfig`)
    asks for on ``data`` (sequences, prompt lengths, manifest) into ``out_dir``; the loss curve."""
    seqs, plens, manifest = data
    dist = setup(config.device)
    try:
        target, tok = load_local_target(config.target, dist.device, config.dtype)
        fp = target_fingerprint(target)
        if manifest.get("target_fingerprint") != fp:
            raise ValueError(f"--data: {config.data} was distilled from another target (fingerprint "
                             f"{manifest.get('target_fingerprint')}, this target's is {fp}; data distilled "
                             "before the fingerprint's version 2 records an older one: distill again)")
        vocab_note = copy_note = None
        if config.init_from is not None:
            drafter = _from_checkpoint(config, target)
        else:
            drafter = _new(config, target, tok)
            if config.init_layers == "target":
                copied = init_layers_from_target(drafter, target)
                copy_note = f"{len(copied)} tensors: {_copy_summary(copied)}"
                say(dist, f"--init-layers target: copied {copy_note}")
            if config.draft_vocab:
                ids, vocab_note = frequent_tokens(seqs, plens, config.draft_vocab,
                                                  int(target.get_input_embeddings().num_embeddings))
                drafter.set_draft_vocab(ids)
                say(dist, f"draft vocabulary: {len(ids)} tokens cover {vocab_note['coverage']:.1%} of the "
                          f"{vocab_note['answer_tokens']} answer tokens")
        drafter = drafter.float()  # float32 weights for the optimizer, whatever the target's dtype
        out = make_out_dir(out_dir, "--out")  # every check passed: now the run directory is made
        K = config.modes
        cfg = DrafterTrainConfig(
            block_size=int(drafter.block_size), num_layers=len(drafter.layers), num_modes=K,
            batch_size=config.batch_size, blocks_per_seq=config.blocks_per_seq, steps=config.steps, lr=config.lr,
            warmup=config.warmup if config.warmup is not None else max(1, config.steps // 20),
            balance=config.balance, ckpt_every=config.ckpt_every, seed=config.seed, grad_accum=config.grad_accum,
            objective=config.objective, wta_eps=config.wta_eps, weight_decay=config.weight_decay,
            context=config.context)
        features = None
        t_feat = time.perf_counter()
        if config.features_dir is not None:
            if dist.active:  # every rank would write the one file at once
                raise ValueError("--features-dir: one process only (under torchrun the features are computed in "
                                 "memory on every rank; leave --features-dir out)")
            # the sequences train_drafter keeps (a response of at least one block), so the file is theirs
            keep = [i for i, (x, p) in enumerate(zip(seqs, plens)) if len(x) - p >= int(drafter.block_size)]
            seqs, plens = [seqs[i] for i in keep], np.asarray(plens)[keep]
            from mfd_theory.llm.training.train import TargetFeatures
            from mfd_theory.numerics import current_numerics

            features = TargetFeatures.cached(hf_model(target), seqs, drafter.target_layer_ids, config.features_dir,
                                             key={"target_fingerprint": fp, "numerics": current_numerics()},
                                             progress=progress)
            say(dist, f"target features: {time.perf_counter() - t_feat:.0f} s (read or computed)")
        extra = {"kind": config.kind, "rank": getattr(drafter, "correction_rank", None),
                 "init_from": None if config.init_from is None else str(Path(config.init_from).resolve()),
                 "mode_noise": config.mode_noise if config.init_from is not None and K > 1 else None,
                 "init_layers": config.init_layers if config.init_from is None else None,
                 "draft_vocab": vocab_note}
        if copy_note is not None:
            extra["init_copied"] = copy_note  # what the copy took (a run started before it took less is refused)
        qkv_bias, o_bias, qk_norm = attention_layout(drafter.config)
        if not qk_norm or o_bias != qkv_bias:
            # recorded only where the layers are not DFlash's Qwen3 ones (a Qwen2 or Llama target), so
            # a run directory made before the layout followed the target is refused, not resumed
            # into a drafter of other shapes; a Qwen3 target's runs resume as before
            extra["attention_layout"] = {"attention_bias": qkv_bias, "o_proj_bias": o_bias, "qk_norm": qk_norm}
        if "selection" in manifest:  # a corpus: what of it was read
            extra["corpus"] = {"corpus_sha256": manifest.get("corpus_sha256"), **manifest["selection"]}
        t0 = time.perf_counter()
        curve = train_drafter(target, drafter, seqs, plens, out, cfg, progress=progress, dist=dist, extra_config=extra,
                              features=features)
        if dist.main and (out / "drafter").is_dir():
            write_distilled_prompts(out / "drafter", seqs, plens)
        if dist.main:
            append_run_record(out, seconds=time.perf_counter() - t0, curve=curve, processes=dist.world)
        if len(curve):
            say(dist, f"step {curve[-1]['step']}: loss {curve[-1]['loss']:.4f} (first step {curve[0]['loss']:.4f})")
        say(dist, f"wrote {out / 'drafter'}")
        return curve
    finally:
        teardown(dist)


#: in a train-drafter run directory: one entry per process that trained in it (a resumed run adds one)
RUN_RECORD = "run_record.json"


def append_run_record(out: Path, *, seconds: float, curve: list[dict], processes: int) -> dict:
    """Add this process's entry to ``out/run_record.json``: its provenance (git sha, versions, host,
    numerics), its wall seconds of training (target features excluded) and the step it reached;
    ``train_seconds`` sums the entries. Written atomically; an unreadable file is an error, not
    overwritten."""
    path = Path(out) / RUN_RECORD
    record = {"sessions": []}
    if path.is_file():
        try:
            record = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"--out: corrupt {path}: {exc}") from exc
    record["sessions"].append({"provenance": provenance(), "seconds": round(float(seconds), 3), "processes": int(processes),
                               "last_step": max((int(r["step"]) for r in curve), default=None)})
    record["train_seconds"] = round(sum(float(e["seconds"]) for e in record["sessions"]), 3)
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")
    return record


#: beside a trained drafter: the token hashes of every prompt its training data answered (``mfd eval``
#: refuses to calibrate on them: a prediction must not be scored on what the drafter was fitted to)
DISTILLED_PROMPTS = "distilled_prompts.json"


def write_distilled_prompts(directory: Path, seqs, plens) -> Path:
    """Write the hashes of the training sequences' prompts (each sequence's first ``plen`` tokens)."""
    digests = sorted({prompt_digest(list(s[:p])) for s, p in zip(seqs, plens)})
    path = Path(directory) / DISTILLED_PROMPTS
    atomic_write_text(path, json.dumps({"sha256": digests}) + "\n")
    return path


def distilled_prompts(directory: Path) -> set[str]:
    """The prompt hashes a drafter checkpoint records (empty for a drafter that records none)."""
    path = Path(directory) / DISTILLED_PROMPTS
    if not path.is_file():
        return set()
    try:
        return set(json.loads(path.read_text())["sha256"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--drafter: unreadable {path}: {exc}") from exc


def frequent_tokens(seqs, plens, n: int, vocab: int) -> tuple[list[int], dict]:
    """The ``n`` target ids most frequent in the answers (each sequence after its prompt), ties to
    the lower id, and a note of what they cover: ``{"size", "answer_tokens", "coverage", "distinct"}``
    (coverage: the share of answer tokens among them). Fewer than ``n`` distinct answer tokens:
    the rest are the lowest ids not seen, so the vocabulary has ``n`` entries."""
    counts = np.zeros(vocab, dtype=np.int64)
    for s, p in zip(seqs, plens):
        a = np.asarray(s[int(p):], dtype=np.int64)
        if a.size and (a.min() < 0 or a.max() >= vocab):
            raise ValueError(f"--data: a token id outside the target's {vocab}-token vocabulary")
        counts += np.bincount(a, minlength=vocab)
    n = min(int(n), vocab)
    order = np.lexsort((np.arange(vocab), -counts))  # by count down, then id up
    ids = np.sort(order[:n])
    total = int(counts.sum())
    note = {"size": int(n), "answer_tokens": total, "distinct": int((counts > 0).sum()),
            "coverage": float(counts[ids].sum() / total) if total else 0.0}
    return [int(i) for i in ids], note


def init_layers_from_target(drafter, target) -> dict[str, str]:
    """Start the drafter as a true copy of the target's top: draft layer j takes every tensor of
    target layer n - D + j (q/k/v/o projections with their biases, q/k norms where the target has
    them, the MLP, both layer norms), and the drafter's final ``norm`` takes the target's final
    norm, so the draft layers over a block with no context compute what the target's last D layers
    and its norm compute over it (without the causal mask). ``fc`` and ``hidden_norm``, which the
    target has no counterpart of, keep their initialisation.

    Refuses, naming ``--init-layers``, a drafter that cannot hold such a copy: more layers than
    the target, or a layer whose tensors differ from the target layer's in names or shapes (a
    drafter built with ``layout="qwen3"`` for a Qwen2 or Llama target), or another norm epsilon or
    activation. Returns {drafter tensor: target tensor} for every tensor copied."""
    from mfd_theory.llm.models.drafter import decoder_layers, final_norm

    hf = getattr(target, "model", target) if not isinstance(target, torch.nn.Module) else target
    layers, norm = decoder_layers(hf), final_norm(hf)
    if layers is None or norm is None:
        raise ValueError(f"--init-layers: cannot find the decoder layers and final norm of {type(hf).__name__}")
    first = len(layers) - len(drafter.layers)
    if first < 0:
        raise ValueError(f"--init-layers: the drafter has {len(drafter.layers)} layers, the target only {len(layers)}")
    tcfg = hf.config.get_text_config() if hasattr(hf.config, "get_text_config") else hf.config
    for key in ("rms_norm_eps", "hidden_act"):
        if getattr(drafter.config, key, None) != getattr(tcfg, key, None):
            raise ValueError(f"--init-layers: the drafter's {key} {getattr(drafter.config, key, None)!r} differs "
                             f"from the target's {getattr(tcfg, key, None)!r}")
    prefix = next((n[:-len("layers")] for n, m in hf.named_modules() if m is layers), "")
    norm_prefix = next((n for n, m in hf.named_modules() if m is norm), "norm")
    pairs = []  # (drafter tensor, its name, target tensor, its name)
    for j, layer in enumerate(drafter.layers):
        i = first + j
        src, mine = layers[i].state_dict(), layer.state_dict()
        diff = sorted(set(src) ^ set(mine)) + sorted(k for k in set(src) & set(mine) if src[k].shape != mine[k].shape)
        if diff:
            raise ValueError(f"--init-layers: draft layer {j} cannot hold a true copy of target layer {i} "
                             f"(tensors that differ in name or shape: {', '.join(diff)}); build it with the "
                             "target's attention layout (build_drafter's layout='target')")
        pairs += [(mine[k], f"layers.{j}.{k}", src[k], f"{prefix}layers.{i}.{k}") for k in sorted(mine)]
    dst_norm, src_norm = drafter.norm.state_dict(), norm.state_dict()
    if set(dst_norm) != set(src_norm) or any(dst_norm[k].shape != src_norm[k].shape for k in dst_norm):
        raise ValueError(f"--init-layers: the drafter's final norm ({sorted(dst_norm)}) cannot hold the "
                         f"target's ({sorted(src_norm)})")
    pairs += [(dst_norm[k], f"norm.{k}", src_norm[k], f"{norm_prefix}.{k}") for k in sorted(dst_norm)]
    with torch.no_grad():
        for dst, _, src_t, _ in pairs:
            dst.copy_(src_t)  # state_dict tensors share storage with the parameters
    return {dname: sname for _, dname, _, sname in pairs}


def _copy_summary(copied: dict[str, str]) -> str:
    """One line of what :func:`init_layers_from_target` copied: the target layers and the kinds of tensor."""
    import re

    src = sorted({int(m.group(1)) for v in copied.values() if (m := re.search(r"layers\.(\d+)\.", v))})
    kinds = sorted({re.sub(r"^layers\.\d+\.", "", k) for k in copied if k.startswith("layers.")})
    return (f"target layers {src[0]}..{src[-1]} -> draft layers 0..{len(src) - 1}: {', '.join(kinds)}; "
            f"final norm {copied.get('norm.weight', 'not copied')}")


def _from_checkpoint(config, target):
    """The ``--init-from`` drafter, with K modes (their embeddings spread by ``--mode-noise``) or a
    Domino correction head of ``--rank``."""
    K = config.modes
    try:
        if config.kind == "dartree":
            from mfd_theory.llm.models.domino import domino_from_checkpoint

            drafter = domino_from_checkpoint(config.init_from, target, config.rank)
        else:
            drafter = drafter_from_checkpoint(config.init_from, target, K)
    except (OSError, RuntimeError) as exc:
        raise ValueError(f"--init-from: cannot load {config.init_from}: {exc}") from exc
    for name, mine, want in (("--block-size", drafter.block_size, config.block_size),
                             ("--layers", len(drafter.layers), config.layers)):
        if want is not None and want != mine:
            raise ValueError(f"{name}: {want} differs from the --init-from checkpoint's {mine}")
    if K > 1 and config.mode_noise > 0 and not drafter.mode_embed.detach().abs().sum():
        # Break the tie between identical modes (see --mode-noise), seeded: same on every rank.
        rms = float(target.get_input_embeddings().weight.float().pow(2).mean().sqrt())
        g = torch.Generator().manual_seed(config.seed)
        noise = torch.randn(drafter.mode_embed.shape, generator=g) * config.mode_noise * rms
        drafter.mode_embed.data.copy_(noise.to(drafter.mode_embed))
    return drafter


def _new(config, target, tok):
    """A new drafter for ``target``, its mask token from ``--mask-token-id`` or the tokenizer (a
    warning names the id used when the tokenizer has none)."""
    mask = config.mask_token_id if config.mask_token_id is not None else getattr(tok, "mask_token_id", None)
    n_vocab = int(target.get_input_embeddings().num_embeddings)
    if mask is not None and not 0 <= int(mask) < n_vocab:
        raise ValueError(f"--mask-token-id: {mask} is not a token of the target's {n_vocab}-token vocabulary")
    drafter = build_drafter(target, config.block_size or 16, config.layers or 1, num_modes=config.modes,
                            seed=config.seed, mask_token_id=mask, kind=config.kind, rank=config.rank,
                            target_layer_ids=list(config.target_layers) or None)
    if mask is None:
        warnings.warn(f"mask_token_id: the tokenizer has no mask token, so the drafter uses id "
                      f"{drafter.mask_token_id} as its mask; pass --mask-token-id to choose it", stacklevel=2)
    return drafter
