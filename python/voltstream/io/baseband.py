"""Opening a baseband file of any format voltstream reads, by its content."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from voltstream.errors import ConfigError, FormatError

if TYPE_CHECKING:
    from voltstream.io.dada import DadaReader
    from voltstream.io.dada_sequence import DadaSequence
    from voltstream.io.vdif import VdifFile
    from voltstream.pipeline.interfaces import BlockSource

__all__ = ["open_baseband", "reader_blocks"]


def open_baseband(
    path: str | os.PathLike[str],
    chan_bw_mhz: float | None = None,
    freq_mhz: float | None = None,
    sequence: bool = False,
    threads: list[int] | None = None,
) -> DadaReader | DadaSequence | VdifFile:
    """Opens a baseband file by its content: DADA (ASCII header) or VDIF frames (.vdif).

    ``chan_bw_mhz`` and ``freq_mhz`` override a VDIF file's sidecar (the channel
    count comes from the first frame's header). With ``sequence``, a DADA file that
    starts a run of files of one observation is read with the files that follow it
    (io/dada_sequence.py). ``threads``: the VDIF threads to read (polarisations, in
    that order), the others left out; not for DADA."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{path}: no such file")
    try:
        with open(p, "rb") as f:
            head = f.read(4096)  # a DADA header's first keys may follow comment lines
    except OSError as e:
        raise FormatError(f"cannot read {path}: {e.strerror}") from e
    from voltstream.io.dada import is_dada_header

    if is_dada_header(head):
        from voltstream.io.dada import open_dada

        if threads is not None:
            raise ConfigError(f"--vdif-threads picks threads of a VDIF file; {path} is DADA")

        reader = open_dada(p)
        if not sequence:
            return reader
        from voltstream.io.dada_sequence import follow_sequence

        return follow_sequence(reader)
    if p.suffix == ".vdif":
        from voltstream.io.vdif import LEGACY_HEADER_LEN, decode_headers, open_vdif

        kw: dict[str, Any] = {"select": threads}
        if freq_mhz is not None:
            kw["freq_mhz"] = freq_mhz
        if chan_bw_mhz is not None and len(head) >= LEGACY_HEADER_LEN:
            nchan = int(decode_headers(np.frombuffer(head[:16], np.uint8)[None])["nchan"][0])
            kw["bw_mhz"] = chan_bw_mhz * nchan
        return open_vdif(p, **kw)
    raise FormatError(
        f"{path}: not a DADA file (no 'HEADER DADA' at the start) and not named .vdif; "
        "voltstream reads DADA files (TFP) and VDIF files"
    )


def reader_blocks(
    reader: BlockSource, nsamp: int, dtype: Any = None
) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """A reader's blocks as ``(block, valid)``: ``block`` (n, nchan, npol) (cast to
    ``dtype`` when given), ``valid`` bool (n,) or None; a block of another shape is a
    ConfigError naming what the observation expects."""
    obs = reader.obs
    for item in reader.read_blocks(int(nsamp)):
        valid = None
        if isinstance(item, tuple):
            item, valid = item
        block = np.asarray(item, dtype=dtype)
        if block.ndim != 3 or block.shape[1:] != (obs.nchan, obs.npol):
            raise ConfigError(
                f"reader yielded a block shaped {block.shape}; expected "
                f"(nsamp, {obs.nchan}, {obs.npol}) for this observation"
            )
        yield block, (None if valid is None else np.asarray(valid, dtype=bool))
