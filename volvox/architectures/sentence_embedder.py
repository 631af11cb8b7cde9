"""A sentence-transformers pipeline as graph nodes after an encoder's ``hidden`` output.

Pooling becomes a token_pool node, each Dense module a linear node (and its activation), so a
converted blueprint keeps the whole pipeline; the graph gains the output ``embedding`` (1, width).
Normalize, the truncation length and the prompts are what the embed task does around the graph
(``metadata["sentence"]``).
"""

from __future__ import annotations

from dataclasses import asdict

from volvox.formats.imported import Imported
from volvox.formats.sentence_transformers import SentencePipeline
from volvox.ir.graph import Node, TensorSpec
from volvox.ops import validate

PROMPT_TOKENS = "prompt_tokens"  # graph input (1,) int32: how many leading tokens the pooling leaves out


def add_sentence_pipeline(imported: Imported, pipe: SentencePipeline) -> Imported:
    """``imported`` (an encoder whose graph outputs ``hidden`` (seq, dim)) with ``pipe``'s pooling and
    Dense layers appended as nodes ending in ``embedding`` (1, width), and ``metadata["sentence"]``."""
    graph = imported.graph
    pool_inputs = {"x": "hidden"}
    if not pipe.include_prompt:
        graph.inputs.append(TensorSpec(PROMPT_TOKENS, (1,), "int32"))
        pool_inputs["skip"] = PROMPT_TOKENS
    graph.nodes.append(Node("sentence_pool", "token_pool", pool_inputs, {"y": "pooled"}, {"modes": list(pipe.pooling)}))
    x = "pooled"  # (1, dim * len(modes))
    for i, layer in enumerate(pipe.dense):
        inputs = {"x": x, "weight": f"sentence.dense.{i}.weight"}
        imported.weights[inputs["weight"]] = layer.weight  # (out_features, in_features)
        if layer.bias is not None:
            inputs["bias"] = f"sentence.dense.{i}.bias"
            imported.weights[inputs["bias"]] = layer.bias  # (out_features,)
        graph.nodes.append(Node(f"sentence_dense{i}", "linear", inputs, {"y": f"dense{i}"}, {}))
        x = f"dense{i}"  # (1, out_features)
        if layer.activation is not None:
            graph.nodes.append(Node(f"sentence_dense{i}_act", layer.activation, {"x": x}, {"y": f"dense{i}_act"}, {}))
            x = f"dense{i}_act"
    graph.nodes[-1].outputs["y"] = "embedding"
    graph.outputs.append("embedding")
    graph.weights.update({name: TensorSpec(name, a.shape, "float32") for name, a in imported.weights.items()
                          if name.startswith("sentence.dense.")})
    validate(graph)
    info = asdict(pipe)
    del info["dense"]
    imported.metadata = {**imported.metadata, "sentence": info}
    return imported
