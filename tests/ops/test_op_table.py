"""The op table against its references, op x backend, as ggml's test-backend-ops enumerates them.

- every op in the table (volvox/ops) has a reference (``ref``) and a shape rule (``infer``);
- every op a backend runs natively has a case in tests/support/op_cases.py on that backend: the CPU
  (an op with a ``cpu`` lowering or a ``fast`` path) and each GPU backend (an op with a ``gpu``
  lowering whose kernels the backend has: a case the GPU executor places on the GPU); a missing case
  fails naming the op and the backend;
- every case, on every CPU ISA tier, through the per-op executor (fast paths) and through a step
  plan (runtime/plan.Plan, at one thread and split for a team of two), against the reference
  executor by NMSE (int8 outputs bit-exact); the plan's outputs equal the per-op executor's bit for
  bit (runtime/plan.py's contract). A case the static plan does not lower says why (``Case.plan``)
  and is reported as "not supported" (skipped); a case whose op has a ``cpu`` lowering runs native
  steps in the plan, not a numpy island, unless it says why (``Case.island``).

tests/gpu/test_gpu_ops.py runs the same cases on the GPU backends.
"""

from __future__ import annotations

import contextlib
from functools import lru_cache

import numpy as np
import pytest

from gpu_helpers import device_or_none, nmse
from op_cases import CASES, Case, build_graph, run_context
from volvox import cpu
from volvox._gpu.devices import GPU_BACKENDS
from volvox._gpu.lowering import LOWERINGS
from volvox.ops import OPS
from volvox.runtime.executor import Executor
from volvox.runtime.gpu_executor import place_nodes
from volvox.runtime.plan import Plan, Unsupported

CPU_OPS = sorted(name for name, op in OPS.items() if op.cpu is not None or op.fast is not None)
GPU_OPS = sorted(LOWERINGS)
BY_ID = {case.id: case for case in CASES}


class AnyGpu:
    """A device that has every kernel: where the GPU executor places a node on any backend that can run it."""

    name = "any GPU backend"
    max_binding = 1 << 40

    def supports(self, kernel: str) -> bool:
        return True


def case_id(case: Case) -> str:
    return case.id


@lru_cache(maxsize=None)
def reference(case_id: str) -> tuple[dict, object]:
    """The reference executor's outputs and run context (its KV cache appended) for a case, run once."""
    case = BY_ID[case_id]
    graph, weights = build_graph(case)
    ctx = run_context(case)
    return Executor(graph, weights, reference=True).run(ctx, case.inputs), ctx


def check_outputs(case: Case, got: dict, want: dict, where: str) -> None:
    """Every output of ``got`` of ``want``'s shape and dtype, within the case's NMSE bound (integers: equal)."""
    assert got.keys() == want.keys(), where
    for name in want:
        g, w = got[name], want[name]
        assert g.shape == w.shape and g.dtype == w.dtype, \
            f"{case.id} {name} {where}: {g.dtype}{g.shape}, the reference's {w.dtype}{w.shape}"
        if w.dtype.kind in "iu":
            np.testing.assert_array_equal(g, w, err_msg=f"{case.id} {name} {where}: not bit-exact")
        else:
            err = nmse(g, w)
            assert err <= case.bound, f"{case.id} {name} {where}: NMSE {err:.3g} > {case.bound:g}"


@contextlib.contextmanager
def kernel_threads(n: int):
    before = cpu.get_num_threads()
    cpu.set_num_threads(n)
    try:
        yield
    finally:
        cpu.set_num_threads(before)


def static_plan(case: Case, graph, weights) -> Plan:
    """The case's step plan; pytest.skip ("not supported") where the case says the plan does not lower it."""
    try:
        plan = Plan(graph, weights)
    except Unsupported as e:
        if case.plan is None:
            pytest.fail(f"{case.id}: a static step plan does not lower it: {e}")
        assert case.plan in str(e), f"{case.id}: the plan does not lower it for another reason than {case.plan!r}: {e}"
        pytest.skip(f"not supported by a static step plan: {e}")
    if case.plan is not None:
        pytest.fail(f"{case.id} says a static plan does not lower it ({case.plan!r}), but it does")
    return plan


# ------------------------------------------------------------------------------------ the table itself
def test_every_op_has_a_reference_and_a_shape_rule():
    missing = [f"{name} ({what})" for name, op in sorted(OPS.items())
               for what, fn in (("ref", op.ref), ("infer", op.infer)) if not callable(fn)]
    assert not missing, f"ops without a callable reference or shape rule: {', '.join(missing)}"


def test_cases_are_well_formed():
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    for case in CASES:
        assert case.op in OPS, f"{case.id}: unknown op {case.op!r}"
        assert case.island is None or OPS[case.op].cpu is not None, \
            f"{case.id}: an island reason for an op without a cpu lowering"
        assert case.plan is None or case.island is None, f"{case.id}: both not lowered and an island"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_gpu_placement_is_the_cases(case):
    """Case.gpu is where the GPU executor places the node on a backend that has its kernels."""
    graph, _ = build_graph(case)
    where, reason = place_nodes(graph, AnyGpu())["n"]
    assert where == ("gpu" if case.gpu else "cpu"), \
        f"{case.id}: placed on the {where} ({reason}), the case says gpu={case.gpu}"


# ------------------------------------------------------------------------------------ op x backend
def _backend_ops() -> list[tuple[str, str]]:
    return [("cpu", op) for op in CPU_OPS] + [(b, op) for b in ("any_gpu",) + GPU_BACKENDS for op in GPU_OPS]


@pytest.mark.parametrize("backend, op", _backend_ops(), ids=lambda v: v)
def test_every_op_a_backend_runs_has_a_case(backend, op):
    cases = [case for case in CASES if case.op == op]
    if backend == "cpu":  # the per-op executor runs its fast path, a step plan its cpu lowering
        assert cases, f"op {op!r} runs natively on backend cpu but has no case in tests/support/op_cases.py"
        return
    device = AnyGpu() if backend == "any_gpu" else device_or_none(backend)
    if device is None:
        pytest.skip(f"{backend} unavailable")
    if not all(device.supports(k) for k in LOWERINGS[op].kernels):
        pytest.skip(f"not supported on {backend}")
    on_gpu = [case.id for case in cases if place_nodes(build_graph(case)[0], device)["n"][0] == "gpu"]
    assert on_gpu, (f"op {op!r} runs on backend {backend} but has no case placed on the GPU in tests/support/op_cases.py "
                    f"(its cases: {[case.id for case in cases]})")


FRESH_CASES = [case for case in CASES if OPS[case.op].fresh]


def test_fresh_ops_have_cases():
    assert {case.op for case in FRESH_CASES} == {name for name, op in OPS.items() if op.fresh}


@pytest.mark.parametrize("case", FRESH_CASES, ids=case_id)
def test_fresh_ops_return_no_view_of_an_input(case):
    # OpDef.fresh lets the arena planner drop an input's buffer once the op has read it: no output of its
    # fast path or its reference may share memory with an input or a weight
    graph, weights = build_graph(case)
    given = list(case.inputs.values()) + [w for w in case.weights.values() if isinstance(w, np.ndarray)]
    for reference in (False, True):
        got = Executor(graph, weights, reference=reference).run(run_context(case), case.inputs)
        for name, out in got.items():
            assert not any(np.shares_memory(out, a) for a in given), f"{case.id} ({'ref' if reference else 'fast'}): {name}"


# ------------------------------------------------------------------------------------ every case, every tier
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_per_op_executor_matches_reference(tier, case):
    graph, weights = build_graph(case)
    want, want_ctx = reference(case.id)
    ctx = run_context(case)
    got = Executor(graph, weights).run(ctx, case.inputs)
    check_outputs(case, got, want, f"per-op executor on {tier}")
    if case.kv is not None:  # the run appended the same keys and values to the cache
        layer, end = case.params.get("layer", 0), case.kv[1] + case.inputs["q"].shape[0]
        for a, b in ((ctx.kv.keys, want_ctx.kv.keys), (ctx.kv.values, want_ctx.kv.values)):
            np.testing.assert_array_equal(a[layer][:, :end], b[layer][:, :end])


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_step_plan_matches_reference_and_per_op_executor(tier, case):
    graph, weights = build_graph(case)
    plan = static_plan(case, graph, weights)
    want, _ = reference(case.id)
    executor = Executor(graph, weights)
    arrays = executor.check_feeds(case.inputs)
    for threads in (1, 2):  # the steps lowered for one thread, then split for a team of two
        with kernel_threads(threads):
            plan.useful_threads = threads
            plan.pacer.solo_runs, plan.pacer.pace = 0, lambda threads, seconds: None  # no one-thread start or back-off
            got = plan.run(arrays)
            assert got is not None, f"{case.id}: the plan did not run at {threads} threads"
            where = f"step plan on {tier}, {threads} thread(s)"
            check_outputs(case, got, want, where)
            per_op = executor.run(run_context(case), case.inputs)
            differ = [name for name in per_op if not np.array_equal(got[name], per_op[name])]
            assert not differ, f"{case.id} {differ} {where}: not the per-op executor's bits"


@pytest.mark.parametrize("case", [case for case in CASES if OPS[case.op].cpu is not None], ids=case_id)
def test_step_plan_runs_native_steps(case):
    """A node whose op has a cpu lowering becomes native steps (a view op: none), not a numpy island."""
    graph, weights = build_graph(case)
    plan = static_plan(case, graph, weights)
    nodes = {node_id for node_id, _ in plan.step_nodes}
    if case.island is not None:
        assert plan.islands and "n" not in nodes, \
            f"{case.id} says it runs as an island ({case.island}), but it has native steps"
        return
    assert not plan.islands, f"{case.id}: the plan runs {len(plan.islands)} numpy island(s)"
    assert "n" in nodes or OPS[case.op].view, f"{case.id}: no native step for the node"
