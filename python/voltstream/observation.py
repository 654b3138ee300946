"""Metadata and products shared by readers, DSP and writers.

Conventions used everywhere in voltstream:
- frequencies in MHz, times in seconds, DM in pc cm^-3;
- ``bw_mhz`` is signed: negative for a lower sideband (sky frequency falls as
  the baseband frequency index rises), the DADA/PSRFITS convention;
- start times as an integer MJD plus seconds into that day (float64), which keeps
  sub-nanosecond precision for pulse phase.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from voltstream.errors import ConfigError


@dataclass
class Observation:
    """What a baseband stream is: enough to dedisperse, fold and label it."""

    nchan: int
    npol: int
    freq_mhz: float  # centre frequency of the whole band
    bw_mhz: float  # total bandwidth, signed (negative = lower sideband)
    tsamp_s: float  # sample interval of each channel (= nchan / |bw|, complex)
    start_mjd: int = 60000
    start_sec: float = 0.0
    source: str = "J0000+0000"
    telescope: str = "voltstream"
    nbit: int = 8
    ndim: int = 2  # 2 = complex, 1 = real

    @property
    def chan_bw_mhz(self) -> float:
        """Signed width of one channel."""
        return self.bw_mhz / self.nchan

    @property
    def chan_freqs_mhz(self) -> np.ndarray:
        """Centre frequency of each channel, in channel order (float64)."""
        cbw = self.chan_bw_mhz
        return self.freq_mhz - self.bw_mhz / 2 + cbw * (np.arange(self.nchan) + 0.5)

    def check_critically_sampled(self, why: str) -> None:
        """A ConfigError unless tsamp = 1/|chan_bw| (complex channels, critically
        sampled); ``why`` says who needs it and what to do."""
        if abs(self.tsamp_s * abs(self.chan_bw_mhz) * 1e6 - 1.0) > 1e-6:
            raise ConfigError(
                f"sample interval {self.tsamp_s * 1e6:g} us does not match the channel width "
                f"{abs(self.chan_bw_mhz):g} MHz: {why}"
            )

    @property
    def sideband(self) -> int:
        """+1 for an upper sideband, -1 for a lower one."""
        return 1 if self.bw_mhz > 0 else -1

    @property
    def start_mjd_float(self) -> float:
        """Start as a float MJD (loses precision: use for labels, not phase)."""
        return self.start_mjd + self.start_sec / 86400.0


@dataclass
class FoldedArchive:
    """A folded observation, the content of a PSRFITS fold-mode file.

    ``data`` is (nsub, npol, nchan, nbin) float64 in the PSRFITS axis order;
    ``weights`` is (nsub, nchan): the fraction of samples that entered each
    sub-integration and channel (0 where none did).
    """

    obs: Observation
    data: np.ndarray
    weights: np.ndarray
    tsubint_s: np.ndarray  # (nsub,) duration of each sub-integration
    offs_sub_s: np.ndarray  # (nsub,) centre of each sub-integration from start
    period_s: np.ndarray  # (nsub,) folding period at each sub-integration centre
    dm: float
    pol_type: str = "AA+BB"  # "AA+BB", "AABBCRCI" or "IQUV"
    polyco_text: str | None = None  # the polyco file used, for the POLYCO HDU
    history: list[str] = field(default_factory=list)
    excluded_samples: int = 0  # samples from missing packets kept out of profiles
    par_text: str | None = None  # the .par file folded with, for the PSRPARAM HDU
    coherent_nfft: int | None = None  # FFT length of the coherent dedispersion (COHDDISP)
    # Samples cut at the start and end of each of its FFTs (COHDDISP NCYC_POS/NCYC_NEG),
    # as the fold's plan made them (fold/plan.py); None: computed from dm and channels.
    coherent_discard: tuple[int, int] | None = None
    # Where a fold's time went (start-up, blocks, ...), seconds; not written to files.
    stage_seconds: dict = field(default_factory=dict)
    # The stage runner's counters (pipeline/gpu.py StageRunner.as_dict: blocks, bytes,
    # copies in flight, page-locked bytes) where a runner fed the fold; not written.
    pipeline: dict = field(default_factory=dict)

    @property
    def nsub(self) -> int:
        return self.data.shape[0]

    @property
    def nbin(self) -> int:
        return self.data.shape[3]

    def profile(self) -> np.ndarray:
        """Total-intensity profile summed over time and frequency, weighted."""
        tot = self.data[:, 0] if self.pol_type != "AABBCRCI" else self.data[:, 0] + self.data[:, 1]
        w = self.weights[:, :, None]
        return (tot * w).sum(axis=(0, 1))
