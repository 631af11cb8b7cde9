"""Tiny random LLaMA GGUFs in every supported weight format: volvox vs the independent numpy reference."""

import numpy as np
import pytest

import volvox
from llama_reference import ReferenceLlama
from tiny_gguf import write_tiny_llama


@pytest.mark.parametrize("qtype, embed_qtype, tied", [
    ("f32", "f32", True), ("f16", "f16", False), ("q8_0", "q8_0", True), ("q4_0", "q8_0", False),
    ("q4_1", "q8_0", True), ("q4_k", "q6_k", False), ("q6_k", "q4_k", True),
])
def test_tiny_llama_logits(tmp_path, qtype, embed_qtype, tied):
    dim, ffn = (256, 512) if "k" in qtype + embed_qtype else (64, 96)
    path = write_tiny_llama(tmp_path / f"tiny-{qtype}.gguf", dim=dim, ffn=ffn, qtype=qtype,
                            embed_qtype=embed_qtype, tied=tied)
    ids = [5, 17, 99, 3, 42, 7, 200, 11]
    want = ReferenceLlama(str(path)).logits(ids)  # (seq, vocab) float64
    scale = np.abs(want).max()
    with volvox.load(path, reference=True) as oracle:
        np.testing.assert_allclose(oracle.logits(ids), want, rtol=0, atol=1e-4 * scale)
    with volvox.load(path) as lm:
        got = lm.logits(ids)
        assert np.abs(got - want).max() / scale < 3e-2
        session = lm.new_session()  # the KV-cache decode path gives the same logits as one full pass
        steps = np.concatenate([session.forward(ids[:4])] + [session.forward([t]) for t in ids[4:]])
        np.testing.assert_allclose(steps, got[-1:] if steps.shape[0] == 1 else got[[3, 4, 5, 6, 7]], atol=1e-4 * scale)


def test_gqa_and_mha_shapes(tmp_path):
    for n_heads, n_kv in ((4, 4), (4, 1), (8, 2)):
        path = write_tiny_llama(tmp_path / f"h{n_heads}-{n_kv}.gguf", n_heads=n_heads, n_kv_heads=n_kv)
        want = ReferenceLlama(str(path)).logits([1, 2, 3, 4, 5])
        with volvox.load(path, reference=True) as lm:
            np.testing.assert_allclose(lm.logits([1, 2, 3, 4, 5]), want, atol=1e-4 * np.abs(want).max())
