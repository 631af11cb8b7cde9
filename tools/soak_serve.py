"""Soak test of volvox serve: mixed traffic at concurrency 16 for --minutes, then the leak checks.

Starts `volvox serve MODEL` (or uses --url), learns each prompt's sequential twin (its greedy
answer asked alone, before the load), then runs --concurrency workers that each loop over a mix of
requests: streamed and whole greedy completions and chat completions (answers checked against their
twins), streams cancelled after a few events, and malformed requests (bad JSON, unknown model,
negative max_tokens, over-long prompts: each must get its 4xx). Reports:

- the server's RSS after warm-up (the first --warmup seconds) and at the end, and their ratio;
- /metrics once idle: sequence slots in use, KV caches alive, queue depth (all must be 0);
- requests by kind, wrong answers, unexpected statuses, client-side errors.

Exit status 0 only if every check passes.

    python tools/soak_serve.py --minutes 30            # the documented soak
    python tools/soak_serve.py --minutes 3 --model smollm2-135m-instruct
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import subprocess
import sys
import time
from collections import Counter

import httpx

from volvox.serve.metrics import parse_metrics

PROMPTS = ["Once upon a time", "The capital of France is", "List three fruits:", "def add(a, b):",
           "The sun is", "Water boils at", "A good name for a cat is", "The opposite of hot is"]
CHATS = [[{"role": "user", "content": "Say hello in French."}], [{"role": "user", "content": "What is 3 + 4?"}],
         [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a color."}]]
MAX_TOKENS = 48


def rss_kib(pid: int) -> int:
    """Resident set size of process ``pid`` in KiB (Linux /proc)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def start_server(model: str, threads: int | None, max_batch: int) -> tuple[subprocess.Popen, str]:
    """`volvox serve` on a free port; its process and URL once /health answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "volvox", "serve", model, "--port", str(port), "--max-batch", str(max_batch),
           "--log-level", "warning"] + (["--threads", str(threads)] if threads else [])
    proc = subprocess.Popen(cmd)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("volvox serve did not start")


async def complete(http: httpx.AsyncClient, url: str, chat: bool, item, stream: bool) -> str:
    """The text of one greedy (chat) completion, streamed or whole."""
    body = {"max_tokens": MAX_TOKENS, "temperature": 0, "stream": stream}
    body.update({"messages": item} if chat else {"prompt": item})
    route = url + ("/v1/chat/completions" if chat else "/v1/completions")
    if not stream:
        r = await http.post(route, json=body)
        r.raise_for_status()
        choice = r.json()["choices"][0]
        return choice["message"]["content"] if chat else choice["text"]
    text = ""
    async with http.stream("POST", route, json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                event = json.loads(line[6:])
                if "error" in event:
                    raise RuntimeError(event["error"]["message"])
                choice = event["choices"][0]
                text += (choice["delta"].get("content") or "") if chat else choice["text"]
    return text


async def cancelled_stream(http: httpx.AsyncClient, url: str, rng: random.Random) -> None:
    """A stream the client abandons after 1-5 events."""
    body = {"prompt": rng.choice(PROMPTS), "max_tokens": 200, "temperature": 0.7, "stream": True}
    async with http.stream("POST", url + "/v1/completions", json=body) as r:
        n = rng.randint(1, 5)
        async for line in r.aiter_lines():
            n -= line.startswith("data: ")
            if n <= 0:
                break


MALFORMED = [  # (body bytes, expected status)
    (b"{oops", 400),
    (json.dumps({"model": "no-such-model", "prompt": "x"}).encode(), 404),
    (json.dumps({"prompt": "x", "max_tokens": -3}).encode(), 400),
    (json.dumps({"prompt": list(range(5, 9000)), "max_tokens": 10}).encode(), 400),
]


async def worker(http, url, twins, deadline, rng, tally: Counter, problems: list) -> None:
    """Requests of every kind, at random, until ``deadline``."""
    while time.monotonic() < deadline:
        kind = rng.choice(["stream", "whole", "chat-stream", "chat-whole", "cancel", "malformed"])
        try:
            if kind == "cancel":
                await cancelled_stream(http, url, rng)
            elif kind == "malformed":
                body, status = rng.choice(MALFORMED)
                r = await http.post(url + "/v1/completions", content=body, headers={"Content-Type": "application/json"})
                if r.status_code != status or "error" not in r.json():
                    problems.append(f"malformed request: status {r.status_code}, expected {status}: {r.text[:200]}")
            else:
                chat = kind.startswith("chat")
                key = rng.randrange(len(CHATS) if chat else len(PROMPTS))
                item = CHATS[key] if chat else PROMPTS[key]
                got = await complete(http, url, chat, item, stream=kind.endswith("stream"))
                if got != twins[(chat, key)]:
                    problems.append(f"{kind} #{key}: {got!r} != its sequential twin {twins[(chat, key)]!r}")
            tally[kind] += 1
        except (httpx.HTTPError, RuntimeError, ValueError) as e:
            problems.append(f"{kind}: {type(e).__name__}: {e}")


async def soak(url: str, pid: int | None, minutes: float, warmup: float, concurrency: int, seed: int) -> int:
    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=concurrency + 8)) as http:
        twins = {}
        for chat, items in ((False, PROMPTS), (True, CHATS)):
            for key, item in enumerate(items):  # one at a time: the sequential answers
                twins[(chat, key)] = await complete(http, url, chat, item, stream=False)
        tally, problems = Counter(), []
        start = time.monotonic()
        deadline = start + 60 * minutes
        rng = random.Random(seed)
        tasks = [asyncio.create_task(worker(http, url, twins, deadline, random.Random(rng.random()), tally, problems))
                 for _ in range(concurrency)]
        await asyncio.sleep(min(warmup, 60 * minutes))
        rss_warm = rss_kib(pid) if pid else None
        await asyncio.gather(*tasks)
        elapsed = time.monotonic() - start
        for _ in range(100):  # idle: every slot given back
            metrics = parse_metrics((await http.get(url + "/metrics")).text)
            if metrics["volvox_slots_in_use"] == 0 and metrics["volvox_queue_depth"] == 0:
                break
            await asyncio.sleep(0.1)
        rss_end = rss_kib(pid) if pid else None
    leaks = {k: metrics[f"volvox_{k}"] for k in ("slots_in_use", "kv_caches_alive", "queue_depth")}
    print(f"\nsoak: {elapsed / 60:.1f} min at concurrency {concurrency}, {sum(tally.values())} requests: "
          + ", ".join(f"{k} {n}" for k, n in sorted(tally.items())))
    print(f"server counters: {metrics['volvox_generated_tokens_total']:.0f} tokens generated, "
          f"{metrics['volvox_cancelled_sequences_total']:.0f} sequences cancelled, "
          f"{metrics['volvox_failed_sequences_total']:.0f} failed, "
          f"mean decode batch {metrics['volvox_decode_rows_total'] / max(1, metrics['volvox_decode_steps_total']):.1f}")
    ok = not problems and not any(leaks.values())
    if rss_warm:
        ratio = rss_end / rss_warm
        ok = ok and ratio <= 1.10
        print(f"RSS after {warmup:.0f} s warm-up: {rss_warm / 1024:.1f} MiB; at the end: {rss_end / 1024:.1f} MiB "
              f"({100 * (ratio - 1):+.1f}%)")
    print(f"after the load: {', '.join(f'{k} {v:.0f}' for k, v in leaks.items())}")
    print(f"answers not equal to their sequential twin, or unexpected statuses: {len(problems)}")
    for p in problems[:20]:
        print("  ", p)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--url", default=None, help="soak a server already running (RSS needs --pid)")
    ap.add_argument("--pid", type=int, default=None, help="with --url: the server's process id, for RSS")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=60.0, help="seconds of load before the RSS baseline")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    proc = None
    if a.url:
        url, pid = a.url, a.pid
    else:
        proc, url = start_server(a.model, a.threads, a.max_batch)
        pid = proc.pid
    try:
        return asyncio.run(soak(url, pid, a.minutes, a.warmup, a.concurrency, a.seed))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(120)


if __name__ == "__main__":
    sys.exit(main())
