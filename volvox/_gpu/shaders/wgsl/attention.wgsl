// attention: causal grouped-query attention of seq new queries over the KV cache (online softmax).
// q, y (seq, n_heads * head_dim); k_cache, v_cache (n_kv_heads, capacity, head_dim) as
// volvox/runtime/kv_cache.py lays them out, already holding positions 0 .. start + seq.
// One workgroup per (head, query row); thread t owns output dims t and t + 64 (head_dim <= 128).

struct Params {
    seq: u32,
    start: u32,      // tokens cached before this run (absolute position of query 0)
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    capacity: u32,
    causal: u32,
    window: u32,     // 0: unlimited, else query i sees keys j with i - window < j <= i
    scale: f32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_cache: array<f32>;
@group(0) @binding(2) var<storage, read> v_cache: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> P: Params;

const BLOCK: u32 = 64u;
var<workgroup> qs: array<f32, 128>;      // this query row's head
var<workgroup> scores: array<f32, 64>;   // one key block's scaled scores

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let h = wid.x;
    let s = wid.y;
    let hd = P.head_dim;
    let kvh = h / (P.n_heads / P.n_kv_heads);
    let qbase = (s * P.n_heads + h) * hd;
    let cbase = kvh * P.capacity * hd;
    if (t < hd) { qs[t] = q[qbase + t]; }
    if (t + 64u < hd) { qs[t + 64u] = q[qbase + t + 64u]; }
    workgroupBarrier();

    let qpos = P.start + s;
    var kend = P.start + P.seq;
    var kbeg = 0u;
    if (P.causal != 0u) {
        kend = qpos + 1u;
        if (P.window > 0u && qpos + 1u > P.window) { kbeg = qpos + 1u - P.window; }
    }
    var m = -1.0e30;   // running max
    var l = 0.0;       // running sum of exp
    var acc0 = 0.0;    // output dim t
    var acc1 = 0.0;    // output dim t + 64
    for (var j0 = kbeg; j0 < kend; j0 = j0 + BLOCK) {
        let j = j0 + t;
        var sv = -1.0e30;
        if (j < kend) {
            var dot = 0.0;
            for (var d = 0u; d < hd; d = d + 1u) { dot = dot + qs[d] * k_cache[cbase + j * hd + d]; }
            sv = dot * P.scale;
        }
        scores[t] = sv;
        workgroupBarrier();
        let count = min(BLOCK, kend - j0);
        var bm = m;
        for (var i = 0u; i < count; i = i + 1u) { bm = max(bm, scores[i]); }
        let corr = exp(m - bm);
        l = l * corr;
        acc0 = acc0 * corr;
        acc1 = acc1 * corr;
        for (var i = 0u; i < count; i = i + 1u) {
            let p = exp(scores[i] - bm);
            l = l + p;
            let vrow = cbase + (j0 + i) * hd;
            if (t < hd) { acc0 = acc0 + p * v_cache[vrow + t]; }
            if (t + 64u < hd) { acc1 = acc1 + p * v_cache[vrow + t + 64u]; }
        }
        m = bm;
        workgroupBarrier();
    }
    if (t < hd) { y[qbase + t] = acc0 / l; }
    if (t + 64u < hd) { y[qbase + t + 64u] = acc1 / l; }
}
