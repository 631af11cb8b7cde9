"""Recurrent layers with ONNX's semantics: the simple RNN, GRU and LSTM cells over a whole sequence,
forward, reverse or bidirectional, as one numpy op (float64 state; a plan runs it as an island).

Shapes (layout 0): x (seq, batch, input), w (dirs, gates * hidden, input), r (dirs, gates * hidden,
hidden), b (dirs, 2 * gates * hidden: input then recurrence biases), initial_h / initial_c (dirs,
batch, hidden), p (dirs, 3 * hidden: LSTM peepholes i, o, f). Outputs y (seq, dirs, batch, hidden),
y_h and y_c (dirs, batch, hidden). Layout 1 puts batch first in x, y, y_h, y_c and the initial states.
Gate order is ONNX's: LSTM i, o, f, c; GRU z, r, h.
"""

from __future__ import annotations

import numpy as np

from volvox.ir.graph import expect
from volvox.ops.registry import OpDef, register

GATES = {"rnn": 1, "gru": 3, "lstm": 4}
# ONNX's activation functions by name: f(x, alpha, beta)
ACTIVATIONS = {
    "Sigmoid": lambda x, a, b: 0.5 * (1 + np.tanh(0.5 * x)),
    "Tanh": lambda x, a, b: np.tanh(x),
    "Relu": lambda x, a, b: np.maximum(x, 0),
    "HardSigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "LeakyRelu": lambda x, a, b: np.where(x >= 0, x, a * x),
    "ThresholdedRelu": lambda x, a, b: np.where(x > a, x, 0),
    "ScaledTanh": lambda x, a, b: a * np.tanh(b * x),
    "Affine": lambda x, a, b: a * x + b,
    "Elu": lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))),
    "Softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "Softplus": lambda x, a, b: np.logaddexp(0, x),
}
DEFAULT_ACTIVATIONS = {"rnn": ["Tanh"], "gru": ["Sigmoid", "Tanh"], "lstm": ["Sigmoid", "Tanh", "Tanh"]}
# the alpha / beta an activation takes when the node gives none (ONNX's defaults)
DEFAULT_ALPHA_BETA = {"HardSigmoid": (0.2, 0.5), "LeakyRelu": (0.01, 0.0), "ThresholdedRelu": (1.0, 0.0),
                      "ScaledTanh": (1.0, 1.0), "Affine": (1.0, 0.0), "Elu": (1.0, 0.0)}


def _directions(params) -> int:
    return 2 if params.get("direction", "forward") == "bidirectional" else 1


def activation_functions(params) -> list:
    """Per direction, the cell's activation functions (closures over their alpha / beta)."""
    cell = params["cell"]
    per_dir = len(DEFAULT_ACTIVATIONS[cell])
    names = list(params.get("activations") or DEFAULT_ACTIVATIONS[cell] * _directions(params))
    alphas, betas = list(params.get("activation_alpha", [])), list(params.get("activation_beta", []))
    functions, k_alpha = [], 0
    for k, name in enumerate(names):
        default = DEFAULT_ALPHA_BETA.get(name, (0.0, 0.0))
        takes = name in DEFAULT_ALPHA_BETA
        a = alphas[k_alpha] if takes and k_alpha < len(alphas) else default[0]
        b = betas[k_alpha] if takes and k_alpha < len(betas) else default[1]
        k_alpha += takes
        fn = ACTIVATIONS[name]
        functions.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    return [functions[d * per_dir:(d + 1) * per_dir] for d in range(_directions(params))]


def _recurrent_infer(specs, params):
    x, w = specs["x"], specs["w"]
    cell, hidden = params["cell"], int(params["hidden_size"])
    dirs = _directions(params)
    expect(cell in GATES and params.get("direction", "forward") in ("forward", "reverse", "bidirectional"),
           f"recurrent cell {cell!r} / direction {params.get('direction')!r}")
    names = params.get("activations") or []
    expect(all(a in ACTIVATIONS for a in names) and (not names or len(names) == len(DEFAULT_ACTIVATIONS[cell]) * dirs),
           f"activations {names} (known: {', '.join(ACTIVATIONS)})")
    expect(x.dtype in ("float32", "float16", "float64") and len(x.shape) == 3 and w.shape == (dirs, GATES[cell] * hidden, x.shape[2]),
           f"recurrent {cell}: x {x.describe()} and w {w.describe()} do not fit hidden_size {hidden}, {dirs} direction(s)")
    seq, batch = (x.shape[1], x.shape[0]) if params.get("layout", 0) else (x.shape[0], x.shape[1])
    state = (batch, dirs, hidden) if params.get("layout", 0) else (dirs, batch, hidden)
    y = (batch, seq, dirs, hidden) if params.get("layout", 0) else (seq, dirs, batch, hidden)
    return {"y": (y, x.dtype), "y_h": (state, x.dtype), "y_c": (state, x.dtype)}


def _step(cell, f, x_t, h, c, w, r, wb, rb, p, hidden, clip, linear_before_reset):
    """One time step of one direction: (h, c) after x_t (batch, input)."""
    clamp = (lambda v: np.clip(v, -clip, clip)) if clip else (lambda v: v)
    if cell == "rnn":
        return f[0](clamp(x_t @ w.T + h @ r.T + wb + rb)), c
    if cell == "gru":
        gx = x_t @ w.T + wb                                    # (batch, 3 * hidden): z, r, h
        z = f[0](clamp(gx[:, :hidden] + h @ r[:hidden].T + rb[:hidden]))
        reset = f[0](clamp(gx[:, hidden:2 * hidden] + h @ r[hidden:2 * hidden].T + rb[hidden:2 * hidden]))
        if linear_before_reset:
            candidate = gx[:, 2 * hidden:] + reset * (h @ r[2 * hidden:].T + rb[2 * hidden:])
        else:
            candidate = gx[:, 2 * hidden:] + (reset * h) @ r[2 * hidden:].T + rb[2 * hidden:]
        h_new = f[1](clamp(candidate))
        return (1 - z) * h_new + z * h, c
    gates = x_t @ w.T + h @ r.T + wb + rb                      # (batch, 4 * hidden): i, o, f, c
    i, o, fg, g = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
    pi, po, pf = (p[k * hidden:(k + 1) * hidden] for k in range(3))
    i = f[0](clamp(i + pi * c))
    fg = f[0](clamp(fg + pf * c))
    c_new = fg * c + i * f[1](clamp(g))
    o = f[0](clamp(o + po * c_new))
    return o * f[2](c_new), c_new


def recurrent_ref(ctx, p, x, w, r, b=None, initial_h=None, initial_c=None, peepholes=None):
    """The whole sequence through the cell, each direction on its own (float64): (y, y_h, y_c)."""
    cell, hidden = p["cell"], int(p["hidden_size"])
    dirs, layout = _directions(p), int(p.get("layout", 0))
    if layout:
        x = x.transpose(1, 0, 2)
        initial_h = None if initial_h is None else initial_h.transpose(1, 0, 2)
        initial_c = None if initial_c is None else initial_c.transpose(1, 0, 2)
    seq, batch, _ = x.shape
    gates = GATES[cell]
    x64 = x.astype(np.float64)
    b = np.zeros((dirs, 2 * gates * hidden)) if b is None else b.astype(np.float64)
    peepholes = np.zeros((dirs, 3 * hidden)) if peepholes is None else peepholes.astype(np.float64)
    functions = activation_functions(p)
    y = np.zeros((seq, dirs, batch, hidden))                                        # (seq, dirs, batch, hidden)
    y_h, y_c = np.zeros((dirs, batch, hidden)), np.zeros((dirs, batch, hidden))    # (dirs, batch, hidden)
    for d in range(dirs):
        h = np.zeros((batch, hidden)) if initial_h is None else initial_h[d].astype(np.float64)
        c = np.zeros((batch, hidden)) if initial_c is None else initial_c[d].astype(np.float64)
        reverse = p.get("direction", "forward") == "reverse" or d == 1
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            h, c = _step(cell, functions[d], x64[t], h, c, w[d].astype(np.float64), r[d].astype(np.float64),
                         b[d, :gates * hidden], b[d, gates * hidden:], peepholes[d], hidden, float(p.get("clip", 0) or 0),
                         int(p.get("linear_before_reset", 0)))
            y[t, d] = h
        y_h[d], y_c[d] = h, c
    if layout:
        y, y_h, y_c = y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2), y_c.transpose(1, 0, 2)
    return tuple(np.ascontiguousarray(v).astype(x.dtype) for v in (y, y_h, y_c))


register(OpDef("recurrent", "recurrent", ("x", "w", "r", "b?", "initial_h?", "initial_c?", "peepholes?"),
               ("y", "y_h", "y_c?"), _recurrent_infer, recurrent_ref))
