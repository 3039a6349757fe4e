"""Training: the small Qwen3 target, a plain draft LM, and block drafters (product and MFD).

One resumable loop, :func:`run_training` (batches a function of (seed, step), checkpoints swapped in
through a temporary directory, the run's config recorded and checked), trains them all; drafters
learn DFlash's weighted cross-entropy (K = 1) or, for K > 1, the exact mixture likelihood with a
load-balancing penalty or a relaxed winner-take-all objective, :func:`block_loss`. Design: docs/own-target.md (``mfd train-drafter``), docs/results.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from mfd_theory.llm.models.fingerprint import hf_model as _hf_model, target_fingerprint
from mfd_theory.results import atomic_write_text
from mfd_theory.validation import check_choice, check_int, check_real

__all__ = [
    "TargetFeatures",
    "LMConfig",
    "LMTrainConfig",
    "DrafterTrainConfig",
    "OBJECTIVES",
    "config_hash",
    "run_training",
    "train_lm",
    "load_lm",
    "make_distill_data",
    "train_drafter",
    "block_loss",
    "position_weights",
    "default_gamma",
    "left_align_context",
    "mode_diagnostics",
]


# ---------------------------------------------------------------------------------------------
# configs


@dataclasses.dataclass(frozen=True)
class LMConfig:
    """Architecture of a small causal LM (the target, or a draft LM for HF assisted generation):
    ``arch`` "qwen3" is a Qwen3ForCausalLM, "qwen3_5" a hybrid Qwen3_5ForCausalLM (every fourth
    layer full attention, the others Gated DeltaNet, the last layer attention if fewer than four)."""

    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 384
    max_position_embeddings: int = 1024
    arch: str = "qwen3"


@dataclasses.dataclass(frozen=True)
class LMTrainConfig:
    seq_len: int = 128
    batch_size: int = 16
    steps: int = 400
    lr: float = 3e-3
    warmup: int = 20
    weight_decay: float = 0.0
    ckpt_every: int = 100
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class DrafterTrainConfig:
    block_size: int = 8
    num_layers: int = 1
    num_modes: int = 1
    batch_size: int = 16            # sequences per step
    blocks_per_seq: int = 4         # block starts drawn per sequence (they share one target pass)
    steps: int = 400
    lr: float = 3e-3
    warmup: int = 20
    gamma: float | None = None      # position-weight decay; None: DFlash's choice for the block size
    balance: float = 0.1            # MFD load-balancing weight of the mixture objective (0 disables)
    ckpt_every: int = 100
    seed: int = 0
    grad_accum: int = 1             # micro-batches of batch_size sequences per optimizer step
    objective: str = "mixture"      # K > 1: "mixture" likelihood, or "wta" (each block trains its best mode)
    wta_eps: float = 0.05           # wta: share of every block spread over the modes that lost it
    # the frozen target's hidden states of every training sequence are computed once when they fit
    # in this many MiB (the layers the drafter reads), else once per step for the step's batch
    feature_cache_mb: int = 2048
    # self-distillation: the share of each position's log-likelihood taken on the target's own
    # distribution there (its soft_top_k most likely tokens, renormalised) instead of on the
    # sequence's token; 0 trains on the tokens alone (cross-entropy), 1 on the distribution alone
    soft_share: float = 0.0
    soft_top_k: int = 32
    weight_decay: float = 0.0       # AdamW's decoupled weight decay
    # the block starts of a sequence share one pass over its context: its keys/values are made once
    # and every block attends to the rows before its start through a block-sparse mask ("shared"),
    # or each block gets its own left-aligned copy of the context ("per_block", the slow, obvious twin)
    context: str = "per_block"

    def __post_init__(self):
        check_choice("objective", self.objective, OBJECTIVES)
        check_real("weight_decay", self.weight_decay, 0)
        check_choice("context", self.context, CONTEXT_MODES)
        check_real("wta_eps", self.wta_eps, 0, 1, high_open=True)
        check_int("feature_cache_mb", self.feature_cache_mb, 0)
        check_real("soft_share", self.soft_share, 0, 1)
        check_int("soft_top_k", self.soft_top_k, 1)

    def recorded(self) -> dict:
        """The fields as a run records (and :func:`config_hash` hashes) them: the WTA fields only
        when ``objective`` is "wta", so a mixture run records what it recorded before they existed."""
        out = dataclasses.asdict(self)
        if self.objective == "mixture":
            del out["objective"], out["wta_eps"]
        del out["feature_cache_mb"]  # a memory cap: the run records which way its features were made
        if self.soft_share == 0:  # runs on the tokens alone record what they recorded before
            del out["soft_share"], out["soft_top_k"]
        if self.weight_decay == 0:  # likewise runs without weight decay
            del out["weight_decay"]
        del out["context"]  # the same loss either way (tests/test_train.py compares them)
        return out


#: the drafter training objectives for K > 1 (:func:`block_loss`)
OBJECTIVES = ("mixture", "wta")
#: how a training step's blocks read their context (:class:`DrafterTrainConfig`)
CONTEXT_MODES = ("per_block", "shared")


def _recorded(part: Any) -> Any:
    if hasattr(part, "recorded"):
        return part.recorded()
    return dataclasses.asdict(part) if dataclasses.is_dataclass(part) else part


def config_hash(*parts: Any) -> str:
    """Short stable hash of JSON-able parts, used to name cache directories."""
    blob = json.dumps([_recorded(p) for p in parts], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


# ---------------------------------------------------------------------------------------------
# the resumable loop


def _lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, frac))))


def _trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _write_state_dir(run_dir: Path, model, optimizer, step: int, curve: list) -> None:
    from safetensors.torch import save_file

    final = run_dir / "train_state"
    tmp = run_dir / f"train_state.tmp-{os.getpid()}"
    old = run_dir / "train_state.old"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in _trainable_state(model).items()},
              str(tmp / "weights.safetensors"))
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, "loss_curve": curve}))
    # Swap in: the previous checkpoint survives as .old until the new one is in place.
    if final.exists():
        if old.exists():
            shutil.rmtree(old)
        os.replace(final, old)
    os.replace(tmp, final)
    if old.exists():
        shutil.rmtree(old)


def _read_state_dir(run_dir: Path, model, optimizer) -> tuple[int, list]:
    from safetensors.torch import load_file

    for name in ("train_state", "train_state.old"):
        d = run_dir / name
        if not (d / "state.json").is_file():
            continue
        try:
            state = json.loads((d / "state.json").read_text())
            weights = load_file(str(d / "weights.safetensors"))
            opt_state = torch.load(d / "optimizer.pt", weights_only=False, map_location="cpu")
        except Exception as exc:  # noqa: BLE001 - any unreadable file means a corrupt checkpoint
            raise ValueError(f"run_dir: corrupt training checkpoint in {d}: {exc}") from exc
        renamed = getattr(model, "legacy_parameter_names", {})  # a checkpoint written before a rename
        weights = {renamed.get(n, n): v for n, v in weights.items()}
        expected = {n for n, p in model.named_parameters() if p.requires_grad}
        if set(weights) != expected:
            raise ValueError(
                f"run_dir: checkpoint {d} holds parameters {sorted(set(weights) ^ expected)[:4]}... "
                "that do not match the model being trained"
            )
        model.load_state_dict(weights, strict=False)
        optimizer.load_state_dict(opt_state)
        return int(state["step"]), list(state["loss_curve"])
    return 0, []


def _config_changes(saved: dict, new: dict, limit: int = 4) -> str:
    """The settings that differ between two run configs, as ``name: X there, Y now`` (nested keys
    dotted, ``train.num_modes``), the first ``limit`` of them and how many more."""
    def flat(d, head=""):
        out = {}
        for k, v in d.items():
            if isinstance(v, dict):
                out.update(flat(v, f"{head}{k}."))
            else:
                out[f"{head}{k}"] = v
        return out

    a, b = flat(saved), flat(new)
    missing = object()
    diff = [k for k in sorted(set(a) | set(b), key=lambda k: (k not in b, k)) if a.get(k, missing) != b.get(k, missing)]

    def shown(v):
        return "unset" if v is missing else (json.dumps(v) if not isinstance(v, (list, dict)) or len(json.dumps(v)) <= 40
                                             else "another value")
    parts = [f"{k}: {shown(a.get(k, missing))} there, {shown(b.get(k, missing))} now" for k in diff[:limit]]
    if len(diff) > limit:
        parts.append(f"{len(diff) - limit} more")
    return "; ".join(parts)


def _check_run_config(run_dir: Path, config: dict, dist=None) -> None:
    # Under torchrun rank 0 writes the file first; the others then check it like a rerun would.
    if dist is not None and dist.active:
        if dist.main:
            _check_run_config(run_dir, config)
        dist.barrier()
        if not dist.main:
            _check_run_config(run_dir, config)
        return
    p = run_dir / "train_config.json"
    if p.is_file():
        try:
            saved = json.loads(p.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"run_dir: corrupt {p}: {exc}") from exc
        new = json.loads(json.dumps(config, default=str))
        if saved != new:
            raise ValueError(f"run_dir: {run_dir} holds a run made with other settings ({_config_changes(saved, new)}); "
                             "give another directory, or the settings it was made with")
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(p, json.dumps(config, default=str, indent=1))


def run_training(
    run_dir: str | Path,
    model: torch.nn.Module,
    loss_fn: Callable[[int], tuple[torch.Tensor, dict]],
    *,
    steps: int,
    lr: float,
    warmup: int,
    ckpt_every: int,
    config: dict,
    weight_decay: float = 0.0,
    progress: bool = True,
    desc: str = "train",
    stop_after: int | None = None,
    grad_accum: int = 1,
    dist=None,
) -> list[dict]:
    """Train ``model``'s trainable parameters with AdamW, resuming from ``run_dir/train_state``.

    ``loss_fn(step)`` returns the loss and a dict of scalars to log; it must derive its batch
    from ``step`` alone. With ``grad_accum`` > 1 it is called as ``loss_fn(step, micro)`` for
    each micro-batch and the gradients add up (each loss is divided by ``grad_accum``).
    ``stop_after`` stops (with a checkpoint) after that many steps of this call, which is how the
    tests simulate an interruption. Returns the loss curve (one dict per step: step, loss, lr and
    whatever loss_fn logged).

    ``dist`` (a :class:`~mfd_theory.llm.training.dist.Dist`) under torchrun: loss_fn must then run the
    model through DistributedDataParallel on this rank's share of the batch; rank 0 alone writes
    checkpoints and shows the progress bar, every rank reads the checkpoint on resume, and the
    logged numbers are means over ranks.
    """
    from tqdm.auto import tqdm

    run_dir = Path(run_dir)
    check_int("steps", steps, 1)
    grad_accum = check_int("grad_accum", grad_accum, 1)
    main = dist is None or dist.main
    params, opt, start, curve = _open_run(run_dir, model, config, lr, weight_decay, dist)

    def save(at: int) -> None:
        if main:
            _write_state_dir(run_dir, model, opt, at, curve)
        if dist is not None:
            dist.barrier()

    model.train()
    bar = tqdm(total=steps, initial=start, desc=desc, disable=not (progress and main), leave=False)
    step = start
    try:
        while step < steps:
            if stop_after is not None and step - start >= stop_after:
                break
            cur_lr = _lr_at(step, steps, lr, warmup)
            for g in opt.param_groups:
                g["lr"] = cur_lr
            opt.zero_grad(set_to_none=True)
            total, logs = _accumulate(loss_fn, step, grad_accum)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            if dist is not None and dist.active:
                total = dist.mean(total)
                logs = {k: dist.mean(v) for k, v in logs.items()}
            curve.append({"step": step, "loss": total, "lr": cur_lr, **logs})
            # no redraw of its own (refresh=False): the update's, at most every TQDM_MININTERVAL
            # seconds, shows it (off a terminal a redraw per step was a log line per step)
            bar.set_postfix(loss=f"{curve[-1]['loss']:.3f}", refresh=False)
            bar.update(1)
            if step % ckpt_every == 0 and step < steps:
                save(step)
    except KeyboardInterrupt:
        save(step)
        raise
    finally:
        bar.close()
        model.eval()
    if step < steps:
        save(step)
    return curve


def _open_run(run_dir: Path, model: torch.nn.Module, config: dict, lr: float, weight_decay: float, dist):
    """(trainable parameters, AdamW over them, step to resume at, loss curve so far): the run
    directory's config checked (or recorded), then its checkpoint read back if there is one."""
    try:
        _check_run_config(run_dir, config, dist)
    except OSError as exc:
        raise ValueError(f"run_dir: cannot write {run_dir}: {exc}") from exc
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model: has no trainable parameters")
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.98))
    start, curve = _read_state_dir(run_dir, model, opt)
    return params, opt, start, curve


def _accumulate(loss_fn, step: int, grad_accum: int) -> tuple[float, dict]:
    """Backward through each of ``step``'s ``grad_accum`` micro-batches (each loss over
    ``grad_accum``, so the gradients add up to the batch's); returns the loss and logs so scaled."""
    total, logs = 0.0, {}
    for micro in range(grad_accum):
        loss, mlogs = loss_fn(step) if grad_accum == 1 else loss_fn(step, micro)
        (loss / grad_accum).backward()
        total += float(loss.detach()) / grad_accum
        for k, v in mlogs.items():
            logs[k] = logs.get(k, 0.0) + float(v) / grad_accum
    return total, logs


def _finish(run_dir: Path, curve: list) -> None:
    atomic_write_text(run_dir / "loss_curve.json", json.dumps(curve))
    for name in ("train_state", "train_state.old"):
        if (run_dir / name).exists():
            shutil.rmtree(run_dir / name)


# ---------------------------------------------------------------------------------------------
# language models (target, draft LM)


LM_ARCHS = ("qwen3", "qwen3_5")


def hybrid_layer_types(num_layers: int) -> list[str]:
    """Qwen3.5's pattern: three Gated DeltaNet layers, then one full-attention layer, repeated."""
    types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(num_layers)]
    if "full_attention" not in types:
        types[-1] = "full_attention"
    return types


def qwen3_config(arch: LMConfig, vocab_size: int, eos_id: int | None):
    """The Hugging Face config of ``arch``: a ``Qwen3Config``, or for ``arch.arch == "qwen3_5"`` a
    ``Qwen3_5TextConfig`` with :func:`hybrid_layer_types`' layer pattern. ``eos_id`` also serves as
    padding and BOS id; the input and output embeddings are untied."""
    from transformers import Qwen3_5TextConfig, Qwen3Config

    if arch.arch not in LM_ARCHS:
        raise ValueError(f"arch: must be one of {LM_ARCHS}, got {arch.arch!r}")
    common = dict(
        vocab_size=vocab_size, hidden_size=arch.hidden_size, intermediate_size=arch.intermediate_size,
        num_hidden_layers=arch.num_layers, num_attention_heads=arch.num_heads,
        num_key_value_heads=arch.num_kv_heads, head_dim=arch.head_dim,
        max_position_embeddings=arch.max_position_embeddings,
        tie_word_embeddings=False, eos_token_id=eos_id, pad_token_id=eos_id, bos_token_id=eos_id,
        use_cache=True,
    )
    if arch.arch == "qwen3_5":
        # GDN heads sized like the attention heads: value heads = attention heads, key heads half
        return Qwen3_5TextConfig(
            **common, layer_types=hybrid_layer_types(arch.num_layers), linear_num_value_heads=arch.num_heads,
            linear_num_key_heads=max(1, arch.num_heads // 2), linear_key_head_dim=arch.head_dim,
            linear_value_head_dim=arch.head_dim, linear_conv_kernel_dim=4,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        )
    return Qwen3Config(**common, rope_theta=10000.0)


def lm_class(arch: str):
    """The causal-LM class that :func:`qwen3_config`'s config of ``arch`` builds: ``Qwen3_5ForCausalLM``
    for "qwen3_5", else ``Qwen3ForCausalLM``."""
    from transformers import Qwen3_5ForCausalLM, Qwen3ForCausalLM

    return Qwen3_5ForCausalLM if arch == "qwen3_5" else Qwen3ForCausalLM


def load_lm(path: str | Path, device: str = "cpu"):
    """Load a finished LM saved by :func:`train_lm` (``path`` is the run dir or its ``model/``)."""
    from transformers import AutoModelForCausalLM

    path = Path(path)
    if (path / "model").is_dir():
        path = path / "model"
    if not (path / "config.json").is_file():
        raise ValueError(f"path: no model checkpoint (config.json) in {path}")
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)  # Qwen3 or Qwen3.5
    except Exception as exc:  # noqa: BLE001 - surface any loader failure as a clear error
        raise ValueError(f"path: corrupt model checkpoint in {path}: {exc}") from exc
    return model.to(device).eval()


def _windows(stream: np.ndarray, step: int, seed: int, batch: int, seq_len: int) -> torch.Tensor:
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(stream) - seq_len - 1, size=batch)
    return torch.from_numpy(np.stack([stream[s: s + seq_len] for s in starts]))  # [B, S]


def train_lm(
    corpus,
    run_dir: str | Path,
    arch: LMConfig = LMConfig(),
    train: LMTrainConfig = LMTrainConfig(),
    progress: bool = True,
    desc: str = "target",
    stop_after: int | None = None,
    device: str = "cpu",
):
    """Train a causal LM of ``arch`` (Qwen3, or the Qwen3.5 hybrid) on ``corpus`` (next-token CE on
    random windows); cached in run_dir.

    Returns ``(model, loss_curve)``; the model is saved with ``save_pretrained`` in run_dir/model.
    """
    run_dir = Path(run_dir)
    if (run_dir / "model" / "config.json").is_file() and (run_dir / "loss_curve.json").is_file():
        _check_run_config(run_dir, lm_run_config(corpus, arch, train))
        return load_lm(run_dir, device), json.loads((run_dir / "loss_curve.json").read_text())
    stream = corpus.stream()
    if len(stream) <= train.seq_len + 1:
        raise ValueError(f"train.seq_len: corpus has only {len(stream)} tokens")
    torch.manual_seed(train.seed)
    model = lm_class(arch.arch)._from_config(
        qwen3_config(arch, corpus.vocab_size, corpus.eos_id), attn_implementation="sdpa"
    ).to(device)

    def loss_fn(step):
        ids = _windows(stream, step, train.seed, train.batch_size, train.seq_len).to(device)  # [B, S]
        return model(input_ids=ids, labels=ids).loss, {}

    curve = run_training(
        run_dir, model, loss_fn, steps=train.steps, lr=train.lr, warmup=train.warmup,
        ckpt_every=train.ckpt_every, weight_decay=train.weight_decay,
        config=lm_run_config(corpus, arch, train), progress=progress, desc=desc,
        stop_after=stop_after,
    )
    if len(curve) < train.steps:
        return model, curve
    model.save_pretrained(str(run_dir / "model.tmp"))
    if (run_dir / "model").exists():
        shutil.rmtree(run_dir / "model")
    os.replace(run_dir / "model.tmp", run_dir / "model")
    _finish(run_dir, curve)
    return model, curve


def lm_run_config(corpus, arch: LMConfig, train: LMTrainConfig) -> dict:
    """What :func:`train_lm` records in ``run_dir/train_config.json`` (and checks on a rerun): the
    architecture, the training run, the corpus's config and its vocabulary size."""
    return {"kind": "lm", "arch": dataclasses.asdict(arch), "train": dataclasses.asdict(train),
            "corpus": dataclasses.asdict(corpus.config), "vocab_size": corpus.vocab_size}


# ---------------------------------------------------------------------------------------------
# self-distillation data


@torch.no_grad()
def make_distill_data(
    target, prompts: np.ndarray, gen_len: int, temperature: float = 1.0, seed: int = 0,
    batch: int = 64, progress: bool = True,
) -> np.ndarray:
    """The target's own continuations of ``prompts`` (int64 [n, P]) -> int64 [n, P + gen_len].

    Sampled at ``temperature`` (T = 1 keeps all the target's futures, which the MFD drafter is
    meant to learn; 0 means greedy) with a KV cache, full vocabulary (no top-k/top-p).
    """
    from tqdm.auto import tqdm

    gen_len = check_int("gen_len", gen_len, 1)
    prompts = np.asarray(prompts, dtype=np.int64)
    if prompts.ndim != 2 or prompts.shape[1] < 1:
        raise ValueError(f"prompts: need int array [n, P>=1], got shape {prompts.shape}")
    gen = torch.Generator().manual_seed(seed)
    out = []
    target.eval()
    dev = next(target.parameters()).device
    for lo in tqdm(range(0, len(prompts), batch), desc="distill", disable=not progress, leave=False):
        ids = torch.from_numpy(prompts[lo: lo + batch]).to(dev)  # [b, P]
        res = target(input_ids=ids, use_cache=True)
        past, logits = res.cache, res.logits[:, -1]
        toks = [ids]
        for _ in range(gen_len):
            if temperature > 0:
                # Sampled on the CPU with a CPU generator: the same draws on any device.
                probs = torch.softmax(logits.float().cpu() / temperature, -1)
                nxt = torch.multinomial(probs, 1, generator=gen).to(dev)
            else:
                nxt = logits.argmax(-1, keepdim=True)  # [b, 1]
            toks.append(nxt)
            res = target(input_ids=nxt, cache=past, use_cache=True)
            past, logits = res.cache, res.logits[:, -1]
        out.append(torch.cat(toks, 1).cpu().numpy())
    return np.concatenate(out).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# block drafters


def default_gamma(block_size: int) -> float:
    """DFlash's position-weight decay: 7 for block 16, 5 for 10, 4 for 8; linear in between."""
    table = {16: 7.0, 10: 5.0, 8: 4.0}
    return table.get(block_size, max(1.0, 0.45 * block_size))


def position_weights(n: int, gamma: float) -> torch.Tensor:
    """``w_i = exp(-(i - 1) / gamma)`` for drafted positions i = 1..n: float [n]."""
    gamma = check_real("gamma", gamma, 0, low_open=True)
    return torch.exp(-torch.arange(n, dtype=torch.float32) / gamma)


def block_loss(out, labels: torch.Tensor, weights: torch.Tensor, balance: float = 0.0, objective: str = "mixture",
               wta_eps: float = 0.05, keep: torch.Tensor | None = None, soft=None, soft_share: float = 0.0):
    """Loss of a drafter's training output against the target's block ``labels`` [B, L].

    ``out`` is log-probs [B, L, V] (product drafter: weighted per-position cross-entropy) or
    ``(log_pi [B, K], log_q [B, K, L, V])`` (MFD). ``objective`` "mixture": the weighted mixture
    negative log-likelihood plus ``balance * KL(uniform || mean responsibility)``; "wta" (winner
    take all, for best-mode trees): each block trains the mode whose weighted log-likelihood of it
    is highest, with a share ``wta_eps`` of the block spread evenly over the other modes (the
    guard against modes that never win), and pi learns which mode won (cross-entropy); ``balance``
    is the mixture's only. All are normalised by ``sum(weights)`` so the numbers are per weighted
    position and comparable across K and objectives. ``keep`` (bool [B, L]) drops the positions
    it marks False from the likelihood (a label outside a drafter's reduced vocabulary: such a
    drafter can never draft it, so it learns nothing from it). ``soft`` = (ids [B, L, k], probs
    [B, L, k]): the target's own distribution at each position (ids in the output's vocabulary,
    probabilities 0 where an id is padding); a position's log-likelihood is then
    ``(1 - soft_share) * log q(label) + soft_share * sum_v p(v) log q(v)`` (self-distillation: at
    ``soft_share`` 1 the cross-entropy against the target's distribution). Returns (loss, logs).
    """
    # mixture: the exact log-sum-exp, whose gradient pulls each mode by its posterior responsibility
    # (EM's); plain winner-take-all starves the modes that lose early (the classic route to dead
    # modes), hence the balance term here and the eps-share in "wta".
    wsum = weights.sum()
    if keep is not None:
        keep = keep.to(torch.bool)
        labels = torch.where(keep, labels, torch.zeros_like(labels))   # any valid index; weighted 0
    if soft is not None and soft_share > 0:
        sid, sp = soft
    if isinstance(out, torch.Tensor):
        ll = out.gather(-1, labels.unsqueeze(-1)).squeeze(-1)          # [B, L]
        if keep is not None:
            ll = ll * keep
        if soft is not None and soft_share > 0:
            ll = (1 - soft_share) * ll + soft_share * (out.gather(-1, sid) * sp).sum(-1)
        loss = -(ll * weights).sum(-1).mean() / wsum
        hit = out.argmax(-1) == labels                                 # [B, L]
        if keep is None:
            acc1 = float(hit[:, 0].float().mean())
        else:
            acc1 = float((hit[:, 0] & keep[:, 0]).sum()) / max(1, int(keep[:, 0].sum()))
        return loss, {"acc1": acc1, "nll": float(loss.detach())}
    log_pi, log_q = out
    K = log_q.shape[1]
    idx = labels[:, None, :, None].expand(-1, K, -1, 1)                # [B, K, L, 1]
    ll = log_q.gather(-1, idx).squeeze(-1)                             # [B, K, L]
    if keep is not None:
        ll = ll * keep[:, None, :]
    if soft is not None and soft_share > 0:
        kid = sid[:, None].expand(-1, K, -1, -1)                       # [B, K, L, k]
        ll = (1 - soft_share) * ll + soft_share * (log_q.gather(-1, kid) * sp[:, None]).sum(-1)
    if objective == "wta":
        return _wta_loss(log_pi, (ll * weights).sum(-1), wsum, wta_eps)
    check_choice("objective", objective, OBJECTIVES)
    joint = log_pi + (ll * weights).sum(-1)                            # [B, K]
    nll = -torch.logsumexp(joint, -1).mean() / wsum
    resp = torch.softmax(joint, -1)                                    # [B, K] posterior per block
    usage = resp.mean(0)                                               # [K]
    kl = -(torch.log(usage.clamp_min(1e-8) * K)).mean()               # KL(uniform || usage)
    loss = nll + balance * kl
    logs = {"nll": float(nll.detach()), "kl_usage": float(kl.detach())}
    for k in range(K):
        logs[f"usage{k}"] = float(usage[k].detach())
    return loss, logs


def _wta_loss(log_pi: torch.Tensor, block_ll: torch.Tensor, wsum: torch.Tensor, eps: float):
    """Relaxed winner-take-all over ``block_ll`` [B, K] (each mode's weighted log-likelihood of
    each block): the winner (first on ties) weighted 1 - eps, every other mode eps / (K - 1)."""
    K = block_ll.shape[1]
    win = block_ll.detach().argmax(-1)                                 # [B] best mode, pi left out as at inference
    assign = F.one_hot(win, K).to(block_ll.dtype)                      # [B, K]
    if K > 1:
        assign = assign * (1.0 - eps) + (1.0 - assign) * (eps / (K - 1))
    fit = -(assign * block_ll).sum(-1).mean() / wsum
    gate = -log_pi.gather(1, win[:, None]).mean() / wsum               # pi learns which mode wins
    loss = fit + gate
    best = -block_ll.gather(1, win[:, None]).mean() / wsum             # the best mode's nll alone
    mixture = -torch.logsumexp(log_pi + block_ll, -1).mean() / wsum     # for comparison with "mixture"
    logs = {"nll": float(best.detach()), "nll_mixture": float(mixture.detach()), "gate_ce": float(gate.detach())}
    usage = torch.bincount(win, minlength=K).to(torch.float32) / len(win)  # [K] share of blocks won
    for k in range(K):
        logs[f"usage{k}"] = float(usage[k])
    return loss, logs


def left_align_context(ctx: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the first ``t[b]`` context rows of each sample, right-aligned (left padding).

    The drafter's ``train_forward`` expects padding on the left (each row's positions start at its
    first valid row), while a block starting at t sees positions 0..t-1 of the sequence. ctx
    [B, S, H], t [B] -> (ctx [B, T, H], valid [B, T]) with T = max(t).
    """
    T = int(t.max())
    src = torch.arange(T, device=t.device)[None, :] - (T - t)[:, None]                  # [B, T] source row, <0 = pad
    valid = src >= 0
    idx = src.clamp_min(0)[:, :, None].expand(-1, -1, ctx.shape[-1])  # [B, T, H]
    return ctx.gather(1, idx), valid


def _as_sequences(data, prompt_len, block_size: int) -> tuple[list[np.ndarray], np.ndarray, dict]:
    """Training sequences and their prompt lengths from either data layout.

    ``data`` int64 [n, S] with one int ``prompt_len`` (e2e's fixed-length prompts), or a list of
    int64 sequences with one prompt length each (a distilled data set). A sequence whose response
    is shorter than one block cannot hold a training block and is left out. Returns
    (sequences, prompt lengths, a small description for the run config).
    """
    if isinstance(data, np.ndarray) or (isinstance(data, torch.Tensor)):
        arr = np.asarray(data, dtype=np.int64)
        if arr.ndim != 2:
            raise ValueError(f"data: need int array [n, S], got shape {arr.shape}")
        S = arr.shape[1]
        if isinstance(prompt_len, (list, tuple, np.ndarray)) or not 1 <= prompt_len <= S - block_size:
            raise ValueError(f"prompt_len: need 1 <= prompt_len <= S - block_size = {S - block_size}, "
                             f"got {prompt_len}")
        desc = {"data_shape": list(arr.shape), "prompt_len": int(prompt_len),
                "data_hash": hashlib.sha256(arr.tobytes()).hexdigest()[:16]}
        return list(arr), np.full(len(arr), int(prompt_len), dtype=np.int64), desc
    seqs = [np.asarray(x, dtype=np.int64).reshape(-1) for x in data]
    plens = np.asarray(prompt_len, dtype=np.int64).reshape(-1)
    if len(plens) != len(seqs):
        raise ValueError(f"prompt_len: need one prompt length per sequence ({len(seqs)}), got {len(plens)}")
    if len(plens) and plens.min() < 1:
        raise ValueError("prompt_len: every prompt needs at least one token")
    keep = [i for i, (x, pl) in enumerate(zip(seqs, plens)) if len(x) - pl >= block_size]
    if not keep:
        raise ValueError(f"data: no sequence has a response of at least block_size = {block_size} tokens")
    h = hashlib.sha256()
    for i in keep:
        h.update(seqs[i].tobytes())
        h.update(int(plens[i]).to_bytes(8, "little"))
    desc = {"n_sequences": len(seqs), "n_used": len(keep), "data_hash": h.hexdigest()[:16]}
    return [seqs[i] for i in keep], plens[keep], desc


class _DraftStep(torch.nn.Module):
    """The drafter's training forward as a module's ``forward``, so DistributedDataParallel can
    wrap it: context features from the target's hidden states, left-aligned per block start,
    then the drafter's block forward."""

    def __init__(self, drafter):
        super().__init__()
        self.drafter = drafter

    def forward(self, hidden_states, starts, block_ids, repeat: int, paths=None, shared: bool = False):
        ctx = self.drafter.fuse_hidden(hidden_states)                  # [B, S, H]
        if shared:  # one pass over each sequence's context for all its blocks (starts [B, nb])
            return self.drafter.train_forward_shared(ctx, block_ids, starts.view(ctx.shape[0], repeat))
        ctx, valid = left_align_context(ctx.repeat_interleave(repeat, 0), starts)  # [B*nb, T, H]
        if paths is None:
            return self.drafter.train_forward(ctx, block_ids, valid)
        return self.drafter.train_forward(ctx, block_ids, valid, paths=paths)


def train_drafter(
    target,
    drafter,
    data,
    prompt_len,
    run_dir: str | Path,
    config: DrafterTrainConfig = DrafterTrainConfig(),
    progress: bool = True,
    desc: str | None = None,
    stop_after: int | None = None,
    dist=None,
    extra_config: dict | None = None,
    features: "TargetFeatures | None" = None,
) -> list[dict]:
    """Self-distil ``drafter`` on the target's own sequences; the one drafter trainer.

    ``data``: int64 [n, S] with one ``prompt_len`` (as ``mfd e2e`` makes it), or a list of int64
    sequences with one prompt length each (``mfd distill``'s data set). Each step draws
    ``batch_size * grad_accum`` sequences and ``blocks_per_seq`` block starts t per sequence in
    its response (prompt_len <= t <= len - block_size); the block is [x_t, MASK...], the labels
    are the target's next ``block_size - 1`` tokens, and the context is the target's hidden
    states of positions < t. The target is frozen. The batch is a function of ``(seed, step)``
    alone, so resuming, and splitting it over ranks (``dist``: each rank takes every
    ``world``-th sequence of each micro-batch, wrapped in DistributedDataParallel), do not change
    what is trained on.

    Returns the loss curve; the finished drafter is saved in DFlash's format under
    ``run_dir/drafter`` with ``target_fingerprint.json`` beside it. ``extra_config`` is recorded
    in the run config (for example where the drafter was initialised from). ``features``: the
    target's hidden states of exactly these sequences, computed once by the caller and shared by
    every drafter it trains on them (:class:`TargetFeatures`; they must hold the layers this
    drafter reads), instead of computed here.
    """
    run_dir = Path(run_dir)
    bs = int(drafter.block_size)
    seqs, plens, data_desc = _as_sequences(data, prompt_len, bs)
    world = dist.world if dist is not None else 1
    if config.batch_size % world:
        raise ValueError(f"batch_size: {config.batch_size} sequences do not split evenly over {world} processes")
    hf = _frozen(_hf_model(target))
    gamma = config.gamma if config.gamma is not None else default_gamma(bs)
    weights = position_weights(bs - 1, gamma).to(next(hf.parameters()).device)  # [L]
    fp = target_fingerprint(target)
    batches = _BlockBatches(seqs, plens, bs, config, dist.rank if dist is not None else 0, world)
    if features is None:
        features = TargetFeatures.maybe(hf, seqs, drafter.target_layer_ids, config.feature_cache_mb, progress=progress,
                                        top_k=config.soft_top_k if config.soft_share > 0 else 0)
    else:
        features.check(seqs, drafter.target_layer_ids)
    if config.soft_share > 0 and (features is None or features.soft is None or features.top_k < config.soft_top_k):
        raise ValueError(f"soft_share: self-distillation needs the target's top-{config.soft_top_k} logits "
                         "precomputed with the features (TargetFeatures(..., top_k=soft_top_k), within feature_cache_mb)")
    loss_fn = _drafter_loss(hf, drafter, batches, weights, config, dist, features)
    run_cfg = {"kind": "drafter", "train": config.recorded(), "target": fp, **data_desc,
               "target_features": "precomputed" if features is not None else "per_step",
               **({"context": "shared"} if config.context == "shared" and not getattr(drafter, "teacher_forced", False)
                  else {}),
               **(extra_config or {})}
    curve = run_training(
        run_dir, drafter, loss_fn, steps=config.steps, lr=config.lr, warmup=config.warmup,
        ckpt_every=config.ckpt_every, config=run_cfg, progress=progress,
        desc=desc or f"drafter K={config.num_modes}", stop_after=stop_after, grad_accum=config.grad_accum,
        dist=dist, weight_decay=config.weight_decay,
    )
    if len(curve) >= config.steps:
        _save_drafter(run_dir, drafter, fp, curve, dist)
    return curve


def _frozen(hf):
    """``hf`` with every parameter frozen, in eval mode."""
    for p in hf.parameters():
        p.requires_grad_(False)
    return hf.eval()


class _BlockBatches:
    """:func:`train_drafter`'s batches, a pure function of ``(seed, step)``: ``batch_size *
    grad_accum`` sequences and ``blocks_per_seq`` uniform block starts t per sequence in its
    response (prompt_len <= t <= len - block_size); micro-batch ``micro`` takes the ``micro``-th
    ``batch_size`` of them, and rank ``rank`` every ``world``-th of those."""

    def __init__(self, seqs: list[np.ndarray], plens: np.ndarray, block_size: int, config: DrafterTrainConfig,
                 rank: int, world: int):
        self.seqs, self.plens, self.bs = seqs, plens, block_size
        self.lens = np.array([len(x) for x in seqs], dtype=np.int64)
        self.seed, self.B = config.seed, config.batch_size
        self.accum, self.nb = config.grad_accum, config.blocks_per_seq
        self.rank, self.world = rank, world

    def __call__(self, step: int, micro: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(token ids [b, W], right-padded (harmless under a causal mask), block starts [b, nb], the
        sequences' indices [b])."""
        B, nb, bs = self.B, self.nb, self.bs
        rng = np.random.default_rng([self.seed, 7, step])
        rows = rng.integers(0, len(self.seqs), size=B * self.accum)
        lo = self.plens[rows]
        t_all = lo[:, None] + (rng.random((B * self.accum, nb)) * (self.lens[rows] - bs + 1 - lo)[:, None]
                               ).astype(np.int64)                     # [B*accum, nb]
        pick = np.arange(micro * B, (micro + 1) * B)[self.rank::self.world]
        rows, t_np = rows[pick], t_all[pick]                           # this rank's share
        width = int(t_np.max()) + bs
        ids_np = np.zeros((len(rows), width), dtype=np.int64)
        for j, r in enumerate(rows):
            x = self.seqs[r][:width]
            ids_np[j, : len(x)] = x
        return ids_np, t_np, rows


#: where :class:`TargetFeatures` keeps the hidden states: RAM at the target's dtype (float32 on a CPU
#: under reproducible numerics: 4 bytes a value, about 10.7 GB a million tokens at three Qwen-0.5B
#: layers), or one bfloat16 memory-mapped file on disk (half of that, paged in as batches read it)
FEATURE_STORES = ("ram", "bf16-memmap")


def _seq_digest(x) -> str:
    """A sequence's short hash (its int64 ids), the key of its rows in a feature file."""
    return hashlib.sha256(np.asarray(x, dtype="<i8").tobytes()).hexdigest()[:24]


def _bf16_view(mm: np.ndarray, a: int, b: int, k: int) -> torch.Tensor:
    """Rows ``a:b`` of layer slot ``k`` of a read-only bf16-memmap feature file as a bfloat16 tensor
    (a view of the mapped pages: torch warns about read-only arrays, and nothing writes to them)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(mm[a:b, k]).view(torch.bfloat16)


class TargetFeatures:
    """The frozen target's hidden states of every training sequence, at the layers a drafter reads,
    computed once (the target is frozen, so they are the same at every step): each step then
    gathers its batch's rows instead of running the target again. HF ``hidden_states`` index
    ``i + 1`` holds layer ``i``'s output; the tuple :meth:`batch` returns has the other entries None.

    The target is causal, so a position's state does not depend on what follows it: the sequence
    run whole gives the states a step's forward over its first ``max(t)`` tokens would (up to the
    last bits of the float arithmetic, which is why a run records which way it made them)."""

    def __init__(self, hf, seqs: list[np.ndarray], layer_ids, chunk: int = 32, progress: bool = False,
                 top_k: int = 0, store: str = "ram", directory=None, cap_mb: float | None = None):
        from tqdm.auto import tqdm

        self.index = sorted({int(i) + 1 for i in layer_ids})
        self.n = int(hf.config.num_hidden_layers) + 1
        self.top_k = check_int("top_k", top_k, 0)
        if store not in FEATURE_STORES:
            raise ValueError(f"store: must be one of {', '.join(FEATURE_STORES)}, got {store!r}")
        dev = next(hf.parameters()).device
        self.dtype = next(hf.parameters()).dtype  # what batch() hands the drafter, whatever is stored
        self.store, self.path = store, None
        need = self.size_mb(hf, seqs, layer_ids, store)
        if cap_mb is not None and need > cap_mb:
            raise ValueError(f"cap_mb: the features take {need:.0f} MiB ({store}), over the cap of {cap_mb:.0f} MiB")
        self.rows: list[dict[int, torch.Tensor]] = [None] * len(seqs)  # per sequence: {index: [len, H]}
        mm = None
        if store == "bf16-memmap":
            # one file, [all tokens, layers, H] of bfloat16 bits (numpy has no bfloat16: int16 holds them);
            # each sequence's rows are views into it, so the resident memory is what the OS keeps cached
            if directory is None:
                raise ValueError("directory: the bf16-memmap store needs a directory for its file")
            Path(directory).mkdir(parents=True, exist_ok=True)
            self.path = Path(directory) / "features.bf16"
            total, h = sum(len(x) for x in seqs), int(hf.config.hidden_size)
            mm = np.lib.format.open_memmap(self.path, mode="w+", dtype=np.int16, shape=(max(total, 1), len(self.index), h))
            starts = np.concatenate([[0], np.cumsum([len(x) for x in seqs])])
        # with top_k: per sequence the target's top_k logits at every position (row j: token j + 1)
        self.soft: list[tuple[torch.Tensor, torch.Tensor]] | None = [None] * len(seqs) if top_k else None
        base = getattr(hf, "base_model", None) or hf  # the decoder stack without the LM head
        order = np.argsort([len(s) for s in seqs], kind="stable")  # similar lengths share a forward
        bar = tqdm(total=len(seqs), desc="target features", disable=not progress, leave=False)
        with torch.no_grad():
            for c in range(0, len(order), chunk):
                part = order[c:c + chunk]
                width = max(len(seqs[j]) for j in part)
                ids = torch.zeros((len(part), width), dtype=torch.long)
                for r, j in enumerate(part):
                    ids[r, : len(seqs[j])] = torch.from_numpy(np.asarray(seqs[j], dtype=np.int64))
                # without soft targets the head is not needed: the base model alone gives the same
                # hidden states (a quarter of a 0.5B target's forward is its 151,936-row head)
                out = (hf if self.soft is not None else base)(input_ids=ids.to(dev), output_hidden_states=True)
                hs = out.hidden_states
                for r, j in enumerate(part):
                    n = len(seqs[j])
                    if mm is None:
                        self.rows[j] = {i: hs[i][r, :n].clone() for i in self.index}
                    else:
                        a, b = int(starts[j]), int(starts[j] + n)
                        for k, i in enumerate(self.index):  # [n, H] as bfloat16 bits
                            mm[a:b, k] = hs[i][r, :n].to(torch.bfloat16).cpu().view(torch.int16).numpy()
                        self.rows[j] = {i: torch.from_numpy(mm[a:b, k]).view(torch.bfloat16)
                                        for k, i in enumerate(self.index)}
                    if self.soft is not None:
                        v, ix = out.logits[r, :n].float().topk(self.top_k, dim=-1)
                        self.soft[j] = (v.clone(), ix.clone())
                bar.update(len(part))
        bar.close()
        if mm is not None:
            mm.flush()

    @classmethod
    def cached(cls, hf, seqs: list[np.ndarray], layer_ids, directory, *, key: dict | None = None,
               progress: bool = False, cap_mb: float | None = None) -> "TargetFeatures":
        """The bf16-memmap features of ``seqs`` kept in ``directory`` and reused by every later run
        that asks for them or for a part of them: ``features.json`` beside ``features.bf16`` records
        each sequence's hash and length, the layers, the hidden size, the target's dtype and ``key``
        (the caller's: the target's fingerprint and the numerics, say). When the target side matches
        (same dtype, hidden size and key, the layers asked for among those kept) and every sequence
        asked for is among those kept, the file is opened read-only and nothing is computed (a run on
        the first quarter of a data set reads the features of the whole); else the features of
        ``seqs`` are computed into it, replacing what was there, and the record is written last (so an
        interrupted pass is never taken for a finished one)."""
        directory = Path(directory)
        side = directory / "features.json"
        digests = [_seq_digest(x) for x in seqs]
        h = hashlib.sha256()
        for x in seqs:
            h.update(np.asarray(x, dtype="<i8").tobytes())
            h.update(b"|")
        layers = sorted({int(i) + 1 for i in layer_ids})
        target_side = {"format": "mfd-features-v1", "hidden": int(hf.config.hidden_size),
                       "dtype": str(next(hf.parameters()).dtype), **(key or {})}
        want = {**target_side, "layers": layers, "sequences": len(seqs), "tokens": int(sum(len(x) for x in seqs)),
                "ids_sha256": h.hexdigest(), "seq_sha256": digests, "lengths": [len(x) for x in seqs]}
        try:
            have = json.loads(side.read_text()) if side.is_file() else None
        except (OSError, ValueError):
            have = None
        if (isinstance(have, dict) and all(have.get(k) == v for k, v in target_side.items())
                and set(layers) <= set(have.get("layers", ())) and (directory / "features.bf16").is_file()):
            if "seq_sha256" not in have and have.get("ids_sha256") == want["ids_sha256"]:
                have = {**have, "seq_sha256": digests, "lengths": want["lengths"]}  # a record made before
                atomic_write_text(side, json.dumps(have) + "\n")                    # the per-sequence list
            where = {d: i for i, d in reversed(list(enumerate(have.get("seq_sha256", []))))}
            if all(d in where for d in digests):
                return cls._open(hf, directory / "features.bf16", have, layers, [where[d] for d in digests])
        side.unlink(missing_ok=True)
        out = cls(hf, seqs, layer_ids, progress=progress, store="bf16-memmap", directory=directory, cap_mb=cap_mb)
        atomic_write_text(side, json.dumps(want) + "\n")
        return out

    @classmethod
    def _open(cls, hf, path: Path, record: dict, layers: list[int], take: list[int]) -> "TargetFeatures":
        """The kept sequences ``take`` (indices into ``record``'s list), layers ``layers``, read-only."""
        out = object.__new__(cls)
        out.index, out.n, out.top_k = layers, int(hf.config.num_hidden_layers) + 1, 0
        out.dtype, out.store, out.path, out.soft = next(hf.parameters()).dtype, "bf16-memmap", path, None
        mm = np.load(path, mmap_mode="r")
        lengths = record["lengths"]
        if mm.shape != (max(sum(lengths), 1), len(record["layers"]), record["hidden"]):
            raise ValueError(f"features: {path} has shape {mm.shape}, its record says otherwise")
        starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        slot = {i: record["layers"].index(i) for i in layers}
        out.rows = [{i: _bf16_view(mm, int(starts[j]), int(starts[j + 1]), slot[i]) for i in layers} for j in take]
        return out

    def subset(self, keep) -> "TargetFeatures":
        """The features of the sequences ``keep`` (indices, in that order), sharing the tensors."""
        out = object.__new__(TargetFeatures)
        out.index, out.n, out.top_k = self.index, self.n, self.top_k
        out.dtype, out.store, out.path = self.dtype, self.store, self.path
        out.rows = [self.rows[int(i)] for i in keep]
        out.soft = None if self.soft is None else [self.soft[int(i)] for i in keep]
        return out

    def check(self, seqs, layer_ids) -> None:
        """Refuse features made for other sequences or without a layer ``layer_ids`` needs."""
        missing = sorted({int(i) + 1 for i in layer_ids} - set(self.index))
        if missing:
            raise ValueError(f"features: hold hidden_states {self.index}, the drafter reads {[i - 1 for i in missing]} too")
        if len(seqs) != len(self.rows) or any(len(s) != r[self.index[0]].shape[0] for s, r in zip(seqs, self.rows)):
            raise ValueError(f"features: made for {len(self.rows)} other sequences than the {len(seqs)} given")

    @staticmethod
    def size_mb(hf, seqs, layer_ids, store: str = "ram") -> float:
        """MiB the features of ``seqs`` take: in RAM at the target's dtype, or 2 bytes a value in the
        bf16-memmap store."""
        h = int(hf.config.hidden_size)
        item = 2 if store == "bf16-memmap" else torch.finfo(next(hf.parameters()).dtype).bits // 8
        return sum(len(s) for s in seqs) * h * len(set(layer_ids)) * item / 2 ** 20

    @classmethod
    def maybe(cls, hf, seqs, layer_ids, cap_mb: int, progress: bool = False, top_k: int = 0) -> "TargetFeatures | None":
        """The features when they fit in ``cap_mb`` MiB, else None (computed per step)."""
        if cap_mb <= 0 or cls.size_mb(hf, seqs, layer_ids) > cap_mb:
            return None
        return cls(hf, seqs, layer_ids, progress=progress, top_k=top_k)

    def soft_targets(self, rows: np.ndarray, starts: np.ndarray, L: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The target's top-k distribution at the L labels of every block: sequence ``rows[b]``,
        block starts ``starts[b]`` [b, nb]; (ids [b*nb, L, k], logits [b*nb, L, k]), label i of a
        block at t read from row t + i (the logits that predict token t + i + 1)."""
        if self.soft is None:
            raise ValueError("features: made without top_k, so they hold no soft targets")
        ids, vals = [], []
        for r, ts in zip(rows, starts):
            v, ix = self.soft[int(r)]
            for t in ts:
                vals.append(v[int(t): int(t) + L])
                ids.append(ix[int(t): int(t) + L])
        return torch.stack(ids), torch.stack(vals)

    def batch(self, rows: np.ndarray, width: int) -> tuple:
        """The ``hidden_states`` tuple of the batch's sequences ``rows``, positions < ``width``
        (right-padded with zeros, which no block reads: a block's context ends before its start)."""
        out = [None] * self.n
        for i in self.index:
            first = self.rows[int(rows[0])][i]
            # the target's dtype whatever the store holds (a bf16-memmap store is widened here)
            t = torch.zeros((len(rows), width, first.shape[-1]), dtype=self.dtype, device=first.device)
            for r, j in enumerate(rows):
                x = self.rows[int(j)][i][:width]
                t[r, : x.shape[0]] = x
            out[i] = t
        return tuple(out)


def _drafter_loss(hf, drafter, batches: _BlockBatches, weights: torch.Tensor, config: DrafterTrainConfig, dist,
                  features: TargetFeatures | None = None):
    """``loss_fn(step, micro)`` for :func:`run_training`: the block of each start t is [x_t, MASK...],
    its labels the target's next block_size - 1 tokens, its context the frozen target's hidden
    states of positions < t (read from ``features`` when given, else a target forward over the
    batch). Under torchrun the drafter runs wrapped in DistributedDataParallel."""
    dev = next(hf.parameters()).device
    bs, nb, mask_id = batches.bs, batches.nb, int(drafter.mask_token_id)
    # a path-corrected (Domino) drafter is teacher-forced: its correction reads the true block
    teacher_forced = bool(getattr(drafter, "teacher_forced", False))
    shared = config.context == "shared" and not teacher_forced  # Domino's correction reads its own block
    step_module = _DraftStep(drafter)
    if dist is not None and dist.active:
        from torch.nn.parallel import DistributedDataParallel

        step_module = DistributedDataParallel(
            step_module, device_ids=[dev.index] if dev.type == "cuda" else None)

    def loss_fn(step, micro=0):
        ids_np, t_np, rows = batches(step, micro)
        ids = torch.from_numpy(ids_np).to(dev)                         # [b, W]
        t = torch.from_numpy(t_np).to(dev).reshape(-1)                 # [b*nb]
        if features is not None:
            hs = features.batch(rows, int(t_np.max()))
        else:
            with torch.no_grad():
                # Only positions < max(t) condition any block: the rest of the forward is skipped.
                hs = hf(input_ids=ids[:, : int(t_np.max())], output_hidden_states=True,
                        logits_to_keep=1).hidden_states  # the head's rows are not read
        seq = ids.repeat_interleave(nb, 0)                             # [b*nb, W]
        offs = t[:, None] + torch.arange(bs, device=dev)[None, :]      # [b*nb, bs]
        block_tokens = seq.gather(1, offs)                             # [b*nb, bs]
        block_ids = torch.full_like(block_tokens, mask_id)
        block_ids[:, 0] = block_tokens[:, 0]
        labels, keep = block_tokens[:, 1:], None
        if drafter.d2t is not None:  # a reduced draft vocabulary: its log-probs and label ids
            index = drafter.draft_index(labels)
            labels, keep = index.clamp_min(0), index >= 0
        soft = None
        if config.soft_share > 0:
            sid, sv = features.soft_targets(rows, t_np, bs - 1)       # [b*nb, L, k']
            sid, sv = sid[..., : config.soft_top_k].to(dev), sv[..., : config.soft_top_k].to(dev)
            if drafter.d2t is not None:  # the target's tokens outside the draft vocabulary drop out
                sid = drafter.draft_index(sid)
                sv = sv.masked_fill(sid < 0, float("-inf"))
                sid = sid.clamp_min(0)
            sp = torch.softmax(sv, -1).nan_to_num(0.0)                # all outside: weight 0
            soft = (sid, sp)
        with drafter.reduced_output():
            if shared:
                out = step_module(hs, t, block_ids, nb, None, True)
            else:
                out = step_module(hs, t, block_ids, nb, block_tokens if teacher_forced else None)
        return block_loss(out, labels, weights, config.balance, config.objective, config.wta_eps, keep,
                          soft, config.soft_share)

    return loss_fn


def _save_drafter(run_dir: Path, drafter, fp, curve: list, dist) -> None:
    """The finished drafter in DFlash's format under ``run_dir/drafter`` (through a temporary
    directory and a rename) with ``target_fingerprint.json`` beside it; rank 0 alone writes."""
    if dist is None or dist.main:
        tmp = run_dir / "drafter.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        drafter.save_pretrained(str(tmp))
        atomic_write_text(tmp / "target_fingerprint.json", json.dumps({"target": fp}))
        if (run_dir / "drafter").exists():
            shutil.rmtree(run_dir / "drafter")
        os.replace(tmp, run_dir / "drafter")
        _finish(run_dir, curve)
    if dist is not None:
        dist.barrier()


@torch.no_grad()
def mode_diagnostics(target, drafter, data: np.ndarray, prompt_len: int, n_blocks: int = 128,
                     seed: int = 0) -> dict:
    """Is a trained MFD drafter using distinct modes? Measured on blocks of ``data`` [n, S].

    Returns the mean mixture weights, the mean largest weight (how context-dependent pi is), the
    mean largest posterior responsibility of the target's actual block (1/K when the modes are
    interchangeable, 1 when one mode explains each block), and the mean total-variation distance
    between two modes' distributions per drafted position (0 = collapsed modes).
    """
    hf = _hf_model(target)
    dev = next(hf.parameters()).device
    bs, K = int(drafter.block_size), int(drafter.num_modes)
    data = np.asarray(data, dtype=np.int64)
    rng = np.random.default_rng([seed, 11])
    rows = rng.integers(0, len(data), size=n_blocks)
    ids = torch.from_numpy(data[rows]).to(dev)                         # [n, S]
    S = ids.shape[1]
    t = torch.from_numpy(rng.integers(prompt_len, S - bs + 1, size=n_blocks)).to(dev)
    ctx = drafter.fuse_hidden(hf(input_ids=ids, output_hidden_states=True, logits_to_keep=1).hidden_states)
    ctx, valid = left_align_context(ctx, t)
    blk = ids.gather(1, t[:, None] + torch.arange(bs, device=dev)[None, :])  # [n, bs]
    block_ids = torch.full_like(blk, int(drafter.mask_token_id))
    block_ids[:, 0] = blk[:, 0]
    out = drafter.train_forward(ctx, block_ids, valid)
    if K == 1:
        return {"K": 1}
    log_pi, log_q = out
    labels = blk[:, 1:]
    ll = log_q.gather(-1, labels[:, None, :, None].expand(-1, K, -1, 1)).squeeze(-1)  # [n, K, L]
    resp = torch.softmax(log_pi + ll.sum(-1), -1)                      # [n, K]
    q = log_q.exp()
    tv = torch.stack([0.5 * (q[:, a] - q[:, b]).abs().sum(-1).mean(0)
                      for a in range(K) for b in range(a + 1, K)]).mean(0)  # [L]
    return {"K": K, "pi_mean": log_pi.exp().mean(0).tolist(),
            "pi_max_mean": float(log_pi.exp().max(-1).values.mean()),
            "resp_max_mean": float(resp.max(-1).values.mean()),
            "mode_tv_per_position": tv.tolist()}
