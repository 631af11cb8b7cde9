// y[b] = act(x[b] @ W[b]^T + bias) per batch b (grid z): x (M, K) row-major, W read as (N, K) through
// strides (w_n, w_k), so a linear weight (N, K) has (K, 1) and a matmul's right operand (K, N) has (1, N);
// batch strides 0 broadcast an operand. linear: W's rows start at w_row (linear_split reads a block).
// 16x16 output tile per workgroup, K walked in 16-wide slices staged in workgroup memory.
// act: an FN_* code (volvox/ops/codes.py), every activation linear_act fuses, applied in the output write.

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
    M: u32,
    K: u32,
    N: u32,
    w_row: u32,     // first weight row (linear_split reads a block of rows)
    w_n: u32,       // W stride between rows n
    w_k: u32,       // W stride between columns k
    x_batch: u32,   // batch strides (0: broadcast)
    w_batch: u32,
    has_bias: u32,
    act: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;        // (M, K)
@group(0) @binding(1) var<storage, read> w: array<f32>;        // (rows, K) or (K, N)
@group(0) @binding(2) var<storage, read> bias: array<f32>;     // (N,) or a dummy
@group(0) @binding(3) var<storage, read_write> y: array<f32>;  // (batch, M, N)
@group(0) @binding(4) var<storage, read> P: Params;

const TS: u32 = 16u;
var<workgroup> xs: array<f32, 256>;  // (TS rows, TS k)
var<workgroup> ws: array<f32, 256>;  // (TS cols, TS k)

// #include "include/activate.wgsl"

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = wid.y * TS + lid.y;
    let col = wid.x * TS + lid.x;
    let wrow = wid.x * TS + lid.y;  // the weight row this thread stages
    let xb = wid.z * P.x_batch;
    let wb = wid.z * P.w_batch;
    var acc = 0.0;
    for (var k0 = 0u; k0 < P.K; k0 = k0 + TS) {
        let k = k0 + lid.x;
        var xv = 0.0;
        if (row < P.M && k < P.K) { xv = x[xb + row * P.K + k]; }
        xs[lid.y * TS + lid.x] = xv;
        var wv = 0.0;
        if (wrow < P.N && k < P.K) { wv = w[wb + (P.w_row + wrow) * P.w_n + k * P.w_k]; }
        ws[lid.y * TS + lid.x] = wv;
        workgroupBarrier();
        for (var kk = 0u; kk < TS; kk = kk + 1u) {
            acc = acc + xs[lid.y * TS + kk] * ws[lid.x * TS + kk];
        }
        workgroupBarrier();
    }
    if (row < P.M && col < P.N) {
        var v = acc;
        if (P.has_bias != 0u) { v = v + bias[col]; }
        y[(wid.z * P.M + row) * P.N + col] = activate(v, P.act);
    }
}
