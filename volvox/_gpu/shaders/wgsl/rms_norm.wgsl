// rms_norm: y = x / sqrt(mean(x^2) + eps) * weight, one workgroup per row. x, y (rows, n).

struct Params {
    rows: u32,
    n: u32,
    eps: f32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> weight: array<f32>;  // (n,)
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> P: Params;

var<workgroup> part: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let row = wid.y * nwg.x + wid.x;
    if (row >= P.rows) { return; }
    let base = row * P.n;
    var s = 0.0;
    for (var c = li; c < P.n; c = c + 64u) { s = s + x[base + c] * x[base + c]; }
    part[li] = s;
    workgroupBarrier();
    for (var w = 32u; w > 0u; w = w >> 1u) {
        if (li < w) { part[li] = part[li] + part[li + w]; }
        workgroupBarrier();
    }
    let inv = 1.0 / sqrt(part[0] / f32(P.n) + P.eps);
    for (var c = li; c < P.n; c = c + 64u) { y[base + c] = x[base + c] * inv * weight[c]; }
}
