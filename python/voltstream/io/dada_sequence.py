"""One observation in several DADA files, read as one.

PSRDADA's recorders (dada_dbdisk and friends) and ours cut an observation into files
of ``FILE_SIZE`` bytes. Every file carries the observation's ``UTC_START``, its
``FILE_NUMBER`` and its ``OBS_OFFSET``: the data bytes of the observation before it.
Opening one file of such a sequence (:func:`follow_sequence`) takes the files of the
same observation that follow it in its folder: same UTC_START, SOURCE and sample
geometry, each file's OBS_OFFSET where the one before ends. The chain stops at the
first gap, at a file that ends in a partial sample, or where two files could come
next (our recorder's streams ``<scan>_s<SS>_<offset>.dada`` share a folder: the file
whose name differs from the first's only in its last number is taken then).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from voltstream.errors import FormatError
from voltstream.io.dada import DadaReader, is_dada_header, parse_header, samples_of

__all__ = ["DadaSequence", "follow_sequence"]

log = logging.getLogger("voltstream.io.dada_sequence")

#: Header bytes read from each candidate file: enough for a 4096-byte header.
_PEEK = 4096
#: Keys on which the files of one observation agree.
_SAME = ("UTC_START", "SOURCE", "NCHAN", "NPOL", "NBIT", "NDIM", "TSAMP", "FREQ", "BW")


def _name_pattern(path: Path) -> str:
    """The name with its last run of digits masked: a sequence's files share it."""
    return re.sub(r"\d+(?=\D*$)", "#", path.name)


def _peek(path: Path) -> dict[str, str] | None:
    try:
        with open(path, "rb") as f:
            head = f.read(_PEEK)
    except OSError:
        return None
    if not is_dada_header(head):
        return None
    return parse_header(head.split(b"\0", 1)[0].decode("ascii"))


def _data_bytes(r: DadaReader) -> int:
    return int(r.nsamp * r.bytes_per_sample + r.leftover_bytes)


def follow_sequence(first: DadaReader) -> DadaReader | DadaSequence:
    """``first`` alone, or with the files that continue its observation (module doc)."""
    h = first.header
    if not h.get("OBS_OFFSET", "").isdigit():
        return first
    by_offset: dict[int, list[Path]] = {}
    for p in sorted(first.path.parent.iterdir()):
        if p == first.path or not p.is_file():
            continue
        keys = _peek(p)
        if keys is None or any(keys.get(k) != h.get(k) for k in _SAME):
            continue
        if keys.get("OBS_OFFSET", "").isdigit():
            by_offset.setdefault(int(keys["OBS_OFFSET"]), []).append(p)
    readers = [first]
    while not readers[-1].leftover_bytes:
        nxt = int(readers[-1].header["OBS_OFFSET"]) + _data_bytes(readers[-1])
        paths = by_offset.get(nxt, [])
        if len(paths) > 1:
            paths = [p for p in paths if _name_pattern(p) == _name_pattern(first.path)]
        if len(paths) != 1:
            if paths:
                log.warning("%s: %d files continue the observation at OBS_OFFSET %d (%s); "
                            "reading up to there", first.path, len(paths), nxt,
                            ", ".join(p.name for p in paths))  # fmt: skip
            break
        readers.append(DadaReader(paths[0]))
    end = int(readers[-1].header["OBS_OFFSET"]) + _data_bytes(readers[-1])
    if later := sorted(p.name for off, ps in by_offset.items() if off > end for p in ps):
        log.warning("%s: the observation's data stop at OBS_OFFSET %d; the later files %s "
                    "(after a gap) are not read", first.path.name, end,
                    ", ".join(later))  # fmt: skip
    if len(readers) == 1:
        return first
    return DadaSequence(readers)


class DadaSequence:
    """DADA files of one observation, back to back, as one reader (DadaReader's
    ``obs``, ``nsamp``, ``read_raw`` and ``read_blocks``)."""

    def __init__(self, readers: list[DadaReader]) -> None:
        self.readers = readers
        self.path = readers[0].path
        self.paths = [r.path for r in readers]
        self.obs = readers[0].obs
        self.header = readers[0].header
        self.bytes_per_sample = readers[0].bytes_per_sample
        self.leftover_bytes = readers[-1].leftover_bytes
        self.starts = np.cumsum([0] + [r.nsamp for r in readers])
        self.nsamp = int(self.starts[-1])
        log.info("%s is file %s of an observation of %d files; read as one: %s",
                 self.path.name, self.header.get("FILE_NUMBER", "?"), len(readers),
                 ", ".join(p.name for p in self.paths))  # fmt: skip

    def read_raw(self, start: int, n: int) -> np.ndarray:
        """Samples ``start .. start+n`` as stored, across files: (n, nchan, npol, ndim)."""
        if start < 0 or n < 0 or start + n > self.nsamp:
            raise FormatError(
                f"{self.path}: samples {start}..{start + n} are outside 0..{self.nsamp}; "
                "ask for a range inside the observation"
            )
        parts = []
        for r, s0 in zip(self.readers, self.starts[:-1], strict=True):
            lo, hi = max(start, int(s0)), min(start + n, int(s0) + r.nsamp)
            if lo < hi:
                parts.append(r.read_raw(lo - int(s0), hi - lo))
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else self.readers[0].read_raw(0, 0)

    def read_blocks(self, nsamp: int, start: int = 0) -> Iterator[np.ndarray]:
        """Blocks as DadaReader.read_blocks gives them, across file boundaries."""
        if nsamp < 1:
            raise FormatError(f"block size must be at least one sample, not {nsamp}")
        for s in range(start, self.nsamp, nsamp):
            yield samples_of(self.read_raw(s, min(nsamp, self.nsamp - s)))

    def close(self) -> None:
        for r in self.readers:
            r.close()

    def __enter__(self) -> DadaSequence:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
