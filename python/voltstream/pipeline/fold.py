"""The CPU fold pipeline: reader -> coherent dedispersion -> detection -> folding.

A reader is any object with ``.obs`` (an :class:`Observation`) and
``.read_blocks(nsamp)`` yielding complex (nsamp, nchan, npol) TFP blocks, or
``(block, valid)`` tuples where ``valid`` is bool (nsamp,) and False marks
samples from missing packets. Memory stays bounded by a few blocks.

Time reference: the dedispersed stream's sample k is input sample
k + discard_head, referred to each channel's centre; the folder removes the
inter-channel delays relative to the band centre (``obs.freq_mhz``). Lost
input samples are set to zero before dedispersion, and an output sample is
excluded from the profiles when any input sample in its dedispersion span
(``overlap`` + 1 samples) was lost.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from voltstream.dsp.detect import detect
from voltstream.fold.plan import FoldPlan
from voltstream.fold.reference import FoldSettings
from voltstream.io.baseband import reader_blocks
from voltstream.observation import FoldedArchive, Observation
from voltstream.pipeline.interfaces import BlockSource

__all__ = ["StreamFold", "fold_file"]


class StreamFold:
    """Dedisperse, detect and fold one block at a time: the CPU fold of a file
    (:func:`fold_file`) and of one cluster node's subband (cluster/node.py), which
    gives its own plan (fold/plan.py: the whole band's dedispersion, cut to its
    channels, and times and delays referred to the whole band)."""

    def __init__(
        self, obs: Observation, settings: FoldSettings, plan: FoldPlan | None = None
    ) -> None:
        obs.check_critically_sampled(
            "coherent dedispersion needs critically sampled complex channels "
            "(tsamp = 1/|chan_bw|); check the file's TSAMP, BW and NCHAN"
        )
        self.obs, self.settings = obs, settings
        self.plan = plan or FoldPlan(obs, settings)
        self.folder = self.plan.new_folder()
        self.dd = self.plan.dedisperser
        self.stream = self.dd.streaming()
        self.block_samples = settings.block_samples or max(4 * self.dd.step, 1 << 16)
        self.lost = 0  # input samples from missing packets, set to zero
        self.read = 0
        #: Where the stream's first sample sits in the folder's time (a node that
        #: starts late, cluster/node.py); 0 for a file.
        self.offset = 0

    def feed(self, block: np.ndarray, valid: np.ndarray | None) -> None:
        """One (nsamp, nchan, npol) complex block; ``valid`` False marks lost samples."""
        if valid is not None:
            nlost = int(np.count_nonzero(~valid))
            if nlost:
                # Whatever a reader left in lost samples would leak through the
                # chirp's long response into valid neighbours: make it zero.
                self.lost += nlost
                block = block.copy()
                block[~valid] = 0
        self.read += block.shape[0]
        first = self.stream.next_output_sample
        out, out_valid = self.stream.process(block.transpose(1, 2, 0), valid)
        if out.shape[-1]:
            self.folder.add(
                detect(out, self.settings.pol_mode, basis=self.settings.basis),
                self.offset + first,
                None if out_valid.all() else out_valid,
            )

    @property
    def folded_to(self) -> int:
        """The folder's sample time reached: every sample before it has been folded."""
        return self.offset + self.stream.samples_out

    def archive(self) -> FoldedArchive:
        """The archive of everything fed, with its history line."""
        return self.plan.archive(self.folder, "cpu", self.read, self.stream.samples_out, self.lost)


def fold_file(
    reader: BlockSource,
    settings: FoldSettings,
    progress: Callable[[int, int], None] | None = None,
) -> FoldedArchive:
    """Coherently dedisperse, detect and fold everything the reader yields.

    ``progress(samples_read, samples_folded)`` is called after each block.
    """
    fold = StreamFold(reader.obs, settings)
    for block, valid in reader_blocks(reader, fold.block_samples):
        fold.feed(block, valid)
        if progress is not None:
            progress(fold.read, fold.stream.samples_out)
    return fold.archive()
