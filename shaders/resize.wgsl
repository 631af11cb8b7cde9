// Resize NHWC, nearest or bilinear. Per axis an output index o reads source coordinate
// src = (o + a) * num / den - b, with (a, num, den, b) from volvox/ops/resize.py (axis_transform),
// which covers ONNX's and TFLite's coordinate rules. mode 0 nearest: src rounded by `rounding`
// (0 round_prefer_floor, 1 round_prefer_ceil: within 1e-6 of k + 0.5 is a tie, as onnxruntime;
// 2 floor, 3 ceil, 4 round_half_up) and clamped into the image;
// mode 1 bilinear: src clamped to [0, n - 1], pixels floor(src) and the next one (clamped) blended.
// x (N, H, W, C), y (N, OH, OW, C).

struct Params {
    n: u32,          // elements of y
    H: u32, W: u32, C: u32,
    OH: u32, OW: u32,
    mode: u32,
    rounding: u32,
    ay: f32, numy: f32, deny: f32, by: f32,
    ax: f32, numx: f32, denx: f32, bx: f32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> P: Params;

fn source(o: u32, a: f32, num: f32, den: f32, b: f32) -> f32 {
    return (f32(o) + a) * num / den - b;
}

fn nearest(src: f32, n: u32) -> u32 {
    let below = floor(src);
    let tie = abs(src - below - 0.5) <= 1e-6;
    var v = floor(src + 0.5);                                     // 4: round half up
    if (P.rounding == 0u && tie) { v = below; }
    if (P.rounding == 1u && tie) { v = below + 1.0; }
    if (P.rounding == 2u) { v = below; }
    if (P.rounding == 3u) { v = ceil(src); }
    return u32(clamp(v, 0.0, f32(n - 1u)));
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = (wid.y * nwg.x + wid.x) * 64u + li;
    if (i >= P.n) { return; }
    let c = i % P.C;
    let ox = (i / P.C) % P.OW;
    let oy = (i / (P.C * P.OW)) % P.OH;
    let row0 = (i / (P.C * P.OW * P.OH)) * P.H;   // first input row of this image
    let sy = source(oy, P.ay, P.numy, P.deny, P.by);
    let sx = source(ox, P.ax, P.numx, P.denx, P.bx);
    if (P.mode == 0u) {
        y[i] = x[((row0 + nearest(sy, P.H)) * P.W + nearest(sx, P.W)) * P.C + c];
        return;
    }
    let cy = clamp(sy, 0.0, f32(P.H - 1u));
    let cx = clamp(sx, 0.0, f32(P.W - 1u));
    let y0 = u32(floor(cy));
    let x0 = u32(floor(cx));
    let y1 = min(y0 + 1u, P.H - 1u);
    let x1 = min(x0 + 1u, P.W - 1u);
    let wy = cy - f32(y0);
    let wx = cx - f32(x0);
    let v00 = x[((row0 + y0) * P.W + x0) * P.C + c];
    let v01 = x[((row0 + y0) * P.W + x1) * P.C + c];
    let v10 = x[((row0 + y1) * P.W + x0) * P.C + c];
    let v11 = x[((row0 + y1) * P.W + x1) * P.C + c];
    let top = v00 + (v01 - v00) * wx;
    let bottom = v10 + (v11 - v10) * wx;
    y[i] = top + (bottom - top) * wy;
}
