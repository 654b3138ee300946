"""The whole F-engine on the CPU, in NumPy float64: the oracle for the GPU F-engine.

Two polarisations of real digitiser samples (int16 or float) with a per-sample
valid mask go in, blocks at a time; output heaps (``voltstream.fengine.heaps``)
come out. Per output spectrum and polarisation (docs/fengine.md has the picture):

1. coarse delay: the window of the spectrum with timestamp ``T`` starts at input
   sample ``T - D`` (``voltstream.dsp.delay``);
2. PFB FIR + real-to-complex FFT, Nyquist bin dropped (``voltstream.dsp.pfb``);
3. fine delay and phase: ``exp(i (phi - 2 pi f_k tau_f))``, ``f_k`` the baseband
   channel centre;
4. complex gain per channel per polarisation;
5. optional uniform dither, then rounding to 8-bit (or 4-bit) Gaussian integers with
   saturation counts (``voltstream.dsp.quantize``);
6. transpose to ``(channels, spectra_per_heap, pol, re/im)`` and split by channel
   range into ``n_substreams`` heaps.

Time line: spectra sit at ``T = k * 2 * nchan`` (digitiser samples) and heaps at
multiples of ``samples_per_heap``, so engines with the same settings agree. The first
heap is the first whose timestamp is at least ``first input sample +
max_delay_samples``, so a start-up with delays does not drop heaps.

Lost data: a spectrum is flagged when its window touches an invalid sample, a sample
before the retained history, or when its coarse delay exceeds ``max_delay_samples``;
a heap time slot with any flagged spectrum (either polarisation) sends no heap on any
substream. ``counters`` say how many.

Blocks: ``process`` may be called with blocks of any length; history of
``taps * 2 * nchan + max_delay_samples`` samples is carried over, so the output is
the same for any split of the input (blockwise == one-shot). A gap between blocks
is the same as invalid samples. Dither, when seeded, is drawn per heap time slot
from ``(seed, slot)``, so it too is independent of the split.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from voltstream.dsp.delay import DelayModel, apply_fine_delay
from voltstream.dsp.pfb import pfb_fir
from voltstream.dsp.quantize import apply_gains, quantize, slot_dither, uniform_dither
from voltstream.errors import ConfigError
from voltstream.fengine.heaps import HeapLayout, OutputHeap
from voltstream.fengine.plan import NPOL, FEnginePlan

__all__ = ["NPOL", "FEngineState", "FEngineCounters", "FEngineReference", "postprocess"]


@dataclass
class FEngineCounters:
    """What the F-engine did; heaps are counted per substream."""

    spectra: int = 0
    flagged_spectra: int = 0
    heaps_made: int = 0
    heaps_skipped: int = 0
    saturated: np.ndarray = field(default_factory=lambda: np.zeros(NPOL, dtype=np.int64))


def postprocess(
    spectra: npt.ArrayLike,
    chan_freqs_hz: np.ndarray,
    residual_delay_s: npt.ArrayLike,
    phase_rad: npt.ArrayLike,
    gains: np.ndarray,
    bits: int = 8,
    dither: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Fine delay, gains, quantisation and transpose of one heap's spectra.

    ``spectra``: complex ``(2, nspec, nchan)``; ``residual_delay_s``, ``phase_rad``:
    ``(2, nspec)``; ``gains``: ``(2, nchan)``; ``dither``: None, a seed, or float
    ``(2, nspec, nchan, 2)``. Returns the payload of all channels, int8 ``(nchan,
    nspec, 2, 2)`` (8-bit) or uint8 ``(nchan, nspec, 2)`` (4-bit), and the saturated
    counts per polarisation, int64 ``(2,)``. This is the GPU post-processing kernel.
    """
    x = np.asarray(spectra)
    if x.ndim != 3 or x.shape[0] != NPOL:
        raise ConfigError(f"spectra of shape {x.shape}: give (2 polarisations, nspec, nchan)")
    if isinstance(dither, (int, np.integer)):
        dither = uniform_dither(x.shape, int(dither))
    tau = np.broadcast_to(np.asarray(residual_delay_s, dtype=np.float64), x.shape[:2])
    phi = np.broadcast_to(np.asarray(phase_rad, dtype=np.float64), x.shape[:2])
    rotated = np.stack([apply_fine_delay(x[p], chan_freqs_hz, tau[p], phi[p]) for p in range(2)])
    scaled = apply_gains(rotated, gains)
    parts = []
    saturated = np.zeros(NPOL, dtype=np.int64)
    for p in range(NPOL):
        q, saturated[p] = quantize(scaled[p], bits, None if dither is None else dither[p])
        parts.append(q)
    q = np.stack(parts)  # (pol, spectrum, channel[, re/im])
    order = (2, 1, 0, 3) if bits == 8 else (2, 1, 0)
    return np.ascontiguousarray(q.transpose(order)), saturated


class FEngineState:
    """What every F-engine holds besides its plan: its id and dither seed, the gains and
    delay models that ?gain and ?delays change at run time, and its counters.

    The plan (``voltstream.fengine.plan.FEnginePlan``: shape, weights, where each
    spectrum's window lies) is not inherited: each engine is given one, built by the
    same code for both, and keeps it as ``plan``; the tests check the plan against
    first principles and that each engine computes what its plan says.
    """

    def __init__(
        self,
        nchan: int | None = None,
        taps: int | None = None,
        spectra_per_heap: int | None = None,
        *,
        plan: FEnginePlan | None = None,
        feng_id: int = 0,
        dither_seed: int | None = None,
        **plan_settings: Any,
    ) -> None:
        if plan is None:
            if nchan is None or taps is None or spectra_per_heap is None:
                raise ConfigError("give nchan, taps and spectra_per_heap, or a plan")
            plan = FEnginePlan.make(nchan, taps, spectra_per_heap, **plan_settings)
        elif nchan is not None or taps is not None or spectra_per_heap is not None or plan_settings:
            raise ConfigError("give either a plan or the settings to make one, not both")
        if dither_seed is not None and (int(dither_seed) != dither_seed or dither_seed < 0):
            raise ConfigError(f"dither_seed={dither_seed}: give a non-negative integer or None")
        self.plan = plan
        self.feng_id = int(feng_id)
        self.dither_seed = dither_seed
        self.gains = np.ones((NPOL, plan.nchan), dtype=np.complex128)
        self.delay_models = [DelayModel(), DelayModel()]
        self.counters = FEngineCounters()

    # The plan's shape, read by the output and the control protocol.
    @property
    def layout(self) -> HeapLayout:
        return self.plan.layout

    @property
    def nchan(self) -> int:
        return self.plan.nchan

    # Control, as ?gain / ?delays would set it; takes effect from the next heap.
    def set_gains(self, gains: npt.ArrayLike, pol: int | None = None) -> None:
        """Complex gains: scalar or ``(nchan,)`` for one pol (or both), or ``(2, nchan)``."""
        g = np.asarray(gains, dtype=np.complex128)
        if not np.all(np.isfinite(g)):
            raise ConfigError("gains must be finite complex numbers")
        try:
            if pol is None:
                self.gains = np.array(np.broadcast_to(g, (NPOL, self.nchan)))
            else:
                self.gains[self._pol(pol)] = np.broadcast_to(g, (self.nchan,))
        except ValueError:
            raise ConfigError(
                f"gains of shape {g.shape} do not fit {self.nchan} channels: give a scalar, "
                "one gain per channel, or (2, nchan)"
            ) from None

    def set_delay_model(self, pol: int, model: DelayModel) -> None:
        if not isinstance(model, DelayModel):
            raise ConfigError("set_delay_model takes a voltstream.dsp.delay.DelayModel")
        self.delay_models[self._pol(pol)] = model

    @staticmethod
    def _pol(pol: int) -> int:
        if pol not in (0, 1):
            raise ConfigError(f"polarisation {pol} does not exist: use 0 or 1")
        return int(pol)


class FEngineReference(FEngineState):
    """The CPU F-engine for one antenna (two polarisations); see the module docstring.

    Made from the settings (``nchan, taps, spectra_per_heap`` and the keywords of
    ``FEnginePlan.make``) or from a ``plan``; ``feng_id`` and ``dither_seed`` either way.
    """

    def __init__(self, *args: Any, **settings: Any) -> None:
        super().__init__(*args, **settings)
        self._x = np.zeros((NPOL, 0), dtype=np.float64)
        self._valid = np.zeros((NPOL, 0), dtype=bool)
        self._start = 0  # time stamp of self._x[:, 0]
        self._slot = 0
        self._fresh = True  # no block yet: the next one starts the time line

    @property
    def retained_samples(self) -> int:
        """Samples per pol held between calls: the history the next heaps still need."""
        return int(self._x.shape[1])

    def process(
        self, samples: npt.ArrayLike, timestamp: int, valid: npt.ArrayLike | None = None
    ) -> list[OutputHeap]:
        """Feeds ``samples`` (2, n) starting at ``timestamp``; returns the heaps now complete.

        ``valid`` is None (all valid), bool ``(n,)`` (both pols) or bool ``(2, n)``.
        Heaps come out in time order, substreams in channel order within a slot.
        """
        x = np.asarray(samples)
        if x.ndim != 2 or x.shape[0] != NPOL or np.iscomplexobj(x):
            raise ConfigError(f"samples of shape {x.shape}: give real (2 polarisations, n)")
        if valid is None:
            ok = np.ones(x.shape, dtype=bool)
        else:
            v = np.asarray(valid, dtype=bool)
            try:
                ok = np.array(np.broadcast_to(v, x.shape))
            except ValueError:
                raise ConfigError(
                    f"valid mask of shape {v.shape} does not match samples {x.shape}: "
                    "give (n,) or (2, n) booleans"
                ) from None
        timestamp = int(timestamp)
        if self._fresh:
            self._fresh = False
            self._start = timestamp
            self._slot = self.plan.first_slot(timestamp)
        end = self._start + self._x.shape[1]
        if timestamp < end:
            raise ConfigError(
                f"block at timestamp {timestamp} overlaps data already given (up to {end}): "
                "feed blocks in time order without overlap"
            )
        gap = timestamp - end
        fill = np.zeros((NPOL, gap), dtype=np.float64)
        self._x = np.concatenate([self._x, fill, x.astype(np.float64)], axis=1)
        self._valid = np.concatenate([self._valid, fill.astype(bool), ok], axis=1)
        heaps: list[OutputHeap] = []
        while True:
            out = self._heap(self._slot)
            if out is None:
                break
            heaps.extend(out)
            self._slot += 1
        keep_from = self.plan.keep_from(self._slot)
        drop = min(max(0, keep_from - self._start), self._x.shape[1])
        if drop:
            self._x = self._x[:, drop:]
            self._valid = self._valid[:, drop:]
            self._start += drop
        return heaps

    def _heap(self, slot: int) -> list[OutputHeap] | None:
        """The heaps of one time slot; None when the input does not reach far enough."""
        plan, layout = self.plan, self.layout
        nspec = layout.spectra_per_heap
        t0 = slot * layout.samples_per_heap
        win = plan.windows(np.array([slot]), self.delay_models)
        starts = win.starts
        end = self._start + self._x.shape[1]
        if int(starts.max()) + plan.window_len > end:
            return None
        spectra = np.zeros((NPOL, nspec, self.nchan), dtype=np.complex128)
        flagged = win.out_of_range.copy()
        for p in range(NPOL):
            self._channelize(p, starts[p], spectra[p], flagged[p])
        bad = np.any(flagged, axis=0)
        self.counters.spectra += nspec
        if np.any(bad):
            self.counters.flagged_spectra += int(np.count_nonzero(bad))
            self.counters.heaps_skipped += layout.n_substreams
            return []
        dither = None
        if self.dither_seed is not None:
            dither = slot_dither(int(self.dither_seed), slot, spectra.shape)
        payload, saturated = postprocess(
            spectra,
            plan.chan_freqs_hz,
            win.residual_s,
            win.phase_rad,
            self.gains,
            layout.bits,
            dither,
        )
        self.counters.saturated += saturated
        self.counters.heaps_made += layout.n_substreams
        c = layout.channels_per_heap
        return [
            OutputHeap(
                timestamp=int(t0),
                frequency=layout.channel_offset(sub),
                feng_id=self.feng_id,
                payload=payload[sub * c : (sub + 1) * c].copy(),
                substream=sub,
            )
            for sub in range(layout.n_substreams)
        ]

    def _channelize(
        self, pol: int, starts: np.ndarray, out: np.ndarray, flagged: np.ndarray
    ) -> None:
        """PFB of one pol's spectra into ``out``; marks ``flagged`` where data is missing.

        Consecutive spectra with the same coarse delay form one contiguous run of input,
        as a GPU kernel launch per constant-delay region would see it.
        """
        step, window_len = self.plan.step, self.plan.window_len
        nspec = starts.size
        i = 0
        while i < nspec:
            j = i + 1
            while j < nspec and starts[j] - starts[j - 1] == step:
                j += 1
            lo = int(starts[i]) - self._start
            hi = int(starts[j - 1]) - self._start + window_len
            if lo < 0:
                # History already dropped (or never given): those windows are lost.
                lost = starts[i:j] - self._start < 0
                flagged[i:j] |= lost
                if np.all(lost):
                    i = j
                    continue
                first = i + int(np.argmin(lost))
                self._channelize(pol, starts[first:j], out[first:j], flagged[first:j])
                i = j
                continue
            segment = self._x[pol, lo:hi]
            invalid = np.concatenate([[0], np.cumsum(~self._valid[pol, lo:hi])])
            offsets = np.arange(j - i) * step
            flagged[i:j] |= (invalid[offsets + window_len] - invalid[offsets]) > 0
            g = pfb_fir(segment, self.plan.weights, self.nchan)
            out[i:j] = np.fft.rfft(g, axis=-1)[:, : self.nchan]
            i = j
