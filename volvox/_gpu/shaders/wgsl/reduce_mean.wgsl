// reduce_mean over the trailing axes: y[r] = mean(x[r, :]), one workgroup per row. x (rows, n), y (rows,).

struct Params {
    rows: u32,
    n: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> P: Params;

var<workgroup> part: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let row = wid.y * nwg.x + wid.x;
    if (row >= P.rows) { return; }
    var s = 0.0;
    for (var c = li; c < P.n; c = c + 64u) { s = s + x[row * P.n + c]; }
    part[li] = s;
    workgroupBarrier();
    for (var w = 32u; w > 0u; w = w >> 1u) {
        if (li < w) { part[li] = part[li] + part[li + w]; }
        workgroupBarrier();
    }
    if (li == 0u) { y[row] = part[0] / f32(P.n); }
}
