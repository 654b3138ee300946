"""Coherent dedispersion by overlap-save: the NumPy float64 reference.

Conventions (the GPU path and the simulator follow these exactly):

- Dispersion constant D = 1/2.41e-4 s MHz^2 per pc cm^-3 (Manchester & Taylor
  1972). A signal at sky frequency f arrives later than one at f_ref by
  ``D * DM * (1/f^2 - 1/f_ref^2)`` seconds (positive when f < f_ref).
- One channel of centre f0 and signed width bw (MHz; negative = lower sideband)
  is sampled as complex baseband at |bw| MHz. Baseband frequency nu (Hz, the
  frequency of exp(+2 pi i nu t) in the samples) maps to the sky offset
  ``df = sign(bw) * nu``: a lower sideband has its spectrum reversed. Seen from
  the sky side this is the same as conjugating the upper-sideband signal, so
  for a transfer function both views give the same result.
- NumPy's FFT convention is X[k] = sum_n x[n] exp(-2 pi i k n / N). A filter
  exp(i psi(nu)) then delays the component at nu by the group delay
  -(1/2 pi) d psi / d nu.
- The interstellar medium multiplies the channel's spectrum by
  H(df) = exp(+i s phi(df)), with s = sign(bw) and the cold-plasma phase
  phi(df) = 2 pi 1e6 D DM df^2 / (f0^2 (f0 + df))   (df, f0 in MHz; radians).
  Since d phi/d df = 2 pi 1e6 D DM (1/f0^2 - 1/f^2), the group delay of H at
  f = f0 + df is exactly the cold-plasma delay relative to f0, for both
  sidebands. The dedispersion chirp is its inverse, exp(-i s phi(df)), with
  the DC bin set to zero (digitiser offsets live there).
- Bins are in NumPy FFT order: df = ``np.fft.fftfreq(nfft, 1 / bw)``.

Overlap-save: the dedispersed value at input sample n needs inputs from
n - n_hi to n + n_lo, where n_hi (n_lo) is the delay, in samples, of the
channel's upper (lower) edge relative to its centre. Each FFT of nfft samples
therefore yields nfft - overlap valid samples after dropping ``discard_head``
(>= n_hi) samples at its start and ``discard_tail`` (>= n_lo) at its end.
Output sample k corresponds to input sample k + discard_head, referred to the
channel centre frequency: the inter-channel delay is left for the folder.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.fft

from voltstream.errors import ConfigError

__all__ = [
    "DISPERSION_CONSTANT",
    "Dedisperser",
    "StreamingDedisperser",
    "StreamingOverlapSave",
    "chirp",
    "chirps",
    "choose_fft_length",
    "discard_samples",
    "dispersion_delay_s",
    "edge_delays_samples",
    "fine_channel_chirps",
    "smearing_samples",
]

DISPERSION_CONSTANT = 1.0 / 2.41e-4  # s MHz^2 per pc cm^-3


def dispersion_delay_s(dm: Any, f_mhz: npt.ArrayLike, f_ref_mhz: npt.ArrayLike) -> Any:
    """Arrival delay (s) at ``f_mhz`` relative to ``f_ref_mhz``; positive when lower."""
    f = np.asarray(f_mhz, dtype=np.float64)
    f_ref = np.asarray(f_ref_mhz, dtype=np.float64)
    return DISPERSION_CONSTANT * dm * (1.0 / f**2 - 1.0 / f_ref**2)


def _cold_plasma_phase(dm: float, f0_mhz: np.ndarray, df_mhz: np.ndarray) -> np.ndarray:
    # 1e6 turns MHz*s into cycles; the df^2/(f0^2 (f0+df)) form avoids the
    # cancellation of subtracting two large 1/f terms.
    return (2e6 * np.pi * DISPERSION_CONSTANT * dm) * df_mhz**2 / (f0_mhz**2 * (f0_mhz + df_mhz))


def chirps(dm: float, chan_freqs_mhz: npt.ArrayLike, chan_bw_mhz: float, nfft: int) -> np.ndarray:
    """Dedispersion chirps for every channel: complex128 (nchan, nfft), FFT order, DC zeroed."""
    if chan_bw_mhz == 0:
        raise ConfigError("channel bandwidth is zero: give the signed channel width in MHz")
    f0 = np.atleast_1d(np.asarray(chan_freqs_mhz, dtype=np.float64))[:, None]
    df = np.fft.fftfreq(int(nfft), 1.0 / float(chan_bw_mhz))[None, :]
    if np.any(f0 - abs(chan_bw_mhz) / 2 <= 0):
        raise ConfigError("channel frequencies must be positive sky frequencies in MHz")
    s = 1.0 if chan_bw_mhz > 0 else -1.0
    h = np.exp(-1j * s * _cold_plasma_phase(float(dm), f0, df))
    h[:, 0] = 0.0
    return h


def fine_channel_chirps(
    dm: float, chan_freqs_mhz: npt.ArrayLike, chan_bw_mhz: float, nfft: int, nfine: int
) -> np.ndarray:
    """Chirps that dedisperse each channel's ``nfine`` fine channels within themselves:
    complex128 (nchan, nfft), FFT order, for a split into fine channels by ``nfine``-point
    FFTs after the filter (a search filterbank, digifil -D's coherent filterbank).

    A bin of fine channel j (the ``nfine`` fine channels share the ``nfft`` bins, each
    bin going to the fine channel whose centre is nearest) gets the inverse of the
    cold-plasma phase less its value and slope at j's centre: the dispersion within each
    fine channel is removed and each keeps its own delay at its centre, so an incoherent
    dedispersion over fine channels at the same DM lines them up. Nothing is zeroed
    (unlike :func:`chirps`' DC bin): at DM 0 the filter is the identity."""
    nfft, nfine = int(nfft), int(nfine)
    if nfine < 1 or nfft % nfine:
        raise ConfigError(f"FFT length {nfft} is not a multiple of {nfine} fine channels")
    if chan_bw_mhz == 0:
        raise ConfigError("channel bandwidth is zero: give the signed channel width in MHz")
    f0 = np.atleast_1d(np.asarray(chan_freqs_mhz, dtype=np.float64))[:, None]
    if np.any(f0 - abs(chan_bw_mhz) / 2 <= 0):
        raise ConfigError("channel frequencies must be positive sky frequencies in MHz")
    s = 1.0 if chan_bw_mhz > 0 else -1.0
    width = abs(float(chan_bw_mhz))
    nu = np.fft.fftfreq(nfft, 1.0 / width)[None, :]  # baseband MHz
    nu_c = np.round(nu * nfine / width) * width / nfine  # its fine channel's centre
    df, df_c = s * nu, s * nu_c  # sky offsets from the channel's centre
    phase = _cold_plasma_phase(float(dm), f0, df) - _cold_plasma_phase(float(dm), f0, df_c)
    slope = 2e6 * np.pi * DISPERSION_CONSTANT * float(dm) * (1 / f0**2 - 1 / (f0 + df_c) ** 2)
    return np.exp(-1j * s * (phase - slope * (df - df_c)))


def chirp(dm: float, f0_mhz: float, bw_mhz: float, nfft: int) -> np.ndarray:
    """Dedispersion chirp of one channel: complex128 (nfft,), FFT order, DC zeroed."""
    return chirps(dm, [f0_mhz], bw_mhz, nfft)[0]


def edge_delays_samples(
    dm: float, f0_mhz: npt.ArrayLike, bw_mhz: float
) -> tuple[np.ndarray, np.ndarray]:
    """Exact delays (samples, float) of the channel's upper and lower edges vs its centre.

    Returns (n_hi, n_lo), both >= 0: the upper edge arrives n_hi samples early,
    the lower edge n_lo samples late.
    """
    f0 = np.asarray(f0_mhz, dtype=np.float64)
    half = abs(bw_mhz) / 2
    rate = abs(bw_mhz) * 1e6
    n_hi = dispersion_delay_s(abs(dm), f0, f0 + half) * rate
    n_lo = dispersion_delay_s(abs(dm), f0 - half, f0) * rate
    return n_hi, n_lo


def smearing_samples(dm: float, f0_mhz: npt.ArrayLike, bw_mhz: float) -> int | np.ndarray:
    """Samples over which dispersion inside one channel spreads a pulse.

    Uses the linear form 2 D DM |bw| / f^3 evaluated at the channel's lowest
    edge, an upper bound of the exact edge-to-edge delay (the delay is steepest
    there), so the overlap also covers the chirp's ringing. int (or int array).
    """
    f_lo = np.asarray(f0_mhz, dtype=np.float64) - abs(bw_mhz) / 2
    t = 2.0 * DISPERSION_CONSTANT * abs(dm) * abs(bw_mhz) / f_lo**3
    n = np.ceil(t * abs(bw_mhz) * 1e6 - 1e-9).astype(np.int64)
    return int(n) if n.ndim == 0 else n


def choose_fft_length(n_smear: int, max_log2: int = 24, min_log2: int = 6) -> int:
    """FFT length for overlap-save, after DSPSR's rule.

    Start at the smallest power of two strictly above ``n_smear`` (and at least
    2**min_log2), then take the power of two up to 2**max_log2 that minimises
    the cost per valid sample, N log2 N / (N - n_smear).
    """
    n_smear = int(n_smear)
    if n_smear < 0:
        raise ConfigError(f"smearing must be >= 0 samples, got {n_smear}")
    first = max(n_smear.bit_length(), min_log2)
    if first > max_log2:
        raise ConfigError(
            f"dispersion smears over {n_smear} samples, more than the largest FFT "
            f"(2**{max_log2}); use narrower channels or raise max_log2"
        )
    best, best_cost = 0, math.inf
    for k in range(first, max_log2 + 1):
        n = 1 << k
        cost = n * k / (n - n_smear)
        if cost < best_cost:
            best, best_cost = n, cost
    return best


def discard_samples(
    dm: float, chan_freqs_mhz: npt.ArrayLike, chan_bw_mhz: float
) -> tuple[int, int]:
    """Samples cut at the start and at the end of each overlap-save FFT (head, tail).

    The head covers the upper edge's delay, the tail the lower edge's, and together
    they cover the smearing (:func:`smearing_samples`) of the worst channel. The one
    rule: :class:`Dedisperser` cuts these, and a PSRFITS archive records them
    (io/psrfits.py, COHDDISP) when its fold did not say.
    """
    f = np.atleast_1d(np.asarray(chan_freqs_mhz, dtype=np.float64))
    n_hi, n_lo = edge_delays_samples(dm, f, chan_bw_mhz)
    head = int(np.ceil(n_hi.max() - 1e-9))
    tail = int(np.ceil(n_lo.max() - 1e-9))
    n_smear = int(np.max(smearing_samples(dm, f, chan_bw_mhz)))
    return head, max(n_smear, head + tail) - head


def _segments(x: np.ndarray, nfft: int, step: int, nseg: int) -> np.ndarray:
    # A strided view: consecutive segments share `overlap` samples without copying.
    win = np.lib.stride_tricks.sliding_window_view(x, nfft, axis=-1)
    return win[..., : (nseg - 1) * step + 1 : step, :]


class StreamingOverlapSave:
    """Overlap-save filtering of (nchan, npol, nsamp) blocks with state carried across blocks.

    ``response`` is (nchan, nfft) in FFT order. Processing a long stream in
    blocks of any size gives the same samples as processing it at once; the
    first output sample is input sample ``discard_head``. ``valid`` masks
    (nsamp,) are carried too: an output is valid only if every input in its
    filter span was.
    """

    def __init__(
        self, response: np.ndarray, discard_head: int, discard_tail: int, dtype: Any = None
    ) -> None:
        self.response = np.asarray(response)
        self.nfft = self.response.shape[-1]
        self.discard_head = int(discard_head)
        self.discard_tail = int(discard_tail)
        self.overlap = self.discard_head + self.discard_tail
        self.step = self.nfft - self.overlap
        if self.step <= 0:
            raise ConfigError(
                f"FFT length {self.nfft} does not exceed the overlap {self.overlap}: "
                "choose a longer FFT"
            )
        self.dtype = np.dtype(dtype or np.complex128)
        self.response = self.response.astype(self.dtype, copy=False)
        self._carry: np.ndarray | None = None
        self._carry_valid = np.zeros(0, dtype=bool)
        self.samples_in = 0
        self.samples_out = 0

    @property
    def next_output_sample(self) -> int:
        """Input-sample index that the next output sample corresponds to."""
        return self.samples_out + self.discard_head

    def _filter(self, x: np.ndarray, nseg: int) -> np.ndarray:
        seg = _segments(x, self.nfft, self.step, nseg)
        spec = scipy.fft.fft(seg, axis=-1, workers=-1)
        spec *= self.response[:, None, None, :]
        y = scipy.fft.ifft(spec, axis=-1, overwrite_x=True, workers=-1)
        y = y[..., self.discard_head : self.nfft - self.discard_tail]
        return y.reshape(*y.shape[:2], nseg * self.step)

    def process(
        self, block: np.ndarray, valid: npt.ArrayLike | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Filter one (nchan, npol, nsamp) block; returns (output, output_valid (nout,))."""
        block = np.asarray(block, dtype=self.dtype)
        if block.ndim != 3 or block.shape[0] != self.response.shape[0]:
            raise ConfigError(
                f"expected a block shaped (nchan={self.response.shape[0]}, npol, nsamp), "
                f"got {block.shape}"
            )
        n = block.shape[-1]
        v = np.ones(n, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
        if v.shape != (n,):
            raise ConfigError(f"valid mask must be shaped ({n},), got {v.shape}")
        if self._carry is None:
            self._carry = np.zeros(block.shape[:2] + (0,), dtype=self.dtype)
        buf = np.concatenate([self._carry, block], axis=-1)
        vbuf = np.concatenate([self._carry_valid, v])
        self.samples_in += n
        nseg = max(0, (buf.shape[-1] - self.overlap) // self.step)
        if nseg == 0:
            self._carry, self._carry_valid = buf, vbuf
            return np.zeros(block.shape[:2] + (0,), dtype=self.dtype), np.zeros(0, dtype=bool)
        out = self._filter(buf, nseg)
        nout = nseg * self.step
        # Output k is valid when inputs k .. k+overlap were all present.
        bad = np.concatenate([[0], np.cumsum(~vbuf[: nout + self.overlap])])
        out_valid = (bad[self.overlap + 1 : self.overlap + 1 + nout] - bad[:nout]) == 0
        self._carry = buf[..., nout:].copy()
        self._carry_valid = vbuf[nout:].copy()
        self.samples_out += nout
        return out, out_valid


class Dedisperser:
    """Coherent dedispersion of all channels by overlap-save, float64.

    ``chan_bw_mhz`` is signed (negative = lower sideband). With ``nfft=None``
    the FFT length follows :func:`choose_fft_length` for the worst channel.
    ``band_freqs_mhz``: the whole band's channels when these are part of it (a
    cluster node's subband, cluster/node.py): the overlap and the samples cut at
    each FFT's ends are then the whole band's, so each channel comes out exactly as
    a fold of the whole band on one machine would make it.
    """

    def __init__(
        self,
        dm: float,
        chan_freqs_mhz: npt.ArrayLike,
        chan_bw_mhz: float,
        nfft: int | None = None,
        band_freqs_mhz: npt.ArrayLike | None = None,
    ) -> None:
        self.dm = float(dm)
        self.chan_freqs_mhz = np.atleast_1d(np.asarray(chan_freqs_mhz, dtype=np.float64))
        self.chan_bw_mhz = float(chan_bw_mhz)
        if self.chan_bw_mhz == 0:
            raise ConfigError("channel bandwidth is zero: give the signed channel width in MHz")
        plan = self.chan_freqs_mhz if band_freqs_mhz is None else np.atleast_1d(band_freqs_mhz)
        self.discard_head, self.discard_tail = discard_samples(self.dm, plan, self.chan_bw_mhz)
        self.overlap = self.discard_head + self.discard_tail
        self.nfft = choose_fft_length(self.overlap) if nfft is None else int(nfft)
        if self.nfft <= self.overlap:
            raise ConfigError(
                f"nfft={self.nfft} must exceed the dispersion overlap of {self.overlap} "
                f"samples at DM {self.dm}; leave nfft unset to choose it automatically"
            )
        self.step = self.nfft - self.overlap
        self.response = chirps(self.dm, self.chan_freqs_mhz, self.chan_bw_mhz, self.nfft)

    @property
    def nchan(self) -> int:
        return self.chan_freqs_mhz.size

    def process(self, block: np.ndarray) -> np.ndarray:
        """Dedisperse one (nchan, npol, nsamp) block with nsamp >= nfft.

        Returns (nchan, npol, nout) complex128, nout a multiple of ``step``;
        output k is input sample k + discard_head.
        """
        block = np.asarray(block, dtype=np.complex128)
        if block.ndim != 3 or block.shape[0] != self.nchan:
            raise ConfigError(
                f"expected a block shaped (nchan={self.nchan}, npol, nsamp), got {block.shape}"
            )
        if block.shape[-1] < self.nfft:
            raise ConfigError(
                f"block of {block.shape[-1]} samples is shorter than the FFT ({self.nfft}); "
                "use StreamingDedisperser for short blocks"
            )
        ols = StreamingOverlapSave(self.response, self.discard_head, self.discard_tail)
        return ols.process(block)[0]

    def streaming(self) -> StreamingDedisperser:
        return StreamingDedisperser(self)


class StreamingDedisperser(StreamingOverlapSave):
    """A :class:`Dedisperser` fed block by block, carrying the overlap between blocks."""

    def __init__(self, dedisperser: Dedisperser) -> None:
        self.dedisperser = dedisperser
        super().__init__(dedisperser.response, dedisperser.discard_head, dedisperser.discard_tail)
