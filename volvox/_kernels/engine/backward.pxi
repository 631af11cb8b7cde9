# Per-op entry points of the training kernels (volvox.cpu validates every argument first): OpenMP over
# each kernel's independent work items (kernels/backward.pxi through the tier's train table), per-thread
# scratch indexed by the thread's number. Items never write the same output: every result is
# deterministic and independent of the thread count.
from cython.parallel cimport prange, threadid
from libc.math cimport sqrtf
from volvox._kernels.vx cimport (vx_attn_bwd_scratch_floats, vx_attn_fwd_scratch_floats, vx_attn_train_shape, vx_matmul_t_panel_floats, vx_matmul_t_span,
                                 vx_matmul_t_strip)

cdef enum:
    SCATTER_COLS = 64       # embedding_backward: columns per work item
    SUM_COLS = 64           # column_sums and the norms' weight (bias) sums: columns per work item
    RUN_ELEMENTS = 16384    # elementwise grads and optimiser updates: elements per work item


def matmul_t_panel_floats(int wtype, int64_t N):
    """Floats of scratch matmul_t needs per thread for a weight of type wtype with N rows."""
    return vx_matmul_t_panel_floats(wtype, N)


def matmul_t(int wtype, const uint8_t[::1] w, int64_t row_bytes, int64_t group_bytes, int il_rows, int64_t K,
             const float[:, ::1] dy, float[:, ::1] dx, float[::1] panels, bint dy_transposed=False):
    """dx (M, K) = dy (M, N) @ W (N, K), W of type wtype as inference holds it: rows row_bytes apart, or
    interleaved groups of il_rows rows group_bytes apart (group_bytes > 0); with dy_transposed, dy is
    stored (N, M) and read as its transpose, never copied. One work item per strip of
    vx_matmul_t_strip(wtype) input columns, up to vx_matmul_t_span(wtype) strips a work item, the items
    a multiple of the team; panels: threads * matmul_t_panel_floats(wtype, N) floats."""
    cdef int64_t M = dy.shape[1] if dy_transposed else dy.shape[0], N = dy.shape[0] if dy_transposed else dy.shape[1]
    cdef int64_t dy_row = 1 if dy_transposed else N, dy_col = M if dy_transposed else 1, S = vx_matmul_t_strip(wtype)
    cdef int64_t per = vx_matmul_t_panel_floats(wtype, N)
    cdef int64_t strips = (K + S - 1) // S, span_max = vx_matmul_t_span(wtype), items, span, item
    cdef int team = threads_for(M * N * K)
    if M == 0 or K == 0:
        return
    items = team * ((strips + team * span_max - 1) // (team * span_max))
    span = (strips + items - 1) // items
    items = (strips + span - 1) // span
    for item in prange(items, nogil=True, schedule="static", num_threads=team):
        _tbl.train.matmul_t_strip(wtype, _tbl.dequant[wtype], K, &w[0], row_bytes, group_bytes, il_rows, N,
                                  item * span, min(span, strips - item * span), &dy[0, 0], dy_row, dy_col, M, &dx[0, 0],
                                  &panels[threadid() * per])


cdef vx_attn_train_shape attn_shape(int64_t seq, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                    int64_t window, float scale):
    cdef vx_attn_train_shape s
    s.seq, s.n_heads, s.n_kv_heads, s.head_dim, s.window, s.scale = seq, n_heads, n_kv_heads, head_dim, window, scale
    return s


def attention_forward_scratch_floats(int64_t head_dim):
    """Floats of scratch attention_train_forward needs per thread for heads of head_dim."""
    return vx_attn_fwd_scratch_floats(head_dim)


def attention_train_forward(const float[:, ::1] q, const float[:, ::1] k, const float[:, ::1] v, int64_t n_heads,
                            int64_t n_kv_heads, float scale, int64_t window, float[:, ::1] out, float[:, ::1] lse,
                            float[::1] scratch):
    """Causal GQA self-attention of the whole sequence: out (seq, n_heads * head_dim) and its softmax's
    logsumexp lse (n_heads, seq). One work item per (block of 32 queries, head), the costliest (last)
    blocks first, handed out dynamically so that the causal triangle's uneven items balance; scratch:
    threads * attention_forward_scratch_floats(head_dim) floats."""
    cdef int64_t seq = q.shape[0], item, D = q.shape[1] // n_heads
    cdef int64_t per = vx_attn_fwd_scratch_floats(D)
    cdef vx_attn_train_shape s = attn_shape(seq, n_heads, n_kv_heads, D, window, scale)
    if seq == 0:
        return
    for item in prange(n_heads * ((seq + 31) // 32), nogil=True, schedule="dynamic",  # blocks of 32 queries
                       num_threads=threads_for(seq * seq * q.shape[1])):
        _tbl.train.attention_fwd_block(&s, &q[0, 0], &k[0, 0], &v[0, 0], item, &scratch[threadid() * per],
                                       &out[0, 0], &lse[0, 0])


def attention_backward_scratch_floats(int64_t head_dim):
    """Floats of scratch attention_backward needs per thread for heads of head_dim."""
    return vx_attn_bwd_scratch_floats(head_dim)


def attention_backward(const float[:, :, ::1] q, const float[:, :, ::1] k, const float[:, :, ::1] v,
                       const float[:, :, ::1] out, const float[:, :, ::1] dout, const float[:, :, ::1] lse,
                       int64_t n_heads, int64_t n_kv_heads, float scale, int64_t window,
                       float[:, :, ::1] dq, float[:, :, ::1] dk, float[:, :, ::1] dv, float[:, :, ::1] delta,
                       float[::1] scratch):
    """dq, dk, dv of causal GQA self-attention of each of a batch of sequences given dout and the forward's
    out and lse (batch, n_heads, seq); delta (batch, n_heads, seq) = rowwise dout . out on the way. One
    work item per (sequence, kv head): its blocks of queries x keys in one pass; scratch: threads *
    vx_attn_bwd_scratch_floats(head_dim) floats."""
    cdef int64_t B = q.shape[0], seq = q.shape[1], D = q.shape[2] // n_heads, item, b
    cdef int64_t per = vx_attn_bwd_scratch_floats(D)
    cdef vx_attn_train_shape s = attn_shape(seq, n_heads, n_kv_heads, D, window, scale)
    if seq == 0 or B == 0:
        return
    for item in prange(B * n_kv_heads, nogil=True, schedule="static",
                       num_threads=threads_for(B * seq * seq * q.shape[2])):
        b = item // n_kv_heads
        _tbl.train.attention_bwd_group(&s, &q[b, 0, 0], &k[b, 0, 0], &v[b, 0, 0], &out[b, 0, 0], &dout[b, 0, 0],
                                       &lse[b, 0, 0], item % n_kv_heads, &delta[b, 0, 0], &dq[b, 0, 0],
                                       &dk[b, 0, 0], &dv[b, 0, 0], &scratch[threadid() * per])


def cross_entropy(const float[:, ::1] logits, const int64_t[::1] labels, int64_t ignore_index, float scale,
                  float[:, ::1] dlogits, float[::1] loss, float[::1] lse):
    """Per row of logits (rows, V): lse[r] = its logsumexp, loss[r] = lse[r] - logit of labels[r] and, when
    dlogits (rows, V; may be logits itself) is given, its row = scale (softmax - onehot). Rows whose label
    is ignore_index: loss 0, gradient 0 (their lse is still computed)."""
    cdef int64_t rows = logits.shape[0], V = logits.shape[1], r
    cdef bint grad = dlogits is not None
    if rows == 0:
        return
    for r in prange(rows, nogil=True, schedule="static", num_threads=threads_for(rows * V * 8)):
        if labels[r] == ignore_index:
            _tbl.train.cross_entropy_row(V, &logits[r, 0], 0, scale, NULL, &loss[r], &lse[r])
            loss[r] = 0.0
            if grad:
                memset(&dlogits[r, 0], 0, V * sizeof(float))
        else:
            _tbl.train.cross_entropy_row(V, &logits[r, 0], labels[r], scale, &dlogits[r, 0] if grad else NULL,
                                         &loss[r], &lse[r])


def cross_entropy_grad(const float[:, ::1] logits, const int64_t[::1] labels, const float[::1] lse,
                       int64_t ignore_index, float scale, float[:, ::1] dlogits):
    """dlogits (rows, V; may be logits itself) = scale (exp(logits - lse) - onehot(labels)) per row from the
    forward's logsumexp lse (rows,); rows whose label is ignore_index: 0."""
    cdef int64_t rows = logits.shape[0], V = logits.shape[1], r
    if rows == 0:
        return
    for r in prange(rows, nogil=True, schedule="static", num_threads=threads_for(rows * V * 4)):
        if labels[r] == ignore_index:
            memset(&dlogits[r, 0], 0, V * sizeof(float))
        else:
            _tbl.train.cross_entropy_grad_row(V, &logits[r, 0], labels[r], lse[r], scale, &dlogits[r, 0])


def rms_norm_backward(const float[:, ::1] x, const float[::1] weight, const float[:, ::1] g, float eps,
                      float[:, ::1] dx, float[::1] dweight, float[::1] rinv):
    """dx (rows, D) and dweight (D,) = sum over rows of g x / rms of y = x / rms * weight given g = dL/dy;
    rinv (rows,) receives each row's 1 / rms."""
    cdef int64_t rows = x.shape[0], D = x.shape[1], r, c, item, c0
    cdef int team = threads_for(rows * D * 4)
    if rows == 0:
        for c in range(D):
            dweight[c] = 0.0
        return
    for r in prange(rows, nogil=True, schedule="static", num_threads=team):
        rinv[r] = _tbl.train.rms_norm_bwd_row(D, &x[r, 0], &weight[0], &g[r, 0], eps, &dx[r, 0])
    for item in prange((D + SUM_COLS - 1) // SUM_COLS, nogil=True, schedule="static", num_threads=team):
        c0 = item * SUM_COLS
        column_block_sums(&x[0, 0], &g[0, 0], NULL, &rinv[0], rows, D, c0, c0 + SUM_COLS if c0 + SUM_COLS < D else D,
                          NULL, &dweight[0])


def embedding_backward(const int64_t[::1] ids, const float[:, ::1] dy, float[:, ::1] dtable):
    """dtable[ids[i]] += dy[i] for every row i (ids already checked against dtable's rows). One work item
    per SCATTER_COLS columns, every row in order: no two threads touch one element."""
    cdef int64_t rows = dy.shape[0], D = dy.shape[1], item, c, c1, i
    cdef float *dst
    cdef const float *src
    if rows == 0 or D == 0:
        return
    for item in prange((D + SCATTER_COLS - 1) // SCATTER_COLS, nogil=True, schedule="static",
                       num_threads=threads_for(rows * D)):
        c1 = (item + 1) * SCATTER_COLS
        if c1 > D:
            c1 = D
        for i in range(rows):
            dst = &dtable[ids[i], 0]
            src = &dy[i, 0]
            for c in range(item * SCATTER_COLS, c1):
                dst[c] = dst[c] + src[c]


cdef void column_block_sums(const float *x, const float *dy, const float *mean, const float *rinv, int64_t rows,
                            int64_t D, int64_t c0, int64_t c1, float *sums, float *xhat_sums) noexcept nogil:
    """For columns c0 .. c1 - 1 (at most SUM_COLS): sums[c] = sum over rows r of dy[r, c] (when sums is
    not NULL) and xhat_sums[c] = sum over r of dy[r, c] (x[r, c] - mean[r]) rinv[r] (when xhat_sums is
    not NULL; mean NULL: 0); rows in order, sums in double (a bias's, a LayerNorm's and an RMSNorm's
    weight gradients)."""
    cdef double acc[SUM_COLS]         # (columns,) sum of dy
    cdef double acc_x[SUM_COLS]       # (columns,) sum of dy xhat
    cdef int64_t n = c1 - c0, r, c
    cdef const float *row
    cdef const float *xrow
    cdef double mu, ri
    for c in range(n):
        acc[c] = 0.0
        acc_x[c] = 0.0
    for r in range(rows):
        row = dy + r * D + c0
        if sums != NULL:
            for c in range(n):
                acc[c] += row[c]
        if xhat_sums != NULL:
            xrow, mu, ri = x + r * D + c0, (mean[r] if mean != NULL else 0.0), rinv[r]
            for c in range(n):
                acc_x[c] += <double>row[c] * ((<double>xrow[c] - mu) * ri)
    for c in range(n):
        if sums != NULL:
            sums[c0 + c] = <float>acc[c]
        if xhat_sums != NULL:
            xhat_sums[c0 + c] = <float>acc_x[c]


def column_sums(const float[:, ::1] x, float[::1] out):
    """out (D,) = x (rows, D) summed over its rows, in double, rows in order: one work item per SUM_COLS
    columns (a bias's gradient; sum_to over leading axes)."""
    cdef int64_t rows = x.shape[0], D = x.shape[1], item, c0
    if D == 0:
        return
    if rows == 0:
        out[:] = 0.0
        return
    for item in prange((D + SUM_COLS - 1) // SUM_COLS, nogil=True, schedule="static", num_threads=threads_for(rows * D)):
        c0 = item * SUM_COLS
        column_block_sums(NULL, &x[0, 0], NULL, NULL, rows, D, c0, c0 + SUM_COLS if c0 + SUM_COLS < D else D,
                          &out[0], NULL)


def layer_norm_backward(const float[:, ::1] x, const float[::1] weight, const float[:, ::1] g, float eps,
                        float[:, ::1] dx, float[::1] dweight, float[::1] dbias, float[::1] mean, float[::1] rinv):
    """dx (rows, D), dweight (D,) = sum over rows of g xhat and dbias (D,) = sum over rows of g, for
    y = xhat weight + bias given g = dL/dy; mean, rinv (rows,) receive each row's mean and 1 / std."""
    cdef int64_t rows = x.shape[0], D = x.shape[1], r, item, c0
    cdef int team = threads_for(rows * D * 6)
    if D == 0:
        return
    if rows == 0:
        dweight[:] = 0.0
        dbias[:] = 0.0
        return
    for r in prange(rows, nogil=True, schedule="static", num_threads=team):
        rinv[r] = _tbl.train.layer_norm_bwd_row(D, &x[r, 0], &weight[0], &g[r, 0], eps, &dx[r, 0], &mean[r])
    for item in prange((D + SUM_COLS - 1) // SUM_COLS, nogil=True, schedule="static", num_threads=team):
        c0 = item * SUM_COLS
        column_block_sums(&x[0, 0], &g[0, 0], &mean[0], &rinv[0], rows, D, c0,
                          c0 + SUM_COLS if c0 + SUM_COLS < D else D, &dbias[0], &dweight[0])


def activation_backward(int kind, const float[::1] x, const float[::1] dy, float[::1] dx):
    """dx (n,) = dy * act'(x) for act = exact GELU (kind 0), tanh GELU (1) or SiLU (2); dx may be dy. One
    work item per RUN_ELEMENTS elements."""
    cdef int64_t n = x.shape[0], item, i0
    for item in prange((n + RUN_ELEMENTS - 1) // RUN_ELEMENTS, nogil=True, schedule="static",
                       num_threads=threads_for(n * 32)):
        i0 = item * RUN_ELEMENTS
        if kind == 2:
            _tbl.train.silu_grad_run(RUN_ELEMENTS if n - i0 > RUN_ELEMENTS else n - i0, &x[i0], &dy[i0], &dx[i0])
        else:
            _tbl.train.gelu_grad_run(RUN_ELEMENTS if n - i0 > RUN_ELEMENTS else n - i0, &x[i0], &dy[i0], kind == 1,
                                     &dx[i0])



# The optimiser updates run here, at the engine's baseline flags, not in a tier: every product and sum
# is rounded on its own in torch.optim's order (no FMA contraction), so that a run agrees with torch's
# step for step (tests/train/test_optim.py: ten steps to 1e-6). Each loop vectorises.
cdef struct AdamWStep:
    float decay                  # 1 - lr * weight_decay
    float c1, b2, c2, eps        # 1 - b1, b2, 1 - b2 (each difference rounded once from double, as torch's)
    float step_size              # lr / (1 - b1^t)
    float bc2_sqrt               # sqrt(1 - b2^t)


cdef struct SGDStep:
    float lr, momentum, weight_decay
    float undamped               # 1 - dampening (rounded once from double)
    bint nesterov
    bint first                   # the first step: the momentum buffer becomes the direction itself


cdef void adamw_run(int64_t n, float *p, const float *g, float *m, float *v, const AdamWStep *s) noexcept nogil:
    """One AdamW step over n parameters as torch.optim.AdamW: p *= decay; m += (1 - b1) (g - m);
    v = b2 v + (1 - b2) g^2; p -= step_size m / (sqrt(v) / bc2_sqrt + eps)."""
    cdef int64_t i
    cdef float d, gg
    for i in range(n):
        p[i] = p[i] * s.decay
        m[i] = m[i] + s.c1 * (g[i] - m[i])
        gg = g[i] * g[i]
        v[i] = v[i] * s.b2
        v[i] = v[i] + s.c2 * gg
        d = sqrtf(v[i]) / s.bc2_sqrt + s.eps
        p[i] = p[i] - s.step_size * (m[i] / d)


cdef void sgd_run(int64_t n, float *p, const float *g, float *buf, const SGDStep *s) noexcept nogil:
    """One SGD step over n parameters as torch.optim.SGD: d = g + wd p; with momentum, buf = d on the first
    step, else momentum buf + (1 - dampening) d, and d = d + momentum buf (Nesterov) or buf; p -= lr d."""
    cdef int64_t i
    cdef float d
    for i in range(n):
        d = g[i] + s.weight_decay * p[i]
        if s.momentum != <float>0.0:
            buf[i] = d if s.first else buf[i] * s.momentum + s.undamped * d
            d = d + s.momentum * buf[i] if s.nesterov else buf[i]
        p[i] = p[i] - s.lr * d


def adamw_update(float[::1] p, const float[::1] g, float[::1] m, float[::1] v, float decay, float c1, float b2,
                 float c2, float eps, float step_size, float bc2_sqrt):
    """One AdamW step over every parameter (p, g, m, v of one length), in place: one work item per
    RUN_ELEMENTS elements."""
    cdef AdamWStep s
    s.decay, s.c1, s.b2, s.c2, s.eps, s.step_size, s.bc2_sqrt = decay, c1, b2, c2, eps, step_size, bc2_sqrt
    cdef int64_t n = p.shape[0], item, i0
    for item in prange((n + RUN_ELEMENTS - 1) // RUN_ELEMENTS, nogil=True, schedule="static",
                       num_threads=threads_for(n * 16)):
        i0 = item * RUN_ELEMENTS
        adamw_run(RUN_ELEMENTS if n - i0 > RUN_ELEMENTS else n - i0, &p[i0], &g[i0], &m[i0], &v[i0], &s)


def sgd_update(float[::1] p, const float[::1] g, float[::1] buf, float lr, float momentum, float undamped,
               float weight_decay, bint nesterov, bint first):
    """One SGD step over every parameter (p, g, buf of one length), in place: one work item per
    RUN_ELEMENTS elements."""
    cdef SGDStep s
    s.lr, s.momentum, s.undamped, s.weight_decay = lr, momentum, undamped, weight_decay
    s.nesterov, s.first = nesterov, first
    cdef int64_t n = p.shape[0], item, i0
    for item in prange((n + RUN_ELEMENTS - 1) // RUN_ELEMENTS, nogil=True, schedule="static",
                       num_threads=threads_for(n * 8)):
        i0 = item * RUN_ELEMENTS
        sgd_run(RUN_ELEMENTS if n - i0 > RUN_ELEMENTS else n - i0, &p[i0], &g[i0], &buf[i0], &s)
