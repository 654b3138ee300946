"""The low-latency kernels (dsp/kernels/latency.cu) in every hand-off mode, driven from
Python by voltstream.latency.cupy_driver (no Rust): sums against the NumPy reference,
skipped and stop frames, abort and idle limit, stale acks, and the ordering test.

Marked ``gpu``: CI deselects them; ``make gpu-test`` runs them on the GPU machine.
Without CuPy they skip. Every wait has a timeout and every driver is closed in a
``with`` block (abort, then wait), so a failing test never leaves a kernel spinning.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest

from voltstream.latency.reference import (
    KIND_INCOMPLETE,
    KIND_WHOLE,
    STATUS_ABORTED,
    STATUS_OK,
    STATUS_SKIPPED,
    frame_sums,
    pattern_payload,
)

pytestmark = pytest.mark.gpu

MODES = ("copy", "persistent", "persistent-flag", "zerocopy")
PERSISTENT = ("persistent", "persistent-flag", "zerocopy")
# The modes whose frames must be exact. "persistent" (frame and flag in one async
# copy) is not one: its kernel can see the trailer's seq before the payload has
# landed (torn frames, measured by bench/latency.py and seen here at 64 KiB), so it
# stays a measured option only; the protocol tests (stop, abort, idle) still cover it.
EXACT = ("copy", "persistent-flag", "zerocopy")
EXACT_PERSISTENT = ("persistent-flag", "zerocopy")
NSLOTS = 16


@pytest.fixture(scope="module")
def cp():
    cupy = pytest.importorskip("cupy")
    assert cupy.cuda.runtime.getDeviceCount() > 0, "no CUDA device visible to CuPy"
    return cupy


@pytest.fixture(scope="module")
def cd(cp):
    from voltstream.latency import cupy_driver

    return cupy_driver


def assert_acks_match(result, frames: int):
    assert len(result.seq) == frames
    assert list(result.seq) == list(range(1, frames + 1))
    assert np.all(result.status[result.kind == KIND_WHOLE] == STATUS_OK)
    assert result.mismatches == 0, (
        f"{result.mismatches} of {frames} frames with wrong sums in mode {result.mode}"
    )


@pytest.mark.parametrize("blocks", [1, 4, 16])
@pytest.mark.parametrize("frame_bytes", [1024, 8192, 65536])
@pytest.mark.parametrize("mode", EXACT)
def test_sums_equal_reference(cd, mode, frame_bytes, blocks):
    frames = NSLOTS + 8  # every slot and accumulator entry used, some twice
    with cd.CupyDriver(mode, frame_bytes, nslots=NSLOTS, blocks=blocks, threads=128) as drv:
        result = drv.run(cd.random_frames(frames, frame_bytes, seed=frame_bytes + blocks))
    assert_acks_match(result, frames)


@pytest.mark.parametrize("blocks", [4, 16])
@pytest.mark.parametrize("frame_bytes", [8192, 65536])
@pytest.mark.parametrize("mode", EXACT_PERSISTENT)
def test_relayed_trailer_sums_equal_reference(cd, mode, frame_bytes, blocks):
    # LATENCY_RELAY: block 0 alone polls the trailer and relays it to the others
    # through the accumulator entries; incomplete frames between whole ones too.
    rng = np.random.default_rng(frame_bytes + blocks)
    frames = [
        (i, rng.integers(0, 256, frame_bytes, dtype=np.uint8),
         KIND_INCOMPLETE if i % 5 == 2 else KIND_WHOLE)
        for i in range(2 * NSLOTS + 3)
    ]  # fmt: skip
    with cd.CupyDriver(mode, frame_bytes, nslots=NSLOTS, blocks=blocks, relay=True) as drv:
        result = drv.run(frames)
    skipped = result.kind == KIND_INCOMPLETE
    assert np.all(result.status[skipped] == STATUS_SKIPPED)
    assert_acks_match(result, len(frames))


@pytest.mark.parametrize("frame_bytes", [1, 15, 1000, 8195])
@pytest.mark.parametrize("mode", EXACT)
def test_sums_of_odd_sizes_and_short_payloads(cd, mode, frame_bytes):
    # Sizes that are not multiples of 16 take the byte tail; payloads shorter than
    # frame_bytes (the trailer's bytes field) too.
    rng = np.random.default_rng(frame_bytes)
    sizes = [frame_bytes, max(1, frame_bytes // 3), frame_bytes]
    frames = [
        (i, rng.integers(0, 256, n, dtype=np.uint8), KIND_WHOLE) for i, n in enumerate(sizes * 7)
    ]
    with cd.CupyDriver(mode, frame_bytes, nslots=NSLOTS, blocks=3, threads=64) as drv:
        result = drv.run(frames)
    assert_acks_match(result, len(frames))


@pytest.mark.parametrize("mode", EXACT)
def test_incomplete_frames_are_skipped_never_summed(cd, mode):
    frame_bytes = 8192
    rng = np.random.default_rng(5)
    frames = []
    for i in range(40):
        kind = KIND_INCOMPLETE if i % 3 == 1 else KIND_WHOLE
        # An incomplete frame still carries bytes (what arrived): never to be summed.
        frames.append((i, rng.integers(1, 256, frame_bytes, dtype=np.uint8), kind))
    with cd.CupyDriver(mode, frame_bytes, nslots=NSLOTS, blocks=4) as drv:
        result = drv.run(frames)
    skipped = result.kind == KIND_INCOMPLETE
    assert np.count_nonzero(skipped) == 13
    assert np.all(result.status[skipped] == STATUS_SKIPPED)
    assert np.all(result.sum[skipped] == 0) and np.all(result.sumsq[skipped] == 0)
    assert_acks_match(result, len(frames))  # whole frames around them still exact


@pytest.mark.parametrize("mode", PERSISTENT)
def test_stop_returns_within_one_second(cd, mode):
    with cd.CupyDriver(mode, 8192, nslots=NSLOTS, blocks=4) as drv:
        drv.run(cd.random_frames(5, 8192, seed=1), stop=False)
        assert drv.gpu.running
        t0 = time.monotonic()
        ack = drv.stop(timeout_s=1.0)  # raises unless acked 3 and returned within 1 s
        assert ack is not None and ack.seq == 6
        assert time.monotonic() - t0 < 1.0
        assert not drv.gpu.running


@pytest.mark.parametrize("mode", PERSISTENT)
def test_abort_returns_idle_kernel_within_one_second(cd, mode):
    with cd.CupyDriver(mode, 8192, nslots=NSLOTS, blocks=4) as drv:
        drv.run(cd.random_frames(3, 8192, seed=2), stop=False)
        time.sleep(0.05)  # idle: waiting for seq 4
        assert drv.gpu.running
        assert drv.abort(timeout_s=1.0), "persistent kernel still running 1 s after abort"
        ack = drv.wait_ack(4, timeout_s=0.1)
        assert ack.status == STATUS_ABORTED


@pytest.mark.parametrize("mode", PERSISTENT)
def test_idle_limit_returns(cd, mode):
    limit_s = 0.2
    t0 = time.monotonic()
    with cd.CupyDriver(
        mode, 1024, nslots=NSLOTS, blocks=2, idle_limit_ns=int(limit_s * 1e9)
    ) as drv:
        assert drv.gpu.wait_stopped(limit_s + 1.0), "idle limit did not stop the kernel"
        elapsed = time.monotonic() - t0
        ack = drv.wait_ack(1, timeout_s=0.1)
        assert ack.status == STATUS_ABORTED
    assert elapsed >= 0.9 * limit_s


@pytest.mark.parametrize("mode", EXACT)
def test_stale_ack_is_never_taken_as_new(cd, mode):
    frame_bytes = 1024
    with cd.CupyDriver(mode, frame_bytes, nslots=NSLOTS, blocks=2) as drv:
        first = drv.run(cd.random_frames(NSLOTS, frame_bytes, seed=3), stop=False)
        assert_acks_match(first, NSLOTS)
        # Entry (NSLOTS + 1) % NSLOTS = 1 holds seq 1's ack; the slot, seq 1's trailer.
        with pytest.raises(cd.AckTimeout):
            drv.wait_ack(NSLOTS + 1, timeout_s=0.05)
        payload = pattern_payload(99, frame_bytes)
        ack = drv.send(99, payload)
        assert ack.seq == NSLOTS + 1 and ack.status == STATUS_OK
        assert (ack.sum, ack.sumsq) == frame_sums(payload)


@pytest.mark.parametrize("mode", EXACT)
def test_pattern_check_counts_wrong_words(cd, mode):
    # Negative control for the ordering test: the torn counter does see bad words.
    frame_bytes = 8192 + 12  # a partial last word too
    payload = pattern_payload(7, frame_bytes)
    bad = payload.copy()
    bad[8 * 3] ^= 1  # word 3
    bad[8 * 500 + 7] ^= 0x80  # word 500
    bad[-1] ^= 1  # the partial last word
    with cd.CupyDriver(mode, frame_bytes, nslots=NSLOTS, blocks=4, check_pattern=True) as drv:
        good = drv.send(7, payload)
        torn = drv.send(7, bad)
        other = drv.send(8, payload)  # right words of the wrong frame: all torn
    assert good.torn == 0
    assert torn.torn == 3
    assert other.torn == -(-frame_bytes // 8)


# The modes the product offers. "persistent" (frame and flag in one async copy) is
# left out on purpose: bench/latency.py saw it tear 64 KiB frames (the kernel saw the
# trailer's seq before the payload had landed; docs/latency.md), which is why the
# product hands frames over with persistent-flag or zerocopy.
@pytest.mark.parametrize(
    ("mode", "frame_bytes", "relay"),
    [
        ("persistent-flag", 8192, False),
        ("persistent-flag", 65536, False),
        ("zerocopy", 8192, False),
        ("zerocopy", 8192, True),
        ("zerocopy", 65536, True),
    ],
)
def test_ordering_pattern_frames_never_torn(cd, mode, frame_bytes, relay):
    frames = 20_000 if frame_bytes <= 8192 else 5_000
    blocks = max(1, frame_bytes // 2048)
    with cd.CupyDriver(
        mode, frame_bytes, nslots=NSLOTS, blocks=blocks, check_pattern=True, relay=relay
    ) as drv:
        result = drv.run(cd.pattern_frames(frames, frame_bytes))
    torn_frames = int(np.count_nonzero(result.torn))
    torn_words = int(result.torn.sum())
    p50, p99 = np.percentile(result.rtt_ns, [50, 99]) / 1e3
    print(
        f"\nordering {mode} relay={relay}: {frames} frames of {frame_bytes} B, "
        f"torn frames {torn_frames}, "
        f"torn words {torn_words}, round trip p50 {p50:.1f} us p99 {p99:.1f} us"
    )
    assert torn_frames == 0 and torn_words == 0
    assert_acks_match(result, frames)


def test_driver_api_launches_cupy_handles(cd, cp):
    # What Rust will do: cuCtxSetCurrent(CuPy's context), cuLaunchKernel(CuPy's
    # CUfunction) on the copy stream, then read the ack.
    frame_bytes = 4096
    payload = np.random.default_rng(4).integers(0, 256, frame_bytes, dtype=np.uint8)
    with cd.CupyDriver("copy", frame_bytes, nslots=NSLOTS, blocks=2) as drv:
        lib, gpu = drv.libcuda, drv.gpu
        assert gpu.context_handle != 0 and lib.current_context() == gpu.context_handle
        lib.set_current_context(gpu.context_handle)
        seq = 1
        dev = gpu.device_slots_ptr + (seq % NSLOTS) * gpu.slot_stride
        gpu.slots[(seq % NSLOTS) * gpu.slot_stride :][:frame_bytes].set(payload)
        cp.cuda.Stream.null.synchronize()
        u64, u32 = ctypes.c_uint64, ctypes.c_uint32
        params = [
            u64(dev),
            u32(frame_bytes),
            u64(seq),
            u64(0),
            u32(KIND_WHOLE),
            u64(drv.acks.device_ptr),
            u32(NSLOTS),
            u64(gpu.accum_ptr),
            u32(0),
        ]
        lib.launch(gpu.sum_frame_function_handle, 2, 128, gpu.copy_stream_ptr, params)
        ack = drv.wait_ack(seq, timeout_s=2.0)  # the driver's seq-equality wait
    assert ack.status == STATUS_OK
    assert (ack.sum, ack.sumsq) == frame_sums(payload)


def test_probe_reports_handles(cd):
    info = cd.probe()
    print("\nlatency probe:", info)
    assert info["can_map_host_memory"] == 1
    assert info["cupy_context_is_current"]
    assert info["sum_frame_function_handle_nonzero"]
