"""VDIF as observatories send it, with faults injected, over loopback (issue 11, item
1): 1, 2 and 4 threads, 2-bit real and 8-bit complex; frames of another station and of
another thread, invalid frames, a lost, a repeated and a cut frame (placed by a
voltstream.testing.FaultPlan). Every counter is
exact, per stream, and no frame of another station or thread is ever placed."""

from __future__ import annotations

import numpy as np
import pytest

from loopback import free_bind, sender
from voltstream.capture.config import CaptureSettings
from voltstream.capture.run import run_capture
from voltstream.formats import StreamFormat, make_format
from voltstream.sim.packetize import packetize_vdif
from voltstream.testing import Drop, Duplicate, FaultPlan, Foreign, Garbage, Truncate

FPS = 1000  # frames per second per thread, as the senders stamp them


def stream(threads, complex_data, nbit, station, nframes, seed):
    """Frames of ``threads`` (time-major), payload 800 bytes, and their samples."""
    rng = np.random.default_rng(seed)
    nchan, ndim = 4, 2 if complex_data else 1
    spf = 800 * 8 // (nchan * ndim * nbit)
    shape = (spf * nframes, nchan, len(threads))
    x = rng.integers(-(1 << (nbit - 1)), 1 << (nbit - 1), shape + (ndim,)).astype(np.float32)
    x = x.view(np.complex64)[..., 0] if complex_data else x[..., 0]
    frames = packetize_vdif(x, frames_per_second=FPS, nbit=nbit, complex_data=complex_data,
                            samples_per_frame=spf, start_frame=40, station=station,
                            threads=threads)  # fmt: skip
    return frames


def capture_format(threads, station) -> StreamFormat:
    """A capture of 800-byte frames at FPS per thread, one stream per thread; the
    sample geometry is the complex 8-bit one (counting needs only the frames)."""
    if len(threads) <= 2:
        # 800 bytes of 8-bit complex x 4 channels = 100 samples: 0.1 MHz gives 1000 fps.
        return make_format("vdif", nchan=4, chan_bw_mhz=0.1, vdif_payload=800,
                           npol=len(threads), station=station, vdif_threads=threads)  # fmt: skip
    # More threads than polarisations: beyond the CLI, the Python API takes them.
    return StreamFormat("vdif", 4, len(threads), 100, 800, 0.1, 1420.0, 8, station,
                        tuple(threads))  # fmt: skip


def invalid(frame) -> bytes:
    f = np.frombuffer(frame, dtype=np.uint8).copy()
    f[3] |= 0x80  # word 0 bit 31: the sender says this frame's data are invalid
    return f.tobytes()


@pytest.mark.parametrize(
    "threads,complex_data,nbit",
    [([3], False, 2), ([0, 1], True, 8), ([4, 5], False, 2), ([0, 1, 2, 3], True, 8)],
)
@pytest.mark.parametrize("theirs_first", [False, True])
@pytest.mark.parametrize("given", [True, False])
def test_every_counter_exact_with_faults(threads, complex_data, nbit, theirs_first, given):
    ours_id, theirs_id, n = 0x4142, 0x4B41, 24
    ours = stream(threads, complex_data, nbit, ours_id, n, 1)
    theirs = stream(threads, complex_data, nbit, theirs_id, n, 2)
    nt = len(threads)
    stray = iter(stream([9], complex_data, nbit, ours_id, n // 4, 3))  # our station, thread 9
    lost, repeated, bad, cut = 5 * nt, 7 * nt + nt - 1, 11 * nt, 13 * nt
    # Frames of both stations interleaved; ours is at 2k + 1 when theirs come first.
    mine = [2 * k + theirs_first for k in range(len(ours))]
    both = [f for k in range(len(ours)) for f in (ours[k], theirs[k])[:: 1 - 2 * theirs_first]]
    faults = {mine[lost]: Drop(), mine[repeated]: Duplicate(),
              # Flagged invalid by the sender (counted invalid, not received).
              mine[bad]: Garbage(invalid),
              # Shorter than its header says: malformed.
              mine[cut]: Truncate(-8)}  # fmt: skip
    for k in range(0, len(ours), 4 * nt):
        faults.setdefault(mine[k], Foreign(lambda _: next(stray)))
    sent = FaultPlan(at=faults).apply(both)
    packets = sent.packets
    # Keep our first frame first when we learn the station ("ours first"), and theirs
    # when theirs come first: the station learnt is whichever valid frame came first.
    bind = free_bind()
    settings = CaptureSettings.of(bind, packets_per_chunk=4, nchunks=64, engine="socket")
    report = run_capture(
        capture_format(threads, ours_id if given else None), settings, 20,
        idle_timeout_s=0.5, on_start=sender(bind, packets),
    )  # fmt: skip
    t, per = report.totals, report.engine["streams"]
    locked = ours_id if given or not theirs_first else theirs_id
    assert report.engine["station"] == locked
    strays = len(range(0, len(ours), 4 * nt))
    assert sent.count(Foreign) == strays
    if locked == ours_id:
        assert t["foreign"] == n * nt + strays  # every frame of theirs, and thread 9
        # Less the lost, the cut and the invalid one.
        assert t["received"] == n * nt - 3 == n * nt - len(sent.lost)
        assert (t["invalid"], t["duplicate"], t["malformed"]) == (1, 1, 1)
        assert t["missing"] == 3 and t["late"] == 0 and t["dropped"] == 0
        assert per[bad % nt]["invalid"] == 1 and per[lost % nt]["missing"] >= 1
        assert per[cut % nt]["missing"] >= 1
        assert sum(s["invalid"] for s in per) == 1
    else:  # theirs came first and were taken: ours are foreign, never placed
        assert t["received"] == n * nt and t["missing"] == 0 and t["invalid"] == 0
        # Ours (less the lost and the cut one, plus the repeated one; the invalid one
        # is foreign too), and the stray thread; the cut one is malformed.
        assert t["malformed"] == 1
        assert t["foreign"] == (n * nt - 2) + 1 + strays
    assert report.engine["packets"] == len(packets)


def test_threads_learnt_from_the_stream_before_the_capture_opens(tmp_path):
    """`--vdif-threads auto`: the threads (of our station) are learnt from the first
    frames, ascending, then the capture runs with them; frames of another station on
    the port teach nothing."""
    import json
    import subprocess
    import sys
    import threading
    import time

    from loopback import send

    bind = free_bind()
    ours = stream([7, 2], True, 8, 0x4142, 4000, 5)
    theirs = stream([9], True, 8, 0x4B41, 100, 6)
    packets = [*theirs[:20], *ours]
    report = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "voltstream.cli", "capture", "--listen", bind, "--format",
           "vdif", "--nchan", "4", "--chan-bw", "0.1", "--vdif-payload", "800", "--station",
           "AB", "--vdif-threads", "auto", "--duration", "20", "--idle-timeout", "1",
           "--engine", "socket", "--report", str(report)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()

    def sender_loop():  # the stream is already flowing when the capture starts
        while not stop.is_set():
            send(bind, packets, pace_every=64)
            time.sleep(0.05)

    t = threading.Thread(target=sender_loop, daemon=True)
    time.sleep(0.5)
    t.start()
    err = ""
    for line in proc.stderr:
        err += line
        if "listening on" in line:
            break
    time.sleep(1.0)
    stop.set()
    out, rest = proc.communicate(timeout=60)
    assert proc.returncode == 0, err + rest
    assert "VDIF threads [2, 7] of station 16706" in err
    rep = json.loads(report.read_text())
    assert [s["label"] for s in rep["streams"]] == [
        "VDIF thread 2 (pol 0)",
        "VDIF thread 7 (pol 1)",
    ]
    assert rep["totals"]["received"] > 0 and rep["totals"]["foreign"] > 0
