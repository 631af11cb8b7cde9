"""Pre-tokenizers: split text into words before BPE, chosen by name.

Names follow llama.cpp's ``tokenizer.ggml.pre``. Each name is a sequence of
regexes applied one after another (as llama.cpp's ``regex_exprs`` and HF's
pre_tokenizer ``Sequence``): every regex splits each piece into its matches
and the gaps between them, which are kept as pieces too.
"""

import regex

from volvox.errors import TokenizerError

# GPT-2's byte-level regex (HF ByteLevel(use_regex=True)).
GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# LLaMA-3 and Qwen2 differ only in digit runs. llama.cpp spells the
# case-insensitive contractions out; HF's tokenizer.json writes (?i:...).
_CONTRACTIONS = r"""(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"""
_HF_CONTRACTIONS = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)"""
_LLAMA3_REST = r"""|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
_QWEN2_REST = _LLAMA3_REST.replace(r"\p{N}{1,3}", r"\p{N}")
LLAMA3 = _CONTRACTIONS + _LLAMA3_REST
QWEN2 = _CONTRACTIONS + _QWEN2_REST
# HF Digits(individual_digits=True): every numeric character on its own.
DIGIT = r"\p{N}"

_PATTERNS = {
    "default": (GPT2,),
    "gpt2": (GPT2,),
    "gpt-2": (GPT2,),
    "phi-2": (GPT2,),
    # llama.cpp's STARCODER family: digits split first, then GPT-2.
    "smollm": (DIGIT, GPT2),
    "starcoder": (DIGIT, GPT2),
    "refact": (DIGIT, GPT2),
    "llama-bpe": (LLAMA3,),
    "qwen2": (QWEN2,),
}

# The same splits as HF tokenizer.json pre_tokenizer configs (see _hf_step).
_HF_PATTERNS = {
    ("bytelevel+regex",): "gpt2",
    ("digits:individual", "bytelevel+regex"): "smollm",
    ("split:" + _HF_CONTRACTIONS + _LLAMA3_REST, "bytelevel"): "llama-bpe",
    ("split:" + _HF_CONTRACTIONS + _QWEN2_REST, "bytelevel"): "qwen2",
}

PRETOKENIZER_NAMES = tuple(sorted(_PATTERNS))


class Pretokenizer:
    """Splits text into pre-tokens (words) with the regex sequence registered under a name."""

    def __init__(self, name: str):
        """Look up the regex sequence for ``name``; unknown names raise TokenizerError."""
        if name not in _PATTERNS:
            raise TokenizerError(
                f"unknown pre-tokenizer {name!r}; supported: {', '.join(PRETOKENIZER_NAMES)}"
            )
        self.name = name
        self._regexes = [regex.compile(p) for p in _PATTERNS[name]]

    def split(self, text: str) -> list[str]:
        """Return the pre-tokens of ``text``; their concatenation is ``text``."""
        pieces = [text] if text else []
        for rx in self._regexes:
            out = []
            for piece in pieces:
                pos = 0
                for m in rx.finditer(piece):
                    start, end = m.span()
                    if start > pos:
                        out.append(piece[pos:start])
                    out.append(m.group())
                    pos = end
                if pos < len(piece):
                    out.append(piece[pos:])
            pieces = out
        return pieces


def _hf_step(cfg: dict) -> str:
    """Describe one HF pre_tokenizer step as a comparable string."""
    kind = cfg.get("type")
    if kind == "ByteLevel":
        if cfg.get("add_prefix_space"):
            return "bytelevel+prefix-space"
        return "bytelevel+regex" if cfg.get("use_regex", True) else "bytelevel"
    if kind == "Digits":
        return "digits:individual" if cfg.get("individual_digits") else "digits:runs"
    if kind == "Split":
        pattern = cfg.get("pattern") or {}
        if cfg.get("behavior") == "Isolated" and not cfg.get("invert") and "Regex" in pattern:
            return "split:" + pattern["Regex"]
    return f"{kind}:{cfg}"


def pre_name_from_hf(config: dict | None) -> str:
    """Map an HF tokenizer.json ``pre_tokenizer`` config to a pre-tokenizer name.

    Raises TokenizerError for configs volvox does not reproduce exactly.
    """
    if not isinstance(config, dict):
        raise TokenizerError(f"unsupported pre_tokenizer {config!r}: byte-level BPE needs ByteLevel")
    steps = config.get("pretokenizers", []) if config.get("type") == "Sequence" else [config]
    signature = tuple(_hf_step(s) for s in steps if isinstance(s, dict))
    if signature not in _HF_PATTERNS:
        raise TokenizerError(f"unsupported pre_tokenizer config: {', '.join(signature) or config}")
    return _HF_PATTERNS[signature]
