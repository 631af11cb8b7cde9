"""THE op table: every op volvox computes, each declared once in its family module.

An op (registry.OpDef) has named input/output ports (optional ones end in '?'), a shape rule
(``infer``), a numpy reference (``ref``, the oracle every kernel is tested against), optionally a
fast CPU kernel (``fast``) and a way to write it into a buffer the executor owns (``into``).
``validate(graph)`` checks a graph against the table and infers every tensor's shape.
"""

from volvox.ops.registry import OPS, OpDef, get_op, register, validate, validate_file
from volvox.ops import elementwise, linear, norm, attention, fused, conv, pool, activation, arith, shape, int8, quantized, resize, dwpw  # noqa: E402,F401,E501  (registers the ops)
from volvox.ops import moe, ssm, token_pool, cross_attention, relative_attention  # noqa: E402,F401  (register the ops)
from volvox.ops import math, reduce, tensor, conv_general, recurrent, loss  # noqa: E402,F401  (register the ops)
from volvox.ops import data_dependent, signal, int16x8, sampling  # noqa: E402,F401  (register the ops)

__all__ = ["OPS", "OpDef", "get_op", "register", "validate", "validate_file"]
