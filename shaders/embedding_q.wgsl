// Embedding rows gathered from a table kept in its stored type (f32, f16, q8_0, q4_0, q4_1, q4_k,
// q6_k), read packed from a chunk of its rows and dequantized in registers (weight_at; layout as
// matmul_q). ids (n_ids,) int32, y (n_ids, dim). This dispatch writes the rows whose id lies in the
// chunk's [r0, r0 + rows); a table of several chunks takes one dispatch each. A thread writes 4 values
// when dim is a multiple of 4, else 1. Ids are checked on the host before upload.

struct Params {
    n: u32,         // elements of y
    K: u32,         // dim: the table's row length
    r0: u32,        // the first table row in this chunk
    rows: u32,      // table rows in this chunk
    head_off: u32,  // word of the chunk's scales (block types)
    wtype: u32,     // WT_* below
}

@group(0) @binding(0) var<storage, read> w: array<u32>;        // a chunk of the table's rows, packed
@group(0) @binding(1) var<storage, read> ids: array<i32>;      // (n_ids,)
@group(0) @binding(2) var<storage, read_write> y: array<f32>;  // (n_ids, dim)
@group(0) @binding(3) var<storage, read> P: Params;

// #include "include/weight_at.wgsl"

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let t = (wid.y * nwg.x + wid.x) * 64u + li;
    if ((P.K & 3u) == 0u) {  // 4 values a thread
        let i = t * 4u;
        if (i >= P.n) { return; }
        let id = ids[i / P.K];
        if (id >= i32(P.r0) && u32(id) - P.r0 < P.rows) {
            let v = weight4_at(u32(id) - P.r0, i % P.K);
            y[i] = v.x;
            y[i + 1u] = v.y;
            y[i + 2u] = v.z;
            y[i + 3u] = v.w;
        }
        return;
    }
    if (t >= P.n) { return; }
    let id = ids[t / P.K];
    if (id >= i32(P.r0) && u32(id) - P.r0 < P.rows) {
        y[t] = weight_at(u32(id) - P.r0, t % P.K);
    }
}
