"""Critically sampled polyphase filter bank (PFB) for real input: the NumPy float64 reference.

Conventions (the GPU F-engine matches these exactly; docs/fengine.md):

- ``nchan`` output channels come from ``N = 2 * nchan`` real samples per spectrum;
  the filter has ``L = taps * N`` weights, and spectrum ``s`` (counted from the
  first input sample) uses inputs ``x[s*N : s*N + L]``: consecutive windows step by
  ``N`` and overlap by ``L - N`` (critical sampling, Merry 2023, eq. 1).
- Weights, for ``n = 0 .. L-1`` and centre ``c = (L - 1) / 2``::

      h[n] = 0.5 * (1 - cos(2 pi (n + 0.5) / L))          Hann, never zero at the ends
      s[n] = sinc((n - c) / N),  sinc(u) = sin(pi u) / (pi u), sinc(0) = 1
      w[n] = h[n] s[n] / sqrt(sum_m (h[m] s[m])^2)         so that sum(w**2) == 1

  all in float64. The sinc's first nulls are one FFT length from the centre, so its
  pass band is one channel wide: the response is -6 dB at the channel edges.
- FIR: ``g[s, t] = sum_{j<taps} x[s*N + t + j*N] * w[j*N + t]`` for ``t < N``.
- FFT: ``X[s, k] = sum_t g[s, t] exp(-2 pi i k t / N)`` (NumPy's rfft), keeping
  ``k = 0 .. nchan-1``: the Nyquist bin ``k = nchan`` (real for real input, no phase)
  is dropped so the channel count stays a power of two, as MeerKAT does.
- Channel ``k`` is centred on baseband frequency ``k * fs / N`` (``fs`` = sample rate)
  and is ``fs / N`` wide; channel 0 straddles DC.
- Together: ``X[s, k] = sum_{n<L} x[s*N + n] w[n] exp(-2 pi i k n / N)``, a windowed
  DFT whose phase is referred to the first sample of the window. A complex tone
  ``exp(2 pi i (k + d) n / N)`` at offset ``d`` channels from channel ``k`` therefore
  gives ``|X[s, k]| = |W(d)|`` with ``W(d) = sum_n w[n] exp(2 pi i d n / N)``; a real
  tone ``A cos(...)`` gives half of that times ``A`` (plus its negative-frequency
  image, negligible away from DC and Nyquist). ``channel_response`` returns ``|W|``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import scipy.fft

from voltstream.errors import ConfigError

__all__ = [
    "MAX_CHANNELS",
    "MAX_TAPS",
    "channel_frequencies",
    "channel_response",
    "check_pfb_shape",
    "pfb_channelize",
    "pfb_fir",
    "pfb_weights",
]

MAX_CHANNELS = 65536
MAX_TAPS = 16


def check_pfb_shape(nchan: int, taps: int) -> tuple[int, int]:
    """Validates a channel count (power of two, 2..65536) and a tap count (1..16)."""
    nchan_i, taps_i = int(nchan), int(taps)
    if nchan_i != nchan or nchan_i < 2 or nchan_i > MAX_CHANNELS or nchan_i & (nchan_i - 1):
        raise ConfigError(
            f"nchan={nchan} is not supported: give a power of two from 2 to {MAX_CHANNELS} "
            "(MeerKAT uses 1024, 4096 or 32768)"
        )
    if taps_i != taps or taps_i < 1 or taps_i > MAX_TAPS:
        raise ConfigError(f"taps={taps} is not supported: give an integer from 1 to {MAX_TAPS}")
    return nchan_i, taps_i


def pfb_weights(nchan: int, taps: int, window: str = "hann") -> np.ndarray:
    """Hann-windowed sinc weights, float64 ``(taps * 2 * nchan,)``, sum of squares 1."""
    nchan, taps = check_pfb_shape(nchan, taps)
    if window != "hann":
        raise ConfigError(f"PFB window {window!r} is not supported: use 'hann'")
    step = 2 * nchan
    length = taps * step
    # The length is even: compute the first half and mirror it, so w is exactly symmetric.
    n = np.arange(length // 2, dtype=np.float64)
    hann = 0.5 - 0.5 * np.cos(2.0 * np.pi * (n + 0.5) / length)
    half = hann * np.sinc((n - (length - 1) / 2.0) / step)
    w = np.concatenate([half, half[::-1]])
    return w / np.sqrt(np.sum(w * w))


def _weights_for(weights: np.ndarray, nchan: int) -> tuple[np.ndarray, int]:
    w = np.asarray(weights, dtype=np.float64)
    step = 2 * int(nchan)
    if w.ndim != 1 or w.size == 0 or w.size % step:
        raise ConfigError(
            f"PFB weights of shape {w.shape} do not fit {nchan} channels: "
            f"give a 1-D array whose length is a multiple of {step} (pfb_weights makes one)"
        )
    return w, w.size // step


def pfb_fir(x: npt.ArrayLike, weights: np.ndarray, nchan: int) -> np.ndarray:
    """Polyphase FIR: real ``(nsamp,)`` -> float64 ``(nspec, 2*nchan)``.

    ``nspec = (nsamp - L) // N + 1`` (0 when ``nsamp < L``); trailing samples that do
    not complete a window are ignored.
    """
    w, taps = _weights_for(weights, nchan)
    step = 2 * int(nchan)
    x = np.asarray(x)
    if x.ndim != 1 or np.iscomplexobj(x):
        raise ConfigError("pfb_fir takes a 1-D array of real samples; split polarisations first")
    nspec = max(0, (x.size - w.size) // step + 1)
    out = np.zeros((nspec, step), dtype=np.float64)
    if nspec == 0:
        return out
    rows = x[: (nspec + taps - 1) * step].astype(np.float64).reshape(nspec + taps - 1, step)
    taps_w = w.reshape(taps, step)
    for j in range(taps):
        out += rows[j : j + nspec] * taps_w[j]
    return out


def pfb_channelize(
    x: np.ndarray, nchan: int, taps: int, weights: np.ndarray | None = None
) -> np.ndarray:
    """FIR + real-to-complex FFT: real ``(nsamp,)`` -> complex128 ``(nspec, nchan)``.

    ``weights`` defaults to ``pfb_weights(nchan, taps)``; the Nyquist bin is dropped.
    """
    nchan, taps = check_pfb_shape(nchan, taps)
    if weights is None:
        weights = pfb_weights(nchan, taps)
    g = pfb_fir(x, weights, nchan)
    return scipy.fft.rfft(g, axis=-1)[:, :nchan]


def channel_frequencies(nchan: int, sample_rate_hz: float) -> np.ndarray:
    """Baseband centre frequency (Hz) of each channel: ``k * fs / (2 * nchan)``."""
    if not sample_rate_hz > 0:
        raise ConfigError(f"sample rate {sample_rate_hz} Hz must be positive")
    return np.arange(int(nchan), dtype=np.float64) * (float(sample_rate_hz) / (2 * int(nchan)))


def channel_response(weights: np.ndarray, nchan: int, offsets: npt.ArrayLike) -> np.ndarray:
    """Amplitude response ``|W(d)|`` of a channel to a unit complex tone ``d`` channels off.

    ``W(d) = sum_n w[n] exp(2 pi i d n / (2 nchan))``: the Fourier transform of the
    weights sampled at the tone's offset from the channel centre. ``|W(0)| = sum(w)``.
    A real tone of amplitude ``A`` gives ``A / 2 * |W(d)|``. Float64, ``offsets``' shape.
    """
    w, _ = _weights_for(weights, nchan)
    d = np.asarray(offsets, dtype=np.float64)
    flat = d.reshape(-1)
    n = np.arange(w.size, dtype=np.float64)
    # Symmetric weights would allow a cosine sum; the complex sum keeps any weights exact.
    out = np.empty(flat.size, dtype=np.float64)
    block = max(1, (1 << 22) // w.size)
    for i in range(0, flat.size, block):
        phase = (2.0 * np.pi / (2 * int(nchan))) * np.outer(flat[i : i + block], n)
        out[i : i + block] = np.abs(np.exp(1j * phase) @ w)
    return out.reshape(d.shape)
