"""Encoder-decoder models: encode the input once, then decode as a language model does.

``encode`` runs the encoder graph once per input: its hidden states and, per decoder layer, the
cross-attention keys and values (projected by the encoder graph, so never again during the decode).
A ``DecoderSession`` is generate.py's Session over a SourceContext (ops/cross_attention.py): the
decoder's self-attention KV cache plus those cross keys/values. Decoding reuses generate.py's
sampler and packed batch step: a batch's decode step is one forward pass whose cross-attention
runs each row against its own input.

The model's ``metadata["seq2seq"]`` says how: ``source`` ("features": an array such as Whisper's
log-mel spectrogram; "text": token ids of the tokenizer, between ``source_prefix`` and
``source_suffix`` ids when given), ``decoder_start`` (the ids every decode
starts from), ``eos`` (ids that end it), ``suppress`` / ``suppress_begin`` (ids never sampled /
not sampled first) and ``text_tokens`` (ids at or above it are control tokens, not text).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from volvox.errors import BlueprintError, GenerationError
from volvox.formats.imported import ModelDims
from volvox.model import Model
from volvox.ops.cross_attention import SourceContext
from volvox.tasks.generate import GenerationStats, Session, decode_step
from volvox.tasks.sampling import Sampler, SamplingParams
from volvox.tasks.text import TextModel


@dataclass
class EncodedSource:
    """One input after the encoder: hidden states (source_len, dim) and, per decoder layer, the
    cross-attention keys and values, each (n_heads, source_len, head_dim)."""

    hidden: np.ndarray
    cross: list[tuple[np.ndarray, np.ndarray]]


class DecoderSession(Session):
    """One decode's state: generate.py's Session (self-attention KV cache, tokens so far) whose run
    context also holds the encoded input."""

    def __init__(self, model: "Seq2SeqModel", source: EncodedSource):
        super().__init__(model)
        self.ctx = SourceContext(kv=self.ctx.kv, cross=source.cross)


class Seq2SeqModel(TextModel):
    """An encoder-decoder model: ``seq2seq`` (input -> text), ``encode`` and ``logits``."""

    @classmethod
    def from_imported(cls, imported, **kw) -> "Seq2SeqModel":
        """The decoder of ``imported`` as this model, its ``metadata["encoder"]`` import as the encoder."""
        metadata = dict(imported.metadata)
        encoder = metadata.pop("encoder", None)
        if encoder is None or not isinstance(metadata.get("seq2seq"), dict):
            raise BlueprintError(f"{imported.source}: a seq2seq model needs an encoder graph and seq2seq metadata")
        if kw.get("device") is not None:
            kw["device"].close()
            print("Backend: CPU (encoder-decoder models run on the CPU)", file=sys.stderr)
            kw["device"] = None
        dims = ModelDims.from_metadata(metadata.get("dims"), imported.source)
        model = cls(imported.graph, imported.weights, metadata, imported.source, dims, imported.tokenizer,
                    closers=imported.closers, **kw)
        model.encoder = Model(encoder.graph, encoder.weights, encoder.metadata, imported.source, **kw)
        return model

    def __init__(self, graph, weights, metadata, source, config, tokenizer, **kw):
        super().__init__(graph, weights, metadata, source, config, tokenizer, **kw)
        self.spec = metadata["seq2seq"]
        self.encoder: Model | None = None
        self.last_stats = GenerationStats()

    # ---------------------------------------------------------------- encoder
    def encode(self, source) -> EncodedSource:
        """Run the encoder once on ``source`` (features (n_mels, frames) as an array, or text)."""
        self._check_open()
        if self.spec["source"] == "features":
            feeds = {"features": self._features(source)}
        else:
            ids = np.asarray(self._source_ids(source) if isinstance(source, str) else source, np.int32)
            if ids.ndim != 1 or ids.size == 0:
                raise GenerationError("the input must be a non-empty text or list of token ids")
            feeds = {"tokens": ids, "positions": np.arange(ids.size, dtype=np.int32)}  # (seq,) each
            feeds = {s.name: feeds[s.name] for s in self.encoder.graph.inputs}
        out = self.encoder.run(feeds)
        nh, hd = int(self.spec["cross_heads"]), int(self.spec["cross_head_dim"])
        cross = []
        for layer in range(self.config.n_layers):
            k, v = out[f"cross_k.{layer}"], out[f"cross_v.{layer}"]  # (source_len, nh * hd) each
            cross.append(tuple(np.ascontiguousarray(t.reshape(-1, nh, hd).transpose(1, 0, 2)) for t in (k, v)))
        return EncodedSource(out["hidden"], cross)

    def _source_ids(self, text: str) -> list[int]:
        """The encoder's token ids of ``text``: the tokenizer's (T5's appends "</s>"), or between the
        model's ``source_prefix`` and ``source_suffix`` ids when it names them (BART: <s> ... </s>)."""
        if "source_prefix" not in self.spec and "source_suffix" not in self.spec:
            return self.tokenizer.encode(text)
        return (list(self.spec.get("source_prefix", [])) + self.tokenizer.encode(text, add_bos=False)
                + list(self.spec.get("source_suffix", [])))

    def _features(self, source) -> np.ndarray:
        """The encoder's (frames, n_mels) float32 input of features given as (n_mels, frames)."""
        n_mels, frames = int(self.spec["n_mels"]), int(self.spec["frames"])
        if not isinstance(source, np.ndarray):
            raise GenerationError(f"this model reads features: a ({n_mels}, {frames}) array, "
                                  f"got {type(source).__name__}")
        if source.shape != (n_mels, frames):
            raise GenerationError(f"features must have shape ({n_mels}, {frames}), got {source.shape}")
        features = np.ascontiguousarray(source.T, dtype=np.float32)  # (frames, n_mels)
        if not np.isfinite(features).all():
            raise GenerationError("features contain NaN or infinite values")
        return features

    # ---------------------------------------------------------------- decoder
    def _forward(self, ctx, tokens: np.ndarray, positions: np.ndarray, pick=None) -> np.ndarray:
        """The decoder's logits of one forward; ``pick`` (a device-side token choice) is never given:
        encoder-decoders run on the CPU."""
        self._check_open()
        return self.executor.run(ctx, {"tokens": tokens, "positions": positions})["logits"]

    def new_session(self, source: EncodedSource) -> DecoderSession:
        """A fresh decode (empty KV cache) over the encoded ``source``."""
        self._check_open()
        return DecoderSession(self, source)

    def logits(self, source, decoder_ids) -> np.ndarray:
        """Decoder logits (len(decoder_ids), vocab) for every position of ``decoder_ids`` given ``source``."""
        return self.new_session(self.encode(source)).forward(decoder_ids, all_logits=True)

    def _masked(self, logits: np.ndarray, first: bool) -> np.ndarray:
        """``logits`` (vocab,) with the suppressed ids (and at the first step the begin-suppressed) at -inf."""
        banned = list(self.spec.get("suppress", [])) + (list(self.spec.get("suppress_begin", [])) if first else [])
        banned = [t for t in banned if 0 <= t < logits.size]
        if not banned:
            return logits
        logits = logits.copy()
        logits[banned] = -np.inf
        return logits

    def seq2seq(self, source, max_new_tokens: int = 64, *, temperature: float = 0.0, top_k: int = 0,
                top_p: float = 1.0, repetition_penalty: float = 1.0, seed: int | None = None,
                stream: bool = False, prompt: list[int] | None = None):
        """The decoder's text for ``source`` (text, token ids or features, by model); an iterator of
        pieces if ``stream``. Greedy by default (temperature 0); stops at an end token or after
        ``max_new_tokens``. ``prompt``: decoder ids to start from (default: the model's start ids).
        A list of sources is decoded as one batch and returns a list of texts, each equal to its
        source decoded alone."""
        self._check_open()
        if isinstance(max_new_tokens, bool) or int(max_new_tokens) != max_new_tokens or max_new_tokens < 0:
            raise GenerationError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
        params = SamplingParams(temperature, top_k, top_p, repetition_penalty, seed)
        start = list(self.spec["decoder_start"]) if prompt is None else [int(t) for t in prompt]
        if not start:
            raise GenerationError("the decoder prompt is empty")
        if len(start) + max_new_tokens > self.config.context_length:
            raise GenerationError(f"decoder prompt of {len(start)} tokens + max_new_tokens {max_new_tokens} exceeds "
                                  f"the decoder's context length of {self.config.context_length}")
        if isinstance(source, list) and source and not all(isinstance(t, int) for t in source):
            if stream:
                raise GenerationError("stream=True needs a single input, not a list of inputs")
            return self._decode_batch(source, start, int(max_new_tokens), params)
        t0 = time.perf_counter()
        encoded = self.encode(source)
        ids = self._decode_ids(encoded, start, int(max_new_tokens), Sampler(params), time.perf_counter() - t0)
        pieces = self._pieces(ids)
        return pieces if stream else "".join(pieces)

    def _decode_ids(self, source: EncodedSource, start: list[int], max_new: int, sampler: Sampler,
                    encode_seconds: float) -> Iterator[int]:
        """The new token ids, one by one, until an end token or ``max_new``; the stats' prefill time
        counts the encoder's ``encode_seconds`` and the decoder prompt."""
        stats = self.last_stats = GenerationStats(prompt_tokens=len(start), finish_reason="length")
        if max_new == 0:
            return
        session = self.new_session(source)
        t0 = time.perf_counter()
        logits = session.forward(start)[-1]  # (vocab,)
        stats.prefill_seconds = encode_seconds + time.perf_counter() - t0
        t0, eos = time.perf_counter(), set(self.spec["eos"])
        for step in range(max_new):
            tok = sampler(self._masked(logits, step == 0), session.tokens)
            if tok in eos:
                stats.finish_reason = "eos"
                break
            stats.new_tokens += 1
            yield tok
            if step + 1 < max_new:
                logits = session.forward([tok])[-1]
            stats.decode_seconds = time.perf_counter() - t0

    def _pieces(self, ids: Iterator[int]) -> Iterator[str]:
        """Text pieces of generated ids, control tokens left out."""
        limit = min(int(self.spec.get("text_tokens", self.tokenizer.vocab_size)), self.tokenizer.vocab_size)
        decoder = self.tokenizer.stream_decoder(skip_special=True)
        for tok in ids:
            if tok < limit:
                piece = decoder.push(tok)
                if piece:
                    yield piece
        tail = decoder.flush()
        if tail:
            yield tail

    def _decode_batch(self, sources: list, start: list[int], max_new: int, params: SamplingParams) -> list[str]:
        """Each source's text, decoded together: one packed forward pass per step (generate.decode_step)."""
        stats = self.last_stats = GenerationStats(prompt_tokens=len(start) * len(sources), finish_reason="batch")
        if max_new == 0:
            return [""] * len(sources)
        eos, t0 = set(self.spec["eos"]), time.perf_counter()
        sessions = [self.new_session(self.encode(s)) for s in sources]
        samplers = [Sampler(params) for _ in sources]
        logits = [s.forward(start)[-1] for s in sessions]  # each (vocab,)
        stats.prefill_seconds = time.perf_counter() - t0  # the encoder runs and the decoder prompts
        outputs: list[list[int]] = [[] for _ in sources]
        live = list(range(len(sources)))
        t0 = time.perf_counter()
        for step in range(max_new):
            tokens = {i: samplers[i](self._masked(logits[i], step == 0), sessions[i].tokens) for i in live}
            live = [i for i in live if tokens[i] not in eos]
            for i in live:
                outputs[i].append(tokens[i])
            if not live or step + 1 == max_new:
                break
            rows = decode_step(self, [sessions[i] for i in live], [tokens[i] for i in live])  # (batch, vocab)
            for i, row in zip(live, rows):
                logits[i] = row
        stats.decode_seconds = time.perf_counter() - t0
        stats.new_tokens = sum(map(len, outputs))
        return ["".join(self._pieces(iter(ids))) for ids in outputs]

    def close(self) -> None:
        """Release the decoder's and the encoder's resources."""
        if self.encoder is not None:
            self.encoder.close()
        super().close()
