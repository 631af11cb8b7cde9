"""Vision plans: a whole image model's forward pass, run by C in one call.

Python plans, native runs, as native_plan.py does for a decode step. The per-op executor
crosses from Python into a kernel once per node (validation, output allocation, an OpenMP
region: tens of microseconds each, as much as a small conv's arithmetic). For a compiled
graph whose every shape is fixed, this module lowers the graph once into kernel steps
(csrc/vx_plan.h) over one lifetime-planned arena (compile/memory.pack_arena: float32 offsets,
int8 tensors rounded up to whole floats); ``VisionPlan.run`` points the steps that read an
input at the caller's array (or copies it in: ``_feed``), runs every step in one nogil call
inside one OpenMP region, and copies the outputs out. The nodes are lowered twice: the team's
steps, and the same steps with their work split for one thread (small maps are not cut into
pieces for a second thread that a one-thread run does not have).

Weights are packed once at plan build through the per-op kernels' own packers and cache
(``cpu.conv_weights``), and each step runs the same tile functions on the same work
items (blocks of 64 output pixels for im2col convs, output rows for depthwise convs and
pools) as the per-op kernels, so a plan's outputs equal the per-op executor's bit for bit
(tests/test_vision_plan.py). A fused depthwise -> 1x1 pair (``dwpw_conv2d`` / ``qdwpw_conv2d``,
made by the compiler pass ``fuse_depthwise_pointwise``) runs as one DWPW (float32) or QDWPW (int8)
step: its depthwise output rows pass through per-thread scratch, never the arena. Ops whose fast
path is numpy with no C twin computing the same bits (sigmoid's tanh, softmax's exp, matmul's
BLAS, reduce_mean's pairwise sums) run as "islands": their numpy function on arena views between
native step ranges. A graph with an op, shape or dtype the plan does not lower (see ``LOWER``) keeps the per-op executor:
``PlanHook`` tries once and remembers. A graph with symbolic input dims (a text line's width)
gets a plan per input shape, the graph's shapes inferred for it; the last PLANS_PER_GRAPH are kept.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from typing import Any

import numpy as np

from volvox import cpu
from volvox.compile.memory import LiveRange, pack_arena
from volvox.errors import VolvoxError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ops import get_op
from volvox.ops.conv import conv_kernel_args, native_conv, window_params
from volvox.ops.dwpw import PAIRED, split, split_expanded
from volvox.ops.int8 import INT8_MAX, INT8_MIN, qsoftmax_table
from volvox.runtime.native_plan import Unsupported, _addr, _aligned, _engine
from volvox.runtime.pacing import Pacer
from volvox.ops import validate

_DTYPES = {"float32": np.float32, "int8": np.int8}  # activation dtypes a plan holds
_ACT = _engine.ACTIVATIONS                             # fused activations of the conv steps
_PIXELS = _engine.CONV_STEP_PIXELS                          # output pixels per im2col work item
_TILE = 8                                               # pixels per GEMM register tile (SG_MR, QG_MR)
BLOCKS_PER_THREAD = 4                                   # conv blocks per thread on a map of a few
DWPW_SPLIT_BYTES = 256 << 10                            # 1x1 weights past which a float32 pair runs unfused
EXPAND_BAND_BYTES = 384 << 10                           # expanded rows an EXDWPW band computes (in L2)
# Multiply-adds per thread below which a plan runs on fewer threads (waking a second thread
# costs ~10 us). 2-thread gain on a quiet machine (2 cores, runs back to back for 2 s, medians):
# person detector (7.5M MACs) 0.37 -> 0.29 ms, BlazeFace (31M) 1.09 -> 1.08 ms (its steps are
# small and memory-bound), EfficientNet-Lite0 (385M) 8.4 -> 6.7 ms; with one CPU-bound process
# beside it (the policy below) 0.37 -> 0.37, 1.08 -> 1.08 and 9.0 -> 8.8 ms.
MACS_PER_THREAD = 2 << 20
# Under load a team collapses instead: a stalled multi-thread run sends the next ones to one
# thread (runtime/pacing.py).


def _ptr(a: np.ndarray | None) -> int:
    return 0 if a is None else _addr(a)


def _direct(window: tuple, wshape: tuple) -> bool:
    """Whether a dense conv (window: x shape + cpu._conv_geometry) is 1x1, stride 1, unpadded:
    its GEMM reads the input rows themselves."""
    geo = window[4:]
    return wshape[1] == wshape[2] == 1 and geo[4:6] == (1, 1) and geo[8:] == (0, 0) and geo[:2] == window[1:3]


class VisionPlan:
    """A compiled graph with static shapes as native steps (see the module doc)."""

    def __init__(self, graph: Graph, weights: dict[str, Any]):
        self.graph = graph
        self.threads = max(cpu.get_num_threads(), os.cpu_count() or 1)  # scratch is sized for this many
        self._weights = weights
        self._keep: list[Any] = []  # every array a step points into
        self._lock = threading.Lock()
        self.runs = 0  # forward passes run so far
        self.macs = 0  # multiply-adds of one forward pass (convs and matrix products)
        self._lower()
        self.useful_threads = max(1, self.macs // MACS_PER_THREAD)
        self.pacer = Pacer()  # one thread after a stalled team run (runtime/pacing.py)

    # ----------------------------------------------------------------------- lowering
    def _lower(self) -> None:
        graph, weights = self.graph, self._weights
        for node in graph.nodes:
            if node.op not in LOWER:
                raise Unsupported(f"op {node.op!r} (node {node.id!r})")
        alias = {n.outputs["y"]: n.inputs["x"] for n in graph.nodes
                 if n.op == "reshape" and n.inputs["x"] not in weights}

        def root(name: str) -> str:
            while name in alias:
                name = alias[name]
            return name

        self._root = root
        last: dict[str, int] = {}  # tensor -> index of the last node reading it
        for i, node in enumerate(graph.nodes):
            for name in node.inputs.values():
                if name not in weights:
                    last[root(name)] = i
        for name in graph.outputs:
            last[root(name)] = len(graph.nodes)
        skip = {n.id for n in graph.nodes if n.op == "reshape" and n.outputs["y"] in alias}  # no step
        # each stored tensor is alive from its writer to its last reader (inputs from the start)
        buffers = [LiveRange(s.name, 4 * self._floats(s.name), -1, last.get(s.name, -1)) for s in graph.inputs]
        buffers += [LiveRange(name, 4 * self._floats(name), i, max(i, last.get(name, i)))
                    for i, node in enumerate(graph.nodes) if node.id not in skip for name in node.outputs.values()]
        offsets, nbytes = pack_arena(buffers)
        self._home = {name: off // 4 for name, off in offsets.items()}  # tensor -> float offset in the arena
        self.arena = _aligned(nbytes // 4, np.float32)  # (floats,) every activation of one forward pass
        self.arena_bytes = nbytes
        self._buffers: dict[str, np.ndarray] = {}  # node id -> a plan buffer of its (both lowerings share it)
        self._packs: dict[tuple, Any] = {}  # (weight name, depthwise) -> its packing (_packed)
        # graph inputs: (addresses of their arena bytes) each, and which must still be copied in (see _feed)
        self._input_bytes = [(_addr(self.arena) + 4 * self._home[s.name],
                              _addr(self.arena) + 4 * (self._home[s.name] + self._floats(s.name))) for s in graph.inputs]
        self._copied = {i for i, s in enumerate(graph.inputs) if s.name in {root(o) for o in graph.outputs}}
        nodes = [n for n in graph.nodes if n.id not in skip]
        self.solo_steps = self._lower_nodes(nodes, 1)
        islands, ports = [i[0] for i in self.islands], self._ports
        if self.threads > 1:  # the team's steps: the same steps, their work split for the team
            self._lower_nodes(nodes, self.threads)
            assert [i[0] for i in self.islands] == islands and self._ports == ports
            assert len(self.steps) == len(self.solo_steps)
        self.inputs = [self._tensor(s.name) for s in graph.inputs]
        self.outputs = {name: self._tensor(name) for name in graph.outputs}

    def _lower_nodes(self, nodes: list[Node], split: int) -> Any:
        """Every node's steps into a new ``self.steps``, work items split for ``split`` threads
        (steps, islands and node ids are the same whatever the split); returns the steps."""
        self.split, self.macs = split, 0
        self.steps = _engine.StepPlan(2 * len(self.graph.nodes) + sum(len(n.inputs) for n in self.graph.nodes), 0)
        self.step_nodes: list[str] = []  # (steps,) the node id each step runs
        self.islands: list[tuple] = []  # (steps before it, fn, params, input arrays, output view): numpy nodes
        self._ports: list[tuple] = []  # (step, port 0-2: a b c, graph input, byte offset): steps reading an input
        inputs = [s.name for s in self.graph.inputs]
        for node in nodes:
            roots = {self._root(v) for v in node.inputs.values()}
            self._reads = [i for i, name in enumerate(inputs) if name in roots]  # graph inputs it reads
            LOWER[node.op](self, node)
            self.step_nodes += [node.id] * (len(self.steps) - len(self.step_nodes))
        return self.steps

    def _add(self, kind: str, **fields) -> None:
        """Append a step of ``kind`` (a StepPlan method); note where it reads a graph input (one of its
        three input operands), so that a run can point it at the caller's array (_feed). An input its
        output or scratch lies in is copied in."""
        getattr(self.steps, kind)(**fields)
        step = len(self.steps) - 1
        operands = self.steps.operands(step) + (fields.get("scratch", 0),)
        for i in self._reads:
            lo, hi = self._input_bytes[i]
            for port, address in enumerate(operands):
                if lo <= address < hi:
                    if port < 3:
                        self._ports.append((step, port, i, address - lo))
                    else:
                        self._copied.add(i)

    def _packed(self, name: str, depthwise: bool, pack) -> Any:
        """Weight ``name``'s packing, ``pack()`` once per plan (both lowerings read it; a
        writeable weight is not in the kernels' cache)."""
        key = (name, depthwise)
        if key not in self._packs:
            self._packs[key] = pack()
        return self._packs[key]

    def _floats(self, name: str) -> int:
        """Arena floats of activation ``name`` (static shape, float32 or int8), else Unsupported."""
        spec = self.graph.specs[name]
        if spec.dtype not in _DTYPES or not all(isinstance(d, int) for d in spec.shape):
            raise Unsupported(f"tensor {spec.describe()}: not a static float32 / int8 shape")
        return -(-int(np.prod(spec.shape, dtype=np.int64)) * np.dtype(_DTYPES[spec.dtype]).itemsize // 4)

    def _tensor(self, name: str) -> np.ndarray:
        """The arena view holding activation ``name``, in its shape and dtype."""
        spec = self.graph.specs[name]
        dtype = np.dtype(_DTYPES[spec.dtype])
        start = self._home[self._root(name)]
        n = int(np.prod(spec.shape, dtype=np.int64))
        raw = self.arena[start:start + -(-n * dtype.itemsize // 4)].view(np.uint8)
        return raw[:n * dtype.itemsize].view(dtype).reshape(spec.shape)

    def _in(self, node, port: str) -> np.ndarray:
        """An input's array: the weight itself (kept alive) or its arena view."""
        name = node.inputs[port]
        if name in self._weights:
            w = self._weights[name]
            self._need(node, isinstance(w, np.ndarray), f"{port} is not a numpy weight")
            w = np.ascontiguousarray(w)
            self._keep.append(w)
            return w
        return self._tensor(name)

    def _opt(self, node, port: str) -> np.ndarray | None:
        return self._in(node, port) if port in node.inputs else None

    def _y(self, node) -> np.ndarray:
        return self._tensor(node.outputs["y"])

    def _need(self, node, cond: bool, what: str) -> None:
        if not cond:
            raise Unsupported(f"node {node.id!r} ({node.op}): {what}")

    def _scratch(self, per_thread: int, dtype) -> np.ndarray:
        s = _aligned(max(self.split * per_thread, 1), dtype)  # (split, per_thread) im2col rows
        self._keep.append(s)
        return s

    def _keep_all(self, *arrays) -> None:
        self._keep.extend(a for a in arrays if a is not None)

    # ------------------------------------------------------------------------ convs
    def _conv_operands(self, node, x: np.ndarray, check_output: bool = True) -> tuple:
        """(w, packed w, bias, depthwise, window keywords) of a conv node reading ``x``, checked
        against its output's spec (``check_output``: a fused pair's depthwise half has none; the
        fused node's shape rule checked it); counts its multiply-adds."""
        p, w = node.params, self._in(node, "weight")
        self._need(node, x.ndim == 4 and w.ndim == 4 and native_conv(x, w, p), "not a dense or depthwise-1 conv")
        args = conv_kernel_args(p)
        dtype, bias_dtype = (np.int8, np.int32) if node.op == "qconv2d" else (np.float32, np.float32)
        _, w, bias, depthwise = cpu._conv_operands(x, w, self._opt(node, "bias"), args["groups"], dtype,
                                                       bias_dtype, node.id)
        geo = cpu._conv_geometry(x, w, args["strides"], args["dilations"], args["pads"], node.id)
        shape = (x.shape[0], geo[0], geo[1], w.shape[0])  # (N, OH, OW, cout)
        self._need(node, not check_output or tuple(self.graph.specs[node.outputs["y"]].shape) == shape, "output shape")
        self.macs += int(np.prod(shape)) * w.shape[1] * w.shape[2] * (1 if depthwise else x.shape[3])
        packed = self._packed(node.inputs["weight"], depthwise, lambda: cpu.conv_weights(w, depthwise))
        self._keep_all(w, bias, packed)
        return w, packed, bias, depthwise, dict(window=tuple(x.shape) + geo, cout=w.shape[0])

    def _blocks(self, pixels: int, cout: int) -> dict:
        """Work items of a CONV_F32 / QCONV step over ``pixels`` output pixels: ``pixels`` per
        block and ``cparts`` per block. One thread, or a map of many blocks, takes blocks of
        _PIXELS; a map of a few (a 14x14 map is 3 blocks and 4 pixels) takes blocks of whole
        _TILE-pixel GEMM tiles, about BLOCKS_PER_THREAD per thread (each thread's share of a 14x14
        map at 2 threads: 96 and 100 pixels, not 128 and 68); a map of one block splits its
        output channels instead (_cparts). Each output sums the same products in the same order
        whatever its block (a GEMM row's dot products), so the plan keeps the per-op bits."""
        per = _PIXELS
        if self.split > 1 and pixels > _PIXELS:
            tiles = -(-pixels // _TILE)
            per = min(_PIXELS, _TILE * -(-tiles // (BLOCKS_PER_THREAD * self.split)))
        return dict(pixels=per, cparts=self._cparts(-(-pixels // per), cout))

    def _cparts(self, items: int, cout: int, per_thread: int = 2) -> int:
        """Output-channel parts per work item (64-pixel block, row, or row band) of a conv step
        (vx_plan.h; a one-thread run keeps one): ``per_thread`` items per thread when the unsplit
        ones are fewer (a 7x7 map is one pixel block, 7 rows). Depthwise -> 1x1 steps ask for
        one: each part computes its depthwise rows again. Parts are whole 32-channel panels; when
        those would not fall evenly on the threads (6 panels in parts of 2: 4 and 2 per thread),
        each panel is a part."""
        want = per_thread * self.split
        if items >= want:
            return 1
        panels = -(-cout // 32)
        parts = min(panels, -(-want // items))
        per = -(-panels // parts)
        even = per * -(-panels // per) == panels and -(-panels // per) * items % self.split == 0
        return parts if even else panels

    def _act(self, node) -> int:
        """VX_ACT_* of a float32 conv's (or add_n's) fused activation, else Unsupported."""
        act = node.params.get("activation", "none")
        self._need(node, act in _ACT, f"activation {act!r}")
        return _ACT[act]

    def _requant(self, node, cout: int, bias) -> tuple:
        """The step requant tuple (bias, multiplier, shift addresses, zp_in, zp_out, lo, hi) of an
        int8 node with ``cout`` output channels (cpu.requant_args checks it)."""
        p = node.params
        mult, sh, zps = cpu.requant_args(
            self._in(node, "multiplier"), self._in(node, "shift"), cout, int(p["input_zero_point"]),
            int(p["output_zero_point"]), int(p.get("act_min", INT8_MIN)), int(p.get("act_max", INT8_MAX)))
        self._keep_all(mult, sh)
        return (_ptr(bias), _addr(mult), _addr(sh)) + zps

    def _conv(self, node) -> None:
        int8 = node.op == "qconv2d"
        x, y = self._in(node, "x"), self._y(node)
        w, packed, bias, depthwise, window = self._conv_operands(node, x)
        cout, kk = w.shape[0], w.shape[1] * w.shape[2] * x.shape[3]
        if int8:
            window["requant"] = self._requant(node, cout, bias)
            zps = window["requant"][3:]
            if depthwise:
                self._add("qdwconv", x=_addr(x), w=_addr(packed), y=_addr(y), **window)
                return
            k4 = (kk + 3) // 4 * 4
            scratch = self._scratch(_PIXELS * k4, np.uint8)
            wsum = self._fold_zero_point(window, bias, packed[1], zps[0])
            self._add("qconv", x=_addr(x), w=_addr(packed[0]), wsum=_ptr(wsum), y=_addr(y),
                      scratch=_addr(scratch), ldc=k4, per_thread=_PIXELS * k4,
                      **self._blocks(y.size // cout, cout), **window)
            return
        if depthwise:
            self._add("dwconv_f32", x=_addr(x), w=_addr(packed), bias=_ptr(bias), y=_addr(y),
                      act=self._act(node), **window)
            return
        direct = _direct(window["window"], w.shape)
        per = 0 if direct else _PIXELS * kk
        scratch = self._scratch(per, np.float32)
        self._add("conv_f32", x=_addr(x), w=_addr(packed), bias=_ptr(bias), y=_addr(y),
                  scratch=_addr(scratch), ldc=0 if direct else kk, per_thread=per, act=self._act(node),
                  **self._blocks(y.size // cout, cout), **window)

    def _pair_operands(self, op: str, inputs: dict, params: dict, node_id: str, x: np.ndarray) -> tuple:
        """(dw node, its packed weights, bias, window keywords, pw node, its OHWI weight, packed
        weights, bias, the depthwise output's shape as an empty array) of a fused depthwise -> 1x1
        pair (ops/dwpw.py) reading ``x``, checked."""
        conv = PAIRED[op][0]
        (dw_in, dw_params), (pw_in, pw_params) = split(op, inputs, params)
        dw = Node(node_id, conv, dw_in, {"y": f"{node_id}/depthwise"}, dw_params)
        pw = Node(node_id, conv, {"x": dw.outputs["y"], **pw_in}, {"y": f"{node_id}/pointwise"}, pw_params)
        _, dw_packed, dw_bias, depthwise, window = self._conv_operands(dw, x, check_output=False)
        self._need(dw, depthwise, "not a depthwise conv")
        mid = np.empty((x.shape[0],) + window["window"][4:6] + (window["cout"],),  # (N, OH, OW, C) its shape only
                       np.float32 if conv == "conv2d" else np.int8)
        w, packed, bias, _, pw_window = self._conv_operands(pw, mid, check_output=False)
        self._need(pw, _direct(pw_window["window"], w.shape), "not a 1x1 stride-1 unpadded conv")
        self._need(pw, conv == "conv2d" or mid.shape[3] % 4 == 0, "int8 channels not a multiple of 4")
        return dw, dw_packed, dw_bias, window, pw, w, packed, bias, mid

    def _dwpw(self, node) -> None:
        """A fused depthwise -> 1x1 pair (ops/dwpw.py) as one DWPW (float32) or QDWPW (int8) step:
        depthwise output rows go through the thread's scratch into the 1x1 conv's packed GEMM, the
        same tiles on the same rows as the two convs' own steps (a float32 pair with 1x1 weights
        past DWPW_SPLIT_BYTES: the two convs' steps, the middle tensor in a buffer of the plan's)."""
        x = self._in(node, "x")
        dw, dw_packed, dw_bias, window, pw, w, packed, bias, mid = self._pair_operands(
            node.op, node.inputs, node.params, node.id, x)
        self._need(node, tuple(self.graph.specs[node.outputs["y"]].shape) == mid.shape[:3] + (w.shape[0],),
                   "output shape")
        row, rows = mid.shape[2] * mid.shape[3], mid.shape[0] * mid.shape[1]
        if PAIRED[node.op][0] == "conv2d" and w.size * 4 > DWPW_SPLIT_BYTES:
            # 1x1 weights this large (7x7 maps, 1152 -> 192 channels: 885 KB) would stream from
            # beyond L2 once per depthwise row: two steps instead, the depthwise rows into a buffer of
            # the plan's own, then one GEMM over the map whose channels the threads split
            if node.id not in self._buffers:
                self._buffers[node.id] = np.empty(mid.shape, np.float32)
            mid = self._buffers[node.id]
            self._add("dwconv_f32", x=_addr(x), w=_addr(dw_packed), bias=_ptr(dw_bias), y=_addr(mid),
                      act=self._act(dw), **window)
            self._add("conv_f32", x=_addr(mid), w=_addr(packed), bias=_ptr(bias), y=_addr(self._y(node)),
                      scratch=_addr(self._scratch(0, np.float32)), act=self._act(pw),
                      window=mid.shape + mid.shape[1:3] + (1, 1, 1, 1, 1, 1, 0, 0), cout=w.shape[0],
                      **self._blocks(rows * mid.shape[2], w.shape[0]))
            return
        if PAIRED[node.op][0] == "conv2d":  # a row per item: the most items to balance
            self._add("dwpw_f32", x=_addr(x), w=_addr(dw_packed), bias=_ptr(dw_bias),
                      y=_addr(self._y(node)), scratch=_addr(self._scratch(row, np.float32)), per_thread=row,
                      act=self._act(dw), pointwise=(_addr(packed), _ptr(bias), w.shape[0], self._act(pw), 0),
                      cparts=self._cparts(rows, w.shape[0], 1), **window)
            return
        # int8: bands of rows, a GEMM on about as many pixels as a QCONV work item (requantization
        # is prepared per GEMM call, and a row of a small map is a few pixels); a map of fewer
        # bands than threads takes one band per thread (a 6x6 map at 2 threads: two of three rows,
        # not one of six whose output channels the threads split, each computing every row)
        band = -(-_PIXELS // mid.shape[2])
        if -(-rows // band) < self.split:
            band = -(-rows // self.split)
        window["requant"] = self._requant(dw, mid.shape[3], dw_bias)
        pw_window = dict(requant=self._requant(pw, w.shape[0], bias))
        wsum = self._fold_zero_point(pw_window, bias, packed[1], pw_window["requant"][3])
        self._add("qdwpw", x=_addr(x), w=_addr(dw_packed), y=_addr(self._y(node)),
                  scratch=_addr(self._scratch(band * row, np.int8)), per_thread=band * row, band=band,
                  cparts=self._cparts(-(-rows // band), w.shape[0], 1),
                  pointwise=(_addr(packed[0]), 0, w.shape[0], 0, _ptr(wsum)), pw_requant=pw_window["requant"],
                  **window)

    def _expand_dwpw(self, node) -> None:
        """An expand_dwpw_conv2d (ops/dwpw.py) as one EXDWPW_F32 step: bands of depthwise output rows,
        each computing the expanded rows it reads into the thread's scratch (about
        EXPAND_BAND_BYTES of them), then each depthwise row and its 1x1 conv as DWPW does; the
        expanded tensor never reaches memory."""
        (ex_in, ex_params), mid_name, pair_in, pair_params = split_expanded(node.inputs, node.params)
        ex = Node(node.id, "conv2d", ex_in, {"y": mid_name}, ex_params)
        x = self._in(ex, "x")
        w_ex, packed_ex, bias_ex, _, ex_window = self._conv_operands(ex, x, check_output=False)
        self._need(ex, _direct(ex_window["window"], w_ex.shape), "not a 1x1 stride-1 unpadded conv")
        expanded = np.empty(x.shape[:3] + (w_ex.shape[0],), np.float32)  # its shape only
        dw, dw_packed, dw_bias, window, pw, w, packed, bias, mid = self._pair_operands(
            "dwpw_conv2d", pair_in, pair_params, node.id, expanded)
        self._need(node, tuple(self.graph.specs[node.outputs["y"]].shape) == mid.shape[:3] + (w.shape[0],),
                   "output shape")
        n, h, wd, c = expanded.shape
        kh, sh, dh = window["window"][6], window["window"][8], window["window"][10]
        # band: rows whose expanded input rows fit EXPAND_BAND_BYTES (a band recomputes the kh - sh
        # rows it shares with the one before: the more rows, the fewer again)
        fit = max(EXPAND_BAND_BYTES // (wd * c * 4), (kh - 1) * dh + 1)
        band = max(1, min(mid.shape[1], ((fit - (kh - 1) * dh - 1) // sh) + 1))
        band = min(band, -(-mid.shape[1] * n // self.split))  # a band per thread at least
        per = ((band - 1) * sh + (kh - 1) * dh + 1) * wd * c + mid.shape[2] * c  # (rows, w, C) + (ow, C)
        self._add("exdwpw_f32", in_channels=x.shape[3], x=_addr(x), w=_addr(dw_packed), bias=_ptr(dw_bias),
                  y=_addr(self._y(node)), scratch=_addr(self._scratch(per, np.float32)), per_thread=per,
                  band=band, act=self._act(dw),
                  pointwise=(_addr(packed), _ptr(bias), w.shape[0], self._act(pw), 0),
                  expand=(_addr(packed_ex), _ptr(bias_ex), c, self._act(ex)), **window)

    def _qlinear(self, node) -> None:
        """int8 fully connected as a 1x1 qconv over (M, 1, 1, K) (exact integers, as qlinear's fast path)."""
        x, w, y = self._in(node, "x"), self._in(node, "weight"), self._y(node)
        self._need(node, w.ndim == 2 and x.shape[-1] == w.shape[1] and w.dtype == np.int8, "weight shape")
        n, k = w.shape
        m = x.size // k
        w4 = w.reshape(n, 1, 1, k)
        bias = self._opt(node, "bias")
        self._need(node, bias is None or (bias.dtype == np.int32 and bias.shape == (n,)), "bias")
        requant = self._requant(node, n, bias)
        packed, wsum = self._packed(node.inputs["weight"], False, lambda: cpu.conv_weights(w4, False))
        self.macs += m * n * k
        k4 = (k + 3) // 4 * 4
        scratch = self._scratch(_PIXELS * k4, np.uint8)
        self._keep_all(w4, bias, packed, wsum)
        window = dict(window=(m, 1, 1, k, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0), cout=n, requant=requant)
        wsum = self._fold_zero_point(window, bias, wsum, requant[3])
        self._add("qconv", x=_addr(x), w=_addr(packed), wsum=_ptr(wsum), y=_addr(y), scratch=_addr(scratch),
                  ldc=k4, per_thread=_PIXELS * k4, **self._blocks(m, n), **window)

    def _fold_zero_point(self, window: dict, bias, wsum: np.ndarray, zp_in: int) -> np.ndarray | None:
        """cpu.fold_zero_point into the step's requantization bias; returns the row sums the
        step still needs (None once folded)."""
        folded, wsum = cpu.fold_zero_point(bias, wsum, zp_in)
        if wsum is None:
            self._keep_all(folded)
            window["requant"] = (_addr(folded),) + window["requant"][1:]
        return wsum

    def _linear(self, node) -> None:
        """float32 x (M rows) @ W.T (+ bias) as cpu.linear computes it: from SGEMM_MIN_ROWS rows
        float32 weights go through the packed GEMM (a 1x1 conv step), fewer rows stream W row by row
        (linear_act: then its ReLU)."""
        x, y = self._in(node, "x"), self._y(node)
        weight = self._weights[node.inputs["weight"]]
        code, wb, n, k = cpu._weight_bytes(weight, f"{node.id}.weight")
        bias = self._opt(node, "bias")
        m = x.size // max(k, 1)
        self._need(node, x.dtype == np.float32 and x.shape[-1] == k and y.size == m * n, "float32 rows")
        self._need(node, _engine.act_row_bytes(code, k) == 0, "quantized weights")
        self._need(node, bias is None or (bias.dtype == np.float32 and bias.size == n), "bias")
        self._keep_all(wb, bias)
        self.macs += m * n * k
        if m >= cpu.SGEMM_MIN_ROWS and code == cpu._F32:
            # (n/32, k, 32) panels, shared by every input shape's plan
            packed = self._packed(node.inputs["weight"], False, lambda: cpu.linear_weights(weight))
            self._keep_all(packed)
            self._add("conv_f32", x=_addr(x), w=_addr(packed), bias=_ptr(bias), y=_addr(y),
                      scratch=_addr(self._scratch(0, np.float32)), window=(1, m, 1, k, m, 1) + (1,) * 6 + (0, 0),
                      cout=n, **self._blocks(m, n))
        else:
            self._add("linear", x=_addr(x), w=_addr(wb), bias=_ptr(bias), y=_addr(y), K=k, N=n,
                      row_bytes=wb.shape[1], wtype=code, rows=m)
        self._fused_relu(node, y)

    def _fused_relu(self, node, y: np.ndarray) -> None:
        """The ReLU of a fused node (linear_act, concat_act) in place on its output."""
        if "activation" in node.params and node.op != "conv2d":
            self._need(node, node.params["activation"] == "relu", f"activation {node.params['activation']!r}")
            self._add("unary", x=_addr(y), y=_addr(y), count=y.size, fn=_engine.UNARY_FNS["relu"])

    # ------------------------------------------------------------------ small steps
    def _quantize(self, node) -> None:
        p, x, y = node.params, self._in(node, "x"), self._y(node)
        self._need(node, -128 <= int(p["zero_point"]) <= 127 and float(p["scale"]) > 0, "zero point / scale")
        self._add("quantize_i8" if node.op == "quantize" else "dequantize_i8", x=_addr(x), y=_addr(y), count=x.size,
                  scale=float(np.float32(p["scale"])), zero_point=int(p["zero_point"]))

    def _window(self, node, x: np.ndarray, y: np.ndarray) -> tuple:
        kh, kw = (int(k) for k in node.params["kernel"])
        (sh, sw), _, (pt, pl, _, _) = window_params(node.params)
        return tuple(x.shape) + (y.shape[1], y.shape[2], kh, kw, sh, sw, 1, 1, pt, pl)

    def _qavg_pool(self, node) -> None:
        p, x, y = node.params, self._in(node, "x"), self._y(node)
        self._add("qavg_pool", x=_addr(x), y=_addr(y), window=self._window(node, x, y),
                  lo=int(p.get("act_min", INT8_MIN)), hi=int(p.get("act_max", INT8_MAX)))

    def _max_pool(self, node) -> None:
        x, y = self._in(node, "x"), self._y(node)
        self._need(node, node.params.get("activation", "none") == "none", "fused activation")
        self._add("max_pool", x=_addr(x), y=_addr(y), window=self._window(node, x, y))

    def _qsoftmax(self, node) -> None:
        p, x, y = node.params, self._in(node, "x"), self._y(node)
        table = qsoftmax_table(p)  # (256,)
        self._keep_all(table)
        self._add("qsoftmax", x=_addr(x), table=_addr(table), y=_addr(y), rows=x.size // x.shape[-1], n=x.shape[-1],
                  zp_out=int(p["output_zero_point"]), out_scale=float(np.float32(p["output_scale"])))

    def _global_avg(self, node) -> None:
        x, y = self._in(node, "x"), self._y(node)
        self._add("global_avg", x=_addr(x), y=_addr(y), N=x.shape[0], HW=x.shape[1] * x.shape[2], C=x.shape[3])

    def _binary(self, node) -> None:
        """add / mul / sub / div (the second operand may broadcast over a block of axes; add and
        mul swap a broadcast first operand) and add_n, left to right in place, its ReLU / ReLU6
        (fuse_add_activation) applied by the last step as it writes."""
        ports = ("a", "b") if node.op in _engine.BINARY_OPS else tuple(p for p in node.inputs)
        xs, y = [self._in(node, p) for p in ports], self._y(node)
        self._need(node, y.dtype == np.float32 and all(x.dtype == np.float32 for x in xs), "dtype")
        a, b = xs[0], xs[1]
        if a.shape != y.shape and node.op in ("add", "mul"):
            a, b = b, a
        self._need(node, a.shape == y.shape and all(x.shape == y.shape for x in xs[2:]), "a broadcast first operand")
        nb, div = self._broadcast(node, b.shape, y.shape)
        act = self._act(node)
        self._add("binary", a=_addr(a), b=_addr(b), y=_addr(y), count=y.size, op=_engine.BINARY_OPS.get(node.op, 0),
                  b_count=nb, b_div=div, act=0 if xs[2:] else act)
        for k, x in enumerate(xs[2:], 3):  # add_n: left to right, in place
            self._add("binary", a=_addr(y), b=_addr(x), y=_addr(y), count=y.size, op=_engine.BINARY_OPS["add"],
                      act=act if k == len(xs) else 0)

    def _broadcast(self, node, bshape: tuple, yshape: tuple) -> tuple[int, int]:
        """(nb, div) of a binary step: element i of y reads b[(i // div) % nb] (nb 0: b[i])."""
        full = (1,) * (len(yshape) - len(bshape)) + tuple(bshape)
        self._need(node, len(full) == len(yshape), "operand rank")
        if full == tuple(yshape):
            return 0, 1
        axes = [i for i, d in enumerate(full) if d != 1]
        if not axes:
            return 1, 1
        lo, hi = axes[0], axes[-1] + 1
        self._need(node, all(full[i] == yshape[i] for i in range(lo, hi)), "a broadcast other than one block of axes")
        return int(np.prod(full[lo:hi])), int(np.prod(yshape[hi:], dtype=np.int64))

    def _unary(self, node) -> None:
        """hard_swish, hard_sigmoid, sqrt, and pow by the constant 2 (numpy's float32 arithmetic)."""
        x, y, floats, fn = self._in(node, "a" if node.op == "pow" else "x"), self._y(node), {}, node.op
        self._need(node, x.dtype == np.float32 and x.shape == y.shape, "dtype or broadcasting")
        if node.op == "pow":
            e = self._weights.get(node.inputs["b"])
            self._need(node, isinstance(e, np.ndarray) and e.size == 1 and e.ndim <= x.ndim and
                       float(e.reshape(-1)[0]) == 2.0, "an exponent other than the constant 2")
            fn = "square"
        elif node.op == "hard_sigmoid":
            floats = {k: float(np.float32(node.params.get(k, d))) for k, d in (("alpha", 0.2), ("beta", 0.5))}
        self._add("unary", x=_addr(x), y=_addr(y), count=x.size, fn=_engine.UNARY_FNS[fn], **floats)

    def _gather(self, node) -> None:
        """transpose and slice: a copy of the input's strided view."""
        x, y, p = self._in(node, "x"), self._y(node), node.params
        self._need(node, x.dtype == np.float32 and y.size > 0, "dtype or size")
        if node.op == "transpose":
            view = x.transpose([int(a) for a in p["perm"]])
        else:
            index = [slice(None)] * x.ndim
            for axis, start, end, step in zip(p["axes"], p["starts"], p["ends"], p.get("steps", [1] * len(p["axes"]))):
                index[axis] = slice(start, end, step)
            view = x[tuple(index)]
        self._need(node, view.shape == y.shape, "output shape")
        desc = np.array([view.ndim, *view.shape, *(st // 4 for st in view.strides)], np.int64)  # (1 + 2 ndim,)
        self._keep_all(desc)
        start = (view.__array_interface__["data"][0] - _addr(x)) // 4 if view.size else 0
        self._add("gather", x=_addr(x) + 4 * start, view=_addr(desc), y=_addr(y), rows=y.size // y.shape[-1])

    def _avg_pool(self, node) -> None:
        x, y = self._in(node, "x"), self._y(node)
        self._need(node, x.dtype == np.float32 and node.params.get("activation", "none") == "none", "fused activation")
        self._add("avg_pool", x=_addr(x), y=_addr(y), window=self._window(node, x, y),
                  include_pad=bool(node.params.get("count_include_pad", False)))

    def _python(self, node) -> None:
        """An op without a native step whose numpy fast path has no C twin (exp, tanh, BLAS):
        run between native step ranges on arena views, exactly as the per-op executor runs it."""
        op = get_op(node.op, node.id)
        args = [self._in(node, p) if p in node.inputs else None for p in op.input_names]
        self._need(node, len(node.outputs) == 1, "several outputs")
        self.islands.append((len(self.steps), op.fast or op.ref, node.params, args, self._y(node)))
        self._copied.update(self._reads)  # numpy reads its arena view

    def _relu(self, node) -> None:
        x, y = self._in(node, "x"), self._y(node)
        self._need(node, x.dtype == np.float32, "dtype")
        self._add("unary", x=_addr(x), y=_addr(y), count=x.size, fn=_engine.UNARY_FNS["relu"])

    def _pad(self, node) -> None:
        """Zero padding of the last axis only (channel padding)."""
        pads, x, y = node.params["pads"], self._in(node, "x"), self._y(node)
        self._need(node, all(tuple(pa) == (0, 0) for pa in pads[:-1]) and not node.params.get("value", 0),
                   "pads other than zeros after the channels")
        item = x.itemsize
        self._add("copy_rows", src=_addr(x), dst=_addr(y), rows=x.size // x.shape[-1], row_bytes=x.shape[-1] * item,
                  src_stride=x.shape[-1] * item, dst_stride=y.shape[-1] * item, dst_offset=int(pads[-1][0]) * item,
                  zero_rest=True)

    def _concat(self, node) -> None:
        y = self._y(node)
        axis = int(node.params["axis"]) % y.ndim
        rows = int(np.prod(y.shape[:axis], dtype=np.int64))
        offset = 0
        for port in node.inputs:
            x = self._in(node, port)
            self._need(node, x.dtype == y.dtype, "dtypes differ")
            width = x.size // max(rows, 1) * x.itemsize
            self._add("copy_rows", src=_addr(x), dst=_addr(y), rows=rows, row_bytes=width, src_stride=width,
                      dst_stride=y.size // max(rows, 1) * y.itemsize, dst_offset=offset)
            offset += width
        self._fused_relu(node, y)

    def _reshape(self, node) -> None:
        raise Unsupported(f"node {node.id!r}: reshape of a weight")

    # ------------------------------------------------------------------------ running
    def run(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray] | None:
        """Every graph output for the input arrays (graph-input order, checked by the executor's
        check_feeds); None when this plan cannot run now (another thread is in it, or more
        threads than its scratch is sized for): the caller then runs the per-op executor."""
        threads = cpu.get_num_threads()
        if threads > self.threads:
            return None
        for a, t in zip(arrays, self.inputs):
            if a.shape != t.shape:
                return None
        if not self._lock.acquire(blocking=False):
            return None
        try:
            team = min(self.useful_threads, threads)
            if team == 1:  # nothing to pace
                self._forward(arrays, 1)
            else:
                nt = self.pacer.threads(team)
                self.pacer.pace(nt, self._forward(arrays, nt))
            self.runs += 1
            return {name: t.copy() for name, t in self.outputs.items()}
        finally:
            self._lock.release()

    def _feed(self, arrays: list[np.ndarray], steps) -> None:
        """Point ``steps``' reads of each graph input at the caller's array (C-contiguous, of the
        input's dtype: check_feeds); an input that an island, a graph output or an unaligned
        array needs in the arena is copied there, and the steps read that."""
        for i, (a, t) in enumerate(zip(arrays, self.inputs)):
            if i in self._copied or not a.flags.aligned:
                np.copyto(t, a)
                a = t
            for step, port, k, offset in self._ports:
                if k == i:
                    steps.point(step, port, a, offset)

    def _forward(self, arrays: list[np.ndarray], threads: int, times: np.ndarray | None = None) -> float:
        """Every step and island once on the input arrays (_feed), in graph order (one thread: the
        steps split for one); returns the seconds the native step ranges took (what a stalled team
        thread slows: the numpy islands, and a garbage collection they start, are the caller's
        thread alone)."""
        steps = self.solo_steps if threads == 1 else self.steps
        self._feed(arrays, steps)
        start, native = 0, 0.0
        for stop, fn, params, args, y in self.islands:
            if stop > start:
                t0 = time.perf_counter()
                steps.run_range(threads, times, start, stop)
                native += time.perf_counter() - t0
            np.copyto(y, fn(None, params, *args))
            start = stop
        if start < len(steps):
            t0 = time.perf_counter()
            steps.run_range(threads, times, start)
            native += time.perf_counter() - t0
        return native

    def step_seconds(self, arrays: list[np.ndarray], runs: int = 20) -> np.ndarray:
        """(steps,) each step's median wall seconds over ``runs`` forward passes (thread 0 waits
        for every step to finish, so steps do not overlap as they do in ``run``)."""
        times = np.zeros((runs, len(self.steps)), np.float64)  # (runs, steps)
        with self._lock:
            for r in range(runs):
                self._forward(arrays, self.useful_threads, times[r])
        return np.median(times, axis=0)


LOWER = {  # op -> its lowering (sigmoid, softmax, matmul, reduce_mean: numpy between native ranges)
    "conv2d": VisionPlan._conv,
    "qconv2d": VisionPlan._conv,
    "dwpw_conv2d": VisionPlan._dwpw,
    "qdwpw_conv2d": VisionPlan._dwpw,
    "expand_dwpw_conv2d": VisionPlan._expand_dwpw,
    "qlinear": VisionPlan._qlinear,
    "linear": VisionPlan._linear,
    "linear_act": VisionPlan._linear,
    "quantize": VisionPlan._quantize,
    "dequantize": VisionPlan._quantize,
    "qavg_pool2d": VisionPlan._qavg_pool,
    "qsoftmax": VisionPlan._qsoftmax,
    "max_pool2d": VisionPlan._max_pool,
    "global_avg_pool": VisionPlan._global_avg,
    "add": VisionPlan._binary,
    "mul": VisionPlan._binary,
    "add_n": VisionPlan._binary,
    "sub": VisionPlan._binary,
    "div": VisionPlan._binary,
    "hard_swish": VisionPlan._unary,
    "hard_sigmoid": VisionPlan._unary,
    "sqrt": VisionPlan._unary,
    "pow": VisionPlan._unary,
    "transpose": VisionPlan._gather,
    "slice": VisionPlan._gather,
    "avg_pool2d": VisionPlan._avg_pool,
    "sigmoid": VisionPlan._python,
    "softmax": VisionPlan._python,
    "matmul": VisionPlan._python,
    "reduce_mean": VisionPlan._python,
    "relu": VisionPlan._relu,
    "pad": VisionPlan._pad,
    "concat": VisionPlan._concat,
    "concat_act": VisionPlan._concat,
    "reshape": VisionPlan._reshape,  # a view of its input (aliased), unless its input is a weight
}


# Input shapes whose plans a PlanHook keeps for a graph with symbolic input dims (a text line's
# width); the least recently used plan goes first.
PLANS_PER_GRAPH = 4


class PlanHook:
    """Model.run's native path: a plan per input shape (the graph's own when its shapes are static,
    else the graph specialised to the feeds' shapes, the last PLANS_PER_GRAPH kept); run returns
    None (per-op executor) when the graph does not lower or the plan cannot run."""

    def __init__(self, executor):
        self.executor = executor
        self.plans: OrderedDict[tuple, VisionPlan] = OrderedDict()  # input shapes -> plan, oldest first
        self.why: str | None = None  # why the graph did not lower (None: not tried yet, or lowered)
        self._weights = {n: w for (_, w), n in zip(executor.weight_slots, executor.graph.weights)}
        self._lock = threading.Lock()
        inputs = executor.graph.inputs
        # a one-input graph's feed, checked in a few attribute reads: (its name, dtype, the plan
        # used last); an ndarray of that dtype, C-contiguous and of that plan's input shape
        # passes check_feeds unchanged
        self._single = (inputs[0].name, np.dtype(inputs[0].dtype), None) if len(inputs) == 1 else None

    @property
    def plan(self) -> VisionPlan | None:
        """The plan used last (None before the first lowering)."""
        return next(reversed(self.plans.values()), None)

    def run(self, feeds: dict[str, Any]) -> dict[str, np.ndarray] | None:
        """Graph outputs through the plan for the feeds' shapes, or None."""
        if self.why is not None:
            return None
        single = self._single
        if single is not None and single[2] is not None and len(feeds) == 1:
            a = feeds.get(single[0])
            if (type(a) is np.ndarray and a.dtype == single[1] and a.shape == single[2].inputs[0].shape
                    and a.flags.c_contiguous):
                return single[2].run([a])
        arrays = self.executor.check_feeds(feeds)
        key = tuple(a.shape for a in arrays)
        with self._lock:  # callers may share a Model across threads
            plan = self.plans.get(key)
            if plan is None:
                graph = self._graph_for(arrays)
                if graph is None:
                    return None
                try:
                    plan = VisionPlan(graph, self._weights)
                except (Unsupported, VolvoxError) as e:  # the per-op path runs (and reports real errors)
                    self.why = str(e) or type(e).__name__
                    return None
                self.plans[key] = plan
                if len(self.plans) > PLANS_PER_GRAPH:
                    self.plans.popitem(last=False)
            self.plans.move_to_end(key)
            if self._single is not None:
                self._single = self._single[:2] + (plan,)
        return plan.run(arrays)

    def _graph_for(self, arrays: list[np.ndarray]) -> Graph | None:
        """The graph with every input dim bound to the arrays' shapes (itself when already static);
        None when shape inference fails for them (the per-op executor then reports it)."""
        graph = self.executor.graph
        if all(isinstance(d, int) for spec in graph.inputs for d in spec.shape):
            return graph
        inputs = [TensorSpec(spec.name, tuple(a.shape), spec.dtype) for spec, a in zip(graph.inputs, arrays)]
        bound = Graph(inputs, graph.weights, graph.nodes, graph.outputs)
        try:
            validate(bound)
        except VolvoxError:
            return None
        return bound
