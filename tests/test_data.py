"""The multi-future corpus and its BPE tokenizer."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from mfd_theory.llm.training.corpus import (  # noqa: E402
    EOS_TOKEN, MASK_TOKEN, Corpus, CorpusConfig, build_corpus, generate_documents,
)


@pytest.fixture(scope="module")
def corpus():
    return build_corpus(CorpusConfig(n_train=300, n_heldout=20, vocab_size=200, seed=3))


def test_documents_are_deterministic_in_the_seed():
    assert generate_documents(20, seed=1) == generate_documents(20, seed=1)
    assert generate_documents(20, seed=1) != generate_documents(20, seed=2)


def test_grammar_has_multiple_futures_after_a_shared_prefix():
    docs = generate_documents(2000, seed=0)
    q = "How many apples does Tom have now? "
    nexts = {d.split(q, 1)[1].split(" ")[0] for d in docs if q in d}
    # Several answer styles follow the same question: "The", "Tom", "We", a digit.
    assert len(nexts) >= 3


def test_heldout_is_disjoint_from_train(corpus):
    assert not set(corpus.heldout_docs) & set(corpus.train_docs)
    assert len(corpus.heldout_docs) == 20


def test_tokenizer_round_trips_and_is_small(corpus):
    tok = corpus.tokenizer
    for doc in corpus.heldout_docs[:10]:
        assert tok.decode(tok(doc, add_special_tokens=False)["input_ids"]) == doc
    assert corpus.vocab_size <= 200
    assert tok.convert_ids_to_tokens(corpus.eos_id) == EOS_TOKEN
    assert tok.convert_ids_to_tokens(corpus.mask_id) == MASK_TOKEN
    # Every document ends with EOS; the mask token never occurs in the data.
    assert all(ids[-1] == corpus.eos_id for ids in corpus.train_ids)
    assert corpus.mask_id not in set(corpus.stream().tolist())


def test_prompts_have_fixed_length(corpus):
    p = corpus.prompts(5, 8, "heldout", seed=0)
    assert p.shape == (5, 8) and p.dtype == np.int64
    np.testing.assert_array_equal(p, corpus.prompts(5, 8, "heldout", seed=0))


def test_prompts_bad_split(corpus):
    with pytest.raises(ValueError, match="split"):
        corpus.prompts(2, 8, "dev")


def test_prompts_too_long(corpus):
    with pytest.raises(ValueError, match="length"):
        corpus.prompts(2, 10_000)


def test_save_load_round_trip(corpus, tmp_path):
    corpus.save(tmp_path / "c")
    back = Corpus.load(tmp_path / "c")
    assert back.train_docs == corpus.train_docs
    for a, b in zip(back.train_ids[:20], corpus.train_ids[:20]):
        np.testing.assert_array_equal(a, b)


def test_load_missing_corpus(tmp_path):
    with pytest.raises(ValueError, match="corpus.json"):
        Corpus.load(tmp_path)


def test_load_corrupt_corpus(tmp_path):
    (tmp_path / "corpus.json").write_text("{not json")
    with pytest.raises(ValueError, match="corrupt"):
        Corpus.load(tmp_path)


def test_bad_document_count():
    with pytest.raises(ValueError, match="n"):
        generate_documents(-1, seed=0)


def test_bad_counts_name_the_argument():
    from mfd_theory.llm.training.corpus import train_tokenizer
    from mfd_theory.llm.training.prompts import Prompt, shuffle_take

    with pytest.raises(ValueError, match="n: must be an integer >= 0, got 2.5"):
        generate_documents(2.5, seed=0)
    with pytest.raises(ValueError, match="config.n_heldout: must be an integer >= 1, got 0"):
        build_corpus(CorpusConfig(n_train=5, n_heldout=0))
    with pytest.raises(ValueError, match="vocab_size: must be an integer >= 64, got 10"):
        train_tokenizer(["a b"], 10)
    with pytest.raises(ValueError, match="max_prompts: must be an integer >= 1, got 0"):
        shuffle_take([Prompt("d", "a", "prompt", (("user", "x"),))], 0)


def test_write_answer_set_reads_back_as_a_distilled_data_set(tmp_path):
    """Given answers (not the target's) in distill's layout: load_distill_data gives them back."""
    pytest.importorskip("torch")
    from llm_helpers import tiny_qwen3
    from mfd_theory.llm.training.distill import load_distill_data, write_answer_set

    hf = tiny_qwen3(vocab_size=50, hidden_size=16, num_layers=1, seed=0)
    seqs = [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12]]
    plens = [2, 1, 3]
    meta = [{"id": f"f{i}", "dataset": "code-reference", "turn": 0} for i in range(3)]
    m = write_answer_set(tmp_path / "refs", seqs, plens, meta, hf, {"source": "test"}, shard_size=2)
    assert m["n_sequences"] == 3 and m["n_response_tokens"] == 2 + 2 + 2 and len(m["shards"]) == 2
    got, gp, manifest = load_distill_data(tmp_path / "refs")
    assert [list(map(int, x)) for x in got] == seqs and list(map(int, gp)) == plens
    assert manifest["config"]["source"] == "test"
    with pytest.raises(ValueError, match="plens"):
        write_answer_set(tmp_path / "bad", [[1, 2]], [2], meta[:1], hf, {})
    assert not (tmp_path / "bad" / "manifest.json").exists()
