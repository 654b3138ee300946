"""A recording ends where its stream ended: the last chunk is cut after the last
packet that arrived.

The capture hands the recorder whole chunks, so the chunk the stream ended in is
written with its slots after the last packet filled (VDIF fill frames, else
zeros). At the end of the run, :func:`cut_stream_ends` takes those slots off the
recording's last piece of each stream, using what the recorder logged
(``tail_absent``: per stream, slots at a piece's end whose packet never came):

- ``vdif`` and ``dada`` (a file per stream): the stream's last file is truncated
  (a DADA header's FILE_SIZE rewritten to match); a file left empty is removed.
- ``vbs`` and ``mark6`` (a chunk holds every stream of a capture thread, stream
  after stream): the thread's last chunk keeps, for every stream, the slots up to
  the last packet of its latest stream, streams still side by side; the vbs file
  is rewritten (under ``.partial``, then renamed), a Mark6 block is shortened in
  place when it is the last block of its file (else it stays whole: replay skips
  its fill slots anyway).

The manifest's entries are changed to match (``packets``, ``bytes``,
``index_range``, ``time_range_s``); returns the slots cut.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path
from typing import Any

__all__ = ["cut_stream_ends"]

_MARK6_BLOCK = struct.Struct("<ii")  # block number, size including these 8 bytes


def cut_stream_ends(files: list[dict[str, Any]], layout: str, slot_len: int) -> int:
    """Cuts each stream's (capture thread's) last piece in ``files`` (manifest
    entries, changed in place; emptied ones removed); returns the slots cut."""
    last: dict[tuple[int, ...], dict[str, Any]] = {}
    for f in files:
        key = tuple(f["streams"])
        if key not in last or f["first_index"] > last[key]["first_index"]:
            last[key] = f
    cut = 0
    for piece in last.values():
        tails = [int(t) for t in piece.get("tail_absent", [])]
        if not tails or min(tails) == 0:
            continue
        done: int | None
        if layout in ("vdif", "dada"):
            done = _cut_run(piece, tails[0], slot_len, layout == "dada")
        else:
            done = _cut_chunk(piece, min(tails), slot_len, layout)
        if done is None:
            continue
        cut += done * len(tails)
        if piece["packets"] == 0:
            files.remove(piece)
    return cut


def _shorten(piece: dict[str, Any], slots: int, slot_len: int) -> None:
    """The manifest entry of a piece that lost ``slots`` slots per stream at its end."""
    per = len(piece["streams"])
    piece["packets"] -= slots
    piece["bytes"] -= slots * slot_len * per
    piece["tail_absent"] = [max(0, int(t) - slots) for t in piece["tail_absent"]]
    first, end = piece["index_range"] if "index_range" in piece else (0, 0)
    if "index_range" in piece:
        piece["index_range"] = [first, end - slots]
    if "time_range_s" in piece and end > first:
        t0, t1 = piece["time_range_s"]
        piece["time_range_s"] = [t0, t0 + (t1 - t0) * (end - slots - first) / (end - first)]


def _cut_run(piece: dict[str, Any], slots: int, slot_len: int, dada: bool) -> int:
    """A stream's last file: truncated ``slots`` slots short (removed if emptied)."""
    slots = min(slots, int(piece["packets"]))
    path = Path(piece["path"])
    _shorten(piece, slots, slot_len)
    if piece["packets"] == 0:
        path.unlink()
        return slots
    os.truncate(path, int(piece["offset"]) + int(piece["bytes"]))
    if dada:
        _dada_file_size(path, int(piece["bytes"]))
    return slots


def _dada_file_size(path: Path, nbytes: int) -> None:
    """Rewrites FILE_SIZE in a DADA header (the header keeps its length)."""
    with open(path, "r+b") as f:
        head = f.read(4096)
        new = re.sub(rb"(?m)^FILE_SIZE[ \t]+\d+", b"FILE_SIZE %d" % nbytes, head)
        if len(new) < len(head):  # fewer digits: NUL padding keeps the length
            new = new + b"\0" * (len(head) - len(new))
        f.seek(0)
        f.write(new[: len(head)])
        f.flush()
        os.fsync(f.fileno())


def _cut_chunk(piece: dict[str, Any], slots: int, slot_len: int, layout: str) -> int | None:
    """A capture thread's last chunk (vbs file, Mark6 block), ``slots`` shorter per
    stream; None where a Mark6 block is not its file's last (left whole)."""
    path, offset, nbytes = Path(piece["path"]), int(piece["offset"]), int(piece["bytes"])
    nstreams, per = len(piece["streams"]), int(piece["packets"])
    slots = min(slots, per)
    keep = per - slots
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(nbytes)
    parts = [data[s * per * slot_len : (s * per + keep) * slot_len] for s in range(nstreams)]
    body = b"".join(parts)
    if layout == "mark6":
        if path.stat().st_size != offset + nbytes:
            return None
        start = offset - _MARK6_BLOCK.size
        number = _MARK6_BLOCK.unpack(_read_at(path, start, _MARK6_BLOCK.size))[0]
        with open(path, "r+b") as f:
            if keep:
                f.seek(start)
                f.write(_MARK6_BLOCK.pack(number, _MARK6_BLOCK.size + len(body)) + body)
                f.truncate(offset + len(body))
            else:
                f.truncate(start)
            f.flush()
            os.fsync(f.fileno())
    elif keep:
        partial = path.with_name(path.name + ".partial")
        with open(partial, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    else:
        path.unlink()
    _shorten(piece, slots, slot_len)
    return slots


def _read_at(path: Path, offset: int, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(n)
