"""Speech to text: the audio front end against transformers' WhisperFeatureExtractor, bad audio,
and Whisper tiny.en (CTranslate2 float16, from PyPI) against ctranslate2 / faster-whisper on speech
that Debian's espeak-ng synthesises at test time."""

import shutil
import subprocess

import numpy as np
import pytest

import volvox
from volvox.errors import AudioError, ModelNotFoundError
from volvox.tasks.audio import CHUNK_SAMPLES, log_mel_spectrogram, mel_filters, mel_windows, read_audio

SENTENCES = ["The quick brown fox jumps over the lazy dog.",
             "Please call Stella and ask her to bring these things with her from the store."]


def speak(text: str, path) -> str:
    """A WAV file of ``text`` spoken by espeak-ng (22.05 kHz, 16-bit mono); skips without espeak-ng."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    subprocess.run(["espeak-ng", "-w", str(path), text], check=True, capture_output=True)
    return str(path)


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    root = tmp_path_factory.mktemp("speech")
    return [speak(text, root / f"s{i}.wav") for i, text in enumerate(SENTENCES)]


# ---------------------------------------------------------------------------- front end
def test_mel_filters_match_transformers():
    audio_utils = pytest.importorskip("transformers.audio_utils")
    ref = audio_utils.mel_filter_bank(num_frequency_bins=201, num_mel_filters=80, min_frequency=0.0,
                                      max_frequency=8000.0, sampling_rate=16000, norm="slaney", mel_scale="slaney")
    np.testing.assert_allclose(mel_filters(80), ref.T, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("n_mels", [80, 128])
def test_log_mel_matches_whisper_feature_extractor(speech, n_mels):
    tf = pytest.importorskip("transformers")
    extractor = tf.WhisperFeatureExtractor(feature_size=n_mels)
    rng = np.random.default_rng(0)
    for audio in (read_audio(speech[0]), (0.1 * rng.standard_normal(16000 * 3)).astype(np.float32)):
        ours = log_mel_spectrogram(audio, n_mels)
        padded = np.zeros(CHUNK_SAMPLES, np.float32)
        padded[:audio.size] = audio
        ref = extractor._np_extract_fbank_features(padded[None], "cpu")[0]  # (n_mels, 3000), float64 numpy
        assert ours.shape == ref.shape == (n_mels, 3000) and ours.dtype == np.float32
        np.testing.assert_allclose(ours, ref, atol=1e-6)
        called = extractor(audio, sampling_rate=16000, return_tensors="np").input_features[0]  # torch's float32 STFT
        np.testing.assert_allclose(ours, called, atol=1e-4)


def test_read_audio_resamples_to_16k_mono(speech):
    soundfile = pytest.importorskip("soundfile")
    from scipy.signal import resample

    raw, rate = soundfile.read(speech[0], dtype="float32")
    ours = read_audio(speech[0])
    assert rate == 22050 and ours.dtype == np.float32 and ours.ndim == 1
    assert abs(ours.size - raw.size * 16000 / rate) <= 1
    fft_resampled = resample(raw, ours.size)  # another method: agree except at the edges
    assert np.corrcoef(ours[100:-100], fft_resampled[100:-100])[0, 1] > 0.99


def test_long_audio_goes_in_30s_windows_of_one_spectrogram():
    rng = np.random.default_rng(1)
    audio = np.concatenate([rng.standard_normal(CHUNK_SAMPLES), 1e-3 * rng.standard_normal(CHUNK_SAMPLES + 16000)])
    windows = mel_windows(audio.astype(np.float32))  # a loud window, a quiet one, a quiet second
    whole = log_mel_spectrogram(audio.astype(np.float32), 80, 3 * CHUNK_SAMPLES)  # (80, 9000)
    assert [w.shape for w in windows] == [(80, 3000)] * 3
    for i, w in enumerate(windows):
        np.testing.assert_array_equal(w, whole[:, 3000 * i:3000 * (i + 1)])
    floor = (whole.max() * 4 - 4 - 8 + 4) / 4  # the clamp 8 below the whole recording's maximum
    assert np.isclose(windows[2].min(), floor, atol=1e-6)
    short = (0.1 * rng.standard_normal(16000)).astype(np.float32)
    np.testing.assert_array_equal(mel_windows(short)[0], log_mel_spectrogram(short))


def test_bad_audio_is_a_named_error(tmp_path, speech):
    pytest.importorskip("soundfile")
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    garbage = tmp_path / "garbage.wav"
    garbage.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunkjunkjunk" * 4)
    truncated = tmp_path / "truncated.wav"
    truncated.write_bytes(open(speech[0], "rb").read()[:30])
    header_only = tmp_path / "silence.wav"
    import soundfile

    soundfile.write(str(header_only), np.zeros(0, np.float32), 16000)
    for path in (empty, garbage, truncated, header_only, tmp_path / "missing.wav"):
        with pytest.raises(AudioError):
            read_audio(path)
    for bad in (np.array([0.1, np.nan], np.float32), np.zeros(10, np.int16), np.zeros((2, 10), np.float32),
                np.zeros(0, np.float32)):
        with pytest.raises(AudioError):
            log_mel_spectrogram(bad)


# ---------------------------------------------------------------------------- Whisper tiny.en
@pytest.fixture(scope="module")
def tiny_en_dir():
    from volvox.hub import resolve_model_file

    try:
        return resolve_model_file("whisper-tiny.en")
    except ModelNotFoundError as e:
        pytest.skip(f"whisper-tiny.en unavailable: {e}")


@pytest.fixture(scope="module")
def tiny_en(tiny_en_dir):
    model = volvox.load("whisper-tiny.en")
    yield model
    model.close()


@pytest.mark.slow
def test_tiny_en_encoder_matches_ctranslate2(tiny_en, tiny_en_dir, speech):
    ctranslate2 = pytest.importorskip("ctranslate2")
    features = log_mel_spectrogram(read_audio(speech[0]))  # (80, 3000)
    ref_model = ctranslate2.models.Whisper(str(tiny_en_dir), device="cpu", compute_type="float32")
    ref = np.array(ref_model.encode(ctranslate2.StorageView.from_array(features[None]), to_cpu=True))[0]
    ours = tiny_en.encode(features).hidden  # (1500, 384)
    assert ours.shape == ref.shape
    assert float(np.abs(ours - ref).max() / np.abs(ref).max()) < 1e-3


@pytest.mark.slow
def test_tiny_en_transcript_matches_faster_whisper(tiny_en, tiny_en_dir, speech):
    """Both engines get the same 16 kHz samples, zero-padded to 30 s less the 160 samples faster-whisper
    appends: then both spectrograms cover the same 480000 samples. (Given shorter audio, faster-whisper
    pads the spectrogram itself with zeros, not the audio, so its features differ from transformers'
    and Whisper's, which volvox computes.)"""
    faster_whisper = pytest.importorskip("faster_whisper")
    ref_model = faster_whisper.WhisperModel(str(tiny_en_dir), device="cpu", compute_type="float32", cpu_threads=2)
    for path in speech:
        samples = read_audio(path)
        padded = np.zeros(CHUNK_SAMPLES - 160, np.float32)
        padded[:samples.size] = samples
        segments, _ = ref_model.transcribe(padded, beam_size=1, temperature=0.0, without_timestamps=True,
                                           condition_on_previous_text=False, vad_filter=False)
        ref = "".join(s.text for s in segments).strip()
        ours = tiny_en.transcribe(path)
        assert ours == tiny_en.transcribe(padded)
        assert ours == ref and len(ours) > 10


@pytest.mark.slow
def test_tiny_en_timestamps_match_faster_whisper(tiny_en, tiny_en_dir, speech):
    """Segments of the first 30 s window (faster-whisper then seeks to the last timestamp and goes on)."""
    faster_whisper = pytest.importorskip("faster_whisper")
    ref_model = faster_whisper.WhisperModel(str(tiny_en_dir), device="cpu", compute_type="float32", cpu_threads=2)
    samples = np.concatenate([read_audio(speech[0]), np.zeros(8000, np.float32), read_audio(speech[1])])
    padded = np.zeros(CHUNK_SAMPLES - 160, np.float32)
    padded[:samples.size] = samples
    segments, _ = ref_model.transcribe(padded, beam_size=1, temperature=0.0, without_timestamps=False,
                                       condition_on_previous_text=False, vad_filter=False)
    ref = [(round(s.start, 2), round(s.end, 2), s.text.strip()) for s in segments if s.seek == 0]
    ours = [(s.start, s.end, s.text) for s in tiny_en.transcribe(padded, timestamps=True)]
    assert ours == ref and len(ours) >= 1


@pytest.mark.slow
def test_tiny_en_cli_transcribes(tiny_en_dir, speech, tmp_path):
    import sys

    proc = subprocess.run([sys.executable, "-m", "volvox", "transcribe", "whisper-tiny.en", speech[0]],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "fox" in proc.stdout.lower()
    proc = subprocess.run([sys.executable, "-m", "volvox", "transcribe", "whisper-tiny.en", speech[0], "--timestamps"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0 and proc.stdout.startswith("[0.00 --> "), proc.stderr
    proc = subprocess.run([sys.executable, "-m", "volvox", "transcribe", "whisper-tiny.en", str(tmp_path / "no.wav")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 1 and "no such audio file" in proc.stderr


@pytest.mark.slow
def test_tiny_en_batch_rows_equal_single_transcripts(tiny_en, speech, tmp_path):
    import json

    from volvox.batch import BatchOptions, run_local

    rows = [{"id": i, "audio": path} for i, path in enumerate(speech)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_local("whisper-tiny.en", tmp_path / "in.jsonl", tmp_path / "out.jsonl", BatchOptions()) == 2
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert out == [{**r, "text": tiny_en.transcribe(r["audio"])} for r in rows]
    assert tiny_en.transcribe(speech) == [r["text"] for r in out]
