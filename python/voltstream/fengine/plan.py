"""The F-engine's plan: where every spectrum's window lies, and which heaps exist.

One object, made once from the settings, that both the NumPy reference
(``FEngineReference``) and the GPU engine (``GpuFEngine``) are *given* and consult;
neither inherits it nor works these numbers out again. A plan bug is then one bug,
and ``tests/test_fengine_plan.py`` catches it by checking the plan against values
computed from first principles, and that each engine follows the plan it holds.

Time line: spectra sit at ``T = slot * samples_per_heap + k * 2 * nchan`` (digitiser
samples); the window of the spectrum with time stamp ``T`` starts at input sample
``T - D``, ``D`` the coarse delay of its polarisation's delay model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from voltstream.dsp.delay import DelayModel
from voltstream.dsp.pfb import channel_frequencies, check_pfb_shape, pfb_weights
from voltstream.errors import ConfigError
from voltstream.fengine.heaps import HeapLayout

__all__ = ["NPOL", "FEnginePlan", "SpectrumWindows"]

NPOL = 2


@dataclass(frozen=True)
class SpectrumWindows:
    """Per polarisation and spectrum of some heap slots, ``(2, nslots * nspec)`` each:
    where its window starts, its residual delay (s) and phase (rad), and whether its
    coarse delay is beyond the plan's ``max_delay_samples`` (then it is flagged)."""

    starts: np.ndarray
    residual_s: np.ndarray
    phase_rad: np.ndarray
    out_of_range: np.ndarray


@dataclass(frozen=True, eq=False)
class FEnginePlan:
    """Shape, weights and time line of an F-engine; see the module docstring.

    Made by :meth:`make` from the engines' settings keywords; immutable, so one
    plan may serve several engines (the reference and the GPU engine in a test).
    """

    nchan: int
    taps: int
    layout: HeapLayout
    sample_rate_hz: float
    max_delay_samples: int
    weights: np.ndarray  # float64 (taps * 2 * nchan,)
    chan_freqs_hz: np.ndarray  # baseband centre of each channel

    @classmethod
    def make(cls, nchan: int, taps: int, spectra_per_heap: int, *, n_substreams: int = 1,
             bits: int = 8, sample_rate_hz: float = 1712e6, max_delay_samples: int = 0,
             window: str = "hann") -> FEnginePlan:  # fmt: skip
        """The plan for these settings, validated (a ConfigError says what to change)."""
        nchan, taps = check_pfb_shape(nchan, taps)
        layout = HeapLayout(nchan, int(spectra_per_heap), int(n_substreams), int(bits))
        if not float(sample_rate_hz) > 0:
            raise ConfigError(f"sample_rate_hz={sample_rate_hz} must be positive")
        max_delay = max_delay_samples
        if int(max_delay) != max_delay or max_delay < 0:
            raise ConfigError(
                f"max_delay_samples={max_delay}: give a whole number of samples >= 0, "
                "at least the largest coarse delay the delay models will ask for"
            )
        fs = float(sample_rate_hz)
        weights = pfb_weights(nchan, taps, window)
        return cls(nchan, taps, layout, fs, int(max_delay), weights, channel_frequencies(nchan, fs))

    @property
    def step(self) -> int:
        """Input samples between consecutive spectra (a critically sampled PFB)."""
        return 2 * self.nchan

    @property
    def window_len(self) -> int:
        """Input samples one spectrum reads."""
        return self.taps * self.step

    def first_slot(self, timestamp: int) -> int:
        """The first heap slot of a time line whose first sample is ``timestamp``: the
        first whose spectra can all be delayed by up to ``max_delay_samples``."""
        sph = self.layout.samples_per_heap
        return -(-(int(timestamp) + self.max_delay_samples) // sph)

    def keep_from(self, next_slot: int) -> int:
        """The first input sample any slot from ``next_slot`` on can read."""
        return next_slot * self.layout.samples_per_heap - self.max_delay_samples

    def spectrum_times(self, slots: np.ndarray) -> np.ndarray:
        """Time stamps of every spectrum of ``slots``, slot-major: ``(nslots * nspec,)``."""
        nspec = self.layout.spectra_per_heap
        base = np.asarray(slots, dtype=np.int64)[:, None] * self.layout.samples_per_heap
        return (base + np.arange(nspec, dtype=np.int64) * self.step).ravel()

    def windows(self, slots: np.ndarray, delay_models: Sequence[DelayModel]) -> SpectrumWindows:
        """Where the spectra of ``slots`` read their input, per polarisation."""
        if len(delay_models) != NPOL:
            raise ConfigError(f"give one delay model per polarisation ({NPOL})")
        times = self.spectrum_times(slots)
        split = [m.split(times, self.sample_rate_hz) for m in delay_models]
        coarse = np.stack([s[0] for s in split])
        return SpectrumWindows(
            starts=times[None, :] - coarse,
            residual_s=np.stack([s[1] for s in split]),
            phase_rad=np.stack([s[2] for s in split]),
            out_of_range=coarse > self.max_delay_samples,
        )
