"""The voltage ring (capture/ring.py) on real YNAO frames in chunk memory, through the
real chunk timeline: where each chunk lands, what a gap and an overwritten slot read
as, the clock taken from the first packet's header; and trigger windows in MJD mapped
onto the ring's samples exactly (record/dumps.py)."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from chunks import FrameChunk
from dump_checks import read_dump
from voltstream.capture.report import CaptureReport
from voltstream.capture.ring import RingClock, VoltageRing
from voltstream.capture.run import CountingSink
from voltstream.capture.timeline import ChunkTimeline
from voltstream.formats import make_format
from voltstream.record import dumps as dumps_module
from voltstream.record.dumps import Dumps, TriggerError, parse_trigger

PPC = 4
FMT = make_format("ynao", chan_bw_mhz=0.125)
SPP = FMT.samples_per_packet


@pytest.fixture
def stream():
    rng = np.random.default_rng(3)
    n = 16 * PPC * SPP
    samples = rng.integers(-128, 128, (n, 32, 2, 2), dtype=np.int8)
    obs = FMT.observation(start_mjd=60123, start_sec=4321.0)
    return samples, FMT.packetize(samples, 0, obs)


def _ring(seconds: float = 0.01) -> VoltageRing:
    report = CaptureReport(format="ynao", bind="-")
    return VoltageRing(FMT, seconds, PPC, CountingSink(FMT, report))


def _feed(ring: VoltageRing, frames: np.ndarray, chunks: dict[int, list[int]]) -> list:
    tl = ChunkTimeline(1, PPC, ring.take, resync_chunks=8)
    made = []
    for cid, present in chunks.items():
        made.append(FrameChunk(cid, frames[cid * PPC : (cid + 1) * PPC], present))
        tl.add(made[-1])
    tl.finish()
    return made


def test_chunks_land_by_id_a_gap_and_a_missing_packet_read_as_lost(stream):
    samples, frames = stream
    ring = _ring()
    full = [1] * PPC
    made = _feed(ring, frames, {0: [0, 1, 1, 1], 1: [1, 0, 1, 1], 2: full, 4: full})
    assert all(c.released for c in made)  # nothing of the pool is kept
    clock = ring.clock
    # Packet 1 was the first: its header's time, 64 samples of 8 us after the start.
    assert (clock.first_sample, clock.mjd, clock.sec) == (SPP, 60123, 4321 + Fraction(512, 10**6))
    assert ring.span() == (SPP, 5 * PPC * SPP)
    copy = ring.copy(SPP, 5 * PPC * SPP)
    lost = {PPC + 1} | set(range(3 * PPC, 4 * PPC))  # the missing packet, the gap
    want = [p not in lost for p in range(1, 5 * PPC)]
    assert copy.present[0].tolist() == want
    tfp = FMT.payload_to_tfp(copy.payload, copy.present)
    valid = np.repeat(np.asarray(want), SPP)
    np.testing.assert_array_equal(tfp[valid], samples[SPP : 5 * PPC * SPP][valid])
    assert not tfp[~valid].any()  # zeros, not the stale bytes of the slot


def test_a_slot_overwritten_by_a_later_chunk_is_never_read_as_the_old_one(stream):
    """Chunk c lives in slot c mod slots: once a later chunk took its slot, a copy of c
    reads it as lost (the slot's id says so), not as the later chunk's samples."""
    samples, frames = stream
    ring = _ring()
    n = ring.nslots
    _feed(ring, frames, {c: [1] * PPC for c in range(n + 2)})
    first, stop = ring.span()
    assert first == 3 * PPC * SPP and stop == (n + 2) * PPC * SPP
    copy = ring.copy(0, stop)
    held = np.repeat(np.arange(n + 2) >= 2, PPC)  # chunks 0 and 1 overwritten
    assert copy.present[0].tolist() == held.tolist()
    tfp = FMT.payload_to_tfp(copy.payload, copy.present)
    np.testing.assert_array_equal(tfp[2 * PPC * SPP :], samples[2 * PPC * SPP : stop])


def test_mjd_windows_map_to_exact_samples():
    """A window in MJDs, as decimal strings, starts at the sample at that instant; a
    hair later (1e-20 day), at the next sample."""
    tsamp = FMT.tsamp_exact
    clock = RingClock(640, 60123, Fraction(4320), tsamp)
    band = (1418.0, 1422.0)
    k = 1350  # 10.8 ms after the first sample: a whole number of 2.5e-9 days

    def mjd(sample: int) -> str:
        q = (60123 + (4320 + sample * tsamp) / 86400) * 10**20
        assert q.denominator == 1
        return f"{q.numerator // 10**20}.{q.numerator % 10**20:020d}"

    def window(body: dict) -> tuple[int, int, bool]:
        return parse_trigger(json.dumps(body).encode(), clock, band, 0.0)

    assert window({"start_mjd": mjd(k), "end_mjd": mjd(2 * k)}) == (640 + k, 640 + 2 * k, False)
    later = mjd(k) + "1"  # 1e-21 day later
    assert window({"start_mjd": later, "end_mjd": mjd(2 * k)})[0] == 641 + k
    assert window({"start": 0.0108, "end": 0.0216}) == (640 + k, 640 + 2 * k, False)
    with pytest.raises(TriggerError) as e:
        parse_trigger(b'{"start": 1, "end": Infinity}', clock, band, 0.0)
    assert e.value.status == 400


def test_the_default_margin_is_the_decimal_given_not_its_binary_neighbour():
    """A burst's window at DM 0 is the margin either side of its time, to the sample:
    --dump-margin 0.002 (a float) is 250 samples of 8 us, not 250 and a hair."""
    clock = RingClock(0, 60123, Fraction(4320), FMT.tsamp_exact)
    band = (1418.0, 1422.0)
    first, stop, _ = parse_trigger(b'{"dm": 0, "time": 0.016, "freq": 1422}', clock, band, 0.002)
    assert (first, stop) == (2000 - 250, 2000 + 250)


class _OverwrittenDuringCopy:
    """The ring's slot ids as a copy sees them when the capture overwrites slot
    ``slot`` while the copy reads it: its id first, then the new chunk's."""

    def __init__(self, ids: np.ndarray, slot: int, new_id: int) -> None:
        self.ids, self.slot, self.new_id, self.reads = ids, slot, new_id, 0

    def __getitem__(self, slot: int) -> int:
        if slot == self.slot:
            self.reads += 1
            if self.reads > 1:
                return self.new_id
        return int(self.ids[slot])


def test_a_slot_overwritten_while_it_is_copied_is_counted_lost_not_mixed_in(stream):
    _, frames = stream
    ring = _ring()
    _feed(ring, frames, {c: [1] * PPC for c in range(4)})
    ring.ids = _OverwrittenDuringCopy(ring.ids, 1, 1 + ring.nslots)  # type: ignore[assignment]
    copy = ring.copy(0, 4 * PPC * SPP)
    assert copy.present[0].tolist() == [True] * PPC + [False] * PPC + [True] * 2 * PPC
    assert copy.torn_packets == PPC and not copy.payload[0, PPC : 2 * PPC].any()


def _dumps(ring: VoltageRing, tmp_path) -> Dumps:
    return Dumps(ring, tmp_path, "J0000+0000", margin_s=0.0)


def _trigger(dumps: Dumps, first_chunk: int, stop_chunk: int) -> tuple[int, dict]:
    secs = [(c * PPC * SPP - dumps.ring.clock.first_sample) * FMT.tsamp_exact
            for c in (first_chunk, stop_chunk)]  # fmt: skip
    body = {"start": str(secs[0]), "end": str(secs[1])}
    return dumps.trigger(json.dumps(body).encode())


def test_a_dump_never_holds_its_window_whole_outside_the_ring(stream, tmp_path, monkeypatch):
    """The writer reads the window out of the ring a piece at a time: the trigger copies
    nothing, and no copy out is longer than WRITE_PACKETS packets. (A 1 s window at
    30 Gb/s is 3.7 GB; copied whole as the trigger came, it lost the capture chunks.)"""
    samples, frames = stream
    monkeypatch.setattr(dumps_module, "WRITE_PACKETS", PPC)
    ring = _ring(0.04)
    assert ring.nslots >= 16
    _feed(ring, frames, {c: [1] * PPC for c in range(16)})
    copied: list[int] = []  # packets of each copy out
    copy = ring.copy

    def counted_copy(first: int, stop: int):
        out = copy(first, stop)
        copied.append(out.present.shape[1])
        return out

    ring.copy = counted_copy  # type: ignore[method-assign]
    dumps = _dumps(ring, tmp_path)
    status, answer = _trigger(dumps, 1, 16)
    at_answer = list(copied)
    dumps.close()
    assert status == 202 and answer["lost_samples"] == 0, answer
    assert at_answer == [] or max(at_answer) <= PPC  # the trigger itself copied nothing whole
    assert copied and max(copied) <= PPC and sum(copied) == 15 * PPC, copied
    header, got, _ = read_dump(answer["path"])
    np.testing.assert_array_equal(got, samples[PPC * SPP : 16 * PPC * SPP])
    assert header["DUMP_LOST_SAMPLES"] == "0" and dumps.counts["written"] == 1


def test_a_window_the_capture_overwrites_before_the_writer_reads_it_is_counted_lost(
    stream, tmp_path
):
    """The capture comes round the ring onto the window's first chunks before the writer
    reaches them: those samples are zeros in the file, counted (overwritten_packets,
    lost_samples, the header's DUMP_LOST_SAMPLES), never the newer chunks' samples."""
    samples, frames = stream
    ring = _ring()
    n = ring.nslots
    _feed(ring, frames, {c: [1] * PPC for c in range(n)})
    copy = ring.copy

    def capture_overtakes(first: int, stop: int):
        if ring.newest < n + 1:  # the first piece: chunks n, n + 1 take chunks 0, 1's slots
            _feed(ring, frames, {c: [1] * PPC for c in (n, n + 1)})
        return copy(first, stop)

    ring.copy = capture_overtakes  # type: ignore[method-assign]
    dumps = _dumps(ring, tmp_path)
    status, answer = _trigger(dumps, 1, n)
    dumps.close()
    assert status == 202 and answer["lost_samples"] == 0, answer  # all there at the trigger
    header, got, _ = read_dump(answer["path"])
    assert not got[: PPC * SPP].any()  # chunk 1: overwritten, zeros
    np.testing.assert_array_equal(got[PPC * SPP :], samples[2 * PPC * SPP : n * PPC * SPP])
    d = dumps.as_dict()
    assert (d["overwritten_packets"], d["lost_samples"]) == (PPC, PPC * SPP), d
    assert d["list"][0]["lost_samples"] == PPC * SPP
    assert header["DUMP_LOST_SAMPLES"] == str(PPC * SPP)
