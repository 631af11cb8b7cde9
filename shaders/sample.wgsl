// sample: one token drawn on the device from softmax(logits / temperature), cut to the top_k largest
// logits (0: no cut, ties by lower id) and then to the smallest nucleus of mass >= top_p taken in
// descending order (1: no cut, ties by lower id), written as one u32.
//
// The uniform draw is counter-based, so a token depends only on (seed, step), never on earlier
// draws: h = pcg(pcg(pcg(seed_hi) ^ seed_lo) + step), u = (h >> 8) / 2^24 in [0, 1), with pcg the
// PCG-RXS-M-XS 32-bit hash. The token is the first id, in id order, whose running sum of kept
// weights exceeds u * (sum of kept weights).
//
// One workgroup of 256 threads. The k-th largest logit and the nucleus edge are found by a bitwise
// search over the order-preserving u32 key of a float (32 counting passes each) and the ties at
// the edge by a bitwise search over ids, so the cut is exact without sorting the vocabulary.
// Every thread takes the same decision from the reduced value, so the searches need no broadcast.

struct Params {
    n: u32,            // vocabulary size (the logits row)
    top_k: u32,        // 0: no cut
    temperature: f32,  // > 0
    top_p: f32,        // 1: no cut
    seed_lo: u32,
    seed_hi: u32,
    step: u32,         // the generator's counter: tokens drawn before this one with this seed
}

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> token: array<u32>;
@group(0) @binding(2) var<storage, read> P: Params;

const WG: u32 = 256u;
var<workgroup> sums: array<f32, 256>;    // per-thread partial masses, then their tree reduction
var<workgroup> counts: array<u32, 256>;  // per-thread partial counts, then their tree reduction
var<workgroup> top: array<f32, 256>;     // per-thread maxima, then their tree reduction

fn order_key(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    if ((b >> 31u) == 1u) { return ~b; }
    return b | 0x80000000u;
}

fn pcg(v: u32) -> u32 {
    let s = v * 747796405u + 2891336453u;
    let w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;
    return (w >> 22u) ^ w;
}

// logit i's key is above the cut (edge key, last tie id kept)
fn above(key: u32, i: u32, edge: u32, last_tie: u32) -> bool {
    return key > edge || (key == edge && i <= last_tie);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32) {
    let n = P.n;
    let id_bits = 32u - countLeadingZeros(n);
    // 1. the largest logit (the weights are exp((x - max) / temperature) <= 1)
    var m = -3.0e38;
    for (var i = t; i < n; i = i + WG) { m = max(m, logits[i]); }
    top[t] = m;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (t < s) { top[t] = max(top[t], top[t + s]); }
        workgroupBarrier();
    }
    let mx = top[0];

    // 2. top-k: k_edge = the key of the k-th largest logit, ties kept up to id k_last
    var k_edge = 0u;
    var k_last = 0xffffffffu;
    if (P.top_k > 0u) {
        for (var b = 0u; b < 32u; b = b + 1u) {
            let cand = k_edge | (0x80000000u >> b);
            var c = 0u;
            for (var i = t; i < n; i = i + WG) { if (order_key(logits[i]) >= cand) { c = c + 1u; } }
            counts[t] = c;
            workgroupBarrier();
            for (var s = WG / 2u; s > 0u; s = s >> 1u) {
                if (t < s) { counts[t] = counts[t] + counts[t + s]; }
                workgroupBarrier();
            }
            if (counts[0] >= P.top_k) { k_edge = cand; }
            workgroupBarrier();
        }
        var c = 0u;
        for (var i = t; i < n; i = i + WG) { if (order_key(logits[i]) > k_edge) { c = c + 1u; } }
        counts[t] = c;
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s = s >> 1u) {
            if (t < s) { counts[t] = counts[t] + counts[t + s]; }
            workgroupBarrier();
        }
        let ties_wanted = P.top_k - min(counts[0], P.top_k);
        workgroupBarrier();
        // the largest id bound whose ties below it are fewer than wanted: that tie is the last kept
        var bound = 0u;
        for (var b = 0u; b < id_bits; b = b + 1u) {
            let cand = bound | (1u << (id_bits - 1u - b));
            var c2 = 0u;
            for (var i = t; i < n && i < cand; i = i + WG) { if (order_key(logits[i]) == k_edge) { c2 = c2 + 1u; } }
            counts[t] = c2;
            workgroupBarrier();
            for (var s = WG / 2u; s > 0u; s = s >> 1u) {
                if (t < s) { counts[t] = counts[t] + counts[t + s]; }
                workgroupBarrier();
            }
            if (counts[0] < ties_wanted) { bound = cand; }
            workgroupBarrier();
        }
        k_last = bound;
    }

    // 3. top-p over the top-k survivors: p_edge = the key where the descending mass reaches top_p
    var p_edge = 0u;
    var p_last = 0xffffffffu;
    if (P.top_p < 1.0) {
        var w = 0.0;
        for (var i = t; i < n; i = i + WG) {
            let x = logits[i];
            if (above(order_key(x), i, k_edge, k_last)) { w = w + exp((x - mx) / P.temperature); }
        }
        sums[t] = w;
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s = s >> 1u) {
            if (t < s) { sums[t] = sums[t] + sums[t + s]; }
            workgroupBarrier();
        }
        let goal = P.top_p * sums[0];
        workgroupBarrier();
        for (var b = 0u; b < 32u; b = b + 1u) {
            let cand = p_edge | (0x80000000u >> b);
            var w2 = 0.0;
            for (var i = t; i < n; i = i + WG) {
                let x = logits[i];
                let key = order_key(x);
                if (key >= cand && above(key, i, k_edge, k_last)) { w2 = w2 + exp((x - mx) / P.temperature); }
            }
            sums[t] = w2;
            workgroupBarrier();
            for (var s = WG / 2u; s > 0u; s = s >> 1u) {
                if (t < s) { sums[t] = sums[t] + sums[t + s]; }
                workgroupBarrier();
            }
            if (sums[0] >= goal) { p_edge = cand; }
            workgroupBarrier();
        }
        // mass strictly above the edge, then the ties at the edge in id order until the goal
        var w3 = 0.0;
        for (var i = t; i < n; i = i + WG) {
            let x = logits[i];
            let key = order_key(x);
            if (key > p_edge && above(key, i, k_edge, k_last)) { w3 = w3 + exp((x - mx) / P.temperature); }
        }
        sums[t] = w3;
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s = s >> 1u) {
            if (t < s) { sums[t] = sums[t] + sums[t + s]; }
            workgroupBarrier();
        }
        let above_mass = sums[0];
        workgroupBarrier();
        var bound = 0u;
        for (var b = 0u; b < id_bits; b = b + 1u) {
            let cand = bound | (1u << (id_bits - 1u - b));
            var w4 = 0.0;
            for (var i = t; i < n && i < cand; i = i + WG) {
                let x = logits[i];
                let key = order_key(x);
                if (key == p_edge && above(key, i, k_edge, k_last)) { w4 = w4 + exp((x - mx) / P.temperature); }
            }
            sums[t] = w4;
            workgroupBarrier();
            for (var s = WG / 2u; s > 0u; s = s >> 1u) {
                if (t < s) { sums[t] = sums[t] + sums[t + s]; }
                workgroupBarrier();
            }
            if (above_mass + sums[0] < goal) { bound = cand; }
            workgroupBarrier();
        }
        p_last = bound;
    }

    // 4. the draw: thread t sums the kept weights of ids [t * chunk, (t + 1) * chunk); thread 0 walks
    let chunk = (n + WG - 1u) / WG;
    var part = 0.0;
    for (var i = t * chunk; i < min(n, (t + 1u) * chunk); i = i + 1u) {
        let x = logits[i];
        let key = order_key(x);
        if (above(key, i, k_edge, k_last) && above(key, i, p_edge, p_last)) { part = part + exp((x - mx) / P.temperature); }
    }
    sums[t] = part;
    workgroupBarrier();
    if (t == 0u) {
        var total = 0.0;
        var last = 0u;  // the last chunk holding kept mass (the top logit is always kept)
        for (var j = 0u; j < WG; j = j + 1u) {
            total = total + sums[j];
            if (sums[j] > 0.0) { last = j; }
        }
        let h = pcg(pcg(pcg(P.seed_hi) ^ P.seed_lo) + P.step);
        var rest = f32(h >> 8u) * (1.0 / 16777216.0) * total;
        var pick = 0xffffffffu;
        var j = 0u;
        for (; j < last && rest >= sums[j]; j = j + 1u) { rest = rest - sums[j]; }
        for (var i = j * chunk; i < n; i = i + 1u) {
            let x = logits[i];
            let key = order_key(x);
            if (above(key, i, k_edge, k_last) && above(key, i, p_edge, p_last)) {
                pick = i;  // the last kept id seen: the answer when rounding leaves rest >= the chunk's sum
                rest = rest - exp((x - mx) / P.temperature);
                if (rest < 0.0) { break; }
            }
        }
        token[0] = pick;
    }
}
