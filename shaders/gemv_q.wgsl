// y = act(x @ W^T + bias) for M = 1..8 rows (decode) and a weight kept in its stored type, read
// packed from a chunk of its rows and dequantized in registers (weight_at; layout as matmul_q).
// One workgroup per block of ROWS output columns: 16 threads per column walk K, each keeping M
// partial sums, then reduce through workgroup memory (no subgroup operations, so every driver runs it).
// This dispatch writes output columns [n0, n0 + rows) of y (M, N) from chunk rows [w_row, w_row + rows).

// BEGIN generated codes (tools/gen_codes.py from volvox/ops/codes.py): do not edit
const FN_NONE: u32 = 0u;
const FN_RELU: u32 = 1u;
const FN_RELU6: u32 = 2u;
const FN_SIGMOID: u32 = 3u;
const FN_SILU: u32 = 4u;
const FN_GELU: u32 = 5u;
const FN_GELU_TANH: u32 = 6u;
const FN_HARD_SWISH: u32 = 7u;
const FN_HARD_SIGMOID: u32 = 8u;
const FN_SQRT: u32 = 9u;
const FN_SQUARE: u32 = 10u;
const FN_CLIP: u32 = 11u;
const FN_LEAKY_RELU: u32 = 12u;
const BIN_ADD: u32 = 0u;
const BIN_MUL: u32 = 1u;
const BIN_SUB: u32 = 2u;
const BIN_DIV: u32 = 3u;
const BIN_POW: u32 = 4u;
// END generated codes

struct Params {
    M: u32,         // 1..8
    K: u32,
    N: u32,         // y's row length
    n0: u32,        // the first output column this dispatch writes
    rows: u32,      // output columns (weight rows) this dispatch writes
    w_row: u32,     // the chunk row of output column n0
    head_off: u32,  // word of the chunk's scales (block types)
    wtype: u32,     // WT_* below
    has_bias: u32,
    act: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;        // (M, K)
@group(0) @binding(1) var<storage, read> w: array<u32>;        // a chunk of the weight's rows, packed
@group(0) @binding(2) var<storage, read> bias: array<f32>;     // (N,) or a dummy
@group(0) @binding(3) var<storage, read_write> y: array<f32>;  // (M, N)
@group(0) @binding(4) var<storage, read> P: Params;

const ROWS: u32 = 4u;   // output columns per workgroup
const LANES: u32 = 16u; // threads per output column
var<workgroup> partial: array<f32, 512>;  // (8 rows of x, ROWS * LANES) partial sums

// BEGIN weight_at (the same text in matmul_q, gemv_q and embedding_q: tests/gpu/test_quant_shaders.py checks)
// A weight chunk `w` holds rows [0, rows) of a (rows, K) matrix in its stored type (docs/backends.md,
// "Quantized weights in shaders"): f32 as its bits, f16 as packed halves (element e at half e of the
// chunk), block types as every block's quant bytes (the body, body words a block) followed at word
// P.head_off by the blocks' f16 scales (the head, head halves a block), both row-major over blocks.
const WT_F32: u32 = 0u;
const WT_F16: u32 = 1u;
const WT_Q8_0: u32 = 2u;
const WT_Q4_0: u32 = 3u;
const WT_Q4_1: u32 = 4u;
const WT_Q4_K: u32 = 5u;
const WT_Q6_K: u32 = 6u;

fn head_half(i: u32) -> f32 {  // f16 scale i of the chunk's head
    return unpack2x16float(w[P.head_off + (i >> 1u)])[i & 1u];
}

fn body_byte(word: u32, b: u32) -> u32 {  // byte b of the body starting at word `word`
    return (w[word + (b >> 2u)] >> ((b & 3u) * 8u)) & 0xFFu;
}

fn weight_at(row: u32, k: u32) -> f32 {  // W[row, k] of the chunk, dequantized
    switch P.wtype {
        case WT_F32: { return bitcast<f32>(w[row * P.K + k]); }
        case WT_F16: {
            let e = row * P.K + k;
            return unpack2x16float(w[e >> 1u])[e & 1u];
        }
        case WT_Q8_0: {  // d; 32 int8
            let blk = row * (P.K >> 5u) + (k >> 5u);
            let q = bitcast<i32>(body_byte(blk * 8u, k & 31u) << 24u) >> 24u;
            return f32(q) * head_half(blk);
        }
        case WT_Q4_0, WT_Q4_1: {  // d (, m); 16 bytes: low nibbles values 0..15, high nibbles 16..31
            let blk = row * (P.K >> 5u) + (k >> 5u);
            let j = k & 31u;
            let q = f32((body_byte(blk * 4u, j & 15u) >> ((j >> 4u) * 4u)) & 15u);
            if (P.wtype == WT_Q4_0) { return (q - 8.0) * head_half(blk); }
            return q * head_half(2u * blk) + head_half(2u * blk + 1u);
        }
        case WT_Q4_K: {  // d, dmin; scales[12]; qs[128]: 32 bytes per two sub-blocks of 32 (low, high nibbles)
            let blk = row * (P.K >> 8u) + (k >> 8u);
            let j = k & 255u;
            let sub = j >> 5u;
            let base = blk * 35u;
            let q = f32((body_byte(base, 12u + (sub >> 1u) * 32u + (j & 31u)) >> ((sub & 1u) * 4u)) & 15u);
            var sc: u32;
            var mn: u32;
            if (sub < 4u) {
                sc = body_byte(base, sub) & 63u;
                mn = body_byte(base, sub + 4u) & 63u;
            } else {
                sc = (body_byte(base, sub + 4u) & 15u) | ((body_byte(base, sub - 4u) >> 6u) << 4u);
                mn = (body_byte(base, sub + 4u) >> 4u) | ((body_byte(base, sub) >> 6u) << 4u);
            }
            return head_half(2u * blk) * f32(sc) * q - head_half(2u * blk + 1u) * f32(mn);
        }
        case WT_Q6_K: {  // ql[128] qh[64] scales int8[16]; d
            let blk = row * (P.K >> 8u) + (k >> 8u);
            let j = k & 255u;
            let base = blk * 52u;
            let upper = j >> 7u;
            let nibble = (j >> 6u) & 1u;
            let part = (j >> 5u) & 1u;
            let l = j & 31u;
            let lo = (body_byte(base, upper * 64u + part * 32u + l) >> (nibble * 4u)) & 15u;
            let hi = (body_byte(base, 128u + upper * 32u + l) >> (nibble * 4u + part * 2u)) & 3u;
            let sc = bitcast<i32>(body_byte(base, 192u + (j >> 4u)) << 24u) >> 24u;
            return head_half(blk) * f32(sc) * (f32(lo | (hi << 4u)) - 32.0);
        }
        default: { return 0.0; }
    }
}
fn nibbles4(word: u32, shift: u32) -> vec4<f32> {  // the 4-bit fields at ``shift`` of the word's 4 bytes
    return vec4<f32>(f32((word >> shift) & 15u), f32((word >> (shift + 8u)) & 15u),
                     f32((word >> (shift + 16u)) & 15u), f32((word >> (shift + 24u)) & 15u));
}

fn weight4_at(row: u32, k: u32) -> vec4<f32> {  // W[row, k..k+3] of the chunk; k and P.K multiples of 4
    switch P.wtype {
        case WT_F32: {
            let e = row * P.K + k;
            return vec4<f32>(bitcast<f32>(w[e]), bitcast<f32>(w[e + 1u]), bitcast<f32>(w[e + 2u]), bitcast<f32>(w[e + 3u]));
        }
        case WT_F16: {
            let e = (row * P.K + k) >> 1u;
            return vec4<f32>(unpack2x16float(w[e]), unpack2x16float(w[e + 1u]));
        }
        case WT_Q8_0: {
            let blk = row * (P.K >> 5u) + (k >> 5u);
            let q = bitcast<vec4<i32>>(vec4<u32>(w[blk * 8u + ((k & 31u) >> 2u)]) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u);
            return vec4<f32>(q) * head_half(blk);
        }
        case WT_Q4_0, WT_Q4_1: {
            let blk = row * (P.K >> 5u) + (k >> 5u);
            let j = k & 31u;
            let q = nibbles4(w[blk * 4u + ((j & 15u) >> 2u)], (j >> 4u) * 4u);
            if (P.wtype == WT_Q4_0) { return (q - 8.0) * head_half(blk); }
            return q * head_half(2u * blk) + head_half(2u * blk + 1u);
        }
        case WT_Q4_K: {
            let blk = row * (P.K >> 8u) + (k >> 8u);
            let j = k & 255u;
            let sub = j >> 5u;
            let base = blk * 35u;
            let q = nibbles4(w[base + 3u + (sub >> 1u) * 8u + ((j & 31u) >> 2u)], (sub & 1u) * 4u);
            var sc: u32;
            var mn: u32;
            if (sub < 4u) {
                sc = body_byte(base, sub) & 63u;
                mn = body_byte(base, sub + 4u) & 63u;
            } else {
                sc = (body_byte(base, sub + 4u) & 15u) | ((body_byte(base, sub - 4u) >> 6u) << 4u);
                mn = (body_byte(base, sub + 4u) >> 4u) | ((body_byte(base, sub) >> 6u) << 4u);
            }
            return head_half(2u * blk) * f32(sc) * q - head_half(2u * blk + 1u) * f32(mn);
        }
        case WT_Q6_K: {
            let blk = row * (P.K >> 8u) + (k >> 8u);
            let j = k & 255u;
            let base = blk * 52u;
            let upper = j >> 7u;
            let nibble = (j >> 6u) & 1u;
            let part = (j >> 5u) & 1u;
            let l = j & 31u;
            let lo = vec4<u32>(w[base + (upper * 64u + part * 32u + l) / 4u]) >> vec4<u32>(0u, 8u, 16u, 24u);
            let hi = vec4<u32>(w[base + (128u + upper * 32u + l) / 4u]) >> vec4<u32>(0u, 8u, 16u, 24u);
            let q = ((lo >> vec4<u32>(nibble * 4u)) & vec4<u32>(15u)) | (((hi >> vec4<u32>(nibble * 4u + part * 2u)) & vec4<u32>(3u)) << vec4<u32>(4u));
            let sc = bitcast<i32>(body_byte(base, 192u + (j >> 4u)) << 24u) >> 24u;
            return head_half(blk) * f32(sc) * (vec4<f32>(q) - 32.0);
        }
        default: { return vec4<f32>(0.0); }
    }
}
// END weight_at

fn erf_approx(v: f32) -> f32 {
    // Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7
    let a = abs(v);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return sign(v) * (1.0 - poly * exp(-a * a));
}

fn activate(v: f32, act: u32) -> f32 {
    switch act {
        case FN_RELU: { return max(v, 0.0); }
        case FN_RELU6: { return clamp(v, 0.0, 6.0); }
        case FN_SILU: { return v / (1.0 + exp(-v)); }
        case FN_GELU: { return 0.5 * v * (1.0 + erf_approx(v * 0.70710678118654752)); }
        case FN_SIGMOID: { return 1.0 / (1.0 + exp(-v)); }
        case FN_GELU_TANH: { return v / (1.0 + exp(-1.5957691216057308 * (v + 0.044715 * v * v * v))); }  // 0.5(1+tanh(u)) = sigmoid(2u)
        case FN_HARD_SWISH: { return v * clamp(v + 3.0, 0.0, 6.0) / 6.0; }
        default: { return v; }
    }
}

struct Sums {  // the M <= 8 partial sums of a thread, in registers (named lanes, never indexed)
    lo: vec4<f32>,  // rows 0..3
    hi: vec4<f32>,  // rows 4..7
}

fn x_at(m: u32, k: u32, four: bool) -> vec4<f32> {  // x[m, k..k+3], or x[m, k] alone
    let o = m * P.K + k;
    if (four) { return vec4<f32>(x[o], x[o + 1u], x[o + 2u], x[o + 3u]); }
    return vec4<f32>(x[o], 0.0, 0.0, 0.0);
}

fn add_rows(acc: Sums, wv: vec4<f32>, k: u32, four: bool) -> Sums {  // acc += x[:, k..] . wv, row by row
    var r = acc;
    r.lo.x = r.lo.x + dot(x_at(0u, k, four), wv);
    if (P.M > 1u) { r.lo.y = r.lo.y + dot(x_at(1u, k, four), wv); }
    if (P.M > 2u) { r.lo.z = r.lo.z + dot(x_at(2u, k, four), wv); }
    if (P.M > 3u) { r.lo.w = r.lo.w + dot(x_at(3u, k, four), wv); }
    if (P.M > 4u) { r.hi.x = r.hi.x + dot(x_at(4u, k, four), wv); }
    if (P.M > 5u) { r.hi.y = r.hi.y + dot(x_at(5u, k, four), wv); }
    if (P.M > 6u) { r.hi.z = r.hi.z + dot(x_at(6u, k, four), wv); }
    if (P.M > 7u) { r.hi.w = r.hi.w + dot(x_at(7u, k, four), wv); }
    return r;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let col = (wid.y * nwg.x + wid.x) * ROWS + li / LANES;
    let lane = li % LANES;
    var acc = Sums(vec4<f32>(0.0), vec4<f32>(0.0));
    if (col < P.rows && (P.K & 3u) == 0u) {  // 4 values a step (every block type; f32 / f16 rows of 4k)
        for (var k = lane * 4u; k < P.K; k = k + LANES * 4u) {
            acc = add_rows(acc, weight4_at(P.w_row + col, k), k, true);
        }
    } else if (col < P.rows) {
        for (var k = lane; k < P.K; k = k + LANES) {
            acc = add_rows(acc, vec4<f32>(weight_at(P.w_row + col, k), 0.0, 0.0, 0.0), k, false);
        }
    }
    partial[li] = acc.lo.x;
    partial[64u + li] = acc.lo.y;
    partial[128u + li] = acc.lo.z;
    partial[192u + li] = acc.lo.w;
    partial[256u + li] = acc.hi.x;
    partial[320u + li] = acc.hi.y;
    partial[384u + li] = acc.hi.z;
    partial[448u + li] = acc.hi.w;
    workgroupBarrier();
    for (var s = LANES / 2u; s > 0u; s = s / 2u) {
        if (lane < s) {
            for (var m = 0u; m < P.M; m = m + 1u) { partial[m * 64u + li] = partial[m * 64u + li] + partial[m * 64u + li + s]; }
        }
        workgroupBarrier();
    }
    if (lane == 0u && col < P.rows) {
        for (var m = 0u; m < P.M; m = m + 1u) {
            var v = partial[m * 64u + li];
            if (P.has_bias != 0u) { v = v + bias[P.n0 + col]; }
            y[m * P.N + P.n0 + col] = activate(v, P.act);
        }
    }
}
