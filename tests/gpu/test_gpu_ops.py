"""Every GPU op against its numpy reference on every available backend (one case table, NMSE bounds).

Each case (the table in tests/support/op_cases.py) is a one-node graph run by the GpuExecutor (placement,
upload, kernel, download) and by the CPU executor with ``reference=True`` (the ops' numpy oracles). A case whose kernel the
backend cannot run is reported as "not supported" (skipped), as ggml's test-backend-ops does.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_helpers import BACKENDS, device_or_skip, nmse
from op_cases import CASES, build_graph, f32, run_context
from volvox._gpu.lowering import LOWERINGS
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ops.context import RunContext
from volvox.runtime.executor import Executor
from volvox.runtime.gpu_executor import GpuExecutor
from volvox.ops import validate


@BACKENDS
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_op_matches_reference(backend, case):
    device = device_or_skip(backend)
    graph, weights = build_graph(case)
    ex = GpuExecutor(graph, weights, device)
    where, reason = ex.placement["n"]
    if case.gpu and where != "gpu":
        if any(not device.supports(k) for k in LOWERINGS[case.op].kernels):
            pytest.skip(f"not supported on {backend}: {reason}")
        pytest.fail(f"{case.id} placed on the CPU: {reason}")
    assert where == ("gpu" if case.gpu else "cpu"), reason
    ref_ctx, gpu_ctx = run_context(case), run_context(case)
    want = Executor(graph, weights, reference=True).run(ref_ctx, case.inputs)
    got = ex.run(gpu_ctx, case.inputs)
    for name in want:
        assert got[name].shape == want[name].shape and got[name].dtype == want[name].dtype, name
        err = nmse(got[name], want[name])
        assert err <= case.bound, f"{case.id} {name} on {backend}: NMSE {err:.3g} > {case.bound:g}"
    if case.kv is not None:  # the GPU run appended this run's keys and values to the host cache too
        layer, end = case.params.get("layer", 0), case.kv[1] + case.inputs["q"].shape[0]
        for a, b in ((gpu_ctx.kv.keys, ref_ctx.kv.keys), (gpu_ctx.kv.values, ref_ctx.kv.values)):
            np.testing.assert_array_equal(a[layer][:, :end], b[layer][:, :end])


@BACKENDS
def test_reshape_aliases_its_input(backend):
    """relu -> reshape: the reshape runs on the GPU as an alias of relu's output buffer."""
    device = device_or_skip(backend)
    graph = Graph([TensorSpec("x", (4, 6), "float32")], {},
                  [Node("r", "relu", {"x": "x"}, {"y": "h"}), Node("s", "reshape", {"x": "h"}, {"y": "y"}, {"shape": [2, 12]})],
                  ["y"])
    validate(graph)
    ex = GpuExecutor(graph, {}, device)
    assert ex.node_backends() == {"r": backend, "s": backend}
    xin = f32(4, 6)
    np.testing.assert_array_equal(ex.run(RunContext(), {"x": xin})["y"], np.maximum(xin, 0).reshape(2, 12))
