"""Sequence ops: rotary position embedding, attention over the KV cache, logit soft-capping, row selection;
for training, full-sequence causal attention (no cache) and the grad ops of RoPE and attention.

These ops are stateful: they read the run context (``ctx``), which holds the
KV cache and the number of tokens already cached (``ctx.pos``).
"""

from __future__ import annotations

import math

import numpy as np

from volvox import cpu
from volvox.errors import UnsupportedError
from volvox.ir.graph import expect, same_dim
from volvox.ops.context import BatchContext
from volvox.ops.registry import OpDef, register
from volvox.ops.shape import reshape_target
from volvox.ops.gpu import MAX_HEAD_DIM, Call, Dispatch, Lowering, copy_dispatch, grid_of


def _rope_infer(specs, params):
    x, pos = specs["x"], specs["positions"]
    hd = int(params["head_dim"])
    rd = int(params.get("rope_dim", hd))
    expect(params.get("style", "half") in ("half", "interleaved"), f"unknown rope style {params.get('style')!r}")
    expect(0 < rd <= hd and rd % 2 == 0, f"rope_dim {rd} must be even and within head_dim {hd}")
    if "llama3" in params:
        expect(set(params["llama3"]) == set(_LLAMA3_KEYS), f"llama3 rope params must be {list(_LLAMA3_KEYS)}")
    if "yarn" in params:
        expect(set(params["yarn"]) == set(_YARN_KEYS), f"yarn rope params must be {list(_YARN_KEYS)}")
    for key in ("freq_factors",) + tuple(f"longrope_{part}" for part in ("short", "long")):
        if key in params:
            expect(len(params[key]) == rd // 2, f"{key} must hold rope_dim/2 = {rd // 2} factors")
    if "longrope_short" in params or "longrope_long" in params:
        expect({"longrope_short", "longrope_long", "longrope_context"} <= set(params),
               "longrope needs longrope_short, longrope_long and longrope_context")
    expect(len(x.shape) == 2 and (not isinstance(x.shape[1], int) or x.shape[1] % hd == 0),
           f"x must be (seq, heads*{hd}), got {x.describe()}")
    expect(pos.dtype in ("int32", "int64") and len(pos.shape) == 1 and same_dim(pos.shape[0], x.shape[0]),
           f"positions must be int (seq,), got {pos.describe()} for {x.describe()}")
    return {"y": (x.shape, "float32")}


_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_context")
_YARN_KEYS = ("factor", "original_context", "beta_fast", "beta_slow")
# rope params that change the frequencies or the cos / sin scale: the float64 reference computes them
SCALED_ROPE_KEYS = ("llama3", "yarn", "freq_factors", "longrope_short", "mscale")


def llama3_inv_freq(inv_freq: np.ndarray, factor, low_freq_factor, high_freq_factor, original_context) -> np.ndarray:
    """LLaMA-3.1 frequency scaling: long wavelengths / factor, short kept, a smooth blend between."""
    wavelen = 2 * np.pi / inv_freq  # (rd/2,)
    smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    low, high = original_context / low_freq_factor, original_context / high_freq_factor
    return np.where(wavelen > low, inv_freq / factor, np.where(wavelen < high, inv_freq, blended))


def yarn_inv_freq(inv_freq: np.ndarray, rope_dim: int, theta: float, factor, original_context, beta_fast,
                  beta_slow) -> np.ndarray:
    """YaRN: each pair's frequency blended from interpolated (/ factor) to kept by how many turns it
    makes over the original context (between beta_slow and beta_fast turns)."""
    def turns_dim(turns):
        return rope_dim * np.log(original_context / (turns * 2 * np.pi)) / (2 * np.log(theta))
    low = max(np.floor(turns_dim(beta_fast)), 0.0)
    high = min(np.ceil(turns_dim(beta_slow)), rope_dim - 1.0)
    ramp = np.clip((np.arange(rope_dim // 2) - low) / max(high - low, 0.001), 0.0, 1.0)  # (rd/2,)
    kept = 1.0 - ramp
    return inv_freq / factor * (1.0 - kept) + inv_freq * kept


def scaled_inv_freq(p: dict, positions: np.ndarray | None = None) -> np.ndarray:
    """Per-pair inverse frequencies (rope_dim/2,) float64: theta ** (-2i / rope_dim), then the
    model's scaling: LLaMA-3.1 (``llama3``), YaRN (``yarn``), per-pair divisors (``freq_factors``,
    GGUF's rope_freqs), or LongRoPE's divisors (``longrope_long`` when the call's last position
    passes ``longrope_context``, as transformers picks them per forward call, else ``longrope_short``)."""
    rd = int(p.get("rope_dim", p["head_dim"]))
    theta = float(p.get("theta", 10000.0))
    inv_freq = theta ** (-np.arange(0, rd, 2, dtype=np.float64) / rd)  # (rd/2,)
    if "llama3" in p:
        inv_freq = llama3_inv_freq(inv_freq, **{k: float(v) for k, v in p["llama3"].items()})
    if "yarn" in p:
        inv_freq = yarn_inv_freq(inv_freq, rd, theta, **{k: float(v) for k, v in p["yarn"].items()})
    if "freq_factors" in p:
        inv_freq = inv_freq / np.asarray(p["freq_factors"], np.float64)
    if "longrope_short" in p:
        long = positions is not None and positions.size and int(positions.max()) + 1 > int(p["longrope_context"])
        inv_freq = inv_freq / np.asarray(p["longrope_long" if long else "longrope_short"], np.float64)
    return inv_freq


def ggml_rope_scaling(p: dict) -> tuple[float, tuple | None] | None:
    """The linear scale and cpu.rope's ``yarn`` argument that compute these rope params as ggml's
    rope_yarn does (per-pair freq_factors, YaRN's ramp with ggml's correction dims, the attention
    factor), or None where the kernel has no such form (LLaMA-3.1's and LongRoPE's scalings, a YaRN
    over a linear scale, mscale without YaRN): those run in the reference."""
    if "llama3" in p or "longrope_short" in p or ("mscale" in p and "yarn" not in p):
        return None
    scale = float(p.get("scale", 1.0))
    factors = np.asarray(p["freq_factors"], np.float32) if "freq_factors" in p else None  # (rd/2,)
    if "yarn" not in p:
        return scale, None if factors is None else (factors, 0.0, (0.0, 0.0), 1.0)
    if scale != 1.0:
        return None
    y = {k: float(v) for k, v in p["yarn"].items()}
    rd = int(p.get("rope_dim", p["head_dim"]))
    theta = float(p.get("theta", 10000.0))

    def corr_dim(turns):  # ggml_rope_yarn_corr_dim, in float32
        return np.float32(rd) * np.log(np.float32(y["original_context"]) / np.float32(turns * 2 * np.float32(np.pi)),
                                       dtype=np.float32) / (np.float32(2) * np.log(np.float32(theta), dtype=np.float32))
    corr = (max(0.0, float(np.floor(corr_dim(y["beta_fast"])))),
            min(rd - 1.0, float(np.ceil(corr_dim(y["beta_slow"])))))
    # ggml's rope_yarn multiplies cos / sin by attn_factor (1 + 0.1 ln factor): mscale (1 without it) over that gain
    gain = 1.0 + 0.1 * math.log(y["factor"]) if y["factor"] > 1 else 1.0
    return y["factor"], (factors, 1.0 if y["factor"] > 1 else 0.0, corr, float(p.get("mscale", 1.0)) / gain)


def rope_angles(positions: np.ndarray, p: dict) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin tables (seq, rope_dim/2) for ``positions``, with linear position scaling
    (``scale``), the frequency scalings of scaled_inv_freq, and cos / sin multiplied by ``mscale``
    (YaRN's and LongRoPE's attention factor)."""
    inv_freq = scaled_inv_freq(p, positions)  # (rd/2,)
    angles = np.outer(positions / float(p.get("scale", 1.0)), inv_freq)  # (seq, rd/2)
    mscale = float(p.get("mscale", 1.0))
    return (np.cos(angles) * mscale).astype(np.float32), (np.sin(angles) * mscale).astype(np.float32)


def rope_ref(ctx, p, x, positions):
    """Rotate pairs of each head's first rope_dim dims by position-dependent angles.

    style "interleaved" pairs (2i, 2i+1) (GGUF/ggml LLaMA layout); "half" pairs (i, i + rope_dim/2) (HF/NeoX).
    """
    return rope_rotate(x, positions, p, inverse=False)


def rope_rotate(x, positions, p, inverse: bool):
    """rope_ref's rotation, or with ``inverse`` its transpose (the angles negated; mscale kept), which is
    RoPE's gradient with respect to x."""
    hd = int(p["head_dim"])
    rd = int(p.get("rope_dim", hd))
    cos, sin = rope_angles(positions, p)
    if inverse:
        sin = -sin
    h = x.reshape(x.shape[0], -1, hd).copy()  # (seq, heads, head_dim)
    cos, sin = cos[:, None, :], sin[:, None, :]  # (seq, 1, rd/2)
    if p.get("style", "half") == "interleaved":
        x0, x1 = h[..., 0:rd:2].copy(), h[..., 1:rd:2].copy()
        h[..., 0:rd:2] = x0 * cos - x1 * sin
        h[..., 1:rd:2] = x0 * sin + x1 * cos
    else:
        half = rd // 2
        x0, x1 = h[..., :half].copy(), h[..., half:rd].copy()
        h[..., :half] = x0 * cos - x1 * sin
        h[..., half:rd] = x0 * sin + x1 * cos
    return h.reshape(x.shape)


def rope_fast(ctx, p, x, positions):
    """RoPE through the CPU kernel (ggml's float32 angle arithmetic, its rope_yarn for freq_factors
    and YaRN); the scalings ggml_rope_scaling has no kernel form for use the reference."""
    scaling = ggml_rope_scaling(p)
    if scaling is None:
        return rope_ref(ctx, p, x, positions)
    return _rope_kernel(p, scaling, x, positions, np.empty(x.shape, np.float32))


def rope_into(ctx, p, out, x, positions):
    """rope_fast written into ``out`` (x's shape; x is left as it was)."""
    scaling = ggml_rope_scaling(p)
    if scaling is None:
        np.copyto(out, rope_ref(ctx, p, x, positions))
        return out
    return _rope_kernel(p, scaling, x, positions, out)


def _rope_kernel(p, scaling, x, positions, out):
    """cpu.rope of x into out with ggml_rope_scaling(p)'s (scale, yarn)."""
    hd = int(p["head_dim"])
    return cpu.rope(x, positions, hd, int(p.get("rope_dim", hd)), float(p.get("theta", 10000.0)), scaling[0],
                    p.get("style", "half") == "interleaved", out=out, yarn=scaling[1])


def _attention_infer(specs, params):
    q, k, v = specs["q"], specs["k"], specs["v"]
    nh, nkv, hd = int(params["n_heads"]), int(params["n_kv_heads"]), int(params["head_dim"])
    expect(nh > 0 and nkv > 0 and nh % nkv == 0, f"n_heads {nh} must be a multiple of n_kv_heads {nkv}")
    expect(len(q.shape) == 2 and same_dim(q.shape[1], nh * hd), f"q must be (seq, {nh * hd}), got {q.describe()}")
    for t in (k, v):
        expect(len(t.shape) == 2 and same_dim(t.shape[1], nkv * hd) and same_dim(t.shape[0], q.shape[0]),
               f"{t.name} must be (seq, {nkv * hd}), got {t.describe()}")
    int(params.get("layer", 0))
    expect(int(params.get("window", 0)) >= 0, f"window must be >= 0 (0: unlimited), got {params.get('window')}")
    expect(float(params.get("softcap", 0.0)) >= 0, f"softcap must be >= 0 (0: none), got {params.get('softcap')}")
    return {"y": (q.shape, "float32")}


def cached_keys_values(ctx, p, k, v, n_kv: int, hd: int):
    """(start, keys, values): the first new position, and layer ``p["layer"]``'s keys and values
    (n_kv, start + seq, hd) each once k, v (seq, n_kv * hd) are appended to the run's KV cache; without a
    cache (ctx.kv is None), start 0 and the given k, v alone."""
    seq = k.shape[0]
    k_new = k.reshape(seq, n_kv, hd).transpose(1, 0, 2)  # (n_kv, seq, hd)
    v_new = v.reshape(seq, n_kv, hd).transpose(1, 0, 2)  # (n_kv, seq, hd)
    if ctx.kv is None:
        return 0, k_new, v_new
    return (ctx.pos, *ctx.kv.append(int(p.get("layer", 0)), ctx.pos, k_new, v_new))


def attention_ref(ctx, p, q, k, v):
    """Scaled dot-product attention of the new queries over all cached keys/values (GQA).

    Appends k, v to ctx.kv at positions ctx.pos..ctx.pos+seq; causal masking by absolute position
    (``causal``, default true), limited to the last ``window`` positions when ``window`` > 0
    (query i sees key j iff i - window < j <= i). Scores are soft-capped before the mask when ``softcap``
    > 0 (Gemma 2), as llama.cpp does it: the queries scaled first, then cap * tanh(q.k * (1 / cap)).
    Without a KV cache (ctx.kv is None) attends over
    the given k, v alone. A BatchContext runs each sequence's rows against its own cache.
    """
    if isinstance(ctx, BatchContext):
        return ctx.map_rows(attention_ref, p, q, k, v)
    nh, nkv, hd = int(p["n_heads"]), int(p["n_kv_heads"]), int(p["head_dim"])
    group, seq = nh // nkv, q.shape[0]
    start, keys, values = cached_keys_values(ctx, p, k, v, nkv, hd)  # (nkv, start+seq, hd) each
    qh = q.reshape(seq, nkv, group, hd).transpose(1, 2, 0, 3)  # (nkv, group, seq, hd)
    scale = np.float32(p.get("scale", hd ** -0.5))
    if float(p.get("softcap", 0.0)) > 0:
        cap = np.float32(p["softcap"])
        scores = (qh * scale) @ keys.transpose(0, 2, 1)[:, None]  # (nkv, group, seq, total)
        scores = np.tanh(scores * (np.float32(1) / cap)) * cap
    else:
        scores = (qh @ keys.transpose(0, 2, 1)[:, None]) * scale  # (nkv, group, seq, total)
    if p.get("causal", True):
        total = keys.shape[1]
        q_pos = start + np.arange(seq)[:, None]  # (seq, 1)
        k_pos = np.arange(total)[None, :]  # (1, total)
        visible = k_pos <= q_pos
        if int(p.get("window", 0)) > 0:
            visible &= k_pos > q_pos - int(p["window"])
        scores = np.where(visible, scores, np.float32(-np.inf))
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = scores / scores.sum(axis=-1, keepdims=True)
    out = probs @ values[:, None]  # (nkv, group, seq, hd)
    return np.ascontiguousarray(out.transpose(2, 0, 1, 3)).reshape(seq, nh * hd)


def attention_fast(ctx, p, q, k, v):
    """attention_ref's contract through the CPU kernel: appends k, v to the cache like the
    reference, then one nogil call (parallel over heads and query rows, O(seq) memory)."""
    if isinstance(ctx, BatchContext):
        return ctx.map_rows(attention_fast, p, q, k, v)
    if not _kernel_takes(ctx, p):
        return attention_ref(ctx, p, q, k, v)
    return attention_into(ctx, p, np.empty((q.shape[0], int(p["n_heads"]) * int(p["head_dim"])), np.float32), q, k, v)


def _kernel_takes(ctx, p) -> bool:
    """Whether the CPU kernel runs this attention: causal, or not causal over the given k, v alone (an
    encoder: no KV cache)."""
    return bool(p.get("causal", True) or ctx.kv is None)


# An encoder's self-attention (not causal, no KV cache) of this many rows or more runs as two f32 GEMMs
# per head (scores, then probabilities times values: each key row is reused across a block of queries)
# rather than the row-at-a-time kernel made for decoding, up to GEMM_MAX_ROWS (a seq x seq score
# matrix per head).
GEMM_MIN_ROWS, GEMM_MAX_ROWS = 64, 4096


def _encoder_attention_gemm(p, out, q, k, v):
    """Non-causal GQA attention of q over k, v (no cache) through the f32 GEMM kernel, into ``out``."""
    nh, nkv, hd = int(p["n_heads"]), int(p["n_kv_heads"]), int(p["head_dim"])
    scale, group = np.float32(p.get("scale", hd ** -0.5)), nh // nkv
    for h in range(nh):
        kv = slice((h // group) * hd, (h // group + 1) * hd)  # this head's kv head's columns
        qh = np.ascontiguousarray(q[:, h * hd:(h + 1) * hd]) * scale          # (seq, hd)
        scores = cpu.linear(qh, np.ascontiguousarray(k[:, kv]))              # (seq, seq)
        scores -= scores.max(axis=1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=1, keepdims=True)
        out[:, h * hd:(h + 1) * hd] = cpu.linear(scores, np.ascontiguousarray(v[:, kv].T))  # (seq, hd)
    return out


def attention_into(ctx, p, out, q, k, v):
    """attention_fast written into ``out`` (seq, n_heads * head_dim): the kernel writes it directly
    (a batch's rows, run one sequence at a time, and non-causal attention over a KV cache are copied in)."""
    if isinstance(ctx, BatchContext) or not _kernel_takes(ctx, p):
        np.copyto(out, attention_fast(ctx, p, q, k, v))
        return out
    nh, nkv, hd = int(p["n_heads"]), int(p["n_kv_heads"]), int(p["head_dim"])
    seq = q.shape[0]
    softcap = float(p.get("softcap", 0.0))
    if not p.get("causal", True) and ctx.kv is None and GEMM_MIN_ROWS <= seq <= GEMM_MAX_ROWS and not softcap:
        return _encoder_attention_gemm(p, out, q, k, v)
    k_new = k.reshape(seq, nkv, hd).transpose(1, 0, 2)  # (nkv, seq, hd)
    v_new = v.reshape(seq, nkv, hd).transpose(1, 0, 2)  # (nkv, seq, hd)
    if ctx.kv is not None:
        start = ctx.pos
        layer = int(p.get("layer", 0))
        ctx.kv.append(layer, start, k_new, v_new)
        keys, values = ctx.kv.keys[layer], ctx.kv.values[layer]  # (nkv, capacity, hd) each
    else:
        start = 0
        keys, values = np.ascontiguousarray(k_new), np.ascontiguousarray(v_new)
    return cpu.attention(q, keys, values, start, nh, float(np.float32(p.get("scale", hd ** -0.5))),
                         int(p.get("window", 0)), out=out, causal=bool(p.get("causal", True)), softcap=softcap)


def _softcap_infer(specs, params):
    x = specs["x"]
    expect(x.dtype == "float32", f"x must be float32, got {x.describe()}")
    expect(float(params["cap"]) > 0, f"cap must be > 0, got {params['cap']}")
    return {"y": (x.shape, "float32")}


def softcap_ref(ctx, p, x):
    """cap * tanh(x * (1 / cap)) in float32 (llama.cpp's order): Gemma 2's soft-capping of the final
    logits (attention's ``softcap`` param caps the scores the same way)."""
    cap = np.float32(p["cap"])
    return np.tanh(x * (np.float32(1) / cap)) * cap


def softcap_fast(ctx, p, x):
    """softcap_ref through the CPU kernel: libm's tanhf, as llama.cpp (numpy's float32 tanh differs from
    it in the last bit of about a third of values)."""
    if x.dtype != np.float32:
        return softcap_ref(ctx, p, x)
    return cpu.softcap(x, float(np.float32(p["cap"])))


def _rows_infer(specs, params):
    x = specs["x"]
    expect(len(x.shape) == 2, f"x must be (seq, dim), got {x.describe()}")
    return {"y": (("out_seq", x.shape[1]), x.dtype)}


def output_rows_ref(ctx, p, x):
    """The rows whose outputs the caller wants: all of them, or only the last (ctx.output_rows)."""
    if isinstance(ctx, BatchContext):
        return ctx.map_rows(output_rows_ref, p, x)
    return x if ctx.output_rows == "all" else x[-1:]


# ------------------------------------------------------------------- CPU plan lowering
def rope_cpu(plan, node) -> None:
    """RoPE of a token step's row at the run's position (ggml's arithmetic; scaled frequencies run
    on the per-op executor)."""
    p = node.params
    x, y = plan.input(node, "x"), plan.output(node)
    hd = int(p["head_dim"])
    scaling = ggml_rope_scaling(p)
    plan.need(node, scaling is not None and plan.run_input(node, "positions") == "positions",
              "LLaMA-3.1 or LongRoPE frequency scaling, or positions other than the run's")
    plan.need(node, x.dtype == np.float32 and x.size % hd == 0 and x.size == y.size, "x is not whole heads")
    scale, yarn = scaling
    ramp = {}
    if yarn is not None:
        factors = None if yarn[0] is None else np.ascontiguousarray(yarn[0], np.float32)  # (rope_dim/2,)
        if factors is not None:
            plan.keep(factors)
        ramp = dict(scaled=True, freq_factors=0 if factors is None else cpu.address(factors), ext_factor=yarn[1],
                    corr_lo=yarn[2][0], corr_hi=yarn[2][1], attn_factor=yarn[3])
    plan.add("rope", x=cpu.address(x), y=cpu.address(y), n_heads=x.size // hd, head_dim=hd,
             rope_dim=int(p.get("rope_dim", hd)), base=float(p.get("theta", 10000.0)),
             freq_scale=float(np.float32(1.0) / np.float32(scale)),
             interleaved=p.get("style", "half") == "interleaved", **ramp)


def attention_cpu(plan, node) -> None:
    """A token step's attention: its k, v into the layer's KV cache at the run's position, then the
    heads over positions 0 .. that one (one score row per thread, sized for the cache's capacity)."""
    p = node.params
    nh, nkv, hd = int(p["n_heads"]), int(p["n_kv_heads"]), int(p["head_dim"])
    q, k, v, y = plan.input(node, "q"), plan.input(node, "k"), plan.input(node, "v"), plan.output(node)
    layer = int(p.get("layer", 0))
    plan.need(node, plan.layers > 0 and 0 <= layer < plan.layers, "no KV cache layer for it")
    plan.need(node, p.get("causal", True), "not causal")
    plan.need(node, q.size == nh * hd and k.size == v.size == nkv * hd, "q, k, v sizes")
    per = cpu.engine.attention_scratch_floats(plan.capacity, hd, nh // max(nkv, 1))
    scratch = np.empty(plan.threads * per, np.float32)  # (threads, per) score rows
    plan.keep(scratch)
    plan.add("kv_store", k=cpu.address(k), v=cpu.address(v), n_kv_heads=nkv, head_dim=hd, layer=layer)
    plan.add("attention", q=cpu.address(q), y=cpu.address(y), scratch=cpu.address(scratch), n_heads=nh, n_kv_heads=nkv,
             head_dim=hd, window=int(p.get("window", 0)), layer=layer, scratch_floats=per,
             scale=float(np.float32(p.get("scale", hd ** -0.5))), softcap=float(p.get("softcap", 0.0)))
    plan.kv_shape = (nkv, hd)


# ------------------------------------------------------------------ GPU lowerings
def _check_rope(specs, params):
    if "mscale" in params or "longrope_short" in params:
        return "LongRoPE / YaRN cos-sin scaling"
    return None if specs["positions"].dtype == "int32" else f"positions are {specs['positions'].dtype}"


def rope_inv_freq(p: dict) -> np.ndarray:
    """Per-pair inverse frequencies (rope_dim/2,) as float32, scaling applied (scaled_inv_freq)."""
    return scaled_inv_freq(p).astype(np.float32)


def _lower_rope(c: Call) -> list[Dispatch]:
    seq, row = c.shapes["x"]
    hd = int(c.params["head_dim"])
    n = seq * row
    return [Dispatch("rope", ["x", "positions", "@inv_freq", "y"], grid_of(n),
                     dict(n=n, head_dim=hd, row=row, rope_dim=int(c.params.get("rope_dim", hd)),
                          style=int(c.params.get("style", "half") == "interleaved"),
                          inv_scale=1.0 / float(c.params.get("scale", 1.0))))]


def _check_attention(specs, params):
    if float(params.get("softcap", 0.0)):
        return "soft-capped scores"
    hd = int(params["head_dim"])
    return None if hd <= MAX_HEAD_DIM else f"head_dim {hd} > {MAX_HEAD_DIM}"


def _lower_attention(c: Call) -> list[Dispatch]:
    """Append k, v to the device KV cache at ``start``, then attend over positions 0 .. start+seq."""
    p = c.params
    nh, nkv, hd = int(p["n_heads"]), int(p["n_kv_heads"]), int(p["head_dim"])
    seq = c.shapes["q"][0]
    start, cap = c.extra["start"], c.extra["capacity"]
    # (seq, nkv*hd) -> cache (nkv, cap, hd) rows start..start+seq: plane z = kv head, outer o = token
    append = dict(inner=hd, outer=seq, planes=nkv, src_o=nkv * hd, src_z=hd, dst_off=start * hd, dst_o=hd, dst_z=cap * hd)
    return [copy_dispatch("k", "@k_cache", **append), copy_dispatch("v", "@v_cache", **append),
            Dispatch("attention", ["q", "@k_cache", "@v_cache", "y"], (nh, seq, 1),
                     dict(seq=seq, start=start, n_heads=nh, n_kv_heads=nkv, head_dim=hd, capacity=cap,
                          causal=int(bool(p.get("causal", True))), window=int(p.get("window", 0)),
                          scale=float(p.get("scale", hd ** -0.5))))]


def _lower_output_rows(c: Call) -> list[Dispatch]:
    seq, dim = c.shapes["x"]
    return [copy_dispatch("x", "y", inner=dim, src_off=(seq - 1) * dim)]  # only reached for "last"


# ------------------------------------------------------------------- training (compile/autodiff.py)
def _sequence_positions_infer(specs, params):
    ids = specs["ids"]
    expect(len(ids.shape) >= 1, f"ids must be ([batch,] seq), got {ids.describe()}")
    return {"y": (reshape_target(ids.shape, [-1]), "int32")}


def sequence_positions_ref(ctx, p, ids):
    """The position of every token of ids ([batch,] seq) in its row, 0 .. seq-1, flattened to (batch * seq,)
    int32: a training graph's positions (no KV cache, every sequence from position 0), one per row of
    its (batch * seq, dim) activations."""
    return np.ascontiguousarray(np.broadcast_to(np.arange(ids.shape[-1], dtype=np.int32), ids.shape).reshape(-1))


def rope_backward(g, node) -> None:
    """d(rope): the inverse rotation of dy (rope_grad)."""
    g.accumulate(node, "x", g.emit("rope_grad", {"dy": g.grad(node, "y"), "positions": node.inputs["positions"]},
                                   node.params, outputs=("dx",))[0])


def _rope_grad_infer(specs, params):
    out = _rope_infer({"x": specs["dy"], "positions": specs["positions"]}, params)
    return {"dx": out["y"]}


def rope_grad_ref(ctx, p, dy, positions):
    """dx = dy rotated back (the transpose of rope's rotation; rope's params). Ports: dy, positions."""
    return rope_rotate(dy, positions, p, inverse=True)


def rope_grad_fast(ctx, p, dy, positions):
    """rope_grad through rope's kernel at the negated positions: the angles negated in ggml's float32
    arithmetic, the exact transpose of the kernel's forward rotation (scaled frequencies: the reference)."""
    if any(key in p for key in SCALED_ROPE_KEYS):
        return rope_grad_ref(ctx, p, dy, positions)
    hd = int(p["head_dim"])
    return cpu.rope(dy, -positions.astype(np.int64), hd, int(p.get("rope_dim", hd)), float(p.get("theta", 10000.0)),
                    float(p.get("scale", 1.0)), p.get("style", "half") == "interleaved")


def _causal_attention_infer(specs, params):
    q, k, v = specs["q"], specs["k"], specs["v"]
    nh, nkv, hd = int(params["n_heads"]), int(params["n_kv_heads"]), int(params["head_dim"])
    expect(nh > 0 and nkv > 0 and nh % nkv == 0, f"n_heads {nh} must be a multiple of n_kv_heads {nkv}")
    expect(len(q.shape) >= 2 and same_dim(q.shape[-1], nh * hd) and q.dtype == "float32",
           f"q must be float32 ([batch,] seq, {nh * hd}), got {q.describe()}")
    for t in (k, v):
        expect(t.dtype == "float32" and len(t.shape) == len(q.shape) and same_dim(t.shape[-1], nkv * hd)
               and all(same_dim(a, b) for a, b in zip(t.shape[:-1], q.shape[:-1])),
               f"{t.name} must be float32 ([batch,] seq, {nkv * hd}), got {t.describe()}")
    expect(int(params.get("window", 0)) >= 0, f"window must be >= 0 (0: unlimited), got {params.get('window')}")
    if float(params.get("softcap", 0.0)) or not params.get("causal", True):
        raise UnsupportedError("causal_attention: soft-capped or non-causal scores are not supported in training")
    return {"y": (q.shape, "float32"), "lse": (q.shape[:-2] + (nh, q.shape[-2]), "float32")}


def _heads(q, k, v, p, dtype):
    """q (batch, n_kv, group, seq, hd), k and v (batch, n_kv, 1, seq, hd) in ``dtype``; the scale; the mask
    (seq, seq) of the keys each query sees (causal, within ``window`` when > 0)."""
    nh, nkv, hd = int(p["n_heads"]), int(p["n_kv_heads"]), int(p["head_dim"])
    seq = q.shape[-2]
    qh = q.reshape(-1, seq, nkv, nh // nkv, hd).transpose(0, 2, 3, 1, 4).astype(dtype)  # (batch, nkv, group, seq, hd)
    kh = k.reshape(-1, seq, nkv, 1, hd).transpose(0, 2, 3, 1, 4).astype(dtype)          # (batch, nkv, 1, seq, hd)
    vh = v.reshape(-1, seq, nkv, 1, hd).transpose(0, 2, 3, 1, 4).astype(dtype)          # (batch, nkv, 1, seq, hd)
    q_pos, k_pos = np.arange(seq)[:, None], np.arange(seq)[None, :]
    visible = k_pos <= q_pos                                                            # (seq, seq)
    if int(p.get("window", 0)) > 0:
        visible &= k_pos > q_pos - int(p["window"])
    return qh, kh, vh, dtype(np.float32(p.get("scale", hd ** -0.5))), visible


def _merge_heads(h, shape):
    """(batch, nkv, group, seq, hd) -> ``shape`` ([batch,] seq, heads * hd)."""
    return np.ascontiguousarray(h.transpose(0, 3, 1, 2, 4)).reshape(shape)


def causal_attention_ref(ctx, p, q, k, v):
    """Full-sequence causal attention without a KV cache (training), GQA, optional sliding ``window``:
    (y, lse), lse (batch, n_heads, seq) the logsumexp of each query's scaled scores (what attention_grad
    recomputes the probabilities from). The numpy reference materialises seq x seq scores, in float64."""
    qh, kh, vh, scale, visible = _heads(q, k, v, p, np.float64)
    scores = np.where(visible, qh @ kh.swapaxes(-1, -2) * scale, -np.inf)    # (batch, nkv, group, seq, seq)
    top = scores.max(axis=-1, keepdims=True)
    lse = top + np.log(np.exp(scores - top).sum(axis=-1, keepdims=True))      # (batch, nkv, group, seq, 1)
    y = np.exp(scores - lse) @ vh                                            # (batch, nkv, group, seq, hd)
    lse_shape = q.shape[:-2] + (int(p["n_heads"]), q.shape[-2])
    return _merge_heads(y, q.shape).astype(np.float32), lse.reshape(lse_shape).astype(np.float32)


def _batch_rows(p, *tensors):
    """(n_heads, n_kv_heads, scale as causal_attention_ref rounds it, window) and each tensor as (batch,
    seq, width)."""
    nh, nkv, hd = int(p["n_heads"]), int(p["n_kv_heads"]), int(p["head_dim"])
    seq = tensors[0].shape[-2]
    rows = [t.reshape(-1, seq, t.shape[-1]) for t in tensors]
    return (nh, nkv, float(np.float32(p.get("scale", hd ** -0.5))), int(p.get("window", 0))), rows


def causal_attention_fast(ctx, p, q, k, v):
    """causal_attention_ref's contract through cpu.attention_train, one batch row at a time: y and lse
    with one score row per thread, no (seq, seq) scores."""
    args, (q3, k3, v3) = _batch_rows(p, q, k, v)
    y = np.empty(q3.shape, np.float32)                                   # (batch, seq, n_heads * head_dim)
    lse = np.empty((q3.shape[0], args[0], q3.shape[1]), np.float32)     # (batch, n_heads, seq)
    for b in range(q3.shape[0]):
        y[b], lse[b] = cpu.attention_train(q3[b], k3[b], v3[b], *args)
    return y.reshape(q.shape), lse.reshape(q.shape[:-2] + lse.shape[1:])


def _attention_grad_infer(specs, params):
    fwd = _causal_attention_infer({p: specs[p] for p in ("q", "k", "v")}, params)
    expect(specs["dy"].shape == specs["y"].shape == specs["q"].shape, "y and dy must be shaped like q")
    expect(specs["lse"].shape == fwd["lse"][0], f"lse must be {fwd['lse'][0]}, got {specs['lse'].describe()}")
    return {"dq": fwd["y"], "dk": (specs["k"].shape, "float32"), "dv": (specs["v"].shape, "float32")}


def attention_grad_ref(ctx, p, q, k, v, y, dy, lse):
    """(dq, dk, dv) of causal_attention, the probabilities recomputed as exp(scale q k^T - lse):
    dv = P^T dy, dS = P (dy v^T - rowsum(dy * y)), dq = scale dS k, dk = scale dS^T q, a kv head's
    gradients summed over its query heads (GQA). Ports: q, k, v, y (the forward's output), dy, lse
    (the forward's); params: the forward's. float64; materialises seq x seq per head."""
    nh, nkv = int(p["n_heads"]), int(p["n_kv_heads"])
    qh, kh, vh, scale, visible = _heads(q, k, v, p, np.float64)
    seq, group = q.shape[-2], nh // nkv
    yh = y.reshape(-1, seq, nkv, group, y.shape[-1] // nh).transpose(0, 2, 3, 1, 4).astype(np.float64)
    dyh = dy.reshape(yh.shape[0], seq, nkv, group, -1).transpose(0, 2, 3, 1, 4).astype(np.float64)
    lse5 = lse.reshape(-1, nkv, group, seq, 1).astype(np.float64)                         # (batch, nkv, group, seq, 1)
    probs = np.where(visible, np.exp(qh @ kh.swapaxes(-1, -2) * scale - lse5), 0.0)     # (batch, nkv, group, seq, seq)
    dv = (probs.swapaxes(-1, -2) @ dyh).sum(axis=2, keepdims=True)                      # (batch, nkv, 1, seq, hd)
    dscores = probs * (dyh @ vh.swapaxes(-1, -2) - (dyh * yh).sum(axis=-1, keepdims=True))
    dq = dscores @ kh * scale                                                            # (batch, nkv, group, seq, hd)
    dk = (dscores.swapaxes(-1, -2) @ qh).sum(axis=2, keepdims=True) * scale              # (batch, nkv, 1, seq, hd)
    return (_merge_heads(dq, q.shape).astype(np.float32), _merge_heads(dk, k.shape).astype(np.float32),
            _merge_heads(dv, v.shape).astype(np.float32))


def attention_grad_fast(ctx, p, q, k, v, y, dy, lse):
    """attention_grad_ref's (dq, dk, dv) through cpu.attention_backward over the whole batch at once:
    flash-attention 2's backward in one pass per (batch row, kv head), no (seq, seq) matrix."""
    args, (q3, k3, v3, y3, dy3) = _batch_rows(p, q, k, v, y, dy)
    lse3 = lse.reshape(q3.shape[0], args[0], q3.shape[1])                # (batch, n_heads, seq)
    grads = cpu.attention_backward(q3, k3, v3, y3, lse3, dy3, *args)
    return tuple(g.reshape(t.shape) for g, t in zip(grads, (q, k, v)))


def causal_attention_backward(g, node) -> None:
    """d(causal_attention) through attention_grad: dq, dk, dv from one node."""
    grads = g.emit("attention_grad", {"q": node.inputs["q"], "k": node.inputs["k"], "v": node.inputs["v"],
                                      "y": node.outputs["y"], "dy": g.grad(node, "y"), "lse": node.outputs["lse"]},
                   node.params, outputs=("dq", "dk", "dv"))
    for port, grad in zip(("q", "k", "v"), grads):
        g.accumulate(node, port, grad)


def softcap_grad_ref(ctx, p, y, dy):
    """dx = dy * (1 - (y / cap)^2) from softcap's output y, in float64. Ports: y, dy; params: softcap's."""
    t = y.astype(np.float64) / float(p["cap"])
    return (dy * (1.0 - t * t)).astype(np.float32)


def _softcap_grad_infer(specs, params):
    return {"dx": (specs["y"].shape, "float32")}


def softcap_backward(g, node) -> None:
    """d(softcap) through softcap_grad (a function of the output)."""
    g.accumulate(node, "x", g.emit("softcap_grad", {"y": node.outputs["y"], "dy": g.grad(node, "y")}, node.params,
                                   outputs=("dx",))[0])


register(OpDef("sequence_positions", "position", ("ids",), ("y",), _sequence_positions_infer, sequence_positions_ref))
register(OpDef("rope_grad", "position", ("dy", "positions"), ("dx",), _rope_grad_infer, rope_grad_ref, rope_grad_fast,
               fresh=True))
register(OpDef("causal_attention", "attention", ("q", "k", "v"), ("y", "lse"), _causal_attention_infer,
               causal_attention_ref, causal_attention_fast, backward=causal_attention_backward, fresh=True))
register(OpDef("attention_grad", "attention", ("q", "k", "v", "y", "dy", "lse"), ("dq", "dk", "dv"),
               _attention_grad_infer, attention_grad_ref, attention_grad_fast, fresh=True))
register(OpDef("rope", "position", ("x", "positions"), ("y",), _rope_infer, rope_ref, rope_fast, into=rope_into, cpu=rope_cpu,
               gpu=Lowering(("rope",), _lower_rope, _check_rope, lambda p: {"inv_freq": rope_inv_freq(p)}),
               backward=rope_backward))
register(OpDef("attention", "attention", ("q", "k", "v"), ("y",), _attention_infer, attention_ref, attention_fast,
               stateful=True, into=attention_into, cpu=attention_cpu,
               gpu=Lowering(("copy", "attention"), _lower_attention, _check_attention)))
register(OpDef("softcap", "attention", ("x",), ("y",), _softcap_infer, softcap_ref, softcap_fast,
               backward=softcap_backward))
register(OpDef("softcap_grad", "attention", ("y", "dy"), ("dx",), _softcap_grad_infer, softcap_grad_ref))
register(OpDef("output_rows", "shape", ("x",), ("y",), _rows_infer, output_rows_ref, stateful=True, view=True,
               gpu=Lowering(("copy",), _lower_output_rows)))
