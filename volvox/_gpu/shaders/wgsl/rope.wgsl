// rope: rotate pairs of each head's first rope_dim dims by angle position / scale * inv_freq[i].
// style 0 "half": pairs (i, i + rope_dim/2) (HF / NeoX); style 1 "interleaved": pairs (2i, 2i+1) (GGUF).
// x, y (seq, heads * head_dim); positions (seq,) int32; inv_freq (rope_dim / 2,).

struct Params {
    n: u32,          // elements of y
    head_dim: u32,
    row: u32,        // heads * head_dim
    rope_dim: u32,
    style: u32,
    inv_scale: f32,  // 1 / position scale
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> positions: array<i32>;
@group(0) @binding(2) var<storage, read> inv_freq: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> P: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = (wid.y * nwg.x + wid.x) * 64u + li;
    if (i >= P.n) { return; }
    let d = i % P.head_dim;
    if (d >= P.rope_dim) { y[i] = x[i]; return; }
    let pos = f32(positions[i / P.row]) * P.inv_scale;
    let h = P.rope_dim / 2u;
    var pair: u32;        // index of the pair (angle)
    var first: bool;      // this element is the pair's first member
    var partner: u32;     // flat index of the other member
    if (P.style == 1u) {
        pair = d / 2u;
        first = (d % 2u) == 0u;
        partner = select(i - 1u, i + 1u, first);
    } else {
        first = d < h;
        pair = select(d - h, d, first);
        partner = select(i - h, i + h, first);
    }
    let ang = pos * inv_freq[pair];
    let c = cos(ang);
    let s = sin(ang);
    if (first) {
        y[i] = x[i] * c - x[partner] * s;
    } else {
        y[i] = x[partner] * s + x[i] * c;
    }
}
