"""Text generation: sessions with their caches (KV, SSM state), prefill then decode, sampling, streaming, chat.

Batched generation: many prompts decoded together, each exactly as if generated alone.

Each prompt is prefilled in its own session (a prompt already fills a matrix
multiply). Then every decode step packs the next token of each unfinished
sequence as one row of a single forward pass (ops/context.py): the weights
are read once per step for the whole batch, while attention runs each row
against its own sequence's KV cache. There is no padding and no attention mask,
so no row can see another sequence and positions need no correction.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from volvox.errors import GenerationError
from volvox.ops.context import BatchContext, RunContext
from volvox.runtime.executor import Executor
from volvox.runtime.kv_cache import KVCache, kv_window
from volvox.runtime.state_cache import StateCache, StateShape
from volvox.runtime.plan import Plan, Unsupported
from volvox.tasks.sampling import Sampler, SamplingParams
from volvox.tasks.text import TextModel

PREFILL_CHUNK = 256  # prompt tokens per forward pass: bounds attention scratch memory


@dataclass
class GenerationStats:
    """Timings of the last generate() call."""

    prompt_tokens: int = 0
    prefill_seconds: float = 0.0
    new_tokens: int = 0
    decode_seconds: float = 0.0
    decode_native_seconds: float = 0.0  # of decode_seconds, inside the native decode plan's calls
    finish_reason: str = ""

    @property
    def prefill_tok_s(self) -> float:
        """Prompt tokens per second."""
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds else 0.0

    @property
    def decode_tok_s(self) -> float:
        """Generated tokens per second after the first (which prefill produced)."""
        n = self.new_tokens - 1
        return n / self.decode_seconds if n > 0 and self.decode_seconds else 0.0


class Session:
    """One conversation's state: the caches its model declares (a KV cache for attention layers, a
    state cache for SSM layers) and the number of tokens in them."""

    def __init__(self, lm: "LanguageModel"):
        cfg = lm.config
        self.lm = lm
        kv = KVCache(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, cfg.context_length,
                     kv_window(lm.graph)) if cfg.n_kv_heads else None
        self.ctx = RunContext(kv=kv, state=StateCache(lm.state_shape) if lm.state_shape else None)
        self.tokens: list[int] = []

    @property
    def kv(self) -> KVCache | None:
        """The session's KV cache. After GPU forwards its newest rows live on the device; reading its
        ``keys`` / ``values`` downloads them first (once)."""
        return self.ctx.kv

    def reserve(self, n_tokens: int) -> None:
        """Check that ``n_tokens`` fit the context; GenerationError past the context limit."""
        if n_tokens > self.lm.config.context_length:
            raise GenerationError(f"sequence of {n_tokens} tokens exceeds the context length of "
                                  f"{self.lm.config.context_length}")

    def forward(self, ids: list[int] | np.ndarray, all_logits: bool = False) -> np.ndarray:
        """Append ``ids`` to the context; logits (len(ids) or 1, vocab) for all or only the last position."""
        return self._feed(ids, all_logits)

    def next_token(self, ids: list[int] | np.ndarray, sampler: Sampler) -> int:
        """Append ``ids`` to the context and pick the token after them: on the device when the model
        runs on a GPU and the sampler allows it (one submit, a 4-byte download), else from the logits."""
        pick = sampler.device_pick() if getattr(self.lm.executor, "picks_on_device", False) else None
        if pick is None:
            return sampler(self._feed(ids, False)[-1], self.tokens)
        return self._feed(ids, False, pick)

    def _feed(self, ids, all_logits: bool, pick=None):
        """forward(), or with ``pick`` the token the device picks after the last chunk."""
        ids = np.asarray(ids, dtype=np.int32).reshape(-1)  # (n,)
        if ids.size == 0:
            raise GenerationError("forward() needs at least one token")
        if ids.min() < 0 or ids.max() >= self.lm.config.vocab_size:
            raise GenerationError(f"token ids must be in [0, {self.lm.config.vocab_size}), got {ids.min()}..{ids.max()}")
        self.reserve(self.ctx.pos + ids.size)
        self.ctx.output_rows = "all" if all_logits else "last"
        chunks = []
        for start in range(0, ids.size, PREFILL_CHUNK):
            part = ids[start:start + PREFILL_CHUNK]
            positions = np.arange(self.ctx.pos, self.ctx.pos + part.size, dtype=np.int32)  # (n,)
            last = start + PREFILL_CHUNK >= ids.size
            logits = self.lm._forward(self.ctx, part, positions, pick if last else None)
            self.ctx.pos += part.size
            if all_logits or last:
                chunks.append(logits)
        self.tokens.extend(int(i) for i in ids)
        if pick is not None:
            return int(chunks[0])
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


class LanguageModel(TextModel):
    """A decoder-only language model: ``generate``, ``chat``, ``logits`` and a tokenizer."""

    def __init__(self, graph, weights, metadata, source, config, tokenizer, **kw):
        super().__init__(graph, weights, metadata, source, config, tokenizer, **kw)
        self.last_stats = GenerationStats()
        state = metadata.get("state")  # SSM layers' state shapes (runtime/state_cache.py), if it has any
        self.state_shape = StateShape.from_metadata(state, source) if state is not None else None
        self._decode_plan: Plan | None | bool = None  # built on the first decode step; False: not lowerable
        self._closers.insert(0, self._drop_decode_plan)
        if hasattr(self.executor, "release_kv"):  # a GPU executor: sessions keep their caches past close()
            self._closers.insert(0, self.executor.release_kv)

    def _forward(self, ctx: RunContext, tokens: np.ndarray, positions: np.ndarray, pick=None):
        """Logits of one forward, or with a ``pick`` (GPU executors) the token id picked on the device."""
        self._check_open()
        if pick is not None:
            return int(self.executor.run(ctx, {"tokens": tokens, "positions": positions}, pick)["token"][0])
        if tokens.size == 1 and type(ctx) is RunContext and ctx.kv is not None:
            plan = self._native_decode_plan()
            if plan:
                logits = plan.run_token(ctx.kv, int(tokens[0]), int(positions[0]), self.executor.profile)
                if logits is not None:
                    return logits
        return self.executor.run(ctx, {"tokens": tokens, "positions": positions})["logits"]

    def _native_decode_plan(self) -> Plan | None:
        """The single-token forward pass as one native call (a token step's plan, runtime/plan.py),
        built on first use; None for graphs it cannot lower, GPU executors and reference mode."""
        if self._decode_plan is None:
            ex = self.executor
            self._decode_plan = False
            if type(ex) is Executor and not ex.reference:
                weights = {name: w for name, (_, w) in zip(self.graph.weights, ex.weight_slots)}
                try:
                    self._decode_plan = Plan(self.graph, weights, layers=self.config.n_layers,
                                             capacity=self.config.context_length)
                except Unsupported:
                    pass
        return self._decode_plan or None

    def _native_seconds(self) -> float:
        """Wall seconds spent inside the decode plan so far (0 without one)."""
        return self._decode_plan.seconds if self._decode_plan else 0.0

    def _drop_decode_plan(self) -> None:
        self._decode_plan = False  # its pointers into the weights die with them

    def new_session(self) -> Session:
        """A fresh session (empty KV cache) for incremental use."""
        self._check_open()
        return Session(self)

    def logits(self, ids) -> np.ndarray:
        """Logits (len(ids), vocab) for every position of ``ids``, from an empty context."""
        return self.new_session().forward(ids, all_logits=True)

    def generate(self, prompt: str | list[int], max_new_tokens: int = 64, *, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, repetition_penalty: float = 1.0, seed: int | None = None,
                 stop: list[str] | str | None = None, stream: bool = False, add_bos: bool | None = None):
        """Continue ``prompt`` (text or token ids); returns the new text, or an iterator of pieces if ``stream``.

        Greedy by default (temperature 0). Stops at an end-of-generation token, at any
        ``stop`` string (not included in the output) or after ``max_new_tokens``.
        A list of prompts (texts or id lists) is generated as one batch (generate_batch)
        and returns a list of texts, each equal to generating that prompt alone.
        """
        self._check_open()
        if isinstance(max_new_tokens, bool) or int(max_new_tokens) != max_new_tokens or max_new_tokens < 0:
            raise GenerationError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
        params = SamplingParams(temperature, top_k, top_p, repetition_penalty, seed)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if any(not isinstance(s, str) or not s for s in stops):
            raise GenerationError(f"stop strings must be non-empty strings, got {stop!r}")
        if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(p, (str, list, tuple)) for p in prompt):
            if stream:
                raise GenerationError("stream=True needs a single prompt, not a list of prompts")
            batch = [self._prompt_ids(p, add_bos, max_new_tokens) for p in prompt]
            return generate_batch(self, batch, int(max_new_tokens), params, stops)
        pieces = self._generate_pieces(self._prompt_ids(prompt, add_bos, max_new_tokens), int(max_new_tokens),
                                       Sampler(params), stops)
        return pieces if stream else "".join(pieces)

    def _prompt_ids(self, prompt: str | list[int], add_bos: bool | None, max_new_tokens: int) -> list[int]:
        """Token ids of one prompt (BOS for an empty one); GenerationError if it cannot fit the context."""
        ids = (list(prompt) if not isinstance(prompt, str)
               else self.tokenizer.encode(prompt, add_bos=add_bos))
        if not ids:
            if self.tokenizer.bos_id is None:
                raise GenerationError("the prompt is empty and the model has no BOS token to start from")
            ids = [self.tokenizer.bos_id]
        limit = self.config.context_length
        if len(ids) + max_new_tokens > limit:
            raise GenerationError(f"prompt of {len(ids)} tokens + max_new_tokens {max_new_tokens} exceeds "
                                  f"the context length of {limit} tokens")
        return ids

    def _generate_pieces(self, ids: list[int], max_new: int, sampler: Sampler, stops: list[str]) -> Iterator[str]:
        stats = self.last_stats = GenerationStats(prompt_tokens=len(ids))
        if max_new == 0:
            stats.finish_reason = "length"
            return
        session = self.new_session()
        t0 = time.perf_counter()
        tok = session.next_token(ids, sampler)
        stats.prefill_seconds = time.perf_counter() - t0
        t_decode, native0 = time.perf_counter(), self._native_seconds()
        decoder = self.tokenizer.stream_decoder()
        text, emitted = "", 0
        hold = max((len(s) for s in stops), default=1) - 1  # chars that might start a stop string
        stats.finish_reason = "length"
        for step in range(max_new):
            if tok in self.tokenizer.eog_ids:
                stats.finish_reason = "eos"
                break
            stats.new_tokens += 1
            text += decoder.push(tok)
            cut = min((i for i in (text.find(s, max(0, emitted - hold)) for s in stops) if i >= 0), default=-1)
            if cut >= 0:
                if cut > emitted:
                    yield text[emitted:cut]
                emitted = len(text)
                stats.finish_reason = "stop"
                break
            safe = len(text) - hold
            if safe > emitted:
                yield text[emitted:safe]
                emitted = safe
            if step + 1 < max_new:
                tok = session.next_token([tok], sampler)
        if stats.finish_reason != "stop":
            text += decoder.flush()
            if len(text) > emitted:
                yield text[emitted:]
        stats.decode_seconds = time.perf_counter() - t_decode
        stats.decode_native_seconds = self._native_seconds() - native0

    def chat(self, messages: list[dict], **kwargs):
        """Reply to a conversation (list of {"role", "content"}) using the model's chat template."""
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m and "content" in m for m in messages):
            raise GenerationError("messages must be a list of {'role': ..., 'content': ...} dicts")
        prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        kwargs.setdefault("add_bos", False)
        kwargs.setdefault("max_new_tokens", 256)
        return self.generate(prompt, **kwargs)


# ------------------------------------------------------------------------------ batches
class _Sequence:
    """One prompt's decoding state: session, sampler, text so far, where it stops."""

    def __init__(self, lm, ids: list[int], params: SamplingParams):
        self.session = lm.new_session()
        self.logits = self.session.forward(ids)[-1]  # (vocab,)
        self.sampler = Sampler(params)
        self.decoder = lm.tokenizer.stream_decoder()
        self.eog_ids = lm.tokenizer.eog_ids
        self.text, self.cut, self.done, self.new_tokens = "", -1, False, 0

    def accept(self, stops: list[str]) -> int | None:
        """Sample the next token and add its text; the token, or None when the sequence ended."""
        tok = self.sampler(self.logits, self.session.tokens)
        if tok in self.eog_ids:
            self.done = True
            return None
        self.new_tokens += 1
        start = max(0, len(self.text) - max((len(s) for s in stops), default=1) + 1)
        self.text += self.decoder.push(tok)
        self.cut = min((i for i in (self.text.find(s, start) for s in stops) if i >= 0), default=-1)
        self.done = self.cut >= 0
        return None if self.done else tok

    def result(self) -> str:
        """The generated text, cut before the first stop string."""
        return self.text[:self.cut] if self.cut >= 0 else self.text + self.decoder.flush()


def decode_step(lm, sessions: list, tokens: list[int]) -> np.ndarray:
    """Append one token to each session in one packed forward pass; logits (len(sessions), vocab)."""
    for s in sessions:
        s.reserve(s.ctx.pos + 1)
        s.ctx.output_rows = "last"
    positions = np.array([s.ctx.pos for s in sessions], dtype=np.int32)  # (batch,)
    logits = lm._forward(BatchContext([(s.ctx, 1) for s in sessions]), np.array(tokens, dtype=np.int32), positions)
    for s, tok in zip(sessions, tokens):
        s.ctx.pos += 1
        s.tokens.append(tok)
    return logits


def generate_batch(lm, prompts: list[list[int]], max_new: int, params: SamplingParams, stops: list[str]) -> list[str]:
    """The continuation of each prompt (token ids), in order; see "Batched generation" above."""
    stats = lm.last_stats = GenerationStats(prompt_tokens=sum(map(len, prompts)), finish_reason="batch")
    if max_new == 0:
        return [""] * len(prompts)
    t0 = time.perf_counter()
    seqs = [_Sequence(lm, ids, params) for ids in prompts]
    stats.prefill_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    for step in range(max_new):
        live = [(q, q.accept(stops)) for q in seqs if not q.done]
        live = [(q, tok) for q, tok in live if tok is not None]
        if not live or step + 1 == max_new:
            break
        logits = decode_step(lm, [q.session for q, _ in live], [tok for _, tok in live])  # (batch, vocab)
        for (q, _), row in zip(live, logits):
            q.logits = row
    stats.decode_seconds = time.perf_counter() - t0
    stats.new_tokens = sum(q.new_tokens for q in seqs)
    return [q.result() for q in seqs]
