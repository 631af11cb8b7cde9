// y = act(x @ W^T + bias) for a weight kept in its stored type (f32, f16, q8_0, q4_0, q4_1, q4_k, q6_k),
// read packed from a chunk of its rows and dequantized in registers (weight_at). x (M, K) row-major;
// this dispatch computes output columns [n0, n0 + rows) of y (M, N) from chunk rows [w_row, w_row + rows).
// A weight larger than one storage binding is several chunks, one dispatch each (docs/backends.md).
// A workgroup of 16x16 threads computes a 16 (rows of x) x 64 (columns) tile, 4 columns a thread, walking K in
// 16-wide slices staged in workgroup memory; each thread dequantizes 4 weight values a slice.
// act: an FN_* code (volvox/ops/codes.py), applied in the output write.

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

const TS: u32 = 16u;   // rows of x and k a slice
const TN: u32 = 64u;   // columns a workgroup
var<workgroup> xs: array<f32, 256>;   // (TS rows, TS k)
var<workgroup> ws: array<f32, 1024>;  // (TN cols, TS k), dequantized

// #include "include/weight_at.wgsl"

// #include "include/activate.wgsl"

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = wid.y * TS + lid.y;
    let col0 = wid.x * TN;
    let t = lid.y * TS + lid.x;
    let wrow = col0 + t / 4u;   // the output column whose weight row this thread stages
    let kpart = (t % 4u) * 4u;  // and the 4 k of the slice it stages
    var acc = vec4<f32>(0.0);   // columns col0 + lid.x + 16 c
    for (var k0 = 0u; k0 < P.K; k0 = k0 + TS) {
        var xv = 0.0;
        if (row < P.M && k0 + lid.x < P.K) { xv = x[row * P.K + k0 + lid.x]; }
        xs[t] = xv;
        let k = k0 + kpart;
        var wv = vec4<f32>(0.0);
        if (wrow < P.rows && (P.K & 3u) == 0u && k < P.K) {
            wv = weight4_at(P.w_row + wrow, k);
        } else if (wrow < P.rows) {  // rows of a width not a multiple of 4 (f32, f16): one value at a time
            for (var c = 0u; c < 4u; c = c + 1u) {
                if (k + c < P.K) { wv[c] = weight_at(P.w_row + wrow, k + c); }
            }
        }
        let o = (t / 4u) * TS + kpart;
        ws[o] = wv.x;
        ws[o + 1u] = wv.y;
        ws[o + 2u] = wv.z;
        ws[o + 3u] = wv.w;
        workgroupBarrier();
        for (var kk = 0u; kk < TS; kk = kk + 1u) {
            let xk = xs[lid.y * TS + kk];
            acc = acc + xk * vec4<f32>(ws[lid.x * TS + kk], ws[(lid.x + 16u) * TS + kk],
                                       ws[(lid.x + 32u) * TS + kk], ws[(lid.x + 48u) * TS + kk]);
        }
        workgroupBarrier();
    }
    for (var c = 0u; c < 4u; c = c + 1u) {
        let col = col0 + lid.x + 16u * c;
        if (row < P.M && col < P.rows) {
            var v = acc[c];
            if (P.has_bias != 0u) { v = v + bias[P.n0 + col]; }
            y[row * P.N + P.n0 + col] = activate(v, P.act);
        }
    }
}
