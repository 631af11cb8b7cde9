// Pointwise activations y = f(x).
// op: an FN_* code (volvox/ops/codes.py): relu, relu6, sigmoid, silu, gelu (erf), gelu_tanh,
// hard_swish, hard_sigmoid, sqrt, square, clip, leaky_relu; lo, hi: the function's parameters
// (alpha, beta of volvox/ops/codes.py's FN_PARAMS); none copies.
// in_place != 0: y = f(y), x unbound (an activation over a buffer an earlier dispatch wrote; WebGPU
// forbids binding one buffer both read-only and read-write in a dispatch).

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
    n: u32,
    op: u32,
    lo: f32,     // the function's first parameter (alpha), if any
    hi: f32,     // its second (beta)
    in_place: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> P: Params;

fn erf_approx(v: f32) -> f32 {
    // Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7
    let a = abs(v);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return sign(v) * (1.0 - poly * exp(-a * a));
}

fn sigmoid(v: f32) -> f32 {
    return 1.0 / (1.0 + exp(-v));  // exp overflow gives inf -> 0: no NaN
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = (wid.y * nwg.x + wid.x) * 64u + li;
    if (i >= P.n) { return; }
    var v: f32;
    if (P.in_place != 0u) { v = y[i]; } else { v = x[i]; }
    var r: f32;
    switch P.op {
        case FN_RELU: { r = max(v, 0.0); }
        case FN_RELU6: { r = clamp(v, 0.0, 6.0); }
        case FN_SIGMOID: { r = sigmoid(v); }
        case FN_SILU: { r = v * sigmoid(v); }
        case FN_GELU: { r = 0.5 * v * (1.0 + erf_approx(v * 0.70710678118654752)); }
        case FN_GELU_TANH: { r = v * sigmoid(1.5957691216057308 * (v + 0.044715 * v * v * v)); }  // 0.5(1+tanh(u)) = sigmoid(2u)
        case FN_HARD_SWISH: { r = v * clamp(v + 3.0, 0.0, 6.0) / 6.0; }
        case FN_HARD_SIGMOID: { r = clamp(P.lo * v + P.hi, 0.0, 1.0); }
        case FN_SQRT: { r = sqrt(v); }
        case FN_SQUARE: { r = v * v; }
        case FN_CLIP: { r = clamp(v, P.lo, P.hi); }
        case FN_LEAKY_RELU: { r = select(P.lo * v, v, v >= 0.0); }
        default: { r = v; }
    }
    y[i] = r;
}
