"""The host-to-GPU handoff (pipeline/gpu.py) and the chunk timeline (pipeline/timeline.py)
without a GPU: a stand-in stage copies each block's parts out of the capture's real
chunk memory (as cudaMemcpyAsync would), decodes them with the layout formula, and
hands back an event that completes only when the test says so; every copy, gap and
release is logged in order. Real captures on loopback feed it.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest

from loopback import free_bind, sender
from packed_ref import decode_ref
from voltstream.capture.config import CaptureSettings
from voltstream.capture.run import run_capture
from voltstream.capture.timeline import Block, ChunkTimeline, Gap
from voltstream.formats import make_format
from voltstream.pipeline import gpu
from voltstream.pipeline.gpu import Handoff, gpu_stage_runner
from voltstream.pipeline.live import LiveGpuRun, capture_to_gpu
from voltstream.testing import Drop, FaultPlan


class Event:
    """A stand-in CUDA event: done once the test (or a wait) completes it."""

    def __init__(self, log, name, polls_to_done=0):
        self.log, self.name, self.left = log, name, polls_to_done

    @property
    def done(self) -> bool:
        if self.left > 0:
            self.left -= 1
            return False
        self.log.append(("done", self.name))
        return True

    def synchronize(self) -> None:
        self.log.append(("wait", self.name))
        self.left = 0


class RecordingStage:
    """GpuFolder's stage interface, on the host: copies parts, decodes, logs."""

    def __init__(self, fmt, ppc, log, polls_to_done=0, delay_s=0.0, slot_len=None):
        self.fmt, self.ppc, self.log = fmt, ppc, log
        self.layout = fmt.chunk_layout(ppc, slot_len)
        self.buf = np.zeros(fmt.streams * ppc * (slot_len or fmt.payload_len), np.uint8)
        self.polls, self.delay = polls_to_done, delay_s
        self.samples: list[np.ndarray] = []
        self.valid: list[np.ndarray] = []
        self.nfed = 0

    def feed_block(self, parts, n, skip, valid):
        self.buf[:] = 0xAA  # stale bytes: absent packets must never matter
        for addr, nbytes, off in parts:
            ctypes.memmove(self.buf.ctypes.data + off, addr, nbytes)
        x = decode_ref(self.buf[skip:], self.layout, n)
        v = np.ones(n, bool) if valid is None else np.asarray(valid)
        x[~v] = 0
        self.samples.append(x)
        self.valid.append(v)
        self.nfed += 1
        self.log.append(("copy", self.nfed))
        if self.delay:
            time.sleep(self.delay)
        return Event(self.log, self.nfed, self.polls)

    def feed_gap(self, n):
        self.log.append(("gap", n))
        self.samples.append(np.zeros((n, self.fmt.nchan * self.fmt.npol), complex))
        self.valid.append(np.zeros(n, bool))

    def synchronize(self):
        self.log.append(("sync",))


class FakeBlock:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def release(self):
        self.log.append(("release", self.name))


def test_handoff_releases_in_order_only_after_each_copy_completes():
    log = []
    h = Handoff()
    evs = [Event(log, k, polls_to_done=p) for k, p in enumerate([2, 0, 0, 5])]
    for k, ev in enumerate(evs):
        h.hold(FakeBlock(log, k), ev)
    assert h.in_flight == 4 and h.max_in_flight == 4
    assert h.poll() == 0  # block 0's copy not done: nothing behind it goes either
    assert h.poll() == 0
    assert h.poll() == 3  # 0, 1, 2 done; 3 still copying
    assert [e for e in log if e[0] == "release"] == [("release", 0), ("release", 1),
                                                     ("release", 2)]  # fmt: skip
    h.drain()
    assert log[-2:] == [("wait", 3), ("release", 3)]
    assert h.held == h.released == 4 and h.in_flight == 0


class FakeChunk:
    """What the timeline reads of a `_core.Chunk`."""

    def __init__(self, cid, present, thread=0, streams=(0,), log=None):
        self.chunk_id, self.thread, self.streams = cid, thread, list(streams)
        self.present_arr = np.asarray(present, bool).reshape(len(streams), -1)
        self.packets_per_chunk = self.present_arr.shape[1]
        self.present_count = int(self.present_arr.sum())
        self.present = self.present_arr.astype(np.uint8).tobytes()
        self.address = 1000 * cid + 100 * thread
        self.log = log if log is not None else []

    def release(self):
        self.log.append(("release", self.chunk_id, self.thread))


def test_timeline_cuts_head_and_tail_fills_gaps_and_counts_a_jump():
    out = []
    tl = ChunkTimeline(1, 4, out.append, resync_chunks=2)
    tl.add(FakeChunk(10, [0, 0, 1, 1]))  # stream starts at packet 2
    tl.add(FakeChunk(11, [1, 0, 1, 1]))  # one missing
    tl.add(FakeChunk(13, [1, 1, 1, 1]))  # chunk 12 never emitted: a gap
    tl.add(FakeChunk(20, [1, 1, 1, 1]))  # beyond the resync bound: a discontinuity
    tl.add(FakeChunk(21, [1, 1, 0, 0]))  # stream ends at packet 2
    tl.finish()
    kinds = [(type(x).__name__, getattr(x, "chunk_id", None)) for x in out]
    assert kinds == [("Block", 10), ("Block", 11), ("Gap", None), ("Block", 13),
                     ("Block", 20), ("Block", 21)]  # fmt: skip
    b10, b11, gap, b13, b20, b21 = out
    assert (b10.first, b10.stop, b10.valid_packets()) == (2, 4, None)
    assert b11.valid_packets().tolist() == [True, False, True, True]
    assert gap.packets == 4 and tl.discontinuities == 1
    assert b13.complete and b13.valid_packets() is None
    assert (b21.first, b21.stop, b21.packets, b21.valid_packets()) == (0, 2, 2, None)


def test_timeline_groups_thread_chunks_by_id_and_gives_each_stream_its_offset():
    log, out = [], []
    tl = ChunkTimeline(3, 2, out.append, nthreads=2)
    tl.add(FakeChunk(5, [[1, 1], [1, 1]], thread=0, streams=(0, 1), log=log))
    assert out == []  # thread 1 has not delivered or passed chunk 5
    tl.add(FakeChunk(6, [[1, 1], [1, 1]], thread=0, streams=(0, 1), log=log))
    tl.add(FakeChunk(6, [[1, 0]], thread=1, streams=(2,), log=log))  # thread 1 skipped 5
    tl.finish()
    b5, b6 = out
    assert len(b5.chunks) == 1 and not b5.complete
    assert b5.present[2].tolist() == [False, False]  # stream 2 absent in chunk 5
    payload = 10
    assert b6.parts(payload) == [(6000, 40, 0), (6100, 20, 40)]
    # The stream ends at the last packet of any stream; stream 2 lacks it: invalid.
    assert (b6.first, b6.stop) == (0, 2)
    assert b6.valid_packets().tolist() == [True, False]
    b5.release()
    b5.release()  # twice is once
    assert log == [("release", 5, 0)]


@pytest.mark.parametrize(
    "name,kw",
    [
        ("ynao", {}),
        ("vdif", dict(nchan=8, vdif_payload=1024)),
        ("vdif", dict(nchan=4, vdif_payload=400, bits=2)),
    ],  # fmt: skip
)
def test_live_chunks_reach_the_stage_as_sent_with_lost_packets_masked(name, kw):
    """Packets from a real capture, copied out of the chunk pool by address as the GPU
    copy does, decoded with the chunk layout, equal the samples sent; a lost packet is
    masked, the stream starts at its first packet and ends at its last, and every
    block is released only after its copy's event completed."""
    fmt = make_format(name, chan_bw_mhz=1.0, **kw)
    obs = fmt.observation(start_mjd=60000, start_sec=0.0)
    spp, npkt, ppc = fmt.samples_per_packet, 75, 16
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(spp * npkt, fmt.nchan, fmt.npol))
         + 1j * rng.normal(size=(spp * npkt, fmt.nchan, fmt.npol)))  # fmt: skip
    x *= 20 if fmt.bits == 8 else 2.0
    q = np.clip(np.rint(np.stack([x.real, x.imag], -1)), -127, 127).astype(np.int8)
    # The first packet sits at index 3 of its chunk (a cut head) for every format.
    first = 3 + 32 * ppc
    packets = fmt.packetize(q if fmt.bits == 8 else x.astype(np.complex64), first * spp, obs)
    lost_time = 40  # packet time 40 of the last stream goes missing
    sent = FaultPlan(at={lost_time * fmt.streams + fmt.streams - 1: Drop()}).apply(packets)
    log = []
    stage = RecordingStage(fmt, ppc, log, polls_to_done=1)
    consumer = gpu_stage_runner(stage, fmt)
    hold = consumer.handoff.hold

    def logged_hold(block, ev):
        release = block.release
        block.release = lambda: (log.append(("release", ev.name)), release())
        hold(block, ev)

    consumer.handoff.hold = logged_hold
    bind = free_bind()
    settings = CaptureSettings.of(bind, packets_per_chunk=ppc, engine="socket")
    report = run_capture(fmt, settings, 20, idle_timeout_s=0.5,
                         on_start=sender(bind, sent.packets), consumer=consumer)  # fmt: skip
    got = np.concatenate(stage.samples)
    valid = np.concatenate(stage.valid)
    assert got.shape[0] == spp * npkt  # head and tail cut: exactly what was sent
    bad = slice(lost_time * spp, (lost_time + 1) * spp)
    assert not valid[bad].any() and valid.sum() == spp * (npkt - 1)
    # What was sent, decoded by the same reference from the packets themselves: the
    # payloads of one packet time, stream after stream, are a chunk of one packet.
    pay = [p[-fmt.payload_len :] for p in packets]
    want = np.concatenate([decode_ref(np.concatenate(pay[t * fmt.streams : (t + 1) * fmt.streams]),
                                      fmt.chunk_layout(1), spp) for t in range(npkt)])  # fmt: skip
    assert np.array_equal(got[valid], want[valid])
    assert not np.any(got[~valid])
    assert consumer.stage.lost_samples == spp and report.totals["missing"] == 1
    assert report.pipeline is None and consumer.handoff.released == consumer.blocks
    # Every block went back to the pool after its copy, once its event said done.
    assert consumer.blocks == report.engine["chunks_emitted"]
    for k in range(1, consumer.blocks + 1):
        at = {e[0]: i for i, e in enumerate(log) if len(e) > 1 and e[1] == k}
        assert at["copy"] < at.get("done", at.get("wait", -1)) < at["release"], (k, log)


def test_a_slow_stage_drops_whole_chunks_counted_exactly_and_they_become_gaps():
    """A stage slower than the stream: the capture's pool runs dry, the engine drops
    whole chunks and counts their packets `dropped`; the timeline turns each dropped
    chunk into a gap, so every packet time is either delivered or a counted loss."""
    fmt = make_format("ynao", chan_bw_mhz=1.0)
    obs = fmt.observation(start_mjd=60000, start_sec=0.0)
    spp, ppc, npkt = fmt.samples_per_packet, 8, 8 * 60
    q = np.random.default_rng(1).integers(-50, 50, (spp * npkt, 32, 2, 2), dtype=np.int8)
    packets = fmt.packetize(q, 0, obs)
    log = []
    stage = RecordingStage(fmt, ppc, log, delay_s=0.03)
    consumer = gpu_stage_runner(stage, fmt)
    bind = free_bind()
    settings = CaptureSettings.of(bind, packets_per_chunk=ppc, nchunks=6, window=2,
                                  engine="socket")  # fmt: skip
    report = run_capture(fmt, settings, 30, idle_timeout_s=1.0,
                         on_start=sender(bind, packets, pace_every=16),
                         consumer=consumer)  # fmt: skip
    t = report.totals
    assert t["dropped"] > 0, "the stage was not slow enough to make the pool run dry"
    # Every packet sent is counted once: placed and delivered, missing, or dropped.
    assert t["received"] + t["missing"] + t["dropped"] == npkt
    assert report.engine["kernel_drops"] == 0
    # Dropped chunks' packets and missing packets are exactly the lost samples: gaps
    # inside the stream, and the chunks dropped after the last one delivered (the
    # stream's end, as far as the timeline can know).
    tail = npkt * spp - consumer.stage.samples_fed
    assert consumer.stage.lost_samples + tail == (t["dropped"] + t["missing"]) * spp
    delivered = np.concatenate(stage.valid)
    assert delivered.sum() == t["received"] * spp
    assert consumer.gaps >= 1 and consumer.handoff.released == consumer.blocks


class TimedStage(RecordingStage):
    """A RecordingStage with the busy counters a live GPU stage reports."""

    host_busy_s, host_wait_s = 0.02, 0.5

    def __init__(self, fmt, ppc, log):
        super().__init__(fmt, ppc, log)
        self.chunk = ppc * fmt.samples_per_packet

    @property
    def blocks_fed(self):
        return self.nfed

    def busy_ms(self):
        return 7.0


def test_capture_to_gpu_finishes_the_stage_after_the_capture_and_reports_its_pipeline(
    monkeypatch,
):
    """The live GPU verbs' one capture (pipeline/live.py ``capture_to_gpu``): every
    packet reaches the stage, ``finish`` runs once the capture has ended and its result
    is handed back, and the report carries the stage's counters and busy times."""
    # No pool to page-lock without a GPU (CUDA's host registration): the runner's
    # registry is left out, as gpu_stage_runner allows.
    monkeypatch.setattr(gpu, "HostRegistry", lambda: None)
    fmt = make_format("ynao", chan_bw_mhz=1.0)
    obs = fmt.observation(start_mjd=60000, start_sec=0.0)
    spp, ppc, npkt = fmt.samples_per_packet, 8, 8 * 5
    q = np.random.default_rng(2).integers(-50, 50, (spp * npkt, 32, 2, 2), dtype=np.int8)
    log = []
    stage = TimedStage(fmt, ppc, log)
    bind = free_bind()
    settings = CaptureSettings.of(bind, packets_per_chunk=ppc, engine="socket")
    run = LiveGpuRun(idle_timeout_s=0.5, on_start=sender(bind, fmt.packetize(q, 0, obs)),
                     status=False)  # fmt: skip
    got, report = capture_to_gpu("fold", stage, fmt, settings, 20, run,
                                 lambda: log.append(("finish",)) or "product")  # fmt: skip
    assert got == "product" and log[-1] == ("finish",) and log.count(("finish",)) == 1
    assert report.totals["received"] == npkt and np.concatenate(stage.valid).sum() == npkt * spp
    p = report.pipeline
    assert p["samples_fed"] == npkt * spp and p["packets_per_chunk"] == ppc
    assert p["gpu_busy_ms"] == 7.0 and 0 < p["gpu_busy_pct"] < 100
    assert p["host_ms_per_block"] == 1e3 * 0.02 / stage.nfed and p["host_wait_s"] == 0.5
    assert p["block_ms"] == 1e3 * ppc * spp * fmt.tsamp_s


def test_gap_and_block_kinds_are_what_the_consumer_dispatches_on():
    assert Gap(3).packets == 3
    b = Block(1, [], np.ones((1, 4), bool), 0, 4)
    assert b.packets == 4 and b.valid_packets() is None


def test_the_status_line_says_rates_pool_losses_and_gpu_busy_once_a_second():
    import io

    from voltstream.pipeline.gpu import StatusLine

    class Cap:
        def __init__(self):
            self.received = 0

        def stats(self):
            return {"totals": {"received": self.received, "missing": 2, "late": 1,
                               "dropped": 3}, "kernel_drops": 4}  # fmt: skip

        def free_chunks(self):
            return 6

    class Consumer:
        bytes_fed, pool_chunks = 0, 8

        def gpu_busy(self, dt):
            return 25.0

    out = io.StringIO()
    line = StatusLine("fold", 8192, interval_s=0.05, stream=out)
    cap, cons = Cap(), Consumer()
    line.tick(cap, cons)  # too soon: nothing
    assert out.getvalue() == ""
    time.sleep(0.06)
    cap.received, cons.bytes_fed = 10_000, 8192 * 10_000
    line.tick(cap, cons)
    text = out.getvalue()
    assert text.startswith("fold ") and text.count("\n") == 1
    assert "pool  25% full" in text and "dropped 3" in text and "lost 7" in text
    assert "GPU busy  25%" in text
    gin = float(text.split(" in ")[1].split()[0])
    assert 0 < gin < 8 * 10_000 * 8192 / 0.05 / 1e9 * 1.01


@pytest.mark.parametrize("kind,opts", [("ynao", {}), ("vdif", {"bits": 2}), ("vdif", {})])
def test_a_recordings_whole_packet_chunks_reach_the_stage_at_their_payloads(kind, opts):
    """A recording's chunks keep whole packets (header + payload in each slot): the
    GPU route reads them where they lie, stepping by slots and starting at the first
    payload (`fold` after `record` on the GPU), and decodes what a capture's chunk of
    payloads alone decodes."""
    from voltstream.pipeline.gpu import ChunkFeed

    fmt = make_format(kind, chan_bw_mhz=1.0, **opts)
    ppc, rng = 8, np.random.default_rng(7)
    n = ppc * fmt.samples_per_packet
    x = rng.integers(-100, 100, (n, fmt.nchan, fmt.npol, 2)).astype(np.int8)
    pk = fmt.packetize(x, 0, fmt.observation(start_mjd=60000, start_sec=0.0))
    whole = np.ascontiguousarray(pk.reshape(ppc, fmt.streams, -1).transpose(1, 0, 2))
    slot = whole.shape[-1]
    assert slot > fmt.payload_len  # headers in the slots
    payloads = np.ascontiguousarray(whole[..., slot - fmt.payload_len :])
    got = []
    for buf, slot_len in ((whole, slot), (payloads, None)):
        out = []
        tl = ChunkTimeline(fmt.streams, ppc, out.append)
        chunk = FakeChunk(3, np.ones((fmt.streams, ppc)), streams=range(fmt.streams))
        chunk.address = buf.ctypes.data
        tl.add(chunk)
        tl.finish()
        stage = RecordingStage(fmt, ppc, [], slot_len=slot_len)
        ChunkFeed(stage, fmt, slot_len).feed(out[0])
        got.append(stage.samples[0])
    np.testing.assert_array_equal(got[0], got[1])
    assert np.abs(got[0]).sum() > 0


def test_a_gpu_pool_holds_the_window_counted_in_its_own_chunks():
    """The pool's floor is the reorder window + 4 in chunks of the size chosen for the
    GPU, as the run counts the window; it was counted in the capture's default
    (256-packet) chunks, four times as many for the same packets."""
    from voltstream.capture.config import CaptureSettings
    from voltstream.formats import make_format
    from voltstream.pipeline.live import GpuChunking

    fmt = make_format("ynao", chan_bw_mhz=1.0)
    capture = CaptureSettings.of("127.0.0.1:7148")
    ppc, nchunks = GpuChunking(pool_mb=1).sized(fmt, capture)
    assert ppc * fmt.payload_len == 32 << 20
    assert nchunks == capture.chunks.window_for(ppc, fmt.packets_per_second) + 4
