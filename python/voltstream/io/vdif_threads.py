"""Which (channels, polarisation) each VDIF thread carries: one rule for files, live
streams and stream descriptions.

A VDIF stream's threads, in the order given (``--vdif-threads``, a description's
``threads``, a file's ascending ids), are ``npol`` polarisations times ``blocks``
blocks of channels, the polarisation fastest: thread ``k`` holds polarisation
``k % npol`` of channel block ``k // npol``, each block the thread's own channels
(its header's nchan). The blocks lie side by side in the band in thread order, as a
file's channels do: the band's centre is the given frequency, the channel width is
signed (negative: a lower sideband, the channels' sky frequencies falling with their
index). So, for the common VLBI shape of four threads of one real channel each (EDV3
from a DBBC3, R2DBE or RDBE):

- ``npol = 1``: four subbands of one polarisation (threads 0..3 are channels 0..3);
- ``npol = 2``: two subbands of two polarisations (threads 0, 1 are subband 0's
  polarisations A and B; 2, 3 subband 1's): list the threads in that order.

Default (:func:`default_npol`): one or two threads are polarisations (a file's
reader and the live fold always took them so); more threads are subbands of one
polarisation. Say otherwise with ``--npol`` or the description's ``npol``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from voltstream.errors import ConfigError

__all__ = ["ThreadBlocks", "check_npol", "default_npol", "to_blocks"]


def default_npol(nthreads: int) -> int:
    """Polarisations of ``nthreads`` threads when nobody says: the threads themselves
    when one or two, else one (the threads are subbands)."""
    return nthreads if nthreads <= 2 else 1


def check_npol(npol: int, nthreads: int, what: str = "--npol") -> int:
    """``nthreads // npol`` channel blocks; ConfigError where they do not divide."""
    if npol not in (1, 2):
        raise ConfigError(f"{what} {npol}: VDIF threads carry 1 or 2 polarisations")
    if nthreads % npol:
        raise ConfigError(
            f"{what} {npol}: {nthreads} threads are not whole (channel block, polarisation) "
            f"pairs; list {npol} threads per block of channels, polarisation fastest"
        )
    return nthreads // npol


def to_blocks(x: np.ndarray, npol: int) -> np.ndarray:
    """Samples (n, nchan, threads) as the band (n, blocks * nchan, npol): thread ``k``
    is polarisation ``k % npol`` of channels ``(k // npol) * nchan ..``."""
    n, nchan, nthreads = x.shape
    blocks = nthreads // npol
    y = x.reshape(n, nchan, blocks, npol).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(y).reshape(n, blocks * nchan, npol)


def from_blocks(x: np.ndarray, blocks: int) -> np.ndarray:
    """The inverse of :func:`to_blocks`: the band (n, blocks * nchan, npol) as each
    thread's samples (n, nchan, blocks * npol), thread order."""
    n, nchan_all, npol = x.shape
    y = x.reshape(n, blocks, nchan_all // blocks, npol).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(y).reshape(n, nchan_all // blocks, blocks * npol)


class ThreadBlocks:
    """A reader of a VDIF file's threads (its ``obs.npol`` are the threads) as the band
    of ``npol`` polarisations and channel blocks (:func:`to_blocks`). Only a reader
    of blocks: a GPU fold of it takes the staged path."""

    def __init__(self, reader: Any, npol: int) -> None:
        o = reader.obs
        self.blocks = check_npol(npol, o.npol)
        self.reader, self.npol = reader, npol
        self.obs = replace(o, nchan=o.nchan * self.blocks, npol=npol,
                           bw_mhz=o.bw_mhz * self.blocks)  # fmt: skip
        self.nsamp = getattr(reader, "nsamp", None)
        self.path = getattr(reader, "path", None)
        self.threads = getattr(reader, "threads", None)

    def read_blocks(self, nsamp: int) -> Iterator[np.ndarray | tuple[np.ndarray, np.ndarray]]:
        for item in self.reader.read_blocks(nsamp):
            block, valid = item if isinstance(item, tuple) else (item, None)
            out = to_blocks(np.asarray(block), self.npol)
            yield out if valid is None else (out, valid)

    def read(self) -> np.ndarray:
        return to_blocks(self.reader.read(), self.npol)

    def close(self) -> None:
        self.reader.close()
