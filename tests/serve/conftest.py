"""Fixtures of the serve tests: models (a tiny random LLaMA, SmolLM2) and ``serve``, which starts a
LiveServer (support/live_server.py) over one of them for a test."""

import pytest

pytest.importorskip("uvicorn", reason="the serve tests need the serve extra (uvicorn, starlette)")
pytest.importorskip("openai", reason="the serve tests check the server with the official openai client")

import volvox  # noqa: E402
from live_server import LiveServer  # noqa: E402
from tiny_gguf import write_tiny_llama  # noqa: E402


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory):
    """A tiny random LLaMA GGUF (byte-level vocab, context 256): fast for many concurrent requests."""
    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf", n_layers=2, dim=64, context=256, seed=3)


@pytest.fixture(scope="module")
def tiny_lm(tiny_gguf):
    with volvox.load(tiny_gguf) as lm:
        yield lm


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf_path):
    with volvox.load(smollm2_gguf_path) as lm:
        yield lm


@pytest.fixture
def serve():
    """serve(model, model_id, **create_app options) -> a LiveServer, closed after the test."""
    servers = []

    def start(model, model_id="test-model", **options):
        servers.append(LiveServer(model, model_id, **options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
