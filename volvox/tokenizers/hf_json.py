"""Write Hugging Face tokenizer.json documents for byte-level BPE vocabularies (e.g. from GGUF).

The pre-tokenizer config is chosen so that ``pre_name_from_hf`` maps it back to
a pre-tokenizer with the same regexes as the source's ``tokenizer.ggml.pre``,
so ``ByteLevelBPETokenizer.from_tokenizer_json`` reproduces the source's ids.
"""

from __future__ import annotations

from volvox.errors import TokenizerError
from volvox.tokenizers.pretokenize import _HF_PATTERNS, _PATTERNS

_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}


def _step_config(step: str) -> dict:
    """The HF pre_tokenizer config of one step signature (the inverse of pretokenize._hf_step)."""
    if step == "bytelevel+regex":
        return dict(_BYTE_LEVEL)
    if step == "bytelevel":
        return {**_BYTE_LEVEL, "use_regex": False}
    if step == "digits:individual":
        return {"type": "Digits", "individual_digits": True}
    if step.startswith("split:"):
        return {"type": "Split", "pattern": {"Regex": step[len("split:"):]}, "behavior": "Isolated", "invert": False}
    raise TokenizerError(f"no tokenizer.json pre_tokenizer for step {step!r}")


def pre_tokenizer_config(pre: str) -> dict:
    """An HF ``pre_tokenizer`` that splits text exactly as volvox's pre-tokenizer ``pre``."""
    for signature, name in _HF_PATTERNS.items():
        if _PATTERNS.get(pre) == _PATTERNS[name]:
            steps = [_step_config(s) for s in signature]
            return steps[0] if len(steps) == 1 else {"type": "Sequence", "pretokenizers": steps}
    raise TokenizerError(f"pre-tokenizer {pre!r} has no tokenizer.json equivalent")


def bpe_tokenizer_json(tokens: list[str], merges: list, special: dict[str, int], added: dict[str, int],
                       pre: str, ignore_merges: bool = False) -> dict:
    """A tokenizer.json document: BPE model over ``tokens`` (id = index) and ``merges``; ``special``
    (control) and ``added`` (user-defined) tokens as added_tokens."""
    vocab: dict[str, int] = {}
    for i, t in enumerate(tokens):
        if t in vocab:
            raise TokenizerError(f"token {t!r} appears twice (ids {vocab[t]} and {i}): tokenizer.json needs unique tokens")
        vocab[t] = i
    literals = sorted([(i, t, True) for t, i in special.items()] + [(i, t, False) for t, i in added.items()])
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": is_special} for i, t, is_special in literals],
        "normalizer": None,
        "pre_tokenizer": pre_tokenizer_config(pre),
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": ignore_merges, "vocab": vocab,
                  "merges": [m if isinstance(m, str) else " ".join(m) for m in merges]},
    }
