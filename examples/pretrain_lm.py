"""Pretrain a language model the way LLM pipelines feed one: two corpora of text files mixed
by weight, tokenized by a byte-level BPE `tokenizer.json` on sluice's threads, packed into
fixed-length blocks with segment ids, batched, and resumed mid-epoch with torchdata's
StatefulDataLoader.

    python examples/pretrain_lm.py                        # generated corpora, a tiny model
    python examples/pretrain_lm.py --web 'data/web/*.txt' --code 'data/code/*.txt' \\
        --tokenizer tokenizer.json --seq-len 2048 --batch 32

Without --tokenizer it trains a small byte-level BPE on the corpora first (`tokenizers`).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import torch
from torchdata.stateful_dataloader import StatefulDataLoader

import sluice
import sluice.text as T

WORDS = ("the data loader feeds every accelerator while tokens stream through packed blocks of "
         "text from many shards and nothing waits").split()


def generate(root: Path, name: str, files: int, lines: int, seed: int) -> str:
    """Text files of sentences made from WORDS (a stand-in for a crawl or a code corpus)."""
    import random

    rng = random.Random(seed)
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        text = "\n".join(" ".join(rng.choices(WORDS, k=rng.randint(4, 30))) for _ in range(lines))
        (d / f"{f:03d}.txt").write_text(text + "\n")
    return str(d / "*.txt")


def train_tokenizer(globs: list[str], path: Path, vocab: int) -> str:
    import glob

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    files = [f for g in globs for f in sorted(glob.glob(g))]
    tok.train(files, trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(path))
    return str(path)


def pipeline(web: str, code: str, tokenizer: str, seq_len: int, batch: int, eot: int) -> sluice.Dataset:
    # Each corpus keeps its own shuffle; the mix takes 3 web lines per code line, exactly.
    web_ds = sluice.read_text(web).shuffle(seed=1)
    code_ds = sluice.read_text(code).shuffle(seed=2)
    return (
        sluice.mix([web_ds, code_ds], weights=[3, 1], seed=0, stop="restart")
        .map(T.tokenize(tokenizer, field="text", add_special_tokens=False))
        .map(T.pack(seq_len, separator=eot))      # GPT-style blocks, segment ids per document
        .batch(batch, drop_last=True)
    )


class TinyLM(torch.nn.Module):
    def __init__(self, vocab: int, dim: int = 64):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        layer = torch.nn.TransformerEncoderLayer(dim, nhead=4, dim_feedforward=4 * dim, batch_first=True)
        self.body = torch.nn.TransformerEncoder(layer, num_layers=2)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        n = ids.shape[1]
        causal = torch.nn.Transformer.generate_square_subsequent_mask(n)
        return self.head(self.body(self.emb(ids), mask=causal, is_causal=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--web")
    ap.add_argument("--code")
    ap.add_argument("--tokenizer")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--resume-at", type=int, default=None,
                    help="save the loader's state after this step, then resume a new loader from it")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sluice-lm-"))
    try:
        return train(a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def train(a: argparse.Namespace, work: Path) -> int:
    web = a.web or generate(work, "web", files=4, lines=200, seed=0)
    code = a.code or generate(work, "code", files=2, lines=200, seed=1)
    tokenizer = a.tokenizer or train_tokenizer([web, code], work / "tokenizer.json", vocab=300)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer)
    eot = tok.token_to_id("<|endoftext|>") or 0
    ds = pipeline(web, code, tokenizer, a.seq_len, a.batch, eot)
    torch.manual_seed(0)
    loader = StatefulDataLoader(ds.to_torch(), batch_size=None)
    model = TinyLM(tok.get_vocab_size())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    it, step = iter(loader), 0
    while step < a.steps:
        b = next(it)
        ids = b["input_ids"].long()
        logits = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        print(f"step {step} loss {loss.item():.3f} first tokens {ids[0, :6].tolist()}")
        if step == a.resume_at:
            # What a checkpoint stores; a new job loads it and goes on with the next batch.
            state = loader.state_dict()
            loader = StatefulDataLoader(ds.to_torch(), batch_size=None)
            loader.load_state_dict(state)
            it = iter(loader)
            print(f"resumed the loader after step {step}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
