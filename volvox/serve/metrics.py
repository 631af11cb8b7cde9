"""The server's counters and gauges, rendered as Prometheus text for ``GET /metrics``.

Counters only grow (requests by route and status, prompt and generated tokens, decode steps);
gauges are read when rendered (queue depth, sequence slots in use, KV caches alive, recent
decode tokens/s); time to first token is a histogram. One lock guards every update: the
scheduler thread and the event loop both write here.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable

TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)  # seconds
RATE_WINDOW = 10.0  # seconds of decode steps behind the tokens/s gauge


class Metrics:
    """What ``/metrics`` reports; ``gauges`` are callables read at render time."""

    def __init__(self, model_name: str):
        self.model_name = model_name
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = {}  # (route, status) -> count
        self.prompt_tokens = 0
        self.generated_tokens = 0
        self.decode_steps = 0
        self.decode_rows = 0  # sequences summed over decode steps: rows / steps = mean batch
        self.packed_steps = 0  # decode steps run as one packed forward pass (the others: per sequence)
        self.cancelled = 0
        self.failed_sequences = 0
        self.ttft_counts = [0] * (len(TTFT_BUCKETS) + 1)  # per bucket, the last one +Inf
        self.ttft_sum = 0.0
        self._recent: deque[tuple[float, int]] = deque()  # (time, tokens) of recent decode steps
        self.gauges: dict[str, tuple[str, Callable[[], float]]] = {}

    def add_gauge(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        """Report ``read()`` as gauge ``volvox_<name>``."""
        self.gauges[name] = (help_text, read)

    def request_done(self, route: str, status: int) -> None:
        """Count one finished HTTP request."""
        with self._lock:
            self.requests[(route, status)] = self.requests.get((route, status), 0) + 1

    def tokens(self, prompt: int = 0, generated: int = 0) -> None:
        """Count prompt tokens prefilled and tokens generated."""
        with self._lock:
            self.prompt_tokens += prompt
            self.generated_tokens += generated

    def decode_step(self, rows: int, packed: bool) -> None:
        """Count one decode step over ``rows`` sequences (each yields one token), ``packed`` into one
        forward pass or not."""
        now = time.monotonic()
        with self._lock:
            self.decode_steps += 1
            self.packed_steps += packed
            self.decode_rows += rows
            self._recent.append((now, rows))
            while self._recent and self._recent[0][0] < now - RATE_WINDOW:
                self._recent.popleft()

    def first_token(self, seconds: float) -> None:
        """Record one request's time from arrival to its first generated token."""
        with self._lock:
            self.ttft_sum += seconds
            i = next((i for i, b in enumerate(TTFT_BUCKETS) if seconds <= b), len(TTFT_BUCKETS))
            self.ttft_counts[i] += 1

    def sequence_ended(self, cancelled: bool = False, failed: bool = False) -> None:
        """Count a sequence retired because its client went away, or because it failed."""
        with self._lock:
            self.cancelled += cancelled
            self.failed_sequences += failed

    def decode_tok_s(self) -> float:
        """Tokens per second over the decode steps of the last RATE_WINDOW seconds."""
        now = time.monotonic()
        with self._lock:
            recent = [(t, n) for t, n in self._recent if t >= now - RATE_WINDOW]
        if len(recent) < 2:
            return 0.0
        span = recent[-1][0] - recent[0][0]
        return sum(n for _, n in recent[1:]) / span if span > 0 else 0.0

    def render(self) -> str:
        """Prometheus text exposition format (version 0.0.4)."""
        label = f'model="{self.model_name}"'
        out: list[str] = []

        def metric(name, kind, help_text, samples):
            out.append(f"# HELP volvox_{name} {help_text}")
            out.append(f"# TYPE volvox_{name} {kind}")
            for suffix, labels, value in samples:
                out.append(f"volvox_{name}{suffix}{{{labels}}} {value}")

        with self._lock:
            requests = sorted(self.requests.items())
            counters = [("prompt_tokens_total", "prompt tokens prefilled", self.prompt_tokens),
                        ("generated_tokens_total", "tokens generated", self.generated_tokens),
                        ("decode_steps_total", "batched decode steps run", self.decode_steps),
                        ("decode_rows_total", "sequences summed over decode steps", self.decode_rows),
                        ("packed_decode_steps_total", "decode steps run as one packed forward pass",
                         self.packed_steps),
                        ("cancelled_sequences_total", "sequences retired because the client went away",
                         self.cancelled),
                        ("failed_sequences_total", "sequences that failed with an error", self.failed_sequences)]
            ttft_counts, ttft_sum = list(self.ttft_counts), self.ttft_sum
        metric("requests_total", "counter", "HTTP requests by route and status",
               [("", f'{label},route="{r}",status="{s}"', n) for (r, s), n in requests])
        for name, help_text, value in counters:
            metric(name, "counter", help_text, [("", label, value)])
        cumulative, samples = 0, []
        for bound, count in zip(TTFT_BUCKETS + ("+Inf",), ttft_counts):
            cumulative += count
            samples.append(("_bucket", f'{label},le="{bound}"', cumulative))
        samples += [("_sum", label, round(ttft_sum, 6)), ("_count", label, cumulative)]
        metric("time_to_first_token_seconds", "histogram", "from request arrival to its first token", samples)
        metric("decode_tokens_per_second", "gauge", f"tokens generated per second over the last {RATE_WINDOW:g} s",
               [("", label, round(self.decode_tok_s(), 3))])
        for name, (help_text, read) in sorted(self.gauges.items()):
            metric(name, "gauge", help_text, [("", label, read())])
        return "\n".join(out) + "\n"


def parse_metrics(text: str) -> dict[str, float]:
    """``{name: value}`` of Prometheus text, each name's samples summed over their labels (for tests
    and tools reading /metrics: gauges and counters; a histogram's buckets sum to nothing useful)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            name = key.partition("{")[0]
            values[name] = values.get(name, 0.0) + float(value)
    return values
