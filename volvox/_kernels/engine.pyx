# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False, embedsignature=True
"""volvox's CPU engine: step plans and the one runner that executes them.

Python plans, native runs. A *step* is one kernel call over typed arguments (engine/steps.pxi),
cut into work items; a *plan* is an array of steps over buffers its builder keeps alive
(volvox/runtime/plan.py). The runner (engine/runner.pxi) executes a plan
in one nogil call, on the calling thread and the team's workers (engine/team.pxi). A per-op call (volvox.cpu) is a plan of one or two
steps built on the stack (engine/per_op.pxi): every kernel's work split is written once, in its
step kind.

Kernels come from the ISA tier modules (tier_<name>.pyx) through a table of function pointers;
the engine itself is built with baseline flags, as are the few small kernels it owns
(engine/small_ops.pxi: elementwise, pooling and copy loops that must give numpy's exact bits).
Everything here trusts its arguments: volvox.cpu and the plan builder check dtypes, shapes
and addresses once at the Python boundary.
"""

include "engine/tiers.pxi"
include "engine/small_ops.pxi"
include "engine/quantized_ops.pxi"
include "engine/steps.pxi"
include "engine/runner.pxi"
include "engine/team.pxi"
include "engine/plan.pxi"
include "kernels/ssm.pxi"
include "kernels/conv_backward.pxi"
include "engine/per_op.pxi"
include "engine/backward.pxi"
