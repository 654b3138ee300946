"""One stream over several capture threads (issue 26 item 2): the threads take turns by
chunk id (``threads.spread = "chunks"``), steered in the kernel by a classic BPF program
that computes ``(index / packets_per_chunk) mod threads``. Real packet rings on loopback;
the timeline interleaves the threads' chunks back into one ordered stream; a thread
that falls silent holds the others' blocks for at most ``hold_s``."""

from __future__ import annotations

import json
import socket
import time

import numpy as np
import pytest

from capture_spec import capture
from cli_process import fold_of_a_file, run_cli
from loopback import free_bind, free_ports
from test_capture_threads import FPS, FRAME, vdif_frame
from test_cli_outcomes import Listening
from test_gpu_handoff import FakeChunk
from voltstream.capture.timeline import Block, ChunkTimeline, Gap
from voltstream.io.psrfits import read_psrfits

PPC, NIDX = 8, 96
THREAD_IDS = [4, 9]


@pytest.mark.parametrize("nthreads", [2, 3])
def test_threads_take_turns_by_chunk_and_the_timeline_puts_them_back_in_order(nthreads):
    rng = np.random.default_rng(nthreads)
    data = rng.integers(0, 256, (NIDX, 2, FRAME - 32), dtype=np.uint8)
    cap = capture("vdif", "127.0.0.1:0", PPC, nchunks=48, window=3, vdif_threads=THREAD_IDS,
                  vdif_frame_len=FRAME, frames_per_second=FPS, engine="packet_ring",
                  threads=nthreads, spread="chunks")  # fmt: skip
    assert cap.chunk_stride == nthreads
    assert cap.thread_streams == [[0, 1]] * nthreads
    lost = {(50, 1), (51, 1)}
    cap.start()
    host, port = cap.address.rsplit(":", 1)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(NIDX):
        for s in range(2):
            if (i, s) not in lost:
                tx.sendto(vdif_frame(THREAD_IDS[s], 1000 * FPS + i, data[i, s]), (host, int(port)))
    time.sleep(0.1)
    cap.stop()
    tx.close()
    st = cap.stats()
    assert [s["received"] for s in st["streams"]] == [NIDX, NIDX - 2]
    assert [s["missing"] for s in st["streams"]] == [0, 2]
    assert st["totals"]["late"] == st["foreign"] == st["malformed"] == 0
    for th in st["threads"]:  # every thread got its share, the sum is the whole
        assert th["streams"] == [0, 1] and th["chunks_emitted"] == NIDX // PPC // nthreads
    out: list = []
    tl = ChunkTimeline(2, PPC, out.append, nthreads, chunk_stride=nthreads,
                       thread_streams=cap.thread_streams)  # fmt: skip
    while (ch := cap.next_chunk(0.05)) is not None:
        assert ch.chunk_id % nthreads == ch.thread
        tl.add(ch)
    tl.finish()
    blocks = [b for b in out if isinstance(b, Block)]
    assert not [g for g in out if isinstance(g, Gap)]
    first = 1000 * FPS // PPC
    assert [b.chunk_id for b in blocks] == list(range(first, first + NIDX // PPC))
    for b in blocks:
        arr = b.array(2, FRAME - 32)
        for j in range(PPC):
            i = b.chunk_id * PPC + j - 1000 * FPS
            for s in range(2):
                assert b.present[s, j] == ((i, s) not in lost)
                if b.present[s, j]:
                    assert np.array_equal(arr[s, j], data[i, s])
        del arr
        b.release()


def test_a_silent_thread_holds_the_others_for_at_most_the_window():
    """Two threads owning streams {0} and {1}; thread 1 stops delivering. Its blocks
    wait while it is within ``hold_chunks`` of the newest or delivered within
    ``hold_s``, then go out without it
    (stream 1 absent, its packets counted silent); a chunk of it that comes later is
    released and counted."""
    out, log = [], []
    now = [0.0]
    tl = ChunkTimeline(2, 4, out.append, nthreads=2, thread_streams=[[0], [1]], hold_chunks=2,
                       hold_s=0.5, clock=lambda: now[0])  # fmt: skip
    for cid in (1, 2):
        tl.add(FakeChunk(cid, [1] * 4, thread=0, streams=(0,), log=log))
        tl.add(FakeChunk(cid, [1] * 4, thread=1, streams=(1,), log=log))
    for cid in (3, 4):
        tl.add(FakeChunk(cid, [1] * 4, thread=0, streams=(0,), log=log))
    assert [b.chunk_id for b in out] == [1]  # 2 held back as the newest; 3, 4 wait
    tl.add(FakeChunk(5, [1] * 4, thread=0, streams=(0,), log=log))  # 3 ids ahead of 1
    assert [b.chunk_id for b in out] == [1]  # behind, but it delivered 0 s ago: waited for
    now[0] = 0.6  # and silent for 0.6 s > hold_s
    tl.poll()
    assert [b.chunk_id for b in out] == [1, 2, 3, 4]  # 5 now the newest, held
    assert not out[2].complete and out[2].present[1].tolist() == [False] * 4
    assert tl.silent_packets.tolist() == [0, 3 * 4]
    tl.add(FakeChunk(3, [1] * 4, thread=1, streams=(1,), log=log))  # too late
    assert tl.late_chunks == 1 and ("release", 3, 1) in log
    tl.finish()
    assert [b.chunk_id for b in out] == [1, 2, 3, 4, 5]


def test_a_late_thread_that_still_delivers_holds_at_most_half_the_pools():
    """Thread 1's sender runs behind but keeps delivering (it delivered 0 s ago), so
    hold_s never lets its blocks go; with the pools given (8 chunks a thread), the
    others' blocks wait for it only while at most 4 are pending: then they go out
    without its part (counted silent) rather than the healthy thread's pool running
    dry, and its chunk that comes later is released and counted late. Without the
    pools the timeline waits, as before."""

    def run(pool):
        out, log = [], []
        tl = ChunkTimeline(2, 4, out.append, nthreads=2, thread_streams=[[0], [1]],
                           hold_chunks=2, hold_s=0.5, clock=lambda: 0.0,
                           pool_chunks=pool)  # fmt: skip
        tl.add(FakeChunk(1, [1] * 4, thread=0, streams=(0,), log=log))
        tl.add(FakeChunk(1, [1] * 4, thread=1, streams=(1,), log=log))
        for cid in range(2, 8):
            tl.add(FakeChunk(cid, [1] * 4, thread=0, streams=(0,), log=log))
        return tl, out, log

    tl, out, _ = run(None)
    assert [b.chunk_id for b in out] == [] and len(tl.pending) == 6  # all wait on thread 1
    tl, out, log = run(8)
    assert len(tl.pending) <= 4
    gone = [b.chunk_id for b in out]
    assert gone[0] == 1 and out[0].complete  # both threads had block 1
    assert all(not b.complete and not b.present[1].any() for b in out[1:])
    # Every block that left without thread 1 counted its packets silent; block 1's held
    # successor is the newest emitted so far.
    assert tl.silent_packets.tolist() == [0, 4 * (tl.out_id - 1)]
    tl.add(FakeChunk(2, [1] * 4, thread=1, streams=(1,), log=log))  # its late chunk
    assert tl.late_chunks == 1 and ("release", 2, 1) in log


def test_chunk_stride_waits_only_for_the_thread_owning_the_next_chunk():
    """Three threads taking turns: chunk 7 (thread 1) goes out once thread 0 has
    delivered 6 and thread 1 delivered 7, whatever thread 2 does."""
    out = []
    tl = ChunkTimeline(1, 2, out.append, nthreads=3, chunk_stride=3)
    tl.add(FakeChunk(7, [1, 1], thread=1))
    tl.add(FakeChunk(8, [1, 1], thread=2))
    assert out == []  # chunk 6 (thread 0) may still come
    tl.add(FakeChunk(6, [1, 1], thread=0))
    assert [b.chunk_id for b in out] == [6, 7]  # 8 is the newest, held
    tl.add(FakeChunk(10, [1, 1], thread=1))  # 9 (thread 0) never had a packet: a gap
    tl.add(FakeChunk(12, [1, 1], thread=0))
    tl.add(FakeChunk(11, [1, 1], thread=2))
    tl.finish()
    kinds = [getattr(x, "chunk_id", "gap") for x in out]
    assert kinds == [6, 7, 8, "gap", 10, 11, 12]


YNAO = ("--format", "ynao")
THREADS = "2"
FOLD = ("--dm", "10", "--period", "0.0125", "--nbin", "32", "--tsub", "0.1")


def test_one_ynao_stream_on_two_capture_threads_folds_as_the_file(tmp_path):
    """`fold --listen --threads 2` of one YNAO stream (one flow: nothing to steer by
    stream) spreads its chunks over two cores and folds to the very samples of the file
    fold of the same packets; both threads took a share, nothing is lost."""
    sim = ("simulate", *YNAO, "--duration", "0.2", "--seed", "5")
    fold_of_a_file(sim, FOLD, tmp_path / "f.dada")
    bind = free_bind()
    fold = Listening("fold", "--listen", bind, *YNAO, *FOLD, "--device", "cpu",
                     "--threads", THREADS, "--duration", "60", "--idle-timeout", "3",
                     "--report", str(tmp_path / "r.json"),
                     "-o", str(tmp_path / "live.fits"))  # fmt: skip
    r = run_cli(*sim, "--dest", bind, "--rate", "0.2")
    assert r.returncode == 0, r.stderr
    rc, out, err = fold.wait()
    assert rc == 0, out + err
    report = json.loads((tmp_path / "r.json").read_text())
    eng = report["engine"]
    assert eng["totals"]["missing"] == eng["totals"]["late"] == 0
    shares = [th["packets"] for th in eng["threads"]]
    assert len(shares) == int(THREADS) and min(shares) > 0.3 * sum(shares), shares
    assert sum(shares) == eng["streams"][0]["received"]
    live, file = read_psrfits(tmp_path / "live.fits"), read_psrfits(tmp_path / "file.fits")
    assert live.data.shape == file.data.shape and np.abs(file.data).max() > 0
    np.testing.assert_array_equal(live.data, file.data)


def _send_reordered_ynao(bind: str, npackets: int, block: int, group: int) -> None:
    """YNAO packets whose 32-packet blocks go out shuffled within groups of ``group``
    blocks: what ``group`` interleaved senders do (a reorder of about block x group)."""
    from voltstream.sim.packetize import packetize_ynao

    frames = packetize_ynao(np.zeros((64 * 16, 32, 2), np.complex64))
    rng = np.random.default_rng(0)
    order = list(range(group))  # the first group in order: the stream starts at its start
    for g in range(group, npackets // block, group):
        order += list(g + rng.permutation(group))
    host, port = bind.rsplit(":", 1)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for n, b in enumerate(order):
        for i in range(b * block, (b + 1) * block):
            f = frames[i % len(frames)].copy()
            f[:8] = np.frombuffer((1000 + i).to_bytes(8, "big"), np.uint8)
            tx.sendto(f.tobytes(), (host, int(port)))
        if n % 8 == 7:
            time.sleep(0.002)  # about 1 Gb/s: no kernel drops on a small machine
    tx.close()


@pytest.mark.parametrize("window", [None, "4"])
def test_capture_defaults_hold_what_interleaved_senders_reorder(tmp_path, window):
    """Packets reordered by up to 1024 (32 senders' worth of 32-packet blocks): with no
    --window, `capture` holds them all (its window is set in time and packets, issue 26
    item 5); the old default of 4 chunks of 256 packets counted some late."""
    bind = free_bind()
    extra = ("--window", window) if window else ()
    report = str(tmp_path / "r.json")
    cap = Listening("capture", "--format", "ynao", "--listen", bind, "--duration", "60",
                    "--idle-timeout", "2", "--report", report, *extra)  # fmt: skip
    _send_reordered_ynao(bind, 6144, 32, 32)
    rc, out, err = cap.wait()
    assert rc == 0, out + err
    tot = json.loads((tmp_path / "r.json").read_text())["engine"]["totals"]
    if window is None:
        assert (tot["received"], tot["late"], tot["missing"], tot["dropped"]) == (6144, 0, 0, 0)
    else:
        assert tot["late"] > 0 and tot["received"] + tot["late"] == 6144, tot


def test_a_band_in_three_streams_is_captured_on_one_timeline(tmp_path):
    """`capture --listen HOST:PORT+2`: three YNAO subbands on three ports, one capture
    thread each, one chunk timeline: the DADA file holds the whole 96-channel band,
    equal to the three subband files the simulator writes of the same band."""
    from voltstream.io.dada import open_dada

    sim = ("simulate", *YNAO, "--subbands", "3", "--duration", "0.05", "--seed", "9")
    r = run_cli(*sim, "--output", str(tmp_path / "f.dada"))
    assert r.returncode == 0, r.stderr
    ports = free_ports(3)
    cap = Listening("capture", *YNAO, "--listen", f"127.0.0.1:{ports[0]}+2", "--duration",
                    "60", "--idle-timeout", "2", "--report", str(tmp_path / "r.json"),
                    "-o", str(tmp_path / "band.dada"))  # fmt: skip
    dest = ",".join(f"127.0.0.1:{p}" for p in ports)
    r = run_cli(*sim, "--dest", dest, "--rate", "0.2")
    assert r.returncode == 0, r.stderr
    rc, out, err = cap.wait()
    assert rc == 0, out + err
    eng = json.loads((tmp_path / "r.json").read_text())["engine"]
    assert [th["streams"] for th in eng["threads"]] == [[0], [1], [2]]
    per = [s["received"] for s in eng["streams"]]
    assert len(per) == 3 and per[0] == per[1] == per[2] > 0, per
    assert eng["totals"]["missing"] == eng["totals"]["late"] == 0
    band = open_dada(tmp_path / "band.dada")
    subs = [open_dada(tmp_path / f"f.sb{k}.dada") for k in range(3)]
    assert band.obs.nchan == 96 and band.nsamp == subs[0].nsamp
    whole = np.concatenate([s.read_raw(0, s.nsamp) for s in subs], axis=1)
    np.testing.assert_array_equal(band.read_raw(0, band.nsamp), whole)


def test_listen_addresses_are_checked_and_a_gpu_fold_of_a_band_says_what_to_do(tmp_path):
    r = run_cli("capture", *YNAO, "--listen", "127.0.0.1:7000+x", "--duration", "1")
    assert r.returncode == 2 and "HOST:PORT+N" in r.stderr
    r = run_cli("capture", *YNAO, "--listen", "127.0.0.1:7000,127.0.0.1:7000", "--duration", "1")
    assert r.returncode == 2 and "twice" in r.stderr
    r = run_cli("fold", "--listen", "127.0.0.1:7000+1", *YNAO, *FOLD, "--device", "gpu",
                "--duration", "1", "-o", str(tmp_path / "x.fits"))  # fmt: skip
    assert r.returncode == 2 and "--device cpu" in r.stderr, r.stderr


def test_a_band_in_three_streams_is_recorded_one_dada_file_set_per_subband(tmp_path):
    """`record --listen HOST:PORT+2 --layout dada`: a file run per stream, each
    header its own subband's (FREQ, BW, NCHAN as the simulator's subband files say),
    the samples equal to the simulator's subband files of the same band."""
    from voltstream.io.dada import open_dada

    sim = ("simulate", *YNAO, "--subbands", "3", "--duration", "0.05", "--seed", "5")
    r = run_cli(*sim, "--output", str(tmp_path / "f.dada"))
    assert r.returncode == 0, r.stderr
    ports = free_ports(3)
    (tmp_path / "d").mkdir()
    # --flush-age 5: each subband is sent at 1/60 of YNAO's own rate, so a chunk sized
    # for that rate (flush.py) takes longer than the default age to fill; its later
    # packets would come after it was written (counted late).
    rec = Listening("record", *YNAO, "--listen", f"127.0.0.1:{ports[0]}+2", "--duration",
                    "60", "--idle-timeout", "2", "--dirs", str(tmp_path / "d"), "--scan",
                    "band", "--layout", "dada", "--flush-age", "5",
                    "--report", str(tmp_path / "r.json"))  # fmt: skip
    r = run_cli(*sim, "--dest", ",".join(f"127.0.0.1:{p}" for p in ports), "--rate", "0.2")
    assert r.returncode == 0, r.stderr
    rc, out, err = rec.wait()
    assert rc == 0, out + err
    for k in range(3):
        files = sorted((tmp_path / "d" / "band").glob(f"band_s{k:02}_*.dada"))
        assert files, list((tmp_path / "d" / "band").iterdir())
        want = open_dada(tmp_path / f"f.sb{k}.dada")
        got = [open_dada(f) for f in files]
        assert {g.obs.freq_mhz for g in got} == {want.obs.freq_mhz}
        assert {(g.obs.nchan, g.obs.bw_mhz) for g in got} == {(want.obs.nchan, want.obs.bw_mhz)}
        samples = np.concatenate([g.read_raw(0, g.nsamp) for g in got])
        np.testing.assert_array_equal(samples, want.read_raw(0, want.nsamp))


def test_a_silent_stream_of_a_band_holds_nothing_and_is_counted(tmp_path):
    """Three addresses, the sender feeds two: the band's blocks go out without the
    silent stream (absent), the run ends normally, and the silent stream's packets are
    counted in the report (`silent_packets`, and in `lost`)."""
    ports = free_ports(3)
    cap = Listening("capture", *YNAO, "--listen", f"127.0.0.1:{ports[0]}+2", "--duration",
                    "60", "--idle-timeout", "2", "--report", str(tmp_path / "r.json"))  # fmt: skip
    dest = ",".join(f"127.0.0.1:{p}" for p in ports[:2])
    r = run_cli("simulate", *YNAO, "--subbands", "2", "--duration", "0.3", "--dest", dest,
                "--rate", "0.2")  # fmt: skip
    assert r.returncode == 0, r.stderr
    rc, out, err = cap.wait()
    report = json.loads((tmp_path / "r.json").read_text())
    per = [s["received"] for s in report["engine"]["streams"]]
    assert per[0] == per[1] == 18750 and per[2] == 0, per
    silent = report["silent_packets"]
    assert silent[0] == silent[1] == 0 and silent[2] >= 18750, silent
    assert report["late_chunk_packets"] == 0
    assert report["lost"] >= silent[2] and report["engine"]["totals"]["dropped"] == 0
    assert rc in (0, 1), out + err


def test_the_chunk_layout_of_a_band_puts_each_subband_in_its_channels():
    """The GPU fold reads a band's chunk as captured, [stream][packet][payload]: its
    layout (a block of 32 channels per stream, `cpb`/`s_cb`) decodes, by the layout's
    formula (tests/packed_ref.py), to the band's samples, subband k in channels 32k..."""
    from packed_ref import decode_ref
    from voltstream.formats import make_format
    from voltstream.sim.packetize import YNAO_HEADER_LEN, packetize_ynao

    ppc, nsub = 4, 3
    fmt = make_format("ynao").in_subbands(nsub)
    rng = np.random.default_rng(4)
    spp = fmt.samples_per_packet
    band = rng.integers(-128, 128, (ppc * spp, 32 * nsub, 2, 2), dtype=np.int8)
    chunk = np.concatenate(
        [
            packetize_ynao(
                band[:, 32 * k : 32 * (k + 1)].astype(np.float32).view(np.complex64)[..., 0]
            )[:, YNAO_HEADER_LEN:].reshape(-1)
            for k in range(nsub)
        ]
    )
    layout = fmt.chunk_layout(ppc)
    got = decode_ref(chunk, layout, ppc * spp).reshape(ppc * spp, 32 * nsub, 2)
    want = band[..., 0] + 1j * band[..., 1].astype(np.float64)
    np.testing.assert_array_equal(got, want)
    assert layout.nbytes(ppc * spp) == chunk.size
