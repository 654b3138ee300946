"""Output heaps laid out as the packets that carry them, a block of heaps at a time.

At one MeerKAT antenna (34 Gb/s in) the F-engine puts out about 3.4 GB/s of 8-bit
heaps. Made heap by heap (copy the payload, build a packet array, copy it again to
write it) that costs the host more than the input's whole time budget; the live
F-engine kept 18.75 Gb/s that way. So the GPU engine copies each block's payloads
from the device straight into their places in a buffer of packets (a pitched copy
that skips the 72-byte headers), the host fills only the headers, and the output
sends each heap's packets and writes the whole block from that buffer: no host copy
of payload bytes at all.

``PacketFormat`` says where everything lies: a block of ``S`` heap time slots is
one uint8 array ``(S, n_substreams, packets_per_heap, packet_len)``, in send order
(time slot, then substream); packet ``k`` of a heap holds payload bytes ``k *
per_packet ..`` after its header (``heaps.packet_headers``), so the bytes are the
same as ``heaps.encode_heap`` gives heap by heap. ``PacketBatch`` is one such block
handed to the output; ``PacketPool`` recycles the (page-locked) buffers: a batch
goes back to the pool when the output has sent and written it, and the engine waits
for a free buffer when all are out (the output's queue then holds the engine back,
and the capture counts the chunks it has no room for).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from voltstream.errors import ConfigError, VoltstreamError
from voltstream.fengine.heaps import (
    PACKET_HEADER_LEN,
    HeapLayout,
    OutputHeap,
    heap_counter,
    packet_headers,
)

__all__ = ["PacketBatch", "PacketFormat", "PacketPool", "heap_count", "release_batches"]


@dataclass(frozen=True)
class PacketFormat:
    """Where a block's heaps and their packets lie in one buffer."""

    layout: HeapLayout
    packet_payload: int = 8192
    feng_id: int = 0
    n_fengs: int = 1

    def __post_init__(self) -> None:
        size = self.layout.payload_bytes
        if self.per_packet < 1 or size % self.per_packet:
            raise ConfigError(
                f"packet payload {self.packet_payload} B does not divide the heap payload "
                f"{size} B: give a power of two (MeerKAT uses 8192 with jumbo frames)"
            )
        heap_counter(0, 1, self.feng_id, self.n_fengs)  # checks feng_id against n_fengs

    @property
    def per_packet(self) -> int:
        return min(int(self.packet_payload), self.layout.payload_bytes)

    @property
    def packets_per_heap(self) -> int:
        return self.layout.payload_bytes // self.per_packet

    @property
    def packet_len(self) -> int:
        return PACKET_HEADER_LEN + self.per_packet

    def shape(self, nslots: int) -> tuple[int, int, int, int]:
        return (nslots, self.layout.n_substreams, self.packets_per_heap, self.packet_len)

    def nbytes(self, nslots: int) -> int:
        return int(np.prod(self.shape(nslots)))

    def fill_headers(self, packets: np.ndarray, slots: npt.ArrayLike) -> None:
        """Writes the headers of the heaps of ``slots`` (heap time slot numbers) into
        ``packets`` (``shape(len(slots))``); the payload bytes are left as they are."""
        lay = self.layout
        slots = np.asarray(slots, dtype=np.int64)
        nsub = lay.n_substreams
        ts = slots * lay.samples_per_heap
        cnt = [heap_counter(int(t), lay.samples_per_heap, self.feng_id, self.n_fengs) for t in ts]
        freq = [lay.channel_offset(s) for s in range(nsub)]
        heads = packet_headers(
            np.repeat(cnt, nsub),
            np.repeat(ts, nsub),
            np.tile(freq, len(slots)),
            self.feng_id,
            lay.payload_bytes,
            self.per_packet,
        )
        packets[..., :PACKET_HEADER_LEN] = heads.reshape(*packets.shape[:3], PACKET_HEADER_LEN)

    def pack(self, payloads: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """A new packet block from heap payloads ``(S, nchan, spectra, ...)`` (what the
        engines compute per slot); the host-copy way, for the CPU path and tests."""
        p = np.ascontiguousarray(payloads).view(np.uint8).reshape(len(slots), -1)
        out = np.empty(self.shape(len(slots)), dtype=np.uint8)
        out[..., PACKET_HEADER_LEN:] = p.reshape(out.shape[:3] + (self.per_packet,))
        self.fill_headers(out, slots)
        return out


@dataclass(eq=False)
class PacketBatch:
    """The packets of the heaps of ``slots``, all substreams: ``packets`` is
    ``PacketFormat.shape(len(slots))``. Call ``release`` once it is sent and written."""

    fmt: PacketFormat
    packets: np.ndarray
    slots: list[int]
    on_release: Callable[[], None] | None = field(default=None, repr=False)

    @property
    def nheaps(self) -> int:
        return len(self.slots) * self.fmt.layout.n_substreams

    def heap_packets(self, i: int, sub: int) -> np.ndarray:
        """The ``(packets_per_heap, packet_len)`` packets of slot ``i``'s substream ``sub``."""
        return self.packets[i, sub]

    def heaps(self) -> list[OutputHeap]:
        """The batch as OutputHeaps with copied payloads, in send order (for callers
        that keep heaps, and tests)."""
        lay, fmt = self.fmt.layout, self.fmt
        out = []
        for i, slot in enumerate(self.slots):
            for sub in range(lay.n_substreams):
                payload = self.packets[i, sub, :, PACKET_HEADER_LEN:].reshape(-1)
                out.append(
                    OutputHeap(
                        timestamp=int(slot) * lay.samples_per_heap,
                        frequency=lay.channel_offset(sub),
                        feng_id=fmt.feng_id,
                        payload=payload.view(lay.payload_dtype).reshape(lay.payload_shape).copy(),
                        substream=sub,
                    )
                )
        return out

    def release(self) -> None:
        """Gives the buffer back (once; later calls do nothing)."""
        hook, self.on_release = self.on_release, None
        if hook is not None:
            hook()


def release_batches(items: Iterable[Any]) -> None:
    """Gives back the buffers of every PacketBatch among ``items`` (idempotent)."""
    for item in items or ():
        if isinstance(item, PacketBatch):
            item.release()


def heap_count(items: Iterable[Any]) -> int:
    """Heaps in a list of OutputHeaps and/or PacketBatches."""
    return sum(i.nheaps if isinstance(i, PacketBatch) else 1 for i in items)


class PacketPool:
    """At most ``limit`` reusable byte buffers, made by ``alloc(nbytes)`` (page-locked
    for the GPU) on first need and grown when a block needs more.

    ``take`` waits for a buffer to come back when all are out; past ``timeout_s`` it
    raises, naming the stalled output, rather than hang the engine for good.
    """

    def __init__(self, limit: int, alloc: Callable[[int], np.ndarray] | None = None,
                 timeout_s: float = 30.0) -> None:  # fmt: skip
        if limit < 1:
            raise ConfigError("a packet pool needs at least one buffer")
        self.limit, self.timeout_s = int(limit), float(timeout_s)
        self._alloc = alloc or (lambda n: np.empty(n, dtype=np.uint8))
        self._free: list[np.ndarray] = []
        self._made = 0
        self.min_bytes = 0  # the size of every buffer made from now on, at least
        self._cond = threading.Condition()
        self.waits = 0  # times the engine had to wait for the output

    def take(self, nbytes: int) -> tuple[np.ndarray, Callable[[], None]]:
        """A buffer of at least ``nbytes`` and the function that gives it back."""
        with self._cond:
            if not self._free and self._made >= self.limit:
                self.waits += 1
                if not self._cond.wait_for(lambda: self._free, timeout=self.timeout_s):
                    raise VoltstreamError(
                        f"the F-engine output kept all {self.limit} packet buffers for "
                        f"{self.timeout_s:g} s: the output (send or file write) has stalled"
                    )
            buf = self._free.pop() if self._free else None
            if buf is None:
                self._made += 1
        if buf is None or buf.nbytes < nbytes:
            buf = self._alloc(max(int(nbytes), self.min_bytes, 1))
        returned = [False]

        def give_back(b: Any = buf) -> None:
            with self._cond:
                if not returned[0]:
                    returned[0] = True
                    self._free.append(b)
                    self._cond.notify()

        return buf, give_back
