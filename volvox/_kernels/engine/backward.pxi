# Per-op entry points of the training kernels (volvox.cpu validates every argument first): OpenMP over
# each kernel's independent work items (kernels/backward.pxi through the tier's train table), per-thread
# scratch indexed by the thread's number. Items never write the same output: every result is
# deterministic and independent of the thread count.
from cython.parallel cimport prange, threadid
from volvox._kernels.vx cimport vx_attn_bwd_kv_items, vx_attn_train_shape, vx_matmul_t_panel_floats, vx_matmul_t_strip

cdef enum:
    SCATTER_COLS = 64       # embedding_backward: columns per work item


def matmul_t_panel_floats(int wtype, int64_t N):
    """Floats of scratch matmul_t needs per thread for a weight of type wtype with N rows."""
    return vx_matmul_t_panel_floats(wtype, N)


def matmul_t(int wtype, const uint8_t[::1] w, int64_t row_bytes, int64_t group_bytes, int il_rows, int64_t K,
             const float[:, ::1] dy, float[:, ::1] dx, float[::1] panels):
    """dx (M, K) = dy (M, N) @ W (N, K), W of type wtype as inference holds it: rows row_bytes apart, or
    interleaved groups of il_rows rows group_bytes apart (group_bytes > 0). One work item per strip of
    vx_matmul_t_strip(wtype) input columns; panels: threads * matmul_t_panel_floats(wtype, N) floats."""
    cdef int64_t M = dy.shape[0], N = dy.shape[1], S = vx_matmul_t_strip(wtype)
    cdef int64_t per = vx_matmul_t_panel_floats(wtype, N)
    cdef int64_t strips = (K + S - 1) // S, strip
    cdef int team = threads_for(M * N * K)
    if M == 0 or K == 0:
        return
    for strip in prange(strips, nogil=True, schedule="static", num_threads=team):
        _tbl.train.matmul_t_strip(wtype, _tbl.dequant[wtype], K, &w[0], row_bytes, group_bytes, il_rows, N,
                                  strip, &dy[0, 0], M, &dx[0, 0], &panels[threadid() * per])


cdef vx_attn_train_shape attn_shape(int64_t seq, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                    int64_t window, float scale):
    cdef vx_attn_train_shape s
    s.seq, s.n_heads, s.n_kv_heads, s.head_dim, s.window, s.scale = seq, n_heads, n_kv_heads, head_dim, window, scale
    return s


def attention_train_forward(const float[:, ::1] q, const float[:, ::1] k, const float[:, ::1] v, int64_t n_heads,
                            int64_t n_kv_heads, float scale, int64_t window, float[:, ::1] out, float[:, ::1] lse,
                            float[::1] scores):
    """Causal GQA self-attention of the whole sequence: out (seq, n_heads * head_dim) and its softmax's
    logsumexp lse (n_heads, seq). One work item per (head, query row); scores: threads * seq floats."""
    cdef int64_t seq = q.shape[0], item
    cdef vx_attn_train_shape s = attn_shape(seq, n_heads, n_kv_heads, q.shape[1] // n_heads, window, scale)
    if seq == 0:
        return
    for item in prange(n_heads * seq, nogil=True, schedule="static",
                       num_threads=threads_for(seq * seq * q.shape[1])):
        _tbl.train.attention_fwd_row(&s, &q[0, 0], &k[0, 0], &v[0, 0], item, &scores[threadid() * seq],
                                     &out[0, 0], &lse[0, 0])


def attention_backward(const float[:, ::1] q, const float[:, ::1] k, const float[:, ::1] v,
                       const float[:, ::1] out, const float[:, ::1] dout, const float[:, ::1] lse,
                       int64_t n_heads, int64_t n_kv_heads, float scale, int64_t window,
                       float[:, ::1] dq, float[:, ::1] dk, float[:, ::1] dv, float[:, ::1] delta):
    """dq, dk, dv of causal GQA self-attention given dout and the forward's out and lse (n_heads, seq):
    delta (n_heads, seq) = rowwise dout . out, then dk / dv per (kv head, 32 keys) and dq per (head,
    query row), the probabilities recomputed from lse."""
    cdef int64_t seq = q.shape[0], D = q.shape[1] // n_heads, item, h, i, d
    cdef vx_attn_train_shape s = attn_shape(seq, n_heads, n_kv_heads, D, window, scale)
    cdef int team = threads_for(seq * seq * q.shape[1])
    cdef double acc
    if seq == 0:
        return
    for item in prange(n_heads * seq, nogil=True, schedule="static", num_threads=team):
        h = item // seq
        i = item % seq
        acc = 0.0
        for d in range(D):
            acc = acc + <double>dout[i, h * D + d] * <double>out[i, h * D + d]
        delta[h, i] = <float>acc
    for item in prange(vx_attn_bwd_kv_items(&s), nogil=True, schedule="dynamic", num_threads=team):
        _tbl.train.attention_bwd_kv(&s, &q[0, 0], &k[0, 0], &v[0, 0], &dout[0, 0], &lse[0, 0], &delta[0, 0],
                                    item, &dk[0, 0], &dv[0, 0])
    for item in prange(n_heads * seq, nogil=True, schedule="static", num_threads=team):
        _tbl.train.attention_bwd_q(&s, &q[0, 0], &k[0, 0], &v[0, 0], &dout[0, 0], &lse[0, 0], &delta[0, 0],
                                   item, &dq[0, 0])


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
    cdef int64_t rows = x.shape[0], D = x.shape[1], r, c
    cdef int team = threads_for(rows * D * 4)
    cdef double acc
    if rows == 0:
        for c in range(D):
            dweight[c] = 0.0
        return
    for r in prange(rows, nogil=True, schedule="static", num_threads=team):
        rinv[r] = _tbl.train.rms_norm_bwd_row(D, &x[r, 0], &weight[0], &g[r, 0], eps, &dx[r, 0])
    for c in prange(D, nogil=True, schedule="static", num_threads=team):
        acc = 0.0
        for r in range(rows):
            acc = acc + <double>g[r, c] * <double>x[r, c] * <double>rinv[r]
        dweight[c] = <float>acc


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
