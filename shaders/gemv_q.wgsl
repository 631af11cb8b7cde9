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

// #include "include/weight_at.wgsl"

// #include "include/activate.wgsl"

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
