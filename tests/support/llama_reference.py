"""An independent float64 numpy LLaMA forward pass over `gguf`-dequantized weights.

Written from the LLaMA paper / Meta's reference code (RoPE as complex rotation
of adjacent pairs, which is GGUF's layout), sharing nothing with volvox's ops:
the oracle for whole-model logits.
"""

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


class ReferenceLlama:
    """Full-sequence forward pass (no cache) in float64."""

    def __init__(self, path):
        r = GGUFReader(path)
        f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("tokenizer.")}
        arch = f["general.architecture"]
        self.n_layers = f[f"{arch}.block_count"]
        self.n_heads = f[f"{arch}.attention.head_count"]
        self.n_kv = f[f"{arch}.attention.head_count_kv"]
        self.eps = f[f"{arch}.attention.layer_norm_rms_epsilon"]
        self.theta = f[f"{arch}.rope.freq_base"]
        self.w = {}
        for t in r.tensors:
            shape = tuple(int(d) for d in reversed(t.shape.tolist()))
            self.w[t.name] = dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float64)
        self.head_dim = self.w["token_embd.weight"].shape[1] // self.n_heads

    def _rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def _rope(self, x, n_heads):
        seq = x.shape[0]
        z = x.reshape(seq, n_heads, self.head_dim // 2, 2)
        zc = z[..., 0] + 1j * z[..., 1]                       # adjacent pairs as complex numbers
        freqs = self.theta ** (-np.arange(0, self.head_dim, 2) / self.head_dim)
        rot = np.exp(1j * np.outer(np.arange(seq), freqs))    # (seq, head_dim/2)
        zc = zc * rot[:, None, :]
        return np.stack([zc.real, zc.imag], axis=-1).reshape(seq, -1)

    def logits(self, tokens):
        """(len(tokens), vocab) float64 logits."""
        w, hd, seq = self.w, self.head_dim, len(tokens)
        x = w["token_embd.weight"][np.asarray(tokens)]
        mask = np.triu(np.full((seq, seq), -np.inf), 1)
        for l in range(self.n_layers):
            b = f"blk.{l}."
            h = self._rms(x, w[b + "attn_norm.weight"])
            q = self._rope(h @ w[b + "attn_q.weight"].T, self.n_heads).reshape(seq, self.n_heads, hd)
            k = self._rope(h @ w[b + "attn_k.weight"].T, self.n_kv).reshape(seq, self.n_kv, hd)
            v = (h @ w[b + "attn_v.weight"].T).reshape(seq, self.n_kv, hd)
            rep = self.n_heads // self.n_kv
            k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
            att = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            o = np.einsum("hqk,khd->qhd", att, v).reshape(seq, -1)
            x = x + o @ w[b + "attn_output.weight"].T
            h = self._rms(x, w[b + "ffn_norm.weight"])
            g = h @ w[b + "ffn_gate.weight"].T
            x = x + ((g / (1 + np.exp(-g))) * (h @ w[b + "ffn_up.weight"].T)) @ w[b + "ffn_down.weight"].T
        x = self._rms(x, w["output_norm.weight"])
        out = w.get("output.weight", w["token_embd.weight"])
        return x @ out.T
