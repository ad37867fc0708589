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


def test_stats_count_lines_through_tokenizers_when_there_is_no_fast_path(corpus):
    """A WordPiece tokenizer has no fast path: every line goes through `tokenizers`, and an
    added token's line does on a byte-level BPE's; each run counts its own lines."""
    d, lines = corpus
    train("wordpiece", lines, d / "wp.json")
    ds = sluice.from_items([{"text": t} for t in lines[:50]]).map(T.tokenize(d / "wp.json"))
    for _ in range(2):  # a second epoch counts its own lines, not the first one's too
        assert len(list(ds)) == 50
        (op,) = ds.stats().to_dict()["ops"]
        assert op["counts"] == {"fast_path_lines": 0, "tokenizers_lines": 50}
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator(lines, trainers.BpeTrainer(  # every byte symbol: the fast path takes it
        vocab_size=600, special_tokens=["<EOT>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    ds = sluice.from_items([{"text": "a <EOT> b"}, {"text": "a b"}]).map(T.tokenize(bpe))
    list(ds)
    assert ds.stats().to_dict()["ops"][0]["counts"] == {"fast_path_lines": 1, "tokenizers_lines": 1}
    assert "op tokenize in" in str(ds.stats())


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


# The pre-tokenizer splits of today's LLM tokenizers (tokenizer.json's `Split` regexes).
CL100K = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = CL100K.replace(r"\p{N}{1,3}", r"\p{N}")
O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CJK = "[一-龥\u3040-ゟ゠-ヿ]+"


def unicode_lines(n, seed=0):
    """Random lines over every script, emoji, marks, long digit and whitespace runs."""
    rng = np.random.default_rng(seed)
    words = ["it's", "DON'T", "HTMLParser", "camelCase", "naïve", "日本語のテキスト", "Ελληνικά",
             "😀👍🏽", "1234567890", "  \t\n\r\n ", "\u00a0\u3000x"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.integers(0, 16)):
            r = rng.integers(0, 4)
            if r == 0:
                cp = int(rng.integers(0, 0x3000 if rng.integers(0, 4) else 0x110000))
                parts.append(chr(cp) if not 0xD800 <= cp < 0xE000 else "x")
            elif r == 1:
                parts.append(words[rng.integers(0, len(words))])
            else:
                parts.append(chr(int(rng.integers(0, 128))))
        out.append("".join(parts).replace("\n", " ").replace("\r", " "))  # one sample a line
    return out


@pytest.mark.parametrize("family", ["cl100k", "llama3", "o200k", "qwen2", "deepseek"])
def test_llm_tokenizer_families_give_hf_ids(corpus, family):
    """Byte-level BPE in the shape of each family's tokenizer.json (the fast path takes them
    all): ids equal to `tokenizers` on English lines and random Unicode, special tokens
    from the post-processor (Llama 3's BOS) included."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    d, lines = corpus
    split = lambda p: pre_tokenizers.Split(Regex(p), behavior="isolated")  # noqa: E731
    splits = {"cl100k": [CL100K], "llama3": [CL100K], "o200k": [O200K], "qwen2": [QWEN2],
              "deepseek": [r"\p{N}{1,3}", CJK, CL100K]}[family]
    tok = Tokenizer(models.BPE(ignore_merges=family == "llama3"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [split(p) for p in splits] + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if family == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    extra = unicode_lines(400, seed=len(family))
    tok.train_from_iterator(lines + extra, trainers.BpeTrainer(
        vocab_size=1500, special_tokens=["<|begin_of_text|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if family == "llama3":
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 0)])
    path = d / f"{family}.json"
    tok.save(str(path))
    texts = lines[:500] + unicode_lines(1500, seed=99)
    ds = sluice.from_items([{"text": t} for t in texts]).map(T.tokenize(path))
    ours = [s["input_ids"].tolist() for s in ds]
    assert ours == [e.ids for e in tok.encode_batch(texts)]
    # every line took the fast path (the stats count them)
    (op,) = ds.stats().to_dict()["ops"]
    assert op["op"] == "tokenize"
    assert op["counts"] == {"fast_path_lines": len(texts), "tokenizers_lines": 0}
    if family == "llama3":
        assert all(ids[0] == 0 for ids in ours)


@pytest.mark.parametrize("form", ["normalizer", "metaspace"])
def test_sentencepiece_style_bpe_gives_hf_ids(corpus, form):
    """Llama 2 / Mistral style BPE (spaces as ▁, byte fallback): in either form their
    tokenizer.json files come in, ids equal to `tokenizers`, every line on the fast path."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    d, lines = corpus
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=1200, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens, show_progress=False))
    spec = json.loads(tok.to_str())  # the byte tokens in the model's vocab only, as Llama 2 has them
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] not in byte_tokens]
    if form == "normalizer":  # Llama 2's original file
        spec["pre_tokenizer"] = None
        spec["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    else:
        spec["pre_tokenizer"]["split"] = False
    spec["post_processor"] = {"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    tok = Tokenizer.from_str(json.dumps(spec))
    texts = lines[:300] + [t for t in unicode_lines(700, seed=5) if t]
    ds = sluice.from_items([{"text": t} for t in texts]).map(T.tokenize(tok))
    assert [s["input_ids"].tolist() for s in ds] == [e.ids for e in tok.encode_batch(texts)]
    (op,) = ds.stats().to_dict()["ops"]
    assert op["counts"] == {"fast_path_lines": len(texts), "tokenizers_lines": 0}


def test_max_length_encodes_only_the_prefix_it_keeps(corpus):
    """tokenize(max_length=) of a long document: the fast path stops after the words that
    reach max_length (what follows cannot change them), so the ids are `encode`'s first ones."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    d, lines = corpus
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    doc = " ".join(lines) * 20  # a few megabytes in one sample
    assert len(doc) > 2_000_000
    ds = sluice.from_items([{"text": doc}, {"text": lines[0]}]).map(T.tokenize(tok, max_length=64))
    got = [s["input_ids"].tolist() for s in ds]
    assert got == [tok.encode(doc).ids[:64], tok.encode(lines[0]).ids[:64]]
    assert ds.stats().to_dict()["ops"][0]["counts"]["fast_path_lines"] == 2
