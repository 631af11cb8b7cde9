"""The graph compiler: pure graph rewrites run once at load, before the executor plans.

Each pass takes (graph, weights) and returns a new (graph, weights) computing the
same outputs; ``compile_graph`` runs the enabled passes in order and reports
what each changed. ``volvox.load(..., optimize=False)`` runs none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import UnsupportedError
from ..graph import Graph
from .fuse_conv import elide_noop_reshapes, fuse_conv_activation
from .fuse_linear import fuse_swiglu, merge_sibling_linears

Pass = Callable[[Graph, dict[str, Any]], tuple[Graph, dict[str, Any]]]

# In order: swiglu first, so gate/up pairs are taken before sibling merging sees them.
PASSES: dict[str, Pass] = {
    "elide_noop_reshapes": elide_noop_reshapes,
    "fuse_conv_activation": fuse_conv_activation,
    "fuse_swiglu": fuse_swiglu,
    "merge_sibling_linears": merge_sibling_linears,
}


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


def compile_graph(graph: Graph, weights: dict[str, Any], passes: list[str] | None = None
                  ) -> tuple[Graph, dict[str, Any], CompileReport]:
    """Run ``passes`` (default: all, in registry order) over a validated graph."""
    names = list(PASSES) if passes is None else passes
    unknown = [n for n in names if n not in PASSES]
    if unknown:
        raise UnsupportedError(f"unknown compiler passes {unknown} (known: {', '.join(PASSES)})")
    report = CompileReport()
    for name in names:
        before = len(graph.nodes)
        graph, weights = PASSES[name](graph, weights)
        graph.validate()
        report.steps.append((name, before, len(graph.nodes)))
    return graph, weights, report
