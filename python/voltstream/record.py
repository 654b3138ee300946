"""Recording a capture to files on many disks: ``voltstream record`` (issue 12).

The bytes never pass through Python: the capture's chunks go from its pool to the
disks through the core's recorder (one writer thread per directory, the least
loaded first, chunk files ``<dir>/<scan>/<scan>.<8-digit number>``, each written
whole and renamed when complete). This module starts the capture and the recorder,
watches them once a second, and stops both after the duration, an idle timeout or
Ctrl-C, returning one report: the capture's counters (every packet) and the
recorder's (every chunk: written, unwritten because no disk had room, lost with a
failed disk).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from voltstream.capture_config import CaptureFormat, CaptureSettings
from voltstream.errors import ConfigError, RecordError

#: How often the run looks at its counters (and at Ctrl-C).
POLL_S = 0.2


def record(
    stream: CaptureFormat,
    settings: CaptureSettings,
    dirs: Sequence[str],
    scan: str,
    duration_s: float,
    *,
    idle_timeout_s: float | None = None,
    queue_chunks: int = 2,
    on_start: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Records `stream` as `settings` capture it into `dirs` (one writer each) as
    scan `scan`, for `duration_s` seconds (or until `idle_timeout_s` without a
    packet once data has come, or Ctrl-C). ``on_start(address)`` once it listens."""
    from voltstream import _core

    if not duration_s > 0:
        raise ConfigError(f"--duration must be positive, got {duration_s}")
    if not dirs:
        raise ConfigError("give --dirs: one or more directories, one per disk")
    cap = settings.open(stream)
    cap.start()
    try:
        rec = _core.Recorder(cap, list(dirs), scan, queue_chunks=queue_chunks)
    except BaseException:
        cap.stop()
        raise
    if on_start is not None:
        on_start(cap.address or settings.network.bind)
    t0 = time.monotonic()
    interrupted = False
    try:
        _wait(cap, t0, duration_s, idle_timeout_s)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        cap.stop()
        written = rec.finish()
    return {
        "scan": scan,
        "dirs": list(dirs),
        "duration_s": time.monotonic() - t0,
        "interrupted": interrupted,
        "record": written,
        "capture": cap.stats(),
    }


def _wait(cap: Any, t0: float, duration_s: float, idle_timeout_s: float | None) -> None:
    """Until the duration ends, or the stream has been silent for the idle timeout."""
    last, quiet_since = 0, time.monotonic()
    while time.monotonic() - t0 < duration_s:
        time.sleep(POLL_S)
        packets = cap.stats()["packets"]
        now = time.monotonic()
        if packets != last:
            last, quiet_since = packets, now
        elif packets and idle_timeout_s is not None and now - quiet_since >= idle_timeout_s:
            return


def summary_lines(report: dict[str, Any]) -> list[str]:
    """The report in a few lines: what reached the disks, and what did not."""
    r, totals = report["record"], report["capture"]["totals"]
    gib = r["bytes_written"] / 2**30
    lines = [
        f"record: scan {report['scan']}: {r['chunks_written']} chunks ({gib:.3f} GiB) written "
        f"to {len(r['writers'])} disk(s) in {report['duration_s']:.1f} s; "
        f"{r['chunks_unwritten']} unwritten (no disk had room), {r['chunks_lost']} lost with "
        f"a failed disk; {r['zero_filled_packets']} packet slots zero-filled (never arrived)",
        f"  capture: received={totals['received']} missing={totals['missing']} "
        f"late={totals['late']} malformed={totals['malformed']} foreign={totals['foreign']} "
        f"dropped={totals['dropped']} kernel_drops={report['capture']['kernel_drops']}",
    ]
    for w in r["writers"]:
        state = f"FAILED: {w['failed']}" if w["failed"] else "ok"
        lines.append(
            f"  {w['dir']}: {w['chunks']} chunks, {w['bytes'] / 2**30:.3f} GiB "
            f"({w['direct_chunks']} with O_DIRECT), {w['lost_chunks']} lost, {state}"
        )
    if report["interrupted"]:
        lines.append("  (interrupted: the capture was stopped and every chunk accounted for)")
    return lines


def write_report(report: dict[str, Any], path: str | Path) -> None:
    try:
        Path(path).write_text(json.dumps(report, indent=2) + "\n")
    except OSError as e:
        raise RecordError(f"cannot write the report {path}: {e.strerror}") from None
