# Step kinds: for each, its typed arguments, how many work items it has on a team of T threads,
# and how one item runs. A step's arguments start with its tensor operands — three inputs (NULL
# when unused) then the output — so that a plan can re-aim an operand (StepPlan.point) whatever
# the kind; sizes and parameters follow. Every output element is computed by one thread in a
# fixed order, so results do not depend on the team.
from libc.stdint cimport int16_t, uint8_t
from volvox._kernels.vx cimport VX_F16, vx_act_row_bytes, vx_attn_shape, vx_rope_yarn

cdef enum:
    TEAM_MAX = 64        # threads a plan's work is split among (a larger team is capped to it)
    GLOBAL_AVG_CHANNELS = 256  # channels per work item of a global average pool
    ELEM_CHUNK = 4096    # elements per work item of the elementwise steps
    COPY_BYTES = 65536   # destination bytes per work item of a copy (whole rows, at least one)
    LINEAR_CHUNK = 16    # weight rows per work item of a matrix-vector product
    CONV_PIXELS = 64     # output pixels per work item of an im2col conv (the most a step takes)
    SGEMM_PANEL = 32     # weight rows per packed panel of the f32 GEMM


cdef struct RunInput:
    # what changes from one forward pass to the next: the token, its position and the KV cache
    int64_t token, pos
    int64_t capacity              # positions each cache array holds
    float *const *k_cache         # per layer: (n_kv_heads, capacity, head_dim)
    float *const *v_cache


cdef struct Operands:
    # the first fields of every kind's arguments
    const void *in0
    const void *in1
    const void *in2
    void *out


cdef struct Pointwise:
    # the 1x1 stride-1 unpadded conv a DWPW / QDWPW step runs on each depthwise output row, or
    # (EXDWPW) before it
    const void *packed           # weights: f32 sgemm_pack, int8 qgemm_pack of (cout, C)
    const float *bias            # f32: (cout,) or NULL
    const int32_t *wsum          # int8: the row sums, NULL once the zero point is in rq.bias
    vx_requant rq                # int8 requantization
    int64_t cout                 # output channels
    int32_t act                  # FN_NONE, FN_RELU or FN_RELU6 (f32)


cdef struct Window:
    # a window step's geometry (convs, pools): the input / output shape, int8 requantization
    # (pools: rq.lo / rq.hi clamp only), output channels, im2col row length and scratch
    vx_conv_shape s
    vx_requant rq
    int64_t cout                 # output channels
    int64_t ldc                  # im2col row: K floats (f32) or K4 bytes (int8); 0: 1x1 direct;
                                 # DWPW / QDWPW / EXDWPW: depthwise rows per band
    int64_t per_thread           # scratch elements per thread
    int64_t cparts               # output-channel parts per pixel block, row or band (<= 1: one)
    int64_t pixels               # CONV_F32 / QCONV: output pixels per block (0: CONV_PIXELS)
    int64_t band                 # CONV_F32: output rows per item, convolved from their padded input
                                 # rows (conv_band_f32; per_thread: that copy's floats); 0: pixel blocks
    int64_t ldx                  # floats from one input pixel to the next, 0: c (CONV_F32 1x1 direct,
                                 # DWCONV_F32, DWPW_F32; more: x is a channel slice of a wider tensor)
    int64_t ldy                  # floats from one output pixel to the next, 0: cout (CONV_F32,
                                 # DWPW_F32, MAX_POOL, AVG_POOL; more: y is a channel slice)
    int32_t act                  # FN_NONE, FN_RELU or FN_RELU6 (f32 convs); CONV_F32 / DWCONV_F32 also
                                 # FN_SILU, FN_HARD_SWISH (post_activation)
    const float *residual        # CONV_F32, DWPW_F32, EXDWPW_F32: (n, oh, ow, cout) added to the output,
                                 # then residual_act (a residual add folded into the step: add_residual),
                                 # or NULL
    int32_t residual_act         # FN_NONE, FN_RELU or FN_RELU6: the folded add's activation
    Pointwise pw                 # DWPW / QDWPW / EXDWPW: the 1x1 conv after the depthwise one
    Pointwise ex                 # EXDWPW: the 1x1 conv before it (cout: the depthwise conv's channels)


# ---------------------------------------------------------------------------- arguments
cdef struct EmbedArgs:
    const uint8_t *table         # (vocab, row_bytes) rows
    const int64_t *ids           # (rows,) or NULL: the run's token (or position, by_position)
    const void *unused
    float *y                     # (rows, dim)
    int64_t dim, row_bytes, vocab, rows
    int32_t wtype
    bint by_position


cdef struct NormArgs:            # rms_norm, layer_norm
    const float *x               # (rows, dim)
    const float *weight          # (dim,)
    const float *bias            # (dim,) or NULL (layer_norm)
    float *y                     # (rows, dim)
    int64_t dim, rows
    float eps


cdef struct QuantizeActArgs:
    const float *x               # (rows, K)
    const void *unused1
    const void *unused2
    uint8_t *act                 # (rows, act_stride) act rows for weights of wtype
    int64_t K, rows, act_stride
    int32_t wtype


cdef struct LinearArgs:
    const void *x                # (rows, x_stride bytes): float32 rows, or the act rows of a QUANTIZE_ACT step
    const uint8_t *w             # (N, row_bytes) weight rows, or interleaved (ceil(N / il_rows), group_bytes)
    const float *bias            # (N,) or NULL
    float *y                     # (rows, N)
    int64_t K, N, row_bytes, rows, x_stride
    int64_t group_bytes          # > 0: w is interleaved (vx.pxd), groups of il_rows (a divisor of LINEAR_CHUNK) rows
    int32_t wtype


cdef struct SgemmArgs:           # f32 / f16 weights times many rows: 32-row panels packed as they go
    const float *x               # (rows, K)
    const uint8_t *w             # (N, row_bytes) f32 or f16 weight rows
    const void *unused
    float *y                     # (rows, N)
    float *scratch               # (team, per_thread) panel (+ widened f16 rows)
    int64_t K, N, row_bytes, rows, per_thread
    bint f16


cdef struct RopeArgs:
    const float *x               # (rows, n_heads * head_dim)
    const int64_t *positions     # (rows,) or NULL: the run's position
    const void *unused
    float *y                     # (rows, n_heads * head_dim); may be x
    int64_t n_heads, head_dim, rope_dim, rows
    float base, freq_scale
    bint interleaved
    bint scaled                  # whether yarn applies (ggml's rope_yarn angles)
    vx_rope_yarn yarn            # yarn.freq_factors: (rope_dim/2,) or NULL


cdef struct KVStoreArgs:
    const float *k               # (n_kv_heads * head_dim,) the new position's key
    const float *v               # (n_kv_heads * head_dim,)
    const void *unused1
    void *unused2
    int64_t n_kv_heads, head_dim, layer


cdef struct AttentionArgs:
    const float *q               # (seq, n_heads * head_dim)
    const float *k_cache         # (n_kv_heads, capacity, head_dim), or NULL: the run's layer cache
    const float *v_cache
    float *y                     # (seq, n_heads * head_dim)
    float *scratch               # (team, scratch_floats)
    int64_t n_heads, n_kv_heads, head_dim, window, layer, scratch_floats
    int64_t seq                  # query rows
    int64_t start                # the first row's position, or -1: the run's position
    int64_t capacity             # 0: the run's cache capacity
    int64_t keys                 # > 0: not causal, every row sees keys 0..keys-1; 0: causal
    float scale
    float softcap                # > 0: soft-capped scores (vx_attn_shape)


cdef struct GluArgs:             # swiglu: y = silu(gate) * up; silu: y = silu(x)
    const float *x               # (rows, x_stride): [gate | up] (gated) or x
    const void *unused1
    const void *unused2
    float *y                     # (rows, y_stride); may be x (silu)
    int64_t F, rows, x_stride, y_stride
    bint gated


cdef struct ElementArgs:         # gelu, unary, relu, quantize_i8, dequantize_i8
    const void *x                # (count,)
    const void *unused1
    const void *unused2
    void *y                      # (count,); may be x
    int64_t count
    int32_t fn                   # unary: an FN_* code; gelu: 1 for the tanh approximation; (de)quantize: the zero point
    float alpha, beta            # hard_sigmoid's; (de)quantize: scale


cdef struct BinaryArgs:
    const float *a               # (count,)
    const float *b               # (count,), or broadcast: b[(i / b_div) % b_count]
    const void *unused
    float *y                     # (count,)
    int64_t count, b_count, b_div   # b_count 0: b[i]; per channel: b_div 1; per row: b_div the row length
    int32_t op                   # a BIN_* code
    int32_t act                  # FN_NONE, FN_RELU or FN_RELU6 applied after (numpy's maximum, then min with 6)


cdef struct CopyRowsArgs:        # concat, channel padding
    const uint8_t *src           # (rows, src_stride)
    const void *unused1
    const void *unused2
    uint8_t *dst                 # (rows, dst_stride)
    int64_t rows, row_bytes, src_stride, dst_stride, dst_offset
    bint zero_rest               # zero the rest of each destination row


cdef struct GatherArgs:          # transpose, slice: a strided view's contiguous copy
    const float *x               # the view's first element
    const int64_t *view          # (1 + 2 ndim,): ndim, shape, element strides
    const void *unused
    float *y                     # (rows, shape[ndim - 1])
    int64_t rows


cdef struct WindowArgs:          # convs, pools (geometry and the rest: the step's Window)
    const void *x                # (n, h, w, c)
    const void *w                # packed weights (convs); f32 depthwise: (kh*kw, C); int8: int16 taps
    const void *extra            # f32 bias or NULL; QCONV: int32 row sums or NULL
    void *y                      # (n, oh, ow, cout)
    void *scratch                # (team, per_thread)
    int64_t in_channels          # EXDWPW: the 1x1 expand conv's input channels
    bint include_pad             # AVG_POOL


cdef struct SoftmaxI8Args:
    const int8_t *x              # (rows, n)
    const float *table           # (256,) exp table
    const void *unused
    int8_t *y                    # (rows, n)
    int64_t rows, n
    int32_t zp_out
    float out_scale


cdef struct QBinaryArgs:          # qadd, qmul (engine/quantized_ops.pxi)
    const int8_t *a              # (count,)
    const int8_t *b              # (count,), or broadcast: b[(i / b_div) % b_count]
    const void *unused
    int8_t *y                    # (count,)
    int64_t count, b_count, b_div
    int32_t op                   # QBIN_ADD or QBIN_MUL
    int32_t zp[3]                # zero points of a, b, y
    int32_t rq[6]                # (multiplier, shift) of a, b, y (QBIN_ADD); of the product (QBIN_MUL)
    int32_t lo, hi               # the fused activation's clamp


cdef struct QLookupArgs:          # qlookup (engine/quantized_ops.pxi)
    const int8_t *x              # (count,)
    const int8_t *table          # (256,)
    const void *unused
    int8_t *y                    # (count,)
    int64_t count


cdef struct GlobalAvgArgs:
    const float *x               # (N, HW, C)
    const void *unused1
    const void *unused2
    float *y                     # (N, C)
    int64_t N, HW, C


cdef struct MoeRouteArgs:        # a token's router logits -> its top_k experts and their weights (engine/moe.pxi)
    const float *logits          # (n_experts,)
    const float *shared_logit    # (1,) the shared expert's gate logit, or NULL
    const void *unused
    int64_t *ids                 # (top_k,) the chosen experts, best first
    float *weights               # (top_k,) their weights [+ the shared expert's: sigmoid(shared_logit), or 1]
    int64_t n_experts, top_k
    bint sigmoid, norm, shared


cdef struct MoeLinearArgs:       # y[slot, part N ..] = x[slot] @ W_part[ids[slot]].T for each chosen expert
    const void *x                # (slots, x_stride bytes): act rows, or float32 rows (f32 / f16 weights)
    const int64_t *ids           # (slots,) each slot's expert: a MOE_ROUTE step's output
    const uint8_t *const *experts  # (parts, n_experts) each expert's weight rows, or its interleaved groups
    float *y                     # (slots, y_stride floats)
    int64_t K, N, row_bytes, group_bytes, x_stride, y_stride, slots
    int64_t parts, n_experts     # parts: 2 runs gate and up in one step, into [gate | up] rows
    int32_t wtype


cdef struct MoeCombineArgs:      # y = sum over slots of weights[slot] * x[slot] (+ weights[top_k] * shared)
    const float *x               # (top_k, dim)
    const float *weights         # (top_k,) [+ 1]
    const float *shared          # (dim,) the shared expert's output, or NULL
    float *y                     # (dim,)
    int64_t dim, top_k


cdef union StepArgs:
    Operands ops
    EmbedArgs embed
    NormArgs norm
    QuantizeActArgs quantize_act
    LinearArgs linear
    SgemmArgs sgemm
    RopeArgs rope
    KVStoreArgs kv_store
    AttentionArgs attention
    GluArgs glu
    ElementArgs elem
    BinaryArgs binary
    CopyRowsArgs copy
    GatherArgs gather
    WindowArgs win
    SoftmaxI8Args softmax_i8
    QBinaryArgs qbinary
    QLookupArgs qlookup
    GlobalAvgArgs global_avg
    MoeRouteArgs moe_route
    MoeLinearArgs moe_linear
    MoeCombineArgs moe_combine


cdef struct Step:
    int32_t kind                 # StepKind
    const Window *w              # window steps: their geometry (kept by the plan)
    StepArgs a


cpdef enum StepKind:
    STEP_EMBED = 0
    STEP_RMS_NORM
    STEP_LAYER_NORM
    STEP_QUANTIZE_ACT
    STEP_LINEAR
    STEP_SGEMM
    STEP_ROPE
    STEP_KV_STORE
    STEP_ATTENTION
    STEP_GLU
    STEP_GELU
    STEP_UNARY
    STEP_BINARY
    STEP_QUANTIZE_I8
    STEP_DEQUANTIZE_I8
    STEP_COPY_ROWS
    STEP_GATHER
    STEP_CONV_F32
    STEP_DWCONV_F32
    STEP_DWPW_F32
    STEP_EXDWPW_F32
    STEP_QCONV
    STEP_QDWCONV
    STEP_QDWPW
    STEP_QAVG_POOL
    STEP_MAX_POOL
    STEP_AVG_POOL
    STEP_QSOFTMAX
    STEP_GLOBAL_AVG
    STEP_MOE_ROUTE
    STEP_MOE_LINEAR
    STEP_MOE_COMBINE
    STEP_QBINARY
    STEP_QMAX_POOL
    STEP_QLOOKUP
    STEP_NKINDS


ctypedef int64_t (*items_fn)(const Step *s, int team) noexcept nogil
ctypedef void (*run_fn)(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil

cdef struct KindInfo:
    const char *name
    items_fn items               # work items of a step on a team of `team` threads
    run_fn run                   # run one item on thread `me` of the team


# ------------------------------------------------------------------------- helpers
cdef inline int64_t div_up(int64_t a, int64_t b) noexcept nogil:
    return (a + b - 1) // b


cdef inline int64_t min64(int64_t a, int64_t b) noexcept nogil:
    return a if a < b else b


cdef inline int64_t one_item(const Step *s, int team) noexcept nogil:
    return 1


cdef inline int64_t element_chunks(int64_t count) noexcept nogil:
    return div_up(count, ELEM_CHUNK) if count > 0 else 1


cdef inline void chunk(int64_t item, int64_t count, int64_t *i0, int64_t *i1) noexcept nogil:
    """Elements [i0, i1) of work item `item` of an elementwise step over `count`."""
    i0[0] = item * ELEM_CHUNK
    i1[0] = min64(i0[0] + ELEM_CHUNK, count)


cdef inline int64_t conv_parts(const Window *w, int team) noexcept nogil:
    """Output-channel parts per pixel block (or row band) of a conv step run by a team of `team`
    threads (one on a one-thread team: nothing to balance)."""
    return w.cparts if w.cparts > 1 and team > 1 else 1


cdef inline void conv_part(const Window *w, int team, int64_t cout, int64_t part, int64_t *c0, int64_t *c1) noexcept nogil:
    """Part `part`'s channels [c0, c1) of cout: whole 32-channel panels, the last part the rest."""
    cdef int64_t parts = conv_parts(w, team), panels = div_up(cout, 32), per = div_up(panels, parts)
    c0[0] = min64(part * per * 32, cout)
    c1[0] = min64((part + 1) * per * 32, cout)


cdef inline int64_t conv_pixels(const Window *w) noexcept nogil:
    """Output pixels per block of a CONV_F32 / QCONV step."""
    return w.pixels if w.pixels > 0 and w.pixels < CONV_PIXELS else CONV_PIXELS


cdef inline vx_requant rq_from(const vx_requant *rq, int64_t c0) noexcept nogil:
    """rq for its channels c0.. (a part of a conv step's output channels)."""
    cdef vx_requant r = rq[0]
    r.bias = r.bias + c0 if r.bias != NULL else NULL
    r.mult += c0
    r.shift += c0
    return r


cdef inline void apply_act(int act, float *y, int64_t i0, int64_t i1) noexcept nogil:
    """A fused ReLU / ReLU6 over y[i0:i1], just written (numpy's maximum, then min with 6; NaN stays)."""
    cdef int64_t i
    if act != FN_NONE:
        for i in range(i0, i1):
            y[i] = np_maximum(y[i], <float>0.0)
    if act == FN_RELU6:
        for i in range(i0, i1):
            y[i] = <float>6.0 if y[i] > <float>6.0 else y[i]


# ------------------------------------------------------------------ sequence steps
cdef void run_embed(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    cdef const EmbedArgs *a = &s.a.embed
    cdef int64_t row = a.ids[item] if a.ids != NULL else (inp.pos if a.by_position else inp.token)
    _tbl.dequant[a.wtype](a.dim, a.table + row * a.row_bytes, a.y + item * a.dim)


cdef int64_t rows_of_embed(const Step *s, int team) noexcept nogil:
    return s.a.embed.rows


cdef void run_rms_norm(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    cdef const NormArgs *a = &s.a.norm
    _tbl.rms_norm(a.dim, a.x + item * a.dim, a.weight, a.eps, a.y + item * a.dim)


cdef void run_layer_norm(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    cdef const NormArgs *a = &s.a.norm
    layer_norm_row(a.dim, a.x + item * a.dim, a.weight, a.bias, a.eps, a.y + item * a.dim)


cdef int64_t rows_of_norm(const Step *s, int team) noexcept nogil:
    return s.a.norm.rows


cdef void run_quantize_act(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    cdef const QuantizeActArgs *a = &s.a.quantize_act
    _tbl.quantize[a.wtype](a.K, a.x + item * a.K, a.act + item * a.act_stride)


cdef int64_t rows_of_quantize_act(const Step *s, int team) noexcept nogil:
    return s.a.quantize_act.rows


cdef void run_linear(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    """Weight rows [16 item, 16 item + 16) (interleaved: their groups) against every activation row, then
    the bias."""
    cdef const LinearArgs *a = &s.a.linear
    cdef int64_t n0 = item * LINEAR_CHUNK, n1 = min64(n0 + LINEAR_CHUNK, a.N), i, r
    if a.group_bytes:
        _tbl.gemm_il[a.wtype](a.K, a.w + (n0 // _tbl.il_rows) * a.group_bytes, a.group_bytes, n1 - n0, a.x,
                              a.x_stride, a.rows, a.y + n0, a.N)
    else:
        _tbl.gemm[a.wtype](a.K, a.w + n0 * a.row_bytes, a.row_bytes, n1 - n0, a.x, a.x_stride, a.rows, a.y + n0, a.N)
    cdef float *y = a.y                                        # (a local: y's stores alias *a)
    if a.bias != NULL:
        for i in range(a.rows):
            for r in range(n0, n1):
                y[i * a.N + r] += a.bias[r]


cdef int64_t chunks_of_linear(const Step *s, int team) noexcept nogil:
    return div_up(s.a.linear.N, LINEAR_CHUNK)


cdef void run_sgemm(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    """Panel `item` (weight rows 32 item ..): packed into the thread's scratch (f16: widened into its
    second half first, exactly), then y[:, 32 item ..] = x @ those rows.T."""
    cdef const SgemmArgs *a = &s.a.sgemm
    cdef int64_t n0 = SGEMM_PANEL * item, nn = min64(SGEMM_PANEL, a.N - n0), r
    cdef float *scratch = a.scratch + me * a.per_thread      # (32, K) panel [+ (32, K) widened rows]
    cdef const uint8_t *rows = a.w + n0 * a.row_bytes
    cdef int64_t stride = a.row_bytes
    if a.f16:
        for r in range(nn):
            _tbl.dequant[VX_F16](a.K, a.w + (n0 + r) * a.row_bytes, scratch + SGEMM_PANEL * a.K + r * a.K)
        rows = <const uint8_t *> (scratch + SGEMM_PANEL * a.K)
        stride = 4 * a.K
    _tbl.conv.sgemm_pack(a.K, rows, stride, nn, scratch)
    _tbl.conv.sgemm(a.K, scratch, nn, a.x, a.K, a.rows, a.y + n0, a.N, NULL, 0)


cdef int64_t panels_of_sgemm(const Step *s, int team) noexcept nogil:
    return div_up(s.a.sgemm.N, SGEMM_PANEL)


cdef void run_rope(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    cdef const RopeArgs *a = &s.a.rope
    cdef int64_t row = a.n_heads * a.head_dim
    cdef int64_t pos = a.positions[item] if a.positions != NULL else inp.pos
    _tbl.rope(a.n_heads, a.head_dim, a.rope_dim, a.interleaved, pos, a.base, a.freq_scale,
              &a.yarn if a.scaled else NULL, a.x + item * row, a.y + item * row)


cdef int64_t rows_of_rope(const Step *s, int team) noexcept nogil:
    return s.a.rope.rows


cdef void run_kv_store(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    """The new position's key and value rows into the layer's cache at the run's position."""
    cdef const KVStoreArgs *a = &s.a.kv_store
    cdef float *kc = inp.k_cache[a.layer]                      # (n_kv, capacity, hd)
    cdef float *vc = inp.v_cache[a.layer]
    cdef int64_t h, hd = a.head_dim
    for h in range(a.n_kv_heads):
        memcpy(kc + (h * inp.capacity + inp.pos) * hd, a.k + h * hd, <size_t>hd * sizeof(float))
        memcpy(vc + (h * inp.capacity + inp.pos) * hd, a.v + h * hd, <size_t>hd * sizeof(float))


cdef void run_attention(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    """One (head, query row) of causal GQA attention over a KV cache, or one kv head's query heads for a
    single row (the tier's kernel)."""
    cdef const AttentionArgs *a = &s.a.attention
    cdef vx_attn_shape shape
    cdef int64_t capacity = a.capacity if a.capacity > 0 else inp.capacity
    shape.seq = a.seq
    shape.start = a.start if a.start >= 0 else inp.pos
    shape.n_heads = a.n_heads
    shape.n_kv_heads = a.n_kv_heads
    shape.head_dim = a.head_dim
    shape.kv_head_stride = capacity * a.head_dim
    shape.window = a.window
    shape.keys = a.keys
    shape.scale = a.scale
    shape.softcap = a.softcap
    cdef const float *kc = a.k_cache if a.k_cache != NULL else inp.k_cache[a.layer]
    cdef const float *vc = a.v_cache if a.v_cache != NULL else inp.v_cache[a.layer]
    _tbl.attention(&shape, a.q, kc, vc, item, a.scratch + me * a.scratch_floats, a.y)


cdef int64_t items_of_attention(const Step *s, int team) noexcept nogil:
    """(head, query row) pairs; one query row: its kv heads (vx.pxd)."""
    return s.a.attention.n_kv_heads if s.a.attention.seq == 1 else s.a.attention.n_heads * s.a.attention.seq


cdef void run_glu(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    cdef const GluArgs *a = &s.a.glu
    cdef const float *x = a.x + item * a.x_stride
    _tbl.swiglu(a.F, x, x + a.F if a.gated else NULL, a.y + item * a.y_stride)


cdef int64_t rows_of_glu(const Step *s, int team) noexcept nogil:
    return s.a.glu.rows


# ----------------------------------------------------------------- elementwise steps
cdef int64_t chunks_of_elements(const Step *s, int team) noexcept nogil:
    return element_chunks(s.a.elem.count)


cdef void run_gelu(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    cdef const ElementArgs *a = &s.a.elem
    cdef int64_t i0, i1
    chunk(item, a.count, &i0, &i1)
    gelu_row(i1 - i0, <const float *> a.x + i0, a.fn != 0, <float *> a.y + i0)


cdef void run_unary(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    cdef const ElementArgs *a = &s.a.elem
    cdef int64_t i0, i1
    chunk(item, a.count, &i0, &i1)
    if a.fn == FN_HARD_SWISH:  # the tier's vectors (numpy's bits, as unary_run's functions)
        _tbl.conv.hard_swish_f32(i1 - i0, <const float *> a.x + i0, <float *> a.y + i0)
    else:
        unary_run(a.fn, i1 - i0, <const float *> a.x + i0, a.alpha, a.beta, <float *> a.y + i0)


cdef void run_quantize_i8(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    cdef const ElementArgs *a = &s.a.elem
    cdef int64_t i0, i1
    chunk(item, a.count, &i0, &i1)
    _tbl.conv.quantize_i8(i1 - i0, <const float *> a.x + i0, a.alpha, a.fn, <int8_t *> a.y + i0)


cdef void run_dequantize_i8(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    cdef const ElementArgs *a = &s.a.elem
    cdef int64_t i0, i1
    chunk(item, a.count, &i0, &i1)
    dequantize_i8_run(i1 - i0, <const int8_t *> a.x + i0, a.alpha, a.fn, <float *> a.y + i0)


cdef void run_binary(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    cdef const BinaryArgs *a = &s.a.binary
    cdef int64_t i0, i1
    chunk(item, a.count, &i0, &i1)
    binary_run(a.op, i0, i1, a.a, a.b, a.b_count, a.b_div, a.y)
    apply_act(a.act, a.y, i0, i1)                                # over the chunk just written (in L1)


cdef int64_t chunks_of_binary(const Step *s, int team) noexcept nogil:
    return element_chunks(s.a.binary.count)


cdef inline int64_t copy_rows_per_item(const CopyRowsArgs *a) noexcept nogil:
    """Rows per work item of a copy: about COPY_BYTES of destination."""
    return 1 if a.dst_stride >= COPY_BYTES else COPY_BYTES // (a.dst_stride if a.dst_stride > 0 else 1)


cdef void run_copy_rows(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    """Byte rows of src into dst at a column offset (concat, channel padding)."""
    cdef const CopyRowsArgs *a = &s.a.copy
    cdef int64_t per = copy_rows_per_item(a), r0 = item * per, r1 = min64(r0 + per, a.rows), r
    cdef int64_t tail = a.dst_stride - a.dst_offset - a.row_bytes  # bytes after the copied run
    cdef uint8_t *row
    for r in range(r0, r1):
        row = a.dst + r * a.dst_stride
        if a.zero_rest:
            memset(row, 0, <size_t>a.dst_offset)
            memset(row + a.dst_offset + a.row_bytes, 0, <size_t>tail)
        memcpy(row + a.dst_offset, a.src + r * a.src_stride, <size_t>a.row_bytes)


cdef int64_t items_of_copy_rows(const Step *s, int team) noexcept nogil:
    return div_up(s.a.copy.rows, copy_rows_per_item(&s.a.copy))


cdef inline int64_t gather_rows_per_item(const GatherArgs *a) noexcept nogil:
    """Output rows per work item of a gather: about COPY_BYTES of them."""
    cdef int64_t last = a.view[a.view[0]] * <int64_t>sizeof(float)
    return 1 if last >= COPY_BYTES else COPY_BYTES // (last if last > 0 else 1)


cdef void run_gather(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    cdef const GatherArgs *a = &s.a.gather
    cdef int64_t per = gather_rows_per_item(a), r0 = item * per
    gather_rows(a.view, a.x, r0, min64(r0 + per, a.rows), a.y)


cdef int64_t items_of_gather(const Step *s, int team) noexcept nogil:
    return div_up(s.a.gather.rows, gather_rows_per_item(&s.a.gather))


# --------------------------------------------------------------------- window steps
cdef int64_t blocks_of_conv(const Step *s, int team) noexcept nogil:
    """CONV_F32 / QCONV: blocks of output pixels (CONV_F32 with a band: bands of output rows), each
    split into output-channel parts."""
    cdef const Window *w = s.w
    if w.band > 0:
        return w.s.n * div_up(w.s.oh, w.band) * conv_parts(w, team)
    return div_up(w.s.n * w.s.oh * w.s.ow, conv_pixels(w)) * conv_parts(w, team)


cdef int64_t rows_of_window(const Step *s, int team) noexcept nogil:
    """Depthwise convs and pools: output rows."""
    return s.w.s.n * s.w.s.oh


cdef inline int64_t x_pixel(const Window *w) noexcept nogil:
    """Floats from one input pixel of a window step to the next (w.ldx, or the input's channels)."""
    return w.ldx if w.ldx != 0 else w.s.c


cdef inline int64_t y_pixel(const Window *w, int64_t cout) noexcept nogil:
    """Floats from one output pixel of a window step to the next (w.ldy, or its cout channels)."""
    return w.ldy if w.ldy != 0 else cout


cdef inline int kernel_act(int act) noexcept nogil:
    """The activation a conv kernel applies in its store for a step's act (post_activation's: none)."""
    return FN_NONE if act == FN_SILU or act == FN_HARD_SWISH else act


cdef void post_activation(int act, int64_t rows, int64_t cols, float *y, int64_t ldy) noexcept nogil:
    """y (rows x cols, ldy apart) = act(y) in place, while the block a conv step just wrote is in
    cache: FN_SILU with the glu step's kernel, FN_HARD_SWISH with the unary step's (the tier's
    hard_swish_f32: the bits of the standalone silu / hard_swish step); else nothing."""
    cdef int64_t r
    if act == FN_SILU:
        for r in range(rows):
            _tbl.swiglu(cols, y + r * ldy, NULL, y + r * ldy)
    elif act == FN_HARD_SWISH:
        for r in range(rows):
            _tbl.conv.hard_swish_f32(cols, y + r * ldy, y + r * ldy)


cdef void add_residual(int act, int64_t rows, int64_t cols, const float *r, float *y, int64_t ld) noexcept nogil:
    """y = act(y + r) in place (rows x cols, both ld apart), while the block a conv step just wrote is
    in cache: the binary step's sum and activation, so a folded residual add keeps its bits."""
    cdef int64_t i
    for i in range(rows):
        binary_run(BIN_ADD, 0, cols, y + i * ld, r + i * ld, 0, 1, y + i * ld)
        apply_act(act, y + i * ld, 0, cols)


cdef void run_conv_f32(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    """A block of output pixels (a band of output rows, im2col rows, or a 1x1 conv's input rows)
    times a part of the packed weights' output channels; a 1x1 conv of one output pixel in all
    (whatever the team, so its sums do not depend on it) through the one-row GEMM."""
    cdef const WindowArgs *a = &s.a.win
    cdef const Window *w = s.w
    cdef int64_t P = w.s.n * w.s.oh * w.s.ow, pixels = conv_pixels(w), p0 = item // conv_parts(w, team) * pixels
    cdef int64_t np_ = min64(P - p0, pixels), KK = w.s.kh * w.s.kw * w.s.c, c0, c1
    cdef int64_t bands = div_up(w.s.oh, w.band) if w.band > 0 else 1, b = 0, r0 = 0, rows = 0
    if w.band > 0:                                              # band item // parts: image b, rows r0..
        b = item // conv_parts(w, team) // bands
        r0 = item // conv_parts(w, team) % bands * w.band
        p0 = (b * w.s.oh + r0) * w.s.ow
        rows = min64(w.band, w.s.oh - r0)
        np_ = rows * w.s.ow
    conv_part(w, team, w.cout, item % conv_parts(w, team), &c0, &c1)
    cdef const float *bias = <const float *> a.extra
    cdef const float *packed = <const float *> a.w + c0 * KK
    cdef int64_t ldy = y_pixel(w, w.cout)
    cdef float *y = <float *> a.y + p0 * ldy + c0
    if w.band > 0:
        _tbl.conv.conv_band_f32(&w.s, <const float *> a.x, b, r0, rows, packed, c1 - c0,
                                bias + c0 if bias != NULL else NULL, kernel_act(w.act),
                                <float *> a.scratch + me * w.per_thread, y, ldy)
    elif w.ldc != 0:
        _tbl.conv.conv_f32(&w.s, <const float *> a.x, p0, np_, packed, c1 - c0, bias + c0 if bias != NULL else NULL,
                           kernel_act(w.act), <float *> a.scratch + me * w.per_thread, y, ldy)
    elif P == 1:                                                # 1x1 direct on one pixel (an SE block's)
        _tbl.conv.sgemv(KK, packed, c1 - c0, <const float *> a.x, bias + c0 if bias != NULL else NULL,
                        kernel_act(w.act), y)
    else:                                                       # 1x1 direct: the input rows
        _tbl.conv.sgemm(KK, packed, c1 - c0, <const float *> a.x + p0 * x_pixel(w), x_pixel(w), np_, y, ldy,
                        bias + c0 if bias != NULL else NULL, kernel_act(w.act))
    post_activation(w.act, np_, c1 - c0, y, ldy)
    if w.residual != NULL:
        add_residual(w.residual_act, np_, c1 - c0, w.residual + p0 * w.cout + c0, y, w.cout)


cdef void run_dwconv_f32(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    cdef const WindowArgs *a = &s.a.win
    cdef const vx_conv_shape *g = &s.w.s
    cdef float *y = <float *> a.y + item * g.ow * g.c                # (ow, c): output row `item`
    _tbl.conv.dwconv_f32(g, <const float *> a.x, x_pixel(s.w), <const float *> a.w, <const float *> a.extra,
                         kernel_act(s.w.act), item, y)
    post_activation(s.w.act, g.ow, g.c, y, g.c)


cdef void run_dwpw_f32(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    """A depthwise output row into the thread's scratch, then straight through the 1x1 conv (a part
    of its output channels) into its ow output pixels."""
    cdef const WindowArgs *a = &s.a.win
    cdef const Window *w = s.w
    cdef const vx_conv_shape *g = &w.s
    cdef int64_t r = item // conv_parts(w, team), c0, c1      # the depthwise output row; the 1x1's channels
    conv_part(w, team, w.pw.cout, item % conv_parts(w, team), &c0, &c1)
    cdef float *row = <float *> a.scratch + me * w.per_thread  # (ow, C)
    _tbl.conv.dwconv_f32(g, <const float *> a.x, x_pixel(w), <const float *> a.w, <const float *> a.extra, w.act, r,
                         row)
    cdef int64_t ldy = y_pixel(w, w.pw.cout)
    cdef float *y = <float *> a.y + r * g.ow * ldy + c0        # (ow, c1 - c0), ldy apart
    _tbl.conv.sgemm(g.c, <const float *> w.pw.packed + c0 * g.c, c1 - c0, row, g.c, g.ow, y, ldy,
                    w.pw.bias + c0 if w.pw.bias != NULL else NULL, w.pw.act)
    if w.residual != NULL:
        add_residual(w.residual_act, g.ow, c1 - c0, w.residual + r * g.ow * w.pw.cout + c0, y, w.pw.cout)


cdef int64_t items_of_dwpw_f32(const Step *s, int team) noexcept nogil:
    return s.w.s.n * s.w.s.oh * conv_parts(s.w, team)


cdef inline int64_t exdwpw_rows(const Window *w) noexcept nogil:
    """Expanded input rows an EXDWPW band of w.ldc depthwise output rows reads (at most)."""
    return (w.ldc - 1) * w.s.sh + (w.s.kh - 1) * w.s.dh + 1


cdef void run_exdwpw_f32(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    """A band of depthwise output rows of an image: the expanded rows it reads (rows the band before
    shares, again) computed into the thread's scratch by the 1x1 expand conv, then each depthwise
    row and its 1x1 conv as DWPW does."""
    cdef const WindowArgs *a = &s.a.win
    cdef const Window *w = s.w
    cdef const vx_conv_shape *g = &w.s                          # the depthwise conv's, on (n, h, w, C)
    cdef int64_t C = g.c, K = a.in_channels, bands = div_up(g.oh, w.ldc), b = item // bands
    cdef int64_t r0 = item % bands * w.ldc, r1 = min64(r0 + w.ldc, g.oh)
    cdef int64_t first = r0 * g.sh - g.pt, last = (r1 - 1) * g.sh - g.pt + (g.kh - 1) * g.dh
    cdef int64_t lo = first if first > 0 else 0, hi = min64(last + 1, g.h)  # input rows read
    cdef float *rows = <float *> a.scratch + me * w.per_thread  # (hi - lo, w, C)
    cdef float *row = rows + exdwpw_rows(w) * g.w * C           # (ow, C): a depthwise row
    cdef int64_t r, at
    if hi > lo:
        _tbl.conv.sgemm(K, <const float *> w.ex.packed, C, <const float *> a.x + (b * g.h + lo) * g.w * K, K,
                        (hi - lo) * g.w, rows, C, w.ex.bias, w.ex.act)
    cdef vx_conv_shape band = g[0]                              # the depthwise conv on those rows
    band.n = 1
    band.h = hi - lo
    band.oh = r1 - r0
    band.pt = g.pt + lo - r0 * g.sh
    for r in range(r0, r1):
        _tbl.conv.dwconv_f32(&band, rows, C, <const float *> a.w, <const float *> a.extra, w.act, r - r0, row)
        at = (b * g.oh + r) * g.ow * w.pw.cout                   # output row r: (ow, pw.cout)
        _tbl.conv.sgemm(C, <const float *> w.pw.packed, w.pw.cout, row, C, g.ow, <float *> a.y + at, w.pw.cout,
                        w.pw.bias, w.pw.act)
        if w.residual != NULL:
            add_residual(w.residual_act, g.ow, w.pw.cout, w.residual + at, <float *> a.y + at, w.pw.cout)


cdef int64_t bands_of_exdwpw(const Step *s, int team) noexcept nogil:
    return s.w.s.n * div_up(s.w.s.oh, s.w.ldc)


cdef void run_qconv(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    """A block of output pixels as u8 im2col rows (x + 128) times a part of the packed int8 weights'
    output channels, requantized."""
    cdef const WindowArgs *a = &s.a.win
    cdef const Window *w = s.w
    cdef int64_t P = w.s.n * w.s.oh * w.s.ow, pixels = conv_pixels(w), p0 = item // conv_parts(w, team) * pixels
    cdef int64_t np_ = min64(P - p0, pixels), c0, c1
    conv_part(w, team, w.cout, item % conv_parts(w, team), &c0, &c1)
    cdef uint8_t *cols = <uint8_t *> a.scratch + me * w.per_thread   # (np, ldc)
    _tbl.conv.im2col_u8(&w.s, <const int8_t *> a.x, p0, np_, <uint8_t>(w.rq.zp_in + 128), cols, w.ldc)
    cdef vx_requant rq = rq_from(&w.rq, c0)
    cdef const int32_t *wsum = <const int32_t *> a.extra
    _tbl.conv.qgemm(w.ldc, <const int8_t *> a.w + c0 * w.ldc, wsum + c0 if wsum != NULL else NULL, c1 - c0, cols,
                    w.ldc, np_, &rq, <int8_t *> a.y + p0 * w.cout + c0, w.cout)


cdef void run_qdwconv(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    cdef const WindowArgs *a = &s.a.win
    cdef const Window *w = s.w
    _tbl.conv.qdwconv(&w.s, <const int8_t *> a.x, <const int16_t *> a.w, &w.rq, item, 1,
                      <int8_t *> a.y + item * w.s.ow * w.s.c)


cdef void run_qdwpw(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    """A band of w.ldc depthwise output rows requantized into the thread's scratch, offset to u8 and
    multiplied by one int8 GEMM into their output pixels (a part of the 1x1 conv's channels)."""
    cdef const WindowArgs *a = &s.a.win
    cdef const Window *w = s.w
    cdef const vx_conv_shape *g = &w.s
    cdef int64_t r0 = item // conv_parts(w, team) * w.ldc, rows = min64(g.n * g.oh - r0, w.ldc), c0, c1, i
    conv_part(w, team, w.pw.cout, item % conv_parts(w, team), &c0, &c1)
    cdef int8_t *band = <int8_t *> a.scratch + me * w.per_thread   # (rows * ow, C)
    _tbl.conv.qdwconv(g, <const int8_t *> a.x, <const int16_t *> a.w, &w.rq, r0, rows, band)
    cdef uint8_t *u = <uint8_t *> band                         # the GEMM's u8 rows: x + 128
    cdef int64_t nbytes = rows * g.ow * g.c                    # (a local: u's stores alias *g)
    for i in range(nbytes):
        u[i] ^= 0x80
    cdef vx_requant rq = rq_from(&w.pw.rq, c0)
    _tbl.conv.qgemm(g.c, <const int8_t *> w.pw.packed + c0 * g.c, w.pw.wsum + c0 if w.pw.wsum != NULL else NULL,
                    c1 - c0, u, g.c, rows * g.ow, &rq, <int8_t *> a.y + r0 * g.ow * w.pw.cout + c0, w.pw.cout)


cdef int64_t bands_of_qdwpw(const Step *s, int team) noexcept nogil:
    return div_up(s.w.s.n * s.w.s.oh, s.w.ldc) * conv_parts(s.w, team)


cdef void run_qavg_pool(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    qavg_pool_row(&s.w.s, s.w.rq.lo, s.w.rq.hi, <const int8_t *> s.a.win.x, item, <int8_t *> s.a.win.y)


cdef void run_max_pool(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    _tbl.conv.max_pool_f32(&s.w.s, <const float *> s.a.win.x, item, <float *> s.a.win.y, y_pixel(s.w, s.w.s.c))


cdef void run_avg_pool(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    _tbl.conv.avg_pool_f32(&s.w.s, s.a.win.include_pad, <const float *> s.a.win.x, item, <float *> s.a.win.y,
                           y_pixel(s.w, s.w.s.c))


cdef void run_qsoftmax(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    cdef const SoftmaxI8Args *a = &s.a.softmax_i8
    cdef int64_t r
    for r in range(a.rows):
        qsoftmax_row(a.n, a.x + r * a.n, a.table, a.out_scale, a.zp_out, a.y + r * a.n)


cdef void run_qbinary(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    cdef const QBinaryArgs *a = &s.a.qbinary
    cdef int64_t i0, i1
    chunk(item, a.count, &i0, &i1)
    qbinary_run(a.op, i0, i1, a.a, a.b, a.b_count, a.b_div, a.zp, a.rq, a.lo, a.hi, a.y)


cdef int64_t chunks_of_qbinary(const Step *s, int team) noexcept nogil:
    return element_chunks(s.a.qbinary.count)


cdef void run_qlookup(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    cdef const QLookupArgs *a = &s.a.qlookup
    cdef int64_t i0, i1
    chunk(item, a.count, &i0, &i1)
    qlookup_run(i0, i1, a.x, a.table, a.y)


cdef int64_t chunks_of_qlookup(const Step *s, int team) noexcept nogil:
    return element_chunks(s.a.qlookup.count)


cdef void run_qmax_pool(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    qmax_pool_row(&s.w.s, s.w.rq.lo, s.w.rq.hi, <const int8_t *> s.a.win.x, item, <int8_t *> s.a.win.y)


cdef void run_global_avg(const Step *s, const RunInput *inp, int me, int team, int64_t item) noexcept nogil:
    """An image's run of GLOBAL_AVG_CHANNELS channels."""
    cdef const GlobalAvgArgs *a = &s.a.global_avg
    cdef int64_t runs = div_up(a.C, GLOBAL_AVG_CHANNELS), b = item // runs
    cdef int64_t c0 = item % runs * GLOBAL_AVG_CHANNELS
    _tbl.conv.global_avg_f32(a.HW, a.C, c0, min64(c0 + GLOBAL_AVG_CHANNELS, a.C), a.x + b * a.HW * a.C,
                             a.y + b * a.C)


cdef int64_t runs_of_global_avg(const Step *s, int team) noexcept nogil:
    return s.a.global_avg.N * div_up(s.a.global_avg.C, GLOBAL_AVG_CHANNELS)


# --------------------------------------------------------------------- the registry
cdef KindInfo KINDS[<int>STEP_NKINDS]


cdef void register(StepKind kind, const char *name, items_fn items, run_fn run) noexcept:
    KINDS[<int>kind].name = name
    KINDS[<int>kind].items = items
    KINDS[<int>kind].run = run


register(STEP_EMBED, "embed", rows_of_embed, run_embed)
register(STEP_RMS_NORM, "rms_norm", rows_of_norm, run_rms_norm)
register(STEP_LAYER_NORM, "layer_norm", rows_of_norm, run_layer_norm)
register(STEP_QUANTIZE_ACT, "quantize_act", rows_of_quantize_act, run_quantize_act)
register(STEP_LINEAR, "linear", chunks_of_linear, run_linear)
register(STEP_SGEMM, "sgemm", panels_of_sgemm, run_sgemm)
register(STEP_ROPE, "rope", rows_of_rope, run_rope)
register(STEP_KV_STORE, "kv_store", one_item, run_kv_store)
register(STEP_ATTENTION, "attention", items_of_attention, run_attention)
register(STEP_GLU, "glu", rows_of_glu, run_glu)
register(STEP_GELU, "gelu", chunks_of_elements, run_gelu)
register(STEP_UNARY, "unary", chunks_of_elements, run_unary)
register(STEP_BINARY, "binary", chunks_of_binary, run_binary)
register(STEP_QUANTIZE_I8, "quantize_i8", chunks_of_elements, run_quantize_i8)
register(STEP_DEQUANTIZE_I8, "dequantize_i8", chunks_of_elements, run_dequantize_i8)
register(STEP_COPY_ROWS, "copy_rows", items_of_copy_rows, run_copy_rows)
register(STEP_GATHER, "gather", items_of_gather, run_gather)
register(STEP_CONV_F32, "conv_f32", blocks_of_conv, run_conv_f32)
register(STEP_DWCONV_F32, "dwconv_f32", rows_of_window, run_dwconv_f32)
register(STEP_DWPW_F32, "dwpw_f32", items_of_dwpw_f32, run_dwpw_f32)
register(STEP_EXDWPW_F32, "exdwpw_f32", bands_of_exdwpw, run_exdwpw_f32)
register(STEP_QCONV, "qconv", blocks_of_conv, run_qconv)
register(STEP_QDWCONV, "qdwconv", rows_of_window, run_qdwconv)
register(STEP_QDWPW, "qdwpw", bands_of_qdwpw, run_qdwpw)
register(STEP_QAVG_POOL, "qavg_pool", rows_of_window, run_qavg_pool)
register(STEP_MAX_POOL, "max_pool", rows_of_window, run_max_pool)
register(STEP_AVG_POOL, "avg_pool", rows_of_window, run_avg_pool)
register(STEP_QSOFTMAX, "qsoftmax", one_item, run_qsoftmax)
register(STEP_GLOBAL_AVG, "global_avg", runs_of_global_avg, run_global_avg)
register(STEP_QBINARY, "qbinary", chunks_of_qbinary, run_qbinary)
register(STEP_QMAX_POOL, "qmax_pool", rows_of_window, run_qmax_pool)
register(STEP_QLOOKUP, "qlookup", chunks_of_qlookup, run_qlookup)

include "moe.pxi"
