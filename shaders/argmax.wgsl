// argmax: the id of the largest of n logits, the lowest id among equals (numpy's argmax), written
// as one u32: greedy decoding on the device, so a token costs a 4-byte download, not the logits.
// One workgroup of 256 threads: each scans a strided share, then a tree reduction.

struct Params {
    n: u32,          // vocabulary size (the logits row)
}

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> token: array<u32>;
@group(0) @binding(2) var<storage, read> P: Params;

const WG: u32 = 256u;
var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32) {
    var v = -3.0e38;
    var id = 0xffffffffu;
    for (var i = t; i < P.n; i = i + WG) {
        let x = logits[i];
        if (x > v || id == 0xffffffffu) { v = x; id = i; }
    }
    best_v[t] = v;
    best_i[t] = id;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (t < s) {
            let ov = best_v[t + s];
            let oi = best_i[t + s];
            if (oi != 0xffffffffu && (best_i[t] == 0xffffffffu || ov > best_v[t] || (ov == best_v[t] && oi < best_i[t]))) {
                best_v[t] = ov;
                best_i[t] = oi;
            }
        }
        workgroupBarrier();
    }
    if (t == 0u) { token[0] = best_i[0]; }
}
