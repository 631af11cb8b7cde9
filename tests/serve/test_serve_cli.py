"""`volvox serve` as users start it: a subprocess on localhost by default; SIGTERM lets the requests in
flight finish, then the process exits 0."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from volvox.cli import build_parser


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model, *args):
    port = free_port()
    # cwd outside the source tree, so the installed package (with its compiled kernels) is the one run
    proc = subprocess.Popen([sys.executable, "-m", "volvox", "serve", str(model), "--port", str(port), *args],
                            cwd=Path(__file__).parent,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"volvox serve did not start:\n{proc.stdout.read()}")
        time.sleep(0.1)


def test_default_host_is_localhost():
    args = build_parser().parse_args(["serve"])
    assert args.host == "127.0.0.1" and args.api_key is None


def test_help_groups_options_and_shows_defaults():
    text = build_parser()._subparsers._group_actions[0].choices["serve"].format_help()
    for heading in ("model:", "server:", "batching:"):
        assert heading in text
    assert "(default: 127.0.0.1)" in text and "(default: 16)" in text


@pytest.mark.slow
def test_sigterm_drains_requests_in_flight(smollm2_gguf_path, smollm2):
    """SmolLM2 decodes 100 tokens in a second or more: SIGTERM arrives after the first of them."""
    proc, url = start_server(smollm2_gguf_path, "--max-batch", "4", "--threads", "2")
    try:
        want = smollm2.generate("Once upon a time", max_new_tokens=100)
        assert smollm2.last_stats.new_tokens == 100
        with httpx.stream("POST", url + "/v1/completions", timeout=60,
                          json={"prompt": "Once upon a time", "max_tokens": 100, "temperature": 0,
                                "stream": True}) as r:
            lines = r.iter_lines()
            first = next(lines)
            proc.send_signal(signal.SIGTERM)  # mid-stream
            events = [first] + [line for line in lines if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]"
        text = "".join(json.loads(e[6:])["choices"][0]["text"] for e in events[:-1])
        assert text == want  # the request in flight ran to its end
        assert proc.wait(30) == 0
        out = proc.stdout.read()
        assert "127.0.0.1" in out
        try:  # and nothing listens any more
            httpx.get(url + "/health", timeout=1)
            raise AssertionError("the server still answers after SIGTERM")
        except httpx.TransportError:
            pass
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
