"""The plan of one fold: what its settings and its observation's channels imply, made once.

A :class:`FoldPlan` builds the fold's :class:`Dedisperser` (the only place in the
package that does: tests/test_fold_plan.py checks it) and hands its numbers to
every one that needs them: the FFT length, the overlap and the samples cut at each
FFT's ends (the CPU and GPU engines, the multi-GPU segments, a cluster node's
engines, the cluster driver's merge plan, the archive's COHDDISP table), and the
reference :class:`Folder` each engine composes. Nothing here needs CuPy.
"""

from __future__ import annotations

from typing import Any

from voltstream.dsp.dedisperse import Dedisperser
from voltstream.errors import ConfigError
from voltstream.fold.reference import Folder, FoldSettings
from voltstream.observation import FoldedArchive, Observation

__all__ = ["FoldPlan"]


class FoldPlan:
    """A fold of ``obs``'s channels as ``settings`` asks.

    ``band_freqs_mhz`` and ``f_ref_mhz``: these channels are part of a whole band (a
    cluster node's subband, cluster/node.py): the dedispersion is cut as the whole
    band's (its overlap and FFT length) and the folder's delays are referred to
    ``f_ref_mhz`` (the band's centre) instead of ``obs.freq_mhz``.
    """

    def __init__(
        self,
        obs: Observation,
        settings: FoldSettings,
        *,
        band_freqs_mhz: Any = None,
        f_ref_mhz: float | None = None,
    ) -> None:
        self.obs, self.settings = obs, settings
        self.band_freqs_mhz = band_freqs_mhz
        self.f_ref_mhz = f_ref_mhz
        s = settings
        self.dedisperser = Dedisperser(
            s.dm, obs.chan_freqs_mhz, obs.chan_bw_mhz, s.nfft, band_freqs_mhz
        )
        dd = self.dedisperser
        #: FFT length, samples kept per FFT, and those cut at its start and end.
        self.nfft, self.step = dd.nfft, dd.step
        self.head, self.tail, self.overlap = dd.discard_head, dd.discard_tail, dd.overlap

    @property
    def dm(self) -> float:
        return float(self.settings.dm)

    def new_folder(self) -> Folder:
        """A fresh reference folder of this fold (its phase rule and channel delays)."""
        s = self.settings
        return Folder.for_observation(self.obs, s.nbin, s.pol_mode, s.dm, s.predictor,
                                      s.tsub_s, self.f_ref_mhz)  # fmt: skip

    def blocks(self, carry_len: int, n: int) -> int:
        """FFTs that ``carry_len`` carried samples and ``n`` new ones fill."""
        return max(0, (carry_len + n - self.overlap) // self.step)

    def max_blocks(self, chunk: int) -> int:
        """The most FFTs one chunk of ``chunk`` samples can fill (a carry is < nfft)."""
        return (self.nfft - 1 + chunk - self.overlap) // self.step + 1

    def describe(self, archive: FoldedArchive) -> FoldedArchive:
        """Records this fold's coherent dedispersion on ``archive`` (its COHDDISP table:
        FFT length and samples cut at each end) and returns it."""
        archive.coherent_nfft = self.nfft
        archive.coherent_discard = (self.head, self.tail)
        return archive

    def archive(
        self, folder: Folder, where: str, read: int, dedispersed: int, lost: int
    ) -> FoldedArchive:
        """The archive of ``folder``'s sums (a CPU or GPU fold, ``where`` says which),
        with this fold's dedispersion recorded, its lost samples and its history line;
        a ConfigError when nothing was dedispersed (an input shorter than one FFT)."""
        s = self.settings
        if dedispersed == 0:
            raise ConfigError(
                f"input of {read} samples is shorter than one dedispersion FFT "
                f"({self.nfft} samples at DM {s.dm}); give a longer input"
            )
        arch = self.describe(folder.result(self.obs, pol_type=s.pol_mode))
        arch.excluded_samples = lost
        kind = "polyco" if getattr(s.predictor, "text", None) else type(s.predictor).__name__
        arch.history.append(
            f"voltstream fold ({where}): coherent dedispersion DM={s.dm} nfft={self.nfft} "
            f"overlap={self.overlap} (head {self.head}, tail {self.tail}); "
            f"detection {s.pol_mode}; nbin={s.nbin} tsub={s.tsub_s}; predictor {kind}; "
            f"{read} samples read, {dedispersed} dedispersed, {lost} lost"
        )
        return arch
