// Strided block copy: dst[dst_off + z*dst_z + o*dst_o + i] = src[src_off + z*src_z + o*src_o + i]
// for i < inner, o < outer, z < planes. Serves output_rows, concat and the KV-cache append.

struct Params {
    n: u32,          // inner * outer * planes
    inner: u32,
    outer: u32,
    src_off: u32,
    src_o: u32,
    src_z: u32,
    dst_off: u32,
    dst_o: u32,
    dst_z: u32,
}

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(2) var<storage, read> P: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let idx = (wid.y * nwg.x + wid.x) * 64u + li;
    if (idx >= P.n) { return; }
    let i = idx % P.inner;
    let o = (idx / P.inner) % P.outer;
    let z = idx / (P.inner * P.outer);
    dst[P.dst_off + z * P.dst_z + o * P.dst_o + i] = src[P.src_off + z * P.src_z + o * P.src_o + i];
}
