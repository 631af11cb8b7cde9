"""volvox's x86 SIMD kernels reproduce llama.cpp's CPU arithmetic bit for bit.

Activation quantization (q8_0 / q8_1 / q8_K), the quantized dot products, rms_norm, RoPE,
attention (f32 KV cache, no flash attention) and SwiGLU all follow ggml's x86 AVX2 code
step for step (volvox/_kernels/vx.pxd), so SmolLM2's logits equal llama.cpp's exactly, at
prefill and at every decode step. Needs llama-cpp-python built for AVX2 without AVX-512
(ggml's AVX-512 expf / reductions group differently) and volvox's avx2 tier (the avx512 tier's
SwiGLU is ggml's AVX-512 one: docs/internals.md).
"""

import numpy as np
import pytest

import volvox
from volvox import cpu as K

PROMPTS = ["The capital of France is", "def fibonacci(n):"]
STEPS = 12


@pytest.fixture(scope="module")
def llama(smollm2_gguf_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    info = llama_cpp.llama_print_system_info().decode()
    if "AVX2 = 1" not in info or "AVX512 = 1" in info:
        pytest.skip(f"llama.cpp is not an AVX2 (non-AVX-512) build: {info}")
    if K.isa() != "avx2":
        pytest.skip(f"volvox runs the {K.isa()} tier, not the avx2 tier (VOLVOX_ISA=avx2)")
    return llama_cpp.Llama(model_path=smollm2_gguf_path, n_ctx=256, logits_all=True, verbose=False,
                           n_threads=1, type_k=0, type_v=0, flash_attn=False)  # f32 KV cache


@pytest.mark.slow
@pytest.mark.parametrize("prompt", PROMPTS)
def test_logits_equal_llama_cpp_bit_for_bit(llama, smollm2_gguf_path, prompt):
    with volvox.load(smollm2_gguf_path) as lm:
        ids = lm.tokenizer.encode(prompt)
        llama.reset()
        llama.eval(ids)
        session = lm.new_session()
        got = session.forward(ids)[-1]
        for step in range(STEPS):
            want = np.array(llama.scores[llama.n_tokens - 1], np.float32)
            np.testing.assert_array_equal(got, want, err_msg=f"step {step}")
            token = int(want.argmax())
            llama.eval([token])
            got = session.forward([token])[-1]
