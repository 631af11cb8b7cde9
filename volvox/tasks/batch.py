"""Batched generation: many prompts decoded together, each exactly as if generated alone.

Each prompt is prefilled in its own session (a prompt already fills a matrix
multiply). Then every decode step packs the next token of each unfinished
sequence as one row of a single forward pass (runtime/batch.py): the weights
are read once per step for the whole batch, while attention runs each row
against its own sequence's KV cache. There is no padding and no attention mask,
so no row can see another sequence and positions need no correction.
"""

from __future__ import annotations

import time

import numpy as np

from volvox.runtime.batch import BatchContext
from volvox.tasks.sampling import Sampler, SamplingParams


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
        s.ctx.kv.reserve(s.ctx.pos + 1)
        s.ctx.output_rows = "last"
    positions = np.array([s.ctx.pos for s in sessions], dtype=np.int32)  # (batch,)
    logits = lm._forward(BatchContext([(s.ctx, 1) for s in sessions]), np.array(tokens, dtype=np.int32), positions)
    for s, tok in zip(sessions, tokens):
        s.ctx.pos += 1
        s.tokens.append(tok)
    return logits


def generate_batch(lm, prompts: list[list[int]], max_new: int, params: SamplingParams, stops: list[str]) -> list[str]:
    """The continuation of each prompt (token ids), in order; see the module docstring."""
    from volvox.tasks.generate import GenerationStats

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
