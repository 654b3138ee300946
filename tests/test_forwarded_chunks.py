"""A recording's written chunks as a chunk source (record/run.py ForwardedChunks): a
consumer of it (`fold --listen --record ... --device gpu`) is driven by the capture loop
and its status line exactly as one of a capture, so the source answers every call they
make of a capture. The status line's call of ``free_chunks`` was missing: the GPU
record-and-fold run died on its first status tick (found on the H200, session 14)."""

from __future__ import annotations

from types import SimpleNamespace

from voltstream.record.run import ForwardedChunks

#: What CaptureRun (capture/run.py) and the GPU status line (pipeline/gpu.py
#: GpuStatus.tick) call of a chunk source.
SOURCE_CALLS = ("start", "stop", "next_chunk", "stats", "chunk_buffers", "free_chunks")


class _Capture:
    """The calls ForwardedChunks passes on, each answering its own name."""

    nstreams, packets_per_chunk, threads, slot_len = 1, 64, 1, 8192

    def stats(self):
        return {"totals": {}}

    def chunk_buffers(self):
        return [(0, 1)]

    def free_chunks(self):
        return 7


def test_a_recordings_chunks_answer_every_call_of_a_capture_source():
    cap = _Capture()
    src = ForwardedChunks(SimpleNamespace(cap=cap))  # type: ignore[arg-type]
    assert all(callable(getattr(src, name, None)) for name in SOURCE_CALLS)
    assert src.free_chunks() == 7 and src.chunk_buffers() == [(0, 1)]
    assert (src.nstreams, src.packets_per_chunk, src.slot_len) == (1, 64, 8192)
