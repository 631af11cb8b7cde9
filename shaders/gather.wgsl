// Strided gather with constant fill, up to 6 dims: transpose, slice and pad in one kernel.
// y[c] = x[off + sum_d (c_d - lo_d) * s_d] when every 0 <= c_d - lo_d < in_d, else value.
// (transpose: permuted strides; slice: strides * step, offset at the starts; pad: lo = pads before.)

struct Params {
    n: u32,          // elements of y
    d1: u32, d2: u32, d3: u32, d4: u32, d5: u32,  // y's dims 1..5 (dim 0 follows from n)
    s0: i32, s1: i32, s2: i32, s3: i32, s4: i32, s5: i32,  // x strides per y dim (negative: reversed slice)
    off: i32,        // x offset of the first element read
    lo0: u32, lo1: u32, lo2: u32, lo3: u32, lo4: u32, lo5: u32,  // padding before, per y dim
    in0: u32, in1: u32, in2: u32, in3: u32, in4: u32, in5: u32,  // readable extent per y dim
    value: f32,      // fill outside the readable extent
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> P: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = (wid.y * nwg.x + wid.x) * 64u + li;
    if (i >= P.n) { return; }
    var r = i;
    let c5 = i32(r % P.d5) - i32(P.lo5);
    r = r / P.d5;
    let c4 = i32(r % P.d4) - i32(P.lo4);
    r = r / P.d4;
    let c3 = i32(r % P.d3) - i32(P.lo3);
    r = r / P.d3;
    let c2 = i32(r % P.d2) - i32(P.lo2);
    r = r / P.d2;
    let c1 = i32(r % P.d1) - i32(P.lo1);
    r = r / P.d1;
    let c0 = i32(r) - i32(P.lo0);
    var v = P.value;
    if (c0 >= 0 && c0 < i32(P.in0) && c1 >= 0 && c1 < i32(P.in1) && c2 >= 0 && c2 < i32(P.in2) && c3 >= 0 && c3 < i32(P.in3) && c4 >= 0 && c4 < i32(P.in4) && c5 >= 0 && c5 < i32(P.in5)) {
        v = x[u32(P.off + c0 * P.s0 + c1 * P.s1 + c2 * P.s2 + c3 * P.s3 + c4 * P.s4 + c5 * P.s5)];
    }
    y[i] = v;
}
