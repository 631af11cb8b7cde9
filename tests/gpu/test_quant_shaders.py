"""The packed-weight shaders (matmul_q, gemv_q, embedding_q) on every available backend.

Each case is a one-node graph run by the GpuExecutor with its weight uploaded packed in its stored
type (f16 halves, GGUF blocks; volvox/ops/gpu_weights.py), against an independent reference: the
weight dequantized by the ``gguf`` package (llama.cpp's Python reader), multiplied in float64 by
numpy. Odd M (1, 3, 8: gemv_q; 13: matmul_q's tiles) and odd N, K a whole number of blocks but not a
power of two, bias and each fused activation, a weight split over several chunks by a faked small
binding limit, and the embedding gather. Then SmolLM2-135M's prefill logits, its Q4_1 weights on each
backend and requantized to Q8_0 on one, against the ops' numpy references and the CPU kernels.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from gpu_helpers import BACKENDS, device_or_skip, nmse
import volvox
from volvox.errors import ShapeError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ir.quant_blocks import QuantTensor, StackedQuantTensor, dequantize_ref, quantize_ref
from volvox.ops import validate
from volvox.ops.activation import FUSED_ACTIVATIONS
from volvox.ops.context import RunContext
from volvox.ops.gpu_weights import LAYOUTS
from volvox.runtime.executor import Executor
from volvox.runtime.gpu_executor import GpuExecutor
from volvox.tasks.generate import Session

gguf_quants = pytest.importorskip("gguf.quants")
import gguf  # noqa: E402  (after the skip)

WEIGHT_TYPES = ("float16", "q8_0", "q4_0", "q4_1", "q4_k", "q6_k")
K_OF = {"float16": 40, "q8_0": 96, "q4_0": 96, "q4_1": 160, "q4_k": 768, "q6_k": 768}  # not powers of two
ROOT = Path(__file__).resolve().parents[2]
BOUND = 1e-10  # float32 sums of exactly dequantized weights against the float64 product


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def make_weight(dtype: str, rows: int, cols: int, seed: int = 0):
    """A (rows, cols) weight stored as ``dtype``: float16, or volvox's quantizer on random values."""
    values = rng(seed).standard_normal((rows, cols)).astype(np.float32)
    return values.astype(np.float16) if dtype == "float16" else quantize_ref(values, dtype)


def dense(w) -> np.ndarray:
    """float64 (rows, cols) of a weight, dequantized by the gguf package (not volvox's code)."""
    if isinstance(w, QuantTensor):
        qtype = gguf.GGMLQuantizationType[w.qtype.upper()]
        return gguf_quants.dequantize(np.asarray(w.data), qtype).reshape(w.shape).astype(np.float64)
    return np.asarray(w, np.float64)


def stored_nbytes(w) -> int:
    """Bytes of a weight as stored (GGUF blocks, IEEE halves)."""
    return w.data.nbytes if isinstance(w, QuantTensor) else w.nbytes


def act_ref(name: str, v: np.ndarray) -> np.ndarray:
    """The fused activations in float64, written out from their definitions."""
    from math import erf
    return {
        "none": lambda: v,
        "relu": lambda: np.maximum(v, 0),
        "relu6": lambda: np.clip(v, 0, 6),
        "sigmoid": lambda: 1 / (1 + np.exp(-v)),
        "silu": lambda: v / (1 + np.exp(-v)),
        "gelu": lambda: 0.5 * v * (1 + np.vectorize(erf)(v / np.sqrt(2))),
        "gelu_tanh": lambda: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3))),
        "hard_swish": lambda: v * np.clip(v + 3, 0, 6) / 6,
    }[name]()


def one_node(op: str, inputs: dict, weights: dict, params: dict | None = None, outputs=("y",)) -> Graph:
    """A validated graph of node "n" reading ``inputs`` and ``weights``."""
    specs = [TensorSpec(n, a.shape, str(a.dtype)) for n, a in inputs.items()]
    wspecs = {n: TensorSpec(n, w.shape, w.qtype if isinstance(w, QuantTensor) else str(w.dtype)) for n, w in weights.items()}
    node = Node("n", op, {**{n: n for n in inputs}, **{n: n for n in weights}}, {p: p for p in outputs}, params or {})
    graph = Graph(specs, wspecs, [node], list(outputs))
    validate(graph)
    return graph


def run_gpu(device, graph: Graph, weights: dict, feeds: dict) -> tuple[GpuExecutor, dict]:
    ex = GpuExecutor(graph, weights, device)
    assert ex.placement["n"] == ("gpu", ""), ex.placement["n"]
    return ex, ex.run(RunContext(), feeds)


def kernels_of(ex: GpuExecutor) -> set[str]:
    """The kernels the last forward recorded (from its cached recording's key)."""
    return {k for key in ex.commands._cache for k, _, _ in key[0]}


# -------------------------------------------------------------------------------- linear
@BACKENDS
@pytest.mark.parametrize("dtype", WEIGHT_TYPES)
@pytest.mark.parametrize("m", [1, 3, 8, 13])
def test_linear_matches_dequantized_product(backend, dtype, m):
    device = device_or_skip(backend)
    k, n = K_OF[dtype], 13 if dtype in ("float16", "q8_0", "q4_0", "q4_1") else 7
    w = make_weight(dtype, n, k, seed=m)
    bias = rng(1).standard_normal(n).astype(np.float32)
    x = rng(2).standard_normal((m, k)).astype(np.float32)
    ex, got = run_gpu(device, one_node("linear", {"x": x}, {"weight": w, "bias": bias}), {"weight": w, "bias": bias},
                      {"x": x})
    assert kernels_of(ex) == {"gemv_q" if m <= 8 else "matmul_q"}
    (_, _, chunks), = ex.weight_chunks.values()  # stored bytes, not widened (at most a word of padding)
    assert 0 <= sum(c.nbytes for c in chunks) - stored_nbytes(w) < 4
    want = x.astype(np.float64) @ dense(w).T + bias
    assert got["y"].shape == (m, n)
    assert nmse(got["y"], want) < BOUND, f"{dtype} M={m} on {backend}: NMSE {nmse(got['y'], want):.3g}"


@BACKENDS
@pytest.mark.parametrize("activation", sorted(set(FUSED_ACTIVATIONS) & {"relu", "relu6", "sigmoid", "silu", "gelu",
                                                                      "gelu_tanh", "hard_swish"}))
@pytest.mark.parametrize("m", [3, 13])
def test_linear_act_fuses_each_activation(backend, activation, m):
    device = device_or_skip(backend)
    w = make_weight("q4_1", 11, 64, seed=3)
    bias = rng(4).standard_normal(11).astype(np.float32)
    x = rng(5).standard_normal((m, 64)).astype(np.float32)
    graph = one_node("linear_act", {"x": x}, {"weight": w, "bias": bias}, {"activation": activation})
    _, got = run_gpu(device, graph, {"weight": w, "bias": bias}, {"x": x})
    want = act_ref(activation, x.astype(np.float64) @ dense(w).T + bias)
    assert nmse(got["y"], want) < 1e-9, f"{activation} M={m} on {backend}: NMSE {nmse(got['y'], want):.3g}"


@BACKENDS
@pytest.mark.parametrize("dtype", ["q8_0", "q6_k"])
@pytest.mark.parametrize("m", [1, 13])
def test_linear_split_reads_row_blocks(backend, dtype, m):
    device = device_or_skip(backend)
    k = K_OF[dtype]
    w = make_weight(dtype, 15, k, seed=6)
    x = rng(7).standard_normal((m, k)).astype(np.float32)
    graph = one_node("linear_split", {"x": x}, {"weight": w}, {"sizes": [4, 3, 8]}, outputs=("y0", "y1", "y2"))
    _, got = run_gpu(device, graph, {"weight": w}, {"x": x})
    full = x.astype(np.float64) @ dense(w).T
    for name, (a, b) in zip(("y0", "y1", "y2"), ((0, 4), (4, 7), (7, 15))):
        assert nmse(got[name], full[:, a:b]) < BOUND, name


@BACKENDS
def test_weights_upload_once_at_load(backend, monkeypatch):
    """Forwards write only their inputs and params to the device, never the weights again."""
    device = device_or_skip(backend)
    w = make_weight("q4_k", 24, 512, seed=18)
    x = rng(19).standard_normal((2, 512)).astype(np.float32)
    ex = GpuExecutor(one_node("linear", {"x": x}, {"weight": w}), {"weight": w}, device)
    written = []
    monkeypatch.setattr(device, "upload", lambda a, buf=None, up=device.upload: written.append(a.nbytes) or up(a, buf))
    for _ in range(2):
        ex.run(RunContext(), {"x": x})
    assert written == [x.nbytes, x.nbytes]


# ------------------------------------------------------------------- chunks past the binding limit
@BACKENDS
@pytest.mark.parametrize("dtype, k, n, limit", [("float16", 40, 100, 4096), ("q8_0", 96, 100, 4096),
                                                ("q4_k", 256, 300, 16384)])
@pytest.mark.parametrize("m", [3, 9])
def test_weight_larger_than_a_binding_is_split_into_chunks(backend, dtype, k, n, limit, m, monkeypatch):
    """A faked small binding limit: the weight goes up in several chunks, one dispatch each, still equal."""
    device = device_or_skip(backend)
    monkeypatch.setattr(device, "max_binding", limit)
    w = make_weight(dtype, n, k, seed=8)
    bias = rng(9).standard_normal(n).astype(np.float32)
    x = rng(10).standard_normal((m, k)).astype(np.float32)
    ex, got = run_gpu(device, one_node("linear", {"x": x}, {"weight": w, "bias": bias}), {"weight": w, "bias": bias},
                      {"x": x})
    (_, _, chunks), = ex.weight_chunks.values()
    assert len(chunks) >= 2 and all(c.nbytes <= limit for c in chunks)
    want = x.astype(np.float64) @ dense(w).T + bias
    assert nmse(got["y"], want) < BOUND


@BACKENDS
@pytest.mark.parametrize("k", [64, 37])
@pytest.mark.parametrize("m", [1, 5, 8, 9])
def test_float32_weights_decode_through_the_gemv(backend, k, m):
    """A float32 weight that fits one binding stays one float buffer; up to GEMV_MAX_ROWS rows it is read
    by gemv_q as f32 rows (4 values a step, or one when K is not a multiple of 4), beyond by matmul's
    tiles: linear with bias, linear_act, and linear_split's row blocks."""
    device = device_or_skip(backend)
    n = 19
    w = rng(20).standard_normal((n, k)).astype(np.float32)
    bias = rng(21).standard_normal(n).astype(np.float32)
    x = rng(22).standard_normal((m, k)).astype(np.float32)
    kernel = {"gemv_q" if m <= 8 else "matmul"}
    ex, got = run_gpu(device, one_node("linear", {"x": x}, {"weight": w, "bias": bias}), {"weight": w, "bias": bias},
                      {"x": x})
    assert kernels_of(ex) == kernel and not ex.weight_chunks
    full = x.astype(np.float64) @ w.astype(np.float64).T  # (m, n)
    assert nmse(got["y"], full + bias) < BOUND
    graph = one_node("linear_act", {"x": x}, {"weight": w, "bias": bias}, {"activation": "silu"})
    ex, got = run_gpu(device, graph, {"weight": w, "bias": bias}, {"x": x})
    assert kernels_of(ex) == kernel
    assert nmse(got["y"], act_ref("silu", full + bias)) < 1e-9
    graph = one_node("linear_split", {"x": x}, {"weight": w}, {"sizes": [5, 6, 8]}, outputs=("y0", "y1", "y2"))
    ex, got = run_gpu(device, graph, {"weight": w}, {"x": x})
    assert kernels_of(ex) == kernel
    for name, (a, b) in zip(("y0", "y1", "y2"), ((0, 5), (5, 11), (11, 19))):
        assert nmse(got[name], full[:, a:b]) < BOUND, name


@BACKENDS
@pytest.mark.parametrize("dtype, k", [("float32", 40), ("float32", 37), ("float16", 37)])
@pytest.mark.parametrize("m", [1, 13])
def test_float_rows_of_any_width(backend, dtype, k, m, monkeypatch):
    """float16 rows of odd width (a row starts mid-word: the one-value path), and float32 weights past the
    binding limit (packed as f32 chunks; below it one float buffer, see the test above)."""
    device = device_or_skip(backend)
    monkeypatch.setattr(device, "max_binding", 4096)
    n = 61
    w = rng(16).standard_normal((n, k)).astype(dtype)
    x = rng(17).standard_normal((m, k)).astype(np.float32)
    ex, got = run_gpu(device, one_node("linear", {"x": x}, {"weight": w}), {"weight": w}, {"x": x})
    (_, _, chunks), = ex.weight_chunks.values()
    assert len(chunks) >= 2
    assert nmse(got["y"], x.astype(np.float64) @ dense(w).T) < BOUND
    ids = np.array([60, 0, 31], np.int32)
    ex, got = run_gpu(device, one_node("embedding", {"ids": ids}, {"table": w}), {"table": w}, {"ids": ids})
    np.testing.assert_array_equal(got["y"], w[ids].astype(np.float32))


@BACKENDS
def test_linear_split_across_chunk_borders(backend, monkeypatch):
    device = device_or_skip(backend)
    """A fused weight (a StackedQuantTensor, as the loader makes of Q / K / V) packed from its parts, whose
    middle output straddles two chunk borders."""
    monkeypatch.setattr(device, "max_binding", 1024)  # 10 q8_0 rows of 96 a chunk (992 bytes): y1 spans 3 chunks
    w = StackedQuantTensor([make_weight("q8_0", rows, 96, seed=11 + rows) for rows in (7, 16, 7)])
    x = rng(12).standard_normal((2, 96)).astype(np.float32)
    graph = one_node("linear_split", {"x": x}, {"weight": w}, {"sizes": [7, 16, 7]}, outputs=("y0", "y1", "y2"))
    ex, got = run_gpu(device, graph, {"weight": w}, {"x": x})
    (dtype, per_chunk, chunks), = ex.weight_chunks.values()
    assert (per_chunk, len(chunks)) == (10, 3)
    assert w._data is None  # no stacked copy of the rows was made on the host
    full = x.astype(np.float64) @ np.concatenate([dense(p) for p in w.parts]).T
    for name, (a, b) in zip(("y0", "y1", "y2"), ((0, 7), (7, 23), (23, 30))):
        assert nmse(got[name], full[:, a:b]) < BOUND, name


# ------------------------------------------------------------------------------ embedding
@BACKENDS
@pytest.mark.parametrize("dtype", WEIGHT_TYPES)
@pytest.mark.parametrize("limit", [None, 4096], ids=["one_chunk", "chunks"])
def test_embedding_gathers_packed_rows(backend, dtype, limit, monkeypatch):
    device = device_or_skip(backend)
    if limit:
        monkeypatch.setattr(device, "max_binding", limit)
    k = K_OF[dtype] if dtype not in ("q4_k", "q6_k") else 256
    table = make_weight(dtype, 120, k, seed=13)
    ids = np.array([[119, 0], [61, 61]], np.int32)
    ex, got = run_gpu(device, one_node("embedding", {"ids": ids}, {"table": table}), {"table": table}, {"ids": ids})
    if limit:
        assert len(next(iter(ex.weight_chunks.values()))[2]) > 1
    np.testing.assert_array_equal(got["y"], dense(table)[ids].astype(np.float32))


# ------------------------------------------------------------------------------- refusals
def test_kquant_rows_need_whole_super_blocks():
    """K-quants store 256-value super-blocks: a K that is not a multiple of 256 cannot exist as one."""
    with pytest.raises(ShapeError, match="multiple of 256"):
        QuantTensor(np.zeros((2, 144), np.uint8), "q4_k", (2, 300))


@BACKENDS
def test_weight_types_without_a_shader_stay_on_the_cpu(backend):
    device = device_or_skip(backend)
    w = quantize_ref(rng(14).standard_normal((8, 64)).astype(np.float32), "q5_0")
    x = rng(15).standard_normal((2, 64)).astype(np.float32)
    ex = GpuExecutor(one_node("linear", {"x": x}, {"weight": w}), {"weight": w}, device)
    assert ex.placement["n"] == ("cpu", "weight is q5_0 (GPU weight types: " + ", ".join(LAYOUTS) + ")")


def test_shaders_share_one_weight_reader():
    """matmul_q, gemv_q and embedding_q include the one weight_at file, whose WT_* codes are gpu_weights'."""
    block = (ROOT / "shaders" / "include" / "weight_at.wgsl").read_text()
    for name in ("matmul_q", "gemv_q", "embedding_q"):
        assert '// #include "include/weight_at.wgsl"' in (ROOT / "shaders" / f"{name}.wgsl").read_text(), name
    codes = {m[0]: int(m[1]) for m in re.findall(r"const WT_(\w+): u32 = (\d+)u;", block)}
    names = {"F32": "float32", "F16": "float16"}
    assert {names.get(c, c.lower()): v for c, v in codes.items()} == {d: lay.code for d, lay in LAYOUTS.items()}


# ------------------------------------------------------------------------------- SmolLM2
PROMPT = np.array([1, 504, 2685, 4132, 314, 253, 1345, 28, 216], np.int32)  # (9,): matmul_q's tiles


def with_logits(cpu, graph: Graph, weights: dict) -> tuple:
    """(CPU model, weights, the prompt's logits from the CPU kernels, from the ops' numpy references:
    float64 products of the dequantized weights)."""
    model = type(cpu)(graph, weights, cpu.metadata, cpu.source, cpu.config, cpu.tokenizer, optimize=False)
    ref = type(cpu)(graph, weights, cpu.metadata, cpu.source, cpu.config, cpu.tokenizer, optimize=False)
    ref.executor = Executor(graph, weights, reference=True)
    return model, weights, Session(model).forward(PROMPT, all_logits=True), Session(ref).forward(PROMPT, all_logits=True)


@pytest.fixture(scope="module")
def smollm2_cpu(smollm2_gguf_path):
    return volvox.load(smollm2_gguf_path)


@pytest.fixture(scope="module")
def smollm2(smollm2_cpu):
    """SmolLM2-135M as stored (Q4_1 matrices and table), with its logits."""
    cpu = smollm2_cpu
    return with_logits(cpu, cpu.graph, {name: w for (_, w), name in zip(cpu.executor.weight_slots, cpu.graph.weights)})


@pytest.fixture(scope="module")
def smollm2_q8_0(smollm2_cpu):
    """The same graph with every Q4_1 weight requantized to Q8_0 (ggml's quantizer), with its logits."""
    cpu = smollm2_cpu
    weights, specs = {}, {}
    for (_, w), name in zip(cpu.executor.weight_slots, cpu.graph.weights):
        if isinstance(w, QuantTensor):
            w = quantize_ref(dequantize_ref(w), "q8_0")
        weights[name] = w
        specs[name] = TensorSpec(name, cpu.graph.weights[name].shape, w.qtype if isinstance(w, QuantTensor) else str(w.dtype))
    graph = Graph(cpu.graph.inputs, specs, cpu.graph.nodes, cpu.graph.outputs)
    validate(graph)
    return with_logits(cpu, graph, weights)


def gpu_prefill_matches(model, backend: str):
    cpu, weights, want_cpu, want_ref = model
    device = device_or_skip(backend)
    gpu = type(cpu)(cpu.graph, weights, cpu.metadata, cpu.source, cpu.config, cpu.tokenizer, optimize=False,
                    device=device)
    gpu._closers.clear()  # the device is shared by the whole test session
    assert set(gpu.executor.node_backends().values()) == {backend}, gpu.executor.describe()
    assert {n.op for n in cpu.graph.nodes} >= {"embedding", "linear"}
    got = Session(gpu).forward(PROMPT, all_logits=True)
    assert gpu.executor.last_backend == backend
    assert nmse(got, want_ref) < 1e-9, f"NMSE against the references {nmse(got, want_ref):.3g}"
    assert nmse(got, want_cpu) < 3e-3, f"NMSE against the CPU {nmse(got, want_cpu):.3g}"


@pytest.mark.slow
@BACKENDS
def test_smollm2_q4_1_prefill_on_the_gpu_matches_cpu(smollm2, backend):
    """Every node of SmolLM2-135M Q4_1 on the GPU, its weights packed; the prefill's logits equal the
    numpy references' and the CPU kernels' within the CPU's 8-bit activation rounding (as ggml's)."""
    gpu_prefill_matches(smollm2, backend)


@pytest.mark.slow
def test_smollm2_q8_0_prefill_on_the_gpu_matches_cpu(smollm2_q8_0):
    """The same with Q8_0 weights, on one backend (the kernels' Q8_0 path is checked on every one above)."""
    gpu_prefill_matches(smollm2_q8_0, "vulkan")
