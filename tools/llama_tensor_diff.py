"""Where volvox's bits part from llama.cpp's: the first graph node whose output llama.cpp never computed.

    python tools/llama_tensor_diff.py FILE.gguf [--tokens 12,7,200] [--row N]

Both engines decode the tokens one at a time from an empty context (one thread, f32 KV cache, no
flash attention, as tests/architectures/test_gguf_quant_matrix.py runs llama.cpp). At step ``--row``
(default: the last token) llama.cpp hands every f32 tensor of its graph to an eval callback
(``cb_eval``) as it is computed, and volvox's per-op executor records every node's outputs. Going
through volvox's nodes in order, each output (or each half of a fused pair, e.g. gate and up) is
looked for among llama.cpp's tensors of its size; the first with no bit-equal one is printed with the
llama.cpp tensor nearest to it. Inputs of that node that were found equal locate the op that differs.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_peer  # noqa: E402


class GGMLTensor(ctypes.Structure):
    """ggml.h's struct ggml_tensor (GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64, GGML_MAX_SRC 10, GGML_MAX_NAME 64)."""

    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64),
                ("extra", ctypes.c_void_p), ("padding", ctypes.c_char * 8)]


def llama_cpp_tensors(path: str, tokens: list[int], row: int) -> list[tuple[str, np.ndarray]]:
    """(name, values) of every f32 tensor llama.cpp computes in decode step ``row`` (values flattened
    in ggml's element order, strides followed)."""
    import llama_cpp
    import llama_cpp.llama_cpp as lib

    llama_peer.use_plain_cpu_buffers()
    seen: list[tuple[str, np.ndarray]] = []
    recording = [False]

    @lib.ggml_backend_sched_eval_callback
    def on_tensor(t, ask, _user):
        if ask or not recording[0]:
            return True
        tensor = ctypes.cast(t, ctypes.POINTER(GGMLTensor)).contents
        if tensor.type != 0:  # GGML_TYPE_F32 only
            return True
        ne, nb = list(tensor.ne), list(tensor.nb)
        span = sum((n - 1) * b for n, b in zip(ne, nb)) + 4
        raw = np.frombuffer((ctypes.c_char * span).from_address(tensor.data), np.float32)
        values = np.lib.stride_tricks.as_strided(raw, shape=ne[::-1], strides=nb[::-1])  # (ne3, ne2, ne1, ne0)
        seen.append((tensor.name.decode(), values.reshape(-1).copy()))
        return True

    default = lib.llama_context_default_params

    def params():
        p = default()
        p.cb_eval = on_tensor
        return p
    lib.llama_context_default_params = params
    try:
        llama = llama_cpp.Llama(model_path=path, n_ctx=256, n_batch=64, verbose=False, n_threads=1,
                                type_k=0, type_v=0, flash_attn=False)
        for i, token in enumerate(tokens[:row + 1]):
            recording[0] = i == row
            llama.eval([token])
        llama.close()
    finally:
        lib.llama_context_default_params = default
    return seen


def volvox_outputs(path: str, tokens: list[int], row: int) -> list[tuple[str, str, np.ndarray]]:
    """(node id, op, output values) of every node output of volvox's decode step ``row``, run by the
    per-op executor (a decode plan gives its bits: tests/runtime/test_native_plan.py)."""
    import volvox
    from volvox.runtime.executor import Executor

    seen: list[tuple[str, str, np.ndarray]] = []
    walk = Executor._walk

    def recorded(step, fn, into):
        def record(out):
            for o in out if isinstance(out, tuple) else (out,):
                if isinstance(o, np.ndarray) and o.dtype == np.float32:
                    seen.append((step.node_id, step.op, o.reshape(-1).copy()))
            return out
        return (lambda *a: record(fn(*a))), (None if into is None else lambda *a: record(into(*a)))

    def recording_walk(self, ctx, env, buffers):
        kept = [(st, st.fn, st.into) for st in self.steps]
        for st, fn, into in kept:
            st.fn, st.into = recorded(st, fn, into)
        try:
            return walk(self, ctx, env, buffers)
        finally:
            for st, fn, into in kept:
                st.fn, st.into = fn, into

    with volvox.load(path) as lm:
        lm._decode_plan = False  # every step through the per-op executor
        session = lm.new_session()
        for token in tokens[:row]:
            session.forward([token])
        Executor._walk = recording_walk
        try:
            session.forward([tokens[row]])
        finally:
            Executor._walk = walk
    return seen


def first_parting(ours, theirs) -> str:
    """The report: the first volvox output (or half of one) equal to none of llama.cpp's tensors."""
    by_size: dict[int, list[tuple[str, np.ndarray]]] = {}
    for name, values in theirs:
        by_size.setdefault(values.size, []).append((name, values))
    lines = []
    for node, op, values in ours:
        for part in ([values] if values.size in by_size else np.split(values, 2) if values.size % 2 == 0 else []):
            same = by_size.get(part.size, [])
            if any(np.array_equal(part, v) for _, v in same):
                lines.append(f"equal   {node} ({op}), {part.size} values")
                continue
            if not same:
                continue
            name, v = min(same, key=lambda nv: int(np.sum(nv[1] != part)))
            gap = float(np.max(np.abs(v.astype(np.float64) - part)))
            lines.append(f"PARTS   {node} ({op}): nearest llama.cpp tensor {name!r}, {int(np.sum(v != part))} of "
                         f"{part.size} values differ, max |diff| {gap:.3g}")
            return "\n".join(lines)
    return "\n".join(lines + ["every output equals a llama.cpp tensor"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a GGUF file both engines run")
    ap.add_argument("--tokens", default="1,2,3,4", help="comma-separated token ids, decoded one at a time")
    ap.add_argument("--row", type=int, default=None, help="the decode step to compare (default: the last)")
    args = ap.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    row = len(tokens) - 1 if args.row is None else args.row
    print(first_parting(volvox_outputs(args.model, tokens, row), llama_cpp_tensors(args.model, tokens, row)))


if __name__ == "__main__":
    main()
