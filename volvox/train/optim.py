"""Optimisers over one flat float32 parameter buffer: SGD (momentum, Nesterov, weight decay), AdamW
(decoupled weight decay, bias correction), global-norm gradient clipping and gradient accumulation.

Every trainable tensor is a view into ``Parameters.flat``, so one optimiser step is one fused kernel
call (cpu.adamw_update / cpu.sgd_update: OpenMP over runs of the vector, each element's moments and
parameter updated in one pass) over a single contiguous vector, whatever the number of tensors. The update
rules are torch.optim's (``SGD``, ``AdamW`` with ``amsgrad=False``), step for step, so that a run
here and a run there from the same start agree.
"""

from __future__ import annotations

import numpy as np

from volvox import cpu
from volvox.errors import ShapeError, VolvoxError


class Parameters:
    """Named trainable tensors packed into one contiguous float32 vector; ``views[name]`` is each tensor."""

    def __init__(self, tensors: dict[str, np.ndarray]):
        self.names = list(tensors)
        self.shapes = {name: tuple(np.shape(t)) for name, t in tensors.items()}
        sizes = [int(np.prod(self.shapes[n], dtype=np.int64)) for n in self.names]
        self.offsets = dict(zip(self.names, np.cumsum([0] + sizes[:-1]).tolist()))
        self.flat = np.empty(sum(sizes), np.float32)  # (total elements,)
        self.views = {n: self.flat[o:o + s].reshape(self.shapes[n])
                      for n, o, s in zip(self.names, self.offsets.values(), sizes)}
        for name, t in tensors.items():
            self.views[name][...] = t
        self._grad = np.zeros_like(self.flat)  # (total elements,) the gathered gradient

    def gather(self, grads: dict[str, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        """The gradients of every parameter, in the flat layout (``out``, or an internal buffer reused
        across calls); ShapeError names a missing or misshapen gradient."""
        out = self._grad if out is None else out
        for name in self.names:
            g = grads.get(name)
            if g is None:
                raise ShapeError(f"no gradient for parameter {name!r}")
            if tuple(np.shape(g)) != self.shapes[name]:
                raise ShapeError(f"gradient of {name!r} has shape {np.shape(g)}, parameter {self.shapes[name]}")
            o = self.offsets[name]
            out[o:o + g.size] = np.ravel(g)
        return out

    def state(self) -> dict[str, np.ndarray]:
        """A copy of every tensor by name."""
        return {n: v.copy() for n, v in self.views.items()}


class GradAccumulator:
    """Sums the gradients of ``steps`` micro-batches and hands back their mean (as torch does when each
    micro-batch's loss is divided by ``steps``)."""

    def __init__(self, params: Parameters, steps: int):
        if steps < 1:
            raise VolvoxError(f"grad_accum must be >= 1, got {steps}")
        self.params, self.steps, self.count = params, steps, 0
        self.total = np.zeros_like(params.flat)  # (total elements,)
        self._scratch = np.zeros_like(params.flat)  # (total elements,)

    def add(self, grads: dict[str, np.ndarray]) -> bool:
        """Add one micro-batch's gradients; True once ``steps`` of them are summed (then call mean())."""
        self.total += self.params.gather(grads, self._scratch)
        self.count += 1
        return self.count == self.steps

    def mean(self) -> np.ndarray:
        """The accumulated mean gradient (flat), and a reset for the next optimiser step."""
        self.total /= self.count
        out = self.total.copy()
        self.total[:] = 0.0
        self.count = 0
        return out


def clip_grad_norm(grad: np.ndarray, max_norm: float) -> float:
    """Scale the flat gradient in place so its global L2 norm is at most ``max_norm`` (torch's
    clip_grad_norm_: coefficient max_norm / (norm + 1e-6), never above 1); returns the norm before."""
    norm = float(np.sqrt(np.dot(grad.astype(np.float64), grad.astype(np.float64))))
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        grad *= np.float32(coef)
    return norm


class Optimizer:
    """Base: owns the step count and the learning rate; ``step(grad)`` updates ``params.flat`` in place."""

    def __init__(self, params: Parameters, lr: float):
        if not lr >= 0.0:
            raise VolvoxError(f"learning rate must be >= 0, got {lr}")
        self.params, self.lr, self.t = params, float(lr), 0

    def step(self, grad: np.ndarray, lr: float | None = None) -> None:
        """One update with the flat gradient ``grad`` at learning rate ``lr`` (default: self.lr)."""
        if grad.shape != self.params.flat.shape:
            raise ShapeError(f"flat gradient has shape {grad.shape}, parameters {self.params.flat.shape}")
        self.t += 1
        self._update(grad, self.lr if lr is None else float(lr))

    def _update(self, grad: np.ndarray, lr: float) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, np.ndarray]:
        """The optimiser's state as named arrays (moments, step), for a checkpoint."""
        return {"t": np.array(self.t, np.int64), **{k: v.copy() for k, v in self._buffers().items()}}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore a state_dict() taken from an optimiser of the same kind over the same parameters."""
        self.t = int(np.asarray(state["t"]).reshape(-1)[0])
        for name, buf in self._buffers().items():
            if name not in state or state[name].shape != buf.shape:
                raise VolvoxError(f"optimiser state lacks {name!r} of shape {buf.shape}")
            buf[...] = state[name]

    def _buffers(self) -> dict[str, np.ndarray]:
        return {}


class SGD(Optimizer):
    """Stochastic gradient descent as torch.optim.SGD: L2 weight decay added to the gradient, momentum
    with dampening (the first step's buffer is the gradient itself), optionally Nesterov."""

    def __init__(self, params: Parameters, lr: float, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False):
        super().__init__(params, lr)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise VolvoxError("Nesterov momentum needs momentum > 0 and dampening 0")
        self.momentum, self.dampening, self.weight_decay, self.nesterov = momentum, dampening, weight_decay, nesterov
        self.buf = np.zeros_like(params.flat)  # (total elements,) the momentum buffer

    def _update(self, grad, lr):
        cpu.sgd_update(self.params.flat, np.ascontiguousarray(grad, np.float32), self.buf, lr, self.momentum,
                       self.dampening, self.weight_decay, self.nesterov, self.t == 1)

    def _buffers(self):
        return {"momentum": self.buf}


class AdamW(Optimizer):
    """Adam with decoupled weight decay as torch.optim.AdamW (amsgrad off): p *= 1 - lr * wd, then
    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)."""

    def __init__(self, params: Parameters, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01):
        super().__init__(params, lr)
        b1, b2 = betas
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0 and eps >= 0.0 and weight_decay >= 0.0):
            raise VolvoxError(f"bad AdamW hyperparameters betas={betas} eps={eps} weight_decay={weight_decay}")
        self.b1, self.b2, self.eps, self.weight_decay = float(b1), float(b2), float(eps), float(weight_decay)
        self.m = np.zeros_like(params.flat)    # (total elements,) first moment
        self.v = np.zeros_like(params.flat)    # (total elements,) second moment

    def _update(self, grad, lr):
        cpu.adamw_update(self.params.flat, np.ascontiguousarray(grad, np.float32), self.m, self.v, lr, self.b1,
                         self.b2, self.eps, self.weight_decay, self.t)

    def _buffers(self):
        return {"exp_avg": self.m, "exp_avg_sq": self.v}


OPTIMIZERS = {"adamw": AdamW, "sgd": SGD}


def make_optimizer(name: str, params: Parameters, lr: float, **kw) -> Optimizer:
    """The optimiser called ``name`` ("adamw" or "sgd") over ``params``."""
    if name not in OPTIMIZERS:
        raise VolvoxError(f"unknown optimiser {name!r} (choose from {', '.join(OPTIMIZERS)})")
    return OPTIMIZERS[name](params, lr, **kw)
