"""Live folding: a capture running in a background thread, seen by the fold
pipeline as a reader (`.obs`, `.read_blocks`), so `voltstream fold --listen`
captures and folds in one process with the same code as a file.

The queue between the two is bounded. When the fold falls behind, the capture
thread waits on the queue, the engine's chunk ring fills, and the engine drops
whole chunks and counts them (`dropped`): the capture itself never blocks and
nothing is lost silently.
"""

from __future__ import annotations

import queue
import threading

import numpy as np

from voltstream.formats import StreamFormat
from voltstream.observation import Observation

_END = object()


class LiveReader:
    """Captures `fmt` on `bind` for `duration_s` and yields (complex64 block, valid)."""

    def __init__(
        self,
        fmt: StreamFormat,
        bind: str,
        duration_s: float,
        obs: Observation,
        idle_timeout_s: float | None = None,
        max_queued_chunks: int = 64,
        engine: str = "auto",
    ):
        self.fmt, self.bind, self.obs = fmt, bind, obs
        self.duration_s, self.idle_timeout_s = duration_s, idle_timeout_s
        self.engine = engine
        self._queue: queue.Queue = queue.Queue(maxsize=max_queued_chunks)
        self.report = None
        self.error: BaseException | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="voltstream-capture", daemon=True)

    def start(self) -> None:
        """Binds and starts capturing; raises here if the capture cannot start."""
        self._thread.start()
        self._started.wait()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        from voltstream.pipeline.capture import run_capture

        try:
            self.report = run_capture(
                self.fmt,
                self.bind,
                self.duration_s,
                sink=lambda samples, valid: self._queue.put((samples, valid)),
                idle_timeout_s=self.idle_timeout_s,
                on_start=self._started.set,
                engine=self.engine,
            )
        except BaseException as e:  # handed to the reading thread
            self.error = e
        finally:
            self._started.set()
            self._queue.put(_END)

    def read_blocks(self, nsamp: int):
        """Yields (complex64 (n, nchan, npol), valid (n,)) blocks of `nsamp` samples
        (the last may be shorter) until the capture ends."""
        parts, valid_parts, have = [], [], 0
        while True:
            item = self._queue.get()
            if item is _END:
                break
            samples, valid = item
            parts.append(samples.astype(np.float32).view(np.complex64)[..., 0])
            valid_parts.append(valid)
            have += samples.shape[0]
            while have >= nsamp:
                block, vblock = np.concatenate(parts), np.concatenate(valid_parts)
                yield block[:nsamp], vblock[:nsamp]
                parts, valid_parts = [block[nsamp:]], [vblock[nsamp:]]
                have -= nsamp
        if have:
            yield np.concatenate(parts), np.concatenate(valid_parts)
        self._thread.join()
        if self.error is not None:
            raise self.error
