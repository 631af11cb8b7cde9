"""Tiny random Hugging Face checkpoints built locally with transformers (no download), for tests."""

import shutil

import numpy as np

import volvox

CORPUS = [
    "Once upon a time there was a little robot who loved to read books about the sea.",
    "The quick brown fox jumps over the lazy dog; 12345 + 678 = 13023!",
    "Tiny models tell tiny stories: a cat, a hat, and a bat sat on the mat.",
    "def main():\n    print('hello, world')  # code too\n",
    "Ünïcödé wörds, naïve café, 東京 and emoji 🙂 appear sometimes.",
]


def train_bpe_tokenizer(path, vocab_size=400):
    """A byte-level BPE tokenizer.json trained on CORPUS with the `tokenizers` library; returns its vocab size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS * 4, trainer)
    tok.save(str(path))
    return tok.get_vocab_size()


def train_unigram_tokenizer(path, corpus=CORPUS, vocab_size=200):
    """A T5-style Unigram tokenizer.json trained on ``corpus`` with the `tokenizers` library (NFKC and
    space squeezing, WhitespaceSplit + Metaspace, "</s>" appended; ids 0-2: <pad>, </s>, <unk>);
    returns the `tokenizers` Tokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "</s>", "<unk>"],
                                      unk_token="<unk>", show_progress=False)
    tok.train_from_iterator(list(corpus) * 8, trainer)
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tok.save(str(path))
    return tok


def hf_config(kind, vocab, **kw):
    """A transformers config of architecture ``kind`` with small defaults overridden by ``kw``."""
    import transformers as tf

    if kind == "gpt2":
        base = dict(n_layer=2, n_embd=48, n_head=4, n_positions=128)
        return tf.GPT2Config(vocab_size=vocab, **{**base, **kw})
    if kind == "gpt_neo":
        base = dict(num_layers=2, hidden_size=48, num_heads=4, max_position_embeddings=128, window_size=5,
                    attention_types=[[["global", "local"], 1]])
        return tf.GPTNeoConfig(vocab_size=vocab, **{**base, **kw})
    cls = {"llama": tf.LlamaConfig, "mistral": tf.MistralConfig, "qwen2": tf.Qwen2Config}[kind]
    base = dict(num_hidden_layers=2, hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=80, max_position_embeddings=256)
    return cls(vocab_size=vocab, **{**base, **kw})


def build_causal_lm(directory, kind, tokenizer_json, vocab, seed=0, **kw):
    """Save a random ``kind`` causal LM (fp32) + tokenizer.json into ``directory``; return the torch model."""
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    config = hf_config(kind, vocab, bos_token_id=None, eos_token_id=None, pad_token_id=None, **kw)
    model = tf.AutoModelForCausalLM.from_config(config).float().eval()
    with torch.no_grad():  # random init is tiny (std 0.02): widen it so logits are far from ties
        for name, p in model.named_parameters():
            if p.ndim >= 2 or "bias" in name:
                p.mul_(4.0)
    model.save_pretrained(directory)
    shutil.copy(tokenizer_json, directory / "tokenizer.json")
    return model


def torch_logits(model, ids):
    """transformers' logits (seq, vocab) for one sequence, fp32."""
    import torch

    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def torch_greedy(model, ids, n):
    """n greedy tokens from transformers with its KV cache."""
    import torch

    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    return out[0, len(ids):].tolist()


def session_greedy(session, ids, n):
    """n greedy tokens from a volvox session (a model's new_session()): ``ids`` prefilled, then one token a step."""
    logits, got = session.forward(ids)[-1], []
    for _ in range(n):
        got.append(int(np.argmax(logits)))
        logits = session.forward([got[-1]])[-1]
    return got


def rel_err(a, b):
    """max |a - b| relative to max |b|."""
    return float(np.abs(a - b).max() / np.abs(b).max())


def build_tiny_bert(directory, texts, seed=2):
    """A 2-layer 32-wide random BertModel and its WordPiece tokenizer (trained on ``texts``) saved
    in ``directory``; returns (model, tokenizer)."""
    import torch
    import transformers as tf
    from tokenizers import BertWordPieceTokenizer

    tok = BertWordPieceTokenizer(lowercase=True)
    tok.train_from_iterator(texts * 5, vocab_size=120, show_progress=False)
    with_specials(tok, template=True)
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    torch.manual_seed(seed)
    cfg = tf.BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=32)
    model = tf.BertModel(cfg).eval()
    model.save_pretrained(directory)
    return model, tok


def with_specials(hf, template: bool):
    """Add the [CLS] $A [SEP] post-processor (trained tokenizers have none): TemplateProcessing or BertProcessing."""
    from tokenizers import processors as tk_processors

    cls, sep = hf.token_to_id("[CLS]"), hf.token_to_id("[SEP]")
    hf.post_processor = (tk_processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
                         if template else tk_processors.BertProcessing(("[SEP]", sep), ("[CLS]", cls)))


def load_pair(request, tmp_path_factory, tokenizer_json, cases: dict, build):
    """Yield (transformers model, volvox model) of case ``request.param``: ``build(directory, *cases[case],
    tokenizer path, vocab size)`` writes the folder and returns the transformers model."""
    kind, kw = cases[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    model = build(directory, kind, tokenizer_json[0], tokenizer_json[1], **kw)
    lm = volvox.load(directory)
    yield model, lm
    lm.close()


def train_marian_tokenizer(directory, vocab_size=120):
    """Marian's tokenizer files in ``directory``: a SentencePiece unigram model trained on CORPUS (with
    the `sentencepiece` library, nmt_nfkc normalization) as source.spm and target.spm, and vocab.json
    numbering its pieces then "<pad>"; returns the vocabulary size."""
    import io
    import json

    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS * 20), model_writer=model, vocab_size=vocab_size,
                                   model_type="unigram", character_coverage=1.0, hard_vocab_limit=False,
                                   unk_id=2, bos_id=-1, eos_id=1, pad_id=-1, minloglevel=2)
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("source.spm", "target.spm"):
        (directory / name).write_bytes(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    vocab["<pad>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    return len(vocab)
