"""LoRA adapters against PEFT on a random tiny LLaMA: an adapter PEFT wrote runs in volvox with
transformers + peft's logits, an adapter volvox wrote loads in peft with volvox's logits, a GGUF of
the same model (q / k rows in llama.cpp's interleaved order) takes the same adapter file, and a
merged blueprint equals the adapter applied at load."""

import json

import numpy as np
import pytest

import volvox
from volvox.errors import BlueprintError, UnsupportedError, WeightsError
from volvox.architectures.lora import (CONFIG_FILE, WEIGHTS_FILE, LoraConfig, add_lora, find_sites, read_adapter,
                                       read_adapter_config)
from volvox.train.lora import init_adapters, save_adapter

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from hf_models import build_causal_lm, rel_err, torch_logits, train_bpe_tokenizer  # noqa: E402

IDS = [5, 17, 42, 99, 3, 250, 7, 61, 12]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """(HF folder, the transformers model) of a random 2-layer LLaMA with GQA."""
    tok = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    vocab = train_bpe_tokenizer(tok)
    folder = tmp_path_factory.mktemp("llama")
    model = build_causal_lm(folder, "llama", tok, vocab)
    return folder, model


def _peft_model(base, r=4, alpha=8.0, seed=1, targets=TARGETS):
    """A PeftModel around a copy of ``base`` with random, non-zero A and B."""
    import copy

    model = peft.get_peft_model(copy.deepcopy(base), peft.LoraConfig(r=r, lora_alpha=alpha, target_modules=targets,
                                                                    lora_dropout=0.0))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model.eval()


@pytest.fixture(scope="module")
def peft_adapter(tiny_llama, tmp_path_factory):
    """(adapter folder written by peft, its logits on IDS from transformers + peft)."""
    model = _peft_model(tiny_llama[1])
    directory = tmp_path_factory.mktemp("peft_adapter")
    model.save_pretrained(directory)
    return directory, torch_logits(model, IDS)


def test_peft_adapter_runs_in_volvox(tiny_llama, peft_adapter):
    directory, want = peft_adapter
    plain = torch_logits(tiny_llama[1], IDS)
    assert rel_err(plain, want) > 0.05  # the adapter changes the logits a lot
    with volvox.load(tiny_llama[0], adapter=directory) as lm:
        assert rel_err(lm.logits(IDS), want) < 1e-4
        assert lm.metadata["adapter"] == str(directory)


def test_volvox_adapter_loads_in_peft(tiny_llama, tmp_path):
    folder, base = tiny_llama
    lm = volvox.load(folder)
    config = LoraConfig(r=3, alpha=5.0, targets=("q", "v", "down", "gate"))
    sites = find_sites(lm.source_graph, config)
    adapters = init_adapters(sites, config, seed=4)
    rng = np.random.default_rng(5)
    for s in sites:  # trained adapters have non-zero B
        adapters[s.b_name][:] = 0.3 * rng.standard_normal(adapters[s.b_name].shape)
    save_adapter(tmp_path, sites, adapters, config, base_model=str(folder))
    lm.close()
    import copy

    model = peft.PeftModel.from_pretrained(copy.deepcopy(base), tmp_path).eval()  # peft adapts in place
    want = torch_logits(model, IDS)
    with volvox.load(folder, adapter=tmp_path) as adapted:
        got = adapted.logits(IDS)
    assert rel_err(got, want) < 1e-4
    assert rel_err(got, torch_logits(base, IDS)) > 0.01


def test_fresh_adapter_changes_nothing_and_inits_like_peft(tiny_llama):
    folder, _ = tiny_llama
    with volvox.load(folder) as lm:
        config = LoraConfig(r=4, alpha=8.0)
        sites = find_sites(lm.source_graph, config)
        adapters = init_adapters(sites, config, seed=0)
        a = adapters[sites[0].a_name]
        bound = 1.0 / np.sqrt(sites[0].in_features)
        assert np.abs(a).max() <= bound and np.abs(a).max() > 0.8 * bound  # kaiming-uniform, a=sqrt(5)
        assert not any(adapters[s.b_name].any() for s in sites)
        assert len(sites) == 2 * 7
        graph, weights = add_lora(lm.source_graph, {}, sites, adapters, config.scale)
        assert sum(n.op == "linear" for n in graph.nodes) == sum(n.op == "linear" for n in lm.source_graph.nodes) + 28
        assert init_adapters(sites, config, seed=0)[sites[3].a_name].tobytes() == adapters[sites[3].a_name].tobytes()


def test_merged_blueprint_equals_adapter_on_load(tiny_llama, peft_adapter, tmp_path):
    from volvox.convert import convert

    folder, (adapter, _) = tiny_llama[0], peft_adapter
    out = convert(folder, tmp_path / "merged", merge_adapter=adapter)
    config = json.loads((out / "config.json").read_text())
    assert not any("lora" in n["id"] for n in config["nodes"])
    with volvox.load(folder, adapter=adapter) as lm, volvox.load(out) as merged:
        want = lm.logits(IDS)
        assert rel_err(merged.logits(IDS), want) < 1e-5
        assert merged.generate(IDS[:4], max_new_tokens=6) == lm.generate(IDS[:4], max_new_tokens=6)


def _hf_to_gguf(folder, model, path, tokenizer_vocab):
    """The transformers LLaMA as a GGUF file, q / k rows permuted as llama.cpp's converter does."""
    from gguf import GGUFWriter

    from tiny_gguf import add_byte_tokenizer

    cfg = model.config
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    hd = cfg.hidden_size // cfg.num_attention_heads

    def permute(w, heads):  # convert_hf_to_gguf.LlamaModel.permute
        return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    w = GGUFWriter(str(path), "llama")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]) if getattr(cfg, "rope_parameters", None)
                         else float(cfg.rope_theta))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_rope_dimension_count(hd)
    add_byte_tokenizer(w)
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    for l in range(cfg.num_hidden_layers):
        for hf, gg in names.items():
            t = sd[f"model.layers.{l}.{hf}.weight"]
            if gg == "attn_q":
                t = permute(t, cfg.num_attention_heads)
            elif gg == "attn_k":
                t = permute(t, cfg.num_key_value_heads)
            w.add_tensor(f"blk.{l}.{gg}.weight", np.ascontiguousarray(t))
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def byte_vocab_llama(tmp_path_factory):
    """(transformers LLaMA with the GGUF test vocabulary's size, its GGUF twin)."""
    import transformers as tf

    from tiny_gguf import _byte_vocab

    vocab = len(_byte_vocab()[0])
    torch.manual_seed(3)
    config = tf.LlamaConfig(vocab_size=vocab, num_hidden_layers=2, hidden_size=48, num_attention_heads=4,
                            num_key_value_heads=2, intermediate_size=80, max_position_embeddings=128,
                            bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = tf.LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.mul_(4.0)
    path = _hf_to_gguf(None, model, tmp_path_factory.mktemp("gguf") / "tiny.gguf", vocab)
    return model, path


def test_peft_adapter_on_a_gguf_llama(byte_vocab_llama, tmp_path):
    """GGUF LLaMA q / k are in interleaved RoPE order: the adapter's B rows are permuted on load, and
    saving from the GGUF model writes the PEFT (HF) order back."""
    model, gguf_path = byte_vocab_llama
    adapted = _peft_model(model, r=2, alpha=3.0, seed=7)
    adapted.save_pretrained(tmp_path / "peft")
    want = torch_logits(adapted, IDS)
    with volvox.load(gguf_path, adapter=tmp_path / "peft") as lm:
        assert rel_err(lm.logits(IDS), want) < 1e-4
        config = read_adapter_config(tmp_path / "peft")
        sites = find_sites(lm.source_graph, config)
        assert {s.interleaved_heads for s in sites if s.target in "qk"} == {4, 2}
    # a volvox round trip through the GGUF model's layout gives back PEFT's file
    with volvox.load(gguf_path) as lm:
        sites = find_sites(lm.source_graph, config)
        save_adapter(tmp_path / "again", sites, read_adapter(tmp_path / "peft", sites), config)
    from safetensors.numpy import load_file

    a, b = load_file(tmp_path / "peft" / WEIGHTS_FILE), load_file(tmp_path / "again" / WEIGHTS_FILE)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_bad_adapters_raise_named_errors(tiny_llama, peft_adapter, tmp_path):
    folder, (adapter, _) = tiny_llama[0], peft_adapter
    with pytest.raises(BlueprintError, match=CONFIG_FILE):
        volvox.load(folder, adapter=tmp_path)
    cfg = json.loads((adapter / CONFIG_FILE).read_text())
    (tmp_path / CONFIG_FILE).write_text(json.dumps({**cfg, "use_dora": True}))
    with pytest.raises(UnsupportedError, match="use_dora"):
        volvox.load(folder, adapter=tmp_path)
    (tmp_path / CONFIG_FILE).write_text(json.dumps({**cfg, "target_modules": ["lm_head"]}))
    with pytest.raises(UnsupportedError, match="lm_head"):
        volvox.load(folder, adapter=tmp_path)
    (tmp_path / CONFIG_FILE).write_text(json.dumps(cfg))
    with pytest.raises(WeightsError, match=WEIGHTS_FILE):
        volvox.load(folder, adapter=tmp_path)
    from safetensors.numpy import load_file, save_file

    tensors = load_file(adapter / WEIGHTS_FILE)
    key = next(k for k in tensors if "lora_A" in k)
    save_file({**tensors, key: tensors[key][:, :-1].copy()}, tmp_path / WEIGHTS_FILE)
    with pytest.raises(WeightsError, match="shape"):
        volvox.load(folder, adapter=tmp_path)
    with pytest.raises(UnsupportedError, match="targets"):
        LoraConfig(targets=("qkv",))
