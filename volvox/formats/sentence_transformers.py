"""The sentence-transformers layer of a Hugging Face folder: ``modules.json`` and the configs beside it.

A sentence-transformers model is a pipeline of modules listed in ``modules.json``: a Transformer
(the HF checkpoint in the folder itself), then Pooling (``1_Pooling/config.json``: which token
poolings, concatenated), optionally Dense layers (``2_Dense/config.json`` + weights) and Normalize.
``sentence_bert_config.json`` gives the Transformer's ``max_seq_length`` (the truncation length,
special tokens included) and ``config_sentence_transformers.json`` its named ``prompts``.

This module only reads and checks those files; architectures/sentence_embedder.py turns them into
graph nodes. A module type volvox does not run raises UnsupportedError naming it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from volvox.errors import BlueprintError, UnsupportedError, WeightsError
from volvox.formats.safetensors import SafeTensorsFile
from volvox.formats.torch_state_dict import read_state_dict

ST = "sentence_transformers.models."
# Pooling config keys -> volvox token_pool modes, in the order sentence-transformers concatenates them.
POOLING_MODES = (("pooling_mode_cls_token", "cls"), ("pooling_mode_max_tokens", "max"),
                 ("pooling_mode_mean_tokens", "mean"), ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len"),
                 ("pooling_mode_weightedmean_tokens", "weighted_mean"), ("pooling_mode_lasttoken", "last"))
# Dense activation (the torch class path sentence-transformers stores) -> volvox op (None: identity).
DENSE_ACTIVATIONS = {"torch.nn.modules.activation.Tanh": "tanh", "torch.nn.modules.linear.Identity": None,
                     "torch.nn.modules.activation.ReLU": "relu", "torch.nn.modules.activation.Sigmoid": "sigmoid",
                     "torch.nn.modules.activation.GELU": "gelu"}


@dataclass
class DenseLayer:
    """One Dense module: y = activation(x @ weight.T + bias)."""

    weight: np.ndarray            # (out_features, in_features)
    bias: np.ndarray | None       # (out_features,)
    activation: str | None        # a volvox op name, or None for identity


@dataclass
class SentencePipeline:
    """What follows the Transformer in a sentence-transformers folder."""

    pooling: tuple[str, ...]                      # token_pool modes, concatenated in this order
    include_prompt: bool = True                   # False: prompt tokens are left out of the pooling
    dense: list[DenseLayer] = field(default_factory=list)
    normalize: bool = False                       # a Normalize module ends the pipeline
    max_seq_length: int | None = None             # truncation length in tokens, special tokens included
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None


def _json(path: Path, required: bool = True):
    """The JSON in ``path`` (None if absent and not required); BlueprintError naming a broken file."""
    if not path.is_file():
        if required:
            raise BlueprintError(f"{path}: missing (modules.json lists a module that needs it)")
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BlueprintError(f"{path}: not valid JSON: {e}") from None


def is_sentence_transformers_folder(directory: Path) -> bool:
    """Whether ``directory`` holds a sentence-transformers ``modules.json``."""
    return (directory / "modules.json").is_file()


def _float32(a: np.ndarray) -> np.ndarray:
    """A stored float tensor as float32 (safetensors.py hands out BF16 as its raw uint16 bits)."""
    return (a.astype(np.uint32) << 16).view(np.float32) if a.dtype == np.uint16 else a.astype(np.float32)


def _dense(directory: Path, hidden: int) -> DenseLayer:
    cfg = _json(directory / "config.json")
    try:
        n_in, n_out, has_bias = int(cfg["in_features"]), int(cfg["out_features"]), bool(cfg.get("bias", True))
        act_name = cfg.get("activation_function", "torch.nn.modules.activation.Tanh")
    except (KeyError, TypeError, ValueError) as e:
        raise BlueprintError(f"{directory / 'config.json'}: a Dense config needs in_features and out_features: {e}") from None
    if act_name not in DENSE_ACTIVATIONS:
        raise UnsupportedError(f"{directory}: Dense activation {act_name!r} is not supported "
                               f"(supported: {', '.join(DENSE_ACTIVATIONS)})")
    if n_in != hidden:
        raise BlueprintError(f"{directory}: Dense in_features {n_in} does not follow the pooled width {hidden}")
    if (directory / "model.safetensors").is_file():
        st = SafeTensorsFile(directory / "model.safetensors")
        try:
            tensors = {n: _float32(st.tensor(n)) for n in st.names}
        finally:
            st.close()
    elif (directory / "pytorch_model.bin").is_file():
        tensors = read_state_dict(directory / "pytorch_model.bin")
    else:
        raise WeightsError(f"{directory}: a Dense module needs model.safetensors or pytorch_model.bin")
    weight, bias = tensors.get("linear.weight"), tensors.get("linear.bias")
    if weight is None or weight.shape != (n_out, n_in) or (has_bias and (bias is None or bias.shape != (n_out,))):
        raise WeightsError(f"{directory}: expected linear.weight {[n_out, n_in]}"
                           + (f" and linear.bias [{n_out}]" if has_bias else "")
                           + f", got {({k: list(v.shape) for k, v in tensors.items()})}")
    return DenseLayer(np.ascontiguousarray(weight, np.float32),
                      np.ascontiguousarray(bias, np.float32) if has_bias else None, DENSE_ACTIVATIONS[act_name])


def read_sentence_pipeline(directory: Path, hidden: int) -> SentencePipeline:
    """The modules after the Transformer in ``directory``'s modules.json, checked against the
    Transformer's output width ``hidden``."""
    modules = _json(directory / "modules.json")
    if not isinstance(modules, list) or not all(isinstance(m, dict) and isinstance(m.get("type"), str) for m in modules):
        raise BlueprintError(f"{directory / 'modules.json'}: must be a list of modules with a 'type'")
    if not modules or modules[0]["type"] != ST + "Transformer" or modules[0].get("path", "") != "":
        raise UnsupportedError(f"{directory / 'modules.json'}: the first module must be a Transformer saved in the "
                               "folder itself (sentence-transformers 2+ layout)")
    bert_cfg = _json(directory / "sentence_bert_config.json", required=False) or {}
    st_cfg = _json(directory / "config_sentence_transformers.json", required=False) or {}
    prompts = st_cfg.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise BlueprintError(f"{directory / 'config_sentence_transformers.json'}: prompts must map names to strings")
    pipe = SentencePipeline(pooling=(), max_seq_length=bert_cfg.get("max_seq_length"), prompts=dict(prompts),
                            default_prompt_name=st_cfg.get("default_prompt_name"))
    width = hidden
    for module in modules[1:]:
        kind, sub = module["type"].removeprefix(ST), directory / module.get("path", "")
        if pipe.normalize:
            raise UnsupportedError(f"{directory / 'modules.json'}: module {kind!r} after Normalize")
        if kind == "Pooling" and not pipe.pooling:
            cfg = _json(sub / "config.json")
            pipe.pooling = tuple(mode for key, mode in POOLING_MODES if cfg.get(key))
            if not pipe.pooling:
                raise BlueprintError(f"{sub / 'config.json'}: no pooling mode is switched on")
            pipe.include_prompt = bool(cfg.get("include_prompt", True))
            width = hidden * len(pipe.pooling)
        elif kind == "Dense" and pipe.pooling:
            pipe.dense.append(_dense(sub, width))
            width = pipe.dense[-1].weight.shape[0]
        elif kind == "Normalize" and pipe.pooling:
            pipe.normalize = True
        else:
            raise UnsupportedError(f"{directory / 'modules.json'}: module {module['type']!r} "
                                   f"{'before Pooling ' if not pipe.pooling else ''}is not supported "
                                   "(supported: Transformer, Pooling, Dense, Normalize)")
    if not pipe.pooling:
        raise UnsupportedError(f"{directory / 'modules.json'}: no Pooling module")
    if pipe.max_seq_length is not None and (not isinstance(pipe.max_seq_length, int) or pipe.max_seq_length < 2):
        raise BlueprintError(f"{directory / 'sentence_bert_config.json'}: max_seq_length must be an integer >= 2")
    if pipe.default_prompt_name is not None and pipe.default_prompt_name not in pipe.prompts:
        raise BlueprintError(f"{directory / 'config_sentence_transformers.json'}: default_prompt_name "
                             f"{pipe.default_prompt_name!r} is not one of the prompts {sorted(pipe.prompts)}")
    return pipe
