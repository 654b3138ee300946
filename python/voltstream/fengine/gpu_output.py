"""The GPU F-engine's output: each call's heaps off the GPU, as heaps or as packets.

The last step of the chain in fengine/gpu.py: once ``postprocess`` has written a call's
payloads and clipped counts on the GPU, ``_copy_out`` queues their copy to page-locked
host memory on the copy-out stream and keeps the call as pending. The host buffers are
a ring (``_pinned``), or, after ``emit_packets``, a packet from the pool: then each
payload lands straight after its packet header (one pitched copy) and the host writes
only the headers. ``_collect`` waits for a call, adds its counts and times and returns
its heaps (``OutputHeap``, or one ``PacketBatch`` for the SPEAD sender); ``flush``
returns every pending call's.

CuPy is imported inside functions only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from voltstream.dsp.cuda import cupy_module
from voltstream.errors import ConfigError
from voltstream.fengine.heaps import PACKET_HEADER_LEN, HeapLayout, OutputHeap
from voltstream.fengine.packets import PacketBatch, PacketFormat, PacketPool
from voltstream.fengine.reference import FEngineCounters
from voltstream.fengine.slots import SlotPlanner

__all__ = ["GpuOutput", "Pending"]


@dataclass
class Pending:
    """One submitted call: where its heaps will land and what they are."""

    done: Any  # cupy Event after the device-to-host copy
    host_out: np.ndarray  # pinned (nsend, nchan, sph, ...) payloads, or the packets
    host_sat: np.ndarray  # pinned (nsend, 2) clipped counts
    send_slots: list  # absolute slot numbers, in order
    device: tuple = ()  # device buffers still in use: released after ``done``
    give_back: Callable[[], None] | None = None  # packet mode: back to the packet pool
    started: Any = None  # events around the call's kernels, for the GPU busy time
    computed: Any = None


class GpuOutput:
    """The output methods of :class:`~voltstream.fengine.gpu.GpuFEngine` (a mixin): its
    ``__init__`` makes the rings and streams named below."""

    # Made by GpuFEngine.__init__ and FEngineState (CuPy objects are Any).
    ASYNC_DEPTH: int
    layout: HeapLayout
    feng_id: int
    counters: FEngineCounters
    slots: SlotPlanner
    timing: dict[str, Any]
    packet_format: PacketFormat | None
    packet_pool: PacketPool | None
    _streams: list[Any]
    _pending: list[Pending]
    _pinned_ring: list[tuple[np.ndarray, np.ndarray]]
    _pinned_next: int

    def emit_packets(self, fmt: Any, queued_blocks: int = 4) -> None:
        """From now on, return each call's heaps as one ``PacketBatch`` laid out by
        ``fmt`` (``voltstream.fengine.packets``): the payloads are copied from the GPU
        straight into their packets in page-locked memory, the host writes only the
        headers. ``queued_blocks``: how many batches the output may hold at once
        (beyond the calls in flight) before the engine waits for one to come back."""
        if fmt.layout != self.layout:
            raise ConfigError("the packet format's heap layout is not this engine's")
        self.flush(copy=True)  # nothing pending may come back in the old form
        cp = cupy_module()
        self.packet_format = fmt
        self.packet_pool = PacketPool(
            self.ASYNC_DEPTH + 1 + int(queued_blocks),
            lambda n: np.frombuffer(cp.cuda.alloc_pinned_memory(n), dtype=np.uint8, count=n),
        )

    def flush(self, copy: bool = True) -> list[OutputHeap]:
        """Heaps of every submitted call not yet returned, in time order.

        ``copy=False`` returns views into the pinned buffers, as the async path does.
        """
        heaps: list[OutputHeap] = []
        while self._pending:
            heaps.extend(self._collect(self._pending.pop(0), copy=copy))
        return heaps

    def _host_buffers(
        self, payload_shape: tuple[int, ...]
    ) -> tuple[np.ndarray, np.ndarray, Callable[[], None] | None]:
        """Where a call's ``payload_shape`` payloads and clipped counts will land: the
        pinned ring, or (packet mode) a packet buffer from the pool, with the function
        that gives it back."""
        nsent = payload_shape[0]
        packets = self.packet_format is not None  # then host_out is only for the counts
        host_out, host_sat = self._pinned((nsent, 1) if packets else payload_shape)
        give_back = None
        fmt, pool = self.packet_format, self.packet_pool
        if fmt is not None and pool is not None:  # emit_packets makes both
            # Buffers are made for the most slots a call of this size can complete.
            most = -(-(self.slots.end - self.slots.start) // self.layout.samples_per_heap) + 1
            pool.min_bytes = max(pool.min_bytes, fmt.nbytes(most))
            buf, give_back = pool.take(fmt.nbytes(nsent))
            host_out = buf[: fmt.nbytes(nsent)].reshape(fmt.shape(nsent))
        return host_out, host_sat, give_back

    def _copy_out(
        self, cp: Any, out: Any, sat: Any, host: tuple, sent: list, held: tuple, events: tuple
    ) -> None:
        """Queues the copy of a call's payloads ``out`` and counts ``sat`` into the
        ``host`` buffers (``_host_buffers``) once its kernels are done (``events``:
        started, computed), and keeps the call pending; ``held``: its device buffers."""
        out_s = self._streams[2]
        host_out, host_sat, give_back = host
        started, computed = events
        out_s.wait_event(computed)
        if give_back is None:
            out.data.copy_to_host_async(host_out.ctypes.data, host_out.nbytes, out_s)
        else:
            # Each packet's payload to its place after its header: one pitched copy.
            fmt = self.packet_format
            assert fmt is not None  # a give_back comes with the packet format
            head, per = PACKET_HEADER_LEN, fmt.per_packet
            cp.cuda.runtime.memcpy2DAsync(
                host_out.ctypes.data + head, host_out.shape[-1], out.data.ptr, per,
                per, out.nbytes // per, cp.cuda.runtime.memcpyDeviceToHost, out_s.ptr,
            )  # fmt: skip
        sat.data.copy_to_host_async(host_sat.ctypes.data, host_sat.nbytes, out_s)
        done = out_s.record()
        self._pending.append(
            Pending(done, host_out, host_sat, sent, (out, sat, *held), give_back, started, computed)
        )

    def _pinned(self, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Pinned host buffers for one call's payloads: a ring, grown as needed.

        ``ASYNC_DEPTH + 1`` deep: an async caller holds views of one call's heaps
        while the next ``ASYNC_DEPTH`` calls are in flight.
        """
        cp = cupy_module()
        nbytes = int(np.prod(shape))
        i = self._pinned_next
        self._pinned_next = (i + 1) % (self.ASYNC_DEPTH + 1)
        if i == len(self._pinned_ring):
            self._pinned_ring.append((np.zeros(0, np.uint8), np.zeros(0, np.uint64)))
        out, sat = self._pinned_ring[i]
        if out.nbytes < nbytes or sat.size < 2 * shape[0]:
            # With room to spare: a call that completes one more slot than the last
            # must not allocate (page-locking stalls the host for milliseconds).
            nb, rows = max(nbytes, out.nbytes) * 3 // 2, max(shape[0] * 2, 64)
            out = np.frombuffer(cp.cuda.alloc_pinned_memory(nb), dtype=np.uint8, count=nb)
            sat = np.frombuffer(cp.cuda.alloc_pinned_memory(rows * 16), dtype=np.uint64)
            self._pinned_ring[i] = (out, sat)
        dtype = np.int8 if self.layout.bits == 8 else np.uint8
        return out[:nbytes].view(dtype).reshape(shape), sat[: shape[0] * 2].reshape(shape[0], 2)

    def _collect(self, pending: Pending, copy: bool) -> list:
        t0 = time.perf_counter()
        pending.done.synchronize()
        self.timing["host_wait_s"] += time.perf_counter() - t0
        if pending.started is not None:
            ms = cupy_module().cuda.get_elapsed_time(pending.started, pending.computed)
            self.timing["gpu_busy_s"] += ms / 1e3
        self.counters.saturated += pending.host_sat.sum(axis=0).astype(np.int64)
        fmt = self.packet_format
        if pending.give_back is not None and fmt is not None:
            fmt.fill_headers(pending.host_out, pending.send_slots)
            batch = PacketBatch(fmt, pending.host_out, pending.send_slots, pending.give_back)
            if not copy:
                return [batch]
            heaps = batch.heaps()
            batch.release()
            return heaps
        layout, c = self.layout, self.layout.channels_per_heap
        heaps = []
        for i, slot in enumerate(pending.send_slots):
            payload = pending.host_out[i]
            for sub in range(layout.n_substreams):
                part = payload[sub * c : (sub + 1) * c]
                heaps.append(
                    OutputHeap(
                        timestamp=int(slot * layout.samples_per_heap),
                        frequency=layout.channel_offset(sub),
                        feng_id=self.feng_id,
                        payload=part.copy() if copy else part,
                        substream=sub,
                    )
                )
        return heaps
