"""Synthetic complex baseband: noise, a tone, a dispersed periodic pulsar or dispersed
bursts (FRBs; their model in sim/burst.py).

All signals are complex64 blocks shaped (nsamp, nchan, npol) (TFP, as files
hold them) with unit mean power per channel and polarisation of the noise
(E|x|^2 = 1).

Pulsar model: amplitude-modulated complex Gaussian noise. The intrinsic
pulse is a Gaussian in phase of FWHM ``duty`` turns centred on
``pulse_phase``; the power is 1 + pulse_amplitude * g(phase), phase 0 at the
first sample, at the band centre frequency. Dispersion is applied exactly as
voltstream undoes it (see :mod:`voltstream.dsp.dedisperse`):

- between channels, the modulation envelope of channel c is delayed by
  ``dispersion_delay_s(dm, f_c, band centre)``;
- inside each channel, the modulated noise is filtered by the interstellar
  transfer function, the conjugate of the dedispersion chirp, by
  overlap-save in complex64 with state carried across blocks.

So coherent dedispersion and folding at the same DM, with a constant period
whose phase 0 is the first sample, put the pulse at ``pulse_phase`` with its
intrinsic width. Memory is bounded by a few blocks whatever the duration.

Bursts (``signal="frb"``, a :class:`~voltstream.sim.burst.Burst`) are dispersed the
same way: each channel's envelope delayed by its delay from the band centre, the
voltages inside each channel through the same interstellar filter.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from voltstream.dsp.dedisperse import (
    StreamingOverlapSave,
    chirps,
    choose_fft_length,
    dispersion_delay_s,
    edge_delays_samples,
    smearing_samples,
)
from voltstream.errors import ConfigError
from voltstream.observation import Observation
from voltstream.sim.burst import Burst

__all__ = ["SIGNALS", "Burst", "quantize_int8", "synthesize", "synthesize_blocks"]

SIGNALS = ("pulsar", "noise", "tone", "frb")


class _Noise:
    """Unit-power complex Gaussian noise (nchan, npol, n), complex64.

    Drawing normals dominates the simulator's time, so channels are split
    between two generators filled on two threads (NumPy releases the GIL while
    filling). The split is fixed, so the samples depend only on the seed.
    """

    def __init__(self, seed: int, nchan: int) -> None:
        gens = np.random.default_rng(seed).spawn(2 if nchan > 1 else 1)
        self.parts = list(zip(gens, np.array_split(np.arange(nchan), len(gens)), strict=True))
        self.pool = ThreadPoolExecutor(len(gens)) if len(gens) > 1 else None

    def __call__(self, shape: tuple[int, ...]) -> np.ndarray:
        out = np.empty(shape + (2,), dtype=np.float32)

        def fill(part: Any) -> None:
            rng, chans = part
            sub = out[chans[0] : chans[-1] + 1]
            rng.standard_normal(out=sub, dtype=np.float32)
            sub *= np.float32(np.sqrt(0.5))

        if self.pool is None:
            fill(self.parts[0])
        else:
            list(self.pool.map(fill, self.parts))
        return out.view(np.complex64)[..., 0]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False)


def _ism_filter(obs: Observation, dm: float) -> StreamingOverlapSave:
    # The ISM delays the lower edge: dispersion needs n_lo samples of past
    # input and n_hi of future, the mirror of dedispersion.
    freqs, cbw = obs.chan_freqs_mhz, obs.chan_bw_mhz
    n_hi, n_lo = edge_delays_samples(dm, freqs, cbw)
    head = int(np.ceil(n_lo.max() - 1e-9))
    tail = int(np.ceil(n_hi.max() - 1e-9))
    overlap = max(int(np.max(smearing_samples(dm, freqs, cbw))), head + tail)
    nfft = max(choose_fft_length(overlap), 1 << 14)
    h = np.conj(chirps(dm, freqs, cbw, nfft))
    h[:, 0] = 1.0  # keep the noise's DC: the sky has no offset to remove
    return StreamingOverlapSave(h, head, overlap - head, dtype=np.complex64)


def synthesize_blocks(
    obs: Observation,
    duration_s: float,
    signal: str = "pulsar",
    dm: float = 0.0,
    period_s: float = 0.005,
    duty: float = 0.05,
    pulse_phase: float = 0.25,
    tone_mhz: float | None = None,
    pulse_amplitude: float = 1.0,
    seed: int = 0,
    block_samples: int = 1 << 16,
    burst: Burst | None = None,
) -> Iterator[np.ndarray]:
    """Yield complex64 (nsamp, nchan, npol) blocks covering ``duration_s``.

    ``tone_mhz``: sky frequency of the tone (default: a quarter of the way
    into the band); its amplitude is ``pulse_amplitude`` (on top of noise).
    ``burst``: what ``signal="frb"`` makes (default: one burst of ``Burst``'s
    defaults in the middle), dispersed at ``dm``.
    """
    if signal not in SIGNALS:
        raise ConfigError(f"unknown signal {signal!r}: use one of {', '.join(SIGNALS)}")
    if duration_s <= 0 or block_samples <= 0:
        raise ConfigError("duration and block size must be positive")
    if signal == "pulsar" and (period_s <= 0 or not 0 < duty < 1):
        raise ConfigError(f"pulsar needs period_s > 0 and 0 < duty < 1 (got {period_s}, {duty})")
    obs.check_critically_sampled(
        "the simulator makes critically sampled complex channels, so set tsamp = 1/|chan_bw|"
    )
    if signal == "tone":
        f_tone = obs.freq_mhz - obs.bw_mhz / 4 if tone_mhz is None else float(tone_mhz)
        lo, hi = sorted((obs.freq_mhz - obs.bw_mhz / 2, obs.freq_mhz + obs.bw_mhz / 2))
        if not lo <= f_tone <= hi:
            raise ConfigError(
                f"tone at {f_tone} MHz is outside the band {lo}-{hi} MHz: choose --tone inside it"
            )
    if signal == "frb":
        burst = burst if burst is not None else Burst(times_s=(duration_s / 2,))
        burst.check(obs.tsamp_s)
    total = int(round(duration_s / obs.tsamp_s))
    # Validation above runs at call time; the samples are made lazily.
    sig = _Signal(signal, dm, period_s, duty, pulse_phase, tone_mhz, pulse_amplitude, burst)
    pieces = _pieces(obs, sig, seed)
    return _reblock(pieces, total, block_samples)


# Internal pieces have a fixed length so that the samples do not depend on the
# block size a caller asks for.
_PIECE = 1 << 15


def _reblock(pieces: Iterator[np.ndarray], total: int, block_samples: int) -> Iterator[np.ndarray]:
    pending: list[np.ndarray] = []
    npending = 0
    produced = 0
    while produced < total:
        n = min(block_samples, total - produced)
        while npending < n:
            p = next(pieces)
            pending.append(p)
            npending += p.shape[-1]
        cat = np.concatenate(pending, axis=-1) if len(pending) > 1 else pending[0]
        yield np.ascontiguousarray(cat[..., :n].transpose(2, 0, 1), dtype=np.complex64)
        rest = cat[..., n:]
        pending = [rest] if rest.shape[-1] else []
        npending = rest.shape[-1]
        produced += n


@dataclass(frozen=True)
class _Signal:
    """What ``synthesize_blocks`` was asked to make (validated there)."""

    kind: str  # one of SIGNALS
    dm: float
    period_s: float
    duty: float
    pulse_phase: float
    tone_mhz: float | None
    amplitude: float
    burst: Burst | None = None  # signal "frb"


def _pieces(obs: Observation, sig: _Signal, seed: int) -> Iterator[np.ndarray]:
    """Endless (nchan, npol, n) complex64 pieces of the signal."""
    noise = _Noise(seed, obs.nchan)
    try:
        yield from _signal_pieces(noise, obs, sig)
    finally:
        noise.close()


def _signal_pieces(noise: _Noise, obs: Observation, sig: _Signal) -> Iterator[np.ndarray]:
    signal, dm, period_s, duty = sig.kind, sig.dm, sig.period_s, sig.duty
    pulse_phase, tone_mhz, amplitude = sig.pulse_phase, sig.tone_mhz, sig.amplitude
    nchan, npol = obs.nchan, obs.npol
    freqs = obs.chan_freqs_mhz
    if signal == "noise":
        while True:
            yield noise((nchan, npol, _PIECE))
    if signal == "tone":
        f_tone = obs.freq_mhz - obs.bw_mhz / 4 if tone_mhz is None else float(tone_mhz)
        c = int(np.argmin(np.abs(freqs - f_tone)))
        nu_hz = obs.sideband * (f_tone - freqs[c]) * 1e6  # baseband frequency in channel c
        start = 0
        while True:
            x = noise((nchan, npol, _PIECE))
            t = (start + np.arange(_PIECE)) * obs.tsamp_s
            # Reduce turns mod 1 in float64 before the complex64 cast.
            tone = amplitude * np.exp(2j * np.pi * ((nu_hz * t) % 1.0))
            x[c] += tone.astype(np.complex64)[None, :]
            start += _PIECE
            yield x

    ism = _ism_filter(obs, dm) if dm != 0 else None
    lead = ism.discard_head if ism is not None else 0
    delay = dispersion_delay_s(dm, freqs, obs.freq_mhz)  # (nchan,)
    sigma = duty / (2.0 * np.sqrt(2.0 * np.log(2.0)))
    burst = sig.burst
    taus = np.zeros(nchan) if burst is None else burst.scattering_s * (freqs / obs.freq_mhz) ** -4.0
    gen = 0
    while True:
        # Sample i of the undispersed stream is at time (i - lead) * tsamp, so
        # that the filter's first output is at time 0.
        t = (gen - lead + np.arange(_PIECE)) * obs.tsamp_s
        if burst is None:
            ph = (t[None, :] - delay[:, None]) / period_s - pulse_phase
            ph -= np.round(ph)
            power = amplitude * np.exp(-0.5 * (ph / sigma) ** 2)
        else:
            power = burst.power(t, delay, taus)  # None: no burst in this piece
        raw = noise((nchan, npol, _PIECE))
        if power is not None:
            raw *= np.sqrt(1.0 + power).astype(np.float32)[:, None, :]
        gen += _PIECE
        out = ism.process(raw)[0] if ism is not None else raw
        if out.shape[-1]:
            yield out


def synthesize(obs: Observation, duration_s: float, **kwargs: Any) -> np.ndarray:
    """The whole signal of :func:`synthesize_blocks` as one complex64 (nsamp, nchan, npol)."""
    blocks = list(synthesize_blocks(obs, duration_s, **kwargs))
    return np.concatenate(blocks, axis=0)


def quantize_int8(x: np.ndarray, rms: float = 20.0) -> tuple[np.ndarray, int]:
    """Quantise complex samples to int8 (..., 2) (re, im), clipping at +-127.

    ``rms`` is the standard deviation, in counts, that each of re/im of
    unit-power complex noise (E|x|^2 = 1) gets. Returns ``(q, clipped)``:
    the int8 array and the number of values (re and im counted separately)
    that were clipped.
    """
    if not rms > 0:
        raise ConfigError(f"quantisation rms must be > 0 counts, got {rms}")
    x = np.asarray(x)
    scale = np.float32(rms * np.sqrt(2.0))
    ri = np.empty(x.shape + (2,), dtype=np.float32)
    ri[..., 0] = x.real
    ri[..., 1] = x.imag
    ri *= scale
    np.rint(ri, out=ri)
    clipped = int(np.count_nonzero(np.abs(ri) > 127))
    np.clip(ri, -127, 127, out=ri)
    return ri.astype(np.int8), clipped
