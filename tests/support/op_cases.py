"""The op case table: one-node graphs (graph inputs, weights, params, NMSE bound) run against the ops'
numpy references (``Executor(graph, weights, reference=True)``), as ggml's test-backend-ops does.

tests/gpu/test_gpu_ops.py runs every case on every GPU backend (``gpu``: where the GPU executor places
the node); tests/ops/test_op_table.py runs every case on every CPU ISA tier through the per-op executor
and a step plan, and fails when an op the engine runs natively, on the CPU or a GPU, has no case.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from volvox.ops.activation import FUSED_ACTIVATIONS
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ir.quant_blocks import GGML_FORMATS, QUANTIZABLE_QTYPES, QuantTensor, quantize_ref
from volvox.ops.int8 import quantize_multiplier
from volvox.ops.context import RunContext
from volvox.ops.cross_attention import SourceContext
from volvox.runtime.kv_cache import KVCache
from volvox.ops import validate

rng = np.random.default_rng(0)


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


@dataclass
class Case:
    """One node: graph inputs (fed at run time), weights (arrays or QuantTensors), params; ``gpu``:
    expected placement on a GPU backend; ``bound``: the NMSE against the reference (int8 outputs:
    bit-exact)."""

    id: str
    op: str
    inputs: dict
    weights: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    outputs: tuple = ("y",)
    bound: float = 1e-9
    gpu: bool = True
    kv: tuple | None = None   # attention: (layers, start) -> a KV cache pre-filled with start random rows
    cross: tuple | None = None  # cross_attention: (layers, source_len) -> random encoded keys / values per layer
    rows: str = "all"
    # an op computing the node's input "x" from the graph input first ("relu"): a view op (reshape,
    # output_rows) runs on the GPU only when its input is there
    producer: str | None = None
    # why a static step plan (runtime/plan.Plan) does not lower the case: its Unsupported message contains
    # this (token-step ops reading the run's tokens, positions or KV cache; forms a lowering refuses); None:
    # it lowers
    plan: str | None = None
    # why the plan runs the node as a numpy island although its op has a ``cpu`` lowering; None: native steps
    island: str | None = None


def _attn(seq, nh, nkv, hd, **params):
    return dict(inputs=dict(q=f32(seq, nh * hd), k=f32(seq, nkv * hd), v=f32(seq, nkv * hd)),
                params=dict(n_heads=nh, n_kv_heads=nkv, head_dim=hd, **params), plan=KV)


# Why a static plan does not lower a case, in the words of its Unsupported message (Case.plan), and
# why it runs one as an island (Case.island)
TOKEN = "ids other than the run's tokens or positions"  # a token step's embedding
POSITIONS = "positions other than the run's"          # a token step's rope
KV = "no KV cache layer for it"                         # a token step's attention
STATIC = "not a static float32 / int8 / int32 shape"    # int64 tensors, run-time row counts (output_rows)
FIRST = "a broadcast first operand"                     # binary steps broadcast their second operand only
PLAN_ACTIVATIONS = {"linear_act": ("relu", "hard_swish", "silu", "gelu", "gelu_tanh"), "concat_act": ("relu",)}
GROUPED = "a grouped conv (not dense or depthwise) runs its numpy fast path"
POW = "pow by an exponent other than a constant 2 runs its numpy fast path"


def plan_activation(op: str, act: str) -> str | None:
    """Case.plan of a fused op with activation ``act``: None where the plan applies it."""
    return None if act in PLAN_ACTIVATIONS[op] else f"activation {act!r}"


CASES = [
    Case("linear_bias", "linear", dict(x=f32(5, 40)), dict(weight=f32(24, 40), bias=f32(24))),
    Case("linear_3d", "linear", dict(x=f32(2, 17, 33)), dict(weight=f32(19, 33))),
    Case("linear_f16", "linear", dict(x=f32(4, 32)), dict(weight=f32(20, 32).astype(np.float16))),
    Case("linear_split", "linear_split", dict(x=f32(6, 24)), dict(weight=f32(40, 24)), dict(sizes=[8, 32]),
         outputs=("y0", "y1"), plan="split outputs of several rows"),
    Case("embedding", "embedding", dict(ids=np.array([3, 0, 7, 7, 1], np.int32)), dict(table=f32(9, 20)), plan=TOKEN),
    Case("rms_norm", "rms_norm", dict(x=f32(7, 150)), dict(weight=f32(150)), dict(eps=1e-5)),
    Case("layer_norm", "layer_norm", dict(x=f32(3, 2, 70)), dict(weight=f32(70), bias=f32(70)), dict(eps=1e-6)),
    Case("layer_norm_nobias", "layer_norm", dict(x=f32(4, 65)), dict(weight=f32(65))),
    Case("softmax", "softmax", dict(x=f32(6, 130, lo=-8, hi=8)), params=dict(beta=0.7)),
    Case("softmax_axis0", "softmax", dict(x=f32(6, 13)), params=dict(axis=0), gpu=False),
    Case("add_bcast", "add", dict(a=f32(3, 4, 5), b=f32(4, 1))),
    Case("mul_bcast", "mul", dict(a=f32(2, 1, 6), b=f32(5, 1)), plan=FIRST),
    Case("sub", "sub", dict(a=f32(2, 3, 4, 5), b=f32(2, 3, 4, 5))),
    Case("div", "div", dict(a=f32(30), b=f32(30, lo=0.5, hi=2.0))),
    Case("pow_square", "pow", dict(a=f32(4, 6), b=np.array([2.0], np.float32)), island=POW),
    Case("pow_negative_base", "pow", dict(a=f32(40, lo=-3, hi=-0.2), b=np.array([3.0, -1.0, 4.0, 1.0] * 10, np.float32)),
         island=POW),
    Case("pow_fractional", "pow", dict(a=f32(40, lo=0.1, hi=3), b=np.array([0.5, -1.5, 2.5, 0.0] * 10, np.float32)),
         island=POW),
    Case("reduce_mean_last", "reduce_mean", dict(x=f32(3, 4, 70)), params=dict(axes=[-1])),
    Case("reduce_mean_hw", "reduce_mean", dict(x=f32(2, 5, 6, 3)), params=dict(axes=[2, 3], keepdims=False)),
    Case("reduce_mean_axis0", "reduce_mean", dict(x=f32(3, 4)), params=dict(axes=[0]), gpu=False),
    Case("relu", "relu", dict(x=f32(100))),
    Case("sigmoid", "sigmoid", dict(x=f32(100, lo=-30, hi=30))),
    Case("silu", "silu", dict(x=f32(7, 11, lo=-30, hi=30))),
    Case("gelu", "gelu", dict(x=f32(300, lo=-6, hi=6))),
    Case("gelu_tanh", "gelu", dict(x=f32(300, lo=-6, hi=6)), params=dict(approximate="tanh")),
    Case("clip", "clip", dict(x=f32(50, lo=-9, hi=9)), params=dict(min=0.0, max=6.0)),
    Case("hard_sigmoid", "hard_sigmoid", dict(x=f32(50, lo=-5, hi=5)), params=dict(alpha=0.2, beta=0.5)),
    Case("hard_swish", "hard_swish", dict(x=f32(50, lo=-5, hi=5))),
    Case("sqrt", "sqrt", dict(x=f32(50, lo=0, hi=9))),
    Case("swiglu", "swiglu", dict(x=f32(5, 2 * 36))),
    Case("rope_half", "rope", dict(x=f32(6, 4 * 16), positions=np.arange(40, 46, dtype=np.int32)),
         params=dict(head_dim=16, theta=10000.0, style="half"), bound=1e-8, plan=POSITIONS),
    Case("rope_interleaved_partial", "rope", dict(x=f32(5, 2 * 32), positions=np.array([0, 3, 9, 100, 7], np.int32)),
         params=dict(head_dim=32, rope_dim=16, theta=500000.0, style="interleaved", scale=2.0), bound=1e-8,
         plan=POSITIONS),
    Case("rope_llama3", "rope", dict(x=f32(4, 2 * 64), positions=np.arange(4, dtype=np.int32) * 50),
         params=dict(head_dim=64, style="half", theta=500000.0,
                     llama3=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_context=64)),
         bound=1e-8, plan=POSITIONS),
    Case("rope_int64", "rope", dict(x=f32(3, 16), positions=np.arange(3, dtype=np.int64)),
         params=dict(head_dim=16), gpu=False, plan=STATIC),
    Case("attention_nocache", "attention", **_attn(9, 4, 2, 16)),
    Case("attention_noncausal", "attention", **_attn(5, 2, 2, 8, causal=False)),
    Case("attention_kv_gqa", "attention", **_attn(7, 6, 2, 32, layer=1), kv=(2, 70)),
    Case("attention_kv_window", "attention", **_attn(5, 2, 1, 16, window=4), kv=(1, 9)),
    Case("attention_hd128", "attention", **_attn(3, 2, 1, 128), kv=(1, 130)),
    Case("cross_attention_decode", "cross_attention", dict(q=f32(1, 3 * 8)), params=dict(n_heads=3, head_dim=8, layer=1),
         cross=(2, 37), gpu=False, plan="no native step"),  # stateful: reads the run's encoded input
    Case("cross_attention_rows", "cross_attention", dict(q=f32(6, 2 * 16)), params=dict(n_heads=2, head_dim=16),
         cross=(1, 5), gpu=False, plan="no native step"),
    Case("output_rows_last", "output_rows", dict(x=f32(5, 12)), rows="last", gpu=False,  # input on the host: CPU
         plan=STATIC),
    Case("concat_axis1", "concat", dict(x0=f32(2, 3, 4), x1=f32(2, 5, 4), x2=f32(2, 1, 4)), params=dict(axis=1)),
    Case("concat_last", "concat", dict(x0=f32(3, 4), x1=f32(3, 2)), params=dict(axis=-1)),
    Case("matmul_2d", "matmul", dict(a=f32(7, 20), b=f32(20, 9))),
    Case("matmul_batched", "matmul", dict(a=f32(2, 3, 5, 16), b=f32(2, 3, 16, 4))),
    Case("matmul_bcast_b", "matmul", dict(a=f32(3, 6, 10), b=f32(10, 17))),
    Case("matmul_bcast_a", "matmul", dict(a=f32(6, 10), b=f32(4, 10, 5))),
    Case("matmul_partial_bcast", "matmul", dict(a=f32(2, 1, 3, 4), b=f32(2, 5, 4, 3)), gpu=False),
    Case("transpose_3d", "transpose", dict(x=f32(3, 4, 5)), params=dict(perm=[2, 0, 1])),
    Case("transpose_nhwc_nchw", "transpose", dict(x=f32(2, 5, 6, 3)), params=dict(perm=[0, 3, 1, 2])),
    Case("transpose_5d", "transpose", dict(x=f32(2, 1, 2, 3, 2)), params=dict(perm=[4, 3, 2, 1, 0])),
    Case("transpose_7d", "transpose", dict(x=f32(1, 2, 1, 2, 1, 2, 1)), params=dict(perm=[6, 5, 4, 3, 2, 1, 0]), gpu=False),
    Case("slice_steps", "slice", dict(x=f32(6, 9, 4)), params=dict(axes=[0, 1], starts=[1, 8], ends=[6, 0], steps=[2, -3])),
    Case("slice_clamped", "slice", dict(x=f32(5, 7)), params=dict(axes=[1], starts=[-4], ends=[100])),
    Case("pad_nhwc", "pad", dict(x=f32(1, 3, 4, 2)), params=dict(pads=[[0, 0], [1, 2], [0, 1], [0, 0]], value=-1.5),
         island="pads other than zeros on the last axis"),
    Case("conv_dense", "conv2d", dict(x=f32(1, 9, 8, 3)), dict(weight=f32(5, 3, 3, 3), bias=f32(5)),
         dict(strides=[2, 2], pads=[1, 1, 1, 1], activation="relu")),
    Case("conv_depthwise", "conv2d", dict(x=f32(2, 7, 7, 4)), dict(weight=f32(4, 3, 3, 1)),
         dict(groups=4, pads=[0, 0, 2, 2], dilations=[2, 1], activation="relu6")),
    Case("conv_pointwise", "conv2d", dict(x=f32(1, 5, 6, 8)), dict(weight=f32(6, 1, 1, 8), bias=f32(6))),
    Case("conv_groups", "conv2d", dict(x=f32(1, 6, 6, 4)), dict(weight=f32(6, 3, 3, 2)),
         dict(groups=2, strides=[1, 2], pads=[1, 0, 1, 2]), island=GROUPED),
    Case("max_pool", "max_pool2d", dict(x=f32(1, 7, 7, 3)), params=dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    Case("avg_pool", "avg_pool2d", dict(x=f32(2, 6, 5, 3)), params=dict(kernel=[3, 2], strides=[1, 1], pads=[1, 0, 1, 1])),
    Case("avg_pool_incl_pad", "avg_pool2d", dict(x=f32(1, 4, 4, 2)),
         params=dict(kernel=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=True)),
    Case("global_avg_pool", "global_avg_pool", dict(x=f32(2, 5, 3, 7))),
    # fused ops (volvox/compile/): matmul with the activation in its write, concat's copies then the
    # activation in place, add_n as a first add then in-place adds; every FUSED_ACTIVATIONS entry
    *[Case(f"linear_act_{act}", "linear_act", dict(x=f32(2, 5, 24)), dict(weight=f32(18, 24), bias=f32(18)),
           dict(activation=act), plan=plan_activation("linear_act", act)) for act in FUSED_ACTIVATIONS],
    Case("linear_act_nobias", "linear_act", dict(x=f32(7, 33)), dict(weight=f32(20, 33)), dict(activation="gelu_tanh")),
    Case("linear_act_f16", "linear_act", dict(x=f32(4, 32)), dict(weight=f32(20, 32).astype(np.float16)),
         dict(activation="silu")),
    *[Case(f"concat_act_{act}", "concat_act", dict(x0=f32(2, 3, 4, lo=-8, hi=8), x1=f32(2, 5, 4, lo=-8, hi=8)),
           params=dict(axis=1, activation=act), plan=plan_activation("concat_act", act))
      for act in FUSED_ACTIVATIONS],
    Case("concat_act_last3", "concat_act", dict(x0=f32(3, 4), x1=f32(3, 2), x2=f32(3, 5)),
         params=dict(axis=-1, activation="sigmoid"), plan=plan_activation("concat_act", "sigmoid")),
    Case("add_n3", "add_n", dict(x0=f32(4, 9), x1=f32(4, 9), x2=f32(4, 9))),
    Case("add_n_bcast", "add_n", dict(x0=f32(6), x1=f32(1, 6), x2=f32(3, 6), x3=f32(2, 1, 1), x4=f32(2, 3, 6)),
         plan=FIRST),
    Case("add_n_int", "add_n", dict(x0=np.arange(6, dtype=np.int32), x1=np.ones(6, np.int32), x2=np.ones(6, np.int32)),
         gpu=False, plan="dtype"),
    *[Case(f"add_n_{act}", "add_n", dict(x0=f32(3, 8, lo=-8, hi=8), x1=f32(3, 8, lo=-8, hi=8), x2=f32(1, 8)),
           params=dict(activation=act), plan=FIRST) for act in ("relu", "relu6", "sigmoid")],
]


# ------------------------------------------------------------------------ cases beyond the GPU ops'
# Values from rng as well, drawn after every case above (their values stay what they were).

def i8(*shape, lo=-128, hi=127):
    return rng.integers(lo, hi, size=shape, endpoint=True).astype(np.int8)


def i32(*shape, lo=-2000, hi=2000):
    return rng.integers(lo, hi, size=shape, endpoint=True).astype(np.int32)


def requant(*reals) -> dict:
    """multiplier and shift (int32, one per output channel) of real rescales, as an importer computes them."""
    pairs = [quantize_multiplier(float(r)) for r in reals]
    return dict(multiplier=np.array([m for m, _ in pairs], np.int32), shift=np.array([e for _, e in pairs], np.int32))


def channel_requant(n: int, lo=2e-4, hi=2e-3, prefix="") -> dict:
    return {prefix + k: v for k, v in requant(*rng.uniform(lo, hi, n)).items()}


def quant(qtype: str, rows: int, cols: int) -> QuantTensor:
    """A (rows, cols) weight in ``qtype``: quantize_ref of random values, or random k-quant blocks (every
    bit pattern) with small finite float16 super-scales."""
    if qtype in QUANTIZABLE_QTYPES:
        return quantize_ref(f32(rows, cols), qtype)
    return random_kquant(rng, qtype, rows, cols)


def random_kquant(gen: np.random.Generator, qtype: str, rows: int, cols: int) -> QuantTensor:
    """Random k-quant blocks (every bit pattern) with finite, small float16 super-scales."""
    fmt = GGML_FORMATS[qtype]
    nb = cols // fmt.block_size
    raw = gen.integers(0, 256, (rows, nb * fmt.type_size), dtype=np.uint8)  # (rows, nb * type_size)
    blk = raw.reshape(rows, nb, fmt.type_size)
    for off in ((0, 2) if qtype == "q4_k" else (208,)):
        blk[..., off:off + 2] = gen.uniform(-0.02, 0.02, (rows, nb, 1)).astype(np.float16).view(np.uint8)
    return QuantTensor(raw, qtype, (rows, cols))


QUANT_K = {"q4_0": 64, "q4_1": 64, "q8_0": 96, "q4_k": 256, "q6_k": 256}  # K: whole blocks
QUANT_BOUND = 5e-4  # 8-bit activations against the float64 product of the dequantized weight (ggml: 5e-4)
ROWS = "quantized weights on several rows"          # the plan's GEMV takes one activation row

CASES += [  # block-quantized weights: packed in the shaders (matmul_q / gemv_q / embedding_q)
    *[Case(f"linear_{q}", "linear", dict(x=f32(1, QUANT_K[q])), dict(weight=quant(q, 12, QUANT_K[q]), bias=f32(12)),
           bound=QUANT_BOUND) for q in QUANT_K],
    *[Case(f"linear_{q}_rows", "linear", dict(x=f32(2, 3, QUANT_K[q])), dict(weight=quant(q, 9, QUANT_K[q])),
           bound=QUANT_BOUND, plan=ROWS) for q in QUANT_K],
    Case("linear_act_q8_0_silu", "linear_act", dict(x=f32(1, 96)), dict(weight=quant("q8_0", 10, 96), bias=f32(10)),
         dict(activation="silu"), bound=QUANT_BOUND),
    Case("linear_act_q4_k_gelu", "linear_act", dict(x=f32(1, 256)), dict(weight=quant("q4_k", 8, 256)),
         dict(activation="gelu"), bound=QUANT_BOUND),
    Case("linear_act_q6_k_relu", "linear_act", dict(x=f32(1, 256)), dict(weight=quant("q6_k", 8, 256), bias=f32(8)),
         dict(activation="relu"), bound=QUANT_BOUND),
    Case("linear_act_q4_1_gelu_tanh_rows", "linear_act", dict(x=f32(3, 64)), dict(weight=quant("q4_1", 6, 64)),
         dict(activation="gelu_tanh"), bound=QUANT_BOUND, plan=ROWS),
    Case("linear_split_q4_0", "linear_split", dict(x=f32(1, 64)), dict(weight=quant("q4_0", 24, 64)),
         dict(sizes=[8, 16]), outputs=("y0", "y1"), bound=QUANT_BOUND),
    Case("linear_split_q6_k", "linear_split", dict(x=f32(1, 256)), dict(weight=quant("q6_k", 16, 256)),
         dict(sizes=[4, 4, 8]), outputs=("y0", "y1", "y2"), bound=QUANT_BOUND),
    Case("linear_split_q8_0_rows", "linear_split", dict(x=f32(4, 96)), dict(weight=quant("q8_0", 12, 96)),
         dict(sizes=[5, 7]), outputs=("y0", "y1"), bound=QUANT_BOUND, plan="split outputs of several rows"),
    *[Case(f"embedding_{q}", "embedding", dict(ids=np.array([2, 0, 5, 5, 1], np.int32)),
           dict(table=quant(q, 6, QUANT_K[q])), plan=TOKEN) for q in QUANT_K],
    Case("embedding_q8_0_int64", "embedding", dict(ids=np.array([[1, 3], [3, 0]], np.int64)),
         dict(table=quant("q8_0", 4, 32)), gpu=False, plan=STATIC),  # int64 ids: the CPU
]
CASES += [  # float32 ops the GPU table lacked
    Case("linear_sgemm", "linear", dict(x=f32(2, 9, 40)), dict(weight=f32(36, 40), bias=f32(36))),  # >= SGEMM_MIN_ROWS
    Case("linear_split_row", "linear_split", dict(x=f32(1, 24)), dict(weight=f32(40, 24)), dict(sizes=[8, 20, 12]),
         outputs=("y0", "y1", "y2")),
    Case("embedding_f16", "embedding", dict(ids=np.array([4, 1, 1], np.int32)),
         dict(table=f32(6, 12).astype(np.float16)), plan=TOKEN),
    Case("silu_1d", "silu", dict(x=f32(37, lo=-30, hi=30))),
    Case("silu_3d", "silu", dict(x=f32(2, 3, 9, lo=-10, hi=10))),
    Case("swiglu_1d", "swiglu", dict(x=f32(2 * 20)), plan="float32 rows"),
    Case("swiglu_3d", "swiglu", dict(x=f32(2, 3, 2 * 12)), plan="float32 rows"),
    Case("pow_square_weight", "pow", dict(a=f32(4, 6)), dict(b=np.array([2.0], np.float32))),
    Case("mul_bcast_inner", "mul", dict(a=f32(2, 3, 4), b=f32(3, 1))),  # b: one block of a's axes (native)
    Case("add_n4_relu6", "add_n", dict(x0=f32(3, 7, lo=-8, hi=8), x1=f32(3, 7), x2=f32(3, 7), x3=f32(3, 7)),
         params=dict(activation="relu6")),
    Case("pad_channels", "pad", dict(x=f32(1, 3, 4, 3)), params=dict(pads=[[0, 0], [0, 0], [0, 0], [1, 2]])),
    Case("pad_channels_int8", "pad", dict(x=i8(2, 2, 5)), params=dict(pads=[[0, 0], [0, 0], [3, 0]]), bound=0,
         gpu=False),
    Case("reshape", "reshape", dict(x=f32(4, 6)), params=dict(shape=[2, 0, -1]), gpu=False),  # input on the host: CPU
    Case("reshape_of_relu", "reshape", dict(x=f32(3, 8)), params=dict(shape=[6, 4]), producer="relu"),
    Case("output_rows_last_of_relu", "output_rows", dict(x=f32(5, 12)), rows="last", producer="relu", plan=STATIC),
    Case("output_rows_all_of_relu", "output_rows", dict(x=f32(4, 7)), producer="relu", plan=STATIC),
    Case("resize_nearest_half_pixel", "resize", dict(x=f32(1, 5, 4, 3)),
         params=dict(mode="nearest", coordinate="half_pixel", size=[9, 7]), bound=1e-12),
    Case("resize_nearest_asymmetric_2x", "resize", dict(x=f32(2, 3, 4, 2)),
         params=dict(mode="nearest", coordinate="asymmetric", nearest_mode="floor", scales=[2.0, 2.0]), bound=1e-12),
    Case("resize_bilinear_half_pixel", "resize", dict(x=f32(1, 6, 5, 3)),
         params=dict(mode="bilinear", coordinate="half_pixel", size=[4, 9]), bound=1e-12),
    Case("resize_bilinear_align_corners", "resize", dict(x=f32(1, 4, 4, 2)),
         params=dict(mode="bilinear", coordinate="align_corners", size=[7, 3]), bound=1e-12),
    Case("resize_bilinear_tflite_half", "resize", dict(x=f32(1, 3, 5, 4)),
         params=dict(mode="bilinear", coordinate="tflite_half_pixel", scales=[1.5, 0.6]), bound=1e-12),
    Case("resize_int8_nearest", "resize", dict(x=i8(1, 3, 4, 5)),
         params=dict(mode="nearest", coordinate="tflite_asymmetric", size=[6, 8]), bound=0, gpu=False),
]

INT8 = dict(bound=0, gpu=False)  # int8 ops: bit-exact, the CPU on every backend


def qconv(x, w, bias=True, reals=(1e-3, 4e-3), **params):
    """A qconv2d case's inputs / weights / params (per-channel requantization from ``reals``' range)."""
    n = w.shape[0]
    weights = dict(weight=w, **(dict(bias=i32(n)) if bias else {}), **channel_requant(n, *reals))
    return dict(inputs=dict(x=x), weights=weights,
                params=dict(input_zero_point=-3, output_zero_point=5, **params))


def dwpw(x, c, cout, bias=True, **depthwise):
    """A dwpw_conv2d's inputs / weights: depthwise (c, 3, 3, 1) then 1x1 (cout, 1, 1, c)."""
    weights = dict(dw_weight=f32(c, 3, 3, 1), **(dict(dw_bias=f32(c)) if bias else {}), weight=f32(cout, 1, 1, c),
                   **(dict(bias=f32(cout)) if bias else {}))
    return dict(inputs=dict(x=x), weights=weights)


def qdwpw(x, c, cout, bias=True, dw_params=None, **params):
    """A qdwpw_conv2d's inputs / weights / params: int8 depthwise (c, 3, 3, 1) then 1x1 (cout, 1, 1, c)."""
    weights = dict(dw_weight=i8(c, 3, 3, 1), **(dict(dw_bias=i32(c)) if bias else {}),
                   **channel_requant(c, 4e-3, 1e-2, prefix="dw_"), weight=i8(cout, 1, 1, c),
                   **(dict(bias=i32(cout)) if bias else {}), **channel_requant(cout, 2e-3, 8e-3))
    depthwise = dict(groups=c, pads=[1, 1, 1, 1], input_zero_point=-3, output_zero_point=2, **(dw_params or {}))
    return dict(inputs=dict(x=x), weights=weights,
                params=dict(input_zero_point=2, output_zero_point=-4, depthwise=depthwise, **params))


CASES += [  # the int8 island (ops/int8.py): TFLite's arithmetic, bit for bit
    Case("quantize", "quantize", dict(x=f32(5, 9, lo=-8, hi=8)), params=dict(scale=0.05, zero_point=-10), **INT8),
    Case("quantize_ties", "quantize", dict(x=((np.arange(-24, 24) + 0.5) * 0.25).astype(np.float32)),
         params=dict(scale=0.25, zero_point=3), **INT8),
    Case("dequantize", "dequantize", dict(x=i8(5, 7)), params=dict(scale=0.1, zero_point=3), bound=1e-12, gpu=False),
    Case("qconv2d_dense", "qconv2d", **qconv(i8(1, 6, 5, 3), i8(4, 3, 3, 3), strides=[2, 1], pads=[1, 1, 1, 1]),
         **INT8),
    Case("qconv2d_dense_clamped", "qconv2d", **qconv(i8(1, 5, 5, 4), i8(8, 2, 3, 4), pads=[0, 1, 1, 0],
                                                        act_min=5, act_max=100), **INT8),
    Case("qconv2d_depthwise", "qconv2d", **qconv(i8(1, 7, 7, 8), i8(8, 3, 3, 1), reals=(4e-3, 1e-2), groups=8,
                                                    pads=[1, 1, 1, 1], dilations=[2, 1]), **INT8),
    Case("qconv2d_depthwise_stride2", "qconv2d", **qconv(i8(2, 6, 6, 4), i8(4, 3, 3, 1), bias=False, reals=(4e-3, 1e-2),
                                                            groups=4, strides=[2, 2], pads=[0, 0, 1, 1]), **INT8),
    Case("qconv2d_1x1", "qconv2d", **qconv(i8(2, 4, 4, 8), i8(6, 1, 1, 8), bias=False), **INT8),
    # a rescale above 1 (a positive shift) on channel 0
    Case("qconv2d_1x1_shift_left", "qconv2d", inputs=dict(x=i8(1, 3, 3, 8, lo=-20, hi=20)),
         weights=dict(weight=i8(3, 1, 1, 8, lo=-2, hi=2), **requant(1.5, 0.75, 3e-2)),
         params=dict(input_zero_point=1, output_zero_point=-2), **INT8),
    Case("qconv2d_grouped", "qconv2d", **qconv(i8(1, 5, 5, 4), i8(6, 3, 3, 2), groups=2, pads=[1, 1, 1, 1]),
         island=GROUPED, **INT8),
    Case("qlinear", "qlinear", dict(x=i8(3, 20)), dict(weight=i8(7, 20), bias=i32(7), **channel_requant(7, 1e-3, 5e-3)),
         dict(input_zero_point=4, output_zero_point=-6), **INT8),
    Case("qlinear_per_tensor_3d", "qlinear", dict(x=i8(2, 2, 16)), dict(weight=i8(5, 16), **requant(3e-3)),
         dict(input_zero_point=-1, output_zero_point=0, act_min=-20, act_max=127), **INT8),
    Case("qlinear_single_rounding", "qlinear", dict(x=i8(3, 20)),
         dict(weight=i8(7, 20), bias=i32(7), **channel_requant(7, 1e-3, 5e-3)),
         dict(input_zero_point=4, output_zero_point=-6, rounding="single"),
         island="single rounding (TFLite's FULLY_CONNECTED) runs its numpy path", **INT8),
    Case("qavg_pool2d", "qavg_pool2d", dict(x=i8(1, 6, 6, 4)),
         params=dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], act_min=-100, act_max=90), **INT8),
    Case("qavg_pool2d_valid", "qavg_pool2d", dict(x=i8(2, 4, 5, 3)), params=dict(kernel=[2, 3]), **INT8),
    Case("qsoftmax", "qsoftmax", dict(x=i8(3, 10)),
         params=dict(input_scale=0.1, output_scale=1 / 256, output_zero_point=-128), **INT8),
    Case("qsoftmax_beta_3d", "qsoftmax", dict(x=i8(2, 3, 17)),
         params=dict(input_scale=0.05, beta=0.7, output_scale=1 / 256, output_zero_point=-128), **INT8),
    # ops/quantized.py: TFLite's int8 ADD / SUB / MUL / MAX_POOL_2D
    Case("qadd_broadcast", "qadd", dict(a=i8(2, 3, 5, 4), b=i8(1, 1, 5, 1)),
         params=dict(a_scale=0.05, a_zero_point=3, b_scale=0.11, b_zero_point=-20, y_scale=0.07, y_zero_point=-5,
                     act_min=-5, act_max=127), **INT8),
    Case("qadd_sub_first_broadcast", "qadd", dict(a=i8(1, 4), b=i8(3, 4)),
         params=dict(a_scale=0.013, a_zero_point=0, b_scale=0.05, b_zero_point=3, y_scale=0.07, y_zero_point=-5,
                     subtract=True), **INT8),
    Case("qmul", "qmul", dict(a=i8(3, 7), b=i8(3, 7)),
         params=dict(a_scale=0.05, a_zero_point=3, b_scale=0.11, b_zero_point=-20, y_scale=0.3, y_zero_point=1), **INT8),
    Case("qlookup", "qlookup", dict(x=i8(3, 5, 7)), dict(table=i8(256)), **INT8),
    Case("qmax_pool2d", "qmax_pool2d", dict(x=i8(2, 7, 6, 3)),
         params=dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], act_min=-100, act_max=90), **INT8),
    Case("qdwpw_conv2d", "qdwpw_conv2d", **qdwpw(i8(1, 6, 6, 8), 8, 12), **INT8),
    Case("qdwpw_conv2d_stride2_clamped", "qdwpw_conv2d",
         **qdwpw(i8(2, 7, 6, 4), 4, 8, bias=False, dw_params=dict(strides=[2, 2]), act_min=-4, act_max=90), **INT8),
    Case("qdwpw_conv2d_6_channels", "qdwpw_conv2d", **qdwpw(i8(1, 5, 5, 6), 6, 4),
         plan="int8 channels not a multiple of 4", **INT8),
]
CASES += [  # fused convs (ops/dwpw.py): depthwise -> 1x1, and expand 1x1 -> depthwise -> 1x1
    Case("dwpw_conv2d", "dwpw_conv2d", **dwpw(f32(1, 7, 7, 6), 6, 10),
         params=dict(activation="relu",
                     depthwise=dict(groups=6, strides=[2, 2], pads=[1, 1, 1, 1], activation="relu6")),
         gpu=False),
    Case("dwpw_conv2d_nobias_dilated", "dwpw_conv2d", **dwpw(f32(2, 6, 5, 4), 4, 7, bias=False),
         params=dict(depthwise=dict(groups=4, pads=[2, 1, 2, 1], dilations=[2, 1])), gpu=False),
    # 1x1 weights past DWPW_SPLIT_BYTES (256 x 264 floats): the plan runs the two convs' steps
    Case("dwpw_conv2d_split", "dwpw_conv2d", **dwpw(f32(1, 3, 3, 264), 264, 256),
         params=dict(activation="relu6", depthwise=dict(groups=264, pads=[1, 1, 1, 1], activation="relu")), gpu=False),
    Case("expand_dwpw_conv2d", "expand_dwpw_conv2d", dict(x=f32(1, 5, 5, 4)),
         dict(ex_weight=f32(12, 1, 1, 4), ex_bias=f32(12), dw_weight=f32(12, 3, 3, 1), dw_bias=f32(12),
              weight=f32(6, 1, 1, 12), bias=f32(6)),
         dict(expand=dict(activation="relu6"), depthwise=dict(groups=12, pads=[1, 1, 1, 1], activation="relu6")),
         gpu=False),
    Case("expand_dwpw_conv2d_stride2", "expand_dwpw_conv2d", dict(x=f32(2, 6, 7, 3)),
         dict(ex_weight=f32(8, 1, 1, 3), dw_weight=f32(8, 3, 3, 1), weight=f32(5, 1, 1, 8)),
         dict(activation="relu", expand=dict(activation="relu"),
              depthwise=dict(groups=8, strides=[2, 2], pads=[0, 0, 1, 1])),
         gpu=False),
]
CASES += [  # the dense LLM families: RoPE scalings, soft-capped attention and logits, ggml's fp16-table GELU
    Case("rope_yarn", "rope", dict(x=f32(4, 2 * 32), positions=np.arange(4, dtype=np.int32) * 30),
         params=dict(head_dim=32, style="half", theta=10000.0, mscale=1.1386,
                     yarn=dict(factor=4.0, original_context=32, beta_fast=32.0, beta_slow=1.0)),
         bound=1e-8, gpu=False, plan=POSITIONS),
    Case("rope_yarn_unscaled_cos", "rope", dict(x=f32(4, 2 * 32), positions=np.arange(4, dtype=np.int32) * 30),
         params=dict(head_dim=32, style="half", theta=10000.0,
                     yarn=dict(factor=4.0, original_context=32, beta_fast=32.0, beta_slow=1.0)),
         bound=1e-8, plan=POSITIONS),
    Case("rope_longrope", "rope", dict(x=f32(3, 2 * 16), positions=np.array([5, 40, 41], np.int32)),
         params=dict(head_dim=16, style="half", theta=10000.0, mscale=1.2, longrope_context=32,
                     longrope_short=[1.0, 1.1, 1.3, 1.7, 2.0, 2.5, 3.0, 4.0],
                     longrope_long=[1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0]),
         bound=1e-8, gpu=False, plan=POSITIONS),
    Case("rope_freq_factors", "rope", dict(x=f32(3, 2 * 16), positions=np.array([0, 7, 90], np.int32)),
         params=dict(head_dim=16, style="interleaved", theta=500000.0,
                     freq_factors=[1.0, 1.0, 1.5, 2.0, 4.0, 8.0, 8.0, 8.0]), bound=1e-8, plan=POSITIONS),
    Case("attention_softcap_window", "attention", **_attn(5, 4, 2, 16, window=3, softcap=2.5), kv=(1, 6), gpu=False),
    Case("softcap", "softcap", dict(x=f32(3, 50, lo=-90, hi=90)), params=dict(cap=30.0), gpu=False),
    Case("gelu_f16_table", "gelu_f16_table", dict(x=f32(300, lo=-12, hi=12)), gpu=False),
]
CASES += [  # elementwise functions of the engine's unary step and the unary shader (ops/codes.py)
    Case("leaky_relu", "leaky_relu", dict(x=f32(70, lo=-5, hi=5))),
    Case("leaky_relu_alpha", "leaky_relu", dict(x=f32(3, 45, lo=-5, hi=5)), params=dict(alpha=0.2)),
]
SSM = "has no native step"  # the SSM ops (ops/ssm.py) carry state; a plan does not lower them yet
CASES += [  # state-space model ops (ops/ssm.py), from zero state (a run context without a state cache)
    Case("causal_conv1d", "causal_conv1d", dict(x=f32(9, 20)), dict(weight=f32(20, 4), bias=f32(20)),
         dict(layer=0), gpu=False, plan=SSM),
    Case("causal_conv1d_nobias", "causal_conv1d", dict(x=f32(3, 7)), dict(weight=f32(7, 2)), gpu=False, plan=SSM),
    Case("selective_scan", "selective_scan",
         dict(x=f32(6, 12), dt=f32(6, 12), B=f32(6, 5), C=f32(6, 5), z=f32(6, 12)),
         dict(A=f32(12, 5, lo=-3, hi=-0.1), D=f32(12)), gpu=False, plan=SSM),
    Case("ssd_scan", "ssd_scan", dict(x=f32(5, 24), dt=f32(5, 4), B=f32(5, 6), C=f32(5, 6)),
         dict(dt_bias=f32(4), A=f32(4, lo=-3, hi=-0.1), D=f32(4)),
         dict(n_heads=4, head_dim=6, n_groups=2, state_size=3), gpu=False, plan=SSM),
    Case("gated_rms_norm", "gated_rms_norm", dict(x=f32(4, 16), z=f32(4, 16)), dict(weight=f32(16)),
         dict(eps=1e-5, group_size=8), gpu=False),
]


# mixture of experts: routed SwiGLU experts over 3-D float stacks or quantized (n_experts * out, in) rows
PREFILL = "several rows run the gathered prefill path"  # the plan's moe steps take one token
QUANT_ROWS = "quantized experts on several rows"
CASES += [
    Case("moe_f32_softmax_norm", "moe", dict(x=f32(1, 64), logits=f32(1, 4)),
         dict(gate=f32(4, 32, 64, lo=-0.2, hi=0.2), up=f32(4, 32, 64, lo=-0.2, hi=0.2),
              down=f32(4, 64, 32, lo=-0.2, hi=0.2)), dict(top_k=2, norm_topk=True), gpu=False),
    Case("moe_f16_sigmoid", "moe", dict(x=f32(1, 64), logits=f32(1, 5)),
         dict(gate=f32(5, 32, 64, lo=-0.2, hi=0.2).astype(np.float16), up=f32(5, 32, 64, lo=-0.2, hi=0.2).astype(np.float16),
              down=f32(5, 64, 32, lo=-0.2, hi=0.2).astype(np.float16)), dict(top_k=3, gating="sigmoid"), gpu=False),
    Case("moe_q8_0_shared", "moe", dict(x=f32(1, 64), logits=f32(1, 4), shared=f32(1, 64), shared_logit=f32(1, 1)),
         dict(gate=quant("q8_0", 4 * 32, 64), up=quant("q8_0", 4 * 32, 64), down=quant("q8_0", 4 * 64, 32)),
         dict(top_k=2), bound=QUANT_BOUND, gpu=False),
    Case("moe_q4_1_rows", "moe", dict(x=f32(5, 64), logits=f32(5, 4)),
         dict(gate=quant("q4_1", 4 * 32, 64), up=quant("q4_1", 4 * 32, 64), down=quant("q4_1", 4 * 64, 32)),
         dict(top_k=2, norm_topk=True), bound=QUANT_BOUND, gpu=False, plan=QUANT_ROWS),
    Case("moe_f32_rows", "moe", dict(x=f32(6, 64), logits=f32(6, 4)),
         dict(gate=f32(4, 32, 64, lo=-0.2, hi=0.2), up=f32(4, 32, 64, lo=-0.2, hi=0.2),
              down=f32(4, 64, 32, lo=-0.2, hi=0.2)), dict(top_k=1), gpu=False, island=PREFILL),
]

CASES += [  # gradient ops (training graphs, compile/autodiff.py): f32 BLAS against the float64 references
    Case("linear_grad_input", "linear_grad_input", dict(dy=f32(2, 3, 7)), dict(weight=f32(7, 13)), outputs=("dx",),
         bound=1e-10, gpu=False),
    Case("linear_grad_input_q4_0", "linear_grad_input", dict(dy=f32(3, 9)), dict(weight=quant("q4_0", 9, 64)),
         outputs=("dx",), bound=1e-10, gpu=False, plan="not a numpy weight"),  # an island reads numpy weights only
    Case("linear_grad_weight", "linear_grad_weight", dict(x=f32(2, 5, 13), dy=f32(2, 5, 7)), outputs=("dw",),
         bound=1e-10, gpu=False),
    *[Case(f"rope_grad_{style}", "rope_grad", dict(dy=f32(5, 3 * 8), positions=np.array([0, 2, 7, 30, 31], np.int32)),
           params=dict(head_dim=8, theta=10000.0, style=style), outputs=("dx",), bound=1e-10, gpu=False)
      for style in ("half", "interleaved")],
    Case("causal_attention_gqa_window", "causal_attention",
         dict(q=f32(2, 9, 4 * 8), k=f32(2, 9, 2 * 8), v=f32(2, 9, 2 * 8)),
         params=dict(n_heads=4, n_kv_heads=2, head_dim=8, window=4), outputs=("y", "lse"), bound=1e-10, gpu=False,
         plan="no native step"),
]


def _attention_grad_case(case_id: str, batch: int, seq: int, nh: int, nkv: int, hd: int, window: int) -> Case:
    """attention_grad on the outputs of a real forward (y, lse from causal_attention's reference)."""
    from volvox.ops.attention import causal_attention_ref
    params = dict(n_heads=nh, n_kv_heads=nkv, head_dim=hd, window=window)
    q, k, v = f32(batch, seq, nh * hd), f32(batch, seq, nkv * hd), f32(batch, seq, nkv * hd)
    y, lse = causal_attention_ref(None, params, q, k, v)
    return Case(case_id, "attention_grad", dict(q=q, k=k, v=v, y=y, dy=f32(batch, seq, nh * hd), lse=lse),
                params=params, outputs=("dq", "dk", "dv"), bound=1e-10, gpu=False, plan="no native step")


CASES += [  # gradient ops with training kernels (kernels/backward.pxi)
    _attention_grad_case("attention_grad_gqa3_window", 2, 37, 6, 2, 12, 9),
    _attention_grad_case("attention_grad_mha", 1, 5, 2, 2, 8, 0),
    Case("causal_attention_gqa3_long", "causal_attention", dict(q=f32(1, 40, 6 * 4), k=f32(1, 40, 2 * 4), v=f32(1, 40, 2 * 4)),
         params=dict(n_heads=6, n_kv_heads=2, head_dim=4), outputs=("y", "lse"), bound=1e-10, gpu=False,
         plan="no native step"),
    Case("cross_entropy", "cross_entropy", dict(logits=f32(2, 3, 101, lo=-6, hi=6), labels=np.array([[4, -100, 100], [0, 7, -100]])),
         outputs=("loss", "lse"), bound=1e-10, gpu=False, plan="no native step"),
    Case("cross_entropy_grad", "cross_entropy_grad",
         dict(logits=f32(5, 37, lo=-6, hi=6), labels=np.array([3, -1, 36, 0, 3]), lse=f32(5, lo=5, hi=7),
              dloss=np.array(0.5, np.float32)),
         params=dict(ignore_index=-1), outputs=("dlogits",), bound=1e-10, gpu=False, plan="int64"),
    Case("rms_norm_grad", "rms_norm_grad", dict(x=f32(2, 3, 37), dy=f32(2, 3, 37)), dict(weight=f32(37)), dict(eps=1e-6),
         outputs=("dx", "dweight"), bound=1e-10, gpu=False, plan="no native step"),
    Case("embedding_grad", "embedding_grad", dict(ids=np.array([[3, 0, 3], [8, 3, 1]], np.int64), dy=f32(2, 3, 70)),
         dict(table=f32(9, 70)), outputs=("dtable",), bound=1e-10, gpu=False, plan="int64"),
    *[Case(f"gelu_grad_{approx}", "gelu_grad", dict(x=f32(3, 37, lo=-9, hi=9), dy=f32(3, 37)),
           params=dict(approximate=approx), outputs=("dx",), bound=1e-10, gpu=False) for approx in ("none", "tanh")],
    Case("silu_grad", "silu_grad", dict(x=f32(3, 37, lo=-9, hi=9), dy=f32(3, 37)), outputs=("dx",), bound=1e-10,
         gpu=False),
    Case("swiglu_grad", "swiglu_grad", dict(x=f32(2, 3, 2 * 37, lo=-9, hi=9), dy=f32(2, 3, 37)), outputs=("dx",),
         bound=1e-10, gpu=False),
    Case("layer_norm_grad", "layer_norm_grad", dict(x=f32(2, 3, 37, lo=0, hi=4), dy=f32(2, 3, 37)), dict(weight=f32(37)),
         dict(eps=1e-5), outputs=("dx", "dweight", "dbias"), bound=1e-10, gpu=False, plan="no native step"),
    Case("sum_to_bias", "sum_to", dict(x=f32(2, 5, 70)), params=dict(lead=2, axes=[]), bound=1e-10, gpu=False),
]

def build_graph(case: Case) -> tuple[Graph, dict]:
    """The case's graph (validated: specs inferred) and its weights: node "n" reading the graph inputs
    (its "x" through node "p", the producer, when the case has one) and the weights, every output a
    graph output."""
    inputs = [TensorSpec(n, a.shape, str(a.dtype)) for n, a in case.inputs.items()]
    weights = {n: TensorSpec(n, a.shape, a.qtype if isinstance(a, QuantTensor) else str(a.dtype))
               for n, a in case.weights.items()}
    outs = {p: f"out.{p}" for p in case.outputs}
    wiring = {**{n: n for n in case.inputs}, **{n: n for n in case.weights}}
    nodes = []
    if case.producer is not None:
        nodes.append(Node("p", case.producer, {"x": "x"}, {"y": "x." + case.producer}))
        wiring["x"] = "x." + case.producer
    nodes.append(Node("n", case.op, wiring, outs, case.params))
    graph = Graph(inputs, weights, nodes, list(outs.values()))
    validate(graph)
    return graph, dict(case.weights)


def run_context(case: Case) -> RunContext:
    if case.cross is not None:
        layers, source = case.cross
        r = np.random.default_rng(2)
        shape = (case.params["n_heads"], source, case.params["head_dim"])  # (n_heads, source_len, head_dim)
        return SourceContext(cross=[tuple(r.uniform(-2, 2, shape).astype(np.float32) for _ in range(2))
                                    for _ in range(layers)], output_rows=case.rows)
    if case.kv is None:
        return RunContext(output_rows=case.rows)
    layers, start = case.kv
    p = case.params
    kv = KVCache(layers, p["n_kv_heads"], p["head_dim"], 256)
    r = np.random.default_rng(1)
    for layer in range(layers):
        kv.append(layer, 0, r.uniform(-2, 2, (p["n_kv_heads"], start, p["head_dim"])).astype(np.float32),
                  r.uniform(-2, 2, (p["n_kv_heads"], start, p["head_dim"])).astype(np.float32))
    return RunContext(kv=kv, pos=start, output_rows=case.rows)



CASES += [  # conv / pool gradient ops (training graphs): float32 im2col BLAS and the depthwise kernels vs float64
    Case("conv2d_grad_input_s2", "conv2d_grad_input", dict(dy=f32(2, 4, 5, 6)), dict(weight=f32(6, 3, 3, 5)),
         dict(strides=[2, 2], pads=[1, 0, 1, 2], input_size=[7, 9]), outputs=("dx",), bound=1e-10, gpu=False),
    Case("conv2d_grad_input_depthwise", "conv2d_grad_input", dict(dy=f32(2, 4, 4, 5)), dict(weight=f32(5, 3, 3, 1)),
         dict(groups=5, strides=[2, 2], pads=[1, 1, 1, 1], input_size=[7, 7]), outputs=("dx",), bound=1e-10, gpu=False),
    Case("conv2d_grad_input_grouped", "conv2d_grad_input", dict(dy=f32(1, 5, 4, 6)), dict(weight=f32(6, 3, 2, 2)),
         dict(groups=2, dilations=[2, 1], pads=[2, 0, 1, 0], input_size=[6, 5]), outputs=("dx",), bound=1e-10,
         gpu=False),
    Case("conv2d_grad_weight_s2", "conv2d_grad_weight", dict(x=f32(2, 7, 9, 5), dy=f32(2, 4, 5, 6)),
         params=dict(strides=[2, 2], pads=[1, 0, 1, 2], kernel=[3, 3]), outputs=("dweight",), bound=1e-10, gpu=False),
    Case("conv2d_grad_weight_depthwise", "conv2d_grad_weight", dict(x=f32(2, 7, 7, 5), dy=f32(2, 4, 4, 5)),
         params=dict(groups=5, strides=[2, 2], pads=[1, 1, 1, 1], kernel=[3, 3]), outputs=("dweight",), bound=1e-10,
         gpu=False),
    Case("max_pool2d_grad", "max_pool2d_grad", dict(x=f32(2, 7, 9, 3), dy=f32(2, 4, 5, 3)),
         params=dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], input_size=[7, 9]), outputs=("dx",),
         bound=1e-10, gpu=False),
]

I16 = dict(plan="not a static float32 / int8 / int32 shape", **INT8)  # step plans hold no int16 tensor yet

CASES += [  # 16x8 (ops/int16x8.py): int16 activations, int8 weights, int64 biases; LiteRT's arithmetic, bit for bit
    Case("qconv2d_16x8", "qconv2d_16x8", dict(x=rng.integers(-32768, 32767, (1, 7, 6, 5), endpoint=True).astype(np.int16)),
         dict(weight=i8(6, 3, 3, 5), bias=rng.integers(-10**6, 10**6, 6).astype(np.int64), **channel_requant(6, 1e-3, 4e-3)),
         dict(strides=[2, 1], pads=[1, 1, 1, 0]), **I16),
    Case("qconv2d_16x8_depthwise", "qconv2d_16x8",
         dict(x=rng.integers(-32768, 32767, (1, 6, 6, 4), endpoint=True).astype(np.int16)),
         dict(weight=i8(4, 3, 3, 1), **channel_requant(4, 4e-3, 1e-2)), dict(groups=4, pads=[1, 1, 1, 1], act_min=0), **I16),
    Case("qlinear_16x8", "qlinear_16x8", dict(x=rng.integers(-32768, 32767, (3, 20), endpoint=True).astype(np.int16)),
         dict(weight=i8(7, 20), bias=rng.integers(-10**6, 10**6, 7).astype(np.int64),
              scale=rng.uniform(1e-3, 5e-3, 7).astype(np.float64)), **I16),
]
