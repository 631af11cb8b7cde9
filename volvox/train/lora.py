"""LoRA for training: fresh adapters initialised as PEFT does, adapter folders written in PEFT's
format, and adapters merged into their base matrices (``volvox convert --merge-adapter``). Where
adapters go and how they are read and applied: volvox/architectures/lora.py.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from volvox.architectures.lora import (CONFIG_FILE, MODULES, SCALE, WEIGHTS_FILE, LoraConfig, Site,
                                       permute_rows)
from volvox.formats.safetensors import save_safetensors
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ir.quant_blocks import QuantTensor, dequantize_ref
from volvox.ops import validate


def init_adapters(sites: list[Site], config: LoraConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Fresh adapters as PEFT makes them: A kaiming-uniform (bound 1/sqrt(in_features)), B zeros."""
    rng = np.random.default_rng(seed)
    out = {}
    for s in sites:
        bound = 1.0 / math.sqrt(s.in_features)
        out[s.a_name] = rng.uniform(-bound, bound, (config.r, s.in_features)).astype(np.float32)  # (r, in)
        out[s.b_name] = np.zeros((s.out_features, config.r), np.float32)                            # (out, r)
    return out


def save_adapter(directory: str | Path, sites: list[Site], adapters: dict[str, np.ndarray], config: LoraConfig,
                 base_model: str = "") -> Path:
    """Write ``adapter_model.safetensors`` (PEFT key names, HF row order) and ``adapter_config.json``
    into ``directory`` (each file written atomically); returns the directory."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for s in sites:
        b = adapters[s.b_name]
        tensors[s.peft_prefix + ".lora_A.weight"] = np.ascontiguousarray(adapters[s.a_name], np.float32)
        tensors[s.peft_prefix + ".lora_B.weight"] = np.ascontiguousarray(
            permute_rows(b, s.interleaved_heads, inverse=True) if s.interleaved_heads else b, np.float32)
    save_safetensors(directory / WEIGHTS_FILE, tensors, {"format": "pt"})
    peft_config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model,
        "r": config.r, "lora_alpha": config.alpha, "lora_dropout": 0.0, "bias": "none",
        "target_modules": sorted(MODULES[t].split(".")[1] for t in config.targets),
        "layers_to_transform": list(config.layers) if config.layers is not None else None,
        "fan_in_fan_out": False, "use_rslora": False, "use_dora": False, "modules_to_save": None,
        "rank_pattern": {}, "alpha_pattern": {}, "init_lora_weights": True, "inference_mode": True,
    }
    tmp = directory / f".{CONFIG_FILE}.tmp"
    tmp.write_text(json.dumps(peft_config, indent=2), encoding="utf-8")
    tmp.replace(directory / CONFIG_FILE)
    return directory


@dataclass
class Merged:
    """A graph whose LoRA nodes were folded into their base weights."""

    graph: Graph
    weights: dict[str, Any]
    merged: list[str] = field(default_factory=list)  # the base weight names now holding W + scale B A


def merge_lora(graph: Graph, weights: dict[str, Any]) -> Merged:
    """Fold every adapter of an add_lora graph into its base matrix: W' = W + scale * B @ A, computed
    in float64 and stored float32 (a quantized W is dequantized first); the extra nodes disappear."""
    producers = {n.id: n for n in graph.nodes}
    scale = float(np.asarray(weights[SCALE]).reshape(-1)[0]) if SCALE in weights else None
    nodes, merged, drop = [], [], set()
    new_weights = dict(weights)
    for node in graph.nodes:
        lora_a = producers.get(node.id + ".lora_a")
        if node.op != "linear" or lora_a is None:
            if node.id not in drop:
                nodes.append(node)
            continue
        lora_b = producers[node.id + ".lora_b"]
        a, b = weights[lora_a.inputs["weight"]], weights[lora_b.inputs["weight"]]
        base = node.inputs["weight"]
        w = weights[base]
        dense = dequantize_ref(w) if isinstance(w, QuantTensor) else np.asarray(w, np.float32)
        new_weights[base] = (dense.astype(np.float64) + scale * (np.asarray(b, np.float64) @ np.asarray(a, np.float64))
                             ).astype(np.float32)
        merged.append(base)
        y = producers[node.id + ".lora_add"].outputs["y"]
        nodes.append(Node(node.id, node.op, dict(node.inputs), {"y": y}, dict(node.params)))
        drop |= {node.id + s for s in (".lora_a", ".lora_scale", ".lora_b", ".lora_add")}
        for n in (lora_a.inputs["weight"], lora_b.inputs["weight"]):
            new_weights.pop(n, None)
    new_weights.pop(SCALE, None)
    used = {name for n in nodes for name in n.inputs.values()}
    specs = {n: (TensorSpec(n, tuple(new_weights[n].shape), "float32") if n in merged else s)
             for n, s in graph.weights.items() if n in used}
    out = Graph(list(graph.inputs), specs, nodes, list(graph.outputs))
    validate(out)
    return Merged(out, {n: w for n, w in new_weights.items() if n in specs}, merged)
