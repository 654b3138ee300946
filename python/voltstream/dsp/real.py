"""Real-sampled channels to complex baseband, so real VDIF folds like complex data.

Most VLBI digitisers (DBBC3, R2DBE, RDBE) send each channel as real samples at
twice its bandwidth B. Coherent dedispersion here works on critically sampled
complex channels (one complex sample per 1/B), so a real channel goes through a
digital down-converter first, per channel and polarisation:

1. mix by ``exp(-i pi n / 2)`` (a shift of -fs/4 = -B/2): the channel's band
   [0, B] moves to [-B/2, B/2], its mirror image to [-3B/2, -B/2];
2. low-pass with a Kaiser-windowed sinc cut at B/2 (``TAPS`` taps, 80 dB stop band),
   which removes the mirror;
3. keep every second sample: complex samples at rate B, centred on the channel's
   centre frequency (a lower sideband stays inverted, as complex LSB data are).

The filter runs across blocks (its last ``TAPS - 1`` inputs are carried), so the
output is one continuous stream; its group delay, ``(TAPS - 1) / 2`` input samples,
is taken off the start time. An output sample whose filter span touched a lost
input sample is marked lost. The converted complex values are real values scaled
by 1/2 in amplitude (the positive-frequency half of the power), which folds do not
care about.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np

from voltstream.errors import ConfigError

__all__ = ["TAPS", "RealToComplex", "complex_observation", "halfband_lowpass"]

#: Filter length (odd: a whole-sample group delay, an even number of taps = 2 * 32).
TAPS = 65


def halfband_lowpass(taps: int = TAPS) -> np.ndarray:
    """A low-pass cut at a quarter of the input rate (float64, unit gain at DC)."""
    n = np.arange(taps) - (taps - 1) / 2
    h = 0.5 * np.sinc(0.5 * n) * np.kaiser(taps, 8.0)
    return h / h.sum()


def complex_observation(obs: Any, taps: int = TAPS) -> Any:
    """The complex baseband's observation of real-sampled ``obs``: ``ndim`` 2, the
    sample time doubled, the start later by the filter's group delay (the GPU fold,
    fold/gpu_real.py, is built with it, as the CPU fold reads :class:`RealToComplex`)."""
    delay = (taps - 1) // 2  # input samples
    return dataclasses.replace(
        obs, ndim=2, tsamp_s=2 * obs.tsamp_s, start_sec=obs.start_sec + delay * obs.tsamp_s
    )


class RealToComplex:
    """A reader of real-sampled channels (``obs.ndim == 1``) as complex baseband.

    Wraps any reader with ``obs`` and ``read_blocks(nsamp)`` (blocks of real samples
    ``(n, nchan, npol)``, or ``(block, valid)``); yields complex64 blocks of half as
    many samples, with ``obs`` saying ``ndim = 2`` and ``tsamp`` doubled.
    """

    def __init__(self, reader: Any, taps: int = TAPS) -> None:
        src = reader.obs
        if src.ndim != 1:
            raise ConfigError("RealToComplex takes real-sampled data (ndim 1)")
        if taps % 4 != 1:
            raise ConfigError(f"taps={taps}: use 4k + 1 (an even delay in output samples)")
        self.reader = reader
        self.h = halfband_lowpass(taps)
        self.obs = complex_observation(src, taps)
        self.nsamp = None
        if getattr(reader, "nsamp", None) is not None:
            self.nsamp = max(0, (reader.nsamp - (taps - 1)) // 2)

    def read_blocks(self, nsamp: int) -> Iterator[np.ndarray | tuple[np.ndarray, np.ndarray]]:
        """Complex blocks of ``nsamp`` samples (the last may be shorter)."""
        if nsamp < 1:
            raise ConfigError(f"block length must be at least one sample, got {nsamp}")
        taps = len(self.h)
        carry = None  # the last taps - 1 inputs (float32) and their validity
        carry_ok = None
        n_in = 0  # input samples consumed so far (sets the mixer's phase)
        for item in self.reader.read_blocks(2 * nsamp):
            block, valid = item if isinstance(item, tuple) else (item, None)
            x = np.asarray(block, dtype=np.float32)
            ok = np.ones(len(x), bool) if valid is None else np.asarray(valid, bool)
            if carry is not None:
                x = np.concatenate([carry, x])
                ok = np.concatenate([carry_ok, ok])
                start = n_in - len(carry)
            else:
                start = n_in
            n_in += len(block)
            nout = (len(x) - (taps - 1) + 1) // 2  # outputs at even offsets 0, 2, ...
            if (start % 2) != 0:
                raise AssertionError("the converter consumes inputs in pairs")
            if nout <= 0:
                carry, carry_ok = x, ok
                continue
            yield self._convert(x, ok, start, nout)
            used = 2 * nout
            carry, carry_ok = x[used:], ok[used:]

    def _convert(
        self, x: np.ndarray, ok: np.ndarray, start: int, nout: int
    ) -> tuple[np.ndarray, np.ndarray] | np.ndarray:
        """Outputs k = 0..nout-1 from inputs start + 2k .. start + 2k + taps - 1."""
        taps = len(self.h)
        # Mix: sample n times exp(-i pi n / 2) = 1, -i, -1, i, ... (n absolute).
        phase = (start + np.arange(len(x))) % 4
        mix = np.array([1, -1j, -1, 1j], dtype=np.complex64)[phase]
        y = x * mix[:, None, None]
        # Filter and keep every second output: y_k = sum_j h[j] x[2k + taps - 1 - j].
        span = 2 * (nout - 1) + taps
        out = np.zeros((nout,) + x.shape[1:], dtype=np.complex64)
        for j, hj in enumerate(self.h):
            lo = taps - 1 - j
            out += np.float32(hj) * y[lo : lo + span - taps + 1 : 2]
        # Output k sits at input start + 2k + (taps - 1) / 2 (the filter's centre),
        # where the mixer's phase is that of output start / 2 + k on one global time
        # line (a constant -pi/2 * (taps - 1) / 2 apart): blocks join without a jump.
        if ok.all():
            return out
        bad = np.convolve(~ok, np.ones(taps), mode="valid")[: span - taps + 1 : 2] > 0
        return out, ~bad


class ComplexToReal:
    """The inverse of :class:`RealToComplex`, for the simulator: complex channels at
    rate B (blocks ``(n, nchan, npol)``) to real channels at 2B (``(2n, nchan,
    npol)`` float32), as a DBBC3 samples them, block after block in one stream.

    Upsample by two with the same half-band low-pass (polyphase: even outputs take
    the even taps, odd outputs the odd ones, gain 2), then shift by +B/2 (times
    ``exp(i pi m / 2)``, m the output's absolute index) and keep the real part: the
    channel's band [-B/2, B/2] lands on [0, B]. The filter's state is carried, so
    blocks join without a seam; the real stream lags by the group delay, ``(TAPS -
    1) / 2`` real samples, as the converter's start time says.
    """

    def __init__(self, taps: int = TAPS) -> None:
        h = 2.0 * halfband_lowpass(taps)
        self.phases = (h[0::2], h[1::2])
        self.state: list[np.ndarray | None] = [None, None]
        self.done = 0  # real samples made so far (the mixer's phase)

    def __call__(self, z: np.ndarray) -> np.ndarray:
        from scipy.signal import lfilter

        z = np.asarray(z, dtype=np.complex128)
        n = z.shape[0]
        y = np.empty((2 * n,) + z.shape[1:], dtype=np.complex128)
        for p, taps in enumerate(self.phases):
            zi = self.state[p]
            if zi is None:
                zi = np.zeros((len(taps) - 1,) + z.shape[1:], dtype=np.complex128)
            y[p::2], self.state[p] = lfilter(taps, [1.0], z, axis=0, zi=zi)
        phase = (self.done + np.arange(2 * n)) % 4
        self.done += 2 * n
        mix = np.array([1, 1j, -1, -1j])[phase].reshape((-1,) + (1,) * (z.ndim - 1))
        return np.real(y * mix).astype(np.float32)
