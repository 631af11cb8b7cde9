"""Serving throughput: volvox serve vs llama-cpp-python's server, same model file, same machine, same run.

For each engine and each concurrency C (default 1, 4, 16), C clients each send --requests streamed
completions (greedy, --max-tokens new tokens, distinct prompts) one after another. Reported per C:
aggregate decode tokens/s (every streamed token of the phase / the phase's wall time), and the
p50 / p99 time to first token. A token is one streamed text event (both servers send one per token;
volvox holds back only incomplete UTF-8). Writes a markdown table and, with matplotlib, a plot.
llama-cpp-python's server runs one request at a time (requests queue on its lock; no batching).
It needs its server extra's pure-Python parts (fastapi, sse-starlette, starlette-context,
pydantic-settings) beside an installed llama-cpp-python.

    python tools/bench_serve.py                       # SmolLM2-135M Q4_1, 2 threads, C = 1 4 16
    python tools/bench_serve.py --engines volvox --concurrency 1 4 --requests 2   # a quick check
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

import llama_peer

PROMPTS = ["Once upon a time", "The capital of France is", "Write a haiku about the sea.", "def fibonacci(n):",
           "The three laws of robotics are", "In 1969, humans", "A recipe for bread:", "The quick brown fox",
           "My favourite book is", "Photosynthesis is", "The weather today", "Dear diary,",
           "Rust and Python differ in", "The best way to learn", "Once, in a small village,", "Q: What is 2+2?\nA:"]


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(engine: str, gguf: str, model: str, threads: int, max_batch: int) -> tuple[subprocess.Popen, str]:
    """Start ``engine``'s server; its process and base URL once /health (or /v1/models) answers."""
    port = free_port()
    if engine == "volvox":
        cmd = [sys.executable, "-m", "volvox", "serve", model, "--port", str(port), "--threads", str(threads),
               "--max-batch", str(max_batch), "--max-queue", "256", "--log-level", "warning"]
        probe = "/health"
    else:
        cmd = llama_peer.server_command(sys.executable, [
            "--model", gguf, "--port", str(port), "--host", "127.0.0.1", "--n_threads", str(threads),
            "--n_ctx", "2048", "--interrupt_requests", "False"])  # its default: a new request cuts the one being streamed
        probe = "/v1/models"
    log = tempfile.TemporaryFile(mode="w+")  # not a pipe: llama.cpp's logging would fill it and block
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + probe, timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    log.seek(0)
    raise SystemExit(f"{engine} server did not start: {' '.join(cmd)}\n{log.read()[-2000:]}")


async def one_request(http: httpx.AsyncClient, url: str, prompt: str, max_tokens: int) -> tuple[float, int, float]:
    """(time to first token, tokens, seconds) of one streamed greedy completion."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    t0 = time.perf_counter()
    ttft, tokens = None, 0
    async with http.stream("POST", url + "/v1/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            if choices[0].get("text"):
                tokens += 1
                ttft = ttft if ttft is not None else time.perf_counter() - t0
    return (ttft if ttft is not None else float("nan")), tokens, time.perf_counter() - t0


async def phase(url: str, concurrency: int, requests: int, max_tokens: int) -> dict:
    """C clients x ``requests`` sequential requests each; the phase's throughput and TTFTs."""
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=concurrency + 4)) as http:
        async def client(c: int):
            return [await one_request(http, url, PROMPTS[(c + i * concurrency) % len(PROMPTS)], max_tokens)
                    for i in range(requests)]

        t0 = time.perf_counter()
        results = [r for rs in await asyncio.gather(*(client(c) for c in range(concurrency))) for r in rs]
        wall = time.perf_counter() - t0
    ttfts = sorted(r[0] for r in results)
    tokens = sum(r[1] for r in results)
    return {"concurrency": concurrency, "requests": len(results), "tokens": tokens, "wall_s": wall,
            "tok_s": tokens / wall, "ttft_p50": statistics.median(ttfts),
            "ttft_p99": ttfts[min(len(ttfts) - 1, int(round(0.99 * (len(ttfts) - 1))))]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="what volvox serves (a name or a .gguf)")
    ap.add_argument("--engines", nargs="+", default=["volvox", "llama-cpp-python"],
                    choices=["volvox", "llama-cpp-python"])
    ap.add_argument("--concurrency", nargs="+", type=int, default=[1, 4, 16])
    ap.add_argument("--requests", type=int, default=3, help="sequential requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--max-batch", type=int, default=16, help="volvox serve --max-batch")
    ap.add_argument("--plot", default="bench_serve.png", help="PNG to write (needs matplotlib; '' for none)")
    a = ap.parse_args()
    model_path = Path(a.model)
    if model_path.suffix == ".gguf":
        gguf = str(model_path)
    else:
        from volvox.hub import resolve_model_file
        gguf = str(resolve_model_file(a.model))
    rows = []
    for engine in a.engines:
        proc, url = start(engine, gguf, a.model, a.threads, a.max_batch)
        try:
            asyncio.run(phase(url, 1, 1, 8))  # warm-up: first-request costs out of the numbers
            for c in a.concurrency:
                r = asyncio.run(phase(url, c, a.requests, a.max_tokens))
                rows.append({"engine": engine, **r})
                print(f"{engine:>16}  C={c:<3} {r['tok_s']:7.1f} tok/s   TTFT p50 {r['ttft_p50'] * 1e3:7.0f} ms   "
                      f"p99 {r['ttft_p99'] * 1e3:7.0f} ms   ({r['tokens']} tokens, {r['wall_s']:.1f} s)", flush=True)
        finally:
            proc.terminate()
            proc.wait(60)
    print(f"\n{a.model} ({Path(gguf).name}), {a.threads} threads, {a.max_tokens} new tokens per request, "
          f"{a.requests} requests per client\n")
    print("| engine | concurrency | aggregate tok/s | TTFT p50 (ms) | TTFT p99 (ms) |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['engine']} | {r['concurrency']} | {r['tok_s']:.1f} | {r['ttft_p50'] * 1e3:.0f} | "
              f"{r['ttft_p99'] * 1e3:.0f} |")
    if a.plot:
        plot(rows, a.plot)
    return 0


def plot(rows: list[dict], path: str) -> None:
    """Aggregate tok/s and p99 TTFT against concurrency, one line per engine (skipped without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed: no plot)", file=sys.stderr)
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    for engine in dict.fromkeys(r["engine"] for r in rows):
        mine = [r for r in rows if r["engine"] == engine]
        left.plot([r["concurrency"] for r in mine], [r["tok_s"] for r in mine], marker="o", label=engine)
        right.plot([r["concurrency"] for r in mine], [r["ttft_p99"] * 1e3 for r in mine], marker="o", label=engine)
    left.set(xlabel="concurrent clients", ylabel="aggregate decode tok/s", xscale="log")
    right.set(xlabel="concurrent clients", ylabel="p99 time to first token (ms)", xscale="log", yscale="log")
    left.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    sys.exit(main())
