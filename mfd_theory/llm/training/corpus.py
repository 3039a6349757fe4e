"""A synthetic corpus with genuine multiple futures, and a byte-level BPE tokenizer for it.

A seeded probabilistic grammar in three registers (arithmetic word problems, code-like statements,
everyday phrases) whose choice points fork the continuation; a train / held-out split; a BPE trained
on the training split, with ``<|endoftext|>`` (end and padding) and ``<|mask|>`` (the block drafter's
mask token). Design and the tokenizer choice: docs/results.md ("End to end on one machine").
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from mfd_theory.validation import check_choice, check_int

__all__ = [
    "CorpusConfig",
    "Corpus",
    "EOS_TOKEN",
    "MASK_TOKEN",
    "build_corpus",
    "generate_documents",
    "load_tokenizer",
    "train_tokenizer",
]

EOS_TOKEN = "<|endoftext|>"
MASK_TOKEN = "<|mask|>"

_NAMES = ["Tom", "Ana", "Sam", "Mia", "Leo", "Eva"]
_ITEMS = ["apples", "books", "coins", "pens", "cards", "shells"]
_VERBS_GET = ["buys", "finds", "gets", "receives"]
_VERBS_LOSE = ["gives away", "loses", "sells"]
_PLACES = ["store", "market", "shop", "park", "library"]
_WHEN = ["yesterday", "this morning", "last week", "on Sunday"]
_MOVE = ["went", "walked", "drove", "ran"]
_FEEL = ["happy", "tired", "glad", "calm"]
_FOODS = ["bread", "milk", "tea", "rice", "soup"]
_VARS = ["x", "y", "total", "count", "n"]
_FUNCS = ["add", "scale", "shift", "mix"]


def _pick(rng: np.random.Generator, options: list[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _arithmetic(rng: np.random.Generator) -> str:
    name, item = _pick(rng, _NAMES), _pick(rng, _ITEMS)
    a, b = int(rng.integers(2, 10)), int(rng.integers(1, 10))
    if rng.random() < 0.6:
        verb, ans, op = _pick(rng, _VERBS_GET), a + b, "+"
    else:
        b = int(rng.integers(1, a + 1))
        verb, ans, op = _pick(rng, _VERBS_LOSE), a - b, "-"
    more = " more" if op == "+" else ""
    q = f"{name} has {a} {item}. {name} {verb} {b}{more}. How many {item} does {name} have now?"
    style = int(rng.integers(4))
    if style == 0:
        a_txt = f"The answer is {ans}."
    elif style == 1:
        a_txt = f"{name} has {ans} {item} now."
    elif style == 2:
        a_txt = f"{a} {op} {b} = {ans}, so {name} has {ans} {item}."
    else:
        a_txt = f"We compute {a} {op} {b} = {ans}. The answer is {ans}."
    return q + " " + a_txt


def _code(rng: np.random.Generator) -> str:
    v, w = rng.choice(_VARS, size=2, replace=False)
    a, b = int(rng.integers(1, 10)), int(rng.integers(1, 10))
    kind = int(rng.integers(3))
    if kind == 0:
        # Operand order is free: both orders are coherent futures.
        expr = f"{a} + {b}" if rng.random() < 0.5 else f"{b} + {a}"
        return f"{v} = {expr}; {w} = {v} * {int(rng.integers(2, 5))}; print({w})"
    if kind == 1:
        n = int(rng.integers(2, 9))
        if rng.random() < 0.5:
            body = f"for i in range({n}): {v} += i"
        else:
            body = f"i = 0; while i < {n}: {v} += i; i += 1"
        return f"{v} = 0; {body}; print({v})"
    fn = _pick(rng, _FUNCS)
    args = "a, b" if rng.random() < 0.5 else "x, y"
    p, q = args.split(", ")
    ret = f"{p} + {q}" if rng.random() < 0.5 else f"{q} + {p}"
    return f"def {fn}({args}): return {ret}"


def _phrase(rng: np.random.Generator) -> str:
    who = _pick(rng, ["I", "We", _pick(rng, _NAMES)])
    move, place, when = _pick(rng, _MOVE), _pick(rng, _PLACES), _pick(rng, _WHEN)
    clause = ""
    if rng.random() < 0.5:
        clause = f" to buy some {_pick(rng, _FOODS)}"
    # Reordering: the time phrase can lead or trail.
    if rng.random() < 0.5:
        s = f"{when.capitalize()} {who} {move} to the {place}{clause}."
    else:
        s = f"{who} {move} to the {place}{clause} {when}."
    r = rng.random()
    if r < 0.35:
        s += f" It was {_pick(rng, ['nice', 'busy', 'quiet'])}."
    elif r < 0.7:
        pron = {"I": "I", "We": "we"}.get(who, who)
        s += f" Then {pron} felt {_pick(rng, _FEEL)}."
    return s


_REGISTERS = (_arithmetic, _code, _phrase)


def generate_documents(n: int, seed: int, sentences: tuple[int, int] = (2, 4)) -> list[str]:
    """``n`` documents of a few sentences each, deterministic in ``seed``."""
    n = check_int("n", n, 0)
    lo, hi = sentences
    if not 1 <= lo <= hi:
        raise ValueError(f"sentences: need 1 <= lo <= hi, got {sentences}")
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n):
        k = int(rng.integers(lo, hi + 1))
        docs.append(" ".join(_REGISTERS[int(rng.integers(3))](rng) for _ in range(k)))
    return docs


def train_tokenizer(texts: list[str], vocab_size: int):
    """Byte-level BPE (as Qwen's) trained on ``texts``; returns a ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    vocab_size = check_int("vocab_size", vocab_size, 64)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # initial_alphabet=[] keeps only the bytes the corpus uses, so the vocabulary stays small.
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS_TOKEN, MASK_TOKEN], initial_alphabet=[],
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN, mask_token=MASK_TOKEN
    )


def load_tokenizer(path: str | Path):
    from transformers import PreTrainedTokenizerFast

    path = Path(path)
    if not (path / "tokenizer.json").is_file():
        raise ValueError(f"path: no tokenizer.json in {path}")
    return PreTrainedTokenizerFast.from_pretrained(str(path))


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
    n_train: int = 4000
    n_heldout: int = 200
    vocab_size: int = 512
    seed: int = 0


@dataclasses.dataclass
class Corpus:
    """Tokenized train/held-out documents plus the tokenizer that made them."""

    config: CorpusConfig
    tokenizer: object
    train_docs: list[str]
    heldout_docs: list[str]
    train_ids: list[np.ndarray]      # one int64 array per document, EOS appended
    heldout_ids: list[np.ndarray]

    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.convert_tokens_to_ids(EOS_TOKEN))

    @property
    def mask_id(self) -> int:
        return int(self.tokenizer.convert_tokens_to_ids(MASK_TOKEN))

    def stream(self) -> np.ndarray:
        """All training documents concatenated (each ends with EOS): int64 [n_tokens]."""
        return np.concatenate(self.train_ids)

    def prompts(self, n: int, length: int, split: str = "heldout", seed: int = 0) -> np.ndarray:
        """``n`` prompts of exactly ``length`` tokens cut from the start of documents: int64 [n, length].

        A fixed length keeps batched generation free of padding.
        """
        split = check_choice("split", split, ("heldout", "train"))
        docs = {"heldout": self.heldout_ids, "train": self.train_ids}[split]
        long_enough = [d for d in docs if len(d) > length]
        if len(long_enough) == 0:
            raise ValueError(f"length: no {split} document is longer than {length} tokens")
        rng = np.random.default_rng(seed)
        idx = rng.choice(len(long_enough), size=n, replace=len(long_enough) < n)
        return np.stack([long_enough[i][:length] for i in idx]).astype(np.int64)

    def save(self, path: str | Path) -> None:
        from mfd_theory.results import atomic_write_text

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save_pretrained(str(path / "tokenizer"))
        atomic_write_text(path / "corpus.json", json.dumps({
            "config": dataclasses.asdict(self.config),
            "train_docs": self.train_docs, "heldout_docs": self.heldout_docs,
        }))

    @classmethod
    def load(cls, path: str | Path) -> "Corpus":
        path = Path(path)
        meta_p = path / "corpus.json"
        if not meta_p.is_file():
            raise ValueError(f"path: no corpus.json in {path}")
        try:
            meta = json.loads(meta_p.read_text())
            cfg = CorpusConfig(**meta["config"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"path: corrupt corpus.json in {path}: {exc}") from exc
        tok = load_tokenizer(path / "tokenizer")
        return cls._tokenize(cfg, tok, meta["train_docs"], meta["heldout_docs"])

    @classmethod
    def _tokenize(cls, cfg, tok, train_docs, heldout_docs) -> "Corpus":
        eos = int(tok.convert_tokens_to_ids(EOS_TOKEN))

        def enc(docs):
            out = tok(docs, add_special_tokens=False)["input_ids"]
            return [np.asarray(ids + [eos], dtype=np.int64) for ids in out]

        return cls(cfg, tok, list(train_docs), list(heldout_docs), enc(train_docs), enc(heldout_docs))


def build_corpus(config: CorpusConfig = CorpusConfig()) -> Corpus:
    """Generate documents, split train/held-out (no held-out text occurs in train), train BPE."""
    check_int("config.n_train", config.n_train, 1)
    check_int("config.n_heldout", config.n_heldout, 1)
    train = generate_documents(config.n_train, seed=config.seed)
    seen = set(train)
    # A separate seed stream for held-out; drop exact duplicates of training documents.
    held = [d for d in generate_documents(3 * config.n_heldout, seed=config.seed + 10_007)
            if d not in seen][: config.n_heldout]
    tok = train_tokenizer(train, config.vocab_size)
    return Corpus._tokenize(config, tok, train, held)
