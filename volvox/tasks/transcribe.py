"""Speech to text with Whisper: audio -> 30 s windows -> log-mel features -> seq2seq decode -> text.

Each window is decoded from Whisper's task prompt (start of transcript, the language and task
tokens of a multilingual model, then "no timestamps"), greedily by default, and the windows of a
long recording (and of several recordings) are decoded together as one batch; each recording's
texts are joined in order. A window is
decoded on its own, without the previous window's text as a prompt.

With ``timestamps=True`` the prompt leaves out "no timestamps" and the decode follows Whisper's
timestamp rules (as CTranslate2 applies them): the first token is a timestamp of at most 1 s, then
timestamps come in pairs (a segment's end, the next one's start) except just before the end
token, never decrease, and one is forced whenever the timestamps' total probability beats every
text token's. Each pair of timestamps closes a segment; windows stay 30 s apart (no seeking to
the last timestamp), each window's times offset by its start.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from volvox.errors import GenerationError
from volvox.tasks.audio import check_samples, mel_windows, read_audio
from volvox.tasks.sampling import Sampler, SamplingParams
from volvox.tasks.seq2seq import Seq2SeqModel

TIME_PRECISION = 0.02         # seconds per timestamp token
MAX_INITIAL_TIMESTAMP = 1.0   # seconds: the latest first timestamp


@dataclass
class Segment:
    """A stretch of speech: start and end in seconds from the start of the audio, and its text."""

    start: float
    end: float
    text: str


class SpeechToText(Seq2SeqModel):
    """A Whisper model: ``transcribe(audio)``, and everything Seq2SeqModel does on features."""

    def task_prompt(self, language: str | None = None, timestamps: bool = False) -> list[int]:
        """Whisper's decoder prompt: <|startoftranscript|> [<|lang|> <|transcribe|>] then, unless
        ``timestamps``, <|notimestamps|>."""
        prompt = list(self.spec["decoder_start"])
        if self.spec.get("multilingual"):
            for token in (f"<|{language or 'en'}|>", "<|transcribe|>"):
                ids = self.tokenizer.encode(token)
                if len(ids) != 1:
                    raise GenerationError(f"the tokenizer has no token {token!r} (language {language!r})")
                prompt += ids
        elif language not in (None, "en"):
            raise GenerationError(f"this is an English-only model; language {language!r} is not available")
        if self.spec.get("no_timestamps") is None:
            if timestamps:
                raise GenerationError("this model has no timestamp tokens (no <|notimestamps|> id)")
        elif not timestamps:
            prompt.append(int(self.spec["no_timestamps"]))
        return prompt

    def features(self, audio) -> list[np.ndarray]:
        """Log-mel features (n_mels, 3000) of each 30 s window of ``audio`` (a path, an audio file's
        bytes, or 16 kHz samples)."""
        if isinstance(audio, (bytes, bytearray)):
            samples = read_audio(io.BytesIO(audio))
        else:
            samples = read_audio(audio) if isinstance(audio, (str, Path)) else check_samples(audio)
        return mel_windows(samples, int(self.spec["n_mels"]))

    def transcribe(self, audio, *, language: str | None = None, max_new_tokens: int | None = None,
                   temperature: float = 0.0, seed: int | None = None, timestamps: bool = False):
        """The text spoken in ``audio`` (a WAV / FLAC file path or its bytes, or float samples at
        16 kHz); for a list of them, their texts, every window of every one decoded in one batch.

        Greedy by default; ``temperature`` > 0 samples. ``max_new_tokens`` per 30 s window
        (default: half the decoder's context, as Whisper). ``timestamps``: a list of Segments
        (start, end, text) instead of the text."""
        limit = self.config.context_length // 2 if max_new_tokens is None else max_new_tokens
        several = isinstance(audio, (list, tuple))
        windows = [self.features(a) for a in (audio if several else [audio])]
        if timestamps:
            params = SamplingParams(temperature=temperature, seed=seed)
            out = [self._segments(w, self.task_prompt(language, timestamps=True), limit, params) for w in windows]
            return out if several else out[0]
        texts = self.seq2seq([f for w in windows for f in w], limit, temperature=temperature, seed=seed,
                             prompt=self.task_prompt(language))
        out, start = [], 0
        for w in windows:
            out.append("".join(texts[start:start + len(w)]).strip())
            start += len(w)
        return out if several else out[0]

    # ------------------------------------------------------------------ timestamps
    def _segments(self, windows: list[np.ndarray], prompt: list[int], limit: int,
                  params: SamplingParams) -> list[Segment]:
        """The timed segments of one recording's windows, decoded one after the other."""
        segments = []
        for i, features in enumerate(windows):
            tokens = self._timestamped_tokens(features, prompt, limit, Sampler(params))
            segments += self._split(tokens, i * 30.0)
        return segments

    def _timestamped_tokens(self, features: np.ndarray, prompt: list[int], limit: int, sampler: Sampler) -> list[int]:
        """One window's generated ids under Whisper's timestamp rules."""
        if len(prompt) + limit > self.config.context_length:
            raise GenerationError(f"max_new_tokens {limit} exceeds the decoder's context length")
        session = self.new_session(self.encode(features))
        logits = session.forward(prompt)[-1]  # (vocab,)
        out: list[int] = []
        eos = set(self.spec["eos"])
        for step in range(limit):
            tok = sampler(self._timestamp_rules(self._masked(logits, step == 0), out), session.tokens)
            if tok in eos:
                break
            out.append(tok)
            if step + 1 < limit:
                logits = session.forward([tok])[-1]
        return out

    def _timestamp_rules(self, logits: np.ndarray, out: list[int]) -> np.ndarray:
        """``logits`` (vocab,) with the tokens Whisper's timestamp rules forbid after ``out`` at -inf."""
        logits = logits.copy()
        no_ts, eot = int(self.spec["no_timestamps"]), int(self.spec["eos"][0])
        begin = no_ts + 1  # the first timestamp token (0.00 s)
        logits[no_ts] = -np.inf
        if not out:  # a timestamp, at most MAX_INITIAL_TIMESTAMP in
            logits[:begin] = -np.inf
            logits[begin + round(MAX_INITIAL_TIMESTAMP / TIME_PRECISION) + 1:] = -np.inf
            return logits
        check = True
        if out[-1] >= begin:
            penultimate = out[-2] if len(out) >= 2 else out[-1]
            if penultimate >= begin:  # a pair just closed: text (or the end) comes next
                logits[begin:] = -np.inf
                check = False
            else:  # a segment's end: its pair's second timestamp, or the end token
                logits[:eot] = -np.inf
        last = next((t for t in reversed(out) if t >= begin), None)
        if last is not None:  # timestamps never decrease
            logits[begin:last] = -np.inf
        if check:
            z = logits.astype(np.float64)
            z = z - np.logaddexp.reduce(z)  # log-softmax
            if np.logaddexp.reduce(z[begin:]) > z[:begin].max():
                logits[:begin] = -np.inf
        return logits

    def _split(self, tokens: list[int], offset: float) -> list[Segment]:
        """Segments of one window's ids: text between consecutive timestamps, times from ``offset``."""
        begin = int(self.spec["no_timestamps"]) + 1
        pairs = [i for i in range(1, len(tokens)) if tokens[i] >= begin and tokens[i - 1] >= begin]
        single_ending = len(tokens) >= 2 and tokens[-2] < begin <= tokens[-1]
        if not pairs:
            stamps = [t for t in tokens if t >= begin]
            end = (stamps[-1] - begin) * TIME_PRECISION if stamps and stamps[-1] != begin else 30.0
            parts = [(tokens, offset, offset + end)]
        else:
            cuts, parts, last = pairs + ([len(tokens)] if single_ending else []), [], 0
            for cut in cuts:
                part = tokens[last:cut]
                parts.append((part, offset + (part[0] - begin) * TIME_PRECISION,
                              offset + (part[-1] - begin) * TIME_PRECISION))
                last = cut
        segments = []
        for part, start, end in parts:
            text = "".join(self._pieces(iter(part))).strip()
            if text and end > start:
                segments.append(Segment(round(start, 2), round(end, 2), text))
        return segments
