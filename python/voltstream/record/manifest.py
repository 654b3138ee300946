"""A scan's manifest: ``<dir>/<scan>.manifest.json`` on every disk of the scan.

It says what the scan is (layout, stream format, packet length, disks), which
files hold it in which order and time range, and every counter of the run. It is
written when the recording starts, rewritten whole as files complete (to a
temporary name, synced, then renamed over the old one, so a reader or a crash
sees the old manifest or the new, never half of one) and a last time at the end
with ``"complete": true``. A copy on every disk survives the loss of any one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from voltstream.config_files import read_json_object
from voltstream.errors import FormatError

VERSION = 1


def manifest_path(directory: str | Path, scan: str) -> Path:
    return Path(directory) / f"{scan}.manifest.json"


class Manifest:
    """The manifest of one scan being recorded (or repaired)."""

    def __init__(self, dirs: Sequence[str | Path], scan: str, meta: dict[str, Any]) -> None:
        self.dirs = [Path(d) for d in dirs]
        self.scan = scan
        self.doc: dict[str, Any] = {
            "manifest_version": VERSION,
            "scan": scan,
            "dirs": [str(d) for d in self.dirs],
            "started_utc": _utc(),
            **meta,
            "complete": False,
            "files": [],
            "counters": {},
        }
        #: Disks the manifest could not be written to (a full or failed disk).
        self.unwritable: dict[str, str] = {}

    def add(self, pieces: Iterable[dict[str, Any]]) -> None:
        """Files (or Mark6 blocks) the recorder has finished, as its log gives them."""
        per_second = self.doc.get("packets_per_second")
        for p in pieces:
            entry = dict(p)
            first, n = int(p["first_index"]), int(p["packets"])
            entry["index_range"] = [first, first + n]
            if per_second:
                entry["time_range_s"] = [first / per_second, (first + n) / per_second]
            entry["dir"] = _disk_of(Path(p["path"]), self.dirs)
            self.doc["files"].append(entry)

    def write(self, counters: dict[str, Any], *, complete: bool = False) -> None:
        """Rewrites every disk's copy, whole, with these counters."""
        files = sorted(self.doc["files"], key=lambda f: (f["streams"], f["number"]))
        self.doc.update(files=files, counters=counters, complete=complete, updated_utc=_utc())
        text = json.dumps(self.doc, indent=1, default=str) + "\n"
        for d in self.dirs:
            try:
                replace_file(manifest_path(d, self.scan), text)
            except OSError as e:
                self.unwritable[str(d)] = e.strerror or str(e)


def read_manifest(dirs: Sequence[str | Path], scan: str) -> dict[str, Any] | None:
    """The newest readable copy of the scan's manifest among `dirs`, or None."""
    best: dict[str, Any] | None = None
    damaged: FormatError | None = None
    for d in dirs:
        try:
            doc = read_json_object(manifest_path(d, scan), "scan manifest")
        except FormatError as e:
            damaged = e  # one damaged copy is not fatal while another is readable
            continue
        if doc is not None and (best is None or doc.get("revision", 0) > best.get("revision", 0)):
            best = doc
    if best is None and damaged is not None:
        raise damaged
    return best


def replace_file(path: Path, data: str | bytes, suffix: str = ".tmp") -> None:
    """``path`` replaced by ``data`` at once: written beside it (``suffix``), synced,
    renamed over it, so a crash leaves the old file or the new one, never half."""
    tmp = path.with_name(path.name + suffix)
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _disk_of(path: Path, dirs: Sequence[Path]) -> str:
    for d in dirs:
        if path.is_relative_to(d):
            return str(d)
    return str(path.parent)


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
