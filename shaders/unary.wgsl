// Pointwise activations y = f(x).
// op: 0 relu, 1 sigmoid, 2 silu, 3 gelu (erf), 4 gelu (tanh), 5 clip(lo, hi),
//     6 hard_sigmoid(alpha, beta), 7 hard_swish, 8 sqrt.
// in_place != 0: y = f(y), x unbound (an activation over a buffer an earlier dispatch wrote; WebGPU
// forbids binding one buffer both read-only and read-write in a dispatch).

struct Params {
    n: u32,
    op: u32,
    lo: f32,     // clip bounds / hard_sigmoid alpha
    hi: f32,     // clip bounds / hard_sigmoid beta
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
        case 0u: { r = max(v, 0.0); }
        case 1u: { r = sigmoid(v); }
        case 2u: { r = v * sigmoid(v); }
        case 3u: { r = 0.5 * v * (1.0 + erf_approx(v * 0.70710678118654752)); }
        case 4u: { r = v * sigmoid(1.5957691216057308 * (v + 0.044715 * v * v * v)); }  // 0.5(1+tanh(u)) = sigmoid(2u)
        case 5u: { r = clamp(v, P.lo, P.hi); }
        case 6u: { r = clamp(P.lo * v + P.hi, 0.0, 1.0); }
        case 7u: { r = v * clamp(v + 3.0, 0.0, 6.0) / 6.0; }
        default: { r = sqrt(v); }
    }
    y[i] = r;
}
