"""sluice.text.tokenize with tokenizer objects — a tokenizers.Tokenizer, a transformers fast
tokenizer — next to the tokenizer.json path: the same ids as the path form and as
``tok.encode``, and an op that travels (pickles, other processes) with the tokenizer inside."""

import json
import pickle

import numpy as np
import pytest

tokenizers = pytest.importorskip("tokenizers")

import sluice
import sluice.text as T
from procs import run_py

LINES = [
    "The quick brown fox jumps over the lazy dog.",
    "Pack my box with five dozen liquor jugs!",
    "sluice feeds training jobs their data, batch after batch.",
    "Ünïcödé and émojis 🙂 are text too.",
    "",
    "numbers 12345 and symbols #@%&*",
] * 5


def bpe(lines=LINES, vocab=300):
    """A byte-level BPE trained here on a few strings (nothing downloaded)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<eos>"], show_progress=False))
    return tok


def words(vocab):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def texts():
    return sluice.from_items([{"text": t} for t in LINES])


def ids(ds, **iter_kw):
    return [s["input_ids"].tolist() for s in ds.iter(**iter_kw)]


def test_object_path_and_encode_give_the_same_ids(tmp_path):
    tok = bpe()
    tok.save(str(tmp_path / "bpe.json"))
    ref = [e.ids for e in tok.encode_batch(LINES)]
    assert sum(map(len, ref)) > 100
    from_obj = ids(texts().map(T.tokenize(tok)))
    from_path = ids(texts().map(T.tokenize(tmp_path / "bpe.json")))
    assert from_obj == from_path == ref
    # A WordLevel model, unknown words included.
    wl = words({"[UNK]": 0, "the": 1, "quick": 2, "fox": 3})
    out = ids(sluice.from_items([{"text": "the quick red fox"}]).map(T.tokenize(wl)))
    assert out == [wl.encode("the quick red fox").ids] == [[1, 2, 0, 3]]


def test_options_apply_to_objects_too():
    tok = bpe()
    op = T.tokenize(tok, max_length=5, add_special_tokens=False, dtype="int32", attention_mask="mask")
    for s, line in zip(texts().map(op), LINES):
        want = tok.encode(line, add_special_tokens=False).ids[:5]
        assert s["input_ids"].dtype == np.int32 and s["input_ids"].tolist() == want
        assert s["mask"].tolist() == [1] * len(want)
    # Truncation configured on the tokenizer is part of it, as with tok.encode.
    tok.enable_truncation(3)
    assert ids(texts().map(T.tokenize(tok))) == [e.ids for e in tok.encode_batch(LINES)]
    assert all(len(x) <= 3 for x in ids(texts().map(T.tokenize(tok))))


def test_the_op_carries_the_tokenizer_not_a_file():
    tok = bpe()
    op = T.tokenize(tok)
    spec = json.loads(op.spec_json())
    assert "tokenizer" not in spec and json.loads(spec["tokenizer_json"]) == json.loads(tok.to_str())
    assert len(repr(op)) < 300  # the JSON is not printed whole
    # Captured when tokenize() is called: changing the object later does not reach the op.
    before = ids(texts().map(op))
    tok.enable_truncation(2)
    assert ids(texts().map(op)) == before
    # Pickled datasets (DDP ranks, Ray Train workers) carry it.
    ds = texts().map(T.tokenize(bpe()))
    assert ids(pickle.loads(pickle.dumps(ds))) == ids(ds)


def test_runs_in_worker_processes_and_in_a_fresh_interpreter(tmp_path):
    tok = bpe()
    ds = texts().map(T.tokenize(tok)).map(lambda s: {**s, "n": len(s["input_ids"])})
    local = ids(ds)
    assert ids(ds, processes=2) == local
    # Another interpreter rebuilds the op from its spec alone: no tokenizer file anywhere.
    (tmp_path / "ds.pkl").write_bytes(pickle.dumps(ds))
    child = run_py(
        f"""
        import json, pickle
        ds = pickle.loads(open({str(tmp_path / "ds.pkl")!r}, "rb").read())
        print(json.dumps([s["input_ids"].tolist() for s in ds]))
        """,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout) == local


def test_checkpoints_know_the_tokenizer_by_its_content():
    tok = bpe()
    it = texts().map(T.tokenize(tok)).iter()
    next(it)
    state = it.state_dict()
    copy = tokenizers.Tokenizer.from_str(tok.to_str())  # another object, the same tokenizer
    same = texts().map(T.tokenize(copy)).iter()
    same.load_state_dict(state)
    assert len(list(same)) == len(LINES) - 1
    other_tok = bpe(lines=LINES[:2])  # trained on less text: another vocabulary
    assert other_tok.to_str() != tok.to_str()
    other = texts().map(T.tokenize(other_tok)).iter()
    with pytest.raises(ValueError, match="different pipeline"):
        other.load_state_dict(state)


class Slow:
    """Stands in for a transformers slow (pure Python) tokenizer."""

    is_fast = False


class BrokenJson:
    def to_str(self):
        return '{"model": 3}'


def test_bad_tokenizers():
    with pytest.raises(TypeError, match=r"tokenizer\.json path, a tokenizers\.Tokenizer or a transformers fast tokenizer, got int"):
        T.tokenize(123)
    with pytest.raises(TypeError, match="slow"):
        T.tokenize(Slow())
    with pytest.raises(ValueError, match="tokenizer_json is not a valid tokenizer.json"):
        T.tokenize(BrokenJson())
    with pytest.raises(ValueError, match="dtype"):
        T.tokenize(bpe(), dtype="float32")
    with pytest.raises(TypeError, match=r"tokenize.*sample 0.*must be str or bytes"):
        list(sluice.range(2).map(T.tokenize(bpe(), field="id")))


def test_transformers_fast_tokenizer():
    transformers = pytest.importorskip("transformers")
    tok = bpe()
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
    out = ids(texts().map(T.tokenize(hf)))
    assert out == [hf(line)["input_ids"] for line in LINES] == [e.ids for e in tok.encode_batch(LINES)]
