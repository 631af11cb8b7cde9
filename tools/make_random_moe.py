"""Write a random mixture-of-experts GGUF for benchmarks: SmolLM2-135M's width with its FFN as experts.

    python tools/make_random_moe.py OUT.gguf [--qtype q8_0|q4_1|q4_0|f16|f32] [--experts 8] [--top-k 2]
                                             [--layers 30] [--tokenizer-from smollm2-135m-instruct]
    python tools/bench_generate.py --model OUT.gguf --threads 1 2

The model is Mixtral-shaped (architecture ``llama`` with ``expert_count``, as llama.cpp stores
Mixtral): SmolLM2-135M's sizes (576 wide, 9 heads of 64, 3 KV heads, 1536-wide FFNs, 49,152-token
vocabulary, tied embeddings), every layer's FFN replaced by ``--experts`` experts of that width of
which ``--top-k`` run per token. Weights are random (seeded), so the text is noise; the tokenizer is
copied from the ``--tokenizer-from`` model's GGUF (a volvox model name or a .gguf path) so that
prompts tokenize as they would for SmolLM2. The experts, attention and embedding are stored as
``--qtype``, norms and the routers in f32, as llama.cpp's converter stores them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

DIM, HEADS, KV_HEADS, FFN, CONTEXT = 576, 9, 3, 1536, 8192


def copy_tokenizer(writer, source: str) -> int:
    """Copy every ``tokenizer.*`` key of GGUF ``source`` into ``writer``; returns the vocabulary size."""
    import gguf

    reader = gguf.GGUFReader(source)
    vocab = 0
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        value = field.contents()
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(name, value, field.types[0], sub_type=field.types[-1])
        else:
            writer.add_key_value(name, value, field.types[0])
        if name == "tokenizer.ggml.tokens":
            vocab = len(value)
    return vocab


def write_random_moe(out: str, qtype: str, experts: int, top_k: int, layers: int, tokenizer_gguf: str,
                     seed: int = 0) -> None:
    """Write the random MoE model (see the module doc) to ``out``."""
    import gguf

    qt = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
          "q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0,
          "q4_1": gguf.GGMLQuantizationType.Q4_1}[qtype]
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(out, "llama")
    w.add_name(f"random-moe-{experts}x{top_k}-smollm2-width")
    w.add_block_count(layers)
    w.add_context_length(CONTEXT)
    w.add_embedding_length(DIM)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(100000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(DIM // HEADS)
    w.add_expert_count(experts)
    w.add_expert_used_count(top_k)
    vocab = copy_tokenizer(w, tokenizer_gguf)
    w.add_vocab_size(vocab)

    def matrix(*shape) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * shape[-1] ** -0.5).astype(np.float32)

    def tensor(name: str, data: np.ndarray, store=qt) -> None:
        if store == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, data)
        elif store == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, data.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(data, store), raw_dtype=store)

    f32 = gguf.GGMLQuantizationType.F32
    tensor("token_embd.weight", matrix(vocab, DIM))
    tensor("output_norm.weight", np.ones(DIM, np.float32), f32)
    hd = DIM // HEADS
    for l in range(layers):
        b = f"blk.{l}."
        tensor(b + "attn_norm.weight", np.ones(DIM, np.float32), f32)
        tensor(b + "attn_q.weight", matrix(HEADS * hd, DIM))
        tensor(b + "attn_k.weight", matrix(KV_HEADS * hd, DIM))
        tensor(b + "attn_v.weight", matrix(KV_HEADS * hd, DIM))
        tensor(b + "attn_output.weight", matrix(DIM, HEADS * hd))
        tensor(b + "ffn_norm.weight", np.ones(DIM, np.float32), f32)
        tensor(b + "ffn_gate_inp.weight", matrix(experts, DIM), f32)
        tensor(b + "ffn_gate_exps.weight", matrix(experts, FFN, DIM))   # (experts, ffn, dim)
        tensor(b + "ffn_up_exps.weight", matrix(experts, FFN, DIM))
        tensor(b + "ffn_down_exps.weight", matrix(experts, DIM, FFN))   # (experts, dim, ffn)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the GGUF file to write")
    ap.add_argument("--qtype", default="q8_0", choices=["f32", "f16", "q8_0", "q4_0", "q4_1"])
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--tokenizer-from", default="smollm2-135m-instruct",
                    help="a volvox model name or a .gguf file whose tokenizer the model takes")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    source = a.tokenizer_from
    if not source.endswith(".gguf"):
        from volvox.hub import resolve_model_file

        source = str(resolve_model_file(source))
    write_random_moe(a.out, a.qtype, a.experts, a.top_k, a.layers, source, a.seed)
    print(f"wrote {a.out} ({Path(a.out).stat().st_size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
