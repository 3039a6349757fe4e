"""A tiny Qwen3 target saved with its tokenizer (chat template included), and prompt files."""

from __future__ import annotations

import json
from pathlib import Path

from llm_helpers import tiny_qwen3

# A minimal chat template in Qwen3's spirit: role markers and an empty think block when thinking is off.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% if not enable_thinking %}<think></think>{% endif %}{% endif %}"
)


def save_tiny_target(directory: Path, *, num_layers: int = 2, seed: int = 0, tokenizer: bool = True,
                     chat_template: bool = True) -> Path:
    """A random tiny Qwen3 target and a byte-level BPE tokenizer trained on the synthetic corpus."""
    from mfd_theory.llm.training.corpus import generate_documents, train_tokenizer

    directory = Path(directory)
    tok = train_tokenizer(generate_documents(200, seed=0), vocab_size=96)
    if chat_template:
        tok.chat_template = CHAT_TEMPLATE
    eos = int(tok.convert_tokens_to_ids(tok.eos_token))
    model = tiny_qwen3(vocab_size=len(tok), hidden_size=32, num_layers=num_layers, seed=seed, eos_token_id=eos,
                       max_position_embeddings=256)
    model.save_pretrained(str(directory))
    if tokenizer:
        tok.save_pretrained(str(directory))
    return directory


def write_prompts(directory: Path) -> list[Path]:
    """Two prompt files (two data sets): plain prompts, a chat list and a two-turn prompt."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    a = directory / "alpha.jsonl"
    a.write_text("\n".join(json.dumps(x) for x in [
        {"prompt": "add 3 and 4", "id": "a1"},
        {"prompt": "def f(x): return"},
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a phrase"}]},
    ]) + "\n")
    b = directory / "beta.jsonl"
    b.write_text("\n".join(json.dumps(x) for x in [
        {"turns": ["first question", "and a follow-up"], "id": "mt"},
        {"prompt": "two plus two"},
    ]) + "\n\n")
    return [a, b]
