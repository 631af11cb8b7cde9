"""Which ops a GPU backend runs, and the dispatches each becomes: derived from the op table (each
op's ``gpu`` entry, written with ops/gpu.py's vocabulary in the op's family module). docs/ops.md's
GPU columns come from it."""

from volvox.ops import OPS
from volvox.ops.gpu import Call, Dispatch, Lowering

LOWERINGS: dict[str, Lowering] = {name: op.gpu for name, op in OPS.items() if op.gpu is not None}

__all__ = ["LOWERINGS", "Call", "Dispatch", "Lowering"]
