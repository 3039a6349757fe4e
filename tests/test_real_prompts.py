"""Prompt sets for real targets: splits by unit, HumanEval for evaluation only, no 12-token leak."""

from __future__ import annotations

import gzip
import json
import textwrap

import pytest

from mfd_theory.llm.training import real_prompts as rp
from mfd_theory.llm.training.prompts import read_prompt_files


def _slow_shared(a_texts, b_texts, n):
    """The obvious twin: every n-window of every a against every n-window of every b."""
    out = []
    for i, a in enumerate(a_texts):
        ta = rp.tokens(a)
        wa = [ta[k:k + n] for k in range(len(ta) - n + 1)]
        hit = False
        for b in b_texts:
            tb = rp.tokens(b)
            if any(w == tb[k:k + n] for w in wa for k in range(len(tb) - n + 1)):
                hit = True
                break
        if hit:
            out.append(i)
    return out


def test_shared_spans_matches_its_slow_twin():
    a = ["def f(x):\n    return x + 1", "one two three four five", "a b c d e f g h", "return x + 1 if y"]
    b = ["z = 3\nreturn x + 1 if y else 2", "c d e f g"]
    for n in (3, 4, 5):
        assert rp.shared_spans(a, b, n) == _slow_shared(a, b, n)
    assert rp.shared_spans(a, b, 4) == [0, 2, 3]


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    d = tmp_path_factory.mktemp("rp")
    return d, rp.write_prompt_sets(d, n_train=64, n_calib=8, n_eval_prose=16)


def test_files_read_back_and_count(sets):
    d, man = sets
    assert man["counts"]["code"]["eval"] == 164 and man["counts"]["code"]["train"] == 64
    for dom in ("code", "prose"):
        for split in rp.SPLITS:
            ps = read_prompt_files([d / f"{dom}-{split}.jsonl"])
            assert len(ps) == man["counts"][dom][split] and all(p.dataset == dom for p in ps)


def test_splits_are_disjoint_by_unit_and_humaneval_is_eval_only(sets):
    d, _ = sets
    units = {}
    for dom in ("code", "prose"):
        for split in rp.SPLITS:
            for line in (d / f"{dom}-{split}.jsonl").read_text().splitlines():
                units.setdefault(json.loads(line)["unit"], set()).add(split)
    assert all(len(s) == 1 for s in units.values()) and units["humaneval"] == {"eval"}


def test_no_training_or_calibration_prompt_shares_12_tokens_with_humaneval(sets):
    d, _ = sets
    he = rp.humaneval_problems()
    banned = [p["prompt"] + p["canonical_solution"] for p in he]
    # the instruction wrapper is the same for every code prompt: compare what follows it
    texts = [json.loads(x)["messages"][0]["content"].split("```python\n", 1)[1]
             for split in ("train", "calib") for x in (d / f"code-{split}.jsonl").read_text().splitlines()]
    assert rp.shared_spans(texts, banned, 12) == []
    assert rp.shared_spans([banned[0][:400]], banned, 12) == [0]  # the check can fire


def test_deterministic(sets, tmp_path):
    _, man = sets
    again = rp.write_prompt_sets(tmp_path, n_train=64, n_calib=8, n_eval_prose=16)
    assert again == man


def test_a_wrong_humaneval_file_is_refused(tmp_path):
    bad = tmp_path / "h.jsonl.gz"
    bad.write_bytes(gzip.compress(b'{"task_id": "x"}\n'))
    with pytest.raises(ValueError, match=f"the pinned HumanEval file is {rp.HUMANEVAL_SHA256}"):
        rp.humaneval_problems(bad)
    with pytest.raises(ValueError, match="n_train: must be an integer >= 1"):
        rp.write_prompt_sets(tmp_path, n_train=0)


class _CharTokenizer:
    """A tokenizer stand-in: one id per character (no chat template, so ``render`` joins the turns)."""

    chat_template = None

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) % 1000 for c in text]}


def test_reference_answers_are_the_training_functions_own_source_and_never_humaneval():
    from mfd_theory.llm.training.natural_corpus import code_prompts, list_units

    tok = _CharTokenizer()
    seqs, plens, meta, note = rp.reference_answers(tok, 12, 400, eos_id=7)
    assert len(seqs) == len(plens) == len(meta) == note["functions"] == 12
    units = {u.name: u for u in list_units(None)}
    by_id = {r["id"]: r for r in code_prompts([u for u in units.values() if rp.split_of(u.name) == "train"], 24,
                                              salt=rp.SALT)}
    banned = [p["prompt"] + p["canonical_solution"] for p in rp.humaneval_problems()]
    for s, p, m in zip(seqs, plens, meta):
        r = by_id[m["id"]]
        assert rp.split_of(r["unit"]) == "train" and m["dataset"] == "code-reference"
        # the prompt is the code instruction over the signature and docstring; the answer its source
        assert s[:p] == tok(rp.code_instruction(r["prompt"]))["input_ids"]
        body = rp._indented_body(r["prompt"], r["reference"])
        source = r["prompt"] + body.rstrip()
        # the answer is the function as Python (the body under its signature, not at column 0), and
        # its body is the reference once dedented again
        compile(source, "answer", "exec", dont_inherit=True, flags=0x2000)  # 0x2000: top-level await
        assert body.startswith((" ", "\t")) and textwrap.dedent(body) == textwrap.dedent(r["reference"])
        whole = tok("```python\n" + source + "\n```")["input_ids"]
        assert s[p:] == (whole + [7] if len(whole) <= 400 else whole[:400])
        assert not rp.shared_spans([r["prompt"] + r["reference"]], banned, 12)
    assert note["answer_tokens"] == sum(len(s) - p for s, p in zip(seqs, plens))
    # a cut: at most max_tokens answer tokens and no EOS (the function goes on); whole ones end in it
    short, sp, _, snote = rp.reference_answers(tok, 3, 10, eos_id=7)
    assert all(len(s) - p == 10 and s[-1] != 7 for s, p in zip(short, sp)) and snote["cut_without_eos"] == 3
    assert note["cut_without_eos"] == sum(s[-1] != 7 for s in seqs) < len(seqs)
    assert rp.reference_answers(tok, 12, 400, eos_id=7)[3]["sha256"] == note["sha256"]  # deterministic
    with pytest.raises(ValueError, match="references"):
        rp.reference_answers(tok, 0, 10, eos_id=7)
