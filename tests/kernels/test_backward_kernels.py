"""The training kernels (volvox.cpu's matmul_t, weight_grad, attention_train / attention_backward,
cross_entropy, rms_norm_backward, layer_norm_backward, column_sums, gelu_backward, silu_backward,
embedding_backward) on every ISA tier this machine runs, against
torch autograd on the same inputs (quantized weights dequantized by the independent `gguf` package),
on awkward shapes: odd rows, widths that are no multiple of a block or a vector, GQA ratio 3, a
sliding window shorter than the sequence, ignored labels."""

import numpy as np
import pytest

from volvox import cpu as K
from volvox.errors import KernelError, ShapeError
from volvox.ir.quant_blocks import GGML_FORMATS, QuantTensor, StackedQuantTensor

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as GT  # noqa: E402
from gguf.quants import dequantize as gguf_dequantize  # noqa: E402

GT_OF = {"q4_0": GT.Q4_0, "q4_1": GT.Q4_1, "q8_0": GT.Q8_0, "q5_0": GT.Q5_0, "q5_1": GT.Q5_1,
         "iq4_nl": GT.IQ4_NL, "q4_k": GT.Q4_K, "q6_k": GT.Q6_K, "q2_k": GT.Q2_K, "q3_k": GT.Q3_K,
         "q5_k": GT.Q5_K}
# byte offsets of each type's f16 scales inside a block
F16_FIELDS = {"q4_0": (0,), "q4_1": (0, 2), "q8_0": (0,), "q5_0": (0,), "q5_1": (0, 2), "iq4_nl": (0,),
              "q4_k": (0, 2), "q6_k": (208,), "q2_k": (80, 82), "q3_k": (108,), "q5_k": (0, 2)}


def random_blocks(rng, qtype: str, rows: int, cols: int, read_only: bool) -> QuantTensor:
    """Random blocks of `qtype` (every bit pattern of the integer fields) with small f16 scales."""
    fmt = GGML_FORMATS[qtype]
    raw = rng.integers(0, 256, (rows, cols // fmt.block_size * fmt.type_size), dtype=np.uint8)
    blk = raw.reshape(rows, cols // fmt.block_size, fmt.type_size)
    for off in F16_FIELDS[qtype]:
        blk[..., off:off + 2] = rng.uniform(-0.05, 0.05, blk.shape[:2] + (1,)).astype(np.float16).view(np.uint8)
    raw.flags.writeable = not read_only
    return QuantTensor(raw, qtype, (rows, cols))


def torch_grads(fn, *arrays):
    """(value, grads of every input) of the scalar torch function fn, in float64."""
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    value = fn(*ts)
    value.backward()
    return value.detach().numpy(), [t.grad.numpy() for t in ts]


def assert_close(got, want, rtol=1e-4):
    """|got - want| within rtol of want's largest magnitude (float32 sums against float64)."""
    scale = max(float(np.abs(want).max()), 1e-30)
    np.testing.assert_allclose(got, want, rtol=0, atol=rtol * scale)


# ------------------------------------------------------------------ the transposed product
@pytest.mark.parametrize("qtype,n,k", [
    ("q4_1", 45, 96), ("q4_0", 45, 96), ("q8_0", 45, 96),   # N not a multiple of an interleaved group
    ("q4_1", 300, 64),                                       # W's rows in two panels
    ("q4_1", 300, 352),                                      # work items of 4 strips and a last of 3
    ("q5_0", 13, 64), ("q5_1", 13, 64), ("iq4_nl", 13, 64),
    ("q4_k", 11, 512), ("q6_k", 11, 256), ("q2_k", 5, 256), ("q3_k", 5, 256), ("q5_k", 5, 256),
])
@pytest.mark.parametrize("read_only", [True, False], ids=["interleaved", "rows"])
def test_matmul_t_quantized_matches_torch(tier, qtype, n, k, read_only):
    rng = np.random.default_rng(abs(hash((qtype, n, k))) % 2**32)
    w = random_blocks(rng, qtype, n, k, read_only)
    w_float = gguf_dequantize(w.data, GT_OF[qtype]).reshape(n, k)
    x = rng.standard_normal((19, k))                   # 19: whole register tiles of 4 and 8 rows, and a part
    dy = rng.standard_normal((19, n)).astype(np.float32)
    _, (dx_want,) = torch_grads(lambda x: (x @ torch.tensor(w_float, dtype=torch.float64).T
                                           * torch.tensor(dy, dtype=torch.float64)).sum(), x)
    assert_close(K.matmul_t(dy, w), dx_want, 1e-5)


@pytest.mark.parametrize("qtype,n,k", [
    ("q4_0", 45, 96), ("q4_1", 45, 96), ("q8_0", 45, 96), ("q5_1", 13, 64),
    ("q4_1", 300, 1088),                 # W's rows in panels of 256 and 44; 34 strips
    ("q4_k", 11, 512), ("q6_k", 600, 256),   # k-quants; 600 rows: panels of 256, 256, 88
])
@pytest.mark.parametrize("read_only", [True, False], ids=["interleaved", "rows"])
def test_matmul_t_quantized_many_rows_matches_torch(tier, qtype, n, k, read_only):
    """A training batch's many rows of dy (every register tile of rows over each panel of W's rows)."""
    rng = np.random.default_rng(abs(hash((qtype, n, k, 70))) % 2**32)
    w = random_blocks(rng, qtype, n, k, read_only)
    w_float = gguf_dequantize(w.data, GT_OF[qtype]).reshape(n, k)
    x = rng.standard_normal((70, k))                   # 70: whole register tiles of 4 and 8 rows, and a part
    dy = rng.standard_normal((70, n)).astype(np.float32)
    _, (dx_want,) = torch_grads(lambda x: (x @ torch.tensor(w_float, dtype=torch.float64).T
                                           * torch.tensor(dy, dtype=torch.float64)).sum(), x)
    out = np.full((70, k), np.nan, np.float32)
    assert K.matmul_t(dy, w, out=out) is out
    assert_close(out, dx_want, 1e-5)


@pytest.mark.parametrize("read_only", [True, False], ids=["interleaved", "rows"])
def test_matmul_t_stacked_weight_matches_torch(tier, read_only):
    """A fused Q/K/V weight (parts whose rows end inside an interleaved group), as linear_split holds it."""
    rng = np.random.default_rng(11)
    parts = [random_blocks(rng, "q8_0", n, 64, read_only) for n in (20, 7, 7)]
    w = StackedQuantTensor(parts)
    w_float = np.concatenate([gguf_dequantize(p.data, GT.Q8_0).reshape(p.shape) for p in parts])
    dy = rng.standard_normal((6, 34)).astype(np.float32)
    assert_close(K.matmul_t(dy, w), dy.astype(np.float64) @ w_float, 1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("m,n,k", [(5, 17, 37), (9, 64, 100), (1, 3, 1), (3, 600, 37), (17, 300, 330)])   # K no multiple of 32 or of a vector
def test_matmul_t_float_matches_torch(tier, dtype, m, n, k):
    rng = np.random.default_rng(m * n * k)
    w = rng.standard_normal((n, k)).astype(dtype)
    dy = rng.standard_normal((m, n)).astype(np.float32)
    want = dy.astype(np.float64) @ w.astype(np.float64)
    out = np.full((m, k), np.nan, np.float32)
    assert K.matmul_t(dy, w, out=out) is out
    assert_close(out, want, 1e-5)


def test_matmul_t_same_bits_on_any_thread_count(tier):
    rng = np.random.default_rng(5)
    w = random_blocks(rng, "q4_1", 300, 576, True)      # 18 strips: 5 work items on 1 thread, 6 on 2
    dy = rng.standard_normal((33, 300)).astype(np.float32)
    assert_same_bits_on_1_and_2_threads(lambda: K.matmul_t(dy, w))


def test_matmul_t_many_rows_same_bits_on_any_thread_count(tier):
    rng = np.random.default_rng(6)
    w = random_blocks(rng, "q4_1", 600, 576, True)     # 18 strips: 5 work items on 1 thread, 6 on 2; 3 panels of rows
    dy = rng.standard_normal((64, 600)).astype(np.float32)
    assert_same_bits_on_1_and_2_threads(lambda: K.matmul_t(dy, w))


def assert_same_bits_on_1_and_2_threads(run):
    """run() gives the same array (or tuple of arrays) bit for bit on 1 and on 2 threads."""
    before = K.get_num_threads()
    try:
        K.set_num_threads(1)
        one = run()
        K.set_num_threads(2)
        two = run()
    finally:
        K.set_num_threads(before)
    for got, want in zip(two, one) if isinstance(one, tuple) else ((two, one),):
        np.testing.assert_array_equal(got, want)


def test_matmul_t_refuses_bad_operands():
    w = np.zeros((4, 8), np.float32)
    with pytest.raises(ShapeError):
        K.matmul_t(np.zeros((2, 5), np.float32), w)
    with pytest.raises(KernelError):
        K.matmul_t(np.zeros((2, 4), np.float64), w)
    dy = np.zeros((2, 4), np.float32)
    with pytest.raises(KernelError):
        K.matmul_t(dy, w, out=np.zeros((2, 8), np.float64))


@pytest.mark.parametrize("m,n,k", [(23, 19, 37), (23, 37, 19),       # dy the narrower, x the narrower
                                   (70, 8, 96), (70, 96, 8),         # a LoRA factor's A and B
                                   (300, 517, 130),                  # x wide but narrower: dy read transposed,
                                   (257, 45, 300)])                  # x's rows in two panels, odd strips
def test_weight_grad_matches_torch(tier, m, n, k):
    rng = np.random.default_rng(2)
    x, dy = rng.standard_normal((m, k)), rng.standard_normal((m, n))
    w = rng.standard_normal((n, k))
    _, (_, dw_want) = torch_grads(lambda x, w: ((x @ w.T) * torch.tensor(dy)).sum(), x, w)
    assert_close(K.weight_grad(dy.astype(np.float32), x.astype(np.float32)), dw_want, 1e-5)


def test_weight_grad_same_bits_on_any_thread_count(tier):
    rng = np.random.default_rng(6)
    dy, x = rng.standard_normal((300, 200)).astype(np.float32), rng.standard_normal((300, 612)).astype(np.float32)
    assert_same_bits_on_1_and_2_threads(lambda: K.weight_grad(dy, x))


# ------------------------------------------------------------------ attention
def torch_attention(q, k, v, n_heads, n_kv, scale, window):
    """Causal GQA self-attention in torch (float64): q (T, H*D), k, v (T, Hkv*D) -> (T, H*D)."""
    T, D = q.shape[0], q.shape[1] // n_heads
    qh = q.reshape(T, n_heads, D).transpose(0, 1)
    kh = k.reshape(T, n_kv, D).transpose(0, 1).repeat_interleave(n_heads // n_kv, 0)
    vh = v.reshape(T, n_kv, D).transpose(0, 1).repeat_interleave(n_heads // n_kv, 0)
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    visible = (j <= i) & ((j > i - window) if window > 0 else True)
    s = (qh @ kh.transpose(1, 2)) * scale
    s = s.masked_fill(~visible, float("-inf"))
    return (torch.softmax(s, -1) @ vh).transpose(0, 1).reshape(T, n_heads * D), torch.logsumexp(s, -1)


@pytest.mark.parametrize("T,n_heads,n_kv,D,window", [
    (37, 6, 2, 20, 0),      # GQA ratio 3, head_dim no multiple of 8, seq past one key tile
    (70, 3, 3, 16, 9),      # MHA, a window shorter than the sequence, 3 key tiles
    (5, 2, 1, 64, 0),       # fewer rows than a tile
    (40, 4, 1, 8, 40),      # a window as long as the sequence
    (70, 2, 1, 80, 0),      # head_dim 80 (five AVX-512 vectors), 3 blocks of 32 keys, the last of 6
    (33, 2, 2, 64, 0),      # one query past a whole block
    (100, 4, 2, 8, 45),     # a window crossing block edges, head_dim 8 (half a vector)
])
def test_attention_forward_and_backward_match_torch(tier, T, n_heads, n_kv, D, window):
    rng = np.random.default_rng(T * D + window)
    q, k, v = (rng.standard_normal((T, h * D)).astype(np.float32) for h in (n_heads, n_kv, n_kv))
    dout = rng.standard_normal((T, n_heads * D)).astype(np.float32)
    scale = 1.0 / np.sqrt(D)
    out, lse = K.attention_train(q, k, v, n_heads, n_kv, scale, window)
    want_out, want_lse = torch_attention(*(torch.tensor(a, dtype=torch.float64) for a in (q, k, v)),
                                         n_heads, n_kv, scale, window)
    assert_close(out, want_out.numpy())
    assert_close(lse, want_lse.numpy())
    _, want = torch_grads(lambda q, k, v: (torch_attention(q, k, v, n_heads, n_kv, scale, window)[0]
                                           * torch.tensor(dout, dtype=torch.float64)).sum(), q, k, v)
    got = K.attention_backward(q, k, v, out, lse, dout, n_heads, n_kv, scale, window)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert_close(g, w)


def test_attention_backward_of_a_batch_matches_torch(tier):
    """Sequences of one batch in one call: each row's grads as torch's for that row alone."""
    B, T, n_heads, n_kv, D, window = 3, 50, 4, 2, 24, 0
    rng = np.random.default_rng(5)
    q, k, v, dout = (rng.standard_normal((B, T, h * D)).astype(np.float32) for h in (n_heads, n_kv, n_kv, n_heads))
    scale = 1.0 / np.sqrt(D)
    fwd = [K.attention_train(q[b], k[b], v[b], n_heads, n_kv, scale, window) for b in range(B)]
    out, lse = np.stack([f[0] for f in fwd]), np.stack([f[1] for f in fwd])
    got = K.attention_backward(q, k, v, out, lse, dout, n_heads, n_kv, scale, window)
    for b in range(B):
        _, want = torch_grads(lambda q, k, v: (torch_attention(q, k, v, n_heads, n_kv, scale, window)[0]
                                               * torch.tensor(dout[b], dtype=torch.float64)).sum(), q[b], k[b], v[b])
        for g, w in zip(got, want):
            assert g[b].shape == w.shape
            assert_close(g[b], w)


def test_attention_backward_same_bits_on_any_thread_count(tier):
    rng = np.random.default_rng(8)
    q, k, v, dout = (rng.standard_normal((45, w)).astype(np.float32) for w in (48, 16, 16, 48))

    def run():
        out, lse = K.attention_train(q, k, v, 6, 2, 0.25, 20)
        return (out, lse) + K.attention_backward(q, k, v, out, lse, dout, 6, 2, 0.25, 20)
    assert_same_bits_on_1_and_2_threads(run)


def test_attention_backward_refuses_mismatched_shapes():
    q = np.zeros((4, 8), np.float32)
    kv = np.zeros((4, 4), np.float32)
    with pytest.raises(ShapeError):
        K.attention_train(q, kv, kv, 3, 1, 1.0)
    with pytest.raises(ShapeError):
        K.attention_backward(q, kv, kv, q, np.zeros((2, 3), np.float32), q, 2, 1, 1.0)
    with pytest.raises(ShapeError):
        K.attention_backward(q[None], kv[None], kv[None], q[None], np.zeros((2, 2, 4), np.float32), q[None], 2, 1, 1.0)


# ------------------------------------------------------------------ cross-entropy
@pytest.mark.parametrize("rows,vocab", [(9, 1003), (4, 5), (2, 49)])
def test_cross_entropy_matches_torch(tier, rows, vocab):
    rng = np.random.default_rng(rows * vocab)
    logits = (rng.standard_normal((rows, vocab)) * 4).astype(np.float32)
    labels = rng.integers(0, vocab, rows)
    labels[::3] = -100  # ignored rows
    tl = torch.tensor(labels)
    want_loss, (want_grad,) = torch_grads(lambda x: torch.nn.functional.cross_entropy(x, tl), logits)
    loss, grad, lse = K.cross_entropy(logits, labels)
    assert abs(loss - float(want_loss)) <= 1e-5 * max(1.0, abs(float(want_loss)))
    assert_close(grad, want_grad, 1e-5)
    assert_close(lse, torch.logsumexp(torch.tensor(logits, dtype=torch.float64), -1).numpy(), 1e-6)
    buf = logits.copy()
    loss2, grad2, _ = K.cross_entropy(buf, labels, in_place=True)
    assert grad2 is buf and loss2 == loss
    np.testing.assert_array_equal(grad2, grad)
    assert K.cross_entropy(logits, labels, grad=False)[1] is None
    # the gradient alone from the saved logsumexp, scaled by dloss, written over the logits
    buf = logits.copy()
    assert K.cross_entropy_grad(buf, labels, lse, dloss=0.5, out=buf) is buf
    assert_close(buf, 0.5 * want_grad, 1e-5)


def test_cross_entropy_custom_ignore_index_and_all_ignored(tier):
    logits = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
    labels = np.array([2, 5, 5])
    want_loss, (want_grad,) = torch_grads(
        lambda x: torch.nn.functional.cross_entropy(x, torch.tensor(labels), ignore_index=5), logits)
    loss, grad, _ = K.cross_entropy(logits, labels, ignore_index=5)
    assert abs(loss - float(want_loss)) < 1e-5
    assert_close(grad, want_grad, 1e-5)
    loss, grad, _ = K.cross_entropy(logits, np.full(3, -100))
    assert loss == 0.0 and not grad.any()


def test_cross_entropy_refuses_bad_labels():
    logits = np.zeros((2, 4), np.float32)
    with pytest.raises(KernelError, match="label 4 at row 1"):
        K.cross_entropy(logits, np.array([0, 4]))
    with pytest.raises(ShapeError):
        K.cross_entropy(logits, np.array([0]))
    with pytest.raises(KernelError):
        K.cross_entropy(logits.astype(np.float64), np.array([0, 1]), in_place=True)


# ------------------------------------------------------------------ RMSNorm, embedding
@pytest.mark.parametrize("rows,dim", [(7, 37), (1, 576), (16, 8)])
def test_rms_norm_backward_matches_torch(tier, rows, dim):
    rng = np.random.default_rng(rows + dim)
    x, w = rng.standard_normal((rows, dim)), rng.standard_normal(dim)
    dy = rng.standard_normal((rows, dim))
    eps = 1e-5

    def f(x, w):
        return (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w * torch.tensor(dy)).sum()

    _, (dx_want, dw_want) = torch_grads(f, x, w)
    dx, dw = K.rms_norm_backward(x.astype(np.float32), w.astype(np.float32), dy.astype(np.float32), eps)
    assert_close(dx, dx_want, 1e-5)
    assert_close(dw, dw_want, 1e-5)


def test_embedding_backward_matches_torch(tier):
    rng = np.random.default_rng(4)
    ids = np.array([3, 0, 3, 9, 3, 1, 0])  # repeated ids accumulate
    dy = rng.standard_normal((7, 130)).astype(np.float32)
    table = torch.zeros((10, 130), dtype=torch.float64, requires_grad=True)
    (torch.nn.functional.embedding(torch.tensor(ids), table) * torch.tensor(dy, dtype=torch.float64)).sum().backward()
    got = K.embedding_backward(ids, dy, 10)
    assert_close(got, table.grad.numpy(), 1e-6)
    again = K.embedding_backward(ids.astype(np.int32), dy, 10, out=got)   # adds into out
    assert again is got
    assert_close(got, 2 * table.grad.numpy(), 1e-6)
    with pytest.raises(KernelError, match="id 10 at position 1"):
        K.embedding_backward(np.array([0, 10]), dy[:2], 10)


# ------------------------------------------------------------------ LayerNorm, bias sums, activations
@pytest.mark.parametrize("rows,dim", [(7, 37), (1, 576), (130, 65)])   # 65: one column past a work item
def test_layer_norm_backward_matches_torch(tier, rows, dim):
    rng = np.random.default_rng(rows * dim)
    x = rng.standard_normal((rows, dim)) * 3 + 1.5     # an offset mean: the centring matters
    w, b, dy = rng.standard_normal(dim), rng.standard_normal(dim), rng.standard_normal((rows, dim))

    def f(x, w, b):
        return (torch.nn.functional.layer_norm(x, (dim,), w, b, 1e-5) * torch.tensor(dy)).sum()

    _, (dx_want, dw_want, db_want) = torch_grads(f, x, w, b)
    dx, dw, db = K.layer_norm_backward(x.astype(np.float32), w.astype(np.float32), dy.astype(np.float32), 1e-5)
    assert_close(dx, dx_want, 1e-5)
    assert_close(dw, dw_want, 1e-5)
    assert_close(db, db_want, 1e-5)


def test_layer_norm_backward_and_column_sums_same_bits_on_any_thread_count(tier):
    rng = np.random.default_rng(6)
    x, dy = rng.standard_normal((333, 200)).astype(np.float32), rng.standard_normal((333, 200)).astype(np.float32)
    w = rng.standard_normal(200).astype(np.float32)
    assert_same_bits_on_1_and_2_threads(lambda: K.layer_norm_backward(x, w, dy, 1e-5) + (K.column_sums(dy),))


@pytest.mark.parametrize("rows,dim", [(5, 3), (1000, 70), (0, 4)])
def test_column_sums_match_torch(tier, rows, dim):
    x = np.random.default_rng(rows + dim).standard_normal((rows, dim)).astype(np.float32)
    assert_close(K.column_sums(x), torch.tensor(x, dtype=torch.float64).sum(0).numpy(), 1e-6)


def _activation_inputs(n: int):
    """x spanning the range where exp saturates (|x| up to 40), zeros and tiny values; dy random."""
    rng = np.random.default_rng(n)
    x = np.concatenate([rng.uniform(-40, 40, n // 2), rng.standard_normal(n - n // 2 - 3), [0.0, 1e-30, -1e-30]])
    return x.astype(np.float32), rng.standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("n", [5, 13, 40003])   # 40003: three work items, the last one ragged
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_backward_matches_torch(tier, n, approximate):
    x, dy = _activation_inputs(n)
    _, (want,) = torch_grads(lambda t: (torch.nn.functional.gelu(t, approximate=approximate) * torch.tensor(dy)).sum(), x)
    got = K.gelu_backward(x, dy, approximate)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6 * float(np.abs(dy).max()))
    out = dy.copy()
    assert K.gelu_backward(x, out, approximate, out=out) is out   # in place over dy
    np.testing.assert_array_equal(out, got)


@pytest.mark.parametrize("n", [5, 13, 40003])
def test_silu_backward_matches_torch(tier, n):
    x, dy = _activation_inputs(n)
    _, (want,) = torch_grads(lambda t: (torch.nn.functional.silu(t) * torch.tensor(dy)).sum(), x)
    got = K.silu_backward(x.reshape(-1, 1), dy.reshape(-1, 1)).reshape(-1)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6 * float(np.abs(dy).max()))


def test_activation_backward_refuses_bad_operands():
    x = np.zeros(8, np.float32)
    with pytest.raises(ShapeError, match="not shaped like x"):
        K.gelu_backward(x, np.zeros(9, np.float32))
    with pytest.raises(KernelError, match="float32"):
        K.silu_backward(x.astype(np.float64), x)
    with pytest.raises(KernelError, match="approximate"):
        K.gelu_backward(x, x.copy(), "erf")
    with pytest.raises(KernelError, match="overlap x"):
        K.gelu_backward(x, x, out=x)
