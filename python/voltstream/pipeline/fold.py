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

from voltstream.dsp.dedisperse import Dedisperser
from voltstream.dsp.detect import detect
from voltstream.errors import ConfigError
from voltstream.fold.reference import Folder, FoldSettings
from voltstream.io.baseband import reader_blocks
from voltstream.observation import FoldedArchive
from voltstream.pipeline.interfaces import BlockSource

__all__ = ["fold_file"]


def fold_file(
    reader: BlockSource,
    settings: FoldSettings,
    progress: Callable[[int, int], None] | None = None,
) -> FoldedArchive:
    """Coherently dedisperse, detect and fold everything the reader yields.

    ``progress(samples_read, samples_folded)`` is called after each block.
    """
    obs = reader.obs
    dm, predictor, nbin, tsub_s = settings.dm, settings.predictor, settings.nbin, settings.tsub_s
    pol_mode = settings.pol_mode
    folder = Folder.for_observation(obs, nbin, pol_mode, dm, predictor, tsub_s)
    obs.check_critically_sampled(
        "coherent dedispersion needs critically sampled complex channels "
        "(tsamp = 1/|chan_bw|); check the file's TSAMP, BW and NCHAN"
    )
    dd = Dedisperser(dm, obs.chan_freqs_mhz, obs.chan_bw_mhz, nfft=settings.nfft)
    stream = dd.streaming()
    block_samples = settings.block_samples
    if block_samples is None:
        block_samples = max(4 * dd.step, 1 << 16)
    lost = 0
    nread = 0
    for block, valid in reader_blocks(reader, block_samples):
        if valid is not None:
            nlost = int(np.count_nonzero(~valid))
            if nlost:
                # Whatever a reader left in lost samples would leak through the
                # chirp's long response into valid neighbours: make it zero.
                lost += nlost
                block = block.copy()
                block[~valid] = 0
        nread += block.shape[0]
        first = stream.next_output_sample
        out, out_valid = stream.process(block.transpose(1, 2, 0), valid)
        if out.shape[-1]:
            folder.add(
                detect(out, pol_mode, basis=settings.basis),
                first,
                None if out_valid.all() else out_valid,
            )
        if progress is not None:
            progress(nread, stream.samples_out)
    if stream.samples_out == 0:
        raise ConfigError(
            f"input of {nread} samples is shorter than one dedispersion FFT "
            f"({dd.nfft} samples at DM {dm}); give a longer input"
        )
    arch = folder.result(obs, pol_type=pol_mode)
    arch.excluded_samples = lost
    kind = "polyco" if getattr(predictor, "text", None) else type(predictor).__name__
    arch.history.append(
        f"voltstream fold (cpu): coherent dedispersion DM={dm} nfft={dd.nfft} "
        f"overlap={dd.overlap} (head {dd.discard_head}, tail {dd.discard_tail}); "
        f"detection {pol_mode}; nbin={nbin} tsub={tsub_s}; predictor {kind}; "
        f"{nread} samples read, {stream.samples_out} dedispersed, {lost} lost"
    )
    return arch
