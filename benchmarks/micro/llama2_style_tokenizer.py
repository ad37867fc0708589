"""A Llama 2 style tokenizer.json (SentencePiece-style BPE with byte fallback, 32k) trained on
the benchmark corpus: the shape of Llama 2's file, for src/bin/bpe_families.rs.

    .venv-bench/bin/python benchmarks/micro/llama2_style_tokenizer.py CORPUS OUT.json
"""
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

corpus, out = sys.argv[1], sys.argv[2]
bytes_ = [f"<0x{b:02X}>" for b in range(256)]
tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
tok.train([corpus], trainers.BpeTrainer(vocab_size=32000, special_tokens=["<unk>", "<s>", "</s>"] + bytes_,
                                        show_progress=False, limit_alphabet=1000))
j = json.loads(tok.to_str())
j["added_tokens"] = [t for t in j["added_tokens"] if t["content"] in ("<unk>", "<s>", "</s>")]
j["pre_tokenizer"] = None
j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                   {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
j["post_processor"] = {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
             {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
json.dump(j, open(out, "w"), ensure_ascii=False)
print("vocab", len(j["model"]["vocab"]), "merges", len(j["model"]["merges"]))
