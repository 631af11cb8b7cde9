// embedding: y[r] = table[ids[r]]; ids (n,) int32, table (vocab, dim), y (n, dim).
// Out-of-range ids (checked on the host before upload) read as zeros here.

struct Params {
    n: u32,       // elements of y
    dim: u32,
    vocab: u32,
}

@group(0) @binding(0) var<storage, read> table: array<f32>;
@group(0) @binding(1) var<storage, read> ids: array<i32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> P: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = (wid.y * nwg.x + wid.x) * 64u + li;
    if (i >= P.n) { return; }
    let id = ids[i / P.dim];
    var v = 0.0;
    if (id >= 0 && u32(id) < P.vocab) { v = table[u32(id) * P.dim + i % P.dim]; }
    y[i] = v;
}
