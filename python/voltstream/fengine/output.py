"""F-engine output: heaps to UDP destinations (one per substream) and/or a file.

``HeapOutput`` encodes each ``OutputHeap`` into SPEAD-64-48 packets
(``voltstream.fengine.heaps.encode_heap``) and sends them with the paced Rust sender
(``voltstream._core.Sender``: sendmmsg batches, UDP GSO), substream ``i`` to
destination ``i``. Before the first heap, and again every ``descriptor_interval``
heaps, each destination gets the item-descriptor heap, so a spead2 receiver (or any
SPEAD receiver that reads descriptors) decodes timestamp, feng_id, frequency and
feng_raw with no prior knowledge and picks up a stream it joins late. ``close``
ends each stream with a stop heap (stream control 0x6 = 2).

Pacing: ``rate_gbps`` is the total rate over all destinations. Heaps go out one at a
time in time order, each paced at that rate, so the aggregate never exceeds it;
0 sends as fast as possible. Sending runs in a background thread (the sender
releases the GIL while it paces) so the engine computes the next block meanwhile.

Destinations are ``HOST:PORT`` (IPv4 unicast or multicast; the kernel's multicast
TTL of 1 keeps multicast on the local network). ``parse_destinations`` accepts
comma-separated lists and MeerKAT's ``239.10.0.1+3:7148`` for four consecutive
groups.

File format (``output_file``): the SPEAD packets exactly as sent, back to back, no
file header: the descriptor heap's packet, then every data packet of every heap of
every substream in send order, then (after a clean stop) the stop heap's packet.
Each packet delimits itself (8-byte header with the item count, 8-byte item
pointers, then ``payload length`` (item 0x4) bytes), so ``heaps.split_packets``
walks the file, and spead2 reads it directly (``spead2.recv.Stream.add_buffer_reader``
on the file's bytes). Heap cnts repeat across substreams: a reader that reassembles
heaps should key them by (heap cnt, frequency).
"""

from __future__ import annotations

import ipaddress
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from voltstream.errors import ConfigError, VoltstreamError
from voltstream.fengine.heaps import (
    HeapLayout,
    OutputHeap,
    encode_descriptor_heap,
    encode_heap,
    encode_stop_heap,
    fengine_descriptors,
    heap_counter,
    split_packets,
)
from voltstream.fengine.packets import PacketBatch, PacketFormat, release_batches

__all__ = ["HeapOutput", "OutputCounters", "parse_destinations", "read_packet_file"]


def parse_destinations(spec: Any) -> list[str]:
    """``HOST:PORT`` destinations from a comma-separated string or a list of them.

    ``A.B.C.D+N:PORT`` expands to the N+1 consecutive IPv4 addresses from A.B.C.D
    (MeerKAT's notation for a range of multicast groups); ``HOST:PORT+N`` to N+1
    consecutive ports (as ``--listen`` takes them: several antennas on loopback).
    """
    items = [spec] if isinstance(spec, str) else list(spec or [])
    out: list[str] = []
    for item in items:
        for text in str(item).split(","):
            text = text.strip()
            if not text:
                continue
            host, sep, port = text.rpartition(":")
            first_port, plus, more = port.partition("+")
            if plus and more.isdigit() and first_port.isdigit() and "+" not in host:
                last = int(first_port) + int(more)
                if last > 65535:
                    raise ConfigError(f"destination {text!r}: the ports run past 65535")
                ports = range(int(first_port), last + 1)
                out.extend(parse_destinations([f"{host}:{p}" for p in ports]))
                continue
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError(
                    f"destination {text!r} is not HOST:PORT (e.g. 239.10.0.1:7148, "
                    "127.0.0.1:7149, or 239.10.0.1+3:7148 for four groups)"
                )
            base, plus, count = host.partition("+")
            if not plus:
                out.append(f"{host}:{int(port)}")
                continue
            try:
                first = ipaddress.IPv4Address(base)
                n = int(count)
            except ValueError:
                raise ConfigError(
                    f"destination {text!r}: A.B.C.D+N:PORT needs an IPv4 address and a count"
                ) from None
            if n < 0 or int(first) + n > int(ipaddress.IPv4Address("255.255.255.255")):
                raise ConfigError(f"destination {text!r}: the range runs past 255.255.255.255")
            out.extend(f"{ipaddress.IPv4Address(int(first) + k)}:{int(port)}" for k in range(n + 1))
    return out


def read_packet_file(path: str | os.PathLike[str]) -> list[bytes]:
    """The packets of an F-engine output file, in order."""
    return list(split_packets(Path(path).read_bytes()))


@dataclass
class OutputCounters:
    """What the output did; heaps are data heaps (descriptor and stop heaps apart)."""

    heaps_sent: int = 0
    packets_sent: int = 0
    bytes_sent: int = 0
    descriptor_heaps_sent: int = 0
    stop_heaps_sent: int = 0
    send_errors: int = 0
    last_error: str = ""
    heaps_written: int = 0
    bytes_written: int = 0
    send_seconds: float = 0.0
    heaps_per_destination: list[int] = field(default_factory=list)


class HeapOutput:
    """Sends output heaps to one destination per substream and/or writes them to a file.

    ``dests`` needs one ``HOST:PORT`` per substream (or may be empty with a file).
    ``submit`` queues the heaps of a block (OutputHeaps, or PacketBatches that an
    engine laid out as packets itself; their buffers go back once sent); ``close``
    drains the queue, sends the stop heaps and closes the file. Errors of the send
    thread surface on the next ``submit`` or on ``close``; a refused or failed send
    is counted and the heap dropped, since one absent receiver must not stop the F-engine.
    """

    def __init__(
        self,
        layout: HeapLayout,
        dests: Any = (),
        *,
        rate_gbps: float = 0.0,
        packet_payload: int = 8192,
        n_fengs: int = 1,
        output_file: str | Path | None = None,
        descriptor_interval: int = 1024,
        threaded: bool = True,
        queue_blocks: int = 4,
    ) -> None:
        self.layout = layout
        self.dests = parse_destinations(dests)
        if self.dests and len(self.dests) != layout.n_substreams:
            raise ConfigError(
                f"{len(self.dests)} destinations for {layout.n_substreams} substreams: give one "
                "HOST:PORT per substream (heap cnts repeat across substreams, so two cannot "
                "share a destination), e.g. --dest 239.10.0.1+3:7148 for 4 substreams"
            )
        if not self.dests and output_file is None:
            raise ConfigError("the F-engine output needs --dest HOST:PORT,... or --output-file")
        if not rate_gbps >= 0:
            raise ConfigError(f"--rate {rate_gbps}: give a rate in Gb/s >= 0 (0 = unpaced)")
        if int(descriptor_interval) < 1:
            raise ConfigError("descriptor_interval must be at least 1 heap")
        self.rate_gbps = float(rate_gbps)
        payload = layout.payload_bytes
        self.packet_payload = min(int(packet_payload), payload)
        if self.packet_payload < 1 or payload % self.packet_payload:
            raise ConfigError(
                f"--packet-payload {packet_payload} B does not divide the heap payload "
                f"{payload} B: give a power of two (MeerKAT uses 8192 with jumbo frames)"
            )
        if self.packet_payload + 72 > 65507:
            raise ConfigError(f"--packet-payload {packet_payload} B is larger than a UDP datagram")
        self.n_fengs = int(n_fengs)
        self.descriptor_interval = int(descriptor_interval)
        self.output_file = None if output_file is None else Path(output_file)
        self.counters = OutputCounters(heaps_per_destination=[0] * len(self.dests))
        self._descriptors = encode_descriptor_heap(fengine_descriptors(layout))
        self._since_descriptors = [0] * len(self.dests)
        self._refused = [0] * len(self.dests)  # each sender's refusals seen so far
        self._senders: list = []
        self._file: BinaryIO | None = None
        self._threaded = bool(threaded)
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, int(queue_blocks)))
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._started = False
        self._closed = False

    # -- life cycle ---------------------------------------------------------------
    def start(self) -> HeapOutput:
        if self._started:
            return self
        from voltstream import _core

        self._senders = [_core.Sender(d) for d in self.dests]
        if self.output_file is not None:
            try:
                self._file = open(self.output_file, "wb")  # noqa: SIM115 - closed in close()
            except OSError as e:
                raise ConfigError(f"cannot write {self.output_file}: {e.strerror}") from None
            self._write(self._descriptors)
        for i in range(len(self._senders)):
            self._send_descriptors(i)
        self._started = True
        if self._threaded:
            self._thread = threading.Thread(target=self._run, name="fengine-output", daemon=True)
            self._thread.start()
        return self

    def submit(self, heaps: list) -> None:
        """Sends (or queues for the send thread) the heaps of one block, in order:
        OutputHeaps and/or PacketBatches."""
        if not self._started:
            self.start()
        try:
            self._raise_pending()
        except BaseException:
            release_batches(heaps)
            raise
        if not heaps:
            return
        if self._threaded:
            self._queue.put(list(heaps))
        else:
            self._emit(heaps)

    def close(self, send_stop: bool = True) -> None:
        """Drains queued heaps, ends each stream with a stop heap, closes the file."""
        if self._closed or not self._started:
            self._closed = True
            return
        self._closed = True
        try:
            if self._thread is not None:
                self._queue.put(None)
                self._thread.join()
            if send_stop and self._error is None:
                stop = encode_stop_heap()
                for i in range(len(self._senders)):
                    if self._send(i, stop):
                        self.counters.stop_heaps_sent += 1
                self._write(stop)
        finally:
            if self._file is not None:
                f, self._file = self._file, None
                try:
                    f.close()  # flushes the last buffered bytes: a full disk shows here
                except OSError as e:
                    if self._error is None:
                        self._error = ConfigError(
                            f"writing {self.output_file} failed: {e.strerror}"
                        )
        self._raise_pending()

    def __enter__(self) -> HeapOutput:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close(send_stop=exc[0] is None)

    # -- work ------------------------------------------------------------------------
    def _raise_pending(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is not None:
                release_batches(item)  # keep draining so submit never blocks on a dead thread
                continue
            try:
                self._emit(item)
            except BaseException as e:  # surfaced to the caller on submit/close
                self._error = e

    def _emit(self, items: list) -> None:
        """Sends and writes OutputHeaps and PacketBatches, in order; batches go back
        to their pool once done with, whatever happens."""
        try:
            for item in items:
                if isinstance(item, PacketBatch):
                    self._emit_batch(item)
                else:
                    self._emit_heap(item)
        finally:
            release_batches(items)

    def _emit_heap(self, heap: OutputHeap) -> None:
        sph = self.layout.samples_per_heap
        cnt = heap_counter(heap.timestamp, sph, heap.feng_id, self.n_fengs)
        packets = encode_heap(heap, cnt, self.packet_payload)
        if self._file is not None:
            self._write(packets)
            self.counters.heaps_written += 1
        self._deliver(int(heap.substream), packets)

    def _emit_batch(self, batch: PacketBatch) -> None:
        """A block of heaps already laid out as packets: one write for the file, one
        send per heap, no copy of the payload."""
        if self._file is not None:
            self._write(batch.packets)
            self.counters.heaps_written += batch.nheaps
        for i in range(len(batch.slots)):
            for sub in range(batch.fmt.layout.n_substreams):
                self._deliver(sub, batch.heap_packets(i, sub))

    def _deliver(self, sub: int, packets: np.ndarray) -> None:
        """One heap's packets to its substream's destination (descriptors first when due)."""
        if sub < len(self._senders):
            if self._since_descriptors[sub] >= self.descriptor_interval:
                self._send_descriptors(sub)
            if self._send(sub, packets):
                self.counters.heaps_sent += 1
                self.counters.heaps_per_destination[sub] += 1
                self._since_descriptors[sub] += 1

    def packet_format(self, feng_id: int = 0) -> PacketFormat:
        """How this output cuts heaps into packets, for an engine that lays its heaps
        out as packets itself (``GpuFEngine.emit_packets``)."""
        return PacketFormat(self.layout, self.packet_payload, int(feng_id), self.n_fengs)

    def _send_descriptors(self, sub: int) -> None:
        if self._send(sub, self._descriptors):
            self.counters.descriptor_heaps_sent += 1
        self._since_descriptors[sub] = 0

    def _send(self, sub: int, packets: np.ndarray) -> bool:
        t0 = time.perf_counter()
        try:
            r = self._senders[sub].send(packets, packets.shape[1], self.rate_gbps)
        except VoltstreamError as e:  # refused (no receiver yet), no route...
            self.counters.send_errors += 1
            self.counters.last_error = str(e)
            return False
        finally:
            self.counters.send_seconds += time.perf_counter() - t0
        self.counters.packets_sent += int(r["packets"])
        self.counters.bytes_sent += int(r["bytes"])
        refused = int(r.get("refused", 0))  # the sender's total: ICMP port unreachable
        if refused > self._refused[sub]:  # packets lost while nobody listened there
            self.counters.send_errors += refused - self._refused[sub]
            self.counters.last_error = (f"{self.dests[sub]} refused packets "
                                        f"{refused} times (is a receiver listening?)")  # fmt: skip
            self._refused[sub] = refused
        return True

    def _write(self, packets: np.ndarray) -> None:
        if self._file is None:
            return
        try:
            self._file.write(np.ascontiguousarray(packets).data.cast("B"))
        except OSError as e:
            raise ConfigError(f"writing {self.output_file} failed: {e.strerror}") from None
        self.counters.bytes_written += packets.size
