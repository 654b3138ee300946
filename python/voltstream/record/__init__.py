"""Recording a capture to files on many disks: ``voltstream record`` (issue 12).

The bytes never pass through Python: the capture's chunks go from its pool to the
disks through the core's recorder (one writer thread per directory, the least
loaded first; layouts in ``layouts.py``, docs/formats.md "Recordings"). Here: the
run (``run.py``: start, watch, stop, one report), the scan's manifest
(``manifest.py``: rewritten whole and renamed into place as files complete) and
the repair after a crash (``repair.py``).
"""

from voltstream.record.layouts import LAYOUTS, RecordLayout, disk_problems
from voltstream.record.manifest import Manifest, read_manifest
from voltstream.record.repair import repair
from voltstream.record.run import (
    ForwardedChunks,
    Recording,
    RecordSettings,
    record,
    summary_lines,
    write_report,
)

__all__ = [
    "LAYOUTS",
    "ForwardedChunks",
    "Recording",
    "Manifest",
    "RecordLayout",
    "RecordSettings",
    "disk_problems",
    "read_manifest",
    "record",
    "repair",
    "summary_lines",
    "write_report",
]
