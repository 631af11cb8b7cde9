"""The runner's team (volvox/_kernels/engine/team.pxi): plans run on its worker threads give the numpy
references' outputs, and stay right when two Python threads run plans at once (one takes the team,
the other an OpenMP region), when runs on 2 and on 1 thread alternate (a worker sleeps and wakes),
and in a forked child (which has no workers until it starts its own)."""

import os
import threading

import numpy as np
import pytest

from volvox import cpu
from volvox._kernels import engine

from test_vision_plan import float_graph, int8_graph, plan_and_per_op, reference_model, same_bits

pytestmark = pytest.mark.skipif(not engine.openmp_enabled(), reason="a build without OpenMP runs plans on one thread")

rng = np.random.default_rng(11)


@pytest.fixture
def two_threads():
    before = cpu.get_num_threads()
    cpu.set_num_threads(2)
    yield
    cpu.set_num_threads(before)


def model_and_oracle(make):
    """(model, its input, the numpy references' outputs): the oracle for every run below."""
    model = make()
    x = rng.standard_normal(model.graph.inputs[0].shape).astype(np.float32)
    return model, x, reference_model(model).run({"x": x})


def assert_oracle(model, outputs: dict, oracle: dict) -> None:
    for name in oracle:
        if model.graph.specs[name].dtype == "int8":
            assert same_bits(outputs[name], oracle[name]), name
        else:
            np.testing.assert_allclose(outputs[name], oracle[name], rtol=1e-4, atol=1e-4, err_msg=name)


def test_team_runs_alternating_with_one_thread_runs_are_the_reference(two_threads):
    model, x, oracle = model_and_oracle(float_graph)
    plan_and_per_op(model, {"x": x})  # the plan on every thread, no back-off
    plan = model._plan.plan
    arrays = [x]
    for k in range(40):  # 2 threads, then 1: the idle worker spins, or sleeps when the gap is long
        plan._forward(arrays, 2 if k % 2 == 0 else 1)
        assert_oracle(model, {n: t.copy() for n, t in plan.outputs.items()}, oracle)


def test_plans_run_from_two_python_threads_at_once_are_the_reference(two_threads):
    cases = [model_and_oracle(make) for make in (float_graph, int8_graph)]
    for model, x, _ in cases:
        plan_and_per_op(model, {"x": x})
    errors = []

    def work(model, x, oracle):
        try:
            for _ in range(60):
                assert_oracle(model, model.run({"x": x}), oracle)
        except AssertionError as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=case) for case in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert all(model._plan.plan.runs >= 60 for model, _, _ in cases)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_runs_plans_on_its_own_team(two_threads):
    model, x, oracle = model_and_oracle(float_graph)
    plan_and_per_op(model, {"x": x})  # the parent's workers exist now
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 when its 2-thread runs are the reference
        code = 1
        try:
            for _ in range(5):
                model._plan.plan._forward([x], 2)
                assert_oracle(model, {n: t.copy() for n, t in model._plan.plan.outputs.items()}, oracle)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
