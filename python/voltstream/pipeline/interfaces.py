"""The pipeline's interfaces, as ``typing.Protocol``: what each part must offer,
checked by mypy where the parts are joined, never by inheritance.

    ChunkSource ──chunks──► ChunkTimeline ──Block | Gap──► Consumer
                                                             └─► StageRunner ─► ChunkStage
    BlockSource ──(samples, valid) blocks──► the file and live folds

- ``ChunkSource``: a capture (``_core.Capture``); ``CaptureRun`` drives it.
- ``Consumer``: what ``CaptureRun`` hands the timeline's items to (``TfpSink``,
  ``CountingSink``, ``StageRunner``). ``attach(cap)`` and ``close()`` are optional;
  ``CaptureRun`` calls them when they exist.
- ``ChunkStage``: a live product as ``StageRunner`` drives it (the fold through
  ``ChunkFeed``, the F-engine's ``FEngineFeed``).
- ``GpuStage``: a GPU product fed straight from capture chunks (``GpuFolder``).
- ``BlockSource``: a reader of sample blocks (DADA, VDIF, the live capture reader).

The F-engine's own interface (``FEngine``) is in ``voltstream.fengine.engines``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from voltstream.capture.timeline import Block, Gap
    from voltstream.observation import Observation

__all__ = ["BlockSource", "ChunkSource", "ChunkStage", "Consumer", "GpuStage"]


class ChunkSource(Protocol):
    """A started-on-demand capture that hands out chunks of its page-locked pool."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def next_chunk(self, timeout_s: float) -> Any:
        """The next complete chunk, or None after ``timeout_s`` without one."""
        ...

    def stats(self) -> dict[str, Any]: ...

    def chunk_buffers(self) -> list[tuple[int, int]]:
        """(address, length) of every chunk of the pool, fixed for the capture's life."""
        ...

    @property
    def packets_per_chunk(self) -> int:
        """Packet slots per stream in each chunk."""
        ...


class Consumer(Protocol):
    """Takes the timeline's items in time order; each Block is released by it."""

    def take(self, item: Block | Gap) -> None: ...

    def poll(self) -> None:
        """Called between chunks: give back what completed, update the status line."""
        ...

    def finish(self) -> None:
        """The capture ended: complete what is in flight."""
        ...


class ChunkStage(Protocol):
    """A live product fed the timeline's items by ``StageRunner``."""

    #: Whether it copies straight from the capture's pool (then page-locked for it).
    pinned: bool

    def feed(self, item: Block | Gap) -> Any:
        """Takes one item; returns the CUDA event after which a block may go back to
        the pool, or None when the stage released it itself (or for a gap)."""
        ...

    def finish(self) -> None:
        """The capture ended: complete the work in flight."""
        ...


class GpuStage(Protocol):
    """A GPU product fed from capture chunks without host copies."""

    def feed_block(self, parts: Any, n: int, skip: int = 0, valid: np.ndarray | None = None) -> Any:
        """Copies ``n`` samples from ``parts`` (address, length, offset) runs; returns
        the CUDA event after which the chunk may go back to the pool."""
        ...

    def feed_gap(self, n: int) -> None:
        """``n`` samples that never arrived."""
        ...

    def synchronize(self) -> None: ...


class BlockSource(Protocol):
    """Sample blocks ``(n, nchan, npol[, 2])``, with a validity mask where the source
    knows of lost samples, described by ``obs``."""

    @property
    def obs(self) -> Observation: ...

    def read_blocks(self, nsamp: int) -> Iterator[np.ndarray | tuple[np.ndarray, np.ndarray]]: ...
