// swiglu: y = silu(gate) * up for x = [gate | up] along the last axis. x (rows, 2*half), y (rows, half).

struct Params {
    n: u32,      // elements of y
    half: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> P: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = (wid.y * nwg.x + wid.x) * 64u + li;
    if (i >= P.n) { return; }
    let r = i / P.half;
    let c = i % P.half;
    let g = x[r * 2u * P.half + c];
    let u = x[r * 2u * P.half + P.half + c];
    y[i] = g / (1.0 + exp(-g)) * u;
}
