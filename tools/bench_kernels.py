#!/usr/bin/env python
"""Benchmark volvox's CPU kernels against a peer in the same run.

Quantized linear vs numpy float32 matmul; causal GQA attention over a KV cache vs
torch's scaled_dot_product_attention (when torch is installed) and volvox's numpy
reference (attention_ref); vision kernels (--vision: only these): f32 linear with many
rows vs numpy, NHWC f32 conv / depthwise vs torch (channels_last), int8 conv /
depthwise vs onnxruntime's QLinearConv (when torch / onnxruntime + onnx are installed).

SmolLM2-135M shapes (hidden 576, ffn 1536, vocab 49152): M=1 GEMV (decode) and
M=32 / 512 GEMM (prefill), at 1 and 2 threads. For every case it prints

  us        time per call (best of 7 batches)
  GB/s      weight bytes streamed per second (packed bytes for volvox, f32 for numpy)
  GFLOP/s   2*M*N*K / time
  speedup   numpy time / volvox time (same shape, same thread count, same run)

Each thread count runs in its own child process so numpy's BLAS can be pinned too
(OPENBLAS_NUM_THREADS / OMP_NUM_THREADS / MKL_NUM_THREADS).

    python tools/bench_kernels.py                 # 1 and 2 threads, best ISA
    python tools/bench_kernels.py --threads 2 --isa avx2 --quick
    python tools/bench_kernels.py --vision --threads 1
    python tools/bench_kernels.py --types                  # GEMV of every weight type, bytes/s vs q4_1
                                                           # (ffn_down: from L2, wide: L3, stream: DRAM)
    python tools/bench_kernels.py --types q4_1 q2_k q5_k --threads 1
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

# (label, qtype, M, N, K)
GEMV = [
    ("attn_q/o   ", "q4_1", 1, 576, 576),
    ("ffn_up     ", "q4_1", 1, 1536, 576),
    ("ffn_down   ", "q4_1", 1, 576, 1536),
    ("attn_q/o   ", "q8_0", 1, 576, 576),
    ("ffn_up     ", "q8_0", 1, 1536, 576),
    ("ffn_down   ", "q8_0", 1, 576, 1536),
    ("lm_head    ", "q8_0", 1, 49152, 576),
]
GEMM = [(f"ffn_up M={m:<3}", q, m, 1536, 576) for q in ("q4_1", "q8_0") for m in (32, 512)] + \
       [(f"ffn_down M={m:<3}", q, m, 576, 1536) for q in ("q4_1", "q8_0") for m in (32, 512)]


def timeit(fn, min_time: float) -> float:
    """Best (minimum) batch-mean seconds per call over 7 batches filling ~min_time.

    The minimum, not the median: on a shared 2-core machine another process often
    holds one core, and a 2-thread call then waits a scheduler tick (~4-16 ms) for
    its second thread; the best batch is the kernel's own speed."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    reps = max(1, int(min_time / 7 / once))
    samples = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        samples.append((time.perf_counter() - t0) / reps)
    return float(np.min(samples))


# --types: decode GEMVs (M=1) of SmolLM2-sized matrices whose K is whole k-quant super-blocks:
# (label, N, K, bytes of distinct matrices the calls rotate over). ffn_down (L2-size) and wide (L3)
# run one matrix again and again from the caches; stream rotates over copies of the wide matrix
# worth twice this machine type's 32 MiB L3 (each type: as many copies as its bytes need), so every
# call reads its weights from DRAM, as a real decode step does.
TYPE_GEMV = [("ffn_down", 576, 1536, 0), ("wide", 4096, 1536, 0), ("stream", 4096, 1536, 64 << 20)]


TYPE_ROUNDS = 20    # --types: every type timed once per round, rounds interleaved; the best round counts
TYPE_STEPS = 16     # --types: GEMV steps per plan run on one matrix (ffn_down / wide)


def bench_types(threads: int, min_time: float, qtypes: list[str]) -> None:
    """M=1 linear for each weight type, as a decode step runs it: weight bytes streamed per second,
    and that against q4_1's (the yardstick: each k-quant within 10% of q4_1's bytes/s). The weights
    are 64 rows quantized by quantize_ref and tiled to N rows (valid blocks; the speed does not
    depend on them), interleaved for the tier as a model's read-only weights are. Each type's
    GEMVs run as the steps of one native plan (one quantize_act, then TYPE_STEPS linear steps, or
    one per copy for a stream case), so the time per GEMV is the kernel's and the plan's step, not
    a Python call's: a decode step pays no Python per GEMV. A case with stream bytes rotates its
    steps over that many bytes of copies of the matrix, past the L3. The types are timed in
    TYPE_ROUNDS interleaved rounds, each type's best round kept: on a shared machine a neighbour's
    burst then slows one round of every type, not every round of one type."""
    from volvox import cpu as K
    from volvox.ir.quant_blocks import QuantTensor, quantize_ref

    rng = np.random.default_rng(0)
    print(f"\n== weight types, threads={threads} isa={K.isa()} (per GEMV step of a native plan)")
    print(f"{'case':10s} {'type':7s} {'N':>6s} {'K':>5s} | {'us':>9s} {'GB/s':>6s} | {'vs q4_1':>7s}")
    for label, n, k, stream in TYPE_GEMV:
        x = rng.standard_normal(k).astype(np.float32)                              # (K,)
        out = np.empty(n, np.float32)                                              # (N,)
        plans, nbytes, keep = {}, {}, []
        for qtype in ["q4_1"] + [q for q in qtypes if q != "q4_1"]:
            seed = quantize_ref(rng.standard_normal((64, k)).astype(np.float32), qtype)
            data = np.tile(seed.data, (n // 64, 1))                                # (N, row bytes)
            copies = max(1, -(-stream // data.nbytes))
            code = K._weight_meta(QuantTensor(data, qtype, (n, k)), "w")[0]
            act = np.empty(K.engine.act_row_bytes(code, k), np.uint8)             # (act row bytes,)
            steps = copies if stream else TYPE_STEPS
            plan = K.engine.StepPlan(1 + steps)
            plan.quantize_act(x=K.address(x), act=K.address(act), K=k, wtype=code)
            packs = []
            for _ in range(copies):
                w = QuantTensor(data.copy(), qtype, (n, k))
                w.data.flags.writeable = False
                packs.append(K.interleaved_weights(w) or (w.data, 0))             # (packed bytes, group)
                keep.append((w, packs[-1]))
            for i in range(steps):
                wb, group = packs[i % copies]
                plan.linear(x=K.address(act), w=K.address(wb), bias=0, y=K.address(out), K=k, N=n,
                            row_bytes=0 if group else data.shape[1], wtype=code, group_bytes=group)
            keep.append((x, act))
            plans[qtype] = (plan, steps)
            nbytes[qtype] = data.nbytes
        best = dict.fromkeys(plans, float("inf"))
        for _ in range(TYPE_ROUNDS):
            for qtype, (plan, steps) in plans.items():
                t = timeit(lambda: plan.run_range(threads), min_time / TYPE_ROUNDS) / steps
                best[qtype] = min(best[qtype], t)
        base = nbytes["q4_1"] / best["q4_1"]
        for qtype in plans:
            rate = nbytes[qtype] / best[qtype]
            print(f"{label:10s} {qtype:7s} {n:6d} {k:5d} | {best[qtype] * 1e6:9.1f} {rate / 1e9:6.1f} | "
                  f"{rate / base:6.2f}x", flush=True)
        del plans, keep


def child(threads: int, isa: str | None, quick: bool, vision: bool, types: list[str] | None = None) -> None:
    from volvox import cpu as K
    from volvox.ir.quant_blocks import quantize_ref

    if isa:
        K._set_isa_for_testing(isa)
    K.set_num_threads(threads)
    min_time = 0.1 if quick else 0.4
    if vision:
        bench_vision(threads, min_time)
        return
    if types is not None:
        bench_types(threads, min_time, types)
        return
    rng = np.random.default_rng(0)
    print(f"\n== threads={threads} isa={K.isa()} (numpy peer: float32 x @ W.T, BLAS pinned to "
          f"{threads} thread{'s' if threads > 1 else ''})")
    print(f"{'case':16s} {'type':5s} {'M':>4s} {'N':>6s} {'K':>5s} | {'volvox us':>10s} {'GB/s':>6s} "
          f"{'GFLOP/s':>8s} | {'numpy us':>10s} {'GB/s':>6s} {'GFLOP/s':>8s} | {'speedup':>7s}")
    for label, qtype, m, n, k in GEMV + GEMM:
        wf = rng.standard_normal((n, k)).astype(np.float32) * np.float32(0.05)
        qt = quantize_ref(wf, qtype)
        x = rng.standard_normal((m, k)).astype(np.float32)
        out = np.empty((m, n), np.float32)
        xin = x[0] if m == 1 else x
        oin = out[0] if m == 1 else out
        tv = timeit(lambda: K.linear(xin, qt, out=oin), min_time)
        wT = wf.T  # numpy's natural y = x @ W.T (BLAS sees a transposed operand, no copy)
        outn = np.empty((m, n), np.float32)
        tn = timeit(lambda: np.matmul(x, wT, out=outn), min_time)
        flops = 2.0 * m * n * k
        print(f"{label:16s} {qtype:5s} {m:4d} {n:6d} {k:5d} | {tv * 1e6:10.1f} {qt.nbytes / tv / 1e9:6.1f} "
              f"{flops / tv / 1e9:8.1f} | {tn * 1e6:10.1f} {wf.nbytes / tn / 1e9:6.1f} "
              f"{flops / tn / 1e9:8.1f} | {tn / tv:6.2f}x", flush=True)
    # SmolLM2-135M decode: 30 layers x (q, k, v, o, gate, up, down) + lm_head
    per_layer = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]
    ws = [quantize_ref(rng.standard_normal(s).astype(np.float32), "q4_1") for s in per_layer]
    head = quantize_ref(rng.standard_normal((49152, 576)).astype(np.float32), "q8_0")
    xs = {576: rng.standard_normal(576).astype(np.float32), 1536: rng.standard_normal(1536).astype(np.float32)}

    def token():
        for _ in range(30):
            for w in ws:
                K.linear(xs[w.shape[1]], w)
        K.linear(xs[576], head)

    tt = timeit(token, min_time * 3)
    nbytes = 30 * sum(w.nbytes for w in ws) + head.nbytes
    print(f"SmolLM2-135M decode matmuls only (211 linear calls, {nbytes / 1e6:.1f} MB): "
          f"{tt * 1e3:.2f} ms/token = {1 / tt:.0f} tok/s upper bound, {nbytes / tt / 1e9:.1f} GB/s")
    bench_dram(threads, min_time)
    bench_attention(threads, min_time)


def bench_dram(threads: int, min_time: float) -> None:
    """A q8_0 GEMV over 1 GB of weights (past this machine's 260 MiB shared L3, so it streams
    from DRAM) beside numpy's max over 1 GB of float32 (a one-thread SIMD read)."""
    from volvox import cpu as K
    from volvox.ir.quant_blocks import QuantTensor

    k = 4096
    n = (1 << 30) // (k // 32 * 34)
    raw = np.zeros((n, k // 32 * 34), np.uint8)  # (rows, blocks * 34): d = 0.01, qs = 1
    blocks = raw.reshape(n, -1, 34)
    blocks[:, :, :2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)
    blocks[:, :, 2:] = 1
    w = QuantTensor(raw, "q8_0", (n, k))
    x = np.ones(k, np.float32)
    tv = timeit(lambda: K.linear(x, w), min_time)
    line = f"q8_0 GEMV over {raw.nbytes / 2**30:.2f} GiB (DRAM): {raw.nbytes / tv / 1e9:.1f} GB/s"
    if threads == 1:
        a = np.ones(raw.nbytes // 4, np.float32)  # (1 GiB / 4,)
        tn = timeit(lambda: a.max(), min_time)
        line += f"; numpy max over the same bytes: {a.nbytes / tn / 1e9:.1f} GB/s ({tn / tv:.0%} of it)"
    print(line, flush=True)


# (label, new query rows, cached rows before them): SmolLM2 heads (9 q, 3 kv, 64 dims)
ATTN = [("decode   T=64 ", 1, 63), ("decode   T=512", 1, 511), ("decode   T=2048", 1, 2047),
        ("prefill  S=32 ", 32, 0), ("prefill  S=512", 512, 0)]


def bench_attention(threads: int, min_time: float) -> None:
    """volvox.cpu.attention vs torch SDPA (causal, GQA expanded) and attention_ref."""
    from volvox import cpu as K
    from volvox.ops.attention import attention_ref
    from volvox.ops.context import RunContext
    from volvox.runtime.kv_cache import KVCache

    try:
        import torch
        torch.set_num_threads(threads)
    except ImportError:
        torch = None
    nh, nkv, hd = 9, 3, 64
    rng = np.random.default_rng(1)
    print(f"\n{'attention':16s} {'seq':>4s} {'T':>5s} | {'volvox us':>10s} | {'torch us':>10s} {'speedup':>7s} | "
          f"{'numpy us':>10s} {'speedup':>7s}")
    for label, seq, start in ATTN:
        total = seq + start
        kc = rng.standard_normal((nkv, total, hd)).astype(np.float32)   # (nkv, T, hd)
        vc = rng.standard_normal((nkv, total, hd)).astype(np.float32)
        q = rng.standard_normal((seq, nh * hd)).astype(np.float32)      # (seq, nh*hd)
        tv = timeit(lambda: K.attention(q, kc, vc, start, nh, hd ** -0.5), min_time)
        tt_s = "-"
        sp_t = "-"
        if torch is not None:
            qt = torch.from_numpy(q.reshape(seq, nh, hd).transpose(1, 0, 2).copy())[None]   # (1, nh, seq, hd)
            kt = torch.from_numpy(kc).repeat_interleave(nh // nkv, 0)[None]                 # (1, nh, T, hd)
            vt = torch.from_numpy(vc).repeat_interleave(nh // nkv, 0)[None]
            mask = torch.ones(seq, total, dtype=torch.bool).tril(start)                     # causal at offset
            f = torch.nn.functional.scaled_dot_product_attention
            with torch.no_grad():
                tt = timeit(lambda: f(qt, kt, vt, attn_mask=mask), min_time)
            tt_s, sp_t = f"{tt * 1e6:10.1f}", f"{tt / tv:6.2f}x"
        p = {"n_heads": nh, "n_kv_heads": nkv, "head_dim": hd}
        k_new = kc[:, start:].transpose(1, 0, 2).reshape(seq, nkv * hd)
        v_new = vc[:, start:].transpose(1, 0, 2).reshape(seq, nkv * hd)

        def ref():
            ctx = RunContext(kv=KVCache(1, nkv, hd, total), pos=start)
            ctx.kv.keys[0][:] = kc
            ctx.kv.values[0][:] = vc
            attention_ref(ctx, p, q, k_new, v_new)

        tn = timeit(ref, min_time) if total <= 2048 else float("nan")
        print(f"{label:16s} {seq:4d} {total:5d} | {tv * 1e6:10.1f} | {tt_s:>10s} {sp_t:>7s} | "
              f"{tn * 1e6:10.1f} {tn / tv:6.2f}x", flush=True)


# (label, M, N, K): f32 weights, many activation rows
F32_GEMM = [("ppocr head   ", 40, 6625, 120), ("gpt2 qkv S=64", 64, 2304, 768), ("gpt2 fc2 S=64", 64, 768, 3072),
            ("square 256^3", 256, 256, 256), ("square 512^3", 512, 512, 512), ("square 1024^3", 1024, 1024, 1024),
            ("square 2048^3", 2048, 2048, 2048)]
# (label, (N, H, W, C), (cout, kh, kw), groups, stride, pad)
CONVS = [("conv3x3 56x56x64->64", (1, 56, 56, 64), (64, 3, 3), 1, 1, 1),
         ("conv1x1 28x28x128->256", (1, 28, 28, 128), (256, 1, 1), 1, 1, 0),
         ("dw3x3 112x112x32", (1, 112, 112, 32), (32, 3, 3), 32, 1, 1),
         ("dw3x3/2 112x112x64", (1, 112, 112, 64), (64, 3, 3), 64, 2, 1)]


def _ort_qlinearconv(x, w, bias, zp_in, zp_out, scale_w, groups, stride, pad, threads):
    """An onnxruntime session running one QLinearConv (NCHW int8, per-channel weight scales)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    cout = w.shape[0]
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "xs"), numpy_helper.from_array(np.array(zp_in, np.int8), "xz"),
             numpy_helper.from_array(w.transpose(0, 3, 1, 2).copy(), "w"),
             numpy_helper.from_array(scale_w.astype(np.float32), "ws"), numpy_helper.from_array(np.zeros(cout, np.int8), "wz"),
             numpy_helper.from_array(np.array(0.1, np.float32), "ys"), numpy_helper.from_array(np.array(zp_out, np.int8), "yz"),
             numpy_helper.from_array(bias, "b")]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                            group=groups, strides=[stride, stride], pads=[pad] * 4)
    g = helper.make_graph([node], "q", [helper.make_tensor_value_info("x", TensorProto.INT8, list(x.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.INT8, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def bench_vision(threads: int, min_time: float) -> None:
    """f32 GEMM with many rows vs numpy; f32 convs vs torch; int8 convs vs onnxruntime."""
    from volvox import cpu as K
    from volvox.ops.int8 import quantize_multiplier

    rng = np.random.default_rng(2)
    print(f"\n== vision kernels, threads={threads} isa={K.isa()}")
    print(f"{'f32 linear':24s} {'M':>4s} {'N':>6s} {'K':>5s} | {'volvox us':>10s} {'GFLOP/s':>8s} | "
          f"{'numpy us':>10s} {'GFLOP/s':>8s} | {'speedup':>7s}")
    for label, m, n, k in F32_GEMM:
        x = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((n, k)).astype(np.float32)
        tv = timeit(lambda: K.linear(x, w), min_time)
        tn = timeit(lambda: x @ w.T, min_time)
        fl = 2.0 * m * n * k
        print(f"{label:24s} {m:4d} {n:6d} {k:5d} | {tv * 1e6:10.1f} {fl / tv / 1e9:8.1f} | {tn * 1e6:10.1f} "
              f"{fl / tn / 1e9:8.1f} | {tn / tv:6.2f}x", flush=True)
    try:
        import torch
        torch.set_num_threads(threads)
    except ImportError:
        torch = None
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
        have_ort = True
    except ImportError:
        have_ort = False
    print(f"\n{'conv (NHWC)':24s} {'type':4s} | {'volvox us':>10s} {'GMAC/s':>7s} | {'peer':>11s} {'peer us':>10s} | {'speedup':>7s}")
    for label, xs, (cout, kh, kw), groups, st, pad in CONVS:
        geo = dict(strides=(st, st), pads=(pad,) * 4, groups=groups)
        cin_g = xs[3] // groups
        oh = (xs[1] + 2 * pad - kh) // st + 1
        macs = xs[0] * oh * oh * cout * kh * kw * cin_g
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal((cout, kh, kw, cin_g)).astype(np.float32)
        b = rng.standard_normal(cout).astype(np.float32)
        tv = timeit(lambda: K.conv2d(x, w, b, activation="relu6", **geo), min_time)
        peer, tp = "-", float("nan")
        if torch is not None:
            xt = torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).contiguous(memory_format=torch.channels_last)
            wt = torch.from_numpy(w.transpose(0, 3, 1, 2).copy()).contiguous(memory_format=torch.channels_last)
            bt = torch.from_numpy(b)
            f = torch.nn.functional.conv2d
            with torch.no_grad():
                tp = timeit(lambda: f(xt, wt, bt, st, pad, 1, groups).clamp_(0, 6), min_time)
            peer = "torch"
        print(f"{label:24s} f32  | {tv * 1e6:10.1f} {macs / tv / 1e9:7.1f} | {peer:>11s} {tp * 1e6:10.1f} | "
              f"{tp / tv:6.2f}x", flush=True)
        xq = rng.integers(-128, 128, xs, dtype=np.int8)
        wq = rng.integers(-127, 128, (cout, kh, kw, cin_g), dtype=np.int8)
        bq = rng.integers(-1000, 1000, cout).astype(np.int32)
        scale_w = rng.uniform(0.001, 0.01, cout)
        pairs = [quantize_multiplier(0.05 * float(s) / 0.1) for s in scale_w]
        mq = np.array([m for m, _ in pairs], np.int32)
        sq = np.array([s for _, s in pairs], np.int32)
        tv = timeit(lambda: K.qconv2d(xq, wq, bq, mq, sq, 3, -5, **geo), min_time)
        peer, tp = "-", float("nan")
        if have_ort:
            sess = _ort_qlinearconv(xq.transpose(0, 3, 1, 2).copy(), wq, bq, 3, -5, scale_w, groups, st, pad, threads)
            feeds = {"x": xq.transpose(0, 3, 1, 2).copy()}
            tp = timeit(lambda: sess.run(None, feeds), min_time)
            peer = "onnxruntime"
        print(f"{label:24s} int8 | {tv * 1e6:10.1f} {macs / tv / 1e9:7.1f} | {peer:>11s} {tp * 1e6:10.1f} | "
              f"{tp / tv:6.2f}x", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--isa", default=None, help="force an ISA tier (default: best available)")
    ap.add_argument("--quick", action="store_true", help="shorter timing (noisier)")
    ap.add_argument("--vision", action="store_true", help="only the vision kernels (f32 GEMM, convs)")
    ap.add_argument("--types", nargs="*", default=None, metavar="QTYPE",
                    help="only the GEMV of each weight type (default: every supported type), bytes/s vs q4_1")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.types == []:
        from volvox.ir.quant_blocks import SUPPORTED_QTYPES

        args.types = list(SUPPORTED_QTYPES)
    if args.child is not None:
        child(args.child, args.isa, args.quick, args.vision, args.types)
        return
    for t in args.threads:
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(t), OMP_NUM_THREADS=str(t),
                   MKL_NUM_THREADS=str(t))
        cmd = [sys.executable, os.path.abspath(__file__), "--child", str(t)]
        if args.isa:
            cmd += ["--isa", args.isa]
        if args.quick:
            cmd.append("--quick")
        if args.vision:
            cmd.append("--vision")
        if args.types is not None:
            cmd += ["--types", *args.types]
        subprocess.run(cmd, env=env, check=True)


if __name__ == "__main__":
    main()
