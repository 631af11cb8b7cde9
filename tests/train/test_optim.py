"""Optimisers, clipping, accumulation and schedules against torch.optim on the same parameters and
gradients: ten steps agree to 1e-6."""

import math

import numpy as np
import pytest

from volvox.errors import ShapeError, VolvoxError
from volvox.train.optim import SGD, AdamW, GradAccumulator, Parameters, clip_grad_norm
from volvox.train.schedule import make_schedule

torch = pytest.importorskip("torch")

SHAPES = {"w": (5, 3), "b": (7,), "a": (2, 1, 3)}
STEPS = 10


def _start():
    rng = np.random.default_rng(0)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}


def _grads(step):
    """A different gradient set per step (large enough that clipping bites)."""
    rng = np.random.default_rng(100 + step)
    return {n: (3.0 * rng.standard_normal(s)).astype(np.float32) for n, s in SHAPES.items()}


def _run_torch(make_opt, clip=None, schedule=None, accum=1):
    params = {n: torch.nn.Parameter(torch.tensor(v)) for n, v in _start().items()}
    opt = make_opt(list(params.values()))
    sched = schedule(opt) if schedule else None
    for step in range(STEPS):
        for p in params.values():
            p.grad = torch.zeros_like(p)
        for micro in range(accum):
            for n, g in _grads(step * accum + micro).items():
                params[n].grad += torch.tensor(g) / accum
        if clip:
            torch.nn.utils.clip_grad_norm_(list(params.values()), clip)
        opt.step()
        if sched:
            sched.step()
    return {n: p.detach().numpy() for n, p in params.items()}


def _run_volvox(make_opt, clip=None, schedule=None, accum=1):
    params = Parameters(_start())
    opt = make_opt(params)
    acc = GradAccumulator(params, accum)
    for step in range(STEPS):
        for micro in range(accum):
            done = acc.add(_grads(step * accum + micro))
        assert done
        grad = acc.mean()
        if clip:
            clip_grad_norm(grad, clip)
        opt.step(grad, lr=opt.lr * schedule(step) if schedule else None)
    return params.state()


def _close(got, want):
    for n in SHAPES:
        np.testing.assert_allclose(got[n], want[n], rtol=0, atol=1e-6, err_msg=n)


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_adamw_matches_torch(wd):
    want = _run_torch(lambda ps: torch.optim.AdamW(ps, lr=0.01, betas=(0.9, 0.95), eps=1e-8, weight_decay=wd))
    got = _run_volvox(lambda p: AdamW(p, lr=0.01, betas=(0.9, 0.95), eps=1e-8, weight_decay=wd))
    _close(got, want)
    assert np.abs(got["w"] - _start()["w"]).max() > 0.05  # the parameters really moved


@pytest.mark.parametrize("momentum,nesterov,dampening,wd", [(0.0, False, 0.0, 0.0), (0.9, False, 0.1, 0.01),
                                                            (0.9, True, 0.0, 0.05)])
def test_sgd_matches_torch(momentum, nesterov, dampening, wd):
    kw = dict(lr=0.02, momentum=momentum, dampening=dampening, weight_decay=wd, nesterov=nesterov)
    _close(_run_volvox(lambda p: SGD(p, **kw)), _run_torch(lambda ps: torch.optim.SGD(ps, **kw)))


def test_clipping_and_accumulation_match_torch():
    kw = dict(lr=0.01, weight_decay=0.02)
    want = _run_torch(lambda ps: torch.optim.AdamW(ps, **kw), clip=1.5, accum=3)
    _close(_run_volvox(lambda p: AdamW(p, **kw), clip=1.5, accum=3), want)


def test_clip_grad_norm_returns_norm_and_leaves_small_gradients():
    g = np.array([3.0, 4.0], np.float32)
    assert clip_grad_norm(g, 1.0) == pytest.approx(5.0)
    np.testing.assert_allclose(g, [0.6, 0.8], atol=1e-6)
    small = np.array([0.3, 0.4], np.float32)
    clip_grad_norm(small, 1.0)
    np.testing.assert_array_equal(small, np.array([0.3, 0.4], np.float32))


def _torch_warmup(opt, warmup):
    return torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0 / warmup, end_factor=1.0, total_iters=warmup - 1)


@pytest.mark.parametrize("kind", ["cosine", "linear", "constant"])
def test_schedules_match_torch_schedulers(kind):
    """Warmup + decay equals torch's SequentialLR(LinearLR warmup, CosineAnnealingLR / LinearLR decay)."""
    total, warmup, min_ratio, lr = 10, 3, 0.1, 0.05

    def torch_sched(opt):
        if kind == "cosine":
            decay = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=lr * min_ratio)
        elif kind == "linear":
            decay = torch.optim.lr_scheduler.LinearLR(opt, 1.0, min_ratio, total_iters=total - warmup)
        else:
            decay = torch.optim.lr_scheduler.ConstantLR(opt, factor=1.0, total_iters=0)
        return torch.optim.lr_scheduler.SequentialLR(opt, [_torch_warmup(opt, warmup), decay], milestones=[warmup])

    schedule = make_schedule(kind, total, warmup, min_ratio if kind != "constant" else 0.0)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    sched = torch_sched(opt)
    torch_lrs = []
    for _ in range(total):
        torch_lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    np.testing.assert_allclose([lr * schedule(s) for s in range(total)], torch_lrs, rtol=1e-9, atol=1e-12)
    want = _run_torch(lambda ps: torch.optim.AdamW(ps, lr=lr), schedule=torch_sched)
    _close(_run_volvox(lambda p: AdamW(p, lr=lr), schedule=schedule), want)


def test_schedule_stays_at_floor_past_the_end():
    s = make_schedule("cosine", 10, 2, 0.2)
    assert s(10) == pytest.approx(0.2) and s(50) == pytest.approx(0.2)
    assert s(0) == pytest.approx(0.5) and s(1) == pytest.approx(1.0)
    assert make_schedule("linear", 4)(2) == pytest.approx(0.5)
    assert math.isclose(make_schedule("constant", 4)(3), 1.0)


def test_state_dict_round_trip_resumes_identically():
    params_a, params_b = Parameters(_start()), Parameters(_start())
    a, b = AdamW(params_a, lr=0.01), AdamW(params_b, lr=0.01)
    for step in range(4):
        a.step(params_a.gather(_grads(step)))
    for step in range(2):
        b.step(params_b.gather(_grads(step)))
    resumed_params = Parameters(params_b.state())
    resumed = AdamW(resumed_params, lr=0.01)
    resumed.load_state_dict(b.state_dict())
    for step in range(2, 4):
        resumed.step(resumed_params.gather(_grads(step)))
    np.testing.assert_array_equal(resumed_params.flat, params_a.flat)


def test_bad_arguments_raise_named_errors():
    params = Parameters(_start())
    with pytest.raises(ShapeError, match="'b'"):
        params.gather({"w": np.zeros((5, 3)), "a": np.zeros((2, 1, 3))})
    with pytest.raises(ShapeError, match="shape"):
        params.gather({**_grads(0), "w": np.zeros((3, 5))})
    with pytest.raises(VolvoxError, match="Nesterov"):
        SGD(params, 0.1, nesterov=True)
    with pytest.raises(VolvoxError, match="schedule"):
        make_schedule("cosine", 5, 6)
    with pytest.raises(VolvoxError, match="unknown schedule"):
        make_schedule("step", 5)
    with pytest.raises(VolvoxError, match="grad_accum"):
        GradAccumulator(params, 0)
