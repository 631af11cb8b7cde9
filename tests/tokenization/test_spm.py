"""SentencePiece GGUF vocabularies (tokenizer.ggml.model "llama") against llama.cpp (llama-cpp-python) on
the same file: token ids, decoded text and end-of-generation ids over several vocabulary variants
(Llama-2, Gemma, Phi-3, EOG-named tokens stored as normal), and a generation from the command line."""

import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")
llama_cpp = pytest.importorskip("llama_cpp")

import volvox  # noqa: E402
from tiny_gguf import SPM_VARIANTS, add_spm_tokenizer, write_tiny_llama  # noqa: E402
from volvox.convert import convert  # noqa: E402
from volvox.errors import TokenizerError, UnsupportedError  # noqa: E402
from volvox.formats.gguf import GGUFFile  # noqa: E402
from volvox.tokenizers.gguf_vocab import tokenizer_from_gguf  # noqa: E402
from volvox.tokenizers.spm import SentencePieceTokenizer  # noqa: E402

TEXTS = [
    "", " ", "  ", "Hello world", "hello world", " hello  world ", "the quick brown fox jumps over the lazy dog",
    "héllo wörld, naïve café über", "中文字符 数字", "emoji 😀🎉 and 👩‍👩‍👧 family", "digits 1234567890 3.14 007",
    "\ttabs\tand\nnewlines\r\nmixed \n\n paragraphs", "trailing spaces   ", "▁ already ▁▁ escaped",
    "<s>the</s> quick <unk> x", "<|end|>  hi <|user|>\n question <|assistant|>answer<|end|>",
    "<|im_start|>user\nhi<|im_end|>\n", "<start_of_turn>user\nhi<end_of_turn>\n\n", "control \x00\x01\x7f bytes",
    "Ω≈ç√∫ ÅÍÎÏ ﬁ Ⅻ e\u0301 \ufeffbom \u200bzw", "def fib(n):\n    return n if n < 2 else fib(n - 1)\n",
    "<unused0><reserved><|stop|> x", "x" * 40, "ab" * 30 + "  " + "é" * 9,
]


def _random_texts(n=40, seed=0):
    """Random strings over ASCII, the vocabulary's letters, whitespace, specials and unknown characters."""
    rng = np.random.default_rng(seed)
    alphabet = list("abcdefghijklmnopqrstuvwxyz     \n\t.,!?0123456789") + ["é", "ü", "中", "😀", "ß", "\u0301", "▁"]
    specials = ["<s>", "</s>", "<|end|>", "<|user|>", "<end_of_turn>", "<|im_end|>", "\n\n", "<unk>"]
    out = []
    for _ in range(n):
        parts = [str(rng.choice(specials)) if rng.random() < 0.1 else str(rng.choice(alphabet))
                 for _ in range(int(rng.integers(1, 40)))]
        out.append("".join(parts))
    return out


@pytest.fixture(scope="module", params=sorted(SPM_VARIANTS))
def spm_file(request, tmp_path_factory):
    """(path of a tiny LLaMA GGUF with the variant's SentencePiece vocabulary, llama_cpp.Llama over it)."""
    path = write_tiny_llama(tmp_path_factory.mktemp("spm") / f"{request.param}.gguf",
                            tokenizer=partial(add_spm_tokenizer, variant=request.param))
    llama = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    yield path, llama
    llama.close()


def _tokenizer(path):
    with GGUFFile(str(path)) as gguf:
        return tokenizer_from_gguf(gguf.metadata, str(path))


@pytest.mark.parametrize("special", [False, True])
@pytest.mark.parametrize("add_bos", [False, True])
def test_ids_and_text_match_llama_cpp(spm_file, special, add_bos):
    path, llama = spm_file
    tok = _tokenizer(path)
    assert isinstance(tok, SentencePieceTokenizer)
    for text in TEXTS + _random_texts():
        want = llama.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)
        # llama's add_bos is llama.cpp's add_special: BOS and EOS as the file says, or neither
        got = tok.encode(text, parse_special=special, **({} if add_bos else dict(add_bos=False, add_eos=False)))
        assert got == want, text
        text_want = llama.detokenize(want, special=special).decode("utf-8", errors="replace")
        assert tok.decode(got, skip_special=not special) == text_want, text


def test_decode_of_any_ids_matches_llama_cpp(spm_file):
    """Random id sequences (byte tokens cut mid-character, unused, control and user-defined tokens)."""
    path, llama = spm_file
    tok = _tokenizer(path)
    rng = np.random.default_rng(1)
    for _ in range(200):
        ids = rng.integers(0, tok.vocab_size, int(rng.integers(1, 12))).tolist()
        if rng.random() < 0.3:
            ids[0] = llama.token_bos()
        for special in (False, True):
            want = llama.detokenize(ids, special=special).decode("utf-8", errors="replace")
            assert tok.decode(ids, skip_special=not special) == want, ids
        stream = tok.stream_decoder()
        pieces = "".join(stream.push(i) for i in ids) + stream.flush()
        want = b"".join(llama.detokenize([i], special=True) for i in ids)  # per-token pieces, no space dropped
        assert pieces == want.decode("utf-8", errors="replace")


def test_special_ids_match_llama_cpp(spm_file):
    path, llama = spm_file
    tok = _tokenizer(path)
    vocab = llama_cpp.llama_model_get_vocab(llama.model)
    assert tok.bos_id == llama.token_bos() and tok.eos_id == llama.token_eos()
    assert tok.eog_ids == {i for i in range(tok.vocab_size) if llama_cpp.llama_vocab_is_eog(vocab, i)}
    assert tok.eog_ids  # every variant has one
    control = {i for i in range(tok.vocab_size) if llama_cpp.llama_vocab_is_control(vocab, i)}
    assert {i for i in tok.eog_ids if tok.types[i] == 3} <= control


def test_unknown_byte_without_byte_token_is_refused():
    tok = SentencePieceTokenizer(["<unk>", "<s>", "</s>", "▁", "a"], [0.0] * 5, [2, 3, 3, 1, 1])
    assert tok.encode("a a") == [1, 3, 4, 3, 4]
    with pytest.raises(TokenizerError, match="byte token <0xC3>"):
        tok.encode("é")


def test_unknown_vocabulary_is_refused(tmp_path):
    with pytest.raises(UnsupportedError, match="'bert'"):
        tokenizer_from_gguf({"tokenizer.ggml.model": "bert"}, "x.gguf")


def test_generate_on_spm_gguf_cli_and_api(tmp_path):
    """`volvox generate` on an SPM GGUF: the prompt's ids and logits are llama.cpp's, the greedy tokens too,
    and the command line prints the API's text."""
    path = write_tiny_llama(tmp_path / "spm.gguf", tokenizer=partial(add_spm_tokenizer, variant="llama2"))
    prompt, n = "hello world", 8
    with volvox.load(path) as lm:
        text = lm.generate(prompt, max_new_tokens=n)
        ids = lm.tokenizer.encode(prompt)
        logits = lm.logits(ids)
        session, greedy = lm.new_session(), []
        row = session.forward(ids)[-1]
        for _ in range(n):
            greedy.append(int(np.argmax(row)))
            row = session.forward([greedy[-1]])[-1]
    llama = llama_cpp.Llama(model_path=str(path), n_ctx=128, logits_all=True, verbose=False, n_threads=1)
    try:
        assert llama.tokenize(prompt.encode()) == ids
        llama.eval(ids)
        want = np.array(llama.scores[:len(ids)], np.float32)
        llama.reset()
        want_greedy = []
        for token in llama.generate(ids, top_k=1, temp=0.0, reset=True):
            want_greedy.append(token)
            if len(want_greedy) == n:
                break
    finally:
        llama.close()
    assert float(np.sum((logits - want) ** 2) / np.sum(want ** 2)) < 1e-6
    assert greedy == want_greedy
    assert text == lm.tokenizer.decode(greedy)
    r = subprocess.run([sys.executable, "-m", "volvox", "generate", str(path), "--prompt", prompt,
                        "--max-new-tokens", str(n)], capture_output=True, text=True, timeout=600,
                       cwd=Path(__file__).parent)
    assert r.returncode == 0, r.stderr
    assert text in r.stdout


def test_convert_refuses_spm_gguf(tmp_path):
    path = write_tiny_llama(tmp_path / "spm.gguf", tokenizer=partial(add_spm_tokenizer, variant="llama2"))
    with pytest.raises(UnsupportedError, match="SentencePieceTokenizer"):
        convert(path, tmp_path / "bp")
    assert not (tmp_path / "bp").exists()
