// layer_norm: y = (x - mean) / sqrt(var + eps) * weight + bias, one workgroup per row. x, y (rows, n).

struct Params {
    rows: u32,
    n: u32,
    eps: f32,
    has_bias: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> weight: array<f32>;  // (n,)
@group(0) @binding(2) var<storage, read> bias: array<f32>;    // (n,) or a dummy
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> P: Params;

var<workgroup> part: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let row = wid.y * nwg.x + wid.x;
    if (row >= P.rows) { return; }
    let base = row * P.n;
    var s = 0.0;
    for (var c = li; c < P.n; c = c + 64u) { s = s + x[base + c]; }
    part[li] = s;
    workgroupBarrier();
    for (var w = 32u; w > 0u; w = w >> 1u) {  // tree sum (barriers stay in main: GLSL ES requires it)
        if (li < w) { part[li] = part[li] + part[li + w]; }
        workgroupBarrier();
    }
    let mean = part[0] / f32(P.n);
    workgroupBarrier();
    var q = 0.0;
    for (var c = li; c < P.n; c = c + 64u) { let d = x[base + c] - mean; q = q + d * d; }
    part[li] = q;
    workgroupBarrier();
    for (var w = 32u; w > 0u; w = w >> 1u) {
        if (li < w) { part[li] = part[li] + part[li + w]; }
        workgroupBarrier();
    }
    let inv = 1.0 / sqrt(part[0] / f32(P.n) + P.eps);
    for (var c = li; c < P.n; c = c + 64u) {
        var v = (x[base + c] - mean) * inv * weight[c];
        if (P.has_bias != 0u) { v = v + bias[c]; }
        y[base + c] = v;
    }
}
