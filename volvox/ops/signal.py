"""Signal processing ops in ONNX's layout (a trailing axis of 1 for real, 2 for complex values): the
discrete Fourier transform (``dft``, forward / inverse, one-sided), the short-time Fourier transform
(``stft``) and the mel filter bank matrix (``mel_weight_matrix``). numpy's FFT is the implementation;
a plan runs them as islands.
"""

from __future__ import annotations

import numpy as np

from volvox.ir.graph import expect
from volvox.ops.registry import OpDef, register

SIGNAL_DTYPES = ("float32", "float16", "float64")


def _as_complex(x: np.ndarray) -> np.ndarray:
    """x (..., 1 | 2) as complex values (...)."""
    return x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]


def _as_pairs(values: np.ndarray) -> np.ndarray:
    """Complex values (...) as (..., 2) real / imaginary pairs."""
    return np.stack([values.real, values.imag], axis=-1)


def dft_length_of(shape: tuple, params: dict) -> int:
    """The transform length: ``length``, else the axis's size (twice the size less one for an inverse
    one-sided transform)."""
    if params.get("length"):
        return int(params["length"])
    size = shape[params["axis"]]
    return 2 * (size - 1) if params.get("inverse") and params.get("onesided") else size


def _dft_infer(specs, params):
    x = specs["x"]
    axis = params["axis"]
    expect(x.dtype in SIGNAL_DTYPES and len(x.shape) >= 2 and x.shape[-1] in (1, 2) and 0 <= axis < len(x.shape) - 1
           and isinstance(x.shape[axis], int), f"dft needs float (..., 1 | 2) x and a signal axis, got {x.describe()}")
    length = dft_length_of(x.shape, params)
    out = list(x.shape)
    if params.get("inverse") and params.get("onesided"):
        out[axis], out[-1] = length, 1
    else:
        out[axis] = length // 2 + 1 if params.get("onesided") else length
        out[-1] = 2
    return {"y": (tuple(out), x.dtype)}


def dft_ref(ctx, p, x):
    """ONNX DFT along ``axis`` (of x, before its trailing pair axis), zero-padded or cut to the length;
    ``onesided`` keeps the non-negative frequencies (an inverse one takes them and gives real values)."""
    axis, length = p["axis"], dft_length_of(x.shape, p)
    values = _as_complex(x)
    if p.get("inverse"):
        if p.get("onesided"):
            return np.fft.irfft(values, n=length, axis=axis)[..., None].astype(x.dtype)
        return _as_pairs(np.fft.ifft(values, n=length, axis=axis)).astype(x.dtype)
    spectrum = np.fft.fft(values, n=length, axis=axis)
    if p.get("onesided"):
        spectrum = np.take(spectrum, np.arange(length // 2 + 1), axis=axis)
    return _as_pairs(spectrum).astype(x.dtype)


def _stft_infer(specs, params):
    x = specs["x"]
    expect(x.dtype in SIGNAL_DTYPES and len(x.shape) == 3 and x.shape[-1] in (1, 2) and isinstance(x.shape[1], int),
           f"stft needs a float (batch, samples, 1 | 2) signal, got {x.describe()}")
    frame = int(params["frame_length"])
    frames = 1 + (x.shape[1] - frame) // int(params["frame_step"])
    expect(frames > 0 and frame > 0, f"stft frames of {frame} samples do not fit {x.describe()}")
    bins = frame // 2 + 1 if params.get("onesided", 1) else frame
    return {"y": ((x.shape[0], frames, bins, 2), x.dtype)}


def stft_ref(ctx, p, x, window=None):
    """ONNX STFT: frames of ``frame_length`` samples every ``frame_step``, times ``window`` (ones when
    absent), each Fourier transformed (``onesided``: the non-negative frequencies)."""
    frame, step = int(p["frame_length"]), int(p["frame_step"])
    frames = 1 + (x.shape[1] - frame) // step
    starts = np.arange(frames)[:, None] * step + np.arange(frame)[None, :]        # (frames, frame)
    signal = _as_complex(x)[:, starts]                                             # (batch, frames, frame)
    if window is not None:
        signal = signal * window.reshape(1, 1, frame)
    spectrum = np.fft.fft(signal, n=frame, axis=-1)
    if p.get("onesided", 1):
        spectrum = spectrum[..., :frame // 2 + 1]
    return _as_pairs(spectrum).astype(x.dtype)


def _mel_infer(specs, params):
    return {"y": ((int(params["dft_length"]) // 2 + 1, int(params["num_mel_bins"])), params.get("to", "float32"))}


def mel_weight_matrix_ref(ctx, p):
    """ONNX MelWeightMatrix: (dft_length / 2 + 1, num_mel_bins) triangular filters, their edges evenly
    spaced on the mel scale between the edge frequencies and floored to DFT bins, as onnx's reference."""
    bins, length, rate = int(p["num_mel_bins"]), int(p["dft_length"]), int(p["sample_rate"])
    low, high = (2595 * np.log1p(p[k] / 700) / np.log(10) for k in ("lower_edge_hertz", "upper_edge_hertz"))
    step = (high - low) / (bins + 2)
    hertz = 700 * np.expm1((np.arange(bins + 2) * step + low) / 2595 * np.log(10))
    edges = ((length + 1) * hertz // rate).astype(int)
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):
        left, centre, right = edges[i], edges[i + 1], edges[i + 2]
        if centre == left:
            out[centre, i] = 1
        else:
            out[left:centre + 1, i] = (np.arange(left, centre + 1) - left) / (centre - left)
        if right > centre:
            out[centre:right, i] = (right - np.arange(centre, right)) / (right - centre)
    return out.astype(p.get("to", "float32"))


register(OpDef("dft", "signal", ("x",), ("y",), _dft_infer, dft_ref))
register(OpDef("stft", "signal", ("x", "window?"), ("y",), _stft_infer, stft_ref))
register(OpDef("mel_weight_matrix", "signal", (), ("y",), _mel_infer, mel_weight_matrix_ref))
