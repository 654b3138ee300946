"""Filterbanks for the single-pulse tests, made from the simulator's voltages: a small
NumPy detector (each coarse channel split by an FFT, |x|^2 summed over polarisations,
integrated), standing in for `voltstream filterbank`."""

from __future__ import annotations

import numpy as np

from voltstream.observation import Observation
from voltstream.sim.burst import Burst
from voltstream.sim.signal import synthesize

# 16 MHz at 1.4 GHz in 16 critically sampled 1 MHz channels, each split into 32:
# 512 channels of 31.25 kHz every 32 us. DM 500 sweeps 24 ms across the band, 95
# burst widths, so the DM is measured to a fraction of a percent; 0.2 s of two
# polarisations is 6.4 M voltage samples, a quarter of a second to make.
OBS = Observation(nchan=16, npol=2, freq_mhz=1400.0, bw_mhz=16.0, tsamp_s=1e-6)
NFFT, NINT = 32, 1
DURATION = 0.2
DM = 500.0
# F/SEFD = 0.16 ms: a matched-filter S/N of 46 over the 16 MHz (sim/burst.py); 256 us
# wide, 8 samples, so smearing inside a channel (47 us) and whole-sample delays cost
# a few percent only.
BURST = Burst(times_s=(0.1,), width_s=256e-6, fluence_jy_ms=1.6, sefd_jy=10.0)


def filterbank(
    x: np.ndarray, obs: Observation, nfft: int = NFFT, nint: int = NINT
) -> tuple[np.ndarray, np.ndarray, float]:
    """(intensities float32 (nsamp, nchan * nfft), their frequencies (MHz), tsamp)."""
    n = x.shape[0] // (nfft * nint) * nfft * nint
    y = x[:n].reshape(-1, nfft, obs.nchan, obs.npol)
    spec = np.fft.fftshift(np.fft.fft(y, axis=1), axes=1)
    p = (spec.real**2 + spec.imag**2).sum(axis=-1)  # (nspec, nfft, nchan)
    p = p.reshape(-1, nint, nfft, obs.nchan).sum(axis=1)
    data = p.transpose(0, 2, 1).reshape(p.shape[0], -1).astype(np.float32)
    # Bin k of a channel's shifted FFT is k - nfft/2 fine channels from its centre, in
    # sky frequency up for an upper sideband, down for a lower one.
    fine = abs(obs.chan_bw_mhz) / nfft
    offs = obs.sideband * (np.arange(nfft) - nfft // 2) * fine
    freqs = (obs.chan_freqs_mhz[:, None] + offs[None, :]).ravel()
    return data, freqs, obs.tsamp_s * nfft * nint


def simulated(signal: str, seed: int, **kw: object) -> tuple[np.ndarray, np.ndarray, float]:
    x = synthesize(OBS, DURATION, signal=signal, dm=DM, seed=seed, **kw)  # type: ignore[arg-type]
    return filterbank(x, OBS)
