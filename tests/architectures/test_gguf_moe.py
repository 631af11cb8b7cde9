"""GGUF mixture-of-experts models against llama.cpp (llama-cpp-python) on the same file.

Random transformers models (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE) are written to GGUF with the `gguf` package as
llama.cpp's converter lays them out: Mixtral as architecture ``llama`` with ``expert_count`` and its
q/k rows permuted for the interleaved RoPE, Qwen2-MoE as ``qwen2moe`` with its shared expert (its
gate a (dim,) vector, or in the f32 files a (1, dim) matrix, which llama.cpp reads alike); experts as
3-D ``ffn_{gate,up,down}_exps`` stacks, the router ``ffn_gate_inp`` in f32, the other matrices in
the case's type. volvox's logits (a prefill, then a step-by-step decode) must equal llama.cpp's
within NMSE 1e-6.
"""

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
llama_cpp = pytest.importorskip("llama_cpp")
torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

import volvox  # noqa: E402
from tiny_gguf import _byte_vocab, add_byte_tokenizer, store_matrix  # noqa: E402

DIM, HEADS, KV_HEADS, LAYERS = 64, 4, 2, 2
IDS = [5, 17, 99, 3, 42, 7, 200, 11, 64, 130, 9, 250]
MODELS = {
    "llama": ("MixtralConfig", dict(num_local_experts=4, num_experts_per_tok=2, intermediate_size=64)),
    "qwen2moe": ("Qwen2MoeConfig", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                                        shared_expert_intermediate_size=96, intermediate_size=128)),
    "qwen3moe": ("Qwen3MoeConfig", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                                        norm_topk_prob=True, head_dim=32)),
    # llama.cpp sizes OLMoE's k_norm by the model width: no grouped-query attention
    "olmoe": ("OlmoeConfig", dict(num_experts=4, num_experts_per_tok=2, intermediate_size=64,
                                  num_key_value_heads=HEADS)),
}
CASES = [("llama", "f32"), ("llama", "f16"), ("llama", "q8_0"), ("llama", "q4_0"),
         ("qwen2moe", "f32"), ("qwen2moe", "q8_0"), ("qwen2moe", "q4_1"),
         ("qwen3moe", "f32"), ("qwen3moe", "q8_0"), ("olmoe", "f32"), ("olmoe", "q4_0")]


def random_moe(arch, vocab, seed=0, **sizes):
    """A random transformers MoE model (fp32) whose weights are widened away from ties, and its config
    (``sizes`` override the module's)."""
    config_class, kw = MODELS[arch]
    torch.manual_seed(seed)
    config = getattr(tf, config_class)(**{
        **dict(vocab_size=vocab, num_hidden_layers=LAYERS, hidden_size=DIM, num_attention_heads=HEADS,
               num_key_value_heads=KV_HEADS, max_position_embeddings=256, tie_word_embeddings=False), **kw, **sizes})
    model = tf.AutoModelForCausalLM.from_config(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2 or "bias" in name:
                p.mul_(4.0)
    return model


def experts_of(sd, l, E, F, mixtral):
    """Layer l's (gate, up, down) expert stacks (E, out, in) from a state dict of either transformers layout."""
    fused = f"model.layers.{l}.mlp.experts."
    if fused + "gate_up_proj" in sd:
        gate_up = sd[fused + "gate_up_proj"]
        return gate_up[:, :F], gate_up[:, F:], sd[fused + "down_proj"]
    prefix = f"model.layers.{l}." + ("block_sparse_moe.experts." if mixtral else "mlp.experts.")
    files = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
    return tuple(np.stack([sd[f"{prefix}{e}.{f}.weight"] for e in range(E)]) for f in files)


def permute_rope(w, heads):
    """HF's rotate-half q/k rows -> the adjacent-pair layout of llama.cpp's llama architecture."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_moe_gguf(path, model, arch, qtype):
    """``model`` as a GGUF file of architecture ``arch``, its matrices (experts too) stored as ``qtype``."""
    cfg = model.config
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    mixtral = arch == "llama"
    E = cfg.num_local_experts if mixtral else cfg.num_experts
    F = getattr(cfg, "moe_intermediate_size", None) or cfg.intermediate_size
    layers, dim, heads = cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads
    hd = getattr(cfg, "head_dim", None) or dim // heads
    rope = getattr(cfg, "rope_parameters", None) or {}
    theta = float(rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(dim)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_dimension_count(hd)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_expert_count(E)
    w.add_expert_used_count(cfg.num_experts_per_tok)
    if not mixtral:
        w.add_expert_feed_forward_length(F)
    if arch == "qwen2moe":
        w.add_expert_shared_feed_forward_length(cfg.shared_expert_intermediate_size)
    add_byte_tokenizer(w, bos_id=None)

    def tensor(name, data, q=qtype):
        if data.ndim == 1:
            w.add_tensor(name, np.ascontiguousarray(data, np.float32))
        else:
            array, raw_dtype = store_matrix(data, q)
            w.add_tensor(name, array, raw_dtype=raw_dtype)

    tensor("token_embd.weight", sd["model.embed_tokens.weight"], "f32")
    tensor("output_norm.weight", sd["model.norm.weight"])
    tensor("output.weight", sd["lm_head.weight"])
    for l in range(layers):
        b, h = f"blk.{l}.", f"model.layers.{l}."
        q, k = sd[h + "self_attn.q_proj.weight"], sd[h + "self_attn.k_proj.weight"]
        if mixtral:
            q, k = permute_rope(q, heads), permute_rope(k, cfg.num_key_value_heads)
        tensor(b + "attn_norm.weight", sd[h + "input_layernorm.weight"])
        tensor(b + "attn_q.weight", q)
        tensor(b + "attn_k.weight", k)
        tensor(b + "attn_v.weight", sd[h + "self_attn.v_proj.weight"])
        tensor(b + "attn_output.weight", sd[h + "self_attn.o_proj.weight"])
        for x in "qkv":
            if h + f"self_attn.{x}_proj.bias" in sd:
                tensor(b + f"attn_{x}.bias", sd[h + f"self_attn.{x}_proj.bias"])
        for x in "qk":  # Qwen3-MoE: per head (head_dim,); OLMoE: the whole projection
            if h + f"self_attn.{x}_norm.weight" in sd:
                tensor(b + f"attn_{x}_norm.weight", sd[h + f"self_attn.{x}_norm.weight"])
        tensor(b + "ffn_norm.weight", sd[h + "post_attention_layernorm.weight"])
        router = sd[h + ("block_sparse_moe.gate.weight" if mixtral and h + "block_sparse_moe.gate.weight" in sd
                         else "mlp.gate.weight")]
        tensor(b + "ffn_gate_inp.weight", router, "f32")
        gate, up, down = experts_of(sd, l, E, F, mixtral)
        tensor(b + "ffn_gate_exps.weight", gate)
        tensor(b + "ffn_up_exps.weight", up)
        tensor(b + "ffn_down_exps.weight", down)
        if arch == "qwen2moe":
            gate = sd[h + "mlp.shared_expert_gate.weight"]  # (1, dim); llama.cpp's converter stores a vector
            tensor(b + "ffn_gate_inp_shexp.weight", gate.reshape(-1) if qtype != "f32" else gate, "f32")
            for x in ("gate", "up", "down"):
                tensor(b + f"ffn_{x}_shexp.weight", sd[h + f"mlp.shared_expert.{x}_proj.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def models():
    vocab = len(_byte_vocab()[0])
    return {arch: random_moe(arch, vocab) for arch in MODELS}


def llama_cpp_logits(path, ids):
    """llama.cpp's logits (len(ids), vocab) over a prefill, and over a token-by-token decode."""
    f32 = 0  # GGML_TYPE_F32: volvox caches K/V in f32
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, logits_all=True, verbose=False, n_threads=2, seed=0,
                          type_k=f32, type_v=f32, flash_attn=False)
    try:
        llm.eval(ids)
        prefill = np.array(llm.scores[:len(ids)], np.float64)
        llm.reset()
        for t in ids:
            llm.eval([t])
        steps = np.array(llm.scores[:len(ids)], np.float64)
    finally:
        llm.close()
    return prefill, steps


def nmse(got, want):
    return float(((got - want) ** 2).sum() / (want ** 2).sum())


@pytest.mark.parametrize("arch, qtype", CASES)
def test_logits_match_llama_cpp(tmp_path, models, arch, qtype):
    path = write_moe_gguf(tmp_path / f"{arch}-{qtype}.gguf", models[arch], arch, qtype)
    want_prefill, want_steps = llama_cpp_logits(path, IDS)
    with volvox.load(path) as lm:
        prefill = lm.logits(IDS).astype(np.float64)
        session = lm.new_session()
        steps = np.concatenate([session.forward([t]) for t in IDS]).astype(np.float64)
    assert nmse(prefill, want_prefill) < 1e-6
    assert nmse(steps, want_steps) < 1e-6


def test_reference_oracle_agrees_with_transformers(tmp_path, models):
    """The f32 file read back by volvox's numpy oracle gives transformers' logits: the file is the model."""
    path = write_moe_gguf(tmp_path / "qwen2moe.gguf", models["qwen2moe"], "qwen2moe", "f32")
    with torch.no_grad():
        want = models["qwen2moe"](torch.tensor([IDS])).logits[0].numpy().astype(np.float64)
    with volvox.load(path, reference=True) as oracle:
        assert nmse(oracle.logits(IDS).astype(np.float64), want) < 1e-10


def test_bad_expert_metadata_is_refused(tmp_path, models):
    model = models["llama"]
    used = model.config.num_experts_per_tok
    model.config.num_experts_per_tok = model.config.num_local_experts + 1   # more experts per token than exist
    try:
        path = write_moe_gguf(tmp_path / "bad.gguf", model, "llama", "f32")
    finally:
        model.config.num_experts_per_tok = used
    with pytest.raises(volvox.UnsupportedError, match="expert_used_count 5 of 4 experts"):
        volvox.load(path)


def test_benchmark_model_tool_writes_what_llama_cpp_reads(tmp_path):
    """tools/make_random_moe.py's file (one layer of SmolLM2-135M's width, 8 experts, top 2, q4_1) gives
    llama.cpp's logits."""
    import importlib.util
    from pathlib import Path

    from tiny_gguf import write_tiny_llama

    spec = importlib.util.spec_from_file_location("make_random_moe", Path(__file__).parents[2] / "tools" / "make_random_moe.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    tokenizer = write_tiny_llama(tmp_path / "tokenizer.gguf", n_layers=1)
    path = tmp_path / "moe.gguf"
    tool.write_random_moe(str(path), "q4_1", experts=8, top_k=2, layers=1, tokenizer_gguf=str(tokenizer))
    want_prefill, want_steps = llama_cpp_logits(path, IDS)
    with volvox.load(path) as lm:
        prefill = lm.logits(IDS).astype(np.float64)
        session = lm.new_session()
        steps = np.concatenate([session.forward([t]) for t in IDS]).astype(np.float64)
    assert nmse(prefill, want_prefill) < 1e-6 and nmse(steps, want_steps) < 1e-6
