"""spead2's chunk stream as a drain-rate baseline for bench/capture.py.

spead2 assembles heaps into caller-owned chunks (`spead2.recv.ChunkRingStream`), asking a
placement callback, written in C, where each heap goes. That is the spead2 feature that
does what voltstream's capture does, so it is the fair baseline for our drain rate with
assembly (the heap stream builds one Python-visible heap object per packet instead).

The callback: spead2 calls a C function `void place(void *data, size_t size)` per heap,
given as a `scipy.LowLevelCallable`. We compile a ten-line C file with the system C
compiler (`cc`) at bench time and load it with ctypes; scipy is already a voltstream
dependency, so nothing else is installed. (spead2's other documented route, numba, would
add numba + llvmlite, about 60 MB of wheels, to the environment.)

Fairness with voltstream's drain run: the same 8192-byte UDP payloads (SPEAD-64-48, five
immediate items = 48 bytes of header, 8144 bytes of heap payload, one packet per heap),
queued by the same `_core.Sender` (sendmmsg + UDP GSO) into a socket with the same
SO_RCVBUFFORCE size before any reader exists, chunks of the same 64 packets, a window of 2
chunks (`max_chunks`), 128 pre-faulted chunks in the free ring, one receive thread, and a
Python consumer thread returning each chunk to the free ring. Completion is detected the
same way (polling the receiver's packet counter every ~0.5 ms).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
import threading
import time

import numpy as np

SPEAD_HEADER = 48  # 8-byte header + 5 item pointers of 8 bytes
TIMESTAMP_ID = 0x1600
HEAPS_PER_CHUNK = 64
NCHUNKS = 128
WINDOW = 2

PLACE_C = r"""
#include <stddef.h>
#include <stdint.h>

/* Layout of spead2::recv::chunk_place_data (spead2 >= 4.0, see spead2.recv.numba). */
struct place_data {
    const uint8_t *packet;
    size_t packet_size;
    const int64_t *items; /* values of the requested items, in order; -1 if absent */
    int64_t chunk_id;     /* -1 on entry: left so, the heap is rejected and counted */
    size_t heap_index;
    size_t heap_offset;
    uint64_t *batch_stats;
    uint8_t *extra;
    size_t extra_offset;
    size_t extra_size;
};

/* items = [timestamp 0x1600, heap length]; the timestamp counts heaps. */
void vsb_place(void *data, size_t size)
{
    struct place_data *p = (struct place_data *)data;
    (void)size;
    int64_t ts = p->items[0];
    if (ts < 0 || p->items[1] != HEAP_BYTES)
        return;
    p->chunk_id = ts / HEAPS_PER_CHUNK;
    p->heap_index = (size_t)(ts % HEAPS_PER_CHUNK);
    p->heap_offset = p->heap_index * (size_t)HEAP_BYTES;
}
"""


def build_place_callback(heap_bytes: int):
    """Compiles the placement function; returns (LowLevelCallable, keep-alive objects)."""
    import scipy

    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise RuntimeError("no C compiler (cc) to build spead2's placement callback")
    tmp = tempfile.mkdtemp(prefix="vsb_spead2_place_")
    src, lib = os.path.join(tmp, "place.c"), os.path.join(tmp, "place.so")
    with open(src, "w") as f:
        f.write(PLACE_C)
    cmd = [cc, "-O2", "-shared", "-fPIC", f"-DHEAP_BYTES={heap_bytes}"]
    cmd += [f"-DHEAPS_PER_CHUNK={HEAPS_PER_CHUNK}", "-o", lib, src]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"cc failed on the placement callback: {r.stderr.strip()[-300:]}")
    dll = ctypes.CDLL(lib)
    fn = dll.vsb_place
    fn.restype, fn.argtypes = None, [ctypes.c_void_p, ctypes.c_size_t]
    callback = scipy.LowLevelCallable(fn, signature="void (void *, size_t)")
    shutil.rmtree(tmp, ignore_errors=True)  # the library stays mapped
    return callback, dll


def spead_packets(n: int, packet: int, first: int = 0) -> np.ndarray:
    """n single-packet SPEAD-64-48 heaps of `packet` bytes; heap counter and timestamp = i."""
    payload = packet - SPEAD_HEADER
    idx = np.arange(first, first + n, dtype=np.uint64)
    imm = np.uint64(1 << 63)

    def item(item_id: int, value) -> np.ndarray:
        v = imm | (np.uint64(item_id) << np.uint64(48)) | np.asarray(value, np.uint64)
        return np.broadcast_to(v, (n,))

    buf = np.empty((n, packet), np.uint8)
    words = [
        np.full(n, 0x5304_0206_0000_0005, np.uint64),  # magic, version 4, 64-48, 5 items
        item(0x0001, idx + np.uint64(1)),  # heap counter (0 is avoided)
        item(0x0002, payload),  # heap size
        item(0x0003, 0),  # heap offset
        item(0x0004, payload),  # packet payload length
        item(TIMESTAMP_ID, idx),
    ]
    header = np.stack(words, axis=1).astype(">u8")  # network byte order
    buf[:, :SPEAD_HEADER] = header.view(np.uint8).reshape(n, SPEAD_HEADER)
    buf[:, SPEAD_HEADER:] = (np.arange(payload, dtype=np.uint32) % 251).astype(np.uint8)
    return buf


def fill_spead(sender_cls, dest: str, n: int, packet: int) -> int:
    """Queues n SPEAD packets at dest with voltstream's GSO sender (as bench/capture.py's fill)."""
    sent, tx, step = 0, sender_cls(dest), 2048
    while sent < n:
        k = min(step, n - sent)
        sent += tx.send(spead_packets(k, packet, sent), packet, 0)["packets"]
    return sent


def drain_chunk_stream(spead2, sender_cls, rx_sock, n: int, packet: int, cpu_seconds):
    """Fills rx_sock with n packets, then times spead2's chunk stream emptying it into chunks."""
    import spead2.recv

    heap_bytes = packet - SPEAD_HEADER
    place, keep = build_place_callback(heap_bytes)
    host, port = rx_sock.getsockname()
    queued = fill_spead(sender_cls, f"{host}:{port}", n, packet)
    time.sleep(0.05)

    chunk_config = spead2.recv.ChunkStreamConfig(
        items=[TIMESTAMP_ID, spead2.HEAP_LENGTH_ID], max_chunks=WINDOW, place=place
    )
    data_ring = spead2.recv.ChunkRingbuffer(NCHUNKS)
    free_ring = spead2.recv.ChunkRingbuffer(NCHUNKS)
    pool = spead2.ThreadPool(1)
    stream = spead2.recv.ChunkRingStream(
        pool, spead2.recv.StreamConfig(max_heaps=4), chunk_config, data_ring, free_ring
    )
    for _ in range(NCHUNKS):
        # np.ones, not np.zeros: every page is faulted in now, as voltstream pre-faults its
        # chunk memory (MAP_POPULATE), so neither pays page faults while timed.
        stream.add_free_chunk(
            spead2.recv.Chunk(
                present=np.ones(HEAPS_PER_CHUNK, np.uint8),
                data=np.ones(HEAPS_PER_CHUNK * heap_bytes, np.uint8),
            )
        )
    consumed = {"chunks": 0, "heaps": 0}

    def consume():
        for chunk in data_ring:  # ends when the stream stops
            consumed["chunks"] += 1
            consumed["heaps"] += int(np.count_nonzero(chunk.present))
            try:
                stream.add_free_chunk(chunk)
            except spead2.Stopped:  # chunks flushed by stop() have no stream to go back to
                pass

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    c0, t0 = cpu_seconds(), time.perf_counter()
    stream.add_udp_reader(rx_sock, max_size=packet + 64)
    while stream.stats["packets"] < queued and time.perf_counter() - t0 < 30:
        time.sleep(0.0005)
    secs, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    stream.stop()
    consumer.join(timeout=10)
    stats = dict(stream.stats.items())
    del keep
    return queued, secs, cpu, stats, consumed
