"""Finding a recorded scan on its disks: which layout it is in and which files hold it.

``voltstream record --dirs D0,D1,... --scan SCAN --layout L`` writes one of four
layouts (docs/replay.md has the byte-level definitions):

- ``vbs`` (jive5ab FlexBuff): ``<dir>/<SCAN>/<SCAN>.<8-digit chunk number>``, the
  numbers counting from 0 across all dirs; ``*.partial`` files are incomplete
  writes and are ignored.
- ``mark6`` (scatter-gather, d-plane 2): one plain file ``<dir>/<SCAN>`` per dir.
- ``vdif``: ``<dir>/<SCAN>/<SCAN>_s<SS>_<8-digit file number>.vdif``, one stream
  (VDIF thread) per SS.
- ``dada``: ``<dir>/<SCAN>/<SCAN>_s<SS>_<16-digit OBS_OFFSET>.dada``.

Beside them may lie ``<dir>/<SCAN>.manifest.json``. The layout is found from what
is on disk (the manifest, when present, must agree); a scan on no disk, two layouts
at once, or files no layout names are :class:`~voltstream.errors.ConfigError`\\s
that say which.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from voltstream.config_files import read_json_object
from voltstream.errors import ConfigError, FormatError

LAYOUTS = ("vbs", "mark6", "vdif", "dada")
PARTIAL_SUFFIX = ".partial"
MANIFEST_SUFFIX = ".manifest.json"


@dataclass(frozen=True)
class StreamFile:
    """One file of a scan: where it is, and its place (chunk or file number, or
    OBS_OFFSET) and stream (SS; 0 where the layout has none)."""

    path: Path
    number: int
    stream: int = 0


@dataclass
class Recording:
    """A scan as found on disk: its layout, its files (unordered) and its manifest."""

    scan: str
    layout: str
    files: list[StreamFile]
    manifest: dict[str, Any] = field(default_factory=dict)
    ignored_partial: int = 0  # vbs *.partial files: incomplete writes, not replayed


def _patterns(scan: str) -> dict[str, re.Pattern[str]]:
    s = re.escape(scan)
    return {
        "vbs": re.compile(rf"{s}\.(\d{{8}})"),
        "vdif": re.compile(rf"{s}_s(\d{{2}})_(\d{{8}})\.vdif"),
        "dada": re.compile(rf"{s}_s(\d{{2}})_(\d{{16}})\.dada"),
    }


def find_recording(dirs: Sequence[str | Path], scan: str) -> Recording:
    """The files of scan ``scan`` on every dir of ``dirs``; see the module doc."""
    if not dirs:
        raise ConfigError("give --dirs: the directories (disks) the scan was recorded to")
    if not scan or "/" in scan or scan in (".", ".."):
        raise ConfigError(f"scan name {scan!r} is not a plain name (no '/')")
    patterns = _patterns(scan)
    found: dict[str, list[StreamFile]] = {}
    unknown: list[Path] = []
    partial = 0
    manifest: dict[str, Any] = {}
    for d in map(Path, dirs):
        if not d.is_dir():
            raise ConfigError(f"--dirs: {d} is not a directory")
        manifest = manifest or _read_manifest(d / f"{scan}{MANIFEST_SUFFIX}")
        top = d / scan
        if top.is_file():
            found.setdefault("mark6", []).append(StreamFile(top, 0))
            continue
        if not top.is_dir():
            continue  # this disk holds none of the scan: fine, others may
        for path in sorted(top.iterdir()):
            if path.name.endswith(PARTIAL_SUFFIX):
                partial += 1
                continue
            for layout, pattern in patterns.items():
                m = pattern.fullmatch(path.name)
                if m and path.is_file():
                    num, stream = (int(m[1]), 0) if layout == "vbs" else (int(m[2]), int(m[1]))
                    found.setdefault(layout, []).append(StreamFile(path, num, stream))
                    break
            else:
                unknown.append(path)
    if unknown:
        raise ConfigError(
            f"scan {scan}: {len(unknown)} file(s) no layout names, e.g. {unknown[0]}; "
            f"expected {scan}.NNNNNNNN (vbs), {scan}_sSS_NNNNNNNN.vdif or "
            f"{scan}_sSS_<16 digits>.dada: move the stranger out"
        )
    if not found:
        raise ConfigError(
            f"scan {scan!r} is on none of --dirs {', '.join(map(str, dirs))} "
            f"(looked for {scan}/ folders and {scan} Mark6 files)"
        )
    if len(found) > 1:
        raise ConfigError(
            f"scan {scan} is in more than one layout at once ({', '.join(sorted(found))}); "
            "replay one: move the other's files aside"
        )
    ((layout, files),) = found.items()
    said = manifest.get("layout")
    if said is not None and said != layout:
        raise ConfigError(
            f"scan {scan}: its manifest says layout {said!r} but the disks hold {layout} files"
        )
    _check_unique(scan, layout, files)
    return Recording(scan, layout, files, manifest, partial)


def _read_manifest(path: Path) -> dict[str, Any]:
    return read_json_object(path, "JSON manifest") or {}


def _check_unique(scan: str, layout: str, files: list[StreamFile]) -> None:
    """Two files with the same place (the same chunk on two disks) cannot both be right."""
    seen: dict[tuple[int, int], Path] = {}
    for f in files:
        key = (f.stream, f.number)
        if layout != "mark6" and key in seen:
            raise ConfigError(
                f"scan {scan}: {seen[key]} and {f.path} claim the same place "
                f"(stream {f.stream}, number {f.number}); keep one"
            )
        seen[key] = f.path


def manifest_int(rec: Recording, key: str) -> int | None:
    """An integer the manifest states (``packet_len``, ``frames_per_second``), or None."""
    value = rec.manifest.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise FormatError(f"scan {rec.scan}: manifest {key} is {value!r}, not a positive integer")
    return value


def manifest_frames_per_second(rec: Recording) -> int | None:
    """VDIF frames per second of one thread, as the manifest states it: its own key,
    else the capture's format (``capture_kwargs``; manifests written before the key
    was), else None."""
    fps = manifest_int(rec, "frames_per_second")
    if fps is not None:
        return fps
    kwargs = rec.manifest.get("capture_kwargs")
    if isinstance(kwargs, dict) and kwargs.get("frames_per_second") is not None:
        return manifest_int(Recording(rec.scan, rec.layout, [], kwargs), "frames_per_second")
    return None
