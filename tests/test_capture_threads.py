"""Several capture threads through `_core.Capture` (`threads.count = N`): packet rings in one
PACKET_FANOUT_CBPF group steered by the VDIF thread id over loopback. Each thread sees only
its own streams, counts exactly (reordering, duplicates, gaps, late, foreign, malformed), the
counters add up to the totals, and each thread runs pinned to its CPU."""

import os
import socket
import struct
import time

import numpy as np
import pytest

from capture_spec import capture
from loopback import free_bind, sender
from voltstream.capture.config import CaptureSettings
from voltstream.errors import ConfigError
from voltstream.testing import Delay, Drop, Duplicate, FaultPlan, Foreign, Truncate

FRAME = 96  # bytes: 32-byte header + 64 data bytes
FPS = 1000
VDIF_THREADS = [7, 0x2A5, 3, 0x100, 12]  # stream s has VDIF thread id VDIF_THREADS[s]
PPC = 8
NIDX = 64


def vdif_frame(thread: int, index: int, data: np.ndarray) -> bytes:
    seconds, frame = divmod(index, FPS)
    words = (
        seconds,
        frame | 30 << 24,
        FRAME // 8 | 1 << 29,
        0x4142 | thread << 16 | 7 << 26,
        0,
        0,
        0,
        0,
    )
    return struct.pack("<8I", *words) + data.tobytes()


def allowed_cpus(tid: int) -> str:
    with open(f"/proc/self/task/{tid}/status") as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                return line.split()[1]
    raise AssertionError("no Cpus_allowed_list")


@pytest.mark.parametrize("nthreads", [2, 3])
def test_threads_own_disjoint_streams_and_count_exactly(nthreads):
    rng = np.random.default_rng(nthreads)
    nstreams = len(VDIF_THREADS)
    data = rng.integers(0, 256, (NIDX, nstreams, FRAME - 32), dtype=np.uint8)
    cpus = [
        sorted(os.sched_getaffinity(0))[t % len(os.sched_getaffinity(0))] for t in range(nthreads)
    ]
    cap = capture(
        "vdif",
        "127.0.0.1:0",
        PPC,
        nchunks=32,
        window=3,
        vdif_threads=VDIF_THREADS,
        vdif_frame_len=FRAME,
        frames_per_second=FPS,
        engine="packet_ring",
        threads=nthreads,
        cpus=cpus,
    )
    owners = [s * nthreads // nstreams for s in range(nstreams)]  # contiguous blocks
    assert cap.thread_streams == [
        [s for s in range(nstreams) if owners[s] == t] for t in range(nthreads)
    ]
    # Frame (i, s) is sent at 5 i + s.
    faults = {5 * i + s: Drop() for i, s in [(20, 1), (21, 1), (33, 4)]}
    faults |= {5 * 10 + s: Delay(5) for s in range(nstreams)}  # index 10 after 11
    faults |= {
        5 * 40 + 2: Duplicate(),
        5 * 4 + 3: Duplicate(180),  # the copy comes 36 indices on, behind the window: late
        5 * 40: Foreign(lambda p: vdif_frame(9, 40, data[40, 0])),  # foreign thread id
        5 * 41: Truncate(3),  # malformed (too short)
    }
    frames = (
        vdif_frame(VDIF_THREADS[s], i, data[i, s]) for i in range(NIDX) for s in range(nstreams)
    )
    sent_frames = FaultPlan(at=faults).apply(frames)
    gap = {(at // 5, at % 5) for at in sent_frames.lost}
    assert len(gap) == 4
    cap.start()
    host, port = cap.address.rsplit(":", 1)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dest = (host, int(port))
    for p in sent_frames.packets:
        tx.sendto(p, dest)
    time.sleep(0.1)
    st = cap.stats()
    for t, th in enumerate(st["threads"]):  # pinned while running
        assert th["cpu"] == cpus[t]
        assert allowed_cpus(th["tid"]) == str(cpus[t])
    cap.stop()
    st = cap.stats()
    tx.close()

    sent = {s: NIDX - sum(1 for g in gap if g[1] == s) for s in range(nstreams)}
    for t, th in enumerate(st["threads"]):
        assert th["streams"] == cap.thread_streams[t]
        assert th["kernel_drops"] == 0
        for c in th["stream_counters"]:
            s = c["stream"]
            assert owners[s] == t
            assert c["received"] == sent[s], (t, s)
            assert c["missing"] == NIDX - sent[s]
            assert c["duplicate"] == (s == 2)
            assert c["late"] == (s == 3)
            assert c["dropped"] == 0
        # What the kernel cannot steer (foreign id, too short) goes to thread 0.
        assert (th["foreign"], th["malformed"]) == ((t == 0), (t == 0))
        mine = sum(sent[s] + (s in (2, 3)) for s in th["streams"]) + 2 * (t == 0)
        assert th["packets"] == mine
        assert th["chunks_emitted"] == NIDX // PPC
    assert st["packets"] == sum(sent.values()) + 4 == len(sent_frames.packets)
    assert [s["received"] for s in st["streams"]] == [sent[s] for s in range(nstreams)]
    assert (st["foreign"], st["malformed"]) == (1, 1)
    assert st["totals"]["missing"] == len(gap)
    assert st["chunks_emitted"] == nthreads * NIDX // PPC

    # Each thread's ring holds only its streams, with the exact bytes sent.
    for t in range(nthreads):
        ids = []
        while (ch := cap.next_chunk(0.05, thread=t)) is not None:
            assert ch.thread == t and ch.streams == cap.thread_streams[t]
            raw = np.frombuffer(ch, np.uint8).reshape(len(ch.streams), PPC, FRAME - 32)
            present = np.frombuffer(ch.present, np.uint8).reshape(len(ch.streams), PPC)
            for k, s in enumerate(ch.streams):
                for j in range(PPC):
                    i = ch.first_index + j
                    assert present[k, j] == ((i, s) not in gap)
                    if present[k, j]:
                        assert np.array_equal(raw[k, j], data[i, s])
            ids.append(ch.chunk_id)
            del raw
            ch.release()
        assert ids == list(range(NIDX // PPC))


def test_next_chunk_without_a_thread_takes_turns_over_all_threads():
    cap = capture(
        "counter", "127.0.0.1:0", 4, streams=4, payload_len=16, engine="packet_ring", threads=2
    )
    with cap:
        host, port = cap.address.rsplit(":", 1)
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for i in range(8):
            for s in range(4):
                tx.sendto(struct.pack(">QH", i, s) + bytes(16), (host, int(port)))
        tx.close()
        time.sleep(0.1)
    seen = []
    while (ch := cap.next_chunk(0.05)) is not None:
        seen.append((ch.thread, ch.chunk_id, tuple(ch.streams)))
        ch.release()
    assert sorted(seen) == [(0, 0, (0, 1)), (0, 1, (0, 1)), (1, 0, (2, 3)), (1, 1, (2, 3))]


def test_single_thread_can_be_pinned_and_reports_its_thread():
    cpu = max(os.sched_getaffinity(0))
    with capture(
        "counter", "127.0.0.1:0", 4, streams=2, payload_len=8, engine="socket", cpus=[cpu]
    ) as cap:
        (th,) = cap.stats()["threads"]
        assert th["cpu"] == cpu and th["streams"] == [0, 1]
        assert allowed_cpus(th["tid"]) == str(cpu)


def test_bad_thread_settings_are_config_errors():
    kw = dict(streams=4, payload_len=8)
    with pytest.raises(ConfigError, match="1 to 4 threads"):
        capture("counter", "127.0.0.1:0", 4, threads=5, spread="streams", **kw)
    with pytest.raises(ConfigError, match="unknown spread 'time'"):
        capture("counter", "127.0.0.1:0", 4, threads=2, spread="time", **kw)
    with pytest.raises(ConfigError, match="one CPU per thread"):
        capture("counter", "127.0.0.1:0", 4, threads=2, cpus=[0], **kw)
    with pytest.raises(ConfigError, match="CPU 4000 is not available"):
        capture("counter", "127.0.0.1:0", 4, threads=2, cpus=[0, 4000], **kw)
    with pytest.raises(ConfigError, match="engine='packet_ring'"):
        capture("counter", "127.0.0.1:0", 4, threads=2, engine="socket", **kw)
    with pytest.raises(ConfigError, match="thread 1 owns no stream"):
        capture("counter", "127.0.0.1:0", 4, threads=2, stream_threads=[0, 0, 0, 0], **kw)
    # SPEAD heaps of several packets keep their index at no fixed place: said at once.
    with pytest.raises(ConfigError, match="threads=1"):
        capture("spead", "127.0.0.1:0", 4, digitiser_ids=[0, 1], packets_per_heap=2, threads=2)
    cap = capture("counter", "127.0.0.1:0", 4, threads=2, **kw)
    with cap, pytest.raises(ConfigError, match="thread 2 does not exist"):
        cap.next_chunk(0.0, thread=2)


def test_run_capture_with_two_threads_merges_both_pols_back_exactly():
    """The pipeline's capture (what `voltstream capture --threads 2` runs): each VDIF
    thread (polarisation) is captured by its own thread, then merged by chunk id into the
    same time-ordered samples that were sent, with one packet of pol 1 lost and zero-filled."""

    from voltstream.capture.run import run_capture
    from voltstream.formats import make_format

    fmt = make_format("vdif", nchan=8, chan_bw_mhz=1.0, vdif_payload=1024)
    obs = fmt.observation(start_mjd=60000, start_sec=0.0)
    spp, nframes = fmt.samples_per_packet, 96
    rng = np.random.default_rng(5)
    samples = rng.integers(-100, 100, (spp * nframes, fmt.nchan, 2, 2), dtype=np.int8)
    packets = fmt.packetize(samples, 0, obs)  # frame-major: pol 0, pol 1, pol 0, ...
    sent = FaultPlan(at={2 * 50 + 1: Drop()}).apply(packets)  # frame 50 of pol 1
    assert sent.lost == [2 * 50 + 1]
    got = []
    bind = free_bind()
    settings = CaptureSettings.of(
        bind, packets_per_chunk=16, engine="packet_ring", threads=2, cpus=[0, 0]
    )
    report = run_capture(
        fmt,
        settings,
        duration_s=20,
        sink=lambda x, valid: got.append((x.copy(), valid.copy())),
        idle_timeout_s=0.5,
        on_start=sender(bind, sent.packets),
    )
    x = np.concatenate([g[0] for g in got])
    valid = np.concatenate([g[1] for g in got])
    assert x.shape == samples.shape
    want = samples.copy()
    want[50 * spp : 51 * spp, :, 1] = 0
    assert np.array_equal(x, want)
    assert valid.sum() == (nframes - 1) * spp
    threads = report.engine["threads"]
    assert [th["streams"] for th in threads] == [[0], [1]]
    assert [th["totals"]["received"] for th in threads] == [nframes, nframes - 1]
    assert [th["totals"]["missing"] for th in threads] == [0, 1]
    assert report.totals["foreign"] == 0 and report.totals["malformed"] == 0
    assert any(line.startswith("  thread 1 (cpu 0") for line in report.summary_lines())


def test_a_run_keeps_what_existed_before_it_out_of_the_collectors_walk_and_gives_it_back():
    """During a run everything made before it (the engine, CuPy, plans) is frozen out
    of the cyclic collector (a full collection walking it all held chunks for tens of
    ms); after the run nothing stays frozen."""
    import gc

    from loopback import free_bind, sender
    from voltstream.capture.config import CaptureSettings
    from voltstream.capture.run import run_capture
    from voltstream.formats import make_format

    fmt = make_format("ynao", chan_bw_mhz=1.0)
    obs = fmt.observation(start_mjd=60000, start_sec=0.0)
    q = np.zeros((fmt.samples_per_packet * 16, 32, 2, 2), dtype=np.int8)
    packets = fmt.packetize(q, 0, obs)
    bind = free_bind()
    frozen = []
    send = sender(bind, packets)

    def start():
        frozen.append(gc.get_freeze_count())
        send()

    settings = CaptureSettings.of(bind, packets_per_chunk=8, engine="socket")
    report = run_capture(fmt, settings, 20, idle_timeout_s=0.5, on_start=start)
    assert report.totals["received"] == len(packets)
    assert frozen[0] > 1000 and gc.get_freeze_count() == 0
