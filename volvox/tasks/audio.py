"""Speech input: audio files read and resampled to 16 kHz mono, and Whisper's log-mel spectrogram.

The spectrogram is computed in numpy, in float64 as transformers' WhisperFeatureExtractor does:
periodic Hann window of 400 samples (25 ms), hop 160 (10 ms), centred frames with reflect padding,
power spectrum, Slaney-style mel filters (as librosa builds them), log10 floored at 1e-10, clamped
to 8 below its maximum, scaled by (x + 4) / 4, the last frame dropped: 100 frames per second.
Audio longer than 30 s is one spectrogram cut into 30 s windows (mel_windows).
"""

from __future__ import annotations

from math import gcd
from pathlib import Path
from typing import BinaryIO

import numpy as np

from volvox.errors import AudioError

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
CHUNK_SECONDS = 30
CHUNK_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE  # 480000 samples = 3000 frames


def read_audio(source: str | Path | BinaryIO) -> np.ndarray:
    """The samples of a WAV / FLAC / OGG file (a path, or an open binary file) as float32 mono at
    16 kHz (channels averaged, resampled by a polyphase filter); AudioError for a missing,
    unreadable, empty or non-finite one."""
    try:
        import soundfile
        from scipy.signal import resample_poly
    except ImportError as e:
        raise AudioError(f"reading audio needs the 'audio' extra (pip install volvox[audio]): {e}") from None
    is_path = isinstance(source, (str, Path))
    name = str(source) if is_path else "the audio data"
    if is_path and not Path(source).is_file():
        raise AudioError(f"{name}: no such audio file")
    try:
        samples, rate = soundfile.read(str(source) if is_path else source, dtype="float32",
                                       always_2d=True)  # (n, channels)
    except (RuntimeError, ValueError, TypeError, soundfile.LibsndfileError) as e:
        raise AudioError(f"{name}: not a readable audio file ({e})") from None
    if samples.size == 0:
        raise AudioError(f"{name}: the audio holds no samples")
    mono = samples.mean(axis=1)  # (n,)
    if not np.isfinite(mono).all():
        raise AudioError(f"{name}: the audio holds NaN or infinite samples")
    if rate != SAMPLE_RATE:
        g = gcd(int(rate), SAMPLE_RATE)
        mono = resample_poly(mono, SAMPLE_RATE // g, int(rate) // g).astype(np.float32)
    return np.ascontiguousarray(mono, dtype=np.float32)


def check_samples(audio) -> np.ndarray:
    """``audio`` as a 1-D float32 array of 16 kHz samples; AudioError if it is not one."""
    a = np.asarray(audio)
    if a.ndim != 1 or a.size == 0:
        raise AudioError(f"audio must be a non-empty 1-D array of 16 kHz samples, got shape {a.shape}")
    if a.dtype.kind != "f":
        raise AudioError(f"audio samples must be floats in [-1, 1], got dtype {a.dtype}")
    if not np.isfinite(a).all():
        raise AudioError("the audio holds NaN or infinite samples")
    return a.astype(np.float32, copy=False)


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    hz = np.asarray(hz, np.float64)
    mel = 3.0 * hz / 200.0
    log_region = hz >= 1000.0
    return np.where(log_region, 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0), mel)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    """Inverse of _hz_to_mel."""
    mel = np.asarray(mel, np.float64)
    hz = 200.0 * mel / 3.0
    return np.where(mel >= 15.0, 1000.0 * np.exp(np.log(6.4) / 27.0 * (mel - 15.0)), hz)


def mel_filters(n_mels: int, n_fft: int = N_FFT, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Triangular mel filters (n_mels, n_fft // 2 + 1) from 0 Hz to Nyquist, each scaled to unit area
    (Slaney normalisation): librosa.filters.mel's bank, computed in float64."""
    fft_freqs = np.linspace(0, sample_rate // 2, n_fft // 2 + 1)  # (n_freqs,)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(sample_rate / 2), n_mels + 2))  # (n_mels + 2,)
    widths = np.diff(edges)  # (n_mels + 1,)
    ramps = edges[:, None] - fft_freqs[None, :]  # (n_mels + 2, n_freqs)
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))  # (n_mels, n_freqs)
    return weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]


def log_mel_spectrogram(audio: np.ndarray, n_mels: int = 80, n_samples: int = CHUNK_SAMPLES) -> np.ndarray:
    """Whisper's input features (n_mels, n_samples // HOP_LENGTH) float32 of 16 kHz ``audio``,
    zero-padded or trimmed to ``n_samples`` first (30 s: 3000 frames)."""
    audio = check_samples(audio)
    wave = np.zeros(n_samples, np.float64)
    wave[:min(audio.size, n_samples)] = audio[:n_samples]
    padded = np.pad(wave, N_FFT // 2, mode="reflect")  # centred frames
    n_frames = 1 + (padded.size - N_FFT) // HOP_LENGTH
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP_LENGTH][:n_frames]  # (n_frames, N_FFT)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann (N_FFT,)
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2  # (n_frames, n_freqs)
    mel = mel_filters(n_mels) @ power.T  # (n_mels, n_frames)
    log_spec = np.log10(np.maximum(mel, 1e-10))[:, :-1]  # (n_mels, n_frames - 1)
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)


def mel_windows(audio: np.ndarray, n_mels: int = 80) -> list[np.ndarray]:
    """Whisper's features of ``audio`` in consecutive 30 s windows, (n_mels, 3000) each: one
    spectrogram of the whole recording zero-padded to whole windows, so that its log clamp is
    relative to the whole recording's maximum (as Whisper's long-form transcription computes it)
    and frames at a window's edge see the audio beyond it; cut every 3000 frames."""
    audio = check_samples(audio)
    n_windows = -(-audio.size // CHUNK_SAMPLES)
    spec = log_mel_spectrogram(audio, n_mels, n_windows * CHUNK_SAMPLES)  # (n_mels, 3000 * n_windows)
    frames = CHUNK_SAMPLES // HOP_LENGTH
    return [np.ascontiguousarray(spec[:, i * frames:(i + 1) * frames]) for i in range(n_windows)]
