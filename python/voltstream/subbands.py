"""One band, many subbands: how a digitiser that splits its band between nodes
(the YNAO ROACH2: 128 channels as 4 x 32, one subband a node) is described.

A whole band of ``n * fmt.nchan`` channels is centred on ``fmt.freq_mhz``; subband
``i`` is its channels ``[i * nchan, (i + 1) * nchan)`` in whole-band channel order,
so with a lower sideband (negative channel width) subband 0 holds the highest
frequencies, as channel 0 does. Each subband is an ordinary stream of ``fmt``'s
geometry, centred on the mean of its channels' centre frequencies, and keeps the
whole band's time axis (same start, same packet indices).

`voltstream simulate --subbands N` uses these; so does the cluster driver, which
tells each node the format of the subband it captures.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from voltstream.errors import ConfigError
from voltstream.formats import StreamFormat
from voltstream.observation import Observation

__all__ = ["split_subbands", "subband_formats", "subband_path", "whole_band_observation"]


def _check_count(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ConfigError(f"subband count must be a whole number >= 1, got {n!r}")


def subband_formats(fmt: StreamFormat, n: int) -> list[StreamFormat]:
    """The format of each of ``n`` subbands, in whole-band channel order.

    ``fmt`` describes one subband's geometry (``fmt.nchan`` channels of
    ``fmt.chan_bw_mhz``) and ``fmt.freq_mhz`` is the centre of the whole band.
    Subband ``i`` differs from ``fmt`` only in its centre frequency.
    """
    _check_count(n)
    step = fmt.chan_bw_mhz * fmt.nchan  # signed width of one subband
    # Offsets from the band centre, not from its edge: with n = 1 the centre is
    # fmt.freq_mhz exactly, bit for bit (i - (n - 1) / 2 is exact in binary).
    return [
        dataclasses.replace(fmt, freq_mhz=fmt.freq_mhz + step * (i - (n - 1) / 2))
        for i in range(int(n))
    ]


def whole_band_observation(fmt: StreamFormat, n: int, **kw: Any) -> Observation:
    """The observation of the whole band of ``n`` subbands of ``fmt`` (``kw``: its
    start, source, ... as ``Observation`` takes them): what the simulator
    synthesises, so that dispersion is one across all subbands."""
    _check_count(n)
    return dataclasses.replace(fmt, nchan=fmt.nchan * int(n)).observation(**kw)


def split_subbands(block: np.ndarray, n: int) -> list[np.ndarray]:
    """A whole-band block (nsamp, n * nchan, ...) (int8 re/im or complex) as ``n``
    contiguous (nsamp, nchan, ...) blocks, subband 0 first.

    Quantise the whole block before splitting: the quantiser's scale is one for
    the band, as a digitiser's is.
    """
    _check_count(n)
    if block.ndim < 2 or block.shape[1] % n:
        raise ConfigError(
            f"a block of shape {block.shape} does not split into {n} subbands of equal "
            "channel count (axis 1 holds the channels)"
        )
    nchan = block.shape[1] // n
    # Each part is made contiguous: packetisers and writers want plain arrays.
    return [np.ascontiguousarray(block[:, i * nchan : (i + 1) * nchan]) for i in range(n)]


def subband_path(path: str, i: int) -> str:
    """``scan.dada`` -> ``scan.sb{i}.dada``: subband ``i``'s file of ``--output``
    (``scan`` -> ``scan.sb{i}`` without a suffix)."""
    head, sep, name = path.rpartition("/")
    stem, dot, suffix = name.rpartition(".")
    if not dot or not stem:  # no suffix, or a dot file such as ".hidden"
        return f"{path}.sb{i}"
    return f"{head}{sep}{stem}.sb{i}.{suffix}"
