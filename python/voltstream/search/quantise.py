"""Filterbank samples to what a file holds: 8-bit codes with a scale and offset per
polarisation product and channel, or 32-bit floats; lost samples filled.

Statistics: a running mean and variance per (product, channel), updated once per row
(``nsblk`` output samples) from the row's valid samples: the first row with data sets
them, each later row moves them halfway to its own (``WEIGHT``), so a burst in one row
moves the scale at most by half while a changing band is followed within a few rows. A
channel with no valid sample in a row keeps its statistics.

8 bits: ``code = clip(rint((x - mean) / scale) + ZERO, 0, 255)`` with ``scale = std /
PER_SIGMA`` (16 codes per standard deviation: +-8 sigma before clipping), so a value
is ``code * scale + offset`` with ``offset = mean - ZERO * scale`` (PSRFITS' DAT_SCL and
DAT_OFFS, as float32). A lost sample gets ``ZERO``, the code of the channel's mean (the
quantiser's zero). 32 bits: the samples as float32; a lost sample gets the channel's
mean. The row's scale and offset are those of the statistics after its update.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PER_SIGMA", "WEIGHT", "ZERO", "RunningQuantiser"]

ZERO = 128
PER_SIGMA = 16.0
WEIGHT = 0.5


class RunningQuantiser:
    """The running statistics of (npol, nchan) products and the rows made from them."""

    def __init__(self, npol: int, nchan: int, nbits: int = 8) -> None:
        self.nbits = nbits
        self.mean = np.zeros((npol, nchan))
        self.var = np.ones((npol, nchan))
        self._seen = np.zeros((npol, nchan), bool)
        self.clipped = 0  # 8-bit codes clipped at 0 or 255

    def update(self, rows: np.ndarray, valid: np.ndarray) -> None:
        """Folds in a row's valid samples (``rows`` (n, npol, nchan), ``valid`` (n,))."""
        x = rows if valid.all() else rows[valid]  # no copy of a whole row
        if not len(x):
            return
        mean = x.mean(axis=0)
        var = np.square(x - mean).mean(axis=0)  # np.var, without its second mean
        w = np.where(self._seen, WEIGHT, 1.0)
        self.mean += w * (mean - self.mean)
        self.var += w * (var - self.var)
        self._seen[:] = True

    def row(self, rows: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(data, scale, offset) of one row after updating the statistics with it: data
        uint8 codes (nbits 8) or float32 (nbits 32), (n, npol, nchan); scale and offset
        float32 (npol, nchan), with which ``data * scale + offset`` is the sample.

        The codes are computed in the samples' own precision (float32 from the engines),
        in place in one work array: a live filterbank quantises every output sample on
        the capture's consumer thread, and float64 temporaries made it 2-3x slower (the
        statistics, one value per channel, stay float64)."""
        self.update(rows, valid)
        all_valid = bool(valid.all())
        if self.nbits == 32:
            data = rows.astype(np.float32)
            if not all_valid:
                data[~valid] = self.mean.astype(np.float32)
            one = np.ones(self.mean.shape, np.float32)
            return data, one, np.zeros(self.mean.shape, np.float32)
        std = np.sqrt(self.var)
        scale = np.where(std > 0, std / PER_SIGMA, 1.0)
        work = rows.dtype if rows.dtype in (np.float32, np.float64) else np.float64
        codes = np.subtract(rows, self.mean.astype(work), dtype=work)
        np.divide(codes, scale.astype(work), out=codes)
        np.rint(codes, out=codes)
        codes += ZERO
        if not all_valid:
            codes[~valid] = ZERO
        self.clipped += int(np.count_nonzero(codes < 0)) + int(np.count_nonzero(codes > 255))
        offset = self.mean - ZERO * scale
        np.clip(codes, 0, 255, out=codes)
        return codes.astype(np.uint8), scale.astype(np.float32), offset.astype(np.float32)
