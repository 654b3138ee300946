"""The recording layouts, and what each needs of the stream and the capture.

vbs, mark6 and vdif write the packets as received (the capture keeps whole packets
in its chunks); dada writes the samples only, behind a header that says what they
are. docs/formats.md, "Recordings", defines every file.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from voltstream.errors import ConfigError

if TYPE_CHECKING:  # a Protocol, for the annotations: pydantic's models load on use
    from voltstream.capture.config import CaptureFormat

#: The layouts, with what the CLI says of each.
#: A layout's name (the keys of LAYOUTS).
LayoutName = Literal["vbs", "mark6", "vdif", "dada"]

LAYOUTS: dict[str, str] = {
    "vbs": "jive5ab FlexBuff: each chunk a file <dir>/<scan>/<scan>.<8 digits>, as received",
    "mark6": "Mark6 scatter-gather v2: one file <dir>/<scan> per disk, a block per chunk",
    "vdif": "per VDIF thread, files of consecutive frames; missing frames as fill frames",
    "dada": "per stream, PSRDADA files of consecutive samples (YNAO, counter, layout streams)",
}

#: Keys the core writes into every DADA file's header itself.
_CORE_DADA_KEYS = ("HDR_SIZE", "FILE_SIZE", "FILE_NUMBER", "OBS_OFFSET")
#: Mark6's packet format word: 0 VDIF, 1 Mark5B, 2 anything else.
_MARK6_PACKET_FORMAT = {"vdif": 0}


@dataclass(frozen=True)
class RecordLayout:
    """One layout made concrete for a stream: the recorder's keywords."""

    name: str
    #: Chunks of one stream per DADA or VDIF file.
    file_chunks: int
    dada_header: str | None = None
    #: One header's keys per stream: a band in several streams, each its subband's.
    dada_headers: list[str] | None = None
    frames_per_second: int | None = None
    packet_format: int = 2

    @property
    def whole_packets(self) -> bool:
        """Whether the capture must keep headers in its chunks (all but dada)."""
        return self.name != "dada"

    def recorder_kwargs(self) -> dict[str, Any]:
        return {
            "layout": self.name,
            "file_chunks": self.file_chunks,
            "dada_header": self.dada_header,
            "dada_headers": self.dada_headers,
            "frames_per_second": self.frames_per_second,
            "packet_format": self.packet_format,
        }

    @classmethod
    def choose(
        cls, name: str, stream: CaptureFormat, *, chunk_part: int, file_size: int, source: str
    ) -> RecordLayout:
        """The layout `name` for `stream`, files of about `file_size` bytes where the
        layout cuts files: whole chunks of one stream (`chunk_part` bytes each)."""
        check(name)
        file_chunks = max(1, file_size // max(chunk_part, 1))
        # A VDIF stream's frame that never came is a fill frame in every layout
        # of whole packets (vdif, vbs, mark6).
        fps = None
        if stream.name == "vdif":
            fps = int(stream.capture_kwargs()["frames_per_second"])
        if name == "vdif":
            if fps is None:
                raise ConfigError(
                    f"--layout vdif records VDIF streams; a {stream.name} stream records as "
                    "vbs, mark6 or dada"
                )
            return cls(name, file_chunks, frames_per_second=fps)
        if name == "dada":
            if getattr(stream, "subbands", 1) > 1:  # a band in several streams
                heads = [dada_keys(sb, source) for sb in subband_streams(stream)]
                return cls(name, file_chunks, dada_headers=heads)
            return cls(name, file_chunks, dada_header=dada_keys(stream, source))
        return cls(
            name,
            file_chunks,
            frames_per_second=fps,
            packet_format=_MARK6_PACKET_FORMAT.get(stream.name, 2),
        )


def check(name: str) -> str:
    if name not in LAYOUTS:
        raise ConfigError(f"--layout {name!r}: use one of {', '.join(LAYOUTS)}")
    return name


def disk_problems(dirs: Sequence[str], scan: str, layout: str) -> list[str]:
    """What the recorder would refuse of its disks, before anything starts (``run
    --check`` asks too). A disk is a directory that exists: a missing one is a disk
    not mounted, not something to create; the scan's folder (or Mark6 file) on it is
    the recorder's to create, so it must not be there yet."""
    problems = []
    if not scan or "/" in scan or scan in (".", ".."):
        problems.append(f"scan name {scan!r} is not a plain name (no '/')")
        return problems
    for d in dirs:
        disk = Path(d)
        if not disk.is_dir():
            what = "is not a directory" if disk.exists() else "does not exist"
            problems.append(f"disk {d} {what}: mount the disk there or create it (mkdir -p {d})")
        elif not os.access(disk, os.W_OK | os.X_OK):
            problems.append(f"disk {d} is not writable by this user")
        elif (disk / scan).exists() or (disk / f"{scan}.manifest.json").exists():
            where = disk / scan if (disk / scan).exists() else disk / f"{scan}.manifest.json"
            problems.append(f"scan {scan} is already on disk {d} ({where}): pick a new scan name")
    return problems


def subband_streams(band: Any) -> list[Any]:
    """Each stream of a band in several streams as a format of its own (its subband's
    channels and centre frequency), in stream order."""
    import dataclasses

    from voltstream.subbands import subband_formats

    n = band.subbands
    one = dataclasses.replace(band, nchan=band.nchan // n, subbands=1)
    return subband_formats(one, n)


def dada_keys(stream: CaptureFormat, source: str) -> str:
    """The DADA header keys of `stream` but those the core writes per file: the
    observation for YNAO; for streams without one, what they are and when."""
    if stream.name == "vdif":
        raise ConfigError(
            "--layout dada: VDIF samples are offset-binary and may be packed below a "
            "byte, which DADA readers take as signed samples; record VDIF as --layout vdif "
            "(baseband and DiFX read it), or use `voltstream capture --output` to decode"
        )
    observation = getattr(stream, "observation", None)
    mjd, sec = _now_mjd()
    if observation is not None:
        from voltstream.io.dada import format_header

        text = format_header(observation(start_mjd=mjd, start_sec=sec, source=source))
        lines = text.rstrip(b"\0").decode("ascii").splitlines()
        return "\n".join(ln for ln in lines if ln.split(" ", 1)[0] not in _CORE_DADA_KEYS)
    utc = time.strftime("%Y-%m-%d-%H:%M:%S", time.gmtime(time.time()))
    return "\n".join(
        (
            "HEADER DADA",
            "HDR_VERSION 1.0",
            "INSTRUMENT voltstream",
            f"SOURCE {source}",
            f"UTC_START {utc}",
            f"VOLTSTREAM_FORMAT {stream.name}",
            "NOTE packet payloads of one stream, in packet order, missing ones zeroed",
        )
    )


def _now_mjd() -> tuple[int, float]:
    """Now, in whole seconds: the recording's UTC_START (its first packet is later)."""
    days, sec = divmod(time.time(), 86400.0)
    return 40587 + int(days), float(int(sec))
