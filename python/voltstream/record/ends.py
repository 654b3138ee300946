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

A recording begins where its stream began, too, in the ``vdif`` layout (files that
users hand to other VDIF readers): a stream's first chunk starts on a chunk
boundary of the packet index, so its slots before the first frame that arrived are
fill (zeros while no frame of the stream has been seen, VDIF fill frames after).
:func:`cut_stream_starts` takes them off the front of each stream's first file (the
file rewritten from its first frame on, under ``.partial``, then renamed; files of
fill alone removed). The other layouts keep them: a DADA file's leading zeros
cannot be told from samples, and a vbs or Mark6 chunk holds every stream side by
side (replay skips their fill slots).
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path
from typing import Any

from voltstream.record.manifest import replace_file

__all__ = ["cut_stream_ends", "cut_stream_starts"]

_MARK6_BLOCK = struct.Struct("<ii")  # block number, size including these 8 bytes
#: The payload word of a VDIF fill frame (the recorder's, record/layout.rs).
_FILL_WORD = (0x11223344).to_bytes(4, "little")
#: Slots read at once while looking for a stream's first frame.
_READ_SLOTS = 1024


def cut_stream_starts(files: list[dict[str, Any]], layout: str, slot_len: int) -> int:
    """The ``vdif`` layout: each stream's fill slots before its first frame taken off
    its first files (manifest entries changed in place; emptied ones removed);
    returns the slots cut. Other layouts: nothing (the module says why)."""
    if layout != "vdif":
        return 0
    runs: dict[tuple[int, ...], list[dict[str, Any]]] = {}
    for f in files:
        runs.setdefault(tuple(f["streams"]), []).append(f)
    cut = 0
    for pieces in runs.values():
        for piece in sorted(pieces, key=lambda f: int(f["first_index"])):
            lead = _leading_fill(piece, slot_len)
            if lead:
                _cut_front(piece, lead, slot_len)
                cut += lead
            if piece["packets"] > 0:
                break  # this file holds the stream's first frame: the rest follow it
            files.remove(piece)
    return cut


def _is_fill(slot: bytes) -> bool:
    """A slot the recorder filled: zeros (no frame of the stream seen yet), or a VDIF
    fill frame (invalid bit, payload all fill words). A frame that arrived invalid is
    never placed (the capture counts it), so it cannot be taken for one."""
    if not any(slot[:16]):
        return True
    if not slot[3] & 0x80:
        return False
    header = 16 if slot[3] & 0x40 else 32  # legacy bit: a 16-byte header
    payload = slot[header:]
    return payload == _FILL_WORD * (len(payload) // 4)


def _leading_fill(piece: dict[str, Any], slot_len: int) -> int:
    """Slots at the start of ``piece`` that the recorder filled."""
    path, n = Path(piece["path"]), int(piece["packets"])
    lead = 0
    with open(path, "rb") as f:
        f.seek(int(piece["offset"]))
        while lead < n:
            data = f.read(min(_READ_SLOTS, n - lead) * slot_len)
            for at in range(0, len(data) - slot_len + 1, slot_len):
                if not _is_fill(data[at : at + slot_len]):
                    return lead
                lead += 1
            if len(data) < slot_len:
                break
    return lead


def _cut_front(piece: dict[str, Any], slots: int, slot_len: int) -> None:
    """``piece``'s file without its first ``slots`` slots (removed if emptied)."""
    path, offset = Path(piece["path"]), int(piece["offset"])
    piece["first_index"] = int(piece["first_index"]) + slots
    piece["packets"] -= slots
    piece["bytes"] -= slots * slot_len
    if "index_range" in piece:
        first, end = piece["index_range"]
        piece["index_range"] = [first + slots, end]
        if "time_range_s" in piece and end > first:
            t0, t1 = piece["time_range_s"]
            piece["time_range_s"] = [t0 + (t1 - t0) * slots / (end - first), t1]
    if piece["packets"] == 0:
        path.unlink()
        return
    partial = path.with_name(path.name + ".partial")
    with open(path, "rb") as src, open(partial, "wb") as dst:
        dst.write(src.read(offset))  # what precedes the data (none in this layout)
        src.seek(offset + slots * slot_len)
        while block := src.read(16 << 20):
            dst.write(block)
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(partial, path)


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
        replace_file(path, body, ".partial")
    else:
        path.unlink()
    _shorten(piece, slots, slot_len)
    return slots


def _read_at(path: Path, offset: int, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(n)
