"""The voltage ring: the last T seconds of a live stream in host memory, for triggered
dumps (issue 28 item 3; docs/search.md, "Triggered voltage dumps").

A consumer of the chunk timeline (capture/run.py ``run_capture(consumer=...)``): each
block's payload bytes are copied into the ring's slot for its chunk id and the block
goes on to the capture's own sink (which counts it and gives it back to the pool), so
the capture's chunk pool is held no longer than without the ring (``around``: the
ring in front of a consumer another runner made). A slot is one chunk
id of every stream: (streams, packets per chunk, payload) bytes, the packets' presence,
and the chunk id it holds; chunk id ``c`` lives in slot ``c % slots``. Time on the
ring is the format's packet index (chunk id x packets per chunk + packet), so a sample
is placed exactly: sample ``n`` of the stream's axis is packet ``n // spp``. A gap (chunk
ids the engine skipped) leaves its slots holding older ids: those samples read as lost.

Readers (a trigger's thread) never stop the capture: a slot is copied out and its id
read before and after; the capture marks a slot (id -1) before it overwrites it, so a
copy that raced an overwrite is seen and counted lost, never mixed into a dump.

The items handed on are the samples a reader of the capture sees (a live search's
sample axis: gaps as zeros, a discontinuity skipped); ``stream_sample`` maps them
back to the index axis, across any discontinuity, so a candidate's time is placed on
the ring's clock exactly.

The stream's clock: the capture keeps whole packets in its chunks (``whole_packets``),
and the header of the first packet that arrived gives the exact time of its sample
(``StreamFormat.packet_time``); every other sample's time is that plus its distance on
the index axis times the sample interval, exactly (fractions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from voltstream.capture.timeline import Block, Gap
from voltstream.errors import ConfigError
from voltstream.formats import StreamFormat
from voltstream.pipeline.interfaces import Consumer

__all__ = [
    "RingClock",
    "RingCopy",
    "VoltageRing",
    "check_ring_memory",
    "lost_samples",
    "ring_bytes",
]

MIB = 1 << 20


@dataclass(frozen=True)
class RingClock:
    """The stream's clock: sample ``first_sample`` (on the index axis: packet index x
    samples per packet) was at MJD ``mjd`` + ``sec`` seconds (exact)."""

    first_sample: int
    mjd: int
    sec: Fraction
    tsamp: Fraction

    def seconds(self, sample: int) -> Fraction:
        """Seconds from the stream's first sample to ``sample``."""
        return (sample - self.first_sample) * self.tsamp

    def sample_at(self, seconds: Fraction) -> int:
        """The first sample at or after ``seconds`` from the stream's first sample."""
        return self.first_sample + math.ceil(seconds / self.tsamp)

    def seconds_of_mjd(self, mjd: Fraction) -> Fraction:
        """Seconds from the stream's first sample to MJD ``mjd``."""
        return (mjd - self.mjd) * 86400 - self.sec

    def mjd_of(self, sample: int) -> tuple[int, Fraction]:
        """(MJD, seconds into that day) of ``sample``, exact."""
        sec = self.sec + self.seconds(sample)
        days = math.floor(sec / 86400)
        return self.mjd + days, sec - 86400 * days

    def mjd_text(self, sample: int, places: int = 15) -> str:
        """The MJD of ``sample`` in decimal, rounded to ``places`` (15: ~1 ns)."""
        mjd, sec = self.mjd_of(sample)
        q = round((mjd + sec / 86400) * 10**places)
        return f"{q // 10**places}.{q % 10**places:0{places}d}"


def lost_samples(present: np.ndarray, first_packet: int, first: int, stop: int,
                 spp: int) -> int:  # fmt: skip
    """Samples ``first`` .. ``stop`` in packets absent (in any stream) from ``present``
    (streams, packets from ``first_packet``)."""
    starts = (first_packet + np.flatnonzero(~present.all(axis=0))) * spp
    overlap = np.minimum(stop, starts + spp) - np.maximum(first, starts)
    return int(np.clip(overlap, 0, None).sum())


@dataclass
class RingCopy:
    """Samples ``first`` .. ``stop`` copied out of the ring as the packets that hold
    them: ``payload`` (streams, packets, payload bytes) from packet ``first_packet``,
    ``present`` (streams, packets): absent packets (lost, or overwritten while copied)
    are False and their bytes zero."""

    first: int
    stop: int
    first_packet: int
    payload: np.ndarray
    present: np.ndarray
    torn_packets: int = 0  # overwritten by the capture while being copied
    overwritten_packets: int = 0  # overwritten before the copy reached them

    def lost_samples(self, spp: int) -> int:
        """Samples of the window in packets absent from the copy (any stream's)."""
        return lost_samples(self.present, self.first_packet, self.first, self.stop, spp)

    @property
    def samples(self) -> int:
        return self.stop - self.first


def _slots(fmt: StreamFormat, seconds: float, packets_per_chunk: int) -> int:
    """Slots for ``seconds`` of the stream at its nominal rate, and one more: the slot
    the capture writes next is never counted as held."""
    return math.ceil(seconds * fmt.packets_per_second / packets_per_chunk) + 1


def ring_bytes(fmt: StreamFormat, seconds: float, packets_per_chunk: int) -> int:
    """Host memory of a ring of ``seconds``: payload bytes and one presence byte per
    packet of every stream, in whole chunks."""
    per_chunk = fmt.streams * packets_per_chunk * (fmt.payload_len + 1)
    return _slots(fmt, seconds, packets_per_chunk) * per_chunk


def _available_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (None where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_ring_memory(nbytes: int, seconds: float, limit_mb: float) -> None:
    """A ConfigError (one line) when a ring of ``nbytes`` is over ``limit_mb`` MiB or
    over the machine's available memory: refused before the capture starts."""
    need = nbytes / MIB
    if need > limit_mb:
        raise ConfigError(
            f"--ring-seconds {seconds:g} needs {need:.0f} MiB of host memory at the stream's "
            f"nominal rate, over --voltage-ring-mb {limit_mb:g}: keep fewer seconds, or "
            "raise --voltage-ring-mb"
        )
    free = _available_bytes()
    if free is not None and nbytes > free:
        raise ConfigError(
            f"--ring-seconds {seconds:g} needs {need:.0f} MiB of host memory; only "
            f"{free / MIB:.0f} MiB is available: keep fewer seconds"
        )


class VoltageRing:
    """The ring and the timeline consumer that fills it; ``inner`` (the capture's sink:
    CountingSink or TfpSink) then takes every item, releasing the blocks."""

    def __init__(
        self, fmt: StreamFormat, seconds: float, packets_per_chunk: int, inner: Consumer
    ) -> None:
        if fmt.bits != 8 or fmt.real:
            raise ConfigError(
                f"--ring-seconds dumps 8-bit complex samples as DADA; {fmt.bits}-bit"
                f"{' real' if fmt.real else ''} VDIF cannot be dumped yet"
            )
        self.fmt, self.seconds, self.inner = fmt, seconds, inner
        self.ppc, self.spp, self.nstreams = packets_per_chunk, fmt.samples_per_packet, fmt.streams
        self.nslots = _slots(fmt, seconds, packets_per_chunk)
        shape = (self.nslots, self.nstreams, packets_per_chunk)
        # Written through once, here: the pages are the process's before the capture
        # starts, so the capture thread never waits on a first-touch page fault.
        self.payload = np.empty((*shape, fmt.payload_len), np.uint8)
        self.payload.fill(0)
        self.present = np.zeros(shape, bool)
        self.ids = np.full(self.nslots, -1, np.int64)
        self.header_len = fmt.packet_len - fmt.payload_len
        self.slot_len = fmt.packet_len
        self.clock: RingClock | None = None
        self.newest = -1  # the newest chunk id in the ring
        self.end_sample = 0  # the sample after the newest one that arrived
        self.blocks = 0
        self.gap_packets = 0
        # (samples handed on before it, its index-axis sample) at the first block and
        # after each discontinuity: the handed-on axis back to the index axis.
        self.jumps: list[tuple[int, int]] = []
        self._handed = 0  # samples handed on so far (blocks' packets and gaps)
        self._next = -1  # the index-axis sample the next item continues from

    def around(self, inner: Consumer) -> VoltageRing:
        """The ring in front of ``inner`` (run_capture's ``tap``: the consumer it made
        for the run, which then takes every item)."""
        self.inner = inner
        return self

    @property
    def nbytes(self) -> int:
        return self.payload.nbytes + self.present.nbytes

    def attach(self, cap: Any) -> None:
        """The capture started: its chunks must be laid out as the ring reads them."""
        slot_len = getattr(cap, "slot_len", self.slot_len)
        ppc = getattr(cap, "packets_per_chunk", self.ppc)
        if slot_len != self.slot_len or ppc != self.ppc:
            raise ConfigError(
                f"the voltage ring expects chunks of {self.ppc} whole {self.slot_len}-byte "
                f"packets, the capture gives {ppc} of {slot_len}: a bug, please report it"
            )
        getattr(self.inner, "attach", lambda cap: None)(cap)

    def take(self, item: Block | Gap) -> None:
        if isinstance(item, Block):
            try:
                self._store(item)
            except BaseException:
                item.release()
                raise
            self._follow((item.chunk_id * self.ppc + item.first) * self.spp,
                         item.packets * self.spp)  # fmt: skip
        else:
            self.gap_packets += item.packets
            self._follow(self._next, item.packets * self.spp)
        self.inner.take(item)

    def _follow(self, index: int, n: int) -> None:
        """``n`` samples handed on from index-axis sample ``index``."""
        if index != self._next:
            self.jumps.append((self._handed, index))
        self._handed += n
        self._next = index + n

    def stream_sample(self, handed: int) -> int | None:
        """The index-axis sample of the ``handed``-th sample handed on (a reader's sample
        ``handed``); None before anything was."""
        jumps = self.jumps
        k = len(jumps) - 1
        while k > 0 and jumps[k][0] > handed:
            k -= 1
        return None if k < 0 else jumps[k][1] + handed - jumps[k][0]

    def _store(self, blk: Block) -> None:
        raw = blk.array(self.nstreams, self.slot_len)
        try:
            if self.clock is None:
                self._start_clock(blk, raw)
            slot = blk.chunk_id % self.nslots
            self.ids[slot] = -1  # a reader copying this slot now sees it change
            np.copyto(self.payload[slot], raw[..., self.header_len :])
            self.present[slot] = blk.present
            self.ids[slot] = blk.chunk_id
        finally:
            del raw  # a view by address: never read after the block is released
        if blk.chunk_id >= self.newest:
            self.newest = blk.chunk_id
            self.end_sample = (blk.chunk_id * self.ppc + blk.stop) * self.spp
        self.blocks += 1

    def _start_clock(self, blk: Block, raw: np.ndarray) -> None:
        """The stream's clock from the header of the first packet that arrived."""
        seen = np.asarray(blk.present.any(axis=0))
        k = int(np.argmax(seen))
        stream = int(np.argmax(blk.present[:, k]))
        mjd, sec = self.fmt.packet_time(raw[stream, k, : self.header_len])
        first = (blk.chunk_id * self.ppc + k) * self.spp
        self.clock = RingClock(first, mjd, sec, self.fmt.tsamp_exact)

    def poll(self) -> None:
        self.inner.poll()

    def finish(self) -> None:
        self.inner.finish()

    def close(self) -> None:
        getattr(self.inner, "close", lambda: None)()

    def span(self) -> tuple[int, int] | None:
        """The samples the ring holds now, (first, stop) on the stream's sample axis;
        None before anything arrived."""
        clock, newest = self.clock, self.newest
        if clock is None or newest < 0:
            return None
        oldest = newest - (self.nslots - 1) + 1
        return max(oldest * self.ppc * self.spp, clock.first_sample), self.end_sample

    def _chunks(self, p0: int, p1: int) -> list[tuple[int, int, int, int]]:
        """(chunk id, its slot, first packet, stop packet) for each chunk that packets
        ``p0`` .. ``p1`` (on the index axis) touch."""
        ppc = self.ppc
        return [(c, c % self.nslots, max(p0, c * ppc), min(p1, (c + 1) * ppc))
                for c in range(p0 // ppc, (p1 - 1) // ppc + 1)]  # fmt: skip

    def presence(self, first: int, stop: int) -> tuple[int, np.ndarray]:
        """(first packet, presence (streams, packets)) of samples ``first`` .. ``stop`` as
        the ring holds them now, without their bytes: what a trigger is answered with
        before the writer reads the window out (record/dumps.py; ``lost_samples``)."""
        spp, ppc = self.spp, self.ppc
        p0, p1 = first // spp, -(-stop // spp)
        present = np.zeros((self.nstreams, p1 - p0), bool)
        for c, slot, a, b in self._chunks(p0, p1):
            if self.ids[slot] == c:
                present[:, a - p0 : b - p0] = self.present[slot, :, a - c * ppc : b - c * ppc]
        return p0, present

    def copy(self, first: int, stop: int) -> RingCopy:
        """Samples ``first`` .. ``stop`` copied out, slot by slot, each checked against an
        overwrite during its copy (see the module docstring)."""
        spp, ppc = self.spp, self.ppc
        p0, p1 = first // spp, -(-stop // spp)
        payload = np.zeros((self.nstreams, p1 - p0, self.fmt.payload_len), np.uint8)
        present = np.zeros((self.nstreams, p1 - p0), bool)
        torn = overwritten = 0
        for c, slot, a, b in self._chunks(p0, p1):
            held = int(self.ids[slot])
            if held != c:
                # A newer chunk took the slot (or is being written into it: -1 once the
                # ring has come round): overwritten. An older one: a gap, never arrived.
                if held > c or (held < 0 and self.newest + 1 >= c + self.nslots):
                    overwritten += (b - a) * self.nstreams
                continue
            out = slice(a - p0, b - p0)
            payload[:, out] = self.payload[slot, :, a - c * ppc : b - c * ppc]
            present[:, out] = self.present[slot, :, a - c * ppc : b - c * ppc]
            if self.ids[slot] != c:  # the capture overwrote it meanwhile
                torn += int(present[:, out].sum())
                present[:, out] = False
                payload[:, out] = 0
        return RingCopy(first, stop, p0, payload, present, torn, overwritten)

    def state(self) -> dict[str, Any]:
        """The ring for the report: its size and what it has seen. (Not ``as_dict``:
        run_capture takes a consumer that has one for a GPU stage.)"""
        clock = self.clock
        out: dict[str, Any] = {
            "seconds": self.seconds,
            "bytes": self.nbytes,
            "slots": self.nslots,
            "packets_per_slot": self.ppc,
            "blocks": self.blocks,
            "gap_packets": self.gap_packets,
            "first_sample": None if clock is None else clock.first_sample,
            "first_sample_mjd": None,
        }
        if clock is not None:
            out["first_sample_mjd"] = clock.mjd_text(clock.first_sample)
        return out
