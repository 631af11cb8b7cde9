// The fused activations of matmul, matmul_q and gemv_q, applied as an output is written (included by
// each: volvox/_gpu/wgsl_include.py); the including kernel carries the FN_* codes (tools/gen_codes.py).
fn erf_approx(v: f32) -> f32 {
    // Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7
    let a = abs(v);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return sign(v) * (1.0 - poly * exp(-a * a));
}

fn activate(v: f32, act: u32) -> f32 {
    switch act {
        case FN_RELU: { return max(v, 0.0); }
        case FN_RELU6: { return clamp(v, 0.0, 6.0); }
        case FN_SILU: { return v / (1.0 + exp(-v)); }
        case FN_GELU: { return 0.5 * v * (1.0 + erf_approx(v * 0.70710678118654752)); }
        case FN_SIGMOID: { return 1.0 / (1.0 + exp(-v)); }
        case FN_GELU_TANH: { return v / (1.0 + exp(-1.5957691216057308 * (v + 0.044715 * v * v * v))); }  // 0.5(1+tanh(u)) = sigmoid(2u)
        case FN_HARD_SWISH: { return v * clamp(v + 3.0, 0.0, 6.0) / 6.0; }
        default: { return v; }
    }
}
