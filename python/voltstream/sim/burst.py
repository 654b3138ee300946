"""Dispersed bursts (FRBs, giant pulses) for the simulator: the power envelope.

A burst is amplitude-modulated noise, as the pulsar is (sim/signal.py): the noise
power of every channel and polarisation is multiplied by ``1 + A(t)``, where

    A(t) = (F / SEFD) * p(t - t_arr(f))

- ``F / SEFD`` (seconds) is the fluence over the system equivalent flux density:
  the burst's energy in units of the noise's power (the simulated noise is the system
  noise, unit power per channel and polarisation, so a source of flux S raises each
  polarisation's power by the fraction S / SEFD whatever the number of
  polarisations). The simulator takes F in Jy ms and the SEFD in Jy.
- ``p`` is the burst's profile, of unit area (1/s): a Gaussian of full width at half
  maximum ``width_s`` or a boxcar of length ``width_s``, centred on the arrival time,
  optionally convolved with a one-sided exponential of time constant
  ``tau(f) = scattering_s * (f / f_centre)**-4`` (thin-screen scattering).
- ``t_arr(f)`` is the cold-plasma delay: ``t_burst + D * DM * (f^-2 - f_centre^-2)``
  with D = voltstream's dispersion constant (dsp/dedisperse.py DISPERSION_CONSTANT,
  the one `fold` and `search` use) and f_centre the band's centre frequency: burst
  times are arrival times at the band centre, as the pulsar's phase is.

Between channels the envelope of channel c is delayed by ``t_arr(f_c)`` and
scattered with ``tau(f_c)``; inside each channel the dispersion is the interstellar
filter applied to the modulated voltages (sim/signal.py ``_ism_filter``), so coherent
dedispersion at the burst's DM recovers the intrinsic profile.

The radiometer equation for such a burst: a filter of unit-area weights w(t) on the
total intensity (both polarisations, bandwidth B) gives

    S/N = (F / SEFD) * sqrt(npol * B) * (integral w p dt) / sqrt(integral w^2 dt),

the matched filter (w = p) ``(F/SEFD) sqrt(npol B integral p^2 dt)``, and a boxcar of
length W holding the fraction phi of the burst ``(F/SEFD) phi sqrt(npol B / W)``
(``radiometer_snr``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import erfc, erfcx

from voltstream.errors import ConfigError

__all__ = ["SHAPES", "Burst"]

SHAPES = ("gaussian", "boxcar")

# Profiles are negligible beyond this many widths (Gaussian sigmas or boxcar lengths)
# and scattering times from their centre: the envelope is computed only there.
_REACH_WIDTHS = 8.0
_REACH_TAUS = 30.0
_FWHM_PER_SIGMA = 2.0 * np.sqrt(2.0 * np.log(2.0))


@dataclass(frozen=True)
class Burst:
    """Bursts of one shape, width and fluence at ``times_s`` (band centre, s)."""

    times_s: tuple[float, ...]
    width_s: float = 1e-3
    fluence_jy_ms: float = 1.0
    sefd_jy: float = 10.0
    shape: str = "gaussian"
    scattering_s: float = 0.0  # at the band centre, scaling as f^-4

    def check(self, tsamp_s: float) -> None:
        """A ConfigError naming the option to change, for anything out of range."""
        if self.shape not in SHAPES:
            raise ConfigError(f"unknown burst shape {self.shape!r}: use one of {', '.join(SHAPES)}")
        if not np.isfinite(self.width_s) or self.width_s < 2 * tsamp_s:
            raise ConfigError(
                f"burst width {self.width_s:g} s is below two samples ({2 * tsamp_s:g} s): "
                "give a --width of at least two sample intervals"
            )
        if not (np.isfinite(self.fluence_jy_ms) and self.fluence_jy_ms >= 0):
            raise ConfigError(f"--fluence must be finite and >= 0 Jy ms, got {self.fluence_jy_ms}")
        if not (np.isfinite(self.sefd_jy) and self.sefd_jy > 0):
            raise ConfigError(f"--sefd must be finite and > 0 Jy, got {self.sefd_jy}")
        if not (np.isfinite(self.scattering_s) and self.scattering_s >= 0):
            raise ConfigError(f"--scattering must be finite and >= 0 s, got {self.scattering_s}")
        if not self.times_s or not all(np.isfinite(t) for t in self.times_s):
            raise ConfigError("--burst-times needs one or more finite times in seconds")

    @property
    def energy_s(self) -> float:
        """F / SEFD in seconds: the burst's energy in units of the noise power."""
        return self.fluence_jy_ms * 1e-3 / self.sefd_jy

    def profile(self, t: np.ndarray, tau: float | np.ndarray) -> np.ndarray:
        """The unit-area profile p(t) (1/s), t from the arrival time; ``tau`` the
        scattering time (0: none), broadcast against ``t``."""
        t = np.asarray(t, dtype=np.float64)
        tau = np.broadcast_to(np.asarray(tau, dtype=np.float64), t.shape)
        out = np.empty_like(t)
        plain = tau <= 0
        out[plain] = self._intrinsic(t[plain])
        if not plain.all():
            out[~plain] = self._scattered(t[~plain], tau[~plain])
        return out

    def _intrinsic(self, t: np.ndarray) -> np.ndarray:
        w = self.width_s
        if self.shape == "boxcar":
            return np.where(np.abs(t) < w / 2, 1.0 / w, 0.0)
        sigma = w / _FWHM_PER_SIGMA
        return np.exp(-0.5 * (t / sigma) ** 2) / (sigma * np.sqrt(2 * np.pi))

    def _scattered(self, t: np.ndarray, tau: np.ndarray) -> np.ndarray:
        """The intrinsic profile convolved with exp(-t/tau)/tau (t >= 0), in closed form."""
        w = self.width_s
        if self.shape == "boxcar":
            # (1/w) * integral over the boxcar [-w/2, w/2] of the exponential's tail.
            a = np.clip(t + w / 2, 0, None)  # time since the boxcar began
            inside = np.where(t < w / 2, 1.0 - np.exp(-a / tau), 0.0)
            after = np.where(t >= w / 2, np.exp(-(t - w / 2) / tau) * -np.expm1(-w / tau), 0.0)
            return (inside + after) / w
        # Exponentially modified Gaussian, written so nothing overflows: with
        # z = (sigma/tau - t/sigma)/sqrt2, p = exp(-t^2/2sigma^2) erfcx(z) / 2tau for
        # z >= 0 and exp(sigma^2/2tau^2 - t/tau) erfc(z) / 2tau (exponent < 0) below.
        sigma = w / _FWHM_PER_SIGMA
        z = (sigma / tau - t / sigma) / np.sqrt(2.0)
        pos = np.exp(-0.5 * (t / sigma) ** 2) * erfcx(np.clip(z, 0, None))
        neg = np.exp(np.minimum(0.5 * (sigma / tau) ** 2 - t / tau, 0.0)) * erfc(z)
        return np.where(z >= 0, pos, neg) / (2 * tau)

    def reach_s(self, tau: float) -> tuple[float, float]:
        """Times before and after the arrival beyond which the profile is negligible."""
        return _REACH_WIDTHS * self.width_s, _REACH_WIDTHS * self.width_s + _REACH_TAUS * tau

    def power(self, t: np.ndarray, delays_s: np.ndarray, taus_s: np.ndarray) -> np.ndarray | None:
        """The fractional power A (nchan, len(t)) at times ``t`` (s, band-centre frame
        before the per-channel delays ``delays_s``), or None where no burst reaches."""
        lo_s, hi_s = t[0], t[-1]
        out: np.ndarray | None = None
        for tb in self.times_s:
            for c, (d, tau) in enumerate(zip(delays_s, taus_s, strict=True)):
                before, after = self.reach_s(float(tau))
                if tb + d + after < lo_s or tb + d - before > hi_s:
                    continue
                if out is None:
                    out = np.zeros((len(delays_s), len(t)))
                out[c] += self.energy_s * self.profile(t - tb - d, tau)
        return out

    def radiometer_snr(self, npol: int, bw_hz: float, boxcar_s: float | None = None) -> float:
        """The radiometer S/N of one unscattered burst in total intensity over ``bw_hz``
        (both polarisations): the matched filter's, or with ``boxcar_s`` the best
        placed boxcar of that length's (see the module's docstring)."""
        step = min(self.width_s, boxcar_s or self.width_s) / 2000
        t = np.arange(-_REACH_WIDTHS * self.width_s, _REACH_WIDTHS * self.width_s, step)
        p = self._intrinsic(t)
        if boxcar_s is None:
            return self.energy_s * float(np.sqrt(npol * bw_hz * np.sum(p**2) * step))
        n = max(1, int(round(boxcar_s / step)))
        c = np.concatenate([[0.0], np.cumsum(p) * step])
        phi = float(np.max(c[n:] - c[:-n])) if n < len(c) else float(c[-1])
        return self.energy_s * phi * float(np.sqrt(npol * bw_hz / boxcar_s))
