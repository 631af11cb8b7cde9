"""Tiny random LLaMA-family GGUF files written with the independent `gguf` package (for fast tests)."""

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter
from gguf.quants import quantize

QTYPES = {"f32": T.F32, "f16": T.F16, "q8_0": T.Q8_0, "q4_0": T.Q4_0, "q4_1": T.Q4_1, "q4_k": T.Q4_K,
          "q6_k": T.Q6_K, "q5_k": T.Q5_K, "q8_k": T.Q8_K}


def _byte_vocab():
    """GPT-2 byte-level vocab: specials, then the 256 byte symbols, then a few merges."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    symbols = [chr(c) for c in cs]
    merges = ["Ġ t", "h e", "Ġt he", "i n"]
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + symbols + ["Ġt", "he", "Ġthe", "in"]
    types = [3, 3, 3] + [1] * (len(tokens) - 3)
    return tokens, merges, types


def add_byte_tokenizer(w, bos_id: int | None = 1) -> None:
    """Write _byte_vocab() as ``w``'s (a GGUFWriter's) GPT-2 tokenizer: eos 2, bos ``bos_id`` (None: none), no BOS added."""
    tokens, merges, types = _byte_vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types(types)
    if bos_id is not None:
        w.add_bos_token_id(bos_id)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)


# (bytes per 256-value block, byte offsets of the f16 scale fields)
K_LAYOUT = {"q4_k": (144, (0, 2)), "q5_k": (176, (0, 2)), "q6_k": (210, (208,)), "q8_k": (292, ())}


def random_k_blocks(rng, shape, q):
    """Random k-quant blocks for a (rows, cols) matrix, their f16 scales set to small values."""
    size, scale_offsets = K_LAYOUT[q]
    rows, cols = shape
    blocks = rng.integers(0, 256, size=(rows, cols // 256, size), dtype=np.uint8)
    for off in scale_offsets:
        scales = (rng.uniform(0.5, 1.0, size=(rows, cols // 256)) * 4e-5 / np.sqrt(cols / 256)).astype(np.float16)
        blocks[..., off:off + 2] = scales.view(np.uint8).reshape(rows, cols // 256, 2)
    return blocks.reshape(rows, -1)


def write_tiny_llama(path, *, arch="llama", n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn=96,
                     qtype="f32", embed_qtype="f32", tied=True, context=128, seed=0, tokenizer=None):
    """Write a random LLaMA-style GGUF to ``path``; weights stored as ``qtype``; ``tokenizer(w)`` writes the
    vocabulary and returns its size (default: the byte-level BPE one)."""
    rng = np.random.default_rng(seed)
    w = GGUFWriter(str(path), arch)
    if tokenizer is None:
        add_byte_tokenizer(w)
        vocab = len(_byte_vocab()[0])
    else:
        vocab = tokenizer(w)
    w.add_block_count(n_layers)
    w.add_context_length(context)
    w.add_embedding_length(dim)
    w.add_feed_forward_length(ffn)
    w.add_head_count(n_heads)
    w.add_head_count_kv(n_kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_rope_dimension_count(dim // n_heads)
    hd = dim // n_heads

    def tensor(name, shape, q):
        data = (rng.standard_normal(shape) * (0.5 if len(shape) == 1 else shape[-1] ** -0.5)).astype(np.float32)
        if len(shape) == 1:
            data = 1.0 + 0.1 * data
        if q == "f32" or len(shape) == 1:
            w.add_tensor(name, data)
        elif q == "f16":
            w.add_tensor(name, data.astype(np.float16))
        elif q.endswith("_k"):  # gguf cannot quantize k-quants: random blocks with small f16 scales
            w.add_tensor(name, random_k_blocks(rng, shape, q), raw_dtype=QTYPES[q])
        else:
            w.add_tensor(name, quantize(data, QTYPES[q]), raw_dtype=QTYPES[q])

    tensor("token_embd.weight", (vocab, dim), embed_qtype)
    for l in range(n_layers):
        b = f"blk.{l}."
        tensor(b + "attn_norm.weight", (dim,), "f32")
        tensor(b + "attn_q.weight", (n_heads * hd, dim), qtype)
        tensor(b + "attn_k.weight", (n_kv_heads * hd, dim), qtype)
        tensor(b + "attn_v.weight", (n_kv_heads * hd, dim), qtype)
        tensor(b + "attn_output.weight", (dim, n_heads * hd), qtype)
        tensor(b + "ffn_norm.weight", (dim,), "f32")
        tensor(b + "ffn_gate.weight", (ffn, dim), qtype)
        tensor(b + "ffn_up.weight", (ffn, dim), qtype)
        tensor(b + "ffn_down.weight", (dim, ffn), qtype)
    tensor("output_norm.weight", (dim,), "f32")
    if not tied:
        tensor("output.weight", (vocab, dim), qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# SentencePiece vocabulary variants as llama.cpp's converter writes them (tokenizer.ggml.model "llama"):
# variant -> (leading special tokens as (text, type), GGUF key overrides)
SPM_VARIANTS = {
    # Llama-2 / Mistral: <unk> <s> </s>, a space prefixed, BOS added
    "llama2": ([("<unk>", 2), ("<s>", 3), ("</s>", 3)], {}),
    # Gemma: no space prefix, BOS 2 / EOS 1, chat turn markers, user-defined whitespace runs
    "gemma": ([("<pad>", 3), ("<eos>", 3), ("<bos>", 3), ("<unk>", 2), ("<start_of_turn>", 4),
               ("<end_of_turn>", 4), ("\n\n", 4), ("▁▁", 4), ("\t\t", 4), ("<unused0>", 3)],
              dict(bos=2, eos=1, unk=3, add_space_prefix=False)),
    # Phi-3: general.name says phi3, so llama.cpp strips the whitespace after its special tokens
    "phi3": ([("<unk>", 2), ("<s>", 3), ("</s>", 3), ("<|endoftext|>", 3), ("<|user|>", 3), ("<|assistant|>", 3),
              ("<|end|>", 3), ("<|system|>", 3)], dict(eos=3, name="Phi-3 mini tiny")),
    # an EOG-named token stored as normal (llama.cpp makes it control), an unused token, EOS added, no BOS
    "eog": ([("<unk>", 2), ("<s>", 3), ("</s>", 3), ("<|im_end|>", 1), ("<|eot_id|>", 1), ("<reserved>", 5),
             ("<|im_start|>", 4), ("<|stop|>", 3)], dict(add_bos=False, add_eos=True, eot=7)),
}
SPM_WORDS = ("hello world the quick brown fox jumps over lazy dog tokenizer piece sentence llama gemma phi "
             "héllo wörld über naïve café 中文 字符 数字 1234567890 3.14 <s> </s> def return if else").split()


def spm_vocab(variant: str, seed: int = 0):
    """(tokens, scores, types, keys) of a SentencePiece vocabulary: the variant's specials, the 256 byte
    tokens, single characters and the substrings of "▁"-prefixed words, with random scores on a coarse grid
    (ties happen)."""
    specials, keys = SPM_VARIANTS[variant]
    rng = np.random.default_rng(seed)
    tokens = [t for t, _ in specials] + [f"<0x{b:02X}>" for b in range(256)]
    types = [k for _, k in specials] + [6] * 256
    pieces = {}
    for word in SPM_WORDS:
        for text in ("▁" + word, word):
            for i in range(len(text)):
                for j in range(i + 1, min(len(text), i + 6) + 1):
                    pieces.setdefault(text[i:j], None)
    pieces.update(dict.fromkeys("▁abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'\"-:;()"))
    pieces = [p for p in pieces if p not in tokens]
    tokens += pieces
    types += [1] * len(pieces)
    scores = [0.0] * (len(tokens) - len(pieces)) + [-float(s) for s in rng.integers(0, 16, len(pieces))]
    return tokens, scores, types, keys


def add_spm_tokenizer(w, variant: str = "llama2") -> int:
    """Write spm_vocab(``variant``) as ``w``'s (a GGUFWriter's) SentencePiece tokenizer; returns its size."""
    tokens, scores, types, keys = spm_vocab(variant)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(keys.get("bos", 1))
    w.add_eos_token_id(keys.get("eos", 2))
    w.add_unk_token_id(keys.get("unk", 0))
    if "eot" in keys:
        w.add_eot_token_id(keys["eot"])
    if "name" in keys:
        w.add_name(keys["name"])
    for key in ("add_bos", "add_eos", "add_space_prefix"):
        if key in keys:
            getattr(w, f"add_{key}_token" if key != "add_space_prefix" else "add_add_space_prefix")(keys[key])
    return len(tokens)


# the block types gguf's quantizer writes; the k-quants and iq4_nl come from volvox's port of ggml's
# reference quantizers (the logits tests hold both engines to the same stored blocks, whoever wrote them)
GGUF_QUANTIZES = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0")


def store_matrix(data: np.ndarray, qtype: str):
    """(array, raw_dtype) for GGUFWriter.add_tensor: float32 ``data`` (..., cols) as ``qtype`` (f32, f16 or a
    block type); a k-quant over rows that are not whole 256-value super-blocks falls back as llama.cpp's
    quantizer does (q2_k / q3_k -> q4_0, q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0)."""
    from volvox.convert import storage_type
    from volvox.ir.quant_blocks import quantize_ref

    data = np.ascontiguousarray(data, np.float32)
    if qtype == "f32":
        return data, None
    if qtype == "f16":
        return data.astype(np.float16), None
    qtype = storage_type(qtype, data.shape[-1])
    ggml_type = T[qtype.upper()]
    if qtype in GGUF_QUANTIZES:
        return quantize(data, ggml_type), ggml_type
    rows = quantize_ref(data.reshape(-1, data.shape[-1]), qtype).data  # (rows, bytes per row)
    return np.ascontiguousarray(rows).reshape(*data.shape[:-1], -1), ggml_type
