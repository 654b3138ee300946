"""Delay and phase correction for an F-engine: the NumPy float64 reference.

Conventions (the GPU F-engine matches these exactly; docs/fengine.md):

- The F-engine *applies* a delay: with delay ``tau > 0`` its output at time ``t`` is
  its input at ``t - tau`` (the signal comes out later). A geometric delay is
  compensated by applying ``tau_max - tau_geometric``; that choice is the caller's.
- The model is linear in time from ``epoch_sample`` (a digitiser sample count, the
  same time line as the timestamps)::

      tau(T) = delay_s   + delay_rate       * (T - epoch_sample) / fs
      phi(T) = phase_rad + phase_rate_rad_s * (T - epoch_sample) / fs

  and is evaluated once per output spectrum at ``T`` = the spectrum's timestamp:
  the first sample of its window on the (delay-corrected) output time line.
- Coarse delay: ``D = floor(tau * fs + 0.5)`` whole samples, applied as an index
  offset: the window of the spectrum at ``T`` starts at input sample ``T - D``.
- Fine delay: the residual ``tau_f = tau - D / fs`` (in ``[-0.5, 0.5)`` samples)
  and the phase are applied per channel in the frequency domain::

      X'[k] = X[k] * exp(i * (phi - 2 pi f_k tau_f))

  Delaying ``exp(2 pi i f t)`` by ``tau_f`` multiplies it by ``exp(-2 pi i f tau_f)``,
  exactly so at the channel centre ``f = f_k``; ``phi`` is added to the phase.
- Reference frequency: ``f_k`` is the channel's *baseband* centre ``k * fs / (2 nchan)``
  (``voltstream.dsp.pfb.channel_frequencies``), not its sky frequency. The fine
  delay therefore corrects the delay slope across the band only; the constant
  ``-2 pi f_ref tau`` of a down-converted or higher-Nyquist-zone band (for MeerKAT
  L-band, ``f_ref`` is the sky frequency of baseband DC) belongs in the phase
  terms, which the telescope model supplies (as MeerKAT's ?delays does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from voltstream.errors import ConfigError

__all__ = ["DelayModel", "apply_fine_delay", "split_delay"]


@dataclass(frozen=True)
class DelayModel:
    """First-order delay and phase model; see the module docstring for the signs."""

    delay_s: float = 0.0
    delay_rate: float = 0.0
    phase_rad: float = 0.0
    phase_rate_rad_s: float = 0.0
    epoch_sample: int = 0

    def __post_init__(self) -> None:
        for name in ("delay_s", "delay_rate", "phase_rad", "phase_rate_rad_s"):
            value = getattr(self, name)
            if not math.isfinite(float(value)):
                raise ConfigError(f"delay model {name}={value} is not finite: give a real number")
        if int(self.epoch_sample) != self.epoch_sample:
            raise ConfigError(
                f"epoch_sample={self.epoch_sample} must be a whole digitiser sample count"
            )

    def evaluate(
        self, timestamps: npt.ArrayLike, sample_rate_hz: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """(delay s, phase rad), float64, at each timestamp (digitiser samples)."""
        fs = _sample_rate(sample_rate_hz)
        # Subtract in integers first: timestamps reach 2^48 and float64 holds 2^53.
        dt = (np.asarray(timestamps, dtype=np.int64) - int(self.epoch_sample)) / fs
        tau = self.delay_s + self.delay_rate * dt
        phi = self.phase_rad + self.phase_rate_rad_s * dt
        return np.asarray(tau, dtype=np.float64), np.asarray(phi, dtype=np.float64)

    def split(
        self, timestamps: np.ndarray, sample_rate_hz: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(coarse delay int64 samples, residual delay s, phase rad) at each timestamp."""
        tau, phi = self.evaluate(timestamps, sample_rate_hz)
        coarse, residual = split_delay(tau, sample_rate_hz)
        return coarse, residual, phi


def _sample_rate(sample_rate_hz: float) -> float:
    fs = float(sample_rate_hz)
    if not (math.isfinite(fs) and fs > 0):
        raise ConfigError(f"sample rate {sample_rate_hz} Hz must be a positive number")
    return fs


def split_delay(delay_s: npt.ArrayLike, sample_rate_hz: float) -> tuple[np.ndarray, np.ndarray]:
    """Whole-sample coarse delay ``floor(tau fs + 0.5)`` and the residual in seconds."""
    fs = _sample_rate(sample_rate_hz)
    tau = np.asarray(delay_s, dtype=np.float64)
    coarse = np.floor(tau * fs + 0.5)
    residual = tau - coarse / fs
    return coarse.astype(np.int64), residual


def apply_fine_delay(
    spectra: npt.ArrayLike,
    chan_freqs_hz: npt.ArrayLike,
    residual_delay_s: npt.ArrayLike,
    phase_rad: npt.ArrayLike,
) -> np.ndarray:
    """``spectra * exp(i (phase - 2 pi f tau))``, complex128, per spectrum and channel.

    ``spectra`` is ``(..., nspec, nchan)``; ``chan_freqs_hz`` is ``(nchan,)``;
    ``residual_delay_s`` and ``phase_rad`` are scalars or ``(nspec,)``.
    """
    x = np.asarray(spectra)
    f = np.asarray(chan_freqs_hz, dtype=np.float64)
    if x.ndim < 2 or f.shape != (x.shape[-1],):
        raise ConfigError(
            f"spectra of shape {x.shape} and channel frequencies of shape {f.shape} do not "
            "match: give spectra as (..., nspec, nchan) and one frequency per channel"
        )
    nspec = x.shape[-2]
    tau = np.broadcast_to(np.asarray(residual_delay_s, dtype=np.float64), (nspec,))
    phi = np.broadcast_to(np.asarray(phase_rad, dtype=np.float64), (nspec,))
    rotation = np.exp(1j * (phi[:, None] - 2.0 * np.pi * f[None, :] * tau[:, None]))
    return x * rotation
