"""The op case table: one-node graphs (graph inputs, weights, params, NMSE bound) run against the ops'
numpy references (``Executor(graph, weights, reference=True)``), as ggml's test-backend-ops does.

tests/test_gpu_ops.py runs every case on every GPU backend (``gpu``: where the GPU executor places
the node); tests/test_op_table.py runs every case on every CPU ISA tier through the per-op executor
and a step plan, and fails when an op the engine runs natively, on the CPU or a GPU, has no case.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from volvox.ops.activation import FUSED_ACTIVATIONS
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ops.context import RunContext
from volvox.runtime.kv_cache import KVCache
from volvox.ops import validate

rng = np.random.default_rng(0)


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


@dataclass
class Case:
    """One node: graph inputs (fed at run time), weights, params; ``gpu``: expected placement."""

    id: str
    op: str
    inputs: dict
    weights: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    outputs: tuple = ("y",)
    bound: float = 1e-9
    gpu: bool = True
    kv: tuple | None = None   # attention: (layers, start) -> a KV cache pre-filled with start random rows
    rows: str = "all"


def _attn(seq, nh, nkv, hd, **params):
    return dict(inputs=dict(q=f32(seq, nh * hd), k=f32(seq, nkv * hd), v=f32(seq, nkv * hd)),
                params=dict(n_heads=nh, n_kv_heads=nkv, head_dim=hd, **params))


CASES = [
    Case("linear_bias", "linear", dict(x=f32(5, 40)), dict(weight=f32(24, 40), bias=f32(24))),
    Case("linear_3d", "linear", dict(x=f32(2, 17, 33)), dict(weight=f32(19, 33))),
    Case("linear_f16", "linear", dict(x=f32(4, 32)), dict(weight=f32(20, 32).astype(np.float16))),
    Case("linear_split", "linear_split", dict(x=f32(6, 24)), dict(weight=f32(40, 24)), dict(sizes=[8, 32]),
         outputs=("y0", "y1")),
    Case("embedding", "embedding", dict(ids=np.array([3, 0, 7, 7, 1], np.int32)), dict(table=f32(9, 20))),
    Case("rms_norm", "rms_norm", dict(x=f32(7, 150)), dict(weight=f32(150)), dict(eps=1e-5)),
    Case("layer_norm", "layer_norm", dict(x=f32(3, 2, 70)), dict(weight=f32(70), bias=f32(70)), dict(eps=1e-6)),
    Case("layer_norm_nobias", "layer_norm", dict(x=f32(4, 65)), dict(weight=f32(65))),
    Case("softmax", "softmax", dict(x=f32(6, 130, lo=-8, hi=8)), params=dict(beta=0.7)),
    Case("softmax_axis0", "softmax", dict(x=f32(6, 13)), params=dict(axis=0), gpu=False),
    Case("add_bcast", "add", dict(a=f32(3, 4, 5), b=f32(4, 1))),
    Case("mul_bcast", "mul", dict(a=f32(2, 1, 6), b=f32(5, 1))),
    Case("sub", "sub", dict(a=f32(2, 3, 4, 5), b=f32(2, 3, 4, 5))),
    Case("div", "div", dict(a=f32(30), b=f32(30, lo=0.5, hi=2.0))),
    Case("pow_square", "pow", dict(a=f32(4, 6), b=np.array([2.0], np.float32))),
    Case("pow_negative_base", "pow", dict(a=f32(40, lo=-3, hi=-0.2), b=np.array([3.0, -1.0, 4.0, 1.0] * 10, np.float32))),
    Case("pow_fractional", "pow", dict(a=f32(40, lo=0.1, hi=3), b=np.array([0.5, -1.5, 2.5, 0.0] * 10, np.float32))),
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
         params=dict(head_dim=16, theta=10000.0, style="half"), bound=1e-8),
    Case("rope_interleaved_partial", "rope", dict(x=f32(5, 2 * 32), positions=np.array([0, 3, 9, 100, 7], np.int32)),
         params=dict(head_dim=32, rope_dim=16, theta=500000.0, style="interleaved", scale=2.0), bound=1e-8),
    Case("rope_llama3", "rope", dict(x=f32(4, 2 * 64), positions=np.arange(4, dtype=np.int32) * 50),
         params=dict(head_dim=64, style="half", theta=500000.0,
                     llama3=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_context=64)),
         bound=1e-8),
    Case("rope_int64", "rope", dict(x=f32(3, 16), positions=np.arange(3, dtype=np.int64)),
         params=dict(head_dim=16), gpu=False),
    Case("attention_nocache", "attention", **_attn(9, 4, 2, 16)),
    Case("attention_noncausal", "attention", **_attn(5, 2, 2, 8, causal=False)),
    Case("attention_kv_gqa", "attention", **_attn(7, 6, 2, 32, layer=1), kv=(2, 70)),
    Case("attention_kv_window", "attention", **_attn(5, 2, 1, 16, window=4), kv=(1, 9)),
    Case("attention_hd128", "attention", **_attn(3, 2, 1, 128), kv=(1, 130)),
    Case("output_rows_last", "output_rows", dict(x=f32(5, 12)), rows="last", gpu=False),  # input on the host: CPU
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
    Case("pad_nhwc", "pad", dict(x=f32(1, 3, 4, 2)), params=dict(pads=[[0, 0], [1, 2], [0, 1], [0, 0]], value=-1.5)),
    Case("conv_dense", "conv2d", dict(x=f32(1, 9, 8, 3)), dict(weight=f32(5, 3, 3, 3), bias=f32(5)),
         dict(strides=[2, 2], pads=[1, 1, 1, 1], activation="relu")),
    Case("conv_depthwise", "conv2d", dict(x=f32(2, 7, 7, 4)), dict(weight=f32(4, 3, 3, 1)),
         dict(groups=4, pads=[0, 0, 2, 2], dilations=[2, 1], activation="relu6")),
    Case("conv_pointwise", "conv2d", dict(x=f32(1, 5, 6, 8)), dict(weight=f32(6, 1, 1, 8), bias=f32(6))),
    Case("conv_groups", "conv2d", dict(x=f32(1, 6, 6, 4)), dict(weight=f32(6, 3, 3, 2)),
         dict(groups=2, strides=[1, 2], pads=[1, 0, 1, 2])),
    Case("max_pool", "max_pool2d", dict(x=f32(1, 7, 7, 3)), params=dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    Case("avg_pool", "avg_pool2d", dict(x=f32(2, 6, 5, 3)), params=dict(kernel=[3, 2], strides=[1, 1], pads=[1, 0, 1, 1])),
    Case("avg_pool_incl_pad", "avg_pool2d", dict(x=f32(1, 4, 4, 2)),
         params=dict(kernel=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=True)),
    Case("global_avg_pool", "global_avg_pool", dict(x=f32(2, 5, 3, 7))),
    # fused ops (volvox/compile/): matmul with the activation in its write, concat's copies then the
    # activation in place, add_n as a first add then in-place adds; every FUSED_ACTIVATIONS entry
    *[Case(f"linear_act_{act}", "linear_act", dict(x=f32(2, 5, 24)), dict(weight=f32(18, 24), bias=f32(18)),
           dict(activation=act)) for act in FUSED_ACTIVATIONS],
    Case("linear_act_nobias", "linear_act", dict(x=f32(7, 33)), dict(weight=f32(20, 33)), dict(activation="gelu_tanh")),
    Case("linear_act_f16", "linear_act", dict(x=f32(4, 32)), dict(weight=f32(20, 32).astype(np.float16)),
         dict(activation="silu")),
    *[Case(f"concat_act_{act}", "concat_act", dict(x0=f32(2, 3, 4, lo=-8, hi=8), x1=f32(2, 5, 4, lo=-8, hi=8)),
           params=dict(axis=1, activation=act)) for act in FUSED_ACTIVATIONS],
    Case("concat_act_last3", "concat_act", dict(x0=f32(3, 4), x1=f32(3, 2), x2=f32(3, 5)),
         params=dict(axis=-1, activation="sigmoid")),
    Case("add_n3", "add_n", dict(x0=f32(4, 9), x1=f32(4, 9), x2=f32(4, 9))),
    Case("add_n_bcast", "add_n", dict(x0=f32(6), x1=f32(1, 6), x2=f32(3, 6), x3=f32(2, 1, 1), x4=f32(2, 3, 6))),
    Case("add_n_int", "add_n", dict(x0=np.arange(6, dtype=np.int32), x1=np.ones(6, np.int32), x2=np.ones(6, np.int32)),
         gpu=False),
    *[Case(f"add_n_{act}", "add_n", dict(x0=f32(3, 8, lo=-8, hi=8), x1=f32(3, 8, lo=-8, hi=8), x2=f32(1, 8)),
           params=dict(activation=act)) for act in ("relu", "relu6", "sigmoid")],
]


def build_graph(case: Case) -> tuple[Graph, dict]:
    inputs = [TensorSpec(n, a.shape, str(a.dtype)) for n, a in case.inputs.items()]
    weights = {n: TensorSpec(n, a.shape, str(a.dtype)) for n, a in case.weights.items()}
    outs = {p: f"out.{p}" for p in case.outputs}
    node = Node("n", case.op, {**{n: n for n in case.inputs}, **{n: n for n in case.weights}}, outs, case.params)
    graph = Graph(inputs, weights, [node], list(outs.values()))
    validate(graph)
    return graph, dict(case.weights)


def run_context(case: Case) -> RunContext:
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


