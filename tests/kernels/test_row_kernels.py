"""LayerNorm and GELU kernels (volvox/_kernels/engine/small_ops.pxi) against torch in float64."""

import numpy as np
import pytest

from volvox import cpu
from volvox.errors import KernelError, ShapeError

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("rows, d", [(1, 1), (3, 17), (2, 63), (5, 768), (1, 1000)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm_matches_torch(rows, d, with_bias):
    rng = np.random.default_rng(d)
    x = (rng.standard_normal((rows, d)) * 4 + 3).astype(np.float32)
    w, b = rng.standard_normal(d).astype(np.float32), rng.standard_normal(d).astype(np.float32)
    want = torch.nn.functional.layer_norm(torch.tensor(x, dtype=torch.float64), (d,), torch.tensor(w, dtype=torch.float64),
                                          torch.tensor(b, dtype=torch.float64) if with_bias else None, 1e-5).numpy()
    got = cpu.layer_norm(x, w, b if with_bias else None, 1e-5)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * max(1.0, np.abs(want).max()))
    np.testing.assert_array_equal(cpu.layer_norm(x[0], w, b if with_bias else None, 1e-5), got[0])


def test_layer_norm_rejects_bad_operands():
    x = np.ones((2, 8), np.float32)
    with pytest.raises(ShapeError, match="weight"):
        cpu.layer_norm(x, np.ones(7, np.float32), None, 1e-5)
    with pytest.raises(ShapeError, match="bias"):
        cpu.layer_norm(x, np.ones(8, np.float32), np.ones(8, np.float64), 1e-5)
    with pytest.raises(KernelError, match="eps"):
        cpu.layer_norm(x, np.ones(8, np.float32), None, -1.0)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch(approximate):
    x = np.concatenate([np.linspace(-12, 12, 20001), [0.0, -0.0, 1e-30, -1e-30]]).astype(np.float32)
    want = torch.nn.functional.gelu(torch.tensor(x, dtype=torch.float64), approximate=approximate).numpy()
    got = cpu.gelu(x, approximate)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    strided = x.reshape(5, -1)[:, ::2]  # not contiguous: copied at the boundary
    np.testing.assert_array_equal(cpu.gelu(strided, approximate), got.reshape(5, -1)[:, ::2])
    y = x.copy()
    assert cpu.gelu(y, approximate, out=y) is y  # in place
    np.testing.assert_array_equal(y, got)


def test_gelu_rejects_bad_operands():
    with pytest.raises(KernelError, match="float32"):
        cpu.gelu(np.ones(4, np.float64))
    with pytest.raises(KernelError, match="approximate"):
        cpu.gelu(np.ones(4, np.float32), "sigmoid")
    with pytest.raises(ShapeError):
        cpu.gelu(np.ones(4, np.float32), out=np.ones(5, np.float32))
