// The packed weight reader of matmul_q, gemv_q and embedding_q (included by each: volvox/_gpu/wgsl_include.py).
// The including kernel declares `w: array<u32>` (the chunk) and `P` with the fields K, head_off, wtype.
// A weight chunk `w` holds rows [0, rows) of a (rows, K) matrix in its stored type (docs/backends.md,
// "Quantized weights in shaders"): f32 as its bits, f16 as packed halves (element e at half e of the
// chunk), block types as every block's quant bytes (the body, body words a block) followed at word
// P.head_off by the blocks' f16 scales (the head, head halves a block), both row-major over blocks.
const WT_F32: u32 = 0u;
const WT_F16: u32 = 1u;
const WT_Q8_0: u32 = 2u;
const WT_Q4_0: u32 = 3u;
const WT_Q4_1: u32 = 4u;
const WT_Q4_K: u32 = 5u;
const WT_Q6_K: u32 = 6u;

fn head_half(i: u32) -> f32 {  // f16 scale i of the chunk's head
    return unpack2x16float(w[P.head_off + (i >> 1u)])[i & 1u];
}

fn body_byte(word: u32, b: u32) -> u32 {  // byte b of the body starting at word `word`
    return (w[word + (b >> 2u)] >> ((b & 3u) * 8u)) & 0xFFu;
}

fn q4k_scale_min(base: u32, sub: u32) -> vec2<u32> {  // (scale, min) of Q4_K sub-block `sub`: 6 bits each
    if (sub < 4u) {
        return vec2<u32>(body_byte(base, sub) & 63u, body_byte(base, sub + 4u) & 63u);
    }
    return vec2<u32>((body_byte(base, sub + 4u) & 15u) | ((body_byte(base, sub - 4u) >> 6u) << 4u),
                     (body_byte(base, sub + 4u) >> 4u) | ((body_byte(base, sub) >> 6u) << 4u));
}

struct Q6KAt {  // where W[row, k] of a Q6_K chunk is stored
    blk: u32,       // its super-block
    base: u32,      // the super-block's first body word
    ql: u32,        // byte (from base) holding its low 4 bits
    qh: u32,        // byte (from base) holding its high 2 bits
    ql_shift: u32,  // the low bits' shift in their byte
    qh_shift: u32,  // the high bits' shift in theirs
}

fn q6k_at(row: u32, k: u32) -> Q6KAt {  // ql[128] qh[64] scales int8[16]; d
    let blk = row * (P.K >> 8u) + (k >> 8u);
    let j = k & 255u;
    let upper = j >> 7u;
    let nibble = (j >> 6u) & 1u;
    let part = (j >> 5u) & 1u;
    let l = j & 31u;
    return Q6KAt(blk, blk * 52u, upper * 64u + part * 32u + l, 128u + upper * 32u + l, nibble * 4u,
                 nibble * 4u + part * 2u);
}

fn q6k_scale(at: Q6KAt, k: u32) -> f32 {  // d * the int8 scale of the 16 values around W[row, k]
    return head_half(at.blk) * f32(bitcast<i32>(body_byte(at.base, 192u + ((k & 255u) >> 4u)) << 24u) >> 24u);
}

fn weight_at(row: u32, k: u32) -> f32 {  // W[row, k] of the chunk, dequantized
    switch P.wtype {
        case WT_F32: { return bitcast<f32>(w[row * P.K + k]); }
        case WT_F16: {
            let e = row * P.K + k;
            return unpack2x16float(w[e >> 1u])[e & 1u];
        }
        case WT_Q8_0: {  // d; 32 int8
            let blk = row * (P.K >> 5u) + (k >> 5u);
            let q = bitcast<i32>(body_byte(blk * 8u, k & 31u) << 24u) >> 24u;
            return f32(q) * head_half(blk);
        }
        case WT_Q4_0, WT_Q4_1: {  // d (, m); 16 bytes: low nibbles values 0..15, high nibbles 16..31
            let blk = row * (P.K >> 5u) + (k >> 5u);
            let j = k & 31u;
            let q = f32((body_byte(blk * 4u, j & 15u) >> ((j >> 4u) * 4u)) & 15u);
            if (P.wtype == WT_Q4_0) { return (q - 8.0) * head_half(blk); }
            return q * head_half(2u * blk) + head_half(2u * blk + 1u);
        }
        case WT_Q4_K: {  // d, dmin; scales[12]; qs[128]: 32 bytes per two sub-blocks of 32 (low, high nibbles)
            let blk = row * (P.K >> 8u) + (k >> 8u);
            let j = k & 255u;
            let sub = j >> 5u;
            let base = blk * 35u;
            let q = f32((body_byte(base, 12u + (sub >> 1u) * 32u + (j & 31u)) >> ((sub & 1u) * 4u)) & 15u);
            let sm = q4k_scale_min(base, sub);
            return head_half(2u * blk) * f32(sm.x) * q - head_half(2u * blk + 1u) * f32(sm.y);
        }
        case WT_Q6_K: {
            let at = q6k_at(row, k);
            let lo = (body_byte(at.base, at.ql) >> at.ql_shift) & 15u;
            let hi = (body_byte(at.base, at.qh) >> at.qh_shift) & 3u;
            return q6k_scale(at, k) * (f32(lo | (hi << 4u)) - 32.0);
        }
        default: { return 0.0; }
    }
}
fn nibbles4(word: u32, shift: u32) -> vec4<f32> {  // the 4-bit fields at ``shift`` of the word's 4 bytes
    return vec4<f32>(f32((word >> shift) & 15u), f32((word >> (shift + 8u)) & 15u),
                     f32((word >> (shift + 16u)) & 15u), f32((word >> (shift + 24u)) & 15u));
}

fn weight4_at(row: u32, k: u32) -> vec4<f32> {  // W[row, k..k+3] of the chunk; k and P.K multiples of 4
    switch P.wtype {
        case WT_F32: {
            let e = row * P.K + k;
            return vec4<f32>(bitcast<f32>(w[e]), bitcast<f32>(w[e + 1u]), bitcast<f32>(w[e + 2u]), bitcast<f32>(w[e + 3u]));
        }
        case WT_F16: {
            let e = (row * P.K + k) >> 1u;
            return vec4<f32>(unpack2x16float(w[e]), unpack2x16float(w[e + 1u]));
        }
        case WT_Q8_0: {
            let blk = row * (P.K >> 5u) + (k >> 5u);
            let q = bitcast<vec4<i32>>(vec4<u32>(w[blk * 8u + ((k & 31u) >> 2u)]) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u);
            return vec4<f32>(q) * head_half(blk);
        }
        case WT_Q4_0, WT_Q4_1: {
            let blk = row * (P.K >> 5u) + (k >> 5u);
            let j = k & 31u;
            let q = nibbles4(w[blk * 4u + ((j & 15u) >> 2u)], (j >> 4u) * 4u);
            if (P.wtype == WT_Q4_0) { return (q - 8.0) * head_half(blk); }
            return q * head_half(2u * blk) + head_half(2u * blk + 1u);
        }
        case WT_Q4_K: {
            let blk = row * (P.K >> 8u) + (k >> 8u);
            let j = k & 255u;
            let sub = j >> 5u;
            let base = blk * 35u;
            let q = nibbles4(w[base + 3u + (sub >> 1u) * 8u + ((j & 31u) >> 2u)], (sub & 1u) * 4u);
            let sm = q4k_scale_min(base, sub);
            return head_half(2u * blk) * f32(sm.x) * q - head_half(2u * blk + 1u) * f32(sm.y);
        }
        case WT_Q6_K: {
            let at = q6k_at(row, k);
            let lo = vec4<u32>(w[at.base + at.ql / 4u]) >> vec4<u32>(0u, 8u, 16u, 24u);
            let hi = vec4<u32>(w[at.base + at.qh / 4u]) >> vec4<u32>(0u, 8u, 16u, 24u);
            let q = ((lo >> vec4<u32>(at.ql_shift)) & vec4<u32>(15u)) | (((hi >> vec4<u32>(at.qh_shift)) & vec4<u32>(3u)) << vec4<u32>(4u));
            return q6k_scale(at, k) * (vec4<f32>(q) - 32.0);
        }
        default: { return vec4<f32>(0.0); }
    }
}
