"""LoRA adapters on LLaMA-family decoder graphs: where they go, the graph rewrite that puts them
there, and PEFT's adapter folders (the names and layout volvox reads them in).

Each adapted ``linear`` node y = x @ W^T (W frozen: float or block-quantized, as loaded) gets
three nodes beside it: ``a = x @ A^T`` (seq, r), ``a *= alpha / r``, ``y = y_base + a @ B^T``,
with A (r, in) and B (out, r) float32 weights named ``lora.l{i}.{target}.A`` / ``.B``. Inference
keeps them as weights; training turns them into graph inputs (volvox/train/).

Targets are LLaMA-family projections (node ids ``l{i}.{q,k,v,o,gate,up,down}_proj``). PEFT's
folders hold ``adapter_config.json`` and ``adapter_model.safetensors`` with keys
``base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight``; a GGUF LLaMA stores q / k
rows in the interleaved RoPE order, so B's rows of those projections are permuted on load (and back
on save, train/lora.py), and one adapter file serves a Hugging Face folder and a GGUF file of the
same model.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from volvox.errors import BlueprintError, UnsupportedError, WeightsError
from volvox.formats.safetensors import SafeTensorsFile
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ops import validate

# target -> the module path under a decoder layer in transformers (and PEFT's key names)
MODULES = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
           "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}
DEFAULT_TARGETS = tuple(MODULES)
SCALE = "lora.scale"  # the (1,) constant alpha / r every adapter's low-rank product is multiplied by
CONFIG_FILE, WEIGHTS_FILE = "adapter_config.json", "adapter_model.safetensors"
_NODE_ID = re.compile(r"l(\d+)\.(q|k|v|o|gate|up|down)_proj")
_PEFT_KEY = re.compile(r"base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)_proj\.lora_([AB])\.weight")


@dataclass(frozen=True)
class LoraConfig:
    """Rank, alpha and target projections (names from MODULES: q k v o gate up down)."""

    r: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] = DEFAULT_TARGETS
    layers: tuple[int, ...] | None = None  # None: every layer

    def __post_init__(self):
        if self.r < 1 or not self.alpha > 0:
            raise UnsupportedError(f"LoRA needs rank >= 1 and alpha > 0, got r={self.r} alpha={self.alpha}")
        unknown = set(self.targets) - set(MODULES)
        if unknown or not self.targets:
            raise UnsupportedError(f"LoRA targets {sorted(unknown) or '(none)'}: choose from {', '.join(MODULES)}")

    @property
    def scale(self) -> float:
        """alpha / r, the factor of every adapter's product (PEFT's ``scaling``)."""
        return self.alpha / self.r


@dataclass(frozen=True)
class Site:
    """One adapted projection: its node, layer, target and sizes, and the RoPE row order of its output."""

    node_id: str
    layer: int
    target: str
    in_features: int
    out_features: int
    interleaved_heads: int = 0  # q / k of a GGUF LLaMA: rows in interleaved RoPE order over this many heads

    @property
    def a_name(self) -> str:
        """The graph weight (later input) holding A (r, in)."""
        return f"lora.l{self.layer}.{self.target}.A"

    @property
    def b_name(self) -> str:
        """The graph weight (later input) holding B (out, r)."""
        return f"lora.l{self.layer}.{self.target}.B"

    @property
    def peft_prefix(self) -> str:
        """PEFT's module path of this projection, which its lora_A / lora_B keys extend."""
        return f"base_model.model.model.layers.{self.layer}.{MODULES[self.target]}"


def find_sites(graph: Graph, config: LoraConfig) -> list[Site]:
    """The projections of ``graph`` that ``config`` adapts; UnsupportedError when the graph has none
    (not a LLaMA-family decoder, or fused q/k/v) or a target is missing."""
    if not graph.specs:
        validate(graph)
    attention = {n.id.split(".")[0]: n.params for n in graph.nodes if n.op in ("attention", "causal_attention")}
    rope_style = {n.id.split(".")[0]: n.params.get("style", "half") for n in graph.nodes if n.op == "rope"}
    sites, seen = [], set()
    for node in graph.nodes:
        m = _NODE_ID.fullmatch(node.id)
        if node.op != "linear" or not m:
            continue
        layer, target = int(m.group(1)), m.group(2)
        if target not in config.targets or (config.layers is not None and layer not in config.layers):
            continue
        out_features, in_features = graph.specs[node.inputs["weight"]].shape
        heads = 0
        if target in ("q", "k") and rope_style.get(f"l{layer}") == "interleaved":
            heads = attention[f"l{layer}"]["n_heads" if target == "q" else "n_kv_heads"]
        sites.append(Site(node.id, layer, target, int(in_features), int(out_features), heads))
        seen.add(target)
    missing = set(config.targets) - seen
    if not sites or missing:
        raise UnsupportedError(f"LoRA: this graph has no {', '.join(sorted(missing or config.targets))} projection "
                               "(LoRA adapts LLaMA-family decoders with separate q/k/v and gate/up/down)")
    return sites


def add_lora(graph: Graph, weights: dict[str, Any], sites: list[Site], adapters: dict[str, np.ndarray],
             scale: float) -> tuple[Graph, dict[str, Any]]:
    """A new graph and weights with y = x W^T + scale (x A^T) B^T at every site (adapters as weights)."""
    by_id = {s.node_id: s for s in sites}
    nodes: list[Node] = []
    for node in graph.nodes:
        site = by_id.get(node.id)
        if site is None:
            nodes.append(node)
            continue
        x, y = node.inputs["x"], node.outputs["y"]
        p = node.id + ".lora"
        nodes.append(Node(node.id, node.op, dict(node.inputs), {"y": y + ".base"}, dict(node.params)))
        nodes.append(Node(p + "_a", "linear", {"x": x, "weight": site.a_name}, {"y": p + "_a"}))        # (seq, r)
        nodes.append(Node(p + "_scale", "mul", {"a": p + "_a", "b": SCALE}, {"y": p + "_scaled"}))      # (seq, r)
        nodes.append(Node(p + "_b", "linear", {"x": p + "_scaled", "weight": site.b_name}, {"y": p + "_b"}))  # (seq, out)
        nodes.append(Node(p + "_add", "add", {"a": y + ".base", "b": p + "_b"}, {"y": y}))              # (seq, out)
    new_weights = dict(graph.weights)
    new_weights[SCALE] = TensorSpec(SCALE, (1,), "float32")
    for s in sites:
        for name in (s.a_name, s.b_name):
            new_weights[name] = TensorSpec(name, adapters[name].shape, "float32")
    out = Graph(list(graph.inputs), new_weights, nodes, list(graph.outputs))
    validate(out)
    return out, {**weights, SCALE: np.array([scale], np.float32), **{k: adapters[k] for s in sites
                                                                       for k in (s.a_name, s.b_name)}}


def permute_rows(b: np.ndarray, heads: int, inverse: bool) -> np.ndarray:
    """B's rows between HF's half RoPE layout and GGUF's interleaved one (llama.cpp's q/k permute)."""
    out, r = b.shape
    if inverse:  # interleaved -> half
        return b.reshape(heads, out // heads // 2, 2, r).swapaxes(1, 2).reshape(out, r)
    return b.reshape(heads, 2, out // heads // 2, r).swapaxes(1, 2).reshape(out, r)


def read_adapter_config(directory: str | Path) -> LoraConfig:
    """The LoraConfig of a PEFT adapter folder; UnsupportedError for the PEFT features volvox does not
    apply (DoRA, per-module ranks, trained biases, extra saved modules, Conv1D layouts)."""
    path = Path(directory) / CONFIG_FILE
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BlueprintError(f"{path}: no such file (an adapter folder holds {CONFIG_FILE} and {WEIGHTS_FILE})") from None
    except (OSError, ValueError) as e:
        raise BlueprintError(f"{path}: not a readable JSON file: {e}") from None
    if not isinstance(cfg, dict) or cfg.get("peft_type", "LORA") != "LORA":
        raise UnsupportedError(f"{path}: peft_type {cfg.get('peft_type') if isinstance(cfg, dict) else cfg!r} "
                               "(only LORA adapters are supported)")
    for key, ok in (("use_dora", False), ("fan_in_fan_out", False), ("bias", "none"), ("modules_to_save", None),
                    ("rank_pattern", {}), ("alpha_pattern", {}), ("use_rslora", False)):
        if cfg.get(key, ok) not in (ok, None) or (ok == {} and cfg.get(key)):
            raise UnsupportedError(f"{path}: {key}={cfg[key]!r} is not supported")
    modules = cfg.get("target_modules") or []
    if isinstance(modules, str):
        raise UnsupportedError(f"{path}: target_modules as a regular expression ({modules!r}) is not supported")
    by_module = {m.split(".")[1]: t for t, m in MODULES.items()}
    unknown = [m for m in modules if m not in by_module]
    if unknown:
        raise UnsupportedError(f"{path}: target modules {unknown} (volvox adapts {', '.join(by_module)})")
    layers = cfg.get("layers_to_transform")
    layers = (layers,) if isinstance(layers, int) else tuple(layers) if layers is not None else None
    try:
        return LoraConfig(int(cfg["r"]), float(cfg["lora_alpha"]), tuple(by_module[m] for m in modules), layers)
    except (KeyError, TypeError, ValueError) as e:
        raise BlueprintError(f"{path}: bad r / lora_alpha: {e}") from None


def read_adapter(directory: str | Path, sites: list[Site]) -> dict[str, np.ndarray]:
    """The A / B matrices of ``sites`` from ``directory``'s safetensors (B's q / k rows put in the
    graph's RoPE order); WeightsError names a missing or misshapen tensor."""
    path = Path(directory) / WEIGHTS_FILE
    if not path.exists():
        raise WeightsError(f"{path}: no such file")
    with SafeTensorsFile(path) as st:
        names = set(st.names)
        extra = [n for n in names if not _PEFT_KEY.fullmatch(n)]
        if extra:
            raise UnsupportedError(f"{path}: tensors volvox cannot apply: {sorted(extra)[:3]}")
        out = {}
        for s in sites:
            for which, name in (("A", s.a_name), ("B", s.b_name)):
                key = f"{s.peft_prefix}.lora_{which}.weight"
                if key not in names:
                    raise WeightsError(f"{path}: no tensor {key!r}")
                t = np.array(st.tensor(key), dtype=np.float32)
                want = (None, s.in_features) if which == "A" else (s.out_features, None)
                if t.ndim != 2 or any(w is not None and w != d for w, d in zip(want, t.shape)):
                    raise WeightsError(f"{path}: {key} has shape {t.shape}, the model needs {want}")
                if which == "B" and s.interleaved_heads:
                    t = permute_rows(t, s.interleaved_heads, inverse=False)
                out[name] = np.ascontiguousarray(t)
    return out


def apply_adapter(graph: Graph, weights: dict[str, Any], directory: str | Path) -> tuple[Graph, dict[str, Any]]:
    """``graph`` and ``weights`` with the PEFT adapter folder ``directory`` beside their projections."""
    config = read_adapter_config(directory)
    sites = find_sites(graph, config)
    return add_lora(graph, weights, sites, read_adapter(directory, sites), config.scale)
