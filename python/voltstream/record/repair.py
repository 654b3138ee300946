"""``voltstream record --repair SCAN``: make a scan's files, headers and manifest
agree with what is on disk, after a crash, a power cut or a full disk.

The recorder writes whole chunks, so a file can only end in the middle of the
chunk being written when it stopped. Repair cuts every file back to its last
whole packet (a vbs chunk file, written under a temporary name, is whole or was
never renamed: the ``.partial`` leftovers are removed), a Mark6 file back to its
last whole block, rewrites a DADA header whose FILE_SIZE says more than the file
holds, and rewrites the manifest from the files found. It never deletes a whole
packet that is on disk.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from voltstream.errors import ConfigError, FormatError
from voltstream.record.manifest import Manifest, read_manifest

MARK6_SYNC = 0xFEED6666
_MARK6_HEADER = struct.Struct("<Iiiii")  # sync, version, block size, packet format, size
_MARK6_BLOCK = struct.Struct("<ii")  # block number, size including this header
_VBS_NAME = re.compile(r"\.(\d{8})$")


def repair(dirs: Sequence[str | Path], scan: str) -> dict[str, Any]:
    """Repairs scan `scan` on `dirs`; returns what it found and changed."""
    if not dirs:
        raise ConfigError("give --dirs: every directory the scan was recorded to")
    meta = read_manifest(dirs, scan) or {}
    layout = meta.get("layout") or _detect(dirs, scan)
    slot = int(meta.get("packet_len") or 0)
    actions: dict[str, list[str]] = {"truncated": [], "removed": [], "headers": []}
    pieces: list[dict[str, Any]] = []
    for d in map(Path, dirs):
        if layout == "mark6":
            if (d / scan).is_file():
                pieces += _mark6(d / scan, actions)
            continue
        folder = d / scan
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.suffix == ".partial":
                path.unlink()
                actions["removed"].append(str(path))
            elif layout == "dada" and path.suffix == ".dada":
                pieces.append(_dada(path, slot, actions))
            elif layout == "vdif" and path.suffix == ".vdif":
                pieces.append(_whole_packets(path, _vdif_frame_len(path), 0, actions))
            elif layout == "vbs" and _VBS_NAME.search(path.name):
                pieces.append(_whole_packets(path, slot, 0, actions))
    known = {(p["path"], p["number"]): p for p in meta.get("files", [])}
    for p in pieces:  # what the manifest knew of a file (its streams, first index)
        old = known.get((p["path"], p["number"]), {})
        p.update({k: old[k] for k in ("streams", "first_index") if k in old})
        if "first_index" in old and slot:
            p["packets"] = p["bytes"] // slot
    keep = {k: v for k, v in meta.items() if k not in ("files", "counters", "complete")}
    keep.update(layout=layout, repaired=True)
    manifest = Manifest(dirs, scan, keep)
    manifest.add(pieces)
    counters = dict(meta.get("counters", {}))
    counters["repair"] = {k: len(v) for k, v in actions.items()}
    manifest.write(counters, complete=bool(meta.get("complete")))
    return {"scan": scan, "layout": layout, "files": len(pieces), **actions}


def _detect(dirs: Sequence[str | Path], scan: str) -> str:
    """The layout of a scan without a manifest, from its file names."""
    for d in map(Path, dirs):
        if (d / scan).is_file():
            return "mark6"
        folder = d / scan
        if folder.is_dir():
            for path in folder.iterdir():
                if path.suffix in (".dada", ".vdif"):
                    return path.suffix[1:]
                if _VBS_NAME.search(path.name):
                    return "vbs"
    raise ConfigError(f"no scan {scan!r} in {', '.join(map(str, dirs))}")


def _piece(path: Path, number: int, offset: int, nbytes: int, slot: int) -> dict[str, Any]:
    return {
        "path": str(path),
        "streams": [],
        "number": number,
        "first_index": 0,
        "packets": nbytes // slot if slot else 0,
        "offset": offset,
        "bytes": nbytes,
    }


def _cut(path: Path, size: int, actions: dict[str, list[str]]) -> None:
    if path.stat().st_size != size:
        os.truncate(path, size)
        actions["truncated"].append(str(path))


def _whole_packets(path: Path, slot: int, offset: int, actions: dict[str, list[str]]) -> dict:
    size = path.stat().st_size - offset
    whole = size - size % slot if slot > 0 else size
    _cut(path, offset + whole, actions)
    match = _VBS_NAME.search(path.name) or re.search(r"_(\d+)\.\w+$", path.name)
    return _piece(path, int(match.group(1)) if match else 0, offset, whole, slot)


def _vdif_frame_len(path: Path) -> int:
    with open(path, "rb") as f:
        head = f.read(12)
    if len(head) < 12:
        return 0
    return (struct.unpack_from("<I", head, 8)[0] & 0xFFFFFF) * 8


def _dada(path: Path, slot: int, actions: dict[str, list[str]]) -> dict[str, Any]:
    with open(path, "r+b") as f:
        head = f.read(4096)
        keys = dict(
            ln.split(None, 1) for ln in head.rstrip(b"\0").decode("ascii", "replace").splitlines()
            if len(ln.split(None, 1)) == 2
        )  # fmt: skip
        try:
            hdr = int(keys["HDR_SIZE"])
            said = int(keys["FILE_SIZE"])
        except (KeyError, ValueError):
            raise FormatError(f"{path}: no DADA header (HDR_SIZE, FILE_SIZE)") from None
        if not slot:
            nbit, ndim = int(keys.get("NBIT", 8)), int(keys.get("NDIM", 1))
            slot = max(1, int(keys.get("NCHAN", 1)) * int(keys.get("NPOL", 1)) * ndim * nbit // 8)
        piece = _whole_packets(path, slot, hdr, actions)
        if said != piece["bytes"]:
            f.seek(0)
            text = re.sub(rb"(?m)^FILE_SIZE\s+\d+", b"FILE_SIZE %d" % piece["bytes"], head)
            f.write(text.rstrip(b"\0")[:hdr].ljust(len(head), b"\0"))
            actions["headers"].append(str(path))
    piece["number"] = int(keys.get("FILE_NUMBER", 0))
    return piece


def _mark6(path: Path, actions: dict[str, list[str]]) -> list[dict[str, Any]]:
    pieces = []
    with open(path, "rb") as f:
        head = f.read(_MARK6_HEADER.size)
        if len(head) < _MARK6_HEADER.size:
            _cut(path, 0, actions)
            return []
        sync, _version, block_size, _fmt, packet = _MARK6_HEADER.unpack(head)
        if sync != MARK6_SYNC:
            raise FormatError(f"{path}: not a Mark6 scatter-gather file (sync {sync:#x})")
        end = at = _MARK6_HEADER.size
        size = path.stat().st_size
        while at + _MARK6_BLOCK.size <= size:
            f.seek(at)
            number, block = _MARK6_BLOCK.unpack(f.read(_MARK6_BLOCK.size))
            if block <= _MARK6_BLOCK.size or block > block_size or at + block > size:
                break  # the block being written when the recorder stopped
            data = block - _MARK6_BLOCK.size
            pieces.append(_piece(path, number, at + _MARK6_BLOCK.size, data, packet))
            at = end = at + block
    _cut(path, end, actions)
    return pieces
