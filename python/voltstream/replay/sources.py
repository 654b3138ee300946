"""What replay sends: each kind of recording as a Source of packet batches.

A :class:`Source` yields :class:`Batch`\\es: equal-length packets as one C-contiguous
(n, packet_len) uint8 array (what ``_core.Sender.send`` takes as it is), in send
order, and, when the replay keeps the recording's own timing, each packet's time in
seconds from the recording's first packet. Every packet a source does not send is
counted in ``source.counts`` (gaps, truncated records, fill frames...), never
dropped silently. :func:`read_ahead` reads the next batches on a thread of its own
while the current one is sent, through a bounded queue (memory stays bounded
whatever the recording's size).

Sources here: raw packet files and vbs chunks (:class:`PacketFiles`), Mark6
scatter-gather files (:class:`Mark6Files`), the vdif layout (:class:`VdifStreams`),
pcap files (:class:`PcapFiles`); DADA is rebuilt into packets by
:mod:`voltstream.replay.dada_source`.
"""

from __future__ import annotations

import queue
import struct
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voltstream.errors import ConfigError, FormatError
from voltstream.io import vdif
from voltstream.replay.pcap import COUNTERS as PCAP_COUNTERS
from voltstream.replay.pcap import PcapReader

#: About this many bytes per batch: big enough that a send call is long next to its
#: Python overhead, small enough that the read-ahead queue stays a few MB.
BATCH_BYTES = 4 << 20
#: Batches the reader may be ahead of the sender.
READ_AHEAD = 4
#: The payload word of a VDIF fill frame (a frame that never arrived).
FILL_WORD = 0x11223344
MARK6_SYNC = 0xFEED6666
MARK6_HEADER = struct.Struct("<Iiiii")  # sync, version, block_size, packet_format, packet_size
MARK6_BLOCK = struct.Struct("<ii")  # block number, wb_size (incl. these 8 bytes)


@dataclass
class Batch:
    """Packets to send: (n, packet_len) uint8; ``times`` float64 seconds (realtime)."""

    packets: np.ndarray
    times: np.ndarray | None = None


class Source:
    """A recording as packet batches; subclasses define :meth:`batches`."""

    kind = "packets"

    def __init__(self, packet_len: int, frames_per_second: int | None = None) -> None:
        self.packet_len = packet_len
        self.frames_per_second = frames_per_second
        self.counts: dict[str, int] = {}
        self._clock: VdifClock | None = None

    def batches(self, realtime: bool = False) -> Iterator[Batch]:
        raise NotImplementedError

    def _per_batch(self) -> int:
        return max(1, BATCH_BYTES // self.packet_len)

    def _recorded(self, packets: np.ndarray) -> np.ndarray:
        """The packets of a recorder's chunk without the slots it filled because
        their packet never arrived: all zeros, or (VDIF) fill frames. Counted."""
        empty = ~packets.any(axis=1)
        fill = _fill_frames(packets) & ~empty
        self.counts["empty_slots"] = self.counts.get("empty_slots", 0) + int(empty.sum())
        self.counts["fill_frames"] = self.counts.get("fill_frames", 0) + int(fill.sum())
        drop = empty | fill
        return np.ascontiguousarray(packets[~drop]) if drop.any() else packets

    def _timed(self, packets: np.ndarray, realtime: bool) -> Batch:
        """A batch of VDIF frames, timed from their headers when ``realtime``."""
        if not realtime:
            return Batch(packets)
        if self._clock is None:
            if not self.frames_per_second:
                raise ConfigError(
                    f"--realtime replay of {self.kind} needs the frame rate: give "
                    "--frames-per-second (frames per second of one VDIF thread)"
                )
            self._clock = VdifClock(self.frames_per_second, self.packet_len)
        return Batch(packets, self._clock.times(packets))


def _fill_frames(packets: np.ndarray) -> np.ndarray:
    """Which rows are VDIF fill frames: invalid bit set, payload all fill words."""
    n, length = packets.shape
    if length < vdif.HEADER_LEN + 4 or length % 4:
        return np.zeros(n, bool)
    fill = (packets[:, 3] & 0x80) != 0
    if fill.any():
        words = packets[fill, vdif.HEADER_LEN :].view("<u4")
        fill[fill] = np.all(words == FILL_WORD, axis=1)
    return fill


class VdifClock:
    """Each VDIF frame's time (header seconds + frame number / rate) from the first
    frame's; kept non-decreasing, so a frame recorded out of order goes at once."""

    def __init__(self, frames_per_second: int, frame_len: int) -> None:
        self.fps, self.frame_len = frames_per_second, frame_len
        self._t0: int | None = None
        self._last = 0.0

    def times(self, frames: np.ndarray) -> np.ndarray:
        if len(frames) == 0:
            return np.zeros(0)
        h = vdif.decode_headers(frames)
        if np.any(h["frame_len"] != self.frame_len):
            raise ConfigError(
                f"--realtime paces by VDIF headers, but these {self.frame_len}-byte packets "
                "are not VDIF frames of that length; use --rate instead"
            )
        ticks = h["seconds"] * self.fps + h["frame"]
        if self._t0 is None:
            self._t0 = int(ticks[0])
        t = np.maximum((ticks - self._t0) / self.fps, self._last)
        t = np.maximum.accumulate(t)
        self._last = float(t[-1])
        return np.ascontiguousarray(t, dtype=np.float64)


def vdif_frame_len(path: Path) -> int | None:
    """The frame length a file's first VDIF header states, if it looks like one that
    tiles the file (None otherwise)."""
    try:
        with open(path, "rb") as f:
            head = f.read(vdif.HEADER_LEN)
        size = path.stat().st_size
    except OSError:
        return None
    if len(head) < vdif.HEADER_LEN:
        return None
    n = int(vdif.decode_headers(np.frombuffer(head, np.uint8)[None, :])["frame_len"][0])
    return n if vdif.HEADER_LEN < n <= 65507 and size % n == 0 else None


class PacketFiles(Source):
    """Files of whole packets back to back, replayed in the order given: raw packet
    files, or a vbs scan's chunks (``gaps``: chunk numbers not on any disk)."""

    def __init__(
        self,
        files: Sequence[Path],
        packet_len: int,
        *,
        kind: str = "raw",
        gaps: int = 0,
        frames_per_second: int | None = None,
    ) -> None:
        super().__init__(packet_len, frames_per_second)
        self.files, self.kind, self.gaps = list(files), kind, gaps

    def batches(self, realtime: bool = False) -> Iterator[Batch]:
        self.counts = {"files": len(self.files), "gaps": self.gaps, "truncated_bytes": 0}
        self._clock = None
        per = self._per_batch()
        for path in self.files:
            whole, tail = divmod(_size(path), self.packet_len)
            if tail and self.kind == "vbs":
                raise FormatError(
                    f"{path} is not a whole number of {self.packet_len}-byte packets; a vbs "
                    "chunk always is: give the right --packet-len"
                )
            self.counts["truncated_bytes"] += tail  # a raw capture cut mid-packet
            for first in range(0, whole, per):
                n = min(per, whole - first)
                packets = _read(path, first * self.packet_len, n, self.packet_len)
                if self.kind == "vbs":
                    packets = self._recorded(packets)
                yield self._timed(packets, realtime)


class Mark6Files(Source):
    """A Mark6 scatter-gather scan: the blocks of every file in block-number order."""

    kind = "mark6"

    def __init__(self, files: Sequence[Path], frames_per_second: int | None = None) -> None:
        self.blocks: list[tuple[int, Path, int, int]] = []  # number, file, offset, bytes
        self.truncated = 0
        sizes = set()
        for path in files:
            sizes.add(self._index(path))
        if len(sizes) != 1:
            raise FormatError(
                f"Mark6 files of one scan disagree on the packet size ({sorted(sizes)})"
            )
        super().__init__(sizes.pop(), frames_per_second)
        self.blocks.sort()
        numbers = [b[0] for b in self.blocks]
        if len(set(numbers)) != len(numbers):
            raise FormatError("Mark6 scan: two blocks carry the same block number")
        self.gaps = (numbers[-1] + 1 - len(numbers)) if numbers else 0

    def _index(self, path: Path) -> int:
        """Walks one file's blocks; returns its packet size."""
        size = _size(path)
        with open(path, "rb") as f:
            head = f.read(MARK6_HEADER.size)
            if len(head) < MARK6_HEADER.size:
                raise FormatError(f"{path} is shorter than a Mark6 file header (20 bytes)")
            sync, version, block_size, _fmt, packet_size = MARK6_HEADER.unpack(head)
            if sync != MARK6_SYNC:
                raise FormatError(f"{path} is not a Mark6 file (sync word 0x{sync:08x})")
            if version != 2:
                raise FormatError(f"{path}: Mark6 d-plane version {version}; replay reads 2")
            if not 0 < packet_size <= 65507 or block_size <= MARK6_BLOCK.size:
                raise FormatError(
                    f"{path}: Mark6 header packet_size {packet_size} / block_size "
                    f"{block_size} is not usable"
                )
            pos = MARK6_HEADER.size
            while pos < size:
                f.seek(pos)
                raw = f.read(MARK6_BLOCK.size)
                if len(raw) < MARK6_BLOCK.size:
                    self.truncated += 1
                    break
                number, wb_size = MARK6_BLOCK.unpack(raw)
                data = wb_size - MARK6_BLOCK.size
                if number < 0 or data < 0 or wb_size > block_size or data % packet_size:
                    raise FormatError(
                        f"{path}: Mark6 block at byte {pos} (number {number}, size {wb_size}) "
                        f"is not whole {packet_size}-byte packets within block_size {block_size}"
                    )
                if pos + wb_size > size:  # cut short by a crash: not replayed, counted
                    self.truncated += 1
                    break
                self.blocks.append((number, path, pos + MARK6_BLOCK.size, data))
                pos += wb_size
        return packet_size

    def batches(self, realtime: bool = False) -> Iterator[Batch]:
        self.counts = {"blocks": len(self.blocks), "gaps": self.gaps,
                       "truncated_blocks": self.truncated}  # fmt: skip
        self._clock = None
        for _number, path, offset, nbytes in self.blocks:
            n = nbytes // self.packet_len
            if n:
                packets = self._recorded(_read(path, offset, n, self.packet_len))
                yield self._timed(packets, realtime)


class VdifStreams(Source):
    """The vdif layout: per file number, the streams' frames merged in time order;
    fill frames (never received) skipped and counted unless ``send_fill``."""

    kind = "vdif"

    def __init__(
        self,
        groups: Sequence[Sequence[Path]],
        frame_len: int,
        *,
        gaps: int = 0,
        send_fill: bool = False,
        frames_per_second: int | None = None,
    ) -> None:
        super().__init__(frame_len, frames_per_second)
        self.groups, self.gaps, self.send_fill = [list(g) for g in groups], gaps, send_fill

    def batches(self, realtime: bool = False) -> Iterator[Batch]:
        self.counts = {"files": sum(map(len, self.groups)), "gaps": self.gaps,
                       "fill_frames": 0, "fill_frames_sent": 0}  # fmt: skip
        self._clock = None
        per = max(1, self._per_batch() // max(map(len, self.groups), default=1))
        for paths in self.groups:
            counts = []
            for p in paths:
                n, tail = divmod(_size(p), self.packet_len)
                if tail:
                    raise FormatError(
                        f"{p} is not a whole number of {self.packet_len}-byte VDIF frames"
                    )
                counts.append(n)
            for first in range(0, max(counts, default=0), per):
                parts = [
                    _read(p, first * self.packet_len, min(per, n - first), self.packet_len)
                    for p, n in zip(paths, counts, strict=True)
                    if n > first
                ]
                frames = self._merge(parts)
                if len(frames):
                    yield self._timed(frames, realtime)

    def _merge(self, parts: list[np.ndarray]) -> np.ndarray:
        frames = np.concatenate(parts) if len(parts) > 1 else parts[0]
        h = vdif.decode_headers(frames)
        if np.any(h["frame_len"] != self.packet_len):
            raise FormatError(
                f"vdif scan: frames of more than one length (expected {self.packet_len})"
            )
        if len(parts) > 1:  # threads side by side in time, as they were sent
            order = np.argsort((h["seconds"] << 24) | h["frame"], kind="stable")
            frames, h["invalid"] = frames[order], h["invalid"][order]
        fill = h["invalid"].copy()
        if fill.any():
            words = frames[fill, vdif.HEADER_LEN :].view("<u4")
            fill[fill] = np.all(words == FILL_WORD, axis=1)
        nfill = int(fill.sum())
        self.counts["fill_frames"] += nfill
        if self.send_fill:
            self.counts["fill_frames_sent"] += nfill
            return np.ascontiguousarray(frames)
        return np.ascontiguousarray(frames[~fill])


class PcapFiles(Source):
    """The UDP payloads of pcap files, in order; consecutive payloads of one length
    form a batch; ``times`` from the capture's own time stamps."""

    kind = "pcap"

    def __init__(
        self, files: Sequence[Path], port: int | None = None, source_port: int | None = None
    ) -> None:
        super().__init__(0)
        self.readers = [PcapReader(p, port, source_port) for p in files]

    def batches(self, realtime: bool = False) -> Iterator[Batch]:
        self.counts = dict.fromkeys(PCAP_COUNTERS, 0)
        rows: list[bytes] = []
        stamps: list[float] = []
        t0: float | None = None
        last = 0.0

        def flush() -> Batch:
            nonlocal last
            pk = np.frombuffer(b"".join(rows), np.uint8).reshape(len(rows), -1)
            times = None
            if realtime:
                # Never backwards: a record stamped earlier than the one before goes at once.
                times = np.maximum.accumulate(np.maximum(np.array(stamps) - (t0 or 0.0), last))
                last = float(times[-1])
            rows.clear()
            stamps.clear()
            return Batch(pk, times)

        for reader in self.readers:
            reader.counts = dict.fromkeys(PCAP_COUNTERS, 0)
            for stamp, payload in reader.packets():
                t0 = stamp if t0 is None else t0
                if rows and (len(payload) != len(rows[0]) or
                             len(rows) * len(rows[0]) >= BATCH_BYTES):  # fmt: skip
                    yield flush()
                if len(payload) == 0:
                    continue  # an empty datagram: nothing to send (counted as udp)
                rows.append(payload)
                stamps.append(stamp)
            for k, v in reader.counts.items():
                self.counts[k] += v
        if rows:
            yield flush()


def read_ahead(batches: Iterator[Batch], depth: int = READ_AHEAD) -> Iterator[Batch]:
    """``batches``, produced on a reader thread up to ``depth`` ahead of the consumer.
    A reader error is raised in the consumer; leaving early stops the reader."""
    q: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for b in batches:
                if not put(b):
                    return
            put(end)
        except BaseException as exc:  # handed to the consumer, which raises it
            put(exc)

    reader = threading.Thread(target=produce, name="replay-read-ahead", daemon=True)
    reader.start()
    try:
        while True:
            item = q.get()
            if item is end:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, Batch)
            yield item
    finally:
        stop.set()
        reader.join()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as exc:
        raise FormatError(f"cannot read {path}: {exc.strerror}") from exc


def _read(path: Path, offset: int, n: int, packet_len: int) -> np.ndarray:
    """``n`` packets from byte ``offset`` of ``path``, as (n, packet_len) uint8."""
    try:
        data = np.fromfile(path, dtype=np.uint8, count=n * packet_len, offset=offset)
    except OSError as exc:
        raise FormatError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if data.size != n * packet_len:
        raise FormatError(f"{path} changed while being replayed (shorter than it was)")
    return data.reshape(n, packet_len)
