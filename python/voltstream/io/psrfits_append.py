"""A PSRFITS fold-mode archive grown one sub-integration at a time, whole on disk after
every row (issue 16: a merger's archive must survive a kill -9 with at most the row in
flight lost).

The file is written once by `write_psrfits` with its first row and the SUBINT table
as the last HDU; each further row is appended at the end of the file: the row's bytes
(built by the same code as a whole archive's, so a file grown row by row reads back
exactly as one written at once), the padding to the 2880-byte FITS block, then the
SUBINT header's NAXIS2 card rewritten in place, and an fsync. A reader therefore sees
either the rows before an append or the rows after it. The primary header's SCANLEN
is rewritten with NAXIS2; the HISTORY table keeps the NSUB it was written with (the
SUBINT table's length is what readers use).
"""

from __future__ import annotations

import io
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from voltstream.errors import FormatError
from voltstream.io.psrfits import _quantise, write_psrfits
from voltstream.observation import FoldedArchive

BLOCK = 2880
CARD = 80


def _subint_geometry(data: bytes | Path) -> tuple[int, int, int, int, int]:
    """(header offset, data offset, row bytes, rows) of the SUBINT HDU, and where the
    primary header ends."""
    from astropy.io import fits

    src = io.BytesIO(data) if isinstance(data, bytes) else data
    with fits.open(src, memmap=False) as hdul:
        i = [h.name for h in hdul].index("SUBINT")
        if i != len(hdul) - 1:
            raise FormatError("the SUBINT table is not the file's last HDU: cannot append")
        info = hdul.fileinfo(i)
        h = hdul[i].header
        primary_end = int(hdul.fileinfo(0)["datLoc"])
        return (
            int(info["hdrLoc"]), int(info["datLoc"]), int(h["NAXIS1"]), int(h["NAXIS2"]),
            primary_end,
        )  # fmt: skip


def _card(key: str, value: int | float, comment: str) -> bytes:
    """One fixed-format FITS card: the value right-justified in columns 11-30."""
    text = repr(float(value)).upper() if isinstance(value, float) else str(int(value))
    card = f"{key:<8}= {text:>20} / {comment}"
    return card[:CARD].ljust(CARD).encode("ascii")


def _rewrite_card(f: io.BufferedRandom, start: int, end: int, key: str, card: bytes) -> None:
    f.seek(start)
    header = f.read(end - start)
    for pos in range(0, len(header), CARD):
        if header[pos : pos + 8].decode("ascii").rstrip() == key:
            f.seek(start + pos)
            f.write(card)
            return
    raise FormatError(f"no {key} card in the header at byte {start}")


#: 1 / the sidereal day's length in solar seconds: LST_SUB advances this much faster.
_SIDEREAL = 1.00273781191135448


def _row_template(path: Path, dat: int, row_bytes: int) -> tuple[np.ndarray, float]:
    """The file's first SUBINT row as a (big-endian) record, and the LST at the start
    (LST_SUB less its advance over OFFS_SUB): what every later row shares with it."""
    from astropy.io import fits

    with fits.open(path, memmap=False) as hdul:
        dtype = hdul["SUBINT"].data.dtype
    with open(path, "rb") as f:
        f.seek(dat)
        row = np.frombuffer(f.read(row_bytes), dtype=dtype).copy()
    lst0 = (float(row["LST_SUB"][0]) - float(row["OFFS_SUB"][0]) * _SIDEREAL) % 86400.0
    return row, lst0


class AppendingArchive:
    """``path`` holds ``first`` (one sub-integration) and then every `append`ed row."""

    def __init__(self, path: str | os.PathLike[str], first: FoldedArchive, **write_kw: Any) -> None:
        if first.nsub != 1:
            raise FormatError(f"an appending archive starts with one row, got {first.nsub}")
        self.path = Path(path)
        write_psrfits(self.path, first, subint_last=True, **write_kw)
        geometry = _subint_geometry(self.path)
        self._hdr, self._dat, self.row_bytes, self.nrows, self._primary_end = geometry
        self._row, self._lst0 = _row_template(self.path, self._dat, self.row_bytes)
        self.scanlen = float(np.sum(first.tsubint_s))
        self._fsync()

    @classmethod
    def reopen(cls, path: str | os.PathLike[str]) -> AppendingArchive:
        """An archive this class wrote (a merger killed, restarted), to append more rows
        to, as its first row describes them. Bytes past the last whole row (an append
        cut short) are dropped by the next append, which truncates to the rows NAXIS2
        counts."""
        from astropy.io import fits

        arch = cls.__new__(cls)
        arch.path = Path(path)
        with warnings.catch_warnings():  # the bytes of an append cut short, cut below
            warnings.simplefilter("ignore", fits.verify.VerifyWarning)
            geometry = _subint_geometry(arch.path)
        arch._hdr, arch._dat, arch.row_bytes, arch.nrows, arch._primary_end = geometry
        end = arch._dat + arch.nrows * arch.row_bytes
        os.truncate(arch.path, end + (-end % BLOCK))  # whole again, before anything reads it
        with fits.open(arch.path, memmap=False) as hdul:
            arch.scanlen = float(np.sum(hdul["SUBINT"].data["TSUBINT"]))
        arch._row, arch._lst0 = _row_template(arch.path, arch._dat, arch.row_bytes)
        return arch

    def append(
        self,
        data: np.ndarray,
        weights: np.ndarray,
        tsubint_s: float,
        offs_sub_s: float,
        period_s: float,
    ) -> None:
        """Adds one sub-integration: ``data`` (npol, nchan, nbin), ``weights`` (nchan,).

        The row is the first row's record with what changes from row to row set in it,
        by the same rules `write_psrfits` follows (its quantisation, LST_SUB from the
        start's LST): a FITS row without building a file with astropy for each (which
        cost 55-100 ms a row, the merger's whole budget at short sub-integrations).
        tests/test_psrfits_append.py checks it reads back as one written at once."""
        data = np.asarray(data, dtype=np.float64)
        rec = self._row.copy()
        shape = rec["DATA"].shape[1:]  # (npol, nchan, nbin)
        nchan = shape[1]
        if data.shape != shape or np.shape(weights) != (nchan,):
            raise FormatError(
                f"a row of data {data.shape} and weights {np.shape(weights)} does not fit "
                f"this archive's {shape[0]} pols x {nchan} channels x {shape[2]} bins"
            )
        q, scl, offs = _quantise(data[None])
        rec["INDEXVAL"] = self.nrows
        rec["TSUBINT"], rec["OFFS_SUB"], rec["PERIOD"] = tsubint_s, offs_sub_s, period_s
        rec["LST_SUB"] = (self._lst0 + float(offs_sub_s) * _SIDEREAL) % 86400.0
        rec["DAT_WTS"] = np.asarray(weights, dtype=np.float32).reshape(1, -1)
        rec["DAT_OFFS"] = offs.reshape(1, -1)
        rec["DAT_SCL"] = scl.reshape(1, -1)
        rec["DATA"] = q.reshape(rec["DATA"].shape)
        row = rec.tobytes()
        row_bytes = len(row)
        end = self._dat + self.nrows * self.row_bytes
        with open(self.path, "r+b") as f:
            f.truncate(end)
            f.seek(end)
            f.write(row)
            f.write(b"\0" * (-(end + row_bytes) % BLOCK))
            f.flush()
            os.fsync(f.fileno())
            # The rows are on disk: only now does the header say there is one more.
            self.nrows += 1
            self.scanlen += float(tsubint_s)
            _rewrite_card(f, self._hdr, self._dat, "NAXIS2", _card("NAXIS2", self.nrows,
                          "number of rows in table"))  # fmt: skip
            _rewrite_card(f, 0, self._primary_end, "SCANLEN", _card("SCANLEN", self.scanlen,
                          "[s] Requested scan length"))  # fmt: skip
            f.flush()
            os.fsync(f.fileno())

    def _fsync(self) -> None:
        with open(self.path, "rb") as f:
            os.fsync(f.fileno())
