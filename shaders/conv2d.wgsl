// conv2d NHWC, any groups (dense, depthwise, pointwise), strides, dilations, explicit padding,
// + bias and a fused activation (FN_NONE, FN_RELU or FN_RELU6). One thread per output element.
// x (N, H, W, C), w (Cout, kh, kw, C / groups) "OHWI", y (N, OH, OW, Cout).

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
    n: u32,          // elements of y
    H: u32, W: u32, C: u32,
    OH: u32, OW: u32, Cout: u32,
    kh: u32, kw: u32,
    cin_g: u32,      // input channels per group
    cout_g: u32,     // output channels per group
    sh: u32, sw: u32,
    dh: u32, dw: u32,
    pt: u32, pl: u32,
    has_bias: u32,
    act: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;  // (Cout,) or a dummy
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> P: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = (wid.y * nwg.x + wid.x) * 64u + li;
    if (i >= P.n) { return; }
    let co = i % P.Cout;
    let ox = (i / P.Cout) % P.OW;
    let oy = (i / (P.Cout * P.OW)) % P.OH;
    let b = i / (P.Cout * P.OW * P.OH);
    let c0 = (co / P.cout_g) * P.cin_g;  // first input channel of this group
    var acc = 0.0;
    for (var ky = 0u; ky < P.kh; ky = ky + 1u) {
        let iy = i32(oy * P.sh + ky * P.dh) - i32(P.pt);
        if (iy < 0 || iy >= i32(P.H)) { continue; }
        for (var kx = 0u; kx < P.kw; kx = kx + 1u) {
            let ix = i32(ox * P.sw + kx * P.dw) - i32(P.pl);
            if (ix < 0 || ix >= i32(P.W)) { continue; }
            let xb = ((b * P.H + u32(iy)) * P.W + u32(ix)) * P.C + c0;
            let wb = ((co * P.kh + ky) * P.kw + kx) * P.cin_g;
            for (var c = 0u; c < P.cin_g; c = c + 1u) { acc = acc + x[xb + c] * w[wb + c]; }
        }
    }
    if (P.has_bias != 0u) { acc = acc + bias[co]; }
    if (P.act == FN_RELU) { acc = max(acc, 0.0); }
    if (P.act == FN_RELU6) { acc = clamp(acc, 0.0, 6.0); }
    y[i] = acc;
}
