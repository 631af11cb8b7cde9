"""Write a Hugging Face GPT-2 checkpoint as an f32 GGUF in llama.cpp's `gpt2` layout, so the
benchmark can run llama.cpp on exactly the weights volvox runs (no llama.cpp checkout needed).

    python tools/gpt2_to_gguf.py HF_DIR OUT.gguf

Follows llama.cpp's convert_hf_to_gguf.py for GPT2LMHeadModel: Conv1D weights transposed to
(out, in), c_attn kept fused as attn_qkv, the vocabulary from tokenizer.json padded with
unused `[PAD<i>]` tokens up to the model's vocab_size.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    a = ap.parse_args()
    import gguf
    from safetensors.numpy import load_file

    src = Path(a.hf_dir)
    cfg = json.loads((src / "config.json").read_text())
    tok = json.loads((src / "tokenizer.json").read_text())
    weights = load_file(str(src / "model.safetensors"))
    n_vocab = int(cfg["vocab_size"])
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])  # [(token, id)]
    tokens = [t for t, _ in vocab] + [f"[PAD{i}]" for i in range(len(vocab), n_vocab)]
    types = [gguf.TokenType.NORMAL] * len(vocab) + [gguf.TokenType.UNUSED] * (n_vocab - len(vocab))
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]

    w = gguf.GGUFWriter(a.out, "gpt2")
    w.add_block_count(cfg["n_layer"])
    w.add_context_length(cfg["n_positions"])
    w.add_embedding_length(cfg["n_embd"])
    w.add_feed_forward_length(cfg.get("n_inner") or 4 * cfg["n_embd"])
    w.add_head_count(cfg["n_head"])
    w.add_layer_norm_eps(cfg["layer_norm_epsilon"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)

    def put(name: str, array: np.ndarray) -> None:
        w.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))

    t = "transformer."
    put("token_embd.weight", weights[t + "wte.weight"])
    put("position_embd.weight", weights[t + "wpe.weight"])
    put("output_norm.weight", weights[t + "ln_f.weight"])
    put("output_norm.bias", weights[t + "ln_f.bias"])
    if "lm_head.weight" in weights and not cfg.get("tie_word_embeddings", True):
        put("output.weight", weights["lm_head.weight"])
    for i in range(cfg["n_layer"]):
        h = f"{t}h.{i}."
        for ours, theirs, transpose in (("attn_norm", "ln_1", False), ("attn_qkv", "attn.c_attn", True),
                                        ("attn_output", "attn.c_proj", True), ("ffn_norm", "ln_2", False),
                                        ("ffn_up", "mlp.c_fc", True), ("ffn_down", "mlp.c_proj", True)):
            weight = weights[h + theirs + ".weight"]
            put(f"blk.{i}.{ours}.weight", weight.T if transpose else weight)
            put(f"blk.{i}.{ours}.bias", weights[h + theirs + ".bias"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
