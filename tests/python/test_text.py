"""sluice.text vs the Hugging Face `tokenizers` package on real English lines."""

import glob

import numpy as np
import pytest

tokenizers = pytest.importorskip("tokenizers")

import sluice
import sluice.text as T


def real_lines():
    lines = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")) + ["README.md", "docs/ARCHITECTURE.md"]:
        try:
            with open(path, encoding="utf-8") as f:
                lines += [l.strip() for l in f if l.strip()]
        except (OSError, UnicodeDecodeError):
            pass
    return lines


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    lines = real_lines()
    assert len(lines) >= 1000
    d = tmp_path_factory.mktemp("text")
    (d / "lines.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return d, lines


def train(kind, lines, path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers, processors

    if kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=["<EOT>", "<SOS>"])
    else:
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(vocab_size=2000, special_tokens=["[UNK]", "[CLS]", "[SEP]"])
    tok.train_from_iterator(lines, trainer)
    if kind == "wordpiece":
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)]
        )
    tok.save(str(path))
    return tok


@pytest.mark.parametrize("kind", ["bpe", "wordpiece"])
def test_ids_equal_hf_tokenizers(corpus, kind):
    d, lines = corpus
    hf = train(kind, lines, d / f"{kind}.json")
    ds = sluice.read_text(str(d / "lines.txt")).map(T.tokenize(d / f"{kind}.json"))
    ours = [s["input_ids"].tolist() for s in ds]
    ref = [e.ids for e in hf.encode_batch(lines)]
    assert len(ours) == len(ref) >= 1000
    assert ours == ref


def test_nlp_reference_shape(corpus):
    d, lines = corpus
    train("bpe", lines, d / "bpe.json")
    ds = (
        sluice.read_text(str(d / "lines.txt"))
        .map(T.tokenize(d / "bpe.json", add_special_tokens=False))
        .map(T.truncate(254))
        .map(T.add_tokens(bos=1, eos=0))
        .map(T.pad(256, pad_id=0, mask="attention_mask"))
        .map(sluice.ops.select(["input_ids", "attention_mask"]))
        .batch(128)
    )
    b = next(iter(ds))
    assert b["input_ids"].shape == (128, 256) and b["input_ids"].dtype == np.int64
    assert (b["input_ids"][:, 0] == 1).all()
    assert ((b["attention_mask"] == 1).sum(1) >= 2).all()


def test_bad_input(tmp_path, corpus):
    d, lines = corpus
    with pytest.raises(FileNotFoundError):
        T.tokenize(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="tokenizer"):
        T.tokenize(tmp_path / "bad.json")
    with pytest.raises(ValueError):
        T.tokenize(d / "bpe.json" if (d / "bpe.json").exists() else tmp_path / "bad.json", dtype="float32")
    with pytest.raises(sluice.PipelineError, match="truncate first"):
        list(sluice.from_items([{"input_ids": [1, 2, 3]}]).map(T.pad(2)))
    with pytest.raises(TypeError, match="str"):
        train("bpe", lines, tmp_path / "t.json")
        list(sluice.range(2).map(T.tokenize(tmp_path / "t.json", field="id")))


def test_batch_pads_token_ids_and_masks_to_the_longest(corpus, tmp_path):
    d, lines = corpus
    train("bpe", lines, tmp_path / "bpe.json")
    ds = sluice.read_text(str(d / "lines.txt")).map(T.tokenize(str(tmp_path / "bpe.json"), attention_mask="attention_mask")).limit(16)
    samples = list(ds)
    b = next(iter(ds.batch(16, pad={"input_ids": 0, "attention_mask": 0})))
    longest = max(len(s["input_ids"]) for s in samples)
    assert b["input_ids"].shape == (16, longest) and b["attention_mask"].shape == (16, longest)
    for row, mask, s in zip(b["input_ids"], b["attention_mask"], samples):
        n = len(s["input_ids"])
        assert row[:n].tolist() == list(s["input_ids"]) and not row[n:].any()
        assert mask.sum() == n
    with pytest.raises(TypeError, match="array"):
        next(iter(sluice.from_items([{"t": "a"}]).batch(1, pad={"t": 0})))
    with pytest.raises(TypeError, match="dict"):
        sluice.range(3).batch(2, pad=0)


def test_pack_concatenates_tokenized_lines_into_full_blocks(corpus):
    d, lines = corpus
    hf = train("bpe", lines, d / "bpe.json")
    eot = 0
    ds = sluice.read_text(str(d / "lines.txt")).map(T.tokenize(d / "bpe.json", add_special_tokens=False))
    packed = ds.map(T.pack(128, separator=eot, pad_id=eot))
    blocks = list(packed.iter(seed=0, num_threads=2))
    ids = np.stack([b["input_ids"] for b in blocks])
    mask = np.stack([b["attention_mask"] for b in blocks])
    seg = np.stack([b["segment_ids"] for b in blocks])
    assert ids.shape[1] == 128 and ids.dtype == np.int64
    # The blocks are the documents' ids joined by the separator, cut every 128 tokens.
    stream = [t for e in hf.encode_batch(lines, add_special_tokens=False) for t in e.ids + [eot]]
    assert ids[mask == 1].tolist() == stream
    assert (mask[:-1] == 1).all() and mask[-1].sum() == len(stream) % 128 or len(stream) % 128 == 0
    # Segments count the documents in each block from 1; padding is segment 0.
    assert (seg[mask == 0] == 0).all() and (seg[mask == 1] >= 1).all()
    assert all((np.diff(s[m == 1]) >= 0).all() for s, m in zip(seg, mask))
    # Dropping the remainder keeps only full blocks; batching full blocks stacks them.
    full = list(ds.pack(128, separator=eot, drop_remainder=True).batch(4, drop_last=True))
    assert all(b["input_ids"].shape == (4, 128) for b in full)
    assert len(full) == (len(stream) // 128) // 4


def test_pack_resumes_inside_a_document(corpus):
    d, lines = corpus
    train("bpe", lines, d / "bpe.json")
    ds = (
        sluice.read_text(str(d / "lines.txt"))
        .shuffle()
        .map(T.tokenize(d / "bpe.json", add_special_tokens=False))
        .pack(64, separator=0)
        .batch(8)
    )
    full = [b["input_ids"].tolist() for b in ds.iter(seed=3, epoch=0)]
    for k in (1, len(full) // 2, len(full) - 1):
        it = ds.iter(seed=3, epoch=0)
        for _ in range(k):
            next(it)
        state = it.state_dict()
        node = state["state"]["parent"]
        assert node["node"] == "pack" and set(node["own"]) >= {"at", "counter", "input_index"}
        resumed = ds.iter(seed=3, num_threads=1)
        resumed.load_state_dict(state)
        assert [b["input_ids"].tolist() for b in resumed] == full[k:]


def test_pack_and_tokenize_bad_input(corpus, tmp_path):
    d, lines = corpus
    train("bpe", lines, d / "bpe.json")
    with pytest.raises(ValueError, match="length"):
        sluice.range(3).pack(0, field="id")
    with pytest.raises(KeyError, match="input_ids"):
        sluice.range(3).pack(4)
    with pytest.raises(TypeError, match=r"pack.*sample 0.*1-D integer"):
        list(sluice.from_items([{"input_ids": "text"}]).pack(4))
    # Invalid UTF-8 in a bytes field: an error naming the sample and the op, or replacement.
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"caf\xe9 ok\n")
    raw = sluice.read_files(str(bad))
    with pytest.raises(sluice.PipelineError, match=r"tokenize.*not valid UTF-8"):
        list(raw.map(T.tokenize(d / "bpe.json", field="bytes")))
    ok = list(raw.map(T.tokenize(d / "bpe.json", field="bytes", errors="replace")))
    assert len(ok) == 1 and len(ok[0]["input_ids"]) > 0
    with pytest.raises(ValueError, match="errors"):
        T.tokenize(d / "bpe.json", errors="ignore")


def test_pack_gives_empty_samples_no_segment_id():
    items = [{"input_ids": [1, 2]}, {"input_ids": []}, {"input_ids": [3]}]
    (block,) = list(sluice.from_items(items).pack(4))
    assert block["input_ids"].tolist() == [1, 2, 3, 0]
    assert block["segment_ids"].tolist() == [1, 1, 2, 0]
    # With a separator an empty sample still adds a token, so it is a segment.
    (block,) = list(sluice.from_items(items).pack(6, separator=9))
    assert block["input_ids"].tolist() == [1, 2, 9, 9, 3, 9]
    assert block["segment_ids"].tolist() == [1, 1, 1, 2, 3, 3]


def test_id_ops_check_sizes_ranges_and_write_out():
    with pytest.raises(ValueError, match=r"text.pad: length=1000000000000 .*max_tokens=16777216"):
        T.pad(10**12)
    with pytest.raises(ValueError, match=r"pack: length=1000000000000"):
        sluice.from_items([{"input_ids": [1]}]).pack(10**12)
    ids32 = np.array([5, 6], np.int32)
    with pytest.raises(sluice.PipelineError, match=r"add_tokens.*sample 0.*bos=4294967296 does not fit the int32 ids"):
        list(sluice.from_items([{"input_ids": ids32}]).map(T.add_tokens(bos=2**32)))
    (s,) = list(sluice.from_items([{"input_ids": ids32}]).map(T.truncate(1, out="short")).map(T.pad(3, out="padded")))
    assert s["input_ids"].tolist() == [5, 6] and s["short"].tolist() == [5] and s["padded"].tolist() == [5, 6, 0]
