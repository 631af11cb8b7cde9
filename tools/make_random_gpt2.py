"""Write a GPT-2-small-shaped checkpoint with random weights (no download) for benchmarks.

    python tools/make_random_gpt2.py DIR [--layers 12 --dim 768 --heads 12 --vocab 50257]

DIR gets config.json + model.safetensors (transformers' save_pretrained, fp32) and a
byte-level BPE tokenizer.json trained on the benchmark text with `tokenizers`
(its vocabulary is smaller than the model's; benchmarks feed token ids).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_generate import TEXT  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    a = ap.parse_args()
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=a.layers, n_embd=a.dim, n_head=a.heads, vocab_size=a.vocab))
    model.save_pretrained(a.dir)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([TEXT], trainer)
    tok.save(str(Path(a.dir) / "tokenizer.json"))
    print(f"wrote {a.dir}")


if __name__ == "__main__":
    main()
