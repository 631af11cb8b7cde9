# Mixture-of-experts steps (ops/moe.py): one token's routing, its chosen experts' matrix-vector
# products and their weighted sum. The experts' GEMVs are the tier's GEMV row kernels (_tbl.gemm /
# _tbl.gemm_il) on the chosen expert's rows; a work item is one (chosen expert, 16-row chunk) pair,
# so a team splits all chosen experts' rows between its threads, not the experts.
# Included by steps.pxi after the step registry; the argument structs live with the others there.
from libc.math cimport expf
from libc.stdint cimport uintptr_t

cdef enum:
    MOE_MAX_EXPERTS = 1024       # experts a router may score (the route step's scores are on its stack)

MOE_ROUTE_MAX_EXPERTS = MOE_MAX_EXPERTS


cdef void run_moe_route(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    """Scores (softmax over the experts, or sigmoid), the top_k best (ties: the lower id) best first,
    their scores divided by their sum when norm; then the shared expert's weight (sigmoid of its gate
    logit, or 1 without one) when there is a shared expert."""
    cdef const MoeRouteArgs *a = &s.a.moe_route
    cdef float scores[MOE_MAX_EXPERTS]                          # (n_experts,)
    cdef bint taken[MOE_MAX_EXPERTS]
    cdef int64_t E = a.n_experts, e, k, best
    cdef float mx = a.logits[0], total = 0, chosen = 0
    if a.sigmoid:
        for e in range(E):
            scores[e] = <float>1.0 / (<float>1.0 + expf(-a.logits[e]))
    else:
        for e in range(1, E):
            mx = a.logits[e] if a.logits[e] > mx else mx
        for e in range(E):
            scores[e] = expf(a.logits[e] - mx)
            total += scores[e]
        for e in range(E):
            scores[e] = scores[e] / total
    for e in range(E):
        taken[e] = False
    for k in range(a.top_k):
        best = -1
        for e in range(E):
            if not taken[e] and (best < 0 or scores[e] > scores[best]):
                best = e
        taken[best] = True
        a.ids[k] = best
        a.weights[k] = scores[best]
        chosen += scores[best]
    if a.norm:
        for k in range(a.top_k):
            a.weights[k] = a.weights[k] / chosen
    if a.shared:
        a.weights[a.top_k] = (<float>1.0 / (<float>1.0 + expf(-a.shared_logit[0])) if a.shared_logit != NULL
                              else <float>1.0)


cdef void run_moe_linear(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    """Rows [16 c, 16 c + 16) of part `part`'s matrix of chosen expert `slot` against its activation row."""
    cdef const MoeLinearArgs *a = &s.a.moe_linear
    cdef int64_t chunks = div_up(a.N, LINEAR_CHUNK), per_part = a.slots * chunks
    cdef int64_t part = item // per_part, slot = item % per_part // chunks
    cdef int64_t n0 = item % chunks * LINEAR_CHUNK, n1 = min64(n0 + LINEAR_CHUNK, a.N)
    cdef const uint8_t *w = a.experts[part * a.n_experts + a.ids[slot]]  # the expert's rows (or interleaved groups)
    cdef const uint8_t *x = <const uint8_t *> a.x + slot * a.x_stride
    cdef float *y = a.y + slot * a.y_stride + part * a.N + n0
    if a.group_bytes:
        _tbl.gemm_il[a.wtype](a.K, w + (n0 // _tbl.il_rows) * a.group_bytes, a.group_bytes, n1 - n0, x, 0, 1, y,
                              a.N)
    else:
        _tbl.gemm[a.wtype](a.K, w + n0 * a.row_bytes, a.row_bytes, n1 - n0, x, 0, 1, y, a.N)


cdef int64_t chunks_of_moe_linear(const Step *s, int team) noexcept nogil:
    return s.a.moe_linear.parts * s.a.moe_linear.slots * div_up(s.a.moe_linear.N, LINEAR_CHUNK)


cdef void run_moe_combine(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    """y[i] = weights[0] x[0, i] + weights[1] x[1, i] + ... (+ weights[top_k] shared[i]), summed in slot order."""
    cdef const MoeCombineArgs *a = &s.a.moe_combine
    cdef int64_t i0, i1, i, k
    cdef float acc
    chunk(item, a.dim, &i0, &i1)
    for i in range(i0, i1):
        acc = a.weights[0] * a.x[i]
        for k in range(1, a.top_k):
            acc = acc + a.weights[k] * a.x[k * a.dim + i]
        if a.shared != NULL:
            acc = acc + a.weights[a.top_k] * a.shared[i]
        a.y[i] = acc


cdef int64_t chunks_of_moe_combine(const Step *s, int team) noexcept nogil:
    return element_chunks(s.a.moe_combine.dim)


register(STEP_MOE_ROUTE, "moe_route", one_item, run_moe_route)
register(STEP_MOE_LINEAR, "moe_linear", chunks_of_moe_linear, run_moe_linear)
register(STEP_MOE_COMBINE, "moe_combine", chunks_of_moe_combine, run_moe_combine)


# ------------------------------------------------------------- the plan builder's fills
cdef void set_moe_route(Step *s, uintptr_t logits, uintptr_t shared_logit, uintptr_t ids, uintptr_t weights,
                        int64_t n_experts, int64_t top_k, bint sigmoid, bint norm, bint shared) except *:
    if not 1 <= top_k <= n_experts <= MOE_MAX_EXPERTS:
        raise ValueError(f"moe_route: top_k {top_k} of {n_experts} experts (at most {MOE_MAX_EXPERTS})")
    s.a.moe_route.logits, s.a.moe_route.ids = <const float *> ptr(logits), <int64_t *> ptr(ids)
    s.a.moe_route.shared_logit, s.a.moe_route.weights = <const float *> ptr(shared_logit), <float *> ptr(weights)
    s.a.moe_route.n_experts, s.a.moe_route.top_k = n_experts, top_k
    s.a.moe_route.sigmoid, s.a.moe_route.norm, s.a.moe_route.shared = sigmoid, norm, shared


cdef void set_moe_linear(Step *s, uintptr_t x, uintptr_t ids, uintptr_t experts, uintptr_t y, int64_t K, int64_t N,
                         int64_t row_bytes, int64_t group_bytes, int64_t x_stride, int64_t y_stride, int64_t slots,
                         int64_t parts, int64_t n_experts, int wtype) except *:
    if parts not in (1, 2) or n_experts < 1:
        raise ValueError(f"moe_linear: {parts} parts of {n_experts} experts")
    if not 0 <= wtype < VX_NTYPES or (group_bytes and (_tbl.gemm_il[wtype] == NULL or LINEAR_CHUNK % _tbl.il_rows)):
        raise ValueError(f"moe_linear: the {_tbl.name.decode()} tier has no kernel for weight type {wtype}")
    s.a.moe_linear.x, s.a.moe_linear.ids = ptr(x), <const int64_t *> ptr(ids)
    s.a.moe_linear.experts, s.a.moe_linear.y = <const uint8_t *const *> ptr(experts), <float *> ptr(y)
    s.a.moe_linear.K, s.a.moe_linear.N, s.a.moe_linear.row_bytes = K, N, row_bytes
    s.a.moe_linear.group_bytes, s.a.moe_linear.x_stride, s.a.moe_linear.y_stride = group_bytes, x_stride, y_stride
    s.a.moe_linear.slots, s.a.moe_linear.wtype = slots, wtype
    s.a.moe_linear.parts, s.a.moe_linear.n_experts = parts, n_experts


cdef void set_moe_combine(Step *s, uintptr_t x, uintptr_t weights, uintptr_t shared, uintptr_t y, int64_t dim,
                          int64_t top_k):
    s.a.moe_combine.x, s.a.moe_combine.weights = <const float *> ptr(x), <const float *> ptr(weights)
    s.a.moe_combine.shared = <const float *> ptr(shared)
    s.a.moe_combine.y, s.a.moe_combine.dim, s.a.moe_combine.top_k = <float *> ptr(y), dim, top_k


def moe_route(const float[:, ::1] logits, int64_t[:, ::1] ids, float[:, ::1] weights, bint sigmoid, bint norm,
              shared_logits=None):
    """ids (rows, top_k), weights (rows, top_k) = each row's chosen experts and their weights, as a MOE_ROUTE
    step computes them (the per-op executor's routing gives a token step's bits); weights (rows, top_k + 1)
    also gets each row's shared expert weight: sigmoid of shared_logits (rows, 1), or 1 where that is None."""
    cdef Step s
    cdef int64_t r, top_k = ids.shape[1]
    cdef bint shared = weights.shape[1] == top_k + 1
    cdef const float[:, ::1] gate = shared_logits
    if (ids.shape[0] != logits.shape[0] or weights.shape[0] != logits.shape[0] or not (shared or weights.shape[1] == top_k)
            or (gate is not None and (not shared or gate.shape[0] != logits.shape[0] or gate.shape[1] != 1))):
        raise ValueError("moe_route: logits, ids, weights (and shared_logits) need one row per token, top_k "
                         "columns (weights: top_k + 1 with a shared expert) and one shared logit per row")
    memset(&s, 0, sizeof(s))
    for r in range(logits.shape[0]):
        set_moe_route(&s, <uintptr_t> &logits[r, 0], <uintptr_t> &gate[r, 0] if gate is not None else 0,
                      <uintptr_t> &ids[r, 0], <uintptr_t> &weights[r, 0], logits.shape[1], top_k, sigmoid, norm, shared)
        run_moe_route(&s, NULL, 0, 1, 0)
