"""Speech to text with Whisper: audio -> 30 s windows -> log-mel features -> seq2seq decode -> text.

Each window is decoded from Whisper's task prompt (start of transcript, the language and task
tokens of a multilingual model, then "no timestamps"), greedily by default, and the windows of a
long recording (and of several recordings) are decoded together as one batch; each recording's
texts are joined in order. A window is
decoded on its own, without the previous window's text as a prompt.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from volvox.errors import GenerationError
from volvox.tasks.audio import check_samples, mel_windows, read_audio
from volvox.tasks.seq2seq import Seq2SeqModel


class SpeechToText(Seq2SeqModel):
    """A Whisper model: ``transcribe(audio)``, and everything Seq2SeqModel does on features."""

    def task_prompt(self, language: str | None = None) -> list[int]:
        """Whisper's decoder prompt: <|startoftranscript|> [<|lang|> <|transcribe|>] <|notimestamps|>."""
        prompt = list(self.spec["decoder_start"])
        if self.spec.get("multilingual"):
            for token in (f"<|{language or 'en'}|>", "<|transcribe|>"):
                ids = self.tokenizer.encode(token)
                if len(ids) != 1:
                    raise GenerationError(f"the tokenizer has no token {token!r} (language {language!r})")
                prompt += ids
        elif language not in (None, "en"):
            raise GenerationError(f"this is an English-only model; language {language!r} is not available")
        if self.spec.get("no_timestamps") is not None:
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
                   temperature: float = 0.0, seed: int | None = None):
        """The text spoken in ``audio`` (a WAV / FLAC file path or its bytes, or float samples at 16 kHz); for a list
        of them, their texts, every window of every one decoded in one batch.

        Greedy by default; ``temperature`` > 0 samples. ``max_new_tokens`` per 30 s window
        (default: half the decoder's context, as Whisper)."""
        prompt = self.task_prompt(language)
        limit = self.config.context_length // 2 if max_new_tokens is None else max_new_tokens
        several = isinstance(audio, (list, tuple))
        windows = [self.features(a) for a in (audio if several else [audio])]
        texts = self.seq2seq([f for w in windows for f in w], limit, temperature=temperature, seed=seed,
                             prompt=prompt)
        out, start = [], 0
        for w in windows:
            out.append("".join(texts[start:start + len(w)]).strip())
            start += len(w)
        return out if several else out[0]
