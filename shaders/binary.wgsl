// Elementwise a (op) b with numpy broadcasting over up to 4 dims (strides 0 on broadcast dims).
// op: a BIN_* code (volvox/ops/codes.py): add, mul, sub, div, pow (numpy semantics for negative bases);
// relu != 0 fuses max(., 0).
// acc != 0: a is y itself, a unbound (y = y (op) b, e.g. add_n's running sum; WebGPU forbids binding one
// buffer both read-only and read-write in a dispatch).

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
    n: u32,           // elements of y
    d1: u32,          // y's dims 1..3 (dim 0 follows from n)
    d2: u32,
    d3: u32,
    a0: u32, a1: u32, a2: u32, a3: u32,  // a's strides per y dim
    b0: u32, b1: u32, b2: u32, b3: u32,  // b's strides per y dim
    op: u32,
    relu: u32,
    acc: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;  // (d0, d1, d2, d3)
@group(0) @binding(3) var<storage, read> P: Params;

fn power(a: f32, b: f32) -> f32 {
    if (b == 2.0) { return a * a; }
    if (a < 0.0 && b == round(b)) {  // integral exponent of a negative base: sign from its parity
        let r = pow(-a, b);
        return select(r, -r, abs(b % 2.0) == 1.0);
    }
    return pow(a, b);  // NaN for a negative base with a fractional exponent, as numpy
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = (wid.y * nwg.x + wid.x) * 64u + li;
    if (i >= P.n) { return; }
    let i3 = i % P.d3;
    let r2 = i / P.d3;
    let i2 = r2 % P.d2;
    let r1 = r2 / P.d2;
    let i1 = r1 % P.d1;
    let i0 = r1 / P.d1;
    var av: f32;
    if (P.acc != 0u) { av = y[i]; } else { av = a[i0 * P.a0 + i1 * P.a1 + i2 * P.a2 + i3 * P.a3]; }
    let bv = b[i0 * P.b0 + i1 * P.b1 + i2 * P.b2 + i3 * P.b3];
    var v: f32;
    switch P.op {
        case BIN_MUL: { v = av * bv; }
        case BIN_SUB: { v = av - bv; }
        case BIN_DIV: { v = av / bv; }
        case BIN_POW: { v = power(av, bv); }
        default: { v = av + bv; }
    }
    if (P.relu != 0u) { v = max(v, 0.0); }
    y[i] = v;
}
