"""State-space language models: the Mamba / Mamba-2 decoder graph (every layer h += out_proj(mixer(
rmsnorm(h))), no attention, positions unread), the hybrid graph of Bamba (Mamba-2 and attention layers,
each followed by a SwiGLU block), and their import from GGUF files (architecture ``mamba`` / ``mamba2``).
Hugging Face folders are read by hf_mamba.py. The mixers:
- Mamba: in_proj -> (x, z); x -> causal conv1d -> silu -> x_proj -> (dt_low, B, C);
  dt = dt_proj(dt_low); y = selective_scan(x, dt, A, B, C, D) * silu(z).
- Mamba-2: in_proj -> (z, xBC, dt); xBC -> causal conv1d -> silu -> (x, B, C);
  y = ssd_scan(x, dt, dt_bias, A, B, C, D) (scalar A per head, B / C shared by a group of heads);
  y = gated_rms_norm(y, z) (per group of d_inner / n_groups columns).
The recurrent state lives in the session's state cache (runtime/state_cache.py; the ops in
ops/ssm.py): ``StateShape`` below is what a model declares in ``metadata["state"]``.

The graphs take weights as GGUF stores them: A = -exp(A_log), the conv weight as (channels, kernel)
(hf_mamba.py converts a checkpoint's at load); GGUF's Mamba-2 A, D (n_heads, 1) and norm
(n_groups, d_inner / n_groups) are flattened.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from volvox.architectures.builder import DECODER_INPUTS, GraphBuilder
from volvox.errors import GGUFError, UnsupportedError
from volvox.formats.imported import Deferred, Imported, ModelDims
from volvox.ir.graph import Graph, TensorSpec
from volvox.ir.quant_blocks import QuantTensor
from volvox.ops.linear import WEIGHT_DTYPES
from volvox.runtime.state_cache import StateShape
from volvox.tokenizers.gguf_vocab import tokenizer_from_gguf

GGUF_ARCHITECTURES = ("mamba", "mamba2")
UNLIMITED_CONTEXT = 1 << 20  # the state does not grow; the limit GGUF writers record for SSMs


@dataclass(frozen=True)
class MambaConfig:
    """Hyperparameters of a Mamba (version 1) or Mamba-2 (version 2) decoder."""

    version: int
    n_layers: int
    dim: int
    d_inner: int
    state_size: int
    conv_kernel: int
    vocab_size: int
    norm_eps: float
    context_length: int = UNLIMITED_CONTEXT
    dt_rank: int = 0      # Mamba: width of dt's low-rank projection
    n_heads: int = 0      # Mamba-2: heads (d_inner = n_heads * head_dim)
    n_groups: int = 1     # Mamba-2: groups of heads sharing B and C

    @property
    def conv_channels(self) -> int:
        """Channels of the causal conv: x alone (Mamba), or x, B and C (Mamba-2)."""
        return self.d_inner if self.version == 1 else self.d_inner + 2 * self.n_groups * self.state_size

    @property
    def head_dim(self) -> int:
        """Mamba-2's head width."""
        return self.d_inner // self.n_heads

    def state_shape(self) -> StateShape:
        """The per-layer states a session keeps for this model."""
        ssm = ((self.d_inner, self.state_size) if self.version == 1
               else (self.n_heads, self.head_dim, self.state_size))
        return StateShape(self.n_layers, (self.conv_kernel - 1, self.conv_channels), ssm)

    def dims(self) -> ModelDims:
        """What the generate task needs: no attention (no KV cache), the vocabulary and context."""
        return ModelDims(n_layers=self.n_layers, n_kv_heads=0, head_dim=0, context_length=self.context_length,
                         vocab_size=self.vocab_size)


# Weight names in GGUF files; "{l}" is the layer index. *_bias entries are optional.
_G = "blk.{l}."
GGUF_NAMES = {
    "embed": "token_embd.weight", "norm": _G + "attn_norm.weight",
    "in_proj": _G + "ssm_in.weight", "in_proj_bias": _G + "ssm_in.bias",
    "conv": _G + "ssm_conv1d.weight", "conv_bias": _G + "ssm_conv1d.bias",
    "x_proj": _G + "ssm_x.weight", "dt_proj": _G + "ssm_dt.weight", "dt_proj_bias": _G + "ssm_dt.bias",
    "dt_bias": _G + "ssm_dt.bias", "A": _G + "ssm_a", "D": _G + "ssm_d", "mixer_norm": _G + "ssm_norm.weight",
    "out_proj": _G + "ssm_out.weight", "out_proj_bias": _G + "ssm_out.bias",
    "output_norm": "output_norm.weight", "output": "output.weight",
}


def _columns(b: GraphBuilder, node_id: str, x: str, start: int, end: int, out: str) -> str:
    """Columns start..end of a (seq, width) tensor."""
    return b.add("slice", node_id, {"x": x}, out, axes=[1], starts=[start], ends=[end])


def ssm_mixer_residual(b: GraphBuilder, cfg: MambaConfig, p: str, layer: int, slot: int, h: str, x: str) -> str:
    """h + out_proj(mixer(x)) for file layer ``layer``, its state in state-cache layer ``slot``; returns the sum
    (seq, dim). x is the normed residual stream (seq, dim)."""
    di, n = cfg.d_inner, cfg.state_size
    proj = b.linear(p + "in_proj", x, "in_proj", layer, p + "proj")
    conv_in = {"weight": b.weight("conv", layer)}
    if b.names["conv_bias"].format(l=layer) in b.weights:
        conv_in["bias"] = b.weight("conv_bias", layer)
    if cfg.version == 1:
        # proj (seq, 2*d_inner) = [x | z]
        xs = _columns(b, p + "x_in", proj, 0, di, p + "x_in")
        z = _columns(b, p + "z", proj, di, 2 * di, p + "z")
        xc = b.add("causal_conv1d", p + "conv", {"x": xs, **conv_in}, p + "x_conv", layer=slot)
        xc = b.add("silu", p + "conv_act", {"x": xc}, p + "x_act")  # (seq, d_inner)
        dbc = b.linear(p + "x_proj", xc, "x_proj", layer, p + "dbc")  # (seq, dt_rank + 2N)
        r = cfg.dt_rank
        dt_low = _columns(b, p + "dt_low", dbc, 0, r, p + "dt_low")
        bm = _columns(b, p + "B", dbc, r, r + n, p + "B")  # (seq, N)
        cm = _columns(b, p + "C", dbc, r + n, r + 2 * n, p + "C")  # (seq, N)
        dt = b.linear(p + "dt_proj", dt_low, "dt_proj", layer, p + "dt")  # (seq, d_inner)
        y = b.add("selective_scan", p + "scan", {"x": xc, "dt": dt, "A": b.weight("A", layer), "B": bm, "C": cm,
                                                  "D": b.weight("D", layer), "z": z}, p + "y", layer=slot)
    else:
        # proj (seq, d_inner + conv_channels + n_heads) = [z | x B C | dt]
        cc, gn = cfg.conv_channels, cfg.n_groups * n
        z = _columns(b, p + "z", proj, 0, di, p + "z")
        xbc = _columns(b, p + "xbc", proj, di, di + cc, p + "xbc")
        dt = _columns(b, p + "dt", proj, di + cc, di + cc + cfg.n_heads, p + "dt")  # (seq, n_heads)
        xbc = b.add("causal_conv1d", p + "conv", {"x": xbc, **conv_in}, p + "xbc_conv", layer=slot)
        xbc = b.add("silu", p + "conv_act", {"x": xbc}, p + "xbc_act")  # (seq, conv_channels)
        xs = _columns(b, p + "x_ssm", xbc, 0, di, p + "x_ssm")  # (seq, n_heads * head_dim)
        bm = _columns(b, p + "B", xbc, di, di + gn, p + "B")  # (seq, n_groups * N)
        cm = _columns(b, p + "C", xbc, di + gn, di + 2 * gn, p + "C")  # (seq, n_groups * N)
        y = b.add("ssd_scan", p + "scan", {"x": xs, "dt": dt, "dt_bias": b.weight("dt_bias", layer),
                                            "A": b.weight("A", layer), "B": bm, "C": cm, "D": b.weight("D", layer)},
                  p + "y_ssm", layer=slot, n_heads=cfg.n_heads, head_dim=cfg.head_dim, n_groups=cfg.n_groups,
                  state_size=n)
        y = b.add("gated_rms_norm", p + "gated_norm", {"x": y, "z": z, "weight": b.weight("mixer_norm", layer)},
                  p + "y", eps=cfg.norm_eps, group_size=di // cfg.n_groups)
    o = b.linear(p + "out_proj", y, "out_proj", layer, p + "o")  # (seq, dim)
    return b.add("add", p + "residual", {"a": h, "b": o}, p + "h_ssm")


def _logits(b: GraphBuilder, h: str, eps: float) -> None:
    """The head: the rows the caller wants, the final RMSNorm, the vocabulary projection (tied or not)."""
    h = b.add("output_rows", "output_rows", {"x": h}, "h.out")  # (out_seq, dim)
    h = b.rms_norm("output_norm", h, "output_norm", None, "h.norm", eps)
    b.linear("lm_head", h, "output" if b.has("output") else "embed", None, "logits")  # (out_seq, vocab)


def build_mamba_graph(cfg: MambaConfig, names: dict[str, str], weights: dict[str, TensorSpec]) -> Graph:
    """The decoder graph: inputs tokens/positions (seq,) (positions unread), output logits (out_seq, vocab)."""
    b = GraphBuilder("Mamba" if cfg.version == 1 else "Mamba-2", names, weights)
    h = b.add("embedding", "embed", {"table": b.weight("embed"), "ids": "tokens"}, "h.0")  # (seq, dim)
    for l in range(cfg.n_layers):
        x = b.rms_norm(f"l{l}.norm", h, "norm", l, f"l{l}.x", cfg.norm_eps)  # (seq, dim)
        h = ssm_mixer_residual(b, cfg, f"l{l}.", l, l, h, x)
    _logits(b, h, cfg.norm_eps)
    return b.graph(list(DECODER_INPUTS), ["logits"])


def imported_model(cfg, graph: Graph, weights: dict, source: str) -> Imported:
    """A generate task's import of ``graph`` over ``weights``: dims and (with SSM layers) the state shapes
    of ``cfg`` (a MambaConfig or HybridConfig) in its metadata."""
    metadata = {"task": "generate", "dims": vars(cfg.dims())}
    if cfg.state_shape().n_layers:
        metadata["state"] = cfg.state_shape().to_metadata()
    return Imported(graph, {k: weights[k] for k in graph.weights}, metadata, source)


# ------------------------------------------------------------------------------ hybrid stacks: Bamba
@dataclass(frozen=True)
class HybridConfig:
    """A decoder mixing Mamba-2 layers and attention layers (Bamba), every layer followed by a SwiGLU
    feed-forward block. Attention layers keep their keys and values in the KV cache at their own layer
    index; SSM layers their state in the state cache, counted among SSM layers."""

    ssm: MambaConfig        # the Mamba-2 mixers (n_layers: how many layers are SSM layers)
    layer_kinds: tuple      # "ssm" or "attention", per layer
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rope_theta: float
    rope_dim: int           # rotated dims of each head (partial rotary: the first rope_dim)
    ffn_dim: int

    def dims(self) -> ModelDims:
        """A KV cache slot per layer (attention layers use theirs) and the SSM layers' state beside it."""
        return ModelDims(n_layers=len(self.layer_kinds), n_kv_heads=self.n_kv_heads, head_dim=self.head_dim,
                         context_length=self.ssm.context_length, vocab_size=self.ssm.vocab_size)

    def state_shape(self) -> StateShape:
        """The SSM layers' states."""
        return self.ssm.state_shape()


def build_hybrid_graph(cfg: HybridConfig, names: dict[str, str], weights: dict[str, TensorSpec]) -> Graph:
    """The hybrid decoder graph: inputs tokens/positions (seq,), output logits (out_seq, vocab)."""
    b = GraphBuilder("Bamba", names, weights)
    eps = cfg.ssm.norm_eps
    attn = dict(n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim)
    rope = dict(head_dim=cfg.head_dim, rope_dim=cfg.rope_dim, theta=cfg.rope_theta, style="half")
    h = b.add("embedding", "embed", {"table": b.weight("embed"), "ids": "tokens"}, "h.0")  # (seq, dim)
    slot = 0  # the state-cache layer of the next SSM layer
    for l, kind in enumerate(cfg.layer_kinds):
        p = f"l{l}."
        x = b.rms_norm(p + "norm", h, "norm", l, p + "x", eps)  # (seq, dim)
        if kind == "ssm":
            h = ssm_mixer_residual(b, cfg.ssm, p, l, slot, h, x)
            slot += 1
        else:
            q = b.linear(p + "q_proj", x, "q", l, p + "q")  # (seq, n_heads*head_dim)
            k = b.linear(p + "k_proj", x, "k", l, p + "k")  # (seq, n_kv_heads*head_dim)
            v = b.linear(p + "v_proj", x, "v", l, p + "v")  # (seq, n_kv_heads*head_dim)
            q = b.add("rope", p + "q_rope", {"x": q, "positions": "positions"}, p + "q_rot", **rope)
            k = b.add("rope", p + "k_rope", {"x": k, "positions": "positions"}, p + "k_rot", **rope)
            h = b.attention_residual(p, l, h, q, k, v, attn)
        # feed-forward block: h += W_down (silu(W_gate x) * W_up x), x = rmsnorm(h)
        x = b.rms_norm(p + "ffn_norm", h, "ffn_norm", l, p + "x_ffn", eps)
        g = b.linear(p + "gate_proj", x, "gate", l, p + "gate")  # (seq, ffn_dim)
        u = b.linear(p + "up_proj", x, "up", l, p + "up")        # (seq, ffn_dim)
        g = b.add("silu", p + "gate_act", {"x": g}, p + "gate_silu")
        m = b.add("mul", p + "swiglu", {"a": g, "b": u}, p + "swiglu")
        d = b.linear(p + "down_proj", m, "down", l, p + "down")  # (seq, dim)
        h = b.add("add", p + "ffn_residual", {"a": h, "b": d}, f"h.{l + 1}")
    _logits(b, h, eps)
    return b.graph(list(DECODER_INPUTS), ["logits"])


# ------------------------------------------------------------------------------ GGUF
def gguf_config(md: dict, path: str) -> MambaConfig:
    """MambaConfig from GGUF metadata; GGUFError naming a missing key."""
    arch = md.get("general.architecture")

    def get(key, default=None):
        value = md.get(f"{arch}.{key}", default)
        if value is None:
            raise GGUFError(f"{path}: metadata key {arch}.{key} is missing")
        return int(value)

    if md.get(f"{arch}.ssm.dt_b_c_rms", False):
        raise UnsupportedError(f"{path}: RMS-normed dt / B / C (Falcon-Mamba) is not supported")
    tokens = md.get("tokenizer.ggml.tokens")
    common = dict(n_layers=get("block_count"), dim=get("embedding_length"), d_inner=get("ssm.inner_size"),
                  state_size=get("ssm.state_size"), conv_kernel=get("ssm.conv_kernel"),
                  vocab_size=get("vocab_size", len(tokens) if tokens is not None else None),
                  norm_eps=float(md.get(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
                  context_length=get("context_length", UNLIMITED_CONTEXT))
    if arch == "mamba":
        return MambaConfig(version=1, dt_rank=get("ssm.time_step_rank"), **common)
    n_heads, groups = get("ssm.time_step_rank"), get("ssm.group_count", 1)
    if n_heads <= 0 or common["d_inner"] % n_heads or groups <= 0 or n_heads % groups:
        raise GGUFError(f"{path}: ssm.inner_size {common['d_inner']} / time_step_rank {n_heads} / "
                        f"group_count {groups} do not divide")
    return MambaConfig(version=2, n_heads=n_heads, n_groups=groups, **common)


# small tensors the ops take as float32 vectors / matrices, with the shape the graph wants
_F32_KEYS = ("conv", "conv_bias", "dt_bias", "A", "D", "mixer_norm")


def import_gguf(gguf, path: str) -> Imported:
    """The mamba / mamba2 model of an open GGUFFile (a generate task; closing the model closes the file)."""
    c = gguf_config(gguf.metadata, path)
    specs: dict[str, TensorSpec] = {}
    for name, info in gguf.tensors.items():
        dtype = {"f32": "float32", "f16": "float16"}.get(info.qtype, info.qtype)
        if dtype not in WEIGHT_DTYPES:
            raise UnsupportedError(f"{path}: tensor {name!r} has type {info.qtype}, which volvox does not compute with")
        specs[name] = TensorSpec(name, tuple(info.shape), dtype)
    weights: dict = {}
    f32_names = {GGUF_NAMES[k].format(l=l): k for k in _F32_KEYS for l in range(c.n_layers)}
    for name, spec in specs.items():
        w = gguf.tensor(name)
        if name in f32_names:
            if isinstance(w, QuantTensor):
                raise UnsupportedError(f"{path}: tensor {name!r} is block-quantized ({w.qtype}); volvox needs it as f32 or f16")
            w = np.asarray(w, np.float32)
            if c.version == 2 and f32_names[name] in ("A", "D", "mixer_norm"):
                w = w.reshape(-1)  # stored (n_heads, 1) / (n_groups, d_inner / n_groups)
            specs[name] = TensorSpec(name, w.shape, "float32")
        weights[name] = w
    imported = imported_model(c, build_mamba_graph(c, GGUF_NAMES, specs), weights, path)
    imported.metadata.update(architecture=gguf.metadata.get("general.architecture"), format="gguf",
                             name=gguf.metadata.get("general.name"),
                             quantized=sorted({w.qtype for w in imported.weights.values() if isinstance(w, QuantTensor)}))
    imported.tokenizer = Deferred(partial(tokenizer_from_gguf, gguf.metadata, str(path)))
    imported.closers = [gguf.close]
    return imported
