"""A live search's candidates as voltage dumps (record/candidate_triggers.py) on real
YNAO frames through the real chunk timeline, the real ring and the real Dumps writing
DADA files: a candidate's window not yet in the ring waits for it and is then dumped
whole (not refused 409 and lost); a stalled stream dumps what the ring holds after the
bounded wait, an ended one at once; a candidate below the threshold dumps nothing; and
a reader's sample maps back onto the ring's axis across a gap and a discontinuity."""

from __future__ import annotations

import time

import numpy as np
import pytest

from chunks import FrameChunk
from voltstream.capture.report import CaptureReport
from voltstream.capture.ring import VoltageRing
from voltstream.capture.run import TfpSink
from voltstream.capture.timeline import ChunkTimeline
from voltstream.formats import make_format
from voltstream.io.dada import open_dada
from voltstream.record import candidate_triggers
from voltstream.record.candidate_triggers import CandidateTriggers
from voltstream.record.dumps import Dumps
from voltstream.search.candidates import Candidate

PPC = 4
FMT = make_format("ynao", chan_bw_mhz=0.125)
SPP = FMT.samples_per_packet
CHUNK = PPC * SPP  # samples per chunk: 256 of 8 us
TOP = FMT.freq_mhz + FMT.nchan * FMT.chan_bw_mhz / 2
MARGIN = 250 * 8e-6  # the dumps' margin: 250 samples either side of a DM 0 burst


@pytest.fixture
def stream():
    rng = np.random.default_rng(5)
    samples = rng.integers(-128, 128, (24 * CHUNK, 32, 2, 2), dtype=np.int8)
    obs = FMT.observation(start_mjd=60123, start_sec=4321.0)
    return samples, FMT.packetize(samples, 0, obs)


class Live:
    """The ring in front of a TfpSink (what a live search's reader gets), fed chunk by
    chunk through a timeline that stays open, as a running capture's."""

    def __init__(self, frames: np.ndarray, tmp, resync: int = 8) -> None:
        self.frames, self.handed = frames, []
        report = CaptureReport(format="ynao", bind="-")
        sink = TfpSink(FMT, lambda s, v: self.handed.append(s), report, FMT.packet_len)
        self.ring = VoltageRing(FMT, 0.2, PPC, sink)
        self.timeline = ChunkTimeline(1, PPC, self.ring.take, resync_chunks=resync)
        self.dumps = Dumps(self.ring, tmp, "J0000+0000", MARGIN)

    def feed(self, *ids: int, present: list[int] | None = None) -> None:
        for cid in ids:
            frames = self.frames[cid * PPC : (cid + 1) * PPC]
            self.timeline.add(FrameChunk(cid, frames, present or [1] * PPC))


def _cand(sample: int, snr: float = 20.0) -> Candidate:
    """A DM 0 candidate at reader sample ``sample`` (its filterbank is the voltages)."""
    return Candidate(snr, sample, sample * 8e-6, 0, 0, 0.0, 1, sample, sample)


def _triggers(live: Live, threshold: float = 10.0) -> CandidateTriggers:
    return CandidateTriggers(live.dumps, threshold, TOP, lambda c: c.sample_index)


def _until(cond, timeout=5.0) -> None:
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, "timed out"
        time.sleep(0.005)


def _dumped(live: Live, path: str) -> np.ndarray:
    f = open_dada(path)
    return f.read_raw(0, f.nsamp)


def test_a_window_not_yet_in_the_ring_waits_for_it_then_is_dumped_whole(tmp_path, stream):
    samples, frames = stream
    live = Live(frames, tmp_path)
    live.feed(0, 1, 2, 3, 4)  # blocks 0..3 out (the newest is held back): 1024 samples
    trig = _triggers(live)
    trig.add([_cand(1000)])  # its window: samples 750 .. 1250, past the newest
    time.sleep(0.1)
    assert trig.counts["waited"] == 1 and trig.as_dict()["waiting"] == 1
    assert live.dumps.counts["triggers"] == 0  # not asked: no 409 counted, nothing lost
    live.feed(5, 6)  # now the ring holds 0 .. 1536
    _until(lambda: trig.counts["dumped"] == 1)
    trig.close()
    live.dumps.close()
    (rec,) = trig.as_dict()["list"]
    assert rec["outcome"] == "dumped" and not rec["partial"]
    d = live.dumps.as_dict()
    assert (d["triggers"], d["dumps"], d["written"], d["refused_not_yet"]) == (1, 1, 1, 0), d
    np.testing.assert_array_equal(_dumped(live, rec["path"]), samples[750:1250])


def test_a_stalled_stream_dumps_what_the_ring_holds_after_the_bounded_wait(
    tmp_path, stream, monkeypatch
):
    samples, frames = stream
    monkeypatch.setattr(candidate_triggers, "WAIT_S", 0.2)
    live = Live(frames, tmp_path)
    live.feed(0, 1, 2, 3, 4)
    trig = _triggers(live)
    t0 = time.monotonic()
    trig.add([_cand(1000)])
    _until(lambda: trig.counts["dumped"] == 1)
    assert time.monotonic() - t0 >= 0.2  # it waited first
    trig.close()
    live.dumps.close()
    c = trig.as_dict()
    assert (c["waited"], c["expired"], c["at_end"], c["dumped"]) == (1, 1, 0, 1), c
    (rec,) = c["list"]
    assert rec["partial"]
    np.testing.assert_array_equal(_dumped(live, rec["path"]), samples[750:1024])


def test_at_the_stream_s_end_a_waiting_window_is_dumped_as_far_as_it_came(tmp_path, stream):
    samples, frames = stream
    live = Live(frames, tmp_path)
    live.feed(0, 1, 2, 3, 4)
    live.timeline.finish()  # the stream ended: 0 .. 1280 handed on
    trig = _triggers(live)
    trig.add([_cand(1100), _cand(1100, snr=9.9)])  # the second is below the threshold
    trig.close()
    live.dumps.close()
    c = trig.as_dict()
    assert (c["candidates"], c["below_threshold"], c["triggers"]) == (2, 1, 1), c
    assert (c["at_end"], c["expired"], c["dumped"]) == (1, 0, 1), c
    (rec,) = c["list"]
    assert rec["partial"] and live.dumps.counts["dumps"] == 1
    np.testing.assert_array_equal(_dumped(live, rec["path"]), samples[850:1280])


def test_a_reader_s_sample_maps_onto_the_ring_across_a_gap_and_a_discontinuity(tmp_path, stream):
    """The reader sees a gap as zeros and a jump beyond the resync bound not at all:
    ``stream_sample`` puts every sample it saw back where the ring holds it, and a
    candidate there dumps the very samples the reader searched."""
    samples, frames = stream
    live = Live(frames, tmp_path, resync=2)
    first = [0, 1, 1, 1]  # the stream starts at packet 1
    live.feed(0, present=first)
    live.feed(1, 3, 8, 9, 10)  # chunk 2 a gap (zeros), 4..7 skipped (a discontinuity)
    live.timeline.finish()
    handed = np.concatenate(live.handed)
    ring = live.ring
    assert ring.clock.first_sample == SPP
    assert [ring.stream_sample(n) for n in (0, 3 * SPP - 1, 3 * SPP, 7 * SPP, 11 * SPP)] == [
        SPP, CHUNK - 1, CHUNK, 2 * CHUNK, 3 * CHUNK]  # fmt: skip
    assert not handed[7 * SPP : 11 * SPP].any()  # the gap, as the reader saw it
    at = 15 * SPP  # the reader's first sample of chunk 8, after the jump
    assert ring.stream_sample(at) == 8 * CHUNK
    np.testing.assert_array_equal(handed[at:], samples[8 * CHUNK : 11 * CHUNK])
    trig = _triggers(live)
    trig.add([_cand(at + 300)])
    trig.close()
    live.dumps.close()
    (rec,) = trig.as_dict()["list"]
    assert rec["outcome"] == "dumped" and not rec["partial"], rec
    got = _dumped(live, rec["path"])
    np.testing.assert_array_equal(got, handed[at + 50 : at + 550])
