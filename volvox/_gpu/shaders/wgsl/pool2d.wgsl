// max / average pooling NHWC (global average pooling is a window covering the image).
// mode 0 max (padding never wins), 1 average over in-image taps, 2 average counting padding.
// act: 0 none, 1 relu, 2 relu6. x (N, H, W, C), y (N, OH, OW, C).

struct Params {
    n: u32,          // elements of y
    H: u32, W: u32, C: u32,
    OH: u32, OW: u32,
    kh: u32, kw: u32,
    sh: u32, sw: u32,
    pt: u32, pl: u32,
    mode: u32,
    act: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> P: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = (wid.y * nwg.x + wid.x) * 64u + li;
    if (i >= P.n) { return; }
    let c = i % P.C;
    let ox = (i / P.C) % P.OW;
    let oy = (i / (P.C * P.OW)) % P.OH;
    let b = i / (P.C * P.OW * P.OH);
    var acc = 0.0;
    if (P.mode == 0u) { acc = -3.4e38; }
    var count = 0.0;
    for (var ky = 0u; ky < P.kh; ky = ky + 1u) {
        let iy = i32(oy * P.sh + ky) - i32(P.pt);
        if (iy < 0 || iy >= i32(P.H)) { continue; }
        for (var kx = 0u; kx < P.kw; kx = kx + 1u) {
            let ix = i32(ox * P.sw + kx) - i32(P.pl);
            if (ix < 0 || ix >= i32(P.W)) { continue; }
            let v = x[((b * P.H + u32(iy)) * P.W + u32(ix)) * P.C + c];
            if (P.mode == 0u) { acc = max(acc, v); } else { acc = acc + v; }
            count = count + 1.0;
        }
    }
    if (P.mode == 1u) { acc = acc / count; }
    if (P.mode == 2u) { acc = acc / f32(P.kh * P.kw); }
    if (P.act == 1u) { acc = max(acc, 0.0); }
    if (P.act == 2u) { acc = clamp(acc, 0.0, 6.0); }
    y[i] = acc;
}
