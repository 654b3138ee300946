"""Where each packed sample value sits in a buffer: :class:`PackedLayout`.

Data, not GPU code: file formats (``io/vdif.py``), the format table
(``formats.py``) and the file source describe their bytes with it, and the packed
unpack kernel (``fold/kernels.py``) reads them through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from voltstream.errors import ConfigError

__all__ = ["ENCODINGS", "PackedLayout"]

# Encodings of unpack_packed.cu, by name; see its header for what each means.
ENCODINGS = {"twos": 0, "offset": 1, "vdif2": 2}


@dataclass(frozen=True)
class PackedLayout:
    """Where sample (s, chan, pol, re/im) sits in a packed buffer, in values.

    ``value = (s // spf) * s_blk + (s % spf) * s_t + chan * s_c + pol * s_p + d``,
    each value ``nbit`` bits, least significant first. With ``cpb`` (channels per
    block, 0: all), ``chan * s_c`` becomes ``(chan // cpb) * s_cb + (chan % cpb) *
    s_c``: a band in several streams, each stream a block of channels elsewhere in the
    buffer (a capture chunk's [stream][packet][payload]). :meth:`time_major` is
    DADA's order; :meth:`vdif_frames` is VDIF's (each polarisation a thread of
    frames, frames of one time side by side).
    """

    nbit: int
    encoding: str
    ndim: int
    nchan: int
    npol: int
    spf: int
    s_blk: int
    s_t: int
    s_c: int
    s_p: int
    cpb: int = 0
    s_cb: int = 0

    @property
    def chans_per_block(self) -> int:
        return self.cpb or self.nchan

    def chan_offset(self, chan: Any) -> Any:
        """Values from channel 0 to channel ``chan`` (an int or an array)."""
        cpb = self.chans_per_block
        return (chan // cpb) * self.s_cb + (chan % cpb) * self.s_c

    @classmethod
    def time_major(cls, nbit: int, encoding: str, nchan: int, npol: int, ndim: int) -> PackedLayout:
        per = nchan * npol * ndim
        return cls(nbit, encoding, ndim, nchan, npol, 1, per, 0, npol * ndim, ndim)

    @classmethod
    def vdif_frames(
        cls, nbit: int, encoding: str, nchan: int, npol: int, ndim: int, spf: int
    ) -> PackedLayout:
        per_frame = spf * nchan * ndim
        return cls(nbit, encoding, ndim, nchan, npol, spf, npol * per_frame, nchan * ndim, ndim,
                   per_frame)  # fmt: skip

    def kernel_args(self) -> tuple[Any, ...]:
        """The layout as the packed kernels take it (unpack_packed.cu,
        real_to_complex.cu: their shared ``packed_value.cuh`` reads values by it)."""
        import numpy as np

        ncp = self.nchan * self.npol
        return (np.int64(self.s_blk), np.int32(self.spf), np.int32(self.s_t),
                np.int32(self.s_c), np.int32(self.s_p), np.int32(self.chans_per_block),
                np.int64(self.s_cb), np.int32(self.npol), np.int32(ncp))  # fmt: skip

    def nbytes(self, nsamp: int) -> int:
        """Bytes up to and including the last value of sample ``nsamp - 1``."""
        if nsamp <= 0:
            return 0
        s = nsamp - 1
        last = (s // self.spf) * self.s_blk + (s % self.spf) * self.s_t
        last += max(self.chan_offset(c) for c in range(self.nchan))
        last += (self.npol - 1) * self.s_p + self.ndim - 1
        return -(-(last + 1) * self.nbit // 8)

    def check(self) -> None:
        if self.nbit not in (2, 4, 8) or self.encoding not in ENCODINGS or self.ndim not in (1, 2):
            raise ConfigError(
                f"the GPU unpack reads 2/4/8-bit {sorted(ENCODINGS)} real or complex values, "
                f"not {self.nbit}-bit {self.encoding!r} ndim={self.ndim}; use --device cpu"
            )
        if self.encoding == "vdif2" and self.nbit != 2:
            raise ConfigError("the VDIF level table is for 2-bit data")
        if self.spf == 1 and (self.nchan * self.npol * self.ndim * self.nbit) % 8:
            raise ConfigError(
                f"{self.nchan} channels x {self.npol} pols x {self.ndim} x {self.nbit} bits is "
                "not a whole number of bytes per sample; the GPU path needs byte-aligned "
                "samples in time-major data (use --device cpu)"
            )
