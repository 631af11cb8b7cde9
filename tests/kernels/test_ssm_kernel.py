"""The SSM kernels (volvox/_kernels/kernels/ssm.pxi through volvox.cpu) against the numpy references of
ops/ssm.py (float64), which the architecture tests hold to transformers: the causal conv1d, Mamba's
selective scan and Mamba-2's SSD scan, from zero state and carried across calls through a state cache
(the largest shapes are split across threads)."""

import numpy as np
import pytest

from volvox import cpu
from volvox.errors import KernelError, ShapeError
from volvox.ops.context import BatchContext, RunContext
from volvox.ops.ssm import causal_conv1d_fast, causal_conv1d_ref, selective_scan_ref, ssd_ref
from volvox.runtime.state_cache import StateCache, StateShape


def _rng_arrays(seed, *shapes, scale=1.0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * scale).astype(np.float32) for s in shapes]


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * max(1.0, float(np.abs(want).max())))


def _ctx(conv, ssm):
    return RunContext(state=StateCache(StateShape(1, conv, ssm)))


@pytest.mark.parametrize("seq, channels, kernel", [(1, 5, 4), (7, 33, 4), (9, 16, 1), (3, 8, 2), (32, 512, 4)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_causal_conv1d_matches_reference_and_carries_state(seq, channels, kernel, with_bias):
    x, w, b = _rng_arrays(seq, (2 * seq, channels), (channels, kernel), (channels,))
    bias = b if with_bias else None
    p = {"layer": 0}
    want = causal_conv1d_ref(RunContext(), p, x, w, bias)
    full = cpu.causal_conv1d(x, w, bias, None)
    _close(full, want)
    # two runs through a state cache equal one run over the whole sequence
    ctx = _ctx((kernel - 1, channels), (1, 1))
    got = np.concatenate([cpu.causal_conv1d(x[:seq], w, bias, ctx.state.layer("conv", 0)),
                          cpu.causal_conv1d(x[seq:], w, bias, ctx.state.layer("conv", 0))])
    np.testing.assert_array_equal(got, full)  # the same bits, in one run or two
    ref_ctx = _ctx((kernel - 1, channels), (1, 1))
    causal_conv1d_ref(ref_ctx, p, x, w, bias)
    np.testing.assert_array_equal(ctx.state.conv, ref_ctx.state.conv)  # the last kernel-1 rows, exactly


@pytest.mark.parametrize("seq, d_inner, n_state", [(1, 4, 3), (6, 24, 16), (11, 7, 5), (24, 256, 16)])
@pytest.mark.parametrize("gated", [True, False])
def test_selective_scan_matches_reference_and_carries_state(seq, d_inner, n_state, gated):
    x, dt, a, bm, cm, d, z = _rng_arrays(seq + d_inner, (2 * seq, d_inner), (2 * seq, d_inner), (d_inner, n_state),
                                         (2 * seq, n_state), (2 * seq, n_state), (d_inner,), (2 * seq, d_inner))
    a = -np.exp(a)  # decays, as the importers store A
    z = z if gated else None
    zs = (lambda lo, hi: None) if z is None else (lambda lo, hi: z[lo:hi])
    p = {"layer": 0}
    want = selective_scan_ref(RunContext(), p, x, dt, a, bm, cm, d, z)
    full = cpu.selective_scan(x, dt, a, bm, cm, d, z, None)
    _close(full, want)
    ctx = _ctx((1, 1), (d_inner, n_state))
    state = ctx.state.layer("ssm", 0)
    got = np.concatenate([cpu.selective_scan(x[:seq], dt[:seq], a, bm[:seq], cm[:seq], d, zs(0, seq), state),
                          *(cpu.selective_scan(x[t:t + 1], dt[t:t + 1], a, bm[t:t + 1], cm[t:t + 1], d, zs(t, t + 1), state)
                            for t in range(seq, 2 * seq))])
    np.testing.assert_array_equal(got, full)  # a prefill then decode steps: the full run's bits
    ref_ctx = _ctx((1, 1), (d_inner, n_state))
    selective_scan_ref(ref_ctx, p, x, dt, a, bm, cm, d, z)
    _close(ctx.state.ssm, ref_ctx.state.ssm)


@pytest.mark.parametrize("seq, n_heads, head_dim, n_groups, n_state", [(1, 2, 3, 1, 4), (8, 4, 8, 2, 16), (5, 6, 2, 3, 5), (16, 8, 32, 2, 16)])
def test_ssd_scan_matches_reference_and_carries_state(seq, n_heads, head_dim, n_groups, n_state):
    g = n_groups * n_state
    x, dt, dt_bias, a, bm, cm, d = _rng_arrays(seq * n_heads, (2 * seq, n_heads * head_dim), (2 * seq, n_heads),
                                               (n_heads,), (n_heads,), (2 * seq, g), (2 * seq, g), (n_heads,))
    a = -np.exp(a)
    p = dict(layer=0, n_heads=n_heads, head_dim=head_dim, n_groups=n_groups, state_size=n_state)
    want = ssd_ref(RunContext(), p, x, dt, dt_bias, a, bm, cm, d)
    full = cpu.ssd_scan(x, dt, dt_bias, a, bm, cm, d, n_heads, n_groups, None)
    _close(full, want)
    ctx = _ctx((1, 1), (n_heads, head_dim, n_state))
    state = ctx.state.layer("ssm", 0)
    parts = [cpu.ssd_scan(x[:seq], dt[:seq], dt_bias, a, bm[:seq], cm[:seq], d, n_heads, n_groups, state)]
    parts += [cpu.ssd_scan(x[t:t + 1], dt[t:t + 1], dt_bias, a, bm[t:t + 1], cm[t:t + 1], d, n_heads, n_groups, state)
              for t in range(seq, 2 * seq)]
    np.testing.assert_array_equal(np.concatenate(parts), full)


def test_batch_context_runs_each_sequence_from_its_own_state():
    x, w = _rng_arrays(3, (5, 6), (6, 3))
    contexts = [_ctx((2, 6), (1, 1)) for _ in range(2)]
    for c, rows in zip(contexts, (x[:2], x[2:])):
        causal_conv1d_ref(c, {"layer": 0}, rows, w)  # each sequence's history differs
    fresh = [_ctx((2, 6), (1, 1)) for _ in range(2)]
    for c, old in zip(fresh, contexts):
        c.state.conv[:] = old.state.conv
    step = x[:2]  # one new row per sequence
    want = np.concatenate([causal_conv1d_ref(c, {"layer": 0}, step[i:i + 1], w) for i, c in enumerate(contexts)])
    got = causal_conv1d_fast(BatchContext([(c, 1) for c in fresh]), {"layer": 0}, step, w)
    _close(got, want)


def test_bad_operands_raise_named_errors():
    x = np.ones((3, 4), np.float32)
    with pytest.raises(ShapeError, match="weight"):
        cpu.causal_conv1d(x, np.ones((5, 2), np.float32), None, None)
    with pytest.raises(ShapeError, match="state"):
        cpu.causal_conv1d(x, np.ones((4, 3), np.float32), None, np.zeros((3, 4), np.float32))
    with pytest.raises(KernelError, match="float32"):
        cpu.selective_scan(x.astype(np.float64), x, np.ones((4, 2), np.float32), np.ones((3, 2), np.float32),
                           np.ones((3, 2), np.float32), np.ones(4, np.float32), None, None)
    with pytest.raises(ShapeError, match="heads"):
        cpu.ssd_scan(x, np.ones((3, 3), np.float32), *[np.ones(3, np.float32)] * 2, np.ones((3, 2), np.float32),
                     np.ones((3, 2), np.float32), np.ones(3, np.float32), 3, 1, None)
