"""The chunk timeline: a capture's chunks, as handles, put in time order for a consumer.

Every consumer of a live capture (the DADA writer, the GPU fold, the F-engine) needs
the same things done to the engine's chunks before it can use them, and none of them
needs the samples touched to do it:

- chunks of several capture threads (each holding its own streams) grouped by chunk id,
  without a copy: a :class:`Block` keeps the thread chunks and says where each
  stream's bytes are (:meth:`Block.parts`); or, when the threads take turns by chunk
  id (``chunk_stride`` n: thread ``c % n`` alone holds chunk ``c``, every stream),
  their chunks interleaved in id order;
- a thread that is more than ``hold_chunks`` chunk ids behind the newest chunk of the
  others AND has delivered nothing for ``hold_s`` seconds (its streams fell silent,
  or its share of the packets stopped) holds nobody's blocks longer: they go out
  without its part (absent, so flagged), its packets counted in ``silent_packets``,
  and a chunk of it that comes after its block went out is released and counted in
  ``late_chunks``. Both, because either alone misjudges: a slow stream delivers
  rarely but is not behind (ids), and a thread whose sender runs a burst behind the
  others is behind but still delivering (time). One bound more: a thread behind by
  more than ``hold_chunks`` that still delivers is waited for only while the blocks
  held for it take at most half of each other thread's pool (``pool_chunks``).
  Past that the others' pools would run dry and the capture would drop whole chunks
  of every stream; the blocks go out without the late thread's part instead, its
  packets counted where they fall (silent, then ``late_chunks``): the loss is the
  late stream's, and counted as such, not everyone's;
- chunk ids the engine skipped (no packet of any stream arrived there) turned into a
  :class:`Gap` of that many packets, up to the resync bound; a longer jump is a
  discontinuity, counted;
- the stream begins at its first packet (chunk boundaries sit at multiples of
  ``packets_per_chunk`` on the format's index axis, so the first chunk usually starts
  before it: ``Block.first``) and ends at its last (the unfilled tail of the last chunk
  was never sent: ``Block.stop``). For that, the newest block is held back until the
  next one arrives or the capture ends.

A block's chunks go back to the pool when the consumer calls :meth:`Block.release`:
the GPU consumer does that once its copy from the chunk has completed (pipeline/gpu.py),
a CPU consumer once it has converted the bytes.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Block", "ChunkTimeline", "Gap"]


@dataclass
class Gap:
    """``packets`` packet times (of every stream) in which nothing arrived."""

    packets: int


@dataclass
class Block:
    """One chunk id of every stream: the thread chunks holding it, and what is present.

    ``present`` is (nstreams, packets_per_chunk) bool in the capture's stream order;
    packets ``first`` to ``stop`` are the stream's (outside them: before its first or
    after its last packet, never sent).
    """

    chunk_id: int
    chunks: list
    present: np.ndarray
    first: int = 0
    stop: int = 0
    complete: bool = True  # every packet of every stream present
    _released: bool = field(default=False, repr=False)

    @property
    def packets(self) -> int:
        return self.stop - self.first

    def parts(self, payload_len: int) -> list[tuple[int, int, int]]:
        """(host address, nbytes, byte offset in a [stream][packet][payload] buffer of
        the whole chunk) for each run of consecutive streams of each thread chunk."""
        out = []
        for c in self.chunks:
            per_stream = c.packets_per_chunk * payload_len
            addr, streams = c.address, c.streams
            i = 0
            while i < len(streams):
                j = i + 1
                while j < len(streams) and streams[j] == streams[j - 1] + 1:
                    j += 1
                out.append((addr + i * per_stream, (j - i) * per_stream, streams[i] * per_stream))
                i = j
        return out

    def array(self, nstreams: int, payload_len: int) -> np.ndarray:
        """The chunk's bytes as (nstreams, packets_per_chunk, payload) uint8: a view of
        the one thread chunk's memory when it holds every stream, else a copy. By
        address, as :meth:`rows`, not a buffer export: an export refuses
        :meth:`release` while anything still holds the view, and a frame that saw it
        can outlive its call (one a sampling profiler holds: Dask's samples the
        running task's stack; a traceback's). So nothing of it may be read after
        :meth:`release`."""
        ppc = self.present.shape[1]

        def view(c: Any) -> np.ndarray:
            n = len(c.streams) * ppc * payload_len
            buf = (ctypes.c_uint8 * n).from_address(c.address)
            return np.frombuffer(buf, np.uint8).reshape(len(c.streams), ppc, payload_len)

        if len(self.chunks) == 1 and len(self.chunks[0].streams) == nstreams:
            return view(self.chunks[0])
        out = np.zeros((nstreams, ppc, payload_len), np.uint8)
        for c in self.chunks:
            out[c.streams] = view(c)
        return out

    def rows(self, payload_len: int) -> np.ndarray:
        """(nstreams, packets_per_chunk * payload) uint8 rows over the one thread chunk's
        memory, by address: no export, so nothing stops :meth:`release`; the view must
        not be read after it (a copy from it must have completed)."""
        (c,) = self.chunks
        ppc = self.present.shape[1]
        row = ppc * payload_len
        buf = (ctypes.c_uint8 * (row * len(c.streams))).from_address(c.address)
        return np.frombuffer(buf, np.uint8).reshape(len(c.streams), row)

    def valid_packets(self) -> np.ndarray | None:
        """Per kept packet time, whether every stream has it; None when all do."""
        if self.complete:
            return None
        ok = np.asarray(self.present[:, self.first : self.stop].all(axis=0))
        return None if ok.all() else ok

    def release(self) -> None:
        if not self._released:
            self._released = True
            for c in self.chunks:
                c.release()


def _present(chunk: Any, ppc: int) -> tuple[np.ndarray, bool]:
    nst = len(chunk.streams)
    if chunk.present_count == nst * ppc:
        return np.ones((nst, ppc), bool), True
    return np.frombuffer(chunk.present, np.uint8).reshape(nst, ppc) != 0, False


class ChunkTimeline:
    """Chunks in (from any capture thread, each thread's in id order), blocks and gaps
    out, in time order, through ``emit``. See the module docstring."""

    def __init__(
        self,
        nstreams: int,
        packets_per_chunk: int,
        emit: Callable[[Block | Gap], None],
        nthreads: int = 1,
        resync_chunks: int = 64,
        chunk_stride: int = 1,
        thread_streams: list[list[int]] | None = None,
        hold_chunks: int = 4,
        hold_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        pool_chunks: int | None = None,
    ) -> None:
        self.nstreams, self.ppc, self.emit = nstreams, packets_per_chunk, emit
        self.resync_chunks = resync_chunks
        self.nthreads = nthreads
        self.stride = chunk_stride
        # In chunk ids: each thread of a stride owns one id in ``stride``.
        self.hold_ids = max(1, hold_chunks) * chunk_stride
        self.hold_s, self.clock = hold_s, clock
        # Pending blocks beyond which a late thread is not waited for (module docstring):
        # each pending block holds a chunk of every other thread (of one in ``stride``).
        self.max_pending = (
            None if pool_chunks is None else max(self.hold_ids, chunk_stride * (pool_chunks // 2))
        )
        self.last_time = [clock()] * nthreads  # when each thread last delivered
        # The streams of each thread's chunks (threads owning streams): what a silent
        # thread's absence leaves out of a block.
        self.thread_streams = thread_streams or [list(range(nstreams))] * nthreads
        self.pending: dict[int, Block] = {}  # chunk id -> block still collecting threads
        self.last_seen = [-1] * nthreads  # highest chunk id seen per thread (-1: none yet)
        self.start_id = -1  # the first chunk id any thread delivered
        self.out_id = -1  # highest chunk id passed on (multi-thread)
        self.late_chunks = 0  # chunks that came after their block went out without them
        self.late_chunk_packets = 0  # the packets those chunks held (the engine's received)
        self.silent_packets = np.zeros(nstreams, np.int64)  # per stream, see module doc
        self.held: Block | None = None
        self.started = False
        self.discontinuities = 0
        self.blocks = 0

    def add(self, chunk: Any) -> None:
        cid, t = chunk.chunk_id, getattr(chunk, "thread", 0)
        present, complete = _present(chunk, self.ppc)
        if self.nthreads == 1:
            self._ordered(Block(cid, [chunk], present, 0, self.ppc, complete))
            return
        if self.start_id < 0:
            self.start_id = cid
        self.last_time[t] = self.clock()
        if cid <= self.out_id:  # its block went out without it (its thread was silent)
            self.late_chunks += 1
            self.late_chunk_packets += int(chunk.present_count)
            chunk.release()
            return
        blk = self.pending.get(cid)
        if blk is None:
            blk = Block(cid, [], np.zeros((self.nstreams, self.ppc), bool), 0, self.ppc)
            self.pending[cid] = blk
        blk.chunks.append(chunk)
        blk.present[chunk.streams] = present
        self.last_seen[t] = max(self.last_seen[t], cid)
        self._release_ready()

    def _release_ready(self) -> None:
        """Passes on, in id order, the pending blocks no live thread can still add to:
        thread t has passed every id up to ``last_seen[t] + stride - 1`` (with the
        stride, the ids before its next own one belong to the others); a thread more
        than ``hold_ids`` behind the newest pending block is not waited for once it has
        been quiet ``hold_s`` or the pending blocks pass ``max_pending``."""
        newest, now = max(self.pending, default=-1), self.clock()
        crowded = self.max_pending is not None and len(self.pending) > self.max_pending
        live, silent = [], []
        for t in range(self.nthreads):
            passed = self._passed(t)
            recent = now - self.last_time[t] <= self.hold_s and not crowded
            if newest - passed <= self.hold_ids or recent:
                live.append(passed)
            else:
                silent.append(t)
        done = min(live) if live else max(self.pending, default=-1)
        for k in sorted(k for k in self.pending if k <= done):
            self._ordered(self._close(self.pending.pop(k), silent))

    def poll(self) -> None:
        """Called while no chunk arrives: passes on blocks only a silent thread holds."""
        if self.pending:
            self._release_ready()

    def _passed(self, t: int) -> int:
        """The last chunk id thread t can no longer add to (a thread yet to deliver has
        passed nothing of this timeline)."""
        seen = self.last_seen[t]
        return seen + self.stride - 1 if seen >= 0 else self.start_id - 1

    def _close(self, blk: Block, silent: list[int] = []) -> Block:  # noqa: B006 (read only)
        blk.complete = bool(blk.present.all())
        if self.stride == 1:
            # A silent thread's assembler counts nothing while nothing arrives: its
            # streams' packets of a block that went out without it are counted here.
            have = {t for c in blk.chunks for t in [getattr(c, "thread", 0)]}
            for t in silent:
                if t not in have:
                    self.silent_packets[self.thread_streams[t]] += self.ppc
        self.out_id = max(self.out_id, blk.chunk_id)
        return blk

    def _ordered(self, blk: Block) -> None:
        if not self.started:
            self.started = True
            seen = np.asarray(blk.present.any(axis=0))
            blk.first = int(np.argmax(seen)) if seen.any() else 0
            if blk.first:
                blk.complete = False
        prev, self.held = self.held, blk
        if prev is None:
            return
        self._out(prev)
        gap = blk.chunk_id - prev.chunk_id - 1
        if 0 < gap <= self.resync_chunks:
            self.emit(Gap(gap * self.ppc))
        elif gap != 0:
            self.discontinuities += 1

    def _out(self, blk: Block) -> None:
        self.blocks += 1
        self.emit(blk)

    def finish(self) -> None:
        """The capture ended: emit what is pending, the last block cut at its last packet.
        A thread that never delivered or passed a pending block was silent there."""
        for k in sorted(self.pending):
            silent = [t for t in range(self.nthreads) if self._passed(t) < k]
            self._ordered(self._close(self.pending.pop(k), silent))
        blk, self.held = self.held, None
        if blk is None:
            return
        seen = np.asarray(blk.present.any(axis=0))
        if not seen.any():
            blk.release()
            return
        blk.stop = int(self.ppc - np.argmax(seen[::-1]))
        if blk.stop < self.ppc:
            blk.complete = False
        self._out(blk)

    def release_all(self) -> None:
        """Gives back every chunk still held (after an error)."""
        for blk in [*self.pending.values(), *([self.held] if self.held else [])]:
            blk.release()
        self.pending.clear()
        self.held = None
