"""llama.cpp (llama-cpp-python) as the peer the benchmarks and tests compare against.

llama-cpp-python 0.3.36 built natively on a CPU with AMX repacks block-quantized weights into its AMX
buffer type and then segfaults in ``llama_decode`` (every Q4_*/Q8_0/K-quant file). Loading without
the extra CPU buffer types (``use_extra_bufts = False``) runs ggml's ordinary AVX-512 / AVX2 kernels,
which is also what llama.cpp runs on a CPU without AMX; llama-cpp-python exposes no switch for AMX
alone. ``use_plain_cpu_buffers()`` makes every ``llama_cpp.Llama`` created afterwards in this process
load that way; ``server_command`` starts its server
the same way.
"""

from __future__ import annotations

from pathlib import Path


def use_plain_cpu_buffers() -> bool:
    """Make llama-cpp-python load models without its extra CPU buffer types; False if it is not installed."""
    try:
        import llama_cpp.llama_cpp as lib
    except ImportError:
        return False
    default = lib.llama_model_default_params
    if getattr(default, "volvox_plain_buffers", False):
        return True

    def params():
        p = default()
        p.use_extra_bufts = False
        return p
    params.volvox_plain_buffers = True
    lib.llama_model_default_params = params
    return True


def server_command(python: str, args: list[str]) -> list[str]:
    """The command line that starts ``llama_cpp.server`` with ``args``, use_plain_cpu_buffers() applied."""
    here = str(Path(__file__).resolve().parent)
    code = (f"import sys, runpy; sys.path.insert(0, {here!r}); import llama_peer; "
            "llama_peer.use_plain_cpu_buffers(); sys.argv[0] = 'llama_cpp.server'; "
            "runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)")
    return [python, "-c", code, *args]
