"""Continuous batching: one thread owns the model; sequences join and leave between decode steps.

Each turn of the scheduler loop:

1. runs the jobs queued for the model (embeddings, classify, detect: one call each);
2. retires the sequences whose client went away (their KV caches are dropped with them);
3. admits waiting requests while a sequence slot is free (``max_batch`` slots);
4. prefills at most ``prefill_chunk`` prompt tokens, from the oldest admitted prompts, so a long
   prompt is spread over several turns and never stalls the others' decode for long;
5. runs ONE decode step over every sequence that has a token to feed
   (``volvox.tasks.generate.decode_step``: the weights are read once for the whole batch, each
   row attends to its own sequence's KV cache), then samples each row with the sequence's own
   sampler and streams the new text to its request. (For a batch size where measured step times
   say the single-token native plan run once per sequence is faster, it does that instead:
   ``StepCosts``.)

A sequence's text is cut exactly as ``LanguageModel.generate`` cuts it (end-of-generation
token, stop strings held back until they cannot start one, ``max_new_tokens``), so a greedy
request answers exactly what ``generate`` answers alone.

A fault in one sequence (sampling, detokenizing, its prefill, or its row of a decode step)
fails that request alone with a 500; the others continue.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
import traceback
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from volvox.errors import VolvoxError
from volvox.serve.metrics import Metrics
from volvox.tasks.generate import Session, decode_step
from volvox.tasks.sampling import Sampler, SamplingParams


class QueueFullError(VolvoxError):
    """The waiting queue holds ``max_queue`` requests already."""


class SchedulerStoppedError(VolvoxError):
    """The scheduler no longer takes requests (the server is shutting down)."""


@dataclass
class GenerationRequest:
    """One completion to generate; ``emit(event, payload)`` is called from the scheduler thread.

    Events: ``("piece", text)``, then ``("done", (finish_reason, prompt_tokens, completion_tokens))``
    or ``("error", message)``. ``emit`` must not block. Setting ``cancelled`` retires the sequence
    at the next turn."""

    prompt_ids: list[int]
    max_new_tokens: int
    params: SamplingParams
    stops: list[str]
    emit: Callable[[str, object], None]
    cancelled: bool = False
    arrived: float = field(default_factory=time.monotonic)


class _Sequence:
    """A request being served: its session (KV cache), sampler, detokenizer and stop-string state."""

    def __init__(self, lm, request: GenerationRequest, metrics: Metrics):
        self.request = request
        self.metrics = metrics
        self.session: Session = lm.new_session()
        self.sampler = Sampler(request.params)
        self.decoder = lm.tokenizer.stream_decoder()
        self.eog_ids = lm.tokenizer.eog_ids
        self.prefilled = 0            # prompt tokens already in the KV cache
        self.next_token: int | None = None  # sampled, to be fed by the next decode step
        self.text, self.emitted, self.new_tokens = "", 0, 0
        self.hold = max((len(s) for s in request.stops), default=1) - 1  # chars that might start a stop string
        self.finished = False

    def prefill(self, budget: int) -> int:
        """Feed up to ``budget`` more prompt tokens; after the last, sample the first new token.
        Returns the number of tokens fed."""
        ids = self.request.prompt_ids[self.prefilled:self.prefilled + budget]
        logits = self.session.forward(ids)[-1]  # (vocab,)
        self.prefilled += len(ids)
        self.metrics.tokens(prompt=len(ids))
        if self.prefilled == len(self.request.prompt_ids):
            self.accept(logits)
        return len(ids)

    def accept(self, logits: np.ndarray) -> None:
        """Sample the next token from ``logits`` (vocab,), stream its text, and decide whether to go on."""
        tok = self.sampler(logits, self.session.tokens)
        if self.new_tokens == 0:
            self.metrics.first_token(time.monotonic() - self.request.arrived)
        if tok in self.eog_ids:
            return self.finish("eos")
        self.new_tokens += 1
        self.metrics.tokens(generated=1)
        self.text += self.decoder.push(tok)
        start = max(0, self.emitted - self.hold)
        cut = min((i for i in (self.text.find(s, start) for s in self.request.stops) if i >= 0), default=-1)
        if cut >= 0:
            self._emit_until(cut)
            return self.finish("stop")
        self._emit_until(len(self.text) - self.hold)
        if self.new_tokens >= self.request.max_new_tokens:
            return self.finish("length")
        self.next_token = tok

    def _emit_until(self, end: int) -> None:
        if end > self.emitted:
            self.request.emit("piece", self.text[self.emitted:end])
            self.emitted = end

    def finish(self, reason: str) -> None:
        """End the sequence: flush held-back text (unless a stop string cut it) and report usage."""
        if reason != "stop":
            self.text += self.decoder.flush()
            self._emit_until(len(self.text))
        self.finished, self.next_token = True, None
        finish_reason = "length" if reason == "length" else "stop"
        self.request.emit("done", (finish_reason, len(self.request.prompt_ids), self.new_tokens))

    def fail(self, error: BaseException) -> None:
        """End the sequence with an error its request reports as a 500."""
        self.finished, self.next_token = True, None
        self.metrics.sequence_ended(failed=True)
        self.request.emit("error", f"generation failed: {type(error).__name__}: {error}")


class Scheduler:
    """Owns ``model`` on one thread; ``submit`` generation requests, ``run_job`` anything else."""

    def __init__(self, model, metrics: Metrics, *, max_batch: int = 16, max_queue: int = 64,
                 prefill_chunk: int = 128):
        if max_batch < 1 or max_queue < 0 or prefill_chunk < 1:
            raise VolvoxError(f"max_batch ({max_batch}) and prefill_chunk ({prefill_chunk}) must be >= 1, "
                             f"max_queue ({max_queue}) >= 0")
        self.model = model
        self.metrics = metrics
        self.max_batch, self.max_queue, self.prefill_chunk = max_batch, max_queue, prefill_chunk
        self._waiting: deque[GenerationRequest] = deque()
        self._jobs: deque[tuple[Callable[[], object], concurrent.futures.Future]] = deque()
        self._prefilling: list[_Sequence] = []  # admitted, prompt not yet fully in the KV cache
        self._decoding: list[_Sequence] = []    # prompt in, generating
        self._sessions: weakref.WeakSet = weakref.WeakSet()  # every KV cache still alive
        self.costs = StepCosts()
        self._wake = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="volvox-scheduler", daemon=True)
        metrics.add_gauge("queue_depth", "requests waiting for a sequence slot", lambda: len(self._waiting))
        metrics.add_gauge("slots_in_use", "sequence slots held (prefilling or decoding)", self.slots_in_use)
        metrics.add_gauge("slots_total", "sequence slots (--max-batch)", lambda: self.max_batch)
        metrics.add_gauge("kv_caches_alive", "KV caches not yet freed", lambda: len(self._sessions))

    def slots_in_use(self) -> int:
        """Sequences admitted and not yet retired."""
        return len(self._prefilling) + len(self._decoding)

    def start(self) -> None:
        """Start the scheduler thread."""
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Finish the admitted and waiting work, then stop the thread (new requests are refused)."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout)

    def submit(self, request: GenerationRequest) -> None:
        """Queue a generation request; QueueFullError when ``max_queue`` are already waiting."""
        with self._wake:
            if self._stopping:
                raise SchedulerStoppedError("the server is shutting down")
            if len(self._waiting) >= self.max_queue:
                raise QueueFullError(f"{len(self._waiting)} requests are already waiting (--max-queue "
                                     f"{self.max_queue}) with all {self.max_batch} sequence slots busy")
            self._waiting.append(request)
            self._wake.notify()

    def run_job(self, job: Callable[[], object]) -> concurrent.futures.Future:
        """Run ``job()`` on the scheduler thread between two turns; its Future."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._wake:
            if self._stopping:
                raise SchedulerStoppedError("the server is shutting down")
            self._jobs.append((job, future))
            self._wake.notify()
        return future

    # ---- the loop -----------------------------------------------------------------------------

    def _idle(self) -> bool:
        return not (self._waiting or self._jobs or self._prefilling or self._decoding)

    def _loop(self) -> None:
        while True:
            with self._wake:
                while self._idle() and not self._stopping:
                    self._wake.wait()
                if self._idle() and self._stopping:
                    return
            try:
                self._turn()
            except Exception as error:  # a bug outside any one sequence: fail what is live, keep serving
                traceback.print_exc()
                for seq in self._prefilling + self._decoding:
                    seq.fail(error)
                self._retire()

    def _turn(self) -> None:
        """One turn: jobs, retire cancelled, admit, one prefill chunk, one decode step."""
        while self._jobs:
            job, future = self._jobs.popleft()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(job())
                except Exception as error:
                    future.set_exception(error)
        self._retire()
        while self._waiting and self.slots_in_use() < self.max_batch:
            with self._wake:
                request = self._waiting.popleft()
            if request.cancelled:
                self.metrics.sequence_ended(cancelled=True)
                continue
            seq = _Sequence(self.model, request, self.metrics)
            self._sessions.add(seq.session)
            self._prefilling.append(seq)
        self._prefill()
        self._decode()
        self._retire()

    def _retire(self) -> None:
        """Drop finished and cancelled sequences (and with them their KV caches)."""
        for group in (self._prefilling, self._decoding):
            for seq in group:
                if seq.request.cancelled and not seq.finished:
                    self.metrics.sequence_ended(cancelled=True)
                    seq.finished = True
            group[:] = [seq for seq in group if not seq.finished]
        self._decoding += [seq for seq in self._prefilling if seq.prefilled == len(seq.request.prompt_ids)]
        self._prefilling[:] = [seq for seq in self._prefilling if seq.prefilled < len(seq.request.prompt_ids)]

    def _prefill(self) -> None:
        """Feed up to ``prefill_chunk`` prompt tokens, oldest admitted prompt first."""
        budget = self.prefill_chunk
        for seq in self._prefilling:
            if budget == 0:
                break
            try:
                budget -= seq.prefill(budget)
            except Exception as error:
                seq.fail(error)

    def _decode(self) -> None:
        """One decode step over every sequence with a token to feed; each row sampled by its sequence."""
        batch = [seq for seq in self._decoding if seq.next_token is not None and not seq.request.cancelled]
        if not batch:
            return
        tokens = [seq.next_token for seq in batch]
        packed = len(batch) > 1 and self.costs.packed_is_faster(len(batch))
        try:
            rows = self._forward(batch, tokens, packed)  # (batch, vocab)
        except Exception:  # find the sequence at fault: each alone (a failed step advanced no position)
            rows = None
        self.metrics.decode_step(len(batch), packed)
        for i, seq in enumerate(batch):
            try:
                seq.accept(rows[i] if rows is not None else seq.session.forward([tokens[i]])[-1])
            except Exception as error:
                seq.fail(error)

    def _forward(self, batch: list[_Sequence], tokens: list[int], packed: bool) -> np.ndarray:
        """Logits (len(batch), vocab) of each sequence's next token: one packed decode step, or each
        sequence through the single-token native plan (``packed`` False: what the step costs measured
        so far say is faster for this many sequences)."""
        n = len(batch)
        t0 = time.perf_counter()
        if packed:
            rows = decode_step(self.model, [seq.session for seq in batch], tokens)
        else:
            rows = np.stack([seq.session.forward([tok])[-1] for seq, tok in zip(batch, tokens)])
        self.costs.record(n, packed, time.perf_counter() - t0)
        return rows


class StepCosts:
    """Measured decode-step times: a packed step over n sequences (``decode_step``) against n
    single-token native steps. The packed step reads the weights once for all n rows but runs through
    the per-op executor; the native plan is one call per token. Which wins depends on n, the model and
    the machine, so it is measured: each choice's seconds per step are a moving average, and a choice
    not taken is re-measured every ``EXPLORE_EVERY`` steps of that size."""

    EXPLORE_EVERY = 64
    SMOOTHING = 0.2  # weight of the newest measurement

    def __init__(self):
        self.single: float | None = None           # seconds of one native single-token step
        self.packed: dict[int, float] = {}          # batch size -> seconds of one packed step
        self.since_packed: dict[int, int] = {}      # batch size -> steps since a packed one was measured

    def packed_is_faster(self, n: int) -> bool:
        """Whether to run ``n`` sequences as one packed step (a choice not yet measured, or stale, is taken
        to measure it)."""
        if self.single is None:
            return False
        if n not in self.packed or self.since_packed.get(n, 0) >= self.EXPLORE_EVERY:
            return True
        return self.packed[n] < n * self.single

    def record(self, n: int, packed: bool, seconds: float) -> None:
        """Fold one step's time into the averages."""
        if packed:
            old = self.packed.get(n)
            self.packed[n] = seconds if old is None else old + self.SMOOTHING * (seconds - old)
            self.since_packed[n] = 0
        else:
            per_token = seconds / n
            self.single = per_token if self.single is None else self.single + self.SMOOTHING * (per_token - self.single)
            self.since_packed[n] = self.since_packed.get(n, 0) + 1
