"""The graph compiler: pure graph rewrites run once at load, before the executor plans.

Each pass takes (graph, weights) and returns a new (graph, weights) computing the
same outputs; ``compile_graph`` runs the enabled passes in order and reports
what each changed. ``volvox.load(..., optimize=False)`` runs none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from volvox.errors import UnsupportedError
from volvox.ir.graph import Graph
from volvox.compile.elide import elide_noop_reshapes
from volvox.compile.fold_affine import channel_affine_to_depthwise, fold_conv_input_affine, fold_conv_output_affine
from volvox.compile.fuse_activation import (fuse_add_activation, fuse_concat_activation, fuse_conv_activation,
                                            fuse_linear_activation)
from volvox.compile.fuse_add import fold_linear_bias, fuse_add_chains
from volvox.compile.fuse_conv import fuse_depthwise_pointwise, fuse_expand_dwpw
from volvox.compile.fuse_linear import fuse_swiglu, merge_sibling_linears
from volvox.compile.prepack import prepack_weights
from volvox.compile.recognize import recognize_hard_swish, recognize_silu
from volvox.ops import validate

Pass = Callable[[Graph, dict[str, Any]], tuple[Graph, dict[str, Any]]]

# In order: activations spelled out in elementwise nodes recognised first (later passes match
# the ops); affines into convs before conv activations are folded (the affine sits between
# them), the affines left as depthwise convs after those and before conv activations (the ReLU
# after one folds into it); depthwise -> 1x1 pairs after conv activations (each conv keeps its own), expand convs
# into the pairs after those; swiglu before
# sibling merging (it takes the gate/up pairs first); biases into their
# linears before activations are folded (linear + bias + act -> one node) and before add chains
# (a bias add is not a chain link); activations into adds after the chains (the last sum takes
# it); prepacking last, over the weights every other pass made.
PASSES: dict[str, Pass] = {
    "elide_noop_reshapes": elide_noop_reshapes,
    "recognize_hard_swish": recognize_hard_swish,
    "recognize_silu": recognize_silu,
    "fold_conv_output_affine": fold_conv_output_affine,
    "fold_conv_input_affine": fold_conv_input_affine,
    "channel_affine_to_depthwise": channel_affine_to_depthwise,
    "fuse_conv_activation": fuse_conv_activation,
    "fuse_depthwise_pointwise": fuse_depthwise_pointwise,
    "fuse_expand_dwpw": fuse_expand_dwpw,
    "fuse_swiglu": fuse_swiglu,
    "merge_sibling_linears": merge_sibling_linears,
    "fold_linear_bias": fold_linear_bias,
    "fuse_linear_activation": fuse_linear_activation,
    "fuse_concat_activation": fuse_concat_activation,
    "fuse_add_chains": fuse_add_chains,
    "fuse_add_activation": fuse_add_activation,
    "prepack_weights": prepack_weights,
}

# Every other pass serves the GPU backends too: the fused ops (linear_act, concat_act, add_n with
# or without an activation) lower
# on each of them (volvox/_gpu/lowering.py) with no more dispatches and fewer intermediate buffers
# than the nodes they replace. These make ops only the CPU runs, so a GPU model skips them:
CPU_ONLY = ("fuse_depthwise_pointwise", "fuse_expand_dwpw")


@dataclass
class CompileReport:
    """Node counts before and after each pass."""

    steps: list[tuple[str, int, int]] = field(default_factory=list)  # (pass, nodes before, nodes after)

    @property
    def nodes_before(self) -> int:
        """Node count of the graph as loaded."""
        return self.steps[0][1] if self.steps else 0

    @property
    def nodes_after(self) -> int:
        """Node count of the compiled graph."""
        return self.steps[-1][2] if self.steps else 0


def compile_graph(graph: Graph, weights: dict[str, Any], passes: list[str] | None = None, cpu: bool = True
                  ) -> tuple[Graph, dict[str, Any], CompileReport]:
    """Run ``passes`` (default: all in registry order, less CPU_ONLY ones unless ``cpu``) over a
    validated graph."""
    names = [n for n in PASSES if cpu or n not in CPU_ONLY] if passes is None else passes
    unknown = [n for n in names if n not in PASSES]
    if unknown:
        raise UnsupportedError(f"unknown compiler passes {unknown} (known: {', '.join(PASSES)})")
    report = CompileReport()
    for name in names:
        before = graph
        graph, weights = PASSES[name](graph, weights)
        if _same_wiring(before, graph):
            graph.specs = before.specs  # the same nodes over the same tensors infer the same specs
        else:
            validate(graph)
        report.steps.append((name, len(before.nodes), len(graph.nodes)))
    return graph, weights, report


def _same_wiring(a: Graph, b: Graph) -> bool:
    """Whether a pass left the graph as it was: the same node objects in order, inputs, weight specs
    and outputs (most passes find nothing to do in a given model; validating each pass's result
    again was a third of SmolLM2's load)."""
    return (len(a.nodes) == len(b.nodes) and all(x is y for x, y in zip(a.nodes, b.nodes))
            and a.inputs == b.inputs and a.weights == b.weights and a.outputs == b.outputs and bool(a.specs))
