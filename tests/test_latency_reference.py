"""The low-latency layout and NumPy reference (no GPU): sums, the test pattern, the
dtypes against docs/research/low-latency-contract.md, and latency.cu's constants
against the Python ones, so the three sides cannot drift apart silently."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from voltstream.dsp.cuda import KERNEL_DIR, kernel_sources
from voltstream.latency import reference as ref


def test_frame_sums_exact():
    full = np.full(65536, 255, np.uint8)
    assert ref.frame_sums(full) == (255 * 65536, 255 * 255 * 65536)
    assert ref.frame_sums(np.zeros(0, np.uint8)) == (0, 0)
    rng = np.random.default_rng(1)
    b = rng.integers(0, 256, 8193, dtype=np.uint8)
    vals = [int(x) for x in b]
    assert ref.frame_sums(b) == (sum(vals), sum(v * v for v in vals))


def test_frame_sums_reads_bytes_of_any_dtype():
    words = np.array([0x0102030405060708], dtype="<u8")
    assert ref.frame_sums(words) == (36, sum(i * i for i in range(1, 9)))


@pytest.mark.parametrize("nbytes", [0, 1, 7, 8, 9, 1000, 8192])
def test_pattern_payload(nbytes):
    frame = 0xDEADBEEF12345678
    p = ref.pattern_payload(frame, nbytes)
    assert p.dtype == np.uint8 and p.size == nbytes
    for j in range(-(-nbytes // 8)):
        word = frame ^ ((j * ref.PATTERN_MULTIPLIER) % 2**64)
        expect = word.to_bytes(8, "little")[: min(8, nbytes - 8 * j)]
        assert p[8 * j : 8 * j + 8].tobytes() == expect


def test_pattern_frames_differ():
    assert not np.array_equal(ref.pattern_payload(1, 64), ref.pattern_payload(17, 64))


@pytest.mark.parametrize(
    "frame_bytes,cap,stride",
    [(1, 128, 256), (128, 128, 256), (129, 256, 384), (1024, 1024, 1152), (8192, 8192, 8320)],
)
def test_slot_geometry(frame_bytes, cap, stride):
    assert ref.payload_cap(frame_bytes) == cap
    assert ref.slot_stride(frame_bytes) == stride
    assert stride % 128 == 0


@pytest.mark.parametrize("bad", [0, -1, 2**32])
def test_slot_geometry_rejects(bad):
    with pytest.raises(ValueError, match="frame_bytes"):
        ref.payload_cap(bad)


def offsets(dtype: np.dtype) -> dict[str, int]:
    return {name: dtype.fields[name][1] for name in dtype.names}


# Each 64-byte record of the contract: its fields' offsets, and the types of some.
CONTRACT = {
    "trailer": (
        ref.TRAILER_DTYPE,
        {"frame": 0, "bytes": 8, "kind": 12, "t_send_ns": 16, "reserved": 24, "seq": 56},
        {"seq": "<u8", "bytes": "<u4"},
    ),
    "ack": (
        ref.ACK_DTYPE,
        {
            "seq": 0,
            "sum": 8,
            "sumsq": 16,
            "status": 24,
            "torn": 28,
            "t_gpu_ns": 32,
            "reserved": 40,
        },
        {"status": "<u4", "torn": "<u4"},
    ),
    "accum": (
        ref.ACCUM_DTYPE,
        {
            "sum": 0,
            "sumsq": 8,
            "done_blocks": 16,
            "torn": 20,
            "reserved": 24,
            "relay_seq": 32,
            "relay_frame": 40,
            "relay_bytes": 48,
            "relay_kind": 52,
            "relay_fields_seq": 56,
        },
        {},
    ),
    "control": (ref.CONTROL_DTYPE, {"abort": 0}, {}),
}


@pytest.mark.parametrize("name", CONTRACT)
def test_dtype_matches_contract(name):
    d, want, types = CONTRACT[name]
    assert d.itemsize == 64
    assert offsets(d) == want
    assert {f: d[f] for f in types} == {f: np.dtype(t) for f, t in types.items()}


def test_trailer_seq_offset_is_its_last_8_bytes():
    assert ref.TRAILER_SEQ_OFFSET == 56 == ref.TRAILER_DTYPE.itemsize - 8


def kernel_text() -> str:
    return (KERNEL_DIR / "latency.cu").read_text()


def test_latency_cu_is_compiled_by_check_kernels():
    assert KERNEL_DIR / "latency.cu" in kernel_sources()
    text = kernel_text()
    for name in ("latency_sum_frame", "latency_persistent"):
        bounds = r"(__launch_bounds__\(\d+\)\s+)?"
        assert re.search(rf'extern "C" __global__ void {bounds}{name}\(', text), name


def test_latency_cu_constants_match_python():
    defines = {
        m.group(1): int(m.group(2), 0)
        for m in re.finditer(r"^#define (\w+) (0x[0-9A-Fa-f]+|\d+)(?:ULL)?$", kernel_text(), re.M)
    }
    expect = {
        "TRAILER_FRAME": 0,
        "TRAILER_BYTES": 8,
        "TRAILER_KIND": 12,
        "TRAILER_T_SEND": 16,
        "TRAILER_SEQ": ref.TRAILER_SEQ_OFFSET,
        "TRAILER_SIZE": ref.TRAILER_BYTES,
        "ACK_SEQ": ref.ACK_DTYPE.fields["seq"][1],
        "ACK_SUM": ref.ACK_DTYPE.fields["sum"][1],
        "ACK_SUMSQ": ref.ACK_DTYPE.fields["sumsq"][1],
        "ACK_STATUS": ref.ACK_DTYPE.fields["status"][1],
        "ACK_TORN": ref.ACK_DTYPE.fields["torn"][1],
        "ACK_T_GPU": ref.ACK_DTYPE.fields["t_gpu_ns"][1],
        "ACK_SIZE": ref.ACK_BYTES,
        "KIND_WHOLE": ref.KIND_WHOLE,
        "KIND_INCOMPLETE": ref.KIND_INCOMPLETE,
        "KIND_STOP": ref.KIND_STOP,
        "STATUS_OK": ref.STATUS_OK,
        "STATUS_SKIPPED": ref.STATUS_SKIPPED,
        "STATUS_STOPPED": ref.STATUS_STOPPED,
        "STATUS_ABORTED": ref.STATUS_ABORTED,
        "PATTERN_MULTIPLIER": ref.PATTERN_MULTIPLIER,
        "PREFETCH": ref.PREFETCH,
    }
    assert {k: defines.get(k) for k in expect} == expect


@pytest.mark.parametrize(
    "frame_bytes,blocks", [(1024, 1), (8192, 4), (65536, 32), (1 << 20, 32), (1, 1)]
)
def test_launch_shape(frame_bytes, blocks):
    assert ref.launch_shape(frame_bytes) == (blocks, 128)


def test_gpu_modules_import_without_cupy():
    # A fresh interpreter: the GPU modules must import (CuPy only when used).
    code = (
        "import sys; import voltstream.latency.gpu, voltstream.latency.cupy_driver; "
        "assert 'cupy' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
