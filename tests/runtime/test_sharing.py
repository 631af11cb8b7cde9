"""One loaded model shared by threads, long runs to the context limit, and lifetime (close)."""

import threading

import numpy as np
import pytest

import volvox
from tiny_gguf import write_tiny_llama


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_threads_with_own_sessions_match_sequential(smollm2_gguf_path):
    prompts = ["The capital of France is", "def add(a, b):", "Once upon a time", "Water boils at"]
    with volvox.load(smollm2_gguf_path) as lm:
        sequential = [lm.generate(p, max_new_tokens=12) for p in prompts]
        results = [None] * len(prompts)
        errors = []

        def work(i):
            try:
                results[i] = lm.generate(prompts[i], max_new_tokens=12)
            except Exception as e:  # surfaced below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    assert results == sequential


def test_generate_to_context_limit_keeps_memory_flat(tmp_path):
    """Fill a 4096-token context twice: memory grows only by the KV cache, and not at all the second time."""
    ctx = 4096
    path = write_tiny_llama(tmp_path / "t.gguf", context=ctx, dim=64, n_layers=2)
    with volvox.load(path) as lm:
        lm.generate("the", max_new_tokens=8)  # warm-up
        kv_bytes = 2 * lm.config.n_layers * lm.config.n_kv_heads * ctx * lm.config.head_dim * 4
        before = _rss_bytes()
        session = lm.new_session()
        session.forward([5])
        for _ in range(ctx - 1):
            session.forward([7])
        first = _rss_bytes()
        assert first - before < kv_bytes + 16 * 2 ** 20
        del session
        session = lm.new_session()
        session.forward([5])
        for _ in range(ctx - 1):
            session.forward([7])
        assert _rss_bytes() - first < 8 * 2 ** 20
        with pytest.raises(volvox.GenerationError, match="context length"):
            session.forward([1])


def test_close_releases_and_forbids_use(tmp_path):
    path = write_tiny_llama(tmp_path / "t.gguf")
    with volvox.load(path) as lm:
        logits = lm.logits([1, 2, 3])
    with pytest.raises(volvox.ClosedError):
        lm.logits([1, 2, 3])
    with pytest.raises(volvox.ClosedError):
        lm.run({"tokens": np.array([1], np.int32), "positions": np.array([0], np.int32)})
    lm.close()  # closing twice is harmless
    assert np.isfinite(logits).all()

