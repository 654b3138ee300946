"""What a voltage dump holds of a burst (tests/test_triggered_dumps.py, tests/
test_search_dumps.py, tests/gpu/test_search_dumps_gpu.py): the power of its samples,
each channel shifted back by its delay at a DM, peaks at the burst's arrival."""

from __future__ import annotations

import numpy as np

from voltstream.dsp.dedisperse import dispersion_delay_s
from voltstream.io.dada import open_dada


def read_dump(path: str) -> tuple[dict, np.ndarray, object]:
    """A dump's header, its samples (int8 TFP, re/im last) and its Observation."""
    f = open_dada(path)
    return f.header, f.read_raw(0, f.nsamp), f.obs


def dedispersed_peak_s(samples: np.ndarray, start_s: float, dm: float, freqs_mhz: np.ndarray,
                       f_ref_mhz: float, tsamp_s: float, width: int = 64) -> float:  # fmt: skip
    """When the dump's power summed over the band, each channel shifted by its delay at
    ``dm`` relative to ``f_ref_mhz``, peaks (smoothed over ``width`` samples): seconds
    on the dump's clock, ``start_s`` at its first sample."""
    x = samples.astype(np.float32)
    power = (x**2).sum(axis=(2, 3))  # (time, channel)
    shifts = np.round(dispersion_delay_s(dm, freqs_mhz, f_ref_mhz) / tsamp_s).astype(int)
    series = sum(np.roll(power[:, c], -shifts[c]) for c in range(len(freqs_mhz)))
    smooth = np.convolve(series, np.ones(width), "valid")
    return float(start_s + (np.argmax(smooth) + width / 2) * tsamp_s)
