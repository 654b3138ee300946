"""``voltstream record``'s run: start the capture and the core's recorder, watch
both (counters, finished files into the manifest) until the duration, an idle
timeout or Ctrl-C, stop both, and return one report: the capture's counters (every
packet) and the recorder's (every chunk: written, unwritten because no disk had
room, lost with a failed disk).

What a recording is asked for is one ``RecordSettings``, made once by the command
line (the record verb; a pipeline file's [record] through run_file.py) with every
default written here; the capture's own settings are a ``CaptureSettings``. The
capture's configuration module is imported only when a recording starts: the
command line reads this module's defaults to build its parser.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from voltstream.errors import ConfigError, RecordError
from voltstream.record.ends import cut_stream_ends, cut_stream_starts
from voltstream.record.layouts import LayoutName, RecordLayout, check, disk_problems
from voltstream.record.manifest import Manifest

if TYPE_CHECKING:  # pydantic's models: imported when a recording starts
    from voltstream.capture.config import CaptureFormat, CaptureSettings

#: How often the run looks at its counters (and at Ctrl-C).
POLL_S = 0.2
#: How often the manifest is rewritten while files complete.
MANIFEST_EVERY_S = 2.0
#: Default size of DADA and VDIF files (cut at whole chunks).
FILE_SIZE = 1 << 30


@dataclass(frozen=True)
class RecordSettings:
    """What a recording is asked for: scan ``scan`` on ``dirs`` (one writer thread
    each) in ``layout``, DADA and VDIF files of ``file_size`` bytes (cut at whole
    chunks), ``source`` in DADA headers, ``queue_chunks`` per writer before a chunk
    goes to another disk. Validated when made; ``dirs`` kept as a tuple."""

    dirs: tuple[str, ...]
    scan: str
    layout: LayoutName = "vbs"
    file_size: int = FILE_SIZE
    source: str = "J0000+0000"
    queue_chunks: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "dirs", tuple(str(d) for d in self.dirs))
        if not self.dirs:
            raise ConfigError("give --dirs: one or more directories, one per disk")
        check(self.layout)
        if not self.file_size > 0:
            raise ConfigError(f"--file-size must be positive, got {self.file_size}")
        if not self.queue_chunks >= 1:
            raise ConfigError(f"--queue-chunks must be at least 1, got {self.queue_chunks}")


def record(
    stream: CaptureFormat,
    capture: CaptureSettings,
    settings: RecordSettings,
    duration_s: float | None,
    *,
    idle_timeout_s: float | None = None,
    on_start: Callable[[str], None] | None = None,
    stop_event: threading.Event | None = None,
    live_report: Callable[[Callable[[], dict]], None] | None = None,
) -> dict[str, Any]:
    """Records `stream` as `capture` captures it, as `settings` say (scan, disks,
    layout), for `duration_s` seconds (None: until Ctrl-C), or until
    `idle_timeout_s` without a packet once data has come, or ``stop_event`` is set
    (SIGINT/SIGTERM; as Ctrl-C: ``interrupted`` in the report). ``on_start(address)``
    once it listens. ``live_report`` (the metrics board's ``watch``) is given a
    callable that returns the counters so far, and one that returns the report at
    the end."""
    check_duration(duration_s)
    rec = Recording(stream, capture, settings)
    if on_start is not None:
        on_start(rec.address)
    if live_report is not None:
        cap, pool = rec.cap, len(rec.cap.chunk_buffers())
        live_report(lambda: {"capture": cap.stats(), "record": rec.rec.report(),
                             "free_chunks": cap.free_chunks(), "pool_chunks": pool})  # fmt: skip
    try:
        _wait(rec.cap, rec.t0, duration_s, idle_timeout_s, (MANIFEST_EVERY_S, rec.update),
              stop_event)  # fmt: skip
        rec.interrupted = stop_event is not None and stop_event.is_set()
    except KeyboardInterrupt:
        rec.interrupted = True
    finally:
        report = rec.finish()
    if live_report is not None:
        live_report(lambda: report)
    return report


def check_duration(duration_s: float | None) -> None:
    if duration_s is not None and not duration_s > 0:
        raise ConfigError(f"--duration must be positive, got {duration_s}")


class Recording:
    """A started capture and the core's recorder on it, and the scan's manifest:
    ``update()`` while it runs (finished files into the manifest), ``finish()`` to
    stop both and get the report. ``forward_chunks`` > 0 passes every written chunk
    on to one more consumer (``forwarded()``), e.g. a fold."""

    def __init__(
        self,
        stream: CaptureFormat,
        capture: CaptureSettings,
        settings: RecordSettings,
        *,
        forward_chunks: int = 0,
    ) -> None:
        from voltstream import _core
        from voltstream.capture.config import start_capture

        dirs, scan, layout = settings.dirs, settings.scan, settings.layout
        if problems := disk_problems(dirs, scan, layout):
            raise ConfigError("--dirs: " + "; ".join(problems))
        self.scan, self.layout, self.dirs = scan, layout, list(dirs)
        capture = capture.replace(whole_packets=check(layout) != "dada")
        from voltstream.record.flush import flush_settings  # pydantic: when recording

        capture = flush_settings(capture, stream)  # what a crash can lose
        cap = capture.open(stream)
        part = cap.packets_per_chunk * cap.slot_len
        plan = RecordLayout.choose(
            layout, stream, chunk_part=part, file_size=settings.file_size, source=settings.source
        )
        start_capture(cap)
        try:
            self.rec = _core.Recorder(
                cap, self.dirs, scan, queue_chunks=settings.queue_chunks,
                forward_chunks=forward_chunks, **plan.recorder_kwargs(),
            )  # fmt: skip
        except BaseException:
            cap.stop()
            raise
        self.cap = cap
        self.address: str = cap.address or capture.network.bind
        self.manifest = Manifest(self.dirs, scan, _describe(stream, cap, plan))
        self.manifest.write({})
        self.t0 = time.monotonic()
        self.interrupted = False
        self._seen = 0
        self._report: dict[str, Any] | None = None

    def update(self, final: bool = False) -> dict[str, Any]:
        """Finished files into the manifest, rewritten with the counters now; at the
        end (``final``), each stream's last piece cut where the stream ended."""
        pieces = self.rec.pieces(self._seen)
        self._seen += len(pieces)
        self.manifest.add(pieces)
        counters = {"record": self.rec.report(), "capture": self.cap.stats()}
        if final:
            files, slot = self.manifest.doc["files"], self.cap.slot_len
            counters["record"]["end_slots_cut"] = cut_stream_ends(files, self.layout, slot)
            counters["record"]["start_slots_cut"] = cut_stream_starts(files, self.layout, slot)
        self.manifest.write(counters, complete=final)
        return counters

    def forwarded(self) -> ForwardedChunks:
        """The chunks written, in order, as a chunk source (``pipeline/interfaces.py``
        ``ChunkSource``) for one more consumer."""
        return ForwardedChunks(self)

    def stop(self) -> None:
        """Stops the capture and waits until every chunk is written or counted (the
        forwarded ones stay available). Idempotent."""
        self.cap.stop()
        self.rec.finish()

    def finish(self) -> dict[str, Any]:
        """Stops (if not yet), writes the complete manifest; the run's report."""
        if self._report is None:
            self.stop()
            counters = self.update(final=True)
            self._report = {
                "scan": self.scan,
                "layout": self.layout,
                "dirs": self.dirs,
                "duration_s": time.monotonic() - self.t0,
                "interrupted": self.interrupted,
                "files": len(self.manifest.doc["files"]),
                "manifest_unwritable": self.manifest.unwritable,
                **counters,
            }
        return self._report


class ForwardedChunks:
    """A recording's written chunks as a chunk source, so that the capture loop
    (``pipeline/capture.py`` ``CaptureRun``) drives a consumer of them exactly as it
    drives one of a capture: ``start`` does nothing (the capture runs), ``stop``
    stops the recording, ``next_chunk`` takes the next written chunk and keeps the
    manifest current meanwhile. The rest is the capture's."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        cap = recording.cap
        self.nstreams, self.packets_per_chunk = cap.nstreams, cap.packets_per_chunk
        self.threads, self.slot_len = cap.threads, cap.slot_len
        self._ticked = time.monotonic()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.recording.stop()

    def next_chunk(self, timeout_s: float) -> Any:
        now = time.monotonic()
        if now - self._ticked >= MANIFEST_EVERY_S:
            self._ticked = now
            self.recording.update()
        return self.recording.rec.next_chunk(timeout_s)

    def stats(self) -> dict[str, Any]:
        return self.recording.cap.stats()

    def chunk_buffers(self) -> list[tuple[int, int]]:
        return self.recording.cap.chunk_buffers()

    def free_chunks(self) -> int:
        """The capture's free chunks: the pool the recording and its consumer share
        (the GPU status line and the live report read it, as of a capture)."""
        return int(self.recording.cap.free_chunks())


def _describe(stream: CaptureFormat, cap: Any, plan: RecordLayout) -> dict[str, Any]:
    """What the manifest says of the recording before any file: enough to read it
    back (layout, packet length, stream format) without the command line."""
    per_second = getattr(stream, "packets_per_second", None)
    if plan.frames_per_second:
        per_second = plan.frames_per_second
    return {
        "layout": plan.name,
        "format": stream.name,
        "capture_kwargs": stream.capture_kwargs(),
        "packet_len": cap.slot_len,
        "whole_packets": cap.whole_packets,
        "packets_per_chunk": cap.packets_per_chunk,
        # A chunk waited at most this long before it was written: what a crash lost.
        "flush_age_s": cap.settings["chunks"]["flush_age_s"],
        "thread_streams": cap.thread_streams,
        "file_chunks": plan.file_chunks,
        "packets_per_second": per_second,
        # VDIF: frames per second of one thread, what `replay --realtime` paces by.
        "frames_per_second": plan.frames_per_second,
    }


def _wait(
    cap: Any,
    t0: float,
    duration_s: float | None,
    idle_timeout_s: float | None,
    every: tuple[float, Callable[[], object]],
    stop: threading.Event | None = None,
) -> None:
    """Until the duration ends, the stream has been silent for the idle timeout, or
    ``stop`` is set; calls ``every[1]()`` every ``every[0]`` seconds meanwhile."""
    stop = stop if stop is not None else threading.Event()
    last, quiet_since, ticked = 0, time.monotonic(), time.monotonic()
    while duration_s is None or time.monotonic() - t0 < duration_s:
        if stop.wait(POLL_S):
            return
        packets = cap.stats()["packets"]
        now = time.monotonic()
        if now - ticked >= every[0]:
            every[1]()
            ticked = now
        if packets != last:
            last, quiet_since = packets, now
        elif packets and idle_timeout_s is not None and now - quiet_since >= idle_timeout_s:
            return


def summary_lines(report: dict[str, Any]) -> list[str]:
    """The report in a few lines: what reached the disks, and what did not."""
    r, totals = report["record"], report["capture"]["totals"]
    gib = r["bytes_written"] / 2**30
    lines = [
        f"record: scan {report['scan']} ({report['layout']}): {r['chunks_written']} chunks "
        f"({gib:.3f} GiB, {report['files']} files) written to {len(r['writers'])} disk(s) in "
        f"{report['duration_s']:.1f} s; {r['chunks_unwritten']} unwritten (no disk had room), "
        f"{r['chunks_lost']} lost with a failed disk; {r['filled_packets']} packet slots "
        f"filled (never arrived: VDIF fill frames, else zeros), {r.get('end_slots_cut', 0)} of "
        "them after the stream's end and cut off",
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
    for d, why in report["manifest_unwritable"].items():
        lines.append(f"  manifest not written to {d}: {why}")
    if report["interrupted"]:
        lines.append("  (interrupted: the capture was stopped and every chunk accounted for)")
    return lines


def write_report(report: dict[str, Any], path: str | Path) -> None:
    try:
        Path(path).write_text(json.dumps(report, indent=2) + "\n")
    except OSError as e:
        raise RecordError(f"cannot write the report {path}: {e.strerror}") from None
