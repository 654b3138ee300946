"""The latency mode end to end on the GPU: the Rust hot loop (`_core.LatencySession`)
receiving `_core.FrameSender` frames over loopback, handing them to the CuPy kernels
in each mode the product offers, every frame's sums checked by the host and every
payload word by the kernel (pattern). Incomplete frames must never be processed as
whole; the persistent kernel must have returned when the run is closed.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from voltstream.latency.run import LatencyRun, LatencySettings
from voltstream.latency.stats import STATUS_OK, records_array, stage_stats

pytestmark = pytest.mark.gpu

STATUS_SKIPPED = 2


def run_frames(mode: str, frame_bytes: int, frames: int, payload=8192, skip=None, **kw):
    from voltstream import _core

    payload = min(frame_bytes, payload)
    ppf = frame_bytes // payload
    settings = LatencySettings(
        mode=mode, packets_per_frame=ppf, check_pattern=True, records=frames + 16,
        timeout_us=2000, **kw,
    )  # fmt: skip
    with LatencyRun("127.0.0.1:0", settings, format_kwargs={"payload_len": payload}) as run:
        run.start(frames=frames, idle_s=2.0)
        sent: dict = {}

        def send() -> None:
            s = _core.FrameSender(run.local_addr, ppf, payload)
            sent.update(s.send_frames(0, frames, 2000.0, skip=skip))

        t = threading.Thread(target=send)
        t.start()
        t.join(60)
        report = run.wait(30.0)
        recs = records_array(run.records())
        gpu = run.gpu
    # close() has run: the kernel returned (else close logs and keeps the memory).
    assert run.gpu is None and gpu is not None
    return report, recs, sent


@pytest.mark.parametrize("frame_bytes", [1024, 8192, 65536])
@pytest.mark.parametrize("mode", ["copy", "persistent-flag", "zerocopy"])
def test_every_frame_reaches_the_gpu_whole_and_exact(mode, frame_bytes):
    frames = 3000
    report, recs, sent = run_frames(mode, frame_bytes, frames)
    assert sent["frames"] == frames
    assert report["frames_complete"] == frames, report
    assert report["frames_acked"] == frames
    assert report["sum_mismatch"] == 0 and report["torn"] == 0, report
    assert report["frames_incomplete"] == report["frames_gpu_busy"] == 0
    assert report["end"] == "frames"
    whole = recs[recs["status"] == STATUS_OK]
    assert len(whole) == frames and np.all(whole["ok"] == 1)
    assert np.array_equal(np.sort(whole["frame"]), np.arange(frames))
    stages = stage_stats(recs, warmup=100)
    print(f"\n{mode} {frame_bytes} B: {stages['received_to_ack']}")
    assert stages["received_to_ack"]["frames"] == frames - 100


@pytest.mark.parametrize("mode", ["copy", "persistent-flag", "zerocopy"])
def test_incomplete_frames_are_flagged_never_processed(mode):
    # Packet 3 of every 10th frame is never sent: those frames close incomplete
    # (on the next frame's packets or the deadline), the GPU skips them.
    frames = 1000
    report, recs, _ = run_frames(mode, 8 * 1024, frames, payload=1024, skip=(10, 3))
    assert report["frames_incomplete"] == frames // 10, report
    assert report["missing"] == frames // 10
    assert report["frames_complete"] == frames - frames // 10
    assert report["sum_mismatch"] == 0 and report["torn"] == 0
    skipped = recs[recs["status"] == STATUS_SKIPPED]
    assert len(skipped) == frames // 10
    assert np.all(skipped["frame"] % 10 == 0)
    assert not np.any(recs[recs["status"] == STATUS_OK]["frame"] % 10 == 0)


def test_relay_off_and_plain_loads_stay_exact():
    report, _, _ = run_frames("zerocopy", 65536, 1000, relay=False, payload_load="plain", blocks=8)
    assert report["frames_acked"] == 1000
    assert report["sum_mismatch"] == 0 and report["torn"] == 0
