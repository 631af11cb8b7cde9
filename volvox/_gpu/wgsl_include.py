"""WGSL includes: a kernel's line ``// #include "include/<file>.wgsl"`` stands for that file's text.

WGSL has no include directive, so the shared parts of several kernels (the packed weight reader of
matmul_q / gemv_q / embedding_q, the fused activations of the matmuls) live once in shaders/include/
and a kernel names them in a comment line, which keeps every kernel file valid WGSL on its own
terms. The line is replaced by the named file (a path relative to the including file; includes
nest; a cycle or a missing file is an error naming the chain). Both consumers expand the same way
through this module: the runtime's WGSL loader (``backend.wgsl_source``, ``kernel_info``) and
tools/compile_shaders.py, which loads this file by path so it needs no built volvox. Only standard
library imports here, for that reason.
"""

from __future__ import annotations

import re
from pathlib import Path

INCLUDE = re.compile(r'^[ \t]*//[ \t]*#include[ \t]+"([^"]+)"[ \t]*$')


class IncludeError(Exception):
    """An include line names a missing file or includes itself; the message names the chain."""


def wgsl_lines(path: Path, _chain: tuple[Path, ...] = ()) -> list[tuple[str, Path, int]]:
    """The lines of WGSL file ``path`` (each ending in a newline) with every include line replaced by
    the included file's lines, each with the file and 1-based line number it came from."""
    chain = _chain + (path,)
    if path.resolve() in {p.resolve() for p in _chain}:
        raise IncludeError(f"{' -> '.join(str(p) for p in chain)}: includes itself")
    if not path.is_file():
        where = f"{_chain[-1]}: " if _chain else ""
        raise IncludeError(f"{where}no WGSL file {path}")
    out: list[tuple[str, Path, int]] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = INCLUDE.match(line)
        if match:
            out += wgsl_lines(path.parent / match.group(1), chain)
        else:
            out.append((line + "\n", path, number))
    return out


def expand_wgsl(path: Path) -> str:
    """The WGSL of ``path`` with its includes expanded: what naga compiles and webgpu runs."""
    return "".join(line for line, _, _ in wgsl_lines(path))
