"""volvox.ir.quant_blocks's numpy references against the independent `gguf` package.

quantize_ref must be byte-identical to gguf.quants.quantize (both follow ggml's
reference C), and dequantize_ref equal to gguf.quants.dequantize, on random data and
on the real tensors of SmolLM2-135M-Instruct Q4_1.
"""

import os

import numpy as np
import pytest

from op_cases import random_kquant
from volvox.errors import ShapeError, UnsupportedError
from volvox.ir.quant_blocks import (QuantTensor, dequantize_ref, dequantize_rows_ref,
                          quantize_ref)

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as GT  # noqa: E402
from gguf.quants import dequantize as gguf_dequantize  # noqa: E402
from gguf.quants import quantize as gguf_quantize  # noqa: E402

GT_OF = {"q4_0": GT.Q4_0, "q4_1": GT.Q4_1, "q8_0": GT.Q8_0, "q4_k": GT.Q4_K, "q6_k": GT.Q6_K}


def random_activations(rng, rows, cols):
    """Gaussian data with awkward blocks: all-zero, constant, one spike, negative-only."""
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x[0, :32] = 0.0
    if rows > 1:
        x[1, :32] = 1.25
    if rows > 2:
        x[2, 32:64] = 0.0
        x[2, 40] = -7.5
    if rows > 3:
        x[3, :32] = -np.abs(x[3, :32])
    return x


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q4_1"])
@pytest.mark.parametrize("shape", [(1, 32), (5, 96), (17, 576)])
def test_quantize_ref_is_byte_identical_to_gguf(qtype, shape):
    rng = np.random.default_rng(hash((qtype, shape)) % 2**32)
    x = random_activations(rng, *shape) * np.float32(rng.uniform(0.01, 100.0))
    ours = quantize_ref(x, qtype)
    theirs = gguf_quantize(x, GT_OF[qtype])
    assert ours.shape == shape and ours.qtype == qtype
    np.testing.assert_array_equal(ours.data, theirs)


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q4_1"])
def test_dequantize_ref_equals_gguf_on_random_blocks(qtype):
    rng = np.random.default_rng(7)
    x = random_activations(rng, 9, 160)
    qt = quantize_ref(x, qtype)
    np.testing.assert_array_equal(dequantize_ref(qt), gguf_dequantize(qt.data, GT_OF[qtype]))
    # round trip error is what the format promises: <= half a step (q4: a step of d)
    step = {"q8_0": 1 / 127, "q4_0": 1 / 8, "q4_1": 1 / 15}[qtype]
    b = x.reshape(9, 5, 32)
    spread = (b.max(-1) - b.min(-1)) if qtype == "q4_1" else np.abs(b).max(-1)
    err = np.abs(dequantize_ref(qt) - x).reshape(9, 5, 32).max(-1)
    assert np.all(err <= spread * step * 1.01 + 1e-6)


@pytest.mark.parametrize("qtype", ["q4_k", "q6_k"])
def test_dequantize_ref_kquants_equal_gguf(qtype):
    rng = np.random.default_rng(11)
    qt = random_kquant(rng, qtype, 6, 768)
    ours = dequantize_ref(qt)
    theirs = gguf_dequantize(qt.data, GT_OF[qtype])
    assert ours.dtype == np.float32 and ours.shape == (6, 768)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q4_1", "q4_k", "q6_k"])
def test_dequantize_rows_ref_picks_rows(qtype):
    rng = np.random.default_rng(3)
    if qtype in ("q4_k", "q6_k"):
        qt = random_kquant(rng, qtype, 7, 256)
    else:
        qt = quantize_ref(random_activations(rng, 7, 64), qtype)
    rows = np.array([6, 0, 3, 3], dtype=np.int64)
    np.testing.assert_array_equal(dequantize_rows_ref(qt, rows), dequantize_ref(qt)[rows])
    assert dequantize_rows_ref(qt, np.array([], dtype=np.int32)).shape == (0, qt.shape[1])
    with pytest.raises(ShapeError):
        dequantize_rows_ref(qt, np.array([7]))


def test_quantize_ref_rejects_bad_input():
    with pytest.raises(ShapeError):
        quantize_ref(np.zeros((2, 48), np.float32), "q8_0")   # not a multiple of 32
    with pytest.raises(ShapeError):
        quantize_ref(np.zeros((2, 64), np.float64), "q8_0")   # not float32
    with pytest.raises(UnsupportedError):
        quantize_ref(np.zeros((2, 256), np.float32), "q8_k")


# ---------------------------------------------------------------- real SmolLM2 tensors
@pytest.fixture(scope="module")
def smollm2_reader(smollm2_gguf_path):
    if not os.path.exists(smollm2_gguf_path):
        pytest.skip(f"SmolLM2 GGUF not found at {smollm2_gguf_path}")
    return gguf.GGUFReader(smollm2_gguf_path)


def quant_tensor_from_reader(t) -> QuantTensor:
    """A GGUFReader tensor (ggml dims: cols first) as a QuantTensor (rows, cols)."""
    cols, rows = (int(v) for v in t.shape[:2])
    return QuantTensor(np.asarray(t.data), t.tensor_type.name.lower(), (rows, cols))


def test_real_smollm2_tensors_dequantize_like_gguf(smollm2_reader):
    names = {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight",
             "blk.0.ffn_down.weight", "blk.29.ffn_up.weight"}
    seen = 0
    for t in smollm2_reader.tensors:
        if t.name not in names:
            continue
        qt = quant_tensor_from_reader(t)
        ours = dequantize_ref(qt)
        theirs = gguf_dequantize(np.asarray(t.data), t.tensor_type)
        np.testing.assert_array_equal(ours, theirs.reshape(ours.shape), err_msg=t.name)
        rows = np.array([0, qt.shape[0] - 1, qt.shape[0] // 2])
        np.testing.assert_array_equal(dequantize_rows_ref(qt, rows), ours[rows], err_msg=t.name)
        seen += 1
    assert seen == len(names)


def test_requantizing_real_weights_matches_gguf(smollm2_reader):
    """quantize_ref on real (dequantized Q4_1) weights is byte-identical to gguf's."""
    t = next(t for t in smollm2_reader.tensors if t.name == "blk.3.ffn_gate.weight")
    w = dequantize_ref(quant_tensor_from_reader(t))[:256]
    for qtype in ("q8_0", "q4_0", "q4_1"):
        np.testing.assert_array_equal(quantize_ref(w, qtype).data, gguf_quantize(w, GT_OF[qtype]),
                                      err_msg=qtype)
    # re-quantizing Q4_1 values to Q4_1 reproduces the file's bytes up to fp16 rounding
    # of d and m: the values come back within one step
    again = dequantize_ref(quantize_ref(w, "q4_1"))
    assert np.abs(again - w).max() < 1e-2
