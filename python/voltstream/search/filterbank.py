"""A search filterbank from baseband: the plan (what comes out, and when) and its NumPy
float64 reference engine, the oracle a GPU engine will be checked against.

Each coarse channel (complex, critically sampled at |chan_bw|) is split into M fine
channels by non-overlapping M-point FFTs (orthonormal, so noise keeps its power per
channel), fftshifted so the fine channels run in baseband frequency order. Fine
channel j of coarse channel c sits at sky frequency ``f_c + (j - M/2) * chan_bw / M``
(the bin's centre; j = M/2 holds the coarse channel's DC); over the band, output
channel ``i = c * M + j`` is at ``fch1 + i * foff`` with ``foff = chan_bw / M`` (signed:
negative for a lower sideband, whose channels then descend) and ``fch1 = freq - bw / 2``.
Fine channel 0 of each coarse channel is its Nyquist bin: it holds both of the coarse
channel's edges.

Optional coherent dedispersion (``dm``) filters each coarse channel by overlap-save
before the split, with ``dsp.dedisperse.fine_channel_chirps``: the dispersion within
each fine channel is removed and each keeps its delay at its own centre, as digifil -D
does; the overlap and FFT length are the fold's rule (``discard_samples``,
``choose_fft_length``) for the coarse channels, the FFT length at least 2 M.

Then detection (``I``: |A|^2 + |B|^2; ``AABB``: both; ``IQUV``: Stokes, dsp/detect.py)
and integration: ``nint`` fine spectra are summed into each output sample, so the
output sampling time is ``M * nint * tsamp_in``. Output sample n holds input samples
``first_input + n * M * nint`` onwards (``first_input``: the overlap-save's head, 0
without ``dm``); the plan's start time is that of its first input sample. An output
sample is lost when any input sample it holds (or, with ``dm``, any in its filter's
span) was lost; lost input samples are set to zero before filtering.

The reference's samples are float64 ``(nsamp, npol_out, nchan_out)``: time, then
polarisation product, then channel, the order SIGPROC and PSRFITS search mode store.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import scipy.fft

from voltstream.dsp.dedisperse import (
    StreamingOverlapSave,
    choose_fft_length,
    discard_samples,
    fine_channel_chirps,
)
from voltstream.dsp.detect import detect
from voltstream.errors import ConfigError
from voltstream.observation import Observation

__all__ = ["POLS", "FilterbankPlan", "FilterbankReference", "FilterbankSettings"]

#: Detection choices: (dsp.detect mode or None for AABB, products, PSRFITS POL_TYPE).
POLS = {"I": ("AA+BB", 1, "AA+BB"), "AABB": (None, 2, "AABB"), "IQUV": ("IQUV", 4, "IQUV")}

#: The most fine channels per coarse channel (an FFT length that stays cheap on the CPU).
MAX_FINE = 1 << 16


@dataclass(frozen=True)
class FilterbankSettings:
    """What a filterbank is asked for (the CLI makes it once; every engine takes it).

    ``tsamp_s``: the output sampling time asked, a whole number of fine samples (None:
    one fine spectrum per sample); ``nsblk``: output samples per PSRFITS row, and per
    update of the 8-bit quantiser's statistics."""

    fine_channels: int = 1
    tsamp_s: float | None = None
    pol: str = "I"
    nbits: int = 8
    dm: float | None = None
    nsblk: int = 1024


class FilterbankPlan:
    """The filterbank of ``obs`` (coarse channels) that ``settings`` asks for: its
    geometry, timing and dedispersion filter, made once and given to every engine."""

    def __init__(self, obs: Observation, settings: FilterbankSettings) -> None:
        obs.check_critically_sampled(
            "the filterbank splits critically sampled complex channels (tsamp = "
            "1/|chan_bw|); check the file's TSAMP, BW and NCHAN"
        )
        m = int(settings.fine_channels)
        if not 1 <= m <= MAX_FINE or m & (m - 1):
            raise ConfigError(
                f"--fine-channels {settings.fine_channels}: give a power of two from 1 to "
                f"{MAX_FINE}"
            )
        if settings.pol not in POLS:
            raise ConfigError(f"--pol {settings.pol}: use one of {', '.join(POLS)}")
        self.mode, self.npol_out, self.pol_type = POLS[settings.pol]
        if settings.pol != "I" and obs.npol != 2:
            raise ConfigError(f"--pol {settings.pol} needs 2 polarisations; the input has "
                              f"{obs.npol}: use --pol I")  # fmt: skip
        if settings.nbits not in (8, 32):
            raise ConfigError(f"--nbits {settings.nbits}: use 8 (scaled bytes) or 32 (float)")
        if settings.nsblk < 1:
            raise ConfigError(f"--nsblk {settings.nsblk}: give at least 1 sample per row")
        self.obs, self.settings, self.fine = obs, settings, m
        fine_tsamp = m * obs.tsamp_s
        self.nint = _whole_samples(settings.tsamp_s, fine_tsamp, m, obs.tsamp_s)
        self.nchan_out = obs.nchan * m
        self.foff_mhz = obs.chan_bw_mhz / m
        self.fch1_mhz = obs.freq_mhz - obs.bw_mhz / 2
        self.tsamp_s = self.nint * fine_tsamp
        self.dm = float(settings.dm or 0.0)
        self.ols: tuple[np.ndarray, int, int] | None = None
        head = 0
        if settings.dm is not None:
            head, tail = discard_samples(self.dm, obs.chan_freqs_mhz, obs.chan_bw_mhz)
            nfft = max(choose_fft_length(head + tail), 2 * m)
            response = fine_channel_chirps(self.dm, obs.chan_freqs_mhz, obs.chan_bw_mhz,
                                           nfft, m)  # fmt: skip
            self.ols = (response, head, tail)
        #: The input sample that output sample 0 starts with.
        self.first_input = head
        self.span = m * self.nint  # input samples per output sample

    @property
    def chan_freqs_mhz(self) -> np.ndarray:
        """Each output channel's centre frequency, in output order (float64)."""
        return self.fch1_mhz + self.foff_mhz * np.arange(self.nchan_out)

    @property
    def out_obs(self) -> Observation:
        """The output as an Observation: its channels (``chan_freqs_mhz`` equal the
        plan's: the centre is half a fine channel off the band's), sampling time, and
        start at the first output sample (the MJD's day carried)."""
        obs = self.obs
        sec = obs.start_sec + self.first_input * obs.tsamp_s
        days = math.floor(sec / 86400.0)
        return dataclasses.replace(
            obs, nchan=self.nchan_out, freq_mhz=obs.freq_mhz - self.foff_mhz / 2,
            tsamp_s=self.tsamp_s, start_mjd=obs.start_mjd + days, start_sec=sec - 86400.0 * days,
            nbit=self.settings.nbits,
        )  # fmt: skip

    def block_samples(self) -> int:
        """Input samples per block read: whole output samples, about 64 Ki or more."""
        return self.span * max(1, (1 << 16) // self.span)


def _whole_samples(tsamp_s: float | None, fine_tsamp: float, m: int, tsamp_in: float) -> int:
    """Fine spectra per output sample for ``tsamp_s``; a ConfigError unless whole."""
    if tsamp_s is None:
        return 1
    if not (math.isfinite(tsamp_s) and tsamp_s > 0):
        raise ConfigError(f"--tsamp {tsamp_s}: give a positive sampling time in seconds")
    ratio = tsamp_s / fine_tsamp
    n = round(ratio)
    if n < 1 or abs(ratio - n) > 1e-6 * ratio:
        near = max(1, n) * fine_tsamp
        raise ConfigError(
            f"--tsamp {tsamp_s:g} s is not a whole number of fine samples ({m} fine channels "
            f"x {tsamp_in * 1e6:g} us = {fine_tsamp * 1e6:g} us each): give a multiple of it, "
            f"e.g. --tsamp {near:.9g}"
        )
    return int(n)


class FilterbankReference:
    """The plan's filterbank in NumPy float64, block after block: ``feed`` takes input
    blocks of any length and returns the output samples they complete."""

    def __init__(self, plan: FilterbankPlan) -> None:
        self.plan = plan
        obs = plan.obs
        self.ols = None if plan.ols is None else StreamingOverlapSave(*plan.ols)
        self._buf = np.zeros((obs.nchan, obs.npol, 0), np.complex128)
        self._ok = np.zeros(0, bool)
        self.samples_in = 0  # input samples fed
        self.lost_in = 0  # of them lost (set to zero)
        self.samples_out = 0
        self.lost_out = 0

    def feed(
        self, block: np.ndarray, valid: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``block`` (n, nchan, npol) complex, ``valid`` bool (n,) or None; returns
        (samples float64 (k, npol_out, nchan_out), valid bool (k,))."""
        x = np.asarray(block).transpose(1, 2, 0).astype(np.complex128)
        n = x.shape[-1]
        ok = np.ones(n, bool) if valid is None else np.asarray(valid, bool)
        self.samples_in += n
        if not ok.all():
            self.lost_in += int(np.count_nonzero(~ok))
            x[..., ~ok] = 0  # what a reader left there would ring through the filter
        if self.ols is not None:
            x, ok = self.ols.process(x, ok)
        buf = np.concatenate([self._buf, x], axis=-1)
        bok = np.concatenate([self._ok, ok])
        span = self.plan.span
        k = buf.shape[-1] // span
        self._buf, self._ok = buf[..., k * span :], bok[k * span :]
        out = self._channelise(buf[..., : k * span], k)
        out_ok = np.asarray(bok[: k * span].reshape(k, span).all(axis=1))
        self.samples_out += k
        self.lost_out += int(np.count_nonzero(~out_ok))
        return out, out_ok

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """The output samples held back: none (``feed`` returns each as it completes;
        a GPU engine, whose copies are in flight, returns its last ones here)."""
        shape = (0, self.plan.npol_out, self.plan.nchan_out)
        return np.zeros(shape), np.zeros(0, bool)

    def _channelise(self, x: np.ndarray, k: int) -> np.ndarray:
        """Whole output samples of (nchan, npol, k * span) voltages: split, detect, sum."""
        plan = self.plan
        m, nint = plan.fine, plan.nint
        nchan, npol = x.shape[:2]
        spec = scipy.fft.fft(x.reshape(nchan, npol, k * nint, m), axis=-1, norm="ortho")
        spec = np.fft.fftshift(spec, axes=-1)  # fine channels in baseband frequency order
        fine = spec.transpose(0, 3, 1, 2).reshape(nchan * m, npol, k * nint)
        if plan.mode is None:  # AABB: each polarisation's power
            power = fine.real**2 + fine.imag**2
        else:
            power = detect(fine, plan.mode)
        power = power.reshape(nchan * m, plan.npol_out, k, nint).sum(axis=-1)
        return power.transpose(2, 1, 0)
