"""The codes kernels and shaders know functions by, defined once here.

``tools/gen_codes.py`` writes them into the CPU engine and tiers (volvox/_kernels/codes.pxd) and
into the WGSL shaders (the blocks marked "generated codes"); ``tools/gen_codes.py --check`` (a
test) fails when a generated copy is stale. To add an elementwise function: append its name (and
its parameters) here, give it a case in the engine's unary step (volvox/_kernels/engine/small_ops.pxi)
and in shaders/unary.wgsl, then regenerate (docs/internals.md walks through it).
"""

# Elementwise functions: the engine's unary step and the unary shader compute any of them; a
# conv's, pool's, binary step's or matmul's fused activation is one of them too (a conv fuses the
# first three: none, relu, relu6).
ELEMENTWISE = ("none", "relu", "relu6", "sigmoid", "silu", "gelu", "gelu_tanh", "hard_swish", "hard_sigmoid",
               "sqrt", "square", "clip", "leaky_relu")

# The parameters a function takes from its node's params, (name, default) each: the kernels and
# shaders receive them as alpha and beta, in this order.
FN_PARAMS = {
    "hard_sigmoid": (("alpha", 0.2), ("beta", 0.5)),
    "clip": (("min", -3.4e38), ("max", 3.4e38)),
    "leaky_relu": (("alpha", 0.01),),
}

# Binary operators of the engine's binary step and the binary shader.
BINARY = ("add", "mul", "sub", "div", "pow")

FN = {name: code for code, name in enumerate(ELEMENTWISE)}       # elementwise function -> code
BIN = {name: code for code, name in enumerate(BINARY)}           # binary operator -> code


def fn_args(name: str, params: dict) -> tuple[int, float, float]:
    """(code, alpha, beta) of elementwise function ``name`` for a node with ``params`` (absent or
    None params take their defaults; alpha, beta 0 when the function has none)."""
    values = [float(default if params.get(key) is None else params[key]) for key, default in FN_PARAMS.get(name, ())]
    alpha, beta = values + [0.0] * (2 - len(values))
    return FN[name], alpha, beta
