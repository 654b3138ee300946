"""A live cluster node's fold as a stage of the one live path: `run_capture` hands the
capture's chunk timeline to `StageRunner` (pipeline/gpu.py), which drives this stage
as it drives the one-host fold's (`ChunkFeed`). The node is that path plus a row sink.

Each item is placed on the observation's axis by its packet index (`NodeFold.place`:
before the start dropped, a late start on the FFT grid, what never came lost), then:

- GPU node: the block's runs in the capture's pool go to the engine as they lie
  (`GpuFolder.feed_block`; the pool is page-locked by the runner), and the block goes
  back to its pool when the copy's event completes; nothing is copied on the host;
- CPU node: the block becomes host samples as `TfpSink` makes them (pipeline/capture.py
  `block_samples`) and goes back at once;
- a gap: samples marked lost.

After each item, ``after()`` (the node's `NodeRun._rows_out`) sends the rows now whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from voltstream.capture.run import block_samples
from voltstream.capture.timeline import Block, Gap
from voltstream.formats import StreamFormat

__all__ = ["NodeStage", "PlacedFold"]


class PlacedFold(Protocol):
    """What the stage feeds: cluster/node.py `NodeFold` (named here, not imported:
    node.py imports this module)."""

    fold: Any  # its engine: ``device``, ``synchronize()``, ``busy_ms()`` (GPU)

    def feed(self, samples: np.ndarray, valid: np.ndarray, first: int) -> None: ...

    def feed_lost(self, n: int, first: int) -> None: ...

    def feed_block(self, parts: Any, n: int, first: int, first_packet: int,
                   valid: np.ndarray | None) -> Any: ...  # fmt: skip


class NodeStage:
    """A `ChunkStage` (pipeline/interfaces.py) over a node's `NodeFold`: ``fmt`` is the
    node's stream, ``start_packet`` the observation's first packet on its index axis."""

    def __init__(
        self, fold: PlacedFold, fmt: StreamFormat, start_packet: int, after: Callable[[], None]
    ) -> None:
        self.fold, self.fmt, self.start_packet, self.after = fold, fmt, start_packet, after
        #: The GPU engine copies straight from the capture's pool (page-locked for it).
        self.pinned = fold.fold.device == "gpu"
        self.busy_ms = getattr(fold.fold, "busy_ms", None)
        self.next_packet = 0  # where a gap begins: after the item before it
        self.samples_fed = 0
        self.lost_samples = 0

    def feed(self, item: Block | Gap) -> Any:
        spp = self.fmt.samples_per_packet
        if isinstance(item, Block):
            # The chunk's place on the format's packet index axis, whatever a
            # discontinuity (a resync) did to the timeline.
            first_packet = item.chunk_id * item.present.shape[1] + item.first
        else:
            first_packet = self.next_packet
        self.next_packet = first_packet + item.packets
        first, n = (first_packet - self.start_packet) * spp, item.packets * spp
        self.samples_fed += n
        event = None
        if isinstance(item, Gap):
            self.lost_samples += n
            self.fold.feed_lost(n, first)
        elif self.pinned:
            ok = item.valid_packets()
            valid = None if ok is None else np.repeat(ok, spp)
            if valid is not None:
                self.lost_samples += n - int(np.count_nonzero(valid))
            event = self.fold.feed_block(item.parts(self.fmt.payload_len), n, first,
                                         item.first, valid)  # fmt: skip
            if event is None:  # none of it folded (before the start): back at once
                item.release()
        else:
            samples, valid = block_samples(self.fmt, item)
            self.lost_samples += n - int(np.count_nonzero(valid))
            self.fold.feed(samples, valid, first)
        self.after()
        return event

    def finish(self) -> None:
        self.fold.fold.synchronize()

    def as_dict(self) -> dict:
        return {"samples_fed": self.samples_fed, "lost_samples": self.lost_samples}
